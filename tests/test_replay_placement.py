"""`--placement` on pool and pod fabrics: trace ranks run on the hosts it names; on pods it decides which ranks
share a pod, so which messages go through a pod's pool and which over the network; messages inside a pod keep
MPI's order whichever way each goes."""
from __future__ import annotations


import pytest

from cxlsim.cli import main
from cxlsim.coherence import PoolEvent
from cxlsim.errors import InputError
from cxlsim.replay import engine, fabrics, simgrid
from cxlsim.replay.pod_routes import POOL, MessageRoute
from cxlsim.replay.pods import PodMessages, pod_figures
from cxlsim.replay.pool_messages import message_ns

SIZE = 1000


def pods_yaml(tmp_path, pods, hosts, network="ib-hdr") -> str:
    path = tmp_path / f"pods-{pods}x{hosts}-{network}.yaml"
    path.write_text(f"fabric:\n  preset: cxl-pods\n  nodes: {pods * hosts}\n"
                    f"  pods: {{pool: cxl3-pool, hosts: {hosts}, network: {network}}}\n")
    return str(path)


def neighbours(write_trace, tmp_path, name):
    """Ranks 0 -> 1 and 2 -> 3 each send one message of SIZE bytes (the pairs are neighbours)."""
    def lines(r):
        return [f"send {r + 1} 7 {SIZE}"] if r % 2 == 0 else [f"recv {r - 1} 7 {SIZE}"]
    return simgrid.read(write_trace(tmp_path / name, lines, 4), 1e9)


@pytest.mark.parametrize("network", ["eth-100g-tcp", "eth-100g-roce"])
def test_neighbours_in_one_pod_beat_neighbours_split_by_the_analytic_amount(tmp_path, write_trace, network):
    spec = pods_yaml(tmp_path, 2, 2, network=network)
    split = tmp_path / "split.txt"
    split.write_text("0\n2\n1\n3\n")  # rank 1 on host 2 (pod 1), rank 2 on host 1 (pod 0)
    trace = neighbours(write_trace, tmp_path, "pairs")
    together_fab, split_fab = fabrics.resolve(spec, 4), fabrics.resolve(spec, 4, placement=str(split))
    assert split_fab.at == (0, 2, 1, 3) and together_fab.at == (0, 1, 2, 3)
    fig = pod_figures(together_fab.make())
    route = MessageRoute(fig.pool, fig.network)
    assert route.choose(SIZE) == POOL  # inside a pod the pool is the cheaper way at this size
    together = engine.replay(trace, together_fab.make(), at=together_fab.at)
    apart = engine.replay(trace, split_fab.make(), at=split_fab.at)
    pool_ns, network_ns = message_ns(fig.pool, SIZE)[1], fig.network.T(SIZE)
    assert together.total_ns == pytest.approx(pool_ns, rel=1e-12)
    assert apart.total_ns == pytest.approx(network_ns, rel=1e-12)  # a star: the two messages share no link
    assert apart.total_ns - together.total_ns == pytest.approx(network_ns - pool_ns, rel=1e-9)
    assert together.total_ns < apart.total_ns
    # the ranks stay trace ranks in the timeline: rank 1's receive depends on rank 0
    assert apart.segments[1][-1][3] == 0


def test_on_a_pool_each_rank_runs_on_the_host_the_placement_names(tmp_path, write_trace):
    placement = tmp_path / "hosts.txt"
    placement.write_text("# trace rank -> pool host\n2\n0\n3\n1\n")
    fab = fabrics.resolve("cxl3-pool", 4, placement=str(placement))
    assert fab.at == (2, 0, 3, 1) and "placement hosts.txt" in fab.describe
    trace = neighbours(write_trace, tmp_path, "pairs")
    transport = fab.make()
    log = transport.enable_log()
    placed = engine.replay(trace, transport, at=fab.at)
    writers = {rank for rank, op, _, _ in log if op == PoolEvent.WRITE}
    readers = {rank for rank, op, _, _ in log if op == PoolEvent.READ}
    assert writers == {2, 3} and readers == {0, 1}  # trace ranks 0 and 2 send, 1 and 3 receive
    block = engine.replay(trace, fabrics.resolve("cxl3-pool", 4).make())
    assert placed.finish_ns == pytest.approx(block.finish_ns, rel=1e-12)  # one switch: every host alike
    assert placed.finish_ns[1] == pytest.approx(message_ns(transport.figures(), SIZE)[1], rel=1e-12)


def test_a_placement_must_be_one_to_one_and_one_rank_per_host(tmp_path):
    shared = tmp_path / "shared.txt"
    shared.write_text("0\n0\n1\n2\n")
    with pytest.raises(InputError, match=r"--placement .*shared.txt: ranks 0 and 1 are both on host 0"):
        fabrics.resolve("cxl3-pool", 4, placement=str(shared))
    outside = tmp_path / "outside.txt"
    outside.write_text("0\n1\n2\n4\n")
    with pytest.raises(InputError, match=r"outside.txt:4: host 4 of rank 3: the fabric has hosts 0..3"):
        fabrics.resolve(pods_yaml(tmp_path, 2, 2), 4, placement=str(outside))
    scenario = tmp_path / "pool.yaml"
    scenario.write_text("fabric:\n  preset: cxl3-pool\n  nodes: 2\n  ranks_per_node: 2\n")
    with pytest.raises(InputError, match=r"fabric.ranks_per_node: the CXL pool preset cxl3-pool does not use it"):
        fabrics.resolve(str(scenario), 4)


def test_messages_inside_a_pod_keep_their_order_whichever_way_each_goes(tmp_path):
    transport = fabrics.resolve(pods_yaml(tmp_path, 2, 2, network="eth-100g-roce"), 4).make()
    fig = pod_figures(transport)
    route = MessageRoute(fig.pool, fig.network)
    messages = PodMessages(transport, route=route)
    assert (route.choose(65536), route.choose(8)) == ("network", "pool")  # the second would land first
    got = []

    def sender():
        yield messages.send(0, 1, 65536, "first", 7)
        yield messages.send(0, 1, 8, "second", 7)

    def receiver():
        for _ in range(2):
            got.append(((yield messages.recv(1, 0, 7)), transport.env.now))

    transport.run({0: sender(), 1: receiver()})
    assert [payload for payload, _ in got] == ["first", "second"]
    assert got[0][1] == pytest.approx(route.network_ns(65536), rel=1e-12)


def test_the_command_takes_a_placement_on_pods(tmp_path, write_trace, capsys):
    spec = pods_yaml(tmp_path, 2, 2, network="eth-100g-tcp")
    split = tmp_path / "split.txt"
    split.write_text("0\n2\n1\n3\n")
    index = write_trace(tmp_path / "pairs", lambda r: [f"send {r + 1} 7 {SIZE}"] if r % 2 == 0
                        else [f"recv {r - 1} 7 {SIZE}"], 4)
    assert main(["replay", index, "--fabric", spec, "--placement", str(split), "--trace-host-speed", "1Gf",
                 "--no-plots", "--output", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr().out
    assert "placement split.txt" in out


@pytest.mark.parametrize("action", ["bcast 4096 {root} 0", "reduce 1024 0 {root} 0", "scatter 128 128 {root} 2 2"])
def test_a_rooted_collective_is_rooted_at_the_host_the_traced_root_runs_on(tmp_path, write_trace, action):
    """Trace root 1 under placement (0, 2, 1, 3) runs on fabric rank 2, so each trace rank r ends when fabric rank
    at[r] ends in the same collective rooted at fabric rank 2 under block placement."""
    spec = pods_yaml(tmp_path, 2, 2, network="eth-100g-tcp")
    split = tmp_path / "split.txt"
    split.write_text("0\n2\n1\n3\n")

    def trace(root):
        return simgrid.read(write_trace(tmp_path / f"root{root}", lambda r: [action.format(root=root)], 4), 1e9)

    placed_fab = fabrics.resolve(spec, 4, placement=str(split))
    placed = engine.replay(trace(1), placed_fab.make(), at=placed_fab.at)
    block = engine.replay(trace(2), fabrics.resolve(spec, 4).make())
    other = engine.replay(trace(1), fabrics.resolve(spec, 4).make())
    assert placed.finish_ns == pytest.approx([block.finish_ns[h] for h in placed_fab.at], rel=1e-12)
    assert placed.finish_ns != pytest.approx([other.finish_ns[h] for h in placed_fab.at], rel=1e-12)


def test_a_pods_bcast_after_other_pods_collectives_runs_over_pod_messages(tmp_path, write_trace):
    """The pods broadcast's pool phase waits for its readers' acknowledgements of the call two before it in the
    pod's region 0: after two allreduces it would wait for ever, so that bcast runs a network algorithm over pod
    messages (noted); two broadcasts from one root in a row stay pods broadcasts."""
    spec = pods_yaml(tmp_path, 1, 4, network="eth-100g-tcp")
    after = write_trace(tmp_path / "after", lambda r: ["allreduce 16 0 0", "allreduce 16 0 0", "bcast 4096 1 0"], 4)
    timeline = engine.replay(simgrid.read(after, 1e9), fabrics.resolve(spec, 4).make())
    assert timeline.algorithms["bcast"] == ["binomial"] and timeline.algorithms["allreduce"] == ["pods"]
    assert any("that was not a broadcast from the same root" in note for note in timeline.notes)
    repeated = write_trace(tmp_path / "repeated",
                           lambda r: ["bcast 4096 1 0"] * 3 + ["allreduce 16 0 0", "bcast 4096 1 0"], 4)
    timeline = engine.replay(simgrid.read(repeated, 1e9), fabrics.resolve(spec, 4).make())
    assert timeline.algorithms["bcast"] == ["pods"]


@pytest.mark.parametrize("last", ["barrier", "allgather 1024 1024 1 1"])
def test_on_pods_an_allgather_after_an_allreduce_waits_for_every_rank(tmp_path, write_trace, last):
    """The pods allgather's pool phase keeps its flags apart from the allreduce's (ALLGATHER_REGION): after an
    allreduce and compute skewed by rank, no rank leaves the barrier (or allgather) before the last rank entered
    it."""
    spec = pods_yaml(tmp_path, 1, 4, network="eth-100g-tcp")
    index = write_trace(tmp_path / last.split()[0], lambda r: [f"compute {1000 * (3 - r)}", "allreduce 16 0 0",
                                                                  f"compute {5000 * r}", last], 4)
    timeline = engine.replay(simgrid.read(index, 1e9), fabrics.resolve(spec, 4).make())
    assert timeline.algorithms[last.split()[0]] == ["pods"]
    ends = [segs[-1] for segs in timeline.segments]
    entered = max(start for start, *_ in ends)
    assert entered == pytest.approx(ends[3][0]) and all(end > entered for _, end, *_ in ends)
