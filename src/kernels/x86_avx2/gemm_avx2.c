/* GEMM microkernel for AVX2 + FMA: a 6 x 16 tile held in 12 ymm accumulators; each K step
 * loads two vectors of the B micro-panel and broadcasts six A values.  Contract in dispatch.h.
 * Compiled with -mavx2 -mfma (CMakeLists.txt); without them the table is absent (NULL). */
#include "../dispatch.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MR 6
#define NR 16

#define ROW(i)                                                                                \
    do {                                                                                      \
        __m256 ai = _mm256_broadcast_ss(a + (i));                                             \
        c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0);                                           \
        c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1);                                           \
    } while (0)

#define STEP()                                                                                \
    do {                                                                                      \
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);                            \
        ROW(0);                                                                               \
        ROW(1);                                                                               \
        ROW(2);                                                                               \
        ROW(3);                                                                               \
        ROW(4);                                                                               \
        ROW(5);                                                                               \
        a += MR;                                                                              \
        b += NR;                                                                              \
    } while (0)

/* c = alpha * acc (beta == 0: c is not read) or fma(alpha, acc, beta * c). */
#define OUT(i)                                                                                \
    do {                                                                                      \
        float *ci = c + (i) * ldc;                                                            \
        if (beta == 0.0f) {                                                                   \
            _mm256_storeu_ps(ci, _mm256_mul_ps(va, c##i##0));                                 \
            _mm256_storeu_ps(ci + 8, _mm256_mul_ps(va, c##i##1));                             \
        } else {                                                                              \
            _mm256_storeu_ps(ci, _mm256_fmadd_ps(va, c##i##0,                                 \
                                                 _mm256_mul_ps(vb, _mm256_loadu_ps(ci))));    \
            _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(va, c##i##1,                             \
                                                     _mm256_mul_ps(vb, _mm256_loadu_ps(ci + 8)))); \
        }                                                                                     \
    } while (0)

static void attn__gemm_ukr_avx2(int64_t kc, const float *restrict a, const float *restrict b,
                                float *restrict c, int64_t ldc, float alpha, float beta) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int i = 0; i < MR; i++) _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
        STEP();
        STEP();
        STEP();
        STEP();
    }
    for (; k < kc; k++) STEP();
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    OUT(0);
    OUT(1);
    OUT(2);
    OUT(3);
    OUT(4);
    OUT(5);
}

static const attn__gemm_kernel attn__avx2_table = {ATTN__ISA_AVX2, MR, NR, 256, 1536,
                                                   attn__gemm_ukr_avx2};

const attn__gemm_kernel *attn__gemm_kernel_avx2(void) { return &attn__avx2_table; }

#else
const attn__gemm_kernel *attn__gemm_kernel_avx2(void) { return NULL; }
#endif
