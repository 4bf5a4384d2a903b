"""Several ranks per host on a CXL pool and on pods: a host's ranks share its pool port (and its leaf's uplinks,
and on pods its NIC), each keeps its own CPU timeline, acknowledgements and fences; `cxlsim replay
--ranks-per-node K` runs on pool and pod fabrics. Every expected time is worked out by hand from the figures."""
from __future__ import annotations

import os

import pytest

from cxlsim.cli import main
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.fabric.cxl_presets import cxl_presets
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.replay import engine, fabrics, simgrid
from cxlsim.replay.pod_routes import POOL, MessageRoute
from cxlsim.replay.pods import pod_figures
from cxlsim.replay.pool_messages import message_ns

W = 64 * 1024
"""Bytes each rank streams (one mailbox slot): the host port binds, not the device."""


def write_trace(directory, p, lines_of) -> str:
    os.makedirs(directory, exist_ok=True)
    for r in range(p):
        with open(os.path.join(directory, f"t_rank-{r + 1}.txt"), "w") as fh:
            fh.write("".join(f"{r} {line}\n" for line in ["init", *lines_of(r), "finalize"]))
    return str(directory)


def pairs(tmp_path, p, senders, size=W):
    """Every rank r with r % 4 in `senders` sends one message of `size` bytes to r + 2, which receives it."""
    def lines(r):
        if r % 4 in senders:
            return [f"send {r + 2} 7 {size}"]
        return [f"recv {r - 2} 7 {size}"] if (r - 2) % 4 in senders and r % 4 >= 2 else []
    return simgrid.read(write_trace(tmp_path / f"pairs{p}-{''.join(map(str, senders))}", p, lines), 1e9)


def pods_yaml(tmp_path, pods, hosts, network="eth-100g-tcp") -> str:
    path = tmp_path / f"pods-{pods}x{hosts}-{network}.yaml"
    path.write_text(f"fabric:\n  preset: cxl-pods\n  nodes: {pods * hosts}\n"
                    f"  pods: {{pool: cxl3-pool, hosts: {hosts}, network: {network}}}\n")
    return str(path)


@pytest.mark.parametrize("name,coherence", [("cxl3-pool", Coherence.HW), ("cxl3-pool", Coherence.FLUSH),
                                            ("cxl2-pool", Coherence.FLUSH), ("mhd3-pool", Coherence.HW)])
def test_two_ranks_on_one_host_stream_through_its_port_one_after_the_other(name, coherence):
    preset = cxl_presets()[name]
    ends = {}
    for hosts, per_host in ((2, 1), (1, 2)):
        t = CXLPoolTransport(preset, hosts, ranks_per_host=per_host, coherence=coherence)
        assert t.size == 2 and t.host_of == [r // per_host for r in range(2)]

        def rank(r, t=t, per_host=per_host):
            yield t.pool_write(r, r * W, W)
            issued = t.env.now
            yield t.fence(r)
            ends[(per_host, r)] = (issued, t.env.now)

        t.run({r: rank(r) for r in range(2)})
        fig = t.figures()
    d = W / fig.host_bw_bytes_per_ns
    assert 2 * W / fig.device_bw_bytes_per_ns < d  # the device never binds: only the host port can
    fence = 2 * fig.path_ns + fig.fence_ns          # the last chunk's acknowledgement, then the fence
    for r in range(2):
        assert ends[(1, r)] == pytest.approx((d, d + fence), rel=1e-12)  # two hosts: side by side
    assert ends[(2, 0)] == pytest.approx((d, d + fence), rel=1e-12)      # one host: the second queues
    assert ends[(2, 1)] == pytest.approx((2 * d, 2 * d + fence), rel=1e-12)


def test_ranks_of_one_host_keep_their_own_cpu_and_fences():
    t = CXLPoolTransport(cxl_presets()["cxl3-pool"], 1, ranks_per_host=2)
    ends = {}

    def busy(r, ns):
        yield t.compute(r, ns)
        yield t.fence(r)  # nothing pending: just the fence's own time
        ends[r] = t.env.now

    t.run({0: busy(0, 100.0), 1: busy(1, 250.0)})
    f = t.preset.host_path.fence_ns
    assert ends == {0: pytest.approx(100.0 + f), 1: pytest.approx(250.0 + f)}


def test_switch_ports_are_checked_on_hosts_not_ranks():
    preset = cxl_presets()["cxl3-pool"]
    ports = preset.switch.max_ports - preset.device.heads
    t = CXLPoolTransport(preset, ports, ranks_per_host=2, switch_levels=1)
    assert t.size == 2 * ports and len([p for kind, p in t.path.ports() if kind == "host port"]) == ports
    with pytest.raises(InputError, match="fabric|port|host"):
        CXLPoolTransport(preset, 2 * ports, switch_levels=1)
    with pytest.raises(InputError, match="ranks_per_host: expected an integer >= 1, got 0"):
        CXLPoolTransport(preset, 2, ranks_per_host=0)


def test_the_default_is_one_rank_per_host():
    t = CXLPoolTransport(cxl_presets()["cxl3-pool"], 3)
    assert (t.size, t.hosts, t.ranks_per_host, t.host_of) == (3, 3, 1, [0, 1, 2])


def test_one_message_from_a_shared_host_costs_the_closed_form(tmp_path):
    fab = fabrics.resolve("cxl3-pool", 4, ranks_per_node=2)
    transport = fab.make()
    timeline = engine.replay(pairs(tmp_path, 4, (0,)), transport, at=fab.at)
    assert timeline.total_ns == pytest.approx(message_ns(transport.figures(), W)[1], rel=1e-12)


@pytest.mark.parametrize("name", ["cxl3-pool", "mhd3-pool"])
def test_two_messages_leaving_one_host_at_once_against_two_hosts(tmp_path, name):
    """hw: ranks 0 and 1 send W bytes at once to ranks 2 and 3. On four hosts each message costs the closed
    form. With two ranks per host (0, 1 on host 0; 2, 3 on host 1) the second stream queues D = W/b behind the
    first on host 0's port, and the first sender's flag store (a read for ownership) behind the second stream;
    on host 1 the second receiver's read queues behind the first's, and the first's acknowledgement store behind
    it. By hand (X = 64/b, L the load latency): sender 0 sets its flag at 2D + X + L, sender 1 at D + sent;
    receiver 0 reads from R = 2D + 2X + 2L + 2 path and ends at R + 2D + X + L, receiver 1 at R + 2D + X + 2L:
    the total is the one message's time + 2D - 2 path - fence."""
    trace = pairs(tmp_path, 4, (0, 1))
    apart = fabrics.resolve(name, 4)
    shared = fabrics.resolve(name, 4, ranks_per_node=2)
    assert shared.at == (0, 1, 2, 3) and shared.groups == ((0, 1), (2, 3))
    transport = apart.make()
    fig = transport.figures()
    assert fig.coherence == Coherence.HW
    one = engine.replay(trace, transport, at=apart.at)
    two = engine.replay(trace, shared.make(), at=shared.at)
    sent, received = message_ns(fig, W)
    d, x, load, path = W / fig.host_bw_bytes_per_ns, 64 / fig.host_bw_bytes_per_ns, fig.load_ns, fig.path_ns
    assert one.finish_ns == pytest.approx([sent, sent, received, received], rel=1e-12)
    r = 2 * d + 2 * x + 2 * load + 2 * path
    assert two.finish_ns == pytest.approx([2 * d + x + load, d + sent, r + 2 * d + x + load,
                                           r + 2 * d + x + 2 * load], rel=1e-12)
    assert two.total_ns - one.total_ns == pytest.approx(2 * d - 2 * path - fig.fence_ns, rel=1e-12)


def test_pods_with_two_ranks_per_host(tmp_path):
    """2 pods x 2 hosts x 2 ranks: pairs (0->2, 1->3, 4->6, 5->7). Block puts each pair in one pod, on two
    hosts: each pod is the shared-host pool case above. A placement that puts every pair's ends in two pods
    sends them all over the network, which then costs what the network alone costs with that placement."""
    spec = pods_yaml(tmp_path, 2, 2)
    trace = pairs(tmp_path, 8, (0, 1))
    block = fabrics.resolve(spec, 8, ranks_per_node=2)
    assert "2 hosts x 2 ranks" in block.describe and "4 nodes x 2 ranks" in block.describe
    assert block.groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    transport = block.make()
    assert transport.size == 8 and transport.hosts == 4 and [p.size for p in transport.pools] == [4, 4]
    fig = pod_figures(transport)
    assert MessageRoute(fig.pool, fig.network).choose(W) == POOL
    together = engine.replay(trace, transport, at=block.at)
    pool = fig.pool
    d = W / pool.host_bw_bytes_per_ns
    assert together.total_ns == pytest.approx(message_ns(pool, W)[1] + 2 * d - 2 * pool.path_ns - pool.fence_ns,
                                              rel=1e-12)
    split = tmp_path / "split.txt"
    split.write_text("0\n0\n2\n2\n1\n1\n3\n3\n")  # senders of pod 0 with receivers of pod 1, and back
    apart_fab = fabrics.resolve(spec, 8, placement=str(split), ranks_per_node=2)
    assert apart_fab.at == (0, 1, 4, 5, 2, 3, 6, 7)
    apart = engine.replay(trace, apart_fab.make(), at=apart_fab.at)
    network = fabrics.resolve("eth-100g-tcp", 8, placement=str(split), ranks_per_node=2)
    alone = engine.replay(trace, network.make())
    assert apart.total_ns == pytest.approx(alone.total_ns, rel=1e-12)
    assert together.total_ns < apart.total_ns


@pytest.mark.parametrize("spec", ["cxl3-pool", "pods"])
def test_collective_traces_run_with_two_ranks_per_host(tmp_path, spec):
    """The committed halo and p2p traces (4 ranks) on 2 hosts x 2 ranks: a host's ranks only add queueing, so
    each replay takes at least as long as on 4 hosts of one rank."""
    traces = os.path.join(os.path.dirname(__file__), "data", "traces")
    spec_two = pods_yaml(tmp_path, 1, 2) if spec == "pods" else spec
    spec_four = pods_yaml(tmp_path, 1, 4) if spec == "pods" else spec
    for name, speed in (("halo", None), ("p2p", 20000.0)):
        trace = simgrid.read(os.path.join(traces, name, f"{name}.txt"), speed)
        two = fabrics.resolve(spec_two, 4, ranks_per_node=2)
        shared = engine.replay(trace, two.make(), at=two.at)
        alone = engine.replay(trace, fabrics.resolve(spec_four, 4).make())
        assert shared.total_ns >= alone.total_ns * (1 - 1e-12)


def test_a_placement_puts_at_most_k_ranks_on_a_host_and_the_trace_fills_the_hosts(tmp_path):
    assert fabrics.resolve("cxl3-pool", 4, "round_robin", ranks_per_node=2).at == (0, 2, 1, 3)
    mapping = tmp_path / "hosts.txt"
    mapping.write_text("1\n0\n1\n0\n")
    assert fabrics.resolve("cxl3-pool", 4, str(mapping), ranks_per_node=2).at == (2, 0, 3, 1)
    crowded = tmp_path / "crowded.txt"
    crowded.write_text("0\n0\n0\n1\n")
    with pytest.raises(InputError, match=r"--placement .*crowded.txt: rank 2 on host 0, which already runs "
                                         r"ranks 0, 1; this fabric runs 2 ranks per host"):
        fabrics.resolve("cxl3-pool", 4, str(crowded), ranks_per_node=2)
    with pytest.raises(InputError, match=r"--ranks-per-node 2: a pool or pod fabric of 3 hosts runs 3 x 2 = 6 "
                                         r"ranks, the trace has 5"):
        fabrics.resolve("cxl3-pool", 5, ranks_per_node=2)
    with pytest.raises(InputError, match=r"--ranks-per-node 2: .* of 2 hosts runs 2 x 2 = 4 ranks, the trace "
                                         r"has 3"):
        fabrics.resolve(pods_yaml(tmp_path, 1, 2), 3, ranks_per_node=2)


def test_the_command_replays_on_a_pool_with_two_ranks_per_host(tmp_path, capsys):
    index = write_trace(tmp_path / "cli", 4, lambda r: [f"send {r + 2} 7 {W}"] if r < 2 else [f"recv {r - 2} 7 {W}"])
    assert main(["replay", index, "--fabric", "cxl3-pool", "--fabric", pods_yaml(tmp_path, 1, 2), "--ranks-per-node",
                 "2", "--trace-host-speed", "1Gf", "--no-plots", "--output", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr().out
    assert "2 hosts x 2 ranks" in out and "share its pool port" in out


def test_setups_build_and_describe_several_ranks_per_host(tmp_path):
    """`CXLSetup.new_transport(hosts, ranks_per_host)` and `PodsSetup.new_transport(chunk, ranks_per_host)`
    put K consecutive ranks on each host (block), and `describe` names the ranks per host."""
    from cxlsim import simulate

    def setup_of(text):
        path = tmp_path / f"s{abs(hash(text))}.yaml"
        path.write_text(text)
        return simulate.elaborate(simulate.scenario_from(str(path), {})[0])[1]

    pool = setup_of("fabric:\n  preset: cxl3-pool\n  nodes: 4\n")
    mine = pool.new_transport(4, ranks_per_host=2)
    assert (mine.size, mine.hosts, list(mine.host_of)) == (8, 4, [0, 0, 1, 1, 2, 2, 3, 3])
    assert pool.new_transport(4).size == 4 and pool.describe(4).endswith("4 hosts x 1 rank")
    assert pool.describe(4, 2).endswith("4 hosts x 2 ranks")

    pods = setup_of("fabric:\n  preset: cxl-pods\n  nodes: 8\n  pods: {pool: cxl3-pool, hosts: 4, network: ib-hdr}\n")
    mine = pods.new_transport(4096, ranks_per_host=2)
    assert mine.size == 16 and len(mine.pools) == 2
    assert [list(pool.host_of) for pool in mine.pools] == [[0, 0, 1, 1, 2, 2, 3, 3]] * 2
    assert pods.describe(8, 2).count("x 2 ranks") == 2 and "x 1 rank" not in pods.describe(8, 2)
    assert pods.describe(8) == pods.describe(8, 1) and "x 1 rank" in pods.describe(8)
