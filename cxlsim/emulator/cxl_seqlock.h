/* cxl_seqlock.h: shared training state on the emulated CXL pool (cxlsim.emulator.training.shared_state).
 *
 * A region holds, for W workers, a global counter and one push slot per worker. Every word
 * has a single writer except the counter, and every flag is on its own 64-byte line.
 *
 * Push slots: worker w alone writes slot w; every worker reads every slot. A slot has two
 * copies, each a sequence word (its own line) followed by a 64-byte metadata line and the
 * vector. Push number v (1, 2, ...) goes to copy v & 1:
 *     seq = 2v - 1 (odd: being written); make it visible; write meta and vector; make them
 *     visible; seq = 2v (even: push v complete); make it visible.
 * "Make visible" is an sfence in hw mode (it also orders memcpy's non-temporal stores), and in
 * flush mode a write-back of the lines just written (clflushopt or clwb) then sfence: the odd
 * sequence word reaches the pool before any data line can, and every data line before the
 * even one.
 * A reader loads both sequence words (flush mode: invalidate the line, mfence, load), takes
 * the copy with the larger even value s1, copies meta and vector out (flush mode: invalidating
 * their lines first), and loads that copy's sequence word again: the copy is push s1 / 2
 * only if it still reads s1; otherwise the writer started a newer push over it and the reader
 * retries. The copy a writer overwrites is never the newest complete one, so a reader retries
 * only when the writer completed a push and started the next during one read, and a writer
 * killed part-way through a push leaves that copy odd and the other copy holding its last
 * complete push: nobody ever reads a torn vector. A slot reads as version 0 (all zero) only
 * while no push completed (both words 0, or 0 and 1); both words odd above that means the
 * writer completed a push and began the next between the two loads, and the reader retries.
 *
 * Global counter: one uint64 on its own line, with two schemes (as the DES's hybrid mode):
 *   cxl-device     - an atomic fetch-and-add on the line (the device executes same-line
 *                    atomics of a CXL 3.x HDM-DB pool in order); needs hardware coherence;
 *   cxl-flush-lock - no cross-host CPU atomics (flush mode): Lamport's bakery lock built from
 *                    single-writer flags (choosing[w], number[w], each on its own line, each
 *                    store written back and fenced, each load of another worker's flag after
 *                    an invalidation), around a plain load + store of the counter.
 * The bakery's waits give up after a slice of time and return the worker they wait for, so
 * the caller can tell a dead worker (then it passes dead[w] = 1 and waits again: a dead
 * worker's flags are ignored) from a slow one. A worker that died holding the lock had
 * either stored its counter value or not: one aligned 8-byte store.
 *
 * Everything here runs without the GIL. Time is in ns (CLOCK_MONOTONIC).
 */
#ifndef CXLSIM_CXL_SEQLOCK_H
#define CXLSIM_CXL_SEQLOCK_H

#include "cxl_ops.h"

typedef struct {
    char *base;              /* first byte of the mapping every offset counts from (page-aligned) */
    uint64_t counter_offset; /* the counter's line */
    uint64_t choosing_offset;/* worker w's bakery choosing flag at choosing_offset + 64 w */
    uint64_t number_offset;  /* worker w's bakery number at number_offset + 64 w */
    uint64_t slots_offset;   /* worker w's slot at slots_offset + w * slot_stride */
    uint64_t slot_stride;    /* two copies */
    uint64_t copy_stride;    /* sequence line + meta line + vector, rounded up to 64 */
    uint64_t vector_bytes;
    int nworkers;
    int flush_mode;          /* 0 = hw, 1 = flush */
    int writeback_op;        /* CXL_OP_*: the writer's line op */
    int invalidate_op;       /* CXL_OP_*: the reader's line op (drops the line) */
    int64_t *log;            /* debug event log, 3 int64 per event, or NULL (see below) */
    int64_t log_capacity;    /* events */
    int64_t log_length;      /* events written (may exceed capacity: then the log overflowed) */
} cxl_shared_t;

/* Debug event log (the CXL_EV_* codes of cxl_ops.h; offsets in bytes from the region's mapping):
 * FLAG_STORE (offset, value) for a single-writer word store, WRITE (offset, length) for a copy
 * into the region, READ (offset, length) for a word load or a copy out of it, WRITEBACK or FLUSH
 * (offset, length) for the line ops over a range, SFENCE and MFENCE. A log is per process. */
static inline void cxl_shared_log(cxl_shared_t *s, int64_t op, const volatile void *at, int64_t arg)
{
    if (!s->log) return;
    if (s->log_length < s->log_capacity) {
        int64_t *e = s->log + 3 * s->log_length;
        e[0] = op; e[1] = at ? (int64_t)((const char *)at - s->base) : 0; e[2] = arg;
    }
    s->log_length++;
}

static inline void cxl_shared_sfence(cxl_shared_t *s)
{
    cxl_sfence();
    cxl_shared_log(s, CXL_EV_SFENCE, NULL, 0);
}

static inline void cxl_shared_mfence(cxl_shared_t *s)
{
    cxl_mfence();
    cxl_shared_log(s, CXL_EV_MFENCE, NULL, 0);
}

/* Line op `op` over [start, start + length), logged as one range. */
static inline void cxl_shared_lines(cxl_shared_t *s, int op, const volatile void *start, uint64_t length)
{
    uintptr_t first = (uintptr_t)start & ~(uintptr_t)(CXL_LINE - 1);
    uintptr_t end = (uintptr_t)start + length;
    for (uintptr_t a = first; a < end; a += CXL_LINE) cxl_line_op(op, (const void *)a);
    cxl_shared_log(s, op == CXL_OP_CLWB ? CXL_EV_WRITEBACK : CXL_EV_FLUSH, start, (int64_t)length);
}

#define CXL_META_BYTES 64

static inline char *cxl_shared_copy(const cxl_shared_t *s, int w, uint64_t copy)
{
    return s->base + s->slots_offset + (uint64_t)w * s->slot_stride + copy * s->copy_stride;
}

static inline volatile uint64_t *cxl_shared_word(const cxl_shared_t *s, uint64_t offset)
{
    return (volatile uint64_t *)(s->base + offset);
}

/* Store a single-writer word and make it visible (flush mode: write its line back, sfence). */
static inline void cxl_shared_store(cxl_shared_t *s, volatile uint64_t *word, uint64_t value)
{
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    cxl_shared_log(s, CXL_EV_FLAG_STORE, word, (int64_t)value);
    if (s->flush_mode) {
        cxl_shared_lines(s, s->writeback_op, word, sizeof(uint64_t));
        cxl_shared_sfence(s);
    }
}

/* Load a word another worker writes (flush mode: drop this CPU's copy of its line first). */
static inline uint64_t cxl_shared_load(cxl_shared_t *s, volatile uint64_t *word)
{
    if (s->flush_mode) {
        cxl_shared_lines(s, s->invalidate_op, word, sizeof(uint64_t));
        cxl_shared_mfence(s);
    }
    uint64_t value = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    cxl_shared_log(s, CXL_EV_READ, word, (int64_t)sizeof(uint64_t));
    return value;
}

/* Push number `version` (1, 2, ...) of this worker's slot w: meta (64 bytes) and the vector. */
static void cxl_seq_write(cxl_shared_t *s, int w, uint64_t version, const char *meta, const char *vector)
{
    char *copy = cxl_shared_copy(s, w, version & 1);
    volatile uint64_t *seq = (volatile uint64_t *)copy;
    char *data = copy + CXL_LINE;
    cxl_shared_store(s, seq, 2 * version - 1);
    if (!s->flush_mode) cxl_shared_sfence(s); /* the odd word before any data store, non-temporal ones too */
    memcpy(data, meta, CXL_META_BYTES);
    memcpy(data + CXL_META_BYTES, vector, s->vector_bytes);
    cxl_shared_log(s, CXL_EV_WRITE, data, (int64_t)(CXL_META_BYTES + s->vector_bytes));
    if (s->flush_mode) cxl_shared_lines(s, s->writeback_op, data, CXL_META_BYTES + s->vector_bytes);
    cxl_shared_sfence(s); /* every data store (and write-back) before the even word */
    cxl_shared_store(s, seq, 2 * version);
}

/* Read slot w's newest complete push into meta (64 bytes) and vector. Returns its version (0: never
 * pushed), or -1 if every one of `tries` attempts raced a writer (the caller decides). */
static int64_t cxl_seq_read(cxl_shared_t *s, int w, char *meta, char *vector, int tries)
{
    for (int attempt = 0; attempt < tries; attempt++) {
        volatile uint64_t *seq0 = (volatile uint64_t *)cxl_shared_copy(s, w, 0);
        volatile uint64_t *seq1 = (volatile uint64_t *)cxl_shared_copy(s, w, 1);
        uint64_t a = cxl_shared_load(s, seq0), b = cxl_shared_load(s, seq1);
        uint64_t even_a = (a & 1) ? 0 : a, even_b = (b & 1) ? 0 : b;
        volatile uint64_t *seq = even_b > even_a ? seq1 : seq0;
        uint64_t s1 = even_b > even_a ? even_b : even_a;
        if (s1 == 0) {
            /* Both words odd. Above 1 that is a race, not an empty slot: the writer completed a push
             * and began the next between the two loads (copy 0 odd, then copy 1 odd): retry. */
            if (a > 1 || b > 1) continue;
            /* never pushed, or the first push is under way: nothing complete yet */
            memset(meta, 0, CXL_META_BYTES);
            memset(vector, 0, s->vector_bytes);
            return 0;
        }
        const char *data = (const char *)seq + CXL_LINE;
        if (s->flush_mode) {
            cxl_shared_lines(s, s->invalidate_op, data, CXL_META_BYTES + s->vector_bytes);
            cxl_shared_mfence(s);
        }
        memcpy(meta, data, CXL_META_BYTES);
        memcpy(vector, data + CXL_META_BYTES, s->vector_bytes);
        cxl_shared_log(s, CXL_EV_READ, data, (int64_t)(CXL_META_BYTES + s->vector_bytes));
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the data loads come before the sequence word's reload */
        if (cxl_shared_load(s, seq) == s1) return (int64_t)(s1 / 2);
    }
    return -1;
}

/* cxl-device: the counter's fetch-and-add; returns the value before the add (logged as a load and a store). */
static inline uint64_t cxl_counter_fetch_add(cxl_shared_t *s, uint64_t n)
{
    uint64_t *counter = (uint64_t *)(s->base + s->counter_offset);
    uint64_t value = __atomic_fetch_add(counter, n, __ATOMIC_ACQ_REL);
    cxl_shared_log(s, CXL_EV_READ, counter, (int64_t)sizeof(uint64_t));
    cxl_shared_log(s, CXL_EV_FLAG_STORE, counter, (int64_t)(value + n));
    return value;
}

/* The counter's value as this worker sees it now (flush mode: a fresh load from the pool). */
static inline uint64_t cxl_counter_load(cxl_shared_t *s)
{
    return cxl_shared_load(s, cxl_shared_word(s, s->counter_offset));
}

static inline volatile uint64_t *cxl_choosing(const cxl_shared_t *s, int w)
{
    return cxl_shared_word(s, s->choosing_offset + (uint64_t)w * CXL_LINE);
}

static inline volatile uint64_t *cxl_number(const cxl_shared_t *s, int w)
{
    return cxl_shared_word(s, s->number_offset + (uint64_t)w * CXL_LINE);
}

/* Bakery doorway of worker i: take a number above every other worker's. Returns it. */
static uint64_t cxl_bakery_doorway(cxl_shared_t *s, int i)
{
    cxl_shared_store(s, cxl_choosing(s, i), 1);
    uint64_t top = 0;
    for (int j = 0; j < s->nworkers; j++) {
        if (j == i) continue;
        uint64_t n = cxl_shared_load(s, cxl_number(s, j));
        if (n > top) top = n;
    }
    cxl_shared_store(s, cxl_number(s, i), top + 1);
    cxl_shared_store(s, cxl_choosing(s, i), 0);
    return top + 1;
}

/* Bakery wait of worker i (after its doorway): -1 once it holds the lock, else the worker it still
 * waits for after `slice_ns`. Workers with dead[j] != 0 are skipped. Spins, then yields. */
static int cxl_bakery_wait(cxl_shared_t *s, int i, const unsigned char *dead, double slice_ns, uint64_t spin_iters)
{
    uint64_t mine = cxl_shared_load(s, cxl_number(s, i));
    double deadline = cxl_now_ns() + slice_ns;
    for (int j = 0; j < s->nworkers; j++) {
        if (j == i || dead[j]) continue;
        uint64_t spins = 0;
        for (;;) {
            int busy = cxl_shared_load(s, cxl_choosing(s, j)) != 0;
            if (!busy) {
                uint64_t n = cxl_shared_load(s, cxl_number(s, j));
                busy = n != 0 && (n < mine || (n == mine && j < i));
            }
            if (!busy) break;
            if (++spins < spin_iters) {
                cxl_pause();
                continue;
            }
            sched_yield();
            if ((spins & 63) == 0 && cxl_now_ns() > deadline) return j;
        }
    }
    return -1;
}

/* cxl-flush-lock's critical section and release (worker i holds the lock): read the counter, store
 * it plus n, write it back, then clear this worker's number. Returns the value before the add. */
static uint64_t cxl_bakery_add_and_release(cxl_shared_t *s, int i, uint64_t n)
{
    volatile uint64_t *counter = cxl_shared_word(s, s->counter_offset);
    uint64_t value = cxl_shared_load(s, counter);
    cxl_shared_store(s, counter, value + n);
    cxl_shared_store(s, cxl_number(s, i), 0);
    return value;
}

#endif
