"""Allreduce and reduce-scatter: ring, recursive doubling and Rabenseifner.

Each function runs on one rank: `fn(g, s, vec, ctx)` with `s` the bytes of the
whole vector per rank and `vec` its label tuple (see base.vector_of); it
returns the reduced vector (allreduce) or the rank's reduced segment
(reduce-scatter). Every received byte that is combined costs reduction time
on the receiving rank's CPU (`g.reduce`).

The vector is cut into equal segments of ceil(s / parts) bytes (padded), so
every step of one algorithm moves the same bytes; MPICH's uneven counts
differ by less than one element per step.

Non-power-of-two P for recursive doubling and Rabenseifner: as in MPICH, the
first 2*rem ranks (rem = P - 2^floor(log2 P)) pair up, each even rank hands
its vector to the odd one and sits out, and gets the result back at the end.
Sources: MPICH `allreduce_intra_ring.c`, `allreduce_intra_recursive_doubling.c`,
`allreduce_intra_reduce_scatter_allgather.c`, `reduce_scatter_intra_ring`;
Rabenseifner (2004); Thakur, Rabenseifner & Gropp (2005).
"""
from __future__ import annotations

from cxlsim.models.collectives import network_forms as forms
from cxlsim.models.collectives.base import Algorithm, add_vectors, split

__all__ = ["allreduce_ring", "allreduce_recursive_doubling", "allreduce_rabenseifner", "reduce_scatter_ring",
           "ALLREDUCE_RING", "ALLREDUCE_RECURSIVE_DOUBLING", "ALLREDUCE_RABENSEIFNER", "REDUCE_SCATTER_RING"]


def _ceil_div(a, b):
    return -(-a // b)


def _ring_reduce_scatter(g, seg_bytes, segs, shift):
    """P-1 ring steps; rank r ends owning the fully reduced segment (r + 1 - shift) % P."""
    p, r = g.size, g.rank
    right, left = (r + 1) % p, (r - 1) % p
    for j in range(p - 1):
        got = yield from g.sendrecv(right, seg_bytes, segs[(r - j - shift) % p], left)
        yield g.reduce(seg_bytes)
        into = (r - j - 1 - shift) % p
        segs[into] = add_vectors(segs[into], got)


def allreduce_ring(g, s, vec, ctx=None):
    """Ring reduce-scatter (P-1 steps) then ring allgather (P-1 steps) of ceil(s/P)-byte segments."""
    p, r = g.size, g.rank
    segs = split(vec, p)
    seg_bytes = _ceil_div(s, p)
    yield from _ring_reduce_scatter(g, seg_bytes, segs, 0)
    right, left = (r + 1) % p, (r - 1) % p
    for j in range(p - 1):
        segs[(r - j) % p] = yield from g.sendrecv(right, seg_bytes, segs[(r - j + 1) % p], left)
    return tuple(x for seg in segs for x in seg)


def reduce_scatter_ring(g, s, vec, ctx=None):
    """P-1 ring steps of ceil(s/P)-byte segments; rank r ends with reduced segment r."""
    segs = split(vec, g.size)
    yield from _ring_reduce_scatter(g, _ceil_div(s, g.size), segs, 1)
    return segs[g.rank]


def _fold(g):
    """(pof2, rem, newrank) of MPICH's non-power-of-two fold; newrank -1 sits out."""
    p, r = g.size, g.rank
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    if r < 2 * rem:
        return pof2, rem, (-1 if r % 2 == 0 else r // 2)
    return pof2, rem, r - rem


def _real(newrank, rem):
    return newrank * 2 + 1 if newrank < rem else newrank + rem


def _fold_in(g, s, vec, rem):
    """Pre-step: even ranks below 2*rem hand their vector to the next odd rank, which reduces it."""
    r = g.rank
    if r < 2 * rem:
        if r % 2 == 0:
            yield g.send(r + 1, s, vec)
        else:
            got = yield g.recv(r - 1)
            yield g.reduce(s)
            vec = add_vectors(vec, got)
    return vec


def _fold_out(g, s, vec, rem):
    """Post-step: odd ranks below 2*rem return the result to their even partner."""
    r = g.rank
    if r < 2 * rem:
        if r % 2 == 0:
            vec = yield g.recv(r + 1)
        else:
            yield g.send(r - 1, s, vec)
    return vec


def allreduce_recursive_doubling(g, s, vec, ctx=None):
    """log2 pof2 steps, each exchanging and reducing the whole s-byte vector."""
    pof2, rem, newrank = _fold(g)
    vec = yield from _fold_in(g, s, vec, rem)
    if newrank >= 0:
        mask = 1
        while mask < pof2:
            dst = _real(newrank ^ mask, rem)
            got = yield from g.sendrecv(dst, s, vec, dst)
            yield g.reduce(s)
            vec = add_vectors(vec, got)
            mask <<= 1
    return (yield from _fold_out(g, s, vec, rem))


def allreduce_rabenseifner(g, s, vec, ctx=None):
    """Reduce-scatter by recursive halving, then allgather by recursive doubling (pof2 segments)."""
    pof2, rem, newrank = _fold(g)
    vec = yield from _fold_in(g, s, vec, rem)
    if newrank >= 0:
        segs = split(vec, pof2)
        seg_bytes = _ceil_div(s, pof2)
        lo, hi = 0, pof2  # the range of segments this rank still reduces
        mask = pof2 >> 1
        steps = []
        while mask >= 1:
            dst = _real(newrank ^ mask, rem)
            mid = lo + (hi - lo) // 2
            keep, give = ((lo, mid), (mid, hi)) if newrank & mask == 0 else ((mid, hi), (lo, mid))
            got = yield from g.sendrecv(dst, (give[1] - give[0]) * seg_bytes, tuple(segs[give[0]:give[1]]), dst)
            yield g.reduce((keep[1] - keep[0]) * seg_bytes)
            segs[keep[0]:keep[1]] = [add_vectors(a, b) for a, b in zip(segs[keep[0]:keep[1]], got)]
            steps.append((dst, keep, give))
            lo, hi = keep
            mask >>= 1
        for dst, keep, give in reversed(steps):
            got = yield from g.sendrecv(dst, (keep[1] - keep[0]) * seg_bytes, tuple(segs[keep[0]:keep[1]]), dst)
            segs[give[0]:give[1]] = got
        vec = tuple(x for seg in segs for x in seg)
    return (yield from _fold_out(g, s, vec, rem))


ALLREDUCE_RING = Algorithm("allreduce", "ring", allreduce_ring, forms.allreduce_ring, exact=forms.ring_exact,
                           source="MPICH allreduce_intra_ring; Open MPI ring (id 4)")
ALLREDUCE_RECURSIVE_DOUBLING = Algorithm("allreduce", "recursive_doubling", allreduce_recursive_doubling,
                                         forms.allreduce_recursive_doubling,
                                         source="MPICH allreduce_intra_recursive_doubling; Open MPI id 3")
ALLREDUCE_RABENSEIFNER = Algorithm("allreduce", "rabenseifner", allreduce_rabenseifner, forms.allreduce_rabenseifner,
                                   source="MPICH allreduce_intra_reduce_scatter_allgather; Open MPI id 6 (rabenseifner)")
REDUCE_SCATTER_RING = Algorithm("reduce_scatter", "ring", reduce_scatter_ring, forms.reduce_scatter_ring,
                                exact=forms.ring_exact,
                                source="MPICH reduce_scatter_intra_ring (Open MPI 5 reduce_scatter ring)")
