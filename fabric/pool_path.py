"""The data path of a CXL pool: how lines move between hosts and devices, and when the CPU is free.

Every access moves whole 64-B lines, cut into chunks at multiples of
`chunk_bytes` of pool address. A chunk first crosses its host's issue server:
a FIFO at the host bandwidth b = min(port bandwidth, outstanding lines * 64 B
/ L), where L is the unloaded load latency (the outstanding-request limit, by
Little's law). Its first request reaches the device one path later (core,
link, switch, link), and the device serves it on a FIFO shared by every host
at the device bandwidth B. The chunk has passed the device when both its last
request has arrived and the device has served it:

    end = max(host issue end + path, device service end)

A read's data is back at end + media latency + path; a streamed write is in
the pool at `end` and acknowledged at end + path (never before the host path's
`writeback_ns` after its start). Unloaded, a read of n bytes costs L + n/b with
L = 2*path + media, exactly; when P hosts stream at once the device adds its
queue, P*n/B in total. Consecutive chunks of pool address go to consecutive
devices (interleaving).

A device's heads' links carry each direction on its own, at heads x the port
bandwidth: reads flow from the device, writes to it, while its media serves
both. When those links can bind (heads x port below both the media's rate and
the hosts' total issue rate) they are FIFOs of their own, one per direction,
after every other stage and before the device's media, which then serves at
its own rate; so a read:write mix can exceed one direction's rate. Otherwise
a device is one FIFO at min(media, heads x port).

Switch trees (`switch_levels=2`, CXL 3.x): hosts are spread evenly over leaf
switches (`leaves`), whose uplinks meet at a root switch that holds the
devices. The path gains a hop and a link, and each chunk also queues at its
leaf's uplink (per direction, at the port bandwidth) before the device.

Several ranks may run on one host (`host_of`, rank -> host): they share its
issue port and its route (its leaf's uplinks), while each rank keeps its own
CPU timeline, pending acknowledgements and fences (a rank is one core).

Each rank's CPU is one FIFO timeline (`start`, `cpu`): stores, flush issue and
cache hits take CPU time; loads that miss are asynchronous, so reads issued
together overlap. A fence (`fence`) waits for the rank's streamed writes and
write-backs to be acknowledged, and for `invalidate_ns` after its last
clflushopt's issue when the host path sets it.
"""
from __future__ import annotations

import simpy

from cxlsim.fabric.chunk_pipeline import ChunkPipeline
from cxlsim.fabric.cxl import CACHE_LINE_BYTES
from cxlsim.fabric.link import Port
from cxlsim.fabric.transport import fire_at

__all__ = ["PoolPath"]

LINE = CACHE_LINE_BYTES


class PoolPath:
    """The ports, devices and per-rank CPU and acknowledgement state of one pool (times ns, bytes).

    host_of[r]: the host (0..hosts-1) rank r runs on; None: one rank per host, rank r on host r.
    """

    def __init__(self, env, preset, hosts: int, devices: int, chunk_bytes: int, switch_levels: int, leaves: int,
                 host_of=None):
        self.env = env
        self.host_of = list(range(hosts)) if host_of is None else list(host_of)
        """Each rank's host."""
        ranks = len(self.host_of)
        self.host_path = hp = preset.host_path
        sw = preset.switch
        link = preset.link.traversal_ns
        self.chunk_lines = chunk_bytes // LINE
        self.path_ns = hp.port_latency_ns + link + switch_levels * (sw.hop_latency_ns + link)
        """Core to device, one way, ns."""
        self.media_ns = preset.device.media_latency_ns
        self.load_ns = 2 * self.path_ns + self.media_ns
        """Unloaded load latency, ns."""
        self.host_bw_bytes_per_ns = min(sw.port_bw_bytes_per_ns, hp.outstanding_lines * LINE / self.load_ns)
        self.device_bw_bytes_per_ns = preset.device.bw_bytes_per_ns(sw.port_bw_bytes_per_ns)
        """One device's bandwidth in one direction, bytes/ns: its media, or its heads' links if slower."""
        dev = preset.device
        links_bw = dev.heads * sw.port_bw_bytes_per_ns
        self.split_links = links_bw < min(dev.media_bw_bytes_per_ns, hosts * self.host_bw_bytes_per_ns)
        """True when a device's links can bind, one direction at a time: they are then FIFOs of their own
        (`device_links`), and the device serves at its media's rate."""
        media_bw = dev.media_bw_bytes_per_ns if self.split_links else self.device_bw_bytes_per_ns
        self.devices = [Port(f"dev{d}", media_bw, 0.0) for d in range(devices)]
        self.device_links = [(Port(f"dev{d} link up", links_bw, 0.0), Port(f"dev{d} link down", links_bw, 0.0))
                             for d in range(devices)] if self.split_links else []
        """Each device's heads' links together, (towards the device, from it), when `split_links`."""
        self._host_ports = [Port(f"host{h}", self.host_bw_bytes_per_ns, 0.0) for h in range(hosts)]
        # The stages a chunk queues at after its host, each (server, ns from the previous stage's
        # start), for data going up (writes) and down (reads); None is the chunk's device.
        self.leaves = leaves
        self.uplinks: list = []
        """A two-level tree's leaf uplink ports, up then down (empty with one switch)."""
        self.to_leaf_uplink_ns = 0.0
        """Core to the leaf's uplink on a two-level tree (0 with one switch), ns."""
        if leaves:
            to_leaf_uplink = self.to_leaf_uplink_ns = hp.port_latency_ns + link + sw.hop_latency_ns
            self.leaf_of = [h * leaves // hosts for h in range(hosts)]
            up = [Port(f"leaf{k}->root", sw.port_bw_bytes_per_ns, 0.0) for k in range(leaves)]
            down = [Port(f"root->leaf{k}", sw.port_bw_bytes_per_ns, 0.0) for k in range(leaves)]
            self.uplinks = up + down
            self._stages = [(((up[k], to_leaf_uplink), (None, self.path_ns - to_leaf_uplink)),
                             ((down[k], to_leaf_uplink), (None, self.path_ns - to_leaf_uplink)))
                            for k in self.leaf_of]
        else:
            self.leaf_of = [0] * hosts
            self._stages = [(((None, self.path_ns),), ((None, self.path_ns),))] * hosts
        if self.split_links:  # the device's link in the transfer's direction, at the device, before its media
            links = ([up for up, _ in self.device_links], [down for _, down in self.device_links])
            self._stages = [tuple(stages[:-1] + ((link, stages[-1][1]), (None, 0.0))
                                  for stages, link in zip(pair, links)) for pair in self._stages]
        # the pipeline is indexed by rank: each rank issues through its host's port and route
        self._pipeline = ChunkPipeline(env, [self._host_ports[h] for h in self.host_of],
                                       [self._stages[h] for h in self.host_of], self.devices, self.chunk_lines)
        self._cpu_free = [0.0] * ranks
        self._pending = [0] * ranks          # streamed writes and write-backs not yet acknowledged
        self._acked = [0.0] * ranks          # latest acknowledgement of those, ns
        self._fences = [[] for _ in range(ranks)]

    def ports(self) -> list:
        """(component, port) of every FIFO server a chunk queues at: each host's issue port ('host port'),
        each leaf uplink direction ('leaf uplink'), each device ('device')."""
        return ([("host port", p) for p in self._host_ports] + [("leaf uplink", p) for p in self.uplinks]
                + [("device link", p) for pair in self.device_links for p in pair]
                + [("device", p) for p in self.devices])

    # ------------------------------------------------------------------ the CPU timeline
    def start(self, rank) -> float:
        """When the rank's CPU is next free (now, if it is idle), ns."""
        now = self.env.now
        free = self._cpu_free[rank]
        return free if free > now else now

    def cpu(self, rank, duration_ns) -> float:
        """Book `duration_ns` of the rank's CPU from `start(rank)`; returns its end, ns."""
        end = self.start(rank) + duration_ns
        self._cpu_free[rank] = end
        return end

    def hold_cpu(self, rank, until_ns) -> None:
        """The rank's CPU is busy until `until_ns` (issuing a stream)."""
        self._cpu_free[rank] = until_ns

    def at(self, when_ns, event, value=None):
        """`event`, scheduled to succeed with `value` at `when_ns`."""
        return fire_at(self.env, event, when_ns - self.env.now, value)

    # ------------------------------------------------------------------ moving lines
    def transfer(self, rank, first, count, start_ns, finish, up: bool) -> float:
        """Move lines [first, first + count) between `rank`'s host and the pool, requests leaving from
        `start_ns`; call `finish(end)` once every line has passed the device. Returns the issue end.

        Each chunk queues at its host, then at each stage (a leaf's uplink in a tree, charged
        before the device in both directions: a chain of FIFOs has the same throughput in any
        order; the device's link in the transfer's direction where it can bind), then at its
        device (`cxlsim.fabric.chunk_pipeline.ChunkPipeline`).
        """
        return self._pipeline.transfer(rank, first, count, start_ns, finish, up)

    @property
    def device_bytes(self) -> int:
        """Bytes the devices served (reads, streamed writes, write-backs)."""
        return self._pipeline.device_bytes

    def fetch(self, rank, first, count, start_ns, extra_ns, on_data) -> None:
        """Read lines into `rank`; call on_data(event) when the data is back (+ `extra_ns`)."""
        def finish(end):
            self.env.at(end + self.media_ns + self.path_ns + extra_ns - self.env.now, on_data)
        self.transfer(rank, first, count, start_ns, finish, up=False)

    def write_back(self, rank, first, count, start_ns, extra_ns=0.0, on_pool=None) -> float:
        """Stream lines from `rank` to the pool; tracked until acknowledged (fences wait), never sooner
        than the host path's writeback_ns after `start_ns`; on_pool(event) when the data is in the
        pool. Returns the issue end."""
        self._pending[rank] += 1
        floor = start_ns + self.host_path.writeback_ns

        def finish(end):
            if on_pool is not None:
                self.env.at(end - self.env.now, on_pool)
            self.env.at(max(end + self.path_ns + extra_ns, floor) - self.env.now, self._acknowledged, rank)
        return self.transfer(rank, first, count, start_ns, finish, up=True)

    # ------------------------------------------------------------------ acknowledgements and fences
    def hold_fences(self, rank, issued_ns, count) -> None:
        """Hold the rank's fences until the host path's invalidate_ns after `issued_ns`, the last
        clflushopt's issue, if that is set and lines were flushed (the CXL presets leave it 0)."""
        wait = self.host_path.invalidate_ns
        if count and wait > 0:
            self._pending[rank] += 1
            self.env.at(issued_ns + wait - self.env.now, self._acknowledged, rank)

    def fence(self, rank):
        """An event that fires once the rank's earlier writes are acknowledged, plus the fence's own time."""
        event = simpy.Event(self.env)
        if self._pending[rank]:
            self._fences[rank].append(event)
        else:
            self._finish_fence(rank, event)
        return event

    def _acknowledged(self, event):
        rank = event._value
        now = self.env.now
        if now > self._acked[rank]:
            self._acked[rank] = now
        self._pending[rank] -= 1
        if self._pending[rank] == 0:
            waiting, self._fences[rank] = self._fences[rank], []
            for fence in waiting:
                self._finish_fence(rank, fence)

    def _finish_fence(self, rank, event):
        start = max(self.start(rank), self._acked[rank])
        self._cpu_free[rank] = start + self.host_path.fence_ns
        self.at(self._cpu_free[rank], event)
