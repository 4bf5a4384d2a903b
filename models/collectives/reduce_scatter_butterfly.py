"""Open MPI's butterfly reduce-scatter (coll/base `reduce_scatter_intra_butterfly`, Traff 2005), with its closed form.

`butterfly(g, s, vec, ctx)` returns the rank's reduced segment of P segments
of seg = ceil(s/P) bytes, as the other reduce-scatter algorithms. Open MPI
5.0.9's steps, with pof2 the largest power of two <= P and rem = P - pof2:
1. copy the s-byte input; the even ranks below 2 rem send it to r + 1, which
   reduces it; the odd ones and the ranks from 2 rem on become vranks
   0..pof2-1. The vector is cut into pof2 blocks: block b holds segments 2b
   and 2b+1 for b < rem, else segment b + rem.
2. for mask = 1, 2, .., pof2/2 the range of blocks a vrank still reduces is
   halved: it swaps with vrank ^ mask the half the partner keeps (the upper
   half if its own bit is 0) and reduces the half it keeps. A vrank ends with
   block mirror(vrank), its bits reversed.
3. each vrank v sends block mirror(v) where it belongs: if the owner vrank
   u = mirror(v) holds two segments, the first to u's folded even rank (a
   blocking send), then the owner's segment in an exchange with u, which
   returns v's own; if u = v, a local copy. The folded even ranks receive
   their segment.

Closed form: every rank's finish time through the steps by the LogGP
exchange rule (`reduce_scatter.exchange`), the fold's shared host link
included (`reduce_scatter.shared_link_delay`, as for recursive halving), with
the NIC gap no longer than o (every preset). Exact for a power-of-two P. For
other P the folded vranks run late, and the vranks that are not folded reach
the later steps early and send into a folded vrank's host link while its
earlier messages still arrive: the form leaves that sharing out (the
record's `exact` rule says so, and the analytic engine notes it): the DES is
up to 2.5% slower as measured (P 3-33, 1 B to 1 MiB, ib-hdr, eth-100g-roce,
eth-100g-tcp; tests/test_network_collectives.py).
"""
from __future__ import annotations

from cxlsim.models.collectives.base import Algorithm, add_vectors, flat_exact, is_pow2, split
from cxlsim.models.collectives.reduce_scatter import exchange, shared_link_delay

__all__ = ["mirror", "butterfly", "butterfly_cost", "BUTTERFLY"]


def mirror(x: int, bits: int) -> int:
    """`x` with its lowest `bits` bits in reverse order (Open MPI's ompi_mirror_perm)."""
    return int(format(x, f"0{bits}b")[::-1], 2) if bits else 0


def _layout(p):
    """(pof2, rem, log2 pof2, first segment of each block, then P)."""
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    return pof2, rem, pof2.bit_length() - 1, [2 * b if b < rem else b + rem for b in range(pof2)] + [p]


def _real(v, rem):
    return 2 * v + 1 if v < rem else v + rem


def _steps(v, pof2):
    """Per butterfly step of vrank v: (partner vrank, (first, end) blocks sent, (first, end) blocks kept)."""
    out, nblocks, send_index, recv_index, mask = [], pof2, 0, 0, 1
    while mask < pof2:
        nblocks //= 2
        if v & mask == 0:
            send_index += nblocks
        else:
            recv_index += nblocks
        out.append((v ^ mask, (send_index, send_index + nblocks), (recv_index, recv_index + nblocks)))
        send_index = recv_index
        mask <<= 1
    return out


def butterfly(g, s, vec, ctx=None):
    """Open MPI's butterfly reduce-scatter (see the module docstring)."""
    p, r = g.size, g.rank
    segs = split(vec, p)
    if p == 1:
        return segs[0]
    seg = -(-s // p)
    pof2, rem, bits, first = _layout(p)
    yield g.copy(s)
    if r < 2 * rem and r % 2 == 0:  # folded: hand in the vector, wait for the segment
        yield g.send(r + 1, s, tuple(segs))
        return (yield g.recv(_real(mirror((r + 1) // 2, bits), rem)))
    if r < 2 * rem:
        got = yield g.recv(r - 1)
        yield g.reduce(s)
        segs = [add_vectors(a, b) for a, b in zip(segs, got)]
    v = r // 2 if r < 2 * rem else r - rem
    for partner, send, keep in _steps(v, pof2):
        lo, hi, klo, khi = first[send[0]], first[send[1]], first[keep[0]], first[keep[1]]
        got = yield from g.sendrecv(_real(partner, rem), (hi - lo) * seg, tuple(segs[lo:hi]), _real(partner, rem))
        yield g.reduce((khi - klo) * seg)
        segs[klo:khi] = [add_vectors(a, b) for a, b in zip(segs[klo:khi], got)]
    owner = mirror(v, bits)  # this rank holds block `owner`, which vrank `owner` needs
    index = first[owner]
    if owner < rem:
        yield g.send(_real(owner, rem) - 1, seg, segs[index])
        index += 1
    if owner == v:
        yield g.copy(seg)
        return segs[r]
    return (yield from g.sendrecv(_real(owner, rem), seg, segs[index], _real(owner, rem)))


def butterfly_cost(cm, p, s, ctx=None):
    """Closed form of `butterfly` on a network `CostModel` (see the module docstring), ns."""
    if p == 1:
        return 0.0
    seg = -(-s // p)
    pof2, rem, bits, first = _layout(p)
    intra = cm.intra_only
    start = s * cm.copy_ns_per_byte
    steps = {v: _steps(v, pof2) for v in range(pof2)}

    def size(blocks):
        return (first[blocks[1]] - first[blocks[0]]) * seg

    t = []
    for v in range(pof2):
        if v >= rem:
            t.append(start)
            continue
        partner = steps[v][0][0]
        shared = 0.0 if intra or partner < rem else shared_link_delay(cm, s, size(steps[v][0][2]))
        t.append(start + cm.arrive(s, intra) + shared + cm.receive(s, intra) + cm.R(s))
    for k in range(bits):
        t = [exchange(cm, t[v], t[steps[v][k][0]], size(steps[v][k][2]), size(steps[v][k][1]),
                      size(steps[v][k][2])) for v in range(pof2)]
    ready = [t[v] + (cm.busy(seg, intra) if mirror(v, bits) < rem else 0.0) for v in range(pof2)]
    ends = []
    for v in range(pof2):
        owner = mirror(v, bits)
        if owner < rem:  # the folded even rank of the owner takes its segment
            folded_ready = start + cm.busy(s, intra)
            ends.append(max(t[v] + cm.arrive(seg, intra), folded_ready) + cm.receive(seg, intra))
        if owner == v:
            ends.append(ready[v] + seg * cm.copy_ns_per_byte)
        else:
            ends.append(exchange(cm, ready[v], ready[owner], seg, seg, 0))
    return max(ends)


def _exact(p, ctx) -> bool:
    return is_pow2(p) and flat_exact(p, ctx)


BUTTERFLY = Algorithm("reduce_scatter", "butterfly", butterfly, butterfly_cost, exact=_exact,
                      approximation=("for P not a power of two later steps share host links (the DES up to 2.5% "
                                     "slower, measured for P 3-33), and ranks sharing a host are charged as network "
                                     "messages"),
                      source="Open MPI coll/base reduce_scatter_intra_butterfly (id 4; Traff 2005)")
