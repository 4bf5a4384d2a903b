"""Does the other rank's activity slow an async merge? The merge's copy of the slots beside a peer in four states.

    python benchmarks/train_peer_effect.py [--blocks 32] [--steps 60]

A candidate for async's optimistic projection (issue 19) was the merge reading the slots while
the other rank pushes (cache-line ping-pong, seqlock retries). Two processes share a region of
two mlp-sized slots (cxlsim.emulator.training.shared_state), pinned to CPUs 1 (the reader) and
0 (the peer). The reader runs steps as an async rank does (the mlp's forward and backward pass
at batch 256, the merge's copy of both slots, its push); the peer, block by block in turn:
computes and pushes (a rank's step), computes only, spins and pushes, or sleeps. Per block the
lower quartile of `--steps` merge copies (ns), then per peer state the median block and every
block: blocks of the four states are interleaved, so a change of load hits each alike.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from cxlsim.emulator.training import models
from cxlsim.emulator.training.shared_state import SharedState, shared_region

STATES = ("computes and pushes", "computes only", "spins and pushes", "sleeps")
STEP_S = 0.0009  # the spin's length, about a step's compute here


def _step_inputs(seed: int):
    model = models.build("mlp")
    rng = np.random.default_rng(seed)
    return model, rng.normal(size=(256, models.FEATURES)), rng.integers(0, models.CLASSES, 256), model.init(seed)


def _peer(handle, state, stop):
    os.sched_setaffinity(0, {0})
    slot = SharedState.attach(handle, 1)
    model, x, y, params = _step_inputs(2)
    grad = np.empty_like(params)
    with threadpool_limits(limits=1):
        while not stop.is_set():
            what = STATES[state.value]
            if what.startswith("computes"):
                model.loss_grad(params, x, y, grad)
            elif what.startswith("spins"):
                end = time.perf_counter() + STEP_S
                while time.perf_counter() < end:
                    pass
            else:
                time.sleep(0.001)
            if what.endswith("pushes"):
                slot.push(params)
    slot.close()


def measure(blocks: int, steps: int) -> dict:
    """{peer state: [per block: the lower quartile of the merge copies, ns]}."""
    fork = multiprocessing.get_context("fork")
    model, x, y, params = _step_inputs(1)
    got = {s: [] for s in STATES}
    with shared_region(2, model.size) as handle:
        state, stop = fork.Value("i", 0), fork.Event()
        peer = fork.Process(target=_peer, args=(handle, state, stop), daemon=True)
        peer.start()
        me = SharedState.attach(handle, 0)
        try:
            os.sched_setaffinity(0, {1})
            me.push(params)
            grad = np.empty_like(params)
            with threadpool_limits(limits=1):
                for block in range(blocks):
                    state.value = block % len(STATES)
                    time.sleep(0.02)  # the peer in its state
                    times = []
                    for _ in range(steps):
                        model.loss_grad(params, x, y, grad)
                        start = time.perf_counter_ns()
                        me.read_all()
                        times.append(time.perf_counter_ns() - start)
                        me.push(params)
                    got[STATES[state.value]].append(float(np.percentile(times, 25)))
        finally:
            stop.set()
            peer.join(10)
            me.close()
    return got


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=32, help="blocks, the peer's states in turn (default 32)")
    parser.add_argument("--steps", type=int, default=60, help="steps per block (default 60)")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        print("needs 2 CPUs (the reader on CPU 1, the peer on CPU 0)")
        return 1
    load = os.getloadavg()[0]
    got = measure(args.blocks, args.steps)
    print(f"merge copy of 2 mlp slots after a step's compute, us (lower quartile per block of {args.steps}); "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    for state, values in got.items():
        print(f"  peer {state:20s} median {statistics.median(values) / 1e3:6.1f}  blocks "
              + " ".join(f"{v / 1e3:.1f}" for v in values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
