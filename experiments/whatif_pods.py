"""What if: a 16-256 node cluster as CXL pods joined by a network, against the network alone and one big pool.

    python experiments/whatif_pods.py [--output DIR] [--no-des-check]

The question (issue 16): "with my 64-node 100 GbE cluster, where does a CXL pool stop
beating the network for allgather, and what do 2 switch levels change?", for 16 to 256
nodes. Every point is the analytic engine (the closed forms, exact against the DES on
these fabrics: tests/test_hybrid_pods.py, tests/test_pool_closed_form.py); a small DES
cross-check runs at the end and its largest relative difference is printed.

Fabrics at each node count N, allgather of 1 B-1 MiB blocks, one rank per host:
- `network`: the network preset alone (eth-100g-roce or ib-ndr, one switch), MPICH's choice;
- `pool`: one cxl3-pool over all N hosts (two switch levels: the 16-port switch holds 15
  hosts and the device; more than 240 hosts do not fit a two-level tree: n/a);
- `pods{q}-L{l}`: cxl-pods, N/q pods of q hosts on cxl3-pool with l switch levels
  (q = 8 on 1 or 2 levels; q = 16 and 32 need 2), the same network between pods, the
  `pods` allgather at every size (multi-leader network phase, then the pool in each pod).

Reported (stdout and DIR): results.csv (one row per network x N x size, a latency per
fabric), crossovers.csv (for each fabric against the network: the measured size pairs
between which the network/fabric ratio crosses 1), wins.csv (the sizes where a pods
fabric beats both pure fabrics), ratio_<network>.png (network / fabric latency against
size, a panel per N; above 1 the fabric is faster).
"""
from __future__ import annotations

import argparse
import sys

from cxlsim import config, simulate
from cxlsim.compare import crossovers
from cxlsim.errors import InputError
from cxlsim.results import Workspace
from cxlsim.units import format_size, parse_sizes

NODES = (16, 32, 64, 128, 256)
NETWORKS = ("eth-100g-roce", "ib-ndr")
PODS = ((8, 1), (8, 2), (16, 2), (32, 2))
SIZES = parse_sizes("1B:1MiB")


def fabrics(network: str) -> dict:
    """{label: fabric section (without nodes)} of every fabric compared on `network`."""
    out = {"network": {"preset": network}, "pool": {"preset": "cxl3-pool"}}
    for q, levels in PODS:
        out[f"pods{q}-L{levels}"] = {"preset": "cxl-pods", "pods": {"pool": "cxl3-pool", "hosts": q,
                                                                    "network": network},
                                     "cxl": {"switch_levels": levels}}
    return out


def project(fabric: dict, nodes: int, engine: str = "analytic", sizes=SIZES) -> list[dict] | str:
    """The rows of one fabric at `nodes`, or the reason it cannot be built."""
    algorithm = "pods" if fabric["preset"] == "cxl-pods" else "auto"
    data = {"engine": engine, "fabric": {**fabric, "nodes": nodes},
            "workload": {"sizes": list(sizes), "algorithm": algorithm}}
    try:
        return simulate.run(simulate.resolved(config.from_dict(data)))
    except InputError as exc:
        if "fabric.nodes" in str(exc) or "fabric.pods.hosts" in str(exc):
            return str(exc)
        raise


def grid() -> tuple[list[dict], dict]:
    """(rows, reasons): one row per network x nodes x size with `<label>_us` per fabric; why points are n/a."""
    rows, reasons = [], {}
    for network in NETWORKS:
        for n in NODES:
            by_size = {s: {"network_preset": network, "nodes": n, "size_bytes": s} for s in SIZES}
            for label, fabric in fabrics(network).items():
                got = project(fabric, n)
                if isinstance(got, str):
                    reasons[(network, n, label)] = got
                for s in SIZES:
                    row = by_size[s]
                    match = None if isinstance(got, str) else next(r for r in got if r["size_bytes"] == s)
                    row[f"{label}_us"] = None if match is None else match["latency_us"]
                    if label == "network" and match is not None:
                        row["network_algorithm"] = match["algorithm"]
            rows += by_size.values()
    return rows, reasons


def ratios(rows: list[dict], labels) -> None:
    """Add `network/<label>` (network latency / the fabric's) to every row."""
    for r in rows:
        for label in labels:
            other = r[f"{label}_us"]
            r[f"network/{label}"] = r["network_us"] / other if other else None


def crossover_rows(rows: list[dict], labels) -> list[dict]:
    out = []
    for network in NETWORKS:
        mine = [r for r in rows if r["network_preset"] == network]
        for label in labels:
            for n, pairs in crossovers(mine, f"network/{label}").items():
                out.append({"network_preset": network, "nodes": n, "fabric": label,
                            "crossovers": "; ".join(f"{format_size(a)}-{format_size(b)}" for a, b in pairs)
                            or "none"})
    return out


def wins(rows: list[dict], pods_labels) -> list[dict]:
    """Per network x nodes x pods fabric: the sizes where it beats both the network and the single pool."""
    out = []
    for network in NETWORKS:
        for n in NODES:
            mine = [r for r in rows if r["network_preset"] == network and r["nodes"] == n]
            for label in pods_labels:
                won = [r["size_bytes"] for r in mine if r[f"{label}_us"] is not None
                       and r[f"{label}_us"] < r["network_us"] and (r["pool_us"] is None or r[f"{label}_us"] < r["pool_us"])]
                out.append({"network_preset": network, "nodes": n, "fabric": label,
                            "beats_both_at": _spans(won, [r["size_bytes"] for r in mine])})
    return out


def _spans(won: list[int], sizes: list[int]) -> str:
    """'1 B-4 KiB; 64 KiB' for the runs of consecutive measured sizes in `won`."""
    spans, run = [], []
    for s in sizes:
        if s in won:
            run.append(s)
        elif run:
            spans.append(run)
            run = []
    if run:
        spans.append(run)
    return "; ".join(format_size(r[0]) + ("" if len(r) == 1 else f"-{format_size(r[-1])}") for r in spans) or "none"


def plot(workspace: Workspace, rows: list[dict], labels) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for network in NETWORKS:
        fig, axes = plt.subplots(1, len(NODES), figsize=(4 * len(NODES), 3.6), sharey=True)
        for ax, n in zip(axes, NODES):
            mine = [r for r in rows if r["network_preset"] == network and r["nodes"] == n]
            for i, label in enumerate(labels):
                pts = [(r["size_bytes"], r[f"network/{label}"]) for r in mine if r[f"network/{label}"]]
                if pts:
                    ax.plot(*zip(*pts), marker=".", color=f"C{i}", label=label)
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{n} nodes")
            ax.set_xlabel("block per rank (B)")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel(f"{network} latency / fabric latency")
        handles = [plt.Line2D([], [], color=f"C{i}", marker=".", label=label) for i, label in enumerate(labels)]
        fig.legend(handles=handles, loc="lower center", ncol=len(labels), fontsize=8)
        fig.suptitle(f"allgather: the network ({network}) against one CXL pool and CXL pods (above 1: faster)")
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        workspace.save_plot(f"ratio_{network}", fig)
        plt.close(fig)


def des_check() -> float:
    """Largest relative DES-vs-form difference on a few small points (pods and the single pool)."""
    worst = 0.0
    for fabric, n in ((fabrics("eth-100g-roce")["pods8-L1"], 32), (fabrics("ib-ndr")["pods16-L2"], 32),
                      ({"preset": "cxl3-pool"}, 16)):
        sizes = (64, 16384)
        des, ana = project(fabric, n, "des", sizes), project(fabric, n, "analytic", sizes)
        worst = max([worst] + [abs(d["latency_us"] / a["latency_us"] - 1) for d, a in zip(des, ana)])
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", help="workspace directory (default runs/whatif_pods-TIMESTAMP)")
    parser.add_argument("--no-des-check", action="store_true", help="skip the DES cross-check")
    args = parser.parse_args()
    workspace = Workspace(args.output) if args.output else Workspace.new("runs", "whatif_pods")
    rows, reasons = grid()
    labels = [k for k in fabrics(NETWORKS[0]) if k != "network"]
    ratios(rows, labels)
    cross, won = crossover_rows(rows, labels), wins(rows, [k for k in labels if k.startswith("pods")])
    workspace.write_csv("results", rows)
    workspace.write_csv("crossovers", cross)
    workspace.write_csv("wins", won)
    plot(workspace, rows, labels)
    print("# crossovers: the sizes between which network/fabric latency crosses 1 (analytic engine)")
    for c in cross:
        why = reasons.get((c["network_preset"], c["nodes"], c["fabric"]))
        print(f"{c['network_preset']:<14} {c['nodes']:>4} {c['fabric']:<10} {'n/a: ' + why if why else c['crossovers']}")
    print("# where a pods fabric beats both the network and the single pool")
    for w in won:
        print(f"{w['network_preset']:<14} {w['nodes']:>4} {w['fabric']:<10} {w['beats_both_at']}")
    if not args.no_des_check:
        print(f"# DES cross-check (pods8-L1 and pods16-L2 at 32 nodes, pool at 16; 64 B and 16 KiB): "
              f"largest |DES/form - 1| = {des_check():.1e}")
    print(f"# workspace: {workspace.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
