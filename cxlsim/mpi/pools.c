/* pools.c: one emulated CXL pool per communicator, and what the pool can carry.
 *
 * A communicator gets its pool at its first collective that passes the per-call checks
 * (datatype, op, arguments: all of them match on every rank, so every rank sets up in the
 * same call). Set-up, collective on the communicator:
 *   1. MPI_Comm_split_type(SHARED): if the ranks do not all share this node (every rank sees
 *      the same answer: its node's group is smaller than the communicator), the communicator
 *      gets the hierarchical path of nodes.c instead (one flat pool per node);
 *   2. rank 0 creates the segment (cxl_pool.h), writes a random job nonce into its header and
 *      broadcasts its path, its status, the nonce and the settings that shape it; every other rank
 *      attaches (the last to count in unlinks it) and checks the nonce;
 *   3. one PMPI_Allreduce(MIN) agrees on whether every rank got there with the same settings.
 * The pool's epochs start from a base drawn from the nonce (cxl_coll_start_epochs), so nothing an
 * earlier job left in the same memory counts as an arrival (cxl_epoch_reached).
 * With CXLSIM_MPI_POOL_SHARED=1 the file: or dax: memory is the same on every node: step 1 is
 * skipped, rank 0 takes a region of its arena in that memory (below), every rank maps the region
 * under its own path and checks rank 0's header and nonce there, and the agreed verdict tells
 * "not the same memory" (reason unshared) from a failed set-up (reason setup).
 * The pool is cached as an attribute whose keyval copies with MPI_COMM_NULL_COPY_FN, so a
 * duplicated communicator sets up its own. Its delete callback unmaps it; MPI_Finalize
 * deletes every pool still alive before PMPI_Finalize, relying on no attribute deletion.
 */
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_COUNT */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cxlsim_mpi.h"

enum { SPIN_ITERS = 4096, OVERSUBSCRIBED_SPIN_ITERS = 8 };

_Static_assert(CXL_POOL_INLINE_AREA_BYTES == 2 * CXL_COLL_LINES_PER_HALF * CXL_LINE,
               "the pool layout's inline area holds the kernel's two halves per rank");

/* The placement probe of a new two-rank hw pool (choose_copy_in's, comm.py): above this flag
 * round trip (ns) the ranks' cores do not share a cache, and copies into the pool of at least
 * NT_SLOW_MIN_BYTES use non-temporal stores; below it plain ones. Measured in the slow placement
 * (benchmarks/allreduce_split.py, per-call medians, loaded machine): non-temporal copy-ins make
 * the 2 KiB allgather 1.66x and the 2 KiB allreduce 1.34x faster (the reader takes the lines from
 * memory instead of from the other core's cache), slower at 512 and 768 B. At 1 KiB the forked
 * kernels in allreduce_split.py were 1.09-1.17x faster with them (five runs, load 9-11), but
 * through the library (mpi_interpose.py, slow rounds, load 2-3, per-call medians) the 1 KiB
 * allreduce was 0.65-0.71 us with a 1 KiB threshold against 0.56-0.63 with this one (the 1 KiB
 * allgather 0.56-0.60 against 0.64-0.69): the allreduce is the target's closer row, so 2 KiB
 * stays. comm.py's NT_SLOW_MIN_BYTES is the same. */
#define SLOW_ROUNDTRIP_NS 200.0
#define NT_SLOW_MIN_BYTES 2048u
/* Allreduce inputs up to this many bytes take the line-flag path (cxl_coll_reduce.h): 2 of the
 * area's 10 lines per half in the fast placement (and when not probed), 3 in the slow one.
 * Measured at np 2 against the slot path (benchmarks/allreduce_split.py, per-call medians, loaded
 * machine, after the slot path's fold took this rank's block from send and folded straight into
 * recv): fast placement 1.4x faster at 4-56 B, 1.0-1.2x at 112 B, 0.8-1.1x at 168 B, slower from
 * 224 B; slow placement 1.3-1.5x faster at 4-56 B, 0.7-1.3x at 112 B (three runs), 0.94-1.0x at
 * 128-168 B, slower from 224 B (the writer's stores into lines the reader is polling bounce
 * between the cores). Through the library (mpi_interpose.py, slow placement, per-call medians)
 * the 128 B allreduce was 2.24-2.52x MPICH's on the line-flag path and 1.85-2.10x on the slot
 * path (four runs each), hence 3 lines there. */
#define INLINE_FAST_BYTES (2 * CXL_COLL_LINE_PAYLOAD)
#define INLINE_SLOW_BYTES (3 * CXL_COLL_LINE_PAYLOAD)

static int keyval = MPI_KEYVAL_INVALID;
static cxlsim_pool_t *pools; /* every live pool */
static uint64_t pools_freed;  /* how many pools were freed: a thread's remembered pool is good while this holds */
static __thread __attribute__((tls_model("initial-exec"))) struct {
    MPI_Comm comm;
    cxlsim_pool_t *pool;      /* NULL: nothing remembered */
    uint64_t freed;           /* pools_freed when it was remembered */
} last_pool;
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER; /* guards pools and keyval */
static double spin_overhead_ns = -1.0;

static void pool_free(cxlsim_pool_t *pool)
{
    /* a freed communicator's handle may come back for a new one: forget every remembered pool */
    __atomic_fetch_add(&pools_freed, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&pools_lock);
    for (cxlsim_pool_t **at = &pools; *at; at = &(*at)->next)
        if (*at == pool) {
            *at = pool->next;
            break;
        }
    pthread_mutex_unlock(&pools_lock);
    cxlsim_pool_destroy(pool);
}

static int delete_pool(MPI_Comm comm, int key, void *value, void *extra)
{
    (void)comm; (void)key; (void)extra;
    pool_free((cxlsim_pool_t *)value);
    return MPI_SUCCESS;
}

void cxlsim_pools_free_all(void)
{
    while (pools) {
        cxlsim_pool_t *pool = pools;
        PMPI_Comm_delete_attr(pool->comm, keyval); /* calls delete_pool */
        if (pools == pool) pool_free(pool);       /* (if MPI did not call it) */
    }
    if (keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&keyval);
}

/* Fill the kernel state of a mapped, agreed pool. */
static void pool_kernel(cxlsim_pool_t *pool)
{
    const cxlsim_settings_t *s = &cxlsim_settings;
    const cxl_layout_t *lay = &pool->segment.layout;
    cxl_pool_t p;
    memset(&p, 0, sizeof p);
    p.base = pool->segment.base;
    p.flags_offset = lay->flags_offset;
    p.data_offset = lay->data_offset;
    p.slot_stride = lay->slot_stride;
    p.nranks = pool->size;
    p.rank = pool->rank;
    p.flush_mode = s->flush;
    if (s->flush) {
        int features = cxl_cpu_features();
        p.writeback_op = p.invalidate_op = features & CXL_OP_CLFLUSHOPT ? CXL_OP_CLFLUSHOPT : CXL_OP_CLFLUSH;
    }
    cpu_set_t cpus;
    int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    p.spin_iters = pool->size <= cores ? SPIN_ITERS : OVERSUBSCRIBED_SPIN_ITERS;
    p.latency_ns = s->latency_ns;
    p.bw_bytes_per_ns = s->bw_bytes_per_ns;
    p.timed = s->latency_ns > 0.0 || s->bw_bytes_per_ns > 0.0;
    if (p.timed && spin_overhead_ns < 0.0) spin_overhead_ns = cxl_calibrate_spin_overhead();
    p.spin_overhead_ns = p.timed ? spin_overhead_ns : 0.0;
    cxl_coll_init(&pool->coll, &p, lay->slot_bytes, s->timeout_s * 1e9);
    cxl_coll_start_epochs(&pool->coll, pool->nonce >> 2); /* every rank has the same nonce */
    if (!p.flush_mode && !p.timed) pool->coll.inline_bytes = INLINE_FAST_BYTES; /* the slow placement: see below */
}

typedef struct {
    int status;                          /* CXL_POOL_OK or the creator's error code */
    int temporary;
    uint64_t nonce;                      /* the job nonce rank 0 wrote at CXL_POOL_NONCE_OFFSET */
    uint64_t offset;                     /* shared pools: the region's offset in the shared memory */
    char path[CXL_POOL_PATH_MAX];
    char fingerprint[512];
} setup_message_t;

/* ---- shared pools (CXLSIM_MPI_POOL_SHARED=1) ----
 * Every host maps the same file: or dax: memory under its own CXLSIM_MPI_POOL path. The memory is split into
 * one arena per world rank: world rank 0 has the first half (it is rank 0 of MPI_COMM_WORLD and of its
 * duplicates, the largest communicators: 2 x world size x slot bytes each), every other world rank an equal
 * share of the rest, all rounded down to the alignment. The pools a process creates (those of the communicators
 * it is rank 0 of) are regions of its own arena, each at the first gap between its live ones that holds it (a
 * communicator split and freed in a loop reuses its region). So no two live pools of the job overlap, with no
 * allocator shared between hosts (cross-host atomics need coherence that flush-mode memory lacks): the creator
 * broadcasts the region's offset. */
typedef struct {
    uint64_t offset, bytes;
} arena_region_t;
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static arena_region_t *arena_regions; /* this process's live regions, by offset */
static int arena_count, arena_room;

/* A region of total_bytes in this process's arena: its offset, or UINT64_MAX with err set if the arena is full. */
static uint64_t arena_take(uint64_t memory_bytes, uint64_t total_bytes, uint64_t align, char *err, size_t errlen)
{
    int world_rank = 0, world_size = 1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    uint64_t first = world_size == 1 ? memory_bytes / align * align : memory_bytes / 2 / align * align;
    uint64_t share = world_size == 1 ? 0 : (memory_bytes - first) / (uint64_t)(world_size - 1) / align * align;
    uint64_t arena = world_rank == 0 ? first : share, start = world_rank == 0 ? 0 : first + (uint64_t)(world_rank - 1) * share;
    uint64_t at = start, live = 0;
    int i = 0;
    pthread_mutex_lock(&arena_lock);
    for (; i < arena_count && at + total_bytes > arena_regions[i].offset; i++) { /* first fit */
        at = arena_regions[i].offset + arena_regions[i].bytes;
        live += arena_regions[i].bytes;
    }
    for (int j = i; j < arena_count; j++) live += arena_regions[j].bytes;
    uint64_t offset = at + total_bytes <= start + arena ? at : UINT64_MAX;
    if (offset != UINT64_MAX) {
        if (arena_count == arena_room) {
            arena_room = arena_room ? 2 * arena_room : 8;
            arena_regions = realloc(arena_regions, sizeof *arena_regions * (size_t)arena_room);
        }
        memmove(arena_regions + i + 1, arena_regions + i, sizeof *arena_regions * (size_t)(arena_count - i));
        arena_regions[i] = (arena_region_t){offset, total_bytes};
        arena_count++;
    } else {
        snprintf(err, errlen, "shared pool %.1000s: world rank %d's arena (%llu of the memory's %llu bytes, %d world "
                 "ranks) has no room for a %llu-byte region (%llu bytes taken by live pools): give the pool more "
                 "memory or a smaller CXLSIM_MPI_SLOT", cxlsim_settings.pool.text, world_rank,
                 (unsigned long long)arena, (unsigned long long)memory_bytes, world_size,
                 (unsigned long long)total_bytes, (unsigned long long)live);
    }
    pthread_mutex_unlock(&arena_lock);
    return offset;
}

/* The region at offset is free again. */
static void arena_give_back(uint64_t offset)
{
    pthread_mutex_lock(&arena_lock);
    for (int i = 0; i < arena_count; i++)
        if (arena_regions[i].offset == offset) {
            memmove(arena_regions + i, arena_regions + i + 1, sizeof *arena_regions * (size_t)(arena_count - i - 1));
            arena_count--;
            break;
        }
    if (arena_count == 0) { /* (MPI_Finalize frees every pool: nothing is left allocated) */
        free(arena_regions);
        arena_regions = NULL;
        arena_room = 0;
    }
    pthread_mutex_unlock(&arena_lock);
}

/* Flush mode: write back (the creator) or drop (the others) the header lines, so a host that does not share the
 * creator's cache coherence sees the header it wrote. */
static void header_lines(const cxl_segment_t *seg, uint64_t bytes)
{
    if (!cxlsim_settings.flush) return;
    int op = cxl_cpu_features() & CXL_OP_CLFLUSHOPT ? CXL_OP_CLFLUSHOPT : CXL_OP_CLFLUSH;
    for (uint64_t at = 0; at < bytes; at += CXL_LINE) cxl_line_op(op, seg->base + at);
    cxl_mfence();
}

/* A random job nonce, never 0 (0 is a pool of the Python twin's, or none). */
static uint64_t new_nonce(void)
{
    uint64_t nonce = 0;
    while (nonce == 0)
        if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) nonce = (uint64_t)cxl_now_ns() ^ (uint64_t)getpid();
    return nonce;
}

/* Rank 0's part of step 2 on a shared pool: a region of its arena, mapped, with a fresh header and the nonce. */
static int shared_create(cxlsim_pool_t *pool, setup_message_t *msg, char *err, size_t errlen)
{
    const cxlsim_settings_t *s = &cxlsim_settings;
    uint64_t align = s->pool.kind == CXL_POOL_DAX ? CXL_POOL_DAX_ALIGN : CXL_POOL_PAGE, bytes = 0;
    cxl_layout_t lay;
    int rc = cxl_layout_plan((uint32_t)pool->size, s->slot_bytes, align, &lay, err, errlen);
    if (rc) return rc;
    int fd = cxl_pool_open_shared(&s->pool, &bytes, err, errlen);
    if (fd < 0) return CXL_POOL_EINPUT;
    close(fd);
    if ((msg->offset = arena_take(bytes, lay.total_bytes, align, err, errlen)) == UINT64_MAX) return CXL_POOL_ERUN;
    pool->arena_region = 1;
    pool->region_offset = msg->offset;
    if ((rc = cxl_segment_map_shared(&s->pool, &lay, msg->offset, &pool->segment, err, errlen))) return rc;
    cxl_pool_write_header(&pool->segment); /* zeroes the header, attach counter and flags; not the inline area */
    cxl_pool_set_nonce(&pool->segment, msg->nonce);
    header_lines(&pool->segment, lay.data_offset);
    return CXL_POOL_OK;
}

/* Another rank's part of step 2 on a shared pool: map the region of its own path, and check that it holds rank
 * 0's header and nonce. 2: the same memory; 1: mapped, but not the same memory; 0: could not map it. */
static int shared_attach(cxlsim_pool_t *pool, const setup_message_t *msg, const cxl_layout_t *lay, char *err,
                         size_t errlen)
{
    int rc = cxl_segment_map_shared(&cxlsim_settings.pool, lay, msg->offset, &pool->segment, err, errlen);
    if (rc == CXL_POOL_EINPUT) return 0;
    if (rc) return 1; /* the memory is shorter than rank 0's region: not the same memory */
    header_lines(&pool->segment, CXL_POOL_NONCE_OFFSET + CXL_LINE);
    char why[1024] = "";
    if (cxl_pool_check_header(&pool->segment, why, sizeof why) == CXL_POOL_OK && cxl_pool_nonce(&pool->segment) == msg->nonce)
        return 2;
    snprintf(err, errlen, "shared pool %.1000s: this rank's memory does not hold rank 0's pool at offset %llu (%.600s): the "
             "ranks do not map the same memory", cxlsim_settings.pool.text, (unsigned long long)msg->offset,
             *why ? why : "another job nonce");
    return 1;
}

/* Steps 2 and 3 of the set-up; returns 2 if every rank has the pool mapped, 1 if every rank mapped one but not all
 * the same memory (shared pools), 0 if a rank could not. */
static int pool_attach_all(cxlsim_pool_t *pool)
{
    const cxlsim_settings_t *s = &cxlsim_settings;
    setup_message_t msg;
    char err[2048] = "", mine[512];
    memset(&msg, 0, sizeof msg);
    cxlsim_settings_fingerprint(mine, sizeof mine);
    int ok = 2;
    if (s->flush && !(cxl_cpu_features() & (CXL_OP_CLFLUSH | CXL_OP_CLFLUSHOPT))) {
        snprintf(err, sizeof err, "coherence flush needs clflush or clflushopt, which this CPU lacks");
        ok = 0;
    }
    if (pool->rank == 0) {
        msg.nonce = new_nonce();
        if (!ok) msg.status = CXL_POOL_ERUN;
        else if (s->pool_shared) msg.status = shared_create(pool, &msg, err, sizeof err);
        else msg.status = cxl_segment_create(&s->pool, (uint32_t)pool->size, s->slot_bytes, &pool->segment, err,
                                             sizeof err);
        if (msg.status == CXL_POOL_OK && !s->pool_shared) {
            cxl_segment_count_in(&pool->segment);
            cxl_pool_set_nonce(&pool->segment, msg.nonce);
            header_lines(&pool->segment, pool->segment.layout.data_offset);
        }
        msg.temporary = pool->segment.temporary;
        snprintf(msg.path, sizeof msg.path, "%s", pool->segment.path);
        snprintf(msg.fingerprint, sizeof msg.fingerprint, "%s", mine);
    }
    PMPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, pool->comm);
    pool->nonce = msg.nonce;
    if (msg.status != CXL_POOL_OK) {
        ok = 0;
        if (pool->rank != 0) snprintf(err, sizeof err, "rank 0 could not create the pool");
    } else if (pool->rank != 0) {
        if (strcmp(msg.fingerprint, mine) != 0) {
            snprintf(err, sizeof err, "settings differ from rank 0's: here %s, there %s", mine, msg.fingerprint);
            ok = 0;
        }
        cxl_layout_t lay;
        if (ok && cxl_layout_plan((uint32_t)pool->size, s->slot_bytes,
                                  s->pool.kind == CXL_POOL_DAX ? CXL_POOL_DAX_ALIGN : CXL_POOL_PAGE, &lay, err,
                                  sizeof err) != CXL_POOL_OK)
            ok = 0;
        if (ok && s->pool_shared) {
            ok = shared_attach(pool, &msg, &lay, err, sizeof err);
        } else if (ok) {
            if (cxl_segment_attach(msg.path, &lay, msg.temporary, &pool->segment, err, sizeof err) != CXL_POOL_OK) ok = 0;
            else header_lines(&pool->segment, CXL_POOL_NONCE_OFFSET + CXL_LINE);
            if (ok && cxl_pool_nonce(&pool->segment) != msg.nonce) {
                snprintf(err, sizeof err, "pool %.1000s: another job nonce than rank 0 wrote", msg.path);
                ok = 1;
            }
        }
    }
    int all = 0;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, pool->comm);
    if (ok < 2) cxlsim_log(1, "no pool for a communicator of %d ranks: %s", pool->size, err);
    if (all < 2) {
        cxl_segment_unmap(&pool->segment);
        if (pool->arena_region) arena_give_back(pool->region_offset); /* the region is free again */
        pool->arena_region = 0;
        if (msg.status == CXL_POOL_OK && pool->rank == 0) cxl_segment_unlink(&pool->segment);
        return all;
    }
    if (pool->rank == 0) cxl_segment_unlink(&pool->segment); /* every rank is in (idempotent) */
    return 2;
}

/* A pool struct for comm with its size, rank and world ranks, nothing mapped yet. */
static cxlsim_pool_t *pool_new(MPI_Comm comm)
{
    cxlsim_pool_t *pool = calloc(1, sizeof *pool);
    pool->comm = comm;
    PMPI_Comm_size(comm, &pool->size);
    PMPI_Comm_rank(comm, &pool->rank);
    pool->world_ranks = calloc((size_t)pool->size, sizeof(int));
    MPI_Group group, world;
    PMPI_Comm_group(comm, &group);
    PMPI_Comm_group(MPI_COMM_WORLD, &world);
    int *ranks = malloc((size_t)pool->size * sizeof(int));
    for (int r = 0; r < pool->size; r++) ranks[r] = r;
    PMPI_Group_translate_ranks(group, pool->size, ranks, world, pool->world_ranks);
    free(ranks);
    PMPI_Group_free(&group);
    PMPI_Group_free(&world);
    return pool;
}

/* The probe's round trips: cxl_coll_probe_pingpong (cxl_coll_core.h: at np > 2 ranks 0 and 1 bounce
 * their flags, spinning SPIN_ITERS polls between yields, while the others wait, yielding). */
static double probe_pingpong(cxl_coll_t *c, uint64_t iterations)
{
    return cxl_coll_probe_pingpong(c, iterations, SPIN_ITERS);
}

/* In hw mode without emulated timing, at np >= 2: time the flag round trip between ranks 0 and 1
 * (the best of 3 x 100 after 50; its largest over the ranks, so they decide alike). The stats
 * header reports the placement it shows (stats.c). At np = 2 it also picks the copy-in stores and
 * the line-flag allreduce's limit (INLINE_*_BYTES) by it; at np > 2 those stay the fast
 * placement's (the measurements below are np 2's), and the probe is only reported:
 * measured here, non-temporal copy-ins are 1.5-6x faster from 8 KiB when the round trip is slow
 * (a line Modified in the other core's cache costs far more to read than one in memory) and
 * 1.1-2.4x slower when it is fast (the cores share their cache). A round trip above
 * DISTURBED_ROUNDTRIP_NS (5x the slow placement's 350-470 ns) means a rank lost its CPU during
 * every round trip of the probe, not a placement: the probe is repeated up to PROBE_TRIES times,
 * and if every try is disturbed the plain stores stay (non-temporal copy-ins in the fast
 * placement made 2-8 KiB allreduces 1.0-1.1x MPICH's in a loaded run whose disturbed probe read as
 * slow; plain ones in the slow placement cost at most 1.3-1.7x at 2-4 KiB). Collective on pool->comm. */
#define DISTURBED_ROUNDTRIP_NS 2000.0
#define PROBE_TRIES 5
static void pool_choose_copy_in(cxlsim_pool_t *pool)
{
    cxl_coll_t *c = &pool->coll;
    if (pool->size < 2 || c->pool.flush_mode || c->pool.timed) return;
    double worst = 0.0;
    for (int try = 0; try < PROBE_TRIES && (try == 0 || worst > DISTURBED_ROUNDTRIP_NS); try++) {
        double best = probe_pingpong(c, 50);
        for (int i = 0; i < 3 && best >= 0.0; i++) {
            double t = probe_pingpong(c, 100);
            if (t < 0.0 || i == 0 || t < best) best = t;
        }
        if (best < 0.0) cxlsim_pool_abort(pool, "the pool's placement probe");
        PMPI_Allreduce(&best, &worst, 1, MPI_DOUBLE, MPI_MAX, pool->comm);
    }
    int disturbed = worst > DISTURBED_ROUNDTRIP_NS, slow = !disturbed && worst > SLOW_ROUNDTRIP_NS;
    cxlsim_stats_probe(disturbed ? CXLSIM_PLACEMENT_DISTURBED : slow ? CXLSIM_PLACEMENT_SLOW : CXLSIM_PLACEMENT_FAST,
                       worst);
    if (pool->size == 2) {
        c->pool.nt_min_bytes = slow ? NT_SLOW_MIN_BYTES : 0;
        c->inline_bytes = slow ? INLINE_SLOW_BYTES : INLINE_FAST_BYTES;
    }
    cxlsim_log(2, "pool placement probe: flag round trip %.0f ns, %s placement%s: non-temporal copy-ins from %llu B "
               "(0: never), allreduce inputs up to %llu B in the inline area%s", worst,
               disturbed ? "disturbed, no" : slow ? "slow" : "fast", pool->size == 2 ? "" : " (ranks 0 and 1)",
               (unsigned long long)c->pool.nt_min_bytes, (unsigned long long)c->inline_bytes,
               pool->size == 2 ? "" : " (np > 2: the fast placement's, whatever the probe)");
}

static void pool_map_all(cxlsim_pool_t *pool)
{
    int all = pool_attach_all(pool);
    if (all == 2) {
        pool_kernel(pool);
        pool_choose_copy_in(pool);
        pool->usable = 1;
        cxlsim_log(2, "pool for a communicator of %d ranks: %s, %llu B slots, %s", pool->size, cxlsim_settings.pool.text,
                   (unsigned long long)cxlsim_settings.slot_bytes, cxlsim_settings.flush ? "flush" : "hw");
    } else {
        pool->why = all == 1 ? CXLSIM_WHY_UNSHARED : CXLSIM_WHY_SETUP;
    }
}

cxlsim_pool_t *cxlsim_pool_flat(MPI_Comm comm)
{
    cxlsim_pool_t *pool = pool_new(comm);
    pool_map_all(pool);
    return pool;
}

void cxlsim_pool_destroy(cxlsim_pool_t *pool)
{
    cxlsim_stats_merge(pool->counts);
    if (pool->nodes) cxlsim_nodes_free(pool->nodes);
    cxl_segment_unmap(&pool->segment);
    if (pool->arena_region) arena_give_back(pool->region_offset);
    free(pool->world_ranks);
    free(pool);
}

/* The pool of a communicator: flat if its ranks share one node or one shared pool's memory, else hierarchical
 * (nodes.c). */
static cxlsim_pool_t *pool_setup(MPI_Comm comm)
{
    cxlsim_pool_t *pool = pool_new(comm);
    MPI_Comm node;
    int node_size = 0, fake = cxlsim_settings.fake_nodes;
    if (cxlsim_settings.pool_shared) { /* every node maps the memory: no split by node */
        pool_map_all(pool);
    } else {
        if (fake > 1) PMPI_Comm_split(comm, pool->rank % fake, pool->rank, &node);
        else PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        PMPI_Comm_size(node, &node_size);
        if (node_size == pool->size) {
            PMPI_Comm_free(&node);
            pool_map_all(pool);
        } else if (cxlsim_nodes_setup(pool, node)) {
            pool->usable = 1;
        } else {
            pool->why = CXLSIM_WHY_SETUP;
        }
    }
    pthread_mutex_lock(&pools_lock);
    pool->next = pools;
    pools = pool;
    pthread_mutex_unlock(&pools_lock);
    return pool;
}

/* The pool cached on comm, set up if there is none; NULL for an intercommunicator. */
static cxlsim_pool_t *pool_lookup(MPI_Comm comm)
{
    void *value;
    int found = 0, inter = 0;
    pthread_mutex_lock(&pools_lock);
    if (keyval == MPI_KEYVAL_INVALID) PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_pool, &keyval, NULL);
    pthread_mutex_unlock(&pools_lock);
    PMPI_Comm_get_attr(comm, keyval, &value, &found);
    if (found) return (cxlsim_pool_t *)value;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) return NULL;
    cxlsim_pool_t *pool = pool_setup(comm);
    cxlsim_trace_setup();
    PMPI_Comm_set_attr(comm, keyval, pool);
    return pool;
}

cxlsim_pool_t *cxlsim_pool_of(MPI_Comm comm, int *why)
{
    if (comm == MPI_COMM_NULL) {
        *why = CXLSIM_WHY_COMM;
        return NULL;
    }
    uint64_t freed = __atomic_load_n(&pools_freed, __ATOMIC_ACQUIRE);
    cxlsim_pool_t *pool = last_pool.pool;
    if (!pool || last_pool.comm != comm || last_pool.freed != freed) {
        pool = pool_lookup(comm);
        if (!pool) {
            *why = CXLSIM_WHY_COMM;
            return NULL;
        }
        last_pool.comm = comm;
        last_pool.pool = pool;
        last_pool.freed = freed;
    }
    if (!pool->usable) {
        *why = pool->why;
        return NULL;
    }
    return pool;
}

void cxlsim_pool_abort(cxlsim_pool_t *pool, const char *call)
{
    int missing[64], n = cxl_coll_missing(&pool->coll, missing, 64);
    char list[1024] = "";
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof list - 32; i++)
        used += snprintf(list + used, sizeof list - used, "%s%d (world %d)", i ? ", " : "", missing[i],
                         pool->world_ranks[missing[i]]);
    fprintf(stderr, "cxlsim-mpi: %s timed out: rank %d (world %d) of a communicator of %d ranks waited %g s for "
            "rank%s %s; aborting the job (CXLSIM_MPI_TIMEOUT)\n", call, pool->rank, pool->world_ranks[pool->rank],
            pool->size, cxlsim_settings.timeout_s, n == 1 ? "" : "s", n ? list : "(they arrived just now)");
    fflush(stderr);
    usleep(CXLSIM_ABORT_GRACE_US); /* let the process manager forward the message before it ends the job */
    PMPI_Abort(MPI_COMM_WORLD, 1);
    abort();
}

/* ---- datatypes and ops -------------------------------------------------------------------------- */

static int reduce_dtype_of(MPI_Datatype t)
{
    if (t == MPI_INT8_T || t == MPI_SIGNED_CHAR) return CXL_I8;
    if (t == MPI_UINT8_T || t == MPI_UNSIGNED_CHAR || t == MPI_BYTE) return CXL_U8;
    if (t == MPI_INT16_T || t == MPI_SHORT) return CXL_I16;
    if (t == MPI_UINT16_T || t == MPI_UNSIGNED_SHORT) return CXL_U16;
    if (t == MPI_INT32_T || t == MPI_INT) return CXL_I32;
    if (t == MPI_UINT32_T || t == MPI_UNSIGNED) return CXL_U32;
    if (t == MPI_INT64_T || t == MPI_LONG_LONG || t == MPI_LONG_LONG_INT || t == MPI_AINT || t == MPI_OFFSET ||
        t == MPI_COUNT)
        return CXL_I64;
    if (t == MPI_UINT64_T || t == MPI_UNSIGNED_LONG_LONG) return CXL_U64;
    if (t == MPI_LONG) return sizeof(long) == 8 ? CXL_I64 : CXL_I32;
    if (t == MPI_UNSIGNED_LONG) return sizeof(long) == 8 ? CXL_U64 : CXL_U32;
    if (t == MPI_FLOAT) return CXL_F32;
    if (t == MPI_DOUBLE) return CXL_F64;
    return -1;
}

int cxlsim_reduce_op(MPI_Op op)
{
    if (op == MPI_SUM) return CXL_SUM;
    if (op == MPI_PROD) return CXL_PROD;
    if (op == MPI_MIN) return CXL_MIN;
    if (op == MPI_MAX) return CXL_MAX;
    if (op == MPI_BAND) return CXL_BAND;
    if (op == MPI_BOR) return CXL_BOR;
    if (op == MPI_BXOR) return CXL_BXOR;
    if (op == MPI_LAND) return CXL_LAND;
    if (op == MPI_LOR) return CXL_LOR;
    if (op == MPI_LXOR) return CXL_LXOR;
    return -1;
}

/* Named types whose signature is not one basic type repeated (the pair types), or that match
 * any signature (MPI_PACKED): the pool never carries them. */
static int mixed_named(MPI_Datatype t)
{
    return t == MPI_PACKED || t == MPI_FLOAT_INT || t == MPI_DOUBLE_INT || t == MPI_LONG_INT || t == MPI_2INT ||
           t == MPI_SHORT_INT || t == MPI_LONG_DOUBLE_INT || t == MPI_UB || t == MPI_LB;
}

/* The one named type every element of t's signature is, or MPI_DATATYPE_NULL if there are several. */
static MPI_Datatype basic_type(MPI_Datatype t, int depth)
{
    int ni, na, nd, combiner;
    PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner);
    if (combiner == MPI_COMBINER_NAMED) return mixed_named(t) ? MPI_DATATYPE_NULL : t;
    if (depth > 16 || nd < 1 || nd > 64 || ni > 4096 || na > 4096) return MPI_DATATYPE_NULL;
    int *ints = malloc(sizeof(int) * (size_t)(ni + 1));
    MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * (size_t)(na + 1));
    MPI_Datatype types[64];
    PMPI_Type_get_contents(t, ni, na, nd, ints, addrs, types);
    MPI_Datatype basic = MPI_DATATYPE_NULL;
    int same = 1;
    for (int i = 0; i < nd; i++) {
        MPI_Datatype b = basic_type(types[i], depth + 1);
        if (b == MPI_DATATYPE_NULL || (i > 0 && b != basic)) same = 0;
        basic = b;
        int tni, tna, tnd, tcomb;
        PMPI_Type_get_envelope(types[i], &tni, &tna, &tnd, &tcomb);
        if (tcomb != MPI_COMBINER_NAMED) PMPI_Type_free(&types[i]);
    }
    free(ints);
    free(addrs);
    return same ? basic : MPI_DATATYPE_NULL;
}

/* The last named (predefined) type each thread asked about: named handles never change meaning. */
static __thread __attribute__((tls_model("initial-exec"))) struct {
    MPI_Datatype type;
    cxlsim_type_t info;
    int valid;
} last_type;

void cxlsim_type_info(MPI_Datatype type, cxlsim_type_t *out)
{
    if (last_type.valid && last_type.type == type) {
        *out = last_type.info;
        return;
    }
    memset(out, 0, sizeof *out);
    out->reduce_dtype = -1;
    if (type == MPI_DATATYPE_NULL) return;
    int rd = reduce_dtype_of(type), ni, na, nd, combiner;
    MPI_Count size = 0, lb, extent, true_lb, true_extent;
    PMPI_Type_size_c(type, &size);
    out->size = size;
    if (rd >= 0) { /* the common named types: contiguous, lower bound 0 */
        out->ok = 1;
        out->reduce_dtype = rd;
        out->contiguous = 1;
    } else {
        out->ok = basic_type(type, 0) != MPI_DATATYPE_NULL;
        PMPI_Type_get_extent_c(type, &lb, &extent);
        PMPI_Type_get_true_extent_c(type, &true_lb, &true_extent);
        out->true_lb = (MPI_Aint)true_lb;
        out->contiguous = extent == size && true_extent == size;
    }
    PMPI_Type_get_envelope(type, &ni, &na, &nd, &combiner);
    if (combiner == MPI_COMBINER_NAMED) {
        last_type.type = type;
        last_type.info = *out;
        last_type.valid = 1;
    }
}
