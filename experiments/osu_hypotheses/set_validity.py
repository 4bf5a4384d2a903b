"""Whether an OMB-style set can test the --from-osu model at all: the set verdict (issue 18 item 2).

The model re-predicts a set's osu_allgather from its other tables, so a set tests it only when those
figures are one state of one machine. The rule, per CMA setting and statistic, for the variant checked
(stated before any set after j was measured; sets a-j were known when it was written, so only later
sets are held out for it). A set is **too disturbed to test the model** when any of these holds:

1. placement: the hw flag round trips probed before and after its rounds (two fresh processes, `raw.csv`;
   from set m on also between a round's stretches of sizes, STRETCHES) put the rounds in
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
   AGREE, or it is more than AGREE slower than the median of the larger allgathers up to 1 KiB (`anchor_slowed`;
   their least until session 26).
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

By stretch (session 27, stated before the lead's quiet set of that session; every earlier set known, so post-hoc on
them). Rules 2-4 judge a set as a whole, so a placement seen in some stretches only is refused though the rows of one
stretch could test the model there. The verdict by stretch judges each stretch of sizes (STRETCHES) of a set by the
rows its prediction reads (`rows_used`: every table of the variant at its sizes, the LogGP line's rows in their
regimes, osu_bw's first row, and the anchor row's), by the same rules: one placement (1), the anchor row undisturbed
(2), half of the stretch's own sizes undisturbed (3), and every row it reads measured in MIN_ROUNDS rounds or more
(4, per row). The target is then scored on the sizes of the valid stretches together, and the sizes left untested
are named. What it does not see: the line's bends above the switch are placed from all its rows there (loggp), so a
row of another regime, measured in one round, can move the bend that bounds a stretch's regime.

The rule reads the measured tables and probes only, never the model's error.
"""
from __future__ import annotations

import csv
import os
import statistics

from cxlsim.emulator.host import placement_of

STRETCHES = (0, 8192, 128 << 10, 512 << 10)
"""A round runs its sizes in stretches starting at these sizes (0-4 KiB, 8-64 KiB, 128-256 KiB, 512 KiB-1 MiB), one
mpirun each, with a placement probe before, between and after them: the host can change placement within a
round (set j's round 1 ran 16-256 KiB in the slow placement between two fast probes)."""
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
    """Whether the anchor row (the smallest allgather) took more than AGREE longer than the median of the larger
    allgathers up to 1 KiB: there a call costs the same within its noise at every size, so such an anchor was
    slowed, in every round the statistic saw, and the overhead anchored on it moves every row.
    The median, not the least of them (session 27, before the lead's quiet set; post-hoc on every committed set):
    their spread from size to size is as large as AGREE itself (quiet sets c, g, j, o, 2026-12-02: within a round,
    the least of the 2 B-1 KiB rows lies 8-16% below their median, in both statistics), so the least of ten rows
    flagged an undisturbed anchor about as often as not."""
    anchor = next(r for r in rows if r["anchor"])
    small = [r["measured_ns"] for r in rows if not r["anchor"] and r["size_bytes"] <= 1024]
    return bool(small) and anchor["measured_ns"] > (1.0 + AGREE) * statistics.median(small)


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


def stretches(max_bytes: int) -> list:
    """[(first size, last size)] of the stretches up to max_bytes."""
    starts = [s for s in STRETCHES if s <= max_bytes]
    return [(low, (starts[i + 1] // 2) if i + 1 < len(starts) else max_bytes) for i, low in enumerate(starts)]


def rounds_per_row(sets_dir: str, cma: str) -> dict:
    """{(benchmark, size): how many rounds measured that row} in the set's raw.csv."""
    seen = {}
    with open(os.path.join(sets_dir, "raw.csv")) as fh:
        for row in csv.DictReader(fh):
            if row["cma"] == cma:
                seen.setdefault((row["benchmark"], int(row["size_bytes"])), set()).add(row["round"])
    return {key: len(rounds) for key, rounds in seen.items()}


def rows_used(fit, benches, size: int, anchor: int, table_sizes: dict) -> set:
    """{(benchmark, size)}: the rows the model's prediction of the allgather at `size` reads. benches: the variant's
    tables, the LogGP line's (latency or rewritten-buffer latency) first, with osu_bw among them; fit: its LogGPFit;
    table_sizes: {benchmark: the sizes its table holds}. The prediction reads the tables at `size` (the exchange
    term is measured there; every table of the variant is counted, as the common-round rule does, though osu_bw's row
    there is read only by the window-64 contention), the line's rows in the regime of `size` (its L, G), osu_bw's
    first row (o = g), and the anchor row's: every table at the anchor, and the line's rows in the anchor's regime
    (the collective overhead is the anchor's measured allgather less its prediction)."""
    line = benches[0]

    def regime_rows(k):
        regime = fit.regime_for(k)
        return {(line, s) for s in table_sizes.get(line, ()) if regime.min_size_bytes <= s <= regime.max_size_bytes}

    used = {(b, k) for b in benches + ("allgather",) for k in (size, anchor)} | regime_rows(size) | regime_rows(anchor)
    if table_sizes.get("bw"):
        used.add(("bw", min(table_sizes["bw"])))
    return used


def stretch_verdicts(placement: str, ranges: list, sizes: list, anchor: int, used: dict, rounds_at: dict,
                     anchor_disturbed: bool, disturbed: dict) -> list:
    """The verdict by stretch: per (first, last) size in `ranges`, {'range', 'sizes' (its non-anchor sizes),
    'valid', 'reasons'}. placement: the set's (set_placement); used: {size: rows_used}; rounds_at: rounds_per_row;
    disturbed: {size: reason} of the variant (rule 3)."""
    out = []
    for low, high in ranges:
        own = [s for s in sizes if low <= s <= high and s != anchor]
        if not own:
            continue
        reasons = []
        if placement not in ("fast", "slow", "not probed"):
            reasons.append(f"placement {placement}")
        if anchor_disturbed:
            reasons.append("anchor row disturbed")
        short = sorted({row for s in own for row in used[s] if rounds_at.get(row, 0) < MIN_ROUNDS},
                       key=lambda r: (r[1], r[0]))
        if short:
            shown = ", ".join(f"{b} {k} B" for b, k in short[:3]) + (f" and {len(short) - 3} more" if len(short) > 3 else "")
            reasons.append(f"{len(short)} of the rows it reads measured in under {MIN_ROUNDS} rounds ({shown})")
        kept = [s for s in own if s not in disturbed]
        if len(kept) < MIN_UNDISTURBED * len(own):
            reasons.append(f"{len(kept)} of its {len(own)} sizes undisturbed")
        out.append({"range": [low, high], "sizes": own, "valid": not reasons, "reasons": reasons})
    return out


def size_name(size: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def describe_stretches(verdicts: list) -> str:
    return "; ".join(f"{size_name(v['range'][0])}-{size_name(v['range'][1])}: "
                     + ("valid" if v["valid"] else "refused (" + ", ".join(v["reasons"]) + ")") for v in verdicts)
