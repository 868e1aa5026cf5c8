/* AArch64 NEON versions of the row-wise kernels of ew.h (the whole attn__ew_kernel table).
 *
 * Bits.  The forward entries (add_ln, bias_gelu, bias_res, rms_norm, colsum, the ReLUs, glu)
 * perform the plain C versions' float operations in the same order on 4 lanes, their fmaf as
 * FMLA and nothing else fused (the build's -std=c11 keeps GCC from contracting a multiply and
 * an add written apart): the same bits as src/kernels/ew.c, as the AVX2 and AVX-512 versions.
 * The lane sums of add_ln (64 lanes) and rms_norm (16 lanes) are 16 and 4 vectors, folded in
 * the definition's order.  The backward entries (ln_bwd_rows, act_bwd) are float versions of
 * the double references within the tolerances tests/test_ew.c holds the AVX-512 ones to.
 * Cost on paper: docs/kernels.md ("ARM64"). */
#include <string.h>

#include "../ew.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#include "exp_neon.h"

/* ---- shared pieces -------------------------------------------------------------------------- */
/* lanes i < n of 4 (n may be <= 0 or >= 4) */
static inline uint32x4_t lanes_below(int64_t n) {
    static const uint32_t idx[4] = {0, 1, 2, 3};
    const int32_t c = n < 0 ? 0 : n > 4 ? 4 : (int32_t)n;
    return vcltq_u32(vld1q_u32(idx), vdupq_n_u32((uint32_t)c));
}

/* x Phi(x) as attn__gelu_as: min(a, 7) is a < 7 ? a : 7 (7 for NaN), t = a <= 7 ? x P^16 : 0,
 * x <= 0 ? t : x - t */
static inline float32x4_t phi_neg4(float32x4_t c) {
    float32x4_t p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C9), c, vdupq_n_f32(ATTN__GELU_C10));
    p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C8), c, p);
    p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C7), c, p);
    p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C6), c, p);
    p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C5), c, p);
    p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C4), c, p);
    p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C3), c, p);
    p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C2), c, p);
    p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C1), c, p);
    p = vfmaq_f32(vdupq_n_f32(ATTN__GELU_C0), c, p);
    p = vmulq_f32(p, p);
    p = vmulq_f32(p, p);
    p = vmulq_f32(p, p);
    return vmulq_f32(p, p);
}

static inline float32x4_t gelu4(float32x4_t x) {
    const float32x4_t amax = vdupq_n_f32(ATTN__GELU_AMAX);
    const float32x4_t a = vabsq_f32(x);
    const float32x4_t c = vbslq_f32(vcltq_f32(a, amax), a, amax);
    const float32x4_t p = phi_neg4(c);
    const float32x4_t t = vreinterpretq_f32_u32(
        vandq_u32(vreinterpretq_u32_f32(vmulq_f32(x, p)), vcleq_f32(a, amax)));
    return vbslq_f32(vcleq_f32(x, vdupq_n_f32(0.0f)), t, vsubq_f32(x, t));
}

/* attn__exp2_as on 4 lanes: clamp to [-126, 126] (a NaN lane gives NaN, and the result is
 * NaN anyway through x), n = rint(t) (round to nearest even, as rintf), Horner with FMLA,
 * times 2^n built in the exponent field */
static inline float32x4_t exp2_as4(float32x4_t t) {
    return attn__exp2_core4(vminq_f32(vmaxq_f32(t, vdupq_n_f32(-126.0f)), vdupq_n_f32(126.0f)));
}

/* ---- add_ln ---------------------------------------------------------------------------------- */
/* The 64 lane sums of ew.h as 16 vectors (lanes 4i .. 4i + 3 in a[i]), folded as ln_fold:
 * s[j] += s[j + h] for h = 32, 16, 8, 4 (whole vectors), then 2 and 1 (within a[0]). */
typedef struct ln_acc {
    float32x4_t a[16];
} ln_acc;

static inline float ln_fold4(const ln_acc *s) {
    float32x4_t v[8];
    for (int i = 0; i < 8; i++) v[i] = vaddq_f32(s->a[i], s->a[i + 8]);
    for (int i = 0; i < 4; i++) v[i] = vaddq_f32(v[i], v[i + 4]);
    for (int i = 0; i < 2; i++) v[i] = vaddq_f32(v[i], v[i + 2]);
    v[0] = vaddq_f32(v[0], v[1]);
    const float32x2_t h = vadd_f32(vget_low_f32(v[0]), vget_high_f32(v[0]));
    return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

static void add_ln_neon(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                        const float *w, const float *lb, float eps, int64_t M, int64_t E,
                        float *amax) {
    const uint32x4_t absm = vdupq_n_u32(0x7fffffffu);
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        const float *rr = r ? r + m * ldr : NULL;
        ln_acc s, q;
        for (int i = 0; i < 16; i++) s.a[i] = vdupq_n_f32(0.0f);
        /* 1: t, stored, and its lane sums */
        int64_t e = 0;
        for (; e + 64 <= E; e += 64)
            for (int i = 0; i < 16; i++) {
                float32x4_t v = vld1q_f32(yr + e + 4 * i);
                if (b) v = vaddq_f32(v, vld1q_f32(b + e + 4 * i));
                if (rr) v = vaddq_f32(v, vld1q_f32(rr + e + 4 * i));
                if (b || rr) vst1q_f32(yr + e + 4 * i, v);
                s.a[i] = vaddq_f32(s.a[i], v);
            }
        if (e < E) { /* the tail block: lanes past the row add +0, which changes no sum */
            const int64_t n = E - e;
            float *t = yr + e;
            for (int64_t j = 0; j < n; j++) {
                if (b) t[j] = t[j] + b[e + j];
                if (rr) t[j] = t[j] + rr[e + j];
            }
            float tmp[64] = {0};
            memcpy(tmp, t, (size_t)n * sizeof(float));
            for (int i = 0; i < 16 && 4 * i < n; i++)
                s.a[i] = vaddq_f32(s.a[i], vld1q_f32(tmp + 4 * i));
        }
        const float mhs = ln_fold4(&s) / (float)E;
        const float32x4_t mh = vdupq_n_f32(mhs);
        /* 2: sums of d and d^2, one half of the lanes at a time (each lane still adds its
         * elements in increasing e) */
        for (int i = 0; i < 16; i++) s.a[i] = q.a[i] = vdupq_n_f32(0.0f);
        for (int h = 0; h < 2; h++) {
            float32x4_t s8[8], q8[8];
            for (int i = 0; i < 8; i++) s8[i] = q8[i] = vdupq_n_f32(0.0f);
            for (e = 32 * h; e + 32 <= E; e += 64)
                for (int i = 0; i < 8; i++) {
                    const float32x4_t d = vsubq_f32(vld1q_f32(yr + e + 4 * i), mh);
                    s8[i] = vaddq_f32(s8[i], d);
                    q8[i] = vaddq_f32(q8[i], vmulq_f32(d, d));
                }
            if (e < E) {
                const int64_t n = E - e; /* < 32 */
                float tmp[32] = {0};
                for (int64_t j = 0; j < n; j++) tmp[j] = yr[e + j] - mhs;
                for (int i = 0; i < 8 && 4 * i < n; i++) {
                    const float32x4_t d = vld1q_f32(tmp + 4 * i);
                    s8[i] = vaddq_f32(s8[i], d);
                    q8[i] = vaddq_f32(q8[i], vmulq_f32(d, d));
                }
            }
            for (int i = 0; i < 8; i++) s.a[8 * h + i] = s8[i], q.a[8 * h + i] = q8[i];
        }
        float ml, rstd, mx;
        if (attn__ln_finish(ln_fold4(&s), ln_fold4(&q), E, eps, &ml, &rstd)) {
            /* 4: the affine map, and the row's max |y| as integers */
            const float32x4_t vl = vdupq_n_f32(ml), vr = vdupq_n_f32(rstd);
            uint32x4_t am = vdupq_n_u32(0);
            for (e = 0; e + 4 <= E; e += 4) {
                float32x4_t x = vsubq_f32(vsubq_f32(vld1q_f32(yr + e), mh), vl);
                x = vmulq_f32(x, vr);
                if (w) x = vmulq_f32(x, vld1q_f32(w + e));
                if (lb) x = vaddq_f32(x, vld1q_f32(lb + e));
                vst1q_f32(yr + e, x);
                am = vmaxq_u32(am, vandq_u32(vreinterpretq_u32_f32(x), absm));
            }
            uint32_t a = vmaxvq_u32(am);
            for (; e < E; e++) {
                const float x = attn__ln_map(yr[e], mhs, ml, rstd, w, lb, e);
                yr[e] = x;
                uint32_t u;
                memcpy(&u, &x, sizeof u);
                u &= 0x7fffffffu;
                a = u > a ? u : a;
            }
            memcpy(&mx, &a, sizeof mx);
            if (a > 0x7f800000u) mx = NAN;
        } else {
            mx = attn__ln_row_wide(yr, E, w, lb, eps);
        }
        if (amax) amax[m] = mx;
    }
}

/* ---- bias + GELU, bias + residual ------------------------------------------------------------ */
static void bias_gelu_neon(float *y, int64_t ldy, const float *b, int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        int64_t n = 0;
        for (; n + 4 <= N; n += 4) {
            float32x4_t x = vld1q_f32(yr + n);
            if (b) x = vaddq_f32(x, vld1q_f32(b + n));
            vst1q_f32(yr + n, gelu4(x));
        }
        for (; n < N; n++) yr[n] = attn__gelu_as(b ? yr[n] + b[n] : yr[n]);
    }
}

static void bias_res_neon(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                          int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        const float *rr = r ? r + m * ldr : NULL;
        int64_t n = 0;
        for (; n + 4 <= N; n += 4) {
            float32x4_t x = vld1q_f32(yr + n);
            if (b) x = vaddq_f32(x, vld1q_f32(b + n));
            if (rr) x = vaddq_f32(x, vld1q_f32(rr + n));
            vst1q_f32(yr + n, x);
        }
        for (; n < N; n++) {
            const float t = b ? yr[n] + b[n] : yr[n];
            yr[n] = rr ? t + rr[n] : t;
        }
    }
}

/* ---- backward (contracts in ew.h) ------------------------------------------------------------ */
/* the sum of 4 lanes (fixed order) */
static inline float sum4(float32x4_t v) {
    const float32x2_t h = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

/* v[i] for i < n, 0 past n: the row's tail read without going past it */
static inline float32x4_t ld_part(const float *p, int64_t n) {
    if (n >= 4) return vld1q_f32(p);
    float t[4] = {0};
    memcpy(t, p, (size_t)n * sizeof(float));
    return vld1q_f32(t);
}

/* One row at a time as the AVX-512 version: the mean, the centred squares (two passes), then
 * one pass for the column sums and the two row sums of dx, then dx. */
static void ln_bwd_rows_neon(const float *x, int64_t ldx, const float *w, float eps,
                             const float *dy, int64_t lddy, float *dx, int64_t lddx, int64_t M,
                             int64_t E, double *dw, double *db) {
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx, *dyr = dy + m * lddy;
        float32x4_t s = vdupq_n_f32(0.0f);
        for (int64_t e = 0; e < E; e += 4) s = vaddq_f32(s, ld_part(xr + e, E - e));
        const float mu = sum4(s) / (float)E;
        const float32x4_t vm = vdupq_n_f32(mu);
        float32x4_t q = vdupq_n_f32(0.0f);
        for (int64_t e = 0; e < E; e += 4) {
            const uint32x4_t k = lanes_below(E - e);
            const float32x4_t d = vreinterpretq_f32_u32(vandq_u32(
                vreinterpretq_u32_f32(vsubq_f32(ld_part(xr + e, E - e), vm)), k));
            q = vfmaq_f32(q, d, d);
        }
        const float rs = (float)(1.0 / sqrt((double)(sum4(q) / (float)E) + (double)eps));
        const float32x4_t vr = vdupq_n_f32(rs);
        float32x4_t s1 = vdupq_n_f32(0.0f), s2 = s1;
        for (int64_t e = 0; e < E; e += 4) {
            const int64_t n = E - e;
            const uint32x4_t k = lanes_below(n);
            float32x4_t g = ld_part(dyr + e, n);
            const float32x4_t xh = vreinterpretq_f32_u32(vandq_u32(
                vreinterpretq_u32_f32(vmulq_f32(vsubq_f32(ld_part(xr + e, n), vm), vr)), k));
            if (dw) {
                const float32x4_t gx = vmulq_f32(g, xh);
                const float64x2_t g0 = vcvt_f64_f32(vget_low_f32(g)), g1 = vcvt_high_f64_f32(g);
                const float64x2_t x0 = vcvt_f64_f32(vget_low_f32(gx)),
                                  x1 = vcvt_high_f64_f32(gx);
                if (n >= 4) {
                    vst1q_f64(dw + e, vaddq_f64(vld1q_f64(dw + e), x0));
                    vst1q_f64(dw + e + 2, vaddq_f64(vld1q_f64(dw + e + 2), x1));
                    vst1q_f64(db + e, vaddq_f64(vld1q_f64(db + e), g0));
                    vst1q_f64(db + e + 2, vaddq_f64(vld1q_f64(db + e + 2), g1));
                } else {
                    double a[4], c[4];
                    vst1q_f64(a, x0), vst1q_f64(a + 2, x1), vst1q_f64(c, g0), vst1q_f64(c + 2, g1);
                    for (int64_t j = 0; j < n; j++) dw[e + j] += a[j], db[e + j] += c[j];
                }
            }
            if (w) g = vmulq_f32(g, ld_part(w + e, n));
            s1 = vaddq_f32(s1, g);
            s2 = vfmaq_f32(s2, g, xh);
        }
        if (!dx) continue;
        float *dxr = dx + m * lddx;
        const float32x4_t a = vdupq_n_f32(sum4(s1) / (float)E);
        const float32x4_t bb = vdupq_n_f32(sum4(s2) / (float)E);
        for (int64_t e = 0; e < E; e += 4) {
            const int64_t n = E - e;
            float32x4_t g = ld_part(dyr + e, n);
            if (w) g = vmulq_f32(g, ld_part(w + e, n));
            const float32x4_t xh = vmulq_f32(vsubq_f32(ld_part(xr + e, n), vm), vr);
            const float32x4_t d = vsubq_f32(vsubq_f32(g, a), vmulq_f32(xh, bb));
            const float32x4_t o = vmulq_f32(d, vr);
            if (n >= 4) {
                vst1q_f32(dxr + e, o);
            } else {
                float t[4];
                vst1q_f32(t, o);
                memcpy(dxr + e, t, (size_t)n * sizeof(float));
            }
        }
    }
}

/* GELU': Phi(x) + x phi(x), Phi from the forward's polynomial (Phi(-|x|), 0 beyond |x| = 7),
 * phi = 2^(-x^2 log2(e) / 2) / sqrt(2 pi).  ReLU: dy where x > 0, else +0. */
static int act_bwd_neon(attn_activation act, const float *x, const float *dy, float *dx,
                        int64_t n) {
    if (act != ATTN_ACT_GELU && act != ATTN_ACT_RELU) return 0;
    const float32x4_t amax = vdupq_n_f32(ATTN__GELU_AMAX), zero = vdupq_n_f32(0.0f);
    const float32x4_t one = vdupq_n_f32(1.0f), nhl2e = vdupq_n_f32(-0.72134752044448170368f);
    const float32x4_t rs2pi = vdupq_n_f32(0.39894228040143267794f);
    for (int64_t i = 0; i < n; i += 4) {
        const int64_t k = n - i;
        const float32x4_t xv = ld_part(x + i, k), g = ld_part(dy + i, k);
        float32x4_t r;
        if (act == ATTN_ACT_RELU) {
            r = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(g), vcgtq_f32(xv, zero)));
        } else {
            const float32x4_t a = vabsq_f32(xv);
            float32x4_t p = phi_neg4(vbslq_f32(vcltq_f32(a, amax), a, amax));
            p = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(p), vcleq_f32(a, amax)));
            p = vbslq_f32(vcgtq_f32(xv, zero), vsubq_f32(one, p), p); /* Phi(x) */
            const float32x4_t pdf =
                vmulq_f32(attn__exp2_neg4(vmulq_f32(vmulq_f32(xv, xv), nhl2e)), rs2pi);
            r = vmulq_f32(vfmaq_f32(p, xv, pdf), g);
            /* a NaN x: p is 0 (the masks fail), pdf NaN: NaN */
        }
        if (k >= 4) {
            vst1q_f32(dx + i, r);
        } else {
            float t[4];
            vst1q_f32(t, r);
            memcpy(dx + i, t, (size_t)k * sizeof(float));
        }
    }
    return 1;
}

/* ---- RMSNorm, column sums, ReLU, gated activations -------------------------------------------- */
/* rms_norm (ew.h): the 16 lanes are 4 vectors; the fold s[j] += s[j + h], h = 8, 4 (whole
 * vectors), 2, 1 (within one) */
static void rms_norm_neon(const float *x, int64_t ldx, const float *w, float eps, float *y,
                          int64_t ldy, int64_t M, int64_t E) {
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx;
        float *yr = y + m * ldy;
        float32x4_t s[4];
        for (int i = 0; i < 4; i++) s[i] = vdupq_n_f32(0.0f);
        int64_t e = 0;
        for (; e + 16 <= E; e += 16)
            for (int i = 0; i < 4; i++) {
                const float32x4_t v = vld1q_f32(xr + e + 4 * i);
                s[i] = vaddq_f32(s[i], vmulq_f32(v, v));
            }
        if (e < E) { /* lanes past the row add +0 */
            float tmp[16] = {0};
            memcpy(tmp, xr + e, (size_t)(E - e) * sizeof(float));
            for (int i = 0; i < 4; i++) {
                const float32x4_t v = vld1q_f32(tmp + 4 * i);
                s[i] = vaddq_f32(s[i], vmulq_f32(v, v));
            }
        }
        s[0] = vaddq_f32(s[0], s[2]);
        s[1] = vaddq_f32(s[1], s[3]);
        s[0] = vaddq_f32(s[0], s[1]);
        const float ms = sum4(s[0]) / (float)E;
        const float v = ms + eps;
        const float rs = (float)(1.0 / sqrt((double)v));
        const float32x4_t r = vdupq_n_f32(rs);
        for (e = 0; e + 4 <= E; e += 4) {
            float32x4_t t = vmulq_f32(vld1q_f32(xr + e), r);
            if (w) t = vmulq_f32(vld1q_f32(w + e), t);
            vst1q_f32(yr + e, t);
        }
        for (; e < E; e++) {
            const float t = xr[e] * rs;
            yr[e] = w ? w[e] * t : t;
        }
    }
}

/* chunks of 64 columns whose sums stay in 16 registers; every column's adds in row order */
static void colsum_neon(const float *y, int64_t ldy, int64_t M, int64_t n, float *s) {
    int64_t c0 = 0;
    for (; c0 + 64 <= n; c0 += 64) {
        float32x4_t a[16];
        for (int i = 0; i < 16; i++) a[i] = vld1q_f32(s + c0 + 4 * i);
        for (int64_t m = 0; m < M; m++) {
            const float *r = y + m * ldy + c0;
            for (int i = 0; i < 16; i++) a[i] = vaddq_f32(a[i], vld1q_f32(r + 4 * i));
        }
        for (int i = 0; i < 16; i++) vst1q_f32(s + c0 + 4 * i, a[i]);
    }
    for (; c0 + 4 <= n; c0 += 4) {
        float32x4_t a = vld1q_f32(s + c0);
        for (int64_t m = 0; m < M; m++) a = vaddq_f32(a, vld1q_f32(y + m * ldy + c0));
        vst1q_f32(s + c0, a);
    }
    if (c0 < n) attn__colsum_c(y + c0, ldy, M, n - c0, s + c0);
}

static void relu_neon(const float *x, float *y, int64_t n) {
    const float32x4_t zero = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        /* x > 0 ordered: NaN and -0 give +0 */
        vst1q_f32(y + i, vreinterpretq_f32_u32(
                             vandq_u32(vreinterpretq_u32_f32(v), vcgtq_f32(v, zero))));
    }
    attn__relu_c(x + i, y + i, n - i);
}

static void relu_mask_neon(const float *x, float *y, int64_t n, uint16_t *mask) {
    static const uint32_t bit[4] = {1, 2, 4, 8};
    const float32x4_t zero = vdupq_n_f32(0.0f);
    const uint32x4_t bits = vld1q_u32(bit);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint32_t word = 0;
        for (int j = 0; j < 4; j++) {
            const float32x4_t v = vld1q_f32(x + i + 4 * j);
            const uint32x4_t on = vcgtq_f32(v, zero);
            vst1q_f32(y + i + 4 * j,
                      vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), on)));
            word |= vaddvq_u32(vandq_u32(on, bits)) << (4 * j);
        }
        mask[i / 16] = (uint16_t)word;
    }
    if (i < n) attn__relu_mask_c(x + i, y + i, n - i, mask + i / 16);
}

static void relu_bwd_mask_neon(const uint16_t *mask, const float *dy, float *dx, int64_t n) {
    static const uint32_t bit[4] = {1, 2, 4, 8};
    const uint32x4_t bits = vld1q_u32(bit);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint32_t word = mask[i / 16];
        for (int j = 0; j < 4; j++) {
            const uint32x4_t on = vtstq_u32(vdupq_n_u32(word >> (4 * j)), bits);
            vst1q_f32(dx + i + 4 * j, vreinterpretq_f32_u32(vandq_u32(
                                          vreinterpretq_u32_f32(vld1q_f32(dy + i + 4 * j)), on)));
        }
    }
    if (i < n) attn__relu_bwd_mask_c(mask + i / 16, dy + i, dx + i, n - i);
}

static void glu_neon(const float *g, const float *u, float *h, int64_t n, int act) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t x = vld1q_f32(g + i);
        float32x4_t t;
        if (act == 1) {
            const float32x4_t x2 = vmulq_f32(x, x);
            const float32x4_t p = vfmaq_f32(one, vdupq_n_f32(ATTN__GELU_TANH_A), x2);
            t = vmulq_f32(vmulq_f32(x, vdupq_n_f32(ATTN__GELU_TANH_K)), p);
        } else {
            t = vmulq_f32(x, vdupq_n_f32(ATTN__NLOG2E));
        }
        const float32x4_t d = vaddq_f32(one, exp2_as4(t));
        const float32x4_t yv = vdivq_f32(x, d);
        vst1q_f32(h + i, vmulq_f32(yv, vld1q_f32(u + i)));
    }
    attn__glu_c(g + i, u + i, h + i, n - i, act);
}

static const attn__ew_kernel attn__ew_neon = {add_ln_neon,    bias_gelu_neon,     bias_res_neon,
                                              ln_bwd_rows_neon, act_bwd_neon,     rms_norm_neon,
                                              colsum_neon,    relu_neon,          relu_mask_neon,
                                              relu_bwd_mask_neon, glu_neon};

const attn__ew_kernel *attn__ew_kernel_neon(void) { return &attn__ew_neon; }

/* as the x86 versions: the magnitudes' bits, four running unsigned maxima, 16 floats a step */
static int nonfinite_neon(const float *p, int64_t n) {
    const uint32x4_t abs = vdupq_n_u32(0x7fffffffu);
    uint32x4_t m0 = vdupq_n_u32(0), m1 = m0, m2 = m0, m3 = m0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = vmaxq_u32(m0, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(p + i)), abs));
        m1 = vmaxq_u32(m1, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(p + i + 4)), abs));
        m2 = vmaxq_u32(m2, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(p + i + 8)), abs));
        m3 = vmaxq_u32(m3, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(p + i + 12)), abs));
    }
    m0 = vmaxq_u32(vmaxq_u32(m0, m1), vmaxq_u32(m2, m3));
    return (vmaxvq_u32(m0) >= 0x7f800000u) | attn__nonfinite_c(p + i, n - i);
}
attn__nonfinite_fn attn__nonfinite_neon(void) { return nonfinite_neon; }

#else
const attn__ew_kernel *attn__ew_kernel_neon(void) { return 0; }
attn__nonfinite_fn attn__nonfinite_neon(void) { return 0; }
#endif
