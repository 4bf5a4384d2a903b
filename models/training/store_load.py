"""How busy the SoftMemoryBox store was, and whether it, not the GPUs, set the pace of a run.

The store's ranks (memory_servers x server_cores of them, on the memory-server
hosts) spend CPU time on message overheads (the preset's o per message sent or
received) and on reductions; each memory-server host's link carries the pushes
in and the pulls out. `StoreLoad` books each store rank's CPU time as the mode
issues the operations and reads the serialisation time of the memory-server
links (`Port.busy_ns`) at the end. Each figure is busy time / elapsed time,
exact by the model.

A resource busy for at least `BOTTLENECK_UTILISATION` (90%) of the run means
the store set the run's pace: the workers waited for it, and only a larger
store (more memory servers or aggregation cores) would make the run faster.
The 90% is where the report starts calling it the bottleneck (a threshold, not
a model figure): a run also spends time where the store idles (the first
compute, the last pull).
"""
from __future__ import annotations

__all__ = ["StoreLoad", "BOTTLENECK_UTILISATION"]

BOTTLENECK_UTILISATION = 0.9
"""Busy fraction of the run from which a store resource is reported as the bottleneck."""


class StoreLoad:
    """CPU time per store rank and link time per memory-server host of one run (ns)."""

    def __init__(self, tr, spec, first_rank: int):
        self.tr, self.spec, self.first = tr, spec, first_rank
        self.cpu_ns = [0.0] * (spec.memory_servers * spec.server_cores)

    def _host(self, rank):
        return self.tr.network.hosts[self.tr.host_of[rank]]

    def reduce(self, rank: int, size_bytes: int):
        """tr.reduce on store rank `rank`, booked."""
        self.cpu_ns[rank - self.first] += self._host(rank).reduce_ns(size_bytes)
        return self.tr.reduce(rank, size_bytes)

    def send(self, rank: int, dst: int, size_bytes: int, payload=None, tag: int = 0):
        """tr.send from store rank `rank`, its overhead booked."""
        self.cpu_ns[rank - self.first] += self._host(rank).nic.params.overhead_ns
        return self.tr.send(rank, dst, size_bytes, payload, tag=tag)

    def received(self, rank: int) -> None:
        """Book one received message's overhead on store rank `rank`."""
        self.cpu_ns[rank - self.first] += self._host(rank).nic.params.overhead_ns

    def report(self, elapsed_ns: float) -> dict:
        """{'store_utilisation': busiest CPU / link in / link out as fractions of the run,
        'store_busiest': which resource, 'store_bound': whether it reached BOTTLENECK_UTILISATION}."""
        net, spec = self.tr.network, self.spec
        cores = spec.server_cores
        found = []
        for k, busy in enumerate(self.cpu_ns):
            found.append((busy / elapsed_ns, "cpu", f"store rank {k} (memory server {k // cores}, core {k % cores}) "
                                                    "CPU: reductions and message overheads"))
        for h in range(spec.memory_servers):
            host = net.hosts[spec.worker_hosts + h].name
            switch = next(iter(net.graph.neighbors(host)))
            found.append((net.port(switch, host).busy_ns / elapsed_ns, "link_in",
                          f"memory server {h}'s link in (pushes)"))
            found.append((net.port(host, switch).busy_ns / elapsed_ns, "link_out",
                          f"memory server {h}'s link out (pulls)"))
        utilisation = {kind: max(u for u, k, _ in found if k == kind) for kind in ("cpu", "link_in", "link_out")}
        top = max(found, key=lambda item: item[0])
        return {"store_utilisation": utilisation, "store_busiest": top[2],
                "store_bound": top[0] >= BOTTLENECK_UTILISATION}
