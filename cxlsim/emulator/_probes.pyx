# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Calibration probes: loops that time the pool's own steps with every rank taking part.

A pool allgather's cost is not the sum of what one process measures alone: a flag hop
needs a second core to answer, and a copy into lines another core has just read must take
them back from it. These probes run those steps on a rank kernel's pool with the GIL
released for the whole loop, on every rank at once, and return ns: `flag_pingpong` (two
flag hops of the allgather's protocol) and `concurrent_copy` (each phase of a data round
with every rank copying at once). Every rank must call a probe with the same arguments;
it moves the kernel's epoch (and data round) on as the calls it stands for would.
`cxlsim.calibrate` fits its model to what they measure; the one-process primitives
(`line_op_ns`, `memcpy_ns`, `clock_read_ns`) are in `_kernels`.
"""
from libc.stdint cimport uint64_t
from libc.string cimport memcpy

from cxlsim.emulator.cxl_ops cimport *
from cxlsim.emulator.cxl_coll cimport cxl_coll_flag_pingpong, cxl_coll_settle, cxl_coll_written
from cxlsim.emulator._pool_kernel cimport PoolKernel

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

    Per iteration, on all ranks: a barrier (flag publish and wait, as the bench's barrier
    between calls), the data round moves on (so buffers alternate as the allgather's do),
    phase 'in': memcpy of `nbytes` from a private buffer into this rank's slot and an
    mfence, timed (the stores must have left the store buffer, each line taken from the
    other core's cache, before the flag store behind them can be seen: without the
    fence that cost would land in the untimed wait);
    phase 'writeback' (flush mode; 0 in hw mode): the write-back op over the slot and an
    mfence, timed (the publish's; its sfence returns at once, but the flag behind it
    is seen only once the write-backs are acknowledged, which the mfence waits for);
    then the publish (flag
    store) and wait, untimed (the flag round trip is its own primitive); phase
    'invalidate' (flush mode; 0 in hw mode): the acquire's invalidation of the others'
    slots and its mfence, timed; phase 'out': memcpy of every rank's slot into a private
    (np x nbytes) buffer, or with read=True a read_pass of every slot in place (the
    zero-copy application's loads), timed. The allgather itself is never called, and
    the flag waits are in no phase. Each phase's time has the clock's own cost (the best
    of 64 empty intervals; for 'in' and 'writeback' the best of 64 bare mfences) taken
    off, floored at 0. Returns an (iterations, 4) float64
    array of (in, out, writeback, invalidate) ns. Every rank must call it with the same
    arguments; the epoch moves on by 2 x iterations.
    """
    cdef int missing = -1
    cdef uint64_t i, e, rnd, sink = 0
    cdef int r
    cdef double t0, t1, t2, t3, t4, t5, clock = 1e30, fenced = 1e30
    cdef char *src
    cdef char *dst
    kernel.check_open()
    if nbytes > kernel.slot_bytes:
        raise InputError(f"concurrent_copy: {nbytes} bytes per rank but pool slots hold {kernel.slot_bytes}")
    if iterations < 1:
        raise InputError(f"concurrent_copy: iterations: expected >= 1, got {iterations}")
    out = np.zeros((iterations, 4), np.float64)
    cdef double[:, ::1] times = out
    send = np.full(max(nbytes, 1), (kernel.coll.pool.rank + 1) & 255, np.uint8)
    recv = np.zeros(max(nbytes, 1) * kernel.coll.pool.nranks, np.uint8)
    cdef unsigned char[::1] sv = send
    cdef unsigned char[::1] rv = recv
    src = <char *>&sv[0]
    dst = <char *>&rv[0]
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
            e += 1
            cxl_publish(&kernel.coll.pool, cxl_coll_written(e), rnd, 0)
            missing = cxl_wait_all(&kernel.coll.pool, cxl_coll_written(e), kernel.coll.timeout_ns)
            if missing >= 0:
                break
            rnd += nbytes > 0
            t0 = cxl_now_ns()
            if nbytes:
                memcpy(cxl_slot(&kernel.coll.pool, rnd, kernel.coll.pool.rank), src, nbytes)
            cxl_mfence()
            t1 = cxl_now_ns()
            if kernel.coll.pool.flush_mode:
                cxl_range_op(&kernel.coll.pool, kernel.coll.pool.writeback_op, cxl_slot(&kernel.coll.pool, rnd, kernel.coll.pool.rank), nbytes)
                cxl_mfence()
            t4 = cxl_now_ns()
            e += 1
            cxl_publish(&kernel.coll.pool, cxl_coll_written(e), rnd, 0)  # the slot is written back already
            missing = cxl_wait_all(&kernel.coll.pool, cxl_coll_written(e), kernel.coll.timeout_ns)
            if missing >= 0:
                break
            t5 = cxl_now_ns()
            cxl_acquire_slots(&kernel.coll.pool, rnd, nbytes)
            t2 = cxl_now_ns()
            for r in range(kernel.coll.pool.nranks):
                if read:
                    sink += cxl_read_pass(cxl_slot(&kernel.coll.pool, rnd, r), nbytes)
                elif nbytes:
                    memcpy(dst + <uint64_t>r * nbytes, cxl_slot(&kernel.coll.pool, rnd, r), nbytes)
            t3 = cxl_now_ns()
            times[i, 0] = t1 - t0 - fenced if t1 - t0 > fenced else 0.0
            times[i, 1] = t3 - t2 - clock if t3 - t2 > clock else 0.0
            if kernel.coll.pool.flush_mode:
                times[i, 2] = t4 - t1 - fenced if t4 - t1 > fenced else 0.0
                times[i, 3] = t2 - t5 - clock if t2 - t5 > clock else 0.0
    kernel.coll.epoch = e
    kernel.coll.round = rnd
    if missing < 0 and iterations:  # every step waited for all; the last round's buffer is read in step e
        kernel.coll.known_done = e - 1
        kernel.coll.buffer_epoch[rnd & 1] = e
    if missing >= 0:
        kernel.raise_timeout()
    if read and sink == 1:  # keeps the loads; never true in practice
        out[0, 1] += 0.0
    return out
