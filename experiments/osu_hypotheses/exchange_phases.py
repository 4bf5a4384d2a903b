"""Issue 18 item 2: what an exchange step of 128 KiB-4 MiB pays that a ping-pong does not, phase by phase.

Run:  python experiments/osu_hypotheses/exchange_phases.py [--rounds 6] [--output DIR]
      python experiments/osu_hypotheses/exchange_phases.py --check DIR   # the tables of DIR/raw.csv again

exchange_phases.c copies as MPICH's CMA single-copy protocol does (the receiver's one process_vm_readv
of the sender's buffer), without MPI, in four modes taking turns batch by batch: a one-way transfer and
an exchange (both directions at once), each with the send buffer rewritten before it (`dirty`: the
allgather's and `fresh`'s cache state) or unchanged (`clean`: osu_latency's and osu_bibw -W 1's). Each
iteration has a write phase (the rewrite, a memcpy into the send buffer) and a read phase (the copy),
timed apart. Per placement (the hw flag round trip probed before and after each round,
set_validity.round_placement; mixed and unknown rounds are left out) it prints, from the fastest batch
over that placement's rounds (us per direction for one-way, per step for the exchange):
  the phases of each mode; c = exchange / one-way per phase and in all; and the exchange's excess over
  one way, dirty (the allgather step's term, which fbibw1 - fresh measures) and clean (what x-w1's
  bibw1 - latency measures).
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile

from run_hypotheses import loadavg
from set_validity import round_placement

from cxlsim.emulator.host import probe_roundtrip_ns
from cxlsim.results import Workspace

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("oneway_dirty", "exchange_dirty", "oneway_clean", "exchange_clean")
FIELDS = ("write_fastest_us", "read_fastest_us", "total_fastest_us", "write_median_us", "read_median_us",
          "total_median_us")


def build(out_dir: str) -> str:
    exe = os.path.join(out_dir, "exchange_phases")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "exchange_phases.c")], check=True)
    return exe


def run_round(exe: str, min_bytes: int, max_bytes: int, batches: int, iters: int, timeout_s: float) -> list:
    """One pass over the sizes: rows {size_bytes, mode, FIELDS...}."""
    try:
        out = subprocess.run([exe, str(min_bytes), str(max_bytes), str(batches), str(iters)], check=True,
                             capture_output=True, text=True, timeout=timeout_s).stdout
    except subprocess.TimeoutExpired:
        sys.exit(f"exchange_phases: a round took more than {timeout_s:.0f} s (the host is too loaded to measure)")
    rows = []
    for line in out.split("\n"):
        if line.strip():
            size, mode, *values = line.split()
            rows.append({"size_bytes": int(size), "mode": mode, **dict(zip(FIELDS, map(float, values)))})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--min-bytes", type=int, default=128 << 10)
    ap.add_argument("--max-bytes", type=int, default=4 << 20)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--iterations", type=int, default=5, help="iterations per batch")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a round may take")
    ap.add_argument("--output", help="workspace directory (default runs/osu_exchange_phases-TIMESTAMP)")
    ap.add_argument("--check", metavar="DIR", help="re-print the tables of an earlier run's DIR/raw.csv")
    args = ap.parse_args(argv)
    if args.check:
        report(Workspace(args.check), read_raw(os.path.join(args.check, "raw.csv")))
        return 0
    if args.rounds < 1 or args.batches < 1 or args.iterations < 1 or not 0 < args.min_bytes <= args.max_bytes:
        ap.error("--rounds, --batches, --iterations need >= 1 and 0 < --min-bytes <= --max-bytes")
    ws = Workspace(args.output) if args.output else Workspace.new("runs", "osu_exchange_phases")
    raw = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        for r in range(args.rounds):
            before, probe_before = loadavg(), probe_roundtrip_ns()
            rows = run_round(exe, args.min_bytes, args.max_bytes, args.batches, args.iterations, args.timeout)
            after, probe_after = loadavg(), probe_roundtrip_ns()
            where = round_placement(probe_before, probe_after)
            print(f"round {r + 1}/{args.rounds}: load {before} -> {after}; hw flag round trip "
                  f"{probe_before:.0f} -> {probe_after:.0f} ns ({where})", flush=True)
            raw += [{"round": r + 1, **row, "load_before": before, "load_after": after,
                     "roundtrip_before_ns": round(probe_before, 1), "roundtrip_after_ns": round(probe_after, 1),
                     "placement": where} for row in rows]
    ws.write_csv("raw", raw)
    ws.write_json("measurement", {"rounds": args.rounds, "batches": args.batches, "iterations": args.iterations,
                                  "sizes": [args.min_bytes, args.max_bytes], "modes": list(MODES),
                                  "copy": "process_vm_readv of the peer's send buffer (MPICH's CMA read), no MPI",
                                  "placement": "2 processes, unpinned, one node, 2 vCPUs (KVM)"})
    ws.write_provenance(0)
    report(ws, raw)
    return 0


def read_raw(path: str) -> list:
    with open(path) as fh:
        return [{**row, "round": int(row["round"]), "size_bytes": int(row["size_bytes"]),
                 **{f: float(row[f]) for f in FIELDS}} for row in csv.DictReader(fh)]


def report(ws: Workspace, raw: list) -> None:
    """Per placement, the table (fastest batch over its rounds), printed and written to phases.txt / phases.csv."""
    placements = list({row["round"]: row["placement"] for row in raw}.values())
    lines, rows = [], []
    for where in ("fast", "slow"):
        mine = [row for row in raw if row["placement"] == where]
        if not mine:
            lines.append(f"# {where} placement: not observed")
            continue
        best = {}
        for row in mine:
            for phase in ("write", "read", "total"):
                key = (row["mode"], row["size_bytes"], phase)
                best[key] = min(best.get(key, float("inf")), row[f"{phase}_fastest_us"])
        lines.append(f"# {where} placement ({placements.count(where)} round(s)): fastest batch over its rounds, "
                     "us (one-way: per direction; exchange: per step); c = exchange / one-way; "
                     "excess = exchange - one-way total")
        lines.append(f"{'size':>8} {'1w-d wr':>8} {'1w-d rd':>8} {'1w-d':>8} {'ex-d wr':>8} {'ex-d rd':>8} "
                     f"{'ex-d':>8} {'1w-c':>8} {'ex-c':>8} {'c wr':>5} {'c rd':>5} {'c dirty':>7} {'c clean':>7} "
                     f"{'exc d':>7} {'exc c':>7}")
        for size in sorted({row["size_bytes"] for row in mine}):
            b = {(m, p): best[m, size, p] for m in MODES for p in ("write", "read", "total")}
            row = {"placement": where, "size_bytes": size,
                   **{f"{m}_{p}_us": v for (m, p), v in b.items()},
                   "c_write_dirty": b["exchange_dirty", "write"] / b["oneway_dirty", "write"],
                   "c_read_dirty": b["exchange_dirty", "read"] / b["oneway_dirty", "read"],
                   "c_dirty": b["exchange_dirty", "total"] / b["oneway_dirty", "total"],
                   "c_clean": b["exchange_clean", "total"] / b["oneway_clean", "total"],
                   "excess_dirty_us": b["exchange_dirty", "total"] - b["oneway_dirty", "total"],
                   "excess_clean_us": b["exchange_clean", "total"] - b["oneway_clean", "total"]}
            rows.append(row)
            lines.append(f"{size:>8d} " + " ".join(f"{b[m, p]:>8.1f}" for m, p in (
                ("oneway_dirty", "write"), ("oneway_dirty", "read"), ("oneway_dirty", "total"),
                ("exchange_dirty", "write"), ("exchange_dirty", "read"), ("exchange_dirty", "total"),
                ("oneway_clean", "total"), ("exchange_clean", "total")))
                + f" {row['c_write_dirty']:>5.2f} {row['c_read_dirty']:>5.2f} {row['c_dirty']:>7.2f} "
                f"{row['c_clean']:>7.2f} {row['excess_dirty_us']:>+7.1f} {row['excess_clean_us']:>+7.1f}")
    left_out = [f"{r + 1} {p}" for r, p in enumerate(placements) if p not in ("fast", "slow")]
    if left_out:
        lines.append("# rounds left out (no one placement): " + ", ".join(left_out))
    ws.write_csv("phases", rows)
    text = "\n".join(lines) + "\n"
    ws.write_text("phases.txt", text)
    print(text, end="")
    print(f"workspace: {ws.path}")


if __name__ == "__main__":
    sys.exit(main())
