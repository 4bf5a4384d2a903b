"""Ranks sharing CPUs (`cxlsim replay --cpus N`): the traced run's time slicing, as a scheduler in the DES.

A trace recorded with more ranks than CPUs (np 4 on 2 vCPUs) ran its ranks by turns. Each rank busy-polls
while it waits (MPICH, and the interposition library's pool collectives), so a waiting rank holds its CPU
until it yields, and a rank whose wait has ended runs on only once its CPU comes back to it. The model:

- Rank r runs on CPU r % N (a fixed assignment; Linux balances ranks over the CPUs, but a rank per CPU
  more than the others stays somewhere). A CPU runs one rank at a time.
- **Work** (a compute gap, a priced pool collective's kernel time) runs in pieces of at most `slice_ns`;
  after a piece, if another rank of the CPU is waiting for it, the CPU turns to that rank (preemption) and
  the rest of the work waits its turn; a rank alone keeps the CPU.
- **A wait** (a receive, a wait of a request, a collective): the rank keeps the CPU and polls; when another
  rank of the CPU wants the CPU, the poller gives it up at its next yield point, one every `yield_ns` of
  polling from the wait's start (MPICH's point-to-point and the library's pool waits each have their own
  interval, `mpi_yield_ns` and `pool_yield_ns`), or at the end of its slice, whichever comes first. If its
  wait ends first, it goes on at once.
- **A wait that ended** while its rank was off the CPU: the rank queues for the CPU (first come, first
  served) and goes on when it gets it.
All four figures are measured on the traced machine (benchmarks/replay_cpu_sharing.py). What the model
leaves out, in the replay's notes (`NOTE`): a traced compute gap is wall time between MPI calls, so a gap
in which the rank was preempted while tracing already holds that time; message overheads stay on the
rank's own timeline (they are not queued for the CPU); the steps inside a collective that runs as network
messages are not descheduled (the rank queues once, after the call). Time is ns.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from cxlsim.errors import InputError

__all__ = ["CPUSharing", "SharedCPUs", "NOTE"]

NOTE = ("ranks share CPUs (--cpus): a traced compute gap is wall time, so preemption during tracing is in it "
        "already; message overheads are not queued for the CPU; a collective run as network messages queues "
        "for the CPU once, after the call")


@dataclass(frozen=True)
class CPUSharing:
    """The traced machine's CPUs and its scheduler's measured figures (ns)."""

    cpus: int
    slice_ns: float
    mpi_yield_ns: float
    pool_yield_ns: float

    def __post_init__(self):
        if not isinstance(self.cpus, int) or isinstance(self.cpus, bool) or self.cpus < 1:
            raise InputError(f"--cpus: expected a positive integer (the traced run's CPUs), got {self.cpus!r}")
        for flag, value in (("--cpu-slice", self.slice_ns), ("--mpi-yield", self.mpi_yield_ns),
                            ("--pool-yield", self.pool_yield_ns)):
            if not (value >= 0 and math.isfinite(value)) or (flag == "--cpu-slice" and value <= 0):
                raise InputError(f"{flag}: expected a time {'> 0' if flag == '--cpu-slice' else '>= 0'}, "
                                 f"got {value!r} ns")

    def describe(self, ranks: int) -> str:
        per_cpu = math.ceil(ranks / self.cpus)
        shared = "at most one per CPU: nothing is shared" if per_cpu <= 1 else f"up to {per_cpu} per CPU"
        return (f"{ranks} ranks on {self.cpus} CPUs ({shared}; rank r on CPU r % {self.cpus}), slice "
                f"{self.slice_ns / 1e3:g} us, a waiting rank yields every {self.mpi_yield_ns / 1e3:g} us (MPI) or "
                f"{self.pool_yield_ns / 1e3:g} us (pool collectives)")


class SharedCPUs:
    """The scheduler of one replay (see the module docstring). Ranks call, in their SimPy processes:
    `take(r)` (yield it) before running on, `wait(r, kind)` as a wait begins ('mpi', 'pool', or 'sleep': a
    sleeping rank gives its CPU up at once), and
    `work(r, ns, serve)` (yield from it) for CPU work, where `serve(ns)` is the event of `ns` on the rank's
    own timeline (the transport's compute); `done(r)` when the rank has finished."""

    def __init__(self, env, ranks: int, sharing: CPUSharing):
        self.env, self.sharing = env, sharing
        self.cpu_of = [r % sharing.cpus for r in range(ranks)]
        n = sharing.cpus
        self.holder = [None] * n     # the rank on the CPU
        self.since = [0.0] * n       # when it got the CPU
        self.polling = [None] * n    # (wait start, yield interval) while the holder waits, else None
        self.queue = [deque() for _ in range(n)]  # (rank, event, since when) waiting for the CPU, in order
        self.turn = [0] * n          # counts hand-overs, so a scheduled hand-over finds out it is stale
        self.queued_ns = [0.0] * ranks
        """Time each rank spent waiting for its CPU."""

    def take(self, r: int):
        """An event that fires when rank r holds its CPU (at once if it holds it or the CPU is free)."""
        c = self.cpu_of[r]
        event = self.env.event()
        if self.holder[c] is None:
            self._give(c, r)
        elif self.holder[c] != r:
            self.queue[c].append((r, event, self.env.now))
            if self.polling[c] is not None:
                self._schedule_yield(c)
            return event
        else:  # it held the CPU, polling: it goes on, and its scheduled yields are stale
            self.polling[c] = None
            self.turn[c] += 1
        return event.succeed()

    def wait(self, r: int, kind: str) -> None:
        """Rank r (holding its CPU) starts a wait of `kind`: it polls, yielding periodically (see the class)."""
        c = self.cpu_of[r]
        interval = {"pool": self.sharing.pool_yield_ns, "mpi": self.sharing.mpi_yield_ns, "sleep": 0.0}[kind]
        self.polling[c] = (self.env.now, interval)
        if self.queue[c]:
            self._schedule_yield(c)

    def work(self, r: int, ns: float, serve):
        """Generator: `ns` of CPU work of rank r (holding its CPU), in slices, preempted between them if
        another rank waits for the CPU."""
        c = self.cpu_of[r]
        q = self.sharing.slice_ns
        left = ns
        while left > 0:
            if self.env.now >= self.since[c] + q * (1 - 1e-12):
                if self.queue[c]:
                    yield self._preempt(c, r)
                else:
                    self.since[c] = self.env.now  # alone: a new slice
            piece = min(left, self.since[c] + q - self.env.now)
            yield serve(piece)
            left -= piece

    def done(self, r: int) -> None:
        """Rank r finished: its CPU goes to the next in line."""
        c = self.cpu_of[r]
        if self.holder[c] == r:
            self._next(c)

    def _give(self, c: int, r: int) -> None:
        self.holder[c], self.since[c], self.polling[c] = r, self.env.now, None
        self.turn[c] += 1

    def _next(self, c: int) -> None:
        """The CPU turns to the first rank in line, or is free."""
        if not self.queue[c]:
            self.holder[c], self.polling[c] = None, None
            self.turn[c] += 1
            return
        r, event, queued_at = self.queue[c].popleft()
        self.queued_ns[r] += self.env.now - queued_at
        self._give(c, r)
        event.succeed()

    def _preempt(self, c: int, r: int):
        event = self.env.event()
        self.queue[c].append((r, event, self.env.now))
        self._next(c)
        return event

    def _schedule_yield(self, c: int) -> None:
        """The polling holder gives the CPU up at its next yield point or its slice's end, whichever first."""
        start, interval = self.polling[c]
        now = self.env.now
        at = start + interval * max(1, math.ceil((now - start) / interval - 1e-12)) if interval > 0 else now
        slice_end = self.since[c] + self.sharing.slice_ns * max(1, math.ceil((now - self.since[c])
                                                                             / self.sharing.slice_ns - 1e-12))
        at = max(now, min(at, slice_end))
        turn = self.turn[c]
        self.env.timeout(at - now).callbacks.append(lambda _e: self._yielded(c, turn))

    def _yielded(self, c: int, turn: int) -> None:
        if self.turn[c] == turn and self.polling[c] is not None and self.queue[c]:
            self._next(c)
