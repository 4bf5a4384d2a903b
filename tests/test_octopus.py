"""Switchless pools of multi-headed devices: dense (mhd2-pool, mhd3-pool) and sparse Octopus pods (octopus4-pool)."""
from __future__ import annotations

import dataclasses

import pytest

from cxlsim import config, simulate
from cxlsim.errors import InputError
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.fabric.octopus import FiniteField, design, pod_sizes
from cxlsim.fabric.pod_setup import CXL_PODS
from cxlsim.hybrid_projection import PODS_RECORDS, form_note, run_hybrid
from cxlsim.models.collectives import analytic, runner
from cxlsim.models.collectives.hierarchical_pods import PodFigures, sparse_allreduce_costs, sparse_allreduce_first
from cxlsim.models.collectives.octopus_pool import octopus_allgather_cost
from cxlsim.models.collectives.registry import algorithm


def test_a_load_crosses_the_host_port_and_one_link_only():
    for name, switched in (("mhd2-pool", "cxl2-pool"), ("mhd3-pool", "cxl3-pool")):
        pre, ref = get_cxl_preset(name), get_cxl_preset(switched)
        t = CXLPoolTransport(pre, 4, coherence=pre.coherence_modes[0])
        hp, link = pre.host_path.port_latency_ns, pre.link.traversal_ns
        assert t.path_ns == hp + link and t.load_ns == 2 * (hp + link) + pre.device.media_latency_ns == 145.0
        # the switch's figures cost a load 2 x (hop + link) on the switched preset
        assert ref.load_latency_ns(1) - t.load_ns == 2 * (ref.switch.hop_latency_ns + link)
        assert pre.load_latency_ns() == t.load_ns and t.figures().leaf_hosts == 0


@pytest.mark.parametrize("name, coherence", [("mhd2-pool", "flush"), ("mhd3-pool", "hw"), ("mhd3-pool", "flush")])
@pytest.mark.parametrize("hosts", [2, 5, 16])
def test_the_pool_allgather_des_equals_its_form_with_no_switch(name, coherence, hosts):
    pre = get_cxl_preset(name)
    algo = algorithm("allgather", "cxl_pool")
    for m in (8, 4096, 20000):
        t = CXLPoolTransport(pre, hosts, coherence=coherence)
        outcome = runner.run_algorithm(t, algo, m)
        runner.verify("allgather", hosts, runner.Context(), outcome.results)
        assert outcome.latency_ns == pytest.approx(algo.cost(t.figures(), hosts, m), rel=1e-9)


def test_heads_are_data_and_bound_the_hosts():
    pre = get_cxl_preset("mhd3-pool")
    assert pre.device.heads == 16 and pre.max_switch_levels == 0
    CXLPoolTransport(pre, 16)
    with pytest.raises(InputError, match="17 hosts need 17 heads, but the device has 16"):
        CXLPoolTransport(pre, 17)
    four = dataclasses.replace(pre, device=dataclasses.replace(pre.device, heads=4))
    CXLPoolTransport(four, 4)
    with pytest.raises(InputError, match="device has 4"):
        CXLPoolTransport(four, 5)
    with pytest.raises(InputError, match="has no switch"):
        CXLPoolTransport(pre, 4, switch_levels=1)
    with pytest.raises(InputError, match="integer >= 0"):
        get_cxl_preset("cxl3-pool").check("hw", -1)


def test_a_scenario_on_a_switchless_preset():
    rows = simulate.run(config.from_dict({"engine": "des", "fabric": {"preset": "mhd3-pool", "nodes": 8},
                                          "workload": {"sizes": [64, 4096]}}))
    ana = simulate.run(config.from_dict({"engine": "analytic", "fabric": {"preset": "mhd3-pool", "nodes": 8},
                                          "workload": {"sizes": [64, 4096]}}))
    assert [r["latency_us"] for r in rows] == pytest.approx([r["latency_us"] for r in ana], rel=1e-9)
    with pytest.raises(InputError, match="fabric.nodes: 17 on no switch"):
        simulate.run(config.from_dict({"fabric": {"preset": "mhd3-pool", "nodes": 17}, "workload": {"sizes": [64]}}))
    with pytest.raises(InputError, match="fabric.cxl.switch_levels: mhd3-pool has no switch"):
        simulate.run(config.from_dict({"fabric": {"preset": "mhd3-pool", "nodes": 4, "cxl": {"switch_levels": 1}},
                                       "workload": {"sizes": [64]}}))


def _pods(pool, nodes=12, hosts=4):
    scenario = config.from_dict({"engine": "des", "fabric": {"preset": "cxl-pods", "nodes": nodes,
                                                             "pods": {"hosts": hosts, "pool": pool}}})
    return scenario, CXL_PODS.elaborate(scenario.fabric)


@pytest.mark.parametrize("pool", ["mhd2-pool", "mhd3-pool"])
def test_switchless_pods_des_equals_the_form(pool):
    _, setup = _pods(pool)
    assert setup.pool.switch_levels == 0 and "no switch (16-headed devices)" in setup.describe(12)
    assert "fabric.pods.kind" not in setup.written_out()
    fig = PodFigures(setup.pool_figures(), analytic.CostModel.from_network(setup.network.network(), 65536),
                     setup.hosts, setup.pods)
    algo, ctx = algorithm("allgather", "pods"), runner.Context(inter="ring")
    for m in (1, 1000, 8192):
        outcome = runner.run_algorithm(setup.new_transport(65536), algo, m, ctx)
        runner.verify("allgather", 12, ctx, outcome.results)
        assert outcome.latency_ns == pytest.approx(algo.cost(fig, 12, m, ctx), rel=1e-9)


def test_a_switchless_pod_has_at_most_a_device_s_heads_of_hosts():
    with pytest.raises(InputError, match="fabric.pods.hosts: 17 hosts on mhd3-pool.*use at most 16 hosts"):
        _pods("mhd3-pool", nodes=34, hosts=17)


def test_switchless_pods_rerun_from_their_written_out_figures():
    scenario, _ = _pods("mhd3-pool", nodes=8, hosts=4)
    scenario = simulate.resolved(dataclasses.replace(scenario, engine="analytic"))
    rows = simulate.run(scenario)
    again = simulate.run(config.from_dict(config.to_dict(scenario)))
    assert [r["latency_us"] for r in again] == [r["latency_us"] for r in rows]


# ---------------------------------------------------------------- sparse Octopus pods

@pytest.mark.parametrize("hosts, heads, devices", [(7, 3, 7), (13, 4, 13), (9, 3, 12), (25, 5, 30), (6, 2, 15),
                                                    (16, 4, 20), (21, 5, 21), (64, 8, 72)])
def test_every_two_hosts_share_exactly_one_device(hosts, heads, devices):
    found = design(hosts, heads)
    assert len(found) == devices and all(len(d) == heads for d in found)
    for a in range(hosts):
        for b in range(a + 1, hosts):
            assert sum(a in d and b in d for d in found) == 1
    ports = {h: sum(h in d for d in found) for h in range(hosts)}
    assert set(ports.values()) == {(hosts - 1) // (heads - 1)}  # X links per host


def test_a_pod_size_without_a_construction_names_the_ones_there_are():
    assert pod_sizes(4) == [13, 16] and pod_sizes(3) == [7, 9] and pod_sizes(6) == [31] and pod_sizes(7) == [49]
    with pytest.raises(InputError, match="with 4 heads use 13, 16 hosts"):
        design(15, 4)
    with pytest.raises(InputError, match="fabric.pods.hosts: 15 hosts on octopus4-pool.*use 13, 16 hosts"):
        _pods("octopus4-pool", nodes=30, hosts=15)


def test_gf4_is_a_field():
    f = FiniteField(2, 2)  # the 16-host pod on 4-headed devices is the affine plane over GF(4)
    for a in range(1, 4):
        assert sorted(f.mul(a, b) for b in range(1, 4)) == [1, 2, 3]  # every nonzero element has an inverse
        assert f.add(a, a) == 0  # characteristic 2
    assert all(f.mul(a, f.add(b, c)) == f.add(f.mul(a, b), f.mul(a, c)) for a in range(4) for b in range(4)
               for c in range(4))


def test_a_16_host_pod_of_4_headed_devices_equals_its_form():
    _, setup = _pods("octopus4-pool", nodes=32, hosts=16)
    assert len(setup.design) == 20 and "sparse pod of 20 devices" in setup.describe(32)
    fig = PodFigures(setup.pool_figures(), analytic.CostModel.from_network(setup.network.network(), 65536),
                     setup.hosts, setup.pods, heads=4)
    algo, ctx = algorithm("allgather", "pods"), runner.Context(inter="ring")
    for m in (8, 5000):
        outcome = runner.run_algorithm(setup.new_transport(65536), algo, m, ctx)
        runner.verify("allgather", 32, ctx, outcome.results)
        assert outcome.latency_ns == pytest.approx(algo.cost(fig, 32, m, ctx), rel=1e-9)


@pytest.mark.parametrize("inter", ["ring", "recursive_doubling"])
def test_sparse_pods_allgather_des_equals_the_form(inter):
    nodes = 26 if inter == "ring" else 52  # 2 or 4 pods of 13
    _, setup = _pods("octopus4-pool", nodes=nodes, hosts=13)
    assert len(setup.design) == 13 and "sparse pod of 13 devices" in setup.describe(nodes)
    fig = PodFigures(setup.pool_figures(), analytic.CostModel.from_network(setup.network.network(), 65536),
                     setup.hosts, setup.pods, heads=4)
    algo, ctx = algorithm("allgather", "pods"), runner.Context(inter=inter)
    for m in (8, 5000):
        outcome = runner.run_algorithm(setup.new_transport(65536), algo, m, ctx)
        runner.verify("allgather", nodes, ctx, outcome.results)
        assert outcome.latency_ns == pytest.approx(algo.cost(fig, nodes, m, ctx), rel=1e-9)
    # the pod phase is the pool allgather of one 4-host device, n x m bytes
    assert octopus_allgather_cost(fig.pool, 4, 2 * 64) == pytest.approx(
        algorithm("allgather", "cxl_pool").cost(fig.pool, 4, 128))


def test_sparse_pods_count_each_device():
    base = {"fabric": {"preset": "cxl-pods", "nodes": 26, "pods": {"hosts": 13, "pool": "octopus4-pool"}}}
    with pytest.raises(InputError, match="fabric.cxl.devices"):
        simulate.run(config.from_dict({"fabric": {**base["fabric"], "cxl": {"devices": 2}},
                                       "workload": {"sizes": [64]}}))
    scenario = config.from_dict({**base, "engine": "des", "workload": {"algorithm": "pods", "sizes": [64]}})
    stats = []
    run_hybrid(scenario, CXL_PODS.elaborate(scenario.fabric), stats=stats)
    (_, s), = stats
    devices = [p for p in s.ports if p.component == "device"]
    assert len(devices) == 2 * 13 and devices[0].port == "pod0.mhd0.dev0"
    # every host writes its n x m = 128 B set to each of its 4 devices and reads 3 sets from each
    assert sum(p.bytes for p in devices) == s.pool.device_bytes
    assert s.pool.bisnp is None  # flush: no snoop filter


def _sparse(media_bw=None, nodes=26):
    """Pods of 13 on octopus4-pool (media 63 GB/s: 4 hosts' 21.2 GB/s each outrun it), or with `media_bw`."""
    _, setup = _pods("octopus4-pool", nodes=nodes, hosts=13)
    if media_bw is not None:
        pre = setup.pool.preset
        pre = dataclasses.replace(pre, device=dataclasses.replace(pre.device, media_bw_bytes_per_ns=media_bw))
        setup = dataclasses.replace(setup, pool=dataclasses.replace(setup.pool, preset=pre))
    fig = PodFigures(setup.pool_figures(), analytic.CostModel.from_network(setup.network.network(), 65536),
                     setup.hosts, setup.pods, heads=4)
    return setup, fig


@pytest.mark.parametrize("collective, inter", [("allreduce", "ring"), ("alltoall", "pairwise"),
                                               ("broadcast", "binomial")])
@pytest.mark.parametrize("media_bw", [None, 200.0])
def test_sparse_pods_run_every_collective(collective, inter, media_bw):
    setup, fig = _sparse(media_bw)
    algo = PODS_RECORDS[collective]
    for size, root in ((64 * 13, 0), (4096 * 13, 17)):  # whole lines per host
        ctx = runner.Context(inter=inter, root=root if collective == "broadcast" else 0)
        note = form_note(collective, fig, size, True)
        exact = media_bw is not None or collective == "broadcast"  # the flush broadcast's forms hold queued
        assert (note is None) == exact or (collective == "allreduce" and note is None)
        outcome = runner.run_algorithm(setup.new_transport(65536), algo, size, ctx)
        runner.verify(collective, 26, ctx, outcome.results)
        bound = 1e-9 if note is None else 0.05
        assert outcome.latency_ns == pytest.approx(algo.cost(fig, 26, size, ctx), rel=bound)


def test_a_sparse_allreduce_starts_with_the_cheaper_of_two_phases():
    setup, fig = _sparse(nodes=13)
    for s in (64, 4096, 1 << 20):
        costs = sparse_allreduce_costs(fig.pool, 13, s, 4)
        assert costs["allgather"] == pytest.approx(octopus_allgather_cost(fig.pool, 4, s)
                                                   + 12 * s / fig.pool.reduce_bw_bytes_per_ns)
        first = sparse_allreduce_first(fig.pool, 13, s, 4)
        assert costs[first] == min(costs.values())
        expect = costs[first] + octopus_allgather_cost(fig.pool, 4, -(-s // 13))
        assert PODS_RECORDS["allreduce"].cost(fig, 13, s, runner.Context()) == pytest.approx(expect)
    assert sparse_allreduce_first(fig.pool, 13, 1 << 20, 4) == "alltoall"  # 13 whole vectors cost too much


@pytest.mark.parametrize("hosts, heads", [(7, 3), (9, 3), (6, 2)])
def test_other_designs_run_and_equal_their_forms(hosts, heads):
    _, dense = _pods("mhd3-pool", nodes=2 * hosts, hosts=hosts)  # the network of 2 pods; its pool made sparse
    pre = dense.pool.preset
    pre = dataclasses.replace(pre, device=dataclasses.replace(pre.device, heads=heads))
    setup = dataclasses.replace(dense, pool=dataclasses.replace(dense.pool, preset=pre), design=design(hosts, heads))
    fig = PodFigures(setup.pool_figures(), analytic.CostModel.from_network(setup.network.network(), 65536),
                     hosts, 2, heads=heads)
    assert setup.pool_figures().leaf_hosts == 0
    for collective in ("allgather", "allreduce"):
        algo, ctx = PODS_RECORDS[collective], runner.Context(inter="ring")
        size = 64 * hosts
        outcome = runner.run_algorithm(setup.new_transport(65536), algo, size, ctx)
        runner.verify(collective, 2 * hosts, ctx, outcome.results)
        if form_note(collective, fig, size, True) is None:
            assert outcome.latency_ns == pytest.approx(algo.cost(fig, 2 * hosts, size, ctx), rel=1e-9)
