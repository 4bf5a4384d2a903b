"""EDDIS hybrid SGD: a global step counter and global parameters in the SoftMemoryBox store.

Concept. EDDIS' "Hybrid SGD" (papers.md; its predecessor ShmCaffe and an ETRI
patent) keeps the global parameters and a global step counter in remote shared
memory. Workers never wait for each other: each trains on its own copy of the
parameters and updates the shared ones as it goes, and progress is counted by
the shared counter. The paper does not publish the exact rules, so cxlsim
defines them here:

- Round size R (`round_size`, default W, the number of workers): round k
  collects the contributions with counter tickets k*R .. (k+1)*R - 1. A round
  closes when the global counter reaches its target (k+1)*R; the store then
  applies the round's aggregate to the global parameters, which become
  version k+1. Rounds are applied in order.
- A worker holds parameters of version v (0 at the start). One local step
  computes a gradient on them (GPU time, with the run's straggler
  multipliers), then takes a ticket c with one atomic fetch-and-add on the
  counter. Its contribution belongs to round k = c // R: when rounds filled up
  while it was computing, its late contribution folds into the next open
  round. Its staleness is d = k - v.
- Staleness bound s (`staleness`, default 4): a contribution with d <= s is
  pushed (G bytes, striped over the S = memory_servers * server_cores store
  ranks) and the store rank adds it to round k's accumulator (one reduction of
  its shard, except for the first one). A contribution with d > s is dropped:
  the worker sends a small notice instead, so the round still closes on its
  ticket (the counter is the clock), and the wasted compute is counted.
  Every accepted contribution therefore has staleness <= s.
- After its push, a worker whose ticket shows that newer rounds exist
  (k > v) pulls the global parameters (G bytes from the store ranks, each
  serving its shard's latest applied version, without waiting); its version
  becomes the oldest shard version it got.
- The run ends when `steps` rounds have been applied, i.e. after steps * R
  tickets. Workers take no ticket past that budget.

Parameters: tau is the async mode's; hybrid has R (round_size), s
(staleness) and the counter placement. With R = W and every worker equally
fast, hybrid is synchronous SGD without a barrier (every d = 0 or 1).

Throughput counts the samples of accepted contributions only (dropped ones
are wasted work, reported in `extra`), over the time from 0 to the last
round's apply.

The counter's atomic, costed by placement (`counter`):

- `rdma` (default; the store on memory servers): one RDMA atomic on a
  counter rank on the first memory-server host. The request and the reply
  are 8-byte messages through the fabric, so they queue behind gradient
  traffic on the same links. The counter rank's two per-message overheads
  (the preset's o, receive and send) stand for the target NIC executing the
  atomic: the CPU is not involved in a one-sided atomic, but atomics on one
  address serialise at the target NIC (assumption: 2*o per atomic).
- `cxl-device` (a CXL 3.x pool with device-side atomics, HDM-DB): one pool
  round trip (`CounterCosts.cxl_load_ns`: the unloaded load through one CXL
  switch of the pool preset, 250 ns for cxl3-pool) plus the device's
  serialised execution of same-line atomics (`device_atomic_service_ns`: one
  access to the device's media, the preset's media latency, 90 ns). The
  preset must support hardware coherence (CXL 3.x).
- `cxl-flush-lock` (a pool without multi-host coherence): the counter is
  guarded by a bakery lock built from single-writer flush-mode flags. A
  worker writes and flushes its flag (one pool round trip), reads the W - 1
  other flags (flush + load each, one round trip each, issued one after the
  other: an assumption), then in the critical section, serialised over all
  workers, reads the counter, writes and flushes it, and clears its flag
  (three round trips). Uncontended: (W + 3) * cxl_load_ns.

The CXL placements take their figures from the CXL pool preset `counter_pool`
(default cxl3-pool; cxlsim.fabric.cxl_presets), `CounterCosts.of_pool`, or
from an explicit `counter_costs`. Assumption: the counter's loads cross one
switch level, whatever the number of hosts.

The store's bulk data (pushes and pulls) runs on the network transport to
the memory servers; only the counter's placement varies (a CXL-pool store is
modelled for sync only, pool_store.py). `extra` says how busy the store was
(store_load.py).

>>> from cxlsim.models.training import cluster, core
>>> spec = cluster.from_dict({"interconnect": "ib-hdr", "precision": "amp", "nodes": [{"gpu": "v100", "repeat": 2}]})
>>> r = run_hybrid(spec, core.make_job(spec, "resnet50"), steps=3, seed=1)
>>> r.extra["rounds_applied"], r.extra["accepted"], r.extra["dropped"], max(r.extra["staleness_histogram"]) <= 4
(3, 6, 0, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError, RunError
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.models.training.convergence import discount
from cxlsim.models.training.core import (CHUNK, DEFAULT_TRAINING_CHUNK_BYTES, STORE_OPTIONS, Job, Mode, Option,
                                         TrainingResult, WorkerStats, check_run, describe, integer_at_least,
                                         network_transport, with_store)
from cxlsim.models.training.store_load import StoreLoad, gpu_bound_samples_per_s
from cxlsim.models.training.stragglers import Failure, Slowdown, multipliers
from cxlsim.results import make_rng

__all__ = ["COUNTER_PLACEMENTS", "CounterCosts", "run_hybrid", "DEFAULT_STALENESS", "DEFAULT_COUNTER_POOL",
           "progress_factor", "MODE"]

COUNTER_PLACEMENTS = ("rdma", "cxl-device", "cxl-flush-lock")
"""Where the global step counter lives (see the module docstring)."""
DEFAULT_STALENESS = 4
"""Default staleness bound s, in rounds (an assumption: a bound of a few rounds, SSP-style)."""
DEFAULT_COUNTER_POOL = "cxl3-pool"
"""The CXL pool preset whose figures price the CXL counter placements unless told otherwise."""
COUNTER_COHERENCE = {"cxl-device": Coherence.HW, "cxl-flush-lock": Coherence.FLUSH}
"""What each CXL counter placement needs of its pool: device-side coherent atomics, or flushes only."""
NOTICE_BYTES = 64
"""A dropped contribution's notice, a pull request, and the counter's atomic messages: one cache line."""
ATOMIC_BYTES = 8


@dataclass(frozen=True, kw_only=True)
class CounterCosts:
    """Figures of the CXL counter placements (ns)."""

    cxl_load_ns: float
    """One pool round trip: the unloaded load through one CXL switch."""
    device_atomic_service_ns: float
    """Device-side execution of one same-line atomic (assumption: one access to the device's media)."""

    @classmethod
    def of_pool(cls, preset) -> "CounterCosts":
        """The figures of a CXLPoolPreset: its unloaded load through one switch level, and its media latency."""
        return cls(cxl_load_ns=preset.load_latency_ns(1), device_atomic_service_ns=preset.device.media_latency_ns)

    def __post_init__(self):
        for key in ("cxl_load_ns", "device_atomic_service_ns"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
                raise InputError(f"{key}: expected a time >= 0 ns, got {value!r}")


class _Counter:
    """The global step counter: hands out tickets in service order; `atomic(w)` is a generator."""

    def __init__(self, placement, tr, rank, workers, costs):
        self.placement, self.tr, self.rank, self.W, self.costs = placement, tr, rank, workers, costs
        self.value = 0
        self.free_ns = 0.0  # the serialising unit (device or lock) is free from then on
        self.latency_ns = []

    def _serialised(self, before_ns, service_ns, after_ns):
        env = self.tr.env
        if before_ns > 0:
            yield env.timeout(before_ns)
        start = max(env.now, self.free_ns)
        self.free_ns = start + service_ns
        ticket = self.value
        self.value += 1
        yield env.timeout(self.free_ns - env.now + after_ns)
        return ticket

    def atomic(self, w):
        env, t0 = self.tr.env, self.tr.env.now
        if self.placement == "rdma":
            self.tr.send(w, self.rank, ATOMIC_BYTES, ("faa", w), tag=1)
            ticket = yield self.tr.recv(w, self.rank, tag=1)
        elif self.placement == "cxl-device":
            L = self.costs.cxl_load_ns
            ticket = yield from self._serialised(L / 2, self.costs.device_atomic_service_ns, L / 2)
        else:  # cxl-flush-lock: doorway (own flag + scan of the others) then a 3-round-trip critical section
            L = self.costs.cxl_load_ns
            ticket = yield from self._serialised(self.W * L, 3 * L, 0.0)
        self.latency_ns.append(env.now - t0)
        return ticket

    def serve(self, w):
        """rdma: the counter rank's handler for worker w (the target NIC's atomic unit)."""
        while True:
            got = yield self.tr.recv(self.rank, w, tag=1)
            if got != ("faa", w):
                raise RunError(f"hybrid: counter got {got!r} from worker {w}")
            ticket = self.value
            self.value += 1
            self.tr.send(self.rank, w, ATOMIC_BYTES, ticket, tag=1)


def run_hybrid(spec, job: Job, *, steps: int, round_size: int | None = None, staleness: int = DEFAULT_STALENESS,
               counter: str = "rdma", counter_pool: str | None = None, counter_costs: CounterCosts | None = None,
               seed: int | None = None, cv: float = 0.0, chunk_bytes: int = DEFAULT_TRAINING_CHUNK_BYTES,
               slowdown: Slowdown | None = None, failure: Failure | None = None,
               memory_servers: int | None = None, server_cores: int | None = None) -> TrainingResult:
    """EDDIS hybrid: `steps` rounds of `round_size` tickets each (see the module docstring).

    counter_pool (CXL counters only): the CXL pool preset that prices the counter (default
    DEFAULT_COUNTER_POOL); counter_costs: explicit figures instead. memory_servers, server_cores:
    replace the spec's.
    """
    check_run(spec, job, steps)
    spec = with_store(spec, memory_servers, server_cores)
    W, S = spec.size, spec.memory_servers * spec.server_cores
    R = W if round_size is None else round_size
    if isinstance(R, bool) or not isinstance(R, int) or R < 1:
        raise InputError(f"round_size: expected an integer >= 1 (contributions per round), got {round_size!r}")
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
        raise InputError(f"staleness: expected an integer >= 0 (rounds), got {staleness!r}")
    if counter not in COUNTER_PLACEMENTS:
        raise InputError(f"counter: expected one of {', '.join(COUNTER_PLACEMENTS)}, got {counter!r}")
    costs, counter_pool = _counter_costs(counter, counter_pool, counter_costs)
    shard = -(-job.gradient_bytes // S)
    budget = steps * R
    rng, seed = make_rng(seed)
    # Worker w's i-th local step uses J[i, w]; no worker takes more than `budget` tickets.
    J = multipliers(rng, budget + 1, W, cv, slowdown=slowdown, failure=failure)
    tr = network_transport(spec, S, chunk_bytes, extra_ranks=1 if counter == "rdma" else 0)
    env = tr.env
    ctr = _Counter(counter, tr, W + S, W, costs)
    store = StoreLoad(tr, spec, W)

    # Store ranks: per round, arrivals (contributions and notices) and the applied version per shard.
    arrived = [{} for _ in range(S)]
    first = [{} for _ in range(S)]
    version = [0] * S
    applying = [False] * S
    apply_ns = [[] for _ in range(S)]
    finished = simpy.Event(env)
    state = {"accepted": 0, "dropped": 0, "pulls": 0, "stale": {}}
    intervals = [[] for _ in range(W)]
    busy, comm = [0.0] * W, [0.0] * W
    counts = [[0, 0, 0] for _ in range(W)]  # accepted, dropped, unused (ticket past the budget)

    def apply(k):
        rank = W + k
        applying[k] = True
        while version[k] < steps and arrived[k].get(version[k], 0) == R:
            yield store.reduce(rank, shard)  # parameters -= aggregate of the round (one pass over the shard)
            version[k] += 1
            apply_ns[k].append(env.now)
        applying[k] = False
        if all(v == steps for v in version) and not finished.triggered:
            finished.succeed()

    def handler(k, w):
        rank = W + k
        while True:
            msg = yield tr.recv(rank, w, tag=0)
            store.received(rank)
            kind = msg[0]
            if kind == "pull":
                store.send(rank, w, shard, version[k], tag=2)
                continue
            rnd = msg[1]
            if kind == "push":
                if first[k].get(rnd):
                    yield store.reduce(rank, shard)  # add the contribution into round rnd's accumulator
                first[k][rnd] = True
            arrived[k][rnd] = arrived[k].get(rnd, 0) + 1
            if not applying[k]:
                env.process(apply(k))

    def worker(w):
        v, local = 0, 0
        while True:
            start = env.now
            if not math.isfinite(J[local, w]):
                return  # failed node: the others' tickets close the rounds
            yield env.timeout(float(job.iteration_ns[w] * J[local, w]))
            local += 1
            cend = env.now
            busy[w] += cend - start
            ticket = yield from ctr.atomic(w)
            if ticket >= budget:
                counts[w][2] += 1
                comm[w] += env.now - cend
                intervals[w].append((start, cend, env.now))
                return
            k = ticket // R
            d = k - v
            if d <= staleness:
                sends = [tr.send(w, W + j, shard, ("push", k, w), tag=0) for j in range(S)]
                counts[w][0] += 1
                state["accepted"] += 1
                state["stale"][d] = state["stale"].get(d, 0) + 1
            else:
                sends = [tr.send(w, W + j, NOTICE_BYTES, ("drop", k, w), tag=0) for j in range(S)]
                counts[w][1] += 1
                state["dropped"] += 1
            for sent in sends:  # the gradient buffer is free again once the push has left the NIC
                yield sent
            if k > v:  # newer rounds exist: pull the global parameters (after the push, in order)
                for j in range(S):
                    tr.send(w, W + j, NOTICE_BYTES, ("pull", w), tag=0)
                got = []
                for j in range(S):
                    got.append((yield tr.recv(w, W + j, tag=2)))
                v = min(got)
                state["pulls"] += 1
            comm[w] += env.now - cend
            intervals[w].append((start, cend, env.now))

    for w in range(W):
        env.process(worker(w))
    for k in range(S):
        for w in range(W):
            env.process(handler(k, w))
    if counter == "rdma":
        for w in range(W):
            env.process(ctr.serve(w))
    try:
        env.run(until=finished)
    except RuntimeError as exc:
        if "No scheduled events left" not in str(exc):
            raise
        raise RunError(f"hybrid: stalled at t={env.now:.1f} ns after rounds {version} of {steps} per store rank; "
                       f"tickets handed out {ctr.value} of {steps * R}") from None
    elapsed = env.now
    workers = spec.workers()
    stats = []
    for w in range(W):
        end = intervals[w][-1][2] if intervals[w] else 0.0
        end = min(end, elapsed)
        stats.append(WorkerStats(worker=w, gpu=workers[w].gpu, steps=counts[w][0], samples=counts[w][0] * job.batch,
                                 busy_ns=busy[w], communicating_ns=max(0.0, end - busy[w]), waiting_ns=0.0,
                                 finished_ns=end))
    rounds_ns = tuple(max(apply_ns[k][i] for k in range(S)) for i in range(steps))
    lat = ctr.latency_ns
    return TrainingResult(
        mode="hybrid", model=job.model, precision=job.precision, batch=job.batch, steps=steps,
        samples=state["accepted"] * job.batch, elapsed_ns=elapsed, workers=stats, step_end_ns=rounds_ns,
        params={"round_size": R, "staleness": staleness, "counter": counter, "counter_pool": counter_pool,
                "counter_costs": dict(vars(costs)) if counter != "rdma" else None,
                "memory_servers": spec.memory_servers, "server_cores": spec.server_cores, "shard_bytes": shard,
                "cv": cv, "slowdown": describe(slowdown), "failure": describe(failure), "chunk_bytes": chunk_bytes,
                "interconnect": spec.interconnect, "gradient_dtype": job.gradient_dtype},
        seed=seed, events=env.events,
        extra={"rounds_applied": min(version), "accepted": state["accepted"], "dropped": state["dropped"],
               "unused_after_budget": sum(c[2] for c in counts), "pulls": state["pulls"],
               "staleness_histogram": {int(d): n for d, n in sorted(state["stale"].items())},
               "per_worker_accepted": [c[0] for c in counts], "per_worker_dropped": [c[1] for c in counts],
               "atomics": len(lat), "atomic_mean_ns": sum(lat) / len(lat) if lat else 0.0,
               "atomic_min_ns": min(lat) if lat else 0.0, **store.report(elapsed, state["accepted"] * job.batch,
                                                               gpu_bound_samples_per_s(job, False))},
        intervals=intervals, step_unit="rounds")


def _counter_costs(counter, counter_pool, counter_costs):
    """(CounterCosts or None, the pool preset's name or None) of a counter placement, checked."""
    if counter == "rdma":
        for key, value in (("counter_pool", counter_pool), ("counter_costs", counter_costs)):
            if value is not None:
                raise InputError(f"{key}: applies to the CXL counter placements ({', '.join(COUNTER_COHERENCE)}) "
                                 f"only, got {key}={value!r} with counter='rdma'")
        return None, None
    if counter_costs is not None:
        if counter_pool is not None:
            raise InputError(f"counter_pool: give counter_pool or counter_costs, not both (got {counter_pool!r})")
        return counter_costs, None
    name = DEFAULT_COUNTER_POOL if counter_pool is None else counter_pool
    preset = get_cxl_preset(name)
    preset.check(COUNTER_COHERENCE[counter])
    return CounterCosts.of_pool(preset), name


def progress_factor(result) -> float:
    """Convergence rule: a contribution of round staleness d counts x = d * R / W equivalent sync
    steps of staleness (convergence.py, assumption 2); dropped ones are not in the throughput."""
    W = len(result.workers)
    R = result.params["round_size"]
    hist = result.extra["staleness_histogram"]
    n = sum(hist.values())
    return sum(c * discount(int(d) * R / W) for d, c in hist.items()) / n if n else 0.0


MODE = Mode(
    name="hybrid", run=run_hybrid, convergence=progress_factor,
    summary="EDDIS hybrid SGD: a global step counter and global parameters in the store",
    options=(
        Option(name="round_size", flag="--round-size", parse=integer_at_least(1),
               help="contributions (counter tickets) per round (default: the number of workers)"),
        Option(name="staleness", flag="--staleness", parse=integer_at_least(0),
               help=f"staleness bound s in rounds; staler contributions are dropped (default {DEFAULT_STALENESS})"),
        Option(name="counter", flag="--counter", parse=str, choices=COUNTER_PLACEMENTS,
               help="where the global step counter lives, which prices its atomic (default rdma)"),
        Option(name="counter_pool", flag="--counter-pool", parse=str,
               help=f"with a CXL --counter: the CXL pool preset whose figures price it (default "
                    f"{DEFAULT_COUNTER_POOL})"),
        CHUNK, *STORE_OPTIONS),
)
"""The hybrid mode's record (modes.py lists it)."""
