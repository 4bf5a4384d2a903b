"""Emulated CXL timing (pool latency and bandwidth) in the Cython kernels.

Timing checks are ratios with generous bounds: the machine is shared and noisy, so a
call can only be slower than asked, never reliably as fast. The busy-waits guarantee the
lower bounds (a paced copy never beats its bandwidth, a delay never ends early), and
comparisons against timing off use the fastest of several calls, which other processes
on the machine rarely disturb. Exact fidelity is measured by benchmarks/cxl_timing_fidelity.py.
"""
import subprocess
import sys
import time

import numpy as np
import pytest

from cxlsim.emulator import _kernels
from cxlsim.emulator.launch import run_local
from cxlsim.errors import InputError

MIB = 1 << 20


def _fastest_call_s(op, calls, barrier):
    """The fastest of `calls` calls of `op`, each timed alone after a barrier."""
    best = float("inf")
    for _ in range(calls):
        barrier()
        t0 = time.perf_counter()
        op()
        best = min(best, time.perf_counter() - t0)
    return best


def _large_allgather(comm, n, calls):
    send = np.full(n, comm.rank + 1, np.uint8)
    recv = np.zeros(n * comm.size, np.uint8)
    comm.allgather(send, recv)  # warm up: page in the pool and the buffers
    seconds = _fastest_call_s(lambda: comm.allgather(send, recv), calls, comm.barrier)
    assert np.array_equal(recv, np.repeat(np.arange(1, comm.size + 1, dtype=np.uint8), n))
    return seconds, comm.pool_bw_bytes_per_ns


def test_bandwidth_pacing_slows_a_large_allgather():
    bw = 0.25  # GB/s: a paced call takes >= 12.6 ms, far above any unpaced one even on a busy machine
    unpaced, bw0 = run_local(2, _large_allgather, (MIB, 10), slot_bytes=MIB)[0]
    paced, bw1 = run_local(2, _large_allgather, (MIB, 3), slot_bytes=MIB, pool_bw_bytes_per_ns=bw)[0]
    assert (bw0, bw1) == (0.0, bw)
    assert paced >= 1.5 * unpaced, (paced, unpaced)
    # A paced call copies 3 MiB (own block in, two blocks out) and can never beat the bandwidth.
    assert paced * 1e9 >= 0.95 * 3 * MIB / bw, paced


def test_paced_copy_never_beats_its_bandwidth_and_slower_is_longer():
    src, dst = np.ones(MIB, np.uint8), np.zeros(MIB, np.uint8)
    _kernels.paced_copy_ns(dst, src, 0.0)
    plain = min(_kernels.paced_copy_ns(dst, src, 0.0) for _ in range(5))
    fast = min(_kernels.paced_copy_ns(dst, src, 4.0) for _ in range(5))
    slow = min(_kernels.paced_copy_ns(dst, src, 1.0) for _ in range(5))
    assert fast >= 0.95 * MIB / 4.0 and slow >= 0.95 * MIB / 1.0, (fast, slow)
    assert slow >= 2.0 * fast and slow >= 1.5 * plain, (plain, fast, slow)
    assert np.array_equal(dst, src)


def _sync_and_small_calls(comm, calls):
    send, recv = np.full(64, comm.rank, np.uint8), np.zeros(64 * comm.size, np.uint8)
    sync = _fastest_call_s(lambda: comm.allgather_in_place(0), calls, comm.barrier)
    small = _fastest_call_s(lambda: comm.allgather(send, recv), calls, comm.barrier)
    in_place = _fastest_call_s(lambda: comm.allgather_in_place(64), calls, comm.barrier)
    return sync, small, in_place, comm.pool_latency_ns


def test_latency_injection_delays_the_sync_and_each_block_read():
    # Across two processes, timing off can be slow too when other jobs hold the CPUs, so
    # this checks the lower bounds the busy-waits guarantee (300 us is far above a native
    # sync, about 1 us); the next test compares against timing off within one process.
    latency = 300e3
    sync, small, in_place, asked = run_local(2, _sync_and_small_calls, (10,), pool_latency_ns=latency)[0]
    assert asked == latency
    assert sync * 1e9 >= 0.9 * latency, sync
    # One latency for the flags plus one per block read (np = 2), copied out or read in place.
    assert small * 1e9 >= 0.9 * 3 * latency and in_place * 1e9 >= 0.9 * 3 * latency, (small, in_place)


def test_latency_per_block_against_timing_off_and_no_flag_latency_alone():
    latency = 1e6  # 1 ms
    off = run_local(1, _sync_and_small_calls, (10,))[0]
    sync, small, in_place, _ = run_local(1, _sync_and_small_calls, (10,), pool_latency_ns=latency)[0]
    assert sync * 1e9 < 0.5 * latency, sync  # np = 1: no flags to wait for
    # Its own block is still read: one latency, where timing off takes microseconds.
    assert small * 1e9 >= 0.9 * latency and in_place * 1e9 >= 0.9 * latency, (small, in_place)
    assert small >= 5 * off[1] and in_place >= 5 * off[2], (small, in_place, off)


def _workload(comm, log):
    """Copy and zero-copy allgathers of awkward sizes (around the 4 KiB pacing chunk); returns errors and the log."""
    if log:
        comm.enable_log(20000)
    errors = []
    for call, n in enumerate([0, 1, 63, 4095, 4097, 10000, 3 * 4096]):
        send = ((np.arange(n) + 7 * comm.rank + call) % 251).astype(np.uint8)
        recv = np.zeros(n * comm.size, np.uint8)
        comm.allgather(send, recv)
        view = comm.send_view(n)
        view[:] = send[::-1]
        result = np.array(comm.allgather_zero_copy(view))
        for r in range(comm.size):
            want = ((np.arange(n) + 7 * r + call) % 251).astype(np.uint8)
            if not np.array_equal(recv[r * n:(r + 1) * n], want):
                errors.append(f"copy call {call} n {n} block {r}")
            if not np.array_equal(result[r], want[::-1]):
                errors.append(f"zero-copy call {call} n {n} block {r}")
    return errors, comm.log_events().tolist() if log else None


@pytest.mark.parametrize("coherence", ["hw", "flush"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_results_are_correct_with_timing_on(coherence, nranks):
    for errors, _ in run_local(nranks, _workload, (False,), slot_bytes=3 * 4096, coherence=coherence,
                               pool_latency_ns=300.0, pool_bw_bytes_per_ns=2.0):
        assert errors == []


def test_timing_leaves_the_flush_schedule_unchanged():
    logs = {}
    for timing in ({}, dict(pool_latency_ns=300.0, pool_bw_bytes_per_ns=2.0)):
        results = run_local(2, _workload, (True,), slot_bytes=3 * 4096, coherence="flush", **timing)
        assert all(errors == [] for errors, _ in results)
        logs[bool(timing)] = [log for _, log in results]
    assert logs[True] == logs[False] and len(logs[True][0]) > 50


def test_timing_values_are_checked():
    for bad in (dict(pool_latency_ns=-1.0), dict(pool_bw_bytes_per_ns=float("nan")),
                dict(pool_bw_bytes_per_ns=float("inf"))):
        with pytest.raises(InputError, match="pool (latency|bandwidth)"):
            run_local(2, _workload, (False,), **bad)
    with pytest.raises(InputError, match="Cython kernels only"):
        run_local(2, _workload, (False,), kernel="reference", pool_latency_ns=100.0)
    with pytest.raises(InputError, match="pool bandwidth"):
        _kernels.paced_copy_ns(bytearray(8), bytearray(8), -2.0)
    # Zero is off, and the reference twin (which has no timing) still accepts it.
    assert run_local(2, _workload, (False,), kernel="reference", pool_latency_ns=0.0,
                     pool_bw_bytes_per_ns=0.0) == [([], None)] * 2


def _set_timing(comm):
    comm.set_timing(150.0, 8.0)
    first = (comm.pool_latency_ns, comm.pool_bw_bytes_per_ns)
    comm.set_timing()
    second = (comm.pool_latency_ns, comm.pool_bw_bytes_per_ns)
    try:
        comm.set_timing(-1.0)
    except InputError as exc:
        return first, second, str(exc)
    return first, second, None


def test_set_timing_changes_and_checks_the_timing():
    first, second, error = run_local(1, _set_timing)[0]
    assert first == (150.0, 8.0) and second == (0.0, 0.0)
    assert error and "pool latency" in error


# -- the bench CLI -----------------------------------------------------------------------
def cxlsim(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "cxlsim", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, needle", [
    (["--pool-latency", "250"], "--pool-latency: expected a time with a unit"),
    (["--pool-latency", "fast"], "--pool-latency: expected a time"),
    (["--pool-latency=-5ns"], "--pool-latency"),
    (["--pool-bandwidth", "0GB/s"], "--pool-bandwidth: expected a positive bandwidth"),
    (["--pool-bandwidth", "32"], "--pool-bandwidth: expected a bandwidth"),
])
def test_bench_bad_timing_values_exit_2(args, needle):
    out = cxlsim("bench", "allgather", "--repeat", "1", "--sizes", "1", "--iterations", "1", *args)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr


def test_bench_runs_with_timing_and_records_it(tmp_path):
    csv_path = tmp_path / "timed.csv"
    out = cxlsim("bench", "allgather", "--repeat", "1", "--np", "2", "--sizes", "1:8KiB", "--iterations", "20", "--warmup", "2",
                 "--validate", "--pool-latency", "250ns", "--pool-bandwidth", "32GB/s", "--output", str(csv_path))
    assert out.returncode == 0, out.stderr
    assert "pool latency 250.0 ns, pool bandwidth 32 GB/s" in out.stdout
    import pandas as pd
    frame = pd.read_csv(csv_path)
    assert set(frame["pool_latency_ns"]) == {250.0} and set(frame["pool_bw_bytes_per_ns"]) == {32.0}
    assert list(frame["size_bytes"]) == [2**i for i in range(14)]
