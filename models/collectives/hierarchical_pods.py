"""The allgather over pods of CXL pools joined by a network (`pods`), multi-leader, with its closed form.

On n pods of q hosts (rank r = host r % q of pod r // q, `cxlsim.fabric.pods.PodsTransport`):

1. network phase, multi-leader: the ranks with the same host index j in every pod (one per
   pod, n in all) allgather their own m-byte blocks over the network, each over its own NIC,
   with the network algorithm `ctx.inter` (the q exchanges run at once, on disjoint hosts);
   each rank then holds n blocks, its 1/q share of the pods' data;
2. pool phase: inside every pod the q hosts allgather those n-block sets (n x m bytes each)
   through the pod's pool (`cxl_pool`), so every rank ends with all n x q blocks in rank order.

The pool phase before the network one that a reduction or a single-leader scheme needs is
empty for allgather: each host's 1/q share of its pod's data is its own block.

Closed form (`pods_closed_form`, on `PodFigures`): the network algorithm's form on n ranks
and m bytes (`network_forms`) plus the pool allgather's exact form on q hosts and n x m bytes
(`pool_forms`). It is the DES's cost when the q concurrent network exchanges share no link
(a star: every host has its own link to the switch) and every rank ends the network phase
at the same time (the symmetric algorithms: ring, recursive doubling, Bruck), so the pool
phase starts together as its form assumes; the tests hold DES = form there. On a fat tree
the form is approximate: it charges every message the longest route (`CostModel.from_network`),
and with oversubscription the exchanges share uplinks, which it does not charge.
"""
from __future__ import annotations

from dataclasses import dataclass

from cxlsim.fabric.pool_transport import PoolFigures
from cxlsim.models.collectives.base import HYBRID, NO_CONTEXT, Algorithm, Group
from cxlsim.models.collectives.cxl_pool import cxl_pool, cxl_pool_closed_form
from cxlsim.models.collectives.network_forms import CostModel, network_closed_form

__all__ = ["PodFigures", "pods_closed_form", "pods_allgather_algorithm", "INTER_TAG"]

INTER_TAG = 20000
"""Message tag of the network phase (clear of the tags the network algorithms use inside)."""


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


def pods_allgather_algorithm(lookup) -> Algorithm:
    """The `pods` allgather record; `lookup` (the registry's) finds the network phase's algorithm by name."""

    def run(g, m, mine, ctx=NO_CONTEXT):
        t = g.transport
        q, n = t.hosts, t.pods
        if n > 1:
            inter, _ = lookup("allgather", ctx.inter, n)
            members = [g.local + i * q for i in range(n)]
            share = yield from inter.run(Group(g.net, members, INTER_TAG), m, mine, NO_CONTEXT)
        else:
            share = [mine]
        sets = yield from cxl_pool(g.pod_endpoint(), n * m, tuple(share))
        return [sets[j][i] for i in range(n) for j in range(q)]

    def cost(fig: PodFigures, p: int, m: int, ctx=NO_CONTEXT) -> float:
        return pods_closed_form(fig, m, lookup("allgather", ctx.inter, fig.pods)[0] if fig.pods > 1 else None)

    return Algorithm("allgather", "pods", run, cost, transport=HYBRID,
                     source="cxlsim: multi-leader network allgather between pods, then cxl_pool inside each pod")


def pods_closed_form(fig: PodFigures, m: int, inter: Algorithm | None) -> float:
    """Latency (ns) of one `pods` allgather of m-byte blocks, every rank starting together on a fresh fabric:
    the network algorithm `inter` on n ranks (none when n = 1) plus the pool allgather of n x m bytes on q hosts."""
    network = network_closed_form(inter, fig.network, fig.pods, m, NO_CONTEXT) if inter is not None else 0.0
    return network + cxl_pool_closed_form(fig.pool, fig.hosts, fig.pods * m, fig.pool.coherence)
