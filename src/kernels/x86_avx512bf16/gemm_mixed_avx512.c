/* Mixed-precision GEMM on AVX512_BF16 (contract in ../gemm_mixed.h): the packing routines
 * (VCVTNE2PS2BF16: nearest even, subnormals as zero, as attn__f32_to_bf16_daz), shared with the
 * AMX kernel, and a VDPBF16PS microkernel for CPUs without AMX: a 14 x 32 tile in 28 zmm
 * accumulators over the whole K; each step broadcasts one pair of each of the 14 rows of A and
 * issues two VDPBF16PS against the 32 column pairs of B. */
#include <string.h>

#include "../gemm_mixed.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>

#include "../x86_avx512/tr16_avx512.h"

static inline __mmask16 m16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* 32 floats at p (n of them valid, the rest zero) as 32 bf16. */
static inline __m512i cvt32(const float *p, int64_t n) {
    __m512 lo = _mm512_maskz_loadu_ps(m16(n), p), hi = _mm512_maskz_loadu_ps(m16(n - 16), p + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}


/* Dword i of the result: bf16(lo[i]) | bf16(hi[i]) << 16 (each rounded once, nearest even):
 * the two rows converted together, then their halves interleaved by one word permute. */
static inline __m512i pair_rows(__m512 lo, __m512 hi) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                         24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                         16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* Lane i: the pair (op(A)[i0 + i, k], op(A)[i0 + i, k + 1]) of a transposed source (rows k
 * and k + 1 of src, columns i0 .. i0 + n), zero beyond K and n. */
static inline __m512 pairs16(const float *src, int64_t ld, int64_t K, int64_t k, int64_t i0,
                             int64_t n) {
    const __mmask16 m = m16(n);
    const __m512 lo = k < K ? _mm512_maskz_loadu_ps(m, src + k * ld + i0) : _mm512_setzero_ps();
    const __m512 hi = k + 1 < K ? _mm512_maskz_loadu_ps(m, src + (k + 1) * ld + i0)
                                : _mm512_setzero_ps();
    return _mm512_castsi512_ps(pair_rows(lo, hi));
}

/* sum[i0 .. i0 + n) += rows k0 .. min(k0 + 32, K) - 1 of src at columns i0.., in row order. */
static inline void sum_rows(float *sum, const float *src, int64_t ld, int64_t K, int64_t k0,
                            int64_t i0, int64_t n) {
    const __mmask16 m = m16(n);
    __m512 s = _mm512_maskz_loadu_ps(m, sum + i0);
    const int64_t k1 = K - k0 < 32 ? K : k0 + 32;
    for (int64_t k = k0; k < k1; k++)
        s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, src + k * ld + i0));
    _mm512_mask_storeu_ps(sum + i0, m, s);
}

void attn__mixed_pack_a_avx512(int trans, const float *src, int64_t ld, int64_t mv, int mr,
                               int64_t K, int64_t kp, attn__bf16 *dst, int64_t lda, float *sum) {
    if (!trans) {
        for (int64_t i = 0; i < mv; i++)
            for (int64_t k = 0; k < kp; k += 32)
                _mm512_storeu_si512(dst + i * lda + k, cvt32(src + i * ld + k, K - k));
    } else {
        /* op(A)[i, k] = src[k ld + i]: rows k, k + 1 of src give 16 rows i their pair (k, k+1);
         * 16 such pairs are transposed in registers into 16 rows of 32 bf16 */
        for (int64_t k = 0; k < kp; k += 32)
            for (int64_t i0 = 0; i0 < mv; i0 += 16) {
                const int64_t n = mv - i0 < 16 ? mv - i0 : 16;
                __m512 r[16];
                for (int q = 0; q < 16; q++) r[q] = pairs16(src, ld, K, k + 2 * q, i0, n);
                attn__tr16(r);
                for (int64_t i = 0; i < n; i++)
                    _mm512_storeu_ps((float *)(void *)(dst + (i0 + i) * lda + k), r[i]);
                if (sum && k < K) sum_rows(sum, src, ld, K, k, i0, n); /* lines still in L1 */
            }
    }
    for (int64_t i = mv; i < mr; i++) memset(dst + i * lda, 0, sizeof(attn__bf16) * (size_t)kp);
}

void attn__mixed_pack_b_avx512(int trans, const float *src, int64_t ld, int64_t nv, int nr,
                               int64_t K, int64_t kp, attn__bf16 *dst) {
    const int64_t np = (nv + nr - 1) / nr, panel = (int64_t)nr * kp / 2; /* pairs per panel */
    if (nv < np * nr) /* the last panel is partial: its missing columns are zero */
        memset(dst + (np - 1) * nr * kp, 0, sizeof(attn__bf16) * (size_t)(kp * nr));
    uint32_t *d = (uint32_t *)(void *)dst; /* pair (q, j) of panel p at d[p panel + q nr + j] */
    if (!trans) { /* op(B)[k, j] = src[k ld + j]: rows k and k + 1 interleave, across panels */
        for (int64_t q = 0; q < kp / 2; q++) {
            const int64_t k = 2 * q;
            if (k >= K) {
                for (int64_t p = 0; p < np; p++)
                    memset(d + p * panel + q * nr, 0, sizeof(uint32_t) * (size_t)nr);
                continue;
            }
            const float *s0 = src + k * ld, *s1 = s0 + ld;
            const int two = k + 1 < K;
            for (int64_t j0 = 0; j0 < nv; j0 += 16) { /* nr is a multiple of 16 */
                const int64_t n = nv - j0;
                const __m512 lo = _mm512_maskz_loadu_ps(m16(n), s0 + j0);
                const __m512 hi = two ? _mm512_maskz_loadu_ps(m16(n), s1 + j0) : _mm512_setzero_ps();
                _mm512_mask_storeu_epi32(d + (j0 / nr) * panel + q * nr + j0 % nr, m16(n),
                                         pair_rows(lo, hi));
            }
        }
        return;
    }
    /* op(B)[k, j] = src[j ld + k]: column j's 16 pairs of a 32-wide k step are contiguous; 16
     * columns of them are transposed in registers into 16 steps of 16 pairs */
    for (int64_t j0 = 0; j0 < nv; j0 += 16) {
        const int64_t n = nv - j0 < 16 ? nv - j0 : 16;
        uint32_t *dp = d + (j0 / nr) * panel + j0 % nr;
        for (int64_t k = 0; k < kp; k += 32) {
            __m512 r[16];
            for (int64_t j = 0; j < 16; j++)
                r[j] = j < n ? _mm512_castsi512_ps(cvt32(src + (j0 + j) * ld + k, K - k))
                             : _mm512_setzero_ps();
            attn__tr16(r);
            for (int q = 0; q < 16; q++)
                _mm512_mask_storeu_epi32(dp + (k / 2 + q) * nr, m16(n), _mm512_castps_si512(r[q]));
        }
    }
}

/* ---- VDPBF16PS microkernel: 14 x 32 ------------------------------------------------------- */
#define MR 14
#define NR 32

static inline __m512bh brd(const attn__bf16 *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return (__m512bh)_mm512_set1_epi32(v);
}

static void ukr_dp(int64_t kh, const attn__bf16 *a, int64_t lda, const attn__bf16 *b, float *c,
                   int64_t ldc, int acc) {
    __m512 s[MR][2];
    for (int i = 0; i < MR; i++) {
        s[i][0] = acc ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
        s[i][1] = acc ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t q = 0; q < kh; q++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + q * 2 * NR);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + q * 2 * NR + 32);
        for (int i = 0; i < MR; i++) { /* unrolled by the compiler: s stays in registers */
            const __m512bh ai = brd(a + i * lda + 2 * q);
            s[i][0] = _mm512_dpbf16_ps(s[i][0], ai, b0);
            s[i][1] = _mm512_dpbf16_ps(s[i][1], ai, b1);
        }
    }
    for (int i = 0; i < MR; i++) {
        _mm512_storeu_ps(c + i * ldc, s[i][0]);
        _mm512_storeu_ps(c + i * ldc + 16, s[i][1]);
    }
}

static const attn__mixed_kernel table = {"avx512_bf16", MR, NR, (size_t)768 << 10, ukr_dp,
                                         NULL, NULL, attn__mixed_pack_a_avx512,
                                         attn__mixed_pack_b_avx512, 0, 0};

const attn__mixed_kernel *attn__mixed_kernel_avx512(void) { return &table; }
#else
const attn__mixed_kernel *attn__mixed_kernel_avx512(void) { return NULL; }
/* Built without the bf16 instructions (another architecture, or an older compiler): the
 * packing is the plain C one, which gives the same bits, so that callers still link. */
void attn__mixed_pack_a_avx512(int trans, const float *src, int64_t ld, int64_t mv, int mr,
                               int64_t K, int64_t kp, attn__bf16 *dst, int64_t lda, float *sum) {
    attn__mixed_pack_a_c(trans, src, ld, mv, mr, K, kp, dst, lda, sum);
}
void attn__mixed_pack_b_avx512(int trans, const float *src, int64_t ld, int64_t nv, int nr,
                               int64_t K, int64_t kp, attn__bf16 *dst) {
    attn__mixed_pack_b_c(trans, src, ld, nv, nr, K, kp, dst);
}
#endif
