"""Pod kinds at scale: CXL pods around a switch, on dense multi-headed devices, or sparse (Octopus), per collective.

    python experiments/pod_kinds.py [--output DIR] [--no-des-check]

For 104 and 208 nodes (multiples of the pod sizes 8, 13 and 16) on 100 GbE RoCE and
InfiniBand NDR, each collective (allgather, allreduce, broadcast, alltoall) of 8 B to 1 MiB
per rank runs on the network alone (MPICH's choice) and on cxl-pods fabrics with the `pods`
algorithm at every size (docs/hybrid.md):

- `switch8`: pods of 8 around one cxl3-pool switch (hw coherence), 2 devices; `switch16`: pods
  of 16 on two switch levels, 3 devices (208 nodes);
- `mhd8`, `mhd16`: dense switchless pods on mhd3-pool's 16-headed devices (hw coherence), 2 and 3
  devices per pod (interleaved by 4 KiB chunk), so the hosts' data together stays within the
  devices' media (small accesses and flags still share the first device: noted approximate);
- `mhd8-flush`: mhd2-pool (CXL 2.0, software coherence), pods of 8 on 3 devices;
- `octopus13`: sparse Octopus pods of 13 hosts on octopus4-pool's 4-headed devices (CXL 2.0,
  software coherence; any two hosts share one device, each host on 4); `octopus16`: pods of 16 on
  the same devices (the affine plane over GF(4): 20 devices, each host on 5; 208 nodes).

Every point is the analytic engine; results.csv's `approximate` column names the fabrics
whose form is not exact at that point (pools with several devices, whose flags and small slots
all fall on the first; switch16's tree: its step collectives' forms leave out the uplinks'
queueing; pods whose hosts together outrun a device). A DES cross-check at small scale runs at
the end and prints its largest difference.

Reported (stdout and DIR): results.csv (network x nodes x collective x size, a latency per
fabric, the network's algorithm), crossovers.csv (for each pods fabric against the network:
the size pairs between which network/pods crosses 1, or 'none'), best.csv (the fastest
fabric per point).
"""
from __future__ import annotations

import argparse
import sys

from cxlsim import config, simulate
from cxlsim.compare import crossovers
from cxlsim.errors import InputError
from cxlsim.results import Workspace
from cxlsim.units import format_size, parse_sizes

NODES = (104, 208)
NETWORKS = ("eth-100g-roce", "ib-ndr")
COLLECTIVES = ("allgather", "allreduce", "broadcast", "alltoall")
SIZES = parse_sizes("8B:1MiB")
PODS = {"switch8": ("cxl3-pool", 8, 2), "switch16": ("cxl3-pool", 16, 3), "mhd8": ("mhd3-pool", 8, 2),
        "mhd16": ("mhd3-pool", 16, 3), "mhd8-flush": ("mhd2-pool", 8, 3), "octopus13": ("octopus4-pool", 13, 1),
        "octopus16": ("octopus4-pool", 16, 1)}
"""label: (pool preset, hosts per pod, devices per pod). A switch or dense pod has as many interleaved devices as
its hosts' issue rates need together (12.3 GB/s each through a switch, 21.2 GB/s switchless; 126 GB/s per
cxl3/mhd3 device, 63 per mhd2 device), the same count for the same pod size, so switch and switchless pods
differ by the switch alone; a sparse pod's devices are its design's."""
_INEXACT = ("approximate", "within", "upper bound")


def fabric(label: str, network: str) -> dict:
    if label == "network":
        return {"preset": network}
    pool, hosts, devices = PODS[label]
    out = {"preset": "cxl-pods", "pods": {"pool": pool, "hosts": hosts, "network": network}}
    if devices > 1:
        out["cxl"] = {"devices": devices}
    return out


def project(label: str, network: str, nodes: int, collective: str, engine: str = "analytic",
            sizes=SIZES) -> list[dict] | str:
    """The rows of one fabric, or why it cannot run this point (pods that do not divide the nodes, a sparse
    pod's collectives)."""
    data = {"engine": engine, "fabric": {**fabric(label, network), "nodes": nodes},
            "workload": {"collective": collective, "sizes": list(sizes),
                         "algorithm": "auto" if label == "network" else "pods"}}
    try:
        return simulate.run(simulate.resolved(config.from_dict(data)))
    except InputError as exc:
        if any(k in str(exc) for k in ("fabric.nodes", "fabric.pods.hosts", "sparse pods")):
            return str(exc)
        raise


def grid() -> tuple[list[dict], dict]:
    rows, reasons = [], {}
    labels = ["network", *PODS]
    for network in NETWORKS:
        for n in NODES:
            for collective in COLLECTIVES:
                by_size = {s: {"network_preset": network, "nodes": n, "collective": collective, "size_bytes": s}
                           for s in SIZES}
                for label in labels:
                    got = project(label, network, n, collective)
                    if isinstance(got, str):
                        reasons[(network, n, collective, label)] = got
                    for s in SIZES:
                        match = None if isinstance(got, str) else next(r for r in got if r["size_bytes"] == s)
                        row = by_size[s]
                        row[f"{label}_us"] = None if match is None else match["latency_us"]
                        if label == "network":
                            row["network_algorithm"] = match["algorithm"]
                            row["approximate"] = ""
                        if match is not None and any(k in match["note"] for k in _INEXACT):
                            row["approximate"] = " ".join(filter(None, (row["approximate"], label)))
                rows += by_size.values()
    for r in rows:
        for label in PODS:
            other = r[f"{label}_us"]
            r[f"network/{label}"] = r["network_us"] / other if other else None
        present = {k: r[f"{k}_us"] for k in labels if r[f"{k}_us"] is not None}
        r["fastest"] = min(present, key=present.get)
    return rows, reasons


def crossover_rows(rows, reasons) -> list[dict]:
    out = []
    for network in NETWORKS:
        for collective in COLLECTIVES:
            mine = [r for r in rows if r["network_preset"] == network and r["collective"] == collective]
            for label in PODS:
                found = crossovers(mine, f"network/{label}")
                for n in NODES:
                    why = reasons.get((network, n, collective, label))
                    pairs = found.get(n, [])
                    text = "n/a" if why else ("; ".join(f"{format_size(a)}-{format_size(b)}" for a, b in pairs)
                                              or "none")
                    out.append({"network_preset": network, "nodes": n, "collective": collective, "fabric": label,
                                "crossovers": text})
    return out


def best_rows(rows) -> list[dict]:
    """Per network x nodes x collective: the runs of sizes each fabric is the fastest at."""
    out = []
    for network in NETWORKS:
        for n in NODES:
            for collective in COLLECTIVES:
                mine = [r for r in rows if (r["network_preset"], r["nodes"], r["collective"]) == (network, n, collective)]
                spans, prev = [], None
                for r in mine:
                    if r["fastest"] != prev:
                        spans.append([r["fastest"], r["size_bytes"], r["size_bytes"]])
                        prev = r["fastest"]
                    else:
                        spans[-1][2] = r["size_bytes"]
                out.append({"network_preset": network, "nodes": n, "collective": collective,
                            "fastest": "; ".join(f"{format_size(a)}-{format_size(b)} {k}" for k, a, b in spans)})
    return out


def des_check() -> tuple[float, float]:
    """Largest relative DES-vs-form difference on small points: (where the row calls its form exact, where it
    notes it as approximate)."""
    worst = [0.0, 0.0]
    for label, n, collective in (("octopus13", 26, "allgather"), ("octopus13", 26, "allreduce"),
                                 ("octopus13", 26, "alltoall"), ("switch8", 16, "allreduce"),
                                 ("switch8", 16, "alltoall"), ("mhd8", 16, "allreduce"), ("mhd16", 32, "allreduce"),
                                 ("mhd8-flush", 16, "alltoall"), ("mhd8", 16, "broadcast"),
                                 ("switch8", 16, "broadcast"), ("octopus13", 26, "broadcast"),
                                 ("octopus16", 32, "allgather"), ("octopus16", 32, "broadcast")):
        sizes = (64, 16384)
        des = project(label, "eth-100g-roce", n, collective, "des", sizes)
        ana = project(label, "eth-100g-roce", n, collective, "analytic", sizes)
        for d, a in zip(des, ana):
            noted = any(k in a["note"] for k in _INEXACT)
            worst[noted] = max(worst[noted], abs(d["latency_us"] / a["latency_us"] - 1))
    return worst[0], worst[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", help="workspace directory (default runs/pod_kinds-TIMESTAMP)")
    parser.add_argument("--no-des-check", action="store_true", help="skip the DES cross-check")
    args = parser.parse_args()
    workspace = Workspace(args.output) if args.output else Workspace.new("runs", "pod_kinds")
    rows, reasons = grid()
    cross, best = crossover_rows(rows, reasons), best_rows(rows)
    workspace.write_csv("results", rows)
    workspace.write_csv("crossovers", cross)
    workspace.write_csv("best", best)
    print("# crossovers: the sizes between which network/pods latency crosses 1 (analytic engine)")
    for c in cross:
        print(f"{c['network_preset']:<14} {c['nodes']:>4} {c['collective']:<10} {c['fabric']:<11} {c['crossovers']}")
    print("# the fastest fabric per size range")
    for b in best:
        print(f"{b['network_preset']:<14} {b['nodes']:>4} {b['collective']:<10} {b['fastest']}")
    if not args.no_des_check:
        exact, noted = des_check()
        print(f"# DES cross-check (octopus13 at 26 nodes, octopus16 and mhd16 at 32, switch8 and mhd8 at 16; 64 B and "
              f"16 KiB): "
              f"largest |DES/form - 1| = {exact:.1e} where the form is exact, {noted:.1e} where it is noted "
              f"approximate")
    print(f"# workspace: {workspace.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
