"""Sparse switchless pods as in Octopus: each multi-headed device reaches only some of a pod's hosts.

Octopus (arXiv 2501.09020) attaches every host directly to several small multi-headed
devices (MHDs, e.g. 4 heads) and chooses which hosts share a device so that any two hosts
share exactly one: a 2-(q, k, 1) design, q hosts, devices of k heads, each host on
X = (q - 1) / (k - 1) devices, q X / k devices in all. `design(hosts, heads)` builds one
from the constructions that exist for every valid size:

- k = 2: every pair of hosts has its own two-headed device (any q);
- the projective plane of prime order s: q = s^2 + s + 1, k = s + 1 (q = 7 with k = 3, 13 with 4);
- the affine plane of prime order s: q = s^2, k = s (q = 9 with k = 3, 25 with 5).

Other (q, k) are an InputError listing the pod sizes these give for k heads (a device with
k >= q heads is the dense pod, every host on it: `cxlsim.fabric.cxl_transport` with no switch).

`SparsePod` is one such pod in the DES: one switchless `CXLPoolTransport` of k hosts per
device, in one SimPy environment. Host h is rank `index[d][h]` on device d's pool. Each device
pool has its own host ports and CPU timelines, so a host's work on its X devices runs at once:
the model takes a host to drive each of its X links from its own thread (one core per link),
as a host with several CXL ports would. Units: ns, bytes.
"""
from __future__ import annotations

from itertools import combinations

from cxlsim.errors import InputError
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.fabric.pool_region import PoolRegion
from cxlsim.fabric.transport import Endpoint, Transport

__all__ = ["design", "pod_sizes", "SparsePod", "SPARSE"]

SPARSE = "sparse"
"""Transport kind of a sparse pod (`SparsePod.kind`)."""


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def _projective(s: int) -> list[tuple[int, ...]]:
    """Lines of the projective plane over GF(s), s prime, as point indices."""
    points = [(1, a, b) for a in range(s) for b in range(s)] + [(0, 1, a) for a in range(s)] + [(0, 0, 1)]
    return [tuple(i for i, p in enumerate(points) if sum(x * y for x, y in zip(line, p)) % s == 0)
            for line in points]


def _affine(s: int) -> list[tuple[int, ...]]:
    """Lines of the affine plane over GF(s), s prime: y = a x + b, and x = c; point (x, y) is x s + y."""
    lines = [tuple(x * s + (a * x + b) % s for x in range(s)) for a in range(s) for b in range(s)]
    return lines + [tuple(c * s + y for y in range(s)) for c in range(s)]


def pod_sizes(heads: int, up_to: int = 64) -> list[int]:
    """The sparse pod sizes (hosts, above `heads`) that `design` builds for devices of `heads` heads."""
    if heads == 2:
        return list(range(3, up_to + 1))
    sizes = []
    if _is_prime(heads - 1):
        sizes.append(heads * heads - heads + 1)
    if _is_prime(heads):
        sizes.append(heads * heads)
    return sorted(q for q in sizes if q <= up_to)


def design(hosts: int, heads: int) -> tuple[tuple[int, ...], ...]:
    """Devices of a sparse pod: each a tuple of `heads` hosts (0..hosts-1), any two hosts on exactly one device."""
    if heads < 2 or hosts <= heads:
        raise InputError(f"pod design: a sparse pod needs devices of at least 2 heads and more hosts than heads, "
                         f"got {hosts} hosts and {heads} heads")
    s = heads - 1
    if heads == 2:
        devices = list(combinations(range(hosts), 2))
    elif _is_prime(s) and hosts == s * s + s + 1:
        devices = _projective(s)
    elif _is_prime(heads) and hosts == heads * heads:
        devices = _affine(heads)
    else:
        sizes = ", ".join(map(str, pod_sizes(heads)))
        use = f"use {sizes} hosts, or at most {heads} (one device)" if sizes else f"use at most {heads} hosts (one device)"
        raise InputError(f"pod design: no construction here of {hosts} hosts on {heads}-headed devices with every "
                         f"two hosts sharing one device; with {heads} heads {use}")
    devices = tuple(tuple(sorted(d)) for d in devices)
    pairs = [pair for d in devices for pair in combinations(d, 2)]
    assert len(pairs) == len(set(pairs)) == hosts * (hosts - 1) // 2, "not a 2-design"
    return devices


class SparsePod(Transport):
    """A sparse pod: `pools[d]`, a switchless CXL pool of the k hosts `devices[d]`, all in one environment."""

    kind = SPARSE

    def __init__(self, preset, devices, *, env, coherence, chunk_bytes: int):
        heads = len(devices[0])
        self.env = env
        self.devices = tuple(devices)
        self.size = 1 + max(h for d in devices for h in d)
        self.heads = heads
        self.pools = [CXLPoolTransport(preset, heads, coherence=coherence, env=env, chunk_bytes=chunk_bytes,
                                       switch_levels=0) for _ in devices]
        self.coherence = self.pools[0].coherence
        self.index = [{h: i for i, h in enumerate(d)} for d in devices]
        """index[d][h]: host h's rank on device d's pool."""
        self.devices_of = [tuple(d for d, members in enumerate(devices) if h in members) for h in range(self.size)]
        """The devices host h is attached to, X of them."""
        self._regions = {}

    def endpoint(self, rank: int) -> Endpoint:
        return Endpoint(self, rank)

    def device_endpoint(self, d: int, host: int, region: int = 0) -> Endpoint:
        """Host `host` on region `region` of device d's pool (`PoolRegion`: one per phase of a collective)."""
        found = self._regions.get((d, region))
        if found is None:
            found = self._regions[(d, region)] = PoolRegion.of(self.pools[d], region)
        return found.endpoint(self.index[d][host])

    def figures(self):
        """One device's pool figures (every device is alike)."""
        return self.pools[0].figures()

    def compute(self, rank, duration_ns):
        return self.pools[self.devices_of[rank][0]].compute(self.index[self.devices_of[rank][0]][rank], duration_ns)

    def copy(self, rank, size_bytes):
        return self.compute(rank, size_bytes / self.pools[0].preset.host.memcpy_bw_bytes_per_ns)

    def reduce(self, rank, size_bytes):
        return self.compute(rank, size_bytes / self.pools[0].preset.host.reduce_bw_bytes_per_ns)

    def send(self, src, dst, size_bytes, payload=None, tag=0):
        return self.pools[0].send(src, dst, size_bytes, payload, tag)

    def recv(self, dst, src, tag=0):
        return self.pools[0].recv(dst, src, tag)
