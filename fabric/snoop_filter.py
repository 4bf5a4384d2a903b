"""The device-side snoop filter of a CXL 3.x HDM-DB pool, and its slow per-line twin.

The snoop filter tracks, per cache line (byte offset // 64), which hosts may
cache it (sharers) and which one holds it Modified (owner), in a table of
`capacity_lines` entries with least-recently-used replacement:

- a write to a line sends a back-invalidate snoop (BISnp) to every other host
  that caches it; an ordinary store (keep=True) then holds the line Modified,
  a streaming store (keep=False) leaves no cached copy;
- a read of a line another host holds Modified sends that owner a BISnp that
  recalls the data; the owner keeps a clean copy;
- when the table is full, the least recently used line is evicted and every
  host caching it gets a BISnp (an invalidation);
- a flush (`drop`) removes the host's copy, writing back a Modified line.

Every BISnp is counted: `bisnp` in total, `recalls` and `eviction_bisnp` for
the parts due to recalls and evictions. `on_invalidate(host, first, count)`
is called for every host that loses its copies of lines [first, first + count)
(writes by others and evictions; a recall leaves the owner a copy).

`SnoopFilter` keeps runs of lines that one operation touched together as one
region (start, end, sharers, owner, LRU stamp), so reading a 1 MiB block costs
a few region operations instead of 16384 line operations. Within a region the
lines are in LRU order by address, as a per-line table would have them (an
operation touches its lines in ascending order), so evicting the oldest lines
first gives exactly the per-line result. The oldest region is found in a heap of
(stamp, start) pairs, one pushed whenever a region gets either, stale ones
skipped when they reach the top. `ReferenceSnoopFilter` is that per-line
table, obviously correct and slow; the tests run random operation sequences
on both and compare every count, state and callback.
"""
from __future__ import annotations

from bisect import bisect_right, insort
from collections import OrderedDict
from heapq import heapify, heappop, heappush

from cxlsim.errors import InputError

__all__ = ["SnoopFilter", "ReferenceSnoopFilter"]


def _check(hosts, capacity_lines):
    for name, value in (("hosts", hosts), ("capacity_lines", capacity_lines)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name}: expected an integer >= 1, got {value!r}")


def _bits(mask: int) -> list[int]:
    out = []
    h = 0
    while mask:
        if mask & 1:
            out.append(h)
        mask >>= 1
        h += 1
    return out


class _Counters:
    def _init_counters(self, hosts, capacity_lines, on_invalidate):
        _check(hosts, capacity_lines)
        self.hosts = hosts
        self.capacity_lines = capacity_lines
        self.on_invalidate = on_invalidate
        self.bisnp = 0
        """BISnp messages sent so far (all causes)."""
        self.recalls = 0
        """BISnp that recalled a Modified line for another host's read."""
        self.evictions = 0
        """Lines evicted from the filter because it was full."""
        self.eviction_bisnp = 0
        """BISnp sent because of evictions."""

    def _invalidate(self, mask: int, first: int, count: int) -> int:
        hosts = _bits(mask)
        self.bisnp += len(hosts) * count
        if self.on_invalidate is not None:
            for h in hosts:
                self.on_invalidate(h, first, count)
        return len(hosts) * count


class SnoopFilter(_Counters):
    """The snoop filter, by regions of lines (see the module docstring)."""

    def __init__(self, *, hosts: int, capacity_lines: int, on_invalidate=None):
        self._init_counters(hosts, capacity_lines, on_invalidate)
        self._starts: list[int] = []       # sorted region starts
        self._regions: dict = {}           # start -> [end, sharers mask, owner or -1, stamp]
        self._used = 0                     # lines tracked
        self._stamp = 0                    # operations so far (LRU clock)
        self._lru: list = []               # heap of (stamp, start); stale once the region at start has another

    def __len__(self) -> int:
        return self._used

    # ---------------------------------------------------------------- queries
    def _find(self, line):
        """(start, region) holding `line`, or (None, None)."""
        i = bisect_right(self._starts, line) - 1
        if i >= 0:
            start = self._starts[i]
            region = self._regions[start]
            if line < region[0]:
                return start, region
        return None, None

    def holders(self, line: int) -> list[int]:
        _, r = self._find(line)
        return [] if r is None else _bits(r[1] | (1 << r[2] if r[2] >= 0 else 0))

    def owner(self, line: int) -> int | None:
        _, r = self._find(line)
        return None if r is None or r[2] < 0 else r[2]

    def holds(self, host: int, line: int) -> bool:
        _, r = self._find(line)
        return r is not None and bool((r[1] | (1 << r[2] if r[2] >= 0 else 0)) >> host & 1)

    def lines(self) -> dict:
        """{line: (sharers mask, owner or -1)} of every tracked line (for tests; slow)."""
        return {line: (r[1], r[2]) for s, r in self._regions.items() for line in range(s, r[0])}

    # ---------------------------------------------------------------- region plumbing
    def _stamped(self, start, stamp):
        """The region at `start` has (now) LRU stamp `stamp`: record it in the LRU heap."""
        lru = self._lru
        heappush(lru, (stamp, start))
        if len(lru) > 2 * len(self._regions) + 64:  # mostly stale: rebuild from the regions
            lru[:] = [(r[3], s) for s, r in self._regions.items()]
            heapify(lru)

    def _split(self, at):
        """Make `at` a region boundary if a region spans it."""
        start, r = self._find(at)
        if r is not None and start < at:
            self._regions[at] = [r[0], r[1], r[2], r[3]]
            r[0] = at
            insort(self._starts, at)
            self._stamped(at, r[3])

    def _remove(self, start):
        r = self._regions.pop(start)
        del self._starts[bisect_right(self._starts, start) - 1]
        self._used -= r[0] - start
        return r

    def _add(self, start, end, sharers, owner):
        self._regions[start] = [end, sharers, owner, self._stamp]
        insort(self._starts, start)
        self._used += end - start
        self._stamped(start, self._stamp)

    def _make_room(self, n):
        """Evict least recently used lines until `n` more fit."""
        lru, regions = self._lru, self._regions
        while self._used + n > self.capacity_lines:
            while True:  # the least recently used region: the lowest (stamp, start) still current
                stamp, start = lru[0]
                r = regions.get(start)
                if r is not None and r[3] == stamp:
                    break
                heappop(lru)
            k = min(self._used + n - self.capacity_lines, r[0] - start)
            self.evictions += k
            self.eviction_bisnp += self._invalidate(r[1] | (1 << r[2] if r[2] >= 0 else 0), start, k)
            if k == r[0] - start:
                self._remove(start)
            else:
                self._regions[start + k] = self._regions.pop(start)
                self._starts[bisect_right(self._starts, start) - 1] = start + k
                self._used -= k
                self._stamped(start + k, r[3])

    def _insert(self, start, end, sharers, owner):
        """Track new lines [start, end), evicting others (or, if the filter is smaller, its own first lines)."""
        pos = start
        while pos < end:
            piece = min(end - pos, self.capacity_lines)
            self._make_room(piece)
            self._add(pos, pos + piece, sharers, owner)
            pos += piece

    def _walk(self, first, count, on_region, on_gap):
        """Visit [first, first + count) in ascending order: on_region(start, region) for tracked runs
        (split to fit the range), on_gap(start, end) for untracked ones. The callbacks may evict."""
        end = first + count
        self._stamp += 1
        self._split(first)
        self._split(end)
        pos = first
        while pos < end:
            i = bisect_right(self._starts, pos) - 1
            start = self._starts[i] if i >= 0 else None
            if start is not None and pos < self._regions[start][0]:  # pos is inside a region: its start
                r = self._regions[start]
                stop = r[0]
                on_region(start, r)
                pos = stop
            else:
                nxt = self._starts[i + 1] if i + 1 < len(self._starts) else end
                stop = min(nxt, end)
                on_gap(pos, stop)
                pos = stop

    # ---------------------------------------------------------------- operations
    def read(self, host: int, first: int, count: int) -> tuple[int, list]:
        """`host` reads lines [first, first + count): (lines it did not hold, recalled (first, count) runs)."""
        bit = 1 << host
        missed = [0]
        recalled = []

        def region(start, r):
            n = r[0] - start
            owner = r[2]
            if owner >= 0 and owner != host:  # Modified elsewhere: BISnp recalls it
                self.bisnp += n
                self.recalls += n
                recalled.append((start, n))
                missed[0] += n
                r[1] |= (1 << owner) | bit
                r[2] = -1
            elif not (r[1] | (1 << owner if owner >= 0 else 0)) & bit:
                missed[0] += n
                r[1] |= bit
            r[3] = self._stamp
            self._stamped(start, r[3])

        def gap(start, end):
            missed[0] += end - start
            self._insert(start, end, bit, -1)

        self._walk(first, count, region, gap)
        return missed[0], recalled

    def write(self, host: int, first: int, count: int, keep: bool) -> int:
        """`host` writes lines [first, first + count); returns the BISnp sent to other holders."""
        bit = 1 << host
        sent = [0]

        def region(start, r):
            others = (r[1] | (1 << r[2] if r[2] >= 0 else 0)) & ~bit
            if others:
                sent[0] += self._invalidate(others, start, r[0] - start)
            if keep:
                r[1], r[2], r[3] = bit, host, self._stamp
                self._stamped(start, r[3])
            else:
                self._remove(start)

        def gap(start, end):
            if keep:
                self._insert(start, end, bit, host)

        self._walk(first, count, region, gap)
        return sent[0]

    def drop(self, host: int, first: int, count: int) -> int:
        """`host` flushes lines [first, first + count) from its cache; returns the Modified lines written back."""
        bit = 1 << host
        written_back = [0]

        def region(start, r):  # a flush is not a use: the LRU stamp stays
            if not (r[1] | (1 << r[2] if r[2] >= 0 else 0)) & bit:
                return
            if r[2] == host:
                written_back[0] += r[0] - start
                r[2] = -1
            r[1] &= ~bit
            if not r[1]:
                self._remove(start)

        self._walk(first, count, region, lambda s, e: None)
        return written_back[0]


class ReferenceSnoopFilter(_Counters):
    """The same snoop filter, one OrderedDict entry per line: the slow twin for tests."""

    def __init__(self, *, hosts: int, capacity_lines: int, on_invalidate=None):
        self._init_counters(hosts, capacity_lines, on_invalidate)
        self._lines: OrderedDict = OrderedDict()  # line -> [sharers mask, owner or -1]

    def __len__(self) -> int:
        return len(self._lines)

    @staticmethod
    def _mask(entry) -> int:
        return entry[0] | (1 << entry[1] if entry[1] >= 0 else 0)

    def holders(self, line: int) -> list[int]:
        entry = self._lines.get(line)
        return [] if entry is None else _bits(self._mask(entry))

    def owner(self, line: int) -> int | None:
        entry = self._lines.get(line)
        return None if entry is None or entry[1] < 0 else entry[1]

    def holds(self, host: int, line: int) -> bool:
        entry = self._lines.get(line)
        return entry is not None and bool(self._mask(entry) >> host & 1)

    def lines(self) -> dict:
        return {line: (e[0], e[1]) for line, e in self._lines.items()}

    def lru_order(self) -> list[int]:
        return list(self._lines)

    def read(self, host: int, first: int, count: int) -> tuple[int, list]:
        bit = 1 << host
        missed = 0
        recalled = []
        for line in range(first, first + count):
            entry = self._lines.get(line)
            if entry is None:
                missed += 1
                self._insert(line, [bit, -1])
                continue
            self._lines.move_to_end(line)
            owner = entry[1]
            if owner >= 0 and owner != host:
                self.bisnp += 1
                self.recalls += 1
                recalled.append((line, 1))
                missed += 1
                entry[0] |= (1 << owner) | bit
                entry[1] = -1
            elif not self._mask(entry) & bit:
                missed += 1
                entry[0] |= bit
        return missed, recalled

    def write(self, host: int, first: int, count: int, keep: bool) -> int:
        bit = 1 << host
        sent = 0
        for line in range(first, first + count):
            entry = self._lines.get(line)
            if entry is not None:
                others = self._mask(entry) & ~bit
                if others:
                    sent += self._invalidate(others, line, 1)
                if keep:
                    entry[0], entry[1] = bit, host
                    self._lines.move_to_end(line)
                else:
                    del self._lines[line]
            elif keep:
                self._insert(line, [bit, host])
        return sent

    def drop(self, host: int, first: int, count: int) -> int:
        bit = 1 << host
        written_back = 0
        for line in range(first, first + count):
            entry = self._lines.get(line)
            if entry is None or not self._mask(entry) & bit:
                continue
            if entry[1] == host:
                written_back += 1
                entry[1] = -1
            entry[0] &= ~bit
            if not entry[0]:
                del self._lines[line]
        return written_back

    def _insert(self, line: int, entry: list) -> None:
        if len(self._lines) >= self.capacity_lines:
            victim, old = self._lines.popitem(last=False)
            self.evictions += 1
            self.eviction_bisnp += self._invalidate(self._mask(old), victim, 1)
        self._lines[line] = entry
