"""hw-mode steps of the pool protocols through the pool's FIFO chain, as a fixed point (ns, bytes).

One step: each rank streams its pieces, fences, stores its flag line (a read
for ownership), polls the flags it waits for and loads its ranges; or, as a
broadcast reader, polls from its start, loads and then stores its done flag.
The accesses go through the chain of `pool_chain.Accesses`; each rank's times
follow from the ends of its earlier accesses (max-plus), so the step is the
fixed point of "arrivals from ends, ends from arrivals", reached by passes from
the unloaded times (RunError after `pool_chain.MAX_PASSES`). The poll rules are
the transport's and its snoop filter's (`cxlsim.fabric.pool_coherence`), as the
pool allgather's form states them (`pool_forms`): a read called at or after the
flag's store recalls it if it is the first such call, later calls wait for
that recall; a read called before the store sees it if the store completed by
its data, else reads again at its data or when the store's BISnp wakes it.
"""
from __future__ import annotations

import functools

import numpy as np

from cxlsim.errors import RunError
from cxlsim.fabric.cxl import CACHE_LINE_BYTES
from cxlsim.models.collectives.pool_chain import EPS, MAX_PASSES, Accesses, close, time_key

__all__ = ["FIRST", "AFTER", "hw_step_ends", "clear_memo"]

LINE = CACHE_LINE_BYTES


def clear_memo() -> None:
    """Forget the memoised steps (a benchmark timing cold runs calls it between them)."""
    _hw_program.cache_clear()


FIRST, AFTER = "first", "after"
"""When a rank of `hw_step_ends` stores its flag: before its polls (FIRST), or after its loads (AFTER, a
broadcast reader's acknowledgement); None: it stores none."""


def hw_step_ends(geo, flags, writes, reads, starts=None, poll_delay: float = 0.0, waits=None,
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
def _hw_program(geo, flags: tuple, writes: tuple, reads: tuple, starts: tuple, delay: float,
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
    for _ in range(MAX_PASSES):
        acc = Accesses(geo)
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
            early = call < f[poll_w] - EPS
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
        same = (close(new_f, f) and close(new_flag_done, flag_done) and close(new_sync, sync)
                and close(new_loaded, loaded)
                and np.array_equal(np.isnan(new_again), np.isnan(again))
                and close(np.nan_to_num(new_again), np.nan_to_num(again)) and np.array_equal(new_turn, turn)
                and np.array_equal(new_acked, acked))
        f, flag_done, sync, again, turn, acked = new_f, new_flag_done, new_sync, new_again, new_turn, new_acked
        loaded = new_loaded
        if same:
            return tuple(end.tolist())
    raise RunError(f"pool closed form: the hw-mode fixed point for P={p} did not settle in {MAX_PASSES} passes")


def _polls(poll_w, call, turn, first_data, second_data, early, f, flag_done, path, again):
    """When each poll (r, w) sees the epoch; sets `again` (a second read's call time) where one is needed.

    `poll_w`: the flag of each poll; `call`: its first read's call time (`turn`: the caller's place
    among ranks calling at the same time); `first_data`, `second_data`:
    when its reads' data is back (nan: no second read yet); `early`: its first read was called
    before the flag's store (f_w).
    """
    done = np.empty(len(poll_w))
    seen = early & (flag_done[poll_w] <= first_data + EPS)
    done[seen] = first_data[seen]
    late = early & ~seen
    again[late] = np.where(f[poll_w[late]] <= first_data[late] + EPS, first_data[late],
                           f[poll_w[late]] + 2 * path)
    # every other poll makes one read at or after f_w: per flag in call order, the first recalls it,
    # the calls until that recall is done wait for it
    idx = np.flatnonzero(~seen)
    c = np.where(early, again, call)[idx]
    d = np.where(early, second_data, first_data)[idx]
    d = np.where(np.isnan(d), c, d)
    w = poll_w[idx]
    order = np.lexsort((idx, turn[idx], time_key(c), w))
    c, d, w, idx = c[order], d[order], w[order], idx[order]
    head = np.ones(len(w), bool)
    head[1:] = w[1:] != w[:-1]
    recall = np.zeros(len(flag_done))
    recall[w[head]] = np.maximum(d[head] + 2 * path, flag_done[w[head]])
    r_done = recall[w]
    done[idx] = np.where(head, r_done, np.where(c < r_done - EPS, np.maximum(d, r_done), d))
    return done


