"""Elaboration and the chunk pipeline: a topology graph plus a preset become a live network.

`build(graph, preset, env)` is the one explicit elaboration step: it makes a
`Host` per host node, a switch object per switch node (class from
`SWITCHES[switch_kind]`), a `Link` (two `Port`s) per edge and a `Router`, with
node and edge attributes overriding the preset. Nothing is created later.

`Network.transfer` moves one message from host to host. The message is cut
into chunks of at most `chunk_bytes`; every chunk queues at every egress port
on its route, so a long message pipelines across hops and flows that share a
port interleave chunk by chunk. Each chunk costs one event per switch it
crosses, plus one event for the message's tail at the destination.
"""
from __future__ import annotations

from cxlsim.fabric.engine import Wakeup
from cxlsim.fabric.host import Host
from cxlsim.fabric.link import Link, LinkParams
from cxlsim.fabric.routing import Router
from cxlsim.fabric.switch import SWITCHES, SwitchParams
from cxlsim.fabric.topology import hosts, validate

__all__ = ["Network", "build"]


class Network:
    """A built fabric: hosts (in graph order), switches, links and routes."""

    def __init__(self, env, graph, hosts_, switches, links, router):
        self.env = env
        self.graph = graph
        self.hosts: list[Host] = hosts_
        self.switches: dict = switches
        self.links: dict = links
        self.router = router
        self._ports = {key: port for link in links.values() for key, port in link.ports.items()}
        self._hops: dict = {}
        self._at_switch_callback = self._at_switch  # one bound method, not one per chunk

    def port(self, a, b):
        """The egress port from node `a` towards neighbour `b`."""
        return self._ports[(a, b)]

    def hops(self, src: int, dst: int) -> tuple:
        """The route from host index `src` to `dst` as ((port, switch or None), ...): each egress
        port and the switch it leads into (None for the destination host)."""
        key = (src, dst)
        hops = self._hops.get(key)
        if hops is None:
            path = self.router.route(self.hosts[src].name, self.hosts[dst].name)
            hops = tuple((self.port(a, b), self.switches.get(b)) for a, b in zip(path, path[1:]))
            self._hops[key] = hops
        return hops

    def transfer(self, src: int, dst: int, size_bytes: int, chunk_bytes: int, on_arrival, value=None) -> float:
        """Start sending now; return when the last byte leaves the source (ns).

        `on_arrival(event)` is called, with `event.value == value`, when the tail of
        the message reaches host `dst`.
        """
        now = self.env.now
        hops = self.hops(src, dst)
        port = hops[0][0]
        n = max(1, -(-size_bytes // chunk_bytes))
        end = now
        for i in range(n):
            size = chunk_bytes if i < n - 1 else size_bytes - chunk_bytes * (n - 1)
            start, end = port.reserve(now, size)
            self._leave(hops, 0, size, start, end, (on_arrival, value) if i == n - 1 else None)
        return end

    def _leave(self, hops, k, size, start, end, arrival):
        """A chunk was serialised on hop k's port during [start, end]; schedule its next stop.

        `arrival` is (callback, value) for the message's last chunk, else None.
        """
        port, switch = hops[k]
        lat = port.latency_ns
        env = self.env
        if switch is None:  # the destination host: only the message's tail matters
            if arrival is not None:
                Wakeup(env, end + lat - env.now, arrival[0], arrival[1])
            return
        ready = switch.forward_ready_ns(start + lat, end + lat, hops[k + 1][0].ns_per_byte, size)
        Wakeup(env, ready - env.now, self._at_switch_callback, (hops, k + 1, size, arrival))

    def _at_switch(self, event):
        """A chunk is ready to leave a switch: queue it at the egress port (FIFO by ready time)."""
        hops, k, size, arrival = event._value
        port, switch = hops[k]
        start, end = port.reserve(self.env.now, size)
        if switch is not None or arrival is not None:  # else: a middle chunk on its last link, done
            self._leave(hops, k, size, start, end, arrival)


def build(graph, preset, env) -> Network:
    """Elaborate `graph` with parameters from `preset` (node/edge attributes win) into a Network."""
    validate(graph)
    host_nodes = hosts(graph)
    host_objs = [Host(name, preset.host, preset.nic) for name in host_nodes]
    switches = {}
    for name, attrs in graph.nodes(data=True):
        if attrs["kind"] != "switch":
            continue
        kind = attrs.get("switch_kind") or preset.switch_kind
        cls = SWITCHES[kind]
        default_mode = preset.switch.mode if kind == preset.switch_kind else cls.default_mode
        params = SwitchParams(latency_ns=attrs.get("latency_ns", preset.switch.latency_ns),
                              mode=attrs.get("mode") or default_mode)
        switches[name] = cls(name, params)
    links = {}
    for a, b, attrs in graph.edges(data=True):
        bw = attrs.get("bw_bytes_per_ns") or preset.link.bw_bytes_per_ns * attrs.get("bw_factor", 1.0)
        params = LinkParams(bw_bytes_per_ns=bw, latency_ns=attrs.get("latency_ns", preset.link.latency_ns))
        links[(a, b)] = Link(a, b, params)
    net = Network(env, graph, host_objs, switches, links, Router(graph))
    for host in host_objs:
        (peer,) = graph.neighbors(host.name)
        host.uplink = net.port(host.name, peer)
        # The NIC injects at the slower of G and the link's serialisation rate.
        host.uplink.ns_per_byte = max(host.uplink.ns_per_byte, host.nic.params.gap_per_byte_ns)
    return net
