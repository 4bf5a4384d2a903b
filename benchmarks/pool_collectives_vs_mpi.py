"""Issue 14's np=2 target: every pool collective against its MPI call, in one run, on the same ranks.

    python benchmarks/pool_collectives_vs_mpi.py [--rounds 1] [--sizes 1B:1MiB] [--iterations 200]
        [--collectives allreduce broadcast ...] [--coherence hw]

Relaunches itself under the mpich wheel's mpiexec at np 2. Inside the job, per round, per
collective and per size, it times the pool collective and the MPI call (mpi4py buffer API)
with the same OSU loop (`cxlsim.emulator.bench.run_plan`, contents validated every
iteration), one right after the other, so the machine's drift hits both. Reductions are
MPI_FLOAT sums from 4 B (osu_allreduce's start; reduce_scatter from one float per rank).
The host placement is told by the hw flag round trip on the run's own pool, probed before
the first round and after each (below 200 ns: the fast placement, as calibration_error.py's threshold;
above: the slow placement; from 2000 ns, 4x the slow one's, disturbed: a rank waited for a CPU).
The placement of this machine changes within seconds, so each round is classed by the probes
around it (fast, slow, disturbed, or mixed when they differ) and every class seen gets its own
tables and targets. Per collective it
prints the medians over that placement's rounds and the ratio MPI time / pool time per size
(beside it the per-round ratios' range and how many rounds fed it), and the targets: >= 1x at every size from 1 B to
1 MiB, >= 2x up to 4 KiB (the calls alone, as OSU times them). Allgather, broadcast and alltoall also time what a caller that uses the
result does: the fused zero-copy call (the kernel puts the data in) plus one read pass over
the result in place, and the copy call plus one read pass over its result in recvbuf
("copy+read"; a broadcast's root reads nothing in either); target: zero-copy at least as
fast as copy+read from 8 KiB (copy/zc, the call alone against zero-copy, is printed too).
Those two sides take turns in blocks of --zc-block calls (ABAB..., --iterations calls a side per
size and round, each block after 2 untimed calls of its own, the first after --warmup), so both
see the same moments of the machine; a block's figure is OSU's, the ranks' mean of their mean
call. The verdict's statistic is the median over the placement's block pairs of copy+read block
/ the zero-copy block right after it: a pair compares two adjacent stretches of time, and the
median is not moved by one disturbed block (a descheduled call adds milliseconds to a block's
mean). Beside it: that statistic's range over the pairs and their count, and the ratio of the two
sides' medians over rounds of their round means, the statistic of separate loops.
A placement not seen in the run is "not observed".
The pool's copy-ins are chosen per round by `PoolComm.choose_copy_in` (non-temporal stores
from 2 KiB in the slow placement, plain in the fast one; `--copy-in plain|nt` forces one, to
measure the cause). MPICH settings pass through the environment, e.g.
MPIR_CVAR_CH4_CMA_ENABLE=0 (no CMA single copy) to test a cause.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

import numpy as np

from cxlsim.coherence import Coherence
from cxlsim.emulator.comm import NT_SLOW_MIN_BYTES  # --copy-in nt: as PoolComm.choose_copy_in picks when slow
from cxlsim.emulator.host import DISTURBED_ROUNDTRIP_NS, SLOW_ROUNDTRIP_NS, placement_of

COLLECTIVES = ("allgather", "allreduce", "reduce_scatter", "broadcast", "alltoall", "barrier")
ZERO_COPY_COLLECTIVES = ("allgather", "broadcast", "alltoall")
ZERO_COPY_FROM = 8192  # the target: zero-copy at least as fast as copy mode from 8 KiB
ZC_SIDES = ("copy-read", "zero-copy")  # the zero-copy comparison's sides, in their turn order within a pair
ZC_BLOCK_WARMUP = 2  # untimed calls of a side before each of its blocks after the first (the other side ran)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sizes", default="1B:1MiB")
    parser.add_argument("--iterations", type=int, default=200, help="timed iterations per size and side")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--zc-block", type=int, default=10,
                        help="timed calls per block of the zero-copy comparison's interleaved sides")
    parser.add_argument("--collectives", nargs="+", choices=COLLECTIVES, default=list(COLLECTIVES))
    parser.add_argument("--coherence", choices=Coherence.names(), default=Coherence.HW.value)
    parser.add_argument("--copy-in", choices=("auto", "plain", "nt"), default="auto",
                        help="stores of the pool's copy-ins: auto = PoolComm.choose_copy_in per round (non-temporal "
                             "in the slow placement), plain, or nt (non-temporal from 2 KiB)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.zc_block < 1 or args.iterations < 1 or args.warmup < 0:
        parser.error("--zc-block and --iterations must be >= 1, --warmup >= 0")
    if args.inside:
        return inside_mpi(args)
    from cxlsim.emulator.cli import find_mpiexec

    command = [find_mpiexec(), "-n", "2", sys.executable, os.path.abspath(__file__), "--inside", *sys.argv[1:]]
    return subprocess.run(command).returncode


def sizes_for(collective: str, sizes: tuple[int, ...], nranks: int) -> tuple[int, ...]:
    """The sizes the collective's OSU loop runs: reductions in whole floats (reduce_scatter: one per rank)."""
    if collective == "barrier":
        return (0,)
    if collective == "allreduce":
        return tuple(n for n in sizes if n >= 4 and n % 4 == 0)
    if collective == "reduce_scatter":
        return tuple(n for n in sizes if n >= 4 * nranks and n % (4 * nranks) == 0)
    return sizes


def inside_mpi(args) -> int:
    from cxlsim.emulator.launch import run_mpi
    from cxlsim.units import parse_sizes

    sizes = tuple(parse_sizes(args.sizes))
    return run_mpi(_measure, (sizes, args), slot_bytes=2 * max(sizes), coherence=args.coherence, timeout_s=120.0)


def _measure(comm, world, sizes, args):
    from cxlsim.emulator.bench import BenchPlan, run_plan
    from cxlsim.emulator.host import roundtrip_ns

    probe = comm.coherence is Coherence.HW
    roundtrips = [roundtrip_ns(comm)] if probe else []
    samples: dict[tuple[str, str, int], list[float]] = {}
    copy_ins = []
    for _ in range(args.rounds):
        if args.copy_in == "auto":
            copy_ins.append(comm.choose_copy_in()["nt_min_bytes"])
        else:
            comm.nt_min_bytes = NT_SLOW_MIN_BYTES if args.copy_in == "nt" else 0
            copy_ins.append(comm.nt_min_bytes)
        for collective in args.collectives:
            for n in sizes_for(collective, sizes, world.size):
                plan = BenchPlan(sizes=(n,), sides=("copy", "mpi"), iterations=args.iterations, warmup=args.warmup,
                                 validate=True, collective=collective)
                for row in run_plan(comm, plan, mpi=world):
                    samples.setdefault((collective, row["side"], n), []).append(row["avg_us"])
                if collective in ZERO_COPY_COLLECTIVES:
                    for side, blocks in interleaved_blocks(comm, collective, n, args).items():
                        samples.setdefault((collective, side, n), []).append(blocks)
        if probe:
            roundtrips.append(roundtrip_ns(comm))
    if world.rank != 0:
        return 0
    load = os.getloadavg()
    cma = os.environ.get("MPIR_CVAR_CH4_CMA_ENABLE")
    print(f"# pool_collectives_vs_mpi: np {world.size}, coherence {args.coherence}, rounds {args.rounds}, "
          + (f"MPIR_CVAR_CH4_CMA_ENABLE={cma}, " if cma is not None else "")
          + f"{args.iterations} iterations per size, medians in us; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"# copy-ins into the pool (--copy-in {args.copy_in}), per round: "
          + ", ".join(f"non-temporal from {n} B" if n else "plain" for n in copy_ins))
    print(f"# hw flag round trips before the first round and after each: "
          f"{', '.join(f'{r:.0f}' for r in roundtrips) or '-'} ns (fast up to {SLOW_ROUNDTRIP_NS:.0f} ns, "
          f"disturbed above {DISTURBED_ROUNDTRIP_NS:.0f} ns, slow between)")
    cpus = len(os.sched_getaffinity(0))
    if load[0] > cpus:
        print(f"# loaded: load average {load[0]:.1f} above this host's {cpus} CPUs, so other jobs took CPU time "
              f"from the ranks during the run (one descheduled iteration adds milliseconds to a mean of "
              f"{args.iterations}); a ratio below its target with a wide per-round range is that, not the pool")
    groups = placement_groups(roundtrips, args.rounds)
    for name in ("fast", "slow"):
        if name not in groups:
            print(f"# {name} placement: not observed")
    for name, rounds in groups.items():
        report(name, rounds, samples, sizes, world.size, args.collectives)
    return 0


def interleaved_blocks(comm, collective: str, n: int, args) -> dict[str, list[float]]:
    """The zero-copy comparison's sides at n bytes in one round: per side, its block figures (us: the ranks'
    mean of each rank's mean call over the block), the blocks taking turns copy+read, zero-copy, copy+read, ...
    (`time_calls`: OSU's loop, validated; each side's fill pattern runs on over its blocks)."""
    from cxlsim.emulator.bench import AllgatherSide, time_calls
    from cxlsim.emulator.bench_collectives import CollectiveSide

    sides = {name: (AllgatherSide(name, comm, None, n, True) if collective == "allgather" else
                    CollectiveSide(collective, name, comm, None, n, True)) for name in ZC_SIDES}
    calls = [min(args.zc_block, args.iterations - start) for start in range(0, args.iterations, args.zc_block)]
    means = {name: [] for name in ZC_SIDES}
    done = {name: 0 for name in ZC_SIDES}  # calls made so far per side, so each call's contents differ
    for k, count in enumerate(calls):
        for name, side in sides.items():
            warmup = args.warmup if k == 0 else ZC_BLOCK_WARMUP
            base = done[name]
            before = None if side.before is None else (lambda i, b=base, f=side.before: f(b + i))
            after = None if side.after is None else (lambda i, b=base, f=side.after: f(b + i))
            means[name].append(float(time_calls(side.op, comm.barrier, warmup, count, before, after).mean()))
            done[name] += warmup + count
    out = {}
    for name in ZC_SIDES:
        mine = np.array(means[name])
        every = np.empty((comm.size, mine.size))
        comm.allgather(mine, every)
        out[name] = (every.mean(axis=0) * 1e6).tolist()
    return out


def round_mean(blocks: list[float]) -> float:
    """A round's figure of one interleaved side: the mean over its blocks (us; equal blocks of calls, so OSU's mean)."""
    return statistics.fmean(blocks)


def block_pair_ratios(reads: list[list[float]], zcs: list[list[float]]) -> list[float]:
    """copy+read block / the zero-copy block right after it, for every pair of the given rounds, in order."""
    return [r / z for read, zc in zip(reads, zcs) for r, z in zip(read, zc) if z > 0]


def placement_groups(roundtrips: list[float], rounds: int) -> dict[str, list[int]]:
    """Round indices per placement: a round is fast (slow, disturbed) when the probes before and after
    it are both of that class (`placement_of`), mixed when they differ (the placement changed
    during the round or a probe was disturbed); without probes (flush mode) every round is 'not probed'."""
    if not roundtrips:
        return {"not probed (flush mode)": list(range(rounds))}
    groups: dict[str, list[int]] = {}
    for k in range(rounds):
        classes = {placement_of(r) for r in roundtrips[k:k + 2]}
        name = classes.pop() if len(classes) == 1 else "mixed (the probes around the round differ)"
        groups.setdefault(name, []).append(k)
    return groups


def spread_text(per_round: list[float]) -> str:
    """A per-round ratio range with the number of rounds that fed it: 'min-max (k)'."""
    return f"{min(per_round):.2f}-{max(per_round):.2f} ({len(per_round)})"


def miss(what: str, ratio: float, target: float, rule: str, per_round: list[float], unit: str = "rounds") -> str:
    """A missed target with its spread over `unit` (rounds, or block pairs): whether the target lies inside
    their range (some met it: the miss is within the run's spread) or outside it (every one missed)."""
    if not per_round:
        return f"{what}: no {unit} measured ({rule})"
    met = sum(r >= target for r in per_round)
    one = {"rounds": "round", "block pairs": "block pair"}.get(unit, unit)
    where = (f"{target:g}x inside the spread, {met} of {len(per_round)} {unit} at or above it" if met else
             f"outside the spread, every {one} below {target:g}x")
    return (f"{what}: {ratio:.2f}x ({rule}); per {one} {min(per_round):.2f}-{max(per_round):.2f} over "
            f"{len(per_round)} {unit}: {where}")


def report(placement: str, rounds: list[int], samples, sizes, nranks: int, collectives) -> None:
    """The tables and the targets over the given rounds (those of one placement). Each ratio is the ratio of
    the medians over the rounds; beside it, the per-round ratios' range and (in brackets) how many rounds fed it."""
    print(f"\n## placement: {placement}, rounds {', '.join(str(k + 1) for k in rounds)} "
          f"(medians over these rounds; range (k): the per-round ratios' range over k rounds)")
    misses = []
    for collective in collectives:
        zero_copy = collective in ZERO_COPY_COLLECTIVES
        print(f"\n# {collective}" + ("; zero-copy: the fused view call plus one read pass in place; copy+read: the "
                                     "copy call plus one read pass over recvbuf, in interleaved blocks; c+r/zc: the "
                                     "median over block pairs (the verdict), pairs (k): its range over k pairs; "
                                     "rounds: the ratio of the sides' medians over rounds" if zero_copy else ""))
        print(f"{'size':>8} {'pool':>10} {'MPI':>10} {'MPI/pool':>9} {'range (k)':>17}"
              + (f" {'zero-copy':>10} {'MPI/zc':>7} {'copy/zc':>8} {'copy+read':>10} {'c+r/zc':>7} {'pairs (k)':>17}"
                 f" {'rounds':>7}" if zero_copy else ""))
        for n in sizes_for(collective, sizes, nranks):
            of = {side: [samples[(collective, side, n)][k] for k in rounds]
                  for side in (("copy", "mpi", "zero-copy", "copy-read") if zero_copy else ("copy", "mpi"))}
            pools, mpis = of["copy"], of["mpi"]
            pool, mpi = statistics.median(pools), statistics.median(mpis)
            ratio = mpi / pool if pool > 0 else float("nan")
            per_round = [m / p for m, p in zip(mpis, pools) if p > 0]
            line = f"{n:>8} {pool:10.2f} {mpi:10.2f} {ratio:9.2f} {spread_text(per_round):>17}"
            if ratio < 1.0:
                misses.append(miss(f"{collective} {n} B", ratio, 1.0, "below 1x", per_round))
            elif n <= 4096 and ratio < 2.0:
                misses.append(miss(f"{collective} {n} B", ratio, 2.0, "below 2x up to 4 KiB", per_round))
            if zero_copy:
                zc_blocks, read_blocks = of["zero-copy"], of["copy-read"]
                zc = statistics.median(round_mean(b) for b in zc_blocks)
                read = statistics.median(round_mean(b) for b in read_blocks)
                pairs = block_pair_ratios(read_blocks, zc_blocks)
                pair_median = statistics.median(pairs) if pairs else float("nan")
                line += (f" {zc:10.2f} {mpi / zc:7.2f} {pool / zc:8.2f} {read:10.2f} {pair_median:7.2f} "
                         f"{spread_text(pairs):>17} {read / zc:7.2f}")
                if n >= ZERO_COPY_FROM and not pair_median >= 1.0:
                    misses.append(miss(f"{collective} zero-copy {n} B", pair_median, 1.0,
                                       "copy+read / zero-copy, the median over block pairs, below 1x from 8 KiB",
                                       pairs, "block pairs"))
            print(line)
    print(f"\n# targets in this placement ({placement}): " +
          ("all met" if not misses else f"{len(misses)} missed:\n#   " + "\n#   ".join(misses)))


if __name__ == "__main__":
    sys.exit(main())
