"""The pool allgather (`cxl_pool`): write own block, publish a flag, poll the flags, read every block.

This is the emulator's protocol (`cxl_allgather` in cxlsim/emulator/cxl_ops.h)
as a DES workload on a pool transport (`cxlsim.fabric.pool_transport.PoolTransport`,
e.g. `cxlsim.fabric.cxl_transport.CXLPoolTransport`), using only its interface:

1. copy the block into the rank's slot (streaming stores);
2. flush mode: clflushopt every line of the slot; then a fence (sfence);
3. store the epoch into the rank's flag line; flush mode: clflushopt the flag line;
4. wait until every other rank's flag holds the epoch (flush mode polls one
   flag at a time: invalidate, mfence, load; hw mode sleeps until a BISnp);
5. flush mode: clflushopt the other ranks' slots (drop stale copies), mfence;
6. read every slot, the rank's own included (the loads of the P slots overlap).

Step 6 is the emulator's logged and timed paths; its fast path (event log off, untimed) copies the
rank's own block from send to recv in its copy-in's pass and loads the P - 1 other slots. The DES
keeps the P loads, so that the seed-1 study's outputs stay byte-identical.

Layout (as the emulator's): P flag lines from offset 0, then two buffers of P
slots padded to 64 B, used by odd and even data rounds (calls that carry data;
double buffering), so a call never overwrites a slot someone may still read
from the previous call, and a barrier between calls does not flip the buffer.

The records `CXL_POOL` and `CXL_POOL_ZERO_COPY` (`transport="pool"`) carry
`cxl_pool_closed_form` as their cost, on the pool's `PoolFigures` (whose
coherence mode picks the form): the cost of one call that every rank starts at
the same time on a fresh pool, by the transport's own rules, on one switch or
a two-level tree, with any number of devices
(`cxlsim.models.collectives.pool_forms` derives it; the tests hold it equal to
the DES to rounding).

Zero-copy (`cxl_pool_zero_copy`, the emulator's send == NULL and recv == NULL):
the block was stored in the slot before the call (`place`: Modified in hw
mode, dirty in flush mode) and the result is read in place afterwards
(`view`), so there is no write and no read phase; in flush mode the slot's
clflushopt write the block back.
"""
from __future__ import annotations

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.errors import InputError
from cxlsim.fabric.cxl import CACHE_LINE_BYTES
from cxlsim.fabric.pool_transport import PoolTransport
from cxlsim.models.collectives.base import POOL, Algorithm
from cxlsim.models.collectives.pool_forms import geometry_from_figures, pool_closed_form

__all__ = ["cxl_pool", "cxl_pool_zero_copy", "PoolLayout", "cxl_pool_closed_form", "CXL_POOL", "CXL_POOL_ZERO_COPY"]


class PoolLayout:
    """Where the pool allgather of P blocks of m bytes keeps its flags and slots (bytes)."""

    __slots__ = ("ranks", "block_bytes", "stride_bytes", "data_offset", "total_bytes")

    def __init__(self, ranks: int, block_bytes: int):
        line = CACHE_LINE_BYTES
        self.ranks, self.block_bytes = ranks, block_bytes
        self.stride_bytes = max(line, -(-block_bytes // line) * line)
        self.data_offset = ranks * line
        self.total_bytes = self.data_offset + 2 * ranks * self.stride_bytes

    def flag(self, rank: int) -> int:
        return rank * CACHE_LINE_BYTES

    def slot(self, round: int, rank: int) -> int:
        """Rank `rank`'s slot in data round `round` (buffer round % 2, as the emulator's)."""
        return self.data_offset + ((round & 1) * self.ranks + rank) * self.stride_bytes

    def check(self, pool_bytes: int) -> None:
        if self.total_bytes > pool_bytes:
            raise InputError(
                f"pool_bytes: the cxl_pool allgather of P={self.ranks} blocks of {self.block_bytes} B needs "
                f"{self.total_bytes} B (P flag lines + 2 x P slots of {self.stride_bytes} B), "
                f"but the pool has {pool_bytes} B")


def _allgather(g, m, mine, zero_copy):
    t = getattr(g, "transport", None)
    if not isinstance(t, PoolTransport):
        raise InputError("cxl_pool: needs a CXL pool transport on the whole communicator "
                         "(a cxlsim.fabric.pool_transport.PoolTransport such as CXLPoolTransport)")
    p, r = g.size, g.rank
    layout = PoolLayout(p, m)
    layout.check(t.pool_bytes)
    flush = t.coherence == Coherence.FLUSH
    epoch = t.next_epoch(r)
    # Calls with data alternate buffers by data round, as the emulator's (a barrier between calls does
    # not flip them); a zero-byte call moves no data and keeps its payload labels apart by epoch.
    rnd = t.next_round(r, m) if m else epoch
    mine_slot = layout.slot(rnd, r)
    if zero_copy:
        t.place(r, mine_slot, m, mine)
    else:
        yield t.pool_write(r, mine_slot, m, mine, streaming=True)
    if flush:
        yield t.flush(r, mine_slot, m)
    yield t.fence(r, PoolEvent.SFENCE)
    yield t.pool_write(r, layout.flag(r), 8, epoch, streaming=False)
    if flush:
        yield t.flush(r, layout.flag(r), 8)
    others = [w for w in range(p) if w != r]
    if others:
        yield t.wait_flags(r, [layout.flag(w) for w in others], epoch)
    if flush:
        for w in others:
            yield t.flush(r, layout.slot(rnd, w), m)
        yield t.fence(r, PoolEvent.MFENCE)
    if zero_copy:
        return [t.view(r, layout.slot(rnd, w), m) for w in range(p)]
    reads = [t.pool_read(r, layout.slot(rnd, w), m) for w in range(p)]
    got = yield t.all_of(reads)
    return [got[ev] for ev in reads]


def cxl_pool(g, m, mine, ctx=None):
    """One rank's part of the pool allgather; returns the P blocks in rank order."""
    return (yield from _allgather(g, m, mine, zero_copy=False))


def cxl_pool_zero_copy(g, m, mine, ctx=None):
    """Zero-copy: the block is already in the slot (`place`), the result is read in place later (`view`)."""
    return (yield from _allgather(g, m, mine, zero_copy=True))


def cxl_pool_closed_form(fig, p: int, m: int, coherence, zero_copy: bool = False, starts=None,
                         poll_delay: float = 0.0, own_read: bool = True) -> float:
    """Latency (ns) of one `cxl_pool` (or `cxl_pool_zero_copy`) allgather of m-byte blocks on P hosts,
    all ranks starting together on a fresh pool (or rank r at starts[r] ns); `fig` is `CXLPoolTransport.figures()`.
    `own_read=False`: each rank loads only the other P - 1 slots (`pool_forms.pool_closed_form`)."""
    return pool_closed_form(geometry_from_figures(fig, p), m, Coherence.parse(coherence), zero_copy, starts,
                            poll_delay, own_read)


def _copy_cost(fig, p: int, m: int, ctx=None) -> float:
    """`cxl_pool`'s cost on a pool's figures (its coherence mode included), ns."""
    return cxl_pool_closed_form(fig, p, m, fig.coherence)


def _zero_copy_cost(fig, p: int, m: int, ctx=None) -> float:
    """`cxl_pool_zero_copy`'s cost on a pool's figures, ns."""
    return cxl_pool_closed_form(fig, p, m, fig.coherence, zero_copy=True)


CXL_POOL = Algorithm("allgather", "cxl_pool", cxl_pool, _copy_cost, transport=POOL,
                     source="cxlsim emulator cxl_allgather (cxl_ops.h), copy mode")
CXL_POOL_ZERO_COPY = Algorithm("allgather", "cxl_pool_zero_copy", cxl_pool_zero_copy, _zero_copy_cost, transport=POOL,
                               source="cxlsim emulator cxl_allgather (cxl_ops.h), zero-copy mode")
