"""Simulator speed: events/s against raw SimPy, a 1024-rank ring allgather, the analytic table.

Run: python benchmarks/simulator_speed.py [--ranks 1024] [--size 1MiB] [--chunk 1MiB]

Prints, measured side by side in one run on this machine (the machine is
shared and noisy, so (1) and (2) are interleaved A B A B over --rounds rounds
and medians are quoted):
1. raw SimPy: bare timeouts from a few processes (events/s), the ceiling;
2. cxlsim's DES on a ring allgather (events/s), and the ratio to (1);
3. the wall time of one P-rank ring allgather of SIZE per rank (default 1024
   ranks x 1 MiB) with the stated chunk size, against the 60 s target;
4. the analytic engine on a 64-node x 21-size table (1 B..1 MiB), against 1 s.
With cut-through switches on an uncongested star the chunk size does not
change the result (tests/test_sim_transport.py checks it), so the big run
uses whole-message chunks; step 2 also reports a smaller chunk for contrast.
"""
from __future__ import annotations

import argparse
import statistics
import time

import simpy

from cxlsim import config
from cxlsim.fabric.engine import Environment
from cxlsim.models.collectives import runner
from cxlsim.simulate import DEFAULT_SCENARIO, elaborate, run
from cxlsim.units import format_size, parse_size


def raw_simpy(events: int = 400_000, procs: int = 100) -> float:
    """Events per second of bare SimPy timeouts (counted the same way as cxlsim's)."""
    env = Environment()

    def proc():
        for _ in range(events // procs):
            yield env.timeout(1.0)

    for _ in range(procs):
        env.process(proc())
    start = time.perf_counter()
    env.run()
    return env.events / (time.perf_counter() - start)


def ring(ranks: int, size: int, chunk: int, nodes: int | None = None) -> tuple[float, int, float]:
    """(wall s, events, simulated latency ns) of one ring allgather on an ib-hdr star."""
    cfg = config.with_overrides(config.from_dict(DEFAULT_SCENARIO),
                                {"fabric.nodes": nodes or ranks, "workload.chunk": chunk})
    t = elaborate(cfg)[1].new_transport(cfg.workload.chunk_bytes)
    start = time.perf_counter()
    out = runner.run(t, "allgather", "ring", size)
    wall = time.perf_counter() - start
    runner.verify("allgather", t.size, runner.Context(), out.results)
    return wall, out.events, out.latency_ns


def analytic_table() -> tuple[float, int]:
    cfg = config.with_overrides(config.from_dict(DEFAULT_SCENARIO),
                                {"engine": "analytic", "fabric.nodes": 64, "workload.sizes": "1B:1MiB"})
    start = time.perf_counter()
    rows = run(cfg)
    return time.perf_counter() - start, len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--size", default="1MiB")
    ap.add_argument("--chunk", default="1MiB")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    size, chunk = parse_size(args.size), parse_size(args.chunk)
    print(f"simpy {simpy.__version__}; all rates measured in this run, medians of {args.rounds} interleaved rounds")

    chunks = (64 * 1024, 4096)
    raw, ours = [], {c: [] for c in chunks}
    for _ in range(args.rounds):
        raw.append(raw_simpy())
        for c in chunks:
            wall, events, _ = ring(64, 256 * 1024, c)
            ours[c].append(events / wall)
    raw_rate = statistics.median(raw)
    print(f"raw SimPy bare timeouts:        {raw_rate / 1e3:8.0f} k events/s")
    for c in chunks:
        rate = statistics.median(ours[c])
        print(f"cxlsim ring P=64 256KiB chunk {format_size(c):>7}: {rate / 1e3:6.0f} k events/s "
              f"= {rate / raw_rate:.2f} x raw SimPy  [target >= 300 k/s]")

    wall, events, latency = ring(args.ranks, size, chunk)
    raw_after = raw_simpy()
    print(f"ring allgather P={args.ranks} x {format_size(size)} (chunk {format_size(chunk)}): "
          f"wall {wall:.1f} s [target <= 60 s], {events} events = {events / wall / 1e3:.0f} k events/s "
          f"(raw SimPy right after: {raw_after / 1e3:.0f} k/s), projected latency {latency / 1e6:.2f} ms")

    wall, n = analytic_table()
    print(f"analytic engine 64 nodes x {n} sizes: {wall * 1e3:.0f} ms [target < 1000 ms]")


if __name__ == "__main__":
    main()
