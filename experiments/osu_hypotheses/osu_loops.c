/* OSU-style loops at np=2 (issue 18 item 2's hypothesis tests): latency, bw, bibw, allgather.
 *
 * Usage: mpirun -np 2 ./osu_loops MODE MAX_BYTES
 *   MODE latency    ping-pong, half the round trip (osu_latency)
 *        bw         rank 0 sends a window of 64 messages, rank 1 acknowledges (osu_bw)
 *        bibw       both ranks send a window of 64 at once (osu_bibw)
 *        allgather  MPI_Allgather, the average over ranks of the per-call time (osu_allgather)
 * Output: OSU v5.3 text (two '#' header lines, then size and value), sizes 1 B..MAX_BYTES doubling
 * (latency also at 0 B). Iterations: 1000 (100 above 8 KiB), 10 percent warm-up, as OSU does.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static int iterations(size_t size) { return size > 8192 ? 100 : 1000; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc != 3 || np != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 %s latency|bw|bibw|allgather MAX_BYTES\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *mode = argv[1];
    size_t max_bytes = strtoull(argv[2], NULL, 10);
    char *sbuf = malloc(max_bytes * WINDOW + 64), *rbuf = malloc(max_bytes * WINDOW + 64);
    memset(sbuf, 1, max_bytes * WINDOW + 64);
    MPI_Request req[2 * WINDOW];
    int peer = 1 - rank;
    if (rank == 0) {
        if (!strcmp(mode, "latency")) printf("# OSU MPI Latency Test v5.3 (C loop, osu_loops.c)\n# Size          Latency (us)\n");
        else if (!strcmp(mode, "bw")) printf("# OSU MPI Bandwidth Test v5.3 (C loop, osu_loops.c)\n# Size      Bandwidth (MB/s)\n");
        else if (!strcmp(mode, "bibw")) printf("# OSU MPI Bi-Directional Bandwidth Test v5.3 (C loop, osu_loops.c)\n# Size      Bandwidth (MB/s)\n");
        else printf("# OSU MPI Allgather Latency Test v5.3 (C loop, osu_loops.c)\n# Size       Avg Latency(us)\n");
    }
    size_t first = !strcmp(mode, "latency") ? 0 : 1;
    for (size_t size = first; size <= max_bytes; size = size ? size * 2 : 1) {
        int iters = iterations(size), skip = iters / 10;
        double start = 0.0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) { MPI_Barrier(MPI_COMM_WORLD); start = MPI_Wtime(); }
            if (!strcmp(mode, "latency")) {
                if (rank == 0) {
                    MPI_Send(sbuf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(rbuf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(sbuf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
                }
            } else if (!strcmp(mode, "bw")) {
                for (int w = 0; w < WINDOW; w++) {
                    if (rank == 0) MPI_Isend(sbuf + w * size, (int)size, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[w]);
                    else MPI_Irecv(rbuf + w * size, (int)size, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[w]);
                }
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                if (rank == 0) MPI_Recv(rbuf, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                else MPI_Send(sbuf, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
            } else if (!strcmp(mode, "bibw")) {
                for (int w = 0; w < WINDOW; w++)
                    MPI_Irecv(rbuf + w * size, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[w]);
                for (int w = 0; w < WINDOW; w++)
                    MPI_Isend(sbuf + w * size, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &req[WINDOW + w]);
                MPI_Waitall(2 * WINDOW, req, MPI_STATUSES_IGNORE);
            } else {
                MPI_Allgather(sbuf, (int)size, MPI_CHAR, rbuf, (int)size, MPI_CHAR, MPI_COMM_WORLD);
            }
        }
        double elapsed = MPI_Wtime() - start, value;
        if (!strcmp(mode, "latency")) value = elapsed * 1e6 / (2.0 * iters);
        else if (!strcmp(mode, "bw")) value = size / 1e6 * iters * WINDOW / elapsed;
        else if (!strcmp(mode, "bibw")) value = 2.0 * size / 1e6 * iters * WINDOW / elapsed;
        else {
            double mine = elapsed * 1e6 / iters, sum = 0.0;
            MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            value = sum / np;
        }
        if (rank == 0) printf("%-10zu %18.2f\n", size, value);
        fflush(stdout);
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
