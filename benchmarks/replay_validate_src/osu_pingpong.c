/* benchmarks/replay_validate.py's fit of MPICH point-to-point at np 2 (no library): an osu_latency-style
 * ping-pong (1 B-1 MiB, 2000 iterations up to 8 KiB, 200 beyond, a tenth as warm-up; one-way us) and an
 * osu_bw-style window of 64 isends (1 B-1 MiB in powers of 4; MB/s), printed as OSU's two tables for
 * cxlsim calibrate --from-osu. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int rank; static char s[1 << 20], r[1 << 20];
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  printf("# OSU MPI Latency Test (cxlsim replay_validate)\n# Size          Latency (us)\n");
  for (int n = 0; n <= (1 << 20); n = n ? 2 * n : 1) {
    int iters = n <= 8192 ? 2000 : 200, warm = iters / 10;
    double t0 = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters + warm; i++) {
      if (i == warm) t0 = MPI_Wtime();
      if (rank == 0) { MPI_Send(s, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD); MPI_Recv(r, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
      else { MPI_Recv(r, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(s, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD); }
    }
    if (rank == 0) printf("%-10d%18.2f\n", n, (MPI_Wtime() - t0) * 1e6 / (2.0 * iters));
  }
  if (rank == 0) printf("# OSU MPI Bandwidth Test (cxlsim replay_validate)\n# Size      Bandwidth (MB/s)\n");
  enum { WINDOW = 64 };
  MPI_Request req[WINDOW];
  for (int n = 1; n <= (1 << 20); n *= 4) {
    int iters = n <= 8192 ? 100 : 20, warm = 5;
    double t0 = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters + warm; i++) {
      if (i == warm) t0 = MPI_Wtime();
      for (int w = 0; w < WINDOW; w++) {
        if (rank == 0) MPI_Isend(s, n, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
        else MPI_Irecv(r, n, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
      }
      MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
      if (rank == 0) MPI_Recv(r, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      else MPI_Send(s, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
    }
    if (rank == 0) printf("%-10d%18.2f\n", n, (double)n * WINDOW * iters / (MPI_Wtime() - t0) / 1e6);
  }
  MPI_Finalize();
  return 0;
}
