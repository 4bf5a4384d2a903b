"""The pure-Python twins of the pool collectives of cxl_coll.h, step by step, in numpy.

`ReferenceCollectives` adds broadcast, alltoall, reduce_scatter and the (split-phase)
allreduce to `reference.ReferenceKernel`, each doing what its C kernel in cxl_coll.h does,
in the same order, with the same flag values (e: data of step e published, e + 1: done
reading step e; a broadcast step takes both) and the same debug event log. The reductions are `left_fold`: an explicit
loop over ranks 0..P-1, vectorised across elements only, with cxl_reduce.h's rules
(integer sum and product wrap; a float min or max is NaN if either operand is, as
numpy.minimum/maximum). Tests compare the Cython kernels with these twins bit for bit.
"""
from __future__ import annotations


import numpy as np

from cxlsim.coherence import PoolEvent
from cxlsim.emulator import _pool_kernel
from cxlsim.errors import InputError, RunError

LINE = 64  # bytes per cache line (CXL_LINE)


def combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a op b element-wise, as cxl_reduce.h's combine rule for op (a is the fold so far)."""
    with np.errstate(all="ignore"):
        if op == "sum":
            return a + b  # integer arrays wrap around
        if op == "prod":
            return a * b
        if op in ("min", "max"):
            if a.dtype.kind == "f":  # (a < b || a != a) ? a : b, and the mirror for max
                better = (a < b) if op == "min" else (a > b)
                return np.where(better | (a != a), a, b)
            return np.minimum(a, b) if op == "min" else np.maximum(a, b)
        if op == "band":
            return a & b
        if op == "bor":
            return a | b
        if op == "bxor":
            return a ^ b
        truth = {"land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor}[op]
        return truth(a != 0, b != 0).astype(a.dtype)


def left_fold(op: str, blocks: list[np.ndarray]) -> np.ndarray:
    """((blocks[0] op blocks[1]) op blocks[2]) ... : one explicit loop over the blocks (ranks 0..P-1)."""
    acc = blocks[0].copy()
    for block in blocks[1:]:
        acc = combine(op, acc, block)
    return acc


def share(count: int, itemsize: int, nranks: int, rank: int) -> tuple[int, int]:
    """cxl_coll_share: rank's [lo, hi) of count elements, boundaries on 64-byte lines."""
    unit = LINE // itemsize
    units = -(-count // unit)
    lo, hi = units * rank // nranks * unit, units * (rank + 1) // nranks * unit
    return min(lo, count), min(hi, count)


def _bytes_of(array, writable: bool, name: str) -> np.ndarray:
    view = memoryview(array)
    if writable and view.readonly:
        raise ValueError(f"{name} is read-only")
    if not view.contiguous:
        raise ValueError(f"{name} is not contiguous")
    return np.frombuffer(view.cast("B") if view.c_contiguous else memoryview(np.asarray(view).T).cast("B"),
                         dtype=np.uint8)


class ReferenceCollectives:
    """The collectives of cxl_coll.h on a `ReferenceKernel`'s pool (mixed into `ReferenceComm`)."""

    # -- the helpers of cxl_coll.h ----------------------------------------------------------
    def _wait_one(self, r: int, value: int, what: str) -> None:
        """cxl_coll_wait_one: wait for rank r's flag alone."""
        if self._wait_flag(r, value, -1.0) is None:
            self._missing_flag = value
            self._raise_timeout(what)

    def _copy_out(self, dst: np.ndarray, src: int, n: int) -> None:
        dst[:n] = self._mem[src: src + n]
        self._log_event(PoolEvent.READ, src, n)

    def _publish_range(self, value: int, round: int, offset: int, n: int) -> None:
        if offset == 0:
            self._publish(value, round, n)
            return
        start = self._slot(round, self._rank) + offset
        self._log_event(PoolEvent.WRITE, start, n)
        if self._flush_mode:
            self._range_op(self._writeback_op, start, n)
        self._publish(value, round, 0)

    def _acquire_range(self, round: int, offset: int, n: int) -> None:
        if not self._flush_mode:
            return
        for r in range(self._nranks):
            if r != self._rank:
                self._range_op(self._invalidate_op, self._slot(round, r) + offset, n)
        self._log_event(PoolEvent.MFENCE, 0, 0)

    def _invalidate_one(self, start: int, n: int) -> None:
        if self._flush_mode:
            self._range_op(self._invalidate_op, start, n)
            self._log_event(PoolEvent.MFENCE, 0, 0)

    def _fold_slots(self, dtype: np.dtype, op: str, round: int, offset: int, out: np.ndarray, count: int) -> None:
        """cxl_coll_fold_slots: out (count elements' bytes) = left fold of every rank's slot at offset."""
        nbytes = count * dtype.itemsize
        blocks = []
        for r in range(self._nranks):
            start = self._slot(round, r) + offset
            if r != self._rank:
                self._log_event(PoolEvent.READ, start, nbytes)
            blocks.append(self._mem[start: start + nbytes].view(dtype))
        if count:
            out[:nbytes] = left_fold(op, blocks).view(np.uint8)

    # -- the collectives -----------------------------------------------------------------
    def broadcast(self, buf, root: int = 0) -> None:
        """cxl_coll_broadcast: root's buf reaches every rank's buf."""
        self._check_open()
        self._check_idle()
        if not 0 <= root < self._nranks:
            raise InputError(f"broadcast: root {root} is outside 0..{self._nranks - 1}")
        data = _bytes_of(buf, True, "broadcast: buf")
        nbytes, is_root = data.nbytes, self._rank == root
        chunk = min(nbytes, self._slot_bytes)
        for off in range(0, nbytes, chunk or 1):
            n = min(chunk, nbytes - off)
            round = self._claim(is_root, "broadcast")
            e, slot = self._epoch, self._slot(round, root)
            if is_root:
                self._mem[slot: slot + n] = data[off: off + n]
                self._publish(e, round, n)
                self._epoch += 1  # the acknowledgement's value, e + 1, is this step's too
                continue
            self._wait_one(root, e, "broadcast")
            self._invalidate_one(slot, n)
            self._copy_out(data[off:], slot, n)
            self._publish(e + 1, round, 0)
            self._epoch += 1

    def alltoall(self, sendbuf, recvbuf) -> None:
        """cxl_coll_alltoall: block d of sendbuf goes to rank d, as block `rank` of its recvbuf."""
        self._check_open()
        self._check_idle()
        send = _bytes_of(sendbuf, False, "alltoall: sendbuf")
        recv = _bytes_of(recvbuf, True, "alltoall: recvbuf")
        P, me = self._nranks, self._rank
        if send.nbytes % P or recv.nbytes != send.nbytes:
            raise InputError(f"alltoall: sendbuf has {send.nbytes} bytes and recvbuf {recv.nbytes}; both must hold "
                             f"the same {P} equal blocks")
        nbytes = send.nbytes // P
        in_place = send.__array_interface__["data"][0] == recv.__array_interface__["data"][0]
        chunk = min(nbytes, self._slot_bytes // P)
        if chunk == 0 and nbytes:
            raise self._too_small("alltoall")
        for off in range(0, nbytes, chunk or 1):
            n = min(chunk, nbytes - off)
            round = self._claim(True, "alltoall")
            e, mine = self._epoch, self._slot(round, me)
            for d in range(P):
                self._mem[mine + d * n: mine + (d + 1) * n] = send[d * nbytes + off: d * nbytes + off + n]
            self._publish(e, round, P * n)
            own = me * nbytes + off  # this rank's own block goes straight from send to recv
            if not in_place:
                recv[own: own + n] = send[own: own + n]
            self._wait_or_raise(e, "alltoall")
            self._note_all_written(e)
            self._acquire_range(round, me * n, n)
            for r in range(P):
                src, dst = self._slot(round, r) + me * n, r * nbytes + off
                if r != me:
                    self._copy_out(recv[dst:], src, n)
                elif in_place:
                    recv[dst: dst + n] = self._mem[src: src + n]

    def broadcast_in_place(self, count: int, dtype, root: int, sendbuf=None) -> None:
        """cxl_coll_broadcast_view, the kernel side of broadcast_view: the root puts `sendbuf` (None: its
        slot is already written) into its slot; readers wait for it and acknowledge at their next call."""
        self._check_open()
        self._check_idle()
        if not 0 <= root < self._nranks:
            raise InputError(f"broadcast_view: root {root} is outside 0..{self._nranks - 1}")
        dtype = np.dtype(dtype)
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise InputError(f"broadcast_view: count must be a whole number >= 0, got {count!r}")
        nbytes, is_root = int(count) * dtype.itemsize, self._rank == root
        if nbytes > self._slot_bytes:
            raise InputError(f"broadcast_view: {count} x {dtype} ({nbytes} bytes) do not fit the pool's "
                             f"{self._slot_bytes}-byte slot (a zero-copy call is one step; broadcast() chunks)")
        if sendbuf is not None and not is_root:
            raise InputError(f"broadcast_view: only the root (rank {root}) passes sendbuf")
        data = None if sendbuf is None else _bytes_of(sendbuf, False, "broadcast_view: sendbuf")
        if data is not None and data.nbytes != nbytes:
            raise InputError(f"broadcast_view: sendbuf has {data.nbytes} bytes, expected {count} x {dtype} = {nbytes}")
        if nbytes == 0:
            return
        round = self._claim(is_root, "broadcast_view")
        e, slot = self._epoch, self._slot(round, root)
        if is_root:
            if data is not None and not self._is_at(data, slot):
                self._mem[slot: slot + nbytes] = data
            self._publish(e, round, nbytes)
            self._epoch += 1
            return
        self._wait_one(root, e, "broadcast_view")
        self._invalidate_one(slot, nbytes)
        self._log_event(PoolEvent.READ, slot, nbytes)
        self._pending_ack = (e + 1, round)
        self._epoch += 1

    def alltoall_in_place(self, sendbuf) -> None:
        """cxl_coll_alltoall_view, the kernel side of alltoall_view: put `sendbuf` (P blocks) into this
        rank's row unless it is that row, run the step; the caller reads its column in place."""
        self._check_open()
        self._check_idle()
        send = _bytes_of(sendbuf, False, "alltoall_view: sendbuf")
        P, me = self._nranks, self._rank
        total = sendbuf.size if isinstance(sendbuf, np.ndarray) else send.nbytes
        if total % P:
            raise InputError(f"alltoall_view: sendbuf has {total} items, not {P} equal blocks")
        if send.nbytes > self._slot_bytes:
            raise InputError(f"alltoall_view: sendbuf has {send.nbytes} bytes but pool slots hold {self._slot_bytes} "
                             f"(a zero-copy call is one step; alltoall() chunks)")
        n = send.nbytes // P
        if n == 0:  # no step, as the copy's
            return
        round = self._claim(True, "alltoall_view")
        e, mine = self._epoch, self._slot(round, me)
        if not self._is_at(send, mine):
            self._mem[mine: mine + P * n] = send
        self._publish(e, round, P * n)
        self._wait_or_raise(e, "alltoall_view")
        self._note_all_written(e)
        self._acquire_range(round, me * n, n)
        for r in range(P):
            if r != me:
                self._log_event(PoolEvent.READ, self._slot(round, r) + me * n, n)

    def reduce_scatter(self, sendbuf, recvbuf, op: str = "sum") -> None:
        """cxl_coll_reduce_scatter_block: rank r's recvbuf = the left fold over ranks of every block r."""
        self._check_open()
        self._check_idle()
        _pool_kernel.reduction_codes(sendbuf, recvbuf, op, "reduce_scatter")
        P, me, dtype = self._nranks, self._rank, sendbuf.dtype
        if sendbuf.size != recvbuf.size * P:
            raise InputError(f"reduce_scatter: sendbuf has {sendbuf.size} elements, expected "
                             f"{P} x recvbuf's {recvbuf.size}")
        send, recv = _bytes_of(sendbuf, False, "sendbuf"), _bytes_of(recvbuf, True, "recvbuf")
        count, es = recvbuf.size, dtype.itemsize
        chunk = min(count, self._slot_bytes // (P * es))
        if chunk == 0 and count:
            raise self._too_small("reduce_scatter")
        for off in range(0, count, chunk or 1):
            n = min(chunk, count - off)
            round = self._claim(True, "reduce_scatter")
            e, mine = self._epoch, self._slot(round, me)
            for d in range(P):
                src = (d * count + off) * es
                self._mem[mine + d * n * es: mine + (d + 1) * n * es] = send[src: src + n * es]
            self._publish(e, round, P * n * es)
            self._wait_or_raise(e, "reduce_scatter")
            self._note_all_written(e)
            self._acquire_range(round, me * n * es, n * es)
            self._fold_slots(dtype, op, round, me * n * es, recv[off * es:], n)

    def allreduce_start(self, sendbuf, recvbuf, op: str = "sum", large_bytes=None) -> None:
        """cxl_coll_allreduce_start: the first chunk's input is in the pool and published on return."""
        self._check_open()
        self._check_idle()
        _pool_kernel.reduction_codes(sendbuf, recvbuf, op, "allreduce")
        if sendbuf.size != recvbuf.size:
            raise InputError(f"allreduce: sendbuf has {sendbuf.size} elements and recvbuf {recvbuf.size}")
        if large_bytes is None:
            large_bytes = getattr(self, "allreduce_large_bytes", _pool_kernel.ALLREDUCE_LARGE_BYTES)
        large = _pool_kernel.check_large_bytes(large_bytes)
        dtype = sendbuf.dtype
        send, recv = _bytes_of(sendbuf, False, "sendbuf"), _bytes_of(recvbuf, True, "recvbuf")
        chunk = self._slot_bytes // dtype.itemsize
        self._pending = (send, recv, dtype, op, large, recvbuf.size, chunk)
        if recvbuf.size:
            self._allreduce_publish(0, min(recvbuf.size, chunk))

    def allreduce_wait(self) -> None:
        """cxl_coll_allreduce_wait: the remaining chunks run here."""
        self._check_open()
        if self._pending is None:
            raise RunError("allreduce_wait: no allreduce was started")
        count, chunk = self._pending[5], self._pending[6]
        try:
            for off in range(0, count, chunk):
                n = min(chunk, count - off)
                if off > 0:
                    self._allreduce_publish(off, n)
                self._allreduce_finish(off, n)
        finally:
            self._pending = None

    def allreduce(self, sendbuf, recvbuf, op: str = "sum", large_bytes=None) -> None:
        """cxl_coll_allreduce: start, then wait."""
        self.allreduce_start(sendbuf, recvbuf, op, large_bytes)
        self.allreduce_wait()

    def _allreduce_publish(self, off: int, n: int) -> None:
        send, es = self._pending[0], self._pending[2].itemsize
        try:
            self._allreduce_round = self._claim(True, "allreduce")
        except BaseException:
            self._pending = None
            raise
        mine = self._slot(self._allreduce_round, self._rank)
        self._mem[mine: mine + n * es] = send[off * es: (off + n) * es]
        self._publish(self._epoch, self._allreduce_round, n * es)

    def _allreduce_finish(self, off: int, n: int) -> None:
        _, recv, dtype, op, large, _, _ = self._pending
        es, P, me, e = dtype.itemsize, self._nranks, self._rank, self._epoch
        input_round = self._allreduce_round
        self._wait_or_raise(e, "allreduce")
        self._note_all_written(e)
        if n * es < large or P == 1:
            self._acquire_range(input_round, 0, n * es)
            self._fold_slots(dtype, op, input_round, 0, recv[off * es:], n)
            return
        lo, hi = share(n, es, P, me)
        self._acquire_range(input_round, lo * es, (hi - lo) * es)
        round = self._claim(True, "allreduce")
        e2 = self._epoch
        mine = self._slot(round, me)
        self._fold_slots(dtype, op, input_round, lo * es, self._mem[mine + lo * es:], hi - lo)
        self._publish_range(e2, round, lo * es, (hi - lo) * es)
        self._wait_or_raise(e2, "allreduce")
        self._note_all_written(e2)
        for r in range(P):
            rlo, rhi = share(n, es, P, r)
            src, length, dst = self._slot(round, r) + rlo * es, (rhi - rlo) * es, (off + rlo) * es
            if r == me:
                recv[dst: dst + length] = self._mem[src: src + length]
                continue
            self._invalidate_one(src, length)
            self._copy_out(recv[dst:], src, length)

    def _too_small(self, what: str) -> InputError:
        return InputError(f"{what}: the pool's {self._slot_bytes}-byte slots cannot hold one element per rank "
                          f"for {self._nranks} ranks")
