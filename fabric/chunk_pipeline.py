"""The chunk pipeline of a CXL pool's data path: a transfer's chunks through FIFO servers, in the DES.

A transfer moves lines [first, first + count) between a host and the pool, cut
into chunks at multiples of `chunk_lines` lines of pool address. Each chunk
queues at its host's issue port (all of a transfer's chunks are ready at its
start), then at each stage of the host's route in turn (a leaf's uplink in a
switch tree; the chunk's device, devices interleaved by chunk; or the chunk's
device's own server there, e.g. its link in one direction), reaching stage k `reach` ns after its service started at the stage
before. A chunk has passed the last stage when both its last request has
arrived (the tail: its host-port end plus the reaches) and that stage has
served it; `finish(end)` is called with the latest such end of the transfer.
A stage serves chunks in the order they reach it, ties broken by the order the
DES scheduled their arrival (`cxlsim.fabric.link.Port` is the FIFO server).

`ChunkPipeline` schedules each arrival as one event in the DES's count and
order (`Environment.reserve_ids`, `call_at`), but keeps only the next arrival
of each transfer at each stage (per server of the stage before) in the event
queue: those arrivals come in time order, so the rest wait in compact arrays.
A 64-host 1 MiB allgather then holds a few thousand queue entries instead of a
million (64 MB peak instead of 630 MB).
`ReferencePipeline` schedules every arrival up front, one event per chunk per
stage, the obvious version; the tests hold the two identical (times, order,
event counts, port counters).

Units: ns, bytes; lines are 64-byte cache lines (`CACHE_LINE_BYTES`).
"""
from __future__ import annotations

from array import array

from cxlsim.fabric.cxl import CACHE_LINE_BYTES
from cxlsim.fabric.engine import CALL

__all__ = ["ChunkPipeline", "ReferencePipeline"]

LINE = CACHE_LINE_BYTES


class _Pipeline:
    """What both versions share: the servers, the routes, and the bytes the devices served."""

    def __init__(self, env, host_ports, routes, devices, chunk_lines: int):
        """host_ports[rank]: the issue `Port` of each host; routes[rank] = (up, down): the stages after
        the host port, each (server, reach ns from the previous stage's service start), the server a
        `Port`, None for the chunk's device, or a list of one `Port` per device for the chunk's device's
        own server there (e.g. its link in the transfer's direction); devices: the device `Port`s,
        interleaved by chunk."""
        self.env = env
        self.host_ports = host_ports
        self.routes = routes
        self.devices = devices
        self.chunk_lines = chunk_lines
        self.device_bytes = 0
        """Bytes the last stage (the devices) served."""
        self._call_at, self._new_id = env.call_at, env.reserve_ids

    def _chunks(self, first: int, count: int) -> list[int]:
        """Bytes of each chunk of lines [first, first + count)."""
        if count <= 0:
            return []
        c = self.chunk_lines
        stop_all = first + count
        head = min(stop_all, (first // c + 1) * c)
        if head == stop_all:
            return [count * LINE]
        full, tail = divmod(stop_all - head, c)
        return [(head - first) * LINE] + [c * LINE] * full + ([tail * LINE] if tail else [])


class ReferencePipeline(_Pipeline):
    """Every chunk's arrival at every stage is its own event, scheduled as soon as it is known."""

    def transfer(self, rank, first, count, start_ns, finish, up: bool) -> float:
        """Move lines [first, first + count) between `rank`'s host and the pool, requests leaving from
        `start_ns`; call `finish(end)` once every chunk has passed the last stage. Returns the issue end."""
        port = self.host_ports[rank]
        stages = self.routes[rank][0 if up else 1]
        reach = stages[0][1]
        c = self.chunk_lines
        state = [0, 0.0, finish]
        issue_end = start_ns
        now = self.env.now
        line = first
        for nbytes in self._chunks(first, count):
            s1, issue_end = port.reserve(start_ns, nbytes)
            state[0] += 1
            self.env.at(s1 + reach - now, self._at_stage,
                        (state, stages, 0, (line // c) % len(self.devices), nbytes, issue_end + reach))
            line = (line // c + 1) * c
        return issue_end

    def _at_stage(self, event):
        state, stages, k, device, nbytes, tail = event._value
        server = stages[k][0]
        if server is None:
            server = self.devices[device]
        elif server.__class__ is list:
            server = server[device]
        start, served = server.reserve(self.env.now, nbytes)
        end = served if served > tail else tail
        if k + 1 < len(stages):
            reach = stages[k + 1][1]
            self.env.at(start + reach - self.env.now, self._at_stage,
                        (state, stages, k + 1, device, nbytes, end + reach))
            return
        self.device_bytes += nbytes
        if end > state[1]:
            state[1] = end
        state[0] -= 1
        if state[0] == 0:
            state[2](state[1])


class _Flow:
    """One transfer in flight: its chunks and what is left of it to pass the last stage."""

    __slots__ = ("head", "full", "tail", "count", "block", "servers", "reaches", "final", "left", "last",
                 "finish", "lanes")

    def __init__(self, sizes, block, route, finish):
        self.head, self.full, self.tail = sizes[0], sizes[1], sizes[-1]  # bytes: chunk 0, the middle ones, the last
        self.count = self.left = len(sizes)  # chunks (>= 2); those not yet past the last stage
        self.block = block          # chunk index of the first chunk (line // chunk_lines)
        self.servers, self.reaches = route  # per stage: the server (a list: one per device), the reach
        self.final = len(self.servers) - 1  # the last stage
        self.last = 0.0             # latest end at the last stage so far
        self.finish = finish
        # lanes[k - 1]: the arrivals at stage k >= 1, one lane per server of stage k - 1 (one per
        # device there if that stage is the chunk's device's): a FIFO starts the chunks it serves in
        # their order, so each lane's arrivals come in time order
        self.lanes = None
        if self.final:
            self.lanes = []
            for k, server in enumerate(self.servers[:-1], start=1):
                if server.__class__ is list:
                    n = len(server)
                    self.lanes.append([_Lane(self, k, (d - block) % n, n) for d in range(n)])
                else:
                    self.lanes.append([_Lane(self, k, 0, 1)])


class _Lane:
    """A transfer's arrivals at stage k >= 1 through one server of the stage before, in time order: per
    arrival its time, event id and tail (ns); arrival j is chunk offset + j * step."""

    __slots__ = ("flow", "k", "offset", "step", "times", "ids", "tails", "next", "armed")

    def __init__(self, flow, k, offset, step):
        self.flow, self.k, self.offset, self.step = flow, k, offset, step
        self.times, self.ids, self.tails = array("d"), array("q"), array("d")
        self.next = 0               # next arrival to process
        self.armed = False          # its arrival is in the event queue


class _FirstLane:
    """A transfer's arrivals at its first stage: chunk j left the host port at `start` (back to back
    from the first one's, by `Port.reserve_run`'s arithmetic) and arrives `reach` later; its event id
    is first_id + j, numbered when the transfer was issued at `issued`."""

    __slots__ = ("flow", "next", "start", "ns_per_byte", "issued", "reach", "first_id")

    def __init__(self, flow, start, ns_per_byte, issued, reach, first_id):
        self.flow, self.next, self.start, self.ns_per_byte = flow, 0, start, ns_per_byte
        self.issued, self.reach, self.first_id = issued, reach, first_id


class ChunkPipeline(ReferencePipeline):
    """The same pipeline with one queued arrival per transfer and stage (see the module docstring).
    A transfer of one chunk goes the reference's way, which costs it less."""

    def __init__(self, env, host_ports, routes, devices, chunk_lines: int):
        super().__init__(env, host_ports, routes, devices, chunk_lines)
        # per rank: (up, down), each (servers, reaches); a server is a Port or a list of one per device
        self._plans = [tuple((tuple(devices if server is None else server for server, _ in stages),
                              tuple(reach for _, reach in stages)) for stages in route) for route in routes]
        self._push, self._next_id = env.push, env.next_id
        self._first_cb, self._later_cb = self._arrive_first, self._arrive  # bound once: queued per chunk

    def transfer(self, rank, first, count, start_ns, finish, up: bool) -> float:
        """As `ReferencePipeline.transfer`."""
        if count <= 0 or first % self.chunk_lines + count <= self.chunk_lines:
            return super().transfer(rank, first, count, start_ns, finish, up)
        sizes = self._chunks(first, count)
        port = self.host_ports[rank]
        start = port.reserve_run(start_ns, sizes)
        env = self.env
        now = env.now
        flow = _Flow(sizes, first // self.chunk_lines, self._plans[rank][0 if up else 1], finish)
        reach = flow.reaches[0]
        lane = _FirstLane(flow, start, port.ns_per_byte, now, reach, env.reserve_ids(len(sizes)))
        env.call_at(now + (start + reach - now), lane.first_id, self._arrive_first, lane)
        return port.free_at_ns

    def _arrive_first(self, fired):
        """Chunk `lane.next` reached the first stage: serve it, then queue the next chunk's arrival."""
        lane = fired._value
        flow = lane.flow
        j = lane.next
        nbytes = flow.full if 0 < j < flow.count - 1 else (flow.head if j == 0 else flow.tail)
        issued, reach, start = lane.issued, lane.reach, lane.start
        left = start + nbytes * lane.ns_per_byte  # its end at the host port, the next one's start
        self._serve(flow, 0, j, nbytes, issued + (start + reach - issued), left + reach)
        j = lane.next = j + 1
        if j < flow.count:
            lane.start = left
            self._push((issued + (left + reach - issued), CALL, lane.first_id + j, self._first_cb, lane))

    def _arrive(self, fired):
        """Arrival `lane.next` reached stage `lane.k` >= 1: serve it, then queue the lane's next one."""
        lane = fired._value
        j = lane.next
        flow = lane.flow
        i = lane.offset + j * lane.step
        nbytes = flow.full if 0 < i < flow.count - 1 else (flow.head if i == 0 else flow.tail)
        self._serve(flow, lane.k, i, nbytes, lane.times[j], lane.tails[j])
        j = lane.next = j + 1
        if j < len(lane.times):
            self._push((lane.times[j], CALL, lane.ids[j], self._later_cb, lane))
        else:
            lane.armed = False

    def _serve(self, flow, k, i, nbytes, now, tail):
        """Chunk i of `flow` (nbytes) is served at stage k, which it reached now; its tail arrives at
        `tail`. Pass it to the next stage's lane, or count it done."""
        server = flow.servers[k]
        d = 0
        if server.__class__ is list:  # the chunk's device's
            d = (flow.block + i) % len(server)
            server = server[d]
        # server.reserve(now, nbytes), inlined (tests/test_des_speed.py holds the two equal)
        start = now
        if server.free_at_ns > now:
            start = server.free_at_ns
            if start - now > server.peak_wait_ns:
                server.peak_wait_ns = start - now
        duration = nbytes * server.ns_per_byte
        served = server.free_at_ns = start + duration
        server.busy_ns += duration
        server.chunks += 1
        server.bytes += nbytes
        end = served if served > tail else tail
        if k < flow.final:
            reach = flow.reaches[k + 1]
            onward = flow.lanes[k][d]
            time = now + (start + reach - now)
            event_id = self._next_id()
            onward.times.append(time)
            onward.ids.append(event_id)
            onward.tails.append(end + reach)
            if not onward.armed:
                onward.armed = True
                self._push((time, CALL, event_id, self._later_cb, onward))
            return
        self.device_bytes += nbytes
        if end > flow.last:
            flow.last = end
        flow.left -= 1
        if flow.left == 0:
            flow.lanes = None  # no cycle left for the garbage collector
            flow.finish(flow.last)
