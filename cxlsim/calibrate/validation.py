"""Validation: measured vs predicted rows, their error summaries against the targets, a table and a plot.

Errors are relative, (predicted - measured) / measured; rows measured only in a slow host
placement or disturbed are shown but left out of the statistics (`comparable`).
"""
from __future__ import annotations

import statistics

from cxlsim.calibrate.des import predict_local
from cxlsim.calibrate.local_model import LocalModel
from cxlsim.coherence import Coherence
from cxlsim.results import atomic_write

TARGET_MEDIAN, TARGET_WORST, TARGET_INJECTED = 0.10, 0.25, 0.15
MODES = tuple((mode, side) for mode in Coherence for side in ("copy", "zero-copy"))


def validate(model: LocalModel, measured: list[dict], predict=None) -> list[dict]:
    """Measured vs predicted rows: coherence, side, size_bytes, measured_ns, predicted_ns, error."""
    predict = predict or (lambda row: predict_local(model, row["coherence"], row["side"], row["size_bytes"]))
    rows = []
    for row in measured:
        pred = predict(row)
        rows.append({**row, "predicted_ns": pred, "error": (pred - row["measured_ns"]) / row["measured_ns"]})
    return rows


def summarize(rows: list[dict]) -> dict:
    """{'hw copy': {median, worst, worst_size, n}, ...} of |error|."""
    out = {}
    for row in rows:
        key = f"{row['coherence']} {row['side']}" + (f" {row['setting']}" if row.get("setting") else "")
        out.setdefault(key, []).append(row)
    result = {}
    for key, every in out.items():
        rs = [r for r in every if comparable(r)]
        if not rs:
            result[key] = {"median": float("nan"), "worst": float("nan"), "worst_size": None, "n": 0,
                           "excluded": len(every)}
            continue
        errs = [abs(r["error"]) for r in rs]
        worst = max(rs, key=lambda r: abs(r["error"]))
        result[key] = {"median": statistics.median(errs), "worst": abs(worst["error"]),
                       "worst_size": worst["size_bytes"], "n": len(rs), "excluded": len(every) - len(rs)}
    return result


def comparable(row: dict) -> bool:
    """A measurement made in the conditions the primitives were: some batch of its mode passed the
    flag round-trip check and some run of it the CPU and copy/round-trip probes (see measure_allgather).
    Others are printed but left out of the error statistics."""
    return not row.get("flagged_all") and not row.get("disturbed_only")


def format_validation(rows: list[dict]) -> str:
    lines = [f"# {'mode':<20}{'Size':>10}{'measured(us)':>14}{'predicted(us)':>15}{'error%':>9}"]
    for r in rows:
        mode = f"{r['coherence']} {r['side']}" + (f" {r['setting']}" if r.get("setting") else "")
        lines.append(f"  {mode:<20}{r['size_bytes']:>10d}{r['measured_ns'] / 1e3:>14.3f}"
                     f"{r['predicted_ns'] / 1e3:>15.3f}{r['error'] * 100:>9.1f}{'' if comparable(r) else ' *'}")
    for key, s in summarize(rows).items():
        if not s["n"]:
            lines.append(f"# {key}: not evaluated: all {s['excluded']} sizes were measured only in a slow host "
                         "placement or with a rank off its CPU")
            continue
        lines.append(f"# {key}: median |error| {s['median'] * 100:.1f}%, worst {s['worst'] * 100:.1f}% "
                     f"at {s['worst_size']} B ({s['n']} sizes; {s['excluded']} left out: measured only in a "
                     "slow placement or disturbed, marked * above)")
    return "\n".join(lines) + "\n"


def plot_validation(rows: list[dict], path_png: str) -> None:
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {}
    for r in rows:
        key = f"{r['coherence']} {r['side']}" + (f" {r['setting']}" if r.get("setting") else "")
        groups.setdefault(key, []).append(r)
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, (key, rs) in enumerate(groups.items()):
        color = f"C{i % 10}"
        xs = [max(r["size_bytes"], 1) for r in rs]
        ax.plot(xs, [r["measured_ns"] / 1e3 for r in rs], "o-", color=color, label=f"{key} measured")
        ax.plot(xs, [r["predicted_ns"] / 1e3 for r in rs], "x--", color=color, label=f"{key} DES")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size per rank (bytes)")
    ax.set_ylabel("allgather latency (us)")
    ax.set_title("pool allgather on this machine: measured vs DES from primitives")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write(path_png, buf.getvalue())
