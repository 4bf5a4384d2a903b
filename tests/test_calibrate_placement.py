"""A local-host profile records the host placement its model's flag round trip was measured in."""
from __future__ import annotations

import json
import os

import pytest

from cxlsim import calibrate as cal
from cxlsim.calibrate.cli import local_profile
from cxlsim.calibrate.profile import (PLACEMENT_KEY, placement_record,
                                      profile_placement)
from cxlsim.cli import main as cli_main
from cxlsim.emulator.host import DISTURBED_ROUNDTRIP_NS, SLOW_ROUNDTRIP_NS, placement_of
from cxlsim.errors import InputError

HERE = os.path.dirname(os.path.abspath(__file__))
OLD_PROFILE = os.path.join(HERE, "data", "local_host_profile_np2.json")  # written before the placement key


def _model(hw_roundtrip_ns):
    sizes = [0, 1, 64, 4096]
    return cal.LocalModel(np=2, path_ns={"hw": 12.0, "flush": 40.0}, roundtrip_ns={"hw": hw_roundtrip_ns, "flush": 480.0},
                          flush_ns_per_line=1.5, fence_ns={"hw": 5.0, "flush": 80.0},
                          overhead_ns={"copy": 150.0, "zero-copy": 900.0},
                          copy_bw_curve={str(s): s / 30.0 for s in sizes},
                          write_pass_curve={str(s): s / 20.0 for s in sizes},
                          read_pass_curve={str(s): s / 12.5 for s in sizes})


@pytest.mark.parametrize("roundtrip,expected", [(55.0, "fast"), (200.0, "fast"), (200.5, "slow"), (470.0, "slow"),
                                                (2000.0, "slow"), (2000.5, "disturbed"), (float("inf"), "disturbed")])
def test_the_class_follows_the_emulator_probe_rule(roundtrip, expected):
    assert placement_of(roundtrip) == expected


def test_the_thresholds_are_the_emulator_probes():
    comm = pytest.importorskip("cxlsim.emulator.comm")  # the compiled emulator keeps its own copy (an import circle)
    assert (comm.SLOW_ROUNDTRIP_NS, comm.DISTURBED_ROUNDTRIP_NS) == (SLOW_ROUNDTRIP_NS, DISTURBED_ROUNDTRIP_NS)
    rec = placement_record(80.0)
    assert (rec["fast_up_to_ns"], rec["disturbed_above_ns"]) == (comm.SLOW_ROUNDTRIP_NS, comm.DISTURBED_ROUNDTRIP_NS)


def _result(hw_roundtrip_ns):
    """The parts of a `calibrate_local` result a profile is made of (no measurement)."""
    return dict(model=_model(hw_roundtrip_ns), fit={}, primitives={}, validation=[], injected=[], mpi=None, cores=2,
                allgather={"batches": []}, collectives=None, allreduce_threshold=None)


@pytest.mark.parametrize("roundtrip,expected", [(78.4, "fast"), (463.0, "slow")])
def test_a_local_profile_records_its_placement_and_it_survives_the_file(tmp_path, roundtrip, expected):
    profile = local_profile(_result(roundtrip))
    assert profile[PLACEMENT_KEY]["class"] == expected
    assert profile[PLACEMENT_KEY]["roundtrip_ns"] == roundtrip
    path = str(tmp_path / "profile.json")
    cal.save_profile(path, profile)
    got = profile_placement(cal.load_profile(path))
    assert (got["class"], got["roundtrip_ns"], got["recorded"]) == (expected, roundtrip, True)


def test_an_old_profile_loads_and_its_placement_is_derived_and_says_so(capsys):
    profile = cal.load_profile(OLD_PROFILE)
    assert PLACEMENT_KEY not in profile
    got = profile_placement(profile)
    assert got["recorded"] is False
    assert got["roundtrip_ns"] == profile["model"]["roundtrip_ns"]["hw"]
    assert got["class"] == placement_of(profile["model"]["roundtrip_ns"]["hw"])
    assert cli_main(["calibrate", "--validate-only", OLD_PROFILE]) == 0
    out = capsys.readouterr().out
    assert f"# host placement {got['class']} (hw flag round trip" in out and "not recorded in the profile" in out


def test_a_network_profile_has_no_placement_of_this_machine():
    profile = cal.make_profile("network", {"base_preset": "ib-hdr", "np": 2, "loggp": {},
                                           "collective_overhead_ns": 0.0, "memcpy_bw_bytes_per_ns": 10.0}, [])
    assert profile_placement(profile) is None


@pytest.mark.parametrize("bad", ["fast", {"class": "quick", "roundtrip_ns": 80.0}, {"roundtrip_ns": 80.0}])
def test_a_malformed_placement_is_an_error_naming_the_key(tmp_path, bad):
    profile = local_profile(_result(80.0))
    profile[PLACEMENT_KEY] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(profile))
    with pytest.raises(InputError, match=f"bad.json: {PLACEMENT_KEY}: expected"):
        cal.load_profile(str(path))


def test_the_placement_printed_by_validate_only_is_the_recorded_one(tmp_path, capsys):
    profile = local_profile(_result(463.0))
    path = str(tmp_path / "slow.json")
    cal.save_profile(path, profile)
    assert cli_main(["calibrate", "--validate-only", path]) == 0
    out = capsys.readouterr().out
    assert "# host placement slow (hw flag round trip 463 ns)" in out
