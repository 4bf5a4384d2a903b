"""Allgather through a CXL shared memory pool against network allgathers: the projected speedup range.

Run:
    python experiments/allgather_cxl_vs_network.py --engine analytic            # seconds
    python experiments/allgather_cxl_vs_network.py --engine des                 # the DES, <= 2 minutes
    python experiments/allgather_cxl_vs_network.py --engine analytic --sensitivity
    python experiments/allgather_cxl_vs_network.py --max-size 16MiB --max-nodes 64   # the extended grid

Published (papers.md, IEEE BigData 2024, DOI 10.1109/BigData62323.2024.10825804):
the pool allgather is 2.91x to 42.14x faster than traditional allgather
algorithms, measured with OMB; node counts, sizes, networks, the sync protocol
and the CXL latencies are not public. This script states its own (every
assumption is listed in experiments/README_allgather_cxl.md) and reports the
range they give, without tuning anything.

Grid: OSU sizes 1 B..1 MiB (doubling; --max-size extends to 16 MiB), nodes 2,
4, 8, 16 (--max-nodes doubles on up to 64), one rank per node.
- Network side: the presets eth-10g-tcp, eth-25g-tcp, eth-100g-tcp,
  eth-100g-roce, ib-hdr, ib-ndr (one switch, cut-through), algorithms ring,
  recursive doubling and Bruck, and MPICH's default choice. The MPICH row is
  the row of the algorithm MPICH's selector picks at that P and size
  (cxlsim.models.collectives.selectors): the same simulation, not run twice.
- CXL side: `cxl_pool` (copy mode, the emulator's protocol) on cxl3-pool with
  coherence hw and flush, and on cxl2-pool with flush. Switch levels are the
  fewest the lane budget allows: one 16-port switch holds 15 hosts and the
  device, so 16 hosts and more need a two-level tree (CXL 3.x only); cxl2-pool
  cannot hold 16 hosts (no cascading), and those points are recorded as
  'not possible' with the reason.

Speedup = network latency / CXL latency at the same nodes and size.

Calls: by default each point is one call that every rank starts at the same
time on a fresh fabric (the closed forms' case). OSU times back-to-back calls
after warm-up; `--engine des --warmup W --iterations K` does that for both
sides (latency per timed call). It matters for the pool in hw mode, where each
call's flag and slot stores first invalidate the copies the previous call
left in the other hosts' caches (BISnp); networks and flush mode keep no state
between calls.

Sensitivity (--sensitivity, same engine): one assumption at a time around the
presets, for cxl3-pool hw and flush against the MPICH choice on every
network: CXL load latency 150-600 ns (every latency figure scaled together),
switch levels 1 vs 2, per-host outstanding line requests (the host bandwidth
b = lines x 64 B / load latency), and device bandwidth (a narrow pool). It
also lists where the network wins. sensitivity_range.csv holds the range over
all networks ('all') and per network.

Workspace (--output DIR, default runs/allgather_cxl_vs_network-TIMESTAMP):
results.csv (tidy, one row per fabric x algorithm x nodes x size), speedup.csv,
speedup_table.csv and .md (smallest and largest ratio and where), crossover.csv
(per CXL variant, network and node count: the smallest size from which MPICH's
choice on the network is faster than the pool, if any), plots
latency_vs_size.png and speedup_heatmap*.png, timing.json, provenance.json;
with --sensitivity also sensitivity.csv, sensitivity_range.csv, network_wins.csv
and sensitivity.png.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

from cxlsim import config
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.models.collectives.selectors import select
from cxlsim.results import Workspace, make_rng
from cxlsim.simulate import run as simulate
from cxlsim.units import format_size, parse_size

NETWORK_PRESETS = ("eth-10g-tcp", "eth-25g-tcp", "eth-100g-tcp", "eth-100g-roce", "ib-hdr", "ib-ndr")
BASELINES = ("ring", "recursive_doubling", "bruck")
CXL_VARIANTS = (  # (label, preset, coherence)
    ("cxl3-hw", "cxl3-pool", Coherence.HW.value),
    ("cxl3-flush", "cxl3-pool", Coherence.FLUSH.value),
    ("cxl2-flush", "cxl2-pool", Coherence.FLUSH.value),
)
DEFAULT_NODES = (2, 4, 8, 16)
COLUMNS = ["side", "fabric", "variant", "algorithm", "coherence", "switch_levels", "nodes", "size_bytes",
           "latency_us", "engine", "events", "note"]

# Sensitivity axes (one at a time; the presets' values are 250 ns, auto levels, 48 lines, 126 GB/s).
LOAD_LATENCIES_NS = (150.0, 250.0, 350.0, 450.0, 600.0)
OUTSTANDING_LINES = (16, 48, 96, 192, 400)
DEVICE_BW = (16.0, 32.0, 63.0, 126.0, 252.0)


def sizes_up_to(max_bytes: int) -> list[int]:
    sizes, s = [], 1
    while s <= max_bytes:
        sizes.append(s)
        s *= 2
    return sizes


def nodes_up_to(max_nodes: int) -> list[int]:
    nodes = [n for n in DEFAULT_NODES if n <= max_nodes]
    n = DEFAULT_NODES[-1] * 2
    while n <= max_nodes:
        nodes.append(n)
        n *= 2
    return nodes


LOOP = {"iterations": 1, "warmup": 0}
"""Back-to-back calls per point (set by --iterations/--warmup; the DES only)."""


def network_scenario(preset, nodes, algorithm, sizes, engine):
    return config.from_dict({"name": "allgather-network", "engine": engine,
                             "fabric": {"preset": preset, "nodes": nodes},
                             "workload": {"collective": "allgather", "algorithm": algorithm, "sizes": sizes,
                                          "chunk": "64 KiB", **LOOP}})


def cxl_scenario(preset, coherence, nodes, sizes, engine, **cxl):
    return config.from_dict({"name": "allgather-cxl", "engine": engine,
                             "fabric": {"preset": preset, "nodes": nodes, "cxl": {"coherence": coherence, **cxl}},
                             "workload": {"collective": "allgather", "algorithm": "cxl_pool", "sizes": sizes,
                                          **(LOOP if engine == "des" else {})}})


def cxl_levels(preset, coherence, nodes, **cxl) -> tuple[int | None, str]:
    """The switch levels the scenario resolves to, or (None, why it cannot be built)."""
    try:
        fabric = cxl_scenario(preset, coherence, nodes, [1], "analytic", **cxl).fabric
        return get_cxl_preset(preset).elaborate(fabric).switch_levels, ""
    except InputError as exc:
        return None, str(exc)


def main_grid(nodes_list, sizes, engine, bar) -> list[dict]:
    """Every network and CXL point of the main grid, as tidy rows."""
    rows = []
    for nodes in nodes_list:
        for preset in NETWORK_PRESETS:
            by_algo = {}
            for algo in BASELINES:
                out = simulate(network_scenario(preset, nodes, algo, sizes, engine))
                by_algo[algo] = {r["size_bytes"]: r for r in out}
                for r in out:
                    rows.append({"side": "network", "fabric": preset, "variant": algo, "algorithm": r["algorithm"],
                                 "coherence": "", "switch_levels": 1, "nodes": nodes, "size_bytes": r["size_bytes"],
                                 "latency_us": r["latency_us"], "engine": engine, "events": r["events"],
                                 "note": r["note"]})
                bar.update(len(sizes))
            for size in sizes:
                chosen, note = select("mpich", "allgather", nodes, size)
                r = by_algo[chosen][size]
                rows.append({"side": "network", "fabric": preset, "variant": "mpich", "algorithm": r["algorithm"],
                             "coherence": "", "switch_levels": 1, "nodes": nodes, "size_bytes": size,
                             "latency_us": r["latency_us"], "engine": engine, "events": r["events"],
                             "note": f"MPICH's choice: {chosen}" + (f"; {note}" if note else "")})
        for label, preset, coherence in CXL_VARIANTS:
            levels, why = cxl_levels(preset, coherence, nodes)
            if levels is None:
                rows += [{"side": "cxl", "fabric": preset, "variant": label, "algorithm": "cxl_pool",
                          "coherence": coherence, "switch_levels": "", "nodes": nodes, "size_bytes": size,
                          "latency_us": math.nan, "engine": engine, "events": 0, "note": f"not possible: {why}"}
                         for size in sizes]
                bar.update(len(sizes))
                continue
            out = simulate(cxl_scenario(preset, coherence, nodes, sizes, engine))
            rows += [{"side": "cxl", "fabric": preset, "variant": label, "algorithm": r["algorithm"],
                      "coherence": coherence, "switch_levels": levels, "nodes": nodes, "size_bytes": r["size_bytes"],
                      "latency_us": r["latency_us"], "engine": engine, "events": r["events"], "note": r["note"]}
                     for r in out]
            bar.update(len(sizes))
    return rows


def speedups(rows) -> list[dict]:
    """Network latency / CXL latency for every CXL variant x network preset x baseline x nodes x size."""
    net = [r for r in rows if r["side"] == "network"]
    cxl = {(r["variant"], r["nodes"], r["size_bytes"]): r for r in rows if r["side"] == "cxl"}
    variants = sorted({r["variant"] for r in rows if r["side"] == "cxl"}, key=[v[0] for v in CXL_VARIANTS].index)
    out = []
    for v in variants:
        for r in net:
            c = cxl[(v, r["nodes"], r["size_bytes"])]
            if math.isnan(c["latency_us"]):
                continue
            out.append({"cxl": v, "network": r["fabric"], "baseline": r["variant"], "algorithm": r["algorithm"],
                        "nodes": r["nodes"], "size_bytes": r["size_bytes"], "network_us": r["latency_us"],
                        "cxl_us": c["latency_us"], "speedup": r["latency_us"] / c["latency_us"]})
    return out


def crossover(sp) -> list[dict]:
    """Per CXL variant x network x nodes: the smallest size from which MPICH's choice beats the pool."""
    out = {}
    for s in sp:
        if s["baseline"] != "mpich":
            continue
        key = (s["cxl"], s["network"], s["nodes"])
        row = out.setdefault(key, {"cxl": s["cxl"], "network": s["network"], "nodes": s["nodes"],
                                   "network_wins_from_bytes": "", "speedup_at_smallest_size": s["speedup"]})
        if s["speedup"] < 1 and (row["network_wins_from_bytes"] == "" or s["size_bytes"] < row["network_wins_from_bytes"]):
            row["network_wins_from_bytes"] = s["size_bytes"]
    return list(out.values())


def _where(s) -> str:
    return f"{s['network']} {s['baseline']}, {s['nodes']} nodes, {format_size(s['size_bytes'])}"


def speedup_table(sp) -> list[dict]:
    """Smallest and largest ratio and where, per CXL variant x network x baseline, then per CXL variant."""
    groups = {}
    for s in sp:
        groups.setdefault((s["cxl"], s["network"], s["baseline"]), []).append(s)
        groups.setdefault((s["cxl"], "all", "mpich" if s["baseline"] == "mpich" else "any"), []).append(s)
    table = []
    for (cxl, network, baseline), items in groups.items():
        lo = min(items, key=lambda s: s["speedup"])
        hi = max(items, key=lambda s: s["speedup"])
        table.append({"cxl": cxl, "network": network, "baseline": baseline,
                      "min_speedup": lo["speedup"], "min_at": _where(lo),
                      "max_speedup": hi["speedup"], "max_at": _where(hi),
                      "network_wins": sum(s["speedup"] < 1 for s in items), "points": len(items)})
    order = [v[0] for v in CXL_VARIANTS]
    nets = list(NETWORK_PRESETS) + ["all"]
    bases = list(BASELINES) + ["mpich", "any"]
    table.sort(key=lambda t: (order.index(t["cxl"]), nets.index(t["network"]), bases.index(t["baseline"])))
    return table


def markdown(table) -> str:
    lines = ["| CXL | network | baseline | min speedup | where | max speedup | where | network wins |",
             "|---|---|---|---|---|---|---|---|"]
    for t in table:
        lines.append(f"| {t['cxl']} | {t['network']} | {t['baseline']} | {t['min_speedup']:.2f}x | {t['min_at']} | "
                     f"{t['max_speedup']:.2f}x | {t['max_at']} | {t['network_wins']}/{t['points']} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plots

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_latency(ws, rows, nodes):
    plt = _plt()
    fabrics = list(NETWORK_PRESETS)
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), sharex=True, sharey=True)
    cxl = [r for r in rows if r["side"] == "cxl" and r["nodes"] == nodes and not math.isnan(r["latency_us"])]
    for ax, fabric in zip(axes.flat, fabrics):
        for variant in list(BASELINES) + ["mpich"]:
            pts = [r for r in rows if r["fabric"] == fabric and r["variant"] == variant and r["nodes"] == nodes]
            ax.plot([r["size_bytes"] for r in pts], [r["latency_us"] for r in pts], marker=".",
                    linestyle="--" if variant == "mpich" else "-", label=variant)
        for label, _, _ in CXL_VARIANTS:
            pts = [r for r in cxl if r["variant"] == label]
            if pts:
                ax.plot([r["size_bytes"] for r in pts], [r["latency_us"] for r in pts], marker="x", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{fabric} vs CXL pool, {nodes} nodes")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("size per rank (bytes)")
    for ax in axes[:, 0]:
        ax.set_ylabel("allgather latency (us)")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    ws.save_plot("latency_vs_size", fig)
    plt.close(fig)


def plot_heatmap(ws, sp, cxl_variant, baseline, name):
    plt = _plt()
    from matplotlib.colors import LogNorm

    items = [s for s in sp if s["cxl"] == cxl_variant and s["baseline"] == baseline]
    if not items:
        return
    nodes = sorted({s["nodes"] for s in items})
    sizes = sorted({s["size_bytes"] for s in items})
    extreme = max(max(s["speedup"] for s in items), 1 / min(s["speedup"] for s in items))
    norm = LogNorm(vmin=1 / extreme, vmax=extreme)
    fig, axes = plt.subplots(2, 3, figsize=(16, 6.5), sharex=True, sharey=True)
    for ax, net in zip(axes.flat, NETWORK_PRESETS):
        grid = [[math.nan] * len(sizes) for _ in nodes]
        for s in items:
            if s["network"] == net:
                grid[nodes.index(s["nodes"])][sizes.index(s["size_bytes"])] = s["speedup"]
        im = ax.imshow(grid, aspect="auto", origin="lower", cmap="RdBu", norm=norm)
        ax.set_title(f"{net} ({baseline}) / {cxl_variant}", fontsize=9)
        ax.set_yticks(range(len(nodes)), [str(n) for n in nodes])
        step = max(1, len(sizes) // 8)
        ax.set_xticks(range(0, len(sizes), step), [format_size(sizes[i]) for i in range(0, len(sizes), step)],
                      rotation=45, fontsize=7)
        for i in range(len(nodes)):
            for j in range(len(sizes)):
                if not math.isnan(grid[i][j]):
                    ax.text(j, i, f"{grid[i][j]:.1f}" if grid[i][j] < 10 else f"{grid[i][j]:.0f}",
                            ha="center", va="center", fontsize=5)
    for ax in axes[:, 0]:
        ax.set_ylabel("nodes")
    for ax in axes[-1]:
        ax.set_xlabel("size per rank")
    fig.colorbar(im, ax=axes, label="speedup (network latency / CXL latency); blue > 1: CXL faster")
    ws.save_plot(name, fig)
    plt.close(fig)


# ---------------------------------------------------------------- sensitivity

def sensitivity(nodes_list, sizes, rows, engine, bar) -> tuple[list[dict], list[dict]]:
    """(tidy rows, range per setting): one CXL assumption at a time against MPICH's choice on every network."""
    mpich = {(r["fabric"], r["nodes"], r["size_bytes"]): r["latency_us"]
             for r in rows if r["side"] == "network" and r["variant"] == "mpich"}
    settings = [("load_latency_ns", v, {"load_latency": f"{v} ns"}) for v in LOAD_LATENCIES_NS]
    settings += [("switch_levels", v, {"switch_levels": v}) for v in (1, 2)]
    settings += [("outstanding_lines", v, {"outstanding_lines": v}) for v in OUTSTANDING_LINES]
    settings += [("device_bw_bytes_per_ns", v, {"device_bandwidth": f"{v} GB/s"}) for v in DEVICE_BW]
    out, ranges = [], []
    for param, value, cxl in settings:
        for label, preset, coherence in CXL_VARIANTS[:2]:
            points = []
            for nodes in nodes_list:
                levels, why = cxl_levels(preset, coherence, nodes, **cxl)
                if levels is None:
                    continue
                res = simulate(cxl_scenario(preset, coherence, nodes, sizes, engine, **cxl))
                for r in res:
                    for net in NETWORK_PRESETS:
                        n_us = mpich[(net, nodes, r["size_bytes"])]
                        points.append({"parameter": param, "value": value, "cxl": label, "switch_levels": levels,
                                       "network": net, "nodes": nodes, "size_bytes": r["size_bytes"],
                                       "cxl_us": r["latency_us"], "network_us": n_us,
                                       "speedup": n_us / r["latency_us"]})
            out += points
            skipped = [n for n in nodes_list if cxl_levels(preset, coherence, n, **cxl)[0] is None]
            for net in ("all",) + NETWORK_PRESETS:
                these = [p for p in points if net in ("all", p["network"])]
                lo = min(these, key=lambda p: p["speedup"])
                hi = max(these, key=lambda p: p["speedup"])
                wins = [p for p in these if p["speedup"] < 1]
                ranges.append({"parameter": param, "value": value, "cxl": label, "network": net,
                               "min_speedup": lo["speedup"], "min_at": _where({**lo, "baseline": "mpich"}),
                               "max_speedup": hi["speedup"], "max_at": _where({**hi, "baseline": "mpich"}),
                               "network_wins": len(wins), "points": len(these),
                               "smallest_size_network_wins": min((p["size_bytes"] for p in wins), default=""),
                               "nodes_skipped": " ".join(map(str, skipped))})
            bar.update(1)
    return out, ranges


def plot_sensitivity(ws, ranges):
    plt = _plt()
    params = ["load_latency_ns", "switch_levels", "outstanding_lines", "device_bw_bytes_per_ns"]
    titles = {"load_latency_ns": "CXL load latency (ns, one switch level)", "switch_levels": "switch levels",
              "outstanding_lines": "outstanding line requests per host", "device_bw_bytes_per_ns":
              "device bandwidth (GB/s)"}
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2), sharey=True)
    for ax, param in zip(axes, params):
        for label, _, _ in CXL_VARIANTS[:2]:
            pts = [r for r in ranges if r["parameter"] == param and r["cxl"] == label and r["network"] == "all"]
            xs = [r["value"] for r in pts]
            ax.plot(xs, [r["max_speedup"] for r in pts], marker="^", label=f"{label} max")
            ax.plot(xs, [r["min_speedup"] for r in pts], marker="v", linestyle="--", label=f"{label} min")
        ax.axhline(2.91, color="grey", linewidth=0.8, linestyle=":")
        ax.axhline(42.14, color="grey", linewidth=0.8, linestyle=":")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        if param != "switch_levels":
            ax.set_xscale("log")
        ax.set_xticks(xs, [f"{v:g}" for v in xs])
        ax.minorticks_off()
        ax.set_title(titles[param], fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("speedup over MPICH's choice (min and max over grid)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Sensitivity of the projected range (dotted: published 2.91x and 42.14x; black: parity)")
    fig.tight_layout()
    ws.save_plot("sensitivity", fig)
    plt.close(fig)


# ---------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=["analytic", "des"], default="des",
                    help="des (default: CXLPoolTransport and the network DES) or analytic (closed forms)")
    ap.add_argument("--max-size", default="1MiB", help="largest OSU size per rank (default 1MiB; up to 16MiB)")
    ap.add_argument("--max-nodes", type=int, default=16, help="largest node count (default 16; 32, 64 extend)")
    ap.add_argument("--sensitivity", action="store_true", help="also run the sensitivity sweep (same engine)")
    ap.add_argument("--iterations", type=int, default=1,
                    help="DES only: timed back-to-back calls per point, latency per call as OSU reports it "
                         "(default 1: one call on a fresh fabric)")
    ap.add_argument("--warmup", type=int, default=0, help="DES only: untimed calls before them (default 0)")
    ap.add_argument("--output", help="workspace directory (default runs/allgather_cxl_vs_network-TIMESTAMP)")
    ap.add_argument("--seed", type=int, help="seed to record (the study is deterministic)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        args.max_size_bytes = parse_size(args.max_size)
    except ValueError as exc:
        ap.error(f"--max-size: {exc}")
    if not 1 <= args.max_size_bytes <= 16 << 20:
        ap.error(f"--max-size: expected 1 B..16 MiB, got {args.max_size}")
    if not 2 <= args.max_nodes <= 64:
        ap.error(f"--max-nodes: expected 2..64, got {args.max_nodes}")
    if args.iterations < 1 or args.warmup < 0:
        ap.error(f"--iterations/--warmup: expected >= 1 and >= 0, got {args.iterations} and {args.warmup}")
    if args.engine == "analytic" and (args.iterations, args.warmup) != (1, 0):
        ap.error("--iterations/--warmup: back-to-back calls need --engine des (the closed forms cost one call)")
    return args


def main(argv=None) -> int:
    from tqdm import tqdm

    args = parse_args(argv)
    sizes, nodes_list = sizes_up_to(args.max_size_bytes), nodes_up_to(args.max_nodes)
    LOOP.update(iterations=args.iterations, warmup=args.warmup)
    _, seed = make_rng(args.seed)
    ws = Workspace(args.output) if args.output else Workspace.new("runs", "allgather_cxl_vs_network")
    points = len(nodes_list) * len(sizes) * (len(NETWORK_PRESETS) * len(BASELINES) + len(CXL_VARIANTS))
    start = time.perf_counter()
    with tqdm(total=points, desc=f"allgather CXL vs network ({args.engine})", unit="pt", file=sys.stderr,
              disable=args.quiet) as bar:
        rows = main_grid(nodes_list, sizes, args.engine, bar)
    grid_s = time.perf_counter() - start
    sp = speedups(rows)
    table = speedup_table(sp)
    ws.write_csv("results", rows, COLUMNS)
    ws.write_csv("speedup", sp)
    ws.write_csv("speedup_table", table)
    ws.write_text("speedup_table.md", markdown(table))
    ws.write_csv("crossover", crossover(sp))
    plot_latency(ws, rows, max(nodes_list))
    plot_heatmap(ws, sp, "cxl3-hw", "mpich", "speedup_heatmap")
    plot_heatmap(ws, sp, "cxl3-flush", "mpich", "speedup_heatmap_cxl3_flush")
    plot_heatmap(ws, sp, "cxl2-flush", "mpich", "speedup_heatmap_cxl2_flush")
    timing = {"engine": args.engine, "grid_wall_s": grid_s, "points": points, **LOOP,
              "nodes": nodes_list, "sizes": [sizes[0], sizes[-1]]}
    if args.sensitivity:
        t0 = time.perf_counter()
        n_settings = (len(LOAD_LATENCIES_NS) + 2 + len(OUTSTANDING_LINES) + len(DEVICE_BW)) * 2
        with tqdm(total=n_settings, desc=f"sensitivity ({args.engine})", unit="setting", file=sys.stderr,
                  disable=args.quiet) as bar:
            sens, ranges = sensitivity(nodes_list, sizes, rows, args.engine, bar)
        ws.write_csv("sensitivity", sens)
        ws.write_csv("sensitivity_range", ranges)
        wins = [s for s in sens if s["speedup"] < 1]
        ws.write_csv("network_wins", wins, list(sens[0]) if sens else None)
        plot_sensitivity(ws, ranges)
        timing["sensitivity_wall_s"] = time.perf_counter() - t0
    ws.write_json("timing", timing)
    ws.write_provenance(seed, study="allgather_cxl_vs_network", engine=args.engine, **LOOP,
                        max_size_bytes=args.max_size_bytes, max_nodes=args.max_nodes)
    print(f"allgather, CXL pool vs network: {len(nodes_list)} node counts x {len(sizes)} sizes "
          f"({format_size(sizes[0])}..{format_size(sizes[-1])}), engine {args.engine}"
          + (f", {args.warmup} warm-up + {args.iterations} timed calls per point" if args.engine == "des" else ""))
    for t in table:
        if t["network"] == "all":
            print(f"  {t['cxl']:>10} over {'MPICH choice' if t['baseline'] == 'mpich' else 'any baseline':>12}: "
                  f"{t['min_speedup']:.2f}x ({t['min_at']}) .. {t['max_speedup']:.2f}x ({t['max_at']}); "
                  f"network wins {t['network_wins']}/{t['points']}")
    print("  published: 2.91x .. 42.14x (OMB, IEEE BigData 2024)")
    if args.sensitivity:
        print("sensitivity (cxl3, over MPICH's choice on every network):")
        for r in (r for r in ranges if r["network"] == "all"):
            print(f"  {r['parameter']:>22} = {r['value']:<7} {r['cxl']:>10}: {r['min_speedup']:.2f}x .. "
                  f"{r['max_speedup']:.2f}x; network wins {r['network_wins']}/{r['points']}"
                  + (f" (from {format_size(r['smallest_size_network_wins'])})" if r["network_wins"] else "")
                  + (f"; not possible at nodes {r['nodes_skipped']}" if r["nodes_skipped"] else ""))
        print(f"  sensitivity wall time: {timing['sensitivity_wall_s']:.1f} s")
    print(f"grid wall time ({args.engine} engine): {grid_s:.1f} s")
    print(f"workspace: {ws.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
