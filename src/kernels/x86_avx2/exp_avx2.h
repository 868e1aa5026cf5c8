/* exp2 of 8 floats with AVX2 + FMA, shared by the attention kernels' softmax and the GELU
 * backward; include only from files compiled with AVX2 and FMA. */
#ifndef ATTN_EXP_AVX2_H
#define ATTN_EXP_AVX2_H
#include <immintrin.h>

/* 2^t for t <= 0 (the scores' weights): t clamped to -126 (-inf too; NaN passes), n = round(t)
 * by the 1.5 2^23 shift, whose low bits also give the exponent field 126 + n of 2^(n-1) (0 at
 * n = -126: an exact 0 weight below 2^-125.5, never a subnormal one, which would cost
 * microcode assists in the products that follow); f = t - n in [-1/2, 1/2] exactly; 2^(f+1) by
 * a degree-6 polynomial with doubled coefficients (relative error 2e-9, about 1.3 ulp evaluated
 * in float; 1 exactly at t = 0).  With the subtraction of the maximum and the scaling by
 * log2(e) (flash_avx2.c's expsum), 15 vector operations, where exp8 and smax's pass took 26. */
static inline __m256 attn__exp2_8(__m256 t) {
    const __m256 shift = _mm256_set1_ps(12583038.0f); /* 1.5 * 2^23 + 126 */
    t = _mm256_max_ps(_mm256_set1_ps(-126.0f), t);   /* t when NaN */
    __m256 ti = _mm256_add_ps(t, shift);
    __m256 f = _mm256_sub_ps(t, _mm256_sub_ps(ti, shift));
    __m256 p = _mm256_set1_ps(2 * 1.535351475e-04f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2 * 1.339888084e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2 * 9.618436918e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2 * 5.550332367e-02f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2 * 2.402264774e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2 * 6.931471825e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.0f));
    __m256i e = _mm256_slli_epi32(_mm256_castps_si256(ti), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#endif
