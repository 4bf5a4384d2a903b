"""The 1-D halo exchange of halo_timed.c in mpi4py (buffer API), timed by the program itself.

    mpiexec -n N python halo_timed.py [ITERATIONS [WORK]]

Each iteration: WORK steps of a Python loop (compute), a 4096-double exchange with both
neighbours (Irecv, Irecv, Isend, Isend, Waitall) and an 8-byte Allreduce. Rank 0 prints the
wall time from the first barrier's end to the last barrier's end as `wall_s SECONDS`.
"""
import sys

import numpy as np
from mpi4py import MPI


def work(n):
    x = 0.0
    for i in range(n):
        x += i * 0.5
    return x


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank + size - 1) % size
    halo = np.zeros((4, 4096))
    res, total = np.ones(1), np.zeros(1)
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(iterations):
        work(steps)
        reqs = [comm.Irecv(halo[0], left, 10), comm.Irecv(halo[1], right, 11),
                comm.Isend(halo[2], right, 10), comm.Isend(halo[3], left, 11)]
        MPI.Request.Waitall(reqs)
        comm.Allreduce(res, total, MPI.SUM)
    comm.Barrier()
    t1 = MPI.Wtime()
    if rank == 0:
        print(f"wall_s {t1 - t0:.9f}")


main()
