"""The timed operations of the OSU-style collective benchmarks other than allgather.

Each follows its OMB 5.3 benchmark: osu_allreduce and osu_reduce_scatter (MPI_FLOAT,
MPI_SUM; the size is the whole vector in bytes, and osu_reduce_scatter gives each rank
size / 4 / P floats), osu_bcast (MPI_CHAR from root 0), osu_alltoall (size bytes per
destination) and osu_barrier (no data). A side is the pool ("copy"), the pool's fused
zero-copy call plus one read pass over the result in place ("zero-copy": broadcast, alltoall),
the copy call plus one read pass over its result in recvbuf ("copy-read": zero-copy's baseline, what a
copy-mode caller that uses its result does), or MPI through mpi4py ("mpi"), timed in the same loop as allgather's (`bench.time_loop`). With validation every
iteration's inputs change (`pattern`), so stale or misplaced data is caught.
"""
from __future__ import annotations

import numpy as np

from cxlsim.emulator._kernels import checksum_of_fill, read_pass
from cxlsim.errors import InputError, RunError

COLLECTIVES = ("allgather", "allreduce", "reduce_scatter", "broadcast", "alltoall", "barrier")
ZERO_COPY_COLLECTIVES = ("allgather", "broadcast", "alltoall")  # those with a fused zero-copy call
FLOAT_BYTES = 4  # osu_allreduce and osu_reduce_scatter reduce MPI_FLOAT
MPI_NAMES = {"allgather": "MPI_Allgather", "allreduce": "MPI_Allreduce", "reduce_scatter": "MPI_Reduce_scatter_block",
             "broadcast": "MPI_Bcast", "alltoall": "MPI_Alltoall", "barrier": "MPI_Barrier"}


class ValidationError(RunError):
    """A rank received wrong or stale data."""


def pattern(rank: int, iteration: int) -> int:
    """The value every element of `rank`'s data holds in `iteration` (changes every iteration; < 256)."""
    return (rank * 37 + iteration * 11 + 1) % 256


def read_pass_holds(checksum, blocks, values, n: int) -> bool:
    """Whether a timed read pass saw what it should: its checksum equals that of the blocks filled with
    `values` (one per block, n bytes each: stale or torn data changes it), and each block's first and last
    byte holds its value (a misplaced block shows). The check of the sides whose timed call ends in a read
    pass ('zero-copy', 'copy-read'): it loads 2 bytes per block (lines the pass left in the cache) and
    allocates nothing, so both sides leave their caches as their calls did. Validation that reads or
    builds whole buffers between calls changed the next calls' times unevenly: np 2, fast placement,
    128 KiB, medians (us) with / without the full check, copy+read allgather 19.9-21.6 / 26.6-27.9,
    alltoall 15.7-17.2 / 22.4-25.6, zero-copy alltoall (its expected row built) 18.3-19.2 / 13.8-15.5."""
    if checksum != sum(checksum_of_fill(v, n) for v in values) % 2**64:
        return False
    return all(block[0] == v and block[n - 1] == v for block, v in zip(blocks, values))


def check_size(collective: str, size: int, nranks: int) -> None:
    """Refuse a message size the collective's OSU loop cannot run (InputError naming --sizes)."""
    if collective == "allreduce" and size % FLOAT_BYTES:
        raise InputError(f"--sizes: allreduce reduces floats, so each size must be a multiple of 4 bytes, got {size}")
    if collective == "reduce_scatter" and size < FLOAT_BYTES * nranks:
        raise InputError(f"--sizes: reduce_scatter of {size} B gives no float to each of {nranks} ranks "
                         f"(at least {FLOAT_BYTES * nranks} B)")


def slot_bytes_for(collective: str, size: int, nranks: int) -> int:
    """The pool slot that holds one call of `size` (alltoall: P blocks of size; the others: size)."""
    return size * nranks if collective == "alltoall" else size


class TimedSide:
    """What a side's timed call leaves for its untimed check: `result` (a zero-copy call's) and `checksum` (its
    read pass's), kept in the list `out` (item stores into a list the call holds cost a few instructions, an
    instance attribute's store about a hundred: the timed calls of both sides pay alike)."""

    def __init__(self):
        self.out = [None, None]

    @property
    def result(self):
        return self.out[0]

    @property
    def checksum(self):
        return self.out[1]


class CollectiveSide(TimedSide):
    """Buffers and the timed operation of one side ('copy' = the pool, 'mpi') of a collective at one size."""

    def __init__(self, collective: str, name: str, comm, mpi, n: int, validate: bool):
        self.collective, self.name, self.comm, self.n = collective, name, comm, n
        P, me = comm.size, comm.rank
        if name not in ("copy", "mpi") and not (name in ("zero-copy", "copy-read") and collective in ZERO_COPY_COLLECTIVES):
            raise InputError(f"side {name!r}: {collective} runs on the pool ('copy') or MPI ('mpi') only")
        super().__init__()
        op_sum = None
        if name == "mpi":
            from mpi4py import MPI

            op_sum = MPI.SUM
        if collective == "allreduce":
            self.send, self.recv = np.zeros(n // FLOAT_BYTES, np.float32), np.zeros(n // FLOAT_BYTES, np.float32)
            self.op = (lambda: comm.allreduce(self.send, self.recv, "sum")) if name == "copy" else \
                (lambda: mpi.Allreduce(self.send, self.recv, op=op_sum))
        elif collective == "reduce_scatter":
            count = n // FLOAT_BYTES // P
            self.send, self.recv = np.zeros(count * P, np.float32), np.zeros(count, np.float32)
            self.op = (lambda: comm.reduce_scatter(self.send, self.recv, "sum")) if name == "copy" else \
                (lambda: mpi.Reduce_scatter_block(self.send, self.recv, op=op_sum))
        elif collective == "broadcast":
            self.send = self.recv = np.zeros(n, np.uint8)
            self.op = {"copy": lambda: comm.broadcast(self.recv, 0), "mpi": lambda: mpi.Bcast(self.recv, root=0),
                       "zero-copy": self._broadcast_view_op(), "copy-read": self._broadcast_read_op()}.get(name)
        elif collective == "alltoall":
            self.send, self.recv = np.zeros(n * P, np.uint8), np.zeros(n * P, np.uint8)
            self.op = {"copy": lambda: comm.alltoall(self.send, self.recv), "mpi": lambda: mpi.Alltoall(self.send, self.recv),
                       "zero-copy": self._alltoall_view_op(), "copy-read": self._alltoall_read_op()}.get(name)
        elif collective == "barrier":
            self.send = self.recv = np.zeros(0, np.uint8)
            self.op = comm.barrier if name == "copy" else mpi.Barrier
        else:
            raise InputError(f"collective: expected one of {COLLECTIVES[1:]}, got {collective!r}")
        if self.op is None:
            raise InputError(f"side {name!r}: {collective} runs on the pool ('copy') or MPI ('mpi') only")
        self.before = self.after = None
        if validate and collective != "barrier":
            self.before, self.after = self._fill, self._check
        self.me = me

    def _broadcast_view_op(self):
        """The zero-copy broadcast: the fused call (the root's kernel puts its buffer in), and on every
        other rank one read pass over the root's slot in place (the root holds its data already, as
        MPI_Bcast's root does, so it reads nothing). Its names are bound as the copy-read side's are."""
        comm, n, send, uint8, out = self.comm, self.n, self.send, np.uint8, self.out
        view = comm.broadcast_view

        def root():
            out[0] = view(n, uint8, 0, send)

        def reader():
            out[0] = result = view(n, uint8, 0)
            out[1] = read_pass(result.array)
        return root if comm.rank == 0 else reader

    def _broadcast_read_op(self):
        """The copy broadcast, then on every other rank one read pass over the received buffer (local
        memory; the root reads nothing, as in the zero-copy side)."""
        comm, recv, out = self.comm, self.recv, self.out
        broadcast = comm.broadcast

        def root():
            broadcast(recv, 0)

        def reader():
            broadcast(recv, 0)
            out[1] = read_pass(recv)
        return root if comm.rank == 0 else reader

    def _alltoall_read_op(self):
        """The copy alltoall, then one read pass over the received blocks (local memory)."""
        alltoall, send, recv, out = self.comm.alltoall, self.send, self.recv, self.out

        def copy_read():
            alltoall(send, recv)
            out[1] = read_pass(recv)
        return copy_read

    def _alltoall_view_op(self):
        """The zero-copy alltoall: the fused call (the kernel puts the row in), one read pass over the column's
        rows (the own block from send)."""
        view, send, out = self.comm.alltoall_view, self.send, self.out

        def zero_copy():
            out[0] = result = view(send)
            out[1] = read_pass(result.rows)
        return zero_copy

    def _fill(self, i: int) -> None:
        P, me = self.comm.size, self.me
        if self.collective == "alltoall":  # block d of rank me: pattern(me + 7 d, i), so a misplaced block shows
            self.send.reshape(P, self.n)[:] = np.array([pattern(me + 7 * d, i) for d in range(P)], np.uint8)[:, None]
        elif self.collective == "broadcast":
            self.send.fill(pattern(0, i) if me == 0 else pattern(me + 1, i + 1))
        else:
            self.send.fill(pattern(me, i))

    def _check(self, i: int) -> None:
        P, me = self.comm.size, self.me
        if self.collective in ("allreduce", "reduce_scatter"):
            want = np.float32(sum(pattern(r, i) for r in range(P)))  # small integers: exact in float32
            got = self.recv
        elif self.collective == "broadcast":
            want, got = np.uint8(pattern(0, i)), self.recv
            if self.name in ("zero-copy", "copy-read"):  # the root read nothing (its buffer is its input)
                blocks = (self.result.array if self.name == "zero-copy" else self.recv,)
                if me == 0 or self.n == 0 or read_pass_holds(self.checksum, blocks, (pattern(0, i),), self.n):
                    return
                if self.name == "zero-copy":
                    got = np.array(self.result.array)
        else:
            values = [pattern(s + 7 * me, i) for s in range(P)]
            if self.name in ("zero-copy", "copy-read"):  # check the read pass, so validation leaves the caches alone
                blocks = self.result.rows if self.name == "zero-copy" else self.recv.reshape(P, self.n)
                if self.n == 0 or read_pass_holds(self.checksum, blocks, values, self.n):
                    return
            want = np.repeat(np.array(values, np.uint8), self.n)
            got = self.recv if self.name != "zero-copy" else np.array(self.result.array).reshape(-1)
        bad = np.nonzero(got != want)[0]
        if bad.size:
            at = int(bad[0])
            shown = want if np.ndim(want) == 0 else want[at]
            raise ValidationError(f"rank {me}, {self.name} {self.collective} of {self.n} B, iteration {i}: element "
                                  f"{at} holds {got[at]}, expected {shown} (stale or misplaced data)")
