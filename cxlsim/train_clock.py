"""The clock of a data-parallel training run, measured (a `cxlsim bench train` record) or simulated.

A run's progress is counted in ticks: a synchronous mode (sync, ddp) ticks at each step's end on
its last rank (W local steps per tick), async and hybrid at every local step's end on any rank
(one local step per tick; W of them are one global step). From a clock come the throughputs of
cxlsim/train_projection.py: over the whole run (samples over the last tick), in steady state
(after `skip` ticks of warm-up), and over the undisturbed steps: the steps in which no rank's
pool calls took more than `DISTURBED_S` beyond waiting for a slower rank's local work, a
criterion on the measured record alone (the simulation plays no part in choosing the steps).

Per rank and step, a record splits its time into the local work outside the pool calls
(`local_work_ns`: the step's wall time from the previous step's end, less its comm_s) and
comm_s. Units: s, except `local_work_ns` (ns, the DES's unit).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["DISTURBED_S", "local_work_ns", "clock", "throughputs", "excess_comm_s", "undisturbed",
           "tick_of_global_step", "comm_share"]

DISTURBED_S = 1e-3
"""A step whose pool calls took longer than this beyond waiting for a slower rank is disturbed (an
undisturbed exchange of a 1 MiB vector takes well under it here; a scheduler time slice is ~4 ms)."""


def local_work_ns(rank: dict) -> np.ndarray:
    """One rank's measured time outside the pool calls per step, ns: the step's wall time (from the
    previous step's end, the first from the common start) less its comm_s; never below 1 ns."""
    ends = np.asarray(rank["t_end_s"], float)
    walls = np.diff(np.concatenate(([0.0], ends)))
    return np.maximum((walls - np.asarray(rank["comm_s"], float)) * 1e9, 1.0)


def clock(ends_per_rank, synchronous: bool, nranks: int) -> tuple[np.ndarray, int]:
    """The run's clock of finished work: (tick times in s, local steps per tick). Synchronous modes tick at
    each step's end on the last rank (W local steps per tick), async and hybrid at every local step's end
    on any rank (one local step per tick)."""
    if synchronous:
        n = min(len(e) for e in ends_per_rank)
        return np.array([max(e[s] for e in ends_per_rank) for s in range(n)], float), nranks
    return np.array(sorted(t for e in ends_per_rank for t in e), float), 1


def throughputs(ticks: np.ndarray, per_tick: int, batch: int, skip: int) -> tuple[float, float]:
    """(whole-run, steady-state) samples/s of a clock; steady leaves out its first `skip` ticks."""
    whole = len(ticks) * per_tick * batch / ticks[-1] if len(ticks) and ticks[-1] > 0 else math.nan
    if skip < 1 or len(ticks) <= skip or ticks[-1] <= ticks[skip - 1]:
        return whole, math.nan
    return whole, (len(ticks) - skip) * per_tick * batch / (ticks[-1] - ticks[skip - 1])


def excess_comm_s(run: dict, synchronous: bool) -> list[np.ndarray]:
    """Per rank and step, the measured comm_s beyond waiting for the slowest rank's local work (synchronous
    modes; async and hybrid wait for nobody), s: a measured figure, the DES plays no part in it."""
    local = [local_work_ns(r) / 1e9 for r in run["ranks"]]
    comm = [np.asarray(r["comm_s"], float) for r in run["ranks"]]
    if not synchronous:
        return comm
    n = min(len(x) for x in local)
    slowest = np.max(np.stack([x[:n] for x in local]), axis=0)
    return [c[:n] - (slowest - x[:n]) for c, x in zip(comm, local)]


def undisturbed(run: dict, des_ends, synchronous: bool, skip_steps: int) -> dict:
    """Throughput over the undisturbed steps (see the module docstring) of a measured run and of its
    simulation (`des_ends`: per rank, the end of each of its steps, s), over the same steps:
    {measured, projected (samples/s), kept_share}."""
    excess = excess_comm_s(run, synchronous)
    B, W = run["batch_size"], run["np"]
    des_ends = [np.asarray(e, float) for e in des_ends]
    if synchronous:
        n = min(len(e) for e in excess)
        m_ticks, _ = clock([r["t_end_s"] for r in run["ranks"]], True, W)
        p_ticks, _ = clock(des_ends, True, W)
        keep = [s for s in range(skip_steps, min(n, len(p_ticks))) if all(e[s] <= DISTURBED_S for e in excess)]
        m_dt, p_dt = np.diff(np.concatenate(([0.0], m_ticks))), np.diff(np.concatenate(([0.0], p_ticks)))
        total, samples = n - skip_steps, len(keep) * W * B
        m_time, p_time = float(m_dt[keep].sum()), float(p_dt[keep].sum())
        m = samples / m_time if m_time > 0 else math.nan
        p = samples / p_time if p_time > 0 else math.nan
        return {"measured": m, "projected": p, "kept_share": len(keep) / total if total > 0 else math.nan}
    # async and hybrid: each rank's rate over its own calm steps, summed over the ranks
    m = p = 0.0
    kept = total = 0
    for r, e, d in zip(run["ranks"], excess, des_ends):
        m_dt = np.diff(np.concatenate(([0.0], np.asarray(r["t_end_s"], float))))
        p_dt = np.diff(np.concatenate(([0.0], d)))
        n = min(len(m_dt), len(p_dt))
        keep = [k for k in range(skip_steps, n) if e[k] <= DISTURBED_S]
        total += max(n - skip_steps, 0)
        kept += len(keep)
        if keep:
            m += len(keep) * B / float(m_dt[keep].sum())
            p += len(keep) * B / float(p_dt[keep].sum())
    if not kept:
        return {"measured": math.nan, "projected": math.nan, "kept_share": 0.0 if total else math.nan}
    return {"measured": m, "projected": p, "kept_share": kept / total}


def tick_of_global_step(step: int, per_tick: int, nranks: int) -> int:
    """The tick (0-based) at which `step` global steps are done: a global step is W local steps."""
    return step - 1 if per_tick == nranks else step * nranks - 1


def comm_share(run: dict) -> float:
    """The measured fraction of all ranks' step time spent in pool calls (comm_s / step_s)."""
    step = sum(sum(r["step_s"]) for r in run["ranks"])
    comm = sum(sum(r["comm_s"]) for r in run["ranks"])
    return comm / step if step > 0 else math.nan
