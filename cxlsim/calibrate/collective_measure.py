"""Measurements for the pool collectives beyond allgather: two primitives, and the held-out collectives.

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
  call of the bench's own step (`bench_collectives.CollectiveSide`, the code the bench times),
  through `bench.time_loop`, as the allgather's is (`measure._overhead_rank`).

The held-out collectives (`measure_collectives`): the emulator's copy-mode allreduce,
reduce_scatter, broadcast, alltoall and barrier at np 2, both modes, through the bench
(`bench.run_plan`), in jobs that alternate the modes (A B A B). Every job probes the flag
round trip before and after (a job above `measure.STABLE` x the best seen in its mode ran in
the slow host placement or was disturbed, and is left out when others are not) and the
concurrent-copy primitive before and after (`measure.concurrent_rank`, the ranks joined by
`measure.join_ranks`) and each collective's copy pattern before and after (`patterns.pattern_rank`,
joined by `patterns.join_pattern_ranks`, the lower of before and after), as the allgather's jobs
do: a primitive taken in the same state of the
machine as the job's calls (in flush mode its copy-in at 256 KiB-1 MiB is bimodal from job to
job, about 100 or 490 us at 1 MiB, so a primitive from another job can be in the other state),
and records each rank's share of its CPU per size (below `measure.BUSY`: another job ran
there; left out when undisturbed runs exist). Units: ns, bytes.
"""
from __future__ import annotations

import math
import statistics
import time

import numpy as np

from cxlsim.calibrate.measure import BUSY, STABLE, concurrent_rank, join_ranks, steady
from cxlsim.calibrate.patterns import join_pattern_ranks, pattern_name, pattern_rank
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError

COLLECTIVES = ("allreduce", "reduce_scatter", "broadcast", "alltoall", "barrier")
FLOAT_BYTES = 4  # the bench's reductions are float32 sums
FOLD_CLASSES = tuple(f"{d} {o}" for d in ("float32", "float64", "int32", "int64") for o in ("sum", "prod", "min", "max"))
"""The dtype/op classes the fold primitive is measured for (the issue's four dtypes and four ops)."""
FAST_ROUNDTRIP_NS = 200.0  # hw flag round trip below this: this machine's fast host placement
OVERHEAD_SIZE = {"allreduce": 0, "reduce_scatter": 0, "broadcast": 0, "alltoall": 0, "barrier": 0}
"""Bytes of the np = 1 call whose time is a collective's per-call overhead: 0, the bench step's software
path without a data step (which the DES charges itself), as the allgather's overhead is measured."""


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
    from cxlsim.emulator.bench import time_loop
    from cxlsim.emulator.bench_collectives import CollectiveSide

    out = {c: [] for c in collectives}
    for _ in range(batches):
        for c in collectives:
            op = CollectiveSide(c, "copy", comm, None, OVERHEAD_SIZE[c], False).op
            out[c].append(time_loop(op, comm.barrier, 200, iterations) * 1e9)
    return out


def measure_call_overheads(collectives=COLLECTIVES, batches: int = 5, iterations: int = 2000) -> dict:
    """{collective: [ns per call, one per batch]} of the np = 1, 0-byte bench step."""
    from cxlsim.emulator.launch import run_local

    return run_local(1, _overhead_job, (tuple(collectives), batches, iterations), slot_bytes=64)[0]


def primitive_sizes(sizes) -> list[int]:
    """The concurrent-copy primitive's sizes for calls of `sizes`: each and its half (a share or block)."""
    return sorted({max(1, int(m)) for n in sizes for m in (n, n // 2)})


IN_JOB_OVERHEAD = ("allreduce", "reduce_scatter", "broadcast", "alltoall")
"""Collectives whose 0-byte call is no step at all (no flag, no wait), so its time at np 2 is the per-call
overhead primitive, measured inside each job (the barrier always synchronises: np = 1 only)."""


def _call_overheads(comm, collectives, iterations: int = 1000) -> dict:
    """{collective: ns}: the mean over the ranks of this job's 0-byte bench step of each `IN_JOB_OVERHEAD`."""
    from cxlsim.emulator.bench import time_loop
    from cxlsim.emulator.bench_collectives import CollectiveSide

    out = {}
    for c in collectives:
        if c in IN_JOB_OVERHEAD:
            mine = np.array([time_loop(CollectiveSide(c, "copy", comm, None, 0, False).op, comm.barrier, 200,
                                       iterations) * 1e9])
            everyone = np.zeros(comm.size)
            comm.allgather(mine, everyone)
            out[c] = float(everyone.mean())
    return out


def _job_patterns(collectives, large: int) -> tuple:
    """The copy patterns the job's collectives run at some size (allreduce: both algorithms, so that
    a profile predicts either at every size)."""
    names = {pattern_name(c, n, large) for c in collectives for n in (0, 1 << 62)}
    return tuple(sorted(n for n in names if n))


def _bench_job(comm, collectives, sizes, iterations, large):
    """One job: the flag round trip, the concurrent-copy, pattern and per-call primitives, then per
    collective and size a bench run with every rank's least share of its CPU, then the primitives and
    the round trip again. Returns (rows, round trip before, after, [this rank's concurrent rounds
    before, after], per-call overheads {collective: [before, after]}, [this rank's pattern rounds
    before, after])."""
    from cxlsim.emulator.bench import BenchPlan, run_plan

    comm.flag_pingpong(100)
    before = comm.flag_pingpong(300)
    concurrent = [concurrent_rank(comm, primitive_sizes(sizes))]
    patterns = [pattern_rank(comm, sizes, _job_patterns(collectives, large))]
    overheads = [_call_overheads(comm, collectives)]
    rows = []
    for collective in collectives:
        for n in ((0,) if collective == "barrier" else sizes):
            if collective == "reduce_scatter" and n < FLOAT_BYTES * comm.size:
                continue
            plan = BenchPlan(sizes=(n,), iterations=iterations, warmup=max(1, iterations // 10),
                             collective=collective)
            c0, w0 = time.process_time_ns(), time.perf_counter_ns()
            got = run_plan(comm, plan)
            busy = np.array([(time.process_time_ns() - c0) / max(time.perf_counter_ns() - w0, 1)])
            everyone = np.zeros(comm.size)
            comm.allgather(busy, everyone)
            rows += [dict(collective=collective, size_bytes=n, ns=r["avg_us"] * 1e3, busy=float(everyone.min()))
                     for r in got]
    concurrent.append(concurrent_rank(comm, primitive_sizes(sizes)))
    patterns.append(pattern_rank(comm, sizes, _job_patterns(collectives, large)))
    overheads.append(_call_overheads(comm, collectives))
    return (rows, before, comm.flag_pingpong(300), concurrent, {c: [o[c] for o in overheads] for c in overheads[0]},
            patterns)


def measure_collectives(sizes, collectives=COLLECTIVES, rounds: int = 3, iterations: int = 50,
                        large_bytes: int | None = None, best_roundtrip_ns: dict | None = None,
                        progress=None, max_retries: int | None = None) -> dict:
    """The emulator's copy-mode pool collectives at np 2 in both modes, held out from the fit.

    Jobs alternate the modes, `rounds` of each. Each job is classed by the flag round trip measured
    before and after it (`job_state`): 'fast', 'slow placement' or 'disturbed'. A job that is not fast
    is repeated, and when the planned jobs are done a mode with fewer than `rounds` fast jobs gets more,
    at most `max_retries` extra jobs in all (default: as many as planned), so that a run keeps `rounds`
    fast jobs per mode whenever the machine lets it. Rows are the medians over a mode's fast jobs; if a
    mode has none, over the jobs nearest the best of them (flagged: such rows never meet a target).

    Returns {'rows': [{coherence, collective, size_bytes, measured_ns (median of the kept jobs' means),
    spread_ns (their lowest and highest), jobs, job_ids, job_ns, disturbed_only (every run had a rank off
    its CPU), flagged_all (every job of the mode was flagged: nothing better to keep), large_bytes}], 'jobs':
    [{job, coherence, roundtrip_before_ns, roundtrip_after_ns, state (`job_state`), slow_placement (state is
    not 'fast'), concurrent_ns (the
    primitive, mean of before and after: {kind: {size: ns}}), pattern_ns (each collective's copy pattern,
    the lower of before and after: {pattern: {'data', 'maintenance': {size: ns}}}), overhead_ns (the per-call primitive of the
    `IN_JOB_OVERHEAD` collectives, `measure.steady` of before and after: {collective: ns})}], 'placement': 'fast' | 'slow' (the best
    hw round trip seen, against FAST_ROUNDTRIP_NS), 'best_roundtrip_ns', 'overhead_samples_ns' ({collective:
    [ns]}: the per-call overhead primitive, one batch at np = 1 before every job, as the allgather's jobs
    measure theirs, so a batch taken in a passing slow moment is outvoted)}."""
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
    jobs, queue = [], list(Coherence) * rounds
    retries = len(queue) if max_retries is None else max_retries
    overheads = {c: [] for c in collectives}
    while True:
        if not queue:  # the planned jobs are done: one more job for each mode with fewer than `rounds` fast ones
            queue = [m for m in Coherence
                     if sum(job_state(j, best) == "fast" for j in jobs if j["coherence"] == m) < rounds][:retries]
            retries -= len(queue)
            if not queue:
                break
        mode = queue.pop(0)
        for c, v in measure_call_overheads(collectives, batches=1).items():  # np = 1, before every job
            overheads[c] += v
        per_rank = run_local(2, _bench_job, (tuple(collectives), sizes, iterations, large),
                             slot_bytes=2 * max(sizes), coherence=mode, timeout_s=120.0,
                             allreduce_large_bytes=large)
        rows, rt0, rt1, _, job_overheads, _ = per_rank[0]
        joined = [join_ranks([r[3][k] for r in per_rank]) for k in range(2)]
        concurrent = {kind: {str(n): (joined[0][kind][n] + joined[1][kind][n]) / 2 for n in by}
                      for kind, by in joined[0].items()}
        both = [join_pattern_ranks([r[5][k] for r in per_rank]) for k in range(2)]
        patterns = {name: {part: {n: min(v, both[1][name][part][n]) for n, v in by.items()}
                           for part, by in got.items()} for name, got in both[0].items()}
        job = dict(job=len(jobs), coherence=mode, roundtrip_before_ns=rt0, roundtrip_after_ns=rt1,
                   rows=rows, concurrent_ns=concurrent, pattern_ns=patterns,
                   overhead_ns={c: steady(v) for c, v in job_overheads.items()})
        jobs.append(job)
        best[mode] = min(best.get(mode, math.inf), rt0, rt1)
        step(f"collectives {mode.value} job (flag round trip {rt0:.0f}, {rt1:.0f} ns): {job_state(job, best)}")
    for job in jobs:
        job["state"] = job_state(job, best)
        job["slow_placement"] = job["state"] != "fast"
    out = []
    for mode in Coherence:
        mine = [j for j in jobs if j["coherence"] == mode]
        fast = [j for j in mine if not j["slow_placement"]]
        worst = [max(j["roundtrip_before_ns"], j["roundtrip_after_ns"]) for j in mine]
        # every job flagged: keep those nearest the best of them (each is predicted with its own primitives,
        # so a job whose ranks took turns would carry its millisecond round trip into the prediction)
        kept = fast or [j for j, w in zip(mine, worst) if w <= STABLE * min(worst)]
        keys = sorted({(r["collective"], r["size_bytes"]) for j in kept for r in j["rows"]})
        for collective, n in keys:
            runs = [dict(r, job=j["job"]) for j in kept for r in j["rows"]
                    if (r["collective"], r["size_bytes"]) == (collective, n)]
            calm = [r for r in runs if r["busy"] >= BUSY]
            used = calm or runs
            values = [r["ns"] for r in used]
            out.append(dict(coherence=mode.value, collective=collective, size_bytes=n,
                            measured_ns=statistics.median(values), spread_ns=[min(values), max(values)],
                            jobs=len(values), job_ids=[r["job"] for r in used], job_ns=values,
                            disturbed_only=not calm, flagged_all=not fast, large_bytes=large))
    hw = best.get(Coherence.HW, math.inf)
    return {"rows": out, "jobs": [{k: v for k, v in j.items() if k != "rows"} for j in jobs],
            "placement": "fast" if hw < FAST_ROUNDTRIP_NS else "slow", "best_roundtrip_ns": best,
            "overhead_samples_ns": overheads}


def jobs_line(jobs: list[dict]) -> str:
    """The collectives jobs by mode and state, as text: which were kept (the fast ones) and which left out."""
    parts = []
    for mode in Coherence:
        mine = [j for j in jobs if j["coherence"] == mode]
        states = {s: sum(j["state"] == s for j in mine) for s in ("fast", "slow placement", "disturbed")}
        left = ", ".join(f"{n} {s}" for s, n in states.items() if n and s != "fast")
        parts.append(f"{mode.value} {len(mine)} jobs, {states['fast']} fast kept"
                     + (f", left out {left}" if left and states["fast"] else f", {left}: none fast, the nearest kept"
                        if left else ""))
    return "; ".join(parts)


def pattern_curves(jobs: list[dict], part: str = "data") -> dict:
    """{mode: {pattern: {size: ns}}}: the median over a mode's jobs of each pattern primitive's data time
    (part 'maintenance': its cache maintenance), from the jobs not flagged slow (all of them if every one
    was), for a profile's model."""
    out = {}
    for mode in Coherence:
        mine = [j for j in jobs if j["coherence"] == mode and j.get("pattern_ns")]
        kept = [j for j in mine if not j.get("slow_placement")] or mine
        if kept:
            names = kept[0]["pattern_ns"]
            out[mode.value] = {name: {n: statistics.median(j["pattern_ns"][name][part][n] for j in kept)
                                      for n in names[name][part]} for name in names}
    return out


DISTURBED_HW_NS, DISTURBED = 2000.0, 4.0
"""A job whose hw flag round trip exceeds DISTURBED_HW_NS, or whose flush one exceeds DISTURBED x the best
seen, had a rank off its CPU (the ranks took turns: microseconds to milliseconds), beyond any placement."""


def job_state(job: dict, best: dict) -> str:
    """'fast', 'slow placement' or 'disturbed', by the worse of the job's flag round trips before and
    after. hw: above DISTURBED_HW_NS, disturbed; else above FAST_ROUNDTRIP_NS (the issue's placement
    threshold: fast 55-110 ns, slow 440-500 ns on this machine), the slow placement. flush, whose round
    trip has no such threshold (450-650 ns in the fast placement): above DISTURBED x the best flush round
    trip seen, disturbed; above `measure.STABLE` x it, the slow placement."""
    mode = Coherence.parse(job["coherence"], "coherence")
    worst = max(job["roundtrip_before_ns"], job["roundtrip_after_ns"])
    ref = best.get(mode, worst)
    if not math.isfinite(worst) or worst > (DISTURBED_HW_NS if mode == Coherence.HW else DISTURBED * ref):
        return "disturbed"
    rows = job.get("rows") or []
    if sum(r["busy"] < BUSY for r in rows) > len(rows) / 2:  # between two calm round trips, most calls were not
        return "disturbed"
    if worst > (FAST_ROUNDTRIP_NS if mode == Coherence.HW else STABLE * ref):
        return "slow placement"
    return "fast"


def overhead_ns(samples: dict) -> dict:
    """{collective: ns} from {collective: [ns per batch]} (`measure.steady`: disturbed batches left out)."""
    return {c: steady(v) for c, v in samples.items()}
