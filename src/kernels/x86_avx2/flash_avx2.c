/* Fused-attention microkernels for AVX2 + FMA (contract in flash.h): the tile product as a
 * 6 x 16 register block (12 ymm accumulators; each k step loads two vectors of B and
 * broadcasts six values of A), also with the scores' scale and row maxima in its epilogue
 * (mmsmax); the softmax weights' exp as 2^t (attn__exp2_8 of exp_avx2.h: shift-rounding,
 * degree-6 polynomial, exponent bits); a general vector exp (exp8: Cody-Waite reduction,
 * degree-7 polynomial) for the rescaling factors and tanh; the elementwise steps; and the
 * transposes and row dot products on 8 x 8 register transposes (tr8_avx2.h).  Compiled with
 * -mavx2 -mfma; else the table is NULL. */
#include "../flash.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "exp_avx2.h"
#include "tr8_avx2.h"

#define MR 6

/* The accumulators are named variables, not an array: GCC kept an array's copy in memory and
 * stored 10 of the 12 accumulators to the stack on every k step (docs/kernels.md, "AVX2"). */
static inline __attribute__((always_inline)) void store_row(float *c, __m256 a0, __m256 a1,
                                                            int accum, float s) {
    if (accum) {
        __m256 v = _mm256_set1_ps(s);
        a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(c), a0);
        a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(c + 8), a1);
    }
    _mm256_storeu_ps(c, a0);
    _mm256_storeu_ps(c + 8, a1);
}

/* The epilogue ep: 0 stores C (accum, cs); 1 (the scores' product, mmsmax): C = sc * the sums,
 * and each row's maxima vector vm[8r .. 8r+8) = max(max(vm, C[r][0..8)), C[r][8..16)), smax's
 * order of maxima; 2 (mmexp): exp(sc C - ev[r]) as smax and expsum form it; 3 (mmds): dS =
 * sc P (C - ev[r]) in ds's order. */
static inline __attribute__((always_inline)) void block(int mr, int64_t K, const float *A,
                                                        int64_t ars, int64_t acs,
                                                        const float *B, int64_t ldb, float *C,
                                                        int64_t ldc, int accum,
                                                        const float *cs, float sc, int ep,
                                                        float *vm, const float *ev,
                                                        const float *P, int64_t ldp) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    const float *a0 = A, *a1 = A + ars, *a2 = A + 2 * ars, *a3 = A + 3 * ars, *a4 = A + 4 * ars,
                *a5 = A + 5 * ars;
    if (acs == 1) { /* rows of A contiguous in k (Q K^T, P V): one index for all six */
#define ROW1(r)                                                                               \
    if (mr > r) {                                                                             \
        __m256 x = _mm256_broadcast_ss(a##r + k);                                             \
        c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);                                           \
        c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);                                           \
    }
#pragma GCC unroll 4
        for (int64_t k = 0; k < K; k++) {
            __m256 b0 = _mm256_loadu_ps(B + k * ldb), b1 = _mm256_loadu_ps(B + k * ldb + 8);
            ROW1(0) ROW1(1) ROW1(2) ROW1(3) ROW1(4) ROW1(5)
        }
#undef ROW1
    } else {
        /* strided A (dV += P^T dO, dK += dS^T Q): one pointer advanced by acs, the rows at
         * fixed offsets r ars from it (six pointers advanced each k step put six integer adds
         * beside the twelve FMAs, and some took the FMA ports) */
        const float *ak = A;
#define ROWT(r)                                                                               \
    if (mr > r) {                                                                             \
        __m256 x = _mm256_broadcast_ss(ak + r * ars);                                         \
        c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);                                           \
        c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);                                           \
    }
        for (int64_t k = 0; k < K; k++) {
            __m256 b0 = _mm256_loadu_ps(B), b1 = _mm256_loadu_ps(B + 8);
            ROWT(0) ROWT(1) ROWT(2) ROWT(3) ROWT(4) ROWT(5)
            B += ldb, ak += acs;
        }
#undef ROWT
    }
#define OUT(r)                                                                                \
    if (mr > r) store_row(C + r * ldc, c##r##0, c##r##1, accum, cs ? cs[r] : 1.0f);
#define OUTM(r)                                                                               \
    if (mr > r) {                                                                             \
        __m256 v = _mm256_set1_ps(sc);                                                        \
        c##r##0 = _mm256_mul_ps(c##r##0, v), c##r##1 = _mm256_mul_ps(c##r##1, v);             \
        _mm256_storeu_ps(C + r * ldc, c##r##0), _mm256_storeu_ps(C + r * ldc + 8, c##r##1);   \
        v = _mm256_max_ps(_mm256_loadu_ps(vm + 8 * r), c##r##0);                              \
        _mm256_storeu_ps(vm + 8 * r, _mm256_max_ps(v, c##r##1));                              \
    }
#define OUTE(r)                                                                               \
    if (mr > r) {                                                                             \
        float *c = C + r * ldc;                                                               \
        if (ev[r] == -INFINITY) {                                                             \
            __m256 zero = _mm256_setzero_ps();                                                \
            _mm256_storeu_ps(c, zero), _mm256_storeu_ps(c + 8, zero);                         \
        } else {                                                                              \
            __m256 v = _mm256_set1_ps(sc), m = _mm256_set1_ps(ev[r]);                         \
            __m256 l2e = _mm256_set1_ps(1.44269504088896341f);                                \
            __m256 x0 = _mm256_mul_ps(c##r##0, v), x1 = _mm256_mul_ps(c##r##1, v);            \
            _mm256_storeu_ps(c, attn__exp2_8(_mm256_mul_ps(_mm256_sub_ps(x0, m), l2e)));      \
            _mm256_storeu_ps(c + 8, attn__exp2_8(_mm256_mul_ps(_mm256_sub_ps(x1, m), l2e)));  \
        }                                                                                     \
    }
#define OUTD(r)                                                                               \
    if (mr > r) {                                                                             \
        __m256 v = _mm256_set1_ps(sc), d = _mm256_set1_ps(ev[r]);                             \
        const float *p = P + r * ldp;                                                         \
        __m256 x0 = _mm256_mul_ps(_mm256_loadu_ps(p), _mm256_sub_ps(c##r##0, d));             \
        __m256 x1 = _mm256_mul_ps(_mm256_loadu_ps(p + 8), _mm256_sub_ps(c##r##1, d));         \
        _mm256_storeu_ps(C + r * ldc, _mm256_mul_ps(v, x0));                                  \
        _mm256_storeu_ps(C + r * ldc + 8, _mm256_mul_ps(v, x1));                              \
    }
    if (ep == 1) {
        OUTM(0) OUTM(1) OUTM(2) OUTM(3) OUTM(4) OUTM(5)
    } else if (ep == 2) {
        OUTE(0) OUTE(1) OUTE(2) OUTE(3) OUTE(4) OUTE(5)
    } else if (ep == 3) {
        OUTD(0) OUTD(1) OUTD(2) OUTD(3) OUTD(4) OUTD(5)
    } else {
        OUT(0) OUT(1) OUT(2) OUT(3) OUT(4) OUT(5)
    }
#undef OUT
#undef OUTM
#undef OUTE
#undef OUTD
}

typedef void (*blk_fn)(int64_t, const float *, int64_t, int64_t, const float *, int64_t, float *,
                       int64_t, int, const float *);
typedef void (*blkm_fn)(int64_t, const float *, int64_t, const float *, int64_t, float *, int64_t,
                        float, float *);
#define INST(R)                                                                               \
    static void blk_##R(int64_t K, const float *A, int64_t ars, int64_t acs, const float *B,    \
                        int64_t ldb, float *C, int64_t ldc, int accum, const float *cs) {       \
        block(R, K, A, ars, acs, B, ldb, C, ldc, accum, cs, 0.0f, 0, NULL, NULL, NULL, 0);      \
    }                                                                                         \
    static void blkm_##R(int64_t K, const float *A, int64_t ars, const float *B, int64_t ldb,   \
                         float *C, int64_t ldc, float sc, float *vm) {                          \
        block(R, K, A, ars, 1, B, ldb, C, ldc, 0, NULL, sc, 1, vm, NULL, NULL, 0);              \
    }                                                                                         \
    ATTN__FLASH_EP_BLOCKS(R)
INST(1)
INST(2)
INST(3)
INST(4)
INST(5)
INST(6)
static const blk_fn blk_table[MR] = {blk_1, blk_2, blk_3, blk_4, blk_5, blk_6};
static const blkm_fn blkm_table[MR] = {blkm_1, blkm_2, blkm_3, blkm_4, blkm_5, blkm_6};
static const attn__flash_blke_fn blke_table[MR] = {blke_1, blke_2, blke_3, blke_4, blke_5, blke_6};
static const attn__flash_blke_fn blkd_table[MR] = {blkd_1, blkd_2, blkd_3, blkd_4, blkd_5, blkd_6};
ATTN__FLASH_MMEP_ROWS(MR, blke_table, blkd_table)

static void mm(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars, int64_t acs,
               const float *B, int64_t ldb, float *C, int64_t ldc, int accum, const float *cs) {
    /* the m rows in nb blocks of near-equal height (32 rows as 6, 6, 5, 5, 5, 5 rather than
     * 6, 6, 6, 6, 6, 2); each element is one chain whatever the block: the same bits */
    int64_t nb = (m + MR - 1) / MR, i0 = 0;
    for (int64_t bi = 0; bi < nb; bi++) {
        int mr = (int)((m - i0) / (nb - bi));
        mr += (m - i0) % (nb - bi) != 0;
        for (int64_t j0 = 0; j0 < n; j0 += 16)
            blk_table[mr - 1](K, A + i0 * ars, ars, acs, B + j0, ldb, C + i0 * ldc + j0, ldc,
                              accum, cs ? cs + i0 : NULL);
        i0 += mr;
    }
}

static float hmax(__m256 v);

/* mm (acs = 1, no accumulation) then smax with every key visible, in one pass: the same bits */
static void mmsmax(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars,
                   const float *B, int64_t ldb, float *C, int64_t ldc, float scale, float *mx) {
    float vm[MR * 8];
    int64_t nb = (m + MR - 1) / MR, i0 = 0;
    for (int64_t bi = 0; bi < nb; bi++) {
        int mr = (int)((m - i0) / (nb - bi));
        mr += (m - i0) % (nb - bi) != 0;
        for (int i = 0; i < MR * 8; i++) vm[i] = -INFINITY;
        for (int64_t j0 = 0; j0 < n; j0 += 16)
            blkm_table[mr - 1](K, A + i0 * ars, ars, B + j0, ldb, C + i0 * ldc + j0, ldc, scale,
                               vm);
        for (int r = 0; r < mr; r++) mx[i0 + r] = hmax(_mm256_loadu_ps(vm + 8 * r));
        i0 += mr;
    }
}

/* exp(x) for x <= 0 (x = -inf gives 0; below -87, 0; NaN stays NaN: a NaN score must reach
 * the output, not turn into a weight of 0). */
static inline __m256 exp8(__m256 x) {
    __m256 lo = _mm256_set1_ps(-87.0f);
    __m256 ok = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ); /* x >= lo, or NaN */
    x = _mm256_max_ps(lo, x);                      /* x when NaN (maxps returns the second) */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(ok, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static float hmax(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

static float hsum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

static void smax(float *s, int64_t ld, int64_t rows, int64_t n, const int64_t *nvalid,
                 float scale, float *mx) {
    __m256 ninf = _mm256_set1_ps(-INFINITY), sc = _mm256_set1_ps(scale);
    __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        int64_t nv = nvalid ? nvalid[r] : n;
        __m256 m = ninf;
        for (int64_t j = 0; j < n; j += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), sc);
            int64_t left = nv - j;
            if (left < 8) {
                __m256 keep = _mm256_cmp_ps(lane, _mm256_set1_ps((float)(left < 0 ? 0 : left)),
                                            _CMP_LT_OQ);
                v = _mm256_blendv_ps(ninf, v, keep);
            }
            _mm256_storeu_ps(x + j, v);
            m = _mm256_max_ps(m, v);
        }
        mx[r] = hmax(m);
    }
}

static void expsum(float *s, int64_t ld, int64_t rows, int64_t n, const float *mx, float *sum) {
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        if (mx[r] == -INFINITY) {
            for (int64_t j = 0; j < n; j += 8) _mm256_storeu_ps(x + j, _mm256_setzero_ps());
            if (sum) sum[r] = 0.0f;
            continue;
        }
        __m256 acc = _mm256_setzero_ps(), m = _mm256_set1_ps(mx[r]);
        __m256 l2e = _mm256_set1_ps(1.44269504088896341f);
        for (int64_t j = 0; j < n; j += 8) {
            __m256 e = attn__exp2_8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), m), l2e));
            _mm256_storeu_ps(x + j, e);
            acc = _mm256_add_ps(acc, e);
        }
        if (sum) sum[r] = hsum(acc);
    }
}

static void vexp(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
}

static void ds(const float *p, float *dp, const float *keep, float delta, float scale, int64_t n) {
    __m256 d = _mm256_set1_ps(delta), sc = _mm256_set1_ps(scale);
    for (int64_t j = 0; j < n; j += 8) {
        __m256 x = _mm256_loadu_ps(dp + j);
        if (keep) x = _mm256_mul_ps(x, _mm256_loadu_ps(keep + j));
        x = _mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_sub_ps(x, d));
        _mm256_storeu_ps(dp + j, _mm256_mul_ps(sc, x));
    }
}

/* tanh(y): for |y| < 0.35 the odd Taylor polynomial to degree 11 (relative error < 2e-8
 * there); above, (1 - e) / (1 + e) with e = exp(-2|y|) <= 0.497, where nothing cancels (the
 * reciprocal by rcp and one Newton step); the sign put back.  |y| = inf gives 1. */
static inline __m256 tanh8(__m256 y) {
    __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign, y), a2 = _mm256_mul_ps(a, a);
    __m256 p = _mm256_set1_ps(-1382.0f / 155925.0f);
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(62.0f / 2835.0f));
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(-17.0f / 315.0f));
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(2.0f / 15.0f));
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(-1.0f / 3.0f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, a2), p, a);
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = exp8(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f)));
    __m256 den = _mm256_add_ps(one, e), r = _mm256_rcp_ps(den);
    r = _mm256_mul_ps(r, _mm256_fnmadd_ps(den, r, _mm256_set1_ps(2.0f)));
    __m256 large = _mm256_mul_ps(_mm256_sub_ps(one, e), r);
    __m256 t = _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.35f), _CMP_LT_OQ));
    return _mm256_or_ps(t, _mm256_and_ps(sign, y));
}

static void softcap(float *s, int64_t ld, int64_t rows, int64_t n, float cap, float *dt,
                    float *mx) {
    __m256 c = _mm256_set1_ps(cap), ic = _mm256_set1_ps(1.0f / cap);
    __m256 ninf = _mm256_set1_ps(-INFINITY), one = _mm256_set1_ps(1.0f);
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        __m256 m = ninf;
        for (int64_t j = 0; j < n; j += 8) {
            __m256 v = _mm256_loadu_ps(x + j);
            __m256 fin = _mm256_cmp_ps(v, ninf, _CMP_NEQ_OQ);
            __m256 t = tanh8(_mm256_mul_ps(v, ic));
            v = _mm256_blendv_ps(ninf, _mm256_mul_ps(c, t), fin);
            _mm256_storeu_ps(x + j, v);
            if (dt) /* 1 - t^2, 0 at -inf */
                _mm256_storeu_ps(dt + r * ld + j, _mm256_and_ps(fin, _mm256_fnmadd_ps(t, t, one)));
            m = _mm256_max_ps(m, v);
        }
        mx[r] = hmax(m);
    }
}

static void alibi(float *s, int64_t ld, int64_t rows, int64_t n, float slope, float d0,
                  float *mx) {
    __m256 sl = _mm256_set1_ps(slope), ninf = _mm256_set1_ps(-INFINITY);
    __m256 sign = _mm256_set1_ps(-0.0f), lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        __m256 m = ninf, dr = _mm256_set1_ps(d0 + (float)r);
        for (int64_t j = 0; j < n; j += 8) {
            __m256 dist = _mm256_andnot_ps(
                sign, _mm256_sub_ps(dr, _mm256_add_ps(lane, _mm256_set1_ps((float)j))));
            __m256 v = _mm256_fnmadd_ps(sl, dist, _mm256_loadu_ps(x + j));
            _mm256_storeu_ps(x + j, v);
            m = _mm256_max_ps(m, v);
        }
        mx[r] = hmax(m);
    }
}

/* tr (flash.h): 8 x 8 blocks transposed in registers, rows past n and columns past d read as
 * 0, so the whole 16 x 16 blocks come out zero padded; a column stride other than 1 (a
 * transposed view) goes to the plain C one. */
static void tr(const float *src, int64_t rs, int64_t cs, int64_t n, int64_t d, float *dst,
               int64_t ld) {
    if (cs != 1) {
        attn__flash_tr_c(src, rs, cs, n, d, dst, ld);
        return;
    }
    const int64_t np = (n + 15) & ~(int64_t)15, dp = (d + 15) & ~(int64_t)15;
    for (int64_t e0 = 0; e0 < dp; e0 += 8)
        for (int64_t j0 = 0; j0 < np; j0 += 8) {
            __m256 r[8];
            attn__load_tr8(r, src + j0 * rs + e0, rs, n - j0, d - e0);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + (e0 + i) * ld + j0, r[i]);
        }
}

/* rowdot (flash.h): 8 rows at a time, one per lane: 8 x 8 blocks of both operands transposed
 * in registers, then the rounded products added in e order (the plain loop's bits; this file
 * is compiled as ISO C, so GCC fuses no multiply-add that the source does not ask for). */
static void rowdot(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,
                   int64_t d, float *out) {
    int64_t r0 = 0;
    for (; r0 + 8 <= rows; r0 += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t e0 = 0; e0 < d; e0 += 8) {
            const int64_t w = d - e0 < 8 ? d - e0 : 8;
            __m256 ta[8], tb[8];
            attn__load_tr8(ta, a + r0 * lda + e0, lda, 8, w);
            attn__load_tr8(tb, b + r0 * ldb + e0, ldb, 8, w);
            for (int64_t e = 0; e < w; e++) acc = _mm256_add_ps(acc, _mm256_mul_ps(ta[e], tb[e]));
        }
        _mm256_storeu_ps(out + r0, acc);
    }
    if (r0 < rows)
        attn__flash_rowdot_c(a + r0 * lda, lda, b + r0 * ldb, ldb, rows - r0, d, out + r0);
}

static const attn__flash_kernels kernels = {1 /* ATTN__ISA_AVX2 */, mm, smax, expsum, vexp, ds,
                                            softcap, alibi, tr, rowdot, mmsmax, mmexp,
                                            mmds};

const attn__flash_kernels *attn__flash_kernels_avx2(void) { return &kernels; }

#else
const attn__flash_kernels *attn__flash_kernels_avx2(void) { return NULL; }
#endif
