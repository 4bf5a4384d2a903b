"""The state of a stretch of measurement on this machine: the fast host placement, the slow one, or disturbed.

This machine's two vCPUs sit in a fast placement (hw flag round trip 55-110 ns, once 35 ns) or, often
for tens of seconds, a slow one (440-500 ns); and on a loaded machine the two ranks of a job take
turns on one CPU for microseconds to milliseconds. A stretch (a collectives block, an allgather bench
run) is judged by the flag round trips probed around it and its ranks' CPU shares (`state_of`). In hw
mode the placement thresholds are absolute: one below-typical round trip (35 ns) must not make the
whole fast placement look slow, as a rule relative to the best round trip seen did (a run's allgather
part was all flagged at 1.5 x 35 ns). Flush mode's round trip has no such threshold, so it is judged
against the best flush round trip seen. Units: ns.
"""
from __future__ import annotations

import math

from cxlsim.coherence import Coherence
from cxlsim.emulator.host import SLOW_ROUNDTRIP_NS, placement_of

STABLE = 1.5  # a flush round trip above this x the best seen: the slow placement (and the rule of `measure.steady`)
BUSY = 0.9  # a stretch during which a rank had less of its CPU than this was disturbed by other jobs
FAST_ROUNDTRIP_NS = SLOW_ROUNDTRIP_NS  # hw flag round trip up to this: this machine's fast host placement
KEPT_HW_ROUNDTRIP_NS = 1000.0
"""The calibration's own line, beside the placement rule (`host.placement_of`: fast up to 200 ns, slow up to
2000 ns, disturbed above): a stretch whose hw probe is above this is left out of every placement's figures,
although the placement rule calls a 1000-2000 ns probe slow. The slow placement's probes are 440-520 ns,
so a probe at twice that had a rank off its CPU for part of it (a probe is the median of 7 means of 8
round trips: 4 of its batches lost microseconds), and the stretch's calls and primitives, taken as the
slow placement's, would be the scheduler's. The placement a profile or a run is in is `placement_of`'s."""
DISTURBED = 4.0
"""A flush flag round trip above DISTURBED x the best flush one seen: a rank was off its CPU for part of the
probe (flush mode's round trip has no absolute placement line)."""


def state_of(mode: Coherence, roundtrips, busy_fractions, best: dict, busy: float = BUSY) -> str:
    """'fast', 'slow placement' or 'disturbed', by the worse of `roundtrips` and the CPU shares.

    hw: the placement rule's class of the worst round trip (`host.placement_of`), and disturbed above
    KEPT_HW_ROUNDTRIP_NS too (see there). flush, whose round trip has no such threshold (450-650 ns in the
    fast placement): above DISTURBED x the best flush round trip seen, disturbed; above `STABLE` x it, the
    slow placement. Most CPU shares below `busy` (a rank off its CPU between two calm round trips):
    disturbed."""
    if not all(math.isfinite(r) for r in roundtrips):  # a probe that failed (max() would pass over a NaN)
        return "disturbed"
    worst = max(roundtrips)
    if mode == Coherence.HW:
        placement = placement_of(worst)
        if placement == "disturbed" or worst > KEPT_HW_ROUNDTRIP_NS:
            return "disturbed"
    else:
        ref = best.get(mode, worst)
        if worst > DISTURBED * ref:
            return "disturbed"
        placement = "slow" if worst > STABLE * ref else "fast"
    if busy_fractions and sum(b < busy for b in busy_fractions) > len(busy_fractions) / 2:
        return "disturbed"
    return "slow placement" if placement == "slow" else "fast"


def kept_roundtrips(mode: Coherence, samples) -> list[float]:
    """The flag round trips (ns) of `samples` that are not disturbed one by one (`state_of` of each against the
    best of them), for a fit; all the finite ones if every one is. On a loaded machine (load 15, 23:26 UTC,
    session 26) 26 of a profile's 28 hw samples were 0.2-1.0 ms, the ranks taking turns on one CPU, and the
    model's round trip, their median, priced an 8 B allreduce at 730 us."""
    finite = [float(v) for v in samples if math.isfinite(v)]
    best = {mode: min(finite)} if finite else {}
    kept = [v for v in finite if state_of(mode, (v,), [], best) != "disturbed"]
    return kept or finite
