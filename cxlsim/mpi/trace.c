/* trace.c: one trace per rank of every MPI call the library sees (CXLSIM_MPI_TRACE=DIR).
 *
 * The format is SimGrid 3.32's time-independent trace format, one action per line, the rank
 * first, so `cxlsim replay DIR` and SimGrid's replay both read it:
 *
 *   0 init                      no argument: counts are in the default type, MPI_BYTE
 *   0 compute 1520              the time since the previous call returned, as flops at 1 Gf/s (= ns);
 *                               DIR/trace.meta.json says {"host_speed_flops_per_s": 1e9}
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
 *   line  start_ns  duration_ns  path  setup
 *   3     81234567  412          pool  0
 *
 *   line         the line number (from 1) in rank<r>.txt
 *   start_ns     the call's entry, CLOCK_MONOTONIC ns (one clock for every rank of a host)
 *   duration_ns  entry to return, ns; the trace's own writes are in neither this nor compute
 *   path         pool (the pool kernels), hier (the many-node path), fallback:REASON (a collective
 *                the library passed to PMPI, REASON as in the stats), mpi (a call it only traces)
 *   setup        1 if the call set up its communicator's pool (first collective on it), else 0
 *
 * The lines one call writes (a Waitall that completed several requests) share start and duration.
 * The writes cost 0.4-1 us a call (median; docs/mpi.md): integers are formatted by hand and each
 * file gets one fwrite a call into a 1 MiB stdio buffer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cxlsim_mpi.h"

/* Each file's stdio buffer: one write(2) per this many bytes, few enough that the trace's own cost
 * between calls (in neither a duration nor a compute line) stays near the formatting's. */
enum { TRACE_BUFFER_BYTES = 1 << 20 };
static FILE *trace, *durations;
static int trace_rank;
static double last_end_ns;
static long trace_lines; /* lines written to the trace so far */
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
    trace = open_rank_file("txt");
    fprintf(trace, "%d init\n", trace_rank);
    trace_lines = 1;
    durations = open_rank_file("durations.tsv");
    fputs("line\tstart_ns\tduration_ns\tpath\tsetup\n", durations);
    if (trace_rank == 0) {
        snprintf(path, sizeof path, "%s/trace.meta.json", cxlsim_settings.trace_dir);
        FILE *meta = fopen(path, "w");
        if (meta) {
            fputs("{\"host_speed_flops_per_s\": 1e9}\n", meta);
            fclose(meta);
        }
    }
    last_end_ns = now_ns();
}

/* The compute since the previous traced call, written before the next action line: polls that
 * complete nothing (cxlsim_trace_skip) write no line, so their gaps add up into one compute line. */
static double pending_compute_ns;

double cxlsim_trace_begin(void)
{
    if (!trace) return 0.0;
    double t = now_ns();
    if (t > last_end_ns) pending_compute_ns += t - last_end_ns;
    last_end_ns = t;
    return t;
}

void cxlsim_trace_skip(void)
{
    if (trace) last_end_ns = now_ns();
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

static char *put_str(char *at, const char *text)
{
    size_t n = strlen(text);
    memcpy(at, text, n);
    return at + n;
}

/* A call's lines: the compute before it, its action, and its durations row, each file written once
 * (the formatting is the trace's own cost between calls, in neither a duration nor compute). */
void cxlsim_trace_line(double begin, const char *fmt, ...)
{
    if (!trace) return;
    if (begin != line_begin) {
        line_begin = begin;
        line_end = now_ns();
    }
    char out[4096 + 128], row[160], *at = out;
    if (pending_compute_ns > 0) {
        at = put_str(put_int(at, trace_rank), " compute ");
        at = put_int(at, (long long)pending_compute_ns);
        *at++ = '\n';
        trace_lines++;
    }
    pending_compute_ns = 0;
    at = put_int(at, trace_rank);
    *at++ = ' ';
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(at, out + sizeof out - 1 - at, fmt, ap);
    va_end(ap);
    at += n < 0 ? 0 : n < out + sizeof out - 1 - at ? n : out + sizeof out - 2 - at;
    *at++ = '\n';
    fwrite(out, 1, (size_t)(at - out), trace);
    trace_lines++;
    at = put_int(row, trace_lines);
    *at++ = '\t';
    at = put_int(at, (long long)begin);
    *at++ = '\t';
    at = put_int(at, (long long)(line_end - begin));
    *at++ = '\t';
    at = put_str(at, current.path);
    if (current.why >= 0) at = put_str(at, cxlsim_why_names[current.why]);
    *at++ = '\t';
    *at++ = (char)('0' + current.setup);
    *at++ = '\n';
    fwrite(row, 1, (size_t)(at - row), durations);
    current.path = "mpi";
    current.why = -1;
    current.setup = 0;
    last_end_ns = now_ns();
}

void cxlsim_trace_close(void)
{
    if (!trace) return;
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
