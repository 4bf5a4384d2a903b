"""The DES engine: run one collective call on a transport and check every rank's result.

`run(transport, collective, name, size_bytes, ctx)` looks the algorithm's
record up (`registry.lookup`) and hands it to `run_algorithm`, which refuses it
on the wrong kind of transport, starts one process per rank running the
record's `run`, runs the simulation to the end and returns an `Outcome`: the
latency (ns, from the common start to the last rank's completion), each rank's
result and a note when the requested algorithm fell back to another. `verify`
raises AssertionError if any rank's labels are wrong (a zero-byte call that
returned at once on every rank, `base.RETURNED_AT_ONCE`, has none).

Inside a longer workload (e.g. a training step), a rank's own process calls
`result = yield from call(ep, "allreduce", "ring", size, data, ctx, tag=k)`;
collectives in flight at the same time need different `tag`s.

Size convention (as in OSU): for allgather and gather `size_bytes` is the
block per rank, for alltoall the block per destination, for scatter the
segment each rank receives; for allreduce, reduce_scatter, reduce and broadcast
it is the whole vector per rank (reduce: its root ends with the sum, the others
with None); a barrier moves no data. Labels: an alltoall
rank r sends block (r, d) to rank d; a scatter root sends segment
("data-from", root, r) to rank r; a barrier rank ends with the ranks it saw
arrive.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cxlsim.errors import InputError, RunError
from cxlsim.models.collectives.base import (NETWORK, NO_CONTEXT, RETURNED_AT_ONCE, Algorithm, Context, Group,
                                            reduced_vector, split, vector_of)
from cxlsim.models.collectives.registry import check_transport, lookup

__all__ = ["Context", "Outcome", "run", "run_algorithm", "call", "initial", "verify"]


@dataclass
class Outcome:
    latency_ns: float
    algorithm: str
    note: str | None
    results: dict = field(repr=False)
    events: int = 0


def _elements(ctx, p):
    return ctx.elements or max(p, 4)


def initial(collective: str, rank: int, p: int, ctx: Context):
    """Rank `rank`'s input label."""
    if collective in ("allgather", "gather", "barrier"):
        return rank
    if collective == "alltoall":
        return [(rank, d) for d in range(p)]
    if collective == "broadcast":
        return ("data-from", ctx.root) if rank == ctx.root else None
    if collective == "scatter":
        return tuple(("data-from", ctx.root, r) for r in range(p)) if rank == ctx.root else None
    return vector_of(rank, _elements(ctx, p))


def verify(collective: str, p: int, ctx: Context, results: dict) -> None:
    """Raise AssertionError naming the first rank whose result is wrong. A call that returned at once on
    every rank (`base.RETURNED_AT_ONCE`, zero-byte calls only: `run_algorithm` checks) holds no data: right."""
    if p and all(results.get(r) is RETURNED_AT_ONCE for r in range(p)):
        return
    if collective in ("allgather", "barrier"):
        expect = {r: list(range(p)) for r in range(p)}
    elif collective == "alltoall":
        expect = {r: [(s, r) for s in range(p)] for r in range(p)}
    elif collective == "gather":
        expect = {r: (list(range(p)) if r == ctx.root else None) for r in range(p)}
    elif collective == "broadcast":
        expect = {r: ("data-from", ctx.root) for r in range(p)}
    elif collective == "scatter":
        expect = {r: ("data-from", ctx.root, r) for r in range(p)}
    else:
        full = reduced_vector(p, _elements(ctx, p))
        if collective == "allreduce":
            expect = {r: full for r in range(p)}
        elif collective == "reduce":
            expect = {r: (full if r == ctx.root else None) for r in range(p)}
        else:
            segments = split(full, p)
            expect = {r: segments[r] for r in range(p)}
    for r in range(p):
        if results[r] != expect[r]:
            raise AssertionError(f"{collective} P={p}: rank {r} ended with {results[r]!r}, expected {expect[r]!r}")


def call(ep, collective: str, name: str, size_bytes: int, data, ctx: Context = NO_CONTEXT, tag: int = 0):
    """Generator: one rank's part of a collective inside its own process; returns its result.

    `tag` (a multiple of 10000 keeps clear of the tags the algorithms use inside)
    separates collectives that overlap in time.
    """
    algo, _ = lookup(collective, name, ep.size)
    check_transport(algo, getattr(getattr(ep, "transport", None), "kind", NETWORK))
    group = Group(ep, range(ep.size), tag) if tag else ep
    return (yield from algo.run(group, size_bytes, data, ctx))


def run(transport, collective: str, name: str, size_bytes: int, ctx: Context = NO_CONTEXT,
        iterations: int = 1, warmup: int = 0) -> Outcome:
    """Simulate `collective` with algorithm `name` on every rank of `transport` (`run_algorithm` on the
    record `lookup` finds for the transport's rank count, fallbacks noted)."""
    algo, note = lookup(collective, name, transport.size)
    outcome = run_algorithm(transport, algo, size_bytes, ctx, iterations, warmup)
    outcome.note = note
    return outcome


def run_algorithm(transport, algo: Algorithm, size_bytes: int, ctx: Context = NO_CONTEXT,
                  iterations: int = 1, warmup: int = 0) -> Outcome:
    """Simulate the algorithm record `algo` on every rank of `transport`.

    Each rank makes `warmup` + `iterations` back-to-back calls, as an OSU loop
    does (no barrier between calls). The latency is the time per timed call:
    from the end of the warm-up (the last rank's end of its last warm-up call,
    or the common start) to the last rank's end of its last call, divided by
    `iterations`. The defaults give one call on a fresh fabric. The results
    are those of the last call. InputError if the record needs another kind of
    transport or cannot run on this many ranks.
    """
    for key, value, low in (("iterations", iterations, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(f"workload.{key}: expected an integer >= {low}, got {value!r}")
    p = transport.size
    reason = algo.check(p) if algo.check else None
    if reason is not None:
        raise InputError(f"workload.algorithm: {algo.name} cannot run on P={p}: {reason}")
    check_transport(algo, transport.kind)
    collective = algo.collective
    env = transport.env
    start, events = env.now, getattr(env, "events", 0)
    calls = warmup + iterations
    finish = [dict() for _ in range(calls)]

    def rank_process(rank):
        ep = transport.endpoint(rank)
        for i in range(calls):
            result = yield from algo.run(ep, size_bytes, initial(collective, rank, p, ctx), ctx)
            finish[i][rank] = env.now
        return result

    results = transport.run({r: rank_process(r) for r in range(p)})
    if size_bytes and any(v is RETURNED_AT_ONCE for v in results.values()):
        raise RunError(f"{collective} {algo.name}: a call of {size_bytes} B returned at once, as only a "
                       "zero-byte call may")
    begin = max(finish[warmup - 1].values()) if warmup else start
    return Outcome((max(finish[-1].values()) - begin) / iterations, algo.name, None, results,
                   getattr(env, "events", 0) - events)
