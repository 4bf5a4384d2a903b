# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# distutils: define_macros=NPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION
"""One rank's kernel on a mapped pool: the allgather's publish, wait and copies, compiled.

A pool holds one flag line per rank and two buffers of one slot per rank (see pool.py).
A call writes this rank's block into its slot, publishes the call's epoch on its flag
line, waits until every flag shows it, then reads every slot: the C data path
`cxl_allgather` of cxl_ops.h, run with the GIL released. The Python side only checks
buffers and keeps the epoch and data-round counters. `PoolKernel` does this for one rank;
`cxlsim.emulator.comm` builds the public communicator on it and
`cxlsim.emulator.reference` is its pure-Python twin. Zero-copy calls return a
`ZeroCopyResult`, a view of the slots that refuses to be read after the next call.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_ANY_CONTIGUOUS
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy
cimport numpy as cnp

from cxlsim.emulator.cxl_ops cimport *
from cxlsim.emulator.cxl_coll cimport *

import numpy as np

cnp.import_array()
cdef object ndarray_type = np.ndarray

from cxlsim.coherence import Coherence
from cxlsim.emulator._kernels import check_timing, spin_overhead_ns
from cxlsim.emulator.tuning import DEFAULT_ALLREDUCE_LARGE_BYTES, allreduce_large_bytes
from cxlsim.errors import InputError, RunError


class CollectiveTimeout(RunError):
    """A rank waited longer than its timeout for other ranks; `missing` lists them."""

    def __init__(self, message, missing):
        super().__init__(message)
        self.missing = list(missing)


class StaleViewError(RunError):
    """A zero-copy result was used after the rank's next collective call."""


include "_zero_copy_results.pxi"
include "_zero_copy_calls.pxi"


cdef class PoolKernel:
    """One rank's handle on a mapped pool: publishes, waits and copies with the GIL released.

    mapping: a writable buffer over the whole pool (an mmap); offsets are in bytes from
    its start. coherence: 'hw' or 'flush'. writeback_op/invalidate_op: OP_* line
    instructions for flush mode. timeout_ns: how long a wait may take before it raises.
    spin_iters: polls before a waiting rank starts yielding the CPU between polls.
    pool_latency_ns, pool_bw_bytes_per_ns: emulated CXL device timing, 0 = off (see
    cxl_ops.h: one latency per wait for flags and per block read; copies paced at the bandwidth).
    """

    def __cinit__(self, mapping, *, int nranks, int rank, uint64_t flags_offset, uint64_t data_offset,
                  uint64_t slot_stride, uint64_t slot_bytes, coherence=Coherence.HW,
                  int writeback_op=CXL_OP_NONE, int invalidate_op=CXL_OP_NONE, double timeout_ns=10e9,
                  uint64_t spin_iters=4096, double pool_latency_ns=0.0, double pool_bw_bytes_per_ns=0.0):
        if not 0 <= rank < nranks:
            raise InputError(f"rank {rank} is outside 0..{nranks - 1}")
        check_timing(pool_latency_ns, pool_bw_bytes_per_ns)
        coherence = Coherence.parse(coherence, "coherence")
        if slot_stride % CXL_LINE or flags_offset % CXL_LINE or data_offset % CXL_LINE:
            raise InputError("pool layout: flag lines and slots must be 64-byte aligned")
        PyObject_GetBuffer(mapping, &self.mapping, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
        self.has_mapping = True
        needed = data_offset + 2 * <uint64_t>nranks * slot_stride
        if <uint64_t>self.mapping.len < needed or flags_offset + <uint64_t>nranks * CXL_LINE > data_offset:
            self.close()
            raise InputError(f"pool mapping of {self.mapping.len} bytes is too small for {nranks} ranks "
                             f"with {slot_stride}-byte slots ({needed} bytes needed)")
        if coherence is Coherence.FLUSH and (writeback_op == CXL_OP_NONE or invalidate_op not in (CXL_OP_CLFLUSH, CXL_OP_CLFLUSHOPT)):
            self.close()
            raise InputError("coherence 'flush' needs a write-back op and an invalidating op (clflush or clflushopt)")
        self.coll.pool.base = <char *>self.mapping.buf
        self.coll.pool.flags_offset = flags_offset
        self.coll.pool.data_offset = data_offset
        self.coll.pool.slot_stride = slot_stride
        self.coll.pool.nranks = nranks
        self.coll.pool.rank = rank
        self.coll.pool.flush_mode = coherence is Coherence.FLUSH
        self.coll.pool.writeback_op = writeback_op
        self.coll.pool.invalidate_op = invalidate_op
        self.coll.pool.spin_iters = spin_iters
        self.coll.pool.log = NULL
        self.coll.pool.log_capacity = 0
        self.coll.pool.log_length = 0
        self.coll.pool.nt_min_bytes = 0
        self.set_timing(pool_latency_ns, pool_bw_bytes_per_ns)
        self.slot_bytes = slot_bytes
        self.coll.slot_bytes = slot_bytes
        self.coll.timeout_ns = timeout_ns
        self.coll.epoch = 0
        self.coll.round = 0
        self.coll.buffer_epoch[0] = self.coll.buffer_epoch[1] = 0
        self.coll.known_done = 0
        self.coll.missing = -1
        self.coll.pending_ack = self.coll.pending_ack_round = 0
        self.vc_allgather, self.vc_broadcast, self.vc_alltoall = ViewCache(), ViewCache(), ViewCache()

    def __dealloc__(self):
        self.release_pending()
        if self.has_mapping:
            PyBuffer_Release(&self.mapping)
            self.has_mapping = False

    def close(self):
        """Release the pool mapping; the kernel can no longer be used."""
        self.release_pending()
        if self.has_mapping:
            PyBuffer_Release(&self.mapping)
            self.has_mapping = False
        self.coll.pool.base = NULL
        self.zc_count = self.zc_dtype = None
        self.zc_send0 = self.zc_send1 = self.zc_all0 = self.zc_all1 = None
        self.vc_allgather, self.vc_broadcast, self.vc_alltoall = ViewCache(), ViewCache(), ViewCache()

    @property
    def rank(self):
        return self.coll.pool.rank

    @property
    def epoch(self):
        """The last flag value this rank's steps took (1, 2, ...; a broadcast step takes two, see cxl_coll.h)."""
        return self.coll.epoch

    @property
    def data_round(self):
        """The last data round (steps that carry data; the buffer of round k is k % 2)."""
        return self.coll.round

    @property
    def timeout_ns(self):
        """The longest wait for another rank, ns, before a call raises CollectiveTimeout."""
        return self.coll.timeout_ns

    @timeout_ns.setter
    def timeout_ns(self, double value):
        self.coll.timeout_ns = value

    @property
    def size(self):
        return self.coll.pool.nranks

    @property
    def coherence(self):
        return Coherence.FLUSH if self.coll.pool.flush_mode else Coherence.HW

    def set_timing(self, double pool_latency_ns=0.0, double pool_bw_bytes_per_ns=0.0):
        """Change this rank's emulated CXL timing between calls (as the constructor's keywords; 0 = off).

        Every rank should make the same change at the same point between collective calls
        (benchmarks use it to interleave settings within one run).
        """
        check_timing(pool_latency_ns, pool_bw_bytes_per_ns)
        self.coll.pool.latency_ns = pool_latency_ns
        self.coll.pool.bw_bytes_per_ns = pool_bw_bytes_per_ns
        self.coll.pool.timed = pool_latency_ns > 0 or pool_bw_bytes_per_ns > 0
        self.coll.pool.spin_overhead_ns = spin_overhead_ns() if self.coll.pool.timed else 0.0

    @property
    def nt_min_bytes(self):
        """Copies into the pool of at least this many bytes use non-temporal stores (0 = never; untimed only)."""
        return self.coll.pool.nt_min_bytes

    @nt_min_bytes.setter
    def nt_min_bytes(self, value):
        self.coll.pool.nt_min_bytes = check_nt_min_bytes(value)

    @property
    def pool_latency_ns(self):
        """Injected pool access latency in ns (0 = none)."""
        return self.coll.pool.latency_ns

    @property
    def pool_bw_bytes_per_ns(self):
        """Pacing bandwidth of copies into and out of the pool, bytes/ns = GB/s (0 = not paced)."""
        return self.coll.pool.bw_bytes_per_ns

    cdef void check_open(self) except *:
        if not self.has_mapping:
            raise RunError("the pool communicator is closed")

    def allgather(self, sendbuf, recvbuf):
        """Gather every rank's `sendbuf` into `recvbuf` (block r at r * len(sendbuf) bytes).

        Both are contiguous buffers; recvbuf holds exactly size * sendbuf bytes.
        Raises CollectiveTimeout naming the ranks that did not arrive.
        """
        cdef Py_buffer s, r
        cdef int missing
        cdef uint64_t n
        self.check_open()
        PyObject_GetBuffer(sendbuf, &s, PyBUF_ANY_CONTIGUOUS)
        try:
            PyObject_GetBuffer(recvbuf, &r, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
            try:
                n = <uint64_t>s.len
                if n > self.slot_bytes:
                    raise InputError(f"allgather: sendbuf has {n} bytes but pool slots hold {self.slot_bytes}")
                if <uint64_t>r.len != n * <uint64_t>self.coll.pool.nranks:
                    raise InputError(f"allgather: recvbuf has {r.len} bytes, expected {self.coll.pool.nranks} x {n}")
                self.check_idle()
                with nogil:
                    missing = cxl_coll_allgather_step(&self.coll, <char *>s.buf, <char *>r.buf, n)
            finally:
                PyBuffer_Release(&r)
        finally:
            PyBuffer_Release(&s)
        if missing:
            self.raise_timeout()

    def allgather_in_place(self, uint64_t nbytes):
        """Zero-copy allgather of `nbytes` per rank already written into this rank's next slot."""
        cdef int missing
        self.check_open()
        if nbytes > self.slot_bytes:
            raise InputError(f"allgather: {nbytes} bytes per rank but pool slots hold {self.slot_bytes}")
        self.check_idle()
        with nogil:
            missing = cxl_coll_allgather_step(&self.coll, NULL, NULL, nbytes)
        if missing:
            self.raise_timeout()

    def send_view(self, count, dtype=np.uint8):
        """A writable view of this rank's slot for the next call (the fast path of CommMixin.send_view).

        The views of the last (count, dtype) asked for are kept per buffer in the kernel, so a
        repeated call returns its prebuilt array after one identity and one int comparison; any
        other key goes through CommMixin's view dictionary (which builds and validates views).
        """
        return _send_view(self, count, dtype)

    def allgather_zero_copy(self, block):
        """Publish `block` (the view from `send_view`) and return a ZeroCopyResult of every rank's block.

        The fast path of CommMixin.allgather_zero_copy. A block that is the kernel's cached send
        view for this call's buffer is valid by identity, its size is known and its result view
        prebuilt; any other block is checked against CommMixin's view dictionary as before.
        """
        return _allgather_zero_copy(self, block)

    def prepare_write(self):
        """Wait until this rank may write into its slot of the next data round (zero-copy calls).

        After steps in which ranks do not wait for each other (a broadcast), another rank may
        still be reading that buffer; send_view calls this, so a view it returns is free to write.
        """
        cdef int status
        self.check_open()
        self.check_idle()
        with nogil:
            status = cxl_coll_prepare_write(&self.coll)
        if status:
            self.raise_timeout("zero-copy buffer reuse")

    def slot_offset(self, uint64_t round, int rank):
        """Byte offset in the pool of `rank`'s slot in data round `round` (its buffer is round % 2)."""
        return <uint64_t>(cxl_slot(&self.coll.pool, round, rank) - self.coll.pool.base)

    def flag_epochs(self):
        """Each rank's flag as stored: e once its data of step e is published, e + 1 once it finished reading it
        (a plain read of every flag line; see cxl_coll.h)."""
        self.check_open()
        return [(<uint64_t *>(self.coll.pool.base + self.coll.pool.flags_offset + i * CXL_LINE))[0]
                for i in range(self.coll.pool.nranks)]

    cdef raise_timeout(self, str what="allgather"):
        cdef int out[1024]
        cdef int n = cxl_coll_missing(&self.coll, out, 1024)
        epochs = self.flag_epochs()
        missing = [out[i] for i in range(n)] or [self.coll.missing]
        raise CollectiveTimeout(
            f"rank {self.coll.pool.rank}: {what} epoch {self.coll.epoch} timed out after "
            f"{self.coll.timeout_ns / 1e9:g} s waiting for rank(s) {missing} "
            f"(they last published epoch(s) {[epochs[i] for i in missing]})", missing)

    def enable_log(self, Py_ssize_t capacity=100000):
        """Debug mode: log every write, flush, fence, flag store, poll and read (see cxl_ops.h)."""
        cdef int64_t[:, ::1] view
        self.log_array = np.zeros((capacity, 3), dtype=np.int64)
        view = self.log_array
        self.coll.pool.log = &view[0, 0]
        self.coll.pool.log_capacity = capacity
        self.coll.pool.log_length = 0

    def log_events(self):
        """The logged events as an (n, 3) int64 array of (op, offset, argument)."""
        if self.log_array is None:
            raise RunError("the event log is off; call enable_log() first")
        if self.coll.pool.log_length > self.coll.pool.log_capacity:
            raise RunError(f"the event log overflowed ({self.coll.pool.log_length} events, capacity {self.coll.pool.log_capacity})")
        return self.log_array[: self.coll.pool.log_length].copy()

    # -- fused zero-copy calls: the kernel puts the data in, the caller reads the result in place --

    def allgather_view(self, sendbuf):
        """Zero-copy allgather with the put fused in: the kernel copies `sendbuf` (a numpy array of
        count items, or this call's `send_view`, which is not copied) into this rank's slot, runs the
        call, and returns a ZeroCopyResult: the read-only (size, count) view of every rank's block in
        the pool, valid until this rank's next call. No copy-out: one block moves, not 1 + P."""
        return _allgather_view(self, sendbuf)

    def broadcast_view(self, count, dtype=np.uint8, int root=0, sendbuf=None):
        """Zero-copy broadcast of `count` items of `dtype` (at most one slot) from `root`: on the root,
        the kernel copies `sendbuf` (or nothing: None, or the root's `send_view(count, dtype)`, which it
        wrote) into its slot; every rank gets a ZeroCopyResult, the read-only 1-D view of the root's
        slot, valid until this rank's next call (a reader acknowledges when that call starts)."""
        return _broadcast_view(self, count, dtype, root, sendbuf)

    def alltoall_view(self, sendbuf):
        """Zero-copy alltoall: `sendbuf` holds size blocks of count items (a numpy array, or this call's
        `send_view(size x count, dtype)`, not copied); the kernel copies it into this rank's row and
        returns a ZeroCopyResult, the read-only (size, count) view whose row r is the block rank r sent
        to this rank, in the pool, valid until this rank's next call (one slot: size x block <= slot)."""
        return _alltoall_view(self, sendbuf)

    cdef void store_own_block(self, object block, uint64_t offset) except *:
        """Copy `block` (an alltoall result's own block, from the send buffer) to byte `offset` of the pool:
        what an alltoall view call left out, for a caller that reads `array`."""
        cdef Py_buffer b
        self.check_open()
        PyObject_GetBuffer(block, &b, PyBUF_ANY_CONTIGUOUS)
        try:
            memcpy(self.coll.pool.base + offset, b.buf, <size_t>b.len)
        finally:
            PyBuffer_Release(&b)

    # -- the other pool collectives (cxl_coll.h) ------------------------------------------
    cdef void check_idle(self) except *:
        if self.has_pending:
            raise RunError("a split-phase allreduce is in flight: call allreduce_wait() before the next collective")

    cdef void release_pending(self) noexcept:
        """Drop the split-phase allreduce's buffers (a C call: `__dealloc__` runs it, where the
        object's Python attributes may be gone)."""
        if self.has_pending:
            PyBuffer_Release(&self.pending_send)
            PyBuffer_Release(&self.pending_recv)
            self.has_pending = False

    def _status(self, int status, str what):
        if status == CXL_COLL_TIMEOUT:
            self.raise_timeout(what)
        if status == CXL_COLL_TOO_SMALL:
            raise InputError(f"{what}: the pool's {self.slot_bytes}-byte slots cannot hold one element per rank "
                             f"for {self.coll.pool.nranks} ranks")

    def barrier(self):
        """Wait until every rank reaches its barrier (one step without data: cxl_coll_barrier)."""
        cdef int status
        self.check_open()
        self.check_idle()
        with nogil:
            status = cxl_coll_barrier(&self.coll)
        self._status(status, "barrier")

    def probe_pingpong(self, uint64_t iterations, uint64_t spin_iters=4096):
        """The placement probe's flag round trips (cxl_coll_probe_pingpong, GIL released), a collective call:
        at np 2 ranks 0 and 1 bounce their flags `iterations` times; at np > 2 they do while the others wait,
        yielding (the pair spins `spin_iters` polls before each yield). Mean ns per round trip on ranks 0
        and 1, 0 on the others. Every rank's epoch moves on by `iterations`."""
        cdef double ns
        self.check_open()
        self.check_idle()
        if self.coll.pool.nranks < 2:
            raise InputError(f"probe_pingpong: needs at least 2 ranks, the pool has {self.coll.pool.nranks}")
        if iterations < 1:
            raise InputError(f"probe_pingpong: iterations: expected >= 1, got {iterations}")
        with nogil:
            ns = cxl_coll_probe_pingpong(&self.coll, iterations, spin_iters)
        if ns < 0:
            self.raise_timeout("probe_pingpong")
        return ns

    def broadcast(self, buf, int root=0):
        """Root's `buf` (any writable contiguous buffer) reaches every rank's `buf`; the same size on every rank."""
        cdef Py_buffer b
        cdef int status
        self.check_open()
        self.check_idle()
        if not 0 <= root < self.coll.pool.nranks:
            raise InputError(f"broadcast: root {root} is outside 0..{self.coll.pool.nranks - 1}")
        PyObject_GetBuffer(buf, &b, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
        try:
            with nogil:
                status = cxl_coll_broadcast(&self.coll, <char *>b.buf, <uint64_t>b.len, root)
        finally:
            PyBuffer_Release(&b)
        self._status(status, "broadcast")

    def alltoall(self, sendbuf, recvbuf):
        """Block d of `sendbuf` (size equal blocks) goes to rank d, which gets it as block `rank` of `recvbuf`."""
        cdef Py_buffer s, r
        cdef int status
        cdef uint64_t P = <uint64_t>self.coll.pool.nranks
        self.check_open()
        self.check_idle()
        PyObject_GetBuffer(sendbuf, &s, PyBUF_ANY_CONTIGUOUS)
        try:
            PyObject_GetBuffer(recvbuf, &r, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
            try:
                if <uint64_t>s.len % P or r.len != s.len:
                    raise InputError(f"alltoall: sendbuf has {s.len} bytes and recvbuf {r.len}; both must hold "
                                     f"the same {P} equal blocks")
                with nogil:
                    status = cxl_coll_alltoall(&self.coll, <char *>s.buf, <char *>r.buf, <uint64_t>s.len // P)
            finally:
                PyBuffer_Release(&r)
        finally:
            PyBuffer_Release(&s)
        self._status(status, "alltoall")

    def reduce_scatter(self, sendbuf, recvbuf, op="sum"):
        """Block reduce-scatter: `sendbuf` holds size blocks of recvbuf.size elements; rank r's `recvbuf`
        gets the left fold over ranks 0..P-1 of every rank's block r (numpy arrays of one dtype)."""
        cdef Py_buffer s, r
        cdef int status, dt, code
        cdef uint64_t count
        self.check_open()
        self.check_idle()
        self._reduction_codes(sendbuf, recvbuf, op, "reduce_scatter")
        dt, code = self.rc_dt, self.rc_code
        if sendbuf.size != recvbuf.size * self.coll.pool.nranks:
            raise InputError(f"reduce_scatter: sendbuf has {sendbuf.size} elements, expected "
                             f"{self.coll.pool.nranks} x recvbuf's {recvbuf.size}")
        count = recvbuf.size
        PyObject_GetBuffer(sendbuf, &s, PyBUF_ANY_CONTIGUOUS)
        try:
            PyObject_GetBuffer(recvbuf, &r, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
            try:
                with nogil:
                    status = cxl_coll_reduce_scatter_block(&self.coll, <char *>s.buf, <char *>r.buf, count, dt, code)
            finally:
                PyBuffer_Release(&r)
        finally:
            PyBuffer_Release(&s)
        self._status(status, "reduce_scatter")

    cdef void _reduction_codes(self, sendbuf, recvbuf, op, str where) except *:
        """reduction_codes(sendbuf, recvbuf, op, where) into rc_dt and rc_code; a call with the dtype
        object and op object of the last checked one (numpy arrays both) reuses its codes."""
        cdef object dtype
        if type(sendbuf) is ndarray_type and type(recvbuf) is ndarray_type:
            dtype = sendbuf.dtype
            if dtype is self.rc_dtype and op is self.rc_op and recvbuf.dtype is dtype:
                return
        self.rc_dt, self.rc_code = reduction_codes(sendbuf, recvbuf, op, where)
        same = type(sendbuf) is ndarray_type and type(recvbuf) is ndarray_type and recvbuf.dtype is sendbuf.dtype
        self.rc_dtype, self.rc_op = (sendbuf.dtype, op) if same else (None, None)

    cdef tuple _allreduce_args(self, sendbuf, recvbuf, op, large_bytes):
        """The checks both allreduce calls make: (datatype code, op code, threshold bytes)."""
        self.check_open()
        self.check_idle()
        self._reduction_codes(sendbuf, recvbuf, op, "allreduce")
        dt, code = self.rc_dt, self.rc_code
        if sendbuf.size != recvbuf.size:
            raise InputError(f"allreduce: sendbuf has {sendbuf.size} elements and recvbuf {recvbuf.size}")
        if large_bytes is None:
            large_bytes = getattr(self, "allreduce_large_bytes", ALLREDUCE_LARGE_BYTES)
        large = large_bytes if type(large_bytes) is int and large_bytes >= 0 else check_large_bytes(large_bytes)
        return dt, code, large

    def allreduce_start(self, sendbuf, recvbuf, op="sum", large_bytes=None):
        """Begin an allreduce of `sendbuf` into `recvbuf` (numpy arrays of one dtype and size; they may be
        the same array): its first chunk is in the pool and published on return. Until allreduce_wait()
        the caller may compute, but must not change either array or make another collective call.
        large_bytes: chunks of at least this many bytes use reduce-scatter + allgather (default: the
        communicator's `allreduce_large_bytes`)."""
        cdef int status, dt, code
        cdef uint64_t count, large
        dt, code, large = self._allreduce_args(sendbuf, recvbuf, op, large_bytes)
        count = recvbuf.size
        PyObject_GetBuffer(recvbuf, &self.pending_recv, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
        try:
            PyObject_GetBuffer(sendbuf, &self.pending_send, PyBUF_ANY_CONTIGUOUS)
        except BaseException:
            PyBuffer_Release(&self.pending_recv)
            raise
        self.has_pending = True
        with nogil:
            status = cxl_coll_allreduce_start(&self.coll, &self.pending, <char *>self.pending_send.buf,
                                              <char *>self.pending_recv.buf, count, dt, code, large)
        if status:
            self.release_pending()
            self._status(status, "allreduce")

    def allreduce_wait(self):
        """Complete the allreduce begun by allreduce_start (the remaining chunks run here)."""
        cdef int status
        self.check_open()
        if not self.has_pending:
            raise RunError("allreduce_wait: no allreduce was started")
        with nogil:
            status = cxl_coll_allreduce_wait(&self.coll, &self.pending)
        self.release_pending()
        self._status(status, "allreduce")

    def allreduce(self, sendbuf, recvbuf, op="sum", large_bytes=None):
        """Allreduce (start, then wait): every rank's `recvbuf` gets the element-wise left fold over ranks
        0..P-1 of every rank's `sendbuf` under op (sum, prod, min, max; on integers also band, bor,
        bxor, land, lor, lxor). Bitwise the same result on every rank, in both pool algorithms."""
        cdef Py_buffer s, r
        cdef cxl_allreduce_t a
        cdef int status, dt, code
        cdef uint64_t count, large
        dt, code, large = self._allreduce_args(sendbuf, recvbuf, op, large_bytes)
        count = recvbuf.size
        PyObject_GetBuffer(recvbuf, &r, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
        try:
            PyObject_GetBuffer(sendbuf, &s, PyBUF_ANY_CONTIGUOUS)
            try:
                with nogil:
                    status = cxl_coll_allreduce_start(&self.coll, &a, <char *>s.buf, <char *>r.buf, count, dt, code,
                                                      large)
                    if status == CXL_COLL_OK:
                        status = cxl_coll_allreduce_wait(&self.coll, &a)
            finally:
                PyBuffer_Release(&s)
        finally:
            PyBuffer_Release(&r)
        if status:
            self._status(status, "allreduce")


include "_pool_kernel_reductions.pxi"
