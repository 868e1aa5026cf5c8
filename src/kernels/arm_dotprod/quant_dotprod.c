/* Quantized weights with int8 activations (attn__q8act) on AArch64 with the dot-product
 * extension (SDOT, FEAT_DotProd; built with +dotprod, chosen only where the OS reports
 * asimddp: dispatch.c): the mv8 kernels of Q4_0, Q4_1 and Q8_0.  The other types with an int8
 * path call the plain C ones (the same terms), so a context's int8 path covers the same types
 * on every set.
 *
 * Bits.  A block's integer dot product sum(q qx) is exact whichever way it is summed: two SDOT
 * over 16 bytes each into 4 int32 lanes, then one across-lanes add.  The float terms are then
 * those of the plain C kernel, rounded in its order (ref/quant_kern_ref.c):
 *   Q8_0  acc += (dw dx) sum(q qx)
 *   Q4_0  acc += (dw dx) (sum(q qx) - 8 sum(qx)),  q the unsigned nibbles
 *   Q4_1  acc += (dw dx) sum(q qx) + mw sx
 * so the results are its bits exactly.  Cost on paper: docs/kernels.md ("ARM64"). */
#include "../quant.h"

#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>

/* sum over 32 elements of a[j] x[j] */
static inline int32_t dot32(int8x16_t a0, int8x16_t a1, const int8_t *x) {
    int32x4_t s = vdotq_s32(vdupq_n_s32(0), a0, vld1q_s8(x));
    s = vdotq_s32(s, a1, vld1q_s8(x + 16));
    return vaddvq_s32(s);
}

/* One kernel per type: the block's weights unpacked once (a0: elements 0-15, a1: 16-31), then
 * one term per row of activations. */
#define DEF(T, BYTES, UNPACK, TERM)                                                           \
    static void mv8_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,                \
                        const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {            \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            float acc[ATTN__QMV_MAX] = {0};                                                   \
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

#define NIBBLES(at)                                                                           \
    do {                                                                                      \
        const uint8x16_t qs = vld1q_u8(b + (at));                                             \
        a0 = vreinterpretq_s8_u8(vandq_u8(qs, vdupq_n_u8(15)));                               \
        a1 = vreinterpretq_s8_u8(vshrq_n_u8(qs, 4));                                          \
    } while (0)

DEF(q8_0, 34, (a0 = vld1q_s8((const int8_t *)b + 2), a1 = vld1q_s8((const int8_t *)b + 18)),
    acc[i] += (d * xd[2 * k]) * (float)dot)
DEF(q4_0, 18, NIBBLES(2),
    acc[i] += (d * xd[2 * k]) * (float)(dot - 8 * (xsq[2 * k] + xsq[2 * k + 1])))
DEF(q4_1, 20, NIBBLES(4),
    acc[i] += (d * xd[2 * k]) * (float)dot + attn__load_half(b + 2) * xd[2 * k + 1])

/* the plain C int8 kernels of the other types */
#define REF(T, TYPE)                                                                          \
    static void mv8_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,                \
                        const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {            \
        attn__quant_kernels_ref()->mv8[TYPE](w, rb, rows, nb, xa, m, y, ldy);                 \
    }
REF(q5_0, ATTN_Q_Q5_0)
REF(q5_1, ATTN_Q_Q5_1)
REF(q4_k, ATTN_Q_Q4_K)
REF(q5_k, ATTN_Q_Q5_K)
REF(q6_k, ATTN_Q_Q6_K)

static const attn__quant_kernels TABLE = {
    "neon_dotprod",
    {0},
    {0},
    {[ATTN_Q_Q4_0] = mv8_q4_0, [ATTN_Q_Q4_1] = mv8_q4_1, [ATTN_Q_Q5_0] = mv8_q5_0,
     [ATTN_Q_Q5_1] = mv8_q5_1, [ATTN_Q_Q8_0] = mv8_q8_0, [ATTN_Q_Q4_K] = mv8_q4_k,
     [ATTN_Q_Q5_K] = mv8_q5_k, [ATTN_Q_Q6_K] = mv8_q6_k},
};

const attn__quant_kernels *attn__quant_kernels_dotprod(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_dotprod(void) { return NULL; }
#endif
