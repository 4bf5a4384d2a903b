"""Fabrics side by side: one workload projected on two or more fabrics, with ratios and crossovers.

`cxlsim compare --fabric ib-hdr --fabric cxl3-pool --nodes 4,8,16 --sizes 1B:1MiB`
projects the same collective on every fabric (a preset name, a calibration
profile `PATH.json`, or a scenario file `PATH.yaml` whose `fabric:` section is
used) at every node count, with the simulator (`cxlsim.simulate.run`).

The first fabric is the reference. For every other fabric F the ratio is

    ratio_F = latency(reference) / latency(F)      (> 1: F is faster)

A crossover is a pair of consecutive measured sizes between which a ratio
crosses 1 (one side below 1, the other above, or one exactly 1); every
crossing is listed, or "none". A crossover is only bracketed by the measured
sizes, never interpolated.

Outputs: the table on stdout (one block per node count), and a workspace with
`compare.csv` (one row per nodes x size, a latency and note column per fabric,
a ratio column per non-reference fabric), `crossovers.csv`, `ratio.png`
(ratio against size, one line per node count and fabric) and `crossover.png`
(the bracketing sizes against nodes). A point a fabric cannot build (e.g. more
hosts than its switch ports allow) is shown as "n/a" with the reason in the
notes; a fabric that cannot build any point is an error.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

from cxlsim import simulate
from cxlsim.errors import InputError
from cxlsim.results import Workspace, make_rng
from cxlsim.units import format_size, parse_sizes

__all__ = ["Fabric", "parse_fabric", "compare", "crossovers", "table", "register"]


@dataclass(frozen=True)
class Fabric:
    """One side of a comparison: a label, the scenario file it starts from (or none) and its preset key."""

    label: str
    path: str | None
    """A scenario file whose keys are layered over the default scenario, as `cxlsim simulate FILE` does."""
    overrides: dict
    """Dotted keys applied on top of the file before the workload's own keys."""


def parse_fabric(spec: str) -> Fabric:
    """A `--fabric` value: a preset name, a profile PATH.json or a scenario PATH.yaml/.yml."""
    if spec.endswith((".yaml", ".yml")):
        if not os.path.isfile(spec):
            raise InputError(f"--fabric: no scenario file {spec!r}")
        simulate.scenario_from(spec, {})  # a bad file is an error before anything runs
        return Fabric(label=os.path.splitext(os.path.basename(spec))[0], path=spec, overrides={})
    if spec.endswith(".json") and not os.path.isfile(spec):
        raise InputError(f"--fabric: no calibration profile {spec!r}")
    label = os.path.splitext(os.path.basename(spec))[0] if spec.endswith(".json") else spec
    return Fabric(label=label, path=None, overrides={"fabric.preset": spec})


def _unique_labels(fabrics: list[Fabric]) -> list[Fabric]:
    seen: dict[str, int] = {}
    out = []
    for f in fabrics:
        n = seen.get(f.label, 0)
        seen[f.label] = n + 1
        out.append(f if n == 0 else Fabric(f"{f.label}#{n + 1}", f.path, f.overrides))
    return out


def _scenario(fabric: Fabric, nodes: int, workload: dict, engine: str | None):
    keys = dict(fabric.overrides)
    keys["fabric.nodes"] = nodes
    keys.update(workload)
    if engine:
        keys["engine"] = engine
    scenario, _ = simulate.scenario_from(fabric.path, keys)
    return simulate.resolved(scenario)


def compare(fabrics: list[Fabric], nodes: list[int], workload: dict, engine: str | None = None,
            progress=None) -> list[dict]:
    """One row per (nodes, size): latency_us and note per fabric label, ratio per non-reference fabric.

    `workload` holds dotted `workload.*` keys (sizes as a list of bytes).
    A point a fabric cannot build has latency None and the reason as its note.
    """
    if len(fabrics) < 2:
        raise InputError("--fabric: give at least two fabrics to compare (the first is the reference)")
    fabrics = _unique_labels(fabrics)
    sizes = workload["workload.sizes"]
    results: dict[tuple, dict] = {}
    for fabric in fabrics:
        built = 0
        reasons = []
        for n in nodes:
            try:
                rows = simulate.run(_scenario(fabric, n, workload, engine))
            except InputError as exc:
                if "fabric.nodes" not in str(exc):
                    raise InputError(f"--fabric {fabric.label}: {exc}") from None
                reasons.append(str(exc))
                for size in sizes:
                    results[(fabric.label, n, size)] = {"latency_us": None, "note": f"n/a: {exc}"}
            else:
                built += 1
                for row in rows:
                    results[(fabric.label, n, row["size_bytes"])] = {"latency_us": row["latency_us"],
                                                                     "note": row["note"] or ""}
            if progress:
                progress.update(1)
        if not built:
            raise InputError(f"--fabric {fabric.label}: cannot build any of --nodes "
                             f"{','.join(map(str, nodes))}: {reasons[0]}")
    ref = fabrics[0].label
    table_rows = []
    for n in nodes:
        for size in sizes:
            row = {"nodes": n, "size_bytes": size}
            for f in fabrics:
                got = results[(f.label, n, size)]
                row[f"{f.label}_latency_us"] = got["latency_us"]
                row[f"{f.label}_note"] = got["note"]
            base = row[f"{ref}_latency_us"]
            for f in fabrics[1:]:
                other = row[f"{f.label}_latency_us"]
                row[f"ratio_{ref}/{f.label}"] = (base / other if base is not None and other else None)
            table_rows.append(row)
    return table_rows


def crossovers(rows: list[dict], ratio_column: str) -> dict[int, list[tuple[int, int]]]:
    """Per node count, every (smaller size, larger size) pair of consecutive measured sizes between which
    the ratio crosses 1. Points with no ratio (a fabric could not build them) break the sequence."""
    out: dict[int, list[tuple[int, int]]] = {}
    by_nodes: dict[int, list[dict]] = {}
    for row in rows:
        by_nodes.setdefault(row["nodes"], []).append(row)
    for n, group in by_nodes.items():
        group = sorted(group, key=lambda r: r["size_bytes"])
        found = []
        for a, b in zip(group, group[1:]):
            ra, rb = a[ratio_column], b[ratio_column]
            if ra is None or rb is None:
                continue
            if (ra - 1) * (rb - 1) < 0 or (ra == 1) != (rb == 1):
                found.append((a["size_bytes"], b["size_bytes"]))
        out[n] = found
    return out


def _fmt(value, width=12, digits=2):
    return f"{'n/a':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def table(rows: list[dict], labels: list[str], collective: str, engine: str) -> str:
    """The side-by-side text table: one block per node count, then the crossovers and the notes."""
    ref = labels[0]
    ratios = [f"ratio_{ref}/{lab}" for lab in labels[1:]]
    lines = [f"# cxlsim compare: {collective} latency (us) per rank count, {engine} engine; "
             f"ratio = {ref} latency / other latency (> 1: the other is faster)"]
    widths = [(c, max(len(c) + 2, 12)) for c in ratios]
    notes: dict[str, int] = {}
    for n in sorted({r["nodes"] for r in rows}):
        lines.append(f"# nodes {n}")
        head = f"{'Size':<10}" + "".join(f"{lab:>18}" for lab in labels) + "".join(f"{c:>{w}}" for c, w in widths)
        lines.append("# " + head)
        for row in (r for r in rows if r["nodes"] == n):
            cells = []
            for lab in labels:
                note = row[f"{lab}_note"]
                mark = ""
                if note:
                    mark = f"[{notes.setdefault(note, len(notes) + 1)}]"
                cells.append(f"{_fmt(row[f'{lab}_latency_us'], 14)}{mark:<4}")
            lines.append(f"  {format_size(row['size_bytes']):<10}" + "".join(cells) +
                         "".join(_fmt(row[c], w, 3) for c, w in widths))
    for column in ratios:
        lines.append(f"# crossovers of {column} (bracketing measured sizes):")
        for n, pairs in crossovers(rows, column).items():
            measured = any(r[column] is not None for r in rows if r["nodes"] == n)
            text = ", ".join(f"{format_size(a)}-{format_size(b)}" for a, b in pairs) or \
                ("none" if measured else "n/a (not built)")
            lines.append(f"#   nodes {n}: {text}")
    for note, i in notes.items():
        lines.append(f"# [{i}] {note}")
    return "\n".join(lines) + "\n"


def _plots(workspace: Workspace, rows: list[dict], labels: list[str]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = labels[0]
    nodes = sorted({r["nodes"] for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for lab in labels[1:]:
        column = f"ratio_{ref}/{lab}"
        for n in nodes:
            pts = [(r["size_bytes"] or 1, r[column]) for r in rows if r["nodes"] == n and r[column] is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=f"{lab}, {n} nodes")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel(f"{ref} latency / other latency")
    ax.set_title("ratio against size (> 1: the other fabric is faster)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    workspace.save_plot("ratio", fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for lab in labels[1:]:
        column = f"ratio_{ref}/{lab}"
        xs, lo, hi = [], [], []
        for n, pairs in crossovers(rows, column).items():
            for a, b in pairs:
                xs.append(n)
                lo.append(max(a, 1))
                hi.append(b)
        if xs:
            ax.vlines(xs, lo, hi, lw=4, alpha=0.6, label=f"{lab}")
            ax.scatter(xs, [math.sqrt(a * b) for a, b in zip(lo, hi)], s=10, color="black")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("nodes")
    ax.set_ylabel("crossover size (bytes, bracketed)")
    ax.set_title(f"where the ratio to {ref} crosses 1")
    ax.grid(True, which="both", alpha=0.3)
    if xs or len(labels) > 2:
        ax.legend(fontsize=7)
    workspace.save_plot("crossover", fig)
    plt.close(fig)


def _node_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--nodes: expected comma-separated integers, got {text!r}") from None
    if not counts or any(n < 1 for n in counts):
        raise InputError(f"--nodes: expected node counts >= 1, got {text!r}")
    return sorted(set(counts))


def main(args) -> int:
    fabrics = [parse_fabric(spec) for spec in args.fabric or []]
    nodes = _node_counts(args.nodes)
    workload = {"workload.sizes": parse_sizes(args.sizes), "workload.collective": args.collective}
    if args.algorithm:
        workload["workload.algorithm"] = args.algorithm
    _, seed = make_rng(args.seed)
    bar = None
    if not args.quiet and sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=len(fabrics) * len(nodes), desc="compare", unit="point", file=sys.stderr, leave=False)
    try:
        rows = compare(fabrics, nodes, workload, args.engine, bar)
    finally:
        if bar:
            bar.close()
    labels = [f.label for f in _unique_labels(fabrics)]
    sys.stdout.write(table(rows, labels, args.collective, args.engine or "des"))
    workspace = Workspace(args.output) if args.output else Workspace.new("runs", "compare")
    workspace.write_provenance(seed, fabrics=args.fabric, nodes=nodes, engine=args.engine or "des")
    columns = list(rows[0])
    workspace.write_csv("compare", rows, columns)
    cross = [{"ratio": column, "nodes": n, "from_size_bytes": a, "to_size_bytes": b}
             for column in (f"ratio_{labels[0]}/{lab}" for lab in labels[1:])
             for n, pairs in crossovers(rows, column).items() for a, b in pairs]
    workspace.write_csv("crossovers", cross, ["ratio", "nodes", "from_size_bytes", "to_size_bytes"])
    _plots(workspace, rows, labels)
    print(f"# workspace: {workspace.path}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="one collective on two or more fabrics, side by side, with ratios and crossovers",
        description="Project one collective on two or more fabrics over sizes x node counts; the first "
                    "--fabric is the reference of the ratio columns.")
    p.add_argument("--fabric", action="append", metavar="PRESET|PROFILE.json|SCENARIO.yaml",
                   help="a fabric to compare (repeat; at least two, the first is the reference)")
    p.add_argument("--nodes", default="8", help="node counts, comma-separated (default 8)")
    p.add_argument("--sizes", default="1B:1MiB", help="sizes: 'LO:HI' doubling or 'A,B,C' (default 1B:1MiB)")
    p.add_argument("--collective", default="allgather", help="collective (default allgather)")
    p.add_argument("--algorithm", help="algorithm on every fabric (default: each fabric's automatic choice)")
    p.add_argument("--engine", choices=["des", "analytic"], help="des (default) or the closed forms")
    p.add_argument("--seed", type=int, help="random seed to record (drawn if not given)")
    p.add_argument("--output", help="workspace directory (default runs/compare-TIMESTAMP)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)
