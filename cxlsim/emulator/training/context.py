"""What a mode's loop gets on its rank: `RankContext`, and the loop's one contract.

A mode loop is ``loop(ctx: RankContext) -> None``. It trains for ``ctx.config.steps`` steps
(async and hybrid: local steps, or until their stop rule ends the run) and, per step:

- takes its batch with ``ctx.batch(step)`` (x float64 (B, features), y int labels);
- runs the forward and backward pass inside ``with ctx.pace(step) as pacer:``, which applies the
  rank's slow-down (its factor times the step's straggler multiplier) as a busy-wait of
  (factor - 1) x the CPU time the work took; a loop that hands gradients to communication in
  the middle of the backward pass calls ``pacer.catch_up()`` first, so the slow-down lands
  where the work is. A failed rank (infinite multiplier) fails in `pace`: in a synchronous mode
  it kills itself (SIGKILL, a real death); otherwise `pace` raises `RankStopped`, the loop lets
  it propagate, and the rank reports the steps it finished;
- records the step with ``ctx.log.step(start_s, compute_s, loss)`` (start_s from ``ctx.now()``
  before the step; `compute_s` is ``pacer.seconds``);
- offers its parameters with ``ctx.snapshot(global_step, params)``: a copy is kept every
  ``ctx.config.eval_every`` global steps on the ranks that `ctx.evaluates` (rank 0, unless the
  loop sets it), evaluated on the test set after the run; at its end the loop calls
  ``ctx.snapshot(global_step, params, final=True)`` (the run's final accuracy is of those).

Time is ``ctx.now()``: seconds since the run's common start (every rank past one barrier),
on CLOCK_MONOTONIC, which local processes share.
"""
from __future__ import annotations

import dataclasses
import math
import os
import signal
import time

import numpy as np


class RankStopped(Exception):
    """This rank's straggler failure came (infinite multiplier) in a mode whose other ranks go on."""


class StepLog:
    """A rank's per-step lists, in seconds since the common start (`run_record.rank_entry`'s fields)."""

    def __init__(self, clock):
        self.now = clock
        self.progress = None  # called with 1 after each step (rank 0's progress bar), if set
        self.step_s, self.compute_s, self.comm_s, self.loss, self.t_end_s = [], [], [], [], []

    def step(self, start_s: float, compute_s: float, loss: float) -> None:
        """Close a step that began at `start_s` and spent `compute_s` computing; the rest was communication."""
        end = self.now()
        self.step_s.append(end - start_s)
        self.compute_s.append(compute_s)
        self.comm_s.append(max(0.0, end - start_s - compute_s))
        self.loss.append(float(loss))
        self.t_end_s.append(end)
        if self.progress is not None:
            self.progress(1)

    def __len__(self) -> int:
        return len(self.t_end_s)


class Pacer:
    """One step's compute, slowed down by `factor`: each `catch_up` busy-waits until (factor - 1) x the
    work's CPU time so far has been waited (wall time). The wait spins on the monotonic clock
    (calibrated by construction: it ends at its deadline whatever the spin costs) and keeps the CPU
    busy, as a slower device keeps the step busy. While `yield_while()` is true (ddp: a bucket is
    waiting on the rank's communication thread) each poll calls sched_yield, which hands the GIL
    and the CPU to that thread, as the device would leave the network to its own engine; else a
    thread gets the GIL only after CPython's switch interval. On an idle core the paced step
    takes factor x the work; `seconds` (the step's compute wall time) is never below factor x
    `work_cpu_s`, up to the disagreement of the thread CPU clock and the wall clock (about 1 us)."""

    def __init__(self, factor: float, yield_while=None):
        self.factor = factor
        self.yield_while = yield_while
        self.seconds = 0.0
        self.waited_s = 0.0     # wall time spent busy-waiting
        self.spin_cpu_s = 0.0   # CPU time the busy-waits took (not work)
        self.work_cpu_s = 0.0   # CPU time of the work itself, at the last catch_up

    def __enter__(self) -> "Pacer":
        self.cpu0 = time.thread_time()
        self.wall0 = time.perf_counter()
        return self

    def catch_up(self) -> None:
        cpu = time.thread_time()
        self.work_cpu_s = cpu - self.cpu0 - self.spin_cpu_s
        owed = (self.factor - 1.0) * self.work_cpu_s - self.waited_s
        if owed > 0:
            start = time.perf_counter()
            deadline = start + owed
            now = start
            busy = self.yield_while
            while now < deadline:
                if busy is not None and busy():
                    os.sched_yield()  # drops the GIL and the CPU to this rank's communication thread
                now = time.perf_counter()
            self.waited_s += now - start
            self.spin_cpu_s += time.thread_time() - cpu

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.catch_up()
        self.seconds = time.perf_counter() - self.wall0


@dataclasses.dataclass(eq=False)
class RankContext:
    """Everything one rank's loop needs (see the module docstring for the contract)."""

    comm: object            # the rank's PoolComm (allreduce, allreduce_start/wait, broadcast, barrier)
    config: object          # the run's TrainConfig
    model: object           # a models.Model
    data: object            # a data.Dataset
    params0: np.ndarray     # the initial flat parameters, the same on every rank
    multipliers: np.ndarray  # steps x ranks straggler multipliers (config.multipliers())
    synchronous: bool       # a failed rank ends the run (True) or stops alone (False)
    shared: object = None   # what the mode's `shared` hook yielded in the launcher (async, hybrid)
    t0: float = 0.0         # the common start, time.perf_counter() seconds

    def __post_init__(self):
        self.rank = self.comm.rank
        self.nranks = self.comm.size
        self.evaluates = self.rank == 0
        self.log = StepLog(self.now)
        self.snapshots = []  # (t_s, global step, params copy)
        self.final_params = None  # the loop's last parameters (their sha256 goes into train.json)
        self.mode_stats = None  # a mode's own counts (JSON-ready dict), recorded per rank in train.json
        self.comm_busy = None  # a loop's communication thread has work (a callable), for the pacer

    def now(self) -> float:
        """Seconds since the common start."""
        return time.perf_counter() - self.t0

    def batch(self, step: int):
        """This rank's training batch at `step`: (x, y)."""
        return self.data.batch(step, self.rank, self.nranks, self.config.batch_size)

    def factor(self, step: int) -> float:
        """This rank's compute slow-down at `step`: its factor x the straggler multiplier (inf: failed).
        Past the matrix's rows (async and hybrid: a fast rank runs more local steps than config.steps)
        the rows repeat from the first; a rank failed in the last row stays failed."""
        rows = self.multipliers.shape[0]
        column = self.multipliers[:, self.rank]
        row = step if step < rows else (rows - 1 if math.isinf(column[-1]) else step % rows)
        return self.config.factors[self.rank] * float(column[row])

    def pace(self, step: int) -> Pacer:
        """The paced compute of `step` (a context manager); a failed rank fails here (see the module docstring)."""
        factor = self.factor(step)
        if math.isinf(factor):
            if self.synchronous:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RankStopped(f"rank {self.rank} failed at step {step} (--fail)")
        return Pacer(factor, self.comm_busy)

    def snapshot(self, global_step: int, params: np.ndarray, t_s: float | None = None, final: bool = False) -> None:
        """Keep a copy of `params` for evaluation if this rank evaluates and `global_step` is due
        (final=True: the loop's last parameters, always kept; final_accuracy is theirs)."""
        if self.evaluates and (final or global_step % self.config.eval_every == 0):
            if self.snapshots and self.snapshots[-1][1] == global_step:
                return
            self.snapshots.append((self.now() if t_s is None else t_s, int(global_step), np.array(params, copy=True)))
