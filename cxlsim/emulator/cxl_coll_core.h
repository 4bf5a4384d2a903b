/* cxl_coll_core.h: the step machinery of the pool collectives (allgather, barrier, broadcast, allreduce, reduce_scatter
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
 * of cxl_ops.h), and each broadcast step moves the epoch on by 2 (from a base, cxl_coll_start_epochs, in the MPI
 * library's pools). Flags only grow; "flag >= value" is cxl_epoch_reached. A rank may write into buffer b only once every rank finished the step
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
 * Copies into the pool use non-temporal stores from pool.nt_min_bytes (cxl_copy_in; 0 = never), and the
 * zero-copy calls' copy-ins where cxl_view_streams (cxl_ops.h) says so.
 *
 * Allreduce has two pool algorithms: small (every rank reads all P blocks and folds them,
 * one step), and large (reduce-scatter then allgather, two steps: each rank folds its 1/P
 * share, share boundaries on 64-byte lines, from every block and publishes it in the other
 * buffer, then every rank copies every share out). Both fold ranks 0..P-1 left to right
 * (cxl_reduce.h), so their results are bitwise identical to each other and on every rank.
 *
 * Inline allreduce (cxl_coll_t.inline_bytes > 0): small inputs ride in each rank's inline area
 * with their own epochs; see cxl_coll_reduce.h.
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
#ifndef CXLSIM_CXL_COLL_CORE_H
#define CXLSIM_CXL_COLL_CORE_H

#include "cxl_ops.h"
#include "cxl_reduce.h"

enum { CXL_COLL_OK = 0, CXL_COLL_TIMEOUT = 1, CXL_COLL_TOO_SMALL = 2 };


typedef struct {
    cxl_pool_t pool;
    uint64_t slot_bytes;       /* usable bytes per slot */
    double timeout_ns;         /* longest wait before a call fails naming the missing ranks */
    uint64_t epoch;            /* the last step's epoch */
    uint64_t round;            /* the last data round */
    uint64_t buffer_epoch[2];  /* the step that last used buffer b (the base = none) */
    uint64_t known_done;       /* every rank has finished every step up to this epoch */
    int missing;               /* after a timeout: the first rank that did not arrive */
    uint64_t missing_flag;     /* after a timeout: the flag value awaited */
    uint64_t pending_ack;      /* a zero-copy broadcast reader's done(e), published when its next call starts (0 = none) */
    uint64_t pending_ack_round;/* that broadcast's data round */
    uint64_t inline_bytes;     /* allreduce inputs up to this many bytes go in the inline area (0 = never; <= CXL_COLL_LINES_MAX, cxl_coll_reduce.h) */
} cxl_coll_t;

static inline uint64_t cxl_coll_written(uint64_t epoch) { return epoch; }
static inline uint64_t cxl_coll_done(uint64_t epoch) { return epoch + 1; }

/* Set up c over an initialised cxl_pool_t (epochs start at 1: a zeroed pool has every flag 0). */
static void cxl_coll_init(cxl_coll_t *c, const cxl_pool_t *pool, uint64_t slot_bytes, double timeout_ns)
{
    memset(c, 0, sizeof *c);
    c->pool = *pool;
    c->slot_bytes = slot_bytes;
    c->timeout_ns = timeout_ns;
    c->missing = -1;
}

/* Start the step numbers at `base` instead of 0, before the first call: the MPI library's pools take a base drawn
 * from the job nonce (cxlsim/mpi/pools.c), so flags and line epochs an earlier job left in the same memory are never
 * taken for an arrival (cxl_epoch_reached). base < 2^62, so base + every step of a job stays below 2^64. Every rank
 * of the pool starts at the same base. */
static inline void cxl_coll_start_epochs(cxl_coll_t *c, uint64_t base)
{
    c->epoch = c->known_done = c->buffer_epoch[0] = c->buffer_epoch[1] = base;
}

/* Ranks whose flag has not reached c->missing_flag, into out (at most max); returns how many. */
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
        if (!cxl_epoch_reached(__atomic_load_n(flag, __ATOMIC_ACQUIRE), c->missing_flag) && n < max) out[n++] = r;
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
        if (cxl_epoch_reached(__atomic_load_n(flag, __ATOMIC_ACQUIRE), value)) break;
        if (cxl_backoff(p, spins, &deadline, c->timeout_ns)) return cxl_coll_timed_out(c, r, value);
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
    if (!cxl_epoch_reached(*cxl_flag(&c->pool, c->pool.rank), c->pending_ack))
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

/* The placement probe's round trips at any np >= 2 (the library's, cxlsim/mpi/pools.c, and PoolComm.choose_copy_in's):
 * at np 2 cxl_coll_flag_pingpong; at np > 2 ranks 0 and 1 bounce their flags `iterations` times as its two ranks do,
 * spinning `spin_iters` polls before each yield (a yield would add a system call to every hop, and with more ranks
 * than cores the pool's waits yield almost at once), while every other rank waits, yielding its CPU, until rank 0
 * published the last round trip, so the pair has the CPUs. Every rank's epoch moves on by `iterations`; the others'
 * flags stay behind (flags only grow: their next step's publish passes them). Returns the mean ns per round trip on
 * ranks 0 and 1, 0 on the others, or a negative number on a timeout (c->missing says who). Every rank calls it with
 * the same count. */
static double cxl_coll_probe_pingpong(cxl_coll_t *c, uint64_t iterations, uint64_t spin_iters)
{
    cxl_pool_t *p = &c->pool;
    if (p->nranks == 2) return cxl_coll_flag_pingpong(c, iterations);
    uint64_t e = c->epoch, kept_spin_iters = p->spin_iters;
    cxl_coll_settle(c);
    if (p->nranks < 2) return 0.0;
    if (p->rank > 1) {
        c->epoch = e + iterations;
        return cxl_coll_wait_one(c, 0, cxl_coll_written(c->epoch)) ? -1.0 : 0.0;
    }
    p->spin_iters = spin_iters;
    int failed = 0;
    double t0 = cxl_now_ns();
    for (uint64_t i = 0; i < iterations && !failed; i++) {
        e++;
        if (p->rank == 0) {
            cxl_publish(p, cxl_coll_written(e), c->round, 0);
            failed = cxl_coll_wait_one(c, 1, cxl_coll_written(e));
        } else {
            failed = cxl_coll_wait_one(c, 0, cxl_coll_written(e));
            cxl_publish(p, cxl_coll_written(e), c->round, 0);
        }
    }
    double t1 = cxl_now_ns();
    p->spin_iters = kept_spin_iters;
    c->epoch = e;
    return failed ? -1.0 : iterations ? (t1 - t0) / (double)iterations : 0.0;
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

#endif
