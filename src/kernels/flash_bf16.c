/* bf16 storage for the fused attention forward (flash.h): the plain C microkernels (used when
 * the CPU lacks AVX512_BF16, or with ATTN_BF16=0) and the choice of table.  They follow the
 * operation of VDPBF16PS: each step adds the product of the odd pair elements, then that of
 * the even ones, to the fp32 accumulator (the products of two bf16 values are exact in fp32),
 * so they differ from the AVX512_BF16 kernels only where the hardware rounds differently
 * (it flushes denormals). */

#include "dispatch.h"
#include "flash.h"

/* Columns in blocks of 64 with the K pairs outermost: each C element still sums its pairs in
 * order, and the inner loop runs over columns (which also avoids a wrong vectorisation of the
 * column-innermost form by GCC 12 at -O3). */
static void ref_mm(int64_t m, int64_t n, int64_t K2, const attn__bf16 *A, int64_t lda,
                   const attn__bf16 *B, int64_t ldb, float *C, int64_t ldc, int accum,
                   const float *cs) {
    float acc[64];
    for (int64_t i = 0; i < m; i++) {
        const attn__bf16 *a = A + i * lda;
        float *c = C + i * ldc;
        for (int64_t j0 = 0; j0 < n; j0 += 64) {
            int64_t nb = n - j0 < 64 ? n - j0 : 64;
            for (int64_t j = 0; j < nb; j++) acc[j] = 0.0f;
            for (int64_t kk = 0; kk < K2; kk++) {
                float a0 = attn__bf16_to_f32(a[2 * kk]), a1 = attn__bf16_to_f32(a[2 * kk + 1]);
                const attn__bf16 *b = B + kk * 2 * ldb + 2 * j0;
                for (int64_t j = 0; j < nb; j++) {
                    float x = acc[j] + a1 * attn__bf16_to_f32(b[2 * j + 1]);
                    acc[j] = x + a0 * attn__bf16_to_f32(b[2 * j]);
                }
            }
            for (int64_t j = 0; j < nb; j++)
                c[j0 + j] = accum ? (cs ? cs[i] : 1.0f) * c[j0 + j] + acc[j] : acc[j];
        }
    }
}

static void ref_cvt(const float *s, int64_t ld, int64_t rows, int64_t n, attn__bf16 *p,
                    int64_t ldp) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) p[r * ldp + j] = attn__f32_to_bf16(s[r * ld + j]);
}

static void ref_round(float *s, int64_t ld, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) s[r * ld + j] = attn__bf16_round(s[r * ld + j]);
}

static const attn__flash_bf16_kernels ref_kernels = {ATTN__ISA_REF, ref_mm, ref_cvt, ref_round,
                                                      NULL, 0, NULL, NULL, "plain C"};

const attn__flash_bf16_kernels *attn__flash_bf16_kernels_ref(void) { return &ref_kernels; }
