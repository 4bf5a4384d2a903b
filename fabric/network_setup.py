"""A network preset elaborated for one scenario: the preset with its overrides, the topology graph, the ranks.

`elaborate(preset, fabric)` applies the scenario's `fabric.links`, `switch`, `nic` and
`host` overrides to the preset's figures (an unset override keeps the preset's figure),
builds the topology graph `fabric.topology` names (a star, a fat tree, or a .yaml/.graphml
file, whose host count must be `fabric.nodes`) and places `fabric.ranks_per_node` ranks
on each host. The `NetworkSetup` builds a fresh SimPy network and transport per call.
Units: ns, bytes, bytes/ns (= GB/s).
"""
from __future__ import annotations

import dataclasses

from cxlsim.errors import InputError
from cxlsim.fabric import topology
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import Network, build
from cxlsim.fabric.placement import Placement
from cxlsim.fabric.transport import NetworkTransport

__all__ = ["NetworkSetup", "elaborate", "apply_overrides", "build_graph", "merge"]


def merge(params, overrides):
    """`params` (a parameter dataclass) with every set field of `overrides` (a config section) of the same name."""
    values = {f.name: getattr(overrides, f.name) for f in dataclasses.fields(overrides)
              if getattr(overrides, f.name) is not None and hasattr(params, f.name)}
    try:
        return dataclasses.replace(params, **values)
    except ValueError as exc:
        raise InputError(f"fabric: {exc}") from None


def apply_overrides(preset, fabric):
    """The network preset with the scenario's `links`, `switch`, `nic` and `host` overrides applied."""
    return dataclasses.replace(
        preset,
        switch_kind=fabric.switch.kind or preset.switch_kind,
        link=merge(preset.link, fabric.links),
        switch=merge(preset.switch, fabric.switch),
        nic=merge(preset.nic, fabric.nic),
        host=merge(preset.host, fabric.host),
    )


FAT_TREE_KEYS = {"hosts_per_leaf": None, "oversubscription": 1.0, "spines": None}
"""The fabric keys only a fat tree uses, and their unset values."""


def build_graph(fabric):
    """The topology graph the scenario names (star, fat_tree or a file); InputError for a fat tree's key
    set on another topology."""
    if fabric.topology != "fat_tree":
        given = [k for k, unset in FAT_TREE_KEYS.items() if getattr(fabric, k) != unset]
        if given:
            raise InputError(f"fabric.{given[0]}: applies to topology fat_tree, not {fabric.topology!r}; "
                             f"remove {', '.join('fabric.' + k for k in given)}")
    if fabric.topology == "star":
        return topology.star(fabric.nodes)
    if fabric.topology == "fat_tree":
        per_leaf = fabric.hosts_per_leaf or fabric.nodes
        return topology.fat_tree(fabric.nodes, per_leaf, fabric.oversubscription, fabric.spines)
    if fabric.topology.endswith((".yaml", ".yml", ".graphml", ".xml")):
        graph = topology.load(fabric.topology)
        found = len(topology.hosts(graph))
        if found != fabric.nodes:
            raise InputError(f"fabric.nodes: {fabric.nodes} but topology {fabric.topology!r} has {found} hosts")
        return graph
    raise InputError(f"fabric.topology: expected 'star', 'fat_tree' or a .yaml/.graphml file, "
                     f"got {fabric.topology!r}")


def _gbs(value: float) -> str:
    return f"{value!r} GB/s"


def _ns(value: float) -> str:
    return f"{value!r} ns"


@dataclasses.dataclass(frozen=True)
class NetworkSetup:
    """A scenario's network: the preset with overrides applied, its topology graph and rank placement."""

    preset: object
    """The `NetworkPreset` with the scenario's overrides applied."""
    graph: object
    """The topology (a networkx graph, `cxlsim.fabric.topology`)."""
    placement: Placement
    topology: str
    """What `fabric.topology` named ('star', 'fat_tree' or a file)."""

    def network(self) -> Network:
        """A freshly built network in a new environment."""
        return build(self.graph, self.preset, Environment())

    def new_transport(self, chunk_bytes: int) -> NetworkTransport:
        """A fresh network and transport for one simulated call; messages are pipelined in `chunk_bytes`."""
        return NetworkTransport(self.network(), self.placement, chunk_bytes)

    def written_out(self) -> dict:
        p = self.preset
        return {
            "fabric.links.bandwidth": _gbs(p.link.bw_bytes_per_ns), "fabric.links.latency": _ns(p.link.latency_ns),
            "fabric.switch.kind": p.switch_kind, "fabric.switch.latency": _ns(p.switch.latency_ns),
            "fabric.switch.mode": p.switch.mode, "fabric.nic.overhead": _ns(p.nic.overhead_ns),
            "fabric.nic.gap": _ns(p.nic.gap_ns), "fabric.nic.gap_per_byte": _ns(p.nic.gap_per_byte_ns),
            "fabric.host.memcpy_bandwidth": _gbs(p.host.memcpy_bw_bytes_per_ns),
            "fabric.host.reduce_bandwidth": _gbs(p.host.reduce_bw_bytes_per_ns),
        }

    def describe(self, nodes: int, placement=None) -> str:
        """One line: preset, topology, nodes x ranks (policy) of `placement` (default the scenario's)."""
        pl = placement if placement is not None else self.placement
        return f"{self.preset.name}, {self.topology}, {nodes} nodes x {pl.ranks_per_node} ranks ({pl.policy})"


def elaborate(preset, fabric) -> NetworkSetup:
    """The `NetworkSetup` of a scenario's fabric section (`cxlsim.config.FabricConfig`) on `preset`."""
    return NetworkSetup(apply_overrides(preset, fabric), build_graph(fabric),
                        Placement(fabric.nodes, fabric.ranks_per_node, fabric.placement), fabric.topology)
