# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
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

from cxlsim.emulator.cxl_ops cimport *

import numpy as np

from cxlsim.coherence import Coherence
from cxlsim.emulator._kernels import check_timing, spin_overhead_ns
from cxlsim.errors import InputError, RunError


class CollectiveTimeout(RunError):
    """A rank waited longer than its timeout for other ranks; `missing` lists them."""

    def __init__(self, message, missing):
        super().__init__(message)
        self.missing = list(missing)


class StaleViewError(RunError):
    """A zero-copy result was used after the rank's next collective call."""


@cython.freelist(8)
@cython.auto_pickle(False)
cdef class ZeroCopyResult:
    """All ranks' blocks of one zero-copy allgather, read in place; valid until the owner's next call.

    `array` is the read-only (size, count) view; any access after the owner's epoch moved on
    raises StaleViewError. One is made per call (a result of an older call must keep its own
    epoch), so the Cython kernel builds it without argument parsing (`_zero_copy_result`)
    and recycles the memory of dead ones (freelist).
    """
    cdef object owner
    cdef PoolKernel kernel  # the owner when it is a Cython kernel: its epoch is read without a lookup
    cdef uint64_t result_epoch
    cdef object view

    def __init__(self, owner, uint64_t epoch, view):
        self.owner, self.result_epoch, self.view = owner, epoch, view
        self.kernel = owner if isinstance(owner, PoolKernel) else None

    @property
    def array(self):
        if self.kernel is not None and self.kernel.epoch == self.result_epoch:
            return self.view
        if self.owner.epoch != self.result_epoch:
            raise StaleViewError(f"zero-copy result of epoch {self.result_epoch} used after epoch "
                                 f"{self.owner.epoch} began: copy what you need before the next collective call")
        return self.view

    @property
    def epoch(self):
        return self.result_epoch

    def __array__(self, dtype=None, copy=None):
        if copy:
            return np.array(self.array, dtype=dtype, copy=True)
        return np.asarray(self.array, dtype=dtype)

    def __getitem__(self, index):
        return self.array[index]

    def __len__(self):
        return len(self.array)


cdef inline ZeroCopyResult _zero_copy_result(PoolKernel kernel, uint64_t epoch, object view):
    """A ZeroCopyResult of `kernel`'s call `epoch` over `view`, built without calling __init__."""
    cdef ZeroCopyResult result = ZeroCopyResult.__new__(ZeroCopyResult)
    result.owner = kernel
    result.kernel = kernel
    result.result_epoch = epoch
    result.view = view
    return result


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
        self.pool.base = <char *>self.mapping.buf
        self.pool.flags_offset = flags_offset
        self.pool.data_offset = data_offset
        self.pool.slot_stride = slot_stride
        self.pool.nranks = nranks
        self.pool.rank = rank
        self.pool.flush_mode = coherence is Coherence.FLUSH
        self.pool.writeback_op = writeback_op
        self.pool.invalidate_op = invalidate_op
        self.pool.spin_iters = spin_iters
        self.pool.log = NULL
        self.pool.log_capacity = 0
        self.pool.log_length = 0
        self.set_timing(pool_latency_ns, pool_bw_bytes_per_ns)
        self.slot_bytes = slot_bytes
        self.timeout_ns = timeout_ns
        self.epoch = 0
        self.data_round = 0

    def __dealloc__(self):
        if self.has_mapping:
            PyBuffer_Release(&self.mapping)
            self.has_mapping = False

    def close(self):
        """Release the pool mapping; the kernel can no longer be used."""
        if self.has_mapping:
            PyBuffer_Release(&self.mapping)
            self.has_mapping = False
        self.pool.base = NULL
        self.zc_count = self.zc_dtype = None
        self.zc_send0 = self.zc_send1 = self.zc_all0 = self.zc_all1 = None

    @property
    def rank(self):
        return self.pool.rank

    @property
    def size(self):
        return self.pool.nranks

    @property
    def coherence(self):
        return Coherence.FLUSH if self.pool.flush_mode else Coherence.HW

    def set_timing(self, double pool_latency_ns=0.0, double pool_bw_bytes_per_ns=0.0):
        """Change this rank's emulated CXL timing between calls (as the constructor's keywords; 0 = off).

        Every rank should make the same change at the same point between collective calls
        (benchmarks use it to interleave settings within one run).
        """
        check_timing(pool_latency_ns, pool_bw_bytes_per_ns)
        self.pool.latency_ns = pool_latency_ns
        self.pool.bw_bytes_per_ns = pool_bw_bytes_per_ns
        self.pool.timed = pool_latency_ns > 0 or pool_bw_bytes_per_ns > 0
        self.pool.spin_overhead_ns = spin_overhead_ns() if self.pool.timed else 0.0

    @property
    def pool_latency_ns(self):
        """Injected pool access latency in ns (0 = none)."""
        return self.pool.latency_ns

    @property
    def pool_bw_bytes_per_ns(self):
        """Pacing bandwidth of copies into and out of the pool, bytes/ns = GB/s (0 = not paced)."""
        return self.pool.bw_bytes_per_ns

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
                if <uint64_t>r.len != n * <uint64_t>self.pool.nranks:
                    raise InputError(f"allgather: recvbuf has {r.len} bytes, expected {self.pool.nranks} x {n}")
                self.epoch += 1
                self.data_round += n > 0
                with nogil:
                    missing = cxl_allgather(&self.pool, self.epoch, self.data_round, <char *>s.buf, <char *>r.buf,
                                            n, self.timeout_ns)
            finally:
                PyBuffer_Release(&r)
        finally:
            PyBuffer_Release(&s)
        if missing >= 0:
            self.raise_timeout()

    def allgather_in_place(self, uint64_t nbytes):
        """Zero-copy allgather of `nbytes` per rank already written into this rank's next slot."""
        cdef int missing
        self.check_open()
        if nbytes > self.slot_bytes:
            raise InputError(f"allgather: {nbytes} bytes per rank but pool slots hold {self.slot_bytes}")
        self.epoch += 1
        self.data_round += nbytes > 0
        with nogil:
            missing = cxl_allgather(&self.pool, self.epoch, self.data_round, NULL, NULL, nbytes, self.timeout_ns)
        if missing >= 0:
            self.raise_timeout()

    def send_view(self, count, dtype=np.uint8):
        """A writable view of this rank's slot for the next call (the fast path of CommMixin.send_view).

        The views of the last (count, dtype) asked for are kept per buffer in the kernel, so a
        repeated call returns its prebuilt array after one identity and one int comparison; any
        other key goes through CommMixin's view dictionary (which builds and validates views).
        """
        cdef uint64_t parity = (self.data_round + 1) & 1
        self.check_open()
        if dtype is self.zc_dtype and type(count) is int and count == self.zc_count:
            view = self.zc_send1 if parity else self.zc_send0
            if view is not None:
                return view
        view = self._slot_array(self.data_round + 1, count, dtype, False)
        if type(count) is int:
            if not (dtype is self.zc_dtype and count == self.zc_count):
                self.zc_count, self.zc_dtype, self.zc_nbytes = count, dtype, view.nbytes
                self.zc_send0 = self.zc_send1 = self.zc_all0 = self.zc_all1 = None
            if parity:
                self.zc_send1 = view
            else:
                self.zc_send0 = view
        return view

    cdef object _zc_all_view(self):
        """The read-only (size, count) view of the current round's buffer for the cached (count, dtype)."""
        cdef bint odd = self.data_round & 1
        view = self.zc_all1 if odd else self.zc_all0
        if view is None:
            view = self._slot_array(self.data_round, self.zc_count, self.zc_dtype, True)
            if odd:
                self.zc_all1 = view
            else:
                self.zc_all0 = view
        return view

    def allgather_zero_copy(self, block):
        """Publish `block` (the view from `send_view`) and return a ZeroCopyResult of every rank's block.

        The fast path of CommMixin.allgather_zero_copy. A block that is the kernel's cached send
        view for this call's buffer is valid by identity, its size is known and its result view
        prebuilt; any other block is checked against CommMixin's view dictionary as before.
        """
        cdef int missing
        cdef uint64_t nbytes
        cdef object sent = self.zc_send1 if (self.data_round + 1) & 1 else self.zc_send0
        cdef bint cached = sent is not None and block is sent
        self.check_open()
        if cached:
            nbytes = self.zc_nbytes
        else:
            views = self._views
            try:
                count, dtype = block.shape[0], block.dtype
            except (AttributeError, IndexError):
                count = dtype = None
            sent = views.get(((self.data_round + 1) & 1, False, count, dtype))
            if sent is None or sent is not block:
                raise InputError("allgather_zero_copy: pass the view returned by send_view() for this call")
            nbytes = block.nbytes
        self.epoch += 1
        self.data_round += nbytes > 0
        with nogil:
            missing = cxl_allgather(&self.pool, self.epoch, self.data_round, NULL, NULL, nbytes, self.timeout_ns)
        if missing >= 0:
            self.raise_timeout()
        if cached:
            view = self._zc_all_view()
        else:
            view = views.get((self.data_round & 1, True, count, dtype))
            if view is None:
                view = self._slot_array(self.data_round, count, dtype, True)
        return _zero_copy_result(self, self.epoch, view)

    def slot_offset(self, uint64_t round, int rank):
        """Byte offset in the pool of `rank`'s slot in data round `round` (its buffer is round % 2)."""
        return <uint64_t>(cxl_slot(&self.pool, round, rank) - self.pool.base)

    def flag_epochs(self):
        """The epoch each rank last published (a plain read of every flag line)."""
        self.check_open()
        return [(<uint64_t *>(self.pool.base + self.pool.flags_offset + i * CXL_LINE))[0]
                for i in range(self.pool.nranks)]

    cdef raise_timeout(self):
        epochs = self.flag_epochs()
        missing = [i for i, e in enumerate(epochs) if e < self.epoch]
        raise CollectiveTimeout(
            f"rank {self.pool.rank}: allgather epoch {self.epoch} timed out after "
            f"{self.timeout_ns / 1e9:g} s waiting for rank(s) {missing} "
            f"(they last published epoch(s) {[epochs[i] for i in missing]})", missing)

    def enable_log(self, Py_ssize_t capacity=100000):
        """Debug mode: log every write, flush, fence, flag store, poll and read (see cxl_ops.h)."""
        cdef int64_t[:, ::1] view
        self.log_array = np.zeros((capacity, 3), dtype=np.int64)
        view = self.log_array
        self.pool.log = &view[0, 0]
        self.pool.log_capacity = capacity
        self.pool.log_length = 0

    def log_events(self):
        """The logged events as an (n, 3) int64 array of (op, offset, argument)."""
        if self.log_array is None:
            raise RunError("the event log is off; call enable_log() first")
        if self.pool.log_length > self.pool.log_capacity:
            raise RunError(f"the event log overflowed ({self.pool.log_length} events, capacity {self.pool.log_capacity})")
        return self.log_array[: self.pool.log_length].copy()
