/* AVX2 + FMA version of the bias with GELU of ew.h: the float operations of attn__gelu_as
 * (src/kernels/ew.c) on 8 lanes, its fmaf as fused multiply-adds and nothing else fused, so
 * the results are bit-identical to it (the plain C one calls fmaf, which is a library call
 * where the compiler may not assume FMA).  The residual add with layer norm is the plain C
 * one.  Compiled with -mavx2 -mfma; else the table is NULL. */
#include "../ew.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline __m256 gelu8(__m256 x) {
    const __m256 amax = _mm256_set1_ps(ATTN__GELU_AMAX);
    const __m256 a = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    const __m256 c = _mm256_min_ps(a, amax); /* a < 7 ? a : 7 */
    __m256 p = _mm256_fmadd_ps(c, _mm256_set1_ps(ATTN__GELU_C10),
                               _mm256_set1_ps(ATTN__GELU_C9));
    p = _mm256_fmadd_ps(c, p, _mm256_set1_ps(ATTN__GELU_C8));
    p = _mm256_fmadd_ps(c, p, _mm256_set1_ps(ATTN__GELU_C7));
    p = _mm256_fmadd_ps(c, p, _mm256_set1_ps(ATTN__GELU_C6));
    p = _mm256_fmadd_ps(c, p, _mm256_set1_ps(ATTN__GELU_C5));
    p = _mm256_fmadd_ps(c, p, _mm256_set1_ps(ATTN__GELU_C4));
    p = _mm256_fmadd_ps(c, p, _mm256_set1_ps(ATTN__GELU_C3));
    p = _mm256_fmadd_ps(c, p, _mm256_set1_ps(ATTN__GELU_C2));
    p = _mm256_fmadd_ps(c, p, _mm256_set1_ps(ATTN__GELU_C1));
    p = _mm256_fmadd_ps(c, p, _mm256_set1_ps(ATTN__GELU_C0));
    p = _mm256_mul_ps(p, p);
    p = _mm256_mul_ps(p, p);
    p = _mm256_mul_ps(p, p);
    p = _mm256_mul_ps(p, p); /* Phi(-|x|) */
    /* t = a <= 7 ? x Phi(-|x|) : +0 (NaN too);  x <= 0 ? t : x - t (NaN: x - t) */
    const __m256 t = _mm256_and_ps(_mm256_mul_ps(x, p), _mm256_cmp_ps(a, amax, _CMP_LE_OQ));
    return _mm256_blendv_ps(_mm256_sub_ps(x, t), t,
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OQ));
}

static void add_ln_avx2(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                        const float *w, const float *lb, float eps, int64_t M, int64_t E,
                        float *amax) {
    attn__ew_kernel_ref()->add_ln(y, ldy, b, r, ldr, w, lb, eps, M, E, amax);
}

static void bias_gelu_avx2(float *y, int64_t ldy, const float *b, int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        int64_t n = 0;
        for (; n + 8 <= N; n += 8) {
            __m256 x = _mm256_loadu_ps(yr + n);
            if (b) x = _mm256_add_ps(x, _mm256_loadu_ps(b + n));
            _mm256_storeu_ps(yr + n, gelu8(x));
        }
        for (; n < N; n++) yr[n] = attn__gelu_as(b ? yr[n] + b[n] : yr[n]);
    }
}

static const attn__ew_kernel attn__ew_avx2 = {add_ln_avx2, bias_gelu_avx2};

const attn__ew_kernel *attn__ew_kernel_avx2(void) { return &attn__ew_avx2; }

#else
const attn__ew_kernel *attn__ew_kernel_avx2(void) { return 0; }
#endif
