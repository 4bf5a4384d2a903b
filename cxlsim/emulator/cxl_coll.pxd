# Declarations of the pool collectives in cxl_coll.h and the folds of cxl_reduce.h (all callable
# without the GIL), for the rank kernel (_pool_kernel) and the probes (_probes).
from libc.stdint cimport uint64_t

from cxlsim.emulator.cxl_ops cimport cxl_pool_t


cdef extern from "cxl_coll.h" nogil:
    enum:
        CXL_COLL_OK
        CXL_COLL_TIMEOUT
        CXL_COLL_TOO_SMALL
        CXL_I8, CXL_I16, CXL_I32, CXL_I64, CXL_U8, CXL_U16, CXL_U32, CXL_U64, CXL_F32, CXL_F64
        CXL_SUM, CXL_PROD, CXL_MIN, CXL_MAX, CXL_BAND, CXL_BOR, CXL_BXOR, CXL_LAND, CXL_LOR, CXL_LXOR

    ctypedef struct cxl_coll_t:
        cxl_pool_t pool
        uint64_t slot_bytes
        double timeout_ns
        uint64_t epoch
        uint64_t round
        uint64_t buffer_epoch[2]
        uint64_t known_done
        int missing
        uint64_t missing_flag
        uint64_t pending_ack
        uint64_t pending_ack_round

    ctypedef struct cxl_allreduce_t:
        uint64_t count

    uint64_t cxl_coll_written(uint64_t epoch)
    uint64_t cxl_coll_done(uint64_t epoch)
    void cxl_coll_init(cxl_coll_t *c, const cxl_pool_t *pool, uint64_t slot_bytes, double timeout_ns)
    int cxl_coll_missing(cxl_coll_t *c, int *out, int max)
    int cxl_coll_prepare_write(cxl_coll_t *c)
    void cxl_coll_settle(cxl_coll_t *c)
    int cxl_coll_allgather_step(cxl_coll_t *c, const char *send, char *recv, uint64_t nbytes)
    int cxl_coll_barrier(cxl_coll_t *c)
    double cxl_coll_flag_pingpong(cxl_coll_t *c, uint64_t iterations)
    double cxl_coll_probe_pingpong(cxl_coll_t *c, uint64_t iterations, uint64_t spin_iters)
    int cxl_coll_broadcast(cxl_coll_t *c, char *buf, uint64_t nbytes, int root)
    int cxl_coll_alltoall(cxl_coll_t *c, const char *send, char *recv, uint64_t nbytes)
    int cxl_coll_broadcast_view(cxl_coll_t *c, const char *send, uint64_t nbytes, int root, const char **out)
    int cxl_coll_alltoall_view(cxl_coll_t *c, const char *send, uint64_t nbytes, const char **column)
    int cxl_coll_view_skips_own(const cxl_coll_t *c)
    int cxl_coll_reduce_scatter_block(cxl_coll_t *c, const char *send, char *recv, uint64_t count, int dtype, int op)
    int cxl_coll_allreduce_start(cxl_coll_t *c, cxl_allreduce_t *a, const char *send, char *recv, uint64_t count,
                                 int dtype, int op, uint64_t large_bytes)
    int cxl_coll_allreduce_wait(cxl_coll_t *c, cxl_allreduce_t *a)
