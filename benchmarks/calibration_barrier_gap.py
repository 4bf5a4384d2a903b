"""A/B of the hw barrier's flag cost: the osu_barrier call beside the flag exchange primitive at several gaps.

    python benchmarks/calibration_barrier_gap.py [--blocks 20] [--gaps 0,50,100,150,200,300] [--coherence hw|flush]

Per block (np 2, one job, hw or flush coherence): the placement probe, the np-1 barrier call's software (the per-call
overhead primitive the calibration uses), the exchange primitive (`primitives.flag_exchange`, the
median of 9 means of 50) with each clock-spin gap, the barrier call itself (osu_barrier's loop, the
median call, mean over the ranks), the probe again. It prints each fast block and the medians: the
call beyond its software against the exchange beyond its gap. The calibration charges the DES's
barrier up to the exchange at `collective_blocks.EXCHANGE_GAP_NS` (docs/calibration.md, session 25:
in the quiet runs the call paid 55-70 ns beyond its software, the exchange 71-104 ns beyond its gap).
Blocks whose probe is not the fast placement's (`calibrate.states.state_of`, as the calibration classes blocks: hw by the
200 ns threshold, flush against the best flush round trip seen) are counted and left out. Units: ns.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

from cxlsim.calibrate.collective_blocks import placement_probe, timed_calls
from cxlsim.calibrate.states import state_of
from cxlsim.coherence import Coherence


def _no_sync():
    return None


def job(comm, blocks: int, gaps, coherence: Coherence):
    from cxlsim.emulator import primitives
    from cxlsim.emulator.comm import PoolComm
    from cxlsim.emulator.pool import Pool

    solo_pool = Pool.create("shm", 1, 64)
    solo_pool.unlink()
    solo = PoolComm.open(solo_pool, 0, coherence=coherence)
    out = []
    try:
        comm.flag_pingpong(100)
        for _ in range(blocks):
            rt0 = placement_probe(comm)
            software = float(np.median(timed_calls(solo.barrier, _no_sync, 50, 200)))
            exchange = {g: statistics.median(primitives.flag_exchange(comm, 50, g) for _ in range(9)) for g in gaps}
            calls = timed_calls(comm.barrier, _no_sync, 30, 300)
            out.append(dict(rt=max(rt0, placement_probe(comm)), software=software, exchange=exchange,
                            calls=calls.tolist()))
    finally:
        solo.close()
        solo_pool.close()
    return out


def main() -> int:
    from cxlsim.emulator.launch import run_local

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--gaps", default="0,50,100,150,200,300", help="clock-spin gaps of the exchange, ns")
    parser.add_argument("--coherence", choices=("hw", "flush"), default="hw",
                        help="the pool's coherence mode (default hw)")
    args = parser.parse_args()
    coherence = Coherence.parse(args.coherence, "--coherence")
    try:
        gaps = tuple(float(g) for g in args.gaps.split(","))
    except ValueError:
        parser.error(f"--gaps: expected comma-separated ns, got {args.gaps!r}")
    if any(g < 0 for g in gaps):
        parser.error(f"--gaps: expected ns >= 0, got {args.gaps!r}")
    if args.blocks < 1:
        parser.error(f"--blocks: expected >= 1, got {args.blocks}")
    per_rank = run_local(2, job, (args.blocks, gaps, coherence), coherence=coherence, slot_bytes=64, timeout_s=120.0)
    rows = []
    for blocks in zip(*per_rank):
        calls = np.mean([b["calls"] for b in blocks], axis=0)
        rows.append(dict(rt=max(b["rt"] for b in blocks), software=statistics.fmean(b["software"] for b in blocks),
                         exchange=blocks[0]["exchange"], call=float(np.median(calls))))
    best = {coherence: min(r["rt"] for r in rows)}
    fast = [r for r in rows if state_of(coherence, (r["rt"],), [], best) == "fast"]
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"# np 2, {coherence.value}; {len(fast)} of {len(rows)} blocks in the fast placement (calibrate.states.state_of: hw "
          f"probe <= 200 ns; flush within its stable ratio of the best, {best[coherence]:.0f} ns); "
          f"load average {load} on {len(os.sched_getaffinity(0))} CPUs")
    print(f"{'round trip':>10} {'software':>9} {'call':>7} {'beyond':>7}  " + " ".join(f"{f'E({g:.0f})-gap':>11}" for g in gaps))
    for r in fast:
        print(f"{r['rt']:>10.1f} {r['software']:>9.1f} {r['call']:>7.1f} {r['call'] - r['software']:>7.1f}  "
              + " ".join(f"{r['exchange'][g] - g:>11.1f}" for g in gaps))
    if not fast:
        print("# no block in the fast placement: no result (run again on a quieter machine)")
        return 0
    med = statistics.median
    print(f"# medians: call {med(r['call'] for r in fast):.1f} ns, beyond its software "
          f"{med(r['call'] - r['software'] for r in fast):.1f} ns [{min(r['call'] - r['software'] for r in fast):.1f}-"
          f"{max(r['call'] - r['software'] for r in fast):.1f}]; exchange beyond its gap: "
          + ", ".join(f"{g:.0f} ns gap {med(r['exchange'][g] - g for r in fast):.1f}" for g in gaps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
