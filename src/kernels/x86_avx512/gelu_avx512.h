/* GELU of 16 floats with AVX-512F: the float operations of attn__gelu_as (src/kernels/ew.c) in
 * the same order, without fused multiply-adds, so the results are bit-identical to it.  Shared
 * by the elementwise kernels and the fp16 GEMM's epilogue; include only from files compiled
 * with AVX-512. */
#ifndef ATTN_GELU_AVX512_H
#define ATTN_GELU_AVX512_H
#include <immintrin.h>

static inline __m512 attn__gelu16(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f));
    /* Horner in the order of attn__gelu_as */
    __m512 p = _mm512_add_ps(_mm512_set1_ps(0.0002765672f),
                             _mm512_mul_ps(z, _mm512_set1_ps(0.0000430638f)));
    p = _mm512_add_ps(_mm512_set1_ps(0.0001520143f), _mm512_mul_ps(z, p));
    p = _mm512_add_ps(_mm512_set1_ps(0.0092705272f), _mm512_mul_ps(z, p));
    p = _mm512_add_ps(_mm512_set1_ps(0.0422820123f), _mm512_mul_ps(z, p));
    p = _mm512_add_ps(_mm512_set1_ps(0.0705230784f), _mm512_mul_ps(z, p));
    p = _mm512_add_ps(one, _mm512_mul_ps(z, p));
    p = _mm512_mul_ps(p, p);
    p = _mm512_mul_ps(p, p);
    p = _mm512_mul_ps(p, p);
    p = _mm512_mul_ps(p, p);
    __m512 e = _mm512_sub_ps(one, _mm512_div_ps(one, p));
    e = _mm512_mask_sub_ps(e, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), zero, e);
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(one, e));
}

#endif
