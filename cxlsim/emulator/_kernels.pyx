# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Cython kernels of the emulated CXL pool: copy, flags, fences, cache-line flushes.

The GIL is held while buffers are checked and released only around the C data path
(cxl_ops.h). `PoolKernel` is one rank's view of a mapped pool; `cxlsim.emulator.comm`
builds the public communicator on it. `cxlsim.emulator.reference` is the slow twin.
"""
cimport cython
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_ANY_CONTIGUOUS,
                             PyBUF_STRIDES)
from libc.stdint cimport int64_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset

import numpy as np

from cxlsim.errors import InputError, RunError

OP_NONE = CXL_OP_NONE
OP_CLFLUSH = CXL_OP_CLFLUSH
OP_CLFLUSHOPT = CXL_OP_CLFLUSHOPT
OP_CLWB = CXL_OP_CLWB
LINE_BYTES = CXL_LINE
OP_NAMES = {CXL_OP_NONE: "none", CXL_OP_CLFLUSH: "clflush", CXL_OP_CLFLUSHOPT: "clflushopt", CXL_OP_CLWB: "clwb"}


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


def check_timing(latency_ns, bw_bytes_per_ns):
    """Raise InputError unless both emulated-timing values are finite and >= 0 (0 = off)."""
    for name, value in (("pool latency", latency_ns), ("pool bandwidth", bw_bytes_per_ns)):
        if not (value >= 0 and value != float("inf")):
            raise InputError(f"{name}: expected a finite value >= 0 (0 = off), got {value!r}")


cdef double _spin_overhead = -1.0


def spin_overhead_ns():
    """The busy-wait's own cost in ns (cxl_calibrate_spin_overhead, measured once per process).

    Emulated delays subtract it; copies whose asked time is below it are not paced.
    """
    global _spin_overhead
    if _spin_overhead < 0:
        with nogil:
            _spin_overhead = cxl_calibrate_spin_overhead()
    return _spin_overhead


def paced_copy_ns(dst, src, double bw_bytes_per_ns):
    """Copy src into dst once through the kernels' paced copy (GIL released); return the ns it took."""
    cdef Py_buffer d, s
    cdef double t0, t1
    cdef double overhead = spin_overhead_ns()
    check_timing(0.0, bw_bytes_per_ns)
    PyObject_GetBuffer(dst, &d, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
    try:
        PyObject_GetBuffer(src, &s, PyBUF_ANY_CONTIGUOUS)
        try:
            if s.len > d.len:
                raise InputError(f"paced_copy_ns: src has {s.len} bytes but dst only {d.len}")
            with nogil:
                t0 = cxl_now_ns()
                cxl_paced_copy(<char *>d.buf, <const char *>s.buf, <uint64_t>s.len, bw_bytes_per_ns, 0.0, overhead)
                t1 = cxl_now_ns()
        finally:
            PyBuffer_Release(&s)
    finally:
        PyBuffer_Release(&d)
    return t1 - t0


def cpu_features():
    """Return the set of cache-line instructions this CPU has: {'clflush', 'clflushopt', 'clwb'}."""
    cdef int f = cxl_cpu_features()
    return {name for bit, name in OP_NAMES.items() if bit and f & bit}


def now_ns():
    """CLOCK_MONOTONIC in ns (the clock the kernels use)."""
    return cxl_now_ns()


def memcpy_ns(dst, src, Py_ssize_t iterations=1):
    """Copy src into dst `iterations` times with the GIL released; return the mean ns per copy."""
    cdef Py_buffer d, s
    cdef double t0, t1
    cdef Py_ssize_t i, n
    PyObject_GetBuffer(dst, &d, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
    try:
        PyObject_GetBuffer(src, &s, PyBUF_ANY_CONTIGUOUS)
        try:
            if s.len > d.len:
                raise InputError(f"memcpy_ns: src has {s.len} bytes but dst only {d.len}")
            n = s.len
            with nogil:
                t0 = cxl_now_ns()
                for i in range(iterations):
                    memcpy(d.buf, s.buf, n)
                t1 = cxl_now_ns()
        finally:
            PyBuffer_Release(&s)
    finally:
        PyBuffer_Release(&d)
    return (t1 - t0) / max(iterations, 1)


# read_pass releases the GIL only from this many bytes. A release and re-acquire costs about 40 ns
# here (CPython 3.11): half of a 0-byte call, about 5% of a 16 KiB read. A 64 KiB read takes 1-2 us,
# a negligible time to hold the GIL. (numpy's loops likewise keep the GIL below a size threshold.)
cdef enum:
    READ_PASS_NOGIL_BYTES = 65536
READ_PASS_NOGIL_MIN_BYTES = READ_PASS_NOGIL_BYTES


def write_block(dst, src):
    """Store src's bytes into dst (both contiguous, the same size): a zero-copy application's
    write of its block into its slot, done with memcpy as the copy side's copy-in is (the GIL
    released from READ_PASS_NOGIL_MIN_BYTES). numpy's uint8 assignment (`dst[:] = src`) runs
    ~1.4x as long when another core holds the lines (16 KiB, np = 2, hw: 1.72 against 1.26 us
    per zero-copy step), which would charge the zero-copy side for numpy, not for the pool."""
    cdef Py_buffer d, s
    PyObject_GetBuffer(dst, &d, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
    try:
        PyObject_GetBuffer(src, &s, PyBUF_ANY_CONTIGUOUS)
        try:
            if s.len != d.len:
                raise InputError(f"write_block: src has {s.len} bytes, dst {d.len}")
            if s.len < READ_PASS_NOGIL_BYTES:
                memcpy(d.buf, s.buf, <size_t>s.len)
            else:
                with nogil:
                    memcpy(d.buf, s.buf, <size_t>s.len)
        finally:
            PyBuffer_Release(&s)
    finally:
        PyBuffer_Release(&d)


def read_pass(obj):
    """Load every byte of a 1-D or 2-D buffer (rows may be strided) once, in C.

    Returns the wrapping sum of each row's 8-byte words and tail bytes (see `checksum_of_fill`),
    so the loads cannot be optimised away and stale contents can be detected. The GIL is
    released for buffers of READ_PASS_NOGIL_MIN_BYTES or more (below that the release would
    cost a sizeable part of the read).
    """
    cdef Py_buffer b
    cdef uint64_t acc = 0
    cdef Py_ssize_t rows, row_bytes, row_stride, i
    PyObject_GetBuffer(obj, &b, PyBUF_STRIDES)
    try:
        if b.ndim == 1 and b.strides[0] == b.itemsize:
            rows, row_bytes, row_stride = 1, b.len, 0
        elif b.ndim == 2 and b.strides[1] == b.itemsize:
            rows, row_bytes, row_stride = b.shape[0], b.shape[1] * b.itemsize, b.strides[0]
        else:
            raise InputError("read_pass: expected a 1-D contiguous or 2-D row-contiguous buffer")
        if rows * row_bytes < READ_PASS_NOGIL_BYTES:
            for i in range(rows):
                acc += cxl_read_pass(<const char *>b.buf + i * row_stride, row_bytes)
        else:
            with nogil:
                for i in range(rows):
                    acc += cxl_read_pass(<const char *>b.buf + i * row_stride, row_bytes)
    finally:
        PyBuffer_Release(&b)
    return acc


def clock_read_ns(Py_ssize_t iterations=1000):
    """Mean ns between two back-to-back reads of the kernels' clock (what a timed region of nothing measures)."""
    cdef double t0, t1, total = 0.0
    cdef Py_ssize_t i
    with nogil:
        for i in range(iterations):
            t0 = cxl_now_ns()
            t1 = cxl_now_ns()
            total += t1 - t0
    return total / max(iterations, 1)


def line_op_ns(buf, int op, bint dirty, str fence="sfence", Py_ssize_t iterations=100):
    """Mean ns of one cache-maintenance pass over a contiguous buffer, GIL released (calibration).

    Per iteration, untimed: store to every byte (dirty=True: the lines are Modified, as a
    writer's slot before its write-back) or load every byte (dirty=False: clean copies, as a
    reader's stale lines). Timed: `op` (OP_CLFLUSHOPT, OP_CLWB or OP_CLFLUSH) on every 64-B
    line, then the fence ('sfence', 'mfence' or 'none'), as cxl_ops.h does in flush mode. The
    mean includes one clock read pair (see `clock_read_ns`) and excludes everything untimed.
    """
    cdef Py_buffer b
    cdef double t0, t1, total = 0.0
    cdef Py_ssize_t i
    cdef uint64_t n, a
    cdef int fence_kind
    cdef uint64_t sink = 0
    if fence not in ("sfence", "mfence", "none"):
        raise InputError(f"fence: expected 'sfence', 'mfence' or 'none', got {fence!r}")
    if op not in (CXL_OP_CLFLUSH, CXL_OP_CLFLUSHOPT, CXL_OP_CLWB):
        raise InputError(f"op: expected OP_CLFLUSH, OP_CLFLUSHOPT or OP_CLWB, got {op!r}")
    if iterations < 1:
        raise InputError(f"iterations: expected >= 1, got {iterations}")
    fence_kind = {"none": 0, "sfence": 1, "mfence": 2}[fence]
    PyObject_GetBuffer(buf, &b, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
    try:
        n = <uint64_t>b.len
        with nogil:
            for i in range(iterations):
                if dirty:
                    memset(b.buf, <int>(i & 255), n)
                else:
                    sink += cxl_read_pass(<const char *>b.buf, n)
                cxl_mfence()
                t0 = cxl_now_ns()
                a = 0
                while a < n:
                    cxl_line_op(op, <const char *>b.buf + a)
                    a += CXL_LINE
                if fence_kind == 1:
                    cxl_sfence()
                elif fence_kind == 2:
                    cxl_mfence()
                t1 = cxl_now_ns()
                total += t1 - t0
    finally:
        PyBuffer_Release(&b)
    return total / iterations


def checksum_of_fill(int value, uint64_t nbytes):
    """What `read_pass` returns for `nbytes` bytes that all hold `value` (0..255), computed."""
    cdef uint64_t byte = <unsigned char>value
    return (nbytes // 8) * (byte * <uint64_t>0x0101010101010101) + (nbytes % 8) * byte


def atomic_add_u32(mapping, Py_ssize_t offset, uint32_t value):
    """Atomically add `value` to the uint32 at byte `offset` of `mapping`; return the new value."""
    cdef Py_buffer b
    cdef uint32_t result
    PyObject_GetBuffer(mapping, &b, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
    try:
        if offset < 0 or offset % 4 or offset + 4 > b.len:
            raise InputError(f"atomic_add_u32: offset {offset} is not an aligned uint32 inside {b.len} bytes")
        result = cxl_atomic_add_u32(<uint32_t *>(<char *>b.buf + offset), value)
    finally:
        PyBuffer_Release(&b)
    return result


def buffer_address(obj):
    """Address of the first byte of a contiguous buffer (for page alignment checks and mbind)."""
    cdef Py_buffer b
    PyObject_GetBuffer(obj, &b, PyBUF_ANY_CONTIGUOUS)
    try:
        return <uintptr_t>b.buf
    finally:
        PyBuffer_Release(&b)


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
                  uint64_t slot_stride, uint64_t slot_bytes, str coherence="hw",
                  int writeback_op=CXL_OP_NONE, int invalidate_op=CXL_OP_NONE, double timeout_ns=10e9,
                  uint64_t spin_iters=4096, double pool_latency_ns=0.0, double pool_bw_bytes_per_ns=0.0):
        if not 0 <= rank < nranks:
            raise InputError(f"rank {rank} is outside 0..{nranks - 1}")
        check_timing(pool_latency_ns, pool_bw_bytes_per_ns)
        if coherence not in ("hw", "flush"):
            raise InputError(f"coherence: expected 'hw' or 'flush', got {coherence!r}")
        if slot_stride % CXL_LINE or flags_offset % CXL_LINE or data_offset % CXL_LINE:
            raise InputError("pool layout: flag lines and slots must be 64-byte aligned")
        PyObject_GetBuffer(mapping, &self.mapping, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
        self.has_mapping = True
        needed = data_offset + 2 * <uint64_t>nranks * slot_stride
        if <uint64_t>self.mapping.len < needed or flags_offset + <uint64_t>nranks * CXL_LINE > data_offset:
            self.close()
            raise InputError(f"pool mapping of {self.mapping.len} bytes is too small for {nranks} ranks "
                             f"with {slot_stride}-byte slots ({needed} bytes needed)")
        if coherence == "flush" and (writeback_op == CXL_OP_NONE or invalidate_op not in (CXL_OP_CLFLUSH, CXL_OP_CLFLUSHOPT)):
            self.close()
            raise InputError("coherence 'flush' needs a write-back op and an invalidating op (clflush or clflushopt)")
        self.pool.base = <char *>self.mapping.buf
        self.pool.flags_offset = flags_offset
        self.pool.data_offset = data_offset
        self.pool.slot_stride = slot_stride
        self.pool.nranks = nranks
        self.pool.rank = rank
        self.pool.flush_mode = coherence == "flush"
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
        return "flush" if self.pool.flush_mode else "hw"

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

    cdef void _check_open(self) except *:
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
        self._check_open()
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
            self._raise_timeout()

    def allgather_in_place(self, uint64_t nbytes):
        """Zero-copy allgather of `nbytes` per rank already written into this rank's next slot."""
        cdef int missing
        self._check_open()
        if nbytes > self.slot_bytes:
            raise InputError(f"allgather: {nbytes} bytes per rank but pool slots hold {self.slot_bytes}")
        self.epoch += 1
        self.data_round += nbytes > 0
        with nogil:
            missing = cxl_allgather(&self.pool, self.epoch, self.data_round, NULL, NULL, nbytes, self.timeout_ns)
        if missing >= 0:
            self._raise_timeout()

    def send_view(self, count, dtype=np.uint8):
        """A writable view of this rank's slot for the next call (the fast path of CommMixin.send_view).

        The views of the last (count, dtype) asked for are kept per buffer in the kernel, so a
        repeated call returns its prebuilt array after one identity and one int comparison; any
        other key goes through CommMixin's view dictionary (which builds and validates views).
        """
        cdef uint64_t parity = (self.data_round + 1) & 1
        self._check_open()
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
        self._check_open()
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
            self._raise_timeout()
        if cached:
            view = self._zc_all_view()
        else:
            view = views.get((self.data_round & 1, True, count, dtype))
            if view is None:
                view = self._slot_array(self.data_round, count, dtype, True)
        return _zero_copy_result(self, self.epoch, view)

    def flag_pingpong(self, uint64_t iterations):
        """Bounce this pool's flags between ranks 0 and 1 (np = 2) `iterations` times; mean ns per round trip.

        Calibration primitive, GIL released for the whole loop: rank 0 publishes an epoch
        (cxl_publish with 0 bytes: sfence, flag store, and in flush mode the flag line's
        write-back) and waits for rank 1's flag (cxl_wait_all: in flush mode invalidate, mfence,
        load per poll); rank 1 waits for rank 0's, then publishes its own. So one round trip is
        two flag hops of the allgather's protocol, in this pool's coherence mode, with no
        emulated timing. Both ranks must call it with the same count; the epoch moves on by it.
        """
        cdef int missing = -1
        cdef uint64_t i, e
        cdef double t0, t1
        cdef int first = self.pool.rank == 0
        self._check_open()
        if self.pool.nranks != 2:
            raise InputError(f"flag_pingpong: needs exactly 2 ranks, the pool has {self.pool.nranks}")
        if iterations < 1:
            raise InputError(f"flag_pingpong: iterations: expected >= 1, got {iterations}")
        e = self.epoch
        with nogil:
            t0 = cxl_now_ns()
            for i in range(iterations):
                e += 1
                if first:
                    cxl_publish(&self.pool, e, self.data_round, 0)
                    missing = cxl_wait_all(&self.pool, e, self.timeout_ns)
                else:
                    missing = cxl_wait_all(&self.pool, e, self.timeout_ns)
                    cxl_publish(&self.pool, e, self.data_round, 0)
                if missing >= 0:
                    break
            t1 = cxl_now_ns()
        self.epoch = e
        if missing >= 0:
            self._raise_timeout()
        return (t1 - t0) / iterations

    def concurrent_copy(self, uint64_t nbytes, uint64_t iterations, bint read=False):
        """Calibration primitive: every rank copies at once, as in a pool allgather; ns per phase.

        Physical reasoning. Measured one process at a time, a copy sees only its own core's
        caches. In the allgather both ranks copy at the same moment: each first writes its
        block into its slot (lines the other core read two data rounds ago, so every store
        must take them back from it), then copies out every block of the round, its own (in
        its cache, just written) and the other's (just written by the other core: in hw mode
        held modified in that core's cache and pulled across, in flush mode written back and
        then invalidated here, so read from memory), while the other core does the same to
        its lines. Neither a lone memcpy nor a copy of the other's block with an idle
        writer sees that cross-core traffic in both directions at once.

        Per iteration, on all ranks: a barrier (flag publish and wait, as the bench's barrier
        between calls), the data round moves on (so buffers alternate as the allgather's do),
        phase 'in': memcpy of `nbytes` from a private buffer into this rank's slot and an
        mfence, timed (the stores must have left the store buffer, each line taken from the
        other core's cache, before the flag store behind them can be seen: without the
        fence that cost would land in the untimed wait);
        phase 'writeback' (flush mode; 0 in hw mode): the write-back op over the slot and an
        mfence, timed (the publish's; its sfence returns at once, but the flag behind it
        is seen only once the write-backs are acknowledged, which the mfence waits for);
        then the publish (flag
        store) and wait, untimed (the flag round trip is its own primitive); phase
        'invalidate' (flush mode; 0 in hw mode): the acquire's invalidation of the others'
        slots and its mfence, timed; phase 'out': memcpy of every rank's slot into a private
        (np x nbytes) buffer, or with read=True a read_pass of every slot in place (the
        zero-copy application's loads), timed. The allgather itself is never called, and
        the flag waits are in no phase. Each phase's time has the clock's own cost (the best
        of 64 empty intervals; for 'in' and 'writeback' the best of 64 bare mfences) taken
        off, floored at 0. Returns an (iterations, 4) float64
        array of (in, out, writeback, invalidate) ns. Every rank must call it with the same
        arguments; the epoch moves on by 2 x iterations.
        """
        cdef int missing = -1
        cdef uint64_t i, e, rnd, sink = 0
        cdef int r
        cdef double t0, t1, t2, t3, t4, t5, clock = 1e30, fenced = 1e30
        cdef char *src
        cdef char *dst
        self._check_open()
        if nbytes > self.slot_bytes:
            raise InputError(f"concurrent_copy: {nbytes} bytes per rank but pool slots hold {self.slot_bytes}")
        if iterations < 1:
            raise InputError(f"concurrent_copy: iterations: expected >= 1, got {iterations}")
        out = np.zeros((iterations, 4), np.float64)
        cdef double[:, ::1] times = out
        send = np.full(max(nbytes, 1), (self.pool.rank + 1) & 255, np.uint8)
        recv = np.zeros(max(nbytes, 1) * self.pool.nranks, np.uint8)
        cdef unsigned char[::1] sv = send
        cdef unsigned char[::1] rv = recv
        src = <char *>&sv[0]
        dst = <char *>&rv[0]
        e = self.epoch
        rnd = self.data_round
        with nogil:
            for i in range(64):
                t0 = cxl_now_ns()
                t1 = cxl_now_ns()
                if t1 - t0 < clock:
                    clock = t1 - t0
                t0 = cxl_now_ns()
                cxl_mfence()
                t1 = cxl_now_ns()
                if t1 - t0 < fenced:
                    fenced = t1 - t0
            for i in range(iterations):
                e += 1
                cxl_publish(&self.pool, e, rnd, 0)
                missing = cxl_wait_all(&self.pool, e, self.timeout_ns)
                if missing >= 0:
                    break
                rnd += nbytes > 0
                t0 = cxl_now_ns()
                if nbytes:
                    memcpy(cxl_slot(&self.pool, rnd, self.pool.rank), src, nbytes)
                cxl_mfence()
                t1 = cxl_now_ns()
                if self.pool.flush_mode:
                    cxl_range_op(&self.pool, self.pool.writeback_op, cxl_slot(&self.pool, rnd, self.pool.rank), nbytes)
                    cxl_mfence()
                t4 = cxl_now_ns()
                e += 1
                cxl_publish(&self.pool, e, rnd, 0)  # the slot is written back already
                missing = cxl_wait_all(&self.pool, e, self.timeout_ns)
                if missing >= 0:
                    break
                t5 = cxl_now_ns()
                cxl_acquire_slots(&self.pool, rnd, nbytes)
                t2 = cxl_now_ns()
                for r in range(self.pool.nranks):
                    if read:
                        sink += cxl_read_pass(cxl_slot(&self.pool, rnd, r), nbytes)
                    elif nbytes:
                        memcpy(dst + <uint64_t>r * nbytes, cxl_slot(&self.pool, rnd, r), nbytes)
                t3 = cxl_now_ns()
                times[i, 0] = t1 - t0 - fenced if t1 - t0 > fenced else 0.0
                times[i, 1] = t3 - t2 - clock if t3 - t2 > clock else 0.0
                if self.pool.flush_mode:
                    times[i, 2] = t4 - t1 - fenced if t4 - t1 > fenced else 0.0
                    times[i, 3] = t2 - t5 - clock if t2 - t5 > clock else 0.0
        self.epoch = e
        self.data_round = rnd
        if missing >= 0:
            self._raise_timeout()
        if read and sink == 1:  # keeps the loads; never true in practice
            out[0, 1] += 0.0
        return out

    def slot_offset(self, uint64_t round, int rank):
        """Byte offset in the pool of `rank`'s slot in data round `round` (its buffer is round % 2)."""
        return <uint64_t>(cxl_slot(&self.pool, round, rank) - self.pool.base)

    def flag_epochs(self):
        """The epoch each rank last published (a plain read of every flag line)."""
        self._check_open()
        return [(<uint64_t *>(self.pool.base + self.pool.flags_offset + i * CXL_LINE))[0]
                for i in range(self.pool.nranks)]

    def _raise_timeout(self):
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
