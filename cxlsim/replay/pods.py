"""Replay on hybrid pod fabrics: pods of hosts on CXL pools, every host also on a network.

A pod fabric (`fabric.preset: cxl-pods`, `cxlsim.fabric.pod_setup`) runs one rank per host;
trace rank r is host r % q of pod r // q (q hosts per pod, n pods), as
`cxlsim.fabric.pods.PodsTransport` numbers them.

- **Point-to-point** (`PodMessages`): a message between two hosts of one pod goes through
  that pod's pool with the pool send/recv protocol (`cxlsim.replay.pool_messages`, the
  pod's local ranks), a message between pods over the network.
- **Collectives** (`pods_plan`): allgather runs the multi-leader pods allgather
  (`pods`: the network allgather among the hosts of one index in every pod, the selector's
  algorithm on n ranks, then `cxl_pool` inside each pod; closed form
  `cxlsim.models.collectives.hierarchical_pods.pods_closed_form`), barrier the same
  with 0-byte blocks (a rank leaves once its pod's hosts are in, each of which heard from
  its peers in every pod). Every other collective runs its network algorithm (as the
  selector picks it for P ranks) over `PodMessages`, noted.

Each part of a pod fabric books a rank's CPU on its own timeline (the network's for
compute and network messages, the pod pool's for pool messages), so a pool message's
polls do not delay the rank's compute as a network receive's overhead does; the note
says so.
"""
from __future__ import annotations

from dataclasses import replace

from cxlsim.fabric.transport import Transport
from cxlsim.models.collectives import registry, runner, selectors
from cxlsim.models.collectives.cxl_pool import PoolLayout
from cxlsim.replay.collectives import Plan, plan
from cxlsim.replay.pool_messages import PoolMessages

__all__ = ["PodMessages", "pods_plan", "pool_bytes_needed", "CPU_NOTE"]

CPU_NOTE = ("pods: a rank's pool messages use the pod pool's CPU timeline, its compute and network messages the "
            "network's (pool message polls do not delay compute)")


class PodMessages(Transport):
    """MPI-style messages on a `PodsTransport`: through the pod's pool inside a pod, over the network between pods."""

    kind = "network"

    def __init__(self, pods, low_bytes: int = 0):
        self.pods, self.env, self.size, self.hosts = pods, pods.env, pods.size, pods.hosts
        self.network = pods.network
        self.mailboxes = [PoolMessages(pool, low_bytes=low_bytes) for pool in pods.pools]

    @property
    def messages(self) -> int:
        return sum(m.messages for m in self.mailboxes)

    def send(self, src, dst, size_bytes, payload=None, tag=0):
        q = self.hosts
        if src // q == dst // q:
            return self.mailboxes[src // q].send(src % q, dst % q, size_bytes, payload, tag)
        return self.network.send(src, dst, size_bytes, payload, tag)

    def recv(self, dst, src, tag=0):
        q = self.hosts
        if src // q == dst // q:
            return self.mailboxes[dst // q].recv(dst % q, src % q, tag)
        return self.network.recv(dst, src, tag)

    def compute(self, rank, duration_ns):
        return self.network.compute(rank, duration_ns)

    def copy(self, rank, size_bytes):
        return self.network.copy(rank, size_bytes)

    def reduce(self, rank, size_bytes):
        return self.network.reduce(rank, size_bytes)


def pods_plan(call, pods: int, hosts: int, library: str, ctx: runner.Context) -> Plan:
    """The Plan of traced collective `call` on n = `pods` pods of q = `hosts` hosts (see the module docstring)."""
    kind = call.kind
    if kind not in ("allgather", "barrier"):
        base = plan(call, pods * hosts, library, ctx, False)
        over = f"{kind}: a network algorithm over pod messages (pool mailboxes inside a pod, the network between)"
        return replace(base, note="; ".join(filter(None, [base.note, over])))
    size = call.size_bytes if kind == "allgather" else 0
    notes = ["barrier: the pods allgather of 0 B"] if kind == "barrier" else []
    inter = "ring"
    if pods > 1:
        name, _ = selectors.select(library, "allgather", pods, size)
        algo, fallback = registry.lookup("allgather", name, pods)
        inter = algo.name
        notes.append(f"{kind} between pods: {inter}" + (f" ({fallback})" if fallback else ""))
    return Plan(kind, "allgather", "pods", size, replace(ctx, root=call.root, elements=1, inter=inter),
                "; ".join(notes), on_pool=True)


def pool_bytes_needed(plans, pods: int, hosts: int) -> int:
    """Bytes at the bottom of each pod's pool that the pods allgathers of `plans` use (n x m-byte blocks on q hosts)."""
    return max((PoolLayout(hosts, pods * pl.size_bytes).total_bytes for pl in plans if pl.on_pool), default=0)
