/* fp16 linear microkernel on AVX512_FP16 (contract in ../gemm_f16.h): a 14 x 64 tile in 28
 * zmm fp16 accumulators (32 lanes each); each k step loads 64 fp16 weights and broadcasts one
 * 32-bit word (the value twice) per row.  Every KB = 128 steps the fp16 sums are widened and
 * added to float accumulators kept in a tile on the stack (L1).  VFMADD231PH issues at the
 * float FMA's rate with twice the lanes.  This directory is compiled for AVX-512 + BF16; the
 * FP16 instructions are enabled per function (target attribute), and used only where
 * the CPU reports them (ctx->kern.has_f16, src/kernels/dispatch.c). */
#include <string.h>

#include "../gemm_f16.h"

/* Clang before 16 declares the fp16 vector types only under -mavx512fp16 (not through a
 * target attribute), so older Clang builds leave this kernel out (the plain C one runs). */
#if defined(__AVX512BW__) && defined(__x86_64__) &&                                           \
    ((defined(__clang__) && (__clang_major__ >= 16 || defined(__AVX512FP16__))) ||           \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12))
#include <immintrin.h>

#include "../x86_avx512/gelu_avx512.h"

#define MR ATTN__F16_MR
#define NR ATTN__F16_NR
#define KB ATTN__F16_KB
#define LDA ATTN__F16_LDA
#define TARGET __attribute__((target("avx512fp16,avx512bw,avx512vl,avx512dq,avx512f")))

static inline __mmask16 m16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

#define ROW(i)                                                                                \
    do {                                                                                      \
        __m512h ai = _mm512_castsi512_ph(_mm512_set1_epi32((int)a[(i) * LDA + k]));           \
        h##i##_0 = _mm512_fmadd_ph(ai, b0, h##i##_0);                                         \
        h##i##_1 = _mm512_fmadd_ph(ai, b1, h##i##_1);                                         \
    } while (0)

#define WIDEN(i)                                                                              \
    do {                                                                                      \
        float *t = acc[i];                                                                    \
        __m512i u0 = _mm512_castph_si512(h##i##_0), u1 = _mm512_castph_si512(h##i##_1);       \
        _mm512_store_ps(t, _mm512_add_ps(_mm512_load_ps(t),                                   \
                                         _mm512_cvtxph_ps(_mm256_castsi256_ph(                \
                                             _mm512_castsi512_si256(u0)))));                  \
        _mm512_store_ps(t + 16, _mm512_add_ps(_mm512_load_ps(t + 16),                          \
                                              _mm512_cvtxph_ps(_mm256_castsi256_ph(           \
                                                  _mm512_extracti64x4_epi64(u0, 1)))));       \
        _mm512_store_ps(t + 32, _mm512_add_ps(_mm512_load_ps(t + 32),                          \
                                              _mm512_cvtxph_ps(_mm256_castsi256_ph(           \
                                                  _mm512_castsi512_si256(u1)))));             \
        _mm512_store_ps(t + 48, _mm512_add_ps(_mm512_load_ps(t + 48),                          \
                                              _mm512_cvtxph_ps(_mm256_castsi256_ph(           \
                                                  _mm512_extracti64x4_epi64(u1, 1)))));       \
    } while (0)

static TARGET void ukr_avx512fp16(int64_t kc, const uint32_t *a, int64_t mv,
                                  const uint16_t *b, float *c, int64_t ldc, int64_t nv,
                                  int first, int last, const float *rs, const float *cs,
                                  const float *bias, const float *r, int64_t ldr, int gelu,
                                  float *tmax, const attn__f16_pf *pf) {
    _Alignas(64) float acc_tile[MR][NR];
    /* the float tile stays in memory (L1): hidden from the optimiser, which would otherwise
     * keep it as 56 vector variables and copy them through the stack at every widening */
    float(*acc)[NR] = acc_tile;
    __asm__("" : "+r"(acc));
    const __mmask16 km[4] = {m16(nv), m16(nv - 16), m16(nv - 32), m16(nv - 48)};
    for (int64_t i = 0; i < MR; i++)
        for (int q = 0; q < 4; q++)
            _mm512_store_ps(acc[i] + 16 * q, first || i >= mv ? _mm512_setzero_ps()
                                                              : _mm512_maskz_loadu_ps(
                                                                    km[q], c + i * ldc + 16 * q));
    /* the next rows to stage: one line every `every` steps */
    const float *pr = pf ? pf->x : NULL;
    int64_t lpr = pf ? (pf->n + 15) / 16 : 0, left = pf ? pf->rows * lpr : 0, li = 0;
    int64_t every = left ? (kc / left > 1 ? kc / left : 1) : kc + 1, cnt = every;
    for (int64_t k0 = 0; k0 < kc; k0 += KB) {
        const int64_t k1 = kc - k0 < KB ? kc : k0 + KB;
        const __m512h z = _mm512_setzero_ph();
        __m512h h0_0 = z, h0_1 = z, h1_0 = z, h1_1 = z, h2_0 = z, h2_1 = z, h3_0 = z, h3_1 = z,
                h4_0 = z, h4_1 = z, h5_0 = z, h5_1 = z, h6_0 = z, h6_1 = z, h7_0 = z, h7_1 = z,
                h8_0 = z, h8_1 = z, h9_0 = z, h9_1 = z, h10_0 = z, h10_1 = z, h11_0 = z,
                h11_1 = z, h12_0 = z, h12_1 = z, h13_0 = z, h13_1 = z;
        for (int64_t k = k0; k < k1; k++) {
            /* the packed weights stream from L2: fetch 8 steps (1 KiB) ahead */
            _mm_prefetch((const char *)(b + (k + 8) * NR), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + (k + 8) * NR + 32), _MM_HINT_T0);
            if (--cnt == 0 && left > 0) {
                cnt = every, left--;
                _mm_prefetch((const char *)(pr + 16 * li), _MM_HINT_T1);
                if (++li == lpr && left > 0) li = 0, pr += pf->ld; /* never past the last row */
            }
            const __m512h b0 = _mm512_loadu_ph(b + k * NR), b1 = _mm512_loadu_ph(b + k * NR + 32);
            ROW(0);
            ROW(1);
            ROW(2);
            ROW(3);
            ROW(4);
            ROW(5);
            ROW(6);
            ROW(7);
            ROW(8);
            ROW(9);
            ROW(10);
            ROW(11);
            ROW(12);
            ROW(13);
        }
        WIDEN(0);
        WIDEN(1);
        WIDEN(2);
        WIDEN(3);
        WIDEN(4);
        WIDEN(5);
        WIDEN(6);
        WIDEN(7);
        WIDEN(8);
        WIDEN(9);
        WIDEN(10);
        WIDEN(11);
        WIDEN(12);
        WIDEN(13);
    }
    for (int64_t i = 0; i < mv; i++) {
        __m512 mx = _mm512_setzero_ps();
        __mmask16 nan = 0;
        for (int q = 0; q < 4; q++) {
            __m512 v = _mm512_load_ps(acc[i] + 16 * q);
            if (last) {
                v = _mm512_mul_ps(v, _mm512_mul_ps(_mm512_set1_ps(rs[i]),
                                                   _mm512_loadu_ps(cs + 16 * q)));
                if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km[q], bias + 16 * q));
                if (r) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km[q], r + i * ldr + 16 * q));
                if (gelu) v = attn__gelu16(v);
                if (tmax) {
                    nan |= _mm512_mask_cmp_ps_mask(km[q], v, v, _CMP_UNORD_Q);
                    mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_maskz_mov_ps(km[q], v)));
                }
            }
            _mm512_mask_storeu_ps(c + i * ldc + 16 * q, km[q], v);
        }
        if (tmax) {
            float t = _mm512_reduce_max_ps(mx);
            tmax[i] = nan || tmax[i] != tmax[i] ? __builtin_nanf("") : t > tmax[i] ? t : tmax[i];
        }
    }
}

/* max |x|; NaN when any element is NaN (a NaN row must stay NaN: the scale is then 1) */
static TARGET float absmax_avx512fp16(const float *x, int64_t n) {
    __m512 mx = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int64_t k = 0; k < n; k += 16) {
        __m512 v = _mm512_maskz_loadu_ps(m16(n - k), x + k);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
    }
    return nan ? __builtin_nanf("") : _mm512_reduce_max_ps(mx);
}

static TARGET void stage_avx512fp16(const float *x, int64_t n, float s, uint32_t *dst,
                                    int64_t np) {
    const __m512 inv = _mm512_set1_ps(1.0f / s); /* exact: s is a power of two */
    for (int64_t k = 0; k < np; k += 16) {
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m16(n - k), x + k), inv);
        __m512i w = _mm512_cvtepu16_epi32(_mm256_castph_si256(_mm512_cvtxps_ph(v)));
        w = _mm512_or_si512(w, _mm512_slli_epi32(w, 16)); /* the half in both halves */
        _mm512_mask_storeu_epi32(dst + k, m16(np - k), w);
    }
}

static const attn__f16_kernel attn__f16_avx512_table = {"avx512fp16", ukr_avx512fp16,
                                                        absmax_avx512fp16, stage_avx512fp16};

const attn__f16_kernel *attn__f16_kernel_avx512(void) { return &attn__f16_avx512_table; }

#else
const attn__f16_kernel *attn__f16_kernel_avx512(void) { return 0; }
#endif
