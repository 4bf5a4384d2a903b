"""The disturbed rows and sizes of an OMB-style set, from its rounds' repeats (issue 18 item 2; run_hypotheses.py's
check reads them): a row slower than the next larger size's, the rounds that reproduce a set's figure, a size whose
tables no single round reproduces, and the exchange A/B table of a set. Times in us, sizes in bytes."""
from __future__ import annotations

import csv
import os
import statistics

from osu_files import BANDWIDTHS, BENCHMARKS
from set_validity import AGREE, MIN_ROUNDS

from cxlsim.emulator.osu import parse_osu

CMA_THRESHOLD = 8192  # MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD of the mpich 5.0.2 wheel (mpivars)


def spread_by_size(sets_dir: str, cma: str) -> dict:
    """{size: (max - min) / median of the per-round allgather medians}: the measurement's own spread."""
    per = {}
    with open(os.path.join(sets_dir, "raw.csv")) as fh:
        for row in csv.DictReader(fh):
            if row["cma"] == cma and row["benchmark"] == "allgather":
                per.setdefault(int(row["size_bytes"]), []).append(float(row["batch_median"]))
    return {s: (max(v) - min(v)) / statistics.median(v) for s, v in per.items()}


def exchange_ab(sets_dir: str, statistic: str, cma: str) -> list:
    """The exchange hypotheses side by side per size (us per iteration): one direction against both at
    once, at window 64 and window 1, unchanged and rewritten buffers; [] if the set lacks the tables."""
    def times(bench):
        path = os.path.join(sets_dir, statistic, f"osu_{bench}_{cma}.txt")
        if not os.path.exists(path):
            return None
        with open(path) as fh:
            [table] = parse_osu(fh.read(), source=path)
        ways = 2 if "bibw" in bench else 1
        # a bandwidth printed as 0.00 MB/s (a batch too slow for the format's resolution) is an unbounded time
        return {s: ((ways * s / v if v > 0 else float("inf")) if bench in BANDWIDTHS else v)
                for s, v in table.rows if s > 0}

    t = {b: times(b) for b in BENCHMARKS}
    if any(v is None for v in t.values()):
        return []
    lines = [f"\n## {statistic} set, {cma}: exchange A/B (us per iteration; c = both ways / one way)",
             f"{'size':>8} {'lat':>7} {'fresh':>7} {'bw1':>7} {'bibw1':>7} {'fbw1':>7} {'fbibw1':>7} {'allg':>7} "
             f"{'c(W64)':>7} {'c(W1)':>6} {'c(W1f)':>6} {'bibw1-lat':>9} {'fbibw1-fresh':>12}"]
    for size in sorted(t["allgather"]):
        if size < 1024:
            continue
        c64 = t["bibw"][size] / t["bw"][size]  # = 2 bw / bibw: per message, both ways against one way
        lines.append(f"{size:>8d} {t['latency'][size]:>7.2f} {t['fresh'][size]:>7.2f} {t['bw1'][size]:>7.2f} "
                     f"{t['bibw1'][size]:>7.2f} {t['freshbw1'][size]:>7.2f} {t['freshbibw1'][size]:>7.2f} "
                     f"{t['allgather'][size]:>7.2f} {c64:>7.2f} {t['bibw1'][size] / t['bw1'][size]:>6.2f} "
                     f"{t['freshbibw1'][size] / t['freshbw1'][size]:>6.2f} "
                     f"{t['bibw1'][size] - t['latency'][size]:>+9.2f} {t['freshbibw1'][size] - t['fresh'][size]:>+12.2f}")
    return lines


def disturbed_rows(sets_dir: str, statistic: str, cma: str) -> dict:
    """{benchmark: [sizes]} of the latency-type tables' rows from the CMA threshold up that took longer
    than the next larger size's row. There the byte part dominates (a doubling adds 20-100%), so on a
    quiet machine the time grows with the size, and such a row was slowed by other jobs in every
    batch the statistic saw. (Below it the times are flat within their noise, and the test says nothing.)"""
    out = {}
    for bench in ("latency", "fresh", "allgather"):
        path = os.path.join(sets_dir, statistic, f"osu_{bench}_{cma}.txt")
        if not os.path.exists(path):
            continue
        with open(path) as fh:
            [table] = parse_osu(fh.read(), source=path)
        rows = sorted((s, v) for s, v in table.rows if s >= CMA_THRESHOLD)
        slow = [s for (s, v), (_, after) in zip(rows, rows[1:]) if v > after]
        if slow:
            out[bench] = slow
    return out


def describe_disturbed(rows: dict) -> str:
    return "; ".join(f"{b} {', '.join(str(s) for s in sizes)}" for b, sizes in rows.items()) or "none"


def reproducing_rounds(sets_dir: str, statistic: str, cma: str) -> dict:
    """{(benchmark, size): rounds} whose own figure (the round's fastest batch for `fastest`, its median batch for
    `median`) lies within AGREE of the set's figure (the fastest over rounds, or the median over rounds).
    Bandwidths are compared as times (1 / bandwidth)."""
    column = {"fastest": "batch_fastest", "median": "batch_median"}[statistic]
    per = {}
    with open(os.path.join(sets_dir, "raw.csv")) as fh:
        for row in csv.DictReader(fh):
            value = float(row[column])
            if row["cma"] == cma and value > 0:  # a 0 MB/s row (0 B) has no time to compare
                time = 1.0 / value if row["benchmark"] in BANDWIDTHS else value
                per.setdefault((row["benchmark"], int(row["size_bytes"])), {})[int(row["round"])] = time
    out = {}
    for key, times in per.items():
        ref = min(times.values()) if statistic == "fastest" else statistics.median(times.values())
        out[key] = {r for r, t in times.items() if abs(t / ref - 1.0) <= AGREE}
    return out


def common_rounds(reproducing: dict, benches, size: int) -> set:
    """The rounds that reproduce every one of `benches` at `size` within AGREE: each is one stretch of time in
    which all these tables (measured batch by batch in turn) showed the set's figures."""
    rounds = None
    for bench in benches:
        found = reproducing.get((bench, size), set())
        rounds = found if rounds is None else rounds & found
    return rounds or set()


def rounds_per_size(sets_dir: str, cma: str) -> dict:
    """{size: how many rounds measured the allgather there} (a per-stretch sub-set keeps some sizes of a round)."""
    seen = {}
    with open(os.path.join(sets_dir, "raw.csv")) as fh:
        for row in csv.DictReader(fh):
            if row["cma"] == cma and row["benchmark"] == "allgather":
                seen.setdefault(int(row["size_bytes"]), set()).add(row["round"])
    return {size: len(rounds) for size, rounds in seen.items()}


def disturbed_sizes(reproducing: dict, slow_rows: dict, benches, sizes, rounds_at: dict | None = None) -> dict:
    """{size: reason} where the set's figures of `benches` are not one state of the machine: no round reproduces
    them all within AGREE ('no common round': they come from stretches that disagree), or one of them is a row
    slower than the next larger size's ('slower than the next size'); with `rounds_at` ({size: rounds}, given for
    a set of MIN_ROUNDS rounds or more), a size fewer rounds measured cannot be compared ('1 round')."""
    out = {}
    for size in sizes:
        slow = [b for b in benches if size in slow_rows.get(b, ())]
        if rounds_at is not None and rounds_at.get(size, 0) < MIN_ROUNDS:
            out[size] = f"{rounds_at.get(size, 0)} round"
        elif slow:
            out[size] = f"{'/'.join(slow)} slower than the next size"
        elif not common_rounds(reproducing, benches, size):
            out[size] = "no common round"
    return out
