"""The slow twin of `Network.transfer`: every port is a real `simpy.Resource`.

Each chunk is a SimPy process per hop that requests the egress port's
resource (capacity 1, FIFO), holds it for the serialisation time and starts
its next hop when the switch lets it go. It is obviously a FIFO queue per
port, and slow; the tests check that `Network.transfer`'s reservations give
the same arrival times under contention. Only for tests and the curious.
"""
from __future__ import annotations

import simpy

__all__ = ["ReferenceNetwork"]


class ReferenceNetwork:
    """Wraps a built `Network`; `transfer` has the same meaning, driven by simpy.Resource."""

    def __init__(self, network):
        self.network = network
        self.env = network.env
        self.resources = {}

    def _resource(self, port) -> simpy.Resource:
        if port not in self.resources:
            self.resources[port] = simpy.Resource(self.env, capacity=1)
        return self.resources[port]

    def transfer(self, src: int, dst: int, size_bytes: int, chunk_bytes: int, on_arrival) -> None:
        """Send now; `on_arrival(time_ns)` is called when the message's tail reaches host `dst`."""
        hops = self.network.hops(src, dst)
        n = max(1, -(-size_bytes // chunk_bytes))
        for i in range(n):
            size = chunk_bytes if i < n - 1 else size_bytes - chunk_bytes * (n - 1)
            self.env.process(self._hop(hops, 0, size, on_arrival if i == n - 1 else None))

    def _hop(self, hops, k, size, on_arrival, delay_ns: float = 0.0):
        env = self.env
        if delay_ns:
            yield env.timeout(delay_ns)
        port, switch = hops[k]
        with self._resource(port).request() as req:
            yield req
            start = env.now
            duration = size * port.ns_per_byte
            lat = port.latency_ns
            if switch is not None:
                ready = switch.forward_ready_ns(start + lat, start + duration + lat, hops[k + 1][0].ns_per_byte, size)
                env.process(self._hop(hops, k + 1, size, on_arrival, ready - env.now))
            yield env.timeout(duration)
        if switch is None and on_arrival is not None:
            yield env.timeout(lat)
            on_arrival(env.now)
