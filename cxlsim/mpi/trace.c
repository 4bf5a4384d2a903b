/* trace.c: one trace per rank of every MPI call the library sees (CXLSIM_MPI_TRACE=DIR).
 *
 * The format is SimGrid 3.32's time-independent trace format, one action per line, the rank
 * first, so `cxlsim replay DIR` and SimGrid's replay both read it:
 *
 *   0 init                      no argument: counts are in the default type, MPI_BYTE
 *   0 compute 1520              the time since the previous call returned, as flops at 1 Gf/s (= ns);
 *                               DIR/trace.meta.json says {"host_speed_flops_per_s": 1e9}. Where the
 *                               node's ranks outnumber their CPUs it is the rank's CPU time in that
 *                               gap (the wall gap holds the time it waited for a CPU, which a replay
 *                               by turns makes it wait again; a sleep in the gap is then not compute)
 *   0 send 1 7 64               dst, tag, bytes (isend likewise; recv and irecv: src, tag, bytes)
 *   0 wait 0 1 7                src, dst, tag of a request a call completed: MPI_Wait, and one line per
 *                               request MPI_Waitall, Waitany, Waitsome, Test, Testall, Testany or
 *                               Testsome completed (SimGrid writes `waitAny N` for Waitany, which
 *                               names no request and its replay does not read)
 *   0 sendRecv 64 1 64 1        bytes sent, dst, bytes received, src
 *   0 allgather 4096 4096       bytes per rank sent and received (alltoall: per destination)
 *   0 allreduce 8 0             bytes, then the computation SimGrid should charge (0: it is in the time)
 *   0 bcast 1024 0              bytes, root
 *   0 reducescatter 64 64 0     MPI_Reduce_scatter_block: each rank's bytes, P of them, then 0
 *   0 barrier / 0 finalize
 *
 * Ranks and peers are MPI_COMM_WORLD ranks; as in SimGrid's own traces, a collective on a
 * sub-communicator is not marked as such. A blocking receive records the source and tag it
 * matched; irecv records MPI_ANY_SOURCE and MPI_ANY_TAG as SimGrid's -333 and -444. Waits on
 * requests the trace did not see post (collectives' or persistent ones) are not written.
 * A test that completes nothing writes no line, and the time inside it is not compute (a
 * polling loop's waits are the replay's to project); the time a call spends with no line
 * written (a wait on an unseen request) is neither compute nor communication in the trace.
 * The file is DIR/rank<world rank>.txt, closed at MPI_Finalize.
 *
 * Beside it, DIR/rank<world rank>.durations.tsv gives each action line's call its time (the trace
 * itself stays SimGrid's format, which has no field for it): a header row, then one row per line
 * of rank<r>.txt written for a call (not init, not compute), tab-separated:
 *
 *   line  start_ns  duration_ns  path  setup  gap_cpu_ns
 *   3     81234567  412          pool  0      1520
 *
 *   line         the line number (from 1) in rank<r>.txt
 *   start_ns     the call's entry, CLOCK_MONOTONIC ns (one clock for every rank of a host)
 *   duration_ns  entry to return, ns; the trace's own writes are in neither this nor compute
 *   path         pool (the pool kernels), hier (the many-node path), fallback:REASON (a collective
 *                the library passed to PMPI, REASON as in the stats), mpi (a call it only traces)
 *   setup        1 if the call set up its communicator's pool (first collective on it), else 0
 *   gap_cpu_ns   the CPU time of the compute before the call (its compute line's) where the tracer
 *                read the CPU clock (the node's ranks outnumber their CPUs), else -1
 *
 * The lines one call writes (a Waitall that completed several requests) share start and duration.
 * In the run a call's tracing is a record of its times and arguments in a 4 MiB arena, formatted into its lines
 * only when the arena is full and at MPI_Finalize: 60-100 ns a call (median; benchmarks/trace_overhead.py,
 * docs/mpi.md), where formatting each call's lines as it returned cost 370-760 ns.
 */
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cxlsim_mpi.h"

/* Each file's stdio buffer (bytes): the formatted records go out in writes of this size. */
enum { TRACE_BUFFER_BYTES = 1 << 20 };
static FILE *trace, *durations;
static int trace_rank;
static double last_end_ns;
/* Where the node's ranks outnumber their CPUs: compute is CPU time, so that a gap's compute leaves out the time
 * its rank waited for a CPU (the replay by turns makes it wait again); else compute is wall time. The CPU time at a
 * call's entry and return (cpu_at) is read from CLOCK_THREAD_CPUTIME_ID (a system call, 380 ns here) only after an
 * interval (a gap or a call) of CPU_READ_NS or more: a shorter one is taken as CPU time throughout, since a rank
 * that lost its CPU lost it for at least a hand-over (1-2 us) and mostly for a slice (ms). */
enum { CPU_READ_NS = 10000 };
static int gap_cpu;
static double last_end_cpu_ns, line_end_cpu_ns, mark_wall_ns, mark_cpu_ns;
static long trace_lines; /* lines written to the trace so far */
enum { ARENA_BYTES = 4 << 20 };
typedef struct {
    const char *fmt, *path;
    double begin, end, compute_ns; /* compute_ns: CPU time where gap_cpu, else wall */
    int why, setup;
    unsigned size; /* the record's bytes: this head, then one 8-byte word per conversion, then the strings */
} record_t;
_Static_assert(sizeof(record_t) % 8 == 0, "a record keeps its words aligned");
static char *arena;
static size_t arena_used;
/* The call being traced: what it ran on and whether it set up a pool (set by the collectives). */
static __thread __attribute__((tls_model("initial-exec"))) struct {
    const char *path;
    int why, setup;
} current = {"mpi", -1, 0};
/* The call whose line was written last: its lines share one end (a Waitall writes several). */
static double line_begin, line_end;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The rank's CPU time at wall time `now` (ns; the boundaries in time order): read after a long interval, else the
 * last one's plus the interval. */
static double cpu_at(double now)
{
    if (now - mark_wall_ns >= CPU_READ_NS) mark_cpu_ns = cpu_ns();
    else if (now > mark_wall_ns) mark_cpu_ns += now - mark_wall_ns;
    mark_wall_ns = now;
    return mark_cpu_ns;
}

/* Whether this node's ranks outnumber the CPUs they may run on (the union of their affinity sets; a rank whose set
 * cannot be read counts every online CPU). Every rank calls it: it is collective on the node. */
static int node_oversubscribed(void)
{
    MPI_Comm node;
    cpu_set_t cpus;
    int ranks;
    if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) {
        CPU_ZERO(&cpus);
        for (long c = 0, n = sysconf(_SC_NPROCESSORS_ONLN); c < n && c < CPU_SETSIZE; c++) CPU_SET(c, &cpus);
    }
    PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    PMPI_Comm_size(node, &ranks);
    PMPI_Allreduce(MPI_IN_PLACE, &cpus, (int)sizeof cpus, MPI_BYTE, MPI_BOR, node);
    PMPI_Comm_free(&node);
    return ranks > CPU_COUNT(&cpus);
}

int cxlsim_trace_on(void)
{
    return trace != NULL;
}

/* DIR/rank<r>.SUFFIX opened for writing with a 1 MiB buffer; the job aborts if it cannot be written. */
static FILE *open_rank_file(const char *suffix)
{
    char path[CXL_POOL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/rank%d.%s", cxlsim_settings.trace_dir, trace_rank, suffix);
    FILE *file = fopen(path, "w");
    if (!file) {
        fprintf(stderr, "cxlsim-mpi: CXLSIM_MPI_TRACE: cannot write %s: %s\n", path, strerror(errno));
        PMPI_Abort(MPI_COMM_WORLD, 2);
    }
    setvbuf(file, NULL, _IOFBF, TRACE_BUFFER_BYTES);
    return file;
}

void cxlsim_trace_open(void)
{
    if (!cxlsim_settings.trace_dir[0]) return;
    char path[CXL_POOL_PATH_MAX + 32];
    PMPI_Comm_rank(MPI_COMM_WORLD, &trace_rank);
    if (mkdir(cxlsim_settings.trace_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "cxlsim-mpi: CXLSIM_MPI_TRACE: cannot create %s: %s\n", cxlsim_settings.trace_dir,
                strerror(errno));
        PMPI_Abort(MPI_COMM_WORLD, 2);
    }
    arena = malloc(ARENA_BYTES);
    if (!arena) {
        fprintf(stderr, "cxlsim-mpi: CXLSIM_MPI_TRACE: cannot allocate the trace's %d MiB\n", ARENA_BYTES >> 20);
        PMPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(arena, 0, ARENA_BYTES); /* its pages mapped now, not by faults between the run's calls */
    arena_used = 0;
    trace = open_rank_file("txt");
    fprintf(trace, "%d init\n", trace_rank);
    trace_lines = 1;
    durations = open_rank_file("durations.tsv");
    fputs("line\tstart_ns\tduration_ns\tpath\tsetup\tgap_cpu_ns\n", durations);
    gap_cpu = node_oversubscribed();
    if (trace_rank == 0) {
        snprintf(path, sizeof path, "%s/trace.meta.json", cxlsim_settings.trace_dir);
        FILE *meta = fopen(path, "w");
        if (meta) {
            fputs("{\"host_speed_flops_per_s\": 1e9}\n", meta);
            fclose(meta);
        }
    }
    last_end_ns = mark_wall_ns = now_ns();
    if (gap_cpu) last_end_cpu_ns = mark_cpu_ns = cpu_ns();
}

/* The compute since the previous traced call, written before the next action line: polls that
 * complete nothing (cxlsim_trace_skip) write no line, so their gaps add up into one compute line. */
static double pending_compute_ns;

double cxlsim_trace_begin(void)
{
    if (!trace) return 0.0;
    double t = now_ns();
    if (gap_cpu) {
        double c = cpu_at(t);
        if (c > last_end_cpu_ns) pending_compute_ns += c - last_end_cpu_ns;
    } else if (t > last_end_ns) {
        pending_compute_ns += t - last_end_ns;
    }
    last_end_ns = t;
    return t;
}

void cxlsim_trace_skip(void)
{
    if (!trace) return;
    last_end_ns = now_ns();
    if (gap_cpu) last_end_cpu_ns = cpu_at(last_end_ns);
}

void cxlsim_trace_ran(int pool, int hier, int why)
{
    current.path = why >= 0 ? "fallback:" : hier ? "hier" : pool ? "pool" : "mpi";
    current.why = why;
}

void cxlsim_trace_setup(void)
{
    current.setup = 1;
}

/* ---- The record of each traced call, formatted into its lines after the run -----------------
 * A call's tracing in the run is a record in an arena: the compute before it, its entry and return, its format
 * (a string literal with %d, %lld, %llu and %s conversions only) and its arguments, strings copied. The lines are
 * formatted and written only when the arena is full (every ARENA_BYTES) and when the trace closes, at MPI_Finalize,
 * so the run between two calls pays for a few stores, not for formatting and stdio. */

static size_t round8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* Write v in decimal at `at`; returns the end. */
static char *put_int(char *at, long long v)
{
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    if (v < 0) *at++ = '-';
    do digits[n++] = (char)('0' + u % 10); while (u /= 10);
    while (n) *at++ = digits[--n];
    return at;
}

static char *put_uint(char *at, unsigned long long u)
{
    char digits[24];
    int n = 0;
    do digits[n++] = (char)('0' + u % 10); while (u /= 10);
    while (n) *at++ = digits[--n];
    return at;
}

static char *put_str(char *at, const char *text)
{
    size_t n = strlen(text);
    memcpy(at, text, n);
    return at + n;
}

/* The conversion at fmt (just after a '%'): 'd', 'D' (%lld), 'u' (%llu) or 's'; *len its length. A format with
 * any other conversion is the library's own error: it says so and aborts the job. */
static char conversion(const char *fmt, int *len)
{
    if (fmt[0] == 'd' || fmt[0] == 's') return *len = 1, fmt[0];
    if (fmt[0] == 'l' && fmt[1] == 'l' && (fmt[2] == 'u' || fmt[2] == 'd')) return *len = 3, fmt[2] == 'u' ? 'u' : 'D';
    fprintf(stderr, "cxlsim-mpi: trace format \"%s\": unsupported conversion\n", fmt);
    PMPI_Abort(MPI_COMM_WORLD, 2);
    return 0;
}

/* Format every record in the arena into the two files, then empty it. */
static void flush_records(void)
{
    char out[8192], row[160];
    for (size_t at_record = 0; at_record < arena_used;) {
        const record_t *rec = (const record_t *)(arena + at_record);
        const long long *word = (const long long *)(rec + 1);
        int nwords = 0;
        for (const char *f = rec->fmt; *f; f++)
            if (*f == '%') nwords++;
        const char *strings = (const char *)(word + nwords);
        char *at = out;
        if (rec->compute_ns > 0) {
            at = put_str(put_int(at, trace_rank), " compute ");
            at = put_int(at, (long long)rec->compute_ns);
            *at++ = '\n';
            trace_lines++;
        }
        at = put_int(at, trace_rank);
        *at++ = ' ';
        for (const char *f = rec->fmt; *f;) {
            int len;
            if (*f != '%') {
                *at++ = *f++;
                continue;
            }
            char c = conversion(f + 1, &len);
            long long v = *word++;
            if (c == 's') {
                if ((size_t)v > (size_t)(out + sizeof out - 64 - at)) { /* longer than the line's room: as it is */
                    fwrite(out, 1, (size_t)(at - out), trace);
                    fwrite(strings, 1, (size_t)v, trace);
                    at = out;
                } else {
                    memcpy(at, strings, (size_t)v);
                    at += v;
                }
                strings += round8((size_t)v + 1);
            } else {
                at = c == 'u' ? put_uint(at, (unsigned long long)v) : put_int(at, v);
            }
            f += 1 + len;
        }
        *at++ = '\n';
        fwrite(out, 1, (size_t)(at - out), trace);
        trace_lines++;
        at = put_int(row, trace_lines);
        *at++ = '\t';
        at = put_int(at, (long long)rec->begin);
        *at++ = '\t';
        at = put_int(at, (long long)(rec->end - rec->begin));
        *at++ = '\t';
        at = put_str(at, rec->path);
        if (rec->why >= 0) at = put_str(at, cxlsim_why_names[rec->why]);
        *at++ = '\t';
        *at++ = (char)('0' + rec->setup);
        *at++ = '\t';
        at = put_int(at, gap_cpu ? (long long)rec->compute_ns : -1);
        *at++ = '\n';
        fwrite(row, 1, (size_t)(at - row), durations);
        at_record += rec->size;
    }
    arena_used = 0;
}

/* A call's lines (the compute before it, its action, and its durations row), recorded: formatted later
 * (flush_records), so that the run pays for the record's stores only. */
void cxlsim_trace_line(double begin, const char *fmt, ...)
{
    if (!trace) return;
    if (begin != line_begin) {
        line_begin = begin;
        line_end = now_ns();
        if (gap_cpu) line_end_cpu_ns = cpu_at(line_end); /* the next gap's CPU time holds this record's */
    }
    int nwords = 0;
    size_t strings = 0;
    va_list ap;
    va_start(ap, fmt);
    for (const char *f = fmt; *f; f++)
        if (*f == '%') {
            int len;
            char c = conversion(f + 1, &len);
            nwords++;
            if (c == 's') strings += round8(strlen(va_arg(ap, const char *)) + 1);
            else if (c == 'd') (void)va_arg(ap, int);
            else (void)va_arg(ap, long long);
            f += len;
        }
    va_end(ap);
    size_t size = sizeof(record_t) + 8 * (size_t)nwords + strings;
    if (arena_used + size > ARENA_BYTES) flush_records();
    if (size > ARENA_BYTES) {
        fprintf(stderr, "cxlsim-mpi: a trace line of %zu bytes exceeds the trace's record arena\n", size);
        PMPI_Abort(MPI_COMM_WORLD, 2);
    }
    record_t *rec = (record_t *)(arena + arena_used);
    *rec = (record_t){fmt, current.path, begin, line_end, pending_compute_ns, current.why, current.setup,
                      (unsigned)size};
    long long *word = (long long *)(rec + 1);
    char *text = (char *)(word + nwords);
    va_start(ap, fmt);
    for (const char *f = fmt; *f; f++)
        if (*f == '%') {
            int len;
            char c = conversion(f + 1, &len);
            if (c == 's') {
                const char *s = va_arg(ap, const char *);
                size_t n = strlen(s);
                memcpy(text, s, n + 1);
                *word++ = (long long)n;
                text += round8(n + 1);
            } else {
                *word++ = c == 'd' ? (long long)va_arg(ap, int) : va_arg(ap, long long);
            }
            f += len;
        }
    va_end(ap);
    arena_used += size;
    pending_compute_ns = 0;
    current.path = "mpi";
    current.why = -1;
    current.setup = 0;
    last_end_ns = now_ns();
    last_end_cpu_ns = line_end_cpu_ns;
}

void cxlsim_trace_close(void)
{
    if (!trace) return;
    flush_records();
    free(arena);
    arena = NULL;
    fclose(trace);
    fclose(durations);
    trace = NULL;
    durations = NULL;
}

int cxlsim_trace_world_rank(MPI_Comm comm, int rank)
{
    if (comm == MPI_COMM_WORLD || rank < 0) return rank;
    MPI_Group group, world;
    int out = rank;
    PMPI_Comm_group(comm, &group);
    PMPI_Comm_group(MPI_COMM_WORLD, &world);
    PMPI_Group_translate_ranks(group, 1, &rank, world, &out);
    PMPI_Group_free(&group);
    PMPI_Group_free(&world);
    return out;
}

/* The requests posted by traced isend/irecv calls and not yet completed: what a wait names. */
enum { MAX_REQUESTS = 4096 };
static struct { MPI_Request req; int src, dst, tag; } requests[MAX_REQUESTS];
static int nrequests;
static pthread_mutex_t requests_lock = PTHREAD_MUTEX_INITIALIZER;

void cxlsim_trace_request_posted(MPI_Request req, int src, int dst, int tag)
{
    pthread_mutex_lock(&requests_lock);
    if (nrequests < MAX_REQUESTS) {
        requests[nrequests].req = req;
        requests[nrequests].src = src;
        requests[nrequests].dst = dst;
        requests[nrequests].tag = tag;
        nrequests++;
    }
    pthread_mutex_unlock(&requests_lock);
}

int cxlsim_trace_request_done(MPI_Request req, int *src, int *dst, int *tag)
{
    int found = 0;
    pthread_mutex_lock(&requests_lock);
    for (int i = 0; i < nrequests; i++)
        if (requests[i].req == req) {
            *src = requests[i].src;
            *dst = requests[i].dst;
            *tag = requests[i].tag;
            requests[i] = requests[--nrequests];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&requests_lock);
    return found;
}
