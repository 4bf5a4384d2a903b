"""What runs beside a bench train rank's pool calls: no BLAS worker thread (`launcher.one_blas_thread`),
and its communication thread, whose hand-offs it times (`comm_thread.CommThread`).

A BLAS worker that a forked rank starts busy-waits on the rank's CPU for tens of milliseconds and
delays that rank's pool calls to the scheduler's tick; the limit set before the fork avoids it.
"""
from __future__ import annotations

import os
import time

import numpy as np

from cxlsim.emulator.launch import run_local
from cxlsim.emulator.training.comm_thread import CommThread
from cxlsim.emulator.training.launcher import blas_threads, one_blas_thread


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _after_matmul(comm):
    a = np.random.default_rng(comm.rank).random((256, 256))
    before = threads()
    _ = a @ a  # a product large enough that a two-thread BLAS would use both threads
    return before, threads(), blas_threads()


def test_ranks_forked_inside_the_limit_use_one_blas_thread_and_start_none():
    a = np.random.default_rng(0).random((256, 256))
    _ = a @ a  # the launcher's own BLAS work before the fork (the model, the data)
    with one_blas_thread():
        outcomes = run_local(2, _after_matmul)
    assert outcomes == [(1, 1, 1), (1, 1, 1)]  # one thread before and after the product, BLAS at one thread


class _SlowComm:
    """A stand-in communicator whose allreduce takes `call_s` of wall time (for the hand-off accounting)."""

    def __init__(self, call_s: float):
        self.call_s = call_s

    def allreduce(self, send, recv):
        time.sleep(self.call_s)
        recv[:] = send


def test_comm_thread_hand_offs_and_calls_are_disjoint_parts_of_the_wait():
    """The recorded hand-off per wait and the calls' own times are disjoint intervals between the first
    submit and the wait's return, so together they never exceed that wall time."""
    grad, total = np.arange(8.0), np.zeros(8)
    worker = CommThread(_SlowComm(0.002), grad, total, timeout_s=5.0, split_phase=False)
    try:
        for _ in range(3):
            start = time.perf_counter()
            worker.submit((0, 4))
            worker.submit((4, 8))
            worker.wait(2)
            elapsed = time.perf_counter() - start
            calls = sum(end - begin for begin, end in worker.call_s[-2:])
            assert calls >= 0.004 and 0.0 <= worker.handoff_s[-1] and worker.handoff_s[-1] + calls <= elapsed
    finally:
        worker.close()
    assert np.array_equal(total, grad) and len(worker.handoff_s) == 3
    stats = worker.handoff_stats(2)
    assert stats["calls_per_step"] == 2 and stats["handoff_s_median"] == float(np.median(worker.handoff_s))
