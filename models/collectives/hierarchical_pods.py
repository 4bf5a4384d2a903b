"""Collectives over pods of CXL pools joined by a network (`pods`): allgather, allreduce, broadcast, alltoall.

On n pods of q hosts (rank r = host j = r % q of pod k = r // q, `cxlsim.fabric.pods.PodsTransport`),
each collective is pool phases inside the pods and one network phase between them, run
multi-leader: the n ranks with the same host index j (one per pod) form network group j, and
the q groups exchange at once, each rank over its own NIC, so no NIC carries a pod's whole
data. The network phase's algorithm is `ctx.inter` (the `workload.selector` library's choice
for n ranks and the phase's size). Each pool phase runs in its own region of the pod's pool
(`PodEndpoint.pod_region`), so the phases' flag protocols never meet.

- **allgather** (m-byte blocks): network allgather of the own block in group j (each rank then
  holds n blocks, its 1/q share of the pods' data), then the pool allgather (`cxl_pool`) of those
  n x m bytes inside every pod (on a sparse Octopus pod, `octopus_pool.octopus_allgather`: the
  pool allgather on every device at once). The pool phase before the network one is empty for
  allgather. On a sparse pod every pool phase is `octopus_pool`'s: the pool collective on every
  device's k hosts at once. The allreduce's first phase there is the cheaper by closed form of the
  allgather of the vectors and a fold (host j then takes block j of the pod's sum) and the
  alltoall of the blocks and a fold (a reduce-scatter).
- **allreduce** (s-byte vectors, seg = ceil(s/q)): the pool reduce_scatter inside every pod (rank
  j ends with block j of its pod's sum), the network allreduce of that seg-byte block in group j,
  then the pool allgather of the seg-byte blocks inside every pod.
- **broadcast** (s bytes from root r0 in pod k0): the pool broadcast inside pod k0 (every host of
  it gets the data), the network broadcast of share j (seg = ceil(s/q) bytes) in group j from
  pod k0's member, then the pool allgather of the shares inside every other pod.
- **alltoall** (m bytes per destination): the pool alltoall inside every pod moves rank (k, j)'s
  blocks for hosts (k', j') of every pod k' to its pod's host j' (n x m bytes per local
  destination), then the network alltoall in group j' moves the q blocks for pod k' to its host
  j' (q x m bytes per destination). There is no second pool phase.

Closed forms (on `PodFigures`): the sum of the phases' forms, each phase taken to start on every
rank together: `pool_forms` / `pool_collective_forms` on q hosts, `network_forms` on n ranks. The
DES equals the sum (to 1e-9) when every rank ends each phase at the same time: the allgather on a
star network with the symmetric network algorithms (ring, recursive doubling, Bruck), and the
allreduce and alltoall on an uncongested pool (one switch or none, q x host bandwidth within the
devices') whose column reads span the same lines on every host (the allreduce within 0.5%
otherwise, as the pool reduce_scatter's form).

The broadcast's phases do not end together, so its form (`pods_broadcast_cost`) follows each
host. In the DES's order of events:
1. the home pod's pool broadcast: host j ends at a_j (`pool_collective_forms.broadcast_ends`: the
   root before its readers, which in flush mode also differ by their place in the device's queue);
2. network group j starts when its root, pod k0's host j, ends (a_j; every other member already
   waits), so pod k's host j ends the network phase at a_j + e_k, where e_k is the network
   algorithm's end for pod k's root-relative rank (`broadcast_ends.network_ends`, the same in
   every group: the groups share no link on a star);
3. pod k != k0 runs the pool allgather of the shares with host j starting at a_j + e_k: its end
   is e_k + G(a), G the pool allgather's form with per-rank starts (`cxl_pool_closed_form`'s
   `starts`; a sparse pod: each device with its hosts' starts, the latest device).
The latency is max(max_j a_j + e_k0, max_{k != k0} e_k + G(a)): DES = form to 1e-9 on a star with
an uncongested pool (tests/test_pods_broadcast_form.py), for every network broadcast with a
per-rank form (all built-in ones). The sum of the phases' forms, which the early root made wrong
by up to 11%, remains only for a plug-in network broadcast without one. On a fat tree the forms
charge every network message the longest route and no shared uplinks (approximate).
"""
from __future__ import annotations

from dataclasses import dataclass

from cxlsim.fabric.octopus import design
from cxlsim.fabric.pool_transport import PoolFigures
from cxlsim.models.collectives import pool_collectives as pc
from cxlsim.models.collectives.base import HYBRID, NO_CONTEXT, Algorithm, Context, Group, split
from cxlsim.models.collectives.broadcast_ends import network_ends
from cxlsim.models.collectives.cxl_pool import cxl_pool, cxl_pool_closed_form
from cxlsim.models.collectives.network_forms import CostModel, network_closed_form
from cxlsim.models.collectives.octopus_pool import (octopus_allgather, octopus_allgather_cost, octopus_allreduce,
                                                    octopus_allreduce_cost, octopus_alltoall, octopus_alltoall_cost,
                                                    octopus_broadcast, octopus_reduce_scatter,
                                                    octopus_reduce_scatter_cost)
from cxlsim.models.collectives.pool_collective_forms import alltoall_cost, broadcast_ends, reduce_scatter_cost

__all__ = ["PodFigures", "pods_closed_form", "pods_broadcast_cost", "pods_algorithms", "phase_sizes",
           "sparse_allreduce_costs", "sparse_allreduce_first",
           "INTER_TAG", "PODS_COLLECTIVES"]

INTER_TAG = 20000
"""Message tag of the network phase (clear of the tags the network algorithms use inside)."""

PODS_COLLECTIVES = ("allgather", "allreduce", "broadcast", "alltoall")
"""The collectives with a `pods` algorithm."""

_SOURCE = "cxlsim: pool phases inside each pod, a multi-leader network phase between pods"


@dataclass(frozen=True)
class PodFigures:
    """What the hybrid closed forms take: one pod's pool figures and the network's LogGP figures."""

    pool: PoolFigures
    """One pod's pool (`CXLPoolTransport.figures()` on `hosts` hosts)."""
    network: CostModel
    """The network's figures on one uncongested route (`CostModel.from_network`)."""
    hosts: int
    """Hosts per pod, q."""
    pods: int
    """Pods, n (n x q ranks in all)."""
    heads: int = 0
    """A sparse pod's device heads k (its pool figures are one device's on k hosts); 0: a dense pod."""


def phase_sizes(collective: str, size_bytes: int, hosts: int, pods: int) -> int:
    """Bytes the network phase's call takes (its size convention) for a pods call of `size_bytes`."""
    if collective == "allgather":
        return size_bytes
    if collective == "alltoall":
        return hosts * size_bytes
    return -(-size_bytes // hosts)  # allreduce, broadcast: one host's block or share of the vector


def _group(g, t):
    """Network group of this rank: the same host index in every pod, ordered by pod."""
    return Group(g.net, [g.local + i * t.hosts for i in range(t.pods)], INTER_TAG)


def _inter(lookup, collective, ctx, n):
    return lookup(collective, ctx.inter, n)[0]


def _allgather(lookup):
    def run(g, m, mine, ctx=NO_CONTEXT):
        t = g.transport
        q, n = t.hosts, t.pods
        share = [mine]
        if n > 1:
            share = yield from _inter(lookup, "allgather", ctx, n).run(_group(g, t), m, mine, NO_CONTEXT)
        if t.sparse:
            sets = yield from octopus_allgather(g.pod_endpoint(), n * m, tuple(share))
        else:
            sets = yield from cxl_pool(g.pod_region(0), n * m, tuple(share))
        return [sets[j][i] for i in range(n) for j in range(q)]
    return run


def _allreduce(lookup):
    def run(g, s, vec, ctx=NO_CONTEXT):
        t = g.transport
        q, n = t.hosts, t.pods
        seg = phase_sizes("allreduce", s, q, n)
        pod = t.pools[g.pod]
        if t.sparse and sparse_allreduce_first(pod.figures(), q, s, pod.heads) == "allgather":
            total = yield from octopus_allreduce(g.pod_endpoint(), s, vec)
            block = None if total is None else split(total, q)[g.local]
        elif t.sparse:
            block = yield from octopus_reduce_scatter(g.pod_endpoint(), s, vec)
        else:
            block = yield from pc.reduce_scatter(g.pod_region(0), s, vec)
        if n > 1 and block is not None:
            block = yield from _inter(lookup, "allreduce", ctx, n).run(_group(g, t), seg, block, NO_CONTEXT)
        if t.sparse:
            blocks = yield from octopus_allgather(g.pod_endpoint(), seg, block, region=1)
        else:
            blocks = yield from cxl_pool(g.pod_region(1), seg, block)
        if any(b is None or not isinstance(b, tuple) for b in blocks):
            return None
        return tuple(x for b in blocks for x in b)
    return run


def _broadcast(lookup):
    def run(g, s, data, ctx=NO_CONTEXT):
        t = g.transport
        q, n = t.hosts, t.pods
        root = ctx.root
        home, seg = root // q, phase_sizes("broadcast", s, q, n)
        if g.pod == home and t.sparse:
            data = yield from octopus_broadcast(g.pod_endpoint(), s, data, root % q)
        elif g.pod == home:
            data = yield from pc.broadcast(g.pod_region(0), s, data, Context(root=root % q))
        share = (g.local, data) if g.pod == home else None
        if n > 1:
            share = yield from _inter(lookup, "broadcast", ctx, n).run(_group(g, t), seg, share, Context(root=home))
        if g.pod == home:
            return data
        if t.sparse:
            shares = yield from octopus_allgather(g.pod_endpoint(), seg, share, region=1)
        else:
            shares = yield from cxl_pool(g.pod_region(1), seg, share)
        labels = {d for _, d in shares} if all(isinstance(x, tuple) and len(x) == 2 for x in shares) else set()
        if [j for j, _ in shares] != list(range(q)) or len(labels) != 1:
            return shares
        return labels.pop()
    return run


def _alltoall(lookup):
    def run(g, m, blocks, ctx=NO_CONTEXT):
        t = g.transport
        q, n = t.hosts, t.pods
        # local destination j' gets this rank's blocks for host j' of every pod
        rows = [tuple(blocks[k * q + jd] for k in range(n)) for jd in range(q)]
        if t.sparse:
            column = yield from octopus_alltoall(g.pod_endpoint(), n * m, rows)
        else:
            column = yield from pc.alltoall(g.pod_region(0), n * m, rows)
        # column[j] = (blocks from host j of this pod for host g.local of pods 0..n-1)
        if any(c is None for c in column):
            return None
        outgoing = [tuple(column[j][k] for j in range(q)) for k in range(n)]
        incoming = outgoing
        if n > 1:
            incoming = yield from _inter(lookup, "alltoall", ctx, n).run(_group(g, t), q * m, outgoing, NO_CONTEXT)
        # incoming[k] = the blocks from hosts 0..q-1 of pod k for this rank
        return [incoming[k][j] for k in range(n) for j in range(q)]
    return run


def pods_closed_form(fig: PodFigures, m: int, inter: Algorithm | None) -> float:
    """Latency (ns) of one `pods` allgather of m-byte blocks, every rank starting together on a fresh fabric:
    the network algorithm `inter` on n ranks (none when n = 1) plus the pool allgather of n x m bytes on q hosts."""
    network = network_closed_form(inter, fig.network, fig.pods, m, NO_CONTEXT) if inter is not None else 0.0
    if fig.heads:
        return network + octopus_allgather_cost(fig.pool, fig.heads, fig.pods * m)
    return network + cxl_pool_closed_form(fig.pool, fig.hosts, fig.pods * m, fig.pool.coherence)


def pods_broadcast_cost(fig: PodFigures, s: int, root: int, inter: Algorithm | None) -> float:
    """Latency (ns) of one `pods` broadcast of s bytes from rank `root`, the network algorithm `inter` between
    the pods (None: one pod), every rank starting together on a fresh fabric: each host's end of the home pod's
    pool broadcast starts its network group, whose per-rank ends (`broadcast_ends.network_ends`) start the
    other pods' allgathers (see the module docstring). Where `inter` has no per-rank form there, the phases'
    sum, each taken to start together (approximate)."""
    q, n = fig.hosts, fig.pods
    home, j0 = divmod(root, q)
    starts = _home_pool_ends(fig, s, j0)
    if n == 1:
        return max(starts)
    seg = phase_sizes("broadcast", s, q, n)
    ends = network_ends(inter.name, fig.network, n, seg, home)
    if ends is None:
        return (max(starts) + network_closed_form(inter, fig.network, n, seg, Context(root=home))
                + _pod_gather(fig, seg, [0.0] * q))
    return max(max(starts) + ends[0], float(ends[1:].max()) + _pod_gather(fig, seg, starts))


def _home_pool_ends(fig: PodFigures, s: int, j0: int) -> list:
    """Each host's end (ns) of the home pod's pool broadcast from its host j0 (a sparse pod: on each of the
    root's devices at once; a reader ends as on the one device it shares with the root)."""
    if not fig.heads:
        return list(broadcast_ends(fig.pool, fig.hosts, s, j0))
    ends = [0.0] * fig.hosts
    for device in design(fig.hosts, fig.heads):
        if j0 in device:
            on_device = broadcast_ends(fig.pool, fig.heads, s, device.index(j0))
            for i, h in enumerate(device):
                ends[h] = max(ends[h], on_device[i])
    return ends


def _pod_gather(fig: PodFigures, m: int, starts) -> float:
    """When a pod's allgather of m-byte blocks ends (ns) if its host j starts at starts[j]: the pool allgather's
    form with those starts (a sparse pod: on every device's hosts at once, the latest device)."""
    pool = fig.pool
    if not fig.heads:
        return cxl_pool_closed_form(pool, fig.hosts, m, pool.coherence, starts=starts)
    patterns = {tuple(starts[h] for h in device) for device in design(fig.hosts, fig.heads)}
    return max(cxl_pool_closed_form(pool, fig.heads, m, pool.coherence, starts=list(p)) for p in patterns)


def _network(lookup, collective, fig, size, ctx) -> float:
    """The network phase's closed form (allreduce, alltoall: no root), ns."""
    if fig.pods == 1:
        return 0.0
    algo = _inter(lookup, collective, ctx, fig.pods)
    return network_closed_form(algo, fig.network, fig.pods, phase_sizes(collective, size, fig.hosts, fig.pods),
                               NO_CONTEXT)


def sparse_allreduce_costs(pool: PoolFigures, q: int, s: int, heads: int) -> dict:
    """The two first phases of a sparse pod's allreduce by closed form, ns: 'allgather' (of the vectors, then a
    fold: every host gets the pod's sum) and 'alltoall' (of the blocks, then a fold: host j gets block j)."""
    return {"allgather": octopus_allreduce_cost(pool, heads, q, s),
            "alltoall": octopus_reduce_scatter_cost(pool, heads, q, s)}


def sparse_allreduce_first(pool: PoolFigures, q: int, s: int, heads: int) -> str:
    """The cheaper first phase of a sparse pod's allreduce (ties: the allgather, whose form is exact)."""
    costs = sparse_allreduce_costs(pool, q, s, heads)
    return "alltoall" if costs["alltoall"] < costs["allgather"] else "allgather"


def _costs(lookup):
    def allgather(fig, p, m, ctx=NO_CONTEXT):
        return pods_closed_form(fig, m, _inter(lookup, "allgather", ctx, fig.pods) if fig.pods > 1 else None)

    def gather(fig, m):  # the pod's allgather of m-byte blocks
        if fig.heads:
            return octopus_allgather_cost(fig.pool, fig.heads, m)
        return cxl_pool_closed_form(fig.pool, fig.hosts, m, fig.pool.coherence)

    def allreduce(fig, p, s, ctx=NO_CONTEXT):
        q, seg = fig.hosts, phase_sizes("allreduce", s, fig.hosts, fig.pods)
        first = (sparse_allreduce_costs(fig.pool, q, s, fig.heads)[sparse_allreduce_first(fig.pool, q, s, fig.heads)] if fig.heads
                 else reduce_scatter_cost(fig.pool, q, s))
        return first + _network(lookup, "allreduce", fig, s, ctx) + gather(fig, seg)

    def broadcast(fig, p, s, ctx=NO_CONTEXT):
        return pods_broadcast_cost(fig, s, ctx.root, _inter(lookup, "broadcast", ctx, fig.pods) if fig.pods > 1
                                   else None)

    def alltoall(fig, p, m, ctx=NO_CONTEXT):
        first = (octopus_alltoall_cost(fig.pool, fig.heads, fig.pods * m) if fig.heads else
                 alltoall_cost(fig.pool, fig.hosts, fig.pods * m))
        return first + _network(lookup, "alltoall", fig, m, ctx)

    return {"allgather": allgather, "allreduce": allreduce, "broadcast": broadcast, "alltoall": alltoall}


def pods_algorithms(lookup) -> tuple[Algorithm, ...]:
    """The `pods` records of PODS_COLLECTIVES; `lookup` (the registry's) finds the network phase's algorithm."""
    runs = {"allgather": _allgather(lookup), "allreduce": _allreduce(lookup), "broadcast": _broadcast(lookup),
            "alltoall": _alltoall(lookup)}
    costs = _costs(lookup)
    return tuple(Algorithm(c, "pods", runs[c], costs[c], transport=HYBRID, source=f"{_SOURCE} ({c})")
                 for c in PODS_COLLECTIVES)
