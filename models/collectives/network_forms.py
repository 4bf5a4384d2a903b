"""Closed-form costs (LogGP with a store-and-forward term) of the network collective algorithms.

`CostModel` reduces a built network to the LogGP figures one message sees on
an uncongested route from the first host to the last (all times ns):

    wire(k) = k*beta + sum(propagation) + sum(switch latency)
              [+ (links - 1) * min(k, chunk) * beta with store-and-forward switches]
    T(k)    = o + wire(k) + o          one k-byte message, sender call to receiver completion
    Ti(k)   = o + o + k / memcpy_bw    the same between two ranks on one host

beta = max(G, 1/host link bandwidth). These are the DES's own rules, so on an
uncongested fabric with one rank per host the DES equals these forms (the
tests check it to 1%). The forms assume g <= 2*o (as in every preset) and a
non-blocking fabric: congestion, e.g. oversubscribed uplinks, is what the DES
adds. Flat algorithms charge every message as T: exact with one rank per
host, and with every rank on one host (then T = Ti). With several ranks on
each of several hosts, rings whose hosts each send off-host from one rank
(block placement) follow a per-rank recurrence with Ti on the on-host edges
(`ring_recurrence`, exact); other flat algorithms are only approximated
(ranks share a NIC, copies may be slower than the wire): their records'
`exact` rule says so and `analytic.cost` notes it. The hierarchical algorithm
uses Ti inside hosts and is exact.

Each form is f(cost_model, P, size_bytes, ctx) -> ns, the `cost` of its
algorithm's record; `network_closed_form(record, ...)` evaluates one.

Per algorithm (P ranks, m bytes per block, s bytes per vector, R(k) the
reduction time, seg = ceil(s/P)):
- allgather ring: (P-1)*T(m); recursive doubling: sum_j T(2^j m);
  Bruck: sum_k T(min(2^k, P-2^k) m) + P*m/memcpy_bw; neighbour exchange:
  T(m) + (P/2-1)*T(2m); hierarchical: gather_intra(q, m) + allgather_inter(N, q*m)
  + bcast_intra(q, P*m), the tree terms by the binomial recurrences below.
- allreduce ring: (P-1)*(2*T(seg) + R(seg)); recursive doubling:
  log2(P)*(T(s) + R(s)); Rabenseifner: sum over halving steps of T(s/2^j) + R(s/2^j),
  and back by doubling. Non-power-of-two P folds 2*rem ranks into rem before
  the power-of-two core and unfolds after it; the folded ranks start late,
  so these two use a per-rank max-plus recurrence (`_pairwise_fold`).
- reduce-scatter ring: (P-1)*(T(seg) + R(seg)).
- broadcast/gather binomial: the tree recurrence (a parent's i-th send starts
  i*(o + k*beta) after it has the data); broadcast scatter_ring_allgather:
  the scatter tree's per-rank finish times start the ring recurrence
  (scatter_recursive_doubling_allgather: the pairwise-step recurrence).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cxlsim.errors import InputError
from cxlsim.models.collectives.base import NETWORK, Algorithm, NoClosedForm
from cxlsim.models.collectives.shared_downlink import fan_in

__all__ = ["CostModel", "network_closed_form", "bcast_tree", "gather_tree", "scatter_tree", "ring_recurrence",
           "pairwise_steps", "ring_exact", "allgather_ring", "allgather_recursive_doubling", "allgather_bruck",
           "allgather_neighbor_exchange", "allgather_two_proc", "allgather_hierarchical", "allreduce_ring",
           "allreduce_recursive_doubling", "allreduce_rabenseifner", "reduce_scatter_ring", "broadcast_binomial",
           "broadcast_scatter_ring_allgather", "broadcast_scatter_recursive_doubling_allgather", "gather_binomial",
           "scatter_binomial"]


@dataclass(frozen=True)
class CostModel:
    """LogGP figures of one uncongested route (ns, bytes)."""

    overhead_ns: float
    gap_ns: float
    beta_ns_per_byte: float
    path_latency_ns: float
    links: int
    store_and_forward: bool
    chunk_bytes: int
    copy_ns_per_byte: float
    reduce_ns_per_byte: float
    intra_only: bool = False
    """Every rank on one host: every message is a shared-memory one (T = Ti)."""

    @classmethod
    def from_network(cls, net, chunk_bytes: int) -> "CostModel":
        """Figures of the route from the first host to the last one."""
        first, last = 0, len(net.hosts) - 1
        host = net.hosts[first]
        hops = net.hops(first, last) if last != first else ((host.uplink, None),)
        switches = [sw for _, sw in hops if sw is not None]
        return cls(
            overhead_ns=host.nic.params.overhead_ns,
            gap_ns=host.nic.params.gap_ns,
            beta_ns_per_byte=host.uplink.ns_per_byte,
            path_latency_ns=sum(p.latency_ns for p, _ in hops) + sum(sw.params.latency_ns for sw in switches),
            links=len(hops),
            store_and_forward=any(not sw.cut_through for sw in switches),
            chunk_bytes=chunk_bytes,
            copy_ns_per_byte=1.0 / host.params.memcpy_bw_bytes_per_ns,
            reduce_ns_per_byte=1.0 / host.params.reduce_bw_bytes_per_ns,
        )

    def wire(self, k: int) -> float:
        t = k * self.beta_ns_per_byte + self.path_latency_ns
        if self.store_and_forward:  # every switch stores the first chunk before sending it on
            t += (self.links - 1) * min(k, self.chunk_bytes) * self.beta_ns_per_byte
        return t

    def arrive(self, k: int, intra: bool) -> float:
        """Sender call to the message's arrival at the receiver."""
        return self.overhead_ns + (0.0 if intra else self.wire(k))

    def receive(self, k: int, intra: bool) -> float:
        """Receiver CPU time once the message is there (a shared-memory one is copied)."""
        return self.overhead_ns + (k * self.copy_ns_per_byte if intra else 0.0)

    def T(self, k: int) -> float:
        """One message between ranks of a flat algorithm, sender call to receiver completion."""
        return self.arrive(k, self.intra_only) + self.receive(k, self.intra_only)

    def Ti(self, k: int) -> float:
        """One intra-host message, sender call to receiver completion."""
        return self.arrive(k, True) + self.receive(k, True)

    def R(self, k: int) -> float:
        return k * self.reduce_ns_per_byte

    def busy(self, k: int, intra: bool) -> float:
        """Sender call to local send completion."""
        return self.overhead_ns + (0.0 if intra or self.intra_only else k * self.beta_ns_per_byte)


def _log2(p):
    return p.bit_length() - 1


def _children(rel, p):
    """A binomial-tree rank's children, largest subtree first (the send order of the broadcast)."""
    low = rel & -rel if rel else 1 << p.bit_length()
    return [rel + mask for mask in (1 << k for k in reversed(range(p.bit_length()))) if mask < low and rel + mask < p]


def bcast_tree(cm: CostModel, p: int, k: int, intra: bool) -> float:
    """Binomial broadcast of k bytes on p ranks: time until the last rank is done."""
    intra = intra or cm.intra_only
    deliver = (lambda: cm.Ti(k)) if intra else (lambda: cm.T(k))
    have, end = {0: 0.0}, 0.0
    for rel in range(p):  # parents have smaller relative ranks than their children
        kids = _children(rel, p)
        for i, child in enumerate(kids):
            have[child] = have[rel] + i * cm.busy(k, intra) + deliver()
        end = max(end, have[rel] + len(kids) * cm.busy(k, intra))
    return end


def gather_tree(cm: CostModel, p: int, m: int, intra: bool, root: int = 0) -> float:
    """Binomial gather of m-byte blocks on p ranks to `root`: time until the last rank is done.

    A rank takes its children's blocks smallest subtree first and forwards its whole subtree's; at
    non-power-of-two P children that send at once share the parent's downlink (`shared_downlink.fan_in`)."""
    if intra:
        cm = replace(cm, intra_only=True)

    def blocks(rel):
        return (min(rel & -rel, p - rel) if rel else p) * m
    return fan_in(cm, p, root, lambda rel: reversed(_children(rel, p)), blocks, lambda k: 0.0)


def _host_of(p, ctx):
    """Host index per rank from ctx.groups (one host per rank if absent)."""
    host_of = list(range(p))
    for h, members in enumerate(ctx.groups or ()):
        for r in members:
            host_of[r] = h
    return host_of


def _mixed(host_of) -> bool:
    """Some ring edges stay on a host and others cross the network."""
    p = len(host_of)
    kinds = {host_of[r] == host_of[(r + 1) % p] for r in range(p)}
    return len(kinds) > 1


def ring_recurrence(cm: CostModel, host_of, k: int, steps: int, reduce_bytes: int = 0, t=None) -> np.ndarray:
    """Per-rank finish times of `steps` ring steps of k bytes (r sends to r+1), each followed by
    a reduction of `reduce_bytes`, with shared-memory edges where neighbours share a host.

    The LogGP rule of `_pairwise_fold` with r's source r-1: exact on an uncongested fabric.
    """
    p, o = len(host_of), cm.overhead_ns
    into = np.array([host_of[(r - 1) % p] == host_of[r] for r in range(p)])  # is edge (r-1 -> r) on-host?
    arrive = np.where(into, cm.arrive(k, True), cm.arrive(k, False))
    receive = np.where(into, cm.receive(k, True), cm.receive(k, False))
    busy = np.where(np.roll(into, -1), cm.busy(k, True), cm.busy(k, False))
    t = np.array(t if t is not None else np.zeros(p), dtype=float)
    red = cm.R(reduce_bytes)
    for _ in range(steps):
        t = np.maximum(np.maximum(np.roll(t, 1) + arrive, t + o) + receive, t + busy) + red
    return t


def allgather_ring(cm, p, m, ctx):
    host_of = _host_of(p, ctx)
    if _mixed(host_of):
        return float(ring_recurrence(cm, host_of, m, p - 1).max())
    return (p - 1) * cm.T(m)


def allgather_recursive_doubling(cm, p, m, ctx):
    return sum(cm.T((1 << j) * m) for j in range(_log2(p)))


def allgather_bruck(cm, p, m, ctx):
    steps = sum(cm.T(min(1 << j, p - (1 << j)) * m) for j in range((p - 1).bit_length()))
    return steps + (p * m * cm.copy_ns_per_byte if p > 1 else 0.0)


def allgather_neighbor_exchange(cm, p, m, ctx):
    return cm.T(m) + (p // 2 - 1) * cm.T(2 * m)


def allgather_two_proc(cm, p, m, ctx):
    return cm.T(m)


def allgather_hierarchical(cm, p, m, ctx, lookup):
    """Gather to each host's leader, the leaders' allgather (`ctx.inter`, found by the registry's
    `lookup`, which the registry passes in), broadcast from the leaders; ns."""
    groups = ctx.groups or tuple((r,) for r in range(p))
    q, nodes = len(groups[0]), len(groups)
    leaders = replace(ctx, groups=tuple((i,) for i in range(nodes)))  # one leader per host
    inter, _ = lookup("allgather", ctx.inter, nodes)
    return gather_tree(cm, q, m, True) + network_closed_form(inter, cm, nodes, q * m, leaders) + \
        bcast_tree(cm, q, p * m, True)


def pairwise_steps(cm: CostModel, t: list, steps) -> list:
    """Per-rank finish times after pairwise exchange steps, from start times `t` (ns).

    `steps` lists (mask, bytes exchanged, bytes reduced); rank i swaps with i ^ mask.
    Ranks may start at different times, so each exchange follows the LogGP rule for
    rank r and partner q starting at t_r and t_q:
        t_r' = max(max(t_q + arrive(k), t_r + o) + receive(k), t_r + busy(k)) + R(k_reduced)
    (receive done, own send done, then reduce); on the network arrive = o + wire,
    receive = o, busy = o + k*beta. Equal start times give T(k) + R.
    """
    o, intra = cm.overhead_ns, cm.intra_only
    for mask, k, k_reduced in steps:
        t = [max(max(t[i ^ mask] + cm.arrive(k, intra), t[i] + o) + cm.receive(k, intra),
                 t[i] + cm.busy(k, intra)) + cm.R(k_reduced) for i in range(len(t))]
    return t


def _pairwise_fold(cm, p, s, steps) -> float:
    """MPICH's non-power-of-two fold around pairwise steps (ns): the folded ranks enter the
    power-of-two core after T(s) + R(s), the others at 0 (`pairwise_steps`), and the odd
    ranks hand the result back to their even partners at the end."""
    pof2 = 1 << _log2(p)
    rem = p - pof2
    t = [cm.T(s) + cm.R(s) if nr < rem else 0.0 for nr in range(pof2)]
    t = pairwise_steps(cm, t, steps)
    ends = list(t) + [t[nr] + cm.T(s) for nr in range(rem)] + [t[nr] + cm.busy(s, cm.intra_only) for nr in range(rem)]
    return max(ends)


def _fold(cm, p, s, steps):
    pof2 = 1 << _log2(p)
    if pof2 == p:  # the closed form: every rank starts every step together
        return sum(cm.T(k) + cm.R(kr) for _, k, kr in steps)
    return _pairwise_fold(cm, p, s, steps)


def allreduce_ring(cm, p, s, ctx):
    seg = -(-s // p)
    host_of = _host_of(p, ctx)
    if _mixed(host_of):
        t = ring_recurrence(cm, host_of, seg, p - 1, seg)
        return float(ring_recurrence(cm, host_of, seg, p - 1, 0, t).max())
    return (p - 1) * (2 * cm.T(seg) + cm.R(seg))


def allreduce_recursive_doubling(cm, p, s, ctx):
    pof2 = 1 << _log2(p)
    return _fold(cm, p, s, [(1 << j, s, s) for j in range(_log2(pof2))])


def allreduce_rabenseifner(cm, p, s, ctx):
    pof2 = 1 << _log2(p)
    seg = -(-s // pof2)
    halving = [(pof2 >> (j + 1), (pof2 >> (j + 1)) * seg) for j in range(_log2(pof2))]
    steps = [(mask, k, k) for mask, k in halving] + [(mask, k, 0) for mask, k in reversed(halving)]
    return _fold(cm, p, s, steps)


def reduce_scatter_ring(cm, p, s, ctx):
    seg = -(-s // p)
    host_of = _host_of(p, ctx)
    if _mixed(host_of):
        return float(ring_recurrence(cm, host_of, seg, p - 1, seg).max())
    return (p - 1) * (cm.T(seg) + cm.R(seg))


def broadcast_binomial(cm, p, s, ctx):
    return bcast_tree(cm, p, s, False)


def scatter_tree(cm: CostModel, host_of_rel, seg: int) -> np.ndarray:
    """Binomial scatter of seg-byte segments in root-relative ranks: when each rank is done."""
    p = len(host_of_rel)
    have, done = np.zeros(p), np.zeros(p)
    for rel in range(p):  # parents have smaller relative ranks than their children
        t = have[rel]
        for child in _children(rel, p):  # largest subtree first
            k = min(child & -child, p - child) * seg
            intra = host_of_rel[child] == host_of_rel[rel]
            have[child] = t + cm.arrive(k, intra) + cm.receive(k, intra)
            t += cm.busy(k, intra)
        done[rel] = t
    return done


def _scatter_start(cm, p, s, ctx):
    """(segment bytes, relative host list, per-relative-rank scatter finish times)."""
    seg = -(-s // p)
    host_of = _host_of(p, ctx)
    rel_hosts = [0] * p if cm.intra_only else [host_of[(ctx.root + i) % p] for i in range(p)]
    return seg, rel_hosts, scatter_tree(cm, rel_hosts, seg)


def broadcast_scatter_ring_allgather(cm, p, s, ctx):
    seg, rel_hosts, start = _scatter_start(cm, p, s, ctx)
    return float(ring_recurrence(cm, rel_hosts, seg, p - 1, 0, start).max())


def broadcast_scatter_recursive_doubling_allgather(cm, p, s, ctx):
    seg, _, start = _scatter_start(cm, p, s, ctx)
    return max(pairwise_steps(cm, list(start), [(1 << j, (1 << j) * seg, 0) for j in range(_log2(p))]))


def gather_binomial(cm, p, m, ctx):
    return gather_tree(cm, p, m, False, ctx.root)


def scatter_binomial(cm, p, m, ctx):
    """Binomial scatter of m-byte segments from ctx.root: the last rank's end of `scatter_tree`."""
    host_of = _host_of(p, ctx)
    rel_hosts = [0] * p if cm.intra_only else [host_of[(ctx.root + i) % p] for i in range(p)]
    return float(max(scatter_tree(cm, rel_hosts, m)))


def ring_exact(p: int, ctx) -> bool:
    """A ring's form (`ring_recurrence` on mixed edges) is exact while no host has two ranks
    sending off-host at once."""
    host_of = _host_of(p, ctx)
    leaving = [host_of[r] for r in range(p) if host_of[(r + 1) % p] != host_of[r]]
    return len(leaving) == len(set(leaving))


def network_closed_form(algo: Algorithm, cm: CostModel, p: int, size_bytes: int, ctx) -> float:
    """Latency (ns) of one call of the network algorithm `algo` (a record, fallbacks already
    resolved) by its closed form on `cm`: 0 on one rank, every message a shared-memory one when
    every rank is on one host.

    InputError naming the algorithm if it runs on a pool or has no closed form.
    """
    if algo.transport != NETWORK:
        raise InputError(f"workload.algorithm: {algo.name} runs on a CXL pool; its closed form is "
                         "cxl_pool.cxl_pool_closed_form on the pool's figures (analytic.closed_form with "
                         "CXLPoolTransport.figures()), not a network CostModel")
    if isinstance(algo.cost, NoClosedForm):
        raise InputError(f"workload.algorithm: {algo.collective} algorithm {algo.name} has no closed form "
                         f"({algo.cost.reason}); use engine des")
    if p == 1:
        return 0.0
    if len(ctx.groups or ()) == 1:
        cm = replace(cm, intra_only=True)
    return algo.cost(cm, p, size_bytes, ctx)
