"""The flush-mode programs of the pool collectives (`pool_collectives`), walked through the pool's FIFO chain.

In flush mode every rank's program is sequential: stream (or write back) its data,
clflushopt it, sfence, store its flag and clflushopt it, poll the flags it waits for one
at a time (clflushopt, mfence, load, until the flag is in the pool by the load's data),
drop the ranges it reads (clflushopt, mfence), load them together (or one after another,
each other rank's dropped just before it: the large allreduce's shares), fold. `PoolWalk` walks
these programs through the pool's FIFO chain in arrival order, so each latency below is
exact on any pool (one switch or a tree, any number of devices), queueing included, for
one call that every rank starts together on a fresh pool. CPU rules (the transport's):
clflushopt costs F per line of CPU (a dirty line's write-back starts with the first
clflushopt); a fence ends at max(now, every acknowledgement so far, last clflushopt +
invalidate_ns) + fence; a streamed write holds the CPU until its issue ends; a fold of n
bytes costs n / R of CPU, a local copy n / (the host's copy bandwidth). Times are ns, sizes bytes.
"""
from __future__ import annotations

from cxlsim.fabric.cxl import CACHE_LINE_BYTES, line_span
from cxlsim.models.collectives import pool_collectives as pc
from cxlsim.models.collectives.pool_forms import geometry_from_figures
from cxlsim.models.collectives.pool_walk import EPS, PoolWalk

__all__ = ["Step", "walk_steps", "broadcast_flush", "broadcast_flush_ends"]

LINE = CACHE_LINE_BYTES


def _lines(offset: int, size: int) -> int:
    return line_span(offset, size)[1]


class _Cpu:
    """One rank's CPU time and the acknowledgements its next fence waits for."""

    def __init__(self, geo):
        self.geo, self.t, self.acks = geo, 0.0, []

    def clflushopt(self, lines: int) -> None:
        self.t += lines * self.geo.flush_ns_per_line
        if lines and self.geo.invalidate_ns > 0:
            self.acks.append(self.t + self.geo.invalidate_ns)

    def fence(self) -> None:
        self.t = max([self.t] + self.acks) + self.geo.fence_ns


class Step:
    """One step of rank r: what it writes, whose flags it waits for, what it drops and reads, what it folds.

    write: (offset, bytes) or None, the range its publish writes back; keep: the (offset, bytes)
    part of it that only this rank reads, which it does not store (its own block or share);
    zero_copy: the written range is already dirty in the cache (written back by its clflushopt)
    instead of streamed; copy_bytes: a local copy after its flag (the alltoall's own block);
    wait: the ranks whose flags of this step it polls, in order; acquire: None (no acquire, as
    the barrier) or the (offset, bytes) ranges it drops; reads: the (offset, bytes) ranges it
    loads together; fold_bytes: its fold; one_by_one: flush mode loads the reads one after another
    instead, in order, each range of `acquire` dropped (clflushopt, mfence) just before its load, as
    the large allreduce's kernel copies the shares out (hw mode loads them together either way).
    """

    __slots__ = ("write", "keep", "zero_copy", "copy_bytes", "wait", "acquire", "reads", "fold_bytes", "one_by_one")

    def __init__(self, write=None, wait=(), acquire=None, reads=(), fold_bytes=0, zero_copy=False, keep=None,
                 copy_bytes=0, one_by_one=False):
        self.write, self.keep, self.zero_copy, self.wait = write, keep, zero_copy, tuple(wait)
        self.copy_bytes, self.one_by_one = copy_bytes, one_by_one
        self.acquire, self.reads, self.fold_bytes = acquire, tuple(reads), fold_bytes

    def stored(self) -> list:
        """The (offset, bytes) ranges the step stores (or writes back, zero-copy): `write` but `keep`."""
        if self.write is None or self.write[1] <= 0:
            return []
        offset, size = self.write
        if self.keep is None:
            return [self.write]
        lo = self.keep[0] - offset
        return [(offset + a, n) for a, n in pc.row_pieces(lo, lo + self.keep[1], size) if n]


def _program(geo, r, steps, layout, visible):
    """Rank r's steps (epochs 1, 2, ...) as a `PoolWalk` program; returns its end."""
    cpu, data = _Cpu(geo), geo.media_ns + geo.path_ns
    for e, step in enumerate(steps, start=1):
        pieces = step.stored()
        if pieces:  # issued one after the other at the host port
            got = yield [(offset, size, True, cpu.t) for offset, size in pieces]
            for k, (_, end) in enumerate(got):
                cpu.acks.append(max(end + geo.path_ns, (got[k - 1][0] if k else cpu.t) + geo.writeback_ns))
            if not step.zero_copy:
                cpu.t = max(issued for issued, _ in got)
        if step.write is not None and step.write[1] > 0:
            cpu.clflushopt(_lines(*step.write))
        cpu.fence()
        flag = layout.flag(r, e)
        _, end = yield (flag, LINE, False, cpu.t)             # the flag store's read into the cache
        cpu.t = end + data
        _, end = yield (flag, LINE, True, cpu.t, lambda end, key=(r, e): visible.setdefault(key, end))
        cpu.acks.append(max(end + geo.path_ns, cpu.t + geo.writeback_ns))
        cpu.clflushopt(1)
        cpu.t += step.copy_bytes / geo.copy_bw
        for w in step.wait:
            yield from _poll(cpu, layout.flag(w, e), visible, (w, e), data)
        if step.one_by_one:
            dropped = set(step.acquire or ())
            for offset, size in step.reads:
                if (offset, size) in dropped:
                    cpu.clflushopt(_lines(offset, size))
                    cpu.fence()
                if size > 0:
                    ((_, end),) = yield [(offset, size, False, cpu.t)]
                    cpu.t = end + data
        else:
            if step.acquire is not None:
                for offset, size in step.acquire:
                    cpu.clflushopt(_lines(offset, size))
                cpu.fence()
            reads = [(offset, size, False, cpu.t) for offset, size in step.reads if size > 0]
            if reads:
                got = yield reads
                cpu.t = max(end for _, end in got) + data
        cpu.t += step.fold_bytes / geo.reduce_bw
    return cpu.t


def _poll(cpu, flag, visible, key, data):
    """clflushopt, mfence, load the flag line until the flag (its write-back, `visible[key]`) is in the pool
    by the load's data."""
    while True:
        cpu.clflushopt(1)
        cpu.fence()
        _, end = yield (flag, LINE, False, cpu.t)
        cpu.t = yield end + data
        if visible.get(key, float("inf")) <= cpu.t + EPS:
            return


def walk_steps(fig, p: int, slot_bytes: int, steps_of) -> float:
    """Latency (ns) of P ranks' flush-mode steps on a pool with figures `fig` and slots of `slot_bytes`:
    `steps_of(r, layout)` gives rank r's `Step`s (`layout` a `pool_collectives.StepLayout`)."""
    geo = _Geometry(fig, p)
    layout = pc.StepLayout(p, slot_bytes)
    visible = {}
    programs = {r: _program(geo, r, steps_of(r, layout), layout, visible) for r in range(p)}
    return max(PoolWalk(geo).run(programs).values())


class _Geometry:
    """`pool_forms.PoolGeometry` of the figures, with the local reduction and copy bandwidths (bytes/ns)."""

    def __init__(self, fig, p):
        self._geo = geometry_from_figures(fig, p)
        self.reduce_bw, self.copy_bw = fig.reduce_bw_bytes_per_ns, fig.copy_bw_bytes_per_ns

    def __getattr__(self, name):
        return getattr(self._geo, name)


def broadcast_flush(fig, p: int, s: int, root: int, zero_copy: bool = False) -> float:
    """The flush-mode broadcast of s bytes from `root`, ns (the latest of `broadcast_flush_ends`)."""
    return max(broadcast_flush_ends(fig, p, s, root, zero_copy))


def broadcast_flush_ends(fig, p: int, s: int, root: int, zero_copy: bool = False) -> list:
    """When each rank (index = rank) ends its part of the flush-mode broadcast of s bytes from `root`, ns.

    Root: stream the slot (zero-copy: its clflushopt writes the placed data back), clflushopt
    it, sfence, store the flag, clflushopt it. Reader: poll the root's flag; clflushopt the
    slot, mfence; copy: load it and publish done (sfence, store, clflushopt); zero-copy: the
    caller reads the slot in place, and done waits for the reader's next call.
    """
    geo = _Geometry(fig, p)
    layout = pc.StepLayout(p, s)
    slot = layout.slot(1, root)
    visible = {}
    data = geo.media_ns + geo.path_ns

    def reader(r):
        cpu = _Cpu(geo)
        yield from _poll(cpu, layout.flag(root, 1), visible, (root, 1), data)
        cpu.clflushopt(_lines(slot, s))
        cpu.fence()
        if zero_copy:
            return cpu.t
        if s:
            _, end = yield (slot, s, False, cpu.t)
            cpu.t = end + data
        cpu.fence()
        flag = layout.flag(r, 1)
        _, end = yield (flag, LINE, False, cpu.t)
        cpu.t = end + data
        yield (flag, LINE, True, cpu.t)
        cpu.clflushopt(1)
        return cpu.t

    def root_program():
        return (yield from _root(geo, layout, root, slot, s, zero_copy, visible))

    programs = {r: reader(r) for r in range(p) if r != root}
    programs[root] = root_program()
    ends = PoolWalk(geo).run(dict(sorted(programs.items())))
    return [ends[r] for r in range(p)]


def _root(geo, layout, root, slot, s, zero_copy, visible):
    """The broadcast root: write (or write back) the slot, publish written(1); its CPU's end."""
    cpu, data = _Cpu(geo), geo.media_ns + geo.path_ns
    if s:
        issued, end = yield (slot, s, True, 0.0)
        cpu.acks.append(max(end + geo.path_ns, geo.writeback_ns))
        cpu.t = 0.0 if zero_copy else issued
        cpu.clflushopt(_lines(slot, s))
    cpu.fence()
    flag = layout.flag(root, 1)
    _, end = yield (flag, LINE, False, cpu.t)
    cpu.t = end + data
    yield (flag, LINE, True, cpu.t, lambda end: visible.setdefault((root, 1), end))
    cpu.clflushopt(1)
    return cpu.t

