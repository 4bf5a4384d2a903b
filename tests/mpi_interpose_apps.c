/* mpi_interpose_apps.c: small MPI programs for the library's failure and tracing tests.
 *
 *   trace  point-to-point calls (send, recv, isend, irecv, waitall, sendrecv) and collectives
 *          (rank 1 enters the barrier 20 ms after the bcast)
 *   rooted MPI_Reduce, MPI_Gather (one root in place) and MPI_Scatter from root 1, results checked;
 *          then MPI_Ssend and MPI_Issend from rank 0 to rank 1
 *   complete  np=2: requests completed by Waitany, Waitsome, Test, Testall, Testany and Testsome,
 *          each round separated by a barrier; rank 0 sends after the barrier, rank 1 polls
 *   kill   allreduces in a loop; world rank 1 SIGKILLs itself before its 50th
 *   late   world rank 1 enters its first allreduce after argv[2] seconds (the others time out)
 *   stress 400 back-to-back collectives of mixed kinds (bcast from rotating roots, allreduce small
 *          and large, allgather, alltoall, reduce_scatter_block) with no barrier between them and
 *          a random delay per rank before some, each result checked: slot reuse across calls
 *          and the broadcast acknowledgements are what is under test
 *   long   argv[2] rounds of MPI_Allreduce of the round's number as a long, then MPI_Bcast of 8 B from rank 0:
 *          a trace longer than the library's record arena; prints "long wrong N"
 *   comms  an allreduce on MPI_COMM_WORLD, then 20 times: split the world (one color), an allreduce
 *          on the new communicator, free it; prints "comms wrong N" (each communicator sets up a pool)
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
    if (rank == 1) usleep(20000); /* rank 0's barrier lasts until rank 1 arrives (the durations' test) */
    MPI_Barrier(MPI_COMM_WORLD);
    return y[0] == size * (size - 1) / 2.0 ? 0 : 1;
}

/* Rank 1 posts receives and completes them with each completion call; rank 0 sends them with tags
 * 10.. after a barrier, so rank 1's first tests usually find nothing (they must write no line). */
static int complete_calls(int rank, int size)
{
    int x[4] = {1, 2, 3, 4}, y[4] = {0}, index = -1, flag = 0, outcount = 0, indices[2];
    MPI_Request reqs[2];
    if (size != 2) return 2;
    for (int round = 0; round < 6; round++) {
        int tag = 10 + 2 * round;
        if (rank == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Send(x, 4, MPI_INT, 1, tag, MPI_COMM_WORLD);
            MPI_Send(x, 2, MPI_INT, 1, tag + 1, MPI_COMM_WORLD);
            continue;
        }
        MPI_Irecv(y, 4, MPI_INT, 0, tag, MPI_COMM_WORLD, &reqs[0]);
        MPI_Irecv(y, 2, MPI_INT, 0, tag + 1, MPI_COMM_WORLD, &reqs[1]);
        MPI_Barrier(MPI_COMM_WORLD);
        switch (round) {
        case 0: /* Waitany twice: one wait line each */
            MPI_Waitany(2, reqs, &index, MPI_STATUS_IGNORE);
            MPI_Waitany(2, reqs, &index, MPI_STATUS_IGNORE);
            break;
        case 1: /* Waitsome until both are in */
            for (int done = 0; done < 2; done += outcount) MPI_Waitsome(2, reqs, &outcount, indices, MPI_STATUSES_IGNORE);
            break;
        case 2: /* Test each in turn, polling */
            for (int i = 0; i < 2; i++)
                for (flag = 0; !flag;) MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
            break;
        case 3: /* Testall, polling */
            for (flag = 0; !flag;) MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE);
            break;
        case 4: /* Testany until both are in */
            for (int done = 0; done < 2;) {
                MPI_Testany(2, reqs, &index, &flag, MPI_STATUS_IGNORE);
                if (flag && index != MPI_UNDEFINED) done++;
            }
            break;
        default: /* Testsome until both are in */
            for (int done = 0; done < 2; done += outcount) MPI_Testsome(2, reqs, &outcount, indices, MPI_STATUSES_IGNORE);
        }
    }
    return rank == 1 && (y[0] != 1 || y[1] != 2) ? 1 : 0;
}

static int rooted_calls(int rank, int size)
{
    int root = 1 % size, bad = 0;
    long mine[3] = {rank, rank + 1, rank + 2}, sum[3] = {0}, all[3 * 64], part[3];
    MPI_Reduce(mine, sum, 3, MPI_LONG, MPI_SUM, root, MPI_COMM_WORLD);
    if (rank == root && sum[0] != (long)size * (size - 1) / 2) bad = 1;
    if (rank == root) {
        for (int i = 0; i < 3; i++) all[3 * root + i] = mine[i];
        MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, 3, MPI_LONG, root, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++) bad |= all[3 * r] != r;
    } else {
        MPI_Gather(mine, 3, MPI_LONG, NULL, 0, MPI_LONG, root, MPI_COMM_WORLD);
    }
    MPI_Scatter(all, 3, MPI_LONG, part, 3, MPI_LONG, root, MPI_COMM_WORLD);
    bad |= part[0] != rank; /* the root sent every rank its own gathered block back */
    if (size > 1 && rank < 2) { /* a synchronous send and a non-blocking synchronous send, 0 -> 1 */
        MPI_Request req;
        if (rank == 0) {
            MPI_Ssend(mine, 1, MPI_LONG, 1, 5, MPI_COMM_WORLD);
            MPI_Issend(mine, 1, MPI_LONG, 1, 6, MPI_COMM_WORLD, &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(part, 1, MPI_LONG, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Recv(part, 1, MPI_LONG, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            bad |= part[0] != 0;
        }
    }
    return bad;
}

/* Element i of rank r's input to call k. */
static long value(int r, long i, int k)
{
    return (r * 131 + i * 7 + k * 3) % 1000;
}

static int stress(int rank, int size)
{
    enum { CALLS = 400, BIG = 262147 };
    unsigned seed = 12345u + (unsigned)rank * 7919u;
    long *in = malloc(sizeof(long) * BIG * (size_t)size), *out = malloc(sizeof(long) * BIG * (size_t)size);
    double *din = malloc(sizeof(double) * BIG), *dout = malloc(sizeof(double) * BIG);
    int bad = 0;
    for (int k = 0; k < CALLS; k++) {
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 4 == 0) usleep((seed >> 8) % 200); /* this rank arrives late */
        long n = 1 + (long)((k * 2654435761u) % 300); /* the same on every rank */
        int kind = k % 6;
        if (kind == 0 || kind == 5) { /* bcast from a rotating root */
            int root = (k / 6) % size;
            for (long i = 0; i < n; i++) in[i] = rank == root ? value(root, i, k) : -1;
            MPI_Bcast(in, (int)n, MPI_LONG, root, MPI_COMM_WORLD);
            for (long i = 0; i < n; i++) bad += in[i] != value(root, i, k);
        } else if (kind == 1) { /* allreduce: large sometimes (chunked, reduce-scatter + allgather), else
                                   1-3 doubles or n (up to 35 or 70 doubles, by placement: the inline area of cxl_coll_reduce.h) */
            long m = k % 60 == 1 ? BIG : (k / 6) % 2 ? 1 + (k / 12) % 3 : n;
            for (long i = 0; i < m; i++) din[i] = (double)value(rank, i, k);
            MPI_Allreduce(din, dout, (int)m, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            for (long i = 0; i < m; i++) {
                double want = 0;
                for (int r = 0; r < size; r++) want += (double)value(r, i, k);
                bad += dout[i] != want;
            }
        } else if (kind == 2) {
            for (long i = 0; i < n; i++) in[i] = value(rank, i, k);
            MPI_Allgather(in, (int)n, MPI_LONG, out, (int)n, MPI_LONG, MPI_COMM_WORLD);
            for (int r = 0; r < size; r++)
                for (long i = 0; i < n; i++) bad += out[r * n + i] != value(r, i, k);
        } else if (kind == 3) {
            for (int d = 0; d < size; d++)
                for (long i = 0; i < n; i++) in[d * n + i] = value(rank, d * n + i, k);
            MPI_Alltoall(in, (int)n, MPI_LONG, out, (int)n, MPI_LONG, MPI_COMM_WORLD);
            for (int r = 0; r < size; r++)
                for (long i = 0; i < n; i++) bad += out[r * n + i] != value(r, rank * n + i, k);
        } else {
            for (long i = 0; i < n * size; i++) in[i] = value(rank, i, k);
            MPI_Reduce_scatter_block(in, out, (int)n, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            for (long i = 0; i < n; i++) {
                long want = 0;
                for (int r = 0; r < size; r++) want += value(r, rank * n + i, k);
                bad += out[i] != want;
            }
        }
    }
    /* back-to-back allreduces alone, 1-256 doubles (both halves of the inline area, the slot path
     * above its limit, at np 2 its prefetching wait up to 1 KiB and its two pieces above), late
     * ranks: a rank may not rewrite a half another rank still reads */
    for (int k = 0; k < CALLS; k++) {
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 4 == 0) usleep((seed >> 8) % 100);
        long m = 1 + (long)((k * 2654435761u) % 256);
        for (long i = 0; i < m; i++) din[i] = (double)value(rank, i, k);
        MPI_Allreduce(din, dout, (int)m, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (long i = 0; i < m; i++) {
            double want = 0;
            for (int r = 0; r < size; r++) want += (double)value(r, i, k);
            bad += dout[i] != want;
        }
    }
    free(in);
    free(out);
    free(din);
    free(dout);
    int all = 0;
    PMPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("stress wrong elements %d\n", all);
    return all ? 1 : 0;
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
    } else if (strcmp(mode, "rooted") == 0) {
        rc = size <= 64 ? rooted_calls(rank, size) : 2;
    } else if (strcmp(mode, "complete") == 0) {
        rc = complete_calls(rank, size);
    } else if (strcmp(mode, "kill") == 0) {
        for (int i = 0; i < 100000; i++) {
            if (rank == 1 && i == 49) raise(SIGKILL);
            MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        }
    } else if (strcmp(mode, "stress") == 0) {
        rc = stress(rank, size);
    } else if (strcmp(mode, "long") == 0) {
        long rounds = atol(argc > 2 ? argv[2] : "1000"), wrong = 0, all = 0, b = 0;
        for (long i = 0; i < rounds; i++) {
            long mine = i + rank;
            MPI_Allreduce(&mine, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            wrong += s != i * size + (long)size * (size - 1) / 2;
            b = rank == 0 ? i : -1;
            MPI_Bcast(&b, 1, MPI_LONG, 0, MPI_COMM_WORLD);
            wrong += b != i;
        }
        PMPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) printf("long wrong %ld\n", all);
        rc = all ? 1 : 0;
    } else if (strcmp(mode, "comms") == 0) {
        int wrong = 0, all = 0;
        MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        wrong += s != (long)size * (size - 1) / 2;
        for (int i = 0; i < 20; i++) {
            MPI_Comm c;
            MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &c);
            long w = rank + i, t = 0;
            MPI_Allreduce(&w, &t, 1, MPI_LONG, MPI_SUM, c);
            wrong += t != (long)size * (size - 1) / 2 + (long)size * i;
            MPI_Comm_free(&c);
        }
        PMPI_Allreduce(&wrong, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) printf("comms wrong %d\n", all);
        rc = all ? 1 : 0;
    } else if (strcmp(mode, "late") == 0) {
        MPI_Barrier(MPI_COMM_WORLD); /* sets the pool up */
        if (rank == 1) sleep((unsigned)atoi(argc > 2 ? argv[2] : "5"));
        MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    } else {
        if (rank == 0) fprintf(stderr, "usage: %s trace|rooted|complete|kill|late [seconds]|stress|comms\n", argv[0]);
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
