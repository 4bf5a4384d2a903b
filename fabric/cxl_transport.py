"""The CXL pool transport: hosts on a CXL switch (or a two-level tree) sharing pool devices, in SimPy.

One rank runs on each host. Ranks talk only through the pool, with the pool
operations of the transport interface (`cxlsim.fabric.transport`): loads and
stores (`pool_read`, `pool_write`), cache maintenance (`flush`, `fence`) and
flag polling (`wait_flags`). Point-to-point messages need a network
(`send`/`recv` raise UnsupportedOperation).

Data path. Every access moves whole 64-B lines, cut into chunks at multiples
of `chunk_bytes` of pool address. A chunk first crosses its host's issue
server: a FIFO at the host bandwidth b = min(port bandwidth, outstanding
lines * 64 B / L), where L is the unloaded load latency (the outstanding-
request limit, by Little's law). Its first request reaches the device one
path later (core, link, switch, link), and the device serves it on a FIFO
shared by every host at the device bandwidth B. The chunk has passed the
device when both its last request has arrived and the device has served it:

    end = max(host issue end + path, device service end)

A read's data is back at end + media latency + path; a streamed write is in
the pool at `end` and acknowledged at end + path. Unloaded, a read of n bytes
costs L + n/b with L = 2*path + media, exactly; when P hosts stream at once the
device adds its queue, P*n/B in total. Consecutive chunks of pool address go to
consecutive devices (interleaving, `devices`).

Switch trees (`switch_levels=2`, CXL 3.x): hosts are spread evenly over leaf
switches of at most ports - 1 hosts, whose uplinks meet at a root switch that
holds the devices. The path gains a hop and a link, and each chunk also queues
at its leaf's uplink (per direction, at the port bandwidth) before the device.

Pool memory holds payload labels (any Python object per written region), so
tests can check who read what: a read returns the label of the region written
at exactly that offset and size (None if nothing was, a tuple of the labels of
overlapping regions otherwise), as seen when the data reaches the reader.

Writes. `pool_write` of at least one line streams the data to the device
(non-temporal stores, as a large memcpy does); the writer keeps no copy. A
write of less than one line within one line is an ordinary store (a flag): it
first gets the line (a one-line read, the read for ownership) and then holds
it in its cache. The event fires when the stores are issued.

Coherence modes:
- 'hw' (CXL 3.x HDM-DB): a `Coherence` snoop filter on the device. A write
  sends BISnp to every other host caching the line (their pollers wake up one
  BISnp later, 2*path after the write); a store then holds the line
  Modified, and the next read by another host recalls it (+2*path, and no
  read of the line completes before the store did). Reads of lines the host
  holds hit its cache. `wait_flags` keeps one load in flight per flag (an
  out-of-order core overlaps the misses) and sleeps on a flag it holds until
  a BISnp takes it away.
- 'flush' (no multi-host coherence, CXL 2.0): every host has a private cache
  that nobody else invalidates. Reads that hit it return what it holds, even
  if stale. A store stays in the writer's cache until `flush` writes it back.
  `flush` issues one clflushopt per line (CPU time), writes back dirty lines
  and drops every cached copy in the range; `fence` waits for the rank's
  write-backs and streamed writes to be acknowledged. `wait_flags` polls one
  flag at a time as the emulator does: invalidate the line, mfence, load.

Each rank's CPU is one FIFO timeline: stores, flush issue and cache hits take
CPU time; loads that miss are asynchronous, so reads issued together overlap.

Event log (`enable_log()`, off by default): every pool operation a rank
issues, in issue order, as (rank, op, offset, arg), with the ops of the
emulator's debug log (cxl_ops.h): 'write' (streamed stores, or `place`;
arg = bytes), 'store' (an ordinary store of a flag; arg = the value),
'flush' (clflushopt of at least one line; arg = bytes), 'fence',
'poll' (one per flag `wait_flags` waited for, after it arrived, in the order
given; arg = the value) and 'read' (`pool_read` or `view`; arg = bytes). The
flushes, fences and loads inside a poll loop are part of its 'poll', as in
the emulator's log. Times are not logged: the log pins the protocol's order,
which tests compare with the emulator's.

Not modelled (yet): time for BISnp caused by snoop-filter evictions (they are
counted and wake pollers, but cost nothing), the owner's link bandwidth on a
recall (a recall adds 2*path of latency), flit overheads (links run at their raw
rate), retimers beyond the preset's count, and several ranks per host.
"""
from __future__ import annotations

from dataclasses import dataclass

import simpy

from cxlsim.errors import InputError, RunError
from cxlsim.fabric.coherence import Coherence
from cxlsim.fabric.cxl import CACHE_LINE_BYTES, line_span
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.link import Port
from cxlsim.fabric.transport import Transport, UnsupportedOperation, fire_at

__all__ = ["CXLPoolTransport", "PoolFigures", "DEFAULT_POOL_CHUNK_BYTES"]

DEFAULT_POOL_CHUNK_BYTES = 4096
"""Chunk of pool address space moved as one unit (and the interleaving granule across devices), bytes."""

LINE = CACHE_LINE_BYTES


@dataclass(frozen=True, kw_only=True)
class PoolFigures:
    """The derived figures of a built pool, for closed forms."""

    path_ns: float
    """Core to device, one way, ns."""
    load_ns: float
    """Unloaded load latency L = 2*path + media, ns."""
    media_ns: float
    """Device media latency, ns."""
    host_bw_bytes_per_ns: float
    """One host's bandwidth b (port, or outstanding requests / L), bytes/ns."""
    device_bw_bytes_per_ns: float
    """All devices together, B, bytes/ns."""
    hit_ns: float
    """A cache hit, ns."""
    copy_bw_bytes_per_ns: float
    """Local copy bandwidth, bytes/ns."""
    flush_ns_per_line: float
    """clflushopt issue per line, ns."""
    fence_ns: float
    """A fence once write-backs are done, ns."""
    leaf_hosts: int = 0
    """Most hosts under one leaf switch of a two-level tree (0: one switch)."""
    uplink_bw_bytes_per_ns: float = 0.0
    """A leaf's uplink to the root, per direction (two-level trees), bytes/ns."""
    invalidate_ns: float = 0.0
    """A clflushopt's acknowledgement after its issue, which a fence waits for, ns (0: none)."""
    writeback_ns: float = 0.0
    """Least time from a write's start to its acknowledgement, ns (0: the path's own)."""


class CXLPoolTransport(Transport):
    """`hosts` hosts (one rank each) on a CXL switch with `devices` interleaved pool devices.

    preset: a `CXLPoolPreset`; coherence: 'hw' or 'flush' (the preset must
    allow it); switch_levels: 1 (one switch) or 2 (leaves under a root, if the
    preset allows cascading); pool_bytes: the pool's size (default: the devices' capacity);
    snoop_filter_lines: overrides the preset's; poll_limit_ns: a poll loop
    that keeps loading a flag gives up with RunError after this long (a hw
    poller asleep on its cached copy costs nothing and is reported as stuck
    when the run ends).
    """

    kind = "pool"

    def __init__(self, preset, hosts: int, *, coherence: str = "flush", env: simpy.Environment | None = None,
                 devices: int = 1, pool_bytes: int | None = None, chunk_bytes: int = DEFAULT_POOL_CHUNK_BYTES,
                 switch_levels: int = 1, snoop_filter_lines: int | None = None, poll_limit_ns: float = 1e9):
        preset.check(coherence, switch_levels)
        if switch_levels > 2:
            raise InputError(f"switch_levels: expected 1 or 2 (trees deeper than two levels are not "
                             f"modelled), got {switch_levels}")
        if not isinstance(hosts, int) or hosts < 1:
            raise InputError(f"hosts: expected an integer >= 1, got {hosts!r}")
        if not isinstance(devices, int) or devices < 1:
            raise InputError(f"devices: expected an integer >= 1, got {devices!r}")
        if not isinstance(chunk_bytes, int) or chunk_bytes < LINE or chunk_bytes % LINE:
            raise InputError(f"chunk_bytes: expected a positive multiple of {LINE} B, got {chunk_bytes!r}")
        if switch_levels == 1:
            preset.switch.check_ports(hosts, devices * preset.device.heads)
            leaves = 0
        else:
            leaves = preset.switch.tree_leaves(hosts, devices * preset.device.heads)
        capacity = devices * preset.device.capacity_bytes
        if pool_bytes is None:
            pool_bytes = capacity
        if not isinstance(pool_bytes, int) or not 0 < pool_bytes <= capacity:
            raise InputError(f"pool_bytes: expected an integer in 1..{capacity} (the devices' capacity), "
                             f"got {pool_bytes!r}")
        if not poll_limit_ns > 0:
            raise InputError(f"poll_limit_ns: expected > 0, got {poll_limit_ns!r}")
        self.env = env if env is not None else Environment()
        self.preset = preset
        self.size = hosts
        self.coherence_mode = coherence
        self.pool_bytes = pool_bytes
        self.chunk_lines = chunk_bytes // LINE
        self.poll_limit_ns = poll_limit_ns
        hp, sw = preset.host_path, preset.switch
        link = preset.link.traversal_ns
        self.path_ns = hp.port_latency_ns + link + switch_levels * (sw.hop_latency_ns + link)
        self.media_ns = preset.device.media_latency_ns
        self.load_ns = 2 * self.path_ns + self.media_ns
        self.host_bw_bytes_per_ns = min(sw.port_bw_bytes_per_ns, hp.outstanding_lines * LINE / self.load_ns)
        self.device_bw_bytes_per_ns = preset.device.bw_bytes_per_ns(sw.port_bw_bytes_per_ns)
        self._host_ports = [Port(f"host{h}", self.host_bw_bytes_per_ns, 0.0) for h in range(hosts)]
        self._devices = [Port(f"dev{d}", self.device_bw_bytes_per_ns, 0.0) for d in range(devices)]
        # The stages a chunk queues at after its host, each (server, ns from the previous stage's
        # start), for data going up (writes) and down (reads); None is the chunk's device.
        self._leaves = leaves
        if leaves:
            to_leaf_uplink = hp.port_latency_ns + link + sw.hop_latency_ns
            self.leaf_of = [h * leaves // hosts for h in range(hosts)]
            up = [Port(f"leaf{k}->root", sw.port_bw_bytes_per_ns, 0.0) for k in range(leaves)]
            down = [Port(f"root->leaf{k}", sw.port_bw_bytes_per_ns, 0.0) for k in range(leaves)]
            self._stages = [(((up[k], to_leaf_uplink), (None, self.path_ns - to_leaf_uplink)),
                             ((down[k], to_leaf_uplink), (None, self.path_ns - to_leaf_uplink)))
                            for k in self.leaf_of]
        else:
            self.leaf_of = [0] * hosts
            self._stages = [(((None, self.path_ns),), ((None, self.path_ns),))] * hosts
        self._cpu_free = [0.0] * hosts
        self._pending = [0] * hosts          # streamed writes and write-backs not yet acknowledged
        self._acked = [0.0] * hosts          # latest acknowledgement of those, ns
        self._fences = [[] for _ in range(hosts)]
        self._memory = {}                    # offset -> (size, label): what the devices hold
        self._cache = [dict() for _ in range(hosts)]  # flush mode: offset -> [size, label, dirty]
        self._inflight = {}                  # hw: line -> event of the store or recall in flight on it
        self._waiters = {}                   # hw: (host, line) -> events woken by a BISnp
        self._epochs = [0] * hosts
        self._rounds = [0] * hosts
        self.coherence = None
        if coherence == "hw":
            lines = preset.snoop_filter_lines if snoop_filter_lines is None else snoop_filter_lines
            self.coherence = Coherence(hosts=hosts, capacity_lines=lines, on_invalidate=self._invalidated)
        self.polls = 0
        """Flag loads made by wait_flags."""
        self.device_bytes = 0
        """Bytes the devices served (reads, streamed writes, write-backs)."""
        self.log = None
        """The event log (a list of (rank, op, offset, arg)) once `enable_log()` was called, else None."""
        self._polling = [0] * hosts          # wait_flags in progress per rank (its inner ops are not logged)

    def enable_log(self) -> list:
        """Start logging every pool operation (see the module docstring); returns the (live) log."""
        self.log = []
        return self.log

    def _record(self, rank, op, offset, arg):
        if self.log is not None and not self._polling[rank]:
            self.log.append((rank, op, offset, arg))

    # ------------------------------------------------------------------ figures and helpers
    def figures(self) -> PoolFigures:
        hp = self.preset.host_path
        return PoolFigures(path_ns=self.path_ns, load_ns=self.load_ns, media_ns=self.media_ns,
                           host_bw_bytes_per_ns=self.host_bw_bytes_per_ns,
                           device_bw_bytes_per_ns=self.device_bw_bytes_per_ns * len(self._devices),
                           hit_ns=hp.hit_latency_ns, copy_bw_bytes_per_ns=self.preset.host.memcpy_bw_bytes_per_ns,
                           flush_ns_per_line=hp.flush_ns_per_line, fence_ns=hp.fence_ns,
                           invalidate_ns=hp.invalidate_ns, writeback_ns=hp.writeback_ns,
                           leaf_hosts=max(self.leaf_of.count(k) for k in set(self.leaf_of)) if self._leaves else 0,
                           uplink_bw_bytes_per_ns=self.preset.switch.port_bw_bytes_per_ns if self._leaves else 0.0)

    def next_epoch(self, rank: int) -> int:
        """Count one more call of a pool protocol on `rank` (1, 2, ...): the flag values."""
        self._epochs[rank] += 1
        return self._epochs[rank]

    def next_round(self, rank: int, size_bytes: int) -> int:
        """Count one more call on `rank` if it carries data (size_bytes > 0); return the data round.

        Its slot buffer is round % 2, as in the emulator (cxlsim.emulator.comm): zero-byte calls
        (barriers) do not flip the buffer.
        """
        self._rounds[rank] += size_bytes > 0
        return self._rounds[rank]

    def _check(self, op, rank, offset_bytes, size_bytes):
        if not 0 <= rank < self.size:
            raise RunError(f"{op}: rank {rank} is not in 0..{self.size - 1}")
        if not isinstance(size_bytes, int) or size_bytes < 0 or not isinstance(offset_bytes, int) or offset_bytes < 0:
            raise RunError(f"{op}: rank {rank}: expected integer offset and size >= 0, "
                           f"got offset {offset_bytes!r}, size {size_bytes!r}")
        if offset_bytes + size_bytes > self.pool_bytes:
            raise RunError(f"{op}: rank {rank}: bytes [{offset_bytes}, {offset_bytes + size_bytes}) run past "
                           f"the pool ({self.pool_bytes} B)")

    def _start(self, rank) -> float:
        now = self.env.now
        free = self._cpu_free[rank]
        return free if free > now else now

    def _cpu(self, rank, duration_ns) -> float:
        end = self._start(rank) + duration_ns
        self._cpu_free[rank] = end
        return end

    def _at(self, when_ns, event, value=None):
        return fire_at(self.env, event, when_ns - self.env.now, value)

    def _value(self, offset, size):
        hit = self._memory.get(offset)
        if hit is not None and hit[0] == size:
            return hit[1]
        end = offset + size
        over = tuple(label for off, (sz, label) in sorted(self._memory.items())
                     if off < end and off + sz > offset or (sz == 0 and off == offset))
        return over or None

    def _store(self, offset, size, label):
        end = offset + size
        for off in [o for o, (sz, _) in self._memory.items() if o < end and o + sz > offset or o == offset]:
            del self._memory[off]
        self._memory[offset] = (size, label)

    # ------------------------------------------------------------------ the data path
    def _transfer(self, rank, first, count, start_ns, finish, up: bool) -> float:
        """Move lines [first, first + count) between `rank`'s host and the pool, requests leaving from
        `start_ns`; call `finish(end)` once every line has passed the device. Returns the issue end.

        Each chunk queues at its host, then at each stage of `_stages` (a leaf's uplink in a tree,
        charged before the device in both directions: a chain of FIFOs has the same throughput in
        any order), then at its device.
        """
        port = self._host_ports[rank]
        stages = self._stages[rank][0 if up else 1]
        reach = stages[0][1]
        c = self.chunk_lines
        devices = self._devices
        state = [0, 0.0, finish]
        line, stop_all = first, first + count
        issue_end = start_ns
        now = self.env.now
        while line < stop_all:
            stop = min(stop_all, (line // c + 1) * c)
            nbytes = (stop - line) * LINE
            s1, issue_end = port.reserve(start_ns, nbytes)
            state[0] += 1
            self.env.at(s1 + reach - now, self._at_stage,
                        (state, stages, 0, devices[(line // c) % len(devices)], nbytes, issue_end + reach))
            line = stop
        return issue_end

    def _at_stage(self, event):
        state, stages, k, device, nbytes, tail = event._value
        server = stages[k][0] or device
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

    def _fetch(self, rank, first, count, start_ns, extra_ns, on_data):
        """Read lines into `rank`; call on_data() when the data is back (+ `extra_ns`)."""
        def finish(end):
            self.env.at(end + self.media_ns + self.path_ns + extra_ns - self.env.now, on_data)
        self._transfer(rank, first, count, start_ns, finish, up=False)

    def _write_back(self, rank, first, count, start_ns, extra_ns=0.0, on_pool=None) -> float:
        """Stream lines from `rank` to the pool; tracked until acknowledged (fence waits), never sooner
        than the host path's writeback_ns after `start_ns`. Returns issue end."""
        self._pending[rank] += 1
        floor = start_ns + self.preset.host_path.writeback_ns

        def finish(end):
            if on_pool is not None:
                self.env.at(end - self.env.now, on_pool)
            self.env.at(max(end + self.path_ns + extra_ns, floor) - self.env.now, self._acknowledged, rank)
        return self._transfer(rank, first, count, start_ns, finish, up=True)

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
        start = max(self._start(rank), self._acked[rank])
        self._cpu_free[rank] = start + self.preset.host_path.fence_ns
        self._at(self._cpu_free[rank], event)

    # ------------------------------------------------------------------ coherence hooks (hw)
    def _invalidated(self, host, first, count):
        """A BISnp took lines [first, first + count) from `host`: wake its pollers sleeping on them."""
        if not self._waiters:
            return
        delay = 2 * self.path_ns  # the request reaches the device, the BISnp reaches the host
        for key in [k for k in self._waiters if k[0] == host and first <= k[1] < first + count]:
            for event in self._waiters.pop(key):
                fire_at(self.env, event, delay)

    # ------------------------------------------------------------------ pool operations
    def pool_write(self, rank, offset_bytes, size_bytes, payload=None, *, streaming: bool | None = None):
        """Store `size_bytes` at `offset_bytes`; fires when the stores are issued.

        streaming=None: stream if the write covers at least one line, else an
        ordinary store (which must stay within one line).
        """
        self._check("pool_write", rank, offset_bytes, size_bytes)
        env = self.env
        done = simpy.Event(env)
        first, count = line_span(offset_bytes, size_bytes)
        if self.log is not None:
            ordinary = streaming is False or (streaming is None and size_bytes < LINE)
            self._record(rank, "store" if ordinary and count else "write", offset_bytes,
                         payload if ordinary and count else size_bytes)
        if count == 0:
            self._store(offset_bytes, 0, payload)
            return self._at(self._start(rank), done)
        if streaming is None:
            streaming = size_bytes >= LINE
        if streaming:
            return self._stream(rank, offset_bytes, size_bytes, payload, first, count, done)
        if count != 1:
            raise RunError(f"pool_write: rank {rank}: an ordinary store of {size_bytes} B at {offset_bytes} "
                           "spans two lines; stream it (streaming=True) or align it")
        return self._line_store(rank, offset_bytes, size_bytes, payload, first, done)

    def _stream(self, rank, offset, size, payload, first, count, done):
        extra = 0.0
        if self.coherence is not None:
            if self.coherence.write(rank, first, count, keep=False):
                extra = 2 * self.path_ns  # the device collects every BIRsp before it completes the write
        else:
            self._drop_cached(rank, offset, size)
        issued = self._write_back(rank, first, count, self._start(rank), extra,
                                  lambda _e: self._store(offset, size, payload))
        self._cpu_free[rank] = issued
        return self._at(issued, done)

    def _line_store(self, rank, offset, size, payload, line, done):
        start = self._start(rank)
        hit = self.preset.host_path.hit_latency_ns
        if self.coherence is not None:
            owned = self.coherence.owner(line) == rank
            snooped = self.coherence.write(rank, line, 1, keep=True)
            if owned:
                self._store(offset, size, payload)
                return self._at(self._cpu(rank, hit), done)
            blockers = self._blockers(line, 1)
            mine = self._inflight[line] = simpy.Event(self.env)

            def owned_now():
                self._store(offset, size, payload)
                self._settle(line, mine)
                done.succeed()
            self._fetch(rank, line, 1, start, 2 * self.path_ns if snooped else 0.0,
                        lambda _e: self._when_all(blockers, owned_now))
            return done
        cache = self._cache[rank]
        entry = cache.get(offset)
        if entry is not None and entry[0] == size:
            entry[1], entry[2] = payload, True
            return self._at(self._cpu(rank, hit), done)

        def stored(_e):
            self._drop_cached(rank, offset, size)
            cache[offset] = [size, payload, True]
            done.succeed()
        self._fetch(rank, line, 1, start, 0.0, stored)
        return done

    def _blockers(self, first, count) -> list:
        """Stores and recalls in flight on lines [first, first + count): a read completes after them."""
        inflight = self._inflight
        if not inflight:
            return []
        if count > len(inflight):
            return [ev for line, ev in inflight.items() if first <= line < first + count]
        return [inflight[line] for line in range(first, first + count) if line in inflight]

    def _settle(self, line, event, succeed=True):
        if self._inflight.get(line) is event:
            del self._inflight[line]
        if succeed:
            event.succeed()

    def _when_all(self, events, callback):
        pending = [ev for ev in events if not ev.processed]
        if pending:
            self.env.all_of(pending).callbacks.append(lambda _e: callback())
        else:
            callback()

    def place(self, rank, offset_bytes, size_bytes, payload=None):
        """The rank's application stored `payload` at the range before the timed region (no time passes).

        Ordinary stores, as a zero-copy producer makes them: in 'hw' mode the
        lines become Modified in the rank's cache (other holders get BISnp); in
        'flush' mode they are dirty in its cache until `flush` writes them back.
        """
        self._check("place", rank, offset_bytes, size_bytes)
        self._record(rank, "write", offset_bytes, size_bytes)
        first, count = line_span(offset_bytes, size_bytes)
        if self.coherence is not None or count == 0:  # coherent, or no line to hold it back
            if self.coherence is not None:
                self.coherence.write(rank, first, count, keep=True)
            self._store(offset_bytes, size_bytes, payload)
            return
        self._drop_cached(rank, offset_bytes, size_bytes)
        self._cache[rank][offset_bytes] = [size_bytes, payload, True]

    def view(self, rank, offset_bytes, size_bytes):
        """What the rank's loads of the range would return now, without moving time (a zero-copy result).

        'hw': the coherent value. 'flush': the rank's cached copy if it holds
        the range (possibly stale), else the pool's.
        """
        self._check("view", rank, offset_bytes, size_bytes)
        self._record(rank, "read", offset_bytes, size_bytes)
        if self.coherence is None:
            entry = self._cache[rank].get(offset_bytes)
            if entry is not None and entry[0] == size_bytes:
                return entry[1]
        return self._value(offset_bytes, size_bytes)

    def pool_read(self, rank, offset_bytes, size_bytes):
        """Load `size_bytes` at `offset_bytes`; fires with the label, when the data is in the rank."""
        self._check("pool_read", rank, offset_bytes, size_bytes)
        self._record(rank, "read", offset_bytes, size_bytes)
        env = self.env
        done = simpy.Event(env)
        first, count = line_span(offset_bytes, size_bytes)
        start = self._start(rank)
        local = self.preset.host_path.hit_latency_ns + size_bytes / self.preset.host.memcpy_bw_bytes_per_ns
        if count == 0:
            return self._at(start, done, self._value(offset_bytes, 0))
        if self.coherence is not None:
            missed, recalled = self.coherence.read(rank, first, count)
            if not missed:
                return self._at(self._cpu(rank, local), done, self._value(offset_bytes, size_bytes))
            blockers = self._blockers(first, count)
            mine = None
            if recalled:  # later readers of these lines wait for this recall
                mine = simpy.Event(env)
                recalled = [line for run, n in recalled for line in range(run, run + n)]
                for line in recalled:
                    self._inflight[line] = mine

            def deliver():
                done.succeed(self._value(offset_bytes, size_bytes))
                if mine is not None:
                    for line in recalled:
                        self._settle(line, mine, succeed=False)
                    mine.succeed()
            self._fetch(rank, first, count, start, 2 * self.path_ns if recalled else 0.0,
                        lambda _e: self._when_all(blockers, deliver))
            return done
        cache = self._cache[rank]
        entry = cache.get(offset_bytes)
        if entry is not None and entry[0] == size_bytes:
            return self._at(self._cpu(rank, local), done, entry[1])

        def filled(_e):
            label = self._value(offset_bytes, size_bytes)
            self._drop_cached(rank, offset_bytes, size_bytes)
            cache[offset_bytes] = [size_bytes, label, False]
            done.succeed(label)
        self._fetch(rank, first, count, start, 0.0, filled)
        return done

    def flush(self, rank, offset_bytes, size_bytes):
        """clflushopt every line of the range: write back dirty lines, drop cached copies; fires when issued.

        The write-backs start with the first clflushopt and are paced by the
        host's issue server; `fence` waits for their acknowledgements and, when
        the host path's `invalidate_ns` is set, until that long after the last
        clflushopt's issue.
        """
        self._check("flush", rank, offset_bytes, size_bytes)
        first, count = line_span(offset_bytes, size_bytes)
        if count:
            self._record(rank, "flush", offset_bytes, size_bytes)
        start = self._start(rank)
        issued = self._cpu(rank, count * self.preset.host_path.flush_ns_per_line)
        if self.coherence is not None:
            dirty = self.coherence.drop(rank, first, count)
            if dirty:  # Modified lines (stores) go back; their labels are already in the pool
                self._write_back(rank, first, dirty, start)
            self._invalidation(rank, issued, count)
            return self._at(issued, simpy.Event(self.env))
        cache = self._cache[rank]
        end = offset_bytes + size_bytes
        for off in [o for o, (sz, _, _) in cache.items() if o < end and o + sz > offset_bytes]:
            sz, label, dirty = cache.pop(off)
            if dirty:
                f, n = line_span(off, sz)
                self._write_back(rank, f, n, start, 0.0,
                                 lambda _e, off=off, sz=sz, label=label: self._store(off, sz, label))
        self._invalidation(rank, issued, count)
        return self._at(issued, simpy.Event(self.env))

    def _invalidation(self, rank, issued_ns, count):
        """Hold the rank's fences until the host path's invalidate_ns after `issued_ns`, the last
        clflushopt's issue, if that is set and lines were flushed (the CXL presets leave it 0)."""
        wait = self.preset.host_path.invalidate_ns
        if count and wait > 0:
            self._pending[rank] += 1
            self.env.at(issued_ns + wait - self.env.now, self._acknowledged, rank)

    def fence(self, rank):
        """sfence/mfence: fires once the rank's earlier streamed writes and write-backs are acknowledged."""
        if not 0 <= rank < self.size:
            raise RunError(f"fence: rank {rank} is not in 0..{self.size - 1}")
        self._record(rank, "fence", 0, 0)
        event = simpy.Event(self.env)
        if self._pending[rank]:
            self._fences[rank].append(event)
        else:
            self._finish_fence(rank, event)
        return event

    def wait_flags(self, rank, flags, value):
        """Poll until every flag (a pool offset of an 8-byte word) holds `value`; a Process event."""
        flags = list(flags)
        for f in flags:
            self._check("wait_flags", rank, f, 8)
        logging = self.log is not None
        if logging:
            self._polling[rank] += 1
        if self.coherence is not None:
            polls = [self.env.process(self._poll_hw(rank, f, value)) for f in flags]
            waiting = self.env.all_of(polls)
        else:
            waiting = self.env.process(self._poll_flush(rank, flags, value))
        return self.env.process(self._logged_wait(rank, flags, value, waiting)) if logging else waiting

    def _logged_wait(self, rank, flags, value, waiting):
        yield waiting
        self._polling[rank] -= 1
        for f in flags:
            self._record(rank, "poll", f, value)

    def _poll_hw(self, rank, flag, value):
        line = flag // LINE
        start = self.env.now
        while True:
            self.polls += 1
            seen = yield self.pool_read(rank, flag, 8)
            if seen == value:
                return
            self._poll_limit(rank, flag, value, seen, start)
            if self.coherence.holds(rank, line):  # sleep until a BISnp takes the line away
                wake = simpy.Event(self.env)
                self._waiters.setdefault((rank, line), []).append(wake)
                yield wake

    def _poll_flush(self, rank, flags, value):
        start = self.env.now
        for flag in flags:
            while True:
                yield self.flush(rank, flag, 8)
                yield self.fence(rank)
                self.polls += 1
                seen = yield self.pool_read(rank, flag, 8)
                if seen == value:
                    break
                self._poll_limit(rank, flag, value, seen, start)

    def _poll_limit(self, rank, flag, value, seen, start):
        if self.env.now - start > self.poll_limit_ns:
            raise RunError(f"wait_flags: rank {rank} polled the flag at offset {flag} for "
                           f"{self.env.now - start:.0f} ns without seeing {value!r} (last saw {seen!r})")

    # ------------------------------------------------------------------ helpers for both modes
    def _drop_cached(self, rank, offset, size):
        cache = self._cache[rank]
        end = offset + size
        for off in [o for o, (sz, _, _) in cache.items() if o < end and o + sz > offset]:
            del cache[off]

    # ------------------------------------------------------------------ local work; no network
    def compute(self, rank, duration_ns):
        return self._at(self._cpu(rank, duration_ns), simpy.Event(self.env))

    def copy(self, rank, size_bytes):
        return self.compute(rank, size_bytes / self.preset.host.memcpy_bw_bytes_per_ns)

    def reduce(self, rank, size_bytes):
        return self.compute(rank, size_bytes / self.preset.host.reduce_bw_bytes_per_ns)

    def send(self, src, dst, size_bytes, payload=None, tag=0):
        raise UnsupportedOperation("send: CXLPoolTransport has no network; ranks talk through the pool "
                                   "(pool_write, pool_read, flush, fence, wait_flags)")

    def recv(self, dst, src, tag=0):
        raise UnsupportedOperation("recv: CXLPoolTransport has no network; ranks talk through the pool "
                                   "(pool_write, pool_read, flush, fence, wait_flags)")

    def _waiting(self) -> str:
        sleeping = sorted(self._waiters)
        return (f"hosts sleeping on flag lines (host, line): {sleeping[:8]}" if sleeping
                else "nothing is scheduled")
