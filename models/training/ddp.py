"""PyTorch DistributedDataParallel: bucketed ring all-reduce, overlapped with the backward pass.

Gradients are bucketed in reverse parameter order: a first bucket of
`first_bucket_bytes` (1 MiB) and then buckets of `bucket_cap_bytes` (25 MiB),
as in PyTorch's reducer (`ddp_buckets`). A bucket is ready when the backward
pass has produced its bytes, assuming gradients appear at a uniform byte rate
over the backward pass. Buckets are all-reduced in order, one at a time (one
NCCL stream), each with the ring all-reduce of models/collectives. With
`overlap=True` a bucket starts as soon as it is ready and the previous one is
done; with `overlap=False` all buckets start after the backward pass.

`collective="flow"` (the default) costs the same schedule with the flow-level
ring recurrence (flow.py), tested equal to the DES within 2% (to rounding on
the training star); `collective="des"` runs every ring message on the
transport (a 16-node, 200-step run takes about 9-11 s on the development
machine, the flow about 0.2 s). With `pool="cxl3-pool"` (a CXL pool preset) the
buckets are all-reduced on a CXL pool instead, in the DES (pool_allreduce.py).
A failed worker stalls the run (RunError).
"""
from __future__ import annotations

import math

from cxlsim.errors import InputError, RunError
from cxlsim.models.collectives.base import Group, reduced_vector, vector_of
from cxlsim.models.collectives.reductions import allreduce_ring
from cxlsim.models.training import convergence
from cxlsim.models.training.core import (CHUNK, DEFAULT_TRAINING_CHUNK_BYTES, MIB, GpuEndpoint, Job, Mode, Option,
                                         StepLog, TrainingResult, check_backward_fraction, check_run, describe,
                                         network_transport, run_to_end, size_text, synchronous_result)
from cxlsim.models.training.flow import COLLECTIVE, check_collective, cost_model, ring_allreduce, run_steps
from cxlsim.models.training.pool_allreduce import POOL, PoolAllreduce, resolve_collective
from cxlsim.models.training.stragglers import Failure, Slowdown, measured_multipliers, multipliers
from cxlsim.results import make_rng

__all__ = ["ddp_buckets", "run_ddp", "MODE"]


def ddp_buckets(gradient_bytes: int, first_bucket_bytes: int = MIB, bucket_cap_bytes: int = 25 * MIB) -> list[int]:
    """Bucket sizes in the order DDP reduces them: one first bucket, then full buckets, then the rest."""
    for key, value in (("first_bucket_bytes", first_bucket_bytes), ("bucket_cap_bytes", bucket_cap_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{key}: expected a size >= 1 B, got {value!r}")
    sizes, left = [min(first_bucket_bytes, gradient_bytes)], gradient_bytes - min(first_bucket_bytes, gradient_bytes)
    while left > 0:
        sizes.append(min(bucket_cap_bytes, left))
        left -= sizes[-1]
    return sizes


def run_ddp(spec, job: Job, *, steps: int, seed: int | None = None, cv: float = 0.0,
            bucket_cap_bytes: int = 25 * MIB, first_bucket_bytes: int = MIB, overlap: bool = True,
            backward_fraction: float = 2.0 / 3.0, chunk_bytes: int = DEFAULT_TRAINING_CHUNK_BYTES,
            slowdown: Slowdown | None = None, failure: Failure | None = None,
            collective: str | None = None, pool: str | PoolAllreduce | None = None,
            compute_ns=None) -> TrainingResult:
    """PyTorch DDP: bucketed ring all-reduce (or, with `pool`, the pool all-reduce), overlapped with the
    backward pass when `overlap`. collective: 'flow' (default without a pool) or 'des' (the only one with).
    pool: a CXL pool preset name, or a PoolAllreduce (its own pool, coherence and algorithm rule).
    compute_ns: steps x workers measured iteration times (ns) replacing iteration_ns x the multipliers."""
    check_run(spec, job, steps)
    check_backward_fraction(backward_fraction)
    collective = resolve_collective(collective, pool)
    check_collective(collective)
    on_pool = pool if isinstance(pool, PoolAllreduce) else PoolAllreduce(spec, pool) if pool is not None else None
    W, G = spec.size, job.gradient_bytes
    buckets = ddp_buckets(G, first_bucket_bytes, bucket_cap_bytes)
    ends = [sum(buckets[:i + 1]) for i in range(len(buckets))]
    rng, seed = make_rng(seed)
    if compute_ns is None:
        J = multipliers(rng, steps, W, cv, slowdown=slowdown, failure=failure)
    else:
        J = measured_multipliers(job.iteration_ns, compute_ns)
        if len(J) != steps:
            raise InputError(f"compute_ns: expected {steps} steps of times, got {len(J)}")
    if collective == "flow":
        log, events = _ddp_flow(spec, job, steps, J, buckets, ends, overlap, backward_fraction, chunk_bytes,
                                failure), 0
    else:
        log, events = _ddp_des(spec, job, steps, J, buckets, ends, overlap, backward_fraction, chunk_bytes,
                               failure, on_pool)
    return synchronous_result("ddp", spec, job, steps, log, {
        "bucket_cap_bytes": bucket_cap_bytes, "first_bucket_bytes": first_bucket_bytes, "buckets": len(buckets),
        "overlap": overlap, "backward_fraction": backward_fraction, "allreduce": "ring",
        "collective": collective, "cv": cv, "slowdown": describe(slowdown), "failure": describe(failure),
        "chunk_bytes": chunk_bytes, **(on_pool.details() if on_pool else {})}, seed, events)


def _ddp_flow(spec, job, steps, J, buckets, ends, overlap, backward_fraction, chunk_bytes, failure):
    """The DDP schedule with flow-level ring costs (flow.ring_allreduce)."""
    G = job.gradient_bytes
    red = [1.0 / x for x in job.reduce_bw_bytes_per_ns]
    host_of = [w.host for w in spec.workers()]
    cm = cost_model(spec, chunk_bytes)

    def schedule(s, bstart, bwd, cend):
        free = list(bstart) if overlap else list(cend)
        for size, end in zip(buckets, ends):
            ready = [b + d * (end / G) for b, d in zip(bstart, bwd)] if overlap else cend
            free = ring_allreduce(cm, host_of, size, [max(r, f) for r, f in zip(ready, free)], red)
        return free

    return run_steps(spec, job, steps, J, backward_fraction, failure, schedule)


def _ddp_des(spec, job, steps, J, buckets, ends, overlap, backward_fraction, chunk_bytes, failure, on_pool):
    """The DDP schedule with every ring message (or pool access, `on_pool`) on the transport: (StepLog, events)."""
    W, G = spec.size, job.gradient_bytes
    tr = on_pool.transport if on_pool else network_transport(spec, 0, chunk_bytes)
    env = tr.env
    log = StepLog(W)
    expect = reduced_vector(W, W)

    def communicate(ep, s, bstart, bwd):
        for i, (size, end) in enumerate(zip(buckets, ends)):
            if overlap:
                ready = bstart + bwd * (end / G)
                if ready > env.now:
                    yield env.timeout(ready - env.now)
            if on_pool:
                out = yield from on_pool.allreduce(ep, size, vector_of(ep.rank, W))
            else:
                out = yield from allreduce_ring(Group(ep, range(W), tag=1 + s * len(buckets) + i), size,
                                                vector_of(ep.rank, W))
            if out != expect:
                raise RunError(f"ddp: worker {ep.rank} got a wrong all-reduce of bucket {i} in step {s}")

    def worker(w):
        ep = GpuEndpoint(tr, w, job.reduce_bw_bytes_per_ns[w])
        for s in range(steps):
            start = env.now
            if not math.isfinite(J[s, w]):
                return  # failed node
            it = float(job.iteration_ns[w] * J[s, w])
            bwd = it * backward_fraction
            yield env.timeout(it - bwd)
            bstart = env.now
            comm = env.process(communicate(ep, s, bstart, bwd)) if overlap else None
            yield env.timeout(bwd)
            cend = env.now
            if comm is None:
                comm = env.process(communicate(ep, s, bstart, bwd))
            yield comm
            log.add(w, start, cend, env.now)

    procs = [env.process(worker(w)) for w in range(W)]
    run_to_end(env, procs, W, failure)
    return log, env.events


MODE = Mode(
    name="ddp", run=run_ddp, convergence=convergence.all_fresh,
    summary="PyTorch DDP: bucketed ring all-reduce overlapped with the backward pass",
    options=(
        Option(name="bucket_cap_bytes", flag="--bucket-cap", parse=size_text, help="bucket size (default 25MiB)"),
        Option(name="first_bucket_bytes", flag="--first-bucket", parse=size_text,
               help="first bucket size (default 1MiB)"),
        Option(name="overlap", flag="--no-overlap", switch=False,
               help="start the all-reduces only after the backward pass"),
        COLLECTIVE, CHUNK, POOL),
)
"""The ddp mode's record (modes.py lists it)."""
