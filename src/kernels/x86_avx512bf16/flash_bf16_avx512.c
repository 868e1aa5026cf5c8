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

static const attn__flash_bf16_kernels kernels = {
    2 /* ATTN__ISA_AVX512 */, mm, attn__flash_bf16_cvt_avx512, attn__flash_bf16_round_avx512, 0,
    NULL, NULL, "AVX512_BF16 (VDPBF16PS)"};

const attn__flash_bf16_kernels *attn__flash_bf16_kernels_avx512(void) { return &kernels; }

#else
const attn__flash_bf16_kernels *attn__flash_bf16_kernels_avx512(void) { return NULL; }
#endif
