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

A `PoolRegion` is one of `REGIONS` equal, disjoint parts of a pool, seen as a pool of its
own with its own call counters (flag values, data rounds), as an MPI library gives each
communicator its own pool region. A hierarchical collective runs each pool phase in its
own region, so the phases' protocols (the allgather's flags and the step collectives'
flags differ in layout and values) never read each other's flags or slots; the regions
share the pool's devices, ports, CPU timelines and caches. Each part books the rank's CPU on its own timeline (the network's for
messages, the pool's for pool operations), which is exact when a rank's phases do not
overlap in time, as in the hierarchical collectives of
`cxlsim.models.collectives.hierarchical_pods`. Time is ns, sizes are bytes.
"""
from __future__ import annotations

from cxlsim.coherence import PoolEvent
from cxlsim.errors import InputError
from cxlsim.fabric.octopus import SPARSE
from cxlsim.fabric.pool_transport import PoolTransport
from cxlsim.fabric.transport import Endpoint, Transport

__all__ = ["HYBRID", "REGIONS", "PodsTransport", "PodEndpoint", "PoolRegion"]

REGIONS = 4
"""Regions each pod's pool is cut into for the phases of a hierarchical collective."""

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
            if not 0 <= k < REGIONS:
                raise InputError(f"pods: region {k} is not in 0..{REGIONS - 1}")
            if self.sparse:
                raise InputError("pods: a sparse pod has no single pool to cut into regions")
            pool = self.pools[pod]
            span = pool.pool_bytes // REGIONS
            found = self._regions[(pod, k)] = PoolRegion(pool, k * span, span)
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


class PoolRegion(PoolTransport):
    """`size_bytes` of `pool` from `base_bytes`, as a pool of its own: offsets shifted by `base_bytes`,
    its own call counters, everything else (time, devices, caches, coherence) the pool's."""

    def __init__(self, pool: PoolTransport, base_bytes: int, size_bytes: int):
        self.pool, self.base = pool, base_bytes
        self.env, self.size, self.coherence = pool.env, pool.size, pool.coherence
        self.pool_bytes = size_bytes
        self.start_counters(pool.size)

    def endpoint(self, rank: int) -> Endpoint:
        return Endpoint(self, rank)

    def figures(self):
        return self.pool.figures()

    def pool_write(self, rank, offset_bytes, size_bytes, payload=None, *, streaming=None):
        return self.pool.pool_write(rank, self.base + offset_bytes, size_bytes, payload, streaming=streaming)

    def pool_read(self, rank, offset_bytes, size_bytes):
        return self.pool.pool_read(rank, self.base + offset_bytes, size_bytes)

    def flush(self, rank, offset_bytes, size_bytes):
        return self.pool.flush(rank, self.base + offset_bytes, size_bytes)

    def fence(self, rank, op: PoolEvent = PoolEvent.MFENCE):
        return self.pool.fence(rank, op)

    def wait_flags(self, rank, flags, value):
        return self.pool.wait_flags(rank, [self.base + f for f in flags], value)

    def place(self, rank, offset_bytes, size_bytes, payload=None):
        return self.pool.place(rank, self.base + offset_bytes, size_bytes, payload)

    def view(self, rank, offset_bytes, size_bytes):
        return self.pool.view(rank, self.base + offset_bytes, size_bytes)

    def compute(self, rank, duration_ns):
        return self.pool.compute(rank, duration_ns)

    def copy(self, rank, size_bytes):
        return self.pool.copy(rank, size_bytes)

    def reduce(self, rank, size_bytes):
        return self.pool.reduce(rank, size_bytes)

    def send(self, src, dst, size_bytes, payload=None, tag=0):
        return self.pool.send(src, dst, size_bytes, payload, tag)

    def recv(self, dst, src, tag=0):
        return self.pool.recv(dst, src, tag)
