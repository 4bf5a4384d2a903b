"""Sparse switchless pods as in Octopus: each multi-headed device reaches only some of a pod's hosts.

Octopus (arXiv 2501.09020) attaches every host directly to several small multi-headed
devices (MHDs, e.g. 4 heads) and chooses which hosts share a device so that any two hosts
share exactly one: a 2-(q, k, 1) design, q hosts, devices of k heads, each host on
X = (q - 1) / (k - 1) devices, q X / k devices in all. `design(hosts, heads)` builds one
from the constructions that exist for every valid size:

- k = 2: every pair of hosts has its own two-headed device (any q);
- the projective plane of order s, a prime power: q = s^2 + s + 1, k = s + 1 (q = 7 with k = 3,
  13 with 4, 21 with 5);
- the affine plane of order s, a prime power: q = s^2, k = s (q = 9 with k = 3, 16 with 4, 25
  with 5).

Both planes are built over the finite field GF(s) (`FiniteField`: arithmetic mod p for a prime s,
polynomials over GF(p) modulo an irreducible one for s = p^e, e.g. GF(4)).

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

__all__ = ["design", "pod_sizes", "FiniteField", "SparsePod", "SPARSE"]

SPARSE = "sparse"
"""Transport kind of a sparse pod (`SparsePod.kind`)."""


def _prime_power(n: int) -> tuple[int, int] | None:
    """(p, e) with n = p^e, p prime, e >= 1; None if n is not a prime power."""
    for p in range(2, n + 1):
        if n % p == 0:  # the smallest divisor is prime
            e = 0
            while n % p == 0:
                n //= p
                e += 1
            return (p, e) if n == 1 else None
    return None


class FiniteField:
    """GF(p^e) on the integers 0..p^e - 1: digit i (base p) is the coefficient of x^i, and products are
    reduced by the first monic irreducible polynomial of degree e (by search), so e = 1 is arithmetic mod p."""

    def __init__(self, p: int, e: int):
        self.p, self.e, self.size = p, e, p ** e
        self.modulus = next(m for m in range(p ** e, 2 * p ** e) if self._irreducible(self._digits(m, e + 1)))

    def _digits(self, a: int, n: int) -> list[int]:
        return [a // self.p ** i % self.p for i in range(n)]

    def _irreducible(self, poly: list[int]) -> bool:
        """No root and no factor of degree 2..e/2, by trial division over all monic polynomials of lower degree."""
        p, e = self.p, len(poly) - 1
        for degree in range(1, e // 2 + 1):
            for low in range(p ** degree):
                divisor = self._digits(low, degree) + [1]
                rest = list(poly)
                for shift in range(e - degree, -1, -1):
                    c = rest[shift + degree]
                    for i, d in enumerate(divisor):
                        rest[shift + i] = (rest[shift + i] - c * d) % p
                if not any(rest[:degree]):
                    return False
        return True

    def add(self, a: int, b: int) -> int:
        p = self.p
        return sum((x + y) % p * p ** i for i, (x, y) in enumerate(zip(self._digits(a, self.e), self._digits(b, self.e))))

    def mul(self, a: int, b: int) -> int:
        p, e = self.p, self.e
        x, y = self._digits(a, e), self._digits(b, e)
        prod = [0] * (2 * e - 1)
        for i, xi in enumerate(x):
            for j, yj in enumerate(y):
                prod[i + j] = (prod[i + j] + xi * yj) % p
        m = self._digits(self.modulus, e + 1)
        for top in range(2 * e - 2, e - 1, -1):  # reduce by the monic modulus
            c = prod[top]
            for i in range(e + 1):
                prod[top - e + i] = (prod[top - e + i] - c * m[i]) % p
        return sum(prod[i] * p ** i for i in range(e))


def _field(s: int) -> FiniteField:
    p, e = _prime_power(s)
    return FiniteField(p, e)


def _projective(s: int) -> list[tuple[int, ...]]:
    """Lines of the projective plane over GF(s), s a prime power, as point indices: the points whose dot
    product with the line's coordinates is 0."""
    f = _field(s)
    points = [(1, a, b) for a in range(s) for b in range(s)] + [(0, 1, a) for a in range(s)] + [(0, 0, 1)]

    def dot(u, v):
        total = 0
        for x, y in zip(u, v):
            total = f.add(total, f.mul(x, y))
        return total
    return [tuple(i for i, p in enumerate(points) if dot(line, p) == 0) for line in points]


def _affine(s: int) -> list[tuple[int, ...]]:
    """Lines of the affine plane over GF(s), s a prime power: y = a x + b, and x = c; point (x, y) is x s + y."""
    f = _field(s)
    lines = [tuple(x * s + f.add(f.mul(a, x), b) for x in range(s)) for a in range(s) for b in range(s)]
    return lines + [tuple(c * s + y for y in range(s)) for c in range(s)]


def pod_sizes(heads: int, up_to: int = 64) -> list[int]:
    """The sparse pod sizes (hosts, above `heads`) that `design` builds for devices of `heads` heads."""
    if heads == 2:
        return list(range(3, up_to + 1))
    sizes = []
    if _prime_power(heads - 1):
        sizes.append(heads * heads - heads + 1)
    if _prime_power(heads):
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
    elif _prime_power(s) and hosts == s * s + s + 1:
        devices = _projective(s)
    elif _prime_power(heads) and hosts == heads * heads:
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
