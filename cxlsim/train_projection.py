"""The DES's projection of one `cxlsim bench train` run (its train.json), and its error per mode.

Inputs: the run record (`cxlsim bench train --out DIR` writes DIR/train.json; schema in
docs/bench-train.md and /work/coord/ROUND3.md) and a `local-host` calibration profile
(`cxlsim calibrate` writes it; cxlsim.calibrate.profile).

What the DES is given, per run:

- the same ranks (one DES worker per emulated rank, one rank per pool host), steps, batch
  and gradient size (the record's `param_bytes`);
- per rank and step, the measured time outside the pool calls: the step's wall time
  (`t_end_s` differences, so nothing between steps is lost) less its `comm_s`. So the
  per-rank slow-down factors and stragglers of the run are in the DES as measured, and
  what the DES projects is the pool communication and the waiting it causes;
- the pool: the profile's local-host CXL pool (`cxlsim.calibrate.local_preset`) at the
  gradient's (ddp: the largest bucket's) size, in the run's coherence mode, with the
  emulator's allreduce rule (cxl_pool_large from `allreduce_large_bytes` on) and slot
  chunking;
- the fold at the profile's host reduction bandwidth.

Which DES mode projects which emulated mode (`DES_MODES`): sync by the pool all-reduce
sync (models/training/pool_sync.py), ddp by the DES's ddp on the pool with the run's
bucket count (equal buckets) and overlap, async and hybrid by the pool shared-region
models of models/training/pool_shared.py.

Outputs per run (`project`): measured and projected throughput (samples/s over the
whole run: every rank's samples over the last step end) and time to each accuracy of
the record (the DES does not train: the global step at which the run's evaluation first
reached the accuracy is taken from the run, and the DES says when its run reaches that
step), and their relative errors (projected / measured - 1). Target of issue 19: |error|
<= 15% in throughput at np 2 in every mode (`TARGET_THROUGHPUT_ERROR`).

Units: seconds in the record and in the output, ns inside the DES, bytes.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

from cxlsim.calibrate.local_model import LocalModel, local_preset
from cxlsim.calibrate.profile import load_profile
from cxlsim.coherence import Coherence
from cxlsim.emulator.training import run_record
from cxlsim.errors import InputError
from cxlsim.models.training import cluster
from cxlsim.models.training.core import Job
from cxlsim.models.training.ddp import run_ddp
from cxlsim.models.training.pool_allreduce import PoolAllreduce
from cxlsim.models.training.pool_shared import run_async_on_pool, run_hybrid_on_pool
from cxlsim.models.training.pool_sync import run_sync_allreduce
from cxlsim.models.training.stragglers import measured_multipliers
from cxlsim.results import atomic_write

__all__ = ["RUN_KEYS", "RANK_KEYS", "DES_MODES", "TARGET_THROUGHPUT_ERROR", "DEFAULT_LARGE_BYTES",
           "DEFAULT_SLOT_BYTES", "load_run", "check_run", "local_work_ns", "pool_preset", "project",
           "format_projection", "main"]

RUN_KEYS = ("mode", "np", "steps", "batch_size", "coherence", "param_bytes", "ranks", "eval", "factors")
RANK_KEYS = ("rank", "steps_done", "step_s", "comm_s", "t_end_s")
DES_MODES = {
    "sync": "sync, aggregation allreduce: one pool all-reduce of the gradient per step (pool_sync.py)",
    "ddp": "ddp on the pool: equal buckets, each a pool all-reduce, overlapped with the backward pass if the run "
           "was (ddp.py)",
    "async": "async on the pool: elastic averaging through per-worker slots, no barrier (pool_shared.py)",
    "hybrid": "hybrid on the pool: a global counter, contributions in per-worker slots, stop by the counter "
              "(pool_shared.py)",
}
"""The DES mode each emulated mode is projected with."""
TARGET_THROUGHPUT_ERROR = 0.15
DEFAULT_LARGE_BYTES = 65536
"""The emulator's default allreduce threshold (PoolComm.open), used when the record does not state one."""
DEFAULT_SLOT_BYTES = 1 << 20
"""run_local's default pool slot, used when the record does not state one."""
BACKWARD_FRACTION = 2.0 / 3.0
"""ddp: the part of a step's local work after which the last bucket is ready (the DES's default; the record
does not split forward and backward)."""


def check_run(run, source: str = "train.json") -> dict:
    """InputError naming the key unless `run` has what a projection reads (RUN_KEYS, RANK_KEYS per rank)."""
    if not isinstance(run, dict):
        raise InputError(f"{source}: expected a JSON object, got {type(run).__name__}")
    missing = [k for k in RUN_KEYS if k not in run]
    if missing:
        raise InputError(f"{source}: missing key(s) {missing}; a `cxlsim bench train` record has {list(RUN_KEYS)}")
    if run["mode"] not in DES_MODES:
        raise InputError(f"{source}: mode: the projection knows {', '.join(DES_MODES)}, got {run['mode']!r}")
    if not isinstance(run["ranks"], list) or len(run["ranks"]) != run["np"]:
        raise InputError(f"{source}: ranks: expected {run['np']} entries (np), got {run['ranks']!r:.80}")
    for i, rank in enumerate(run["ranks"]):
        gone = [k for k in RANK_KEYS if k not in rank]
        if gone:
            raise InputError(f"{source}: ranks[{i}]: missing key(s) {gone}")
        n = rank["steps_done"]
        for key in ("step_s", "comm_s", "t_end_s"):
            if len(rank[key]) != n:
                raise InputError(f"{source}: ranks[{i}].{key}: expected {n} values (steps_done), got "
                                 f"{len(rank[key])}")
    Coherence.parse(run["coherence"], f"{source}: coherence")
    return run


def load_run(path: str) -> dict:
    """The run record at `path` (a train.json or its directory), validated by its schema
    (cxlsim.emulator.training.run_record) and for what a projection reads (`check_run`)."""
    return check_run(run_record.read(path), path)


def local_work_ns(rank: dict) -> np.ndarray:
    """One rank's measured time outside the pool calls per step, ns: the step's wall time (from the
    previous step's end, the first from the common start) less its comm_s; never below 1 ns."""
    ends = np.asarray(rank["t_end_s"], float)
    walls = np.diff(np.concatenate(([0.0], ends)))
    return np.maximum((walls - np.asarray(rank["comm_s"], float)) * 1e9, 1.0)


def pool_preset(profile: dict, coherence: Coherence, size_bytes: int, nranks: int):
    """The profile's local-host CXL pool for calls of `size_bytes` at `nranks` ranks (calibrate.local_preset)."""
    if profile.get("kind") != "local-host":
        raise InputError(f"profile: the projection needs a local-host profile (cxlsim calibrate), got kind "
                         f"{profile.get('kind')!r}")
    model = LocalModel.from_dict({**profile["model"], "np": nranks})
    return local_preset(model, size_bytes, model.path_ns[coherence.value], coherence)


def _spec(nranks: int):
    # The GPU names are labels only: every worker's compute time is the measured one.
    return cluster.from_dict({"name": "emulated", "interconnect": "ib-hdr", "precision": "fp32",
                              "nodes": [{"gpu": "v100", "repeat": nranks}]})


def _job(run: dict, preset, local: list) -> Job:
    dtype = {4: "fp32", 2: "fp16"}.get(run["param_bytes"] // max(run.get("param_count") or 1, 1), "fp64")
    return Job(model=run.get("model", "?"), batch=run["batch_size"], precision="fp32", gradient_dtype=dtype,
               gradient_bytes=run["param_bytes"], iteration_ns=tuple(float(np.mean(x)) for x in local),
               reduce_bw_bytes_per_ns=(preset.host.reduce_bw_bytes_per_ns,) * run["np"])


def _buckets(run: dict) -> list[int]:
    n = run.get("buckets") or 1
    size = -(-run["param_bytes"] // n)
    return [size] * (n - 1) + [run["param_bytes"] - size * (n - 1)]


def _measured(run: dict) -> dict:
    """Measured throughput and time-to-accuracy of the record (recomputed from its ranks)."""
    ranks = run["ranks"]
    samples = sum(r["steps_done"] for r in ranks) * run["batch_size"]
    end = max((r["t_end_s"][-1] for r in ranks if r["t_end_s"]), default=0.0)
    tta = {}
    for acc in sorted(float(a) for a in (run.get("time_to_accuracy_s") or {})):
        hit = next((e for e in run["eval"] if e["accuracy"] >= acc), None)
        tta[acc] = None if hit is None else (hit["t_s"], hit["step"])
    return {"samples": samples, "elapsed_s": end, "throughput": samples / end if end > 0 else math.nan, "tta": tta}


def _global_step_ends_s(result, mode: str) -> np.ndarray:
    """When the DES run completed its 1st, 2nd, ... global step, s: synchronous modes a step of every
    worker (all of them), async and hybrid any worker's local step (the steps of all workers merged)."""
    if mode in ("sync", "ddp"):
        return np.asarray(result.step_end_ns, float) / 1e9
    ends = sorted(end for per in result.intervals for (_, _, end) in per)
    return np.asarray(ends, float) / 1e9


def _run_des(run: dict, profile: dict, large_bytes: int, slot_bytes: int):
    mode, W = run["mode"], run["np"]
    coherence = Coherence.parse(run["coherence"])
    local = [local_work_ns(r) for r in run["ranks"]]
    size = max(_buckets(run)) if mode == "ddp" else run["param_bytes"]
    preset = pool_preset(profile, coherence, size, W)
    spec, job = _spec(W), _job(run, preset, local)
    noise = {"cv": 0.0, "slowdown": None, "failure": None, "compute": "measured (train.json)"}
    if mode in ("sync", "ddp"):
        steps = min(r["steps_done"] for r in run["ranks"])
        if steps < 1:
            raise InputError("train.json: a rank did no step; nothing to project")
        compute = np.stack([x[:steps] for x in local], axis=1)
        if mode == "sync":
            J = measured_multipliers(job.iteration_ns, compute)
            return run_sync_allreduce(spec, job, steps, run.get("seed"), J, None, noise, pool=preset,
                                      coherence=coherence, large_bytes=large_bytes, slot_bytes=slot_bytes), preset
        buckets = _buckets(run)
        on_pool = PoolAllreduce(spec, preset, coherence=coherence, large_bytes=large_bytes, slot_bytes=slot_bytes)
        return run_ddp(spec, job, steps=steps, seed=run.get("seed"), bucket_cap_bytes=buckets[0],
                       first_bucket_bytes=buckets[0], overlap=bool(run.get("overlap", True)),
                       backward_fraction=BACKWARD_FRACTION, pool=on_pool, compute_ns=compute), preset
    runner = run_async_on_pool if mode == "async" else run_hybrid_on_pool
    return runner(spec, job, steps=run["steps"], local_ns=local, pool=preset, coherence=coherence,
                  seed=run.get("seed"), **_shared_options(run)), preset


def _shared_options(run: dict) -> dict:
    """The async/hybrid parameters the record states (pool_shared.py's defaults otherwise)."""
    keys = {"async": ("tau",), "hybrid": ("round_size",)}[run["mode"]]
    return {k: run[k] for k in keys if run.get(k) is not None}


def _error(projected, measured):
    if projected is None or measured is None or not measured:
        return None
    return projected / measured - 1.0


def project(run: dict, profile: dict, *, large_bytes: int | None = None, slot_bytes: int | None = None) -> dict:
    """Project `run` (a checked train.json) with the DES on the local-host pool of `profile`.

    large_bytes, slot_bytes: the emulator's allreduce threshold and pool slot (default: the record's
    `allreduce_large_bytes` / `slot_bytes` if it has them, else the emulator's defaults). Returns
    {mode, des_mode, np, coherence, measured/projected throughput and elapsed, their error,
    time_to_accuracy: [{accuracy, step, measured_s, projected_s, error}], des: the DES's params}.
    """
    check_run(run)
    large = large_bytes if large_bytes is not None else run.get("allreduce_large_bytes", DEFAULT_LARGE_BYTES)
    slot = slot_bytes if slot_bytes is not None else run.get("slot_bytes", DEFAULT_SLOT_BYTES)
    result, preset = _run_des(run, profile, large, slot)
    measured = _measured(run)
    ends = _global_step_ends_s(result, run["mode"])
    tta = []
    for acc, hit in measured["tta"].items():
        row = {"accuracy": acc, "step": None, "measured_s": None, "projected_s": None, "error": None}
        if hit is not None:
            t_s, step = hit
            k = min(max(int(step), 1), len(ends))
            row.update(step=int(step), measured_s=t_s, projected_s=float(ends[k - 1]) if len(ends) else None)
            row["error"] = _error(row["projected_s"], t_s)
        tta.append(row)
    projected = result.throughput_samples_per_s
    return {"mode": run["mode"], "des_mode": DES_MODES[run["mode"]], "np": run["np"],
            "coherence": Coherence.parse(run["coherence"]).value, "factors": run["factors"],
            "measured_throughput": measured["throughput"], "projected_throughput": projected,
            "throughput_error": _error(projected, measured["throughput"]),
            "measured_elapsed_s": measured["elapsed_s"], "projected_elapsed_s": result.elapsed_ns / 1e9,
            "measured_comm_share": _comm_share(run), "time_to_accuracy": tta,
            "des": {**result.params, "events": result.events, "pool_bw_bytes_per_ns":
                    preset.host.memcpy_bw_bytes_per_ns, "pool_path_ns": preset.host_path.port_latency_ns}}


def _comm_share(run: dict) -> float:
    """The measured fraction of all ranks' step time spent in pool calls (comm_s / step_s)."""
    step = sum(sum(r["step_s"]) for r in run["ranks"])
    comm = sum(sum(r["comm_s"]) for r in run["ranks"])
    return comm / step if step > 0 else math.nan


def _pct(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}%"


def format_projection(rows: list[dict]) -> str:
    """A text table of projections: throughput and time-to-accuracy, measured vs projected, per run."""
    out = [f"{'mode':7} {'np':>3} {'coh':5} {'measured/s':>11} {'projected/s':>12} {'error':>8} {'comm':>6}  "
           f"time to accuracy (measured -> projected s, error)"]
    for r in rows:
        tta = "; ".join(f"{t['accuracy']:.2f}: " + ("not reached" if t["measured_s"] is None else
                        f"{t['measured_s']:.2f} -> {t['projected_s']:.2f} ({_pct(t['error'])})")
                        for t in r["time_to_accuracy"]) or "none recorded"
        out.append(f"{r['mode']:7} {r['np']:>3} {r['coherence']:5} {r['measured_throughput']:>11.1f} "
                   f"{r['projected_throughput']:>12.1f} {_pct(r['throughput_error']):>8} "
                   f"{100 * r['measured_comm_share']:>5.1f}%  {tta}")
    out.append(f"# target (issue 19, np 2): |throughput error| <= {100 * TARGET_THROUGHPUT_ERROR:.0f}%; the DES is "
               "given each rank's measured time outside pool calls and projects the pool calls and the waiting")
    for mode in dict.fromkeys(r["mode"] for r in rows):
        out.append(f"# {mode} -> DES {DES_MODES[mode]}")
    return "\n".join(out)


def main(argv=None) -> int:
    """`python -m cxlsim.train_projection TRAIN.json... --profile PROFILE.json [--json OUT]`."""
    p = argparse.ArgumentParser(prog="python -m cxlsim.train_projection",
                                description="Project `cxlsim bench train` runs with the DES and report the errors.")
    p.add_argument("runs", nargs="+", metavar="TRAIN.json")
    p.add_argument("--profile", required=True, help="a local-host calibration profile (cxlsim calibrate)")
    p.add_argument("--json", default=None, metavar="OUT", help="also write the rows as JSON (atomically)")
    args = p.parse_args(argv)
    try:
        profile = load_profile(args.profile)
        rows = [project(load_run(path), profile) for path in args.runs]
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_projection(rows))
    if args.json:
        atomic_write(args.json, json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
