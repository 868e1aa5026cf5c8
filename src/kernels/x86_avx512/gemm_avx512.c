/* GEMM kernels for AVX-512F: a 14 x 32 microkernel tile held in 28 zmm accumulators (each K
 * step loads two vectors of the B micro-panel and broadcasts fourteen A values), and packing
 * routines built on masked loads and a 16 x 16 register transpose.  Contract in gemm.h.
 * Compiled with -mavx512f (CMakeLists.txt); without it the table is absent (NULL). */
#include "../gemm.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "tr16_avx512.h"

#define MR 14
#define NR 32

#define ROW(i)                                                                                \
    do {                                                                                      \
        __m512 ai = _mm512_set1_ps(a[i]);                                                     \
        c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0);                                         \
        c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1);                                         \
    } while (0)

#define STEP()                                                                                \
    do {                                                                                      \
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);                           \
        ROW(0);                                                                               \
        ROW(1);                                                                               \
        ROW(2);                                                                               \
        ROW(3);                                                                               \
        ROW(4);                                                                               \
        ROW(5);                                                                               \
        ROW(6);                                                                               \
        ROW(7);                                                                               \
        ROW(8);                                                                               \
        ROW(9);                                                                               \
        ROW(10);                                                                              \
        ROW(11);                                                                              \
        ROW(12);                                                                              \
        ROW(13);                                                                              \
        a += MR;                                                                              \
        b += NR;                                                                              \
    } while (0)

/* c = alpha * acc (beta == 0: c is not read) or fma(alpha, acc, beta * c). */
#define OUT(i)                                                                                \
    do {                                                                                      \
        float *ci = c + (i) * ldc;                                                            \
        if (beta == 0.0f) {                                                                   \
            _mm512_storeu_ps(ci, _mm512_mul_ps(va, c##i##_0));                                \
            _mm512_storeu_ps(ci + 16, _mm512_mul_ps(va, c##i##_1));                           \
        } else {                                                                              \
            _mm512_storeu_ps(ci, _mm512_fmadd_ps(va, c##i##_0,                                \
                                                 _mm512_mul_ps(vb, _mm512_loadu_ps(ci))));    \
            _mm512_storeu_ps(ci + 16,                                                         \
                             _mm512_fmadd_ps(va, c##i##_1,                                    \
                                             _mm512_mul_ps(vb, _mm512_loadu_ps(ci + 16))));   \
        }                                                                                     \
    } while (0)

static inline __attribute__((always_inline)) void ukr_body(
    int64_t kc, const float *restrict a, const float *restrict b, float *restrict c, int64_t ldc,
    float alpha, float beta, const float *pf, int64_t rows, int64_t ld, int64_t n) {
    /* one line of the next rows every `every` groups of four steps */
    const int64_t lpr = (n + 15) / 16;
    int64_t left = pf ? rows * lpr : 0, li = 0;
    const int64_t every = left ? (kc / 4 / left > 1 ? kc / 4 / left : 1) : kc + 1;
    int64_t cnt = every;
    __m512 z = _mm512_setzero_ps();
    __m512 c0_0 = z, c0_1 = z, c1_0 = z, c1_1 = z, c2_0 = z, c2_1 = z, c3_0 = z, c3_1 = z,
           c4_0 = z, c4_1 = z, c5_0 = z, c5_1 = z, c6_0 = z, c6_1 = z, c7_0 = z, c7_1 = z,
           c8_0 = z, c8_1 = z, c9_0 = z, c9_1 = z, c10_0 = z, c10_1 = z, c11_0 = z, c11_1 = z,
           c12_0 = z, c12_1 = z, c13_0 = z, c13_1 = z;
    for (int i = 0; i < MR; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
        if (--cnt == 0 && left > 0) {
            cnt = every, left--;
            _mm_prefetch((const char *)(pf + 16 * li), _MM_HINT_T1);
            if (++li == lpr && left > 0) li = 0, pf += ld; /* never past the last row */
        }
        STEP();
        STEP();
        STEP();
        STEP();
    }
    for (; k < kc; k++) STEP();
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    OUT(0);
    OUT(1);
    OUT(2);
    OUT(3);
    OUT(4);
    OUT(5);
    OUT(6);
    OUT(7);
    OUT(8);
    OUT(9);
    OUT(10);
    OUT(11);
    OUT(12);
    OUT(13);
}

static void attn__gemm_ukr_avx512(int64_t kc, const float *restrict a, const float *restrict b,
                                  float *restrict c, int64_t ldc, float alpha, float beta) {
    ukr_body(kc, a, b, c, ldc, alpha, beta, NULL, 0, 0, 0);
}

static void attn__gemm_ukr_pf_avx512(int64_t kc, const float *restrict a,
                                     const float *restrict b, float *restrict c, int64_t ldc,
                                     float alpha, float beta, const float *pf, int64_t rows,
                                     int64_t ld, int64_t n) {
    ukr_body(kc, a, b, c, ldc, alpha, beta, pf, rows, ld, n);
}

/* ---- packing (contract in gemm.h) ---------------------------------------------------------- */

static void attn__pack_a_avx512(int contig, int64_t kc, const float *src, int64_t ld,
                                int64_t nv, float *dst) {
    const __mmask16 out = attn__mask(MR);
    if (contig) {
        const __mmask16 m = attn__mask(nv);
        for (int64_t k = 0; k < kc; k++) {
            /* rows ld apart defeat the hardware prefetcher across pages */
            _mm_prefetch((const char *)(src + (k + 16) * ld), _MM_HINT_T0);
            _mm_prefetch((const char *)(src + (k + 16) * ld + MR - 1), _MM_HINT_T0);
            _mm512_mask_storeu_ps(dst + k * MR, out, _mm512_maskz_loadu_ps(m, src + k * ld));
        }
        return;
    }
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        int64_t kn = kc - k0 < 16 ? kc - k0 : 16;
        __m512 r[16];
        attn__load_tr16(r, src + k0, ld, nv, attn__mask(kn));
        for (int64_t k = 0; k < kn; k++) _mm512_mask_storeu_ps(dst + (k0 + k) * MR, out, r[k]);
    }
}

static void attn__pack_b_avx512(int contig, int64_t kc, const float *src, int64_t ld,
                                int64_t nv, float *dst) {
    if (contig) {
        const __mmask16 m0 = attn__mask(nv), m1 = attn__mask(nv - 16);
        for (int64_t k = 0; k < kc; k++) {
            const float *s = src + k * ld;
            _mm512_storeu_ps(dst + k * NR, _mm512_maskz_loadu_ps(m0, s));
            _mm512_storeu_ps(dst + k * NR + 16, _mm512_maskz_loadu_ps(m1, s + 16));
        }
        return;
    }
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        int64_t kn = kc - k0 < 16 ? kc - k0 : 16;
        __mmask16 km = attn__mask(kn);
        for (int h = 0; h < NR / 16; h++) {
            float *d = dst + k0 * NR + 16 * h;
            if (nv <= 16 * h) {
                for (int64_t k = 0; k < kn; k++) _mm512_storeu_ps(d + k * NR, _mm512_setzero_ps());
                continue;
            }
            __m512 r[16];
            attn__load_tr16(r, src + 16 * h * ld + k0, ld, nv - 16 * h, km);
            for (int64_t k = 0; k < kn; k++) _mm512_storeu_ps(d + k * NR, r[k]);
        }
    }
}

static const attn__gemm_kernel attn__avx512_table = {
    ATTN__ISA_AVX512,      MR, NR, 384, 768,  attn__gemm_ukr_avx512, attn__pack_a_avx512,
    attn__pack_b_avx512,   attn__gemm_ukr_pf_avx512};

const attn__gemm_kernel *attn__gemm_kernel_avx512(void) { return &attn__avx512_table; }

#else
const attn__gemm_kernel *attn__gemm_kernel_avx512(void) { return NULL; }
#endif
