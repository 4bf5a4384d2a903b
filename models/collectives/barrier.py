"""Network barriers: dissemination (MPICH, Open MPI), Open MPI's recursive doubling and linear, with closed forms.

`dissemination(g, size_bytes, mine, ctx)`: ceil(log2 P) rounds; in round k
rank r sends a 0-byte message to r + 2^k and receives one from r - 2^k (MPICH
`barrier_intra_dissemination`, 3.3; `MPIR_Barrier_intra_k_dissemination`
with k = 2 from 3.4; Open MPI's `barrier_intra_bruck`, id 4, sends the same
messages). After round k a rank has heard, directly or not, from the 2^(k+1)-1
ranks before it, so it returns the ranks it saw arrive: all of them.

`recursive_doubling` (Open MPI `barrier_intra_recursivedoubling`, id 3): with
adj the largest power of two <= P, ranks r >= adj first exchange a 0-byte
message with r - adj (their receive is the release at the end); ranks below
P - adj wait for it; then ranks below adj swap with r xor 2^k, k = 0 ..
log2 adj - 1; then ranks below P - adj release r + adj (a synchronous send in
Open MPI; here a standard one: the match acknowledgement's return is left out).

`tree` (Open MPI `barrier_intra_tree`, id 6): a binomial fan-in to rank 0
(for jump = 1, 2, 4, ..: rank r receives from r + jump while r has no bit
below 2 jump set, or sends to r - jump and stops), then the fan-out back down
(for jump from the top: a rank receives from r - its lowest set bit, then
sends to r + jump for every jump below that bit, largest first); blocking
sends and receives.

`linear` (Open MPI `barrier_intra_basic_linear`, id 1): every rank but 0
sends 0 bytes to rank 0 and waits for its reply; rank 0 receives them all,
then sends the P-1 replies one after another.

Closed forms (0-byte messages: T(0) = 2o + wire(0); every rank starts
together on an uncongested star): dissemination, ceil(log2 P) T(0);
recursive doubling, log2 P T(0) for a power-of-two P, else the exchange steps
from the ranks' start times (`network_forms.pairwise_steps`) with the fold's
T(0) before them and the release after; linear, rank 0's CPU takes the P-1
arrivals (each o, all landing at o + wire(0)), then each reply costs o and its
NIC gap, and lands wire(0) later, where the waiting rank takes o; tree, the
fan-in as a gather recurrence from the highest rank down (a receive is done o
after the later of its posting and the partner's send call + o + wire(0)), the
fan-out as a broadcast recurrence from rank 0 up (each send holds the sender
for o).
"""
from __future__ import annotations

from cxlsim.models.collectives.base import Algorithm
from cxlsim.models.collectives.network_forms import pairwise_steps

__all__ = ["dissemination", "recursive_doubling", "linear", "tree", "dissemination_cost", "recursive_doubling_cost",
           "linear_cost", "tree_cost", "DISSEMINATION", "RECURSIVE_DOUBLING", "LINEAR", "TREE", "RECORDS"]


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


def recursive_doubling(g, size_bytes, mine, ctx=None):
    """Open MPI's recursive-doubling barrier (see the module docstring)."""
    p, r = g.size, g.rank
    adj = 1 << (p.bit_length() - 1)
    seen = frozenset((mine,))
    if r >= adj:  # hand in, then wait for the release
        return sorted((yield from g.sendrecv(r - adj, 0, seen, r - adj)))
    if r < p - adj:
        seen = seen | (yield g.recv(r + adj))
    mask = 1
    while mask < adj:
        seen = seen | (yield from g.sendrecv(r ^ mask, 0, seen, r ^ mask))
        mask <<= 1
    if r < p - adj:
        yield g.send(r + adj, 0, seen)
    return sorted(seen)


def linear(g, size_bytes, mine, ctx=None):
    """Open MPI's linear barrier: everyone reports to rank 0, which then releases everyone."""
    p, r = g.size, g.rank
    if r:
        yield g.send(0, 0, mine)
        return (yield g.recv(0))
    pending = [g.recv(src) for src in range(1, p)]
    seen = {mine}
    for event in pending:
        seen.add((yield event))
    seen = sorted(seen)
    for dst in range(1, p):
        yield g.send(dst, 0, seen)
    return seen


def _depth(p):
    """opal_next_poweroftwo_inclusive(P): the least power of two >= P."""
    return 1 << (p - 1).bit_length()


def _fan_in(r, p):
    """Rank r's fan-in steps: ('recv', partner) or ('send', partner), in order."""
    steps, jump = [], 1
    while jump < _depth(p):
        partner = r ^ jump
        if not partner & (jump - 1) and partner < p:
            steps.append(("recv" if partner > r else "send", partner))
            if partner < r:
                break
        jump <<= 1
    return steps


def _fan_out(r, p):
    """Rank r's fan-out steps, in order."""
    steps, jump = [], _depth(p) >> 1
    while jump > 0:
        partner = r ^ jump
        if not partner & (jump - 1) and partner < p:
            steps.append(("send" if partner > r else "recv", partner))
        jump >>= 1
    return steps


def tree(g, size_bytes, mine, ctx=None):
    """Open MPI's tree barrier: a binomial fan-in to rank 0, then the fan-out (see the module docstring)."""
    p, r = g.size, g.rank
    seen = frozenset((mine,))
    for kind, partner in _fan_in(r, p):
        if kind == "recv":
            seen = seen | (yield g.recv(partner))
        else:
            yield g.send(partner, 0, seen)
    for kind, partner in _fan_out(r, p):
        if kind == "recv":
            seen = seen | (yield g.recv(partner))
        else:
            yield g.send(partner, 0, seen)
    return sorted(seen)


def tree_cost(cm, p, size_bytes, ctx=None):
    intra = cm.intra_only
    called, t = {}, {}  # when each rank calls its fan-in send; when each rank ends the fan-in
    for r in reversed(range(p)):  # a rank receives from higher ranks only
        now = 0.0
        for kind, partner in _fan_in(r, p):
            if kind == "recv":
                now = max(now, called[partner] + cm.arrive(0, intra)) + cm.receive(0, intra)
            else:
                called[r] = now
                now += cm.busy(0, intra)
        t[r] = now
    called, end = {}, 0.0  # when the fan-out send to each rank is called
    for r in range(p):  # a rank receives from a lower rank only
        now = t[r]
        for kind, partner in _fan_out(r, p):
            if kind == "recv":
                now = max(now, called[r] + cm.arrive(0, intra)) + cm.receive(0, intra)
            else:
                called[partner] = now
                now += cm.busy(0, intra)
        end = max(end, now)
    return end


def dissemination_cost(cm, p, size_bytes, ctx=None):
    return (p - 1).bit_length() * cm.T(0)


def recursive_doubling_cost(cm, p, size_bytes, ctx=None):
    adj = 1 << (p.bit_length() - 1)
    rem = p - adj
    t = [cm.T(0) if r < rem else 0.0 for r in range(adj)]
    t = pairwise_steps(cm, t, [(1 << k, 0, 0) for k in range(adj.bit_length() - 1)])
    intra = cm.intra_only
    return max([t[r] + (cm.busy(0, intra) if r < rem else 0.0) for r in range(adj)]
               + [t[r] + cm.arrive(0, intra) + cm.receive(0, intra) for r in range(rem)])


def linear_cost(cm, p, size_bytes, ctx=None):
    o, intra = cm.overhead_ns, cm.intra_only
    cpu = cm.arrive(0, intra) + (p - 1) * cm.receive(0, intra)  # rank 0 has taken every arrival
    nic, end = float("-inf"), cpu
    for _ in range(1, p):
        post = cpu + o
        start = post if intra else max(post, nic)  # a 0-byte send is done once it is injected
        nic = start + cm.gap_ns
        cpu = start
        # the waiting rank posted its receive long before: it takes the reply once it lands
        end = max(end, start + (0.0 if intra else cm.wire(0)) + cm.receive(0, intra))
    return max(end, cpu)


DISSEMINATION = Algorithm("barrier", "dissemination", dissemination, dissemination_cost,
                          source="MPICH barrier_intra_dissemination (k_dissemination, k = 2, from 3.4); "
                                 "Open MPI barrier_intra_bruck (id 4)")
RECURSIVE_DOUBLING = Algorithm("barrier", "recursive_doubling", recursive_doubling, recursive_doubling_cost,
                               source="Open MPI barrier_intra_recursivedoubling (id 3); the final release is a "
                                      "synchronous send there, a standard one here")
LINEAR = Algorithm("barrier", "linear", linear, linear_cost, source="Open MPI barrier_intra_basic_linear (id 1)")
TREE = Algorithm("barrier", "tree", tree, tree_cost, source="Open MPI barrier_intra_tree (id 6)")
RECORDS = (DISSEMINATION, RECURSIVE_DOUBLING, LINEAR, TREE)
