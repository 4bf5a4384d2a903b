"""experiments/osu_hypotheses/exchange_phases: the exchange's copies without MPI, and its per-placement table."""
import csv
import os
import shutil
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "experiments", "osu_hypotheses")
if ROOT not in sys.path:  # the experiment's modules import each other as siblings, as when run as scripts
    sys.path.insert(0, ROOT)

import exchange_phases  # noqa: E402

from cxlsim.results import Workspace  # noqa: E402


def raw_rows(round_, placement, figures):
    """figures: {mode: (write, read, total)} at 512 KiB, fastest = median."""
    return [{"round": round_, "size_bytes": 512 << 10, "mode": mode, "placement": placement,
             **dict(zip(exchange_phases.FIELDS, (w, r, t, w, r, t)))} for mode, (w, r, t) in figures.items()]


def test_the_table_takes_each_phase_fastest_over_one_placements_rounds(tmp_path):
    fast1 = {"oneway_dirty": (20.0, 50.0, 70.0), "exchange_dirty": (30.0, 50.0, 80.0),
             "oneway_clean": (0.1, 40.0, 40.1), "exchange_clean": (0.1, 41.0, 41.1)}
    fast2 = {mode: tuple(2 * v for v in vs) for mode, vs in fast1.items()}  # a slowed round: never the fastest
    slow = {mode: tuple(5 * v for v in vs) for mode, vs in fast1.items()}
    raw = raw_rows(1, "fast", fast1) + raw_rows(2, "fast", fast2) + raw_rows(3, "slow", slow) + raw_rows(4, "mixed", fast1)
    exchange_phases.report(Workspace(str(tmp_path)), raw)
    text = (tmp_path / "phases.txt").read_text()
    assert "# fast placement (2 round(s))" in text and "# slow placement (1 round(s))" in text
    assert "# rounds left out (no one placement): 4 mixed" in text
    rows = {r["placement"]: r for r in csv.DictReader(open(tmp_path / "phases.csv"))}
    fast = rows["fast"]
    assert float(fast["c_write_dirty"]) == pytest.approx(30.0 / 20.0)
    assert float(fast["c_read_dirty"]) == pytest.approx(1.0)
    assert float(fast["c_dirty"]) == pytest.approx(80.0 / 70.0)
    assert float(fast["c_clean"]) == pytest.approx(41.1 / 40.1)
    assert float(fast["excess_dirty_us"]) == pytest.approx(10.0)
    assert float(rows["slow"]["excess_dirty_us"]) == pytest.approx(50.0)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_the_c_loop_times_every_mode_at_every_size(tmp_path):
    exe = exchange_phases.build(str(tmp_path))
    rows = exchange_phases.run_round(exe, 128 << 10, 256 << 10, batches=2, iters=1, timeout_s=120)
    assert [(r["size_bytes"], r["mode"]) for r in rows] == [
        (s, m) for s in (128 << 10, 256 << 10) for m in exchange_phases.MODES]
    for r in rows:
        assert 0 < r["read_fastest_us"] <= r["read_median_us"]
        assert r["write_fastest_us"] >= 0 and r["total_fastest_us"] > 0
        assert r["total_fastest_us"] <= r["total_median_us"]
