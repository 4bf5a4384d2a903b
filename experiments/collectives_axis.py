"""The seed-1 study's collective axis: every collective on a CXL pool against MPICH's choice on each network.

Run:
    python experiments/collectives_axis.py                      # closed forms, seconds
    python experiments/collectives_axis.py --engine des --max-nodes 16 --max-size 64KiB  # the DES, ~30 s
    python experiments/collectives_axis.py --selector ompi      # against Open MPI's choice instead

Grid: the collectives allgather, allreduce, reduce_scatter, broadcast, alltoall
and barrier; sizes 1 B..1 MiB doubling (--max-size; barrier: 0 B only) in the
runner's convention (allgather: the block per rank, alltoall: the block per
destination, allreduce, reduce_scatter and broadcast: the whole vector); nodes
2, 4, 8, 16 (--max-nodes), one rank per node.
- Network side: the presets eth-10g-tcp, eth-25g-tcp, eth-100g-tcp,
  eth-100g-roce, ib-hdr, ib-ndr (one switch, cut-through), the algorithm
  MPICH's selector picks at that P and size (`workload.selector: mpich`, or
  Open MPI's with --selector ompi; cxlsim.models.collectives.selectors, whose
  docstring quotes its sources and notes the choices it substitutes).
- Pool side: the pool selector's choice (`algorithm: auto`: `cxl_pool`, and
  for allreduce the cheaper of `cxl_pool` and `cxl_pool_large` by closed form)
  on cxl3-pool with coherence hw and flush and on cxl2-pool with flush; the
  fewest switch levels the lane budget allows (16 hosts need a two-level tree,
  which cxl2-pool cannot build: recorded as 'not possible').

Speedup = the library's choice on the network / the pool, same nodes and size. Every
row keeps the simulator's note: a pool form that is not exact for that pool
(congested, or on a switch tree) says so ('approximate'; 'within X%' is a
measured bound), and `summary` counts the approximate rows.

Workspace (--output DIR, default runs/collectives_axis-TIMESTAMP): results.csv
(one row per side x fabric x collective x nodes x size), speedup.csv,
summary.csv and summary.md (per collective, pool variant and network: the
range with where, the sizes from which the network wins per node count), and
provenance.json. The write-up is experiments/README_collectives_axis.md.
"""
from __future__ import annotations

import argparse
import math
import sys

from cxlsim import config
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.results import Workspace
from cxlsim.simulate import run as simulate
from cxlsim.units import format_size, parse_size

COLLECTIVES = ("allgather", "allreduce", "reduce_scatter", "broadcast", "alltoall", "barrier")
NETWORK_PRESETS = ("eth-10g-tcp", "eth-25g-tcp", "eth-100g-tcp", "eth-100g-roce", "ib-hdr", "ib-ndr")
POOL_VARIANTS = (("cxl3-hw", "cxl3-pool", Coherence.HW.value), ("cxl3-flush", "cxl3-pool", Coherence.FLUSH.value),
                 ("cxl2-flush", "cxl2-pool", Coherence.FLUSH.value))
NODES = (2, 4, 8, 16)
LIBRARIES = {"mpich": "MPICH", "ompi": "Open MPI"}
COLUMNS = ["side", "fabric", "variant", "collective", "algorithm", "nodes", "size_bytes", "latency_us", "engine",
           "note"]


def sizes_for(collective: str, max_bytes: int) -> list[int]:
    if collective == "barrier":
        return [0]
    sizes, s = [], 1
    while s <= max_bytes:
        sizes.append(s)
        s *= 2
    return sizes


def scenario(collective, preset, nodes, sizes, engine, coherence=None, selector="mpich"):
    fabric = {"preset": preset, "nodes": nodes}
    if coherence:
        fabric["cxl"] = {"coherence": coherence}
    workload = {"collective": collective, "algorithm": "auto", "sizes": sizes}
    if not coherence:
        workload.update(selector=selector, chunk="64 KiB")
    return config.from_dict({"name": f"{collective}-axis", "engine": engine, "fabric": fabric, "workload": workload})


def grid(nodes_list, max_bytes, engine, selector="mpich") -> list[dict]:
    """Every network and pool point of the grid, as tidy rows."""
    rows = []
    for collective in COLLECTIVES:
        sizes = sizes_for(collective, max_bytes)
        for nodes in nodes_list:
            sides = [("network", preset, selector, None) for preset in NETWORK_PRESETS]
            sides += [("pool", preset, label, coherence) for label, preset, coherence in POOL_VARIANTS]
            for side, preset, variant, coherence in sides:
                try:
                    out = simulate(scenario(collective, preset, nodes, sizes, engine, coherence, selector))
                except InputError as exc:  # a pool this preset cannot build at this size
                    rows += [{"side": side, "fabric": preset, "variant": variant, "collective": collective,
                              "algorithm": "", "nodes": nodes, "size_bytes": size, "latency_us": math.nan,
                              "engine": engine, "note": f"not possible: {exc}"} for size in sizes]
                    continue
                rows += [{"side": side, "fabric": preset, "variant": variant, "collective": collective,
                          "algorithm": r["algorithm"], "nodes": nodes, "size_bytes": r["size_bytes"],
                          "latency_us": float(r["latency_us"]), "engine": engine, "note": r["note"]} for r in out]
    return rows


def speedups(rows) -> list[dict]:
    """MPICH's choice on each network / each pool variant, per collective, nodes and size."""
    pools = {(r["variant"], r["collective"], r["nodes"], r["size_bytes"]): r for r in rows if r["side"] == "pool"}
    out = []
    for net in (r for r in rows if r["side"] == "network"):
        for label, _, _ in POOL_VARIANTS:
            pool = pools[(label, net["collective"], net["nodes"], net["size_bytes"])]
            if math.isnan(pool["latency_us"]):
                continue
            out.append({"collective": net["collective"], "pool": label, "network": net["fabric"],
                        "nodes": net["nodes"], "size_bytes": net["size_bytes"], "library": net["variant"],
                        "network_algorithm": net["algorithm"], "network_note": net["note"],
                        "pool_algorithm": pool["algorithm"], "network_us": net["latency_us"],
                        "pool_us": pool["latency_us"], "speedup": net["latency_us"] / pool["latency_us"],
                        "pool_form": form_quality(pool["note"]), "pool_note": pool["note"]})
    return out


def form_quality(note: str) -> str:
    """'approximate' (the pool form leaves out queueing), 'bounded' (within a measured bound) or 'exact'."""
    if "approximate" in note:
        return "approximate"
    return "bounded" if "within" in note else "exact"


def _where(s) -> str:
    return f"{s['nodes']} nodes, {format_size(s['size_bytes'])} ({s['network_algorithm']})"


def summary(sp) -> list[dict]:
    """Per collective x pool variant x network: the range, where, and the sizes from which the network wins."""
    groups = {}
    for s in sp:
        groups.setdefault((s["collective"], s["pool"], s["network"]), []).append(s)
    table = []
    for (collective, pool, network), items in groups.items():
        lo = min(items, key=lambda s: s["speedup"])
        hi = max(items, key=lambda s: s["speedup"])
        wins = {}
        for s in items:
            if s["speedup"] < 1:
                wins[s["nodes"]] = min(wins.get(s["nodes"], s["size_bytes"]), s["size_bytes"])
        table.append({"collective": collective, "pool": pool, "network": network,
                      "min_speedup": lo["speedup"], "min_at": _where(lo),
                      "max_speedup": hi["speedup"], "max_at": _where(hi),
                      "network_wins_from": "; ".join(f"{n} nodes: {format_size(b)}" for n, b in sorted(wins.items()))
                      or "never",
                      "points": len(items),
                      "approximate_pool_points": sum(s["pool_form"] == "approximate" for s in items)})
    return table


def summary_markdown(table, engine, selector="mpich") -> str:
    lines = [f"# Collective axis ({engine} engine): {LIBRARIES[selector]}'s choice on the network / the pool", "",
             "| collective | pool | network | min | where | max | where | network wins from | approx. pool points |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        lines.append(f"| {t['collective']} | {t['pool']} | {t['network']} | {t['min_speedup']:.2f}x | {t['min_at']} | "
                      f"{t['max_speedup']:.2f}x | {t['max_at']} | {t['network_wins_from']} | "
                      f"{t['approximate_pool_points']}/{t['points']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("analytic", "des"), default="analytic")
    ap.add_argument("--max-size", default="1MiB", help="largest size (default 1 MiB)")
    ap.add_argument("--max-nodes", type=int, default=16, help="largest node count of 2, 4, 8, 16 (default 16)")
    ap.add_argument("--selector", choices=tuple(LIBRARIES), default="mpich",
                    help="the network side's library choice (default mpich)")
    ap.add_argument("--output", default=None, help="workspace directory (default runs/collectives_axis-TIMESTAMP)")
    args = ap.parse_args(argv)
    try:
        max_bytes = parse_size(args.max_size)
        nodes = [n for n in NODES if n <= args.max_nodes]
        if not nodes:
            raise InputError(f"--max-nodes: expected at least 2, got {args.max_nodes}")
        rows = grid(nodes, max_bytes, args.engine, args.selector)
    except InputError as exc:
        print(f"collectives_axis: error: {exc}", file=sys.stderr)
        return 2
    ws = Workspace(args.output) if args.output else Workspace.new("runs", "collectives_axis")
    sp = speedups(rows)
    table = summary(sp)
    ws.write_csv("results", rows, COLUMNS)
    ws.write_csv("speedup", sp)
    ws.write_csv("summary", table)
    ws.write_text("summary.md", summary_markdown(table, args.engine, args.selector))
    ws.write_provenance(1, engine=args.engine, selector=args.selector, nodes=nodes, max_size_bytes=max_bytes)
    print(summary_markdown(table, args.engine, args.selector))
    print(f"# workspace: {ws.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
