"""libcxlsim_mpi.so against MPICH's own collectives: an OSU-style C loop, np=2, both coherence modes.

    python benchmarks/mpi_interpose.py [--rounds 3] [--blocks 5] [--sizes 1B:1MiB] [--python-harness] [--modes hw flush]
                                       [--set CXLSIM_MPI_ALLREDUCE_LARGE=0]

Builds the library (cxlsim mpi build) and a C program with mpicc. The program times
MPI_Allgather (MPI_CHAR, as osu_allgather) and MPI_Allreduce (MPI_FLOAT sum, from 4 B, as
osu_allreduce) through the library, i.e. on the pool, and the same calls as PMPI_* (MPICH's
own, which the library does not intercept), in the same job: OSU's loop (warm-up, barrier, timed
iterations; the per-rank mean, averaged over ranks), split per size into --blocks blocks (default 5:
200 calls a block up to 8 KiB, 20 above) that the two sides run by turns, alternating which goes first.
Each round runs one job per coherence mode (hw, then flush), so the machine's drift hits both sides
alike. The target is judged on the median over the placement's block pairs of MPI block / pool block
(MPI time / pool time: above 1 the pool is faster): a pair is two neighbouring stretches of time, and
one descheduled call (milliseconds against a 0.1 us call) moves one block's mean and the pairs'
median by at most one place, while it can halve a whole loop's mean (session 27, quiet: 512 B
allreduce 0.23x on the loops' means, 2.94x per call). The table also gives the median over rounds of
each side's OSU mean and their ratio (`of means`, the statistic through session 26), and each side's
per-call median (1000 more calls, each timed alone, after the blocks, less the clock's own cost) and
its ratio. Results are validated against MPICH's
outside the timed spans. Each job also reports the pool barrier (ns per call) and, in hw mode,
the flag round trip the library's pool set-up probed (it picks the copy-in stores by it),
which tells this machine's fast host placement (< 200 ns) from its slow one (200 ns-2 us); a
probe above 2 us (the best of 3 x 100 round trips, in each of the library's up to 5 tries: the
ranks were descheduled through all of them; the library then keeps plain copy-ins) marks a
disturbed round, tabled apart and not counted as either placement. Before and after each size the
program times a flag round trip of its own (the probe's rule, on an MPI shared-memory window): in
the fast and slow tables a round counts for a row only where both show the round's placement (the
host moves the ranks within a job on a loaded machine); the `rounds` column says how many did, and
`probe ns` the range of those rounds' round trips before and after the row (the bucket within the
placement: the small calls' time follows the round trip within a class, so a miss can be read against it).
Targets (issue 15): pool >= 2x MPI up to 4 KiB, >= 1x at every size.
With --python-harness it also runs `cxlsim bench allgather` (the Python harness's pool) in
each mode and prints its per-call time beside the C loop's.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from cxlsim.coherence import Coherence
from cxlsim.emulator.cli import find_mpiexec
from cxlsim.emulator.host import DISTURBED_ROUNDTRIP_NS, SLOW_ROUNDTRIP_NS, placement_of as host_placement
from cxlsim.mpi.build import build, find_mpicc
from cxlsim.mpi.settings import check_environment
from cxlsim.units import format_size, parse_sizes

PROGRAM = r"""
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*gather_fn)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);
typedef int (*reduce_fn)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);

static int rank, size;

/* A flag round trip (ns) on an MPI shared-memory window, as the library's set-up probe times one on
 * its pool (the best of 3 x 100 after 50): before and after each size, so a row the host measured
 * in another placement than the job's probe (the host moves the ranks) is known. On rank 0. */
static volatile uint64_t *ping_flags; /* rank r's flag at ping_flags[16 * r]: a line each */
static uint64_t ping_count;
static double roundtrips(int n)
{
    PMPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < n; i++) {
        uint64_t k = ++ping_count;
        if (rank == 0) {
            __atomic_store_n(&ping_flags[0], k, __ATOMIC_RELEASE);
            while (__atomic_load_n(&ping_flags[16], __ATOMIC_ACQUIRE) < k) __builtin_ia32_pause();
        } else {
            while (__atomic_load_n(&ping_flags[0], __ATOMIC_ACQUIRE) < k) __builtin_ia32_pause();
            __atomic_store_n(&ping_flags[16], k, __ATOMIC_RELEASE);
        }
    }
    return (MPI_Wtime() - t0) / n * 1e9;
}
static double probe_roundtrip(void)
{
    roundtrips(50);
    double best = roundtrips(100);
    for (int i = 0; i < 2; i++) {
        double t = roundtrips(100);
        if (t < best) best = t;
    }
    return best;
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

/* Seconds between two back-to-back MPI_Wtime reads (the median of 1000): what timing one call adds
 * to it, taken off each per-call time. */
static double clock_cost;
static void measure_clock_cost(void)
{
    double each[1000];
    for (int i = 0; i < 1000; i++) {
        double c0 = MPI_Wtime();
        each[i] = MPI_Wtime() - c0;
    }
    qsort(each, 1000, sizeof(double), cmpd);
    clock_cost = each[500];
}

static void call_once(int kind, void *fn, char *s, char *r, int n)
{
    if (kind == 0) ((gather_fn)fn)(s, n, MPI_CHAR, r, n, MPI_CHAR, MPI_COMM_WORLD);
    else ((reduce_fn)fn)(s, r, n / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* OSU's figure for one block: the mean seconds per call of `iters` calls after `warm` warm-up calls and a
 * barrier, averaged over ranks. The calls are not timed one by one, so the clock reads do not add to it. */
static double osu_block(int kind, void *fn, char *s, char *r, int n, int iters, int warm)
{
    double t0 = 0, sum;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) { PMPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
        call_once(kind, fn, s, r, n);
    }
    double t = (MPI_Wtime() - t0) / iters;
    PMPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / size;
}

/* The median call's seconds over up to 1000 calls, each timed alone, less the clock's own cost, averaged
 * over ranks: the figure a descheduled rank (a loaded machine) moves least. */
static double per_call_median(int kind, void *fn, char *s, char *r, int n, int calls)
{
    double each[1000], med, sum;
    int timed = calls < 1000 ? calls : 1000;
    for (int i = 0; i < timed; i++) {
        double c0 = MPI_Wtime();
        call_once(kind, fn, s, r, n);
        each[i] = MPI_Wtime() - c0;
    }
    qsort(each, timed, sizeof(double), cmpd);
    med = each[timed / 2] - clock_cost;
    PMPI_Allreduce(&med, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / size;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Win win;
    void *mine;
    MPI_Aint bytes_at;
    int unit;
    MPI_Win_allocate_shared(rank == 0 ? 256 : 0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mine, &win);
    MPI_Win_shared_query(win, 0, &bytes_at, &unit, (void *)&ping_flags);
    if (rank == 0) memset((void *)ping_flags, 0, 256);
    PMPI_Barrier(MPI_COMM_WORLD);
    long max = atol(argv[1]);
    int small_iters = atoi(argv[2]), large_iters = atoi(argv[3]), blocks = atoi(argv[4]), failures = 0;
    char *s = malloc(max * size), *r = malloc(max * size), *w = malloc(max * size);
    measure_clock_cost();
    if (rank == 0) printf("CLOCK %.1f\n", clock_cost * 1e9);
    for (int i = 0; i < 200; i++) MPI_Barrier(MPI_COMM_WORLD); /* sets the pool up, outside the timing */
    double t0 = MPI_Wtime(); /* the pool barrier: one flag round trip at np = 2 */
    for (int i = 0; i < 2000; i++) MPI_Barrier(MPI_COMM_WORLD);
    double barrier = (MPI_Wtime() - t0) / 2000;
    if (rank == 0) printf("BARRIER %.1f\n", barrier * 1e9);
    for (int arg = 5; arg < argc; arg++) {
        long n = atol(argv[arg]);
        int iters = n <= 8192 ? small_iters : large_iters;
        double before = probe_roundtrip(), after;
        for (int kind = 0; kind < 2; kind++) {
            if (kind == 1 && n < 4) continue;
            for (long i = 0; i < n * size; i++) s[i] = (char)(kind ? 0 : (rank * 31 + i) & 0x7f);
            if (kind) for (long i = 0; i < n / 4; i++) ((float *)s)[i] = (float)(rank + i % 7);
            void *pool = kind ? (void *)MPI_Allreduce : (void *)MPI_Allgather;
            void *mpi = kind ? (void *)PMPI_Allreduce : (void *)PMPI_Allgather;
            /* the OSU loop in `blocks` blocks, the two sides by turns (which goes first alternates): a pair of
             * neighbouring blocks meets the same machine state */
            double tp = 0, tm = 0, bp[64], bm[64];
            int each = iters / blocks > 0 ? iters / blocks : 1, bwarm = each / 5 > 2 ? each / 5 : 2;
            for (int b = 0; b < blocks; b++) {
                if ((arg + b) % 2) { bp[b] = osu_block(kind, pool, s, r, n, each, bwarm); bm[b] = osu_block(kind, mpi, s, w, n, each, bwarm); }
                else { bm[b] = osu_block(kind, mpi, s, w, n, each, bwarm); bp[b] = osu_block(kind, pool, s, r, n, each, bwarm); }
                tp += bp[b] / blocks;
                tm += bm[b] / blocks;
            }
            double mp = per_call_median(kind, pool, s, r, n, iters), mm = per_call_median(kind, mpi, s, w, n, iters);
            long bytes = kind ? (n / 4) * 4 : n * size;
            if (memcmp(r, w, bytes)) failures++;
            after = probe_roundtrip();
            if (rank == 0) {
                printf("RESULT %s %ld %.4f %.4f %.4f %.4f %.0f %.0f\n", kind ? "allreduce" : "allgather", n,
                       tp * 1e6, tm * 1e6, mp * 1e6, mm * 1e6, before, after);
                printf("BLOCKS %s %ld", kind ? "allreduce" : "allgather", n);
                for (int b = 0; b < blocks; b++) printf(" %.4f/%.4f", bp[b] * 1e6, bm[b] * 1e6);
                printf("\n");
            }
            before = after;
        }
    }
    int all;
    PMPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all) printf("VALIDATION FAILED %d\n", all);
    MPI_Win_free(&win);
    MPI_Finalize();
    return all ? 1 : 0;
}
"""
MODES = Coherence.names()


def run_job(exe: str, library: str, mode: str, sizes: list[int], small: int, large: int, blocks: int,
            settings: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CXLSIM_MPI_")}
    env.update(CXLSIM_MPI_VERBOSE="2")  # the pool set-up's placement probe (hw, np 2) reports its round trip
    env.update(settings, LD_PRELOAD=library, CXLSIM_MPI_COHERENCE=mode)
    cmd = [find_mpiexec(), "-n", "2", exe, str(max(sizes)), str(small), str(large), str(blocks), *map(str, sizes)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{mode}: the job failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    probe = re.search(r"cxlsim-mpi\[0\]: pool placement probe: flag round trip (\S+) ns", done.stderr)
    out = {"barrier_ns": float(re.search(r"BARRIER (\S+)", done.stdout).group(1)), "rows": {},
           "clock_ns": float(re.search(r"CLOCK (\S+)", done.stdout).group(1)),
           "roundtrip_ns": float(probe.group(1)) if probe else None, "row_placements": {}, "row_probes": {},
           "blocks": {}}
    for kind, n, tp, tm, mp, mm, before, after in re.findall(r"RESULT (\w+) (\d+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)",
                                                            done.stdout):
        out["rows"][(kind, int(n))] = (float(tp), float(tm), float(mp), float(mm))
        out["row_placements"][(kind, int(n))] = (placement_of(float(before)), placement_of(float(after)))
        out["row_probes"][(kind, int(n))] = (float(before), float(after))
    for kind, n, pairs in re.findall(r"BLOCKS (\w+) (\d+) (.*)", done.stdout):
        out["blocks"][(kind, int(n))] = [tuple(map(float, pair.split("/"))) for pair in pairs.split()]
    return out


def block_pair_ratios(jobs: list[dict], key: tuple) -> list[float]:
    """MPI block / the pool block beside it (OSU's mean of each), for every block pair of the given jobs' row."""
    return [mpi / pool for job in jobs for pool, mpi in job["blocks"][key] if pool > 0]


def python_harness(mode: str, sizes: list[int]) -> dict[int, float]:
    """Avg latency (us) per size of `cxlsim bench allgather` (the Python harness's pool), copy mode."""
    cmd = [sys.executable, "-m", "cxlsim", "bench", "allgather", "--np", "2", "--coherence", mode,
           "--sizes", ",".join(map(str, sizes))]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"cxlsim bench allgather failed:\n{done.stderr}")
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^(\d+)\s+(\S+)", done.stdout, re.M)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1B:1MiB")
    parser.add_argument("--iterations", type=int, nargs=2, default=(1000, 100), metavar=("SMALL", "LARGE"),
                        help="timed iterations up to 8 KiB and above (OMB's: 1000 and 100)")
    parser.add_argument("--blocks", type=int, default=5,
                        help="OSU's loop per size in this many blocks, the two sides by turns (1-64; default 5)")
    parser.add_argument("--python-harness", action="store_true")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--set", action="append", default=[], metavar="CXLSIM_MPI_NAME=VALUE",
                        help="a library setting for every job, e.g. CXLSIM_MPI_ALLREDUCE_LARGE=0")
    parser.add_argument("--library", help="this build of libcxlsim_mpi.so instead of `cxlsim mpi build`'s (an A/B "
                                          "of two builds, run by turns)")
    args = parser.parse_args()
    if not 1 <= args.blocks <= 64:
        parser.error(f"--blocks: expected 1-64, got {args.blocks}")
    if min(args.iterations) < args.blocks:
        parser.error(f"--iterations: each must be at least --blocks ({args.blocks}), got {args.iterations}")
    settings = dict(item.split("=", 1) for item in args.set)
    check_environment(settings)
    modes = tuple(args.modes)
    sizes = parse_sizes(args.sizes)
    library = args.library or str(build())
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "osu_loop")
        src = exe + ".c"
        with open(src, "w") as f:
            f.write(PROGRAM)
        subprocess.run([find_mpicc(), "-O2", src, "-o", exe], check=True)
        jobs = {mode: [] for mode in modes}
        for _ in range(args.rounds):
            for mode in modes:
                jobs[mode].append(run_job(exe, library, mode, sizes, *args.iterations, args.blocks, settings))
    print(f"# libcxlsim_mpi vs MPICH (PMPI), np=2, OSU loop; per placement, the median over its rounds "
          f"of each side; ratio = MPI time / pool time (> 1: the pool is faster). Load average at the end: "
          f"{open('/proc/loadavg').read().split()[0]} (the machine may be shared)."
          + (f" Settings: {settings}" if settings else ""))
    for mode in modes:
        barriers = ", ".join(f"{j['barrier_ns']:.0f}" for j in jobs[mode])
        clocks = ", ".join(f"{j['clock_ns']:.0f}" for j in jobs[mode])
        print(f"# {mode}: pool barrier {barriers} ns per call, by round; per-call medians less the clock's own "
              f"{clocks} ns")
    placements = [placement_of(j["roundtrip_ns"]) for j in jobs[modes[0]]]
    if modes[0] == Coherence.HW.value:
        print("# hw set-up probe, flag round trip by round: "
              + ", ".join(f"{j['roundtrip_ns']:.0f} ns ({p})" for j, p in zip(jobs[modes[0]], placements))
              + f" (fast up to {SLOW_ROUNDTRIP_NS:.0f} ns, slow up to {DISTURBED_ROUNDTRIP_NS:.0f} ns, disturbed above; "
              f"above {SLOW_ROUNDTRIP_NS:.0f} ns the library copies in with non-temporal stores); each round's "
              f"flush job is counted in its hw job's placement")
    harness = {mode: python_harness(mode, sizes) for mode in modes} if args.python_harness else {}
    for placement in ("fast", "slow", "disturbed", "not probed"):
        rounds = [i for i, p in enumerate(placements) if p == placement]
        if not rounds:
            if placement in ("fast", "slow"):
                print(f"\n## {placement} placement: not observed")
            continue
        title = ("disturbed rounds (probe above 2 us: no placement; the ranks lost their CPUs)"
                 if placement == "disturbed" else f"{placement} placement")
        print(f"\n## {title}: {len(rounds)} of {args.rounds} rounds")
        print_table({m: [jobs[m][i] for i in rounds] for m in modes}, modes, sizes, harness, placement)
    return 0


def placement_of(roundtrip_ns: float | None) -> str:
    """The host placement a probed flag round trip shows (host.placement_of), or 'not probed'."""
    return "not probed" if roundtrip_ns is None else host_placement(roundtrip_ns)


def print_table(jobs: dict, modes: tuple, sizes: list[int], harness: dict, placement: str) -> None:
    """One row per collective and size: per mode the median over rounds of the pool and MPI times (OSU's mean
    per call); the ratio the target is judged on, the median over the rows' block pairs of MPI block / pool block
    (`pairs (k)`: its range over k pairs); the ratio of the two medians over rounds (`of means`, the statistic
    through session 26); then the same of the per-call medians (less moved by load). In the
    fast and slow tables a round counts for a row only if the flag round trips before and after the row show
    the table's placement (`rounds`: those counted of the table's); a row no round kept is "not observed".
    `probe ns`: the least and the largest of those round trips over the rounds counted, the bucket within
    the placement the ratio was measured in (within the fast class the call time follows it)."""
    print(f"{'collective':<10} {'size':>8} " + " ".join(
        f"{m + ' pool us':>13} {m + ' MPI us':>12} {m + ' ratio':>9} {'pairs (k)':>17} {m + ' target':>10} "
        f"{'of means':>8} {'per-call: pool':>14} {'MPI':>6} {'ratio':>6} {'rounds':>6} {'probe ns':>9}" for m in modes)
        + ("  " + " ".join(f"{m + ' py pool us':>14}" for m in modes) if harness else ""))
    for kind in ("allgather", "allreduce"):
        for n in sizes:
            if (kind, n) not in jobs[modes[0]][0]["rows"]:
                continue
            cells = []
            for mode in modes:
                kept = [j for j in jobs[mode] if placement not in ("fast", "slow")
                        or j["row_placements"][(kind, n)] == (placement, placement)]
                counted = f"{len(kept)}/{len(jobs[mode])}"
                if not kept:
                    cells.append(f"{'not observed (the host moved the ranks)':>113} {counted:>6} {'-':>9}")
                    continue
                probes = [t for j in kept for t in j["row_probes"][(kind, n)]]
                bucket = f"{min(probes):.0f}-{max(probes):.0f}"
                pool = statistics.median(j["rows"][(kind, n)][0] for j in kept)
                mpi = statistics.median(j["rows"][(kind, n)][1] for j in kept)
                of_means = mpi / pool if pool > 0 else float("inf")
                pairs = block_pair_ratios(kept, (kind, n))
                ratio = statistics.median(pairs) if pairs else float("nan")
                spread = f"{min(pairs):.2f}-{max(pairs):.2f} ({len(pairs)})" if pairs else "-"
                need = 2.0 if n <= 4096 else 1.0
                pool_call = statistics.median(j["rows"][(kind, n)][2] for j in kept)
                mpi_call = statistics.median(j["rows"][(kind, n)][3] for j in kept)
                cells.append(f"{pool:13.2f} {mpi:12.2f} {ratio:9.2f} {spread:>17} {'met' if ratio >= need else 'MISS':>10} "
                             f"{of_means:8.2f} {pool_call:14.2f} {mpi_call:6.2f} "
                             f"{mpi_call / pool_call if pool_call > 0 else float('inf'):6.2f} {counted:>6} {bucket:>9}")
            extra = ""
            if harness and kind == "allgather":
                extra = "  " + " ".join(f"{harness[m].get(n, float('nan')):14.2f}" for m in modes)
            print(f"{kind:<10} {format_size(n):>8} " + " ".join(cells) + extra)


if __name__ == "__main__":
    sys.exit(main())
