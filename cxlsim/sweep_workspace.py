"""A sweep's workspace: the directory that holds one sweep's definition, its finished points and its table.

Files (`--output DIR`, default `runs/NAME-TIMESTAMP`):
- `sweep.yaml`: the base scenario and its `sweep:` section, re-runnable; it
  defines the sweep the workspace holds;
- `provenance.json`: base seed, versions, git commit, host, time, command line,
  and after a resume the same for every earlier run (`earlier_runs`);
- `points/ID.json`: one file per finished point, written atomically by the
  sweep's process as soon as the point finishes (its values, seed, the point's
  scenario with every preset figure written out, its result row, wall time,
  host, pid, and `run`: which run made it, 0 for the first; the provenance of
  run k is `earlier_runs[k]`, or the top level for the latest run);
- `sweep.csv`: the tidy table, one row per finished point in factorial order:
  `point` (index), `point_id`, `seed`, one column per axis (internal units),
  then the simulator's columns (`size_bytes`, `latency_us`, `algorithm`,
  `note`, `engine`, `events`, ...) and `error` (empty unless the point failed).
  It is always rewritten whole and atomically, so it never holds a partial row.
- `.lock`: an flock held for a sweep's lifetime keeps two sweeps out of one workspace.

A workspace holds one sweep. Running into it again needs `--resume`, which
runs only the points without a result (a failed point is run again) and
refuses a definition that differs from the stored one, naming the first key
that differs (`sweep_definition.redefinition`). `--extend` is the explicit way
to add points: the base scenario and the axes stay, and an axis may only gain
values.
"""
from __future__ import annotations

import fcntl
import json
import os

import yaml

from cxlsim import config
from cxlsim.errors import InputError
from cxlsim.results import Workspace, atomic_write
from cxlsim.sweep_definition import Point, SweepScenario, load, redefinition

__all__ = ["CSV_NAME", "Lock", "SweepWorkspace", "read_csv_rows"]

CSV_NAME = "sweep"


class Lock:
    """An exclusive flock on DIR/.lock for the sweep's lifetime (released by the OS on a crash)."""

    def __init__(self, path: str):
        self.fd = os.open(os.path.join(path, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            raise InputError(f"workspace {path!r}: another sweep is running in it") from None

    def release(self) -> None:
        os.close(self.fd)


def _jsonable(obj):
    return json.loads(json.dumps(obj))


def _read_json(path: str, what: str):
    """A workspace's JSON file; a damaged one (binary, another encoding, not JSON) is an InputError naming it."""
    text = config.read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path!r}: not a JSON file written by cxlsim sweep ({exc}); "
                         "remove it or use another --output") from None


class SweepWorkspace:
    """The files of one sweep in a `Workspace`; `workspace` and `points` are the directories."""

    def __init__(self, workspace: Workspace):
        self.workspace = workspace
        self.points = Workspace(workspace.file("points"))

    # ----- the definition
    def stored(self) -> SweepScenario | None:
        """The sweep this workspace holds (its sweep.yaml), or None if it holds none."""
        path = self.workspace.file("sweep.yaml")
        if not os.path.exists(path):
            return None
        try:
            return load(path)
        except InputError as exc:
            raise InputError(f"workspace {self.workspace.path!r}: its sweep.yaml is unreadable ({exc})") from None

    def check(self, cfg: SweepScenario, *, resume: bool, extend: bool) -> None:
        """Refuse to run `cfg` here unless the workspace is new, or holds the same sweep (`resume`),
        or one that `cfg` only adds points to (`extend`)."""
        path = self.workspace.path
        old = self.stored()
        if old is None:
            if extend:
                raise InputError(f"--extend: workspace {path!r} holds no sweep to extend; run without --extend")
            return
        if not (resume or extend):
            raise InputError(f"--output {path!r}: already holds a sweep; "
                             "pass --resume to finish it, or choose another directory")
        found = redefinition(old, cfg, extend=extend)
        if found is None:
            return
        kind, where = found
        flag = "--extend" if extend else "--resume"
        if kind == "base":
            raise InputError(f"{flag}: workspace {path!r} holds a sweep of another base scenario ({where}); "
                             "use another --output")
        if kind == "drops":
            raise InputError(f"--extend: workspace {path!r} holds points that this sweep drops ({where}); "
                             "--extend only adds points: keep every value there")
        if kind == "axes":
            raise InputError(f"{flag}: workspace {path!r} holds a sweep of other axes ({where}); "
                             "use another --output")
        raise InputError(f"--resume: workspace {path!r} holds another sweep ({where}); "
                         "pass --extend to add points to it, or use another --output")

    def write_definition(self, cfg: SweepScenario) -> None:
        self.workspace.write_text("sweep.yaml", yaml.safe_dump(config.to_dict(cfg), sort_keys=False))

    def earlier_runs(self) -> list:
        """The provenance of the runs before this one (a point's `run` indexes them)."""
        path = self.workspace.file("provenance.json")
        if not os.path.exists(path):
            return []
        old = _read_json(path, "workspace provenance")
        earlier = old.pop("earlier_runs", [])
        return earlier + [old]

    # ----- points
    def finished(self, points: list[Point]) -> dict[int, dict]:
        """The records of `points` that finished without an error in an earlier run, by point index."""
        for name in os.listdir(self.points.path):
            if name.startswith(".tmp-"):  # left by a killed sweep; we hold the lock
                os.unlink(self.points.file(name))
        results = {}
        for point in points:
            path = self.points.file(f"{point.point_id}.json")
            if not os.path.exists(path):
                continue
            record = _read_json(path, "point file")
            if record.get("error") is None and record.get("scenario") == _jsonable(config.to_dict(point.scenario)):
                results[point.index] = {**record, "index": point.index}  # an extension may move it
        return results

    @staticmethod
    def record(point: Point, out: dict, run: int) -> dict:
        """A point's record from `run_point`'s output; `run` numbers the run that made it."""
        rows = out["rows"]
        if rows is not None and len(rows) != 1:
            out = {**out, "rows": None, "error": f"RunError: expected one result row, got {len(rows)}"}
        row = None
        if out["rows"] is not None:
            row = {k: v for k, v in out["rows"][0].items() if k != "wall_s"}
        return {"index": point.index, "point_id": point.point_id, "seed": point.seed,
                "values": dict(point.values), "unused": list(point.unused), "scenario": _jsonable(config.to_dict(point.scenario)),
                "resolved": out["resolved"], "row": row, "error": out["error"],
                "wall_s": out["wall_s"], "host": out["host"], "pid": out["pid"], "run": run}

    def save(self, record: dict) -> None:
        atomic_write(self.points.file(f"{record['point_id']}.json"), json.dumps(record, indent=1) + "\n")

    # ----- the table
    @staticmethod
    def table(points: list[Point], results: dict[int, dict]) -> tuple[list[str], list[dict]]:
        """The tidy table of the finished points (`results` by point index), in factorial order."""
        axes = [k for k, _ in points[0].values] if points else []
        metrics: list[str] = []
        for index in sorted(results):
            for k in (results[index]["row"] or {}):
                if k not in metrics:
                    metrics.append(k)
        columns = ["point", "point_id", "seed", *axes, *[m for m in metrics if m not in axes], "error"]
        rows = []
        for index in sorted(results):
            rec = results[index]
            row = {"point": index, "point_id": rec["point_id"], "seed": rec["seed"], "error": rec["error"] or ""}
            for k in axes:
                v = rec["values"][k]
                row[k] = ";".join(map(str, v)) if isinstance(v, list) else v
            for m in metrics:
                if m not in axes:
                    row[m] = None if rec["row"] is None else rec["row"].get(m)
            rows.append(row)
        return columns, rows

    def write_csv(self, points: list[Point], results: dict[int, dict]) -> str:
        columns, rows = self.table(points, results)
        return self.workspace.write_csv(CSV_NAME, rows, columns)


def read_csv_rows(workspace: str):
    """The sweep CSV of a workspace as a pandas DataFrame."""
    import pandas as pd

    path = os.path.join(workspace, f"{CSV_NAME}.csv")
    if not os.path.isfile(path):
        raise InputError(f"workspace {workspace!r}: no {CSV_NAME}.csv (not a sweep workspace, or nothing finished)")
    return pd.read_csv(path, keep_default_na=False, na_values=[""])
