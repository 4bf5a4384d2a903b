/* coll_pattern PATTERN ITERATIONS: ITERATIONS times the calls of PATTERN, one letter a call (R: allreduce of 64 KiB
 * floats, G: allgather of 4 KiB, B: bcast of 4 KiB from rank 0, r: allreduce of one double, S: barrier; W: the work
 * of coll_timed.c's iteration, WORK_STEPS steps of its loop, no call), after a barrier; rank 0 prints the time per
 * iteration (us), the ranks' mean context switches per iteration (getrusage: voluntary and involuntary, over the
 * loop) and the median time of one W alone (ns, timed before the loop). benchmarks/replay_pool_turns.py runs it
 * under the library. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define WORK_STEPS 2000 /* coll_timed.c's default work */
static float v[16384], w[16384];
static void work(long n) { volatile double x = 0; for (long i = 0; i < n; i++) x += i * 0.5; }
static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static char block[4096], all[64 * 4096], b[4096];

int main(int argc, char **argv)
{
    int rank, size;
    double res = 1.0, sum;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3 || size > 64) {
        if (rank == 0) fprintf(stderr, "usage: coll_pattern PATTERN ITERATIONS (at most 64 ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *pattern = argv[1];
    int iterations = atoi(argv[2]), n = (int)strlen(pattern);
    double alone[101];
    for (int i = 0; i < 101; i++) {
        double s = MPI_Wtime();
        work(WORK_STEPS);
        alone[i] = MPI_Wtime() - s;
    }
    qsort(alone, 101, sizeof alone[0], by_value);
    MPI_Barrier(MPI_COMM_WORLD);
    struct rusage u0, u1;
    getrusage(RUSAGE_SELF, &u0);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iterations; i++)
        for (int k = 0; k < n; k++) switch (pattern[k]) {
            case 'R': MPI_Allreduce(v, w, 16384, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
            case 'G': MPI_Allgather(block, 4096, MPI_CHAR, all, 4096, MPI_CHAR, MPI_COMM_WORLD); break;
            case 'B': MPI_Bcast(b, 4096, MPI_CHAR, 0, MPI_COMM_WORLD); break;
            case 'r': MPI_Allreduce(&res, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
            case 'S': MPI_Barrier(MPI_COMM_WORLD); break;
            case 'W': work(WORK_STEPS); break;
            default:
                if (rank == 0) fprintf(stderr, "coll_pattern: unknown call letter '%c' (R G B r S W)\n", pattern[k]);
                MPI_Abort(MPI_COMM_WORLD, 2);
        }
    double t1 = MPI_Wtime();
    getrusage(RUSAGE_SELF, &u1);
    double switches = (double)(u1.ru_nvcsw - u0.ru_nvcsw + u1.ru_nivcsw - u0.ru_nivcsw) / iterations, total;
    MPI_Reduce(&switches, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("us %.3f switches %.4f work_ns %.0f\n", (t1 - t0) / iterations * 1e6, total / size, alone[50] * 1e9);
    MPI_Finalize();
    return 0;
}
