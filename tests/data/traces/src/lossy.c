/* Calls whose size a SimGrid 3.32 trace loses (np = 2): argv[1] = "derived" sends a
 * derived datatype (traced as -1), "block" calls MPI_Reduce_scatter_block (traced as
 * "reducescatter 0 0 0"). The reader must refuse both. */
#include <mpi.h>
#include <string.h>

int main(int argc, char **argv) {
  int rank, buf[16], out[16];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc > 1 && strcmp(argv[1], "derived") == 0) {
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    if (rank == 0) MPI_Send(buf, 4, pair, 1, 0, MPI_COMM_WORLD);
    if (rank == 1) MPI_Recv(buf, 4, pair, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Type_free(&pair);
  } else {
    MPI_Reduce_scatter_block(buf, out, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return 0;
}
