"""Binomial trees, the building block of the rooted collectives and of the hierarchical allgather.

Relative to the root, rank r's parent is r with its lowest set bit cleared,
and its children are r + 2^k for every 2^k below that bit.
- `binomial_bcast(g, size_bytes, data, root)`: a rank receives from its parent,
  then sends to its children, largest subtree first, each send blocking until
  local completion;
- `binomial_gather(g, m, block, root)`: the same tree upside down; a rank
  forwards its whole subtree's blocks (min(2^k, P - child) blocks) to its parent;
- `binomial_scatter(g, seg_bytes, segments, root)`: down the tree, a child
  receives its whole subtree's segments.
Sources: MPICH `bcast_intra_binomial.c`, `gather_intra_binomial.c`, `scatter_intra_binomial.c`.
"""
from __future__ import annotations

__all__ = ["binomial_bcast", "binomial_gather", "binomial_scatter", "down_tree"]


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


def down_tree(g, root, tag, have, part):
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
    return (yield from down_tree(g, root, tag, data, lambda mask, count, have: (size_bytes, have, have)))


def binomial_scatter(g, seg_bytes, segments, root=0, tag=0):
    """Binomial scatter of P segments from `root`; every rank returns its own segment."""
    def part(mask, count, have):  # the child's subtree gets segments [mask, mask + count) of ours
        return count * seg_bytes, have[mask:mask + count], have[:mask]

    mine = yield from down_tree(g, root, tag, segments if g.rank == root else None, part)
    return mine[0]
