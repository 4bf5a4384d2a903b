"""The record of one `cxlsim bench train` run: DIR/train.json and DIR/steps.csv.

Units: seconds and bytes. Times are wall-clock seconds on CLOCK_MONOTONIC, which every local
rank shares, counted from the run's common start (every rank past one barrier).

train.json holds one object (`KEYS` lists its keys and their types)::

    {"mode": "sync|async|hybrid|ddp", "np": N, "model": "mlp", "dataset": "synthetic",
     "steps": S, "batch_size": B, "lr": float, "seed": int, "coherence": "hw|flush",
     "pool": "shm", "param_count": int, "param_bytes": int,
     "overlap": bool|null, "buckets": int|null, "lockstep": bool,
     "factors": [per-rank compute slow-down factor, 1.0 = none],
     "gpus": [per-rank GPU name or null], "stragglers": {...}|null,
     "placement": "fast|slow|unknown",
     "ranks": [{"rank": r, "steps_done": k, "step_s": [...], "compute_s": [...],
                "comm_s": [...], "loss": [...], "t_end_s": [...]}],
     "eval": [{"t_s": s, "step": global step, "loss": float, "accuracy": float}],
     "throughput_samples_per_s": float, "time_to_accuracy_s": {"<acc>": s or null},
     "final_accuracy": float, "failed_ranks": [...], "versions": {...}}

Per rank and step: step_s is the step's wall time, compute_s the forward and backward pass
(slow-down included), comm_s the rest of the step (the communication the compute did not
hide, plus the update), loss the rank's training loss on its own batch, t_end_s the wall time
at the step's end. `eval` is the test-set loss and accuracy of the parameters as they were
at wall time t_s (snapshots taken during the run, evaluated after it, so evaluation costs the
run nothing). throughput = samples processed by all ranks / the wall time of the last step's
end; step_throughput_samples_per_s gives the same from the ranks' median step times, with
the spread from their 90th and 10th percentile steps. time_to_accuracy_s maps each asked accuracy to the first eval t_s that reached it (null:
never reached); time_to_accuracy_window_s gives the interval it was crossed in (from the
snapshot before that one, or 0.0). steps.csv has one row per rank and step with the per-step lists' values.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os

import numpy as np

from cxlsim.errors import InputError
from cxlsim.results import atomic_write

TRAIN_JSON = "train.json"
STEPS_CSV = "steps.csv"
MODES = ("sync", "async", "hybrid", "ddp")
PLACEMENTS = ("fast", "slow", "unknown")
RANK_SERIES = ("step_s", "compute_s", "comm_s", "loss", "t_end_s")
NUMBER = (int, float)
OPTIONAL_INT = (int, type(None))
OPTIONAL_BOOL = (bool, type(None))
KEYS = {"mode": str, "np": int, "model": str, "dataset": str, "steps": int, "batch_size": int, "lr": NUMBER,
        "seed": int, "coherence": str, "pool": str, "param_count": int, "param_bytes": int,
        "overlap": OPTIONAL_BOOL, "buckets": OPTIONAL_INT, "lockstep": bool, "factors": list, "gpus": list,
        "stragglers": (dict, type(None)), "placement": str, "ranks": list, "eval": list,
        "throughput_samples_per_s": NUMBER, "time_to_accuracy_s": dict, "final_accuracy": NUMBER,
        "failed_ranks": list, "versions": dict}
CSV_FIELDS = ("rank", "step", "step_s", "compute_s", "comm_s", "loss", "t_end_s")


def rank_entry(rank: int, step_s, compute_s, comm_s, loss, t_end_s) -> dict:
    """One rank's entry of `ranks`: its per-step lists (all of one length, the steps it finished)."""
    series = dict(step_s=step_s, compute_s=compute_s, comm_s=comm_s, loss=loss, t_end_s=t_end_s)
    lengths = {len(v) for v in series.values()}
    if len(lengths) != 1:
        raise ValueError(f"rank {rank}: per-step lists of different lengths {sorted(lengths)}")
    return {"rank": rank, "steps_done": lengths.pop(), **{k: [float(x) for x in v] for k, v in series.items()}}


def throughput_samples_per_s(ranks: list[dict], batch_size: int) -> float:
    """Samples processed by every rank over the wall time of the last step's end (0.0 if nothing ran)."""
    samples = batch_size * sum(r["steps_done"] for r in ranks)
    end_s = max((r["t_end_s"][-1] for r in ranks if r["t_end_s"]), default=0.0)
    return samples / end_s if end_s > 0 else 0.0


def step_throughput(ranks: list[dict], batch_size: int) -> dict:
    """The throughput from the ranks' step times, as a spread: the sum over ranks of batch / their median
    step ("median"), and the same from each rank's 90th and 10th percentile step ("p10_p90": the slow
    and the fast end). Samples/s; 0.0 if no rank finished a step."""
    done = [np.asarray(r["step_s"]) for r in ranks if r["steps_done"]]
    if not done:
        return {"median": 0.0, "p10_p90": [0.0, 0.0]}

    def rate(q):
        return float(sum(batch_size / max(np.percentile(steps, q), 1e-12) for steps in done))

    return {"median": rate(50), "p10_p90": [rate(90), rate(10)]}


def time_to_accuracy(evals: list[dict], targets) -> dict:
    """{"<acc>": first eval t_s with accuracy >= acc, or None}; keys are formatted with repr-free `g`."""
    out = {}
    for target in targets:
        hit = next((e["t_s"] for e in sorted(evals, key=lambda e: e["t_s"]) if e["accuracy"] >= target), None)
        out[f"{target:g}"] = hit
    return out


def time_to_accuracy_window(evals: list[dict], targets) -> dict:
    """{"<acc>": [t_s of the snapshot before the first that reached acc (0.0 if none), that one's t_s], or None}:
    the accuracy was crossed between the two (snapshots are every eval_every steps)."""
    ordered = sorted(evals, key=lambda e: e["t_s"])
    out = {}
    for target in targets:
        index = next((i for i, e in enumerate(ordered) if e["accuracy"] >= target), None)
        out[f"{target:g}"] = None if index is None else [ordered[index - 1]["t_s"] if index else 0.0,
                                                          ordered[index]["t_s"]]
    return out


def validate(record: dict, where: str = TRAIN_JSON) -> dict:
    """`record` if it has every key of the schema with its type and consistent per-rank lists; else InputError
    naming the first offending key."""
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected one JSON object, got {type(record).__name__}")
    for key, kind in KEYS.items():
        if key not in record:
            raise InputError(f"{where}: missing key {key!r}")
        value = record[key]
        if isinstance(value, bool) and kind in (int, NUMBER, OPTIONAL_INT):
            raise InputError(f"{where}: {key}: expected a number, got {value!r}")
        if not isinstance(value, kind):
            raise InputError(f"{where}: {key}: expected {_kind_name(kind)}, got {value!r}")
    if record["mode"] not in MODES:
        raise InputError(f"{where}: mode: expected one of {', '.join(MODES)}, got {record['mode']!r}")
    if record["placement"] not in PLACEMENTS:
        raise InputError(f"{where}: placement: expected one of {', '.join(PLACEMENTS)}, got {record['placement']!r}")
    nranks = record["np"]
    for key in ("factors", "gpus", "ranks"):
        if len(record[key]) != nranks:
            raise InputError(f"{where}: {key}: expected {nranks} entries (np), got {len(record[key])}")
    for f in record["factors"]:
        if isinstance(f, bool) or not isinstance(f, NUMBER) or not 1.0 <= f < math.inf:
            raise InputError(f"{where}: factors: expected numbers >= 1, got {f!r}")
    for i, entry in enumerate(record["ranks"]):
        if not isinstance(entry, dict) or entry.get("rank") != i:
            raise InputError(f"{where}: ranks[{i}]: expected an object with rank {i}")
        for key in RANK_SERIES:
            if len(entry.get(key, ())) != entry.get("steps_done"):
                raise InputError(f"{where}: ranks[{i}].{key}: expected steps_done = {entry.get('steps_done')} values")
    for i, e in enumerate(record["eval"]):
        if not isinstance(e, dict) or any(k not in e for k in ("t_s", "step", "loss", "accuracy")):
            raise InputError(f"{where}: eval[{i}]: expected t_s, step, loss and accuracy")
    return record


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def steps_csv(record: dict) -> str:
    """steps.csv's text: one row per rank and finished step."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for entry in record["ranks"]:
        for step in range(entry["steps_done"]):
            writer.writerow([entry["rank"], step] + [repr(entry[k][step]) for k in RANK_SERIES])
    return buffer.getvalue()


def write(directory: str, record: dict) -> tuple[str, str]:
    """Validate `record` and write DIR/train.json and DIR/steps.csv atomically; return their paths."""
    validate(record)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out: cannot create directory {directory!r} ({exc.strerror})") from None
    json_path, csv_path = os.path.join(directory, TRAIN_JSON), os.path.join(directory, STEPS_CSV)
    atomic_write(csv_path, steps_csv(record))
    atomic_write(json_path, json.dumps(record, indent=1, allow_nan=False) + "\n")
    return json_path, csv_path


def read(path: str) -> dict:
    """The validated record of train.json at `path` (or of DIR/train.json if `path` is a directory)."""
    if os.path.isdir(path):
        path = os.path.join(path, TRAIN_JSON)
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a JSON train record ({exc})") from None
    return validate(record, path)
