"""`cxlsim replay --cpus N --cpu-foreign W,...`: other processes on the traced run's CPUs (cxlsim.replay.cpu_sharing),
one always-runnable task per CPU of their measured weight, against hand sums on tiny traces (ns; host speed 1e9
flop/s, so a compute of n flops is n ns); and the measurement of that weight (cxlsim.replay.rank_cpus)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cxlsim.errors import InputError
from cxlsim.replay import cli, engine, fabrics, simgrid
from cxlsim.replay.cpu_sharing import CPUSharing
from cxlsim.replay.pool_profile import read_library_stats
from cxlsim.replay.rank_cpus import NICE_WEIGHT, RankCPUs
from fabric.transport import RunError

MS = 1e6


def trace_of(write_trace, tmp_path, per_rank, name="trace"):
    return simgrid.read(write_trace(tmp_path / name, dict(enumerate(per_rank))), 1e9)


HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL = os.path.join(HERE, "data", "local_host_profile_np2.json")


def replay(trace, sharing=None, spec="ib-hdr", **kw):
    fab = fabrics.resolve(spec, trace.size, trace=trace, **kw)
    return engine.replay(trace, fab.make(), priced=fab.priced, sharing=sharing)


@pytest.mark.parametrize("weight, finish_ms, switches", [(0.0, 3, 0), (0.5, 4, 1), (1.0, 5, 2), (2.0, 8, 2)])
def test_other_tasks_take_a_computing_rank_s_cpu_by_their_weight(tmp_path, write_trace, weight, finish_ms,
                                                                 switches):
    """3 ms of compute, slice 1 ms, one CPU; the other task joins at 0 (v 0, deadline 1 ms / W) behind the rank's
    first slice [0, 1]. W 1: other [1, 2], rank [2, 3], other [3, 4], rank [4, 5]: 5 ms, switched away twice.
    W 0.5 (its CPU time counts double): other [1, 2] (v 2, above the weighted mean 4/3), rank [2, 4]: 4 ms, once.
    W 2 (counts half): other [1, 4] (three slices: the rank is not eligible, then its deadline is later), rank
    [4, 5], other [5, 7], rank [7, 8]: 8 ms, twice. W 0: no task, 3 ms. The rank's CPU time is its 3 ms."""
    trace = trace_of(write_trace, tmp_path, [[f"compute {3 * MS:.0f}"]])
    t = replay(trace, CPUSharing(1, 1 * MS, 1e3, 1e3, foreign=(weight,)))
    assert t.finish_ns == pytest.approx([finish_ms * MS], rel=1e-12)
    assert sum(e - s for s, e, kind, _, _ in t.segments[0] if kind == "compute") == pytest.approx(3 * MS)
    assert t.cpu_ns == pytest.approx([3 * MS]) and t.switches == [switches]


def test_a_rank_that_yields_in_a_wait_hands_its_cpu_to_the_other_task_for_its_slice(tmp_path, write_trace):
    """Two ranks on two CPUs, another task of weight 1 on rank 0's, slice S = 2 ms, MPI yield h = 100 us. Rank 0
    sends (ends at t_sent; the other waits for the CPU: the rank polls, not in work), then polls in its receive;
    rank 1 computes 500 us before it replies, so rank 0 yields at t_sent + h: its CPU time is above the mean,
    nothing to forfeit, and the other runs its slice to t_sent + h + S, then rank 0 (below the mean now) polls once,
    as MPICH does, seeing the reply that came while it was off the CPU, yields (eligible: it keeps the CPU) and
    ends at t_sent + 2h + S. Without the other task: 2 t_recv + 500 us."""
    one = replay(trace_of(write_trace, tmp_path, [["send 1 0 1000"], ["recv 0 0 1000"]], "one"))
    t_sent, t_recv = one.segments[0][0][1], one.segments[1][0][1]
    trace = trace_of(write_trace, tmp_path, [["send 1 0 1000", "recv 1 0 1000"],
                                             ["recv 0 0 1000", "compute 500000", "send 0 0 1000"]])
    h, s = 100e3, 2 * MS
    alone = replay(trace, CPUSharing(2, s, h, 1e3))
    assert alone.finish_ns[0] == pytest.approx(2 * t_recv + 500e3, rel=1e-9)
    loaded = replay(trace, CPUSharing(2, s, h, 1e3, foreign=(1.0, 0.0)))
    assert loaded.finish_ns[0] == pytest.approx(t_sent + 2 * h + s, rel=1e-12)
    assert loaded.finish_ns[1] == pytest.approx(alone.finish_ns[1], rel=1e-12)  # its CPU has no other task
    assert loaded.switches == [1, 0] and alone.switches == [0, 0]


def test_the_library_s_pool_wait_spins_before_it_yields_where_the_ranks_do_not_outnumber_the_cpus(
        tmp_path, write_trace, network_profile, library_stats_text):
    """Two ranks on two CPUs, another task of weight 1 on rank 0's, slice S = 2 ms, pool yield h = 10 us, the
    barrier priced B by the local-host profile; rank 1 computes 500 us first. Without a spin rank 0 yields at h
    (its CPU time above the mean: nothing to forfeit), the other runs its slice, and rank 0 runs its kernel after
    it: h + S + B. Spinning 1 ms first (the library's 4096 polls where ranks <= CPUs), rank 0 is still spinning
    when rank 1 arrives at 500 us and never yields: 500 us + B, as with a CPU to itself. At np 3 on 2 CPUs the
    library does not spin, nor does the model."""
    trace = trace_of(write_trace, tmp_path, [["barrier"], ["compute 500000", "barrier"]])
    stats = tmp_path / "stats.txt"
    stats.write_text(library_stats_text({"MPI_Barrier": (2, 2, 0)}))
    spec = f"{network_profile(tmp_path)}+{LOCAL}"
    kw = {"library_stats": read_library_stats(str(stats))}
    b = fabrics.resolve(spec, 2, trace=trace, **kw).priced.cost_ns("barrier", 0)
    h, s = 10e3, 2 * MS
    yields = replay(trace, CPUSharing(2, s, 1e3, h, foreign=(1.0, 0.0)), spec, **kw)
    assert yields.finish_ns == pytest.approx([h + s + b, 500e3 + b], rel=1e-12)
    spins = replay(trace, CPUSharing(2, s, 1e3, h, foreign=(1.0, 0.0), pool_spin_ns=1 * MS), spec, **kw)
    assert spins.finish_ns == pytest.approx([500e3 + b] * 2, rel=1e-12) and spins.switches == [0, 0]
    assert "a pool wait spinning 1000 us first" in CPUSharing(2, s, 1e3, h, pool_spin_ns=1 * MS).describe(2)


def test_a_stuck_replay_beside_another_task_ends_with_the_ranks_it_names(tmp_path, write_trace):
    """A receive nothing matches, with another task beside it: the task stops after its idle slices, and the
    replay reports the stuck rank instead of running on."""
    trace = trace_of(write_trace, tmp_path, [["recv 1 5 8"], ["compute 1000"]])
    with pytest.raises(RunError, match=r"ranks \[0\]"):
        replay(trace, CPUSharing(1, 0.1 * MS, 1e3, 1e3, foreign=(1.0,)))


@pytest.mark.parametrize("argv, message", [
    (["--cpu-foreign", "1"], "--cpu-foreign: a figure of CPU sharing"),
    (["--cpus", "2", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign", "1,x"],
     "--cpu-foreign: expected comma-separated weights"),
    (["--cpus", "2", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign", "1"],
     r"--cpu-foreign: expected one weight >= 0 per CPU \(2\)"),
    (["--cpus", "1", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign", "-1"],
     r"--cpu-foreign: expected one weight >= 0"),
    (["--cpus", "1", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-foreign", "inf"],
     r"--cpu-foreign: expected one weight >= 0"),
    (["--pool-spin", "105us"], "--pool-spin: a figure of CPU sharing"),
])
def test_a_bad_foreign_weight_is_refused_naming_the_flag(argv, message, replay_args):
    args = replay_args("T", "--fabric", "ib-hdr", *argv)
    with pytest.raises(InputError, match=message):
        cli.cpu_sharing(args)


def test_the_cli_carries_the_foreign_weights_into_the_model_and_its_line(replay_args):
    args = replay_args("T", "--fabric", "ib-hdr", "--cpus", "2", "--cpu-slice", "2ms", "--mpi-yield", "2us",
                       "--pool-yield", "2us", "--cpu-foreign", "0.25,0")
    sharing = cli.cpu_sharing(args)
    assert sharing.foreign == (0.25, 0.0) and sharing.foreign_tasks() == [(0, 0.25)]
    assert "other runnable tasks of weight 0.25, 0.00 nice-0 tasks per CPU" in sharing.describe(4)


def test_the_nice_weights_are_linux_s():
    assert NICE_WEIGHT[0] == 1024 and NICE_WEIGHT[15] == 36 and NICE_WEIGHT[-20] == 88761 and NICE_WEIGHT[19] == 15
    assert all(NICE_WEIGHT[n] > NICE_WEIGHT[n + 1] for n in range(-20, 19))


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not hasattr(os, "sched_setaffinity"), reason="needs 2 CPUs")
def test_a_busy_process_beside_a_rank_is_weighed_as_the_cpu_s_other_task():
    """A rank (PMI_RANK 0) busy on CPU 0 for 1 s beside a busy process without a rank number pinned there too:
    every weighing finds that process runnable on CPU 0, so CPU 0's mean weight is at least about that process's
    weight (its nice level's; more when other jobs run there as well); the rank was switched away."""
    busy = ("import os, sys, time; os.sched_setaffinity(0, {0}); t = time.time()\n"
            "while time.time() - t < 1.0: pass")
    script = (f"import os, subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {busy!r}], "
              f"env=dict(os.environ, PMI_RANK='0')); p.wait()")
    outsider = subprocess.Popen([sys.executable, "-c", busy])
    weight = NICE_WEIGHT[os.getpriority(os.PRIO_PROCESS, outsider.pid)] / 1024
    try:
        proc = subprocess.Popen([sys.executable, "-c", script])
        with RankCPUs(proc.pid, interval_s=0.01, others_every=2) as seen:
            assert proc.wait(timeout=60) == 0
    finally:
        outsider.wait(timeout=60)
    assert seen.cpu_map(1) == (0,)
    rank = seen.sched[0]
    assert 0 < rank.cpu_ns and rank.switches > 0
    assert seen.foreign_weight(2)[0] >= 0.8 * weight
