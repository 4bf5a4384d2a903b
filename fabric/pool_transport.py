"""The pool transport interface: everything a workload that talks through a shared CXL pool may use.

A pool transport is a `Transport` whose ranks share a memory pool. On top of
the local work every transport has (`compute`, `copy`, `reduce`), a pool
algorithm (models/collectives/cxl_pool.py, the training pool store) uses only
what `PoolTransport` declares. Each operation returns a SimPy event that fires
when it completes (with the payload, for reads); time is ns, sizes are bytes,
offsets are bytes into the pool:

  pool_write(rank, offset, size, payload=None, *, streaming=None)
      stores; streamed (non-temporal) for whole lines, else an ordinary store
      of a flag within one line; fires when the stores are issued
  pool_read(rank, offset, size)       loads; fires with the label last made visible to the rank
  flush(rank, offset, size)           clflushopt the lines: write back, drop cached copies
  fence(rank, op)                     sfence/mfence: wait for the rank's writes to be acknowledged
  wait_flags(rank, flags, value)      poll until every flag offset holds `value`
  all_of(events)                      one event for several (e.g. reads issued together)
  place(rank, offset, size, payload)  the application's own stores before the timed region (no time)
  view(rank, offset, size)            what the rank's loads would return now (no time)
  next_epoch(rank), next_round(rank, size)   the protocol's call counters (flag values, buffers)
  defer(rank, item), take_deferred(rank)     an acknowledgement kept for the rank's next call
  coherence                           the pool's `Coherence` mode (HW or FLUSH)
  pool_bytes                          the pool's size
  figures()                           the derived figures closed forms use (`PoolFigures`)

`PoolFigures` are those figures; `ExtraCharges` is the public hook through
which a model adds CPU time to a pool's own (calibration's injected timing).
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.fabric.transport import Transport

__all__ = ["PoolTransport", "PoolFigures", "ExtraCharges"]


@dataclass(frozen=True, kw_only=True)
class PoolFigures:
    """The derived figures of a built pool, for closed forms."""

    coherence: Coherence
    """The pool's coherence mode."""
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
    reduce_bw_bytes_per_ns: float
    """Local reduction bandwidth (bytes of one operand folded per ns), as `Transport.reduce` charges it."""
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
    devices: int = 1
    """Pool devices, interleaved by chunk."""
    one_device_bw_bytes_per_ns: float = 0.0
    """One device's bandwidth, bytes/ns."""
    chunk_bytes: int = 4096
    """The interleaving granule: a transfer is cut into chunks of this many bytes."""
    leaf_of: tuple = ()
    """Leaf switch of each host on a two-level tree; () with one switch."""
    to_leaf_uplink_ns: float = 0.0
    """Core to the leaf's uplink on a two-level tree (0 with one switch), ns."""


class ExtraCharges:
    """CPU time (ns) a model adds to a pool transport's own, per operation; this base adds none.

    A pool transport given an instance (`charges=`) books `after_wait(rank)` on the rank's CPU once
    `wait_flags` has seen every flag, and `read(rank, offset, size) -> (before, after)` around each
    `pool_read`: `before` delays the loads' issue, `after` keeps the CPU busy once they are issued.
    """

    def after_wait(self, rank: int) -> float:
        return 0.0

    def read(self, rank: int, offset_bytes: int, size_bytes: int) -> tuple[float, float]:
        return 0.0, 0.0


class PoolTransport(Transport):
    """The interface of a transport whose ranks share a memory pool (see the module docstring).

    Subclasses set `env`, `size`, `coherence` and `pool_bytes`, call `start_counters(hosts)`, and
    implement the abstract operations.
    """

    kind = "pool"
    coherence: Coherence
    pool_bytes: int

    def start_counters(self, hosts: int) -> None:
        """Zero the per-rank call counters of `next_epoch` and `next_round`; nothing deferred."""
        self._epochs = [0] * hosts
        self._rounds = [0] * hosts
        self._deferred = [None] * hosts

    def defer(self, rank: int, item) -> None:
        """Keep `item` for the rank's next call (`take_deferred`): an acknowledgement a zero-copy protocol
        publishes only when its next call starts, since its caller reads the pool in place until then."""
        self._deferred[rank] = item

    def take_deferred(self, rank: int):
        """The item `defer` kept for the rank (None if none), cleared."""
        item, self._deferred[rank] = self._deferred[rank], None
        return item

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

    def all_of(self, events):
        """An event that fires when every one of `events` has, with {event: value}."""
        return self.env.all_of(events)

    @abstractmethod
    def pool_write(self, rank: int, offset_bytes: int, size_bytes: int, payload=None, *,
                   streaming: bool | None = None):
        """Store `size_bytes` at `offset_bytes`; fires when the stores are issued.

        streaming=None: stream if the write covers at least one line, else an ordinary store
        (which must stay within one line)."""

    @abstractmethod
    def pool_read(self, rank: int, offset_bytes: int, size_bytes: int):
        """Load `size_bytes` at `offset_bytes`; fires with the label once the data is in the rank."""

    @abstractmethod
    def flush(self, rank: int, offset_bytes: int, size_bytes: int):
        """clflushopt every line of the range: write back dirty lines, drop cached copies; fires when issued."""

    @abstractmethod
    def fence(self, rank: int, op: PoolEvent = PoolEvent.MFENCE):
        """Fires once the rank's earlier streamed writes and write-backs are acknowledged; `op`
        (SFENCE or MFENCE) is the fence the event log records."""

    @abstractmethod
    def wait_flags(self, rank: int, flags, value):
        """Poll until every flag (a pool offset of an 8-byte word) holds `value`."""

    @abstractmethod
    def place(self, rank: int, offset_bytes: int, size_bytes: int, payload=None) -> None:
        """The rank's application stored `payload` at the range before the timed region (no time passes)."""

    @abstractmethod
    def view(self, rank: int, offset_bytes: int, size_bytes: int):
        """What the rank's loads of the range would return now, without moving time."""

    @abstractmethod
    def figures(self) -> PoolFigures:
        """The pool's derived figures, for closed forms."""
