"""The simulation clock: a SimPy environment that counts the events it processes.

Time is float nanoseconds. `events` is the number of events processed so far,
which the speed benchmark divides by wall time.
"""
from __future__ import annotations

import simpy

__all__ = ["Environment"]


class Environment(simpy.Environment):
    """`simpy.Environment` with an `events` counter (one per processed event)."""

    def __init__(self, initial_time: float = 0.0):
        super().__init__(initial_time)
        self.events = 0

    def step(self) -> None:
        self.events += 1
        super().step()

    def at(self, delay_ns: float, callback) -> None:
        """Call `callback(event)` after `delay_ns`: one event, no process (the cheap path)."""
        self.timeout(delay_ns).callbacks.append(callback)
