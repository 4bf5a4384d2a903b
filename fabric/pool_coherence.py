"""How a pool's hosts see each other's writes: the two coherence modes, as strategies of the pool transport.

- `BackInvalidation` (`Coherence.HW`, CXL 3.x HDM-DB): a snoop filter on the
  device (`cxlsim.fabric.snoop_filter.SnoopFilter`). A write sends BISnp to
  every other host caching the line (their pollers wake up one BISnp later,
  2*path after the write); a store then holds the line Modified, and the next
  read by another host recalls it (+2*path, and no read of the line completes
  before the store did). Reads of lines the host holds hit its cache.
  `wait_flags` keeps one load in flight per flag (an out-of-order core
  overlaps the misses) and sleeps on a flag it holds until a BISnp takes it away.
- `SoftwareFlush` (`Coherence.FLUSH`, no multi-host coherence, CXL 2.0): every
  host has a private cache that nobody else invalidates. Reads that hit it
  return what it holds, even if stale. A store stays in the writer's cache
  until `flush` writes it back; `flush` writes back dirty lines and drops every
  cached copy in the range. `wait_flags` polls one flag at a time as the
  emulator does: invalidate the line, mfence, load.

A mode decides what an operation does to the caches and which lines it must
fetch or write back; the transport (`cxl_transport.CXLPoolTransport`) does the
bookkeeping common to both, and the data path (`pool_path.PoolPath`) moves the
lines. `MODELS` maps each `Coherence` to its strategy.
"""
from __future__ import annotations

from bisect import bisect_left, insort

import simpy

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.errors import RunError
from cxlsim.fabric.cxl import CACHE_LINE_BYTES, line_span
from cxlsim.fabric.snoop_filter import SnoopFilter
from cxlsim.fabric.transport import fire_at

__all__ = ["BackInvalidation", "SoftwareFlush", "MODELS", "check_poll_limit"]

LINE = CACHE_LINE_BYTES


def check_poll_limit(pool, rank, flag, value, seen, start_ns) -> None:
    """RunError if `rank` has polled `flag` for longer than the pool's poll_limit_ns."""
    if pool.env.now - start_ns > pool.poll_limit_ns:
        raise RunError(f"wait_flags: rank {rank} polled the flag at offset {flag} for "
                       f"{pool.env.now - start_ns:.0f} ns without seeing {value!r} (last saw {seen!r})")


class BackInvalidation:
    """hw mode: the device's snoop filter keeps the hosts' caches coherent (see the module docstring)."""

    coherence = Coherence.HW
    poll_event = PoolEvent.POLL_CACHED

    def __init__(self, pool, path, memory, snoop_filter_lines: int):
        self.pool, self.path, self.memory, self.env = pool, path, memory, pool.env
        self.snoop_filter = SnoopFilter(hosts=pool.size, capacity_lines=snoop_filter_lines,
                                        on_invalidate=self._invalidated)
        self._inflight = {}                  # line -> event of the store or recall in flight on it
        self._waiters = {}                   # (host, line) -> events woken by a BISnp

    def before_stream(self, rank, offset, size, first, count) -> float:
        """A streamed write invalidates the other holders; extra ns before its acknowledgement."""
        if self.snoop_filter.write(rank, first, count, keep=False):
            return 2 * self.path.path_ns  # the device collects every BIRsp before it completes the write
        return 0.0

    def store_line(self, rank, offset, size, payload, line, done):
        """An ordinary store within one line: take ownership (recalling it if needed), then store."""
        path, sf = self.path, self.snoop_filter
        start = path.start(rank)
        owned = sf.owner(line) == rank
        snooped = sf.write(rank, line, 1, keep=True)
        if owned:
            self.memory.store(offset, size, payload)
            return path.at(path.cpu(rank, path.host_path.hit_latency_ns), done)
        blockers = self._blockers(line, 1)
        mine = self._inflight[line] = simpy.Event(self.env)

        def owned_now():
            self.memory.store(offset, size, payload)
            self._settle(line, mine)
            done.succeed()
        path.fetch(rank, line, 1, start, 2 * path.path_ns if snooped else 0.0,
                   lambda _e: self._when_all(blockers, owned_now))
        return done

    def place(self, rank, offset, size, payload, first, count) -> None:
        self.snoop_filter.write(rank, first, count, keep=True)
        self.memory.store(offset, size, payload)

    def view(self, rank, offset, size):
        return self.memory.value(offset, size)

    def read(self, rank, offset, size, first, count, start, local_ns, done):
        """Loads of lines [first, first + count): hits cost `local_ns` of CPU, misses fetch (and recall)."""
        path = self.path
        missed, recalled = self.snoop_filter.read(rank, first, count)
        if not missed:
            return path.at(path.cpu(rank, local_ns), done, self.memory.value(offset, size))
        blockers = self._blockers(first, count)
        mine = None
        if recalled:  # later readers of these lines wait for this recall
            mine = simpy.Event(self.env)
            recalled = [line for run, n in recalled for line in range(run, run + n)]
            for line in recalled:
                self._inflight[line] = mine

        def deliver():
            done.succeed(self.memory.value(offset, size))
            if mine is not None:
                for line in recalled:
                    self._settle(line, mine, succeed=False)
                mine.succeed()
        path.fetch(rank, first, count, start, 2 * path.path_ns if recalled else 0.0,
                   lambda _e: self._when_all(blockers, deliver))
        return done

    def flush(self, rank, offset, size, first, count, start) -> None:
        """Drop the rank's copies; Modified lines (stores) go back, their labels already in the pool."""
        dirty = self.snoop_filter.drop(rank, first, count)
        if dirty:
            self.path.write_back(rank, first, dirty, start)

    def wait_flags(self, rank, flags, value):
        return self.env.all_of([self.env.process(self._poll(rank, f, value)) for f in flags])

    def _poll(self, rank, flag, value):
        line = flag // LINE
        start = self.env.now
        while True:
            self.pool.polls += 1
            seen = yield self.pool.pool_read(rank, flag, 8)
            if seen == value:
                return
            check_poll_limit(self.pool, rank, flag, value, seen, start)
            if self.snoop_filter.holds(rank, line):  # sleep until a BISnp takes the line away
                wake = simpy.Event(self.env)
                self._waiters.setdefault((rank, line), []).append(wake)
                yield wake

    def _invalidated(self, host, first, count):
        """A BISnp took lines [first, first + count) from `host`: wake its pollers sleeping on them."""
        if not self._waiters:
            return
        delay = 2 * self.path.path_ns  # the request reaches the device, the BISnp reaches the host
        for key in [k for k in self._waiters if k[0] == host and first <= k[1] < first + count]:
            for event in self._waiters.pop(key):
                fire_at(self.env, event, delay)

    def _blockers(self, first, count) -> list:
        """Stores and recalls in flight on lines [first, first + count): a read completes after them."""
        inflight = self._inflight
        if not inflight:
            return []
        if count > len(inflight):
            return [ev for line, ev in inflight.items() if first <= line < first + count]
        return [inflight[line] for line in range(first, first + count) if line in inflight]

    def _settle(self, line, event, succeed=True):
        if self._inflight.get(line) is event:
            del self._inflight[line]
        if succeed:
            event.succeed()

    def _when_all(self, events, callback):
        pending = [ev for ev in events if not ev.processed]
        if pending:
            self.env.all_of(pending).callbacks.append(lambda _e: callback())
        else:
            callback()

    def waiting(self) -> str:
        """What blocked ranks wait for, for the deadlock message."""
        sleeping = sorted(self._waiters)
        return (f"hosts sleeping on flag lines (host, line): {sleeping[:8]}" if sleeping
                else "nothing is scheduled")


class SoftwareFlush:
    """flush mode: private caches that nobody else invalidates (see the module docstring)."""

    coherence = Coherence.FLUSH
    poll_event = PoolEvent.POLL_FLUSHED
    snoop_filter = None

    def __init__(self, pool, path, memory, snoop_filter_lines: int):
        self.pool, self.path, self.memory, self.env = pool, path, memory, pool.env
        self._cache = [_HostCache() for _ in range(pool.size)]

    def before_stream(self, rank, offset, size, first, count) -> float:
        """A streamed write leaves the writer no copy; no extra ns."""
        self._cache[rank].drop(offset, size)
        return 0.0

    def store_line(self, rank, offset, size, payload, line, done):
        """An ordinary store within one line: into the writer's cache (a read for ownership on a miss)."""
        path = self.path
        start = path.start(rank)
        cache = self._cache[rank]
        entry = cache.get(offset)
        if entry is not None and entry[0] == size:
            entry[1], entry[2] = payload, True
            return path.at(path.cpu(rank, path.host_path.hit_latency_ns), done)

        def stored(_e):
            cache.put(offset, size, payload, True)
            done.succeed()
        path.fetch(rank, line, 1, start, 0.0, stored)
        return done

    def place(self, rank, offset, size, payload, first, count) -> None:
        if count == 0:  # no line to hold it back
            self.memory.store(offset, size, payload)
            return
        self._cache[rank].put(offset, size, payload, True)

    def view(self, rank, offset, size):
        """The rank's cached copy if it holds the range (possibly stale), else the pool's."""
        entry = self._cache[rank].get(offset)
        if entry is not None and entry[0] == size:
            return entry[1]
        return self.memory.value(offset, size)

    def read(self, rank, offset, size, first, count, start, local_ns, done):
        """Loads: a cached copy costs `local_ns` of CPU (stale or not), a miss fetches and caches the lines."""
        path = self.path
        cache = self._cache[rank]
        entry = cache.get(offset)
        if entry is not None and entry[0] == size:
            return path.at(path.cpu(rank, local_ns), done, entry[1])

        def filled(_e):
            label = self.memory.value(offset, size)
            cache.put(offset, size, label, False)
            done.succeed(label)
        path.fetch(rank, first, count, start, 0.0, filled)
        return done

    def flush(self, rank, offset, size, first, count, start) -> None:
        """Drop the rank's copies in the range; dirty ones are written back to the pool first."""
        cache = self._cache[rank]
        for off in cache.overlapping(offset, size):
            sz, label, dirty = cache.pop(off)
            if dirty:
                f, n = line_span(off, sz)
                self.path.write_back(rank, f, n, start, 0.0,
                                     lambda _e, off=off, sz=sz, label=label: self.memory.store(off, sz, label))

    def wait_flags(self, rank, flags, value):
        return self.env.process(self._poll(rank, flags, value))

    def _poll(self, rank, flags, value):
        pool = self.pool
        start = self.env.now
        for flag in flags:
            while True:
                yield pool.flush(rank, flag, 8)
                yield pool.fence(rank)
                pool.polls += 1
                seen = yield pool.pool_read(rank, flag, 8)
                if seen == value:
                    break
                check_poll_limit(pool, rank, flag, value, seen, start)

    def waiting(self) -> str:
        return "nothing is scheduled"


class _HostCache:
    """One host's private cache in flush mode: offset -> [size, label, dirty] of byte ranges that
    never overlap (a new one drops what it overlaps), kept sorted so a range finds the entries it
    overlaps by bisection; they are returned in the order they were put, the order write-backs go."""

    __slots__ = ("_entries", "_starts", "_put_at", "_puts")

    def __init__(self):
        self._entries = {}
        self._starts = []    # the offsets, sorted
        self._put_at = {}    # offset -> how many puts came before it
        self._puts = 0

    def get(self, offset):
        """The entry [size, label, dirty] at `offset` (mutable in place), or None."""
        return self._entries.get(offset)

    def put(self, offset, size, label, dirty) -> None:
        """Hold [offset, offset + size) with `label` (size > 0), dropping what it overlaps."""
        self.drop(offset, size)
        self._entries[offset] = [size, label, dirty]
        self._put_at[offset] = self._puts
        self._puts += 1
        insort(self._starts, offset)

    def overlapping(self, offset, size) -> list[int]:
        """Offsets of the entries that overlap [offset, offset + size), in the order they were put."""
        end = offset + size
        starts, entries = self._starts, self._entries
        i = bisect_left(starts, offset)
        if i:  # only the entry just before the offset can reach into the range
            i -= 1
        out = []
        for k in range(i, len(starts)):
            off = starts[k]
            if off >= end:
                break
            if off + entries[off][0] > offset:
                out.append(off)
        if len(out) > 1:
            out.sort(key=self._put_at.__getitem__)
        return out

    def pop(self, offset):
        """Remove the entry at `offset`; returns it."""
        del self._starts[bisect_left(self._starts, offset)]
        del self._put_at[offset]
        return self._entries.pop(offset)

    def drop(self, offset, size) -> None:
        """Remove every entry that overlaps [offset, offset + size)."""
        for off in self.overlapping(offset, size):
            self.pop(off)


MODELS = {Coherence.HW: BackInvalidation, Coherence.FLUSH: SoftwareFlush}
"""The strategy of each coherence mode."""
