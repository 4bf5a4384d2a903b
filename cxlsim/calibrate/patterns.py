"""Each pool collective's copy pattern at np = 2, and its primitive: the kernel's copies alone, timed.

The allgather's concurrent copy (every rank writes its block, then copies out every block) is not
what the other kernels do (cxlsim/emulator/cxl_coll_move.h, cxl_coll_reduce.h, log off and untimed,
as the bench runs them), and a copy's cost depends on who else copies what at that moment and on how
much of the caches the call touches: at 1 MiB the allgather's copy-in took 72 us and its copy-out of
two blocks 64 us, while a whole broadcast (root writes once, the reader copies one block out) took
38-48 us. So each collective has its own primitive, `primitives.pattern_copy` with the kernel's
copies, step by step (rank r, the other rank o, s bytes):

- allgather: r writes its block [0, s) into its slot and, in the same pass, to a private output (its own
  block from send to recv, as the kernel's `cxl_copy_in_keep` does); copies o's block out. The concurrent copy
  (`measure.concurrent_rank`) makes the same copies but the own block's after the flags;
- allgather_zero_copy (the fused view call and the caller's read pass, `bench.AllgatherSide`): r writes its
  block into its slot; loads o's block in place and its own from send (`ZeroCopyResult.rows`);
- broadcast (root 0): the root writes [0, s) of its slot; the reader copies the root's [0, s) out;
- alltoall (s per destination): rank r writes block o of its row; copies its own block from send
  (local) and block r of o's row out;
- reduce_scatter (blocks of b = `block_bytes(s, 2)`): r writes block o of its row; the fold folds its
  own block from send and block r of o's row (in place) into a private output (read mode `FOLD`, as the
  kernel folds into recv);
- allreduce small: r writes its vector; the fold folds its own block from send and o's slot (in place) into a
  private output with the kernels' own fold (read mode `FOLD`: its loads, arithmetic and the output's stores);
- allreduce large (shares `share_bytes`): step 1 writes o's share, the fold folds r's share from
  send and from o's slot into r's slot of the next round (read mode `FOLD_NEXT`: its loads, arithmetic and
  stores into pool lines the other rank read in the last call); step 2 (that buffer) copies r's share and
  o's share out.

Why the small allreduce's step folds (measured, session 28, 07:29 UTC, load 1.9, hw, fast placement, np 2, three
passes): the kernel's fold stores its result into recv, and at 256 KiB the next call's copy-in took 26.3-27.9 us after
a step of loads alone but 11.1-12.6 us after a step that also stored into a private buffer (64 and 512 KiB: alike,
9.2-9.9 and 13.6-15.9 us), the call 27.3-28.8 us; with loads alone the data time (27 us) plus the fold (10-11.5 us)
exceeded the call (session 27's quiet runs: 256 KiB +28..+31%). Why the large allreduce's fold stores into the
next slot (measured, session 29, 17:05-17:12 UTC, load 0.5, hw, np 2, the call beside three variants of the pattern,
data times): with the folded share written as a separate copy-in of the second step, the pattern's data time was
2.73 us at 64 KiB and 5.12 at 128 KiB (fast placement; the call 3.66 and 7.23 us, software and flags included), and
4.89-5.41 and 8.51-8.87 us in the slow one (the call 8.99-10.47 and 16.1-18.2 us); the fold into a private output
added 0.2-0.5 us, the fold into the slot 0.35-0.8 us fast and 2.3-2.7 us at 64 KiB, 5.4-6.0 us at 128 KiB slow: a
fold that loads lines Modified in the other core's cache while it takes ownership of lines that core holds Shared
runs far slower than the two as separate passes. Why the reduce_scatter's step folds (measured, session 29, 18:10 UTC,
load 0.6, np 2, the call beside the pattern; fast placement): with its loads alone the pattern's data time was 2.46
and 8.33 us at 64 and 256 KiB in flush mode (maintenance 2.8 and 11.1 us; the call 8.26 and 31.8 us, about 28%
beyond the model that adds the fold's arithmetic to the loads), folded into an output 3.97 and 15.4 us; in hw 1.41
and 4.85 against 1.64 and 6.74 us (the call 2.18 and 8.96 us). Held out, session 29's three runs had the flush
reduce_scatter 13-33% short from 8 KiB up with the loads alone. The arithmetic of a loads-only fold would be the
fold primitive's (charged beyond the loads); every folding pattern now folds, so the fold primitive is charged only
where it exceeds the folding step's time; the flags are in no pattern: the flag round trip measures them. A writer's stores drain from its store buffer while it goes on: only a
rank that waits for the writer's flag waits for them, so a broadcast root's own part is its stores'
issue time (at 4 B-1 KiB about 10-30 ns against 100-140 ns until drained, loaded machine), every
other rank's the slowest copy-in drained. A job measures the patterns before and after its calls and keeps, per size,
the lower of the two data times: a rank taken off its CPU only adds time, and for tens of
milliseconds at a time on this loaded machine. The data time of a call (`join_pattern_ranks`) is, per step, the mean over the ranks (the bench
averages the ranks' times) of each rank's copy-in part and its copy-out. Units: ns, bytes.
"""
from __future__ import annotations

import numpy as np

from cxlsim.errors import InputError
from cxlsim.models.collectives import pool_collectives as pc

FOLD = "fold"
"""A step's read mode: its in-place reads folded by the kernels' own fold into a private output
(`primitives.pattern_copy`, float32 sum)."""
FOLD_NEXT = "fold-next"
"""A step's read mode: the same fold, into this rank's slot of the next data round (the large allreduce's share)."""

PATTERNS = ("allgather", "allgather_zero_copy", "broadcast", "alltoall", "reduce_scatter", "allreduce_small",
            "allreduce_large")
"""The patterns measured: the collectives' kernels (allreduce's two algorithms apart; allgather's copy call and its
zero-copy call with the caller's read pass apart)."""
FLOAT_BYTES = 4  # the bench's reductions are float32 sums
WARMUP, ITERATIONS, PASSES = 30, 50, 3
"""Per size and pass: calls dropped (the lines' states settle after the previous size's), calls kept. The
passes go over all sizes in turn, so a stretch of time with a rank off its CPU spoils a few calls of
many sizes rather than every call of one (the samples of the passes are pooled)."""


def pattern_name(collective: str, size_bytes: int, large_bytes: int) -> str | None:
    """The pattern a copy-mode call runs (None: barrier, no data)."""
    if collective == "allreduce":
        return "allreduce_large" if size_bytes >= large_bytes else "allreduce_small"
    return collective if collective in PATTERNS else None


def kernel_steps(pattern: str, s: int, rank: int) -> list[tuple[list, list, bool]]:
    """`pattern_copy` steps of rank `rank` (np 2) in a call of s bytes (the bench's size: the vector,
    bytes per destination for alltoall)."""
    r, o = rank, 1 - rank
    if pattern == "allgather":  # the own block from send to recv in the copy-in's pass (cxl_copy_in_keep)
        return [([(0, s, True)], [(o, 0, s)], False)]
    if pattern == "allgather_zero_copy":  # the caller loads its own block from send (ZeroCopyResult.rows)
        return [([(0, s)], [(-1 if k == r else k, 0, s) for k in (0, 1)], True)]
    if pattern == "broadcast":
        return [([(0, s)], [], False)] if r == 0 else [([], [(0, 0, s)], False)]
    if pattern == "alltoall":
        return [([(o * s, s)], [(-1, r * s, s), (o, r * s, s)], False)]
    if pattern == "reduce_scatter":
        b = pc.block_bytes(s, 2)
        return [([(o * b, b)], [(-1, r * b, b), (o, r * b, b)], FOLD)]
    if pattern == "allreduce_small":  # the fold takes this rank's block from send, the others' from their slots
        return [([(0, s)], [(-1, 0, s) if k == r else (k, 0, s) for k in (0, 1)], FOLD)]
    if pattern == "allreduce_large":
        (mlo, mhi), (olo, ohi) = pc.share_bytes(s, 2, r), pc.share_bytes(s, 2, o)
        return [([(olo, ohi - olo)], [(-1, mlo, mhi - mlo), (o, mlo, mhi - mlo)], FOLD_NEXT),
                ([], [(r, mlo, mhi - mlo), (o, olo, ohi - olo)], False)]
    raise InputError(f"pattern: expected one of {PATTERNS}, got {pattern!r}")


def fold_bytes(collective: str, size_bytes: int, large_bytes: int, nranks: int) -> int:
    """Bytes of one operand a rank folds per call (0: no fold): the vector (small allreduce), a rank's share
    (large allreduce, rank 0's: `share_bytes`) or block (reduce_scatter, `block_bytes`)."""
    s = FLOAT_BYTES * max(1, size_bytes // FLOAT_BYTES)  # the bench's float32 vector
    if collective == "allreduce":
        if s < large_bytes:
            return s
        lo, hi = pc.share_bytes(s, nranks, 0)
        return hi - lo
    if collective == "reduce_scatter":
        return pc.block_bytes(s, nranks)
    return 0


def slot_bytes_for(sizes) -> int:
    """Slot bytes the patterns of `sizes` need (the alltoall's row of two blocks)."""
    return max(64, 2 * max(int(n) for n in sizes))


def pattern_rank(comm, sizes, patterns=PATTERNS, warmup: int = WARMUP, iterations: int = ITERATIONS,
                 passes: int = PASSES) -> dict:
    """This rank's times of every pattern per size: {pattern: {size: (passes x iterations, steps, 5) ns
    array}} (phases in, out, writeback, invalidate, issue; `primitives.pattern_copy`), `passes` interleaved
    passes over the sizes."""
    from cxlsim.emulator import primitives

    if comm.size != 2:
        raise InputError(f"pattern primitives: need np = 2, got {comm.size}")
    got = {name: {int(n): [] for n in sizes if n > 0} for name in patterns}
    for _ in range(passes):
        for name in patterns:
            for n in got[name]:
                t = primitives.pattern_copy(comm, kernel_steps(name, n, comm.rank), warmup + iterations)
                got[name][n].append(t[warmup:])
    return {name: {n: np.concatenate(v) for n, v in by.items()} for name, by in got.items()}


def view_rounds(comm, nbytes: int, iterations: int) -> np.ndarray:
    """The zero-copy allgather's data movement (`allgather_view` and the caller's read of `rows`), every rank at
    once, `primitives.pattern_copy`'s phases (iterations, 4): the kernel copies the block from send into the
    slot (with the pool's own copy-in, which streams from its nt_min_bytes as the view's does: `cxl_view_streams`),
    then the caller reads every other rank's block in place and its own from its send buffer (`ZeroCopyResult.rows`)."""
    from cxlsim.emulator import primitives

    me = comm.rank
    step = ([(0, nbytes)], [(-1 if r == me else r, 0, nbytes) for r in range(comm.size)], True)
    return primitives.pattern_copy(comm, [step], iterations)[:, 0, :4]


def waits_for_writers(pattern: str, rank: int) -> bool:
    """Whether this rank's call waits for the other ranks' flags after its copy-in (every kernel's rank
    does, but a broadcast root, which publishes and returns)."""
    return not (pattern == "broadcast" and rank == 0)


def join_pattern_ranks(per_rank: list[dict]) -> dict:
    """{pattern: {'data': {size: ns}, 'maintenance': {size: ns}, 'loads': {size: ns}}} from every rank's
    `pattern_rank` (in rank order): per step, the mean over the ranks of each rank's median copy-in part plus
    its median copy-out. 'loads' is the part of 'data' that a fold's in-place loads take (the steps whose
    reads are loaded in place, `kernel_steps`: the ranks' mean median 'out'), 0 for the patterns without a
    fold: the kernel's fold makes these very loads, so the fold is charged beyond them (`collectives.collective_preset`).
    A rank that waits for the others' flags (`waits_for_writers`) waits for the slowest copy-in, stores
    drained (every flag is published after them): per call the largest 'in' of the ranks. A broadcast
    root waits for nothing: its part is its own 'issue' (its stores leave the store buffer behind it).
    'maintenance' is the same of the write-back (before the flag) and the invalidation (after it), 0 in
    hw mode."""
    out = {}
    for name in per_rank[0]:
        data, maintenance, loads = {}, {}, {}
        for n in per_rank[0][name]:
            t = np.stack([r[name][n] for r in per_rank])  # (ranks, calls, steps, 5)
            slowest_in, slowest_wb = t[:, :, :, 0].max(axis=0), t[:, :, :, 2].max(axis=0)
            in_place = np.array([read for _, _, read in kernel_steps(name, int(n), 0)], bool)
            loads[str(n)] = float(np.mean([(np.median(t[rank, :, :, 1], axis=0) * in_place).sum()
                                           for rank in range(len(per_rank))]))
            d = m = 0.0
            for rank in range(len(per_rank)):
                waits = waits_for_writers(name, rank)
                pre = slowest_in if waits else t[rank, :, :, 4]
                wb = slowest_wb if waits else t[rank, :, :, 2]
                d += float((np.median(pre, axis=0) + np.median(t[rank, :, :, 1], axis=0)).sum())
                m += float((np.median(wb, axis=0) + np.median(t[rank, :, :, 3], axis=0)).sum())
            data[str(n)] = d / len(per_rank)
            maintenance[str(n)] = m / len(per_rank)
        out[name] = {"data": data, "maintenance": maintenance, "loads": loads}
    return out
