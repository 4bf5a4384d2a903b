"""The 1-D halo exchange of halo_timed.c in mpi4py (buffer API), timed by the program itself.

    mpiexec -n N python halo_timed.py [ITERATIONS [WORK]]

Each iteration: WORK steps of a Python loop (compute), a 4096-double exchange with both
neighbours (Irecv, Irecv, Isend, Isend, Waitall) and an 8-byte Allreduce. Rank 0 prints the
wall time from the first barrier's end to the last barrier's end as `wall_s SECONDS`.
Where CXLSIM_RANK_CPUS names a directory, each rank records its CPU at every iteration and writes
DIR/rank<R>.cpus.txt after the last barrier, as halo_timed.c does (cpu_record.h: sched_getcpu through
ctypes, no MPI call).
"""
import ctypes
import os
import resource
import sys
import time

import numpy as np
from mpi4py import MPI


def work(n):
    x = 0.0
    for i in range(n):
        x += i * 0.5
    return x


class CPURecord:
    """The rank's CPU at each `at()` and, from construction to `end()`, its CPU time (ns), time runnable off
    the CPU (ns, -1 without /proc/self/schedstat), switches while runnable and sleeps (cpu_record.h's file)."""

    def __init__(self, directory):
        self.directory, self.cpus = directory, []
        self.getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
        self.ru0, self.waited0 = resource.getrusage(resource.RUSAGE_SELF), self.waited_ns()
        self.ns0 = time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID)

    @staticmethod
    def waited_ns():
        try:
            with open("/proc/self/schedstat") as fh:
                return int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):
            return -1

    def at(self):
        self.cpus.append(self.getcpu())

    def end(self, rank):
        ns = time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID) - self.ns0
        waited, ru = self.waited_ns(), resource.getrusage(resource.RUSAGE_SELF)
        waited = -1 if waited < 0 or self.waited0 < 0 else waited - self.waited0
        with open(os.path.join(self.directory, f"rank{rank}.cpus.txt"), "w") as fh:
            fh.write(f"cpu_ns {ns} waited_ns {waited} switches {ru.ru_nivcsw - self.ru0.ru_nivcsw} "
                     f"sleeps {ru.ru_nvcsw - self.ru0.ru_nvcsw}\ncpus{''.join(f' {c}' for c in self.cpus)}\n")


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank + size - 1) % size
    halo = np.zeros((4, 4096))
    res, total = np.ones(1), np.zeros(1)
    record = CPURecord(os.environ["CXLSIM_RANK_CPUS"]) if os.environ.get("CXLSIM_RANK_CPUS") else None
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(iterations):
        if record:
            record.at()
        work(steps)
        reqs = [comm.Irecv(halo[0], left, 10), comm.Irecv(halo[1], right, 11),
                comm.Isend(halo[2], right, 10), comm.Isend(halo[3], left, 11)]
        MPI.Request.Waitall(reqs)
        comm.Allreduce(res, total, MPI.SUM)
    comm.Barrier()
    t1 = MPI.Wtime()
    if rank == 0:
        print(f"wall_s {t1 - t0:.9f}")
    if record:
        record.end(rank)


main()
