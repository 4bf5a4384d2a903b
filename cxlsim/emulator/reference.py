"""The pure-Python twin of the pool kernels: the allgather protocol, step by step, in numpy.

`ReferenceKernel` does what `_pool_kernel.PoolKernel` does, step by step as
`cxl_allgather` in cxl_ops.h: copy the block into the slot, (flush mode) write its lines
back, sfence, store the flag, write the flag line back, poll every other flag, (flush
mode) invalidate the other slots and mfence, read. Python cannot execute clflushopt, so
it only logs those steps; on one coherent x86 host plain numpy stores and loads are
enough (TSO), so its results are real. Its debug event log matches the Cython kernel's
event for event, which the tests check, and `cxlsim.emulator.cache_model` replays
those logs on non-coherent caches. `ReferenceComm` puts the communicator API on it.

API::

    kernel = ReferenceKernel(mapping, nranks=2, rank=0, ...)   # as _pool_kernel.PoolKernel
    comm = ReferenceComm.open(pool, rank)                       # as comm.PoolComm
    comm.enable_log(); ...; log = comm.log_events()            # replay with cache_model.replay
"""
from __future__ import annotations

import os
import time

import numpy as np

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.emulator import _kernels, _pool_kernel
from cxlsim.emulator.comm import CommMixin
from cxlsim.emulator.reference_collectives import ReferenceCollectives
from cxlsim.errors import InputError, RunError

LINE = _kernels.LINE_BYTES


def _byte_view(obj, writable: bool, name: str) -> np.ndarray:
    """The raw bytes of a contiguous buffer (C or Fortran order) as a 1-D uint8 array; `name` labels errors."""
    view = memoryview(obj)
    if writable and view.readonly:
        raise ValueError(f"{name} is read-only")
    if view.c_contiguous:
        return np.frombuffer(view, dtype=np.uint8)
    if view.f_contiguous:  # its transpose is C-contiguous over the same bytes
        return np.frombuffer(memoryview(np.asarray(view).T), dtype=np.uint8)
    raise ValueError(f"{name} is not contiguous")


class ReferenceKernel:
    """The pure-Python twin of `_pool_kernel.PoolKernel`: same constructor, attributes and methods.

    mapping: a writable buffer over the whole pool; offsets are bytes from its start.
    coherence: 'hw' or 'flush'. writeback_op/invalidate_op: `_kernels.OP_*`, only logged.
    timeout_ns: how long a wait may take (ns). spin_iters: polls before yielding the CPU.
    """

    def __init__(self, mapping, *, nranks, rank, flags_offset, data_offset, slot_stride, slot_bytes,
                 coherence=Coherence.HW, writeback_op=_kernels.OP_NONE, invalidate_op=_kernels.OP_NONE,
                 timeout_ns=10e9, spin_iters=4096):
        nranks, rank = int(nranks), int(rank)
        if not 0 <= rank < nranks:
            raise InputError(f"rank {rank} is outside 0..{nranks - 1}")
        coherence = Coherence.parse(coherence, "coherence")
        if slot_stride % LINE or flags_offset % LINE or data_offset % LINE:
            raise InputError("pool layout: flag lines and slots must be 64-byte aligned")
        self._mem = _byte_view(mapping, True, "pool mapping")
        needed = data_offset + 2 * nranks * slot_stride
        if self._mem.nbytes < needed or flags_offset + nranks * LINE > data_offset:
            size = self._mem.nbytes
            self.close()
            raise InputError(f"pool mapping of {size} bytes is too small for {nranks} ranks "
                             f"with {slot_stride}-byte slots ({needed} bytes needed)")
        if coherence is Coherence.FLUSH and (writeback_op == _kernels.OP_NONE or
                                     invalidate_op not in (_kernels.OP_CLFLUSH, _kernels.OP_CLFLUSHOPT)):
            self.close()
            raise InputError("coherence 'flush' needs a write-back op and an invalidating op (clflush or clflushopt)")
        # One uint64 per flag line: rank r's epoch at flags_offset + 64 r.
        self._flags = self._mem[flags_offset: flags_offset + nranks * LINE].view(np.uint64)[:: LINE // 8]
        self._nranks, self._rank = nranks, rank
        self._flags_offset, self._data_offset, self._slot_stride = int(flags_offset), int(data_offset), int(slot_stride)
        self._flush_mode = coherence is Coherence.FLUSH
        self._writeback_op, self._invalidate_op = int(writeback_op), int(invalidate_op)
        self._spin_iters = int(spin_iters)
        self._slot_bytes = int(slot_bytes)
        self.timeout_ns = float(timeout_ns)
        self._epoch = 0  # steps (cxl_coll.h): step e publishes flag e (data in) or e + 1 (a reader's ack)
        self._round = 0  # data rounds: steps that carry data (their buffer is round % 2)
        self._buffer_epoch = [0, 0]  # the step that last used buffer b
        self._known_done = 0  # every rank finished every step up to this one
        self._missing_flag = 0
        self._pending = None  # a split-phase allreduce in flight (reference_collectives)
        self._pending_ack = None  # (done value, round) of a zero-copy broadcast read: published at the next call
        self._log = None
        self._log_length = 0

    # -- attributes, as PoolKernel's --------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def data_round(self) -> int:
        return self._round

    @property
    def slot_bytes(self) -> int:
        return self._slot_bytes

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._nranks

    @property
    def coherence(self) -> Coherence:
        return Coherence.FLUSH if self._flush_mode else Coherence.HW

    def close(self) -> None:
        """Release the pool mapping; the kernel can no longer be used."""
        self._mem = None
        self._flags = None

    def _check_open(self) -> None:
        if self._mem is None:
            raise RunError("the pool communicator is closed")

    # -- the schedule of cxl_ops.h ----------------------------------------------------
    def _log_event(self, op: int, offset: int, arg: int) -> None:
        if self._log is None:
            return
        if self._log_length < len(self._log):
            self._log[self._log_length] = (op, offset, arg)
        self._log_length += 1

    def _slot(self, round: int, rank: int) -> int:
        return self._data_offset + ((round & 1) * self._nranks + rank) * self._slot_stride

    def _flag(self, rank: int) -> int:
        return self._flags_offset + rank * LINE

    def _range_op(self, op: int, offset: int, length: int) -> None:
        if length == 0 or op == _kernels.OP_NONE:
            return
        self._log_event(PoolEvent.WRITEBACK if op == _kernels.OP_CLWB else PoolEvent.FLUSH, offset, length)

    def _publish(self, epoch: int, round: int, nbytes: int) -> None:
        slot = self._slot(round, self._rank)
        self._log_event(PoolEvent.WRITE, slot, nbytes)
        if self._flush_mode:
            self._range_op(self._writeback_op, slot, nbytes)
        self._log_event(PoolEvent.SFENCE, 0, 0)
        self._flags[self._rank] = epoch  # one aligned 8-byte store, after the data (x86 TSO)
        self._log_event(PoolEvent.FLAG_STORE, self._flag(self._rank), epoch)
        if self._flush_mode:
            self._range_op(self._writeback_op, self._flag(self._rank), 8)

    def _wait_flag(self, r: int, value: int, deadline: float) -> float | None:
        """Spin (yielding) until rank r's flag holds at least `value`, then log the poll. The timeout
        starts at the first yield unless `deadline` (monotonic ns, -1: not started) is given; returns
        the deadline in force, or None if it passed first."""
        spins = 0
        while int(self._flags[r]) < value:
            spins += 1
            if spins < self._spin_iters:
                continue
            os.sched_yield()
            if spins & 63 == 0:
                now = time.monotonic_ns()
                if deadline < 0:
                    deadline = now + self.timeout_ns
                elif now > deadline:
                    return None
        self._log_event(PoolEvent.POLL_FLUSHED if self._flush_mode else PoolEvent.POLL_CACHED, self._flag(r), value)
        return deadline

    def _wait_all(self, epoch: int) -> int:
        """-1 once every rank published `epoch`, else the first rank still missing at the timeout."""
        deadline = -1.0
        for r in range(self._nranks):
            if r == self._rank:
                continue
            deadline = self._wait_flag(r, epoch, deadline)
            if deadline is None:
                return r
        return -1

    # -- the step state of cxl_coll.h ---------------------------------------------------
    def _wait_or_raise(self, value: int, what: str) -> None:
        if self._wait_all(value) >= 0:
            self._missing_flag = value
            self._raise_timeout(what)

    def _claim(self, will_write: bool, what: str) -> int:
        """cxl_coll_claim: take the next step and data round; wait for the buffer's last step first if writing."""
        nxt = self._round + 1
        last = self._buffer_epoch[nxt & 1]
        self._settle()
        if will_write and last > self._known_done:
            self._wait_or_raise(last + 1, what)
            self._known_done = last
        self._round = nxt
        self._epoch += 1
        self._buffer_epoch[nxt & 1] = self._epoch
        return nxt

    def _settle(self) -> None:
        """cxl_coll_settle: publish a zero-copy broadcast reader's deferred acknowledgement."""
        if self._pending_ack is not None:
            value, round = self._pending_ack
            if int(self._flags[self._rank]) < value:  # a later publish already said more: flags only grow
                self._publish(value, round, 0)
            self._pending_ack = None

    def _note_all_written(self, epoch: int) -> None:
        self._known_done = max(self._known_done, epoch - 1)

    def _check_idle(self) -> None:
        if self._pending is not None:
            raise RunError("a split-phase allreduce is in flight: call allreduce_wait() before the next collective")

    def prepare_write(self) -> None:
        """cxl_coll_prepare_write: wait until this rank may write its slot of the next data round."""
        self._check_open()
        self._check_idle()
        last = self._buffer_epoch[(self._round + 1) & 1]
        self._settle()
        if last > self._known_done:
            self._wait_or_raise(last + 1, "zero-copy buffer reuse")
            self._known_done = last

    def barrier(self) -> None:
        """cxl_coll_barrier: one step without data."""
        self._check_open()
        self._check_idle()
        self._settle()
        self._epoch += 1
        self._publish(self._epoch, self._round, 0)
        self._wait_or_raise(self._epoch, "barrier")
        self._note_all_written(self._epoch)

    def _acquire_slots(self, round: int, nbytes: int) -> None:
        if not self._flush_mode:
            return
        for r in range(self._nranks):
            if r != self._rank:
                self._range_op(self._invalidate_op, self._slot(round, r), nbytes)
        self._log_event(PoolEvent.MFENCE, 0, 0)

    def _allgather(self, send: np.ndarray | None, recv: np.ndarray | None, nbytes: int) -> None:
        """cxl_coll_allgather_step: send None = zero-copy (already in the slot), recv None = read in place."""
        self._check_idle()
        if nbytes:
            round = self._claim(True, "allgather")
        else:
            self._settle()
            self._epoch += 1
            round = self._round
        flag = self._epoch
        own = self._slot(round, self._rank)
        if send is not None and nbytes and not self._is_at(send, own):
            self._mem[own: own + nbytes] = send
        self._publish(flag, round, nbytes)
        self._wait_or_raise(flag, "allgather")
        self._note_all_written(self._epoch)
        self._acquire_slots(round, nbytes)
        for r in range(self._nranks):
            slot = self._slot(round, r)
            if recv is not None:
                recv[r * nbytes: (r + 1) * nbytes] = self._mem[slot: slot + nbytes]
            self._log_event(PoolEvent.READ, slot, nbytes)

    # -- public API, as PoolKernel's --------------------------------------------------
    def allgather(self, sendbuf, recvbuf) -> None:
        """Gather every rank's `sendbuf` into `recvbuf` (block r at r * len(sendbuf) bytes).

        Both are contiguous buffers; recvbuf holds exactly size * sendbuf bytes.
        Raises CollectiveTimeout naming the ranks that did not arrive.
        """
        self._check_open()
        send = _byte_view(sendbuf, False, "allgather: sendbuf")
        recv = _byte_view(recvbuf, True, "allgather: recvbuf")
        n = send.nbytes
        if n > self._slot_bytes:
            raise InputError(f"allgather: sendbuf has {n} bytes but pool slots hold {self._slot_bytes}")
        if recv.nbytes != n * self._nranks:
            raise InputError(f"allgather: recvbuf has {recv.nbytes} bytes, expected {self._nranks} x {n}")
        self._allgather(send, recv, n)

    def _is_at(self, data: np.ndarray, offset: int) -> bool:
        """Whether byte array `data` starts at pool byte `offset` (a caller's view of its own slot)."""
        return data.__array_interface__["data"][0] == self._mem.__array_interface__["data"][0] + offset

    def allgather_from(self, sendbuf) -> None:
        """The kernel side of allgather_view: copy `sendbuf` into this rank's slot (unless it is that
        slot) and run the call; the caller reads the slots in place."""
        self._check_open()
        send = _byte_view(sendbuf, False, "allgather_view: sendbuf")
        if send.nbytes > self._slot_bytes:
            raise InputError(f"allgather_view: sendbuf has {send.nbytes} bytes but pool slots hold {self._slot_bytes}")
        self._allgather(send, None, send.nbytes)

    def allgather_in_place(self, nbytes: int) -> None:
        """Zero-copy allgather of `nbytes` per rank already written into this rank's next slot."""
        self._check_open()
        nbytes = int(nbytes)
        if nbytes < 0:
            raise OverflowError(f"allgather: nbytes must be 0 or more, got {nbytes}")
        if nbytes > self._slot_bytes:
            raise InputError(f"allgather: {nbytes} bytes per rank but pool slots hold {self._slot_bytes}")
        self._allgather(None, None, nbytes)

    def slot_offset(self, round: int, rank: int) -> int:
        """Byte offset in the pool of `rank`'s slot in data round `round` (its buffer is round % 2)."""
        return self._slot(int(round), int(rank))

    def flag_epochs(self) -> list[int]:
        """Each rank's flag as stored: e once its data of step e is published, e + 1 once it finished reading it
        (a plain read of every flag line; see cxl_coll.h)."""
        self._check_open()
        return [int(e) for e in self._flags]

    def _raise_timeout(self, what: str = "allgather"):
        values = epochs = self.flag_epochs()
        missing = [i for i, v in enumerate(values) if i != self._rank and v < self._missing_flag]
        raise _pool_kernel.CollectiveTimeout(
            f"rank {self._rank}: {what} epoch {self._epoch} timed out after "
            f"{self.timeout_ns / 1e9:g} s waiting for rank(s) {missing} "
            f"(they last published epoch(s) {[epochs[i] for i in missing]})", missing)

    def enable_log(self, capacity: int = 100000) -> None:
        """Debug mode: log every write, flush, fence, flag store, poll and read (see cxl_ops.h)."""
        self._log = np.zeros((capacity, 3), dtype=np.int64)
        self._log_length = 0

    def log_events(self) -> np.ndarray:
        """The logged events as an (n, 3) int64 array of (op, offset, argument)."""
        if self._log is None:
            raise RunError("the event log is off; call enable_log() first")
        if self._log_length > len(self._log):
            raise RunError(f"the event log overflowed ({self._log_length} events, capacity {len(self._log)})")
        return self._log[: self._log_length].copy()


class ReferenceComm(CommMixin, ReferenceCollectives, ReferenceKernel):
    """A rank's communicator on the pure-Python twin; build it with `ReferenceComm.open(pool, rank)`."""
