"""Rooted reduction on a network: MPICH's binomial-tree reduce, with its closed form and registry record.

`binomial(g, s, vec, root)`: relative to the root, a rank receives and
reduces its children's s-byte vectors, smallest subtree first, then sends the
sum to its parent (MPICH `reduce_intra_binomial`); the root returns the
reduced vector, the others None.

Closed form (one rank per host, all starting together, ns): a rank takes its
children's vectors smallest subtree first, each once it has landed,
    t = max(t, landed(child)) + receive(s) + R(s);
it sends at sent(rank) = t and is done busy(s) later (the root at t).
landed(child) is sent(child) + arrive(s) when the child's message has the
parent's downlink to itself. At non-power-of-two P some children send at the
same moment (P = 3: ranks 1 and 2 at once), and their chunks share that
link: `shared_downlink.fan_in` walks them (exact on one switch). Every rank
on one host: shared-memory messages, nothing shared.
"""
from __future__ import annotations

from cxlsim.models.collectives.base import NO_CONTEXT, Algorithm
from cxlsim.models.collectives.shared_downlink import fan_in

__all__ = ["binomial", "binomial_run", "binomial_cost", "BINOMIAL"]


def binomial(g, s, vec, root=0):
    """Binomial-tree reduction of an s-byte vector to `root` (see the module docstring)."""
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


def binomial_run(g, s, vec, ctx=NO_CONTEXT):
    """The record's per-rank program: `binomial` to `ctx.root`."""
    return (yield from binomial(g, s, vec, ctx.root))


def _children(rel: int, p: int) -> list[int]:
    """A rank's children in root-relative ranks, smallest subtree first (the order it receives them)."""
    kids, mask = [], 1
    while mask < p and not rel & mask:
        if rel + mask < p:
            kids.append(rel + mask)
        mask <<= 1
    return kids


def binomial_cost(cm, p: int, s: int, ctx=NO_CONTEXT) -> float:
    """Closed form of `binomial` on a network `CostModel` (see the module docstring), ns."""
    root = ctx.root if ctx is not None else 0
    return fan_in(cm, p, root, lambda rel: _children(rel, p), lambda rank: s, lambda k: cm.R(s))


BINOMIAL = Algorithm("reduce", "binomial", binomial_run, binomial_cost,
                     source="MPICH reduce_intra_binomial (short messages, or a user-defined op)")
