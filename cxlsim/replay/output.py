"""A replay's results written out: tables on stdout, CSV and JSON in a workspace, and plots.

Files (every write atomic, through `cxlsim.results.Workspace`):
- `totals.csv/json`: per fabric, the projected total time, the shares of
  rank-time in compute, communication and idle, the critical path's shares,
  events and wall time;
- `speedup.csv/json`: total(reference) / total(fabric), the first fabric the reference;
- `calls.csv/json`: per fabric and kind of call, the calls, their rank-time and share;
- `ranks.csv`: per fabric and rank, its finish, compute and communication time;
- `notes.json`: what each fabric's replay approximated or chose;
- `totals.png` (time per fabric, split compute / communication along the
  critical path), `calls.png` (rank-time per kind of call) and
  `timeline-LABEL.png` (every rank's calls in the first N ms, one row per rank).
"""
from __future__ import annotations

import re

from cxlsim.replay.analysis import per_call, speedups, summary
from cxlsim.replay.trace import LOCAL

__all__ = ["results", "table", "write", "timeline_plot"]


def results(timelines: dict) -> dict:
    """{'totals', 'speedup', 'calls', 'ranks', 'notes'} rows from {label: Timeline} (insertion order kept)."""
    totals = [summary(label, tl) for label, tl in timelines.items()]
    calls = [{"fabric": label, **row} for label, tl in timelines.items() for row in per_call(tl)]
    ranks = []
    for label, tl in timelines.items():
        for r, segs in enumerate(tl.segments):
            compute = sum(e - s for s, e, k, _, _ in segs if k in LOCAL)
            comm = sum(e - s for s, e, k, _, _ in segs if k not in LOCAL)
            ranks.append({"fabric": label, "rank": r, "finish_s": tl.finish_ns[r] / 1e9,
                          "compute_s": compute / 1e9, "communication_s": comm / 1e9})
    notes = {label: {"notes": tl.notes, "algorithms": tl.algorithms} for label, tl in timelines.items()}
    return {"totals": totals, "speedup": speedups(totals), "calls": calls, "ranks": ranks, "notes": notes}


def table(res: dict) -> str:
    """The text report: one line per fabric, then the time per kind of call."""
    out = ["# cxlsim replay: projected application time per fabric (DES)",
           f"# {'fabric':<22} {'total (ms)':>12} {'speedup':>8} {'compute':>8} {'comm':>8} {'idle':>6} "
           f"{'critical path: compute / comm':>30}"]
    for row, sp in zip(res["totals"], res["speedup"]):
        speedup = "n/a" if sp["speedup"] is None else f"{sp['speedup']:.3f}"
        out.append(f"  {row['fabric']:<22} {row['total_s'] * 1e3:>12.4f} {speedup:>8} "
                   f"{row['compute_share']:>8.1%} {row['communication_share']:>8.1%} {row['idle_share']:>6.1%} "
                   f"{row['critical_compute_share']:>14.1%} / {row['critical_communication_share']:.1%}")
    out.append("# shares are of rank-time (ranks x total); speedup = total(first fabric) / total(fabric)")
    out.append(f"# {'fabric':<22} {'call':<14} {'calls':>8} {'rank-time (ms)':>15} {'share':>7}")
    for row in res["calls"]:
        out.append(f"  {row['fabric']:<22} {row['kind']:<14} {row['calls']:>8} {row['time_s'] * 1e3:>15.4f} "
                   f"{row['share']:>7.1%}")
    for label, info in res["notes"].items():
        algos = "; ".join(f"{kind} {', '.join(names)}" for kind, names in info["algorithms"].items())
        if algos:
            out.append(f"# {label} algorithms: {algos}")
        out.extend(f"# {label} note: {note}" for note in info["notes"])
    return "\n".join(out) + "\n"


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def timeline_plot(workspace, label: str, timeline, first_ms: float) -> str:
    """`timeline-LABEL.png`: every rank's calls during the first `first_ms` ms (colour by kind)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    limit_ns = first_ms * 1e6
    p = len(timeline.segments)
    kinds = sorted({k for segs in timeline.segments for s, _, k, _, _ in segs if s < limit_ns})
    cmap = plt.get_cmap("tab20")
    colours = {k: ("0.8" if k in LOCAL else cmap(i % 20)) for i, k in enumerate(kinds)}
    fig, ax = plt.subplots(figsize=(9, max(2.5, min(12, 0.25 * p + 1.5))))
    for r, segs in enumerate(timeline.segments):
        bars = {}
        for start, end, kind, _, _ in segs:
            if start >= limit_ns:
                break
            if end > start:
                bars.setdefault(kind, []).append((start / 1e6, (min(end, limit_ns) - start) / 1e6))
        for kind, spans in bars.items():
            ax.broken_barh(spans, (r - 0.4, 0.8), color=colours[kind], label=kind)
    handles = {}
    for h, lab in zip(*ax.get_legend_handles_labels()):
        handles.setdefault(lab, h)
    if handles:
        ax.legend(handles.values(), handles.keys(), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_xlim(0, min(first_ms, timeline.total_ns / 1e6 or first_ms))
    ax.set_ylim(-0.6, p - 0.4)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("rank")
    ax.set_title(f"{label}: the first {first_ms:g} ms")
    path = workspace.save_plot(f"timeline-{_safe(label)}", fig)
    plt.close(fig)
    return path


def _bars(workspace, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["totals"]
    labels = [r["fabric"] for r in rows]
    compute = [r["total_s"] * 1e3 * r["critical_compute_share"] for r in rows]
    comm = [r["total_s"] * 1e3 * r["critical_communication_share"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(rows) + 2), 4))
    ax.bar(labels, compute, label="compute (critical path)", color="0.7")
    ax.bar(labels, comm, bottom=compute, label="communication (critical path)", color="tab:blue")
    for i, sp in enumerate(res["speedup"]):
        if sp["speedup"] is not None:
            ax.text(i, compute[i] + comm[i], f"{sp['speedup']:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("projected total time (ms)")
    ax.set_title("replay: total time per fabric (speedup over the first)")
    ax.legend(fontsize=8)
    workspace.save_plot("totals", fig)
    plt.close(fig)

    kinds = sorted({r["kind"] for r in res["calls"]})
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(kinds) + 2), 4))
    width = 0.8 / max(1, len(labels))
    for j, label in enumerate(labels):
        spent = {r["kind"]: r["time_s"] * 1e3 for r in res["calls"] if r["fabric"] == label}
        ax.bar([i + j * width for i in range(len(kinds))], [spent.get(k, 0.0) for k in kinds], width, label=label)
    ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(kinds))], kinds, rotation=45, ha="right")
    ax.set_ylabel("rank-time (ms, summed over ranks)")
    ax.set_title("time per kind of call")
    ax.legend(fontsize=8)
    workspace.save_plot("calls", fig)
    plt.close(fig)


def write(workspace, res: dict, timelines: dict, timeline_ms: float, plots: bool = True) -> None:
    """Write every table (CSV and JSON) and, with `plots`, the figures into `workspace`."""
    for name in ("totals", "speedup", "calls"):
        workspace.write_csv(name, res[name])
        workspace.write_json(name, res[name])
    workspace.write_csv("ranks", res["ranks"])
    workspace.write_json("notes", res["notes"])
    if plots:
        _bars(workspace, res)
        for label, tl in timelines.items():
            timeline_plot(workspace, label, tl, timeline_ms)
