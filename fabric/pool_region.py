"""A region of a pool seen as a pool of its own: how the phases of one collective keep their protocols apart.

A `PoolRegion` is one of `REGIONS` equal, disjoint parts of a pool transport, with its own
call counters (flag values, data rounds), as an MPI library gives each communicator its own
pool region. A hierarchical collective (`cxlsim.models.collectives.hierarchical_pods`,
`octopus_pool`) runs each pool phase in its own region, so the phases' protocols (the
allgather's flags and the step collectives' differ in layout and values) never read each
other's flags or slots; the regions share the pool's devices, ports, CPU timelines and
caches. Offsets are bytes.
"""
from __future__ import annotations

from cxlsim.coherence import PoolEvent
from cxlsim.errors import InputError
from cxlsim.fabric.pool_transport import PoolTransport
from cxlsim.fabric.transport import Endpoint

__all__ = ["REGIONS", "PoolRegion"]

REGIONS = 4
"""Regions a pool is cut into for the phases of a hierarchical collective."""


class PoolRegion(PoolTransport):
    """`size_bytes` of `pool` from `base_bytes`, as a pool of its own: offsets shifted by `base_bytes`,
    its own call counters, everything else (time, devices, caches, coherence) the pool's."""

    @classmethod
    def of(cls, pool: PoolTransport, k: int) -> "PoolRegion":
        """Region k (0..REGIONS-1) of `pool`: bytes [k span, (k + 1) span), span = pool_bytes // REGIONS."""
        if not 0 <= k < REGIONS:
            raise InputError(f"pool region: {k} is not in 0..{REGIONS - 1}")
        span = pool.pool_bytes // REGIONS
        return cls(pool, k * span, span)

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
