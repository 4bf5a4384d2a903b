"""Issue 18 item 2's hypotheses, tested on this machine's mpich wheel at np=2 (measurements, no model change).

Run: python experiments/osu_hypotheses/run_hypotheses.py [--rounds 5] [--output DIR]

Hypotheses (the issue's; tested, not assumed):
H1. The --from-osu re-prediction of osu_allgather misses from exactly the wheel's CMA threshold
    (8 KiB), where MPICH switches to a single-copy rendezvous: if so, with CMA off
    (MPIR_CVAR_CH4_CMA_ENABLE=0) the misses should move or vanish.
H2. The LogGP fit treats a two-way exchange (an np=2 allgather) as two independent one-way
    transfers: if so, osu_bibw should fall short of 2 x osu_bw where the misses are, and an
    exchange charged at bibw's per-direction rate should predict the allgather better.

Method: osu_loops.c (OSU v5.3-style C loops, built with mpicc) for latency, bw, bibw and
allgather; every round runs every (CMA setting, benchmark) once, in an interleaved order
(A B A B), and the per-size medians over rounds are the OSU files. Each CMA setting's files go
through `cxlsim.calibrate.osu_fit.from_osu` (what `cxlsim calibrate --from-osu` runs: the
LogGP fit from osu_latency and osu_bw alone, validated on osu_allgather); the exchange
estimate of H2 is latency(0 B) + m / (bibw / 2) (the latency's own 0-B row for the fixed part;
the exchange's per-direction rate from bibw).

Outputs (DIR, default runs/osu_hypotheses-TIMESTAMP): the median OSU files per CMA setting,
every round's raw values (raw.csv), the per-size errors (errors.csv) and summary.json.
The machine is shared and loaded (2 vCPUs, load average about 4 when this was written):
every figure is a median over rounds, and the spread (min-max over rounds) is in raw.csv.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from cxlsim.calibrate.osu_fit import from_osu
from cxlsim.results import Workspace

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("latency", "bw", "bibw", "allgather")
CMA = {"cma-on": {}, "cma-off": {"MPIR_CVAR_CH4_CMA_ENABLE": "0"}}
HEADERS = {
    "latency": "# OSU MPI Latency Test v5.3 (C loop, osu_loops.c, median of rounds)\n# Size          Latency (us)\n",
    "bw": "# OSU MPI Bandwidth Test v5.3 (C loop, osu_loops.c, median of rounds)\n# Size      Bandwidth (MB/s)\n",
    "bibw": "# OSU MPI Bi-Directional Bandwidth Test v5.3 (C loop, osu_loops.c, median of rounds)\n"
            "# Size      Bandwidth (MB/s)\n",
    "allgather": "# OSU MPI Allgather Latency Test v5.3 (C loop, osu_loops.c, median of rounds)\n"
                 "# Size       Avg Latency(us)\n",
}


def build(out_dir: str) -> str:
    exe = os.path.join(out_dir, "osu_loops")
    subprocess.run(["mpicc", "-O2", "-o", exe, os.path.join(HERE, "osu_loops.c")], check=True)
    return exe


def run_once(exe: str, mode: str, env_extra: dict, max_bytes: int) -> dict:
    env = {**os.environ, **env_extra}
    out = subprocess.run(["mpirun", "-np", "2", exe, mode, str(max_bytes)], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    values = {}
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        size, value = line.split()
        values[int(size)] = float(value)
    return values


def write_osu(path: str, mode: str, medians: dict) -> None:
    with open(path, "w") as fh:
        fh.write(HEADERS[mode])
        for size in sorted(medians):
            fh.write(f"{size:<10d} {medians[size]:18.2f}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-bytes", type=int, default=1 << 20)
    ap.add_argument("--output")
    args = ap.parse_args(argv)
    ws = Workspace(args.output) if args.output else Workspace.new("runs", "osu_hypotheses")
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        raw = {(c, m): [] for c in CMA for m in MODES}
        for r in range(args.rounds):
            order = [(c, m) for m in MODES for c in (CMA if r % 2 == 0 else reversed(list(CMA)))]
            for c, m in order:
                raw[(c, m)].append(run_once(exe, m, CMA[c], args.max_bytes))
    raw_rows, medians = [], {}
    for (c, m), runs in raw.items():
        medians[(c, m)] = {s: statistics.median(run[s] for run in runs) for s in runs[0]}
        for s in runs[0]:
            vals = [run[s] for run in runs]
            raw_rows.append({"cma": c, "benchmark": m, "size_bytes": s, "median": medians[(c, m)][s],
                             "min": min(vals), "max": max(vals), "rounds": len(vals)})
    ws.write_csv("raw", raw_rows)
    error_rows, summary = [], {}
    for c in CMA:
        paths = {}
        for m in MODES:
            paths[m] = ws.file(f"osu_{m}_{c}.txt")
            write_osu(paths[m], m, medians[(c, m)])
        result = from_osu([paths["latency"], paths["bw"], paths["allgather"]], nodes=2)
        lat0 = medians[(c, "latency")][0]
        for row in result["rows"]:
            s = row["size_bytes"]
            bw, bibw = medians[(c, "bw")].get(s), medians[(c, "bibw")].get(s)
            exchange_ns = (lat0 + s / (bibw / 2)) * 1e3 if bibw else None  # MB/s = bytes/us
            error_rows.append({
                "cma": c, "size_bytes": s, "measured_us": row["measured_ns"] / 1e3,
                "from_osu_us": row["full_ns"] / 1e3, "from_osu_error": row["full_error"],
                "bibw_over_2bw": bibw / (2 * bw) if bw and bibw else None,
                "exchange_us": exchange_ns / 1e3 if exchange_ns else None,
                "exchange_error": (exchange_ns - row["measured_ns"]) / row["measured_ns"] if exchange_ns else None})
        mine = [e for e in error_rows if e["cma"] == c]
        for key in ("from_osu_error", "exchange_error"):
            errs = [abs(e[key]) for e in mine if e[key] is not None]
            big = [e for e in mine if e[key] is not None and e["size_bytes"] >= 8192]
            summary[f"{c} {key}"] = {"median_abs": statistics.median(errs), "worst_abs": max(errs),
                                     "median_abs_from_8KiB": statistics.median(abs(e[key]) for e in big)}
    ws.write_csv("errors", error_rows)
    ws.write_json("summary", {"rounds": args.rounds, "summary": summary})
    ws.write_provenance(0)
    print(f"{'cma':8} {'size':>8} {'meas us':>9} {'from-osu':>9} {'err':>7} {'bibw/2bw':>9} {'exch':>9} {'err':>7}")
    for e in error_rows:
        print(f"{e['cma']:8} {e['size_bytes']:8d} {e['measured_us']:9.2f} {e['from_osu_us']:9.2f} "
              f"{100 * e['from_osu_error']:+6.0f}% {e['bibw_over_2bw'] or float('nan'):9.2f} "
              f"{e['exchange_us'] or float('nan'):9.2f} {100 * (e['exchange_error'] or float('nan')):+6.0f}%")
    for k, v in summary.items():
        print(f"{k}: median {100 * v['median_abs']:.1f}%, worst {100 * v['worst_abs']:.1f}%, "
              f"median from 8 KiB {100 * v['median_abs_from_8KiB']:.1f}%")
    print(f"workspace: {ws.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
