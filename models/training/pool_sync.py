"""Synchronous SGD by an all-reduce of the gradient on a CXL pool at every step.

`sync.run_sync(..., aggregation="allreduce", pool=...)`: what `cxlsim bench
train --mode sync` runs on the emulated pool (PoolComm.allreduce), and what
cxlsim/train_projection.py projects it with. Every node has one worker, a rank
of the pool transport (pool_allreduce.PoolAllreduce). Per step, with W
workers and G gradient bytes, every worker

1. computes (its iteration time, with the run's straggler multipliers, or the
   measured times of a run: `compute_ns`), then
2. all-reduces its G-byte gradient on the pool: `cxl_pool` (every worker
   writes its vector into its slot, publishes its flag, waits for the others'
   and folds all W vectors) or `cxl_pool_large` (each folds its 1/W share,
   publishes it, every worker reads the shares), chosen by closed form or by
   the emulator's threshold (`large_bytes`), in slot-sized calls when
   `slot_bytes` is set; the fold runs on the worker's endpoint at the job's
   reduction bandwidth.

There is no store and no aggregator, unlike the SoftMemoryBox sync of
sync.py / pool_store.py (push, aggregate, pull): the collective's own flags
make the step wait for the slowest worker. Cross-check: with equal compute
times t and no jitter a step takes exactly t + the all-reduce's closed form
on an uncongested pool (pool_collective_forms.allreduce_small_cost or
allreduce_large_cost; tests/test_train_projection.py holds the DES to it).

Flush mode: a worker waiting for a slower one polls its flags (flush, fence,
load) until they land, so a compute imbalance of d ns costs about d / (poll
time) poll events; keep runs short (the DES's poll limit is 1 s of waiting).
A failed worker stalls the run (RunError naming it).
"""
from __future__ import annotations

import math

from cxlsim.errors import RunError
from cxlsim.models.collectives.base import reduced_vector, vector_of
from cxlsim.models.training.core import GpuEndpoint, StepLog, run_to_end, synchronous_result
from cxlsim.models.training.pool_allreduce import PoolAllreduce

__all__ = ["run_sync_allreduce"]


def run_sync_allreduce(spec, job, steps, seed, J, failure, noise, *, pool, coherence,
                       large_bytes: int | None = None, slot_bytes: int | None = None, call_overhead_ns: float = 0.0):
    """Synchronous SGD with one pool all-reduce of the gradient per step (see the module docstring).

    J: the steps x workers compute multipliers (stragglers.py). pool: a CXL pool preset name or a
    CXLPoolPreset; coherence: hw or flush; large_bytes, slot_bytes, call_overhead_ns: as PoolAllreduce
    takes them (call_overhead_ns: e.g. the emulator's hand-off of the gradient to its communication thread).
    """
    on_pool = PoolAllreduce(spec, pool, coherence=coherence, large_bytes=large_bytes, slot_bytes=slot_bytes,
                            call_overhead_ns=call_overhead_ns)
    tr = on_pool.transport
    env = tr.env
    W, G = spec.size, job.gradient_bytes
    log = StepLog(W)
    expect = reduced_vector(W, W)

    def worker(w):
        ep = GpuEndpoint(tr, w, job.reduce_bw_bytes_per_ns[w])
        for s in range(steps):
            start = env.now
            if not math.isfinite(J[s, w]):
                return  # failed node
            yield env.timeout(float(job.iteration_ns[w] * J[s, w]))
            cend = env.now
            if W > 1:
                out = yield from on_pool.allreduce(ep, G, vector_of(w, W))
                if out != expect:
                    raise RunError(f"sync: worker {w} got a wrong pool all-reduce in step {s}")
            log.add(w, start, cend, env.now)

    procs = [env.process(worker(w)) for w in range(W)]
    run_to_end(env, procs, W, failure)
    return synchronous_result(
        "sync", spec, job, steps, log,
        {"aggregation": "allreduce", **on_pool.details(), "gradient_bytes": G, **noise}, seed, env.events)
