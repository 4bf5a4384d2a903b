"""`cxlsim replay TRACE --fabric F [--fabric F2 ...]`: project a traced MPI application onto fabrics.

TRACE is a SimGrid time-independent trace (`smpirun -trace-ti`'s index file, or
a directory of per-rank files; cxlsim.replay.simgrid), the interposition
library's traces (the same format), or an OTF2 archive (cxlsim.replay.otf2_reader). Each `--fabric` (a
preset, or a scenario file; cxlsim.replay.fabrics) gets its own DES replay
(cxlsim.replay.engine); the first is the reference of the speedup table.
Output: the table on stdout and a workspace (cxlsim.replay.output).
Register with `register(subparsers)`.
"""
from __future__ import annotations

import os
import sys

from cxlsim import config, units
from cxlsim.errors import InputError
from cxlsim.models.collectives import runner
from cxlsim.models.training.stragglers import Slowdown
from cxlsim.replay import engine, fabrics, otf2_reader, output, pool_profile, simgrid, stragglers
from cxlsim.replay.cpu_sharing import CPUSharing
from cxlsim.results import Workspace, make_rng

__all__ = ["main", "register", "compute_scale", "read_trace", "is_otf2", "library_stats", "cpu_sharing"]


def is_otf2(path: str) -> bool:
    """An OTF2 archive: its anchor file (*.otf2) or a directory holding traces.otf2."""
    return path.endswith(".otf2") or os.path.isfile(os.path.join(path, "traces.otf2"))


def read_trace(path: str, host_speed: str | None, in_place: str | None):
    """The Trace at `path`: an OTF2 archive (cxlsim.replay.otf2_reader) or a SimGrid TI trace."""
    if is_otf2(path):
        if host_speed is not None:
            raise InputError("--trace-host-speed: an OTF2 archive's timestamps are in its timer's ticks, whose "
                             "resolution it records; remove the option")
        return otf2_reader.read(path, None if in_place is None else in_place == "yes")
    if in_place is not None:
        raise InputError(f"--otf2-in-place: {path} is not an OTF2 archive; the option applies to OTF2 only")
    return simgrid.read(path, simgrid.parse_speed(host_speed) if host_speed is not None else None)


def compute_scale(value: str, ranks: int):
    """`--compute-scale`: one factor (e.g. 0.5: compute twice as fast) or a file of one factor per rank."""
    try:
        scale = float(value)
    except ValueError:
        pass
    else:
        if not scale >= 0 or scale == float("inf"):
            raise InputError(f"--compute-scale: expected a factor >= 0, got {value!r}")
        return scale
    factors = []
    text = config.read_text(value, "--compute-scale file")
    for number, raw in enumerate(text.splitlines(), start=1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            factor = float(entry)
        except ValueError:
            raise InputError(f"{value}:{number}: expected a compute factor (a number), got {entry!r}") from None
        if not factor >= 0 or factor == float("inf"):
            raise InputError(f"{value}:{number}: expected a factor >= 0, got {entry!r}")
        factors.append(factor)
    if len(factors) != ranks:
        raise InputError(f"--compute-scale {value}: lists {len(factors)} factors, the trace has {ranks} ranks")
    return factors


def library_stats(option: str | None, trace_path: str, specs: list) -> dict | None:
    """The library's stats for joined fabrics: `--library-stats`, else the `cxlsim_mpi_stats.txt` the library
    wrote beside the trace (used only by a NET.json+LOCAL.json fabric, whose line names it), else None."""
    if option:
        return pool_profile.read_library_stats(option)
    found = pool_profile.stats_beside(trace_path)
    if found is None or not any(".json+" in spec for spec in specs):
        return None
    return pool_profile.read_library_stats(found, "found beside the trace (no --library-stats):")


SHARING_FLAGS = ("--cpu-slice", "--mpi-yield", "--pool-yield")


def cpu_sharing(args, seed: int = 0) -> CPUSharing | None:
    """`--cpus N` with the traced machine's scheduler figures (benchmarks/replay_cpu_sharing.py measures them),
    or None; a figure without --cpus, or --cpus without them, is refused. `seed`: the run's, for the hand-over
    costs' draws (--cpu-switch-cv)."""
    figures = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in SHARING_FLAGS}
    if args.cpus is None:
        given = [flag for flag, value in figures.items() if value is not None]
        given += [flag for flag in ("--cpu-map", "--cpu-foreign", "--pool-spin", "--cpu-switch", "--cpu-switch-cv")
                  if getattr(args, flag[2:].replace("-", "_"), None) is not None]
        if given:
            raise InputError(f"{given[0]}: a figure of CPU sharing, for --cpus N; give --cpus or remove it")
        return None
    try:
        cpus = int(args.cpus)
    except ValueError:
        raise InputError(f"--cpus: expected a positive integer (the traced run's CPUs), got {args.cpus!r}") from None
    missing = [flag for flag, value in figures.items() if value is None]
    if missing:
        raise InputError(f"--cpus: also give {', '.join(missing)} (the traced machine's scheduler figures; "
                         "python benchmarks/replay_cpu_sharing.py measures them)")
    times = {flag: units.parse_option(flag, value, units.parse_time) for flag, value in figures.items()}
    foreign, spin = getattr(args, "cpu_foreign", None), getattr(args, "pool_spin", None)
    switch, switch_cv = getattr(args, "cpu_switch", None), getattr(args, "cpu_switch_cv", None)
    if switch_cv is not None and switch is None:
        raise InputError("--cpu-switch-cv: the spread of --cpu-switch, which is not given")
    return CPUSharing(cpus, times["--cpu-slice"], times["--mpi-yield"], times["--pool-yield"],
                      cpu_map(args.cpu_map) if getattr(args, "cpu_map", None) is not None else None,
                      cpu_foreign(foreign) if foreign is not None else None,
                      units.parse_option("--pool-spin", spin, units.parse_time) if spin is not None else 0.0,
                      units.parse_option("--cpu-switch", switch, units.parse_time) if switch is not None else 0.0,
                      switch_cv if switch_cv is not None else 0.0, seed)


def cpu_map(text: str) -> tuple:
    """`--cpu-map 0,1,0,0`: the CPU each rank ran on, in rank order (InputError naming the flag)."""
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"--cpu-map: expected comma-separated CPU numbers, one per rank (e.g. 0,1,0,1), got "
                         f"{text!r}") from None


def cpu_foreign(text: str) -> tuple:
    """`--cpu-foreign 0.4,1.2`: per CPU, the mean weight of the other runnable tasks, in nice-0 tasks."""
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"--cpu-foreign: expected comma-separated weights, one per CPU (e.g. 0.4,1.2), got "
                         f"{text!r}") from None


def main(args) -> int:
    if args.timeline_ms is not None and not args.timeline_ms > 0:
        raise InputError(f"--timeline-ms: expected a time > 0 ms, got {args.timeline_ms!r}")
    rng, seed = make_rng(args.seed)
    sharing = cpu_sharing(args, seed)
    trace = read_trace(args.trace, args.trace_host_speed, args.otf2_in_place)
    scale = compute_scale(args.compute_scale, trace.size) if args.compute_scale is not None else 1.0
    slowdown = Slowdown.parse(args.slowdown) if args.slowdown is not None else None
    step_factors = None
    if args.cv or slowdown is not None:
        step_factors = stragglers.draw(rng, trace, args.cv, slowdown).tolist()
    specs = args.fabric
    typical = fabrics.typical_message_bytes(trace)
    stats = library_stats(args.library_stats, args.trace, specs)
    chosen = [fabrics.resolve(spec, trace.size, args.placement, args.ranks_per_node, typical, trace, stats)
              for spec in specs]
    if args.library_stats and not any(fab.priced for fab in chosen):
        raise InputError("--library-stats: says which collectives ran on the library's pool, for a --fabric "
                         "NET.json+LOCAL.json; no --fabric is one")
    labels = {}
    timelines = {}
    for fab in chosen:
        n = labels.get(fab.label, 0)
        labels[fab.label] = n + 1
        label = fab.label if n == 0 else f"{fab.label}#{n + 1}"
        timelines[label] = engine.replay(trace, fab.make(), library=args.selector, compute_scale=scale,
                                         context=runner.Context(groups=fab.groups), step_factors=step_factors,
                                         at=fab.at, priced=fab.priced, sharing=sharing)
        describe = fab.describe + (f"; CPU sharing: {sharing.describe(trace.size)}" if sharing else "")
        print(f"# {label}: {describe}", file=sys.stderr if args.quiet else sys.stdout)
    res = output.results(timelines)
    sys.stdout.write(output.table(res))
    if step_factors is not None:
        print(f"# stragglers: cv {args.cv}, slowdown {args.slowdown or 'none'}, seed {seed}: one draw of "
              f"{len(step_factors)} steps x {trace.size} ranks (a step ends at each collective); another seed "
              "gives another sample")
    workspace = Workspace(args.output) if args.output else Workspace.new("runs", "replay")
    workspace.write_config({"trace": args.trace, "trace_ranks": trace.size, "trace_calls": trace.calls(),
                            "host_speed_flops_per_s": trace.host_speed_flops_per_s,
                            "fabrics": specs, "library_stats": stats["source"] if stats else None, "placement": args.placement,
                            "ranks_per_node": args.ranks_per_node,
                            "cpu_sharing": (dict(vars(sharing), cpu_map=list(sharing.cpu_map or ()) or None,
                                                 foreign=list(sharing.foreign or ()) or None) if sharing else None),
                            "selector": args.selector, "compute_scale": args.compute_scale,
                            "cv": args.cv, "slowdown": args.slowdown,
                            "timeline_ms": args.timeline_ms})
    workspace.write_provenance(seed)
    output.write(workspace, res, timelines, args.timeline_ms or 1.0, plots=not args.no_plots)
    print(f"# workspace: {workspace.path}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "replay", help="project a traced MPI application (SimGrid TI trace) onto network and pool fabrics",
        description="Replay a SimGrid time-independent trace (smpirun -trace-ti) on the DES of every fabric "
                    "given, and report the projected total time, the time per kind of MPI call, communication "
                    "against compute (and along the critical path) and the speedup over the first fabric.")
    p.add_argument("trace", help="the index file smpirun -trace-ti wrote, a directory of per-rank files, or an "
                                 "OTF2 archive (traces.otf2 or its directory; needs the otf2 extra)")
    p.add_argument("--fabric", action="append", required=True,
                   help="a preset (e.g. ib-hdr, eth-100g-tcp, cxl3-pool, cxl-pods), a scenario PATH.yaml (its "
                        "fabric section), a network calibration profile PATH.json (cxlsim calibrate --from-osu), or "
                        "NET.json+LOCAL.json for a trace of the interposition library (messages on the network "
                        "profile, the collectives it ran on its pool on the local-host profile); repeat for "
                        "several fabrics, the first is the reference")
    p.add_argument("--library-stats",
                   help="the stats the interposition library printed for the traced run (cxlsim mpi run --stats, "
                        "its stderr): which collectives ran on its pool, for NET.json+LOCAL.json fabrics (default: "
                        "the cxlsim_mpi_stats.txt the library writes into its trace directory, if there)")
    p.add_argument("--placement", default="block",
                   help="trace ranks on the fabric's hosts: block (default; rank r on host r // K), round_robin, "
                        "or a file with one host index per line, in rank order (on a CXL pool or pods: at most K "
                        "ranks per host; on pods it decides which ranks share a pod)")
    p.add_argument("--ranks-per-node", type=int,
                   help="K, ranks per host (default 1, or the scenario's; on a CXL pool or pods they share the "
                        "host's pool port and NIC)")
    p.add_argument("--cpus",
                   help="the traced run's CPUs, if it had more ranks than CPUs (e.g. np 4 on 2): replay the run as it "
                        "went, its ranks by turns as Linux's EEVDF picks them by CPU time (rank r on CPU r %% N; "
                        "network fabrics and profiles only), with the "
                        "traced machine's --cpu-slice, --mpi-yield and --pool-yield (benchmarks/replay_cpu_sharing.py "
                        "measures them)")
    p.add_argument("--cpu-map", help="with --cpus: the CPU each rank ran on, in rank order (e.g. 0,0,1,0; default: rank r "
                                     "on CPU r %% N); benchmarks/replay_validate.py observes it per run")
    p.add_argument("--cpu-foreign",
                   help="with --cpus: per CPU, the mean weight of the runnable tasks other than the ranks, in nice-0 "
                        "tasks (e.g. 0.4,1.2: a nice-15 task weighs 0.035; default none), modelled as one "
                        "always-runnable task of that weight per CPU; benchmarks/replay_validate.py measures it "
                        "per run")
    p.add_argument("--cpu-slice", help="with --cpus: the time a CPU-bound rank runs before it is preempted (e.g. 2.6ms)")
    p.add_argument("--mpi-yield", help="with --cpus: how long a rank waiting in MPI point-to-point polls between "
                                       "yields of its CPU (e.g. 2us; > 0; a yield forfeits the rest of its slice)")
    p.add_argument("--pool-yield", help="with --cpus: the same for the interposition library's pool collectives")
    p.add_argument("--pool-spin", help="with --cpus: how long the library's pool wait spins before its first yield "
                                       "where the ranks do not outnumber the CPUs (its 4096 polls, e.g. 105us; "
                                       "default 0; benchmarks/replay_cpu_sharing.py measures it)")
    p.add_argument("--cpu-switch", help="with --cpus: the CPU time a hand-over of a CPU costs the rank that gets it, "
                                        "its mean (e.g. 1.3us; default 0: free; benchmarks/replay_cpu_sharing.py "
                                        "fits it)")
    p.add_argument("--cpu-switch-cv", type=float,
                   help="with --cpu-switch: its coefficient of variation, each hand-over's cost a gamma draw "
                        "(drawn with --seed; default 0: every hand-over costs the mean)")
    p.add_argument("--selector", choices=["mpich", "ompi"], default="mpich",
                   help="library whose collective algorithm choice to mimic (default mpich)")
    p.add_argument("--compute-scale",
                   help="multiply every compute gap by X (0.5: twice as fast), or a file of one factor per rank")
    p.add_argument("--cv", type=float, default=0.0,
                   help="stragglers: coefficient of variation of a lognormal compute jitter per rank and step "
                        "(a step ends at each collective; default 0: none), drawn with --seed")
    p.add_argument("--slowdown", help="stragglers: transient slowdowns PROBABILITY,FACTOR,STEPS per rank and step, "
                                      "e.g. 0.05,1.5,10 (the training model's; drawn with --seed)")
    p.add_argument("--trace-host-speed",
                   help="the smpi/host-speed the trace was recorded at, flop/s (e.g. 20kf, SimGrid's default; "
                        "required unless the trace's sidecar TRACE.meta.json gives it)")
    p.add_argument("--otf2-in-place", choices=["yes", "no"],
                   help="OTF2 traces: whether the symmetric collectives used MPI_IN_PLACE, where their byte counts "
                        "allow both readings (Score-P does not record it)")
    p.add_argument("--timeline-ms", type=float, help="the per-rank timeline plot shows the first N ms (default 1)")
    p.add_argument("--no-plots", action="store_true", help="write the tables only")
    p.add_argument("--seed", type=int, help="random seed of the stragglers (--cv, --slowdown) and of the hand-over "
                                            "costs (--cpu-switch-cv); drawn and recorded if not given; without "
                                            "them the replay is deterministic")
    p.add_argument("--output", help="workspace directory (default runs/replay-TIMESTAMP)")
    p.add_argument("--quiet", action="store_true", help="print the fabric descriptions on stderr")
    p.set_defaults(func=main)
