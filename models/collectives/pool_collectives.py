"""The pool collectives beyond allgather, as DES workloads: allreduce, reduce_scatter, broadcast, alltoall, barrier.

Each is the protocol of the emulator's C kernel (cxlsim/emulator/cxl_coll.h) on
a pool transport (`cxlsim.fabric.pool_transport.PoolTransport`), one rank per
host. A step takes the next epoch e (`next_epoch`) and, if it carries data, the
next data round; the rank's flag of step e then holds written(e) = 2e ("my data
of step e is in my slot") or, for a broadcast reader, done(e) = 2e + 1 ("I have
read step e"). Layout (`StepLayout`): two flag lines per rank from offset 0, then
two buffers of P slots, used by odd and even data rounds.

The bytes are the kernels' with the event log off and no emulated timing (their
fast path): a rank's own block of a row (reduce_scatter, alltoall) or its own
share of the large allreduce's input never enters the pool, and no rank loads
its own slot of the small allreduce (its fold takes that vector from its input). The publish still
writes back (flush mode) the whole row or vector, as the kernels' cxl_publish
does: a clflushopt of a line the rank did not write costs its CPU time and
moves nothing.

Publishing (`_publish`) is `cxl_publish`: flush mode clflushopt the written
range; sfence; store the flag; flush mode clflushopt the flag line. Acquiring
(`_acquire`) is flush mode's clflushopt of the ranges about to be read (stale
copies) and an mfence. The steps:

- `barrier`: publish written(e) without data, wait for every other flag.
- `allreduce` `cxl_pool` (small): write the vector into the slot, publish, wait,
  acquire and read every other rank's slot, fold ranks 0..P-1 left to right, the
  rank's own vector taken from its input ((P-1) x s bytes of reduction).
- `allreduce` `cxl_pool_large` (P > 1; one rank runs the small one, as the kernel):
  that step, but each rank writes its vector
  around its own share (1/P of the vector, share boundaries on 64-byte lines,
  `share_bytes`), which only it reads, and folds that share of every other
  slot with its own, taken from its input; then a second step in the other
  buffer: write the folded share into the slot, publish, wait, read every
  share (hw mode together; flush mode one after another in rank order, each
  other rank's share dropped and fenced just before it is read, as the
  kernel copies them out).
- `reduce_scatter` `cxl_pool` (block): rank r writes its row of P blocks
  (ceil(s/P) bytes each, unpadded) into its slot, all but its own block r
  (`row_pieces`), which only it reads; every rank reads its column (block r
  of every other row) and folds it with its own block, taken from its input
  ((P-1) x ceil(s/P) bytes of reduction).
- `alltoall` `cxl_pool`: the same row and column with m bytes per destination,
  and no fold: the rank's own block goes from its send buffer to its receive
  buffer (a local copy of m bytes) between its publish and its wait.
- `broadcast` `cxl_pool`: the root writes into its slot and publishes; it does
  not wait for the readers. A reader waits for the root's flag alone, acquires,
  reads the root's slot and publishes done(e).
- Zero-copy (`cxl_pool_zero_copy`, the emulator's cxl_coll_alltoall_view and
  cxl_coll_broadcast_view): the writer's data was stored in its slot before the
  call (`place`: Modified in hw mode, dirty in flush mode, so the publish's
  clflushopt writes it back), and readers read the writer's slot in place after
  the call (`view`): no copy-in and no copy-out. The alltoall is the row step
  without the column's loads. A broadcast reader acknowledges done(e) only when
  its next call starts (`PoolTransport.defer`), since its caller reads the
  root's slot until then.

Where the DES differs from the C kernel: a call is one step however large (the
DES pool has no slot limit below its size, checked); a zero-byte call of these
programs is a step (the kernels return at once, as the registry's records do:
`returns_at_once`); the large allreduce's fold streams its share into
the pool (the C kernel folds with ordinary stores into the slot and writes them
back); and `wait_flags` waits for a flag to *equal* a value
(the C kernels wait for >=), so a rank has two flag lines, one per epoch parity
(the C kernels one): a rank cannot store step e + 2's flag before every rank has
stored step e + 1's, which it does only after seeing step e's, so a value waited
for is never overwritten before it is seen. A broadcast root, before writing step
e > 2, waits for every reader's done(e - 2) (the step that last used the buffer,
as the C root's claim); it expects step e - 2 to have been a broadcast from the
same root (after another collective its wait runs into the poll limit).

Payload labels: a row is one region whose label is ("row", writer, blocks); a
reader of a block within it gets that label and takes its block, so a read of the
wrong slot or row shows in `runner.verify`.
"""
from __future__ import annotations

import functools

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.errors import InputError
from cxlsim.fabric.cxl import CACHE_LINE_BYTES
from cxlsim.fabric.pool_transport import PoolTransport
from cxlsim.models.collectives.base import RETURNED_AT_ONCE, fold_vectors, split

__all__ = ["StepLayout", "written", "done", "share_bytes", "block_bytes", "row_pieces", "barrier", "allreduce_small", "allreduce_large",
           "reduce_scatter", "alltoall", "alltoall_zero_copy", "broadcast", "broadcast_zero_copy", "returns_at_once"]

LINE = CACHE_LINE_BYTES


def written(epoch: int) -> int:
    """Flag value: my data of step `epoch` is in my slot."""
    return 2 * epoch


def done(epoch: int) -> int:
    """Flag value: I have read step `epoch` (a broadcast reader's acknowledgement)."""
    return 2 * epoch + 1


def share_bytes(s: int, p: int, r: int) -> tuple[int, int]:
    """Rank r's share [lo, hi) of an s-byte vector over p ranks, boundaries on 64-byte lines (bytes)."""
    lines = -(-s // LINE)
    return min(lines * r // p * LINE, s), min(lines * (r + 1) // p * LINE, s)


def block_bytes(s: int, p: int) -> int:
    """Bytes of one reduce_scatter block of an s-byte vector over p ranks: ceil(s/p)."""
    return -(-s // p)


def row_pieces(start: int, stop: int, size: int) -> list:
    """The (offset, bytes) ranges of [0, size) around [start, stop) that a rank writes into its slot: its row
    (or vector) but the block (or share) only it reads; one zero-byte range (which carries the row's label
    and takes no time) where that leaves nothing."""
    if start >= stop:
        return [(0, size)]
    return [(lo, hi - lo) for lo, hi in ((0, start), (stop, size)) if hi > lo] or [(0, 0)]


class StepLayout:
    """Flags and slots of the pool collectives for P ranks and slots of `slot_bytes` (bytes)."""

    __slots__ = ("ranks", "slot_bytes", "stride_bytes", "data_offset", "total_bytes")

    def __init__(self, ranks: int, slot_bytes: int):
        self.ranks, self.slot_bytes = ranks, slot_bytes
        self.stride_bytes = max(LINE, -(-slot_bytes // LINE) * LINE)
        self.data_offset = 2 * ranks * LINE
        self.total_bytes = self.data_offset + 2 * ranks * self.stride_bytes

    def flag(self, rank: int, epoch: int) -> int:
        """Rank `rank`'s flag line for step `epoch` (one per epoch parity)."""
        return (2 * rank + (epoch & 1)) * LINE

    def slot(self, round: int, rank: int) -> int:
        """Rank `rank`'s slot in data round `round` (buffer round % 2)."""
        return self.data_offset + ((round & 1) * self.ranks + rank) * self.stride_bytes


def returns_at_once(program):
    """`program` as a registry record runs it, after the emulator's kernels: a zero-byte call returns at
    once on every rank (`base.RETURNED_AT_ONCE`: no step, no epoch, no pool access; the kernels' loops
    over chunks run no chunk). The programs themselves keep a zero-byte call as one step, as the pods'
    and the octopus pools' algorithms compose them."""
    @functools.wraps(program)
    def run(g, size_bytes, data, ctx=None):
        if size_bytes == 0:
            _pool(g, program.__name__)
            return RETURNED_AT_ONCE
        return (yield from program(g, size_bytes, data, ctx))
    return run


def _pool(g, name) -> PoolTransport:
    t = getattr(g, "transport", None)
    if not isinstance(t, PoolTransport):
        raise InputError(f"{name}: needs a CXL pool transport on the whole communicator "
                         "(a cxlsim.fabric.pool_transport.PoolTransport such as CXLPoolTransport)")
    return t


def _layout(t, p, slot_bytes, name) -> StepLayout:
    layout = StepLayout(p, slot_bytes)
    if layout.total_bytes > t.pool_bytes:
        raise InputError(f"pool_bytes: the pool {name} on P={p} needs {layout.total_bytes} B (P flag lines + "
                         f"2 x P slots of {layout.stride_bytes} B), but the pool has {t.pool_bytes} B")
    return layout


def _publish(t, r, layout, offset, size, epoch, value):
    """cxl_publish: write back [offset, offset + size) (flush mode), sfence, store `value` in the flag of
    step `epoch`, write it back (flush mode)."""
    flush = t.coherence == Coherence.FLUSH
    if flush and size:
        yield t.flush(r, offset, size)
    yield t.fence(r, PoolEvent.SFENCE)
    flag = layout.flag(r, epoch)
    yield t.pool_write(r, flag, 8, value, streaming=False)
    if flush:
        yield t.flush(r, flag, 8)


def _wait_all(t, r, p, layout, epoch, value):
    """Poll every other rank's flag of step `epoch` until it holds `value`."""
    others = [layout.flag(w, epoch) for w in range(p) if w != r]
    if others:
        yield t.wait_flags(r, others, value)


def _acquire(t, r, ranges):
    """Flush mode: drop stale copies of the (offset, size) ranges, then mfence."""
    if t.coherence != Coherence.FLUSH:
        return
    for offset, size in ranges:
        yield t.flush(r, offset, size)
    yield t.fence(r, PoolEvent.MFENCE)


def _read_all(t, r, ranges):
    """Load the (offset, size) ranges together; their labels in order."""
    reads = [t.pool_read(r, offset, size) for offset, size in ranges]
    got = yield t.all_of(reads)
    return [got[ev] for ev in reads]


def _row_block(label, writer, index):
    """Block `index` of writer's row, from the label a read within the row returned (None if it is not that row)."""
    if isinstance(label, tuple) and len(label) == 1:
        label = label[0]
    if isinstance(label, tuple) and len(label) == 3 and label[0] == "row" and label[1] == writer:
        return label[2][index]
    return None


def barrier(g, size_bytes, mine, ctx=None):
    """Every rank publishes written(e) without data and waits for every other rank's; returns the ranks seen."""
    t = _pool(g, "barrier")
    p, r = g.size, g.rank
    layout = StepLayout(p, 0)
    e = t.next_epoch(r)
    yield from _publish(t, r, layout, 0, 0, e, written(e))
    yield from _wait_all(t, r, p, layout, e, written(e))
    return list(range(p))


def _input_step(t, r, p, s, vec, name, keep=(0, 0)):
    """Write the s-byte vector into this rank's slot of a new step (but bytes [keep) of it, which only this
    rank reads, from its input), publish it and wait for every rank's."""
    layout = _layout(t, p, s, name)
    e = t.next_epoch(r)
    rnd = t.next_round(r, s) if s else e
    slot = layout.slot(rnd, r)
    for offset, size in row_pieces(*keep, s):
        yield t.pool_write(r, slot + offset, size, vec, streaming=True)
    yield from _publish(t, r, layout, slot, s, e, written(e))
    yield from _wait_all(t, r, p, layout, e, written(e))
    return layout, rnd


def allreduce_small(g, s, vec, ctx=None):
    """Every rank reads every other rank's vector and folds them with its own, from its input (one step)."""
    t = _pool(g, "allreduce cxl_pool")
    p, r = g.size, g.rank
    layout, rnd = yield from _input_step(t, r, p, s, vec, "allreduce cxl_pool")
    others = [(layout.slot(rnd, w), s) for w in range(p) if w != r]
    yield from _acquire(t, r, others)
    vectors = (yield from _read_all(t, r, others)) if others else []
    vectors.insert(r, vec)
    if p > 1:
        yield g.reduce((p - 1) * s)
    return fold_vectors(vectors)


def allreduce_large(g, s, vec, ctx=None):
    """Reduce-scatter through the pool (each rank folds its share of every vector), then an allgather of the shares."""
    t = _pool(g, "allreduce cxl_pool_large")
    p, r = g.size, g.rank
    if p == 1:  # as the kernel: one rank takes the small algorithm
        return (yield from allreduce_small(g, s, vec, ctx))
    lo, hi = share_bytes(s, p, r)
    layout, rnd = yield from _input_step(t, r, p, s, vec, "allreduce cxl_pool_large", (lo, hi))
    others = [w for w in range(p) if w != r]
    yield from _acquire(t, r, [(layout.slot(rnd, w) + lo, hi - lo) for w in others])
    if hi > lo:
        got = yield from _read_all(t, r, [(layout.slot(rnd, w) + lo, hi - lo) for w in others])
    else:  # an empty share of bytes still carries its label elements (seen in a piece w wrote); no time
        got = [t.view(r, layout.slot(rnd, w) + a, n) for w in others
               for a, n in row_pieces(*share_bytes(s, p, w), s)[:1]]
    got.insert(r, vec)  # this rank's own share, from its input
    labels = [_share_of(label, p, r) for label in got]
    if p > 1:
        yield g.reduce((p - 1) * (hi - lo))
    share = fold_vectors(labels)
    e2 = t.next_epoch(r)
    rnd2 = t.next_round(r, s) if s else e2
    mine = layout.slot(rnd2, r) + lo
    yield t.pool_write(r, mine, hi - lo, share, streaming=True)
    yield from _publish(t, r, layout, mine, hi - lo, e2, written(e2))
    yield from _wait_all(t, r, p, layout, e2, written(e2))
    ranges = [(layout.slot(rnd2, w) + a, b - a) for w, (a, b) in ((w, share_bytes(s, p, w)) for w in range(p))]
    if t.coherence == Coherence.FLUSH:  # each other share dropped, fenced and read before the next
        shares = []
        for w, rg in enumerate(ranges):
            if w != r:
                yield from _acquire(t, r, [rg])
            shares += yield from _read_all(t, r, [rg])
    else:
        shares = yield from _read_all(t, r, ranges)
    if any(x is None for x in shares):
        return None
    return tuple(x for sh in shares for x in sh)


def _share_of(label, p, r):
    """Share r of a whole vector's label, as a read within the vector's region returned it."""
    if isinstance(label, tuple) and len(label) == 1 and isinstance(label[0], tuple):
        label = label[0]
    if not isinstance(label, tuple):
        return None
    return split(label, p)[r]


def _row_step(t, g, block, blocks, name, copy_own):
    """Write this rank's row of P blocks (block bytes each) but its own into a new step, publish, (alltoall:
    `copy_own`, copy its own block locally), wait, acquire the other rows' block r and read them; returns the
    P blocks of the column in writer order, this rank's own from `blocks`."""
    p, r = g.size, g.rank
    layout = _layout(t, p, p * block, name)
    e = t.next_epoch(r)
    row = p * block
    rnd = t.next_round(r, row) if row else e
    slot = layout.slot(rnd, r)
    for offset, size in row_pieces(r * block, (r + 1) * block, row):
        yield t.pool_write(r, slot + offset, size, ("row", r, tuple(blocks)), streaming=True)
    yield from _publish(t, r, layout, slot, row, e, written(e))
    if copy_own and block:
        yield g.copy(block)
    yield from _wait_all(t, r, p, layout, e, written(e))
    others = [w for w in range(p) if w != r]
    column = [(layout.slot(rnd, w) + r * block, block) for w in others]
    yield from _acquire(t, r, column)
    got = yield from _read_all(t, r, column)
    out = [_row_block(label, w, r) for w, label in zip(others, got)]
    out.insert(r, blocks[r])
    return out


def reduce_scatter(g, s, vec, ctx=None):
    """Rank r writes its P blocks (its row); every rank folds its column (block r of every row)."""
    t = _pool(g, "reduce_scatter cxl_pool")
    p = g.size
    seg = block_bytes(s, p)
    column = yield from _row_step(t, g, seg, split(vec, p), "reduce_scatter cxl_pool", copy_own=False)
    if p > 1:
        yield g.reduce((p - 1) * seg)
    return fold_vectors(column)


def alltoall(g, m, blocks, ctx=None):
    """Rank r writes its P blocks of m bytes (block d for rank d) as its row; every rank reads its column."""
    t = _pool(g, "alltoall cxl_pool")
    return (yield from _row_step(t, g, m, blocks, "alltoall cxl_pool", copy_own=True))


def broadcast(g, s, data, ctx=None):
    """The root writes once and publishes; each reader waits for the root, reads and publishes done(e)."""
    t = _pool(g, "broadcast cxl_pool")
    p, r = g.size, g.rank
    root = ctx.root if ctx is not None else 0
    layout = _layout(t, p, s, "broadcast cxl_pool")
    e = t.next_epoch(r)
    rnd = t.next_round(r, s) if s else e
    slot = layout.slot(rnd, root)
    if r == root:
        if e > 2:  # every reader has read step e - 2, the last to use this buffer
            yield from _wait_all(t, r, p, layout, e - 2, done(e - 2))
        yield t.pool_write(r, slot, s, data, streaming=True)
        yield from _publish(t, r, layout, slot, s, e, written(e))
        return data
    yield t.wait_flags(r, [layout.flag(root, e)], written(e))
    yield from _acquire(t, r, [(slot, s)])
    (label,) = yield from _read_all(t, r, [(slot, s)])
    yield from _publish(t, r, layout, 0, 0, e, done(e))
    return label


def alltoall_zero_copy(g, m, blocks, ctx=None):
    """Zero-copy alltoall: rank r's row of P blocks is already in its slot; it publishes, waits for every row,
    acquires its column and reads it in place (`view`)."""
    t = _pool(g, "alltoall cxl_pool_zero_copy")
    p, r = g.size, g.rank
    layout = _layout(t, p, p * m, "alltoall cxl_pool_zero_copy")
    e = t.next_epoch(r)
    rnd = t.next_round(r, p * m) if m else e
    mine = layout.slot(rnd, r)
    t.place(r, mine, p * m, ("row", r, tuple(blocks)))
    yield from _publish(t, r, layout, mine, p * m, e, written(e))
    yield from _wait_all(t, r, p, layout, e, written(e))
    column = [(layout.slot(rnd, w) + r * m, m) for w in range(p)]
    yield from _acquire(t, r, [c for w, c in enumerate(column) if w != r])
    return [_row_block(t.view(r, offset, size), w, r) for w, (offset, size) in enumerate(column)]


def broadcast_zero_copy(g, s, data, ctx=None):
    """Zero-copy broadcast: the root's data is already in its slot; it publishes; a reader publishes its last
    call's done first (deferred), waits for the root, acquires and reads the root's slot in place (`view`)."""
    t = _pool(g, "broadcast cxl_pool_zero_copy")
    p, r = g.size, g.rank
    root = ctx.root if ctx is not None else 0
    layout = _layout(t, p, s, "broadcast cxl_pool_zero_copy")
    last = t.take_deferred(r)
    if last is not None:
        yield from _publish(t, r, layout, 0, 0, last, done(last))
    e = t.next_epoch(r)
    rnd = t.next_round(r, s) if s else e
    slot = layout.slot(rnd, root)
    if r == root:
        if e > 2:  # every reader has read step e - 2, the last to use this buffer (acknowledged at its next call)
            yield from _wait_all(t, r, p, layout, e - 2, done(e - 2))
        t.place(r, slot, s, data)
        yield from _publish(t, r, layout, slot, s, e, written(e))
        return data
    yield t.wait_flags(r, [layout.flag(root, e)], written(e))
    yield from _acquire(t, r, [(slot, s)])
    t.defer(r, e)
    return t.view(r, slot, s)
