"""Named CXL pool parameter sets, each figure with its source, and the rules each generation enforces.

Sources (../shared/reference/hardware.md):
- [PCIE5] PCIe 5.0, 32 GT/s: about 64 GB/s per direction on x16 (CXL 1.x/2.0).
- [PCIE6] PCIe 6.0, 64 GT/s PAM4: about 128 GB/s per direction on x16 (CXL 3.x).
- [SW] One CXL switch adds about 100-120 ns to a load (industry reports): 50 ns
  per traversal, a load crosses it twice.
- [E2E] End-to-end load through one switch: about 220-250 ns (industry reports).
  Host 25 ns + link 2.5 ns + switch 50 ns + link 2.5 ns, twice, plus 90 ns of
  media gives 250 ns. Without the switch the same figures give 150 ns, +60 ns
  over local DRAM's 90 ns, a little under Pond's +70-90 ns [POND].
- [RT] Each retimer adds about 60 ns to a load (industry reports): 30 ns per
  traversal. The presets assume short in-rack links without retimers.
- [DMSIM] ASIC expander bandwidth 82-83% of DDR (CXL-DMSim, arXiv 2411.02282).
  Assumption: 2 DDR5-4800 channels per CXL 2.0 device (76.8 GB/s x 0.82 = 63 GB/s,
  about its x16 link) and 4 per CXL 3.x device (153.6 x 0.82 = 126 GB/s).
- [LANES] A 256-lane switch gives at most 16 x16 ports.
- [OUT] Assumption: one core keeps about 48 line requests in flight (the L2
  miss queue of recent server cores), so one host streams at most
  48 x 64 B / 250 ns = 12.3 GB/s, close to the development machine's
  single-thread copy bandwidth of 11-16 GB/s [DEV].
- [CPU] Assumptions, to be replaced by calibration: an LLC hit 20 ns,
  clflushopt issue 5 ns per line, a fence 30 ns once write-backs are done.
- [SF] Assumption: the device's snoop filter tracks 262144 lines (16 MiB).
- [CXL] CXL 2.0 has no multi-host coherent sharing (no back-invalidation) and no
  cascaded switches; pools share memory only through multi-headed devices with
  software coherence ('flush'). CXL 3.0 adds HDM-DB back-invalidation ('hw')
  and switch trees (papers.md, hardware.md).
- [CAP] Assumption: 256 GiB per device (a figure of the device class; no
  result here depends on it beyond the pool fitting in it).
- [HEAD] Assumption: single-headed devices, one switch port each.
- [POND] Pond (ASPLOS'23): multi-headed devices pool memory across 8-16 sockets
  with no switch, at +70-90 ns over local DRAM. Without the switch the [E2E]
  figures give 2 x (25 + 2.5) + 90 = 145 ns, +55 ns over 90 ns: a little under.
- [OCT] Octopus (arXiv 2501.09020): switchless pods whose hosts attach
  directly to small multi-headed devices (e.g. 4 ports).
- [MHD4] Assumption: Octopus's small device, 4 heads (its example port count
  [OCT]), each a x8 PCIe 5.0 link (32 GB/s per direction), the CXL 2.0 device
  class's media [DMSIM]; software coherence, as on today's multi-headed devices.
- [MHD16] Assumption: a 16-headed device (Pond's largest pool size), each head
  a x8 link: 32 GB/s per direction on PCIe 5.0, 64 GB/s on PCIe 6.0 (half of
  x16 [PCIE5], [PCIE6]). Its media is the same device class's as above.

A `CXLPoolPreset` is the CXL kind of `cxlsim.fabric.preset.Preset`: every figure
is a field (nothing is filled in behind its back), it uses the scenario keys of
`CXL_KEYS` and elaborates a scenario's fabric section into a `CXLSetup`
(`cxlsim.fabric.cxl_setup`). A plug-in declares one the same way, in its
`PRESETS` list (`cxlsim.plugins`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from cxlsim import plugins
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.fabric.cxl import CXLDeviceParams, CXLHostParams, CXLLinkParams, CXLSwitchParams
from cxlsim.fabric.host import HostParams

__all__ = ["CXLPoolPreset", "CXL_KEYS", "BUILTIN_CXL_PRESETS", "CXL_PRESETS", "get_cxl_preset",
           "cxl_presets", "COHERENCE_MODES"]

COHERENCE_MODES = Coherence.names()

CXL_KEYS = ("fabric.cxl.*", "fabric.host.*", "workload.iterations", "workload.warmup")
"""Scenario keys a CXL pool preset uses beyond `cxlsim.fabric.preset.COMMON_KEYS`."""


@dataclass(frozen=True, kw_only=True)
class CXLPoolPreset:
    """A named, sourced CXL pool: switch, device, links, host path, and what the generation allows."""

    kind: ClassVar[str] = "CXL pool preset"
    scenario_keys: ClassVar[tuple[str, ...]] = CXL_KEYS

    name: str
    """Registry name, e.g. 'cxl3-pool'."""
    generation: str
    """CXL generation, e.g. '2.0'."""
    switch: CXLSwitchParams
    device: CXLDeviceParams
    link: CXLLinkParams
    host_path: CXLHostParams
    host: HostParams
    """Local copy and reduction speeds (the network presets' host)."""
    coherence_modes: tuple
    """Coherence modes the generation supports (`Coherence` values)."""
    max_switch_levels: int
    """1: no cascaded switches; 0: no switch at all (hosts attach to multi-headed devices directly)."""
    snoop_filter_lines: int
    """Capacity of the device's snoop filter, lines (used in hw mode)."""
    source: str
    """Where the figures come from (tags explained in this module's docstring)."""

    def check(self, coherence: str, switch_levels: int = 1) -> None:
        """InputError if this generation cannot run `coherence` on `switch_levels` levels of switches."""
        coherence = Coherence.parse(coherence, "coherence")
        if coherence not in self.coherence_modes:
            raise InputError(f"coherence: {self.name} (CXL {self.generation}) supports only "
                             f"{', '.join(self.coherence_modes)}, got {coherence.value!r}: CXL {self.generation} "
                             "has no multi-host coherent sharing (no back-invalidation)")
        if not isinstance(switch_levels, int) or isinstance(switch_levels, bool) or switch_levels < 0:
            raise InputError(f"switch_levels: expected an integer >= 0, got {switch_levels!r}")
        if self.max_switch_levels == 0 and switch_levels:
            raise InputError(f"switch_levels: {self.name} has no switch (hosts attach to the devices' heads "
                             f"directly): expected 0, got {switch_levels}")
        if switch_levels > self.max_switch_levels:
            raise InputError(f"switch_levels: {self.name} (CXL {self.generation}) allows at most "
                             f"{self.max_switch_levels} level(s) of switches, got {switch_levels}: "
                             f"CXL {self.generation} has no cascaded switches")

    def load_latency_ns(self, switch_levels: int | None = None) -> float:
        """Unloaded load latency from a host through `switch_levels` switch levels (default: one, none on a
        switchless preset) to the media and back, ns: 2 x (core to port + a link per level and the device's
        + a hop per level) + media."""
        if switch_levels is None:
            switch_levels = min(1, self.max_switch_levels)
        link = self.link.traversal_ns
        one_way = self.host_path.port_latency_ns + (switch_levels + 1) * link + switch_levels * self.switch.hop_latency_ns
        return 2 * one_way + self.device.media_latency_ns

    def elaborate(self, fabric):
        """The `CXLSetup` of a scenario's fabric section (`cxlsim.config.FabricConfig`) on this preset."""
        from cxlsim.fabric.cxl_setup import elaborate

        return elaborate(self, fabric)


_GiB = 1 << 30


BUILTIN_CXL_PRESETS = (
    CXLPoolPreset(
        name="cxl2-pool", generation="2.0",
        switch=CXLSwitchParams(hop_latency_ns=50.0,                # [SW]
                               port_bw_bytes_per_ns=64.0,          # [PCIE5] x16
                               lanes=256, lanes_per_port=16),      # [LANES]
        device=CXLDeviceParams(media_latency_ns=90.0,              # [E2E]
                               media_bw_bytes_per_ns=63.0,         # [DMSIM] 2 DDR5 channels
                               heads=1,                            # [HEAD]
                               capacity_bytes=256 * _GiB),         # [CAP]
        link=CXLLinkParams(latency_ns=2.5, retimers=0, retimer_latency_ns=30.0),  # [E2E], [RT]
        host_path=CXLHostParams(port_latency_ns=25.0,              # [E2E]
                                outstanding_lines=48,              # [OUT]
                                hit_latency_ns=20.0,               # [CPU]
                                flush_ns_per_line=5.0,             # [CPU]
                                fence_ns=30.0),                    # [CPU]
        host=HostParams(memcpy_bw_bytes_per_ns=12.0,               # [DEV] 11-16 GB/s
                        reduce_bw_bytes_per_ns=6.0),               # half the copy bandwidth, as the network presets
        coherence_modes=(Coherence.FLUSH,), max_switch_levels=1,   # [CXL]
        snoop_filter_lines=262144,                                 # [SF]
        source="PCIE5, SW, E2E, RT, DMSIM, LANES, OUT, CPU, DEV, CXL, CAP, HEAD"),
    CXLPoolPreset(
        name="cxl3-pool", generation="3.x",
        switch=CXLSwitchParams(hop_latency_ns=50.0,                # [SW]
                               port_bw_bytes_per_ns=128.0,         # [PCIE6] x16
                               lanes=256, lanes_per_port=16),      # [LANES]
        device=CXLDeviceParams(media_latency_ns=90.0,              # [E2E]
                               media_bw_bytes_per_ns=126.0,        # [DMSIM] 4 DDR5 channels
                               heads=1,                            # [HEAD]
                               capacity_bytes=256 * _GiB),         # [CAP]
        link=CXLLinkParams(latency_ns=2.5, retimers=0, retimer_latency_ns=30.0),  # [E2E], [RT]
        host_path=CXLHostParams(port_latency_ns=25.0,              # [E2E]
                                outstanding_lines=48,              # [OUT]
                                hit_latency_ns=20.0,               # [CPU]
                                flush_ns_per_line=5.0,             # [CPU]
                                fence_ns=30.0),                    # [CPU]
        host=HostParams(memcpy_bw_bytes_per_ns=12.0,               # [DEV] 11-16 GB/s
                        reduce_bw_bytes_per_ns=6.0),               # half the copy bandwidth, as the network presets
        coherence_modes=(Coherence.HW, Coherence.FLUSH), max_switch_levels=2,  # [CXL]
        snoop_filter_lines=262144,                                 # [SF]
        source="PCIE6, SW, E2E, RT, DMSIM, LANES, OUT, CPU, SF, DEV, CXL, CAP, HEAD"),
)
"""The built-in CXL pool presets (the registry of every kind is `cxlsim.fabric.preset`)."""


def _switchless(preset: CXLPoolPreset, name: str, head_bw_bytes_per_ns: float, heads: int, source: str):
    """`preset`'s figures with no switch: `heads`-headed devices, each head a link of `head_bw_bytes_per_ns`."""
    return replace(preset, name=name,
                   switch=CXLSwitchParams(hop_latency_ns=0.0,                            # no switch: not crossed
                                          port_bw_bytes_per_ns=head_bw_bytes_per_ns,     # each head's link
                                          lanes=8 * heads, lanes_per_port=8),            # x8 heads [MHD16]
                   device=replace(preset.device, heads=heads), max_switch_levels=0,
                   source=source)


BUILTIN_CXL_PRESETS += (
    _switchless(BUILTIN_CXL_PRESETS[0], "mhd2-pool", 32.0, 16,
                "POND, OCT, MHD16, PCIE5, E2E, RT, DMSIM, OUT, CPU, DEV, CXL, CAP"),
    _switchless(BUILTIN_CXL_PRESETS[1], "mhd3-pool", 64.0, 16,
                "POND, OCT, MHD16, PCIE6, E2E, RT, DMSIM, OUT, CPU, SF, DEV, CXL, CAP"),
    _switchless(BUILTIN_CXL_PRESETS[0], "octopus4-pool", 32.0, 4,
                "OCT, MHD4, PCIE5, E2E, RT, DMSIM, OUT, CPU, DEV, CXL, CAP"),
)

CXL_PRESETS = {p.name: p for p in BUILTIN_CXL_PRESETS}
"""The built-in CXL pool presets by name."""


def cxl_presets() -> dict:
    """Every CXL pool preset by name: the built-ins, then the `CXLPoolPreset` records of plug-ins."""
    found = dict(CXL_PRESETS)
    found.update({p.name: p for p in plugins.records("PRESETS") if isinstance(p, CXLPoolPreset)})
    return found


def get_cxl_preset(name: str) -> CXLPoolPreset:
    """Return the CXL pool preset called `name` (built-in or plug-in); an InputError names the known ones."""
    known = cxl_presets()
    try:
        return known[name]
    except KeyError:
        raise InputError(f"unknown CXL pool preset {name!r}; expected one of {', '.join(sorted(known))}") from None
