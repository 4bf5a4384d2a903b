"""What one DES run did to each component of its fabric: bytes, utilisation and peak queue per port, and a
CXL pool's coherence traffic. These explain a latency: which port was the bottleneck, how deep its queue got.

Read after the run from the counters the components keep (`cxlsim.fabric.link.Port`, the pool's
snoop filter); nothing is sampled. Per port (one direction of a link, or a FIFO server of a pool):

- `bytes`: bytes serialised through it; `chunks`: how many pieces;
- `utilisation`: busy time / the run's elapsed time (time 0 to the last event, warm-up calls
  included), 0..1;
- `peak_queue_bytes`: the most work queued ahead of a chunk when it reached the port, in bytes at
  the port's rate (its longest wait, `peak_wait_ns`, times its bandwidth).

Components: on a network, 'NIC' (a host's uplink, at the slower of the NIC's G and the link) and
'switch port' (a switch's egress towards a neighbour); on a pool, 'host port' (a host's issue
server), 'leaf uplink' (a two-level tree's, per direction) and 'device'.

For a CXL pool (`PoolStats`): the bytes the devices served, flag polls, and in hw mode the
snoop filter's back-invalidation snoops (BISnp, all causes), the recalls among them (a Modified
line taken back for another host's read), the lines evicted because the filter was full and the
BISnp those evictions sent. In flush mode there is no snoop filter: those are None.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.fabric.transport import NetworkTransport

__all__ = ["PortStats", "PoolStats", "RunStats", "collect", "summary", "PORT_COLUMNS"]

PORT_COLUMNS = ["component", "port", "bytes", "chunks", "busy_ns", "utilisation", "peak_queue_bytes", "peak_wait_ns"]
"""The columns of one port's row (`PortStats`)."""


@dataclass(frozen=True)
class PortStats:
    """One port over one run (bytes, ns; utilisation 0..1)."""

    component: str
    port: str
    bytes: int
    chunks: int
    busy_ns: float
    utilisation: float
    peak_queue_bytes: float
    peak_wait_ns: float


@dataclass(frozen=True)
class PoolStats:
    """A CXL pool's traffic over one run; the snoop-filter counts are None in flush mode."""

    coherence: str
    device_bytes: int
    polls: int
    bisnp: int | None
    recalls: int | None
    evictions: int | None
    eviction_bisnp: int | None


@dataclass(frozen=True)
class RunStats:
    """Every port of a run, and the pool's traffic (None on a network)."""

    elapsed_ns: float
    ports: tuple
    pool: PoolStats | None = None

    def busiest(self) -> PortStats | None:
        """The port with the highest utilisation (ties: the first), None if nothing moved."""
        used = [p for p in self.ports if p.bytes]
        return max(used, key=lambda p: p.utilisation) if used else None

    def rows(self) -> list[dict]:
        """One dict per port (PORT_COLUMNS), for a CSV."""
        return [asdict(p) for p in self.ports]


def _port(component: str, port, elapsed_ns: float) -> PortStats:
    return PortStats(component=component, port=port.name, bytes=port.bytes, chunks=port.chunks, busy_ns=port.busy_ns,
                     utilisation=port.busy_ns / elapsed_ns if elapsed_ns > 0 else 0.0,
                     peak_queue_bytes=port.peak_wait_ns / port.ns_per_byte, peak_wait_ns=port.peak_wait_ns)


def collect(transport) -> RunStats:
    """The statistics of a finished run on `transport` (a NetworkTransport or a CXLPoolTransport)."""
    elapsed = transport.env.now
    if isinstance(transport, NetworkTransport):
        net = transport.network
        hosts = {h.name for h in net.hosts}
        ports = [_port("NIC" if a in hosts else "switch port", port, elapsed)
                 for link in net.links.values() for (a, _b), port in link.ports.items() if a in hosts or
                 a in net.switches]
        return RunStats(elapsed_ns=elapsed, ports=tuple(ports))
    if isinstance(transport, CXLPoolTransport):
        ports = [_port(component, port, elapsed) for component, port in transport.path.ports()]
        sf = transport.snoop_filter
        pool = PoolStats(coherence=str(transport.coherence), device_bytes=transport.path.device_bytes,
                         polls=transport.polls, bisnp=sf.bisnp if sf else None, recalls=sf.recalls if sf else None,
                         evictions=sf.evictions if sf else None, eviction_bisnp=sf.eviction_bisnp if sf else None)
        return RunStats(elapsed_ns=elapsed, ports=tuple(ports), pool=pool)
    raise TypeError(f"collect: expected a NetworkTransport or a CXLPoolTransport, got {type(transport).__name__}")


def summary(runs: list) -> list[str]:
    """Text lines explaining each run of `runs` ((size_bytes, RunStats) pairs): its busiest port, that port's
    bytes and peak queue, and a pool's BISnp, recalls and snoop-filter evictions."""
    pooled = any(s.pool is not None for _, s in runs)
    head = f"# {'Size':<10} {'busiest port':<24} {'util':>6} {'bytes':>14} {'peak queue B':>14}"
    if pooled:
        head += f" {'BISnp':>9} {'recalls':>9} {'SF evict.':>9} {'device B':>14}"
    lines = ["# statistics per size (DES): the port with the highest utilisation over the run, its bytes and "
             "peak queue" + ("; the pool's back-invalidation snoops, recalls, snoop-filter evictions and device "
                             "bytes" if pooled else ""), head]
    for size, s in runs:
        top = s.busiest()
        where = f"{top.port} ({top.component})" if top else "-"
        line = (f"{size:<12d} {where:<24} {top.utilisation if top else 0:>6.1%} {top.bytes if top else 0:>14,d} "
                f"{top.peak_queue_bytes if top else 0:>14,.0f}")
        if s.pool is not None:
            p = s.pool
            counts = [("-" if v is None else f"{v:,d}") for v in (p.bisnp, p.recalls, p.evictions)]
            line += f" {counts[0]:>9} {counts[1]:>9} {counts[2]:>9} {p.device_bytes:>14,d}"
        lines.append(line)
    if pooled and any(s.pool is not None and s.pool.bisnp is None for _, s in runs):
        lines.append("# '-': flush mode has no snoop filter (no back-invalidation)")
    return lines
