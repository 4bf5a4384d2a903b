"""Replay speed: a generated 1024-rank 3-D stencil trace on an InfiniBand fat tree, on the DES.

Run: python benchmarks/replay_speed.py [--dims 8x8x16] [--halo 64KiB] [--iterations 10] [--repeats 1]
     [--fabric ib | pods]

The trace (cxlsim.replay.generate): 8 x 8 x 16 = 1024 ranks, each iteration a
1 ms compute gap (1e6 flops at 1 Gflop/s), six 64 KiB halo exchanges with the
periodic neighbours (irecv x 6, isend x 6, waitall) and an 8-byte allreduce;
10 iterations. The fabric: ib-hdr on a two-level fat tree, 32 hosts per leaf,
non-blocking (32 spines); or, with `--fabric pods` (no single pool reaches 1024 hosts: pods
do), 16-host pods each on its own cxl3-pool joined by that fat tree (`cxl-pods`). Prints the time to write and read the trace, the
replay's wall time against the 60 s target, the events it scheduled and the
events per second (each repeat, then the median), with the load average, since
the machine is shared and the rate moves with its load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from cxlsim.replay import analysis, engine, fabrics, generate, simgrid
from cxlsim.units import format_size, parse_size

TARGET_S = 60.0
POD_HOSTS = 16


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="8x8x16", help="grid X x Y x Z (default 8x8x16 = 1024 ranks)")
    ap.add_argument("--halo", default="64KiB", help="bytes per face (default 64 KiB)")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--hosts-per-leaf", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--fabric", choices=["ib", "pods"], default="ib",
                    help="ib: ib-hdr on a fat tree (the target's fabric, default); pods: 16-host cxl3-pool pods "
                         "joined by that fat tree")
    args = ap.parse_args()
    dims = tuple(int(x) for x in args.dims.lower().split("x"))
    ranks = dims[0] * dims[1] * dims[2]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        index = generate.write_stencil(os.path.join(tmp, "trace"), dims, parse_size(args.halo), args.iterations)
        written = time.perf_counter()
        trace = simgrid.read(index)
        read = time.perf_counter()
        scenario = os.path.join(tmp, "ib-fat-tree.yaml")
        preset = ("ib-hdr" if args.fabric == "ib" else
                  f"cxl-pods\n  pods: {{pool: cxl3-pool, hosts: {POD_HOSTS}, network: ib-hdr}}")
        with open(scenario, "w") as fh:
            fh.write(f"fabric:\n  preset: {preset}\n  topology: fat_tree\n  nodes: {ranks}\n"
                     f"  hosts_per_leaf: {args.hosts_per_leaf}\n")
        fabric = fabrics.resolve(scenario, ranks)
        print(f"# trace: {args.dims} = {ranks} ranks, {format_size(parse_size(args.halo))} faces, "
              f"{args.iterations} iterations, {trace.calls()} calls")
        print(f"# fabric: {fabric.describe}")
        print(f"# write {written - start:.2f} s, read {read - written:.2f} s")
        rates, walls = [], []
        for i in range(args.repeats):
            load = os.getloadavg()[0]
            timeline = engine.replay(trace, fabric.make())
            rate = timeline.events / timeline.wall_s
            rates.append(rate)
            walls.append(timeline.wall_s)
            verdict = "meets" if timeline.wall_s <= TARGET_S else "MISSES"
            print(f"repeat {i + 1}: replay {timeline.wall_s:.2f} s ({verdict} the {TARGET_S:.0f} s target), "
                  f"{timeline.events} events, {rate:,.0f} events/s, load average {load:.2f} on "
                  f"{os.cpu_count()} CPUs")
        row = analysis.summary(args.fabric, timeline)
        print(f"# projected total {row['total_s'] * 1e3:.4f} ms, communication {row['communication_share']:.1%} of "
              f"rank-time, {row['critical_communication_share']:.1%} of the critical path")
        if args.repeats > 1:
            print(f"# median of {args.repeats}: replay {statistics.median(walls):.2f} s "
                  f"(range {min(walls):.2f}-{max(walls):.2f}), {statistics.median(rates):,.0f} events/s "
                  f"(range {min(rates):,.0f}-{max(rates):,.0f})")


if __name__ == "__main__":
    main()
