"""Point-to-point messages over a CXL pool: mailboxes in pool memory, published and acknowledged with flags.

`PoolMessages(pool)` gives a pool transport (`cxlsim.fabric.pool_transport`,
one rank per host, or several) the message half of the transport interface (`send`,
`recv`, like `NetworkTransport`'s), so the trace's point-to-point calls and the
network collective algorithms run on a pool fabric. Its `kind` is 'network'
(it carries messages); `compute`, `copy` and `reduce` are the pool's.

Protocol. Every ordered pair (src, dst) owns `slots` mailbox slots of
`slot_bytes` at the top of the pool, each with two flag lines: `full`, written
only by src, and `ack`, written only by dst (one writer per line, lines padded
to 64 B). A message is cut into pieces of at most `slot_bytes`; piece number n
of the pair goes to slot n % slots. The sender, for each piece:
1. waits until the slot's `ack` holds n - slots (its last occupant was read; n >= slots);
2. streams the piece into the slot (whole lines), in flush mode clflushopt
   its lines; a fence;
3. stores n into the slot's `full` flag (flush mode: clflushopt the flag line).
The send completes locally after the last piece's flag. The receiver, from
the moment the first piece's flag is set (a progress engine polling while the
rank is otherwise idle would find it then; its polls are charged from there):
4. waits until `full` holds n; flush mode: clflushopt the slot (drop stale
   lines) and a fence; reads the piece;
5. stores n into `ack` (flush mode: clflushopt it).
Messages of one pair are sent and received in order; the last piece carries
the payload, which is then matched by (dst, src, tag) in arrival order.
Every cost is the pool transport's own (stores, loads, flushes, fences and
polls on the ranks' CPUs and the pool's paths and devices).

Closed form (`message_ns`) of one message of one piece on an idle pool, from
the pool's figures (`PoolFigures`): X = 64/b (a line through the host's issue
server), W = 64*ceil(m/64), D = W/b, S = max(D, W/B), L = 2*path + media,
F = clflushopt per line, f = fence, I = a flush's acknowledgement, K = a
write's least time to acknowledgement, n = W/64 lines:

    hw:    sent = max(2*path + S, K) + f + (X + L)            write, fence, flag store (read for ownership)
           received = sent + (X + L + 2*path)                 the poll recalls the Modified flag line
                      + (L + S) + (X + L)                     read the slot, store the ack
    flush: sent = max(D + n*F + I, 2*path + S, K) + f + (X + L) + F     ... and clflushopt the flag line
           received = sent + (F + I + f + X + L)              the first poll (invalidate, mfence, load)
                      + (n*F + I + f) + (L + S) + (X + L) + F  drop stale lines, read, store and flush the ack

(in flush mode the first poll finds the flag when the flag's write-back
reaches the device before the poll's load, which holds for I = K = 0, as in
the CXL presets).
"""
from __future__ import annotations


import simpy

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.errors import InputError, RunError
from cxlsim.fabric.matching import Matching
from cxlsim.fabric.transport import Transport

__all__ = ["PoolMessages", "message_ns", "LINE_BYTES", "DEFAULT_SLOT_BYTES", "DEFAULT_SLOTS"]

LINE_BYTES = 64
DEFAULT_SLOT_BYTES = 64 * 1024
"""Mailbox slot size, bytes: a longer message is sent in pieces."""
DEFAULT_SLOTS = 4
"""Slots per ordered pair: pieces in flight before the sender waits for an acknowledgement."""


def whole_lines(size_bytes: int) -> int:
    """Bytes of the whole 64 B lines that hold `size_bytes` (at least one line)."""
    return max(LINE_BYTES, -(-size_bytes // LINE_BYTES) * LINE_BYTES)


def message_ns(fig, size_bytes: int) -> tuple[float, float]:
    """(sent, received) ns of one message of at most one slot on an idle pool with figures `fig`
    (see the module docstring): when the send completes and when the receive does."""
    x = LINE_BYTES / fig.host_bw_bytes_per_ns
    w = whole_lines(size_bytes)
    d = w / fig.host_bw_bytes_per_ns
    stream = max(d, w / fig.device_bw_bytes_per_ns)
    path, load, f, fence = fig.path_ns, fig.load_ns, fig.flush_ns_per_line, fig.fence_ns
    i, k, lines = fig.invalidate_ns, fig.writeback_ns, w // LINE_BYTES
    if fig.coherence == Coherence.HW:
        sent = max(2 * path + stream, k) + fence + (x + load)
        return sent, sent + (x + load + 2 * path) + (load + stream) + (x + load)
    sent = max(d + lines * f + i, 2 * path + stream, k) + fence + (x + load) + f
    received = sent + (f + i + fence + x + load) + (lines * f + i + fence) + (load + stream) + (x + load) + f
    return sent, received


class PoolMessages(Transport):
    """MPI-style messages between the ranks of `pool`, through mailboxes in the pool (see the module docstring)."""

    kind = "network"

    def __init__(self, pool, slot_bytes: int = DEFAULT_SLOT_BYTES, slots: int = DEFAULT_SLOTS, low_bytes: int = 0):
        p = pool.size
        self.pool, self.env, self.size = pool, pool.env, p
        self.slot_bytes, self.slots = whole_lines(slot_bytes), slots
        self.stride = self.slot_bytes + 2 * LINE_BYTES
        region = p * p * slots * self.stride
        self.base = pool.pool_bytes - region
        if self.base < low_bytes:
            raise InputError(f"pool_bytes: the point-to-point mailboxes of {p} ranks ({p}^2 pairs x {slots} slots "
                             f"of {self.slot_bytes} B) and the collectives' {low_bytes} B need "
                             f"{region + low_bytes} B; the pool has {pool.pool_bytes} B")
        self.flush_mode = pool.coherence == Coherence.FLUSH
        self._pieces = [[0] * p for _ in range(p)]     # next piece number per (src, dst)
        self._sent = [[None] * p for _ in range(p)]    # the pair's last send, for ordering
        self._pulled = [[None] * p for _ in range(p)]  # the pair's last receive
        self._matching = Matching()                    # (dst, src, tag) -> payloads or recv events
        self.messages = 0

    def _slot(self, src: int, dst: int, piece: int) -> tuple:
        """(data offset, full flag offset, ack flag offset) of the pair's slot for `piece`."""
        offset = self.base + ((src * self.size + dst) * self.slots + piece % self.slots) * self.stride
        return offset, offset + self.slot_bytes, offset + self.slot_bytes + LINE_BYTES

    def send(self, src, dst, size_bytes, payload=None, tag=0):
        if not 0 <= dst < self.size or dst == src:
            raise RunError(f"send: rank {src} cannot send to rank {dst} (P={self.size})")
        pieces = max(1, -(-size_bytes // self.slot_bytes))
        first = self._pieces[src][dst]
        self._pieces[src][dst] = first + pieces
        done = simpy.Event(self.env)
        previous = self._sent[src][dst]
        self._sent[src][dst] = done
        self.messages += 1
        self.env.process(self._send(src, dst, first, size_bytes, pieces, (tag, payload), previous, done))
        return done

    def _send(self, src, dst, first, size_bytes, pieces, message, previous, done):
        pool = self.pool
        if previous is not None and not previous.processed:
            yield previous
        for i in range(pieces):
            n = first + i
            data, full, ack = self._slot(src, dst, n)
            if n >= self.slots:
                yield pool.wait_flags(src, [ack], n - self.slots)
            nbytes = whole_lines(min(self.slot_bytes, size_bytes - i * self.slot_bytes))
            yield pool.pool_write(src, data, nbytes, message if i == pieces - 1 else None, streaming=True)
            if self.flush_mode:
                yield pool.flush(src, data, nbytes)
            yield pool.fence(src, PoolEvent.SFENCE)
            yield pool.pool_write(src, full, 8, n, streaming=False)
            if self.flush_mode:
                yield pool.flush(src, full, 8)
            if i == 0:
                pulled = simpy.Event(self.env)
                before = self._pulled[src][dst]
                self._pulled[src][dst] = pulled
                self.env.process(self._pull(src, dst, first, size_bytes, pieces, before, pulled))
        done.succeed()

    def _pull(self, src, dst, first, size_bytes, pieces, before, pulled):
        pool = self.pool
        if before is not None and not before.processed:
            yield before
        message = None
        for i in range(pieces):
            n = first + i
            data, full, ack = self._slot(src, dst, n)
            nbytes = whole_lines(min(self.slot_bytes, size_bytes - i * self.slot_bytes))
            yield pool.wait_flags(dst, [full], n)
            if self.flush_mode:
                yield pool.flush(dst, data, nbytes)
                yield pool.fence(dst, PoolEvent.MFENCE)
            message = yield pool.pool_read(dst, data, nbytes)
            yield pool.pool_write(dst, ack, 8, n, streaming=False)
            if self.flush_mode:
                yield pool.flush(dst, ack, 8)
        pulled.succeed()
        tag, payload = message
        waiting = self._matching.arrive((dst, src, tag), payload)
        if waiting is not None:
            waiting.succeed(payload)

    def recv(self, dst, src, tag=0):
        if not 0 <= src < self.size or src == dst:
            raise RunError(f"recv: rank {dst} cannot receive from rank {src} (P={self.size})")
        event = simpy.Event(self.env)
        landed = self._matching.post((dst, src, tag), event)
        return event.succeed(landed[0]) if landed else event

    def compute(self, rank, duration_ns):
        return self.pool.compute(rank, duration_ns)

    def copy(self, rank, size_bytes):
        return self.pool.copy(rank, size_bytes)

    def reduce(self, rank, size_bytes):
        return self.pool.reduce(rank, size_bytes)

    def _waiting(self) -> str:
        return f"unmatched pool receives (dst, src, tag): {self._matching.waiting()[:8]}"
