"""Fused zero-copy calls (allgather_view, broadcast_view, alltoall_view): results, twins, reuse, schedules."""
import random
import time

import numpy as np
import pytest

from cxlsim.coherence import PoolEvent
from cxlsim.emulator.cache_model import replay
from cxlsim.emulator.comm import StaleViewError
from cxlsim.emulator.bench import BenchPlan, run_plan
from cxlsim.emulator.bench_collectives import CollectiveSide
from cxlsim.emulator.launch import RankFailure, run_local
from cxlsim.emulator.pool import SegmentLayout
from cxlsim.errors import InputError

SLOT = 512


def block(rank, call, count, dtype=np.int64):
    """What `rank` contributes in `call`: distinct per rank, call and element."""
    return ((np.arange(count) * 3 + rank * 1009 + call * 17) % 100003).astype(dtype)


def _calls(comm, calls, seed, delays):
    """A seeded sequence of zero-copy and copy calls, the same on every rank; per-rank random delays
    (no barrier between calls). Returns the calls whose result was wrong, and the event log."""
    comm.enable_log(200000)
    plan, rng = random.Random(seed), random.Random(seed * 100 + comm.rank)
    P, me, bad = comm.size, comm.rank, []
    for call in range(calls):
        if delays:
            time.sleep(rng.random() * 0.002)
        kind = plan.choice(["bcast_view", "bcast_view_slot", "bcast", "a2a_view", "a2a_view_slot", "ag_view",
                            "ag_view_slot", "allgather", "barrier"])
        count = plan.choice([0, 1, 5, 16])
        if kind.startswith("bcast"):
            root, want = plan.randrange(P), block(plan.randrange(P), call, count)
            if kind == "bcast":
                buf = want.copy() if me == root else np.zeros(count, np.int64)
                comm.broadcast(buf, root)
                got = buf
            elif kind == "bcast_view_slot" and me == root:
                comm.send_view(count, np.int64)[:] = want
                got = comm.broadcast_view(count, np.int64, root).array.copy()
            else:
                result = comm.broadcast_view(count, np.int64, root, want if me == root else None)
                if delays:  # read the view late: a root that reused its slot early would show here
                    time.sleep(rng.random() * 0.002)
                got = result.array.copy()
            ok = np.array_equal(got, want)
        elif kind.startswith("a2a"):
            sends = [block(r, call, count * P) for r in range(P)]
            if kind == "a2a_view_slot":
                view = comm.send_view(count * P, np.int64)
                view[:] = sends[me]
                got = comm.alltoall_view(view).array.copy()
            else:
                got = comm.alltoall_view(sends[me]).array.copy()
            ok = np.array_equal(got, np.stack([s[me * count:(me + 1) * count] for s in sends]))
        elif kind.startswith("ag"):
            if kind == "ag_view_slot":
                view = comm.send_view(count, np.int64)
                view[:] = block(me, call, count)
                got = comm.allgather_view(view).array.copy()
            else:
                got = comm.allgather_view(block(me, call, count)).array.copy()
            ok = np.array_equal(got, np.stack([block(r, call, count) for r in range(P)]))
        elif kind == "allgather":
            recv = np.empty(count * P, np.int64)
            comm.allgather(block(me, call, count), recv)
            ok = np.array_equal(recv, np.concatenate([block(r, call, count) for r in range(P)]))
        else:
            comm.barrier()
            ok = True
        if not ok:
            bad.append((call, kind, count))
    return bad, comm.log_events()


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_zero_copy_calls_equal_their_twins_result_for_result_and_event_for_event(coherence):
    cython = run_local(3, _calls, (60, 3, False), slot_bytes=SLOT, coherence=coherence, timeout_s=60)
    twin = run_local(3, _calls, (60, 3, False), slot_bytes=SLOT, coherence=coherence, kernel="reference",
                     timeout_s=60)
    for rank in range(3):
        assert cython[rank][0] == [] and twin[rank][0] == []
        assert np.array_equal(cython[rank][1], twin[rank][1]), f"rank {rank}: event logs differ"


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_back_to_back_zero_copy_calls_with_random_delays_keep_every_view_intact(coherence):
    # a reader acknowledges a zero-copy broadcast only at its next call: a root that ran ahead
    # into the same buffer would overwrite a view still being read, and the copies above catch it
    out = run_local(3, _calls, (150, 11, True), slot_bytes=SLOT, coherence=coherence, timeout_s=120)
    assert [bad for bad, _ in out] == [[]] * 3


def _streamed_calls(comm, calls, seed, delays):
    comm.nt_min_bytes = 1  # every copy-in streams, so every zero-copy call with data prefetches its blocks
    return _calls(comm, calls, seed, delays)


def test_zero_copy_calls_that_prefetch_streamed_blocks_deliver_the_same_results_and_events():
    # with non-temporal copy-ins the views' blocks are prefetched into L2 (cxl_view_prefetch_on): a hint
    # that changes neither a result nor the logged schedule, also with the ranks out of step
    streamed = run_local(3, _streamed_calls, (60, 3, True), slot_bytes=SLOT, timeout_s=60)
    plain = run_local(3, _calls, (60, 3, True), slot_bytes=SLOT, timeout_s=60)
    for rank in range(3):
        assert streamed[rank][0] == []
        assert np.array_equal(streamed[rank][1], plain[rank][1]), f"rank {rank}: event logs differ"


@pytest.mark.parametrize("nranks", [2, 3])
def test_zero_copy_flush_schedules_pass_the_cache_model(nranks):
    logs = [log for _, log in run_local(nranks, _calls, (80, 5, False), slot_bytes=SLOT, coherence="flush",
                                         timeout_s=60)]
    lay = SegmentLayout.plan(nranks, SLOT)
    assert replay(logs, lay) == []
    hw = [log for _, log in run_local(nranks, _calls, (80, 5, False), slot_bytes=SLOT, coherence="hw", timeout_s=60)]
    assert replay(hw, lay)  # without flushes the model sees stale data: the check can fail


def _root_runs_ahead(comm):
    """Rank 0 broadcasts three times in a row; rank 1 reads the first view only 50 ms later. The
    root's third call reuses the first one's buffer, so it must wait for the reader's next call."""
    if comm.rank == 0:
        for call in range(3):
            comm.broadcast_view(8, np.int64, 0, block(0, call, 8))
        return None
    first = comm.broadcast_view(8, np.int64, 0)
    time.sleep(0.05)
    got = first.array.copy()
    for _ in (1, 2):
        comm.broadcast_view(8, np.int64, 0)
    return got.tolist()


@pytest.mark.parametrize("kernel", ["cython", "reference"])
def test_a_root_never_overwrites_a_broadcast_view_that_is_still_being_read(kernel):
    assert run_local(2, _root_runs_ahead, slot_bytes=64, kernel=kernel)[1] == block(0, 0, 8).tolist()


def _read_after_next_call(comm):
    first = comm.broadcast_view(4, np.int32, 0, np.arange(4, dtype=np.int32) if comm.rank == 0 else None)
    kept = first.array.copy()
    comm.barrier()
    try:
        first.array
    except StaleViewError:
        return kept.tolist(), "stale"
    return kept.tolist(), "readable"


def test_a_zero_copy_broadcast_result_refuses_to_be_read_after_the_next_call():
    assert run_local(2, _read_after_next_call, slot_bytes=64) == [([0, 1, 2, 3], "stale")] * 2


def _errors(comm):
    seen = []
    for call in (lambda: comm.broadcast_view(100, np.int64, 0),  # 800 B > the 256 B slot
                 lambda: comm.broadcast_view(2, np.int64, 5),
                 lambda: comm.broadcast_view(-1),
                 lambda: comm.broadcast_view(2, np.int64, 1 - comm.rank, np.zeros(2, np.int64)),
                 lambda: comm.broadcast_view(3, np.int64, comm.rank, np.zeros(2, np.int64)),
                 lambda: comm.alltoall_view(np.zeros(3, np.uint8)),
                 lambda: comm.alltoall_view(np.zeros(64, np.int64)),
                 lambda: comm.allgather_view(np.zeros(300, np.uint8))):
        try:
            call()
        except InputError as e:
            seen.append(str(e).split(":")[0])
    return seen


@pytest.mark.parametrize("kernel", ["cython", "reference"])
def test_bad_zero_copy_arguments_are_input_errors_naming_the_call(kernel):
    out = run_local(2, _errors, slot_bytes=256, kernel=kernel, timeout_s=30)
    assert out == [["broadcast_view"] * 5 + ["alltoall_view"] * 2 + ["allgather_view"]] * 2


def _bench_zero_copy(comm):
    plan = BenchPlan(sizes=(0, 8, 4096), sides=("copy", "zero-copy"), iterations=20, warmup=2, validate=True,
                     collective=comm.collective_under_test)
    return run_plan(comm, plan)


@pytest.mark.parametrize("collective", ["allgather", "broadcast", "alltoall"])
def test_the_benchs_zero_copy_side_validates_every_iteration(collective):
    def body(comm):
        comm.collective_under_test = collective
        return _bench_zero_copy(comm)
    rows = run_local(3, body, slot_bytes=3 * 4096, timeout_s=60)[0]
    assert [(r["side"], r["size_bytes"]) for r in rows] == [(side, n) for n in (0, 8, 4096) for side in ("copy", "zero-copy")]


def _stale_zero_copy(comm, collective):
    """The zero-copy side with a check that runs without the call: the checksum must catch it."""
    side = CollectiveSide(collective, "zero-copy", comm, None, 64, True)
    side.before(0)
    side.op()
    side.after(0)
    side.before(1)
    side.after(1)


@pytest.mark.parametrize("collective", ["broadcast", "alltoall"])
def test_zero_copy_validation_catches_data_a_call_did_not_deliver(collective):
    with pytest.raises(RankFailure, match=f"zero-copy {collective} of 64 B, iteration 1: element"):
        run_local(2, _stale_zero_copy, (collective,), slot_bytes=256, timeout_s=20)


def _probe_after_a_view(comm):
    comm.enable_log(1000)
    comm.broadcast_view(4, np.int32, 0, np.arange(4, dtype=np.int32) if comm.rank == 0 else None)
    comm.flag_pingpong(10)  # (its own flag stores are not logged)
    comm.barrier()  # the reader's acknowledgement, still pending, must not lower its flag here
    return [e[2] for e in comm.log_events().tolist() if e[0] == PoolEvent.FLAG_STORE], comm.epoch


def test_a_calibration_probe_after_a_zero_copy_broadcast_keeps_flags_growing():
    for stores, epoch in run_local(2, _probe_after_a_view, slot_bytes=64):
        assert stores == sorted(stores) and stores[-1] == epoch


def _rows_and_arrays(comm, calls):
    """Zero-copy allgathers and alltoalls with the event log off (the kernels' fast path): per call, whether
    `rows` and `array` hold what was sent, the own row is a read-only view of the send buffer, and (alltoall)
    whether the own block was in the pool before `array` was asked for."""
    P, me, out = comm.size, comm.rank, []
    pool = np.frombuffer(comm.pool.mapping, np.uint8)
    for call in range(calls):
        count = (0, 1, 5, 16)[call % 4]
        send = block(me, call, count)
        result = comm.allgather_view(send)
        want = np.stack([block(r, call, count) for r in range(P)])
        rows = result.rows
        out.append(("allgather", len(rows) == P and all(np.array_equal(rows[r], want[r]) for r in range(P))
                    and np.array_equal(result.array, want) and (count == 0 or np.shares_memory(rows[me], send))
                    and not rows[me].flags.writeable))
        sends = [block(r, call, count * P) for r in range(P)]
        result = comm.alltoall_view(sends[me])
        want = np.stack([s[me * count:(me + 1) * count] for s in sends])
        at = comm.slot_offset(comm.data_round, me) + me * count * 8
        stored_before = np.array_equal(pool[at:at + count * 8].view(np.int64), want[me])
        rows = result.rows
        ok = all(np.array_equal(rows[r], want[r]) for r in range(P)) and (count == 0 or np.shares_memory(rows[me], sends[me]))
        out.append(("alltoall", ok and np.array_equal(result.array, want), stored_before or count == 0))
        comm.barrier()
    return out


@pytest.mark.parametrize("kernel", ["cython", "reference"])
def test_zero_copy_rows_hold_every_block_with_the_own_one_from_the_send_buffer(kernel):
    out = run_local(3, _rows_and_arrays, (12,), slot_bytes=SLOT, kernel=kernel, timeout_s=60)
    for rank in range(3):
        assert [entry[1] for entry in out[rank]] == [True] * 24
        stored = [entry[2] for entry in out[rank] if entry[0] == "alltoall"]
        # the Cython kernel leaves the own block out of the pool (cxl_coll_view_skips_own) until `array`
        # is read; the twin, which follows the logged schedule, stores the whole row
        assert stored == ([True, False, False, False] * 3 if kernel == "cython" else [True] * 12)


def _large_broadcast_views(comm, calls, seed):
    """Zero-copy broadcasts from 8 KiB, roots rotating, readers reading late at random, on a pool whose copy-ins
    stream from 8 KiB (the slow placement's, so the root streams: cxl_view_streams): per call, whether every rank
    read the root's data."""
    rng, ok = random.Random(seed * 10 + comm.rank), []
    comm.nt_min_bytes = 8192
    for call in range(calls):
        count, root = (1024 + 3, 4096, 8192, 32768 // 8 + 5, 65536 // 8)[call % 5], call % comm.size
        want = block(root, call, count)
        result = comm.broadcast_view(count, np.int64, root, want if comm.rank == root else None)
        time.sleep(rng.random() * 0.001)
        ok.append(np.array_equal(result.array, want) and np.array_equal(result.rows[0], want))
    return ok


@pytest.mark.parametrize("kernel", ["cython", "reference"])
def test_large_zero_copy_broadcasts_whose_root_streams_deliver_every_call(kernel):
    out = run_local(3, _large_broadcast_views, (24, 5), slot_bytes=65536, kernel=kernel, timeout_s=60)
    assert out == [[True] * 24] * 3


def _large_allgather_and_alltoall_views(comm, calls, seed):
    """Zero-copy allgathers and alltoalls of 8-128 KiB blocks on a pool whose copy-ins stream from 16 KiB (the
    slow placement's: cxl_view_streams; odd counts give unaligned heads and tails), read late at random, no
    barrier between calls: per call, whether `rows` and `array` hold every rank's block."""
    rng, ok, P, me = random.Random(seed * 10 + comm.rank), [], comm.size, comm.rank
    comm.nt_min_bytes = 16384
    for call in range(calls):
        count = (1024, 2048 + 3, 4096 + 5, 8192 + 1, 16384)[call % 5]
        if call % 2 == 0:
            result = comm.allgather_view(block(me, call, count))
            want = np.stack([block(r, call, count) for r in range(P)])
        else:
            sends = [block(r, call, count * P) for r in range(P)]
            result = comm.alltoall_view(sends[me])
            want = np.stack([s[me * count:(me + 1) * count] for s in sends])
        time.sleep(rng.random() * 0.001)
        rows = result.rows
        ok.append(all(np.array_equal(rows[r], want[r]) for r in range(P)) and np.array_equal(result.array, want))
    return ok


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("kernel", ["cython", "reference"])
def test_large_zero_copy_allgathers_and_alltoalls_whose_copy_ins_stream_deliver_every_call(kernel, nranks):
    out = run_local(nranks, _large_allgather_and_alltoall_views, (24, 7), slot_bytes=3 * 131072, kernel=kernel,
                    timeout_s=60)
    assert out == [[True] * 24] * nranks
