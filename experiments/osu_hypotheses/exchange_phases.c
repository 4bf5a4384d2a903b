/* Issue 18 item 2: what an np-2 exchange step of large messages pays that a ping-pong does not, by phase.
 *
 * Usage: cc -O2 -o exchange_phases exchange_phases.c && ./exchange_phases MIN_BYTES MAX_BYTES BATCHES ITERS
 * Two processes (fork, unpinned as hydra starts MPICH's ranks), each with private src, send and recv
 * buffers. A transfer is what MPICH's CMA single-copy protocol does above its 8 KiB threshold: the
 * receiver copies the sender's send buffer into its own recv buffer with one process_vm_readv (no MPI,
 * no chunking, so only the copies and their cache states are left). Modes, per iteration:
 *   oneway_dirty    A rewrites its send buffer (memcpy from src), B reads it; then B rewrites, A reads
 *                   (the rewritten-buffer ping-pong `fresh`; figures are per direction, half the round)
 *   exchange_dirty  both rewrite at once, then both read the peer's at once (`freshbibw1`, and MPICH's
 *                   np-2 allgather step: MPIR_Localcopy of the own block, then the exchange)
 *   oneway_clean    as oneway_dirty without the rewrite (osu_latency's unchanged buffers)
 *   exchange_clean  as exchange_dirty without the rewrite (`bibw1`)
 * Phases are separated by a spin barrier in shared memory (it yields the CPU after ~20000 spins); rank 0 times each phase from one barrier's
 * exit to the next's (so a phase lasts until the slower rank has finished it). Per size the modes take
 * turns batch by batch, the order rotating, so all four share one stretch of time.
 * Output, one line per size and mode: fastest and median batch of the write phase, the read phase and
 * their sum (us per direction for oneway, per step for exchange).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum mode { ONEWAY_DIRTY, EXCHANGE_DIRTY, ONEWAY_CLEAN, EXCHANGE_CLEAN, MODES };
static const char *NAMES[] = {"oneway_dirty", "exchange_dirty", "oneway_clean", "exchange_clean"};

struct shared {
    _Atomic uint64_t arrived[2];
    _Atomic int go;  /* mode + 1 of the next batch, set by rank 0; -1: end */
    _Atomic int size_index;
};

static struct shared *sh;
static int rank;
static pid_t peer_pid;
static char *src, *sendbuf, *recvbuf;
static uint64_t generation;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static void barrier(void) {
    generation++;
    atomic_store_explicit(&sh->arrived[rank], generation, memory_order_release);
    for (long spins = 0; atomic_load_explicit(&sh->arrived[1 - rank], memory_order_acquire) < generation; spins++)
        if (spins < 20000) __builtin_ia32_pause();
        else sched_yield(); /* the peer may be waiting for this CPU (a loaded host): let it run */
}

static void read_peer(size_t size) {
    struct iovec local = {recvbuf, size}, remote = {sendbuf, size};  /* same address in both (forked) */
    if (process_vm_readv(peer_pid, &local, 1, &remote, 1, 0) != (ssize_t)size) {
        perror("process_vm_readv");
        exit(1);
    }
}

/* One iteration; on rank 0, adds the write and read phases' durations (us) to w and r. */
static void iteration(enum mode m, size_t size, double *w, double *r) {
    int dirty = (m == ONEWAY_DIRTY || m == EXCHANGE_DIRTY);
    double t0 = now_us(), t1, t2;
    if (m == EXCHANGE_DIRTY || m == EXCHANGE_CLEAN) {
        if (dirty) memcpy(sendbuf, src, size);
        barrier();
        t1 = now_us();
        read_peer(size);
        barrier();
        t2 = now_us();
        *w += t1 - t0;
        *r += t2 - t1;
        return;
    }
    for (int writer = 0; writer < 2; writer++) { /* writer rewrites, the other reads; halves averaged */
        if (dirty && rank == writer) memcpy(sendbuf, src, size);
        barrier();
        t1 = now_us();
        if (rank != writer) read_peer(size);
        barrier();
        t2 = now_us();
        *w += (t1 - t0) / 2;
        *r += (t2 - t1) / 2;
        t0 = t2;
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MIN_BYTES MAX_BYTES BATCHES ITERS\n", argv[0]);
        return 2;
    }
    size_t min_bytes = strtoull(argv[1], 0, 10), max_bytes = strtoull(argv[2], 0, 10);
    int batches = atoi(argv[3]), iters = atoi(argv[4]);
    if (min_bytes == 0 || max_bytes < min_bytes || batches < 1 || iters < 1 || batches > 1000) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    sh = mmap(0, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return 1;
    memset(sh, 0, sizeof *sh);
    if (posix_memalign((void **)&src, 4096, max_bytes) || posix_memalign((void **)&sendbuf, 4096, max_bytes) ||
        posix_memalign((void **)&recvbuf, 4096, max_bytes))
        return 1;
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) return 1;
    rank = child == 0 ? 1 : 0;
    peer_pid = child == 0 ? parent : child;
    memset(src, 1 + rank, max_bytes); /* every page private and faulted in before any timing */
    memset(sendbuf, 3 + rank, max_bytes);
    memset(recvbuf, 0, max_bytes);
    barrier();
    static double w[MODES][1000], r[MODES][1000], tot[MODES][1000];
    for (size_t size = min_bytes; size <= max_bytes; size *= 2) {
        for (int m = 0; m < MODES; m++) /* warm-up: one batch's worth of each mode */
            for (int i = 0; i < iters; i++) {
                double a = 0, b = 0;
                iteration(m, size, &a, &b);
            }
        for (int k = 0; k < batches; k++)
            for (int j = 0; j < MODES; j++) {
                int m = (j + k) % MODES;
                double a = 0, b = 0;
                for (int i = 0; i < iters; i++) iteration(m, size, &a, &b);
                w[m][k] = a / iters;
                r[m][k] = b / iters;
                tot[m][k] = (a + b) / iters;
            }
        if (rank == 0)
            for (int m = 0; m < MODES; m++) {
                double fw, fr, ft, mw, mr, mt;
                qsort(w[m], batches, sizeof(double), cmp);
                qsort(r[m], batches, sizeof(double), cmp);
                qsort(tot[m], batches, sizeof(double), cmp);
                fw = w[m][0]; fr = r[m][0]; ft = tot[m][0];
                mw = w[m][batches / 2]; mr = r[m][batches / 2]; mt = tot[m][batches / 2];
                printf("%zu %s %.3f %.3f %.3f %.3f %.3f %.3f\n", size, NAMES[m], fw, fr, ft, mw, mr, mt);
                fflush(stdout);
            }
    }
    if (child) waitpid(child, 0, 0);
    return 0;
}
