"""The local-host model's DES predictions of the pool collectives beyond allgather, and their validation.

The prediction tests use synthetic primitives (a fixture profile's model with hand-set fold and per-call
curves) and compare with hand-computed values; one test measures, for the plumbing only."""
import dataclasses
import os
import math

import numpy as np

import pytest

from cxlsim.calibrate import LocalModel, load_profile
from cxlsim.calibrate.collective_measure import fold_sizes, measure_collectives, measure_fold, measure_remote_fold
from cxlsim.calibrate.collectives import (COLLECTIVES, fold_bytes, format_collectives, format_fold, predict_collective,
                                          summarize_collectives, validate_collectives)
from cxlsim.errors import InputError

PROFILE = "tests/data/local_host_profile_np2.json"
NEVER = 1 << 40


def model(**changes):
    return dataclasses.replace(LocalModel.from_dict(load_profile(PROFILE)["model"]), **changes)


def with_fold(m, extra_ns: dict):
    """`m` with a float32-sum fold curve of extra_ns[size] beyond a read pass that costs nothing (a copy-mode
    call reads its blocks through the DES's pool reads, never through the read pass)."""
    return dataclasses.replace(m, fold_curves={"float32 sum": {str(n): v for n, v in extra_ns.items()}},
                               read_pass_curve={"0": 0.0, "1048576": 0.0})


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_predictions_are_finite_and_grow_from_small_to_large_sizes(coherence):
    m = model()
    for collective in COLLECTIVES:
        sizes = (0,) if collective == "barrier" else (64, 4096, 262144)
        got = [predict_collective(m, coherence, collective, n, 65536) for n in sizes]
        assert all(math.isfinite(v) and v > 0 for v in got), collective
        assert got[-1] > got[0] or collective == "barrier", (collective, got)


def test_allreduce_takes_the_algorithm_the_threshold_names():
    m = model()
    assert predict_collective(m, "hw", "allreduce", 262144, NEVER) != predict_collective(m, "hw", "allreduce", 262144, 0)


def test_fold_bytes_by_hand():
    assert fold_bytes("allreduce", 4096, NEVER, 2) == 4096  # small: the whole vector
    assert fold_bytes("allreduce", 4096, 0, 2) == 2048  # large: rank 0's share, 32 of the 64 lines
    assert fold_bytes("allreduce", 4160, 0, 2) == 2048  # 65 lines: rank 0 gets 32 of them
    assert fold_bytes("reduce_scatter", 100, NEVER, 2) == 50  # ceil(100 / 2): blocks are not padded
    assert fold_bytes("broadcast", 4096, NEVER, 2) == 0 and fold_bytes("barrier", 0, NEVER, 2) == 0


def test_reduce_bandwidth_is_the_fold_beyond_the_read_pass_by_hand():
    m = model(fold_curves={"float32 sum": {"1024": 900.0, "65536": 9000.0}},
              read_pass_curve={"0": 0.0, "1024": 100.0, "65536": 1000.0})
    assert m.reduce_bw(1024) == pytest.approx(1024 / 800.0)
    assert m.reduce_bw(65536) == pytest.approx(65536 / 8000.0)
    midway = (1024 + 65536) // 2  # both curves linear in between: (900 + 9000) / 2 - (100 + 1000) / 2
    assert m.reduce_bw(midway) == pytest.approx(midway / 4400.0)
    assert model().reduce_bw(1024) is None  # no fold primitive


@pytest.mark.parametrize("coherence", ["hw", "flush"])
@pytest.mark.parametrize("collective,size,large", [("allreduce", 16384, NEVER), ("allreduce", 16384, 0),
                                                   ("reduce_scatter", 16384, NEVER)])
def test_a_slower_fold_adds_exactly_its_extra_time(coherence, collective, size, large):
    """Both ranks fold at once, on the critical path: a fold primitive 2000 ns slower at the folded size
    makes the call 2000 ns slower, whatever the rest of the model is."""
    m = model()
    folded = fold_bytes(collective, size, large, 2)
    fast = with_fold(m, {folded: 500.0, 2 * folded: 500.0}) if folded != size else with_fold(m, {size: 500.0})
    slow = with_fold(m, {folded: 2500.0, 2 * folded: 2500.0}) if folded != size else with_fold(m, {size: 2500.0})
    fast_ns = predict_collective(fast, coherence, collective, size, large)
    slow_ns = predict_collective(slow, coherence, collective, size, large)
    assert slow_ns - fast_ns == pytest.approx(2000.0, abs=1e-6)


@pytest.mark.parametrize("collective,size,large", [("allreduce", 16384, NEVER), ("allreduce", 16384, 0),
                                                   ("reduce_scatter", 16384, NEVER)])
def test_a_blocks_own_fold_replaces_the_runs_at_the_sizes_the_call_folds(collective, size, large):
    """A job's fold measured beside the calls (`collective_blocks.block_folds`, kept per collective and size)
    stands in `row_model` for the run's fold curve at those sizes: 2000 ns more there, 2000 ns more per call;
    a row of another size keeps the run's curve."""
    from cxlsim.calibrate.collective_blocks import block_folds  # noqa: F401 (the primitive whose figures these are)
    from cxlsim.calibrate.collectives import row_model

    folded = fold_bytes(collective, size, large, 2)
    m = with_fold(model(), {folded: 500.0, size: 500.0, 2 * size: 500.0})
    job = {"id": "0 fast", "coherence": "hw",
           "fold_ns": {collective: {str(size): {str(f): 2500.0 for f in {folded, fold_bytes(collective, size, 0, 2)}}}}}
    base = predict_collective(m, "hw", collective, size, large)
    assert predict_collective(row_model(m, job, collective, size), "hw", collective, size, large) - base \
        == pytest.approx(2000.0, abs=1e-6)
    other = 2 * size
    assert predict_collective(row_model(m, job, collective, other), "hw", collective, other, large) == \
        predict_collective(m, "hw", collective, other, large)


def test_a_reduction_block_measures_its_fold_on_every_rank_at_the_sizes_the_call_folds():
    from cxlsim.calibrate.collective_blocks import block_folds

    assert block_folds("broadcast", 4096) == {} and block_folds("allreduce", 0) == {}
    got = block_folds("allreduce", 8192)
    assert set(got) == {8192, 4096} and all(v >= 0 for v in got.values())
    assert set(block_folds("reduce_scatter", 8192)) == {4096}


def test_the_ranks_overheads_come_from_one_block_the_one_whose_slowest_rank_is_the_median():
    from cxlsim.calibrate.collective_blocks import median_block_overheads

    # each rank slow in one block of three, not the same one: each rank's own median is fast (270, 270)
    assert median_block_overheads([[260.0, 480.0], [460.0, 270.0], [270.0, 270.0]]) == [460.0, 270.0]
    assert median_block_overheads([[300.0, 100.0]]) == [300.0, 100.0]
    assert median_block_overheads([[100.0, 200.0], [400.0, 100.0], [500.0, 600.0], [110.0, 120.0]]) == [250.0, 150.0]


@pytest.mark.parametrize("iterations", [50, 3])
def test_a_blocks_calls_are_timed_in_groups_each_after_its_share_of_the_overhead_calls(iterations):
    from cxlsim.calibrate import collective_blocks as cb

    log = []
    overhead, calls = cb.interleaved_calls(lambda: log.append("c"), lambda: None, lambda: log.append("o"), iterations)
    groups = min(cb.OVERHEAD_GROUPS, iterations)
    shares = [a.size for a in np.array_split(np.arange(iterations), groups)]
    expected = "o" * cb.OVERHEAD_WARMUP + "".join(
        "o" * (1 + cb.OVERHEAD_CALLS // groups) + "c" * ((max(cb.GROUP_WARMUP, iterations // 10) if g == 0 else cb.GROUP_WARMUP) + share)
        for g, share in enumerate(shares))
    assert "".join(log) == expected
    assert calls.size == iterations and overhead.size == groups * (cb.OVERHEAD_CALLS // groups)
    assert (calls >= 0).all() and (overhead >= 0).all()


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_a_collectives_own_per_call_overhead_adds_exactly_itself(collective):
    m = model(collective_overhead_ns={c: 200.0 for c in COLLECTIVES})
    more = model(collective_overhead_ns={c: 200.0 + (700.0 if c == collective else 0.0) for c in COLLECTIVES})
    size = 0 if collective == "barrier" else 4096
    assert predict_collective(more, "hw", collective, size, NEVER) - predict_collective(m, "hw", collective, size, NEVER) \
        == pytest.approx(700.0, abs=1e-6)


def test_summary_by_hand_leaves_out_rows_without_a_block_and_keeps_placements_apart():
    rows = [dict(coherence="hw", collective="broadcast", size_bytes=n, measured_ns=1.0, predicted_ns=1.0 + e, error=e,
                 held_out=h, jobs=2, blocks=5) for n, e, h in ((64, 0.05, True), (128, -0.20, True), (256, 0.08, True),
                                                                 (512, 0.9, False))]
    slow = [dict(r, placement="slow", error=0.5, held_out=True) for r in rows[:2]]
    s = summarize_collectives(rows + slow)["broadcast hw"]
    assert (s["median"], s["worst"], s["worst_size"], s["points"], s["sizes"], s["excluded"], s["met"]) == \
        (pytest.approx(0.08), pytest.approx(0.20), 128, 3, 4, 1, True)
    assert summarize_collectives(rows + slow)["broadcast hw slow"]["points"] == 2
    text = format_collectives(rows + slow)
    assert "3 of 4 sizes held out (>= 5 blocks in >= 2 jobs each; 1 without a block, left out): met" in text
    assert "(no block in this placement: left out)" in text
    rows[1]["error"] = 0.30
    assert not summarize_collectives(rows)["broadcast hw"]["met"]
    rows[1]["error"] = -0.20
    for r in rows:
        r["held_out"] = False  # no block in the placement at any size: reported, never met
    assert summarize_collectives(rows)["broadcast hw"]["measured"] is False
    assert not summarize_collectives(rows)["broadcast hw"]["met"]
    assert "UNMEASURED" in format_collectives(rows)


def test_fold_primitive_shape():
    got = measure_fold([64, 262144], classes=("float32 sum", "int64 max"), iterations=5, repeats=1)
    assert set(got) == {"float32 sum", "int64 max"}
    for cls in got.values():
        assert set(cls["ns"]) == {"64", "262144"}
        assert all(cls["p10_ns"][n] <= cls["ns"][n] <= cls["p90_ns"][n] for n in cls["ns"])
        assert all(v is None or v > 0 for v in cls["bytes_per_s"].values()) and cls["bytes_per_s"]["262144"]
    assert "fold float32 sum" in format_fold(got)
    remote = measure_remote_fold([64, 4096], iterations=3, repeats=1)
    assert set(remote["ns"]) == {"64", "4096"} and remote["p10_ns"]["4096"] <= remote["p90_ns"]["4096"]
    assert "rewritten by the other core" in format_fold(got, remote)
    assert fold_sizes([1, 100, 4096]) == [8, 56, 104, 2048, 4096]


def test_measured_rows_validate_against_the_model_in_both_modes():
    measured = ("allgather_zero_copy", "broadcast", "barrier")
    got = measure_collectives((64, 4096), measured, rounds=1, iterations=5, max_retries=0, passes=2)
    rows = validate_collectives(model(), got["rows"], got["jobs"])
    assert {(r["coherence"], r["collective"]) for r in rows if r["placement"] == "fast"} == \
        {(m, c) for m in ("hw", "flush") for c in measured}
    assert all(r["measured_ns"] > 0 and math.isfinite(r["error"]) for r in rows)
    assert got["placement"] in ("fast", "slow") and {j["job"] for j in got["jobs"]} == {0, 1}
    for j in got["jobs"]:  # every block was counted in some state; the kept ones carry their own primitives
        assert sum(j["block_states"].values()) == 2 * 5
        for c, by in j["overhead_ns"].items():
            assert c in measured and all(v > 0 for v in by.values())
        assert all(v > 0 for v in j["exchange_ns"].get("barrier", {}).values())
        assert set(j["pattern_ns"]) <= {"allgather_zero_copy", "broadcast"}  # the blocks' own patterns, the view's among them
    assert set(summarize_collectives(rows)) >= {"barrier flush", "barrier hw", "broadcast flush", "broadcast hw"}
    with pytest.raises(InputError, match="multiples of 4 bytes"):
        measure_collectives((3,))
    with pytest.raises(InputError, match="collectives: expected some of"):
        measure_collectives((64,), ("gather",))


def test_no_collectives_is_refused_where_it_does_not_apply(capsys):
    from cxlsim.cli import main as cli_main

    assert cli_main(["calibrate", "--validate-only", PROFILE, "--no-collectives"]) == 2
    assert "--no-collectives: --validate-only does not use it (--no-collectives applies to a local calibration)" \
        in capsys.readouterr().err


def test_the_remote_folds_store_lands_on_rank_1s_block():
    """fold_other_block names the slot the kernel itself gives rank 1 in every call (both buffers)."""
    from cxlsim.emulator import primitives

    n = 4096
    pool = np.zeros(primitives.fold_layout(n)[2], np.uint8)
    offsets = []

    def mark(call):  # rank 1's input (2.0 everywhere) is in its slot now: find it
        at = primitives.fold_other_block(n, call)
        offsets.append(bool((pool[at:at + n].view(np.float32) == 2.0).all()))
        pool[at:at + n].view(np.float32)[:] = 5.0  # what another core's store would do there
    primitives.fold_samples_ns(n, "float32", "sum", 3, pool=pool, between=mark)
    assert offsets == [True] * 5


def test_collective_bandwidth_makes_the_des_data_time_the_patterns():
    """Synthetic pattern primitives linear in n (3 ns/B) and a 10 ns path: at the collective's bandwidth the
    DES's per-call time is its time at an unlimited bandwidth plus the pattern's data time less the 4 paths
    the DES charges around the copies, plus its flag lines at the allgather's 64-B bandwidth (the round
    trip's). By hand for the broadcast: the DES moves 1.5 x the lines (root W, reader W + W, the mean over
    the ranks) and two flag lines per rank (its publish, its barrier's), 128 B in the mean."""
    from cxlsim.calibrate.collectives import _des_call_ns, collective_bw
    from cxlsim.calibrate.patterns import PATTERNS

    curve = {"64": 3 * 64.0, "1048576": 3 * 1048576.0}
    m = model(pattern_curves={"hw": {p: curve for p in PATTERNS}}, path_ns={"hw": 10.0, "flush": 10.0})
    s = 4096
    flags_ns = 128 / m.host_bw(64, "hw", 10.0)
    assert collective_bw(m, "hw", "broadcast", s, NEVER) == pytest.approx((1.5 * s + 128) / (3 * s - 40 + flags_ns))
    for collective, large in (("allgather", NEVER), ("broadcast", NEVER), ("alltoall", NEVER), ("reduce_scatter", NEVER),
                              ("allreduce", NEVER), ("allreduce", 0)):
        bw = collective_bw(m, "hw", collective, s, large)
        flags = 2 * (_des_call_ns(m, "hw", collective, 0, large, 1.0) - _des_call_ns(m, "hw", collective, 0, large, 2.0))
        got = _des_call_ns(m, "hw", collective, s, large, bw) - _des_call_ns(m, "hw", collective, s, large, 1e9)
        assert got == pytest.approx(3 * s - 40 + flags / m.host_bw(64, "hw", 10.0), rel=1e-4), collective
    assert collective_bw(m, "hw", "barrier", 0, NEVER) is None
    assert collective_bw(m, "hw", "broadcast", 2 << 20, NEVER) is None  # beyond the measured sizes: no extrapolation
    assert collective_bw(model(pattern_curves={}), "hw", "broadcast", s, NEVER) is None


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_without_a_blocks_primitives_the_allgathers_are_the_allgather_models(coherence):
    """The allgather's rows measured in blocks are priced by the DES of part 1's allgather: with none of a block's
    primitives (no pattern, no per-call overhead of its own) the two agree to the nanosecond, copy and zero-copy."""
    from cxlsim.calibrate.des import predict_local

    m = model()
    for n in (4, 4096, 262144):
        assert predict_collective(m, coherence, "allgather", n, NEVER) == pytest.approx(
            predict_local(m, coherence, "copy", n), abs=1e-6)
        assert predict_collective(m, coherence, "allgather_zero_copy", n, NEVER) == pytest.approx(
            predict_local(m, coherence, "zero-copy", n), abs=1e-6)


def test_the_zero_copy_allgathers_pattern_replaces_the_application_passes_exactly():
    """The DES's zero-copy call moves none of the pattern's bytes (it places and views), so the pattern's data time
    (the view's copy-in and the caller's read pass, measured) is added to it in place of `LocalModel.app_ns`, and a
    block's own per-call overhead replaces the allgather's zero-copy one: both by hand."""
    from cxlsim.calibrate.des import predict_local

    n, curve = 4096, {"64": 100.0, "1048576": 100.0 + (1048576 - 64) * 0.5}
    m = model(pattern_curves={"hw": {"allgather_zero_copy": curve}})
    base = predict_local(m, "hw", "zero-copy", n) - m.app_ns(n, "hw")
    assert predict_collective(m, "hw", "allgather_zero_copy", n, NEVER) == pytest.approx(base + 100 + (n - 64) * 0.5)
    mine = dataclasses.replace(m, collective_overhead_ns={"allgather_zero_copy": m.overhead_ns["zero-copy"] + 250.0})
    assert predict_collective(mine, "hw", "allgather_zero_copy", n, NEVER) == pytest.approx(
        predict_collective(m, "hw", "allgather_zero_copy", n, NEVER) + 250.0, abs=1e-6)


def test_the_bytes_moved_survive_a_pair_of_bandwidths_that_straddles_a_switch_of_critical_path(monkeypatch):
    """The DES's time is linear in 1 / bandwidth only piecewise: here one rank's chain (256 B) is critical up to
    1 B/ns and the other's (288 B, 150 ns later) from 2 B/ns, so the 1-2 B/ns pair alone gives -76 B. The octave
    pairs' median gives 256 B, and the bandwidth is those bytes over the pattern's time less the charged
    latency plus the flags (128 B, linear)."""
    import cxlsim.calibrate.collectives as cc
    from cxlsim.calibrate.patterns import PATTERNS

    def des(m, coherence, collective, n, large, bw=None, calls=3, flush_line=None):
        if n == 0:
            return 900.0 + 128.0 / bw
        return 1000.0 + 256.0 / bw if bw <= 1.0 else 1150.0 + 288.0 / bw
    monkeypatch.setattr(cc, "_des_call_ns", des)
    curve = {"64": 3 * 64.0, "1048576": 3 * 1048576.0}
    m = model(pattern_curves={"hw": {p: curve for p in PATTERNS}}, path_ns={"hw": 10.0, "flush": 10.0})
    s = 4096
    assert des(m, "hw", "broadcast", s, NEVER, 1.0) - des(m, "hw", "broadcast", s, NEVER, 2.0) < 0
    flags_ns = 128 / m.host_bw(64, "hw", 10.0)
    assert cc.collective_bw(m, "hw", "broadcast", s, NEVER) == pytest.approx(256 / (3 * s - 40 + flags_ns))


@pytest.mark.parametrize("collective, size", [("allreduce", 4096), ("reduce_scatter", 4096), ("alltoall", 64)])
def test_each_ranks_own_overhead_the_faster_rank_waits_for_the_slower_ones_publish(collective, size):
    """Per-rank overheads (200, 900 ns): equal ranks give the shared figure's time exactly; otherwise the call's mean
    time lies above the ranks' mean overhead's (the faster rank waits for the slower one's publish) and at most
    the slower rank's figure's (the slower rank then finds the other's data already published). (An alltoall
    of 4 KiB per destination hides the 700 ns: the faster rank's own-block copy overlaps its wait.)"""
    def at(shared, ranks=None):
        m = model(collective_overhead_ns={c: shared for c in COLLECTIVES},
                  rank_overhead_ns={collective: ranks} if ranks else {})
        return predict_collective(m, "hw", collective, size, NEVER)
    assert at(0.0, [550.0, 550.0]) == pytest.approx(at(550.0), abs=1e-6)
    both = at(0.0, [200.0, 900.0])
    assert at(550.0) + 200.0 < both <= at(900.0) + 1e-6


def test_a_jobs_per_rank_overheads_reach_the_des_and_a_kernel_price_drops_them():
    from cxlsim.calibrate.collectives import row_model
    from cxlsim.calibrate.price_spread import kernel_model

    m = model()
    job = dict(id="0 fast", job=0, placement="fast", coherence="hw", roundtrip_ns=m.roundtrip_ns["hw"],
               overhead_ns={"allreduce": {"64": 500.0}}, overhead_rank_ns={"allreduce": {"64": [300.0, 700.0]}})
    got = row_model(m, job, "allreduce", 64)
    assert got.rank_overhead_ns == {"allreduce": [300.0, 700.0]} and got.collective_overhead_ns["allreduce"] == 500.0
    assert row_model(got, dict(job, overhead_rank_ns={}), "allreduce", 64).rank_overhead_ns == {}  # the row's own only
    assert kernel_model(got).rank_overhead_ns == {}
    slow = dict(job, roundtrip_ns=450.0, call_roundtrip_ns={"allreduce": {"64": 450.0}})
    assert row_model(m, slow, "allreduce", 64).rank_overhead_ns == {}  # the slow placement: the ranks' mean


def test_a_jobs_own_primitives_replace_the_models():
    """job_model: the job's concurrent copy, patterns and round trip stand in for the model's (with the model's own
    round trip the path solve gives the model's path back); row_model: the per-call overhead and flag exchange of
    the row's own blocks."""
    from cxlsim.calibrate.collectives import job_model, row_model

    m = model()
    job = dict(id="0 fast", job=0, placement="fast", coherence="hw", roundtrip_ns=m.roundtrip_ns["hw"],
               concurrent_ns=m.concurrent_curves["hw"], overhead_ns={"broadcast": {"64": 1234.0}},
               exchange_ns={"barrier": {"0": 777.0}},
               pattern_ns={"broadcast": {"data": {"64": 50.0}, "maintenance": {"64": 0.0}}})
    got = job_model(m, job)
    assert got.concurrent_curves["hw"] is job["concurrent_ns"]
    assert got.pattern_curves["hw"] == {"broadcast": {"64": 50.0}}
    assert got.path_ns["hw"] == pytest.approx(m.path_ns["hw"], rel=1e-6, abs=1e-6)
    assert got.path_ns["flush"] == m.path_ns["flush"]
    assert row_model(got, job, "broadcast", 64).collective_overhead_ns["broadcast"] == 1234.0
    assert row_model(got, job, "broadcast", 4096).collective_overhead_ns == got.collective_overhead_ns  # not measured
    assert row_model(got, job, "barrier", 0).exchange_ns == {"hw": 777.0}
    # a size's own blocks' round trip: the path is solved again from it (cached per job and round trip)
    slow = dict(job, call_roundtrip_ns={"broadcast": {"64": 3000.0}})
    paths = {}
    again = row_model(got, slow, "broadcast", 64, paths)
    assert again.path_ns["hw"] > got.path_ns["hw"] + 100 and again.roundtrip_ns["hw"] == 3000.0  # on the 2 ns step
    assert again.path_ns["hw"] == pytest.approx(
        row_model(dataclasses.replace(got, path_ns=dict(got.path_ns, hw=0.0)), slow, "broadcast", 64, paths).path_ns["hw"])
    assert len(paths) == 1


def test_block_states_by_hand():
    from cxlsim.calibrate.collective_blocks import block_state

    def block(before, after, busy=1.0):
        return dict(rt_before_ns=before, rt_after_ns=after, busy=busy)
    best = {"hw": 60.0, "flush": 450.0}
    assert block_state(block(60, 110), "hw", best) == "fast"  # the fast placement spans 55-110 ns: not flagged
    assert block_state(block(90, 460), "hw", best) == "slow placement"  # above the 200 ns threshold
    assert block_state(block(90, 1500), "hw", best) == "disturbed"  # beyond twice the slow placement's
    assert block_state(block(90, 208425), "hw", best) == "disturbed"  # a rank off its CPU
    assert block_state(block(500, 600), "flush", best) == "fast"
    assert block_state(block(500, 700), "flush", best) == "slow placement"  # above 1.5 x the best
    assert block_state(block(500, 5000), "flush", best) == "disturbed"
    assert block_state(block(60, 70, busy=0.5), "hw", best) == "disturbed"  # a rank off its CPU for half the block
    assert block_state(block(60, 70, busy=0.8), "hw", best) == "fast"  # the block's medians hold


CONCURRENT = {k: {64: [1.0, 3.0]} for k in ("copyin", "copyout", "writeback", "invalidate", "storein", "readout")}


def _fake_block(collective, n, rt0, rt1, ns, busy=1.0):
    return dict(collective=collective, size_bytes=n, rt_before_ns=rt0, rt_after_ns=rt1, busy=busy, overhead_ns=None,
                exchange_ns=None, patterns={"broadcast": np.ones((2, 1, 5))} if n else {}, concurrent=CONCURRENT,
                calls_ns=np.full(4, ns))


def test_a_run_tops_up_the_sizes_a_mode_lacks_and_keeps_each_placements_blocks_apart(monkeypatch):
    """Scripted blocks: hw's first job has 64 B in the slow placement and 4 KiB disturbed, so the run adds an hw
    job of 4 KiB alone; flush's only job is fast. Rows come from their placement's blocks alone (the median call)."""
    from cxlsim.calibrate import collective_measure as cm
    from cxlsim.emulator import launch

    script = {"hw": [[(64, 90.0, 470.0, 300.0), (4096, 80.0, 9000.0, 1e6)], [(4096, 70.0, 80.0, 2000.0)]],
              "flush": [[(64, 480.0, 500.0, 900.0), (4096, 480.0, 490.0, 3000.0)]]}
    calls = []

    def fake_run_local(nranks, fn, args, **kw):
        mode = str(kw["coherence"].value if hasattr(kw["coherence"], "value") else kw["coherence"])
        keys = args[0]
        plan = script[mode][sum(c == mode for c in calls)]
        calls.append(mode)
        assert [k[1] for k in keys] == [p[0] for p in plan]
        blocks = [_fake_block("broadcast", n, rt0, rt1, ns) for n, rt0, rt1, ns in plan]
        return [blocks, blocks]
    monkeypatch.setattr(launch, "run_local", fake_run_local)
    monkeypatch.setattr(cm, "measure_call_overheads", lambda collectives, batches=1: {c: [1.0] for c in collectives})
    got = cm.measure_collectives((64, 4096), ("broadcast",), rounds=1, max_retries=3, passes=1)
    assert calls == ["hw", "flush", "hw"]
    rows = {(r["coherence"], r["placement"], r["size_bytes"]): r for r in got["rows"]}
    assert rows[("hw", "slow", 64)]["measured_ns"] == 300.0 and rows[("hw", "slow", 64)]["job_ids"] == ["0 slow"]
    assert rows[("hw", "fast", 4096)]["measured_ns"] == 2000.0 and rows[("hw", "fast", 4096)]["job_ids"] == ["2 fast"]
    assert not rows[("hw", "fast", 64)]["held_out"] and not rows[("hw", "slow", 4096)]["held_out"]
    assert rows[("flush", "fast", 64)]["measured_ns"] == 900.0 and ("flush", "slow", 64) not in rows
    assert "hw 2 jobs, 3 blocks: 1 fast, 1 slow placement, 1 disturbed (left out)" in cm.jobs_line(got["jobs"])
    # each record's concurrent copy is its placement's blocks' (copyin: pre-publish, the slowest rank's per round)
    assert {j["id"]: j["concurrent_ns"]["copyin"] for j in got["jobs"]}["2 fast"] == {"64": 2.0}


def test_the_des_exchange_grows_by_exactly_its_charge_and_the_charge_makes_it_the_primitive(coherence="hw"):
    from cxlsim.calibrate.collectives import des_exchange_ns, exchange_charge_ns

    m = model()
    for mode in ("hw", "flush"):
        base = des_exchange_ns(m, mode)
        assert des_exchange_ns(m, mode, charge_ns=150.0) == pytest.approx(base + 150.0, abs=1e-6)
        assert exchange_charge_ns(m, mode) == 0.0  # no primitive: the DES's own exchange stands
        measured = dataclasses.replace(m, exchange_ns={mode: base + 321.0})
        assert exchange_charge_ns(measured, mode) == pytest.approx(321.0, abs=1e-6)
        assert des_exchange_ns(measured, mode, exchange_charge_ns(measured, mode)) == pytest.approx(base + 321.0)
        assert exchange_charge_ns(dataclasses.replace(m, exchange_ns={mode: base - 50.0}), mode) == 0.0  # never < 0
        # flush: a barrier call carries the charge once, a small allreduce or an alltoall (one step) once, the
        # large allreduce twice (two steps); a broadcast (its reader waits for a root that publishes and returns)
        # none; hw: the allreduce alone in the fast placement, nothing in the slow one (`exchange_charged`)
        assert m.roundtrip_ns["hw"] < 200.0  # the fixture's: the fast placement
        for slow in (False, True):
            rt = dict(m.roundtrip_ns, hw=450.0) if slow else m.roundtrip_ns
            base_m, charged_m = (dataclasses.replace(x, roundtrip_ns=rt) for x in (m, measured))
            steps = 0 if slow and mode == "hw" else 1
            others = 1 if mode == "flush" else 0  # the barrier and the alltoall: charged in flush mode only
            for collective, size, waits in (("barrier", 0, others), ("alltoall", 64, others), ("allreduce", 64, steps),
                                            ("allreduce", 1 << 16, 2 * steps), ("broadcast", 64, 0)):
                large = 1 << 16
                assert predict_collective(charged_m, mode, collective, size, large) \
                    - predict_collective(base_m, mode, collective, size, large) == pytest.approx(321.0 * waits, abs=1e-6)


def test_collective_flush_line_makes_the_des_maintenance_the_patterns():
    """Flush mode, a synthetic pattern maintenance of 4 ns/B: at the collective's clflushopt per line the DES's
    write-backs, invalidations and the fences around them take the pattern's maintenance (the DES with them
    minus the DES without any, per line 0 and no fences or acknowledgements), every collective."""
    from cxlsim.calibrate.collectives import _des_call_ns, collective_bw, collective_flush_line_ns
    from cxlsim.calibrate.patterns import PATTERNS

    curve = {"64": 3 * 64.0, "1048576": 3 * 1048576.0}
    upkeep = {"64": 4 * 64.0, "1048576": 4 * 1048576.0}
    m = model(pattern_curves={"flush": {p: curve for p in PATTERNS}},
              pattern_maintenance_curves={"flush": {p: upkeep for p in PATTERNS}})
    bare = dataclasses.replace(m, fence_ns=dict(m.fence_ns, flush=0.0), flush_ack_ns={})
    s = 65536
    for collective, large in (("allgather", NEVER), ("broadcast", NEVER), ("alltoall", NEVER), ("reduce_scatter", NEVER),
                              ("allreduce", NEVER), ("allreduce", 0)):
        bw = collective_bw(m, "flush", collective, s, large)
        per_line = collective_flush_line_ns(m, "flush", collective, s, large, bw)
        got = (_des_call_ns(m, "flush", collective, s, large, bw, flush_line=per_line)
               - _des_call_ns(bare, "flush", collective, s, large, bw, flush_line=0.0))
        # the flush broadcast's DES is a walk through the pool's queues (readers' polls behind the root's
        # write-backs), not quite linear in the per-line cost: 3.0% there, within 1% elsewhere
        assert got == pytest.approx(4 * s, rel=0.05 if collective == "broadcast" else 0.01), collective
    assert collective_flush_line_ns(m, "hw", "broadcast", s, NEVER, 1.0) is None  # hw: no maintenance
    assert collective_flush_line_ns(model(), "flush", "broadcast", s, NEVER, 1.0) is None  # not measured


def test_the_benchmark_prints_no_error_for_a_collective_without_a_held_out_size():
    import importlib.util
    spec = importlib.util.spec_from_file_location("calibration_error", os.path.join(
        os.path.dirname(__file__), "..", "benchmarks", "calibration_error.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    row = dict(collective="broadcast", coherence="hw", size_bytes=64, error=0.6, placement="fast")
    left_out = summarize_collectives([dict(row, held_out=False)])["broadcast hw"]
    line = bench.collective_line("broadcast hw", left_out)
    assert "UNMEASURED" in line and "%" not in line.replace("0 of 1", "")
    kept = bench.collective_line("broadcast hw", summarize_collectives([row])["broadcast hw"])
    assert "60.0%" in kept and "MISS" in kept


def _block_copy_ins(comm):
    from cxlsim.calibrate.collective_blocks import run_block
    block = run_block(comm, "broadcast", 4096, 10, 1 << 20)
    return block["nt_min_bytes"], comm.nt_min_bytes


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_a_collectives_block_copies_in_as_the_mpi_library_would_in_its_placement(coherence):
    """A block takes the library's copy-ins for the placement it probes first (PoolComm.choose_copy_in; non-temporal
    from 2 KiB in the slow placement, so its slow rows price the library's calls), uses them, and records them;
    flush mode is not probed, as in the library: plain stores."""
    from cxlsim.emulator.comm import NT_SLOW_MIN_BYTES
    from cxlsim.emulator.launch import run_local
    got = run_local(2, _block_copy_ins, coherence=coherence, timeout_s=60.0)
    assert got[0] == got[1]  # the ranks decide alike
    recorded, used = got[0]
    assert recorded == used and used in (0, NT_SLOW_MIN_BYTES)
    if coherence == "flush":
        assert used == 0


@pytest.mark.parametrize("collective,size,large", [("allreduce", 16384, NEVER), ("allreduce", 16384, 0),
                                                   ("reduce_scatter", 16384, NEVER)])
def test_where_the_copy_pattern_folds_a_slower_fold_primitive_charges_nothing(collective, size, large):
    """A measured copy pattern's fold step is the kernel's own fold (loads, arithmetic, stores), so the call is
    priced at the pattern's time whatever the one-process fold primitive took; without the pattern's fold step the
    primitive beyond its read pass is charged (test_a_slower_fold_adds_exactly_its_extra_time)."""
    from cxlsim.calibrate.patterns import pattern_name
    name = pattern_name(collective, size, large)
    folded = fold_bytes(collective, size, large, 2)
    steps = {"0": 0.0, str(size): 3000.0, str(2 * size): 6000.0}
    m = dataclasses.replace(model(), pattern_curves={"hw": {name: steps}}, pattern_load_curves={"hw": {name: steps}})
    fast = with_fold(m, {folded: 500.0, 2 * folded: 500.0})
    slow = with_fold(m, {folded: 9000.0, 2 * folded: 9000.0})
    assert predict_collective(slow, "hw", collective, size, large) == \
        pytest.approx(predict_collective(fast, "hw", collective, size, large))
    unfolded = dataclasses.replace(slow, pattern_load_curves={})
    assert predict_collective(unfolded, "hw", collective, size, large) > \
        predict_collective(fast, "hw", collective, size, large) + 1000.0
