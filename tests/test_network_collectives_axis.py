"""experiments/collectives_axis.py on a small grid: every collective, pool and network, ratios as stated."""
import csv
import importlib.util
import os

import pytest

HERE = os.path.dirname(__file__)


def load():
    path = os.path.join(HERE, "..", "experiments", "collectives_axis.py")
    spec = importlib.util.spec_from_file_location("collectives_axis", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_a_small_grid_covers_every_collective_pool_and_network(tmp_path):
    axis = load()
    assert axis.main(["--max-nodes", "4", "--max-size", "1KiB", "--output", str(tmp_path)]) == 0
    for name in ("results.csv", "speedup.csv", "summary.csv", "summary.md", "provenance.json"):
        assert (tmp_path / name).exists()
    summary = rows(tmp_path / "summary.csv")
    assert len(summary) == len(axis.COLLECTIVES) * len(axis.POOL_VARIANTS) * len(axis.NETWORK_PRESETS)
    speedup = rows(tmp_path / "speedup.csv")
    for s in speedup:
        assert float(s["speedup"]) == pytest.approx(float(s["network_us"]) / float(s["pool_us"]), rel=1e-12)
    barrier = [s for s in speedup if s["collective"] == "barrier"]
    assert {s["size_bytes"] for s in barrier} == {"0"} and {s["network_algorithm"] for s in barrier} == {"dissemination"}
    a2a = {(s["nodes"], s["size_bytes"]): s["network_algorithm"] for s in speedup if s["collective"] == "alltoall"}
    assert a2a[("4", "256")] == "scattered"  # MPICH's Bruck needs P >= 8


def test_open_mpi_as_the_baseline(tmp_path):
    assert load().main(["--max-nodes", "4", "--max-size", "64", "--selector", "ompi", "--output", str(tmp_path)]) == 0
    speedup = rows(tmp_path / "speedup.csv")
    barrier = {s["nodes"]: s["network_algorithm"] for s in speedup if s["collective"] == "barrier"}
    assert barrier == {"2": "recursive_doubling", "4": "linear"} and {s["library"] for s in speedup} == {"ompi"}
    assert "Open MPI's choice" in (tmp_path / "summary.md").read_text()


def test_bad_options_exit_2(capsys):
    assert load().main(["--max-nodes", "1"]) == 2
    assert "--max-nodes" in capsys.readouterr().err
