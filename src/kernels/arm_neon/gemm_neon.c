/* GEMM microkernel for AArch64 Advanced SIMD (NEON): an 8 x 12 tile in 24 q-register
 * accumulators.  Each K step loads the 8 values of the packed A micro-panel (two vectors) and
 * the 12 of the packed B micro-panel (three vectors) and issues 24 FMLA by element
 * (vfmaq_laneq_f32: B's vector times one lane of A's), so 29 of the 32 vector registers are
 * busy and each step is 5 loads for 24 FMAs (192 flops).  The packing is the plain C one
 * (gemm.h: NULL hooks).  Contract in gemm.h; cost on paper in docs/kernels.md ("ARM64").
 * Compiled wherever the compiler targets AArch64 (NEON is part of ARMv8-A); elsewhere the table
 * is absent (NULL). */
#include "../gemm.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#define MR 8
#define NR 12

#define ROWS(a, l, i)                                                                         \
    do {                                                                                      \
        c##i##0 = vfmaq_laneq_f32(c##i##0, b0, a, l);                                         \
        c##i##1 = vfmaq_laneq_f32(c##i##1, b1, a, l);                                         \
        c##i##2 = vfmaq_laneq_f32(c##i##2, b2, a, l);                                         \
    } while (0)

#define STEP()                                                                                \
    do {                                                                                      \
        const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);                           \
        const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);    \
        ROWS(a0, 0, 0);                                                                       \
        ROWS(a0, 1, 1);                                                                       \
        ROWS(a0, 2, 2);                                                                       \
        ROWS(a0, 3, 3);                                                                       \
        ROWS(a1, 0, 4);                                                                       \
        ROWS(a1, 1, 5);                                                                       \
        ROWS(a1, 2, 6);                                                                       \
        ROWS(a1, 3, 7);                                                                       \
        a += MR;                                                                              \
        b += NR;                                                                              \
    } while (0)

/* c = alpha * acc (beta == 0: c is not read) or fma(alpha, acc, beta * c), as on x86. */
#define OUT1(i, j)                                                                            \
    do {                                                                                      \
        float *cij = c + (i) * ldc + 4 * (j);                                                 \
        if (beta == 0.0f)                                                                     \
            vst1q_f32(cij, vmulq_f32(va, c##i##j));                                           \
        else                                                                                  \
            vst1q_f32(cij, vfmaq_f32(vmulq_f32(vb, vld1q_f32(cij)), va, c##i##j));            \
    } while (0)
#define OUT(i)                                                                                \
    do {                                                                                      \
        OUT1(i, 0);                                                                           \
        OUT1(i, 1);                                                                           \
        OUT1(i, 2);                                                                           \
    } while (0)

static void attn__gemm_ukr_neon(int64_t kc, const float *restrict a, const float *restrict b,
                                float *restrict c, int64_t ldc, float alpha, float beta) {
    float32x4_t c00 = vdupq_n_f32(0.0f), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00,
                c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00, c40 = c00,
                c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00, c60 = c00, c61 = c00,
                c62 = c00, c70 = c00, c71 = c00, c72 = c00;
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
        STEP();
        STEP();
        STEP();
        STEP();
    }
    for (; k < kc; k++) STEP();
    const float32x4_t va = vdupq_n_f32(alpha), vb = vdupq_n_f32(beta);
    OUT(0);
    OUT(1);
    OUT(2);
    OUT(3);
    OUT(4);
    OUT(5);
    OUT(6);
    OUT(7);
}

/* kc 256: the packed A panel (8 KiB) and a 256 x 12 B micro-panel (12 KiB) stay in a 64 KiB
 * L1; nc 1536 (a multiple of 12): a 256 x 1536 B block (1.5 MiB) in L2 (1 MiB on Neoverse
 * V1/N2, 2 MiB on V2, 4+ MiB shared per cluster on Apple M); the driver (gemm.c) blocks M. */
static const attn__gemm_kernel attn__neon_table = {ATTN__ISA_NEON, MR, NR, 256, 1536,
                                                   attn__gemm_ukr_neon, NULL, NULL, NULL};

const attn__gemm_kernel *attn__gemm_kernel_neon(void) { return &attn__neon_table; }

#else
const attn__gemm_kernel *attn__gemm_kernel_neon(void) { return NULL; }
#endif
