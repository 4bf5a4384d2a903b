"""This machine's costs that a training projection times: a vector pass, a thread hand-off, and an async or
hybrid exchange's operations right after a training step's compute.

`vector_pass_ns` (one pass over the parameter vector, hot) and `handoff_ns` (work to a Python
thread and back through queues) are what cxlsim/train_projection.py charges for the vector
work and the hand-offs that a record counts as communication but that are no pool calls.

Between two exchanges a rank computes its step: the model's forward and backward pass over a
batch fills the core's caches with the batch, the activations and the gradient (about 2 MB for
the mlp at batch 256, against a 1 MB L2 per core here) and displaces the shared region's slots,
which only the exchange touches, once per step. So the merge's copy of the slots and the push
into its own run from the next level of the memory hierarchy, slower than the calibration's
primitives, which repeat one copy over the same lines (hot). The phases a run records
(cxlsim/train_phases.py) show it: the merge's copy of two 135 KiB slots took 35 us in the run
against 15 us at the profile's bandwidth. The vector passes of the step work on vectors the
compute has just used (the parameters, the gradient) or the merge has just written (the
centre), and take about the hot pass's time (`vector_pass_ns`): a pass over
vectors the compute displaced took 2-4 x that here, more than any pass of a run's phases.

`measure_exchange` times, in this process and with the run's model and batch size, one step
after another as a rank does it (BLAS on one thread, as every rank): one `loss_grad` (the step's
own displacement), then each operation once, in the async step's order (the A/B of
benchmarks/shared_state_costs.py also times a vector pass over three vectors the compute displaced):

- read: the merge's copy of the W slots out of the pool (`SharedState.read_all`);
- push: a seqlock write of this worker's slot (`SharedState.push`; hw coherence);
- ticket: one ticket of the region's counter (`SharedState.fetch_add`, hw: the device atomic, so
  the figure is the call's software cost; the DES prices the counter's pool operations of either
  scheme on top);
- handoff: hybrid's hand-off of an exchange to its communication thread and back, as the run
  does it (`ThreadPoolExecutor(1).submit(...).result()`), the thread on the same CPU as the
  caller (a pinned rank's), in CPU time: the caller's (thread_time) plus the executor thread's
  (its schedstat) from one step to the next. On one CPU the two threads' work is serial, and
  the runs' phases show the hand-off is CPU work (20-30 us on the main thread to submit, 25-35
  us on the exchange's thread before it starts, load 7-9); CPU time leaves out the waits for
  other tenants of the CPU, which a wall-clock round trip catches (one took 1.4 ms at load 9).

The projection gives the DES these costs for async and hybrid (cxlsim/train_projection.py): the
pool's host bandwidth for the region's copies, so that a push and a merge take what they took
measured (hw coherence only: in flush mode every read follows an invalidation and so comes
from memory whatever the compute displaced, as in the calibration's flush primitives), each
ticket's call at `ticket_ns`, and hybrid's hand-off at `handoff_ns`. Units: ns, bytes.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import queue
import threading
import time

import numpy as np
from threadpoolctl import threadpool_limits

from cxlsim.coherence import Coherence
from cxlsim.emulator.training import models
from cxlsim.emulator.training.shared_state import SharedState, shared_region
from cxlsim.errors import RunError

__all__ = ["vector_pass_ns", "handoff_ns", "ExchangeCosts", "measure_exchange", "exchange_bandwidth"]

LINE = 64
REPEATS = 60
"""Steps (compute + operation) per operation; each figure is the median of as many timings."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExchangeCosts:
    """ns per operation right after a step's compute (the lower quartile of the timings; see the module
    docstring), with the [min, max] of the timings in `spread_ns` (operation: (min, max))."""

    model: str
    batch: int
    workers: int
    vector_bytes: int
    push_ns: float
    read_ns: float
    ticket_ns: float
    handoff_ns: float
    repeats: int
    spread_ns: dict

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def measure_exchange(model_name: str, batch: int, workers: int, repeats: int = REPEATS, seed: int = 1,
                     displace: bool = True) -> ExchangeCosts:
    """Time read, push, ticket and hand-off after one `loss_grad` per step (the module docstring), the lower
    quartile of `repeats` steps' timings (one the scheduler did not interrupt, in the cache state the compute
    leaves; the spread is beside it; the hand-off in CPU time), on a thread of this process pinned to one
    CPU, as a pinned rank; a
    shared region of `workers` slots of the model's parameters in a fresh hw pool segment (removed on the
    way out). displace=False: no compute between the steps (the operations hot in the cache; the A/B of
    benchmarks/shared_state_costs.py)."""
    got = []
    thread = threading.Thread(target=lambda: got.append(_measure(model_name, batch, workers, repeats, seed, displace)),
                              name="cxlsim-exchange-costs")
    thread.start()
    thread.join()
    if not got:
        raise RunError("train_costs: the exchange's measurement failed (see the thread's traceback above)")
    return got[0]


def _measure(model_name: str, batch: int, workers: int, repeats: int, seed: int, displace: bool) -> ExchangeCosts:
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[-1]})  # this thread only (and the executor's thread, which inherits it)
    model = models.build(model_name)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, models.FEATURES))
    y = rng.integers(0, models.CLASSES, size=batch)
    params, grad = model.init(seed), np.empty(model.size)
    times = {"read": [], "push": [], "ticket": [], "handoff": []}
    executor = concurrent.futures.ThreadPoolExecutor(1, "cxlsim-exchange-costs-comm")
    worker = executor.submit(threading.get_native_id).result()  # its thread started: its tid
    with threadpool_limits(limits=1), shared_region(workers, model.size, coherence=Coherence.HW) as handle:
        states = [SharedState.attach(handle, w) for w in range(workers)]
        try:
            for state in states:
                state.push(params)
            me = states[0]
            ops = {"read": me.read_all, "push": lambda: me.push(params), "ticket": me.fetch_add}  # the async order
            main_cpu, worker_before = None, None
            for _ in range(repeats + 1):
                if displace:
                    model.loss_grad(params, x, y, grad)
                worker_now = _thread_cpu_ns(worker)
                if main_cpu is not None:  # the last hand-off: this thread's CPU in it, the worker's since
                    times["handoff"].append(main_cpu + worker_now - worker_before)
                for name, op in ops.items():
                    start = time.perf_counter_ns()
                    op()
                    times[name].append(time.perf_counter_ns() - start)
                start = time.thread_time_ns()
                executor.submit(int).result()
                main_cpu, worker_before = time.thread_time_ns() - start, worker_now
        finally:
            for state in states:
                state.close()
            executor.shutdown()
    med = {k: float(np.percentile(v, 25)) for k, v in times.items()}
    return ExchangeCosts(model=model_name, batch=batch, workers=workers,
                         vector_bytes=model.nbytes, push_ns=med["push"], read_ns=med["read"],
                         ticket_ns=med["ticket"], handoff_ns=med["handoff"], repeats=repeats,
                         spread_ns={k: (float(min(v)), float(max(v))) for k, v in times.items()})


def vector_pass_ns(count: int, repeats: int = 7, calls: int = 50) -> float:
    """One pass over `count` float64 elements (np.add into a third array) on this machine, ns: the best
    of `repeats` batches of `calls` (the pass's own cost, not the machine's load)."""
    a, b, c = np.ones(count), np.ones(count), np.empty(count)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            np.add(a, b, out=c)
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e9


def handoff_ns(calls: int = 500) -> float:
    """One hand-off of work to a Python thread and back (queue.put, the thread's get and put, the caller's
    get), the median of `calls`, ns: what ddp pays per bucket to reach its communication thread."""
    jobs, done = queue.Queue(), queue.Queue()

    def serve():
        for item in iter(jobs.get, None):
            done.put(item)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    times = []
    for i in range(calls):
        start = time.perf_counter()
        jobs.put(i)
        done.get()
        times.append(time.perf_counter() - start)
    jobs.put(None)
    thread.join(1.0)
    return float(np.median(times)) * 1e9


def _thread_cpu_ns(tid: int) -> int:
    """CPU time thread `tid` of this process has run, ns (its schedstat; 0 where the file is absent)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def exchange_bandwidth(costs: ExchangeCosts) -> float:
    """The host bandwidth (bytes/ns) at which the DES's push and merge of the region (models/training/
    pool_shared.py, on the local-host pool, whose path latency is negligible: a push moves a slot's sequence
    line, meta line and vector, a merge W of them) take together what `costs` measured for them."""
    slot = 2 * LINE + -(-costs.vector_bytes // LINE) * LINE
    moved = (1 + costs.workers) * slot
    return moved / max(costs.push_ns + costs.read_ns, 1e-3)
