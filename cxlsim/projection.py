"""A collective projected on an elaborated fabric: one latency per message size, by the DES or the closed forms.

`run_network(scenario, setup)` takes a validated scenario and its elaborated network
(`cxlsim.fabric.network_setup.NetworkSetup`). Per size it picks the algorithm
(`workload.algorithm`, or the MPICH/Open MPI selector's choice when it is 'auto') and
either evaluates its closed form (`engine: analytic`, on the network's LogGP figures)
or simulates it on a freshly built network (`engine: des`), checking every rank's
payload labels. A row says which algorithm ran, and why when it is not the one asked
for (the selector's reason, a fallback, the leaders' algorithm of a hierarchical one).

`run_pool(scenario, setup)` does the same on a CXL pool (`cxlsim.fabric.cxl_setup.CXLSetup`):
its pool algorithms only (every collective has one; allreduce two), one rank per host, each
record's closed form evaluated on the pool transport's figures, with its caveat in the row's
note where the form is not exact. Units: ns inside, us in the rows.
"""
from __future__ import annotations

import time

from cxlsim.errors import InputError, RunError
from cxlsim.fabric import stats as fabric_stats
from cxlsim.models.collectives import analytic, runner
from cxlsim.models.collectives import pool_collective_forms as pool_forms
from cxlsim.models.collectives.registry import algorithms, check_transport, lookup, names
from cxlsim.models.collectives.selectors import select

__all__ = ["ROOTED", "context", "run_network", "run_pool"]

ROOTED = ("broadcast", "gather", "reduce", "scatter")
"""The collectives that take `workload.root`."""


def context(scenario, placement) -> runner.Context:
    """The call context of the scenario's workload on `placement`: host groups, leaders' algorithm, root."""
    wl = scenario.workload
    if wl.root != 0 and wl.collective not in ROOTED:
        raise InputError(f"workload.root: applies to the rooted collectives ({', '.join(ROOTED)}), not "
                         f"{wl.collective}; remove it")
    if wl.inter_algorithm != "ring" and wl.algorithm != "hierarchical":
        raise InputError(f"workload.inter_algorithm: applies to algorithm hierarchical (its leaders' allgather), "
                         f"not {wl.algorithm}; remove it")
    if wl.root >= placement.size:
        raise InputError(f"workload.root: expected a rank below P={placement.size}, got {wl.root}")
    if wl.inter_algorithm == "hierarchical":
        raise InputError("workload.inter_algorithm: expected a flat allgather algorithm, got 'hierarchical'")
    return runner.Context(groups=tuple(map(tuple, placement.groups())), inter=wl.inter_algorithm, root=wl.root)


def run_network(scenario, setup, bar=None, stats: list | None = None) -> list[dict]:
    """One row per size (size_bytes, latency_us, algorithm, note, engine, events, wall_s) on a network.

    stats: a list to append (size_bytes, `cxlsim.fabric.stats.RunStats`) to for every DES run."""
    wl = scenario.workload
    ctx = context(scenario, setup.placement)
    p = setup.placement.size
    cost_model = None
    rows = []
    for size in wl.sizes_bytes:
        name, note = (wl.algorithm, None)
        if name == "auto":
            name, note = select(wl.selector, wl.collective, p, size)
        check_transport(lookup(wl.collective, name, p)[0], "network")
        start = time.perf_counter()
        if scenario.engine == "analytic":
            if cost_model is None:
                cost_model = analytic.CostModel.from_network(setup.network(), wl.chunk_bytes)
            latency_ns, used, fallback = analytic.cost(wl.collective, name, p, size, cost_model, ctx)
            events = 0
        else:
            transport = setup.new_transport(wl.chunk_bytes)
            outcome = runner.run(transport, wl.collective, name, size, ctx, wl.iterations, wl.warmup)
            if stats is not None:
                stats.append((size, fabric_stats.collect(transport)))
            try:
                runner.verify(wl.collective, p, ctx, outcome.results)
            except AssertionError as exc:
                raise RunError(f"payload check failed for {outcome.algorithm} at {size} B: {exc}") from None
            latency_ns, used, fallback, events = outcome.latency_ns, outcome.algorithm, outcome.note, outcome.events
        inter_note = None
        if used == "hierarchical":  # the leaders' algorithm may fall back too
            _, inter_note = lookup("allgather", ctx.inter, len(ctx.groups))
        notes = "; ".join(n for n in (note, fallback, inter_note and f"leaders: {inter_note}") if n)
        rows.append({"size_bytes": size, "latency_us": latency_ns / 1e3, "algorithm": used,
                     "note": notes, "engine": scenario.engine, "events": events,
                     "wall_s": time.perf_counter() - start})
        if bar:
            bar.update(1)
    return rows


ZERO_COPY_NOTE = ("zero-copy: the call alone; placing the data in the writer's pool slot before it and loading "
                  "it in place after it are the caller's work, not in this latency (the emulator's zero-copy "
                  "benchmark times both)")


def _zero_copy_note(algo) -> str | None:
    """What a zero-copy pool record's latency leaves to the caller, said beside every row."""
    return ZERO_COPY_NOTE if algo.name.endswith("zero_copy") else None


def run_pool(scenario, setup, bar=None, stats: list | None = None) -> list[dict]:
    """One row per size (size_bytes, latency_us, algorithm, note, engine, events, wall_s) on a CXL pool.

    The pool algorithms only, one rank per host: 'auto' is `pool_collective_forms.select_pool`'s choice
    (`cxl_pool`; for allreduce the cheaper of `cxl_pool` and `cxl_pool_large` by their closed forms).
    The DES runs on a fresh `CXLPoolTransport` per size; the analytic engine evaluates the record's
    closed form on that transport's figures, and the row's note carries the form's caveat where it is
    not exact (`form_note`). stats: as for `run_network`.
    """
    wl = scenario.workload
    p = scenario.fabric.nodes
    if wl.root != 0 and wl.collective not in ROOTED:
        raise InputError(f"workload.root: applies to the rooted collectives ({', '.join(ROOTED)}), not "
                         f"{wl.collective}; remove it")
    if wl.root >= p:
        raise InputError(f"workload.root: expected a rank below P={p}, got {wl.root}")
    pool_names = names(wl.collective, "pool")
    if not pool_names:
        with_pool = sorted({c for c, _ in algorithms() if names(c, "pool")})
        raise InputError(f"workload.collective: a CXL pool has no {wl.collective} algorithm; it runs "
                         f"{', '.join(with_pool)}")
    ctx = runner.Context(root=wl.root)
    figures = setup.new_transport(p).figures()
    rows = []
    for size in wl.sizes_bytes:
        start = time.perf_counter()
        name, why = (wl.algorithm, None)
        if name == "auto":
            name, why = pool_forms.select_pool(wl.collective, figures, p, size)
        algo, fallback = lookup(wl.collective, name, p)
        check_transport(algo, "pool")
        caveat = None
        if scenario.engine == "analytic":
            latency_ns = analytic.closed_form(algo, figures, p, size, ctx)
            caveat = pool_forms.form_note(algo, figures, p, size)
            events = 0
        else:
            transport = setup.new_transport(p)
            outcome = runner.run_algorithm(transport, algo, size, ctx, iterations=wl.iterations, warmup=wl.warmup)
            if stats is not None:
                stats.append((size, fabric_stats.collect(transport)))
            try:
                runner.verify(wl.collective, p, ctx, outcome.results)
            except AssertionError as exc:
                raise RunError(f"payload check failed for {outcome.algorithm} at {size} B: {exc}") from None
            latency_ns, events = outcome.latency_ns, outcome.events
        notes = "; ".join(n for n in (why, fallback, caveat, _zero_copy_note(algo)) if n)
        rows.append({"size_bytes": size, "latency_us": latency_ns / 1e3, "algorithm": algo.name,
                     "note": notes, "engine": scenario.engine, "events": events,
                     "wall_s": time.perf_counter() - start})
        if bar:
            bar.update(1)
    return rows
