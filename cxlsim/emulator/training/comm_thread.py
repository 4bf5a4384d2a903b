"""A rank's communication thread: the allreduces of gradient slices, one after the other, off the main thread.

sync hands it the whole gradient after the backward pass (`PoolComm.allreduce`); ddp hands it
buckets, during the backward pass or after it (`allreduce_start`, then `allreduce_wait`). The
pool's waits release the GIL and spin on the flags. Why the main thread does not wait itself:
Linux charges a thread for its spinning, so a rank whose one thread computes and then spins
for the other rank has used much CPU when its next compute starts and loses its CPU to other
runnable work on a busy host; its main thread sleeping in the queue instead of spinning kept
it. On this host under load (load average 8 on 2 CPUs) the same sync run of cnn-small made
8,400-9,500 samples/s with the allreduce on the main thread and 41,000-44,000 with it here.

While the thread runs, `fast_gil_switching` lowers CPython's GIL switch interval (5 ms, longer
than a step here) to 0.1 ms: the model's numpy code holds the GIL most of the time, and the
thread must take the GIL back after each reduction to hand it over.
"""
from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time

import numpy as np

from cxlsim.errors import RunError

SWITCH_INTERVAL_S = 1e-4


@contextlib.contextmanager
def fast_gil_switching(interval_s: float = SWITCH_INTERVAL_S):
    """CPython's GIL switch interval at `interval_s` inside the block, restored after it."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


class CommThread:
    """Allreduces the (lo, hi) slices handed to `submit`, in order, from `grad` into `total`
    (split_phase: allreduce_start + allreduce_wait, else one allreduce call).

    It times its hand-offs (`time.perf_counter`, s): per `wait`, the time a slice waited for the
    thread to start it after it was submitted (or after the thread's previous call ended, if
    later), summed over the slices of that wait, plus the time from the last call's end until
    `wait` returned. `handoff_s` lists one such total per `wait`: the time of the rank's
    communication that is neither a pool call nor the main thread's own work."""

    def __init__(self, comm, grad: np.ndarray, total: np.ndarray, timeout_s: float, split_phase: bool):
        self.comm, self.grad, self.total, self.timeout_s = comm, grad, total, timeout_s
        self.split_phase = split_phase
        self.jobs = queue.Queue()
        self.done = queue.Queue()
        self.submitted = self.completed = 0
        self.submit_s, self.call_s = [], []  # per slice: its submit time; its call's (start, end)
        self.handoff_s = []
        self.thread = threading.Thread(target=self._run, name="cxlsim-comm", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            span = self.jobs.get()
            if span is None:
                return
            start = time.perf_counter()
            lo, hi = span
            try:
                if self.split_phase:
                    self.comm.allreduce_start(self.grad[lo:hi], self.total[lo:hi])
                    self.comm.allreduce_wait()
                else:
                    self.comm.allreduce(self.grad[lo:hi], self.total[lo:hi])
            except BaseException as exc:  # the main thread re-raises it
                self.done.put(exc)
                return
            self.call_s.append((start, time.perf_counter()))
            self.completed += 1
            self.done.put(span)

    def submit(self, span) -> None:
        self.submitted += 1
        self.submit_s.append(time.perf_counter())
        self.jobs.put(span)

    def busy(self) -> bool:
        """A submitted slice is not reduced yet."""
        return self.completed < self.submitted

    def wait(self, count: int) -> None:
        """Block until `count` submitted slices are reduced; re-raise the thread's error."""
        for _ in range(count):
            try:
                item = self.done.get(timeout=self.timeout_s * 2)
            except queue.Empty:
                raise RunError(f"the communication thread reduced nothing in {self.timeout_s * 2:g} s") from None
            if isinstance(item, BaseException):
                raise item
        self._time_handoffs(count, time.perf_counter())

    def _time_handoffs(self, count: int, back_s: float) -> None:
        first = len(self.call_s) - count
        total, previous_end = 0.0, float("-inf")
        for i in range(first, len(self.call_s)):
            start, end = self.call_s[i]
            total += max(0.0, start - max(self.submit_s[i], previous_end))
            previous_end = end
        self.handoff_s.append(total + max(0.0, back_s - previous_end))

    def handoff_stats(self, calls_per_step: int) -> dict:
        """The record of this thread's hand-offs (JSON-ready): the median per step (s) and the calls per step."""
        return {"handoff_s_median": float(np.median(self.handoff_s)) if self.handoff_s else None,
                "calls_per_step": calls_per_step}

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(self.timeout_s)
