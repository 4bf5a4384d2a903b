/* cxl_coll_reduce.h: the pool collectives that fold data (reduce_scatter block, allreduce small, large and split phase),
 * on the step machinery of cxl_coll_core.h (see its comment for steps, chunks and modes). */
#ifndef CXLSIM_CXL_COLL_REDUCE_H
#define CXLSIM_CXL_COLL_REDUCE_H

#include "cxl_coll_core.h"

/* ---- the line-flag allreduce (inline area) ----------------------------------------------
 * An allreduce input of at most cxl_coll_t.inline_bytes (<= CXL_COLL_LINES_MAX; hw mode,
 * untimed, no event log: the MPI library's pools) goes into the rank's own inline area
 * (cxl_pool.h's layout: lines only this protocol writes, after the data buffers), in half
 * round % 2, as lines of 56 payload bytes each followed by the step's epoch in its last 8 bytes.
 * The writer stores each line's payload, then its epoch, then the rank's flag; a reader polls
 * every line's epoch until all show the step and then reads the payloads: x86 keeps stores in
 * order and loads in order, so an epoch seen in a line means that line's payload is visible. The
 * reader's wait brings the data (one transfer per line, the lines in parallel) instead of the
 * slot path's flag and then data (two transfers in series). benchmarks/allreduce_split.py
 * measures both paths and their steps. The flag is still published
 * after the lines, so every other wait of the step protocol (cxl_coll_claim's reuse rule,
 * barriers, timeouts) sees the step as on the slot path; the halves follow the buffers' reuse
 * rule. The fold is the same left fold, so results are bitwise those of the slot path. The
 * area holds only epochs in its epoch words, so an epoch that reached the step's (cxl_epoch_reached) cannot be stale
 * data: within a job the words only grow, and an earlier job's words, which the pool's creator does not clear, lie
 * outside the window of a job whose epochs start from its nonce (cxl_coll_start_epochs).
 * The event log and the cache model describe the slot protocol: a kernel that logs keeps
 * inline_bytes 0 (the Python kernel does). */
#define CXL_COLL_LINE_PAYLOAD 56
#define CXL_COLL_LINES_PER_HALF 10 /* cxl_pool.h's CXL_POOL_INLINE_AREA_BYTES is 2 halves of these lines */
#define CXL_COLL_LINES_MAX (CXL_COLL_LINES_PER_HALF * CXL_COLL_LINE_PAYLOAD) /* 560 B per rank and call */

/* Line k of rank r's inline half for data round `round` (the area follows the two buffers). */
static inline char *cxl_coll_inline_line(cxl_pool_t *p, int r, uint64_t round, uint64_t k)
{
    uint64_t area = p->data_offset + 2 * (uint64_t)p->nranks * p->slot_stride;
    return p->base + area + (((uint64_t)r * 2 + (round & 1)) * CXL_COLL_LINES_PER_HALF + k) * CXL_LINE;
}

static inline volatile uint64_t *cxl_coll_line_epoch(char *line)
{
    return (volatile uint64_t *)(line + CXL_COLL_LINE_PAYLOAD);
}

/* Write n bytes (<= CXL_COLL_LINES_MAX) into this rank's half for `round` and publish written(e). */
static void cxl_coll_lines_publish(cxl_coll_t *c, uint64_t e, uint64_t round, const char *src, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    for (uint64_t k = 0, at = 0; at < n || k == 0; k++, at += CXL_COLL_LINE_PAYLOAD) {
        char *line = cxl_coll_inline_line(p, p->rank, round, k);
        memcpy(line, src + at, n - at < CXL_COLL_LINE_PAYLOAD ? n - at : CXL_COLL_LINE_PAYLOAD);
        __atomic_store_n(cxl_coll_line_epoch(line), e, __ATOMIC_RELEASE);
    }
    __atomic_store_n(cxl_flag(p, p->rank), cxl_coll_written(e), __ATOMIC_RELEASE);
}

/* Wait until rank r's half for `round` holds step e's n bytes, and copy them to out. Every poll
 * loads the epochs of all the half's lines (independent loads: their transfers overlap), so the
 * poll that sees the last epoch has brought every line; polling the last line alone would fetch
 * the others only after it, one more transfer in series. */
static int cxl_coll_lines_read(cxl_coll_t *c, int r, uint64_t e, uint64_t round, char *out, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    uint64_t lines = n ? (n + CXL_COLL_LINE_PAYLOAD - 1) / CXL_COLL_LINE_PAYLOAD : 1;
    char *first = cxl_coll_inline_line(p, r, round, 0);
    double deadline = -1.0;
    for (uint64_t spins = 0;; spins++) {
        int all = 1;
        for (uint64_t k = 0; k < lines; k++)
            all &= cxl_epoch_reached(__atomic_load_n(cxl_coll_line_epoch(first + k * CXL_LINE), __ATOMIC_RELAXED), e);
        if (all) break;
        if (cxl_backoff(p, spins, &deadline, c->timeout_ns)) return cxl_coll_timed_out(c, r, cxl_coll_written(e));
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the payload loads after the epochs' */
    for (uint64_t k = 0, at = 0; at < n; k++, at += CXL_COLL_LINE_PAYLOAD)
        memcpy(out + at, first + k * CXL_LINE, n - at < CXL_COLL_LINE_PAYLOAD ? n - at : CXL_COLL_LINE_PAYLOAD);
    return 0;
}

/* Finish a line-flag allreduce of count elements (step e, `round`): a left fold over the ranks,
 * this rank's block from send (recv may be send: it is written last). */
static int cxl_coll_lines_fold(cxl_coll_t *c, uint64_t e, uint64_t round, const char *send, char *recv, uint64_t count,
                               int dtype, int op)
{
    cxl_pool_t *p = &c->pool;
    uint64_t n = count * cxl_dtype_size[dtype];
    char peer[CXL_COLL_LINES_MAX] __attribute__((aligned(64))), acc[CXL_COLL_LINES_MAX] __attribute__((aligned(64)));
    if (p->nranks == 2) { /* both blocks at hand before out is written */
        int other = 1 - p->rank;
        if (cxl_coll_lines_read(c, other, e, round, peer, n)) return CXL_COLL_TIMEOUT;
        const char *blocks[2] = {p->rank == 0 ? send : peer, p->rank == 0 ? peer : send};
        cxl_coll_note_all_written(c, e);
        cxl_fold(dtype, op, recv, blocks, 2, count);
        return 0;
    }
    for (int r = 0; r < p->nranks; r++) {
        const char *block = send;
        if (r != p->rank) {
            if (cxl_coll_lines_read(c, r, e, round, peer, n)) return CXL_COLL_TIMEOUT;
            block = peer;
        }
        const char *blocks[2] = {acc, block};
        if (r == 0) memcpy(acc, block, n);
        else cxl_fold(dtype, op, acc, blocks, 2, count);
    }
    cxl_coll_note_all_written(c, e);
    memcpy(recv, acc, n);
    return 0;
}

/* ---- allreduce, split phase ------------------------------------------------------------ */

/* One allreduce in flight: what cxl_coll_allreduce_wait needs to finish it. */
typedef struct {
    const char *send;
    char *recv;
    uint64_t count;        /* elements */
    int dtype, op;
    uint64_t large_bytes;  /* chunks of at least this many bytes use reduce-scatter + allgather */
    uint64_t chunk;        /* elements per chunk (one slot) */
    uint64_t started;      /* elements whose chunk is published but not yet folded: the first chunk's */
    uint64_t round;        /* that chunk's round */
    int inlined;           /* the call's input rides in the inline area (cxl_coll_t.inline_bytes) */
} cxl_allreduce_t;

/* Share r of count elements over P ranks: [lo, hi), boundaries on 64-byte lines. */
static inline void cxl_coll_share(uint64_t count, uint64_t es, uint64_t P, uint64_t r, uint64_t *lo, uint64_t *hi)
{
    uint64_t unit = CXL_LINE / es, units = (count + unit - 1) / unit;
    *lo = units * r / P * unit;
    *hi = units * (r + 1) / P * unit;
    if (*lo > count) *lo = count;
    if (*hi > count) *hi = count;
}

/* A chunk of n elements that takes the large algorithm is folded share by share, and only this
 * rank reads its own share [lo, hi) of its slot: with the log off and no emulated timing (whose
 * copy-in and the log describe the whole input) that share is folded from send and is not
 * copied into the slot. 1 (and lo, hi) if this chunk does so. */
static inline int cxl_coll_allreduce_own_share(cxl_coll_t *c, const cxl_allreduce_t *a, uint64_t n, uint64_t *lo,
                                               uint64_t *hi)
{
    uint64_t es = cxl_dtype_size[a->dtype], P = (uint64_t)c->pool.nranks;
    if (P == 1 || n * es < a->large_bytes || c->pool.log || c->pool.timed) return 0;
    cxl_coll_share(n, es, P, (uint64_t)c->pool.rank, lo, hi);
    return 1;
}

/* Below this many bytes glibc's memcpy never uses non-temporal stores (its smallest tunable
 * x86_non_temporal_threshold is 0x4040 B), so a plain copy-in of fewer bytes is ordinary stores. */
#define CXL_COLL_PLAIN_COPY_MAX 16384u

/* Publish written(e) for this rank's n bytes just copied into its slot of `round`. When the copy
 * was ordinary stores (hw mode, below the non-temporal thresholds of cxl_copy_in and memcpy, no
 * event log, untimed), the flag's release store alone: it orders the copy's ordinary stores
 * before it (on x86 every store is seen in program order), so no rank sees the flag before the
 * data. cxl_publish's sfence orders only non-temporal stores and cache-line write-backs; here it
 * would hold this rank until its copy's lines are owned, where without it the rank goes on to its
 * wait while they drain (benchmarks/allreduce_split.py, slot against slot-no-sfence). */
static void cxl_coll_publish_copied(cxl_coll_t *c, uint64_t e, uint64_t round, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    int plain = !p->flush_mode && !p->log && !p->timed && n < CXL_COLL_PLAIN_COPY_MAX &&
                !(p->nt_min_bytes && n >= p->nt_min_bytes);
    if (plain) __atomic_store_n(cxl_flag(p, p->rank), cxl_coll_written(e), __ATOMIC_RELEASE);
    else cxl_publish(p, cxl_coll_written(e), round, n);
}

/* After non-temporal copy-ins (pool.nt_min_bytes) the other ranks' blocks of `round` are in
 * memory, not in a cache: ask for the first 4 KiB of each at once, so their misses overlap,
 * before the fold reads them in order (untimed). Measured in the slow placement at np 2
 * (benchmarks/allreduce_split.py, slot-nt against slot-nt-prefetch): 1.1-1.4x faster at 1-4 KiB.
 * After plain copy-ins the lines sit in the other cores' caches and a prefetch did not help. */
static inline void cxl_coll_prefetch_blocks(cxl_coll_t *c, uint64_t round, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    if (p->timed || !p->nt_min_bytes || n < p->nt_min_bytes) return;
    uint64_t upto = n < 4096 ? n : 4096;
    for (int r = 0; r < p->nranks; r++)
        for (uint64_t at = 0; r != p->rank && at < upto; at += CXL_LINE) __builtin_prefetch(cxl_slot(p, round, r) + at, 0, 3);
}

/* Up to this many bytes at np 2, after plain copy-ins (hw, no event log, untimed), the small
 * allreduce's wait prefetches the peer's block on every poll of its flag (cxl_coll_wait_prefetching);
 * the reduce_scatter's checks its whole row (P blocks) against it and prefetches its own block of the peer's. */
#define CXL_COLL_SPEC_PREFETCH_MAX 1024u

static inline int cxl_coll_spec_prefetch_on(const cxl_coll_t *c, uint64_t n)
{
    const cxl_pool_t *p = &c->pool;
    return p->nranks == 2 && !p->flush_mode && !p->log && !p->timed && n <= CXL_COLL_SPEC_PREFETCH_MAX &&
           !(p->nt_min_bytes && n >= p->nt_min_bytes);
}

/* Wait for every other rank's written(e), as cxl_coll_wait_all (hw, untimed, no log: nothing to log
 * or charge), prefetching that rank's n bytes of `round` on every poll: the lines the peer has
 * finished come while its flag is on the way, instead of after it (one line transfer less in
 * series). A prefetch only reads (a line the peer then writes is taken back as before), so the data
 * read after the flag are the peer's. Measured at np 2 (benchmarks/allreduce_split.py, `slot-spec`
 * against `slot`, per-call medians, load 12-14): fast placement 256 B 100-130 -> 80-110 ns, 512 B
 * 110-170 -> 100-140, 1 KiB 160-230 -> 140-200; slow 512 B 521 -> 430, 1 KiB 651-691 -> 561; from
 * 2 KiB slower (fast 260-350 -> 370-420: the prefetches take lines the writer is still storing). */
static int cxl_coll_wait_prefetching(cxl_coll_t *c, uint64_t e, uint64_t round, uint64_t offset, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    double deadline = -1.0;
    for (int r = 0; r < p->nranks; r++) {
        if (r == p->rank) continue;
        volatile uint64_t *flag = cxl_flag(p, r);
        const char *block = cxl_slot(p, round, r) + offset;
        for (uint64_t spins = 1; !cxl_epoch_reached(__atomic_load_n(flag, __ATOMIC_ACQUIRE), cxl_coll_written(e)); spins++) {
            for (uint64_t at = 0; at < n; at += CXL_LINE) __builtin_prefetch(block + at, 0, 3);
            if (cxl_backoff(p, spins, &deadline, c->timeout_ns)) return cxl_coll_timed_out(c, r, cxl_coll_written(e));
        }
    }
    return 0;
}

/* ---- reduce_scatter (block) ----------------------------------------------------------- */

/* send holds P blocks of count elements; rank r gets the fold over ranks of block r in recv.
 * send == recv is MPI_IN_PLACE (the result goes to the first count elements). */
static int cxl_coll_reduce_scatter_block(cxl_coll_t *c, const char *send, char *recv, uint64_t count, int dtype,
                                         int op)
{
    cxl_pool_t *p = &c->pool;
    uint64_t P = (uint64_t)p->nranks, me = (uint64_t)p->rank, es = cxl_dtype_size[dtype];
    uint64_t room = c->slot_bytes / (P * es), chunk = count < room ? count : room;
    /* only this rank reads its own block: with the log off and no emulated timing (whose copy-in
     * and the log describe the whole row) it is folded from send and not copied into the slot */
    int own_from_send = !p->log && !p->timed;
    if (chunk == 0 && count) return CXL_COLL_TOO_SMALL;
    for (uint64_t off = 0; off < count; off += chunk) {
        uint64_t n = count - off < chunk ? count - off : chunk, round;
        if (cxl_coll_claim(c, 1, &round)) return CXL_COLL_TIMEOUT;
        uint64_t e = c->epoch;
        char *mine = cxl_slot(p, round, p->rank);
        for (uint64_t d = 0; d < P; d++)
            if (d != me || !own_from_send) cxl_coll_copy_in(c, mine + d * n * es, send + (d * count + off) * es, n * es);
        cxl_coll_publish_copied(c, e, round, P * n * es);
        if (cxl_coll_spec_prefetch_on(c, P * n * es) ? cxl_coll_wait_prefetching(c, e, round, me * n * es, n * es)
                                                     : cxl_coll_wait_all(c, cxl_coll_written(e)))
            return CXL_COLL_TIMEOUT;
        cxl_coll_note_all_written(c, e);
        cxl_coll_acquire(c, round, me * n * es, n * es);
        cxl_coll_fold_slots(c, dtype, op, round, me * n * es, recv + off * es, n,
                            own_from_send ? send + (me * count + off) * es : NULL);
    }
    return 0;
}

/* Copy count elements at send + off into this rank's slot of a new step and publish them. */
static int cxl_coll_allreduce_publish(cxl_coll_t *c, cxl_allreduce_t *a, uint64_t off, uint64_t n)
{
    uint64_t es = cxl_dtype_size[a->dtype];
    if (cxl_coll_claim(c, 1, &a->round)) return CXL_COLL_TIMEOUT;
    if (a->inlined) {
        cxl_coll_lines_publish(c, c->epoch, a->round, a->send + off * es, n * es);
        a->started = n;
        return 0;
    }
    char *mine = cxl_slot(&c->pool, a->round, c->pool.rank);
    uint64_t lo, hi;
    if (cxl_coll_allreduce_own_share(c, a, n, &lo, &hi)) { /* the other ranks' shares only */
        cxl_coll_copy_in(c, mine, a->send + off * es, lo * es);
        cxl_coll_copy_in(c, mine + hi * es, a->send + (off + hi) * es, (n - hi) * es);
    } else {
        cxl_coll_copy_in(c, mine, a->send + off * es, n * es);
    }
    cxl_coll_publish_copied(c, c->epoch, a->round, n * es);
    a->started = n;
    return 0;
}

/* Finish the chunk of n elements at element off whose input step is published. */
static int cxl_coll_allreduce_finish(cxl_coll_t *c, cxl_allreduce_t *a, uint64_t off, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    uint64_t es = cxl_dtype_size[a->dtype], P = (uint64_t)p->nranks, e = c->epoch;
    a->started = 0;
    if (a->inlined) return cxl_coll_lines_fold(c, e, a->round, a->send + off * es, a->recv + off * es, n, a->dtype, a->op);
    if (n * es < a->large_bytes && cxl_coll_spec_prefetch_on(c, n * es)) {
        if (cxl_coll_wait_prefetching(c, e, a->round, 0, n * es)) return CXL_COLL_TIMEOUT;
    } else if (cxl_coll_wait_all(c, cxl_coll_written(e))) {
        return CXL_COLL_TIMEOUT;
    }
    cxl_coll_note_all_written(c, e);
    if (n * es < a->large_bytes || P == 1) { /* small: fold every block, this rank's from send when untimed */
        cxl_coll_acquire(c, a->round, 0, n * es);
        cxl_coll_prefetch_blocks(c, a->round, n * es);
        cxl_coll_fold_slots(c, a->dtype, a->op, a->round, 0, a->recv + off * es, n,
                            p->timed ? NULL : a->send + off * es);
        return 0;
    }
    /* large: fold this rank's share into the other buffer, publish it, gather every share */
    uint64_t lo, hi, round;
    cxl_coll_share(n, es, P, (uint64_t)p->rank, &lo, &hi);
    cxl_coll_acquire(c, a->round, lo * es, (hi - lo) * es);
    uint64_t input_round = a->round;
    if (cxl_coll_claim(c, 1, &round)) return CXL_COLL_TIMEOUT;
    uint64_t e2 = c->epoch;
    uint64_t own_lo, own_hi;
    int own = cxl_coll_allreduce_own_share(c, a, n, &own_lo, &own_hi);
    cxl_coll_fold_slots(c, a->dtype, a->op, input_round, lo * es, cxl_slot(p, round, p->rank) + lo * es, hi - lo,
                        own ? a->send + (off + lo) * es : NULL);
    cxl_coll_publish_range(c, cxl_coll_written(e2), round, lo * es, (hi - lo) * es);
    if (cxl_coll_wait_all(c, cxl_coll_written(e2))) return CXL_COLL_TIMEOUT;
    cxl_coll_note_all_written(c, e2);
    for (uint64_t r = 0; r < P; r++) {
        uint64_t rlo, rhi;
        cxl_coll_share(n, es, P, r, &rlo, &rhi);
        const char *src = cxl_slot(p, round, (int)r) + rlo * es;
        if (r == (uint64_t)p->rank) {
            memcpy(a->recv + (off + rlo) * es, src, (rhi - rlo) * es);
            continue;
        }
        if (p->flush_mode) {
            cxl_range_op(p, p->invalidate_op, src, (rhi - rlo) * es);
            cxl_mfence();
            cxl_log(p, CXL_EV_MFENCE, 0, 0);
        }
        cxl_coll_copy_out(c, a->recv + (off + rlo) * es, src, (rhi - rlo) * es);
    }
    return 0;
}

/* Start an allreduce of count elements of dtype under op (cxl_fold_for(dtype, op) != NULL):
 * the first chunk's input is in the pool and published when this returns. send == recv is
 * MPI_IN_PLACE. large_bytes: chunks of at least this many bytes use the large algorithm. */
static int cxl_coll_allreduce_start(cxl_coll_t *c, cxl_allreduce_t *a, const char *send, char *recv, uint64_t count,
                                    int dtype, int op, uint64_t large_bytes)
{
    uint64_t es = cxl_dtype_size[dtype];
    a->send = send;
    a->recv = recv;
    a->count = count;
    a->dtype = dtype;
    a->op = op;
    a->large_bytes = large_bytes;
    a->chunk = c->slot_bytes / es;
    a->started = 0;
    a->inlined = count * es <= c->inline_bytes && count * es <= CXL_COLL_LINES_MAX && !c->pool.flush_mode &&
                 !c->pool.timed && !c->pool.log;
    if (count == 0) return 0;
    return cxl_coll_allreduce_publish(c, a, 0, count < a->chunk ? count : a->chunk);
}

/* Complete the allreduce begun by cxl_coll_allreduce_start (the remaining chunks run here). */
static int cxl_coll_allreduce_wait(cxl_coll_t *c, cxl_allreduce_t *a)
{
    for (uint64_t off = 0; off < a->count; off += a->chunk) {
        uint64_t n = a->count - off < a->chunk ? a->count - off : a->chunk;
        if (off > 0 && cxl_coll_allreduce_publish(c, a, off, n)) return CXL_COLL_TIMEOUT;
        if (cxl_coll_allreduce_finish(c, a, off, n)) return CXL_COLL_TIMEOUT;
    }
    return 0;
}

/* The blocking allreduce: start, then wait. */
static int cxl_coll_allreduce(cxl_coll_t *c, const char *send, char *recv, uint64_t count, int dtype, int op,
                              uint64_t large_bytes)
{
    cxl_allreduce_t a;
    if (cxl_coll_allreduce_start(c, &a, send, recv, count, dtype, op, large_bytes)) return CXL_COLL_TIMEOUT;
    return cxl_coll_allreduce_wait(c, &a);
}

#endif
