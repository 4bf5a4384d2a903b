"""The OSU-format files of an OMB-style set (issue 18 item 2): their titles, the writer, and the tables rebuilt
from the rounds' figures in raw.csv, for all rounds or for the rounds of one host placement.

A set directory holds raw.csv (per round, CMA setting, table and size: the round's median and fastest batch,
the load and the placement probes around the round), memcpy.csv, and per statistic the OSU files `median/`
(the median over the rounds of their median batches) and `fastest/` (the fastest batch over the rounds).
"""
from __future__ import annotations

import csv
import os
import shutil
import statistics

from set_validity import placements, round_placement, stretch_placement

BENCHMARKS = ("latency", "fresh", "bw", "bibw", "bw1", "bibw1", "freshbw1", "freshbibw1", "allgather")
BANDWIDTHS = ("bw", "bibw", "bw1", "bibw1", "freshbw1", "freshbibw1")  # MB/s: the fastest is the largest
BATCHES = 20  # batches per table and size in one round (osu_loops.c takes it as an argument)

HEADER = {"latency": ("OSU MPI Latency Test v5.3", "Latency (us)"),
          "fresh": ("OSU MPI Latency Test v5.3, send buffer rewritten before each send", "Latency (us)"),
          "bw": ("OSU MPI Bandwidth Test v5.3", "Bandwidth (MB/s)"),
          "bibw": ("OSU MPI Bi-Directional Bandwidth Test v5.3", "Bandwidth (MB/s)"),
          "bw1": ("OSU MPI Bandwidth Test v5.3, window 1", "Bandwidth (MB/s)"),
          "bibw1": ("OSU MPI Bi-Directional Bandwidth Test v5.3, window 1", "Bandwidth (MB/s)"),
          "freshbw1": ("OSU MPI Bandwidth Test v5.3, window 1, send buffer rewritten before each send",
                       "Bandwidth (MB/s)"),
          "freshbibw1": ("OSU MPI Bi-Directional Bandwidth Test v5.3, window 1, send buffer rewritten before each "
                         "send", "Bandwidth (MB/s)"),
          "allgather": ("OSU MPI Allgather Latency Test v5.3", "Avg Latency(us)")}


def write_osu(path: str, benchmark: str, statistic: str, values: dict, rounds: int) -> None:
    title, column = HEADER[benchmark]
    how = {"median": f"median over {rounds} rounds of the median of {BATCHES} batches",
           "fastest": f"fastest of {rounds} x {BATCHES} batches"}[statistic]
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(f"# {title} (C loop osu_loops.c, mpich 5.0.2 wheel, np 2; {how})\n")
        fh.write(f"# Size      {column:>18}\n")
        for size in sorted(values):
            fh.write(f"{size:<10d} {values[size]:18.2f}\n")
    os.replace(tmp, path)


def read_raw(sets_dir: str) -> list:
    with open(os.path.join(sets_dir, "raw.csv")) as fh:
        return list(csv.DictReader(fh))


def write_tables(raw_rows: list, out_dir: str) -> None:
    """fastest/ and median/ OSU files in out_dir from `raw_rows` (raw.csv's rows of the rounds to use): per CMA
    setting, table and size the fastest batch over those rounds (the least time, or the most bandwidth) and the
    median over them of each round's median batch."""
    per = {}
    for row in raw_rows:
        key = (row["cma"], row["benchmark"])
        per.setdefault(key, {}).setdefault(int(row["size_bytes"]), []).append(
            (float(row["batch_median"]), float(row["batch_fastest"])))
    for (cma, bench), sizes in per.items():
        best = max if bench in BANDWIDTHS else min
        rounds = len({r["round"] for r in raw_rows if r["cma"] == cma and r["benchmark"] == bench})
        values = {"median": {s: statistics.median(m for m, _ in v) for s, v in sizes.items()},
                  "fastest": {s: best(f for _, f in v) for s, v in sizes.items()}}
        for statistic, table in values.items():
            os.makedirs(os.path.join(out_dir, statistic), exist_ok=True)
            write_osu(os.path.join(out_dir, statistic, f"osu_{bench}_{cma}.txt"), bench, statistic, table, rounds)


def placement_sets(sets_dir: str, out_root: str) -> dict:
    """{placement: directory} of the sub-sets of a probed set, written as out_root/placement_fast and _slow: the
    rounds (per CMA setting) whose probes put them in that placement, with their raw.csv rows, tables and
    memcpy.csv; {} for a set without probes. Mixed and unknown rounds belong to none."""
    rounds = {(r, c): round_placement(*ns) for r, c, *ns in placements(sets_dir)}
    raw, out = read_raw(sets_dir), {}
    for placement in ("fast", "slow"):
        kept = [row for row in raw if rounds.get((int(row["round"]), row["cma"])) == placement]
        if kept:
            out[placement] = write_sub_set(sets_dir, raw, kept, os.path.join(out_root, f"placement_{placement}"))
    return out


def stretch_sets(sets_dir: str, out_root: str) -> dict:
    """{placement: directory} of the per-stretch sub-sets of a set probed between its stretches of sizes (from set m
    on), written as out_root/stretch_fast and _slow: over every round, the rows of the stretches whose probes
    before and after both read that placement (set_validity.stretch_placement); {} for a set without probes
    between stretches, where a stretch is its round and placement_sets already splits it."""
    if not any(len(ns) > 2 for _, _, *ns in placements(sets_dir)):
        return {}
    raw, out = read_raw(sets_dir), {}
    for placement in ("fast", "slow"):
        kept = [row for row in raw if stretch_placement(float(row["roundtrip_before_ns"]),
                                                        float(row["roundtrip_after_ns"])) == placement]
        if kept:
            out[placement] = write_sub_set(sets_dir, raw, kept, os.path.join(out_root, f"stretch_{placement}"))
    return out


def write_sub_set(sets_dir: str, raw: list, kept: list, sub: str) -> str:
    """The sub-set `sub` of the rows `kept` of the set's raw.csv: its raw.csv, tables and the set's memcpy.csv."""
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "raw.csv"), "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(raw[0]))
        writer.writeheader()
        writer.writerows(kept)
    shutil.copy(os.path.join(sets_dir, "memcpy.csv"), os.path.join(sub, "memcpy.csv"))
    write_tables(kept, sub)
    return sub
