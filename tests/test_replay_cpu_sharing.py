"""`cxlsim replay --cpus N`: ranks sharing the traced run's CPUs (cxlsim.replay.cpu_sharing), against hand sums
on tiny traces (ns; host speed 1e9 flop/s, so a compute of n flops is n ns)."""
from __future__ import annotations

import argparse
import os

import pytest

from cxlsim.errors import InputError
from cxlsim.replay import cli, engine, fabrics, simgrid
from cxlsim.replay.cpu_sharing import CPUSharing
from cxlsim.replay.pool_profile import read_library_stats
from cxlsim.replay.rank_cpus import RankCPUs, run_seeing_cpus

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL = os.path.join(HERE, "data", "local_host_profile_np2.json")
MS = 1e6


def trace_of(write_trace, tmp_path, per_rank, name="trace"):
    return simgrid.read(write_trace(tmp_path / name, dict(enumerate(per_rank))), 1e9)


def replay(trace, sharing=None, spec="ib-hdr", **kw):
    fab = fabrics.resolve(spec, trace.size, trace=trace, **kw)
    return engine.replay(trace, fab.make(), priced=fab.priced, sharing=sharing)


def test_two_computing_ranks_on_one_cpu_take_turns_by_slices(tmp_path, write_trace):
    """5 ms and 3 ms of compute, slice 2 ms, one CPU: rank 0 runs [0, 2], rank 1 [2, 4], rank 0 [4, 6],
    rank 1 [6, 7] and ends, rank 0 [7, 8]; rank 1 waited 4 ms for the CPU."""
    trace = trace_of(write_trace, tmp_path, [[f"compute {5 * MS:.0f}"], [f"compute {3 * MS:.0f}"]])
    t = replay(trace, CPUSharing(1, 2 * MS, 1e3, 1e3))
    assert t.finish_ns == pytest.approx([8 * MS, 7 * MS], rel=1e-12)
    assert [s[2] for s in t.segments[1]] == ["descheduled", "descheduled", "compute"]
    assert [s[:2] for s in t.segments[1]] == [(0.0, 2 * MS), (2 * MS, 4 * MS), (4 * MS, 7 * MS)]
    assert [s[2] for s in t.segments[0]] == ["descheduled", "compute"]
    assert [x for s in t.segments[0] for x in s[:2]] == pytest.approx([0.0, 3 * MS, 3 * MS, 8 * MS])
    assert any("ranks share CPUs" in note for note in t.notes)
    # a CPU each: nothing is shared, the replay is the unshared one
    assert replay(trace, CPUSharing(2, 2 * MS, 1e3, 1e3)).finish_ns == replay(trace).finish_ns == \
        pytest.approx([5 * MS, 3 * MS])


def test_a_ping_pong_on_one_cpu_pays_the_waiting_ranks_polls_before_it_yields(tmp_path, write_trace):
    """One CPU, MPI yield h = 100 us, much longer than a message: rank 0 sends (a send's end is its own: it goes on
    at t_sent), polls in its receive and yields at t_sent + h (ahead of rank 1: it hands over); rank 1's receive
    finds the message, which landed before it began, at its first poll, and yields at t_sent + 2h (behind rank 0:
    it keeps the CPU), replies (goes on at + t_sent) and ends; rank 0, alone now, takes the reply as it lands at
    t_sent + 2h + t_recv. t_sent, t_recv: the send's and receive's ends of one message."""
    one = replay(trace_of(write_trace, tmp_path, [["send 1 0 1000"], ["recv 0 0 1000"]], "one"))
    t_sent, t_recv = one.segments[0][0][1], one.segments[1][0][1]
    assert 0 < t_sent < t_recv < 10e3
    h = 100e3
    trace = trace_of(write_trace, tmp_path, [["send 1 0 1000", "recv 1 0 1000"],
                                             ["recv 0 0 1000", "send 0 0 1000"]])
    shared = replay(trace, CPUSharing(1, 2 * MS, h, 1e3))
    assert shared.finish_ns == pytest.approx([t_sent + 2 * h + t_recv, t_sent + 2 * h + t_sent], rel=1e-12)
    free = replay(trace, CPUSharing(2, 2 * MS, h, 1e3))
    assert free.finish_ns == pytest.approx(replay(trace).finish_ns, rel=1e-12)
    assert free.finish_ns[0] == pytest.approx(2 * t_recv, rel=1e-12)


def test_a_pool_barrier_on_one_cpu_hands_over_at_the_pool_yield_and_runs_its_kernel_by_turns(
        tmp_path, write_trace, network_profile, library_stats_text):
    """The library's barrier priced by the local-host profile (kernel time B), one CPU, pool yield hp: rank 0
    computes a, polls in the barrier and yields at a + hp; rank 1 computes b, enters last, runs the kernel and
    ends at a + hp + b + B; rank 0 then gets the CPU back and runs its kernel: a + hp + b + 2B."""
    a, b, hp = 30e3, 50e3, 7e3
    trace = trace_of(write_trace, tmp_path, [[f"compute {a:.0f}", "barrier"], [f"compute {b:.0f}", "barrier"]])
    stats = tmp_path / "stats.txt"
    stats.write_text(library_stats_text({"MPI_Barrier": (2, 2, 0)}))
    spec = f"{network_profile(tmp_path)}+{LOCAL}"
    barrier = fabrics.resolve(spec, 2, trace=trace).priced.cost_ns("barrier", 0)  # its price: test_replay_pool_profile
    assert barrier > 0
    t = replay(trace, CPUSharing(1, 2 * MS, 1e6, hp), spec, library_stats=read_library_stats(str(stats)))
    assert t.finish_ns == pytest.approx([a + hp + b + 2 * barrier, a + hp + b + barrier], rel=1e-12)
    unshared = replay(trace, None, spec, library_stats=read_library_stats(str(stats)))
    assert unshared.finish_ns == pytest.approx([b + barrier] * 2, rel=1e-12)


def test_the_large_pool_allreduce_hands_the_cpu_over_at_each_of_its_two_waits(
        tmp_path, write_trace, network_profile, library_stats_text):
    """The library's 64 KiB allreduce (the large algorithm: a wait for every rank after its reduce-scatter and
    after its gather) priced by the local-host profile (kernel time C, C / 2 after each wait), one CPU, pool
    yield hp: rank 0 computes a, polls at the first wait and yields at a + hp (no forfeit: it has more CPU
    time than the mean); rank 1 computes b, enters last, runs C / 2 and polls at the second wait, yields at
    a + hp + b + C / 2 + hp; rank 0 runs its C / 2, finds every rank at the second wait and runs its last C / 2:
    a + 2hp + b + 1.5C; rank 1 then ends at a + 2hp + b + 2C."""
    a, b, hp = 30e3, 50e3, 7e3
    size = 64 << 10
    per_rank = [[f"compute {a:.0f}", f"allreduce {size} 0"], [f"compute {b:.0f}", f"allreduce {size} 0"]]
    trace = trace_of(write_trace, tmp_path, per_rank)
    stats = tmp_path / "stats.txt"
    stats.write_text(library_stats_text({"MPI_Allreduce": (2, 2, 0)}))
    spec = f"{network_profile(tmp_path)}+{LOCAL}"
    fab = fabrics.resolve(spec, 2, trace=trace, library_stats=read_library_stats(str(stats)))
    cost = fab.priced.cost_ns("allreduce", size)
    assert 0 < cost < 1 * MS and len(fab.priced.plan(trace.ranks[0][-1], 2).steps) == 2
    t = replay(trace, CPUSharing(1, 2 * MS, 1e6, hp), spec, library_stats=read_library_stats(str(stats)))
    assert t.finish_ns == pytest.approx([a + 2 * hp + b + 1.5 * cost, a + 2 * hp + b + 2 * cost], rel=1e-12)
    # a CPU each: one wait, the kernel after it
    unshared = replay(trace, None, spec, library_stats=read_library_stats(str(stats)))
    assert unshared.finish_ns == pytest.approx([b + cost] * 2, rel=1e-12)


def run(argv):
    parser = argparse.ArgumentParser(prog="cxlsim")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["replay", *argv])
    return args.func(args)


FIGURES = ["--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us"]


@pytest.mark.parametrize("argv, message", [
    (["--cpus", "0", *FIGURES], r"--cpus: expected a positive integer \(the traced run's CPUs\), got 0"),
    (["--cpus", "1.5", *FIGURES], r"--cpus: expected a positive integer"),
    (["--cpus", "two", *FIGURES], r"--cpus: expected a positive integer"),
    (["--cpus", "1"], r"--cpus: also give --cpu-slice, --mpi-yield, --pool-yield"),
    (["--cpu-slice", "2ms"], r"--cpu-slice: a figure of CPU sharing, for --cpus N"),
    (["--cpus", "1", "--cpu-slice", "0ms", "--mpi-yield", "2us", "--pool-yield", "2us"], r"--cpu-slice: expected a time > 0"),
    (["--cpus", "1", "--cpu-slice", "2", "--mpi-yield", "2us", "--pool-yield", "2us"], r"--cpu-slice: .*time with a unit"),
])
def test_bad_cpu_sharing_options_are_refused_naming_the_flag(tmp_path, write_trace, argv, message):
    directory = write_trace(tmp_path / "t", {0: ["compute 10"], 1: ["compute 10"]})
    with pytest.raises(InputError, match=message):
        run([str(directory), "--fabric", "ib-hdr", "--trace-host-speed", "1Gf", "--no-plots",
             "--output", str(tmp_path / "out"), *argv])


def test_cpu_sharing_on_a_pool_is_refused_and_the_fabric_line_says_it(tmp_path, write_trace, capsys):
    directory = write_trace(tmp_path / "t", {0: ["compute 1000"], 1: ["compute 1000"]})
    base = [str(directory), "--trace-host-speed", "1Gf", "--no-plots", "--cpus", "1", *FIGURES]
    with pytest.raises(InputError, match=r"--cpus: .* this fabric is a pool or pods"):
        run([*base, "--fabric", "cxl3-pool", "--output", str(tmp_path / "pool")])
    assert run([*base, "--fabric", "ib-hdr", "--output", str(tmp_path / "net")]) == 0
    assert ("CPU sharing: 2 ranks on 1 CPUs (up to 2 per CPU; rank r on CPU r % 1), EEVDF by CPU time, slice "
            "2000 us") in capsys.readouterr().out


def test_a_collective_run_as_network_messages_polls_once_and_sees_its_end_at_a_yield(tmp_path, write_trace):
    """ib-hdr, an 8-byte allreduce (MPICH's algorithm as messages) after 1 ms and 2 ms of compute on one CPU, slice
    10 ms, MPI yield h = 100 us (longer than the call): rank 0 computes [0, 1], polls and yields at 1 + h (it has
    more CPU time than the mean: no forfeit), rank 1 computes [1 + h, 3 + h] and enters last; the call's
    messages run as on a CPU each, so it ends A_r after the last entry (A_r from the unshared replay, whose last
    entry is at 2 ms, both below h). As MPICH does, rank 1 sees its end at its next poll and yields at 3 + 2h
    (ahead: it hands over, its call done); rank 0, whose call ended while it was off the CPU, polls once and
    yields at 3 + 3h (behind: it keeps the CPU) and ends there; then rank 1 runs on and ends: both at 3 + 3h."""
    per_rank = [[f"compute {1 * MS:.0f}", "allreduce 8 0"], [f"compute {2 * MS:.0f}", "allreduce 8 0"]]
    trace = trace_of(write_trace, tmp_path, per_rank)
    unshared = replay(trace)
    after_last = [end - 2 * MS for end in unshared.finish_ns]
    h = 100e3
    assert 0 < min(after_last) and max(after_last) < h
    t = replay(trace, CPUSharing(1, 10 * MS, h, 1e3))
    a0, a1 = after_last
    assert max(a0, a1) < h
    assert t.finish_ns == pytest.approx([3 * MS + 3 * h, 3 * MS + 3 * h], rel=1e-12)
    assert [seg[:3] for seg in t.segments[1][:2]] == [(0.0, 1 * MS + h, "descheduled"),
                                                      (1 * MS + h, 3 * MS + h, "compute")]
    assert t.algorithms["allreduce"] == unshared.algorithms["allreduce"] != ["local-host profile"]


def test_a_rank_that_yields_while_owed_cpu_time_forfeits_its_slice_only_within_one_group(tmp_path, write_trace):
    """EEVDF, one CPU, slice S = 2 ms, MPI yield h = 10 us, the ranks in one scheduling group (`yield_forfeits`:
    one session under autogroup). Rank 0: compute 1 ms, receive from 1, compute 1.5 ms;
    rank 1: compute 3 ms, send to 0, compute 1 ms. By CPU time v and deadline d (both start at v 0, d S):
    - rank 0 computes [0, 1], polls, yields at 1 + h (v0 1 + h, above the mean: no forfeit): rank 1 runs;
    - rank 1 reaches its deadline at 3 + h (v1 2, d1 4): rank 0 (v0 1 + h, eligible) is picked, still
      waiting: it polls, yields at 3 + 2h, eligible (the mean is 1.5 + h), so it forfeits: v0 = d0 = 2, d0 4;
    - tie at v 2 and d 4: rank 1 (not the one that ran) finishes its 3 ms at 4 + 2h, sends (local end t_sent),
      computes to its deadline at 5 + 2h (v1 4, d1 6): rank 0 (v0 2) runs; its message came while it was off the
      CPU, so, as MPICH does, it polls once, seeing it, and yields at 5 + 3h (v0 2 + h, eligible): it forfeits
      (v0 = d0 = 4, d0 6), and on the tie at v 4 and d 6 rank 1 runs the t_sent it has left and ends at 5 + 3h +
      t_sent; rank 0 runs again, its receive returns there, and it computes 1.5 ms to 6.5 + 3h + t_sent. (Without the
      forfeit rank 0, v0 1 + 2h, would have had 1 ms of lag left.)
    Each rank in its own session (the default, as MPICH's launcher starts them): the same until 3 + h; rank 0's
    yields then move nothing while it is eligible and inside its slice, so it polls to its deadline at 4 (v0 2,
    d0 4); tie at v 2 and d 4: rank 1 finishes its 3 ms at 5, sends, computes to its deadline at 6 (v1 4, d1 6);
    rank 0 (v0 2) runs, polls once, seeing the message, and yields at 6 + h (eligible: it keeps the CPU); its
    receive ends at 6 + h, it computes 1.5 ms and ends at 7.5 + h; rank 1 then at 7.5 + h + t_sent."""
    one = replay(trace_of(write_trace, tmp_path, [["send 1 0 8"], ["recv 0 0 8"]], "one"))
    t_sent = one.segments[0][0][1]
    h = 10e3
    assert 0 < t_sent < h
    trace = trace_of(write_trace, tmp_path, [[f"compute {1 * MS:.0f}", "recv 1 0 8", f"compute {1.5 * MS:.0f}"],
                                             [f"compute {3 * MS:.0f}", "send 0 0 8", f"compute {1 * MS:.0f}"]])
    t = replay(trace, CPUSharing(1, 2 * MS, h, 1e3, yield_forfeits=True))
    assert t.finish_ns == pytest.approx([6.5 * MS + 3 * h + t_sent, 5 * MS + 3 * h + t_sent], rel=1e-12)
    recv = [seg for seg in t.segments[0] if seg[2] == "recv"][0]
    assert recv[:2] == pytest.approx((1 * MS, 5 * MS + 3 * h + t_sent), rel=1e-12)
    own = replay(trace, CPUSharing(1, 2 * MS, h, 1e3))
    assert own.finish_ns == pytest.approx([7.5 * MS + h, 7.5 * MS + h + t_sent], rel=1e-12)
    recv = [seg for seg in own.segments[0] if seg[2] == "recv"][0]
    assert recv[:2] == pytest.approx((1 * MS, 6 * MS + h), rel=1e-12)


def test_the_eligible_rank_of_least_cpu_time_runs_first_among_three(tmp_path, write_trace):
    """One CPU, slice S = 1 ms, three ranks computing 1, 2 and 0.5 ms: rank 0 runs [0, 1] and ends; ranks 1 and 2
    (v 0, d S) tie on the deadline: rank 1 (lower) runs [1, 2] to its deadline (v1 1, d1 2); rank 2 (v2 0, the
    only eligible: the mean is 0.5) runs [2, 2.5] and ends; rank 1 runs [2.5, 3.5]."""
    trace = trace_of(write_trace, tmp_path, [[f"compute {1 * MS:.0f}"], [f"compute {2 * MS:.0f}"],
                                             [f"compute {0.5 * MS:.0f}"]])
    t = replay(trace, CPUSharing(1, 1 * MS, 1e3, 1e3))
    assert t.finish_ns == pytest.approx([1 * MS, 3.5 * MS, 2.5 * MS], rel=1e-12)


def test_a_sleeping_rank_leaves_the_run_queue_and_rejoins_with_its_lag(tmp_path, write_trace):
    """One CPU, slice 2 ms. Rank 0 sleeps 1 ms (lag 0: it leaves), then computes 1 ms; rank 1 computes 3 ms. Rank 1
    runs from 0; rank 0 rejoins at 1 ms with the mean CPU time (v0 1 ms, d0 3 ms); rank 1 reaches its deadline
    at 2 ms (v1 2, d1 4): rank 0 (eligible) computes [2, 3] and ends; rank 1 runs [3, 4]. (The sleep's call
    lasts until its rank has its CPU back, as every wait's does.)"""
    trace = trace_of(write_trace, tmp_path, [["sleep 0.001", f"compute {1 * MS:.0f}"], [f"compute {3 * MS:.0f}"]])
    t = replay(trace, CPUSharing(1, 2 * MS, 1e3, 1e3))
    assert t.finish_ns == pytest.approx([3 * MS, 4 * MS], rel=1e-12)
    assert [seg[:3] for seg in t.segments[0]] == [(0.0, 2 * MS, "sleep"), (2 * MS, 3 * MS, "compute")]


def test_the_cpu_map_puts_the_ranks_where_the_run_had_them(tmp_path, write_trace, capsys):
    """3 ms of compute per rank, 2 CPUs, slice 2 ms. By default rank r is on CPU r % 2: ranks 0 and 2 share CPU 0
    (rank 0 [0, 2], rank 2 [2, 4], rank 0 [4, 5], rank 2 [5, 6]), rank 1 is alone (3). With --cpu-map 0,0,1 ranks 0
    and 1 share it: 5, 6 and 3 ms."""
    directory = write_trace(tmp_path / "t", {r: [f"compute {3 * MS:.0f}"] for r in range(3)})
    trace = simgrid.read(directory, 1e9)
    assert replay(trace, CPUSharing(2, 2 * MS, 1e3, 1e3)).finish_ns == pytest.approx([5 * MS, 3 * MS, 6 * MS])
    mapped = CPUSharing(2, 2 * MS, 1e3, 1e3, (0, 0, 1))
    assert replay(trace, mapped).finish_ns == pytest.approx([5 * MS, 6 * MS, 3 * MS])
    assert "3 ranks on 2 CPUs (up to 2 per CPU; ranks on CPUs 0,0,1 (--cpu-map))" in mapped.describe(3)
    out = tmp_path / "out"
    assert run([directory, "--fabric", "ib-hdr", "--trace-host-speed", "1Gf", "--no-plots", "--output", str(out),
                "--cpus", "2", "--cpu-map", "0,0,1", *FIGURES]) == 0
    assert "ranks on CPUs 0,0,1 (--cpu-map)" in capsys.readouterr().out
    with pytest.raises(InputError, match=r"--cpu-map: 2 CPUs given, one per rank expected: the trace has 3 ranks"):
        replay(trace, CPUSharing(2, 2 * MS, 1e3, 1e3, (0, 1)))


@pytest.mark.parametrize("argv, message", [
    (["--cpus", "2", "--cpu-map", "0,2,1", *FIGURES], r"--cpu-map: expected one CPU in 0..1 per rank, got \[0, 2, 1\]"),
    (["--cpus", "2", "--cpu-map", "0,x,1", *FIGURES], r"--cpu-map: expected comma-separated CPU numbers"),
    (["--cpu-map", "0,1,0"], r"--cpu-map: a figure of CPU sharing, for --cpus N"),
])
def test_a_bad_cpu_map_is_refused_naming_the_flag(tmp_path, write_trace, argv, message):
    directory = write_trace(tmp_path / "t", {r: ["compute 10"] for r in range(3)})
    with pytest.raises(InputError, match=message):
        run([str(directory), "--fabric", "ib-hdr", "--trace-host-speed", "1Gf", "--no-plots",
             "--output", str(tmp_path / "out"), *argv])


def test_slices_late_in_a_long_run_end_although_the_clock_rounds_cpu_times(tmp_path, write_trace):
    """After 1000 s (a clock of 1e12 ns, whose floats step by about 1e-4 ns), three ranks share one CPU for 30
    rounds of 1/3 ms of compute and a barrier: the rest of a slice can come out below the clock's step, which
    once looped for ever (a piece that does not move the clock); the replay ends, with every rank's compute
    done on the one CPU (at least 1000 s + 3 x 30 x 1/3 ms)."""
    import threading

    trace = trace_of(write_trace, tmp_path, [["sleep 1000", *[f"compute {333_333 + 77 * r}", "barrier"] * 30]
                                             for r in range(3)])
    got = []
    worker = threading.Thread(target=lambda: got.append(replay(trace, CPUSharing(1, 998_123.7, 355.31e3,
                                                                                  1052.16e3))), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the replay did not end within 120 s"
    assert got[0].total_ns >= 1e12 + 3 * 30 * 333_333


@pytest.mark.parametrize("flag, field", [("--mpi-yield", "mpi_yield_ns"), ("--pool-yield", "pool_yield_ns")])
def test_a_yield_interval_of_zero_is_refused(flag, field):
    figures = {"cpus": 1, "slice_ns": 2 * MS, "mpi_yield_ns": 1e3, "pool_yield_ns": 1e3, field: 0.0}
    with pytest.raises(InputError, match=rf"{flag}: expected a time > 0 \(a poll between yields takes time\)"):
        CPUSharing(**figures)


def benchmark(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "..", "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_validate_reads_the_options_line_replay_cpu_sharing_prints():
    figures, validate = benchmark("replay_cpu_sharing"), benchmark("replay_validate")
    sharing = CPUSharing(2, 2171e3, 0.1e3, 1.25e3)
    assert validate.cpu_figures("# 2 CPUs\n" + figures.options_line(sharing) + "\n") == sharing
    assert validate.cpu_figures("# an output without the line\n") is None


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not hasattr(os, "sched_setaffinity"), reason="needs 2 CPUs")
def test_the_cpus_each_rank_of_a_run_is_on_are_seen():
    """Two busy children of the watched process, PMI_RANK 0 pinned to CPU 1 and PMI_RANK 1 to CPU 0 (as MPICH's
    launcher names its ranks): the map is (1, 0); a process outside the watched tree with a PMI_RANK is not seen."""
    import subprocess
    import sys

    busy = ("import os, sys, time; os.sched_setaffinity(0, {int(sys.argv[1])}); t = time.time()\n"
            "while time.time() - t < 1.0: pass")
    script = (f"import os, subprocess, sys; env = lambda r: dict(os.environ, PMI_RANK=str(r)); "
              f"ps = [subprocess.Popen([sys.executable, '-c', {busy!r}, str(1 - r)], env=env(r)) for r in (0, 1)]; "
              f"[p.wait() for p in ps]")
    outsider = subprocess.Popen([sys.executable, "-c", busy, "0"], env=dict(os.environ, PMI_RANK="5"))
    try:
        proc = subprocess.Popen([sys.executable, "-c", script])
        with RankCPUs(proc.pid, interval_s=0.01) as seen:
            assert proc.wait(timeout=60) == 0
    finally:
        outsider.wait(timeout=60)
    assert seen.cpu_map(2) == (1, 0) and 5 not in seen.seen


def test_run_seeing_cpus_returns_the_output_and_stops_a_run_past_its_timeout():
    import subprocess
    import sys
    import time
    done, seen = run_seeing_cpus([sys.executable, "-c", "print('out')"])
    assert (done.returncode, done.stdout) == (0, "out\n") and seen.seen == {}
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_seeing_cpus([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.3)
    assert time.monotonic() - start < 10


def _beside_python(name):
    import shutil
    import sys
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


@pytest.mark.mpi
@pytest.mark.skipif(_beside_python("mpiexec") is None or _beside_python("mpicc") is None
                    or not os.path.exists("/proc/self/sched") or (os.cpu_count() or 1) < 2,
                    reason="needs mpiexec, mpicc, /proc/self/sched and 2 CPUs")
def test_the_loop_programs_report_their_own_cpus_and_moves(tmp_path):
    """replay_cpu_sharing's loop programs say, per rank, where they started and ended the loop and how often they
    moved (nothing samples the run): a ring at np 2 pinned to CPU 1 started and ended there with no move; CPU 0
    ran none of its ranks, so nothing of it is counted as taken by other processes. Each run is checked against
    the model of its own CPU map."""
    figures = benchmark("replay_cpu_sharing")
    ring = figures.compile_c(str(tmp_path), "ring", figures.RING, mpi=True)
    got = figures.loop_run(ring, 2, 50, False, pin="1")
    assert got["map"] == (1, 1) and got["moves"] == 0
    assert min(got["cpu_ns"]) > 0 and got["wall_ns"] > 0
    assert got["others"][0] == 0.0 and 0.0 <= got["others"][1] < 1.0
    runs = [dict(got, us=10.0), dict(got, us=20.0, map=(0, 1), moves=2.0), dict(got, us=12.5)]
    assert figures.run_maps(runs) == "1,1; 0,1 (2 moves); 1,1"
    # each run against its own map's model: 11 us on 1,1 (+10%, -12%), 15 us on 0,1 (-25%)
    assert figures.check("ring", runs, {(1, 1): 11.0, (0, 1): 15.0}, "0%, 0%") == pytest.approx([10.0, -25.0, -12.0])


def test_the_yield_interval_is_the_one_with_which_the_model_gives_its_pinned_measurement(tmp_path):
    """replay_cpu_sharing's parts 2-3 invert the model: with yields that forfeit, the model's round trip of an
    8-byte ping-pong on one CPU is six yield intervals in steady state (MPICH's three turns a message: the sender's
    poll after its send, the receiver's poll that sees it, whose yield hands over, the sender's poll again; the
    latency hidden), so a pinned round trip of 20 us gives 3.33 us; without the forfeit the interval found
    gives the measured time back; a round trip faster than the model at 0.1 us is refused with a note."""
    figures = benchmark("replay_cpu_sharing")
    net = figures.message_profile(str(tmp_path), 1.33e3)
    forfeit = CPUSharing(1, 2 * MS, 100.0, 100.0, yield_forfeits=True)
    h, note = figures.yield_through_model(str(tmp_path), "mpi", "ping-pong", 100, 20.0, forfeit, net)
    assert note is None and h == pytest.approx(20e3 / 6, rel=0.005)
    own = CPUSharing(1, 2 * MS, 100.0, 100.0)
    h, note = figures.yield_through_model(str(tmp_path), "mpi", "ping-pong", 100, 20.0, own, net)
    trace, _ = figures.pinned_trace(str(tmp_path), "ping-pong", 100)
    again = figures.modelled_us(trace, net, 100, CPUSharing(1, 2 * MS, h, 100.0), None)[0]
    assert note is None and again == pytest.approx(20.0, rel=0.01) and 0.1e3 < h < 10e3
    h, note = figures.yield_through_model(str(tmp_path), "mpi", "ping-pong", 100, 1.0, own, net)
    assert h == 100.0 and "--mpi-yield: the model gives the pinned ping-pong" in note and "0.1 us is used" in note


def test_an_mpich_message_takes_three_turns_on_a_shared_cpu(tmp_path):
    """MPICH's wait is a poll, a yield, then the completion check (cxlsim.replay.cpu_sharing): an 8-byte ping-pong of
    two ranks on one CPU (replay_cpu_sharing's pinned ring at np 2), messages of 1.33 us, MPI yield h = 3 us: in
    steady state each message takes the sender's poll after its send, the receiver's poll that sees it (its yield
    hands over: the rank that just had its turn is not behind), the sender's poll again, then the receiver goes on:
    6h a round trip, each rank switched away 3 times (measured here: 2.93)."""
    figures = benchmark("replay_cpu_sharing")
    net = figures.message_profile(str(tmp_path), 1.33e3)
    h, trips = 3e3, 1000
    trace = simgrid.read(figures.write_trace(str(tmp_path / "ring"), 2,
                                             figures.loop_lines(figures.ring_step(2), trips)), 1e9)
    us, timeline = figures.modelled_us(trace, net, trips, CPUSharing(1, 2 * MS, h, 1e3))
    assert us == pytest.approx(6 * h / 1e3, rel=0.002)
    assert sum(timeline.switches) / 2 / trips == pytest.approx(3.0, abs=0.005)


def test_a_large_send_completes_at_its_receiver_s_next_poll_through_mpich_s_cma_path(tmp_path, write_trace):
    """MPICH reads a message of 8 KiB or more in the receiver's progress and ACKs it (cpu_sharing.CMA_BYTES): with
    shared CPUs the replay's send completes only once its receiver has polled after the match. Rank 0 posts a
    send to rank 1 and waits; rank 1 computes 300 us, then receives (a CPU each, ib-hdr). 32 KiB: rank 0's waitall
    ends when rank 1, in its receive from 300 us, has the message (its receive overhead is booked on rank 1's
    CPU after the compute) and polls: at the receive's end;
    4 KiB (eager), or without shared CPUs: at the send's local end, as before."""
    ends, entered = {}, {}
    for size in (32768, 4096):
        trace = trace_of(write_trace, tmp_path, [[f"isend 1 0 {size} 2", "waitall"],
                                                 ["compute 300000", f"recv 0 0 {size} 2"]], f"t{size}")
        for shared in (True, False):
            t = replay(trace, CPUSharing(2, 2 * MS, 1e3, 1e3) if shared else None)
            ends[size, shared] = [seg[1] for seg in t.segments[0] if seg[2] == "waitall"][0]
            entered[size, shared] = [seg[:2] for seg in t.segments[1] if seg[2] == "recv"][0]
    assert entered[32768, True][0] == pytest.approx(300e3, rel=1e-12) and entered[32768, True][1] < 301e3
    assert ends[32768, True] == pytest.approx(entered[32768, True][1], rel=1e-12)
    assert ends[32768, False] < 100e3 and ends[4096, True] < 100e3
    assert ends[4096, True] == pytest.approx(ends[4096, False], rel=1e-12)


def test_a_large_send_whose_receiver_polls_no_more_completes_at_its_finalize(tmp_path, write_trace):
    """Rank 1 posts its receive of 32 KiB at once, computes 300 us and ends without another MPI wait (its request
    left to MPI_Finalize, which runs MPICH's progress): rank 0's send completes as the message lands after rank 1's
    compute (its receive overhead booked on rank 1's CPU then), not never."""
    trace = trace_of(write_trace, tmp_path, [["isend 1 0 32768 2", "waitall"],
                                             ["irecv 0 0 32768 2", "compute 300000"]])
    t = replay(trace, CPUSharing(2, 2 * MS, 1e3, 1e3))
    waitall = [seg for seg in t.segments[0] if seg[2] == "waitall"][0]
    assert 300e3 < waitall[1] < 301e3 and t.finish_ns[0] == pytest.approx(waitall[1], rel=1e-12)


def test_each_hand_over_costs_the_rank_that_gets_the_cpu(tmp_path, write_trace):
    """5 ms and 3 ms of compute on one CPU, slice 2 ms, a hand-over costing s = 0.5 ms of the incoming rank's CPU
    time: rank 0 runs [0, 2]; rank 1 pays s and computes [2.5, 4]; rank 0 pays s, computes [4.5, 6]; rank 1 pays
    s, computes [6.5, 8] and ends; rank 0 pays s and computes [8.5, 10]. The CPU runs the 8 ms of work and four
    hand-overs (three switches of a rank that stays runnable, and one after a rank ended)."""
    trace = trace_of(write_trace, tmp_path, [[f"compute {5 * MS:.0f}"], [f"compute {3 * MS:.0f}"]])
    t = replay(trace, CPUSharing(1, 2 * MS, 1e3, 1e3, switch_ns=0.5 * MS))
    assert t.finish_ns == pytest.approx([10 * MS, 8 * MS], rel=1e-12)
    assert t.switches == [2, 1]
    assert "a hand-over costing 500 us of CPU time" in CPUSharing(1, 2 * MS, 1e3, 1e3, switch_ns=0.5 * MS).describe(2)


def test_hand_over_costs_are_seeded_gamma_draws_of_the_mean_and_cv(tmp_path, write_trace):
    """Two ranks of 20 ms each on one CPU, slice 0.5 ms: the CPU is never idle, so the last rank ends after the work
    and the hand-overs' costs, which are the seed's gamma draws in order (mean 50 us, CV 0.8); another seed draws
    others, and CV 0 costs the mean each time."""
    import numpy as np
    trace = trace_of(write_trace, tmp_path, [[f"compute {20 * MS:.0f}"]] * 2)
    mean, cv = 50e3, 0.8
    t = replay(trace, CPUSharing(1, 0.5 * MS, 1e3, 1e3, switch_ns=mean, switch_cv=cv, seed=7))
    hand_overs = sum(t.switches) + 1  # and the one after the first rank ended
    shape = 1 / cv ** 2
    draws = np.random.default_rng(7).gamma(shape, mean / shape, size=hand_overs)
    assert max(t.finish_ns) == pytest.approx(40 * MS + draws.sum(), rel=1e-9)
    assert hand_overs > 60
    again = replay(trace, CPUSharing(1, 0.5 * MS, 1e3, 1e3, switch_ns=mean, switch_cv=cv, seed=7))
    assert again.finish_ns == t.finish_ns
    other = replay(trace, CPUSharing(1, 0.5 * MS, 1e3, 1e3, switch_ns=mean, switch_cv=cv, seed=8))
    assert other.finish_ns != t.finish_ns
    flat = replay(trace, CPUSharing(1, 0.5 * MS, 1e3, 1e3, switch_ns=mean))
    assert max(flat.finish_ns) == pytest.approx(40 * MS + (sum(flat.switches) + 1) * mean, rel=1e-9)


@pytest.mark.parametrize("argv, message", [
    (["--cpu-switch", "1us"], "--cpu-switch: a figure of CPU sharing"),
    (["--cpu-switch-cv", "1"], "--cpu-switch-cv: a figure of CPU sharing"),
    (["--cpus", "1", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-switch-cv", "1"],
     "--cpu-switch-cv: the spread of --cpu-switch, which is not given"),
    (["--cpus", "1", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-switch", "1us",
      "--cpu-switch-cv", "-0.5"], r"--cpu-switch-cv: expected a figure >= 0, got -0.5"),
    (["--cpus", "1", "--cpu-slice", "2ms", "--mpi-yield", "2us", "--pool-yield", "2us", "--cpu-switch", "1 parsec"],
     "--cpu-switch"),
])
def test_a_bad_hand_over_cost_is_refused_naming_the_flag(argv, message, replay_args):
    args = replay_args("T", "--fabric", "ib-hdr", *argv)
    with pytest.raises(InputError, match=message):
        cli.cpu_sharing(args)


def test_the_cli_carries_the_hand_over_cost_and_the_run_s_seed(replay_args):
    args = replay_args("T", "--fabric", "ib-hdr", "--cpus", "2", "--cpu-slice", "2ms", "--mpi-yield", "2us",
                       "--pool-yield", "0.3us", "--cpu-switch", "1.3us", "--cpu-switch-cv", "0.9")
    sharing = cli.cpu_sharing(args, seed=42)
    assert (sharing.switch_ns, sharing.switch_cv, sharing.seed) == (pytest.approx(1300.0), 0.9, 42)
    assert "(gamma, CV 0.9, seed 42)" in sharing.describe(4)
