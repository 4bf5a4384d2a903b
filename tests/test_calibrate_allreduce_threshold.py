"""The measured allreduce threshold: the rule, the measurement, and the profile as the emulator's default."""
import json
import subprocess
import sys

import pytest

from cxlsim.calibrate.allreduce_threshold import choose_threshold, format_threshold, measure_allreduce_threshold
from cxlsim.emulator.tuning import DEFAULT_ALLREDUCE_LARGE_BYTES, allreduce_large_bytes
from cxlsim.errors import InputError


def rows(pairs):
    return [dict(size_bytes=4096 << i, small_ns=s, large_ns=l) for i, (s, l) in enumerate(pairs)]


def test_the_threshold_is_the_smallest_size_from_which_large_wins_everywhere_above():
    assert choose_threshold(rows([(1, 2), (2, 3), (5, 4), (9, 6)])) == 16384
    # an isolated row where large wins below a loss does not set it
    assert choose_threshold(rows([(3, 2), (2, 3), (5, 4), (9, 6)])) == 16384
    assert choose_threshold(rows([(3, 2), (4, 3)])) == 4096
    # large never wins: above the measured range
    assert choose_threshold(rows([(1, 2), (2, 3)])) == 2 * 8192


def test_a_measurement_times_both_algorithms_and_reports_its_placement():
    result = measure_allreduce_threshold(sizes=(4096, 65536), rounds=1, iterations=5, warmup=1)
    assert [r["size_bytes"] for r in result["rows"]] == [4096, 65536]
    assert all(r["small_ns"] > 0 and r["large_ns"] > 0 for r in result["rows"])
    assert result["allreduce_large_bytes"] in (4096, 65536, 131072)
    assert result["placement"] in ("fast", "slow or disturbed", "mixed")
    assert "large from" in format_threshold(result)
    assert "taking turns" in format_threshold(dict(result, roundtrips_ns=[90.0, 250e3]))
    assert "taking turns" not in format_threshold(dict(result, roundtrips_ns=[90.0, 450.0]))
    with pytest.raises(InputError, match="multiple of 4 bytes"):
        measure_allreduce_threshold(sizes=(6, 4096))


def _profile(tmp_path, emulator):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"schema": "cxlsim-calibration-profile", "emulator": emulator}))
    return str(path)


def test_the_profile_named_by_cxlsim_profile_sets_the_default(tmp_path):
    assert allreduce_large_bytes({}) == (DEFAULT_ALLREDUCE_LARGE_BYTES, "default")
    path = _profile(tmp_path, {"allreduce_large_bytes": 12288})
    assert allreduce_large_bytes({"CXLSIM_PROFILE": path}) == (12288, f"measured, {path}")
    path = _profile(tmp_path, {"allreduce_large_bytes": 12288, "allreduce_threshold": {"placement": "slow"}})
    assert allreduce_large_bytes({"CXLSIM_PROFILE": path}) == (12288, f"measured in the slow host placement, {path}")
    for bad, needle in (({"allreduce_large_bytes": -1}, "expected a number of bytes"), ({}, "has no emulator")):
        with pytest.raises(InputError, match=needle):
            allreduce_large_bytes({"CXLSIM_PROFILE": _profile(tmp_path, bad)})
    with pytest.raises(InputError, match="cannot read"):
        allreduce_large_bytes({"CXLSIM_PROFILE": str(tmp_path / "missing.json")})


def test_a_communicator_opened_under_cxlsim_profile_uses_the_measured_threshold(tmp_path):
    path = _profile(tmp_path, {"allreduce_large_bytes": 12288})
    code = ("from cxlsim.emulator.launch import run_local\n"
            "print(run_local(2, lambda comm: comm.allreduce_large_bytes, slot_bytes=64))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "CXLSIM_PROFILE": path})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[12288, 12288]"


def test_a_bad_profile_in_cxlsim_profile_makes_a_command_exit_2_naming_it(tmp_path):
    path = _profile(tmp_path, {"allreduce_large_bytes": "64KiB"})
    out = subprocess.run([sys.executable, "-m", "cxlsim", "bench", "allreduce", "--np", "1", "--sizes", "4",
                          "--repeat", "1", "--iterations", "2", "--warmup", "0"], capture_output=True, text=True,
                         timeout=120, env={**__import__("os").environ, "CXLSIM_PROFILE": path})
    assert out.returncode == 2 and "CXLSIM_PROFILE=" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_both_algorithms_are_held_out_against_the_thresholds_calls_by_hand():
    """algorithm_errors: each algorithm forced at every size the threshold timed, predicted by the model; the errors are
    (predicted - measured) / measured, their median and worst by absolute value."""
    import os

    from cxlsim.calibrate import LocalModel, load_profile
    from cxlsim.calibrate.allreduce_threshold import NEVER, algorithm_errors
    from cxlsim.calibrate.collectives import predict_collective

    path = os.path.join(os.path.dirname(__file__), "data", "local_host_profile_np2.json")
    model = LocalModel.from_dict(load_profile(path)["model"])
    sizes = (4096, 65536, 262144)
    truth = {n: (predict_collective(model, "hw", "allreduce", n, NEVER), predict_collective(model, "hw", "allreduce", n, 0))
             for n in sizes}
    result = {"coherence": "hw", "rows": [dict(size_bytes=n, small_ns=truth[n][0] * f, large_ns=truth[n][1] / f)
                                          for n, f in zip(sizes, (1.0, 1.25, 0.8))]}
    got = algorithm_errors(model, result)
    assert [row[0] for row in got["small"]["rows"]] == list(sizes)
    assert [row[3] for row in got["small"]["rows"]] == pytest.approx([0.0, 1 / 1.25 - 1, 1 / 0.8 - 1])
    assert [row[3] for row in got["large"]["rows"]] == pytest.approx([0.0, 0.25, -0.2])
    assert got["small"]["worst"] == pytest.approx(0.25) and got["small"]["worst_size"] == 262144
    assert got["large"]["median"] == pytest.approx(0.2) and got["large"]["worst_size"] == 65536
