"""Rooted collectives: broadcast and gather on binomial trees (MPICH's short-message defaults).

`binomial_bcast(g, size_bytes, data, root)`: rank r receives from its parent
(r with its lowest set bit, relative to the root, cleared), then sends to its
children, largest subtree first, each send blocking until local completion.
`binomial_gather(g, m, block, root)`: the same tree upside down; a rank
forwards its whole subtree's blocks (min(2^k, P - child) blocks) to its parent.
Sources: MPICH `bcast_intra_binomial.c`, `gather_intra_binomial.c`.
"""
from __future__ import annotations

from cxlsim.models.collectives.base import register

__all__ = ["binomial_bcast", "binomial_gather"]


def binomial_gather(g, m, mine, root=0, tag=0):
    """Binomial-tree gather of one m-byte block per rank; the root returns all blocks, others None."""
    p = g.size
    rel = (g.rank - root) % p
    blocks = [mine]
    mask = 1
    while mask < p:
        if rel & mask:
            yield g.send((rel - mask + root) % p, len(blocks) * m, tuple(blocks), tag)
            return None
        src = rel + mask
        if src < p:
            blocks.extend((yield g.recv((src + root) % p, tag)))
        mask <<= 1
    return [blocks[(i - root) % p] for i in range(p)]


def binomial_bcast(g, size_bytes, data, root=0, tag=0):
    """Binomial-tree broadcast of `size_bytes` from `root`; every rank returns the data."""
    p = g.size
    rel = (g.rank - root) % p
    mask = 1
    while mask < p:
        if rel & mask:
            data = yield g.recv((rel - mask + root) % p, tag)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if rel + mask < p:
            yield g.send((rel + mask + root) % p, size_bytes, data, tag)
        mask >>= 1
    return data


@register("broadcast", "binomial", source="MPICH bcast_intra_binomial; Open MPI binomial (id 5)")
def broadcast_binomial(g, size_bytes, data, ctx):
    return (yield from binomial_bcast(g, size_bytes, data, ctx.root))


@register("gather", "binomial", source="MPICH gather_intra_binomial; Open MPI binomial (id 2)")
def gather_binomial(g, m, block, ctx):
    return (yield from binomial_gather(g, m, block, ctx.root))
