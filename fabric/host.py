"""Hosts and their NICs, in LogGP terms (Alexandrov et al., SPAA '95).

A `Host` is a fabric node that runs ranks. Its `Nic` charges, per message:
`o` (`overhead_ns`, CPU time on the sending and on the receiving rank), `g`
(`gap_ns`, the least time between two message injections of one NIC) and `G`
(`gap_per_byte_ns`, injection time per byte: the host's egress port serialises
at the slower of `G` and the link). Ranks on one host talk through shared
memory: the receiving rank copies the message at `memcpy_bw_bytes_per_ns`.
Reductions cost `reduce_bw_bytes_per_ns` of CPU per reduced byte.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NicParams", "HostParams", "Nic", "Host"]


def _check(name: str, value: float, positive: bool) -> None:
    if not (value > 0 if positive else value >= 0):
        raise ValueError(f"{name}: expected {'> 0' if positive else '>= 0'}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class NicParams:
    """LogGP parameters of a NIC plus its MPI stack."""

    overhead_ns: float
    """o: CPU time per message on the sender and again on the receiver, ns."""
    gap_ns: float
    """g: least time between the starts of two injections from one NIC, ns."""
    gap_per_byte_ns: float
    """G: injection time per byte, ns/byte (1 / NIC bandwidth)."""

    def __post_init__(self):
        _check("overhead_ns", self.overhead_ns, False)
        _check("gap_ns", self.gap_ns, False)
        _check("gap_per_byte_ns", self.gap_per_byte_ns, False)


@dataclass(frozen=True, kw_only=True)
class HostParams:
    """Per-host memory speeds used by intra-node messages, local copies and reductions."""

    memcpy_bw_bytes_per_ns: float
    """One core's copy bandwidth, bytes/ns (intra-node messages, local copies)."""
    reduce_bw_bytes_per_ns: float
    """One core's reduction speed, reduced bytes per ns."""

    def __post_init__(self):
        _check("memcpy_bw_bytes_per_ns", self.memcpy_bw_bytes_per_ns, True)
        _check("reduce_bw_bytes_per_ns", self.reduce_bw_bytes_per_ns, True)


class Nic:
    """A NIC: enforces the gap `g` between message injections (times in ns)."""

    __slots__ = ("params", "next_injection_ns", "messages")

    def __init__(self, params: NicParams):
        self.params = params
        self.next_injection_ns = 0.0
        self.messages = 0

    def inject(self, ready_ns: float) -> float:
        """Return when a message ready at `ready_ns` starts injection, and book the gap."""
        start = ready_ns if ready_ns > self.next_injection_ns else self.next_injection_ns
        self.next_injection_ns = start + self.params.gap_ns
        self.messages += 1
        return start


class Host:
    """A host node: a NIC, memory speeds and an egress port (set when the fabric is built)."""

    def __init__(self, name: str, params: HostParams, nic: NicParams):
        self.name = name
        self.params = params
        self.nic = Nic(nic)
        self.uplink = None  # the egress Port; set by cxlsim.fabric.network.build

    def copy_ns(self, size_bytes: int) -> float:
        """CPU time to copy `size_bytes` locally, ns."""
        return size_bytes / self.params.memcpy_bw_bytes_per_ns

    def reduce_ns(self, size_bytes: int) -> float:
        """CPU time to reduce `size_bytes` into a local buffer, ns."""
        return size_bytes / self.params.reduce_bw_bytes_per_ns
