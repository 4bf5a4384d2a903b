/* Point-to-point patterns for the replay tests (np = 4): wildcards, blocking and
 * non-blocking calls with wait/waitall/test, sendrecv, and compute between them. */
#include <mpi.h>

static void work(long n) { volatile double x = 0; for (long i = 0; i < n; i++) x += i * 0.5; }

int main(int argc, char **argv) {
  int rank, size, flag;
  double d[4096];
  int ib[64];
  MPI_Request r[4];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  work(200000);
  /* blocking send to a wildcard receive (any source, any tag) */
  if (rank == 0) MPI_Send(d, 100, MPI_DOUBLE, 1, 7, MPI_COMM_WORLD);
  if (rank == 1) MPI_Recv(d, 100, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  /* two messages with different tags, received in the opposite order */
  if (rank == 2) {
    MPI_Send(ib, 10, MPI_INT, 3, 1, MPI_COMM_WORLD);
    MPI_Send(d, 2048, MPI_DOUBLE, 3, 2, MPI_COMM_WORLD);
  }
  if (rank == 3) {
    MPI_Irecv(d, 2048, MPI_DOUBLE, 2, 2, MPI_COMM_WORLD, &r[0]);
    MPI_Recv(ib, 10, MPI_INT, 2, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
  }
  work(100000);
  /* a ring of non-blocking exchanges completed by waitall */
  MPI_Irecv(ib, 16, MPI_INT, left, 3, MPI_COMM_WORLD, &r[0]);
  MPI_Isend(ib + 16, 16, MPI_INT, right, 3, MPI_COMM_WORLD, &r[1]);
  MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
  /* the same completed by two waits */
  MPI_Irecv(d, 512, MPI_DOUBLE, left, 4, MPI_COMM_WORLD, &r[0]);
  MPI_Isend(d + 512, 512, MPI_DOUBLE, right, 4, MPI_COMM_WORLD, &r[1]);
  MPI_Wait(&r[0], MPI_STATUS_IGNORE);
  MPI_Wait(&r[1], MPI_STATUS_IGNORE);
  work(100000);
  MPI_Sendrecv(d, 64, MPI_DOUBLE, right, 5, d + 64, 64, MPI_DOUBLE, left, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  /* an any-source irecv on rank 0, fed by every other rank */
  if (rank == 0) {
    for (int i = 1; i < size; i++) {
      MPI_Irecv(ib, 8, MPI_INT, MPI_ANY_SOURCE, 6, MPI_COMM_WORLD, &r[0]);
      MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    }
  } else {
    MPI_Send(ib, 8, MPI_INT, 0, 6, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
