"""Ethernet and InfiniBand switches: port-to-port latency and a forwarding mode.

A switch forwards each chunk from its ingress link to the egress `Port` that
routing picks. Each egress port is a FIFO queue (see `cxlsim.fabric.link`).

- `store-and-forward`: the chunk must be fully received, then it waits
  `latency_ns`, then it queues at the egress port.
- `cut-through`: the chunk's head can leave `latency_ns` after it arrived, but
  the tail never leaves before it has arrived (so a faster egress link waits).

Both kinds are lossless here (IB credits; Ethernet with PFC for RoCE, TCP
losses are not modelled). They differ in their default mode: InfiniBand
switches cut through; Ethernet switches default to store-and-forward unless a
preset says otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SwitchParams", "Switch", "EthernetSwitch", "IBSwitch", "SWITCHES", "MODES"]

MODES = ("cut-through", "store-and-forward")


@dataclass(frozen=True, kw_only=True)
class SwitchParams:
    """Parameters of one switch."""

    latency_ns: float
    """Port-to-port forwarding latency, ns."""
    mode: str
    """'cut-through' or 'store-and-forward'."""

    def __post_init__(self):
        if not self.latency_ns >= 0:
            raise ValueError(f"latency_ns: expected >= 0, got {self.latency_ns!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {self.mode!r}")


class Switch:
    """A switch node; `forward_ready_ns` says when a chunk may start on the egress port."""

    kind = "switch"
    default_mode = "store-and-forward"

    def __init__(self, name: str, params: SwitchParams):
        self.name = name
        self.params = params
        self.cut_through = params.mode == "cut-through"

    def forward_ready_ns(self, head_in_ns: float, tail_in_ns: float, egress_ns_per_byte: float,
                         size_bytes: int) -> float:
        """Earliest start on the egress port for a chunk whose head/tail arrive at the given times."""
        lat = self.params.latency_ns
        if not self.cut_through:
            return tail_in_ns + lat
        # The egress may not finish before the tail has arrived and been forwarded.
        tail_bound = tail_in_ns + lat - size_bytes * egress_ns_per_byte
        head = head_in_ns + lat
        return head if head > tail_bound else tail_bound


class EthernetSwitch(Switch):
    """An Ethernet switch (store-and-forward by default)."""

    kind = "ethernet"


class IBSwitch(Switch):
    """An InfiniBand switch (cut-through by default)."""

    kind = "infiniband"
    default_mode = "cut-through"


SWITCHES = {cls.kind: cls for cls in (EthernetSwitch, IBSwitch)}
"""Switch classes by kind name, as used in topology graphs ('switch_kind')."""
