/* stats.c: per-collective counters of this rank, and their report at MPI_Finalize.
 *
 * For each collective: calls, large-count (_c) calls among them, bytes (this rank's
 * contribution: its block, its vector, its P blocks), calls on the pool, those among them on
 * the hierarchical path (ranks on several nodes: pool in each node, PMPI between them), and
 * fallbacks by reason. Pool calls are counted per pool (cxlsim_stats_pool, cxlsim_mpi.h) and
 * merged here when the pool is freed. With CXLSIM_MPI_STATS=1, MPI_Finalize sums them over MPI_COMM_WORLD and world
 * rank 0 prints one table on stderr:
 *
 *   cxlsim-mpi stats: 2 ranks, sums over ranks; pool shm, coherence hw, slot 1048576 B, allreduce large 65536 B
 *   collective                calls    c_calls          bytes       pool       hier   fallback  reasons
 *   MPI_Allgather                10          0          40960         10          0          0
 *   MPI_Allreduce                 4          0            160          2          0          2  op=2
 */
#include <stdio.h>
#include <string.h>

#include "cxlsim_mpi.h"

const char *const cxlsim_coll_names[CXLSIM_NCOLL] = {
    "MPI_Allgather", "MPI_Allreduce", "MPI_Reduce_scatter_block", "MPI_Bcast", "MPI_Alltoall", "MPI_Barrier",
};
const char *const cxlsim_why_names[CXLSIM_NWHY] = {
    "disabled", "thread", "comm", "node", "setup", "datatype", "op", "args", "slot",
};

enum { CALLS, C_CALLS, BYTES, POOL, HIER, FALLBACK, WHY0, NCOUNTERS = WHY0 + CXLSIM_NWHY };

static unsigned long long counters[CXLSIM_NCOLL][NCOUNTERS];

static void count(int coll, int large_count, uint64_t bytes)
{
    __atomic_fetch_add(&counters[coll][CALLS], 1, __ATOMIC_RELAXED);
    if (large_count) __atomic_fetch_add(&counters[coll][C_CALLS], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&counters[coll][BYTES], bytes, __ATOMIC_RELAXED);
}

void cxlsim_stats_merge(const cxlsim_pool_counts_t *counts)
{
    for (int c = 0; c < CXLSIM_NCOLL; c++) {
        if (!counts[c].calls) continue;
        __atomic_fetch_add(&counters[c][CALLS], counts[c].calls, __ATOMIC_RELAXED);
        __atomic_fetch_add(&counters[c][C_CALLS], counts[c].c_calls, __ATOMIC_RELAXED);
        __atomic_fetch_add(&counters[c][BYTES], counts[c].bytes, __ATOMIC_RELAXED);
        __atomic_fetch_add(&counters[c][POOL], counts[c].calls, __ATOMIC_RELAXED);
        __atomic_fetch_add(&counters[c][HIER], counts[c].hier, __ATOMIC_RELAXED);
    }
}

void cxlsim_stats_fallback(int coll, int large_count, uint64_t bytes, int why)
{
    count(coll, large_count, bytes);
    __atomic_fetch_add(&counters[coll][FALLBACK], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&counters[coll][WHY0 + why], 1, __ATOMIC_RELAXED);
}

void cxlsim_stats_report(void)
{
    unsigned long long sums[CXLSIM_NCOLL][NCOUNTERS];
    int rank, size;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    PMPI_Reduce(counters, sums, CXLSIM_NCOLL * NCOUNTERS, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank != 0) return;
    const cxlsim_settings_t *s = &cxlsim_settings;
    char out[8192];
    size_t used = 0;
    used += snprintf(out + used, sizeof out - used,
                     "cxlsim-mpi stats: %d ranks, sums over ranks; pool %s, coherence %s, slot %llu B, "
                     "allreduce large %llu B\n"
                     "%-26s %10s %10s %14s %10s %10s %10s  %s\n",
                     size, s->pool.text, s->flush ? "flush" : "hw", (unsigned long long)s->slot_bytes,
                     (unsigned long long)s->large_bytes, "collective",
                     "calls", "c_calls", "bytes", "pool", "hier", "fallback", "reasons");
    for (int c = 0; c < CXLSIM_NCOLL; c++) {
        unsigned long long *v = sums[c];
        used += snprintf(out + used, sizeof out - used, "%-26s %10llu %10llu %14llu %10llu %10llu %10llu ",
                         cxlsim_coll_names[c], v[CALLS], v[C_CALLS], v[BYTES], v[POOL], v[HIER], v[FALLBACK]);
        for (int w = 0; w < CXLSIM_NWHY; w++)
            if (v[WHY0 + w]) used += snprintf(out + used, sizeof out - used, " %s=%llu", cxlsim_why_names[w], v[WHY0 + w]);
        used += snprintf(out + used, sizeof out - used, "\n");
        if (used >= sizeof out) break;
    }
    fputs(out, stderr);
    fflush(stderr);
}
