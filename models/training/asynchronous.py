"""EDDIS asynchronous SGD: elastic averaging (as in EASGD) against a centre variable in the store.

Workers never wait for each other: each runs local steps back to back, and
every `tau` local steps it exchanges with the centre variable in the
SoftMemoryBox store: it sends its parameters (shard k to server rank k, the
S = memory_servers * server_cores ranks of sync.py), the server rank updates
the centre (one reduction of the shard) and returns it, and the worker applies
the elastic update on its GPU (one reduction of G bytes). The run ends when the
workers together have done `steps * W` local steps (the samples of a sync run
of `steps` steps); a worker takes a step only while that budget lasts, so a
failed worker's share is taken over by the others.

`extra["staleness_updates_histogram"]` counts, per exchange, the centre
updates by other workers since the worker's previous exchange; the convergence
rule (`progress_factor`) reads it. `extra` also says how busy the store was
(store_load.py).
"""
from __future__ import annotations

import math

from cxlsim.errors import InputError, RunError
from cxlsim.models.training.convergence import discount
from cxlsim.models.training.core import (CHUNK, DEFAULT_TRAINING_CHUNK_BYTES, STORE_OPTIONS, GpuEndpoint, Job,
                                         Mode, Option, StepLog, TrainingResult, check_run, describe,
                                         integer_at_least, network_transport, run_to_end, with_store)
from cxlsim.models.training.store_load import StoreLoad, gpu_bound_samples_per_s
from cxlsim.models.training.stragglers import Failure, Slowdown, multipliers
from cxlsim.results import make_rng

__all__ = ["run_async", "progress_factor", "MODE"]


def run_async(spec, job: Job, *, steps: int, tau: int = 1, seed: int | None = None, cv: float = 0.0,
              chunk_bytes: int = DEFAULT_TRAINING_CHUNK_BYTES, slowdown: Slowdown | None = None,
              failure: Failure | None = None, memory_servers: int | None = None,
              server_cores: int | None = None) -> TrainingResult:
    """EDDIS async (elastic averaging): exchange with the centre every `tau` local steps, never wait for others."""
    check_run(spec, job, steps)
    if isinstance(tau, bool) or not isinstance(tau, int) or tau < 1:
        raise InputError(f"tau: expected an integer >= 1, got {tau!r}")
    spec = with_store(spec, memory_servers, server_cores)
    W, S = spec.size, spec.memory_servers * spec.server_cores
    shard = -(-job.gradient_bytes // S)
    budget = steps * W
    rng, seed = make_rng(seed)
    # Worker w's k-th local step uses J[k, w]; a worker takes at most `budget` steps.
    J = multipliers(rng, budget, W, cv, slowdown=slowdown, failure=failure)
    tr = network_transport(spec, S, chunk_bytes)
    env = tr.env
    log = StepLog(W)
    store = StoreLoad(tr, spec, W)
    claimed = [0]
    exchanges = [0] * W
    centre = {"updates": 0, "seen": [0] * W, "stale": {}}  # centre updates and each worker's view of them

    def worker(w):
        ep = GpuEndpoint(tr, w, job.reduce_bw_bytes_per_ns[w])
        base, local = job.iteration_ns[w], 0
        while claimed[0] < budget:
            if not math.isfinite(J[local, w]):
                return  # failed node: the others take over its share of the budget
            claimed[0] += 1
            start = env.now
            yield env.timeout(float(base * J[local, w]))
            cend = env.now
            local += 1
            if local % tau == 0:
                for k in range(S):
                    tr.send(w, W + k, shard, ("params", w), tag=0)
                for k in range(S):
                    got = yield tr.recv(w, W + k, tag=0)
                    if got != ("centre", w):
                        raise RunError(f"async: worker {w} got {got!r} from server rank {k}")
                yield ep.reduce(job.gradient_bytes)  # the elastic update of the local parameters
                exchanges[w] += 1
                u = centre["updates"] - centre["seen"][w]  # updates by the others since its last exchange
                centre["stale"][u] = centre["stale"].get(u, 0) + 1
                centre["updates"] += 1
                centre["seen"][w] = centre["updates"]
            log.add(w, start, cend, env.now)

    def handler(k, w):
        rank = W + k
        while True:
            got = yield tr.recv(rank, w, tag=0)
            store.received(rank)
            if got != ("params", w):
                raise RunError(f"async: server rank {k} got {got!r} from worker {w}")
            yield store.reduce(rank, shard)  # the centre moves towards the worker's parameters
            store.send(rank, w, shard, ("centre", w), tag=0)

    procs = [env.process(worker(w)) for w in range(W)]
    for k in range(S):
        for w in range(W):
            env.process(handler(k, w))
    run_to_end(env, procs, W)
    stats = log.stats(spec, job, synchronous=False)
    elapsed = max(e[-1] for e in log.end if e)
    return TrainingResult(
        mode="async", model=job.model, precision=job.precision, batch=job.batch, steps=steps,
        samples=budget * job.batch, elapsed_ns=elapsed, workers=stats, step_end_ns=(),
        params={"tau": tau, "memory_servers": spec.memory_servers, "server_cores": spec.server_cores,
                "shard_bytes": shard, "cv": cv, "slowdown": describe(slowdown), "failure": describe(failure),
                "chunk_bytes": chunk_bytes, "interconnect": spec.interconnect,
                "gradient_dtype": job.gradient_dtype},
        seed=seed, events=env.events, extra={"exchanges": list(exchanges),
                                           "staleness_updates_histogram": dict(sorted(centre["stale"].items())),
                                           **store.report(elapsed, budget * job.batch, gpu_bound_samples_per_s(job, False))},
        intervals=log.intervals())


def progress_factor(result) -> float:
    """Convergence rule: an exchange carrying tau local steps, u centre updates by others late, counts
    x = u * tau / W equivalent sync steps of staleness (convergence.py, assumption 2)."""
    W = len(result.workers)
    hist = result.extra.get("staleness_updates_histogram", {})
    n = sum(hist.values())
    if not n:  # no exchange at all: nothing reaches the shared model
        return 0.0
    tau = result.params["tau"]
    return sum(c * discount(int(u) * tau / W) for u, c in hist.items()) / n


MODE = Mode(
    name="async", run=run_async, convergence=progress_factor,
    summary="EDDIS asynchronous SGD: elastic averaging against a centre variable in the store",
    options=(Option(name="tau", flag="--tau", parse=integer_at_least(1),
                    help="local steps between exchanges with the centre (default 1)"),
             CHUNK, *STORE_OPTIONS),
)
"""The async mode's record (modes.py lists it)."""
