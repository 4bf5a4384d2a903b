# Declarations of the C data path in cxl_ops.h (all callable without the GIL).
from libc.stdint cimport int64_t, uint32_t, uint64_t


cdef extern from "cxl_ops.h" nogil:
    enum:
        CXL_LINE
        CXL_OP_NONE
        CXL_OP_CLFLUSH
        CXL_OP_CLFLUSHOPT
        CXL_OP_CLWB

    ctypedef struct cxl_pool_t:
        char *base
        uint64_t flags_offset
        uint64_t data_offset
        uint64_t slot_stride
        int nranks
        int rank
        int flush_mode
        int writeback_op
        int invalidate_op
        uint64_t spin_iters
        int64_t *log
        int64_t log_capacity
        int64_t log_length
        int timed
        double latency_ns
        double bw_bytes_per_ns
        double spin_overhead_ns

    int cxl_cpu_features()
    void cxl_line_op(int op, const void *p)
    void cxl_sfence()
    void cxl_mfence()
    uint32_t cxl_atomic_add_u32(uint32_t *p, uint32_t v)
    double cxl_now_ns()
    uint64_t cxl_read_pass(const char *p, uint64_t n)
    double cxl_calibrate_spin_overhead()
    void cxl_paced_copy(char *dst, const char *src, uint64_t n, double bw, double start_ns, double min_ns)
    char *cxl_slot(cxl_pool_t *p, uint64_t round, int r)
    void cxl_publish(cxl_pool_t *p, uint64_t epoch, uint64_t round, uint64_t nbytes)
    int cxl_wait_all(cxl_pool_t *p, uint64_t epoch, double timeout_ns)
    void cxl_acquire_slots(cxl_pool_t *p, uint64_t round, uint64_t nbytes)
    void cxl_range_op(cxl_pool_t *p, int op, const char *start, uint64_t length)
    int cxl_allgather(cxl_pool_t *p, uint64_t epoch, uint64_t round, const char *send, char *recv,
                      uint64_t nbytes, double timeout_ns)


cdef class PoolKernel:
    cdef cxl_pool_t pool
    cdef Py_buffer mapping
    cdef bint has_mapping
    cdef readonly uint64_t epoch
    cdef readonly uint64_t data_round
    cdef readonly uint64_t slot_bytes
    cdef public double timeout_ns
    cdef object log_array
    # Zero-copy fast path: the views of the last (count, dtype) that send_view was asked for, per
    # buffer (data round % 2), so send_view and allgather_zero_copy skip the view dictionary.
    cdef object zc_count
    cdef object zc_dtype
    cdef uint64_t zc_nbytes
    cdef object zc_send0, zc_send1, zc_all0, zc_all1
    cdef void _check_open(self) except *
    cdef object _zc_all_view(self)
