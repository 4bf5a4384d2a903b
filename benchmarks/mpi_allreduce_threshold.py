"""The MPI library's allreduce at the default threshold (64 KiB) against a calibration profile's, at np 2.

    python benchmarks/mpi_allreduce_threshold.py PROFILE.json [--sizes 64KiB,256KiB] [--pairs 3] [--calls 500]

Runs an mpi4py program (MPI_Allreduce of float32 sums: 200 warm-up calls, then 5 batches of --calls calls,
each batch's mean per call) under `cxlsim mpi run`, once with the library's default threshold and once
with CXLSIM_PROFILE naming PROFILE (`cxlsim mpi run` takes its measured threshold), --pairs times, the
order alternating, so drift hits both alike. Prints, per size and pair, the median [min-max] of the
batches (us) for each side, their ratio, the threshold each ran with and the host placement the library's
set-up probe saw (its stats line), and the load average.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

from cxlsim.emulator.cli import find_mpiexec
from cxlsim.emulator.tuning import allreduce_large_bytes
from cxlsim.errors import InputError
from cxlsim.units import format_size, parse_option, parse_sizes

PROGRAM = """
import sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
calls = int(sys.argv[1])
for n in map(int, sys.argv[2:]):
    a = np.ones(max(n // 4, 1), np.float32); b = np.empty_like(a)
    for _ in range(200):
        comm.Allreduce(a, b)
    means = []
    for _ in range(5):
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(calls):
            comm.Allreduce(a, b)
        means.append((time.perf_counter() - t) / calls * 1e6)
    if comm.rank == 0:
        print("size", n, *("%.4f" % m for m in means), flush=True)
"""


def run(program: str, sizes: list[int], calls: int, profile: str | None) -> tuple[dict, str]:
    """{size: [batch means in us]} and the library's stats line of one job."""
    env = {k: v for k, v in os.environ.items() if k not in ("CXLSIM_PROFILE", "CXLSIM_MPI_ALLREDUCE_LARGE")}
    if profile:
        env["CXLSIM_PROFILE"] = profile
    command = [sys.executable, "-m", "cxlsim", "mpi", "run", "--stats", "--", find_mpiexec(), "-n", "2",
               sys.executable, program, str(calls), *map(str, sizes)]
    got = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if got.returncode != 0:
        raise SystemExit(f"mpi_allreduce_threshold: the job failed ({got.returncode}):\n{got.stderr[-2000:]}")
    means = {int(f[1]): [float(x) for x in f[2:]] for f in (line.split() for line in got.stdout.splitlines())
             if f and f[0] == "size"}
    stats = next((line for line in got.stderr.splitlines() if line.startswith("cxlsim-mpi stats:")), "")
    return means, stats


def _summary(values: list[float]) -> str:
    values = sorted(values)
    return f"{values[len(values) // 2]:7.2f} [{values[0]:.2f}-{values[-1]:.2f}]"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--sizes", default="64KiB,256KiB")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args(argv)
    try:
        sizes = parse_option("--sizes", args.sizes, parse_sizes)
        threshold, source = allreduce_large_bytes({"CXLSIM_PROFILE": args.profile})
        if args.pairs < 1 or args.calls < 1:
            raise InputError("--pairs and --calls: expected >= 1")
    except InputError as exc:
        print(f"mpi_allreduce_threshold: error: {exc}", file=sys.stderr)
        return 2
    print(f"# the profile's threshold: {format_size(threshold)} ({source}); the default: 64 KiB")
    print(f"# {'size':>8} {'pair':>4} {'default us':>20} {'profile us':>20} {'default/profile':>15}  placement (default, profile)")
    with tempfile.TemporaryDirectory() as tmp:
        program = os.path.join(tmp, "allreduce_loop.py")
        with open(program, "w") as f:
            f.write(PROGRAM)
        for pair in range(args.pairs):
            sides = [None, args.profile] if pair % 2 == 0 else [args.profile, None]
            got = {side: run(program, sizes, args.calls, side) for side in sides}
            (default, dstats), (tuned, tstats) = got[None], got[args.profile]
            where = [m.group(1) if (m := re.search(r"placement (\w+ \(flag round trip \d+ ns\))", s)) else "?"
                     for s in (dstats, tstats)]
            for n in sizes:
                d, t = sorted(default[n])[2], sorted(tuned[n])[2]
                print(f"  {format_size(n):>8} {pair + 1:>4} {_summary(default[n]):>20} {_summary(tuned[n]):>20} "
                      f"{d / t:14.2f}x  {where[0]}, {where[1]}")
    print(f"# load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
