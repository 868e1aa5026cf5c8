/* bf16 linear microkernel on AVX512_BF16 (contract in ../gemm_bf16.h): a 14 x 32 tile in 28
 * zmm accumulators; each step broadcasts one pair (x[i, 2q], x[i, 2q+1]) of each of the 14
 * rows and issues two VDPBF16PS against the 32 column pairs of the packed panel.  Rounding of
 * the activations uses VCVTNE2PS2BF16 (nearest even, subnormals as zero), the same rounding as
 * the plain C kernel. */
#include <string.h>

#include "../gemm_bf16.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>

#define MR ATTN__BF16_MR
#define NR ATTN__BF16_NR

static inline __mmask16 m16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

static inline __m512bh brd(const attn__bf16 *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return (__m512bh)_mm512_set1_epi32(v);
}

#define ROW(i)                                                                                \
    do {                                                                                      \
        __m512bh ai = brd(a + (i) * lda);                                                     \
        c##i##_0 = _mm512_dpbf16_ps(c##i##_0, ai, b0);                                        \
        c##i##_1 = _mm512_dpbf16_ps(c##i##_1, ai, b1);                                        \
    } while (0)

#define STEP()                                                                                \
    do {                                                                                      \
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);                                        \
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 32);                                   \
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
        a += 2;                                                                               \
        b += 2 * NR;                                                                          \
    } while (0)

/* Starting values: bias (first chunk) or the partial sums in c; rows >= mv start at zero. */
#define INIT(i)                                                                               \
    do {                                                                                      \
        if ((i) >= mv) {                                                                      \
            c##i##_0 = c##i##_1 = _mm512_setzero_ps();                                        \
        } else if (first) {                                                                   \
            c##i##_0 = bv0, c##i##_1 = bv1;                                                   \
        } else {                                                                              \
            c##i##_0 = _mm512_maskz_loadu_ps(k0, c + (i) * ldc);                              \
            c##i##_1 = _mm512_maskz_loadu_ps(k1, c + (i) * ldc + 16);                         \
        }                                                                                     \
    } while (0)

#define OUT(i)                                                                                \
    do {                                                                                      \
        if ((i) < mv) {                                                                       \
            float *ci = c + (i) * ldc;                                                        \
            if (r) {                                                                          \
                const float *ri = r + (i) * ldr;                                              \
                c##i##_0 = _mm512_add_ps(c##i##_0, _mm512_maskz_loadu_ps(k0, ri));            \
                c##i##_1 = _mm512_add_ps(c##i##_1, _mm512_maskz_loadu_ps(k1, ri + 16));       \
            }                                                                                 \
            _mm512_mask_storeu_ps(ci, k0, c##i##_0);                                          \
            _mm512_mask_storeu_ps(ci + 16, k1, c##i##_1);                                     \
        }                                                                                     \
    } while (0)

static void ukr_avx512bf16(int64_t kh, const attn__bf16 *a, int64_t lda, int64_t mv,
                           const attn__bf16 *b, float *c, int64_t ldc, int64_t nv,
                           const float *bias, int first, const float *r, int64_t ldr) {
    const __mmask16 k0 = m16(nv), k1 = m16(nv - 16);
    __m512 bv0 = _mm512_setzero_ps(), bv1 = _mm512_setzero_ps();
    if (first && bias) {
        bv0 = _mm512_maskz_loadu_ps(k0, bias);
        bv1 = _mm512_maskz_loadu_ps(k1, bias + 16);
    }
    __m512 c0_0, c0_1, c1_0, c1_1, c2_0, c2_1, c3_0, c3_1, c4_0, c4_1, c5_0, c5_1, c6_0, c6_1,
        c7_0, c7_1, c8_0, c8_1, c9_0, c9_1, c10_0, c10_1, c11_0, c11_1, c12_0, c12_1, c13_0,
        c13_1;
    INIT(0);
    INIT(1);
    INIT(2);
    INIT(3);
    INIT(4);
    INIT(5);
    INIT(6);
    INIT(7);
    INIT(8);
    INIT(9);
    INIT(10);
    INIT(11);
    INIT(12);
    INIT(13);
    int64_t q = 0;
    for (; q + 4 <= kh; q += 4) {
        STEP();
        STEP();
        STEP();
        STEP();
    }
    for (; q < kh; q++) STEP();
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

/* 32 floats at a time: two masked loads, one VCVTNE2PS2BF16; the pad up to np is zero. */
static void cvt_avx512bf16(const float *x, int64_t n, attn__bf16 *dst, int64_t np) {
    for (int64_t i = 0; i < np; i += 32) {
        int64_t left = n - i;
        __m512 lo = _mm512_maskz_loadu_ps(m16(left), x + i);
        __m512 hi = _mm512_maskz_loadu_ps(m16(left - 16), x + i + 16);
        __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        int64_t w = np - i;
        __mmask32 mw = w >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << w) - 1);
        _mm512_mask_storeu_epi16(dst + i, mw, v);
    }
}

static const attn__bf16_kernel attn__bf16_avx512_table = {"avx512bf16", ukr_avx512bf16,
                                                          cvt_avx512bf16};

const attn__bf16_kernel *attn__bf16_kernel_avx512(void) { return &attn__bf16_avx512_table; }

#else
const attn__bf16_kernel *attn__bf16_kernel_avx512(void) { return 0; }
#endif
