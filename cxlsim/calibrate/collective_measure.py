"""Measurements for the pool collectives in blocks: two primitives, and the held-out collectives.

Primitives (what `collectives.predict_collective` is built from, beside the allgather's):

- the fold (`measure_fold`): the pool kernels' own reduction (cxl_reduce.h) of two blocks into
  an output, per dtype and op and by size, one process, the blocks in this core's cache
  (`primitives.fold_samples_ns`): ns beyond a one-element fold, the median with its spread
  (10th and 90th percentile of the samples), and the rate in bytes/s of one operand;
- the remote fold (`measure_remote_fold`, float32 sum, the bench's reduction): the same fold on both
  ranks at once (np 2), each one's second block rewritten by the other rank's core just before
  (`primitives.write_block`), so that each fold loads lines the other core holds Modified while the
  other does the same, as the allreduce's folds do in hw mode; ns beyond a one-element call, the
  samples of both ranks, with their spread;
- the per-call software overhead of each collective (`measure_call_overheads`): an np = 1, 0-byte
  call of the bench's own step (`collective_blocks.bench_side`, the code the bench times),
  each call timed in osu's loop, the median (`collective_blocks.timed_calls`).

The held-out collectives (`measure_collectives`): the emulator's allgather (copy and zero-copy)
and its copy-mode allreduce, reduce_scatter, broadcast, alltoall and barrier at np 2, both modes,
through the bench's own steps, in jobs that alternate the modes (A B A B). Each job measures every collective and size
in short blocks, each call beside the flag round trip, the per-call overhead and the copy
pattern of the same block (`collective_blocks`), and keeps the blocks its round trips and CPU
share say were fast: a primitive taken in the same state of the machine as the calls (the ranks
take turns on one CPU for tens of milliseconds on a loaded machine, the host placement flips
within a job, and in flush mode the copy-in at 256 KiB-1 MiB is bimodal from job to job, about
100 or 490 us at 1 MiB, so a primitive from another stretch can be in another state). Units: ns, bytes.
"""
from __future__ import annotations

import math
import statistics

import numpy as np

from cxlsim.calibrate.collective_blocks import (FLOAT_BYTES, PASSES, bench_job, bench_side, block_keys,
                                               PLACEMENTS, block_state, job_figures, join_blocks, timed_calls)
from cxlsim.calibrate.measure import steady
from cxlsim.calibrate.states import FAST_ROUNDTRIP_NS
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError

COLLECTIVES = ("allgather", "allgather_zero_copy", "allreduce", "reduce_scatter", "broadcast", "alltoall", "barrier")
"""What a collectives job measures in blocks: the allgather's copy and zero-copy steps (`collective_blocks.ALLGATHER_SIDES`)
and every other pool collective's copy step."""
FOLD_CLASSES = tuple(f"{d} {o}" for d in ("float32", "float64", "int32", "int64") for o in ("sum", "prod", "min", "max"))
"""The dtype/op classes the fold primitive is measured for (the issue's four dtypes and four ops)."""


def fold_class(dtype, op: str) -> str:
    return f"{np.dtype(dtype).name} {op}"


def fold_sizes(sizes) -> list[int]:
    """The fold primitive's sizes for calls of `sizes`: each rounded up to a whole 8-byte element, and
    the halves a two-rank share or block folds (large allreduce, reduce_scatter), at least 8 B."""
    out = set()
    for n in sizes:
        for m in (n, n // 2):
            out.add(max(8, -(-int(m) // 8) * 8))
    return sorted(out)


def measure_fold(sizes, classes=FOLD_CLASSES, iterations: int = 40, repeats: int = 3) -> dict:
    """The fold primitive: {class: {'ns': {size: median ns}, 'p10_ns', 'p90_ns': {size: ns},
    'bytes_per_s': {size: rate}}}, ns beyond a one-element fold of the same class (the call's own cost),
    `repeats` interleaved passes over the sizes of `iterations` samples each."""
    from cxlsim.emulator import primitives

    sizes = sorted({int(n) for n in sizes})
    out = {}
    for cls in classes:
        dtype, op = cls.split()
        item = np.dtype(dtype).itemsize
        samples = {n: [] for n in [item] + [n for n in sizes if n % item == 0]}
        for _ in range(repeats):
            for n in samples:
                samples[n] += primitives.fold_samples_ns(n, dtype, op, iterations)
        base = statistics.median(samples.pop(item))
        out[cls] = _spread(samples, base)
    return out


def _spread(samples: dict, base: float) -> dict:
    """{'ns', 'p10_ns', 'p90_ns', 'bytes_per_s': {size: ...}, 'base_ns'} of {size: [ns]} beyond `base`
    (bytes_per_s None where the median is not above the base: below the timing's resolution)."""
    got = {"ns": {}, "p10_ns": {}, "p90_ns": {}, "bytes_per_s": {}, "base_ns": base}
    for n, v in samples.items():
        p10, p50, p90 = np.percentile(v, [10, 50, 90])
        got["ns"][str(n)] = max(float(p50) - base, 0.0)
        got["p10_ns"][str(n)] = max(float(p10) - base, 0.0)
        got["p90_ns"][str(n)] = max(float(p90) - base, 0.0)
        got["bytes_per_s"][str(n)] = n / (float(p50) - base) * 1e9 if p50 > base else None
    return got


def _remote_fold_job(comm, sizes, iterations: int, repeats: int):
    """Both ranks at once: each times the fold on its own region of the shared pool's data slots, whose
    second block the other rank rewrote just before (between two barriers, in lock step), so each folds
    a block the other core holds Modified while the other does the same, as the allreduce's folds run;
    returns this rank's {size: [ns]}."""
    from cxlsim.emulator import primitives

    mapping = np.frombuffer(comm.pool.mapping, np.uint8)
    start = min(comm.slot_offset(0, 0), comm.slot_offset(1, 0))
    room = primitives.fold_layout(max(sizes))[2]
    mine, theirs = (mapping[start + k * room:start + (k + 1) * room] for k in (comm.rank, 1 - comm.rank))
    src = np.full(max(sizes), 3, np.uint8)
    out = {}
    for _ in range(repeats):
        for n in sizes:
            def handoff(call, n=n):
                comm.barrier()  # both ranks' inputs are published in their own regions
                at = primitives.fold_other_block(n, call)
                primitives.write_block(theirs[at:at + n], src[:n])
                comm.barrier()
            out.setdefault(n, []).extend(primitives.fold_samples_ns(n, "float32", "sum", iterations, pool=mine,
                                                                    between=handoff))
    return out


def measure_remote_fold(sizes, iterations: int = 40, repeats: int = 3) -> dict:
    """The remote-fold primitive (float32 sum, both ranks at once): `_spread` of both ranks' samples beyond a
    one-element call."""
    from cxlsim.emulator import primitives
    from cxlsim.emulator.launch import run_local

    sizes = sorted({FLOAT_BYTES} | {int(n) for n in sizes if n % FLOAT_BYTES == 0 and n > 0})
    slot = primitives.fold_layout(max(sizes))[2]  # the data slots then hold two regions of that size
    per_rank = run_local(2, _remote_fold_job, (sizes, iterations, repeats), slot_bytes=slot, timeout_s=60.0)
    samples = {n: [v for r in per_rank for v in r[n]] for n in sizes}
    base = statistics.median(samples.pop(FLOAT_BYTES))
    return _spread(samples, base)


def _overhead_job(comm, collectives, batches: int, iterations: int):
    out = {c: [] for c in collectives}
    for _ in range(batches):
        for c in collectives:
            op = bench_side(c, comm, 0).op
            out[c].append(float(np.median(timed_calls(op, comm.barrier, 200, iterations))))
    return out


def measure_call_overheads(collectives=COLLECTIVES, batches: int = 5, iterations: int = 2000) -> dict:
    """{collective: [ns per call, one per batch: the median of its timed calls]} of the np = 1, 0-byte bench
    step (osu's loop, `collective_blocks.timed_calls`)."""
    from cxlsim.emulator.launch import run_local

    return run_local(1, _overhead_job, (tuple(collectives), batches, iterations), slot_bytes=64)[0]


def primitive_sizes(sizes) -> list[int]:
    """The concurrent-copy primitive's sizes for calls of `sizes`: each and its half (a share or block)."""
    return sorted({max(1, int(m)) for n in sizes for m in (n, n // 2)})


def _usable_blocks(jobs: list[dict], mode: Coherence, best: dict) -> dict:
    """{(collective, size): blocks not disturbed (fast or slow placement)} over a mode's jobs (`block_state`
    against `best`)."""
    out = {}
    for j in jobs:
        if j["coherence"] == mode:
            for b in j["blocks"]:
                key = (b["collective"], b["size_bytes"])
                out[key] = out.get(key, 0) + (block_state(b, mode, best) != "disturbed")
    return out


def _job_records(job: dict, mode: Coherence, best: dict) -> list[dict]:
    """A job as the result keeps it (JSON: no raw samples), one record per host placement its blocks were
    in: the blocks' states, the figures of the placement's blocks (`job_figures`) per collective and
    size, and its concurrent-copy primitive. Record ids are 'JOB PLACEMENT' (e.g. '3 fast')."""
    out = []
    for placement, state in PLACEMENTS.items():
        got = job_figures(job["blocks"], mode, best, state)
        if got["roundtrip_ns"] is None:
            continue
        measured, overhead, rank_overhead, exchange, roundtrip, fold = {}, {}, {}, {}, {}, {}
        for (c, n), k in got["keys"].items():
            if k.get("fold_ns"):
                fold.setdefault(c, {})[str(n)] = {str(f): v for f, v in k["fold_ns"].items()}
            roundtrip.setdefault(c, {})[str(n)] = k["roundtrip_ns"]
            measured.setdefault(c, {})[str(n)] = {f: k[f] for f in ("measured_ns", "mean_ns", "calls", "blocks")}
            if k["overhead_ns"] is not None:
                overhead.setdefault(c, {})[str(n)] = k["overhead_ns"]
            if k.get("overhead_rank_ns"):
                rank_overhead.setdefault(c, {})[str(n)] = k["overhead_rank_ns"]
            if k["exchange_ns"] is not None:
                exchange.setdefault(c, {})[str(n)] = k["exchange_ns"]
        out.append(dict(id=f"{job['job']} {placement}", job=job["job"], placement=placement, coherence=mode.value,
                        block_states=got["states"], roundtrip_ns=got["roundtrip_ns"], measured=measured,
                        overhead_ns=overhead, overhead_rank_ns=rank_overhead, exchange_ns=exchange, fold_ns=fold,
                        call_roundtrip_ns=roundtrip,
                        pattern_ns=got["pattern_ns"],
                        concurrent_ns=got["concurrent_ns"]))
    if not out:  # every block disturbed: the job's states alone (no figures: it predicts nothing)
        states = job_figures(job["blocks"], mode, best)["states"]
        out.append(dict(id=f"{job['job']} disturbed", job=job["job"], placement=None, coherence=mode.value,
                        block_states=states, roundtrip_ns=None, measured={}, overhead_ns={}, overhead_rank_ns={},
                        exchange_ns={},
                        fold_ns={}, call_roundtrip_ns={}, pattern_ns={}, concurrent_ns={}))
    return out


def measure_collectives(sizes, collectives=COLLECTIVES, rounds: int = 3, iterations: int = 50,
                        large_bytes: int | None = None, best_roundtrip_ns: dict | None = None,
                        progress=None, max_retries: int | None = None, passes: int = PASSES) -> dict:
    """The emulator's copy-mode pool collectives at np 2 in both modes, held out from the fit.

    Jobs alternate the modes, `rounds` of each; each job measures every (collective, size) in `passes`
    interleaved passes of blocks, each call beside its own primitives (`collective_blocks`). A block is
    kept if its own round trips and CPU share say fast (`block_state`, against the best round trip seen
    in the run) or in the slow placement, and each placement has its own rows (its blocks' calls beside
    its blocks' primitives). When the planned jobs are done, a mode whose sizes have fewer than `rounds`
    blocks not disturbed gets another job of those sizes alone, at most `max_retries` extra jobs in all (default: as many as
    planned).

    Returns {'rows': [{coherence, placement ('fast', 'slow'), collective, size_bytes, measured_ns (median over the jobs of each job's
    median call over its blocks in the placement), mean_ns (the same of the calls' means), spread_ns (the jobs' lowest
    and highest), jobs, blocks (the placement's blocks), calls, job_ids, job_ns, held_out (a fast block at least:
    else measured over every block, shown, left out of the targets), large_bytes}], 'jobs': [`_job_record`],
    'placement': 'fast' | 'slow' (the best hw round trip seen, against FAST_ROUNDTRIP_NS; the slow rows are
    present where slow-placement blocks were measured),
    'best_roundtrip_ns', 'overhead_samples_ns' ({collective: [ns]}: the per-call overhead primitive, one
    batch at np = 1 before every job, for a profile's model and the barrier)}."""
    from cxlsim.emulator.comm import ALLREDUCE_LARGE_BYTES
    from cxlsim.emulator.launch import run_local

    sizes = tuple(sorted(set(int(n) for n in sizes if n % FLOAT_BYTES == 0 and n >= FLOAT_BYTES)))
    if not sizes:
        raise InputError("collectives: expected sizes that are whole multiples of 4 bytes (float32 vectors)")
    unknown = [c for c in collectives if c not in COLLECTIVES]
    if unknown:
        raise InputError(f"collectives: expected some of {COLLECTIVES}, got {unknown}")
    large = ALLREDUCE_LARGE_BYTES if large_bytes is None else large_bytes
    step = progress or (lambda what: None)
    best = dict(best_roundtrip_ns or {})
    every = block_keys(collectives, sizes)
    jobs, queue = [], [(m, every) for m in Coherence] * rounds
    retries = len(queue) if max_retries is None else max_retries
    overheads = {c: [] for c in collectives}
    while True:
        if not queue:  # the planned jobs are done: another job for each mode's sizes with too few fast blocks
            for m in Coherence:
                usable = _usable_blocks(jobs, m, best)
                short = [k for k in every if usable.get(k, 0) < rounds]
                if short and retries > 0:
                    queue.append((m, short))
                    retries -= 1
            if not queue:
                break
        mode, keys = queue.pop(0)
        for c, v in measure_call_overheads(collectives, batches=1).items():  # np = 1, before every job
            overheads[c] += v
        per_rank = run_local(2, bench_job, (keys, iterations, large, passes), slot_bytes=2 * max(sizes),
                             coherence=mode, timeout_s=120.0, allreduce_large_bytes=large)
        blocks = join_blocks(per_rank)
        best[mode] = min([best.get(mode, math.inf)] + [b[k] for b in blocks for k in ("rt_before_ns", "rt_after_ns")])
        jobs.append(dict(job=len(jobs), coherence=mode, blocks=blocks))
        states = {}
        for b in blocks:
            s = block_state(b, mode, best)
            states[s] = states.get(s, 0) + 1
        step(f"collectives {mode.value} job: {len(keys)} (collective, size) x {passes} passes, blocks "
             + ", ".join(f"{n} {s}" for s, n in states.items()))
    records = [r for j in jobs for r in _job_records(j, j["coherence"], best)]
    out = []
    for mode in Coherence:
        for placement in PLACEMENTS:
            mine = [r for r in records if r["coherence"] == mode.value and r["placement"] == placement]
            if not mine and placement != "fast":
                continue  # a placement not observed in this mode has no rows (the fast one shows what was missed)
            for collective, n in every:
                out.append(_row(mode, placement, collective, n, large, mine, jobs))
    hw = best.get(Coherence.HW, math.inf)
    return {"rows": out, "jobs": records, "placement": "fast" if hw < FAST_ROUNDTRIP_NS else "slow",
            "best_roundtrip_ns": {m.value if isinstance(m, Coherence) else m: v for m, v in best.items()},
            "overhead_samples_ns": overheads}


def _row(mode: Coherence, placement: str, collective: str, n: int, large: int, records: list[dict], jobs: list[dict]):
    """One held-out row: the median over the `records` (jobs) that measured it in this placement of their
    median calls; without any, measured over every block of the mode (shown, never a held-out point)."""
    runs = [(r["id"], r["measured"][collective][str(n)]) for r in records if str(n) in r["measured"].get(collective, {})]
    row = dict(coherence=mode.value, placement=placement, collective=collective, size_bytes=n, large_bytes=large,
               held_out=bool(runs))
    if not runs:
        calls = np.concatenate([b["calls_ns"] for j in jobs if j["coherence"] == mode for b in j["blocks"]
                                if (b["collective"], b["size_bytes"]) == (collective, n)] or [[math.nan]])
        row.update(measured_ns=float(np.median(calls)), mean_ns=float(np.mean(calls)),
                   spread_ns=[float(calls.min()), float(calls.max())], jobs=0, blocks=0, calls=0, job_ids=[], job_ns=[])
        return row
    values = [k["measured_ns"] for _, k in runs]
    row.update(measured_ns=statistics.median(values), mean_ns=statistics.median(k["mean_ns"] for _, k in runs),
               spread_ns=[min(values), max(values)], jobs=len(runs), blocks=sum(k["blocks"] for _, k in runs),
               calls=sum(k["calls"] for _, k in runs), job_ids=[i for i, _ in runs], job_ns=values)
    return row


def jobs_line(jobs: list[dict]) -> str:
    """The collectives jobs by mode, and their blocks by state: the fast ones kept, the others left out."""
    parts = []
    for mode in Coherence:
        mine = {j["job"]: j for j in jobs if j["coherence"] == mode}  # a job's records share its block states
        states = {s: sum(j["block_states"][s] for j in mine.values()) for s in ("fast", "slow placement", "disturbed")}
        parts.append(f"{mode.value} {len(mine)} jobs, {sum(states.values())} blocks: {states['fast']} fast, "
                     f"{states['slow placement']} slow placement, {states['disturbed']} disturbed (left out)")
    return "; ".join(parts)


def pattern_curves(jobs: list[dict], part: str = "data") -> dict:
    """{mode: {pattern: {size: ns}}}: per size, the median over a mode's jobs that measured it in a fast
    block of each pattern primitive's data time (part 'maintenance': its cache maintenance; 'loads': its fold's
    in-place loads), for a profile's model."""
    out = {}
    for mode in Coherence:
        got = {}
        for j in jobs:
            if j["coherence"] == mode and j.get("placement", "fast") == "fast":
                for name, parts in j.get("pattern_ns", {}).items():
                    for n, v in parts.get(part, {}).items():
                        got.setdefault(name, {}).setdefault(n, []).append(v)
        if got:
            out[mode.value] = {name: {n: statistics.median(v) for n, v in sorted(by.items(), key=lambda x: int(x[0]))}
                               for name, by in got.items()}
    return out


def exchange_by_mode(jobs: list[dict]) -> dict:
    """{mode: ns}: the median over a mode's fast-placement jobs of the barrier blocks' flag exchange, for a
    profile's model (`LocalModel.exchange_ns`); modes without one are absent."""
    out = {}
    for mode in Coherence:
        got = [v for j in jobs if j["coherence"] == mode and j.get("placement") == "fast"
               for v in j.get("exchange_ns", {}).get("barrier", {}).values()]
        if got:
            out[mode.value] = statistics.median(got)
    return out


def overhead_ns(samples: dict) -> dict:
    """{collective: ns} from {collective: [ns per batch]} (`measure.steady`: disturbed batches left out)."""
    return {c: steady(v) for c, v in samples.items()}
