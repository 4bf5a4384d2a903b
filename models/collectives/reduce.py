"""Rooted reduction on a network: MPICH's binomial-tree reduce, with its closed form.

`binomial(g, s, vec, root)`: relative to the root, a rank receives and
reduces its children's s-byte vectors, smallest subtree first, then sends the
sum to its parent (MPICH `reduce_intra_binomial`); the root returns the
reduced vector, the others None.

Closed form (one rank per host, all starting together, ns): a rank takes its
children's vectors smallest subtree first, each once the child has sent it,
    t = max(t, sent(child) + arrive(s)) + receive(s) + R(s);
it sends at sent(rank) = t and is done busy(s) later (the root at t).

Reduce is not one of `base.COLLECTIVES`, so it has no `Algorithm` record: the
trace replay calls it directly.
"""
from __future__ import annotations

__all__ = ["binomial", "binomial_cost"]


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


def binomial_cost(cm, p: int, s: int) -> float:
    """Closed form of `binomial` on a network `CostModel` (see the module docstring), ns."""
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
