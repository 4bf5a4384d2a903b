"""EDDIS for real on the emulated pool, and the DES's projection of the same runs (issue 19 item 5).

Run: python experiments/eddis_local.py [--output DIR] [--profile PROFILE.json] [--repeats K] [--steps N]
                                       [--batch-size B] [--flush] [--np4] [--quick]
                                       [--reproject WORKSPACE]

What it does (write-up: experiments/README_eddis_local.md):

1. Measured against projected, per mode. `cxlsim bench train` at np 2 (the issue's target
   setting) in every mode: sync, ddp (overlap on and off), async, hybrid; each run is
   projected by the DES (cxlsim/train_projection.py) on this machine's local-host pool (a
   calibration profile: --profile, or `cxlsim calibrate` run here first), with one timing of
   this machine's vector pass for every projection, and each sync and ddp run's own recorded
   hand-off to its communication thread; async and hybrid with one timing of their
   exchange's operations right after a step's compute (cxlsim/train_costs.py: the region's
   copies, the ticket's call, hybrid's hand-off to its thread) per rank count, and each step's measured phases beside the DES's
   (section 1c). Runs are
   interleaved over `--repeats` rounds (every configuration once per round), so a load
   change hits every mode alike; each figure is the median over the rounds with its
   min-max. Throughput three ways (whole run, steady state, and over the undisturbed steps
   only, a diagnostic: the projection's docstring), and the time to the accuracies in TARGETS.
2. The modes' order by time to accuracy, measured and projected.
3. Each mode's speedup over one process (an np 1 sync run: no communication), measured
   and projected (the DES's projection of the np 1 run is the denominator).
4. Heterogeneity: the same at np 2 with per-rank slow-down factors 1,2 (rank 1 at half
   speed, a busy-wait of the work's own time), against the homogeneous speedups.
   With --flush also every mode at np 2 in flush coherence (1b).
5. With --np4: np 4, oversubscribed on this machine's 2 cores: reported outside the target.
6. The DES alone extends the modes to the published 16-node cluster
   (experiments/configs/eddis_16_nodes.yaml, GPU profile times, YOLOv5m and ResNet-50, AMP)
   with the pool designs the emulator runs: sync by a pool all-reduce, ddp on the pool,
   async and hybrid through per-worker pool slots (cxl3-pool, hw), merged by every reader or
   with a sharded centre (each worker merges 1/W of it: pool_shared's centre="sharded"), and the SoftMemoryBox
   store of the DES's EDDIS modes, each as a speedup over one RTX 2080 Ti node, next to
   EDDIS' published 8.2x (sync), 19x (async), 18.7x (hybrid).

Every emulated figure is from this machine, shared with other jobs: the script records the
load average around each run, and each run's host placement (`cxlsim bench train`'s
flag round trip). Outputs in a workspace (cxlsim.results): runs/*/train.json (every run),
projections.csv/json (one row per run), des_16_nodes.csv, summary.json, report.txt,
provenance.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

from cxlsim import train_costs, train_phases
from cxlsim import train_projection as tp
from cxlsim.calibrate.profile import load_profile
from cxlsim.coherence import Coherence
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.models.training import cluster, core, ddp, modes, pool_shared, pool_sync, profiles
from cxlsim.models.training.stragglers import multipliers
from cxlsim.results import Workspace, make_rng, provenance

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "configs", "eddis_16_nodes.yaml")
REFERENCE_GPU = "rtx2080ti"
PUBLISHED = {"sync": 8.2, "async": 19.0, "hybrid": 18.7}
"""EDDIS' published speedups of 16 heterogeneous nodes over one (papers.md)."""
SEED = 1
TARGETS = "0.8,0.9,0.92"
"""The test accuracies whose time to reach every run records (mlp on synthetic ends near 0.93 after 300 steps)."""
ACCURACY = 0.9
"""The accuracy whose time orders the modes and whose error the tables show (reached mid-run)."""
PROFILE_SIZES = "1KiB,16KiB,64KiB,128KiB,256KiB,1MiB"


def configurations(np4: bool, flush: bool) -> list[tuple[str, list[str]]]:
    """(label, bench train arguments) of every run of one round."""
    runs = [("np1 sync", ["--np", "1", "--mode", "sync"])]
    for factors in ("1,1", "1,2"):
        tag = "" if factors == "1,1" else " f1,2"
        for label, args in (("sync", ["--mode", "sync"]), ("ddp", ["--mode", "ddp", "--overlap", "on"]),
                            ("ddp-off", ["--mode", "ddp", "--overlap", "off"]), ("async", ["--mode", "async"]),
                            ("hybrid", ["--mode", "hybrid"])):
            runs.append((f"np2 {label}{tag}", ["--np", "2", *args, "--factors", factors]))
    if flush:
        for label, args in (("sync", ["--mode", "sync"]), ("ddp", ["--mode", "ddp"]), ("async", ["--mode", "async"]),
                            ("hybrid", ["--mode", "hybrid"])):
            runs.append((f"np2 {label} flush", ["--np", "2", *args, "--coherence", Coherence.FLUSH.value]))
    if np4:
        for label in ("sync", "ddp", "async", "hybrid"):
            runs.append((f"np4 {label}", ["--np", "4", "--mode", label]))
    return runs


def bench_train(out_dir: str, args: list[str], steps: int, batch: int) -> dict:
    """One `cxlsim bench train` run into out_dir; its record and the load average before and after."""
    before = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "cxlsim", "bench", "train", *args, "--steps", str(steps), "--batch-size",
           str(batch), "--seed", str(SEED), "--target-accuracy", TARGETS, "--out", out_dir]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return {"record": tp.load_run(out_dir), "load_before": before, "load_after": os.getloadavg()[0]}


def calibrate(workspace: Workspace) -> str:
    """A local-host profile of this machine, written into the workspace (`cxlsim calibrate`)."""
    out = workspace.file("calibration")
    cmd = [sys.executable, "-m", "cxlsim", "calibrate", "--sizes", PROFILE_SIZES, "--rounds", "2", "--timing",
           "--no-mpi", "--quiet", "--output", out]
    print("# calibrating this machine's pool:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, timeout=1800, capture_output=True)
    return os.path.join(out, "profile.json")


def spread(values) -> tuple:
    """(median, min, max) of the finite values, or (nan, nan, nan)."""
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return (math.nan,) * 3
    return statistics.median(vals), min(vals), max(vals)


def fmt(triple, pct=False, digits=0) -> str:
    med, lo, hi = triple
    if math.isnan(med):
        return "n/a"
    if pct:
        return f"{100 * med:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}]"
    return f"{med:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def tta_of(row, accuracy=ACCURACY, key="measured_s"):
    hit = next((t for t in row["time_to_accuracy"] if abs(t["accuracy"] - accuracy) < 1e-9), None)
    return None if hit is None else hit[key]


def report_projection(by_label: dict, labels: list[str]) -> list[str]:
    lines = [f"{'run':16} {'DES mode':7} {'thr whole: measured/s':>24} {'error':>22} {'steady error':>22} "
             f"{'calm-steps error':>22} {'calm share':>16} {f'TTA {ACCURACY} error':>22} {'placement':>9}"]
    for label in labels:
        rows = by_label[label]
        lines.append(f"{label:16} {rows[0]['mode']:7} {fmt(spread(r['measured_throughput'] for r in rows)):>24} "
                     f"{fmt(spread(r['throughput_error'] for r in rows), True):>22} "
                     f"{fmt(spread(r['steady_throughput_error'] for r in rows), True):>22} "
                     f"{fmt(spread(r['undisturbed_throughput_error'] for r in rows), True):>22} "
                     f"{fmt(spread(r['undisturbed_share'] for r in rows), digits=2):>16} "
                     f"{fmt(spread(tta_of(r, key='error') for r in rows), True):>22} "
                     f"{','.join(sorted({r['placement'] for r in rows})):>9}")
    return lines


def speedups(by_label: dict, labels: list[str], base: str) -> list[str]:
    lines = [f"{'run':16} {'measured speedup (whole)':>26} {'projected':>22} {'measured (calm steps)':>24} "
             f"{'projected':>22}"]
    for label in labels:
        rows, ones = by_label[label], by_label[base]
        pairs = list(zip(rows, ones))  # round k of the run against round k of np 1
        cols = []
        for key in ("throughput", "undisturbed_throughput"):
            cols.append(spread(r[f"measured_{key}"] / o[f"measured_{key}"] for r, o in pairs))
            cols.append(spread(r[f"projected_{key}"] / o[f"projected_{key}"] for r, o in pairs))
        lines.append(f"{label:16} " + " ".join(f"{fmt(c, digits=2):>22}" for c in cols))
    return lines


def order_by_tta(by_label: dict, labels: list[str]) -> list[str]:
    med = {lab: (spread(tta_of(r) for r in by_label[lab])[0], spread(tta_of(r, key="projected_s")
                                                                     for r in by_label[lab])[0]) for lab in labels}
    reached = [lab for lab in labels if not math.isnan(med[lab][0])]
    measured = sorted(reached, key=lambda lab: med[lab][0])
    projected = sorted(reached, key=lambda lab: med[lab][1])
    lines = [f"measured order by time to {ACCURACY}:  " + " < ".join(f"{lab} ({med[lab][0]:.3f} s)" for lab in measured),
             f"projected order by time to {ACCURACY}: " + " < ".join(f"{lab} ({med[lab][1]:.3f} s)" for lab in projected),
             f"same order (strict, the medians): {measured == projected}"]
    lines += resolved_pairs(by_label, reached)
    missing = [lab for lab in labels if lab not in reached]
    if missing:
        lines.append(f"not reached in the median run: {', '.join(missing)}")
    return lines


def resolved_pairs(by_label: dict, labels: list[str]) -> list[str]:
    """The pairs of runs whose measured times to ACCURACY the rounds resolve (the [min, max] ranges are apart),
    and whether the projection's medians order each such pair alike; the other pairs are tied within
    their spread, so no order of them is measured."""
    ranges = {lab: spread(tta_of(r) for r in by_label[lab]) for lab in labels}
    projected = {lab: spread(tta_of(r, key="projected_s") for r in by_label[lab])[0] for lab in labels}
    apart, tied = [], []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            first, second = sorted((a, b), key=lambda lab: ranges[lab][0])
            (apart if ranges[first][2] < ranges[second][1] else tied).append((first, second))
    alike = [projected[f] < projected[s] for f, s in apart]
    lines = [f"pairs the rounds resolve (measured [min, max] apart): {len(apart)} of {len(apart) + len(tied)}; "
             f"the projection orders {sum(alike)} of them alike"
             + "".join(f"; NOT {f} < {s}" for (f, s), ok in zip(apart, alike) if not ok),
             f"same order (spread-aware: every pair the measurement orders, ordered alike; a tied pair has no "
             f"measured order): {all(alike)}"]
    if tied:
        lines.append("tied within their spread (ranges overlap): " + ", ".join(f"{f} ~ {s}" for f, s in tied))
    return lines


def phase_report(by_label: dict, labels: list[str]) -> list[str]:
    """Per async or hybrid run: each measured phase of a step beside the DES's figure (train_phases), the median
    over the rounds."""
    lines = []
    for label in labels:
        rounds = [r["phases"] for r in by_label[label] if r.get("phases")]
        if not rounds:
            continue
        merged = []
        for i, row in enumerate(rounds[0]):
            values = [r[i] for r in rounds if len(r) > i and r[i]["phase"] == row["phase"]]
            merged.append({**row, **{key: spread(v[key] for v in values)[0] if row[key] is not None else None
                                     for key in ("measured_s", "des_s")}})
        lines += [f"### {label}"] + train_phases.format_phase_rows(merged)
    return lines


def exchange_lines(measured: dict) -> list[str]:
    """The report's header lines of the exchange costs measured after a step's compute, per rank count."""
    return [f"# async/hybrid exchange after a step's compute at np {key} (train_costs, lower quartile of "
            f"{c['repeats']}, us): push {c['push_ns'] / 1e3:.1f}, merge copy {c['read_ns'] / 1e3:.1f}, "
            f"ticket call {c['ticket_ns'] / 1e3:.1f}, hybrid's hand-off {c['handoff_ns'] / 1e3:.1f}; spread (min-max) "
            + ", ".join(f"{k} {lo / 1e3:.1f}-{hi / 1e3:.1f}" for k, (lo, hi) in c["spread_ns"].items())
            for key, c in sorted(measured.items())]


def exchange_costs(timings: dict, record: dict) -> train_costs.ExchangeCosts:
    """The exchange's costs after a step's compute for this run's ranks, measured once per rank count."""
    key = str(record["np"])
    if key not in timings.setdefault("exchange", {}):
        timings["exchange"][key] = train_costs.measure_exchange(record["model"], record["batch_size"],
                                                                record["np"]).to_dict()
    return train_costs.ExchangeCosts(**{k: tuple(v) if isinstance(v, list) else v
                                        for k, v in timings["exchange"][key].items()})


# ---------------------------------------------------------------- part 6: the DES alone, 16 nodes

def des_16_nodes(steps: int) -> list[dict]:
    """Every mode on the published 16-node cluster with the emulator's pool designs and the SoftMemoryBox store."""
    spec = cluster.load(CLUSTER)
    pool = get_cxl_preset("cxl3-pool")
    rows = []
    for model in ("yolov5m", "resnet50"):
        job = core.make_job(spec, model)
        ref = job.batch / profiles.iteration_ns(REFERENCE_GPU, model, job.batch, job.precision) * 1e9
        local = [[t] for t in job.iteration_ns]
        rng, _ = make_rng(SEED)
        J = multipliers(rng, steps, spec.size, 0.0)
        shared = dict(steps=steps, local_ns=local, pool=pool, coherence=Coherence.HW)
        runs = {
            "sync: pool all-reduce": (pool_sync.run_sync_allreduce, (spec, job, steps, SEED, J, None, {}),
                                      dict(pool=pool, coherence=Coherence.HW)),
            "ddp: pool all-reduce": (ddp.run_ddp, (spec, job), dict(steps=steps, seed=SEED, pool="cxl3-pool")),
            "async: pool slots": (pool_shared.run_async_on_pool, (spec, job), shared),
            "hybrid: pool slots": (pool_shared.run_hybrid_on_pool, (spec, job), shared),
            "async: sharded centre": (pool_shared.run_async_on_pool, (spec, job), {**shared, "centre": "sharded"}),
            "hybrid: sharded centre": (pool_shared.run_hybrid_on_pool, (spec, job), {**shared, "centre": "sharded"}),
            **{f"{m}: SoftMemoryBox": (modes.simulate, (spec, job, m), dict(steps=steps, seed=SEED))
               for m in ("sync", "async", "hybrid")},
        }
        for label, (run, pos, kw) in runs.items():
            t0 = time.perf_counter()
            result = run(*pos, **kw)
            mode = label.split(":")[0]
            rows.append({"model": model, "run": label, "mode": mode, "workers": spec.size, "steps": steps,
                         "throughput_samples_per_s": result.throughput_samples_per_s, "reference_samples_per_s": ref,
                         "speedup_over_reference": result.throughput_samples_per_s / ref,
                         "published_speedup": PUBLISHED.get(mode, ""), "events": result.events,
                         "wall_s": time.perf_counter() - t0})
            print(f"  16 nodes {model:8} {label:24} {rows[-1]['speedup_over_reference']:6.2f}x "
                  f"(published {PUBLISHED.get(mode, '-')})", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--output", default="results", help="parent directory of the workspace (default results)")
    p.add_argument("--profile", default=None, help="local-host calibration profile (default: calibrate here first)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every run (default 3)")
    p.add_argument("--steps", type=int, default=300, help="bench train steps per run (default 300)")
    p.add_argument("--batch-size", type=int, default=256, help="samples per rank and step (default 256)")
    p.add_argument("--des-steps", type=int, default=20, help="steps of the 16-node DES runs (default 20)")
    p.add_argument("--np4", action="store_true", help="also np 4 (oversubscribed on 2 cores, outside the target)")
    p.add_argument("--flush", action="store_true", help="also np 2 in flush coherence (every mode)")
    p.add_argument("--quick", action="store_true", help="1 round, 100 steps, 5 DES steps (a smoke run)")
    p.add_argument("--reproject", default=None, metavar="WORKSPACE",
                   help="project the runs of an earlier workspace again (its settings, loads and profile) instead "
                        "of running them")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.steps, args.des_steps = 1, 100, 5
    ws = Workspace.new(args.output, "eddis_local")
    commit_at_start = provenance(SEED)["git_commit"]  # the tree may change while the runs go on
    previous, timings = None, {}
    if args.reproject:  # the runs and the settings of an earlier workspace, projected again
        with open(os.path.join(args.reproject, "summary.json")) as fh:
            settings = json.load(fh)
        for key in ("repeats", "steps", "batch_size", "np4", "flush"):
            setattr(args, key, settings["args"][key])
        with open(os.path.join(args.reproject, "projections.json")) as fh:
            previous = {(r["label"], r["round"]): r for r in json.load(fh)}
        args.profile = args.profile or os.path.join(args.reproject, "calibration", "profile.json")
        timings.update(settings.get("timings") or {})  # the earlier run's, if it recorded them
    profile_path = args.profile or calibrate(ws)
    profile = load_profile(profile_path)
    runs = configurations(args.np4, args.flush)
    by_label, rows = {label: [] for label, _ in runs}, []
    for k in range(args.repeats):
        for label, bench_args in runs:
            name = os.path.join("runs", f"{label.replace(' ', '_').replace(',', '-')}-r{k}")
            if previous is None:
                got = bench_train(ws.file(name), bench_args, args.steps, args.batch_size)
            else:
                old = previous[label, k]
                got = {"record": tp.load_run(os.path.join(args.reproject, name)), "load_before": old["load_before"],
                       "load_after": old["load_after"]}
            if not timings:  # this machine's vector pass and thread hand-off (for runs that record none), timed once
                timings.update(pass_ns=train_costs.vector_pass_ns(got["record"]["param_count"]),
                               bucket_ns=train_costs.handoff_ns())
            own = tp.recorded_handoff_ns(got["record"]) is not None  # sync, ddp: the run's own hand-offs
            shared = got["record"]["mode"] in ("async", "hybrid")
            row = tp.project(got["record"], profile, pass_ns=timings["pass_ns"],
                             bucket_ns=None if own or shared else timings["bucket_ns"],
                             exchange=exchange_costs(timings, got["record"]) if shared else None)
            row.update(label=label, round=k, load_before=got["load_before"], load_after=got["load_after"])
            by_label[label].append(row)
            rows.append(row)
            print(f"  round {k} {label:14} measured {row['measured_throughput']:9.0f}/s  DES "
                  f"{row['projected_throughput']:9.0f}/s ({100 * row['throughput_error']:+.1f}%)  calm steps "
                  f"{100 * (row['undisturbed_throughput_error'] or math.nan):+.1f}% of {100 * row['undisturbed_share']:.0f}%"
                  f"  load {got['load_before']:.1f}", flush=True)
    homog = [lab for lab, _ in runs if lab.startswith("np2") and "f1,2" not in lab and "flush" not in lab]
    flushed = [lab for lab, _ in runs if "flush" in lab]
    hetero = [lab for lab, _ in runs if "f1,2" in lab]
    wide = [lab for lab, _ in runs if lab.startswith("np4")]
    loads = [r["load_before"] for r in rows] + [r["load_after"] for r in rows]
    recorded = [r["des"]["bucket_handoff_ns"] / 1e3 for r in rows if r["des"].get("bucket_handoff_source") == "run"]
    hand_range = f"{min(recorded):.1f}-{max(recorded):.1f} us" if recorded else "none recorded"
    text = [f"# eddis_local: {args.repeats} round(s), {args.steps} steps x batch {args.batch_size}, mlp on synthetic, "
            f"pool shm, hw unless a row says flush; profile {profile_path}; load average (1 min) {min(loads):.1f}-{max(loads):.1f} over the "
            f"runs on a {os.cpu_count()}-CPU machine; vector pass {timings['pass_ns'] / 1e3:.1f} us, thread "
            f"hand-off {timings['bucket_ns'] / 1e3:.1f} us (timed once, for a run that records none); sync and ddp: each run's recorded "
            f"hand-off per call, {hand_range}",
            *exchange_lines(timings.get("exchange") or {}),
            "# figures: median over the rounds [min, max]", "",
            "## 1. measured vs projected, np 2 (target: |throughput error| <= 15%)"]
    text += report_projection(by_label, ["np1 sync"] + homog)
    text += ["", "## 1c. where an async or hybrid step goes: each measured phase beside the DES's (us, median over "
                 "the rounds; cxlsim/train_phases.py)"]
    text += phase_report(by_label, [lab for lab in homog + flushed if by_label[lab][0]["mode"] in ("async", "hybrid")])
    text += ["", "## 2. order by time to accuracy, np 2"] + order_by_tta(by_label, homog)
    text += ["", "## 3. speedup over one process (np 1 sync)"] + speedups(by_label, homog, "np1 sync")
    text += ["", "## 4. heterogeneity: factors 1,2 (rank 1 at half speed)"] + report_projection(by_label, hetero)
    text += speedups(by_label, hetero, "np1 sync")
    if flushed:
        text += ["", "## 1b. measured vs projected, np 2, flush coherence"] + report_projection(by_label, flushed)
    if wide:
        text += ["", "## 5. np 4, oversubscribed on 2 cores (outside the target)"] + report_projection(by_label, wide)
    text += ["", "## 6. the DES alone: the published 16-node cluster (speedup over one RTX 2080 Ti node)"]
    des_rows = des_16_nodes(args.des_steps)
    text += [f"{r['model']:8} {r['run']:24} {r['speedup_over_reference']:6.2f}x   published {r['published_speedup']}"
             for r in des_rows]
    report = "\n".join(text) + "\n"
    print(report)
    flat = [{k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in r.items()} for r in rows]
    ws.write_csv("projections", flat)
    ws.write_json("projections", rows)
    ws.write_csv("des_16_nodes", des_rows)
    ws.write_json("summary", {"args": vars(args), "profile": profile_path, "load_range": [min(loads), max(loads)],
                              "timings": timings,
                              "report": text})
    ws.write_text("report.txt", report)
    ws.write_provenance(SEED, profile=profile_path, reprojected=args.reproject, git_commit_at_start=commit_at_start)
    print(f"# workspace: {ws.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
