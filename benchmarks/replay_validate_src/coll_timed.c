/* A collective-bound loop (the pool's collectives carry most of its MPI time), timed as halo_timed.c:
 * per iteration a little work, then MPI_Allreduce of 16384 floats (64 KiB: the library's large
 * algorithm), MPI_Allgather of 4 KiB per rank, MPI_Bcast of 4 KiB from rank 0, MPI_Allreduce of one
 * double; one untimed iteration first (every call's first-use set-up), then rank 0 prints the wall time
 * from the first barrier's end to the last barrier's end, and its median iteration.
 *     coll_timed [ITERATIONS [WORK]]
 * Where CXLSIM_RANK_CPUS names a directory, each rank records its CPU at every timed iteration
 * (tests/data/traces/src/cpu_record.h: compile with -I there). */
#define _GNU_SOURCE
#include "cpu_record.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
static void work(long n) { volatile double x = 0; for (long i = 0; i < n; i++) x += i * 0.5; }
static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static float v[16384], w[16384];
static char block[4096], all[4 * 4096], b[4096];
static double res = 1.0, sum;
static void iteration(long steps) {
  work(steps);
  MPI_Allreduce(v, w, 16384, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allgather(block, 4096, MPI_CHAR, all, 4096, MPI_CHAR, MPI_COMM_WORLD);
  MPI_Bcast(b, 4096, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Allreduce(&res, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}
int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  int iterations = argc > 1 ? atoi(argv[1]) : 20;
  long steps = argc > 2 ? atol(argv[2]) : 2000;
  double *took = calloc(iterations > 0 ? iterations : 1, sizeof *took);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  iteration(steps);
  cpu_record_start(iterations);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime(), last = t0;
  for (int it = 0; it < iterations; it++) {
    cpu_record_at();
    iteration(steps);
    double t = MPI_Wtime();
    took[it] = t - last;
    last = t;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t1 = MPI_Wtime();
  qsort(took, iterations, sizeof *took, by_value);
  if (rank == 0) printf("wall_s %.9f\nmedian_iteration_s %.9f\n", t1 - t0, iterations > 0 ? took[iterations / 2] : 0.0);
  cpu_record_end(rank);
  MPI_Finalize();
  return 0;
}
