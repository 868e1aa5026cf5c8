/* GEMM microkernel in plain C: the fallback on every machine and the kernel set the others are
 * tested against.  Contract in gemm.h.  Each product is rounded, then added (no fused
 * multiply-add), so results differ in the last bits from the AVX2/AVX-512 sets. */
#include "../gemm.h"

#define MR 6
#define NR 8

/* c[MR, NR] = alpha * a^T b + beta * c over kc packed steps. */
static void attn__gemm_ukr_ref(int64_t kc, const float *restrict a, const float *restrict b,
                               float *restrict c, int64_t ldc, float alpha, float beta) {
    float acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = 0.0f;
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < MR; i++) {
            float ai = a[i];
            for (int j = 0; j < NR; j++) acc[i][j] += ai * b[j];
        }
        a += MR;
        b += NR;
    }
    for (int i = 0; i < MR; i++) {
        float *ci = c + i * ldc;
        if (beta == 0.0f)
            for (int j = 0; j < NR; j++) ci[j] = alpha * acc[i][j];
        else
            for (int j = 0; j < NR; j++) ci[j] = alpha * acc[i][j] + beta * ci[j];
    }
}

static const attn__gemm_kernel attn__ref_table = {ATTN__ISA_REF, MR, NR, 256, 1024,
                                                  attn__gemm_ukr_ref, NULL, NULL, NULL};

const attn__gemm_kernel *attn__gemm_kernel_ref(void) { return &attn__ref_table; }
