"""Calibration error: the DES fitted from this machine's primitives against the held-out allgather.

    python benchmarks/calibration_error.py [--sizes 1B:1MiB] [--rounds 3] [--np 2] [--oversubscribed 4]
                                           [--settings 250ns/32GB/s 600ns/16GB/s] [--path-rule auto|pingpong|sync]
                                           [--profile PROFILE.json] [--no-mpi] [--no-collectives] [--out DIR]
                                           [--fast-roundtrip 200] [--wait 120] [--attempts 3]

Runs the whole of issue 5 in one go and prints each target with ok/MISS:
1. `cxlsim.calibrate.calibrate_local`: primitives (flag round trip, flush, per-call
   overhead, copy/write/read passes), the local-host model fitted from them alone, the
   emulator's pool allgather at np = 2 (hw and flush, copy and zero-copy; interleaved,
   medians, slow-placement batches flagged and repeated) predicted by the DES;
   target: median |error| <= 10% and no size worse than 25%, per mode;
2. the same emulator under injected CXL timing (each --settings L/B), predicted by the
   DES with cxl_ops.h's charges; target: median |error| <= 15%;
3. `--from-osu` on the shipped OSU files (cxlsim/data/osu); target: median <= 15% (the
   'full' variant, the anchor row left out; the pure LogGP figure is printed beside it);
4. the pool collectives in blocks (allgather copy and zero-copy, allreduce, reduce_scatter, broadcast, alltoall,
   barrier; issue 14 item 7; 4 B-1 MiB, whole float32s) at np = 2, predicted by the same model with the fold,
   per-call, pattern and flag exchange primitives measured beside each call (`cxlsim.calibrate.collective_blocks`), both modes; target per collective
   and mode: median |error| <= 10%, worst size <= 25%, in each host placement its blocks were measured in
   ('slow' rows: the slow placement's), with the sizes held out and the blocks behind each printed;
   before part 1's rows are predicted, the allgather's copy primitives are checked against the same copies
   timed in part 4's blocks (`cxlsim.calibrate.consistency`: a primitive more than 1.5x slower is refused),
   and the count of sizes compared, agreeing and refused is printed;
5. with --oversubscribed N (> cores): the same at np = N, reported, not held to targets.
Everything is saved in --out (profile.json, validation CSV, PNG).

Host placement. This machine's two vCPUs sit in a fast placement (hw flag round trip 55-110 ns)
or, often for tens of seconds, a slow one (440-500 ns). Within a run, batches in the slow one
are flagged against the best round trip seen; a run made entirely in it has nothing to be
flagged against, so the script waits for the fast placement before it starts (probing the round
trip, at most --wait seconds) and repeats a run whose fitted round trip is still above
--fast-roundtrip (at most --attempts runs; 0 ns turns this off). Every attempt is reported.
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time

from cxlsim import calibrate as cal
from cxlsim.calibrate.allreduce_threshold import algorithm_errors
from cxlsim.calibrate.collective_measure import jobs_line
from cxlsim.calibrate.collectives import summarize_collectives, summary_line
from cxlsim.calibrate.consistency import summary as consistency_summary
from cxlsim.coherence import Coherence
from cxlsim.emulator.host import placement_of
from cxlsim.results import Workspace
from cxlsim.units import parse_sizes

HERE = os.path.dirname(os.path.abspath(__file__))


def _verdict(ok: bool, measured: bool = True) -> str:
    if not measured:
        return "UNMEASURED (every point was disturbed or in a slow placement: run again)"
    return "ok" if ok else "MISS"


def collective_line(key: str, s: dict) -> str:
    """One collective and mode's target line (`summarize_collectives`'s `s`); with no held-out size, no error
    figure (the left-out points' error says nothing of the model)."""
    if not s["measured"]:
        return f"    {key:<30} no error: {summary_line(s)}: {_verdict(False, False)}"
    return (f"    {key:<30} median |error| {s['median'] * 100:5.1f}% (<= 10%), worst {s['worst'] * 100:5.1f}% "
            f"at {s['worst_size']} B (<= 25%); {summary_line(s)}: {_verdict(s['met'])}")


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def probe_roundtrip_ns() -> float:
    """The hw flag round trip now (ns): a short ping-pong between two fresh processes."""
    from cxlsim.emulator.launch import run_local

    def job(comm):
        comm.flag_pingpong(2000)
        return min(comm.flag_pingpong(2000) for _ in range(3))
    return max(run_local(2, job, coherence=Coherence.HW, slot_bytes=64))


def wait_for_fast_placement(limit_ns: float, wait_s: float, step) -> float:
    """Probe the round trip until it is at most `limit_ns` or `wait_s` have passed; returns the last probe."""
    end = time.time() + wait_s
    while True:
        rt = probe_roundtrip_ns()
        if rt <= limit_ns or time.time() >= end:
            return rt
        step(f"slow host placement (hw flag round trip {rt:.0f} ns > {limit_ns:.0f} ns): waiting")
        time.sleep(5.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1B:1MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--oversubscribed", type=int, default=0, help="also run at this np (> cores) and report")
    parser.add_argument("--settings", nargs="*", default=["250ns/32GB/s", "600ns/16GB/s"])
    parser.add_argument("--no-mpi", action="store_true")
    parser.add_argument("--no-collectives", action="store_true", help="skip the other pool collectives (item 4)")
    parser.add_argument("--path-rule", choices=("auto", "sync", "pingpong"), default="auto",
                        help="how the DES path is solved from the flag round trip: auto = sync in hw mode, "
                             "pingpong in flush mode (see calibrate.des.AUTO_PATH_RULE)")
    parser.add_argument("--profile", default=None, help="predict with this saved local-host profile's model "
                                                        "instead of fitting one now (cxlsim calibrate writes them)")
    parser.add_argument("--fast-roundtrip", type=float, default=200.0, metavar="NS",
                        help="hw flag round trip (ns) above which a run is taken to be in this machine's slow "
                             "host placement (default 200; 0: never wait or repeat)")
    parser.add_argument("--wait", type=float, default=120.0, metavar="S",
                        help="longest wait for the fast placement before each attempt, s (default 120)")
    parser.add_argument("--attempts", type=int, default=3, help="runs at most, while in the slow placement (default 3)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.attempts < 1:
        parser.error(f"--attempts: expected >= 1, got {args.attempts}")
    sizes = parse_sizes(args.sizes)
    ws = Workspace(args.out) if args.out else Workspace.new("runs", "calibration-error")
    t0 = time.time()
    load_before = _loadavg()

    def step(what):
        print(f"  [{time.time() - t0:6.1f} s] {what}", file=sys.stderr, flush=True)

    profile = cal.load_profile(args.profile) if args.profile else None
    for attempt in range(1, args.attempts + 1):
        if args.fast_roundtrip > 0:
            wait_for_fast_placement(args.fast_roundtrip, args.wait, step)
        result = cal.calibrate_local(sizes, args.np, args.rounds, None, cal.parse_settings(args.settings),
                                     not args.no_mpi, step, args.path_rule, profile,
                                     collectives=not args.no_collectives and args.np == 2)
        rt_hw = result["model"].roundtrip_ns[Coherence.HW]
        if not args.fast_roundtrip or rt_hw <= args.fast_roundtrip:
            break
        print(f"# attempt {attempt}: made in the slow host placement (hw flag round trip {rt_hw:.0f} ns > "
              f"{args.fast_roundtrip:.0f} ns){'; repeated' if attempt < args.attempts else '; no attempts left'}")

    class Args:
        output = ws.path
    cal.report_local(Args, result)
    ok_all = True
    rt = result["model"].roundtrip_ns
    slow = args.fast_roundtrip > 0 and rt[Coherence.HW] > args.fast_roundtrip
    print("\n# targets (np = %d, %s; host placement: flag round trip hw %.0f ns, flush %.0f ns%s)"
          % (args.np, args.sizes, rt[Coherence.HW], rt[Coherence.FLUSH], ": the SLOW placement" if slow else ""))
    for key, s in cal.summarize(result["validation"]).items():
        ok = s["n"] > 0 and s["median"] <= cal.TARGET_MEDIAN and s["worst"] <= cal.TARGET_WORST
        ok_all &= ok
        print(f"  {key:<16} median |error| {s['median'] * 100:5.1f}% (<= 10%), worst {s['worst'] * 100:5.1f}% "
              f"at {s['worst_size']} B (<= 25%) over {s['n']} sizes ({s['excluded']} left out): {_verdict(ok, s['n'] > 0)}")
    if result.get("consistency") is not None:  # the allgather rows above are predicted after this check
        print(f"  primitives' self-consistency: {consistency_summary(result['consistency'])}"
              " (refused sizes: the profile's 'primitive_checks' and the lines above)")
    if result["injected"]:
        kept = [abs(r["error"]) for r in result["injected"] if cal.comparable(r)]
        med = statistics.median(kept) if kept else float("nan")
        ok = bool(kept) and med <= cal.TARGET_INJECTED
        ok_all &= ok
        print(f"  injected timing  median |error| {med * 100:5.1f}% (<= 15%) over {len(kept)} of "
              f"{len(result['injected'])} points: {_verdict(ok, bool(kept))}")
        for key, s in cal.summarize(result["injected"]).items():
            print(f"    {key:<28} median {s['median'] * 100:5.1f}%, worst {s['worst'] * 100:5.1f}% at {s['worst_size']} B")
    coll = result.get("collectives")
    if coll:
        print(f"  the pool collectives in blocks (np 2; host placement {coll['placement']}: best hw flag round trip "
              f"{coll['best_roundtrip_ns'][Coherence.HW]:.0f} ns; {jobs_line(coll['jobs'])}):")
        for key, s in summarize_collectives(coll["rows"]).items():
            ok_all &= s["met"]
            print(collective_line(key, s))
    threshold = result.get("allreduce_threshold")
    if threshold and threshold["np"] == args.np:
        print(f"  allreduce by algorithm, the threshold's calls held out ({threshold['coherence']}, placement "
              f"{threshold['placement']}; reported, no target: the rows above run the large one from "
              f"{threshold['allreduce_large_bytes']} B only; measured: the slowest rank's per-call mean, one "
              f"median over {threshold['rounds']} rounds, predicted: the DES's mean over the ranks, so a few % short "
              f"by construction):")
        model_placement = placement_of(rt[Coherence.HW])
        if threshold["placement"] != model_placement:
            print(f"    not compared: the threshold's calls ran in the {threshold['placement']} placement, the model's "
                  f"primitives in the {model_placement} one")
        for name, s in (algorithm_errors(result["model"], threshold) if threshold["placement"] == model_placement
                        else {}).items():
            print(f"    {name:<6} median |error| {s['median'] * 100:5.1f}%, worst {s['worst'] * 100:5.1f}% at "
                  f"{s['worst_size']} B; " + ", ".join(f"{n >> 10} KiB {e * 100:+.0f}%" for n, _, _, e in s["rows"]))
    files = sorted(glob.glob(os.path.join(HERE, "..", "cxlsim", "data", "osu", "*.txt")))
    osu = cal.from_osu(files, nodes=2)
    print(cal.report_from_osu(osu), end="")
    kept = [abs(r["full_error"]) for r in osu["rows"] if not r["anchor"]]
    pure = statistics.median(abs(r["pure_error"]) for r in osu["rows"])
    ok = statistics.median(kept) <= 0.15
    ok_all &= ok
    print(f"  --from-osu       median |error| {statistics.median(kept) * 100:5.1f}% with the labelled overhead + "
          f"own-block copy (<= 15%): {_verdict(ok)}; pure LogGP {pure * 100:.1f}%")
    ws.write_csv("from_osu", osu["rows"])
    if args.oversubscribed:
        over = cal.calibrate_local(sizes, args.oversubscribed, 1, None, (), False, step, args.path_rule, collectives=False)
        print(f"\n# np = {args.oversubscribed} on {over['cores']} cores (oversubscribed; reported, no target)")
        print(cal.format_validation(over["validation"]), end="")
        for key in sorted({f"{r['coherence']} {r['side']}" for r in over["validation"]}):
            errs = [abs(r["error"]) for r in over["validation"] if f"{r['coherence']} {r['side']}" == key]
            print(f"  np {args.oversubscribed} {key:<16} median |error| {statistics.median(errs) * 100:5.1f}% over all "
                  f"{len(errs)} sizes (every run oversubscribed: the OS's scheduling, which the DES does not model)")
        ws.write_csv("validation_oversubscribed", over["validation"],
                     ["coherence", "side", "size_bytes", "measured_ns", "predicted_ns", "error", "batches"])
    print(f"# load average (1, 5, 15 min) at the start {load_before}, at the end {_loadavg()}: other jobs on this "
          f"machine's {len(os.sched_getaffinity(0))} CPUs disturb blocks and batches (counted above)")
    print(f"# all targets met: {ok_all}   ({time.time() - t0:.0f} s; results in {ws.path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
