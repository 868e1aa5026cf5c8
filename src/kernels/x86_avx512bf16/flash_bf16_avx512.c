/* bf16 microkernels of the fused attention forward (contract in flash.h) with AVX512_BF16.
 * VDPBF16PS multiplies 32 pairs of bf16 values and adds each pair's two products into one of
 * 16 fp32 lanes: twice the products of an fp32 FMA per instruction.  Its operands are pairs
 * along K, so B comes pair-interleaved ([K/2][ldb][2], packed by flash.c) and A is read as
 * 32-bit pairs of a row-major bf16 row, broadcast to every lane.  The tile product is the fp32
 * kernel's 6 x 64 register block (24 zmm accumulators; per K pair, four loads of B and six
 * broadcasts of A).  P is converted by VCVTNE2PS2BF16 (32 floats per instruction, round to
 * nearest even).  Compiled with -mavx512bf16; else the table is NULL and plain C runs. */
#include <string.h>

#include "../flash.h"

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>

#define MR 6

static inline int32_t pair_at(const attn__bf16 *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return x;
}

static inline __attribute__((always_inline)) void block(int mr, int nv, int64_t K2,
                                                        const attn__bf16 *A, int64_t lda,
                                                        const attn__bf16 *B, int64_t ldb,
                                                        float *C, int64_t ldc, int accum,
                                                        const float *cs) {
    __m512 acc[MR][4];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < K2; kk++) {
        __m512bh bv[4];
        for (int v = 0; v < nv; v++) bv[v] = (__m512bh)_mm512_loadu_si512(B + 32 * v);
        for (int r = 0; r < mr; r++) {
            __m512bh x = (__m512bh)_mm512_set1_epi32(pair_at(A + r * lda + 2 * kk));
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, bv[v]);
        }
        B += 2 * ldb;
    }
    for (int r = 0; r < mr; r++) {
        float *c = C + r * ldc;
        if (accum) {
            __m512 s = _mm512_set1_ps(cs ? cs[r] : 1.0f);
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_fmadd_ps(s, _mm512_loadu_ps(c + 16 * v), acc[r][v]);
        }
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(c + 16 * v, acc[r][v]);
    }
}

typedef void (*blk_fn)(int64_t, const attn__bf16 *, int64_t, const attn__bf16 *, int64_t,
                       float *, int64_t, int, const float *);
#define INST(R, V)                                                                            \
    static void blk_##R##_##V(int64_t K2, const attn__bf16 *A, int64_t lda,                    \
                              const attn__bf16 *B, int64_t ldb, float *C, int64_t ldc,          \
                              int accum, const float *cs) {                                     \
        block(R, V, K2, A, lda, B, ldb, C, ldc, accum, cs);                                     \
    }
#define INST_R(R) INST(R, 1) INST(R, 2) INST(R, 3) INST(R, 4)
INST_R(1)
INST_R(2)
INST_R(3)
INST_R(4)
INST_R(5)
INST_R(6)
#define ROWFN(R) {blk_##R##_1, blk_##R##_2, blk_##R##_3, blk_##R##_4}
static const blk_fn blk_table[MR][4] = {ROWFN(1), ROWFN(2), ROWFN(3), ROWFN(4), ROWFN(5), ROWFN(6)};

static void mm(int64_t m, int64_t n, int64_t K2, const attn__bf16 *A, int64_t lda,
               const attn__bf16 *B, int64_t ldb, float *C, int64_t ldc, int accum,
               const float *cs) {
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        int nv = (int)((n - j0) / 16 < 4 ? (n - j0) / 16 : 4);
        for (int64_t i0 = 0; i0 < m; i0 += MR) {
            int mr = (int)(m - i0 < MR ? m - i0 : MR);
            blk_table[mr - 1][nv - 1](K2, A + i0 * lda, lda, B + 2 * j0, ldb, C + i0 * ldc + j0,
                                      ldc, accum, cs ? cs + i0 : NULL);
        }
    }
}

void attn__flash_bf16_cvt_avx512(const float *s, int64_t ld, int64_t rows, int64_t n,
                                 attn__bf16 *p, int64_t ldp) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j += 32) {
            __m512bh x = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + r * ld + j + 16),
                                             _mm512_loadu_ps(s + r * ld + j));
            _mm512_storeu_si512(p + r * ldp + j, (__m512i)x);
        }
}

/* Rounding in place: VCVTNEPS2BF16, then the bf16 bits back to the top of each lane. */
void attn__flash_bf16_round_avx512(float *s, int64_t ld, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j += 16) {
            float *x = s + r * ld + j;
            __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x));
            _mm512_storeu_si512(x, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
}

/* 2^t for t <= 0, as the weights of the bf16 products need them: t below -125 gives 2^-125
 * (no subnormal weight, whose sums would cost microcode assists; the fused softmax sees no
 * masked score, and a weight of 2^-125 instead of 0 changes nothing a float sum can hold), n =
 * round(t), 2^(t-n) by a degree-5 minimax polynomial on [-1/2, 1/2] (relative error 7.5e-8
 * before the float rounding of its steps; fitted for this file), scalef by n.  A NaN t stays
 * NaN.  Ten operations against the thirteen of the fp32 kernels' exponential. */
static inline __m512 exp2w(__m512 t) {
    t = _mm512_max_ps(_mm512_set1_ps(-125.0f), t); /* NaN: the second operand, t */
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.327647129073739e-3f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.675541892647743e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550713092088699e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022120237350464e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931469440460205e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
    return _mm512_scalef_ps(p, n);
}

/* The softmax of a tile every row sees whole, one row at a time: the maximum from the raw
 * scores' maximum and minimum (scale * max or scale * min, whichever is larger: rounding is
 * monotone, so this is max_j of the rounded scale * s_j, as smax gives), then one pass for the
 * weights, their sum and their bf16 copy, the scale folded into the exponent's FMA. */
void attn__flash_bf16_softmax_avx512(const float *s, int64_t ld, int64_t rows, int64_t n,
                                     float scale, const float *m, float *mx, float *mn,
                                     float *sum, attn__bf16 *p, int64_t ldp) {
    const float log2e = 1.44269504088896341f;
    const __m512 sl = _mm512_set1_ps(scale * log2e);
    for (int64_t r = 0; r < rows; r++) {
        const float *x = s + r * ld;
        __m512 hi = _mm512_loadu_ps(x), lo = hi;
        for (int64_t j = 16; j < n; j += 16) {
            const __m512 v = _mm512_loadu_ps(x + j);
            hi = _mm512_max_ps(hi, v), lo = _mm512_min_ps(lo, v);
        }
        const float a = scale * _mm512_reduce_max_ps(hi), b = scale * _mm512_reduce_min_ps(lo);
        const float tmax = a > b ? a : b, nm = tmax > m[r] ? tmax : m[r];
        mx[r] = tmax, mn[r] = nm;
        const __m512 off = _mm512_set1_ps(-nm * log2e);
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        attn__bf16 *pr = p + r * ldp;
        for (int64_t j = 0; j < n; j += 32) {
            __m512 e0 = exp2w(_mm512_fmadd_ps(_mm512_loadu_ps(x + j), sl, off));
            __m512 e1 = exp2w(_mm512_fmadd_ps(_mm512_loadu_ps(x + j + 16), sl, off));
            acc0 = _mm512_add_ps(acc0, e0), acc1 = _mm512_add_ps(acc1, e1);
            _mm512_storeu_si512(pr + j, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
        }
        sum[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    }
}

static const attn__flash_bf16_kernels kernels = {
    2 /* ATTN__ISA_AVX512 */, mm, attn__flash_bf16_cvt_avx512, attn__flash_bf16_round_avx512,
    attn__flash_bf16_softmax_avx512, 0, NULL, NULL, "AVX512_BF16 (VDPBF16PS)"};

const attn__flash_bf16_kernels *attn__flash_bf16_kernels_avx512(void) { return &kernels; }

#else
const attn__flash_bf16_kernels *attn__flash_bf16_kernels_avx512(void) { return NULL; }
#endif
