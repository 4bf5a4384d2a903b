"""osu_latency, osu_bw and osu_allgather re-implemented with mpi4py, writing OMB's text format.

    mpiexec -n 2 python benchmarks/osu_mpi4py.py OUTDIR

Loops follow OMB 5.3: latency is half a ping-pong round trip (10000 + 100 warm-up
iterations up to 8 KiB, 1000 + 10 above); bandwidth streams a window of 64
non-blocking sends per iteration then waits for a 1-byte ack (100 + 10 iterations,
20 + 2 above 8 KiB) and reports MB/s (10^6 bytes); allgather times each call alone
with a barrier after it (1000 + 200, 100 + 10). Python adds about 1 us per call to
every figure, so these files calibrate "MPI as seen from mpi4py". cxlsim ships the
files this script made on its development machine as examples for
`cxlsim calibrate --from-osu`.
"""
from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

from cxlsim.emulator.osu import OSUTable, format_osu
from cxlsim.results import atomic_write

LARGE = 8192
WINDOW = 64


def sizes(hi: int, lo: int = 1) -> list[int]:
    out, s = ([0] if lo == 0 else []), max(lo, 1)
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def latency(comm, max_size=1 << 22):
    rows = []
    peer = 1 - comm.rank
    for n in sizes(max_size, lo=0):
        iters, skip = (10000, 100) if n <= LARGE else (1000, 10)
        buf = np.zeros(max(n, 1), np.uint8)[:n]
        comm.Barrier()
        for i in range(iters + skip):
            if i == skip:
                t0 = MPI.Wtime()
            if comm.rank == 0:
                comm.Send(buf, peer, 1)
                comm.Recv(buf, peer, 1)
            else:
                comm.Recv(buf, peer, 1)
                comm.Send(buf, peer, 1)
        elapsed = MPI.Wtime() - t0
        rows.append((n, elapsed * 1e6 / (2 * iters)))
    return OSUTable(title=_title("Latency"), columns=("Size", "Latency (us)"), rows=tuple(rows))


def bandwidth(comm, max_size=1 << 22):
    rows = []
    peer = 1 - comm.rank
    ack = np.zeros(1, np.uint8)
    for n in sizes(max_size):
        iters, skip = (100, 10) if n <= LARGE else (20, 2)
        buf = np.zeros(n, np.uint8)
        comm.Barrier()
        for i in range(iters + skip):
            if i == skip:
                t0 = MPI.Wtime()
            if comm.rank == 0:
                MPI.Request.Waitall([comm.Isend(buf, peer, 100) for _ in range(WINDOW)])
                comm.Recv(ack, peer, 101)
            else:
                MPI.Request.Waitall([comm.Irecv(buf, peer, 100) for _ in range(WINDOW)])
                comm.Send(ack, peer, 101)
        elapsed = MPI.Wtime() - t0
        rows.append((n, n / 1e6 * iters * WINDOW / elapsed))
    return OSUTable(title=_title("Bandwidth"), columns=("Size", "Bandwidth (MB/s)"), rows=tuple(rows))


def allgather(comm, max_size=1 << 20):
    rows = []
    for n in sizes(max_size):
        iters, skip = (1000, 200) if n <= LARGE else (100, 10)
        send, recv = np.zeros(n, np.uint8), np.zeros(n * comm.size, np.uint8)
        total = 0.0
        comm.Barrier()
        for i in range(iters + skip):
            t0 = MPI.Wtime()
            comm.Allgather(send, recv)
            if i >= skip:
                total += MPI.Wtime() - t0
            comm.Barrier()
        means = comm.allgather(total * 1e6 / iters)
        rows.append((n, float(np.mean(means)), float(np.min(means)), float(np.max(means)), iters))
    return OSUTable(title=_title("Allgather Latency"),
                    columns=("Size", "Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Iterations"),
                    rows=tuple(rows))


def _title(test: str) -> str:
    library = MPI.Get_library_version().split("\n")[0].strip()
    return f"OSU MPI {test} Test v5.3 loop in mpi4py {__import__('mpi4py').__version__} ({library})"


def main() -> int:
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        print("run with mpiexec -n 2", file=sys.stderr)
        return 2
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    for name, fn in (("osu_latency", latency), ("osu_bw", bandwidth), ("osu_allgather", allgather)):
        table = fn(comm)
        if comm.rank == 0:
            path = os.path.join(outdir, f"{name}_np2_mpi4py_mpich.txt")
            atomic_write(path, format_osu(table))
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
