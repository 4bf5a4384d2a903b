"""The OSU-style allgather harness, run on every rank.

It follows osu_allgather (OMB 5.3): per size, a barrier, then warm-up plus timed
iterations, each timing one allgather alone with a barrier after it outside the
timed span; the per-rank mean is reported as avg/min/max across ranks, in us.
Iteration counts default to OMB's: 200 warm-up + 1000 timed up to 8 KiB, 10 + 100
above. Every side (pool copy, pool zero-copy, bare sync, MPI) runs through the same
loop, on the same ranks, in the same process run, one after the other per size.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from cxlsim.emulator import _kernels
from cxlsim.errors import InputError, RunError

LARGE_MESSAGE_BYTES = 8192  # OMB's LARGE_MESSAGE_SIZE
SIDES = ("copy", "zero-copy", "sync", "mpi")


class ValidationError(RunError):
    """A rank received wrong or stale data."""


def osu_counts(size_bytes: int, iterations: int | None = None, warmup: int | None = None) -> tuple[int, int]:
    """(warm-up, timed) iterations for a message size, OMB 5.3 defaults unless given."""
    small = size_bytes <= LARGE_MESSAGE_BYTES
    return (warmup if warmup is not None else (200 if small else 10),
            iterations if iterations is not None else (1000 if small else 100))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """What to measure. sizes: bytes per rank. sides: any of SIDES, run in this order per size.
    iterations/warmup: None for OMB's defaults. validate: check contents every iteration
    (the contents change every iteration, so a stale epoch is caught)."""

    sizes: tuple[int, ...]
    sides: tuple[str, ...] = ("copy",)
    iterations: int | None = None
    warmup: int | None = None
    validate: bool = False

    def __post_init__(self):
        for side in self.sides:
            if side not in SIDES:
                raise InputError(f"side: expected one of {SIDES}, got {side!r}")
        for name in ("iterations", "warmup"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < (1 if name == "iterations" else 0)):
                raise InputError(f"--{name}: expected a whole number {'>= 1' if name == 'iterations' else '>= 0'}, got {value!r}")


def pattern(rank: int, iteration: int) -> int:
    """The byte every element of `rank`'s block holds in `iteration` (changes every iteration)."""
    return (rank * 37 + iteration * 11 + 1) % 256


def time_loop(op, barrier, warmup: int, iterations: int, before=None, after=None) -> float:
    """osu_allgather's loop: returns this rank's mean seconds per timed `op()`."""
    total = 0.0
    barrier()
    for i in range(warmup + iterations):
        if before is not None:
            before(i)
        t0 = time.perf_counter()
        op()
        t1 = time.perf_counter()
        if i >= warmup:
            total += t1 - t0
        if after is not None:
            after(i)
        barrier()
    return total / iterations


class _Side:
    """Buffers and the timed operation of one side at one size (uint8 blocks of n bytes)."""

    def __init__(self, name: str, comm, mpi, n: int, validate: bool):
        self.name, self.comm, self.n = name, comm, n
        size, rank = comm.size, comm.rank
        self.send = np.full(n, pattern(rank, 0), dtype=np.uint8)
        self.recv = np.zeros(size * n, dtype=np.uint8)
        self.result = None
        self.checksum = None
        self.op = {
            "copy": lambda: comm.allgather(self.send, self.recv),
            "zero-copy": self._zero_copy_op(),
            "sync": lambda: comm.allgather_in_place(n),
            "mpi": lambda: mpi.Allgather(self.send, self.recv),
        }[name]
        self.before = self.after = None
        if validate and name != "sync":
            self.before, self.after = self._fill, self._check

    def _zero_copy_op(self):
        """What an application does per zero-copy call, with its buffers bound as the copy side's are."""
        comm, n, send, read_pass, write_block = self.comm, self.n, self.send, _kernels.read_pass, _kernels.write_block

        def zero_copy():
            block = comm.send_view(n)
            write_block(block, send)  # write the rank's block into its slot (memcpy, as copy mode's)
            self.result = result = comm.allgather_zero_copy(block)
            self.checksum = read_pass(result.array)  # one read pass over all blocks, in place
        return zero_copy

    def _fill(self, i):
        self.send.fill(pattern(self.comm.rank, i))

    def _check(self, i):
        if self.n == 0:
            return
        if self.name == "zero-copy":
            # Check the timed read pass's checksum, so validation never touches the pool itself
            # (an extra read would change which caches hold the lines the next write invalidates).
            want = sum(_kernels.checksum_of_fill(pattern(r, i), self.n) for r in range(self.comm.size)) % 2**64
            if self.checksum == want:
                return
            got = np.array(self.result.array)
        else:
            got = self.recv.reshape(self.comm.size, self.n)
        expected = np.array([pattern(r, i) for r in range(self.comm.size)], dtype=np.uint8)
        bad = np.nonzero(~np.all(got == expected[:, None], axis=1))[0]
        if bad.size:
            r = int(bad[0])
            raise ValidationError(f"rank {self.comm.rank}, {self.name} allgather of {self.n} B, iteration {i}: "
                                  f"block {r} holds {np.unique(got[r])[:4].tolist()}, expected {int(expected[r])} "
                                  f"(stale or torn data)")


def side_op(name: str, comm, n: int, mpi=None):
    """The operation the bench times for side `name` at n bytes per rank (no validation): what
    the calibration's per-call overhead measures at np = 1, 0 B, so it is the same code."""
    return _Side(name, comm, mpi, n, False).op


def run_plan(comm, plan: BenchPlan, mpi=None, progress=None) -> list[dict]:
    """Measure every size and side; returns rows (identical on every rank) of
    side, np, size_bytes, avg_us, min_us, max_us, iterations."""
    if "mpi" in plan.sides and mpi is None:
        raise InputError("the MPI baseline needs an MPI launch (mpiexec, or --baseline mpi)")
    rows = []
    for n in plan.sizes:
        warmup, iterations = osu_counts(n, plan.iterations, plan.warmup)
        for name in plan.sides:
            side = _Side(name, comm, mpi, n, plan.validate)
            mean_s = time_loop(side.op, comm.barrier, warmup, iterations, side.before, side.after)
            means = np.empty(comm.size, dtype=np.float64)
            comm.allgather(np.array([mean_s]), means)
            rows.append(dict(side=name, np=comm.size, size_bytes=n, avg_us=float(means.mean() * 1e6),
                             min_us=float(means.min() * 1e6), max_us=float(means.max() * 1e6),
                             iterations=iterations))
        if progress is not None:
            progress(n)
    return rows
