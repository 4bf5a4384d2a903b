"""What tracing costs a run: the same MPI program under the library, untraced and with `--trace`, interleaved.

    python benchmarks/trace_overhead.py [--maps 0,1 0,0,1] [--rounds 3] [--iterations 200]

The program is replay_validate_src/coll_timed.c (per iteration a little work, a 64 KiB and an 8-byte allreduce,
a 4 KiB allgather and bcast: four pool calls), its ranks bound to the CPUs of each map (`mpiexec -bind-to
user:MAP`; 0,0,1 puts two ranks on CPU 0, as np 3 on this machine's 2 CPUs shares one). Per map and round, one
untraced and one traced run (their order alternating), each printing its mean and median iteration (us) and the
placement its pool probed. The summary per map: the traced run's excess over the untraced one, median over the
rounds, and from the traced runs' durations the tracer's own time a call (the gap between a call's return and the
next call's entry less the compute line between them: what formatting and recording took there, ns; median and
90th percentile over the calls). A replay takes its gaps from the durations (docs/replay.md), so the tracer's own
time is in the replay; what else tracing costs the run (its cache footprint, the CPU-mates' turns) is not.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from cxlsim.emulator.cli import find_mpiexec
from cxlsim.mpi.build import find_mpicc
from cxlsim.replay import call_times, simgrid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from replay_pool_turns import parse_map  # noqa: E402  (its --maps reader)
SOURCE = os.path.join(HERE, "replay_validate_src", "coll_timed.c")
RECORD_H = os.path.join(HERE, "..", "tests", "data", "traces", "src")
PROBE = re.compile(r"flag round trip (\S+) ns, (fast|slow|disturbed)")


def run(exe: str, cpu_map: str, iterations: int, trace_dir: str | None) -> tuple[float, float, str]:
    """(mean us, median us an iteration, the pool probe's placement) of one run of the program."""
    cmd = [sys.executable, "-m", "cxlsim", "mpi", "run", *(["--trace", trace_dir] if trace_dir else []), "--",
           find_mpiexec(), "-n", str(len(cpu_map.split(","))), "-bind-to", f"user:{cpu_map}", exe, str(iterations),
           "2000"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, CXLSIM_MPI_VERBOSE="2"))
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    wall = float(re.search(r"wall_s (\S+)", done.stdout).group(1))
    median = float(re.search(r"median_iteration_s (\S+)", done.stdout).group(1))
    probe = PROBE.search(done.stderr)
    placement = f"{probe.group(2)} {float(probe.group(1)):.0f} ns" if probe else "not probed"
    return wall / iterations * 1e6, median * 1e6, placement


def tracer_gaps_ns(trace_dir: str) -> list[float]:
    """Every rank's gaps between consecutive calls less the compute line between them (ns), where the compute lines
    are wall time (none where the ranks outnumbered the CPUs: the lines are then CPU time, docs/mpi.md)."""
    trace = simgrid.read(trace_dir)
    gaps = []
    for calls, timed in zip(trace.ranks, call_times.read_durations(trace)):
        computes = {c.line: c.amount for c in calls if c.kind == "compute"}  # flops at the library's 1 Gf/s: ns
        for before, after in zip(timed, timed[1:]):
            if after.gap_cpu_ns is not None:
                continue
            between = sum(computes.get(line, 0.0) for line in range(before.lines[-1] + 1, after.lines[0]))
            gaps.append(after.start_ns - (before.start_ns + before.duration_ns) - between)
    return gaps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--maps", nargs="+", default=["0,1", "0,0,1"], help="CPU of each rank, per run")
    parser.add_argument("--rounds", type=int, default=3, help="untraced + traced pairs per map (default 3)")
    parser.add_argument("--iterations", type=int, default=200, help="iterations per run (default 200)")
    args = parser.parse_args()
    if args.rounds < 1 or args.iterations < 10:
        parser.error("--rounds: at least 1; --iterations: at least 10")
    cpus = len(os.sched_getaffinity(0))
    maps = [",".join(map(str, parse_map(m, cpus))) for m in args.maps]
    with tempfile.TemporaryDirectory(prefix="cxlsim-trace-cost-") as tmp:
        exe = os.path.join(tmp, "coll_timed")
        subprocess.run([find_mpicc(), "-O2", "-I", RECORD_H, SOURCE, "-o", exe], check=True)
        summary = []
        for cpu_map in maps:
            with open("/proc/loadavg") as fh:
                load = fh.read().split()[0]
            print(f"# map {cpu_map} (load {load}): {'run':>9} {'mean us':>8} {'median':>8}  placement")
            excess_mean, excess_median, gaps = [], [], []
            for r in range(args.rounds):
                got = {}
                for traced in ((False, True) if r % 2 == 0 else (True, False)):
                    directory = os.path.join(tmp, f"trace-{cpu_map}-{r}") if traced else None
                    got[traced] = run(exe, cpu_map, args.iterations, directory)
                    if traced:
                        gaps += tracer_gaps_ns(directory)
                    name = "traced" if traced else "untraced"
                    print(f"  {'':>26}{name:>9} {got[traced][0]:>8.1f} {got[traced][1]:>8.1f}  {got[traced][2]}",
                          flush=True)
                excess_mean.append(got[True][0] - got[False][0])
                excess_median.append(got[True][1] - got[False][1])
            gaps.sort()
            own = (f"the tracer's own time a call {statistics.median(gaps):.0f} ns median, "
                   f"{gaps[int(0.9 * (len(gaps) - 1))]:.0f} ns 90th percentile ({len(gaps)} gaps)" if gaps else
                   "the tracer's own time not separable (the ranks outnumber their CPUs: the compute lines are CPU "
                   "time, the tracer's CPU clock reads among it)")
            summary.append(f"{cpu_map}: traced - untraced {statistics.median(excess_mean):+.1f} us mean, "
                           f"{statistics.median(excess_median):+.1f} us median iteration (medians of "
                           f"{args.rounds}); {own}")
        for line in summary:
            print("# " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
