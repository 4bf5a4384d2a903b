"""Async and hybrid SGD through a shared region of a CXL pool: per-worker push slots, no barrier.

What `cxlsim bench train --mode async|hybrid` runs on the emulated pool
(cxlsim/emulator/training/shared_state.py), as DES workloads on the pool
transport, so cxlsim/train_projection.py can project such a run. The DES's
async and hybrid of asynchronous.py / hybrid.py keep their store on memory
servers over a network; these keep it in the pool, with one worker per host.

The region (one of each per run): a counter line, W flag lines (the counter's
bakery lock in flush mode) and one slot per worker: a sequence line, a meta
line and the G-byte vector. Nobody adds into shared memory: worker w alone
writes slot w, and a reader reads every slot and merges them itself.

- push(w): write the vector and the meta line into slot w (streaming stores),
  flush mode: clflushopt them; fence; store the sequence line (flush mode:
  clflushopt it). The emulator's seqlock also stores the sequence once before
  the data (odd: "being written"); that store is one more line, charged here.
- merge(w): flush mode: clflushopt the W slots (drop stale copies), fence; read
  the W sequence lines and vectors (the loads overlap), then fold the W
  vectors (W - 1 reductions of G bytes at the job's reduction bandwidth).
  A read that races a push is retried in the emulator; the DES does not
  model retries (a push takes microseconds against milliseconds of compute).
- merge with a sharded centre (`centre="sharded"`, an option of this DES design, not run
  by the emulator): the vector is cut into W shards of whole lines; worker w owns shard w
  of a centre region (a sequence line and the shard, per shard), which it alone writes.
  Its merge reads shard w of every slot (with the slots' sequence and meta lines; flush
  mode: clflushopt them first), folds them ((W - 1) x G/W bytes), writes the centre
  shard as a push writes a slot (sequence store odd, streamed data, fence, sequence
  store), then reads the whole centre (W shards, flush mode: clflushopt it first):
  about 2G bytes read and G + G/W written per merge, against W x G read with the
  reader-merged slots. Each shard is whole (single writer, seqlock), but the shards of
  one centre read may be of different merges: the staleness of a sharded parameter
  server whose shards update independently (Downpour SGD, Dean et al., "Large Scale
  Distributed Deep Networks", NIPS 2012); keeping the shards in the pool with one
  owner each is cxlsim's design. A worker that stops (`stop_after`) leaves its shards
  to the next live worker in rank order, which merges them beside its own.
- ticket(w): the call's software cost on the host (`ticket_ns`, measured:
  cxlsim/train_costs.py), then `cxl-device`, one pool round trip on the counter line
  (a load and a store of it), serialised over the workers (a device executes
  same-line atomics in order); `cxl-flush-lock` (flush mode), the bakery lock
  of hybrid.py: write and flush the own flag, read the W - 1 others' (flush,
  fence, load each), then, serialised, read the counter, write and flush it,
  clear the flag.

Schedules (what cxlsim/emulator/training/elastic.py does). `local_ns[w][k]`
is worker w's local step k's time outside the pool and the vector work
(measured or profiled; their median for the steps of a worker beyond them);
`vector_ns` is the step's passes over the parameter vector outside the pool
calls (SGD and elastic updates, the merge's copy and base: cxlsim/train_projection.py
counts them). The workers share a budget of `steps * W` tickets of the global
counter, one per local step, so faster workers do more steps and a run ends
when the budget is spent:

- async (`run_async_on_pool`): a worker takes a ticket (none left: it
  stops), computes, and every `tau` local steps merges the slots (the centre
  is their merge) and pushes its accumulator.
- a worker that failed in the run (`stop_after`) stops after its steps; the
  others take over its tickets, as in the emulator.
- hybrid (`run_hybrid_on_pool`): a worker computes, then takes a ticket (none
  left: that compute is wasted and it stops), waits for its previous exchange,
  and starts the next one on its communication thread (a DES process): the
  hand-off to the thread (`handoff_ns`), push, a load of the counter, merge
  (plus `exchange_vector_ns`); the next step computes meanwhile. Its last
  exchange ends its run. With `thread_shares_cpu` (a rank pinned to one CPU:
  the exchange is copies, folds and vector work, CPU throughout, so it cannot
  overlap the compute on that CPU) the step waits for its exchange instead.

Cross-check (tests/test_train_projection.py): on an uncongested pool a merge of
W slots takes one load plus its lines at the host's bandwidth (flush mode: a
clflushopt per line and a fence first), and a push at least its streamed lines
plus their write-back (2 x path); a sharded merge at W = 1 is a push of the
centre between two such reads (tests/test_pool_shared_sharded.py).

Each run records the median of each operation (`extra["phases_ns"]`: ticket, read and fold of a
merge, push, hybrid's counter load; a sharded merge as one "merge"), which cxlsim/train_phases.py
puts beside the emulated run's measured phases.

Throughput: every worker's local steps x batch over the end of the last step.
No waiting is modelled beyond the pool's own queues and the counter's
serialisation. Units: ns, bytes.
"""
from __future__ import annotations

import math

import numpy as np
import simpy

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.fabric.cxl import CACHE_LINE_BYTES
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.models.training.core import StepLog, TrainingResult, check_run
from cxlsim.models.training.pool_store import POOL_CHUNK_BYTES

__all__ = ["SharedRegion", "run_async_on_pool", "run_hybrid_on_pool", "COUNTERS", "CENTRES"]

LINE = CACHE_LINE_BYTES
COUNTERS = {Coherence.HW: "cxl-device", Coherence.FLUSH: "cxl-flush-lock"}
"""The counter scheme per coherence mode (as the emulator's shared_state.DEFAULT_COUNTER)."""
CENTRES = ("slots", "sharded")
"""Where the centre is merged: by every reader from the W slots, or shard by shard by its owner."""


class SharedRegion:
    """The shared region on a pool transport and its operations (generators), see the module docstring."""

    def __init__(self, preset, workers: int, vector_bytes: int, coherence: Coherence | str, centre: str = "slots",
                 ticket_ns: float = 0.0):
        if centre not in CENTRES:
            raise InputError(f"centre: expected one of {', '.join(CENTRES)}, got {centre!r}")
        if not (ticket_ns >= 0 and math.isfinite(ticket_ns)):
            raise InputError(f"ticket_ns: expected a time >= 0 ns, got {ticket_ns!r}")
        self.W, self.G, self.centre, self.ticket_ns = workers, vector_bytes, centre, ticket_ns
        self.coherence = Coherence.parse(coherence)
        self.flush = self.coherence is Coherence.FLUSH
        self.vector = -(-vector_bytes // LINE) * LINE
        self.slot_stride = 2 * LINE + self.vector
        self.slots = (1 + workers) * LINE
        # the sharded centre: W shards of whole lines (the last one shorter), each after its sequence line
        self.shard = -(-self.vector // (workers * LINE)) * LINE
        self.centre_at = self.slots + workers * self.slot_stride
        self.shard_stride = LINE + self.shard
        total = self.centre_at + (workers * self.shard_stride if centre == "sharded" else 0)
        kw = dict(coherence=self.coherence, pool_bytes=max(total, LINE), chunk_bytes=POOL_CHUNK_BYTES)
        try:
            self.tr = CXLPoolTransport(preset, workers, **kw)
        except InputError as exc:  # more hosts than one switch has ports: a two-level tree, if the preset has one
            if "switch tree" not in str(exc) or preset.max_switch_levels < 2:
                raise
            self.tr = CXLPoolTransport(preset, workers, switch_levels=2, **kw)
        self.env = self.tr.env
        self.counter = simpy.Resource(self.env, capacity=1)
        self.tickets = 0
        self.phase_ns = {}  # phase name: the durations of its operations, ns (`phase_medians`)

    def note(self, phase: str, since: float) -> None:
        """Record an operation of `phase` that began at simulated time `since`."""
        self.phase_ns.setdefault(phase, []).append(self.env.now - since)

    def phase_medians(self) -> dict:
        """{phase: median ns} over the run's operations: ticket, read (a merge's loads), fold (its reduction),
        push, merge (a sharded centre's whole merge), and hybrid's handoff and counter."""
        return {phase: float(np.median(v)) for phase, v in self.phase_ns.items()}

    def _slot(self, w: int) -> int:
        return self.slots + w * self.slot_stride

    def push(self, w: int, version):
        tr, at, since = self.tr, self._slot(w), self.env.now
        yield tr.pool_write(w, at, LINE, ("seq-odd", w), streaming=False)
        yield tr.pool_write(w, at + LINE, LINE + self.vector, ("push", w, version), streaming=True)
        if self.flush:
            yield tr.flush(w, at, 2 * LINE + self.vector)
        yield tr.fence(w)
        yield tr.pool_write(w, at, LINE, ("seq", w, version), streaming=False)
        if self.flush:
            yield tr.flush(w, at, LINE)
        self.note("push", since)

    def merge(self, w: int, reduce_ns_per_byte: float):
        tr, since = self.tr, self.env.now
        if self.flush:
            yield tr.flush(w, self.slots, self.W * self.slot_stride)
            yield tr.fence(w)
        reads = [tr.pool_read(w, self._slot(v), self.slot_stride) for v in range(self.W)]
        yield self.env.all_of(reads)
        self.note("read", since)
        if self.W > 1:
            since = self.env.now
            yield self.env.timeout((self.W - 1) * self.G * reduce_ns_per_byte)
            self.note("fold", since)

    def shard_span(self, s: int) -> tuple[int, int]:
        """Shard s of the vector: (byte offset in it, bytes), whole lines; (.., 0) past the vector's end."""
        lo = min(s * self.shard, self.vector)
        return lo, min(self.shard, self.vector - lo)

    def merge_sharded(self, w: int, owned, reduce_ns_per_byte: float):
        """Generator: worker w merges the centre shards `owned` (its own, and those of stopped workers it
        took over) from every slot, writes them, then reads the whole centre (see the module docstring)."""
        tr, since = self.tr, self.env.now
        for s in owned:
            lo, n = self.shard_span(s)
            if self.flush:
                for v in range(self.W):
                    yield tr.flush(w, self._slot(v), 2 * LINE)
                    if n:
                        yield tr.flush(w, self._slot(v) + 2 * LINE + lo, n)
                yield tr.fence(w)
            reads = [tr.pool_read(w, self._slot(v), 2 * LINE) for v in range(self.W)]
            if n:
                reads += [tr.pool_read(w, self._slot(v) + 2 * LINE + lo, n) for v in range(self.W)]
            yield self.env.all_of(reads)
            if self.W > 1 and n:
                yield self.env.timeout((self.W - 1) * n * self.G / self.vector * reduce_ns_per_byte)
            at = self.centre_at + s * self.shard_stride
            yield tr.pool_write(w, at, LINE, ("centre-seq-odd", s), streaming=False)
            if n:
                yield tr.pool_write(w, at + LINE, n, ("centre", s), streaming=True)
            if self.flush:
                yield tr.flush(w, at, LINE + n)
            yield tr.fence(w)
            yield tr.pool_write(w, at, LINE, ("centre-seq", s), streaming=False)
            if self.flush:
                yield tr.flush(w, at, LINE)
        shards = [(self.centre_at + s * self.shard_stride, LINE + self.shard_span(s)[1]) for s in range(self.W)]
        if self.flush:
            for at, size in shards:
                yield tr.flush(w, at, size)
            yield tr.fence(w)
        yield self.env.all_of([tr.pool_read(w, at, size) for at, size in shards])
        self.note("merge", since)

    def ticket(self, w: int):
        """Generator: take the next ticket (returned) by the coherence mode's counter scheme, after the
        call's software cost (`ticket_ns`)."""
        tr, since = self.tr, self.env.now
        if self.ticket_ns:
            yield self.env.timeout(self.ticket_ns)
        if self.flush:  # bakery: announce, read the others' flags, then the serialised critical section
            yield tr.pool_write(w, (1 + w) * LINE, 8, ("flag", w), streaming=False)
            yield tr.flush(w, (1 + w) * LINE, 8)
            yield tr.fence(w)
            for v in range(self.W):
                if v != w:
                    yield tr.flush(w, (1 + v) * LINE, 8)
                    yield tr.fence(w)
                    yield tr.pool_read(w, (1 + v) * LINE, 8)
        with self.counter.request() as turn:
            yield turn
            yield tr.pool_read(w, 0, 8)
            value = self.tickets
            self.tickets += 1
            yield tr.pool_write(w, 0, 8, self.tickets, streaming=False)
            if self.flush:
                yield tr.flush(w, 0, 8)
                yield tr.fence(w)
        if self.flush:
            yield tr.pool_write(w, (1 + w) * LINE, 8, None, streaming=False)
            yield tr.flush(w, (1 + w) * LINE, 8)
        self.note("ticket", since)
        return value


def _check(spec, job, steps, local_ns):
    check_run(spec, job, steps)
    if len(local_ns) != spec.size or any(len(x) < 1 for x in local_ns):
        raise InputError(f"local_ns: expected {spec.size} non-empty lists of local step times (ns)")
    for x in local_ns:
        for t in x:
            if not (t > 0 and math.isfinite(t)):
                raise InputError(f"local_ns: expected times > 0 ns, got {t!r}")


def _stops(stop_after, workers: int) -> list:
    """Per worker, the local steps it may take (inf unless it fails after `stop_after[w]` of them)."""
    if stop_after is None:
        return [math.inf] * workers
    if len(stop_after) != workers or any(x is not None and (isinstance(x, bool) or not isinstance(x, int) or x < 0)
                                         for x in stop_after):
        raise InputError(f"stop_after: expected {workers} entries, each None or a step count >= 0, got {stop_after!r}")
    return [math.inf if x is None else x for x in stop_after]


class ShardOwners:
    """Who merges which centre shard: shard s its worker s, or, once s has failed, the next live worker in rank order."""

    def __init__(self, workers: int):
        self.failed = [False] * workers

    def owned(self, w: int) -> list[int]:
        W = len(self.failed)
        return [s for s in range(W) if next(v for v in ((s + i) % W for i in range(W)) if not self.failed[v]) == w]


def _merge(region, owners, w, ns_per_byte):
    """Generator: worker w's merge, by the region's centre design."""
    if region.centre == "sharded":
        yield from region.merge_sharded(w, owners.owned(w), ns_per_byte)
    else:
        yield from region.merge(w, ns_per_byte)


def _local(local_ns, w, k) -> float:
    """Worker w's local step k: the given time, or past the given ones their median (not a warm-up step again)."""
    seq = local_ns[w]
    return float(seq[k]) if k < len(seq) else float(np.median(seq))


def _result(mode, spec, job, steps, log, params, seed, events, extra) -> TrainingResult:
    stats = log.stats(spec, job, synchronous=False)
    done = [len(e) for e in log.end]
    elapsed = max(e[-1] for e in log.end if e)
    return TrainingResult(mode=mode, model=job.model, precision=job.precision, batch=job.batch, steps=steps,
                          samples=sum(done) * job.batch, elapsed_ns=elapsed, workers=stats, step_end_ns=(),
                          params={**params, "gradient_dtype": job.gradient_dtype}, seed=seed, events=events,
                          extra={"local_steps": done, **extra}, intervals=log.intervals())


def run_async_on_pool(spec, job, *, steps: int, local_ns, pool, coherence: Coherence | str = Coherence.HW,
                      tau: int = 1, vector_ns: float = 0.0, stop_after=None, centre: str = "slots",
                      ticket_ns: float = 0.0, seed: int | None = None) -> TrainingResult:
    """Async (elastic averaging) through the pool's slots, `steps * W` tickets shared by the workers, a merge
    and a push every `tau` local steps. pool: a CXLPoolPreset; local_ns: per worker, its local step times (ns);
    vector_ns: each step's vector work outside the pool calls (ns); stop_after: per worker None, or the local
    steps after which it fails (the others go on and take over its tickets); centre: "slots" (every merge
    reads the W slots) or "sharded" (each worker merges its shard of the centre: the module docstring);
    ticket_ns: the software cost of one ticket call on the host, ns (before the counter's pool operations)."""
    _check(spec, job, steps, local_ns)
    stops = _stops(stop_after, spec.size)
    if isinstance(tau, bool) or not isinstance(tau, int) or tau < 1:
        raise InputError(f"tau: expected an integer >= 1, got {tau!r}")
    region = SharedRegion(pool, spec.size, job.gradient_bytes, coherence, centre, ticket_ns)
    env, log, budget = region.env, StepLog(spec.size), steps * spec.size
    owners = ShardOwners(spec.size)

    def worker(w):
        ns_per_byte = 1.0 / job.reduce_bw_bytes_per_ns[w]
        k = 0
        while True:
            if k >= stops[w]:
                owners.failed[w] = True
                return
            start = env.now
            ticket = yield from region.ticket(w)
            if ticket >= budget:
                return
            yield env.timeout(_local(local_ns, w, k))
            cend = env.now
            k += 1
            if vector_ns:
                yield env.timeout(vector_ns)
            if k % tau == 0:
                yield from _merge(region, owners, w, ns_per_byte)
                yield from region.push(w, k)
            log.add(w, start, cend, env.now)

    procs = [env.process(worker(w)) for w in range(spec.size)]
    env.run(until=env.all_of(procs))
    return _result("async", spec, job, steps, log,
                   {"tau": tau, "counter": COUNTERS[region.coherence], "store": "CXL pool slots", "centre": centre,
                    "pool": pool.name,
                    "coherence": region.coherence.value, "vector_ns": vector_ns, "ticket_ns": ticket_ns},
                   seed, env.events, {"tickets": min(region.tickets, budget), "phases_ns": region.phase_medians()})


def run_hybrid_on_pool(spec, job, *, steps: int, local_ns, pool, coherence: Coherence | str = Coherence.HW,
                       vector_ns: float = 0.0, exchange_vector_ns: float = 0.0, stop_after=None,
                       handoff_ns: float = 0.0, thread_shares_cpu: bool = False, centre: str = "slots",
                       ticket_ns: float = 0.0, seed: int | None = None) -> TrainingResult:
    """Hybrid through the pool: compute, take a ticket of the `steps * W` budget, start the exchange (push, counter,
    merge) on the worker's communication thread while the next step computes (see the module docstring);
    stop_after as in run_async_on_pool. handoff_ns: handing an exchange to the thread and back, ns.
    thread_shares_cpu: the thread has no CPU of its own (a rank pinned to one CPU), so its exchange, CPU
    work throughout, runs after the step instead of beside the next one. centre, ticket_ns: as in
    run_async_on_pool."""
    _check(spec, job, steps, local_ns)
    stops = _stops(stop_after, spec.size)
    region = SharedRegion(pool, spec.size, job.gradient_bytes, coherence, centre, ticket_ns)
    owners = ShardOwners(spec.size)
    env, log, budget = region.env, StepLog(spec.size), steps * spec.size
    wasted = [0] * spec.size

    def exchange(w, k, ns_per_byte):
        if handoff_ns or exchange_vector_ns:
            yield env.timeout(handoff_ns + exchange_vector_ns)
        yield from region.push(w, k)
        since = env.now
        yield region.tr.pool_read(w, 0, 8)  # the counter's value: the version of the pull
        region.note("counter", since)
        yield from _merge(region, owners, w, ns_per_byte)

    def worker(w):
        ns_per_byte = 1.0 / job.reduce_bw_bytes_per_ns[w]
        k, pending = 0, None
        while region.tickets < budget and k < stops[w]:
            yield region.tr.pool_read(w, 0, 8)  # the loop's check of the counter
            start = env.now
            yield env.timeout(_local(local_ns, w, k))
            cend = env.now
            ticket = yield from region.ticket(w)
            if ticket >= budget:
                wasted[w] += 1
                break
            k += 1
            if pending is not None:
                yield pending
            if vector_ns:
                yield env.timeout(vector_ns)
            pending = env.process(exchange(w, k, ns_per_byte))
            if thread_shares_cpu:
                yield pending
            log.add(w, start, cend, env.now)
        if pending is not None:
            yield pending
        if k >= stops[w]:
            owners.failed[w] = True

    procs = [env.process(worker(w)) for w in range(spec.size)]
    env.run(until=env.all_of(procs))
    return _result("hybrid", spec, job, steps, log,
                   {"round_size": spec.size, "counter": COUNTERS[region.coherence], "store": "CXL pool slots",
                    "centre": centre,
                    "pool": pool.name, "coherence": region.coherence.value, "vector_ns": vector_ns,
                    "exchange_vector_ns": exchange_vector_ns, "handoff_ns": handoff_ns,
                    "thread_shares_cpu": thread_shares_cpu, "ticket_ns": ticket_ns},
                   seed, env.events, {"tickets": min(region.tickets, budget), "wasted_steps": wasted,
                                      "phases_ns": region.phase_medians()})
