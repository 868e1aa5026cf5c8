/* AVX-512 kernels of the quantized linear product (quant.h), float activations: each block is
 * dequantized in registers with exactly the reference's float operations (the file is built
 * with -ffp-contract=off, so fl(fl(d q) + m) stays two roundings), then multiplied into float
 * accumulators with FMA.  dq stores the same values: attn__dequant_ref's bits.
 *
 * mv: per row, four accumulators per activation vector: the two 16-element halves of an even
 * block (or the first two 16-element groups of a 64-element step) go to accumulators 0 and 1,
 * those of the odd one to 2 and 3; the row's sum is (a0 + a1) + (a2 + a3) reduced across lanes
 * in a fixed order.  The same operations for a row whatever m or the row range, so results do
 * not depend on the thread split.  AVX512F only (with F16C for the scales). */
#include "../quant.h"

#if defined(__AVX512F__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))
#include <stdlib.h>
static int pf_dist = 2048;
#define PF_DIST pf_dist

INLINE float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INLINE __m128i ld128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }

/* 16 bytes -> 16 floats (unsigned, signed) */
INLINE __m512 u8f(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }
INLINE __m512 s8f(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

/* ---- block decoders: the 32 (16 per output) dequantized values of one block ------------- */
INLINE void dec_q4_0(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = _mm512_set1_ps(h2f(b));
    const __m128i q = ld128(b + 2), m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
    *w0 = _mm512_mul_ps(d, s8f(_mm_sub_epi8(_mm_and_si128(q, m), e)));
    *w1 = _mm512_mul_ps(d, s8f(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m), e)));
}

INLINE void dec_q4_1(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = _mm512_set1_ps(h2f(b)), mn = _mm512_set1_ps(h2f(b + 2));
    const __m128i q = ld128(b + 4), m = _mm_set1_epi8(15);
    *w0 = _mm512_add_ps(_mm512_mul_ps(d, u8f(_mm_and_si128(q, m))), mn);
    *w1 = _mm512_add_ps(_mm512_mul_ps(d, u8f(_mm_and_si128(_mm_srli_epi16(q, 4), m))), mn);
}

/* 5-bit values: nibbles of qs, bit j of qh on top */
INLINE void q5_ints(const uint8_t *qs, const uint8_t *qhp, int off, __m512i *v0, __m512i *v1) {
    uint32_t qh;
    memcpy(&qh, qhp, 4);
    const __m128i q = ld128(qs), m = _mm_set1_epi8(15);
    const __m512i s = _mm512_set1_epi32(16), o = _mm512_set1_epi32(off);
    __m512i a = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(q, m)), o);
    __m512i c = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m)), o);
    *v0 = _mm512_mask_add_epi32(a, (__mmask16)qh, a, s);
    *v1 = _mm512_mask_add_epi32(c, (__mmask16)(qh >> 16), c, s);
}

INLINE void dec_q5_0(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = _mm512_set1_ps(h2f(b));
    __m512i v0, v1;
    q5_ints(b + 6, b + 2, 16, &v0, &v1);
    *w0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(v0));
    *w1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(v1));
}

INLINE void dec_q5_1(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = _mm512_set1_ps(h2f(b)), mn = _mm512_set1_ps(h2f(b + 2));
    __m512i v0, v1;
    q5_ints(b + 8, b + 4, 0, &v0, &v1);
    *w0 = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(v0)), mn);
    *w1 = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(v1)), mn);
}

INLINE void dec_q8_0(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = _mm512_set1_ps(h2f(b));
    *w0 = _mm512_mul_ps(s8f(ld128(b + 2)), d);
    *w1 = _mm512_mul_ps(s8f(ld128(b + 18)), d);
}

/* ---- 32-element types: mv and dq -------------------------------------------------------- */
/* acc[i][s] += w * x_i[off .. off + 16) for the M vectors */
#define FMA_M(M, s, w, off)                                                                   \
    do {                                                                                      \
        for (int i_ = 0; i_ < (M); i_++)                                                      \
            acc[i_][s] = _mm512_fmadd_ps((w), _mm512_loadu_ps(x + i_ * ldx + (off)),         \
                                         acc[i_][s]);                                         \
    } while (0)

#define STORE_M(M)                                                                            \
    do {                                                                                      \
        for (int i_ = 0; i_ < (M); i_++)                                                      \
            y[i_ * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(                            \
                _mm512_add_ps(acc[i_][0], acc[i_][1]), _mm512_add_ps(acc[i_][2], acc[i_][3]))); \
    } while (0)

#define ZERO_M(M)                                                                             \
    for (int i_ = 0; i_ < (M); i_++)                                                          \
        for (int s_ = 0; s_ < 4; s_++) acc[i_][s_] = _mm512_setzero_ps()

#define DEF32(T, BB)                                                                          \
    INLINE void rows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                         int64_t ldx, const int M, float *y, int64_t ldy) {                  \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m512 acc[ATTN__QMV_MAX][4];                                                     \
            ZERO_M(M);                                                                        \
            int64_t k = 0;                                                                    \
            for (; k + 2 <= nb; k += 2, b += 2 * (BB)) {                                      \
                __m512 w0, w1, w2, w3;                                                        \
                _mm_prefetch((const char *)b + PF_DIST, _MM_HINT_T0);                         \
                dec_##T(b, &w0, &w1);                                                         \
                dec_##T(b + (BB), &w2, &w3);                                                  \
                FMA_M(M, 0, w0, 32 * k);                                                      \
                FMA_M(M, 1, w1, 32 * k + 16);                                                 \
                FMA_M(M, 2, w2, 32 * k + 32);                                                 \
                FMA_M(M, 3, w3, 32 * k + 48);                                                 \
            }                                                                                 \
            if (k < nb) {                                                                     \
                __m512 w0, w1;                                                                \
                dec_##T(b, &w0, &w1);                                                         \
                FMA_M(M, 0, w0, 32 * k);                                                      \
                FMA_M(M, 1, w1, 32 * k + 16);                                                 \
            }                                                                                 \
            STORE_M(M);                                                                       \
        }                                                                                     \
    }                                                                                         \
    static void mv_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                       int64_t ldx, int64_t m, float *y, int64_t ldy) {                      \
        switch (m) {                                                                          \
        case 1: rows_##T(w, rb, rows, nb, x, ldx, 1, y, ldy); break;                          \
        case 2: rows_##T(w, rb, rows, nb, x, ldx, 2, y, ldy); break;                          \
        case 3: rows_##T(w, rb, rows, nb, x, ldx, 3, y, ldy); break;                          \
        default: rows_##T(w, rb, rows, nb, x, ldx, 4, y, ldy); break;                         \
        }                                                                                     \
    }                                                                                         \
    static void dq_##T(const uint8_t *b, int64_t nb, float *y) {                              \
        for (int64_t k = 0; k < nb; k++, b += (BB), y += 32) {                                \
            __m512 w0, w1;                                                                    \
            dec_##T(b, &w0, &w1);                                                             \
            _mm512_storeu_ps(y, w0);                                                          \
            _mm512_storeu_ps(y + 16, w1);                                                     \
        }                                                                                     \
    }

DEF32(q4_0, 18)
DEF32(q4_1, 20)
DEF32(q5_0, 22)
DEF32(q5_1, 24)
DEF32(q8_0, 34)

/* ---- K types: 256-element superblocks in 16 groups of 16 ---------------------------------- */
/* The 6-bit scales and mins of Q4_K / Q5_K as floats d sc, dmin mn (the reference's products). */
INLINE void k4_scales(const uint8_t *b, float ds[8], float dm[8]) {
    const float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t *s = b + 4;
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        if (j < 4) {
            sc = s[j] & 63;
            mn = s[4 + j] & 63;
        } else {
            sc = (s[4 + j] & 15) | ((s[j - 4] >> 2) & 0x30);
            mn = (s[4 + j] >> 4) | ((s[j] >> 2) & 0x30);
        }
        ds[j] = d * (float)sc;
        dm[j] = dmin * (float)mn;
    }
}

/* group g (0..15) of a Q4_K superblock: sub-block g/2, bytes 16 (g&1) .. of the 32-byte chunk */
INLINE __m512 grp_q4_k(const uint8_t *b, const float *ds, const float *dm, int g) {
    const int s = g >> 1;
    const __m128i q = ld128(b + 16 + (s >> 1) * 32 + 16 * (g & 1));
    const __m128i v = _mm_and_si128((s & 1) ? _mm_srli_epi16(q, 4) : q, _mm_set1_epi8(15));
    return _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(ds[s]), u8f(v)), _mm512_set1_ps(dm[s]));
}

INLINE __m512 grp_q5_k(const uint8_t *b, const float *ds, const float *dm, int g) {
    const int s = g >> 1;
    const __m128i q = ld128(b + 48 + (s >> 1) * 32 + 16 * (g & 1));
    const __m128i h = ld128(b + 16 + 16 * (g & 1));
    const __m128i m = _mm_set1_epi8(15), one = _mm_set1_epi8(1);
    __m128i v = _mm_and_si128((s & 1) ? _mm_srli_epi16(q, 4) : q, m);
    __m128i hb = _mm_and_si128(_mm_srl_epi16(h, _mm_cvtsi32_si128(s)), one);
    v = _mm_or_si128(v, _mm_slli_epi16(hb, 4));
    return _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(ds[s]), u8f(v)), _mm512_set1_ps(dm[s]));
}

INLINE __m512 grp_q6_k(const uint8_t *b, const float *ds, const float *dm, int g) {
    (void)dm;
    const int h = g >> 3;
    const __m128i ql = ld128(b + h * 64 + 16 * (g & 3)), qh = ld128(b + 128 + h * 32 + 16 * (g & 1));
    const __m128i lo = _mm_and_si128(((g >> 2) & 1) ? _mm_srli_epi16(ql, 4) : ql, _mm_set1_epi8(15));
    const __m128i hi = _mm_and_si128(_mm_srl_epi16(qh, _mm_cvtsi32_si128(2 * ((g >> 1) & 3))),
                                     _mm_set1_epi8(3));
    const __m128i q = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
    return _mm512_mul_ps(_mm512_set1_ps(ds[g]), s8f(q));
}

INLINE void q6_k_scales(const uint8_t *b, float ds[16], float dm[8]) {
    const float d = h2f(b + 208);
    (void)dm;
    for (int g = 0; g < 16; g++) ds[g] = d * (float)(int8_t)b[192 + g];
}
#define q4_k_scales k4_scales
#define q5_k_scales k4_scales

#define DEFK(T, BB)                                                                           \
    INLINE void rows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                         int64_t ldx, const int M, float *y, int64_t ldy) {                  \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m512 acc[ATTN__QMV_MAX][4];                                                     \
            ZERO_M(M);                                                                        \
            for (int64_t k = 0; k < nb; k++, b += (BB)) {                                     \
                float ds[16], dm[8];                                                          \
                T##_scales(b, ds, dm);                                                        \
                for (int g = 0; g < 16; g += 4) {                                             \
                    const int64_t o = 256 * k + 16 * g;                                       \
                    const __m512 w0 = grp_##T(b, ds, dm, g), w1 = grp_##T(b, ds, dm, g + 1);  \
                    const __m512 w2 = grp_##T(b, ds, dm, g + 2), w3 = grp_##T(b, ds, dm, g + 3); \
                    FMA_M(M, 0, w0, o);                                                       \
                    FMA_M(M, 1, w1, o + 16);                                                  \
                    FMA_M(M, 2, w2, o + 32);                                                  \
                    FMA_M(M, 3, w3, o + 48);                                                  \
                }                                                                             \
            }                                                                                 \
            STORE_M(M);                                                                       \
        }                                                                                     \
    }                                                                                         \
    static void mv_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                       int64_t ldx, int64_t m, float *y, int64_t ldy) {                      \
        switch (m) {                                                                          \
        case 1: rows_##T(w, rb, rows, nb, x, ldx, 1, y, ldy); break;                          \
        case 2: rows_##T(w, rb, rows, nb, x, ldx, 2, y, ldy); break;                          \
        case 3: rows_##T(w, rb, rows, nb, x, ldx, 3, y, ldy); break;                          \
        default: rows_##T(w, rb, rows, nb, x, ldx, 4, y, ldy); break;                         \
        }                                                                                     \
    }                                                                                         \
    static void dq_##T(const uint8_t *b, int64_t nb, float *y) {                              \
        for (int64_t k = 0; k < nb; k++, b += (BB), y += 256) {                               \
            float ds[16], dm[8];                                                              \
            T##_scales(b, ds, dm);                                                            \
            for (int g = 0; g < 16; g++) _mm512_storeu_ps(y + 16 * g, grp_##T(b, ds, dm, g)); \
        }                                                                                     \
    }

DEFK(q4_k, 144)
DEFK(q5_k, 176)
DEFK(q6_k, 210)

/* ---- F32, F16 and BF16 weights: blocks of one element, K arbitrary ----------------------- */
INLINE __m512 ld_f32(const uint8_t *b, int64_t k) {
    return _mm512_loadu_ps((const float *)(const void *)b + k);
}
INLINE __m512 ld_f16(const uint8_t *b, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(b + 2 * k)));
}
INLINE __m512 ld_bf16(const uint8_t *b, int64_t k) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(b + 2 * k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}
/* element k as a float, the reference's widening */
INLINE float el_f32(const uint8_t *b, int64_t k) {
    float f;
    memcpy(&f, b + 4 * k, 4);
    return f;
}
INLINE float el_f16(const uint8_t *b, int64_t k) { return h2f(b + 2 * k); }
INLINE float el_bf16(const uint8_t *b, int64_t k) {
    uint32_t u = (uint32_t)(b[2 * k] | b[2 * k + 1] << 8) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void dq_f16(const uint8_t *b, int64_t n, float *y) {
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) _mm512_storeu_ps(y + k, ld_f16(b, k));
    for (; k < n; k++) y[k] = el_f16(b, k);
}

static void dq_bf16(const uint8_t *b, int64_t n, float *y) {
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) _mm512_storeu_ps(y + k, ld_bf16(b, k));
    for (; k < n; k++) y[k] = el_bf16(b, k);
}

/* float rows (F32 directly, F16 / BF16 widened), 64 elements per step into the 4 accumulators,
 * then 16 at a time into accumulator 0, the last < 16 through a zero-padded vector */
#define DEFF(T)                                                                               \
    INLINE void rows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t K, const float *x, \
                         int64_t ldx, const int M, float *y, int64_t ldy) {                  \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m512 acc[ATTN__QMV_MAX][4];                                                     \
            ZERO_M(M);                                                                        \
            int64_t k = 0;                                                                    \
            for (; k + 64 <= K; k += 64) {                                                    \
                const __m512 w0 = ld_##T(b, k), w1 = ld_##T(b, k + 16);                       \
                const __m512 w2 = ld_##T(b, k + 32), w3 = ld_##T(b, k + 48);                  \
                FMA_M(M, 0, w0, k);                                                           \
                FMA_M(M, 1, w1, k + 16);                                                      \
                FMA_M(M, 2, w2, k + 32);                                                      \
                FMA_M(M, 3, w3, k + 48);                                                      \
            }                                                                                 \
            for (; k + 16 <= K; k += 16) {                                                    \
                const __m512 w0 = ld_##T(b, k);                                               \
                FMA_M(M, 0, w0, k);                                                           \
            }                                                                                 \
            if (k < K) {                                                                      \
                const __mmask16 km = (__mmask16)((1u << (K - k)) - 1);                        \
                float t[16] = {0};                                                            \
                for (int64_t j = k; j < K; j++) t[j - k] = el_##T(b, j);                      \
                const __m512 wv = _mm512_loadu_ps(t);                                         \
                for (int i_ = 0; i_ < M; i_++)                                                \
                    acc[i_][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(km, x + i_ * ldx + k), \
                                                 acc[i_][0]);                                 \
            }                                                                                 \
            STORE_M(M);                                                                       \
        }                                                                                     \
    }                                                                                         \
    static void mv_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                       int64_t ldx, int64_t m, float *y, int64_t ldy) {                      \
        switch (m) {                                                                          \
        case 1: rows_##T(w, rb, rows, nb, x, ldx, 1, y, ldy); break;                          \
        case 2: rows_##T(w, rb, rows, nb, x, ldx, 2, y, ldy); break;                          \
        case 3: rows_##T(w, rb, rows, nb, x, ldx, 3, y, ldy); break;                          \
        default: rows_##T(w, rb, rows, nb, x, ldx, 4, y, ldy); break;                         \
        }                                                                                     \
    }
DEFF(f32)
DEFF(f16)
DEFF(bf16)

static const attn__quant_kernels TABLE = {
    "avx512",
    {[ATTN_Q_F16] = dq_f16, [ATTN_Q_BF16] = dq_bf16, [ATTN_Q_Q4_0] = dq_q4_0,
     [ATTN_Q_Q4_1] = dq_q4_1, [ATTN_Q_Q5_0] = dq_q5_0, [ATTN_Q_Q5_1] = dq_q5_1,
     [ATTN_Q_Q8_0] = dq_q8_0, [ATTN_Q_Q4_K] = dq_q4_k, [ATTN_Q_Q5_K] = dq_q5_k,
     [ATTN_Q_Q6_K] = dq_q6_k},
    {[ATTN_Q_F32] = mv_f32, [ATTN_Q_F16] = mv_f16, [ATTN_Q_BF16] = mv_bf16,
     [ATTN_Q_Q4_0] = mv_q4_0, [ATTN_Q_Q4_1] = mv_q4_1, [ATTN_Q_Q5_0] = mv_q5_0,
     [ATTN_Q_Q5_1] = mv_q5_1, [ATTN_Q_Q8_0] = mv_q8_0, [ATTN_Q_Q4_K] = mv_q4_k,
     [ATTN_Q_Q5_K] = mv_q5_k, [ATTN_Q_Q6_K] = mv_q6_k},
    {0},
};

const attn__quant_kernels *attn__quant_kernels_avx512(void) {
    if (getenv("PFD")) pf_dist = atoi(getenv("PFD"));
    return &TABLE;
}

#else
const attn__quant_kernels *attn__quant_kernels_avx512(void) { return NULL; }
#endif
