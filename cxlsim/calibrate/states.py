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
from cxlsim.emulator.host import SLOW_ROUNDTRIP_NS

STABLE = 1.5  # a flush round trip above this x the best seen: the slow placement (and the rule of `measure.steady`)
BUSY = 0.9  # a stretch during which a rank had less of its CPU than this was disturbed by other jobs
FAST_ROUNDTRIP_NS = SLOW_ROUNDTRIP_NS  # hw flag round trip below this: this machine's fast host placement
DISTURBED_HW_NS, DISTURBED = 1000.0, 4.0
"""A hw flag round trip above DISTURBED_HW_NS (twice the slow placement's 440-500 ns), or a flush one above
DISTURBED x the best flush one seen: a rank was off its CPU for part of the probe (the ranks took turns:
microseconds to milliseconds), beyond any placement."""


def state_of(mode: Coherence, roundtrips, busy_fractions, best: dict, busy: float = BUSY) -> str:
    """'fast', 'slow placement' or 'disturbed', by the worse of `roundtrips` and the CPU shares.

    hw: a round trip above DISTURBED_HW_NS, disturbed; above FAST_ROUNDTRIP_NS (the issue's placement
    threshold: fast 55-110 ns, slow 440-500 ns on this machine), the slow placement. flush, whose round
    trip has no such threshold (450-650 ns in the fast placement): above DISTURBED x the best flush round
    trip seen, disturbed; above `STABLE` x it, the slow placement. Most CPU shares below
    `busy` (a rank off its CPU between two calm round trips): disturbed."""
    worst = max(roundtrips)
    ref = best.get(mode, worst)
    if not math.isfinite(worst) or worst > (DISTURBED_HW_NS if mode == Coherence.HW else DISTURBED * ref):
        return "disturbed"
    if busy_fractions and sum(b < busy for b in busy_fractions) > len(busy_fractions) / 2:
        return "disturbed"
    if worst > (FAST_ROUNDTRIP_NS if mode == Coherence.HW else STABLE * ref):
        return "slow placement"
    return "fast"
