"""The pods broadcast's exact closed form: per-host pool and network ends, staggered pod allgathers, DES = form."""
from __future__ import annotations

import pytest

from cxlsim import config, simulate
from cxlsim.fabric.pod_setup import CXL_PODS
from cxlsim.hybrid_projection import PODS_RECORDS, form_note
from cxlsim.models.collectives import analytic, runner
from cxlsim.models.collectives.broadcast_ends import network_ends
from cxlsim.models.collectives.cxl_pool import cxl_pool_closed_form
from cxlsim.models.collectives.hierarchical_pods import PodFigures, pods_broadcast_cost
from cxlsim.models.collectives.pool_collective_forms import broadcast_ends
from cxlsim.models.collectives.registry import algorithm


def pods(nodes, hosts=4, **fabric):
    pods_keys = fabric.pop("pods", {})
    scenario = config.from_dict({"engine": "des", "fabric": {"preset": "cxl-pods", "nodes": nodes,
                                                             "pods": {"hosts": hosts, **pods_keys}, **fabric}})
    setup = CXL_PODS.elaborate(scenario.fabric)
    fig = PodFigures(setup.pool_figures(), analytic.CostModel.from_network(setup.network.network(), 65536),
                     setup.hosts, setup.pods, heads=len(setup.design[0]) if setup.design else 0)
    return setup, fig


def des_and_form(setup, fig, inter, size, root):
    algo, ctx = PODS_RECORDS["broadcast"], runner.Context(inter=inter, root=root)
    outcome = runner.run_algorithm(setup.new_transport(65536), algo, size, ctx)
    runner.verify("broadcast", setup.hosts * setup.pods, ctx, outcome.results)
    return outcome.latency_ns, algo.cost(fig, setup.hosts * setup.pods, size, ctx)


def test_the_form_is_the_latest_of_home_and_staggered_pod_ends():
    setup, fig = pods(16)  # 4 pods of 4
    s, root = 4096, 6      # host 2 of pod 1
    seg = s // 4
    pool = broadcast_ends(fig.pool, 4, s, 2)
    assert pool[2] < pool[0] == pool[1] == pool[3]  # the root ends its pool phase before its readers
    ends = network_ends("binomial", fig.network, 4, seg, 1)
    gather = cxl_pool_closed_form(fig.pool, 4, seg, fig.pool.coherence, starts=pool)
    expect = max(max(pool) + ends[0], max(ends[1:]) + gather)
    binomial = algorithm("broadcast", "binomial")
    assert pods_broadcast_cost(fig, s, root, binomial) == pytest.approx(expect)
    assert PODS_RECORDS["broadcast"].cost(fig, 16, s, runner.Context(inter="binomial", root=root)) == expect
    # the phases' sum, each taken to start together, is what the early root makes too slow or too fast
    together = max(pool) + max(ends) + cxl_pool_closed_form(fig.pool, 4, seg, fig.pool.coherence)
    assert together != pytest.approx(expect, rel=1e-3)


FABRICS = [{}, {"cxl": {"coherence": "flush"}}, {"pods": {"pool": "cxl2-pool"}}, {"pods": {"pool": "mhd3-pool"}},
           {"pods": {"pool": "mhd3-pool"}, "cxl": {"coherence": "flush"}}, {"pods": {"network": "ib-ndr"}}]


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("inter, nodes, root", [
    ("binomial", 8, 0), ("binomial", 12, 5), ("scatter_ring_allgather", 12, 0),
    ("scatter_recursive_doubling_allgather", 16, 9), ("knomial", 20, 13), ("linear", 16, 6),
    ("pipelined_chain", 12, 3)])
def test_des_equals_the_form_on_a_star(fabric, inter, nodes, root):
    setup, fig = pods(nodes, 4, **{k: dict(v) for k, v in fabric.items()})
    for size in (1, 64, 65536):
        assert form_note("broadcast", fig, size, True, inter) is None
        des, form = des_and_form(setup, fig, inter, size, root)
        assert des == pytest.approx(form, rel=1e-9)


@pytest.mark.parametrize("inter, nodes, root", [("binomial", 26, 0), ("scatter_ring_allgather", 39, 17),
                                                ("knomial", 39, 12)])
def test_des_equals_the_form_on_sparse_octopus_pods(inter, nodes, root):
    setup, fig = pods(nodes, 13, pods={"pool": "octopus4-pool"})
    assert fig.heads == 4
    for size in (1, 1000, 13 * 4096):
        des, form = des_and_form(setup, fig, inter, size, root)
        assert des == pytest.approx(form, rel=1e-9)


def test_a_network_algorithm_without_per_rank_ends_is_noted():
    _, fig = pods(16)
    assert form_note("broadcast", fig, 64, True, "binomial") is None
    assert "per-rank" in form_note("broadcast", fig, 64, True, "no_such_algorithm")
    assert "fat tree" in form_note("broadcast", fig, 64, False, "binomial")


def test_a_queued_hw_pod_is_within_the_stated_bound():
    base = {"fabric": {"preset": "cxl-pods", "nodes": 32, "pods": {"hosts": 16}},  # 16 x 12.3 GB/s > 126 GB/s
            "workload": {"collective": "broadcast", "algorithm": "pods", "sizes": [4096, 1 << 20], "root": 3}}
    ana = simulate.run(config.from_dict({**base, "engine": "analytic"}))
    des = simulate.run(config.from_dict({**base, "engine": "des"}))
    for a, d in zip(ana, des):
        assert "within 1%" in a["note"]
        assert d["latency_us"] == pytest.approx(a["latency_us"], rel=0.01)
    flush = {**base, "fabric": {**base["fabric"], "cxl": {"coherence": "flush"}}}
    assert "within" not in simulate.run(config.from_dict({**flush, "engine": "analytic"}))[1]["note"]
