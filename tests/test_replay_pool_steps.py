"""The library's pool step protocol in the replay by turns (cxlsim.replay.pool_steps): the steps of each call, who
waits for whom, and the hand-overs it gives on a shared CPU, against hand counts (ns; host speed 1e9 flop/s)."""
from __future__ import annotations

import os

import pytest

from cxlsim.replay import engine, fabrics, simgrid
from cxlsim.replay.cpu_sharing import CPUSharing
from cxlsim.replay.pool_profile import read_library_stats
from cxlsim.replay.pool_steps import BCAST, DATA, SYNC, Step, steps_of

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL = os.path.join(HERE, "data", "local_host_profile_np2.json")
MS = 1e6
KINDS = {"R": "allreduce 65536 0", "G": "allgather 4096 4096", "B": "bcast 4096 0", "r": "allreduce 8 0",
         "S": "barrier"}
NAMES = {"allgather": "MPI_Allgather", "allreduce": "MPI_Allreduce", "bcast": "MPI_Bcast", "barrier": "MPI_Barrier"}


def test_each_call_has_the_kernel_s_steps():
    slot, large = 1 << 20, 64 << 10
    assert steps_of("barrier", 0, 4, large) == (Step(SYNC),)
    assert steps_of("allgather", 0, 4, large) == (Step(SYNC),)  # a zero-byte allgather takes no data round
    assert steps_of("allgather", 4096, 4, large) == (Step(DATA),)
    assert steps_of("allgather", slot + 1, 4, large) == (Step(DATA),) * 2
    assert steps_of("allreduce", 0, 2, large) == ()  # returns at once
    assert steps_of("allreduce", large - 4, 2, large) == (Step(DATA),)
    assert steps_of("allreduce", large, 2, large) == (Step(DATA),) * 2  # reduce-scatter, then gather
    assert steps_of("allreduce", large, 1, large) == (Step(DATA),)
    # chunks of one slot, each large or small by its own size: 1 MiB (2 steps) and then 32 KiB (1)
    assert steps_of("allreduce", slot + (32 << 10), 2, large) == (Step(DATA),) * 3
    assert steps_of("bcast", 4096, 3, large, root=2) == (Step(BCAST, 2),)
    assert steps_of("bcast", 0, 3, large) == ()
    assert steps_of("alltoall", slot // 4, 4, large) == (Step(DATA),)  # slot / P per destination
    assert steps_of("alltoall", slot // 4 + 1, 4, large) == (Step(DATA),) * 2
    assert steps_of("reducescatter", 4 * 4096, 4, large, counts=(4096,) * 4) == (Step(DATA),)
    with pytest.raises(ValueError, match="'gather'"):
        steps_of("gather", 8, 2, large)


def replay_by_turns(tmp_path, write_trace, network_profile, library_stats_text, per_rank, sharing):
    """The trace `per_rank` replayed with every collective on the library's pool, by `sharing`."""
    trace = simgrid.read(write_trace(tmp_path / "trace", dict(enumerate(per_rank))), 1e9)
    calls = {}
    for lines in per_rank:
        for line in lines:
            if line.split()[0] in NAMES:
                calls[NAMES[line.split()[0]]] = calls.get(NAMES[line.split()[0]], 0) + 1
    stats = tmp_path / "stats.txt"
    stats.write_text(library_stats_text({name: (n, n, 0) for name, n in calls.items()}, ranks=len(per_rank)))
    spec = f"{network_profile(tmp_path)}+{LOCAL}"
    fab = fabrics.resolve(spec, trace.size, trace=trace, library_stats=read_library_stats(str(stats)))
    return fab, engine.replay(trace, fab.make(), priced=fab.priced, sharing=sharing)


def test_a_bcast_root_returns_without_waiting_for_its_reader(tmp_path, write_trace, network_profile,
                                                             library_stats_text):
    """A CPU each (the shared-CPU path, nothing shared): the root computes a, copies in (the kernel's time C) and
    returns at a + C; the reader computes b > a + C, finds the data and copies it out: b + C. Without --cpus
    the profile's price is one wait for every rank: both end at b + C."""
    a, b = 10e3, 60e3
    per_rank = [[f"compute {a:.0f}", "bcast 4096 0"], [f"compute {b:.0f}", "bcast 4096 0"]]
    fab, t = replay_by_turns(tmp_path, write_trace, network_profile, library_stats_text, per_rank,
                             CPUSharing(2, 2 * MS, 1e3, 1e3))
    cost = fab.priced.cost_ns("bcast", 4096)
    assert 0 < cost < b - a
    assert t.finish_ns == pytest.approx([a + cost, b + cost], rel=1e-12)


def test_a_root_writes_a_buffer_again_only_after_its_reader_acknowledged_it(tmp_path, write_trace, network_profile,
                                                                            library_stats_text):
    """Three bcasts, a CPU each: the root's first two go at once (rounds 1 and 2, buffers 1 and 0), its third
    reuses buffer 1 and waits for the reader's acknowledgement of the first, published at b + C (the reader
    computes b first): the root ends at b + 2C; the reader, its data waiting, at b + 3C."""
    b = 60e3
    per_rank = [["bcast 4096 0"] * 3, [f"compute {b:.0f}"] + ["bcast 4096 0"] * 3]
    fab, t = replay_by_turns(tmp_path, write_trace, network_profile, library_stats_text, per_rank,
                             CPUSharing(2, 2 * MS, 1e3, 1e3))
    cost = fab.priced.cost_ns("bcast", 4096)
    assert 2 * cost < b
    assert t.finish_ns == pytest.approx([b + 2 * cost, b + 3 * cost], rel=1e-12)


@pytest.mark.parametrize("pattern, switches", [("G", 1), ("GB", 2), ("RG", 3), ("GBr", 4), ("RB", 4),
                                               ("RGB", 4), ("RGBr", 6)])
def test_two_ranks_on_one_cpu_hand_over_where_the_library_waits(tmp_path, write_trace, network_profile,
                                                                 library_stats_text, pattern, switches):
    """Both ranks on one CPU, the pool yield far shorter than the slice, iterations of the calls of `pattern`
    (R 64 KiB allreduce, large: 2 steps; G allgather, B bcast, r 8-byte allreduce: 1 each): the CPU changes hands
    at each step where the running rank must wait for the other, which the protocol counts by hand: once a step,
    except that a bcast whose root arrives first blocks no one, and an odd number of steps an iteration puts the
    reader first at every bcast and makes the next write wait for its acknowledgement, one step more (measured
    so: docs/replay.md, switches per iteration and CPU 1, 2, 3, 4, 4, 4 and 6). A model in which every rank waits
    for every other at each call counted GBr and RB 3 and RGBr 5."""
    step = [KINDS[c] for c in pattern]

    def hand_overs(iterations):
        _, t = replay_by_turns(tmp_path / str(iterations), write_trace, network_profile, library_stats_text,
                               [step * iterations] * 2, CPUSharing(1, 100 * MS, 1e3, 1e3))
        return sum(t.switches)
    # the steady state: what 20 more iterations add (the first ones claim buffers no call used yet)
    assert hand_overs(40) - hand_overs(20) == 20 * switches


@pytest.mark.parametrize("slot, steps", [(64 << 10, 2), (None, 1)])
def test_the_runs_slot_from_the_stats_chunks_its_calls(tmp_path, write_trace, network_profile, library_stats_text,
                                                        slot, steps):
    """A run with CXLSIM_MPI_SLOT=64KiB moved its 128 KiB allgather in two steps, which the stats' header tells; a
    header without the slot takes the library's default, 1 MiB: one step."""
    trace = simgrid.read(write_trace(tmp_path / "trace", {0: ["allgather 131072 131072"],
                                                          1: ["allgather 131072 131072"]}), 1e9)
    text = library_stats_text({"MPI_Allgather": (2, 2, 0)})
    text = text.replace("slot 1048576 B", f"slot {slot} B" if slot else "").replace(", ,", ",")
    stats = tmp_path / "stats.txt"
    stats.write_text(text)
    got = read_library_stats(str(stats))
    assert got["slot_bytes"] == slot
    fab = fabrics.resolve(f"{network_profile(tmp_path)}+{LOCAL}", 2, trace=trace, library_stats=got)
    assert fab.priced.plan(trace.ranks[0][0], 2).steps == (Step(DATA),) * steps


def test_cpus_that_drift_apart_hand_over_more_while_their_ranks_wait(tmp_path, write_trace, network_profile,
                                                                     library_stats_text):
    """Barriers of four ranks, two on each of two CPUs (0,0,1,1), polls of 0.3 us. With every hand-over costing the
    same, the CPUs keep in step: each hands over once a barrier, 0.5 a rank. With costs that vary (CV 1) one CPU
    falls behind the other, and its partner CPU's two ranks, both waiting, hand their CPU back and forth until it
    catches up (measured on this machine: 0.75-0.8 a rank and barrier; docs/replay.md)."""
    def per_rank_and_barrier(cv, iterations):
        sharing = CPUSharing(2, 100 * MS, 1e3, 300.0, cpu_map=(0, 0, 1, 1), switch_ns=1.3e3, switch_cv=cv, seed=3)
        _, t = replay_by_turns(tmp_path / f"{cv}-{iterations}", write_trace, network_profile, library_stats_text,
                               [["barrier"] * iterations] * 4, sharing)
        return sum(t.switches) / 4
    steady = (per_rank_and_barrier(0.0, 220) - per_rank_and_barrier(0.0, 20)) / 200
    assert steady == pytest.approx(0.5)
    assert (per_rank_and_barrier(1.0, 220) - per_rank_and_barrier(1.0, 20)) / 200 > 0.6
