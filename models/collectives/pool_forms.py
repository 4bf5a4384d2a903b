"""Closed forms of the pool allgather (`cxl_pool`, `cxl_pool_zero_copy`) on one switch or a switch tree.

One call that every rank starts at the same time on a fresh pool, by the
pool transport's own rules (`cxlsim.fabric.cxl_transport`); all times ns.

The data path is a chain of FIFO servers: a chunk (at most `chunk_bytes` of
pool address) is served by its host's issue server (bandwidth b), then, in a
two-level tree, by its leaf's uplink (one per direction, the port bandwidth),
then by its device (B per device). It reaches the next server one reach after
its service *starts* there, and it has passed a server at

    end = max(service end, previous end + reach)

A FIFO served in arrival order is Lindley's recurrence, start_k =
max(arrival_k, end_{k-1}); with the arrivals sorted, in closed form

    end_k = S_k + max_{j <= k} (arrival_j - S_{j-1}),   S_k = the service times up to k.

A read's data is back at its last chunk's end + media + path; a streamed
write (or write-back) is acknowledged at max(end + path, its start +
writeback_ns). Each rank's protocol (`cxlsim.models.collectives.cxl_pool`)
makes its accesses at times that follow from the ends of its earlier ones
(max-plus), so the call is the fixed point of "arrivals from ends, ends from
arrivals", reached by passes from the unloaded times; it stops when no time
moves by 1e-6 ns (RunError if it has not after 200 passes). Equal times go
in the DES's event order: by when each arrival was scheduled (its arrival at
the previous server, or its call), then by the order of the events that
caused the call (a rank's flag store follows its block's acknowledgement, its
polls its flag store's return). The result equals the DES to rounding (at
most 6e-12 relative over 1 to 128 hosts, one switch and trees, 1-4 devices,
chunks of 64 B-6.4 KiB and the host-path knobs; tests/test_pool_closed_form.py).

With one switch and P*b <= B no chunk ever queues and the fixed point is the
algebraic form (X = 64/b, W = 64*ceil(m/64), D = W/b, L = 2*path + media), e.g.

    hw: (2*path + D) + fence + (X + L) + ((P-1)*X + L + 2*path) + (L + P*D)

At scale the flags' traffic is what that form misses: P*(P-1) polls and P
flag stores queue at the device with the blocks, each rank's polls start
when its own flag store returns (spread by the device's queue), and in hw
mode every rank waits for the first poller's recalls.

hw mode, per rank r (the transport's rules and its snoop filter's):
- copy: stream the slot (up); f_r = max(issue end, ack) + fence.
  Zero-copy: f_r = fence.
- the flag store at f_r is a one-line read for ownership (down); it holds the
  line Modified from f_r and completes at T_r = its data (+2*path if another
  rank read the flag before f_r: the device collects their BISnp responses).
- at T_r: one read per other flag, called together (issued in flag order).
  A read called at or after f_w recalls flag w if it is the first such call
  (done at max(data + 2*path, T_w)); later calls until that recall is done
  wait for it; calls after it are plain. A read called before f_w is plain:
  it sees the flag if T_w <= its data; else it reads again at its data (if
  the BISnp from f_w already took its copy) or at f_w + 2*path (woken by it).
- copy: at its last flag, read the P slots (down); done at the last data.

flush mode, per rank r (no snoop filter; clflushopt F per line, on the CPU):
- copy: stream the slot, then clflushopt it (no dirty lines); zero-copy: its
  clflushopt write the dirty block back (up) from 0. A fence ends at
  max(now, every earlier acknowledgement, last clflushopt + invalidate_ns) + fence.
- the flag store: a one-line read into the cache (down), then its clflushopt
  writes it back (up); the flag is in the pool at that write-back's end.
- the polls, one flag at a time: clflushopt, fence, load (down); the load
  sees the flag if it was in the pool by the load's data, else it repeats.
- clflushopt the others' slots, fence; copy: read the P slots (down).
These programs are sequential, so each pass walks them with every access's
queueing delay from the previous pass.

Cost: a few passes over P*(P-1) polls and P*P slot reads (in chunks); at 128
hosts about 0.1 s (hw) and 2 s (flush, a Python walk) per size.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError, RunError
from cxlsim.fabric.cxl import CACHE_LINE_BYTES
from cxlsim.models.collectives import pool_hw_steps
from cxlsim.models.collectives.pool_chain import EPS, MAX_PASSES, Accesses, close

__all__ = ["PoolGeometry", "clear_memo", "geometry_of", "geometry_from_figures", "pool_closed_form", "pool_rank_ends"]

LINE = CACHE_LINE_BYTES


@dataclass(frozen=True)
class PoolGeometry:
    """What a pool's FIFO chain is made of (ns, bytes, bytes/ns), by the transport's construction rules."""

    hosts: int
    path_ns: float
    """Core to device, one way."""
    to_leaf_uplink_ns: float
    """Core to the leaf's uplink (two-level trees; 0 with one switch)."""
    media_ns: float
    host_bw: float
    device_bw: float
    """One device."""
    devices: int
    uplink_bw: float
    chunk_bytes: int
    leaf_of: tuple
    """Leaf switch of each host (two-level trees), else ()."""
    fence_ns: float
    writeback_ns: float
    invalidate_ns: float
    flush_ns_per_line: float

    @classmethod
    def build(cls, preset, hosts: int, *, devices: int = 1, chunk_bytes: int = 4096,
              switch_levels: int = 1) -> "PoolGeometry":
        """The geometry of `CXLPoolTransport(preset, hosts, devices=..., chunk_bytes=..., switch_levels=...)`."""
        hp, sw = preset.host_path, preset.switch
        link = preset.link.traversal_ns
        path = hp.port_latency_ns + link + switch_levels * (sw.hop_latency_ns + link)
        load = 2 * path + preset.device.media_latency_ns
        leaf_of, to_leaf = (), 0.0
        if switch_levels == 2:
            leaves = sw.tree_leaves(hosts, devices * preset.device.heads)
            leaf_of = tuple(h * leaves // hosts for h in range(hosts))
            to_leaf = hp.port_latency_ns + link + sw.hop_latency_ns
        return cls(hosts=hosts, path_ns=path, to_leaf_uplink_ns=to_leaf, media_ns=preset.device.media_latency_ns,
                   host_bw=min(sw.port_bw_bytes_per_ns, hp.outstanding_lines * LINE / load),
                   device_bw=preset.device.bw_bytes_per_ns(sw.port_bw_bytes_per_ns), devices=devices,
                   uplink_bw=sw.port_bw_bytes_per_ns, chunk_bytes=chunk_bytes, leaf_of=leaf_of,
                   fence_ns=hp.fence_ns, writeback_ns=hp.writeback_ns, invalidate_ns=hp.invalidate_ns,
                   flush_ns_per_line=hp.flush_ns_per_line)


def geometry_from_figures(fig, hosts: int) -> PoolGeometry:
    """The geometry of a pool of `hosts` hosts from its `PoolFigures` (what a record's cost receives)."""
    return PoolGeometry(hosts=hosts, path_ns=fig.path_ns, to_leaf_uplink_ns=fig.to_leaf_uplink_ns,
                        media_ns=fig.media_ns, host_bw=fig.host_bw_bytes_per_ns,
                        device_bw=fig.one_device_bw_bytes_per_ns, devices=fig.devices,
                        uplink_bw=fig.uplink_bw_bytes_per_ns, chunk_bytes=fig.chunk_bytes, leaf_of=fig.leaf_of,
                        fence_ns=fig.fence_ns, writeback_ns=fig.writeback_ns, invalidate_ns=fig.invalidate_ns,
                        flush_ns_per_line=fig.flush_ns_per_line)


def geometry_of(pool) -> PoolGeometry:
    """The geometry of a built pool transport (`CXLPoolTransport`): its preset, hosts, devices, chunk, tree."""
    path = pool.path
    return PoolGeometry.build(pool.preset, pool.size, devices=len(path.devices), chunk_bytes=path.chunk_lines * LINE,
                              switch_levels=2 if path.leaves else 1)


def pool_closed_form(geo: PoolGeometry, m: int, coherence, zero_copy: bool = False, starts=None,
                     poll_delay: float = 0.0, own_read: bool = True) -> float:
    """Latency (ns) of one `cxl_pool` (or `cxl_pool_zero_copy`) allgather of m-byte blocks on `geo`'s pool,
    every rank starting together on a fresh pool, or rank r at `starts[r]` ns (the latest end, from 0).

    `poll_delay`: CPU time (ns) each rank spends between its flag store and its first poll (a local copy the
    protocol makes there, as the pool alltoall's own block). `own_read`: whether each rank loads its own
    slot with the others' (the allgather's programs do; the small pool allreduce, which folds its own block
    from its input, loads only the P - 1 others')."""
    return max(pool_rank_ends(geo, m, coherence, zero_copy, starts, poll_delay, own_read))


def pool_rank_ends(geo: PoolGeometry, m: int, coherence, zero_copy: bool = False, starts=None,
                   poll_delay: float = 0.0, own_read: bool = True) -> tuple:
    """When each rank (index = rank) ends its part of the allgather of `pool_closed_form`, ns."""
    mode = Coherence.parse(coherence, "coherence")
    if not isinstance(m, int) or m < 0:
        raise InputError(f"size: expected an integer >= 0 bytes, got {m!r}")
    if mode is Coherence.HW:  # its form depends on m only through the line count: one fixed point per count
        starts = (0.0,) * geo.hosts if starts is None else tuple(float(t) for t in starts)
        return _hw(geo, -(-m // LINE), bool(zero_copy), starts, float(poll_delay), bool(own_read))
    starts = np.zeros(geo.hosts) if starts is None else np.asarray(starts, float)
    return _flush(geo, m, zero_copy, starts, float(poll_delay), bool(own_read))


def clear_memo() -> None:
    """Forget the memoised hw-mode forms (a benchmark timing cold runs calls it between them)."""
    _hw.cache_clear()
    pool_hw_steps.clear_memo()


# ---------------------------------------------------------------------- hw mode

@functools.lru_cache(maxsize=4096)
def _hw(geo: PoolGeometry, lines: int, zero_copy: bool, starts: tuple, delay: float = 0.0,
        own_read: bool = True) -> tuple:
    """The hw-mode form of an allgather of `lines` lines per block, each rank polling `delay` ns after its flag
    store returns, loading its own slot too if `own_read` (memoised: geometries are frozen)."""
    p = geo.hosts
    w_bytes = lines * LINE
    stride = max(LINE, w_bytes)
    slots = [p * LINE + (p + r) * stride for r in range(p)]  # data round 1: the second buffer
    copy = lines > 0 and not zero_copy
    writes = tuple(((slots[r], w_bytes),) if copy else () for r in range(p))
    reads = tuple(tuple((slot, w_bytes) for w, slot in enumerate(slots) if own_read or w != r) if copy else ()
                  for r in range(p))
    return pool_hw_steps.hw_step_ends(geo, [r * LINE for r in range(p)], writes, reads, starts, delay)


# ---------------------------------------------------------------------- flush mode

def _flush(geo: PoolGeometry, m: int, zero_copy: bool, starts, delay: float = 0.0, own_read: bool = True) -> tuple:
    """flush mode: each pass walks the ranks' programs with every access's queueing delay from the
    last pass (0 at first), until no delay and no poll's number of loads changes."""
    ranks = _FlushPrograms(geo, m, zero_copy, starts, delay, own_read)
    for _ in range(MAX_PASSES):
        booked, ends, polls = ranks.walk()
        acc = Accesses(geo)
        keys = [b[0] for b in booked]
        host, ready, offset, size, up, tie = (np.array(col) for col in list(zip(*booked))[1:])
        ids = np.empty(len(booked), int)
        for n in np.unique(size):
            for u in (False, True):
                sel = np.flatnonzero((size == n) & (up == u))
                if len(sel):
                    ids[sel] = acc.add(host[sel], ready[sel], offset[sel], int(n), bool(u), tie[sel])
        issue, last, order = acc.ends()
        issue0 = ready + size / geo.host_bw
        delay = dict(zip(keys, zip((issue[ids] - issue0).tolist(), (last[ids] - issue0 - geo.path_ns).tolist())))
        order = dict(zip(keys, order[ids].tolist()))
        if polls == ranks.polls and delay.keys() == ranks.delay.keys() and \
                close(np.array(list(delay.values())), np.array([ranks.delay[k] for k in delay])):
            return tuple(ends.tolist())
        ranks.delay, ranks.polls, ranks.order = delay, polls, order
    raise RunError(f"pool closed form: the flush-mode fixed point for P={geo.hosts}, m={m} did not settle "
                   f"in {MAX_PASSES} passes")


class _FlushPrograms:
    """The ranks' flush-mode programs, walked with given queueing delays per access.

    Times go with their cause (the access whose end they follow, or None for the CPU's own):
    ranks calling at the same time call in the order their causes reached the devices.
    """

    def __init__(self, geo: PoolGeometry, m: int, zero_copy: bool, starts, delay: float = 0.0,
                 own_read: bool = True):
        self.geo, self.delay_ns, self.own_read = geo, delay, own_read
        self.starts = [float(x) for x in starts]
        self.lines = -(-m // LINE)
        self.w_bytes = self.lines * LINE
        self.slots = geo.hosts * LINE + (geo.hosts + np.arange(geo.hosts)) * max(LINE, self.w_bytes)
        self.copy = self.lines > 0 and not zero_copy
        self.delay = {}     # access key -> (issue delay, end delay) of the last pass
        self.order = {}     # access key -> its place in the devices' order of the last pass
        self.polls = None   # loads per poll of the last pass
        self.booked = []

    def access(self, key, host, ready, cause, offset, size, up):
        """Book one access called at `ready` (after `cause`); returns (issue end, device end)."""
        n = -(-size // LINE) * LINE
        self.booked.append((key, host, ready, offset, n, up, self.order.get(cause, -1)))
        di, de = self.delay.get(key, (0.0, 0.0))
        issue = ready + n / self.geo.host_bw
        return issue + di, issue + self.geo.path_ns + de

    def walk(self):
        """(booked accesses, each rank's end, loads per poll) of one pass."""
        p = self.geo.hosts
        self.booked = []
        flags = [self._publish(r) for r in range(p)]
        visible = [v for v, _, _ in flags]
        ends, polls = np.zeros(p), []
        for r in range(p):
            acks, (t, cause) = flags[r][1:]
            ends[r] = self._gather(r, visible, acks, (t + self.delay_ns, cause), polls)
        return self.booked, ends, polls

    def _fence(self, now, acks):
        """(end, cause) of a fence called at `now` = (time, cause): it waits for every (time, cause) in `acks`."""
        t, cause = max([now] + acks, key=lambda a: (a[0], a[1] is not None))
        return t + self.geo.fence_ns, cause

    def _clflushopt(self, now, lines, acks):
        """clflushopt of `lines` lines from `now` (CPU); a fence also waits for invalidate_ns after it."""
        t = now[0] + lines * self.geo.flush_ns_per_line
        if lines and self.geo.invalidate_ns > 0:
            acks.append((t + self.geo.invalidate_ns, None))
        return t, now[1]

    def _publish(self, r):
        """Block, fence, flag store and its clflushopt: (flag in the pool, its acknowledgement, CPU time)."""
        geo, path = self.geo, self.geo.path_ns
        t0 = self.starts[r]
        acks, t = [(t0, None)], (t0, None)
        if self.lines:  # streamed (copy), or written back by the slot's clflushopt from 0 (zero-copy)
            issued, end = self.access(("w", r), r, t0, None, int(self.slots[r]), self.w_bytes, True)
            acks.append((max(end + path, t0 + geo.writeback_ns), ("w", r)))
            t = (issued if self.copy else t0, None)
        t = self._fence(self._clflushopt(t, self.lines, acks), acks)
        _, end = self.access(("s", r), r, *t, r * LINE, LINE, False)   # the store's read into the cache
        stored = (end + geo.media_ns + path, ("s", r))
        _, end = self.access(("b", r), r, *stored, r * LINE, LINE, True)  # the flag's write-back
        acks = [(max(end + path, stored[0] + geo.writeback_ns), ("b", r))]
        return end, acks, self._clflushopt(stored, 1, acks)

    def _gather(self, r, visible, acks, t, polls):
        """Poll the other flags one at a time, drop the others' slots, fence, read: the rank's end."""
        geo, p = self.geo, self.geo.hosts
        loads = 0
        for w in range(p):
            if w == r:
                continue
            tries = 0
            while True:  # clflushopt, mfence, load until the flag is in the pool by the load's data
                t = self._fence(self._clflushopt(t, 1, acks), acks)
                key = ("p", r, loads)
                _, end = self.access(key, r, *t, w * LINE, LINE, False)
                loads += 1
                tries += 1
                t = (end + geo.media_ns + geo.path_ns, key)
                if visible[w] <= t[0] + EPS:
                    break
                if tries > 10000:
                    raise RunError(f"pool closed form: rank {r} never sees flag {w} (P={p})")
            polls.append(tries)
        for _w in range(p - 1):
            t = self._clflushopt(t, self.lines, acks)
        t = self._fence(t, acks)
        loaded = [w for w in range(p) if self.own_read or w != r]
        if not self.copy or not loaded:
            return t[0]
        return max(self.access(("r", r, w), r, *t, int(self.slots[w]), self.w_bytes, False)[1]
                   for w in loaded) + geo.media_ns + geo.path_ns
