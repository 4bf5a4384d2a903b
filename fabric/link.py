"""Links: full-duplex point-to-point wires with serialisation, propagation and FIFO queues.

A `Link` joins two fabric nodes and owns one `Port` per direction. A port is the
egress queue of the upstream node: it serialises one chunk at a time at
`bw_bytes_per_ns`, first come first served, and each chunk then propagates for
`latency_ns`. Contention is modelled per port.

A port is a single-server FIFO queue, the same discipline as
`simpy.Resource(capacity=1)`. Instead of a request event and a release event
per chunk it keeps the time at which it falls free (`free_at_ns`) and a chunk
reserves it when it reaches the port, so a chunk costs no extra events. The
slow twin in `cxlsim.fabric.reference` drives real `simpy.Resource` objects and
the tests check both give identical timings under contention.

A port counts what went through it (`bytes`, `chunks`, `busy_ns`) and the
longest wait of a chunk before its serialisation started (`peak_wait_ns`):
the work queued ahead of it, which is `peak_wait_ns / ns_per_byte` bytes
(`cxlsim.fabric.stats` reports these per run).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LinkParams", "Port", "Link"]


@dataclass(frozen=True, kw_only=True)
class LinkParams:
    """Parameters of one link (the same in both directions)."""

    bw_bytes_per_ns: float
    """Signalling bandwidth per direction, bytes/ns (= GB/s)."""
    latency_ns: float
    """Propagation delay (cable, PHY, retimers), ns."""

    def __post_init__(self):
        if not self.bw_bytes_per_ns > 0:
            raise ValueError(f"bw_bytes_per_ns: expected > 0, got {self.bw_bytes_per_ns!r}")
        if not self.latency_ns >= 0:
            raise ValueError(f"latency_ns: expected >= 0, got {self.latency_ns!r}")


class Port:
    """One direction of a link: a FIFO server that serialises chunks (times in ns)."""

    __slots__ = ("name", "ns_per_byte", "latency_ns", "free_at_ns", "busy_ns", "chunks", "bytes", "peak_wait_ns")

    def __init__(self, name: str, bw_bytes_per_ns: float, latency_ns: float):
        self.name = name
        self.ns_per_byte = 1.0 / bw_bytes_per_ns
        self.latency_ns = latency_ns
        self.free_at_ns = 0.0
        self.busy_ns = 0.0
        self.chunks = 0
        self.bytes = 0
        self.peak_wait_ns = 0.0

    def reserve(self, ready_ns: float, size_bytes: int) -> tuple[float, float]:
        """Queue a chunk that is ready to go at `ready_ns`; return its (start, end) of serialisation."""
        start = ready_ns
        if self.free_at_ns > ready_ns:
            start = self.free_at_ns
            if start - ready_ns > self.peak_wait_ns:
                self.peak_wait_ns = start - ready_ns
        duration = size_bytes * self.ns_per_byte
        self.free_at_ns = start + duration
        self.busy_ns += duration
        self.chunks += 1
        self.bytes += size_bytes
        return start, start + duration

    def reserve_run(self, ready_ns: float, sizes) -> float:
        """Queue chunks of `sizes` bytes, all ready at `ready_ns`, in order: `reserve` on each, the same
        arithmetic in one loop. Returns the first one's start: they go back to back (each is ready
        before the one ahead ends), chunk i + 1 starting at exactly start_i + sizes[i] * ns_per_byte."""
        first = ready_ns
        if self.free_at_ns > ready_ns:
            first = self.free_at_ns
        ns_per_byte, busy, peak = self.ns_per_byte, self.busy_ns, self.peak_wait_ns
        free = self.free_at_ns
        for size_bytes in sizes:
            start = ready_ns
            if free > ready_ns:
                start = free
                if start - ready_ns > peak:
                    peak = start - ready_ns
            duration = size_bytes * ns_per_byte
            free = start + duration
            busy += duration
        self.free_at_ns, self.busy_ns, self.peak_wait_ns = free, busy, peak
        self.chunks += len(sizes)
        self.bytes += sum(sizes)
        return first


class Link:
    """A full-duplex link between fabric nodes `a` and `b`: `ports[(a, b)]` and `ports[(b, a)]`."""

    def __init__(self, a: str, b: str, params: LinkParams):
        self.a, self.b, self.params = a, b, params
        self.ports = {
            (a, b): Port(f"{a}->{b}", params.bw_bytes_per_ns, params.latency_ns),
            (b, a): Port(f"{b}->{a}", params.bw_bytes_per_ns, params.latency_ns),
        }
