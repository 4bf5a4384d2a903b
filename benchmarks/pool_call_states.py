"""Whether a pool call's speed follows its per-call overhead primitive, block by block (np 2, hw).

    python benchmarks/pool_call_states.py [--passes 6]

The calibration's collectives blocks (`cxlsim.calibrate.collective_blocks`) price each call with the 0-byte
call on an np-1 pool measured in the same block. This runs blocks like theirs for five calls (barrier,
allreduce 16 and 512 B, reduce_scatter 16 B, broadcast 64 B), with the overhead measured before and after the
calls, and prints per block the placement probe and, per rank, the overhead before, the calls' median (and
the medians of their two halves) and the overhead after, in ns. A block whose overhead before and after
differ changed state during the block; two ranks whose calls differ with equal overheads show the pair's own
state (docs/calibration.md, session 31).
"""
from __future__ import annotations

import argparse

import numpy as np

from cxlsim.calibrate.collective_blocks import _no_sync, placement_probe, timed_calls
from cxlsim.coherence import Coherence
from cxlsim.emulator.launch import run_local

KEYS = (("barrier", 0), ("allreduce", 16), ("allreduce", 512), ("reduce_scatter", 16), ("broadcast", 64))
OVERHEAD_WARMUP, OVERHEAD_CALLS, CALL_WARMUP, CALLS = 50, 200, 5, 50


def _rank(comm, passes: int) -> list[tuple]:
    from cxlsim.emulator.bench_collectives import CollectiveSide
    from cxlsim.emulator.comm import PoolComm
    from cxlsim.emulator.pool import Pool

    solo_pool = Pool.create("shm", 1, 64)
    solo_pool.unlink()
    solo = PoolComm.open(solo_pool, 0, coherence=Coherence.HW)

    def overhead(c):
        return float(np.median(timed_calls(CollectiveSide(c, "copy", solo, None, 0, False).op, _no_sync,
                                           OVERHEAD_WARMUP, OVERHEAD_CALLS)))
    try:
        comm.flag_pingpong(100)
        out = []
        for _ in range(passes):
            for c, n in KEYS:
                rt = placement_probe(comm)
                before = overhead(c)
                side = CollectiveSide(c, "copy", comm, None, n, False)
                calls = timed_calls(side.op, comm.barrier if c != "barrier" else _no_sync, CALL_WARMUP, CALLS)
                del side
                half = CALLS // 2
                out.append((c, n, rt, before, float(np.median(calls)), float(np.median(calls[:half])),
                            float(np.median(calls[half:])), overhead(c)))
        return out
    finally:
        solo.close()
        solo_pool.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=6)
    args = parser.parse_args(argv)
    if args.passes < 1:
        parser.error("--passes: expected >= 1")
    got = run_local(2, _rank, (args.passes,), coherence="hw", slot_bytes=1 << 16, timeout_s=60)
    print(f"# {'call':>14} {'size':>5} {'rt ns':>6} | rank 0: overhead, call (halves), overhead after | rank 1: same")
    for b0, b1 in zip(*got):
        ranks = " | ".join(f"{b[3]:5.0f} {b[4]:5.0f} ({b[5]:4.0f},{b[6]:4.0f}) {b[7]:5.0f}" for b in (b0, b1))
        print(f"  {b0[0]:>14} {b0[1]:5d} {b0[2]:6.0f} | {ranks}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
