"""A non-coherent cache model that checks the flush schedules of the pool kernels' event logs.

**Why a model.** On one coherent host a missing flush is invisible: every schedule gives
right answers. So the event logs of every rank are replayed against a machine whose
caches are NOT coherent, where a wrong schedule reads stale data or hangs.

**The model's rules** (lines are 64 B; a cache holds version tags, not bytes: a data
line's tag is (writer rank, the flag value that publishes it: the value its rank stores
next after the WRITE), a flag line's tag is the value stored in it; messages call a flag
value an "epoch". Flag values are taken as logged, so any protocol whose flags only grow
replays: cxl_ops.h's allgather and every collective of cxl_coll.h):

1. A rank's stores (WRITE, FLAG_STORE) go to its own cache and make the line dirty.
   Memory changes only when a dirty line is written back.
2. WRITEBACK (clwb) starts a write-back and keeps the line (clean). FLUSH
   (clflush/clflushopt) starts a write-back (if dirty) and an invalidation.
3. Both are weakly ordered: a write-back is *pending* until the rank's next SFENCE or
   MFENCE completes it; an invalidation is pending until the next MFENCE. A READ of a
   line whose invalidation is still pending sees the cached, possibly stale, copy.
   Write-backs of one line complete in program order. (The log does not tell clflush
   from clflushopt, so every FLUSH gets clflushopt's weak ordering: the stricter check.)
4. A READ or poll of a line not in the cache loads it from memory and keeps it cached.
   Another rank's data stays cached (stale) until this rank invalidates it.
5. POLL_CACHED is plain loads: a cached flag line never changes, so a stale one hangs.
   POLL_FLUSHED repeats {FLUSH the flag line, MFENCE, load} until the flag >= epoch.
6. Stores must stay on the rank's own slot and flag line (single writer per line).

**The adversary.** Ranks run one at a time; a rank runs until it blocks on a poll,
reaches a fence with write-backs pending, or ends. Then the scheduler completes pending
write-backs one at a time, flag lines first and otherwise the latest first (LIFO), and
lets every rank run again between two of them. That makes a flag visible as early as the
hardware may and data as late as it may (plain LIFO would miss a flag write-back issued
before the data's). Dirty lines may also leave a cache at any time (eviction), so
`replay` runs once per eviction policy: "lazy" (never: catches missing write-backs as
stale reads or hangs), "flags-early" (a flag store reaches memory at once: catches a flag
published before its data), "data-early" and "eager". A replay where no rank can move is
a deadlock. Every READ must see, line by line, the tag of the data of the owner's latest
publish into that buffer that the reader knows of: the largest flag value of the owner it
waited for (a poll), or for its own slot the value it stored last; a READ of a line that
publish did not write is an error too. The first violation is reported with policy, rank,
epoch, slot, line and where the stale copy came from.

API::

    problems = replay([log0, log1], layout)   # logs from log_events(); [] means correct
    check_schedule([log0, log1], layout)      # raises ScheduleError listing the problems

The event codes are `cxlsim.coherence.PoolEvent` (= CXL_EV_* of cxl_ops.h).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from cxlsim.coherence import PoolEvent
from cxlsim.errors import InputError

LINE = 64  # bytes per cache line (CXL_LINE)
EVENT_CODES = frozenset(int(e) for e in PoolEvent)

POLICIES = {  # name: (a flag store reaches memory at once, a data store reaches memory at once)
    "lazy": (False, False),
    "flags-early": (True, False),
    "data-early": (False, True),
    "eager": (True, True),
}


class ScheduleError(AssertionError):
    """A flush schedule is wrong on non-coherent caches; `problems` lists what the replays found."""

    def __init__(self, problems: list[str]):
        super().__init__("flush schedule fails on non-coherent caches:\n" + "\n".join(f"  {p}" for p in problems))
        self.problems = list(problems)


class _Violation(Exception):
    """Raised inside a replay at the first wrong read, hang or malformed event."""


@dataclasses.dataclass
class _WriteBack:
    seq: int        # global issue order
    line: int       # line number (pool offset // 64)
    tag: object     # what it writes to memory
    is_flag: bool


@dataclasses.dataclass
class _Rank:
    rank: int
    events: list              # (op, offset, arg, epoch of the call)
    pos: int = 0
    cache: dict = dataclasses.field(default_factory=dict)      # line -> tag
    dirty: set = dataclasses.field(default_factory=set)
    invalidating: set = dataclasses.field(default_factory=set)  # lines with a pending invalidation
    pending: list = dataclasses.field(default_factory=list)     # _WriteBack, issue order
    state: str = "run"        # run | fence | blocked | done
    poll_issued: bool = False
    waiting: str = ""         # why it is blocked (for the deadlock message)
    known: dict = dataclasses.field(default_factory=dict)      # rank -> the flag value this rank knows it reached


def _tag_text(tag) -> str:
    if tag is None:
        return "no data (nothing was ever written back there)"
    return f"rank {tag[0]}'s epoch {tag[1]} data"


class NonCoherentCacheModel:
    """Replays per-rank event logs on private, non-coherent caches (rules in the module docstring).

    layout: anything with nranks, flags_offset, data_offset, slot_stride (bytes), e.g.
    `pool.SegmentLayout`. policy: a key of POLICIES.
    """

    def __init__(self, layout, policy: str = "lazy"):
        if policy not in POLICIES:
            raise InputError(f"policy: expected one of {sorted(POLICIES)}, got {policy!r}")
        self.nranks = int(layout.nranks)
        self.flags_offset = int(layout.flags_offset)
        self.data_offset = int(layout.data_offset)
        self.slot_stride = int(layout.slot_stride)
        self.policy = policy
        self.evict_flags, self.evict_data = POLICIES[policy]

    # -- layout ------------------------------------------------------------------------
    def _slot(self, buffer: int, rank: int) -> int:
        return self.data_offset + (buffer * self.nranks + rank) * self.slot_stride

    def _flag_owner(self, line: int) -> int | None:
        first = self.flags_offset // LINE
        return line - first if first <= line < first + self.nranks else None

    def _data_slot(self, line: int) -> tuple[int, int, int] | None:
        """(buffer, owner rank, line within the slot) of a data line, or None."""
        rel = line * LINE - self.data_offset
        if not 0 <= rel < 2 * self.nranks * self.slot_stride:
            return None
        index, within = divmod(rel, self.slot_stride)
        buffer, owner = divmod(index, self.nranks)
        return buffer, owner, within // LINE

    @staticmethod
    def _lines(offset: int, length: int) -> range:
        if length <= 0:
            return range(0)
        return range(offset // LINE, (offset + length - 1) // LINE + 1)

    # -- replay --------------------------------------------------------------------------
    def run(self, logs) -> list[str]:
        """Replay one (n, 3) int64 log per rank; return [] or the first problem, prefixed by the policy."""
        try:
            self._prepare(logs)
            self._schedule()
        except _Violation as v:
            return [f"[{self.policy}] {v}"]
        return []

    def _prepare(self, logs) -> None:
        if len(logs) != self.nranks:
            raise _Violation(f"got {len(logs)} logs for a {self.nranks}-rank layout")
        self.memory: dict = {}      # line -> tag; absent = never written (data None, flag 0)
        self.published: dict = {}   # (rank, buffer) -> [(flag value, lines written), ...] in program order
        self.seq = 0
        self.ranks = []
        for rank, log in enumerate(logs):
            log = np.asarray(log, dtype=np.int64).reshape(-1, 3)
            rows = log.tolist()
            for op, offset, _ in rows:
                if op not in EVENT_CODES:
                    raise _Violation(f"rank {rank}: unknown event op {op} at offset {offset}")
            # A WRITE belongs to the flag value its rank stores next (the publish that makes it visible).
            next_flag, upcoming = [0] * len(rows), None
            for i in range(len(rows) - 1, -1, -1):
                if rows[i][0] == PoolEvent.FLAG_STORE:
                    upcoming = rows[i][2]
                next_flag[i] = upcoming
            own_flag, last, events = self.flags_offset + rank * LINE, 0, []
            for i, (op, offset, arg) in enumerate(rows):
                value = last
                if op == PoolEvent.WRITE:
                    value = next_flag[i] if next_flag[i] is not None else last + 1
                    self._record_write(rank, offset, arg, value)
                elif op == PoolEvent.FLAG_STORE:
                    if offset != own_flag or arg < last:
                        raise _Violation(f"rank {rank}, epoch {last}: FLAG_STORE of {arg} at pool offset {offset}, "
                                         f"but its flag line is at {own_flag} and its flag holds {last} "
                                         "(flags only grow)")
                    last = value = arg
                events.append((op, offset, arg, value))
            self.ranks.append(_Rank(rank=rank, events=events, state="run" if events else "done"))

    def _record_write(self, rank: int, offset: int, length: int, value: int) -> None:
        """Note that `rank` wrote [offset, offset + length), published with flag `value`; it must be its own slot."""
        for buffer in (0, 1):
            slot = self._slot(buffer, rank)
            if slot <= offset and offset + length <= slot + self.slot_stride and length >= 0:
                break
        else:
            slots = (self._slot(0, rank), self._slot(1, rank))
            raise _Violation(f"rank {rank}, epoch {value}: WRITE of {length} bytes at pool offset {offset}, "
                             f"but its slots are at {slots} and each holds {self.slot_stride}")
        if length == 0:
            return
        steps = self.published.setdefault((rank, buffer), [])
        if steps and steps[-1][0] == value:
            steps[-1][1].update(self._lines(offset, length))
        else:
            steps.append((value, set(self._lines(offset, length))))

    def _schedule(self) -> None:
        while True:
            advanced = False
            for st in self.ranks:
                while st.state != "done" and self._step(st):
                    advanced = True
            pending = [wb for st in self.ranks for wb in st.pending]
            if pending:  # every rank is stopped: complete one write-back, flags first, else the latest
                wb = max(pending, key=lambda w: (w.is_flag, w.seq))
                self._complete(next(st for st in self.ranks if wb in st.pending), wb)
                continue
            if all(st.state == "done" for st in self.ranks):
                return
            if not advanced:
                stuck = "; ".join(f"rank {st.rank} {st.waiting if st.state == 'blocked' else 'is done'}"
                                  for st in self.ranks)
                raise _Violation(f"deadlock, no rank can make progress: {stuck}")

    def _complete(self, st: _Rank, wb: _WriteBack) -> None:
        """Finish `wb` and every older write-back of the same line (one line's write-backs stay in order)."""
        st.pending = [w for w in st.pending if not (w.line == wb.line and w.seq <= wb.seq)]
        self.memory[wb.line] = wb.tag

    def _memory(self, line: int):
        return self.memory.get(line, 0 if self._flag_owner(line) is not None else None)

    # -- one event ---------------------------------------------------------------------
    def _step(self, st: _Rank) -> bool:
        """Run `st`'s next event; True if it completed, False if the rank stopped (fence, poll, end)."""
        if st.pos == len(st.events):
            st.state = "done"
            return False
        op, offset, arg, epoch = st.events[st.pos]
        where = f"rank {st.rank}, epoch {epoch}"
        if op == PoolEvent.WRITE:
            for line in self._lines(offset, arg):
                self._store(st, line, (st.rank, epoch), False)
        elif op == PoolEvent.FLAG_STORE:
            self._store(st, offset // LINE, arg, True)
            st.known[st.rank] = arg
        elif op in (PoolEvent.WRITEBACK, PoolEvent.FLUSH):
            self._line_op(st, op, self._lines(offset, arg))
        elif op in (PoolEvent.SFENCE, PoolEvent.MFENCE):
            if st.pending:
                st.state = "fence"
                return False
            if op == PoolEvent.MFENCE:
                self._drop_invalidated(st)
        elif op in (PoolEvent.POLL_CACHED, PoolEvent.POLL_FLUSHED):
            if not self._poll(st, op, offset, arg, where):
                return False
        elif op == PoolEvent.READ:
            for line in self._lines(offset, arg):
                self._read(st, line, epoch, where)
        st.pos += 1
        st.state = "run"
        return True

    def _store(self, st: _Rank, line: int, tag, is_flag: bool) -> None:
        owner = self._flag_owner(line) if is_flag else (self._data_slot(line) or (None, None))[1]
        if owner != st.rank:
            kind = "flag line" if is_flag else "data line"
            whose = "no rank's" if owner is None else f"rank {owner}'s"
            raise _Violation(f"rank {st.rank} stored into {whose} {kind} at pool offset {line * LINE}: "
                             "every line must have a single writer")
        st.cache[line] = tag
        st.invalidating.discard(line)  # a store after a flush of the line brings it back
        if self.evict_flags if is_flag else self.evict_data:  # evicted at once: memory has it now
            st.pending = [w for w in st.pending if w.line != line]
            self.memory[line] = tag
            st.dirty.discard(line)
        else:
            st.dirty.add(line)

    def _line_op(self, st: _Rank, op: int, lines) -> None:
        for line in lines:
            if line in st.dirty:
                st.dirty.discard(line)
                self.seq += 1
                st.pending.append(_WriteBack(self.seq, line, st.cache[line], self._flag_owner(line) is not None))
            if op == PoolEvent.FLUSH and line in st.cache:
                st.invalidating.add(line)

    def _drop_invalidated(self, st: _Rank) -> None:
        for line in st.invalidating:
            st.cache.pop(line, None)
        st.invalidating.clear()

    def _poll(self, st: _Rank, op: int, offset: int, epoch: int, where: str) -> bool:
        line = offset // LINE
        owner = self._flag_owner(line)
        if owner is None:
            raise _Violation(f"{where}: {PoolEvent(op).name} at pool offset {offset}, which is not a flag line")
        if op == PoolEvent.POLL_FLUSHED:  # each attempt: drop the flag line, mfence, load from memory
            if not st.poll_issued:
                self._line_op(st, PoolEvent.FLUSH, [line])
                st.poll_issued = True
            if st.pending:
                st.state = "fence"
                return False
            self._drop_invalidated(st)
            st.poll_issued = False
            source = "pool memory holds"
        else:
            source = "its cached copy of the flag line holds" if line in st.cache else "pool memory holds"
        value = st.cache[line] if line in st.cache else self._memory(line)
        st.cache[line] = value
        if value >= epoch:
            st.known[owner] = max(st.known.get(owner, 0), epoch)
            return True
        hint = (" (polling without invalidating never sees a newer value)" if op == PoolEvent.POLL_CACHED
                else f" (rank {owner} never wrote its flag line back)")
        st.state = "blocked"
        st.waiting = (f"waits in {PoolEvent(op).name} for rank {owner}'s flag to reach epoch {epoch}, "
                      f"but {source} {value}{hint}")
        return False

    def _read(self, st: _Rank, line: int, epoch: int, where: str) -> None:
        place = self._data_slot(line)
        if place is None:
            raise _Violation(f"{where}: READ at pool offset {line * LINE}, outside the data slots")
        buffer, owner, index = place
        known = st.known.get(owner, 0)
        steps = [step for step in self.published.get((owner, buffer), ()) if step[0] <= known]
        epoch = steps[-1][0] if steps else known
        if not steps or line not in steps[-1][1]:
            raise _Violation(f"{where}: READ of rank {owner}'s slot, line {index} (pool offset {line * LINE}), "
                             f"which rank {owner} did not write in epoch {epoch}")
        if line in st.cache:
            tag = st.cache[line]
            source = ("from its own cache: its invalidation was still pending (no MFENCE before the read)"
                      if line in st.invalidating else "from its own cache: a copy it never invalidated")
        else:
            tag = self._memory(line)
            st.cache[line] = tag
            source = f"from pool memory: rank {owner}'s write-back had not reached memory"
        if tag != (owner, epoch):
            raise _Violation(f"{where}: stale READ of rank {owner}'s slot, line {index} (pool offset {line * LINE}): "
                             f"saw {_tag_text(tag)} {source}; expected rank {owner}'s epoch {epoch} data")


def replay(logs, layout, policies=tuple(POLICIES)) -> list[str]:
    """Replay per-rank event logs (from log_events()) under each eviction policy; [] means the schedule is correct."""
    problems = []
    for policy in policies:
        problems += NonCoherentCacheModel(layout, policy).run(logs)
    return problems


def check_schedule(logs, layout, policies=tuple(POLICIES)) -> None:
    """Raise ScheduleError if any replay of the logs reads stale data or deadlocks."""
    problems = replay(logs, layout, policies)
    if problems:
        raise ScheduleError(problems)
