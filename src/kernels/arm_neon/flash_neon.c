/* Fused-attention microkernels for AArch64 Advanced SIMD (NEON), contract in flash.h: the
 * forward's and the backward's tile products as a 5 x 16 register block (20 q-register
 * accumulators; each k step loads the four vectors of B's row and one value of A per row, and
 * issues 20 FMLA by element), also with the scores' scale and row maxima in its epilogue
 * (mmsmax), or with the backward's weights or dS formed there (mmexp, mmds); the softmax
 * weights' exp as 2^t (exp2_4: shift-rounding, degree-6 polynomial, exponent bits); a general
 * vector exp (exp_4: Cody-Waite reduction, degree-7 polynomial) for the rescaling factors and
 * tanh; the backward's dS step, the soft cap and ALiBi.  The
 * transpose and the row dot products are the plain C ones (their bits are fixed by flash.h).
 * Every output element of the products is one fused multiply-add chain over k in order, so the
 * block shape never changes a bit.  Cost on paper in docs/kernels.md ("ARM64").  Compiled
 * wherever the compiler targets AArch64 (NEON is part of ARMv8-A); elsewhere the table is
 * NULL. */
#include "../flash.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

/* 5 rows: 20 accumulators, 4 vectors of B and the 5 values of A fit the 32 registers (with 6
 * rows GCC 12 holds the six values of A in registers of their own and spills 3 accumulators
 * on every k step). */
#define MR 5

static inline float32x4_t exp2_4(float32x4_t t);

/* The epilogue ep: 0 stores C (accum, cs); 1 (the scores' product, mmsmax): C = sc * the sums
 * and each row's maxima vector vm[4r .. 4r+4) = max over the block's four vectors, the order
 * smax uses; 2 (mmexp): exp(sc C - ev[r]) as smax and expsum form it; 3 (mmds): dS =
 * sc P (C - ev[r]) in ds's order. */
static inline __attribute__((always_inline)) void block(int mr, int64_t K, const float *A,
                                                        int64_t ars, int64_t acs,
                                                        const float *B, int64_t ldb, float *C,
                                                        int64_t ldc, int accum,
                                                        const float *cs, float sc, int ep,
                                                        float *vm, const float *ev,
                                                        const float *P, int64_t ldp) {
    const float32x4_t z = vdupq_n_f32(0.0f);
    float32x4_t c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
    float32x4_t c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
    float32x4_t c40 = z, c41 = z, c42 = z, c43 = z;
    const float *a0 = A, *a1 = A + ars, *a2 = A + 2 * ars, *a3 = A + 3 * ars, *a4 = A + 4 * ars;
#define ROW(r)                                                                                \
    if (mr > r) {                                                                             \
        const float x = a##r[k * acs];                                                        \
        c##r##0 = vfmaq_n_f32(c##r##0, b0, x);                                                \
        c##r##1 = vfmaq_n_f32(c##r##1, b1, x);                                                \
        c##r##2 = vfmaq_n_f32(c##r##2, b2, x);                                                \
        c##r##3 = vfmaq_n_f32(c##r##3, b3, x);                                                \
    }
    if (acs == 1) { /* rows of A contiguous in k (Q K^T, P V, dO V^T, dS K) */
#define ROW1(r)                                                                               \
    if (mr > r) {                                                                             \
        const float x = a##r[k];                                                              \
        c##r##0 = vfmaq_n_f32(c##r##0, b0, x);                                                \
        c##r##1 = vfmaq_n_f32(c##r##1, b1, x);                                                \
        c##r##2 = vfmaq_n_f32(c##r##2, b2, x);                                                \
        c##r##3 = vfmaq_n_f32(c##r##3, b3, x);                                                \
    }
#pragma GCC unroll 1
        for (int64_t k = 0; k < K; k++) {
            const float *b = B + k * ldb;
            const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8),
                              b3 = vld1q_f32(b + 12);
            ROW1(0) ROW1(1) ROW1(2) ROW1(3) ROW1(4)
        }
#undef ROW1
    } else
        for (int64_t k = 0; k < K; k++) { /* A transposed (dS^T Q, W^T dO) */
            const float *b = B + k * ldb;
            const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8),
                              b3 = vld1q_f32(b + 12);
            ROW(0) ROW(1) ROW(2) ROW(3) ROW(4)
        }
#undef ROW
#define ST(r, u)                                                                              \
    if (accum) c##r##u = vfmaq_f32(c##r##u, v, vld1q_f32(c + 4 * u));                         \
    vst1q_f32(c + 4 * u, c##r##u);
#define OUT(r)                                                                                \
    if (mr > r) {                                                                             \
        float *c = C + r * ldc;                                                               \
        const float32x4_t v = vdupq_n_f32(cs ? cs[r] : 1.0f);                                 \
        ST(r, 0) ST(r, 1) ST(r, 2) ST(r, 3)                                                   \
    }
#define OUTM(r)                                                                               \
    if (mr > r) {                                                                             \
        float *c = C + r * ldc;                                                               \
        const float32x4_t v = vdupq_n_f32(sc);                                                \
        c##r##0 = vmulq_f32(c##r##0, v), c##r##1 = vmulq_f32(c##r##1, v);                     \
        c##r##2 = vmulq_f32(c##r##2, v), c##r##3 = vmulq_f32(c##r##3, v);                     \
        vst1q_f32(c, c##r##0), vst1q_f32(c + 4, c##r##1);                                     \
        vst1q_f32(c + 8, c##r##2), vst1q_f32(c + 12, c##r##3);                                \
        float32x4_t m = vmaxq_f32(vld1q_f32(vm + 4 * r), c##r##0);                            \
        m = vmaxq_f32(m, c##r##1), m = vmaxq_f32(m, c##r##2);                                 \
        vst1q_f32(vm + 4 * r, vmaxq_f32(m, c##r##3));                                         \
    }
#define EXPV(r, u)                                                                            \
    vst1q_f32(c + 4 * u,                                                                      \
              exp2_4(vmulq_n_f32(vsubq_f32(vmulq_f32(c##r##u, v), m), 1.44269504088896341f)));
#define OUTE(r)                                                                               \
    if (mr > r) {                                                                             \
        float *c = C + r * ldc;                                                               \
        if (ev[r] == -INFINITY) {                                                             \
            vst1q_f32(c, z), vst1q_f32(c + 4, z), vst1q_f32(c + 8, z), vst1q_f32(c + 12, z);  \
        } else {                                                                              \
            const float32x4_t v = vdupq_n_f32(sc), m = vdupq_n_f32(ev[r]);                    \
            EXPV(r, 0) EXPV(r, 1) EXPV(r, 2) EXPV(r, 3)                                       \
        }                                                                                     \
    }
#define DSV(r, u)                                                                             \
    vst1q_f32(c + 4 * u,                                                                      \
              vmulq_n_f32(vmulq_f32(vld1q_f32(p + 4 * u), vsubq_f32(c##r##u, d)), sc));
#define OUTD(r)                                                                               \
    if (mr > r) {                                                                             \
        float *c = C + r * ldc;                                                               \
        const float *p = P + r * ldp;                                                         \
        const float32x4_t d = vdupq_n_f32(ev[r]);                                             \
        DSV(r, 0) DSV(r, 1) DSV(r, 2) DSV(r, 3)                                               \
    }
    if (ep == 1) {
        OUTM(0) OUTM(1) OUTM(2) OUTM(3) OUTM(4)
    } else if (ep == 2) {
        OUTE(0) OUTE(1) OUTE(2) OUTE(3) OUTE(4)
    } else if (ep == 3) {
        OUTD(0) OUTD(1) OUTD(2) OUTD(3) OUTD(4)
    } else {
        OUT(0) OUT(1) OUT(2) OUT(3) OUT(4)
    }
#undef ST
#undef OUT
#undef OUTM
#undef EXPV
#undef OUTE
#undef DSV
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
static const blk_fn blk_table[MR] = {blk_1, blk_2, blk_3, blk_4, blk_5};
static const blkm_fn blkm_table[MR] = {blkm_1, blkm_2, blkm_3, blkm_4, blkm_5};
static const attn__flash_blke_fn blke_table[MR] = {blke_1, blke_2, blke_3, blke_4, blke_5};
static const attn__flash_blke_fn blkd_table[MR] = {blkd_1, blkd_2, blkd_3, blkd_4, blkd_5};
ATTN__FLASH_MMEP_ROWS(MR, blke_table, blkd_table)

static void mm(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars, int64_t acs,
               const float *B, int64_t ldb, float *C, int64_t ldc, int accum, const float *cs) {
    /* the m rows in nb blocks of near-equal height (32 rows as 5, 5, 5, 5, 4, 4, 4) */
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

/* mm (acs = 1, no accumulation) then smax with every key visible, in one pass: the same bits
 * (the products are mm's; the maxima, of the same values, are exact whatever their order) */
static void mmsmax(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars,
                   const float *B, int64_t ldb, float *C, int64_t ldc, float scale, float *mx) {
    float vm[MR * 4];
    int64_t nb = (m + MR - 1) / MR, i0 = 0;
    for (int64_t bi = 0; bi < nb; bi++) {
        int mr = (int)((m - i0) / (nb - bi));
        mr += (m - i0) % (nb - bi) != 0;
        for (int i = 0; i < MR * 4; i++) vm[i] = -INFINITY;
        for (int64_t j0 = 0; j0 < n; j0 += 16)
            blkm_table[mr - 1](K, A + i0 * ars, ars, B + j0, ldb, C + i0 * ldc + j0, ldc, scale,
                               vm);
        for (int r = 0; r < mr; r++) mx[i0 + r] = vmaxvq_f32(vld1q_f32(vm + 4 * r));
        i0 += mr;
    }
}

/* exp(x) for x <= 0 (x = -inf gives 0; below -87, 0; NaN stays NaN: a NaN score must reach
 * the output, not turn into a weight of 0).  n = round(x log2 e), r = x - n ln 2 in two steps
 * (Cody-Waite), e^r by its degree-7 Taylor polynomial, times 2^n through the exponent bits. */
static inline float32x4_t exp_4(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-87.0f);
    const uint32x4_t ok = vmvnq_u32(vcltq_f32(x, lo)); /* x >= lo, or NaN */
    x = vmaxq_f32(lo, x);                              /* NaN stays NaN */
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693145751953125f));
    r = vfmsq_f32(r, n, vdupq_n_f32(1.428606765330187045e-06f));
    float32x4_t p = vdupq_n_f32(1.0f / 5040);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    /* n in [-126, 0] (x >= -87; NaN gives some n, and p is NaN anyway) */
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vreinterpretq_f32_u32(
        vandq_u32(ok, vreinterpretq_u32_f32(vmulq_f32(p, vreinterpretq_f32_s32(e)))));
}

/* 2^t for t <= 0 (the scores' weights): t clamped to -126 (-inf too; NaN passes), n = round(t)
 * by adding 1.5 2^23 + 126, whose low bits also give the exponent field 126 + n of 2^(n-1) (0 at
 * n = -126: an exact 0 weight below 2^-125.5, never a subnormal one); f = t - n in [-1/2, 1/2]
 * exactly; 2^(f+1) by a degree-6 polynomial with doubled coefficients (relative error 2e-9,
 * about 1.3 ulp evaluated in float; 1 exactly at t = 0). */
static inline float32x4_t exp2_4(float32x4_t t) {
    const float32x4_t shift = vdupq_n_f32(12583038.0f); /* 1.5 * 2^23 + 126 */
    t = vmaxq_f32(vdupq_n_f32(-126.0f), t);
    const float32x4_t ti = vaddq_f32(t, shift);
    const float32x4_t f = vsubq_f32(t, vsubq_f32(ti, shift));
    float32x4_t p = vdupq_n_f32(2 * 1.535351475e-04f);
    p = vfmaq_f32(vdupq_n_f32(2 * 1.339888084e-03f), p, f);
    p = vfmaq_f32(vdupq_n_f32(2 * 9.618436918e-03f), p, f);
    p = vfmaq_f32(vdupq_n_f32(2 * 5.550332367e-02f), p, f);
    p = vfmaq_f32(vdupq_n_f32(2 * 2.402264774e-01f), p, f);
    p = vfmaq_f32(vdupq_n_f32(2 * 6.931471825e-01f), p, f);
    p = vfmaq_f32(vdupq_n_f32(2.0f), p, f);
    const int32x4_t e = vshlq_n_s32(vreinterpretq_s32_f32(ti), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

static void smax(float *s, int64_t ld, int64_t rows, int64_t n, const int64_t *nvalid,
                 float scale, float *mx) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    const uint32x4_t lane = {0, 1, 2, 3};
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        int64_t nv = nvalid ? nvalid[r] : n;
        float32x4_t m = ninf;
        for (int64_t j = 0; j < n; j += 4) {
            float32x4_t v = vmulq_n_f32(vld1q_f32(x + j), scale);
            int64_t left = nv - j;
            if (left < 4) {
                uint32x4_t keep = vcltq_u32(lane, vdupq_n_u32((uint32_t)(left < 0 ? 0 : left)));
                v = vbslq_f32(keep, v, ninf);
            }
            vst1q_f32(x + j, v);
            m = vmaxq_f32(m, v);
        }
        mx[r] = vmaxvq_f32(m);
    }
}

static void expsum(float *s, int64_t ld, int64_t rows, int64_t n, const float *mx, float *sum) {
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        if (mx[r] == -INFINITY) {
            for (int64_t j = 0; j < n; j += 4) vst1q_f32(x + j, vdupq_n_f32(0.0f));
            if (sum) sum[r] = 0.0f;
            continue;
        }
        float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = acc0;
        const float32x4_t m = vdupq_n_f32(mx[r]);
        const float l2e = 1.44269504088896341f;
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) { /* two chains: the exp's latency hidden */
            float32x4_t e0 = exp2_4(vmulq_n_f32(vsubq_f32(vld1q_f32(x + j), m), l2e));
            float32x4_t e1 = exp2_4(vmulq_n_f32(vsubq_f32(vld1q_f32(x + j + 4), m), l2e));
            vst1q_f32(x + j, e0), vst1q_f32(x + j + 4, e1);
            acc0 = vaddq_f32(acc0, e0), acc1 = vaddq_f32(acc1, e1);
        }
        for (; j < n; j += 4) {
            float32x4_t e = exp2_4(vmulq_n_f32(vsubq_f32(vld1q_f32(x + j), m), l2e));
            vst1q_f32(x + j, e);
            acc0 = vaddq_f32(acc0, e);
        }
        if (sum) sum[r] = vaddvq_f32(vaddq_f32(acc0, acc1));
    }
}

static void vexp(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 4) vst1q_f32(y + i, exp_4(vld1q_f32(x + i)));
}

static void ds(const float *p, float *dp, const float *keep, float delta, float scale, int64_t n) {
    const float32x4_t d = vdupq_n_f32(delta);
    for (int64_t j = 0; j < n; j += 4) {
        float32x4_t x = vld1q_f32(dp + j);
        if (keep) x = vmulq_f32(x, vld1q_f32(keep + j));
        x = vmulq_f32(vld1q_f32(p + j), vsubq_f32(x, d));
        vst1q_f32(dp + j, vmulq_n_f32(x, scale));
    }
}

/* tanh(y): for |y| < 0.35 the odd Taylor polynomial to degree 11 (relative error < 2e-8
 * there); above, (1 - e) / (1 + e) with e = exp(-2|y|) <= 0.497, where nothing cancels (a true
 * division: AArch64 has one); the sign put back.  |y| = inf gives 1. */
static inline float32x4_t tanh_4(float32x4_t y) {
    const uint32x4_t sign = vdupq_n_u32(0x80000000u);
    const float32x4_t a = vabsq_f32(y), a2 = vmulq_f32(a, a);
    float32x4_t p = vdupq_n_f32(-1382.0f / 155925.0f);
    p = vfmaq_f32(vdupq_n_f32(62.0f / 2835.0f), p, a2);
    p = vfmaq_f32(vdupq_n_f32(-17.0f / 315.0f), p, a2);
    p = vfmaq_f32(vdupq_n_f32(2.0f / 15.0f), p, a2);
    p = vfmaq_f32(vdupq_n_f32(-1.0f / 3.0f), p, a2);
    const float32x4_t small = vfmaq_f32(a, vmulq_f32(a, a2), p);
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t e = exp_4(vmulq_n_f32(a, -2.0f));
    const float32x4_t large = vdivq_f32(vsubq_f32(one, e), vaddq_f32(one, e));
    const float32x4_t t = vbslq_f32(vcltq_f32(a, vdupq_n_f32(0.35f)), small, large);
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(t),
                                           vandq_u32(sign, vreinterpretq_u32_f32(y))));
}

static void softcap(float *s, int64_t ld, int64_t rows, int64_t n, float cap, float *dt,
                    float *mx) {
    const float32x4_t c = vdupq_n_f32(cap), ninf = vdupq_n_f32(-INFINITY), one = vdupq_n_f32(1.0f);
    const float ic = 1.0f / cap;
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        float32x4_t m = ninf;
        for (int64_t j = 0; j < n; j += 4) {
            float32x4_t v = vld1q_f32(x + j);
            const uint32x4_t fin = vmvnq_u32(vceqq_f32(v, ninf));
            const float32x4_t t = tanh_4(vmulq_n_f32(v, ic));
            v = vbslq_f32(fin, vmulq_f32(c, t), ninf);
            vst1q_f32(x + j, v);
            if (dt) /* 1 - t^2, 0 at -inf */
                vst1q_f32(dt + r * ld + j,
                          vreinterpretq_f32_u32(vandq_u32(
                              fin, vreinterpretq_u32_f32(vfmsq_f32(one, t, t)))));
            m = vmaxq_f32(m, v);
        }
        mx[r] = vmaxvq_f32(m);
    }
}

static void alibi(float *s, int64_t ld, int64_t rows, int64_t n, float slope, float d0,
                  float *mx) {
    const float32x4_t sl = vdupq_n_f32(slope), lane = {0.0f, 1.0f, 2.0f, 3.0f};
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        float32x4_t m = vdupq_n_f32(-INFINITY);
        const float32x4_t dr = vdupq_n_f32(d0 + (float)r);
        for (int64_t j = 0; j < n; j += 4) {
            const float32x4_t dist =
                vabsq_f32(vsubq_f32(dr, vaddq_f32(lane, vdupq_n_f32((float)j))));
            const float32x4_t v = vfmsq_f32(vld1q_f32(x + j), sl, dist);
            vst1q_f32(x + j, v);
            m = vmaxq_f32(m, v);
        }
        mx[r] = vmaxvq_f32(m);
    }
}

static const attn__flash_kernels kernels = {3 /* ATTN__ISA_NEON */, mm, smax, expsum, vexp, ds,
                                            softcap, alibi, attn__flash_tr_c,
                                            attn__flash_rowdot_c, mmsmax, mmexp, mmds};

const attn__flash_kernels *attn__flash_kernels_neon(void) { return &kernels; }

#else
const attn__flash_kernels *attn__flash_kernels_neon(void) { return NULL; }
#endif
