"""Sweeps: the factorial product of varied scenario keys, run on any executor, resumable.

A sweep is a base scenario (the same YAML as `cxlsim simulate`) plus axes: dotted
scenario keys, each with a list of YAML values. Every combination of one value
per axis is a *point*; a point is the base scenario with those values set and
one message size. The message size is always an axis (`workload.sizes`): the
base scenario's sizes, or the ones given to `--vary workload.sizes=...`, each
become points, so that every point is one simulated call and one CSV row.

    cxlsim sweep study.yaml --vary fabric.nodes=4,8,16 --vary fabric.preset=ib-hdr,eth-100g-roce

or, in the scenario file, a top-level `sweep:` section beside the scenario:

    sweep:
      vary:
        fabric.nodes: [4, 8, 16]
        workload.sizes: [8 KiB, 1 MiB]
      executor: local        # local (default) or mpi
      workers: 2             # local pool size (default: the CPUs this process may use)

`--vary` flags add axes or replace the file's axis of the same key. Axes keep
their order (the first is the outermost loop); the implicit size axis is the
innermost. An unknown key is an error that lists the valid ones; a value the
key does not accept is an error naming the key, the value and the expectation,
before anything runs.

**Seeds.** A point's seed is a stable hash (SHA-256) of its canonical key: the
varied keys with their validated internal values (ns, bytes, bytes/ns), plus
the base seed if the scenario sets one. Neither the order of the points, nor
resuming, nor the executor changes a point's seed or its result.

**Executors.** DES points run on a `concurrent.futures` executor: a local
`ProcessPoolExecutor` (`--executor local`, `--workers N`), mpi4py's
`MPIPoolExecutor` (`--executor mpi`), or from Python any executor passed to
`Sweep.run(executor=...)`. The MPI one is launched as
`mpiexec -n N python -m mpi4py.futures -m cxlsim sweep ...` (rank 0 runs the
sweep, the other N-1 ranks the points). Analytic points take about a
millisecond each, less than shipping them to a process, so they run in the
sweep's own process.

**Workspace** (`--output DIR`, default `runs/NAME-TIMESTAMP`):
- `sweep.yaml`: the base scenario and its `sweep:` section, re-runnable;
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
  It is rewritten atomically (at the start, every 2 s while running, at the
  end), so it never holds a partial row.

Ctrl-C (SIGINT) or SIGTERM stops the sweep: pending points are cancelled, the
local workers are ended, and the CSV of the finished points is written.
`cxlsim sweep DIR --resume` (or the scenario with `--output DIR --resume`)
runs only the points without a result; a point that failed is run again. A
lock file keeps two sweeps out of one workspace.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import difflib
import fcntl
import hashlib
import itertools
import json
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass

import yaml

from cxlsim import config
from cxlsim.errors import InputError, RunError
from cxlsim.results import Workspace, atomic_write

__all__ = ["SweepConfig", "SweepScenario", "Point", "load", "base_scenario", "cpus", "leaf_keys", "parse_vary", "expand",
           "point_seed", "run_point", "Sweep", "run_sweep", "read_csv_rows", "register"]

SIZE_KEY = "workload.sizes"
CSV_NAME = "sweep"
CSV_INTERVAL_S = 2.0
"""While a sweep runs its CSV is rewritten at most this often (and always at the end)."""
FORBIDDEN_PREFIXES = ("seed", "output.")
"""Keys a sweep may not vary: seeds are derived per point, the output is the sweep's."""


# ---------------------------------------------------------------- schema

def _vary(value) -> tuple:
    if not isinstance(value, dict):
        raise ValueError("")
    axes = []
    for key, values in value.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"key {key!r} is not a dotted key")
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if not values:
            raise ValueError(f"{key} has no values")
        axes.append((key, tuple(values)))
    return tuple(axes)


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """The `sweep:` section of a scenario file."""

    vary: tuple = config.option("vary", _vary, "a mapping of dotted keys to lists of values, "
                                "like {fabric.nodes: [4, 8]}", (), lambda axes: {k: list(v) for k, v in axes})
    """Axes: (dotted key, values as written in YAML) pairs, outermost first."""
    executor: str = config.option("executor", config.choice("local", "mpi"), "'local' or 'mpi'", "local")
    """Where DES points run: a local process pool or mpi4py's MPIPoolExecutor."""
    workers: int | None = config.option("workers", config.integer(1), "an integer >= 1", None)
    """Local pool size; None means the CPUs this process may use."""


@dataclass(frozen=True, kw_only=True)
class SweepScenario(config.Scenario):
    """A simulation scenario with a `sweep:` section (what `cxlsim sweep` loads)."""

    sweep: SweepConfig = config.section("sweep", SweepConfig)


def load(path: str) -> SweepScenario:
    """Load a scenario file that may hold a `sweep:` section."""
    return config.load(path, SweepScenario)


def base_scenario(cfg: SweepScenario) -> config.Scenario:
    """The scenario without its `sweep:` section."""
    data = config.to_dict(cfg)
    del data["sweep"]
    return config.from_dict(data)


def leaf_keys(schema=config.Scenario, prefix: str = "") -> list[str]:
    """Every dotted key of a schema's values, in schema order."""
    keys = []
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.metadata['key']}"
        if "section" in f.metadata:
            keys += leaf_keys(f.metadata["section"], key + ".")
        else:
            keys.append(key)
    return keys


def _check_key(key: str, where: str) -> None:
    valid = [k for k in leaf_keys() if not k.startswith(FORBIDDEN_PREFIXES)]
    if key in valid:
        return
    if key.startswith(FORBIDDEN_PREFIXES) and key in leaf_keys():
        why = ("each point's seed is derived from its key; set the base scenario's seed instead"
               if key == "seed" else "the output belongs to the sweep; use --output")
        raise InputError(f"{where} {key}: cannot be varied ({why})")
    near = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise InputError(f"{where} {key}: unknown key{hint}; expected one of {', '.join(valid)}")


def parse_vary(text: str) -> tuple[str, tuple]:
    """'KEY=V1,V2,...' -> (KEY, values), each value read as YAML ('8' is 8, '25 GB/s' a string)."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise InputError(f"--vary {text!r}: expected KEY=V1,V2,... like fabric.nodes=4,8,16")
    parsed = []
    for item in values.split(","):
        if not item.strip():
            raise InputError(f"--vary {text!r}: an empty value; expected KEY=V1,V2,...")
        try:
            parsed.append(yaml.safe_load(item.strip()))
        except yaml.YAMLError:
            parsed.append(item.strip())
    return key, tuple(parsed)


# ---------------------------------------------------------------- points

@dataclass(frozen=True, kw_only=True)
class Point:
    """One combination of axis values."""

    index: int
    """Position in the factorial order (first axis outermost)."""
    point_id: str
    """16 hex digits of SHA-256 over the canonical values; the point's file name."""
    seed: int
    """The point's seed (63 bits), a stable hash of its canonical key."""
    values: tuple
    """(dotted key, canonical internal value) per axis, in axis order."""
    scenario: config.Scenario
    """The base scenario with the values and the seed set (one message size)."""


def _canonical(value):
    if isinstance(value, tuple):
        return value[0] if len(value) == 1 else list(value)
    return value


def _key_text(values) -> str:
    return json.dumps(dict(values), sort_keys=True, separators=(",", ":"))


def point_seed(values, base_seed: int | None) -> int:
    """A point's seed from its canonical values (and the base seed, if any); SHA-256, not hash()."""
    text = _key_text(values) if base_seed is None else f"{base_seed}|{_key_text(values)}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") >> 1


def _point_id(values) -> str:
    return hashlib.sha256(_key_text(values).encode("utf-8")).hexdigest()[:16]


def _validated(base: config.Scenario, overrides: dict, where: str) -> config.Scenario:
    try:
        return config.with_overrides(base, overrides)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def expand(base: config.Scenario, axes) -> list[Point]:
    """The factorial product of `axes` ((key, YAML values) pairs) over `base`, validated.

    The size axis (`workload.sizes`) is added innermost if not given, and every
    value of it that names several sizes is flattened, so a point has one size.
    """
    axes = list(axes)
    seen = set()
    for key, values in axes:
        _check_key(key, "sweep")
        if key in seen:
            raise InputError(f"sweep {key}: varied twice")
        seen.add(key)
        if not values:
            raise InputError(f"sweep {key}: no values")
    if SIZE_KEY not in seen:
        axes.append((SIZE_KEY, base.workload.sizes_bytes))
    checked = []  # (key, [(yaml value, canonical value)])
    for key, values in axes:
        pairs = []
        for value in values:
            if key == SIZE_KEY and not isinstance(value, (str, list, tuple)):
                value = [value]  # one size, as a list: what workload.sizes accepts
            one = _validated(base, {key: value}, f"sweep {key}={value!r}")
            canonical = config.get(one, key)
            if key == SIZE_KEY:
                pairs += [(size, size) for size in canonical]
            else:
                pairs.append((value, _canonical(canonical)))
        canon = [c for _, c in pairs]
        dup = next((c for i, c in enumerate(canon) if c in canon[:i]), None)
        if dup is not None:
            raise InputError(f"sweep {key}: the value {dup!r} is given twice (values {list(values)!r})")
        checked.append((key, pairs))
    points = []
    for index, combo in enumerate(itertools.product(*(pairs for _, pairs in checked))):
        keys = [key for key, _ in checked]
        values = tuple((key, c) for key, (_, c) in zip(keys, combo))
        seed = point_seed(values, base.seed)
        overrides = {key: y for key, (y, _) in zip(keys, combo)}
        overrides[SIZE_KEY] = [overrides[SIZE_KEY]]
        overrides["seed"] = seed
        scenario = _validated(base, overrides, "sweep point " + ", ".join(f"{k}={c!r}" for k, c in values))
        points.append(Point(index=index, point_id=_point_id(values), seed=seed, values=values, scenario=scenario))
    return points


def run_point(scenario_dict: dict) -> dict:
    """Run one point (in any process): its resolved scenario, result row, error, wall time, host.

    A point that raises is a failed point: its error is recorded, the sweep goes on.
    """
    from cxlsim import simulate

    start = time.perf_counter()
    out = {"host": socket.gethostname(), "pid": os.getpid(), "rows": None, "resolved": None, "error": None}
    try:
        scenario = simulate.resolved(config.from_dict(scenario_dict))
        out["resolved"] = config.to_dict(scenario)
        out["rows"] = simulate.run(scenario)
    except Exception as exc:  # noqa: BLE001 - a failed point is data, not a crash of the sweep
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["wall_s"] = time.perf_counter() - start
    return out


def _jsonable(obj):
    return json.loads(json.dumps(obj))


# ---------------------------------------------------------------- executors

def _worker_init(pids) -> None:
    """Local workers: report the pid on `pids` (a SimpleQueue); Ctrl-C is the parent's to handle;
    die with the parent (Linux)."""
    pids.put(os.getpid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the sweep's handler, inherited by fork
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a SIGKILLed sweep leaves no orphans
    except (OSError, AttributeError):
        pass


def cpus() -> int:
    """The CPUs this process may run on (the default local pool size)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def make_executor(kind: str, workers: int | None, jobs: int):
    """A concurrent.futures executor for `jobs` DES points (None if there are none)."""
    if jobs == 0:
        return None
    if kind == "mpi":
        try:
            from mpi4py.futures import MPIPoolExecutor
        except ImportError:
            raise InputError("--executor mpi: mpi4py is not installed (pip install -e '.[mpi]')") from None
        # main=False: workers need only cxlsim.sweep.run_point, not a re-run of `python -m cxlsim`
        return MPIPoolExecutor(max_workers=workers, main=False)
    size = max(1, min(workers or cpus(), jobs))
    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None)
    return LocalPool(size, context)


class LocalPool(cf.ProcessPoolExecutor):
    """The local executor: a process pool that knows its workers, so that `end_workers()` can stop them.

    Each worker reports its pid when it starts (`_worker_init`); ProcessPoolExecutor itself has
    no public way to reach its workers or to end running calls (before Python 3.14).
    """

    def __init__(self, workers: int, context):
        self._pid_queue = context.SimpleQueue()
        self._worker_pids: set[int] = set()
        super().__init__(max_workers=workers, mp_context=context, initializer=_worker_init,
                         initargs=(self._pid_queue,))

    def end_workers(self) -> None:
        """Stop the workers now: their running points are abandoned (they have no result yet)."""
        while not self._pid_queue.empty():
            self._worker_pids.add(self._pid_queue.get())
        for proc in multiprocessing.active_children():
            if proc.pid in self._worker_pids and proc.is_alive():
                proc.terminate()


# ---------------------------------------------------------------- the sweep

class _Lock:
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


class Sweep:
    """A sweep's points and workspace; `run()` runs the points that have no result yet."""

    def __init__(self, cfg: SweepScenario, workspace: Workspace, *, resume: bool = False,
                 quiet: bool = True):
        self.cfg = cfg
        self.base = base_scenario(cfg)
        self.points = expand(self.base, cfg.sweep.vary)
        self.workspace = workspace
        self.points_ws = Workspace(workspace.file("points"))
        self.quiet = quiet
        self.resume = resume
        self.results: dict[int, dict] = {}  # point index -> point record
        self.run_number = 0  # how many runs of this sweep the workspace saw before this one
        self.columns: list[str] = []

    # ----- workspace state
    def _sweep_yaml(self) -> str:
        return yaml.safe_dump(config.to_dict(self.cfg), sort_keys=False)

    def _check_workspace(self) -> None:
        existing = self.workspace.file("sweep.yaml")
        if not os.path.exists(existing):
            return
        if not self.resume:
            raise InputError(f"--output {self.workspace.path!r}: already holds a sweep; "
                             "pass --resume to finish it, or choose another directory")
        try:
            old = base_scenario(load(existing))
        except InputError as exc:
            raise InputError(f"workspace {self.workspace.path!r}: its sweep.yaml is unreadable ({exc})") from None
        old_d, new_d = _flatten(config.to_dict(old)), _flatten(config.to_dict(self.base))
        diff = [k for k in new_d if old_d.get(k) != new_d[k] and k != SIZE_KEY]
        if diff:
            k = diff[0]
            raise InputError(f"--resume: workspace {self.workspace.path!r} holds a sweep of another base "
                             f"scenario ({k}: {old_d.get(k)!r} there, {new_d[k]!r} here); use another --output")

    def _earlier_runs(self) -> list:
        """The provenance of the runs before this one in the workspace (a point's `run` indexes them)."""
        path = self.workspace.file("provenance.json")
        if not self.resume or not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as fh:
            old = json.load(fh)
        earlier = old.pop("earlier_runs", [])
        return earlier + [old]

    def _load_finished(self) -> None:
        for name in os.listdir(self.points_ws.path):
            if name.startswith(".tmp-"):  # left by a killed sweep; we hold the lock
                os.unlink(self.points_ws.file(name))
        for point in self.points:
            path = self.points_ws.file(f"{point.point_id}.json")
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8") as fh:
                record = json.load(fh)
            if record.get("error") is None and record.get("scenario") == _jsonable(config.to_dict(point.scenario)):
                self.results[point.index] = record

    def _record(self, point: Point, out: dict) -> dict:
        rows = out["rows"]
        if rows is not None and len(rows) != 1:
            out = {**out, "rows": None, "error": f"RunError: expected one result row, got {len(rows)}"}
        row = None
        if out["rows"] is not None:
            row = {k: v for k, v in out["rows"][0].items() if k != "wall_s"}
        return {"index": point.index, "point_id": point.point_id, "seed": point.seed,
                "values": dict(point.values), "scenario": _jsonable(config.to_dict(point.scenario)),
                "resolved": out["resolved"], "row": row, "error": out["error"],
                "wall_s": out["wall_s"], "host": out["host"], "pid": out["pid"], "run": self.run_number}

    def _finish(self, point: Point, out: dict) -> None:
        record = self._record(point, out)
        atomic_write(self.points_ws.file(f"{point.point_id}.json"), json.dumps(record, indent=1) + "\n")
        self.results[point.index] = record

    def csv_rows(self) -> tuple[list[str], list[dict]]:
        """The tidy table of the finished points, in factorial order."""
        axes = [k for k, _ in self.points[0].values] if self.points else []
        metrics: list[str] = []
        for index in sorted(self.results):
            for k in (self.results[index]["row"] or {}):
                if k not in metrics:
                    metrics.append(k)
        columns = ["point", "point_id", "seed", *axes, *[m for m in metrics if m not in axes], "error"]
        rows = []
        for index in sorted(self.results):
            rec = self.results[index]
            row = {"point": index, "point_id": rec["point_id"], "seed": rec["seed"], "error": rec["error"] or ""}
            for k in axes:
                v = rec["values"][k]
                row[k] = ";".join(map(str, v)) if isinstance(v, list) else v
            for m in metrics:
                if m not in axes:
                    row[m] = None if rec["row"] is None else rec["row"].get(m)
            rows.append(row)
        return columns, rows

    def write_csv(self) -> str:
        columns, rows = self.csv_rows()
        return self.workspace.write_csv(CSV_NAME, rows, columns)

    # ----- running
    def run(self, executor_kind: str | None = None, workers: int | None = None, executor=None) -> dict:
        """Run the unfinished points; returns counts. Ctrl-C/SIGTERM write the CSV and re-raise.

        `executor`: any `concurrent.futures.Executor` to run the DES points on instead of
        the one `executor_kind` names ('local' or 'mpi'); the caller owns it (it is not
        shut down, only its pending futures are cancelled on an interrupt).
        """
        kind = type(executor).__name__ if executor is not None else executor_kind or self.cfg.sweep.executor
        workers = workers or self.cfg.sweep.workers
        lock = _Lock(self.workspace.path)
        try:
            self._check_workspace()
            self.workspace.write_text("sweep.yaml", self._sweep_yaml())
            earlier = self._earlier_runs()
            self.run_number = len(earlier)
            self.workspace.write_provenance(self.base.seed, points=len(self.points), executor=kind,
                                            workers=workers, axes=[k for k, _ in self.points[0].values],
                                            seed_rule="per point: SHA-256 of the point's canonical values "
                                                      "(and the base seed if set), top 63 bits",
                                            resumed=self.resume, pid=os.getpid(), run=self.run_number,
                                            earlier_runs=earlier)
            if self.resume:
                self._load_finished()
            todo = [p for p in self.points if p.index not in self.results]
            counts = {"points": len(self.points), "skipped": len(self.points) - len(todo), "ran": 0, "failed": 0}
            self.write_csv()  # the CSV exists (header and any finished points) from the start
            self._run(todo, kind, workers, counts, executor)
            self.write_csv()
            return counts
        finally:
            lock.release()

    def _run(self, todo: list[Point], kind: str, workers: int | None, counts: dict, given=None) -> None:
        remote = [p for p in todo if p.scenario.engine != "analytic"]
        local = [p for p in todo if p.scenario.engine == "analytic"]
        executor = None if given is not None else make_executor(kind, workers, len(remote))
        pool = given if given is not None else executor
        futures = {}
        bar = None
        last_csv = [time.monotonic()]

        def done(point, out):
            self._finish(point, out)
            counts["ran"] += 1
            counts["failed"] += out["error"] is not None
            if bar is not None:
                bar.update(1)
            if time.monotonic() - last_csv[0] >= CSV_INTERVAL_S:
                self.write_csv()
                last_csv[0] = time.monotonic()

        previous_term = _raise_on_sigterm()
        try:
            for point in remote:
                futures[pool.submit(run_point, config.to_dict(point.scenario))] = point
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc="sweep", unit="point", file=sys.stderr, disable=self.quiet,
                       dynamic_ncols=True, mininterval=0.5)
            for point in local:
                done(point, run_point(config.to_dict(point.scenario)))
            for future in cf.as_completed(futures):
                done(futures[future], future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            if executor is not None:
                if kind == "local":
                    executor.end_workers()
                executor.shutdown(wait=kind == "local", cancel_futures=True)
                executor = None
            self.write_csv()
            raise
        finally:
            if bar is not None:
                bar.close()
            if executor is not None:
                executor.shutdown(wait=True)
            if previous_term is not None:
                signal.signal(signal.SIGTERM, previous_term)


def _raise_on_sigterm():
    """SIGTERM stops a sweep as Ctrl-C does (only the main thread may set handlers)."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


def _flatten(data: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def read_csv_rows(workspace: str):
    """The sweep CSV of a workspace as a pandas DataFrame."""
    import pandas as pd

    path = os.path.join(workspace, f"{CSV_NAME}.csv")
    if not os.path.isfile(path):
        raise InputError(f"workspace {workspace!r}: no {CSV_NAME}.csv (not a sweep workspace, or nothing finished)")
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


# ---------------------------------------------------------------- CLI

def run_sweep(scenario_path: str, vary: list[str] = (), *, output: str | None = None, resume: bool = False,
              executor: str | None = None, workers: int | None = None, quiet: bool = True):
    """Load, expand and run a sweep; returns (Sweep, counts). What `cxlsim sweep` does."""
    if os.path.isdir(scenario_path):
        if not os.path.isfile(os.path.join(scenario_path, "sweep.yaml")):
            raise InputError(f"{scenario_path!r}: a directory without sweep.yaml (not a sweep workspace)")
        output = output or scenario_path
        scenario_path = os.path.join(scenario_path, "sweep.yaml")
    cfg = load(scenario_path)
    axes = dict(cfg.sweep.vary)
    for text in vary:
        key, values = parse_vary(text)
        axes[key] = values
    if not axes and len(cfg.workload.sizes_bytes) < 2:
        raise InputError("sweep: nothing to vary; give --vary KEY=V1,V2,... or a sweep.vary section")
    cfg = config.with_overrides(cfg, {"sweep.vary": {k: list(v) for k, v in axes.items()}})
    if executor:
        cfg = config.with_overrides(cfg, {"sweep.executor": executor})
    if workers is not None:
        if workers < 1:
            raise InputError(f"--workers: expected an integer >= 1, got {workers}")
        cfg = config.with_overrides(cfg, {"sweep.workers": workers})
    out = output or cfg.output.dir
    if resume and not out:
        raise InputError("--resume: give the workspace (cxlsim sweep DIR --resume, or --output DIR)")
    workspace = Workspace(out) if out else Workspace.new("runs", cfg.name)
    sweep = Sweep(cfg, workspace, resume=resume, quiet=quiet)
    return sweep, sweep.run()


def main(args) -> int:
    try:
        sweep, counts = run_sweep(args.scenario, args.vary or [], output=args.output, resume=args.resume,
                                  executor=args.executor, workers=args.workers,
                                  quiet=args.quiet or not sys.stderr.isatty() and not args.progress)
    except KeyboardInterrupt:
        print("# sweep interrupted; the finished points are saved, run again with --resume", file=sys.stderr)
        raise
    ws = sweep.workspace.path
    print(f"# sweep: {counts['points']} points, {counts['skipped']} already finished, {counts['ran']} run, "
          f"{counts['failed']} failed")
    print(f"# csv: {sweep.workspace.file(CSV_NAME + '.csv')}")
    print(f"# workspace: {ws}")
    if counts["failed"]:
        first = min((r for r in sweep.results.values() if r["error"]), key=lambda r: r["index"])
        raise RunError(f"{counts['failed']} of {counts['points']} points failed (first: point {first['index']} "
                       f"{first['values']}: {first['error']}); see {ws}/points/")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run the factorial product of varied scenario keys (what-if studies)",
        description="Run a scenario (as for 'cxlsim simulate') over the factorial product of varied keys. "
                    "Every point is one message size; its row goes to WORKSPACE/sweep.csv. Values are "
                    "YAML as in the scenario file, in its units ('25 GB/s', '250 ns', '64 KiB'); the CSV "
                    "holds internal units (ns, bytes, bytes/ns).")
    p.add_argument("scenario", help="scenario YAML (may hold a 'sweep:' section), or a sweep workspace to resume")
    p.add_argument("--vary", action="append", metavar="KEY=V1,V2,...",
                   help="a dotted scenario key and its values, e.g. fabric.nodes=4,8,16 (repeatable)")
    p.add_argument("--executor", choices=["local", "mpi"],
                   help="local: a process pool (default); mpi: MPIPoolExecutor, launched as "
                        "'mpiexec -n N python -m mpi4py.futures -m cxlsim sweep ...'")
    p.add_argument("--workers", type=int, help="local pool size (default: the CPUs this process may use)")
    p.add_argument("--output", help="workspace directory (default: the scenario's output.dir, "
                                    "else runs/NAME-TIMESTAMP)")
    p.add_argument("--resume", action="store_true", help="skip the points that already have a result")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--progress", action="store_true", help="a progress bar even if stderr is not a terminal")
    p.set_defaults(func=main)
