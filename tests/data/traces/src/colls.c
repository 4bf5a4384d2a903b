/* Collectives separated by barriers, with compute between them (np = 4). */
#include <mpi.h>

static void work(long n) { volatile double x = 0; for (long i = 0; i < n; i++) x += i * 0.5; }

int main(int argc, char **argv) {
  int rank, size;
  static double a[65536], b[65536 * 4];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int counts[4] = {256, 256, 256, 256};
  work(100000);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Allreduce(a, b, 16, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Allreduce(a, b, 8192, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  work(100000);
  MPI_Allgather(a, 1024, MPI_INT, b, 1024, MPI_INT, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Alltoall(a, 512, MPI_FLOAT, b, 512, MPI_FLOAT, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Reduce_scatter(a, b, counts, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Bcast(a, 4096, MPI_DOUBLE, 1, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Reduce(a, b, 1024, MPI_DOUBLE, MPI_SUM, 2, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Gather(a, 256, MPI_LONG, b, 256, MPI_LONG, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Scatter(a, 128, MPI_CHAR, b, 128, MPI_CHAR, 3, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
