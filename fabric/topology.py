"""Topologies: networkx graphs with typed node and edge attributes.

A topology is an undirected `networkx.Graph`:
- node attribute `kind`: 'host' or 'switch'. A switch may set `switch_kind`
  ('ethernet' or 'infiniband'), `latency_ns` and `mode`; unset ones come from
  the preset when the fabric is built.
- edge attributes, all optional: `bw_bytes_per_ns` (absolute bandwidth),
  `bw_factor` (a multiple of the preset's link bandwidth, default 1) and
  `latency_ns`.
Hosts are taken in the graph's node order; each host has exactly one link
(its NIC). `validate` rejects disconnected or ill-typed graphs.

Builders: `star` (one switch), `fat_tree` (two-level leaf-spine with an
oversubscription factor) and `load` (YAML or GraphML, with unit strings such
as bandwidth: '25 GB/s', latency: '100 ns').
"""
from __future__ import annotations

import math
import os

import networkx as nx
import yaml

from cxlsim.errors import InputError
from cxlsim.fabric.switch import MODES, SWITCHES
from cxlsim.units import UnitError, parse_bandwidth, parse_time

__all__ = ["TopologyError", "star", "fat_tree", "load", "validate", "hosts"]


class TopologyError(InputError):
    """A topology graph is malformed; the message names the node or edge."""


def hosts(graph: nx.Graph) -> list:
    """The host nodes, in graph order."""
    return [n for n, kind in graph.nodes(data="kind") if kind == "host"]


def star(nodes: int) -> nx.Graph:
    """`nodes` hosts h0..h{n-1} on one switch 'sw0'."""
    if nodes < 1:
        raise TopologyError(f"nodes: expected >= 1, got {nodes!r}")
    g = nx.Graph(name=f"star-{nodes}")
    for i in range(nodes):
        g.add_node(f"h{i}", kind="host")
    g.add_node("sw0", kind="switch")
    g.add_edges_from((f"h{i}", "sw0") for i in range(nodes))
    return g


def fat_tree(nodes: int, hosts_per_leaf: int, oversubscription: float = 1.0, spines: int | None = None) -> nx.Graph:
    """Two-level leaf-spine tree: hosts in blocks of `hosts_per_leaf` under leaves, every leaf on every spine.

    The leaf's uplinks carry `hosts_per_leaf / oversubscription` host links' worth
    of bandwidth in total, spread over `spines` links (default: that number
    rounded, at least 1).
    """
    if nodes < 1 or hosts_per_leaf < 1:
        raise TopologyError(f"fat_tree: expected nodes >= 1 and hosts_per_leaf >= 1, got {nodes}, {hosts_per_leaf}")
    if not oversubscription > 0:
        raise TopologyError(f"oversubscription: expected > 0, got {oversubscription!r}")
    if spines is None:
        spines = max(1, round(hosts_per_leaf / oversubscription))
    if spines < 1:
        raise TopologyError(f"spines: expected >= 1, got {spines!r}")
    leaves = math.ceil(nodes / hosts_per_leaf)
    g = nx.Graph(name=f"fat-tree-{nodes}-{hosts_per_leaf}-{oversubscription}")
    for i in range(nodes):
        g.add_node(f"h{i}", kind="host")
    for leaf in range(leaves):
        g.add_node(f"leaf{leaf}", kind="switch")
    for i in range(nodes):
        g.add_edge(f"h{i}", f"leaf{i // hosts_per_leaf}")
    if leaves > 1:
        factor = hosts_per_leaf / (oversubscription * spines)
        for s in range(spines):
            g.add_node(f"spine{s}", kind="switch")
            for leaf in range(leaves):
                g.add_edge(f"leaf{leaf}", f"spine{s}", bw_factor=factor)
    return g


def _parse_attrs(where: str, attrs: dict, allowed: dict) -> dict:
    out = {}
    for key, value in attrs.items():
        if key not in allowed:
            raise TopologyError(f"{where}: unknown attribute {key!r}; expected one of {', '.join(allowed)}")
        name, parse = allowed[key]
        try:
            out[name] = parse(value)
        except (UnitError, ValueError, TypeError) as exc:
            raise TopologyError(f"{where}.{key}: {exc}") from None
    return out


def _positive_float(value) -> float:
    value = float(value)
    if not value > 0:
        raise ValueError(f"expected a number > 0, got {value!r}")
    return value


_NODE_ATTRS = {"kind": ("kind", str), "switch_kind": ("switch_kind", str),
               "latency": ("latency_ns", parse_time), "mode": ("mode", str)}
_EDGE_ATTRS = {"bandwidth": ("bw_bytes_per_ns", parse_bandwidth), "latency": ("latency_ns", parse_time),
               "bw_factor": ("bw_factor", _positive_float)}


def load(path: str) -> nx.Graph:
    """Load a topology from YAML (`nodes: [{name, kind, ...}]`, `links: [{a, b, ...}]`) or GraphML."""
    if not os.path.exists(path):
        raise TopologyError(f"topology file {path!r}: no such file")
    g = nx.Graph(name=os.path.basename(path))
    if path.endswith((".graphml", ".xml")):
        try:
            raw = nx.read_graphml(path)
        except Exception as exc:  # networkx raises several parser errors
            raise TopologyError(f"topology file {path!r}: not valid GraphML ({exc})") from None
        if raw.is_directed() or raw.is_multigraph():
            raise TopologyError(f"topology file {path!r}: expected an undirected simple graph")
        for n, attrs in raw.nodes(data=True):
            g.add_node(n, **_parse_attrs(f"node {n!r}", attrs, _NODE_ATTRS))
        for a, b, attrs in raw.edges(data=True):
            g.add_edge(a, b, **_parse_attrs(f"link {a!r}-{b!r}", attrs, _EDGE_ATTRS))
        return validate(g)
    with open(path, encoding="utf-8") as fh:
        try:
            doc = yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise TopologyError(f"topology file {path!r}: not valid YAML ({exc})") from None
    if not isinstance(doc, dict) or set(doc) != {"nodes", "links"}:
        raise TopologyError(f"topology file {path!r}: expected a mapping with keys 'nodes' and 'links'")
    for i, node in enumerate(doc["nodes"] or []):
        if not isinstance(node, dict) or "name" not in node:
            raise TopologyError(f"nodes[{i}]: expected a mapping with a 'name', got {node!r}")
        attrs = {k: v for k, v in node.items() if k != "name"}
        g.add_node(node["name"], **_parse_attrs(f"nodes[{i}]", attrs, _NODE_ATTRS))
    for i, link in enumerate(doc["links"] or []):
        if not isinstance(link, dict) or "a" not in link or "b" not in link:
            raise TopologyError(f"links[{i}]: expected a mapping with 'a' and 'b', got {link!r}")
        for end in (link["a"], link["b"]):
            if end not in g:
                raise TopologyError(f"links[{i}]: unknown node {end!r}")
        attrs = {k: v for k, v in link.items() if k not in ("a", "b")}
        g.add_edge(link["a"], link["b"], **_parse_attrs(f"links[{i}]", attrs, _EDGE_ATTRS))
    return validate(g)


def validate(graph: nx.Graph) -> nx.Graph:
    """Check kinds, host degrees and connectivity; return the graph or raise TopologyError."""
    if graph.is_directed() or graph.is_multigraph():
        raise TopologyError("topology: expected an undirected simple graph (networkx.Graph)")
    if graph.number_of_nodes() == 0:
        raise TopologyError("topology: the graph has no nodes")
    for node, attrs in graph.nodes(data=True):
        kind = attrs.get("kind")
        if kind not in ("host", "switch"):
            raise TopologyError(f"node {node!r}: kind: expected 'host' or 'switch', got {kind!r}")
        if kind == "switch":
            if attrs.get("switch_kind", None) not in (None, *SWITCHES):
                raise TopologyError(f"node {node!r}: switch_kind: expected one of {sorted(SWITCHES)}, "
                                    f"got {attrs['switch_kind']!r}")
            if attrs.get("mode", None) not in (None, *MODES):
                raise TopologyError(f"node {node!r}: mode: expected one of {MODES}, got {attrs['mode']!r}")
        elif graph.degree(node) != 1:
            raise TopologyError(f"node {node!r}: a host needs exactly one link (its NIC), got {graph.degree(node)}")
    if nx.number_of_selfloops(graph):
        raise TopologyError(f"topology: self-loop at {next(nx.nodes_with_selfloops(graph))!r}")
    if not hosts(graph):
        raise TopologyError("topology: no host nodes")
    if not nx.is_connected(graph):
        parts = sorted((sorted(map(str, c))[:3] for c in nx.connected_components(graph)))
        raise TopologyError(f"topology: the graph is disconnected ({len(parts)} parts, e.g. {parts[:2]})")
    return graph
