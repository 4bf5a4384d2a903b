# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# distutils: define_macros=NPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION
"""Primitives of one CPU on plain buffers, compiled from the C data path (cxl_ops.h).

The pool's kernels are built from a few machine operations: cache-line write-back and
invalidation (clflush, clflushopt, clwb), fences, the monotonic clock, memcpy, a read pass
that loads every byte, an atomic add. This module gives Python those operations one by one,
each on a buffer it is handed, with the GIL released around the C call where that pays:
to check the CPU (`cpu_features`), to time one operation (`memcpy_ns`, `line_op_ns`,
`clock_read_ns`, `paced_copy_ns`), and to do what a zero-copy application does with its
slots (`write_block`, `read_pass`). Times are ns of CLOCK_MONOTONIC.

The emulated CXL timing's checks and its busy-wait calibration (`check_timing`,
`spin_overhead_ns`) live here too, as every timed copy uses them. A rank's kernel on a
mapped pool is `_pool_kernel.PoolKernel`; the probes that time several ranks at once are
in `_probes`.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_ANY_CONTIGUOUS, PyBUF_STRIDES
from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset

cimport numpy as cnp

from cxlsim.emulator.cxl_ops cimport *

import numpy as np

from cxlsim.errors import InputError

cnp.import_array()
cdef object ndarray_type = np.ndarray

OP_NONE = CXL_OP_NONE
OP_CLFLUSH = CXL_OP_CLFLUSH
OP_CLFLUSHOPT = CXL_OP_CLFLUSHOPT
OP_CLWB = CXL_OP_CLWB
LINE_BYTES = CXL_LINE
OP_NAMES = {CXL_OP_NONE: "none", CXL_OP_CLFLUSH: "clflush", CXL_OP_CLFLUSHOPT: "clflushopt", CXL_OP_CLWB: "clwb"}


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
    """Load every byte of a 1-D or 2-D buffer (rows may be strided), or of each buffer of a tuple or
    list of them in turn (a zero-copy result's `rows`), once, in C.

    Returns the wrapping sum of each row's 8-byte words and tail bytes (see `checksum_of_fill`),
    so the loads cannot be optimised away and stale contents can be detected. The GIL is
    released for buffers of READ_PASS_NOGIL_MIN_BYTES or more (below that the release would
    cost a sizeable part of the read).
    """
    cdef uint64_t acc = 0
    if type(obj) is tuple or type(obj) is list:
        for part in obj:
            acc += _read_pass_one(part)
        return acc
    return _read_pass_one(obj)


cdef uint64_t _read_pass_one(obj) except? 0:
    if type(obj) is ndarray_type and not cnp.PyArray_ISOBJECT(<cnp.ndarray>obj) \
            and not cnp.PyArray_HASFIELDS(<cnp.ndarray>obj):
        return _read_pass_array(<cnp.ndarray>obj)
    return _read_pass_buffer(obj)


cdef uint64_t _read_pass_array(cnp.ndarray a) except? 0:
    """_read_pass_one of a numpy array, its layout read from the array itself (a buffer export and its
    release cost about as much as a 1 KiB read). Below READ_PASS_NOGIL_BYTES only (the GIL, held, keeps
    the array as it is); larger arrays go through the buffer protocol, whose export pins them."""
    cdef uint64_t acc = 0
    cdef Py_ssize_t rows, row_bytes, row_stride, i, itemsize = cnp.PyArray_ITEMSIZE(a)
    cdef int nd = cnp.PyArray_NDIM(a)
    cdef const char *data = cnp.PyArray_BYTES(a)
    cdef bint contiguous = cnp.PyArray_IS_C_CONTIGUOUS(a)  # numpy exports such an array with its canonical strides
    if nd == 1 and (contiguous or cnp.PyArray_STRIDES(a)[0] == itemsize):
        rows, row_bytes, row_stride = 1, cnp.PyArray_DIMS(a)[0] * itemsize, 0
    elif nd == 2 and (contiguous or cnp.PyArray_STRIDES(a)[1] == itemsize):
        rows, row_bytes = cnp.PyArray_DIMS(a)[0], cnp.PyArray_DIMS(a)[1] * itemsize
        row_stride = row_bytes if contiguous else cnp.PyArray_STRIDES(a)[0]
    else:
        raise InputError("read_pass: expected a 1-D contiguous or 2-D row-contiguous buffer")
    if rows * row_bytes >= READ_PASS_NOGIL_BYTES:
        return _read_pass_buffer(a)
    for i in range(rows):
        acc += cxl_read_pass(data + i * row_stride, row_bytes)
    return acc


cdef uint64_t _read_pass_buffer(obj) except? 0:
    """_read_pass_one through the buffer protocol (any buffer; the GIL released from READ_PASS_NOGIL_BYTES)."""
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
