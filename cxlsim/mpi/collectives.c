/* collectives.c: MPI_Allgather, _Allreduce, _Reduce_scatter_block, _Bcast, _Alltoall and
 * _Barrier (and their MPI-4 large-count _c forms) on the pool, or PMPI when the pool cannot
 * take the call; MPI_Init, MPI_Init_thread and MPI_Finalize.
 *
 * A call runs on the pool when the communicator has a usable pool (intracommunicator, one
 * node, set up; pools.c; allgather and allreduce also across nodes: nodes.c), the datatypes' signatures are one basic type (a non-contiguous
 * layout is packed; reductions need a predefined type the kernels fold) and the op is
 * predefined. Every test depends only on arguments MPI requires to match on every rank, so
 * all ranks take the same path. Otherwise the call goes to PMPI_* and the fallback is counted
 * with its reason. MPI_IN_PLACE:
 *   Allgather            this rank's block is already at recvbuf + rank x recvcount x extent;
 *   Allreduce            the input is recvbuf;
 *   Reduce_scatter_block the input is all P x recvcount elements of recvbuf, the result its first recvcount;
 *   Alltoall             recvbuf is the input and is replaced.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cxlsim_mpi.h"

static int loaded;

static void load(void)
{
    if (loaded) return;
    loaded = 1;
    cxlsim_settings_load();
    cxlsim_trace_open();
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) load();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) load();
    return rc;
}

int MPI_Finalize(void)
{
    load();
    double t = cxlsim_trace_begin();
    cxlsim_pools_free_all(); /* merges every pool's counters into the totals */
    if (cxlsim_settings.stats || cxlsim_settings.trace_dir[0]) cxlsim_stats_report();
    cxlsim_trace_line(t, "finalize");
    cxlsim_trace_close();
    return PMPI_Finalize();
}

/* Where count elements of type t at buf are as plain bytes: at buf (contiguous), or in a
 * buffer *tmp, packed from buf if `pack`. */
static char *stage(const void *buf, MPI_Count count, MPI_Datatype t, const cxlsim_type_t *info, uint64_t bytes,
                   int pack, void **tmp)
{
    *tmp = NULL;
    if (info->contiguous) return (char *)buf + info->true_lb;
    *tmp = malloc(bytes ? bytes : 1);
    if (pack) {
        MPI_Count at = 0;
        PMPI_Pack_c(buf, count, t, *tmp, (MPI_Count)bytes, &at, MPI_COMM_SELF);
    }
    return (char *)*tmp;
}

/* Unpack a staged result into buf and free it (nothing if there was no staging). */
static void unstage(void *tmp, void *buf, MPI_Count count, MPI_Datatype t, uint64_t bytes, int unpack)
{
    if (!tmp) return;
    if (unpack) {
        MPI_Count at = 0;
        PMPI_Unpack_c(tmp, (MPI_Count)bytes, &at, buf, count, t, MPI_COMM_SELF);
    }
    free(tmp);
}

/* The checks every pool call shares; returns the pool, entered by this thread (release it with
 * cxlsim_pool_leave), or NULL with *why set (*why already set: NULL at once). */
static cxlsim_pool_t *pool_for(MPI_Comm comm, int *why)
{
    load();
    if (*why < 0 && cxlsim_settings.disabled) *why = CXLSIM_WHY_DISABLED;
    if (*why >= 0) return NULL;
    cxlsim_pool_t *pool = cxlsim_pool_of(comm, why);
    if (pool && !cxlsim_pool_enter(pool)) {
        *why = CXLSIM_WHY_THREAD;
        return NULL;
    }
    return pool;
}

/* A collective without a hierarchical path on a pool that spans nodes falls back ("node"). */
static cxlsim_pool_t *flat_only(cxlsim_pool_t *pool, int *why)
{
    if (!pool || !pool->nodes) return pool;
    cxlsim_pool_leave(pool);
    *why = CXLSIM_WHY_NODE;
    return NULL;
}

static void finish(cxlsim_pool_t *pool, int coll, int large, uint64_t bytes, int why, int kernel_rc)
{
    if (kernel_rc == CXL_COLL_TIMEOUT) cxlsim_pool_abort(pool, cxlsim_coll_names[coll]);
    if (why >= 0) cxlsim_stats_fallback(coll, large, bytes, why);
    else cxlsim_stats_pool(&pool->counts[coll], large, bytes, pool->nodes != NULL);
    cxlsim_trace_ran(why < 0, why < 0 && pool->nodes != NULL, why);
}

/* ---- allgather ---- */
static int allgather(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, void *recvbuf, MPI_Count rcount,
                     MPI_Datatype rtype, MPI_Comm comm, int large)
{
    double t = cxlsim_trace_begin();
    int why = -1, rc = MPI_SUCCESS, krc = 0, inplace = sendbuf == MPI_IN_PLACE;
    cxlsim_type_t st, rt;
    cxlsim_type_info(rtype, &rt);
    uint64_t bytes = rcount > 0 ? (uint64_t)rcount * (uint64_t)rt.size : 0;
    if (rcount < 0) why = CXLSIM_WHY_ARGS;
    else if (!rt.ok) why = CXLSIM_WHY_DATATYPE;
    else if (!inplace) {
        cxlsim_type_info(stype, &st);
        if (!st.ok) why = CXLSIM_WHY_DATATYPE;
        else if (scount < 0 || (uint64_t)scount * (uint64_t)st.size != bytes) why = CXLSIM_WHY_ARGS;
    }
    cxlsim_pool_t *pool = pool_for(comm, &why);
    if (why >= 0) {
        rc = large ? PMPI_Allgather_c(sendbuf, scount, stype, recvbuf, rcount, rtype, comm)
                   : PMPI_Allgather(sendbuf, (int)scount, stype, recvbuf, (int)rcount, rtype, comm);
    } else if (bytes) {
        void *rtmp, *stmp = NULL;
        MPI_Count total = rcount * pool->size;
        char *recv = stage(recvbuf, total, rtype, &rt, bytes * pool->size, inplace, &rtmp);
        const char *send = inplace ? recv + (uint64_t)pool->rank * bytes : stage(sendbuf, scount, stype, &st, bytes, 1, &stmp);
        cxlsim_pool_t *waited = pool;
        krc = pool->nodes ? cxlsim_nodes_allgather(pool->nodes, send, recv, bytes, &waited)
                          : cxl_coll_allgather(&pool->coll, send, recv, bytes);
        if (krc) cxlsim_pool_abort(waited, "MPI_Allgather");
        unstage(stmp, NULL, 0, stype, 0, 0);
        unstage(rtmp, recvbuf, total, rtype, bytes * pool->size, 1);
    }
    finish(pool, CXLSIM_ALLGATHER, large, bytes, why, krc);
    cxlsim_trace_line(t, "allgather %llu %llu", (unsigned long long)bytes, (unsigned long long)bytes);
    if (pool) cxlsim_pool_leave(pool);
    return rc;
}

int MPI_Allgather(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype,
                  MPI_Comm comm)
{
    return allgather(sendbuf, scount, stype, recvbuf, rcount, rtype, comm, 0);
}

int MPI_Allgather_c(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, void *recvbuf, MPI_Count rcount,
                    MPI_Datatype rtype, MPI_Comm comm)
{
    return allgather(sendbuf, scount, stype, recvbuf, rcount, rtype, comm, 1);
}

/* ---- reductions ---- */

/* Why a reduction of `type` under `op` cannot run on the pool (-1 if it can). */
static int reduce_why(MPI_Count count, const cxlsim_type_t *info, MPI_Datatype type, MPI_Op op, int *kop)
{
    *kop = cxlsim_reduce_op(op);
    if (count < 0) return CXLSIM_WHY_ARGS;
    if (info->reduce_dtype < 0) return CXLSIM_WHY_DATATYPE;
    if (*kop < 0 || !cxl_fold_for(info->reduce_dtype, *kop)) return CXLSIM_WHY_OP;
    if (type == MPI_BYTE && *kop != CXL_BAND && *kop != CXL_BOR && *kop != CXL_BXOR) return CXLSIM_WHY_OP;
    return -1;
}

static int allreduce(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype type, MPI_Op op,
                     MPI_Comm comm, int large)
{
    double t = cxlsim_trace_begin();
    int rc = MPI_SUCCESS, krc = 0, kop;
    cxlsim_type_t info;
    cxlsim_type_info(type, &info);
    uint64_t bytes = count > 0 ? (uint64_t)count * (uint64_t)info.size : 0;
    int why = reduce_why(count, &info, type, op, &kop);
    cxlsim_pool_t *pool = pool_for(comm, &why);
    if (why >= 0) {
        rc = large ? PMPI_Allreduce_c(sendbuf, recvbuf, count, type, op, comm)
                   : PMPI_Allreduce(sendbuf, recvbuf, (int)count, type, op, comm);
    } else if (count) {
        const char *send = sendbuf == MPI_IN_PLACE ? (const char *)recvbuf : (const char *)sendbuf;
        cxlsim_pool_t *waited = pool;
        krc = pool->nodes ? cxlsim_nodes_allreduce(pool->nodes, send, (char *)recvbuf, count, info.reduce_dtype, kop,
                                                   type, op, &waited)
                          : cxl_coll_allreduce(&pool->coll, send, (char *)recvbuf, (uint64_t)count, info.reduce_dtype,
                                               kop, cxlsim_settings.large_bytes);
        if (krc) cxlsim_pool_abort(waited, "MPI_Allreduce");
    }
    finish(pool, CXLSIM_ALLREDUCE, large, bytes, why, krc);
    cxlsim_trace_line(t, "allreduce %llu 0", (unsigned long long)bytes);
    if (pool) cxlsim_pool_leave(pool);
    return rc;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm)
{
    return allreduce(sendbuf, recvbuf, count, type, op, comm, 0);
}

int MPI_Allreduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype type, MPI_Op op, MPI_Comm comm)
{
    return allreduce(sendbuf, recvbuf, count, type, op, comm, 1);
}

static int reduce_scatter_block(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype type, MPI_Op op,
                                MPI_Comm comm, int large)
{
    double t = cxlsim_trace_begin();
    int rc = MPI_SUCCESS, krc = 0, kop;
    cxlsim_type_t info;
    cxlsim_type_info(type, &info);
    int why = reduce_why(count, &info, type, op, &kop);
    cxlsim_pool_t *pool = flat_only(pool_for(comm, &why), &why);
    int P = 1;
    if (comm != MPI_COMM_NULL) PMPI_Comm_size(comm, &P);
    uint64_t bytes = count > 0 ? (uint64_t)count * (uint64_t)info.size * (uint64_t)P : 0;
    if (why < 0 && count && cxlsim_settings.slot_bytes < (uint64_t)pool->size * info.size) why = CXLSIM_WHY_SLOT;
    if (why >= 0) {
        rc = large ? PMPI_Reduce_scatter_block_c(sendbuf, recvbuf, count, type, op, comm)
                   : PMPI_Reduce_scatter_block(sendbuf, recvbuf, (int)count, type, op, comm);
    } else if (count) {
        const char *send = sendbuf == MPI_IN_PLACE ? (const char *)recvbuf : (const char *)sendbuf;
        krc = cxl_coll_reduce_scatter_block(&pool->coll, send, (char *)recvbuf, (uint64_t)count, info.reduce_dtype,
                                            kop);
    }
    finish(pool, CXLSIM_REDUCE_SCATTER_BLOCK, large, bytes, why, krc);
    if (cxlsim_trace_on()) {
        char *counts = malloc((size_t)P * 24 + 1), *at = counts; /* each rank's bytes, P times */
        if (!counts) {
            fprintf(stderr, "cxlsim-mpi: CXLSIM_MPI_TRACE: out of memory for a reducescatter line\n");
            PMPI_Abort(MPI_COMM_WORLD, 2);
        }
        *at = 0;
        for (int r = 0; r < P; r++)
            at += sprintf(at, "%llu ", (unsigned long long)(count > 0 ? count * info.size : 0));
        cxlsim_trace_line(t, "reducescatter %s0", counts);
        free(counts);
    }
    if (pool) cxlsim_pool_leave(pool);
    return rc;
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                             MPI_Comm comm)
{
    return reduce_scatter_block(sendbuf, recvbuf, count, type, op, comm, 0);
}

int MPI_Reduce_scatter_block_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype type, MPI_Op op,
                               MPI_Comm comm)
{
    return reduce_scatter_block(sendbuf, recvbuf, count, type, op, comm, 1);
}

/* ---- broadcast ---- */
static int bcast(void *buf, MPI_Count count, MPI_Datatype type, int root, MPI_Comm comm, int large)
{
    double t = cxlsim_trace_begin();
    int why = -1, rc = MPI_SUCCESS, krc = 0;
    cxlsim_type_t info;
    cxlsim_type_info(type, &info);
    uint64_t bytes = count > 0 ? (uint64_t)count * (uint64_t)info.size : 0;
    if (count < 0) why = CXLSIM_WHY_ARGS;
    else if (!info.ok) why = CXLSIM_WHY_DATATYPE;
    cxlsim_pool_t *pool = flat_only(pool_for(comm, &why), &why);
    if (why < 0 && (root < 0 || root >= pool->size)) why = CXLSIM_WHY_ARGS;
    if (why >= 0) {
        rc = large ? PMPI_Bcast_c(buf, count, type, root, comm) : PMPI_Bcast(buf, (int)count, type, root, comm);
    } else if (bytes) {
        void *tmp;
        int is_root = pool->rank == root;
        char *data = stage(buf, count, type, &info, bytes, is_root, &tmp);
        krc = cxl_coll_broadcast(&pool->coll, data, bytes, root);
        unstage(tmp, buf, count, type, bytes, !is_root);
    }
    finish(pool, CXLSIM_BCAST, large, bytes, why, krc);
    cxlsim_trace_line(t, "bcast %llu %d", (unsigned long long)bytes, cxlsim_trace_on() ? cxlsim_trace_world_rank(comm, root) : 0);
    if (pool) cxlsim_pool_leave(pool);
    return rc;
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
    return bcast(buf, count, type, root, comm, 0);
}

int MPI_Bcast_c(void *buf, MPI_Count count, MPI_Datatype type, int root, MPI_Comm comm)
{
    return bcast(buf, count, type, root, comm, 1);
}

/* ---- alltoall ---- */
static int alltoall(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, void *recvbuf, MPI_Count rcount,
                    MPI_Datatype rtype, MPI_Comm comm, int large)
{
    double t = cxlsim_trace_begin();
    int why = -1, rc = MPI_SUCCESS, krc = 0, inplace = sendbuf == MPI_IN_PLACE;
    cxlsim_type_t st, rt;
    cxlsim_type_info(rtype, &rt);
    uint64_t block = rcount > 0 ? (uint64_t)rcount * (uint64_t)rt.size : 0;
    if (rcount < 0) why = CXLSIM_WHY_ARGS;
    else if (!rt.ok) why = CXLSIM_WHY_DATATYPE;
    else if (!inplace) {
        cxlsim_type_info(stype, &st);
        if (!st.ok) why = CXLSIM_WHY_DATATYPE;
        else if (scount < 0 || (uint64_t)scount * (uint64_t)st.size != block) why = CXLSIM_WHY_ARGS;
    }
    cxlsim_pool_t *pool = flat_only(pool_for(comm, &why), &why);
    uint64_t P = pool ? (uint64_t)pool->size : 1;
    if (why < 0 && block && cxlsim_settings.slot_bytes < P) why = CXLSIM_WHY_SLOT;
    if (why >= 0) {
        rc = large ? PMPI_Alltoall_c(sendbuf, scount, stype, recvbuf, rcount, rtype, comm)
                   : PMPI_Alltoall(sendbuf, (int)scount, stype, recvbuf, (int)rcount, rtype, comm);
    } else if (block) {
        void *rtmp, *stmp = NULL;
        MPI_Count rtotal = rcount * (MPI_Count)P;
        char *recv = stage(recvbuf, rtotal, rtype, &rt, block * P, inplace, &rtmp);
        const char *send = inplace ? recv : stage(sendbuf, scount * (MPI_Count)P, stype, &st, block * P, 1, &stmp);
        krc = cxl_coll_alltoall(&pool->coll, send, recv, block);
        unstage(stmp, NULL, 0, stype, 0, 0);
        unstage(rtmp, recvbuf, rtotal, rtype, block * P, 1);
    }
    finish(pool, CXLSIM_ALLTOALL, large, block * P, why, krc);
    cxlsim_trace_line(t, "alltoall %llu %llu", (unsigned long long)block, (unsigned long long)block);
    if (pool) cxlsim_pool_leave(pool);
    return rc;
}

int MPI_Alltoall(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype,
                 MPI_Comm comm)
{
    return alltoall(sendbuf, scount, stype, recvbuf, rcount, rtype, comm, 0);
}

int MPI_Alltoall_c(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, void *recvbuf, MPI_Count rcount,
                   MPI_Datatype rtype, MPI_Comm comm)
{
    return alltoall(sendbuf, scount, stype, recvbuf, rcount, rtype, comm, 1);
}

/* ---- barrier ---- */
int MPI_Barrier(MPI_Comm comm)
{
    double t = cxlsim_trace_begin();
    int why = -1, rc = MPI_SUCCESS, krc = 0;
    cxlsim_pool_t *pool = flat_only(pool_for(comm, &why), &why);
    if (why >= 0) rc = PMPI_Barrier(comm);
    else krc = cxl_coll_barrier(&pool->coll);
    finish(pool, CXLSIM_BARRIER, 0, 0, why, krc);
    cxlsim_trace_line(t, "barrier");
    if (pool) cxlsim_pool_leave(pool);
    return rc;
}
