/* Quantized weights with float activations on AArch64 NEON (contract in ../quant.h): the
 * dequantization (dq) and the matrix-vector products (mv) of Q4_0, Q4_1 and Q8_0; the other
 * types use the plain C kernels (NULL entries).
 *
 * Bits.  Each block of 32 is dequantized in registers exactly as the reference does it (the
 * integer q widened to float, times d, plus m for Q4_1: one rounding each, never fused; this
 * file is built with -ffp-contract=off), and multiplied with x into eight float partial sums,
 * element k into sum k mod 8, multiply then add: two vectors hold sums 0-3 and 4-7, and the end
 * of the row folds them as ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)).  That is the
 * plain C kernel's order (ref/quant_kern_ref.c), so the results are its bits exactly, for
 * every row range and thread count.  Cost on paper: docs/kernels.md ("ARM64"). */
#include "../quant.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

/* The 32 weights of a block as 8 vectors of 4 floats, elements 4v .. 4v + 3 in v[v]. */
static inline void widen16(int8x16_t q, float d, float32x4_t *v) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
    v[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d);
    v[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d);
    v[2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d);
    v[3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d);
}

static inline void block_q4_0(const uint8_t *b, float32x4_t *v) {
    const float d = attn__load_half(b);
    const uint8x16_t qs = vld1q_u8(b + 2);
    const int8x16_t eight = vdupq_n_s8(8);
    widen16(vsubq_s8(vreinterpretq_s8_u8(vandq_u8(qs, vdupq_n_u8(15))), eight), d, v);
    widen16(vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(qs, 4)), eight), d, v + 4);
}

static inline void block_q4_1(const uint8_t *b, float32x4_t *v) {
    const float d = attn__load_half(b);
    const float32x4_t m = vdupq_n_f32(attn__load_half(b + 2));
    const uint8x16_t qs = vld1q_u8(b + 4);
    widen16(vreinterpretq_s8_u8(vandq_u8(qs, vdupq_n_u8(15))), d, v);
    widen16(vreinterpretq_s8_u8(vshrq_n_u8(qs, 4)), d, v + 4);
    for (int i = 0; i < 8; i++) v[i] = vaddq_f32(v[i], m);
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
DEF(q8_0, 34)

static const attn__quant_kernels TABLE = {
    "neon",
    {[ATTN_Q_Q4_0] = dq_q4_0, [ATTN_Q_Q4_1] = dq_q4_1, [ATTN_Q_Q8_0] = dq_q8_0},
    {[ATTN_Q_Q4_0] = mv_q4_0, [ATTN_Q_Q4_1] = mv_q4_1, [ATTN_Q_Q8_0] = mv_q8_0},
    {0},
};

const attn__quant_kernels *attn__quant_kernels_neon(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_neon(void) { return NULL; }
#endif
