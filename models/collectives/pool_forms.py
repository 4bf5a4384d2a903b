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

__all__ = ["PoolGeometry", "clear_memo", "geometry_of", "geometry_from_figures", "pool_closed_form", "pool_rank_ends",
           "hw_step_ends", "FIRST", "AFTER"]

LINE = CACHE_LINE_BYTES
_MAX_PASSES = 200
_EPS = 1e-6
"""Times closer than this (ns) are equal: the DES's sums and these round differently."""


def _close(a, b) -> bool:
    return bool(np.allclose(a, b, rtol=0, atol=_EPS))


def _key(times):
    """Times as sort keys, equal where they are equal in the DES (to `_EPS`)."""
    return np.round(np.asarray(times) / _EPS)


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
                     poll_delay: float = 0.0) -> float:
    """Latency (ns) of one `cxl_pool` (or `cxl_pool_zero_copy`) allgather of m-byte blocks on `geo`'s pool,
    every rank starting together on a fresh pool, or rank r at `starts[r]` ns (the latest end, from 0).

    `poll_delay`: CPU time (ns) each rank spends between its flag store and its first poll (a local copy the
    protocol makes there, as the pool alltoall's own block)."""
    return max(pool_rank_ends(geo, m, coherence, zero_copy, starts, poll_delay))


def pool_rank_ends(geo: PoolGeometry, m: int, coherence, zero_copy: bool = False, starts=None,
                   poll_delay: float = 0.0) -> tuple:
    """When each rank (index = rank) ends its part of the allgather of `pool_closed_form`, ns."""
    mode = Coherence.parse(coherence, "coherence")
    if not isinstance(m, int) or m < 0:
        raise InputError(f"size: expected an integer >= 0 bytes, got {m!r}")
    if mode is Coherence.HW:  # its form depends on m only through the line count: one fixed point per count
        starts = (0.0,) * geo.hosts if starts is None else tuple(float(t) for t in starts)
        return _hw(geo, -(-m // LINE), bool(zero_copy), starts, float(poll_delay))
    starts = np.zeros(geo.hosts) if starts is None else np.asarray(starts, float)
    return _flush(geo, m, zero_copy, starts, float(poll_delay))


def clear_memo() -> None:
    """Forget the memoised hw-mode forms (a benchmark timing cold runs calls it between them)."""
    _hw.cache_clear()
    _hw_program.cache_clear()


# ---------------------------------------------------------------------- the FIFO chain

class _Accesses:
    """The accesses of one pass, cut into chunks: host, ready time, bytes, direction, device, access id."""

    def __init__(self, geo: PoolGeometry):
        self.geo = geo
        self.cols = []
        self.count = 0

    def add(self, hosts, ready, offsets, size: int, up: bool, tie=0) -> np.ndarray:
        """Accesses of `size` bytes (> 0) at pool `offsets`, by `hosts`, called at `ready`; returns their ids.

        Accesses called at the same time are called in the order of `tie`, then of their adding.
        """
        hosts, ready, offsets, tie = np.broadcast_arrays(np.atleast_1d(hosts), np.atleast_1d(np.asarray(ready, float)),
                                                         np.atleast_1d(offsets), np.atleast_1d(tie))
        c = self.geo.chunk_bytes // LINE
        first = offsets // LINE
        stop = (offsets + size - 1) // LINE + 1
        pieces = (stop - 1) // c - first // c + 1
        ids = self.count + np.arange(len(hosts))
        self.count += len(hosts)
        each = np.repeat(np.arange(len(hosts)), pieces)
        chunk = first[each] // c + (np.arange(len(each)) - np.repeat(np.cumsum(pieces) - pieces, pieces))
        lo = np.maximum(first[each], chunk * c)
        hi = np.minimum(stop[each], (chunk + 1) * c)
        self.cols.append((hosts[each], ready[each], (hi - lo) * LINE, np.full(len(each), up),
                          chunk % self.geo.devices, ids[each], tie[each]))
        return ids

    def ends(self):
        """(issue end, end at the device, order of arrival at the devices) of every access, by access id."""
        geo = self.geo
        host, ready, nbytes, up, device, ident, tie = (np.concatenate(col) for col in zip(*self.cols))
        seq = np.empty(len(host), int)
        seq[np.lexsort((np.arange(len(host)), tie))] = np.arange(len(host))
        # equal arrivals go in the DES's event order: by when the arrival was scheduled (the arrival
        # at the previous server, or the call), then by the order of those events
        start, end = _fifo(host, ready, [seq], nbytes / geo.host_bw)
        issue = np.full(self.count, -np.inf)
        np.maximum.at(issue, ident, end)
        if geo.leaf_of:
            leaf = np.asarray(geo.leaf_of)[host] * 2 + up
            arrive, tail = start + geo.to_leaf_uplink_ns, end + geo.to_leaf_uplink_ns
            s2, served = _fifo(leaf, arrive, [ready, seq], nbytes / geo.uplink_bw)
            rest = geo.path_ns - geo.to_leaf_uplink_ns
            ties = [arrive, ready, seq]
            arrive, tail = s2 + rest, np.maximum(served, tail) + rest
        else:
            ties = [ready, seq]
            arrive, tail = start + geo.path_ns, end + geo.path_ns
        _, served = _fifo(device, arrive, ties, nbytes / geo.device_bw)
        last = np.full(self.count, -np.inf)
        np.maximum.at(last, ident, np.maximum(served, tail))
        rank = np.empty(len(host), int)
        rank[_order(arrive, ties)] = np.arange(len(host))
        order = np.full(self.count, -1)
        np.maximum.at(order, ident, rank)  # an access ends (and its successors are called) at its last chunk
        return issue, last, order


def _order(arrival, ties, server=None):
    """Indices in order of (server,) arrival, then `ties` (most significant first); times to `_EPS`."""
    keys = [k if k.dtype.kind in "iu" else _key(k) for k in reversed(ties)] + [_key(arrival)]
    return np.lexsort(keys + ([server] if server is not None else []))


def _fifo(server, arrival, ties, service):
    """(start, end) of every item at FIFO servers (`server` ids), served in order of arrival, then `ties`."""
    order = _order(arrival, ties, server)
    srv, arr, svc = server[order], arrival[order], service[order]
    end_sorted = np.empty_like(arr)
    bounds = np.flatnonzero(np.diff(srv)) + 1
    for lo, hi in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [len(srv)]))):
        total = np.cumsum(svc[lo:hi])  # per server, so that servers with equal loads get equal times
        end_sorted[lo:hi] = total + np.maximum.accumulate(arr[lo:hi] - (total - svc[lo:hi]))
    start_sorted = end_sorted - svc
    start, end = np.empty_like(start_sorted), np.empty_like(end_sorted)
    start[order], end[order] = start_sorted, end_sorted
    return start, end


# ---------------------------------------------------------------------- hw mode

@functools.lru_cache(maxsize=4096)
def _hw(geo: PoolGeometry, lines: int, zero_copy: bool, starts: tuple, delay: float = 0.0) -> tuple:
    """The hw-mode form of an allgather of `lines` lines per block, each rank polling `delay` ns after its flag
    store returns (memoised: geometries are frozen)."""
    p = geo.hosts
    w_bytes = lines * LINE
    stride = max(LINE, w_bytes)
    slots = [p * LINE + (p + r) * stride for r in range(p)]  # data round 1: the second buffer
    copy = lines > 0 and not zero_copy
    writes = tuple(((slots[r], w_bytes),) if copy else () for r in range(p))
    reads = tuple(tuple((slot, w_bytes) for slot in slots) if copy else () for _ in range(p))
    return _hw_program(geo, tuple(r * LINE for r in range(p)), writes, reads, starts, delay)


FIRST, AFTER = "first", "after"
"""When a rank of `hw_step_ends` stores its flag: before its polls (FIRST), or after its loads (AFTER, a
broadcast reader's acknowledgement); None: it stores none."""


def hw_step_ends(geo: PoolGeometry, flags, writes, reads, starts=None, poll_delay: float = 0.0, waits=None,
                 stores=None) -> tuple:
    """hw mode: when each rank (index = rank) ends one step of a pool protocol, ns, by the allgather's fixed
    point (module docstring) with other accesses: rank r streams the (offset, bytes) pieces `writes[r]` one
    after the other from `starts[r]` (default 0), fences, stores its flag (the line at pool offset
    `flags[r]`), polls the flags of `waits[r]` (default every other rank) `poll_delay` ns after its store
    returns, then loads the (offset, bytes) ranges `reads[r]` together; it ends when the last load's data is
    back (at its wait's end if it loads nothing). `stores[r]` (default FIRST): AFTER, the rank polls from its
    start and, once its loads are back, fences and stores its flag, which ends it; None, it stores no flag.
    Exact on any pool as the allgather's form is, up to the order of equal times."""
    p = geo.hosts
    starts = (0.0,) * p if starts is None else tuple(float(t) for t in starts)
    clean = lambda ranges: tuple((int(o), int(n)) for o, n in ranges if n > 0)  # noqa: E731
    waits = tuple(tuple(w for w in range(p) if w != r) for r in range(p)) if waits is None else \
        tuple(tuple(int(w) for w in ws) for ws in waits)
    stores = (FIRST,) * p if stores is None else tuple(stores)
    return _hw_program(geo, tuple(int(f) for f in flags), tuple(clean(w) for w in writes),
                       tuple(clean(r) for r in reads), starts, float(poll_delay), waits, stores)


def _grouped(items):
    """(indices, size) of `items` (each (.., size)) with one size each, sizes in order of first appearance."""
    sizes = {}
    for i, item in enumerate(items):
        sizes.setdefault(item[-1], []).append(i)
    return [(np.array(idx, int), size) for size, idx in sizes.items()]


@functools.lru_cache(maxsize=4096)
def _hw_program(geo: PoolGeometry, flags: tuple, writes: tuple, reads: tuple, starts: tuple, delay: float,
                waits: tuple = None, stores: tuple = None) -> tuple:
    """`hw_step_ends` on hashable arguments (memoised)."""
    p, path = geo.hosts, geo.path_ns
    if waits is None:
        waits = tuple(tuple(w for w in range(p) if w != r) for r in range(p))
    if stores is None:
        stores = (FIRST,) * p
    starts = np.asarray(starts, float)
    flag_at = np.asarray(flags, int)
    ranks = np.arange(p)
    first = np.array([r for r in range(p) if stores[r] == FIRST], int)
    after = np.array([r for r in range(p) if stores[r] == AFTER], int)
    polls_from_start = np.array([stores[r] != FIRST for r in range(p)])
    # streamed pieces, in the order each rank issues them: (rank, k-th piece, offset, bytes)
    pieces = [(r, k, o, n) for k in range(max(map(len, writes), default=0)) for r in range(p)
              if k < len(writes[r]) for o, n in writes[r][k:k + 1]]
    last_piece = {r: i for i, (r, *_rest) in enumerate(pieces)}   # the piece each rank's fence waits for last
    where = {(r, k): i for i, (r, k, *_rest) in enumerate(pieces)}
    prev = {i: where[r, k - 1] for i, (r, k, *_rest) in enumerate(pieces) if k}
    writers = np.array(sorted(last_piece), int)
    loads = [(r, o, n) for r in range(p) for o, n in reads[r]]
    # polls: rank r reads the flags it waits for, in flag order
    poll_r = np.array([r for r in range(p) for _ in waits[r]], dtype=int)
    poll_w = np.array([w for r in range(p) for w in waits[r]], dtype=int)
    f = starts + geo.fence_ns
    flag_done = starts.copy()
    sync = starts.copy()
    loaded = starts.copy()                                 # when each rank's loads are back
    again = np.full(len(poll_r), np.nan)                  # second read's call time, where there is one
    turn = ranks.copy()                                    # each flag store's place in the device's order
    acked = ranks.copy()                                   # each rank's last write's place in the device's order
    data = geo.media_ns + path
    for _ in range(_MAX_PASSES):
        acc = _Accesses(geo)
        wid = np.empty(len(pieces), int)
        for idx, n in _grouped(pieces):  # issued from the rank's start, one after the other at its port
            host = np.array([pieces[i][0] for i in idx], int)
            wid[idx] = acc.add(host, starts[host], np.array([pieces[i][2] for i in idx], int), n, up=True,
                               tie=np.array([pieces[i][1] for i in idx], int))
        # ranks whose fences end together store their flags in the order their acknowledgements came
        sid = acc.add(first, f[first], flag_at[first], LINE, up=False, tie=acked[first]) if len(first) else None
        poll_from = np.where(polls_from_start, starts, flag_done) + delay
        # the ranks whose flag stores return together start polling in their stores' device order
        pid = (acc.add(poll_r, poll_from[poll_r], flag_at[poll_w], LINE, up=False, tie=turn[poll_r])
               if len(poll_r) else None)
        redo = np.flatnonzero(~np.isnan(again))
        rid = (acc.add(poll_r[redo], again[redo], flag_at[poll_w[redo]], LINE, up=False, tie=turn[poll_r[redo]])
               if len(redo) else None)
        did = np.empty(len(loads), int)
        for idx, n in _grouped(loads):
            reader = np.array([loads[i][0] for i in idx], int)
            did[idx] = acc.add(reader, sync[reader], np.array([loads[i][1] for i in idx], int), n, up=False,
                               tie=turn[reader])
        aid = (acc.add(after, loaded[after] + geo.fence_ns, flag_at[after], LINE, up=False, tie=turn[after])
               if len(after) else None)
        issue, last, order = acc.ends()
        new_turn = turn.copy()
        if sid is not None:
            new_turn[first] = order[sid]
        new_acked, new_f = acked.copy(), f.copy()
        if pieces:
            # a piece starts at its rank's start, or when the rank's piece before it is issued
            begun = np.array([issue[wid[prev[i]]] if i in prev else starts[r] for i, (r, *_rest) in enumerate(pieces)])
            acks = np.maximum(issue[wid], np.maximum(last[wid] + path, begun + geo.writeback_ns))
            done_at = np.full(p, -np.inf)
            np.maximum.at(done_at, np.array([r for r, *_ in pieces], int), acks)
            new_f[writers] = done_at[writers] + geo.fence_ns
            new_acked[writers] = order[wid[[last_piece[r] for r in writers]]]
        new_flag_done = flag_done.copy()
        snooped = np.zeros(p, bool)
        stored = np.full(p, np.nan)
        if sid is not None:
            stored[first] = last[sid] + data               # the flag store's data (its ownership)
        new_sync, new_again = poll_from.copy(), np.full(len(poll_r), np.nan)
        if len(poll_r):
            first_data = last[pid] + data
            second_data = np.full(len(poll_r), np.nan)
            if rid is not None:
                second_data[redo] = last[rid] + data
            call = poll_from[poll_r]
            early = call < f[poll_w] - _EPS
            snooped[np.unique(poll_w[early])] = True
            new_flag_done[first] = stored[first] + 2 * path * snooped[first]
            done = _polls(poll_w, call, turn[poll_r], first_data, second_data, early, f, new_flag_done, path,
                          new_again)
            np.maximum.at(new_sync, poll_r, done)
        else:
            new_flag_done[first] = stored[first]
        new_sync[first] = np.maximum(new_sync[first], new_flag_done[first] + delay)
        new_loaded = new_sync.copy()
        if loads:
            back = np.full(p, -np.inf)
            np.maximum.at(back, np.array([r for r, *_ in loads], int), last[did] + data)
            new_loaded = np.where(np.isfinite(back), back, new_sync)
        end = new_loaded.copy()
        if aid is not None:
            new_flag_done[after] = last[aid] + data
            end[after] = new_flag_done[after]
        same = (_close(new_f, f) and _close(new_flag_done, flag_done) and _close(new_sync, sync)
                and _close(new_loaded, loaded)
                and np.array_equal(np.isnan(new_again), np.isnan(again))
                and _close(np.nan_to_num(new_again), np.nan_to_num(again)) and np.array_equal(new_turn, turn)
                and np.array_equal(new_acked, acked))
        f, flag_done, sync, again, turn, acked = new_f, new_flag_done, new_sync, new_again, new_turn, new_acked
        loaded = new_loaded
        if same:
            return tuple(end.tolist())
    raise RunError(f"pool closed form: the hw-mode fixed point for P={p} did not settle in {_MAX_PASSES} passes")


def _polls(poll_w, call, turn, first_data, second_data, early, f, flag_done, path, again):
    """When each poll (r, w) sees the epoch; sets `again` (a second read's call time) where one is needed.

    `poll_w`: the flag of each poll; `call`: its first read's call time (`turn`: the caller's place
    among ranks calling at the same time); `first_data`, `second_data`:
    when its reads' data is back (nan: no second read yet); `early`: its first read was called
    before the flag's store (f_w).
    """
    done = np.empty(len(poll_w))
    seen = early & (flag_done[poll_w] <= first_data + _EPS)
    done[seen] = first_data[seen]
    late = early & ~seen
    again[late] = np.where(f[poll_w[late]] <= first_data[late] + _EPS, first_data[late],
                           f[poll_w[late]] + 2 * path)
    # every other poll makes one read at or after f_w: per flag in call order, the first recalls it,
    # the calls until that recall is done wait for it
    idx = np.flatnonzero(~seen)
    c = np.where(early, again, call)[idx]
    d = np.where(early, second_data, first_data)[idx]
    d = np.where(np.isnan(d), c, d)
    w = poll_w[idx]
    order = np.lexsort((idx, turn[idx], _key(c), w))
    c, d, w, idx = c[order], d[order], w[order], idx[order]
    head = np.ones(len(w), bool)
    head[1:] = w[1:] != w[:-1]
    recall = np.zeros(len(flag_done))
    recall[w[head]] = np.maximum(d[head] + 2 * path, flag_done[w[head]])
    r_done = recall[w]
    done[idx] = np.where(head, r_done, np.where(c < r_done - _EPS, np.maximum(d, r_done), d))
    return done


# ---------------------------------------------------------------------- flush mode

def _flush(geo: PoolGeometry, m: int, zero_copy: bool, starts, delay: float = 0.0) -> tuple:
    """flush mode: each pass walks the ranks' programs with every access's queueing delay from the
    last pass (0 at first), until no delay and no poll's number of loads changes."""
    ranks = _FlushPrograms(geo, m, zero_copy, starts, delay)
    for _ in range(_MAX_PASSES):
        booked, ends, polls = ranks.walk()
        acc = _Accesses(geo)
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
                _close(np.array(list(delay.values())), np.array([ranks.delay[k] for k in delay])):
            return tuple(ends.tolist())
        ranks.delay, ranks.polls, ranks.order = delay, polls, order
    raise RunError(f"pool closed form: the flush-mode fixed point for P={geo.hosts}, m={m} did not settle "
                   f"in {_MAX_PASSES} passes")


class _FlushPrograms:
    """The ranks' flush-mode programs, walked with given queueing delays per access.

    Times go with their cause (the access whose end they follow, or None for the CPU's own):
    ranks calling at the same time call in the order their causes reached the devices.
    """

    def __init__(self, geo: PoolGeometry, m: int, zero_copy: bool, starts, delay: float = 0.0):
        self.geo, self.delay_ns = geo, delay
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
                if visible[w] <= t[0] + _EPS:
                    break
                if tries > 10000:
                    raise RunError(f"pool closed form: rank {r} never sees flag {w} (P={p})")
            polls.append(tries)
        for _w in range(p - 1):
            t = self._clflushopt(t, self.lines, acks)
        t = self._fence(t, acks)
        if not self.copy:
            return t[0]
        return max(self.access(("r", r, w), r, *t, int(self.slots[w]), self.w_bytes, False)[1]
                   for w in range(p)) + geo.media_ns + geo.path_ns
