"""The simulation clock: a SimPy environment that also reports how many events it scheduled.

Time is float nanoseconds. `events` counts the events scheduled so far
(every scheduled event is processed by the end of a run). SimPy numbers each
scheduled event from an `itertools.count` (`_eid`) to break ties
deterministically; `events` reads that counter, so counting costs nothing.
"""
from __future__ import annotations

import simpy
from simpy.core import NORMAL
from simpy.events import Event

__all__ = ["Environment", "Wakeup"]


class Wakeup(Event):
    """A callback scheduled `delay_ns` ahead: an event that succeeds with `value` and calls
    `callback(event)`. Like `env.timeout(delay, value)` plus one callback, built in one step
    (the DES makes one per chunk per switch, so it is kept lean). `delay_ns` must be >= 0."""

    def __init__(self, env, delay_ns: float, callback, value=None):
        self.env = env
        self.callbacks = [callback]
        self._value = value
        self._ok = True
        env.schedule(self, NORMAL, delay_ns)


class Environment(simpy.Environment):
    """`simpy.Environment` with an `events` count and a cheap delayed callback (`at`)."""

    @property
    def events(self) -> int:
        """Events scheduled so far: the next id of SimPy's tie-breaking counter (read from its repr)."""
        return int(repr(self._eid)[len("count("):-1])

    def at(self, delay_ns: float, callback, value=None) -> None:
        """Call `callback(event)` after `delay_ns`, with `event.value == value`: one event, no process."""
        Wakeup(self, delay_ns, callback, value)
