"""Pool programs walked through the pool's FIFO chain in arrival order: a form for protocols with long poll loops.

The pool's data path is a chain of FIFO servers (`cxlsim.models.collectives.pool_forms`
derives it): a chunk (at most `chunk_bytes` of pool address) is served by its host's issue
server (bandwidth b), then, in a two-level tree, by its leaf's uplink (one per direction),
then by its device (chunks interleaved over the devices). It reaches the next server one
reach after its service *starts* there, and it has passed a server at

    end = max(service end, previous end + reach)

A read's data is back at its last chunk's end + media + path; a streamed write (or
write-back) is acknowledged at max(end + path, its start + writeback_ns).

`PoolWalk` evaluates that chain for programs (one per rank, Python generators) whose
accesses follow each other: a program yields an access (offset, bytes, up, ready) and
gets back (issue end, end), or yields a time and resumes then. Every server's Lindley
recurrence, start = max(arrival, previous item's service end), is evaluated in arrival
order (equal arrivals in the order they were scheduled, as in the DES), so one walk
gives every time exactly; a flush-mode poll loop of thousands of loads costs one walk,
where the fixed point of `pool_forms.solve_flush` needs about one pass per chunk the
loop overlaps. All times are ns, sizes bytes.
"""
from __future__ import annotations

import heapq

from cxlsim.errors import RunError
from cxlsim.fabric.cxl import CACHE_LINE_BYTES

__all__ = ["PoolWalk", "EPS"]

LINE = CACHE_LINE_BYTES
EPS = 1e-6
"""Times closer than this (ns) are equal: the DES's sums and these round differently."""
_MAX_EVENTS = 50_000_000


def _key(t: float) -> int:
    return round(t / EPS)


class PoolWalk:
    """The FIFO chain of a pool of `geo` (`pool_forms.PoolGeometry`), walked by rank programs."""

    def __init__(self, geo):
        self.geo = geo
        self._heap = []
        self._seq = 0
        self._free = {}          # server -> when its last service ends
        self._programs = {}

    # ------------------------------------------------------------------ the chain
    def _stages(self, host: int, chunk: int, up: bool):
        """(server, reach from the previous stage's start, bandwidth) of a chunk after its host port."""
        geo = self.geo
        device = ("device", chunk % geo.devices)
        if not geo.leaf_of:
            return ((device, geo.path_ns, geo.device_bw),)
        return ((("leaf", geo.leaf_of[host], up), geo.to_leaf_uplink_ns, geo.uplink_bw),
                (device, geo.path_ns - geo.to_leaf_uplink_ns, geo.device_bw))

    def _push(self, when: float, scheduled: float, item) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (_key(when), _key(scheduled), self._seq, when, item))

    def _access(self, rank, offset: int, size: int, up: bool, ready: float, on_end, member) -> None:
        """Cut the access into chunks, serve them at the host's issue port, schedule their next stage."""
        geo = self.geo
        c = geo.chunk_bytes // LINE
        first, stop = offset // LINE, (offset + size - 1) // LINE + 1
        host = self._programs[rank][1]
        pending = {"left": 0, "issue": ready, "end": -float("inf"), "rank": rank, "on_end": on_end,
                   "member": member}
        line = first
        while line < stop:
            chunk = line // c
            hi = min(stop, (chunk + 1) * c)
            nbytes = (hi - line) * LINE
            start = max(ready, self._free.get(("host", host), -float("inf")))
            end = start + nbytes / geo.host_bw
            self._free[("host", host)] = end
            pending["left"] += 1
            pending["issue"] = max(pending["issue"], end)
            stages = self._stages(host, chunk, up)
            self._push(start + stages[0][1], ready, ("chunk", pending, stages, 0, nbytes, end + stages[0][1]))
            line = hi

    def _serve(self, when, item) -> None:
        _, pending, stages, k, nbytes, tail = item
        server, _, bw = stages[k]
        start = max(when, self._free.get(server, -float("inf")))
        served = self._free[server] = start + nbytes / bw
        if k + 1 < len(stages):
            reach = stages[k + 1][1]
            self._push(start + reach, when, ("chunk", pending, stages, k + 1, nbytes, max(served, tail) + reach))
            return
        pending["end"] = max(pending["end"], served, tail)
        pending["left"] -= 1
        if pending["left"] == 0:
            if pending["on_end"] is not None:
                pending["on_end"](pending["end"])
            got = (pending["issue"], pending["end"])
            if pending["member"] is not None:  # one of accesses issued together: resume after the last
                group, i = pending["member"]
                group["got"][i], group["end"] = got, max(group["end"], got[1])
                group["left"] -= 1
                if group["left"]:
                    return
                self._push(group["end"], when, ("resume", pending["rank"], group["got"]))
                return
            self._push(pending["end"], when, ("resume", pending["rank"], got))

    def _step(self, rank, value, now) -> None:
        """Resume `rank`'s program with `value`; schedule what it asks for next."""
        program, _host, ends = self._programs[rank]
        try:
            ask = program.send(value)
        except StopIteration as stop:
            ends[rank] = stop.value
            return
        if isinstance(ask, list):
            group = {"left": len(ask), "got": [None] * len(ask), "end": now}
            for i, access in enumerate(ask):
                self._ask(rank, access, now, (group, i))
        elif isinstance(ask, tuple):
            self._ask(rank, ask, now, None)
        else:
            self._push(ask, now, ("resume", rank, ask))

    def _ask(self, rank, access, now, member) -> None:
        offset, size, up, ready, *on_end = access
        if size <= 0:
            raise RunError(f"pool walk: rank {rank} asked for an empty access at {offset}")
        if ready < now - EPS:
            raise RunError(f"pool walk: rank {rank} asked for an access at {ready} ns, before the walk's {now} ns")
        self._access(rank, offset, size, up, ready, on_end[0] if on_end else None, member)

    # ------------------------------------------------------------------ running
    def run(self, programs: dict) -> dict:
        """Walk `programs` ({rank: generator}, rank = its host) to their ends; returns {rank: end ns}.

        A program yields (offset, size, up, ready) for an access, and receives (issue end, end);
        or a list of them, issued together (in list order at the host port), and receives the list
        of their (issue end, end) once the last has ended; or a time (ns), and receives it back when
        the walk reaches it. It returns its end. An access is never asked for before the walk's time.
        An access may carry a fifth item, on_end(end), called as soon as its end is known (when its
        last chunk reaches its device, before the walk reaches the end: what other ranks may see)."""
        ends = {}
        self._programs = {r: (g, r, ends) for r, g in programs.items()}
        for r in programs:
            self._step(r, None, 0.0)
        events = 0
        while self._heap:
            events += 1
            if events > _MAX_EVENTS:
                raise RunError(f"pool walk: more than {_MAX_EVENTS} events (P={self.geo.hosts})")
            *_, when, item = heapq.heappop(self._heap)
            if item[0] == "chunk":
                self._serve(when, item)
            else:
                self._step(item[1], item[2], when)
        missing = sorted(set(programs) - set(ends))
        if missing:
            raise RunError(f"pool walk: the programs of ranks {missing[:8]} never ended")
        return ends
