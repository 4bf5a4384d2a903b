"""Whether an OMB-style set can test the --from-osu model at all: the set verdict (issue 18 item 2).

The model re-predicts a set's osu_allgather from its other tables, so a set tests it only when those
figures are one state of one machine. The rule, per CMA setting and statistic, for the variant checked
(stated before any set after j was measured; sets a-j were known when it was written, so only later
sets are held out for it). A set is **too disturbed to test the model** when any of these holds:

1. placement: the hw flag round trips probed before and after its rounds (two fresh processes, `raw.csv`;
   from set m on also between a round's stretches of sizes, run_hypotheses.STRETCHES) put the rounds in
   more than one host placement, or leave a round with none. A probe is fast up to
   host.SLOW_ROUNDTRIP_NS, slow up to host.DISTURBED_ROUNDTRIP_NS, and otherwise disturbed
   (cxlsim.emulator.host.placement_of, the emulator probe's rule; its two processes
   waited for a CPU: it measures the scheduler, not the placement) and left out; a round whose two
   kept probes differ changed placement while it ran ("mixed"), one with none kept has no placement
   ("unknown"). The fastest batch of each table would otherwise come from whichever machine was
   fastest for that table. A set measured before the probe was recorded is "not probed": rule 1
   cannot judge it.
2. anchor: the anchor row (the smallest allgather, on which the collective overhead is anchored, so it
   moves every predicted row) is disturbed: no round reproduces all the variant's tables there within
   AGREE, or it is more than AGREE slower than a larger allgather up to 1 KiB (`anchor_slowed`).
3. coverage: fewer than MIN_UNDISTURBED of the other sizes are undisturbed: the target is a worst size,
   and a set whose sizes mostly come from stretches of time that disagree measures no one machine.
4. repeats: fewer than MIN_ROUNDS rounds: rules 2-3 find a disturbance by comparing rounds, so a single
   round passes them whatever happened in it (added before set k's figures were read, with the sub-sets).

A probed set whose rounds span both placements is also tested per placement (osu_files.placement_sets):
the rounds of one placement form a sub-set of their own (`placement_fast/`, `placement_slow/` in the set),
judged by the same rules. The slow placement is reported apart: it is another machine for the model.

Per stretch (session 26, stated before any set measured after it; m, n and o, the sets probed between
stretches, were known, so the rule is post-hoc on them). On this host the placement changes within a
minute, so few whole rounds stay in one. A set probed between its stretches of sizes is also tested per
stretch (osu_files.stretch_sets): the rows of every round's stretches whose probes before and after both
read one placement (`stretch_placement`; a disturbed probe vouches for nothing, so its stretch is left out)
form the sub-set `stretch_fast/` or `stretch_slow/`, judged by rules 1-4 as a set is, with rule 4 applied
per size as well: a size that fewer than MIN_ROUNDS rounds measured in that placement is disturbed (it
cannot be compared), and so is the anchor row then (rule 2).

The rule reads the measured tables and probes only, never the model's error.
"""
from __future__ import annotations

import csv
import os

from cxlsim.emulator.host import placement_of

MIN_UNDISTURBED = 0.5  # rule 3: the fraction of the non-anchor sizes that must be undisturbed
MIN_ROUNDS = 2  # rule 4
AGREE = 0.10  # = run_hypotheses.AGREE: two figures of one row agree within this fraction


def round_placement(*probes_ns: float) -> str:
    """A round's placement from the probes around it (before, between its stretches of sizes, after): 'fast' or
    'slow' when the probes that are not disturbed agree, 'mixed' when they differ, 'unknown' when all are
    disturbed."""
    kept = {placement_of(p) for p in probes_ns} - {"disturbed"}
    if not kept:
        return "unknown"
    return kept.pop() if len(kept) == 1 else "mixed"


def stretch_placement(before_ns: float, after_ns: float) -> str:
    """A stretch's placement from the probes around it: 'fast' or 'slow' when both read it, else 'none'."""
    before, after = placement_of(before_ns), placement_of(after_ns)
    return before if before == after and before != "disturbed" else "none"


def placements(sets_dir: str) -> list:
    """Per round and CMA setting: (round, cma, probe, probe, ...): the hw flag round trips in ns in the order they
    were taken (before the round, between its stretches of sizes, after it), or [] for a set measured before the
    probe was recorded. raw.csv gives each row the probes before and after its stretch."""
    seen = {}
    with open(os.path.join(sets_dir, "raw.csv")) as fh:
        for row in csv.DictReader(fh):
            if row.get("roundtrip_before_ns"):
                probes = seen.setdefault((int(row["round"]), row["cma"]), [])
                for value in (float(row["roundtrip_before_ns"]), float(row["roundtrip_after_ns"])):
                    if value not in probes:
                        probes.append(value)
    return [(r, c, *v) for (r, c), v in sorted(seen.items())]


def set_placement(probes: list, cma: str) -> tuple:
    """(placement, {round: its placement}) of the rounds of one CMA setting: 'fast' or 'slow' when every round is
    that one, 'not probed' without probes, else 'mixed' (rule 1 refuses it)."""
    per_round = {r: round_placement(*ns) for r, c, *ns in probes if c == cma}
    if not per_round:
        return "not probed", {}
    seen = set(per_round.values())
    return (seen.pop() if len(seen) == 1 and seen <= {"fast", "slow"} else "mixed"), per_round


def anchor_slowed(rows) -> bool:
    """Whether the anchor row (the smallest allgather) took more than AGREE longer than a larger allgather up to
    1 KiB: there a call costs the same within its noise at every size, so such an anchor was slowed, in every
    round the statistic saw, and the overhead anchored on it moves every row."""
    anchor = next(r for r in rows if r["anchor"])
    small = [r["measured_ns"] for r in rows if not r["anchor"] and r["size_bytes"] <= 1024]
    return bool(small) and anchor["measured_ns"] > (1.0 + AGREE) * min(small)


def round_count(sets_dir: str, cma: str) -> int:
    """How many rounds of one CMA setting the set's raw.csv holds."""
    with open(os.path.join(sets_dir, "raw.csv")) as fh:
        return len({row["round"] for row in csv.DictReader(fh) if row["cma"] == cma})


def verdict(probes: list, cma: str, anchor_disturbed: bool, undisturbed: int, sizes: int, rounds: int) -> dict:
    """The set verdict of one CMA setting: {'valid', 'placement', 'reasons'} (reasons: the rules that refuse it).
    `undisturbed` of `sizes` non-anchor sizes are undisturbed for the variant; `rounds`: the setting's rounds."""
    placement, per_round = set_placement(probes, cma)
    reasons = []
    if rounds < MIN_ROUNDS:
        reasons.append(f"{rounds} round (rules 2-3 need {MIN_ROUNDS} to compare)")
    if placement == "mixed":
        reasons.append("placement: rounds " + ", ".join(f"{r} {p}" for r, p in sorted(per_round.items())))
    if anchor_disturbed:
        reasons.append("anchor row disturbed")
    if undisturbed < MIN_UNDISTURBED * sizes:
        reasons.append(f"{undisturbed} of {sizes} sizes undisturbed (under {MIN_UNDISTURBED:.0%})")
    return {"valid": not reasons, "placement": placement, "reasons": reasons}


def describe_verdict(v: dict) -> str:
    if v["valid"]:
        return f"valid ({v['placement']} placement)" if v["placement"] != "not probed" else "valid (not probed)"
    return "too disturbed: " + "; ".join(v["reasons"])
