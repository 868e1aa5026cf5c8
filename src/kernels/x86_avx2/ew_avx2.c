/* AVX2 + FMA versions of the row-wise kernels of ew.h, bit-identical to the plain C ones in
 * src/kernels/ew.c: the residual add with layer norm (its float operations and lane sums on 8
 * lanes) and the bias with GELU (the float operations of attn__gelu_as on 8 lanes, its fmaf as
 * fused multiply-adds and nothing else fused; the plain C one calls fmaf, which is a library
 * call where the compiler may not assume FMA).  The backward kernels are float versions of the
 * double references, as the AVX-512 ones (ew.h).  Compiled with -mavx2 -mfma; else the table
 * is NULL. */
#include <math.h>
#include <string.h>

#include "../ew.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "exp_avx2.h"

/* Phi(-c) for c = min(|x|, 7) (the forward's polynomial, raised to the 16th power). */
static inline __m256 phi_neg8(__m256 c) {
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
    return _mm256_mul_ps(p, p);
}

static inline __m256 abs8(__m256 x) {
    return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

static inline __m256 gelu8(__m256 x) {
    const __m256 amax = _mm256_set1_ps(ATTN__GELU_AMAX);
    const __m256 a = abs8(x);
    const __m256 p = phi_neg8(_mm256_min_ps(a, amax)); /* Phi(-|x|), |x| clamped to 7 */
    /* t = a <= 7 ? x Phi(-|x|) : +0 (NaN too);  x <= 0 ? t : x - t (NaN: x - t) */
    const __m256 t = _mm256_and_ps(_mm256_mul_ps(x, p), _mm256_cmp_ps(a, amax, _CMP_LE_OQ));
    return _mm256_blendv_ps(_mm256_sub_ps(x, t), t,
                            _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OQ));
}

/* The add_ln lane sums (ew.h) in eight vectors: lanes 0-7, 8-15, ..., 56-63. */
typedef struct ln_acc {
    __m256 a[8];
} ln_acc;

/* folded as the plain C ln_fold: s[j] += s[j + h], h = 32, 16, ..., 1 */
static inline float ln_fold8(const ln_acc *s) {
    __m256 v[4];
    for (int i = 0; i < 4; i++) v[i] = _mm256_add_ps(s->a[i], s->a[i + 4]);
    const __m256 h = _mm256_add_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[1], v[3]));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q)); /* lanes 0, 1: s0 + s2, s1 + s3 */
    q = _mm_add_ss(q, _mm_movehdup_ps(q));  /* s0 + s1 */
    return _mm_cvtss_f32(q);
}

/* The mask of the lanes e + 0..7 below n, for _mm256_maskload_ps / _mm256_maskstore_ps. */
static inline __m256i lanes(int64_t e, int64_t n) {
    const __m256i i = _mm256_add_epi32(_mm256_set1_epi32((int)e),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), i);
}

/* The elements of a tail block of n < 64 outside the row read as 0, which adds nothing to a
 * lane sum (never -0), as in the plain C version, which skips them. */
static inline __m256 ld_tail(const float *p, int64_t e, int64_t n) {
    return _mm256_maskload_ps(p, lanes(e, n));
}

/* add_ln of ew.h: the plain C version's float operations on 8 lanes, bit-identical. */
static void add_ln_avx2(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                        const float *w, const float *lb, float eps, int64_t M, int64_t E,
                        float *amax) {
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        const float *rr = r ? r + m * ldr : NULL;
        ln_acc s, q;
        for (int i = 0; i < 8; i++) s.a[i] = _mm256_setzero_ps();
        /* 1: t, stored, and its lane sums */
        int64_t e = 0;
        for (; e + 64 <= E; e += 64)
            for (int i = 0; i < 8; i++) {
                __m256 v = _mm256_loadu_ps(yr + e + 8 * i);
                if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + e + 8 * i));
                if (rr) v = _mm256_add_ps(v, _mm256_loadu_ps(rr + e + 8 * i));
                if (b || rr) _mm256_storeu_ps(yr + e + 8 * i, v);
                s.a[i] = _mm256_add_ps(s.a[i], v);
            }
        if (e < E) {
            const int64_t n = E - e;
            float *t = yr + e;
            for (int64_t j = 0; j < n; j++) {
                if (b) t[j] = t[j] + b[e + j];
                if (rr) t[j] = t[j] + rr[e + j];
            }
            for (int i = 0; i < 8 && 8 * i < n; i++)
                s.a[i] = _mm256_add_ps(s.a[i], ld_tail(t + 8 * i, 8 * i, n));
        }
        const __m256 mh = _mm256_set1_ps(ln_fold8(&s) / (float)E);
        /* 2: sums of d and d^2; 4 vectors of each at a time (16 registers would spill), which
         * changes no sum: each lane still adds its elements in increasing e */
        for (int i = 0; i < 8; i++) s.a[i] = q.a[i] = _mm256_setzero_ps();
        for (int h = 0; h < 2; h++) {
            __m256 s4[4], q4[4];
            for (int i = 0; i < 4; i++) s4[i] = q4[i] = _mm256_setzero_ps();
            for (e = 32 * h; e + 32 <= E; e += 64)
                for (int i = 0; i < 4; i++) {
                    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(yr + e + 8 * i), mh);
                    s4[i] = _mm256_add_ps(s4[i], d);
                    q4[i] = _mm256_add_ps(q4[i], _mm256_mul_ps(d, d));
                }
            if (e < E)
                for (int i = 0; i < 4 && e + 8 * i < E; i++) {
                    const __m256i k = _mm256_cmpgt_epi32(
                        _mm256_set1_epi32((int)(E - e - 8 * i)),
                        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                    const __m256 d = _mm256_and_ps(
                        _mm256_sub_ps(_mm256_maskload_ps(yr + e + 8 * i, k), mh),
                        _mm256_castsi256_ps(k));
                    s4[i] = _mm256_add_ps(s4[i], d);
                    q4[i] = _mm256_add_ps(q4[i], _mm256_mul_ps(d, d));
                }
            for (int i = 0; i < 4; i++) s.a[4 * h + i] = s4[i], q.a[4 * h + i] = q4[i];
        }
        float ml, rstd, mx;
        if (attn__ln_finish(ln_fold8(&s), ln_fold8(&q), E, eps, &ml, &rstd)) {
            /* 4: the affine map */
            const __m256 vl = _mm256_set1_ps(ml), vr = _mm256_set1_ps(rstd);
            __m256i am = _mm256_setzero_si256();
            for (e = 0; e + 8 <= E; e += 8) {
                __m256 x = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(yr + e), mh), vl);
                x = _mm256_mul_ps(x, vr);
                if (w) x = _mm256_mul_ps(x, _mm256_loadu_ps(w + e));
                if (lb) x = _mm256_add_ps(x, _mm256_loadu_ps(lb + e));
                _mm256_storeu_ps(yr + e, x);
                am = _mm256_max_epi32(am, _mm256_and_si256(_mm256_castps_si256(x), absm));
            }
            __m128i a4 = _mm_max_epi32(_mm256_castsi256_si128(am), _mm256_extracti128_si256(am, 1));
            a4 = _mm_max_epi32(a4, _mm_shuffle_epi32(a4, 0x4e));
            a4 = _mm_max_epi32(a4, _mm_shuffle_epi32(a4, 0xb1));
            int32_t a = _mm_cvtsi128_si32(a4);
            const float mhs = _mm256_cvtss_f32(mh);
            for (; e < E; e++) {
                const float x = attn__ln_map(yr[e], mhs, ml, rstd, w, lb, e);
                yr[e] = x;
                int32_t u;
                memcpy(&u, &x, sizeof u);
                u &= 0x7fffffff;
                a = u > a ? u : a;
            }
            memcpy(&mx, &a, sizeof mx);
            if (a > 0x7f800000) mx = NAN;
        } else {
            mx = attn__ln_row_wide(yr, E, w, lb, eps);
        }
        if (amax) amax[m] = mx;
    }
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

static void bias_res_avx2(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                          int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        const float *rr = r ? r + m * ldr : NULL;
        int64_t n = 0;
        for (; n + 8 <= N; n += 8) {
            __m256 x = _mm256_loadu_ps(yr + n);
            if (b) x = _mm256_add_ps(x, _mm256_loadu_ps(b + n));
            if (rr) x = _mm256_add_ps(x, _mm256_loadu_ps(rr + n));
            _mm256_storeu_ps(yr + n, x);
        }
        for (; n < N; n++) {
            float t = b ? yr[n] + b[n] : yr[n];
            yr[n] = rr ? t + rr[n] : t;
        }
    }
}

/* attn__exp2_as on 8 lanes (as the AVX-512 version) */
static inline __m256 exp2_as8(__m256 t) {
    t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(-126.0f)), _mm256_set1_ps(126.0f));
    const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(t, n);
    __m256 p = _mm256_set1_ps(ATTN__EXP2_P6);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN__EXP2_P5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN__EXP2_P4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN__EXP2_P3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN__EXP2_P2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ATTN__EXP2_P1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static void glu_avx2(const float *g, const float *u, float *h, int64_t n, int act) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        __m256 t;
        if (act == 1) {
            const __m256 x2 = _mm256_mul_ps(x, x);
            const __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(ATTN__GELU_TANH_A), x2, one);
            t = _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(ATTN__GELU_TANH_K)), p);
        } else {
            t = _mm256_mul_ps(x, _mm256_set1_ps(ATTN__NLOG2E));
        }
        const __m256 d = _mm256_add_ps(one, exp2_as8(t));
        const __m256 y = _mm256_div_ps(x, d);
        _mm256_storeu_ps(h + i, _mm256_mul_ps(y, _mm256_loadu_ps(u + i)));
    }
    attn__glu_c(g + i, u + i, h + i, n - i, act);
}

/* ---- backward and ReLU (contracts in ew.h) ------------------------------------------------ */
static inline float sum8(__m256 v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* The AVX-512 version's steps on 8 lanes (its float sums run over 16; both are within the
 * reference's tolerance, neither is its bits): the statistics in two passes, one pass for the
 * parameter sums (double, in row order) and the row sums, then dx.  Rows up to a few thousand
 * wide stay in L1 across the passes. */
static void ln_bwd_rows_avx2(const float *x, int64_t ldx, const float *w, float eps,
                             const float *dy, int64_t lddy, float *dx, int64_t lddx, int64_t M,
                             int64_t E, double *dw, double *db) {
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx, *dyr = dy + m * lddy;
        __m256 s = _mm256_setzero_ps();
        for (int64_t e = 0; e < E; e += 8) s = _mm256_add_ps(s, _mm256_maskload_ps(xr + e, lanes(e, E)));
        const float mu = sum8(s) / (float)E;
        const __m256 vm = _mm256_set1_ps(mu);
        __m256 q = _mm256_setzero_ps();
        for (int64_t e = 0; e < E; e += 8) {
            const __m256i k = lanes(e, E);
            const __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + e, k), vm),
                                           _mm256_castsi256_ps(k));
            q = _mm256_fmadd_ps(d, d, q);
        }
        const float rs = (float)(1.0 / sqrt((double)(sum8(q) / (float)E) + (double)eps));
        const __m256 vr = _mm256_set1_ps(rs);
        __m256 s1 = _mm256_setzero_ps(), s2 = s1;
        for (int64_t e = 0; e < E; e += 8) {
            const __m256i k = lanes(e, E);
            __m256 g = _mm256_maskload_ps(dyr + e, k);
            const __m256 xh = _mm256_and_ps(
                _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + e, k), vm), vr),
                _mm256_castsi256_ps(k));
            if (dw) {
                const __m256i k0 = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(k)),
                              k1 = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(k, 1));
                const __m256 gx = _mm256_mul_ps(g, xh);
                __m256d w0 = _mm256_maskload_pd(dw + e, k0), w1 = _mm256_maskload_pd(dw + e + 4, k1);
                __m256d b0 = _mm256_maskload_pd(db + e, k0), b1 = _mm256_maskload_pd(db + e + 4, k1);
                w0 = _mm256_add_pd(w0, _mm256_cvtps_pd(_mm256_castps256_ps128(gx)));
                w1 = _mm256_add_pd(w1, _mm256_cvtps_pd(_mm256_extractf128_ps(gx, 1)));
                b0 = _mm256_add_pd(b0, _mm256_cvtps_pd(_mm256_castps256_ps128(g)));
                b1 = _mm256_add_pd(b1, _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1)));
                _mm256_maskstore_pd(dw + e, k0, w0), _mm256_maskstore_pd(dw + e + 4, k1, w1);
                _mm256_maskstore_pd(db + e, k0, b0), _mm256_maskstore_pd(db + e + 4, k1, b1);
            }
            if (w) g = _mm256_mul_ps(g, _mm256_maskload_ps(w + e, k));
            s1 = _mm256_add_ps(s1, g);
            s2 = _mm256_fmadd_ps(g, xh, s2);
        }
        if (!dx) continue;
        float *dxr = dx + m * lddx;
        const __m256 a = _mm256_set1_ps(sum8(s1) / (float)E), b = _mm256_set1_ps(sum8(s2) / (float)E);
        for (int64_t e = 0; e < E; e += 8) {
            const __m256i k = lanes(e, E);
            __m256 g = _mm256_maskload_ps(dyr + e, k);
            if (w) g = _mm256_mul_ps(g, _mm256_maskload_ps(w + e, k));
            const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + e, k), vm), vr);
            const __m256 d = _mm256_sub_ps(_mm256_sub_ps(g, a), _mm256_mul_ps(xh, b));
            _mm256_maskstore_ps(dxr + e, k, _mm256_mul_ps(d, vr));
        }
    }
}

/* Chunks of 96 columns whose sums stay in 12 registers, the rows in order: every column's adds
 * in row order (attn__colsum_c's bits); the columns past the last whole 8 in plain C. */
static void colsum_avx2(const float *y, int64_t ldy, int64_t M, int64_t n, float *s) {
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t c0 = 0; c0 < n8; c0 += 96) {
        const int nv = (int)((n8 - c0) / 8 < 12 ? (n8 - c0) / 8 : 12);
        __m256 a[12];
        for (int i = 0; i < nv; i++) a[i] = _mm256_loadu_ps(s + c0 + 8 * i);
        for (int64_t m = 0; m < M; m++) {
            const float *r = y + m * ldy + c0;
            for (int i = 0; i < nv; i++) a[i] = _mm256_add_ps(a[i], _mm256_loadu_ps(r + 8 * i));
        }
        for (int i = 0; i < nv; i++) _mm256_storeu_ps(s + c0 + 8 * i, a[i]);
    }
    if (n8 < n) attn__colsum_c(y + n8, ldy, M, n - n8, s + n8);
}

/* ordered x > 0: NaN and -0 fail and give +0, as the plain C version */
static void relu_avx2(const float *x, float *y, int64_t n) {
    const __m256 zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(y + i, _mm256_and_ps(v, _mm256_cmp_ps(v, zero, _CMP_GT_OQ)));
    }
    if (i < n) attn__relu_c(x + i, y + i, n - i);
}

static void relu_mask_avx2(const float *x, float *y, int64_t n, uint16_t *mask) {
    const __m256 zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        const __m256 on0 = _mm256_cmp_ps(v0, zero, _CMP_GT_OQ), on1 = _mm256_cmp_ps(v1, zero, _CMP_GT_OQ);
        _mm256_storeu_ps(y + i, _mm256_and_ps(v0, on0));
        _mm256_storeu_ps(y + i + 8, _mm256_and_ps(v1, on1));
        mask[i / 16] = (uint16_t)(_mm256_movemask_ps(on0) | _mm256_movemask_ps(on1) << 8);
    }
    if (i < n) attn__relu_mask_c(x + i, y + i, n - i, mask + i / 16);
}

static void relu_bwd_mask_avx2(const uint16_t *mask, const float *dy, float *dx, int64_t n) {
    const __m256i bit0 = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128),
                  bit1 = _mm256_slli_epi32(bit0, 8);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i wd = _mm256_set1_epi32(mask[i / 16]);
        const __m256 on0 = _mm256_castsi256_ps(
            _mm256_cmpeq_epi32(_mm256_and_si256(wd, bit0), bit0));
        const __m256 on1 = _mm256_castsi256_ps(
            _mm256_cmpeq_epi32(_mm256_and_si256(wd, bit1), bit1));
        _mm256_storeu_ps(dx + i, _mm256_and_ps(_mm256_loadu_ps(dy + i), on0));
        _mm256_storeu_ps(dx + i + 8, _mm256_and_ps(_mm256_loadu_ps(dy + i + 8), on1));
    }
    if (i < n) attn__relu_bwd_mask_c(mask + i / 16, dy + i, dx + i, n - i);
}

/* act_bwd (ew.h), as the AVX-512 one on 8 lanes.  GELU': Phi(x) + x phi(x), Phi from the
 * forward's polynomial (Phi(-|x|), 0 beyond |x| = 7), phi = exp(-x^2 / 2) / sqrt(2 pi) by
 * attn__exp2_8 (exp_avx2.h, the softmax's).  ReLU: dy where x > 0.  The last partial vector
 * through masked loads and stores, so an element's result never depends on where a chunk of
 * the driver starts. */
static int act_bwd_avx2(attn_activation act, const float *x, const float *dy, float *dx,
                        int64_t n) {
    if (act != ATTN_ACT_GELU && act != ATTN_ACT_RELU) return 0;
    const __m256 amax = _mm256_set1_ps(ATTN__GELU_AMAX), zero = _mm256_setzero_ps();
    const __m256 one = _mm256_set1_ps(1.0f), nhl2e = _mm256_set1_ps(-0.72134752044448170368f);
    const __m256 rs2pi = _mm256_set1_ps(0.39894228040143267794f);
    for (int64_t i = 0; i < n; i += 8) {
        const int whole = n - i >= 8;
        const __m256i k = lanes(0, whole ? 8 : n - i);
        const __m256 xv = whole ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, k);
        const __m256 g = whole ? _mm256_loadu_ps(dy + i) : _mm256_maskload_ps(dy + i, k);
        __m256 r;
        if (act == ATTN_ACT_RELU) {
            r = _mm256_and_ps(_mm256_cmp_ps(xv, zero, _CMP_GT_OQ), g);
        } else {
            const __m256 a = abs8(xv);
            __m256 p = phi_neg8(_mm256_min_ps(a, amax));
            p = _mm256_and_ps(p, _mm256_cmp_ps(a, amax, _CMP_LE_OQ));
            /* Phi(x): x > 0 ? 1 - Phi(-|x|) : Phi(-|x|) */
            p = _mm256_blendv_ps(p, _mm256_sub_ps(one, p), _mm256_cmp_ps(xv, zero, _CMP_GT_OQ));
            const __m256 pdf =
                _mm256_mul_ps(attn__exp2_8(_mm256_mul_ps(_mm256_mul_ps(xv, xv), nhl2e)), rs2pi);
            r = _mm256_mul_ps(_mm256_fmadd_ps(xv, pdf, p), g);
        }
        if (whole) _mm256_storeu_ps(dx + i, r);
        else _mm256_maskstore_ps(dx + i, k, r);
    }
    return 1;
}

static const attn__ew_kernel attn__ew_avx2 = {add_ln_avx2,      bias_gelu_avx2,
                                              bias_res_avx2,    ln_bwd_rows_avx2,
                                              act_bwd_avx2,     NULL,
                                              colsum_avx2,      relu_avx2,
                                              relu_mask_avx2,   relu_bwd_mask_avx2,
                                              glu_avx2};

const attn__ew_kernel *attn__ew_kernel_avx2(void) { return &attn__ew_avx2; }

/* as the AVX-512 version: the magnitudes' bits, four running unsigned maxima, 32 floats a
 * step (the tail in plain C) */
static inline __m256i mag8(const float *p) {
    return _mm256_and_si256(_mm256_loadu_si256((const void *)p), _mm256_set1_epi32(0x7fffffff));
}
static int nonfinite_avx2(const float *p, int64_t n) {
    __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_epu32(m0, mag8(p + i));
        m1 = _mm256_max_epu32(m1, mag8(p + i + 8));
        m2 = _mm256_max_epu32(m2, mag8(p + i + 16));
        m3 = _mm256_max_epu32(m3, mag8(p + i + 24));
    }
    m0 = _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3));
    /* some lane >= 0x7f800000: max(lane, 0x7f800000) == lane */
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    int any = _mm256_movemask_epi8(_mm256_cmpeq_epi32(_mm256_max_epu32(m0, inf), m0)) != 0;
    return any | attn__nonfinite_c(p + i, n - i);
}
attn__nonfinite_fn attn__nonfinite_avx2(void) { return nonfinite_avx2; }

#else
const attn__ew_kernel *attn__ew_kernel_avx2(void) { return 0; }
attn__nonfinite_fn attn__nonfinite_avx2(void) { return 0; }
#endif
