/* cxl_coll.h: the pool collectives (allgather, barrier, broadcast, allreduce, reduce_scatter
 * block, alltoall) for one rank, on the primitives of cxl_ops.h, in both coherence modes.
 *
 * Steps. A collective is a sequence of steps, numbered by epoch on every rank alike; a
 * step that carries data also takes the next data round, whose buffer is round % 2
 * (cxl_slot). A step e takes the flag value e, and a broadcast step also e + 1:
 *   written(e) = e     - "my data of step e is in my slot" (and I finished every step < e);
 *   done(e)    = e + 1 - "I finished reading step e": a broadcast reader's acknowledgement, or
 *                        any later step's written value (a step after e starts at e + 1, or
 *                        e + 2 after a broadcast, and is published only once e is finished).
 * So a run of allgathers and barriers numbers its steps 1, 2, 3, ... (the allgather protocol
 * of cxl_ops.h), and each broadcast step moves the epoch on by 2. Flags only grow. A rank may write into buffer b only once every rank finished the step
 * that last used b (every flag >= done(that step)); `known_done` remembers how far that is
 * known, so the wait is skipped when an earlier wait already proved it. Steps in which
 * every rank writes and then waits for every rank's written(e) (allgather, allreduce,
 * reduce_scatter, alltoall, barrier) prove done(e - 1) as they go; a broadcast's root does
 * not wait at all, its readers wait for the root only and then publish done(e), so
 * back-to-back broadcasts pipeline through the two buffers.
 *
 * Chunks. A call larger than the slot (slot_bytes per rank) runs as several steps of at
 * most one slot per rank each (alltoall and reduce_scatter: slot / P per destination).
 *
 * Zero-copy. cxl_coll_allgather_step with recv NULL, cxl_coll_broadcast_view and
 * cxl_coll_alltoall_view are one step each, at most one slot: the caller reads the result in
 * the pool until its next call. A send buffer that is the rank's own slot is not copied. A
 * zero-copy broadcast reader cannot acknowledge while it still reads the root's slot, so it
 * keeps done(e) pending and publishes it when its next call starts (cxl_coll_settle, first in
 * every call, before any wait: two ranks never wait for each other's acknowledgement).
 *
 * Copies into the pool use non-temporal stores from pool.nt_min_bytes (cxl_copy_in; 0 = never).
 *
 * Allreduce has two pool algorithms: small (every rank reads all P blocks and folds them,
 * one step), and large (reduce-scatter then allgather, two steps: each rank folds its 1/P
 * share, share boundaries on 64-byte lines, from every block and publishes it in the other
 * buffer, then every rank copies every share out). Both fold ranks 0..P-1 left to right
 * (cxl_reduce.h), so their results are bitwise identical to each other and on every rank.
 *
 * Inline allreduce (cxl_coll_t.inline_bytes > 0; hw mode, untimed, no event log): an input of
 * at most inline_bytes (<= CXL_COLL_INLINE_MAX) goes into the rank's own flag line beside the
 * flag, in half round % 2 of the line's 56 spare bytes, instead of into its slot. A reader's poll
 * then brings the data with the flag: one cache-line transfer per rank and call instead of two
 * (flag, then slot). The halves follow the buffers' reuse rule (cxl_coll_claim), and the fold
 * is the same left fold, so the results are bitwise those of the slot path. Its stores are plain
 * stores into one line of the writer's, ordered before the flag by x86's store order, so this
 * publish needs no sfence (nothing non-temporal precedes it). The event log and the cache model
 * describe the slot protocol: a kernel that logs keeps inline_bytes 0 (the Python kernel does).
 *
 * Split phase: cxl_coll_allreduce_start copies the input's first chunk into the pool and
 * publishes it; cxl_coll_allreduce_wait completes the call. Between the two the caller may
 * compute but must not change the input or make another call on this communicator.
 *
 * Emulated timing (cxl_pool_t.timed, see cxl_ops.h): copies into the pool are paced at B;
 * after a wait for other ranks' flags, one L; reading k other ranks' data costs k x L
 * (one per block, serially) and is paced at B. Allgather uses cxl_allgather itself.
 *
 * Every function returns 0, or CXL_COLL_TIMEOUT, with c->missing the first rank that did
 * not arrive and c->missing_flag the flag value awaited (cxl_coll_missing lists them all),
 * or (alltoall, reduce_scatter) CXL_COLL_TOO_SMALL when a slot cannot hold one byte (one
 * element) per destination; nothing was done then.
 */
#ifndef CXLSIM_CXL_COLL_H
#define CXLSIM_CXL_COLL_H

#include "cxl_ops.h"
#include "cxl_reduce.h"

enum { CXL_COLL_OK = 0, CXL_COLL_TIMEOUT = 1, CXL_COLL_TOO_SMALL = 2 };

/* Bytes of one inline half: a flag line is the flag (8 B) and two halves, 8 B spare. */
#define CXL_COLL_INLINE_MAX 24

typedef struct {
    cxl_pool_t pool;
    uint64_t slot_bytes;       /* usable bytes per slot */
    double timeout_ns;         /* longest wait before a call fails naming the missing ranks */
    uint64_t epoch;            /* the last step's epoch */
    uint64_t round;            /* the last data round */
    uint64_t buffer_epoch[2];  /* the step that last used buffer b (0 = none) */
    uint64_t known_done;       /* every rank has finished every step up to this epoch */
    int missing;               /* after a timeout: the first rank that did not arrive */
    uint64_t missing_flag;     /* after a timeout: the flag value awaited */
    uint64_t pending_ack;      /* a zero-copy broadcast reader's done(e), published when its next call starts (0 = none) */
    uint64_t pending_ack_round;/* that broadcast's data round */
    uint64_t inline_bytes;     /* allreduce inputs up to this many bytes go in the flag line (0 = never); see above */
} cxl_coll_t;

static inline uint64_t cxl_coll_written(uint64_t epoch) { return epoch; }
static inline uint64_t cxl_coll_done(uint64_t epoch) { return epoch + 1; }

/* Rank r's inline half for data round `round`: in its flag line, after the flag. */
static inline char *cxl_coll_inline_half(cxl_pool_t *p, int r, uint64_t round)
{
    return (char *)cxl_flag(p, r) + sizeof(uint64_t) + (round & 1) * CXL_COLL_INLINE_MAX;
}

/* Set up c over an initialised cxl_pool_t (epochs start at 1: a zeroed pool has every flag 0). */
static void cxl_coll_init(cxl_coll_t *c, const cxl_pool_t *pool, uint64_t slot_bytes, double timeout_ns)
{
    memset(c, 0, sizeof *c);
    c->pool = *pool;
    c->slot_bytes = slot_bytes;
    c->timeout_ns = timeout_ns;
    c->missing = -1;
}

/* Ranks whose flag is still below c->missing_flag, into out (at most max); returns how many. */
static int cxl_coll_missing(cxl_coll_t *c, int *out, int max)
{
    int n = 0;
    for (int r = 0; r < c->pool.nranks; r++) {
        if (r == c->pool.rank) continue;
        volatile uint64_t *flag = cxl_flag(&c->pool, r);
        if (c->pool.flush_mode) {
            cxl_line_op(c->pool.invalidate_op, (const void *)flag);
            cxl_mfence();
        }
        if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) < c->missing_flag && n < max) out[n++] = r;
    }
    return n;
}

static inline int cxl_coll_timed_out(cxl_coll_t *c, int rank, uint64_t flag)
{
    c->missing = rank;
    c->missing_flag = flag;
    return CXL_COLL_TIMEOUT;
}

/* Wait for every other rank's flag >= value (cxl_wait_all), then charge the flag latency. */
static int cxl_coll_wait_all(cxl_coll_t *c, uint64_t value)
{
    int missing = cxl_wait_all(&c->pool, value, c->timeout_ns);
    if (missing >= 0) return cxl_coll_timed_out(c, missing, value);
    if (c->pool.timed && c->pool.nranks > 1) cxl_delay(&c->pool, c->pool.latency_ns);
    return 0;
}

/* Wait for rank r's flag >= value alone (a broadcast reader waits for its root), then one L. */
static int cxl_coll_wait_one(cxl_coll_t *c, int r, uint64_t value)
{
    cxl_pool_t *p = &c->pool;
    volatile uint64_t *flag = cxl_flag(p, r);
    double deadline = -1.0;
    for (uint64_t spins = 0;; spins++) {
        if (p->flush_mode) {
            cxl_line_op(p->invalidate_op, (const void *)flag);
            cxl_mfence();
        }
        if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) >= value) break;
        if (spins < p->spin_iters) {
            cxl_pause();
            continue;
        }
        sched_yield();
        if ((spins & 63) == 0) {
            double now = cxl_now_ns();
            if (deadline < 0) deadline = now + c->timeout_ns;
            else if (now > deadline) return cxl_coll_timed_out(c, r, value);
        }
    }
    cxl_log(p, p->flush_mode ? CXL_EV_POLL_FLUSHED : CXL_EV_POLL_CACHED, (int64_t)((char *)flag - p->base),
            (int64_t)value);
    if (p->timed) cxl_delay(p, p->latency_ns);
    return 0;
}

/* Publish a zero-copy broadcast reader's deferred acknowledgement (its caller read the root's slot
 * in place until now): every call starts with this, before it waits for anyone. */
static inline void cxl_coll_settle(cxl_coll_t *c)
{
    if (!c->pending_ack) return;
    /* (a later publish of this rank's, e.g. a calibration probe's, already said more: flags only grow) */
    if (*cxl_flag(&c->pool, c->pool.rank) < c->pending_ack)
        cxl_publish(&c->pool, c->pending_ack, c->pending_ack_round, 0);
    c->pending_ack = 0;
}

/* Begin a data step: take the next epoch and round; if this rank will write into the round's
 * buffer, first wait until every rank finished the step that last used it. *round = the round. */
static int cxl_coll_claim(cxl_coll_t *c, int will_write, uint64_t *round)
{
    uint64_t next = c->round + 1, last = c->buffer_epoch[next & 1];
    cxl_coll_settle(c);
    if (will_write && last > c->known_done) {
        int missing = cxl_wait_all(&c->pool, cxl_coll_done(last), c->timeout_ns);
        if (missing >= 0) return cxl_coll_timed_out(c, missing, cxl_coll_done(last));
        c->known_done = last;
    }
    c->round = next;
    c->epoch++;
    c->buffer_epoch[next & 1] = c->epoch;
    *round = next;
    return 0;
}

/* After every rank's written(epoch) arrived: each finished every step before it. */
static inline void cxl_coll_note_all_written(cxl_coll_t *c, uint64_t epoch)
{
    if (epoch - 1 > c->known_done) c->known_done = epoch - 1;
}

/* Copy n bytes into the pool (paced at B when timed). */
static inline void cxl_coll_copy_in(cxl_coll_t *c, char *dst, const char *src, uint64_t n)
{
    if (!n) return;
    if (c->pool.timed) cxl_paced_copy(dst, src, n, c->pool.bw_bytes_per_ns, 0.0, c->pool.spin_overhead_ns);
    else cxl_copy_in(&c->pool, dst, src, n);
}

/* Copy n bytes of another rank's data out of the pool: one L, then paced at B (when timed). */
static inline void cxl_coll_copy_out(cxl_coll_t *c, char *dst, const char *src, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    if (p->timed && n) {
        double start = cxl_now_ns() + p->latency_ns - p->spin_overhead_ns;
        if (p->latency_ns > p->spin_overhead_ns) cxl_spin_until(start);
        cxl_paced_copy(dst, src, n, p->bw_bytes_per_ns, start, p->spin_overhead_ns);
    } else if (n) {
        memcpy(dst, src, n);
    }
    cxl_log(p, CXL_EV_READ, (int64_t)(src - p->base), (int64_t)n);
}

/* Publish flag `value` for this rank's bytes [offset, offset + n) of its slot in `round`
 * (cxl_publish with the write-back restricted to that range). */
static void cxl_coll_publish_range(cxl_coll_t *c, uint64_t value, uint64_t round, uint64_t offset, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    char *start = cxl_slot(p, round, p->rank) + offset;
    if (offset == 0) {
        cxl_publish(p, value, round, n);
        return;
    }
    cxl_log(p, CXL_EV_WRITE, (int64_t)(start - p->base), (int64_t)n);
    if (p->flush_mode) cxl_range_op(p, p->writeback_op, start, n);
    cxl_publish(p, value, round, 0);
}

/* Flush mode: drop stale copies of bytes [offset, offset + n) of every other rank's slot. */
static void cxl_coll_acquire(cxl_coll_t *c, uint64_t round, uint64_t offset, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    if (!p->flush_mode) return;
    for (int r = 0; r < p->nranks; r++)
        if (r != p->rank) cxl_range_op(p, p->invalidate_op, cxl_slot(p, round, r) + offset, n);
    cxl_mfence();
    cxl_log(p, CXL_EV_MFENCE, 0, 0);
}

/* Fold `count` elements of every rank's slot of `round` at byte `offset` into out (this rank's
 * block from `own` instead when own is not NULL; untimed only); charges and paces the reads of the
 * other ranks' blocks when timed. */
static void cxl_coll_fold_slots(cxl_coll_t *c, int dtype, int op, uint64_t round, uint64_t offset, char *out,
                                uint64_t count, const char *own)
{
    cxl_pool_t *p = &c->pool;
    const char *blocks[p->nranks];
    uint64_t es = cxl_dtype_size[dtype], bytes = count * es;
    for (int r = 0; r < p->nranks; r++) {
        blocks[r] = cxl_slot(p, round, r) + offset;
        if (r != p->rank) cxl_log(p, CXL_EV_READ, (int64_t)(blocks[r] - p->base), (int64_t)bytes);
        else if (own) blocks[r] = own;
    }
    if (!p->timed || p->nranks == 1 || !bytes) {
        cxl_fold(dtype, op, out, blocks, p->nranks, count);
        return;
    }
    cxl_delay(p, (double)(p->nranks - 1) * p->latency_ns); /* one miss per other block */
    double t0 = cxl_now_ns() - p->spin_overhead_ns, remote = 0.0;
    uint64_t piece = CXL_FOLD_BYTES / es;
    for (uint64_t i = 0; i < count; i += piece) {
        uint64_t n = count - i < piece ? count - i : piece;
        remote += (double)((p->nranks - 1) * n * es);
        if (p->bw_bytes_per_ns > 0.0) cxl_spin_until(t0 + remote / p->bw_bytes_per_ns);
        const char *at[p->nranks];
        for (int r = 0; r < p->nranks; r++) at[r] = blocks[r] + i * es;
        cxl_fold(dtype, op, out + i * es, at, p->nranks, n);
    }
}

/* Bounce the flags between ranks 0 and 1 (np = 2 only) `iterations` times; returns the mean ns
 * per round trip, or a negative number on a timeout (c->missing says who). Rank 0 publishes and
 * waits, rank 1 waits and publishes: one round trip is two flag hops of the collectives' protocol
 * in this pool's mode (the probe _probes.flag_pingpong makes from Python). Both ranks call it
 * with the same count. */
static double cxl_coll_flag_pingpong(cxl_coll_t *c, uint64_t iterations)
{
    cxl_pool_t *p = &c->pool;
    uint64_t e = c->epoch;
    cxl_coll_settle(c);
    double t0 = cxl_now_ns();
    for (uint64_t i = 0; i < iterations; i++) {
        e++;
        int missing;
        if (p->rank == 0) {
            cxl_publish(p, cxl_coll_written(e), c->round, 0);
            missing = cxl_wait_all(p, cxl_coll_written(e), c->timeout_ns);
        } else {
            missing = cxl_wait_all(p, cxl_coll_written(e), c->timeout_ns);
            cxl_publish(p, cxl_coll_written(e), c->round, 0);
        }
        if (missing >= 0) {
            c->epoch = e;
            cxl_coll_timed_out(c, missing, cxl_coll_written(e));
            return -1.0;
        }
    }
    double t1 = cxl_now_ns();
    c->epoch = e;
    if (e > c->known_done + 1) c->known_done = e - 1; /* each round trip proved the steps before it */
    return iterations ? (t1 - t0) / (double)iterations : 0.0;
}

/* ---- barrier and allgather -------------------------------------------------------------- */

/* Wait until every rank reaches its barrier (one step without data). */
static int cxl_coll_barrier(cxl_coll_t *c)
{
    cxl_coll_settle(c);
    uint64_t e = ++c->epoch;
    cxl_publish(&c->pool, cxl_coll_written(e), c->round, 0);
    if (cxl_coll_wait_all(c, cxl_coll_written(e))) return CXL_COLL_TIMEOUT;
    cxl_coll_note_all_written(c, e);
    return 0;
}

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
    if (send == cxl_slot(&c->pool, round, c->pool.rank)) send = NULL; /* the caller wrote its slot itself */
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
    if (is_root) {
        if (send != slot) cxl_coll_copy_in(c, slot, send, nbytes);
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

/* Zero-copy alltoall of nbytes per destination, P x nbytes <= slot_bytes: this rank's row (send,
 * P blocks, copied into its slot unless send is that slot) is published, and *column points at this
 * rank's block in rank 0's row; block r is at *column + r x slot_stride, to be read in place until
 * this rank's next call. Timed: one L per other rank's block, as the copy's. */
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
    if (send != mine) { /* this rank reads its own block back in place: it goes in with plain stores */
        cxl_coll_copy_in(c, mine, send, me * nbytes);
        if (p->timed) cxl_coll_copy_in(c, mine + me * nbytes, send + me * nbytes, nbytes);
        else memcpy(mine + me * nbytes, send + me * nbytes, nbytes);
        cxl_coll_copy_in(c, mine + (me + 1) * nbytes, send + (me + 1) * nbytes, (P - me - 1) * nbytes);
    }
    cxl_publish(p, cxl_coll_written(e), round, P * nbytes);
    if (cxl_coll_wait_all(c, cxl_coll_written(e))) return CXL_COLL_TIMEOUT;
    cxl_coll_note_all_written(c, e);
    cxl_coll_acquire(c, round, me * nbytes, nbytes);
    if (p->timed && nbytes) cxl_delay(p, (double)(P - 1) * p->latency_ns); /* the caller's first loads miss */
    for (uint64_t r = 0; r < P; r++)
        if (r != me) cxl_log(p, CXL_EV_READ, (int64_t)(cxl_slot(p, round, (int)r) + me * nbytes - p->base), (int64_t)nbytes);
    *column = cxl_slot(p, round, 0) + me * nbytes;
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
        cxl_publish(p, cxl_coll_written(e), round, P * n * es);
        if (cxl_coll_wait_all(c, cxl_coll_written(e))) return CXL_COLL_TIMEOUT;
        cxl_coll_note_all_written(c, e);
        cxl_coll_acquire(c, round, me * n * es, n * es);
        cxl_coll_fold_slots(c, dtype, op, round, me * n * es, recv + off * es, n,
                            own_from_send ? send + (me * count + off) * es : NULL);
    }
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
    int inlined;           /* the call's input rides in the flag lines (cxl_coll_t.inline_bytes) */
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

/* Copy count elements at send + off into this rank's slot of a new step and publish them. */
static int cxl_coll_allreduce_publish(cxl_coll_t *c, cxl_allreduce_t *a, uint64_t off, uint64_t n)
{
    uint64_t es = cxl_dtype_size[a->dtype];
    if (cxl_coll_claim(c, 1, &a->round)) return CXL_COLL_TIMEOUT;
    if (a->inlined) { /* into the flag line, then the flag: one line, plain stores in order */
        memcpy(cxl_coll_inline_half(&c->pool, c->pool.rank, a->round), a->send, n * es);
        __atomic_store_n(cxl_flag(&c->pool, c->pool.rank), cxl_coll_written(c->epoch), __ATOMIC_RELEASE);
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
    cxl_publish(&c->pool, cxl_coll_written(c->epoch), a->round, n * es);
    a->started = n;
    return 0;
}

/* Finish the chunk of n elements at element off whose input step is published. */
static int cxl_coll_allreduce_finish(cxl_coll_t *c, cxl_allreduce_t *a, uint64_t off, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    uint64_t es = cxl_dtype_size[a->dtype], P = (uint64_t)p->nranks, e = c->epoch;
    a->started = 0;
    if (a->inlined) { /* copy each rank's half out as soon as its flag shows, then fold (recv may be the
                         input: MPI_IN_PLACE). The copy is made at once because the rank may overwrite its
                         line for its next call soon after: a second read then would cost a transfer */
        char copies[P][CXL_COLL_INLINE_MAX];
        const char *blocks[P];
        for (uint64_t r = 0; r < P; r++) {
            blocks[r] = cxl_coll_inline_half(p, (int)r, a->round);
            if (r == (uint64_t)p->rank) continue;
            if (cxl_coll_wait_one(c, (int)r, cxl_coll_written(e))) return CXL_COLL_TIMEOUT;
            memcpy(copies[r], blocks[r], n * es);
            blocks[r] = copies[r];
        }
        cxl_coll_note_all_written(c, e);
        cxl_fold(a->dtype, a->op, a->recv, blocks, (int)P, n);
        return 0;
    }
    if (cxl_coll_wait_all(c, cxl_coll_written(e))) return CXL_COLL_TIMEOUT;
    cxl_coll_note_all_written(c, e);
    if (n * es < a->large_bytes || P == 1) { /* small: fold every block */
        cxl_coll_acquire(c, a->round, 0, n * es);
        cxl_coll_fold_slots(c, a->dtype, a->op, a->round, 0, a->recv + off * es, n, NULL);
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
    a->inlined = count * es <= c->inline_bytes && !c->pool.flush_mode && !c->pool.timed;
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
