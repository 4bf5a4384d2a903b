/* trace.c: one trace per rank of every MPI call the library sees (CXLSIM_MPI_TRACE=DIR).
 *
 * The format is SimGrid's time-independent trace format, one action per line, the rank first:
 *
 *   0 init
 *   0 compute 1520          the time since the previous call returned, in ns (see below)
 *   0 allgather 4096 4096   send and receive bytes per rank
 *   0 allreduce 8 0         bytes, then the computation SimGrid should charge (0: the pool's is in its own time)
 *   0 bcast 1024 0          bytes, root
 *   0 alltoall 64 64        bytes per destination, sent and received
 *   0 reducescatterblock 64 0   bytes each rank receives, computation
 *   0 barrier
 *   0 send 1 64 / 0 recv 1 64 / 0 isend 1 64 / 0 irecv 1 64 / 0 wait / 0 waitall 3
 *   0 sendrecv 64 1 64 1    bytes sent, destination, bytes received, source
 *   0 finalize
 *
 * It is a documented superset: sizes are bytes (SimGrid's actions take element counts of a
 * default datatype, so replay it with a one-byte default type), compute is in ns (SimGrid
 * reads flops: a host speed of 1 Gf/s replays the same time), peers are ranks of the
 * communicator the call used, and reducescatterblock is an action SimGrid does not have (its
 * reducescatter takes one count per rank: P equal counts). The file is DIR/rank<world rank>.txt,
 * written through a stdio buffer and closed at MPI_Finalize.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cxlsim_mpi.h"

static FILE *trace;
static int trace_rank;
static double last_end_ns;

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
    snprintf(path, sizeof path, "%s/rank%d.txt", cxlsim_settings.trace_dir, trace_rank);
    trace = fopen(path, "w");
    if (!trace) {
        fprintf(stderr, "cxlsim-mpi: CXLSIM_MPI_TRACE: cannot write %s: %s\n", path, strerror(errno));
        PMPI_Abort(MPI_COMM_WORLD, 2);
    }
    fprintf(trace, "%d init\n", trace_rank);
    last_end_ns = now_ns();
}

double cxlsim_trace_begin(void)
{
    if (!trace) return 0.0;
    double t = now_ns();
    if (t > last_end_ns) fprintf(trace, "%d compute %.0f\n", trace_rank, t - last_end_ns);
    return t;
}

void cxlsim_trace_line(double begin, const char *fmt, ...)
{
    (void)begin;
    if (!trace) return;
    va_list ap;
    fprintf(trace, "%d ", trace_rank);
    va_start(ap, fmt);
    vfprintf(trace, fmt, ap);
    va_end(ap);
    fputc('\n', trace);
    last_end_ns = now_ns();
}

void cxlsim_trace_close(void)
{
    if (!trace) return;
    fclose(trace);
    trace = NULL;
}
