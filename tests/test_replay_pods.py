"""Replay on hybrid pod fabrics: messages inside a pod go through its pool, between pods over the network;
allgather and barrier run the pods allgather and equal its closed form; the fabric is refused where it cannot run."""
from __future__ import annotations


import pytest

from cxlsim import simulate
from cxlsim.errors import InputError
from cxlsim.models.collectives import analytic, runner
from cxlsim.replay import engine, fabrics, simgrid
from cxlsim.replay.pods import PodMessages
from cxlsim.replay.pool_messages import message_ns


def pods_yaml(tmp_path, pods, hosts, network="ib-hdr", pool="cxl3-pool") -> str:
    path = tmp_path / f"pods-{pods}x{hosts}-{pool}.yaml"
    path.write_text(f"fabric:\n  preset: cxl-pods\n  nodes: {pods * hosts}\n"
                    f"  pods: {{pool: {pool}, hosts: {hosts}, network: {network}}}\n")
    return str(path)


def setup_of(spec):
    return simulate.elaborate(simulate.scenario_from(spec, {})[0])[1]


def expected_ns(call, transport, fig):
    """(the plan's class name, its closed form, the other choice's form) for a traced collective on pods."""
    from cxlsim.models.collectives import registry
    from cxlsim.replay.pods import inter_algorithm, pods_plan

    this = pods_plan(call, transport.pods, transport.hosts, "mpich", runner.Context(), fig)
    records = {c: registry.algorithm(c, "pods") for c in ("allgather", "allreduce", "broadcast", "alltoall")}
    collective = {"barrier": "allgather", "bcast": "broadcast"}.get(call.kind, call.kind)
    size = 0 if call.kind == "barrier" else call.size_bytes
    inter = inter_algorithm(collective, size, transport.pods, transport.hosts, "mpich")[0]
    pods_ns = records[collective].cost(fig, transport.size, size, runner.Context(root=call.root, inter=inter))
    from cxlsim.replay.collectives import plan
    net = plan(call, transport.size, "mpich", runner.Context(), False)
    net_ns = analytic.cost(net.collective, net.algorithm, transport.size, net.size_bytes, fig.network, net.ctx)[0]
    chosen = type(this).__name__
    return chosen, (pods_ns if chosen == "PodsPlan" else net_ns), (net_ns if chosen == "PodsPlan" else pods_ns)


@pytest.mark.parametrize("pods, hosts", [(1, 4), (2, 2), (2, 4), (4, 2)])
@pytest.mark.parametrize("pool", ["cxl3-pool", "cxl2-pool"])
@pytest.mark.parametrize("network", ["ib-hdr", "eth-100g-tcp"])
def test_a_traced_allgather_and_barrier_take_the_cheaper_form_and_equal_it(tmp_path, write_trace, pods, hosts, pool,
                                                                           network):
    from cxlsim.replay.pods import pod_figures

    spec = pods_yaml(tmp_path, pods, hosts, network=network, pool=pool)
    p = pods * hosts
    for action in ("allgather 512 512 0 0", "barrier"):
        path = write_trace(tmp_path / f"{action.split()[0]}-{pods}-{hosts}", lambda r, a=action: [a], p)
        trace = simgrid.read(path, 1e9)
        transport = fabrics.resolve(spec, p).make()
        chosen, form, other = expected_ns(trace.ranks[0][0], transport, pod_figures(transport))
        assert form <= other
        timeline = engine.replay(trace, transport)
        assert (timeline.algorithms[action.split()[0]] == ["pods"]) == (chosen == "PodsPlan")
        assert timeline.total_ns == pytest.approx(form, rel=1e-12)


@pytest.mark.parametrize("pool", ["cxl3-pool", "cxl2-pool"])
@pytest.mark.parametrize("network", ["ib-hdr", "eth-100g-roce", "eth-100g-tcp"])
@pytest.mark.parametrize("size", [1000, 65536])
def test_a_message_inside_a_pod_takes_the_cheaper_way_and_between_pods_the_network(tmp_path, write_trace, pool, network,
                                                                                  size):
    from cxlsim.replay.pod_routes import POOL, MessageRoute
    from cxlsim.replay.pods import pod_figures

    spec = pods_yaml(tmp_path, 2, 2, network=network, pool=pool)
    fig = pod_figures(fabrics.resolve(spec, 4).make())
    sent, received = message_ns(fig.pool, size)
    route = MessageRoute(fig.pool, fig.network)

    def one_message(src, dst, fabric):
        def lines(r):
            return [f"send {dst} 7 {size}"] if r == src else [f"recv {src} 7 {size}"] if r == dst else []
        path = write_trace(tmp_path / f"m{src}{dst}-{fabric}", lines, 4)
        return engine.replay(simgrid.read(path, 1e9), fabrics.resolve(fabric, 4).make())

    inside = one_message(0, 1, spec)
    network_alone = one_message(0, 1, network)
    assert network_alone.finish_ns[1] == pytest.approx(route.network_ns(size), rel=1e-12)
    if route.choose(size) == POOL:
        assert route.pool_ns(size) <= route.network_ns(size)
        assert inside.finish_ns[0] == pytest.approx(sent, rel=1e-12)
        assert inside.finish_ns[1] == pytest.approx(received, rel=1e-12)
    else:
        assert route.pool_ns(size) > route.network_ns(size)
        assert inside.finish_ns == network_alone.finish_ns
    assert any(size_note in " ".join(inside.notes) for size_note in (f"{size} B pool", f"{size} B network"))
    between = one_message(0, 2, spec)
    assert between.finish_ns == one_message(0, 2, network).finish_ns


def test_both_ways_occur_inside_a_pod_by_size(tmp_path):
    from cxlsim.replay.pod_routes import MessageRoute
    from cxlsim.replay.pods import pod_figures

    fig = pod_figures(fabrics.resolve(pods_yaml(tmp_path, 2, 2, network="eth-100g-roce"), 4).make())
    route = MessageRoute(fig.pool, fig.network)
    assert [route.choose(s) for s in (8, 1000, 65536, 1 << 20)] == ["pool", "pool", "network", "network"]
    assert "8 B pool" in route.note() and "65536 B network" in route.note()


@pytest.mark.parametrize("collective, name, size", [
    ("allreduce", "ring", 4096),
    ("allreduce", "recursive_doubling", 300_000),
    ("broadcast", "binomial", 100),
    ("gather", "binomial", 70_000),
])
@pytest.mark.parametrize("routed", [False, True])
def test_network_collectives_run_over_pod_messages_with_correct_labels(tmp_path, collective, name, size, routed):
    from cxlsim.replay.pod_routes import MessageRoute
    from cxlsim.replay.pods import pod_figures

    pods = fabrics.resolve(pods_yaml(tmp_path, 2, 2, network="eth-100g-roce"), 4).make()
    fig = pod_figures(pods)
    route = MessageRoute(fig.pool, fig.network) if routed else None  # RoCE: small messages pool, large network
    ctx = runner.Context(root=1)
    outcome = runner.run(PodMessages(pods, route=route), collective, name, size, ctx)
    runner.verify(collective, 4, ctx, outcome.results)


def test_a_real_trace_replays_on_pods_and_the_command_takes_the_preset(tmp_path, capsys):
    from cxlsim.replay.generate import main as generate

    generate(["cg", str(tmp_path / "cg"), "--ranks", "16", "--iterations", "2"])
    index = str(tmp_path / "cg" / "cg.txt")
    from cxlsim.cli import main

    assert main(["replay", index, "--fabric", "ib-hdr", "--fabric", "cxl-pods", "--no-plots",
                 "--output", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr().out
    assert "cxl-pods" in out and "1 pods x 16 hosts" in out


def test_pods_refuse_a_trace_of_another_size_ranks_per_node_and_shared_hosts(tmp_path):
    spec = pods_yaml(tmp_path, 2, 2)
    with pytest.raises(InputError, match=r"the pod fabric has 4 hosts .* the trace has 6 ranks"):
        fabrics.resolve(spec, 6)
    with pytest.raises(InputError, match=r"--ranks-per-node 2: a pool or pod fabric of 4 hosts runs 4 x 2 = 8 ranks, "
                                         r"the trace has 6"):
        fabrics.resolve(spec, 6, ranks_per_node=2)
    placement = tmp_path / "hosts.txt"
    placement.write_text("1\n0\n1\n3\n")
    with pytest.raises(InputError, match=r"--placement .*hosts.txt: ranks 0 and 2 are both on host 1; this fabric "
                                         r"runs one rank per host"):
        fabrics.resolve(spec, 4, placement=str(placement))


@pytest.mark.parametrize("network", ["ib-hdr", "eth-100g-tcp"])
@pytest.mark.parametrize("action", ["allreduce 1 0 0", "allreduce 1024 0 0", "alltoall 128 128 0 0"])
def test_a_traced_allreduce_and_alltoall_take_the_cheaper_form_and_equal_it(tmp_path, write_trace, network, action):
    from cxlsim.replay.pods import pod_figures

    spec = pods_yaml(tmp_path, 2, 4, network=network)
    trace = simgrid.read(write_trace(tmp_path / "t", lambda r, a=action: [a], 8), 1e9)
    transport = fabrics.resolve(spec, 8).make()
    chosen, form, other = expected_ns(trace.ranks[0][0], transport, pod_figures(transport))
    assert form <= other
    timeline = engine.replay(trace, transport)
    assert timeline.total_ns == pytest.approx(form, rel=1e-9)


def test_both_choices_occur_and_the_note_gives_both_forms(tmp_path, write_trace):
    from cxlsim.replay.pods import pod_figures

    seen = {}
    for network in ("ib-hdr", "eth-100g-tcp"):
        for action in ("allreduce 1 0 0", "allgather 512 512 0 0", "alltoall 128 128 0 0"):
            trace = simgrid.read(write_trace(tmp_path / f"{network}-{action[:5]}", lambda r, a=action: [a], 8), 1e9)
            transport = fabrics.resolve(pods_yaml(tmp_path, 2, 4, network=network), 8).make()
            seen.setdefault(expected_ns(trace.ranks[0][0], transport, pod_figures(transport))[0], []).append(action)
            timeline = engine.replay(trace, transport)
            if timeline.algorithms.get(action.split()[0]) != ["pods"]:
                assert any("on the network alone" in n and "the pods algorithm's" in n for n in timeline.notes)
    assert set(seen) == {"PodsPlan", "NetworkPlan"}, seen


@pytest.mark.parametrize("action", ["allreduce 96 0 0", "bcast 100 5 0", "alltoall 16 16 0 0", "allgather 8 8 0 0"])
def test_the_pods_plans_deliver_the_right_labels(tmp_path, write_trace, action):
    from cxlsim.replay.pods import PodsPlan, inter_algorithm
    from cxlsim.replay.trace import COLLECTIVES

    path = write_trace(tmp_path / "t", lambda r, a=action: [a], 8)
    call = [c for c in simgrid.read(path, 1e9).ranks[0] if c.kind in COLLECTIVES][0]
    pods = fabrics.resolve(pods_yaml(tmp_path, 2, 4), 8).make()
    collective = {"bcast": "broadcast"}.get(call.kind, call.kind)
    inter = inter_algorithm(collective, call.size_bytes, 2, 4, "mpich")[0]
    this = PodsPlan(call.kind, collective, "pods", call.size_bytes, runner.Context(root=call.root, inter=inter), "",
                    on_pool=True, pods_collective=collective)
    results = pods.run({r: this.run(pods.endpoint(r), 10000) for r in range(8)})
    runner.verify(this.pods_collective, 8, runner.Context(root=call.root, elements=8), results)
