"""Replay on CXL pool fabrics: the pool send/recv protocol delivers every message (the network
collectives' labels check out over it), the pool allgather equals its closed form, traces replay."""
from __future__ import annotations

import os

import pytest

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.models.collectives import runner
from cxlsim.models.collectives.cxl_pool import cxl_pool_closed_form
from cxlsim.replay import engine, fabrics, simgrid
from cxlsim.replay.pool_messages import PoolMessages, message_ns

TRACES = os.path.join(os.path.dirname(__file__), "data", "traces")


@pytest.mark.parametrize("spec", ["cxl3-pool", "cxl2-pool"])
@pytest.mark.parametrize("collective, name, size", [
    ("allreduce", "ring", 4096),
    ("allreduce", "recursive_doubling", 300_000),   # 5 pieces of 64 KiB through 4 slots: acks are waited for
    ("broadcast", "binomial", 100),
    ("gather", "binomial", 70_000),
    ("reduce_scatter", "ring", 8192),
])
def test_network_collectives_run_over_the_pool_messages_with_correct_labels(spec, collective, name, size):
    pool = fabrics.resolve(spec, 4).make()
    messages = PoolMessages(pool)
    assert (pool.coherence == Coherence.FLUSH) == (spec == "cxl2-pool")
    ctx = runner.Context(root=1)
    outcome = runner.run(messages, collective, name, size, ctx)
    runner.verify(collective, 4, ctx, outcome.results)
    assert outcome.latency_ns > 0


def test_a_longer_message_costs_more_and_pieces_pipeline():
    def one(size):
        messages = PoolMessages(fabrics.resolve("cxl3-pool", 2).make())

        def a(t):
            yield t.send(0, 1, size, payload="x")

        def b(t):
            return (yield t.recv(1, 0))

        assert messages.run({0: a(messages), 1: b(messages)})[1] == "x"
        return messages.now()
    small, slot, four = one(64), one(64 * 1024), one(4 * 64 * 1024)
    assert small < slot < four < 4 * slot  # four pieces overlap (write the next while the last is read)


def test_the_mailboxes_must_fit_the_pool():
    pool = fabrics.resolve("cxl3-pool", 4).make()
    with pytest.raises(InputError, match=r"pool_bytes: the point-to-point mailboxes of 4 ranks"):
        PoolMessages(pool, low_bytes=pool.pool_bytes)


@pytest.mark.parametrize("spec, sizes", [("cxl3-pool", (2, 4, 8)), ("cxl2-pool", (2, 4))])
def test_the_traced_allgather_on_a_pool_equals_the_pool_closed_form(tmp_path, write_trace, spec, sizes):
    for p in sizes:
        path = write_trace(tmp_path / f"{p}", ["compute 1000", "allgather 512 512 0 0"], p)
        pool = fabrics.resolve(spec, p).make()
        timeline = engine.replay(simgrid.read(path, 1e9), pool)
        assert timeline.algorithms == {"allgather": ["cxl_pool"]}
        expect = cxl_pool_closed_form(pool.figures(), p, 4096, pool.coherence)
        assert timeline.total_ns - 1000 == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("spec", ["cxl3-pool", "cxl2-pool"])
def test_real_traces_replay_on_pools(spec):
    for name, speed in (("p2p", 20000.0), ("halo", None), ("colls", None)):
        trace = simgrid.read(os.path.join(TRACES, name, f"{name}.txt"), speed)
        timeline = engine.replay(trace, fabrics.resolve(spec, 4).make())
        compute = max(sum(c.amount for c in calls if c.kind == "compute") for calls in trace.ranks)
        assert timeline.total_ns > compute / (speed or 1e9) * 1e9
        if name == "colls":
            assert timeline.algorithms["barrier"] == ["cxl_pool"]
            assert any("over the pool's send/recv protocol" in note for note in timeline.notes)


def test_a_pool_refuses_a_trace_that_does_not_fill_its_hosts_and_a_crowded_placement(tmp_path):
    with pytest.raises(InputError, match=r"--ranks-per-node 2: a pool or pod fabric of 3 hosts runs 3 x 2 = 6 ranks, "
                                         r"the trace has 5"):
        fabrics.resolve("cxl3-pool", 5, "block", ranks_per_node=2)
    mapping = tmp_path / "hosts.txt"
    mapping.write_text("0\n1\n2\n2\n")
    with pytest.raises(InputError, match="ranks 2 and 3 are both on host 2; this fabric runs one rank per host"):
        fabrics.resolve("cxl3-pool", 4, str(mapping))


@pytest.mark.parametrize("spec", ["cxl3-pool", "cxl2-pool"])
@pytest.mark.parametrize("size", [8, 64, 100, 4096, 65536])
def test_one_message_over_the_pool_equals_its_closed_form(spec, size):
    pool = fabrics.resolve(spec, 2).make()
    messages = PoolMessages(pool)
    times = {}

    def sender(t):
        yield t.send(0, 1, size, payload="x")
        times["sent"] = t.now()

    def receiver(t):
        got = yield t.recv(1, 0)
        times["received"] = t.now()
        return got

    assert messages.run({0: sender(messages), 1: receiver(messages)})[1] == "x"
    sent, received = message_ns(pool.figures(), size)
    assert times["sent"] == pytest.approx(sent, rel=1e-12)
    assert times["received"] == pytest.approx(received, rel=1e-12)


@pytest.mark.parametrize("spec", ["cxl3-pool", "cxl2-pool"])
@pytest.mark.parametrize("action, collective", [
    ("barrier", "barrier"),
    ("allreduce 1 0 0", "allreduce"),                # one double
    ("allreduce 8192 0 0", "allreduce"),             # 64 KiB, a multiple of 64 x P bytes: cxl_pool_large is exact
    ("alltoall 32 32 0 0", "alltoall"),              # 256 B per destination
    ("reducescatter 128 128 128 128 0 0", "reduce_scatter"),
])
def test_pool_step_collectives_run_the_pools_own_and_equal_their_closed_forms(tmp_path, write_trace, spec, action,
                                                                             collective):
    from cxlsim.models.collectives.pool_collective_forms import select_pool
    from cxlsim.models.collectives.registry import algorithm

    trace = simgrid.read(write_trace(tmp_path / "t", [action], 4), 1e9)
    size = trace.ranks[0][0].size_bytes if collective != "barrier" else 0
    pool = fabrics.resolve(spec, 4).make()
    fig = pool.figures()
    timeline = engine.replay(trace, pool)
    name, _ = select_pool(collective, fig, 4, size)
    assert timeline.algorithms == {action.split()[0]: [name]}
    assert timeline.total_ns == pytest.approx(algorithm(collective, name).cost(fig, 4, size), rel=1e-9)


def test_a_pool_runs_mixed_collectives_in_its_regions_with_the_right_labels(tmp_path, write_trace):
    from cxlsim.replay.pool_plans import pool_plan, regions_of
    from cxlsim.replay.trace import COLLECTIVES

    lines = ["allgather 64 64 0 0", "allreduce 96 0 0", "barrier", "alltoall 16 16 0 0", "allgather 8 8 0 0",
             "reducescatter 64 64 64 64 0 0", "allreduce 300000 0 0"]
    path = write_trace(tmp_path / "t", lines, 4)
    trace = simgrid.read(path, 1e9)
    pool = fabrics.resolve("cxl2-pool", 4).make()
    regions = regions_of(pool)
    plans = [pool_plan(c, 4, "mpich", runner.Context(), pool.figures()) for c in trace.ranks[0] if c.kind in COLLECTIVES]

    def rank(r):
        out = []
        for this in plans:
            out.append((yield from this.run(regions[this.region].endpoint(r), 0)))
        return out

    results = pool.run({r: rank(r) for r in range(4)})
    for k, this in enumerate(plans):
        runner.verify(this.collective, 4, runner.Context(elements=4), {r: results[r][k] for r in range(4)})
    assert engine.replay(trace, fabrics.resolve("cxl2-pool", 4).make()).total_ns > 0
