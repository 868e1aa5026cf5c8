/* AVX-512 versions of the row-wise kernels of ew.h: the residual add with layer norm (the
 * statistics and the affine map in double, 8 lanes, as the reference) and the bias with GELU
 * (the reference's float operations, 16 lanes, in the same order: bit-identical). */
#include <math.h>

#include "../ew.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "gelu_avx512.h"

static inline __mmask16 m16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

static void add_ln_avx512(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                          const float *w, const float *lb, float eps, int64_t M, int64_t E,
                          float *amax) {
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        const float *rr = r ? r + m * ldr : NULL;
        /* pass 1: t = (y + b) + r, stored; the sum in double */
        __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
        for (int64_t e = 0; e < E; e += 16) {
            __mmask16 k = m16(E - e);
            __m512 v = _mm512_maskz_loadu_ps(k, yr + e);
            if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, b + e));
            if (rr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, rr + e));
            _mm512_mask_storeu_ps(yr + e, k, v);
            s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
            s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(
                                       _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
        }
        const double mean = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / (double)E;
        const __m512d vm = _mm512_set1_pd(mean);
        /* pass 2: the biased variance, two-pass in double (lanes beyond E excluded) */
        s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
        for (int64_t e = 0; e < E; e += 16) {
            __mmask16 k = m16(E - e);
            __m512 v = _mm512_maskz_loadu_ps(k, yr + e);
            __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), vm);
            __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_castpd_ps(
                                           _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))),
                                       vm);
            s0 = _mm512_mask_add_pd(s0, (__mmask8)k, s0, _mm512_mul_pd(d0, d0));
            s1 = _mm512_mask_add_pd(s1, (__mmask8)(k >> 8), s1, _mm512_mul_pd(d1, d1));
        }
        const double var = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / (double)E;
        const __m512d vr = _mm512_set1_pd(1.0 / sqrt(var + (double)eps));
        /* pass 3: ((t - mean) * rstd) * w + lb in double, rounded once to float */
        __m512 mx = _mm512_setzero_ps();
        __mmask16 nan = 0;
        for (int64_t e = 0; e < E; e += 16) {
            __mmask16 k = m16(E - e);
            __m512 v = _mm512_maskz_loadu_ps(k, yr + e);
            __m512d h[2];
            h[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            h[1] = _mm512_cvtps_pd(
                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
            __m512 wv = w ? _mm512_maskz_loadu_ps(k, w + e) : _mm512_setzero_ps();
            __m512 bv = lb ? _mm512_maskz_loadu_ps(k, lb + e) : _mm512_setzero_ps();
            __m256 o[2];
            for (int t = 0; t < 2; t++) {
                __m512d x = _mm512_mul_pd(_mm512_sub_pd(h[t], vm), vr);
                if (w) {
                    __m256 wh = t ? _mm256_castpd_ps(
                                        _mm512_extractf64x4_pd(_mm512_castps_pd(wv), 1))
                                  : _mm512_castps512_ps256(wv);
                    x = _mm512_mul_pd(x, _mm512_cvtps_pd(wh));
                }
                if (lb) {
                    __m256 bh = t ? _mm256_castpd_ps(
                                        _mm512_extractf64x4_pd(_mm512_castps_pd(bv), 1))
                                  : _mm512_castps512_ps256(bv);
                    x = _mm512_add_pd(x, _mm512_cvtps_pd(bh));
                }
                o[t] = _mm512_cvtpd_ps(x);
            }
            __m512 out = _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castps_pd(_mm512_castps256_ps512(o[0])), _mm256_castps_pd(o[1]), 1));
            _mm512_mask_storeu_ps(yr + e, k, out);
            nan |= _mm512_mask_cmp_ps_mask(k, out, out, _CMP_UNORD_Q);
            mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_maskz_mov_ps(k, out)));
        }
        if (amax) amax[m] = nan ? __builtin_nanf("") : _mm512_reduce_max_ps(mx);
    }
}

static void bias_gelu_avx512(float *y, int64_t ldy, const float *b, int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        for (int64_t n = 0; n < N; n += 16) {
            __mmask16 k = m16(N - n);
            __m512 x = _mm512_maskz_loadu_ps(k, yr + n);
            if (b) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, b + n));
            _mm512_mask_storeu_ps(yr + n, k, attn__gelu16(x));
        }
    }
}

static const attn__ew_kernel attn__ew_avx512 = {add_ln_avx512, bias_gelu_avx512};

const attn__ew_kernel *attn__ew_kernel_avx512(void) { return &attn__ew_avx512; }

#else
const attn__ew_kernel *attn__ew_kernel_avx512(void) { return 0; }
#endif
