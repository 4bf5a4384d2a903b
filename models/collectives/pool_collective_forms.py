"""Closed forms of the pool collectives beyond allgather (`pool_collectives`), ns, on a pool's `PoolFigures`.

One call that every rank starts together on a fresh pool, by the pool
transport's rules (`cxlsim.fabric.cxl_transport`).

Flush mode: every rank's program is sequential, so each form is a walk of the
ranks' programs through the pool's FIFO chain in arrival order
(`pool_flush_programs`, `pool_walk.PoolWalk`), exact on any pool (one switch or
a tree, any number of devices), queueing included. That matters even on an
uncongested pool: a broadcast reader's polls queue at a device behind the
root's chunks (a chunk holds the device for chunk/B while its lines arrive over
chunk/b), which shifts every later poll and so which poll sees the flag.

hw mode on a congested pool (not `uncongested`; there the algebraic forms below
are exact and cheaper), the step collectives (barrier, both allreduces,
reduce_scatter, both alltoalls): each step is the pool allgather's fixed point through the pool's
FIFO chain (`pool_hw_steps.hw_step_ends`) with the step's own accesses: rank r
streams its row (or vector) but the block (or share) only it reads, in one or
two pieces, fences, stores its flag line of the step, polls every other
rank's (after the local copy of its own block, for the alltoall), then loads
the other ranks' ranges and folds; rank r starts its next step (the large
allreduce's allgather of shares) when it ends the last. Exact on trees and
under queueing as the allgather's form is (and on one switch), up to the order
of equal times (within 0.5% as measured at 16-64 hosts; `form_note`). The
large allreduce's two steps are solved one after the other, which leaves out
queueing between one rank's second step and another's first (within 1%: 0.65%
at 33 hosts on two devices, 8 KiB, as measured at 16-64 hosts). Above
`HW_CHUNKS` chunk transfers the algebraic forms below stand, noted approximate.

The broadcasts' forms are `pool_broadcast_forms` (imported here for the records); the terms every
form shares (line counts, a rank's store and load costs) are `pool_step_terms`.

The flush-mode row steps, where their walk is unaffordable (`row_step_cost`), take those terms: rank r
reaches its sfence
at its own shift (the last piece's acknowledgement and the publish's
clflushopt), the step's wait is the barrier's form with rank r starting there
(`pool_forms` starts) and polling after its local copy (`pool_forms`
poll_delay), then rank r drops and loads the other ranks' ranges from its own
barrier end and folds.
"""
from __future__ import annotations

import functools

from cxlsim.models.collectives import pool_collectives as pc
from cxlsim.models.collectives.base import POOL, Algorithm
from cxlsim.models.collectives.cxl_pool import cxl_pool_closed_form
from cxlsim.models.collectives.pool_broadcast_forms import (broadcast_cost, broadcast_ends, broadcast_zero_copy_cost,
                                                            hw_broadcast_stepped)
from cxlsim.models.collectives.pool_collectives import block_bytes, share_bytes
from cxlsim.models.collectives.pool_forms import geometry_from_figures, pool_rank_ends
from cxlsim.models.collectives.pool_hw_steps import hw_step_ends
from cxlsim.models.collectives.pool_flush_programs import Step, walk_steps
from cxlsim.models.collectives.pool_step_terms import (HW_CHUNKS, LINE, flush_mode, issue_ns, lines_of, reads_ns,
                                                       row_store_shift_ns, store_shift_ns, uncongested)

__all__ = ["uncongested", "form_note", "select_pool", "barrier_cost", "allreduce_small_cost", "allreduce_large_cost",
           "row_step_cost", "reduce_scatter_cost", "alltoall_cost", "alltoall_zero_copy_cost", "broadcast_cost",
           "broadcast_ends", "broadcast_zero_copy_cost", "flush_steps", "hw_steps_cost", "HW_TIES", "HW_STEPS_APART",
           "RECORDS", "ALLREDUCE_SMALL", "ALLREDUCE_LARGE", "REDUCE_SCATTER", "BROADCAST", "ALLTOALL", "BARRIER",
           "BROADCAST_ZERO_COPY", "ALLTOALL_ZERO_COPY"]

APPROXIMATE = ("approximate: the closed form leaves out queueing (exact on one switch with P x host bandwidth "
               "within the devices'); use engine des")


HW_TIES = ("within 0.5%: the allgather's fixed point with the step's own accesses, through the pool's queues; "
           "equal times at a queue can go in another order than the DES's (as measured at 16-64 hosts)")


HW_STEPS_APART = ("within 1%: its two steps are the allgather's fixed point each, solved one after the other, "
                  "which leaves out queueing between one rank's second step and another's first (0.65% at 33 hosts "
                  "on two devices, 8 KiB, as measured at 16-64 hosts)")


WALK_TIES = ("within 0.05%: a walk of the ranks' programs through the pool's queues; equal times at a queue "
             "can go in another order than the DES's (as measured at 16-64 hosts)")


def form_note(algo, fig, p: int, size_bytes: int) -> str | None:
    """The caveat the closed form of pool record `algo` carries for this call, or None where it equals the DES.

    The bounds are those the tests measure (tests/test_sim_pool_collectives.py)."""
    key = (algo.collective, algo.name)
    if p <= 1 or key not in _FORMS or size_bytes == 0 and algo.collective != "barrier" or algo.collective == "broadcast" and (flush_mode(fig)
                                                                         or hw_broadcast_stepped(fig, p, size_bytes)):
        return None  # the broadcasts' walks (flush) and fixed points (hw) are exact on any pool
    calm = uncongested(fig, p)
    if _walk_used(fig, p, algo.collective, algo.name, size_bytes):
        return None if calm else WALK_TIES
    if _hw_stepped(fig, p, algo.collective, algo.name, size_bytes) and not calm:
        return HW_STEPS_APART if key == ("allreduce", "cxl_pool_large") else HW_TIES
    if key in (("barrier", "cxl_pool"), ("allreduce", "cxl_pool")):
        return None if calm else ("the pool allgather's exact form; the flags' places in the pool differ from "
                                  "the allgather's: within 1% of the DES as measured at 15-64 hosts (0.7% at 33 "
                                  "hosts, 4 KiB)")
    if not calm:
        return APPROXIMATE
    if key in (("reduce_scatter", "cxl_pool"), ("alltoall", "cxl_pool")):
        block = block_bytes(size_bytes, p) if algo.collective == "reduce_scatter" else size_bytes
        if len({lines_of(r * block, block) for r in range(p)}) > 1:
            return ("within 0.5%: columns span different line counts, and the DES's order of equal times "
                    "decides which rank polls last (the form takes every rank as the last)")
        return None
    if key == ("allreduce", "cxl_pool_large"):
        if size_bytes % (LINE * p):
            return ("within 0.3%: shares of unequal size, and the DES's order of equal times decides which "
                    "rank polls last (as measured at 2-10 hosts; exact when the size is a multiple of 64 x P bytes)")
        return None
    return None


def select_pool(collective: str, fig, p: int, size_bytes: int, large_bytes: int | None = None) -> tuple[str, str | None]:
    """The pool algorithm 'auto' runs for `collective` (and why), by size as the emulator picks.

    allreduce: given `large_bytes` (the emulator's threshold, as a calibration profile keeps it in
    ``emulator.allreduce_large_bytes``), cxl_pool_large from that size on, as `PoolComm.allreduce`
    does; without it, the cheaper of cxl_pool (small) and cxl_pool_large by their closed forms on
    this pool, which is also one threshold in size (tests/test_sim_pool_collectives.py holds that
    the choice changes once over 4 B-4 MiB). Every other collective has one copy-mode pool
    algorithm, cxl_pool (zero-copy is the caller's choice of API, as in the emulator)."""
    if collective != "allreduce":
        return "cxl_pool", None
    if large_bytes is not None:
        if size_bytes >= large_bytes:
            return "cxl_pool_large", f"auto: the emulator's threshold, cxl_pool_large from {large_bytes} B"
        return "cxl_pool", None
    small, large = allreduce_small_cost(fig, p, size_bytes), allreduce_large_cost(fig, p, size_bytes)
    if large < small:
        return "cxl_pool_large", "auto: cxl_pool_large's closed form is below cxl_pool's at this size"
    return "cxl_pool", None


def barrier_cost(fig, p: int, size_bytes: int = 0, ctx=None) -> float:
    """The pool barrier: the allgather of zero-byte blocks, without its last mfence in flush mode."""
    if _hw_stepped(fig, p, "barrier", "cxl_pool", 0):
        return hw_steps_cost(fig, p, "barrier", "cxl_pool", 0)
    walked = _walked(fig, p, "barrier", "cxl_pool", 0)
    return _algebraic_barrier(fig, p) if walked is None else walked


def _algebraic_barrier(fig, p: int) -> float:
    return max(_barrier_ends(fig, p))


def _barrier_ends(fig, p: int, starts=None, poll_delay: float = 0.0) -> list:
    """When each rank ends the barrier's form (index = rank), rank r reaching its sfence at starts[r]
    (default 0) and polling `poll_delay` ns after its flag store, ns."""
    ends = pool_rank_ends(geometry_from_figures(fig, p), 0, fig.coherence, starts=starts, poll_delay=poll_delay)
    return [t - fig.fence_ns for t in ends] if flush_mode(fig) else list(ends)


def allreduce_small_cost(fig, p: int, s: int, ctx=None) -> float:
    """The small pool allreduce: the allgather of s-byte blocks with each rank loading the P - 1 other slots
    (its own vector comes from its input), then the fold of P vectors."""
    if _hw_stepped(fig, p, "allreduce", "cxl_pool", s):
        return hw_steps_cost(fig, p, "allreduce", "cxl_pool", s)
    walked = _walked(fig, p, "allreduce", "cxl_pool", s)
    if walked is not None:
        return walked
    return cxl_pool_closed_form(fig, p, s, fig.coherence, own_read=False) + (p - 1) * s / fig.reduce_bw_bytes_per_ns


def row_step_cost(fig, p: int, block: int, fold_bytes: int, zero_copy: bool = False, copy_own: bool = False) -> float:
    """Every rank writes its row of P blocks of `block` bytes but its own (zero-copy: its whole row, placed,
    is written back), publishes, copies its own block locally (`copy_own`) and waits; rank r then reads
    block r of every other row (zero-copy: acquires it only) and folds `fold_bytes`; ns (uncongested)."""
    row = p * block
    if zero_copy:
        starts = [store_shift_ns(fig, [(0, row)], lines_of(0, row), zero_copy=True)] * p
    else:
        starts = [row_store_shift_ns(fig, row, (r * block, (r + 1) * block)) for r in range(p)]
    delay = block / fig.copy_bw_bytes_per_ns if copy_own else 0.0
    ends = _barrier_ends(fig, p, starts, delay)
    return max(ends[r] + reads_ns(fig, 0, [lines_of(r * block, block)] * (p - 1), not zero_copy)
               for r in range(p)) + fold_bytes / fig.reduce_bw_bytes_per_ns


def reduce_scatter_cost(fig, p: int, s: int, ctx=None) -> float:
    """The pool reduce_scatter (block) of an s-byte vector: rows of P blocks of ceil(s/P) B, column fold."""
    walked = _walked(fig, p, "reduce_scatter", "cxl_pool", s)
    if walked is not None:
        return walked
    if _hw_stepped(fig, p, "reduce_scatter", "cxl_pool", s):
        return hw_steps_cost(fig, p, "reduce_scatter", "cxl_pool", s)
    seg = block_bytes(s, p)
    return row_step_cost(fig, p, seg, (p - 1) * seg)


def alltoall_cost(fig, p: int, m: int, ctx=None) -> float:
    """The pool alltoall of m bytes per destination: rows of P x m bytes, column reads."""
    walked = _walked(fig, p, "alltoall", "cxl_pool", m)
    if walked is not None:
        return walked
    if _hw_stepped(fig, p, "alltoall", "cxl_pool", m):
        return hw_steps_cost(fig, p, "alltoall", "cxl_pool", m)
    return row_step_cost(fig, p, m, 0, copy_own=True)


def alltoall_zero_copy_cost(fig, p: int, m: int, ctx=None) -> float:
    """The zero-copy pool alltoall: hw, the barrier (the rows are in the writers' caches and nobody loads
    them within the call); flush, the row step with the rows' write-back by the publish's clflushopt and the
    column's clflushopt, no loads."""
    walked = _walked(fig, p, "alltoall", "cxl_pool_zero_copy", m)
    if walked is not None:
        return walked
    return row_step_cost(fig, p, m, 0, zero_copy=True) if flush_mode(fig) else barrier_cost(fig, p)


WALK_CHUNKS = 20_000
"""Most chunk transfers a flush-mode walk takes on (about 1 s); above it the algebraic form stands, with its note."""


def _walk_used(fig, p: int, collective: str, name: str, size: int) -> bool:
    """Whether a step collective's flush-mode form is its walk: where the algebraic one is not exact (a
    congested pool; the large allreduce, whose one-by-one share loads can reach a device together with
    another rank's, a tie the algebraic form leaves out: 9 ns of 18.1 us at P = 2, 32 KiB, where a share's
    last partial chunk queues behind the other rank's; one rank, whose barrier ends before its flag's
    write-back is acknowledged, which the algebraic form waits for) and the walk is affordable (`WALK_CHUNKS`)."""
    if not flush_mode(fig) or collective == "broadcast":
        return False
    if uncongested(fig, p) and p > 1 and (collective, name) != ("allreduce", "cxl_pool_large"):
        return False
    return _chunks(fig, p, collective, name, size) <= WALK_CHUNKS


def _walked(fig, p: int, collective: str, name: str, size: int):
    """The walk's latency (ns) where `_walk_used`, else None."""
    if not _walk_used(fig, p, collective, name, size):
        return None
    slot_bytes, steps_of = flush_steps(collective, name, p, size)
    return walk_steps(fig, p, slot_bytes, steps_of)


def allreduce_large_cost(fig, p: int, s: int, ctx=None) -> float:
    """The large pool allreduce, ns: the input step (each rank reads and folds its share of every vector), then
    the allgather of the shares on fresh flag lines: in hw mode the allgather form of zero-byte blocks with each
    rank starting when its folded share is written (`pool_forms` starts), in flush mode from the slowest rank's;
    then every rank loads every share (hw together, flush one after another, each other rank's dropped and
    fenced first). Flush mode: its walk where affordable (`WALK_CHUNKS`). One rank runs the small allreduce,
    as the kernel."""
    if p == 1:
        return allreduce_small_cost(fig, p, s)
    if _hw_stepped(fig, p, "allreduce", "cxl_pool_large", s):
        return hw_steps_cost(fig, p, "allreduce", "cxl_pool_large", s)
    walked = _walked(fig, p, "allreduce", "cxl_pool_large", s)
    if walked is not None:
        return walked
    shares = [share_bytes(s, p, r) for r in range(p)]
    first = _barrier_ends(fig, p, [row_store_shift_ns(fig, s, share) for share in shares])
    ready = [t + reads_ns(fig, 0, [lines_of(lo, hi - lo)] * (p - 1)) + (p - 1) * (hi - lo) / fig.reduce_bw_bytes_per_ns
             + store_shift_ns(fig, [(lo, hi - lo)], lines_of(lo, hi - lo)) for t, (lo, hi) in zip(first, shares)]
    lines = [lines_of(lo, hi - lo) for lo, hi in shares]
    if flush_mode(fig):  # the shares one after another, each other rank's dropped and fenced first
        own = [fig.load_ns + issue_ns(fig, n) if n else 0.0 for n in lines]
        gather = max(sum(own[w] if w == r else reads_ns(fig, 0, [n]) for w, n in enumerate(lines)) for r in range(p))
        return max(ready) + barrier_cost(fig, p) + gather
    gather = max(reads_ns(fig, lines[r], lines[:r] + lines[r + 1:]) for r in range(p))
    # hw: the shares' step is a barrier whose ranks start at their own times (their sfence at ready + fence)
    return cxl_pool_closed_form(fig, p, 0, fig.coherence, starts=ready) + gather


def _chunks(fig, p: int, collective: str, name: str, s: int) -> int:
    """Chunk transfers of a step collective's stores and loads (`flush_steps`), one more per access."""
    slot_bytes, steps_of = flush_steps(collective, name, p, s)
    layout = pc.StepLayout(p, slot_bytes)
    chunk = fig.chunk_bytes
    return sum(-(-n // chunk) + 1 for r in range(p) for step in steps_of(r, layout)
               for _, n in step.stored() + list(step.reads) if n)


def _hw_stepped(fig, p: int, collective: str, name: str, s: int) -> bool:
    """Whether an hw step collective's form is `hw_steps_cost`: on a congested pool, where affordable
    (`HW_CHUNKS`)."""
    if flush_mode(fig) or collective == "broadcast" or uncongested(fig, p):
        return False  # uncongested, the algebraic forms are exact (and cheaper)
    return _chunks(fig, p, collective, name, s) + p * p <= HW_CHUNKS  # and the P(P-1) polls


def hw_steps_cost(fig, p: int, collective: str, name: str, s: int) -> float:
    """hw mode: a step collective's latency, ns, its steps (`flush_steps`) one after the other, each by
    `pool_hw_steps.hw_step_ends` (the allgather's fixed point with the step's own writes, flags, loads and local
    copy): rank r starts step k + 1 when it ends step k and its fold. Exact on one switch and on trees up to
    the order of equal times; the large allreduce's two steps are solved apart, so where its ranks' steps
    overlap in time on a congested pool, the queueing between them is left out (`form_note`)."""
    slot_bytes, steps_of = flush_steps(collective, name, p, s)
    layout = pc.StepLayout(p, slot_bytes)
    programs = [steps_of(r, layout) for r in range(p)]
    geo = geometry_from_figures(fig, p)
    starts = [0.0] * p
    for k in range(len(programs[0])):
        steps = [program[k] for program in programs]
        ends = hw_step_ends(geo, [layout.flag(r, k + 1) for r in range(p)],
                            [[] if step.zero_copy else step.stored() for step in steps], [step.reads for step in steps],
                            starts, steps[0].copy_bytes / fig.copy_bw_bytes_per_ns)
        starts = [t + step.fold_bytes / fig.reduce_bw_bytes_per_ns for t, step in zip(ends, steps)]
    return max(starts)


def flush_steps(collective: str, name: str, p: int, s: int):
    """(slot bytes, steps_of) of a step collective's flush-mode programs (`pool_flush_programs.walk_steps`)."""
    others = lambda r: [w for w in range(p) if w != r]  # noqa: E731
    if collective == "barrier":
        return 0, lambda r, lay: [Step(wait=others(r))]
    if collective == "allreduce" and name == "cxl_pool":
        def small(r, lay):
            theirs = [(lay.slot(1, w), s) for w in others(r)]
            return [Step(write=(lay.slot(1, r), s), wait=others(r), acquire=theirs, reads=theirs,
                         fold_bytes=(p - 1) * s)]
        return s, small
    if collective == "allreduce":
        shares = [share_bytes(s, p, w) for w in range(p)]

        def large(r, lay):
            lo, n = shares[r][0], shares[r][1] - shares[r][0]
            mine = [(lay.slot(1, w) + lo, n) for w in others(r)]
            theirs = [(lay.slot(2, w) + a, b - a) for w, (a, b) in enumerate(shares)]
            return [Step(write=(lay.slot(1, r), s), keep=(lay.slot(1, r) + lo, n), wait=others(r), acquire=mine,
                         reads=mine, fold_bytes=(p - 1) * n),
                    Step(write=(lay.slot(2, r) + lo, n), wait=others(r), acquire=[theirs[w] for w in others(r)],
                         reads=theirs, one_by_one=True)]
        return s, large
    block = block_bytes(s, p) if collective == "reduce_scatter" else s
    fold = (p - 1) * block if collective == "reduce_scatter" else 0
    zero_copy = name == "cxl_pool_zero_copy"

    def row(r, lay):
        column = [(lay.slot(1, w) + r * block, block) for w in others(r)]
        keep = None if zero_copy else (lay.slot(1, r) + r * block, block)
        copy = block if collective == "alltoall" and not zero_copy else 0
        return [Step(write=(lay.slot(1, r), p * block), keep=keep, zero_copy=zero_copy, copy_bytes=copy,
                     wait=others(r), acquire=column, reads=() if zero_copy else column, fold_bytes=fold)]
    return p * block, row


def _at_once(cost):
    """`cost` of a record whose kernel returns at once on a zero-byte call (`pool_collectives.returns_at_once`):
    0 ns there."""
    @functools.wraps(cost)
    def form(fig, p: int, size_bytes: int, ctx=None) -> float:
        return 0.0 if size_bytes == 0 else cost(fig, p, size_bytes, ctx)
    return form


def _record(collective, name, program, cost, source):
    """A pool record whose kernel returns at once on a zero-byte call (every one but the barrier's)."""
    return Algorithm(collective, name, pc.returns_at_once(program), _at_once(cost), transport=POOL, source=source)


_SOURCE = "cxlsim emulator cxl_coll.h"
ALLREDUCE_SMALL = _record("allreduce", "cxl_pool", pc.allreduce_small, allreduce_small_cost,
                          f"{_SOURCE} cxl_coll_allreduce, small (every rank folds every block)")
ALLREDUCE_LARGE = _record("allreduce", "cxl_pool_large", pc.allreduce_large, allreduce_large_cost,
                          f"{_SOURCE} cxl_coll_allreduce, large (reduce-scatter, then allgather of shares)")
REDUCE_SCATTER = _record("reduce_scatter", "cxl_pool", pc.reduce_scatter, reduce_scatter_cost,
                         f"{_SOURCE} cxl_coll_reduce_scatter_block")
BROADCAST = _record("broadcast", "cxl_pool", pc.broadcast, broadcast_cost, f"{_SOURCE} cxl_coll_broadcast")
ALLTOALL = _record("alltoall", "cxl_pool", pc.alltoall, alltoall_cost, f"{_SOURCE} cxl_coll_alltoall")
BARRIER = Algorithm("barrier", "cxl_pool", pc.barrier, barrier_cost, transport=POOL,
                    source=f"{_SOURCE} cxl_coll_barrier")
BROADCAST_ZERO_COPY = _record("broadcast", "cxl_pool_zero_copy", pc.broadcast_zero_copy, broadcast_zero_copy_cost,
                              f"{_SOURCE} cxl_coll_broadcast_view (zero-copy)")
ALLTOALL_ZERO_COPY = _record("alltoall", "cxl_pool_zero_copy", pc.alltoall_zero_copy, alltoall_zero_copy_cost,
                             f"{_SOURCE} cxl_coll_alltoall_view (zero-copy)")
RECORDS = (ALLREDUCE_SMALL, ALLREDUCE_LARGE, REDUCE_SCATTER, BROADCAST, ALLTOALL, BARRIER, BROADCAST_ZERO_COPY,
           ALLTOALL_ZERO_COPY)
"""The pool collectives' records, in the registry's BUILTIN."""
_FORMS = {(a.collective, a.name) for a in RECORDS}
