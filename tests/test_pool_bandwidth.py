"""The windowed (osu_bw / osu_mbw_mr) loop on the pool's send/recv protocol: the DES against its closed form."""
from __future__ import annotations

import importlib.util
import os

import pytest

from cxlsim.errors import InputError
from cxlsim.fabric.cxl_presets import CXL_PRESETS
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.replay import pool_bandwidth as pb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _module("benchmarks/pool_bw.py", "pool_bw_bench")


def _both(name, size, pairs=1, window=pb.OSU_WINDOW):
    preset = BENCH.preset_named(name)
    des = pb.simulate_iteration_ns(CXLPoolTransport(preset, 2, coherence="flush", ranks_per_host=pairs),
                                   size, window, pairs)
    form = pb.iteration_ns(CXLPoolTransport(preset, 2, coherence="flush", ranks_per_host=pairs).figures(),
                           size, window, pairs)
    return des, form


@pytest.mark.parametrize("preset", ["vp-cmpi-direct", "vp-cmpi-switch"])
@pytest.mark.parametrize("size", [1, 8, 64, 65, 100])
def test_one_pair_equals_the_form_where_nothing_queues(preset, size):
    des, form = _both(preset, size)
    assert form == pytest.approx(des, rel=1e-9)


@pytest.mark.parametrize("preset", ["vp-cmpi-direct", "vp-cmpi-switch"])
@pytest.mark.parametrize("size", [1000, 4096, 65536, 65537, 262144])
def test_one_pair_is_within_one_percent_of_the_form(preset, size):
    des, form = _both(preset, size)
    assert form == pytest.approx(des, rel=0.01)
    assert form <= des * (1 + 1e-9)  # the form leaves the device's queue out, never adds time


@pytest.mark.parametrize("pairs, size, rel", [(2, 64, 1e-9), (2, 4096, 0.01), (2, 65536, 0.01),
                                              (4, 4096, 0.02), (4, 65536, 0.01)])
def test_several_pairs_share_the_senders_port_as_the_form_says(pairs, size, rel):
    des, form = _both("vp-cmpi-direct", size, pairs)
    assert form == pytest.approx(des, rel=rel)
    one, _ = _both("vp-cmpi-direct", size)
    if size >= 4096:  # the senders' streams share one issue port: below pairs x one pair's bandwidth
        assert des > 1.03 * one


@pytest.mark.parametrize("window", [1, 4, 5])
def test_the_form_holds_for_short_windows(window):
    des, form = _both("vp-cmpi-direct", 4096, window=window)
    assert form == pytest.approx(des, rel=0.01)


def test_the_window_keeps_messages_in_flight():
    one_at_a_time = pb.bandwidth_gb_s(65536, _both("vp-cmpi-direct", 65536, window=1)[0], 1)
    windowed = pb.bandwidth_gb_s(65536, _both("vp-cmpi-direct", 65536)[0])
    assert windowed > 1.5 * one_at_a_time


def test_pieces_cover_the_message_in_whole_lines():
    assert pb.pieces_of(1) == [64]
    assert pb.pieces_of(65537) == [65536, 64]
    assert sum(pb.pieces_of(4 << 20)) == 4 << 20


@pytest.mark.parametrize("preset", ["cxl3-pool", "mhd3-pool"])
@pytest.mark.parametrize("size", [1, 65, 4096, 65536, 131072])
def test_one_pair_on_a_hw_pool_equals_its_form(preset, size):
    des = pb.simulate_iteration_ns(CXLPoolTransport(CXL_PRESETS[preset], 2, coherence="hw"), size)
    form = pb.iteration_ns(CXLPoolTransport(CXL_PRESETS[preset], 2, coherence="hw").figures(), size)
    assert form == pytest.approx(des, rel=1e-3)


def test_a_shorter_last_piece_on_a_hw_pool_is_within_its_stated_bound():
    des = pb.simulate_iteration_ns(CXLPoolTransport(CXL_PRESETS["cxl3-pool"], 2, coherence="hw"), 65537)
    form = pb.iteration_ns(CXLPoolTransport(CXL_PRESETS["cxl3-pool"], 2, coherence="hw").figures(), 65537)
    assert form == pytest.approx(des, rel=0.012)


def test_bad_input_names_the_argument():
    fig = CXLPoolTransport(CXL_PRESETS["cxl3-pool"], 2, coherence="hw", ranks_per_host=2).figures()
    with pytest.raises(InputError, match="pairs: the windowed bandwidth's hw closed form covers one pair, got 2"):
        pb.iteration_ns(fig, 64, pairs=2)
    transport = CXLPoolTransport(CXL_PRESETS["cxl2-pool"], 2, coherence="flush")
    with pytest.raises(InputError, match="size_bytes"):
        pb.simulate_iteration_ns(transport, 0)
    with pytest.raises(InputError, match=r"transport: the loop of 2 pairs needs 2 x 2 ranks"):
        pb.simulate_iteration_ns(transport, 64, pairs=2)


def test_several_pairs_on_a_hw_pool_run_on_the_des():
    transport = CXLPoolTransport(CXL_PRESETS["cxl3-pool"], 2, coherence="hw", ranks_per_host=2)
    assert pb.simulate_iteration_ns(transport, 4096, window=8, pairs=2) > 0


def test_the_benchmark_prints_and_checks_its_rows(tmp_path, capsys):
    out = tmp_path / "rows.csv"
    assert BENCH.main(["--sizes", "1B,4KiB", "--pairs", "1", "2", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "largest |error| by pairs: 1: " in text and "MET" in text
    assert len(out.read_text().splitlines()) == 5
    assert BENCH.main(["--preset", "nope"]) == 2
    assert "--preset: unknown preset 'nope'" in capsys.readouterr().err
