"""Where the np=2 pool allgather's time goes at large sizes, beside MPI_Allgather with and without CMA.

    python benchmarks/allgather_parts.py [--rounds 5] [--sizes 128KiB:1MiB] [--iterations 100]

Runs two mpiexec jobs at np 2, MPICH's CMA single copy on (MPIR_CVAR_CH4_CMA_ENABLE=1) and
off (=0), alternating per round, and in each job times, per size n bytes per rank, in the
OSU loop (a barrier between iterations, outside the timed span; each rank's median iteration, the
ranks' mean), one right after the other:
  mpi      MPI_Allgather (mpi4py buffer API);
  sync     the pool's bare synchronisation of an n-byte call (publish, wait; nothing moves);
  in       the copy-in alone: the fused zero-copy call (send -> own slot, publish, wait), no read;
  in+own   that, then the own block copied out of the slot into recv;
  in+peer  that, then the peer's block copied out of its slot into recv (lines the peer just wrote);
  copy     the whole copy-mode allgather (the kernel's: its own block goes from send to recv in the
           copy-in's pass, then the wait and the peer's block out);
  local    a plain memcpy of n bytes from send to recv (MPICH's own-block copy) and nothing else;
each pool part twice, with the copy-in's stores plain and non-temporal (from 4 KiB).
The parts are differences of these (copy-in = in - sync, own-out = in+own - in, peer-out =
in+peer - in). Medians over rounds, with the rounds' min-max; the load average and the
flag round trip are printed beside them, and every job is tabled under its placement (both its
probes below 200 ns: fast; both above: slow; else mixed).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys

from cxlsim.coherence import Coherence
from cxlsim.emulator.host import SLOW_ROUNDTRIP_NS

POOL_PARTS = ("sync", "in", "in+own", "in+peer", "copy")
COPY_INS = {"plain": 0, "nt": 4096}  # the copy-in's stores: plain, or non-temporal from 4 KiB (cxl_copy_nt)
FAST_ROUNDTRIP_NS = SLOW_ROUNDTRIP_NS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="128KiB:1MiB")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--inside", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        return inside_mpi(args)
    from cxlsim.emulator.cli import find_mpiexec

    by_placement: dict[str, dict[tuple[str, str, int], list[float]]] = {}
    trips, loads = [], []
    for _ in range(args.rounds):
        for cma in ("1", "0"):
            out = os.path.join("/tmp", f"allgather_parts_{os.getpid()}_{cma}.txt")
            command = [find_mpiexec(), "-n", "2", sys.executable, os.path.abspath(__file__), "--inside", out,
                       "--sizes", args.sizes, "--iterations", str(args.iterations), "--warmup", str(args.warmup)]
            env = dict(os.environ, MPIR_CVAR_CH4_CMA_ENABLE=cma)
            if subprocess.run(command, env=env).returncode:
                return 1
            job, job_trips = [], []
            with open(out) as f:
                for line in f:
                    kind, *rest = line.split()
                    if kind == "trip":
                        job_trips = [float(x) for x in rest]
                    elif kind == "load":
                        loads.append(float(rest[0]))
                    else:
                        job.append((kind, int(rest[0]), float(rest[1])))
            os.unlink(out)
            trips.extend(job_trips)
            placement = placement_of(job_trips)
            rows = by_placement.setdefault(placement, {})
            for kind, n, us in job:
                rows.setdefault((cma, kind, n), []).append(us)
    print(f"# allgather_parts: np 2, hw, {args.rounds} rounds x (CMA on, CMA off), {args.iterations} iterations; "
          f"per job each rank's median iteration, the ranks' mean; below, medians over the jobs in us [min-max]; "
          f"the parts (sync, in, own-out, peer-out) and the ratios are of those medians, with no spread of their own")
    print(f"# load average (1 min) per job {min(loads):.1f}-{max(loads):.1f}; flag round trips "
          f"{min(trips):.0f}-{max(trips):.0f} ns (a job's placement: fast if both its probes are below "
          f"{FAST_ROUNDTRIP_NS:.0f} ns, slow if both are above)")
    for placement in ("fast", "slow", "mixed"):
        rows = by_placement.get(placement)
        if not rows:
            print(f"\n# placement {placement}: not observed")
            continue
        print_table(placement, rows)
    return 0


def placement_of(trips) -> str:
    """fast / slow / mixed from a job's flag round trips (before and after)."""
    if all(t < FAST_ROUNDTRIP_NS for t in trips):
        return "fast"
    return "slow" if all(t >= FAST_ROUNDTRIP_NS for t in trips) else "mixed"


def print_table(placement: str, rows) -> None:
    def med(key):
        values = rows.get(key, [])
        return (statistics.median(values), min(values), max(values)) if values else (math.nan,) * 3

    def shown(m):  # a median [min-max], or "not observed" for an MPI setting with no job in this placement
        return f"{m[0]:7.1f} [{m[1]:.0f}-{m[2]:.0f}]" if not math.isnan(m[0]) else f"{'not observed':>17}"

    def ratio(m, pool):
        return f"{m[0] / pool:9.2f}" if not math.isnan(m[0]) else f"{'-':>9}"

    def both(mode, kind, n):  # the pool's parts from both MPICH settings' jobs (the pool does not use MPICH)
        return rows.get(("1", f"{mode}:{kind}", n), []) + rows.get(("0", f"{mode}:{kind}", n), [])

    jobs = {cma: len(rows.get((cma, "mpi", min(n for (_, _, n) in rows)), [])) for cma in ("1", "0")}
    print(f"\n# placement {placement}: {jobs['1']} job(s) with CMA on, {jobs['0']} with CMA off")
    print(f"{'size':>8} {'MPI cma1':>17} {'MPI cma0':>17} {'local':>6} | {'copy-in':>7} {'pool copy':>17} "
          f"{'sync':>5} {'in':>6} {'own-out':>7} {'peer-out':>8} {'cma1/pool':>9} {'cma0/pool':>9}")
    for n in sorted({n for (_, _, n) in rows}):
        m1, m0 = med(("1", "mpi", n)), med(("0", "mpi", n))
        local = statistics.median(rows.get(("1", "local", n), []) + rows.get(("0", "local", n), []))
        for mode in COPY_INS:
            part = {k: statistics.median(both(mode, k, n)) if both(mode, k, n) else math.nan for k in POOL_PARTS}
            copy = sorted(both(mode, "copy", n)) or [math.nan]
            print(f"{n:>8} {shown(m1)} {shown(m0)} "
                  f"{local:6.1f} | {mode:>7} {part['copy']:7.1f} [{copy[0]:.0f}-{copy[-1]:.0f}] "
                  f"{part['sync']:5.1f} {part['in'] - part['sync']:6.1f} {part['in+own'] - part['in']:7.1f} "
                  f"{part['in+peer'] - part['in']:8.1f} {ratio(m1, part['copy'])} {ratio(m0, part['copy'])}")


def inside_mpi(args) -> int:
    from cxlsim.emulator.launch import run_mpi
    from cxlsim.units import parse_sizes

    sizes = tuple(parse_sizes(args.sizes))
    return run_mpi(_measure, (sizes, args), slot_bytes=max(sizes), coherence=Coherence.HW, timeout_s=120.0)


def _measure(comm, world, sizes, args):
    from cxlsim.emulator.host import roundtrip_ns

    trips = [roundtrip_ns(comm)]
    lines = []
    for n in sizes:
        _measure_size(comm, world, n, args, lines)
    trips.append(roundtrip_ns(comm))
    if world.rank == 0:
        with open(args.inside, "w") as f:
            f.write("\n".join(lines) + f"\ntrip {' '.join(f'{t:.1f}' for t in trips)}\nload {os.getloadavg()[0]:.2f}\n")
    return 0


def _measure_size(comm, world, n, args, lines) -> None:
    """Every part at n bytes per rank, one line each into `lines` (kind, n, the ranks' mean of medians, us)."""
    import numpy as np

    me, peer = world.rank, 1 - world.rank
    send = np.full(n, me + 1, np.uint8)
    recv = np.zeros(2 * n, np.uint8)
    blocks = recv.reshape(2, n)

    def measure(kind, op):
        both = np.empty(2)
        comm.allgather(np.array([median_s(op, comm.barrier, args.warmup, args.iterations)]), both)
        lines.append(f"{kind} {n} {both.mean() * 1e6:.3f}")

    def copy_out(r):
        view = comm.allgather_view(send).array
        np.copyto(blocks[r], view[r])

    measure("mpi", lambda: world.Allgather(send, recv))
    measure("local", lambda: np.copyto(blocks[me], send))
    ops = {"sync": lambda: comm.allgather_in_place(n), "in": lambda: comm.allgather_view(send),
           "in+own": lambda: copy_out(me), "in+peer": lambda: copy_out(peer),
           "copy": lambda: comm.allgather(send, recv)}
    for mode, nt_min in COPY_INS.items():
        comm.nt_min_bytes = nt_min
        for kind in POOL_PARTS:
            measure(f"{mode}:{kind}", ops[kind])
    if not np.all(blocks[peer] == peer + 1):
        raise RuntimeError(f"allgather_parts: rank {me} got a wrong peer block at {n} B")


def median_s(op, barrier, warmup: int, iterations: int) -> float:
    """The OSU loop (`bench.time_calls`: a barrier between iterations, outside the timed span); this rank's
    median seconds per op (a median, not the mean, so one descheduled iteration does not move a part's difference)."""
    from cxlsim.emulator.bench import time_calls

    return statistics.median(time_calls(op, barrier, warmup, iterations))


if __name__ == "__main__":
    sys.exit(main())
