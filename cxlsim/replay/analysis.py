"""What a replay's timeline says: total time, time per kind of MPI call, communication against
compute, and the critical path.

Times are ns inside, reported in seconds. Rank-time is P x the total time:
every rank is in a call (compute, communication) or done (idle, after its last
call, until the last rank finishes).

The critical path is walked back from the last rank's end at call granularity,
over the segments the engine recorded. At time t on rank r, in the call that
covers t: if the call waited on another rank (a receive whose message was sent
at time s on rank q, or a collective that rank q entered last, at s) and
s lies inside the call, the path spends [s, t] in that call and continues on q
at s; otherwise it spends the whole call up to t on r and continues at the
call's start. The path covers [0, total] exactly once, so its compute and
communication shares add up to 1. (Inside a collective the path does not
follow the algorithm's individual messages.)
"""
from __future__ import annotations

import bisect
from collections import defaultdict

from cxlsim.replay.trace import LOCAL

__all__ = ["summary", "per_call", "critical_path", "speedups"]


def _is_compute(kind: str) -> bool:
    return kind in LOCAL


def per_call(timeline) -> list[dict]:
    """One row per kind of call: calls, total rank-time (s), mean per rank (s), share of rank-time."""
    p = len(timeline.segments)
    rank_time = timeline.total_ns * p
    calls, spent = defaultdict(int), defaultdict(float)
    for segs in timeline.segments:
        for start, end, kind, _, _ in segs:
            calls[kind] += 1
            spent[kind] += end - start
    return [{"kind": kind, "calls": calls[kind], "time_s": spent[kind] / 1e9, "per_rank_s": spent[kind] / p / 1e9,
             "share": spent[kind] / rank_time if rank_time else 0.0}
            for kind in sorted(spent, key=lambda k: (-spent[k], k))]


def critical_path(timeline) -> dict:
    """{'compute_s', 'communication_s', 'by_kind': {kind: s}, 'hops': rank changes} along the path."""
    segments = timeline.segments
    if not segments or timeline.total_ns <= 0:
        return {"compute_s": 0.0, "communication_s": 0.0, "by_kind": {}, "hops": 0}
    starts = [[s[0] for s in segs] for segs in segments]
    rank = max(range(len(segments)), key=timeline.finish_ns.__getitem__)
    t = timeline.finish_ns[rank]
    by_kind = defaultdict(float)
    hops = 0
    while t > 0:
        i = bisect.bisect_left(starts[rank], t) - 1
        if i < 0:  # before the rank's first call: nothing ran
            by_kind["idle"] += t
            break
        start, end, kind, dep_rank, dep_ns = segments[rank][i]
        if end < t:  # a gap between calls (none in the engine's timelines)
            by_kind["idle"] += t - end
            t = end
            continue
        if dep_rank >= 0 and dep_rank != rank and start < dep_ns < t:
            by_kind[kind] += t - dep_ns
            rank, t = dep_rank, dep_ns
            hops += 1
            continue
        by_kind[kind] += t - start
        t = start
    compute = sum(v for k, v in by_kind.items() if _is_compute(k))
    return {"compute_s": compute / 1e9, "communication_s": (sum(by_kind.values()) - compute) / 1e9,
            "by_kind": {k: v / 1e9 for k, v in sorted(by_kind.items())}, "hops": hops}


def summary(label: str, timeline) -> dict:
    """The fabric's row: total time, compute/communication/idle shares of rank-time, the critical path's."""
    p = len(timeline.segments)
    total = timeline.total_ns
    compute = comm = 0.0
    for segs in timeline.segments:
        for start, end, kind, _, _ in segs:
            if _is_compute(kind):
                compute += end - start
            else:
                comm += end - start
    rank_time = total * p or 1.0
    path = critical_path(timeline)
    path_total = path["compute_s"] + path["communication_s"] or 1.0
    return {"fabric": label, "ranks": p, "total_s": total / 1e9,
            "compute_share": compute / rank_time, "communication_share": comm / rank_time,
            "idle_share": max(0.0, 1.0 - (compute + comm) / rank_time) if total > 0 else 0.0,
            "critical_compute_share": path["compute_s"] / path_total,
            "critical_communication_share": path["communication_s"] / path_total,
            "events": timeline.events, "wall_s": timeline.wall_s}


def speedups(rows: list[dict]) -> list[dict]:
    """Speedup of every fabric over the first (the reference): total(reference) / total(fabric);
    None where the fabric's total is 0 (a trace that takes no time)."""
    if not rows:
        return []
    ref = rows[0]["total_s"]
    return [{"fabric": r["fabric"], "total_s": r["total_s"], "speedup": ref / r["total_s"] if r["total_s"] else None,
             "reference": rows[0]["fabric"]} for r in rows]
