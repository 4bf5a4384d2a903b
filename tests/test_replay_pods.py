"""Replay on hybrid pod fabrics: messages inside a pod go through its pool, between pods over the network;
allgather and barrier run the pods allgather and equal its closed form; the fabric is refused where it cannot run."""
from __future__ import annotations

import os

import pytest

from cxlsim import simulate
from cxlsim.errors import InputError
from cxlsim.models.collectives import analytic, runner
from cxlsim.models.collectives.hierarchical_pods import PodFigures
from cxlsim.models.collectives.registry import algorithm
from cxlsim.replay import engine, fabrics, simgrid
from cxlsim.replay.pods import PodMessages
from cxlsim.replay.pool_messages import message_ns


def write_trace(directory, p, lines_of) -> str:
    os.makedirs(directory, exist_ok=True)
    for r in range(p):
        with open(os.path.join(directory, f"t_rank-{r + 1}.txt"), "w") as fh:
            fh.write("".join(f"{r} {line}\n" for line in ["init", *lines_of(r), "finalize"]))
    return str(directory)


def pods_yaml(tmp_path, pods, hosts, network="ib-hdr", pool="cxl3-pool") -> str:
    path = tmp_path / f"pods-{pods}x{hosts}-{pool}.yaml"
    path.write_text(f"fabric:\n  preset: cxl-pods\n  nodes: {pods * hosts}\n"
                    f"  pods: {{pool: {pool}, hosts: {hosts}, network: {network}}}\n")
    return str(path)


def setup_of(spec):
    return simulate.elaborate(simulate.scenario_from(spec, {})[0])[1]


@pytest.mark.parametrize("pods, hosts", [(1, 4), (2, 2), (2, 4), (4, 2)])
@pytest.mark.parametrize("pool", ["cxl3-pool", "cxl2-pool"])
def test_a_traced_allgather_and_barrier_equal_the_pods_closed_form(tmp_path, pods, hosts, pool):
    spec = pods_yaml(tmp_path, pods, hosts, pool=pool)
    setup = setup_of(spec)
    cm = analytic.CostModel.from_network(setup.network.network(), simulate.scenario_from(spec, {})[0].workload.chunk_bytes)
    fig = PodFigures(setup.pool_figures(), cm, hosts, pods)
    record = algorithm("allgather", "pods")
    p = pods * hosts
    for action, block in (("allgather 512 512 0 0", 4096), ("barrier", 0)):
        path = write_trace(tmp_path / f"{action.split()[0]}-{pods}-{hosts}", p, lambda r, a=action: [a])
        trace = simgrid.read(path, 1e9)
        timeline = engine.replay(trace, fabrics.resolve(spec, p).make())
        assert timeline.algorithms == {action.split()[0]: ["pods"]}
        inter = [n for n in timeline.notes if "between pods" in n]
        name = inter[0].rsplit(": ", 1)[1].split(" ")[0] if inter else "ring"
        expect = record.cost(fig, p, block, runner.Context(inter=name))
        assert timeline.total_ns == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("pool", ["cxl3-pool", "cxl2-pool"])
def test_a_message_inside_a_pod_uses_its_pool_and_between_pods_the_network(tmp_path, pool):
    spec = pods_yaml(tmp_path, 2, 2, pool=pool)
    setup = setup_of(spec)
    sent, received = message_ns(setup.pool_figures(), 1000)

    def one_message(src, dst):
        def lines(r):
            return ["send %d 7 1000" % dst] if r == src else ["recv %d 7 1000" % src] if r == dst else []
        path = write_trace(tmp_path / f"m{src}{dst}", 4, lines)
        return engine.replay(simgrid.read(path, 1e9), fabrics.resolve(spec, 4).make())

    inside = one_message(0, 1)
    assert inside.finish_ns[0] == pytest.approx(sent, rel=1e-12)
    assert inside.finish_ns[1] == pytest.approx(received, rel=1e-12)
    between = one_message(0, 2)
    path = write_trace(tmp_path / "net", 4, lambda r: ["send 2 7 1000"] if r == 0 else ["recv 0 7 1000"] if r == 2 else [])
    network = engine.replay(simgrid.read(path, 1e9), fabrics.resolve("ib-hdr", 4).make())
    assert between.finish_ns == network.finish_ns


@pytest.mark.parametrize("collective, name, size", [
    ("allreduce", "ring", 4096),
    ("allreduce", "recursive_doubling", 300_000),
    ("broadcast", "binomial", 100),
    ("gather", "binomial", 70_000),
])
def test_network_collectives_run_over_pod_messages_with_correct_labels(tmp_path, collective, name, size):
    pods = fabrics.resolve(pods_yaml(tmp_path, 2, 2), 4).make()
    ctx = runner.Context(root=1)
    outcome = runner.run(PodMessages(pods), collective, name, size, ctx)
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


def test_pods_refuse_a_trace_of_another_size_and_ranks_per_node(tmp_path):
    spec = pods_yaml(tmp_path, 2, 2)
    with pytest.raises(InputError, match=r"the pod fabric has 4 hosts .* the trace has 6 ranks"):
        fabrics.resolve(spec, 6)
    with pytest.raises(InputError, match=r"--ranks-per-node .*cxl-pods does not use it"):
        fabrics.resolve(spec, 4, ranks_per_node=2)
    placement = tmp_path / "hosts.txt"
    placement.write_text("1\n0\n2\n3\n")
    with pytest.raises(InputError, match=r"a hybrid pod fabric runs one rank per host; --placement"):
        fabrics.resolve(spec, 4, placement=str(placement))


@pytest.mark.parametrize("action, collective, size", [
    ("allreduce 1024 0 0", "allreduce", 8192),        # 1024 doubles: SimGrid's default type after `init` is bytes
    ("alltoall 128 128 0 0", "alltoall", 1024),
])
def test_a_traced_allreduce_and_alltoall_equal_the_pods_closed_form(tmp_path, action, collective, size):
    spec = pods_yaml(tmp_path, 2, 4)
    setup = setup_of(spec)
    cm = analytic.CostModel.from_network(setup.network.network(), simulate.scenario_from(spec, {})[0].workload.chunk_bytes)
    fig = PodFigures(setup.pool_figures(), cm, 4, 2)
    path = write_trace(tmp_path / collective, 8, lambda r, a=action: [a])
    timeline = engine.replay(simgrid.read(path, 1e9), fabrics.resolve(spec, 8).make())
    kind = action.split()[0]
    assert timeline.algorithms == {kind: ["pods"]}
    inter = [n for n in timeline.notes if "between pods" in n][0].rsplit(": ", 1)[1].split(" ")[0]
    from cxlsim.models.collectives import registry
    from cxlsim.models.collectives.hierarchical_pods import pods_algorithms

    record = {a.collective: a for a in pods_algorithms(registry.lookup)}[collective]
    expect = record.cost(fig, 8, size, runner.Context(inter=inter))
    assert timeline.total_ns == pytest.approx(expect, rel=1e-9)


@pytest.mark.parametrize("action", ["allreduce 96 0 0", "bcast 100 5 0", "alltoall 16 16 0 0", "allgather 8 8 0 0"])
def test_the_pods_plans_deliver_the_right_labels(tmp_path, action):
    from cxlsim.replay.pods import pods_plan
    from cxlsim.replay.trace import COLLECTIVES

    path = write_trace(tmp_path / "t", 8, lambda r, a=action: [a])
    call = [c for c in simgrid.read(path, 1e9).ranks[0] if c.kind in COLLECTIVES][0]
    pods = fabrics.resolve(pods_yaml(tmp_path, 2, 4), 8).make()
    this = pods_plan(call, 2, 4, "mpich", runner.Context())
    results = pods.run({r: this.run(pods.endpoint(r), 10000) for r in range(8)})
    runner.verify(this.pods_collective, 8, runner.Context(root=call.root, elements=8), results)
