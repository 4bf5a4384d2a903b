"""`cxlsim replay --cpus N --cpu-foreign ...`: other processes on the traced run's CPUs (cxlsim.replay.cpu_sharing),
one task per CPU of the measured share, against hand sums on tiny traces (ns; host speed 1e9 flop/s, so a compute
of n flops is n ns); and the measurement of that share (cxlsim.replay.rank_cpus)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from cxlsim.errors import InputError
from cxlsim.replay import cli, engine, fabrics, simgrid
from cxlsim.replay.cpu_sharing import CPUSharing
from cxlsim.replay.rank_cpus import RankCPUs
from fabric.transport import RunError

MS = 1e6


def trace_of(write_trace, tmp_path, per_rank, name="trace"):
    return simgrid.read(write_trace(tmp_path / name, dict(enumerate(per_rank))), 1e9)


def replay(trace, sharing=None):
    fab = fabrics.resolve("ib-hdr", trace.size, trace=trace)
    return engine.replay(trace, fab.make(), priced=fab.priced, sharing=sharing)


@pytest.mark.parametrize("share, finish_ms, switches", [(0.0, 3, 0), (0.5, 4, 1), (1.0, 5, 2)])
def test_other_processes_take_their_share_of_a_computing_rank_s_cpu_by_slices(tmp_path, write_trace, share,
                                                                              finish_ms, switches):
    """3 ms of compute, slice 1 ms, one CPU. Share 1: the other task joins at 0 with no lag and waits for the
    rank's slice; rank [0, 1], other [1, 2], rank [2, 3], other [3, 4], rank [4, 5]: 5 ms, switched away twice.
    Share 0.5: the other sleeps half of 1 ms * 0.5 / 0.5 first, joins at 0.5 ms (v 0.5, deadline 1.5), runs at
    the rank's first deadline [1, 2] and sleeps 1 ms owing 0.25 ms (v 1.5 above the mean 1.25); it rejoins at 3
    behind the rank (v 2.25 against 2), which ends [2, 4]: 4 ms, switched away once. Share 0: 3 ms. The rank's CPU time is its 3 ms each time."""
    trace = trace_of(write_trace, tmp_path, [[f"compute {3 * MS:.0f}"]])
    t = replay(trace, CPUSharing(1, 1 * MS, 1e3, 1e3, foreign=(share,)))
    assert t.finish_ns == pytest.approx([finish_ms * MS], rel=1e-12)
    assert sum(e - s for s, e, kind, _, _ in t.segments[0] if kind == "compute") == pytest.approx(3 * MS)
    assert t.cpu_ns == pytest.approx([3 * MS]) and t.switches == [switches]


def test_other_processes_in_short_turns_wait_for_a_computing_rank_s_deadlines(tmp_path, write_trace):
    """3 ms of compute, slice 1 ms, share 0.5 in turns of 0.25 ms (sleeps of 0.25 ms): the other joins at 0.125
    (v 0.125) and runs at the rank's deadlines only (each time eligible: its lag kept across its sleeps): [1, 1.25],
    then the rank's next deadline comes at 2.25 (v 2), [2.25, 2.5], and the rank's 3 ms end at 3.5 ms with its
    third deadline, switched away twice. A computing rank is preempted at its slice's end, so the other gets
    0.5 of 3.5 ms, below its share."""
    trace = trace_of(write_trace, tmp_path, [[f"compute {3 * MS:.0f}"]])
    t = replay(trace, CPUSharing(1, 1 * MS, 1e3, 1e3, foreign=(0.5,), foreign_turn_ns=0.25 * MS))
    assert t.finish_ns == pytest.approx([3.5 * MS], rel=1e-12) and t.switches == [2]
    assert "in turns of 250 us" in CPUSharing(1, 1 * MS, 1e3, 1e3, foreign=(0.5,), foreign_turn_ns=0.25 * MS
                                              ).describe(1)


def test_a_rank_that_yields_in_a_wait_hands_its_cpu_to_the_other_processes_for_their_slice(tmp_path, write_trace):
    """Two ranks on two CPUs, a CPU-bound other process on rank 0's (share 1), slice S = 2 ms, MPI yield h =
    100 us. Rank 0 sends (ends at t_sent; the other waits for the CPU, the rank polls, not in work), then polls
    in its receive; rank 1 computes 500 us before it replies, so rank 0 yields at t_sent + h: its CPU time is
    above the mean, nothing to forfeit, and the other runs its slice to t_sent + h + S, then rank 0 (below the
    mean now) takes its reply and ends. Without the other process: 2 t_recv + 500 us."""
    one = replay(trace_of(write_trace, tmp_path, [["send 1 0 1000"], ["recv 0 0 1000"]], "one"))
    t_sent, t_recv = one.segments[0][0][1], one.segments[1][0][1]
    trace = trace_of(write_trace, tmp_path, [["send 1 0 1000", "recv 1 0 1000"],
                                             ["recv 0 0 1000", "compute 500000", "send 0 0 1000"]])
    h, s = 100e3, 2 * MS
    alone = replay(trace, CPUSharing(2, s, h, 1e3))
    assert alone.finish_ns[0] == pytest.approx(2 * t_recv + 500e3, rel=1e-9)
    loaded = replay(trace, CPUSharing(2, s, h, 1e3, foreign=(1.0, 0.0)))
    assert loaded.finish_ns[0] == pytest.approx(t_sent + h + s, rel=1e-12)
    assert loaded.finish_ns[1] == pytest.approx(alone.finish_ns[1], rel=1e-12)  # its CPU has no other process
    assert loaded.switches == [1, 0] and alone.switches == [0, 0]
    assert loaded.cpu_ns[0] == pytest.approx(t_sent + h + (loaded.finish_ns[0] - (t_sent + h + s)), abs=1.0)


def test_a_stuck_replay_with_other_processes_ends_with_the_ranks_it_names(tmp_path, write_trace):
    """A receive nothing matches, with a CPU-bound other process beside it: the other process stops after its
    idle bursts, and the replay reports the stuck rank instead of running on."""
    trace = trace_of(write_trace, tmp_path, [["recv 1 5 8"], ["compute 1000"]])
    with pytest.raises(RunError, match=r"ranks \[0\]"):
        replay(trace, CPUSharing(1, 0.1 * MS, 1e3, 1e3, foreign=(1.0,)))


@pytest.mark.parametrize("argv, message", [
    (["--cpu-foreign", "10"], "--cpu-foreign: a figure of CPU sharing"),
    (["--cpus", "2", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign", "10,x"],
     "--cpu-foreign: expected comma-separated percentages"),
    (["--cpus", "2", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign", "10"],
     r"--cpu-foreign: expected one share in 0..1 per CPU \(2\)"),
    (["--cpus", "1", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign", "150"],
     r"--cpu-foreign: expected one share in 0..1"),
    (["--cpus", "1", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign-turn", "1ms"],
     r"--cpu-foreign-turn: the other processes' turn, for --cpu-foreign"),
    (["--cpus", "1", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign", "10",
      "--cpu-foreign-turn", "0us"], r"--cpu-foreign-turn: expected a time > 0"),
])
def test_a_bad_foreign_share_is_refused_naming_the_flag(argv, message):
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["replay", "T", "--fabric", "ib-hdr", *argv])
    with pytest.raises(InputError, match=message):
        cli.cpu_sharing(args)


def test_the_cli_carries_the_foreign_shares_into_the_model_and_its_line():
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["replay", "T", "--fabric", "ib-hdr", "--cpus", "2", "--cpu-slice", "2ms",
                              "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign", "25,0"])
    sharing = cli.cpu_sharing(args)
    assert sharing.foreign == (0.25, 0.0) and sharing.foreign_tasks() == [(0, 0.25)]
    assert "other processes took 25%, 0% of the CPUs" in sharing.describe(4)


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not hasattr(os, "sched_setaffinity"), reason="needs 2 CPUs")
def test_a_busy_process_beside_a_rank_is_measured_as_the_cpu_s_foreign_share():
    """A rank (PMI_RANK 0) busy on CPU 0 for 1 s beside a busy process without a rank number pinned there too:
    they share CPU 0, so its busy time less the rank's CPU time is at least about half the wall time (more when
    other jobs run there as well); the rank's CPU time is within the wall time, and it was switched away."""
    busy = ("import os, sys, time; os.sched_setaffinity(0, {0}); t = time.time()\n"
            "while time.time() - t < 1.0: pass")
    script = (f"import os, subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {busy!r}], "
              f"env=dict(os.environ, PMI_RANK='0')); p.wait()")
    outsider = subprocess.Popen([sys.executable, "-c", busy])
    try:
        proc = subprocess.Popen([sys.executable, "-c", script])
        with RankCPUs(proc.pid, interval_s=0.01) as seen:
            assert proc.wait(timeout=60) == 0
    finally:
        outsider.wait(timeout=60)
    if not seen.busy_ns:
        pytest.skip("no /proc/stat")
    assert seen.cpu_map(1) == (0,)
    rank = seen.sched[0]
    assert 0 < rank.cpu_ns <= seen.wall_ns and rank.switches > 0
    assert seen.foreign_share(1)[0] >= 0.35
