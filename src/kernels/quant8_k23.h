/* The int8-activation kernels (quant.h, mv8) of Q2_K and Q3_K on 256-bit integer vectors,
 * shared by the three x86 int8 sets: x86_avx2/quant8_avx2.c and x86_avxvnni/quant_avxvnni.c
 * (through quant8_256.h), x86_avx512vnni/quant_vnni.c (256-bit VPDPBUSD of AVX512VL).  The
 * includer defines `dp(u, s)` (32 unsigned weight bytes times 32 signed activation bytes into
 * 8 int32 lanes of 4 products each, exactly) and ld256, then includes this file once
 * (attn__h2f: kquant_avx2.h).
 *
 * Per block of 32 of x (the weight's groups 2 j and 2 j + 1 of 16), the 32 weight quants as
 * unsigned bytes (Q2_K q in [0, 3]; Q3_K ql | h << 2 in [0, 7], the offset 4 subtracted as
 * integers: a second dot product of the constant with x's quants), dot products in lanes 0-3
 * (group 2 j) and 4-7 (2 j + 1) multiplied by the groups' integer scales (exact: |.| < 2^24),
 * converted to float and multiplied by (d dx) into one float accumulator per vector; Q2_K's
 * mins (dmin dx) (m0 sum0(qx) + m1 sum1(qx)) the same way into a second accumulator (a dot
 * product of the bytes m0 (first 16) and m1 with x's quants: lanes hold parts of the integer
 * sums the plain C kernel takes from attn__q8act's sq).  Row sum: each accumulator's 8 lanes
 * reduced in a fixed order, the first minus the second.  The terms are those of the plain C
 * kernel (ref/quant_kern_ref.c), added in another order. */
#ifndef ATTN_QUANT8_K23_BODY
#define ATTN_QUANT8_K23_BODY

#include "x86_avx2/kquant_avx2.h"

/* the 2-bit fields (j & 3) of the 32 bytes at qs + 32 (j >> 2): elements 32 j .. 32 j + 31 */
INLINE __m256i k23_bits2(const uint8_t *qs, int j) {
    return _mm256_and_si256(_mm256_srl_epi16(ld256(qs + 32 * (j >> 2)), _mm_cvtsi32_si128(2 * (j & 3))),
                            _mm256_set1_epi8(3));
}

INLINE void rowsk23(int three, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                    const attn__q8act *xa, const int M, float *y, int64_t ldy) {
    const size_t bb = three ? 110 : 84;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 acc[ATTN__QMV_MAX], am[ATTN__QMV_MAX];
        for (int i = 0; i < M; i++) acc[i] = am[i] = _mm256_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += bb) {
            _mm_prefetch((const char *)b + 2048, _MM_HINT_T0);
            _mm_prefetch((const char *)b + 2048 + 64, _MM_HINT_T0);
            /* the 16 integer group scales, lane g & 7 of sc[g >> 3]; Q2_K's 16 mins as bytes in
             * both 128-bit lanes (picked per pair of groups by VPSHUFB) */
            __m256i sc[2], mnb = _mm256_setzero_si256();
            if (three) {
                attn__q3k_scales16(b, sc);
            } else {
                const __m128i s16 = _mm_loadu_si128((const __m128i *)(const void *)b);
                sc[0] = _mm256_cvtepu8_epi32(_mm_and_si128(s16, _mm_set1_epi8(15)));
                sc[1] = _mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_si128(s16, 8), _mm_set1_epi8(15)));
                mnb = _mm256_broadcastsi128_si256(_mm_and_si128(_mm_srli_epi16(s16, 4), _mm_set1_epi8(15)));
            }
            const float d = attn__h2f(b + (three ? 108 : 80)), dmin = three ? 0.0f : attn__h2f(b + 82);
            const __m256i hm = three ? ld256(b) : _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                __m256i v = k23_bits2(b + (three ? 32 : 16), j);
                if (three) {
                    const __m256i h = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(j)),
                                                       _mm256_set1_epi8(1));
                    v = _mm256_or_si256(v, _mm256_slli_epi16(h, 2));
                }
                const int g0 = 2 * (j & 3); /* groups 2 j, 2 j + 1: lanes g0, g0 + 1 of sc[j >> 2] */
                const __m256i s2 = _mm256_permutevar8x32_epi32(
                    sc[j >> 2], _mm256_set_epi32(g0 + 1, g0 + 1, g0 + 1, g0 + 1, g0, g0, g0, g0));
                const __m256i m2 = _mm256_shuffle_epi8(
                    mnb, _mm256_set_m128i(_mm_set1_epi8((char)(2 * j + 1)), _mm_set1_epi8((char)(2 * j))));
                for (int i = 0; i < M; i++) {
                    const int64_t gx = 8 * k + j;
                    const __m256i xq = ld256((const uint8_t *)(xa->q + i * xa->ldq + 32 * gx));
                    const float dx = xa->dsx[i * 2 * xa->ldb + 2 * gx];
                    __m256i s = dp(v, xq);
                    if (three) s = _mm256_sub_epi32(s, dp(_mm256_set1_epi8(4), xq));
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(s, s2)),
                                             _mm256_set1_ps(d * dx), acc[i]);
                    if (!three)
                        am[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp(m2, xq)), _mm256_set1_ps(dmin * dx), am[i]);
                }
            }
        }
        for (int i = 0; i < M; i++) y[i * ldy + r] = attn__hsum8(acc[i]) - attn__hsum8(am[i]);
    }
}

#define K23_CALL(M) rowsk23(three, w, rb, rows, nb, xa, M, y, ldy)
#define DEFK23(name, THREE) ATTN__QMV_ENTRY(name, attn__q8act, const int three = (THREE);, K23_CALL)
DEFK23(mv8_q2_k, 0)
DEFK23(mv8_q3_k, 1)

#endif
