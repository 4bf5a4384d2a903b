"""The transport interface: exact small timelines, chunking, intra-node copies, errors."""
import pytest

from cxlsim.errors import InputError, RunError
from cxlsim.fabric import topology
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import build
from cxlsim.fabric.placement import Placement
from cxlsim.fabric.presets import get_preset
from cxlsim.fabric.switch import SwitchParams
from cxlsim.fabric.pool_transport import PoolTransport
from cxlsim.fabric.transport import NetworkTransport, Transport
from cxlsim.models.collectives import runner
import dataclasses


def make(nodes, rpn=1, chunk=65536, preset="ib-hdr", mode=None, graph=None):
    p = get_preset(preset)
    if mode:
        p = dataclasses.replace(p, switch=SwitchParams(latency_ns=p.switch.latency_ns, mode=mode))
    net = build(graph or topology.star(nodes), p, Environment())
    return NetworkTransport(net, Placement(nodes, rpn), chunk)


def test_p2_ring_timeline_by_hand():
    # ib-hdr: o = 350 ns, 25 B/ns, 25 ns per link, 400 ns cut-through switch.
    # Rank 0 sends 1000 B at t=0: CPU o until 350; uplink 350..390; head at the switch 375,
    # forwarded at 775; downlink 775..815; tail at rank 1 at 840; receive o until 1190.
    t = make(2)
    out = runner.run(t, "allgather", "ring", 1000)
    assert out.latency_ns == pytest.approx(1190.0)
    assert out.results == {0: [0, 1], 1: [0, 1]}


def test_p3_store_and_forward_chunks_by_hand():
    # 1000 B in 400-byte chunks (400, 400, 200) through a store-and-forward switch:
    # uplink 350..366, 366..382, 382..390; tails at the switch 391, 407, 415; ready +400:
    # 791, 807, 815; downlink 791..807, 807..823, then the last chunk waits: 823..831;
    # tail at the host 856; receive o: 1206 per step; the ring has 2 steps.
    t = make(3, chunk=400, mode="store-and-forward")
    out = runner.run(t, "allgather", "ring", 1000)
    assert out.latency_ns == pytest.approx(2 * 1206.0)


def test_p4_ring_timeline_with_two_ranks_per_host_by_hand():
    # Ranks 0,1 on host 0 and 2,3 on host 1; 1200 B blocks. A shared-memory message costs
    # Ti = o + o + 1200/12 = 800 ns; a network one T = 350 + 48 + 450 + 350 = 1198 ns.
    # Step 1 ends at 800 (ranks 1, 3) or 1198 (ranks 0, 2). Step 2: rank 1 waits for rank 0
    # (starts 1198): 1198 + 350 + 450 = 1998; rank 2 hears from rank 1 (starts 800):
    # 800 + 1198 = 1998; so every rank ends step 2 at 1998, and step 3 at 1998 + 1198.
    t = make(2, rpn=2)
    out = runner.run(t, "allgather", "ring", 1200)
    assert out.latency_ns == pytest.approx(1998.0 + 1198.0)
    runner.verify("allgather", 4, runner.Context(), out.results)


def test_nic_gap_spaces_injections():
    p = get_preset("ib-hdr")
    slow = dataclasses.replace(p, nic=dataclasses.replace(p.nic, gap_ns=5000.0))
    t = NetworkTransport(build(topology.star(3), slow, Environment()), Placement(3, 1), 65536)
    got = {}

    def root():
        a = t.send(0, 1, 8)
        b = t.send(0, 2, 8)
        yield a & b

    def leaf(r):
        yield t.recv(r, 0)
        got[r] = t.now()

    t.run({0: root(), 1: leaf(1), 2: leaf(2)})
    wire = 8 / 25 + 50 + 400
    assert got[1] == pytest.approx(350 + wire + 350)
    assert got[2] == pytest.approx(350 + 5000 + wire + 350)  # second injection waits for g


def test_halving_the_chunk_changes_latency_by_under_two_percent():
    # Store-and-forward is where the chunk size matters: each switch holds one chunk.
    times = [runner.run(make(4, chunk=c, preset="eth-100g-roce", mode="store-and-forward"),
                        "allgather", "ring", 1 << 20).latency_ns for c in (8192, 4096)]
    assert abs(times[1] / times[0] - 1) < 0.02
    assert times[1] < times[0]  # and it converges from above
    # With cut-through on an uncongested star the chunk size does not matter at all.
    ct = [runner.run(make(4, chunk=c), "allgather", "ring", 1 << 20).latency_ns for c in (65536, 32768)]
    assert ct[0] == pytest.approx(ct[1])


def test_pool_operations_are_declared_by_the_pool_transport_interface():
    t = make(2)
    assert t.kind == "network" and not isinstance(t, PoolTransport)
    ep = t.endpoint(1)
    assert ep.rank == 1 and ep.size == 2 and ep.now() == 0.0
    for name in ("send", "recv", "now", "compute", "copy", "reduce"):
        assert callable(getattr(Transport, name))
    # Everything a pool algorithm uses is declared on PoolTransport; the network transport has none of it.
    pool_ops = ("pool_write", "pool_read", "flush", "fence", "wait_flags", "place", "view", "figures")
    assert set(pool_ops) <= PoolTransport.__abstractmethods__
    for name in pool_ops + ("next_epoch", "next_round", "all_of"):
        assert callable(getattr(PoolTransport, name)) and not hasattr(t, name)
    assert PoolTransport.kind == "pool"
    # A pool algorithm on the network transport is refused by name before it runs.
    with pytest.raises(InputError, match="cxl_pool needs a CXL pool transport"):
        runner.run(t, "allgather", "cxl_pool", 64)


def test_deadlock_is_reported_not_hung():
    t = make(2)

    def waits_forever():
        yield t.recv(0, 1)

    with pytest.raises(RunError, match=r"ranks \[0\] never finished.*\(0, 1, 0\)"):
        t.run({0: waits_forever()})


def test_compute_copy_reduce_share_one_cpu_timeline():
    t = make(2)

    def work():
        a = t.compute(0, 100.0)
        b = t.copy(0, 1200)     # 100 ns at 12 B/ns
        c = t.reduce(0, 600)    # 100 ns at 6 B/ns
        yield a & b & c
        return t.now()

    assert t.run({0: work()})[0] == pytest.approx(300.0)
