/* cxl_ops.h: the data path of the emulated CXL pool.
 *
 * Everything here runs without the GIL. Time is in nanoseconds (CLOCK_MONOTONIC).
 *
 * Two coherence modes:
 *   hw    - plain stores and loads (CXL 3.x HDM-DB keeps caches coherent);
 *   flush - software coherence for pools without multi-host coherence:
 *           writer: data stores, write back each line (clflushopt or clwb), sfence,
 *                   flag store, write back the flag line;
 *           reader: poll the flag by invalidating its line (clflushopt or clflush),
 *                   mfence, load; once it arrives, invalidate the data lines
 *                   (clflushopt or clflush: clwb would keep a stale copy), mfence, read.
 *
 * In debug mode every step is appended to an event log (op, byte offset in the
 * pool, argument), which tests replay against a non-coherent cache model.
 *
 * Emulated CXL device timing (optional; both zero = off, the default). It makes local
 * DRAM behave like a slower CXL pool by busy-waiting on CLOCK_MONOTONIC inside the data
 * path (cxl_allgather). With L = latency_ns and B = bw_bytes_per_ns (bytes per ns = GB/s):
 *   - flag visibility: a rank treats the other ranks' flags as arrived only L ns after it
 *     observed the last of them (the loads that return the flags miss to the device; the
 *     np - 1 misses overlap, so one L per wait, not one per flag). A wait on no other rank
 *     (np = 1) costs nothing. So every flag hop, from the writer's flag store to the reader
 *     going on, costs native + L, and a bare sync (zero-byte allgather, barrier) native + L.
 *   - block reads: each of the np blocks of an allgather with nbytes > 0 costs one L when
 *     it is read (a load miss to the device), one block after the other: before each
 *     copy-out, or, in zero-copy mode, np x L before the call returns the blocks to be
 *     read in place. A zero-byte call reads no block.
 *   - copies into and out of the pool (copy-in of the rank's own block, copy-out of every
 *     block) are paced at B: each copy goes in 4 KiB chunks, and a chunk starts only once
 *     B x (time since the copy started; for a copy-out, since its L ended) covers every
 *     byte copied so far plus the chunk, so the bytes copied never run ahead of B x time.
 *     A copy of n bytes takes max(native, n / B) plus at most one chunk's native copy
 *     time; a copy-out of one block L + n / B. Stores are posted: the copy-in gets no L.
 *   - the busy-wait's own cost (cxl_calibrate_spin_overhead: its clock reads and last-poll
 *     overshoot, about 20-40 ns, measured once per process) is subtracted from every
 *     delay and moves every copy's clock origin back, so a delay of L costs L, not L + it;
 *     a copy whose n / B is below it cannot be resolved and is a plain memcpy (unpaced).
 *   Not paced: in zero-copy mode the caller's own loads and stores of the slots (the
 *   kernel cannot intercept them); they get the per-block L but run at DRAM speed. The
 *   flush-mode line operations and fences are not charged either. The wait-for-flags
 *   timeout counts only the polling, not the injected delays. The waits never yield the
 *   CPU, so with more ranks than cores (or other jobs on them) the delivered times are
 *   longer than asked; benchmarks/cxl_timing_fidelity.py measures what is delivered.
 * So one copy-mode allgather of n bytes per rank costs native sync + L (flags) + n / B
 * (copy-in) + np x (L + n / B) (copy-out). With timing off (cxl_pool_t.timed == 0) the
 * data path costs one branch more than without the feature: cxl_allgather picks the
 * untimed body, which the compiler specialises with every timing step removed.
 */
#ifndef CXLSIM_CXL_OPS_H
#define CXLSIM_CXL_OPS_H

#include <stdint.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <emmintrin.h>
#define CXL_X86 1
#else
#define CXL_X86 0
#endif

#define CXL_LINE 64

/* Line operations, also the CPU feature bits reported by cxl_cpu_features(). */
enum { CXL_OP_NONE = 0, CXL_OP_CLFLUSH = 1, CXL_OP_CLFLUSHOPT = 2, CXL_OP_CLWB = 4 };

/* Event log opcodes (debug mode). */
enum {
    CXL_EV_WRITE = 1,        /* offset, length: data stores */
    CXL_EV_WRITEBACK = 2,    /* offset, length: clwb, line stays cached */
    CXL_EV_FLUSH = 3,        /* offset, length: clflush/clflushopt, write back and drop */
    CXL_EV_SFENCE = 4,
    CXL_EV_MFENCE = 5,
    CXL_EV_FLAG_STORE = 6,   /* flag offset, epoch */
    CXL_EV_POLL_CACHED = 7,  /* flag offset, epoch: plain loads until the flag arrives */
    CXL_EV_POLL_FLUSHED = 8, /* flag offset, epoch: invalidate + mfence + load until it arrives */
    CXL_EV_READ = 9          /* offset, length: data loads */
};

static int cxl_cpu_features(void)
{
    int features = 0;
#if CXL_X86
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) && (d & (1u << 19))) features |= CXL_OP_CLFLUSH;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        if (b & (1u << 23)) features |= CXL_OP_CLFLUSHOPT;
        if (b & (1u << 24)) features |= CXL_OP_CLWB;
    }
#endif
    return features;
}

static inline void cxl_line_op(int op, const void *p)
{
#if CXL_X86
    /* Encoded by hand so no -m flags are needed: clflushopt = 66 0F AE /7, clwb = 66 0F AE /6. */
    if (op == CXL_OP_CLFLUSHOPT)
        __asm__ volatile(".byte 0x66; clflush %0" : "+m"(*(volatile char *)p));
    else if (op == CXL_OP_CLWB)
        __asm__ volatile(".byte 0x66; xsaveopt %0" : "+m"(*(volatile char *)p));
    else if (op == CXL_OP_CLFLUSH)
        __asm__ volatile("clflush %0" : "+m"(*(volatile char *)p));
#else
    (void)op; (void)p;
#endif
}

static inline uint32_t cxl_atomic_add_u32(uint32_t *p, uint32_t v)
{
    return __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL);
}

static inline void cxl_sfence(void)
{
#if CXL_X86
    __asm__ volatile("sfence" ::: "memory");
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

static inline void cxl_mfence(void)
{
#if CXL_X86
    __asm__ volatile("mfence" ::: "memory");
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

static inline void cxl_pause(void)
{
#if CXL_X86
    __asm__ volatile("pause");
#endif
}

static inline double cxl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Busy-wait until CLOCK_MONOTONIC reaches t_ns (emulated timing: no sleeping, no yielding, and
 * no pause either, so the wait ends within one clock read, about 20 ns, of t_ns). */
static inline void cxl_spin_until(double t_ns)
{
    while (cxl_now_ns() < t_ns) {
    }
}

/* What `cxl_spin_until(cxl_now_ns() + x)` costs beyond x (its clock reads and the overshoot of
 * its last poll): the median over 31 batches of 32 such waits, of 200 to 231 ns so the
 * overshoot is averaged over the clock-read phase. Emulated delays subtract it, so a delay
 * of L costs L, not L + this (about 20-40 ns). */
static double cxl_calibrate_spin_overhead(void)
{
    double batches[31];
    for (int b = 0; b < 31; b++) {
        double t0 = cxl_now_ns();
        for (int i = 0; i < 32; i++) cxl_spin_until(cxl_now_ns() + 200.0 + i);
        batches[b] = (cxl_now_ns() - t0) / 32.0 - 215.5;
    }
    for (int i = 1; i < 31; i++) /* insertion sort, then the median */
        for (int j = i; j > 0 && batches[j - 1] > batches[j]; j--) {
            double t = batches[j]; batches[j] = batches[j - 1]; batches[j - 1] = t;
        }
    return batches[15] > 0.0 ? batches[15] : 0.0;
}

#define CXL_PACE_CHUNK 4096

/* Copy n bytes paced at bw bytes/ns from start_ns (0 = now less min_ns, the busy-wait's
 * calibrated overhead): a 4 KiB chunk starts only once bw x elapsed covers every byte copied
 * so far plus the chunk. bw <= 0, or a copy whose asked time n / bw is below min_ns (which
 * the busy-wait could not resolve), is a plain memcpy. */
static void cxl_paced_copy(char *dst, const char *src, uint64_t n, double bw, double start_ns, double min_ns)
{
    if (bw <= 0.0 || (double)n / bw <= min_ns) {
        memcpy(dst, src, n);
        return;
    }
    double t0 = start_ns > 0.0 ? start_ns : cxl_now_ns() - min_ns;
    for (uint64_t done = 0; done < n;) {
        uint64_t chunk = n - done < CXL_PACE_CHUNK ? n - done : CXL_PACE_CHUNK;
        cxl_spin_until(t0 + (double)(done + chunk) / bw);
        memcpy(dst + done, src + done, chunk);
        done += chunk;
    }
}

/* The state one rank needs to run the pool allgather. */
typedef struct {
    char *base;              /* start of the mapped pool */
    uint64_t flags_offset;   /* bytes from base to rank 0's flag line */
    uint64_t data_offset;    /* bytes from base to buffer 0, slot 0 */
    uint64_t slot_stride;    /* bytes between slots, a multiple of 64 */
    int nranks;
    int rank;
    int flush_mode;          /* 0 = hw, 1 = flush */
    int writeback_op;        /* CXL_OP_*: writer's line op */
    int invalidate_op;       /* CXL_OP_*: reader's line op (must drop the line) */
    uint64_t spin_iters;     /* polls before yielding the CPU (few when ranks outnumber cores) */
    int64_t *log;            /* debug event log, 3 int64 per event, or NULL */
    int64_t log_capacity;    /* events */
    int64_t log_length;      /* events written (may exceed capacity: then the log overflowed) */
    int timed;               /* 1 if latency_ns > 0 or bw_bytes_per_ns > 0: emulated CXL timing on */
    double latency_ns;       /* injected pool access latency (see the header comment), 0 = none */
    double bw_bytes_per_ns;  /* pool copy bandwidth in bytes/ns (GB/s), 0 = not paced */
    double spin_overhead_ns; /* cxl_calibrate_spin_overhead(), subtracted from injected delays */
    uint64_t nt_min_bytes;   /* untimed copies into the pool of at least this many bytes use non-temporal
                                stores (cxl_copy_nt); 0 = never */
} cxl_pool_t;

/* Copy n bytes with non-temporal stores where dst is 16-byte aligned (the lines go to memory, not
 * Modified into this core's cache, and are not read for ownership first); the unaligned head and
 * the tail use plain stores. Weakly ordered: the sfence of cxl_publish orders them before the flag. */
static void cxl_copy_nt(char *dst, const char *src, uint64_t n)
{
#if CXL_X86
    uint64_t head = (uint64_t)(-(uintptr_t)dst & 15), i = 0;
    if (head > n) head = n;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i)), b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32)), d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    for (; i + 16 <= n; i += 16) _mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
    memcpy(dst + i, src + i, n - i);
#else
    memcpy(dst, src, n);
#endif
}

/* An untimed copy of n bytes into the pool: non-temporal from nt_min_bytes, else memcpy. */
static inline void cxl_copy_in(const cxl_pool_t *p, char *dst, const char *src, uint64_t n)
{
    if (p->nt_min_bytes && n >= p->nt_min_bytes) cxl_copy_nt(dst, src, n);
    else memcpy(dst, src, n);
}

/* Busy-wait `ns` from now, less the calibrated cost of the wait itself. */
static inline void cxl_delay(const cxl_pool_t *p, double ns)
{
    if (ns > p->spin_overhead_ns) cxl_spin_until(cxl_now_ns() + ns - p->spin_overhead_ns);
}

static inline void cxl_log(cxl_pool_t *p, int64_t op, int64_t offset, int64_t arg)
{
    if (!p->log) return;
    if (p->log_length < p->log_capacity) {
        int64_t *e = p->log + 3 * p->log_length;
        e[0] = op; e[1] = offset; e[2] = arg;
    }
    p->log_length++;
}

static inline volatile uint64_t *cxl_flag(cxl_pool_t *p, int r)
{
    return (volatile uint64_t *)(p->base + p->flags_offset + (uint64_t)r * CXL_LINE);
}

/* Slot of rank r in the buffer of data round `round` (calls with data alternate buffers; see comm.py). */
static inline char *cxl_slot(cxl_pool_t *p, uint64_t round, int r)
{
    return p->base + p->data_offset + ((round & 1) * (uint64_t)p->nranks + (uint64_t)r) * p->slot_stride;
}

static void cxl_range_op(cxl_pool_t *p, int op, const char *start, uint64_t length)
{
    if (length == 0 || op == CXL_OP_NONE) return;
    uintptr_t first = (uintptr_t)start & ~(uintptr_t)(CXL_LINE - 1);
    uintptr_t end = (uintptr_t)start + length;
    for (uintptr_t a = first; a < end; a += CXL_LINE) cxl_line_op(op, (const void *)a);
    cxl_log(p, op == CXL_OP_CLWB ? CXL_EV_WRITEBACK : CXL_EV_FLUSH, (int64_t)(start - p->base), (int64_t)length);
}

/* Has a flag (or a line's epoch word) that reads `seen` reached `epoch`? Flags only grow within a job, and no rank's
 * flag runs more than a few steps ahead of a value another rank waits for (every step waits for every rank's flag of
 * the step before or the one before that), so "reached" is: at most CXL_EPOCH_AHEAD ahead, modulo 2^64. Within one
 * job that is `seen >= epoch` (its epochs never come near 2^64). A value left in the pool's memory by an earlier job
 * counts only if it lies in that window above what this job waits for: the MPI library starts each pool's epochs at
 * a base drawn from its job nonce (cxl_coll_start_epochs), so a left value is behind (modulo 2^64) or far ahead, and
 * falls in the window with odds of 2^32 / 2^62 = 2^-30 per flag at the first wait on it (after which the owner's own
 * publish has overwritten it). A pool whose epochs start at 0 (the Python kernels') sees the same as before: zeroed
 * flags are behind every epoch >= 1. */
#define CXL_EPOCH_AHEAD (UINT64_C(1) << 32)
static inline int cxl_epoch_reached(uint64_t seen, uint64_t epoch)
{
    return seen - epoch < CXL_EPOCH_AHEAD;
}

/* Make this rank's slot of `round` (already written, `nbytes` long) visible and publish `epoch`. */
static void cxl_publish(cxl_pool_t *p, uint64_t epoch, uint64_t round, uint64_t nbytes)
{
    char *slot = cxl_slot(p, round, p->rank);
    volatile uint64_t *flag = cxl_flag(p, p->rank);
    cxl_log(p, CXL_EV_WRITE, (int64_t)(slot - p->base), (int64_t)nbytes);
    if (p->flush_mode) cxl_range_op(p, p->writeback_op, slot, nbytes);
    cxl_sfence(); /* orders clflushopt/clwb and any non-temporal stores of memcpy before the flag */
    cxl_log(p, CXL_EV_SFENCE, 0, 0);
    __atomic_store_n(flag, epoch, __ATOMIC_RELEASE);
    cxl_log(p, CXL_EV_FLAG_STORE, (int64_t)((char *)flag - p->base), (int64_t)epoch);
    if (p->flush_mode) cxl_range_op(p, p->writeback_op, (const char *)flag, sizeof(uint64_t));
}

/* One poll's back-off in a wait: a pause for the first spin_iters polls, then a yield of the CPU per
 * poll, with the clock read every 64th poll after the spin: *deadline (< 0: not set) is set
 * timeout_ns ahead at the first read. Returns 1 once the deadline has passed (the wait times out). */
static inline int cxl_backoff(const cxl_pool_t *p, uint64_t spins, double *deadline, double timeout_ns)
{
    if (spins < p->spin_iters) {
        cxl_pause();
        return 0;
    }
    sched_yield();
    if ((spins & 63) == 0) {
        double now = cxl_now_ns();
        if (*deadline < 0) *deadline = now + timeout_ns;
        else if (now > *deadline) return 1;
    }
    return 0;
}

/* Wait until every rank published `epoch` (cxl_epoch_reached). Returns -1 on success, else the first missing rank
 * after `timeout_ns`. Spins first (a pause per poll), then yields the CPU between polls. */
static int cxl_wait_all(cxl_pool_t *p, uint64_t epoch, double timeout_ns)
{
    double deadline = -1.0;
    for (int r = 0; r < p->nranks; r++) {
        if (r == p->rank) continue;
        volatile uint64_t *flag = cxl_flag(p, r);
        uint64_t spins = 0;
        for (;;) {
            if (p->flush_mode) {
                cxl_line_op(p->invalidate_op, (const void *)flag);
                cxl_mfence();
            }
            if (cxl_epoch_reached(__atomic_load_n(flag, __ATOMIC_ACQUIRE), epoch)) break;
            if (cxl_backoff(p, ++spins, &deadline, timeout_ns)) return r;
        }
        cxl_log(p, p->flush_mode ? CXL_EV_POLL_FLUSHED : CXL_EV_POLL_CACHED,
                (int64_t)((char *)flag - p->base), (int64_t)epoch);
    }
    return -1;
}

/* After the flags: drop stale copies of the other ranks' slots (flush mode only). */
static void cxl_acquire_slots(cxl_pool_t *p, uint64_t round, uint64_t nbytes)
{
    if (!p->flush_mode) return;
    for (int r = 0; r < p->nranks; r++)
        if (r != p->rank) cxl_range_op(p, p->invalidate_op, cxl_slot(p, round, r), nbytes);
    cxl_mfence();
    cxl_log(p, CXL_EV_MFENCE, 0, 0);
}

/* Copy every slot of `round` to recv, block r at recv + r * nbytes, except block `skip` (-1: none).
 * timed: charge each block one pool latency, then pace its copy (see the header comment). */
static inline __attribute__((always_inline)) void cxl_copy_out_impl(cxl_pool_t *p, uint64_t round, char *recv,
                                                                    uint64_t nbytes, int skip, const int timed)
{
    for (int r = 0; r < p->nranks; r++) {
        if (r == skip) continue;
        const char *slot = cxl_slot(p, round, r);
        if (timed) {
            double start = cxl_now_ns() + p->latency_ns - p->spin_overhead_ns;
            if (p->latency_ns > p->spin_overhead_ns) cxl_spin_until(start);
            cxl_paced_copy(recv + (uint64_t)r * nbytes, slot, nbytes, p->bw_bytes_per_ns, start,
                           p->spin_overhead_ns);
        } else {
            memcpy(recv + (uint64_t)r * nbytes, slot, nbytes);
        }
        cxl_log(p, CXL_EV_READ, (int64_t)(slot - p->base), (int64_t)nbytes);
    }
}

#define CXL_KEEP_CHUNK 16384

/* Copy n bytes from src into this rank's slot (non-temporal from nt_min_bytes, as cxl_copy_in) and into
 * own (plain stores), 16 KiB at a time, so the second copy reads the chunk from L1 instead of reading
 * src or the slot again: an allgather's own block goes straight from the send buffer to recv in the
 * copy-in's pass. own == src (MPI_IN_PLACE) copies into the slot alone. */
static void cxl_copy_in_keep(const cxl_pool_t *p, char *slot, char *own, const char *src, uint64_t n)
{
    int nt = p->nt_min_bytes && n >= p->nt_min_bytes;
    if (own == src) {
        cxl_copy_in(p, slot, src, n);
        return;
    }
    for (uint64_t off = 0; off < n; off += CXL_KEEP_CHUNK) {
        uint64_t len = n - off < CXL_KEEP_CHUNK ? n - off : CXL_KEEP_CHUNK;
        if (nt) cxl_copy_nt(slot + off, src + off, len);
        else memcpy(slot + off, src + off, len);
        memcpy(own + off, src + off, len);
    }
}

/* Zero-copy calls leave the result in the pool, to be read in place right after the call. When the
 * blocks went in with non-temporal stores (copies of at least nt_min_bytes: the slow placement), they
 * are in memory, in no cache, own block included, and the caller's read pass takes one memory miss
 * after another (np 2, 8 KiB: reading the own block 0.6-0.85 us where a cached one takes 0.07).
 * Prefetching the blocks the caller will read into L2 (prefetcht1) once their flags arrived issues those
 * misses together. np 2, slow placement, view call + one read pass over every slot, own included (a
 * prefetch of the own slot after its publish, since dropped: see below), mean of the ranks' medians
 * (benchmarks/pool_kernels_ab.c, load 4-10), without ->
 * with: allgather 3.12 -> 1.80 us at 8 KiB, 6.50 -> 4.95 at 32 KiB, 11.4 -> 9.9 at 64 KiB, 20.3 -> 17.9
 * at 128 KiB, no gain from 256 KiB per block (hence CXL_VIEW_PREFETCH_BYTES in all); broadcast 1.06 ->
 * 0.90 and alltoall 1.91 -> 1.46 at 8 KiB. The caller reads its own block from its send buffer
 * (ZeroCopyResult.rows), so the allgather prefetches the others' slots only: with the own slot's
 * prefetch as well, zc + read of the rows took 1.52 / 3.95 / 15.5 us at 8 / 32 / 128 KiB, without it
 * 1.18 / 3.33 / 13.0 (non-temporal copy-ins, load 10.5, probes disturbed; copy + read 2.46 / 5.57 / 24.4).
 * With plain copy-ins (the fast placement) the blocks sit in
 * the writers' caches and prefetching measured no gain, so it is off then, as in flush mode (whose
 * reads follow invalidations) and with emulated timing (which charges the reads itself). */
#define CXL_VIEW_PREFETCH_BYTES (256u << 10)


/* Whether a zero-copy call's copy-in into the pool streams (cxl_copy_nt): as every copy-in, from the pool's
 * nt_min_bytes (the slow placement's choice: PoolComm.choose_copy_in, pools.c's probe), and never otherwise.
 * Until session 29 the views also streamed in any placement for blocks of 16 KiB (broadcast: 8 KiB) and up whose
 * result was at most CXL_VIEW_PREFETCH_BYTES: measured then (benchmarks/pool_kernels_ab.c, fast placement, load
 * 12-15) streamed beat plain at 16-128 KiB, allgather 64 KiB 8.88 against 11.99 us. Re-measured (session 29, 18:40
 * UTC, np 2, fast placement, probes 87-111 ns, load 0.6; benchmarks/pool_collectives_vs_mpi.py, six interleaved pairs
 * of runs against a build without that rule; copy + read over zero-copy, the median over runs): streamed 0.58-0.65x
 * (allgather 16-128 KiB), 0.60-0.70x (alltoall), 0.54-0.62x (broadcast 8-256 KiB); plain 1.23-1.55x, 1.17-1.51x,
 * 1.03-1.29x; zero-copy allgather 64 KiB 7.60 us streamed against 3.39 plain. Under a niced CPU load of 2.2 alike
 * (streamed 0.50-0.84x, plain 0.99-2.17x). Not in flush mode or with emulated timing (their copies are their own).
 * Every rank computes it alike from the size. */
static inline int cxl_view_streams(const cxl_pool_t *p, uint64_t block_bytes)
{
    return !p->flush_mode && !p->timed && p->nt_min_bytes && block_bytes >= p->nt_min_bytes;
}

/* Whether a zero-copy caller prefetches the blocks it will read into L2 (see CXL_VIEW_PREFETCH_BYTES): after
 * streamed copy-ins, while the blocks read are at most CXL_VIEW_PREFETCH_BYTES. */
static inline int cxl_view_prefetch_on(const cxl_pool_t *p, uint64_t block_bytes, uint64_t blocks)
{
    return cxl_view_streams(p, block_bytes) && block_bytes * blocks <= CXL_VIEW_PREFETCH_BYTES;
}

static inline void cxl_prefetch_l2(const char *start, uint64_t n)
{
    for (uint64_t off = 0; off < n; off += CXL_LINE) __builtin_prefetch(start + off, 0, 2);
}

/* The body of cxl_allgather, specialised for timed = 0 (the plain path) and timed = 1. Untimed with
 * the event log off, a copy-mode call takes its own block from send in the copy-in's pass
 * (cxl_copy_in_keep) and copies out only the other ranks' slots; the logged and timed paths read
 * every slot, as the cache model and the DES's programs describe. */
static inline __attribute__((always_inline)) int cxl_allgather_impl(cxl_pool_t *p, uint64_t epoch, uint64_t round,
                                                                    const char *send, char *recv,
                                                                    uint64_t nbytes, double timeout_ns,
                                                                    const int timed)
{
    const int keep_own = !timed && !p->log && send && recv && nbytes;
    if (send && nbytes) {
        if (timed) cxl_paced_copy(cxl_slot(p, round, p->rank), send, nbytes, p->bw_bytes_per_ns, 0.0,
                                  p->spin_overhead_ns);
        else if (keep_own) cxl_copy_in_keep(p, cxl_slot(p, round, p->rank), recv + (uint64_t)p->rank * nbytes,
                                            send, nbytes);
        else cxl_copy_in(p, cxl_slot(p, round, p->rank), send, nbytes);
    }
    cxl_publish(p, epoch, round, nbytes);
    /* the others' blocks only: the caller reads its own from send (ZeroCopyResult.rows) */
    const int prefetch = !timed && !recv && cxl_view_prefetch_on(p, nbytes, (uint64_t)p->nranks);
    int missing = cxl_wait_all(p, epoch, timeout_ns);
    if (missing >= 0) return missing;
    if (timed && p->nranks > 1)
        cxl_delay(p, p->latency_ns); /* the flags become visible L after the last one showed */
    cxl_acquire_slots(p, round, nbytes);
    if (recv) {
        cxl_copy_out_impl(p, round, recv, nbytes, keep_own ? p->rank : -1, timed);
    } else {
        for (int r = 0; prefetch && r < p->nranks; r++)
            if (r != p->rank) cxl_prefetch_l2(cxl_slot(p, round, r), nbytes);
        if (timed && nbytes)  /* the caller's first load of each block misses */
            cxl_delay(p, (double)p->nranks * p->latency_ns);
        for (int r = 0; r < p->nranks; r++)
            cxl_log(p, CXL_EV_READ, (int64_t)(cxl_slot(p, round, r) - p->base), (int64_t)nbytes);
    }
    return -1;
}

/* The whole allgather for one rank. send == NULL means zero-copy (the block is already in
 * the slot); recv == NULL means the caller reads the slots in place (the reads are logged,
 * since they follow). Returns -1 on success, else the first rank that did not arrive.
 * With emulated timing off (p->timed == 0) this is one branch plus the plain path. */
static int cxl_allgather(cxl_pool_t *p, uint64_t epoch, uint64_t round, const char *send, char *recv,
                         uint64_t nbytes, double timeout_ns)
{
    if (p->timed) return cxl_allgather_impl(p, epoch, round, send, recv, nbytes, timeout_ns, 1);
    return cxl_allgather_impl(p, epoch, round, send, recv, nbytes, timeout_ns, 0);
}

/* Load every byte of [p, p + n) once; return the wrapping sum of its 8-byte words plus its tail
 * bytes (a checksum, so the loads stay and a stale block is detectable). The body; the
 * compiler vectorises it for whatever target the function it is inlined into has. */
static inline __attribute__((always_inline)) uint64_t cxl_read_pass_body(const char *p, uint64_t n)
{
    uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint64_t i = 0, w;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 8; k++) {
            memcpy(&w, p + i + 8 * k, 8);
            acc[k] += w;
        }
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        acc[0] += w;
    }
    for (; i < n; i++) acc[0] += (unsigned char)p[i];
    return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}

#if CXL_X86 && defined(__GNUC__)
/* The same pass compiled for AVX2 (256-bit loads): about 1.7x the SSE2 build's rate on data in
 * this core's caches (4 KiB to 1 MiB), at or above memcpy's, where the baseline x86-64 build is
 * slower than memcpy. Used only when the CPU has AVX2 (cxl_read_pass picks it at run time). */
__attribute__((target("avx2"))) static uint64_t cxl_read_pass_avx2(const char *p, uint64_t n)
{
    return cxl_read_pass_body(p, n);
}
#endif

/* cxl_read_pass_body in the widest build this CPU runs (same result either way: the sum wraps). */
static uint64_t cxl_read_pass(const char *p, uint64_t n)
{
#if CXL_X86 && defined(__GNUC__)
    static int avx2 = -1; /* racing first calls store the same answer */
    if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
    if (avx2) return cxl_read_pass_avx2(p, n);
#endif
    return cxl_read_pass_body(p, n);
}

#endif
