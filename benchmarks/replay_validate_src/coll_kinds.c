/* coll_timed.c's four pool calls timed one by one, in blocks of given call sequences: what does a call cost
 * inside the app's sequence that it does not cost repeated by itself (the calibration bench's loop)?
 *
 *     coll_kinds DIR ITERATIONS WORK ROUNDS BLOCK...
 *
 * A BLOCK is NAME:KINDS:W, KINDS letters of R (allreduce of 16384 floats, 64 KiB), G (allgather of 4 KiB per
 * rank), B (bcast of 4 KiB from rank 0), r (allreduce of one double), S (barrier): ITERATIONS times, `work`
 * (WORK steps, if W is 1) then the calls in that order, the buffers coll_timed.c's. So app:RGBr:1 is
 * coll_timed.c's iteration, bare-B:B:0 the bench's back-to-back loop, RB:RB:1 a bcast after the 64 KiB
 * allreduce. Every block runs after a barrier, ROUNDS times over in the given order, after one untimed call
 * of each kind (its first-use set-up). Every call's entry and return (CLOCK_MONOTONIC ns: one clock for the
 * host's ranks) are kept in memory and written at the end (no writes between the calls) to DIR/times<rank>.tsv:
 * `block kind call entry_ns return_ns`; benchmarks/replay_coll_kinds.py runs it and reads them. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { KINDS = 5 };
static const char *kind_names[KINDS] = {"allreduce65536", "allgather4096", "bcast4096", "allreduce8", "barrier"};
static const char kind_letters[KINDS + 1] = "RGBrS";
static void work(long n) { volatile double x = 0; for (long i = 0; i < n; i++) x += i * 0.5; }
static float v[16384], w[16384];
static char block[4096], all[4 * 4096], b[4096];
static double res = 1.0, sum;
/* one row per timed call, kept in memory and written at the end (no writes between the calls) */
static struct { const char *block; int kind, call; double entry, ret; } *rows;
static long nrows;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void call(int kind)
{
    switch (kind) {
    case 0: MPI_Allreduce(v, w, 16384, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case 1: MPI_Allgather(block, 4096, MPI_CHAR, all, 4096, MPI_CHAR, MPI_COMM_WORLD); break;
    case 2: MPI_Bcast(b, 4096, MPI_CHAR, 0, MPI_COMM_WORLD); break;
    case 3: MPI_Allreduce(&res, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
    default: MPI_Barrier(MPI_COMM_WORLD); break;
    }
}

static int kind_of(char letter)
{
    const char *at = strchr(kind_letters, letter);
    if (!letter || !at) {
        fprintf(stderr, "coll_kinds: kind %c: expected one of %s\n", letter, kind_letters);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return (int)(at - kind_letters);
}

static void timed(const char *name, int kind, int i)
{
    double t0 = now_ns();
    call(kind);
    double t1 = now_ns();
    rows[nrows].block = name;
    rows[nrows].kind = kind;
    rows[nrows].call = i;
    rows[nrows].entry = t0;
    rows[nrows].ret = t1;
    nrows++;
}

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    if (argc < 6) {
        fprintf(stderr, "usage: coll_kinds DIR ITERATIONS WORK ROUNDS BLOCK...\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iterations = atoi(argv[2]), rounds = atoi(argv[4]), blocks = argc - 5;
    long steps = atol(argv[3]);
    long calls = 0;
    for (int j = 0; j < blocks; j++) {
        const char *seq = strchr(argv[5 + j], ':');
        if (!seq || !strchr(seq + 1, ':')) {
            fprintf(stderr, "coll_kinds: block %s: expected NAME:KINDS:WORK\n", argv[5 + j]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        calls += (long)(strchr(seq + 1, ':') - seq - 1) * iterations;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char path[4096];
    snprintf(path, sizeof path, "%s/times%d.tsv", argv[1], rank);
    FILE *out = fopen(path, "w");
    rows = calloc((size_t)(calls * rounds + 1), sizeof *rows);
    if (!out || !rows) {
        fprintf(stderr, "coll_kinds: cannot write %s\n", path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int k = 0; k < KINDS; k++) call(k); /* every call's first-use set-up, untimed */
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < blocks; j++) {
            char *name = argv[5 + j], *seq = strchr(name, ':') + 1, *end = strchr(seq, ':');
            int with_work = atoi(end + 1);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int i = 0; i < iterations; i++) {
                if (with_work) work(steps);
                for (const char *k = seq; k < end; k++) timed(name, kind_of(*k), i);
            }
        }
    fputs("block\tkind\tcall\tentry_ns\treturn_ns\n", out);
    for (long j = 0; j < nrows; j++) {
        const char *name = rows[j].block;
        fprintf(out, "%.*s\t%s\t%d\t%.0f\t%.0f\n", (int)(strchr(name, ':') - name), name,
                kind_names[rows[j].kind], rows[j].call, rows[j].entry, rows[j].ret);
    }
    fclose(out);
    MPI_Finalize();
    return 0;
}
