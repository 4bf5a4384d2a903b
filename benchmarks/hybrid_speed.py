"""Speed of the 64-node comparison, network against hybrid pods, 1 B to 1 MiB (issue 16 targets).

    python benchmarks/hybrid_speed.py [--nodes 64] [--hosts 16] [--network eth-100g-roce] [--repeats 3]

Runs `cxlsim compare` (`cxlsim.compare.compare`) of the network preset against a hybrid
pod fabric (cxl-pods, `--hosts` hosts per pod on cxl3-pool, the same network between
pods) at `--nodes` nodes over 1 B-1 MiB (21 sizes), with the analytic engine and with the
DES, and times each (wall clock, `--repeats` runs: min and max). Targets: <= 1 s analytic,
<= 20 s DES. The DES comparison runs what `algorithm: auto` picks per size (the pods where
their closed form is faster, else the network's algorithm); `--pods-only` also times the
DES with the pods algorithm at every size, the slowest case (the pool phase moves
n x m bytes per host through the DES's 4 KiB pool chunks). Wall times depend on the
machine's load: say what else ran when quoting them.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from cxlsim import compare
from cxlsim.models.collectives import pool_forms
from cxlsim.units import parse_sizes

TARGETS = {"analytic": 1.0, "des": 20.0}
"""Wall-time targets per engine, seconds."""


def _scenario(directory: str, hosts: int, network: str, algorithm: str | None) -> str:
    path = os.path.join(directory, f"pods{hosts}.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"fabric:\n  preset: cxl-pods\n  pods: {{pool: cxl3-pool, hosts: {hosts}, network: {network}}}\n")
        if algorithm:
            fh.write(f"workload:\n  algorithm: {algorithm}\n")
    return path


def time_compare(nodes: int, hosts: int, network: str, engine: str, repeats: int, algorithm=None) -> list[float]:
    """Wall seconds of each of `repeats` runs of the comparison."""
    sizes = parse_sizes("1B:1MiB")
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        fabrics = [compare.parse_fabric(network), compare.parse_fabric(_scenario(tmp, hosts, network, algorithm))]
        for _ in range(repeats):
            pool_forms.clear_memo()  # every run cold, as one `cxlsim compare` process is
            start = time.perf_counter()
            compare.compare(fabrics, [nodes], {"workload.sizes": sizes, "workload.collective": "allgather"}, engine)
            walls.append(time.perf_counter() - start)
    return walls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--hosts", type=int, default=16, help="hosts per pod (default 16)")
    parser.add_argument("--network", default="eth-100g-roce")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pods-only", action="store_true", help="also time the DES with the pods algorithm everywhere")
    args = parser.parse_args()
    cases = [("analytic", None), ("des", None)] + ([("des", "pods")] if args.pods_only else [])
    print(f"# {args.nodes} nodes, {args.network} vs cxl-pods ({args.hosts} hosts/pod on cxl3-pool), "
          f"allgather 1 B-1 MiB (21 sizes); load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'engine':<10} {'hybrid algorithm':<18} {'runs':>4} {'min s':>8} {'max s':>8} {'target s':>9}")
    missed = False
    for engine, algorithm in cases:
        walls = time_compare(args.nodes, args.hosts, args.network, engine, args.repeats, algorithm)
        target = TARGETS[engine]
        missed |= min(walls) > target
        print(f"{engine:<10} {algorithm or 'auto':<18} {len(walls):>4} {min(walls):>8.3f} {max(walls):>8.3f} "
              f"{target:>9.1f}{'  MISSED' if min(walls) > target else ''}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
