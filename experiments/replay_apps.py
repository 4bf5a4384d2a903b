"""What a CXL pool buys three mini-app patterns: generated traces replayed on networks, one pool and pods.

    python experiments/replay_apps.py [--ranks 16 64 256] [--patterns stencil cg training] [--out DIR]

Traces (`cxlsim.replay.generate`, SimGrid TI format, compute at 1 Gflop/s):
- stencil: a 3-D halo exchange (six 64 KiB faces, isend/irecv/waitall, 1 ms of compute) and an
  8-byte allreduce per iteration;
- cg: an HPCG-like solver, per iteration a 6 x 8 KiB halo, 200 us of SpMV, two 8-byte
  allreduces and 2 x 50 us of vector updates;
- training: one data-parallel step, 20 ms forward and 40 ms backward in 4 buckets, each
  followed by a blocking 4 MiB allreduce (16 MiB of gradients).

Each is replayed by the DES (`cxlsim.replay.engine`, MPICH's selector) on one switch per network
preset (eth-100g-tcp, the reference; eth-100g-roce; ib-hdr), on one cxl3-pool (hw coherence;
only up to --pool-max-ranks hosts: the single pool's DES slows with the square of the hosts, and
the table says where it was not run), and on pods of 16 hosts, each on its own cxl3-pool, with
TCP, RoCE or InfiniBand between the pods (`cxl-pods`), under two placements: block (a pod holds
16 consecutive ranks) and scattered (a seeded random permutation of the hosts). Inside a pod a
message takes the pool or the network by size (`cxlsim.replay.pod_routes`). The result is the projected application time
and its speedup over the first fabric (eth-100g-tcp by default), with communication's share of rank-time and of the critical
path. The DES is deterministic: the figures do not depend on the machine's load; only the
replay's wall time (printed) does. Results go to DIR/replay_apps.csv and .json (atomically).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import tempfile
import time

import numpy as np

from cxlsim.replay import engine, fabrics, generate, simgrid
from cxlsim.replay.analysis import summary
from cxlsim.results import atomic_write

NETWORKS = ("eth-100g-tcp", "eth-100g-roce", "ib-hdr")
POD_HOSTS = 16
POD_NETWORKS = {"pods-tcp": "eth-100g-tcp", "pods-roce": "eth-100g-roce", "pods-ib": "ib-hdr"}
PLACEMENT_SEED = 1


def make_trace(pattern: str, ranks: int, directory: str, iterations: int | None) -> str:
    where = os.path.join(directory, f"{pattern}-{ranks}")
    if pattern == "stencil":
        return generate.write_stencil(where, generate.grid(ranks), iterations=iterations or 3)
    if pattern == "cg":
        return generate.write_cg(where, generate.grid(ranks), iterations=iterations or 5)
    return generate.write_training(where, ranks, steps=iterations or 1)


def pods_file(directory: str, label: str, network: str, ranks: int) -> str:
    path = os.path.join(directory, f"{label}-{ranks}.yaml")
    with open(path, "w") as fh:
        fh.write(json.dumps({"fabric": {"preset": "cxl-pods", "nodes": ranks,
                                        "pods": {"pool": "cxl3-pool", "hosts": POD_HOSTS, "network": network}}}))
    return path


def scattered_file(directory: str, ranks: int) -> str:
    """A placement file putting trace rank r on host perm[r], a seeded random permutation: neighbours end up in
    different pods far more often than under block placement (rank r on host r)."""
    path = os.path.join(directory, f"scattered-{ranks}.txt")
    perm = np.random.default_rng(PLACEMENT_SEED).permutation(ranks)
    with open(path, "w") as fh:
        fh.write("".join(f"{h}\n" for h in perm))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--patterns", nargs="+", default=["stencil", "cg", "training"],
                        choices=["stencil", "cg", "training"])
    parser.add_argument("--iterations", type=int, help="stencil/cg iterations or training steps "
                                                       "(default 3, 5 and 1)")
    parser.add_argument("--pool-max-ranks", type=int, default=64,
                        help="replay on one cxl3-pool only up to this many ranks (default 64)")
    parser.add_argument("--fabrics", nargs="+", default=[*NETWORKS, "cxl3-pool", *POD_NETWORKS],
                        choices=[*NETWORKS, "cxl3-pool", *POD_NETWORKS],
                        help="the fabrics to replay on (default all; the speedup is over the first)")
    parser.add_argument("--pod-placements", nargs="+", default=["block", "scattered"], choices=["block", "scattered"],
                        help="placements on the pod fabrics (default both): block (rank r on host r, so a pod holds "
                             "consecutive ranks) and scattered (a seeded random permutation)")
    parser.add_argument("--out", default="runs/replay-apps", help="directory for the CSV and JSON")
    args = parser.parse_args()
    if any(r % POD_HOSTS for r in args.ranks):
        parser.error(f"--ranks: multiples of {POD_HOSTS} (the pods' size)")
    os.makedirs(args.out, exist_ok=True)  # before the runs: a bad --out fails now, not after them
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pattern in args.patterns:
            for ranks in args.ranks:
                trace = simgrid.read(make_trace(pattern, ranks, tmp, args.iterations))
                specs = []
                for label in args.fabrics:
                    if label in POD_NETWORKS:
                        spec = pods_file(tmp, label, POD_NETWORKS[label], ranks)
                        for placement in args.pod_placements:
                            where = "block" if placement == "block" else scattered_file(tmp, ranks)
                            specs.append((label if placement == "block" else f"{label} {placement}", spec, where))
                    elif label != "cxl3-pool" or ranks <= args.pool_max_ranks:
                        specs.append((label, label, "block"))
                reference = None
                for label, spec, placement in specs:
                    fab = fabrics.resolve(spec, ranks, placement)
                    begin = time.perf_counter()
                    timeline = engine.replay(trace, fab.make(), at=fab.at)
                    wall = time.perf_counter() - begin
                    s = summary(label, timeline)
                    reference = reference or s["total_s"]
                    row = {"pattern": pattern, "ranks": ranks, "fabric": label, "placement": fab.describe.rsplit(
                               "placement ", 1)[-1].split(";")[0], "total_ms": s["total_s"] * 1e3,
                           "speedup": reference / s["total_s"], "communication_share": s["communication_share"],
                           "critical_communication_share": s["critical_communication_share"],
                           "events": timeline.events, "des_wall_s": wall,
                           "notes": "; ".join(timeline.notes)}
                    rows.append(row)
                    print(f"{pattern:<9}{ranks:>5} {label:<20}{row['total_ms']:>11.3f} ms {row['speedup']:>6.2f}x "
                          f"comm {row['communication_share']:>6.1%} (critical {row['critical_communication_share']:>6.1%}) "
                          f"DES {wall:6.1f} s", flush=True)
                if ranks > args.pool_max_ranks and "cxl3-pool" in args.fabrics:
                    print(f"{pattern:<9}{ranks:>5} {'cxl3-pool':<14} not run (more than --pool-max-ranks "
                          f"{args.pool_max_ranks} hosts on one pool)", flush=True)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(os.path.join(args.out, "replay_apps.csv"), buf.getvalue())
    atomic_write(os.path.join(args.out, "replay_apps.json"), json.dumps(rows, indent=1))
    print(f"# wrote {args.out}/replay_apps.csv and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
