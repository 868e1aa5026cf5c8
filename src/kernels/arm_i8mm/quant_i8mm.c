/* Quantized weights with int8 activations (attn__q8act) on AArch64 with the int8 matrix
 * multiply extension (SMMLA, FEAT_I8MM; built with +dotprod+i8mm, chosen only where the OS
 * reports i8mm and asimddp: dispatch.c): the mv8 kernels of every type with an int8 path (Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS) for two or more rows
 * of activations.  One SMMLA multiplies a 2 x 8 block of int8 activations (rows i, i + 1) with
 * a 2 x 8 block of weights (rows r, r + 1) into the four int32 dot products, so two activation
 * rows and two weight rows share each weight unpacking and each x load, where SDOT gives one
 * row pair's dot.  One activation row (m = 1) and an odd last weight row run the SDOT kernels
 * (../arm_dotprod/quant_dotprod.c).
 *
 * Bits.  Each dot product is exact (int32, however it is summed), and the float terms are
 * those of the plain C kernel in its order (ref/quant_kern_ref.c, the SDOT file's list): the
 * results are the plain C bits, for every m, row range and thread count.  Cost on paper:
 * docs/kernels.md ("ARM64"). */
#include "../quant.h"

#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD) &&          \
    defined(__ARM_FEATURE_MATMUL_INT8)
#include <arm_neon.h>

#include "../arm_dotprod/qunpack_neon.h"

static inline int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
static inline int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* The weights of 16 elements of rows r and r + 1 (a, b) as SMMLA's 2 x 8 operands: w[0] the
 * elements 0-7 of both rows, w[1] 8-15 */
typedef struct wpair {
    int8x16_t lo, hi;
} wpair;
static inline wpair pair16(int8x16_t a, int8x16_t b) {
    wpair p = {zip_lo(a, b), zip_hi(a, b)};
    return p;
}

/* acc + [x0.w_r, x0.w_r1, x1.w_r, x1.w_r1] over 16 elements (x0, x1: 16 bytes of the two
 * activation rows) */
static inline int32x4_t mm16(int32x4_t acc, const int8_t *x0, const int8_t *x1, wpair w) {
    const int8x16_t a = vld1q_s8(x0), b = vld1q_s8(x1);
    acc = vmmlaq_s32(acc, zip_lo(a, b), w.lo);
    return vmmlaq_s32(acc, zip_hi(a, b), w.hi);
}

/* The activation rows of a step: i and i + 1, or i twice for an odd last row (lanes 2, 3 then
 * unused) */
#define XROW(i) (xa->q + (i) * xa->ldq)

/* ---- the 32-element types ------------------------------------------------------------------ */
enum { T_Q8_0, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_IQ4_NL };

static inline void unpack32(int t, const uint8_t *b, int8x16_t *a0, int8x16_t *a1) {
    switch (t) {
    case T_Q8_0:
        *a0 = vld1q_s8((const int8_t *)b + 2), *a1 = vld1q_s8((const int8_t *)b + 18);
        break;
    case T_Q4_0: attn__unpack_q4(b + 2, a0, a1); break;
    case T_Q4_1: attn__unpack_q4(b + 4, a0, a1); break;
    case T_Q5_0: attn__unpack_q5(b + 6, b + 2, a0, a1); break;
    case T_IQ4_NL: attn__unpack_iq4(b + 2, a0, a1); break;
    default: attn__unpack_q5(b + 8, b + 4, a0, a1); break; /* Q5_1 */
    }
}

/* the plain C kernel's term of block k, activation row i, weight block b, dot */
static inline float term32(int t, const uint8_t *b, const attn__q8act *xa, int64_t i, int64_t k,
                           int32_t dot) {
    const float d = attn__load_half(b);
    const float *xd = xa->dsx + i * 2 * xa->ldb;
    const int32_t *xsq = xa->sq + i * 2 * xa->ldb;
    if (t == T_Q8_0 || t == T_IQ4_NL) return (d * xd[2 * k]) * (float)dot;
    if (t == T_Q4_0 || t == T_Q5_0) {
        const int32_t o = t == T_Q4_0 ? 8 : 16;
        return (d * xd[2 * k]) * (float)(dot - o * (xsq[2 * k] + xsq[2 * k + 1]));
    }
    return (d * xd[2 * k]) * (float)dot + attn__load_half(b + 2) * xd[2 * k + 1];
}

/* rows r, r + 1 (weights w0, w1), all m activation rows */
static inline void pair32(int t, size_t bb, const uint8_t *w0, const uint8_t *w1, int64_t nb,
                          const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    float acc[ATTN__QMV_WIDE][2] = {{0}};
    for (int64_t k = 0; k < nb; k++) {
        const uint8_t *b0 = w0 + (size_t)k * bb, *b1 = w1 + (size_t)k * bb;
        int8x16_t a0, a1, c0, c1;
        unpack32(t, b0, &a0, &a1);
        unpack32(t, b1, &c0, &c1);
        const wpair p0 = pair16(a0, c0), p1 = pair16(a1, c1);
        for (int64_t i = 0; i < m; i += 2) {
            const int64_t i1 = i + 1 < m ? i + 1 : i;
            const int8_t *x0 = XROW(i) + 32 * k, *x1 = XROW(i1) + 32 * k;
            int32x4_t s = mm16(vdupq_n_s32(0), x0, x1, p0);
            s = mm16(s, x0 + 16, x1 + 16, p1);
            acc[i][0] += term32(t, b0, xa, i, k, vgetq_lane_s32(s, 0));
            acc[i][1] += term32(t, b1, xa, i, k, vgetq_lane_s32(s, 1));
            if (i1 != i) {
                acc[i1][0] += term32(t, b0, xa, i1, k, vgetq_lane_s32(s, 2));
                acc[i1][1] += term32(t, b1, xa, i1, k, vgetq_lane_s32(s, 3));
            }
        }
    }
    for (int64_t i = 0; i < m; i++) y[i * ldy] = acc[i][0], y[i * ldy + 1] = acc[i][1];
}

/* ---- K types --------------------------------------------------------------------------------- */
/* Q4_K, Q5_K (iq4 0; five 1 for Q5_K) and IQ4_XS (iq4 1): groups of 32,
 * acc += ((d sc) dx) dot - (dmin m) sx, IQ4_XS acc += ((d ls) dx) dot */
static inline void pair_k45(int five, int iq4, const uint8_t *w0, const uint8_t *w1,
                            int64_t nb, const attn__q8act *xa, int64_t m, float *y,
                            int64_t ldy) {
    const size_t bb = iq4 ? 136 : five ? 176 : 144;
    float acc[ATTN__QMV_WIDE][2] = {{0}};
    for (int64_t k = 0; k < nb; k++) {
        const uint8_t *b[2] = {w0 + (size_t)k * bb, w1 + (size_t)k * bb};
        int8x16_t a[16], c[16];
        attn__unpack_group32(iq4, five, b[0], a);
        attn__unpack_group32(iq4, five, b[1], c);
        float ds[2][8], dm[2][8];
        for (int j = 0; j < 2; j++) attn__group32_scales(iq4, b[j], ds[j], dm[j]);
        wpair p[16];
        for (int v = 0; v < 16; v++) p[v] = pair16(a[v], c[v]);
        for (int64_t i = 0; i < m; i += 2) {
            const int64_t i1 = i + 1 < m ? i + 1 : i;
            const float *xd0 = xa->dsx + i * 2 * xa->ldb, *xd1 = xa->dsx + i1 * 2 * xa->ldb;
            for (int s = 0; s < 8; s++) {
                const int64_t g = 8 * k + s;
                const int8_t *x0 = XROW(i) + 32 * g, *x1 = XROW(i1) + 32 * g;
                int32x4_t t = mm16(vdupq_n_s32(0), x0, x1, p[2 * s]);
                t = mm16(t, x0 + 16, x1 + 16, p[2 * s + 1]);
                const float *x0d = xd0 + 2 * g, *x1d = xd1 + 2 * g;
                const float *d0 = ds[0], *d1 = ds[1], *m0 = dm[0], *m1 = dm[1];
                acc[i][0] += attn__group32_term(iq4, d0[s], m0[s], x0d, vgetq_lane_s32(t, 0));
                acc[i][1] += attn__group32_term(iq4, d1[s], m1[s], x0d, vgetq_lane_s32(t, 1));
                if (i1 != i) {
                    acc[i1][0] += attn__group32_term(iq4, d0[s], m0[s], x1d, vgetq_lane_s32(t, 2));
                    acc[i1][1] += attn__group32_term(iq4, d1[s], m1[s], x1d, vgetq_lane_s32(t, 3));
                }
            }
        }
    }
    for (int64_t i = 0; i < m; i++) y[i * ldy] = acc[i][0], y[i * ldy + 1] = acc[i][1];
}

/* Q6_K: groups of 16, acc += ((d sc) dx) (dot - 32 sum(qx)) */
static inline void pair_q6k(const uint8_t *w0, const uint8_t *w1, int64_t nb,
                            const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    float acc[ATTN__QMV_WIDE][2] = {{0}};
    for (int64_t k = 0; k < nb; k++) {
        const uint8_t *b[2] = {w0 + (size_t)k * 210, w1 + (size_t)k * 210};
        int8x16_t a[16], c[16];
        attn__unpack_q6k(b[0], a);
        attn__unpack_q6k(b[1], c);
        float dsc[2][16];
        for (int j = 0; j < 2; j++) {
            const float d = attn__load_half(b[j] + 208);
            const int8_t *sc = (const int8_t *)(b[j] + 192);
            for (int g = 0; g < 16; g++) dsc[j][g] = d * (float)sc[g];
        }
        wpair p[16];
        for (int v = 0; v < 16; v++) p[v] = pair16(a[v], c[v]);
        for (int64_t i = 0; i < m; i += 2) {
            const int64_t i1 = i + 1 < m ? i + 1 : i;
            const float *xd0 = xa->dsx + i * 2 * xa->ldb, *xd1 = xa->dsx + i1 * 2 * xa->ldb;
            const int32_t *sq0 = xa->sq + i * 2 * xa->ldb, *sq1 = xa->sq + i1 * 2 * xa->ldb;
            for (int g = 0; g < 16; g++) {
                const int64_t gx = 16 * k + g;
                const int32x4_t t = mm16(vdupq_n_s32(0), XROW(i) + 16 * gx, XROW(i1) + 16 * gx, p[g]);
                acc[i][0] += (dsc[0][g] * xd0[2 * (gx >> 1)]) *
                             (float)(vgetq_lane_s32(t, 0) - 32 * sq0[gx]);
                acc[i][1] += (dsc[1][g] * xd0[2 * (gx >> 1)]) *
                             (float)(vgetq_lane_s32(t, 1) - 32 * sq0[gx]);
                if (i1 != i) {
                    acc[i1][0] += (dsc[0][g] * xd1[2 * (gx >> 1)]) *
                                  (float)(vgetq_lane_s32(t, 2) - 32 * sq1[gx]);
                    acc[i1][1] += (dsc[1][g] * xd1[2 * (gx >> 1)]) *
                                  (float)(vgetq_lane_s32(t, 3) - 32 * sq1[gx]);
                }
            }
        }
    }
    for (int64_t i = 0; i < m; i++) y[i * ldy] = acc[i][0], y[i * ldy + 1] = acc[i][1];
}

/* Q2_K, Q3_K: the weights times their group scales (attn__unpack_k23), so each block of 32 of
 * x gives, in 4 SMMLA, the integer brackets of the 4 (activation row, weight row) pairs; the 8
 * blocks' vectors transposed (TRN, ZIP: lanes j = 0 .. 3 and 4 .. 7 of one pair per vector),
 * then each pair's float terms on 4 lanes in order as the SDOT kernel (attn__k23_acc) */
static inline void tr4(const int32x4_t *t, int32x4_t *c) { /* c[l] lane j = t[j] lane l */
    const int32x4_t a0 = vtrn1q_s32(t[0], t[1]), a1 = vtrn2q_s32(t[0], t[1]);
    const int32x4_t b0 = vtrn1q_s32(t[2], t[3]), b1 = vtrn2q_s32(t[2], t[3]);
    c[0] = vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(a0), vreinterpretq_s64_s32(b0)));
    c[1] = vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(a1), vreinterpretq_s64_s32(b1)));
    c[2] = vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(a0), vreinterpretq_s64_s32(b0)));
    c[3] = vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(a1), vreinterpretq_s64_s32(b1)));
}

static inline void pair_k23(int three, const uint8_t *w0, const uint8_t *w1, int64_t nb,
                            const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    const size_t bb = three ? 110 : 84;
    float acc[ATTN__QMV_WIDE][2] = {{0}};
    for (int64_t k = 0; k < nb; k++) {
        const uint8_t *b[2] = {w0 + (size_t)k * bb, w1 + (size_t)k * bb};
        int8x16_t a[16], c[16];
        int32x4_t mn[2][4];
        attn__unpack_k23(three, b[0], a, mn[0]);
        attn__unpack_k23(three, b[1], c, mn[1]);
        float d[2], dmin[2];
        for (int j = 0; j < 2; j++) {
            d[j] = attn__load_half(b[j] + (three ? 108 : 80));
            dmin[j] = three ? 0.0f : attn__load_half(b[j] + 82);
        }
        wpair p[16];
        for (int v = 0; v < 16; v++) p[v] = pair16(a[v], c[v]);
        for (int64_t i = 0; i < m; i += 2) {
            const int64_t i1 = i + 1 < m ? i + 1 : i;
            const int8_t *x0 = XROW(i) + 256 * k, *x1 = XROW(i1) + 256 * k;
            int32x4_t t[8], u[2][4]; /* u[h][l]: pair l (lanes of SMMLA), blocks 4 h .. 4 h + 3 */
            for (int j = 0; j < 8; j++)
                t[j] = mm16(mm16(vdupq_n_s32(0), x0 + 32 * j, x1 + 32 * j, p[2 * j]),
                            x0 + 32 * j + 16, x1 + 32 * j + 16, p[2 * j + 1]);
            tr4(t, u[0]);
            tr4(t + 4, u[1]);
            /* pair l: activation row l < 2 ? i : i1, weight row l & 1 */
            for (int l = 0; l < (i1 != i ? 4 : 2); l++) {
                const int64_t ii = l < 2 ? i : i1;
                const int r = l & 1;
                acc[ii][r] = attn__k23_acc(three, d[r], dmin[r], mn[r], u[0][l], u[1][l],
                                           xa->dsx + ii * 2 * xa->ldb + 16 * k,
                                           xa->sq + ii * 2 * xa->ldb + 16 * k, acc[ii][r]);
            }
        }
    }
    for (int64_t i = 0; i < m; i++) y[i * ldy] = acc[i][0], y[i * ldy + 1] = acc[i][1];
}

/* ---- the table: pairs of rows on SMMLA, m = 1 and an odd last row on SDOT ------------------ */
#define DEF(T, TYPE, PAIR)                                                                    \
    static void mv8_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,                \
                        const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {            \
        const attn__qmv8_fn one = attn__quant_kernels_dotprod()->mv8[TYPE];                   \
        if (m < 2) {                                                                          \
            one(w, rb, rows, nb, xa, m, y, ldy);                                              \
            return;                                                                           \
        }                                                                                     \
        int64_t r = 0;                                                                        \
        for (; r + 2 <= rows; r += 2) {                                                       \
            const uint8_t *w0 = w + (size_t)r * rb, *w1 = w0 + rb;                            \
            PAIR;                                                                             \
        }                                                                                     \
        if (r < rows) one(w + (size_t)r * rb, rb, 1, nb, xa, m, y + r, ldy);                  \
    }
DEF(q8_0, ATTN_Q_Q8_0, pair32(T_Q8_0, 34, w0, w1, nb, xa, m, y + r, ldy))
DEF(q4_0, ATTN_Q_Q4_0, pair32(T_Q4_0, 18, w0, w1, nb, xa, m, y + r, ldy))
DEF(q4_1, ATTN_Q_Q4_1, pair32(T_Q4_1, 20, w0, w1, nb, xa, m, y + r, ldy))
DEF(q5_0, ATTN_Q_Q5_0, pair32(T_Q5_0, 22, w0, w1, nb, xa, m, y + r, ldy))
DEF(q5_1, ATTN_Q_Q5_1, pair32(T_Q5_1, 24, w0, w1, nb, xa, m, y + r, ldy))
DEF(q4_k, ATTN_Q_Q4_K, pair_k45(0, 0, w0, w1, nb, xa, m, y + r, ldy))
DEF(q5_k, ATTN_Q_Q5_K, pair_k45(1, 0, w0, w1, nb, xa, m, y + r, ldy))
DEF(iq4_nl, ATTN_Q_IQ4_NL, pair32(T_IQ4_NL, 18, w0, w1, nb, xa, m, y + r, ldy))
DEF(iq4_xs, ATTN_Q_IQ4_XS, pair_k45(0, 1, w0, w1, nb, xa, m, y + r, ldy))
DEF(q6_k, ATTN_Q_Q6_K, pair_q6k(w0, w1, nb, xa, m, y + r, ldy))
DEF(q2_k, ATTN_Q_Q2_K, pair_k23(0, w0, w1, nb, xa, m, y + r, ldy))
DEF(q3_k, ATTN_Q_Q3_K, pair_k23(1, w0, w1, nb, xa, m, y + r, ldy))

static const attn__quant_kernels TABLE = {
    "neon_i8mm",
    {0},
    {0},
    {[ATTN_Q_Q4_0] = mv8_q4_0, [ATTN_Q_Q4_1] = mv8_q4_1, [ATTN_Q_Q5_0] = mv8_q5_0,
     [ATTN_Q_Q5_1] = mv8_q5_1, [ATTN_Q_Q8_0] = mv8_q8_0, [ATTN_Q_Q4_K] = mv8_q4_k,
     [ATTN_Q_Q5_K] = mv8_q5_k, [ATTN_Q_Q6_K] = mv8_q6_k, [ATTN_Q_IQ4_NL] = mv8_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv8_iq4_xs, [ATTN_Q_Q2_K] = mv8_q2_k, [ATTN_Q_Q3_K] = mv8_q3_k},
    {0},
    /* mvw8: the mv8 kernels (up to ATTN__QMV_WIDE rows, as the SDOT table's) */
    {[ATTN_Q_Q4_0] = mv8_q4_0, [ATTN_Q_Q4_1] = mv8_q4_1, [ATTN_Q_Q5_0] = mv8_q5_0,
     [ATTN_Q_Q5_1] = mv8_q5_1, [ATTN_Q_Q8_0] = mv8_q8_0, [ATTN_Q_Q4_K] = mv8_q4_k,
     [ATTN_Q_Q5_K] = mv8_q5_k, [ATTN_Q_Q6_K] = mv8_q6_k, [ATTN_Q_IQ4_NL] = mv8_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv8_iq4_xs, [ATTN_Q_Q2_K] = mv8_q2_k, [ATTN_Q_Q3_K] = mv8_q3_k},
    {0},
    NULL, /* q16x */
};

/* NULL where the SDOT table is missing too (a build without +dotprod) */
const attn__quant_kernels *attn__quant_kernels_i8mm(void) {
    return attn__quant_kernels_dotprod() ? &TABLE : NULL;
}

#else
const attn__quant_kernels *attn__quant_kernels_i8mm(void) { return NULL; }
#endif
