"""The ddp mode: PyTorch DDP's bucketed allreduce, overlapped with the backward pass.

The flat gradient is cut into `buckets` contiguous pieces of (nearly) equal size, listed from
its end, the order in which the backward pass finishes them (PyTorch fills its buckets in
reverse parameter order too; here a bucket may cut a layer's array, since the vector is flat).
A small model fits in one of PyTorch's 25 MiB buckets, which would make ddp the same as sync,
so the bucket count, not a byte cap, is the setting (default 4).

With overlap on, a bucket goes to the communication thread as soon as the backward pass has
finished every element in it (the model's on_ready hook); the thread runs the pool's
split-phase allreduce (allreduce_start, then allreduce_wait, which releases the GIL while it
waits) one bucket after the other, while the main thread computes the next layers (the
thread and its GIL switch interval: `comm_thread`). With overlap off, every bucket is sent
after the backward pass. Either way the step ends when the
last bucket is reduced, and the update is sync's: the sums are the same element-wise left
folds, so ddp's parameters are bitwise those of sync for one seed.
"""
from __future__ import annotations

import numpy as np

from cxlsim.emulator.training.comm_thread import CommThread, fast_gil_switching
from cxlsim.emulator.training.sync import apply_update

DEFAULT_BUCKETS = 4


def bucket_spans(size: int, buckets: int) -> list[tuple[int, int]]:
    """`buckets` contiguous (lo, hi) slices covering 0..size, sizes differing by at most one, last slice first."""
    if not 1 <= buckets <= size:
        raise ValueError(f"buckets: expected 1..{size}, got {buckets}")
    edges = [round(i * size / buckets) for i in range(buckets + 1)]
    return [(edges[i], edges[i + 1]) for i in range(buckets - 1, -1, -1)]


def ddp_loop(ctx) -> None:
    """The ddp mode's rank loop (the contract: `context`)."""
    cfg, model = ctx.config, ctx.model
    params = ctx.params0.copy()
    grad, total, scratch = np.empty_like(params), np.empty_like(params), np.empty_like(params)
    spans = bucket_spans(model.size, cfg.buckets or DEFAULT_BUCKETS)
    worker = CommThread(ctx.comm, grad, total, cfg.timeout_s, split_phase=True)
    ctx.comm_busy = worker.busy  # the pacer yields to the thread while it has a bucket
    try:
        with fast_gil_switching():
            for step in range(cfg.steps):
                x, y = ctx.batch(step)
                start = ctx.now()
                pending = list(spans)
                with ctx.pace(step) as pacer:
                    def ready(offset, pending=pending, pacer=pacer):
                        pacer.catch_up()  # the slow-down of the work so far comes before its buckets go
                        while pending and pending[0][0] >= offset:
                            worker.submit(pending.pop(0))

                    loss = model.loss_grad(params, x, y, grad, on_ready=ready if cfg.overlap else None)
                for span in pending:
                    worker.submit(span)
                worker.wait(len(spans))
                apply_update(params, total, cfg.lr, ctx.nranks, scratch)
                ctx.log.step(start, pacer.seconds, loss)
                ctx.snapshot(step + 1, params)
    finally:
        worker.close()
    ctx.mode_stats = worker.handoff_stats(len(spans))
    ctx.snapshot(cfg.steps, params, final=True)
    ctx.final_params = params
