/* bf16 tile products of the fused attention forward on AMX-BF16 (contract in ../flash.h, "tile
 * kernels").  A block of C of up to 32 x 32 lives in four 16 x 16 float tile registers
 * (tmm0-3); each step of 16 K pairs loads up to two 16-row slices of A (tmm4-5, 32 bf16 of
 * each row) and up to two 16-column slices of the pair-interleaved B (tmm6-7: 16 pairs by 16
 * columns, the layout VDPBF16PS uses too, so flash.c packs K^T and V the same way) and issues
 * up to four TDPBF16PS.  TDPBF16PS adds exact products of bf16 pairs into fp32 (denormals
 * flushed), as VDPBF16PS does, 16 x 16 x 32 of them per instruction: on Sapphire Rapids one
 * every 16 cycles, 16 times the rate of fp32 FMAs.
 *
 * With accum, C = cs * C + the products: the rescaled running output O of the forward, its
 * rows scaled by vector multiplies, then loaded into the tiles as their starting sums (so the
 * scaled value is rounded before the products are added; the VDPBF16PS kernels add the scaled
 * C last, in one FMA: the last bits differ, within the same tolerance).  The conversions of
 * P to bf16 are the AVX512_BF16 ones. */
#include <string.h>

#include "../flash.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include "amx_tiles.h"

/* The block of rows [0, 16 or 32) and columns [0, 16 or 32) of C: two row slices when r2, two
 * column slices when c2 (constants where it is inlined); the accumulators start from C's
 * rows (ld: C's row stride in bytes) or, with C NULL, from 0. */
static inline __attribute__((always_inline)) void block(int r2, int c2, int64_t K2,
                                                        const attn__bf16 *A, int64_t lda,
                                                        const attn__bf16 *B, int64_t ldb,
                                                        const float *C, int64_t ld) {
    const int64_t sa = lda * (int64_t)sizeof(attn__bf16);
    const int64_t sb = 2 * ldb * (int64_t)sizeof(attn__bf16);
    const int64_t c16 = 16 * (ld / (int64_t)sizeof(float));
    if (C) {
        _tile_loadd(0, C, ld);
        if (c2) _tile_loadd(1, C + 16, ld);
        if (r2) _tile_loadd(2, C + c16, ld);
        if (r2 && c2) _tile_loadd(3, C + c16 + 16, ld);
    } else {
        _tile_zero(0);
        if (c2) _tile_zero(1);
        if (r2) _tile_zero(2);
        if (r2 && c2) _tile_zero(3);
    }
    for (int64_t p = 0; p < K2; p += 16) {
        const attn__bf16 *a = A + 2 * p, *b = B + p * 2 * ldb;
        _tile_loadd(4, a, sa);
        _tile_loadd(6, b, sb);
        if (c2) _tile_loadd(7, b + 32, sb);
        if (r2) _tile_loadd(5, a + 16 * lda, sa);
        _tile_dpbf16ps(0, 4, 6);
        if (c2) _tile_dpbf16ps(1, 4, 7);
        if (r2) _tile_dpbf16ps(2, 5, 6);
        if (r2 && c2) _tile_dpbf16ps(3, 5, 7);
    }
}

/* C = (accum ? cs * C : 0) + A B.  With accum, C's rows are scaled first (in one pass over
 * them, before any tile reads them: a tile load right after vector stores to its lines, or
 * vector loads right after a tile store, stalls, and this order measured 1.3x faster than
 * staging every block through a buffer), then each block accumulates in the tiles from C
 * itself.  A block with a partial row slice (rows past m are garbage) goes through the
 * staging buffer t: C's rows copied in, the same tile accumulation, the m rows copied back.
 * So every row of C gets the same operations whatever the other rows are (the forward relies
 * on it: a row's result does not depend on the strip it is computed in). */
static void mm(int64_t m, int64_t n, int64_t K2, const attn__bf16 *A, int64_t lda,
               const attn__bf16 *B, int64_t ldb, float *C, int64_t ldc, int accum,
               const float *cs) {
    _Alignas(64) float t[32 * 32];
    const int64_t sc = ldc * (int64_t)sizeof(float);
    if (accum && cs)
        for (int64_t r = 0; r < m; r++) {
            if (cs[r] == 1.0f) continue;
            const __m512 f = _mm512_set1_ps(cs[r]);
            float *c = C + r * ldc;
            for (int64_t j = 0; j < n; j += 16)
                _mm512_storeu_ps(c + j, _mm512_mul_ps(f, _mm512_loadu_ps(c + j)));
        }
    for (int64_t i0 = 0; i0 < m; i0 += 32) {
        const int64_t mr = m - i0 < 32 ? m - i0 : 32;
        const int r2 = mr > 16, whole = mr == 16 || mr == 32;
        const attn__bf16 *a = A + i0 * lda;
        for (int64_t j0 = 0; j0 < n; j0 += 32) {
            const int c2 = n - j0 > 16;
            const int64_t nc = c2 ? 32 : 16;
            const attn__bf16 *b = B + 2 * j0;
            float *c = C + i0 * ldc + j0, *to = c;
            int64_t ld = sc;
            if (!whole) { /* through t (row stride 32 floats) */
                to = t, ld = 32 * (int64_t)sizeof(float);
                if (accum) {
                    for (int64_t r = 0; r < mr; r++)
                        memcpy(t + 32 * r, c + r * ldc, (size_t)nc * sizeof(float));
                    memset(t + 32 * mr, 0, sizeof(float) * (size_t)(32 * (32 - mr)));
                }
            }
            const float *from = accum ? to : NULL;
            if (r2 && c2) block(1, 1, K2, a, lda, b, ldb, from, ld);
            else if (r2) block(1, 0, K2, a, lda, b, ldb, from, ld);
            else if (c2) block(0, 1, K2, a, lda, b, ldb, from, ld);
            else block(0, 0, K2, a, lda, b, ldb, from, ld);
            const int64_t l16 = 16 * (ld / (int64_t)sizeof(float));
            _tile_stored(0, to, ld);
            if (c2) _tile_stored(1, to + 16, ld);
            if (r2) _tile_stored(2, to + l16, ld);
            if (r2 && c2) _tile_stored(3, to + l16 + 16, ld);
            if (!whole)
                for (int64_t r = 0; r < mr; r++)
                    memcpy(c + r * ldc, t + 32 * r, (size_t)nc * sizeof(float));
        }
    }
}

static const attn__flash_bf16_kernels kernels = {
    2 /* ATTN__ISA_AVX512 */, mm, attn__flash_bf16_cvt_avx512, attn__flash_bf16_round_avx512,
    attn__flash_bf16_softmax_avx512, 1, attn__amx_begin, attn__amx_end, "AMX-BF16 tiles"};

const attn__flash_bf16_kernels *attn__flash_bf16_kernels_amx(void) { return &kernels; }
#else
const attn__flash_bf16_kernels *attn__flash_bf16_kernels_amx(void) { return NULL; }
#endif
