"""The validation against published real-CXL results (experiments/validate_published.py): its committed
descriptions and the structure of its rows. No test here asserts that an error is small."""
import csv
import importlib.util
import json
import pathlib
import sys

import pytest

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1] / "experiments"


def _load(name):
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def exp():
    return _load("validate_published")


@pytest.fixture(scope="module")
def fab():
    return _load("validate_published_fabrics")


def test_every_description_is_complete_and_sourced(fab):
    keys = [d.key for d in fab.DESCRIPTIONS]
    assert len(keys) == len(set(keys))
    doc = fab.__doc__
    for d in fab.DESCRIPTIONS:
        assert d.target in ("hardware", "outside", "circular", "secondary"), d.key
        assert d.published.source and d.published.unit, d.key
        assert d.hardware and d.result, d.key
        # the figure is a value, a range, or missing with a note saying why
        assert (d.published.value is not None or d.published.low is not None or d.published.note), d.key
        for tag in (*d.assumptions, *d.sweep):
            assert f"[{tag}]" in doc, f"{d.key}: assumption {tag} is not explained in the module docstring"
        for name in [d.fabric["preset"]] if "preset" in d.fabric else d.fabric["presets"]:
            assert fab.preset(name).name == name
    # QEMU timing is reported apart from the hardware target
    assert {d.target for d in fab.DESCRIPTIONS if d.key.startswith("omb-cxl")} == {"outside"}
    # figures read from a third-party summary are reported apart too, and say so in their source
    for d in fab.MICRO23_DESCRIPTIONS:
        assert d.target == "secondary" and "MICRO23-S" in d.published.source and d.published.note, d.key


def test_presets_are_sourced_and_buildable(fab):
    from cxlsim.fabric.cxl_presets import CXLPoolPreset
    from cxlsim.fabric.cxl_transport import CXLPoolTransport

    for p in fab.PRESETS:
        assert isinstance(p, CXLPoolPreset) and p.source
        CXLPoolTransport(p, 3, coherence="flush", devices=1)
    # the CZ120 description: one DDR5-4800 channel at the ASIC expander's 82%, on an x8 link
    assert fab.CZ120_DEVICE.media_bw_bytes_per_ns == pytest.approx(0.82 * 38.4)
    assert fab.CZ120_DIRECT.switch.port_bw_bytes_per_ns == 32.0


def test_error_of_a_value_and_a_range(exp):
    from types import SimpleNamespace as P
    assert exp.error_of(1.5, P(value=2.0, low=None, high=None)) == pytest.approx(-0.25)
    rng = P(value=None, low=100.0, high=200.0)
    assert exp.error_of(150.0, rng) == 0.0
    assert exp.error_of(50.0, rng) == pytest.approx(-0.5)
    assert exp.error_of(300.0, rng) == pytest.approx(0.5)
    assert exp.error_of(None, rng) is None
    assert exp.error_of(1.0, P(value=None, low=None, high=None)) is None


FAST = ("cmpi-8B-one-way", "omb-cxl-small", "load-latency-direct-hc34", "load-latency-switch",
        "switch-vs-direct-octopus", "cccl-broadcast", "micro23-devices")


def test_prediction_rows_have_their_structure(exp, fab):
    chosen = [d for d in fab.DESCRIPTIONS if d.key in FAST]
    rows, sweep, curves = exp.rows_of(chosen)
    assert [r["key"] for r in rows] == [d.key for d in chosen]
    for r in rows:
        assert r["source"] and r["how"] and r["unit"]
        if r["predicted"] is None:
            assert r["error"] is None and r["within_25pct"] is None
        else:
            assert r["predicted"] > 0
        if r["error"] is not None:
            assert r["within_25pct"] == (abs(r["error"]) <= exp.TARGET)
    by = {r["key"]: r for r in rows}
    # both engines give the same pool exchange (the closed form is exact on the pool)
    one_way = by["cmpi-8B-one-way"]
    assert one_way["other_engine"] == pytest.approx(one_way["predicted"], rel=1e-9)
    # the load latency closed form: 2 x (port + link) + media, on the preset's own figures
    direct = fab.preset("vp-cxl2-direct")
    assert by["load-latency-direct-hc34"]["predicted"] == direct.load_latency_ns(0)
    # a switch adds two traversals of its hop and a link to the exchange's path: it takes longer
    assert by["switch-vs-direct-octopus"]["predicted"] > 1.0
    # the attachment sweep lists both attachments
    assert {s["value"] for s in sweep if s["key"] == "cmpi-8B-one-way"} == {"vp-cmpi-direct", "vp-cmpi-switch"}
    # broadcast on a pool: predicted once a pool broadcast algorithm is registered, else said so
    from cxlsim.models.collectives.base import POOL
    from cxlsim.models.collectives.registry import names
    if not names("broadcast", POOL):
        assert by["cccl-broadcast"]["predicted"] is None and "not yet predictable" in by["cccl-broadcast"]["how"]
    else:
        assert by["cccl-broadcast"]["predicted"] > 0 and by["cccl-broadcast"]["error"] is not None
        assert "DES - closed form" in by["cccl-broadcast"]["how"]


def test_stream_bandwidth_des_against_its_closed_form(exp, fab):
    des, form = exp.stream_bandwidth(fab.CZ120_DIRECT, 2, 1, 1 << 20)
    assert des == pytest.approx(form, rel=0.02)  # the first request's latency is the only difference
    assert des <= form


def test_stream_bandwidth_with_per_direction_links(exp, fab):
    """Media above the x8 link: a 2:1 read:write mix passes one direction's 32 GB/s (the links are FIFOs of
    their own per direction, fabric/pool_path.py); reads alone stay at the link's rate."""
    fast = exp._media(fab.CZ120_DIRECT, 1.0)                    # 38.4 GB/s media behind 32 GB/s links
    des, form = exp.stream_bandwidth(fast, 2, 1, 4 << 20)
    assert form == pytest.approx(38.4)                          # media: 3n / 38.4 outlasts the reads' 2n / 32
    assert des == pytest.approx(form, rel=0.02) and des <= form
    des, form = exp.stream_bandwidth(fast, 3, 0, 4 << 20)
    assert form == pytest.approx(32.0)                          # every byte on the one downstream link
    assert des == pytest.approx(form, rel=0.02) and des <= form


def test_the_gpu_copy_windows_sweep_binds_below_the_links_window_and_leaves_the_committed_rows_above(exp, fab):
    """[A-GPU]'s 256 lines in flight carry 256 x 64 B per load latency, just above the 64 GB/s GPU link: a
    smaller window binds (the ratio falls), a larger one leaves the link binding (the committed prediction)."""
    label = "GPU copy engine window, lines in flight (CCCL)"
    rows = [r for r in exp.post_run_sensitivity(["cccl-allgather", "cccl-broadcast"]) if r["assumption"] == label]
    assert {r["key"] for r in rows} == {"cccl-allgather", "cccl-broadcast"}
    for key in ("cccl-allgather", "cccl-broadcast"):
        d = next(x for x in fab.DESCRIPTIONS if x.key == key)
        base = exp._cccl_ratio(d, fab.preset(d.fabric["preset"]), 0.0)
        by_lines = {r["value"]: r["predicted"] for r in rows if r["key"] == key}
        assert fab.preset(d.fabric["preset"]).host_path.outstanding_lines == 256
        assert by_lines[256] == pytest.approx(base) == by_lines[512] == by_lines[1024]
        assert by_lines[64] < by_lines[128] < by_lines[256]
        assert all(r["added_after_first_run"] for r in rows)


def test_the_cmpi_mbw_mr_row_predicts_a_windowed_curve_per_pairs(exp, fab):
    """cMPI's osu_mbw_mr (CMPI-AE-MBW): the closed form per pairs and size, the DES's check in the row, the sweeps."""
    from dataclasses import replace

    from cxlsim.replay.pool_messages import DEFAULT_SLOT_BYTES
    (d,) = fab.CMPI_MBW_DESCRIPTIONS
    assert d.published.value is None and d.workload["slot_bytes"] == DEFAULT_SLOT_BYTES == 65536  # cMPI's cell
    small = replace(d, workload=dict(d.workload, sizes="1KiB:256KiB", pairs=[1, 2]))
    sweep, curves = [], []
    one, other, how = exp.predict_mbw(small, sweep, curves)
    by = {(c["pairs"], c["size_bytes"]): c["value"] for c in curves}
    assert len(by) == 2 * 9
    assert one == by[1, 256 * 1024] and other is None
    assert by[1, 1024] < by[1, 64 * 1024] < by[1, 256 * 1024] * 1.01             # the window fills the pipe
    assert by[1, 256 * 1024] < by[2, 256 * 1024] < 2 * by[1, 256 * 1024]       # two senders share one host port
    diff = float(how.split("largest |diff| ")[1].split("%")[0])
    assert diff < 2.0                                                           # the DES agrees with the form
    assert {s["assumption"] for s in sweep} == {"A-MBW-MAILBOX", "A-ATTACH"}
    slots = {s["value"]: s["predicted"] for s in sweep if s["assumption"] == "A-MBW-MAILBOX"}
    assert slots["16384 B slots, 1 pairs"] < slots["65536 B slots, 1 pairs"]  # each piece pays its flags and polls


def test_micro23_presets_follow_their_description(fab):
    """Each MICRO'23 device: 82% of its DRAM's peak [A-M23-EFF], below the x8 link [A-M23-LINK]."""
    for d in fab.MICRO23_DESCRIPTIONS:
        pre = fab.preset(d.fabric["preset"])
        assert pre.device.media_bw_bytes_per_ns == pytest.approx(0.82 * d.workload["dram_peak_gb_s"])
        assert pre.device.media_bw_bytes_per_ns < pre.switch.port_bw_bytes_per_ns == 32.0


@pytest.mark.slow
def test_main_writes_the_workspace(exp, fab, tmp_path):
    out = tmp_path / "vp"
    assert exp.main(["--output", str(out), "--quiet"]) == 0
    with open(out / "validation.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["key"] for r in rows] == [d.key for d in fab.DESCRIPTIONS]
    assert all(r["source"] for r in rows)
    data = json.loads((out / "validation.json").read_text())
    assert set(data) == {"rows", "sensitivity", "curves"}
    assert (out / "validation.png").stat().st_size > 0
    assert (out / "validation.md").read_text().startswith("| result |")
    with open(out / "sensitivity.csv") as fh:
        sweeps = list(csv.DictReader(fh))
    # the sweeps committed with the descriptions, and those added after the first run, each marked
    assert {r["added_after_first_run"] for r in sweeps} == {"True", "False"}
    assert {r["assumption"] for r in sweeps if r["added_after_first_run"] == "True"} >= set(exp.POST_RUN_SWEEPS) - {
        "IB broadcast algorithm (CCCL Broadcast)", "GPU link, GB/s (CCCL Broadcast)"}


def test_keys_runs_only_those_rows_and_refuses_an_unknown_one(exp, tmp_path, capsys):
    out = tmp_path / "some"
    assert exp.main(["--keys", "load-latency-direct-hc34", "micro23-bw-cxl-c", "--output", str(out), "--quiet"]) == 0
    with open(out / "validation.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["key"] for r in rows] == ["load-latency-direct-hc34", "micro23-bw-cxl-c"]
    assert (out / "validation.png").stat().st_size > 0          # no cMPI curve: that panel is left empty
    with open(out / "sensitivity.csv") as fh:
        sweeps = list(csv.DictReader(fh))
    assert {r["key"] for r in sweeps} == {"micro23-bw-cxl-c"}  # no other row's post-run sweep ran
    with pytest.raises(SystemExit) as exit_info:
        exp.main(["--keys", "no-such-row", "--output", str(tmp_path / "x")])
    assert exit_info.value.code == 2 and "no-such-row" in capsys.readouterr().err
