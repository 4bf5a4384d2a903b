"""Issue 18 item 2, the 1 MiB row: the exchange step's excess beyond the L2 (256 KiB-4 MiB, CMA on, np 2).

Run:  python experiments/osu_hypotheses/large_rows.py [--rounds 6] [--output DIR]
      python experiments/osu_hypotheses/large_rows.py --check DIR    # the tables and verdicts of DIR/raw.csv again
      python experiments/osu_hypotheses/large_rows.py --max-bytes 1048576 --batches 20 [--window64]
          # the rotation's A/B: without and with run_hypotheses.py's window-64 tables between the batches

The x-w1 model takes an exchange step's cost as a one-way message plus the excess of a window-1
osu_bibw over osu_latency (unchanged buffers). The question: does that excess follow what the
allgather's own step pays (allgather - rewritten-buffer latency) beyond the size at which one
exchange's two buffers (send k + receive k) outgrow a core's L2 (1 MiB here: k > 512 KiB)?
Per size and round it measures, batch by batch in turn in one mpirun (osu_loops.c):
  lat, bw1, bibw1            unchanged buffers (osu_latency, osu_bw -W 1, osu_bibw -W 1)
  fresh, freshbw1, freshbibw1 the same with the send buffer rewritten before each send
  allgather                  MPI_Allgather
and prints, from the fastest batch of each over the rounds (us per iteration):
  excess unchanged = bibw1 - lat, excess rewritten = freshbibw1 - fresh, allgather's = allgather - fresh,
  c = bibw1 / bw1 and freshbibw1 / freshbw1 (both directions against one), each excess per KiB, and
  the unchanged excess held at its per-byte value at 512 KiB (the largest exchange whose buffers fit L2).
Last three columns, the step error (fresh + the step's excess) / allgather - 1 with the measured unchanged
excess (x-w1), with the one held at 512 KiB (x-w1-l2, `--cache-bytes 1MiB`) and with the rewritten excess
freshbibw1 - fresh (x-w1-fresh, the model from session 26 on: README "The exchange's excess").
Each round records the load and the hw flag round trip before and after it (the host placement,
set_validity.round_placement), and the table is printed for the rounds of each placement apart, since
the slow placement slows the rewritten-buffer transfers 3-7x and not the unchanged ones; a round whose
probes disagree (mixed) or were both disturbed (unknown) is left out. Each placement's table ends with its
verdict (`verdict`): it answers only with 2 rounds or more and, at 512 KiB and every larger size, one round
that reproduces all seven tables within 10% (set_validity's rules 4 and 2). Every table also
goes into raw.csv with every round's fastest and median batch.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile

from osu_files import BANDWIDTHS
from run_hypotheses import build, loadavg, run_round
from set_validity import AGREE, MIN_ROUNDS, round_placement

from cxlsim.emulator.host import probe_roundtrip_ns
from cxlsim.results import Workspace

TABLES = ("latency", "fresh", "bw1", "bibw1", "freshbw1", "freshbibw1", "allgather")
L2_FIT = 512 << 10  # the largest k whose exchange (send k + receive k) fits this machine's 1 MiB L2 per core


def times_us(bench: str, size: int, value: float) -> float:
    """us per iteration: bandwidth tables (MB/s) become the time of their bytes (both ways for bibw)."""
    if bench not in BANDWIDTHS:
        return value
    if value <= 0:  # a batch printed as 0.00 MB/s: too slow to time at this resolution
        return float("inf")
    return (2 if "bibw" in bench else 1) * size / value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--max-bytes", type=int, default=4 << 20)
    ap.add_argument("--output", help="workspace directory (default runs/osu_large_rows-TIMESTAMP)")
    ap.add_argument("--window64", action="store_true",
                    help="also run osu_bw and osu_bibw at window 64 in the rotation, as run_hypotheses.py does "
                         "(their 64 buffers per message stream through the caches between the other tables' batches)")
    ap.add_argument("--batches", type=int, default=10, help="batches per size (OSU's iterations split over them)")
    ap.add_argument("--check", metavar="DIR", help="re-print and re-write the tables of an earlier run's DIR/raw.csv")
    args = ap.parse_args(argv)
    if args.check:
        if args.output or args.window64 or args.rounds != 6 or args.batches != 10 or args.max_bytes != 4 << 20:
            ap.error("--check reads an earlier run; the other options apply to a new measurement")
        report(Workspace(args.check), read_raw(os.path.join(args.check, "raw.csv")))
        return 0
    tables = TABLES + (("bw", "bibw") if args.window64 else ())
    ws = Workspace(args.output) if args.output else Workspace.new("runs", "osu_large_rows")
    raw = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        for r in range(args.rounds):
            before, probe_before = loadavg(), probe_roundtrip_ns()
            result = run_round(exe, {}, args.max_bytes, tables, batches=args.batches)
            after, probe_after = loadavg(), probe_roundtrip_ns()
            where = round_placement(probe_before, probe_after)
            print(f"round {r + 1}/{args.rounds}: load {before} -> {after}; hw flag round trip "
                  f"{probe_before:.0f} -> {probe_after:.0f} ns ({where})", flush=True)
            for bench, rows in result.items():
                for size, (med, low, high) in rows.items():
                    fast = times_us(bench, size, high if bench in BANDWIDTHS else low)
                    raw.append({"round": r + 1, "benchmark": bench, "size_bytes": size,
                                "fastest_us": round(fast, 3), "median_us": round(times_us(bench, size, med), 3),
                                "load_before": before, "load_after": after,
                                "roundtrip_before_ns": round(probe_before, 1),
                                "roundtrip_after_ns": round(probe_after, 1), "placement": where})
    ws.write_csv("raw", raw)
    ws.write_json("measurement", {"rounds": args.rounds, "batches": args.batches, "max_bytes": args.max_bytes,
                                  "tables": list(tables), "cma": "on (the wheel's default)",
                                  "placement": "2 ranks, unpinned (hydra default), one node, 2 vCPUs (KVM)",
                                  "l2_per_core_bytes": 1 << 20})
    ws.write_provenance(0)
    report(ws, raw)
    return 0


def read_raw(path: str) -> list:
    """raw.csv of an earlier run, with its numbers as numbers."""
    with open(path) as fh:
        return [{**row, "round": int(row["round"]), "size_bytes": int(row["size_bytes"]),
                 "fastest_us": float(row["fastest_us"]), "median_us": float(row["median_us"])}
                for row in csv.DictReader(fh)]


def report(ws: Workspace, raw: list) -> None:
    """Per placement, the table and its verdict, printed and written to large_rows.txt / large_rows.csv."""
    best = {}  # {(placement, benchmark, size): fastest us over that placement's rounds}
    for row in raw:
        key = (row["placement"], row["benchmark"], row["size_bytes"])
        best[key] = min(best.get(key, row["fastest_us"]), row["fastest_us"])
    lines, rows = [], []
    placements = list({row["round"]: row["placement"] for row in raw}.values())  # per round, in order
    for where in ("fast", "slow"):
        if where in placements:
            lines.extend(table(where, placements.count(where), {key[1:]: v for key, v in best.items()
                                                                if key[0] == where}, rows))
            lines.append(verdict([row for row in raw if row["placement"] == where]))
        else:
            lines.append(f"# {where} placement: not observed")
    left_out = [f"{r + 1} {p}" for r, p in enumerate(placements) if p not in ("fast", "slow")]
    if left_out:
        lines.append("# rounds left out (no one placement): " + ", ".join(left_out))
    ws.write_csv("large_rows", rows)
    text = "\n".join(lines) + "\n"
    ws.write_text("large_rows.txt", text)
    print(text, end="")
    print(f"workspace: {ws.path}")


def verdict(raw: list) -> str:
    """Whether one placement's rounds (`raw`: their raw.csv rows) can answer the question: at least MIN_ROUNDS
    rounds (set_validity rule 4), and at 512 KiB (where the bound is held) and every larger size one round whose
    fastest batch of every table lies within AGREE of the placement's fastest (rule 2's common round)."""
    rounds = {row["round"] for row in raw}
    per = {}
    for row in raw:
        per.setdefault((row["benchmark"], row["size_bytes"]), {})[row["round"]] = row["fastest_us"]
    bad = []
    for size in sorted({s for (b, s) in per if b == "allgather" and s >= L2_FIT}):
        common = set(rounds)
        for bench in TABLES:
            times = per[bench, size]
            common &= {r for r, t in times.items() if t <= (1.0 + AGREE) * min(times.values())}
        if not common:
            bad.append(size)
    reasons = ([f"{len(rounds)} round (rule 4 needs {MIN_ROUNDS})"] if len(rounds) < MIN_ROUNDS else []) + (
        [f"no round reproduces every table at {', '.join(str(s >> 10) for s in bad)} KiB"] if bad else [])
    return "# verdict: " + ("valid" if not reasons else "too disturbed: " + "; ".join(reasons))


def table(where: str, rounds: int, best: dict, rows: list) -> list:
    """The lines of one placement's table; its rows are appended to `rows`."""
    sizes = sorted(s for (b, s) in best if b == "allgather" and s >= 128 << 10)
    per_kib_fit = (best["bibw1", L2_FIT] - best["latency", L2_FIT]) / (L2_FIT >> 10)
    lines = [f"# {where} placement ({rounds} round(s)): fastest batch over its rounds, us per iteration; excess per "
             "KiB in ns; step error = (fresh + the step's excess) / allgather - 1 with the measured unchanged excess "
             "(exc: x-w1), the one held at 512 KiB (exc@512K: x-w1-l2, the --cache-bytes bound) or the rewritten "
             "excess (exc(f): x-w1-fresh) (the allgather's ~1 us overhead left out)",
             f"{'size':>8} {'lat':>8} {'fresh':>8} {'bw1':>8} {'bibw1':>8} {'fbw1':>8} {'fbibw1':>8} {'allg':>8} "
             f"{'c':>5} {'c(f)':>5} {'exc':>7} {'exc(f)':>7} {'allg-f':>7} {'exc/KiB':>7} {'(f)/KiB':>7} "
             f"{'allg/KiB':>8} {'exc@512K':>8} {'err x-w1':>8} {'err -l2':>8} {'err -f':>8}"]
    for s in sizes:
        t = {b: best[b, s] for b in TABLES}
        row = {"size_bytes": s, **{f"{b}_us": round(v, 3) for b, v in t.items()},
               "c_unchanged": t["bibw1"] / t["bw1"], "c_rewritten": t["freshbibw1"] / t["freshbw1"],
               "excess_unchanged_us": t["bibw1"] - t["latency"], "excess_rewritten_us": t["freshbibw1"] - t["fresh"],
               "allgather_step_excess_us": t["allgather"] - t["fresh"],
               "excess_unchanged_held_at_512k_us": per_kib_fit * (s >> 10)}
        row["step_error_x_w1"] = (t["fresh"] + row["excess_unchanged_us"]) / t["allgather"] - 1.0
        row["step_error_x_w1_l2"] = (t["fresh"] + row["excess_unchanged_held_at_512k_us"]) / t["allgather"] - 1.0
        row["step_error_x_w1_fresh"] = (t["fresh"] + row["excess_rewritten_us"]) / t["allgather"] - 1.0
        rows.append({"placement": where, **row})
        kib = s >> 10
        lines.append(f"{s:>8d} " + " ".join(f"{t[b]:>8.1f}" for b in TABLES)
                     + f" {row['c_unchanged']:>5.2f} {row['c_rewritten']:>5.2f} {row['excess_unchanged_us']:>+7.1f} "
                     f"{row['excess_rewritten_us']:>+7.1f} {row['allgather_step_excess_us']:>+7.1f} "
                     f"{1e3 * row['excess_unchanged_us'] / kib:>7.1f} {1e3 * row['excess_rewritten_us'] / kib:>7.1f} "
                     f"{1e3 * row['allgather_step_excess_us'] / kib:>8.1f} "
                     f"{row['excess_unchanged_held_at_512k_us']:>+8.1f} {100 * row['step_error_x_w1']:>+7.1f}% "
                     f"{100 * row['step_error_x_w1_l2']:>+7.1f}% {100 * row['step_error_x_w1_fresh']:>+7.1f}%")
    return lines


if __name__ == "__main__":
    sys.exit(main())
