"""Placement of ranks on hosts: `block` or `round_robin`.

With `nodes` hosts and `ranks_per_node` ranks each (P = nodes * ranks_per_node):
- block: rank r runs on host r // ranks_per_node (consecutive ranks share a host);
- round_robin: rank r runs on host r % nodes.
Messages between ranks on one host go through shared memory; others cross the network.
"""
from __future__ import annotations

from cxlsim.errors import InputError

__all__ = ["Placement", "POLICIES"]

POLICIES = ("block", "round_robin")


class Placement:
    """Which host index each rank runs on."""

    def __init__(self, nodes: int, ranks_per_node: int, policy: str = "block"):
        if nodes < 1:
            raise InputError(f"nodes: expected an integer >= 1, got {nodes!r}")
        if ranks_per_node < 1:
            raise InputError(f"ranks_per_node: expected an integer >= 1, got {ranks_per_node!r}")
        if policy not in POLICIES:
            raise InputError(f"placement: expected one of {', '.join(POLICIES)}, got {policy!r}")
        self.nodes, self.ranks_per_node, self.policy = nodes, ranks_per_node, policy
        self.size = nodes * ranks_per_node
        if policy == "block":
            self.host_of = [r // ranks_per_node for r in range(self.size)]
        else:
            self.host_of = [r % nodes for r in range(self.size)]

    def ranks_on(self, host: int) -> list[int]:
        """The ranks on host index `host`, in rank order."""
        return [r for r in range(self.size) if self.host_of[r] == host]

    def groups(self) -> list[list[int]]:
        """Ranks grouped by host, hosts in order (the first rank of each group is its leader)."""
        return [self.ranks_on(h) for h in range(self.nodes)]

    def same_host(self, a: int, b: int) -> bool:
        return self.host_of[a] == self.host_of[b]
