"""What does each of coll's pool calls cost inside the app, alone, and back to back, traced and not?

    python benchmarks/replay_coll_kinds.py --pool-profile LOCAL.json [--runs 6] [--iterations 200] [--work 2000]
                                           [--rounds 3] [--keep DIR] [--out FILE.json]

benchmarks/replay_validate.py's coll app at np 2 (replay_validate_src/coll_timed.c: per iteration a little work,
an allreduce of 64 KiB, an allgather and a bcast of 4 KiB, an allreduce of 8 B) spends more in its calls than the
replay's price. This runs the same calls (replay_validate_src/coll_kinds.c) under the library in blocks of
ITERATIONS iterations, ROUNDS times over, within one job (one placement, one load; BLOCKS): `app` (the app's
iteration), `alone-K` (work, then kind K only), `bare-K` (K back to back: the calibration bench's loop), and pairs
(RG, RB: the 4 KiB call after the 64 KiB allreduce; rG, SB: after the 8-byte allreduce or a barrier; GB: the bcast
after the allgather). The program times every call itself (CLOCK_MONOTONIC around the MPI call: the library's own
per-call work and, traced, the tracer's writes inside), and a call's own time is its return minus the last rank's
entry (as `cxlsim.replay.call_times` counts it). Runs alternate between untraced and traced (`cxlsim mpi run
--trace`); traced, the library's sidecar gives its own view of the same calls (entry to return inside the library,
the tracer's writes left out: what replay_validate compares with the replay).

Per run: the library's placement probe (its flag round trip at set-up), then per block and kind each rank's median
own time, the library's (traced), and the replay's price of the call there (`cxlsim.replay.pool_profile.PoolPricing`
with the run's stats, as replay_validate prices it, the cold rule `cold_calls` applied to the block's sequence). The
summary gives, per placement and tracing, the medians over the runs of the slower rank's own time, and each cell
less the same kind's warm reference block (`WARM`), measured beside priced: what the calls before it cost a call,
against what the cold rule charges for it.
Units: us in the tables. Timings on a loaded machine spread; the load is printed with each run.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

from cxlsim.emulator.cli import find_mpiexec
from cxlsim.mpi.build import build, find_mpicc
from cxlsim.replay import call_times, pool_profile, simgrid
from cxlsim.results import atomic_write

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "replay_validate_src", "coll_kinds.c")
KINDS = {"allreduce65536": ("allreduce", 65536), "allgather4096": ("allgather", 4096), "bcast4096": ("bcast", 4096),
         "allreduce8": ("allreduce", 8), "barrier": ("barrier", 0)}
"""coll_kinds.c's kind names -> (traced kind, bytes)."""
LETTERS = dict(zip("RGBrS", KINDS))
BLOCKS = ("app:RGBr:1", "alone-R:R:1", "alone-G:G:1", "alone-B:B:1", "alone-r:r:1", "bare-G:G:0", "bare-B:B:0",
          "RG:RG:1", "rG:rG:1", "RB:RB:1", "SB:SB:1", "GB:GB:1")
"""The blocks each run times (coll_kinds.c's NAME:KINDS:WORK): the app's iteration, each call alone and back to back
(the bench's loop), and the 4 KiB calls after the 64 KiB allreduce, after a small call and after each other."""
WARM = {"allreduce65536": "alone-R", "allgather4096": "alone-G", "bcast4096": "SB", "allreduce8": "alone-r"}
"""Each kind's warm reference block: the kind alone after work, but the bcast after a barrier (alone, its root
leaves before the reader and enters the next one ahead of it, so its own time from the last entry holds the
reader's copy-out alone)."""
SET_UP_CALLS = 4
"""coll_kinds.c's untimed first calls that are not barriers, before the timed blocks."""


def read_times(directory: str, ranks: int) -> list:
    """Per timed call (in program order): {'block', 'kind', 'own_ns': per rank, 'durations_ns': per rank} from
    DIR/times<r>.tsv; own = return - the last rank's entry."""
    files = []
    for r in range(ranks):
        with open(os.path.join(directory, f"times{r}.tsv")) as fh:
            files.append(list(csv.DictReader(fh, delimiter="\t")))
    if len({len(f) for f in files}) != 1:
        raise SystemExit(f"{directory}: the ranks timed different numbers of calls")
    out = []
    for rows in zip(*files):
        if len({(x["block"], x["kind"], x["call"]) for x in rows}) != 1:
            raise SystemExit(f"{directory}: the ranks' timed calls differ at {rows[0]}")
        last = max(float(x["entry_ns"]) for x in rows)
        out.append({"block": rows[0]["block"], "kind": rows[0]["kind"],
                    "own_ns": [float(x["return_ns"]) - last for x in rows],
                    "durations_ns": [float(x["return_ns"]) - float(x["entry_ns"]) for x in rows]})
    return out


def add_library_own(trace_dir: str, calls: list) -> None:
    """Set each timed call's 'library_ns' (per rank: its own time from the library's sidecar, as replay_validate
    reads it), barriers left out on both sides (the blocks' own barriers are not timed calls)."""
    trace = simgrid.read(trace_dir)
    timed = call_times.own_times(trace, call_times.read_durations(trace))
    mine = [c for c in calls if c["kind"] != "barrier"]
    per_rank = [[t for t in ts if t.kind in ("allreduce", "allgather", "bcast")][SET_UP_CALLS:] for ts in timed]
    if any(len(ts) != len(mine) for ts in per_rank):
        raise SystemExit(f"{trace_dir}: {[len(ts) for ts in per_rank]} traced collectives for {len(mine)} timed calls")
    for i, c in enumerate(mine):
        if any((ts[i].kind, ts[i].size_bytes) != KINDS[c["kind"]] for ts in per_rank):
            raise SystemExit(f"{trace_dir}: traced call {i} is not {c['kind']}")
        c["library_ns"] = [ts[i].own_ns for ts in per_rank]


def block_prices(pricing, block: str) -> dict:
    """{kind: (the replay's price of the call in the block's steady state (ns), whether it is cold there)}: the
    block's sequence three times over through pool_profile.cold_calls, its last pass."""
    from cxlsim.replay.trace import Call
    letters = block.split(":")[1]
    seq = [Call(KINDS[LETTERS[x]][0], "block", i, size_bytes=KINDS[LETTERS[x]][1])
           for i, x in enumerate(letters * 3)]
    cold = pool_profile.cold_calls(seq, 2)[-len(letters):]
    out = {}
    for x, c in zip(letters, cold):
        kind, size = KINDS[LETTERS[x]]
        out[LETTERS[x]] = (pricing.cost_ns(kind, size) + (pricing.cold_extra_ns(kind, size) if c else 0.0), c)
    return out


def one_run(exe: str, directory: str, traced: bool, iterations: int, work: int, rounds: int, profile: str) -> dict:
    """Run coll_kinds under the library at np 2 (traced or not) and summarise it: per (block, kind) the median own
    time per call of each rank (program's clock; traced also the library's), the replay's price there."""
    os.makedirs(directory)
    cmd = [sys.executable, "-m", "cxlsim", "mpi", "run", "--stats",
           *(["--trace", os.path.join(directory, "trace")] if traced else []), "--", find_mpiexec(), "-n", "2",
           exe, directory, str(iterations), str(work), str(rounds), *BLOCKS]
    load = os.getloadavg()[0]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"coll_kinds failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    stats_path = os.path.join(directory, "stats.txt")
    with open(stats_path, "w") as fh:
        fh.write(done.stderr)
    stats = pool_profile.read_library_stats(stats_path, "stderr:")
    pricing = pool_profile.PoolPricing(profile, 2, stats)
    calls = read_times(directory, 2)
    if traced:
        add_library_own(os.path.join(directory, "trace"), calls)
    got = defaultdict(lambda: defaultdict(list))
    for c in calls:
        for key in ("own_ns", "library_ns"):
            for r, v in enumerate(c.get(key, [])):
                got[(c["block"], c["kind"])][f"{key}{r}"].append(v)
    cells = []
    for block in BLOCKS:
        name = block.split(":")[0]
        for kind, (price, cold) in block_prices(pricing, block).items():
            values = got[(name, kind)]
            cells.append({"block": name, "kind": kind, "price_ns": price, "cold": cold,
                          **{k: statistics.median(v) for k, v in values.items()}})
    return {"traced": traced, "load": load, "placement": stats["placement"], "cells": cells}


def us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:.3f}"


def slowest(cell: dict, key: str = "own_ns") -> float | None:
    """The slower rank's median own time of a cell (what a call adds where the ranks meet at every call)."""
    values = [cell[f"{key}{r}"] for r in range(2) if f"{key}{r}" in cell]
    return max(values) if values else None


def print_run(i: int, row: dict) -> None:
    p = row["placement"] or {}
    print(f"# run {i}: {'traced' if row['traced'] else 'untraced'}, load {row['load']:.2f}, placement "
          f"{p.get('class')} ({p.get('roundtrip_ns')} ns); median own time per call, us, rank 0 and 1 (program's "
          "clock; library: the sidecar's, traced runs), the replay's price in the block (cold: with its cold copies)")
    print(f"#   {'block':<9}{'kind':<16}{'rank 0':>8}{'rank 1':>8}{'library':>9}{'':>8}{'price':>8}")
    for c in row["cells"]:
        lib = [c.get(f"library_ns{r}") for r in range(2)]
        print(f"    {c['block']:<9}{c['kind']:<16}{us(c.get('own_ns0')):>8}{us(c.get('own_ns1')):>8}{us(lib[0]):>9}"
              f"{us(lib[1]):>8}{us(c['price_ns']):>8}{' cold' if c['cold'] else ''}", flush=True)


def summary(rows: list) -> list:
    """Per (placement class, traced), block and kind: the medians over the runs of the slower rank's own time
    (program's clock; library's), and the replay's price there."""
    out = []
    groups = defaultdict(list)
    for r in rows:
        groups[((r["placement"] or {}).get("class"), r["traced"])].append(r)
    for (placement, traced), got in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        for j, cell in enumerate(got[0]["cells"]):
            measured = [slowest(r["cells"][j]) for r in got]
            library = [x for x in (slowest(r["cells"][j], "library_ns") for r in got) if x is not None]
            out.append({"placement": placement, "traced": traced, "runs": len(got), "block": cell["block"],
                        "kind": cell["kind"], "cold": cell["cold"], "measured_ns": statistics.median(measured),
                        "library_ns": statistics.median(library) if library else None,
                        "price_ns": statistics.median(r["cells"][j]["price_ns"] for r in got)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool-profile", required=True, help="local-host profile pricing the calls (cxlsim calibrate)")
    parser.add_argument("--runs", type=int, default=6, help="runs, untraced and traced by turns (default 6)")
    parser.add_argument("--iterations", type=int, default=200, help="calls per block (default 200)")
    parser.add_argument("--work", type=int, default=2000, help="work steps before a call (coll_timed's 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the blocks per run (default 3)")
    parser.add_argument("--keep", help="keep the runs' files in this new directory (default: a temporary one)")
    parser.add_argument("--out", help="write the runs and the summary as JSON (atomically)")
    args = parser.parse_args()
    for flag, value in (("--runs", args.runs), ("--iterations", args.iterations), ("--rounds", args.rounds)):
        if value < 1:
            parser.error(f"{flag}: expected a whole number >= 1, got {value}")
    if args.work < 0:
        parser.error(f"--work: expected a whole number >= 0, got {args.work}")
    if not os.path.isfile(args.pool_profile):
        parser.error(f"--pool-profile: no such file: {args.pool_profile}")
    build()
    rows = []
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory()) as tmp:
        if args.keep:
            os.makedirs(tmp)
        exe = os.path.join(tmp, "coll_kinds")
        subprocess.run([find_mpicc(), "-O0", SOURCE, "-o", exe], check=True)  # -O0 as replay_validate builds coll
        for i in range(args.runs):
            row = one_run(exe, os.path.join(tmp, f"run{i}"), i % 2 == 1, args.iterations, args.work, args.rounds,
                          args.pool_profile)
            rows.append(row)
            print_run(i, row)
    table = summary(rows)
    print("# per placement and tracing, medians over the runs (us): the slower rank's own time per call (program's "
          "clock; library: its sidecar, traced runs), the replay's price in the block (cold: its lines cold by "
          "pool_profile.cold_calls, cold_extra_ns added); vs warm: the cell less the same kind's warm reference "
          "block (WARM: alone, the bcast after a barrier), measured and priced")
    print(f"# {'placement':<10}{'traced':<7}{'runs':>4} {'block':<9}{'kind':<16}{'measured':>9}{'library':>9}"
          f"{'price':>8}{'vs warm':>10}{'priced':>8}")
    for t in table:
        alone = next((a for a in table if a["placement"] == t["placement"] and a["traced"] == t["traced"]
                      and a["block"] == WARM.get(t["kind"]) and a["kind"] == t["kind"]), None)
        vs = (us(t["measured_ns"] - alone["measured_ns"]), us(t["price_ns"] - alone["price_ns"])) if alone else ("-", "-")
        print(f"  {str(t['placement']):<10}{'yes' if t['traced'] else 'no':<7}{t['runs']:>4} {t['block']:<9}"
              f"{t['kind']:<16}{us(t['measured_ns']):>9}{us(t['library_ns']):>9}{us(t['price_ns']):>8}"
              f"{vs[0]:>10}{vs[1]:>8}{' cold' if t['cold'] else ''}")
    if args.out:
        atomic_write(args.out, json.dumps({"args": vars(args), "runs": rows, "summary": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
