"""The shared region's flush-mode schedule, checked on its event logs against non-coherent caches.

On one coherent host a missing write-back or invalidation is invisible, so the C code's own
logs (cxl_seqlock.h: word stores and loads, copies, line ops, fences) are checked against the
rules a pool without multi-host coherence imposes (the rules of cxlsim.emulator.cache_model,
applied to one process's log at a time):

- a store is in the pool only once its line was written back (WRITEBACK or FLUSH) and a fence
  (SFENCE or MFENCE) followed; a dirty line may also reach the pool at any time (eviction), so
  a store must not begin while an earlier store to another line is not yet in the pool (else the
  two can land in either order: an odd sequence word after the data it guards, data after the
  even word, a counter after the lock's release). The lines of one copy are one store;
- a load sees the pool only if its line was invalidated (FLUSH) and an MFENCE followed since
  this process last loaded it (else it may see a stale cached copy);
- at the end of an operation every store is in the pool.
"""
from __future__ import annotations

import numpy as np
import pytest

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.emulator.training.shared_state import SharedState, shared_region

LINE = 64


def lines(offset: int, length: int) -> range:
    return range(offset // LINE, (offset + max(length, 1) - 1) // LINE + 1)


def check_flush_schedule(events) -> list[str]:
    """The rule violations of one process's event log (see the module docstring); [] means none."""
    dirty, writing_back, invalidating, fresh = set(), set(), set(), set()
    problems = []
    for i, (op, offset, arg) in enumerate(np.asarray(events).tolist()):
        op = PoolEvent(op)
        if op in (PoolEvent.FLAG_STORE, PoolEvent.WRITE):
            span = set(lines(offset, 8 if op is PoolEvent.FLAG_STORE else arg))
            early = (dirty | writing_back) - span
            if early:
                problems.append(f"event {i}: {op.name} at {offset} while line(s) {sorted(early)} are not in the pool")
            dirty |= span
            writing_back -= span
            fresh -= span
        elif op in (PoolEvent.WRITEBACK, PoolEvent.FLUSH):
            span = set(lines(offset, arg))
            writing_back |= span & dirty
            dirty -= span
            if op is PoolEvent.FLUSH:
                invalidating |= span
        elif op is PoolEvent.SFENCE:
            writing_back.clear()
        elif op is PoolEvent.MFENCE:
            writing_back.clear()
            fresh |= invalidating
            invalidating.clear()
        elif op is PoolEvent.READ:
            span = set(lines(offset, arg))
            stale = span - fresh
            if stale:
                problems.append(f"event {i}: READ at {offset} of line(s) {sorted(stale)[:4]} not invalidated "
                                f"and fenced since their last load")
            fresh -= span
    if dirty | writing_back:
        problems.append(f"end: line(s) {sorted(dirty | writing_back)} never reached the pool")
    return problems


@pytest.fixture
def pair():
    with shared_region(2, 100, coherence=Coherence.FLUSH) as handle:
        states = [SharedState.attach(handle, w) for w in range(2)]
        for state in states:
            state.kernel.enable_log()
        yield states
        for state in states:
            state.close()


OPERATIONS = {
    "push": lambda a, b, out: a.push(np.arange(100.0), meta=(1,)),
    "read": lambda a, b, out: b.read(0, out),
    "merge": lambda a, b, out: b.merge(out),
    "ticket": lambda a, b, out: a.fetch_add(),
    "counter": lambda a, b, out: b.counter(),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_every_operation_keeps_the_flush_rules(pair, name):
    a, b = pair
    out = np.empty(100)
    a.push(np.ones(100))
    b.fetch_add()
    for state in pair:
        state.kernel.log_events()  # start the logs empty
    OPERATIONS[name](a, b, out)
    logs = [state.kernel.log_events() for state in pair]
    assert sum(len(log) for log in logs) > 0
    for log in logs:
        assert check_flush_schedule(log) == []
    assert len(a.kernel.log_events()) == 0  # log_events empties the log


def _push_log(pair):
    a, _ = pair
    a.kernel.log_events()
    a.push(np.arange(100.0))
    return a.kernel.log_events()


def test_a_push_publishes_the_odd_word_the_data_and_the_even_word_in_that_order(pair):
    ops = [PoolEvent(op) for op, _, _ in _push_log(pair)]
    flush = PoolEvent.FLUSH  # the default write-back op (clflushopt) is logged as FLUSH
    assert ops == [PoolEvent.FLAG_STORE, flush, PoolEvent.SFENCE, PoolEvent.WRITE, flush, PoolEvent.SFENCE,
                   PoolEvent.FLAG_STORE, flush, PoolEvent.SFENCE]


def test_the_checker_finds_each_kind_of_broken_schedule(pair):
    log = _push_log(pair)
    ops = [PoolEvent(op) for op in log[:, 0]]
    no_fence = np.delete(log, ops.index(PoolEvent.SFENCE), axis=0)  # the odd word not fenced before the data
    assert "WRITE" in check_flush_schedule(no_fence)[0]
    no_final_writeback = log[:-2]                                     # the even word left in the cache
    assert check_flush_schedule(no_final_writeback)[-1].startswith("end:")
    a, b = pair
    b.kernel.log_events()
    b.read(0, np.empty(100))
    read = b.kernel.log_events()
    first_flush = [PoolEvent(op) for op in read[:, 0]].index(PoolEvent.FLUSH)
    assert "not invalidated" in check_flush_schedule(np.delete(read, first_flush, axis=0))[0]
    assert check_flush_schedule(read) == []


def test_hw_mode_has_no_line_ops():
    with shared_region(2, 100, coherence=Coherence.HW) as handle:
        a, b = (SharedState.attach(handle, w) for w in range(2))
        a.kernel.enable_log()
        a.push(np.ones(100))
        a.merge(np.empty(100))
        a.fetch_add()
        ops = {PoolEvent(op) for op in a.kernel.log_events()[:, 0]}
        assert not ops & {PoolEvent.FLUSH, PoolEvent.WRITEBACK, PoolEvent.MFENCE}
        a.close()
        b.close()
