"""Replay on hybrid pod fabrics: pods of hosts on CXL pools, every host also on a network.

A pod fabric (`fabric.preset: cxl-pods`, `cxlsim.fabric.pod_setup`) runs one rank per host
(or K, `cxlsim.replay.shared_hosts`: then q counts a pod's ranks);
fabric rank h is rank h % q of pod h // q (q ranks per pod, n pods), as
`cxlsim.fabric.pods.PodsTransport` numbers them, and `--placement` says which fabric rank
each trace rank runs as (`cxlsim.replay.placed`; block: the same number), so it decides which
ranks share a pod.

- **Point-to-point** (`PodMessages`): a message between pods goes over the network; a message
  between two hosts of one pod goes through that pod's pool with the pool send/recv protocol
  (`cxlsim.replay.pool_messages`, the pod's local ranks) or over the network, whichever one
  message's time is lower for its size (`cxlsim.replay.pod_routes`), noted with the sizes and
  both times.
- **Collectives** (`pods_plan`): allgather, allreduce, bcast and alltoall run the
  multi-leader pods collectives of `cxlsim.models.collectives.hierarchical_pods` (pool phases
  inside each pod, in regions 0 and 1 of its pool (the allgather's and barrier's in region
  ALLGATHER_REGION, apart from the step collectives' flags), and a network phase among the hosts of one
  index in every pod, with the algorithm the selector picks for n pods and that phase's size);
  barrier runs the pods allgather with 0-byte blocks (a rank leaves once its pod's hosts are
  in, each of which heard from its peers in every pod). Every other collective (reduce,
  gather, scatter, reducescatter) runs its network algorithm (as the selector picks it for P
  ranks) over `PodMessages`, noted. For each call the pods collective is chosen only if its
  closed form (`hierarchical_pods`) is below that of the network algorithm the selector picks
  for all P ranks (`cxlsim.models.collectives.analytic.cost`), as `cxlsim simulate` chooses;
  otherwise the network algorithm runs on the network alone (`NetworkPlan`), noted with both
  forms. A bcast takes the pods broadcast only where its pool phase may reuse its buffer
  (`pods_plans`): in the root's pod that phase's root waits for the readers' acknowledgements
  of the call two before it in region 0 of the pod's pool (`pool_collectives.broadcast`), so
  that call must have been a pods broadcast from the same root, or there must be none;
  otherwise the bcast runs its network algorithm over `PodMessages`, noted. Sparse (Octopus)
  pods are refused.

Each part of a pod fabric books a rank's CPU on its own timeline (the network's for
compute and network messages, the pod pool's for pool messages), so a pool message's
polls do not delay the rank's compute as a network receive's overhead does; the note
says so.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields, replace

import simpy

from cxlsim.fabric.pods import REGIONS, PodEndpoint
from cxlsim.fabric.matching import Matching
from cxlsim.fabric.transport import Transport
from cxlsim.errors import InputError
from cxlsim.models.collectives import analytic, registry, runner, selectors
from cxlsim.models.collectives.hierarchical_pods import PodFigures, phase_sizes
from cxlsim.replay.collectives import Plan, plan
from cxlsim.replay.pod_routes import POOL
from cxlsim.replay.pool_messages import PoolMessages

__all__ = ["PodMessages", "PodsPlan", "ShiftedPodEndpoint", "ALLGATHER_REGION", "NetworkPlan", "pods_plan",
           "pods_plans", "inter_algorithm", "pod_figures", "mailbox_floor", "CPU_NOTE"]

_PODS = {"allgather": "allgather", "barrier": "allgather", "allreduce": "allreduce", "bcast": "broadcast",
         "alltoall": "alltoall"}
"""Traced kind -> the pods collective that runs it."""
ALLGATHER_REGION = 2
"""The region the pods allgather (and barrier) runs its pool phase in, instead of its own region 0: the pool
allgather's flags hold the epoch while the step collectives' (allreduce's reduce-scatter, bcast, alltoall, in
region 0) hold 2 x epoch (+1), on other flag lines of the same offsets, so in one region a poll could take another
protocol's flag for its own and read before the data is written."""
_REGIONS_USED = 3
"""The pods collectives use regions 0, 1 and ALLGATHER_REGION of each pod's pool; the mailboxes go above them."""

CPU_NOTE = ("pods: a rank's pool messages use the pod pool's CPU timeline, its compute and network messages the "
            "network's (pool message polls do not delay compute)")


class PodMessages(Transport):
    """MPI-style messages on a `PodsTransport`: between pods over the network; inside a pod through the pod's pool
    or over the network, as `route` (a `MessageRoute`) chooses by size, or always the pool when `route` is None.

    Messages of one (source, destination, tag) are delivered in send order whichever way each went (MPI's
    non-overtaking rule: a receiver-side reorder, which costs no time); a message inside a pod posts its
    receive on its way when it is sent, so a network one's receive overhead is booked when it lands, as a
    progress engine would.
    """

    kind = "network"

    def __init__(self, pods, low_bytes: int = 0, route=None):
        self.pods, self.env, self.size, self.hosts = pods, pods.env, pods.size, pods.hosts
        self.network = pods.network
        self.mailboxes = [PoolMessages(pool, low_bytes=low_bytes) for pool in pods.pools]
        self.route = route
        self._sent = defaultdict(int)        # (dst, src, tag) -> messages sent inside a pod
        self._next = defaultdict(int)        # (dst, src, tag) -> the next one to deliver
        self._landed = defaultdict(dict)     # (dst, src, tag) -> {sequence number: payload} landed early
        self._matching = Matching()          # (dst, src, tag) -> payloads delivered in order, or receives

    @property
    def messages(self) -> int:
        return sum(m.messages for m in self.mailboxes)

    def send(self, src, dst, size_bytes, payload=None, tag=0):
        q = self.hosts
        if src // q != dst // q:
            return self.network.send(src, dst, size_bytes, payload, tag)
        key = (dst, src, tag)
        number = self._sent[key]
        self._sent[key] = number + 1
        if self.route is None or self.route.choose(size_bytes) == POOL:
            box = self.mailboxes[src // q]
            done = box.send(src % q, dst % q, size_bytes, payload, tag)
            landed = box.recv(dst % q, src % q, tag)
        else:
            done = self.network.send(src, dst, size_bytes, payload, tag)
            landed = self.network.recv(dst, src, tag)
        landed.callbacks.append(lambda event: self._land(key, number, event.value))
        return done

    def _land(self, key, number, payload):
        early = self._landed[key]
        early[number] = payload
        while self._next[key] in early:
            got = early.pop(self._next[key])
            self._next[key] += 1
            waiting = self._matching.arrive(key, got)
            if waiting is not None:
                waiting.succeed(got)

    def recv(self, dst, src, tag=0):
        q = self.hosts
        if src // q != dst // q:
            return self.network.recv(dst, src, tag)
        event = simpy.Event(self.env)
        landed = self._matching.post((dst, src, tag), event)
        return event.succeed(landed[0]) if landed else event

    def compute(self, rank, duration_ns):
        return self.network.compute(rank, duration_ns)

    def copy(self, rank, size_bytes):
        return self.network.copy(rank, size_bytes)

    def reduce(self, rank, size_bytes):
        return self.network.reduce(rank, size_bytes)

    def _waiting(self) -> str:
        return f"unmatched receives inside pods (dst, src, tag): {self._matching.waiting()[:8]}"


@dataclass(frozen=True)
class PodsPlan(Plan):
    """A traced collective run by a pods record of `hierarchical_pods` (on the rank's `PodEndpoint`)."""

    pods_collective: str = ""

    def run(self, ep, tag: int):
        record = registry.algorithm(self.pods_collective, "pods")
        if self.pods_collective == "allgather":
            ep = ShiftedPodEndpoint(ep.transport, ep.rank)
        ctx = replace(self.ctx, elements=ep.size)
        data = runner.initial(self.pods_collective, ep.rank, ep.size, ctx)
        return (yield from record.run(ep, self.size_bytes, data, ctx))


class ShiftedPodEndpoint(PodEndpoint):
    """A `PodEndpoint` whose pool region 0 is ALLGATHER_REGION (regions 1.. as they are)."""

    __slots__ = ()

    def pod_region(self, k: int):
        return super().pod_region(ALLGATHER_REGION if k == 0 else k)


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
        over = (f"{kind}: a network algorithm over pod messages (inside a pod the pool or the network by size, "
                "between pods the network)")
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


def pods_plans(calls, pods: int, hosts: int, library: str, ctx: runner.Context, fig: PodFigures) -> list:
    """The Plans of a trace's collectives `calls`, in order, on n = `pods` pods of q = `hosts` ranks (roots are
    fabric ranks): each `pods_plan`'s, except a bcast whose pods broadcast could not reuse its buffer (see the
    module docstring), which runs its network algorithm over pod messages."""
    region0 = [[] for _ in range(pods)]  # per pod: each pods call's use of region 0, a bcast's root or None
    plans = []
    for call in calls:
        chosen = pods_plan(call, pods, hosts, library, ctx, fig)
        if isinstance(chosen, PodsPlan) and call.kind == "bcast":
            home = region0[call.root // hosts]
            if len(home) >= 2 and home[-2] != call.root:
                base = plan(call, pods * hosts, library, ctx, False)
                why = ("bcast: a network algorithm over pod messages where the pods broadcast's pool phase would "
                       "wait for acknowledgements of a call two before it in its pod's region 0 that was not a "
                       "broadcast from the same root")
                chosen = replace(base, note="; ".join(filter(None, [base.note, why])))
            else:
                home.append(call.root)
        elif isinstance(chosen, PodsPlan) and chosen.pods_collective != "allgather":  # (that one: ALLGATHER_REGION)
            for uses in region0:
                uses.append(None)
        plans.append(chosen)
    return plans


def mailbox_floor(pods) -> int:
    """The lowest byte of a pod's pool the mailboxes may use: above the regions the pods collectives use."""
    return _REGIONS_USED * (pods.pools[0].pool_bytes // REGIONS)
