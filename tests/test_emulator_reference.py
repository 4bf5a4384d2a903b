"""The pure-Python twin against the Cython kernels, and flush schedules against the non-coherent cache model."""
import functools
import hashlib
import time

import numpy as np
import pytest

from cxlsim.coherence import PoolEvent
from cxlsim.emulator import _kernels, _pool_kernel
from cxlsim.emulator.cache_model import NonCoherentCacheModel, ScheduleError, check_schedule, replay
from cxlsim.emulator.comm import CollectiveTimeout, StaleViewError
from cxlsim.emulator.launch import RankFailure, comm_class, run_local
from cxlsim.emulator.pool import Pool, SegmentLayout
from cxlsim.emulator.reference import ReferenceComm, ReferenceKernel
from cxlsim.errors import InputError, RunError

KERNELS = ("cython", "reference")
COUNTS = (0, 1, 63, 64, 65, 4096)
DTYPES = (np.uint8, np.int16, np.float64, np.complex64)
FULL_SLOT = 4096 * 8
REPLAY_SIZES = (200, 1, 65, 128)  # bytes per rank; 4 calls, so both buffers are reused
REPLAY_SLOT = 256


def block(rank, call, count, dtype):
    """Contents that depend on rank and call, so a stale or misplaced block is caught."""
    return ((np.arange(count) * 7 + rank * 101 + call * 13) % 251).astype(dtype)


def _full_workload(comm):
    """Every dtype x count in copy and zero-copy mode; return (wrong calls, digest of all results, log)."""
    comm.enable_log(20000)
    wrong, digest, call = [], hashlib.sha256(), 0
    for dtype in DTYPES:
        for count in COUNTS:
            for zero_copy in (False, True):
                expected = np.stack([block(r, call, count, dtype) for r in range(comm.size)])
                if zero_copy:
                    view = comm.send_view(count, dtype)
                    view[:] = block(comm.rank, call, count, dtype)
                    got = comm.allgather_zero_copy(view).array.copy()
                else:
                    got = np.empty(comm.size * count, dtype=dtype)
                    comm.allgather(block(comm.rank, call, count, dtype), got)
                    got = got.reshape(comm.size, count)
                if not np.array_equal(got, expected):
                    wrong.append((np.dtype(dtype).name, count, "zero-copy" if zero_copy else "copy"))
                digest.update(got.tobytes())
                call += 1
    return wrong, digest.hexdigest(), comm.log_events()


def _replay_workload(comm):
    """A few back-to-back calls (copy and zero-copy alternate) with small blocks; return the event log."""
    comm.enable_log(1000)
    for call, nbytes in enumerate(REPLAY_SIZES):
        if call % 2:
            view = comm.send_view(nbytes)
            view[:] = block(comm.rank, call, nbytes, np.uint8)
            result = comm.allgather_zero_copy(view).array
        else:
            result = np.empty((comm.size, nbytes), np.uint8)
            comm.allgather(block(comm.rank, call, nbytes, np.uint8), result)
        assert np.array_equal(result, np.stack([block(r, call, nbytes, np.uint8) for r in range(comm.size)]))
    return comm.log_events()


@functools.cache
def full_run(kernel, nranks, coherence):
    return run_local(nranks, _full_workload, slot_bytes=FULL_SLOT, coherence=coherence, kernel=kernel, timeout_s=30)


@functools.cache
def replay_logs(kernel, nranks, coherence, writeback="auto"):
    return run_local(nranks, _replay_workload, slot_bytes=REPLAY_SLOT, coherence=coherence, kernel=kernel,
                     writeback=writeback, timeout_s=30)


def first_difference(a, b):
    """Where two event logs part, for an assertion message."""
    for i in range(min(len(a), len(b))):
        if not np.array_equal(a[i], b[i]):
            return f"event {i}: cython {a[i].tolist()} vs reference {b[i].tolist()}"
    return f"lengths {len(a)} vs {len(b)}"


# -- the twin against the Cython kernel -------------------------------------------------------
@pytest.mark.parametrize("coherence", ["hw", "flush"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_reference_gives_the_same_results_and_event_logs(nranks, coherence):
    cython, reference = full_run("cython", nranks, coherence), full_run("reference", nranks, coherence)
    for rank in range(nranks):
        (c_wrong, c_digest, c_log), (r_wrong, r_digest, r_log) = cython[rank], reference[rank]
        assert c_wrong == [] and r_wrong == [], f"rank {rank}: wrong results cython {c_wrong}, reference {r_wrong}"
        assert c_digest == r_digest
        assert len(c_log) > 0
        assert np.array_equal(c_log, r_log), f"rank {rank}: logs differ at {first_difference(c_log, r_log)}"


@pytest.mark.parametrize("writeback", ["clflushopt", "clwb"])
def test_reference_logs_match_with_either_write_back_op(writeback):
    if writeback not in _kernels.cpu_features():
        pytest.skip(f"this CPU lacks {writeback}")
    cython, reference = replay_logs("cython", 2, "flush", writeback), replay_logs("reference", 2, "flush", writeback)
    writer_op = PoolEvent.WRITEBACK if writeback == "clwb" else PoolEvent.FLUSH
    for c_log, r_log in zip(cython, reference):
        assert np.array_equal(c_log, r_log), first_difference(c_log, r_log)
        assert writer_op in c_log[:, 0]


def test_comm_class_reference_is_the_twin_with_zero_copy_and_stale_views():
    assert comm_class("reference") is ReferenceComm
    assert issubclass(ReferenceComm, ReferenceKernel)
    with solo("reference") as comm:
        view = comm.send_view(5, np.int32)
        view[:] = np.arange(5)
        result = comm.allgather_zero_copy(view)
        assert result.array.tolist() == [[0, 1, 2, 3, 4]] and not result.array.flags.writeable
        comm.barrier()
        with pytest.raises(StaleViewError):
            result.array


# -- API parity -------------------------------------------------------------------------------
class solo:
    """A one-process communicator on a fresh pool (`nranks` slots, only rank 0 attached)."""

    def __init__(self, kernel, nranks=1, slot_bytes=256, **options):
        self.kernel, self.nranks, self.slot_bytes, self.options = kernel, nranks, slot_bytes, options

    def __enter__(self):
        self.pool = Pool.create("shm", self.nranks, self.slot_bytes)
        try:
            self.comm = comm_class(self.kernel).open(self.pool, 0, **self.options)
        except BaseException:
            self.pool.close()
            self.pool.unlink()
            raise
        return self.comm

    def __exit__(self, *exc):
        self.comm.close()
        self.pool.unlink()


def _kernel_kwargs(**changes):
    lay = SegmentLayout.plan(2, 100)
    kwargs = dict(nranks=2, rank=0, flags_offset=lay.flags_offset, data_offset=lay.data_offset,
                  slot_stride=lay.slot_stride, slot_bytes=lay.slot_bytes)
    kwargs.update(changes)
    return lay, kwargs


@pytest.mark.parametrize("changes", [
    dict(rank=2), dict(rank=-1), dict(coherence="mesi"), dict(slot_stride=100), dict(nranks=4000),
    dict(coherence="flush"), dict(coherence="flush", writeback_op=_kernels.OP_CLWB, invalidate_op=_kernels.OP_CLWB),
])
def test_constructor_errors_match(changes):
    lay, kwargs = _kernel_kwargs(**changes)
    messages = []
    for cls in (_pool_kernel.PoolKernel, ReferenceKernel):
        with pytest.raises(InputError) as info:
            cls(bytearray(lay.total_bytes), **kwargs)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_attributes_and_small_methods_match():
    lay, kwargs = _kernel_kwargs(coherence="flush", writeback_op=_kernels.OP_CLFLUSH,
                                 invalidate_op=_kernels.OP_CLFLUSH, timeout_ns=5e8)
    a = _pool_kernel.PoolKernel(bytearray(lay.total_bytes), **kwargs)
    b = ReferenceKernel(bytearray(lay.total_bytes), **kwargs)
    for name in ("epoch", "slot_bytes", "timeout_ns", "rank", "size", "coherence"):
        assert getattr(a, name) == getattr(b, name), name
    assert [a.slot_offset(e, r) for e in range(3) for r in range(2)] == \
           [b.slot_offset(e, r) for e in range(3) for r in range(2)]
    assert a.flag_epochs() == b.flag_epochs() == [0, 0]
    with pytest.raises(AttributeError):
        b.epoch = 3
    for k in (a, b):
        with pytest.raises(RunError, match="event log is off"):
            k.log_events()
        k.close()
        with pytest.raises(RunError, match="closed"):
            k.allgather_in_place(0)
        with pytest.raises(RunError, match="closed"):
            k.flag_epochs()


@pytest.mark.parametrize("kernel", KERNELS)
def test_buffer_errors_and_log_overflow(kernel):
    with solo(kernel, slot_bytes=64) as comm:
        with pytest.raises(InputError, match="pool slots hold 64"):
            comm.allgather(np.zeros(65, np.uint8), np.zeros(65, np.uint8))
        with pytest.raises(InputError, match="expected 1 x 8"):
            comm.allgather(np.zeros(8, np.uint8), np.zeros(9, np.uint8))
        with pytest.raises(ValueError):
            comm.allgather(np.zeros((4, 4))[:, ::2], np.zeros(8))
        readonly = np.zeros(4)
        readonly.flags.writeable = False
        with pytest.raises(ValueError):
            comm.allgather(np.zeros(4), readonly)
        fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
        recv = np.zeros((2, 3), order="F")
        comm.allgather(fortran, recv)
        assert np.array_equal(recv, fortran)
        comm.enable_log(2)
        comm.barrier()
        with pytest.raises(RunError, match=r"overflowed \(3 events, capacity 2\)"):
            comm.log_events()


@pytest.mark.parametrize("kernel", KERNELS)
def test_send_views_are_reused_per_buffer_and_key_and_checked_by_identity(kernel):
    """The Cython kernel's fast path (views of the last (count, dtype) kept per buffer) keeps the
    twin's semantics: same key and buffer, same array; another buffer after a data call only."""
    with solo(kernel, slot_bytes=64) as comm:
        a = comm.send_view(8)
        assert comm.send_view(8) is a and comm.send_view(np.int64(8)) is a
        w = comm.send_view(2, np.uint32)
        assert w is not a and w.dtype == np.uint32 and comm.send_view(2, np.uint32) is w
        assert comm.send_view(8) is a  # back to a key seen before: the same array
        a[:] = 7
        comm.send_view(2, np.uint32)  # the kernel's cached key is now another one
        result = comm.allgather_zero_copy(a)  # a is still this call's view
        assert result.array.tolist() == [[7] * 8]
        b = comm.send_view(8)
        assert b is not a and b.ctypes.data != a.ctypes.data  # the other buffer
        with pytest.raises(InputError, match="send_view"):
            comm.allgather_zero_copy(a)  # last call's view
        with pytest.raises(InputError, match="send_view"):
            comm.allgather_zero_copy(np.zeros(8, np.uint8))
        with pytest.raises(InputError, match="send_view"):
            comm.allgather_zero_copy(None)
        comm.barrier()  # no data round: the next call keeps this buffer
        assert comm.send_view(8) is b
        empty = comm.allgather_zero_copy(comm.send_view(0))
        assert empty.array.shape == (1, 0) and comm.send_view(8) is b
        b[:] = np.arange(8)
        second = comm.allgather_zero_copy(b)
        assert comm.send_view(8) is a
        assert second.array.tolist() == [list(range(8))] and not second.array.flags.writeable
        with pytest.raises(InputError, match="does not fit"):
            comm.send_view(65)
        with pytest.raises(InputError, match="does not fit"):
            comm.send_view(-1)


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_zero_copy_result_keeps_its_own_epoch(kernel):
    with solo(kernel, slot_bytes=64) as comm:
        results = []
        for call in range(6):
            view = comm.send_view(4)
            view[:] = call
            results.append(comm.allgather_zero_copy(view))
            assert results[-1].epoch == call + 1 and len({r.epoch for r in results}) == len(results)
            for old in results[:-1]:
                with pytest.raises(StaleViewError, match=f"epoch {old.epoch} used after epoch {call + 1}"):
                    old.array
            assert results[-1].array.tolist() == [[call] * 4] and results[-1][0][0] == call
            if call % 2:
                del results[:-1]  # dead results are recycled; the live ones keep their epochs
        made = _pool_kernel.ZeroCopyResult(comm, comm.epoch, results[-1].array)  # the public constructor
        assert made.epoch == comm.epoch and made.array is results[-1].array
        comm.barrier()
        with pytest.raises(StaleViewError):
            made.array


@pytest.mark.parametrize("kernel", KERNELS)
def test_zero_copy_calls_after_close_are_clear_errors(kernel):
    with solo(kernel, slot_bytes=64) as comm:
        view = comm.send_view(8)
        comm.close()
        for call in (lambda: comm.send_view(8), lambda: comm.allgather_zero_copy(view)):
            with pytest.raises(RunError, match="closed"):
                call()
        view[:] = 1  # still pinned to the mapping


@pytest.mark.parametrize("nbytes", [0, 1, 4095, 65535, 65536, 65537, 3 * 65536 + 5])
def test_read_pass_sums_on_both_sides_of_its_gil_threshold(nbytes):
    assert _kernels.READ_PASS_NOGIL_MIN_BYTES == 65536
    data = np.full(nbytes, 0xA5, np.uint8)
    assert _kernels.read_pass(data) == _kernels.checksum_of_fill(0xA5, nbytes)
    stride = -(-max(nbytes, 1) // 64) * 64
    padded = np.zeros(2 * stride, np.uint8)
    padded[:nbytes] = 3
    padded[stride: stride + nbytes] = 5
    rows = np.lib.stride_tricks.as_strided(padded, shape=(2, nbytes), strides=(stride, 1))
    want = (_kernels.checksum_of_fill(3, nbytes) + _kernels.checksum_of_fill(5, nbytes)) % 2**64
    assert _kernels.read_pass(rows) == want


@pytest.mark.parametrize("nbytes", [0, 1, 63, 4095, 65535, 65536, 65537])
def test_read_pass_of_a_numpy_array_equals_its_buffer_read(nbytes):
    """An ndarray's layout is read from the array (no buffer export); the sum and the refusals are the buffer path's."""
    rng = np.random.default_rng(nbytes)
    data = rng.integers(0, 256, 2 * nbytes + 64, dtype=np.uint8)
    cases = [data[:nbytes], data[:nbytes].view(np.uint8).reshape(1, -1), data[:2 * nbytes].reshape(2, nbytes),
             data[:2 * nbytes + 64].reshape(2, nbytes + 32)[:, :nbytes],  # 2-D, strided rows
             data[:nbytes - nbytes % 8].view(np.float64), data[:nbytes].copy()]
    for case in cases:
        assert _kernels.read_pass(case) == _kernels.read_pass(memoryview(case)), case.shape
    assert _kernels.read_pass(tuple(cases[:2])) == (2 * _kernels.read_pass(memoryview(cases[0]))) % 2**64
    for bad in (np.zeros(16, np.uint8)[::2], np.zeros((2, 2, 2), np.uint8), np.zeros((4, 4), np.uint8)[:, ::2]):
        with pytest.raises(InputError, match="read_pass: expected a 1-D contiguous or 2-D row-contiguous buffer"):
            _kernels.read_pass(bad)


@pytest.mark.parametrize("nbytes", [0, 1, 4095, 65536, 65537])
def test_write_block_copies_every_byte_and_rejects_a_size_mismatch(nbytes):
    src = (np.arange(nbytes) % 251).astype(np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    _kernels.write_block(dst, src)
    assert np.array_equal(dst, src)
    with pytest.raises(InputError, match=f"write_block: src has {nbytes + 1} bytes, dst {nbytes}"):
        _kernels.write_block(dst, np.zeros(nbytes + 1, np.uint8))
    with pytest.raises((BufferError, ValueError, TypeError)):
        _kernels.write_block(src[::-1] if nbytes > 1 else b"x", src[:1])  # not writable / contiguous


# -- timeouts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("zero_copy", [False, True])
def test_a_rank_that_never_arrives_times_out_naming_it(zero_copy):
    messages = []
    for kernel in KERNELS:
        with solo(kernel, nranks=3, slot_bytes=64, timeout_s=0.3) as comm:
            comm.enable_log(100)
            start = time.monotonic()
            with pytest.raises(CollectiveTimeout) as info:
                if zero_copy:
                    comm.allgather_zero_copy(comm.send_view(8))
                else:
                    comm.allgather(np.zeros(8, np.uint8), np.zeros(24, np.uint8))
            elapsed = time.monotonic() - start
            assert info.value.missing == [1, 2], kernel
            assert 0.25 < elapsed < 3.0, f"{kernel}: timed out after {elapsed:.2f} s, expected about 0.3 s"
            assert PoolEvent.POLL_CACHED not in comm.log_events()[:, 0] and PoolEvent.READ not in comm.log_events()[:, 0]
            messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "rank 0: allgather epoch 1 timed out after 0.3 s waiting for rank(s) [1, 2]" in messages[0]


def _skip_last_rank(comm):
    if comm.rank < comm.size - 1:
        comm.barrier()
    return comm.rank


@pytest.mark.parametrize("kernel", KERNELS)
def test_local_run_names_the_missing_rank(kernel):
    with pytest.raises(RankFailure) as info:
        run_local(3, _skip_last_rank, slot_bytes=64, timeout_s=0.3, kernel=kernel)
    assert sorted(info.value.failures) == [0, 1]
    assert all("waiting for rank(s) [2]" in msg for msg in info.value.failures.values())


# -- the non-coherent cache model ------------------------------------------------------------
@pytest.mark.parametrize("writeback", ["clflushopt", "clwb"])
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_flush_schedule_of_the_real_kernel_replays_clean(nranks, writeback):
    if writeback not in _kernels.cpu_features():
        pytest.skip(f"this CPU lacks {writeback}")
    logs = replay_logs("cython", nranks, "flush", writeback)
    assert sum((log[:, 0] == PoolEvent.WRITE).sum() for log in logs) == nranks * len(REPLAY_SIZES)
    assert replay(logs, SegmentLayout.plan(nranks, REPLAY_SLOT)) == []
    check_schedule(logs, SegmentLayout.plan(nranks, REPLAY_SLOT))


def test_flush_schedule_replays_clean_over_every_dtype_size_and_mode():
    """48 calls: blocks of 0 bytes, partial lines and 32 KiB, copy and zero-copy, both buffers reused."""
    logs = [log for _, _, log in full_run("cython", 2, "flush")]
    assert replay(logs, SegmentLayout.plan(2, FULL_SLOT)) == []


@pytest.mark.parametrize("nranks", [2, 3])
def test_hw_schedule_fails_without_coherence(nranks):
    problems = replay(replay_logs("cython", nranks, "hw"), SegmentLayout.plan(nranks, REPLAY_SLOT))
    assert len(problems) == 4, problems  # every eviction policy finds a problem
    lazy, flags_early = problems[0], problems[1]
    assert lazy.startswith("[lazy] deadlock") and "polling without invalidating never sees a newer value" in lazy
    assert flags_early.startswith("[flags-early]") and "stale READ" in flags_early
    with pytest.raises(ScheduleError) as info:
        check_schedule(replay_logs("cython", nranks, "hw"), SegmentLayout.plan(nranks, REPLAY_SLOT))
    assert isinstance(info.value, AssertionError) and info.value.problems == problems


# Mutations of the correct flush schedule. Each takes (log, rank, layout) and returns a new log.
def _own_slot(layout, rank, offset):
    index = (offset - layout.data_offset) // layout.slot_stride
    return offset >= layout.data_offset and index % layout.nranks == rank


def _is_data(layout, offset):
    return offset >= layout.data_offset


def drop_reader_invalidation(log, rank, lay):
    return [e for e in log if not (e[0] == PoolEvent.FLUSH and _is_data(lay, e[1]) and not _own_slot(lay, rank, e[1]))]


def reader_uses_clwb(log, rank, lay):
    return [[PoolEvent.WRITEBACK, e[1], e[2]] if e[0] == PoolEvent.FLUSH and _is_data(lay, e[1]) and not _own_slot(lay, rank, e[1])
            else e for e in log]


def drop_writer_write_backs(log, rank, lay):
    return [e for e in log if not (e[0] in (PoolEvent.FLUSH, PoolEvent.WRITEBACK) and _own_slot(lay, rank, e[1]))]


def drop_flag_write_back(log, rank, lay):
    return [e for e in log if not (e[0] in (PoolEvent.FLUSH, PoolEvent.WRITEBACK) and e[1] == lay.flags_offset + 64 * rank)]


def drop_sfence(log, rank, lay):
    return [e for e in log if e[0] != PoolEvent.SFENCE]


def drop_mfence(log, rank, lay):
    return [e for e in log if e[0] != PoolEvent.MFENCE]


def poll_without_invalidating(log, rank, lay):
    return [[PoolEvent.POLL_CACHED, e[1], e[2]] if e[0] == PoolEvent.POLL_FLUSHED else e for e in log]


def _move_after_write(log, picked):
    """Move the events `picked(i, event)` selects to just after their call's WRITE."""
    out, insert_at = [], None
    for i, e in enumerate(log):
        if e[0] == PoolEvent.WRITE:
            insert_at = len(out) + 1
        if picked(i, e):
            out.insert(insert_at, e)
            insert_at += 1
        else:
            out.append(e)
    return out


def flag_store_before_data_write_back(log, rank, lay):
    return _move_after_write(log, lambda i, e: e[0] == PoolEvent.FLAG_STORE)


def flag_and_its_write_back_before_data_write_back(log, rank, lay):
    flag = lay.flags_offset + 64 * rank
    return _move_after_write(log, lambda i, e: e[0] == PoolEvent.FLAG_STORE or (e[0] == PoolEvent.FLUSH and e[1] == flag))


MUTATIONS = {  # mutation: (policy that must catch it, what its message must say)
    drop_reader_invalidation: ("lazy", "stale READ of rank {other}'s slot, line 0"
                               " (pool offset {offset}): saw rank {other}'s epoch 1 data from its own cache: "
                               "a copy it never invalidated; expected rank {other}'s epoch 3 data"),
    reader_uses_clwb: ("lazy", "from its own cache: a copy it never invalidated"),
    drop_mfence: ("lazy", "from its own cache: its invalidation was still pending (no MFENCE before the read)"),
    drop_writer_write_backs: ("lazy", "saw no data (nothing was ever written back there) from pool memory"),
    drop_sfence: ("lazy", "from pool memory: rank {other}'s write-back had not reached memory"),
    flag_store_before_data_write_back: ("flags-early", "from pool memory: rank {other}'s write-back had not reached"),
    flag_and_its_write_back_before_data_write_back: ("lazy", "from pool memory: rank {other}'s write-back had not"),
    drop_flag_write_back: ("lazy", "deadlock, no rank can make progress: rank 0 waits in POLL_FLUSHED for rank 1's "
                                   "flag to reach epoch 1, but pool memory holds 0 "
                                   "(rank 1 never wrote its flag line back)"),
    poll_without_invalidating: ("lazy", "deadlock, no rank can make progress"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS), ids=lambda f: f.__name__)
@pytest.mark.parametrize("nranks", [2, 3])
def test_a_wrong_flush_schedule_fails_replay(mutation, nranks):
    lay = SegmentLayout.plan(nranks, REPLAY_SLOT)
    logs = replay_logs("cython", nranks, "flush", "clflushopt")
    assert replay(logs, lay) == []
    mutated = [np.array(mutation(log.tolist(), rank, lay), dtype=np.int64).reshape(-1, 3)
               for rank, log in enumerate(logs)]
    assert any(not np.array_equal(a, b) for a, b in zip(logs, mutated)), "the mutation changed nothing"
    problems = replay(mutated, lay)
    policy, needle = MUTATIONS[mutation]
    caught = [p for p in problems if p.startswith(f"[{policy}]")]
    assert caught, f"{mutation.__name__}: policy {policy} found nothing; all problems: {problems}"
    others = [needle.format(other=o, offset=lay.data_offset + (1 * nranks + o) * lay.slot_stride)
              for o in range(nranks)]
    assert any(n in caught[0] for n in others), f"{mutation.__name__}: {caught[0]!r} does not say {needle!r}"


def test_model_rejects_lines_with_two_writers_and_foreign_flags():
    lay = SegmentLayout.plan(2, 64)
    other_slot = lay.data_offset + (1 * 2 + 1) * lay.slot_stride  # rank 1's slot of epoch 1
    bad_write = [np.array([[PoolEvent.WRITE, other_slot, 8]]), np.zeros((0, 3), np.int64)]
    assert "rank 0, epoch 1: WRITE of 8 bytes at pool offset" in replay(bad_write, lay, ["lazy"])[0]
    own_slot = other_slot - lay.slot_stride
    bad_flag = [np.array([[PoolEvent.WRITE, own_slot, 8], [PoolEvent.FLAG_STORE, lay.flags_offset + 64, 1]]), np.zeros((0, 3))]
    assert "FLAG_STORE of 1 at pool offset 4160, but its flag line is at 4096" in replay(bad_flag, lay, ["lazy"])[0]
    overflow = [np.array([[PoolEvent.WRITE, own_slot, 65]]), np.zeros((0, 3))]
    assert "holds 64" in replay(overflow, lay, ["lazy"])[0]
    assert "unknown event op 42" in replay([np.array([[42, 0, 0]]), np.zeros((0, 3))], lay)[0]
    with pytest.raises(InputError, match="policy"):
        NonCoherentCacheModel(lay, "mesi")


def test_model_reads_must_match_what_was_written():
    lay = SegmentLayout.plan(1, 128)
    slot1 = lay.data_offset + lay.slot_stride  # epoch 1 uses buffer 1
    log = [[PoolEvent.WRITE, slot1, 64], [PoolEvent.SFENCE, 0, 0], [PoolEvent.FLAG_STORE, lay.flags_offset, 1], [PoolEvent.READ, slot1, 128]]
    assert "which rank 0 did not write in epoch 1" in replay([np.array(log)], lay, ["lazy"])[0]
    log[-1] = [PoolEvent.READ, lay.data_offset, 64]
    # the other buffer: nothing was written there in epoch 1 (buffers follow data rounds, so the model
    # checks what was written rather than a parity rule)
    assert "(pool offset 8192), which rank 0 did not write in epoch 1" in replay([np.array(log)], lay, ["lazy"])[0]
    log[-1] = [PoolEvent.READ, slot1, 64]
    assert replay([np.array(log)], lay) == []
