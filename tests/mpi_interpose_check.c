/* mpi_interpose_check.c: checks every collective libcxlsim_mpi.so replaces against MPICH's own
 * (the PMPI_ entry points, which the library does not intercept), on MPI_COMM_WORLD and on a
 * communicator made by MPI_Comm_split, for every predefined type, every predefined op, sizes
 * including 0 and odd ones, with and without MPI_IN_PLACE; and a derived-datatype case of each
 * kind (a struct type, which falls back, and a vector type, which is packed onto the pool).
 *
 * Prints "checks N failures F" on world rank 0 and exits 1 if any check failed. Every rank's
 * data is a function of (rank, index), so an answer from the wrong rank or a stale buffer is
 * detected.
 */
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long checks, failures;
static int quick; /* argv[1] == "quick": a few types, sizes and ops (for np > cores) */

/* the quick set first; 35, 36, 70, 71 doubles: 280 B and 560 B fill the inline area's fifth and tenth
 * lines (the limits of the fast and slow placements), 288 B and 568 B are past them */
static const int sizes[] = {0, 17, 1001, 1, 3, 16, 5003, 35, 36, 70, 71};
#define NSIZES (quick ? 3 : (int)(sizeof sizes / sizeof sizes[0]))

typedef struct {
    MPI_Datatype type;
    const char *name;
    int size;
    int is_float, is_byte, reducible;
} type_t;

static type_t types[] = {
    /* the quick set first */
    {MPI_INT, "MPI_INT", 4, 0, 0, 1},
    {MPI_DOUBLE, "MPI_DOUBLE", 8, 1, 0, 1},
    {MPI_UINT8_T, "MPI_UINT8_T", 1, 0, 0, 1},
    {MPI_2INT, "MPI_2INT", 8, 0, 0, 0},
    {MPI_CHAR, "MPI_CHAR", 1, 0, 0, 0},
    {MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", 1, 0, 0, 1},
    {MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", 1, 0, 0, 1},
    {MPI_BYTE, "MPI_BYTE", 1, 0, 1, 1},
    {MPI_SHORT, "MPI_SHORT", 2, 0, 0, 1},
    {MPI_UNSIGNED_SHORT, "MPI_UNSIGNED_SHORT", 2, 0, 0, 1},
    {MPI_UNSIGNED, "MPI_UNSIGNED", 4, 0, 0, 1},
    {MPI_LONG, "MPI_LONG", sizeof(long), 0, 0, 1},
    {MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", sizeof(long), 0, 0, 1},
    {MPI_LONG_LONG, "MPI_LONG_LONG", 8, 0, 0, 1},
    {MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG", 8, 0, 0, 1},
    {MPI_INT8_T, "MPI_INT8_T", 1, 0, 0, 1},
    {MPI_INT16_T, "MPI_INT16_T", 2, 0, 0, 1},
    {MPI_INT32_T, "MPI_INT32_T", 4, 0, 0, 1},
    {MPI_INT64_T, "MPI_INT64_T", 8, 0, 0, 1},
    {MPI_UINT16_T, "MPI_UINT16_T", 2, 0, 0, 1},
    {MPI_UINT32_T, "MPI_UINT32_T", 4, 0, 0, 1},
    {MPI_UINT64_T, "MPI_UINT64_T", 8, 0, 0, 1},
    {MPI_FLOAT, "MPI_FLOAT", 4, 1, 0, 1},
    {MPI_LONG_DOUBLE, "MPI_LONG_DOUBLE", sizeof(long double), 1, 0, 0},
    {MPI_C_BOOL, "MPI_C_BOOL", 1, 0, 0, 0},
    {MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX", 16, 1, 0, 0},
};
#define NTYPES (quick ? 4 : (int)(sizeof types / sizeof types[0]))

typedef struct {
    MPI_Op op;
    const char *name;
    int ints_only;
} op_t;

static op_t ops[] = {
    {MPI_SUM, "MPI_SUM", 0}, {MPI_PROD, "MPI_PROD", 0}, {MPI_MIN, "MPI_MIN", 0}, {MPI_MAX, "MPI_MAX", 0},
    {MPI_BAND, "MPI_BAND", 1}, {MPI_BOR, "MPI_BOR", 1}, {MPI_BXOR, "MPI_BXOR", 1},
    {MPI_LAND, "MPI_LAND", 1}, {MPI_LOR, "MPI_LOR", 1}, {MPI_LXOR, "MPI_LXOR", 1},
};
#define NOPS (quick ? 4 : (int)(sizeof ops / sizeof ops[0]))

/* Element i of rank r's data: small integers (exact as floats, products of 4 of them too). */
static void fill(const type_t *t, void *buf, long n, int rank, int salt)
{
    for (long i = 0; i < n; i++) {
        long v = (rank * 7 + i * 3 + salt) % 11 + 1;
        char *at = (char *)buf + i * t->size;
        if (t->type == MPI_FLOAT) *(float *)at = (float)v;
        else if (t->type == MPI_DOUBLE) *(double *)at = (double)v;
        else if (t->type == MPI_LONG_DOUBLE) *(long double *)at = (long double)v;
        else if (t->type == MPI_C_DOUBLE_COMPLEX) { ((double *)at)[0] = (double)v; ((double *)at)[1] = (double)-v; }
        else if (t->type == MPI_C_BOOL) *(unsigned char *)at = (unsigned char)(v & 1);
        else if (t->type == MPI_2INT) { ((int *)at)[0] = (int)v; ((int *)at)[1] = rank; }
        else for (int b = 0; b < t->size; b++) at[b] = b == 0 ? (char)v : (char)((v * 37 + b) & 0x7f);
    }
}

static void check(int ok, const char *what, const char *type, long n, int rank)
{
    checks++;
    if (!ok) {
        failures++;
        if (failures <= 20) fprintf(stderr, "FAIL %s %s n=%ld rank=%d\n", what, type, n, rank);
    }
}

/* Compare two buffers of n elements of t, ignoring the padding bytes of MPI_LONG_DOUBLE. */
static int same(const type_t *t, const void *a, const void *b, long n)
{
    if (t->type != MPI_LONG_DOUBLE) return memcmp(a, b, (size_t)(n * t->size)) == 0;
    for (long i = 0; i < n; i++)
        if (((const long double *)a)[i] != ((const long double *)b)[i]) return 0;
    return 1;
}

static void check_comm(MPI_Comm comm, const char *label)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    size_t cap = (size_t)P * 5003 * 16 + 64;
    char *send = malloc(cap), *got = malloc(cap), *want = malloc(cap);
    char what[160];
    for (int ti = 0; ti < NTYPES; ti++) {
        const type_t *t = &types[ti];
        for (int si = 0; si < NSIZES; si++) {
            int n = sizes[si];
            size_t bytes = (size_t)n * t->size;
            /* allgather, then in place */
            fill(t, send, n, rank, 0);
            PMPI_Allgather(send, n, t->type, want, n, t->type, comm);
            memset(got, 0x5a, cap);
            MPI_Allgather(send, n, t->type, got, n, t->type, comm);
            snprintf(what, sizeof what, "%s allgather", label);
            check(same(t, got, want, (long)n * P), what, t->name, n, rank);
            memset(got, 0x5a, cap);
            memcpy(got + rank * bytes, send, bytes);
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, got, n, t->type, comm);
            snprintf(what, sizeof what, "%s allgather in place", label);
            check(same(t, got, want, (long)n * P), what, t->name, n, rank);
            /* bcast from every root */
            for (int root = 0; root < P; root++) {
                fill(t, got, n, rank, root);
                fill(t, want, n, root, root);
                MPI_Bcast(got, n, t->type, root, comm);
                snprintf(what, sizeof what, "%s bcast root %d", label, root);
                check(same(t, got, want, n), what, t->name, n, rank);
            }
            /* alltoall, then in place */
            fill(t, send, (long)n * P, rank, 1);
            PMPI_Alltoall(send, n, t->type, want, n, t->type, comm);
            memset(got, 0x5a, cap);
            MPI_Alltoall(send, n, t->type, got, n, t->type, comm);
            snprintf(what, sizeof what, "%s alltoall", label);
            check(same(t, got, want, (long)n * P), what, t->name, n, rank);
            memcpy(got, send, bytes * P);
            MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, got, n, t->type, comm);
            snprintf(what, sizeof what, "%s alltoall in place", label);
            check(same(t, got, want, (long)n * P), what, t->name, n, rank);
            if (!t->reducible) continue;
            for (int oi = 0; oi < NOPS; oi++) {
                const op_t *o = &ops[oi];
                if ((o->ints_only && t->is_float) || (t->is_byte && oi < 4) || (t->is_byte && oi > 6)) continue;
                /* allreduce, then in place */
                fill(t, send, n, rank, oi);
                PMPI_Allreduce(send, want, n, t->type, o->op, comm);
                memset(got, 0x5a, cap);
                MPI_Allreduce(send, got, n, t->type, o->op, comm);
                snprintf(what, sizeof what, "%s allreduce %s", label, o->name);
                check(same(t, got, want, n), what, t->name, n, rank);
                memcpy(got, send, bytes);
                MPI_Allreduce(MPI_IN_PLACE, got, n, t->type, o->op, comm);
                snprintf(what, sizeof what, "%s allreduce in place %s", label, o->name);
                check(same(t, got, want, n), what, t->name, n, rank);
                /* reduce_scatter_block, then in place */
                fill(t, send, (long)n * P, rank, oi);
                PMPI_Reduce_scatter_block(send, want, n, t->type, o->op, comm);
                memset(got, 0x5a, cap);
                MPI_Reduce_scatter_block(send, got, n, t->type, o->op, comm);
                snprintf(what, sizeof what, "%s reduce_scatter_block %s", label, o->name);
                check(same(t, got, want, n), what, t->name, n, rank);
                memcpy(got, send, bytes * P);
                MPI_Reduce_scatter_block(MPI_IN_PLACE, got, n, t->type, o->op, comm);
                snprintf(what, sizeof what, "%s reduce_scatter_block in place %s", label, o->name);
                check(same(t, got, want, n), what, t->name, n, rank);
            }
        }
    }
    MPI_Barrier(comm);
    free(send);
    free(got);
    free(want);
}

static void int_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

/* Derived datatypes and a user-defined op: a struct {int, double} (two basic types: falls back) and a strided vector
 * of ints (one basic type: packed onto the pool), and an allreduce with a user-defined op
 * (falls back), against PMPI. */
static void check_derived(MPI_Comm comm)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    typedef struct { int i; double d; } pair_t;
    MPI_Datatype pair, strided;
    int lens[2] = {1, 1};
    MPI_Aint displs[2] = {offsetof(pair_t, i), offsetof(pair_t, d)};
    MPI_Datatype members[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_create_struct(2, lens, displs, members, &pair);
    MPI_Type_commit(&pair);
    MPI_Type_vector(5, 1, 2, MPI_INT, &strided); /* every other int of 10 */
    MPI_Type_commit(&strided);
    pair_t mine[3], got[3 * 4], want[3 * 4];
    for (int k = 0; k < 3; k++) { mine[k].i = rank * 10 + k; mine[k].d = rank + k / 4.0; }
    memset(got, 0, sizeof got);
    memset(want, 0, sizeof want);
    MPI_Allgather(mine, 3, pair, got, 3, pair, comm);
    PMPI_Allgather(mine, 3, pair, want, 3, pair, comm);
    int ok = 1;
    for (int k = 0; k < 3 * P; k++) ok &= got[k].i == want[k].i && got[k].d == want[k].d && got[k].i == (k / 3) * 10 + k % 3;
    check(ok, "derived struct allgather", "struct{int,double}", 3, rank);
    int sv[10], rv[10 * 4], wv[10 * 4];
    for (int k = 0; k < 10; k++) sv[k] = rank * 100 + k;
    memset(rv, -1, sizeof rv);
    memset(wv, -1, sizeof wv);
    MPI_Allgather(sv, 1, strided, rv, 1, strided, comm);
    PMPI_Allgather(sv, 1, strided, wv, 1, strided, comm);
    check(memcmp(rv, wv, sizeof(int) * (size_t)(10 * P - 1)) == 0, "derived vector allgather", "vector(5,1,2,int)", 1, rank);
    int si[3] = {1, rank, -rank}, ri[3], wi[3];
    MPI_Op user_sum;
    MPI_Op_create(int_sum, 1, &user_sum);
    MPI_Allreduce(si, ri, 3, MPI_INT, user_sum, comm);
    PMPI_Allreduce(si, wi, 3, MPI_INT, user_sum, comm);
    check(memcmp(ri, wi, sizeof ri) == 0 && ri[0] == P && ri[1] == P * (P - 1) / 2, "user op allreduce", "MPI_INT", 3, rank);
    MPI_Op_free(&user_sum);
    MPI_Type_free(&pair);
    MPI_Type_free(&strided);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_comm(MPI_COMM_WORLD, "world");
    MPI_Comm split; /* odd and even ranks, in reverse order */
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &split);
    check_comm(split, "split");
    MPI_Comm_free(&split);
    check_derived(MPI_COMM_WORLD);
    long totals[2] = {checks, failures}, sums[2];
    PMPI_Reduce(totals, sums, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("checks %ld failures %ld\n", sums[0], sums[1]);
    MPI_Finalize();
    return rank == 0 && sums[1] ? 1 : 0;
}
