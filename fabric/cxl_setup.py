"""A CXL pool preset elaborated for one scenario: overrides, coherence mode, switch levels, devices.

`elaborate(preset, fabric)` applies the scenario's `fabric.cxl` and `fabric.host`
settings to a `CXLPoolPreset` and makes the run's choices:

- `fabric.cxl.load_latency` scales every latency figure of the preset (core to
  port, links and retimers, switch hop, media) by one factor, so that the
  unloaded load through one switch level equals it; the host bandwidth,
  outstanding lines x 64 B / load latency, moves with it (Little's law);
- `outstanding_lines` and `device_bandwidth` replace the preset's figures;
- the coherence mode is `fabric.cxl.coherence`, or hw if the generation has it,
  else flush;
- the switch levels are `fabric.cxl.switch_levels`, or one if the hosts and the
  devices' heads fit on one switch (or the generation has no switch trees), else two;
  none on a switchless preset (multi-headed devices, every host on a head of each).

What the generation cannot run (hw on CXL 2.0, a tree without cascaded switches)
is an InputError naming the `fabric.cxl` key; hosts that do not fit the switch
ports are one naming `fabric.nodes` and the limit. Units: ns, bytes, bytes/ns.
"""
from __future__ import annotations

import dataclasses

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network_setup import merge

__all__ = ["CXLSetup", "elaborate", "scale_latency"]


def _gbs(value: float) -> str:
    return f"{value!r} GB/s"


def _ns(value: float) -> str:
    return f"{value!r} ns"


@dataclasses.dataclass(frozen=True)
class CXLSetup:
    """A scenario's CXL pool: the preset with its overrides, and the choices made for the run."""

    preset: object
    """The `CXLPoolPreset` with `fabric.cxl` and `fabric.host` overrides applied."""
    coherence: Coherence
    switch_levels: int
    devices: int
    chunk_bytes: int

    def new_transport(self, hosts: int, ranks_per_host: int = 1, env=None) -> CXLPoolTransport:
        """A pool transport of `hosts` hosts x `ranks_per_host` ranks (sharing their host's port,
        `CXLPoolTransport`) for one simulated call, in `env` (default: a fresh environment)."""
        return CXLPoolTransport(self.preset, hosts, coherence=self.coherence,
                                env=env if env is not None else Environment(), devices=self.devices,
                                chunk_bytes=self.chunk_bytes, switch_levels=self.switch_levels,
                                ranks_per_host=ranks_per_host)

    def written_out(self) -> dict:
        p = self.preset
        # a switchless preset takes no switch levels (0 is its only value, not a fabric.cxl.switch_levels choice)
        levels = {"fabric.cxl.switch_levels": self.switch_levels} if self.switch_levels else {}
        return {
            "fabric.cxl.coherence": self.coherence.value, **levels,
            "fabric.cxl.load_latency": _ns(p.load_latency_ns()),
            "fabric.cxl.outstanding_lines": p.host_path.outstanding_lines,
            "fabric.cxl.device_bandwidth": _gbs(p.device.media_bw_bytes_per_ns),
            "fabric.host.memcpy_bandwidth": _gbs(p.host.memcpy_bw_bytes_per_ns),
            "fabric.host.reduce_bandwidth": _gbs(p.host.reduce_bw_bytes_per_ns),
        }

    def describe(self, nodes: int, ranks_per_host: int = 1) -> str:
        attach = (f"{self.switch_levels} switch level(s)" if self.switch_levels else
                  f"no switch ({self.preset.device.heads}-headed devices)")
        ranks = "1 rank" if ranks_per_host == 1 else f"{ranks_per_host} ranks"
        return (f"{self.preset.name}, {self.coherence.value} coherence, {self.devices} device(s), "
                f"{attach}, {nodes} hosts x {ranks}")


def scale_latency(preset, load_latency_ns: float):
    """`preset` with every latency figure scaled by one factor so that its one-level load (no level on a
    switchless preset) takes `load_latency_ns`."""
    k = load_latency_ns / preset.load_latency_ns()
    return dataclasses.replace(
        preset,
        host_path=dataclasses.replace(preset.host_path, port_latency_ns=preset.host_path.port_latency_ns * k),
        link=dataclasses.replace(preset.link, latency_ns=preset.link.latency_ns * k,
                                 retimer_latency_ns=preset.link.retimer_latency_ns * k),
        switch=dataclasses.replace(preset.switch, hop_latency_ns=preset.switch.hop_latency_ns * k),
        device=dataclasses.replace(preset.device, media_latency_ns=preset.device.media_latency_ns * k))


def elaborate(preset, fabric) -> CXLSetup:
    """The `CXLSetup` of a scenario's fabric section (`cxlsim.config.FabricConfig`) on `preset`."""
    cx = fabric.cxl
    if cx.load_latency_ns is not None:
        preset = scale_latency(preset, cx.load_latency_ns)
    if cx.outstanding_lines is not None:
        preset = dataclasses.replace(preset, host_path=dataclasses.replace(
            preset.host_path, outstanding_lines=cx.outstanding_lines))
    if cx.device_bw_bytes_per_ns is not None:
        preset = dataclasses.replace(preset, device=dataclasses.replace(
            preset.device, media_bw_bytes_per_ns=cx.device_bw_bytes_per_ns))
    preset = dataclasses.replace(preset, host=merge(preset.host, fabric.host))
    if cx.coherence is not None:
        coherence = Coherence.parse(cx.coherence, "fabric.cxl.coherence")
    else:
        coherence = Coherence.HW if Coherence.HW in preset.coherence_modes else Coherence.FLUSH
    ports = cx.devices * preset.device.heads
    if preset.max_switch_levels == 0:
        levels = 0 if cx.switch_levels is None else cx.switch_levels
    else:
        levels = cx.switch_levels or (1 if fabric.nodes + ports <= preset.switch.max_ports
                                      or preset.max_switch_levels == 1 else 2)
    try:
        preset.check(coherence, levels)
    except InputError as exc:
        raise InputError(f"fabric.cxl.{exc}") from None
    try:
        if levels == 0:
            preset.device.check_heads(fabric.nodes)
        elif levels == 1:
            preset.switch.check_ports(fabric.nodes, ports)
        else:
            preset.switch.tree_leaves(fabric.nodes, ports)
    except InputError as exc:
        where = f"{levels} switch level(s)" if levels else "no switch"
        hint = ("; more hosts than heads make a sparse pod (fabric.preset: cxl-pods, fabric.pods.pool: "
                f"{preset.name}, docs/hybrid.md)" if levels == 0 else "")
        raise InputError(f"fabric.nodes: {fabric.nodes} on {where}: {exc}{hint}") from None
    return CXLSetup(preset, coherence, levels, cx.devices, cx.chunk_bytes)
