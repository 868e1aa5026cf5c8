/* 8 x 8 float transposes in AVX registers, shared by the GEMM packing and the fused
 * attention's transposes; include only from files compiled with AVX2. */
#ifndef ATTN_TR8_AVX2_H
#define ATTN_TR8_AVX2_H
#include <immintrin.h>
#include <stdint.h>

/* In-place 8 x 8 transpose: lane k of r[i] becomes lane i of r[k]. */
static inline void attn__tr8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) { /* per 128-bit lane: [a0 b0 a1 b1], [a2 b2 a3 b3] */
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int q = 0; q < 2; q++) { /* u[4q+c], lane L: column 4L+c of rows 4q..4q+3 */
        u[4 * q + 0] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
        u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
        u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

/* Lane mask for the first n lanes (n clamped to [0, 8]). */
static inline __m256i attn__mask8(int64_t n) {
    if (n < 0) n = 0;
    if (n > 8) n = 8;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Loads 8 rows of up to 8 values (rows >= nv and lanes >= kn are zero), transposed; whole
 * rows of 8 with plain loads, nothing read for kn <= 0. */
static inline void attn__load_tr8(__m256 r[8], const float *src, int64_t ld, int64_t nv,
                                  int64_t kn) {
    const __m256i km = attn__mask8(kn);
    for (int i = 0; i < 8; i++)
        r[i] = i >= nv || kn <= 0 ? _mm256_setzero_ps()
               : kn >= 8 ? _mm256_loadu_ps(src + i * ld)
                         : _mm256_maskload_ps(src + i * ld, km);
    attn__tr8(r);
}

#endif
