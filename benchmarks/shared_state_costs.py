"""What one operation on the training modes' shared region costs on this machine (one process, no contention).

    python benchmarks/shared_state_costs.py [--items 17226] [--workers 2] [--repeats 7] [--calls 200]
                                            [--batch 256] [--rounds 5] [--race-s 0.5]

For a region of `--workers` slots of `--items` float64 (default: the mlp model's 17,226
parameters), in hw and in flush coherence, it times one push (a seqlock write of the slot),
one read of a slot, one merge (every slot read and summed) and one ticket of the global counter
by each scheme the coherence allows (cxl-device: an atomic; cxl-flush-lock: the bakery lock,
uncontended). Every figure is the median over `--repeats` batches of `--calls` calls, with the
batches' min and max (the spread), in us per call. These are the costs the async and hybrid
loops pay per exchange; the DES's pool model (models/training/pool_shared.py) charges its own.

Then the exchange after a step's compute (`cxlsim/train_costs.py`, the costs the projection gives the DES
for async and hybrid: the merge's copy, the push, the ticket's call; and a vector pass over
vectors the compute displaced, which the projection does not use): the same operations, one
step after another, with the mlp's forward and backward pass at `--batch` between the steps
and without it (hot), `--rounds` rounds of each interleaved, each round's lower quartile; the
median round and the rounds' min-max.

Then the race (`--race-s`, default 0.5 s, 0 = skip): a second process pushes 1 MiB vectors whose
items all equal the push's number, back to back, while this one reads the slot for the given time
alternately through the seqlock and by a plain copy of each copy's vector (what a reader without
the lock would do), counting the reads that hold a mix of two pushes: the seqlock's must be 0.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from cxlsim.coherence import Coherence
from cxlsim.emulator.training import models
from cxlsim.emulator.training.shared_state import COUNTER_SCHEMES, SharedState, check_counter, shared_region
from cxlsim.errors import InputError
from cxlsim.train_costs import measure_exchange


def per_call_us(fn, calls: int, repeats: int) -> tuple[float, float, float]:
    """(median, min, max) over `repeats` batches of `calls` calls of fn, us per call."""
    batches = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        batches.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(batches), min(batches), max(batches)


def measure(items: int, workers: int, repeats: int, calls: int) -> list[tuple[str, str, tuple]]:
    rows = []
    for coherence in (Coherence.HW, Coherence.FLUSH):
        for counter in COUNTER_SCHEMES:
            try:
                check_counter(counter, coherence)
            except InputError:
                continue
            with shared_region(workers, items, coherence=coherence, counter=counter) as handle:
                states = [SharedState.attach(handle, w) for w in range(workers)]
                me, vector, out = states[0], np.ones(items), np.empty(items)
                for w, state in enumerate(states):
                    state.push(vector * w)
                where = f"{coherence.value}, {counter}"
                if counter == "cxl-device" or coherence is Coherence.FLUSH:
                    rows.append((where, "push", per_call_us(lambda me=me, vector=vector: me.push(vector), calls, repeats)))
                    rows.append((where, "read one slot", per_call_us(lambda me=me, out=out: me.read(1 % workers, out), calls,
                                                                      repeats)))
                    rows.append((where, f"merge {workers} slots", per_call_us(lambda me=me, out=out: me.merge(out), calls,
                                                                             repeats)))
                rows.append((where, "ticket", per_call_us(me.fetch_add, calls, repeats)))
                for state in states:
                    state.close()
    return rows


def pass_ns(batch: int, displace: bool, repeats: int = 60) -> float:
    """One vector pass (np.add of two mlp-sized vectors into a third), after the mlp's compute at `batch` or hot;
    the lower quartile of `repeats`, ns."""
    model = models.build("mlp")
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(batch, models.FEATURES)), rng.integers(0, models.CLASSES, size=batch)
    params, grad = model.init(1), np.empty(model.size)
    a, b, c = np.ones(model.size), np.ones(model.size), np.empty(model.size)
    times = []
    with threadpool_limits(limits=1):
        for _ in range(repeats):
            if displace:
                model.loss_grad(params, x, y, grad)
            start = time.perf_counter_ns()
            np.add(a, b, out=c)
            times.append(time.perf_counter_ns() - start)
    return float(np.percentile(times, 25))


def after_compute(batch: int, workers: int, rounds: int) -> dict:
    """{(variant, op): [per-round ns]} for variant 'after compute' and 'hot' (train_costs.measure_exchange, and a
    vector pass)."""
    got = {}
    for _ in range(rounds):
        for variant, displace in (("after compute", True), ("hot", False)):
            costs = measure_exchange("mlp", batch, workers, displace=displace)
            for op in ("read", "push", "ticket"):
                got.setdefault((variant, op), []).append(getattr(costs, f"{op}_ns"))
            got.setdefault((variant, "pass"), []).append(pass_ns(batch, displace))
    return got


def _pusher(handle, stop):
    state = SharedState.attach(handle, 0)
    vector = np.empty(handle.nitems)
    while not stop.is_set():
        vector.fill(state.version + 1)
        state.push(vector)
    state.close()


def race(seconds: float, items: int = 1 << 17) -> dict:
    """Reads of a slot its writer keeps pushing: {'seqlock': (reads, mixed), 'plain copy': (reads, mixed)}."""
    fork = multiprocessing.get_context("fork")
    with shared_region(2, items) as handle:
        stop = fork.Event()
        writer = fork.Process(target=_pusher, args=(handle, stop), daemon=True)
        writer.start()
        reader = SharedState.attach(handle, 1)
        lay = handle.layout
        raw = np.frombuffer(reader.pool.mapping, dtype=np.uint8)
        copies = [raw[lay.slots_offset + c * lay.copy_stride + 128:][:8 * items].view(np.float64) for c in (0, 1)]
        counts = {"seqlock": [0, 0], "plain copy": [0, 0]}
        out = np.empty(items)
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                reader.read(0, out)
                counts["seqlock"][0] += 1
                counts["seqlock"][1] += out.min() != out.max()
                for view in copies:
                    plain = view.copy()
                    counts["plain copy"][0] += 1
                    counts["plain copy"][1] += plain.min() != plain.max()
        finally:
            stop.set()
            writer.join(10)
            del copies, raw, view
            reader.close()
    return {k: tuple(v) for k, v in counts.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=17226, help="float64 items per slot (default: the mlp model)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--batch", type=int, default=256, help="the step's batch for the exchange A/B (default 256)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the exchange A/B (0: skip it)")
    parser.add_argument("--race-s", type=float, default=0.5, help="seconds of the read race (0: skip it)")
    args = parser.parse_args(argv)
    print(f"shared region: {args.workers} slots of {args.items} float64 ({args.items * 8} B); us per call, "
          f"median [min, max] of {args.repeats} batches of {args.calls}; one process, no contention")
    for where, what, (median, low, high) in measure(args.items, args.workers, args.repeats, args.calls):
        print(f"  {where:22s} {what:16s} {median:9.2f} [{low:.2f}, {high:.2f}]")
    if args.rounds > 0:
        got = after_compute(args.batch, args.workers, args.rounds)
        print(f"the exchange after a step's compute (mlp, batch {args.batch}, {args.workers} slots; us, median round "
              f"[min, max] of {args.rounds}; load average {os.getloadavg()[0]:.1f}):")
        for op in ("read", "pass", "push", "ticket"):
            cols = []
            for variant in ("hot", "after compute"):
                v = got[variant, op]
                cols.append(f"{variant} {statistics.median(v) / 1e3:7.2f} [{min(v) / 1e3:.2f}, {max(v) / 1e3:.2f}]")
            ratio = statistics.median(got["after compute", op]) / statistics.median(got["hot", op])
            print(f"  {op:7s} " + "   ".join(cols) + f"   after/hot {ratio:.2f}")
    if args.race_s > 0:
        print(f"race: {args.race_s:g} s of reads of a slot whose writer pushes 1 MiB vectors back to back (hw)")
        for how, (reads, mixed) in race(args.race_s).items():
            print(f"  {how:12s} {reads:7d} reads, {mixed:5d} held a mix of two pushes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
