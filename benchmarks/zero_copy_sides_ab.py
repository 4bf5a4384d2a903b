"""Zero-copy against copy + read at np 2, by per-call medians over interleaved blocks, per placement.

    python benchmarks/zero_copy_sides_ab.py [--sizes 32KiB,128KiB,256KiB] [--blocks 8] [--calls 20]
        [--collectives allgather alltoall broadcast] [--unvalidated]

The sides of pool_collectives_vs_mpi.py's zero-copy target ('zero-copy': the fused view call plus one
read pass in place; 'copy-read': the copy call plus one read pass over recvbuf), built and validated
as the benchmark builds them (`bench.AllgatherSide`, `bench_collectives.CollectiveSide`), timed in
blocks of --calls calls (after 3 warm-up calls) that take turns per size and collective. The two
ranks are pinned to CPUs 0 and 1, run as local processes (no MPI), and pick their copy-ins per block
as the benchmark does per round (`PoolComm.choose_copy_in`). A flag round-trip probe before each
block and after the last classes each block (`host.placement_of`: fast, slow, or mixed when the two
probes differ). Per placement and size it prints each side's median over the blocks of the two
ranks' mean per-block median (us), the ratio copy+read / zero-copy, its range over the blocks and
the number of blocks. Medians of single calls stand up to a loaded machine better than OSU's mean
(one descheduled call adds milliseconds to a mean of 50), so this is the cross-check of a loaded
pool_collectives_vs_mpi run; it does not replace the target's own command.
--unvalidated adds each side without validation: validation must not move the figures (it is
untimed, but its loads and stores change the caches the next call finds).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

from cxlsim.emulator.bench import AllgatherSide, time_calls
from cxlsim.emulator.bench_collectives import CollectiveSide
from cxlsim.emulator.host import placement_of, roundtrip_ns
from cxlsim.emulator.launch import run_local
from cxlsim.units import parse_sizes

SIDES = ("copy-read", "zero-copy")
WARMUP = 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="32KiB,128KiB,256KiB")
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per block, side, size and collective")
    parser.add_argument("--collectives", nargs="+", choices=("allgather", "alltoall", "broadcast"),
                        default=["allgather", "alltoall"])
    parser.add_argument("--unvalidated", action="store_true", help="also time each side without validation")
    args = parser.parse_args()
    sizes = tuple(parse_sizes(args.sizes))
    sides = [(s, True) for s in SIDES] + ([(s, False) for s in SIDES] if args.unvalidated else [])
    load = os.getloadavg()
    results = run_local(2, measure, (sizes, args.blocks, args.calls, args.collectives, sides),
                        slot_bytes=2 * max(sizes), timeout_s=600)
    print(f"# zero_copy_sides_ab: np 2, {args.blocks} blocks of {args.calls} calls per side, size and collective, "
          f"ranks pinned to CPUs 0 and 1; load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    print_tables(results, sizes, args.collectives, sides)
    return 0


def measure(comm, sizes, blocks, calls, collectives, sides):
    """One rank's per-call times: [(block, size, collective, side, validated, seconds array)], and the
    slower rank's probes before each block and after the last (ns)."""
    os.sched_setaffinity(0, {comm.rank % os.cpu_count()})
    out, probes = [], [roundtrip_ns(comm)]
    for b in range(blocks):
        comm.choose_copy_in()
        for n in sizes:
            for collective in collectives:
                for name, validated in sides:
                    side = (AllgatherSide(name, comm, None, n, validated) if collective == "allgather" else
                            CollectiveSide(collective, name, comm, None, n, validated))
                    times = time_calls(side.op, comm.barrier, WARMUP, calls, side.before, side.after)
                    out.append((b, n, collective, name, validated, times))
        probes.append(roundtrip_ns(comm))
    every = np.empty((comm.size, len(probes)))
    comm.allgather(np.array(probes), every)
    return out, every.max(axis=0).tolist()


def block_classes(probes: list[float]) -> list[str]:
    """Each block's placement: the class of its probes before and after when they agree, else mixed."""
    return [placement_of(a) if placement_of(a) == placement_of(b) else "mixed" for a, b in zip(probes, probes[1:])]


def print_tables(results, sizes, collectives, sides) -> None:
    """Per placement (fast, slow; 'not observed' without a block), per size and collective: each side's median
    over blocks of the ranks' mean block median, and copy+read / zero-copy with its per-block range."""
    probes = results[0][1]
    classes = block_classes(probes)
    print(f"# probes before each block and after the last (ns, the slower rank's): "
          f"{', '.join(f'{p:.0f}' for p in probes)}; blocks: {', '.join(classes)}")
    per_block = {}  # (block, size, collective, side, validated) -> the ranks' mean of their block medians (us)
    for b, n, collective, name, validated, _ in results[0][0]:
        key = (b, n, collective, name, validated)
        per_block[key] = statistics.fmean(
            float(np.median(times)) * 1e6 for rank in results
            for (rb, rn, rc, rs, rv, times) in rank[0] if (rb, rn, rc, rs, rv) == key)
    for placement in ("fast", "slow"):
        chosen = [b for b, c in enumerate(classes) if c == placement]
        if not chosen:
            print(f"\n## placement {placement}: not observed")
            continue
        print(f"\n## placement {placement}: {len(chosen)} blocks")
        for validated in sorted({v for _, v in sides}, reverse=True):
            print(f"# {'validated (as the benchmark)' if validated else 'unvalidated'}")
            print(f"{'size':>8} {'collective':>10} {'copy+read':>10} {'zero-copy':>10} {'c+r/zc':>7} {'range (blocks)':>18}")
            for n in sizes:
                for collective in collectives:
                    reads = [per_block[(b, n, collective, "copy-read", validated)] for b in chosen]
                    zcs = [per_block[(b, n, collective, "zero-copy", validated)] for b in chosen]
                    ratios = [r / z for r, z in zip(reads, zcs)]
                    read, zc = statistics.median(reads), statistics.median(zcs)
                    print(f"{n:>8} {collective:>10} {read:10.2f} {zc:10.2f} {read / zc:7.2f} "
                          f"{min(ratios):8.2f}-{max(ratios):<5.2f} ({len(ratios)})")


if __name__ == "__main__":
    sys.exit(main())
