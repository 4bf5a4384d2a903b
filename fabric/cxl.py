"""CXL memory-pool hardware: switches with a lane budget, pool devices, host load/store paths, coherence.

A CXL memory pool is memory that several hosts reach with loads and stores
through a CXL switch. A load leaves the core, crosses the host's root port and
link (`CXLHostParams.port_latency_ns`, `CXLLinkParams`), the switch
(`CXLSwitchParams.hop_latency_ns`), the device's link, and is served by the
device's media (`CXLDeviceParams.media_latency_ns`); the data comes back the
same way. Bandwidth is limited in three places:

- the host: a core keeps at most `outstanding_lines` cache-line requests in
  flight, so by Little's law one host streams at most
  outstanding_lines * 64 B / load latency (and never more than its x16 port);
- the switch port of each host (`port_bw_bytes_per_ns`, per direction);
- the device: its media bandwidth, shared by every host and by reads and
  writes, behind its heads' links, heads x port bandwidth in each direction
  (`CXLDeviceParams.bw_bytes_per_ns` is one direction's bound, the lower of the
  two); a read:write mix can use both directions (`cxlsim.fabric.pool_path`).

A switch has a lane budget: `lanes` / `lanes_per_port` ports at most
(256 lanes = 16 x16 ports). Hosts and device heads must fit (`check_ports`).

Without a switch (switch levels 0, as in Pond's and Octopus's multi-headed
devices) each host's link goes straight to a head of each device: a load
crosses the host's port and one link, and a device serves at most `heads`
hosts (`CXLDeviceParams.check_heads`). The switch record's port bandwidth is
then each head's link, and its hop latency is not used.

The device-side snoop filter of CXL 3.x HDM-DB memory (back-invalidate snoops
on writes, recalls of Modified lines, invalidations on eviction) is
`cxlsim.fabric.snoop_filter.SnoopFilter`. Pools without back-invalidation (CXL 2.0)
keep no snoop filter: software flushes lines instead (`flush` mode of
`cxlsim.fabric.cxl_transport`).

Units: ns, bytes, bytes/ns (= GB/s). Figures and their sources are in
`cxlsim.fabric.cxl_presets`.
"""
from __future__ import annotations

from dataclasses import dataclass

from cxlsim.errors import InputError

__all__ = ["CACHE_LINE_BYTES", "CXLSwitchParams", "CXLDeviceParams", "CXLLinkParams", "CXLHostParams",
           "line_span"]

CACHE_LINE_BYTES = 64
"""Cache line, bytes: the unit of every CXL.mem transfer and of the snoop filter."""


def _positive(name: str, value, integer: bool = False, zero_ok: bool = False) -> None:
    if integer and (not isinstance(value, int) or isinstance(value, bool)):
        raise InputError(f"{name}: expected an integer, got {value!r}")
    if not (value >= 0 if zero_ok else value > 0):
        raise InputError(f"{name}: expected {'>= 0' if zero_ok else '> 0'}, got {value!r}")


def line_span(offset_bytes: int, size_bytes: int) -> tuple[int, int]:
    """(first line, number of lines) that bytes [offset, offset + size) touch; (first, 0) for size 0."""
    first = offset_bytes // CACHE_LINE_BYTES
    if size_bytes <= 0:
        return first, 0
    return first, (offset_bytes + size_bytes - 1) // CACHE_LINE_BYTES - first + 1


@dataclass(frozen=True, kw_only=True)
class CXLSwitchParams:
    """A CXL switch: port-based routing with a fixed hop latency and a lane budget."""

    hop_latency_ns: float
    """Latency of one traversal, ns (a load crosses the switch twice: request and data)."""
    port_bw_bytes_per_ns: float
    """Bandwidth of one port per direction, bytes/ns."""
    lanes: int
    """Lanes the switch has in total."""
    lanes_per_port: int
    """Lanes per port (16 for x16)."""

    def __post_init__(self):
        _positive("hop_latency_ns", self.hop_latency_ns, zero_ok=True)
        _positive("port_bw_bytes_per_ns", self.port_bw_bytes_per_ns)
        _positive("lanes", self.lanes, integer=True)
        _positive("lanes_per_port", self.lanes_per_port, integer=True)
        if self.lanes_per_port > self.lanes:
            raise InputError(f"lanes_per_port: expected <= lanes ({self.lanes}), got {self.lanes_per_port}")

    @property
    def max_ports(self) -> int:
        """Ports the lane budget allows."""
        return self.lanes // self.lanes_per_port

    def check_ports(self, hosts: int, device_ports: int) -> None:
        """InputError if `hosts` host ports plus `device_ports` device ports do not fit on the switch."""
        needed = hosts + device_ports
        if needed > self.max_ports:
            raise InputError(
                f"switch ports: {hosts} hosts + {device_ports} device ports need {needed} "
                f"x{self.lanes_per_port} ports, but a {self.lanes}-lane switch has {self.max_ports}; "
                f"use at most {self.max_ports - device_ports} hosts per switch, or a switch tree")

    def tree_leaves(self, hosts: int, device_ports: int) -> int:
        """Leaf switches of a two-level tree for `hosts` (one uplink each to a root holding the devices).

        InputError if the root cannot hold the leaves' uplinks plus `device_ports`.
        """
        per_leaf = self.max_ports - 1
        if per_leaf < 1:
            raise InputError(f"switch ports: a {self.lanes}-lane switch with x{self.lanes_per_port} ports "
                             "has no room for a host next to its uplink")
        leaves = -(-hosts // per_leaf)
        if leaves + device_ports > self.max_ports:
            raise InputError(
                f"switch ports: {hosts} hosts need {leaves} leaf switches ({per_leaf} hosts each); their "
                f"uplinks + {device_ports} device ports need {leaves + device_ports} root ports, but a "
                f"{self.lanes}-lane switch has {self.max_ports}; use at most "
                f"{per_leaf * (self.max_ports - device_ports)} hosts on two levels")
        return leaves


@dataclass(frozen=True, kw_only=True)
class CXLDeviceParams:
    """A (possibly multi-headed) CXL memory device in the pool."""

    media_latency_ns: float
    """Controller plus DRAM access time of one line, ns."""
    media_bw_bytes_per_ns: float
    """Media bandwidth, reads and writes together, bytes/ns."""
    heads: int
    """Ports (heads) of the device: each on a switch port, or with no switch each on one host's link."""
    capacity_bytes: int
    """Memory the device contributes to the pool, bytes."""

    def __post_init__(self):
        _positive("media_latency_ns", self.media_latency_ns, zero_ok=True)
        _positive("media_bw_bytes_per_ns", self.media_bw_bytes_per_ns)
        _positive("heads", self.heads, integer=True)
        _positive("capacity_bytes", self.capacity_bytes, integer=True)

    def check_heads(self, hosts: int) -> None:
        """InputError unless `hosts` hosts fit on the heads: with no switch every host takes a head of every device."""
        if hosts > self.heads:
            raise InputError(f"device heads: with no switch every host attaches to a head of every device, so "
                             f"{hosts} hosts need {hosts} heads, but the device has {self.heads}; use at most "
                             f"{self.heads} hosts, or a pool with a switch")

    def bw_bytes_per_ns(self, port_bw_bytes_per_ns: float) -> float:
        """What the device can serve, bytes/ns: its media, or its heads' ports if they are slower."""
        return min(self.media_bw_bytes_per_ns, self.heads * port_bw_bytes_per_ns)


@dataclass(frozen=True, kw_only=True)
class CXLLinkParams:
    """A CXL link (host to switch, or switch to device), one traversal."""

    latency_ns: float
    """Flight time plus PHY, ns per traversal."""
    retimers: int
    """Retimers on the link."""
    retimer_latency_ns: float
    """Latency of one retimer per traversal, ns."""

    def __post_init__(self):
        _positive("latency_ns", self.latency_ns, zero_ok=True)
        _positive("retimers", self.retimers, integer=True, zero_ok=True)
        _positive("retimer_latency_ns", self.retimer_latency_ns, zero_ok=True)

    @property
    def traversal_ns(self) -> float:
        return self.latency_ns + self.retimers * self.retimer_latency_ns


@dataclass(frozen=True, kw_only=True)
class CXLHostParams:
    """One host's load/store path to the pool, and its cache-maintenance costs."""

    port_latency_ns: float
    """Core to the CXL root port (caches, home agent, CXL controller), one way, ns."""
    outstanding_lines: int
    """Line requests one host keeps in flight: caps its bandwidth at this * 64 B / load latency."""
    hit_latency_ns: float
    """A load or store that hits the host's cache, ns."""
    flush_ns_per_line: float
    """CPU time to issue clflushopt (or clwb) for one line, ns."""
    fence_ns: float
    """sfence/mfence once earlier write-backs are done, ns."""
    invalidate_ns: float = 0.0
    """From a clflushopt's issue until it is acknowledged when it writes nothing back (the line clean
    or not held), ns: every cache that may hold the line has dropped it. A fence waits for it.
    0 (the CXL presets): at once. The local-host calibration measures it (a core's clflushopt of a
    clean line then mfence took 100-140 ns beyond a bare mfence on the 2-vCPU VM this was built on)."""
    writeback_ns: float = 0.0
    """Least time from the start of a write to the pool (streamed stores, or a clflushopt's
    write-back of dirty lines) until the pool acknowledges it, ns; a fence waits for it. 0 (the
    CXL presets): the path's own round trip. The local-host calibration measures it (a dirty
    line's clflushopt then mfence, beyond a bare mfence)."""

    def __post_init__(self):
        _positive("port_latency_ns", self.port_latency_ns, zero_ok=True)
        _positive("invalidate_ns", self.invalidate_ns, zero_ok=True)
        _positive("writeback_ns", self.writeback_ns, zero_ok=True)
        _positive("outstanding_lines", self.outstanding_lines, integer=True)
        _positive("hit_latency_ns", self.hit_latency_ns, zero_ok=True)
        _positive("flush_ns_per_line", self.flush_ns_per_line, zero_ok=True)
        _positive("fence_ns", self.fence_ns, zero_ok=True)
