"""The sync mode: at every step each rank computes its gradient, one allreduce on the pool sums
the gradients of all ranks, and every rank applies the same SGD update.

The pool allreduce is an element-wise left fold over ranks 0..P-1, bitwise the same on every
rank, so the ranks' parameters stay bitwise identical, and a run is reproducible for one seed.
"""
from __future__ import annotations

import numpy as np


def apply_update(params: np.ndarray, total: np.ndarray, lr: float, nranks: int, scratch: np.ndarray) -> None:
    """params -= lr x (the ranks' summed gradient / nranks): SGD on the mean gradient (one rounding order)."""
    np.multiply(total, lr / nranks, out=scratch)
    params -= scratch


def sync_loop(ctx) -> None:
    """The sync mode's rank loop (the contract: `context`)."""
    cfg, model, comm = ctx.config, ctx.model, ctx.comm
    params = ctx.params0.copy()
    grad, total, scratch = np.empty_like(params), np.empty_like(params), np.empty_like(params)
    for step in range(cfg.steps):
        x, y = ctx.batch(step)
        start = ctx.now()
        with ctx.pace(step) as pacer:
            loss = model.loss_grad(params, x, y, grad)
        comm.allreduce(grad, total)
        apply_update(params, total, cfg.lr, ctx.nranks, scratch)
        ctx.log.step(start, pacer.seconds, loss)
        ctx.snapshot(step + 1, params)
    ctx.snapshot(cfg.steps, params, final=True)
    ctx.final_params = params
