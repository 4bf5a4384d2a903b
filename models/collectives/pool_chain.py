"""The pool's data path as a chain of FIFO servers, evaluated for a set of accesses at once (ns, bytes).

A chunk (at most `chunk_bytes` of pool address) is served by its host's issue
server (bandwidth b), then, in a two-level tree, by its leaf's uplink (one per
direction, the port bandwidth), then by its device (B per device). It reaches
the next server one reach after its service *starts* there, and it has passed
a server at

    end = max(service end, previous end + reach)

A FIFO served in arrival order is Lindley's recurrence, start_k =
max(arrival_k, end_{k-1}); with the arrivals sorted, in closed form

    end_k = S_k + max_{j <= k} (arrival_j - S_{j-1}),   S_k = the service times up to k.

`Accesses` collects one pass's accesses of a fixed point (`pool_forms`,
`pool_hw_steps`) and gives each one's issue end, end at the device and place in
the devices' order. Equal times go in the DES's event order: by when each
arrival was scheduled (its arrival at the previous server, or its call), then
by the order of the events that caused the call (`tie`).
"""
from __future__ import annotations

import numpy as np

from cxlsim.fabric.cxl import CACHE_LINE_BYTES

__all__ = ["Accesses", "EPS", "MAX_PASSES", "close", "time_key"]

LINE = CACHE_LINE_BYTES
MAX_PASSES = 200
"""Passes a fixed point may take before it is a RunError."""
EPS = 1e-6
"""Times closer than this (ns) are equal: the DES's sums and these round differently."""


def close(a, b) -> bool:
    """Whether two arrays of times are equal to `EPS`."""
    return bool(np.allclose(a, b, rtol=0, atol=EPS))


def time_key(times):
    """Times as sort keys, equal where they are equal in the DES (to `EPS`)."""
    return np.round(np.asarray(times) / EPS)


class Accesses:
    """The accesses of one pass, cut into chunks: host, ready time, bytes, direction, device, access id."""

    def __init__(self, geo):  # a pool_forms.PoolGeometry
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
    keys = [k if k.dtype.kind in "iu" else time_key(k) for k in reversed(ties)] + [time_key(arrival)]
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
