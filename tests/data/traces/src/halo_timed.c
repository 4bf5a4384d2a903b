/* The 1-D halo exchange of halo.c timed by the program itself (np = 2-4), for the library-trace
 * validation: rank 0 prints the wall time from the first barrier's end to the last barrier's end.
 *     halo_timed [ITERATIONS [WORK]]     (default 20 iterations of 200000 work steps)
 * Where CXLSIM_RANK_CPUS names a directory, each rank records its CPU at every iteration (cpu_record.h). */
#define _GNU_SOURCE
#include "cpu_record.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void work(long n) { volatile double x = 0; for (long i = 0; i < n; i++) x += i * 0.5; }

int main(int argc, char **argv) {
  int rank, size;
  static double halo[4][8192];
  double res = 1.0, sum;
  MPI_Request r[4];
  MPI_Init(&argc, &argv);
  int iterations = argc > 1 ? atoi(argv[1]) : 20;
  long steps = argc > 2 ? atol(argv[2]) : 200000;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  cpu_record_start(iterations);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int it = 0; it < iterations; it++) {
    cpu_record_at();
    work(steps);
    MPI_Irecv(halo[0], 4096, MPI_DOUBLE, left, 10, MPI_COMM_WORLD, &r[0]);
    MPI_Irecv(halo[1], 4096, MPI_DOUBLE, right, 11, MPI_COMM_WORLD, &r[1]);
    MPI_Isend(halo[2], 4096, MPI_DOUBLE, right, 10, MPI_COMM_WORLD, &r[2]);
    MPI_Isend(halo[3], 4096, MPI_DOUBLE, left, 11, MPI_COMM_WORLD, &r[3]);
    MPI_Waitall(4, r, MPI_STATUSES_IGNORE);
    MPI_Allreduce(&res, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t1 = MPI_Wtime();
  if (rank == 0) printf("wall_s %.9f\n", t1 - t0);
  cpu_record_end(rank);
  MPI_Finalize();
  return 0;
}
