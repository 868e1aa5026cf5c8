/* AVX-512 versions of the row-wise kernels of ew.h: the residual add with layer norm and the
 * bias with GELU, the plain C versions' float operations on 16 lanes in the same order:
 * bit-identical. */
#include <math.h>
#include <string.h>

#include "../ew.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "exp_avx512.h"
#include "gelu_avx512.h"

static inline __mmask16 m16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* The add_ln lane sums (ew.h) live in four vectors: lanes 0-15, 16-31, 32-47, 48-63. */
typedef struct ln_acc {
    __m512 a[4];
} ln_acc;

/* a[0] + ... folded as the plain C ln_fold: s[j] += s[j + h], h = 32, 16, ..., 1 */
static inline float ln_fold16(const ln_acc *s) {
    const __m512 v =
        _mm512_add_ps(_mm512_add_ps(s->a[0], s->a[2]), _mm512_add_ps(s->a[1], s->a[3]));
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q)); /* lanes 0, 1: s0 + s2, s1 + s3 */
    q = _mm_add_ss(q, _mm_movehdup_ps(q));  /* s0 + s1 */
    return _mm_cvtss_f32(q);
}

/* step 1 on 16 elements (mask k): t = (y + b) + r, stored when it differs from y */
static inline __m512 ln_t(float *yr, const float *b, const float *rr, int64_t e, __mmask16 k) {
    __m512 v = _mm512_maskz_loadu_ps(k, yr + e);
    if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, b + e));
    if (rr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, rr + e));
    if (b || rr) _mm512_mask_storeu_ps(yr + e, k, v);
    return v; /* 0 in the lanes outside k: adds nothing to a lane sum (never -0) */
}

/* step 2 on 16 elements: d = t - mh (0 outside k), s1 += d, s2 += d * d */
static inline void ln_d(const float *yr, int64_t e, __mmask16 k, __m512 mh, __m512 *s1,
                        __m512 *s2) {
    const __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, yr + e), mh);
    *s1 = _mm512_add_ps(*s1, d);
    *s2 = _mm512_add_ps(*s2, _mm512_mul_ps(d, d));
}

/* step 4 on 16 elements; returns |y| as integers (their order is that of the floats, NaNs
 * above infinity) */
static inline __m512i ln_y(float *yr, const float *w, const float *lb, int64_t e, __mmask16 k,
                           __m512 mh, __m512 ml, __m512 rstd) {
    __m512 x = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, yr + e), mh), ml);
    x = _mm512_mul_ps(x, rstd);
    if (w) x = _mm512_mul_ps(x, _mm512_maskz_loadu_ps(k, w + e));
    if (lb) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, lb + e));
    _mm512_mask_storeu_ps(yr + e, k, x);
    return _mm512_castps_si512(_mm512_abs_ps(x));
}

/* add_ln of ew.h: the plain C version's float operations on 16 lanes, bit-identical. */
static void add_ln_avx512(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                          const float *w, const float *lb, float eps, int64_t M, int64_t E,
                          float *amax) {
    const __mmask16 all = 0xffff;
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        const float *rr = r ? r + m * ldr : NULL;
        ln_acc s, q;
        for (int i = 0; i < 4; i++) s.a[i] = _mm512_setzero_ps();
        int64_t e = 0;
        for (; e + 64 <= E; e += 64)
            for (int i = 0; i < 4; i++)
                s.a[i] = _mm512_add_ps(s.a[i], ln_t(yr, b, rr, e + 16 * i, all));
        for (int i = 0; i < 4 && e + 16 * i < E; i++)
            s.a[i] = _mm512_add_ps(s.a[i], ln_t(yr, b, rr, e + 16 * i, m16(E - e - 16 * i)));
        const __m512 mh = _mm512_set1_ps(ln_fold16(&s) / (float)E);

        for (int i = 0; i < 4; i++) s.a[i] = q.a[i] = _mm512_setzero_ps();
        for (e = 0; e + 64 <= E; e += 64)
            for (int i = 0; i < 4; i++) ln_d(yr, e + 16 * i, all, mh, &s.a[i], &q.a[i]);
        for (int i = 0; i < 4 && e + 16 * i < E; i++)
            ln_d(yr, e + 16 * i, m16(E - e - 16 * i), mh, &s.a[i], &q.a[i]);
        float ml, rstd, mx;
        if (attn__ln_finish(ln_fold16(&s), ln_fold16(&q), E, eps, &ml, &rstd)) {
            const __m512 vl = _mm512_set1_ps(ml), vr = _mm512_set1_ps(rstd);
            __m512i am = _mm512_setzero_si512();
            for (e = 0; e + 16 <= E; e += 16)
                am = _mm512_max_epi32(am, ln_y(yr, w, lb, e, all, mh, vl, vr));
            if (e < E) {
                const __mmask16 k = m16(E - e);
                am = _mm512_mask_max_epi32(am, k, am, ln_y(yr, w, lb, e, k, mh, vl, vr));
            }
            const int32_t a = _mm512_reduce_max_epi32(am);
            memcpy(&mx, &a, sizeof mx);
            if (a > 0x7f800000) mx = NAN;
        } else {
            mx = attn__ln_row_wide(yr, E, w, lb, eps);
        }
        if (amax) amax[m] = mx;
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

static void bias_res_avx512(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                            int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        const float *rr = r ? r + m * ldr : NULL;
        for (int64_t n = 0; n < N; n += 16) {
            __mmask16 k = m16(N - n);
            __m512 x = _mm512_maskz_loadu_ps(k, yr + n);
            if (b) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, b + n));
            if (rr) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, rr + n));
            _mm512_mask_storeu_ps(yr + n, k, x);
        }
    }
}

/* ---- backward (contracts in ew.h) ---------------------------------------------------------- */
static inline float sum16(__m512 v) { return _mm512_reduce_add_ps(v); }

/* One row at a time: the statistics (two passes over the row), then one pass that reads dy and
 * x for the column sums and the two row sums of dx, then dx (the row is in L1 by then). */
static void ln_bwd_rows_avx512(const float *x, int64_t ldx, const float *w, float eps,
                               const float *dy, int64_t lddy, float *dx, int64_t lddx, int64_t M,
                               int64_t E, double *dw, double *db) {
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx, *dyr = dy + m * lddy;
        __m512 s = _mm512_setzero_ps();
        for (int64_t e = 0; e < E; e += 16) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m16(E - e), xr + e));
        const float mu = sum16(s) / (float)E;
        const __m512 vm = _mm512_set1_ps(mu);
        __m512 q = _mm512_setzero_ps();
        for (int64_t e = 0; e < E; e += 16) {
            __mmask16 k = m16(E - e);
            __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, xr + e), vm);
            q = _mm512_fmadd_ps(d, d, q);
        }
        const float rs = (float)(1.0 / sqrt((double)(sum16(q) / (float)E) + (double)eps));
        const __m512 vr = _mm512_set1_ps(rs);
        __m512 s1 = _mm512_setzero_ps(), s2 = s1;
        for (int64_t e = 0; e < E; e += 16) {
            __mmask16 k = m16(E - e);
            __m512 g = _mm512_maskz_loadu_ps(k, dyr + e);
            __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + e), vm), vr);
            if (dw) {
                const __mmask8 k0 = (__mmask8)k, k1 = (__mmask8)(k >> 8);
                __m512 gx = _mm512_mul_ps(g, xh);
                __m512d w0 = _mm512_maskz_loadu_pd(k0, dw + e), w1 = _mm512_maskz_loadu_pd(k1, dw + e + 8);
                __m512d b0 = _mm512_maskz_loadu_pd(k0, db + e), b1 = _mm512_maskz_loadu_pd(k1, db + e + 8);
                w0 = _mm512_add_pd(w0, _mm512_cvtps_pd(_mm512_castps512_ps256(gx)));
                w1 = _mm512_add_pd(w1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                           _mm512_castps_pd(gx), 1))));
                b0 = _mm512_add_pd(b0, _mm512_cvtps_pd(_mm512_castps512_ps256(g)));
                b1 = _mm512_add_pd(b1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                           _mm512_castps_pd(g), 1))));
                _mm512_mask_storeu_pd(dw + e, k0, w0), _mm512_mask_storeu_pd(dw + e + 8, k1, w1);
                _mm512_mask_storeu_pd(db + e, k0, b0), _mm512_mask_storeu_pd(db + e + 8, k1, b1);
            }
            if (w) g = _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, w + e));
            s1 = _mm512_add_ps(s1, g);
            s2 = _mm512_fmadd_ps(g, _mm512_maskz_mov_ps(k, xh), s2);
        }
        if (!dx) continue;
        float *dxr = dx + m * lddx;
        const __m512 a = _mm512_set1_ps(sum16(s1) / (float)E), b = _mm512_set1_ps(sum16(s2) / (float)E);
        for (int64_t e = 0; e < E; e += 16) {
            __mmask16 k = m16(E - e);
            __m512 g = _mm512_maskz_loadu_ps(k, dyr + e);
            if (w) g = _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, w + e));
            __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + e), vm), vr);
            __m512 d = _mm512_sub_ps(_mm512_sub_ps(g, a), _mm512_mul_ps(xh, b));
            _mm512_mask_storeu_ps(dxr + e, k, _mm512_mul_ps(d, vr));
        }
    }
}

/* GELU': Phi(x) + x phi(x); Phi from the forward's polynomial (Phi(-|x|), 0 beyond |x| = 7),
 * phi = exp(-x^2 / 2) / sqrt(2 pi) by attn__exp2_16.  ReLU: dy where x > 0. */
static int act_bwd_avx512(attn_activation act, const float *x, const float *dy, float *dx,
                          int64_t n) {
    if (act != ATTN_ACT_GELU && act != ATTN_ACT_RELU) return 0;
    const __m512 amax = _mm512_set1_ps(ATTN__GELU_AMAX), zero = _mm512_setzero_ps();
    const __m512 one = _mm512_set1_ps(1.0f), nhl2e = _mm512_set1_ps(-0.72134752044448170368f);
    const __m512 rs2pi = _mm512_set1_ps(0.39894228040143267794f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = m16(n - i);
        __m512 xv = _mm512_maskz_loadu_ps(k, x + i), g = _mm512_maskz_loadu_ps(k, dy + i);
        __m512 r;
        if (act == ATTN_ACT_RELU) {
            r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(xv, zero, _CMP_GT_OQ), g);
        } else {
            const __m512 a = _mm512_abs_ps(xv);
            __m512 p = attn__phi_neg16(_mm512_min_ps(a, amax));
            p = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, amax, _CMP_LE_OQ), p);
            /* Phi(x): x > 0 ? 1 - Phi(-|x|) : Phi(-|x|) */
            p = _mm512_mask_sub_ps(p, _mm512_cmp_ps_mask(xv, zero, _CMP_GT_OQ), one, p);
            const __m512 pdf = _mm512_mul_ps(attn__exp2_16(_mm512_mul_ps(_mm512_mul_ps(xv, xv), nhl2e)), rs2pi);
            r = _mm512_mul_ps(_mm512_fmadd_ps(xv, pdf, p), g);
        }
        _mm512_mask_storeu_ps(dx + i, k, r);
    }
    return 1;
}

/* rms_norm (ew.h): the lanes are one vector; the fold adds the upper half of the lanes to the
 * lower (s[j] + s[j + 8], then + 4, + 2, + 1), the C version's order */
static void rms_norm_avx512(const float *x, int64_t ldx, const float *w, float eps, float *y,
                            int64_t ldy, int64_t M, int64_t E) {
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx;
        float *yr = y + m * ldy;
        __m512 s = _mm512_setzero_ps();
        for (int64_t e = 0; e < E; e += 16) {
            const __m512 v = _mm512_maskz_loadu_ps(m16(E - e), xr + e);
            s = _mm512_add_ps(s, _mm512_mul_ps(v, v)); /* masked lanes add +0: no change */
        }
        const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(s),
                                        _mm256_castpd_ps(_mm512_extractf64x4_pd(
                                            _mm512_castps_pd(s), 1)));
        const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
        const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
        const __m128 h1 = _mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1));
        const float ms = _mm_cvtss_f32(h1) / (float)E;
        const float v = ms + eps;
        const __m512 r = _mm512_set1_ps((float)(1.0 / sqrt((double)v)));
        for (int64_t e = 0; e < E; e += 16) {
            const __mmask16 k = m16(E - e);
            __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, xr + e), r);
            if (w) t = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + e), t);
            _mm512_mask_storeu_ps(yr + e, k, t);
        }
    }
}

/* Rows outer over chunks of 256 columns whose sums stay in 16 registers: each row is read in
 * one contiguous piece, every column's adds in row order (attn__colsum_c's bits). */
static void colsum_avx512(const float *y, int64_t ldy, int64_t M, int64_t n, float *s) {
    for (int64_t c0 = 0; c0 < n; c0 += 256) {
        __m512 a[16];
        __mmask16 k[16];
        for (int i = 0; i < 16; i++) {
            k[i] = m16(n - c0 - 16 * i);
            a[i] = _mm512_maskz_loadu_ps(k[i], s + c0 + 16 * i);
        }
        for (int64_t m = 0; m < M; m++) {
            const float *r = y + m * ldy + c0;
            for (int i = 0; i < 16; i++) a[i] = _mm512_add_ps(a[i], _mm512_maskz_loadu_ps(k[i], r + 16 * i));
        }
        for (int i = 0; i < 16; i++) _mm512_mask_storeu_ps(s + c0 + 16 * i, k[i], a[i]);
    }
}

static void relu_avx512(const float *x, float *y, int64_t n) {
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = m16(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        /* ordered x > 0: NaN and -0 fail and give +0, as the plain C version */
        _mm512_mask_storeu_ps(y + i, k, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v));
    }
}

static void relu_mask_avx512(const float *x, float *y, int64_t n, uint16_t *mask) {
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = m16(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        const __mmask16 on = _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ); /* lanes past n: 0 */
        _mm512_mask_storeu_ps(y + i, k, _mm512_maskz_mov_ps(on, v));
        mask[i / 16] = (uint16_t)on;
    }
}

static void relu_bwd_mask_avx512(const uint16_t *mask, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = m16(n - i);
        _mm512_mask_storeu_ps(dx + i, k,
                              _mm512_maskz_loadu_ps((__mmask16)(mask[i / 16] & k), dy + i));
    }
}

/* attn__exp2_as on 16 lanes: the same operations (the clamp's NaN lanes give some value; the
 * result is NaN through x) */
static inline __m512 exp2_as16(__m512 t) {
    t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-126.0f)), _mm512_set1_ps(126.0f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(ATTN__EXP2_P6);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN__EXP2_P5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN__EXP2_P4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN__EXP2_P3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN__EXP2_P2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ATTN__EXP2_P1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

static void glu_avx512(const float *g, const float *u, float *h, int64_t n, int act) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = m16(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(k, g + i);
        __m512 t;
        if (act == 1) {
            const __m512 x2 = _mm512_mul_ps(x, x);
            const __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(ATTN__GELU_TANH_A), x2, one);
            t = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(ATTN__GELU_TANH_K)), p);
        } else {
            t = _mm512_mul_ps(x, _mm512_set1_ps(ATTN__NLOG2E));
        }
        const __m512 d = _mm512_add_ps(one, exp2_as16(t));
        const __m512 y = _mm512_div_ps(x, d);
        _mm512_mask_storeu_ps(h + i, k, _mm512_mul_ps(y, _mm512_maskz_loadu_ps(k, u + i)));
    }
}

static const attn__ew_kernel attn__ew_avx512 = {add_ln_avx512,    bias_gelu_avx512,
                                                bias_res_avx512,  ln_bwd_rows_avx512,
                                                act_bwd_avx512,   rms_norm_avx512,
                                                colsum_avx512,    relu_avx512,
                                                relu_mask_avx512, relu_bwd_mask_avx512,
                                                glu_avx512};

const attn__ew_kernel *attn__ew_kernel_avx512(void) { return &attn__ew_avx512; }

/* the magnitudes' bits (sign cleared) as unsigned integers: NaN and inf are the only ones at or
 * above 0x7f800000; four running maxima, 64 floats a step */
static int nonfinite_avx512(const float *p, int64_t n) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(p + i), abs));
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(p + i + 16), abs));
        m2 = _mm512_max_epu32(m2, _mm512_and_si512(_mm512_loadu_si512(p + i + 32), abs));
        m3 = _mm512_max_epu32(m3, _mm512_and_si512(_mm512_loadu_si512(p + i + 48), abs));
    }
    for (; i < n; i += 16) {
        const __mmask16 k = m16(n - i);
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_maskz_loadu_epi32(k, p + i), abs));
    }
    m0 = _mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3));
    return _mm512_cmpge_epu32_mask(m0, _mm512_set1_epi32(0x7f800000)) != 0;
}
attn__nonfinite_fn attn__nonfinite_avx512(void) { return nonfinite_avx512; }

#else
const attn__ew_kernel *attn__ew_kernel_avx512(void) { return 0; }
attn__nonfinite_fn attn__nonfinite_avx512(void) { return 0; }
#endif
