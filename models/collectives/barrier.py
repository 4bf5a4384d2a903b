"""Network barrier: the dissemination barrier, with its closed form.

`dissemination(g, size_bytes, mine, ctx)`: ceil(log2 P) rounds; in round k
rank r sends a 0-byte message to r + 2^k and receives one from r - 2^k (MPICH
`barrier_intra_dissemination`, 3.3; `MPIR_Barrier_intra_k_dissemination`
with k = 2 from 3.4; Open MPI's `barrier_intra_bruck`, id 4, sends the same
messages). After round k a rank has heard, directly or not, from the 2^(k+1)-1
ranks before it, so it returns the ranks it saw arrive: all of them.

Closed form: every rank starts each round together, so ceil(log2 P) T(0).
"""
from __future__ import annotations

from cxlsim.models.collectives.base import Algorithm

__all__ = ["dissemination", "dissemination_cost", "DISSEMINATION"]


def dissemination(g, size_bytes, mine, ctx=None):
    """The dissemination barrier; returns the sorted ranks this rank knows to have arrived."""
    p, r = g.size, g.rank
    seen = frozenset((mine,))
    dist = 1
    while dist < p:
        got = yield from g.sendrecv((r + dist) % p, 0, seen, (r - dist) % p)
        seen = seen | got
        dist <<= 1
    return sorted(seen)


def dissemination_cost(cm, p, size_bytes, ctx=None):
    return (p - 1).bit_length() * cm.T(0)


DISSEMINATION = Algorithm("barrier", "dissemination", dissemination, dissemination_cost,
                          source="MPICH barrier_intra_dissemination (k_dissemination, k = 2, from 3.4); "
                                 "Open MPI barrier_intra_bruck (id 4)")
