"""Wall-time validation of a library trace: does `cxlsim replay` predict a local MPI run's measured time?

    python benchmarks/replay_validate.py [--np 2 3] [--runs 5] [--apps c py coll] [--pool-profile LOCAL.json]
                                         [--out FILE.json]

1. Fit this machine's MPI point-to-point: an OSU-style ping-pong (osu_latency) and window
   (osu_bw) loop in C (replay_validate_src/osu_pingpong.c), under MPICH at np=2 without the library, written as OSU files and
   fitted to LogGP per protocol regime by `cxlsim calibrate --from-osu`, which writes a
   network calibration profile.
2. Per run, interleaved over the apps and rank counts: the halo program (`c`:
   tests/data/traces/src/halo_timed.c, or `py`: halo_timed.py in mpi4py; 20 iterations of a 1-D
   exchange of 32 KiB with both neighbours and an 8-byte allreduce), or `coll`, a
   collective-bound loop (replay_validate_src/coll_timed.c: 200 iterations of a little work, an allreduce of 64 KiB
   and one of 8 B, an allgather and a bcast of 4 KiB: its MPI time is the pool's), under
   `cxlsim mpi run --stats --trace DIR`; the program prints its wall time from its first
   barrier's end to its last barrier's end (rank 0), the library its stats (which collectives
   ran on its pool) on stderr. The library runs with the local-host profile's allreduce threshold
   (CXLSIM_PROFILE names the profile, as a calibrated user would run it; the default 64 KiB where the
   profile has none), so its 64 KiB allreduce runs the algorithm the profile measured faster.
3. Each trace is replayed twice (`cxlsim.replay.fabrics`): on the network profile alone
   (`--fabric profile.json`: the LogGP regime of the trace's typical message, the 32 KiB halo,
   as NIC and link figures on a star, switch latency 0, so a message costs o + k*G + L + o, the
   fit's line; the collectives as MPICH's algorithms over those messages), and as the run went
   (`--fabric profile.json+LOCAL.json --library-stats`): the messages on the network profile,
   the collectives the stats say ran on the pool (the halo's 8-byte allreduce and barriers;
   all of coll's) priced by the local-host profile's DES of the emulator's kernels
   (`cxlsim.replay.pool_profile`). The local-host profile is `--pool-profile`, or, without it, a
   fresh `cxlsim calibrate --np 2 --no-mpi --timing` of this machine (a few minutes). The
   predicted time is rank 0's last barrier end minus its first barrier end, the window the
   program times. The error is (predicted - measured) / measured; the target is checked on the
   joined profiles (the run as it went), the network-only error printed beside it. Both contain
   the traced compute of that window (the same by construction); the columns "MPI ms" are the
   rest, measured (wall time - traced compute) and predicted.

Where np exceeds the CPUs, the replays run the ranks by turns (`cxlsim replay --cpus`,
`cxlsim.replay.cpu_sharing`: EEVDF by CPU time) with the figures of benchmarks/replay_cpu_sharing.py (run
first, its --quick parts, or read from `--cpu-figures FILE`): its measured slice and yield intervals, one
set for every np, measured with two ranks on one CPU (nothing fitted at np 3-4), and each run's ranks on
the CPUs its ranks recorded being on (`RecordedCPUs`, `--cpu-map`); the column "a CPU each" is the replay without it. For coll the program also prints its median iteration, beside the replay's mean
iteration ("median it."): a run's few descheduled iterations do not move it.
The ranks record their own CPUs (CXLSIM_RANK_CPUS: sched_getcpu() at each iteration, a file per rank written
after the last barrier; tests/data/traces/src/cpu_record.h, cxlsim.replay.rank_cpus.read_recorded): nothing
outside the run samples it, since a sampler's CPU time is taken from the ranks it watches (0.3-0.5 ms a sample;
at np 4 on 2 CPUs a 10 ms sampler raised the C halo's wall median from 32.6 to 44.1 ms, under load;
benchmarks/replay_validate_ab.py measures it). Only --with-others runs the /proc sampler (cxlsim.replay.rank_cpus.
RankCPUs), to weigh the other runnable tasks (milliseconds of CPU a weighing), and each row prints its CPU time.
Where the library wrote its call durations beside the trace (DIR/rank<r>.durations.tsv, docs/mpi.md), the last
table compares, per app, np and call kind, each call's own time inside the window (from the last rank it waits
for arriving to its return, `cxlsim.replay.call_times`) with the replay's: the window's error per rank is the
sum of the kinds' excesses, so the table says which calls it is in.
What it does not model: time other jobs take from the ranks (a loaded machine) is in neither the
trace nor the model, and shows as under-prediction; the pool collectives' approximations are
`cxlsim.replay.pool_profile`'s (its per-call C overhead is not charged).
The load average is printed with every run: on a machine shared with other jobs the
measured times spread, and the check is only meaningful when it is low.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import typing

from cxlsim.calibrate.profile import load_profile
from cxlsim.emulator.tuning import allreduce_large_bytes
from cxlsim.errors import InputError
from cxlsim.loggp import LogGPFit
from cxlsim.emulator.cli import find_mpiexec
from cxlsim.mpi.build import build, find_mpicc
from cxlsim.replay import call_times, engine, fabrics, pool_profile, simgrid
from cxlsim.replay.cpu_sharing import CPUSharing
from cxlsim.replay.rank_cpus import RankCPUs, RecordedCPUs, read_recorded, run_seeing_cpus
from cxlsim.results import atomic_write

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "tests", "data", "traces", "src")
OWN_SRC = os.path.join(HERE, "replay_validate_src")
"""coll_timed.c (the collective-bound loop) and osu_pingpong.c (the OSU-style loops of the fit)."""
HALO_BYTES = 4096 * 8

WORK = {"c": 200000, "py": 20000, "coll": 2000}
"""Default work steps per iteration per app."""
ITERATIONS = {"c": 20, "py": 20, "coll": 200}
"""Default iterations per app."""



def load() -> float:
    return os.getloadavg()[0]


def fit_this_machine(tmp: str) -> tuple[str, str]:
    """A network calibration profile of MPICH's point-to-point here (np=2, no library), and the OSU text."""
    exe = os.path.join(tmp, "pingpong")
    subprocess.run([find_mpicc(), "-O2", os.path.join(OWN_SRC, "osu_pingpong.c"), "-o", exe], check=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    done = subprocess.run([find_mpiexec(), "-n", "2", exe], capture_output=True, text=True, timeout=600, env=env, check=True)
    latency, bandwidth = done.stdout.split("# OSU MPI Bandwidth Test", 1)
    files = [os.path.join(tmp, "osu_latency.txt"), os.path.join(tmp, "osu_bw.txt")]
    for path, text in zip(files, (latency, "# OSU MPI Bandwidth Test" + bandwidth)):
        with open(path, "w") as fh:
            fh.write(text)
    out = os.path.join(tmp, "calibration")
    subprocess.run([sys.executable, "-m", "cxlsim", "calibrate", "--from-osu", *files, "--np", "2",
                    "--memcpy-bandwidth", "10 GB/s", "--output", out], check=True, capture_output=True, text=True,
                   timeout=600)
    return os.path.join(out, "profile.json"), done.stdout


SAMPLER_CPU_NOTE = ("with --with-others only, a /proc sampler weighs the other runnable tasks, taking CPU time "
                    "from the ranks it watches: each sample lists /proc (0.34-0.46 ms of CPU at 160 processes here, "
                    "loaded), each weighing reads every thread's stat (3.8-6.7 ms); it samples every 25 ms where the "
                    "ranks have a CPU each and every 10 ms where they outnumber the CPUs, weighing every 10th sample")


def sample_interval_s(np_: int, cpus: int) -> float:
    """How often --with-others's sampler samples (s): see SAMPLER_CPU_NOTE."""
    return 0.010 if np_ > cpus else 0.025


def run_sampled(cmd: list, env: dict, interval_s: float, others_every: int):
    """Run `cmd` to its end (600 s at most; rank_cpus.run_seeing_cpus) while a RankCPUs samples its ranks every
    `interval_s` (s; weighing the other tasks every `others_every`-th sample, 0: never): (the CompletedProcess, the
    RankCPUs, this process's CPU time over the run (s): the sampler thread's, the main thread blocking in
    communicate)."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    done, seen = run_seeing_cpus(cmd, env, timeout_s=600, interval_s=interval_s, others_every=others_every)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return done, seen, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


class MeasuredRun(typing.NamedTuple):
    """One measured run of an app (traced_run)."""

    wall_s: float
    """The wall time it printed, first barrier's end to last barrier's end (s)."""
    stats: str
    """The path of the library's stats (its stderr)."""
    median_iteration_s: float | None
    """Its median iteration (s; coll only)."""
    placement: str
    """The placement its pool's probe saw."""
    recorded: RecordedCPUs | None
    """The CPUs its ranks recorded (None: not asked)."""
    sampled: RankCPUs | None
    """The /proc sampler's view (None: no sampler)."""
    sampler_s: float | None
    """The sampler's CPU time over the run (s; None: no sampler)."""


def traced_run(app: str, exe: dict, np_: int, directory: str, iterations: int, work: int, record: bool = True,
               interval_s: float | None = None, others_every: int = 0, profile: str | None = None) -> MeasuredRun:
    """Run the app under the library with tracing and stats, its ranks recording their CPUs into DIR.cpus/ if
    `record`, a /proc sampler beside it (run_sampled) only if `interval_s` is given, and the allreduce
    threshold of the calibration profile `profile` (CXLSIM_PROFILE; None: the environment's)."""
    program = [sys.executable, os.path.join(SRC, "halo_timed.py")] if app == "py" else [exe[app]]
    cmd = [sys.executable, "-m", "cxlsim", "mpi", "run", "--stats", "--trace", directory, "--", find_mpiexec(), "-n",
           str(np_), *program, str(iterations), str(work)]
    env = dict(os.environ, CXLSIM_MPI_VERBOSE="2")  # the library logs its pool's placement probe on stderr
    env.pop("CXLSIM_RANK_CPUS", None)
    if profile is not None:
        env["CXLSIM_PROFILE"] = profile
    cpus_dir = directory.rstrip("/") + ".cpus"
    if record:
        os.makedirs(cpus_dir)
        env["CXLSIM_RANK_CPUS"] = cpus_dir
    try:
        if interval_s is None:
            done, seen, sampler_s = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600), None, None
        else:
            done, seen, sampler_s = run_sampled(cmd, env, interval_s, others_every)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{app} np={np_}: the run took over 600 s; stopped") from None
    if done.returncode != 0:
        raise SystemExit(f"{app} np={np_}: the run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    stats = directory.rstrip("/") + ".stats.txt"
    with open(stats, "w") as fh:
        fh.write(done.stderr)
    median = re.search(r"median_iteration_s (\S+)", done.stdout)
    probe = PROBE.search(done.stderr)
    placement = f"{probe.group(2)} ({float(probe.group(1)):.0f} ns)" if probe else "not probed"
    return MeasuredRun(float(re.search(r"wall_s (\S+)", done.stdout).group(1)), stats,
                       float(median.group(1)) if median else None, placement,
                       read_recorded(cpus_dir, np_) if record else None, seen, sampler_s)


PROBE = re.compile(r"pool placement probe: flag round trip (\S+) ns, (fast|slow|disturbed)(?:, no)? placement")


SHARING_LINE = re.compile(r"# replay options \(parts 1-3, for every np\): --cpus (\d+) --cpu-slice (\S+)us "
                          r"--mpi-yield (\S+)us --pool-yield (\S+)us(?: --pool-spin (\S+)us)?"
                          r"(?: --cpu-switch (\S+)us --cpu-switch-cv (\S+))?")


def cpu_figures(text: str) -> CPUSharing | None:
    """The CPUSharing of benchmarks/replay_cpu_sharing.py's output (its options line), None without one."""
    m = SHARING_LINE.search(text)
    if m is None:
        return None
    return CPUSharing(int(m.group(1)), float(m.group(2)) * 1e3, float(m.group(3)) * 1e3, float(m.group(4)) * 1e3,
                      pool_spin_ns=float(m.group(5)) * 1e3 if m.group(5) else 0.0,
                      switch_ns=float(m.group(6)) * 1e3 if m.group(6) else 0.0,
                      switch_cv=float(m.group(7)) if m.group(7) else 0.0)


def measure_cpu_figures(rounds: int) -> tuple[CPUSharing | None, str]:
    """Run benchmarks/replay_cpu_sharing.py --quick (its parts 0-4) and read its figures."""
    done = subprocess.run([sys.executable, os.path.join(HERE, "replay_cpu_sharing.py"), "--quick", "--rounds",
                           str(rounds)], capture_output=True, text=True, timeout=1800, check=True)
    return cpu_figures(done.stdout), done.stdout


def predicted_window_s(directory: str, spec: str, stats: str | None = None,
                       sharing: CPUSharing | None = None) -> tuple[float, float, str, list | None, float | None]:
    """(the replay's rank-0 window from its first barrier's end to its last barrier's end, traced compute in it
    (s), the fabric line, the per-call comparison of `call_summary`, the tracer's writes on rank 0 (s; None where
    the compute lines are CPU time, `CallTime.gap_cpu_ns`: the writes are in them)) on
    `--fabric spec` (with the library's `stats` for a joined NET.json+LOCAL.json), the ranks on shared CPUs with
    `sharing`. Where the library wrote its call durations, the gaps between calls are theirs
    (call_times.measured_gaps: the trace's compute leaves out the tracer's own writes, the run's wall time
    holds them); the last two are None where it wrote none."""
    original = simgrid.read(directory)
    timed = call_times.read_durations(original)
    trace, added = call_times.measured_gaps(original, timed) if timed else (original, None)
    beside = pool_profile.stats_beside(directory)  # the library's own DIR/cxlsim_mpi_stats.txt, where it writes one
    library_stats = (pool_profile.read_library_stats(beside, "beside the trace:") if beside
                     else pool_profile.read_library_stats(stats, "stderr:") if stats else None)
    fab = fabrics.resolve(spec, trace.size, message_bytes=fabrics.typical_message_bytes(trace), trace=trace,
                          library_stats=library_stats)
    timeline = engine.replay(trace, fab.make(), priced=fab.priced, sharing=sharing)
    barriers = [seg for seg in timeline.segments[0] if seg[2] == "barrier"]
    start, end = barriers[0][1], barriers[-1][1]
    compute = sum(e - s for s, e, kind, _, _ in timeline.segments[0] if kind == "compute" and s >= start and e <= end)
    cpu_gaps = bool(timed) and any(t.gap_cpu_ns is not None for t in timed[0])
    return (end - start) / 1e9, compute / 1e9, fab.describe, timed and call_summary(trace, timeline, timed), \
        None if cpu_gaps else added and added[0] / 1e9


def call_summary(trace, timeline, measured: list) -> list:
    """The run's own call times (`measured`, call_times.read_durations) against the replay's
    (cxlsim.replay.call_times.summarise), per kind, bytes and class, over each rank's calls after its first
    barrier up to its last (the timed window)."""
    replayed = call_times.own_times(trace, call_times.replayed_calls(trace, timeline, measured))
    measured = call_times.own_times(trace, measured)
    window = []
    for mine in measured:
        barriers = [i for i, t in enumerate(mine) if t.kind == "barrier"]
        window.append((barriers[0] + 1, barriers[-1]))
    return call_times.summarise(measured, replayed, window)


def pool_prices(directory: str, local: str, stats: str | None) -> dict:
    """{(traced kind, bytes): ns} that the local-host profile `local` charges one call of each kind rank 0 of the
    trace ran on the pool (cxlsim.replay.pool_profile: the kernel from a common start)."""
    trace = simgrid.read(directory)
    beside = pool_profile.stats_beside(directory)
    library = (pool_profile.read_library_stats(beside, "beside the trace:") if beside
               else pool_profile.read_library_stats(stats, "stderr:") if stats else None)
    pricing = pool_profile.PoolPricing(local, trace.size, library, trace)
    prices = {}
    for call in trace.ranks[0]:
        priced = pricing.plan(call, trace.size)
        if priced is not None:
            prices[(call.kind, call.size_bytes)] = priced.cost_ns
    return prices


def bench_row(local: str, collective: str, size_bytes: int) -> str:
    """The profile's own measurement of a hw `collective` of `size_bytes` beside its calibration (its collectives
    rows: the median of the jobs' medians, the jobs' range, the placement and the emulator's large-allreduce
    threshold it ran with), as text; 'not in the profile' where it has no such row."""
    rows = [r for r in load_profile(local).get("collectives", {}).get("rows", [])
            if r.get("collective") == collective and r.get("size_bytes") == size_bytes and r.get("coherence") == "hw"]
    if not rows:
        return "not in the profile"
    r = rows[0]
    low, high = r.get("spread_ns") or (r["measured_ns"], r["measured_ns"])
    return (f"{r['measured_ns']:.0f} ns [{low:.0f}-{high:.0f} over {r.get('jobs', '?')} jobs], {r.get('placement', '?')}"
            f" placement, large from {r.get('large_bytes', '?')} B")


COLL_CALLS = (("allreduce", 65536), ("allgather", 4096), ("bcast", 4096), ("allreduce", 8))
"""One iteration of coll's pool calls (traced kind, bytes per rank)."""


def coll_price_us(prices: dict) -> float:
    """What the profile charges for one iteration of coll's pool calls (us)."""
    return sum(prices.get(key, 0.0) for key in COLL_CALLS) / 1e3


def coll_table(rows: list, iterations: int, spread: list) -> None:
    """coll's runs: the profile's price of one iteration's pool calls beside the run's measured MPI time per
    iteration (wall time less traced compute, over the iterations) and the error, per profile; does the error
    follow the price?"""
    print("# coll: does the error follow the profile's price? per run: the price of one iteration's pool calls "
          "(us), the run's measured MPI time per iteration (us), the error; then on each --spread-profiles profile")
    head = "".join(f"{name + ' price':>12}{'error':>9}" for name in spread)
    print(f"# {'np':>2}{'run':>4}{'load':>7}{'price us':>10}{'MPI/it us':>11}{'error':>9}{head}")
    for r in (r for r in rows if r["app"] == "coll"):
        mpi = (r["measured_s"] - r["traced_compute_s"]) / iterations * 1e6
        got = r["coll_prices"]
        print(f"  {r['np']:>2}{r['run']:>4}{r['load_before']:>7.2f}{got['profile']['price_us']:>10.2f}{mpi:>11.2f}"
              f"{got['profile']['error'] * 100:>8.1f}%"
              + "".join(f"{got[name]['price_us']:>12.2f}{got[name]['error'] * 100:>8.1f}%" for name in spread))
    for n in sorted({r["np"] for r in rows if r["app"] == "coll"}):
        got = [r for r in rows if r["app"] == "coll" and r["np"] == n]
        for name in ["profile", *spread]:
            prices = [r["coll_prices"][name]["price_us"] for r in got]
            errors = [r["coll_prices"][name]["error"] for r in got]
            mpi = [(r["measured_s"] - r["traced_compute_s"]) / iterations * 1e6 for r in got]
            print(f"  np {n} {name}: price {statistics.median(prices):.2f} us, measured MPI per iteration "
                  f"{statistics.median(mpi):.2f} [{min(mpi):.2f}-{max(mpi):.2f}] us, median error "
                  f"{statistics.median(errors) * 100:+.1f}% [{min(errors) * 100:+.1f}..{max(errors) * 100:+.1f}%]")


def calls_table(rows: list, apps: list, nps: list) -> None:
    """Per app and np, the run's own time per call kind against the replay's (cxlsim.replay.call_times: from the
    last rank's arrival to the return), from the library's call durations: where the predicted window's error
    is."""
    print("# per app and np, inside the timed window: each call kind's own time (from the last rank it waits for "
          "arriving to its return; cxlsim.replay.call_times) measured by the library against the replay's, median "
          "over the runs; span: what the kind adds to the window where the ranks meet at every call (a "
          "collective's own time on its slowest rank, summed; else the largest rank's sum); excess = measured - "
          "predicted span (range over the runs), beside the window's error (measured - predicted)")
    print(f"# {'app':<5}{'np':>2} {'call':<10}{'bytes':>7} {'class':<7}{'calls':>6}{'own/call us':>12}{'predicted':>10}"
          f"{'span us':>10}{'predicted':>10}{'excess us':>10}  {'range':<19}{'slowest us':>11}")
    for app in apps:
        for n in nps:
            got = [r for r in rows if r["app"] == app and r["np"] == n]
            if not got or any(r["calls"] is None for r in got):
                print(f"  {app:<5}{n:>2} no call durations beside the traces (a library without them)")
                continue
            us = lambda ns: f"{ns / 1e3:.2f}" if ns is not None else "-"  # noqa: E731
            for c in call_times.over_runs([r["calls"] for r in got], n):
                low, high = c["excess_range_ns"]
                print(f"  {app:<5}{n:>2} {c['kind']:<10}{c['size_bytes']:>7} {c['class']:<7}{c['calls']:>6.0f}"
                      f"{us(c['measured_own_median_ns']):>12}{us(c['predicted_own_median_ns']):>10}"
                      f"{us(c['measured_span_ns']):>10}{us(c['predicted_span_ns']):>10}"
                      f"{us(c['excess_ns']):>10}  {us(low) + '..' + us(high):<19}{us(c['measured_own_max_ns']):>11}")
            window = [(r["measured_s"] - r["predicted_s"]) * 1e6 for r in got]
            print(f"  {app:<5}{n:>2} the window: measured - predicted {statistics.median(window):.1f} us "
                  f"[{min(window):.1f}..{max(window):.1f}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, nargs="+", default=[2], help="rank counts (2-4; default 2)")
    parser.add_argument("--runs", type=int, default=5, help="runs per app and rank count (interleaved)")
    parser.add_argument("--apps", nargs="+", default=["c"], choices=sorted(WORK),
                        help="c, py: the halo (halo_timed.c, .py); coll: a collective-bound loop (allreduce of 64 KiB "
                             "and of 8 B, allgather and bcast of 4 KiB per iteration), whose MPI time is the pool's")
    parser.add_argument("--iterations", type=int, help="iterations per run (default: 20 for c and py, 200 for coll)")
    parser.add_argument("--work", type=int, default=0,
                        help="work steps per iteration (default: 200000 for c, 20000 for py, 2000 for coll)")
    parser.add_argument("--pool-profile",
                        help="local-host profile pricing the collectives that ran on the pool (default: calibrate "
                             "this machine now, np 2)")
    parser.add_argument("--spread-profiles", nargs="+", default=[],
                        help="more local-host profiles of this machine (e.g. calibrations minutes apart): coll's "
                             "traces are also replayed on each, as a diagnostic of how far the error follows the "
                             "profile (the target is checked on the first profile only)")
    parser.add_argument("--out", help="write the rows and the fit as JSON (atomically)")
    parser.add_argument("--cpu-figures",
                        help="a saved output of benchmarks/replay_cpu_sharing.py whose figures model the runs "
                             "with more ranks than CPUs (default: run its --quick parts now, when such runs are asked)")
    parser.add_argument("--cpu-rounds", type=int, help="rounds of that measurement, when it runs now (default 2)")
    parser.add_argument("--seed", type=int,
                        help="seed of the replay by turns' hand-over cost draws (default 0; printed with the figures)")
    parser.add_argument("--with-others", action="store_true",
                        help="also run the /proc sampler beside each run, weighing the other runnable tasks "
                             "(every 10th sample), and replay with them (replay --cpu-foreign), a diagnostic: the "
                             "sampler takes CPU from the ranks (each weighing milliseconds), so the measured runs "
                             "are slower with it")
    parser.add_argument("--keep", help="keep the traces, stats and profiles in this new directory (default: a "
                                       "temporary one, deleted)")
    args = parser.parse_args()
    if any(not 2 <= n <= 4 for n in args.np):
        parser.error("--np: rank counts 2-4")
    cpus = os.cpu_count() or 1
    for flag, value in (("--cpu-figures", args.cpu_figures), ("--cpu-rounds", args.cpu_rounds), ("--seed", args.seed)):
        if value is not None and max(args.np) <= cpus:
            parser.error(f"{flag}: applies to runs with more ranks than this machine's {cpus} CPUs; --np asks none")
    if args.cpu_rounds is not None and args.cpu_rounds < 1:
        parser.error(f"--cpu-rounds: expected a whole number >= 1, got {args.cpu_rounds}")
    if args.cpu_figures and args.cpu_rounds is not None:
        parser.error("--cpu-rounds: the figures come from --cpu-figures, nothing is measured; give one of the two")
    build()
    rows = []
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory()) as tmp:
        if args.keep:
            os.makedirs(tmp)
        profile, osu_text = fit_this_machine(tmp)
        fit = LogGPFit.from_dict(load_profile(profile)["model"]["loggp"])
        regime = fit.regime_for(HALO_BYTES)
        print(f"# LogGP fit of MPICH point-to-point here (np=2, {fit.identified}); the {HALO_BYTES}-byte halo's "
              f"regime {regime.min_size_bytes}..{regime.max_size_bytes} B: L {regime.latency_ns:.0f} ns, "
              f"o = g {regime.overhead_ns:.0f} ns, G {regime.gap_per_byte_ns:.5f} ns/B (line rms "
              f"{regime.rms_rel_error * 100:.1f}%)")
        local = args.pool_profile or pool_profile.calibrate_local_host(os.path.join(tmp, "local"))
        print(f"# local-host profile {local if args.pool_profile else '(calibrated now)'}: "
              f"made {load_profile(local)['provenance'].get('timestamp_utc', '?')}")
        try:  # the library runs as the profile it is priced by says (`cxlsim mpi run` reads CXLSIM_PROFILE)
            threshold, _ = allreduce_large_bytes({"CXLSIM_PROFILE": local})
            threshold_profile = local
            print(f"# the library's allreduce threshold: the local-host profile's, large from {threshold} B "
                  "(CXLSIM_PROFILE names it in the runs)")
        except InputError as exc:
            threshold_profile = None
            print(f"# the library's allreduce threshold: its default or the environment's ({exc})")
        spread = [(f"S{i + 1}", path) for i, path in enumerate(args.spread_profiles)]
        if "coll" in args.apps:
            for name, path in [("profile", local), *spread]:
                print(f"# {name} {path if name != 'profile' else ''}: its own bench of the hw allreduce at 8 B "
                      f"{bench_row(path, 'allreduce', 8)}; at 64 KiB {bench_row(path, 'allreduce', 65536)}")
        exe = {"c": os.path.join(tmp, "halo_timed"), "coll": os.path.join(tmp, "coll_timed")}
        subprocess.run([find_mpicc(), "-O0", os.path.join(SRC, "halo_timed.c"), "-o", exe["c"]], check=True)
        subprocess.run([find_mpicc(), "-O0", os.path.join(OWN_SRC, "coll_timed.c"), "-I", SRC, "-o", exe["coll"]], check=True)
        sharing, sharing_text = None, ""
        if max(args.np) > cpus:
            if args.cpu_figures:
                with open(args.cpu_figures) as fh:
                    sharing_text = fh.read()
                sharing = cpu_figures(sharing_text)
            else:
                sharing, sharing_text = measure_cpu_figures(args.cpu_rounds or 2)
            if sharing is None:
                raise SystemExit(f"--cpu-figures: no '# replay options (parts 1-3, for every np)' line in "
                                 f"{args.cpu_figures or 'the output of benchmarks/replay_cpu_sharing.py'}")
            sharing = dataclasses.replace(sharing, seed=args.seed or 0)
            for n in sorted(n for n in set(args.np) if n > cpus):
                print(f"# np {n} > {cpus} CPUs: replayed by turns, {sharing.describe(n)} (benchmarks/"
                      f"replay_cpu_sharing.py{' ' + args.cpu_figures if args.cpu_figures else ', measured now'}); "
                      "the column 'a CPU each' is the replay without it")
        print("# predicted: messages on the LogGP fit, the collectives that ran on the pool on the local-host "
              "profile (the target); network only: every collective as MPICH's algorithm on the LogGP fit; "
              "with others (summary only, with --with-others): a "
              "diagnostic, not the target, replayed by turns beside the other runnable tasks the sampler weighed "
              "(replay --cpu-foreign; far off on a quiet machine, docs/replay.md)")
        print("# the ranks record their own CPUs, one sched_getcpu() an iteration (CXLSIM_RANK_CPUS, cpu_record.h); "
              "nothing samples the runs" + (f"; but {SAMPLER_CPU_NOTE}; each row gives the sampler's CPU time over "
                                            "its whole run (start-up and set-up included, of which the timed window "
                                            "is a part)" if args.with_others else ""))
        print(f"# {'app':<5}{'np':>2}{'run':>4}{'load':>7}{'measured ms':>13}{'predicted ms':>14}{'error':>9}"
              f"{'network only':>14}{'error':>9}{'a CPU each':>12}{'error':>9}{'traced compute ms':>19}"
              f"{'MPI ms measured':>17}{'predicted':>11}{'median it. us':>15}{'predicted':>11}  placement "
              "(the pool's flag round trip, its set-up probe; np 2 only); the CPU each rank was on at most iterations, as it recorded "
              "(the replay by turns puts each rank there)")
        lines = set()
        for run in range(args.runs):
            for app in args.apps:
                work = args.work or WORK[app]
                for n in args.np:
                    directory = os.path.join(tmp, f"trace-{app}-{n}-{run}")
                    before = load()
                    iterations = args.iterations or ITERATIONS[app]
                    ran = traced_run(app, exe, n, directory, iterations, work, record=True,
                                     interval_s=sample_interval_s(n, cpus) if args.with_others else None,
                                     others_every=10, profile=threshold_profile)
                    measured, stats, median_it, placement = (ran.wall_s, ran.stats, ran.median_iteration_s,
                                                             ran.placement)
                    seen, sampler_s = ran.recorded, ran.sampler_s
                    observed = seen.cpu_map(n)
                    shared = None  # by turns where ranks outnumber the CPUs, or the run kept two on one CPU
                    if sharing is not None and (n > cpus or (observed and len(set(observed)) < n and not seen.moves)):
                        shared = dataclasses.replace(sharing, cpu_map=observed) if observed else sharing
                    cpu_note = ((f"; CPUs {','.join(map(str, observed))} ({seen.moves} moves recorded)" if observed
                                 else "; CPUs not recorded (rank r on CPU r % N)")
                                + (f", sampler {sampler_s * 1e3:.1f} ms CPU (the whole run)" if sampler_s is not None
                                   else ""))
                    predicted, compute, line, calls, tracer_s = predicted_window_s(directory, f"{profile}+{local}",
                                                                                   stats, shared)
                    tracer_note = (f"; the tracer's writes {tracer_s * 1e3:.3f} ms (rank 0, in the replay's gaps)"
                                   if tracer_s is not None else "; no call durations: the trace's gaps" if not calls
                                   else "; compute lines of CPU time (ranks outnumbered CPUs: the tracer's own time "
                                   "is in them)")
                    network = predicted_window_s(directory, profile, None, shared)[0]
                    one_each = predicted_window_s(directory, f"{profile}+{local}", stats)[0] if shared else predicted
                    foreign = ran.sampled.foreign_weight(cpus) if ran.sampled else None
                    with_others = None  # a diagnostic: the replay by turns with this run's other runnable tasks
                    if sharing is not None and foreign is not None and observed:
                        loaded = dataclasses.replace(sharing, cpu_map=observed, foreign=foreign)
                        with_others = predicted_window_s(directory, f"{profile}+{local}", stats, loaded)[0]
                    lines.add(line.replace(tmp, "TMP"))
                    error, network_error = (predicted - measured) / measured, (network - measured) / measured
                    priced = {}
                    if app == "coll":
                        for name, path in [("profile", local), *spread]:
                            prices = pool_prices(directory, path, stats)
                            got = (predicted if name == "profile" else
                                   predicted_window_s(directory, f"{profile}+{path}", stats, shared)[0])
                            priced[name] = {"price_us": coll_price_us(prices), "small_ns": prices.get(("allreduce", 8)),
                                            "large_ns": prices.get(("allreduce", 65536)), "predicted_s": got,
                                            "error": (got - measured) / measured}
                    rows.append({"app": app, "np": n, "run": run, "load_before": before, "load_after": load(),
                                 "measured_s": measured, "predicted_s": predicted, "error": error,
                                 "network_only_s": network, "network_only_error": network_error,
                                 "one_cpu_each_s": one_each, "cpu_sharing": vars(shared) if shared else None,
                                 "median_iteration_s": median_it, "placement": placement,
                                 "cpu_map": list(observed) if observed else None, "cpu_moves": seen.moves,
                                 "rank_sched": {r: vars(v) for r, v in seen.sched.items()},
                                 "sampler_cpu_s": sampler_s, "tracer_s": tracer_s,
                                 "traced_compute_s": compute, "coll_prices": priced or None,
                                 "foreign_weight": list(foreign) if foreign else None, "with_others_s": with_others,
                                 "calls": calls})
                    print(f"  {app:<5}{n:>2}{run:>4}{before:>7.2f}{measured * 1e3:>13.3f}{predicted * 1e3:>14.3f}"
                          f"{error * 100:>8.1f}%{network * 1e3:>14.3f}{network_error * 100:>8.1f}%"
                          f"{one_each * 1e3:>12.3f}{(one_each - measured) / measured * 100:>8.1f}%"
                          f"{compute * 1e3:>19.3f}{(measured - compute) * 1e3:>17.3f}"
                          f"{(predicted - compute) * 1e3:>11.3f}"
                          + (f"{median_it * 1e6:>15.1f}{predicted / iterations * 1e6:>11.1f}" if median_it else
                             f"{'':>26}") + f"  {placement}{cpu_note}{tracer_note}"
                          + (f"; pool price per iteration {priced['profile']['price_us']:.2f} us (allreduce 8 B "
                             f"{priced['profile']['small_ns']:.0f} ns, 64 KiB {priced['profile']['large_ns'] / 1e3:.2f}"
                             f" us), measured MPI per iteration {(measured - compute) / iterations * 1e6:.2f} us"
                             if priced else ""), flush=True)
        for line in sorted(lines):
            print(f"# fabric: {line}")
        local_profile = load_profile(local)
    print("# per app and np: median |error|, and the errors' range (target: within 10%, on the joined profiles)")
    for app in args.apps:
        for n in args.np:
            got = [r for r in rows if r["app"] == app and r["np"] == n]
            for r in got:
                r["one_cpu_each_error"] = (r["one_cpu_each_s"] - r["measured_s"]) / r["measured_s"]
                if r["median_iteration_s"]:
                    r["median_iteration_error"] = (r["predicted_s"] / (args.iterations or ITERATIONS[app])
                                                   - r["median_iteration_s"]) / r["median_iteration_s"]
            kinds = [("error", "predicted"), ("network_only_error", "network only")]
            kinds += [("one_cpu_each_error", "a CPU each")] if n > cpus else []
            for r in got:
                if r["with_others_s"] is not None:
                    r["with_others_error"] = (r["with_others_s"] - r["measured_s"]) / r["measured_s"]
            kinds += [("with_others_error", "with others")] if all(r["with_others_s"] for r in got) else []
            kinds += [("median_iteration_error", "median it.")] if all(r["median_iteration_s"] for r in got) else []
            for key, what in kinds:
                errs = [r[key] for r in got]
                within = sum(abs(e) <= 0.10 for e in errs)
                print(f"  {app:<5}np={n} {what:<13}: median |error| {statistics.median(abs(e) for e in errs) * 100:.1f}%, "
                      f"range {min(errs) * 100:+.1f}% .. {max(errs) * 100:+.1f}%, {within} of {len(errs)} runs within 10%")
            calm = min(got, key=lambda r: r["measured_s"] - r["traced_compute_s"])
            print(f"  {app:<5}np={n} least disturbed run (the smallest measured MPI time, run {calm['run']}, load "
                  f"{calm['load_before']:.2f}): predicted {calm['error'] * 100:+.1f}%, network only "
                  f"{calm['network_only_error'] * 100:+.1f}%")
    if "coll" in args.apps:
        coll_table(rows, args.iterations or ITERATIONS["coll"], [name for name, _ in spread])
    calls_table(rows, args.apps, args.np)
    if args.out:
        atomic_write(args.out, json.dumps({"fit": fit.to_dict(), "osu": osu_text, "pool_profile": args.pool_profile,
                                           "pool_profile_provenance": local_profile["provenance"], "rows": rows,
                                           "trace_machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
                                           "cpu_sharing_measurement": sharing_text},
                                          indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
