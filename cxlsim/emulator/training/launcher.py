"""Run one `cxlsim bench train` job: N local ranks on one pool, then the evaluation and the record.

`train(config)` checks the mode's options, builds the model and the dataset (the same on every
rank: they are built before the ranks fork), holds a bench lock (other cxlsim benches
running meanwhile are named in the record's warnings), probes the host placement before and
after the run, runs the mode's launcher-side hook if it has one, starts the ranks with `cxlsim.emulator.launch.run_local`
(each rank takes its core if pinned, limits BLAS to one thread, passes one barrier, takes the common start from rank 0,
runs the mode's loop, then evaluates its parameter snapshots on the test set), and returns the
train.json record (`run_record`). A synchronous mode whose rank fails raises RankFailure (the
pool segment is gone either way); in async and hybrid a failed rank is listed in failed_ranks.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits
from tqdm import tqdm

from cxlsim import results
from cxlsim.emulator.host import (SLOW_ROUNDTRIP_NS, BenchLock, concurrency_warning, cores_warning,
                                  placement_warning, probe_roundtrip_ns)
from cxlsim.emulator.launch import Failed, run_local
from cxlsim.emulator.training import config as settings
from cxlsim.emulator.training import data, models, modes, run_record
from cxlsim.emulator.training.context import RankContext, RankStopped
from cxlsim.emulator.training.ddp import DEFAULT_BUCKETS
from cxlsim.errors import InputError

PAGE = 4096
MAX_SLOT_BYTES = 1 << 20
PROGRESS_MIN_STEPS = 200  # runs shorter than this get no progress bar


def check_options(config, mode: modes.TrainMode) -> None:
    """InputError for an option the mode does not use (--lockstep is accepted by the modes that always are)."""
    asked = {"overlap": config.overlap is not None, "buckets": config.buckets is not None,
             "lockstep": config.lockstep and not mode.always_lockstep}
    for option, on in asked.items():
        if on and option not in mode.options:
            users = [m.name for m in modes.MODES.values() if option in m.options]
            raise InputError(f"--{option}: mode {mode.name} does not use it (it is an option of {', '.join(users)})")


def slot_bytes_for(model) -> int:
    """The pool's slot size: the parameter vector rounded up to a page, at most 1 MiB (larger vectors go in chunks)."""
    return min(MAX_SLOT_BYTES, -(-model.nbytes // PAGE) * PAGE)


def roundtrip_or_none() -> float | None:
    """The hw flag round trip between two fresh processes now (ns), or None if the probe cannot run."""
    try:
        return probe_roundtrip_ns()
    except Exception:  # a probe that cannot run says nothing about the run
        return None


def placement(roundtrips_ns) -> str:
    """'slow' if a probe (before, after the run) exceeded SLOW_ROUNDTRIP_NS, 'fast' if none did, else 'unknown'."""
    known = [ns for ns in roundtrips_ns if ns is not None]
    if not known:
        return "unknown"
    return "slow" if max(known) > SLOW_ROUNDTRIP_NS else "fast"


def train(config, progress: bool | None = None, probe_host: bool = True) -> dict:
    """Run `config` (a TrainConfig) and return its train.json record. progress: rank 0's progress bar
    (default: on a terminal, for runs of PROGRESS_MIN_STEPS or more). probe_host=False skips the
    placement probes (placement "unknown"; tests that do not need it save two forks each)."""
    mode = modes.mode(config.mode)
    check_options(config, mode)
    loop = mode.resolve("loop")
    model = models.build(config.model)
    dataset = data.load(config.dataset, config.seed)
    dataset.batch(0, 0, config.nranks, config.batch_size)  # a batch too large for the set fails here, not in a rank
    if config.buckets is not None and not 1 <= config.buckets <= model.size:
        raise InputError(f"--buckets: expected 1..{model.size} (the model's parameters), got {config.buckets}")
    params0 = model.init(config.seed)
    multipliers = config.multipliers()
    cores = settings.pinned_cores(config.nranks, config.pin)
    show = progress if progress is not None else (sys.stderr.isatty() and config.steps >= PROGRESS_MIN_STEPS)
    hook = mode.resolve("shared")(config, model) if mode.shared else contextlib.nullcontext()
    with one_blas_thread(), BenchLock() as lock:
        others = set(lock.others())
        roundtrips = [roundtrip_or_none() if probe_host else None]
        with hook as shared:
            job = (config, loop, mode.synchronous, model, dataset, params0, multipliers, shared, show, cores)
            outcomes = run_local(config.nranks, _rank, job, pool=config.pool, slot_bytes=slot_bytes_for(model),
                                 coherence=config.coherence, timeout_s=config.timeout_s,
                                 keep_going=not mode.synchronous)  # async and hybrid outlive a dead rank
            outcomes = [_dead(r, o.message) if isinstance(o, Failed) else o for r, o in enumerate(outcomes)]
        roundtrips.append(roundtrip_or_none() if probe_host else None)
        others |= set(lock.others()) | set(lock.visitors())
        warnings = (cores_warning(config.nranks) + concurrency_warning(others) + lock.warnings()
                    + placement_warning([ns for ns in roundtrips if ns is not None]) + failure_warning(config, outcomes))
    record = build_record(config, mode, model, outcomes, placement(roundtrips))
    record.update(host_roundtrip_ns=roundtrips, warnings=warnings, pinned_cores=cores, slot_bytes=slot_bytes_for(model),
                  allreduce_large_bytes=next(o["allreduce_large_bytes"] for o in outcomes
                                             if o["allreduce_large_bytes"] is not None))
    return record


def failure_warning(config, outcomes) -> list[str]:
    """A warning if --fail asked a rank of an async or hybrid run to fail and it never did: the others spent
    the run's budget before that rank reached its failure step (a rank starved of CPU on a loaded host), so
    the run, and its projection (which follows failed_ranks), has no failed rank."""
    failure = config.failure
    if failure is None or outcomes[failure.worker]["stopped"]:
        return []
    done = outcomes[failure.worker]["entry"]["steps_done"]
    return [f"--fail {failure.worker}:{failure.step}: rank {failure.worker} never failed: the run's budget "
            f"({config.steps * config.nranks} tickets) was spent after its {done} local steps, before its step "
            f"{failure.step}; the run has no failed rank"]


def one_blas_thread():
    """BLAS limited to one thread in this process, for the probes and the ranks forked inside the block.

    The limit is set here, before the fork, and the ranks inherit it: set in a forked rank,
    OpenBLAS's set-num-threads call first re-creates the worker pool that the fork left behind,
    and the new worker busy-waits with sched_yield (about 60-90 ms, OpenBLAS's THREAD_TIMEOUT)
    on the rank's CPU. While it spins, the rank's communication thread, which also yields while
    it waits in the pool, gets the CPU only at the scheduler's tick (4 ms at HZ=250): each of the
    first 10-12 pool calls of a run took 4-8 ms instead of 0.1 ms (benchmarks/train_warmup.py)."""
    return threadpool_limits(limits=1)


def blas_threads() -> int:
    """The most threads any BLAS library of this process would use (threadpoolctl; 1 if there is none)."""
    return max((lib["num_threads"] for lib in threadpool_info()), default=1)


def _rank(comm, config, loop, synchronous, model, dataset, params0, multipliers, shared, show, cores):
    """One rank: its core (if pinned), one BLAS thread (inherited: `one_blas_thread`), the common
    start, the loop; returns its outcome (a dict)."""
    if cores[comm.rank] is not None:
        os.sched_setaffinity(0, {cores[comm.rank]})
    limit = threadpool_limits(limits=1) if blas_threads() > 1 else contextlib.nullcontext()  # a BLAS not limited
    with limit:
        start = np.zeros(1)
        comm.barrier()
        threads = len(os.listdir("/proc/self/task"))  # this rank's threads at its start (1: no BLAS worker)
        if comm.rank == 0:
            start[0] = time.perf_counter()
        comm.broadcast(start, root=0)
        ctx = RankContext(comm=comm, config=config, model=model, data=dataset, params0=params0,
                          multipliers=multipliers, synchronous=synchronous, shared=shared, t0=float(start[0]))
        bar = None
        if show and comm.rank == 0:
            bar = tqdm(total=config.steps, desc=f"{config.mode} steps (rank 0)", unit="step", leave=False,
                       file=sys.stderr)
            ctx.log.progress = bar.update
        stopped = None
        try:
            loop(ctx)
        except RankStopped as exc:
            stopped = str(exc)
        finally:
            if bar is not None:
                bar.close()
        final = ctx.final_params
        log = ctx.log
        evals = evaluate(model, dataset, ctx.snapshots)  # after the loop: evaluation costs the run nothing
        return dict(entry=run_record.rank_entry(ctx.rank, log.step_s, log.compute_s, log.comm_s, log.loss,
                                                log.t_end_s),
                    evals=evals, stopped=stopped, mode_stats=ctx.mode_stats, threads_at_start=threads,
                    allreduce_large_bytes=int(comm.allreduce_large_bytes),
                    digest=hashlib.sha256(final.tobytes()).hexdigest() if final is not None else None)


def _dead(rank: int, message: str) -> dict:
    """The outcome of a rank that died (a signal, or an exit without a report) in an async or hybrid run:
    its steps died with it, so none are recorded; `failures` says how it ended."""
    return dict(entry=run_record.rank_entry(rank, [], [], [], [], []), evals=[], stopped=f"died: {message}",
                mode_stats=None, threads_at_start=None, allreduce_large_bytes=None, digest=None)


def evaluate(model, dataset, snapshots) -> list[dict]:
    """Snapshots (t_s, step, params) on the test set: [{t_s, step, loss, accuracy}]."""
    evals = []
    for t_s, step, params in snapshots:
        loss, accuracy = model.evaluate(params, dataset.x_test, dataset.y_test)
        evals.append({"t_s": t_s, "step": step, "loss": loss, "accuracy": accuracy})
    return evals


def build_record(config, mode, model, outcomes, where: str) -> dict:
    """The train.json record of a finished run (`run_record`'s schema, plus failures, final_param_sha256,
    mode_stats (per rank: what the loop left in ctx.mode_stats, or None), threads_at_start (per rank: its
    process's threads at the common start, 1 when no BLAS worker runs beside it; None: died), des_mode and cores; `train` adds
    host_roundtrip_ns (the placement probes before and after, ns or None), warnings, pinned_cores, the pool's
    slot_bytes and allreduce_large_bytes (the allreduce's algorithm threshold the ranks used))."""
    evals = sorted((e for o in outcomes for e in o["evals"]), key=lambda e: (e["t_s"], e["step"]))
    ranks = [o["entry"] for o in outcomes]
    final = max((e for e in evals), key=lambda e: (e["step"], e["t_s"]), default=None)
    versions = {k: v for k, v in results.provenance(config.seed).items() if k != "seed"}
    versions["threadpoolctl"] = _version("threadpoolctl")
    return {
        "mode": config.mode, "np": config.nranks, "model": config.model, "dataset": config.dataset,
        "steps": config.steps, "batch_size": config.batch_size, "lr": float(config.lr), "seed": config.seed,
        "coherence": str(config.coherence.value), "pool": config.pool,
        "param_count": model.size, "param_bytes": model.nbytes,
        "overlap": bool(config.overlap) if mode.name == "ddp" else None,
        "buckets": (config.buckets or DEFAULT_BUCKETS) if mode.name == "ddp" else None,
        "lockstep": bool(mode.always_lockstep or config.lockstep),
        "factors": [float(f) for f in config.factors], "gpus": list(config.gpus),
        "stragglers": config.stragglers, "placement": where,
        "ranks": ranks, "eval": evals,
        "throughput_samples_per_s": run_record.throughput_samples_per_s(ranks, config.batch_size),
        "step_throughput_samples_per_s": run_record.step_throughput(ranks, config.batch_size),
        "time_to_accuracy_s": run_record.time_to_accuracy(evals, config.targets),
        "time_to_accuracy_window_s": run_record.time_to_accuracy_window(evals, config.targets),
        "final_accuracy": final["accuracy"] if final else 0.0,
        "failed_ranks": [i for i, o in enumerate(outcomes) if o["stopped"]],
        "failures": {str(i): o["stopped"] for i, o in enumerate(outcomes) if o["stopped"]},
        "final_param_sha256": [o["digest"] for o in outcomes],
        "mode_stats": [o["mode_stats"] for o in outcomes],
        "threads_at_start": [o["threads_at_start"] for o in outcomes],
        "des_mode": mode.des_mode, "cores": len(os.sched_getaffinity(0)),
        "versions": versions,
    }


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
