"""Replay on hybrid pod fabrics: pods of hosts on CXL pools, every host also on a network.

A pod fabric (`fabric.preset: cxl-pods`, `cxlsim.fabric.pod_setup`) runs one rank per host;
trace rank r is host r % q of pod r // q (q hosts per pod, n pods), as
`cxlsim.fabric.pods.PodsTransport` numbers them.

- **Point-to-point** (`PodMessages`): a message between two hosts of one pod goes through
  that pod's pool with the pool send/recv protocol (`cxlsim.replay.pool_messages`, the
  pod's local ranks), a message between pods over the network.
- **Collectives** (`pods_plan`): allgather, allreduce, bcast and alltoall run the
  multi-leader pods collectives of `cxlsim.models.collectives.hierarchical_pods` (pool phases
  inside each pod, in regions 0 and 1 of its pool, and a network phase among the hosts of one
  index in every pod, with the algorithm the selector picks for n pods and that phase's size);
  barrier runs the pods allgather with 0-byte blocks (a rank leaves once its pod's hosts are
  in, each of which heard from its peers in every pod). Every other collective (reduce,
  gather, scatter, reducescatter) runs its network algorithm (as the selector picks it for P
  ranks) over `PodMessages`, noted. For each call the pods collective is chosen only if its
  closed form (`hierarchical_pods`) is below that of the network algorithm the selector picks
  for all P ranks (`cxlsim.models.collectives.analytic.cost`), as `cxlsim simulate` chooses;
  otherwise the network algorithm runs on the network alone (`NetworkPlan`), noted with both
  forms. Sparse (Octopus) pods are refused.

Each part of a pod fabric books a rank's CPU on its own timeline (the network's for
compute and network messages, the pod pool's for pool messages), so a pool message's
polls do not delay the rank's compute as a network receive's overhead does; the note
says so.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from cxlsim.fabric.pods import REGIONS
from cxlsim.fabric.transport import Transport
from cxlsim.errors import InputError
from cxlsim.models.collectives import analytic, registry, runner, selectors
from cxlsim.models.collectives.hierarchical_pods import PodFigures, phase_sizes
from cxlsim.replay.collectives import Plan, plan
from cxlsim.replay.pool_messages import PoolMessages

__all__ = ["PodMessages", "PodsPlan", "NetworkPlan", "pods_plan", "inter_algorithm", "pod_figures", "mailbox_floor", "CPU_NOTE"]

_PODS = {"allgather": "allgather", "barrier": "allgather", "allreduce": "allreduce", "bcast": "broadcast",
         "alltoall": "alltoall"}
"""Traced kind -> the pods collective that runs it."""
_REGIONS_USED = 2
"""The pods collectives use regions 0 and 1 of each pod's pool; the mailboxes go above them."""

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


@dataclass(frozen=True)
class PodsPlan(Plan):
    """A traced collective run by a pods record of `hierarchical_pods` (on the rank's `PodEndpoint`)."""

    pods_collective: str = ""

    def run(self, ep, tag: int):
        record = registry.algorithm(self.pods_collective, "pods")
        ctx = replace(self.ctx, elements=ep.size)
        data = runner.initial(self.pods_collective, ep.rank, ep.size, ctx)
        return (yield from record.run(ep, self.size_bytes, data, ctx))


@dataclass(frozen=True)
class NetworkPlan(Plan):
    """A traced collective run by a network algorithm on the pods' network alone (the rank's `PodEndpoint.net`)."""

    def run(self, ep, tag: int):
        plain = Plan(**{f.name: getattr(self, f.name) for f in fields(Plan)})
        return (yield from replace(plain, on_pool=False).run(ep.net, tag))


def pod_figures(pods) -> PodFigures:
    """The closed forms' figures of a `PodsTransport` (InputError for sparse Octopus pods)."""
    if pods.sparse:
        raise InputError("--fabric: sparse (Octopus) pods are not replayed: their pools run only the allgather")
    network = pods.network
    cm = analytic.CostModel.from_network(network.network, network.chunk_bytes)
    return PodFigures(pods.pools[0].figures(), cm, pods.hosts, pods.pods)


def inter_algorithm(collective: str, size: int, pods: int, hosts: int, library: str) -> tuple[str, str | None]:
    """The network phase's algorithm of a pods `collective` of `size` bytes (the selector's for n = `pods` ranks at
    the phase's size, with its fallback note); 'ring' when there is one pod (no network phase)."""
    if pods == 1:
        return "ring", None
    name, _ = selectors.select(library, collective, pods, phase_sizes(collective, size, hosts, pods))
    algo, fallback = registry.lookup(collective, name, pods)
    return algo.name, fallback


def pods_plan(call, pods: int, hosts: int, library: str, ctx: runner.Context, fig: PodFigures) -> Plan:
    """The Plan of traced collective `call` on n = `pods` pods of q = `hosts` hosts (see the module docstring)."""
    kind, p = call.kind, pods * hosts
    if kind not in _PODS:
        base = plan(call, p, library, ctx, False)
        over = f"{kind}: a network algorithm over pod messages (pool mailboxes inside a pod, the network between)"
        return replace(base, note="; ".join(filter(None, [base.note, over])))
    collective = _PODS[kind]
    size = 0 if kind == "barrier" else call.size_bytes
    inter, fallback = inter_algorithm(collective, size, pods, hosts, library)
    notes = [f"{kind} between pods: {inter}" + (f" ({fallback})" if fallback else "")] if pods > 1 else []
    pods_ctx = replace(ctx, root=call.root, inter=inter)
    pods_ns = registry.algorithm(collective, "pods").cost(fig, p, size, pods_ctx)
    network = plan(call, p, library, ctx, False)
    network_ns = analytic.cost(network.collective, network.algorithm, p, network.size_bytes, fig.network,
                               network.ctx)[0]
    if network_ns < pods_ns:
        why = (f"{kind}: the network's {network.algorithm} on the network alone ({network_ns / 1e3:.3f} us by "
               f"closed form, the pods algorithm's {pods_ns / 1e3:.3f} us)")
        return NetworkPlan(**{f.name: getattr(network, f.name) for f in fields(Plan)} |
                           {"note": "; ".join(filter(None, [network.note, why])), "on_pool": True})
    if kind == "barrier":
        notes.insert(0, "barrier: the pods allgather of 0 B")
    return PodsPlan(kind, collective, "pods", size, pods_ctx, "; ".join(notes), on_pool=True,
                    pods_collective=collective)


def mailbox_floor(pods) -> int:
    """The lowest byte of a pod's pool the mailboxes may use: above the regions the pods collectives use."""
    return _REGIONS_USED * (pods.pools[0].pool_bytes // REGIONS)
