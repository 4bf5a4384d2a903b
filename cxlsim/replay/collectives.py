"""How the replay runs each traced collective: through cxlsim's collective algorithms and selectors.

`plan(call, p, library, ctx)` turns one traced collective into a `Plan`: the
cxlsim collective and algorithm (what `--selector mpich|ompi` would pick, via
`cxlsim.models.collectives.selectors`), its size in the runner's convention,
and a note. `Plan.run(ep, tag)` is the rank's generator.

Traced kinds and what runs them (every algorithm lives in
`cxlsim.models.collectives`; the registry's records run through `runner.call`):
- allreduce, allgather, gather, bcast (broadcast), reduce (MPICH's binomial,
  or a named substitute), reducescatter (reduce_scatter; uneven counts run as
  equal segments of the total, noted), barrier (MPICH's and Open MPI's choice:
  the dissemination barrier, or a named substitute): the registry's algorithms
  as the selector picks them;
- alltoall: the registry's pairwise exchange (MPICH's long-message algorithm)
  at every size (noted);
- scatter: the registry's binomial scatter (`rooted.SCATTER_BINOMIAL`, MPICH's).

On a CXL pool fabric, allgather runs the pool allgather (`cxl_pool`), barrier
its flags alone, and the other collectives their network algorithm over the
pool's send/recv protocol (`cxlsim.replay.pool_messages`).

Closed forms: the registry records' `cost`; `reduce_binomial_ns` and
`alltoall_pairwise_ns` name those of reduce and of alltoall as the replay runs them.

A reduction's operator flops (the trace's FLOPS field, 0 in SimGrid's own
traces) run as compute after the collective, as SimGrid replays them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from cxlsim.errors import InputError
from cxlsim.models.collectives import reduce, runner, selectors
from cxlsim.models.collectives.alltoall import pairwise_cost

__all__ = ["Plan", "plan", "reduce_binomial_ns", "alltoall_pairwise_ns"]

_REGISTRY = {"allreduce": "allreduce", "allgather": "allgather", "gather": "gather", "bcast": "broadcast",
             "reduce": "reduce", "reducescatter": "reduce_scatter", "barrier": "barrier"}
"""Traced kind -> cxlsim collective, for the kinds the selector picks a registry algorithm for."""


def reduce_binomial_ns(cm, p: int, s: int) -> float:
    """Closed form of the replay's reduce on one rank per host, all starting together (ns)."""
    return reduce.binomial_cost(cm, p, s)


def alltoall_pairwise_ns(cm, p: int, m: int) -> float:
    """Closed form of the replay's alltoall (the registry's pairwise) on one rank per host (ns)."""
    return pairwise_cost(cm, p, m)


@dataclass(frozen=True)
class Plan:
    """One traced collective as the replay runs it."""

    kind: str
    """The traced kind (barrier, bcast, ...)."""
    collective: str
    """The cxlsim collective ('allgather', ...)."""
    algorithm: str
    size_bytes: int
    ctx: runner.Context
    note: str = ""
    on_pool: bool = False
    """Runs on the pool's own operations (a pool algorithm), not on messages."""

    def run(self, ep, tag: int):
        """Generator: rank `ep.rank`'s part; `tag` keeps it apart from collectives in flight."""
        # Labels the algorithms carry (the replay does not check them; the collectives' own tests do):
        # reductions get a one-element zero vector, which costs nothing to add.
        reduction = self.collective in ("allreduce", "reduce", "reduce_scatter")
        data = (0,) if reduction else runner.initial(self.collective, ep.rank, ep.size, self.ctx)
        # a pool algorithm talks through pool memory, not tagged messages: it runs on the plain endpoint
        return (yield from runner.call(ep, self.collective, self.algorithm, self.size_bytes, data, self.ctx,
                                       0 if self.on_pool else tag))


def plan(call, p: int, library: str, ctx: runner.Context, pool: bool = False) -> Plan:
    """The Plan of traced collective `call` on `p` ranks with the `library` selector ('mpich' or 'ompi').

    On a pool fabric (`pool`), allgather runs the pool allgather (`cxl_pool`) and barrier its flags
    alone (a 0-byte `cxl_pool`); every other collective runs its network algorithm over the pool's
    send/recv protocol (cxlsim.replay.pool_messages), and the note says so.
    """
    kind = call.kind
    ctx = replace(ctx, root=call.root, elements=1)
    if pool and kind in ("allgather", "barrier"):
        size = call.size_bytes if kind == "allgather" else 0
        note = "barrier: the pool allgather's flags (0 B)" if kind == "barrier" else ""
        return Plan(kind, "allgather", "cxl_pool", size, ctx, note, on_pool=True)
    over = f"{kind}: a network algorithm over the pool's send/recv protocol" if pool else ""
    if kind == "alltoall":
        return Plan(kind, "alltoall", "pairwise", call.size_bytes, ctx,
                    "; ".join(filter(None, ["alltoall: pairwise exchange at every size (MPICH's long-message "
                                            "algorithm)", over])))
    if kind == "scatter":
        return Plan(kind, "scatter", "binomial", call.size_bytes, ctx, over)
    if kind not in _REGISTRY:
        raise InputError(f"{call.where}: {kind} is not a collective the replay runs")
    collective = _REGISTRY[kind]
    name, note = selectors.select(library, collective, p, 0 if kind == "barrier" else call.size_bytes)
    notes = [note] if note else []
    if kind == "reducescatter" and len(set(call.counts)) > 1:
        notes.append(f"reducescatter with uneven counts ({call.where}) runs as equal segments of the total")
    if over:
        notes.append(over)
    return Plan(kind, collective, name, 0 if kind == "barrier" else call.size_bytes, ctx, "; ".join(notes))
