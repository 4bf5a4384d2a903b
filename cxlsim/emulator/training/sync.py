"""The sync mode: at every step each rank computes its gradient, one allreduce on the pool sums
the gradients of all ranks, and every rank applies the same SGD update.

The allreduce (`PoolComm.allreduce`, the whole gradient in one call) runs on the rank's
communication thread while the main thread waits asleep (`comm_thread` says why). The pool
allreduce is an element-wise left fold over ranks 0..P-1, bitwise the same on every rank, so
the ranks' parameters stay bitwise identical, and a run is reproducible for one seed.
"""
from __future__ import annotations

import numpy as np

from cxlsim.emulator.training.comm_thread import CommThread, fast_gil_switching


def apply_update(params: np.ndarray, total: np.ndarray, lr: float, nranks: int, scratch: np.ndarray) -> None:
    """params -= lr x (the ranks' summed gradient / nranks): SGD on the mean gradient (one rounding order)."""
    np.multiply(total, lr / nranks, out=scratch)
    params -= scratch


def sync_loop(ctx) -> None:
    """The sync mode's rank loop (the contract: `context`)."""
    cfg, model = ctx.config, ctx.model
    params = ctx.params0.copy()
    grad, total, scratch = np.empty_like(params), np.empty_like(params), np.empty_like(params)
    whole = (0, model.size)
    worker = CommThread(ctx.comm, grad, total, cfg.timeout_s, split_phase=False)
    try:
        with fast_gil_switching():
            for step in range(cfg.steps):
                x, y = ctx.batch(step)
                start = ctx.now()
                with ctx.pace(step) as pacer:
                    loss = model.loss_grad(params, x, y, grad)
                worker.submit(whole)
                worker.wait(1)
                apply_update(params, total, cfg.lr, ctx.nranks, scratch)
                ctx.log.step(start, pacer.seconds, loss)
                ctx.snapshot(step + 1, params)
    finally:
        worker.close()
    ctx.mode_stats = worker.handoff_stats(1)
    ctx.snapshot(cfg.steps, params, final=True)
    ctx.final_params = params
