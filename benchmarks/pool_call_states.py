"""Whether a block's per-call overhead primitive tracks its calls: measured before them, or between them (np 2, hw).

    python benchmarks/pool_call_states.py [--passes 40] [--blocks]

Each CPU's software here runs in one of two states (for a 0-byte allreduce about 270 or 500 ns) in stretches
of 0.1-30 ms, and a pool call waits for the slower rank's (docs/calibration.md, session 32). The calibration's
blocks (`cxlsim.calibrate.collective_blocks`) price each call with the 0-byte call on an np-1 pool measured
in the same block. This runs, for five calls (barrier, allreduce and reduce_scatter 16 B, broadcast and
alltoall 64 B), pairs of blocks in turn: "before", the overhead's 200 calls and then the 50 calls (the
calibration until session 32), and "between", the calls in `OVERHEAD_GROUPS` groups after each share of the
overhead (`interleaved_calls`, the calibration now). Per call and way it prints the median over blocks of
the blocks' call medians [least-most], the ranks' overhead medians, the overhead that gates the call (the
larger rank's; broadcast: the root's) [least-most], its correlation over blocks with the call's median (where
the blocks saw both states), and the calls' median against the "before" way's. `--blocks` also
prints every block. Units: ns.
"""
from __future__ import annotations

import argparse

import numpy as np

from cxlsim.calibrate.collective_blocks import (OVERHEAD_CALLS, OVERHEAD_WARMUP, _no_sync, interleaved_calls,
                                                placement_probe, timed_calls)
from cxlsim.coherence import Coherence
from cxlsim.emulator.launch import run_local

KEYS = (("barrier", 0), ("allreduce", 16), ("reduce_scatter", 16), ("broadcast", 64), ("alltoall", 64))
CALL_WARMUP, CALLS = 5, 50
WAYS = ("before", "between")


def _rank(comm, passes: int) -> list[tuple]:
    from cxlsim.emulator.bench_collectives import CollectiveSide
    from cxlsim.emulator.comm import PoolComm
    from cxlsim.emulator.pool import Pool

    solo_pool = Pool.create("shm", 1, 64)
    solo_pool.unlink()
    solo = PoolComm.open(solo_pool, 0, coherence=Coherence.HW)
    try:
        comm.flag_pingpong(100)
        out = []
        for _ in range(passes):
            for c, n in KEYS:
                for way in WAYS:
                    rt = placement_probe(comm)
                    zero = CollectiveSide(c, "copy", solo, None, 0, False)
                    side = CollectiveSide(c, "copy", comm, None, n, False)
                    between = comm.barrier if c != "barrier" else _no_sync
                    if way == "before":
                        overhead = timed_calls(zero.op, _no_sync, OVERHEAD_WARMUP, OVERHEAD_CALLS)
                        calls = timed_calls(side.op, between, CALL_WARMUP, CALLS)
                    else:
                        overhead, calls = interleaved_calls(side.op, between, zero.op, CALLS)
                    del side, zero
                    out.append((c, n, way, rt, float(np.median(overhead)), calls))
        return out
    finally:
        solo.close()
        solo_pool.close()


def join(per_rank: list[list[tuple]]) -> dict:
    """{(call, size, way): rows of (round trip, overhead of rank 0, of rank 1, call median over the ranks' mean)}."""
    rows = {}
    for b0, b1 in zip(*per_rank):
        calls = (np.asarray(b0[5]) + np.asarray(b1[5])) / 2
        rows.setdefault(b0[:3], []).append((b0[3], b0[4], b1[4], float(np.median(calls))))
    return rows


def gating(call: str, rank0: np.ndarray, rank1: np.ndarray) -> np.ndarray:
    """The overhead a call waits for: the broadcast root's (rank 0), else the slower rank's."""
    return rank0 if call == "broadcast" else np.maximum(rank0, rank1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=40)
    parser.add_argument("--blocks", action="store_true", help="print every block too")
    args = parser.parse_args(argv)
    if args.passes < 3:
        parser.error("--passes: expected >= 3 (a correlation over fewer blocks says nothing)")
    rows = join(run_local(2, _rank, (args.passes,), coherence="hw", slot_bytes=1 << 16, timeout_s=120))
    rts = [r[0] for got in rows.values() for r in got]
    print(f"# np 2, hw, {args.passes} passes; flag round trips {min(rts):.0f}-{max(rts):.0f} ns "
          f"({'fast' if max(rts) < 200 else 'slow or mixed'} placement: calibration_error.py's 200 ns threshold)")
    print(f"# {'call':>14} {'size':>5} {'way':>8} | {'calls, median [range]':>22} | overhead r0  r1 | "
          f"gating [range] | corr | calls / before's")
    for (c, n, way), got in rows.items():
        a = np.array(got)
        gate = gating(c, a[:, 1], a[:, 2])
        # a correlation needs both states among the blocks: a gating overhead spread of 1.3x at least
        corr = f"{np.corrcoef(gate, a[:, 3])[0, 1]:5.2f}" if gate.max() >= 1.3 * gate.min() else "  one state"
        ratio = np.median(a[:, 3]) / np.median(np.array(rows[(c, n, "before")])[:, 3])
        print(f"  {c:>14} {n:5d} {way:>8} | {np.median(a[:, 3]):7.0f} [{a[:, 3].min():5.0f}-{a[:, 3].max():6.0f}] | "
              f"{np.median(a[:, 1]):10.0f} {np.median(a[:, 2]):4.0f} | {np.median(gate):5.0f} [{gate.min():4.0f}-"
              f"{gate.max():4.0f}] | {corr} | {ratio:.3f}")
        if args.blocks:
            for rt, o0, o1, call in got:
                print(f"      rt {rt:4.0f}  overhead {o0:5.0f} {o1:5.0f}  call {call:6.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
