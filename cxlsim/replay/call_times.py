"""A traced run's own call times against its replay's, per kind of call.

The interposition library writes beside each rank's trace `DIR/rank<r>.txt` a sidecar
`DIR/rank<r>.durations.tsv` (docs/mpi.md): a header, then one tab-separated row per action
line written for a call, `line start_ns duration_ns path setup` (the line number in the
trace, the call's entry on the host's one CLOCK_MONOTONIC clock, entry to return, what it ran
on: pool, hier, mpi or fallback:REASON, and 1 if it set up its communicator's pool). The
lines one call wrote (a Waitall that completed four requests) share their start and
duration: they are one `CallTime`, and the replay's time for it is the sum of its lines'
segments.

A call's duration holds the time it waited for other ranks, which follows the compute before
it on every rank; its **own time** does not: the time from the moment the last rank it waits
for arrived to its return.
- a collective: its return minus the last rank's entry into the same collective; at a rank other
  than the root, bcast and scatter wait for the root's entry alone, reduce and gather for none
  (their duration);
- a call that completes receives (wait, waitall, recv, sendrecv): its return minus the later of
  its own entry and the entries of the calls that posted the matched sends (the n-th receive
  posted from source s with tag t matches the n-th send from s with tag t, MPI's order);
  a receive with a wildcard source or tag has no own time (None);
- any other call (isend, irecv, a wait on sends only): its duration.
The same rule runs on the replay's timeline, so the two sides compare call for call, and a
call that takes longer inside the app than the replay prices it shows in its own time
whatever the ranks' compute did.

The trace's compute gaps leave out the tracer's own writes (docs/mpi.md: the time from a call's
return to the next call's entry, less the lines written between), which the traced run's wall
time holds: 60-100 ns a call here (benchmarks/trace_overhead.py). `measured_gaps` gives the trace whose gaps are the
sidecar's, the next call's entry minus the previous call's return (or the gap's CPU time, where the tracer read it:
`CallTime.gap_cpu_ns`), so that a replay of it is given all of each rank's time outside its MPI calls; the call
durations are not used. Units: ns.
"""
from __future__ import annotations

import os
import statistics
from collections import defaultdict, deque
from dataclasses import dataclass

from cxlsim.errors import InputError
from cxlsim.replay.trace import ANY_SOURCE, ANY_TAG, COLLECTIVES, LOCAL, Call, Trace

__all__ = ["CallTime", "HEADER", "sidecar_path", "read_durations", "measured_gaps", "replayed_calls", "own_times",
           "summarise", "over_runs", "EXTRA_SEGMENTS"]

HEADER = ("line", "start_ns", "duration_ns", "path", "setup", "gap_cpu_ns")
"""The sidecar's header row (a library before session 36 wrote the first five columns: no `gap_cpu_ns`)."""
EXTRA_SEGMENTS = ("descheduled", "progress")
"""Timeline segments the engine records beside a call's own (cxlsim.replay.engine), not calls of the trace."""
FROM_ROOT = ("bcast", "scatter")
"""Rooted collectives whose other ranks wait for the root alone."""
TO_ROOT = ("reduce", "gather")
"""Rooted collectives whose root waits for every rank and whose other ranks for none of them."""


@dataclass
class CallTime:
    """One MPI call of one rank: the trace lines it wrote, when it started and how long it took (ns)."""

    kind: str
    """The traced kind of its lines ('wait' for a Waitall that wrote several)."""
    size_bytes: int
    lines: tuple
    """Its 1-based lines in the rank's trace file."""
    start_ns: float
    duration_ns: float
    path: str = "mpi"
    setup: bool = False
    gap_cpu_ns: float | None = None
    """The CPU time of the compute before it (since the rank's previous call returned), where the tracer read the
    CPU clock (the node's ranks outnumbered its CPUs; the trace's compute lines are then CPU time too); else None."""
    own_ns: float | None = None
    """Its own time (module docstring), filled by `own_times`."""
    instance: int = -1
    """A collective's index among its rank's collectives (the same call on every rank), filled by `own_times`."""


def sidecar_path(trace_file: str) -> str:
    """`DIR/rank<r>.durations.tsv` beside `DIR/rank<r>.txt`."""
    return os.path.splitext(trace_file)[0] + ".durations.tsv"


def _number(text: str, where: str, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}: field {field!r}: expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise InputError(f"{where}: field {field!r}: expected a finite number >= 0, got {text!r}")
    return value


def _read_rows(path: str) -> dict:
    """{line: (start_ns, duration_ns, path, setup, gap_cpu_ns or None)} of one sidecar."""
    rows = {}
    columns = len(HEADER)
    with open(path) as fh:
        for number, text in enumerate(fh, start=1):
            fields = text.rstrip("\n").split("\t")
            where = f"{path}:{number}"
            if number == 1:
                if tuple(fields) not in (HEADER, HEADER[:5]):
                    raise InputError(f"{where}: expected the header {' '.join(HEADER)!r}, got {text.strip()!r}")
                columns = len(fields)
                continue
            if not text.strip():
                continue
            if len(fields) != columns:
                raise InputError(f"{where}: expected {columns} tab-separated fields ({', '.join(HEADER[:columns])}), "
                                 f"got {len(fields)}")
            line = _number(fields[0], where, "line")
            if line != int(line) or line < 1:
                raise InputError(f"{where}: field 'line': expected a line number >= 1, got {fields[0]!r}")
            if fields[4] not in ("0", "1"):
                raise InputError(f"{where}: field 'setup': expected 0 or 1, got {fields[4]!r}")
            if int(line) in rows:
                raise InputError(f"{where}: field 'line': line {int(line)} has a row already")
            gap_cpu = None if columns == 5 or fields[5] == "-1" else _number(fields[5], where, "gap_cpu_ns")
            rows[int(line)] = (_number(fields[1], where, "start_ns"), _number(fields[2], where, "duration_ns"),
                               fields[3], fields[4] == "1", gap_cpu)
    return rows


def read_durations(trace: Trace) -> list | None:
    """Per rank, its calls (`CallTime`, program order, compute left out) from the library's sidecars; None if
    the trace has none (not a library trace, or an older library). InputError naming the file, the line and
    the field for a malformed sidecar, one whose ranks have no sidecar while others do, or a call without a row."""
    paths = [sidecar_path(f) for f in trace.files]
    present = [os.path.isfile(p) for p in paths]
    if not any(present):
        return None
    if not all(present):
        missing = paths[present.index(False)]
        raise InputError(f"{missing}: no call durations for this rank, while other ranks of the trace have them")
    out = []
    for calls, path in zip(trace.ranks, paths):
        rows = _read_rows(path)
        mine = []
        for c in calls:
            if c.kind in LOCAL:
                if c.line in rows:
                    raise InputError(f"{path}: field 'line': line {c.line} is a {c.kind} line of {c.file}, "
                                     "which is no call")
                continue
            if c.line not in rows:
                raise InputError(f"{path}: no row for line {c.line} of {c.file} ({c.kind})")
            start, duration, ran, setup, gap_cpu = rows[c.line]
            if mine and mine[-1].start_ns == start and mine[-1].lines[-1] < c.line:
                mine[-1].lines += (c.line,)  # another request the same call completed
                continue
            mine.append(CallTime(c.kind, c.size_bytes, (c.line,), start, duration, ran, setup, gap_cpu))
        out.append(mine)
    return out


def measured_gaps(trace: Trace, timed: list) -> tuple:
    """(the trace with every compute gap between two calls replaced by the sidecar's: the later call's entry
    minus the earlier one's return, less the trace's sleeps between them, or its CPU time where the tracer read it
    (`CallTime.gap_cpu_ns`: the wall gap then holds the time the rank waited for a CPU), as flops at the trace's host speed;
    per rank, the time that adds to the trace's gaps, ns). The gap before a rank's first call and after its
    last stay the trace's."""
    speed = trace.host_speed_flops_per_s
    if not speed:
        raise InputError(f"trace {trace.source!r}: the sidecar's gaps need the trace's host speed (trace.meta.json)")
    ranks, added = [], []
    for calls, mine in zip(trace.ranks, timed):
        starts = {t.lines[0]: t for t in mine}
        out, previous, extra, traced, slept = [], None, 0.0, 0.0, 0.0
        for c in calls:
            if c.kind in LOCAL:
                if c.kind == "compute" and previous is not None:
                    traced += c.amount / speed * 1e9
                    continue  # replaced by the measured gap before the next call
                if previous is not None:
                    slept += c.amount * 1e9  # a sleep stays a sleep: the gap's compute is the rest
                out.append(c)
                continue
            t = starts.get(c.line)
            if t is not None:
                if previous is not None:
                    gap = t.gap_cpu_ns if t.gap_cpu_ns is not None else \
                        max(0.0, t.start_ns - (previous.start_ns + previous.duration_ns) - slept)
                    extra += gap - traced
                    out.append(Call("compute", c.file, c.line, amount=gap * speed / 1e9))
                previous, traced, slept = t, 0.0, 0.0
            out.append(c)
        if traced:  # compute after the last call
            out.append(Call("compute", calls[-1].file, calls[-1].line, amount=traced * speed / 1e9))
        ranks.append(out)
        added.append(extra)
    return Trace(ranks, trace.files, trace.source, speed), added


def replayed_calls(trace: Trace, timeline, measured: list) -> list:
    """The replay's `CallTime`s, call for call with `measured` (read_durations): each call's start is its
    first line's segment start and its duration the sum of its lines' segments (ns)."""
    out = []
    for r, (calls, mine) in enumerate(zip(trace.ranks, measured)):
        segs = [s for s in timeline.segments[r] if s[2] not in EXTRA_SEGMENTS]
        if len(segs) != len(calls):
            raise ValueError(f"rank {r}: {len(segs)} replayed segments for {len(calls)} traced calls")
        by_line = {c.line: s for c, s in zip(calls, segs) if c.kind not in LOCAL}
        out.append([CallTime(m.kind, m.size_bytes, m.lines, by_line[m.lines[0]][0],
                             sum(by_line[x][1] - by_line[x][0] for x in m.lines), m.path, m.setup) for m in mine])
    return out


def own_times(trace: Trace, timed: list) -> list:
    """Fill each CallTime's `own_ns` (module docstring) from the calls' starts and durations; returns `timed`."""
    p = trace.size
    lines = [{c.line: c for c in calls if c.kind not in LOCAL} for calls in trace.ranks]
    # collectives: the k-th of every rank
    colls = [[(t, lines[r][t.lines[0]]) for t in mine if t.kind in COLLECTIVES] for r, mine in enumerate(timed)]
    for k in range(min(map(len, colls), default=0)):
        entries = [colls[r][k][0].start_ns for r in range(p)]
        for r in range(p):
            t, c = colls[r][k]
            t.instance = k
            if c.kind in FROM_ROOT and r != c.root:
                last = max(t.start_ns, entries[c.root])
            elif c.kind in TO_ROOT and r != c.root:
                last = t.start_ns
            else:
                last = max(entries)
            t.own_ns = t.start_ns + t.duration_ns - last
    # sends: per (src, dst, tag) the entries of the calls that posted them, in order
    posted = defaultdict(deque)
    for r, mine in enumerate(timed):
        for t in mine:
            for x in t.lines:
                c = lines[r][x]
                if c.kind in ("send", "isend", "sendrecv"):
                    posted[(r, c.peer, c.tag if c.kind != "sendrecv" else 0)].append(t.start_ns)
    received = {}  # per receiving request (rank, line): the matched send's entry, None for a wildcard
    for r, mine in enumerate(timed):
        for t in mine:
            for x in t.lines:
                c = lines[r][x]
                if c.kind in ("recv", "irecv", "sendrecv"):
                    src, tag = (c.src, 0) if c.kind == "sendrecv" else (c.peer, c.tag)
                    queue = posted.get((src, r, tag))
                    received[(r, x)] = (None if src == ANY_SOURCE or tag == ANY_TAG or not queue
                                        else queue.popleft())
    for r, mine in enumerate(timed):
        requests = defaultdict(deque)  # (src, dst, tag) -> the receive lines posted, in order
        for t in mine:
            if t.kind in COLLECTIVES:
                continue
            senders = []
            for x in t.lines:
                c = lines[r][x]
                if c.kind == "irecv":
                    requests[(c.peer, r, c.tag)].append(x)
                elif c.kind in ("recv", "sendrecv"):
                    senders.append(received[(r, x)])
                elif c.kind == "wait" and c.dst == r and c.src != r:
                    queue = requests.get((c.src, c.dst, c.tag))
                    senders.append(received[(r, queue.popleft())] if queue else None)
            if any(s is None for s in senders):
                t.own_ns = None
            elif senders:
                t.own_ns = t.start_ns + t.duration_ns - max(t.start_ns, *senders)
            else:
                t.own_ns = t.duration_ns
    return timed


def _kind(t: CallTime) -> str:
    return "waitall" if t.kind == "wait" and len(t.lines) > 1 else t.kind


def _span(largest: dict, collective: bool) -> float:
    return sum(largest.values()) if collective else max(largest.values(), default=0.0)


def summarise(measured: list, replayed: list, window=None) -> list:
    """Per (kind, bytes, class) over every rank: calls, the median own time per call and the summed own time
    on each side, the summed durations, the span (below) and the slowest measured call.
    The span is what the kind adds to the run's time where the ranks meet at every call (a loop of
    collectives, a halo): a collective's own time on its slowest rank, summed over the collectives (the next
    call starts when that rank leaves), and for the other kinds the largest of the ranks' summed own times. class: 'set-up' (the call set up a
    pool), 'first' (a rank's first call of its kind and size, where that is not the set-up call: the first use
    of a pool's slot or of MPI's path for that size), 'steady' (the later ones). `window[r]` = (first,
    last) call index of rank r to count (default all); calls without an own time on either side are counted
    in durations only."""
    groups = defaultdict(list)
    for r, (mine, theirs) in enumerate(zip(measured, replayed)):
        seen = set()
        lo, hi = window[r] if window else (0, len(mine) - 1)
        for i, (m, q) in enumerate(zip(mine, theirs)):
            key = (_kind(m), m.size_bytes)
            cls = "set-up" if m.setup else "first" if key not in seen else "steady"
            seen.add(key)
            if lo <= i <= hi:
                groups[(*key, cls)].append((r, m, q))
    rows = []
    for (kind, size, cls), pairs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        owned = [(m.own_ns, q.own_ns) for _, m, q in pairs if m.own_ns is not None and q.own_ns is not None]
        spans = [defaultdict(float), defaultdict(float)]  # per instance (a collective) or rank: the largest own
        for rank, m, q in ((r, m, q) for r, m, q in pairs if m.own_ns is not None and q.own_ns is not None):
            for side, t in zip(spans, (m, q)):
                if t.instance >= 0:
                    side[t.instance] = max(side.get(t.instance, float("-inf")), t.own_ns)
                else:
                    side[rank] += t.own_ns
        collective = kind in COLLECTIVES
        rows.append({"kind": kind, "size_bytes": size, "class": cls, "calls": len(pairs),
                     "measured_duration_ns": sum(m.duration_ns for _, m, _ in pairs),
                     "predicted_duration_ns": sum(q.duration_ns for _, _, q in pairs),
                     "measured_span_ns": _span(spans[0], collective), "predicted_span_ns": _span(spans[1], collective),
                     "with_own": len(owned),
                     "measured_own_median_ns": statistics.median(m for m, _ in owned) if owned else None,
                     "predicted_own_median_ns": statistics.median(q for _, q in owned) if owned else None,
                     "measured_own_ns": sum(m for m, _ in owned), "predicted_own_ns": sum(q for _, q in owned),
                     "measured_own_max_ns": max((m for m, _ in owned), default=None),
                     "paths": sorted({m.path for _, m, _ in pairs})})
    return rows


def over_runs(summaries: list, ranks: int) -> list:
    """`summarise` rows of several runs of one app and rank count, per (kind, bytes, class): the median over the
    runs of the calls, of the median own time per call, of the own time per rank and of the span (measured,
    predicted), the median and range over the runs of the excess (measured - predicted span, ns), and the
    slowest measured call."""
    groups = defaultdict(list)
    for rows in summaries:
        for row in rows:
            groups[(row["kind"], row["size_bytes"], row["class"])].append(row)
    out = []
    for (kind, size, cls), rows in sorted(groups.items()):
        def median(key, rows=rows):
            values = [r[key] for r in rows if r[key] is not None]
            return statistics.median(values) if values else None
        excess = [r["measured_span_ns"] - r["predicted_span_ns"] for r in rows]
        out.append({"kind": kind, "size_bytes": size, "class": cls, "runs": len(rows), "calls": median("calls"),
                    "measured_own_median_ns": median("measured_own_median_ns"),
                    "predicted_own_median_ns": median("predicted_own_median_ns"),
                    "measured_own_per_rank_ns": statistics.median(r["measured_own_ns"] / ranks for r in rows),
                    "predicted_own_per_rank_ns": statistics.median(r["predicted_own_ns"] / ranks for r in rows),
                    "measured_span_ns": statistics.median(r["measured_span_ns"] for r in rows),
                    "predicted_span_ns": statistics.median(r["predicted_span_ns"] for r in rows),
                    "excess_ns": statistics.median(excess), "excess_range_ns": (min(excess), max(excess)),
                    "measured_own_max_ns": max((r["measured_own_max_ns"] for r in rows
                                                if r["measured_own_max_ns"] is not None), default=None)})
    return out
