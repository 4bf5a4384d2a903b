"""The pool collectives of cxl_coll.h in the emulator: results, the Python twins, determinism, reuse, schedules."""
import functools
import random
import time

import numpy as np
import pytest

from cxlsim.coherence import PoolEvent
from cxlsim.emulator.cache_model import replay
from cxlsim.emulator.launch import RankFailure, run_local
from cxlsim.emulator.pool import SegmentLayout
from cxlsim.emulator.reference_collectives import left_fold
from cxlsim.errors import InputError, RunError

DTYPES = (np.int32, np.int64, np.float32, np.float64)
OPS = ("sum", "prod", "min", "max")
TWIN_COUNTS = (0, 1, 17, 100)
TWIN_SLOT = 1024  # small, so that calls run in several chunks and both buffers are reused


def data(rank, call, count, dtype, nan=False):
    """Inputs that depend on rank and call; floats are inexact sums, so the fold order shows in the bits."""
    x = (np.arange(count) * 7 + rank * 101 + call * 13) % 251 - 125
    if np.dtype(dtype).kind == "f":
        out = (x / 7.0 + rank / 3.0).astype(dtype)
        if nan and count > 3 and rank == 1:
            out[3] = np.nan
        return out
    return (x * 1000003).astype(dtype)  # products and sums overflow: they must wrap


def expected_fold(op, blocks):
    return left_fold(op, [np.asarray(b) for b in blocks])


def _twin_workload(comm):
    """Every collective, every dtype x op at small sizes, both allreduce algorithms; (results, log)."""
    comm.enable_log(200000)
    out, call = [], 0
    P, me = comm.size, comm.rank
    for dtype in DTYPES:
        for op in OPS:
            for count in TWIN_COUNTS:
                for large in (0, 1 << 30):  # 0: every chunk takes the large algorithm; 2^30: the small one
                    send = data(me, call, count, dtype, nan=op in ("min", "max"))
                    recv = np.empty_like(send)
                    comm.allreduce(send, recv, op, large_bytes=large)
                    out.append(recv.copy())
                    call += 1
                send = data(me, call, count * P, dtype)
                recv = np.empty(count, dtype)
                comm.reduce_scatter(send, recv, op)
                out.append(recv.copy())
                call += 1
    for count in TWIN_COUNTS:
        for root in range(P):
            buf = data(me, call, count, np.float64) if me == root else np.zeros(count)
            comm.broadcast(buf, root)
            out.append(buf.copy())
        send = data(me, call, count * P, np.int64)
        recv = np.empty_like(send)
        comm.alltoall(send, recv)
        out.append(recv.copy())
        comm.barrier()
        call += 1
    send = data(me, call, 300, np.float32)
    recv = np.empty_like(send)
    comm.allreduce_start(send, recv, "sum", large_bytes=64)
    time.sleep(0.001 * me)  # "compute" between start and wait
    comm.allreduce_wait()
    out.append(recv.copy())
    return out, comm.log_events()


@functools.cache
def twin_run(kernel, nranks, coherence):
    return run_local(nranks, _twin_workload, slot_bytes=TWIN_SLOT, coherence=coherence, kernel=kernel, timeout_s=60)


def _expected_twin_results(P):
    """The results of _twin_workload on every rank, from the inputs alone (left folds, plain copies)."""
    per_rank = [[] for _ in range(P)]
    call = 0
    for dtype in DTYPES:
        for op in OPS:
            for count in TWIN_COUNTS:
                for _ in range(2):
                    folded = expected_fold(op, [data(r, call, count, dtype, nan=op in ("min", "max")) for r in range(P)])
                    for r in range(P):
                        per_rank[r].append(folded)
                    call += 1
                blocks = [data(r, call, count * P, dtype) for r in range(P)]
                for r in range(P):
                    per_rank[r].append(expected_fold(op, [b[r * count:(r + 1) * count] for b in blocks]))
                call += 1
    for count in TWIN_COUNTS:
        for root in range(P):
            for r in range(P):
                per_rank[r].append(data(root, call, count, np.float64))
        blocks = [data(r, call, count * P, np.int64) for r in range(P)]
        for r in range(P):
            per_rank[r].append(np.concatenate([blocks[s][r * count:(r + 1) * count] for s in range(P)]))
        call += 1
    folded = expected_fold("sum", [data(r, call, 300, np.float32) for r in range(P)])
    for r in range(P):
        per_rank[r].append(folded)
    return per_rank


def _same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("coherence", ["hw", "flush"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_kernels_equal_their_python_twins_bit_for_bit_and_event_for_event(nranks, coherence):
    cython, twin = twin_run("cython", nranks, coherence), twin_run("reference", nranks, coherence)
    expected = _expected_twin_results(nranks)
    for rank in range(nranks):
        (c_out, c_log), (t_out, t_log) = cython[rank], twin[rank]
        assert len(c_out) == len(t_out) == len(expected[rank])
        for i, (c, t, e) in enumerate(zip(c_out, t_out, expected[rank])):
            assert _same_bits(c, t), f"rank {rank}, result {i}: kernel and twin differ"
            assert _same_bits(c, e), f"rank {rank}, result {i}: {c[:8]} != expected {e[:8]}"
        assert np.array_equal(c_log, t_log), f"rank {rank}: event logs differ"
    for i in range(len(expected[0])):  # every rank holds bitwise the same reductions
        if expected[0][i].tobytes() == expected[1][i].tobytes():
            assert len({cython[r][0][i].tobytes() for r in range(nranks)}) == 1


def test_integer_sums_and_products_wrap_and_float_min_max_are_nan_as_numpy():
    blocks = [data(r, 5, 64, np.int32) for r in range(3)]
    total = expected_fold("sum", blocks)
    assert np.array_equal(total, (blocks[0].astype(np.int64) + blocks[1] + blocks[2]).astype(np.int32))
    prod = expected_fold("prod", blocks)
    wrapped = [(int(a) * int(b) * int(c)) % 2**32 for a, b, c in zip(*blocks)]
    assert [int(v) % 2**32 for v in prod] == wrapped
    floats = [data(r, 5, 16, np.float64, nan=True) for r in range(3)]
    for op, ref in (("min", np.minimum), ("max", np.maximum)):
        got = expected_fold(op, floats)
        want = ref(ref(floats[0], floats[1]), floats[2])
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[3])
        assert np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


# -- sizes and rank counts on the Cython kernels ------------------------------------------------
SIZES = (0, 1, 15, 16, 17, 1024, 262147)


def _sizes_workload(comm, sizes, dtype, op):
    P, me = comm.size, comm.rank
    bad = []
    for call, count in enumerate(sizes):
        inputs = [data(r, call, count, dtype) for r in range(P)]
        folded = expected_fold(op, inputs)
        for large in (0, 1 << 62):
            recv = np.empty(count, dtype)
            comm.allreduce(inputs[me], recv, op, large_bytes=large)
            if not _same_bits(recv, folded):
                bad.append(("allreduce", count, large))
        send = np.concatenate([data(me, call, count, dtype)] * P) if count else np.empty(0, dtype)
        recv = np.empty(count, dtype)
        comm.reduce_scatter(send, recv, op)
        want = expected_fold(op, [np.asarray(data(r, call, count, dtype)) for r in range(P)])
        if not _same_bits(recv, want):
            bad.append(("reduce_scatter", count))
        root = call % P
        buf = inputs[root].copy() if me == root else np.zeros(count, dtype)
        comm.broadcast(buf, root)
        if not _same_bits(buf, inputs[root]):
            bad.append(("broadcast", count))
        n = max(count // P, 1) if count else 0
        sends = [(np.arange(n * P) + 1000 * r).astype(np.int32) for r in range(P)]
        recv = np.empty(n * P, np.int32)
        comm.alltoall(sends[me], recv)
        if not np.array_equal(recv, np.concatenate([sends[s][me * n:(me + 1) * n] for s in range(P)])):
            bad.append(("alltoall", count))
        comm.barrier()
    return bad


@pytest.mark.parametrize("coherence", ["hw", "flush"])
@pytest.mark.parametrize("nranks, dtype, op", [(1, np.float64, "sum"), (2, np.float32, "sum"),
                                               (4, np.int64, "prod"), (8, np.float64, "max")])
def test_every_collective_at_the_issue_sizes(nranks, dtype, op, coherence):
    sizes = SIZES if nranks <= 4 else SIZES[:-1]  # 8 ranks on this machine's cores: the largest size at np <= 4
    out = run_local(nranks, _sizes_workload, (sizes, dtype, op), slot_bytes=1 << 18, coherence=coherence,
                    timeout_s=120)
    assert out == [[]] * nranks


@pytest.mark.slow
def test_the_largest_size_at_eight_ranks():
    out = run_local(8, _sizes_workload, ((262147,), np.float64, "sum"), slot_bytes=1 << 20, timeout_s=300)
    assert out == [[]] * 8


# -- back-to-back calls without barriers, random delays -------------------------------------------
def _stress_workload(comm, calls, seed):
    rng = random.Random(seed * 1000 + comm.rank)
    plan = random.Random(seed)  # the same call sequence on every rank
    P, me, bad = comm.size, comm.rank, []
    for call in range(calls):
        time.sleep(rng.random() * 0.002)
        kind = plan.choice(["allreduce", "allreduce_large", "split", "reduce_scatter", "broadcast", "alltoall",
                            "allgather", "zero_copy"])
        count = plan.choice([1, 7, 40, 300])
        if kind in ("allgather", "zero_copy"):
            count = min(count, 64)  # one slot (512 B) per rank
        if kind in ("allreduce", "allreduce_large", "split"):
            inputs = [data(r, call, count, np.float64) for r in range(P)]
            recv = np.empty(count)
            large = 0 if kind == "allreduce_large" else 1 << 30
            if kind == "split":
                comm.allreduce_start(inputs[me], recv, "sum", large_bytes=64)
                time.sleep(rng.random() * 0.001)
                comm.allreduce_wait()
            else:
                comm.allreduce(inputs[me], recv, "sum", large_bytes=large)
            ok = _same_bits(recv, expected_fold("sum", inputs))
        elif kind == "reduce_scatter":
            sends = [data(r, call, count * P, np.int32) for r in range(P)]
            recv = np.empty(count, np.int32)
            comm.reduce_scatter(sends[me], recv, "sum")
            ok = _same_bits(recv, expected_fold("sum", [s[me * count:(me + 1) * count] for s in sends]))
        elif kind == "broadcast":
            root = plan.randrange(P)
            want = data(root, call, count, np.float64)
            buf = want.copy() if me == root else np.zeros(count)
            comm.broadcast(buf, root)
            ok = _same_bits(buf, want)
        elif kind == "alltoall":
            sends = [data(r, call, count * P, np.int64) for r in range(P)]
            recv = np.empty(count * P, np.int64)
            comm.alltoall(sends[me], recv)
            ok = np.array_equal(recv, np.concatenate([s[me * count:(me + 1) * count] for s in sends]))
        elif kind == "allgather":
            recv = np.empty(count * P, np.int64)
            comm.allgather(data(me, call, count, np.int64), recv)
            ok = np.array_equal(recv, np.concatenate([data(r, call, count, np.int64) for r in range(P)]))
        else:
            view = comm.send_view(count, np.int64)
            view[:] = data(me, call, count, np.int64)
            got = comm.allgather_zero_copy(view).array.copy()
            ok = np.array_equal(got, np.stack([data(r, call, count, np.int64) for r in range(P)]))
        if not ok:
            bad.append((call, kind, count))
    return bad


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_back_to_back_mixed_calls_with_random_delays_and_no_barrier(coherence):
    # slot 512 B: 300 doubles per rank go in chunks, so every call reuses both buffers
    out = run_local(3, _stress_workload, (120, 7), slot_bytes=512, coherence=coherence, timeout_s=120)
    assert out == [[]] * 3


# -- flush schedules on the non-coherent cache model --------------------------------------------
def _schedule_workload(comm):
    comm.enable_log(100000)
    P, me = comm.size, comm.rank
    for call, root in enumerate([0, 1, 1, 0]):  # back-to-back broadcasts pipeline through both buffers
        buf = data(root, call, 20, np.float64) if me == root else np.zeros(20)
        comm.broadcast(buf, root)
    send = data(me, 9, 40 * P, np.float32)
    comm.reduce_scatter(send, np.empty(40, np.float32), "sum")
    comm.alltoall(np.arange(8 * P, dtype=np.int64), np.empty(8 * P, np.int64))
    for large in (0, 1 << 30):
        comm.allreduce(data(me, 10, 100, np.float64), np.empty(100), "sum", large_bytes=large)
    comm.barrier()
    comm.broadcast(np.full(40, 1.0 * me), 0)
    comm.broadcast(np.full(40, 2.0 * me), 0)
    view = comm.send_view(16, np.int32)  # zero-copy right after two broadcasts: rank 0 waits for the readers
    view[:] = me
    comm.allgather_zero_copy(view)
    comm.broadcast(np.zeros(30), 0)
    recv = np.empty(12 * P, np.uint8)
    comm.allgather(np.full(12, me, np.uint8), recv)
    return comm.log_events()


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_collectives_flush_schedule_passes_the_cache_model(nranks):
    logs = run_local(nranks, _schedule_workload, slot_bytes=512, coherence="flush", timeout_s=60)
    lay = SegmentLayout.plan(nranks, 512)
    assert replay(logs, lay) == []
    hw_logs = run_local(nranks, _schedule_workload, slot_bytes=512, coherence="hw", timeout_s=60)
    problems = replay(hw_logs, lay)  # no flushes at all: the model must see stale data or hangs
    assert problems and all(("stale READ" in p or "deadlock" in p or "did not write" in p) for p in problems)


def test_a_broadcast_reader_that_skips_its_invalidation_reads_stale_data():
    logs = run_local(2, _schedule_workload, slot_bytes=512, coherence="flush", timeout_s=60)
    lay = SegmentLayout.plan(2, 512)
    reader = logs[1].tolist()
    # rank 1's acknowledgements: the flag value after the one it polled rank 0's flag for
    polled = {e[2] for e in reader if e[0] in (PoolEvent.POLL_FLUSHED, PoolEvent.POLL_CACHED) and e[1] == lay.flags_offset}
    acks = [i for i, e in enumerate(reader) if e[0] == PoolEvent.FLAG_STORE and e[2] - 1 in polled]
    assert len(acks) >= 2  # then drop its invalidations between the first two acknowledgements
    cut = [i for i, e in enumerate(reader[:acks[1]]) if i > acks[0] and e[0] == PoolEvent.FLUSH
           and e[1] >= lay.data_offset]
    mutated = [logs[0], np.array([e for i, e in enumerate(reader) if i not in cut], dtype=np.int64)]
    problems = replay(mutated, lay, ["lazy"])
    assert problems and "stale READ of rank" in problems[0]


# -- errors -------------------------------------------------------------------------------------
def _errors(comm):
    seen = []
    for call in (lambda: comm.allreduce(np.zeros(4, np.float32), np.zeros(4, np.float32), "band"),
                 lambda: comm.allreduce(np.zeros(4, np.complex64), np.zeros(4, np.complex64)),
                 lambda: comm.allreduce(np.zeros(4), np.zeros(5)),
                 lambda: comm.allreduce(np.zeros(4), np.zeros(4, np.float32)),
                 lambda: comm.allreduce(np.zeros(4), np.zeros(4), large_bytes=-1),
                 lambda: comm.reduce_scatter(np.zeros(5), np.zeros(2)),
                 lambda: comm.alltoall(np.zeros(3, np.uint8), np.zeros(3, np.uint8)),
                 lambda: comm.broadcast(np.zeros(3), 2)):
        try:
            call()
        except InputError as e:
            seen.append(str(e).split(":")[0])
    comm.allreduce_start(np.ones(4), np.zeros(4))
    try:
        comm.barrier()
    except RunError as e:
        seen.append("in flight" in str(e))
    comm.allreduce_wait()
    try:
        comm.allreduce_wait()
    except RunError as e:
        seen.append("no allreduce" in str(e))
    return seen


@pytest.mark.parametrize("kernel", ["cython", "reference"])
def test_bad_arguments_are_input_errors_naming_the_call(kernel):
    out = run_local(2, _errors, slot_bytes=256, kernel=kernel, timeout_s=30)
    assert out[0] == ["allreduce"] * 4 + ["allreduce_large_bytes", "reduce_scatter", "alltoall", "broadcast", True, True]


def _codes_after_codes(comm):
    """Reductions whose dtype or op changes from call to call on one kernel (it reuses the last call's
    checked codes when the dtype and op objects repeat); and refusals right after a good call."""
    out, refused = [], []
    for dtype, op in ((np.float32, "sum"), (np.float32, "sum"), (np.int32, "sum"), (np.int32, "bxor"),
                      (np.float64, "max"), (np.float32, "sum"), (np.int64, "prod")):
        send = (np.arange(5) + 2 + comm.rank).astype(dtype)
        recv = np.empty_like(send)
        comm.allreduce(send, recv, op)
        out.append(recv.tolist())
        bad_calls = ((comm.allreduce, send.astype(np.float32), recv.astype(np.float32), "band"),
                     (comm.allreduce, send, recv.astype(np.int16), "sum"),
                     (comm.allreduce, send.astype(">f4"), recv.astype(">f4"), "sum"),  # not native
                     (comm.reduce_scatter, np.zeros(2 * 5, np.float16), np.zeros(5, np.float16), "sum"))
        for call, *args in bad_calls:
            try:
                call(*args)
            except InputError:
                refused.append(True)
    return out, refused


def test_reduction_codes_follow_each_calls_dtype_and_op():
    out = run_local(2, _codes_after_codes, slot_bytes=256, timeout_s=30)
    values, refused = out[0]
    assert out[0] == out[1] and refused == [True] * 28
    a, b = np.arange(5) + 2, np.arange(5) + 3
    assert values == [(a + b).tolist()] * 3 + [(a ^ b).tolist(), np.maximum(a, b).tolist(), (a + b).tolist(),
                                              (a * b).tolist()]


def test_a_slot_too_small_for_one_element_per_rank_is_refused():
    with pytest.raises(RankFailure, match="cannot hold one element per rank"):
        run_local(3, lambda comm: comm.reduce_scatter(np.zeros(3 * 8), np.zeros(8)), slot_bytes=16, timeout_s=10)


def test_a_missing_rank_times_out_naming_it():
    def fn(comm):
        if comm.rank == 0:
            comm.broadcast(np.zeros(4), 1)
    with pytest.raises(RankFailure, match=r"broadcast epoch 1 timed out after 0.5 s waiting for rank\(s\) \[1\]"):
        run_local(2, fn, slot_bytes=256, timeout_s=0.5)


def _non_temporal_workload(comm):
    comm.nt_min_bytes = 1  # every copy into the pool streams (unaligned heads and tails included)
    return _twin_workload(comm)


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_non_temporal_copy_ins_deliver_the_same_bits_and_schedule(coherence):
    streamed = run_local(3, _non_temporal_workload, slot_bytes=TWIN_SLOT, coherence=coherence, timeout_s=60)
    plain, expected = twin_run("cython", 3, coherence), _expected_twin_results(3)
    for rank in range(3):
        assert all(_same_bits(s, e) for s, e in zip(streamed[rank][0], expected[rank]))
        assert np.array_equal(streamed[rank][1], plain[rank][1])


def test_the_non_temporal_threshold_is_checked():
    from cxlsim.emulator._pool_kernel import check_nt_min_bytes

    assert check_nt_min_bytes(0) == 0 and check_nt_min_bytes(65536) == 65536
    for bad in (-1, 1.5, True, "64KiB"):
        with pytest.raises(InputError, match="nt_min_bytes: expected a number of bytes >= 0"):
            check_nt_min_bytes(bad)


def _choose(comm):
    choice = comm.choose_copy_in()
    return choice, comm.nt_min_bytes


def test_choose_copy_in_decides_alike_on_every_rank_from_the_round_trip():
    from cxlsim.emulator.comm import DISTURBED_ROUNDTRIP_NS, NT_SLOW_MIN_BYTES, PROBE_TRIES, SLOW_ROUNDTRIP_NS

    (a, nt_a), (b, nt_b) = run_local(2, _choose, slot_bytes=64, timeout_s=60)
    assert a == b and nt_a == nt_b == a["nt_min_bytes"]
    rt = a["roundtrip_ns"]
    expected = "disturbed" if rt > DISTURBED_ROUNDTRIP_NS else "slow" if rt > SLOW_ROUNDTRIP_NS else "fast"
    assert a["placement"] == expected and a["nt_min_bytes"] == (NT_SLOW_MIN_BYTES if expected == "slow" else 0)
    # the probe is repeated only while it reads disturbed
    assert 1 <= a["tries"] <= PROBE_TRIES and (a["tries"] == PROBE_TRIES or rt <= DISTURBED_ROUNDTRIP_NS)
    for nranks, coherence in ((1, "hw"), (2, "flush")):
        out = run_local(nranks, _choose, slot_bytes=64, coherence=coherence, timeout_s=60)
        assert all(c == {"roundtrip_ns": None, "placement": "not probed", "nt_min_bytes": 0} for c, _ in out)


def _choose_then_allgather(comm, nt_min_bytes):
    comm.nt_min_bytes = nt_min_bytes
    epoch = comm.epoch
    choice = comm.choose_copy_in()
    probed = comm.epoch - epoch
    send, recv = np.full(4096, comm.rank + 1, np.uint8), np.zeros(4096 * comm.size, np.uint8)
    for _ in range(3):  # the steps after the probe still meet (epochs alike on every rank)
        comm.allgather(send, recv)
    return choice, comm.nt_min_bytes, probed, recv.reshape(comm.size, -1)[:, [0, -1]].tolist()


@pytest.mark.parametrize("nranks", [3, 4])
def test_choose_copy_in_probes_ranks_0_and_1_at_np_above_2_and_leaves_the_copy_ins(nranks):
    from cxlsim.emulator.comm import DISTURBED_ROUNDTRIP_NS, SLOW_ROUNDTRIP_NS

    out = run_local(nranks, _choose_then_allgather, (65536,), slot_bytes=4096, timeout_s=60)
    choices = [choice for choice, _, _, _ in out]
    assert all(c == choices[0] for c in choices)  # decided alike, from the pair's largest round trip
    rt = choices[0]["roundtrip_ns"]
    assert rt is not None and rt > 0
    expected = "disturbed" if rt > DISTURBED_ROUNDTRIP_NS else "slow" if rt > SLOW_ROUNDTRIP_NS else "fast"
    assert choices[0]["placement"] == expected
    # at np > 2 the probe only reports: the copy-ins stay as they were (np 2's measurements), on every rank
    assert all(nt == 65536 and c["nt_min_bytes"] == 65536 for c, nt, _, _ in out)
    assert len({probed for _, _, probed, _ in out}) == 1  # every rank's epoch moved on alike
    assert all(rows == [[r + 1, r + 1] for r in range(nranks)] for _, _, _, rows in out)


def _probe_pingpong(comm):
    return comm.probe_pingpong(20, 4096), comm.epoch


def test_probe_pingpong_times_ranks_0_and_1_and_the_others_wait():
    out = run_local(3, _probe_pingpong, slot_bytes=64, timeout_s=60)
    assert out[0][0] > 0 and out[1][0] > 0 and out[2][0] == 0.0
    assert len({epoch for _, epoch in out}) == 1
    two = run_local(2, _probe_pingpong, slot_bytes=64, timeout_s=60)
    assert all(ns > 0 for ns, _ in two)  # np 2: the flag ping-pong of both ranks
    with pytest.raises(RankFailure, match="probe_pingpong: needs at least 2 ranks"):
        run_local(1, _probe_pingpong, slot_bytes=64, timeout_s=60)


def test_a_comm_dropped_at_interpreter_exit_releases_quietly():
    """`__dealloc__` releases the split-phase buffers with a C call: a Python method looked up there can be gone
    at interpreter exit ("Exception ignored in PoolKernel.__dealloc__", seen after a bench side's calls)."""
    import subprocess
    import sys

    script = ("from cxlsim.coherence import Coherence\n"
              "from cxlsim.emulator.bench_collectives import CollectiveSide\n"
              "from cxlsim.emulator.comm import PoolComm\n"
              "from cxlsim.emulator.pool import Pool\n"
              "pool = Pool.create('shm', 1, 64)\n"
              "pool.unlink()\n"
              "comm = PoolComm.open(pool, 0, coherence=Coherence.HW)\n"
              "op = CollectiveSide('allreduce', 'copy', comm, None, 0, False).op\n"
              "for _ in range(30):\n"
              "    op()\n"
              "comm.close()\n"
              "pool.close()\n")
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and got.stderr == "", got.stderr
