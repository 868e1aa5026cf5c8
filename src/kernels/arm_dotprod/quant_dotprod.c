/* Quantized weights with int8 activations (attn__q8act) on AArch64 with the dot-product
 * extension (SDOT, FEAT_DotProd; built with +dotprod, chosen only where the OS reports
 * asimddp: dispatch.c): the mv8 kernels of every type with an int8 path (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS).
 *
 * Bits.  A block's integer dot product sum(q qx) is exact whichever way it is summed: two SDOT
 * over 16 bytes each into 4 int32 lanes, then one across-lanes add.  The float terms are then
 * those of the plain C kernel, rounded in its order (ref/quant_kern_ref.c):
 *   Q8_0, IQ4_NL  acc += (dw dx) sum(q qx)  (IQ4_NL: q the level T[nibble])
 *   Q4_0, Q5_0  acc += (dw dx) (sum(q qx) - o sum(qx)),  q the unsigned 4 / 5 bits, o 8 / 16
 *   Q4_1, Q5_1  acc += (dw dx) sum(q qx) + mw sx
 *   Q4_K, Q5_K, Q6_K, IQ4_XS  one term per group (below)
 *   Q2_K, Q3_K  one term per block of 32 of x (below)
 * so the results are its bits exactly.  Cost on paper: docs/kernels.md ("ARM64"). */
#include "../quant.h"

#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>

#include "qunpack_neon.h"

/* sum over 32 elements of a[j] x[j] */
static inline int32_t dot32(int8x16_t a0, int8x16_t a1, const int8_t *x) {
    int32x4_t s = vdotq_s32(vdupq_n_s32(0), a0, vld1q_s8(x));
    s = vdotq_s32(s, a1, vld1q_s8(x + 16));
    return vaddvq_s32(s);
}

/* One kernel per type: the block's weights unpacked once (a0: elements 0-15, a1: 16-31), then
 * one term per row of activations, m up to ATTN__QMV_WIDE (the kernels are also the mvw8
 * entries). */
#define DEF(T, BYTES, UNPACK, TERM)                                                           \
    static void mv8_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,                \
                        const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {            \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            float acc[ATTN__QMV_WIDE] = {0};                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            for (int64_t k = 0; k < nb; k++, b += BYTES) {                                    \
                int8x16_t a0, a1;                                                             \
                UNPACK;                                                                       \
                const float d = attn__load_half(b);                                           \
                for (int64_t i = 0; i < m; i++) {                                             \
                    const int8_t *xb = xa->q + i * xa->ldq + 32 * k;                          \
                    const float *xd = xa->dsx + i * 2 * xa->ldb;                              \
                    const int32_t *xsq = xa->sq + i * 2 * xa->ldb;                            \
                    const int32_t dot = dot32(a0, a1, xb);                                    \
                    (void)xsq;                                                                \
                    TERM;                                                                     \
                }                                                                             \
            }                                                                                 \
            for (int64_t i = 0; i < m; i++) y[i * ldy + r] = acc[i];                          \
        }                                                                                     \
    }

/* the terms: Q4_0, Q5_0 (o the offset 8, 16) and Q4_1, Q5_1 (the min at b + 2) */
#define TERM_OFF(o) acc[i] += (d * xd[2 * k]) * (float)(dot - (o) * (xsq[2 * k] + xsq[2 * k + 1]))
#define TERM_MIN acc[i] += (d * xd[2 * k]) * (float)dot + attn__load_half(b + 2) * xd[2 * k + 1]

DEF(q8_0, 34, (a0 = vld1q_s8((const int8_t *)b + 2), a1 = vld1q_s8((const int8_t *)b + 18)),
    acc[i] += (d * xd[2 * k]) * (float)dot)
DEF(q4_0, 18, attn__unpack_q4(b + 2, &a0, &a1), TERM_OFF(8))
DEF(q4_1, 20, attn__unpack_q4(b + 4, &a0, &a1), TERM_MIN)
DEF(q5_0, 22, attn__unpack_q5(b + 6, b + 2, &a0, &a1), TERM_OFF(16))
DEF(q5_1, 24, attn__unpack_q5(b + 8, b + 4, &a0, &a1), TERM_MIN)
/* IQ4_NL: the levels T[q] (signed bytes, qunpack_neon.h) in the dot, Q8_0's term */
DEF(iq4_nl, 18, attn__unpack_iq4(b + 2, &a0, &a1), acc[i] += (d * xd[2 * k]) * (float)dot)

/* ---- K-quants ------------------------------------------------------------------------------
 * The quants of a group as bytes (unsigned, at most 63, or IQ4_XS's levels T[q] in -127 ..
 * 113: SDOT's signed bytes hold them), one exact integer dot per group, then the plain C
 * kernel's float term per group in order:
 *   Q4_K, Q5_K  groups of 32:  acc += ((d sc) dx) sum(q qx) - (dmin m) sx
 *   IQ4_XS      groups of 32:  acc += ((d ls) dx) sum(T[q] qx)
 *   Q6_K        groups of 16:  acc += ((d sc) dx) (sum(q qx) - 32 sum(qx)) */
enum { K_Q4K, K_Q5K, K_IQ4XS }; /* the groups of 32 (kind: a constant in each caller) */
static inline void mv8_k45(int kind, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                           const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    const size_t bb = kind == K_Q5K ? 176 : kind == K_Q4K ? 144 : 136;
    for (int64_t r = 0; r < rows; r++) {
        float acc[ATTN__QMV_WIDE] = {0};
        for (int64_t k = 0; k < nb; k++) {
            const uint8_t *b = w + (size_t)r * rb + (size_t)k * bb;
            int8x16_t a[16];
            float ds[8], dm[8];
            attn__group32_scales(kind == K_IQ4XS, b, ds, dm);
            attn__unpack_group32(kind == K_IQ4XS, kind == K_Q5K, b, a);
            for (int64_t i = 0; i < m; i++) {
                const float *xd = xa->dsx + i * 2 * xa->ldb;
                for (int s = 0; s < 8; s++) {
                    const int64_t g = 8 * k + s;
                    const int32_t dot = dot32(a[2 * s], a[2 * s + 1], xa->q + i * xa->ldq + 32 * g);
                    acc[i] += attn__group32_term(kind == K_IQ4XS, ds[s], dm[s], xd + 2 * g, dot);
                }
            }
        }
        for (int64_t i = 0; i < m; i++) y[i * ldy + r] = acc[i];
    }
}

static void mv8_q4_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    mv8_k45(K_Q4K, w, rb, rows, nb, xa, m, y, ldy);
}
static void mv8_q5_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    mv8_k45(K_Q5K, w, rb, rows, nb, xa, m, y, ldy);
}
static void mv8_iq4_xs(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                       const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    mv8_k45(K_IQ4XS, w, rb, rows, nb, xa, m, y, ldy);
}

/* Q6_K: 16 vectors of 16 quants (0-63), vector g the group of 16 elements 16 g .. 16 g + 15 */
static void mv8_q6_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        float acc[ATTN__QMV_WIDE] = {0};
        for (int64_t k = 0; k < nb; k++) {
            const uint8_t *b = w + (size_t)r * rb + (size_t)k * 210;
            const int8_t *sc = (const int8_t *)(b + 192);
            const float d = attn__load_half(b + 208);
            int8x16_t a[16];
            attn__unpack_q6k(b, a);
            for (int64_t i = 0; i < m; i++) {
                const int8_t *xq = xa->q + i * xa->ldq;
                const float *xd = xa->dsx + i * 2 * xa->ldb;
                const int32_t *xsq = xa->sq + i * 2 * xa->ldb;
                for (int g = 0; g < 16; g++) {
                    const int64_t gx = 16 * k + g;
                    const int32_t s =
                        vaddvq_s32(vdotq_s32(vdupq_n_s32(0), a[g], vld1q_s8(xq + 16 * gx))) -
                        32 * xsq[gx];
                    acc[i] += ((d * (float)sc[g]) * xd[2 * (gx >> 1)]) * (float)s;
                }
            }
        }
        for (int64_t i = 0; i < m; i++) y[i * ldy + r] = acc[i];
    }
}

/* Q2_K and Q3_K: the weights times their group scales as 16 vectors of bytes (a[g] the group
 * of 16 elements 16 g .., qunpack_neon.h), so one block of 32 of x against groups 2 j and
 * 2 j + 1 is two SDOT into one vector whose 4 lanes sum to the plain C kernel's integer bracket
 * (sc0 sum0(q qx) + sc1 sum1(q qx); Q3_K's negated); ADDP reduces the 8 blocks' vectors into
 * 2 vectors of 4 brackets, and the float terms run on 4 lanes (attn__k23_acc), added to the
 * row's sum in order:
 *   Q2_K  per block of 32 of x: (d dx) is - (dmin dx) (m0 sum0(qx) + m1 sum1(qx))
 *   Q3_K  per block of 32 of x: (d dx) is */
static inline void mv8_k23(int three, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                           const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    const size_t bb = three ? 110 : 84;
    for (int64_t r = 0; r < rows; r++) {
        float acc[ATTN__QMV_WIDE] = {0};
        for (int64_t k = 0; k < nb; k++) {
            const uint8_t *b = w + (size_t)r * rb + (size_t)k * bb;
            const float d = attn__load_half(b + (three ? 108 : 80));
            const float dmin = three ? 0.0f : attn__load_half(b + 82);
            int8x16_t a[16];
            int32x4_t mn[4];
            attn__unpack_k23(three, b, a, mn);
            for (int64_t i = 0; i < m; i++) {
                const int8_t *xq = xa->q + i * xa->ldq + 256 * k;
                int32x4_t s[8];
                for (int j = 0; j < 8; j++)
                    s[j] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), a[2 * j], vld1q_s8(xq + 32 * j)),
                                     a[2 * j + 1], vld1q_s8(xq + 32 * j + 16));
                const int32x4_t is0 = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
                const int32x4_t is1 = vpaddq_s32(vpaddq_s32(s[4], s[5]), vpaddq_s32(s[6], s[7]));
                acc[i] = attn__k23_acc(three, d, dmin, mn, is0, is1,
                                       xa->dsx + i * 2 * xa->ldb + 16 * k,
                                       xa->sq + i * 2 * xa->ldb + 16 * k, acc[i]);
            }
        }
        for (int64_t i = 0; i < m; i++) y[i * ldy + r] = acc[i];
    }
}

static void mv8_q2_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    mv8_k23(0, w, rb, rows, nb, xa, m, y, ldy);
}
static void mv8_q3_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    mv8_k23(1, w, rb, rows, nb, xa, m, y, ldy);
}

static const attn__quant_kernels TABLE = {
    "neon_dotprod",
    {0},
    {0},
    {[ATTN_Q_Q4_0] = mv8_q4_0, [ATTN_Q_Q4_1] = mv8_q4_1, [ATTN_Q_Q5_0] = mv8_q5_0,
     [ATTN_Q_Q5_1] = mv8_q5_1, [ATTN_Q_Q8_0] = mv8_q8_0, [ATTN_Q_Q4_K] = mv8_q4_k,
     [ATTN_Q_Q5_K] = mv8_q5_k, [ATTN_Q_Q6_K] = mv8_q6_k, [ATTN_Q_IQ4_NL] = mv8_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv8_iq4_xs, [ATTN_Q_Q2_K] = mv8_q2_k, [ATTN_Q_Q3_K] = mv8_q3_k},
    {0},
    /* mvw8: the same kernels, which take up to ATTN__QMV_WIDE rows of activations (each
     * block unpacked once for all of them; one float sum per row, so the same bits per row) */
    {[ATTN_Q_Q4_0] = mv8_q4_0, [ATTN_Q_Q4_1] = mv8_q4_1, [ATTN_Q_Q5_0] = mv8_q5_0,
     [ATTN_Q_Q5_1] = mv8_q5_1, [ATTN_Q_Q8_0] = mv8_q8_0, [ATTN_Q_Q4_K] = mv8_q4_k,
     [ATTN_Q_Q5_K] = mv8_q5_k, [ATTN_Q_Q6_K] = mv8_q6_k, [ATTN_Q_IQ4_NL] = mv8_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv8_iq4_xs, [ATTN_Q_Q2_K] = mv8_q2_k, [ATTN_Q_Q3_K] = mv8_q3_k},
    {0},
    NULL, /* q16x */
};

const attn__quant_kernels *attn__quant_kernels_dotprod(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_dotprod(void) { return NULL; }
#endif
