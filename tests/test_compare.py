"""`cxlsim compare`: fabrics side by side, ratios, crossovers, and the points a fabric cannot build."""
from __future__ import annotations

import argparse
import csv

import pytest

from cxlsim import compare, config, simulate
from cxlsim.errors import InputError


def run_cli(argv):
    parser = argparse.ArgumentParser()
    compare.register(parser.add_subparsers())
    args = parser.parse_args(["compare", *argv, "--quiet"])
    return args.func(args)


def test_crossovers_bracket_every_crossing_and_only_those():
    ratios = [3.0, 1.5, 0.5, 0.8, 1.2, 1.0, 1.0, 0.9]
    rows = [{"nodes": 4, "size_bytes": 2 ** i, "r": x} for i, x in enumerate(ratios)]
    assert compare.crossovers(rows, "r") == {4: [(2, 4), (8, 16), (16, 32), (64, 128)]}
    flat = [{"nodes": 2, "size_bytes": s, "r": 2.0} for s in (1, 2, 4)]
    assert compare.crossovers(flat, "r") == {2: []}
    gap = [{"nodes": 2, "size_bytes": 1, "r": 2.0}, {"nodes": 2, "size_bytes": 2, "r": None},
           {"nodes": 2, "size_bytes": 4, "r": 0.5}]
    assert compare.crossovers(gap, "r") == {2: []}


def test_ratios_are_the_simulator_latencies_of_each_fabric():
    workload = {"workload.sizes": [8, 65536], "workload.collective": "allgather"}
    fabrics = [compare.parse_fabric("ib-hdr"), compare.parse_fabric("eth-100g-roce")]
    rows = compare.compare(fabrics, [4], workload, "analytic")
    for fabric, column in (("ib-hdr", "ib-hdr_latency_us"), ("eth-100g-roce", "eth-100g-roce_latency_us")):
        direct = simulate.run(simulate.resolved(config.with_overrides(config.from_dict(simulate.DEFAULT_SCENARIO), {
            "fabric.preset": fabric, "fabric.nodes": 4, "workload.sizes": [8, 65536], "engine": "analytic"})))
        assert [r[column] for r in rows] == [d["latency_us"] for d in direct]
    for r in rows:
        assert r["ratio_ib-hdr/eth-100g-roce"] == pytest.approx(r["ib-hdr_latency_us"] / r["eth-100g-roce_latency_us"])


def test_cli_writes_table_csv_and_plots_and_marks_unbuildable_points(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert run_cli(["--fabric", "ib-hdr", "--fabric", "cxl2-pool", "--nodes", "4,16", "--sizes", "8,4KiB",
                    "--engine", "analytic", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ratio_ib-hdr/cxl2-pool" in text and "n/a" in text and "fabric.nodes" in text
    assert "nodes 16: n/a (not built)" in text
    with open(out / "compare.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 and {r["nodes"] for r in rows} == {"4", "16"}
    assert all(r["cxl2-pool_latency_us"] == "" for r in rows if r["nodes"] == "16")
    assert (out / "ratio.png").stat().st_size > 0 and (out / "crossover.png").stat().st_size > 0
    assert (out / "crossovers.csv").exists() and (out / "provenance.json").exists()


@pytest.mark.parametrize("argv, key", [
    (["--fabric", "ib-hdr"], "--fabric"),
    (["--fabric", "ib-hdr", "--fabric", "no-such-preset"], "fabric.preset"),
    (["--fabric", "ib-hdr", "--fabric", "missing.yaml"], "--fabric"),
    (["--fabric", "ib-hdr", "--fabric", "cxl2-pool", "--nodes", "16,32"], "--fabric cxl2-pool"),
    (["--fabric", "ib-hdr", "--fabric", "eth-100g-roce", "--nodes", "4,x"], "--nodes"),
])
def test_bad_input_names_the_argument(argv, key):
    with pytest.raises(InputError, match=key):
        run_cli(argv + ["--engine", "analytic", "--sizes", "8"])


def test_a_scenario_file_is_a_fabric(tmp_path):
    path = tmp_path / "roce.yaml"
    path.write_text("name: roce\nfabric:\n  preset: eth-100g-roce\n  nodes: 2\n", encoding="utf-8")
    rows = compare.compare([compare.parse_fabric("eth-100g-roce"), compare.parse_fabric(str(path))], [4],
                           {"workload.sizes": [64], "workload.collective": "allgather"}, "analytic")
    assert rows[0]["ratio_eth-100g-roce/roce"] == pytest.approx(1.0)
