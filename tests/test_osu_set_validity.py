"""The set verdict of experiments/osu_hypotheses/set_validity.py: when an OMB-style set is too disturbed to test
the --from-osu model (placement probes, anchor row, coverage), by hand and on the committed sets."""
import glob
import os
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "experiments", "osu_hypotheses")
if ROOT not in sys.path:  # the experiment's modules import each other as siblings, as when run as scripts
    sys.path.insert(0, ROOT)

import osu_files  # noqa: E402
import run_hypotheses  # noqa: E402
import set_validity as sv  # noqa: E402


def test_a_probe_is_fast_slow_or_disturbed_at_the_project_thresholds():
    from cxlsim.emulator.host import placement_of

    assert [placement_of(ns) for ns in (84.0, 199.9, 200.0, 200.5, 419.0, 2000.0, 2000.5, 534807.0)] == \
        ["fast", "fast", "fast", "slow", "slow", "slow", "disturbed", "disturbed"]
    assert (sv.round_placement(200.0, 84.0), sv.round_placement(2000.0, 419.0)) == ("fast", "slow")


def test_a_round_takes_the_placement_its_undisturbed_probes_agree_on():
    assert sv.round_placement(88.5, 87.0) == "fast"
    assert sv.round_placement(534807.0, 385.0) == "slow"      # set i round 1: the disturbed probe is left out
    assert sv.round_placement(390.0, 92.0) == "mixed"         # set i round 4 (cma-on): slow, then fast
    assert sv.round_placement(235956.0, 3000.0) == "unknown"  # both probes waited for a CPU
    assert sv.round_placement(88.0, 90.0, 380.0, 87.0) == "mixed"  # a slow stretch between fast probes
    assert sv.round_placement(5e5, 434.0, 7e5, 6e5) == "slow"


def test_a_round_runs_in_stretches_with_a_probe_between_them():
    assert run_hypotheses.stretches(1 << 20) == [(0, 4096), (8192, 65536), (128 << 10, 256 << 10), (512 << 10, 1 << 20)]
    assert run_hypotheses.stretches(4096) == [(0, 4096)]
    assert run_hypotheses.stretches(12288) == [(0, 4096), (8192, 12288)]


def test_the_probes_between_stretches_are_read_in_order(tmp_path):
    with open(tmp_path / "raw.csv", "w") as fh:
        fh.write("round,cma,benchmark,size_bytes,roundtrip_before_ns,roundtrip_after_ns\n")
        for bench in ("latency", "allgather"):
            for size, before, after in ((1, 90.0, 95.0), (4096, 90.0, 95.0), (8192, 95.0, 400.0), (65536, 95.0, 400.0)):
                fh.write(f"1,cma-on,{bench},{size},{before},{after}\n")
    assert sv.placements(str(tmp_path)) == [(1, "cma-on", 90.0, 95.0, 400.0)]
    assert sv.set_placement(sv.placements(str(tmp_path)), "cma-on") == ("mixed", {1: "mixed"})


def test_a_set_whose_rounds_are_not_one_placement_is_refused():
    probes = [(1, "cma-on", 90.0, 85.0), (2, "cma-on", 400.0, 5e5), (1, "cma-off", 410.0, 390.0)]
    assert sv.set_placement(probes, "cma-off") == ("slow", {1: "slow"})
    placement, per_round = sv.set_placement(probes, "cma-on")
    assert placement == "mixed" and per_round == {1: "fast", 2: "slow"}
    v = sv.verdict(probes, "cma-on", anchor_disturbed=False, undisturbed=20, sizes=20, rounds=2)
    assert not v["valid"] and v["reasons"] == ["placement: rounds 1 fast, 2 slow"]
    unknown = [(1, "cma-on", 90.0, 85.0), (2, "cma-on", 5e5, 3e4)]
    assert sv.set_placement(unknown, "cma-on")[0] == "mixed"  # a round with no placement: no one machine
    assert sv.verdict([], "cma-on", False, 20, 20, 4) == {"valid": True, "placement": "not probed", "reasons": []}


def test_the_anchor_and_the_coverage_rules():
    fast = [(1, "cma-on", 90.0, 85.0)]
    assert sv.verdict(fast, "cma-on", False, 10, 20, 2) == {"valid": True, "placement": "fast", "reasons": []}
    assert sv.verdict(fast, "cma-on", False, 9, 20, 2)["reasons"] == ["9 of 20 sizes undisturbed (under 50%)"]
    both = sv.verdict(fast, "cma-on", True, 9, 20, 2)
    assert not both["valid"] and both["reasons"][0] == "anchor row disturbed" and len(both["reasons"]) == 2
    assert sv.describe_verdict(sv.verdict(fast, "cma-on", False, 19, 20, 2)) == "valid (fast placement)"
    assert sv.describe_verdict(both).startswith("too disturbed: anchor row disturbed; 9 of 20")
    one = sv.verdict(fast, "cma-on", False, 20, 20, 1)  # one round passes rules 2-3 whatever happened in it
    assert one == {"valid": False, "placement": "fast", "reasons": ["1 round (rules 2-3 need 2 to compare)"]}


@pytest.mark.parametrize("name, valid, placement, reasons", [
    ("sets_2026-12-01j_quiet", False, "mixed", ["placement: rounds 1 fast, 2 mixed, 3 slow, 4 mixed"]),
    ("sets_2026-12-01g_load1-2", True, "not probed", []),
    ("sets_2026-12-01f_load6-12", False, "not probed", ["anchor row disturbed"]),
    ("sets_2026-12-01i_load6-9", False, "mixed",
     ["placement: rounds 1 slow, 2 slow, 3 slow, 4 mixed", "anchor row disturbed"]),
])
def test_the_committed_sets_verdicts(name, valid, placement, reasons):
    summary = run_hypotheses.check(os.path.join(ROOT, name), write=False)
    assert summary["fastest cma-on x-w1"]["verdict"] == {"valid": valid, "placement": placement, "reasons": reasons}


@pytest.mark.parametrize("name", [os.path.basename(d) for d in sorted(glob.glob(os.path.join(ROOT, "sets_*")))])
def test_the_tables_rebuilt_from_raw_csv_are_the_committed_files(name, tmp_path):
    sets_dir = os.path.join(ROOT, name)
    osu_files.write_tables(osu_files.read_raw(sets_dir), str(tmp_path))
    for statistic in ("fastest", "median"):
        files = sorted(os.listdir(os.path.join(sets_dir, statistic)))
        assert files == sorted(os.listdir(tmp_path / statistic))
        for f in files:
            with open(os.path.join(sets_dir, statistic, f)) as fh:
                assert (tmp_path / statistic / f).read_text() == fh.read(), f


def test_a_mixed_set_splits_into_the_rounds_of_each_placement(tmp_path):
    """Set j: cma-on rounds 1 fast, 3 slow (2 and 4 changed placement while they ran); cma-off 1-2 fast, 3-4 slow."""
    sets_dir = os.path.join(ROOT, "sets_2026-12-01j_quiet")
    subs = osu_files.placement_sets(sets_dir, str(tmp_path))
    assert sorted(subs) == ["fast", "slow"]
    for placement, rounds in (("fast", {"cma-on": {1}, "cma-off": {1, 2}}), ("slow", {"cma-on": {3}, "cma-off": {3, 4}})):
        raw = osu_files.read_raw(subs[placement])
        assert {c: {int(r["round"]) for r in raw if r["cma"] == c} for c in rounds} == rounds
        assert {sv.round_placement(*ns) for _, _, *ns in sv.placements(subs[placement])} == {placement}
        # the sub-set's fastest allgather is the fastest batch of its own rounds
        want = {int(r["size_bytes"]): float(r["batch_fastest"]) for r in osu_files.read_raw(sets_dir)
                if r["benchmark"] == "allgather" and r["cma"] == "cma-on" and int(r["round"]) in rounds["cma-on"]}
        with open(os.path.join(subs[placement], "fastest", "osu_allgather_cma-on.txt")) as fh:
            got = {int(line.split()[0]): float(line.split()[1]) for line in fh if not line.startswith("#")}
        assert got == pytest.approx(want, abs=0.005)
    summary = run_hypotheses.check(subs["fast"], write=False)
    assert summary["fastest cma-on x-w1"]["verdict"]["reasons"] == ["1 round (rules 2-3 need 2 to compare)"]
    assert summary["fastest cma-off x-w1"]["verdict"]["placement"] == "fast"
    assert sv.round_count(subs["slow"], "cma-off") == 2


def test_a_sub_set_without_rounds_of_one_setting_is_checked_for_the_other():
    """Set k's slow rounds: cma-on round 2 only."""
    summary = run_hypotheses.check(os.path.join(ROOT, "sets_2026-12-01k_load5-8", "placement_slow"), write=False)
    assert {key.split()[1] for key in summary} == {"cma-on"}
    assert summary["fastest cma-on x-w1"]["verdict"]["placement"] == "slow"


@pytest.mark.parametrize("argv, message", [
    (["--sets", "DIR", "--cma", "cma-on"], "--output, --rounds and --cma apply to a new measurement"),
    (["--cma", "cma-on", "cma-on"], "--cma: cma-on cma-on names a setting twice"),
    (["--cma", "cma-of"], "invalid choice: 'cma-of'")])
def test_the_measurement_options_are_refused_where_they_cannot_apply(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        run_hypotheses.main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_a_stretch_takes_a_placement_only_when_both_its_probes_read_it():
    assert sv.stretch_placement(90.0, 95.0) == "fast"
    assert sv.stretch_placement(380.0, 410.0) == "slow"
    assert sv.stretch_placement(90.0, 410.0) == "none"  # it changed placement
    assert sv.stretch_placement(5e5, 95.0) == "none"  # a disturbed probe vouches for nothing
    assert sv.stretch_placement(5e5, 6e5) == "none"


def test_a_set_probed_between_stretches_splits_into_the_stretches_of_each_placement(tmp_path):
    """Set o: rounds 1-3 and 7 fast throughout, 4-6 and 8 changed placement between stretches."""
    sets_dir = os.path.join(ROOT, "sets_2026-12-01o_quiet")
    subs = osu_files.stretch_sets(sets_dir, str(tmp_path))
    assert sorted(subs) == ["fast", "slow"]
    raw = osu_files.read_raw(sets_dir)
    for placement, sub in subs.items():
        kept = osu_files.read_raw(sub)
        assert kept == [row for row in raw if sv.stretch_placement(
            float(row["roundtrip_before_ns"]), float(row["roundtrip_after_ns"])) == placement]
        assert {sv.round_placement(*ns) for _, _, *ns in sv.placements(sub)} == {placement}
    # the fast stretches of the mixed rounds join the whole fast rounds: more rounds than placement_fast's 4
    assert {row["round"] for row in osu_files.read_raw(subs["fast"])} == {"1", "2", "3", "4", "7", "8"}
    # a set probed only before and after its rounds has no stretch sub-sets: placement_sets splits it
    assert osu_files.stretch_sets(os.path.join(ROOT, "sets_2026-12-01j_quiet"), str(tmp_path / "j")) == {}


def test_a_size_fewer_than_two_rounds_measured_is_disturbed():
    reproducing = {("allgather", 8192): {1}, ("allgather", 16384): {1, 2}}
    sizes = [8192, 16384]
    assert run_hypotheses.disturbed_sizes(reproducing, {}, ("allgather",), sizes) == {}
    assert run_hypotheses.disturbed_sizes(reproducing, {}, ("allgather",), sizes, {8192: 1, 16384: 2}) == \
        {8192: "1 round"}


def test_the_committed_stretch_sub_sets_verdicts():
    """Post-hoc (the rule was written knowing m, n and o): o's fast stretches are valid, its slow ones are not."""
    fast = run_hypotheses.check(os.path.join(ROOT, "sets_2026-12-01o_quiet", "stretch_fast"), write=False)
    assert fast["fastest cma-on x-w1-fresh"]["verdict"] == {"valid": True, "placement": "fast", "reasons": []}
    slow = run_hypotheses.check(os.path.join(ROOT, "sets_2026-12-01o_quiet", "stretch_slow"), write=False)
    assert slow["fastest cma-on x-w1-fresh"]["verdict"]["reasons"][0] == "anchor row disturbed"
    assert run_hypotheses.rounds_per_size(os.path.join(ROOT, "sets_2026-12-01o_quiet", "stretch_slow"),
                                          "cma-on")[1] == 1


def test_a_prediction_reads_its_own_rows_its_regimes_line_osu_bws_first_row_and_the_anchors():
    from cxlsim.loggp import LogGPFit, Regime

    def regime(lo, hi):
        return Regime(min_size_bytes=lo, max_size_bytes=hi, latency_ns=1.0, overhead_ns=0.0, gap_ns=0.0,
                      gap_per_byte_ns=0.1, rms_rel_error=0.0)

    fit = LogGPFit(regimes=(regime(0, 4096), regime(8192, 65536), regime(131072, 1 << 20)), identified="test")
    sizes = {b: {0, 1, 4096, 8192, 65536, 131072, 1 << 20} for b in ("fresh", "bw", "freshbibw1", "allgather")}
    used = sv.rows_used(fit, ("fresh", "bw", "freshbibw1"), 8192, 1, sizes)
    at = {(b, k) for b in ("fresh", "bw", "freshbibw1", "allgather") for k in (1, 8192)}
    line = {("fresh", k) for k in (0, 1, 4096, 8192, 65536)}  # the regimes of 8192 B and of the 1 B anchor
    assert used == at | line | {("bw", 0)}  # osu_bw's first row gives o = g
    assert ("fresh", 131072) not in used and ("allgather", 65536) not in used


def test_a_stretch_is_judged_by_the_rows_it_reads_alone():
    ranges = [(0, 4096), (8192, 65536)]
    sizes = [1, 2, 4096, 8192, 65536]
    used = {s: {("allgather", s), ("allgather", 1)} for s in sizes}
    rounds = {("allgather", s): 2 for s in sizes} | {("allgather", 65536): 1}
    both = sv.stretch_verdicts("slow", ranges, sizes, 1, used, rounds, False, {})
    assert [v["valid"] for v in both] == [True, False]
    assert both[0]["sizes"] == [2, 4096]  # the anchor row is scored by none
    assert both[1]["reasons"] == ["1 of the rows it reads measured in under 2 rounds (allgather 65536 B)"]
    half = sv.stretch_verdicts("slow", ranges, sizes, 1, used, rounds | {("allgather", 65536): 2}, False,
                               {8192: "no common round"})
    assert [v["valid"] for v in half] == [True, True]  # 1 of 2 sizes undisturbed: half, as rule 3
    assert [v["valid"] for v in sv.stretch_verdicts("slow", ranges, sizes, 1, used, rounds, False,
                                                    {8192: "x", 65536: "y"})] == [True, False]
    refused = sv.stretch_verdicts("mixed", ranges, sizes, 1, used, rounds, True, {})
    assert all(v["reasons"][:2] == ["placement mixed", "anchor row disturbed"] for v in refused)


def test_the_committed_quiet_slow_sub_sets_by_stretch_under_the_models_statistic():
    """sets_2026-12-02_quiet, median batch (post-hoc: the verdict by stretch was written knowing the set)."""
    assert run_hypotheses.MODEL_STATISTIC == "median"
    base = os.path.join(ROOT, "sets_2026-12-02_quiet")
    stretch = run_hypotheses.check(os.path.join(base, "stretch_slow"), write=False)["median cma-on x-w1-fresh"]
    assert [v["valid"] for v in stretch["by_stretch"]["stretches"]] == [True] * 4
    assert stretch["by_stretch"]["score"]["sizes"] == 20 and stretch["by_stretch"]["untested"] == []
    assert stretch["by_stretch"]["score"]["worst_abs"] == stretch["worst_abs"]  # every stretch valid: the whole set
    rounds = run_hypotheses.check(os.path.join(base, "placement_slow"), write=False)["median cma-on x-w1-fresh"]
    b = rounds["by_stretch"]
    assert [v["valid"] for v in b["stretches"]] == [True, False, True, True]
    assert b["stretches"][1]["reasons"] == ["1 of its 4 sizes undisturbed"]
    assert b["untested"] == [8192, 16384, 32768, 65536] and b["score"]["sizes"] == 16 and b["score"]["meets_target"]


def test_a_placement_the_run_did_not_see_is_said_to_be_untested(tmp_path, capsys):
    """A run whose every stretch was fast (o's fast stretches, as a run of their own): its sub-sets as main makes them."""
    import shutil

    for name in ("raw.csv", "memcpy.csv"):
        shutil.copy(os.path.join(ROOT, "sets_2026-12-01o_quiet", "stretch_fast", name), tmp_path / name)
    osu_files.write_tables(osu_files.read_raw(str(tmp_path)), str(tmp_path))
    subsets = sorted(osu_files.placement_sets(str(tmp_path), str(tmp_path)).values()) + \
        sorted(osu_files.stretch_sets(str(tmp_path), str(tmp_path)).values())
    run_hypotheses.report_placements(str(tmp_path), subsets)
    out = capsys.readouterr().out
    assert "slow placement: NOT OBSERVED in this run" in out and "round 1: 93 -> 68 -> 67 -> 96 -> 92 ns" in out
    assert "fast placement, stretch_fast, median cma-on x-w1-fresh:" in out and "by stretch: 0 B-4 KiB: valid" in out
    verdict = next(line for line in out.splitlines() if line.startswith("=> fast placement, cma-on"))
    assert "by stretch of stretch_fast" in verdict and ": MET on the 20 sizes of its valid stretches" in verdict
