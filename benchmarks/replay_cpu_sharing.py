"""What an oversubscribed rank costs here: the figures `cxlsim replay --cpus N` models CPU sharing with.

    python benchmarks/replay_cpu_sharing.py [--rounds 3] [--quick]

Measurements, each repeated `--rounds` times (median [min-max] printed, with the load average before
and after each):
1. **The scheduler's slice for CPU-bound processes**: two busy loops pinned to one CPU, each reading the
   clock; a gap over 20 us is a time the other ran. The median run between gaps is the slice a CPU-bound
   rank gets before it is preempted (`--cpu-slice`).
2. **MPICH's hand-off**: an 8-byte ping-pong under MPICH (no library) with both ranks pinned to one CPU.
   A waiting rank busy-polls and yields now and then (MPI_Recv calls sched_yield), so every message
   costs the time the waiter polls before the CPU turns to the other rank: half the round trip, minus half
   the round trip on two CPUs (`--mpi-yield`).
3. **The library's pool hand-off**: MPI_Barrier on the library's pool (`cxlsim mpi run`), both ranks pinned
   to one CPU (the library sees one core for two ranks and yields after 8 polls): the time per barrier
   minus the time per barrier on two CPUs (`--pool-yield`).
4. **The hand-offs where ranks outnumber CPUs (np 3 and 4 on this machine's CPUs, unpinned)**: an 8-byte
   ring exchange under MPICH (each rank sends to its right and receives from its left, blocking) and the
   library's MPI_Barrier loop, time per iteration. The replay's DES of the same loop (cxlsim.replay.
   cpu_sharing, the measured slice, messages at half the two-CPU round trip, the barrier at its two-CPU
   time) is solved for the yield interval that gives the measured time: the effective `--mpi-yield` and
   `--pool-yield` at that np (a yield that does not hand the CPU over, as EEVDF's sched_yield does not
   when the other rank is ahead in CPU time, shows as a longer interval, at most the slice).
5. **A blocking exchange at np 2-4** (skipped with `--quick`): the halo program (tests/data/traces/src/
   halo_timed.c) without work, under MPICH alone and under the library: time per iteration.
It ends with the replay options these figures give. Placement: the ranks of 2-3 share one CPU (taskset);
4 and 5 are unpinned. The machine's load from other jobs disturbs every figure: read the load columns.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from cxlsim.calibrate.profile import make_profile, save_profile
from cxlsim.loggp import LogGPFit, Regime
from cxlsim.emulator.cli import find_mpiexec
from cxlsim.mpi.build import build, find_mpicc
from cxlsim.replay import engine, fabrics, simgrid
from cxlsim.replay.cpu_sharing import CPUSharing

HERE = os.path.dirname(os.path.abspath(__file__))
HALO = os.path.join(HERE, "..", "tests", "data", "traces", "src", "halo_timed.c")

SLICER = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
/* slicer N CPU SECONDS: N busy processes pinned to CPU; each prints the median length of its runs between
 * gaps over 20 us (ms) and its share of the CPU. */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
  int n = atoi(argv[1]), cpu = atoi(argv[2]);
  double span = atof(argv[3]) * 1e9;
  for (int i = 0; i < n; i++) {
    if (fork() == 0) {
      cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); sched_setaffinity(0, sizeof s, &s);
      static double runs[100000];
      int k = 0;
      double start = now(), last = start, run_start = start, gaps = 0;
      while (last - start < span) {
        double t = now();
        if (t - last > 20000) { if (k < 100000) runs[k++] = last - run_start; gaps += t - last; run_start = t; }
        last = t;
      }
      qsort(runs, k, sizeof runs[0], cmp);
      printf("slice_ms %.4f share %.3f runs %d\n", k ? runs[k / 2] / 1e6 : 0.0, 1 - gaps / span, k);
      exit(0);
    }
  }
  while (wait(NULL) > 0) {}
  return 0;
}
"""

PINGPONG = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* pingpong ITERATIONS: 8-byte round trips between ranks 0 and 1 (us per round trip) */
int main(int argc, char **argv) {
  int rank; char b[8] = {0};
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int it = atoi(argv[1]);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < it; i++) {
    if (rank == 0) { MPI_Send(b, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD); MPI_Recv(b, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(b, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(b, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD); }
  }
  if (rank == 0) printf("us %.3f\n", (MPI_Wtime() - t0) / it * 1e6);
  MPI_Finalize();
  return 0;
}
"""

RING = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* ring ITERATIONS: us per iteration of an 8-byte send to the right and receive from the left (blocking) */
int main(int argc, char **argv) {
  int rank, size; char s[8] = {0}, r[8];
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
  int it = atoi(argv[1]), right = (rank + 1) % size, left = (rank + size - 1) % size;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < it; i++) {
    if (rank % 2 == 0) { MPI_Send(s, 8, MPI_CHAR, right, 0, MPI_COMM_WORLD); MPI_Recv(r, 8, MPI_CHAR, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(r, 8, MPI_CHAR, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(s, 8, MPI_CHAR, right, 0, MPI_COMM_WORLD); }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("us %.3f\n", (MPI_Wtime() - t0) / it * 1e6);
  MPI_Finalize();
  return 0;
}
"""

BARRIERS = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* barriers ITERATIONS: us per MPI_Barrier */
int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int it = atoi(argv[1]);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < it; i++) MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("us %.3f\n", (MPI_Wtime() - t0) / it * 1e6);
  MPI_Finalize();
  return 0;
}
"""


def loadavg() -> float:
    return os.getloadavg()[0]


def compile_c(tmp: str, name: str, source: str, mpi: bool) -> str:
    src, exe = os.path.join(tmp, name + ".c"), os.path.join(tmp, name)
    with open(src, "w") as fh:
        fh.write(source)
    subprocess.run([find_mpicc() if mpi else "cc", "-O2", src, "-o", exe], check=True)
    return exe


def run(cmd: list, pin: str | None = None, library: bool = False) -> str:
    """stdout of `cmd` (MPI programs through mpiexec; under the library with `library`; pinned to CPUs `pin`)."""
    if library:
        cmd = [sys.executable, "-m", "cxlsim", "mpi", "run", "--", *cmd]
    if pin is not None:
        cmd = ["taskset", "-c", pin, *cmd]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def spread(values: list) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def measure(rounds: int, label: str, once) -> list:
    """`once()` -> a figure, `rounds` times, each with the load before and after; prints the row."""
    got, loads = [], []
    for _ in range(rounds):
        before = loadavg()
        got.append(once())
        loads.append((before, loadavg()))
    load = f"load {min(min(p) for p in loads):.2f}-{max(max(p) for p in loads):.2f}"
    print(f"  {label:<58} {spread(got):>28}   {load}", flush=True)
    return got


def ring_lines(n: int, iterations: int):
    """The ring program's calls per rank (a SimGrid TI trace), with a barrier before and after."""
    def lines(r):
        right, left = (r + 1) % n, (r + n - 1) % n
        step = ([f"send {right} 0 8", f"recv {left} 0 8"] if r % 2 == 0 else [f"recv {left} 0 8", f"send {right} 0 8"])
        return ["barrier", *step * iterations, "barrier"]
    return lines


def write_trace(directory: str, n: int, lines) -> str:
    os.makedirs(directory)
    for r in range(n):
        with open(os.path.join(directory, f"t_rank-{r + 1}.txt"), "w") as fh:
            fh.write("".join(f"{r} {line}\n" for line in ["init", *lines(r), "finalize"]))
    return directory


def message_profile(tmp: str, one_way_ns: float) -> str:
    """A network profile whose every message costs `one_way_ns` (the measured half round trip), for the DES."""
    regime = Regime(min_size_bytes=0, max_size_bytes=1 << 22, latency_ns=one_way_ns, overhead_ns=0.0, gap_ns=0.0,
                    gap_per_byte_ns=0.0, rms_rel_error=0.0)
    model = {"base_preset": "ib-hdr", "np": 2, "loggp": LogGPFit(regimes=(regime,), identified="measured").to_dict(),
             "collective_overhead_ns": 0.0, "memcpy_bw_bytes_per_ns": {"1": 10.0}}
    return save_profile(os.path.join(tmp, "messages.json"), make_profile("network", model, []))


def modelled_us(trace, spec: str, iterations: int, sharing: CPUSharing | None) -> float:
    """The DES's time per iteration of a loop trace between its barriers (rank 0), us."""
    fab = fabrics.resolve(spec, trace.size, trace=trace)
    timeline = engine.replay(trace, fab.make(), priced=fab.priced, sharing=sharing)
    barriers = [seg for seg in timeline.segments[0] if seg[2] == "barrier"]
    return (barriers[-1][1] - barriers[0][1]) / iterations / 1e3


def solve_yield(trace, spec: str, iterations: int, cpus: int, slice_ns: float, kind: str, measured_us: float):
    """The yield interval (ns, 0..slice) with which the DES gives `measured_us` per iteration (bisection; the
    model's time grows with the interval), and whether the measured time is inside the model's range."""
    def at(h):
        mpi, pool = (h, 0.0) if kind == "mpi" else (0.0, h)
        return modelled_us(trace, spec, iterations, CPUSharing(cpus, slice_ns, mpi, pool))
    low, high = 0.0, slice_ns
    if measured_us <= at(low):
        return low, "at or below the model with instant yields"
    if measured_us >= at(high):
        return high, "at or above the model with no yield (the slice)"
    for _ in range(30):
        mid = (low + high) / 2
        if at(mid) < measured_us:
            low = mid
        else:
            high = mid
    return (low + high) / 2, "inside the model's range"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="repeats of every figure (default 3)")
    parser.add_argument("--quick", action="store_true", help="skip the halo exchanges (part 5)")
    parser.add_argument("--pool-profile", default=os.path.join(HERE, "..", "tests", "data",
                                                              "local_host_profile_np2.json"),
                        help="local-host profile pricing the modelled barrier's kernel (default: the tests' np-2 "
                             "profile; the hand-offs are far longer)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: expected at least 1")
    build()
    cpus = os.cpu_count() or 1
    print(f"# {cpus} CPUs, kernel {os.uname().release}; median [min-max] over {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as tmp:
        slicer = compile_c(tmp, "slicer", SLICER, mpi=False)
        pingpong = compile_c(tmp, "pingpong", PINGPONG, mpi=True)
        barriers = compile_c(tmp, "barriers", BARRIERS, mpi=True)
        ring = compile_c(tmp, "ring", RING, mpi=True)
        halo = os.path.join(tmp, "halo_timed")
        subprocess.run([find_mpicc(), "-O0", HALO, "-o", halo], check=True)

        def slice_ms():
            runs = [float(m) for m in re.findall(r"slice_ms (\S+)", run([slicer, "2", "0", "1"]))]
            return statistics.median(runs)

        def per_call_us(exe, n, iterations, pin, library):
            return float(re.search(r"us (\S+)", run([find_mpiexec(), "-n", str(n), exe, str(iterations)], pin,
                                                    library)).group(1))

        def halo_us(n, library, iterations=200):
            out = run([find_mpiexec(), "-n", str(n), halo, str(iterations), "0"], None, library)
            return float(re.search(r"wall_s (\S+)", out).group(1)) / iterations * 1e6

        print("# 1. the slice of a CPU-bound process (two busy loops on CPU 0), ms")
        slices = measure(args.rounds, "median run between preemptions", slice_ms)
        print("# 2. MPICH's 8-byte ping-pong (no library), us per round trip")
        free = measure(args.rounds, "on two CPUs (unpinned)", lambda: per_call_us(pingpong, 2, 20000, None, False))
        pinned = measure(args.rounds, "both ranks on CPU 0", lambda: per_call_us(pingpong, 2, 300, "0", False))
        print("# 3. the library's pool MPI_Barrier, us per barrier")
        pool_free = measure(args.rounds, "on two CPUs (unpinned)",
                            lambda: per_call_us(barriers, 2, 20000, None, True))
        pool_pinned = measure(args.rounds, "both ranks on CPU 0 (the library yields after 8 polls)",
                              lambda: per_call_us(barriers, 2, 300, "0", True))
        slice_ns = statistics.median(slices) * 1e6
        one_way = statistics.median(free) / 2 * 1e3
        net = message_profile(tmp, one_way)
        bar_stats = os.path.join(tmp, "barrier_stats.txt")
        effective = {}
        print(f"# 4. where ranks outnumber the {cpus} CPUs (unpinned), us per iteration, and the yield interval "
              f"with which the DES (slice {slice_ns / 1e3:.0f} us, messages {one_way / 1e3:.2f} us) gives it")
        for n in (3, 4):
            iterations = 300
            measured = measure(args.rounds, f"np {n}, MPICH ring (8 B, blocking)",
                               lambda n=n, iterations=iterations: per_call_us(ring, n, iterations, None, False))
            trace = simgrid.read(write_trace(os.path.join(tmp, f"ring-{n}"), n, ring_lines(n, iterations)), 1e9)
            h, where = solve_yield(trace, net, iterations, cpus, slice_ns, "mpi", statistics.median(measured))
            print(f"    effective --mpi-yield at np {n}: {h / 1e3:.1f} us ({where})")
            effective[("mpi", n)] = h
            measured = measure(args.rounds, f"np {n}, the library's pool MPI_Barrier",
                               lambda n=n, iterations=iterations: per_call_us(barriers, n, iterations, None, True))
            with open(bar_stats, "w") as fh:
                fh.write(f"cxlsim-mpi stats: {n} ranks, sums over ranks; pool shm, coherence hw\n"
                         f"MPI_Barrier {n * (iterations + 1)} 0 0 {n * (iterations + 1)} 0 0\n")
            trace = simgrid.read(write_trace(os.path.join(tmp, f"barriers-{n}"), n,
                                             lambda r, iterations=iterations: ["barrier"] * (iterations + 1)), 1e9)
            spec = f"{net}+{args.pool_profile}"
            h, where = solve_yield(trace, spec, iterations, cpus, slice_ns, "pool", statistics.median(measured))
            print(f"    effective --pool-yield at np {n}: {h / 1e3:.1f} us ({where})")
            effective[("pool", n)] = h
        if not args.quick:
            print(f"# 5. the halo exchange without work (halo_timed.c: two 32 KiB messages and an 8-byte allreduce "
                  f"per rank and iteration), us per iteration, unpinned on {cpus} CPUs")
            for n in (2, 3, 4):
                measure(args.rounds, f"np {n}, MPICH alone", lambda n=n: halo_us(n, False))
                measure(args.rounds, f"np {n}, under the library (allreduce on its pool)", lambda n=n: halo_us(n, True))
    mpi_yield = max(0.0, (statistics.median(pinned) - statistics.median(free)) / 2) * 1e3
    pool_yield = max(0.0, statistics.median(pool_pinned) - statistics.median(pool_free)) * 1e3
    print(f"# replay options, two ranks on one CPU (parts 1-3): --cpus {cpus} --cpu-slice {slice_ns / 1e3:.0f}us "
          f"--mpi-yield {mpi_yield / 1e3:.1f}us --pool-yield {pool_yield / 1e3:.1f}us")
    for n in (3, 4):
        print(f"# replay options at np {n} (part 4): --cpus {cpus} --cpu-slice {slice_ns / 1e3:.0f}us "
              f"--mpi-yield {effective[('mpi', n)] / 1e3:.1f}us --pool-yield {effective[('pool', n)] / 1e3:.1f}us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
