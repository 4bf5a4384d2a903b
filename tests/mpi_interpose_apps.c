/* mpi_interpose_apps.c: small MPI programs for the library's failure and tracing tests.
 *
 *   trace  point-to-point calls (send, recv, isend, irecv, waitall, sendrecv) and collectives
 *   kill   allreduces in a loop; world rank 1 SIGKILLs itself before its 50th
 *   late   world rank 1 enters its first allreduce after argv[2] seconds (the others time out)
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int trace_calls(int rank, int size)
{
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;
    double x[8] = {rank, 1, 2, 3, 4, 5, 6, 7}, y[8];
    MPI_Request reqs[2];
    if (size > 1) {
        if (rank == 0) MPI_Send(x, 8, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD);
        if (rank == 1) MPI_Recv(y, 8, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Isend(x, 4, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD, &reqs[0]);
        MPI_Irecv(y, 4, MPI_DOUBLE, from, 1, MPI_COMM_WORLD, &reqs[1]);
        MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
        MPI_Sendrecv(x, 2, MPI_DOUBLE, peer, 2, y, 2, MPI_DOUBLE, from, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    volatile double busy = 0; /* some computation between calls */
    for (int i = 0; i < 2000000; i++) busy += i * 1e-9;
    MPI_Allreduce(x, y, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Bcast(x, 8, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    return y[0] == size * (size - 1) / 2.0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, rc = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "";
    long v = rank, s;
    if (strcmp(mode, "trace") == 0) {
        rc = trace_calls(rank, size);
    } else if (strcmp(mode, "kill") == 0) {
        for (int i = 0; i < 100000; i++) {
            if (rank == 1 && i == 49) raise(SIGKILL);
            MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        }
    } else if (strcmp(mode, "late") == 0) {
        MPI_Barrier(MPI_COMM_WORLD); /* sets the pool up */
        if (rank == 1) sleep((unsigned)atoi(argc > 2 ? argv[2] : "5"));
        MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    } else {
        if (rank == 0) fprintf(stderr, "usage: %s trace|kill|late [seconds]\n", argv[0]);
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
