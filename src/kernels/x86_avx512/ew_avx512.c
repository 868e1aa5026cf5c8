/* AVX-512 versions of the row-wise kernels of ew.h: the residual add with layer norm and the
 * bias with GELU, the plain C versions' float operations on 16 lanes in the same order:
 * bit-identical. */
#include <math.h>
#include <string.h>

#include "../ew.h"

#if defined(__AVX512F__)
#include <immintrin.h>

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

static const attn__ew_kernel attn__ew_avx512 = {add_ln_avx512, bias_gelu_avx512};

const attn__ew_kernel *attn__ew_kernel_avx512(void) { return &attn__ew_avx512; }

#else
const attn__ew_kernel *attn__ew_kernel_avx512(void) { return 0; }
#endif
