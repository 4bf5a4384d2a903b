"""Allgather algorithms: every rank contributes a block of m bytes and ends with all P blocks.

Each function runs on one rank: `fn(g, m, mine, ctx)` with `g` the rank's
endpoint or group, `m` bytes per block, `mine` the rank's block label; it
returns the P blocks in rank order. `ctx` carries `groups` (ranks per host,
for the hierarchical variant) and `inter` (the leaders' algorithm).
Each has a record (`RING`, ...) with its closed form from `network_forms`;
the hierarchical one is made by `hierarchical_algorithm(lookup)`, since its
leaders run an algorithm found by name.
Sources: MPICH `src/mpi/coll/allgather/`, Open MPI `coll/base/coll_base_allgather.c`
(../shared/reference/allgather.md).
"""
from __future__ import annotations

from functools import partial

from cxlsim.models.collectives import network_forms as forms
from cxlsim.models.collectives.base import Algorithm, Group, is_pow2
from cxlsim.models.collectives.trees import binomial_bcast, binomial_gather

__all__ = ["ring", "recursive_doubling", "bruck", "neighbor_exchange", "two_proc", "hierarchical", "RING",
           "RECURSIVE_DOUBLING", "BRUCK", "NEIGHBOR_EXCHANGE", "TWO_PROC", "hierarchical_algorithm"]


def _pow2(p):
    return None if is_pow2(p) else "needs a power-of-two P"


def ring(g, m, mine, ctx=None):
    """P-1 steps; at step j rank r forwards block r-j to r+1 and receives block r-j-1 from r-1."""
    p, r = g.size, g.rank
    buf = [None] * p
    buf[r] = mine
    right, left = (r + 1) % p, (r - 1) % p
    for j in range(p - 1):
        buf[(r - j - 1) % p] = yield from g.sendrecv(right, m, buf[(r - j) % p], left)
    return buf


def recursive_doubling(g, m, mine, ctx=None):
    """log2 P steps; at step j rank r swaps its 2^j blocks with rank r xor 2^j."""
    p, r = g.size, g.rank
    buf = [None] * p
    buf[r] = mine
    mask = 1
    while mask < p:
        partner = r ^ mask
        base = r & ~(mask - 1)
        got = yield from g.sendrecv(partner, mask * m, tuple(buf[base:base + mask]), partner)
        pbase = partner & ~(mask - 1)
        buf[pbase:pbase + mask] = got
        mask <<= 1
    return buf


def bruck(g, m, mine, ctx=None):
    """ceil(log2 P) steps sending min(2^k, P-2^k) blocks to r-2^k, then a local rotation of P*m bytes."""
    p, r = g.size, g.rank
    buf = [mine]
    dist = 1
    while dist < p:
        count = min(dist, p - dist)
        got = yield from g.sendrecv((r - dist) % p, count * m, tuple(buf[:count]), (r + dist) % p)
        buf.extend(got)
        dist <<= 1
    if p > 1:
        yield g.copy(p * m)  # the rotation through a temporary buffer
    return [buf[(i - r) % p] for i in range(p)]


def _even(p):
    return None if p % 2 == 0 else "needs an even P"


def _two(p):
    return None if p == 2 else "needs P=2"


def neighbor_exchange(g, m, mine, ctx=None):
    """P/2 steps: one block with one neighbour, then pairs of blocks alternating neighbours."""
    p, r = g.size, g.rank
    buf = [None] * p
    buf[r] = mine
    if r % 2 == 0:
        neighbor = ((r + 1) % p, (r - 1) % p)
        recv_from = [r, r]
        offset = (2, -2)
    else:
        neighbor = ((r - 1) % p, (r + 1) % p)
        recv_from = [neighbor[0], neighbor[0]]
        offset = (-2, 2)
    buf[neighbor[0]] = yield from g.sendrecv(neighbor[0], m, mine, neighbor[0])
    send_from = r if r % 2 == 0 else recv_from[0]
    for i in range(1, p // 2):
        parity = i % 2
        recv_from[parity] = (recv_from[parity] + offset[parity]) % p
        got = yield from g.sendrecv(neighbor[parity], 2 * m, tuple(buf[send_from:send_from + 2]), neighbor[parity])
        buf[recv_from[parity]:recv_from[parity] + 2] = got
        send_from = recv_from[parity]
    return buf


def two_proc(g, m, mine, ctx=None):
    """P=2: one exchange."""
    other = 1 - g.rank
    got = yield from g.sendrecv(other, m, mine, other)
    return [mine, got] if g.rank == 0 else [got, mine]


def hierarchical(g, m, mine, ctx, lookup):
    """Intra-node binomial gather to the node leader, allgather among leaders (`ctx.inter`, found by
    `lookup`), intra-node bcast."""
    groups = ctx.groups
    node = next(i for i, members in enumerate(groups) if g.rank in members)
    local = Group(g, groups[node], tag=1000)
    q, p = local.size, g.size
    gathered = yield from binomial_gather(local, m, (g.rank, mine))
    everything = None
    if local.rank == 0:
        leaders = Group(g, [members[0] for members in groups], tag=2000)
        algo, _ = lookup("allgather", ctx.inter, leaders.size)
        per_node = yield from algo.run(leaders, q * m, tuple(gathered), ctx)
        everything = tuple(pair for node_blocks in per_node for pair in node_blocks)
    everything = yield from binomial_bcast(local, p * m, everything, tag=1)
    buf = [None] * p
    for rank, block in everything:
        buf[rank] = block
    return buf


RING = Algorithm("allgather", "ring", ring, forms.allgather_ring, exact=forms.ring_exact,
                 source="MPICH allgather_intra_ring; Open MPI ring (id 4)")
RECURSIVE_DOUBLING = Algorithm(
    "allgather", "recursive_doubling", recursive_doubling, forms.allgather_recursive_doubling, check=_pow2,
    fallback="bruck",
    source="MPICH allgather_intra_recursive_doubling; Open MPI id 3 (non-power-of-two P: Bruck, as Open MPI)")
BRUCK = Algorithm("allgather", "bruck", bruck, forms.allgather_bruck, source="MPICH allgather_intra_brucks; Open MPI id 2")
NEIGHBOR_EXCHANGE = Algorithm("allgather", "neighbor_exchange", neighbor_exchange, forms.allgather_neighbor_exchange,
                              check=_even, source="Open MPI id 5 (Chen et al. 2005)")
TWO_PROC = Algorithm("allgather", "two_proc", two_proc, forms.allgather_two_proc, check=_two, fallback="ring",
                     source="Open MPI id 6")


def _always(p, ctx):
    return True


def hierarchical_algorithm(lookup) -> Algorithm:
    """The hierarchical allgather's record; its leaders run the algorithm `lookup(collective, name, P)`
    (the registry's) finds for `ctx.inter`, in the DES and in the closed form (exact: it uses Ti inside hosts)."""
    return Algorithm("allgather", "hierarchical", partial(hierarchical, lookup=lookup),
                     partial(forms.allgather_hierarchical, lookup=lookup), exact=_always,
                     source="Open MPI 5 coll/han; MPICH multi-leader (opt-in): gather to node leaders, leaders' "
                            "allgather, bcast")
