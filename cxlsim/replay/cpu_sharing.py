"""Ranks sharing CPUs (`cxlsim replay --cpus N`): the traced run's scheduler (Linux's EEVDF) in the DES.

A trace recorded with more ranks than CPUs (np 4 on 2 vCPUs) ran its ranks by turns. Each rank busy-polls
while it waits (MPICH, and the interposition library's pool collectives), so every rank stays runnable and
a waiting rank holds its CPU until it yields. Which rank runs next is EEVDF's choice, which the model makes:

- Rank r runs on CPU `cpu_map[r]`, or r % N without a map (busy-polling ranks never leave a CPU idle, so
  the kernel does not move them: an 8-byte ring at np 3-4 on 2 CPUs ran 2000 iterations without a move; but
  it may place them unevenly, 3 ranks on one CPU and 1 on the other at a load of 11, which the run's
  observed map gives). A CPU runs one rank at a time.
- **CPU time** (`vruntime`): every rank on a CPU's run queue has `v`, the CPU time it has been counted (ns;
  the ranks have equal weights), and a virtual deadline `d`. A rank is *eligible* when `v` is at most the
  mean `v` of the CPU's runnable ranks (its lag, fair share minus CPU time received, is >= 0). The CPU
  runs the eligible rank of earliest `d` (ties: not the rank that just ran, then the lower rank).
- **Work** (a compute gap, a priced pool collective's kernel time) runs until `v` reaches `d`; then
  `d = v + slice_ns` and the CPU picks again (a rank alone keeps it).
- **A wait** (a receive, a wait of a request, a collective): the rank keeps the CPU and polls, calling
  sched_yield every `yield_ns` of polling (MPICH's point-to-point and the library's pool waits each have
  their own interval, `mpi_yield_ns` and `pool_yield_ns`; where the ranks do not outnumber the CPUs the
  library's pool wait first spins `pool_spin_ns`, its 4096 polls, as cxlsim/mpi/pools.c does, and then yields
  at its interval). A yield forfeits the rest of a slice only to tasks of the yielder's own scheduling group
  (one session under the kernel's autogroup), and MPICH's launcher starts each rank in a session of its own:
  so a yield hands the CPU over when the yielder is not eligible (it has had more CPU time than the mean) or
  its slice ran out, to the eligible rank of earliest deadline, and an eligible rank inside its slice polls
  on (`yield_forfeits` False). Where the ranks share a group (`yield_forfeits`), a yield of an eligible rank
  forfeits the rest of its slice (`v = d`, then `d += slice_ns`), and the CPU picks again, among every
  runnable rank: one still polling polls until its own next yield; such a rank is counted a slice it did
  not use, and waits behind the others' CPU time before it is eligible again. At a yield the rank is behind
  only with less CPU time than the mean, strictly (on the kernel's clock CPU times are never equal; here
  polls are whole intervals beside work of no CPU time, so ties come up, and the rank that just had its
  turn is then not the one behind). A rank entering a `sleep` leaves the run queue, and rejoins with the
  lag it left with.
- **How a wait ends** depends on who polls. The library's pool wait checks its flag and then yields
  (cxl_ops.h cxl_backoff), so it goes on as soon as its wait is over, and a rank whose wait ended while it
  was off the CPU runs on when it is picked. MPICH's wait loop (MPIR_Wait_state, MPID_Progress_wait in ch4)
  is a progress poll, then a sched_yield, then the check whether the request is complete: the poll that
  sees the message is followed by a yield, which hands the CPU over if the rank is not behind, its wait
  done (it goes on when it runs again); and a rank picked after its message came while it was off the CPU
  first polls once (an interval), then yields. So on a shared CPU an MPICH message takes three turns: the
  sender's poll after its send, the receiver's poll that sees it (whose yield hands over), the sender's
  poll again, then the receiver goes on (measured: an 8-byte ping-pong of two ranks pinned to one CPU
  switched each rank away 2.93 times a round trip; the model 3.00). A message that landed before its
  receive began is found by the receive's first poll, and its yield (at an interval) decides the same way
  (MPID_Recv completes at once only from the unexpected queue, which an earlier poll fills). A wait whose
  end is its own (kind 'local': a blocking send, a wait on send requests, a test) ends with its event,
  without a yield: an eager send is complete within the call, MPIR_Wait does not poll a complete request,
  and MPI_Test does not yield. Where
  the rank is alone on its CPU nothing is handed over and it goes on at once.
- **A large send waits for its receiver's poll**: MPICH sends CMA_BYTES or more through its CMA path, where
  the receiver reads the data in its own progress and ACKs it, and only the ACK completes the send. So a
  send of that size completes once its receiver, after the match, polls in an MPI wait (at once if it is
  polling on its CPU; else when it next enters one, or is picked in one: a computing rank, or one in the
  library's pool wait, runs no MPICH progress); the ACK's own latency is left out. Measured (benchmarks/
  replay_cpu_sharing.py part 6, load 3.8): a rank that computes 50 us, then exchanges with a rank on the
  other CPU, waited 2.4 us a call for 4 KiB and 35.1 us for 32 KiB, and 35.7 and 171.9 us with a busy loop
  beside its peer.
- **A hand-over costs CPU time** (`switch_ns`): each time a CPU turns from one task to another, the task that gets
  it first pays the context switch and the refill of its cache lines, counted as its CPU time, then goes on (a
  rank picked in a wait polls from then on). The cost varies from one hand-over to the next (`switch_cv`: a gamma
  draw of that mean and CV, seeded), and that is what lets two CPUs drift apart: where each CPU holds two ranks
  (np 4 on 2 vCPUs), a CPU that falls behind leaves the other CPU's ranks both waiting, and they hand their CPU
  back and forth, at every poll of the library's pool wait (`pool_yield_ns`: one flag check and one
  sched_yield, about 0.25 us here), until it catches up. With a constant cost (or none) the CPUs stay in step and
  hand over once a call, 0.50 a rank; measured at 0,0,1,1 they hand over 0.75-0.85 times a rank and barrier, and
  0.64-0.85 a call of the others. benchmarks/replay_cpu_sharing.py fits the mean to two ranks on one CPU and the CV to
  the hand-overs of four ranks on 0,0,1,1.
- The rank's first turn: the ranks start with `v = 0`, `d = slice_ns`, in rank order.
- **Other processes** (`foreign`, measured per run: the mean weight of the runnable tasks other than the
  ranks on each CPU, in nice-0 tasks, each weighted as Linux weights its nice level: nice 0 is 1, nice 15
  0.035; cxlsim.replay.rank_cpus): on a CPU with weight W > 0, one more task, always runnable, of weight W.
  EEVDF weighs CPU time: a task of weight w is counted `ns / w` for `ns` it runs, its deadline is `v +
  slice_ns / w`, and the mean that decides eligibility is weighted. So beside it a rank gets 1 / (1 + W)
  of a CPU it would have alone (where yields forfeit, a rank that yields waits about W slices); W
  nice-0 tasks, or one of weight W, alike. One task per CPU stands for them all: their own sleeps are
  not modelled, only their measured mean weight.
The figures are measured on the traced machine (benchmarks/replay_cpu_sharing.py: the slice from two busy
loops on one CPU, each yield interval the one with which this model gives two ranks on one CPU their
measured time); whether a yield forfeits across sessions is measured there too (a poller yielding every
20 us beside a busy loop on its CPU got 0.5% of it in the busy loop's session, 29-31% in its own). A priced pool
collective waits where the library's kernel waits (cxlsim.replay.pool_steps: its steps' flags, claims and a bcast's
root that waits for nobody). What the model leaves out, in the replay's notes (`NOTE`): a traced compute gap is wall time between
MPI calls, so a gap in which the rank was preempted while tracing already holds that time; message
overheads stay on the rank's own timeline (they are not counted as CPU time); the steps inside a
collective that runs as network messages are not descheduled (the rank polls once, for the whole call);
no rank moves between CPUs; other processes on the machine are one always-runnable task per CPU of their
measured mean weight (`foreign`), or not in the model without it. Time is ns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cxlsim.errors import InputError

__all__ = ["CPUSharing", "SharedCPUs", "NOTE", "CMA_BYTES"]

CMA_BYTES = 8192
"""MPICH's CMA threshold (MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD's default): a message of this size or more is read by
the receiver in its own progress (process_vm_readv), which then sends an ACK, and only the ACK completes the
send (ch4 shm/ipc ipc_control.c); a smaller one is eager, complete once written."""

NOTE = ("ranks share CPUs (--cpus, EEVDF by CPU time): a traced compute gap is wall time, so preemption during "
        "tracing is in it already; message overheads are not counted as CPU time; a collective run as network "
        "messages polls once, for the whole call; the ranks keep their CPUs; other processes are one always-runnable "
        "task per CPU of their measured weight (--cpu-foreign), or absent without it")


def _slack(now: float, ns: float) -> float:
    """How far apart two CPU times (ns) near `ns` may be and still count as equal at clock `now` (ns): they are
    sums of clock differences, which carry the rounding of floats of the clock's size (a piece shorter than
    this would not move the clock)."""
    return 1e-6 + 1e-12 * max(abs(now), abs(ns))


@dataclass(frozen=True)
class CPUSharing:
    """The traced machine's CPUs and its scheduler's measured figures (ns)."""

    cpus: int
    slice_ns: float
    mpi_yield_ns: float
    pool_yield_ns: float
    cpu_map: tuple | None = None
    """The CPU each rank ran on (rank r on cpu_map[r]); None: rank r on CPU r % cpus."""
    foreign: tuple | None = None
    """Per CPU, the mean weight of the other runnable tasks on it (nice-0 tasks, measured); None: none."""
    pool_spin_ns: float = 0.0
    """How long a wait of the library's pool spins before its first yield where the ranks do not outnumber the
    CPUs (4096 polls, measured; 0: it yields at `pool_yield_ns` from the start, as it does where they do)."""
    switch_ns: float = 0.0
    """CPU time a hand-over costs the task that gets the CPU, its mean (ns): the context switch and the refill of the
    task's cache lines, counted before the task goes on (0: a hand-over is free)."""
    switch_cv: float = 0.0
    """The hand-over cost's coefficient of variation: each hand-over draws its cost from a gamma distribution of mean
    `switch_ns` and this CV, seeded by `seed` (0: every hand-over costs the mean)."""
    seed: int = 0
    """Seed of the hand-over costs' draws (the run's seed; only drawn with `switch_cv` > 0)."""
    yield_forfeits: bool = False
    """Whether a yield forfeits the rest of the yielder's slice to the other tasks on its CPU. It does only among
    tasks of one scheduling group (one session under the kernel's autogroup, or any tasks with autogroup off).
    MPICH's launcher starts every rank in a session of its own, so across ranks, and against other processes, a
    yield forfeits nothing (False): measured, a poller yielding every 20 us beside a busy loop on one CPU got
    0.5% of it in the busy loop's session and 29-31% (the busy loop 32-34%) in its own."""

    def __post_init__(self):
        if not isinstance(self.cpus, int) or isinstance(self.cpus, bool) or self.cpus < 1:
            raise InputError(f"--cpus: expected a positive integer (the traced run's CPUs), got {self.cpus!r}")
        if self.cpu_map is not None:
            bad = [c for c in self.cpu_map if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c < self.cpus]
            if bad or not self.cpu_map:
                raise InputError(f"--cpu-map: expected one CPU in 0..{self.cpus - 1} per rank, got "
                                 f"{list(self.cpu_map)!r}")
        if self.foreign is not None:
            bad = [f for f in self.foreign if isinstance(f, bool) or not isinstance(f, (int, float))
                   or not (0 <= f and math.isfinite(f))]
            if bad or len(self.foreign) != self.cpus:
                raise InputError(f"--cpu-foreign: expected one weight >= 0 per CPU ({self.cpus}), got "
                                 f"{list(self.foreign)!r}")
        if not (self.pool_spin_ns >= 0 and math.isfinite(self.pool_spin_ns)):
            raise InputError(f"--pool-spin: expected a time >= 0, got {self.pool_spin_ns!r} ns")
        for flag, value in (("--cpu-switch", self.switch_ns), ("--cpu-switch-cv", self.switch_cv)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value >= 0 and math.isfinite(value)):
                raise InputError(f"{flag}: expected a figure >= 0, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise InputError(f"--seed: expected an integer, got {self.seed!r}")
        for flag, value in (("--cpu-slice", self.slice_ns), ("--mpi-yield", self.mpi_yield_ns),
                            ("--pool-yield", self.pool_yield_ns)):
            if not (value > 0 and math.isfinite(value)):
                why = "" if flag == "--cpu-slice" else " (a poll between yields takes time)"
                raise InputError(f"{flag}: expected a time > 0{why}, got {value!r} ns")

    def cpu_of(self, ranks: int) -> list:
        """The CPU of each of `ranks` ranks (InputError if the map is of another rank count)."""
        if self.cpu_map is None:
            return [r % self.cpus for r in range(ranks)]
        if len(self.cpu_map) != ranks:
            raise InputError(f"--cpu-map: {len(self.cpu_map)} CPUs given, one per rank expected: the trace has "
                             f"{ranks} ranks")
        return list(self.cpu_map)

    def describe(self, ranks: int) -> str:
        on = self.cpu_of(ranks)
        per_cpu = max(on.count(c) for c in set(on))
        shared = "at most one per CPU: nothing is shared" if per_cpu <= 1 else f"up to {per_cpu} per CPU"
        mapped = (f"rank r on CPU r % {self.cpus}" if self.cpu_map is None
                  else "ranks on CPUs " + ",".join(str(c) for c in on) + " (--cpu-map)")
        others = ("" if not self.foreign_tasks() else "; other runnable tasks of weight "
                  + ", ".join(f"{f:.2f}" for f in self.foreign) + " nice-0 tasks per CPU (--cpu-foreign)")
        return (f"{ranks} ranks on {self.cpus} CPUs ({shared}; {mapped}), EEVDF by CPU "
                f"time, slice {self.slice_ns / 1e3:g} us, a waiting rank yields (forfeiting its slice) every "
                f"{self.mpi_yield_ns / 1e3:g} us (MPI) or {self.pool_yield_ns / 1e3:g} us (pool collectives)"
                + (f", a pool wait spinning {self.pool_spin_ns / 1e3:g} us first where the ranks do not outnumber "
                   "the CPUs" if self.pool_spin_ns else "")
                + (f", a hand-over costing {self.switch_ns / 1e3:g} us of CPU time"
                   + (f" (gamma, CV {self.switch_cv:g}, seed {self.seed})" if self.switch_cv else "")
                   if self.switch_ns else "") + others)

    def foreign_tasks(self) -> list:
        """[(CPU, its other tasks' weight)] for every CPU with a weight above 0."""
        return [(c, f) for c, f in enumerate(self.foreign or ()) if f > 0]


class SharedCPUs:
    """The scheduler of one replay (see the module docstring). Ranks call, in their SimPy processes:
    `take(r)` (yield it) before running on; `wait(r, kind)` as a wait begins ('mpi': MPICH's wait for a receive
    or a collective; 'local': one whose end is its own, a wait for sends alone or a test; 'pool': the library's pool
    wait; or 'sleep': a sleeping rank leaves the run queue); `work(r, ns, serve)` (yield from it) for CPU work, where
    `serve(ns)` is the event of `ns` on the rank's own timeline (the transport's compute); `done(r)` when
    the rank has finished."""

    def __init__(self, env, ranks: int, sharing: CPUSharing):
        self.env, self.sharing = env, sharing
        n = sharing.cpus
        others = sharing.foreign_tasks()
        self.ranks = ranks
        self.cpu_of = sharing.cpu_of(ranks) + [c for c, _ in others]
        ranks += len(others)  # each CPU's other processes: one task after the ranks
        self.holder = [None] * n       # the rank on the CPU
        self.since = [0.0] * n         # when the holder's CPU time was last brought up to date
        self.runnable = [[] for _ in range(n)]  # the CPU's run queue (the holder included)
        self.polling = [None] * n      # (poll start, yield interval) while the holder polls, else None
        self.turn = [0] * n            # counts the CPU's decisions, so a scheduled yield finds out it is stale
        self.weight = [1.0] * self.ranks + [w for _, w in others]
        self.v = [0.0] * ranks
        """CPU time each task has been counted (ns over its weight; a yield adds the rest of its slice)."""
        self.deadline = [sharing.slice_ns / w for w in self.weight]
        self.lag = [0.0] * ranks       # at a sleep: mean CPU time minus its own, restored when it rejoins
        self.kind = ["mpi"] * ranks    # the wait each rank polls in
        self.polling_since = [None] * ranks  # when the rank's wait began (None: not in a wait)
        self.polls_to_end = [False] * ranks  # the rank's wait ends only at a poll (MPICH's receive; not a send)
        self.poll_waiters = [[] for _ in range(ranks)]  # events for each rank's next poll (next_poll)
        self.ended_ranks = set()       # ranks that finished (their MPI_Finalize progresses: next_poll fires)
        self.ended = [None] * ranks    # an MPI wait's event that ended while the rank polled: the next yield decides
        self.unseen = [False] * ranks  # an MPI wait ended while the rank was off its CPU: it polls once when picked
        self.wants = [None] * ranks    # (event, since when): the rank has something to run, off the CPU
        self.started = [False] * ranks
        self.queued_ns = [0.0] * ranks
        """Time each rank, with something to run, waited for its CPU."""
        self.ran_ns = [0.0] * ranks
        """CPU time each rank ran (ns; without the forfeits a yield counts)."""
        self.switches = [0] * ranks
        """Times each rank's CPU turned to another task while it stayed runnable (a preemption or a yield that
        handed the CPU over: Linux's nonvoluntary context switches)."""
        self.rng = np.random.default_rng(sharing.seed) if sharing.switch_cv > 0 else None
        self.finished = 0
        self.progress = 0              # counts the ranks' turns and pieces of work: a stuck replay makes none
        self.others = others           # started at the first rank's first turn, so the ranks start first

    FOREIGN_IDLE_TURNS = 10000
    """A CPU's other tasks stop after this many slices without a rank's turn or work (a replay whose ranks are
    stuck, or asleep for over ~this many slices, runs out of events as it would without them)."""

    def _foreign(self, f: int):
        """Generator: the other tasks of CPU cpu_of[f] (see the module): always runnable while any rank has not
        finished, a slice at a time."""
        idle, seen = 0, -1
        yield self.take(f)
        while self.finished < self.ranks and idle < self.FOREIGN_IDLE_TURNS:
            yield from self.work(f, self.sharing.slice_ns, self.env.timeout)
            idle, seen = (idle + 1, seen) if seen == self.progress else (0, self.progress)
        self.done(f)

    # the ranks' calls

    def take(self, r: int):
        """An event that fires when rank r holds its CPU with its wait over (at once if it holds it)."""
        c = self.cpu_of[r]
        event = self.env.event()
        switching = 0.0
        self.progress += r < self.ranks
        for i in range(len(self.others)):
            self.env.process(self._foreign(self.ranks + i))
        self.others = []
        if r not in self.runnable[c]:
            self._join(c, r)
        if self.holder[c] is None:
            self.holder[c], self.since[c], self.polling[c] = r, self.env.now, None
            self.turn[c] += 1
        elif self.holder[c] == r:
            if self._sees_at_yield(c, r):  # MPICH: the poll that sees the end is followed by a yield
                self.ended[r] = event
                return event
            if self.polling[c] is not None:  # still in the hand-over that gave it the CPU: it goes on after it
                switching = self.polling[c][0] - self.env.now
            self.polling[c] = None  # it goes on, and its scheduled yields are stale
            self.turn[c] += 1
        else:
            self.wants[r] = (event, self.env.now)
            self.unseen[r] = self.polls_to_end[r] and self.polling_since[r] is not None
            return event
        self.polling_since[r] = None
        return self._resume(event, switching)

    def wait(self, r: int, kind: str) -> None:
        """Rank r (holding its CPU) starts a wait of `kind`: it polls and yields (see the module), or sleeps."""
        c = self.cpu_of[r]
        if kind == "sleep":
            self._sync(c)
            self.lag[r] = self._mean(c) - self.v[r]
            self.runnable[c].remove(r)
            self._next(c, self._pick(c))
            return
        self.kind[r] = "mpi" if kind == "local" else kind
        self.polling_since[r], self.polls_to_end[r] = self.env.now, kind == "mpi"
        if kind != "pool":  # MPICH's progress polls (the library's pool wait does not run it)
            self._polled(r)
        self._poll(c, r, fresh=True)

    def work(self, r: int, ns: float, serve):
        """Generator: `ns` of CPU work of rank r (holding its CPU), up to its deadline at a time, the CPU
        picking again at each deadline."""
        c = self.cpu_of[r]
        left = ns
        while left > 0:
            self._sync(c)
            if self.v[r] >= self.deadline[r] - _slack(self.env.now, self.deadline[r]):
                self.deadline[r] = self.v[r] + self.sharing.slice_ns / self.weight[r]
                picked = self._pick(c)
                if picked != r:
                    event = self.env.event()
                    self.wants[r] = (event, self.env.now)
                    self._next(c, picked)
                    yield event
                    continue
            piece = min(left, (self.deadline[r] - self.v[r]) * self.weight[r])
            self.progress += r < self.ranks
            yield serve(piece)
            left -= piece

    def done(self, r: int) -> None:
        """Rank r finished: it leaves its CPU's run queue (MPI_Finalize runs MPICH's progress: it polls, now and for a
        message that lands later)."""
        c = self.cpu_of[r]
        self._polled(r)
        self.ended_ranks.add(r)
        self.finished += r < self.ranks
        self._sync(c)
        self.runnable[c].remove(r)
        if self.holder[c] == r:
            self._next(c, self._pick(c))

    # the scheduler

    def _join(self, c: int, r: int) -> None:
        if self.runnable[c] and self.started[r]:  # a sleeper rejoins with the lag it left with
            self._sync(c)
            self.v[r] = self._mean(c) - self.lag[r]
            self.deadline[r] = max(self.deadline[r], self.v[r] + self.sharing.slice_ns)
        elif self.runnable[c]:  # a newcomer with no lag
            self._sync(c)
            self.v[r] = self._mean(c)
            self.deadline[r] = self.v[r] + self.sharing.slice_ns / self.weight[r]
        self.started[r] = True
        self.runnable[c].append(r)
        if self.polling[c] is not None:
            self._schedule_yield(c)

    def _sync(self, c: int) -> None:
        """Count the holder's CPU time up to now."""
        h = self.holder[c]
        if h is not None:
            self.v[h] += (self.env.now - self.since[c]) / self.weight[h]
            self.ran_ns[h] += self.env.now - self.since[c]
        self.since[c] = self.env.now

    def _mean(self, c: int) -> float:
        """The weighted mean CPU time of the CPU's runnable tasks."""
        queue = self.runnable[c]
        return sum(self.v[x] * self.weight[x] for x in queue) / sum(self.weight[x] for x in queue)

    def _behind(self, c: int, r: int) -> bool:
        """Whether rank r has had less CPU time than the mean of its CPU's runnable tasks (a yield point's test: on
        the kernel's clock CPU times are never equal; in the model a poll is whole yield intervals beside work of
        no CPU time, so they often are, and the rank that has just had its turn is then not the one behind)."""
        mean = self._mean(c)
        return self.v[r] < mean - _slack(self.env.now, mean)

    def _pick(self, c: int, besides=None):
        """EEVDF's choice among the CPU's runnable ranks (CPU times up to date): the eligible rank of earliest
        deadline, not the holder on a tie, then the lower rank; None if the run queue is empty. `besides`: a rank
        to pick only if no other is eligible."""
        queue = self.runnable[c]
        if not queue:
            return None
        mean = self._mean(c)
        eligible = [x for x in queue if self.v[x] <= mean + _slack(self.env.now, mean)]
        others = [x for x in eligible if x != besides]
        return min(others or eligible, key=lambda x: (self.deadline[x], x == self.holder[c], x))

    def _next(self, c: int, r) -> None:
        """The CPU turns to rank r (None: it is idle)."""
        h = self.holder[c]
        if h is not None and h != r and h in self.runnable[c]:
            self.switches[h] += 1
        self.turn[c] += 1
        self.polling[c] = None
        if r is None:
            self.holder[c] = None
            return
        self._run(c, r, self._switch_cost() if h is not None and h != r else 0.0)

    def _switch_cost(self) -> float:
        """CPU time of one hand-over (ns): the mean, or a gamma draw of the figures' CV."""
        mean = self.sharing.switch_ns
        if self.rng is None or mean <= 0:
            return mean
        shape = 1.0 / self.sharing.switch_cv ** 2
        return float(self.rng.gamma(shape, mean / shape))

    def _resume(self, event, after: float):
        """`event` succeeds after `after` ns (at once if none): the rest of a hand-over, on the rank's CPU time."""
        if after > 0:
            self.env.timeout(after).callbacks.append(lambda _e: event.succeed())
            return event
        return event.succeed()

    def _run(self, c: int, r: int, switching: float = 0.0) -> None:
        """The CPU runs rank r from now, after a hand-over of `switching` ns (counted as r's CPU time)."""
        self.holder[c], self.since[c] = r, self.env.now
        self.turn[c] += 1
        if self.polling_since[r] is not None and self.kind[r] == "mpi":  # back in its MPI wait: it polls
            self._polled(r)
        if self.wants[r] is not None:
            event, since = self.wants[r]
            self.wants[r] = None
            self.queued_ns[r] += self.env.now - since
            if self.unseen[r] and len(self.runnable[c]) > 1:  # MPICH: back from its yield, it polls, then yields
                self.unseen[r], self.ended[r] = False, event
                self._poll(c, r, after=switching)
                return
            self.unseen[r], self.polling_since[r] = False, None
            self._resume(event, switching)
        else:  # picked while still waiting: it polls on
            self._poll(c, r, after=switching)

    def next_poll(self, r: int):
        """An event that fires at rank r's next poll of MPICH's progress: at once if it holds its CPU in an MPI wait
        (it polls), else when it next enters one or is picked while in one (a computing rank, or one in the
        library's pool wait, does not run MPICH's progress)."""
        event = self.env.event()
        if r in self.ended_ranks or (self.polling_since[r] is not None and self.kind[r] == "mpi"
                                     and self.holder[self.cpu_of[r]] == r):
            return event.succeed()
        self.poll_waiters[r].append(event)
        return event

    def _polled(self, r: int) -> None:
        for event in self.poll_waiters[r]:
            event.succeed()
        self.poll_waiters[r] = []

    def _sees_at_yield(self, c: int, r: int) -> bool:
        """Whether rank r, polling on its CPU in an MPI wait that has just ended, goes on only after its next yield
        (MPICH's wait loop, MPIR_Wait_state: a progress poll, then MPID_Progress_wait's sched_yield, then the
        completion check; see the module): where another task shares its CPU, in a wait whose end a poll must see
        (not a 'local' one)."""
        return (self.polls_to_end[r] and self.polling_since[r] is not None and self.polling[c] is not None
                and len(self.runnable[c]) > 1)

    def _poll(self, c: int, r: int, fresh: bool = False, after: float = 0.0) -> None:
        """Rank r polls from now (or once the `after` ns of its hand-over are over): a `fresh` wait of the library's pool, where the ranks do not outnumber the CPUs,
        first spins `pool_spin_ns` (cxlsim/mpi/pools.c: 4096 polls before it yields); a wait taken up again after
        a yield yields on at its interval."""
        pool = self.kind[r] == "pool"
        interval = self.sharing.pool_yield_ns if pool else self.sharing.mpi_yield_ns
        spins = fresh and pool and self.sharing.pool_spin_ns > 0 and self.ranks <= self.sharing.cpus
        self.polling[c] = (self.env.now + after, self.sharing.pool_spin_ns if spins else interval, interval)
        self.turn[c] += 1
        self._schedule_yield(c)

    def _schedule_yield(self, c: int) -> None:
        """The polling holder's next decision: its next yield point, or its deadline if that comes first;
        none while it is alone on the CPU."""
        if len(self.runnable[c]) < 2:
            h = self.holder[c]
            if self.ended[h] is not None:  # alone again: the seen end goes on without a hand-over
                event, self.ended[h], self.polling_since[h] = self.ended[h], None, None
                self.polling[c] = None
                self.turn[c] += 1
                event.succeed()
            return
        start, first, interval = self.polling[c]
        now = self.env.now
        if first == interval:
            at = start + interval * max(1, math.ceil((now - start) / interval - 1e-12))
        else:  # a spin first, then the yield interval
            base = start + first
            at = base if now <= base else base + interval * math.ceil((now - base) / interval - 1e-12)
        self._sync(c)
        h = self.holder[c]
        at = max(now, min(at, now + self.deadline[h] - self.v[h]))
        self.turn[c] += 1
        turn = self.turn[c]
        self.env.timeout(at - now).callbacks.append(lambda _e: self._yield_point(c, turn))

    def _yield_point(self, c: int, turn: int) -> None:
        if self.turn[c] != turn or self.polling[c] is None:
            return
        r = self.holder[c]
        self._sync(c)
        if self.v[r] >= self.deadline[r] - _slack(self.env.now, self.deadline[r]):  # its slice ran out while it polled
            self.deadline[r] = self.v[r] + self.sharing.slice_ns
            picked = self._pick(c)
        elif not self._behind(c, r):  # not behind the CPU's mean: the yield hands the CPU over
            picked = self._pick(c, besides=r)
        elif self.sharing.yield_forfeits:  # sched_yield within one group: the rest of the slice is forfeited
            self.v[r] = self.deadline[r]
            self.deadline[r] += self.sharing.slice_ns
            picked = self._pick(c)
        else:  # across groups the yield moves nothing: an eligible rank inside its slice keeps its CPU
            picked = r
        ended = self.ended[r]
        if ended is not None:  # its wait ended at the poll before this yield (MPICH): seen, it goes on when it runs
            self.ended[r], self.polling_since[r] = None, None
        if picked == r and ended is not None:
            self.polling[c] = None
            self.turn[c] += 1
            ended.succeed()
        elif picked == r:  # it polls on, to its next yield
            self.polling[c] = (self.env.now, self.polling[c][2], self.polling[c][2])
            self._schedule_yield(c)
        else:
            if ended is not None:
                self.wants[r] = (ended, self.env.now)
            self._next(c, picked)
