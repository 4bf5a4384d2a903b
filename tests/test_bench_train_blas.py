"""bench train's ranks run beside no BLAS worker thread (`launcher.one_blas_thread`).

A BLAS worker that a forked rank starts busy-waits on the rank's CPU for tens of milliseconds and
delays that rank's pool calls to the scheduler's tick; the limit set before the fork avoids it.
"""
from __future__ import annotations

import os

import numpy as np

from cxlsim.emulator.launch import run_local
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
