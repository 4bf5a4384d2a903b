"""EDDIS synchronous SGD over the SoftMemoryBox store: every step waits for the slowest worker.

`spec.memory_servers` memory-server hosts, each running `spec.server_cores`
aggregation ranks, hold the store; the gradient (G bytes) is striped over the
S = servers * cores ranks in shards of ceil(G / S) bytes.

`aggregation="servers"` (the default). Each step, every worker computes, then
pushes shard k to server rank k (all S sends at once, its NIC serialises them),
then waits for all S aggregated shards. Server rank k reduces the W pushes of
its shard on its CPU in arrival order (W - 1 reductions at the host's reduction
bandwidth), and once all W have arrived it sends the aggregate back to every
worker (the pull), starting at worker k*W//S and wrapping, so servers do not
all hit the same worker first. The step therefore waits for the slowest
worker, and the servers' incast (W pushes into one port) is queued by the
network. With one server rank, no jitter and a slowest worker late enough that
the others' pushes are done, one step takes exactly
t_slowest + T(G) + R(G) + T(G) + (W-1)*G*beta  (analytic.CostModel terms: the
slow push, its reduction, and W pulls through the server's uplink).

`aggregation="workers"`: the workers aggregate over the shared region and the
memory servers only hold memory (one-sided RDMA; no server CPU reduction). The
gradient is cut into W slices of ceil(G / W) bytes, slice j living on store
rank j mod S. Each worker writes the W - 1 slices it does not aggregate; when
all W - 1 copies of slice j are in, worker j reads them (one (W - 1)-slice
read), reduces them on its GPU and writes the reduced slice back, and every
other worker reads it. A reduce-scatter plus an allgather through the store:
the servers' incast is still modelled, their CPUs are not the bottleneck.

`pool="cxl3-pool"` (a CXL pool preset, with `aggregation="workers"`) puts the
store on a CXL memory pool instead, on the CXL pool transport (pool_store.py;
`coherence` and `pool_devices` apply to it only). `aggregation="allreduce"`
(with a pool only) has no store at all: every step all-reduces the gradient
on the pool (pool_sync.py), as `cxlsim bench train --mode sync` does on the
emulated pool. The pool has no memory
servers and moves its data in pool chunks, so `memory_servers`,
`server_cores` and `chunk_bytes` are refused with it.

A failed worker stalls the run (RunError naming it): plain synchronous SGD has
no elastic recovery. Every memory-server run reports how busy the store was
(store_load.py) in `extra`.
"""
from __future__ import annotations

import math

import simpy

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError, RunError
from cxlsim.models.training import convergence
from cxlsim.models.training.core import (CHUNK, DEFAULT_TRAINING_CHUNK_BYTES, STORE_OPTIONS, GpuEndpoint, Job,
                                         Mode, Option, StepLog, TrainingResult, check_run, describe,
                                         integer_at_least, network_transport, run_to_end, synchronous_result,
                                         with_store)
from cxlsim.models.training.pool_allreduce import POOL
from cxlsim.models.training.pool_store import run_sync_on_pool
from cxlsim.models.training.pool_sync import run_sync_allreduce
from cxlsim.models.training.store_load import StoreLoad, gpu_bound_samples_per_s
from cxlsim.models.training.stragglers import Failure, Slowdown, multipliers
from cxlsim.results import make_rng

__all__ = ["run_sync", "MODE", "AGGREGATIONS"]

AGGREGATIONS = ("servers", "workers", "allreduce")
"""Who reduces the gradients: the memory servers' CPUs, the workers over the shared region, or a pool
all-reduce among the workers (no store)."""


def run_sync(spec, job: Job, *, steps: int, seed: int | None = None, cv: float = 0.0,
             chunk_bytes: int | None = None, aggregation: str = "servers",
             slowdown: Slowdown | None = None, failure: Failure | None = None, pool: str | None = None,
             coherence: Coherence | str | None = None, pool_devices: int | None = None,
             memory_servers: int | None = None, server_cores: int | None = None) -> TrainingResult:
    """EDDIS sync: push to the SoftMemoryBox servers, aggregate there, pull; each step waits for the slowest.

    chunk_bytes: network pipelining unit (default DEFAULT_TRAINING_CHUNK_BYTES). coherence (default
    hw) and pool_devices (default 1) apply with `pool` only. memory_servers, server_cores: replace
    the spec's.
    """
    check_run(spec, job, steps)
    if aggregation not in AGGREGATIONS:
        raise InputError(f"aggregation: expected 'servers' or 'workers', got {aggregation!r} (or 'allreduce' with "
                         "a pool)")
    if aggregation == "allreduce" and pool is None:
        raise InputError("aggregation: 'allreduce' all-reduces on a CXL pool; give a pool (e.g. cxl3-pool), or use "
                         "mode ddp or horovod for an all-reduce on the network")
    if pool is None:
        for key, value in (("coherence", coherence), ("pool_devices", pool_devices)):
            if value is not None:
                raise InputError(f"{key}: applies to a CXL-pool store only (sync with pool=...), got "
                                 f"{key}={value!r} without a pool")
    else:
        for key, value in (("memory_servers", memory_servers), ("server_cores", server_cores),
                           ("chunk_bytes", chunk_bytes)):
            if value is not None:
                raise InputError(f"{key}: a CXL-pool store (pool={pool!r}) has no memory servers and moves its "
                                 f"data in pool chunks; {key} does not apply to it, got {value!r}")
    spec = with_store(spec, memory_servers, server_cores)
    W, S = spec.size, spec.memory_servers * spec.server_cores
    shard = -(-job.gradient_bytes // S)
    rng, seed = make_rng(seed)
    J = multipliers(rng, steps, W, cv, slowdown=slowdown, failure=failure)
    noise = {"cv": cv, "slowdown": describe(slowdown), "failure": describe(failure)}
    if pool is not None:
        if aggregation == "allreduce":
            if pool_devices is not None:
                raise InputError(f"pool_devices: the pool all-reduce runs on one device, got {pool_devices!r}")
            return run_sync_allreduce(spec, job, steps, seed, J, failure, noise, pool=pool,
                                      coherence=Coherence.HW if coherence is None else coherence)
        if aggregation != "workers":
            raise InputError(f"aggregation: a CXL-pool store has no CPU next to the memory; expected 'workers' "
                             f"or 'allreduce' with pool={pool!r}, got {aggregation!r}")
        return run_sync_on_pool(spec, job, steps, seed, J, failure, noise, pool=pool,
                                coherence=Coherence.parse(Coherence.HW if coherence is None else coherence),
                                devices=1 if pool_devices is None else pool_devices)
    chunk_bytes = DEFAULT_TRAINING_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    if aggregation == "workers":
        return _sync_by_workers(spec, job, steps, seed, J, chunk_bytes, failure, noise)
    tr = network_transport(spec, S, chunk_bytes)
    env = tr.env
    log = StepLog(W)
    store = StoreLoad(tr, spec, W)

    def worker(w):
        base = job.iteration_ns[w]
        for s in range(steps):
            start = env.now
            if not math.isfinite(J[s, w]):
                return  # failed node
            yield env.timeout(float(base * J[s, w]))
            cend = env.now
            for k in range(S):
                tr.send(w, W + k, shard, (s, w), tag=s)
            pulls = [tr.recv(w, W + k, tag=s) for k in range(S)]
            for k, pull in enumerate(pulls):
                got = yield pull
                if got != (s, W):
                    raise RunError(f"sync: worker {w} pulled {got!r} from server rank {k} in step {s}, "
                                   f"expected the aggregate of all {W} workers")
            log.add(w, start, cend, env.now)

    def server(k):
        rank = W + k
        order = [(k * W // S + i) % W for i in range(W)]
        for s in range(steps):
            state = {"n": 0, "last": None, "from": set()}
            all_in = simpy.Event(env)

            def arrived(event, s=s, state=state, all_in=all_in):
                step, src = event.value
                if step != s or src in state["from"]:
                    raise RunError(f"sync: server rank {k} got push {event.value!r} in step {s}")
                store.received(rank)
                state["from"].add(src)
                state["n"] += 1
                if state["n"] > 1:  # the first push is the accumulator; the rest are reduced into it
                    state["last"] = store.reduce(rank, shard)
                if state["n"] == W:
                    all_in.succeed(state["last"])

            for w in range(W):
                tr.recv(rank, w, tag=s).callbacks.append(arrived)
            last = yield all_in
            if last is not None:
                yield last
            for w in order:
                store.send(rank, w, shard, (s, W), tag=s)

    workers = [env.process(worker(w)) for w in range(W)]
    servers = [env.process(server(k)) for k in range(S)]
    run_to_end(env, workers + servers, W, failure)
    result = synchronous_result(
        "sync", spec, job, steps, log,
        {"memory_servers": spec.memory_servers, "server_cores": spec.server_cores, "shard_bytes": shard,
         "aggregation": "memory servers", **noise, "chunk_bytes": chunk_bytes}, seed, env.events)
    result.extra.update(store.report(result.elapsed_ns, result.samples, gpu_bound_samples_per_s(job, True)))
    return result


def _sync_by_workers(spec, job, steps, seed, J, chunk_bytes, failure, noise):
    """EDDIS sync with the workers aggregating over the shared region (see the module docstring)."""
    W, S = spec.size, spec.memory_servers * spec.server_cores
    sl = -(-job.gradient_bytes // W)
    tr = network_transport(spec, S, chunk_bytes)
    env = tr.env
    log = StepLog(W)
    store = StoreLoad(tr, spec, W)
    home = [j % S for j in range(W)]  # server rank holding slice j
    count = {}

    def worker(w):
        ep = GpuEndpoint(tr, w, job.reduce_bw_bytes_per_ns[w])
        expect = [sum(1 for j in range(W) if home[j] == k and j != w) + (home[w] == k and W > 1) for k in range(S)]
        for s in range(steps):
            start = env.now
            if not math.isfinite(J[s, w]):
                return  # failed node
            yield env.timeout(float(job.iteration_ns[w] * J[s, w]))
            cend = env.now
            if W > 1:
                for j in range(W):
                    if j != w:
                        tr.send(w, W + home[j], sl, ("grad", s, w, j), tag=s)
                mine, done, left = simpy.Event(env), simpy.Event(env), [W - 1]

                def got(event, mine=mine, done=done, left=left):
                    if event.value[0] == "slices":
                        mine.succeed()
                    else:
                        left[0] -= 1
                        if left[0] == 0:
                            done.succeed()

                for k in range(S):
                    for _ in range(expect[k]):
                        tr.recv(w, W + k, tag=s).callbacks.append(got)
                yield mine
                yield ep.reduce((W - 1) * sl)  # the other W-1 workers' slice w, on this GPU
                tr.send(w, W + home[w], sl, ("agg", s, w), tag=s)
                yield done
            log.add(w, start, cend, env.now)

    def handler(k, w):
        rank = W + k
        expect = sum(1 for j in range(W) if home[j] == k and j != w) + (home[w] == k)
        for s in range(steps):
            for _ in range(expect):
                msg = yield tr.recv(rank, w, tag=s)
                store.received(rank)
                if msg[0] == "grad":
                    j = msg[3]
                    count[s, j] = count.get((s, j), 0) + 1
                    if count[s, j] == W - 1:  # every other worker has written slice j: aggregator j reads them
                        store.send(rank, j, (W - 1) * sl, ("slices", s, j), tag=s)
                else:
                    j = msg[2]
                    for i in range(1, W):  # every other worker reads the reduced slice j
                        store.send(rank, (j + i) % W, sl, ("reduced", s, j), tag=s)

    workers = [env.process(worker(w)) for w in range(W)]
    if W > 1:
        for k in range(S):
            for w in range(W):
                env.process(handler(k, w))
    run_to_end(env, workers, W, failure)
    result = synchronous_result(
        "sync", spec, job, steps, log,
        {"memory_servers": spec.memory_servers, "server_cores": spec.server_cores, "slice_bytes": sl,
         "aggregation": "workers", **noise, "chunk_bytes": chunk_bytes}, seed, env.events)
    result.extra.update(store.report(result.elapsed_ns, result.samples, gpu_bound_samples_per_s(job, True)))
    return result


MODE = Mode(
    name="sync", run=run_sync, convergence=convergence.all_fresh,
    summary="EDDIS synchronous SGD over the SoftMemoryBox store (memory servers, or a CXL pool)",
    options=(
        Option(name="aggregation", flag="--aggregation", parse=str, choices=AGGREGATIONS,
               help="who reduces the gradients: the memory servers (servers, default), the workers over the "
                    "shared region (workers), or a pool all-reduce among the workers (allreduce, with --pool)"),
        POOL,
        Option(name="coherence", flag="--coherence", parse=Coherence.parse, choices=Coherence.names(),
               help="with --pool: CXL 3.x hardware coherence (hw, default) or software flushes (flush)"),
        Option(name="pool_devices", flag="--pool-devices", parse=integer_at_least(1),
               help="with --pool: interleaved pool devices (default 1)"),
        CHUNK, *STORE_OPTIONS),
)
"""The sync mode's record (modes.py lists it)."""
