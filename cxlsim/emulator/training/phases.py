"""Where a rank's step goes: per-step durations of a loop's named phases, and its threads' scheduling.

`PhaseClock` times the phases of every step of a loop: the loop calls ``begin()`` at a step's
start and ``mark(name)`` at the end of each phase (time.perf_counter, s; two clock reads cost
well under a microsecond against steps of about a millisecond). `summary()` gives per phase the
median and the mean over the steps, and the steps counted; a phase a step skips (hybrid's drop
of a stale update) is not counted for that step.

`ThreadSchedule` reads the calling thread's /proc/thread-self/schedstat at `start()` and `stop()`:
the time the thread ran on a CPU, the time it was runnable but waiting for one (the run queue),
and its timeslices, in between (Linux schedstats; 0s where the file is absent). Read twice per
thread and run, not per step, so it costs the run nothing measurable.

cxlsim/train_projection.py puts each phase beside the DES's figure for it (`phase_table`).
Units: s.
"""
from __future__ import annotations

import time

import numpy as np

SCHEDSTAT = "/proc/thread-self/schedstat"


class PhaseClock:
    """Per-step durations of named phases (s), in the order a loop marks them."""

    def __init__(self, names):
        self.spans = {name: [] for name in names}
        self.last = 0.0

    def begin(self) -> None:
        """A step starts now."""
        self.last = time.perf_counter()

    def mark(self, name: str) -> None:
        """Phase `name` of this step ends now (it began at the last mark or `begin`)."""
        now = time.perf_counter()
        self.spans[name].append(now - self.last)
        self.last = now

    def summary(self) -> dict:
        """{phase: {median_s, mean_s, steps}} over the steps that had the phase (JSON-ready)."""
        return {name: {"median_s": float(np.median(v)) if v else None, "mean_s": float(np.mean(v)) if v else None,
                       "steps": len(v)} for name, v in self.spans.items()}


def _schedstat() -> tuple[int, int, int]:
    try:
        with open(SCHEDSTAT) as f:
            run_ns, wait_ns, slices = (int(x) for x in f.read().split()[:3])
    except (OSError, ValueError):
        return 0, 0, 0
    return run_ns, wait_ns, slices


class ThreadSchedule:
    """The calling thread's scheduler statistics between `start()` and `stop()` (both on that thread)."""

    def __init__(self):
        self.begun = self.ended = (0, 0, 0)

    def start(self) -> None:
        self.begun = _schedstat()

    def stop(self) -> None:
        self.ended = _schedstat()

    def summary(self) -> dict:
        """{run_s: on a CPU, runnable_s: runnable but not running, slices} (JSON-ready)."""
        run, wait, slices = (b - a for a, b in zip(self.begun, self.ended))
        return {"run_s": run / 1e9, "runnable_s": wait / 1e9, "slices": slices}
