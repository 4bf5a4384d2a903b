/* cxl_reduce.h: element-wise reductions of the pool collectives (allreduce, reduce_scatter).
 *
 * cxl_fold(dtype, op, out, blocks, nblocks, count) sets out[i] = blocks[0][i] op blocks[1][i]
 * op ... op blocks[nblocks - 1][i]: a left fold over the blocks in order (ranks 0..P-1),
 * vectorised across elements only, so a floating-point result is the same bit pattern on
 * every rank and in every run. When out overlaps no block it folds straight into out; else it
 * folds in 4 KiB pieces into a buffer on the stack, so out may alias any block. Through the
 * stack buffer the np-2 allreduce's slot path took 1.02-1.43x (mean 1.15x) the time of one loop
 * straight into out (benchmarks/allreduce_split.py, slot against slot-direct-fold, 64 B-4 KiB,
 * three loaded runs), 0.94-1.14x without it, so the buffer serves the aliased case alone (an
 * MPI_IN_PLACE output); both give the same bits.
 *
 * Integer sum and product wrap around (the arithmetic is unsigned: signed overflow is
 * undefined in C). Floating-point min and max return NaN if either operand is NaN, as
 * numpy.minimum and numpy.maximum do. Bitwise and logical ops are defined on the integer
 * types only (a logical op gives 0 or 1).
 */
#ifndef CXLSIM_CXL_REDUCE_H
#define CXLSIM_CXL_REDUCE_H

#include <stdint.h>
#include <string.h>

enum {
    CXL_I8, CXL_I16, CXL_I32, CXL_I64, CXL_U8, CXL_U16, CXL_U32, CXL_U64, CXL_F32, CXL_F64,
    CXL_NDTYPES
};
enum {
    CXL_SUM, CXL_PROD, CXL_MIN, CXL_MAX, CXL_BAND, CXL_BOR, CXL_BXOR, CXL_LAND, CXL_LOR, CXL_LXOR,
    CXL_NOPS
};

#define CXL_FOLD_BYTES 4096

static const unsigned cxl_dtype_size[CXL_NDTYPES] = {1, 2, 4, 8, 1, 2, 4, 8, 4, 8};

typedef void (*cxl_fold_fn)(char *out, const char *const *blocks, int nblocks, uint64_t count);

/* One combine rule per op: a (the fold so far) op b; U is the unsigned twin of T. */
#define CXL_C_SUM(T, U, a, b) ((T)((U)(a) + (U)(b)))
#define CXL_C_PROD(T, U, a, b) ((T)((U)(a) * (U)(b)))
#define CXL_C_FSUM(T, U, a, b) ((a) + (b))
#define CXL_C_FPROD(T, U, a, b) ((a) * (b))
#define CXL_C_MIN(T, U, a, b) ((a) < (b) ? (a) : (b))
#define CXL_C_MAX(T, U, a, b) ((a) > (b) ? (a) : (b))
#define CXL_C_FMIN(T, U, a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define CXL_C_FMAX(T, U, a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define CXL_C_BAND(T, U, a, b) ((T)((a) & (b)))
#define CXL_C_BOR(T, U, a, b) ((T)((a) | (b)))
#define CXL_C_BXOR(T, U, a, b) ((T)((a) ^ (b)))
#define CXL_C_LAND(T, U, a, b) ((T)(((a) != 0) & ((b) != 0)))
#define CXL_C_LOR(T, U, a, b) ((T)(((a) != 0) | ((b) != 0)))
#define CXL_C_LXOR(T, U, a, b) ((T)(((a) != 0) ^ ((b) != 0)))

/* 1 if out's `bytes` overlap any of the blocks' (each `bytes` long). */
static inline int cxl_fold_overlaps(const char *out, const char *const *blocks, int nblocks, uint64_t bytes)
{
    uintptr_t lo = (uintptr_t)out, hi = lo + bytes;
    for (int r = 0; r < nblocks; r++)
        if ((uintptr_t)blocks[r] < hi && lo < (uintptr_t)blocks[r] + bytes) return 1;
    return 0;
}

/* Every fold is compiled for AVX2 and for the baseline (16-byte SSE2 vectors), and the loader picks
 * the AVX2 one where the CPU has it (GCC's target_clones, an ifunc; the same arithmetic per element,
 * so the same bits). Measured at np 2 (benchmarks/allreduce_split.py, interleaved, per-call medians):
 * fast placement, load 1.9, a 32-byte loop against the baseline fold: 1 KiB 190 -> 140 ns, 2 KiB
 * 310 -> 240, 4 KiB 541 -> 440; slow, load 6-7, this fold against the baseline loop: 2 KiB 1161 ->
 * 1021, 4 KiB 2233 -> 2103 (through the library: docs/mpi.md). AVX-512 was no faster than AVX2, and
 * a prefetch of the peer's whole block before the baseline fold slower, so the gain is not the
 * line transfers alone; the reading here (not measured apart): with half the loads per line, more
 * of the peer's lines are in flight before the load queue fills. */
#if !defined(CXL_FOLD_CLONES) && defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute) /* an ifunc */
#if __has_attribute(target_clones) /* -DCXL_FOLD_CLONES= builds the baseline alone (an A/B) */
#define CXL_FOLD_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef CXL_FOLD_CLONES
#define CXL_FOLD_CLONES
#endif

#define CXL_DEFINE_FOLD(NAME, T, U, COMBINE)                                                       \
    CXL_FOLD_CLONES static void NAME(char *out, const char *const *blocks, int nblocks, uint64_t count) \
    {                                                                                               \
        enum { PIECE = CXL_FOLD_BYTES / sizeof(T) };                                                \
        if (nblocks > 1 && !cxl_fold_overlaps(out, blocks, nblocks, count * sizeof(T))) {           \
            T *restrict o = (T *)out;                                                               \
            const T *restrict b0 = (const T *)blocks[0], *restrict b1 = (const T *)blocks[1];       \
            for (uint64_t i = 0; i < count; i++) o[i] = COMBINE(T, U, b0[i], b1[i]);               \
            for (int r = 2; r < nblocks; r++) {                                                     \
                const T *restrict br = (const T *)blocks[r];                                        \
                for (uint64_t i = 0; i < count; i++) o[i] = COMBINE(T, U, o[i], br[i]);            \
            }                                                                                       \
            return;                                                                                 \
        }                                                                                           \
        T acc[PIECE] __attribute__((aligned(64)));                                                  \
        for (uint64_t start = 0; start < count; start += PIECE) {                                   \
            uint64_t n = count - start < PIECE ? count - start : PIECE;                             \
            const T *restrict b0 = (const T *)blocks[0] + start;                                    \
            if (nblocks == 1) {                                                                     \
                memcpy(acc, b0, n * sizeof(T));                                                     \
            } else {                                                                                \
                const T *restrict b1 = (const T *)blocks[1] + start;                                \
                for (uint64_t i = 0; i < n; i++) acc[i] = COMBINE(T, U, b0[i], b1[i]);             \
                for (int r = 2; r < nblocks; r++) {                                                 \
                    const T *restrict br = (const T *)blocks[r] + start;                            \
                    for (uint64_t i = 0; i < n; i++) acc[i] = COMBINE(T, U, acc[i], br[i]);        \
                }                                                                                   \
            }                                                                                       \
            memcpy((T *)out + start, acc, n * sizeof(T));                                           \
        }                                                                                           \
    }

/* Sum, product, bitwise and logical ops give the same bits on a signed type as on the unsigned
 * type of its width (two's complement, wrapping): one fold per width serves both. */
#define CXL_DEFINE_WIDTH_FOLDS(S, U)                           \
    CXL_DEFINE_FOLD(cxl_fold_sum_##S, U, U, CXL_C_SUM)        \
    CXL_DEFINE_FOLD(cxl_fold_prod_##S, U, U, CXL_C_PROD)      \
    CXL_DEFINE_FOLD(cxl_fold_band_##S, U, U, CXL_C_BAND)      \
    CXL_DEFINE_FOLD(cxl_fold_bor_##S, U, U, CXL_C_BOR)        \
    CXL_DEFINE_FOLD(cxl_fold_bxor_##S, U, U, CXL_C_BXOR)      \
    CXL_DEFINE_FOLD(cxl_fold_land_##S, U, U, CXL_C_LAND)      \
    CXL_DEFINE_FOLD(cxl_fold_lor_##S, U, U, CXL_C_LOR)        \
    CXL_DEFINE_FOLD(cxl_fold_lxor_##S, U, U, CXL_C_LXOR)

#define CXL_DEFINE_ORDER_FOLDS(S, T, U, MIN, MAX)              \
    CXL_DEFINE_FOLD(cxl_fold_min_##S, T, U, MIN)              \
    CXL_DEFINE_FOLD(cxl_fold_max_##S, T, U, MAX)

CXL_DEFINE_WIDTH_FOLDS(w8, uint8_t)
CXL_DEFINE_WIDTH_FOLDS(w16, uint16_t)
CXL_DEFINE_WIDTH_FOLDS(w32, uint32_t)
CXL_DEFINE_WIDTH_FOLDS(w64, uint64_t)
CXL_DEFINE_ORDER_FOLDS(i8, int8_t, uint8_t, CXL_C_MIN, CXL_C_MAX)
CXL_DEFINE_ORDER_FOLDS(i16, int16_t, uint16_t, CXL_C_MIN, CXL_C_MAX)
CXL_DEFINE_ORDER_FOLDS(i32, int32_t, uint32_t, CXL_C_MIN, CXL_C_MAX)
CXL_DEFINE_ORDER_FOLDS(i64, int64_t, uint64_t, CXL_C_MIN, CXL_C_MAX)
CXL_DEFINE_ORDER_FOLDS(u8, uint8_t, uint8_t, CXL_C_MIN, CXL_C_MAX)
CXL_DEFINE_ORDER_FOLDS(u16, uint16_t, uint16_t, CXL_C_MIN, CXL_C_MAX)
CXL_DEFINE_ORDER_FOLDS(u32, uint32_t, uint32_t, CXL_C_MIN, CXL_C_MAX)
CXL_DEFINE_ORDER_FOLDS(u64, uint64_t, uint64_t, CXL_C_MIN, CXL_C_MAX)
CXL_DEFINE_FOLD(cxl_fold_sum_f32, float, float, CXL_C_FSUM)
CXL_DEFINE_FOLD(cxl_fold_prod_f32, float, float, CXL_C_FPROD)
CXL_DEFINE_ORDER_FOLDS(f32, float, float, CXL_C_FMIN, CXL_C_FMAX)
CXL_DEFINE_FOLD(cxl_fold_sum_f64, double, double, CXL_C_FSUM)
CXL_DEFINE_FOLD(cxl_fold_prod_f64, double, double, CXL_C_FPROD)
CXL_DEFINE_ORDER_FOLDS(f64, double, double, CXL_C_FMIN, CXL_C_FMAX)

#define CXL_INT_ROW(S, W)                                                                            \
    {cxl_fold_sum_##W, cxl_fold_prod_##W, cxl_fold_min_##S, cxl_fold_max_##S, cxl_fold_band_##W,   \
     cxl_fold_bor_##W, cxl_fold_bxor_##W, cxl_fold_land_##W, cxl_fold_lor_##W, cxl_fold_lxor_##W}
#define CXL_FLOAT_ROW(S) {cxl_fold_sum_##S, cxl_fold_prod_##S, cxl_fold_min_##S, cxl_fold_max_##S, 0, 0, 0, 0, 0, 0}

static const cxl_fold_fn cxl_fold_table[CXL_NDTYPES][CXL_NOPS] = {
    CXL_INT_ROW(i8, w8), CXL_INT_ROW(i16, w16), CXL_INT_ROW(i32, w32), CXL_INT_ROW(i64, w64),
    CXL_INT_ROW(u8, w8), CXL_INT_ROW(u16, w16), CXL_INT_ROW(u32, w32), CXL_INT_ROW(u64, w64),
    CXL_FLOAT_ROW(f32), CXL_FLOAT_ROW(f64),
};

/* The fold of (dtype, op), or NULL if the pair is not supported. */
static inline cxl_fold_fn cxl_fold_for(int dtype, int op)
{
    if (dtype < 0 || dtype >= CXL_NDTYPES || op < 0 || op >= CXL_NOPS) return 0;
    return cxl_fold_table[dtype][op];
}

/* out[i] = left fold of blocks[0..nblocks-1][i] (see the header comment); nblocks >= 1. */
static inline void cxl_fold(int dtype, int op, char *out, const char *const *blocks, int nblocks, uint64_t count)
{
    cxl_fold_table[dtype][op](out, blocks, nblocks, count);
}

#endif
