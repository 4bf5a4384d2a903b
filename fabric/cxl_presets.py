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
"""
from __future__ import annotations

from dataclasses import dataclass

from cxlsim.errors import InputError
from cxlsim.fabric.cxl import CXLDeviceParams, CXLHostParams, CXLLinkParams, CXLSwitchParams
from cxlsim.fabric.host import HostParams

__all__ = ["CXLPoolPreset", "CXL_PRESETS", "get_cxl_preset", "COHERENCE_MODES"]

COHERENCE_MODES = ("hw", "flush")


@dataclass(frozen=True, kw_only=True)
class CXLPoolPreset:
    """A named, sourced CXL pool: switch, device, links, host path, and what the generation allows."""

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
    """Coherence modes the generation supports ('hw', 'flush')."""
    max_switch_levels: int
    """1: no cascaded switches."""
    snoop_filter_lines: int
    """Capacity of the device's snoop filter, lines (used in 'hw' mode)."""
    source: str
    """Where the figures come from (tags explained in this module's docstring)."""

    def check(self, coherence: str, switch_levels: int = 1) -> None:
        """InputError if this generation cannot run `coherence` on `switch_levels` levels of switches."""
        if coherence not in COHERENCE_MODES:
            raise InputError(f"coherence: expected one of {', '.join(COHERENCE_MODES)}, got {coherence!r}")
        if coherence not in self.coherence_modes:
            raise InputError(f"coherence: {self.name} (CXL {self.generation}) supports only "
                             f"{', '.join(self.coherence_modes)}, got {coherence!r}: CXL {self.generation} "
                             "has no multi-host coherent sharing (no back-invalidation)")
        if not isinstance(switch_levels, int) or switch_levels < 1:
            raise InputError(f"switch_levels: expected an integer >= 1, got {switch_levels!r}")
        if switch_levels > self.max_switch_levels:
            raise InputError(f"switch_levels: {self.name} (CXL {self.generation}) allows at most "
                             f"{self.max_switch_levels} level(s) of switches, got {switch_levels}: "
                             f"CXL {self.generation} has no cascaded switches")


_HOST = HostParams(memcpy_bw_bytes_per_ns=12.0,  # [DEV] 11-16 GB/s
                   reduce_bw_bytes_per_ns=6.0)   # half of the copy bandwidth, as the network presets
_LINK = CXLLinkParams(latency_ns=2.5, retimers=0, retimer_latency_ns=30.0)  # [E2E], [RT]
_PATH = CXLHostParams(port_latency_ns=25.0,        # [E2E]
                      outstanding_lines=48,        # [OUT]
                      hit_latency_ns=20.0,         # [CPU]
                      flush_ns_per_line=5.0,       # [CPU]
                      fence_ns=30.0)               # [CPU]
_GiB = 1 << 30


def _pool(name, generation, port_bw, media_bw, modes, levels, source):
    return CXLPoolPreset(
        name=name, generation=generation,
        switch=CXLSwitchParams(hop_latency_ns=50.0, port_bw_bytes_per_ns=port_bw,  # [SW]
                               lanes=256, lanes_per_port=16),                      # [LANES]
        device=CXLDeviceParams(media_latency_ns=90.0, media_bw_bytes_per_ns=media_bw,  # [E2E]
                               heads=1, capacity_bytes=256 * _GiB),
        link=_LINK, host_path=_PATH, host=_HOST,
        coherence_modes=modes, max_switch_levels=levels,  # [CXL]
        snoop_filter_lines=262144,                        # [SF]
        source=source)


CXL_PRESETS = {p.name: p for p in (
    # PCIe 5 x16, 64 GB/s [PCIE5]; 2 DDR5 channels, 63 GB/s [DMSIM]; flush only, one switch level [CXL].
    _pool("cxl2-pool", "2.0", 64.0, 63.0, ("flush",), 1, "PCIE5, SW, E2E, RT, DMSIM, LANES, OUT, CPU, DEV, CXL"),
    # PCIe 6 x16, 128 GB/s [PCIE6]; 4 DDR5 channels, 126 GB/s [DMSIM]; hw or flush, switch trees [CXL].
    _pool("cxl3-pool", "3.x", 128.0, 126.0, ("hw", "flush"), 2,
          "PCIE6, SW, E2E, RT, DMSIM, LANES, OUT, CPU, SF, DEV, CXL"),
)}
"""CXL pool presets by name."""


def get_cxl_preset(name: str) -> CXLPoolPreset:
    """Return the CXL pool preset called `name`; an InputError names the known ones."""
    try:
        return CXL_PRESETS[name]
    except KeyError:
        raise InputError(f"unknown CXL pool preset {name!r}; expected one of {', '.join(sorted(CXL_PRESETS))}") from None
