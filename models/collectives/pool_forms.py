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
write is acknowledged at end + path. Each rank's protocol (see
`cxlsim.models.collectives.cxl_pool`) makes its accesses at times that follow
from the ends of its earlier ones (max-plus), so the whole call is the least
fixed point of "arrivals from ends, ends from arrivals", reached by iterating
from the unloaded times (each pass moves every time up; it stops when no time
moves). With P*b <= B and one switch no chunk ever queues and this is today's
algebraic form (`one_switch_form`, which the tests pin), e.g. in hw mode

    write + fence + (X + L) + ((P-1)*X + L + 2*path) + (L + P*D)

At scale the flags' traffic is what the algebraic form misses: P*(P-1)
polls and P flag stores queue at the device with the blocks, the polls
start when each rank's flag store returns, and every rank waits for the
first poller's recalls (the first read of a Modified flag line recalls it,
+2*path, and every later read of that line waits for it).

hw mode, per rank r (the rules of the transport and its snoop filter):
- copy: stream the slot (up); ack = max(end + path, writeback floor);
  f_r = max(issue end, ack) + fence. Zero-copy: f_r = fence.
- the flag store at f_r is a one-line read for ownership (down); it holds the
  line Modified from f_r and completes at T_r = its data + (2*path if another
  rank read the flag before f_r: the device collects their BISnp responses).
- T_r: one read per other flag, issued together (in flag order on the host).
  A read called at or after f_w recalls flag w if it is the first such call
  (done at max(data + 2*path, T_w)); later calls until that recall is done
  wait for it; calls after it are plain. A read called before f_w is plain:
  it sees the flag if T_w <= its data; else it reads again at its data (if the
  BISnp from f_w already took its copy) or at f_w + 2*path (woken by it).
- copy: at its last flag, read the P slots (down); done at the last data.

flush mode keeps the algebraic form: it is exact with one switch and P*b <= B
and, on switch trees and at scale, within `FLUSH_TREE_BOUND` of the DES on the
grid of experiments/verify_simulator.py (see `form_error_bound`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError, RunError
from cxlsim.fabric.cxl import CACHE_LINE_BYTES

__all__ = ["PoolGeometry", "pool_closed_form", "one_switch_form", "form_error_bound", "FLUSH_TREE_BOUND"]

LINE = CACHE_LINE_BYTES
FLUSH_TREE_BOUND = 0.01
"""Largest |DES / form - 1| of the flush-mode form where it is not exact (the verified grid)."""
_MAX_PASSES = 200
_EPS = 1e-6
"""Times closer than this (ns) are equal: the DES's sums and these round differently."""


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

    @property
    def load_ns(self) -> float:
        return 2 * self.path_ns + self.media_ns

    @property
    def leaf_hosts(self) -> int:
        """Most hosts under one leaf (0 with one switch)."""
        return max(self.leaf_of.count(k) for k in set(self.leaf_of)) if self.leaf_of else 0


def pool_closed_form(geo: PoolGeometry, m: int, coherence, zero_copy: bool = False) -> float:
    """Latency (ns) of one `cxl_pool` (or `cxl_pool_zero_copy`) allgather of m-byte blocks on `geo`'s pool,
    every rank starting together on a fresh pool."""
    mode = Coherence.parse(coherence, "coherence")
    if not isinstance(m, int) or m < 0:
        raise InputError(f"size: expected an integer >= 0 bytes, got {m!r}")
    if mode is Coherence.HW:
        return _hw(geo, m, zero_copy)
    return one_switch_form(geo, m, mode, zero_copy)


def form_error_bound(geo: PoolGeometry, m: int, coherence, zero_copy: bool = False) -> float:
    """Bound on |DES / pool_closed_form - 1| (0: exact by the transport's rules).

    hw mode is exact. flush mode is exact with one switch while the hosts together stay within the
    devices' bandwidth (P*b <= B); elsewhere it is within `FLUSH_TREE_BOUND` on the verified grid.
    """
    mode = Coherence.parse(coherence, "coherence")
    if mode is Coherence.HW or (not geo.leaf_of and geo.hosts * geo.host_bw <= geo.devices * geo.device_bw):
        return 0.0
    return FLUSH_TREE_BOUND


def one_switch_form(geo: PoolGeometry, m: int, coherence, zero_copy: bool = False) -> float:
    """The algebraic form (ns): exact with one switch and P*b <= B, where no chunk queues.

        X = 64/b, W = 64*ceil(m/64), D = W/b, L = 2*path + media, F = clflushopt per line, f = fence,
        I = a clflushopt's acknowledgement (invalidate_ns), K = a write's least time to acknowledgement
        write  = max(2*path + max(D, P*W/B, k*W/U), K)        streamed, until acknowledged
        read   = L + max(P*D, P*P*W/B, k*P*W/U)               P slots; P hosts share the device(s)
        hw:    write + f + (X + L) + ((P-1)*X + L + 2*path) + read
        flush: max(D + lines*F + I, write) + f + (X + L)
               + max(2F + I, X + 2*path, K) + f + X + L + (P-2)*(F + I + f + X + L)
               + (P-1)*lines*F + I + f + read                (I only if lines > 0)

    k hosts under the fullest leaf of a tree share its uplink U (the max() terms are the device
    and uplink bottlenecks, which this form takes as if they were the only queue). Zero-copy
    has no write and no read; in flush mode its slot's clflushopt write the block back.
    """
    mode = Coherence.parse(coherence, "coherence")
    p = geo.hosts
    lines = -(-m // LINE)
    w = lines * LINE
    b, big_b = geo.host_bw, geo.device_bw * geo.devices
    x, d = LINE / b, w / b
    path, load, fence, flush = geo.path_ns, geo.load_ns, geo.fence_ns, geo.flush_ns_per_line
    inv, ack = geo.invalidate_ns, geo.writeback_ns
    leaf = geo.leaf_hosts / geo.uplink_bw if geo.leaf_of else 0.0
    write = max(2 * path + max(d, p * w / big_b, w * leaf), ack) if lines else 0.0
    read = load + max(p * d, p * p * w / big_b, p * w * leaf) if lines and not zero_copy else 0.0
    flag = x + load  # the flag store's read for ownership
    if mode is Coherence.HW:
        start = fence if zero_copy else write + fence
        sync = (p - 1) * x + load + 2 * path if p > 1 else 0.0
        return start + flag + sync + read
    slot_inv = inv if lines else 0.0
    start = max((0.0 if zero_copy else d) + lines * flush + slot_inv, write) + fence
    if p == 1:  # no polls: the final fence waits for the flag line's write-back
        return start + flag + max(flush + inv, x + 2 * path, ack) + fence + read
    # first poll: its fence waits for the flag's write-back, started with the flag's clflushopt
    polls = max(2 * flush + inv, x + 2 * path, ack) + fence + x + load + (p - 2) * (flush + inv + fence + x + load)
    return start + flag + polls + (p - 1) * lines * flush + slot_inv + fence + read


# ---------------------------------------------------------------------- the FIFO chain

class _Accesses:
    """The accesses of one pass, cut into chunks: host, ready time, bytes, direction, device, access id."""

    def __init__(self, geo: PoolGeometry):
        self.geo = geo
        self.cols = []
        self.count = 0

    def add(self, hosts, ready, offsets, size: int, up: bool) -> np.ndarray:
        """Accesses of `size` bytes (> 0) at pool `offsets`, by `hosts`, called at `ready`; returns their ids."""
        hosts, ready, offsets = np.broadcast_arrays(np.asarray(hosts), np.asarray(ready, dtype=float),
                                                    np.asarray(offsets))
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
                          chunk % self.geo.devices, ids[each]))
        return ids

    def ends(self):
        """(issue end, end at the device) of every access, arrays by access id."""
        geo = self.geo
        host, ready, nbytes, up, device, ident = (np.concatenate(col) for col in zip(*self.cols))
        seq = np.arange(len(host))
        start, end = _fifo(host, ready, seq, nbytes / geo.host_bw)
        issue = np.full(self.count, -np.inf)
        np.maximum.at(issue, ident, end)
        if geo.leaf_of:
            leaf = np.asarray(geo.leaf_of)[host] * 2 + up
            arrive, tail = start + geo.to_leaf_uplink_ns, end + geo.to_leaf_uplink_ns
            s2, served = _fifo(leaf, arrive, seq, nbytes / geo.uplink_bw, ready)
            rest = geo.path_ns - geo.to_leaf_uplink_ns
            arrive, tail = s2 + rest, np.maximum(served, tail) + rest
            prior = s2 - geo.to_leaf_uplink_ns
        else:
            arrive, tail = start + geo.path_ns, end + geo.path_ns
            prior = ready
        _, served = _fifo(device, arrive, seq, nbytes / geo.device_bw, prior)
        last = np.full(self.count, -np.inf)
        np.maximum.at(last, ident, np.maximum(served, tail))
        return issue, last


def _fifo(server, arrival, seq, service, prior=None):
    """(start, end) of every item at FIFO servers (`server` ids), served in order of arrival.

    Ties go by `prior` (the arrival at the previous server, which ordered the events), then `seq`.
    """
    # times that are equal in the DES differ here by rounding: order by times to 1e-6 ns
    keys = (seq, _key(arrival), server) if prior is None else (seq, _key(prior), _key(arrival), server)
    order = np.lexsort(keys)
    srv, arr, svc = server[order], arrival[order], service[order]
    total = np.cumsum(svc)
    slack = arr - (total - svc)
    bounds = np.flatnonzero(np.diff(srv)) + 1
    for lo, hi in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [len(srv)]))):
        slack[lo:hi] = np.maximum.accumulate(slack[lo:hi])
    end_sorted = total + slack
    start_sorted = end_sorted - svc
    start, end = np.empty_like(start_sorted), np.empty_like(end_sorted)
    start[order], end[order] = start_sorted, end_sorted
    return start, end


# ---------------------------------------------------------------------- hw mode

def _hw(geo: PoolGeometry, m: int, zero_copy: bool) -> float:
    p, path = geo.hosts, geo.path_ns
    lines = -(-m // LINE)
    w_bytes = lines * LINE
    stride = max(LINE, w_bytes)
    slots = p * LINE + (p + np.arange(p)) * stride        # data round 1: the second buffer
    copy = lines > 0 and not zero_copy
    ranks = np.arange(p)
    # polls: rank r reads the other flags in flag order
    poll_r = np.repeat(ranks, p - 1)
    poll_w = np.array([w for r in range(p) for w in range(p) if w != r], dtype=int)
    f = np.full(p, geo.fence_ns)
    flag_done = np.zeros(p)
    sync = np.zeros(p)
    again = np.full(len(poll_r), np.nan)                  # second read's call time, where there is one
    data = geo.media_ns + path
    for _ in range(_MAX_PASSES):
        acc = _Accesses(geo)
        if copy:
            wid = acc.add(ranks, 0.0, slots, w_bytes, up=True)
        sid = acc.add(ranks, f, ranks * LINE, LINE, up=False)
        pid = acc.add(poll_r, flag_done[poll_r], poll_w * LINE, LINE, up=False) if p > 1 else None
        redo = np.flatnonzero(~np.isnan(again))
        rid = acc.add(poll_r[redo], again[redo], poll_w[redo] * LINE, LINE, up=False) if len(redo) else None
        if copy:
            reader = np.repeat(ranks, p)
            did = acc.add(reader, sync[reader], slots[np.tile(ranks, p)], w_bytes, up=False)
        issue, last = acc.ends()
        new_f = (np.maximum(issue[wid], np.maximum(last[wid] + path, geo.writeback_ns)) + geo.fence_ns
                 if copy else f)
        stored = last[sid] + data                          # the flag store's data (its ownership)
        new_sync, new_again, snooped = flag_done.copy(), np.full(len(poll_r), np.nan), np.zeros(p, bool)
        if p > 1:
            first_data = last[pid] + data
            second_data = np.full(len(poll_r), np.nan)
            if rid is not None:
                second_data[redo] = last[rid] + data
            call = flag_done[poll_r]
            early = call < f[poll_w] - _EPS
            snooped[np.unique(poll_w[early])] = True
            new_flag_done = stored + 2 * path * snooped
            done = _polls(poll_w, call, first_data, second_data, early, f, new_flag_done, path, new_again)
            np.maximum.at(new_sync, poll_r, done)
        else:
            new_flag_done = stored
        new_sync = np.maximum(new_sync, new_flag_done)
        if copy:
            end = np.full(p, -np.inf)
            np.maximum.at(end, reader, last[did] + data)
        else:
            end = new_sync
        same = (np.array_equal(new_f, f) and np.array_equal(new_flag_done, flag_done)
                and np.array_equal(new_sync, sync) and np.array_equal(np.isnan(new_again), np.isnan(again))
                and np.allclose(np.nan_to_num(new_again), np.nan_to_num(again), rtol=0, atol=0))
        f, flag_done, sync, again = new_f, new_flag_done, new_sync, new_again
        if same:
            return float(end.max())
    raise RunError(f"pool closed form: the hw-mode fixed point for P={p}, m={m} did not settle "
                   f"in {_MAX_PASSES} passes")


def _polls(poll_w, call, first_data, second_data, early, f, flag_done, path, again):
    """When each poll (r, w) sees the epoch; sets `again` (a second read's call time) where one is needed.

    `poll_w`: the flag of each poll; `call`: its first read's call time; `first_data`, `second_data`:
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
    order = np.lexsort((idx, _key(c), w))
    c, d, w, idx = c[order], d[order], w[order], idx[order]
    head = np.ones(len(w), bool)
    head[1:] = w[1:] != w[:-1]
    recall = np.zeros(len(flag_done))
    recall[w[head]] = np.maximum(d[head] + 2 * path, flag_done[w[head]])
    r_done = recall[w]
    done[idx] = np.where(head, r_done, np.where(c < r_done - _EPS, np.maximum(d, r_done), d))
    return done
