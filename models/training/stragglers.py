"""Stragglers: per-iteration compute-time multipliers, transient slowdowns and a failed node.

Every training mode draws one steps x workers matrix M of multipliers from the
run's one numpy Generator (`cxlsim.results.make_rng`); worker w's iteration s
takes `iteration_ns[w] * M[s, w]` (for async and hybrid, s counts the
worker's own local iterations). M is the product of three seeded parts, drawn
in this order so that adding a part never changes the draws of an earlier one:

1. Jitter (`cv`): lognormal with mean 1 and coefficient of variation cv
   (`jitter`). No published per-iteration cv exists (gpus.md), so it is a
   parameter; cv = 0 gives exactly the profile times.
2. Transient slowdowns (`Slowdown`): a worker that is not already slowed
   enters a slow episode at each of its iterations with probability
   `probability`; the episode lasts `duration_steps` iterations, during which
   its time is multiplied by `factor`. Published anchors for the factor: GPUs
   of one model vary by up to 1.5x against the median (Sinha et al., arXiv
   2208.11035); slow-but-alive GPUs delay large jobs 1.34x on average
   (GREYHOUND, USENIX ATC'25). The probability and duration are parameters
   (no published figure).
3. A failed node (`Failure`): from iteration `step` on, worker `worker` never
   finishes an iteration (multiplier +inf). Synchronous modes (sync, ddp,
   horovod) then stall, as plain synchronous SGD does without elastic
   recovery, and report it as a RunError naming the worker; async and hybrid
   go on without it.

>>> import numpy as np
>>> m = multipliers(np.random.default_rng(0), 6, 2, 0.0, slowdown=Slowdown(probability=1.0, factor=2.0, duration_steps=2),
...                 failure=Failure(worker=1, step=4))
>>> m[:, 0].tolist(), m[:, 1].tolist()
([2.0, 2.0, 2.0, 2.0, 2.0, 2.0], [2.0, 2.0, 2.0, 2.0, inf, inf])
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cxlsim.errors import InputError

__all__ = ["Slowdown", "Failure", "multipliers", "jitter", "measured_multipliers"]


def jitter(rng: np.random.Generator, steps: int, workers: int, cv: float) -> np.ndarray:
    """steps x workers lognormal multipliers with mean 1 and coefficient of variation `cv` (cv=0: ones)."""
    if isinstance(cv, bool) or not isinstance(cv, (int, float)) or not cv >= 0 or math.isinf(cv):
        raise InputError(f"cv: expected a coefficient of variation >= 0, got {cv!r}")
    if cv == 0:
        return np.ones((steps, workers))
    sigma2 = math.log1p(cv * cv)
    return rng.lognormal(-sigma2 / 2.0, math.sqrt(sigma2), size=(steps, workers))


@dataclass(frozen=True, kw_only=True)
class Slowdown:
    """Transient slowdowns: seeded slow episodes per worker."""

    probability: float
    """Chance per iteration that a worker not already slowed starts an episode, in [0, 1]."""
    factor: float
    """Compute-time multiplier during an episode, >= 1."""
    duration_steps: int
    """Iterations an episode lasts, >= 1."""

    def __post_init__(self):
        if not (isinstance(self.probability, (int, float)) and 0.0 <= self.probability <= 1.0):
            raise InputError(f"slowdown.probability: expected a probability in [0, 1], got {self.probability!r}")
        if not (isinstance(self.factor, (int, float)) and 1.0 <= self.factor < math.inf):
            raise InputError(f"slowdown.factor: expected a finite multiplier >= 1, got {self.factor!r}")
        if isinstance(self.duration_steps, bool) or not isinstance(self.duration_steps, int) or self.duration_steps < 1:
            raise InputError(f"slowdown.duration_steps: expected an integer >= 1, got {self.duration_steps!r}")

    @classmethod
    def parse(cls, text: str, flag: str = "--slowdown") -> "Slowdown":
        """'P,F,D' (as a command line gives it) -> Slowdown(probability=P, factor=F, duration_steps=D)."""
        parts = text.split(",")
        try:
            if len(parts) != 3:
                raise ValueError
            p, f, d = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            raise InputError(f"{flag}: expected PROBABILITY,FACTOR,STEPS like 0.05,1.5,10, got {text!r}") from None
        try:
            return cls(probability=p, factor=f, duration_steps=d)
        except InputError as exc:
            raise InputError(f"{flag} {text}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class Failure:
    """One worker fails for good before its iteration `step` (0-based) ends."""

    worker: int
    """Worker index."""
    step: int
    """First iteration the worker never finishes."""

    def check(self, steps_max: int, workers: int) -> None:
        if isinstance(self.worker, bool) or not isinstance(self.worker, int) or not 0 <= self.worker < workers:
            raise InputError(f"failure.worker: expected a worker index in 0..{workers - 1}, got {self.worker!r}")
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 0:
            raise InputError(f"failure.step: expected an iteration index >= 0, got {self.step!r}")
        if self.step >= steps_max:
            raise InputError(f"failure.step: {self.step} is past the last iteration ({steps_max - 1}): "
                             "the worker would never fail")


def multipliers(rng: np.random.Generator, steps: int, workers: int, cv: float, *,
                slowdown: Slowdown | None = None, failure: Failure | None = None) -> np.ndarray:
    """The steps x workers compute-time multipliers (see the module docstring)."""
    m = jitter(rng, steps, workers, cv)
    if slowdown is not None:
        if not isinstance(slowdown, Slowdown):
            raise InputError(f"slowdown: expected a Slowdown, got {slowdown!r}")
        starts = rng.random((steps, workers)) < slowdown.probability
        left = np.zeros(workers, dtype=int)
        for s in range(steps):
            left = np.where((left == 0) & starts[s], slowdown.duration_steps, left)
            m[s] *= np.where(left > 0, slowdown.factor, 1.0)
            left = np.maximum(left - 1, 0)
    if failure is not None:
        if not isinstance(failure, Failure):
            raise InputError(f"failure: expected a Failure, got {failure!r}")
        failure.check(steps, workers)
        m[failure.step:, failure.worker] = math.inf
    return m


def measured_multipliers(iteration_ns, compute_ns) -> np.ndarray:
    """The steps x workers multipliers that make worker w's iteration s take `compute_ns[s][w]` ns
    (a measured run's times, e.g. an emulated one's), given the job's per-worker `iteration_ns`.
    A time of +inf stands for a failed worker (as `Failure`); any other value must be > 0."""
    m = np.asarray(compute_ns, dtype=float)
    base = np.asarray(iteration_ns, dtype=float)
    if m.ndim != 2 or m.shape[1] != base.size or m.shape[0] < 1:
        raise InputError(f"compute_ns: expected steps x {base.size} times (ns), got shape {m.shape}")
    if not np.all((m > 0) & ~np.isnan(m)):
        raise InputError("compute_ns: expected times > 0 ns (or inf for a failed worker)")
    return m / base
