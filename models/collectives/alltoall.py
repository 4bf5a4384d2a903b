"""Network alltoall: Bruck (MPICH's and Open MPI's modified one), scattered, pairwise and linear, with closed forms.

Each function runs on one rank: `fn(g, m, mine, ctx)` with `m` the bytes per
destination and `mine[d]` the label of the block for rank d; it returns the P
received labels in source order (its own block at its own index).

- `bruck` (MPICH `alltoall_intra_brucks`, short messages): rotate the P blocks
  up by r (a local copy of P*m), then ceil(log2 P) steps: at step 2^k send the
  blocks whose index has bit k set to r + 2^k (packed first, MPIR_Pack_impl: a
  copy) and receive the same indices from r - 2^k; then rotate back through a
  temporary buffer (two local copies of P*m).
- `modified_bruck` (Open MPI `alltoall_intra_bruck`, id 3): the same steps,
  the received blocks copied back after each step instead of packed before,
  and one rotation of P*m at the end.
- `scattered` (MPICH `alltoall_intra_scattered`, medium messages): in batches
  of MPIR_CVAR_ALLTOALL_THROTTLE = 32 peers, post the receives from r+i, then
  the sends to r-i (the block for itself is a local copy, at i = 0), then wait
  for the batch.
- `pairwise` (MPICH `alltoall_intra_pairwise`, long messages): a local copy of
  the own block, then P-1 exchanges: with r xor i for power-of-two P, else send
  to r+i and receive from r-i.
- `linear` (Open MPI `alltoall_intra_basic_linear`, id 1; `linear_sync`, id 4,
  with its default max_requests 0 posts the same requests): a local copy of
  the own block, every receive posted (from r+1, r+2, ...), then every send
  (to r-1, r-2, ...), then wait for all.
MPICH returns at once when m = 0 (`recvcount == 0`); Open MPI does not check.

Closed forms (one rank per host, or every rank on one host; every rank starts
together on an uncongested, non-blocking fabric, g <= 2o): every exchange of
Bruck and pairwise is a sendrecv that every rank starts together, so
    bruck          = copy(P m) + sum_k (copy(c_k m) + T(c_k m)) + copy(2 P m)
    modified_bruck = copy(P m) + sum_k (T(c_k m) + copy(c_k m)) + copy(P m)
    pairwise       = copy(m) + (P-1) T(m)
with c_k the number of indices 1..P-1 with bit k set. Scattered and linear
keep many messages in flight, so their form follows one rank's timeline
(every rank's is the same): its CPU posts the sends one `o` apart; each
starts injecting at the later of its post and the NIC's gap `g` after the
last injection, streams after the previous message on the host link (k beta),
and lands wire(k) after it starts; the receives then take `o` each on the CPU
in arrival order (`posted_batches`). In each round of sends, the messages form
a permutation (rank q's j-th send goes to q - j), so no two meet on a switch
port: the form is exact there.
"""
from __future__ import annotations

from cxlsim.models.collectives.base import RETURNED_AT_ONCE, Algorithm, is_pow2

__all__ = ["bruck", "modified_bruck", "scattered", "pairwise", "linear", "bruck_counts", "posted_batches",
           "bruck_cost", "modified_bruck_cost", "scattered_cost", "pairwise_cost", "linear_cost", "THROTTLE",
           "BRUCK", "MODIFIED_BRUCK", "SCATTERED", "PAIRWISE", "LINEAR", "RECORDS"]

THROTTLE = 32
"""MPIR_CVAR_ALLTOALL_THROTTLE's default: peers per batch of the scattered algorithm."""


def _received(mine, r, p):
    """What rank r holds when no message moves (m = 0 in MPICH): its own block at its index."""
    got = [None] * p
    got[r] = mine[r]
    return got


def bruck_counts(p: int) -> list[int]:
    """Blocks exchanged at each Bruck step: the indices 1..P-1 with bit k set, k = 0, 1, ..."""
    return [sum(1 for i in range(1, p) if i & (1 << k)) for k in range((p - 1).bit_length())]


def _bruck(g, m, mine, ctx=None, pack_before=True, rotations_after=2):
    """The Bruck exchange; MPICH packs before each step and rotates back through two copies,
    Open MPI copies the received blocks back after each step and rotates once."""
    p, r = g.size, g.rank
    if m == 0 and pack_before:  # MPICH: recvcount == 0 returns at once
        return RETURNED_AT_ONCE
    yield g.copy(p * m)  # rotate up by r: buf[i] is the block for r + i
    buf = [mine[(r + i) % p] for i in range(p)]
    dist = 1
    while dist < p:
        idx = [i for i in range(1, p) if i & dist]
        if pack_before:
            yield g.copy(len(idx) * m)
        got = yield from g.sendrecv((r + dist) % p, len(idx) * m, tuple(buf[i] for i in idx), (r - dist) % p)
        if not pack_before:
            yield g.copy(len(idx) * m)
        for i, block in zip(idx, got):
            buf[i] = block
        dist <<= 1
    yield g.copy(rotations_after * p * m)
    return [buf[(r - src) % p] for src in range(p)]  # buf[i] came from rank r - i


def bruck(g, m, mine, ctx=None):
    """MPICH's Bruck alltoall (see the module docstring)."""
    return (yield from _bruck(g, m, mine, ctx, True, 2))


def modified_bruck(g, m, mine, ctx=None):
    """Open MPI's modified Bruck alltoall (see the module docstring)."""
    return (yield from _bruck(g, m, mine, ctx, False, 1))


def _posted(g, m, mine, throttle, early_return):
    """Batches of `throttle` peers: post the receives from r+i, then the sends to r-i (its own block
    a local copy), then wait for the batch."""
    p, r = g.size, g.rank
    if m == 0 and early_return:
        return RETURNED_AT_ONCE
    got = [None] * p
    for first in range(0, p, throttle):
        count = min(throttle, p - first)
        recvs = [(src, g.recv(src)) for src in ((r + i + first) % p for i in range(count)) if src != r]
        pending = []
        for dst in ((r - i - first) % p for i in range(count)):
            if dst == r:
                got[r] = mine[r]
                pending.append(g.copy(m))
            else:
                pending.append(g.send(dst, m, mine[dst]))
        for src, event in recvs:
            got[src] = yield event
        for event in pending:
            yield event
    return got


def scattered(g, m, mine, ctx=None):
    """MPICH's scattered alltoall: batches of THROTTLE peers (see the module docstring)."""
    return (yield from _posted(g, m, mine, THROTTLE, True))


def linear(g, m, mine, ctx=None):
    """Open MPI's basic linear alltoall: every request posted at once (see the module docstring)."""
    return (yield from _posted(g, m, mine, g.size, False))


def pairwise(g, m, mine, ctx=None):
    """MPICH's pairwise alltoall: a local copy, then P-1 exchanges (xor partners for power-of-two P)."""
    p, r = g.size, g.rank
    if m == 0:
        return RETURNED_AT_ONCE
    got = _received(mine, r, p)
    yield g.copy(m)
    for i in range(1, p):
        dst, src = (r ^ i, r ^ i) if is_pow2(p) else ((r + i) % p, (r - i) % p)
        got[src] = yield from g.sendrecv(dst, m, mine[dst], src)
    return got


# ---------------------------------------------------------------- closed forms (ns; cm: a network CostModel)

def bruck_cost(cm, p, m, ctx=None, pack_before=True, rotations_after=2):
    if m == 0 and pack_before:
        return 0.0
    copy = cm.copy_ns_per_byte
    steps = sum(c * m * copy + cm.T(c * m) for c in bruck_counts(p))
    return p * m * copy + steps + rotations_after * p * m * copy


def modified_bruck_cost(cm, p, m, ctx=None):
    return bruck_cost(cm, p, m, ctx, False, 1)


def posted_batches(cm, p: int, m: int, throttle: int) -> float:
    """One rank's timeline through batches of posted receives and sends (ns, see the module docstring)."""
    o, beta, intra = cm.overhead_ns, cm.beta_ns_per_byte, cm.intra_only
    now = cpu = 0.0
    nic = port = float("-inf")
    for first in range(0, p, throttle):
        count = min(throttle, p - first)
        cpu = max(cpu, now)
        ends, arrivals = [now], []
        for i in range(count):
            if (i + first) % p == 0:  # the block for itself
                cpu += m * cm.copy_ns_per_byte
                ends.append(cpu)
                continue
            cpu += o
            if intra:  # shared memory: the receiver copies it once it is posted
                arrivals.append(cpu)
                ends.append(cpu)
                continue
            start = max(cpu, nic)
            nic = start + cm.gap_ns
            start = max(start, port)
            port = start + m * beta
            arrivals.append(start + cm.wire(m))
            ends.append(port)
        receive = o + (m * cm.copy_ns_per_byte if intra else 0.0)
        for arrival in sorted(arrivals):
            cpu = max(cpu, arrival) + receive
        now = max(*ends, cpu)
    return now


def scattered_cost(cm, p, m, ctx=None):
    return 0.0 if m == 0 else posted_batches(cm, p, m, THROTTLE)


def linear_cost(cm, p, m, ctx=None):
    return posted_batches(cm, p, m, p)


def pairwise_cost(cm, p, m, ctx=None):
    return 0.0 if m == 0 else m * cm.copy_ns_per_byte + (p - 1) * cm.T(m)


BRUCK = Algorithm("alltoall", "bruck", bruck, bruck_cost,
                  source="MPICH alltoall_intra_brucks (m <= 256 B and P >= 8)")
MODIFIED_BRUCK = Algorithm("alltoall", "modified_bruck", modified_bruck, modified_bruck_cost,
                           source="Open MPI coll/base alltoall_intra_bruck (id 3, 'modified_bruck')")
SCATTERED = Algorithm("alltoall", "scattered", scattered, scattered_cost,
                      source="MPICH alltoall_intra_scattered (m <= 32 KiB), MPIR_CVAR_ALLTOALL_THROTTLE = 32")
PAIRWISE = Algorithm("alltoall", "pairwise", pairwise, pairwise_cost,
                     source="MPICH alltoall_intra_pairwise (m > 32 KiB); Open MPI id 2 pairs r+i/r-i at every P, "
                            "the same cost on an uncongested fabric")
LINEAR = Algorithm("alltoall", "linear", linear, linear_cost,
                   source="Open MPI coll/base alltoall_intra_basic_linear (id 1; linear_sync, id 4, with its "
                          "default max_requests 0 posts the same requests)")
RECORDS = (BRUCK, MODIFIED_BRUCK, SCATTERED, PAIRWISE, LINEAR)
