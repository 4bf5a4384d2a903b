"""Where the library's pool calls hand a shared CPU over: measured hand-overs and times against the replay by turns.

    python benchmarks/replay_pool_turns.py --pool-profile LOCAL.json [--cpu-figures FILE] [--maps 0,0 0,0,1,1 1,0,1]
        [--patterns G B r S GB Br RG GBr RB RGB RGBr] [--iterations 3000] [--rounds 2]

Each pattern (one letter a call: R allreduce of 64 KiB, the large algorithm at the library's default threshold;
G allgather of 4 KiB; B bcast of 4 KiB; r allreduce of 8 B; S barrier; W no call but coll_timed.c's work, replayed
as a compute gap of its median time alone, which the program measures before its loop) runs ITERATIONS times under the library
(replay_validate_src/coll_pattern.c, `cxlsim mpi run`), its ranks bound to the CPUs of each map (`mpiexec -bind-to
user:MAP`: rank r on CPU MAP[r]); it prints the time per iteration and each rank's context switches per iteration
(getrusage, the ranks' mean: with every rank busy-polling, its hand-overs), the median over `--rounds`, beside the
replay by turns of the same calls (`cxlsim.replay.engine` with `--cpus`, the pool calls priced by LOCAL.json, the
figures of `benchmarks/replay_cpu_sharing.py`: read from `--cpu-figures`, its saved output, or measured now with
`--quick --rounds 1`). The hand-overs follow the library's step protocol (`cxlsim.replay.pool_steps`): on one CPU
and where one CPU holds a single rank they are the model's; the last table line says per map how many patterns
agree within 0.05 a rank and iteration. Units: us, switches per rank and iteration. The load is printed with
every map: other jobs' tasks take turns on the ranks' CPUs too.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import statistics
import subprocess
import sys
import tempfile

from cxlsim.emulator.cli import find_mpiexec
from cxlsim.mpi.build import find_mpicc
from cxlsim.replay import simgrid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import replay_cpu_sharing as sharing_bench  # noqa: E402  (its trace and model helpers)
import replay_validate  # noqa: E402  (its reader of replay_cpu_sharing's figures)

SOURCE = os.path.join(HERE, "replay_validate_src", "coll_pattern.c")
CALLS = {"R": "allreduce 65536 0", "G": "allgather 4096 4096", "B": "bcast 4096 0", "r": "allreduce 8 0",
         "S": "barrier", "W": "compute {work_ns:.0f}"}
"""coll_pattern.c's letters -> the trace line of each call (bytes as the library traces them; W: its work, a compute
gap of the ns the program timed it at alone, the trace's host speed 1e9 flop/s)."""
AGREE = 0.05
"""Hand-overs per rank and iteration within which the model's count agrees with the measured one."""
OUTPUT = re.compile(r"us (\S+) switches (\S+) work_ns (\S+)")


def measured(exe: str, cpu_map: tuple, pattern: str, iterations: int) -> tuple[float, float, float]:
    """(us per iteration, switches per rank and iteration, ns of one W alone) of one bound run under the library."""
    cmd = [sys.executable, "-m", "cxlsim", "mpi", "run", "--", find_mpiexec(), "-n", str(len(cpu_map)), "-bind-to",
           "user:" + ",".join(map(str, cpu_map)), exe, pattern, str(iterations)]
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "CXLSIM_PROFILE")}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{' '.join(cmd)}: over 600 s; stopped") from None
    got = OUTPUT.search(done.stdout)
    if done.returncode != 0 or got is None:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return float(got.group(1)), float(got.group(2)), float(got.group(3))


def modelled(tmp: str, spec: str, cpu_map: tuple, pattern: str, iterations: int, figures,
             work_ns: float = 0.0) -> tuple[float, float]:
    """(us per iteration, switches per rank and iteration) of the replay by turns of the same calls (W: a compute
    gap of `work_ns`)."""
    n, step = len(cpu_map), [CALLS[c].format(work_ns=work_ns) for c in pattern]
    name = os.path.join(tmp, f"{pattern}-{'_'.join(map(str, cpu_map))}")
    trace = simgrid.read(sharing_bench.write_trace(name, n, sharing_bench.loop_lines(lambda r: step, iterations)),
                         1e9)
    stats = sharing_bench.stats_file(name + ".stats", n, sharing_bench.library_rows(trace))
    us, timeline = sharing_bench.modelled_us(trace, spec, iterations, dataclasses.replace(figures, cpu_map=cpu_map),
                                             stats)
    return us, sum(timeline.switches) / n / iterations


def parse_map(text: str, cpus: int) -> tuple:
    try:
        cpu_map = tuple(int(c) for c in text.split(","))
    except ValueError:
        raise SystemExit(f"--maps: expected comma-separated CPU numbers, got {text!r}") from None
    if len(cpu_map) < 2 or any(not 0 <= c < cpus for c in cpu_map):
        raise SystemExit(f"--maps: {text!r}: expected at least 2 ranks, each on a CPU 0..{cpus - 1}")
    return cpu_map


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool-profile", required=True, help="local-host profile of this machine (cxlsim calibrate)")
    parser.add_argument("--cpu-figures", help="benchmarks/replay_cpu_sharing.py's saved output (default: measure now)")
    parser.add_argument("--maps", nargs="+", default=["0,0", "0,0,1,1", "1,0,1"], help="CPU of each rank, per run")
    parser.add_argument("--patterns", nargs="+", default=["G", "B", "r", "S", "GB", "Br", "RG", "GBr", "RB", "RGB",
                                                          "RGBr"], help="call letters per iteration (R G B r S)")
    parser.add_argument("--iterations", type=int, default=3000, help="iterations per run (default 3000)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per map and pattern (default 2)")
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0))
    maps = [parse_map(m, cpus) for m in args.maps]
    bad = [p for p in args.patterns if not p or set(p) - set(CALLS)]
    if bad:
        parser.error(f"--patterns: {bad}: each a string of the letters {' '.join(CALLS)}")
    if args.iterations < 10 or args.rounds < 1:
        parser.error("--iterations: at least 10; --rounds: at least 1")
    if not os.path.isfile(args.pool_profile):
        parser.error(f"--pool-profile: {args.pool_profile}: no such file")
    if args.cpu_figures:
        with open(args.cpu_figures) as fh:
            figures = replay_validate.cpu_figures(fh.read())
        if figures is None:
            parser.error(f"--cpu-figures: {args.cpu_figures}: no '# replay options' line (replay_cpu_sharing.py's)")
    else:
        print("# measuring the CPU-sharing figures (benchmarks/replay_cpu_sharing.py --quick --rounds 1) ...",
              flush=True)
        done = subprocess.run([sys.executable, os.path.join(HERE, "replay_cpu_sharing.py"), "--quick", "--rounds", "1",
                               "--pool-profile", args.pool_profile], capture_output=True, text=True, timeout=1800)
        figures = replay_validate.cpu_figures(done.stdout) if done.returncode == 0 else None
        if figures is None:
            raise SystemExit(f"replay_cpu_sharing.py gave no replay options ({done.returncode}):\n{done.stderr}")
    # a rank bound to one CPU sees one core, fewer than the ranks: the library's pool waits yield from their 8th poll
    # (cxlsim/mpi/pools.c OVERSUBSCRIBED_SPIN_ITERS), with no spin first
    figures = dataclasses.replace(figures, cpus=cpus, pool_spin_ns=0.0)
    print(f"# figures: slice {figures.slice_ns / 1e3:.0f} us, pool yield {figures.pool_yield_ns / 1e3:.2f} us, MPI "
          f"yield {figures.mpi_yield_ns / 1e3:.2f} us; pool calls priced by {args.pool_profile}; {cpus} CPUs")
    with tempfile.TemporaryDirectory(prefix="cxlsim-turns-") as tmp:
        exe = os.path.join(tmp, "coll_pattern")
        subprocess.run([find_mpicc(), "-O2", SOURCE, "-o", exe], check=True)
        spec = f"{sharing_bench.message_profile(tmp, 1000.0)}+{args.pool_profile}"
        verdicts = []
        for cpu_map in maps:
            with open("/proc/loadavg") as fh:
                load = fh.read().split()[0]
            print(f"# map {','.join(map(str, cpu_map))} (load {load}): {'pattern':>8} {'us':>8} {'model':>8} "
                  f"{'error':>7} {'switches':>9} {'model':>7}")
            agree = 0
            for pattern in args.patterns:
                runs = [measured(exe, cpu_map, pattern, args.iterations) for _ in range(args.rounds)]
                us, switches = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
                model_us, model_switches = modelled(tmp, spec, cpu_map, pattern, min(args.iterations, 500), figures,
                                                    statistics.median(r[2] for r in runs))
                agree += abs(model_switches - switches) <= AGREE
                print(f"  {'':>24}{pattern:>8} {us:>8.2f} {model_us:>8.2f} {(model_us - us) / us * 100:>+6.1f}% "
                      f"{switches:>9.3f} {model_switches:>7.3f}", flush=True)
            verdicts.append(f"{','.join(map(str, cpu_map))}: {agree} of {len(args.patterns)}")
        print(f"# hand-overs within {AGREE} a rank and iteration of the model's, per map: " + "; ".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
