"""Named hardware parameter sets for network fabrics, each figure with its source.

Sources are the project's reference notes (../shared/reference/hardware.md):
- [IB] InfiniBand HDR/NDR: about 1.0-1.5 us one-way small-message MPI latency,
  200/400 Gb/s links, switch port-to-port under 400 ns (vendor figures, OSU
  osu_latency reports).
- [ROCE] RoCE / RDMA Ethernet: about 2-3 us MPI latency (vendor slides).
- [TCP] TCP over 25-100 GbE: about 16-18 us MPI latency over a standard NIC
  (cMPI measurements).
- [ESW] Ethernet switch: about 0.3-1 us per hop, by switch class.
- [DEV] Development machine: single-thread copy 11-16 GB/s for 64 MiB copies.
- [LOGGP] Assumption, not measured: g = o (the message rate is bounded by the
  CPU overhead) and G = 1 / link bandwidth (the NIC keeps up with its link).
- [PROP] Assumption: 5 m of cable at about 5 ns/m = 25 ns per link.
- [RED] Assumption: a reduction reads two operands and writes one, so it runs
  at about half the copy bandwidth.
- [CT] Assumption: data-centre switches cut through when the ingress and
  egress speeds match; pick store-and-forward in a scenario to model otherwise.

A preset's one-way small-message latency is 2*o + 2*propagation + switch
latency on a single switch; each preset's comment shows that sum against its
source's range.

A `NetworkPreset` is the network kind of `cxlsim.fabric.preset.Preset`: it
elaborates a scenario's fabric section into a `NetworkSetup`
(`cxlsim.fabric.network_setup`) and uses the scenario keys of `NETWORK_KEYS`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cxlsim.errors import InputError
from cxlsim.fabric.host import HostParams, NicParams
from cxlsim.fabric.link import LinkParams
from cxlsim.fabric.switch import SWITCHES, SwitchParams

__all__ = ["NetworkPreset", "NETWORK_KEYS", "BUILTIN_NETWORK_PRESETS", "PRESETS", "get_preset"]

NETWORK_KEYS = ("fabric.topology", "fabric.ranks_per_node", "fabric.placement", "fabric.hosts_per_leaf",
                "fabric.oversubscription", "fabric.spines", "fabric.links.*", "fabric.switch.*", "fabric.nic.*",
                "fabric.host.*", "workload.selector", "workload.inter_algorithm", "workload.chunk", "workload.root",
                "workload.iterations", "workload.warmup")
"""Scenario keys a network preset uses beyond `cxlsim.fabric.preset.COMMON_KEYS`."""


@dataclass(frozen=True, kw_only=True)
class NetworkPreset:
    """A named, sourced set of component parameters for one kind of network fabric."""

    kind: ClassVar[str] = "network preset"
    scenario_keys: ClassVar[tuple[str, ...]] = NETWORK_KEYS

    name: str
    """Registry name, e.g. 'ib-hdr'."""
    switch_kind: str
    """Key of cxlsim.fabric.switch.SWITCHES."""
    link: LinkParams
    switch: SwitchParams
    nic: NicParams
    host: HostParams
    source: str
    """Where the figures come from (tags explained in this module's docstring)."""

    def __post_init__(self):
        if self.switch_kind not in SWITCHES:
            raise ValueError(f"switch_kind: expected one of {sorted(SWITCHES)}, got {self.switch_kind!r}")

    def elaborate(self, fabric):
        """The `NetworkSetup` of a scenario's fabric section (`cxlsim.config.FabricConfig`) on this preset."""
        from cxlsim.fabric.network_setup import elaborate

        return elaborate(self, fabric)




_HOST = HostParams(memcpy_bw_bytes_per_ns=12.0,  # [DEV] 11-16 GB/s
                   reduce_bw_bytes_per_ns=6.0)   # [RED] half of the copy bandwidth
_PROP_NS = 25.0  # [PROP]


def _preset(name, kind, link_gb_per_s, overhead_ns, switch_ns, source):
    return NetworkPreset(
        name=name,
        switch_kind=kind,
        link=LinkParams(bw_bytes_per_ns=link_gb_per_s, latency_ns=_PROP_NS),
        switch=SwitchParams(latency_ns=switch_ns, mode="cut-through"),  # [CT]
        nic=NicParams(overhead_ns=overhead_ns, gap_ns=overhead_ns,  # [LOGGP] g = o
                      gap_per_byte_ns=1.0 / link_gb_per_s),          # [LOGGP] G = 1/bw
        host=_HOST,
        source=source,
    )


BUILTIN_NETWORK_PRESETS = (
    # 10 Gb/s = 1.25 GB/s; o = 7.5 us [TCP]; switch 1 us [ESW]: one-way 16.05 us (TCP: 16-18 us).
    _preset("eth-10g-tcp", "ethernet", 1.25, 7500.0, 1000.0, "TCP, ESW, DEV, LOGGP, PROP, RED, CT"),
    # 25 Gb/s = 3.125 GB/s; o = 7.5 us [TCP]; switch 1 us [ESW]: one-way 16.05 us (TCP: 16-18 us).
    _preset("eth-25g-tcp", "ethernet", 3.125, 7500.0, 1000.0, "TCP, ESW, DEV, LOGGP, PROP, RED, CT"),
    # 100 Gb/s = 12.5 GB/s; o = 7.5 us [TCP]; switch 1 us [ESW]: one-way 16.05 us (TCP: 16-18 us).
    _preset("eth-100g-tcp", "ethernet", 12.5, 7500.0, 1000.0, "TCP, ESW, DEV, LOGGP, PROP, RED, CT"),
    # 100 Gb/s = 12.5 GB/s; o = 0.9 us [ROCE]; switch 0.6 us [ESW]: one-way 2.45 us (RoCE: 2-3 us).
    _preset("eth-100g-roce", "ethernet", 12.5, 900.0, 600.0, "ROCE, ESW, DEV, LOGGP, PROP, RED, CT"),
    # 200 Gb/s = 25 GB/s [IB]; o = 0.35 us; switch 400 ns [IB]: one-way 1.15 us (IB: 1.0-1.5 us).
    _preset("ib-hdr", "infiniband", 25.0, 350.0, 400.0, "IB, DEV, LOGGP, PROP, RED"),
    # 400 Gb/s = 50 GB/s [IB]; o = 0.35 us; switch 400 ns [IB]: one-way 1.15 us (IB: 1.0-1.5 us).
    _preset("ib-ndr", "infiniband", 50.0, 350.0, 400.0, "IB, DEV, LOGGP, PROP, RED"),
)
"""The built-in network presets (the registry of every kind is `cxlsim.fabric.preset`)."""

PRESETS = {p.name: p for p in BUILTIN_NETWORK_PRESETS}
"""The built-in network presets by name."""


def get_preset(name: str) -> NetworkPreset:
    """Return the built-in network preset called `name`; an InputError names the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise InputError(f"unknown preset {name!r}; expected one of {', '.join(sorted(PRESETS))}") from None
