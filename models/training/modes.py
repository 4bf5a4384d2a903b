"""Data-parallel training modes as DES processes on the transport: EDDIS sync/async and PyTorch DDP.

(EDDIS hybrid is in `hybrid.py`, Horovod and the flow-level DDP twin in
`horovod.py`; they register themselves in `MODES`.)

Every GPU of a cluster spec is one worker, i.e. one transport rank on its node's
host. A worker's GPU compute is a SimPy timeout (the GPU's own timeline);
everything it sends, receives and reduces goes through the transport on the
rank's communication timeline, so communication can overlap compute (DDP)
while transport costs (LogGP o, g, G, link serialisation, switch queues)
are the fabric's own. GPU-side reductions inside collectives run at the GPU's
memory bandwidth / 3 (profiles.GpuProfile.reduce_bw_bytes_per_ns), not at
the host CPU's reduction speed.

Compute time. Worker w's iteration s takes `job.iteration_ns[w] * J[s, w]`,
where J is drawn once per run from one numpy Generator (`results.make_rng`):
lognormal with mean 1 and coefficient of variation `cv` (sigma^2 = ln(1 + cv^2),
mu = -sigma^2 / 2). cv = 0 gives exactly the profile times. Every mode also
takes `slowdown` (seeded transient slow episodes) and `failure` (a worker
that fails for good at an iteration); see `stragglers.py`. Synchronous modes
stall on a failed worker and say so (RunError); async and hybrid go on. Of an iteration,
the first 1 - `backward_fraction` is the forward pass and the rest is the
backward pass (default 2/3: backward costs about twice the forward); the
optimizer step is inside the profile time and is not modelled separately.

Modes (`MODES`, looked up by name):

- `sync` (EDDIS synchronous SGD over SoftMemoryBox). `spec.memory_servers`
  memory-server hosts, each running `spec.server_cores` aggregation ranks,
  hold the SoftMemoryBox store; the gradient (G bytes) is striped over the
  S = servers * cores ranks in shards of ceil(G / S) bytes. Each step, every
  worker computes, then pushes shard k to server rank k (all S sends at once,
  its NIC serialises them), then waits for all S aggregated shards. Server
  rank k reduces the W pushes of its shard on its CPU in arrival order (W - 1
  reductions at the host's reduction bandwidth), and once all W have arrived
  it sends the aggregate back to every worker (the pull), starting at worker
  k*W//S and wrapping, so servers do not all hit the same worker first.
  This is `aggregation="servers"` (the default). The step therefore waits
  for the slowest worker, and the servers' incast (W pushes into one port) is
  queued by the network. With one server rank, no jitter and a slowest worker
  late enough that the others' pushes are done, one step takes exactly
  t_slowest + T(G) + R(G) + T(G) + (W-1)*G*beta  (analytic.CostModel terms:
  the slow push, its reduction, and W pulls through the server's uplink).
  `aggregation="workers"`: the workers aggregate over the shared region and
  the memory servers only hold memory (one-sided RDMA; no server CPU
  reduction). The gradient is cut into W slices of ceil(G / W) bytes, slice j
  living on store rank j mod S. Each worker writes the W - 1 slices it does
  not aggregate; when all W - 1 copies of slice j are in, worker j reads them
  (one (W - 1)-slice read), reduces them on its GPU and writes the reduced
  slice back, and every other worker reads it. A reduce-scatter plus an
  allgather through the store: the servers' incast is still modelled, their
  CPUs are not the bottleneck. With `pool="cxl3-pool"` (a CXL pool preset)
  the store is a CXL memory pool instead, on the CXL pool transport
  (`pool_store.py`; `coherence` 'hw' or 'flush', `pool_devices`).
- `ddp` (PyTorch DistributedDataParallel baseline). Gradients are bucketed in
  reverse parameter order: a first bucket of `first_bucket_bytes` (1 MiB) and
  then buckets of `bucket_cap_bytes` (25 MiB), as in PyTorch's reducer. A
  bucket is ready when the backward pass has produced its bytes, assuming
  gradients appear at a uniform byte rate over the backward pass. Buckets are
  all-reduced in order, one at a time (one NCCL stream), each with the ring
  all-reduce of models/collectives. With `overlap=True` a bucket starts as soon
  as it is ready and the previous one is done; with `overlap=False` all buckets
  start after the backward pass.
- `async` (EDDIS asynchronous, elastic averaging as in EASGD). Workers never
  wait for each other: each runs local steps back to back, and every `tau`
  local steps it exchanges with the centre variable in the store: it sends its
  parameters (shard k to server rank k), the server rank updates the centre
  (one reduction of the shard) and returns it, and the worker applies the
  elastic update on its GPU (one reduction of G bytes). The run ends when the
  workers together have done `steps * W` local steps (the samples of a sync
  run of `steps` steps); a worker takes a step only while that budget lasts.
  `extra["staleness_updates_histogram"]` counts, per exchange, the centre
  updates by other workers since the worker's previous exchange (for the
  optional convergence model, convergence.py).

Outputs (`TrainingResult`): throughput in samples/s over the whole run (time 0
to the end of the last step), and per worker busy (computing), communicating
and waiting time, which add up to the worker's last step end. A worker's
waiting time in step s is the part of the time after its compute ends that is
due to slower workers: min(tail, max over workers of their compute end -
its own compute end), tail being the time from its compute end to its step
end; the rest of the tail is communicating. Async workers never wait.

`collective` (ddp): 'flow' (the default) costs the same schedule with the
flow-level ring recurrence (`flow.ring_allreduce`), tested equal to the DES
within 2%; 'des' runs every message on the transport.

Not modelled: a CXL-pool store for async and hybrid (sync has one,
`pool_store.py`; hybrid's counter atomic is costed for CXL placements),
elastic recovery after a failed node.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy

from cxlsim.errors import InputError, RunError
from cxlsim.fabric import topology
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import build
from cxlsim.fabric.presets import get_preset
from cxlsim.fabric.transport import Endpoint, NetworkTransport
from cxlsim.models.collectives.base import Group, reduced_vector, vector_of
from cxlsim.models.collectives.reductions import allreduce_ring
from cxlsim.models.training import profiles
from cxlsim.models.training.stragglers import Failure, Slowdown, jitter, multipliers
from cxlsim.results import make_rng

__all__ = ["MIB", "Job", "make_job", "WorkerStats", "TrainingResult", "jitter", "ddp_buckets",
           "run_sync", "run_ddp", "run_async", "MODES", "register", "simulate", "DEFAULT_TRAINING_CHUNK_BYTES",
           "Slowdown", "Failure"]

MIB = 1 << 20
DEFAULT_TRAINING_CHUNK_BYTES = MIB
"""Pipelining unit of training messages (1-100 MiB each): 1 MiB keeps the event count low."""


@dataclass(frozen=True, kw_only=True)
class Job:
    """What every worker trains: the model, batch, precision and the per-worker iteration times."""

    model: str
    """DNN registry name."""
    batch: int
    """Samples per worker per iteration."""
    precision: str
    """'fp32', 'tf32' or 'amp'."""
    gradient_dtype: str
    """'fp32' or 'fp16': the element type of communicated gradients/parameters."""
    gradient_bytes: int
    """Bytes of one full gradient (and of one parameter copy)."""
    iteration_ns: tuple
    """Per worker: one iteration's compute time without jitter, ns."""
    reduce_bw_bytes_per_ns: tuple
    """Per worker: its GPU's reduction speed, bytes/ns."""


def make_job(spec, model: str, *, batch: int | None = None, precision: str | None = None,
             gradient_dtype: str = "fp32", iteration_ns=None) -> Job:
    """The Job for `model` on cluster `spec`.

    precision: default the spec's (which is required there). batch: default the
    model's reference batch. iteration_ns: per-worker measured times (ns; one
    number for all, or one per worker) that replace the profile's, e.g. a
    published single-GPU figure.
    """
    m = profiles.dnn(model)
    precision = spec.precision if precision is None else precision
    if precision not in profiles.PRECISIONS:
        raise InputError(f"precision: expected one of {', '.join(profiles.PRECISIONS)}, got {precision!r}")
    batch = m.reference_batch if batch is None else batch
    workers = spec.workers()
    if iteration_ns is None:
        times = tuple(profiles.iteration_ns(w.gpu, m.key, batch, precision) for w in workers)
    else:
        values = [iteration_ns] * len(workers) if isinstance(iteration_ns, (int, float)) else list(iteration_ns)
        if len(values) != len(workers) or not all(isinstance(v, (int, float)) and v > 0 for v in values):
            raise InputError(f"iteration_ns: expected a time > 0 or {len(workers)} of them, got {iteration_ns!r}")
        times = tuple(float(v) for v in values)
    return Job(model=m.key, batch=batch, precision=precision, gradient_dtype=gradient_dtype,
               gradient_bytes=m.gradient_bytes(gradient_dtype), iteration_ns=times,
               reduce_bw_bytes_per_ns=tuple(profiles.gpu(w.gpu).reduce_bw_bytes_per_ns for w in workers))


@dataclass
class WorkerStats:
    """One worker's time split over the run, ns (busy + communicating + waiting = finished_ns)."""

    worker: int
    gpu: str
    steps: int
    samples: int
    busy_ns: float
    communicating_ns: float
    waiting_ns: float
    finished_ns: float
    """When its last step ended."""


@dataclass
class TrainingResult:
    """The outcome of one simulated run."""

    mode: str
    model: str
    precision: str
    batch: int
    steps: int
    """Steps per worker (sync, ddp) or the run's steps * W budget / W (async)."""
    samples: int
    elapsed_ns: float
    """From the common start to the end of the last step."""
    workers: list
    """WorkerStats per worker."""
    step_end_ns: tuple
    """Sync and DDP: when the last worker finished each step (empty for async)."""
    params: dict
    """The mode's parameters as used (bucket sizes, tau, servers, cv, chunk...)."""
    seed: int
    events: int = 0
    extra: dict = field(default_factory=dict)
    intervals: list = field(default_factory=list, repr=False)
    """Per worker, per step: (start_ns, compute_end_ns, end_ns), for timelines (not in summaries)."""

    @property
    def throughput_samples_per_s(self) -> float:
        return self.samples / self.elapsed_ns * 1e9

    def worker_rows(self) -> list[dict]:
        """One dict per worker (times in ns), for CSV/JSON output."""
        return [vars(w).copy() for w in self.workers]


def ddp_buckets(gradient_bytes: int, first_bucket_bytes: int = MIB, bucket_cap_bytes: int = 25 * MIB) -> list[int]:
    """Bucket sizes in the order DDP reduces them: one first bucket, then full buckets, then the rest."""
    for key, value in (("first_bucket_bytes", first_bucket_bytes), ("bucket_cap_bytes", bucket_cap_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{key}: expected a size >= 1 B, got {value!r}")
    sizes, left = [min(first_bucket_bytes, gradient_bytes)], gradient_bytes - min(first_bucket_bytes, gradient_bytes)
    while left > 0:
        sizes.append(min(bucket_cap_bytes, left))
        left -= sizes[-1]
    return sizes


class _Layout:
    """A placement with a different number of ranks per host (what NetworkTransport reads)."""

    def __init__(self, nodes: int, host_of: list):
        self.nodes, self.host_of, self.size = nodes, list(host_of), len(host_of)


class _GpuEndpoint(Endpoint):
    """An endpoint whose reductions run on the GPU (memory bandwidth / 3), on the rank's comm timeline."""

    __slots__ = ("reduce_ns_per_byte",)

    def __init__(self, transport, rank: int, reduce_bw_bytes_per_ns: float):
        super().__init__(transport, rank)
        self.reduce_ns_per_byte = 1.0 / reduce_bw_bytes_per_ns

    def reduce(self, size_bytes):
        return self.transport.compute(self.rank, size_bytes * self.reduce_ns_per_byte)


def _check_run(spec, job, steps):
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"steps: expected an integer >= 1, got {steps!r}")
    if len(job.iteration_ns) != spec.size:
        raise InputError(f"job: has {len(job.iteration_ns)} workers but the cluster has {spec.size} GPUs")


def _transport(spec, server_ranks: int, chunk_bytes: int, extra_ranks: int = 0) -> NetworkTransport:
    """Workers on their node hosts, then `server_ranks` ranks spread over the memory-server hosts,
    then `extra_ranks` more on the first memory server (e.g. hybrid's counter)."""
    servers = spec.memory_servers if server_ranks or extra_ranks else 0
    hosts = spec.worker_hosts + servers
    host_of = [w.host for w in spec.workers()]
    host_of += [spec.worker_hosts + k // spec.server_cores for k in range(server_ranks)]
    host_of += [spec.worker_hosts] * extra_ranks
    net = build(topology.star(hosts), get_preset(spec.interconnect), Environment())
    return NetworkTransport(net, _Layout(hosts, host_of), chunk_bytes)


def _run(env, procs, failure=None):
    """Run until every process in `procs` is done; a stall is a RunError (naming a failed worker)."""
    try:
        env.run(until=env.all_of(procs))
    except RuntimeError as exc:
        if "No scheduled events left" not in str(exc):
            raise
        stuck = [i for i, p in enumerate(procs) if p.is_alive]
        why = (f"; worker {failure.worker} failed at iteration {failure.step} and this synchronous mode "
               "waits for every worker (no elastic recovery is modelled)") if failure is not None else ""
        raise RunError(f"training run stalled at t={env.now:.1f} ns; workers {stuck[:8]} never finished{why}") from None


class _Steps:
    """Per worker and step: start, compute end and step end (ns)."""

    def __init__(self, workers: int):
        self.start = [[] for _ in range(workers)]
        self.cend = [[] for _ in range(workers)]
        self.end = [[] for _ in range(workers)]

    def add(self, w, start, cend, end):
        self.start[w].append(start)
        self.cend[w].append(cend)
        self.end[w].append(end)

    def intervals(self) -> list:
        """Per worker: [(start, compute end, step end), ...] in ns."""
        return [list(zip(a, b, c)) for a, b, c in zip(self.start, self.cend, self.end)]

    def stats(self, spec, job, synchronous: bool) -> list:
        out = []
        workers = spec.workers()
        steps = max(len(x) for x in self.end)
        cmax = [max(self.cend[w][s] for w in range(len(workers)) if s < len(self.cend[w])) for s in range(steps)]
        for w, worker in enumerate(workers):
            busy = comm = wait = 0.0
            for s in range(len(self.end[w])):
                busy += self.cend[w][s] - self.start[w][s]
                tail = self.end[w][s] - self.cend[w][s]
                waited = min(tail, max(0.0, cmax[s] - self.cend[w][s])) if synchronous else 0.0
                wait += waited
                comm += tail - waited
            n = len(self.end[w])
            out.append(WorkerStats(worker=w, gpu=worker.gpu, steps=n, samples=n * job.batch,
                                   busy_ns=busy, communicating_ns=comm, waiting_ns=wait,
                                   finished_ns=self.end[w][-1] if n else 0.0))
        return out


def _synchronous_result(mode, spec, job, steps, rec, params, seed, events, extra=None) -> TrainingResult:
    """The result of a mode in which every worker does `steps` steps (sync, ddp, horovod)."""
    W = spec.size
    stats = rec.stats(spec, job, synchronous=True)
    step_end = tuple(max(rec.end[w][s] for w in range(W)) for s in range(steps))
    return TrainingResult(
        mode=mode, model=job.model, precision=job.precision, batch=job.batch, steps=steps,
        samples=steps * W * job.batch, elapsed_ns=step_end[-1], workers=stats, step_end_ns=step_end,
        params={**params, "interconnect": spec.interconnect, "gradient_dtype": job.gradient_dtype},
        seed=seed, events=events, extra=extra or {}, intervals=rec.intervals())


def run_sync(spec, job: Job, *, steps: int, seed: int | None = None, cv: float = 0.0,
             chunk_bytes: int = DEFAULT_TRAINING_CHUNK_BYTES, aggregation: str = "servers",
             slowdown: Slowdown | None = None, failure: Failure | None = None, pool: str | None = None,
             coherence: str = "hw", pool_devices: int = 1) -> TrainingResult:
    """EDDIS sync: push to the SoftMemoryBox servers, aggregate there, pull; each step waits for the slowest."""
    _check_run(spec, job, steps)
    W, S = spec.size, spec.memory_servers * spec.server_cores
    shard = -(-job.gradient_bytes // S)
    rng, seed = make_rng(seed)
    J = multipliers(rng, steps, W, cv, slowdown=slowdown, failure=failure)
    if pool is not None:
        if aggregation != "workers":
            raise InputError(f"aggregation: a CXL-pool store has no CPU next to the memory; expected 'workers' "
                             f"with pool={pool!r}, got {aggregation!r}")
        from cxlsim.models.training.pool_store import run_sync_on_pool
        return run_sync_on_pool(spec, job, steps, seed, J, failure,
                                {"cv": cv, "slowdown": _describe(slowdown), "failure": _describe(failure)},
                                pool=pool, coherence=coherence, devices=pool_devices)
    if aggregation == "workers":
        return _sync_by_workers(spec, job, steps, seed, J, chunk_bytes, failure,
                                {"cv": cv, "slowdown": _describe(slowdown), "failure": _describe(failure)})
    if aggregation != "servers":
        raise InputError(f"aggregation: expected 'servers' or 'workers', got {aggregation!r}")
    tr = _transport(spec, S, chunk_bytes)
    env = tr.env
    rec = _Steps(W)

    def worker(w):
        base = job.iteration_ns[w]
        for s in range(steps):
            start = env.now
            if not math.isfinite(J[s, w]):
                return  # failed node
            yield env.timeout(float(base * J[s, w]))
            cend = env.now
            for k in range(S):
                tr.send(w, W + k, shard, (s, w), tag=s)
            pulls = [tr.recv(w, W + k, tag=s) for k in range(S)]
            for k, pull in enumerate(pulls):
                got = yield pull
                if got != (s, W):
                    raise RunError(f"sync: worker {w} pulled {got!r} from server rank {k} in step {s}, "
                                   f"expected the aggregate of all {W} workers")
            rec.add(w, start, cend, env.now)

    def server(k):
        rank = W + k
        order = [(k * W // S + i) % W for i in range(W)]
        for s in range(steps):
            state = {"n": 0, "last": None, "from": set()}
            all_in = simpy.Event(env)

            def arrived(event, s=s, state=state, all_in=all_in):
                step, src = event.value
                if step != s or src in state["from"]:
                    raise RunError(f"sync: server rank {k} got push {event.value!r} in step {s}")
                state["from"].add(src)
                state["n"] += 1
                if state["n"] > 1:  # the first push is the accumulator; the rest are reduced into it
                    state["last"] = tr.reduce(rank, shard)
                if state["n"] == W:
                    all_in.succeed(state["last"])

            for w in range(W):
                tr.recv(rank, w, tag=s).callbacks.append(arrived)
            last = yield all_in
            if last is not None:
                yield last
            for w in order:
                tr.send(rank, w, shard, (s, W), tag=s)

    workers = [env.process(worker(w)) for w in range(W)]
    servers = [env.process(server(k)) for k in range(S)]
    _run(env, workers + servers, failure)
    return _synchronous_result(
        "sync", spec, job, steps, rec,
        {"memory_servers": spec.memory_servers, "server_cores": spec.server_cores, "shard_bytes": shard,
         "aggregation": "memory servers", "cv": cv, "slowdown": _describe(slowdown), "failure": _describe(failure),
         "chunk_bytes": chunk_bytes}, seed, env.events)


def _sync_by_workers(spec, job, steps, seed, J, chunk_bytes, failure, noise):
    """EDDIS sync with the workers aggregating over the shared region (see the module docstring)."""
    W, S = spec.size, spec.memory_servers * spec.server_cores
    sl = -(-job.gradient_bytes // W)
    tr = _transport(spec, S, chunk_bytes)
    env = tr.env
    rec = _Steps(W)
    home = [j % S for j in range(W)]  # server rank holding slice j
    count = {}

    def worker(w):
        ep = _GpuEndpoint(tr, w, job.reduce_bw_bytes_per_ns[w])
        expect = [sum(1 for j in range(W) if home[j] == k and j != w) + (home[w] == k and W > 1) for k in range(S)]
        for s in range(steps):
            start = env.now
            if not math.isfinite(J[s, w]):
                return  # failed node
            yield env.timeout(float(job.iteration_ns[w] * J[s, w]))
            cend = env.now
            if W > 1:
                for j in range(W):
                    if j != w:
                        tr.send(w, W + home[j], sl, ("grad", s, w, j), tag=s)
                mine, done, left = simpy.Event(env), simpy.Event(env), [W - 1]

                def got(event, mine=mine, done=done, left=left):
                    if event.value[0] == "slices":
                        mine.succeed()
                    else:
                        left[0] -= 1
                        if left[0] == 0:
                            done.succeed()

                for k in range(S):
                    for _ in range(expect[k]):
                        tr.recv(w, W + k, tag=s).callbacks.append(got)
                yield mine
                yield ep.reduce((W - 1) * sl)  # the other W-1 workers' slice w, on this GPU
                tr.send(w, W + home[w], sl, ("agg", s, w), tag=s)
                yield done
            rec.add(w, start, cend, env.now)

    def handler(k, w):
        rank = W + k
        expect = sum(1 for j in range(W) if home[j] == k and j != w) + (home[w] == k)
        for s in range(steps):
            for _ in range(expect):
                msg = yield tr.recv(rank, w, tag=s)
                if msg[0] == "grad":
                    j = msg[3]
                    count[s, j] = count.get((s, j), 0) + 1
                    if count[s, j] == W - 1:  # every other worker has written slice j: aggregator j reads them
                        tr.send(rank, j, (W - 1) * sl, ("slices", s, j), tag=s)
                else:
                    j = msg[2]
                    for i in range(1, W):  # every other worker reads the reduced slice j
                        tr.send(rank, (j + i) % W, sl, ("reduced", s, j), tag=s)

    workers = [env.process(worker(w)) for w in range(W)]
    if W > 1:
        for k in range(S):
            for w in range(W):
                env.process(handler(k, w))
    _run(env, workers, failure)
    return _synchronous_result(
        "sync", spec, job, steps, rec,
        {"memory_servers": spec.memory_servers, "server_cores": spec.server_cores, "slice_bytes": sl,
         "aggregation": "workers", **noise, "chunk_bytes": chunk_bytes}, seed, env.events)


def run_ddp(spec, job: Job, *, steps: int, seed: int | None = None, cv: float = 0.0,
            bucket_cap_bytes: int = 25 * MIB, first_bucket_bytes: int = MIB, overlap: bool = True,
            backward_fraction: float = 2.0 / 3.0, chunk_bytes: int = DEFAULT_TRAINING_CHUNK_BYTES,
            slowdown: Slowdown | None = None, failure: Failure | None = None,
            collective: str = "flow") -> TrainingResult:
    """PyTorch DDP: bucketed ring all-reduce, overlapped with the backward pass when `overlap`.

    collective: 'flow' (default) uses the flow-level recurrence (horovod.run_ddp_flow), tested
    equal to the DES within 2% (to rounding on the training star); 'des' runs every ring message
    on the transport (a 16-node, 200-step run takes about 9-11 s on the development machine,
    the flow about 0.2 s).
    """
    if collective == "flow":
        from cxlsim.models.training.horovod import run_ddp_flow
        return run_ddp_flow(spec, job, steps=steps, seed=seed, cv=cv, bucket_cap_bytes=bucket_cap_bytes,
                            first_bucket_bytes=first_bucket_bytes, overlap=overlap,
                            backward_fraction=backward_fraction, chunk_bytes=chunk_bytes, slowdown=slowdown,
                            failure=failure)
    if collective != "des":
        raise InputError(f"collective: expected 'des' or 'flow', got {collective!r}")
    _check_run(spec, job, steps)
    if not 0.0 < backward_fraction <= 1.0:
        raise InputError(f"backward_fraction: expected a fraction in (0, 1], got {backward_fraction!r}")
    W, G = spec.size, job.gradient_bytes
    buckets = ddp_buckets(G, first_bucket_bytes, bucket_cap_bytes)
    ends = [sum(buckets[:i + 1]) for i in range(len(buckets))]
    rng, seed = make_rng(seed)
    J = multipliers(rng, steps, W, cv, slowdown=slowdown, failure=failure)
    tr = _transport(spec, 0, chunk_bytes)
    env = tr.env
    rec = _Steps(W)
    expect = reduced_vector(W, W)

    def communicate(ep, s, bstart, bwd):
        for i, (size, end) in enumerate(zip(buckets, ends)):
            if overlap:
                ready = bstart + bwd * (end / G)
                if ready > env.now:
                    yield env.timeout(ready - env.now)
            group = Group(ep, range(W), tag=1 + s * len(buckets) + i)
            out = yield from allreduce_ring(group, size, vector_of(ep.rank, W))
            if out != expect:
                raise RunError(f"ddp: worker {ep.rank} got a wrong all-reduce of bucket {i} in step {s}")

    def worker(w):
        ep = _GpuEndpoint(tr, w, job.reduce_bw_bytes_per_ns[w])
        for s in range(steps):
            start = env.now
            if not math.isfinite(J[s, w]):
                return  # failed node
            it = float(job.iteration_ns[w] * J[s, w])
            bwd = it * backward_fraction
            yield env.timeout(it - bwd)
            bstart = env.now
            comm = env.process(communicate(ep, s, bstart, bwd)) if overlap else None
            yield env.timeout(bwd)
            cend = env.now
            if comm is None:
                comm = env.process(communicate(ep, s, bstart, bwd))
            yield comm
            rec.add(w, start, cend, env.now)

    procs = [env.process(worker(w)) for w in range(W)]
    _run(env, procs, failure)
    return _synchronous_result("ddp", spec, job, steps, rec, _ddp_params(
        bucket_cap_bytes, first_bucket_bytes, len(buckets), overlap, backward_fraction, "des", cv, slowdown,
        failure, chunk_bytes), seed, env.events)


def _ddp_params(bucket_cap_bytes, first_bucket_bytes, buckets, overlap, backward_fraction, collective, cv,
                slowdown, failure, chunk_bytes) -> dict:
    return {"bucket_cap_bytes": bucket_cap_bytes, "first_bucket_bytes": first_bucket_bytes, "buckets": buckets,
            "overlap": overlap, "backward_fraction": backward_fraction, "allreduce": "ring",
            "collective": collective, "cv": cv, "slowdown": _describe(slowdown), "failure": _describe(failure),
            "chunk_bytes": chunk_bytes}


def run_async(spec, job: Job, *, steps: int, tau: int = 1, seed: int | None = None, cv: float = 0.0,
              chunk_bytes: int = DEFAULT_TRAINING_CHUNK_BYTES, slowdown: Slowdown | None = None,
              failure: Failure | None = None) -> TrainingResult:
    """EDDIS async (elastic averaging): exchange with the centre every `tau` local steps, never wait for others."""
    _check_run(spec, job, steps)
    if isinstance(tau, bool) or not isinstance(tau, int) or tau < 1:
        raise InputError(f"tau: expected an integer >= 1, got {tau!r}")
    W, S = spec.size, spec.memory_servers * spec.server_cores
    shard = -(-job.gradient_bytes // S)
    budget = steps * W
    rng, seed = make_rng(seed)
    # Worker w's k-th local step uses J[k, w]; a worker takes at most `budget` steps.
    J = multipliers(rng, budget, W, cv, slowdown=slowdown, failure=failure)
    tr = _transport(spec, S, chunk_bytes)
    env = tr.env
    rec = _Steps(W)
    claimed = [0]
    exchanges = [0] * W
    centre = {"updates": 0, "seen": [0] * W, "stale": {}}  # centre updates and each worker's view of them

    def worker(w):
        ep = _GpuEndpoint(tr, w, job.reduce_bw_bytes_per_ns[w])
        base, local = job.iteration_ns[w], 0
        while claimed[0] < budget:
            if not math.isfinite(J[local, w]):
                return  # failed node: the others take over its share of the budget
            claimed[0] += 1
            start = env.now
            yield env.timeout(float(base * J[local, w]))
            cend = env.now
            local += 1
            if local % tau == 0:
                for k in range(S):
                    tr.send(w, W + k, shard, ("params", w), tag=0)
                for k in range(S):
                    got = yield tr.recv(w, W + k, tag=0)
                    if got != ("centre", w):
                        raise RunError(f"async: worker {w} got {got!r} from server rank {k}")
                yield ep.reduce(job.gradient_bytes)  # the elastic update of the local parameters
                exchanges[w] += 1
                u = centre["updates"] - centre["seen"][w]  # updates by the others since its last exchange
                centre["stale"][u] = centre["stale"].get(u, 0) + 1
                centre["updates"] += 1
                centre["seen"][w] = centre["updates"]
            rec.add(w, start, cend, env.now)

    def handler(k, w):
        rank = W + k
        while True:
            got = yield tr.recv(rank, w, tag=0)
            if got != ("params", w):
                raise RunError(f"async: server rank {k} got {got!r} from worker {w}")
            yield tr.reduce(rank, shard)  # the centre moves towards the worker's parameters
            tr.send(rank, w, shard, ("centre", w), tag=0)

    procs = [env.process(worker(w)) for w in range(W)]
    for k in range(S):
        for w in range(W):
            env.process(handler(k, w))
    _run(env, procs)
    stats = rec.stats(spec, job, synchronous=False)
    elapsed = max(e[-1] for e in rec.end if e)
    return TrainingResult(
        mode="async", model=job.model, precision=job.precision, batch=job.batch, steps=steps,
        samples=budget * job.batch, elapsed_ns=elapsed, workers=stats, step_end_ns=(),
        params={"tau": tau, "memory_servers": spec.memory_servers, "server_cores": spec.server_cores,
                "shard_bytes": shard, "cv": cv, "slowdown": _describe(slowdown), "failure": _describe(failure),
                "chunk_bytes": chunk_bytes, "interconnect": spec.interconnect,
                "gradient_dtype": job.gradient_dtype},
        seed=seed, events=env.events, extra={"exchanges": list(exchanges),
                                           "staleness_updates_histogram": dict(sorted(centre["stale"].items()))},
        intervals=rec.intervals())


MODES = {"sync": run_sync, "ddp": run_ddp, "async": run_async}
"""Training modes by name (hybrid and horovod register themselves from their modules)."""


def register(name: str, fn) -> None:
    """Add a training mode `fn(spec, job, *, steps, seed, cv, ...)` under `name`."""
    MODES[name] = fn


def _describe(value):
    """A Slowdown/Failure (or None) as a plain dict for the result's params."""
    return None if value is None else dict(vars(value))


def simulate(spec, job: Job, mode: str, **params) -> TrainingResult:
    """Run `mode` (a key of MODES) with its keyword parameters."""
    try:
        fn = MODES[mode]
    except KeyError:
        raise InputError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}") from None
    return fn(spec, job, **params)
