"""A hybrid fabric in the DES: pods of hosts, each pod on its own CXL pool, every host also on a network.

`PodsTransport` puts `pods` CXL pool transports (`CXLPoolTransport`, `hosts` hosts each)
and one `NetworkTransport` over all pods x hosts hosts into ONE SimPy environment, so a
collective can use the pool inside a pod and the network between pods in one simulated
call. Rank r is host r % hosts of pod r // hosts; it is rank r on the network and rank
r % hosts on its pod's pool.

A rank's endpoint (`PodEndpoint`) offers the network's point-to-point operations
(`send`, `recv`, `sendrecv`, on global ranks) and the views an algorithm uses for its
phases: `pod_endpoint()` (the rank on its pod's pool transport), `pod_region(k)` (the
rank on region k of its pod's pool, `PoolRegion`) and `net` (its network endpoint).

A hierarchical collective runs each pool phase in its own region of the pool
(`cxlsim.fabric.pool_region.PoolRegion`), so the phases' protocols never read each other's
flags or slots. Each part books the rank's CPU on its own timeline (the network's for
messages, the pool's for pool operations), which is exact when a rank's phases do not
overlap in time, as in the hierarchical collectives of
`cxlsim.models.collectives.hierarchical_pods`. Time is ns, sizes are bytes.
"""
from __future__ import annotations

from cxlsim.errors import InputError
from cxlsim.fabric.octopus import SPARSE
from cxlsim.fabric.pool_region import REGIONS, PoolRegion
from cxlsim.fabric.transport import Endpoint, Transport

__all__ = ["HYBRID", "PodsTransport", "PodEndpoint", "REGIONS", "PoolRegion"]  # the last two: fabric.pool_region's

HYBRID = "hybrid"
"""Transport kind of a hybrid fabric (`Transport.kind`)."""


class PodsTransport(Transport):
    """`len(pools)` pods of `hosts` hosts: `pools[k]` is pod k's pool transport (or a sparse pod of several,
    `cxlsim.fabric.octopus.SparsePod`), `network` joins every host.

    Every transport must share one environment; the network has len(pools) x hosts ranks, one per host.
    """

    kind = HYBRID

    def __init__(self, pools, network, hosts: int):
        if not pools:
            raise InputError("pods: expected at least one pod")
        if any(p.size != hosts for p in pools):
            raise InputError(f"pods: every pod's pool must have {hosts} hosts, got {[p.size for p in pools]}")
        if network.size != len(pools) * hosts:
            raise InputError(f"pods: the network has {network.size} ranks, expected {len(pools)} pods x {hosts}")
        envs = {id(p.env) for p in pools} | {id(network.env)}
        if len(envs) != 1:
            raise InputError("pods: the pools and the network must share one simulation environment")
        self.env = network.env
        self.pools = list(pools)
        self.network = network
        self.hosts = hosts
        self.pods = len(pools)
        self.size = network.size
        self.sparse = any(getattr(p, "kind", None) == SPARSE for p in pools)
        """True when the pods are sparse Octopus pods (`cxlsim.fabric.octopus.SparsePod`)."""
        self._regions = {}

    def region(self, pod: int, k: int) -> "PoolRegion":
        """Region k (0..REGIONS-1) of pod `pod`'s pool, the same object on every call."""
        found = self._regions.get((pod, k))
        if found is None:
            if self.sparse:
                raise InputError("pods: a sparse pod has no single pool to cut into regions")
            found = self._regions[(pod, k)] = PoolRegion.of(self.pools[pod], k)
        return found

    def pod_of(self, rank: int) -> int:
        return rank // self.hosts

    def endpoint(self, rank: int) -> "PodEndpoint":
        return PodEndpoint(self, rank)

    def send(self, src, dst, size_bytes, payload=None, tag=0):
        return self.network.send(src, dst, size_bytes, payload, tag)

    def recv(self, dst, src, tag=0):
        return self.network.recv(dst, src, tag)

    def compute(self, rank, duration_ns):
        return self.network.compute(rank, duration_ns)

    def copy(self, rank, size_bytes):
        return self.network.copy(rank, size_bytes)

    def reduce(self, rank, size_bytes):
        return self.network.reduce(rank, size_bytes)


class PodEndpoint(Endpoint):
    """One rank of a `PodsTransport`: the network operations on global ranks, plus its pod's views."""

    __slots__ = ("net", "pod", "local")

    def __init__(self, transport: PodsTransport, rank: int):
        super().__init__(transport, rank)
        self.net = transport.network.endpoint(rank)
        self.pod = transport.pod_of(rank)
        self.local = rank % transport.hosts

    def pod_endpoint(self) -> Endpoint:
        """This rank on its pod's pool transport (rank `local` of `hosts`)."""
        return self.transport.pools[self.pod].endpoint(self.local)

    def pod_region(self, k: int) -> Endpoint:
        """This rank on region k of its pod's pool (a `PoolRegion`, rank `local` of `hosts`)."""
        return self.transport.region(self.pod, k).endpoint(self.local)
