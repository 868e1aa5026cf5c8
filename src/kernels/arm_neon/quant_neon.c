/* Quantized weights with float activations on AArch64 NEON (contract in ../quant.h): the
 * dequantization (dq) and the matrix-vector products (mv) of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, F32, F16 and BF16, and the wide products (mvw,
 * up to ATTN__QMV_WIDE vectors, below) of the same types; the other types (Q8_K) use the plain
 * C kernels (NULL entries).
 *
 * Bits.  Each block of 32 (each group of 32 of a K block) is dequantized in registers exactly as
 * the reference does it (the integer q widened to float, times d, plus m for Q4_1 and Q5_1,
 * minus dmin m for Q4_K and Q5_K, d sc for Q6_K and d ls for IQ4_XS rounded first (the IQ4
 * levels T[q] by TBL, widened as the quants); Q2_K and Q3_K per group of 16 with their own
 * scales, (d sc) q - (dmin m) and (d (s - 32)) q, the products in parentheses rounded first: one
 * rounding each, never fused; this file is built with -ffp-contract=off), and multiplied with
 * x into eight float partial sums, element k into sum k mod 8, multiply then add: two vectors
 * hold sums 0-3 and 4-7, and the end of the row folds them as ((s0 + s4) + (s2 + s6)) +
 * ((s1 + s5) + (s3 + s7)).  That is the plain C kernel's order (ref/quant_kern_ref.c), so the
 * results are its bits exactly, for every row range and thread count.  The integer quants of
 * the 4- and 5-bit types, of Q2_K and Q3_K, and the IQ4 levels come from the unpacking shared
 * with the int8 kernels (../arm_dotprod/qunpack_neon.h, plain NEON).  Cost on paper:
 * docs/kernels.md ("ARM64"). */
#include "../quant.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#include "../arm_dotprod/qunpack_neon.h"

/* The 32 weights of a block as 8 vectors of 4 floats, elements 4v .. 4v + 3 in v[v]. */
static inline void widen16(int8x16_t q, float d, float32x4_t *v) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
    v[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d);
    v[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d);
    v[2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d);
    v[3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d);
}

/* the unsigned quants a0 (elements 0-15), a1 (16-31) of a block: d (q - o) (Q4_0, Q5_0) */
static inline void widen32_off(int8x16_t a0, int8x16_t a1, int8_t o, float d, float32x4_t *v) {
    widen16(vsubq_s8(a0, vdupq_n_s8(o)), d, v);
    widen16(vsubq_s8(a1, vdupq_n_s8(o)), d, v + 4);
}
/* d q + m, two roundings (Q4_1, Q5_1) */
static inline void widen32_min(int8x16_t a0, int8x16_t a1, float d, float m, float32x4_t *v) {
    widen16(a0, d, v);
    widen16(a1, d, v + 4);
    const float32x4_t vm = vdupq_n_f32(m);
    for (int i = 0; i < 8; i++) v[i] = vaddq_f32(v[i], vm);
}

static inline void block_q4_0(const uint8_t *b, float32x4_t *v) {
    int8x16_t a0, a1;
    attn__unpack_q4(b + 2, &a0, &a1);
    widen32_off(a0, a1, 8, attn__load_half(b), v);
}
static inline void block_q4_1(const uint8_t *b, float32x4_t *v) {
    int8x16_t a0, a1;
    attn__unpack_q4(b + 4, &a0, &a1);
    widen32_min(a0, a1, attn__load_half(b), attn__load_half(b + 2), v);
}
static inline void block_q5_0(const uint8_t *b, float32x4_t *v) {
    int8x16_t a0, a1;
    attn__unpack_q5(b + 6, b + 2, &a0, &a1);
    widen32_off(a0, a1, 16, attn__load_half(b), v);
}
static inline void block_q5_1(const uint8_t *b, float32x4_t *v) {
    int8x16_t a0, a1;
    attn__unpack_q5(b + 8, b + 4, &a0, &a1);
    widen32_min(a0, a1, attn__load_half(b), attn__load_half(b + 2), v);
}

/* IQ4_NL: d T[q], the levels by TBL (qunpack_neon.h), one rounding as the reference */
static inline void block_iq4_nl(const uint8_t *b, float32x4_t *v) {
    int8x16_t a0, a1;
    attn__unpack_iq4(b + 2, &a0, &a1);
    const float d = attn__load_half(b);
    widen16(a0, d, v);
    widen16(a1, d, v + 4);
}

static inline void block_q8_0(const uint8_t *b, float32x4_t *v) {
    const float d = attn__load_half(b);
    widen16(vld1q_s8((const int8_t *)b + 2), d, v);
    widen16(vld1q_s8((const int8_t *)b + 18), d, v + 4);
}

#define DEF(T, BYTES)                                                                         \
    static void dq_##T(const uint8_t *b, int64_t nb, float *y) {                              \
        for (int64_t k = 0; k < nb; k++, b += BYTES, y += 32) {                               \
            float32x4_t v[8];                                                                 \
            block_##T(b, v);                                                                  \
            for (int i = 0; i < 8; i++) vst1q_f32(y + 4 * i, v[i]);                           \
        }                                                                                     \
    }                                                                                         \
    static void mv_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                       int64_t ldx, int64_t m, float *y, int64_t ldy) {                      \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            float32x4_t s[ATTN__QMV_MAX][2];                                                  \
            for (int64_t i = 0; i < m; i++) s[i][0] = s[i][1] = vdupq_n_f32(0.0f);            \
            for (int64_t k = 0; k < nb; k++, b += BYTES) {                                    \
                float32x4_t v[8];                                                             \
                block_##T(b, v);                                                              \
                for (int64_t i = 0; i < m; i++) {                                             \
                    const float *xk = x + i * ldx + 32 * k;                                   \
                    for (int j = 0; j < 8; j++)                                               \
                        s[i][j & 1] = vaddq_f32(s[i][j & 1],                                  \
                                                vmulq_f32(v[j], vld1q_f32(xk + 4 * j)));      \
                }                                                                             \
            }                                                                                 \
            for (int64_t i = 0; i < m; i++) {                                                 \
                const float32x4_t t = vaddq_f32(s[i][0], s[i][1]); /* s0+s4 .. s3+s7 */       \
                const float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t));            \
                y[i * ldy + r] = vget_lane_f32(u, 0) + vget_lane_f32(u, 1);                   \
            }                                                                                 \
        }                                                                                     \
    }
DEF(q4_0, 18)
DEF(q4_1, 20)
DEF(q5_0, 22)
DEF(q5_1, 24)
DEF(q8_0, 34)
DEF(iq4_nl, 18)

/* ---- K-quants: blocks of 256 as 8 groups of 32, each group's 32 values in 8 vectors -------- */
/* Q4_K (five 0) and Q5_K group s: (d sc) q - dmin m, two roundings */
static inline void group_k45(const uint8_t *b, int s, int five, float32x4_t *v) {
    const float d = attn__load_half(b), dmin = attn__load_half(b + 2);
    int sc, mn;
    attn__k4_scale_min(b + 4, s, &sc, &mn);
    const float ds = d * (float)sc, dm = dmin * (float)mn;
    const uint8_t *q = b + (five ? 48 : 16) + (s >> 1) * 32;
    uint8x16_t q0 = vld1q_u8(q), q1 = vld1q_u8(q + 16);
    if (s & 1) {
        q0 = vshrq_n_u8(q0, 4), q1 = vshrq_n_u8(q1, 4);
    } else {
        q0 = vandq_u8(q0, vdupq_n_u8(15)), q1 = vandq_u8(q1, vdupq_n_u8(15));
    }
    if (five) { /* bit s of qh[j] as bit 4 */
        const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << s)), sixteen = vdupq_n_u8(16);
        q0 = vorrq_u8(q0, vandq_u8(vtstq_u8(vld1q_u8(b + 16), bit), sixteen));
        q1 = vorrq_u8(q1, vandq_u8(vtstq_u8(vld1q_u8(b + 32), bit), sixteen));
    }
    widen16(vreinterpretq_s8_u8(q0), ds, v);
    widen16(vreinterpretq_s8_u8(q1), ds, v + 4);
    const float32x4_t vm = vdupq_n_f32(dm);
    for (int i = 0; i < 8; i++) v[i] = vsubq_f32(v[i], vm);
}
static inline void group_q4_k(const uint8_t *b, int s, float32x4_t *v) { group_k45(b, s, 0, v); }
static inline void group_q5_k(const uint8_t *b, int s, float32x4_t *v) { group_k45(b, s, 1, v); }

/* Q6_K group g = 4 h + c (elements 32 g .. 32 g + 31): low nibbles (c < 2) or high (c >= 2)
 * of ql[64 h + 32 (c & 1) + j], bits 2c, 2c + 1 of qh[32 h + j] above them, less 32; times
 * d sc[2 g] (elements 0-15) and d sc[2 g + 1] (16-31) */
static inline void group_q6_k(const uint8_t *b, int g, float32x4_t *v) {
    const int h = g >> 2, c = g & 3;
    const uint8_t *ql = b + 64 * h + 32 * (c & 1), *qh = b + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = attn__load_half(b + 208);
    uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16);
    if (c >> 1) {
        l0 = vshrq_n_u8(l0, 4), l1 = vshrq_n_u8(l1, 4);
    } else {
        l0 = vandq_u8(l0, vdupq_n_u8(15)), l1 = vandq_u8(l1, vdupq_n_u8(15));
    }
    const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * c)); /* right shift by 2c */
    const uint8x16_t three = vdupq_n_u8(3);
    const uint8x16_t h0 = vandq_u8(vshlq_u8(vld1q_u8(qh), sh), three);
    const uint8x16_t h1 = vandq_u8(vshlq_u8(vld1q_u8(qh + 16), sh), three);
    const int8x16_t q0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l0, vshlq_n_u8(h0, 4))),
                                  vdupq_n_s8(32));
    const int8x16_t q1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l1, vshlq_n_u8(h1, 4))),
                                  vdupq_n_s8(32));
    widen16(q0, d * (float)sc[2 * g], v);
    widen16(q1, d * (float)sc[2 * g + 1], v + 4);
}

/* IQ4_XS group s: (d ls) T[q], d ls rounded first as the reference */
static inline void group_iq4_xs(const uint8_t *b, int s, float32x4_t *v) {
    int8x16_t a0, a1;
    attn__unpack_iq4(b + 8 + 16 * s, &a0, &a1);
    const float ds = attn__load_half(b) * (float)attn__iq4xs_scale(b, s);
    widen16(a0, ds, v);
    widen16(a1, ds, v + 4);
}

/* Q2_K and Q3_K: 16 groups of 16, each with its own float scale (and Q2_K min), computed for
 * the whole block first (k16: 16 bytes widened and multiplied on vectors, where 16 scalar
 * conversions would cost more) and then read per group of 16 */
typedef struct k16 {
    float dl[16], ml[16];
} k16;
/* Q2_K: dl[g] = d (sc_g & 15), ml[g] = dmin (sc_g >> 4), one rounding each as the reference */
static inline void prep_q2_k(const uint8_t *b, k16 *ks) {
    const uint8x16_t sc = vld1q_u8(b);
    float32x4_t v[4];
    widen16(vreinterpretq_s8_u8(vandq_u8(sc, vdupq_n_u8(15))), attn__load_half(b + 80), v);
    for (int i = 0; i < 4; i++) vst1q_f32(ks->dl + 4 * i, v[i]);
    widen16(vreinterpretq_s8_u8(vshrq_n_u8(sc, 4)), attn__load_half(b + 82), v);
    for (int i = 0; i < 4; i++) vst1q_f32(ks->ml + 4 * i, v[i]);
}
/* Q3_K: dl[g] = d (s_g - 32), the signed 6-bit scales (qunpack_neon.h) */
static inline void prep_q3_k(const uint8_t *b, k16 *ks) {
    float32x4_t v[4];
    widen16(attn__q3k_scales(b), attn__load_half(b + 108), v);
    for (int i = 0; i < 4; i++) vst1q_f32(ks->dl + 4 * i, v[i]);
}
/* group s of 32 (the groups 2 s and 2 s + 1 of 16): Q2_K fl(dl q) - ml, two roundings; Q3_K
 * dl q, q in [-4, 3] (attn__k23_quants) */
static inline void group_q2_k(const uint8_t *b, const k16 *ks, int s, float32x4_t *v) {
    int8x16_t q0, q1;
    attn__k23_quants(0, b, s, &q0, &q1);
    widen16(q0, ks->dl[2 * s], v);
    widen16(q1, ks->dl[2 * s + 1], v + 4);
    const float32x4_t m0 = vdupq_n_f32(ks->ml[2 * s]), m1 = vdupq_n_f32(ks->ml[2 * s + 1]);
    for (int i = 0; i < 4; i++) v[i] = vsubq_f32(v[i], m0), v[i + 4] = vsubq_f32(v[i + 4], m1);
}
static inline void group_q3_k(const uint8_t *b, const k16 *ks, int s, float32x4_t *v) {
    int8x16_t q0, q1;
    attn__k23_quants(1, b, s, &q0, &q1);
    widen16(q0, ks->dl[2 * s], v);
    widen16(q1, ks->dl[2 * s + 1], v + 4);
}

/* dq and mv of a K type: PREP once per block at b, then DEQ fills v with group g of 32 of it,
 * the groups in order; mv adds element k into sum k mod 8 as DEF */
#define DEFK(T, BYTES, PREP, DEQ)                                                             \
    static void dq_##T(const uint8_t *b, int64_t nb, float *y) {                              \
        for (int64_t k = 0; k < nb; k++, b += BYTES) {                                        \
            PREP;                                                                             \
            for (int g = 0; g < 8; g++, y += 32) {                                            \
                float32x4_t v[8];                                                             \
                DEQ;                                                                          \
                for (int i = 0; i < 8; i++) vst1q_f32(y + 4 * i, v[i]);                       \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    static void mv_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                       int64_t ldx, int64_t m, float *y, int64_t ldy) {                      \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            float32x4_t s[ATTN__QMV_MAX][2];                                                  \
            for (int64_t i = 0; i < m; i++) s[i][0] = s[i][1] = vdupq_n_f32(0.0f);            \
            for (int64_t k = 0; k < nb; k++, b += BYTES) {                                    \
                PREP;                                                                         \
                for (int g = 0; g < 8; g++) {                                                 \
                    float32x4_t v[8];                                                         \
                    DEQ;                                                                      \
                    for (int64_t i = 0; i < m; i++) {                                         \
                        const float *xk = x + i * ldx + 256 * k + 32 * g;                     \
                        for (int j = 0; j < 8; j++)                                           \
                            s[i][j & 1] = vaddq_f32(s[i][j & 1],                              \
                                                    vmulq_f32(v[j], vld1q_f32(xk + 4 * j)));  \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
            for (int64_t i = 0; i < m; i++) {                                                 \
                const float32x4_t t = vaddq_f32(s[i][0], s[i][1]);                            \
                const float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t));            \
                y[i * ldy + r] = vget_lane_f32(u, 0) + vget_lane_f32(u, 1);                   \
            }                                                                                 \
        }                                                                                     \
    }
DEFK(q4_k, 144, (void)0, group_q4_k(b, g, v))
DEFK(q5_k, 176, (void)0, group_q5_k(b, g, v))
DEFK(q6_k, 210, (void)0, group_q6_k(b, g, v))
DEFK(iq4_xs, 136, (void)0, group_iq4_xs(b, g, v))
DEFK(q2_k, 84, k16 ks; prep_q2_k(b, &ks), group_q2_k(b, &ks, g, v))
DEFK(q3_k, 110, k16 ks; prep_q3_k(b, &ks), group_q3_k(b, &ks, g, v))

/* ---- wide: up to ATTN__QMV_WIDE vectors in one pass over the weights (mvw) ----------------
 * Each block (each group of 32 of a K block) is dequantized in registers once, as mv does it,
 * and multiplied into the two sums of every vector in mv's order (vector j of the 8 into sum
 * j & 1, multiply then add, the same fold at the end): each vector gets mv's bits, while the
 * dequantization and the weight loads serve up to 8 vectors instead of 4.  M is a constant in
 * each instance (the switch in mvw_T) and the loops over vectors unrolled, so the 2 M sums
 * live in registers: 16 of the 32 at M = 8, beside the block's 8 weight vectors (GCC 12
 * spills a few values around the dequantization: about 15 stores per Q4_0 block at M = 8,
 * against 8 x 16 multiplies and adds). */
#define WIDE_INLINE static inline __attribute__((always_inline))

/* s[i][j & 1] += v[j] x_i[4 j .. 4 j + 3] for the NV (even) weight vectors, vectors i < M */
WIDE_INLINE void wide_acc(const float32x4_t *v, const int NV, const float *x, int64_t ldx,
                          const int M, float32x4_t (*s)[2]) {
    /* unrolled whole (GCC 12 leaves M >= 5 as a loop, its sums in memory) */
#pragma GCC unroll 8
    for (int i = 0; i < M; i++)
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++)
            s[i][j & 1] = vaddq_f32(s[i][j & 1], vmulq_f32(v[j], vld1q_f32(x + i * ldx + 4 * j)));
}

/* mv's fold: ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)) */
WIDE_INLINE float wide_fold(float32x4_t s0, float32x4_t s1) {
    const float32x4_t t = vaddq_f32(s0, s1);
    const float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t));
    return vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
}

/* mvw_T: wrows_T with M a constant in each instance */
#define WCASE(T, M)                                                                           \
    case M: wrows_##T(w, rb, rows, nb, x, ldx, M, y, ldy); break;
#define DEF_MVW(T)                                                                            \
    static void mvw_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                        int64_t ldx, int64_t m, float *y, int64_t ldy) {                     \
        switch (m) {                                                                          \
            WCASE(T, 1) WCASE(T, 2) WCASE(T, 3) WCASE(T, 4)                                   \
            WCASE(T, 5) WCASE(T, 6) WCASE(T, 7) default: WCASE(T, 8)                          \
        }                                                                                     \
    }
/* T: steps of BYTES, each PREP (once per step at b) and G groups of 4 NV weights (v[NV]: DEQ
 * fills them for group g of the step at b), nb / PER steps (PER: nb's unit per step); then
 * TAIL with b past the last step */
#define DEFW(T, BYTES, G, NV, PER, PREP, DEQ, TAIL)                                           \
    WIDE_INLINE void wrows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,         \
                               const float *x, int64_t ldx, const int M, float *y,            \
                               int64_t ldy) {                                                 \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            float32x4_t s[ATTN__QMV_WIDE][2];                                                 \
            for (int i = 0; i < M; i++) s[i][0] = s[i][1] = vdupq_n_f32(0.0f);                \
            for (int64_t k = 0; k < nb / (PER); k++, b += (BYTES)) {                          \
                PREP;                                                                         \
                for (int g = 0; g < (G); g++) {                                               \
                    float32x4_t v[NV];                                                        \
                    DEQ;                                                                      \
                    wide_acc(v, (NV), x + 4 * (NV) * ((G) * k + g), ldx, M, s);               \
                }                                                                             \
            }                                                                                 \
            TAIL;                                                                             \
            for (int i = 0; i < M; i++) y[i * ldy + r] = wide_fold(s[i][0], s[i][1]);         \
        }                                                                                     \
    }                                                                                         \
    DEF_MVW(T)
#define BLOCKW(T, BYTES, G, DEQ) DEFW(T, BYTES, G, 8, 1, (void)0, DEQ, (void)0)
BLOCKW(q4_0, 18, 1, ((void)g, block_q4_0(b, v)))
BLOCKW(q4_1, 20, 1, ((void)g, block_q4_1(b, v)))
BLOCKW(q5_0, 22, 1, ((void)g, block_q5_0(b, v)))
BLOCKW(q5_1, 24, 1, ((void)g, block_q5_1(b, v)))
BLOCKW(q8_0, 34, 1, ((void)g, block_q8_0(b, v)))
BLOCKW(q4_k, 144, 8, group_q4_k(b, g, v))
BLOCKW(q5_k, 176, 8, group_q5_k(b, g, v))
BLOCKW(q6_k, 210, 8, group_q6_k(b, g, v))
BLOCKW(iq4_nl, 18, 1, ((void)g, block_iq4_nl(b, v)))
BLOCKW(iq4_xs, 136, 8, group_iq4_xs(b, g, v))
DEFW(q2_k, 84, 8, 8, 1, k16 ks; prep_q2_k(b, &ks), group_q2_k(b, &ks, g, v), (void)0)
DEFW(q3_k, 110, 8, 8, 1, k16 ks; prep_q3_k(b, &ks), group_q3_k(b, &ks, g, v), (void)0)

/* ---- F32, F16 and BF16 weights: one element per block, K (nb) arbitrary -----------------
 * The plain C kernel's order as for the blocks (element k into sum k mod 8): steps of 8
 * elements into the two sums, then the last K mod 8 through a zero-padded step (w and x both
 * 0: every padded product is +0, and adding +0 changes no sum, which starts at +0 and so is
 * never -0).  mvw_T is also the mv entry (M up to ATTN__QMV_WIDE).  F16 widened by FCVTL,
 * BF16 by a 16-bit shift: both exact, as the reference. */
WIDE_INLINE float32x4_t ld4_f32(const uint8_t *b, int64_t k) {
    return vld1q_f32((const float *)(const void *)b + k);
}
WIDE_INLINE float32x4_t ld4_f16(const uint8_t *b, int64_t k) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)b + k)));
}
/* dq's F16: FCVTL quiets a signalling NaN, the reference keeps every NaN's bits: NaN lanes
 * (|h| > 0x7c00) rebuilt as sign, all-ones exponent, the 10 payload bits at the top */
WIDE_INLINE float32x4_t dq4_f16(const uint8_t *b, int64_t k) {
    const uint16x4_t h = vld1_u16((const uint16_t *)(const void *)b + k);
    const uint32x4_t u = vmovl_u16(h);
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fff)), vdupq_n_u32(0x7c00));
    const uint32x4_t exact = vorrq_u32(vorrq_u32(vshlq_n_u32(vandq_u32(u, vdupq_n_u32(0x8000)), 16),
                                                 vdupq_n_u32(0x7f800000)),
                                       vshlq_n_u32(vandq_u32(u, vdupq_n_u32(0x3ff)), 13));
    return vbslq_f32(nan, vreinterpretq_f32_u32(exact), vcvt_f32_f16(vreinterpret_f16_u16(h)));
}
#define dq4_f32 ld4_f32
#define dq4_bf16 ld4_bf16
WIDE_INLINE float32x4_t ld4_bf16(const uint8_t *b, int64_t k) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(const void *)b + k), 16));
}
WIDE_INLINE float el_f32(const uint8_t *b, int64_t k) {
    float f;
    memcpy(&f, b + 4 * k, 4);
    return f;
}
WIDE_INLINE float el_f16(const uint8_t *b, int64_t k) { return attn__load_half(b + 2 * k); }
WIDE_INLINE float el_bf16(const uint8_t *b, int64_t k) {
    const uint32_t u = (uint32_t)attn__load_u16(b + 2 * k) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* the last n < 8 weights t (zero-padded to 8) with x_i[0 .. n) */
WIDE_INLINE void wide_tail(const float *t, int64_t n, const float *x, int64_t ldx, const int M,
                           float32x4_t (*s)[2]) {
    float tx[ATTN__QMV_WIDE][8] = {{0}};
    for (int i = 0; i < M; i++)
        for (int64_t j = 0; j < n; j++) tx[i][j] = x[i * ldx + j];
    const float32x4_t v[2] = {vld1q_f32(t), vld1q_f32(t + 4)};
    wide_acc(v, 2, tx[0], 8, M, s);
}
#define FTAIL(T)                                                                              \
    if (nb & 7) {                                                                             \
        float t_[8] = {0};                                                                    \
        for (int64_t j = 0; j < (nb & 7); j++) t_[j] = el_##T(b, j);                          \
        wide_tail(t_, nb & 7, x + (nb & ~(int64_t)7), ldx, M, s);                             \
    }

#define DEFF(T, ES)                                                                           \
    DEFW(T, 8 * (ES), 1, 2, 8, (void)0, ((void)g, v[0] = ld4_##T(b, 0), v[1] = ld4_##T(b, 4)), \
         FTAIL(T))                                                                            \
    static void dq_##T(const uint8_t *b, int64_t n, float *y) {                               \
        int64_t k = 0;                                                                        \
        for (; k + 4 <= n; k += 4) vst1q_f32(y + k, dq4_##T(b, k));                           \
        for (; k < n; k++) y[k] = el_##T(b, k);                                               \
    }
DEFF(f32, 4)
DEFF(f16, 2)
DEFF(bf16, 2)

static const attn__quant_kernels TABLE = {
    "neon",
    {[ATTN_Q_Q4_0] = dq_q4_0, [ATTN_Q_Q4_1] = dq_q4_1, [ATTN_Q_Q5_0] = dq_q5_0,
     [ATTN_Q_Q5_1] = dq_q5_1, [ATTN_Q_Q8_0] = dq_q8_0, [ATTN_Q_Q4_K] = dq_q4_k,
     [ATTN_Q_Q5_K] = dq_q5_k, [ATTN_Q_Q6_K] = dq_q6_k, [ATTN_Q_F32] = dq_f32,
     [ATTN_Q_F16] = dq_f16, [ATTN_Q_BF16] = dq_bf16, [ATTN_Q_IQ4_NL] = dq_iq4_nl,
     [ATTN_Q_IQ4_XS] = dq_iq4_xs, [ATTN_Q_Q2_K] = dq_q2_k, [ATTN_Q_Q3_K] = dq_q3_k},
    {[ATTN_Q_Q4_0] = mv_q4_0, [ATTN_Q_Q4_1] = mv_q4_1, [ATTN_Q_Q5_0] = mv_q5_0,
     [ATTN_Q_Q5_1] = mv_q5_1, [ATTN_Q_Q8_0] = mv_q8_0, [ATTN_Q_Q4_K] = mv_q4_k,
     [ATTN_Q_Q5_K] = mv_q5_k, [ATTN_Q_Q6_K] = mv_q6_k, [ATTN_Q_F32] = mvw_f32,
     [ATTN_Q_F16] = mvw_f16, [ATTN_Q_BF16] = mvw_bf16, [ATTN_Q_IQ4_NL] = mv_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv_iq4_xs, [ATTN_Q_Q2_K] = mv_q2_k, [ATTN_Q_Q3_K] = mv_q3_k},
    {0},
    {[ATTN_Q_Q4_0] = mvw_q4_0, [ATTN_Q_Q4_1] = mvw_q4_1, [ATTN_Q_Q5_0] = mvw_q5_0,
     [ATTN_Q_Q5_1] = mvw_q5_1, [ATTN_Q_Q8_0] = mvw_q8_0, [ATTN_Q_Q4_K] = mvw_q4_k,
     [ATTN_Q_Q5_K] = mvw_q5_k, [ATTN_Q_Q6_K] = mvw_q6_k, [ATTN_Q_F32] = mvw_f32,
     [ATTN_Q_F16] = mvw_f16, [ATTN_Q_BF16] = mvw_bf16, [ATTN_Q_IQ4_NL] = mvw_iq4_nl,
     [ATTN_Q_IQ4_XS] = mvw_iq4_xs, [ATTN_Q_Q2_K] = mvw_q2_k, [ATTN_Q_Q3_K] = mvw_q3_k},
    {0},
    {0},
    NULL, /* q16x */
};

const attn__quant_kernels *attn__quant_kernels_neon(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_neon(void) { return NULL; }
#endif
