"""The simulation clock: a SimPy environment with lean delayed callbacks, which also reports how many
events it scheduled.

Time is float nanoseconds. `events` counts the events scheduled so far
(every scheduled event is processed by the end of a run). SimPy numbers each
scheduled event from an `itertools.count` (`_eid`) to break ties
deterministically; `events` reads that counter, so counting costs nothing.

The DES schedules one callback per chunk per queue it crosses, millions in a
large run, so `at` does not build a SimPy event: it puts
`(time, NORMAL, id, callback, value)` straight into SimPy's queue, numbered
from the same counter. Such an entry sorts among SimPy's own
`(time, priority, id, event)` entries exactly as a `Timeout` scheduled at the
same moment would, so the order of processing, and the event count, are
those of plain SimPy. `step` and `run` process both kinds of entry.
`reserve_ids` and `call_at` let a model number a series of callbacks at once
and put each into the queue only when the one before it has run (the chunk
pipeline does, so the queue holds one entry per transfer, not one per chunk).
"""
from __future__ import annotations

import gc
from collections import deque
from functools import partial
from heapq import heappop, heappush
from itertools import islice

import simpy
from simpy.core import NORMAL, EmptySchedule, StopSimulation
from simpy.events import URGENT, Event

__all__ = ["Environment", "Wakeup", "Fired", "CALL", "YOUNG_OBJECTS_PER_COLLECTION"]

CALL = NORMAL
"""The priority of a callback entry in the queue (`at`, `call_at`, `push`): SimPy's NORMAL."""

YOUNG_OBJECTS_PER_COLLECTION = 200_000
"""While `run` runs, Python's cyclic garbage collector looks at the youngest objects once this many
more were allocated than freed (its default is 700): a DES run allocates millions of short-lived
queue entries and events, and collecting every 700 of them cost up to 40% of a small run's time.
The collector's own setting is restored when `run` returns."""


class Fired:
    """What a callback scheduled with `Environment.at` receives: `value` (also as `_value`, as a SimPy
    event has it). One record per environment, refilled for every call: read it during the call."""

    __slots__ = ("_value",)

    def __init__(self):
        self._value = None

    @property
    def value(self):
        return self._value


class Wakeup(Event):
    """A callback scheduled `delay_ns` ahead as a SimPy event: it succeeds with `value` and calls
    `callback(event)`. Like `env.timeout(delay, value)` plus one callback, built in one step.
    `delay_ns` must be >= 0. (`Environment.at` does the same without building an event.)"""

    def __init__(self, env, delay_ns: float, callback, value=None):
        self.env = env
        self.callbacks = [callback]
        self._value = value
        self._ok = True
        env.schedule(self, NORMAL, delay_ns)


class Environment(simpy.Environment):
    """`simpy.Environment` with an `events` count and a cheap delayed callback (`at`)."""

    def __init__(self, initial_time: float = 0):
        super().__init__(initial_time)
        self._fired = Fired()
        self.next_id = self._eid.__next__
        """`next_id()`: number one event now (`reserve_ids(1)`, at the cost of the counter's own call)."""
        self.push = partial(heappush, self._queue)
        """`push((time_ns, CALL, event_id, callback, value))`: `call_at` for a model's innermost loop."""

    @property
    def events(self) -> int:
        """Events scheduled so far: the next id of SimPy's tie-breaking counter (read from its repr)."""
        return int(repr(self._eid)[len("count("):-1])

    def at(self, delay_ns: float, callback, value=None) -> None:
        """Call `callback(fired)` after `delay_ns` (>= 0), `fired.value == value` (see `Fired`): one
        event in the count and in the order of processing, no SimPy event object."""
        heappush(self._queue, (self._now + delay_ns, CALL, next(self._eid), callback, value))

    def reserve_ids(self, count: int) -> int:
        """Number `count` (>= 1) events now, as `count` calls of `at` in a row would; returns the first id.
        `call_at` schedules them later, each at a time no earlier than the latest event processed."""
        first = next(self._eid)
        if count > 1:
            deque(islice(self._eid, count - 1), maxlen=0)  # the counter's C loop numbers the rest
        return first

    def call_at(self, time_ns: float, event_id: int, callback, value=None) -> None:
        """Schedule `callback(fired)` at `time_ns` under an id from `reserve_ids`, so it is processed
        where an `at` made when the id was reserved would have been."""
        heappush(self._queue, (time_ns, CALL, event_id, callback, value))

    def step(self) -> None:
        """Process the next entry of the queue: a callback of `at`, or a SimPy event."""
        try:
            entry = heappop(self._queue)
        except IndexError:
            raise EmptySchedule from None
        self._now = entry[0]
        if len(entry) == 5:
            fired = self._fired
            fired._value = entry[4]
            entry[3](fired)
        else:
            self._process(entry[3])

    def _process(self, event) -> None:
        """SimPy's processing of one event (simpy.Environment.step after the pop)."""
        callbacks, event.callbacks = event.callbacks, None
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            # Keep the remaining callbacks for when the simulation resumes, as SimPy does.
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            self.schedule(event, URGENT - 1)
            raise
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc

    def run(self, until=None):
        """As `simpy.Environment.run` (until None, a time, or an event), with the step loop inlined."""
        if until is not None:
            if not isinstance(until, Event):
                at = until if isinstance(until, int) else float(until)
                if at <= self._now:
                    raise ValueError(f"until ({at}) must be greater than the current simulation time")
                until = Event(self)
                until._ok = True
                until._value = None
                self.schedule(until, URGENT, at - self._now)
            elif until.callbacks is None:
                return until.value
            until.callbacks.append(StopSimulation.callback)
        queue, fired, process = self._queue, self._fired, self._process
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], YOUNG_OBJECTS_PER_COLLECTION), *thresholds[1:])
        try:
            while True:
                try:
                    entry = heappop(queue)
                except IndexError:
                    raise EmptySchedule from None
                self._now = entry[0]
                if len(entry) == 5:
                    fired._value = entry[4]
                    entry[3](fired)
                else:
                    process(entry[3])
        except StopSimulation as exc:
            return exc.args[0]
        except EmptySchedule:
            if until is not None:
                assert not until.triggered
                raise RuntimeError(f"No scheduled events left but \"until\" event was not triggered: {until}") from None
        finally:
            gc.set_threshold(*thresholds)
        return None
