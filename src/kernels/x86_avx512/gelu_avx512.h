/* GELU of 16 floats with AVX-512F: the float operations of attn__gelu_as (src/kernels/ew.c,
 * formula and error in ew.h) in the same order, its fmaf as fused multiply-adds and nothing
 * else fused, so the results are bit-identical to it.  No division.  Shared by the
 * elementwise kernels and the fp16 GEMM's epilogue; include only from files compiled with
 * AVX-512. */
#ifndef ATTN_GELU_AVX512_H
#define ATTN_GELU_AVX512_H
#include <immintrin.h>

#include "../ew.h"

/* Phi(-c) for c = min(|x|, 7) (the forward's polynomial, raised to the 16th power). */
static inline __m512 attn__phi_neg16(__m512 c) {
    __m512 p = _mm512_fmadd_ps(c, _mm512_set1_ps(ATTN__GELU_C10),
                               _mm512_set1_ps(ATTN__GELU_C9));
    p = _mm512_fmadd_ps(c, p, _mm512_set1_ps(ATTN__GELU_C8));
    p = _mm512_fmadd_ps(c, p, _mm512_set1_ps(ATTN__GELU_C7));
    p = _mm512_fmadd_ps(c, p, _mm512_set1_ps(ATTN__GELU_C6));
    p = _mm512_fmadd_ps(c, p, _mm512_set1_ps(ATTN__GELU_C5));
    p = _mm512_fmadd_ps(c, p, _mm512_set1_ps(ATTN__GELU_C4));
    p = _mm512_fmadd_ps(c, p, _mm512_set1_ps(ATTN__GELU_C3));
    p = _mm512_fmadd_ps(c, p, _mm512_set1_ps(ATTN__GELU_C2));
    p = _mm512_fmadd_ps(c, p, _mm512_set1_ps(ATTN__GELU_C1));
    p = _mm512_fmadd_ps(c, p, _mm512_set1_ps(ATTN__GELU_C0));
    p = _mm512_mul_ps(p, p);
    p = _mm512_mul_ps(p, p);
    p = _mm512_mul_ps(p, p);
    return _mm512_mul_ps(p, p);
}

static inline __m512 attn__gelu16(__m512 x) {
    const __m512 amax = _mm512_set1_ps(ATTN__GELU_AMAX);
    const __m512 a = _mm512_abs_ps(x), c = _mm512_min_ps(a, amax); /* a < 7 ? a : 7 */
    const __m512 p = attn__phi_neg16(c); /* Phi(-|x|) */
    /* t = a <= 7 ? x Phi(-|x|) : 0 (NaN too);  x <= 0 ? t : x - t (NaN: x - t) */
    const __m512 t = _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(a, amax, _CMP_LE_OQ), x, p);
    return _mm512_mask_sub_ps(t, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NLE_UQ), x, t);
}

#endif
