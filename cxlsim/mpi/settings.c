/* settings.c: the CXLSIM_MPI_* environment settings, and messages.
 *
 * Every setting is read once, after PMPI_Init. A value that does not parse aborts the job
 * with a message naming the variable, the value and what was expected: a typo must not
 * silently run a different configuration. `cxlsim mpi run` checks the same rules before
 * it launches (cxlsim/mpi/settings.py).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cxlsim_mpi.h"

cxlsim_settings_t cxlsim_settings;

extern char **environ;

static const char *const known[] = {
    "CXLSIM_MPI_POOL", "CXLSIM_MPI_COHERENCE", "CXLSIM_MPI_SLOT", "CXLSIM_MPI_ALLREDUCE_LARGE",
    "CXLSIM_MPI_LATENCY_NS", "CXLSIM_MPI_BANDWIDTH", "CXLSIM_MPI_TIMEOUT", "CXLSIM_MPI_VERBOSE",
    "CXLSIM_MPI_STATS", "CXLSIM_MPI_DISABLE", "CXLSIM_MPI_TRACE", "CXLSIM_MPI_FAKE_NODES", "CXLSIM_MPI_POOL_SHARED",
};

static void bad_setting(const char *name, const char *value, const char *expected)
{
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank <= 0) fprintf(stderr, "cxlsim-mpi: %s: expected %s, got '%s'\n", name, expected, value);
    fflush(stderr);
    usleep(CXLSIM_ABORT_GRACE_US); /* let the process manager forward the message before it ends the job */
    PMPI_Abort(MPI_COMM_WORLD, 2);
}

static double number_setting(const char *name, double fallback, double lo, int lo_open, const char *expected)
{
    const char *text = getenv(name);
    if (!text || !*text) return fallback;
    char *end;
    double v = strtod(text, &end);
    if (*end || end == text || v != v || v > 1e300 || (lo_open ? v <= lo : v < lo)) bad_setting(name, text, expected);
    return v;
}

static uint64_t bytes_setting(const char *name, uint64_t fallback, uint64_t lo)
{
    const char *text = getenv(name);
    if (!text || !*text) return fallback;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end || end == text || text[0] == '-' || v < lo || v > (1ULL << 36)) {
        char expected[96];
        snprintf(expected, sizeof expected, "a whole number of bytes from %llu to %llu", (unsigned long long)lo,
                 1ULL << 36);
        bad_setting(name, text, expected);
    }
    return v;
}

static int count_setting(const char *name, int fallback, int hi)
{
    const char *text = getenv(name);
    if (!text || !*text) return fallback;
    char *end, expected[64];
    long v = strtol(text, &end, 10);
    snprintf(expected, sizeof expected, "a whole number from 0 to %d", hi);
    if (*end || end == text || v < 0 || v > hi) bad_setting(name, text, expected);
    return (int)v;
}

static int choice_setting(const char *name, int fallback, const char *const *choices, int n, const char *expected)
{
    const char *text = getenv(name);
    if (!text || !*text) return fallback;
    for (int i = 0; i < n; i++)
        if (strcmp(text, choices[i]) == 0) return i;
    bad_setting(name, text, expected);
    return fallback;
}

/* Refuse a CXLSIM_MPI_* variable the library does not read (a typo, or a feature it lacks). */
static void refuse_unknown(void)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "CXLSIM_MPI_", 11) != 0) continue;
        size_t len = strcspn(*e, "=");
        int found = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strlen(known[i]) == len && strncmp(*e, known[i], len) == 0) found = 1;
        if (!found && (*e)[len] == '=' && (*e)[len + 1]) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(len < 127 ? len : 127), *e);
            bad_setting(name, *e + len + 1, "no such setting (see docs/mpi.md)");
        }
    }
}

void cxlsim_settings_load(void)
{
    static const char *const flags[] = {"0", "1"};
    static const char *const coherence[] = {"hw", "flush"};
    static const char *const verbosity[] = {"0", "1", "2"};
    cxlsim_settings_t *s = &cxlsim_settings;
    char err[512];
    refuse_unknown();
    const char *pool = getenv("CXLSIM_MPI_POOL");
    if (cxl_pool_spec_parse(pool && *pool ? pool : "shm", &s->pool, err, sizeof err) != CXL_POOL_OK)
        bad_setting("CXLSIM_MPI_POOL", pool, "'shm', 'file:PATH', 'dax:PATH' or 'numa:N'");
    s->pool_shared = choice_setting("CXLSIM_MPI_POOL_SHARED", 0, flags, 2, "0 or 1");
    if (s->pool_shared && s->pool.kind != CXL_POOL_FILE && s->pool.kind != CXL_POOL_DAX)
        bad_setting("CXLSIM_MPI_POOL", pool && *pool ? pool : "shm",
                    "'file:PATH' or 'dax:PATH' with CXLSIM_MPI_POOL_SHARED=1 (memory every node maps)");
    s->flush = choice_setting("CXLSIM_MPI_COHERENCE", cxl_pool_default_flush(&s->pool), coherence, 2, "'hw' or 'flush'");
    s->slot_bytes = bytes_setting("CXLSIM_MPI_SLOT", 1u << 20, 64);
    s->large_bytes = bytes_setting("CXLSIM_MPI_ALLREDUCE_LARGE", 64u << 10, 0);
    s->latency_ns = number_setting("CXLSIM_MPI_LATENCY_NS", 0.0, 0.0, 0, "a number of nanoseconds >= 0 (0 = off)");
    s->bw_bytes_per_ns = number_setting("CXLSIM_MPI_BANDWIDTH", 0.0, 0.0, 0, "a bandwidth in GB/s >= 0 (0 = off)");
    s->timeout_s = number_setting("CXLSIM_MPI_TIMEOUT", 60.0, 0.0, 1, "a number of seconds > 0");
    s->verbose = choice_setting("CXLSIM_MPI_VERBOSE", 1, verbosity, 3, "0, 1 or 2");
    s->stats = choice_setting("CXLSIM_MPI_STATS", 0, flags, 2, "0 or 1");
    s->disabled = choice_setting("CXLSIM_MPI_DISABLE", 0, flags, 2, "0 or 1");
    s->fake_nodes = count_setting("CXLSIM_MPI_FAKE_NODES", 0, 4096);
    const char *trace = getenv("CXLSIM_MPI_TRACE");
    snprintf(s->trace_dir, sizeof s->trace_dir, "%s", trace ? trace : "");
    int level = MPI_THREAD_MULTIPLE; /* (if the query fails, guard as if threads may race) */
    if (PMPI_Query_thread(&level) != MPI_SUCCESS) level = MPI_THREAD_MULTIPLE;
    s->thread_multiple = level == MPI_THREAD_MULTIPLE;
}

void cxlsim_settings_fingerprint(char *out, size_t n)
{
    const cxlsim_settings_t *s = &cxlsim_settings;
    /* a shared pool's path may differ from node to node (each names its own device): its kind must match */
    snprintf(out, n, "pool=%s coherence=%d slot=%llu large=%llu latency=%.17g bw=%.17g fake_nodes=%d",
             !s->pool_shared ? s->pool.text : s->pool.kind == CXL_POOL_DAX ? "shared dax" : "shared file", s->flush, (unsigned long long)s->slot_bytes, (unsigned long long)s->large_bytes, s->latency_ns,
             s->bw_bytes_per_ns, s->fake_nodes);
}

void cxlsim_log(int level, const char *fmt, ...)
{
    if (cxlsim_settings.verbose < level) return;
    char line[1024];
    int rank = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "cxlsim-mpi[%d]: %s\n", rank, line);
}
