"""The CXL pool transport: hosts sharing pool devices on a CXL switch, a two-level tree or none, in SimPy.

`ranks_per_host` ranks run on each host (default one): rank r on host
r // ranks_per_host. The ranks of a host share its issue port and its route
to the devices (`pool_path.PoolPath`); each keeps its own CPU timeline,
acknowledgements, fences and cache (ranks of one host do not hit in each
other's cached lines: a shared last-level cache is not modelled). Ranks talk only through the pool, with the
operations of `cxlsim.fabric.pool_transport.PoolTransport`: loads and stores
(`pool_read`, `pool_write`), cache maintenance (`flush`, `fence`) and flag
polling (`wait_flags`). Point-to-point messages need a network
(`send`/`recv` raise UnsupportedOperation).

`CXLPoolTransport` puts three parts together:
- the data path (`pool_path.PoolPath`): ports, devices, a switch tree, the
  per-rank CPU timelines and the acknowledgements fences wait for;
- the pool's contents (`pool_memory.PoolMemory`): a payload label per written
  region, as seen when the data reaches the reader, so tests check who read what;
- the coherence mode (`pool_coherence.MODELS[coherence]`): what each operation
  does to the hosts' caches, hw (back-invalidation) or flush (private caches).

Writes. `pool_write` of at least one line streams the data to the device
(non-temporal stores, as a large memcpy does); the writer keeps no copy. A
write of less than one line within one line is an ordinary store (a flag): it
first gets the line (a one-line read, the read for ownership) and then holds
it in its cache. The event fires when the stores are issued. `flush` issues
one clflushopt per line (CPU time); `fence` waits for the rank's write-backs
and streamed writes to be acknowledged.

Event log (`enable_log()`, off by default): every pool operation a rank
issues, in issue order, as (rank, op, offset, arg) with `op` a
`cxlsim.coherence.PoolEvent`, the codes of the emulator's debug log
(cxl_ops.h): WRITE (streamed stores, or `place`; arg = bytes), FLAG_STORE (an
ordinary store; arg = the value), FLUSH (clflushopt of at least one line; arg
= bytes), SFENCE or MFENCE (as the caller names the fence), POLL_CACHED (hw)
or POLL_FLUSHED (flush) (one per flag `wait_flags` waited for, after it
arrived, in the order given; arg = the value) and READ (`pool_read` or
`view`; arg = bytes). The flushes, fences and loads inside a poll loop are
part of its poll, as in the emulator's log. Times are not logged: the log pins
the protocol's order, which tests compare with the emulator's.

Not modelled (yet): time for BISnp caused by snoop-filter evictions (they are
counted and wake pollers, but cost nothing), the owner's link bandwidth on a
recall (a recall adds 2*path of latency), flit overheads (links run at their raw
rate), retimers beyond the preset's count, and a cache shared by the ranks of one host.
"""
from __future__ import annotations

import simpy

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.errors import InputError, RunError
from cxlsim.fabric.cxl import CACHE_LINE_BYTES, line_span
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.pool_coherence import MODELS
from cxlsim.fabric.pool_memory import PoolMemory
from cxlsim.fabric.pool_path import PoolPath
from cxlsim.fabric.pool_transport import ExtraCharges, PoolFigures, PoolTransport
from cxlsim.fabric.transport import UnsupportedOperation

__all__ = ["CXLPoolTransport", "PoolFigures", "DEFAULT_POOL_CHUNK_BYTES"]

DEFAULT_POOL_CHUNK_BYTES = 4096
"""Chunk of pool address space moved as one unit (and the interleaving granule across devices), bytes."""

LINE = CACHE_LINE_BYTES


class CXLPoolTransport(PoolTransport):
    """`hosts` hosts (`ranks_per_host` ranks each, rank r on host r // ranks_per_host) on a CXL switch with
    `devices` interleaved pool devices; `size` = hosts x ranks_per_host ranks.

    preset: a `CXLPoolPreset`; coherence: a `Coherence` or its name (the preset must allow
    it); switch_levels: 0 (no switch: every host on a head of every device, which must
    have a head per host), 1 (one switch) or 2 (leaves under a root, if the preset allows
    cascading); default one, or none on a switchless preset; pool_bytes: the pool's size (default: the devices' capacity);
    snoop_filter_lines: overrides the preset's; poll_limit_ns: a poll loop that keeps
    loading a flag gives up with RunError after this long (a hw poller asleep on its cached
    copy costs nothing and is reported as stuck when the run ends). `charges` (default None)
    may be set to an `ExtraCharges` that adds CPU time to the model's own.

    `figures()` describes the pool as the closed forms see it, one rank per host: with
    ranks_per_host > 1 each rank appears as a host of its own on its host's leaf (the forms do
    not model ranks sharing a host's port; the DES does).
    """

    def __init__(self, preset, hosts: int, *, coherence: Coherence | str = Coherence.FLUSH,
                 env: simpy.Environment | None = None, devices: int = 1, pool_bytes: int | None = None,
                 chunk_bytes: int = DEFAULT_POOL_CHUNK_BYTES, switch_levels: int | None = None,
                 snoop_filter_lines: int | None = None, poll_limit_ns: float = 1e9, ranks_per_host: int = 1):
        coherence = Coherence.parse(coherence)
        if switch_levels is None:
            switch_levels = min(1, preset.max_switch_levels)
        preset.check(coherence, switch_levels)
        if switch_levels > 2:
            raise InputError(f"switch_levels: expected 1 or 2 (trees deeper than two levels are not "
                             f"modelled), got {switch_levels}")
        if not isinstance(hosts, int) or hosts < 1:
            raise InputError(f"hosts: expected an integer >= 1, got {hosts!r}")
        if not isinstance(ranks_per_host, int) or ranks_per_host < 1:
            raise InputError(f"ranks_per_host: expected an integer >= 1, got {ranks_per_host!r}")
        if not isinstance(devices, int) or devices < 1:
            raise InputError(f"devices: expected an integer >= 1, got {devices!r}")
        if not isinstance(chunk_bytes, int) or chunk_bytes < LINE or chunk_bytes % LINE:
            raise InputError(f"chunk_bytes: expected a positive multiple of {LINE} B, got {chunk_bytes!r}")
        if switch_levels == 0:
            preset.device.check_heads(hosts)
            leaves = 0
        elif switch_levels == 1:
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
        self.size = size = hosts * ranks_per_host
        self.hosts, self.ranks_per_host = hosts, ranks_per_host
        self.coherence = coherence
        self.pool_bytes = pool_bytes
        self.poll_limit_ns = poll_limit_ns
        self.start_counters(size)
        host_of = None if ranks_per_host == 1 else [r // ranks_per_host for r in range(size)]
        self.path = PoolPath(self.env, preset, hosts, devices, chunk_bytes, switch_levels, leaves, host_of)
        self.host_of = self.path.host_of
        """Each rank's host."""
        self.path_ns, self.media_ns, self.load_ns = self.path.path_ns, self.path.media_ns, self.path.load_ns
        self.host_bw_bytes_per_ns = self.path.host_bw_bytes_per_ns
        self.device_bw_bytes_per_ns = self.path.device_bw_bytes_per_ns
        """One device's bandwidth, bytes/ns."""
        self.leaf_of = self.path.leaf_of
        """Each host's leaf switch (all 0 with one switch)."""
        self.memory = PoolMemory()
        lines = preset.snoop_filter_lines if snoop_filter_lines is None else snoop_filter_lines
        self.coherence_model = MODELS[coherence](self, self.path, self.memory, lines)
        self.snoop_filter = self.coherence_model.snoop_filter
        """The device's snoop filter (hw mode; None in flush mode)."""
        self.charges: ExtraCharges | None = None
        self.polls = 0
        """Flag loads made by wait_flags."""
        self.log = None
        """The event log (a list of (rank, PoolEvent, offset, arg)) once `enable_log()` was called, else None."""
        self._polling = [0] * size          # wait_flags in progress per rank (its inner ops are not logged)

    @property
    def device_bytes(self) -> int:
        """Bytes the devices served (reads, streamed writes, write-backs)."""
        return self.path.device_bytes

    def enable_log(self) -> list:
        """Start logging every pool operation (see the module docstring); returns the (live) log."""
        self.log = []
        return self.log

    def _record(self, rank, op: PoolEvent, offset, arg):
        if self.log is not None and not self._polling[rank]:
            self.log.append((rank, op, offset, arg))

    def figures(self) -> PoolFigures:
        hp, path = self.preset.host_path, self.path
        leaf_of = [self.leaf_of[h] for h in self.host_of]  # one entry per rank, as the forms index it
        return PoolFigures(coherence=self.coherence, path_ns=self.path_ns, load_ns=self.load_ns,
                           media_ns=self.media_ns, host_bw_bytes_per_ns=self.host_bw_bytes_per_ns,
                           device_bw_bytes_per_ns=self.device_bw_bytes_per_ns * len(path.devices),
                           hit_ns=hp.hit_latency_ns, copy_bw_bytes_per_ns=self.preset.host.memcpy_bw_bytes_per_ns,
                           reduce_bw_bytes_per_ns=self.preset.host.reduce_bw_bytes_per_ns,
                           flush_ns_per_line=hp.flush_ns_per_line, fence_ns=hp.fence_ns,
                           invalidate_ns=hp.invalidate_ns, writeback_ns=hp.writeback_ns,
                           leaf_hosts=max(leaf_of.count(k) for k in set(leaf_of)) if path.leaves else 0,
                           uplink_bw_bytes_per_ns=self.preset.switch.port_bw_bytes_per_ns if path.leaves else 0.0,
                           devices=len(path.devices), one_device_bw_bytes_per_ns=self.device_bw_bytes_per_ns,
                           chunk_bytes=path.chunk_lines * LINE, leaf_of=tuple(leaf_of) if path.leaves else (),
                           to_leaf_uplink_ns=path.to_leaf_uplink_ns)

    def _check(self, method, rank, offset_bytes, size_bytes):
        """RunError, naming the operation `method`, unless the rank and byte range are in the pool."""
        op = method.__name__
        if not 0 <= rank < self.size:
            raise RunError(f"{op}: rank {rank} is not in 0..{self.size - 1}")
        if not isinstance(size_bytes, int) or size_bytes < 0 or not isinstance(offset_bytes, int) or offset_bytes < 0:
            raise RunError(f"{op}: rank {rank}: expected integer offset and size >= 0, "
                           f"got offset {offset_bytes!r}, size {size_bytes!r}")
        if offset_bytes + size_bytes > self.pool_bytes:
            raise RunError(f"{op}: rank {rank}: bytes [{offset_bytes}, {offset_bytes + size_bytes}) run past "
                           f"the pool ({self.pool_bytes} B)")

    # ------------------------------------------------------------------ pool operations
    def pool_write(self, rank, offset_bytes, size_bytes, payload=None, *, streaming: bool | None = None):
        self._check(self.pool_write, rank, offset_bytes, size_bytes)
        path, memory = self.path, self.memory
        done = simpy.Event(self.env)
        first, count = line_span(offset_bytes, size_bytes)
        if self.log is not None:
            ordinary = streaming is False or (streaming is None and size_bytes < LINE)
            self._record(rank, PoolEvent.FLAG_STORE if ordinary and count else PoolEvent.WRITE, offset_bytes,
                         payload if ordinary and count else size_bytes)
        if count == 0:
            memory.store(offset_bytes, 0, payload)
            return path.at(path.start(rank), done)
        if streaming is None:
            streaming = size_bytes >= LINE
        if streaming:
            extra = self.coherence_model.before_stream(rank, offset_bytes, size_bytes, first, count)
            issued = path.write_back(rank, first, count, path.start(rank), extra,
                                     lambda _e: memory.store(offset_bytes, size_bytes, payload))
            path.hold_cpu(rank, issued)
            return path.at(issued, done)
        if count != 1:
            raise RunError(f"pool_write: rank {rank}: an ordinary store of {size_bytes} B at {offset_bytes} "
                           "spans two lines; stream it (streaming=True) or align it")
        return self.coherence_model.store_line(rank, offset_bytes, size_bytes, payload, first, done)

    def place(self, rank, offset_bytes, size_bytes, payload=None):
        """The rank's application stored `payload` at the range before the timed region (no time passes).

        Ordinary stores, as a zero-copy producer makes them: in hw mode the lines become
        Modified in the rank's cache (other holders get BISnp); in flush mode they are dirty
        in its cache until `flush` writes them back.
        """
        self._check(self.place, rank, offset_bytes, size_bytes)
        self._record(rank, PoolEvent.WRITE, offset_bytes, size_bytes)
        self.coherence_model.place(rank, offset_bytes, size_bytes, payload, *line_span(offset_bytes, size_bytes))

    def view(self, rank, offset_bytes, size_bytes):
        """What the rank's loads of the range would return now, without moving time (a zero-copy result):
        hw: the coherent value; flush: the rank's cached copy if it holds the range (possibly stale),
        else the pool's."""
        self._check(self.view, rank, offset_bytes, size_bytes)
        self._record(rank, PoolEvent.READ, offset_bytes, size_bytes)
        return self.coherence_model.view(rank, offset_bytes, size_bytes)

    def pool_read(self, rank, offset_bytes, size_bytes):
        self._check(self.pool_read, rank, offset_bytes, size_bytes)
        self._record(rank, PoolEvent.READ, offset_bytes, size_bytes)
        path = self.path
        after = 0.0
        if self.charges is not None:
            before, after = self.charges.read(rank, offset_bytes, size_bytes)
            if before:
                path.cpu(rank, before)
        done = simpy.Event(self.env)
        first, count = line_span(offset_bytes, size_bytes)
        start = path.start(rank)
        if count == 0:
            done = path.at(start, done, self.memory.value(offset_bytes, 0))
        else:
            local = self.preset.host_path.hit_latency_ns + size_bytes / self.preset.host.memcpy_bw_bytes_per_ns
            done = self.coherence_model.read(rank, offset_bytes, size_bytes, first, count, start, local, done)
        if after:
            path.cpu(rank, after)
        return done

    def flush(self, rank, offset_bytes, size_bytes):
        """clflushopt every line of the range: write back dirty lines, drop cached copies; fires when issued.

        The write-backs start with the first clflushopt and are paced by the host's issue
        server; `fence` waits for their acknowledgements and, when the host path's
        `invalidate_ns` is set, until that long after the last clflushopt's issue.
        """
        self._check(self.flush, rank, offset_bytes, size_bytes)
        first, count = line_span(offset_bytes, size_bytes)
        if count:
            self._record(rank, PoolEvent.FLUSH, offset_bytes, size_bytes)
        path = self.path
        start = path.start(rank)
        issued = path.cpu(rank, count * self.preset.host_path.flush_ns_per_line)
        self.coherence_model.flush(rank, offset_bytes, size_bytes, first, count, start)
        path.hold_fences(rank, issued, count)
        return path.at(issued, simpy.Event(self.env))

    def fence(self, rank, op: PoolEvent = PoolEvent.MFENCE):
        """sfence/mfence: fires once the rank's earlier streamed writes and write-backs are acknowledged."""
        if not 0 <= rank < self.size:
            raise RunError(f"fence: rank {rank} is not in 0..{self.size - 1}")
        if op not in (PoolEvent.SFENCE, PoolEvent.MFENCE):
            raise RunError(f"fence: rank {rank}: op must be PoolEvent.SFENCE or MFENCE, got {op!r}")
        self._record(rank, op, 0, 0)
        return self.path.fence(rank)

    def wait_flags(self, rank, flags, value):
        """Poll until every flag (a pool offset of an 8-byte word) holds `value`; a Process event."""
        flags = list(flags)
        for f in flags:
            self._check(self.wait_flags, rank, f, 8)
        logging = self.log is not None
        if logging:
            self._polling[rank] += 1
        waiting = self.coherence_model.wait_flags(rank, flags, value)
        if logging:
            waiting = self.env.process(self._logged_wait(rank, flags, value, waiting))
        if self.charges is not None:
            waiting = self.env.process(self._charged_wait(rank, waiting, self.charges.after_wait(rank)))
        return waiting

    def _logged_wait(self, rank, flags, value, waiting):
        yield waiting
        self._polling[rank] -= 1
        for f in flags:
            self._record(rank, self.coherence_model.poll_event, f, value)

    def _charged_wait(self, rank, waiting, extra_ns):
        yield waiting
        yield self.compute(rank, extra_ns)

    # ------------------------------------------------------------------ local work; no network
    def compute(self, rank, duration_ns):
        return self.path.at(self.path.cpu(rank, duration_ns), simpy.Event(self.env))

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
        return self.coherence_model.waiting()
