"""A ratio metric of a sweep: a metric at one value of an axis over the same metric at another.

`ratio_frame(frame, axes, key, numerator, denominator, metric)` takes a sweep's rows (the
`sweep.csv` frame, `cxlsim.sweep_workspace.read_csv_rows`) and pairs every point whose axis
`key` holds `numerator` with the point that holds `denominator` and the same value on every
other axis. The new column `ratio_name(metric, key, numerator, denominator)` is
metric(numerator) / metric(denominator); with latencies and the slower fabric as the
numerator, above 1 means the denominator's point is faster, as in `cxlsim compare`.
A point missing on either side (not run, failed, or its metric empty) gives no row.
Values are the CSV's internal ones (as `cxlsim plot --where` reads them).
"""
from __future__ import annotations

from cxlsim.errors import InputError

__all__ = ["ratio_frame", "ratio_name"]


def ratio_name(metric: str, key: str, numerator, denominator) -> str:
    """The ratio column's name: 'METRIC KEY=A/B'."""
    return f"{metric} {key}={numerator}/{denominator}"


def _select(frame, key, value):
    column = frame[key]
    if column.dtype.kind in "iuf":
        number = float(value)
        return frame[(column - number).abs() <= 1e-9 * max(1.0, abs(number))]
    return frame[column.astype(str) == str(value)]


def ratio_frame(frame, axes, key: str, numerator, denominator, metric: str):
    """(rows of the other axes with the ratio column, the column's name); InputError naming what is missing."""
    if key not in axes:
        raise InputError(f"--ratio {key}: not an axis of the sweep; expected one of {', '.join(axes)}")
    if metric not in frame.columns:
        raise InputError(f"--ratio: the metric {metric!r} is not a column of the sweep")
    others = [a for a in axes if a != key]
    name = ratio_name(metric, key, numerator, denominator)
    sides = []
    for value in (numerator, denominator):
        side = _select(frame, key, value)
        side = side[side[metric].notna()]
        if side.empty:
            raise InputError(f"--ratio {key}={numerator}/{denominator}: no finished point has {key} = {value}")
        if side.duplicated(subset=others).any():
            raise InputError(f"--ratio {key}: several points with {key} = {value} share every other axis value")
        sides.append(side[others + [metric]])
    top, bottom = sides
    if others:
        joined = top.merge(bottom, on=others, suffixes=(" top", " bottom"))
    else:
        joined = top.rename(columns={metric: f"{metric} top"}).assign(**{f"{metric} bottom": bottom[metric].iloc[0]})
    if joined.empty:
        raise InputError(f"--ratio {key}={numerator}/{denominator}: no two points match on {', '.join(others)}")
    joined[name] = joined[f"{metric} top"] / joined[f"{metric} bottom"]
    return joined[others + [name]].reset_index(drop=True), name
