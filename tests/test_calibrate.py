"""Calibration: fits recover known parameters, profiles round-trip and reject bad files, --from-osu, primitives.

No test here depends on how fast this machine is: timings are only checked to be
positive and finite; everything else is exact or synthetic.
"""
import json
import math
import os

import numpy as np
import pytest

from cxlsim import calibrate as cal
from cxlsim.cli import main as cli_main
from cxlsim.errors import InputError

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "cxlsim", "data", "osu")
SHIPPED = sorted(os.path.join(DATA, f) for f in os.listdir(DATA) if f.endswith(".txt"))


def synthetic_model(path_hw=12.0, path_flush=40.0, per_line=1.5, np_=2):
    sizes = [0, 1, 64, 4096, 65536, 1048576]
    return cal.LocalModel(
        np=np_, path_ns={"hw": path_hw, "flush": path_flush}, roundtrip_ns={"hw": 0.0, "flush": 0.0},
        flush_ns_per_line=per_line, fence_ns={"hw": 5.0, "flush": 80.0},
        overhead_ns={"copy": 150.0, "zero-copy": 900.0},
        copy_bw_curve={str(s): s / 30.0 for s in sizes},
        write_pass_curve={str(s): s / 20.0 for s in sizes},
        read_pass_curve={str(s): np_ * s / 25.0 for s in sizes})


# ------------------------------------------------------------------ fitting recovers known parameters

def test_flush_line_fit_recovers_fence_and_per_line_cost():
    lines = np.array([1, 4, 16, 64, 256, 1024, 4096])
    clock, fence, per_line = 23.0, 110.0, 0.65
    times = clock + fence + lines * per_line
    fit = cal.fit_flush_line(lines, times, clock)
    assert fit["fence_ns"] == pytest.approx(fence, rel=0.02)
    assert fit["per_line_ns"] == pytest.approx(per_line, rel=0.02)
    assert fit["rms"] < 1e-9


def test_line_fit_recovers_bandwidth_under_small_noise():
    rng = np.random.default_rng(5)
    sizes = np.array([64, 256, 1024, 4096, 16384, 65536, 262144, 1048576], float)
    times = (90.0 + sizes / 18.0) * (1 + rng.uniform(-0.002, 0.002, len(sizes)))
    a, b, rms = cal.fit_line(sizes, times)
    assert a == pytest.approx(90.0, rel=0.02) and 1 / b == pytest.approx(18.0, rel=0.02)
    assert 0 < rms < 0.01


@pytest.mark.parametrize("rule", cal.PATH_RULES)
@pytest.mark.parametrize("mode,path", [("hw", 7.0), ("hw", 55.0), ("flush", 30.0), ("flush", 140.0)])
def test_path_solve_recovers_the_path_from_the_des_own_round_trip(mode, path, rule):
    model = synthetic_model()
    preset = cal.local_preset(model, 64, path, mode)
    roundtrip = cal.des_pingpong_ns(preset, mode) if rule == "pingpong" else 2 * cal.des_sync_ns(preset, mode)
    solved, des_rt = cal.solve_path_ns(model, 64, mode, roundtrip, rule)
    assert solved == pytest.approx(path, rel=0.02)
    assert des_rt == pytest.approx(roundtrip, rel=1e-9)


def test_fit_local_recovers_every_parameter_from_synthetic_primitives():
    truth = synthetic_model(path_hw=9.0, path_flush=70.0, per_line=1.2)
    sizes = [1, 64, 4096, 65536, 1048576]
    lines = [1, 4, 16, 64, 256, 1024, 4096, 16384]
    clock = 20.0
    prims = {
        "np": 2, "clock_read_ns": clock,
        "roundtrip_ns": {m: 2 * cal.des_sync_ns(cal.local_preset(truth, 64, truth.path_ns[m], m), m)
                         for m in ("hw", "flush")},
        "flush": {"lines": lines,
                  "writeback_sfence_ns": [clock + 5.0 + 1.2 * n for n in lines],
                  "invalidate_mfence_ns": [clock + 80.0 + 1.2 * n for n in lines]},
        "overhead_ns": dict(truth.overhead_ns),
        "copy_ns": {str(s): s / 30.0 for s in sizes},
        "write_pass": {str(s): 100.0 + s / 20.0 for s in [0] + sizes},
        "read_pass": {str(s): 80.0 + 2 * s / 25.0 for s in [0] + sizes},
    }
    model, report = cal.fit_local(prims, sizes, "sync")
    for mode in ("hw", "flush"):
        assert model.path_ns[mode] == pytest.approx(truth.path_ns[mode], rel=0.02)
        assert model.fence_ns[mode] == pytest.approx(truth.fence_ns[mode], rel=0.02)
        assert abs(report[f"path_{mode}"]["residual"]) < 1e-9
    assert model.flush_ns_per_line == pytest.approx(1.2, rel=0.02)
    assert report["write_pass"]["bw_bytes_per_ns"] == pytest.approx(20.0, rel=0.02)
    assert report["read_pass"]["bw_bytes_per_ns"] == pytest.approx(12.5, rel=0.02)
    for n in sizes:
        assert model.app_ns(n) == pytest.approx(truth.app_ns(n), rel=0.02)
    # the prediction made with the fitted model equals the one made with the truth
    for mode in ("hw", "flush"):
        for side in ("copy", "zero-copy"):
            assert cal.predict_local(model, mode, side, 4096) == pytest.approx(
                cal.predict_local(truth, mode, side, 4096), rel=0.02)


def test_auto_path_rule_solves_hw_by_the_sync_and_flush_by_the_pingpong():
    truth = synthetic_model(path_hw=9.0, path_flush=70.0)
    prims = {"np": 2, "clock_read_ns": 0.0,
             "roundtrip_ns": {"hw": 2 * cal.des_sync_ns(cal.local_preset(truth, 64, 9.0, "hw"), "hw"),
                              "flush": cal.des_pingpong_ns(cal.local_preset(truth, 64, 70.0, "flush"), "flush")},
             "flush": {"lines": [1, 4, 16], "writeback_sfence_ns": [5.0 + 1.5 * n for n in (1, 4, 16)],
                       "invalidate_mfence_ns": [80.0 + 1.5 * n for n in (1, 4, 16)]},
             "overhead_ns": dict(truth.overhead_ns), "copy_ns": {"64": 2.0, "4096": 130.0},
             "write_pass": {"0": 0.0, "64": 3.0, "4096": 200.0}, "read_pass": {"0": 0.0, "64": 5.0, "4096": 300.0}}
    model, report = cal.fit_local(prims, [64, 4096])
    assert cal.AUTO_PATH_RULE == {"hw": "sync", "flush": "pingpong"}
    assert (report["path_hw"]["rule"], report["path_flush"]["rule"]) == ("sync", "pingpong")
    assert model.path_ns["hw"] == pytest.approx(9.0, rel=0.02)
    assert model.path_ns["flush"] == pytest.approx(70.0, rel=0.02)
    with pytest.raises(InputError, match="path rule: expected 'auto'"):
        cal.fit_local(prims, [64], "fastest")


def test_fit_local_recovers_the_flush_acknowledgements_apart_from_the_fence():
    """Synthetic one-process flush primitives made with a bare mfence f, a clean line's
    acknowledgement I and a dirty line's K: the fit returns f as the flush fence, I and K, and
    the prediction made with the fitted model equals the truth's (whose DES waits for I and K)."""
    import dataclasses

    f, inv, wb, per_line, clock = 20.0, 100.0, 170.0, 0.7, 24.0
    truth = dataclasses.replace(synthetic_model(path_flush=30.0, per_line=per_line),
                                fence_ns={"hw": 5.0, "flush": f}, flush_ack_ns={"invalidate": inv, "writeback": wb})
    sizes = [1, 64, 4096, 65536]
    lines = [1, 4, 16, 64, 256, 1024]
    prims = {
        "np": 2, "clock_read_ns": clock,
        "roundtrip_ns": {m: cal.des_pingpong_ns(cal.local_preset(truth, 64, truth.path_ns[m], m), m)
                         for m in ("hw", "flush")},
        "flush": {"lines": lines, "mfence_ns": clock + f,
                  "writeback_sfence_ns": [clock + 5.0 + per_line * n for n in lines],
                  "writeback_mfence_ns": [clock + f + wb + per_line * n for n in lines],
                  "invalidate_mfence_ns": [clock + f + inv + per_line * n for n in lines]},
        "overhead_ns": dict(truth.overhead_ns),
        "copy_ns": {str(s): s / 30.0 for s in sizes},
        "write_pass": {str(s): s / 20.0 for s in [0] + sizes},
        "read_pass": {str(s): 2 * s / 25.0 for s in [0] + sizes},
    }
    model, report = cal.fit_local(prims, sizes)
    assert model.fence_ns["flush"] == pytest.approx(f, rel=0.02)
    assert model.flush_ack_ns["invalidate"] == pytest.approx(inv, rel=0.02)
    assert model.flush_ack_ns["writeback"] == pytest.approx(wb, rel=0.02)
    assert model.flush_ns_per_line == pytest.approx(per_line, rel=0.02)
    assert model.path_ns["flush"] == pytest.approx(30.0, rel=0.02)
    preset = cal.local_preset(model, 64, model.path_ns["flush"], "flush")
    assert (preset.host_path.invalidate_ns, preset.host_path.writeback_ns) == pytest.approx((inv, wb), rel=0.02)
    hw = cal.local_preset(model, 64, model.path_ns["hw"], "hw")  # hw mode's stores never wait for memory
    assert (hw.host_path.invalidate_ns, hw.host_path.writeback_ns) == (0.0, 0.0)
    for n in sizes:
        for side in ("copy", "zero-copy"):
            assert cal.predict_local(model, "flush", side, n) == pytest.approx(
                cal.predict_local(truth, "flush", side, n), rel=0.02)
    # the acknowledgements are what makes a 1-byte flush call dearer than a 0-byte one
    bare = dataclasses.replace(truth, flush_ack_ns={})
    gap = cal.predict_local(truth, "flush", "copy", 1) - cal.predict_local(truth, "flush", "copy", 0)
    assert gap > cal.predict_local(bare, "flush", "copy", 1) - cal.predict_local(bare, "flush", "copy", 0)


def test_prediction_grows_with_size_and_flush_costs_more_than_hw():
    model = synthetic_model()
    for mode in ("hw", "flush"):
        for side in ("copy", "zero-copy"):
            times = [cal.predict_local(model, mode, side, n) for n in (1, 4096, 65536, 1048576)]
            assert all(a < b for a, b in zip(times, times[1:])), (mode, side, times)
    assert cal.predict_local(model, "flush", "copy", 4096) > cal.predict_local(model, "hw", "copy", 4096)


def test_injected_latency_adds_at_least_three_latencies_to_a_copy_call():
    # cxl_ops.h: one L for the flags and one per block read (np = 2): 3 L per copy-mode call
    model = synthetic_model()
    base = cal.predict_injected(model, "hw", "copy", 64, 0.0, 0.0)
    slow = cal.predict_injected(model, "hw", "copy", 64, 500.0, 0.0)
    assert slow - base == pytest.approx(3 * 500.0, rel=0.02)
    paced = cal.predict_injected(model, "hw", "copy", 1048576, 0.0, 4.0)
    assert paced >= 3 * 1048576 / 4.0


# ------------------------------------------------------------------ profiles

def _profile():
    return cal.make_profile("local-host", synthetic_model().to_dict(), [], seed=3)


def test_profile_round_trip(tmp_path):
    path = str(tmp_path / "profile.json")
    profile = _profile()
    cal.save_profile(path, profile)
    loaded = cal.load_profile(path)
    assert loaded == json.loads(json.dumps(profile))
    assert cal.LocalModel.from_dict(loaded["model"]) == synthetic_model()
    assert loaded["provenance"]["seed"] == 3


@pytest.mark.parametrize("edit,match", [
    (lambda p: p.update(version=99), "version: expected 1"),
    (lambda p: p.update(schema="other"), "schema: expected"),
    (lambda p: p.pop("model"), r"missing key\(s\) \['model'\]"),
    (lambda p: p["model"].pop("path_ns"), r"model: missing key\(s\) \['path_ns'\]"),
    (lambda p: p.update(kind="gpu"), "kind: expected one of"),
])
def test_profile_rejects_wrong_version_or_missing_keys(tmp_path, edit, match):
    profile = _profile()
    edit(profile)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(profile))
    with pytest.raises(InputError, match=match):
        cal.load_profile(str(path))


def test_validate_only_through_the_cli(tmp_path, capsys):
    good = tmp_path / "good.json"
    cal.save_profile(str(good), _profile())
    assert cli_main(["calibrate", "--validate-only", str(good)]) == 0
    assert "a valid local-host profile" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    data = _profile()
    data["version"] = 0
    bad.write_text(json.dumps(data))
    assert cli_main(["calibrate", "--validate-only", str(bad)]) == 2
    assert "version: expected 1" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{\n  \"schema\": \n")
    assert cli_main(["calibrate", "--validate-only", str(tmp_path / "broken.json")]) == 2
    assert "broken.json:3: not JSON" in capsys.readouterr().err


# ------------------------------------------------------------------ --from-osu

def test_from_osu_on_the_shipped_files_reports_every_size(tmp_path, capsys):
    out = tmp_path / "ws"
    code = cli_main(["calibrate", "--from-osu", *SHIPPED, "--memcpy-bandwidth", "20GB/s", "--output", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [2 ** k for k in range(21)]
    for r in rows:  # measured, pure, err%, full, err%
        measured, pure, pure_err, full, full_err = map(float, r[1:6])
        assert pure_err == pytest.approx((pure - measured) / measured * 100, abs=1.0)  # printed to 0.01 us
        assert full_err == pytest.approx((full - measured) / measured * 100, abs=1.0)
    assert "(anchor)" in text and "median |error|" in text
    profile = cal.load_profile(str(out / "profile.json"))
    assert profile["kind"] == "network" and len(profile["validation"]) == 21
    anchor = profile["validation"][0]
    assert anchor["anchor"] and anchor["full_ns"] == pytest.approx(anchor["measured_ns"])
    # the own-block copy is n / memcpy bandwidth
    last = profile["validation"][-1]
    assert last["own_copy_ns"] == pytest.approx(last["size_bytes"] / 20.0)


def test_from_osu_prediction_matches_loggp_at_np2():
    # np = 2, MPICH picks recursive doubling below 512 KiB total: one exchange of m bytes, so the
    # pure prediction is o + L + (m G) + o, the latency line of the fit.
    result = cal.from_osu(SHIPPED, nodes=2, memcpy_bw_bytes_per_ns=20.0)
    fit = result["fit"]
    for row in result["rows"]:
        if row["size_bytes"] < 4096:
            r = fit.regime_for(row["size_bytes"])
            expect = r.latency_ns + 2 * r.overhead_ns + row["size_bytes"] * r.gap_per_byte_ns
            assert row["pure_ns"] == pytest.approx(expect, rel=0.01)


def test_from_osu_errors_name_the_problem(tmp_path):
    with pytest.raises(InputError, match="--sizes: the osu_allgather file fixes the sizes"):
        cal.from_osu(SHIPPED, memcpy_bw_bytes_per_ns=20.0, sizes=[1, 2])
    with pytest.raises(InputError, match="no osu_latency table"):
        cal.from_osu([p for p in SHIPPED if "allgather" in p], memcpy_bw_bytes_per_ns=20.0)
    with pytest.raises(InputError, match="--np"):
        cal.from_osu(SHIPPED, nodes=1, memcpy_bw_bytes_per_ns=20.0)


def test_malformed_osu_file_through_the_cli_names_the_line(tmp_path, capsys):
    bad = tmp_path / "osu_latency.txt"
    bad.write_text("# OSU MPI Latency Test v5.3\n# Size          Latency (us)\n1     1.30\n2     x.7\n")
    code = cli_main(["calibrate", "--from-osu", str(bad), "--memcpy-bandwidth", "20GB/s",
                     "--output", str(tmp_path / "ws")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{bad}:4:" in err and "'2     x.7'" in err
    assert cli_main(["calibrate", "--from-osu", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt': no such file" in capsys.readouterr().err


# ------------------------------------------------------------------ the primitive microbenchmarks

@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_flag_pingpong_runs_both_ranks_to_the_same_epoch(coherence):
    from cxlsim.emulator.launch import run_local

    def rank(comm):
        rt = comm.flag_pingpong(500)
        return rt, comm.epoch, comm.flag_epochs()
    if coherence == "flush":
        from cxlsim.emulator import primitives
        if not {"clflushopt", "clflush"} & primitives.cpu_features():
            pytest.skip("no clflush on this CPU")
    out = run_local(2, rank, coherence=coherence, slot_bytes=64)
    for rt, epoch, flags in out:
        assert math.isfinite(rt) and rt > 0
        assert epoch == 500 and flags == [500, 500]


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_concurrent_copy_times_every_phase_and_keeps_the_protocol_in_step(coherence):
    from cxlsim.emulator import primitives
    from cxlsim.emulator.launch import run_local

    if coherence == "flush" and not {"clflushopt", "clflush"} & primitives.cpu_features():
        pytest.skip("no clflush on this CPU")

    def rank(comm):
        got = [comm.concurrent_copy(n, 20, read) for n in (1, 4096) for read in (False, True)]
        send = np.full(64, comm.rank + 3, np.uint8)
        recv = np.zeros(128, np.uint8)
        comm.allgather(send, recv)  # the pool protocol is still in step afterwards
        return got, comm.epoch, comm.data_round, recv.tolist()
    out = run_local(2, rank, coherence=coherence, slot_bytes=4096)
    for got, epoch, data_round, recv in out:
        for i, t in enumerate(got):
            assert t.shape == (20, 4) and np.all(np.isfinite(t)) and np.all(t >= 0)
            if i >= 2:  # 4096 B (1 B can fall within the clock's resolution)
                assert np.median(t[:, 1]) > 0  # copying or reading out two blocks takes time
            if coherence == "hw":
                assert not t[:, 2:].any()  # no write-back or invalidation in hw mode
            else:
                assert np.median(t[:, 3]) > 0  # the invalidation's mfence
        assert epoch == 4 * 2 * 20 + 1 and data_round == 4 * 20 + 1
        assert recv == [3] * 64 + [4] * 64
    with pytest.raises(Exception, match="slots hold"):
        run_local(2, lambda comm: comm.concurrent_copy(128, 1), coherence="hw", slot_bytes=64)


def test_concurrent_primitive_measured_by_size_is_positive_and_fits():
    got = cal.measure_concurrent([1, 4096], modes=("hw",), rounds=1)
    assert set(got["hw"]) == {"copyin", "copyout", "writeback", "invalidate", "storein", "readout"}
    curves = cal.concurrent_curves(got)
    for kind in ("copyout", "readout"):
        assert all(math.isfinite(v) and v >= 0 for v in curves["hw"][kind].values())
        assert curves["hw"][kind]["4096"] > 0
    model = cal.LocalModel.from_dict({**synthetic_model().to_dict(), "concurrent_curves": curves})
    assert math.isfinite(model.host_bw(4096, "hw", 5.0)) and model.host_bw(4096, "hw", 5.0) > 0


def test_ranks_are_joined_by_the_slower_per_round_before_the_publish_and_by_the_mean_after():
    """Two ranks that alternate being slow: each rank's median is 5, but every round one of them
    took 8, and the publish waits for it, so copy-in joins to 8; copy-out (after the wait) to 5."""
    a, b = [2.0, 8.0] * 3, [8.0, 2.0] * 3
    got = cal.join_ranks([{"copyin": {64: a}, "copyout": {64: a}}, {"copyin": {64: b}, "copyout": {64: b}}])
    assert got == {"copyin": {64: 8.0}, "copyout": {64: 5.0}}
    assert cal.PRE_SYNC_KINDS == ("copyin", "storein", "writeback")


def test_concurrent_curves_take_the_median_so_a_minority_of_low_jobs_does_not_win():
    samples = {"hw": {"copyin": {"65536": [1092, 1102, 2444, 2549, 2619, 2664, 2770], "1": [0.0, 0.0]}}}
    assert cal.concurrent_curves(samples) == {"hw": {"copyin": {"65536": 2549, "1": 0.0}}}


def test_concurrent_jobs_in_a_slow_placement_are_left_out_unless_all_are(monkeypatch):
    from cxlsim.emulator import launch

    rts = iter([80.0, 470.0, 85.0] + [500.0, 480.0])  # per job: the worse flag round trip (ns)
    values = iter([100.0, 300.0, 110.0] + [400.0, 420.0])

    def fake_run_local(n, fn, args, **kw):
        rt, v = next(rts), next(values)
        return [({"copyin": {4096: [v]}}, rt), ({"copyin": {4096: [v]}}, rt)]
    monkeypatch.setattr(launch, "run_local", fake_run_local)
    got = cal.measure_concurrent([4096], modes=("hw",), rounds=3)
    assert got == {"hw": {"copyin": {"4096": [100.0, 110.0]}}}
    got = cal.measure_concurrent([4096], modes=("hw",), rounds=2)  # every job slow: all kept
    assert got == {"hw": {"copyin": {"4096": [400.0, 420.0]}}}


def test_concurrent_model_recovers_the_bandwidth_and_flush_cost_it_was_made_from():
    """Concurrent curves generated by the DES's own terms at a known host bandwidth B, path and
    per-line flush cost (copy in: 2 path + W/B; copy out: load 2 path + 2 W/B; write-back and
    invalidation: lines x c + a fence each): the model gives back B and c within 2%, and the DES
    with it predicts what the DES with B predicts."""
    import dataclasses

    from cxlsim.calibrate.des import _algorithm, _des_loop, _transport

    bw, path, per_line, fence = 7.5, 12.0, 2.4, 80.0
    sizes = [1, 64, 4096, 65536, 1048576]

    def w(n):
        return 64 * -(-n // 64)
    curves = {"copyin": {str(n): 2 * path + w(n) / bw for n in sizes},
              "copyout": {str(n): 2 * path + 2 * w(n) / bw for n in sizes},
              "writeback": {str(n): w(n) // 64 * per_line + fence for n in sizes},
              "invalidate": {str(n): w(n) // 64 * per_line + fence for n in sizes},
              "storein": {str(n): 100.0 + n / 20.0 for n in sizes},
              "readout": {str(n): 2 * n / 10.0 for n in sizes}}
    model = dataclasses.replace(synthetic_model(per_line=0.5), concurrent_curves={"hw": curves, "flush": curves})
    for n in (64, 4096, 65536, 1048576):
        assert model.host_bw(n, "hw", path) == pytest.approx(bw, rel=0.02)
        assert model.flush_line_ns(n, "flush") == pytest.approx(per_line, rel=0.02)
        assert model.flush_line_ns(n, "hw") == pytest.approx(0.5)  # hw mode flushes nothing: the line fit
        assert model.app_ns(n, "hw") == pytest.approx(100.0 + n / 20.0 + 2 * n / 10.0)
    # flush mode with acknowledgements: the write waits for writeback_ns, so only the load's 2 x path
    # is taken off the concurrent copy
    acked = dataclasses.replace(model, flush_ack_ns={"invalidate": 100.0, "writeback": 170.0})
    n = 4096
    assert acked.host_bw(n, "flush", path) == pytest.approx(3 * n / (2 * path + 3 * n / bw))
    assert acked.host_bw(n, "hw", path) == pytest.approx(bw)
    # the view copies the block in itself (its 'storein'): the application's one-process store takes no part
    numpy_store = dataclasses.replace(model, write_pass_curve={str(n): 500.0 + n for n in [0] + sizes})
    assert numpy_store.app_ns(4096, "hw") == pytest.approx(model.app_ns(4096, "hw"))
    old = dataclasses.replace(model, concurrent_curves={})  # without the primitive: the blend
    assert old.host_bw(4096, "hw", path) == pytest.approx(3 * 4096 / (3 * 4096 / 30.0))
    n = 65536
    fitted = cal.predict_local(model, "hw", "copy", n)
    preset = cal.local_preset(old, n, model.path_ns["hw"], "hw")
    direct = _des_loop(_transport(dataclasses.replace(
        preset, host=dataclasses.replace(preset.host, memcpy_bw_bytes_per_ns=bw),
        switch=dataclasses.replace(preset.switch, port_bw_bytes_per_ns=bw)), 2, "hw"),
        _algorithm("copy"), n, model.overhead_ns["copy"])
    assert fitted == pytest.approx(direct, rel=0.02)
    # a profile saved before the primitive existed still loads (no concurrent curves: the blend)
    data = model.to_dict()
    del data["concurrent_curves"]
    assert cal.LocalModel.from_dict(data).concurrent_curves == {}


def test_flag_pingpong_needs_two_ranks():
    from cxlsim.emulator.launch import RankFailure, run_local

    with pytest.raises(RankFailure, match="needs exactly 2 ranks"):
        run_local(1, lambda comm: comm.flag_pingpong(10), slot_bytes=64)


def test_line_op_and_clock_microbenchmarks_are_positive_and_check_input():
    from cxlsim.emulator import primitives
    from cxlsim.emulator.comm import choose_line_ops

    writer, reader = choose_line_ops("auto")
    buf = np.zeros(4096, np.uint8)
    for op, dirty, fence in ((writer, True, "sfence"), (reader, False, "mfence"), (reader, False, "none")):
        ns = primitives.line_op_ns(buf, op, dirty, fence, 20)
        assert math.isfinite(ns) and ns > 0
    assert buf[0] == 19  # the dirty pass stored (iteration & 255) into every byte
    assert primitives.clock_read_ns(100) > 0
    with pytest.raises(InputError, match="fence: expected"):
        primitives.line_op_ns(buf, writer, True, "lfence")
    with pytest.raises(InputError, match="op: expected"):
        primitives.line_op_ns(buf, 0, True)


def test_measured_primitives_are_positive():
    prims = cal.measure_primitives([1, 4096], 2, batches=2)
    assert prims["roundtrip_ns"]["hw"] > 0 and prims["roundtrip_ns"]["flush"] > 0
    assert prims["overhead_ns"]["copy"] > 0 and prims["overhead_ns"]["zero-copy"] > 0
    assert all(v > 0 for v in prims["flush"]["writeback_sfence_ns"] + prims["flush"]["invalidate_mfence_ns"])
    assert all(v >= 0 for v in prims["copy_ns"].values())
    model, report = cal.fit_local(prims, [1, 4096])
    assert model.path_ns["hw"] > 0 and model.path_ns["flush"] > 0


def test_local_calibration_runs_end_to_end_and_refits_from_every_job(tmp_path):
    """Measure, fit and predict at two sizes, one job per mode: the flag round trip, concurrent
    copy and per-call overhead measured around the allgather jobs join the primitives' own
    samples, every held-out row gets a finite positive prediction, and the profile round-trips."""
    result = cal.calibrate_local([1, 4096], 2, rounds=1, iterations=50, mpi=False)
    prims = result["primitives"]
    jobs = len(result["allgather"]["batches"])
    assert jobs >= 2
    assert all(len(v) >= 7 + 2 * jobs for v in prims["overhead_samples_ns"].values())  # 7 own + 2 per job
    assert prims["overhead_ns"] == {k: cal.steady(v) for k, v in prims["overhead_samples_ns"].items()}
    rows = result["validation"]
    assert {(r["coherence"], r["side"]) for r in rows} == set(cal.MODES) and len(rows) == 8
    threshold = result["allreduce_threshold"]
    assert threshold["allreduce_large_bytes"] > 0 and len(threshold["rows"]) == 9
    assert all(math.isfinite(r["predicted_ns"]) and r["predicted_ns"] > 0 and r["measured_ns"] > 0 for r in rows)
    path = str(tmp_path / "profile.json")
    cal.save_profile(path, cal.make_profile("local-host", result["model"].to_dict(), rows))
    assert cal.LocalModel.from_dict(cal.load_profile(path)["model"]) == result["model"]


def test_steady_drops_samples_from_a_slow_placement():
    assert cal.steady([100.0, 104.0, 330.0, 98.0, 400.0]) == pytest.approx(100.0)
    # one sample far below the rest does not make them all look slow
    assert cal.steady([481.0, 513.0, 486.0, 446.0, 428.0, 551.0, 511.0, 584.0, 403.0, 240.0]) == pytest.approx(483.5)
    with pytest.raises(Exception, match="no finite sample"):
        cal.steady([float("nan")])
    with pytest.raises(InputError, match="path rule: expected one of"):
        cal.solve_path_ns(synthetic_model(), 64, "hw", 100.0, "guess")


def test_host_bandwidth_blends_local_and_two_process_copies():
    import dataclasses

    model = dataclasses.replace(synthetic_model(), remote_curves={"hw": {
        "copy": {"0": 0.0, "4096": 400.0}, "copyin": {"0": 0.0, "4096": 300.0},
        "read": {"0": 0.0, "4096": 250.0}, "store": {"0": 0.0, "4096": 350.0}}})
    local = 4096 / 30.0
    # the DES moves the block in and np = 2 blocks out at this bandwidth: 3 x 4096 B in the measured time
    assert model.host_bw(4096, "hw") == pytest.approx(3 * 4096 / (300.0 + local + 400.0))
    assert model.host_bw(4096, "flush") == pytest.approx(3 * 4096 / (3 * local))  # not measured: local
    assert model.app_ns(4096, "hw") == pytest.approx(350.0 + 2 * 4096 / 25.0 / 2 + 250.0)


def test_profile_projection_through_the_cli(tmp_path, capsys):
    local = tmp_path / "local.json"
    cal.save_profile(str(local), _profile())
    assert cli_main(["calibrate", "--profile", str(local), "--np", "4", "--sizes", "1,4096"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert len(rows) == 8 and {(r[0], r[1]) for r in rows} == {(c, s) for c, s in cal.MODES}
    model = cal.LocalModel.from_dict(_profile()["model"])
    import dataclasses
    expect = cal.predict_local(dataclasses.replace(model, np=4), "hw", "copy", 4096)
    got = [float(r[3]) for r in rows if r[:3] == ["hw", "copy", "4096"]][0]
    assert got == pytest.approx(expect / 1e3, abs=1e-3)
    ws = tmp_path / "osu"
    assert cli_main(["calibrate", "--from-osu", *SHIPPED, "--memcpy-bandwidth", "20GB/s", "--output", str(ws)]) == 0
    capsys.readouterr()
    assert cli_main(["calibrate", "--profile", str(ws / "profile.json"), "--np", "2", "--sizes", "1,1MiB"]) == 0
    out = capsys.readouterr().out
    profile = cal.load_profile(str(ws / "profile.json"))
    first = profile["validation"][0]
    assert f"{first['full_ns'] / 1e3:.3f}" in out  # the same projection as the validation row at 1 B


def test_local_calibration_checks_its_input_before_measuring(tmp_path, capsys):
    assert cli_main(["calibrate", "--sizes", "1", "--no-mpi", "--quiet", "--output", str(tmp_path / "ws")]) == 2
    assert "at least two sizes above 0 B" in capsys.readouterr().err
    with pytest.raises(InputError, match="expected a local-host profile"):
        cal.calibrate_local([1, 64], profile={"kind": "network"})
    assert cli_main(["calibrate", "--np", "1"]) == 2
    assert "--np: expected a whole number of ranks >= 2" in capsys.readouterr().err
    assert cli_main(["calibrate", "--timing", "250ns", "--sizes", "1,64"]) == 2
    assert "--timing: expected LATENCY/BANDWIDTH" in capsys.readouterr().err
