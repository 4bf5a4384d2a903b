"""Plots of a sweep: `cxlsim plot WORKSPACE --x KEY --y METRIC [--hue KEY]`.

A sweep's `sweep.csv` (cxlsim.sweep_workspace) has one row per point: the axis columns
(dotted scenario keys, internal units) and the metric columns (`latency_us`,
`events`, ...). A *line* plot draws METRIC against one axis, one line per value
of the `--hue` axis. A *heatmap* (`--kind heatmap --x KEY --y KEY2 --z METRIC`)
colours a grid of two axes by METRIC. Every other axis that the sweep varied
must be pinned with `--where KEY=VALUE` (or the plot would silently mix
points); the error says which. A `--where` value is read as `--vary` reads it
(YAML in the key's units, '1 MiB'), and the pins are part of the PNG's default
name, so plots of other slices never overwrite each other. Points whose preset
does not use the `--hue` axis (an empty cell) are drawn as one line, "not used".
Failed points (an `error` in the CSV) are left out. The PNG goes into the
workspace, written atomically (`Workspace.save_plot`), with the matplotlib Agg
backend.

`--ratio KEY=A/B` plots a ratio metric instead: the metric at KEY = A over the
same metric at KEY = B, points paired on every other axis (`cxlsim.sweep_ratio`).
With latencies and the slower side as A, above 1 means B is faster; a line plot
marks 1 with a dashed line. A and B are read as `--where` reads values.

Axis labels carry the unit of the scenario field (`fabric.links.latency [ns]`).
Scales are linear unless the values are positive and span 100x or more
(`--xscale`/`--yscale` override).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re

from cxlsim import config
from cxlsim.errors import InputError
from cxlsim.results import Workspace
from cxlsim.sweep_definition import axis_value, base_scenario, leaf_keys, load
from cxlsim.sweep_ratio import ratio_frame
from cxlsim.sweep_workspace import CSV_NAME, read_csv_rows

__all__ = ["plot", "axis_columns", "register"]

_UNITS = (("_bytes_per_ns", "bytes/ns"), ("_ns", "ns"), ("_bytes", "bytes"), ("_us", "us"), ("_s", "s"))


def _field_units(schema=config.Scenario, prefix: str = "") -> dict:
    """Dotted YAML key -> unit, from the units in the schema's field names."""
    out = {}
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.metadata['key']}"
        if "section" in f.metadata:
            out.update(_field_units(f.metadata["section"], key + "."))
            continue
        unit = next((u for suffix, u in _UNITS if f.name.endswith(suffix)), None)
        if unit:
            out[key] = unit
    return out


def _label(column: str) -> str:
    unit = _field_units().get(column) or next((u for s, u in _UNITS if column.endswith(s)), None)
    return f"{column} [{unit}]" if unit else column


def axis_columns(frame) -> list[str]:
    """The CSV's axis columns: those named by a dotted scenario key."""
    keys = set(leaf_keys()) - {"seed"}  # the seed column is per point, derived, not an axis
    return [c for c in frame.columns if c in keys]


def _numeric(series) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _scale(series, asked: str) -> str:
    if asked != "auto":
        return asked
    if not _numeric(series) or series.empty:
        return "linear"
    lo, hi = series.min(), series.max()
    return "log" if lo > 0 and hi / lo >= 100 else "linear"


def _base(workspace: str):
    """The sweep's base scenario (from its sweep.yaml), against which --where values are read; None if absent."""
    path = os.path.join(workspace, "sweep.yaml")
    return base_scenario(load(path)) if os.path.isfile(path) else None


def _where(frame, where, base) -> tuple:
    """`frame` filtered by the --where KEY=VALUE texts, and the (key, canonical value) pairs that filtered it.

    A VALUE of a scenario key is read as `--vary` reads it (YAML, in the key's units: '1 MiB',
    '250 ns') and compared with the CSV column's internal value (bytes, ns, bytes/ns).
    """
    pins = []
    for text in where:
        key, sep, value = text.partition("=")
        if not sep or key not in frame.columns:
            raise InputError(f"--where {text!r}: expected KEY=VALUE with KEY one of {', '.join(axis_columns(frame))}")
        column = frame[key]
        wanted = value
        if base is not None and key in axis_columns(frame):
            wanted = axis_value(base, key, value)
            if isinstance(wanted, list):
                wanted = ";".join(map(str, wanted))  # as the CSV writes a list-valued axis
        if _numeric(column):
            try:
                number = float(wanted)
            except (TypeError, ValueError):
                raise InputError(f"--where {key}={value!r}: expected a number (the column holds numbers)") from None
            mask = (column - number).abs() <= 1e-9 * max(1.0, abs(number))
        else:
            mask = column.astype(str) == str(wanted)
        if not mask.any():
            seen = [str(v) for v in sorted(set(column.tolist()))] if _numeric(column) else sorted(set(column.astype(str)))
            read = f" ({wanted})" if str(wanted) != value else ""
            raise InputError(f"--where {key}={value!r}{read}: no point has this value; the sweep has {', '.join(seen)}")
        frame = frame[mask]
        pins.append((key, wanted))
    return frame, tuple(sorted(pins, key=lambda p: p[0]))


def _ratio(frame, ratio: str, metric: str, base):
    """(frame with the ratio column, its name, the key) for a --ratio KEY=A/B text."""
    key, sep, values = ratio.partition("=")
    sides = values.split("/")
    if not sep or len(sides) != 2 or not all(v.strip() for v in sides):
        raise InputError(f"--ratio {ratio!r}: expected KEY=A/B, e.g. fabric.preset=eth-100g-roce/cxl3-pool")
    if key not in axis_columns(frame):
        raise InputError(f"--ratio {ratio!r}: {key!r} is not an axis of the sweep; expected one of "
                         f"{', '.join(axis_columns(frame))}")
    read = [axis_value(base, key, v) if base is not None else v for v in sides]
    ratio_rows, name = ratio_frame(frame, axis_columns(frame), key, *read, metric)
    return ratio_rows, name, key


def _pin_text(pins) -> str:
    """The --where pins in a file name: '-where-KEY=VALUE-...' (canonical values, sorted by key)."""
    if not pins:
        return ""
    return "-where-" + "-".join(f"{k}={v}" for k, v in pins)


def _check_columns(frame, **named):
    for flag, column in named.items():
        if column is not None and column not in frame.columns:
            raise InputError(f"--{flag} {column!r}: not a column of {CSV_NAME}.csv; expected one of "
                             f"{', '.join(c for c in frame.columns if c not in ('point', 'point_id', 'seed', 'error'))}")


def _unique(frame, by: list[str], flags: str) -> None:
    """Every group of `by` holds one point, or the plot would mix points of other axes."""
    if not frame.duplicated(subset=by).any():
        return
    others = [c for c in axis_columns(frame) if c not in by and frame[c].nunique() > 1]
    pins = " ".join(f"--where {c}={frame[c].iloc[0]}" for c in others)
    raise InputError(f"several points share the same {flags}: the sweep also varies {', '.join(others)}; "
                     f"pin them (e.g. {pins}) or pass one as --hue")


NOT_USED = "not used"
"""The legend entry of the points whose preset does not use the --hue axis (an empty CSV cell)."""


def _hue_order(group):
    value = group[0]
    return (1, "") if value != value else (0, value)  # NaN (axis not used) last


def _hue_label(value, column) -> str:
    if value != value:
        return NOT_USED
    if column.isna().any() and isinstance(value, float) and value.is_integer():
        return str(int(value))  # an integer column with empty cells is read as floats: 2.0 was written as 2
    return f"{value}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def plot(workspace: str, x: str, y: str, *, hue: str | None = None, kind: str = "line", z: str | None = None,
         where=(), name: str | None = None, xscale: str = "auto", yscale: str = "auto", ratio: str | None = None):
    """Draw a sweep's CSV and save WORKSPACE/NAME.png; returns (png path, figure, axes).

    line: `y` is a metric against axis `x`, one line per value of `hue`.
    heatmap: `x` and `y` are axes, `z` the metric coloured.
    ratio: 'KEY=A/B' replaces the metric by its ratio between two values of axis KEY.
    The caller closes the figure (`matplotlib.pyplot.close(fig)`).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = read_csv_rows(workspace)
    if kind not in ("line", "heatmap"):
        raise InputError(f"--kind {kind!r}: expected 'line' or 'heatmap'")
    if kind == "heatmap" and z is None:
        raise InputError("--kind heatmap: give the metric to colour with --z (and two axes as --x and --y)")
    if kind == "line" and z is not None:
        raise InputError("--z: only for --kind heatmap")
    _check_columns(frame, x=x, y=y, hue=hue, z=z)
    metric = z if kind == "heatmap" else y
    base = _base(workspace)
    frame, pins = _where(frame, where, base)
    if ratio is not None:
        frame, ratio_column, key = _ratio(frame, ratio, metric, base)
        if key in (x, hue) or (kind == "heatmap" and key == y):
            raise InputError(f"--ratio {ratio!r}: {key} is the ratio's own axis; it cannot also be plotted")
        if kind == "heatmap":
            z = metric = ratio_column
        else:
            y = metric = ratio_column
    frame = frame[frame[metric].notna()]
    if frame.empty:
        raise InputError(f"no finished point has a value of {metric} (with the --where filters given)")
    by = [x, y] if kind == "heatmap" else [x] + ([hue] if hue else [])
    _unique(frame, by, " and ".join(f"--{f} {c}" for f, c in zip(("x", "y" if kind == "heatmap" else "hue"), by)))
    title = ", ".join(where) if where else None
    if kind == "line":
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        groups = [(None, frame)] if hue is None else sorted(frame.groupby(hue, dropna=False), key=_hue_order)
        for value, group in groups:
            group = group.sort_values(x) if _numeric(frame[x]) else group
            ax.plot(group[x].tolist(), group[y].tolist(), marker="o",
                    label=None if hue is None else _hue_label(value, frame[hue]))
        ax.set_xscale(_scale(frame[x], xscale))
        ax.set_yscale(_scale(frame[y], yscale))
        if ratio is not None:
            ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel(_label(x))
        ax.set_ylabel(_label(y))
        if hue is not None:
            ax.legend(title=_label(hue), fontsize="small")
        ax.grid(True, which="both", alpha=0.3)
        default = f"{y}-vs-{x}" + (f"-by-{hue}" if hue else "") + _pin_text(pins)
    else:
        from matplotlib.colors import LogNorm

        table = frame.pivot(index=y, columns=x, values=z).sort_index().sort_index(axis=1)
        values = table.to_numpy(dtype=float)
        finite = values[~(values != values)]
        lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 0.0)
        norm = LogNorm(lo, hi) if lo > 0 and hi / lo >= 100 else None
        cols, rows = max(3, len(table.columns)), max(3, len(table.index))
        fig, ax = plt.subplots(figsize=(1.2 + (0.9 if cols <= 10 else 0.5) * cols,
                                        1.0 + (0.6 if rows <= 10 else 0.35) * rows))
        image = ax.imshow(values, origin="lower", aspect="auto", cmap="viridis", norm=norm)
        ax.set_xticks(range(len(table.columns)), [f"{v:g}" if isinstance(v, float) else str(v) for v in table.columns])
        ax.set_yticks(range(len(table.index)), [f"{v:g}" if isinstance(v, float) else str(v) for v in table.index])
        ax.set_xlabel(_label(x))
        ax.set_ylabel(_label(y))
        fig.colorbar(image, ax=ax, label=_label(z))
        if values.size <= 400:
            mid = math.sqrt(lo * hi) if norm is not None else (lo + hi) / 2
            for (i, j), v in _cells(values):
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7,
                        color="white" if v < mid else "black")
        default = f"{z}-by-{x}-{y}" + _pin_text(pins)
    if title:
        ax.set_title(title, fontsize="small")
    path = Workspace(workspace).save_plot(_safe(name or default), fig)
    return path, fig, ax


def _cells(values):
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            if v == v:  # not NaN (a failed or missing point)
                yield (i, j), v


def main(args) -> int:
    import matplotlib.pyplot as plt

    if not os.path.isdir(args.workspace):
        raise InputError(f"workspace {args.workspace!r}: no such directory")
    path, fig, _ = plot(args.workspace, args.x, args.y, hue=args.hue, kind=args.kind, z=args.z,
                        where=args.where or (), name=args.name, xscale=args.xscale, yscale=args.yscale,
                        ratio=args.ratio)
    plt.close(fig)
    print(f"# plot: {path}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plot", help="plot a sweep's CSV (lines or a heatmap) into its workspace",
        description="Plot WORKSPACE/sweep.csv from 'cxlsim sweep'. Line: --y METRIC against --x KEY, one line "
                    "per --hue KEY. Heatmap: --kind heatmap --x KEY --y KEY2 --z METRIC. Axis columns hold "
                    "internal units (ns, bytes, bytes/ns); the labels say which.")
    p.add_argument("workspace", help="a sweep workspace (holds sweep.csv)")
    p.add_argument("--x", required=True, help="axis column for the x axis, e.g. fabric.nodes")
    p.add_argument("--y", required=True, help="line: metric column (e.g. latency_us); heatmap: second axis column")
    p.add_argument("--hue", help="line: one line per value of this axis column")
    p.add_argument("--z", help="heatmap: the metric column coloured")
    p.add_argument("--kind", default="line", choices=["line", "heatmap"], help="line (default) or heatmap")
    p.add_argument("--where", action="append", metavar="KEY=VALUE",
                   help="keep only points with this axis value (repeatable), e.g. workload.sizes=8192")
    p.add_argument("--ratio", metavar="KEY=A/B",
                   help="plot the metric at axis value A over the metric at B, points paired on every other axis "
                        "(e.g. fabric.preset=eth-100g-roce/cxl3-pool: above 1, the pool is faster)")
    p.add_argument("--name", help="PNG name in the workspace (default from the columns)")
    p.add_argument("--xscale", default="auto", choices=["auto", "linear", "log"],
                   help="auto (default): log if positive and spanning >= 100x")
    p.add_argument("--yscale", default="auto", choices=["auto", "linear", "log"], help="as --xscale")
    p.set_defaults(func=main)
