/* pool_kernels_ab.c: A/B runs of the pool kernels themselves (cxl_coll.h), without Python or MPI.
 *
 *   cc -O3 -I cxlsim/emulator -o /tmp/pool_kernels_ab benchmarks/pool_kernels_ab.c && /tmp/pool_kernels_ab [bytes] [nt] [slot] [variants]
 *
 * variants: the variant numbers to run, comma-separated (default: all; each is printed with its number).
 *
 * Two processes share an anonymous mapping laid out as a pool (flags at 4096, two buffers of two
 * slots of `slot` bytes, at least and by default 2 x bytes; pool_collectives_vs_mpi.py's slots are 2 MiB), pinned to CPUs 0 and 1. Per variant, in blocks of 20 calls (steady state,
 * as the OSU loop runs one side per size) repeated 20 times, each call timed alone after a pool
 * barrier, the send buffer rewritten before each call (as a validated benchmark does). Variants:
 *   allgather kernel       cxl_coll_allgather (its own block goes from send to recv in the copy-in's pass)
 *   allgather 3 copies     the same steps by hand with the own block copied out of the slot
 *   allgather pipelined    128 KiB chunks: chunk k in (own kept), published, then the peer's chunk k-1 out
 *   <coll> copy+read       the copy call, then one read pass over recv (a broadcast root reads nothing)
 *   <coll> zero-copy+read  the view call, then one read pass over the result in place (allgather: the pool's
 *                          rows 0, 1, as ZeroCopyResult.array; alltoall: see below)
 *   allreduce (float sum)  cxl_coll_allreduce of n / 4 floats (the small algorithm below 64 KiB)
 *   reduce_scatter (float sum)  cxl_coll_reduce_scatter_block of n / 4 floats (n / 8 per rank); "sfence publish,
 *                          plain wait": its steps by hand with cxl_publish's sfence and a wait without the prefetch
 *   allgather zc+read, own/peer row first   the same, the own (peer) row read first: the ranks never read
 *                          the same row at the same time
 *   allgather zc+read, own row from send    the view call, then the rows read with the own row taken from
 *                          send (the caller's buffer, as ZeroCopyResult.rows hands it out), in rank order;
 *                          "send row first" / "send row last": the own row first (last) on both ranks;
 *                          "send row, no own prefetch": the same steps by hand without the own slot's prefetch
 *   alltoall zero-copy+read  the view call (it leaves the own block out of the row: only this rank reads it),
 *                          then the column's rows read in rank order, the own block from send (as
 *                          ZeroCopyResult.rows hands it out)
 *   alltoall zc+read, own block stored   the same steps by hand with the own block stored into the row (plain
 *                          stores) and read back in place (the view call before cxl_coll_view_skips_own)
 *   <coll> zc+read, streamed (peer prefetched)   the view call's steps with the copy-in streamed (cxl_copy_nt) at any
 *                          size, the other rank's block prefetched into L2 after its flag or not (broadcast: the
 *                          view call with its streamed path forced: the root streams, the reader prefetches)
 *   broadcast zc+read, root plain   the view call with the root's copy-in made by hand before it (plain stores, or
 *                          non-temporal from nt_min_bytes, as the copy broadcast's root): the view's streamed root
 *                          against the copy's stores, the readers as the view's; its parts variant without the prefetch
 *   <coll> ..., parts      the steps by hand with a clock read between them; the broadcast's zero-copy parts follow
 *                          the view's rule (cxl_view_streams: the root streams, the readers prefetch)
 * Each block of 20 calls per variant follows a flag round-trip probe; each rank prints its figures per placement
 * (the blocks whose probes before and after are both fast, or both slow), and with AB_PER_BLOCK=1 each block's
 * medians beside its probes.
 * nt = 1: copy-ins with non-temporal stores from 2 KiB (as PoolComm.choose_copy_in picks in the slow
 * placement); nt > 1: from nt bytes; 0: plain stores; auto: per block, as pool_collectives_vs_mpi.py per round
 * (PoolComm.choose_copy_in): from 2 KiB when the slower rank's probe before the block shows the slow placement,
 * else plain. Each rank prints min, 10th percentile, median and
 * mean (OSU's figure) per variant (us), its flag round trips before and after (below 200 ns: the fast
 * placement) and the load average.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cxl_coll.h"

#define BLOCK 20
#define BLOCKS 20
#define CALLS (BLOCK * BLOCKS)
enum { AG_KERNEL, AG_THREE, AG_PIPE, AG_READ, AG_ZC, AG_ZC_OWN_FIRST, AG_ZC_PEER_FIRST, BC_READ, BC_ZC, AA_READ, AA_ZC, AG_ZC_SEND, AG_ZC_SEND_OWN_FIRST, AG_ZC_SEND_PEER_FIRST, AG_ZC_SEND_PEER_PREFETCH, AA_ZC_STORED, AR_SMALL,
       AG_ZC_PLAIN_PF, AG_ZC_NT, AG_ZC_NT_PF, AA_ZC_NT, AA_ZC_NT_PF, BC_ZC_NT,
       AG_READ_PARTS, AG_ZC_PARTS, AG_ZC_PLAIN_PARTS, AG_ZC_PREFETCH_PARTS, AG_ZC_PREFETCH_BOTH_PARTS, AG_ZC_PREFETCH_BOTH_L2_PARTS, AG_ZC_PREFETCHW_PARTS, BC_READ_PARTS, BC_ZC_PARTS, AA_READ_PARTS, AA_ZC_PARTS, BC_ZC_PLAIN,
       BC_ZC_PLAIN_PARTS, RS_KERNEL, RS_FENCED, NV };
#define PARTS_FROM AG_READ_PARTS
#define IS_PARTS(v) ((v) >= PARTS_FROM && (v) <= BC_ZC_PLAIN_PARTS && (v) != BC_ZC_PLAIN)
#define NPARTS 6
static const char *NAMES[NV] = {"allgather kernel", "allgather 3 copies", "allgather pipelined", "allgather copy+read",
                                "allgather zero-copy+read", "allgather zc+read, own row first",
                                "allgather zc+read, peer row first", "broadcast copy+read",
                                "broadcast zero-copy+read",
                                "alltoall copy+read", "alltoall zero-copy+read", "allgather zc+read, own row from send",
                                "allgather zc+read, send row first", "allgather zc+read, send row last",
                                "allgather zc+read, send row, no own prefetch", "alltoall zc+read, own block stored",
                                "allreduce (float sum)",
                                "allgather zc+read, plain, peer prefetched", "allgather zc+read, streamed",
                                "allgather zc+read, streamed, peer prefetched", "alltoall zc+read, streamed",
                                "alltoall zc+read, streamed, peer prefetched", "broadcast zc+read, streamed",
                                "allgather copy+read, parts",
                                "allgather zero-copy+read, parts", "allgather zc, own plain, parts",
                                "allgather zc, own prefetched, parts", "allgather zc, own+peer prefetched, parts",
                                "allgather zc, own+peer prefetched to L2, parts", "allgather zc, own prefetchw+plain, parts",
                                "broadcast copy+read, parts",
                                "broadcast zero-copy+read, parts", "alltoall copy+read, parts",
                                "alltoall zero-copy+read, parts", "broadcast zc+read, root plain",
                                "broadcast zc+read, root plain, parts", "reduce_scatter (float sum)",
                                "reduce_scatter, sfence publish, plain wait"};
/* The parts variants run the same steps as the kernel calls above by hand, with a clock read between
 * steps; the names of their parts (root / reader for broadcast, root 0): */
static const char *PARTS[NV][NPARTS] = {
    [AG_READ_PARTS] = {"claim+copy-in (own kept)", "publish+wait", "copy-out peer", "read recv"},
    [AG_ZC_PARTS] = {"claim+copy-in", "publish+wait", "read own slot", "read peer slot"},
    [AG_ZC_PLAIN_PARTS] = {"claim+copy-in (plain)", "publish+wait", "read own slot", "read peer slot"},
    [AG_ZC_PREFETCH_PARTS] = {"claim+copy-in", "publish+prefetch own+wait", "read own slot", "read peer slot"},
    [AG_ZC_PREFETCH_BOTH_PARTS] = {"claim+copy-in", "publish+prefetch own+wait+prefetch peer", "read own slot",
                                   "read peer slot"},
    [AG_ZC_PREFETCH_BOTH_L2_PARTS] = {"claim+copy-in", "publish+prefetch own+wait+prefetch peer", "read own slot",
                                      "read peer slot"},
    [AG_ZC_PREFETCHW_PARTS] = {"claim+prefetchw+copy-in (plain)", "publish+wait", "read own slot", "read peer slot"},
    [BC_READ_PARTS] = {"claim (root: +copy-in)", "root: publish; reader: wait", "reader: copy-out", "reader: ack",
                       "reader: read recv"},
    [BC_ZC_PARTS] = {"claim (root: +copy-in)", "root: publish; reader: wait", "reader: read slot"},
    [AA_READ_PARTS] = {"claim+copy-in (peer's block)", "publish", "own block send->recv", "wait", "copy-out peer",
                       "read recv"},
    [AA_ZC_PARTS] = {"claim+copy-in (own plain)", "publish+wait", "read own block", "read peer block"},
    [BC_ZC_PLAIN_PARTS] = {"claim (root: +copy-in)", "root: publish; reader: wait", "reader: read slot"}};
static double part_t[NV][NPARTS][BLOCK * BLOCKS];
static volatile uint64_t sink;

/* The host placement of a flag round trip (cxlsim/emulator/host.py's placement_of: fast up to 200 ns,
 * slow up to 2000 ns, disturbed above), and a block whose probes before and after differ: mixed. */
enum { FAST, SLOW, DISTURBED, MIXED };
static const char *CLASS_NAMES[] = {"fast", "slow", "disturbed", "mixed"};

static int placement_of(double roundtrip_ns)
{
    return roundtrip_ns <= 200.0 ? FAST : roundtrip_ns <= 2000.0 ? SLOW : DISTURBED;
}

static int by_value(const void *a, const void *b);

/* The calls of the blocks of class k (samples[i], call i in block i / BLOCK), sorted into out; returns their number. */
static int pick(const double *samples, const int *cls, int k, double *out)
{
    int m = 0;
    for (int i = 0; i < CALLS; i++)
        if (cls[i / BLOCK] == k) out[m++] = samples[i];
    qsort(out, (size_t)m, sizeof(double), by_value);
    return m;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The np 2 allgather with every block copied out of its slot (the path before the own block was kept). */
static void allgather_three_copies(cxl_coll_t *c, const char *send, char *recv, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    uint64_t round;
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    cxl_copy_in(p, cxl_slot(p, round, p->rank), send, n);
    cxl_publish(p, e, round, n);
    cxl_wait_all(p, e, 1e10);
    for (int r = 0; r < 2; r++) memcpy(recv + r * n, cxl_slot(p, round, r), n);
    cxl_coll_note_all_written(c, e);
}

/* Chunk k of the own block goes in (kept in recv in the same pass) and is published as epoch e + k;
 * then the peer's chunk k - 1 is copied out. The call takes epochs e .. e + K - 1 in one data round. */
static void allgather_pipelined(cxl_coll_t *c, const char *send, char *recv, uint64_t n, uint64_t chunk)
{
    cxl_pool_t *p = &c->pool;
    int me = p->rank, peer = 1 - me;
    uint64_t round, K = (n + chunk - 1) / chunk;
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    char *mine = cxl_slot(p, round, me);
    const char *theirs = cxl_slot(p, round, peer);
    for (uint64_t k = 0; k <= K; k++) {
        if (k < K) {
            uint64_t off = k * chunk, len = n - off < chunk ? n - off : chunk;
            cxl_copy_in_keep(p, mine + off, recv + me * n + off, send + off, len);
            cxl_sfence();
            __atomic_store_n(cxl_flag(p, me), e + k, __ATOMIC_RELEASE);
        }
        if (k) {
            uint64_t off = (k - 1) * chunk, len = n - off < chunk ? n - off : chunk;
            while (__atomic_load_n(cxl_flag(p, peer), __ATOMIC_ACQUIRE) < e + k - 1) cxl_pause();
            memcpy(recv + peer * n + off, theirs + off, len);
        }
    }
    c->epoch = e + K - 1;
    c->buffer_epoch[round & 1] = c->epoch;
    cxl_coll_note_all_written(c, e);
}

/* The kernels' steps at np 2, untimed, log off, one chunk, by hand, with the clock read after each step
 * into part_t[v][k][i]. */
static void run_parts(cxl_coll_t *c, int v, int i, char *send, char *recv, uint64_t n)
{
    cxl_pool_t *p = &c->pool;
    int me = p->rank, peer = 1 - me, k = 0;
    uint64_t round;
    double t = cxl_now_ns(), now;
#define PART() (now = cxl_now_ns(), part_t[v][k++][i] = now - t, t = now)
    switch (v) {
    case AG_READ_PARTS:
        cxl_coll_claim(c, 1, &round);
        cxl_copy_in_keep(p, cxl_slot(p, round, me), recv + me * n, send, n); PART();
        cxl_publish(p, c->epoch, round, n); cxl_wait_all(p, c->epoch, 1e10); cxl_coll_note_all_written(c, c->epoch); PART();
        memcpy(recv + peer * n, cxl_slot(p, round, peer), n); PART();
        sink += cxl_read_pass(recv, 2 * n); PART();
        break;
    case AG_ZC_PARTS:
    case AG_ZC_PLAIN_PARTS:
    case AG_ZC_PREFETCH_PARTS:
    case AG_ZC_PREFETCH_BOTH_PARTS:
    case AG_ZC_PREFETCH_BOTH_L2_PARTS:
    case AG_ZC_PREFETCHW_PARTS: {
        cxl_coll_claim(c, 1, &round);
        char *mine = cxl_slot(p, round, me);
        if (v == AG_ZC_PREFETCHW_PARTS)
            for (uint64_t off = 0; off < n; off += CXL_LINE) __builtin_prefetch(mine + off, 1);
        if (v == AG_ZC_PLAIN_PARTS || v == AG_ZC_PREFETCHW_PARTS) memcpy(mine, send, n);
        else cxl_copy_in(p, mine, send, n);
        PART();
        cxl_publish(p, c->epoch, round, n);
        if (v == AG_ZC_PREFETCH_PARTS || v == AG_ZC_PREFETCH_BOTH_PARTS)
            for (uint64_t off = 0; off < n; off += CXL_LINE) __builtin_prefetch(mine + off);
        if (v == AG_ZC_PREFETCH_BOTH_L2_PARTS)
            for (uint64_t off = 0; off < n; off += CXL_LINE) __builtin_prefetch(mine + off, 0, 2);
        cxl_wait_all(p, c->epoch, 1e10); cxl_coll_note_all_written(c, c->epoch);
        if (v == AG_ZC_PREFETCH_BOTH_PARTS)
            for (uint64_t off = 0; off < n; off += CXL_LINE) __builtin_prefetch(cxl_slot(p, round, peer) + off);
        if (v == AG_ZC_PREFETCH_BOTH_L2_PARTS)
            for (uint64_t off = 0; off < n; off += CXL_LINE) __builtin_prefetch(cxl_slot(p, round, peer) + off, 0, 2);
        PART();
        sink += cxl_read_pass(cxl_slot(p, round, me), n); PART();
        sink += cxl_read_pass(cxl_slot(p, round, peer), n); PART();
        break;
    }
    case BC_READ_PARTS:
    case BC_ZC_PARTS:
    case BC_ZC_PLAIN_PARTS: {
        cxl_coll_claim(c, me == 0, &round);
        uint64_t e = c->epoch;
        char *slot = cxl_slot(p, round, 0);
        if (me == 0) {
            if (v == BC_ZC_PARTS && cxl_view_streams(p, n)) cxl_copy_nt(slot, send, n);
            else cxl_copy_in(p, slot, send, n);
            PART();
            cxl_publish(p, cxl_coll_written(e), round, n); PART();
            c->epoch++;
            break;
        }
        PART();
        cxl_coll_wait_one(c, 0, cxl_coll_written(e)); PART();
        if (v == BC_READ_PARTS) {
            memcpy(recv, slot, n); PART();
            cxl_publish(p, cxl_coll_done(e), round, 0); PART();
            sink += cxl_read_pass(recv, n); PART();
        } else {
            if (v == BC_ZC_PARTS && cxl_view_prefetch_on(p, n, 1)) cxl_prefetch_l2(slot, n);
            sink += cxl_read_pass(slot, n); PART();
            c->pending_ack = cxl_coll_done(e);
            c->pending_ack_round = round;
        }
        c->epoch++;
        break;
    }
    case AA_READ_PARTS: {
        cxl_coll_claim(c, 1, &round);
        char *mine = cxl_slot(p, round, me);
        cxl_copy_in(p, mine + peer * n, send + peer * n, n); PART();
        cxl_publish(p, c->epoch, round, 2 * n); PART();
        memcpy(recv + me * n, send + me * n, n); PART();
        cxl_wait_all(p, c->epoch, 1e10); cxl_coll_note_all_written(c, c->epoch); PART();
        memcpy(recv + peer * n, cxl_slot(p, round, peer) + me * n, n); PART();
        sink += cxl_read_pass(recv, 2 * n); PART();
        break;
    }
    case AA_ZC_PARTS: {
        cxl_coll_claim(c, 1, &round);
        char *mine = cxl_slot(p, round, me);
        cxl_copy_in(p, mine + peer * n, send + peer * n, n);
        memcpy(mine + me * n, send + me * n, n); PART();
        cxl_publish(p, c->epoch, round, 2 * n); cxl_wait_all(p, c->epoch, 1e10); cxl_coll_note_all_written(c, c->epoch); PART();
        sink += cxl_read_pass(mine + me * n, n); PART();
        sink += cxl_read_pass(cxl_slot(p, round, peer) + me * n, n); PART();
        break;
    }
    }
#undef PART
}

static void run(cxl_coll_t *c, int v, char *send, char *recv, uint64_t n, uint64_t slot)
{
    int me = c->pool.rank;
    const char *out = NULL;
    switch (v) {
    case AG_KERNEL: cxl_coll_allgather(c, send, recv, n); break;
    case AG_THREE: allgather_three_copies(c, send, recv, n); break;
    case AG_PIPE: allgather_pipelined(c, send, recv, n, 131072); break;
    case AG_READ: cxl_coll_allgather(c, send, recv, n); sink += cxl_read_pass(recv, 2 * n); break;
    case AG_ZC:
        cxl_coll_allgather_step(c, send, NULL, n);
        sink += cxl_read_pass(cxl_slot(&c->pool, c->round, 0), n) + cxl_read_pass(cxl_slot(&c->pool, c->round, 1), n);
        break;
    case AG_ZC_OWN_FIRST:
        cxl_coll_allgather_step(c, send, NULL, n);
        sink += cxl_read_pass(cxl_slot(&c->pool, c->round, me), n) + cxl_read_pass(cxl_slot(&c->pool, c->round, 1 - me), n);
        break;
    case AG_ZC_PEER_FIRST:
        cxl_coll_allgather_step(c, send, NULL, n);
        sink += cxl_read_pass(cxl_slot(&c->pool, c->round, 1 - me), n) + cxl_read_pass(cxl_slot(&c->pool, c->round, me), n);
        break;
    case BC_READ: cxl_coll_broadcast(c, me == 0 ? send : recv, n, 0); if (me) sink += cxl_read_pass(recv, n); break;
    case BC_ZC: cxl_coll_broadcast_view(c, send, n, 0, &out); if (me) sink += cxl_read_pass(out, n); break;
    case AA_READ: cxl_coll_alltoall(c, send, recv, n); sink += cxl_read_pass(recv, 2 * n); break;
    case AA_ZC: /* the view call, then its rows in rank order: the own block from send (not stored, see
                 * cxl_coll_view_skips_own), the peer's from its row */
        cxl_coll_alltoall_view(c, send, n, &out);
        sink += me ? cxl_read_pass(out, n) + cxl_read_pass(send + n, n) : cxl_read_pass(send, n) + cxl_read_pass(out + slot, n);
        break;
    case AG_ZC_SEND: /* the result's own row is the caller's send buffer: read rows 0..P-1 */
        cxl_coll_allgather_step(c, send, NULL, n);
        sink += me ? cxl_read_pass(cxl_slot(&c->pool, c->round, 0), n) + cxl_read_pass(send, n)
                   : cxl_read_pass(send, n) + cxl_read_pass(cxl_slot(&c->pool, c->round, 1), n);
        break;
    case AG_ZC_SEND_OWN_FIRST:
        cxl_coll_allgather_step(c, send, NULL, n);
        sink += cxl_read_pass(send, n) + cxl_read_pass(cxl_slot(&c->pool, c->round, 1 - me), n);
        break;
    case AG_ZC_SEND_PEER_FIRST:
        cxl_coll_allgather_step(c, send, NULL, n);
        sink += cxl_read_pass(cxl_slot(&c->pool, c->round, 1 - me), n) + cxl_read_pass(send, n);
        break;
    case AG_ZC_SEND_PEER_PREFETCH: { /* the view call's steps by hand without the own slot's prefetch */
        cxl_pool_t *p = &c->pool;
        uint64_t round;
        cxl_coll_claim(c, 1, &round);
        cxl_coll_copy_in(c, cxl_slot(p, round, me), send, n);
        cxl_publish(p, cxl_coll_written(c->epoch), round, n);
        cxl_coll_wait_all(c, cxl_coll_written(c->epoch));
        cxl_coll_note_all_written(c, c->epoch);
        const char *peer = cxl_slot(p, round, 1 - me);
        if (cxl_view_prefetch_on(p, n, 2)) cxl_prefetch_l2(peer, n);
        sink += me ? cxl_read_pass(peer, n) + cxl_read_pass(send, n) : cxl_read_pass(send, n) + cxl_read_pass(peer, n);
        break;
    }
    case AA_ZC_STORED: { /* the view call's steps with the own block stored into the row and read back in place */
        cxl_pool_t *p = &c->pool;
        uint64_t round;
        cxl_coll_claim(c, 1, &round);
        char *mine = cxl_slot(p, round, me);
        cxl_coll_copy_in(c, mine + (1 - me) * n, send + (1 - me) * n, n);
        memcpy(mine + me * n, send + me * n, n);
        cxl_publish(p, cxl_coll_written(c->epoch), round, 2 * n);
        cxl_coll_wait_all(c, cxl_coll_written(c->epoch));
        cxl_coll_note_all_written(c, c->epoch);
        const char *peer = cxl_slot(p, round, 1 - me) + me * n;
        if (cxl_view_prefetch_on(p, n, 1)) cxl_prefetch_l2(peer, n);
        sink += me ? cxl_read_pass(peer, n) + cxl_read_pass(mine + me * n, n)
                   : cxl_read_pass(mine + me * n, n) + cxl_read_pass(peer, n);
        break;
    }
    case AR_SMALL: cxl_coll_allreduce(c, send, recv, n / 4, CXL_F32, CXL_SUM, 65536); break;
    case RS_KERNEL: cxl_coll_reduce_scatter_block(c, send, recv, n / 8, CXL_F32, CXL_SUM); break;
    case RS_FENCED: { /* the kernel's steps by hand (one chunk) with cxl_publish's sfence after the plain
                       * copy-in and a wait that does not prefetch the peer's block */
        cxl_pool_t *p = &c->pool;
        uint64_t round, b = n / 8 * 4;
        cxl_coll_claim(c, 1, &round);
        cxl_coll_copy_in(c, cxl_slot(p, round, me) + (1 - me) * b, send + (1 - me) * b, b);
        cxl_publish(p, cxl_coll_written(c->epoch), round, 2 * b);
        cxl_coll_wait_all(c, cxl_coll_written(c->epoch));
        cxl_coll_note_all_written(c, c->epoch);
        cxl_coll_acquire(c, round, me * b, b);
        cxl_coll_fold_slots(c, CXL_F32, CXL_SUM, round, me * b, recv, n / 8, send + me * b);
        break;
    }
    case AG_ZC_PLAIN_PF:
    case AG_ZC_NT:
    case AG_ZC_NT_PF: { /* the view call's steps by hand: the copy-in plain or streamed (cxl_copy_nt), the
                         * peer's slot prefetched into L2 after its flag or not; the rows read in rank order,
                         * the own row from send (as AG_ZC_SEND and ZeroCopyResult.rows) */
        cxl_pool_t *p = &c->pool;
        uint64_t round;
        cxl_coll_claim(c, 1, &round);
        if (v == AG_ZC_PLAIN_PF) memcpy(cxl_slot(p, round, me), send, n);
        else cxl_copy_nt(cxl_slot(p, round, me), send, n);
        cxl_publish(p, cxl_coll_written(c->epoch), round, n);
        cxl_coll_wait_all(c, cxl_coll_written(c->epoch));
        cxl_coll_note_all_written(c, c->epoch);
        const char *peer = cxl_slot(p, round, 1 - me);
        if (v != AG_ZC_NT) cxl_prefetch_l2(peer, n);
        sink += me ? cxl_read_pass(peer, n) + cxl_read_pass(send, n) : cxl_read_pass(send, n) + cxl_read_pass(peer, n);
        break;
    }
    case BC_ZC_PLAIN: { /* the view call with the root's copy-in by hand (plain stores, or non-temporal from
                         * nt_min_bytes, as the copy call's), the slot then passed as send (no copy-in): the
                         * readers prefetch where the view's rule streams the root */
        if (me == 0) cxl_copy_in(&c->pool, cxl_slot(&c->pool, c->round + 1, 0), send, n);
        cxl_coll_broadcast_view(c, me == 0 ? cxl_slot(&c->pool, c->round + 1, 0) : NULL, n, 0, &out);
        if (me) sink += cxl_read_pass(out, n);
        break;
    }
    case BC_ZC_NT: { /* the view call with its streamed path at any size (the root streams, the reader prefetches) */
        uint64_t keep = c->pool.nt_min_bytes;
        c->pool.nt_min_bytes = n;
        cxl_coll_broadcast_view(c, send, n, 0, &out);
        c->pool.nt_min_bytes = keep;
        if (me) sink += cxl_read_pass(out, n);
        break;
    }
    case AA_ZC_NT:
    case AA_ZC_NT_PF: { /* the view call's steps (own block left out) with the peer's block streamed in */
        cxl_pool_t *p = &c->pool;
        uint64_t round;
        cxl_coll_claim(c, 1, &round);
        cxl_copy_nt(cxl_slot(p, round, me) + (1 - me) * n, send + (1 - me) * n, n);
        cxl_publish(p, cxl_coll_written(c->epoch), round, 2 * n);
        cxl_coll_wait_all(c, cxl_coll_written(c->epoch));
        cxl_coll_note_all_written(c, c->epoch);
        const char *peer = cxl_slot(p, round, 1 - me) + me * n;
        if (v == AA_ZC_NT_PF) cxl_prefetch_l2(peer, n);
        sink += me ? cxl_read_pass(peer, n) + cxl_read_pass(send + n, n) : cxl_read_pass(send, n) + cxl_read_pass(peer, n);
        break;
    }
    }
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 1 << 20;
    int nt_auto = argc > 2 && strcmp(argv[2], "auto") == 0;
    uint64_t nt = argc > 2 && !nt_auto ? strtoull(argv[2], NULL, 0) : 0, slot = argc > 3 ? strtoull(argv[3], NULL, 0) : 2 * n;
    int on[NV];
    for (int v = 0; v < NV; v++) on[v] = argc <= 4;
    for (char *s = argc > 4 ? argv[4] : NULL; s && *s; s += *s == ',') {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= NV) {
            fprintf(stderr, "variants: expected variant numbers 0-%d separated by commas, got %s\n", NV - 1, argv[4]);
            return 2;
        }
        on[v] = 1;
        s = end;
    }
    if (nt == 1) nt = 2048;
    if (slot < 2 * n) slot = 2 * n;
    uint64_t total = 8192 + 4 * slot;
    char *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return 1;
    memset(base, 0, total);
    double (*trips)[BLOCKS + 1] = mmap(NULL, 2 * sizeof *trips, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if ((void *)trips == MAP_FAILED) return 1;
    pid_t child = fork();
    int rank = child == 0;
    pin(rank);
    cxl_pool_t p;
    memset(&p, 0, sizeof p);
    p.base = base; p.flags_offset = 4096; p.data_offset = 8192; p.slot_stride = slot;
    p.nranks = 2; p.rank = rank; p.spin_iters = (uint64_t)1 << 30; p.nt_min_bytes = nt;
    cxl_coll_t c;
    cxl_coll_init(&c, &p, slot, 10e9);
    /* 16 bytes past a page, as malloc'd (numpy) buffers are */
    char *send = (char *)aligned_alloc(4096, 2 * n + 4096) + 16, *recv = (char *)aligned_alloc(4096, 2 * n + 4096) + 16;
    memset(recv, 0, 2 * n);
    static double t[NV][CALLS];
    for (int b = 0; b < BLOCKS; b++) {
        trips[rank][b] = cxl_coll_flag_pingpong(&c, 2000);
        if (nt_auto) { /* both ranks decide on the slower rank's probe, as PoolComm.choose_copy_in */
            cxl_coll_barrier(&c);
            double worst = trips[0][b] > trips[1][b] ? trips[0][b] : trips[1][b];
            c.pool.nt_min_bytes = placement_of(worst) == SLOW ? 2048 : 0;
        }
        for (int v = 0; v < NV; v++)
            for (int i = b * BLOCK; on[v] && i < (b + 1) * BLOCK; i++) {
                int fill = (rank + 1 + i + v) & 255;
                memset(send, fill, 2 * n);
                cxl_coll_barrier(&c);
                double t0 = cxl_now_ns();
                if (IS_PARTS(v)) run_parts(&c, v, i, send, recv, n);
                else run(&c, v, send, recv, n, slot);
                t[v][i] = cxl_now_ns() - t0;
                if (v <= AG_READ && (unsigned char)recv[(1 - rank) * n + n - 1] != ((2 - rank + i + v) & 255)) {
                    fprintf(stderr, "rank %d: %s delivered a wrong block\n", rank, NAMES[v]);
                    return 1;
                }
            }
    }
    trips[rank][BLOCKS] = cxl_coll_flag_pingpong(&c, 2000);
    cxl_coll_barrier(&c);
    /* a block's placement: the class of the slower rank's probes before and after it, when both agree */
    int cls[BLOCKS];
    for (int b = 0; b < BLOCKS; b++) {
        int before = placement_of(trips[0][b] > trips[1][b] ? trips[0][b] : trips[1][b]);
        int after = placement_of(trips[0][b + 1] > trips[1][b + 1] ? trips[0][b + 1] : trips[1][b + 1]);
        cls[b] = before == after ? before : MIXED;
    }
    char load[64] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) { if (!fgets(load, sizeof load, f)) load[0] = 0; fclose(f); }
    static double picked[CALLS];
    for (int r = 0; r < 2; r++) {
        cxl_coll_barrier(&c);
        if (r == rank) {
            printf("rank %d, %llu B per rank, slots of %llu B, copy-in %s%.0llu%s; load %s", rank,
                   (unsigned long long)n, (unsigned long long)slot,
                   nt_auto ? "auto (non-temporal from 2048 B in slow blocks, else plain)" : nt ? "non-temporal from " : "plain",
                   (unsigned long long)nt, nt ? " B" : "", load);
            printf("  flag round trips before each block and after the last (ns, the slower rank's):");
            for (int b = 0; b <= BLOCKS; b++) printf(" %.0f", trips[0][b] > trips[1][b] ? trips[0][b] : trips[1][b]);
            printf("\n");
            for (int k = FAST; k <= SLOW; k++) {
                int blocks = 0;
                for (int b = 0; b < BLOCKS; b++) blocks += cls[b] == k;
                printf("  placement %s: %d of %d blocks%s\n", CLASS_NAMES[k], blocks, BLOCKS, blocks ? "" : " (not observed)");
                for (int v = 0; blocks && v < NV; v++) {
                    if (!on[v]) continue;
                    int m = pick(t[v], cls, k, picked);
                    double sum = 0.0;
                    for (int i = 0; i < m; i++) sum += picked[i];
                    printf("  %2d %-44s min %8.2f  q10 %8.2f  median %8.2f  mean %8.2f us\n", v, NAMES[v],
                           picked[0] / 1e3, picked[m / 10] / 1e3, picked[m / 2] / 1e3, sum / m / 1e3);
                    for (int q = 0; IS_PARTS(v) && q < NPARTS && PARTS[v][q]; q++) {
                        int mq = pick(part_t[v][q], cls, k, picked);
                        printf("    %-30s min %8.2f  q10 %8.2f  median %8.2f us\n", PARTS[v][q], picked[0] / 1e3,
                               picked[mq / 10] / 1e3, picked[mq / 2] / 1e3);
                    }
                }
            }
            if (getenv("AB_PER_BLOCK")) /* each block's median per variant, to read against its probes */
                for (int b = 0; b < BLOCKS; b++) {
                    printf("  block %2d, probes %.0f / %.0f ns:", b, trips[0][b] > trips[1][b] ? trips[0][b] : trips[1][b],
                           trips[0][b + 1] > trips[1][b + 1] ? trips[0][b + 1] : trips[1][b + 1]);
                    for (int v = 0; v < NV; v++) {
                        if (!on[v]) continue;
                        memcpy(picked, t[v] + b * BLOCK, BLOCK * sizeof(double));
                        qsort(picked, BLOCK, sizeof(double), by_value);
                        printf(" %d:%.2f", v, picked[BLOCK / 2] / 1e3);
                    }
                    printf("\n");
                }
            fflush(stdout);
        }
        cxl_coll_barrier(&c);
    }
    if (rank) _exit(0);
    waitpid(child, NULL, 0);
    return 0;
}
