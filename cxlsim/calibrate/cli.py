"""The `cxlsim calibrate` command: measure and fit, --from-osu, --validate-only, --profile; reports."""
from __future__ import annotations

import statistics
import sys

from cxlsim.calibrate.allreduce_threshold import format_threshold
from cxlsim.calibrate.collective_measure import jobs_line
from cxlsim.calibrate.collectives import format_collectives, format_fold, summarize_collectives
from cxlsim.calibrate.consistency import format_checks
from cxlsim.calibrate.osu_fit import from_osu, report_from_osu
from cxlsim.calibrate.pipeline import calibrate_local, parse_settings
from cxlsim.calibrate.project import predict_profile, projection_note
from cxlsim.calibrate.profile import (PLACEMENT_KEY, SCHEMA, VERSION, load_profile, make_profile, placement_record,
                                     profile_placement, save_profile)
from cxlsim.calibrate.validation import (TARGET_INJECTED, comparable, format_validation, plot_validation,
                                         summarize)
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.units import parse_bandwidth, parse_option, parse_size, parse_sizes


DEFAULT_SIZES = "1B:1MiB"

MODES = {  # how `cxlsim calibrate` runs -> the options it uses (--quiet: any)
    "a local calibration": ("np", "sizes", "rounds", "iterations", "no_mpi", "no_collectives", "timing", "output"),
    "--from-osu": ("from_osu", "np", "preset", "memcpy_bandwidth", "sizes", "protocol_switch", "rendezvous_fin",
                   "cache_bytes", "output"),
    "--profile": ("profile", "np", "sizes"),
    "--validate-only": ("validate_only",),
}
"""The one table of which `cxlsim calibrate` option applies to which way of running it."""
DEFAULTS = {"np": 2, "preset": "ib-hdr", "rounds": 3}


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def _checked_mode(args) -> str:
    """The way `args` asks calibrate to run; InputError for two at once, or an option that one does not use.
    Fills in the defaults of the options it uses."""
    chosen = [m for m in ("--validate-only", "--profile", "--from-osu") if getattr(args, MODES[m][0]) is not None]
    if len(chosen) > 1:
        raise InputError(f"{chosen[0]}: give one of --validate-only, --profile, --from-osu, got {', '.join(chosen)}")
    mode = chosen[0] if chosen else "a local calibration"
    given = [o for o in sorted({o for options in MODES.values() for o in options})
             if getattr(args, o, None) not in (None, False) and o not in MODES[mode]]
    if given:
        flags = ", ".join(_flag(o) for o in given)
        why = "; ".join(f"{_flag(o)} applies to {' and '.join(m for m, opts in MODES.items() if o in opts)}"
                        for o in given)
        raise InputError(f"{flags}: {mode} does not use {'it' if len(given) == 1 else 'them'} ({why})")
    for option, value in DEFAULTS.items():
        if getattr(args, option, None) is None:
            setattr(args, option, value)
    return mode


def _sizes(args, default: str | None = DEFAULT_SIZES) -> list[int] | None:
    """--sizes parsed (`default` when not given; None if that is None)."""
    return parse_option("--sizes", args.sizes if args.sizes is not None else default, parse_sizes)


def _sizes_and_np(args) -> list[int]:
    """--sizes parsed, after checking --np (>= 2)."""
    if isinstance(args.np, bool) or args.np < 2:
        raise InputError(f"--np: expected a whole number of ranks >= 2, got {args.np!r}")
    return _sizes(args)


def run_local_calibration(args) -> int:
    from tqdm import tqdm

    sizes = _sizes_and_np(args)
    if args.rounds < 1:
        raise InputError(f"--rounds: expected >= 1, got {args.rounds}")
    settings = parse_settings(["250ns/32GB/s", "600ns/16GB/s"] if args.timing is None else args.timing)
    collectives = not args.no_collectives
    total = 7 + 2 * args.rounds + max(1, args.rounds - 1) * len(settings) + 3 + (1 + 2 * args.rounds) * collectives
    bar = tqdm(total=total, desc="calibrate", unit="step", file=sys.stderr, disable=args.quiet or None,
               leave=False)

    def step(what):
        bar.set_postfix_str(what[:60])
        bar.update(1)
    try:
        result = calibrate_local(sizes, args.np, args.rounds, args.iterations, settings, not args.no_mpi, step,
                                 collectives=collectives and args.np == 2)
    finally:
        bar.close()
    return report_local(args, result)


def local_profile(result: dict) -> dict:
    """The local-host profile of a `calibrate_local` result: its model, validation rows, primitives, the
    allreduce threshold, the other collectives and the host placement of the model's flag round trip
    (`profile.PLACEMENT_KEY`)."""
    rows, coll, threshold = result["validation"], result.get("collectives"), result.get("allreduce_threshold")
    emulator = {"allreduce_large_bytes": threshold["allreduce_large_bytes"],
                "allreduce_threshold": threshold} if threshold else {}
    return make_profile("local-host", result["model"].to_dict(), rows, fit=result["fit"], primitives=result["primitives"],
                        emulator=emulator, **{PLACEMENT_KEY: placement_record(result["model"].roundtrip_ns[Coherence.HW])},
                        injected=result["injected"], mpi=result["mpi"], cores=result["cores"],
                        allgather_batches=result["allgather"]["batches"],
                        summary=summarize(rows), injected_summary=summarize(result["injected"]),
                        collectives=coll, collectives_summary=summarize_collectives(coll["rows"]) if coll else None,
                        primitive_checks=result.get("consistency"))


def report_local(args, result) -> int:
    """Print a local calibration's fit and validation, and write its workspace (profile.json, CSV, PNG)."""
    model, fit, prims = result["model"], result["fit"], result["primitives"]
    print(f"# local-host model from primitives (np {result['np']}, {result['cores']} cores)")
    for mode in Coherence:
        f = fit[f"path_{mode}"]
        print(f"#   {mode.value}: flag round trip {f['measured_roundtrip_ns']:.0f} ns -> path {f['path_ns']:.1f} ns "
              f"(rule {f['rule']}: DES {f['des_roundtrip_ns']:.0f} ns, {f['residual'] * 100:+.1f}%; "
              f"the DES's own ping-pong at this path {f['des_pingpong_ns']:.0f} ns)")
    line_ops = prims[Coherence.FLUSH]
    print(f"#   flush: {line_ops['writeback_op']} {fit['flush_writeback']['per_line_ns']:.2f} ns/line + sfence "
          f"{fit['flush_writeback']['fence_ns']:.1f} ns (rms {fit['flush_writeback']['rms'] * 100:.1f}%); "
          f"{line_ops['invalidate_op']} {fit['flush_invalidate']['per_line_ns']:.2f} ns/line + mfence "
          f"{fit['flush_invalidate']['fence_ns']:.1f} ns (rms {fit['flush_invalidate']['rms'] * 100:.1f}%)")
    if "flush_ack" in fit:
        ack = fit["flush_ack"]
        print(f"#   flush acknowledgements beyond a bare mfence ({ack['mfence_ns']:.1f} ns): clean line "
              f"{ack['invalidate']:.1f} ns, dirty line {ack['writeback']:.1f} ns "
              f"(rms of the dirty + mfence line {fit['flush_writeback_mfence']['rms'] * 100:.1f}%)")
    print(f"#   per-call overhead (np=1, 0 B): copy {model.overhead_ns['copy']:.0f} ns, "
          f"zero-copy {model.overhead_ns['zero-copy']:.0f} ns")
    print(f"#   write pass: {fit['write_pass']['bw_bytes_per_ns']:.1f} B/ns (rms {fit['write_pass']['rms'] * 100:.1f}%); "
          f"read pass: {fit['read_pass']['bw_bytes_per_ns']:.1f} B/ns (rms {fit['read_pass']['rms'] * 100:.1f}%)")
    states = [b.get("state", "slow placement" if b["slow_placement"] else "fast") for b in result["allgather"]["batches"]]
    print(f"# allgather jobs: {len(states)}: " + ", ".join(f"{states.count(s)} {s}" for s in ("fast", "slow placement",
                                                                                           "disturbed"))
          + " (by their round trips before and after; each bench run is judged by its own probes)")
    rows = result["validation"]
    print(format_validation(rows), end="")
    over = result["np"] > result["cores"]
    if over:
        print(f"# np {result['np']} > {result['cores']} cores: oversubscribed; the DES does not model OS "
              "scheduling, so these errors are reported, not held to the targets")
    if result["injected"]:
        print("# under injected CXL timing (hw):")
        print(format_validation(result["injected"]), end="")
        kept = [abs(r["error"]) for r in result["injected"] if comparable(r)]
        med = statistics.median(kept) if kept else float("nan")
        print(f"# injected timing: median |error| {med * 100:.1f}% over {len(kept)} comparable points "
              f"(target {TARGET_INJECTED * 100:.0f}%)")
    if result["mpi"]:
        print("# MPI_Allgather (mpi4py, same machine), measured:")
        for r in result["mpi"]:
            print(f"#   {r}" if "error" in r else f"#   {r['size_bytes']:>8d} B  {r['measured_ns'] / 1e3:10.3f} us")
    threshold = result.get("allreduce_threshold")
    if threshold:
        print(format_threshold(threshold), end="")
    coll = result.get("collectives")
    if coll:
        print(f"# the other pool collectives at np 2, predicted from the primitives (host placement "
              f"{coll['placement']}: best flag round trip hw {coll['best_roundtrip_ns'][Coherence.HW]:.0f} ns; "
              f"{jobs_line(coll['jobs'])}):")
        print(format_fold(prims.get("fold", {}), prims.get("remote_fold")), end="")
        print(format_collectives(coll["rows"]), end="")
    elif result["np"] != 2:
        print("# the other pool collectives: not measured (their prediction is validated at np 2)")
    if result.get("consistency") is not None:
        print(format_checks(result["consistency"]), end="")
    workspace = _workspace(args, "calibrate")
    profile = local_profile(result)
    placement = profile[PLACEMENT_KEY]
    print(f"# host placement of the model's primitives: {placement['class']} (hw flag round trip "
          f"{placement['roundtrip_ns']:.0f} ns; fast up to {placement['fast_up_to_ns']:.0f} ns, disturbed above "
          f"{placement['disturbed_above_ns']:.0f} ns), kept as the profile's '{PLACEMENT_KEY}'")
    save_profile(workspace.file("profile.json"), profile)
    cols = ["coherence", "side", "size_bytes", "measured_ns", "predicted_ns", "error", "batches"]
    workspace.write_csv("validation", rows, cols)
    if result["injected"]:
        workspace.write_csv("validation_injected", result["injected"], ["setting"] + cols)
    if coll:
        workspace.write_csv("validation_collectives", coll["rows"],
                            ["coherence", "placement", "collective", "size_bytes", "measured_ns", "mean_ns", "predicted_ns",
                             "error", "held_out", "jobs", "blocks", "calls"])
    plot_validation(rows, workspace.file("validation.png"))
    print(f"# profile: {workspace.file('profile.json')}")
    if threshold:
        print(f"# CXLSIM_PROFILE={workspace.file('profile.json')} makes its allreduce threshold the emulator's default")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="measure this machine (or read OSU files), fit the simulator, report its error",
        description="Without --from-osu: measure this machine's primitives (flag round trip, flush cost, "
                    "per-call overhead, copy/read/write bandwidth by size), fit a 'local-host' CXL pool model "
                    "from them alone, measure the emulator's np=2 pool allgather (copy, zero-copy; hw, flush) "
                    "as held-out data, and print measured vs DES-predicted per size (times in us, sizes in "
                    "bytes per rank). With --from-osu: fit LogGP from osu_latency/osu_bw files and re-predict "
                    "the osu_allgather file. Either way a calibration profile (JSON) is written. An option "
                    "the chosen way of running does not use is an error.")
    p.add_argument("--from-osu", nargs="+", metavar="FILE", default=None,
                   help="OSU output files, any order: osu_latency (required) and osu_bw fit LogGP; an "
                        "osu_allgather file, if given, validates the fit; a window-1 osu_bibw (title 'window 1') "
                        "with the osu_latency of the same buffer state gives the measured exchange step")
    p.add_argument("--np", type=int, default=None, help="ranks (default 2): the emulator's np, or the "
                                                        "simulated nodes for --from-osu and --profile")
    p.add_argument("--preset", default=None, help="--from-osu: network preset whose other figures are kept "
                                                  "(default ib-hdr; LogGP and link latency are replaced)")
    p.add_argument("--memcpy-bandwidth", default=None, metavar="BW",
                   help="--from-osu: the host's copy bandwidth for MPICH's own-block copy, e.g. 12GB/s "
                        "(default: measure this machine's by size)")
    p.add_argument("--protocol-switch", default=None, metavar="SIZE",
                   help="--from-osu: the MPI library's eager switch (MPICH on one node: the CMA threshold, 8KiB); "
                        "places the LogGP regime split and the exchange terms")
    p.add_argument("--rendezvous-fin", action="store_true",
                   help="--from-osu: the switch is a rendezvous whose receiver acknowledges (MPICH's CMA); adds one "
                        "small-message latency per exchange step (needs --protocol-switch)")
    p.add_argument("--cache-bytes", default=None, metavar="SIZE",
                   help="--from-osu: the files' machine's private cache (L2) per core, e.g. 1MiB: an exchange step "
                        "whose two buffers exceed it takes the window-1 exchange of the largest size that fits "
                        "(needs an unchanged-buffer osu_bibw -W 1 file)")
    p.add_argument("--sizes", default=None, help="bytes per rank, LO:HI doubling or a list: local and --profile "
                                                 "(default 1B:1MiB), --from-osu without an osu_allgather file "
                                                 "(default: the osu_latency sizes)")
    p.add_argument("--rounds", type=int, default=None, help="local: interleaved rounds of allgather batches "
                                                         "(default 3; more on a noisy machine)")
    p.add_argument("--iterations", type=int, default=None,
                   help="local: timed iterations per size (default OMB's: 1000 up to 8 KiB, 100 above)")
    p.add_argument("--no-mpi", action="store_true", help="local: do not time MPI_Allgather even if MPI is installed")
    p.add_argument("--no-collectives", action="store_true",
                   help="local: do not measure and predict the other pool collectives (allreduce, reduce_scatter, "
                        "broadcast, alltoall, barrier; np 2 only) nor their fold and per-call primitives")
    p.add_argument("--timing", nargs="*", default=None, metavar="L/B",
                   help="local: also predict the emulator under injected CXL timing, e.g. 250ns/32GB/s "
                        "600ns/16GB/s (default: those two; give none to skip)")
    p.add_argument("--output", default=None, metavar="DIR",
                   help="local and --from-osu: workspace directory (default runs/calibrate-TIMESTAMP): profile.json, validation "
                        "CSV/JSON and PNG")
    p.add_argument("--validate-only", default=None, metavar="PROFILE",
                   help="check a profile file and print its validation table, measuring nothing")
    p.add_argument("--profile", default=None, metavar="PROFILE",
                   help="project with a saved profile instead of measuring: the allgather at --np and --sizes "
                        "(local-host: the DES in every mode; network: cxlsim.simulate with its LogGP)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def _workspace(args, name: str):
    from cxlsim.results import Workspace

    return Workspace(args.output) if args.output else Workspace.new("runs", name)


def _print_validation(profile: dict) -> None:
    rows = profile["validation"]
    if profile["kind"] == "network":
        return
    print(format_validation(rows), end="")


def main(args) -> int:
    _checked_mode(args)
    if args.validate_only:
        profile = load_profile(args.validate_only)
        print(f"# {args.validate_only}: a valid {profile['kind']} profile (schema {SCHEMA} v{VERSION}), "
              f"made {profile['provenance'].get('timestamp_utc')} on {profile['provenance'].get('hostname')}")
        placement = profile_placement(profile)
        if placement is not None:
            print(f"# host placement {placement['class']} (hw flag round trip {placement['roundtrip_ns']:.0f} ns"
                  + (")" if placement["recorded"] else "; not recorded in the profile: the class its model's round "
                     "trip implies)"))
        if profile["kind"] == "network":
            for row in profile["validation"]:
                if row.get("measured_ns") is None:
                    print(f"{row['size_bytes']:<12d}{'-':>12}{row['full_ns'] / 1e3:>12.2f}   (not validated: no "
                          "osu_allgather file)")
                    continue
                print(f"{row['size_bytes']:<12d}{row['measured_ns'] / 1e3:>12.2f}{row['full_ns'] / 1e3:>12.2f}"
                      f"{row['full_error'] * 100:>8.1f}%{'  (anchor)' if row['anchor'] else ''}")
        else:
            _print_validation(profile)
        return 0
    if args.profile:
        profile = load_profile(args.profile)
        sizes = _sizes_and_np(args)
        rows = predict_profile(profile, sizes, args.np)
        print(f"# allgather projected with {profile['kind']} profile {args.profile}, np {args.np} (us)")
        print(f"# {projection_note(profile, args.np)}")
        for r in rows:
            if profile["kind"] == "network":
                print(f"{r['size_bytes']:<12d}{r['full_ns'] / 1e3:>12.3f}   (pure LogGP {r['pure_ns'] / 1e3:.3f})")
            else:
                print(f"{r['coherence'] + ' ' + r['side']:<16}{r['size_bytes']:<12d}{r['predicted_ns'] / 1e3:>12.3f}")
        return 0
    if args.from_osu:
        memcpy = parse_option("--memcpy-bandwidth", args.memcpy_bandwidth, parse_bandwidth)
        switch = parse_option("--protocol-switch", args.protocol_switch, parse_size)
        cache = parse_option("--cache-bytes", args.cache_bytes, parse_size)
        result = from_osu(args.from_osu, nodes=args.np, base_preset=args.preset, memcpy_bw_bytes_per_ns=memcpy,
                          sizes=_sizes(args, default=None), protocol_switch_bytes=switch,
                          rendezvous_fin=bool(args.rendezvous_fin), cache_bytes=cache)
        sys.stdout.write(report_from_osu(result))
        workspace = _workspace(args, "calibrate-osu")
        profile = make_profile("network", result["model"], result["rows"])
        save_profile(workspace.file("profile.json"), profile)
        workspace.write_csv("validation", result["rows"])
        print(f"# profile: {workspace.file('profile.json')}")
        return 0
    return run_local_calibration(args)
