"""Closed forms of the pool broadcasts (`pool_collectives.broadcast`, `broadcast_zero_copy`), ns, on a pool's `PoolFigures`.

One call that every rank starts together on a fresh pool. Flush mode: the ranks' programs walked through
the pool's FIFO chain (`pool_flush_programs`), exact on any pool: a reader's polls queue at a device behind
the root's chunks, which shifts which poll sees the flag.

hw on a congested pool: fixed points of `pool_hw_steps.hw_step_ends`, as the step collectives', with
per-rank waits and stores: the root streams its slot and stores its flag; each reader polls the
root's flag from 0, loads the slot and then stores its done flag (zero-copy:
neither). Exact on any pool as measured (one switch, trees of 16-64 hosts, two
devices, switchless 16 hosts), any root. Beyond `HW_CHUNKS` the algebraic forms
stand, exact only *uncongested*: one switch and P x host bandwidth within the
devices' (`uncongested`); elsewhere they leave out the queueing (the copy
broadcast's was 33% low at 32 hosts, 64 KiB), and `pool_collective_forms.form_note` says so. With
X = 64/b the issue time of a line (b the host bandwidth), D(n) = 64
ceil(n/64)/b, L = 2 path + media and ack(n) = max(D(n) + 2 path, writeback) the
acknowledgement of an n-byte streamed write, `broadcast_ends` gives the steps.
"""
from __future__ import annotations

from cxlsim.models.collectives import pool_collectives as pc
from cxlsim.models.collectives.pool_flush_programs import broadcast_flush, broadcast_flush_ends
from cxlsim.models.collectives.pool_forms import geometry_from_figures
from cxlsim.models.collectives.pool_hw_steps import AFTER, FIRST, hw_step_ends
from cxlsim.models.collectives.pool_step_terms import (HW_CHUNKS, LINE, flush_mode, issue_ns, lines_of, reads_ns,
                                                       row_store_shift_ns, uncongested)

__all__ = ["broadcast_cost", "broadcast_ends", "broadcast_zero_copy_cost", "hw_broadcast_stepped"]


def broadcast_cost(fig, p: int, s: int, ctx=None) -> float:
    """The pool broadcast of s bytes from root `ctx.root` (0 without a context), ns: the latest of
    `broadcast_ends`."""
    return max(broadcast_ends(fig, p, s, ctx.root if ctx is not None else 0))


def broadcast_ends(fig, p: int, s: int, root: int = 0) -> list:
    """When each rank (index = rank, the root's included) ends its part of the pool broadcast of s bytes, ns.

    hw: `_hw_broadcast_ends`, the fixed point through the pool's queues, up to `HW_CHUNKS`; beyond it
    (uncongested; algebraic): the root writes, reaching its sfence at f = fence + (what the write
    adds), and stores its flag: a read for ownership, X + L + 2 path (the readers hold the line).
    Every reader polls the root's flag from time 0: its load at 0 misses and sees nothing; the next
    load starts at its data, X + L, if the root's store already took the copy (f <= X + L), else
    when the root's BISnp wakes it, f + 2 path; that load recalls the root's line and sees the flag
    at its start + X + L + 2 path. Then the reader loads the slot and publishes done: an sfence and
    its flag's read for ownership.

    flush (exact, on any pool): the ranks' programs walked through the pool's FIFO chain
    (`pool_flush_programs.broadcast_flush_ends`), since a reader's polls queue at the device behind
    the root's chunks.
    """
    if flush_mode(fig):
        return broadcast_flush_ends(fig, p, s, root)
    if hw_broadcast_stepped(fig, p, s):
        return list(_hw_broadcast_ends(fig, p, s, root, zero_copy=False))
    x, load, path = issue_ns(fig, 1), fig.load_ns, fig.path_ns
    f = fig.fence_ns + row_store_shift_ns(fig, s)
    if p == 1:
        return [f + x + load]
    readers = [r for r in range(p) if r != root]
    seen = _hw_seen(fig, f, [_first_poll_delay(fig, p, s, root, k) for k in range(p - 1)])
    tail = reads_ns(fig, 0, [lines_of(0, s)]) + fig.fence_ns + x + load
    ends = [f + x + load + 2 * path] * p
    for r, t in zip(readers, seen):
        ends[r] = t + tail
    return ends


def hw_broadcast_stepped(fig, p: int, s: int) -> bool:
    """Whether the hw broadcast's form is its fixed point (`_hw_broadcast_ends`): on a congested pool, up to
    `HW_CHUNKS`."""
    return p > 1 and not uncongested(fig, p) and p * (-(-s // fig.chunk_bytes) + 2) <= HW_CHUNKS


def _hw_broadcast_ends(fig, p: int, s: int, root: int, zero_copy: bool) -> tuple:
    """hw: each rank's end of the broadcast by `pool_hw_steps.hw_step_ends`: the root streams its slot (zero-copy:
    placed, nothing to stream), fences and stores its flag; every reader polls the root's flag from 0, loads
    the slot and stores its done flag (zero-copy: neither; its caller reads in place, done deferred)."""
    layout = pc.StepLayout(p, s)
    slot = layout.slot(1, root)
    writes = [[(slot, s)] if r == root and not zero_copy else [] for r in range(p)]
    reads = [[(slot, s)] if r != root and not zero_copy else [] for r in range(p)]
    waits = [() if r == root else (root,) for r in range(p)]
    stores = [FIRST if r == root else (None if zero_copy else AFTER) for r in range(p)]
    return hw_step_ends(geometry_from_figures(fig, p), [layout.flag(r, 1) for r in range(p)], writes, reads,
                        waits=waits, stores=stores)


def _first_poll_delay(fig, p: int, s: int, root: int, k: int) -> float:
    """hw: how late the k-th reader's first poll (a load at 0, readers in rank order) returns, ns: it reaches
    the flag's device at `path` behind the root's first chunk (its write is called first) and the k earlier
    readers' polls, so its load waits for chunk/B + (k + 1) 64/B beyond its own issue, X."""
    if not s:
        return 0.0
    layout = pc.StepLayout(p, s)
    slot, chunk_lines = layout.slot(1, root), fig.chunk_bytes // LINE
    first, lines = slot // LINE, lines_of(slot, s)
    if (first // chunk_lines) % fig.devices != (layout.flag(root, 1) // LINE // chunk_lines) % fig.devices:
        return 0.0  # the chunk is on another device
    chunk = min(lines, chunk_lines - first % chunk_lines) * LINE
    return max(0.0, (chunk + (k + 1) * LINE) / fig.one_device_bw_bytes_per_ns - issue_ns(fig, 1))


def _hw_seen(fig, f, delays=(0.0,)):
    """hw: when each reader polling the root's flag from 0 sees it, the root storing it at f and the readers'
    first loads returning `delays` late (ns). A reader loads again at its first load's data if the root's
    store already took its copy, else when the root's BISnp wakes it (f + 2 path); the first of those loads
    recalls the root's line (+ 2 path), and the later ones wait for that recall."""
    x, load, path = issue_ns(fig, 1), fig.load_ns, fig.path_ns
    again = [x + load + d if f <= x + load + d else f + 2 * path for d in delays]
    recalled = min(again) + x + load + 2 * path
    return [max(a + x + load, recalled) for a in again]


def broadcast_zero_copy_cost(fig, p: int, s: int, ctx=None) -> float:
    """The zero-copy pool broadcast, ns: the root publishes the data it placed in its slot; a reader waits for
    the root's flag (and in flush mode drops the slot) and reads the slot in place after the call, its done
    deferred to its next call. hw: its fixed point (`_hw_broadcast_ends`), beyond `HW_CHUNKS` (uncongested)
    the copy broadcast's root at f = fence, and the reader's end where it sees the flag; flush: its walk
    (`pool_flush_programs.broadcast_flush`)."""
    root = ctx.root if ctx is not None else 0
    if flush_mode(fig):
        return broadcast_flush(fig, p, s, root, zero_copy=True)
    if hw_broadcast_stepped(fig, p, s):
        return max(_hw_broadcast_ends(fig, p, s, root, zero_copy=True))
    x, load, path = issue_ns(fig, 1), fig.load_ns, fig.path_ns
    f = fig.fence_ns
    if p == 1:
        return f + x + load
    return max(f + x + load + 2 * path, *_hw_seen(fig, f))
