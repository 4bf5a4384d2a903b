"""Where a small pool allreduce's time goes at np=2 (hw), and the candidate protocols against the kernel's.

    python benchmarks/allreduce_split.py [--sizes 4B:4KiB] [--batches 9] [--iterations 2000] [--pause 8]
                                         [--variants slot,lines-inorder,...]

Compiles a C program on the kernel headers (cxl_coll.h, cxl_pool.h: the code the MPI library
runs) and forks two ranks on one shm pool, no MPI. For each size (float32 sum) it times, in
interleaved batches so drift hits every variant alike:
  - `lines`: cxl_coll_allreduce with the whole inline area on (inline_bytes = CXL_COLL_LINES_MAX:
    inputs up to 560 B take the line-flag path; the MPI library's limit depends on the placement);
  - `slot`: the same call with inline_bytes 0 (the slot path: copy-in, the flag's release store,
    wait, fold with this rank's block from send);
  - `slot-steps`, `lines-steps`: the two paths' steps one by one, timed with the time stamp
    counter: claim + copy-in, publish, wait (until the peer's flag shows), fold; publish, read
    (poll until every line shows its epoch, copy the payloads out), fold;
  - the slot path changed in one thing each: `slot-own-slot` folds this rank's block from its own
    slot (which the peer reads at the same time), `slot-sfence` publishes through cxl_publish (an
    sfence before the flag), `slot-nt` copies in with non-temporal stores at every size,
    `slot-direct-fold` folds by one loop straight into recv; `slot-nt-no-prefetch` is `slot-nt`
    without the kernel's prefetch of the peer's lines after non-temporal copy-ins; `slot-large`
    and `slot-nt-large` take the large algorithm (reduce-scatter + allgather of shares,
    CXLSIM_MPI_ALLREDUCE_LARGE=0) with plain and non-temporal copy-ins;
  - line-flag candidates in a mapping of their own (so beyond 560 B too): `poll-last` polls the
    writer's last line alone and then copies every line (release/acquire on that line orders the
    rest), `poll-pause` polls every line with --pause pauses between polls, `lines-inorder` waits
    for the writer's lines one by one in its order and copies each out as it shows (one line polled
    at a time, not all), `lines-inorder-pf` also prefetches the 8 lines after each line that shows;
  - `slot-pfw`: the slot path after a prefetchw of the call's slot lines and flag line (their
    upgrades at once, the flag's beside the data's); `slot-spec`: the slot path whose wait
    prefetches the peer's lines on every poll (lines it finished come while its flag travels),
    `slot-spec8` on every 8th poll, `slot-spec-1k` its first 1 KiB only;
  - the fold's width: the kernel's folds are compiled for AVX2 too and the loader picks that clone
    (cxl_reduce.h), while `slot-direct-fold`'s loop is this program's baseline build (16-byte SSE2
    vectors); `slot-avx2` and `slot-avx512` fold the two blocks by a loop compiled for 32- and
    64-byte vectors, `slot-pf` prefetches every line of the peer's block after its flag and folds
    with the kernel, and `-pf` adds that prefetch to the wide folds;
  - `allgather`, `allgather-nt`: cxl_coll_allgather with plain and non-temporal copy-ins (the
    library's copy-in rule serves every collective).
--variants times only the named ones (and `lines`, the reference), still interleaved batch by batch.
Every allreduce variant's result is compared bitwise with `lines`' (RESULTS DIFFER otherwise; a
test runs this at the inline area's edges). Prints the flag round trip (the host placement by
mpi_interpose.py's rule: fast below 200 ns, the cores share a cache; slow below 2 us; disturbed
above), probed again before and after each size (a row whose probes disagree is "changed"), and
the load average; then per size each variant's batch mean and, in a second table, its per-call
median (each call timed alone: a descheduled rank moves it least), median [min-max] over batches,
in ns per call.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from cxlsim.units import format_size, parse_sizes
from mpi_interpose import placement_of  # the benchmark beside this one: the same placement rule

EMULATOR = Path(__file__).resolve().parent.parent / "cxlsim" / "emulator"

PROGRAM = r"""
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <x86intrin.h>
#include "cxl_pool.h"
#include "cxl_coll.h"

enum { LINES, SLOT, SLOT_STEPS, LINES_STEPS, SLOT_OWN_SLOT, SLOT_SFENCE, SLOT_NT, SLOT_DIRECT_FOLD, POLL_LAST,
       POLL_PAUSE, ALLGATHER, ALLGATHER_NT, SLOT_NT_NO_PREFETCH, SLOT_LARGE, SLOT_NT_LARGE, CHUNK_1K, CHUNK_512,
       LINES_INORDER, LINES_INORDER_PF, SLOT_PFW, SLOT_SPEC, SLOT_SPEC8, SLOT_SPEC_1K, SLOT_PF, SLOT_AVX2,
       SLOT_AVX2_PF, SLOT_AVX512, SLOT_AVX512_PF, NVARIANTS };
static const char *const names[NVARIANTS] = {"lines", "slot", "slot-steps", "lines-steps", "slot-own-slot",
                                             "slot-sfence", "slot-nt", "slot-direct-fold", "poll-last", "poll-pause",
                                             "allgather", "allgather-nt", "slot-nt-no-prefetch", "slot-large",
                                             "slot-nt-large", "chunk-flags-1k", "chunk-flags-512", "lines-inorder",
                                             "lines-inorder-pf", "slot-pfw", "slot-spec",
                                             "slot-spec8", "slot-spec-1k", "slot-pf", "slot-avx2",
                                             "slot-avx2-pf", "slot-avx512", "slot-avx512-pf"};
static int chosen[NVARIANTS]; /* the variants this run times (argv[4]: names, or "all"); lines always */
static double steps[2][4]; /* ticks per variant's step, summed over a batch */

/* The candidate line-flag protocols: lines of 56 payload bytes + an epoch, as the kernel's, in
 * their own shared mapping of CAND_LINES lines per rank and half, so sizes beyond the inline area
 * can be tried and no epoch word ever holds slot data. */
#define CAND_LINES 80
static char *cand_area, *chunk_area;
static int pause_polls; /* poll-pause: pauses between two polls of every line */
static char *cand_line(int r, uint64_t round, uint64_t k)
{
    return cand_area + (((uint64_t)r * 2 + (round & 1)) * CAND_LINES + k) * CXL_LINE;
}

static char *chunk_line(int r, uint64_t round, uint64_t k)
{
    return chunk_area + (((uint64_t)r * 2 + (round & 1)) * CAND_LINES + k) * CXL_LINE;
}

static void cand_publish(cxl_coll_t *c, uint64_t e, uint64_t round, const char *src, uint64_t n)
{
    for (uint64_t k = 0, at = 0; at < n || k == 0; k++, at += CXL_COLL_LINE_PAYLOAD) {
        char *line = cand_line(c->pool.rank, round, k);
        memcpy(line, src + at, n - at < CXL_COLL_LINE_PAYLOAD ? n - at : CXL_COLL_LINE_PAYLOAD);
        __atomic_store_n(cxl_coll_line_epoch(line), e, __ATOMIC_RELEASE);
    }
    __atomic_store_n(cxl_flag(&c->pool, c->pool.rank), cxl_coll_written(e), __ATOMIC_RELEASE);
}

/* Wait for rank r's lines of step e: poll the last line's epoch alone (poll-last: the release
 * store and acquire load of it make every earlier store of the writer's visible), or every line's
 * with pause_polls pauses between polls (poll-pause); then copy the payloads out. */
static void cand_read(int how, int r, uint64_t e, uint64_t round, char *out, uint64_t n)
{
    uint64_t lines = n ? (n + CXL_COLL_LINE_PAYLOAD - 1) / CXL_COLL_LINE_PAYLOAD : 1;
    char *first = cand_line(r, round, 0);
    if (how == POLL_LAST) {
        while (__atomic_load_n(cxl_coll_line_epoch(first + (lines - 1) * CXL_LINE), __ATOMIC_ACQUIRE) < e) cxl_pause();
    } else {
        for (;;) {
            uint64_t oldest = UINT64_MAX;
            for (uint64_t k = 0; k < lines; k++) {
                uint64_t seen = __atomic_load_n(cxl_coll_line_epoch(first + k * CXL_LINE), __ATOMIC_RELAXED);
                oldest = seen < oldest ? seen : oldest;
            }
            if (oldest >= e) break;
            for (int i = 0; i < pause_polls; i++) cxl_pause();
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
    }
    for (uint64_t k = 0, at = 0; at < n; k++, at += CXL_COLL_LINE_PAYLOAD)
        memcpy(out + at, first + k * CXL_LINE, n - at < CXL_COLL_LINE_PAYLOAD ? n - at : CXL_COLL_LINE_PAYLOAD);
}

/* lines-inorder: the reader waits for the writer's lines one by one, in the writer's order, and
 * copies each out as soon as its epoch shows, so it polls one line the writer may still be writing
 * instead of all of them; -pf: once line k shows, it prefetches lines k+1..k+8 (the writer is past
 * k: those are written or being written), so their transfers overlap. Full lines are written by a
 * constant-size copy (inline stores) before their epoch. */
static void cand_publish_full(cxl_coll_t *c, uint64_t e, uint64_t round, const char *src, uint64_t n)
{
    for (uint64_t k = 0, at = 0; at < n || k == 0; k++, at += CXL_COLL_LINE_PAYLOAD) {
        char *line = cand_line(c->pool.rank, round, k);
        if (n - at >= CXL_COLL_LINE_PAYLOAD) memcpy(line, src + at, CXL_COLL_LINE_PAYLOAD);
        else memcpy(line, src + at, n - at);
        __atomic_store_n(cxl_coll_line_epoch(line), e, __ATOMIC_RELEASE);
    }
    __atomic_store_n(cxl_flag(&c->pool, c->pool.rank), cxl_coll_written(e), __ATOMIC_RELEASE);
}

static void cand_read_inorder(int prefetch, int r, uint64_t e, uint64_t round, char *out, uint64_t n)
{
    uint64_t lines = n ? (n + CXL_COLL_LINE_PAYLOAD - 1) / CXL_COLL_LINE_PAYLOAD : 1;
    char *first = cand_line(r, round, 0);
    for (uint64_t k = 0, at = 0; k < lines; k++, at += CXL_COLL_LINE_PAYLOAD) {
        char *line = first + k * CXL_LINE;
        while (__atomic_load_n(cxl_coll_line_epoch(line), __ATOMIC_ACQUIRE) < e) cxl_pause();
        if (prefetch)
            for (uint64_t j = k + 1; j <= k + 8 && j < lines; j++) __builtin_prefetch(first + j * CXL_LINE, 0, 3);
        if (n - at >= CXL_COLL_LINE_PAYLOAD) memcpy(out + at, line, CXL_COLL_LINE_PAYLOAD);
        else if (n > at) memcpy(out + at, line, n - at);
    }
}

static void cand_lines_inorder(cxl_coll_t *c, int prefetch, const char *send, char *recv, uint64_t count)
{
    uint64_t round = 0;
    char peer[CAND_LINES * CXL_COLL_LINE_PAYLOAD] __attribute__((aligned(64)));
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    cand_publish_full(c, e, round, send, count * 4);
    cand_read_inorder(prefetch, 1 - c->pool.rank, e, round, peer, count * 4);
    const char *blocks[2] = {c->pool.rank == 0 ? send : peer, c->pool.rank == 0 ? peer : send};
    cxl_coll_note_all_written(c, e);
    cxl_fold(CXL_F32, CXL_SUM, recv, blocks, 2, count);
}

/* chunk-flags: the slot path with a flag per chunk of `chunk` bytes, in a mapping of its own (data
 * in lines 0-63 of the rank's half, chunk k's epoch alone in line 64 + k; the line-flag candidates'
 * mapping holds their data where these epochs are, and epochs where this holds data): the writer copies a chunk
 * in and release-stores its epoch, chunk after chunk, then publishes its flag (for the buffers'
 * reuse rule); the reader folds the peer's chunk k as soon as its epoch shows, while the peer's
 * later chunks still drain (up to 4 KiB). */
static void cand_chunks(cxl_coll_t *c, uint64_t chunk, const char *send, char *recv, uint64_t count)
{
    cxl_pool_t *p = &c->pool;
    uint64_t round = 0, n = count * 4;
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    char *mine = chunk_line(p->rank, round, 0), *peer = chunk_line(1 - p->rank, round, 0);
    for (uint64_t at = 0, k = 0; at < n; at += chunk, k++) {
        memcpy(mine + at, send + at, n - at < chunk ? n - at : chunk);
        __atomic_store_n((volatile uint64_t *)chunk_line(p->rank, round, 64 + k), e, __ATOMIC_RELEASE);
    }
    __atomic_store_n(cxl_flag(p, p->rank), cxl_coll_written(e), __ATOMIC_RELEASE);
    for (uint64_t at = 0, k = 0; at < n; at += chunk, k++) {
        volatile uint64_t *flag = (volatile uint64_t *)chunk_line(1 - p->rank, round, 64 + k);
        while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) < e) cxl_pause();
        const char *blocks[2] = {p->rank == 0 ? send + at : peer + at, p->rank == 0 ? peer + at : send + at};
        cxl_fold(CXL_F32, CXL_SUM, recv + at, blocks, 2, (n - at < chunk ? n - at : chunk) / 4);
    }
    cxl_coll_note_all_written(c, e);
}

static void cand_lines(cxl_coll_t *c, int how, const char *send, char *recv, uint64_t count)
{
    uint64_t round = 0;
    char peer[CAND_LINES * CXL_COLL_LINE_PAYLOAD] __attribute__((aligned(64)));
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    cand_publish(c, e, round, send, count * 4);
    cand_read(how, 1 - c->pool.rank, e, round, peer, count * 4);
    const char *blocks[2] = {c->pool.rank == 0 ? send : peer, c->pool.rank == 0 ? peer : send};
    cxl_coll_note_all_written(c, e);
    cxl_fold(CXL_F32, CXL_SUM, recv, blocks, 2, count);
}

/* The slot path's variants: copy-in (cxl_coll_copy_in: non-temporal from pool.nt_min_bytes),
 * publish (sfence: as cxl_publish; else the flag's release store alone, as the kernel after plain
 * copy-ins), wait, then the fold of both blocks, with no prefetch of the peer's lines: this
 * rank's from its own slot, from send through cxl_fold, or from send by one loop straight into
 * recv (direct). */
static void slot_variant(cxl_coll_t *c, const char *send, char *recv, uint64_t count, int sfence, int own_slot,
                         int direct)
{
    cxl_pool_t *p = &c->pool;
    uint64_t round = 0;
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    cxl_coll_copy_in(c, cxl_slot(p, round, p->rank), send, count * 4);
    if (sfence) cxl_publish(p, cxl_coll_written(e), round, count * 4);
    else __atomic_store_n(cxl_flag(p, p->rank), cxl_coll_written(e), __ATOMIC_RELEASE);
    cxl_coll_wait_all(c, cxl_coll_written(e));
    cxl_coll_note_all_written(c, e);
    if (!direct) {
        cxl_coll_fold_slots(c, CXL_F32, CXL_SUM, round, 0, recv, count, own_slot ? NULL : send);
        return;
    }
    const float *restrict a = (const float *)(p->rank == 0 ? send : cxl_slot(p, round, 0));
    const float *restrict b = (const float *)(p->rank == 0 ? cxl_slot(p, round, 1) : send);
    float *restrict o = (float *)recv;
    for (uint64_t i = 0; i < count; i++) o[i] = a[i] + b[i];
}

/* slot-pfw: the slot path, but the call first asks for ownership of its slot's lines and its flag
 * line (prefetchw), so their upgrades (the peer read them) go out at once and the flag's overlaps
 * the data's, instead of the flag's after them. slot-spec: the slot path whose wait prefetches the
 * peer's lines on every poll, so lines the peer has finished come while its flag is on the way. */
static inline void prefetchw(const void *at) { __asm__ volatile("prefetchw %0" : : "m"(*(const char *)at)); }

static void slot_pfw(cxl_coll_t *c, const char *send, char *recv, uint64_t count, int spec, uint64_t every,
                     uint64_t cap)
{
    cxl_pool_t *p = &c->pool;
    uint64_t round = 0, n = count * 4;
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    char *mine = cxl_slot(p, round, p->rank);
    const char *peer = cxl_slot(p, round, 1 - p->rank);
    if (!spec) {
        prefetchw((const void *)cxl_flag(p, p->rank));
        for (uint64_t at = 0; at < n; at += CXL_LINE) prefetchw(mine + at);
    }
    cxl_coll_copy_in(c, mine, send, n);
    __atomic_store_n(cxl_flag(p, p->rank), cxl_coll_written(e), __ATOMIC_RELEASE);
    if (spec) {
        volatile uint64_t *flag = cxl_flag(p, 1 - p->rank);
        for (uint64_t polls = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE) < e; polls++) {
            if (polls % every == 0)
                for (uint64_t at = 0; at < n && at < cap; at += CXL_LINE) __builtin_prefetch(peer + at, 0, 3);
            cxl_pause();
        }
    } else {
        cxl_coll_wait_all(c, cxl_coll_written(e));
    }
    cxl_coll_note_all_written(c, e);
    cxl_coll_fold_slots(c, CXL_F32, CXL_SUM, round, 0, recv, count, send);
}

/* slot-pf: the slot path, then every line of the peer's block asked for at once (prefetch) before
 * the kernel's fold. slot-avx2, slot-avx512: the fold's loop compiled for 32- and 64-byte vectors
 * (fewer loads per line, so more of the peer's lines in flight before the load queue fills); -pf:
 * with the prefetch too. The sum is a + b per element in rank order, as cxl_fold's left fold of
 * two blocks (bitwise equal, checked). */
__attribute__((target("avx2"))) static void fold2_avx2(float *restrict o, const float *restrict a,
                                                       const float *restrict b, uint64_t count)
{
    for (uint64_t i = 0; i < count; i++) o[i] = a[i] + b[i];
}

__attribute__((target("avx512f"))) static void fold2_avx512(float *restrict o, const float *restrict a,
                                                           const float *restrict b, uint64_t count)
{
    for (uint64_t i = 0; i < count; i++) o[i] = a[i] + b[i];
}

static void slot_wide(cxl_coll_t *c, const char *send, char *recv, uint64_t count, int prefetch, int width)
{
    cxl_pool_t *p = &c->pool;
    uint64_t round = 0, n = count * 4;
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    cxl_coll_copy_in(c, cxl_slot(p, round, p->rank), send, n);
    __atomic_store_n(cxl_flag(p, p->rank), cxl_coll_written(e), __ATOMIC_RELEASE);
    cxl_coll_wait_all(c, cxl_coll_written(e));
    cxl_coll_note_all_written(c, e);
    const char *peer = cxl_slot(p, round, 1 - p->rank);
    if (prefetch)
        for (uint64_t at = 0; at < n; at += CXL_LINE) __builtin_prefetch(peer + at, 0, 3);
    const float *a = (const float *)(p->rank == 0 ? send : peer), *b = (const float *)(p->rank == 0 ? peer : send);
    if (width == 32) fold2_avx2((float *)recv, a, b, count);
    else if (width == 64) fold2_avx512((float *)recv, a, b, count);
    else cxl_coll_fold_slots(c, CXL_F32, CXL_SUM, round, 0, recv, count, send);
}

static void slot_steps(cxl_coll_t *c, const char *send, char *recv, uint64_t count)
{
    cxl_pool_t *p = &c->pool;
    uint64_t round, t0 = __rdtsc();
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    cxl_coll_copy_in(c, cxl_slot(p, round, p->rank), send, count * 4);
    uint64_t t1 = __rdtsc();
    __atomic_store_n(cxl_flag(p, p->rank), cxl_coll_written(e), __ATOMIC_RELEASE); /* as cxl_coll_publish_copied */
    uint64_t t2 = __rdtsc();
    cxl_coll_wait_all(c, cxl_coll_written(e));
    cxl_coll_note_all_written(c, e);
    uint64_t t3 = __rdtsc();
    cxl_coll_fold_slots(c, CXL_F32, CXL_SUM, round, 0, recv, count, send);
    uint64_t t4 = __rdtsc();
    steps[0][0] += t1 - t0; steps[0][1] += t2 - t1; steps[0][2] += t3 - t2; steps[0][3] += t4 - t3;
}

static void lines_steps(cxl_coll_t *c, const char *send, char *recv, uint64_t count)
{
    cxl_pool_t *p = &c->pool;
    uint64_t round, t0 = __rdtsc();
    char peer[CXL_COLL_LINES_MAX];
    cxl_coll_claim(c, 1, &round);
    uint64_t e = c->epoch;
    cxl_coll_lines_publish(c, e, round, send, count * 4);
    uint64_t t1 = __rdtsc();
    cxl_coll_lines_read(c, 1 - p->rank, e, round, peer, count * 4);
    uint64_t t2 = __rdtsc();
    const char *blocks[2] = {p->rank == 0 ? send : peer, p->rank == 0 ? peer : send};
    cxl_coll_note_all_written(c, e);
    cxl_fold(CXL_F32, CXL_SUM, recv, blocks, 2, count);
    uint64_t t3 = __rdtsc();
    steps[1][0] += t1 - t0; steps[1][1] += t2 - t1; steps[1][2] += t3 - t2;
}

/* The flag round trip (ns), the best of 3 x 100 as the library's probe: a loaded machine's least
 * disturbed (both ranks call it). */
static double best_roundtrip(cxl_coll_t *c)
{
    double best = cxl_coll_flag_pingpong(c, 100);
    for (int i = 0; i < 2; i++) {
        double t = cxl_coll_flag_pingpong(c, 100);
        if (t < best) best = t;
    }
    return best;
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

int main(int argc, char **argv)
{
    int batches = atoi(argv[1]), iters = atoi(argv[2]);
    pause_polls = atoi(argv[3]);
    for (int v = 0; v < NVARIANTS; v++) {
        char list[4096];
        snprintf(list, sizeof list, ",%s,", argv[4]);
        char want[64];
        snprintf(want, sizeof want, ",%s,", names[v]);
        chosen[v] = v == LINES || strcmp(argv[4], "all") == 0 || strstr(list, want) != NULL;
    }
    /* the wide folds need their vector extension: on a CPU without it they are not run (UNSUPPORTED) */
    const int wide[] = {SLOT_AVX2, SLOT_AVX2_PF, SLOT_AVX512, SLOT_AVX512_PF};
    int unsupported[NVARIANTS] = {0};
    for (int k = 0; k < 4; k++) {
        int v = wide[k];
        unsupported[v] = !(v == SLOT_AVX2 || v == SLOT_AVX2_PF ? __builtin_cpu_supports("avx2")
                                                               : __builtin_cpu_supports("avx512f"));
        if (unsupported[v]) chosen[v] = 0;
    }
    cand_area = mmap(NULL, 2 * 2 * CAND_LINES * CXL_LINE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    chunk_area = mmap(NULL, 2 * 2 * CAND_LINES * CXL_LINE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cxl_pool_spec_t spec;
    char err[1024];
    cxl_segment_t seg;
    cxl_pool_spec_parse("shm", &spec, err, sizeof err);
    if (cxl_segment_create(&spec, 2, 1 << 16, &seg, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 2; }
    cxl_segment_unlink(&seg); /* both ranks have it mapped across the fork */
    uint64_t a = __rdtsc();
    double ta = cxl_now_ns();
    usleep(20000);
    double ns_per_tick = (cxl_now_ns() - ta) / (double)(__rdtsc() - a);
    pid_t child = fork();
    int rank = child == 0;
    cxl_pool_t p;
    memset(&p, 0, sizeof p);
    p.base = seg.base; p.flags_offset = seg.layout.flags_offset; p.data_offset = seg.layout.data_offset;
    p.slot_stride = seg.layout.slot_stride; p.nranks = 2; p.rank = rank; p.spin_iters = 4096;
    cxl_coll_t c;
    cxl_coll_init(&c, &p, 1 << 16, 30e9);
    for (int i = 0; i < 200; i++) cxl_coll_barrier(&c);
    double rt = best_roundtrip(&c);
    if (!rank) printf("ROUNDTRIP %.1f\n", rt);
    float *s = malloc(1 << 16), *r = malloc(1 << 16), *w = malloc(1 << 16), *g = malloc(1 << 17);
    double *t = malloc(sizeof(double) * NVARIANTS * batches), *parts = malloc(sizeof(double) * 7 * batches);
    double *med = malloc(sizeof(double) * NVARIANTS * batches), *call = malloc(sizeof(double) * iters);
    if (!rank) {
        printf("VARIANTS"); for (int v = 0; v < NVARIANTS; v++) printf(" %s", names[v]); printf("\n");
        printf("UNSUPPORTED"); for (int v = 0; v < NVARIANTS; v++) if (unsupported[v]) printf(" %s", names[v]); printf("\n");
    }
    for (int z = 5; z < argc; z++) {
        uint64_t bytes = strtoull(argv[z], NULL, 10), count = bytes / 4;
        for (uint64_t i = 0; i < count; i++) s[i] = (float)(rank + 1) * 0.37f + (float)(i % 7);
        int inline_ok = bytes <= CXL_COLL_LINES_MAX, bad = 0;
        double before = best_roundtrip(&c);
        for (int b = 0; b < batches; b++)
            for (int v = 0; v < NVARIANTS; v++) {
                if (!chosen[v]) { t[v * batches + b] = med[v * batches + b] = 0.0 / 0.0; continue; }
                memset(steps, 0, sizeof steps);
                memset(w, 0, bytes);
                c.inline_bytes = v == LINES ? CXL_COLL_LINES_MAX : 0;
                c.pool.nt_min_bytes = v == SLOT_NT || v == ALLGATHER_NT || v == SLOT_NT_NO_PREFETCH || v == SLOT_NT_LARGE
                                      ? CXL_LINE : 0; /* -nt: non-temporal copy-ins at every size */
                cxl_coll_barrier(&c);
                double t0 = cxl_now_ns();
                for (int i = 0; i < iters; i++) {
                    uint64_t tick = __rdtsc();
                    if (v == LINES || v == SLOT || v == SLOT_NT)
                        cxl_coll_allreduce(&c, (char *)s, (char *)(v == LINES ? r : w), count, CXL_F32, CXL_SUM, 1u << 30);
                    else if (v == SLOT_LARGE || v == SLOT_NT_LARGE) /* reduce-scatter + allgather at every size */
                        cxl_coll_allreduce(&c, (char *)s, (char *)w, count, CXL_F32, CXL_SUM, 0);
                    else if (v == SLOT_STEPS) slot_steps(&c, (char *)s, (char *)w, count);
                    else if (v == LINES_STEPS) { if (inline_ok) lines_steps(&c, (char *)s, (char *)w, count); }
                    else if (v == SLOT_OWN_SLOT) slot_variant(&c, (char *)s, (char *)w, count, 0, 1, 0);
                    else if (v == SLOT_SFENCE) slot_variant(&c, (char *)s, (char *)w, count, 1, 0, 0);
                    else if (v == SLOT_DIRECT_FOLD) slot_variant(&c, (char *)s, (char *)w, count, 0, 0, 1);
                    else if (v == SLOT_NT_NO_PREFETCH) slot_variant(&c, (char *)s, (char *)w, count, 1, 0, 0);
                    else if (v == ALLGATHER || v == ALLGATHER_NT) cxl_coll_allgather(&c, (char *)s, (char *)g, bytes);
                    else if (v == CHUNK_1K || v == CHUNK_512) { if (bytes <= 4096) cand_chunks(&c, v == CHUNK_1K ? 1024 : 512, (char *)s, (char *)w, count); }
                    else if (v == SLOT_PFW || v == SLOT_SPEC || v == SLOT_SPEC8 || v == SLOT_SPEC_1K)
                        slot_pfw(&c, (char *)s, (char *)w, count, v != SLOT_PFW, v == SLOT_SPEC8 ? 8 : 1,
                                 v == SLOT_SPEC_1K ? 1024 : UINT64_MAX);
                    else if (v == SLOT_PF) slot_wide(&c, (char *)s, (char *)w, count, 1, 16);
                    else if (v == SLOT_AVX2 || v == SLOT_AVX2_PF)
                        slot_wide(&c, (char *)s, (char *)w, count, v == SLOT_AVX2_PF, 32);
                    else if (v == SLOT_AVX512 || v == SLOT_AVX512_PF)
                        slot_wide(&c, (char *)s, (char *)w, count, v == SLOT_AVX512_PF, 64);
                    else if (v == LINES_INORDER || v == LINES_INORDER_PF) cand_lines_inorder(&c, v == LINES_INORDER_PF, (char *)s, (char *)w, count);
                    else cand_lines(&c, v, (char *)s, (char *)w, count);
                    call[i] = (double)(__rdtsc() - tick);
                }
                t[v * batches + b] = (cxl_now_ns() - t0) / iters;
                qsort(call, iters, sizeof(double), cmpd);
                med[v * batches + b] = call[iters / 2] * ns_per_tick;
                if (v != LINES && v != ALLGATHER && v != ALLGATHER_NT && (v != LINES_STEPS || inline_ok) &&
                    ((v != CHUNK_1K && v != CHUNK_512) || bytes <= 4096))
                    bad |= memcmp(r, w, bytes) != 0;
                if (v == SLOT_STEPS) for (int k = 0; k < 4; k++) parts[k * batches + b] = steps[0][k] * ns_per_tick / iters;
                if (v == LINES_STEPS) for (int k = 0; k < 3; k++) parts[(4 + k) * batches + b] = steps[1][k] * ns_per_tick / iters;
            }
        double after = best_roundtrip(&c);
        if (rank) continue;
        printf("SIZE %llu%s %.0f %.0f", (unsigned long long)bytes, bad ? " MISMATCH" : "", before, after);
        for (int v = 0; v < 2 * NVARIANTS + 7; v++) {
            double *row = v < NVARIANTS ? t + v * batches : v < 2 * NVARIANTS ? med + (v - NVARIANTS) * batches
                                                                               : parts + (v - 2 * NVARIANTS) * batches;
            int steps_of_lines = v < 2 * NVARIANTS ? v % NVARIANTS == LINES_STEPS : v - 2 * NVARIANTS >= 4;
            int steps_of_slot = v >= 2 * NVARIANTS && v - 2 * NVARIANTS < 4;
            if ((steps_of_lines && (!inline_ok || !chosen[LINES_STEPS])) || (steps_of_slot && !chosen[SLOT_STEPS])) {
                printf(" nan nan nan");
                continue;
            }
            qsort(row, batches, sizeof(double), cmpd);
            printf(" %.1f %.1f %.1f", row[batches / 2], row[0], row[batches - 1]);
        }
        printf("\n");
        fflush(stdout);
    }
    if (child) waitpid(child, NULL, 0);
    return 0;
}
"""
def cell(med: list[float], lo: list[float], hi: list[float], i: int) -> str:
    """Median [min-max] of column i, or a dash where the column was not measured (nan)."""
    return f"{med[i]:6.0f} [{lo[i]:4.0f}-{hi[i]:5.0f}]" if med[i] == med[i] else f"{'-':>18}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4B:4KiB")
    parser.add_argument("--batches", type=int, default=9)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--pause", type=int, default=8, help="poll-pause: pauses between two polls")
    parser.add_argument("--variants", default="all",
                        help="comma-separated variant names to time, interleaved (lines, the reference, always)")
    args = parser.parse_args()
    sizes = [n for n in parse_sizes(args.sizes) if n >= 4]
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "allreduce_split")
        Path(exe + ".c").write_text(PROGRAM)
        subprocess.run([cc, "-O3", "-std=gnu11", "-D_GNU_SOURCE", "-Wall", "-Wno-unused-function", "-I", str(EMULATOR),
                        exe + ".c", "-o", exe], check=True)
        load_before = open("/proc/loadavg").read().split()[0]
        done = subprocess.run([exe, str(args.batches), str(args.iterations), str(args.pause), args.variants,
                               *map(str, sizes)], capture_output=True, text=True, timeout=1800)
        load_after = open("/proc/loadavg").read().split()[0]
    if done.returncode != 0:
        raise SystemExit(f"the split program failed ({done.returncode}): {done.stderr}")
    lines = done.stdout.splitlines()
    roundtrip = float(lines[0].split()[1])
    variants = lines[1].split()[1:]
    unknown = set(args.variants.split(",")) - set(variants) - {"all"}
    if unknown:
        raise SystemExit(f"--variants: unknown {', '.join(sorted(unknown))} (known: {', '.join(variants)})")
    unsupported = lines[2].split()[1:]
    chosen = (set(variants) if args.variants == "all" else set(args.variants.split(",")) | {"lines"}) - set(unsupported)
    placement = placement_of(roundtrip)
    print(f"# pool allreduce at np=2, hw, float32 sum, no MPI: ns per call, median [min-max] over {args.batches} "
          f"batches of {args.iterations}; flag round trip {roundtrip:.0f} ns ({placement}: fast below 200 ns, slow "
          f"below 2 us, disturbed above); load average {load_before} before, {load_after} after (the machine may be "
          f"shared); poll-pause: {args.pause} pauses between polls. Steps are timed with rdtsc."
          + (f" Not run: {', '.join(unsupported)} (this CPU lacks their vector extension)." if unsupported else ""))
    timed = [k for k, v in enumerate(variants) if not v.endswith("-steps") and v in chosen]
    print(f"{'size':>7} " + " ".join(f"{variants[k]:>18}" for k in timed)
          + f" | slot steps: {'claim+copy-in':>13} {'publish':>7} {'wait':>6} {'fold':>6}"
          + f" | lines steps: {'publish':>7} {'read':>6} {'fold':>6}")
    nv = len(variants)
    per_call = []
    for row in lines[3:]:
        words = row.split()
        n = int(words[1])
        bad = words[2] == "MISMATCH"
        before, after = (float(x) for x in words[3 if bad else 2:][:2])
        vals = [float(x) for x in words[5 if bad else 4:]]
        where = placement_of(before) if placement_of(before) == placement_of(after) else "changed"
        where = f"{where} {before:.0f}/{after:.0f} ns"
        med = vals[0::3]
        lo, hi = vals[1::3], vals[2::3]
        steps = " ".join(f"{med[i]:>{w}.0f}" if med[i] == med[i] else f"{'-':>{w}}"
                         for i, w in zip(range(2 * nv, 2 * nv + 7), (13, 7, 6, 6, 7, 6, 6)))
        print(f"{format_size(n):>7} " + " ".join(cell(med, lo, hi, k) for k in timed)
              + f" | {'':11}{steps[:36]} | {'':12}{steps[36:]}" + ("  RESULTS DIFFER" if bad else ""))
        per_call.append(f"{format_size(n):>7} " + " ".join(cell(med, lo, hi, nv + k) for k in timed) + f"  {where}")
    print("# per-call medians (rdtsc around each call; robust to the calls a descheduled rank delays), "
          "median [min-max] over batches:")
    print(f"{'size':>7} " + " ".join(f"{variants[k]:>18}" for k in timed))
    print("\n".join(per_call))
    return 0


if __name__ == "__main__":
    sys.exit(main())
