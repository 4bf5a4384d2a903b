"""Deterministic routing: shortest paths (in hops), ECMP by a stable flow hash.

At each node the next hop is one of the neighbours one hop closer to the
destination, sorted by name; the flow (source host, destination host) picks
among them by `zlib.crc32`, never Python's salted `hash()`, so routes are the
same in every run.
"""
from __future__ import annotations

import zlib

import networkx as nx

__all__ = ["Router", "flow_hash"]


def flow_hash(src, dst) -> int:
    """A stable 32-bit hash of a flow (source node, destination node)."""
    return zlib.crc32(f"{src}>{dst}".encode())


class Router:
    """Shortest-path routes over a topology graph, with ECMP; routes are cached."""

    def __init__(self, graph: nx.Graph):
        self.graph = graph
        self._dist: dict = {}
        self._routes: dict = {}

    def _distances(self, dst) -> dict:
        dist = self._dist.get(dst)
        if dist is None:
            dist = self._dist[dst] = nx.single_source_shortest_path_length(self.graph, dst)
        return dist

    def route(self, src, dst) -> list:
        """The node path [src, ..., dst]."""
        key = (src, dst)
        path = self._routes.get(key)
        if path is None:
            dist = self._distances(dst)
            h = flow_hash(src, dst)
            path, node = [src], src
            while node != dst:
                nexts = sorted((n for n in self.graph.neighbors(node) if dist[n] == dist[node] - 1), key=str)
                node = nexts[h % len(nexts)]
                path.append(node)
            self._routes[key] = path
        return path
