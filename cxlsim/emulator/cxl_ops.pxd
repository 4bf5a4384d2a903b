# Declarations of the C data path in cxl_ops.h (all callable without the GIL), shared by the
# compiled modules: _kernels (buffer primitives), _pool_kernel (a rank's kernel), _probes.
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
        uint64_t nt_min_bytes

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
