"""Where an async or hybrid step goes: each measured phase of a `cxlsim bench train` run beside the DES's figure.

The run's loops time every step's phases (cxlsim/emulator/training/elastic.py: ASYNC_PHASES,
HYBRID_PHASES, and EXCHANGE_PHASES on hybrid's communication thread) and record per rank each
phase's median over the steps (`mode_stats[r]["phases_s"]`). The DES of the projection
(models/training/pool_shared.py) records the median of each of its pool operations
(`extra["phases_ns"]`: ticket, read, fold, push, counter). A phase's DES figure is its pool
operations plus its passes over the parameter vector (`PASSES`, the projection's VECTOR_PASSES
split by phase) at the projection's `pass_ns`, and for hybrid's hand-off the projection's
`handoff_ns`. Phases outside the communication (the batch, the compute) are the local work the
DES is given, so they have no DES figure.

`phase_rows` gives one row per phase (measured and DES, s), the step's communication in total
(the record's comm_s, median over the steps, against the DES's sum), and each thread's time
runnable but not running per step (measured only: the DES has no scheduler). Units: s.
"""
from __future__ import annotations

import numpy as np

__all__ = ["PASSES", "phase_rows", "format_phase_rows"]

PASSES = {
    "async": {"main": {"ticket": ((("ticket",)), 0), "sgd": ((), 2), "read": (("read",), 0),
                       "fold": (("fold",), 2), "elastic": ((), 4), "push": (("push",), 1)}},
    "hybrid": {"main": {"ticket": (("ticket",), 0), "scale": ((), 1), "wait": ((), 0), "handover": ((), 1),
                        "apply": ((), 1)},
               "exchange": {"handoff": (("handoff",), 0), "update": ((), 1), "push": (("push",), 0),
                            "counter": (("counter",), 0), "read": (("read",), 0), "fold": (("fold",), 2)}},
}
"""Per mode and thread, per communication phase: (the DES's pool operations in it, its vector passes), as the
loops of cxlsim/emulator/training/elastic.py do them (they sum to the projection's VECTOR_PASSES)."""
STATS_KEY = {"main": "phases_s", "exchange": "exchange_phases_s"}


def _measured(run: dict, key: str, phase: str) -> float | None:
    """The phase's median over the steps, the median over the ranks that recorded it (s)."""
    values = [((stats or {}).get(key) or {}).get(phase, {}).get("median_s") for stats in run.get("mode_stats") or []]
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def phase_rows(run: dict, des_phases_ns: dict, pass_ns: float, handoff_ns: float,
               thread_shares_cpu: bool = False) -> list[dict]:
    """Rows {thread, phase, measured_s, des_s, des_terms} for an async or hybrid run (see the module docstring);
    [] for another mode or a record without phases. thread_shares_cpu: hybrid's DES runs the exchange in line,
    after the step, so the step's wait for the previous exchange is 0 there."""
    mode = run["mode"]
    if mode not in PASSES or not any(isinstance(s, dict) and s.get("phases_s") for s in run.get("mode_stats") or []):
        return []
    des_ns = {**des_phases_ns, "handoff": handoff_ns}
    rows = []
    for thread, phases in PASSES[mode].items():
        for phase, (ops, passes) in phases.items():
            des = sum(des_ns.get(op, 0.0) for op in ops) + passes * pass_ns
            terms = " + ".join([*ops] + ([f"{passes} pass{'es' if passes > 1 else ''}"] if passes else [])) or "0"
            if phase == "handoff":
                terms = "handoff (the submission and the return, timed)"
            if mode == "hybrid" and phase == "wait" and not thread_shares_cpu:
                des, terms = None, "the DES's overlap (not split)"
            rows.append({"thread": thread, "phase": phase, "measured_s": _measured(run, STATS_KEY[thread], phase),
                         "des_s": None if des is None else des / 1e9, "des_terms": terms})
    comm = [float(np.median(r["comm_s"])) for r in run["ranks"] if r["comm_s"]]
    des_total = sum(r["des_s"] or 0.0 for r in rows if r["thread"] == "main" or thread_shares_cpu)
    rows.append({"thread": "main", "phase": "comm_s (step total)", "measured_s": float(np.median(comm)) if comm else None,
                 "des_s": des_total, "des_terms": "the sum above" if mode == "async" else
                 "the sum above (one CPU: the exchange's rows run inside the main thread's measured ones)"
                 if thread_shares_cpu else "the main thread's rows (the exchange overlaps the next step)"})
    for thread in PASSES[mode]:
        runnable = []
        for stats, rank in zip(run.get("mode_stats") or [], run["ranks"]):
            sched = ((stats or {}).get("schedule") or {}).get(thread)
            if sched and rank["steps_done"]:
                runnable.append(sched["runnable_s"] / rank["steps_done"])
        if runnable:
            rows.append({"thread": thread, "phase": "runnable, not running (per step)",
                         "measured_s": float(np.median(runnable)), "des_s": None, "des_terms": "no scheduler"})
    return rows


def format_phase_rows(rows: list[dict]) -> list[str]:
    """Text lines of `phase_rows` (us)."""
    def us(x):
        return "-" if x is None else f"{x * 1e6:.1f}"
    lines = [f"{'thread':9} {'phase':34} {'measured us':>11} {'DES us':>8}  DES terms"]
    lines += [f"{r['thread']:9} {r['phase']:34} {us(r['measured_s']):>11} {us(r['des_s']):>8}  {r['des_terms']}"
              for r in rows]
    return lines
