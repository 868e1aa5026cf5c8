/* K-quant superblocks in 256-bit vectors: the group scales as 8-lane vectors and Q6_K's quants
 * 32 at a time, shared by the float kernels (quant_avx2.c, ../x86_avx512/quant_avx512.c) and
 * the int8 ones (../quant8_256.h, ../quant8_k23.h); include only from files compiled with AVX2
 * and F16C.  The same numbers as the reference's scalar code. */
#ifndef ATTN_KQUANT_AVX2_H
#define ATTN_KQUANT_AVX2_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The half at p as a float (F16C); the sum of a vector's 8 lanes in a fixed order,
 * ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)) */
static inline __attribute__((always_inline)) float attn__h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
static inline __attribute__((always_inline)) float attn__hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

/* Q4_K / Q5_K: the 8 scales d sc_j and mins dmin mn_j (lane j).  With A = s[j] and
 * B = s[4 + j] (s = the 12 bytes at b + 4), lanes j < 4 take sc = A & 63, mn = B & 63, lanes
 * j >= 4 sc = (B & 15) | ((s[j - 4] >> 2) & 48), mn = (B >> 4) | ((A >> 2) & 48); d and dmin
 * are the halves at b and b + 2, each product rounded once, as the reference does. */
static inline void attn__k4_scales8(const uint8_t *b, __m256 *ds, __m256 *dm) {
    uint16_t h[2];
    memcpy(h, b, 4);
    const __m256i A = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 4)));
    const __m256i B = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 8)));
    const __m256i C = _mm256_permutevar8x32_epi32(A, _mm256_set_epi32(3, 2, 1, 0, 3, 2, 1, 0));
    const __m256i m63 = _mm256_set1_epi32(63), m15 = _mm256_set1_epi32(15), m48 = _mm256_set1_epi32(48);
    const __m256i sc = _mm256_blend_epi32(
        _mm256_and_si256(A, m63),
        _mm256_or_si256(_mm256_and_si256(B, m15), _mm256_and_si256(_mm256_srli_epi32(C, 2), m48)), 0xF0);
    const __m256i mn = _mm256_blend_epi32(
        _mm256_and_si256(B, m63),
        _mm256_or_si256(_mm256_srli_epi32(B, 4), _mm256_and_si256(_mm256_srli_epi32(A, 2), m48)), 0xF0);
    *ds = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h[0])), _mm256_cvtepi32_ps(sc));
    *dm = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h[1])), _mm256_cvtepi32_ps(mn));
}

/* Q3_K: the 16 signed 6-bit scales sc_g - 32 as int32, group 8 h + j in lane j of sc[h]: the
 * low 4 bits from byte j of the 12 at b + 96 (shift 4 h), the high 2 from byte 8 + (j & 3)
 * (shift 2 (2 h + (j >> 2))) */
static inline void attn__q3k_scales16(const uint8_t *b, __m256i sc[2]) {
    uint32_t s8;
    memcpy(&s8, b + 104, 4); /* the last 4 of the 12 bytes without reading past the block */
    const __m256i lo8 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 96)));
    const __m256i hi4 = _mm256_permutevar8x32_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi32_si128((int)s8)),
                                                    _mm256_set_epi32(3, 2, 1, 0, 3, 2, 1, 0));
    for (int h = 0; h < 2; h++) {
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(lo8, 4 * h), _mm256_set1_epi32(15));
        const __m256i hi = _mm256_and_si256(
            _mm256_srlv_epi32(hi4, _mm256_set_epi32(4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h,
                                                    4 * h, 4 * h, 4 * h)),
            _mm256_set1_epi32(3));
        sc[h] = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    }
}

/* Q6_K: the quants q (0 .. 63) of elements 32 z .. 32 z + 31 as bytes: the low 4 bits from the
 * 32 bytes of ql at 64 (z >> 2) + 32 (z & 1) (their high nibbles for (z >> 1) & 1), the high 2
 * bits from the 32 bytes of qh at 128 + 32 (z >> 2), shift 2 (z & 3).  The int8 kernels take
 * them unsigned; the float ones signed, q - 32 (attn__q6k_bytes32). */
static inline __m256i attn__q6k_ubytes32(const uint8_t *b, int z) {
    const int h = z >> 2;
    const __m256i ql = _mm256_loadu_si256((const __m256i *)(const void *)(b + 64 * h + 32 * (z & 1)));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(b + 128 + 32 * h));
    const __m256i lo = _mm256_and_si256(((z >> 1) & 1) ? _mm256_srli_epi16(ql, 4) : ql, _mm256_set1_epi8(15));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * (z & 3)), _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}
static inline __m256i attn__q6k_bytes32(const uint8_t *b, int z) {
    return _mm256_sub_epi8(attn__q6k_ubytes32(b, z), _mm256_set1_epi8(32));
}

/* The factored kernels (a row's sum as sum_g s_g (sum_e q_e x_e) - sum_g m_g X_g): X_g, the
 * sums of x over its ng groups of 32, ((x0 + x1) + (x2 + x3)) of the group's 4 vectors, then
 * across lanes ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); computed once per call and
 * vector, for rows of at most ATTN__XS_MAX superblocks (longer: the dequantizing kernels). */
#define ATTN__XS_MAX 256
/* The entry of factored kernel T (rowsf_T(w, rb, rows, nb, x, ldx, M, xs, y, ldy) with M a
 * constant, mv_T the dequantizing kernel for longer rows): xs holds each vector's X_g, the
 * nb * GPB groups of 32 padded with zeros to a multiple of 8; X skipped where NEEDX is 0. */
#define ATTN__DEF_MVF(T, GPB, NEEDX)                                                          \
    static void mvf_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                        int64_t ldx, int64_t m, float *y, int64_t ldy) {                     \
        if (nb * (GPB) > ATTN__XS_MAX * 8) {                                                  \
            mv_##T(w, rb, rows, nb, x, ldx, m, y, ldy);                                       \
            return;                                                                           \
        }                                                                                     \
        _Alignas(32) float xs[ATTN__QMV_MAX * ATTN__XS_MAX * 8];                              \
        const int M = m < ATTN__QMV_MAX ? (int)m : ATTN__QMV_MAX;                             \
        for (int i_ = 0; (NEEDX) && i_ < M; i_++) {                                           \
            float *xi = xs + i_ * ATTN__XS_MAX * 8;                                           \
            attn__xsum32(x + i_ * ldx, nb * (GPB), xi);                                       \
            for (int64_t j = nb * (GPB); j % 8; j++) xi[j] = 0.0f;                            \
        }                                                                                     \
        const float *xs_ = (NEEDX) ? xs : NULL; /* not read without mins */                 \
        switch (M) {                                                                          \
        case 1: rowsf_##T(w, rb, rows, nb, x, ldx, 1, xs_, y, ldy); break;                    \
        case 2: rowsf_##T(w, rb, rows, nb, x, ldx, 2, xs_, y, ldy); break;                    \
        case 3: rowsf_##T(w, rb, rows, nb, x, ldx, 3, xs_, y, ldy); break;                    \
        default: rowsf_##T(w, rb, rows, nb, x, ldx, 4, xs_, y, ldy); break;                   \
        }                                                                                     \
    }
static inline void attn__xsum32(const float *x, int64_t ng, float *xs) {
    for (int64_t g = 0; g < ng; g++, x += 32) {
        const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                                       _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
        __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        a = _mm_add_ps(a, _mm_movehl_ps(a, a));
        xs[g] = _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
    }
}

/* the halves at b + off + bb j of n <= 8 blocks as floats in lane j (0 beyond n): packed in
 * integer registers, one conversion (the integer ALUs are idle in these kernels; 8 scalar
 * F16C conversions cost 16 vector operations) */
static inline __attribute__((always_inline)) __m256 attn__halves8(const uint8_t *b, int bb, int off, int n) {
    uint64_t u[2] = {0, 0};
    for (int j = 0; j < n; j++) {
        uint16_t h;
        memcpy(&h, b + off + (size_t)bb * j, 2);
        u[j >> 2] |= (uint64_t)h << (16 * (j & 3));
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)u[1], (long long)u[0]));
}
/* n a constant in each call */
static inline __attribute__((always_inline)) __m256 attn__halves8n(const uint8_t *b, int bb, int off, int n) {
    switch (n) {
    case 1: return attn__halves8(b, bb, off, 1);
    case 2: return attn__halves8(b, bb, off, 2);
    case 3: return attn__halves8(b, bb, off, 3);
    case 4: return attn__halves8(b, bb, off, 4);
    case 5: return attn__halves8(b, bb, off, 5);
    case 6: return attn__halves8(b, bb, off, 6);
    case 7: return attn__halves8(b, bb, off, 7);
    default: return attn__halves8(b, bb, off, 8);
    }
}

/* The integer kernels' reduction (../quant8_256.h, ../quant16_256.h): the int32 lanes of 8 group
 * vectors s_0 .. s_7, given as h[p] = VPHADDD(s_2p, s_2p+1), into one vector whose lane j is
 * the sum of s_j's lanes (exact). */
static inline __attribute__((always_inline)) __m256i attn__red8(const __m256i h[4]) {
    const __m256i a = _mm256_hadd_epi32(h[0], h[1]), b = _mm256_hadd_epi32(h[2], h[3]);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}
/* Their row loop over the 32-element types: NAME(t, bb, w, rb, rows, nb, xa, M, y, ldy) runs
 * CHUNK(t, bb, b, k0, n, xa, M, acc) on 8 blocks at a time (the last n < 8 a constant in each
 * call) into one float accumulator per vector, and stores attn__hsum8 of each. */
#define ATTN__ROWS8(NAME, CHUNK, ACT)                                                         \
    static inline __attribute__((always_inline)) void NAME(                                   \
        int t, size_t bb, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,              \
        const ACT *xa, const int M, float *y, int64_t ldy) {                                  \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m256 acc[ATTN__QMV_MAX];                                                        \
            for (int i = 0; i < M; i++) acc[i] = _mm256_setzero_ps();                         \
            int64_t k0 = 0;                                                                   \
            for (; k0 + 8 <= nb; k0 += 8, b += 8 * bb) CHUNK(t, bb, b, k0, 8, xa, M, acc);    \
            switch (nb - k0) {                                                                \
            case 1: CHUNK(t, bb, b, k0, 1, xa, M, acc); break;                                \
            case 2: CHUNK(t, bb, b, k0, 2, xa, M, acc); break;                                \
            case 3: CHUNK(t, bb, b, k0, 3, xa, M, acc); break;                                \
            case 4: CHUNK(t, bb, b, k0, 4, xa, M, acc); break;                                \
            case 5: CHUNK(t, bb, b, k0, 5, xa, M, acc); break;                                \
            case 6: CHUNK(t, bb, b, k0, 6, xa, M, acc); break;                                \
            case 7: CHUNK(t, bb, b, k0, 7, xa, M, acc); break;                                \
            default: break;                                                                   \
            }                                                                                 \
            for (int i = 0; i < M; i++) y[i * ldy + r] = attn__hsum8(acc[i]);                       \
        }                                                                                     \
    }

#endif
