/* cxlsim_mpi.h: shared declarations of libcxlsim_mpi.so, the PMPI interposition library that
 * runs MPI collectives on an emulated CXL pool (see docs/mpi.md).
 *
 * settings.c   the CXLSIM_MPI_* environment settings
 * pools.c      one pool per communicator (set up at its first pool collective), datatypes
 * stats.c      per-collective counters, printed at MPI_Finalize with CXLSIM_MPI_STATS=1
 * trace.c      SimGrid time-independent traces (CXLSIM_MPI_TRACE=DIR)
 * collectives.c the MPI_* wrappers: pool path or PMPI fallback
 * p2p.c        traced point-to-point wrappers
 */
#ifndef CXLSIM_MPI_H
#define CXLSIM_MPI_H

#include <mpi.h>
#include <stdint.h>

#include "cxl_coll.h"
#include "cxl_pool.h"

/* Everything below is internal to the library: hidden symbols are called directly, not through
 * the PLT (only the MPI_* wrappers, declared in mpi.h, are exported). */
#pragma GCC visibility push(hidden)

/* Before PMPI_Abort, microseconds for mpiexec to forward the rank's last message (hydra's
 * proxies read the ranks' stderr through pipes, and an abort can end them before they do). */
#define CXLSIM_ABORT_GRACE_US 200000

/* ---- settings ---- */
typedef struct {
    cxl_pool_spec_t pool;     /* CXLSIM_MPI_POOL: shm (default), file:PATH, dax:PATH, numa:N */
    int pool_shared;          /* CXLSIM_MPI_POOL_SHARED: 1 = the file: or dax: memory is the same on every node */
    int flush;                /* CXLSIM_MPI_COHERENCE: 0 = hw, 1 = flush (default: the backend's) */
    uint64_t slot_bytes;      /* CXLSIM_MPI_SLOT: bytes per rank per buffer (default 1 MiB) */
    uint64_t large_bytes;     /* CXLSIM_MPI_ALLREDUCE_LARGE: allreduce chunks from here use reduce-scatter + allgather */
    double latency_ns;        /* CXLSIM_MPI_LATENCY_NS: emulated pool latency (0 = off) */
    double bw_bytes_per_ns;   /* CXLSIM_MPI_BANDWIDTH: emulated pool bandwidth in GB/s = bytes/ns (0 = off) */
    double timeout_s;         /* CXLSIM_MPI_TIMEOUT: longest wait for another rank, seconds (default 60) */
    int verbose;              /* CXLSIM_MPI_VERBOSE: 0 silent, 1 warnings (default), 2 every pool set-up */
    int stats;                /* CXLSIM_MPI_STATS: 1 = print the stats at MPI_Finalize */
    int disabled;             /* CXLSIM_MPI_DISABLE: 1 = every call falls back (reason "disabled") */
    int thread_multiple;      /* MPI_Query_thread() is MPI_THREAD_MULTIPLE: threads may enter at once */
    int fake_nodes;           /* CXLSIM_MPI_FAKE_NODES: k > 1 puts rank r of each communicator on fake node r % k */
    char trace_dir[CXL_POOL_PATH_MAX]; /* CXLSIM_MPI_TRACE: write one trace per rank here ("" = off) */
} cxlsim_settings_t;

extern cxlsim_settings_t cxlsim_settings;

/* Parse the environment once (after PMPI_Init); a bad value aborts the job naming the variable. */
void cxlsim_settings_load(void);
/* What must match on every rank of a pool: a text rendering of the settings that shape it. */
void cxlsim_settings_fingerprint(char *out, size_t n);

/* ---- collectives and fallback reasons ---- */
enum {
    CXLSIM_ALLGATHER, CXLSIM_ALLREDUCE, CXLSIM_REDUCE_SCATTER_BLOCK, CXLSIM_BCAST, CXLSIM_ALLTOALL, CXLSIM_BARRIER,
    CXLSIM_NCOLL
};
enum {
    CXLSIM_WHY_DISABLED, CXLSIM_WHY_THREAD, CXLSIM_WHY_COMM, CXLSIM_WHY_NODE, CXLSIM_WHY_SETUP,
    CXLSIM_WHY_DATATYPE, CXLSIM_WHY_OP, CXLSIM_WHY_ARGS, CXLSIM_WHY_SLOT, CXLSIM_WHY_UNSHARED, CXLSIM_NWHY
};
extern const char *const cxlsim_coll_names[CXLSIM_NCOLL];
extern const char *const cxlsim_why_names[CXLSIM_NWHY];

/* ---- stats ----
 * A pool call is counted in its pool's counters (plain increments: one thread at a time is in a
 * pool), which are added to the library's totals when the pool is freed; fallbacks go straight to
 * the totals (atomically). */
typedef struct {
    unsigned long long calls, c_calls, bytes, hier; /* pool calls, _c forms among them, bytes, hierarchical */
} cxlsim_pool_counts_t;
static inline void cxlsim_stats_pool(cxlsim_pool_counts_t *counts, int large_count, uint64_t bytes, int hierarchical)
{
    counts->calls++;
    counts->c_calls += (unsigned)large_count;
    counts->bytes += bytes;
    counts->hier += (unsigned)hierarchical;
}
void cxlsim_stats_fallback(int coll, int large_count, uint64_t bytes, int why);
/* Add a pool's counters (one per collective) to the totals. */
void cxlsim_stats_merge(const cxlsim_pool_counts_t *counts);
/* Sum the totals over MPI_COMM_WORLD; its rank 0 prints them on stderr (CXLSIM_MPI_STATS=1) and
 * writes them to DIR/CXLSIM_STATS_FILE (CXLSIM_MPI_TRACE=DIR). Collective on the world; after every
 * pool is freed, so every pool call is in the totals. */
#define CXLSIM_STATS_FILE "cxlsim_mpi_stats.txt"
void cxlsim_stats_report(void);
/* The host placement a pool's placement probe found (pools.c), for the stats header's
 * ", placement P (flag round trip R ns)": fast (the ranks' cores share a cache), slow (they do not),
 * disturbed (a rank lost its CPU through every try: no placement). */
enum { CXLSIM_PLACEMENT_FAST, CXLSIM_PLACEMENT_SLOW, CXLSIM_PLACEMENT_DISTURBED, CXLSIM_NPLACEMENT };
extern const char *const cxlsim_placement_names[CXLSIM_NPLACEMENT];
/* Record one probe's verdict and its flag round trip (ns), agreed by the pool's ranks. */
void cxlsim_stats_probe(int placement, double roundtrip_ns);

/* ---- pools ---- */
typedef struct cxlsim_pool {
    MPI_Comm comm;
    int usable;              /* 1: collectives run on the pool; 0: they fall back with `why` */
    int why;
    int size, rank;
    int *world_ranks;        /* world rank of each rank of comm, for messages */
    cxl_segment_t segment;
    uint64_t nonce;          /* the job nonce rank 0 wrote into the pool's header (its epochs start from it) */
    int arena_region;        /* a shared pool's region this process took from its arena (pools.c) */
    uint64_t region_offset;  /* its offset in the shared memory */
    cxl_coll_t coll;
    int busy;                /* a thread is in one of its collectives */
    cxlsim_pool_counts_t counts[CXLSIM_NCOLL]; /* this pool's calls, per collective (stats) */
    struct cxlsim_nodes *nodes; /* ranks on several nodes: the hierarchical path (nodes.c); else NULL */
    struct cxlsim_pool *next;
} cxlsim_pool_t;

/* The pool of comm, set up on first use (collective on comm: every rank calls it in the same
 * call, since every check before it depends only on arguments that match on every rank).
 * Returns NULL with *why set when comm cannot use one. The last communicator each thread asked
 * for is remembered, so a run of calls on one communicator looks its attribute up once. */
cxlsim_pool_t *cxlsim_pool_of(MPI_Comm comm, int *why);
/* Delete every pool (unmap; the segments are already unlinked); called by MPI_Finalize. */
void cxlsim_pools_free_all(void);
/* A pool call timed out: print which ranks never arrived, then PMPI_Abort. Does not return. */
void cxlsim_pool_abort(cxlsim_pool_t *pool, const char *call);

/* A flat pool for comm, whose ranks all share one node (not cached, not listed: the caller owns it). */
cxlsim_pool_t *cxlsim_pool_flat(MPI_Comm comm);
void cxlsim_pool_destroy(cxlsim_pool_t *pool);

/* ---- many nodes (nodes.c) ----
 * A communicator whose ranks span nodes (or CXLSIM_MPI_FAKE_NODES=k: rank r on fake node r % k)
 * runs allgather and allreduce hierarchically: the pool inside each node, PMPI between the node
 * leaders (each node's lowest rank), the pool again to spread the result. */
typedef struct cxlsim_nodes {
    MPI_Comm node_comm;       /* this rank's node */
    MPI_Comm leader_comm;     /* the leaders, by node; MPI_COMM_NULL on the other ranks */
    cxlsim_pool_t *node_pool; /* the flat pool of node_comm */
    int nnodes;
    int *order;               /* comm ranks node by node, each node's in node-rank order */
    MPI_Count *counts;        /* ranks per node */
    MPI_Count *first;         /* index in order of each node's first rank */
} cxlsim_nodes_t;

/* Set up the hierarchy of pool (collective on pool->comm; node_comm is adopted). 1 on success. */
int cxlsim_nodes_setup(cxlsim_pool_t *pool, MPI_Comm node_comm);
void cxlsim_nodes_free(cxlsim_nodes_t *nodes);
/* The hierarchical collectives; return CXL_COLL_OK, or CXL_COLL_TIMEOUT after aborting nothing
 * (the caller aborts naming the node pool's missing ranks: *timed_out is that pool). */
int cxlsim_nodes_allgather(cxlsim_nodes_t *nodes, const char *send, char *recv, uint64_t nbytes,
                           cxlsim_pool_t **timed_out);
int cxlsim_nodes_allreduce(cxlsim_nodes_t *nodes, const char *send, char *recv, MPI_Count count, int dtype, int op,
                           MPI_Datatype type, MPI_Op mpi_op, cxlsim_pool_t **timed_out);

/* ---- datatypes ---- */
typedef struct {
    int ok;              /* the type signature is a sequence of one basic type: the pool may move it */
    int reduce_dtype;    /* CXL_I8..CXL_F64 for a predefined type reductions run on, else -1 */
    MPI_Count size;      /* bytes of one element (MPI_Type_size) */
    MPI_Aint true_lb;    /* where an element's data starts */
    int contiguous;      /* count elements are size x count bytes at buf + true_lb */
} cxlsim_type_t;

void cxlsim_type_info(MPI_Datatype type, cxlsim_type_t *out);
/* CXL_SUM..CXL_LXOR for a predefined op the kernels run, else -1. */
int cxlsim_reduce_op(MPI_Op op);

/* ---- tracing ---- */
int cxlsim_trace_on(void);
double cxlsim_trace_begin(void);                          /* call entry time; records compute since the last call */
void cxlsim_trace_skip(void);                             /* the call since its begin wrote no line and is not compute */
void cxlsim_trace_line(double begin, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cxlsim_trace_ran(int pool, int hier, int why);       /* the traced call ran on the pool, hier, or fell back (why >= 0) */
void cxlsim_trace_setup(void);                            /* the traced call set up its communicator's pool */
void cxlsim_trace_open(void);
void cxlsim_trace_close(void);
int cxlsim_trace_world_rank(MPI_Comm comm, int rank);  /* rank of comm in MPI_COMM_WORLD */
void cxlsim_trace_request_posted(MPI_Request req, int src, int dst, int tag);  /* world ranks */
int cxlsim_trace_request_done(MPI_Request req, int *src, int *dst, int *tag); /* 1 if it was posted */
/* Write the send or isend line of a send made at `t` (p2p.c); an isend's request is remembered for its wait. */
void cxlsim_trace_send(double t, int blocking, MPI_Count count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                       const MPI_Request *req);

/* ---- the per-pool guard (MPI_THREAD_MULTIPLE) ----
 * Threads may run collectives on different communicators at once (their pools are separate).
 * Two threads in one communicator's collectives at once is outside MPI's rules; the second
 * falls back (reason "thread") instead of corrupting the pool's epochs. */
/* 1 if this thread now owns the pool, else 0. Below MPI_THREAD_MULTIPLE one thread at a time
 * calls MPI (the program's promise), so there is nothing to guard. */
static inline int cxlsim_pool_enter(cxlsim_pool_t *pool)
{
    int expected = 0;
    if (!cxlsim_settings.thread_multiple) return 1;
    return __atomic_compare_exchange_n(&pool->busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}
static inline void cxlsim_pool_leave(cxlsim_pool_t *pool)
{
    if (cxlsim_settings.thread_multiple) __atomic_store_n(&pool->busy, 0, __ATOMIC_RELEASE);
}

void cxlsim_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#pragma GCC visibility pop

#endif
