/* GEMM kernels for AVX2 + FMA: a 6 x 16 microkernel tile held in 12 ymm accumulators (each K
 * step loads two vectors of the B micro-panel and broadcasts six A values), and packing
 * routines built on masked loads and an 8 x 8 register transpose.  Contract in gemm.h.
 * Compiled with -mavx2 -mfma (CMakeLists.txt); without them the table is absent (NULL). */
#include "../gemm.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "tr8_avx2.h"

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

/* ---- packing (contract in gemm.h) ---------------------------------------------------------- */

/* The MR = 6 values of step k of an A micro-panel: VMASKMOVPS stores are microcoded on AMD
 * (Zen 2-4 take several cycles each, where the packing of A took 7% of a MiniLM forward), so
 * a 4-float and a 2-float store. */
static inline void attn__store6(float *d, __m256 x) {
    _mm_storeu_ps(d, _mm256_castps256_ps128(x));
    _mm_storel_pi((__m64 *)(void *)(d + 4), _mm256_extractf128_ps(x, 1));
}

static void attn__pack_a_avx2(int contig, int64_t kc, const float *src, int64_t ld, int64_t nv,
                              float *dst) {
    if (contig) {
        const __m256i m = attn__mask8(nv);
        for (int64_t k = 0; k < kc; k++) {
            /* rows ld apart defeat the hardware prefetcher across pages */
            _mm_prefetch((const char *)(src + (k + 16) * ld), _MM_HINT_T0);
            _mm_prefetch((const char *)(src + (k + 16) * ld + MR - 1), _MM_HINT_T0);
            attn__store6(dst + k * MR, _mm256_maskload_ps(src + k * ld, m));
        }
        return;
    }
    for (int64_t k0 = 0; k0 < kc; k0 += 8) {
        int64_t kn = kc - k0 < 8 ? kc - k0 : 8;
        __m256 r[8];
        attn__load_tr8(r, src + k0, ld, nv < MR ? nv : MR, kn);
        for (int64_t k = 0; k < kn; k++) attn__store6(dst + (k0 + k) * MR, r[k]);
    }
}

static void attn__pack_b_avx2(int contig, int64_t kc, const float *src, int64_t ld, int64_t nv,
                              float *dst) {
    if (contig) {
        const __m256i m0 = attn__mask8(nv), m1 = attn__mask8(nv - 8);
        for (int64_t k = 0; k < kc; k++) {
            const float *s = src + k * ld;
            _mm256_storeu_ps(dst + k * NR, _mm256_maskload_ps(s, m0));
            _mm256_storeu_ps(dst + k * NR + 8, _mm256_maskload_ps(s + 8, m1));
        }
        return;
    }
    for (int64_t k0 = 0; k0 < kc; k0 += 8) {
        int64_t kn = kc - k0 < 8 ? kc - k0 : 8;
        for (int h = 0; h < NR / 8; h++) {
            float *d = dst + k0 * NR + 8 * h;
            if (nv <= 8 * h) {
                for (int64_t k = 0; k < kn; k++) _mm256_storeu_ps(d + k * NR, _mm256_setzero_ps());
                continue;
            }
            __m256 r[8];
            attn__load_tr8(r, src + 8 * h * ld + k0, ld, nv - 8 * h, kn);
            for (int64_t k = 0; k < kn; k++) _mm256_storeu_ps(d + k * NR, r[k]);
        }
    }
}

static const attn__gemm_kernel attn__avx2_table = {
    ATTN__ISA_AVX2, MR, NR, 256, 768, attn__gemm_ukr_avx2, attn__pack_a_avx2, attn__pack_b_avx2,
    NULL};

const attn__gemm_kernel *attn__gemm_kernel_avx2(void) { return &attn__avx2_table; }

#else
const attn__gemm_kernel *attn__gemm_kernel_avx2(void) { return NULL; }
#endif
