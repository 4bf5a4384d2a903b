"""Where a sweep's points run: one point in any process, and the executors that run many.

`run_point` runs one point from its scenario mapping, in whatever process it
lands, and returns its record (result row or error, wall time, host, pid): a
point that raises is a failed point, not a crash of the sweep.

DES points run on a `concurrent.futures` executor: a local process pool
(`LocalPool`, `--executor local`, `--workers N`), mpi4py's `MPIPoolExecutor`
(`--executor mpi`, launched as `mpiexec -n N python -m mpi4py.futures -m cxlsim
sweep ...`: rank 0 runs the sweep, the other N-1 ranks the points), or from
Python any executor passed to `Sweep.run(executor=...)`. Analytic points take
about a millisecond each, less than shipping them to a process, so the sweep
runs them in its own process.

Local workers ignore Ctrl-C (the sweep handles it and ends them with
`LocalPool.end_workers()`), and die with the sweep's process on Linux
(`PR_SET_PDEATHSIG`), so a SIGKILLed sweep leaves no orphans.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import socket
import sys
import time

from cxlsim import config
from cxlsim.errors import InputError

__all__ = ["run_point", "cpus", "make_executor", "LocalPool"]


def run_point(scenario_dict: dict) -> dict:
    """Run one point (in any process): its resolved scenario, result row, error, wall time, host.

    A point that raises is a failed point: its error is recorded, the sweep goes on.
    """
    from cxlsim import simulate

    start = time.perf_counter()
    out = {"host": socket.gethostname(), "pid": os.getpid(), "rows": None, "resolved": None, "error": None}
    try:
        scenario = simulate.resolved(config.from_dict(scenario_dict))
        out["resolved"] = config.to_dict(scenario)
        out["rows"] = simulate.run(scenario)
    except Exception as exc:  # noqa: BLE001 - a failed point is data, not a crash of the sweep
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["wall_s"] = time.perf_counter() - start
    return out


def _worker_init(pids) -> None:
    """Local workers: report the pid on `pids` (a SimpleQueue); Ctrl-C is the parent's to handle;
    die with the parent (Linux)."""
    pids.put(os.getpid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the sweep's handler, inherited by fork
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a SIGKILLed sweep leaves no orphans
    except (OSError, AttributeError):
        pass


def cpus() -> int:
    """The CPUs this process may run on (the default local pool size)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def make_executor(kind: str, workers: int | None, jobs: int):
    """A concurrent.futures executor for `jobs` DES points (None if there are none)."""
    if jobs == 0:
        return None
    if kind == "mpi":
        try:
            from mpi4py.futures import MPIPoolExecutor
        except ImportError:
            raise InputError("--executor mpi: mpi4py is not installed (pip install -e '.[mpi]')") from None
        # main=False: workers need only cxlsim.sweep_executors.run_point, not a re-run of `python -m cxlsim`
        return MPIPoolExecutor(max_workers=workers, main=False)
    size = max(1, min(workers or cpus(), jobs))
    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None)
    return LocalPool(size, context)


class LocalPool(cf.ProcessPoolExecutor):
    """The local executor: a process pool that knows its workers, so that `end_workers()` can stop them.

    Each worker reports its pid when it starts (`_worker_init`); ProcessPoolExecutor itself has
    no public way to reach its workers or to end running calls (before Python 3.14).
    """

    def __init__(self, workers: int, context):
        self._pid_queue = context.SimpleQueue()
        self._worker_pids: set[int] = set()
        super().__init__(max_workers=workers, mp_context=context, initializer=_worker_init,
                         initargs=(self._pid_queue,))

    def end_workers(self) -> None:
        """Stop the workers now: their running points are abandoned (they have no result yet)."""
        while not self._pid_queue.empty():
            self._worker_pids.add(self._pid_queue.get())
        for proc in multiprocessing.active_children():
            if proc.pid in self._worker_pids and proc.is_alive():
                proc.terminate()
