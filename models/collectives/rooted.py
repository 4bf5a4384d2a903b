"""Rooted collectives: broadcast and gather on binomial trees (`trees`), and MPICH's long-message broadcast.

`scatter_ring_allgather` (MPICH's broadcast for long messages): the root's
data is cut into P segments of ceil(s/P) bytes, scattered down the binomial
tree (a child receives its whole subtree's segments), then a ring allgather
among the ranks in root-relative order completes every copy.
Sources: MPICH `bcast_intra_binomial.c`, `gather_intra_binomial.c`,
`bcast_intra_scatter_ring_allgather.c`, `..._scatter_recursive_doubling_allgather.c`
(van de Geijn et al.; the latter, for power-of-two P, swaps the ring for
recursive doubling).
"""
from __future__ import annotations

from cxlsim.models.collectives import network_forms as forms
from cxlsim.models.collectives.allgather import recursive_doubling, ring
from cxlsim.models.collectives.base import Algorithm, Group, is_pow2
from cxlsim.models.collectives.trees import binomial_bcast, binomial_gather, binomial_scatter

__all__ = ["broadcast_binomial", "gather_binomial", "scatter_binomial", "SCATTER_BINOMIAL", "scatter_ring_allgather", "scatter_recursive_doubling_allgather",
           "BROADCAST_BINOMIAL", "GATHER_BINOMIAL", "SCATTER_RING_ALLGATHER", "SCATTER_RECURSIVE_DOUBLING_ALLGATHER"]


def broadcast_binomial(g, size_bytes, data, ctx):
    return (yield from binomial_bcast(g, size_bytes, data, ctx.root))


def gather_binomial(g, m, block, ctx):
    return (yield from binomial_gather(g, m, block, ctx.root))


def _scatter_allgather(g, size_bytes, data, ctx, allgather):
    p, root = g.size, ctx.root
    seg_bytes = -(-size_bytes // p)
    segments = tuple((data, i) for i in range(p)) if g.rank == root else None
    mine = yield from binomial_scatter(g, seg_bytes, segments, root)
    relative = Group(g, [(root + i) % p for i in range(p)], tag=3000)
    pieces = yield from allgather(relative, seg_bytes, mine)
    labels = {label for label, _ in pieces}
    if [i for _, i in pieces] != list(range(p)) or len(labels) != 1:
        raise AssertionError(f"broadcast: rank {g.rank} reassembled {pieces!r}")
    return labels.pop()


def scatter_ring_allgather(g, size_bytes, data, ctx):
    """Binomial scatter of ceil(s/P)-byte segments, then a ring allgather in root-relative order."""
    return (yield from _scatter_allgather(g, size_bytes, data, ctx, ring))


def scatter_recursive_doubling_allgather(g, size_bytes, data, ctx):
    """Binomial scatter of ceil(s/P)-byte segments, then a recursive-doubling allgather."""
    return (yield from _scatter_allgather(g, size_bytes, data, ctx, recursive_doubling))


def scatter_binomial(g, m, segments, ctx):
    """Binomial scatter of m-byte segments from ctx.root (segment r, of the root's P, to rank r)."""
    p, root = g.size, ctx.root
    relative = tuple(segments[(root + i) % p] for i in range(p)) if g.rank == root else None
    return (yield from binomial_scatter(g, m, relative, root))


def _pow2(p):
    return None if is_pow2(p) else "needs a power-of-two P"


BROADCAST_BINOMIAL = Algorithm("broadcast", "binomial", broadcast_binomial, forms.broadcast_binomial,
                               source="MPICH bcast_intra_binomial; Open MPI binomial (id 5)")
SCATTER_BINOMIAL = Algorithm("scatter", "binomial", scatter_binomial, forms.scatter_binomial,
                             source="MPICH scatter_intra_binomial; Open MPI binomial")
GATHER_BINOMIAL = Algorithm("gather", "binomial", gather_binomial, forms.gather_binomial,
                            source="MPICH gather_intra_binomial; Open MPI binomial (id 2)")
SCATTER_RING_ALLGATHER = Algorithm("broadcast", "scatter_ring_allgather", scatter_ring_allgather,
                                   forms.broadcast_scatter_ring_allgather,
                                   source="MPICH bcast_intra_scatter_ring_allgather (long messages)")
SCATTER_RECURSIVE_DOUBLING_ALLGATHER = Algorithm(
    "broadcast", "scatter_recursive_doubling_allgather", scatter_recursive_doubling_allgather,
    forms.broadcast_scatter_recursive_doubling_allgather, check=_pow2, fallback="scatter_ring_allgather",
    source="MPICH bcast_intra_scatter_recursive_doubling_allgather (medium messages, power-of-two P)")
