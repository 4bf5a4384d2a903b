"""Horovod baseline: tensor fusion every cycle, fused buffers all-reduced by the ring.

Concept. Horovod's background thread wakes up every cycle (HOROVOD_CYCLE_TIME)
and negotiates which gradient tensors are ready on every rank; those are
packed into fusion buffers of at most HOROVOD_FUSION_THRESHOLD bytes and each
buffer is all-reduced (ring; hierarchical all-reduce is off by default). The
defaults changed in v0.21.0 (CHANGELOG #2468; gpus.md):

- `HOROVOD_DEFAULTS["v0.21+"]`: fusion threshold 128 MiB, cycle time 1 ms (the default here);
- `HOROVOD_DEFAULTS["pre-v0.21"]`: 64 MiB (Horovod's "64 MB" is 64 * 1024 * 1024 B), cycle time 5 ms.

Every result records the threshold, the cycle and which defaults they are
(`params["horovod_defaults"]`: the name, or "custom").

Model (assumptions stated):

- Gradients appear at a uniform byte rate over each worker's backward pass
  (the last `backward_fraction` of its iteration), as in the DDP model;
  per-tensor boundaries are not modelled, so a cycle fuses exactly the bytes
  that are ready on every rank (`fusion_plan`).
- Cycles tick on one global grid, t = n * cycle_ns (the negotiation makes the
  ranks act together); the negotiation's own messages are not costed (a small
  all-reduce of about 10 us on IB, far below a 1 ms cycle).
- Fusion buffers are all-reduced one after another in plan order (one NCCL
  stream), each by the ring of models/collectives with reductions on the GPU;
  a rank starts buffer i when the cycle has fused it and it has finished
  buffer i - 1.
- The optimizer step waits for every buffer, so the next step's forward pass
  starts when the rank's last all-reduce is done.

`collective="flow"` (default) costs each ring with the per-rank recurrence of
`flow.ring_allreduce`; `collective="des"` runs every message through the
transport. The tests check the two agree within 2% (they are equal to
rounding on the star fabric used for training). A failed worker stalls the
run (RunError).

>>> plan = fusion_plan([0.0, 0.0], [4.0e6, 8.0e6], 100 * 2**20, cycle_ns=1.0e6, threshold_bytes=128 * 2**20)
>>> len(plan), plan[0], sum(size for _, size in plan) == 100 * 2**20   # the slower rank paces the fusion
(8, (1000000.0, 13107200), True)
>>> [size for _, size in fusion_plan([0.0], [1.0e6], 200 * 2**20, cycle_ns=5.0e6, threshold_bytes=64 * 2**20)]
[67108864, 67108864, 67108864, 8388608]
"""
from __future__ import annotations

import math

from cxlsim.errors import InputError, RunError
from cxlsim.models.collectives.base import Group, reduced_vector, vector_of
from cxlsim.models.collectives.reductions import allreduce_ring
from cxlsim.models.training import convergence
from cxlsim.models.training.core import (CHUNK, DEFAULT_TRAINING_CHUNK_BYTES, MIB, GpuEndpoint, Job, Mode, Option,
                                         StepLog, TrainingResult, check_backward_fraction, check_run, describe,
                                         network_transport, run_to_end, size_text, synchronous_result, time_text)
from cxlsim.models.training.flow import COLLECTIVE, check_collective, cost_model, ring_allreduce, run_steps
from cxlsim.models.training.pool_allreduce import POOL, PoolAllreduce, resolve_collective
from cxlsim.models.training.stragglers import Failure, Slowdown, multipliers
from cxlsim.results import make_rng

__all__ = ["HOROVOD_DEFAULTS", "fusion_plan", "run_horovod", "MODE"]

HOROVOD_DEFAULTS = {
    "v0.21+": {"fusion_threshold_bytes": 128 * MIB, "cycle_time_ns": 1.0e6},
    "pre-v0.21": {"fusion_threshold_bytes": 64 * MIB, "cycle_time_ns": 5.0e6},
}
"""Horovod's fusion threshold and cycle time by version (CHANGELOG #2468, gpus.md)."""


def fusion_plan(bstart_ns, bwd_ns, gradient_bytes: int, *, cycle_ns: float, threshold_bytes: int) -> list:
    """[(cycle tick ns, fused bytes), ...] for one step: at each tick, the bytes ready on every rank
    and not yet fused go into buffers of at most `threshold_bytes`."""
    last_start = max(bstart_ns)
    all_done = max(b + d for b, d in zip(bstart_ns, bwd_ns))
    n = math.floor(last_start / cycle_ns) + 1  # the first tick after every rank has started its backward
    plan, fused = [], 0
    while fused < gradient_bytes:
        t = n * cycle_ns
        if t >= all_done:
            ready = gradient_bytes
        else:
            frac = min(min(max((t - b) / d, 0.0), 1.0) for b, d in zip(bstart_ns, bwd_ns))
            ready = int(gradient_bytes * frac)
        while ready > fused:
            size = min(ready - fused, threshold_bytes)
            plan.append((t, size))
            fused += size
        n += 1
    return plan


def run_horovod(spec, job: Job, *, steps: int, seed: int | None = None, cv: float = 0.0,
                defaults: str = "v0.21+", fusion_threshold_bytes: int | None = None,
                cycle_time_ns: float | None = None, backward_fraction: float = 2.0 / 3.0,
                collective: str | None = None, chunk_bytes: int = DEFAULT_TRAINING_CHUNK_BYTES,
                slowdown: Slowdown | None = None, failure: Failure | None = None,
                pool: str | None = None) -> TrainingResult:
    """Horovod: tensor fusion every cycle, fused buffers all-reduced by the ring (or, with `pool`, the pool
    all-reduce in the DES), one at a time. collective: 'flow' (default without a pool) or 'des'."""
    check_run(spec, job, steps)
    check_backward_fraction(backward_fraction)
    collective = resolve_collective(collective, pool)
    check_collective(collective)
    if defaults not in HOROVOD_DEFAULTS:
        raise InputError(f"defaults: expected one of {', '.join(HOROVOD_DEFAULTS)}, got {defaults!r}")
    base = HOROVOD_DEFAULTS[defaults]
    threshold = base["fusion_threshold_bytes"] if fusion_threshold_bytes is None else fusion_threshold_bytes
    cycle = base["cycle_time_ns"] if cycle_time_ns is None else cycle_time_ns
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise InputError(f"fusion_threshold_bytes: expected a size >= 1 B, got {threshold!r}")
    if not (isinstance(cycle, (int, float)) and 0 < cycle < math.inf):
        raise InputError(f"cycle_time_ns: expected a time > 0 ns, got {cycle!r}")
    named = defaults if (threshold, cycle) == (base["fusion_threshold_bytes"], base["cycle_time_ns"]) else "custom"
    W, G = spec.size, job.gradient_bytes
    rng, seed = make_rng(seed)
    J = multipliers(rng, steps, W, cv, slowdown=slowdown, failure=failure)
    red = [1.0 / x for x in job.reduce_bw_bytes_per_ns]
    host_of = [w.host for w in spec.workers()]
    buffers = []
    events = 0

    def plan_of(bstart, bwd):
        plan = fusion_plan(bstart, bwd, G, cycle_ns=cycle, threshold_bytes=threshold)
        buffers.append(len(plan))
        return plan

    on_pool = PoolAllreduce(spec, pool) if pool is not None else None
    if collective == "flow":
        cm = cost_model(spec, chunk_bytes)

        def schedule(s, bstart, bwd, cend):
            free = list(bstart)
            for tick, size in plan_of(bstart, bwd):
                free = ring_allreduce(cm, host_of, size, [max(tick, f) for f in free], red)
            return free

        rec = run_steps(spec, job, steps, J, backward_fraction, failure, schedule)
    else:
        rec, events = _horovod_des(spec, job, steps, J, backward_fraction, chunk_bytes, failure, plan_of, on_pool)
    return synchronous_result(
        "horovod", spec, job, steps, rec,
        {"horovod_defaults": named, "fusion_threshold_bytes": threshold, "cycle_time_ns": cycle,
         "backward_fraction": backward_fraction, "allreduce": "ring", "collective": collective,
         "cv": cv, "slowdown": describe(slowdown), "failure": describe(failure), "chunk_bytes": chunk_bytes,
         **(on_pool.details() if on_pool else {})},
        seed, events, {"fusion_buffers_per_step": sum(buffers) / len(buffers) if buffers else 0.0})


def _horovod_des(spec, job, steps, J, backward_fraction, chunk_bytes, failure, plan_of, on_pool):
    """The same schedule with every ring message (or pool access, `on_pool`) on the transport."""
    W = spec.size
    tr = on_pool.transport if on_pool else network_transport(spec, 0, chunk_bytes)
    env = tr.env
    rec = StepLog(W)
    expect = reduced_vector(W, W)
    starts = [{} for _ in range(steps)]
    plans = [None] * steps
    planned = [env.event() for _ in range(steps)]

    def worker(w):
        ep = GpuEndpoint(tr, w, job.reduce_bw_bytes_per_ns[w])
        for s in range(steps):
            start = env.now
            if not math.isfinite(J[s, w]):
                return
            it = float(job.iteration_ns[w] * J[s, w])
            bwd = it * backward_fraction
            yield env.timeout(it - bwd)
            starts[s][w] = (env.now, bwd)
            if len(starts[s]) == W:  # every rank has started its backward: the fusion plan is known
                plans[s] = plan_of([starts[s][r][0] for r in range(W)], [starts[s][r][1] for r in range(W)])
                planned[s].succeed()
            comm = env.process(communicate(ep, s))
            yield env.timeout(bwd)
            cend = env.now
            yield comm
            rec.add(w, start, cend, env.now)

    def communicate(ep, s):
        yield planned[s]
        for i, (tick, size) in enumerate(plans[s]):
            if tick > env.now:
                yield env.timeout(tick - env.now)
            if on_pool:
                out = yield from on_pool.allreduce(ep, size, vector_of(ep.rank, W))
            else:
                out = yield from allreduce_ring(Group(ep, range(W), tag=1 + s * 100000 + i), size,
                                                vector_of(ep.rank, W))
            if out != expect:
                raise RunError(f"horovod: worker {ep.rank} got a wrong all-reduce of buffer {i} in step {s}")

    procs = [env.process(worker(w)) for w in range(W)]
    run_to_end(env, procs, W, failure)
    return rec, env.events


MODE = Mode(
    name="horovod", run=run_horovod, convergence=convergence.all_fresh,
    summary="Horovod: tensor fusion every cycle, fused buffers all-reduced by the ring",
    options=(
        Option(name="defaults", flag="--horovod-defaults", parse=str, choices=tuple(HOROVOD_DEFAULTS),
               help="fusion threshold and cycle time of that version (v0.21+: 128 MiB and 1 ms, the default; "
                    "pre-v0.21: 64 MiB and 5 ms)"),
        Option(name="fusion_threshold_bytes", flag="--fusion-threshold", parse=size_text,
               help="override the fusion threshold (a size, e.g. 64MiB)"),
        Option(name="cycle_time_ns", flag="--cycle-time", parse=time_text,
               help="override the cycle time (a time, e.g. '5 ms')"),
        COLLECTIVE, CHUNK, POOL),
)
"""The horovod mode's record (modes.py lists it)."""
