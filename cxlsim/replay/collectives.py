"""How the replay runs each traced collective: through cxlsim's collective algorithms and selectors.

`plan(call, p, library, ctx)` turns one traced collective into a `Plan`: the
cxlsim collective and algorithm (what `--selector mpich|ompi` would pick, via
`cxlsim.models.collectives.selectors`), its size in the runner's convention,
and a note. `Plan.run(ep, tag)` is the rank's generator.

Traced kinds and what runs them:
- allreduce, allgather, gather, bcast (broadcast), reducescatter
  (reduce_scatter ring; uneven counts run as equal segments of the total,
  noted): the registry's algorithms as the selector picks them;
- barrier: MPICH's dissemination barrier, which sends the message pattern of
  Bruck's allgather with 0-byte blocks, so it runs as `allgather bruck` of 0 B;
- reduce: a binomial-tree reduction (MPICH `reduce_intra_binomial`), here;
- alltoall: pairwise exchange (MPICH's long-message algorithm: step i sends
  to r+i and receives from r-i), here, for every size (noted);
- scatter: the binomial scatter (`cxlsim.models.collectives.trees`).

On a CXL pool fabric, allgather runs the pool allgather (`cxl_pool`), barrier
its flags alone, and the other collectives their network algorithm over the
pool's send/recv protocol (`cxlsim.replay.pool_messages`).

The closed forms of the three algorithms defined here (`reduce_binomial_ns`,
`alltoall_pairwise_ns`) follow the network cost model's LogGP rules
(`cxlsim.models.collectives.analytic.CostModel`), as the registry's do.

A reduction's operator flops (the trace's FLOPS field, 0 in SimGrid's own
traces) run as compute after the collective, as SimGrid replays them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from cxlsim.errors import InputError
from cxlsim.models.collectives import runner, selectors
from cxlsim.models.collectives.base import Group
from cxlsim.models.collectives.trees import binomial_scatter

__all__ = ["Plan", "plan", "reduce_binomial", "alltoall_pairwise", "reduce_binomial_ns", "alltoall_pairwise_ns"]

_REGISTRY = {"allreduce": "allreduce", "allgather": "allgather", "gather": "gather", "bcast": "broadcast",
             "reducescatter": "reduce_scatter"}
"""Traced kind -> cxlsim collective, for the kinds the registry's algorithms run."""


def reduce_binomial(g, s, vec, root=0):
    """Binomial-tree reduction of an s-byte vector to `root`: a rank receives and reduces its
    children's vectors (smallest subtree first), then sends the sum to its parent. The root returns
    the reduced vector, the others None."""
    p = g.size
    rel = (g.rank - root) % p
    mask = 1
    while mask < p:
        if rel & mask:
            yield g.send((rel - mask + root) % p, s, vec)
            return None
        child = rel + mask
        if child < p:
            got = yield g.recv((child + root) % p)
            yield g.reduce(s)
            vec = tuple(a + b for a, b in zip(vec, got))
        mask <<= 1
    return vec


def alltoall_pairwise(g, m, mine):
    """P-1 steps; at step i rank r sends its m-byte block for r+i and receives r-i's block for r.
    Returns the P received labels in rank order (its own block at its own index)."""
    p, r = g.size, g.rank
    got = [None] * p
    got[r] = (mine, r)
    for i in range(1, p):
        got[(r - i) % p] = yield from g.sendrecv((r + i) % p, m, (mine, (r + i) % p), (r - i) % p)
    return got


def reduce_binomial_ns(cm, p: int, s: int) -> float:
    """Closed form of `reduce_binomial` on one rank per host, all starting together (ns). A rank takes
    its children's vectors smallest subtree first, each once the child has sent it:
    t = max(t, sent(child) + arrive(s)) + receive(s) + R(s); it sends at sent(rank) = t and is done
    busy(s) later (the root at t)."""
    sent, end = {}, 0.0
    for rel in reversed(range(p)):
        t = 0.0
        mask = 1
        while mask < p and not rel & mask:
            if rel + mask < p:
                t = max(t, sent[rel + mask] + cm.arrive(s, False)) + cm.receive(s, False) + cm.R(s)
            mask <<= 1
        sent[rel] = t
        end = max(end, t if rel == 0 else t + cm.busy(s, False))
    return end


def alltoall_pairwise_ns(cm, p: int, m: int) -> float:
    """Closed form of `alltoall_pairwise` on one rank per host, all starting together (ns): P-1
    exchange steps, each T(m), as the ring's LogGP rule gives on a non-blocking fabric."""
    return (p - 1) * cm.T(m)


@dataclass(frozen=True)
class Plan:
    """One traced collective as the replay runs it."""

    kind: str
    """The traced kind (barrier, bcast, ...)."""
    collective: str
    """The cxlsim collective ('allgather', ...) or the local algorithm ('reduce', 'alltoall', 'scatter')."""
    algorithm: str
    size_bytes: int
    ctx: runner.Context
    note: str = ""
    on_pool: bool = False
    """Runs on the pool's own operations (a pool algorithm), not on messages."""

    def run(self, ep, tag: int):
        """Generator: rank `ep.rank`'s part; `tag` keeps it apart from collectives in flight."""
        if self.collective in ("reduce", "alltoall", "scatter"):
            g = Group(ep, range(ep.size), tag)
            if self.collective == "reduce":
                return (yield from reduce_binomial(g, self.size_bytes, (0,), self.ctx.root))
            if self.collective == "alltoall":
                return (yield from alltoall_pairwise(g, self.size_bytes, ep.rank))
            segments = tuple(range(ep.size)) if ep.rank == self.ctx.root else None
            return (yield from binomial_scatter(g, self.size_bytes, segments, self.ctx.root))
        # Labels the algorithms carry (the replay does not check them; the collectives' own tests do):
        # reductions get a one-element zero vector, which costs nothing to add.
        reduction = self.collective in ("allreduce", "reduce_scatter")
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
    if kind == "barrier":
        return Plan(kind, "allgather", "bruck", 0, ctx,
                    "; ".join(filter(None, ["barrier: dissemination (Bruck's pattern, 0-byte blocks)", over])))
    if kind == "reduce":
        return Plan(kind, "reduce", "binomial", call.size_bytes, ctx, over)
    if kind == "alltoall":
        return Plan(kind, "alltoall", "pairwise", call.size_bytes, ctx,
                    "; ".join(filter(None, ["alltoall: pairwise exchange at every size (MPICH's long-message "
                                            "algorithm)", over])))
    if kind == "scatter":
        return Plan(kind, "scatter", "binomial", call.size_bytes, ctx, over)
    if kind not in _REGISTRY:
        raise InputError(f"{call.where}: {kind} is not a collective the replay runs")
    collective = _REGISTRY[kind]
    name, note = selectors.select(library, collective, p, call.size_bytes)
    notes = [note] if note else []
    if kind == "reducescatter" and len(set(call.counts)) > 1:
        notes.append(f"reducescatter with uneven counts ({call.where}) runs as equal segments of the total")
    if over:
        notes.append(over)
    return Plan(kind, collective, name, call.size_bytes, ctx, "; ".join(notes))
