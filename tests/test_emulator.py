"""The emulator: allgather correctness, pool backends, faults and the bench CLI."""
import dataclasses
import errno
import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from cxlsim.emulator import pool as poolmod
from cxlsim.emulator.comm import CollectiveTimeout, PoolComm, StaleViewError
from cxlsim.emulator.launch import RankFailure, run_local
from cxlsim.emulator.pool import Pool, parse_pool_spec, sweep_stale
from cxlsim.errors import InputError, RunError

BIG = (1 << 20) + 3
COUNTS = (0, 1, 63, 64, 65, 4096)
DTYPES = (np.uint8, np.int32, np.float64, np.complex64)


def leftovers():
    return glob.glob(f"/dev/shm/cxlsim-{os.getpid()}-*")


def block(rank, call, count, dtype):
    """Distinct, call-dependent contents, so a stale or misplaced block is caught."""
    return ((np.arange(count) * 7 + rank * 1000 + call * 13) % 251).astype(dtype)


def check_all(comm, coherence_calls=3):
    """Run every count x dtype in copy and zero-copy mode, back to back; return the number checked."""
    checked = 0
    cases = [(c, d) for d in DTYPES for c in COUNTS] + [(BIG, np.uint8)]
    for count, dtype in cases:
        for call in range(coherence_calls):
            expected = np.stack([block(r, call, count, dtype) for r in range(comm.size)])
            recv = np.empty(comm.size * count, dtype=dtype)
            comm.allgather(block(comm.rank, call, count, dtype), recv)
            assert np.array_equal(recv.reshape(comm.size, count), expected), (count, dtype, call, "copy")
            view = comm.send_view(count, dtype)
            view[:] = block(comm.rank, call, count, dtype)
            result = comm.allgather_zero_copy(view)
            assert not result.array.flags.writeable
            assert np.array_equal(result.array, expected), (count, dtype, call, "zero-copy")
            checked += 2
    return checked


@pytest.mark.parametrize("coherence", ["hw", "flush"])
@pytest.mark.parametrize("nranks", range(1, 9))
def test_allgather_correct_on_shm(nranks, coherence):
    results = run_local(nranks, check_all, pool="shm", slot_bytes=BIG, coherence=coherence, timeout_s=30)
    assert len(results) == nranks and all(r == results[0] > 0 for r in results)
    assert leftovers() == []


@pytest.mark.parametrize("coherence", ["hw", "flush"])
@pytest.mark.parametrize("backend", ["file", "numa:0"])
def test_allgather_correct_on_file_and_numa(tmp_path, backend, coherence):
    pool = f"file:{tmp_path / 'pool.bin'}" if backend == "file" else backend
    results = run_local(3, check_all, pool=pool, slot_bytes=BIG, coherence=coherence, timeout_s=30)
    assert len(results) == 3
    assert not (tmp_path / "pool.bin").exists(), "a pool file we created must be removed"


def test_existing_file_is_kept(tmp_path):
    path = tmp_path / "mine.bin"
    path.write_bytes(b"x" * 10)
    run_local(2, check_all, pool=f"file:{path}", slot_bytes=BIG, timeout_s=30)
    assert path.exists(), "a file the user supplied must never be deleted"


def _stale(comm):
    view = comm.send_view(4)
    view[:] = comm.rank
    result = comm.allgather_zero_copy(view)
    first = int(result[comm.size - 1][0])
    comm.barrier()
    try:
        result.array
    except StaleViewError as exc:
        return first, str(exc)
    return first, None


def test_stale_zero_copy_view_raises():
    for first, message in run_local(2, _stale, slot_bytes=64):
        assert first == 1
        assert message and "epoch" in message


def _switching_keys(comm):
    """Zero-copy calls whose (count, dtype) changes, with barriers between: the kernel's per-buffer
    view cache must follow every key and buffer; returns the mismatches."""
    wrong = []
    plan = [(8, np.uint8), (8, np.uint8), (3, np.float64), (8, np.uint8), (0, np.uint8), (5, np.int32),
            (5, np.int32), (5, np.int32), (8, np.uint8)]
    for call, (count, dtype) in enumerate(plan):
        view = comm.send_view(count, dtype)
        view[:] = block(comm.rank, call, count, dtype)
        if call % 3 == 2:
            comm.barrier()
        result = comm.allgather_zero_copy(view)
        expected = np.stack([block(r, call, count, dtype) for r in range(comm.size)])
        if result.array.dtype != np.dtype(dtype) or not np.array_equal(result.array, expected):
            wrong.append((call, count, np.dtype(dtype).name))
    return wrong


def test_zero_copy_with_changing_counts_dtypes_and_barriers():
    assert run_local(3, _switching_keys, slot_bytes=64) == [[], [], []]


def _wrong_view(comm):
    with pytest.raises(InputError, match="send_view"):
        comm.allgather_zero_copy(np.zeros(4, np.uint8))
    with pytest.raises(InputError, match="recvbuf"):
        comm.allgather(np.zeros(4, np.uint8), np.zeros(4, np.uint8))
    with pytest.raises(InputError, match="slots hold"):
        comm.allgather(np.zeros(65, np.uint8), np.zeros(65 * comm.size, np.uint8))
    return True


def test_bad_buffers_are_clear_errors():
    assert run_local(2, _wrong_view, slot_bytes=64) == [True, True]


def test_back_to_back_calls_never_read_a_stale_epoch():
    def body(comm):
        recv = np.empty(comm.size * 1024, np.uint8)
        for call in range(2000):
            comm.allgather(np.full(1024, (comm.rank + call) % 256, np.uint8), recv)
            rows = recv.reshape(comm.size, -1)
            assert all((rows[r] == (r + call) % 256).all() for r in range(comm.size)), call
        return comm.epoch
    assert run_local(4, body, slot_bytes=1024, coherence="flush") == [2000] * 4


# -- faults ---------------------------------------------------------------------------
def _killed_rank(comm):
    recv = np.empty(comm.size, np.uint8)
    comm.allgather(np.zeros(1, np.uint8), recv)
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    comm.allgather(np.zeros(1, np.uint8), recv)
    return True


def test_killed_rank_is_reported_and_nothing_leaks():
    start = time.monotonic()
    with pytest.raises(RankFailure) as info:
        run_local(3, _killed_rank, slot_bytes=64, timeout_s=1.0)
    failures = info.value.failures
    assert "SIGKILL" in failures[1]
    for rank in (0, 2):  # ended at once, not left to time out
        assert failures[rank].startswith("ended by the launcher at once: rank 1 died from SIGKILL")
    assert time.monotonic() - start < 15
    assert leftovers() == []


def _late_rank(comm):
    if comm.rank == 0:
        time.sleep(1.5)
    comm.barrier()
    return True


def test_rank_that_never_arrives_is_named():
    with pytest.raises(RankFailure) as info:
        run_local(2, _late_rank, slot_bytes=64, timeout_s=0.5)
    assert "rank(s) [0]" in info.value.failures[1]
    assert leftovers() == []


def test_rank_exception_is_reported():
    def body(comm):
        if comm.rank == 1:
            raise ValueError("boom")
        comm.barrier()
    with pytest.raises(RankFailure, match="boom"):
        run_local(2, body, slot_bytes=64, timeout_s=0.5)
    assert leftovers() == []


def test_timeout_names_missing_ranks_in_process():
    pool = Pool.create("shm", 3, 64)
    try:
        comm = PoolComm.open(pool, 0, timeout_s=0.2)
        with pytest.raises(CollectiveTimeout) as info:
            comm.barrier()
        assert info.value.missing == [1, 2]
        comm.close()
    finally:
        pool.unlink()


# -- pool backends ----------------------------------------------------------------------
def test_segment_is_private_and_unlinked_once_all_attached():
    pool = Pool.create("shm", 2, 64)
    path = pool.handle.path
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert f"cxlsim-{os.getpid()}-" in path
    a = Pool.attach(pool.handle)
    assert os.path.exists(path)
    b = Pool.attach(pool.handle)
    assert not os.path.exists(path), "the last rank to attach unlinks the segment"
    for p in (pool, a, b):
        p.close()


def test_full_dev_shm_is_a_clear_error(monkeypatch):
    def no_room(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(poolmod.os, "posix_fallocate", no_room)
    with pytest.raises(RunError, match="no room for a .*-byte pool in /dev/shm"):
        Pool.create("shm", 2, 1 << 20)
    assert leftovers() == []


def test_sweep_removes_only_dead_owners():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = f"/dev/shm/cxlsim-{child.pid}-abc123"
    live = f"/dev/shm/cxlsim-{os.getpid()}-def456"
    for path in (dead, live):
        open(path, "wb").close()
    try:
        removed = sweep_stale()
        assert dead in removed and not os.path.exists(dead)
        assert os.path.exists(live)
    finally:
        for path in (dead, live):
            if os.path.exists(path):
                os.unlink(path)


@pytest.mark.parametrize("text, kind", [("shm", "shm"), ("file:/tmp/x", "file"), ("dax:/dev/dax0.0", "dax"), ("numa:0", "numa")])
def test_pool_spec(text, kind):
    spec = parse_pool_spec(text)
    assert spec.kind == kind and str(spec) == text
    assert spec.default_coherence == ("flush" if kind == "dax" else "hw")


@pytest.mark.parametrize("bad", ["", "shm:x", "file:", "numa:x", "nvme:0", "dax"])
def test_bad_pool_spec(bad):
    with pytest.raises(InputError, match="--pool"):
        parse_pool_spec(bad)


def test_numa_missing_node_is_clear():
    with pytest.raises(InputError, match="no NUMA node 4096"):
        Pool.create("numa:4096", 2, 64)
    assert leftovers() == []


def test_dax_rejects_unusable_paths(tmp_path):
    regular = tmp_path / "f"
    regular.write_bytes(b"")
    with pytest.raises(InputError, match="not on a filesystem mounted with 'dax'"):
        Pool.create(f"dax:{regular}", 2, 64)
    with pytest.raises(InputError, match="not a devdax device"):
        Pool.create("dax:/dev/null", 2, 64)
    with pytest.raises(InputError, match="No such file"):
        Pool.create(f"dax:{tmp_path / 'missing'}", 2, 64)
    with pytest.raises(InputError, match="devdax device"):
        Pool.create(f"dax:{tmp_path}", 2, 64)


def test_dax_layout_is_2mib_aligned():
    lay = poolmod.SegmentLayout.plan(3, 1000, align=poolmod.DAX_ALIGN)
    assert lay.total_bytes % (2 << 20) == 0 and lay.slot_stride % 64 == 0


def test_header_mismatch_is_detected():
    pool = Pool.create("shm", 2, 64)
    try:
        other = dataclasses.replace(pool.handle, layout=dataclasses.replace(pool.layout, slot_bytes=128))
        with pytest.raises(RunError, match="header says 2 ranks x 64 B"):
            Pool.attach(other)
    finally:
        pool.close()
        pool.unlink()


def test_layout_pads_flags_and_slots_to_lines():
    lay = poolmod.SegmentLayout.plan(5, 65)
    assert lay.slot_stride == 128 and lay.flags_offset % 64 == 0 and lay.data_offset % 64 == 0
    assert lay.data_offset >= lay.flags_offset + 5 * 64


# -- the bench CLI -----------------------------------------------------------------------
def cxlsim(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "cxlsim", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, needle", [
    (["--np", "0"], "--np"), (["--np", "x"], "--np"), (["--sizes", "4:1"], "size range"),
    (["--sizes", "1Mb"], "expected a size"), (["--pool", "nvme"], "--pool"), (["--pool", "numa:77"], "NUMA node 77"),
    (["--timeout", "0"], "--timeout"),
])
def test_bench_bad_arguments_exit_2(args, needle):
    out = cxlsim("bench", "allgather", "--repeat", "1", *args)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr


@pytest.mark.parametrize("extra", [[], ["--zero-copy", "--coherence", "flush"]])
def test_bench_runs_and_writes_csv(tmp_path, extra):
    csv_path = tmp_path / "out.csv"
    out = cxlsim("bench", "allgather", "--repeat", "1", "--np", "3", "--sizes", "1:4KiB", "--iterations", "20", "--warmup", "2",
                 "--validate", "--output", str(csv_path), *extra)
    assert out.returncode == 0, out.stderr
    assert "# Size" in out.stdout and "4096" in out.stdout
    import pandas as pd
    frame = pd.read_csv(csv_path)
    assert list(frame["size_bytes"]) == [2**i for i in range(13)]
    assert (frame["avg_us"] > 0).all() and set(frame["np"]) == {3}
    import json
    info = json.loads((tmp_path / "out.provenance.json").read_text())
    assert info["cxlsim"] and info["numpy"] and info["pool"] == "shm" and "seed" in info


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpiexec") is None and not os.path.exists(
    os.path.join(os.path.dirname(sys.executable), "mpiexec")), reason="no mpiexec (install cxlsim[mpi])")
def test_mpi_baseline_under_mpiexec(tmp_path):
    csv_path = tmp_path / "mpi.csv"
    out = cxlsim("bench", "allgather", "--repeat", "1", "--np", "2", "--baseline", "mpi", "--sizes", "1:64KiB", "--iterations", "20",
                 "--warmup", "2", "--validate", "--output", str(csv_path), timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "MPI_Allgather" in out.stdout and "MPI/pool" in out.stdout
    import pandas as pd
    frame = pd.read_csv(csv_path)
    assert set(frame["side"]) == {"copy", "mpi"}
    assert (frame[frame.side == "mpi"]["avg_us"] > 0).all()


def _view_outlives_comm(comm):
    view = comm.send_view(8)
    view[:] = comm.rank + 1
    result = comm.allgather_zero_copy(view)
    copied = np.array(result)  # numpy 2 asks for a copy: it must not alias the pool
    comm.close()  # the held views pin the mapping, so this neither unmaps nor crashes
    return copied.tolist(), int(view[0])


def test_views_survive_close_and_np_array_copies():
    for copied, first in run_local(2, _view_outlives_comm, slot_bytes=64):
        assert copied == [[1] * 8, [2] * 8] and first in (1, 2)


def _rounds_with_barriers(comm):
    comm.enable_log(10000)
    views, recv = [], np.empty(comm.size * 100, np.uint8)
    for call in range(4):
        views.append(comm.send_view(100).ctypes.data)
        comm.allgather(np.full(100, comm.rank * 10 + call, np.uint8), recv)
        assert [int(b[0]) for b in recv.reshape(comm.size, -1)] == [r * 10 + call for r in range(comm.size)]
        comm.barrier()  # a zero-byte call: no data round, so the next call takes the other buffer
    return views, comm.data_round, comm.epoch, comm.log_events()


def test_buffers_alternate_by_data_round_even_with_barriers_between():
    from cxlsim.emulator.cache_model import replay

    results = run_local(2, _rounds_with_barriers, slot_bytes=100, coherence="flush")
    for views, rounds, epoch, _ in results:
        assert rounds == 4 and epoch == 8
        assert views[0] == views[2] != views[1] == views[3]
    lay = poolmod.SegmentLayout.plan(2, 100)
    assert replay([log for *_, log in results], lay) == []
