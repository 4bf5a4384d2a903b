"""Running a sweep: the factorial product of varied scenario keys, run on any executor, resumable.

    cxlsim sweep study.yaml --vary fabric.nodes=4,8,16 --vary fabric.preset=ib-hdr,eth-100g-roce

A `Sweep` joins three parts, each in its own module:
- `sweep_definition`: what the sweep computes (a base scenario and its axes,
  expanded into points, each with a stable seed);
- `sweep_executors`: where the points run (in this process, a local process
  pool, MPI, or any `concurrent.futures` executor);
- `sweep_workspace`: the directory that keeps the definition, one file per
  finished point and the tidy CSV, and decides what a resume may run.

`--vary` flags add axes to the scenario file's `sweep:` section or replace its
axis of the same key. `Sweep.run()` runs the points that have no result yet and
saves each one as soon as it finishes; the CSV is rewritten at the start, at
most every 2 s while running, and at the end.

Ctrl-C (SIGINT) or SIGTERM stops the sweep: pending points are cancelled, the
local workers are ended, and the CSV of the finished points is written.
`cxlsim sweep DIR --resume` (or the scenario with `--output DIR --resume`)
runs only the points without a result; a point that failed is run again. A
resume that would redefine the sweep (another base scenario, other axes or
values) is refused, naming the key; `--extend` adds points (more values on an
axis) to the sweep a workspace holds.
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import threading
import time

from cxlsim import config
from cxlsim.errors import InputError, RunError
from cxlsim.results import Workspace
from cxlsim.sweep_definition import (Point, SweepConfig, SweepScenario, base_scenario, expand, leaf_keys, load,
                                     parse_vary, point_seed, unused_notes)
from cxlsim.sweep_executors import cpus, make_executor, run_point
from cxlsim.sweep_workspace import CSV_NAME, Lock, SweepWorkspace, read_csv_rows

__all__ = ["SweepConfig", "SweepScenario", "Point", "load", "base_scenario", "cpus", "leaf_keys", "parse_vary", "expand",
           "point_seed", "run_point", "Sweep", "run_sweep", "read_csv_rows", "register"]

CSV_INTERVAL_S = 2.0
"""While a sweep runs its CSV is rewritten at most this often (and always at the end)."""


class Sweep:
    """A sweep's points and workspace; `run()` runs the points that have no result yet.

    `resume`: the workspace may hold this same sweep, whose finished points are kept.
    `extend`: it may hold a sweep that this one only adds points to.
    """

    def __init__(self, cfg: SweepScenario, workspace: Workspace, *, resume: bool = False, extend: bool = False,
                 quiet: bool = True):
        self.cfg = cfg
        self.base = base_scenario(cfg)
        self.points = expand(self.base, cfg.sweep.vary)
        self.workspace = workspace
        self.store = SweepWorkspace(workspace)
        self.quiet = quiet
        self.resume = resume or extend
        self.extend = extend
        self.results: dict[int, dict] = {}  # point index -> point record
        self.run_number = 0  # how many runs of this sweep the workspace saw before this one
        self.notes = unused_notes(self.points)
        """What the sweep did about axes that some points do not use (one line each)."""

    def csv_rows(self) -> tuple[list[str], list[dict]]:
        """The tidy table of the finished points, in factorial order."""
        return self.store.table(self.points, self.results)

    def write_csv(self) -> str:
        return self.store.write_csv(self.points, self.results)

    def _finish(self, point: Point, out: dict) -> None:
        record = self.store.record(point, out, self.run_number)
        self.store.save(record)
        self.results[point.index] = record

    def run(self, executor_kind: str | None = None, workers: int | None = None, executor=None) -> dict:
        """Run the unfinished points; returns counts. Ctrl-C/SIGTERM write the CSV and re-raise.

        `executor`: any `concurrent.futures.Executor` to run the DES points on instead of
        the one `executor_kind` names ('local' or 'mpi'); the caller owns it (it is not
        shut down, only its pending futures are cancelled on an interrupt).
        """
        kind = type(executor).__name__ if executor is not None else executor_kind or self.cfg.sweep.executor
        workers = workers or self.cfg.sweep.workers
        lock = Lock(self.workspace.path)
        try:
            self.store.check(self.cfg, resume=self.resume, extend=self.extend)
            earlier = self.store.earlier_runs() if self.resume else []
            self.store.write_definition(self.cfg)
            self.run_number = len(earlier)
            self.workspace.write_provenance(self.base.seed, points=len(self.points), executor=kind,
                                            workers=workers, axes=[k for k, _ in self.points[0].values],
                                            seed_rule="per point: SHA-256 of the point's canonical values "
                                                      "(and the base seed if set), top 63 bits",
                                            unused_axes=self.notes,
                                            resumed=self.resume, extended=self.extend, pid=os.getpid(),
                                            run=self.run_number, earlier_runs=earlier)
            if self.resume:
                self.results = self.store.finished(self.points)
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

        stop = _StopSignals()

        def done(point, out):
            stop.check()
            self._finish(point, out)
            counts["ran"] += 1
            counts["failed"] += out["error"] is not None
            if bar is not None:
                bar.update(1)
            if time.monotonic() - last_csv[0] >= CSV_INTERVAL_S:
                self.write_csv()
                last_csv[0] = time.monotonic()

        stop.install()
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
            stop.check()
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
            stop.restore()


class _StopSignals:
    """SIGINT and SIGTERM stop a sweep: the handler raises KeyboardInterrupt and records the signal.

    Python swallows an exception raised while a finalizer or weakref callback runs ("Exception
    ignored in ..."), so the run loop also checks `requested` after every point: a signal that
    arrived is never lost. Only the main thread may set handlers; elsewhere this does nothing.
    """

    def __init__(self):
        self.requested = None
        self.previous = {}

    def _handler(self, signum, frame):
        self.requested = signum
        raise KeyboardInterrupt(f"signal {signum}")

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handler)

    def check(self) -> None:
        """Raise KeyboardInterrupt if a stop signal arrived (even if its first raise was swallowed)."""
        if self.requested is not None:
            raise KeyboardInterrupt(f"signal {self.requested}")

    def restore(self) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)
        self.previous = {}


# ---------------------------------------------------------------- CLI

def run_sweep(scenario_path: str, vary: list[str] = (), *, output: str | None = None, resume: bool = False,
              extend: bool = False, executor: str | None = None, workers: int | None = None, quiet: bool = True):
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
    if (resume or extend) and not out:
        flag = "--extend" if extend else "--resume"
        raise InputError(f"{flag}: give the workspace (cxlsim sweep DIR {flag}, or --output DIR)")
    workspace = Workspace(out) if out else Workspace.new("runs", cfg.name)
    sweep = Sweep(cfg, workspace, resume=resume, extend=extend, quiet=quiet)
    return sweep, sweep.run()


def main(args) -> int:
    try:
        sweep, counts = run_sweep(args.scenario, args.vary or [], output=args.output, resume=args.resume,
                                  extend=args.extend, executor=args.executor, workers=args.workers,
                                  quiet=args.quiet or not sys.stderr.isatty() and not args.progress)
    except KeyboardInterrupt:
        print("# sweep interrupted; the finished points are saved, run again with --resume", file=sys.stderr)
        raise
    ws = sweep.workspace.path
    for note in sweep.notes:
        print(f"# sweep: {note}")
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
    p.add_argument("--resume", action="store_true",
                   help="finish the sweep the workspace holds: skip the points that already have a result "
                        "(refused if this sweep's definition differs from the stored one)")
    p.add_argument("--extend", action="store_true",
                   help="add points to the sweep the workspace holds (axes gain values; the base scenario "
                        "and the axes stay), then run the points without a result")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--progress", action="store_true", help="a progress bar even if stderr is not a terminal")
    p.set_defaults(func=main)
