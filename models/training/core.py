"""What every training mode is built from: the job, the results, the mode record and the run machinery.

A training mode simulates data-parallel training of one `Job` on a cluster
spec (cluster.py) and returns a `TrainingResult`. Every GPU of the spec is one
worker, i.e. one transport rank on its node's host. A worker's GPU compute is
a SimPy timeout (the GPU's own timeline); everything it sends, receives and
reduces goes through the transport on the rank's communication timeline, so
communication can overlap compute while transport costs (LogGP o, g, G, link
serialisation, switch queues) are the fabric's own. GPU-side reductions run at
the GPU's memory bandwidth / 3 (`GpuEndpoint`, profiles.GpuProfile).

Compute time. Worker w's iteration s takes `job.iteration_ns[w] * M[s, w]`,
M being the straggler multipliers of `stragglers.multipliers` (jitter `cv`,
transient `slowdown`, a `failure`), drawn once per run from one seeded
Generator. Of an iteration, the first 1 - `backward_fraction` is the forward
pass and the rest the backward pass (default 2/3: backward costs about twice
the forward); the optimizer step is inside the profile time.

A mode is one module exporting one `Mode` record: its name, its `run`
function `run(spec, job, *, steps, seed, cv, slowdown, failure, **options)`,
the `Option`s it takes beyond those common ones (the one table of which option
applies to which mode: `cxlsim train` builds its flags from it and refuses a
flag the chosen mode does not declare) and its convergence rule (the progress
factor of the optional convergence model, convergence.py).

Outputs (`TrainingResult`): throughput in samples/s over the whole run (time 0
to the end of the last step), and per worker busy (computing), communicating
and waiting time, which add up to the worker's last step end. A worker's
waiting time in step s is the part of the time after its compute ends that is
due to slower workers: min(tail, max over workers of their compute end - its
own compute end), tail being the time from its compute end to its step end;
the rest of the tail is communicating (`StepLog.stats`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from cxlsim.errors import InputError, RunError
from cxlsim.fabric import topology
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import build
from cxlsim.fabric.presets import get_preset
from cxlsim.fabric.transport import Endpoint, NetworkTransport
from cxlsim.models.training import profiles
from cxlsim.units import parse_size, parse_time

__all__ = ["MIB", "DEFAULT_TRAINING_CHUNK_BYTES", "Job", "make_job", "WorkerStats", "TrainingResult", "Option",
           "Mode", "CHUNK", "MEMORY_SERVERS", "SERVER_CORES", "STORE_OPTIONS", "integer_at_least", "size_text",
           "time_text", "with_store", "RankPlacement", "GpuEndpoint", "check_run", "check_backward_fraction",
           "network_transport", "run_to_end", "StepLog", "synchronous_result", "describe"]

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
    published single-GPU figure. A model whose training state does not fit a
    worker's GPU is an InputError naming both figures (profiles.check_fits).
    """
    m = profiles.dnn(model)
    precision = spec.precision if precision is None else precision
    if precision not in profiles.PRECISIONS:
        raise InputError(f"precision: expected one of {', '.join(profiles.PRECISIONS)}, got {precision!r}")
    batch = m.reference_batch if batch is None else batch
    workers = spec.workers()
    for gpu_name in dict.fromkeys(w.gpu for w in workers):
        profiles.check_fits(gpu_name, m.key)  # every worker holds the whole training state
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
    """When the last worker finished each step (hybrid: each round was applied; empty for async)."""
    params: dict
    """The mode's parameters as used (bucket sizes, tau, servers, cv, chunk...)."""
    seed: int
    events: int = 0
    extra: dict = field(default_factory=dict)
    intervals: list = field(default_factory=list, repr=False)
    """Per worker, per step: (start_ns, compute_end_ns, end_ns), for timelines (not in summaries)."""
    step_unit: str = "steps"
    """What `step_end_ns` counts: 'steps', or 'rounds' (hybrid)."""

    @property
    def throughput_samples_per_s(self) -> float:
        return self.samples / self.elapsed_ns * 1e9

    def worker_rows(self) -> list[dict]:
        """One dict per worker (times in ns), for CSV/JSON output."""
        return [vars(w).copy() for w in self.workers]


# ---------------------------------------------------------------- the mode record

@dataclass(frozen=True, kw_only=True)
class Option:
    """One keyword option of a mode's run function, and the `cxlsim train` flag that sets it.

    `parse` turns the flag's text into the value (raising ValueError, whose message the CLI
    prefixes with the flag); `switch` instead makes the flag take no argument and set the
    option to that value (e.g. --no-overlap sets overlap=False). Several modes may declare
    the same Option (one flag); two different Options may not share a flag.
    """

    name: str
    """The run function's keyword, e.g. 'tau'."""
    flag: str
    """The command-line flag, e.g. '--tau'."""
    help: str
    """What the option does (the CLI adds which modes it applies to)."""
    parse: Callable | None = None
    choices: tuple = ()
    switch: object = None

    def __post_init__(self):
        if not self.flag.startswith("--") or not self.name.isidentifier():
            raise InputError(f"option {self.name!r}: expected a keyword name and a '--flag', got {self.flag!r}")
        if (self.parse is None) == (self.switch is None):
            raise InputError(f"option {self.flag}: give exactly one of parse (the flag takes a value) or "
                             "switch (the flag alone sets it)")

    def value(self, text):
        """The option's value from the flag's text (a switch's value when it takes none)."""
        if self.switch is not None:
            return self.switch
        if self.choices and text not in self.choices:
            raise InputError(f"{self.flag}: expected one of {', '.join(map(str, self.choices))}, got {text!r}")
        try:
            return self.parse(text)
        except ValueError as exc:  # InputError and UnitError are ValueErrors too
            raise InputError(f"{self.flag}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class Mode:
    """A training mode: `run(spec, job, *, steps, seed, cv, slowdown, failure, **options)`."""

    name: str
    """The name `--mode` and `modes.simulate` take."""
    run: Callable
    """Returns a TrainingResult."""
    options: tuple = ()
    """The Options it takes besides steps, seed, cv, slowdown and failure."""
    convergence: Callable | None = None
    """progress factor rule: TrainingResult -> (0, 1] (convergence.py); None: no rule."""
    summary: str = ""
    """One line for `--help`."""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or not callable(self.run):
            raise InputError(f"mode {self.name!r}: expected a name and a callable run")
        names = [o.name for o in self.options]
        if len(set(names)) != len(names) or not all(isinstance(o, Option) for o in self.options):
            raise InputError(f"mode {self.name}: options must be distinct Option records, got {names}")


def integer_at_least(lo: int):
    """A parser of integer text >= lo (ValueError naming the bound otherwise)."""
    def parse(text) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise ValueError(f"expected an integer >= {lo}, got {text!r}") from None
        if value < lo:
            raise ValueError(f"expected an integer >= {lo}, got {value}")
        return value
    return parse


def size_text(text) -> int:
    """A size with a unit ('25MiB') in bytes."""
    return parse_size(text)


def time_text(text) -> float:
    """A time with a unit ('5 ms') in ns."""
    return parse_time(text)


CHUNK = Option(name="chunk_bytes", flag="--chunk", parse=size_text,
               help=f"network pipelining unit (default {DEFAULT_TRAINING_CHUNK_BYTES // MIB}MiB)")
MEMORY_SERVERS = Option(name="memory_servers", flag="--memory-servers", parse=integer_at_least(1),
                        help="SoftMemoryBox memory-server hosts (default: the cluster spec's)")
SERVER_CORES = Option(name="server_cores", flag="--server-cores", parse=integer_at_least(1),
                      help="aggregation cores (store ranks) per memory server (default: the cluster spec's)")
STORE_OPTIONS = (MEMORY_SERVERS, SERVER_CORES)
"""The options of modes whose store runs on memory servers."""


def with_store(spec, memory_servers: int | None = None, server_cores: int | None = None):
    """`spec` with its memory servers and aggregation cores replaced where given (each an integer >= 1)."""
    for key, value in (("memory_servers", memory_servers), ("server_cores", server_cores)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"{key}: expected an integer >= 1, got {value!r}")
    return dataclasses.replace(spec, memory_servers=memory_servers or spec.memory_servers,
                               server_cores=server_cores or spec.server_cores)


# ---------------------------------------------------------------- the run machinery

class RankPlacement:
    """Ranks on hosts with any number of ranks per host: `host_of[rank]` (what NetworkTransport reads)."""

    def __init__(self, nodes: int, host_of: list):
        self.nodes, self.host_of, self.size = nodes, list(host_of), len(host_of)


class GpuEndpoint(Endpoint):
    """An endpoint whose reductions run on the GPU (memory bandwidth / 3), on the rank's comm timeline."""

    __slots__ = ("reduce_ns_per_byte",)

    def __init__(self, transport, rank: int, reduce_bw_bytes_per_ns: float):
        super().__init__(transport, rank)
        self.reduce_ns_per_byte = 1.0 / reduce_bw_bytes_per_ns

    def reduce(self, size_bytes):
        return self.transport.compute(self.rank, size_bytes * self.reduce_ns_per_byte)


def check_run(spec, job, steps) -> None:
    """InputError unless `steps` is an integer >= 1 and `job` has one iteration time per GPU of `spec`."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"steps: expected an integer >= 1, got {steps!r}")
    if len(job.iteration_ns) != spec.size:
        raise InputError(f"job: has {len(job.iteration_ns)} workers but the cluster has {spec.size} GPUs")


def check_backward_fraction(backward_fraction) -> None:
    if not (isinstance(backward_fraction, (int, float)) and 0.0 < backward_fraction <= 1.0):
        raise InputError(f"backward_fraction: expected a fraction in (0, 1], got {backward_fraction!r}")


def network_transport(spec, server_ranks: int, chunk_bytes: int, extra_ranks: int = 0) -> NetworkTransport:
    """The training star: workers on their node hosts, then `server_ranks` ranks spread over the
    memory-server hosts (`spec.server_cores` per host), then `extra_ranks` more on the first memory
    server (e.g. hybrid's counter). Host h is topology node f'h{h}' on switch 'sw0'."""
    servers = spec.memory_servers if server_ranks or extra_ranks else 0
    hosts = spec.worker_hosts + servers
    host_of = [w.host for w in spec.workers()]
    host_of += [spec.worker_hosts + k // spec.server_cores for k in range(server_ranks)]
    host_of += [spec.worker_hosts] * extra_ranks
    net = build(topology.star(hosts), get_preset(spec.interconnect), Environment())
    return NetworkTransport(net, RankPlacement(hosts, host_of), chunk_bytes)


def run_to_end(env, procs, workers: int, failure=None) -> None:
    """Run until every process in `procs` is done; a stall is a RunError.

    The first `workers` processes are the workers (the rest are store ranks): the error names
    the failed worker, if any, and the workers left waiting.
    """
    try:
        env.run(until=env.all_of(procs))
    except RuntimeError as exc:
        if "No scheduled events left" not in str(exc):
            raise
        stuck = [i for i, p in enumerate(procs[:workers]) if p.is_alive]
        shown = f"{stuck[:8]}" if len(stuck) <= 8 else f"{stuck[:8]} and {len(stuck) - 8} more"
        if failure is not None:
            raise RunError(f"training run stalled at t={env.now:.1f} ns: worker {failure.worker} failed at "
                           f"iteration {failure.step} and this synchronous mode waits for every worker (no "
                           f"elastic recovery is modelled); workers {shown} never finished") from None
        raise RunError(f"training run stalled at t={env.now:.1f} ns; workers {shown} never finished") from None


class StepLog:
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
        """WorkerStats per worker; `synchronous`: split each step's tail into waiting and communicating."""
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


def synchronous_result(mode, spec, job, steps, log, params, seed, events, extra=None) -> TrainingResult:
    """The result of a mode in which every worker does `steps` steps (sync, ddp, horovod)."""
    W = spec.size
    stats = log.stats(spec, job, synchronous=True)
    step_end = tuple(max(log.end[w][s] for w in range(W)) for s in range(steps))
    return TrainingResult(
        mode=mode, model=job.model, precision=job.precision, batch=job.batch, steps=steps,
        samples=steps * W * job.batch, elapsed_ns=step_end[-1], workers=stats, step_end_ns=step_end,
        params={**params, "interconnect": spec.interconnect, "gradient_dtype": job.gradient_dtype},
        seed=seed, events=events, extra=extra or {}, intervals=log.intervals())


def describe(value):
    """A Slowdown/Failure (or None) as a plain dict for the result's params."""
    return None if value is None else dict(vars(value))
