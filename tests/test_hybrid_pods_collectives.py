"""Allreduce, broadcast and alltoall over pods (cxl-pods): DES = closed form, payloads, the selector, --stats.

The broadcast's per-host form has its own tests (tests/test_pods_broadcast_form.py)."""
from __future__ import annotations

import pytest

from cxlsim import config, simulate
from cxlsim.errors import InputError
from cxlsim.fabric import stats as fabric_stats
from cxlsim.fabric.pod_setup import CXL_PODS
from cxlsim.hybrid_projection import PODS_RECORDS, form_note, run_hybrid
from cxlsim.models.collectives import analytic, runner
from cxlsim.models.collectives.cxl_pool import cxl_pool_closed_form
from cxlsim.models.collectives.hierarchical_pods import PodFigures
from cxlsim.models.collectives.network_forms import network_closed_form
from cxlsim.models.collectives.pool_collective_forms import alltoall_cost, broadcast_cost, reduce_scatter_cost
from cxlsim.models.collectives.registry import algorithm


def pods(nodes=12, hosts=4, **fabric):
    pods_keys = fabric.pop("pods", {})
    scenario = config.from_dict({"engine": "des", "fabric": {"preset": "cxl-pods", "nodes": nodes,
                                                             "pods": {"hosts": hosts, **pods_keys}, **fabric}})
    setup = CXL_PODS.elaborate(scenario.fabric)
    fig = PodFigures(setup.pool_figures(), analytic.CostModel.from_network(setup.network.network(), 65536),
                     setup.hosts, setup.pods)
    return setup, fig


def des_and_form(collective, inter, setup, fig, size, root=0):
    algo, ctx = PODS_RECORDS[collective], runner.Context(inter=inter, root=root)
    outcome = runner.run_algorithm(setup.new_transport(65536), algo, size, ctx)
    runner.verify(collective, setup.hosts * setup.pods, ctx, outcome.results)
    return outcome.latency_ns, algo.cost(fig, setup.hosts * setup.pods, size, ctx)


FABRICS = [{}, {"cxl": {"coherence": "flush"}}, {"pods": {"pool": "mhd3-pool"}}, {"pods": {"network": "ib-ndr"}}]


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("collective, inter, nodes", [
    ("allreduce", "ring", 12), ("allreduce", "recursive_doubling", 16), ("allreduce", "rabenseifner", 16),
    ("alltoall", "pairwise", 12), ("alltoall", "bruck", 16), ("alltoall", "scattered", 12)])
def test_des_equals_the_form_on_an_uncongested_star(fabric, collective, inter, nodes):
    setup, fig = pods(nodes, 4, **{k: dict(v) for k, v in fabric.items()})
    for size in (64, 4096, 16384):
        assert form_note(collective, fig, size, True) is None
        des, form = des_and_form(collective, inter, setup, fig, size)
        assert des == pytest.approx(form, rel=1e-9)


def test_unaligned_allreduce_columns_are_within_the_stated_bound():
    setup, fig = pods(12, 4)
    assert "within 0.5%" in form_note("allreduce", fig, 1000, True)
    des, form = des_and_form("allreduce", "ring", setup, fig, 1000)
    assert des == pytest.approx(form, rel=5e-3)


def test_each_form_is_its_phases():
    setup, fig = pods(16, 4)
    q, s, ctx = 4, 8192, runner.Context(inter="ring")
    seg = s // q
    ring = algorithm("allreduce", "ring")
    expect = (reduce_scatter_cost(fig.pool, q, s) + network_closed_form(ring, fig.network, 4, seg, runner.Context())
              + cxl_pool_closed_form(fig.pool, q, seg, fig.pool.coherence))
    assert PODS_RECORDS["allreduce"].cost(fig, 16, s, ctx) == pytest.approx(expect)
    pairwise = algorithm("alltoall", "pairwise")
    expect = alltoall_cost(fig.pool, q, 4 * 100) + network_closed_form(pairwise, fig.network, 4, q * 100,
                                                                      runner.Context())
    assert PODS_RECORDS["alltoall"].cost(fig, 16, 100, runner.Context(inter="pairwise")) == pytest.approx(expect)


def test_one_pod_has_no_network_phase():
    setup, fig = pods(4, 4)
    for collective, size in (("allreduce", 4096), ("alltoall", 64), ("broadcast", 4096)):
        des, form = des_and_form(collective, "ring", setup, fig, size)  # the payloads are checked
        if collective == "broadcast":
            assert form == broadcast_cost(fig.pool, 4, size)
        assert des == pytest.approx(form, rel=1e-9)


def test_a_wrong_block_fails_the_payload_check():
    setup, _ = pods(8, 4)
    ctx = runner.Context(inter="pairwise")
    outcome = runner.run_algorithm(setup.new_transport(65536), PODS_RECORDS["alltoall"], 64, ctx)
    results = dict(outcome.results)
    results[3] = list(reversed(results[3]))
    with pytest.raises(AssertionError, match="rank 3"):
        runner.verify("alltoall", 8, ctx, results)


@pytest.mark.parametrize("collective", ["allreduce", "broadcast", "alltoall"])
def test_simulate_auto_picks_the_faster_form_and_the_des_agrees(collective):
    sizes = [8, 65536]
    base = {"fabric": {"preset": "cxl-pods", "nodes": 8, "pods": {"hosts": 4}},
            "workload": {"collective": collective, "sizes": sizes}}
    ana = simulate.run(config.from_dict({**base, "engine": "analytic"}))
    des = simulate.run(config.from_dict(base))
    assert [r["algorithm"] for r in des] == [r["algorithm"] for r in ana]
    assert ana[0]["algorithm"] == "pods" and "auto: pods" in ana[0]["note"]
    for a, d in zip(ana, des):
        assert d["latency_us"] == pytest.approx(a["latency_us"], rel=1e-9)
    forced = simulate.run(config.from_dict({**base, "engine": "analytic",
                                            "workload": {**base["workload"], "algorithm": "pods"}}))
    for row, auto in zip(forced, ana):
        assert row["algorithm"] == "pods" and row["latency_us"] >= auto["latency_us"] * (1 - 1e-12)


def test_the_broadcast_root_is_a_setting_of_broadcast_only():
    base = {"fabric": {"preset": "cxl-pods", "nodes": 8, "pods": {"hosts": 4}}}
    rows = simulate.run(config.from_dict({**base, "workload": {"collective": "broadcast", "root": 6,
                                                               "algorithm": "pods", "sizes": [64]}}))
    assert rows[0]["algorithm"] == "pods"  # the DES checked that every rank got root 6's data
    with pytest.raises(InputError, match="workload.root: applies to broadcast"):
        simulate.run(config.from_dict({**base, "workload": {"collective": "allreduce", "root": 1, "sizes": [64]}}))
    with pytest.raises(InputError, match="workload.root: expected a rank below P=8"):
        simulate.run(config.from_dict({**base, "workload": {"collective": "broadcast", "root": 8, "sizes": [64]}}))


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_stats_list_the_network_and_every_pod(coherence):
    scenario = config.from_dict({"engine": "des", "fabric": {"preset": "cxl-pods", "nodes": 8, "pods": {"hosts": 4},
                                                             "cxl": {"coherence": coherence}},
                                 "workload": {"collective": "allreduce", "algorithm": "pods", "sizes": [4096]}})
    setup = CXL_PODS.elaborate(scenario.fabric)
    stats = []
    run_hybrid(scenario, setup, stats=stats)
    (size, s), = stats
    names = [p.port for p in s.ports]
    assert size == 4096 and any(n.startswith("pod0.dev") for n in names) and any(n.startswith("pod1.host3")
                                                                                 for n in names)
    assert any(p.component == "NIC" and p.bytes == 4096 // 4 for p in s.ports)  # one block each way per host
    devices = [p for p in s.ports if p.component == "device"]
    assert s.pool.device_bytes == sum(p.bytes for p in devices) > 0
    assert (s.pool.bisnp is None) == (coherence == "flush")
    text = "\n".join(fabric_stats.summary(stats))
    assert "busiest port" in text and ("BISnp" in text)


def test_several_devices_are_noted_approximate_and_stay_close():
    setup, fig = pods(16, 8, pods={"pool": "mhd3-pool"}, cxl={"devices": 2})
    assert "approximate" in form_note("allreduce", fig, 64, True)  # 8 x 21.2 GB/s outrun one 126 GB/s device
    for size in (64, 16384):
        des, form = des_and_form("allreduce", "recursive_doubling", setup, fig, size)
        assert des == pytest.approx(form, rel=0.02)
