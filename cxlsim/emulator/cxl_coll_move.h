/* cxl_coll_move.h: the pool collectives that move data (allgather, broadcast, alltoall, and their zero-copy views),
 * on the step machinery of cxl_coll_core.h (see its comment for steps, chunks and modes). */
#ifndef CXLSIM_CXL_COLL_MOVE_H
#define CXLSIM_CXL_COLL_MOVE_H

#include "cxl_coll_core.h"

/* Allgather of nbytes per rank: block r lands at recv + r x nbytes. send may lie inside recv
 * (MPI_IN_PLACE: send = recv + rank x nbytes). */
static int cxl_coll_allgather(cxl_coll_t *c, const char *send, char *recv, uint64_t nbytes)
{
    cxl_pool_t *p = &c->pool;
    uint64_t chunk = nbytes < c->slot_bytes ? nbytes : c->slot_bytes;
    for (uint64_t off = 0; off < nbytes || (nbytes == 0 && off == 0); off += chunk) {
        uint64_t len = nbytes - off < chunk ? nbytes - off : chunk, round;
        if (cxl_coll_claim(c, 1, &round)) return CXL_COLL_TIMEOUT;
        uint64_t flag = cxl_coll_written(c->epoch);
        int missing;
        if (len == nbytes) {
            missing = cxl_allgather(p, flag, round, send, recv, nbytes, c->timeout_ns);
        } else { /* a chunk: the kernel publishes and waits, the copy-out goes to strided places */
            missing = cxl_allgather(p, flag, round, send + off, NULL, len, c->timeout_ns);
            if (missing < 0)
                for (int r = 0; r < p->nranks; r++) {
                    const char *slot = cxl_slot(p, round, r);
                    if (p->timed) cxl_paced_copy(recv + r * nbytes + off, slot, len, p->bw_bytes_per_ns, 0.0,
                                                 p->spin_overhead_ns);
                    else memcpy(recv + r * nbytes + off, slot, len);
                }
        }
        if (missing >= 0) return cxl_coll_timed_out(c, missing, flag);
        cxl_coll_note_all_written(c, c->epoch);
        if (nbytes == 0) break;
    }
    return 0;
}

/* Before a zero-copy call's caller writes into this rank's slot of the next data round: wait
 * until every rank finished the step that last used that buffer (the wait cxl_coll_claim would
 * make, made early, since the caller writes before the call). */
static int cxl_coll_prepare_write(cxl_coll_t *c)
{
    uint64_t last = c->buffer_epoch[(c->round + 1) & 1];
    cxl_coll_settle(c);
    if (last <= c->known_done) return 0;
    int missing = cxl_wait_all(&c->pool, cxl_coll_done(last), c->timeout_ns);
    if (missing >= 0) return cxl_coll_timed_out(c, missing, cxl_coll_done(last));
    c->known_done = last;
    return 0;
}

/* One allgather step of nbytes <= slot_bytes per rank through cxl_allgather itself: send NULL =
 * zero-copy (the block is already in the slot: call cxl_coll_prepare_write before writing it),
 * recv NULL = the caller reads the slots in place. A zero-byte call takes no data round (a bare
 * synchronisation), so the buffers keep alternating over calls that carry data. */
static int cxl_coll_allgather_step(cxl_coll_t *c, const char *send, char *recv, uint64_t nbytes)
{
    uint64_t round = c->round;
    if (nbytes) {
        if (cxl_coll_claim(c, 1, &round)) return CXL_COLL_TIMEOUT;
    } else {
        cxl_coll_settle(c);
        c->epoch++;
    }
    uint64_t flag = cxl_coll_written(c->epoch);
    char *mine = cxl_slot(&c->pool, round, c->pool.rank);
    if (send == mine) send = NULL; /* the caller wrote its slot itself */
    if (send && !recv && cxl_view_streams(&c->pool, nbytes)) {
        cxl_copy_nt(mine, send, nbytes); /* a view call: see cxl_view_streams */
        send = NULL;
    }
    int missing = cxl_allgather(&c->pool, flag, round, send, recv, nbytes, c->timeout_ns);
    if (missing >= 0) return cxl_coll_timed_out(c, missing, flag);
    cxl_coll_note_all_written(c, c->epoch);
    return 0;
}

/* ---- broadcast -------------------------------------------------------------------------- */

/* The root's nbytes at buf reach every rank's buf. The root writes each chunk once and does not
 * wait for the readers; each reader acknowledges each chunk (done) after copying it out. */
static int cxl_coll_broadcast(cxl_coll_t *c, char *buf, uint64_t nbytes, int root)
{
    cxl_pool_t *p = &c->pool;
    int is_root = p->rank == root;
    uint64_t chunk = nbytes < c->slot_bytes ? nbytes : c->slot_bytes;
    for (uint64_t off = 0; off < nbytes; off += chunk) {
        uint64_t len = nbytes - off < chunk ? nbytes - off : chunk, round;
        if (cxl_coll_claim(c, is_root, &round)) return CXL_COLL_TIMEOUT;
        uint64_t e = c->epoch;
        char *slot = cxl_slot(p, round, root);
        if (is_root) {
            cxl_coll_copy_in(c, slot, buf + off, len);
            cxl_publish(p, cxl_coll_written(e), round, len);
            c->epoch++; /* the acknowledgement's value, done(e), is this step's too */
            continue;
        }
        if (cxl_coll_wait_one(c, root, cxl_coll_written(e))) return CXL_COLL_TIMEOUT;
        if (p->flush_mode) {
            cxl_range_op(p, p->invalidate_op, slot, len);
            cxl_mfence();
            cxl_log(p, CXL_EV_MFENCE, 0, 0);
        }
        cxl_coll_copy_out(c, buf + off, slot, len);
        cxl_publish(p, cxl_coll_done(e), round, 0);
        c->epoch++;
    }
    return 0;
}

/* Zero-copy broadcast of nbytes <= slot_bytes from root: on the root, send (copied into its slot of
 * the next round unless send is that slot) is published; every rank gets *out, the root's slot, to
 * read in place until its next call. A reader publishes its acknowledgement done(e) only when its
 * next call starts (cxl_coll_settle), so the root cannot reuse the slot while it is read. Timed: a
 * reader's wait for the root and its first load of the slot cost one L each, as the copy's. */
static int cxl_coll_broadcast_view(cxl_coll_t *c, const char *send, uint64_t nbytes, int root, const char **out)
{
    cxl_pool_t *p = &c->pool;
    int is_root = p->rank == root;
    uint64_t round;
    if (nbytes > c->slot_bytes) return CXL_COLL_TOO_SMALL;
    if (nbytes == 0) { /* no step, as the copy's */
        *out = cxl_slot(p, c->round + 1, root);
        return 0;
    }
    if (cxl_coll_claim(c, is_root, &round)) return CXL_COLL_TIMEOUT;
    uint64_t e = c->epoch;
    char *slot = cxl_slot(p, round, root);
    *out = slot;
    /* the root streams its copy-in where cxl_view_streams says so (from the pool's nt_min_bytes: the slow
     * placement); the readers then prefetch the slot into L2, since the lines are in memory. */
    int streams = cxl_view_streams(p, nbytes);
    if (is_root) {
        if (send != slot) {
            if (streams) cxl_copy_nt(slot, send, nbytes);
            else cxl_coll_copy_in(c, slot, send, nbytes);
        }
        cxl_publish(p, cxl_coll_written(e), round, nbytes);
        c->epoch++; /* the acknowledgement's value, done(e), is this step's too */
        return 0;
    }
    if (cxl_coll_wait_one(c, root, cxl_coll_written(e))) return CXL_COLL_TIMEOUT;
    if (p->flush_mode) {
        cxl_range_op(p, p->invalidate_op, slot, nbytes);
        cxl_mfence();
        cxl_log(p, CXL_EV_MFENCE, 0, 0);
    }
    if (p->timed) cxl_delay(p, p->latency_ns); /* the caller's first load misses */
    if (cxl_view_prefetch_on(p, nbytes, 1)) cxl_prefetch_l2(slot, nbytes); /* in memory: see cxl_ops.h */
    cxl_log(p, CXL_EV_READ, (int64_t)(slot - p->base), (int64_t)nbytes);
    c->pending_ack = cxl_coll_done(e);
    c->pending_ack_round = round;
    c->epoch++;
    return 0;
}

/* ---- alltoall --------------------------------------------------------------------------- */

/* Block d of send (nbytes at send + d x nbytes) goes to rank d, which receives it as block
 * rank at recv + rank x nbytes. Rank r writes its P blocks into its slot (its row); each rank
 * reads its column. send == recv is MPI_IN_PLACE. */
static int cxl_coll_alltoall(cxl_coll_t *c, const char *send, char *recv, uint64_t nbytes)
{
    cxl_pool_t *p = &c->pool;
    uint64_t P = (uint64_t)p->nranks, me = (uint64_t)p->rank;
    uint64_t room = c->slot_bytes / P, chunk = nbytes < room ? nbytes : room;
    /* only this rank reads its own block of its row, and only in place: otherwise, with the log off
     * and no emulated timing (whose copy-in and the log describe the whole row), it stays out */
    int skip_own = send != recv && !p->log && !p->timed;
    if (chunk == 0 && nbytes) return CXL_COLL_TOO_SMALL;
    for (uint64_t off = 0; off < nbytes; off += chunk) {
        uint64_t len = nbytes - off < chunk ? nbytes - off : chunk, round;
        if (cxl_coll_claim(c, 1, &round)) return CXL_COLL_TIMEOUT;
        uint64_t e = c->epoch;
        char *mine = cxl_slot(p, round, p->rank);
        if (len == nbytes && !skip_own) {
            cxl_coll_copy_in(c, mine, send, P * len); /* one chunk: the row is sendbuf as it is */
        } else if (len == nbytes) { /* the row around this rank's block */
            cxl_coll_copy_in(c, mine, send, me * len);
            cxl_coll_copy_in(c, mine + (me + 1) * len, send + (me + 1) * len, (P - me - 1) * len);
        } else {
            for (uint64_t d = 0; d < P; d++)
                if (d != me || !skip_own) cxl_coll_copy_in(c, mine + d * len, send + d * nbytes + off, len);
        }
        cxl_publish(p, cxl_coll_written(e), round, P * len);
        /* this rank's own block goes straight from send to recv while the others' arrive */
        if (send != recv) memcpy(recv + me * nbytes + off, send + me * nbytes + off, len);
        if (cxl_coll_wait_all(c, cxl_coll_written(e))) return CXL_COLL_TIMEOUT;
        cxl_coll_note_all_written(c, e);
        cxl_coll_acquire(c, round, me * len, len);
        for (uint64_t r = 0; r < P; r++) {
            const char *src = cxl_slot(p, round, (int)r) + me * len;
            if (r == me) {
                if (send == recv) memcpy(recv + r * nbytes + off, src, len);
            } else {
                cxl_coll_copy_out(c, recv + r * nbytes + off, src, len);
            }
        }
    }
    return 0;
}

/* Whether a zero-copy alltoall leaves this rank's own block out of its row: only this rank reads it,
 * and the caller reads it from its send buffer (ZeroCopyResult.rows), where it is in this core's L1,
 * while a store into the row puts it into pool lines in L2 (np 2, fast placement, 16 KiB, view call +
 * one read pass, benchmarks/pool_kernels_ab.c, load 6.5: 3.74 us with the store, 2.85 without, 3.11 copy +
 * read).
 * With the event log on or emulated timing the own block is stored, as the cache model, the Python
 * twin and the timing describe the whole row (as cxl_coll_alltoall's skip_own). */
static inline int cxl_coll_view_skips_own(const cxl_coll_t *c)
{
    return !c->pool.log && !c->pool.timed;
}

/* Zero-copy alltoall of nbytes per destination, P x nbytes <= slot_bytes: this rank's row (send,
 * P blocks, copied into its slot unless send is that slot; the own block left out when
 * cxl_coll_view_skips_own) is published, and *column points at this rank's block in rank 0's row;
 * block r is at *column + r x slot_stride, to be read in place until this rank's next call (the own
 * block, if left out, from send). Timed: one L per other rank's block, as the copy's. */
static int cxl_coll_alltoall_view(cxl_coll_t *c, const char *send, uint64_t nbytes, const char **column)
{
    cxl_pool_t *p = &c->pool;
    uint64_t P = (uint64_t)p->nranks, me = (uint64_t)p->rank, round;
    if (nbytes * P > c->slot_bytes) return CXL_COLL_TOO_SMALL;
    if (nbytes == 0) { /* no step, as the copy's */
        *column = cxl_slot(p, c->round + 1, 0);
        return 0;
    }
    if (cxl_coll_claim(c, 1, &round)) return CXL_COLL_TIMEOUT;
    uint64_t e = c->epoch;
    char *mine = cxl_slot(p, round, p->rank);
    /* the others' blocks stream where cxl_view_streams says so */
    if (send != mine && cxl_view_streams(p, nbytes)) {
        cxl_copy_nt(mine, send, me * nbytes);
        if (!cxl_coll_view_skips_own(c)) memcpy(mine + me * nbytes, send + me * nbytes, nbytes);
        cxl_copy_nt(mine + (me + 1) * nbytes, send + (me + 1) * nbytes, (P - me - 1) * nbytes);
    } else if (send != mine) { /* the own block, when stored, is read back in place: it goes in with plain stores */
        cxl_coll_copy_in(c, mine, send, me * nbytes);
        if (p->timed) cxl_coll_copy_in(c, mine + me * nbytes, send + me * nbytes, nbytes);
        else if (!cxl_coll_view_skips_own(c)) memcpy(mine + me * nbytes, send + me * nbytes, nbytes);
        cxl_coll_copy_in(c, mine + (me + 1) * nbytes, send + (me + 1) * nbytes, (P - me - 1) * nbytes);
    }
    cxl_publish(p, cxl_coll_written(e), round, P * nbytes);
    if (cxl_coll_wait_all(c, cxl_coll_written(e))) return CXL_COLL_TIMEOUT;
    cxl_coll_note_all_written(c, e);
    cxl_coll_acquire(c, round, me * nbytes, nbytes);
    if (p->timed && nbytes) cxl_delay(p, (double)(P - 1) * p->latency_ns); /* the caller's first loads miss */
    int prefetch = cxl_view_prefetch_on(p, nbytes, P - 1); /* the others' blocks are in memory: see cxl_ops.h */
    for (uint64_t r = 0; r < P; r++) {
        if (r == me) continue;
        if (prefetch) cxl_prefetch_l2(cxl_slot(p, round, (int)r) + me * nbytes, nbytes);
        cxl_log(p, CXL_EV_READ, (int64_t)(cxl_slot(p, round, (int)r) + me * nbytes - p->base), (int64_t)nbytes);
    }
    *column = cxl_slot(p, round, 0) + me * nbytes;
    return 0;
}

#endif
