"""bench train's sync and ddp (overlap on and off) at np 2, interleaved, with their spread.

    python benchmarks/train_overlap.py [--runs 5] [--steps 200] [--models mlp cnn-small] [--factors 1 3]

For each model and slow-down factor (every rank the same), it runs sync, ddp --overlap on
and ddp --overlap off one after the other, `--runs` times, so the machine's drift hits all
three. Per run it takes every rank's median step time and median communication time (comm_s:
the step less its compute) after the first 10% of the steps, and the run's throughput;
it prints the median over runs with the lowest and highest run, the load average before
and after, and whether each run's parameters were bitwise those of sync (they must be).
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from cxlsim.emulator.training.config import TrainConfig
from cxlsim.emulator.training.launcher import train

CASES = {"sync": dict(mode="sync"), "ddp on": dict(mode="ddp", overlap=True), "ddp off": dict(mode="ddp", overlap=False)}


def one_run(model: str, factor: float, steps: int, case: dict) -> tuple[float, float, float, str]:
    config = TrainConfig(nranks=2, model=model, steps=steps, eval_every=steps, factors=(factor, factor),
                         gpus=(None, None), **case)
    record = train(config, progress=False)
    skip = steps // 10
    step_ms = np.median([np.median(r["step_s"][skip:]) for r in record["ranks"]]) * 1e3
    comm_ms = np.median([np.median(r["comm_s"][skip:]) for r in record["ranks"]]) * 1e3
    return step_ms, comm_ms, record["throughput_samples_per_s"], record["final_param_sha256"][0]


def spread(values) -> str:
    a = np.asarray(values)
    return f"{np.median(a):9.3f} ({a.min():.3f}-{a.max():.3f})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--models", nargs="+", default=["mlp", "cnn-small"])
    p.add_argument("--factors", nargs="+", type=float, default=[1.0, 3.0])
    args = p.parse_args(argv)
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cores: "
          f"{len(os.sched_getaffinity(0))}; np 2, {args.steps} steps, {args.runs} interleaved runs per case")
    print(f"{'model':>10} {'factor':>6} {'case':>8} {'step ms median (min-max)':>28} {'comm ms median (min-max)':>28} "
          f"{'samples/s median (min-max)':>30} bitwise=sync")
    for model in args.models:
        for factor in args.factors:
            runs = {k: [] for k in CASES}
            for _ in range(args.runs):
                for name, case in CASES.items():
                    runs[name].append(one_run(model, factor, args.steps, case))
            reference = runs["sync"][0][3]
            for name, rows in runs.items():
                steps, comms, throughputs, digests = zip(*rows)
                print(f"{model:>10} {factor:>6g} {name:>8} {spread(steps):>28} {spread(comms):>28} "
                      f"{np.median(throughputs):>12.0f} ({min(throughputs):.0f}-{max(throughputs):.0f}) "
                      f"{all(d == reference for d in digests)}")
    print(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
