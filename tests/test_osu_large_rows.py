"""experiments/osu_hypotheses/large_rows.py: the test of the L2 bound beyond 1 MiB, by hand on made-up figures."""
import os
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "experiments", "osu_hypotheses")
if ROOT not in sys.path:  # the experiment's modules import each other as siblings, as when run as scripts
    sys.path.insert(0, ROOT)

import large_rows  # noqa: E402


def test_the_step_error_with_and_without_the_bound():
    k512, k2m = 512 << 10, 2 << 20
    best = {}
    for size, (lat, fresh, bw1, bibw1, fbw1, fbibw1, allg) in {
            k512: (40.0, 60.0, 55.0, 56.0, 80.0, 82.0, 85.0),
            k2m: (200.0, 250.0, 260.0, 330.0, 300.0, 320.0, 300.0)}.items():
        for bench, v in zip(large_rows.TABLES, (lat, fresh, bw1, bibw1, fbw1, fbibw1, allg)):
            best[bench, size] = v
    rows = []
    lines = large_rows.table("fast", 3, best, rows)
    assert lines[0].startswith("# fast placement (3 round(s))")
    big = next(r for r in rows if r["size_bytes"] == k2m)
    # unchanged excess 330 - 200 = 130 us; held at 512 KiB: (56 - 40) us per 512 KiB x 4 = 64 us
    assert big["excess_unchanged_us"] == pytest.approx(130.0)
    assert big["excess_unchanged_held_at_512k_us"] == pytest.approx(64.0)
    assert big["step_error_x_w1"] == pytest.approx((250.0 + 130.0) / 300.0 - 1.0)
    assert big["step_error_x_w1_l2"] == pytest.approx((250.0 + 64.0) / 300.0 - 1.0)
    assert big["allgather_step_excess_us"] == pytest.approx(50.0)
    # the rewritten excess 320 - 250 = 70 us: the step is the rewritten exchange itself, 320 / 300
    assert big["step_error_x_w1_fresh"] == pytest.approx(320.0 / 300.0 - 1.0)
    assert lines[-1].endswith("+6.7%")


def test_a_placement_answers_only_with_two_rounds_that_agree_beyond_the_bound():
    def raw(figures):  # {round: us of every table at 512 KiB and 1 MiB}
        return [{"round": r, "benchmark": b, "size_bytes": s, "fastest_us": us * (s >> 19)}
                for r, us in figures.items() for b in large_rows.TABLES for s in (512 << 10, 1 << 20)]

    assert large_rows.verdict(raw({1: 100.0})) == "# verdict: too disturbed: 1 round (rule 4 needs 2)"
    assert large_rows.verdict(raw({1: 100.0, 2: 109.0})) == "# verdict: valid"  # within 10%: round 2 too
    rows = raw({1: 100.0, 2: 130.0})
    for row in rows:  # round 1's allgather at 1 MiB slowed: round 2 is then the fastest there, but not elsewhere
        if row["round"] == 1 and row["benchmark"] == "allgather" and row["size_bytes"] == 1 << 20:
            row["fastest_us"] = 900.0
    assert large_rows.verdict(rows) == "# verdict: too disturbed: no round reproduces every table at 1024 KiB"
