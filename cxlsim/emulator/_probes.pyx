# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Calibration probes: loops that time the pool's own steps with every rank taking part.

A pool allgather's cost is not the sum of what one process measures alone: a flag hop
needs a second core to answer, and a copy into lines another core has just read must take
them back from it. These probes run those steps on a rank kernel's pool with the GIL
released for the whole loop, on every rank at once, and return ns: `flag_pingpong` (two
flag hops of the allgather's protocol), `concurrent_copy` (each phase of a data round
with every rank copying at once) and `pattern_copy` (the same for one collective's own
pattern of copies). Every rank must call a probe in step with the others (the same
iterations and rounds); it moves the kernel's epoch (and data round) on as the calls it
stands for would.
`cxlsim.calibrate` fits its model to what they measure; the one-process primitives
(`line_op_ns`, `memcpy_ns`, `clock_read_ns`) are in `_kernels`.
"""
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy

from cxlsim.emulator.cxl_ops cimport *
from cxlsim.emulator.cxl_coll cimport cxl_coll_barrier, cxl_coll_flag_pingpong, cxl_coll_settle, cxl_coll_written
from cxlsim.emulator._pool_kernel cimport PoolKernel

cdef extern from "cxl_ops.h" nogil:
    void cxl_copy_in(const cxl_pool_t *p, char *dst, const char *src, uint64_t n)  # the kernels' copy-in
    void cxl_copy_in_keep(const cxl_pool_t *p, char *slot, char *own, const char *src, uint64_t n)  # and to own

cdef extern from "cxl_reduce.h" nogil:
    enum:
        CXL_F32
        CXL_SUM
    void cxl_fold(int dtype, int op, char *out, const char **blocks, int nblocks, uint64_t count)  # the kernels' fold

FOLD = "fold"
FOLD_NEXT = "fold-next"
"""A `pattern_copy` step's read mode: its in-place reads are folded (float32 sum, the kernels' `cxl_fold`) into a
private output, as a fold step of the small allreduce loads its blocks and stores the result into recv."""

import numpy as np

from cxlsim.errors import InputError


def flag_pingpong(PoolKernel kernel, uint64_t iterations):
    """Bounce `kernel`'s pool flags between ranks 0 and 1 (np = 2) `iterations` times; mean ns per round trip.

    Calibration primitive, GIL released for the whole loop: rank 0 publishes an epoch
    (cxl_publish with 0 bytes: sfence, flag store, and in flush mode the flag line's
    write-back) and waits for rank 1's flag (cxl_wait_all: in flush mode invalidate, mfence,
    load per poll); rank 1 waits for rank 0's, then publishes its own. So one round trip is
    two flag hops of the allgather's protocol, in this pool's coherence mode, with no
    emulated timing. Both ranks must call it with the same count; the epoch moves on by it.
    """
    cdef double ns
    kernel.check_open()
    if kernel.coll.pool.nranks != 2:
        raise InputError(f"flag_pingpong: needs exactly 2 ranks, the pool has {kernel.coll.pool.nranks}")
    if iterations < 1:
        raise InputError(f"flag_pingpong: iterations: expected >= 1, got {iterations}")
    with nogil:
        ns = cxl_coll_flag_pingpong(&kernel.coll, iterations)  # the library's own probe (cxl_coll.h)
    if ns < 0:
        kernel.raise_timeout("flag_pingpong")
    return ns

def flag_exchange(PoolKernel kernel, uint64_t iterations, double gap_ns=0.0):
    """Every rank publishes an epoch and waits for every other rank's, `iterations` times (cxl_coll_barrier:
    the kernels' step without data); mean ns per exchange.

    Calibration primitive, GIL released for the whole loop. Where `flag_pingpong` moves one flag at a
    time (one rank publishes, the other waits, then the other way), here every rank publishes and polls
    at once, as in every symmetric step of the collectives (barrier, alltoall, reduce_scatter, allreduce):
    each core's flag store must take its line back from a core that is polling it, while that core's
    own store does the same. Between exchanges each rank spins `gap_ns` on the clock (the software a
    caller runs between two calls). Every rank must call it with the same count; the epoch moves on by it.
    """
    cdef double t0, t1, until
    cdef uint64_t i
    cdef int rc = 0
    kernel.check_open()
    if iterations < 1:
        raise InputError(f"flag_exchange: iterations: expected >= 1, got {iterations}")
    with nogil:
        t0 = cxl_now_ns()
        for i in range(iterations):
            rc = cxl_coll_barrier(&kernel.coll)
            if rc != 0:
                break
            if gap_ns > 0:
                until = cxl_now_ns() + gap_ns
                while cxl_now_ns() < until:
                    pass
        t1 = cxl_now_ns()
    if rc != 0:
        kernel.raise_timeout("flag_exchange")
    return (t1 - t0) / iterations


def concurrent_copy(PoolKernel kernel, uint64_t nbytes, uint64_t iterations, bint read=False):
    """Calibration primitive: every rank copies at once, as in a pool allgather; ns per phase.

    Physical reasoning. Measured one process at a time, a copy sees only its own core's
    caches. In the allgather both ranks copy at the same moment: each first writes its
    block into its slot (lines the other core read two data rounds ago, so every store
    must take them back from it), then copies out every block of the round, its own (in
    its cache, just written) and the other's (just written by the other core: in hw mode
    held modified in that core's cache and pulled across, in flush mode written back and
    then invalidated here, so read from memory), while the other core does the same to
    its lines. Neither a lone memcpy nor a copy of the other's block with an idle
    writer sees that cross-core traffic in both directions at once.

    It is `pattern_copy` with the allgather's one step: every rank writes its whole block
    (offset 0, `nbytes`), then copies out the other ranks' blocks and its own from its send
    buffer (the copy-mode kernel takes its own from send to recv too, but in the copy-in's pass,
    cxl_ops.h's cxl_copy_in_keep: the allgather's pattern, `patterns.kernel_steps`, does that), or with
    read=True reads every rank's block in place (zero-copy). Returns an (iterations, 4) float64 array of (in, out, writeback, invalidate) ns; every
    rank must call it with the same arguments.
    """
    if nbytes > kernel.slot_bytes:
        raise InputError(f"concurrent_copy: {nbytes} bytes per rank but pool slots hold {kernel.slot_bytes}")
    P, me = kernel.coll.pool.nranks, kernel.coll.pool.rank
    reads = [(r, 0, nbytes) for r in range(P)] if read else [(-1 if r == me else r, 0, nbytes) for r in range(P)]
    step = ([(0, nbytes)], reads, read)
    return pattern_copy(kernel, [step], iterations)[:, 0, :4]


def pattern_copy(PoolKernel kernel, steps, uint64_t iterations):
    """Calibration primitive: the data movement of one pool kernel's call, every rank at once; ns per phase.

    A collective's kernel moves its own pattern of bytes: a broadcast root writes its block and
    only the reader copies it out; an alltoall or reduce_scatter rank writes the block the other
    reads and reads one block of the other's row; the large allreduce takes two steps, one per
    buffer. What the copies cost depends on who copies what at the same moment (lines taken from
    the other core, in one direction or both) and on how much of the caches the call touches,
    so each collective's primitive is its own pattern, on this kernel's pool, GIL released.

    steps: one (writes, reads, read) per step of the call. writes: this rank's copy-ins,
    (offset, nbytes) ranges of its slot, filled from a private buffer with the kernels' copy-in
    (`cxl_copy_in`: non-temporal stores from the pool's nt_min_bytes), or (offset, nbytes, True) with
    the copy-mode allgather's copy-in (`cxl_copy_in_keep`: the same range also into a private output
    in the same pass, 16 KiB at a time, as the kernel takes its own block from send to recv). reads: (rank, offset,
    nbytes) ranges copied into a private buffer, or with read=True loaded in place (a fold's
    loads), or with read=FOLD ('fold') folded in place into a private output by the kernels' own fold
    (`cxl_fold`, float32 sum: its loads, arithmetic and the output's stores, which take lines of the
    caches as the call's recv does), or with read=FOLD_NEXT ('fold-next') folded the same way into this
    rank's slot of the next data round at the first read's offset (the large allreduce's fold of its
    share, which stores into the pool lines the other rank read in the last call; in flush mode written
    back in the next step's write-back phase, as the kernel writes it back before its flag); rank -1 is
    this rank's private source buffer (a block the kernel takes from send).
    A step that moves bytes on this rank takes the next data round (buffers alternate, as the
    kernels' steps do), so every rank must move bytes in the same steps.

    Per step, on all ranks: a flag publish and wait (the bench's barrier between calls, or the
    step's own start); phase 'in': the writes and an mfence, timed; phase 'writeback' (flush
    mode; 0 in hw): the write-back op over the written ranges and an mfence, timed; the publish
    (flag store) and wait, untimed; phase 'invalidate' (flush mode; 0 in hw): the invalidation
    of the other ranks' read ranges and an mfence, timed; phase 'out': the reads, timed. Each
    phase's time has the clock's own cost (the best of 64 empty intervals; for 'in' and
    'writeback' the best of 64 bare mfences) taken off, floored at 0. Returns an (iterations,
    steps, 5) float64 array of (in, out, writeback, invalidate, issue) ns, 'issue' being the writes
    until their last store has issued, before the mfence (what the writer itself waits for: its
    stores' line transfers drain from the store buffer behind it, and only a reader of the flag behind
    them waits for those). Every rank must call it with as many steps and iterations; the epoch moves
    on by 2 x steps x iterations.
    """
    cdef int missing = -1
    cdef uint64_t i, j, k, e, rnd, sink = 0, src_bytes = 1, dst_bytes = 1, at, nsteps = len(steps)
    cdef double t0, t1, t2, t3, t4, t5, t6, clock = 1e30, fenced = 1e30
    cdef char *src
    cdef char *dst
    cdef char *own
    cdef char *slot
    cdef char *from_
    cdef char *fold_out = NULL
    cdef const char *folded[8]
    cdef int nfold = 0
    cdef uint64_t fold_bytes = 0, next_bytes = 0
    cdef int P = kernel.coll.pool.nranks, me = kernel.coll.pool.rank
    kernel.check_open()
    if iterations < 1:
        raise InputError(f"pattern_copy: iterations: expected >= 1, got {iterations}")
    if nsteps < 1:
        raise InputError("pattern_copy: steps: expected at least one (writes, reads, read) step")
    rows_w, rows_r = [], []  # (step, offset, nbytes, keep), (step, rank, offset, nbytes, read)
    for j, (writes, reads, read) in enumerate(steps):
        for write in writes:
            if len(write) not in (2, 3):
                raise InputError(f"pattern_copy: a write is (offset, nbytes) or (offset, nbytes, keep), got {write}")
            o, n = write[0], write[1]
            if o < 0 or n < 0 or o + n > kernel.slot_bytes:
                raise InputError(f"pattern_copy: write [{o}, {o + n}) outside the pool's {kernel.slot_bytes}-byte slot")
            rows_w.append((j, o, n, bool(write[2]) if len(write) == 3 else False))
            src_bytes = max(src_bytes, o + n)
        if read in (FOLD, FOLD_NEXT) and (not reads or len(reads) > 8 or len({n for _, _, n in reads}) > 1 or reads[0][2] % 4):
            raise InputError(f"pattern_copy: a fold step folds 1-8 reads of one size in whole float32s, got {reads}")
        if read == FOLD_NEXT and reads[0][1] + reads[0][2] > kernel.slot_bytes:
            raise InputError(f"pattern_copy: a fold into the next slot at [{reads[0][1]}, {reads[0][1] + reads[0][2]}) "
                             f"is outside the pool's {kernel.slot_bytes}-byte slot")
        for r, o, n in reads:
            if not -1 <= r < P or o < 0 or n < 0 or (r >= 0 and o + n > kernel.slot_bytes):
                raise InputError(f"pattern_copy: read (rank {r}, [{o}, {o + n})) outside the {P} ranks' "
                                 f"{kernel.slot_bytes}-byte slots (rank -1: this rank's own buffer)")
            rows_r.append((j, r, o, n, 2 if read == FOLD else 3 if read == FOLD_NEXT else bool(read)))
            src_bytes = max(src_bytes, o + n if r < 0 else 1)
            dst_bytes += n
    w = np.array(rows_w, np.int64).reshape(-1, 4)
    rd = np.array(rows_r, np.int64).reshape(-1, 5)
    moves = np.zeros(nsteps, np.int64)
    for j, o, n, _ in rows_w:
        moves[j] += n
    for j, r, o, n, _ in rows_r:
        moves[j] += n
    cdef int64_t[:, ::1] wv = w
    cdef int64_t[:, ::1] rv = rd
    cdef int64_t[::1] mv = moves
    cdef uint64_t nw = w.shape[0], nr = rd.shape[0]
    out = np.zeros((iterations, nsteps, 5), np.float64)
    cdef double[:, :, ::1] times = out
    send = np.full(src_bytes, (me + 1) & 255, np.uint8)
    recv = np.zeros(dst_bytes, np.uint8)
    kept = np.zeros(src_bytes, np.uint8)
    cdef unsigned char[::1] sv = send
    cdef unsigned char[::1] dv = recv
    cdef unsigned char[::1] kv = kept
    src = <char *>&sv[0]
    dst = <char *>&dv[0]
    own = <char *>&kv[0]
    e = kernel.coll.epoch
    rnd = kernel.coll.round
    with nogil:
        cxl_coll_settle(&kernel.coll)  # a zero-copy broadcast's acknowledgement first (cxl_coll.h)
        for i in range(64):
            t0 = cxl_now_ns()
            t1 = cxl_now_ns()
            if t1 - t0 < clock:
                clock = t1 - t0
            t0 = cxl_now_ns()
            cxl_mfence()
            t1 = cxl_now_ns()
            if t1 - t0 < fenced:
                fenced = t1 - t0
        for i in range(iterations):
            for j in range(nsteps):
                e += 1
                cxl_publish(&kernel.coll.pool, cxl_coll_written(e), rnd, 0)
                missing = cxl_wait_all(&kernel.coll.pool, cxl_coll_written(e), kernel.coll.timeout_ns)
                if missing >= 0:
                    break
                rnd += mv[j] > 0
                slot = cxl_slot(&kernel.coll.pool, rnd, me)
                t0 = cxl_now_ns()
                for k in range(nw):
                    if wv[k, 0] == j and wv[k, 2] and wv[k, 3]:
                        cxl_copy_in_keep(&kernel.coll.pool, slot + wv[k, 1], own + wv[k, 1], src + wv[k, 1],
                                         <uint64_t>wv[k, 2])
                    elif wv[k, 0] == j and wv[k, 2]:
                        cxl_copy_in(&kernel.coll.pool, slot + wv[k, 1], src + wv[k, 1], <uint64_t>wv[k, 2])
                t6 = cxl_now_ns()
                cxl_mfence()
                t1 = cxl_now_ns()
                if kernel.coll.pool.flush_mode:
                    for k in range(nw):
                        if wv[k, 0] == j:
                            cxl_range_op(&kernel.coll.pool, kernel.coll.pool.writeback_op, slot + wv[k, 1],
                                         <uint64_t>wv[k, 2])
                    if next_bytes:  # the previous step's fold into this round's slot
                        cxl_range_op(&kernel.coll.pool, kernel.coll.pool.writeback_op, fold_out, next_bytes)
                    cxl_mfence()
                next_bytes = 0
                t4 = cxl_now_ns()
                e += 1
                cxl_publish(&kernel.coll.pool, cxl_coll_written(e), rnd, 0)  # the ranges are written back already
                missing = cxl_wait_all(&kernel.coll.pool, cxl_coll_written(e), kernel.coll.timeout_ns)
                if missing >= 0:
                    break
                t5 = cxl_now_ns()
                if kernel.coll.pool.flush_mode:
                    for k in range(nr):
                        if rv[k, 0] == j and rv[k, 1] >= 0 and rv[k, 1] != me:
                            cxl_range_op(&kernel.coll.pool, kernel.coll.pool.invalidate_op,
                                         cxl_slot(&kernel.coll.pool, rnd, <int>rv[k, 1]) + rv[k, 2], <uint64_t>rv[k, 3])
                    cxl_mfence()
                t2 = cxl_now_ns()
                at = 0
                nfold = 0
                for k in range(nr):
                    if rv[k, 0] != j or rv[k, 3] == 0:
                        continue
                    from_ = src + rv[k, 2] if rv[k, 1] < 0 else cxl_slot(&kernel.coll.pool, rnd, <int>rv[k, 1]) + rv[k, 2]
                    if rv[k, 4] >= 2:
                        if nfold == 0:
                            fold_out = dst if rv[k, 4] == 2 else cxl_slot(&kernel.coll.pool, rnd + 1, me) + rv[k, 2]
                        folded[nfold] = from_
                        nfold += 1
                        fold_bytes = <uint64_t>rv[k, 3]
                    elif rv[k, 4]:
                        sink += cxl_read_pass(from_, <uint64_t>rv[k, 3])
                    else:
                        memcpy(dst + at, from_, <uint64_t>rv[k, 3])
                    at += <uint64_t>rv[k, 3]
                if nfold:
                    cxl_fold(CXL_F32, CXL_SUM, fold_out, folded, nfold, fold_bytes // 4)
                    if fold_out != dst:
                        next_bytes = fold_bytes
                t3 = cxl_now_ns()
                times[i, j, 0] = t1 - t0 - fenced if t1 - t0 > fenced else 0.0
                times[i, j, 1] = t3 - t2 - clock if t3 - t2 > clock else 0.0
                times[i, j, 4] = t6 - t0 - clock if t6 - t0 > clock else 0.0
                if kernel.coll.pool.flush_mode:
                    times[i, j, 2] = t4 - t1 - fenced if t4 - t1 > fenced else 0.0
                    times[i, j, 3] = t2 - t5 - clock if t2 - t5 > clock else 0.0
            if missing >= 0:
                break
    kernel.coll.epoch = e
    kernel.coll.round = rnd
    if missing < 0:  # every step waited for all; the last round's buffer is read in step e
        kernel.coll.known_done = e - 1
        kernel.coll.buffer_epoch[rnd & 1] = e
    if missing >= 0:
        kernel.raise_timeout()
    if sink == 1:  # keeps the loads; never true in practice
        out[0, 0, 1] += 0.0
    return out
