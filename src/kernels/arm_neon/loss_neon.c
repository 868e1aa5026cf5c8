/* Cross-entropy row on AArch64 NEON (contract and bounds in ../kernels.h, attn__ce_row_fn), as
 * the AVX-512 one: the maximum in float, exp(x - max) by attn__exp2_neg4 (exp_neon.h; relative
 * error < 1.3e-7 plus the rounding of its argument), the sums of the exponentials and of the
 * logits in double (2 x 2 lanes, folded in a fixed order), log once per row in double.  The
 * gradient (p_c - eps / C) inv in float (one fused multiply-subtract), the target's value in
 * double.  Rows are independent: the same bits for every thread count.  Cost on paper:
 * docs/kernels.md ("ARM64"). */
#include <math.h>
#include <string.h>

#include "../kernels.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#include "exp_neon.h"

/* x[c .. c + 3], lanes past n = C - c set to fill */
static inline float32x4_t ld_fill(const float *x, int64_t n, float fill) {
    if (n >= 4) return vld1q_f32(x);
    float t[4] = {fill, fill, fill, fill};
    memcpy(t, x, (size_t)n * sizeof(float));
    return vld1q_f32(t);
}

/* adds the 4 floats of v into two vectors of 2 doubles */
static inline void acc_d(float64x2_t *lo, float64x2_t *hi, float32x4_t v) {
    *lo = vaddq_f64(*lo, vcvt_f64_f32(vget_low_f32(v)));
    *hi = vaddq_f64(*hi, vcvt_high_f64_f32(v));
}

static inline double fold_d(float64x2_t lo, float64x2_t hi) {
    const float64x2_t s = vaddq_f64(lo, hi);
    return vgetq_lane_f64(s, 0) + vgetq_lane_f64(s, 1);
}

static void ce_row(const float *x, int64_t t, int64_t C, double eps, double inv, float *dr,
                   double *nll, double *smooth) {
    float32x4_t vm = vdupq_n_f32(-INFINITY);
    float64x2_t xlo = vdupq_n_f64(0.0), xhi = xlo;
    for (int64_t c = 0; c < C; c += 4) {
        vm = vmaxq_f32(vm, ld_fill(x + c, C - c, -INFINITY));
        acc_d(&xlo, &xhi, ld_fill(x + c, C - c, 0.0f));
    }
    const float m = vmaxvq_f32(vm);
    if (!isfinite(m)) { /* an infinity or NaN: the reference says what it means */
        attn__cross_entropy_row_ref(x, t, C, eps, inv, dr, nll, smooth);
        return;
    }
    const float32x4_t l2 = vdupq_n_f32(1.44269504088896341f), vmx = vdupq_n_f32(m);
    float64x2_t slo = vdupq_n_f64(0.0), shi = slo;
    for (int64_t c = 0; c < C; c += 4) { /* lanes past C: -inf - m, exp2 gives 0 */
        const float32x4_t v = ld_fill(x + c, C - c, -INFINITY);
        acc_d(&slo, &shi, attn__exp2_neg4(vmulq_f32(vsubq_f32(v, vmx), l2)));
    }
    const double lse = (double)m + log(fold_d(slo, shi));
    *nll += lse - (double)x[t];
    *smooth += (double)C * lse - fold_d(xlo, xhi);
    if (!dr) return;
    /* x - lse in float: lse rounded to float moves p by at most |lse| 2^-24 relative */
    const float32x4_t vl = vdupq_n_f32((float)lse), vi = vdupq_n_f32((float)inv),
                      nve = vdupq_n_f32(-(float)(eps / (double)C * inv));
    for (int64_t c = 0; c < C; c += 4) {
        const int64_t n = C - c;
        const float32x4_t v = ld_fill(x + c, n, 0.0f);
        const float32x4_t p = attn__exp2_neg4(vmulq_f32(vsubq_f32(v, vl), l2));
        const float32x4_t g = vfmaq_f32(nve, p, vi); /* p inv - eps / C inv, one rounding */
        if (n >= 4) {
            vst1q_f32(dr + c, g);
        } else {
            float o[4];
            vst1q_f32(o, g);
            memcpy(dr + c, o, (size_t)n * sizeof(float));
        }
    }
    dr[t] = (float)((exp((double)x[t] - lse) - (1.0 - eps) - eps / (double)C) * inv);
}

attn__ce_row_fn attn__ce_row_neon(void) { return ce_row; }
#else
attn__ce_row_fn attn__ce_row_neon(void) { return 0; }
#endif
