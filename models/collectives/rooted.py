"""Rooted collectives: broadcast and gather on binomial trees, and MPICH's long-message broadcast.

`binomial_bcast(g, size_bytes, data, root)`: rank r receives from its parent
(r with its lowest set bit, relative to the root, cleared), then sends to its
children, largest subtree first, each send blocking until local completion.
`binomial_gather(g, m, block, root)`: the same tree upside down; a rank
forwards its whole subtree's blocks (min(2^k, P - child) blocks) to its parent.
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

from cxlsim.models.collectives.base import Group, register

__all__ = ["binomial_bcast", "binomial_gather", "binomial_scatter", "scatter_ring_allgather",
           "scatter_recursive_doubling_allgather"]


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


def _down_tree(g, root, tag, have, part):
    """Walk a binomial tree from `root` down: receive from the parent (unless root), then, largest
    subtree first, send each child what `part(mask, count, have) -> (bytes, payload, kept)` gives
    for its subtree of `count` ranks. Returns what this rank keeps."""
    p = g.size
    rel = (g.rank - root) % p
    mask = 1
    while mask < p:
        if rel & mask:
            have = yield g.recv((rel - mask + root) % p, tag)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        child = rel + mask
        if child < p:
            size, payload, have = part(mask, min(mask, p - child), have)
            yield g.send((child + root) % p, size, payload, tag)
        mask >>= 1
    return have


def binomial_bcast(g, size_bytes, data, root=0, tag=0):
    """Binomial-tree broadcast of `size_bytes` from `root`; every rank returns the data."""
    return (yield from _down_tree(g, root, tag, data, lambda mask, count, have: (size_bytes, have, have)))


@register("broadcast", "binomial", source="MPICH bcast_intra_binomial; Open MPI binomial (id 5)")
def broadcast_binomial(g, size_bytes, data, ctx):
    return (yield from binomial_bcast(g, size_bytes, data, ctx.root))


@register("gather", "binomial", source="MPICH gather_intra_binomial; Open MPI binomial (id 2)")
def gather_binomial(g, m, block, ctx):
    return (yield from binomial_gather(g, m, block, ctx.root))


def binomial_scatter(g, seg_bytes, segments, root=0, tag=0):
    """Binomial scatter of P segments from `root`; every rank returns its own segment."""
    def part(mask, count, have):  # the child's subtree gets segments [mask, mask + count) of ours
        return count * seg_bytes, have[mask:mask + count], have[:mask]

    mine = yield from _down_tree(g, root, tag, segments if g.rank == root else None, part)
    return mine[0]


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


@register("broadcast", "scatter_ring_allgather", source="MPICH bcast_intra_scatter_ring_allgather (long messages)")
def scatter_ring_allgather(g, size_bytes, data, ctx):
    """Binomial scatter of ceil(s/P)-byte segments, then a ring allgather in root-relative order."""
    from cxlsim.models.collectives.allgather import ring  # allgather imports this module

    return (yield from _scatter_allgather(g, size_bytes, data, ctx, ring))


@register("broadcast", "scatter_recursive_doubling_allgather",
          check=lambda p: None if p & (p - 1) == 0 else "needs a power-of-two P", fallback="scatter_ring_allgather",
          source="MPICH bcast_intra_scatter_recursive_doubling_allgather (medium messages, power-of-two P)")
def scatter_recursive_doubling_allgather(g, size_bytes, data, ctx):
    """Binomial scatter of ceil(s/P)-byte segments, then a recursive-doubling allgather."""
    from cxlsim.models.collectives.allgather import recursive_doubling

    return (yield from _scatter_allgather(g, size_bytes, data, ctx, recursive_doubling))
