"""A calibration profile used where a preset is (`fabric.preset: PATH.json`): the same projection
as `cxlsim calibrate --profile`, and clear errors for what the profile fixes."""
import dataclasses
import os

import pytest

from cxlsim import calibrate as cal
from cxlsim import config, simulate
from cxlsim.cli import main as cli_main
from cxlsim.errors import InputError

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cxlsim", "data", "osu")
SHIPPED = sorted(os.path.join(DATA, f) for f in os.listdir(DATA) if f.endswith(".txt"))


def local_model(np_=2):
    sizes = [0, 1, 64, 4096, 65536]
    return cal.LocalModel(
        np=np_, path_ns={"hw": 12.0, "flush": 40.0}, roundtrip_ns={"hw": 0.0, "flush": 0.0},
        flush_ns_per_line=1.5, fence_ns={"hw": 5.0, "flush": 80.0}, overhead_ns={"copy": 150.0, "zero-copy": 300.0},
        copy_bw_curve={str(s): s / 30.0 for s in sizes}, write_pass_curve={str(s): s / 20.0 for s in sizes},
        read_pass_curve={str(s): np_ * s / 25.0 for s in sizes})


@pytest.fixture()
def local_profile(tmp_path):
    path = str(tmp_path / "local.json")
    cal.save_profile(path, cal.make_profile("local-host", local_model().to_dict(), [], seed=1))
    return path


@pytest.fixture(scope="module")
def network_profile(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("net") / "network.json")
    result = cal.from_osu(SHIPPED, nodes=2, memcpy_bw_bytes_per_ns=20.0)
    cal.save_profile(path, cal.make_profile("network", result["model"], result["rows"], seed=2))
    return path


def scenario(preset, **fabric):
    workload = fabric.pop("workload", {})
    return config.from_dict({"fabric": {"preset": preset, "nodes": fabric.pop("nodes", 4), **fabric},
                             "workload": {"sizes": [1, 4096], **workload}})


@pytest.mark.parametrize("coherence,algorithm,side", [(None, "auto", "copy"), ("flush", "cxl_pool", "copy"),
                                                      ("hw", "cxl_pool_zero_copy", "zero-copy")])
def test_a_local_host_profile_projects_as_calibrate_does(local_profile, coherence, algorithm, side):
    cxl = {"cxl": {"coherence": coherence}} if coherence else {}
    rows = simulate.run(scenario(local_profile, workload={"algorithm": algorithm}, **cxl))
    model = dataclasses.replace(local_model(), np=4)
    expect = [cal.predict_local(model, coherence or "hw", side, n) / 1e3 for n in (1, 4096)]
    assert [r["latency_us"] for r in rows] == pytest.approx(expect, rel=1e-12)
    assert rows[1]["latency_us"] > rows[0]["latency_us"] > 0
    assert {r["algorithm"] for r in rows} == {"cxl_pool_zero_copy" if side == "zero-copy" else "cxl_pool"}
    assert simulate.resolved(scenario(local_profile)).fabric.preset == local_profile


def test_a_network_profile_projects_its_validation_curve(network_profile):
    rows = simulate.run(scenario(network_profile, nodes=2, workload={"sizes": [1, 1048576]}))
    validation = {r["size_bytes"]: r["full_ns"] for r in cal.load_profile(network_profile)["validation"]}
    assert [r["latency_us"] * 1e3 for r in rows] == pytest.approx([validation[1], validation[1048576]], rel=1e-9)


@pytest.mark.parametrize("fabric,match", [
    ({"links": {"latency": "1 us"}}, "fabric.links.latency: the local-host calibration profile .* does not use it "
                                     r"\(it applies to network presets and hybrid pod fabrics\)"),
    ({"cxl": {"devices": 2}}, "fabric.cxl.devices: the local-host calibration profile .* does not use it "
                              r"\(it applies to CXL pool presets and hybrid pod fabrics\)"),
    ({"ranks_per_node": 2}, "fabric.ranks_per_node: "),
    ({"workload": {"algorithm": "ring"}}, "workload.algorithm: a local-host profile runs one of"),
    ({"workload": {"collective": "allreduce"}}, "workload.collective: a calibration profile projects the allgather"),
    ({"workload": {"iterations": 5}}, "workload.iterations: "),
])
def test_what_a_profile_fixes_cannot_be_set(local_profile, fabric, match):
    with pytest.raises(InputError, match=match):
        simulate.run(scenario(local_profile, **fabric))


def test_a_network_profile_takes_no_pool_setting_and_only_mpichs_choice(network_profile):
    with pytest.raises(InputError, match="fabric.cxl.coherence: the network calibration profile .* does not use it "
                                         r"\(it applies to CXL pool presets and hybrid pod fabrics and local-host calibration profiles\)"):
        simulate.run(scenario(network_profile, cxl={"coherence": "hw"}))
    with pytest.raises(InputError, match="workload.algorithm: a network profile projects MPICH's choice"):
        simulate.run(scenario(network_profile, workload={"algorithm": "ring"}))


def test_a_missing_or_bad_profile_is_named(tmp_path):
    with pytest.raises(InputError, match="calibration profile '.*nope.json': no such file"):
        simulate.run(scenario(str(tmp_path / "nope.json")))
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "cxlsim-calibration-profile", "version": 0}')
    with pytest.raises(InputError, match="bad.json: missing key"):
        simulate.run(scenario(str(bad)))


def test_simulate_cli_takes_a_profile_as_its_preset(local_profile, tmp_path, capsys):
    assert cli_main(["simulate", "--quiet", "--preset", local_profile, "--nodes", "2", "--sizes", "1,64",
                     "--output", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr().out
    assert f"calibration profile {local_profile}, 2 ranks" in out
    table = [line.split() for line in out.splitlines() if line and not line.startswith("#")]
    expect = cal.predict_local(local_model(), "hw", "copy", 64) / 1e3
    assert [int(r[0]) for r in table] == [1, 64] and float(table[1][1]) == pytest.approx(expect, abs=0.01)
    assert (tmp_path / "ws" / "latency.csv").exists()
