"""Network reduce-scatter beside the ring: MPICH's recursive halving and pairwise, with closed forms.

Each function runs on one rank: `fn(g, s, vec, ctx)` with `s` the bytes of the
whole vector per rank and `vec` its label tuple; it returns the rank's
reduced segment (segment r of P equal segments of seg = ceil(s/P) bytes, as
`reductions.reduce_scatter_ring`). MPICH returns at once when s = 0.

- `recursive_halving` (MPICH `reduce_scatter_intra_recursive_halving`,
  commutative ops below MPIR_CVAR_REDUCE_SCATTER_COMMUTATIVE_LONG_MSG_SIZE =
  512 KiB): copy the s-byte input to a temporary buffer; for non-power-of-two
  P the even ranks below 2 rem (rem = P - pof2) send it to r + 1, which
  reduces it and works for both; then log2 pof2 steps with new rank i ^ mask,
  mask = pof2/2 .. 1, each sending the half of its current range of segments
  the partner keeps and reducing the half it keeps (a folded new rank holds
  two segments); then a local copy of its own segment, and the odd ranks below
  2 rem send their partner its segment.
  Open MPI's `reduce_scatter_intra_basic_recursivehalving` (id 2) is the same
  fold, steps and copies.
- `pairwise` (MPICH `reduce_scatter_intra_pairwise`, 512 KiB and above): a
  local copy of its own segment, then P-1 steps: send segment r+i to r+i,
  receive its segment from r-i and reduce it.

Closed forms (one rank per host, or every rank on one host; every rank starts
together on an uncongested, non-blocking fabric): pairwise = copy(seg) +
(P-1)(T(seg) + R(seg)). Recursive halving moves different byte counts per
rank when P is not a power of two, so its form follows every rank's finish
time through each step by the LogGP exchange rule (`exchange`): for rank r
receiving k_in from q and sending k_out,
    t_r' = max(max(t_q + o + wire(k_in), t_r + o) + o, t_r + o + k_out beta) + R(k_in)
(the receive, its own send's local completion, then the reduction). One link
is shared: a folded rank's host link carries the fold message and, at the
same time, its first partner's half when that partner is not folded; the
form delays the fold message by the chunks of the other that go first
(`shared_link_delay`, cut-through switches, equal link rates: every preset).
When both have as many chunks, their last chunks are ready at the same
instant and the DES orders them by floating-point rounding, so it may be later
than the form by the other's last chunk (the tests check that bound).
"""
from __future__ import annotations

from cxlsim.models.collectives.base import RETURNED_AT_ONCE, Algorithm, add_vectors, split

__all__ = ["recursive_halving", "pairwise", "exchange", "shared_link_delay", "recursive_halving_cost", "pairwise_cost",
           "RECURSIVE_HALVING", "PAIRWISE", "RECORDS"]


def _seg_bytes(s, p):
    return -(-s // p)


def _fold(p):
    """(pof2, rem, first original segment of each new rank, then P)."""
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    return pof2, rem, [2 * i if i < rem else i + rem for i in range(pof2)] + [p]


def _new_rank(r, rem):
    if r < 2 * rem:
        return -1 if r % 2 == 0 else r // 2
    return r - rem


def _real(newrank, rem):
    return newrank * 2 + 1 if newrank < rem else newrank + rem


def _halving_steps(newrank, pof2):
    """Per step: (partner's new rank, (first, end) new ranks sent, (first, end) new ranks received)."""
    steps, send_idx, recv_idx, last_idx, mask = [], 0, 0, pof2, pof2 >> 1
    while mask > 0:
        partner = newrank ^ mask
        if newrank < partner:
            send_idx = recv_idx + mask
            send, recv = (send_idx, last_idx), (recv_idx, send_idx)
        else:
            recv_idx = send_idx + mask
            send, recv = (send_idx, recv_idx), (recv_idx, last_idx)
        steps.append((partner, send, recv))
        send_idx, last_idx = recv_idx, recv_idx + mask
        mask >>= 1
    return steps


def recursive_halving(g, s, vec, ctx=None):
    """MPICH's recursive-halving reduce-scatter (see the module docstring)."""
    p, r = g.size, g.rank
    segs = split(vec, p)
    if s == 0:  # MPICH: total_count == 0 returns at once
        return RETURNED_AT_ONCE
    seg = _seg_bytes(s, p)
    pof2, rem, first = _fold(p)
    yield g.copy(s)
    newrank = _new_rank(r, rem)
    if r < 2 * rem:
        if r % 2 == 0:
            yield g.send(r + 1, s, tuple(segs))
        else:
            got = yield g.recv(r - 1)
            yield g.reduce(s)
            segs = [add_vectors(a, b) for a, b in zip(segs, got)]
    if newrank >= 0:
        for partner, send, recv in _halving_steps(newrank, pof2):
            lo, hi = first[send[0]], first[send[1]]
            rlo, rhi = first[recv[0]], first[recv[1]]
            got = yield from g.sendrecv(_real(partner, rem), (hi - lo) * seg, tuple(segs[lo:hi]),
                                        _real(partner, rem))
            yield g.reduce((rhi - rlo) * seg)
            segs[rlo:rhi] = [add_vectors(a, b) for a, b in zip(segs[rlo:rhi], got)]
        yield g.copy(seg)
    if r < 2 * rem:
        if r % 2:
            yield g.send(r - 1, seg, segs[r - 1])
        else:
            segs[r] = yield g.recv(r + 1)
    return segs[r]


def pairwise(g, s, vec, ctx=None):
    """MPICH's pairwise reduce-scatter (see the module docstring)."""
    p, r = g.size, g.rank
    segs = split(vec, p)
    if s == 0:  # MPICH: total_count == 0 returns at once
        return RETURNED_AT_ONCE
    seg = _seg_bytes(s, p)
    yield g.copy(seg)
    mine = segs[r]
    for i in range(1, p):
        dst, src = (r + i) % p, (r - i) % p
        got = yield from g.sendrecv(dst, seg, segs[dst], src)
        yield g.reduce(seg)
        mine = add_vectors(mine, got)
    return mine


# ---------------------------------------------------------------- closed forms (ns; cm: a network CostModel)

def exchange(cm, t_self: float, t_peer: float, k_in: int, k_out: int, reduced: int) -> float:
    """When a rank that starts a sendrecv at `t_self` is done, its partner starting at `t_peer`
    (k_in bytes in, k_out out, then `reduced` bytes reduced); ns."""
    intra, o = cm.intra_only, cm.overhead_ns
    done = max(max(t_peer + cm.arrive(k_in, intra), t_self + o) + cm.receive(k_in, intra), t_self + cm.busy(k_out, intra))
    return done + cm.R(reduced)


def recursive_halving_cost(cm, p, s, ctx=None):
    if s == 0:
        return 0.0
    seg = _seg_bytes(s, p)
    pof2, rem, first = _fold(p)
    intra = cm.intra_only
    start = s * cm.copy_ns_per_byte
    steps = {i: _halving_steps(i, pof2) for i in range(pof2)}

    def first_in(i):  # bytes new rank i receives in the first halving step
        _, _, recv = steps[i][0]
        return (first[recv[1]] - first[recv[0]]) * seg

    # a folded (odd) rank receives its even partner's vector, sent at the same start, and reduces it; a
    # partner that is not folded sends its first step's half at the same time into the same host link
    t = []
    for i in range(pof2):
        if i >= rem:
            t.append(start)
            continue
        partner = i ^ (pof2 >> 1)
        shared = 0.0 if intra or partner < rem else shared_link_delay(cm, s, first_in(i))
        t.append(start + cm.arrive(s, intra) + shared + cm.receive(s, intra) + cm.R(s))
    for k in range(pof2.bit_length() - 1):
        nxt = []
        for i in range(pof2):
            partner, send, recv = steps[i][k]
            k_out = (first[send[1]] - first[send[0]]) * seg
            k_in = (first[recv[1]] - first[recv[0]]) * seg
            nxt.append(exchange(cm, t[i], t[partner], k_in, k_out, k_in))
        t = nxt
    ends = [t[i] + seg * cm.copy_ns_per_byte for i in range(pof2)]
    finish = list(ends)
    for i in range(rem):  # odd rank 2i+1 sends the even rank 2i its segment
        finish[i] = ends[i] + cm.busy(seg, intra)
        even_ready = start + cm.busy(s, intra)
        finish.append(max(ends[i] + cm.arrive(seg, intra), even_ready) + cm.receive(seg, intra))
    return max(finish)


def shared_link_delay(cm, k_fold: int, k_other: int) -> float:
    """How much later the tail of a k_fold-byte message lands when a k_other-byte one starts into the
    same host link at the same time, from a host with the same link rate (ns): the link serves both
    without a pause, so the fold message waits for every chunk of the other that is ready before its
    own last one (all of them if it has more chunks; at a tie of ready times the DES breaks it by
    rounding, and the form takes the fold message first: the DES may be later by the other's last
    chunk, `TIE_NOTE`)."""
    chunk = cm.chunk_bytes
    n_fold, n_other = max(1, -(-k_fold // chunk)), max(1, -(-k_other // chunk))
    if n_fold > n_other:
        return k_other * cm.beta_ns_per_byte
    return min(n_fold, n_other - 1) * chunk * cm.beta_ns_per_byte


def pairwise_cost(cm, p, s, ctx=None):
    if s == 0:
        return 0.0
    seg = _seg_bytes(s, p)
    return seg * cm.copy_ns_per_byte + (p - 1) * (cm.T(seg) + cm.R(seg))


RECURSIVE_HALVING = Algorithm("reduce_scatter", "recursive_halving", recursive_halving, recursive_halving_cost,
                              source="MPICH reduce_scatter_intra_recursive_halving (commutative, < 512 KiB); "
                                     "Open MPI basic_recursivehalving (id 2): the same fold, steps and copies")
PAIRWISE = Algorithm("reduce_scatter", "pairwise", pairwise, pairwise_cost,
                     source="MPICH reduce_scatter_intra_pairwise (commutative, >= 512 KiB)")
RECORDS = (RECURSIVE_HALVING, PAIRWISE)
