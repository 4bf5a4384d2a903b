/* OSU-style loops at np=2 (issue 18 item 2): latency, bw, bibw, allgather and variants, interleaved per size.
 *
 * Usage: mpirun -np 2 ./osu_loops BENCHMARKS MAX_BYTES [BATCHES [MIN_BYTES]]
 *   BENCHMARKS  a comma-separated list of
 *     latency    ping-pong, half the round trip (osu_latency)
 *     bw         rank 0 sends a window of 64 messages, rank 1 acknowledges (osu_bw)
 *     bibw       both ranks send a window of 64 at once (osu_bibw)
 *     allgather  MPI_Allgather, the average over ranks of the per-call time (osu_allgather)
 *     fresh      latency, with each rank copying the message into its send buffer (memcpy from a
 *                third buffer) just before each send, as MPICH's allgather copies the own block
 *                (MPIR_Localcopy) before sending it: the single-copy read then pulls lines just
 *                written in the other core's cache, where osu_latency re-sends an unchanged
 *                buffer that stays in the reader's cache
 *     bw1        bw at window 1 (osu_bw -W 1): one message, then the acknowledgement
 *     bibw1      bibw at window 1 (osu_bibw -W 1): one message each way at once, the working set
 *                of one exchange step
 *     freshbw1   bw1 with the sender rewriting its send buffer (as fresh) before each message
 *     freshbibw1 bibw1 with each rank rewriting its send buffer (as fresh) before each exchange:
 *                the cache state and pattern of MPICH's np-2 allgather step
 *   MAX_BYTES   sizes 1 B..MAX_BYTES doubling (latency also at 0 B)
 *   BATCHES     default 10
 *   MIN_BYTES   leave out the sizes below it (default 0: all), so a caller can run the sizes in
 *               stretches with a probe of the host between them
 * Iterations per size as OSU v5.3 (1000, or 100 above 8 KiB; 10 percent warm-up), split into
 * BATCHES batches. Per size, the benchmarks take turns batch by batch (the order rotates), so
 * every benchmark at one size is measured over the same stretch of time. Each batch gives the
 * OSU figure over its own iterations; a table's value is the median over the batches (a
 * preempted batch on a shared machine moves the mean of all iterations, not the median), and
 * Min/Max are the extreme batches.
 * Output: one OSU v5.3 text table per benchmark, in the order given, after all sizes ran.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64
#define MAX_BENCH 9
#define MAX_SIZES 40

enum bench { LATENCY, BW, BIBW, ALLGATHER, FRESH, BW1, BIBW1, FRESHBW1, FRESHBIBW1 };
static const char *NAMES[] = {"latency", "bw", "bibw", "allgather", "fresh", "bw1", "bibw1", "freshbw1", "freshbibw1"};
static const char *TITLES[] = {"OSU MPI Latency Test v5.3", "OSU MPI Bandwidth Test v5.3",
                               "OSU MPI Bi-Directional Bandwidth Test v5.3", "OSU MPI Allgather Latency Test v5.3",
                               "OSU MPI Latency Test v5.3, send buffer rewritten before each send",
                               "OSU MPI Bandwidth Test v5.3, window 1",
                               "OSU MPI Bi-Directional Bandwidth Test v5.3, window 1",
                               "OSU MPI Bandwidth Test v5.3, window 1, send buffer rewritten before each send",
                               "OSU MPI Bi-Directional Bandwidth Test v5.3, window 1, send buffer rewritten before each send"};
static const char *COLUMNS[] = {"Latency (us)", "Bandwidth (MB/s)", "Bandwidth (MB/s)", "Avg Latency(us)",
                                "Latency (us)", "Bandwidth (MB/s)", "Bandwidth (MB/s)", "Bandwidth (MB/s)",
                                "Bandwidth (MB/s)"};
static int window_of(enum bench b) { return (b == BW || b == BIBW) ? WINDOW : 1; }

static char *sbuf, *rbuf, *cbuf;
static int rank, peer;

static int total_iterations(size_t size) { return size > 8192 ? 100 : 1000; }

static void one_iteration(enum bench b, size_t size) {
    MPI_Request req[2 * WINDOW];
    switch (b) {
    case LATENCY:
        if (rank == 0) {
            MPI_Send(sbuf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
        break;
    case BW:
    case BW1:
    case FRESHBW1:
        if (b == FRESHBW1 && rank == 0) memcpy(sbuf, cbuf, size);
        for (int w = 0; w < window_of(b); w++) {
            if (rank == 0) MPI_Isend(sbuf + w * size, (int)size, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[w]);
            else MPI_Irecv(rbuf + w * size, (int)size, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[w]);
        }
        MPI_Waitall(window_of(b), req, MPI_STATUSES_IGNORE);
        if (rank == 0) MPI_Recv(rbuf, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else MPI_Send(sbuf, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
        break;
    case BIBW:
    case BIBW1:
    case FRESHBIBW1: {
        int window = window_of(b);
        for (int w = 0; w < window; w++)
            MPI_Irecv(rbuf + w * size, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[w]);
        if (b == FRESHBIBW1) memcpy(sbuf, cbuf, size);
        for (int w = 0; w < window; w++)
            MPI_Isend(sbuf + w * size, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[window + w]);
        MPI_Waitall(2 * window, req, MPI_STATUSES_IGNORE);
        break;
    }
    case ALLGATHER:
        MPI_Allgather(sbuf, (int)size, MPI_CHAR, rbuf, (int)size, MPI_CHAR, MPI_COMM_WORLD);
        break;
    case FRESH:
        if (rank == 0) {
            memcpy(sbuf, cbuf, size);
            MPI_Send(sbuf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            memcpy(sbuf, cbuf, size);
            MPI_Send(sbuf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
        break;
    }
}

/* One batch of `iters` iterations: the OSU figure over them (us, or MB/s for bw and bibw), valid on rank 0. */
static double batch(enum bench b, size_t size, int iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; i++) one_iteration(b, size);
    double elapsed = MPI_Wtime() - start;
    switch (b) {
    case LATENCY:
    case FRESH: return elapsed * 1e6 / (2.0 * iters);
    case BW:
    case BW1:
    case FRESHBW1: return size / 1e6 * iters * window_of(b) / elapsed;
    case BIBW:
    case BIBW1:
    case FRESHBIBW1: return 2.0 * size / 1e6 * iters * window_of(b) / elapsed;
    default: {
        double mine = elapsed * 1e6 / iters, sum = 0.0;
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        return sum / 2.0;
    }
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_benchmarks(char *list, enum bench *out) {
    int n = 0;
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int found = -1;
        for (int k = 0; k < MAX_BENCH; k++)
            if (!strcmp(tok, NAMES[k])) found = k;
        if (found < 0 || n == MAX_BENCH) return -1;
        out[n++] = (enum bench)found;
    }
    return n;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    enum bench benches[MAX_BENCH];
    int nb = (argc >= 3 && argc <= 5) ? parse_benchmarks(argv[1], benches) : -1;
    int batches = argc >= 4 ? atoi(argv[3]) : 10;
    size_t min_bytes = argc == 5 ? strtoull(argv[4], NULL, 10) : 0;  /* the sizes from MIN_BYTES up (0: all) */
    if (nb <= 0 || np != 2 || batches < 1) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 %s latency,bw,bibw,allgather,fresh,bw1,bibw1,freshbw1,freshbibw1 MAX_BYTES [BATCHES [MIN_BYTES]]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    size_t max_bytes = strtoull(argv[2], NULL, 10);
    peer = 1 - rank;
    sbuf = malloc(max_bytes * WINDOW + 64);
    rbuf = malloc(max_bytes * WINDOW + 64);
    memset(sbuf, 1, max_bytes * WINDOW + 64);
    memset(rbuf, 0, max_bytes * WINDOW + 64);
    cbuf = malloc(max_bytes + 64);
    memset(cbuf, 2, max_bytes + 64);
    size_t sizes[MAX_SIZES];
    int ns = 0;
    for (size_t s = 0; s <= max_bytes && ns < MAX_SIZES; s = s ? s * 2 : 1)
        if (s >= min_bytes) sizes[ns++] = s;
    static double median[MAX_BENCH][MAX_SIZES], lo[MAX_BENCH][MAX_SIZES], hi[MAX_BENCH][MAX_SIZES];
    double *values = malloc(sizeof(double) * batches * MAX_BENCH);
    for (int si = 0; si < ns; si++) {
        size_t size = sizes[si];
        int total = total_iterations(size), per_batch = total / batches > 0 ? total / batches : 1;
        for (int k = 0; k < nb; k++)
            if (size > 0 || (benches[k] == LATENCY || benches[k] == FRESH)) batch(benches[k], size, total / 10 > 0 ? total / 10 : 1);
        for (int b = 0; b < batches; b++)
            for (int j = 0; j < nb; j++) {
                int k = (j + b) % nb;
                if (size == 0 && !(benches[k] == LATENCY || benches[k] == FRESH)) continue;
                values[k * batches + b] = batch(benches[k], size, per_batch);
            }
        for (int k = 0; k < nb; k++) {
            if (size == 0 && !(benches[k] == LATENCY || benches[k] == FRESH)) continue;
            double *v = values + k * batches;
            qsort(v, batches, sizeof(double), by_value);
            median[k][si] = batches % 2 ? v[batches / 2] : 0.5 * (v[batches / 2 - 1] + v[batches / 2]);
            lo[k][si] = v[0];
            hi[k][si] = v[batches - 1];
        }
    }
    if (rank == 0) {
        for (int k = 0; k < nb; k++) {
            printf("# %s (C loop, osu_loops.c)\n", TITLES[benches[k]]);
            printf("# value: median over %d batches of the OSU figure per batch; Min, Max: the extreme batches\n",
                   batches);
            printf("# Size      %18s %18s %18s\n", COLUMNS[benches[k]], "Min", "Max");
            for (int si = 0; si < ns; si++) {
                if (sizes[si] == 0 && !(benches[k] == LATENCY || benches[k] == FRESH)) continue;
                printf("%-10zu %18.2f %18.2f %18.2f\n", sizes[si], median[k][si], lo[k][si], hi[k][si]);
            }
            printf("\n");
        }
    }
    fflush(stdout);
    free(values);
    free(sbuf);
    free(rbuf);
    free(cbuf);
    MPI_Finalize();
    return 0;
}
