/* stats.c: per-collective counters of this rank, and their report at MPI_Finalize.
 *
 * For each collective: calls, large-count (_c) calls among them, bytes (this rank's
 * contribution: its block, its vector, its P blocks), calls on the pool, those among them on
 * the hierarchical path (ranks on several nodes: pool in each node, PMPI between them), and
 * fallbacks by reason. Pool calls are counted per pool (cxlsim_stats_pool, cxlsim_mpi.h) and
 * merged here when the pool is freed. MPI_Finalize sums them over MPI_COMM_WORLD, and world rank 0
 * prints one table on stderr (CXLSIM_MPI_STATS=1) and writes the same text to
 * DIR/cxlsim_mpi_stats.txt beside the traces (CXLSIM_MPI_TRACE=DIR, stats on or off; atomically:
 * a temporary file in DIR renamed over it), so a replay of the traces finds it without stderr:
 *
 *   cxlsim-mpi stats: 2 ranks, sums over ranks; pool shm, coherence hw, slot 1048576 B, allreduce large 65536 B, placement fast (flag round trip 87 ns)
 *   collective                calls    c_calls          bytes       pool       hier   fallback  reasons
 *   MPI_Allgather                10          0          40960         10          0          0
 *   MPI_Allreduce                 4          0            160          2          0          2  op=2
 *
 * The header ends with the host placement the pools' placement probes found (pools.c: two-rank
 * hw pools without emulated timing probe their flag round trip at set-up): ", placement P (flag
 * round trip R ns)", P fast, slow or disturbed and R that probe's round trip in whole ns (world
 * rank 0's first probe, else the longest first probe of another rank); ", placement mixed (flag
 * round trip R ns, the first probe's; probed fast, slow)" when probes on the world's ranks classed
 * differently; ", placement not probed" when no pool probed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cxlsim_mpi.h"

const char *const cxlsim_coll_names[CXLSIM_NCOLL] = {
    "MPI_Allgather", "MPI_Allreduce", "MPI_Reduce_scatter_block", "MPI_Bcast", "MPI_Alltoall", "MPI_Barrier",
};
const char *const cxlsim_why_names[CXLSIM_NWHY] = {
    "disabled", "thread", "comm", "node", "setup", "datatype", "op", "args", "slot", "unshared",
};

const char *const cxlsim_placement_names[CXLSIM_NPLACEMENT] = {"fast", "slow", "disturbed"};

enum { CALLS, C_CALLS, BYTES, POOL, HIER, FALLBACK, WHY0, NCOUNTERS = WHY0 + CXLSIM_NWHY };

/* This rank's placement probes: the first one's class and round trip, and every class seen. */
static struct {
    int first;               /* class of the first probe, -1: none yet */
    double first_ns;
    unsigned seen;           /* bit c: a probe classed c */
} probes = {-1, 0.0, 0};
static pthread_mutex_t probes_lock = PTHREAD_MUTEX_INITIALIZER;

void cxlsim_stats_probe(int placement, double roundtrip_ns)
{
    pthread_mutex_lock(&probes_lock);
    if (probes.first < 0) {
        probes.first = placement;
        probes.first_ns = roundtrip_ns;
    }
    probes.seen |= 1u << placement;
    pthread_mutex_unlock(&probes_lock);
}

/* ", placement ..." of the header from every world rank's probes (collective on the world;
 * meaningful on rank 0). */
static void placement_text(int rank, char *out, size_t n)
{
    unsigned seen = 0;
    double firsts[CXLSIM_NPLACEMENT], longest[CXLSIM_NPLACEMENT];
    for (int c = 0; c < CXLSIM_NPLACEMENT; c++) firsts[c] = probes.first == c ? probes.first_ns : -1.0;
    PMPI_Reduce(&probes.seen, &seen, 1, MPI_UNSIGNED, MPI_BOR, 0, MPI_COMM_WORLD);
    PMPI_Reduce(firsts, longest, CXLSIM_NPLACEMENT, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank != 0) return;
    int first = probes.first;
    double ns = probes.first_ns;
    for (int c = 0; first < 0 && c < CXLSIM_NPLACEMENT; c++)
        if (longest[c] >= 0.0 && (first < 0 || longest[c] > ns)) {
            first = c;
            ns = longest[c];
        }
    if (first < 0) {
        snprintf(out, n, ", placement not probed");
        return;
    }
    if (seen == 1u << first) {
        snprintf(out, n, ", placement %s (flag round trip %.0f ns)", cxlsim_placement_names[first], ns);
        return;
    }
    size_t used = (size_t)snprintf(out, n, ", placement mixed (flag round trip %.0f ns, the first probe's; probed", ns);
    for (int c = 0, listed = 0; c < CXLSIM_NPLACEMENT && used < n; c++)
        if (seen & (1u << c))
            used += (size_t)snprintf(out + used, n - used, "%s %s", listed++ ? "," : "", cxlsim_placement_names[c]);
    if (used < n) snprintf(out + used, n - used, ")");
}

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

/* Write text to DIR/cxlsim_mpi_stats.txt through a temporary file renamed over it, so a reader
 * sees the whole table or none; a failure is reported (the run's results are not affected). */
static void write_beside_trace(const char *dir, const char *text)
{
    char path[CXL_POOL_PATH_MAX + 32], tmp[CXL_POOL_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/" CXLSIM_STATS_FILE, dir);
    snprintf(tmp, sizeof tmp, "%s/." CXLSIM_STATS_FILE ".%ld.tmp", dir, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f) ok = (fflush(f) == 0) & (fsync(fileno(f)) == 0) & (fclose(f) == 0) & ok;
    if (ok && rename(tmp, path) == 0) return;
    cxlsim_log(1, "CXLSIM_MPI_TRACE: cannot write %s: %s\n", path, strerror(errno));
    unlink(tmp);
}

void cxlsim_stats_report(void)
{
    unsigned long long sums[CXLSIM_NCOLL][NCOUNTERS];
    int rank, size;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    char placement[256] = "";
    PMPI_Reduce(counters, sums, CXLSIM_NCOLL * NCOUNTERS, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    placement_text(rank, placement, sizeof placement);
    if (rank != 0) return;
    const cxlsim_settings_t *s = &cxlsim_settings;
    char out[8192];
    size_t used = 0;
    used += snprintf(out + used, sizeof out - used,
                     "cxlsim-mpi stats: %d ranks, sums over ranks; pool %s%s, coherence %s, slot %llu B, "
                     "allreduce large %llu B%s\n"
                     "%-26s %10s %10s %14s %10s %10s %10s  %s\n",
                     size, s->pool.text, s->pool_shared ? " (shared)" : "", s->flush ? "flush" : "hw", (unsigned long long)s->slot_bytes,
                     (unsigned long long)s->large_bytes, placement, "collective",
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
    if (s->stats) {
        fputs(out, stderr);
        fflush(stderr);
    }
    if (s->trace_dir[0]) write_beside_trace(s->trace_dir, out);
}
