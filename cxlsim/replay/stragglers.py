"""Stragglers for a replay: per-rank, per-step compute multipliers drawn from the training model's distributions.

A trace has no iterations, but every rank makes the same collectives in the same order
(`cxlsim.replay.trace.check_collectives`), so they cut every rank's calls into the same
steps: step k holds the calls after collective k (step 0: those before the first). Every
compute gap of rank r in step k is multiplied by M[k, r], where M is the steps x ranks
matrix of `cxlsim.models.training.stragglers.multipliers` (lognormal jitter of mean 1 and
coefficient of variation `cv`, then transient slowdowns: at each step a rank not already
slowed starts an episode with probability P, lasting D steps at factor F), drawn from the
run's seeded generator (`cxlsim.results.make_rng`). One draw is one sample of the
distribution: the replay's total is that draw's, and the seed is recorded to reproduce it.
A failed node is not offered: a synchronous trace would stall at its next collective.
These multipliers apply on top of `--compute-scale`.
"""
from __future__ import annotations

import numpy as np

from cxlsim.errors import InputError
from cxlsim.models.training.stragglers import Slowdown, multipliers
from cxlsim.replay.trace import COLLECTIVES, Trace

__all__ = ["steps_of", "draw"]


def steps_of(trace: Trace) -> int:
    """Steps in `trace`: its collectives + 1 (the same on every rank once check_collectives passed)."""
    return 1 + sum(1 for c in trace.ranks[0] if c.kind in COLLECTIVES)


def draw(rng: np.random.Generator, trace: Trace, cv: float, slowdown: Slowdown | None) -> np.ndarray:
    """The steps x ranks compute multipliers for `trace` (see the module docstring)."""
    if isinstance(cv, bool) or not isinstance(cv, (int, float)) or not cv >= 0 or cv == float("inf"):
        raise InputError(f"--cv: expected a coefficient of variation >= 0, got {cv!r}")
    return multipliers(rng, steps_of(trace), trace.size, float(cv), slowdown=slowdown)
