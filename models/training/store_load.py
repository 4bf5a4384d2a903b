"""How busy the SoftMemoryBox store was, and whether it, not the GPUs, set the pace of a run.

The store's ranks (memory_servers x server_cores of them, on the memory-server
hosts) spend CPU time on message overheads (the preset's o per message sent or
received) and on reductions; each memory-server host's link carries the pushes
in and the pulls out. `StoreLoad` books each store rank's CPU time as the mode
issues the operations and reads the serialisation time of the memory-server
links (`Port.busy_ns`) at the end. Each figure is busy time / elapsed time,
exact by the model.

The store is the bottleneck when it could not keep up with the GPUs even if
it never idled: its busiest resource, busy T of the run for the run's S
samples, serves at most S / T samples/s (`store_bound_samples_per_s`: the
same work per sample, no idle time), and the GPUs alone, at their profile
times and without communication, run at `gpu_bound_samples_per_s` (the mode
says which: W * batch / slowest iteration for a synchronous mode, the sum of
batch / iteration over the workers for the asynchronous ones). If the store's
bound is the lower one, only a larger store (more memory servers or
aggregation cores) raises the throughput.
"""
from __future__ import annotations

__all__ = ["StoreLoad", "gpu_bound_samples_per_s"]


def gpu_bound_samples_per_s(job, synchronous: bool) -> float:
    """Samples/s of the GPUs alone at their profile times: every step waits for the slowest
    (`synchronous`), or every worker computes back to back."""
    if synchronous:
        return len(job.iteration_ns) * job.batch / max(job.iteration_ns) * 1e9
    return sum(job.batch / t for t in job.iteration_ns) * 1e9


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

    def report(self, elapsed_ns: float, samples: int, gpu_bound: float) -> dict:
        """The store's load in a run of `elapsed_ns` that trained `samples` (see the module docstring):
        'store_utilisation' (busiest CPU, link in, link out: fractions of the run), 'store_busiest',
        'store_bound_samples_per_s', 'gpu_bound_samples_per_s' and 'store_bound' (the store's the lower)."""
        net, spec = self.tr.network, self.spec
        cores = spec.server_cores
        found = []
        for k, busy in enumerate(self.cpu_ns):
            found.append((busy, "cpu", f"store rank {k} (memory server {k // cores}, core {k % cores}) CPU: "
                                       "reductions and message overheads"))
        for h in range(spec.memory_servers):
            host = net.hosts[spec.worker_hosts + h].name
            switch = next(iter(net.graph.neighbors(host)))
            found.append((net.port(switch, host).busy_ns, "link_in", f"memory server {h}'s link in (pushes)"))
            found.append((net.port(host, switch).busy_ns, "link_out", f"memory server {h}'s link out (pulls)"))
        utilisation = {kind: max(b for b, k, _ in found if k == kind) / elapsed_ns
                       for kind in ("cpu", "link_in", "link_out")}
        busy, _, what = max(found, key=lambda item: item[0])
        store_bound = samples / busy * 1e9 if busy > 0 else float("inf")
        return {"store_utilisation": utilisation, "store_busiest": what, "store_bound_samples_per_s": store_bound,
                "gpu_bound_samples_per_s": gpu_bound, "store_bound": store_bound < gpu_bound}
