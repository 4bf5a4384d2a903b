"""Start ranks that share a pool: local processes (the default) or MPI ranks.

`run_local(np, fn, ...)` creates the pool, forks `np` processes, gives each a
`PoolComm` and calls ``fn(comm, *args)``; it returns the per-rank results. If a rank
raises or never arrives, the others fail within their timeout naming the missing
ranks; if a rank dies (a signal, or an exit without a report), the launcher ends the
others at once. Either way `run_local` raises RankFailure naming every failed rank and
how, and the pool file is gone in every case. With ``keep_going=True`` (for algorithms
that survive a lost peer, such as asynchronous training) the others run on instead, and a
failed rank's entry in the results is a `Failed` naming how it failed. A rank never outlives its launcher: each
asks the kernel for SIGKILL when the launcher exits (PR_SET_PDEATHSIG) and leaves if the
launcher is already gone.

`run_mpi(fn, ...)` does the same inside an `mpiexec` job: rank 0 creates the pool and
broadcasts its handle; MPI supplies rank and size.
"""
from __future__ import annotations

import ctypes
import dataclasses
import multiprocessing
import os
import signal
import time
import traceback
from multiprocessing.connection import wait

from cxlsim.coherence import Coherence
from cxlsim.emulator._pool_kernel import ALLREDUCE_LARGE_BYTES, check_large_bytes
from cxlsim.emulator.comm import PoolComm, timing_options
from cxlsim.emulator.pool import Pool, PoolSpec, parse_pool_spec
from cxlsim.emulator.reference import ReferenceComm
from cxlsim.errors import InputError, RunError

GRACE_S = 5.0  # extra time the launcher gives ranks beyond their own timeout
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)


class RankFailure(RunError):
    """One or more ranks failed; `failures` maps rank -> description."""

    def __init__(self, failures: dict[int, str]):
        self.failures = dict(sorted(failures.items()))
        lines = "\n".join(f"  rank {r}: {msg}" for r, msg in self.failures.items())
        super().__init__(f"{len(self.failures)} rank(s) failed:\n{lines}")


@dataclasses.dataclass(frozen=True)
class Failed:
    """The result of a rank that failed in a ``keep_going`` run: how it failed."""

    message: str


COMM_CLASSES = {"cython": PoolComm, "reference": ReferenceComm}


def comm_class(kernel: str = "cython"):
    """The communicator class for `kernel`: 'cython' (fast) or 'reference' (the pure-Python twin)."""
    try:
        return COMM_CLASSES[kernel]
    except (KeyError, TypeError):
        raise InputError(f"kernel: expected 'cython' or 'reference', got {kernel!r}") from None


def check_np(nranks) -> int:
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise InputError(f"--np: expected a whole number of ranks, 1 or more, got {nranks!r}")
    return nranks


def die_with_launcher(launcher_pid: int) -> None:
    """In a forked rank: have the kernel SIGKILL this process when its launcher exits, and leave
    at once if the launcher died before that was set (then this process has another parent)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise RunError(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != launcher_pid:
        os._exit(1)


def _rank_main(rank, handle, fn, args, options, conn, launcher_pid):
    """Body of one local rank: attach, run, report ("ok", value) or ("error", text)."""
    try:
        die_with_launcher(launcher_pid)
        pool = Pool.attach(handle)
        kernel = options.pop("kernel")
        comm = comm_class(kernel).open(pool, rank, **options)
        try:
            result = fn(comm, *args)
        finally:
            comm.close()
        conn.send(("ok", result))
    except BaseException as exc:  # report everything, including KeyboardInterrupt
        text = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, RunError):
            text += "\n" + traceback.format_exc()
        try:
            conn.send(("error", text))
        finally:
            os._exit(1)
    finally:
        conn.close()


def run_local(nranks: int, fn, args=(), *, pool: str | PoolSpec = "shm", slot_bytes: int = 1 << 20,
              coherence: Coherence | str | None = None, timeout_s: float = 10.0, writeback: str = "auto",
              kernel: str = "cython", pool_latency_ns: float = 0.0, pool_bw_bytes_per_ns: float = 0.0,
              allreduce_large_bytes: int = ALLREDUCE_LARGE_BYTES, keep_going: bool = False) -> list:
    """Run ``fn(comm, *args)`` on `nranks` forked processes sharing one pool; return their results.

    slot_bytes: the largest block a rank may send. timeout_s: per wait inside the ranks.
    kernel: 'cython' or 'reference' (the pure-Python twin, for tests).
    pool_latency_ns, pool_bw_bytes_per_ns: emulated CXL timing, see `PoolComm.open` (0 = off).
    allreduce_large_bytes: the allreduce algorithms' threshold, see `PoolComm.open`.
    keep_going: a failed or dead rank does not end the others; its result is a `Failed`
    (RankFailure only when every rank failed).
    """
    check_np(nranks)
    spec = parse_pool_spec(pool) if isinstance(pool, str) else pool
    Coherence.parse(coherence or spec.default_coherence, "--coherence")
    timing_options(comm_class(kernel), pool_latency_ns, pool_bw_bytes_per_ns)  # check before forking
    options = dict(coherence=coherence, timeout_s=timeout_s, writeback=writeback, kernel=kernel,
                   pool_latency_ns=pool_latency_ns, pool_bw_bytes_per_ns=pool_bw_bytes_per_ns,
                   allreduce_large_bytes=check_large_bytes(allreduce_large_bytes))
    ctx = multiprocessing.get_context("fork")
    created = Pool.create(spec, nranks, slot_bytes)
    handle = created.handle
    created.close()
    procs, conns = [], []
    try:
        for rank in range(nranks):
            parent_end, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_rank_main, args=(rank, handle, fn, args, options, child_end, os.getpid()),
                               name=f"cxlsim-rank-{rank}", daemon=True)
            proc.start()
            child_end.close()
            procs.append(proc)
            conns.append(parent_end)
        return _collect(procs, conns, timeout_s + GRACE_S, keep_going)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(1.0)
        created.unlink()


def _collect(procs, conns, grace_s: float, keep_going: bool = False) -> list:
    """Gather one message per rank; a rank that exits without one has died.

    A healthy run may take as long as it needs. Once a rank reports a failure, the others
    get `grace_s` to finish (they time out naming the missing ranks); then they are killed.
    Once a rank dies, the others are killed at once: they could only wait for it. With
    `keep_going`, the others run to their end whatever happened to the failed ranks.
    """
    results, failures = {}, {}
    pending = dict(enumerate(conns))
    give_up_at = None
    while pending:
        timeout = None if give_up_at is None else max(0.0, give_up_at - time.monotonic())
        ready = wait(list(pending.values()) + [procs[r].sentinel for r in pending], timeout=timeout)
        if not ready:
            for rank in pending:
                failures[rank] = f"still running {grace_s:g} s after rank(s) {sorted(failures)} failed; killed"
            break
        died = []
        for rank in list(pending):
            conn = pending[rank]
            if conn not in ready and procs[rank].sentinel not in ready:
                continue
            try:
                status, value = conn.recv()
            except (EOFError, OSError):
                procs[rank].join(1.0)
                status, value = "error", _death_message(procs[rank].exitcode)
                died.append(rank)
            if status == "ok":
                results[rank] = value
            else:
                failures[rank] = value
                if not keep_going:
                    give_up_at = give_up_at or time.monotonic() + grace_s
            del pending[rank]
        if died and pending and not keep_going:
            what = "; ".join(f"rank {r} {failures[r]}" for r in died)
            for rank in pending:
                procs[rank].kill()
                failures[rank] = f"ended by the launcher at once: {what}"
            break
    if failures and (not keep_going or not results):
        raise RankFailure(failures)
    return [results[r] if r in results else Failed(failures[r]) for r in range(len(procs))]


def _death_message(exitcode) -> str:
    if exitcode is None:
        return "died without a report"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if exitcode == -signal.SIGKILL:
            return (f"died from {name} (killed by another process, or by the kernel's out-of-memory killer: "
                    "see dmesg)")
        return f"died from {name}"
    return f"exited with code {exitcode} without a report"


def run_mpi(fn, args=(), *, pool: str | PoolSpec = "shm", slot_bytes: int = 1 << 20,
            coherence: Coherence | str | None = None, timeout_s: float = 10.0, writeback: str = "auto",
            pool_latency_ns: float = 0.0, pool_bw_bytes_per_ns: float = 0.0,
            allreduce_large_bytes: int = ALLREDUCE_LARGE_BYTES):
    """Inside an MPI job: build a pool over MPI.COMM_WORLD and return ``fn(comm, mpi_comm, *args)`` on every rank.

    pool_latency_ns, pool_bw_bytes_per_ns: emulated CXL timing, see `PoolComm.open` (0 = off).
    allreduce_large_bytes: the allreduce algorithms' threshold, see `PoolComm.open`.
    """
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    spec = parse_pool_spec(pool) if isinstance(pool, str) else pool
    created, handle, error = None, None, None
    if world.rank == 0:
        try:
            created = Pool.create(spec, world.size, slot_bytes)
            handle = created.handle
        except Exception as exc:  # every rank must learn of it, or the others hang in bcast
            error = exc
    handle, error = world.bcast((handle, error), root=0)
    if error is not None:
        raise error
    try:
        comm = comm_class("cython").open(Pool.attach(handle), world.rank, coherence=coherence, timeout_s=timeout_s,
                                         writeback=writeback, pool_latency_ns=pool_latency_ns,
                                         pool_bw_bytes_per_ns=pool_bw_bytes_per_ns,
                                         allreduce_large_bytes=allreduce_large_bytes)
        world.Barrier()
        try:
            return fn(comm, world, *args)
        finally:
            comm.close()
    finally:
        if created is not None:
            created.close()
            created.unlink()
