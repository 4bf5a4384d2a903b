"""The pool collectives' copy patterns (calibrate.patterns) and their primitive (primitives.pattern_copy)."""
import numpy as np

import pytest

from cxlsim.calibrate.patterns import (FOLD, FOLD_NEXT, PATTERNS, join_pattern_ranks,
                                      kernel_steps, pattern_name, pattern_rank, view_rounds)
from cxlsim.errors import InputError


def moved(steps):
    """(bytes written, bytes read from pool slots, bytes read locally) of a rank's steps."""
    w = sum(write[1] for s in steps for write in s[0])
    pool = sum(n for s in steps for r, _, n in s[1] if r >= 0)
    local = sum(n for s in steps for r, _, n in s[1] if r < 0)
    return w, pool, local


def test_kernel_steps_move_what_the_kernels_move_by_hand():
    s = 4096
    assert moved(kernel_steps("broadcast", s, 0)) == (s, 0, 0)  # the root writes once
    assert moved(kernel_steps("broadcast", s, 1)) == (0, s, 0)  # the reader copies the root's block out
    for r in (0, 1):
        assert kernel_steps("alltoall", s, r) == [([((1 - r) * s, s)], [(-1, r * s, s), (1 - r, r * s, s)], False)]
        assert moved(kernel_steps("reduce_scatter", s, r)) == (s // 2, s // 2, s // 2)  # the other's block in
        assert moved(kernel_steps("allreduce_small", s, r)) == (s, s, s)  # own block from send, the other slot
        assert kernel_steps("allreduce_small", s, r)[0][2] == FOLD  # folded into an output, as into recv
        large = kernel_steps("allreduce_large", s, r)
        assert len(large) == 2 and large[0][2] == FOLD_NEXT and not large[1][2]  # the fold, then the copies out
        assert moved(large) == (s // 2, 3 * s // 2, s // 2)  # shares: the other's in (own folded in); 1 + 2 out
        # copy: the own block from send to recv in the copy-in's pass, then the other's slot out
        assert kernel_steps("allgather", s, r) == [([(0, s, True)], [(1 - r, 0, s)], False)]
        # zero-copy: the other's slot loaded in place, the own block from send
        assert kernel_steps("allgather_zero_copy", s, r) == [([(0, s)], [(-1 if k == r else k, 0, s) for k in (0, 1)],
                                                              True)]
        assert moved(kernel_steps("allgather", s, r)) == (s, s, 0)
        assert moved(kernel_steps("allgather_zero_copy", s, r)) == (s, s, s)
    assert pattern_name("allgather", 8, 64) == "allgather" and pattern_name("allgather_zero_copy", 8, 64) == "allgather_zero_copy"
    assert pattern_name("allreduce", 100, 64) == "allreduce_large" and pattern_name("allreduce", 8, 64) == "allreduce_small"
    assert pattern_name("barrier", 0, 64) is None and pattern_name("broadcast", 8, 64) == "broadcast"
    with pytest.raises(InputError, match="pattern"):
        kernel_steps("gather", s, 0)


def test_join_takes_the_slowest_copy_in_and_the_mean_copy_out_by_hand():
    """alltoall: both ranks wait for the other's flag, so each takes the slowest copy-in of each call; broadcast:
    the root waits for nothing, so its part is its own stores' issue time, the reader's the root's drained copy-in."""
    t0 = np.zeros((3, 1, 5))
    t1 = np.zeros((3, 1, 5))
    t0[:, 0, 0] = [10, 30, 10]  # rank 0's copy-in per call, stores drained
    t1[:, 0, 0] = [20, 20, 20]
    t0[:, 0, 4] = 4.0  # rank 0's stores issued
    t0[:, 0, 1] = 100.0  # copy-out
    t1[:, 0, 1] = 300.0
    t0[:, 0, 2] = 6.0  # write-back; invalidate 0
    got = join_pattern_ranks([{"alltoall": {64: t0}, "broadcast": {64: t0}}, {"alltoall": {64: t1}, "broadcast": {64: t1}}])
    assert got["alltoall"]["data"]["64"] == pytest.approx(20 + (100 + 300) / 2)  # median of (20, 30, 20) + mean out
    assert got["alltoall"]["maintenance"]["64"] == pytest.approx(6.0)
    assert got["broadcast"]["data"]["64"] == pytest.approx((4 + 100 + 20 + 300) / 2)  # root: issue + out; reader
    assert got["broadcast"]["maintenance"]["64"] == pytest.approx((6 + 6) / 2)
    assert got["alltoall"]["loads"]["64"] == 0.0  # no fold: its copy-out is no fold's loads
    folds = join_pattern_ranks([{"reduce_scatter": {64: t0}}, {"reduce_scatter": {64: t1}}])
    assert folds["reduce_scatter"]["loads"]["64"] == pytest.approx((100 + 300) / 2)  # the fold's loads, in place


def test_a_view_streams_only_where_the_pools_copy_ins_do():
    """cxl_view_streams (cxl_ops.h) has no size rule of its own: a view's copy-in streams from the pool's nt_min_bytes,
    as every copy-in (cxl_copy_in) does, so the view pattern's plain `cxl_copy_in` makes the view's copies."""
    import os
    import re

    import cxlsim.emulator as emulator

    with open(os.path.join(os.path.dirname(emulator.__file__), "cxl_ops.h")) as f:
        header = f.read()
    body = re.search(r"static inline int cxl_view_streams\(const cxl_pool_t \*p, uint64_t block_bytes\)\n\{\n(.*?)\n\}",
                     header, re.S).group(1)
    assert body.strip() == "return !p->flush_mode && !p->timed && p->nt_min_bytes && block_bytes >= p->nt_min_bytes;"
    assert "CXL_VIEW_NT_MIN_BYTES" not in header and "CXL_BCAST_VIEW_NT_MIN_BYTES" not in header


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_the_view_pattern_leaves_the_pool_as_it_was(coherence):
    from cxlsim.emulator import primitives
    from cxlsim.emulator.launch import run_local

    if coherence == "flush" and not {"clflushopt", "clflush"} & primitives.cpu_features():
        pytest.skip("no clflush on this CPU")

    def rank(comm):
        t = view_rounds(comm, 16384, 6)
        send = np.full(64, comm.rank + 3, np.uint8)
        recv = np.zeros(128, np.uint8)
        comm.allgather(send, recv)  # the pool protocol is still in step afterwards
        return t, comm.nt_min_bytes, recv.tolist()
    for t, nt_min, recv in run_local(2, rank, coherence=coherence, slot_bytes=1 << 18):
        assert t.shape == (6, 4) and np.all(np.isfinite(t)) and np.all(t >= 0) and t[:, 1].any()
        assert nt_min == 0 and recv == [3] * 64 + [4] * 64


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_pattern_primitive_times_every_pattern_and_keeps_the_protocol_in_step(coherence):
    from cxlsim.emulator import primitives
    from cxlsim.emulator.launch import run_local

    if coherence == "flush" and not {"clflushopt", "clflush"} & primitives.cpu_features():
        pytest.skip("no clflush on this CPU")

    def rank(comm):
        got = pattern_rank(comm, [4096], warmup=2, iterations=5, passes=2)
        send = np.full(64, comm.rank + 3, np.uint8)
        recv = np.zeros(128, np.uint8)
        comm.allgather(send, recv)  # the pool protocol is still in step afterwards
        return got, comm.epoch, comm.data_round, recv.tolist()
    out = run_local(2, rank, coherence=coherence, slot_bytes=8192)
    steps = {p: len(kernel_steps(p, 4096, 0)) for p in PATTERNS}
    for got, epoch, data_round, recv in out:
        assert set(got) == set(PATTERNS)
        for p, by in got.items():
            t = by[4096]
            assert t.shape == (10, steps[p], 5) and np.all(np.isfinite(t)) and np.all(t >= 0)
            assert np.median(t[:, :, 4]) <= np.median(t[:, :, 0]) + 60  # issued no later than drained
            if coherence == "hw":
                assert not t[:, :, 2:4].any()  # no write-back or invalidation in hw mode
        calls = sum(steps.values()) * 14
        assert epoch == 2 * calls + 1 and data_round == calls + 1
        assert recv == [3] * 64 + [4] * 64
    joined = join_pattern_ranks([o[0] for o in out])
    assert all(joined[p]["data"]["4096"] > 0 for p in PATTERNS)  # every pattern copies 4 KiB somewhere
    with pytest.raises(Exception, match="outside"):
        run_local(2, lambda comm: primitives.pattern_copy(comm, [([(0, 128)], [], False)], 1), slot_bytes=64)
    with pytest.raises(Exception, match="offset, nbytes"):
        run_local(2, lambda comm: primitives.pattern_copy(comm, [([(0, 64, True, 1)], [], False)], 1), slot_bytes=64)
    with pytest.raises(Exception, match="fold step"):  # the kernels' fold: blocks of one size, whole float32s
        run_local(2, lambda comm: primitives.pattern_copy(comm, [([(0, 64)], [(-1, 0, 64), (0, 0, 32)], FOLD)], 1),
                  slot_bytes=64)


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_a_fold_into_the_next_slot_leaves_the_fold_there(coherence):
    """FOLD_NEXT (the large allreduce's share): the float32 sum of the step's reads lands in this rank's slot of the next
    data round at the first read's offset, where the next step's reads (and the other rank) find it; a fold that would
    leave the slot is refused."""
    from cxlsim.emulator import primitives
    from cxlsim.emulator.launch import run_local

    def rank(comm):
        o = 1 - comm.rank
        steps = [([(0, 256)], [(-1, 128, 128), (o, 128, 128)], FOLD_NEXT), ([], [(comm.rank, 128, 128)], False)]
        primitives.pattern_copy(comm, steps, 3)
        got = np.frombuffer(bytes(comm._pool_view[comm.slot_offset(comm.data_round, comm.rank) + 128:][:128]),
                            np.float32)
        return got.tolist()
    out = run_local(2, rank, coherence=coherence, slot_bytes=512)
    for me, got in enumerate(out):  # private source bytes are (rank + 1) & 255, the other's slot holds its copy-in
        mine = np.frombuffer(bytes([me + 1]) * 128, np.float32)
        other = np.frombuffer(bytes([2 - me]) * 128, np.float32)
        assert got == (mine + other).tolist()
    with pytest.raises(Exception, match="next slot"):
        run_local(2, lambda comm: primitives.pattern_copy(comm, [([], [(-1, 64, 64), (1 - comm.rank, 0, 64)], FOLD_NEXT),
                                                                 ([], [(0, 0, 64)], False)], 1), slot_bytes=64)


@pytest.mark.parametrize("coherence", ["hw", "flush"])
@pytest.mark.parametrize("nt_min", [0, 2048])
def test_a_kept_write_fills_the_slot_as_a_plain_one(coherence, nt_min):
    """A (offset, nbytes, True) write is the copy-mode allgather's copy-in (cxl_copy_in_keep, chunks of 16 KiB, plain or
    non-temporal stores): the other rank finds the writer's bytes in its slot, across a chunk boundary."""
    from cxlsim.emulator import primitives
    from cxlsim.emulator.launch import run_local

    if coherence == "flush" and not {"clflushopt", "clflush"} & primitives.cpu_features():
        pytest.skip("no clflush on this CPU")
    n = 16384 + 320

    def rank(comm):
        comm.nt_min_bytes = nt_min if coherence == "hw" else 0
        t = primitives.pattern_copy(comm, [([(64, n, True)], [(1 - comm.rank, 64, n)], False)], 3)
        other = comm.slot_offset(comm.data_round, 1 - comm.rank) + 64
        return t, bytes(comm._pool_view[other:other + n])
    for me, (t, got) in enumerate(run_local(2, rank, coherence=coherence, slot_bytes=1 << 15)):
        assert t.shape == (3, 1, 5) and t[:, 0, 0].all() and t[:, 0, 1].all()
        assert got == bytes([(1 - me) + 1]) * n  # private source bytes are (rank + 1) & 255
