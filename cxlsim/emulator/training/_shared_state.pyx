# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""One worker's handle on a shared training region: seqlock pushes and reads, the global counter.

The C side is cxlsim/emulator/cxl_seqlock.h (its header comment has the protocols); this
module checks buffers and runs each call with the GIL released, so a communication thread's
pushes overlap the compute thread's numpy work. The region's layout (offsets in bytes from
the mapping's start) is planned by `shared_state.RegionLayout`.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_ANY_CONTIGUOUS
from libc.stdint cimport int64_t, uint64_t

from cxlsim.emulator.cxl_ops cimport CXL_LINE, CXL_OP_NONE, CXL_OP_CLFLUSH, CXL_OP_CLFLUSHOPT

import numpy as np

from cxlsim.errors import InputError, RunError


cdef extern from "cxl_seqlock.h" nogil:
    enum:
        CXL_META_BYTES

    ctypedef struct cxl_shared_t:
        char *base
        uint64_t counter_offset
        uint64_t choosing_offset
        uint64_t number_offset
        uint64_t slots_offset
        uint64_t slot_stride
        uint64_t copy_stride
        uint64_t vector_bytes
        int nworkers
        int flush_mode
        int writeback_op
        int invalidate_op
        int64_t *log
        int64_t log_capacity
        int64_t log_length

    void cxl_seq_write(cxl_shared_t *s, int w, uint64_t version, const char *meta, const char *vector)
    int64_t cxl_seq_read(cxl_shared_t *s, int w, char *meta, char *vector, int tries)
    uint64_t cxl_counter_fetch_add(cxl_shared_t *s, uint64_t n)
    uint64_t cxl_counter_load(cxl_shared_t *s)
    uint64_t cxl_bakery_doorway(cxl_shared_t *s, int i)
    int cxl_bakery_wait(cxl_shared_t *s, int i, const unsigned char *dead, double slice_ns, uint64_t spin_iters)
    uint64_t cxl_bakery_add_and_release(cxl_shared_t *s, int i, uint64_t n)
    void cxl_shared_store(cxl_shared_t *s, volatile uint64_t *word, uint64_t value)
    uint64_t cxl_shared_load(cxl_shared_t *s, volatile uint64_t *word)

META_BYTES = CXL_META_BYTES


cdef class SharedKernel:
    """The region's C state over a writable mapping (an mmap), for one worker.

    Offsets are bytes from the mapping's start, each a multiple of 64. flush: software
    coherence (write-backs and invalidations with writeback_op / invalidate_op, OP_* codes of
    `cxlsim.emulator.primitives`); otherwise plain loads and stores. spin_iters: polls before a
    waiting worker starts yielding the CPU.
    """

    cdef Py_buffer mapping
    cdef bint has_mapping
    cdef cxl_shared_t s
    cdef uint64_t spin_iters
    cdef uint64_t total_bytes
    cdef object log_array

    def __cinit__(self, mapping, *, uint64_t counter_offset, uint64_t choosing_offset, uint64_t number_offset,
                  uint64_t slots_offset, uint64_t slot_stride, uint64_t copy_stride, uint64_t vector_bytes,
                  int nworkers, bint flush=False, int writeback_op=CXL_OP_NONE, int invalidate_op=CXL_OP_NONE,
                  uint64_t spin_iters=4096):
        for name, value in (("counter_offset", counter_offset), ("choosing_offset", choosing_offset),
                            ("number_offset", number_offset), ("slots_offset", slots_offset),
                            ("slot_stride", slot_stride), ("copy_stride", copy_stride)):
            if value % CXL_LINE:
                raise InputError(f"shared region layout: {name} {value} is not a multiple of {CXL_LINE}")
        if nworkers < 1:
            raise InputError(f"shared region: expected 1 or more workers, got {nworkers}")
        if copy_stride < 2 * CXL_LINE + vector_bytes or slot_stride < 2 * copy_stride:
            raise InputError(f"shared region layout: copies of {copy_stride} B cannot hold a {vector_bytes}-byte "
                             f"vector, or slots of {slot_stride} B two copies")
        if flush and (writeback_op == CXL_OP_NONE or invalidate_op not in (CXL_OP_CLFLUSH, CXL_OP_CLFLUSHOPT)):
            raise InputError("coherence 'flush' needs a write-back op and an invalidating op (clflush or clflushopt)")
        PyObject_GetBuffer(mapping, &self.mapping, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
        self.has_mapping = True
        self.total_bytes = slots_offset + <uint64_t>nworkers * slot_stride
        if <uint64_t>self.mapping.len < self.total_bytes:
            self.close()
            raise InputError(f"shared region: the mapping has {self.mapping.len} bytes, the layout needs "
                             f"{self.total_bytes}")
        self.s.base = <char *>self.mapping.buf
        self.s.counter_offset = counter_offset
        self.s.choosing_offset = choosing_offset
        self.s.number_offset = number_offset
        self.s.slots_offset = slots_offset
        self.s.slot_stride = slot_stride
        self.s.copy_stride = copy_stride
        self.s.vector_bytes = vector_bytes
        self.s.nworkers = nworkers
        self.s.flush_mode = flush
        self.s.writeback_op = writeback_op
        self.s.invalidate_op = invalidate_op
        self.s.log = NULL
        self.s.log_capacity = 0
        self.s.log_length = 0
        self.spin_iters = spin_iters

    def __dealloc__(self):
        if self.has_mapping:
            PyBuffer_Release(&self.mapping)
            self.has_mapping = False

    def close(self):
        """Release the mapping; the kernel can no longer be used."""
        if self.has_mapping:
            PyBuffer_Release(&self.mapping)
            self.has_mapping = False
        self.s.base = NULL
        self.s.log = NULL

    def enable_log(self, Py_ssize_t capacity=100000):
        """Debug mode: log every word store and load, copy, line op and fence (see cxl_seqlock.h)."""
        cdef int64_t[:, ::1] view
        self.log_array = np.zeros((capacity, 3), dtype=np.int64)
        view = self.log_array
        self.s.log = &view[0, 0]
        self.s.log_capacity = capacity
        self.s.log_length = 0

    def log_events(self):
        """The logged events as an (n, 3) int64 array of (op, offset, argument); the log starts again empty."""
        if self.log_array is None:
            raise RunError("the event log is off; call enable_log() first")
        if self.s.log_length > self.s.log_capacity:
            raise RunError(f"the event log overflowed ({self.s.log_length} events, capacity {self.s.log_capacity})")
        events = self.log_array[: self.s.log_length].copy()
        self.s.log_length = 0
        return events

    cdef void check_open(self) except *:
        if self.s.base == NULL:
            raise InputError("the shared region is closed")

    cdef void check_worker(self, int w) except *:
        if not 0 <= w < self.s.nworkers:
            raise InputError(f"worker {w} is outside 0..{self.s.nworkers - 1}")

    cdef void get_pair(self, meta, vector, Py_buffer *m, Py_buffer *v, int flags) except *:
        """Buffers of the 64-byte meta and the vector, both checked for size."""
        PyObject_GetBuffer(meta, m, flags | PyBUF_ANY_CONTIGUOUS)
        try:
            PyObject_GetBuffer(vector, v, flags | PyBUF_ANY_CONTIGUOUS)
        except BaseException:
            PyBuffer_Release(m)
            raise
        if m.len != CXL_META_BYTES or <uint64_t>v.len != self.s.vector_bytes:
            got_m, got_v = m.len, v.len
            PyBuffer_Release(v)
            PyBuffer_Release(m)
            raise InputError(f"shared slot: expected a {CXL_META_BYTES}-byte meta and a {self.s.vector_bytes}-byte "
                             f"vector, got {got_m} and {got_v} bytes")

    def write(self, int worker, uint64_t version, meta, vector):
        """Push number `version` (1, 2, ...) of slot `worker`: `meta` (64 bytes) and `vector` (see cxl_seq_write)."""
        cdef Py_buffer m, v
        self.check_open()
        self.check_worker(worker)
        if version < 1:
            raise InputError(f"shared slot: push versions start at 1, got {version}")
        self.get_pair(meta, vector, &m, &v, 0)
        try:
            with nogil:
                cxl_seq_write(&self.s, worker, version, <const char *>m.buf, <const char *>v.buf)
        finally:
            PyBuffer_Release(&v)
            PyBuffer_Release(&m)

    def read(self, int worker, meta, vector, int tries=1000):
        """Copy slot `worker`'s newest complete push into `meta` and `vector`; return its version
        (0: none yet), or -1 if every one of `tries` attempts raced a newer push."""
        cdef Py_buffer m, v
        cdef int64_t version
        self.check_open()
        self.check_worker(worker)
        self.get_pair(meta, vector, &m, &v, PyBUF_WRITABLE)
        try:
            with nogil:
                version = cxl_seq_read(&self.s, worker, <char *>m.buf, <char *>v.buf, tries)
        finally:
            PyBuffer_Release(&v)
            PyBuffer_Release(&m)
        return version

    def fetch_add(self, uint64_t n=1):
        """cxl-device: the counter's atomic fetch-and-add; the value before the add."""
        cdef uint64_t value
        self.check_open()
        with nogil:
            value = cxl_counter_fetch_add(&self.s, n)
        return value

    def counter(self):
        """The counter's value (flush mode: loaded fresh from the pool)."""
        self.check_open()
        return cxl_counter_load(&self.s)

    def bakery_doorway(self, int worker):
        """cxl-flush-lock: worker's doorway (takes a number above every other); returns the number."""
        cdef uint64_t number
        self.check_open()
        self.check_worker(worker)
        with nogil:
            number = cxl_bakery_doorway(&self.s, worker)
        return number

    def bakery_wait(self, int worker, unsigned char[::1] dead, double slice_ns):
        """cxl-flush-lock: -1 once `worker` holds the lock, else the worker it still waits for after
        `slice_ns`; workers with dead[j] != 0 are skipped."""
        cdef int waiting
        self.check_open()
        self.check_worker(worker)
        if dead.shape[0] != self.s.nworkers:
            raise InputError(f"bakery_wait: dead has {dead.shape[0]} entries, expected {self.s.nworkers}")
        with nogil:
            waiting = cxl_bakery_wait(&self.s, worker, &dead[0], slice_ns, self.spin_iters)
        return waiting

    def bakery_add_and_release(self, int worker, uint64_t n=1):
        """cxl-flush-lock, lock held: add `n` to the counter, release; the value before the add."""
        cdef uint64_t value
        self.check_open()
        self.check_worker(worker)
        with nogil:
            value = cxl_bakery_add_and_release(&self.s, worker, n)
        return value

    def store_word(self, uint64_t offset, uint64_t value):
        """Store a single-writer uint64 at `offset` and make it visible (flush mode: write-back, sfence)."""
        self.check_open()
        if offset % 8 or offset + 8 > self.total_bytes:
            raise InputError(f"store_word: offset {offset} is not an aligned word of the region")
        cxl_shared_store(&self.s, <volatile uint64_t *>(self.s.base + offset), value)

    def load_word(self, uint64_t offset):
        """Load a uint64 another worker writes (flush mode: invalidate its line first)."""
        self.check_open()
        if offset % 8 or offset + 8 > self.total_bytes:
            raise InputError(f"load_word: offset {offset} is not an aligned word of the region")
        return cxl_shared_load(&self.s, <volatile uint64_t *>(self.s.base + offset))
