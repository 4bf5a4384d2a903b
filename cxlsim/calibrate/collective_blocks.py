"""A collectives job's measurement blocks: each call measured beside its own primitives, seconds apart at most.

A block is one collective at one size, measured on the job's two ranks in one stretch of
about a millisecond (`run_block`, in this order):

1. the flag round trip (`placement_probe`): the block's host placement before;
2. the concurrent-copy primitive at 1 and 64 B (`CONCURRENT_SIZES`: the flags' price); for the `SYMMETRIC`
   collectives, the symmetric flag exchange (`_probes.flag_exchange`, `EXCHANGE_GAP_NS`);
3. the collective's copy pattern at that size (`patterns.kernel_steps`, `primitives.pattern_copy`;
   allreduce: both algorithms', so a profile prices either at every size);
4. the collective itself: the bench's own step (`bench_side`: the allgather's copy or zero-copy step, or
   `bench_collectives.CollectiveSide`'s) in osu's loop
   (warm-up, then timed calls with a barrier between; osu_barrier: none), each call timed, in
   `OVERHEAD_GROUPS` groups, each after its share of the per-call overhead primitive: the 0-byte bench
   step on an np-1 hw pool of the rank's own process (its software, kernel entry included; the DES
   charges the np-2 step and flush mode's cache upkeep), each call timed (`interleaved_calls`);
5. the flag round trip again, and each rank's share of its CPU over the block.

Why blocks (measured, np 2, hw, 18:13 UTC, load 6-7): on this machine the two ranks' CPUs are
shared with other jobs, and for tens of milliseconds at a time the two ranks take turns on one
CPU (flag round trips of 0.4-0.9 ms against 100 ns). Three 300-call blocks of a 64 B alltoall in
one job measured 546, 546 and 548 ns (median of the calls) between calm round trips, and
105-220 us in the blocks between turn-taking ones; the 0-byte per-call overhead of the same
blocks was 356-360 ns calm and 281-833 ns (means of 300 calls) otherwise. A job that times all
its calls at once and its primitives before and after mixes such stretches: one batch mean
took a preemption or not, and the primitive came from another stretch. So a job runs its
blocks in `passes` interleaved passes over every (collective, size), the state of each block
is judged by its own round trips and CPU share (`block_state`), and a size's figures come from
its fast blocks alone, every primitive from the same blocks as the calls (`job_figures`).

Statistics: per block and rank, each call's ns; the call's time is the mean over the ranks (the
bench averages the ranks' means); a size's measured time is the median over its fast blocks'
calls, pooled (a call a rank was preempted in is an outlier there, not 1/50 of the mean), and
the per-call overhead the median of its 0-byte calls likewise. The patterns' medians are
`patterns.join_pattern_ranks`'s. Units: ns, bytes.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from cxlsim.calibrate.states import state_of
from cxlsim.calibrate.patterns import (FLOAT_BYTES, ITERATIONS, WARMUP, fold_bytes, join_pattern_ranks,  # noqa: F401
                                       kernel_steps, pattern_name)
from cxlsim.coherence import Coherence

PROBE_ROUNDS, PROBE_BATCHES = 8, 7
"""A placement probe (before and after every block): the median of PROBE_BATCHES means of PROBE_ROUNDS flag
ping-pongs, so one preempted ping-pong does not hide the placement (5-10 us in hw mode, 30 us flush)."""
BLOCK_BUSY = 0.75
"""A block during which a rank had less of its CPU than this is disturbed. The block's figures are medians
of its calls, which a rank's absence from a quarter of the block moves little; below half of it they are
the scheduler's."""
OVERHEAD_WARMUP, OVERHEAD_CALLS = 50, 200
"""0-byte calls per block for the per-call overhead primitive: dropped, timed."""
OVERHEAD_GROUPS = 5
"""Groups a block's calls are timed in, each after its share of the overhead's timed 0-byte calls (the first
calls of each dropped: `GROUP_WARMUP`). Why (session 32, np 2, hw, 10:12-10:15 UTC,
load 0.1, fast): each CPU's software runs in one of two states, 260-280 or 450-580 ns for a 0-byte allreduce, in
stretches of 0.1-30 ms (a single process timing 20-call chunks for 3 s: 14-18% slow, about 1,500 slow
stretches); a call waits for the slower rank's. Over 12 passes of five calls (barrier, allreduce and
reduce_scatter 16 B, broadcast and alltoall 64 B), the blocks' call medians against the larger of the
two ranks' overhead medians (the root's, broadcast) correlated 0.13-0.77 with the overhead measured before
the block's calls, and 0.91-0.98 with it measured in five groups between them (one call dropped per group);
in a 40-pass run (`benchmarks/pool_call_states.py`, 11:01 UTC) 0.83-0.97 against 0.83-0.98. With
`GROUP_WARMUP` calls dropped the calls' medians are the old way's 0.998-1.011x (a run in one state). One group
of 4 overhead calls after every call gave 0.99, but slowed the calls by 4-14%. At the level of the
calibration's cells the change is not shown to help (docs/calibration.md, session 32)."""
GROUP_WARMUP = 4
"""Calls a group drops first: after the overhead's calls the next 3-4 calls run slower (medians by position
in a group of 10 over 40 blocks, 11:02 UTC: alltoall 64 B 356-366 ns against 341-346 ns for the rest, and
the calls measured before the overhead alike, 336-351 ns; with 4 dropped, 446-451 against 441-450 ns in a
later, slower stretch)."""
PASSES = 3
"""Passes over every (collective, size) per job: a disturbed stretch spoils a few blocks of many sizes."""
CONCURRENT_SIZES, CONCURRENT_WARMUP, CONCURRENT_ROUNDS = (1, 64), 20, 50
"""The concurrent-copy primitive every block measures (`measure.concurrent_rank`: rounds dropped, kept, per
size): the DES's flag lines are priced at its 64 B figure, and the barrier's (no pattern) call, flush
mode's flag write-back and invalidation included, at its 1 B one. Measured once before and once after a
job instead, one disturbed figure of the two priced every barrier of the job: a flush job's DES barrier
loop took 1221 ns against 522 ns for the next job, whose flag exchange probes agreed (710, 717 ns)."""
FOLD_SAMPLES = 9
"""Folds per size (and of one float32, the call's own cost, subtracted) of a reduction block's fold primitive
(`block_folds`). Why in the block (session 24's quiet run 19:44, hw): two of its three jobs ran with the
per-call software at 1.9x the third's (0-byte allreduce call 651-686 against 360 ns) and their 1 MiB
allreduce took 98-131 us against 60 us, while the fold primitive, measured once before the jobs, stayed
at 36 us; measured beside each other (20:47, load 5.8), the 1 MiB fold took 70 us in one stretch and
36 us in the next, alone or on both ranks at once alike."""
SYMMETRIC = ("allgather", "allgather_zero_copy", "allreduce", "reduce_scatter", "alltoall", "barrier")
"""Collectives whose every step has every rank publish and poll at once (a broadcast's reader waits for a
root that publishes and returns): their blocks measure the symmetric flag exchange, which the DES's waits
in their calls are charged up to (`collectives.ExchangeCharges`)."""
EXCHANGE_GAP_NS, EXCHANGE_ROUNDS, EXCHANGE_BATCHES = 200.0, 50, 9
"""The symmetric flag exchange primitive (`SYMMETRIC` blocks): `primitives.flag_exchange` with this much software
between exchanges (a Python call's own cost here is 130-400 ns; the exchange beyond the gap measured
267-289 ns hw and 587-674 ns flush, slow placement, over gaps of 100-400 ns alike, against 198-265 ns
and 526-560 ns back to back), the median of EXCHANGE_BATCHES means of EXCHANGE_ROUNDS exchanges."""


ALLGATHER_SIDES = {"allgather": "copy", "allgather_zero_copy": "zero-copy"}
"""The allgather's calls a job measures, by the name its blocks and rows carry: the bench's copy step, and its zero-copy
step (the fused view call and one read pass over the result in place, `bench.AllgatherSide`)."""


def bench_side(collective: str, comm, size_bytes: int):
    """The bench's own timed step of `collective` at `size_bytes` on the pool (copy mode; the allgather's two steps by
    `ALLGATHER_SIDES`), without validation: its `op` is what a block times."""
    from cxlsim.emulator.bench import AllgatherSide
    from cxlsim.emulator.bench_collectives import CollectiveSide

    if collective in ALLGATHER_SIDES:
        return AllgatherSide(ALLGATHER_SIDES[collective], comm, None, size_bytes, False)
    return CollectiveSide(collective, "copy", comm, None, size_bytes, False)


def timed_calls(op, between, warmup: int, iterations: int) -> np.ndarray:
    """osu's loop (`bench.time_calls`: a barrier first, `between()` after every call), each of the
    `iterations` timed calls kept: ns per call."""
    from cxlsim.emulator.bench import time_calls  # the compiled emulator, which `cxlsim simulate` does without

    return time_calls(op, between, warmup, iterations) * 1e9


def _no_sync():
    return None


def interleaved_calls(op, between, overhead_op, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """`op` in osu's loop (`timed_calls`, `between` after every call) in `OVERHEAD_GROUPS` groups, each after
    its share of `OVERHEAD_CALLS` timed `overhead_op` calls (`OVERHEAD_WARMUP` dropped first): (overhead ns,
    calls ns), each call's. Each group drops `GROUP_WARMUP` calls first (the first group a tenth of
    `iterations` if more: osu's warm-up), each overhead share one."""
    timed_calls(overhead_op, _no_sync, OVERHEAD_WARMUP, 0)
    groups = max(1, min(OVERHEAD_GROUPS, iterations))
    overhead, calls = [], []
    for g, share in enumerate(np.array_split(np.arange(iterations), groups)):
        overhead.append(timed_calls(overhead_op, _no_sync, 1, OVERHEAD_CALLS // groups))
        calls.append(timed_calls(op, between, max(GROUP_WARMUP, iterations // 10) if g == 0 else GROUP_WARMUP,
                                 share.size))
    return np.concatenate(overhead), np.concatenate(calls)


def block_patterns(collective: str, size_bytes: int, large_bytes: int) -> tuple:
    """The copy patterns a block of this call measures: the one it runs (allreduce: both algorithms')."""
    sizes = (0, 1 << 62) if collective == "allreduce" else (size_bytes,)
    return tuple(sorted({name for n in sizes if (name := pattern_name(collective, n, large_bytes))}))


def block_keys(collectives, sizes, nranks: int = 2) -> list[tuple[str, int]]:
    """Every (collective, size) a job measures: the barrier at 0 B only, reduce_scatter from a float32 per rank."""
    keys = []
    for c in collectives:
        for n in ((0,) if c == "barrier" else sizes):
            if not (c == "reduce_scatter" and n < FLOAT_BYTES * nranks):
                keys.append((c, int(n)))
    return keys


def block_folds(collective: str, size_bytes: int) -> dict:
    """The fold primitive of a reduction block (`primitives.fold_samples_ns`, float32 sum, the bench's; every
    rank at once, each in its own buffers): {fold bytes: ns beyond a one-element fold}, at the sizes the
    call's algorithms fold (`patterns.fold_bytes`: allreduce, both algorithms'; reduce_scatter, a block);
    {} for the other collectives."""
    from cxlsim.emulator import primitives

    if collective not in ("allreduce", "reduce_scatter") or size_bytes <= 0:
        return {}
    sizes = {fold_bytes(collective, size_bytes, large, 2) for large in (0, 1 << 62)}
    sizes = sorted(n for n in sizes if n > 0 and n % FLOAT_BYTES == 0)
    base = statistics.median(primitives.fold_samples_ns(FLOAT_BYTES, "float32", "sum", FOLD_SAMPLES))
    return {n: max(statistics.median(primitives.fold_samples_ns(n, "float32", "sum", FOLD_SAMPLES)) - base, 0.0)
            for n in sizes}


def placement_probe(comm) -> float:
    """The flag round trip now (ns): the median of `PROBE_BATCHES` short ping-pong means."""
    return statistics.median(comm.flag_pingpong(PROBE_ROUNDS) for _ in range(PROBE_BATCHES))


def run_block(comm, collective: str, size_bytes: int, iterations: int, large_bytes: int, solo=None) -> dict:
    """This rank's block (see the module docstring), its copy-ins the MPI library's for the placement it probes first
    (`PoolComm.choose_copy_in`: in hw mode, non-temporal stores from 2 KiB in the slow placement, so the slow rows
    price the library's calls): {collective, size_bytes, nt_min_bytes, rt_before_ns, rt_after_ns,
    busy (process/wall time), overhead_ns (0-byte calls on `solo`, an np-1 hw communicator of this
    process; None without it), exchange_ns (`SYMMETRIC` collectives: the flag exchange primitive, else
    None), fold_ns (`block_folds`), patterns ({name: (calls, steps, 5) ns}), concurrent (`measure.concurrent_rank` at
    CONCURRENT_SIZES), calls_ns}."""
    from cxlsim.emulator import primitives

    from cxlsim.calibrate.measure import concurrent_rank

    copy_in = comm.choose_copy_in()  # the MPI library's copy-ins for the placement now (hw, np 2), as the bench's
    rt0 = placement_probe(comm)
    c0, w0 = time.process_time_ns(), time.perf_counter_ns()
    concurrent = concurrent_rank(comm, CONCURRENT_SIZES, CONCURRENT_WARMUP, CONCURRENT_ROUNDS)
    overhead = exchange = None
    if collective in SYMMETRIC:
        exchange = statistics.median(primitives.flag_exchange(comm, EXCHANGE_ROUNDS, EXCHANGE_GAP_NS)
                                     for _ in range(EXCHANGE_BATCHES))
    folds = block_folds(collective, size_bytes)
    patterns = {}
    for name in block_patterns(collective, size_bytes, large_bytes) if size_bytes > 0 else ():
        got = primitives.pattern_copy(comm, kernel_steps(name, size_bytes, comm.rank), WARMUP + ITERATIONS)
        patterns[name] = got[WARMUP:]
    side = bench_side(collective, comm, size_bytes)
    between = comm.barrier if collective != "barrier" else _no_sync
    if solo is None:
        calls = timed_calls(side.op, between, max(1, iterations // 10), iterations)
    else:  # the call's software: the 0-byte call on this process's own np-1 pool, between the calls
        zero = bench_side(collective, solo, 0)
        overhead, calls = interleaved_calls(side.op, between, zero.op, iterations)
        del zero
    del side
    busy = (time.process_time_ns() - c0) / max(time.perf_counter_ns() - w0, 1)
    return dict(collective=collective, size_bytes=size_bytes, nt_min_bytes=copy_in["nt_min_bytes"],
                rt_before_ns=rt0, rt_after_ns=placement_probe(comm),
                busy=busy, overhead_ns=overhead, exchange_ns=exchange, fold_ns=folds, patterns=patterns,
                concurrent=concurrent, calls_ns=calls)


def bench_job(comm, keys, iterations: int, large_bytes: int, passes: int = PASSES):
    """One job's rank: `passes` passes of `run_block` over `keys` (with an np-1 communicator of this rank's
    own for the calls' software). Returns this rank's blocks.

    Why np 1 (measured 19:00, hw, load 4.4, medians of 400 calls): a 0-byte call costs 520-561 ns
    (allreduce), 521-531 (reduce_scatter), 360-361 (alltoall), 331-340 (broadcast) at np 1, where it enters
    the kernel and runs a step with no peer, but 360-400, 350-360, 240 and 211-221 ns at np 2, where it is
    no step at all and skips the kernel's entry, which every call with bytes runs (np 1, 8 B: 630-651,
    600, 410-421, 351 ns)."""
    from cxlsim.emulator.comm import PoolComm
    from cxlsim.emulator.pool import Pool

    solo_pool = Pool.create("shm", 1, 64)
    solo_pool.unlink()  # the mapping stays; nothing is left behind if this rank dies
    solo = PoolComm.open(solo_pool, 0, coherence=Coherence.HW)  # software only: the DES charges flush mode's upkeep
    try:
        comm.flag_pingpong(100)  # both ranks running
        return [run_block(comm, c, n, iterations, large_bytes, solo) for _ in range(passes) for c, n in keys]
    finally:
        solo.close()
        solo_pool.close()


def join_blocks(per_rank_blocks: list[list[dict]]) -> list[dict]:
    """One block per position from every rank's (in rank order): round trips as rank 0 saw them, busy the
    least of the ranks', calls_ns the mean over the ranks per call, overhead_ns the mean over the ranks of
    each one's median 0-byte call (None where not measured) and overhead_rank_ns those medians in rank order,
    fold_ns the mean over the ranks per fold size, patterns and concurrent copies per rank (joined later, over a
    placement's blocks: `job_figures`)."""
    out = []
    for blocks in zip(*per_rank_blocks):
        b0 = blocks[0]
        over = [float(np.median(b["overhead_ns"])) for b in blocks if b["overhead_ns"] is not None]
        out.append(dict(collective=b0["collective"], size_bytes=b0["size_bytes"], nt_min_bytes=b0.get("nt_min_bytes", 0),
                        rt_before_ns=b0["rt_before_ns"],
                        rt_after_ns=b0["rt_after_ns"], busy=min(b["busy"] for b in blocks),
                        calls_ns=np.mean([b["calls_ns"] for b in blocks], axis=0),
                        overhead_ns=statistics.fmean(over) if over else None,
                        overhead_rank_ns=over if len(over) == len(blocks) else None,
                        exchange_ns=b0["exchange_ns"],
                        fold_ns={n: statistics.fmean(b["fold_ns"][n] for b in blocks) for n in b0.get("fold_ns", {})},
                        patterns=[b["patterns"] for b in blocks], concurrent=[b["concurrent"] for b in blocks]))
    return out


def block_state(block: dict, mode: Coherence, best: dict) -> str:
    """`state_of` one block: its own round trips before and after, and its CPU share (`BLOCK_BUSY`)."""
    return state_of(mode, (block["rt_before_ns"], block["rt_after_ns"]), [block["busy"]], best, BLOCK_BUSY)


PLACEMENTS = {"fast": "fast", "slow": "slow placement"}
"""The host placements a run's rows are kept for, and the block state each is made of."""


def median_block_overheads(rank_overheads: list[list[float]]) -> list[float]:
    """The ranks' per-call overheads (ns, in rank order) of the block whose slowest rank is the median block's
    (of an even count, the mean of the middle two blocks'): the ranks' figures are kept from one block, as a call
    waits for its slower rank. Why not each rank's own median: two ranks that each run slow in one block of three,
    not the same one, have fast medians, while two of the three blocks' calls waited for a slow rank."""
    order = sorted(range(len(rank_overheads)), key=lambda i: max(rank_overheads[i]))
    low, high = order[(len(order) - 1) // 2], order[len(order) // 2]
    return [float(a + b) / 2 for a, b in zip(rank_overheads[low], rank_overheads[high])]


def job_figures(blocks: list[dict], mode: Coherence, best: dict, state: str = "fast") -> dict:
    """What a job's blocks in `state` (default its fast ones) give, per (collective, size) measured in one
    of them at least:
    {'keys': {(collective, size): {measured_ns (median of the pooled calls), mean_ns, calls, blocks,
    overhead_ns (median of the blocks' 0-byte medians, or None), overhead_rank_ns (per rank, its 0-byte median
    in the block `median_block_overheads` picks, or None), exchange_ns (likewise), fold_ns ({fold bytes:
    the median over the blocks}), roundtrip_ns (median
    of the blocks' mean round trips)}}, 'pattern_ns': {pattern: {'data',
    'maintenance': {size: ns}}} (`join_pattern_ranks` over the pooled blocks of each size), 'concurrent_ns'
    ({kind: {size: ns}}: `measure.join_ranks` of the blocks' concurrent-copy rounds, pooled),
    'roundtrip_ns' (median of those blocks' mean round trips; None without any), 'states':
    {state: blocks} (all of the job's)}."""
    from cxlsim.calibrate.measure import join_ranks

    states = {"fast": 0, "slow placement": 0, "disturbed": 0}
    by_key, pooled, rts, rounds = {}, {}, [], None
    for b in blocks:
        got_state = block_state(b, mode, best)
        states[got_state] += 1
        if got_state != state:
            continue
        rts.append((b["rt_before_ns"] + b["rt_after_ns"]) / 2)
        key = (b["collective"], b["size_bytes"])
        got = by_key.setdefault(key, {"calls": [], "overheads": [], "rank_overheads": [], "exchanges": [], "rts": [],
                                      "folds": {}})
        got["rts"].append(rts[-1])
        got["calls"].append(b["calls_ns"])
        if b["overhead_ns"] is not None:
            got["overheads"].append(b["overhead_ns"])
        if b.get("overhead_rank_ns"):
            got["rank_overheads"].append(b["overhead_rank_ns"])
        if b.get("exchange_ns") is not None:
            got["exchanges"].append(b["exchange_ns"])
        for n, v in b.get("fold_ns", {}).items():
            got["folds"].setdefault(n, []).append(v)
        if rounds is None:
            rounds = [{kind: {n: [] for n in by} for kind, by in mine.items()} for mine in b["concurrent"]]
        for r, mine in enumerate(b["concurrent"]):
            for kind, by in mine.items():
                for n, v in by.items():
                    rounds[r][kind][n] += list(v)
        for name in b["patterns"][0]:
            ranks = pooled.setdefault(name, {}).setdefault(b["size_bytes"], [[] for _ in b["patterns"]])
            for r, mine in enumerate(b["patterns"]):
                ranks[r].append(mine[name])
    keys = {}
    for key, got in by_key.items():
        calls = np.concatenate(got["calls"])
        keys[key] = dict(measured_ns=float(np.median(calls)), mean_ns=float(calls.mean()), calls=int(calls.size),
                         blocks=len(got["calls"]),
                         overhead_ns=statistics.median(got["overheads"]) if got["overheads"] else None,
                         overhead_rank_ns=median_block_overheads(got["rank_overheads"]) if got["rank_overheads"] else None,
                         exchange_ns=statistics.median(got["exchanges"]) if got["exchanges"] else None,
                         fold_ns={n: statistics.median(v) for n, v in got["folds"].items()},
                         roundtrip_ns=statistics.median(got["rts"]))
    patterns = {}
    for name, by_size in pooled.items():
        ranks = len(next(iter(by_size.values())))
        per_rank = [{name: {n: np.concatenate(v[r]) for n, v in by_size.items()}} for r in range(ranks)]
        patterns[name] = join_pattern_ranks(per_rank)[name]
    concurrent = {kind: {str(n): v for n, v in by.items()} for kind, by in join_ranks(rounds).items()} if rounds else {}
    return dict(keys=keys, pattern_ns=patterns, concurrent_ns=concurrent,
                roundtrip_ns=statistics.median(rts) if rts else None, states=states)
