/* 16 x 16 float transposes in AVX-512F registers, shared by the GEMM packing and the fused
 * attention's K transposes; include only from files compiled with AVX-512. */
#ifndef ATTN_TR16_AVX512_H
#define ATTN_TR16_AVX512_H
#include <immintrin.h>
#include <stdint.h>

/* In-place 16 x 16 transpose: lane k of r[i] becomes lane i of r[k]. */
static inline void attn__tr16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) { /* per 128-bit lane: [a0 b0 a1 b1], [a2 b2 a3 b3] */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int q = 0; q < 4; q++) { /* u[4q+c], lane L: column 4L+c of rows 4q..4q+3 */
        u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
        u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
        u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) { /* gather the four 128-bit lanes of each column */
        __m512 v = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        __m512 w = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
        __m512 x = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        __m512 y = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_f32x4(v, x, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(v, x, 0xDD);
        r[4 + c] = _mm512_shuffle_f32x4(w, y, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(w, y, 0xDD);
    }
}

static inline __mmask16 attn__mask(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Loads 16 rows of up to 16 K values (rows >= nv and lanes >= kn are zero), transposed. */
static inline void attn__load_tr16(__m512 r[16], const float *src, int64_t ld, int64_t nv,
                                   __mmask16 km) {
    for (int i = 0; i < 16; i++)
        r[i] = i < nv ? _mm512_maskz_loadu_ps(km, src + i * ld) : _mm512_setzero_ps();
    attn__tr16(r);
}

#endif
