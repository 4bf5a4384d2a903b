"""Hybrid pod fabrics (cxl-pods): DES = closed form uncongested, payloads, refused keys, simulate and compare."""
from __future__ import annotations

import argparse
import csv

import pytest
import yaml

from cxlsim import compare, config, simulate
from cxlsim.errors import InputError
from cxlsim.fabric.pod_setup import CXL_PODS
from cxlsim.fabric.pods import PodsTransport
from cxlsim.models.collectives import analytic, runner
from cxlsim.models.collectives.cxl_pool import cxl_pool_closed_form
from cxlsim.models.collectives.hierarchical_pods import PodFigures
from cxlsim.models.collectives.network_forms import network_closed_form
from cxlsim.models.collectives.registry import algorithm
from cxlsim.models.collectives.selectors import select


def pods_scenario(nodes=12, hosts=4, engine="des", **extra):
    data = {"engine": engine, "fabric": {"preset": "cxl-pods", "nodes": nodes,
                                         "pods": {"hosts": hosts, **extra.pop("pods", {})}, **extra}}
    return config.from_dict(data)


def setup_of(scenario):
    return CXL_PODS.elaborate(scenario.fabric)


def figures(setup, chunk=65536):
    cm = analytic.CostModel.from_network(setup.network.network(), chunk)
    return PodFigures(setup.pool_figures(), cm, setup.hosts, setup.pods)


@pytest.mark.parametrize("inter", ["ring", "recursive_doubling", "bruck"])
@pytest.mark.parametrize("fabric", [{}, {"cxl": {"coherence": "flush"}}, {"cxl": {"switch_levels": 2}},
                                    {"pods": {"network": "ib-ndr", "pool": "cxl2-pool"}}])
def test_des_equals_the_closed_form_on_an_uncongested_network(inter, fabric):
    nodes = 12 if inter == "ring" else 16  # 3 pods (ring), 4 pods (the power-of-two algorithms)
    setup = setup_of(pods_scenario(nodes, 4, **fabric))
    algo, ctx = algorithm("allgather", "pods"), runner.Context(inter=inter)
    for m in (1, 1000, 8192):
        outcome = runner.run_algorithm(setup.new_transport(65536), algo, m, ctx)
        runner.verify("allgather", nodes, ctx, outcome.results)
        assert outcome.latency_ns == pytest.approx(algo.cost(figures(setup), nodes, m, ctx), rel=1e-9)


def test_the_form_is_the_network_phase_plus_the_pool_phase():
    setup = setup_of(pods_scenario(16, 4))
    fig, m = figures(setup), 4096
    ring = algorithm("allgather", "ring")
    expect = network_closed_form(ring, fig.network, 4, m, runner.Context()) + \
        cxl_pool_closed_form(fig.pool, 4, 4 * m, fig.pool.coherence)
    assert algorithm("allgather", "pods").cost(fig, 16, m, runner.Context(inter="ring")) == pytest.approx(expect)


def test_one_pod_is_the_pool_alone():
    setup = setup_of(pods_scenario(8, 8))
    fig = figures(setup)
    assert algorithm("allgather", "pods").cost(fig, 8, 512, runner.Context()) == \
        cxl_pool_closed_form(fig.pool, 8, 512, fig.pool.coherence)


def test_every_rank_ends_with_every_block_in_rank_order():
    setup = setup_of(pods_scenario(12, 4))
    transport = setup.new_transport(65536)
    assert isinstance(transport, PodsTransport) and transport.pods == 3 and transport.size == 12
    outcome = runner.run_algorithm(transport, algorithm("allgather", "pods"), 64, runner.Context(inter="ring"))
    assert all(outcome.results[r] == list(range(12)) for r in range(12))
    with pytest.raises(AssertionError, match="rank 0"):
        runner.verify("allgather", 12, runner.Context(), {**outcome.results, 0: list(range(11)) + [0]})


def test_pods_of_8_and_15_hosts_fit_one_switch_level_16_and_32_need_two():
    levels = {q: setup_of(pods_scenario(2 * q, q)).pool.switch_levels for q in (8, 15, 16, 32)}
    assert levels == {8: 1, 15: 1, 16: 2, 32: 2}


def test_simulate_runs_a_hybrid_scenario_and_auto_picks_the_faster_form():
    sizes = [1, 4096, 1 << 20]
    scenario = simulate.resolved(config.from_dict({
        "engine": "analytic", "fabric": {"preset": "cxl-pods", "nodes": 64, "pods": {"hosts": 16}},
        "workload": {"sizes": sizes}}))
    rows = simulate.run(scenario)
    fig = figures(setup_of(scenario))
    for row, m in zip(rows, sizes):
        inter, _ = select("mpich", "allgather", 4, m)
        pods = algorithm("allgather", "pods").cost(fig, 64, m, runner.Context(inter=inter))
        flat, _ = select("mpich", "allgather", 64, m)
        net = network_closed_form(algorithm("allgather", flat), fig.network, 64, m, runner.Context())
        assert row["latency_us"] * 1e3 == pytest.approx(min(pods, net))
        assert row["algorithm"] == ("pods" if pods < net else flat)
    assert rows[0]["algorithm"] == "pods" and rows[-1]["algorithm"] == "ring"  # the pools win small, lose at 1 MiB
    again = simulate.run(config.from_dict(config.to_dict(scenario)))  # the written-out figures re-run alike
    assert [r["latency_us"] for r in again] == [r["latency_us"] for r in rows]


def test_simulate_des_checks_payloads_and_matches_the_analytic_rows():
    base = {"fabric": {"preset": "cxl-pods", "nodes": 8, "pods": {"hosts": 4}},
            "workload": {"sizes": [8, 2048], "algorithm": "pods"}}
    des = simulate.run(config.from_dict(base))
    ana = simulate.run(config.from_dict({**base, "engine": "analytic"}))
    assert [r["latency_us"] for r in des] == pytest.approx([r["latency_us"] for r in ana], rel=1e-9)
    assert all(r["events"] > 0 and "between pods: recursive_doubling" in r["note"] for r in des)
    net = simulate.run(config.from_dict({**base, "workload": {"sizes": [8], "algorithm": "ring"}}))
    assert net[0]["algorithm"] == "ring"


@pytest.mark.parametrize("data, key", [
    ({"fabric": {"preset": "cxl-pods", "nodes": 8, "ranks_per_node": 2}}, "fabric.ranks_per_node"),
    ({"fabric": {"preset": "cxl-pods", "nodes": 8, "placement": "round_robin"}}, "fabric.placement"),
    ({"fabric": {"preset": "ib-hdr", "nodes": 8, "pods": {"hosts": 4}}}, "fabric.pods.hosts"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 8, "pods": {"network": "ib-ndr"}}}, "fabric.pods.network"),
    ({"fabric": {"preset": "cxl-pods", "nodes": 8}, "workload": {"inter_algorithm": "bruck"}},
     "workload.inter_algorithm"),
])
def test_unused_keys_are_refused(data, key, tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(InputError, match=key.replace(".", r"\.")):
        simulate.scenario_from(str(path), {})


@pytest.mark.parametrize("fabric, key", [
    ({"nodes": 10, "pods": {"hosts": 4}}, "fabric.nodes"),
    ({"nodes": 8, "pods": {"hosts": 4, "pool": "ib-hdr"}}, "fabric.pods.pool"),
    ({"nodes": 8, "pods": {"hosts": 4, "network": "cxl3-pool"}}, "fabric.pods.network"),
    ({"nodes": 40, "pods": {"hosts": 20, "pool": "cxl2-pool"}}, "fabric.pods.hosts"),
])
def test_bad_pods_name_the_key(fabric, key):
    with pytest.raises(InputError, match=key.replace(".", r"\.")):
        setup_of(config.from_dict({"fabric": {"preset": "cxl-pods", **fabric}}))


def test_the_pods_collectives_only_and_only_switch_kinds():
    with pytest.raises(InputError, match="workload.collective: .* runs allgather, allreduce, broadcast, alltoall"):
        simulate.run(config.from_dict({"fabric": {"preset": "cxl-pods", "nodes": 8, "pods": {"hosts": 4}},
                                       "workload": {"collective": "reduce_scatter", "sizes": [64]}}))
    with pytest.raises(InputError, match="fabric.pods.kind: unknown key"):  # the pool preset decides the kind
        config.from_dict({"fabric": {"preset": "cxl-pods", "nodes": 8, "pods": {"kind": "switch"}}})
    with pytest.raises(InputError, match="hybrid pod fabric"):
        simulate.run(config.from_dict({"fabric": {"preset": "ib-hdr", "nodes": 8},
                                       "workload": {"algorithm": "pods", "sizes": [64]}}))


def test_compare_runs_a_hybrid_scenario_file(tmp_path):
    path = tmp_path / "pods.yaml"
    path.write_text("fabric:\n  preset: cxl-pods\n  pods: {hosts: 8, network: eth-100g-roce}\n", encoding="utf-8")
    out = tmp_path / "cmp"
    parser = argparse.ArgumentParser()
    compare.register(parser.add_subparsers())
    args = parser.parse_args(["compare", "--fabric", "eth-100g-roce", "--fabric", str(path), "--nodes", "12,16",
                              "--sizes", "8,1MiB", "--engine", "analytic", "--output", str(out), "--quiet"])
    assert args.func(args) == 0
    with open(out / "compare.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["pods_latency_us"] for r in rows if r["nodes"] == "12"] == ["", ""]  # 12 hosts: no whole pods of 8
    for r in (r for r in rows if r["nodes"] == "16"):
        direct = simulate.run(simulate.resolved(simulate.scenario_from(str(path), {
            "fabric.nodes": 16, "workload.sizes": [int(r["size_bytes"])], "engine": "analytic"})[0]))
        assert float(r["pods_latency_us"]) == pytest.approx(direct[0]["latency_us"])
        assert float(r["ratio_eth-100g-roce/pods"]) == pytest.approx(
            float(r["eth-100g-roce_latency_us"]) / float(r["pods_latency_us"]))


def test_on_an_oversubscribed_fat_tree_the_form_is_noted_and_the_des_is_slower():
    fabric = {"preset": "cxl-pods", "nodes": 16, "topology": "fat_tree", "hosts_per_leaf": 4, "oversubscription": 4.0,
              "pods": {"hosts": 4}}
    workload = {"algorithm": "pods", "sizes": [64, 65536]}
    des = simulate.run(config.from_dict({"fabric": fabric, "workload": workload}))
    ana = simulate.run(config.from_dict({"engine": "analytic", "fabric": fabric, "workload": workload}))
    assert all("approximate: on a fat tree" in r["note"] for r in ana)
    assert des[0]["latency_us"] == pytest.approx(ana[0]["latency_us"])  # one message per link at a time
    assert des[1]["latency_us"] > 1.2 * ana[1]["latency_us"]  # four pods' exchanges share each leaf's uplink
