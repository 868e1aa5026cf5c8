/* Cross-entropy row on AVX-512 (contract and bounds in ../kernels.h, attn__ce_row_fn): the
 * maximum in float, exp(x - max) by attn__exp2_16 (relative error < 1e-7 plus the rounding of
 * its argument), the sums of the exponentials and of the logits in double (16 lanes, folded in a
 * fixed order), log once per row in double.  The gradient (p_c - eps / C) inv in float, the
 * target's value in double.  Rows are independent: the same bits for every thread count. */
#include <math.h>

#include "../kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "exp_avx512.h"

static inline __mmask16 m16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Adds the 16 floats of v into two vectors of 8 doubles. */
static inline void acc_d(__m512d *lo, __m512d *hi, __m512 v) {
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm256_castpd_ps(
                                 _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

static double fold_d(__m512d lo, __m512d hi) {
    _Alignas(64) double t[8];
    _mm512_store_pd(t, _mm512_add_pd(lo, hi));
    return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

static void ce_row(const float *x, int64_t t, int64_t C, double eps, double inv, float *dr,
                   double *nll, double *smooth) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vm = ninf;
    __m512d xlo = _mm512_setzero_pd(), xhi = _mm512_setzero_pd();
    for (int64_t c = 0; c < C; c += 16) {
        const __mmask16 mk = m16(C - c);
        const __m512 v = _mm512_maskz_loadu_ps(mk, x + c);
        vm = _mm512_mask_max_ps(vm, mk, vm, v);
        acc_d(&xlo, &xhi, v);
    }
    const float m = _mm512_reduce_max_ps(vm);
    if (!isfinite(m)) { /* an infinity or NaN: the reference says what it means */
        attn__cross_entropy_row_ref(x, t, C, eps, inv, dr, nll, smooth);
        return;
    }
    const __m512 l2 = _mm512_set1_ps(1.44269504088896341f), vmx = _mm512_set1_ps(m);
    __m512d slo = _mm512_setzero_pd(), shi = _mm512_setzero_pd();
    for (int64_t c = 0; c < C; c += 16) {
        const __mmask16 mk = m16(C - c);
        const __m512 v = _mm512_maskz_loadu_ps(mk, x + c);
        const __m512 e = attn__exp2_16(_mm512_mul_ps(_mm512_sub_ps(v, vmx), l2));
        acc_d(&slo, &shi, _mm512_maskz_mov_ps(mk, e));
    }
    const double lse = (double)m + log(fold_d(slo, shi));
    *nll += lse - (double)x[t];
    *smooth += (double)C * lse - fold_d(xlo, xhi);
    if (!dr) return;
    /* x - lse in float: lse rounded to float moves p by at most |lse| 2^-24 relative */
    const __m512 vl = _mm512_set1_ps((float)lse), vi = _mm512_set1_ps((float)inv),
                 ve = _mm512_set1_ps((float)(eps / (double)C * inv));
    for (int64_t c = 0; c < C; c += 16) {
        const __mmask16 mk = m16(C - c);
        const __m512 v = _mm512_maskz_loadu_ps(mk, x + c);
        const __m512 p = attn__exp2_16(_mm512_mul_ps(_mm512_sub_ps(v, vl), l2));
        _mm512_mask_storeu_ps(dr + c, mk, _mm512_fmsub_ps(p, vi, ve));
    }
    dr[t] = (float)((exp((double)x[t] - lse) - (1.0 - eps) - eps / (double)C) * inv);
}

attn__ce_row_fn attn__ce_row_avx512(void) { return ce_row; }
#else
attn__ce_row_fn attn__ce_row_avx512(void) { return 0; }
#endif
