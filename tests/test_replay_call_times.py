"""The library's call durations against the replay's, call for call (cxlsim.replay.call_times): hand sums on a
tiny two-rank trace, the replayed message's own time against the LogGP line, and the sidecar's refusals."""
from __future__ import annotations

import os

import pytest

from cxlsim.errors import InputError
from cxlsim.replay import call_times, engine, fabrics, simgrid

RANK0 = ["compute 1000", "barrier", "compute 5000", "isend 1 7 1000", "irecv 1 8 1000", "wait 0 1 7", "wait 1 0 8",
         "allreduce 8 0", "barrier"]
RANK1 = ["compute 1000", "barrier", "compute 2000", "isend 0 8 1000", "irecv 0 7 1000", "wait 1 0 8", "wait 0 1 7",
         "allreduce 8 0", "barrier"]
# (line, start_ns, duration_ns, path, setup) per rank; line 1 is `init`, the waits of one Waitall share a row's times
ROWS = {0: [(3, 1000, 100, "pool", 1), (5, 6100, 50, "mpi", 0), (6, 6150, 50, "mpi", 0), (7, 6200, 900, "mpi", 0),
            (8, 6200, 900, "mpi", 0), (9, 7200, 300, "pool", 0), (10, 7600, 100, "pool", 0)],
        1: [(3, 1000, 100, "pool", 1), (5, 3100, 40, "mpi", 0), (6, 3140, 60, "mpi", 0), (7, 3200, 4000, "mpi", 0),
            (8, 3200, 4000, "mpi", 0), (9, 7300, 150, "pool", 0), (10, 7450, 200, "pool", 0)]}


def write(tmp_path, write_trace, rows=ROWS, header="line\tstart_ns\tduration_ns\tpath\tsetup"):
    directory = write_trace(tmp_path / "t", {0: RANK0, 1: RANK1})
    for r, mine in rows.items():
        with open(os.path.join(directory, f"t_rank-{r + 1}.durations.tsv"), "w") as fh:
            fh.write(header + "\n" + "".join("\t".join(map(str, row)) + "\n" for row in mine))
    return directory


def test_the_measured_calls_and_their_own_times_by_hand(tmp_path, write_trace):
    trace = simgrid.read(write(tmp_path, write_trace), 1e9)
    timed = call_times.own_times(trace, call_times.read_durations(trace))
    assert [(t.kind, t.lines) for t in timed[0]] == [("barrier", (3,)), ("isend", (5,)), ("irecv", (6,)),
                                                     ("wait", (7, 8)), ("allreduce", (9,)), ("barrier", (10,))]
    # barrier: both in at 1000; the exchange: rank 0's receive was sent by rank 1 at 3100, long before rank 0
    # waited (6200), rank 1's by rank 0 at 6100, after rank 1 waited (3200); the allreduce: last in at 7300;
    # the barrier: last in at 7600
    assert [t.own_ns for t in timed[0]] == [100, 50, 50, 7100 - 6200, 7500 - 7300, 7700 - 7600]
    assert [t.own_ns for t in timed[1]] == [100, 40, 60, 7200 - 6100, 7450 - 7300, 7650 - 7600]
    assert timed[0][0].setup and not timed[0][5].setup and timed[0][3].duration_ns == 900

    window = [(1, 5), (1, 5)]  # after the first barrier, up to the last
    rows = {(r["kind"], r["class"]): r for r in call_times.summarise(timed, timed, window)}
    assert set(rows) == {("isend", "first"), ("irecv", "first"), ("waitall", "first"), ("allreduce", "first"),
                         ("barrier", "steady")}
    assert rows[("waitall", "first")]["measured_own_ns"] == 900 + 1100
    assert rows[("waitall", "first")]["measured_duration_ns"] == 900 + 4000
    assert rows[("allreduce", "first")]["measured_own_median_ns"] == (200 + 150) / 2
    assert rows[("barrier", "steady")]["measured_own_max_ns"] == 100
    # spans: a collective's slowest rank (the allreduce: rank 0's 200); a Waitall the larger rank sum (1100)
    assert rows[("allreduce", "first")]["measured_span_ns"] == 200
    assert rows[("waitall", "first")]["measured_span_ns"] == 1100
    assert rows[("isend", "first")]["measured_span_ns"] == 50
    whole = {(r["kind"], r["class"]) for r in call_times.summarise(timed, timed)}
    assert ("barrier", "set-up") in whole


def test_the_replayed_calls_line_up_with_the_measured_ones_and_a_message_costs_the_line(
        tmp_path, write_trace, network_profile):
    latency, overhead, gap = 1000.0, 200.0, 0.1
    trace = simgrid.read(write(tmp_path, write_trace), 1e9)
    fab = fabrics.resolve(network_profile(tmp_path, latency, overhead, gap), 2, message_bytes=1000, trace=trace)
    timeline = engine.replay(trace, fab.make())
    measured = call_times.read_durations(trace)
    replayed = call_times.own_times(trace, call_times.replayed_calls(trace, timeline, measured))
    for r in range(2):
        segs = timeline.segments[r]
        assert [t.lines for t in replayed[r]] == [t.lines for t in measured[r]]
        calls = [s for s in segs if s[2] != "compute"]
        assert sum(t.duration_ns for t in replayed[r]) == pytest.approx(sum(e - s for s, e, *_ in calls), rel=1e-12)
    # rank 1 waits in its Waitall for rank 0's message from rank 0's isend on: rank 0's CPU first serves the
    # receive overhead of rank 1's message, which landed during its compute (one FIFO timeline), then the
    # message's o + k G + L + o
    assert replayed[1][3].own_ns == pytest.approx(overhead + overhead + 1000 * gap + latency + overhead, rel=1e-12)
    # rank 1 sent first, so rank 0's Waitall waits for its own send alone: o (the same pending receive) + o + k G
    assert replayed[0][3].own_ns == pytest.approx(overhead + overhead + 1000 * gap, rel=1e-12)
    # the allreduce: rank 1 entered last, so its own time is its duration; rank 0's runs from rank 1's entry
    allreduce = [replayed[r][4] for r in range(2)]
    assert allreduce[1].start_ns > allreduce[0].start_ns
    assert allreduce[1].own_ns == pytest.approx(allreduce[1].duration_ns, rel=1e-12)
    assert allreduce[0].own_ns == pytest.approx(allreduce[0].start_ns + allreduce[0].duration_ns
                                                - allreduce[1].start_ns, rel=1e-12)


def test_a_trace_without_durations_has_none_and_partial_or_bad_sidecars_are_refused(tmp_path, write_trace):
    plain = write_trace(tmp_path / "plain", {0: RANK0, 1: RANK1})
    assert call_times.read_durations(simgrid.read(plain, 1e9)) is None
    cases = [
        ({0: ROWS[0]}, None, "t_rank-2.durations.tsv: no call durations for this rank"),
        ({0: ROWS[0], 1: ROWS[1][:-1]}, None, "no row for line 10"),
        ({0: ROWS[0], 1: [*ROWS[1][:-1], (10, 7450, "soon", "pool", 0)]}, None, "field 'duration_ns'"),
        ({0: ROWS[0], 1: [*ROWS[1][:-1], (10, 7450, 200, "pool", 2)]}, None, "field 'setup'"),
        ({0: ROWS[0], 1: [*ROWS[1], (4, 10, 10, "mpi", 0)]}, None, "line 4 is a compute line"),
        ({0: ROWS[0], 1: [*ROWS[1], (10, 10, 10, "mpi", 0)]}, None, "line 10 has a row already"),
        ({0: ROWS[0], 1: [*ROWS[1][:-1], (10, 7450, 200, "pool")]}, None, "expected 5 tab-separated fields"),
        (ROWS, "line\tstart\tduration", "expected the header"),
    ]
    for i, (rows, header, message) in enumerate(cases):
        directory = write(tmp_path / str(i), write_trace, rows, *(header,) if header else ())
        with pytest.raises(InputError, match=message) as err:
            call_times.read_durations(simgrid.read(directory, 1e9))
        assert "durations.tsv" in str(err.value)


def test_runs_summed_per_kind_take_medians_and_the_excess_range():
    def run(own):
        return [{"kind": "allreduce", "size_bytes": 8, "class": "steady", "calls": 4, "measured_duration_ns": 0,
                 "predicted_duration_ns": 0, "with_own": 4, "measured_own_median_ns": own,
                 "predicted_own_median_ns": 100.0, "measured_own_ns": 4 * own, "predicted_own_ns": 400.0,
                 "measured_own_max_ns": 2 * own, "measured_span_ns": 3 * own, "predicted_span_ns": 300.0,
                 "paths": ["pool"]}]
    (row,) = call_times.over_runs([run(100.0), run(300.0), run(200.0)], ranks=2)
    assert row["runs"] == 3 and row["measured_own_median_ns"] == 200.0
    assert row["measured_own_per_rank_ns"] == 400.0 and row["predicted_own_per_rank_ns"] == 200.0
    assert row["measured_span_ns"] == 600.0 and row["predicted_span_ns"] == 300.0
    assert row["excess_ns"] == 300.0 and row["excess_range_ns"] == (0.0, 600.0)
    assert row["measured_own_max_ns"] == 600.0


def test_the_measured_gaps_hold_the_time_between_calls_the_trace_left_out(tmp_path, write_trace, network_profile):
    trace = simgrid.read(write(tmp_path, write_trace), 1e9)
    timed = call_times.read_durations(trace)
    gapped, added = call_times.measured_gaps(trace, timed)
    # rank 0: 100 ns between its Waitall's return (7100) and the allreduce (7200), 100 between the allreduce
    # (7500) and the barrier (7600), none the trace has no compute for; rank 1: 100 after its Waitall (7200)
    assert added == [200.0, 100.0]
    gaps = [[c.amount for c in calls if c.kind == "compute"] for calls in gapped.ranks]
    assert gaps == [[1000, 5000, 0, 0, 100, 100], [1000, 2000, 0, 0, 100, 0]]
    assert [c.kind for c in gapped.ranks[0] if c.kind != "compute"] == [c.kind for c in trace.ranks[0]
                                                                        if c.kind != "compute"]
    # the replay of it: the calls still line up with the measured ones, each rank's compute is 200 / 100 ns more
    fab = fabrics.resolve(network_profile(tmp_path), 2, message_bytes=1000, trace=gapped)
    before, after = engine.replay(trace, fab.make()), engine.replay(gapped, fab.make())
    replayed = call_times.replayed_calls(gapped, after, timed)
    assert [len(r) for r in replayed] == [6, 6]
    for r, extra in enumerate(added):
        busy = [sum(e - s for s, e, kind, *_ in t.segments[r] if kind == "compute") for t in (before, after)]
        assert busy[1] - busy[0] == pytest.approx(extra, rel=1e-12)


def test_a_gap_s_cpu_time_where_the_tracer_read_it_is_the_gap_and_bad_values_are_named(tmp_path, write_trace):
    """The sixth column (an oversubscribed run's trace): a row's gap_cpu_ns replaces the wall gap before it in
    `measured_gaps`; -1 keeps the wall gap; anything else but a number >= 0 is refused, naming the field."""
    header = "line\tstart_ns\tduration_ns\tpath\tsetup\tgap_cpu_ns"
    cpu = {0: [(*row, 40 if row[0] == 9 else -1) for row in ROWS[0]], 1: [(*row, -1) for row in ROWS[1]]}
    trace = simgrid.read(write(tmp_path, write_trace, cpu, header), 1e9)
    timed = call_times.read_durations(trace)
    assert [t.gap_cpu_ns for t in timed[0]] == [None, None, None, None, 40.0, None]
    gapped, added = call_times.measured_gaps(trace, timed)
    # rank 0: 40 ns of CPU before the allreduce (its wall gap: 100), 100 ns wall before the barrier
    assert [c.amount for c in gapped.ranks[0] if c.kind == "compute"] == [1000, 5000, 0, 0, 40, 100]
    assert added == [140.0, 100.0]
    for bad in ("x", "-2"):
        rows = {0: [(*row, bad) for row in ROWS[0]], 1: cpu[1]}
        with pytest.raises(InputError, match="gap_cpu_ns"):
            call_times.read_durations(simgrid.read(write(tmp_path / bad, write_trace, rows, header), 1e9))
    with pytest.raises(InputError, match="expected 6 tab-separated fields"):
        call_times.read_durations(simgrid.read(write(tmp_path / "short", write_trace, ROWS, header), 1e9))


def test_a_sleep_between_two_calls_stays_a_sleep_and_leaves_the_gap_its_rest(tmp_path, write_trace):
    # rank 0 sleeps 50 ns between its allreduce (returns 7500) and its barrier (enters 7600): 50 ns of compute
    rank0 = [*RANK0[:-1], "sleep 0.00000005", "barrier"]
    directory = write_trace(tmp_path / "t", {0: rank0, 1: RANK1})
    rows = {0: [*ROWS[0][:-1], (11, 7600, 100, "pool", 0)], 1: ROWS[1]}
    for r, mine in rows.items():
        with open(os.path.join(directory, f"t_rank-{r + 1}.durations.tsv"), "w") as fh:
            fh.write("line\tstart_ns\tduration_ns\tpath\tsetup\n"
                     + "".join("\t".join(map(str, row)) + "\n" for row in mine))
    trace = simgrid.read(directory, 1e9)
    gapped, added = call_times.measured_gaps(trace, call_times.read_durations(trace))
    assert [c.kind for c in gapped.ranks[0][-3:]] == ["sleep", "compute", "barrier"]
    assert gapped.ranks[0][-2].amount == pytest.approx(50.0, rel=1e-9)
    assert added[0] == pytest.approx(150.0, rel=1e-9)

