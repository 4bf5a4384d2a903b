"""The DES replay: collectives equal their closed forms, point-to-point matches as MPI does (wildcards,
posting order, tags), compute gaps and the critical path add up."""
from __future__ import annotations

import os

import numpy as np
import pytest

from cxlsim.errors import InputError, RunError
from cxlsim.fabric import Environment, NetworkTransport, Placement, build, get_preset, star
from cxlsim.models.collectives import analytic, runner, selectors
from cxlsim.replay import analysis, engine, simgrid
from cxlsim.replay import collectives as replay_collectives

TRACES = os.path.join(os.path.dirname(__file__), "data", "traces")


def same(p, lines):
    return {r: list(lines) for r in range(p)}


def transport(p, preset="ib-hdr"):
    return NetworkTransport(build(star(p), get_preset(preset), Environment()), Placement(p, 1))


def cost_model(p, preset="ib-hdr"):
    return analytic.CostModel.from_network(build(star(p), get_preset(preset), Environment()), 64 * 1024)


def replay(path, p, preset="ib-hdr", **kw):
    return engine.replay(simgrid.read(path, 1e9), transport(p, preset), **kw)


def closed(collective, p, size, cm, root=0):
    name, _ = selectors.select("mpich", collective, p, size)
    return analytic.cost(collective, name, p, size, cm, runner.Context(root=root))[0]


# ------------------------------------------------------------------ collectives against the closed forms

@pytest.mark.parametrize("preset", ["ib-hdr", "eth-100g-tcp"])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_collectives_separated_by_barriers_replay_to_the_analytic_sum(tmp_path, write_trace, preset, p):
    lines = ["compute 1000", "barrier", "allreduce 2 0 0", "barrier", "allreduce 8192 0 0", "barrier",
             "allgather 512 512 0 0", "barrier", "reducescatter " + " ".join(["300"] * p) + " 0 0", "barrier",
             "alltoall 1000 1000 1 1", "barrier", "compute 500", "allreduce 1 0 1"]
    timeline = replay(write_trace(tmp_path, same(p, lines)), p, preset)
    cm = cost_model(p, preset)
    barrier = analytic.cost("allgather", "bruck", p, 0, cm, runner.Context())[0]
    expect = (1500 + 6 * barrier + closed("allreduce", p, 16, cm) + closed("allreduce", p, 65536, cm)
              + closed("allgather", p, 4096, cm) + closed("reduce_scatter", p, 2400 * p, cm)
              + replay_collectives.alltoall_pairwise_ns(cm, p, 4000) + closed("allreduce", p, 4, cm))
    assert timeline.total_ns == pytest.approx(expect, rel=1e-12)
    assert max(timeline.finish_ns) == min(timeline.finish_ns)  # symmetric: every rank ends together


def test_symmetric_collectives_on_a_non_power_of_two_count_replay_to_the_analytic_sum(tmp_path, write_trace):
    # (MPICH's reduce_scatter at P = 6 is recursive halving, whose ranks finish at different times: the
    # next call does not start together, so it is summed at P = 2, 4, 8 only, above)
    p = 6
    lines = ["compute 10", "allgather 512 512 0 0", "barrier", "alltoall 1000 1000 1 1", "barrier"]
    timeline = replay(write_trace(tmp_path, same(p, lines)), p)
    cm = cost_model(p)
    barrier = analytic.cost("allgather", "bruck", p, 0, cm, runner.Context())[0]
    expect = (10 + closed("allgather", p, 4096, cm) + 2 * barrier
              + replay_collectives.alltoall_pairwise_ns(cm, p, 4000))
    assert timeline.total_ns == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("p", [2, 5, 8])
def test_rooted_collectives_replay_to_their_closed_forms(tmp_path, write_trace, p):
    cm = cost_model(p)
    cases = [("bcast 1000 1 0", closed("broadcast", p, 8000, cm, root=1)),
             ("bcast 100000 1 0", closed("broadcast", p, 800000, cm, root=1)),
             ("reduce 1000 0 1 0", replay_collectives.reduce_binomial_ns(cm, p, 8000)),
             ("gather 100 100 1 0 0", closed("gather", p, 800, cm, root=1)),
             ("scatter 100 100 1 0 0", float(np.max(analytic.scatter_tree(cm, list(range(p)), 800)))),
             ("barrier", analytic.cost("allgather", "bruck", p, 0, cm, runner.Context())[0])]
    for i, (line, expect) in enumerate(cases):
        timeline = replay(write_trace(tmp_path / str(i), same(p, ["compute 1000", line])), p)
        assert timeline.total_ns - 1000 == pytest.approx(expect, rel=1e-12), line


def test_the_selector_is_used_and_reported(tmp_path, write_trace):
    path = write_trace(tmp_path, same(6, ["allgather 4096 4096 0 0"]))  # 32 KiB per rank on 6 ranks
    mpich = engine.replay(simgrid.read(path), transport(6), library="mpich")
    ompi = engine.replay(simgrid.read(path), transport(6), library="ompi")
    assert mpich.algorithms == {"allgather": ["ring"]}   # MPICH: P*m = 192 KiB >= its 80 KiB short limit
    assert ompi.algorithms == {"allgather": ["bruck"]}   # Open MPI: P < 32, not a power of two
    assert any("Bruck" in note for note in ompi.notes)
    assert mpich.total_ns != ompi.total_ns


def test_a_reduction_operator_cost_runs_as_compute(tmp_path, write_trace):
    plain = replay(write_trace(tmp_path / "a", same(2, ["allreduce 4 0 0"])), 2)
    costly = replay(write_trace(tmp_path / "b", same(2, ["allreduce 4 5000 0"])), 2)
    assert costly.total_ns - plain.total_ns == pytest.approx(5000.0)


# ------------------------------------------------------------------ point-to-point

def test_a_blocking_message_costs_one_loggp_message(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["send 1 7 1000 0"], 1: ["recv 0 7 1000 0"]})
    timeline = replay(path, 2)
    assert timeline.total_ns == pytest.approx(cost_model(2).T(8000))
    start, end, kind, dep_rank, dep_ns = timeline.segments[1][0]
    assert (kind, dep_rank, dep_ns, end) == ("recv", 0, 0.0, pytest.approx(cost_model(2).T(8000)))


def test_any_source_receives_match_in_arrival_order(tmp_path, write_trace):
    ranks = {0: ["irecv -333 6 1 1", "wait -333 0 6"] * 3}
    for r, delay in ((1, 30000), (2, 20000), (3, 10000)):  # rank 3 sends first, then 2, then 1
        ranks[r] = [f"compute {delay}", "send 0 6 1 1"]
    timeline = replay(write_trace(tmp_path, ranks), 4)
    waits = [s for s in timeline.segments[0] if s[2] == "wait"]
    assert [w[3] for w in waits] == [3, 2, 1]
    assert [w[4] for w in waits] == [10000.0, 20000.0, 30000.0]


def test_any_tag_takes_the_earliest_arrived_message_and_tags_select(tmp_path, write_trace):
    # rank 1 sends tag 1 then tag 2; rank 0 first waits for tag 2, then takes any tag (so tag 1)
    ranks = {0: ["compute 100000", "recv 1 2 1 1", "recv 1 -444 1 1"], 1: ["send 0 1 1 1", "send 0 2 1 1"]}
    timeline = replay(write_trace(tmp_path, ranks), 2)
    recvs = [s for s in timeline.segments[0] if s[2] == "recv"]
    first_send_at, second_send_at = [s[0] for s in timeline.segments[1] if s[2] == "send"]
    assert recvs[0][4] == second_send_at and recvs[1][4] == first_send_at


def test_requests_of_one_name_complete_in_posting_order(tmp_path, write_trace):
    ranks = {0: ["irecv 1 4 1 1", "irecv 1 4 1 1", "wait 1 0 4", "wait 1 0 4"],
             1: ["send 0 4 1 1", "compute 50000", "send 0 4 1 1"]}
    timeline = replay(write_trace(tmp_path, ranks), 2)
    first, second = [s for s in timeline.segments[0] if s[2] == "wait"]
    assert first[4] == 0.0 and second[4] > first[4]
    assert second[1] > 50000


def test_the_real_p2p_trace_replays_on_both_networks():
    trace = simgrid.read(os.path.join(TRACES, "p2p", "p2p.txt"), 20000.0)
    fast = engine.replay(trace, transport(4, "ib-hdr"))
    slow = engine.replay(trace, transport(4, "eth-100g-tcp"))
    compute = max(sum(c.amount for c in calls if c.kind == "compute") for calls in trace.ranks) / 20000.0 * 1e9
    assert compute < fast.total_ns < slow.total_ns
    assert {s[2] for segs in fast.segments for s in segs} >= {"send", "recv", "isend", "irecv", "wait", "waitall",
                                                              "sendrecv", "barrier", "compute"}


def test_an_unmatched_receive_is_a_run_error_naming_it(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["recv 1 3 1 1"], 1: ["compute 10"]})
    with pytest.raises(RunError, match=r"never finished.*unmatched receives \(rank, src, tag\): \[\(0, 1, 3\)\]"):
        replay(path, 2)


def test_a_trace_with_compute_needs_a_host_speed(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["compute 10"]})
    with pytest.raises(InputError, match="--trace-host-speed"):
        engine.replay(simgrid.read(path), transport(1))


def test_the_fabric_must_run_every_trace_rank(tmp_path, write_trace):
    path = write_trace(tmp_path, same(3, ["barrier"]))
    with pytest.raises(InputError, match="the fabric runs 2 ranks but the trace has 3"):
        engine.replay(simgrid.read(path), transport(2))


# ------------------------------------------------------------------ compute, shares and the critical path

def test_compute_scale_scales_every_gap_and_per_rank_factors(tmp_path, write_trace):
    path = write_trace(tmp_path, same(2, ["compute 4000", "barrier", "compute 2000"]))
    base = replay(path, 2)
    half = replay(path, 2, compute_scale=0.5)
    assert base.total_ns - half.total_ns == pytest.approx(3000.0)
    skewed = replay(path, 2, compute_scale=[1.0, 2.0])  # rank 1 is the straggler
    # rank 0's barrier message is waiting for rank 1, which pays its send and receive overheads only
    assert skewed.total_ns == pytest.approx(8000.0 + 2 * cost_model(2).overhead_ns + 4000.0)
    with pytest.raises(InputError, match="one factor or 2"):
        replay(path, 2, compute_scale=[1.0])


def test_critical_path_covers_the_total_and_follows_the_straggler(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["compute 1000", "send 1 0 1000 0"],
                                  1: ["compute 50000", "recv 0 0 1000 0", "compute 1000"]})
    timeline = replay(path, 2)
    path_ = analysis.critical_path(timeline)
    assert path_["compute_s"] + path_["communication_s"] == pytest.approx(timeline.total_ns / 1e9)
    assert path_["compute_s"] == pytest.approx(51000e-9)  # rank 1's own compute; the message was there in time
    assert path_["hops"] == 0

    late = write_trace(tmp_path / "late", {0: ["compute 50000", "send 1 0 1000 0"],
                                           1: ["compute 1000", "recv 0 0 1000 0", "compute 1000"]})
    timeline = replay(late, 2)
    path_ = analysis.critical_path(timeline)
    assert path_["hops"] == 1 and path_["compute_s"] == pytest.approx(51000e-9)
    assert path_["communication_s"] == pytest.approx((timeline.total_ns - 51000) / 1e9)
    row = analysis.summary("x", timeline)
    assert row["critical_compute_share"] + row["critical_communication_share"] == pytest.approx(1.0)
    assert row["compute_share"] + row["communication_share"] + row["idle_share"] == pytest.approx(1.0)


def test_per_call_rows_add_up_to_rank_time(tmp_path, write_trace):
    path = write_trace(tmp_path, same(4, ["compute 3000", "allreduce 100 0 0", "barrier"]))
    timeline = replay(path, 4)
    rows = analysis.per_call(timeline)
    assert {r["kind"] for r in rows} == {"compute", "allreduce", "barrier"}
    assert sum(r["time_s"] for r in rows) == pytest.approx(4 * timeline.total_ns / 1e9)
    assert next(r for r in rows if r["kind"] == "compute")["time_s"] == pytest.approx(4 * 3000e-9)
    speed = analysis.speedups([{"fabric": "a", "total_s": 2.0}, {"fabric": "b", "total_s": 0.5}])
    assert [s["speedup"] for s in speed] == [1.0, 4.0]
