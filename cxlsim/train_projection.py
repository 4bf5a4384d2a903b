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
- the step's vector work that the record counts in `comm_s` but that is no pool call
  (the SGD update, async's elastic update, the merge's copy and base), as passes over
  the parameter vector (`VECTOR_PASSES`, counted from the emulator's loops) times the
  time of one pass on this machine (`train_costs.vector_pass_ns`, timed when projecting: a profile,
  not the run); and each hand-off of work to the rank's communication thread
  (sync hands it the gradient, ddp each bucket, hybrid each exchange): for sync and ddp
  the run's own, the median over its steps and ranks that the communication thread recorded
  (`recorded_handoff_ns`: a slice's wait for the thread to start it and the wake-up of the
  main thread after the last call), else a hand-off timed the same way as the vector pass
  (`train_costs.handoff_ns`); hybrid, its executor's hand-off and back timed right after a step's
  compute on one CPU (`train_costs`);
- a rank the run lists in `failed_ranks` (async, hybrid) stops in the DES after the
  steps it did;
- hybrid's exchange overlaps the next step's compute, unless the run pinned every rank to
  one CPU (`pinned_cores`): then its thread shares that CPU and the exchange, CPU work
  throughout, runs after the step; so does an exchange the run did without a thread
  (`--overlap off`, `--lockstep`; no hand-off then) (ddp's buckets overlap as the run says:
  their thread mostly waits for the partner, which costs no CPU);
- the pool: the profile's local-host CXL pool (`cxlsim.calibrate.local_preset`) at the
  gradient's (ddp: the largest bucket's) size, in the run's coherence mode, with the
  emulator's allreduce rule (cxl_pool_large from `allreduce_large_bytes` on) and its
  slot chunking (the launcher's slot: the vector rounded up to a page, at most 1 MiB);
- async and hybrid in hw coherence: the region's copies (push, merge) at the host bandwidth
  they took measured right after a step's compute (`train_costs.measure_exchange`, timed when
  projecting with the run's model and batch), and each ticket's call at its measured software
  cost (`ticket_ns`);
- the fold at the profile's host reduction bandwidth.

Which DES mode projects which emulated mode (`DES_MODES`): sync by the pool all-reduce
sync (models/training/pool_sync.py), ddp by the DES's ddp on the pool with the run's
bucket count (equal buckets) and overlap, async and hybrid by the pool shared-region
models of models/training/pool_shared.py.

Outputs per run (`project`), each a measured and a projected figure and their relative
error (projected / measured - 1), the run's clock from cxlsim/train_clock.py:

- throughput over the whole run (every rank's samples over the last step end, the
  record's definition);
- throughput in steady state: after the first `warmup_fraction` of the global steps
  (the usual benchmark convention; the whole-run figure is beside it);
- throughput over the undisturbed steps: those after the warm-up in which no rank's pool
  calls took more than `train_clock.DISTURBED_S` (1 ms) beyond waiting for a slower rank's
  local work, measured and projected over the same steps, with their share: a diagnostic
  of the model apart from the scheduler, which on a loaded machine deschedules a rank for
  a time slice of ~4 ms inside a pool call, which the DES cannot know of;
- the time to each accuracy of the record: the DES does not train, so the global step at
  which the run's evaluation first reached the accuracy is taken from the run, and the
  projection is the measured warm-up plus the DES's time from the warm-up's end to that
  step (async and hybrid count a global step as W tickets; an accuracy reached within the
  warm-up is not projected).

Target of issue 19: |throughput error| <= 15% at np 2 in every mode
(`TARGET_THROUGHPUT_ERROR`).

Units: seconds in the record and in the output, ns inside the DES, bytes.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

from cxlsim import train_clock, train_costs, train_phases
from cxlsim.calibrate.local_model import LocalModel, local_preset
from cxlsim.calibrate.profile import load_profile
from cxlsim.coherence import Coherence
from cxlsim.emulator.training import run_record
from cxlsim.emulator.training.launcher import MAX_SLOT_BYTES, PAGE
from cxlsim.errors import InputError
from cxlsim.models.training import cluster
from cxlsim.models.collectives.base import vector_of
from cxlsim.models.training.core import GpuEndpoint, Job
from cxlsim.models.training.ddp import run_ddp
from cxlsim.models.training.pool_allreduce import PoolAllreduce
from cxlsim.models.training.pool_shared import run_async_on_pool, run_hybrid_on_pool
from cxlsim.models.training.pool_sync import run_sync_allreduce
from cxlsim.models.training.stragglers import measured_multipliers
from cxlsim.results import atomic_write

__all__ = ["RUN_KEYS", "RANK_KEYS", "DES_MODES", "VECTOR_PASSES", "TARGET_THROUGHPUT_ERROR", "DEFAULT_LARGE_BYTES",
           "DEFAULT_WARMUP_FRACTION", "HANDED_OFF", "load_run", "check_run", "pool_preset",
           "recorded_handoff_ns", "threaded_exchange", "exchange_host_bw", "one_rank_allreduce_ns",
           "pinned_one_cpu", "slot_bytes_of", "project", "format_projection", "main"]

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
VECTOR_PASSES = {"sync": (2, 0), "ddp": (2, 0), "async": (9, 0), "hybrid": (3, 3)}
"""Per mode, passes over the parameter vector per step outside the pool calls (on the step's thread, on
hybrid's communication thread), as cxlsim/emulator/training/ does them: sync and ddp `apply_update`
(multiply, subtract); async grad *= lr, x -= grad, the merge's copy and + theta0, the elastic
difference, its scaling, x -= d, acc += d, centre += d; hybrid the scaled gradient, params[:] = theta,
params += update, and on the thread acc += update, the merge's copy and + theta0."""
HANDED_OFF = ("sync", "ddp", "hybrid")
"""Modes that hand work to the rank's communication thread, one hand-off there and back each: sync's
gradient and ddp's buckets (cxlsim/emulator/training/comm_thread.py), hybrid's exchange (elastic.py)."""
DEFAULT_WARMUP_FRACTION = 0.1
"""Steady-state throughput leaves out the first tenth of the global steps (at least one)."""
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


def pool_preset(profile: dict, coherence: Coherence, size_bytes: int, nranks: int, host_bw_bytes_per_ns: float = 0.0):
    """The profile's local-host CXL pool for calls of `size_bytes` at `nranks` ranks (calibrate.local_preset;
    host_bw_bytes_per_ns > 0: that host bandwidth instead of the profile's copy curve)."""
    if profile.get("kind") != "local-host":
        raise InputError(f"profile: the projection needs a local-host profile (cxlsim calibrate), got kind "
                         f"{profile.get('kind')!r}")
    model = LocalModel.from_dict({**profile["model"], "np": nranks})
    return local_preset(model, size_bytes, model.path_ns[coherence.value], coherence,
                        host_bw_bytes_per_ns=host_bw_bytes_per_ns)


def recorded_handoff_ns(run: dict) -> float | None:
    """The hand-off per all-reduce call the run's communication threads recorded (sync, ddp: each rank's
    `mode_stats` handoff_s_median over its calls_per_step), the median over the ranks, ns; None if a rank
    did not record it. hybrid's recorded "handoff" phase (`exchange_phases_s`, beside the DES's in the
    `phases` rows) is not one: its main thread goes on working after it submits an exchange, so the wait
    until the thread starts holds that work, which the DES charges itself."""
    per_call = []
    for stats in run.get("mode_stats") or [None]:
        if not isinstance(stats, dict) or stats.get("handoff_s_median") is None or not stats.get("calls_per_step"):
            return None
        per_call.append(stats["handoff_s_median"] / stats["calls_per_step"] * 1e9)
    return float(np.median(per_call))


def threaded_exchange(run: dict) -> bool:
    """hybrid: whether the run's exchanges ran on a communication thread (every rank's mode_stats says overlap;
    a record without mode_stats: yes, the default)."""
    stats = [s for s in run.get("mode_stats") or [] if isinstance(s, dict)]
    return all(s.get("overlap", True) for s in stats) and not run.get("lockstep")


def pinned_one_cpu(run: dict) -> bool:
    """Whether the run pinned every rank to one CPU (`pinned_cores`), so a rank's communication thread
    shares that CPU with its compute."""
    cores = run.get("pinned_cores")
    return bool(cores) and all(isinstance(c, int) and not isinstance(c, bool) for c in cores)


def slot_bytes_of(run: dict) -> int:
    """The pool slot `cxlsim bench train` ran with (the launcher's rule for the record's vector)."""
    return min(MAX_SLOT_BYTES, -(-run["param_bytes"] // PAGE) * PAGE)


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
    """ddp's bucket sizes in bytes, as the emulator cuts the vector (ddp.bucket_spans: near-equal pieces)."""
    n, count = run.get("buckets") or 1, run.get("param_count") or run["param_bytes"] // 8
    item = run["param_bytes"] // count
    edges = [round(i * count / n) for i in range(n + 1)]
    return [(edges[i + 1] - edges[i]) * item for i in range(n - 1, -1, -1)]


def exchange_host_bw(exchange, coherence: Coherence) -> float:
    """The host bandwidth of an async or hybrid run's region copies: hw, the one its push and merge took after a
    step's compute (`train_costs.exchange_bandwidth`); flush, 0 (the profile's: every read there follows an
    invalidation, so it comes from memory as in the calibration's flush primitives)."""
    return train_costs.exchange_bandwidth(exchange) if coherence is Coherence.HW else 0.0


def _run_des(run: dict, profile: dict, large_bytes: int, slot_bytes: int, pass_ns: float, bucket_ns: float = 0.0,
             exchange=None):
    mode, W = run["mode"], run["np"]
    coherence = Coherence.parse(run["coherence"])
    local = [train_clock.local_work_ns(r) for r in run["ranks"]]
    if mode in ("async", "hybrid"):  # a rank that finished no step computed through the whole run, at least
        run_end_ns = 1e9 * max((r["t_end_s"][-1] for r in run["ranks"] if r["t_end_s"]), default=0.0)
        local = [x if len(x) else np.array([max(run_end_ns, 1.0)]) for x in local]
    size = max(_buckets(run)) if mode == "ddp" else run["param_bytes"]
    preset = pool_preset(profile, coherence, size, W)
    spec, job = _spec(W), _job(run, preset, local)  # the fold works on rows just copied: the profile's rate
    measured = mode in ("async", "hybrid") and exchange is not None  # else the profile's bandwidth and pass_ns
    if measured:
        preset = pool_preset(profile, coherence, size, W, exchange_host_bw(exchange, coherence))
    ticket_ns = exchange.ticket_ns if measured else 0.0
    on_thread, off_thread = (n * pass_ns for n in VECTOR_PASSES[mode])
    noise = {"cv": 0.0, "slowdown": None, "failure": None, "compute": "measured (train.json)"}
    if mode in ("sync", "ddp"):
        steps = min(r["steps_done"] for r in run["ranks"])
        if steps < 1:
            raise InputError("train.json: a rank did no step; nothing to project")
        compute = np.stack([x[:steps] for x in local], axis=1) + on_thread
        if mode == "sync" and W == 1:  # the DES's sync makes no pool call for one worker; the emulator's does
            noise.update(one_rank_handoff_ns=bucket_ns,
                         one_rank_allreduce_ns=one_rank_allreduce_ns(preset, coherence, run["param_bytes"], slot_bytes))
            compute = compute + noise["one_rank_handoff_ns"] + noise["one_rank_allreduce_ns"]
        if mode == "sync":
            J = measured_multipliers(job.iteration_ns, compute)
            return run_sync_allreduce(spec, job, steps, run.get("seed"), J, None, noise, pool=preset,
                                      coherence=coherence, large_bytes=large_bytes, slot_bytes=slot_bytes,
                                      call_overhead_ns=bucket_ns), preset
        buckets = _buckets(run)
        on_pool = PoolAllreduce(spec, preset, coherence=coherence, large_bytes=large_bytes, slot_bytes=slot_bytes,
                                call_overhead_ns=bucket_ns)
        return run_ddp(spec, job, steps=steps, seed=run.get("seed"), bucket_cap_bytes=max(buckets),
                       first_bucket_bytes=max(buckets), overlap=bool(run.get("overlap", True)),
                       backward_fraction=BACKWARD_FRACTION, pool=on_pool, compute_ns=compute), preset
    failed = set(run.get("failed_ranks") or ())
    stops = [r["steps_done"] if r["rank"] in failed else None for r in run["ranks"]]
    if mode == "async":
        return run_async_on_pool(spec, job, steps=run["steps"], local_ns=local, pool=preset, coherence=coherence,
                                 vector_ns=on_thread, stop_after=stops, ticket_ns=ticket_ns,
                                 seed=run.get("seed")), preset
    inline = not threaded_exchange(run)  # --overlap off or --lockstep: no thread, the exchange runs after the step
    return run_hybrid_on_pool(spec, job, steps=run["steps"], local_ns=local, pool=preset, coherence=coherence,
                              vector_ns=on_thread, exchange_vector_ns=off_thread, stop_after=stops,
                              handoff_ns=0.0 if inline else bucket_ns,
                              thread_shares_cpu=inline or pinned_one_cpu(run),
                              ticket_ns=ticket_ns, seed=run.get("seed")), preset


def one_rank_allreduce_ns(preset, coherence: Coherence, size_bytes: int, slot_bytes: int) -> float:
    """The pool all-reduce of `size_bytes` at one rank on `preset`, ns, by the DES's own algorithm: the copy into
    the slot, the flag, the fold of the one block, in slot-sized calls.

    An np 1 sync run hands its gradient to the communication thread and calls the pool's all-reduce at every
    step, as at np 2, while the DES's sync makes no all-reduce for one worker (pool_sync.py); the projection
    adds this call and the run's hand-off to each step's work. The kernel runs a one-rank call with the small
    algorithm whatever its size (cxl_coll_reduce.h: P == 1), hence a threshold above any call."""
    on_pool = PoolAllreduce(_spec(1), preset, coherence=coherence, large_bytes=slot_bytes + 1, slot_bytes=slot_bytes)
    env = on_pool.transport.env
    endpoint = GpuEndpoint(on_pool.transport, 0, preset.host.reduce_bw_bytes_per_ns)
    env.process(on_pool.allreduce(endpoint, size_bytes, vector_of(0, 1)))
    env.run()
    return float(env.now)


def _error(projected, measured):
    if projected is None or measured is None or not measured or math.isnan(measured) or math.isnan(projected):
        return None
    return projected / measured - 1.0


def project(run: dict, profile: dict, *, large_bytes: int | None = None, slot_bytes: int | None = None,
            warmup_fraction: float = DEFAULT_WARMUP_FRACTION, pass_ns: float | None = None,
            bucket_ns: float | None = None, exchange: train_costs.ExchangeCosts | None = None) -> dict:
    """Project `run` (a train.json record) with the DES on the local-host pool of `profile`.

    large_bytes, slot_bytes: the emulator's allreduce threshold and pool slot (default: the record's
    `allreduce_large_bytes` and `slot_bytes`, else the emulator's default threshold and the launcher's
    slot rule).
    warmup_fraction: the part of the global steps steady state leaves out. pass_ns: one pass over the
    parameter vector, ns (default: timed now, `train_costs.vector_pass_ns`). bucket_ns: the hand-off of an all-reduce
    (sync's gradient, ddp's bucket) or of hybrid's exchange to the communication thread, ns (default: the
    run's recorded one, `recorded_handoff_ns`; hybrid: the exchange's, `exchange.handoff_ns`; else timed
    now, `train_costs.handoff_ns`). exchange (async, hybrid): the
    region's operations right after a step's compute (default: measured now with the run's model, batch and
    ranks, `train_costs.measure_exchange`). Returns {mode, des_mode, np, coherence,
    measured_/projected_ throughput and steady_throughput, their errors, elapsed, time_to_accuracy:
    [{accuracy, step, measured_s, projected_s, error}], des: the DES's parameters}.
    """
    check_run(run)
    W, mode = run["np"], run["mode"]
    large = large_bytes if large_bytes is not None else run.get("allreduce_large_bytes", DEFAULT_LARGE_BYTES)
    slot = slot_bytes if slot_bytes is not None else run.get("slot_bytes") or slot_bytes_of(run)
    if pass_ns is None:
        pass_ns = train_costs.vector_pass_ns(run.get("param_count") or run["param_bytes"] // 8)
    if mode in ("async", "hybrid") and exchange is None:
        exchange = train_costs.measure_exchange(run.get("model", "mlp"), run["batch_size"], W)
    source = "given"
    if bucket_ns is None:
        bucket_ns, source = recorded_handoff_ns(run), "run"
        if bucket_ns is None and mode == "hybrid":
            bucket_ns, source = exchange.handoff_ns, "exchange"
        if bucket_ns is None:
            bucket_ns, source = (train_costs.handoff_ns(), "timed") if mode in HANDED_OFF else (0.0, "none")
    result, preset = _run_des(run, profile, large, slot, pass_ns, bucket_ns, exchange)
    synchronous = mode in ("sync", "ddp")
    m_ticks, per_tick = train_clock.clock([r["t_end_s"] for r in run["ranks"]], synchronous, W)
    p_ends = [[end / 1e9 for (_, _, end) in per] for per in result.intervals]
    p_ticks, _ = train_clock.clock(p_ends, synchronous, W)
    global_steps = len(m_ticks) * per_tick // W
    skip_steps = max(1, math.ceil(warmup_fraction * global_steps))
    skip = skip_steps if synchronous else skip_steps * W
    m_whole, m_steady = train_clock.throughputs(m_ticks, per_tick, run["batch_size"], skip)
    p_whole, p_steady = train_clock.throughputs(p_ticks, per_tick, run["batch_size"], skip)
    calm = train_clock.undisturbed(run, p_ends, synchronous, skip_steps)
    notes = [f"rank {r['rank']} finished no local step (the others used the shared step budget): the DES gives it "
             f"one step as long as the whole run, a lower bound" for r in run["ranks"] if r["steps_done"] == 0]
    tta = []
    for acc in sorted(float(a) for a in (run.get("time_to_accuracy_s") or {})):
        row = {"accuracy": acc, "step": None, "measured_s": None, "projected_s": None, "error": None}
        hit = next((e for e in sorted(run["eval"], key=lambda e: e["t_s"]) if e["accuracy"] >= acc), None)
        if hit is not None:
            k = min(max(train_clock.tick_of_global_step(int(hit["step"]), per_tick, W), 0), len(p_ticks) - 1)
            row.update(step=int(hit["step"]), measured_s=hit["t_s"])
            if k >= skip:  # the measured warm-up, then the DES's steps after it
                row["projected_s"] = float(m_ticks[skip - 1] + p_ticks[k] - p_ticks[skip - 1])
                row["error"] = _error(row["projected_s"], hit["t_s"])
            else:
                row["in_warmup"] = True
        tta.append(row)
    return {"mode": mode, "des_mode": DES_MODES[mode], "np": W,
            "coherence": Coherence.parse(run["coherence"]).value, "factors": run["factors"],
            "placement": run.get("placement"), "steps": run["steps"], "warmup_steps": skip_steps,
            "measured_throughput": m_whole, "projected_throughput": p_whole,
            "throughput_error": _error(p_whole, m_whole),
            "measured_steady_throughput": m_steady, "projected_steady_throughput": p_steady,
            "steady_throughput_error": _error(p_steady, m_steady),
            "measured_undisturbed_throughput": calm["measured"], "projected_undisturbed_throughput":
                calm["projected"], "undisturbed_throughput_error": _error(calm["projected"], calm["measured"]),
            "undisturbed_share": calm["kept_share"],
            "measured_elapsed_s": float(m_ticks[-1]), "projected_elapsed_s": result.elapsed_ns / 1e9,
            "measured_comm_share": train_clock.comm_share(run), "time_to_accuracy": tta, "notes": notes,
            "phases": train_phases.phase_rows(run, result.extra.get("phases_ns", {}), pass_ns, bucket_ns,
                                              pinned_one_cpu(run) or not threaded_exchange(run)),
            "des": {**result.params, "events": result.events, "vector_pass_ns": pass_ns, "bucket_handoff_ns": bucket_ns,
                    "bucket_handoff_source": source,
                    "exchange": exchange.to_dict() if exchange is not None else None,
                    "pool_bw_bytes_per_ns": preset.host.memcpy_bw_bytes_per_ns,
                    "pool_path_ns": preset.host_path.port_latency_ns, **result.extra}}


def _pct(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}%"


def format_projection(rows: list[dict]) -> str:
    """A text table of projections: throughput (whole run and steady state) and time to accuracy, measured vs
    projected, one line per run."""
    out = [f"{'mode':7} {'np':>3} {'coh':5} {'factors':>9} {'measured/s':>10} {'DES/s':>9} {'error':>7} "
           f"{'steady/s':>9} {'DES/s':>9} {'error':>7} {'calm/s':>9} {'DES/s':>9} {'error':>7} {'kept':>5} {'comm':>5}  "
           f"time to accuracy (measured -> DES s, error)"]
    for r in rows:
        tta = "; ".join(f"{t['accuracy']:g}: " + ("not reached" if t["measured_s"] is None else
                        f"{t['measured_s']:.3f} (in the warm-up)" if t["projected_s"] is None else
                        f"{t['measured_s']:.3f} -> {t['projected_s']:.3f} ({_pct(t['error'])})")
                        for t in r["time_to_accuracy"]) or "none asked"
        factors = ",".join(f"{f:g}" for f in r["factors"])
        out.append(f"{r['mode']:7} {r['np']:>3} {r['coherence']:5} {factors:>9} {r['measured_throughput']:>10.0f} "
                   f"{r['projected_throughput']:>9.0f} {_pct(r['throughput_error']):>7} "
                   f"{r['measured_steady_throughput']:>9.0f} {r['projected_steady_throughput']:>9.0f} "
                   f"{_pct(r['steady_throughput_error']):>7} {r['measured_undisturbed_throughput']:>9.0f} "
                   f"{r['projected_undisturbed_throughput']:>9.0f} {_pct(r['undisturbed_throughput_error']):>7} "
                   f"{100 * r['undisturbed_share']:>4.0f}% "
                   f"{100 * r['measured_comm_share']:>4.0f}%  {tta}")
    out.append(f"# throughput in samples/s; steady: without the first {DEFAULT_WARMUP_FRACTION:.0%} of the global "
               f"steps; calm: over the undisturbed steps only (kept: their share; no pool call "
               f"{train_clock.DISTURBED_S * 1e3:g} ms "
               f"beyond waiting for a slower rank), a diagnostic; comm: the record's comm_s share "
               f"of the step time; target (issue 19, np 2): |throughput error| <= {100 * TARGET_THROUGHPUT_ERROR:.0f}%")
    out.append("# the DES is given each rank's measured time outside the pool calls (its factors and stragglers "
               "included) and projects the pool calls, the vector work and the waiting")
    for mode in dict.fromkeys(r["mode"] for r in rows):
        out.append(f"# {mode} -> DES {DES_MODES[mode]}")
    out.extend(f"# {r['mode']} np {r['np']}: {note}" for r in rows for note in r.get("notes", ()))
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
