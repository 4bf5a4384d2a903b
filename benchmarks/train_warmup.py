"""The start of a `cxlsim bench train` run at np 2: its first pool calls with the BLAS limit set
before the ranks fork (what bench train does) and with it set in each forked rank, interleaved.

    python benchmarks/train_warmup.py [--runs 5] [--steps 300] [--modes sync ddp]

Set in a forked rank, OpenBLAS's set-num-threads call first re-creates the worker pool the fork
left behind, and its new worker busy-waits with sched_yield (OpenBLAS's THREAD_TIMEOUT) on the
rank's CPU; the rank's communication thread then waits for the scheduler's tick inside its
pool calls (`launcher.one_blas_thread`). Part 1 shows the worker: a process forked after a
BLAS product, limited to one thread inside the child or before the fork, with its threads and
their CPU time over the next 0.3 s. Part 2 runs bench train (mlp, batch 256 per rank, no
placement probes) in both ways, one after the other, `--runs` times, and prints per way the
median over runs (lowest-highest) of: the ranks' threads at the common start, the mean
communication time (comm_s, ms) of the first tenth of the steps after step 0 and of the
steps after them, and the whole-run throughput over the steady-state throughput (the steps
after the first tenth). The load average before and after is printed beside the figures.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from cxlsim.emulator.training import launcher
from cxlsim.emulator.training.config import TrainConfig

WATCH_S = 0.3


def thread_cpu_ms() -> dict:
    """This process's threads: {tid: CPU time so far in ms} (/proc/self/task/*/schedstat)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            out[tid] = int(f.read().split()[0]) / 1e6
    return out


def forked_worker(limit_in_child: bool) -> str:
    """Fork after a BLAS product; in the child set one BLAS thread (before the fork or in it), then
    report the child's threads other than its main thread and their CPU time over WATCH_S."""
    a = np.random.default_rng(0).random((256, 256))
    _ = a @ a
    read, write = os.pipe()
    with (contextlib.nullcontext() if limit_in_child else threadpool_limits(limits=1)):
        pid = os.fork()
        if pid == 0:
            os.close(read)
            with (threadpool_limits(limits=1) if limit_in_child else contextlib.nullcontext()):
                before = thread_cpu_ms()
                time.sleep(WATCH_S)
                after = thread_cpu_ms()
            main_tid = str(os.getpid())
            others = {t: after[t] - before.get(t, 0.0) for t in after if t != main_tid}
            os.write(write, repr(others).encode())
            os._exit(0)
        os.close(write)
        text = os.read(read, 4096).decode()
        os.waitpid(pid, 0)
        os.close(read)
    return text


def one_run(mode: str, steps: int, per_rank_limit: bool) -> tuple[list, float, float, float]:
    """One np 2 run: (threads_at_start, first-tenth comm ms, later comm ms, whole / steady throughput)."""
    config = TrainConfig(mode=mode, nranks=2, steps=steps, batch_size=256, eval_every=steps)
    if per_rank_limit:  # the launcher sets no limit; each rank sees two BLAS threads and limits itself
        with _patched(launcher, "one_blas_thread", contextlib.nullcontext):
            record = launcher.train(config, progress=False, probe_host=False)
    else:
        record = launcher.train(config, progress=False, probe_host=False)
    warm = max(1, steps // 10)
    comm = np.array([r["comm_s"] for r in record["ranks"]]).max(axis=0)  # per step, the slower rank
    ends = np.array([r["t_end_s"] for r in record["ranks"]]).max(axis=0)
    whole = steps / ends[-1]
    steady = (steps - warm) / (ends[-1] - ends[warm - 1])
    return record["threads_at_start"], comm[1:warm + 1].mean() * 1e3, comm[warm + 1:].mean() * 1e3, whole / steady


@contextlib.contextmanager
def _patched(module, name, value):
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def spread(values, fmt="{:.3f}") -> str:
    a = np.asarray(values, dtype=float)
    return f"{fmt.format(np.median(a))} ({fmt.format(a.min())}-{fmt.format(a.max())})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--modes", nargs="+", default=["sync", "ddp"])
    args = p.parse_args(argv)
    print(f"load average before: {open('/proc/loadavg').read().split()[:3]}")
    print(f"1. a forked process's threads besides its main thread, CPU ms over {WATCH_S} s after the BLAS limit:")
    print(f"   limit set in the child:      {forked_worker(True)}")
    print(f"   limit set before the fork:   {forked_worker(False)}")
    ways = {"limit before the fork (bench train)": False, "limit in each rank": True}
    print(f"2. bench train np 2, mlp, {args.steps} steps x 256, {args.runs} interleaved runs; median (lowest-highest):")
    for mode in args.modes:
        rows = {way: [] for way in ways}
        for _ in range(args.runs):
            for way, per_rank in ways.items():
                rows[way].append(one_run(mode, args.steps, per_rank))
        for way, runs in rows.items():
            threads = sorted({tuple(r[0]) for r in runs})
            print(f"   {mode:5s} {way:36s} threads at start {threads}; comm ms/step first tenth "
                  f"{spread([r[1] for r in runs])}, after {spread([r[2] for r in runs])}; "
                  f"whole/steady throughput {spread([r[3] for r in runs])}")
    print(f"load average after: {open('/proc/loadavg').read().split()[:3]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
