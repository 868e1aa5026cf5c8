/* AVX-512 kernels of the quantized linear product (quant.h), float activations: each block is
 * dequantized in registers with exactly the reference's float operations (the file is built
 * with -ffp-contract=off, so fl(fl(d q) + m) stays two roundings), then multiplied into float
 * accumulators with FMA.  dq stores the same values: attn__dequant_ref's bits.  The matrix-
 * vector products of Q4_K and Q5_K factor each group's scale and min out of its sum instead
 * (x86_avx2/quant_avx2.c, "factored K-quants").
 *
 * mv: per row, four accumulators per activation vector: the two 16-element halves of an even
 * block (or the first two 16-element groups of a 64-element step) go to accumulators 0 and 1,
 * those of the odd one to 2 and 3; the row's sum is (a0 + a1) + (a2 + a3) reduced across lanes
 * in a fixed order.  The same operations for a row whatever m or the row range, so results do
 * not depend on the thread split.  AVX512F only (with F16C for the scales).
 *
 * The FMAs marked "exact" compute the reference's fl(fl(s q) + m) (or - m): s is a half (11
 * significant bits) or a half times a 6-bit integer (17), q an integer below 32, so s q is a
 * float exactly and one rounding is the reference's (x86_avx2/quant_avx2.c, exact_fma). */
#include "../quant.h"

#if defined(__AVX512F__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>

#include "quant_avx512.h"
#include "../x86_avx2/kquant_avx2.h"

#define PF_DIST 2048 /* bytes ahead of the weights to fetch (docs/kernels.md) */



/* 16 signed bytes -> 16 floats */
INLINE __m512 s8f(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

/* ---- block decoders: the 32 (16 per output) dequantized values of one block -------------
 * The 4- and 5-bit types first compute the block's 16 (32) possible values with the
 * reference's operations (d q, or fl(d q) + m, for q = 0 .. 15), then pick them by quant
 * (VPERMPS uses the low 4 bits of each lane, VPERMT2PS 5): the same floats as the reference,
 * with fewer operations per element. */
INLINE __m512 iota16(void) {
    return _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}

INLINE void dec_q4_0(const uint8_t *b, float d, float m, __m512 *w0, __m512 *w1) {
    (void)m;
    const __m512 t = _mm512_mul_ps(_mm512_set1_ps(d),
                                   _mm512_sub_ps(iota16(), _mm512_set1_ps(8.0f)));
    const __m512i v = bytes16(b + 2);
    *w0 = _mm512_permutexvar_ps(v, t);
    *w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t);
}

INLINE void dec_q4_1(const uint8_t *b, float d, float m, __m512 *w0, __m512 *w1) {
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(d), iota16()), _mm512_set1_ps(m));
    const __m512i v = bytes16(b + 4);
    *w0 = _mm512_permutexvar_ps(v, t);
    *w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t);
}

/* 5-bit: the low nibble (and 15), bit j of qh as bit 4 of the index into t0 (q < 16) / t1 */
INLINE void pick5(const uint8_t *qs, const uint8_t *qhp, __m512 t0, __m512 t1, __m512 *w0,
                  __m512 *w1) {
    uint32_t qh;
    memcpy(&qh, qhp, 4);
    const __m512i v = bytes16(qs), s = _mm512_set1_epi32(16);
    __m512i i0 = _mm512_and_si512(v, _mm512_set1_epi32(15)), i1 = _mm512_srli_epi32(v, 4);
    i0 = _mm512_mask_or_epi32(i0, (__mmask16)qh, i0, s);
    i1 = _mm512_mask_or_epi32(i1, (__mmask16)(qh >> 16), i1, s);
    *w0 = _mm512_permutex2var_ps(t0, i0, t1);
    *w1 = _mm512_permutex2var_ps(t0, i1, t1);
}

INLINE void dec_q5_0(const uint8_t *b, float ds, float ms, __m512 *w0, __m512 *w1) {
    (void)ms;
    const __m512 d = _mm512_set1_ps(ds), i = iota16();
    const __m512 t0 = _mm512_mul_ps(d, _mm512_sub_ps(i, _mm512_set1_ps(16.0f)));
    const __m512 t1 = _mm512_mul_ps(d, i);
    pick5(b + 6, b + 2, t0, t1, w0, w1);
}

INLINE void dec_q5_1(const uint8_t *b, float ds, float ms, __m512 *w0, __m512 *w1) {
    const __m512 d = _mm512_set1_ps(ds), m = _mm512_set1_ps(ms), i = iota16();
    const __m512 t0 = _mm512_fmadd_ps(d, i, m); /* exact: the header */
    const __m512 t1 = _mm512_fmadd_ps(d, _mm512_add_ps(i, _mm512_set1_ps(16.0f)), m);
    pick5(b + 8, b + 4, t0, t1, w0, w1);
}

INLINE void dec_q8_0(const uint8_t *b, float ds, float ms, __m512 *w0, __m512 *w1) {
    (void)ms;
    const __m512 d = _mm512_set1_ps(ds);
    *w0 = _mm512_mul_ps(s8f(ld128(b + 2)), d);
    *w1 = _mm512_mul_ps(s8f(ld128(b + 18)), d);
}

/* IQ4: the 16 levels as floats; the block's 16 values d T[q] picked by nibble (the reference's
 * products, one per level) */
INLINE __m512 iq4_levels(void) { return s8f(ld128((const uint8_t *)attn__iq4_values)); }

INLINE void dec_iq4_nl(const uint8_t *b, float ds, float ms, __m512 *w0, __m512 *w1) {
    (void)ms;
    const __m512 t = _mm512_mul_ps(_mm512_set1_ps(ds), iq4_levels());
    const __m512i v = bytes16(b + 2);
    *w0 = _mm512_permutexvar_ps(v, t);
    *w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t);
}

/* ---- sums across lanes ---------------------------------------------------------------------
 * hsum16: lanes i and i + 8, then i and i + 4, then i and i + 2, then lanes 0 and 1 (GCC's
 * _mm512_reduce_add_ps; written out so that every compiler sums in this order).  hsum8x: the
 * same sums of 8 vectors at once, by transposing shuffles (about 25 operations instead of 64):
 * out[k] gets hsum16(u[k])'s bits, for k < n (u[n ..] are not read). */
INLINE float hsum16(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 g = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 e = _mm_add_ps(g, _mm_shuffle_ps(g, g, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
}

INLINE void hsum8x(const __m512 *u, int n, float *out) {
    __m512 v[8], p[4];
    for (int k = 0; k < 8; k++) v[k] = k < n ? u[k] : _mm512_setzero_ps();
    for (int k = 0; k < 4; k++) /* [h_2k, h_2k+1]: lanes i + i + 8 of each */
        p[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
    /* [g_0 .. g_3], [g_4 .. g_7]: lanes i + i + 4 of each h */
    const __m512 q0 = _mm512_add_ps(_mm512_shuffle_f32x4(p[0], p[1], 0x88),
                                    _mm512_shuffle_f32x4(p[0], p[1], 0xDD));
    const __m512 q1 = _mm512_add_ps(_mm512_shuffle_f32x4(p[2], p[3], 0x88),
                                    _mm512_shuffle_f32x4(p[2], p[3], 0xDD));
    /* 128-bit lane k: [e_k, e_k+4]: lanes i + i + 2 of g_k and of g_k+4 */
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(q0, q1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(q0, q1, _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane 4 k: e_k[0] + e_k[1]; lane 4 k + 2: the same of e_k+4 */
    _Alignas(64) float f[16];
    _mm512_store_ps(f, _mm512_add_ps(r, _mm512_permute_ps(r, _MM_SHUFFLE(2, 3, 0, 1))));
    for (int k = 0; k < n; k++) out[k] = f[k < 4 ? 4 * k : 4 * (k - 4) + 2];
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
            y[i_ * ldy + r] = hsum16(_mm512_add_ps(                                          \
                _mm512_add_ps(acc[i_][0], acc[i_][1]), _mm512_add_ps(acc[i_][2], acc[i_][3]))); \
    } while (0)

#define ZERO_M(M)                                                                             \
    for (int i_ = 0; i_ < (M); i_++)                                                          \
        for (int s_ = 0; s_ < 4; s_++) acc[i_][s_] = _mm512_setzero_ps()

/* The scales of blocks 0 .. n - 1 (n <= 16) at b, bb bytes apart, as floats: the halves at
 * bytes 0-1 (d) and 2-3 (m: the second scale, or whatever the block holds there).  Scalar
 * F16C conversions: a VPGATHERDD of the 16 words ran Q8_0 rows of 640 at 20 GB/s against 31
 * (AMD Zen 4, 2 threads; gathers are slow there, and on Intel since the GDS microcode). */
INLINE void scales16(const uint8_t *b, int bb, int64_t n, float *d, float *m) {
    for (int64_t j = 0; j < n; j++) d[j] = h2f(b + j * bb), m[j] = h2f(b + j * bb + 2);
}

/* Rows in chunks of 16 blocks (scales converted per chunk), blocks in pairs: the halves of
 * the even block into accumulators 0, 1, of the odd one into 2, 3; a last odd block into 0, 1. */
#define DEF32(T, BB)                                                                          \
    INLINE void rows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                         int64_t ldx, const int M, float *y, int64_t ldy) {                  \
        _Alignas(64) float sd[16], sm[16];                                                    \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m512 acc[ATTN__QMV_MAX][4];                                                     \
            ZERO_M(M);                                                                        \
            for (int64_t k0 = 0; k0 < nb; k0 += 16) {                                         \
                const int64_t n = nb - k0 < 16 ? nb - k0 : 16;                                \
                scales16(b, (BB), n, sd, sm);                                                 \
                int64_t j = 0;                                                                \
                for (; j + 2 <= n; j += 2, b += 2 * (BB)) {                                   \
                    const int64_t k = k0 + j;                                                 \
                    __m512 w0, w1, w2, w3;                                                    \
                    _mm_prefetch((const char *)b + PF_DIST, _MM_HINT_T0);                     \
                    dec_##T(b, sd[j], sm[j], &w0, &w1);                                       \
                    dec_##T(b + (BB), sd[j + 1], sm[j + 1], &w2, &w3);                        \
                    FMA_M(M, 0, w0, 32 * k);                                                  \
                    FMA_M(M, 1, w1, 32 * k + 16);                                             \
                    FMA_M(M, 2, w2, 32 * k + 32);                                             \
                    FMA_M(M, 3, w3, 32 * k + 48);                                             \
                }                                                                             \
                if (j < n) {                                                                  \
                    __m512 w0, w1;                                                            \
                    dec_##T(b, sd[j], sm[j], &w0, &w1);                                       \
                    FMA_M(M, 0, w0, 32 * (k0 + j));                                           \
                    FMA_M(M, 1, w1, 32 * (k0 + j) + 16);                                      \
                    b += (BB);                                                                \
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
        _Alignas(64) float sd[16], sm[16];                                                    \
        for (int64_t k0 = 0; k0 < nb; k0 += 16) {                                             \
            const int64_t n = nb - k0 < 16 ? nb - k0 : 16;                                    \
            scales16(b, (BB), n, sd, sm);                                                     \
            for (int64_t j = 0; j < n; j++, b += (BB), y += 32) {                             \
                __m512 w0, w1;                                                                \
                dec_##T(b, sd[j], sm[j], &w0, &w1);                                           \
                _mm512_storeu_ps(y, w0);                                                      \
                _mm512_storeu_ps(y + 16, w1);                                                 \
            }                                                                                 \
        }                                                                                     \
    }

DEF32(q4_0, 18)
DEF32(q4_1, 20)
DEF32(q5_0, 22)
DEF32(q5_1, 24)
DEF32(q8_0, 34)
DEF32(iq4_nl, 18)

/* ---- K types: 256-element superblocks in 16 groups of 16 ---------------------------------- */
INLINE __m512 lane(__m512 v, int i) { return _mm512_permutexvar_ps(_mm512_set1_epi32(i), v); }

/* Q4_K / Q5_K: the 16 (32) values of sub-block s: (d sc) q - dmin mn */
INLINE __m512 k4_table(__m512 sdm, int s, int hi) {
    const __m512 q = hi ? _mm512_add_ps(iota16(), _mm512_set1_ps(16.0f)) : iota16();
    return _mm512_fmsub_ps(lane(sdm, 2 * s), q, lane(sdm, 2 * s + 1)); /* exact: the header */
}

typedef struct kblock {
    __m512 t0[8], t1[8]; /* per sub-block: Q4_K d sc and dmin mn broadcast; Q5_K the values of
                          * q < 16 and q >= 16; IQ4_XS the 16 values; Q2_K, Q3_K: the values of
                          * a few groups of 16 (q2_k_prep, q3_k_prep) */
    _Alignas(64) float ds[16]; /* Q6_K: d sc_g */
} kblock;

INLINE void q4_k_prep(const uint8_t *b, kblock *kb) {
    const __m512 sdm = k4_sdm(b);
    for (int s = 0; s < 8; s++) kb->t0[s] = lane(sdm, 2 * s), kb->t1[s] = lane(sdm, 2 * s + 1);
}
INLINE void q5_k_prep(const uint8_t *b, kblock *kb) {
    const __m512 sdm = k4_sdm(b);
    for (int s = 0; s < 8; s++) kb->t0[s] = k4_table(sdm, s, 0), kb->t1[s] = k4_table(sdm, s, 1);
}
/* IQ4_XS: per group of 32, the 16 values (d ls) T[q] */
INLINE void iq4_xs_prep(const uint8_t *b, kblock *kb) {
    const __m512 lv = iq4_levels(), ds = _mm512_castps256_ps512(iq4xs_ds(b));
    for (int s = 0; s < 8; s++) kb->t0[s] = _mm512_mul_ps(lane(ds, s), lv);
}
INLINE void q6_k_prep(const uint8_t *b, kblock *kb) {
    _mm512_store_ps(kb->ds, _mm512_mul_ps(_mm512_set1_ps(h2f(b + 208)), s8f(ld128(b + 192))));
}

/* Q2_K: per group g of 16, dl = d (sc_g & 15), ml = dmin (sc_g >> 4) (lane g), then the
 * group's 4 values fl(fl(dl q) - ml), q = 0..3, in lanes 4 (g & 3) + q of t0[g >> 2] */
INLINE void q2_k_prep(const uint8_t *b, kblock *kb) {
    const __m512i sc = bytes16(b);
    const __m512 dl = _mm512_mul_ps(_mm512_set1_ps(h2f(b + 80)),
                                    _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15))));
    const __m512 ml = _mm512_mul_ps(_mm512_set1_ps(h2f(b + 82)),
                                    _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)));
    const __m512i gi = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512 q = _mm512_set_ps(3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0);
    for (int v = 0; v < 4; v++) {
        const __m512i i = _mm512_add_epi32(gi, _mm512_set1_epi32(4 * v));
        kb->t0[v] = _mm512_sub_ps(_mm512_mul_ps(_mm512_permutexvar_ps(i, dl), q),
                                  _mm512_permutexvar_ps(i, ml));
    }
}

/* Q3_K: the 16 signed 6-bit scales, dl = d (sc - 32) (lane g): low 4 bits from byte g & 7 of
 * the 12 (shift 4 (g >> 3)), high 2 from byte 8 + (g & 3) (shift 2 (g >> 2)); then the 8
 * values dl (i - 4), i = ql | h << 2 = 0..7, of group g in lanes 8 (g & 1) + i of t0[g >> 1] */
INLINE void q3_k_prep(const uint8_t *b, kblock *kb) {
    uint32_t s8;
    memcpy(&s8, b + 104, 4); /* the 12 bytes without reading past the block */
    const __m512i sc = _mm512_cvtepu8_epi32(_mm_insert_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 96)), (int)s8, 2));
    const __m512i g = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i lo = _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_and_si512(g, _mm512_set1_epi32(7)), sc),
                          _mm512_slli_epi32(_mm512_srli_epi32(g, 3), 2)),
        _mm512_set1_epi32(15));
    const __m512i hi = _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_permutexvar_epi32(
                              _mm512_add_epi32(_mm512_and_si512(g, _mm512_set1_epi32(3)), _mm512_set1_epi32(8)), sc),
                          _mm512_slli_epi32(_mm512_srli_epi32(g, 2), 1)),
        _mm512_set1_epi32(3));
    const __m512i q6 = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
    const __m512 dl = _mm512_mul_ps(_mm512_set1_ps(h2f(b + 108)), _mm512_cvtepi32_ps(q6));
    const __m512i gi = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512 q = _mm512_set_ps(3, 2, 1, 0, -1, -2, -3, -4, 3, 2, 1, 0, -1, -2, -3, -4);
    for (int v = 0; v < 8; v++)
        kb->t0[v] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_add_epi32(gi, _mm512_set1_epi32(2 * v)), dl), q);
}

/* the 2-bit fields (g >> 1) & 3 of the 16 bytes at p, as bytes */
INLINE __m128i bits2x16(const uint8_t *p, int g) {
    return _mm_and_si128(_mm_srl_epi16(ld128(p), _mm_cvtsi32_si128(2 * ((g >> 1) & 3))), _mm_set1_epi8(3));
}

/* group g of a Q2_K superblock: the 2-bit fields of bytes 16 (g & 1) .. of the 32 at
 * 16 + 32 (g >> 3), index 4 (g & 3) + q into t0[g >> 2] */
INLINE __m512 grp_q2_k(const uint8_t *b, const kblock *kb, int g) {
    const __m128i i = _mm_or_si128(bits2x16(b + 16 + 32 * (g >> 3) + 16 * (g & 1), g),
                                   _mm_set1_epi8((char)(4 * (g & 3))));
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(i), kb->t0[g >> 2]);
}

/* group g of a Q3_K superblock: ql as Q2_K's (qs at 32), h bit g >> 1 of hmask bytes
 * 16 (g & 1) .., index 8 (g & 1) + (ql | h << 2) into t0[g >> 1] */
INLINE __m512 grp_q3_k(const uint8_t *b, const kblock *kb, int g) {
    const __m128i h = _mm_and_si128(_mm_srl_epi16(ld128(b + 16 * (g & 1)), _mm_cvtsi32_si128(g >> 1)),
                                    _mm_set1_epi8(1));
    const __m128i i = _mm_or_si128(_mm_or_si128(bits2x16(b + 32 + 32 * (g >> 3) + 16 * (g & 1), g),
                                                _mm_slli_epi16(h, 2)),
                                   _mm_set1_epi8((char)(8 * (g & 1))));
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(i), kb->t0[g >> 1]);
}

/* group g (0..15) of a Q4_K superblock: sub-block g/2, bytes 16 (g&1) .. of its 32-byte chunk;
 * the nibble converted, then one FMA (d sc) q - dmin mn, exact (the header): 1.05x a 16-entry
 * table picked by VPERMPS on Zen 4 */
INLINE __m512 grp_q4_k(const uint8_t *b, const kblock *kb, int g) {
    const int s = g >> 1;
    __m512i v = bytes16(b + 16 + (s >> 1) * 32 + 16 * (g & 1));
    v = (s & 1) ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, _mm512_set1_epi32(15));
    return _mm512_fmsub_ps(kb->t0[s], _mm512_cvtepi32_ps(v), kb->t1[s]);
}

INLINE __m512 grp_q5_k(const uint8_t *b, const kblock *kb, int g) {
    const int s = g >> 1;
    __m512i v = bytes16(b + 48 + (s >> 1) * 32 + 16 * (g & 1));
    v = (s & 1) ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, _mm512_set1_epi32(15));
    const __m512i hb = _mm512_srl_epi32(bytes16(b + 16 + 16 * (g & 1)), _mm_cvtsi32_si128(s));
    const __m512i h = _mm512_slli_epi32(_mm512_and_si512(hb, _mm512_set1_epi32(1)), 4);
    return _mm512_permutex2var_ps(kb->t0[s], _mm512_or_si512(v, h), kb->t1[s]);
}

/* group g of a Q6_K superblock: half g & 1 of the 32 quants of elements 32 (g >> 1) .. (one
 * 256-bit unpacking for two groups, kquant_avx2.h: 1.13x a 128-bit one per group on Zen 4) */
INLINE __m512 grp_q6_k(const uint8_t *b, const kblock *kb, int g) {
    const __m256i v = attn__q6k_bytes32(b, g >> 1);
    const __m128i q = (g & 1) ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
    return _mm512_mul_ps(_mm512_set1_ps(kb->ds[g]), s8f(q));
}

/* group g (0..15) of an IQ4_XS superblock: the low (g even) or high nibbles of group g/2's
 * 16 bytes */
INLINE __m512 grp_iq4_xs(const uint8_t *b, const kblock *kb, int g) {
    __m512i v = bytes16(b + 8 + 16 * (g >> 1));
    if (g & 1) v = _mm512_srli_epi32(v, 4);
    return _mm512_permutexvar_ps(v, kb->t0[g >> 1]);
}

#define DEFK(T, BB)                                                                           \
    INLINE void rows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                         int64_t ldx, const int M, float *y, int64_t ldy) {                  \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m512 acc[ATTN__QMV_MAX][4];                                                     \
            ZERO_M(M);                                                                        \
            for (int64_t k = 0; k < nb; k++, b += (BB)) {                                     \
                kblock kb;                                                                    \
                for (int p_ = 0; p_ < (BB); p_ += 64)                                         \
                    _mm_prefetch((const char *)b + PF_DIST + p_, _MM_HINT_T0);                \
                T##_prep(b, &kb);                                                             \
                _Pragma("GCC unroll 4")                                                       \
                for (int g = 0; g < 16; g += 4) {                                             \
                    const int64_t o = 256 * k + 16 * g;                                       \
                    const __m512 w0 = grp_##T(b, &kb, g), w1 = grp_##T(b, &kb, g + 1);        \
                    const __m512 w2 = grp_##T(b, &kb, g + 2), w3 = grp_##T(b, &kb, g + 3);    \
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
            kblock kb;                                                                        \
            T##_prep(b, &kb);                                                                 \
            for (int g = 0; g < 16; g++) _mm512_storeu_ps(y + 16 * g, grp_##T(b, &kb, g));    \
        }                                                                                     \
    }

DEFK(q2_k, 84)
DEFK(q3_k, 110)
DEFK(q4_k, 144)
DEFK(q5_k, 176)
DEFK(q6_k, 210)
DEFK(iq4_xs, 136)

/* ---- factored Q4_K, Q5_K (x86_avx2/quant_avx2.c has the arithmetic) -------------------------
 * Per chunk c of 64 elements (groups 2 c and 2 c + 1 of 32), two halves of 16: the quants of
 * group 2 c (low nibbles: VPERMPS of 0 .. 15 by the low 4 bits, 1.02x a mask and a conversion)
 * and 2 c + 1 (high ones) times x into one vector per group, then acc[i][0] += d sc_2c * that,
 * acc[i][1] += d sc_2c+1 * the other; the mins -dm_g X_g into acc[i][0]'s low 8 lanes once
 * per superblock.  Zen 4, one thread, rows of 1024: Q4_K 7.5 -> 10.0 GB/s, Q5_K 6.1 -> 8.6
 * (the 256-bit kernels: 10.7 and 8.6; Zen 4 splits 512-bit operations).  Q6_K's groups of 16
 * are one vector each, where factoring saves nothing. */
INLINE void k4f_q4_k(const uint8_t *b, int c, int t, __m512 *lo, __m512 *hi) {
    const __m512i v = bytes16(b + 16 + 32 * c + 16 * t);
    *lo = _mm512_permutexvar_ps(v, iota16());
    *hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
}
INLINE void k4f_q5_k(const uint8_t *b, int c, int t, __m512 *lo, __m512 *hi) {
    const __m512i v = bytes16(b + 48 + 32 * c + 16 * t), h = bytes16(b + 16 + 16 * t);
    const __m512i s = _mm512_set1_epi32(16);
    const __mmask16 ml = _mm512_test_epi32_mask(h, _mm512_set1_epi32(1 << (2 * c)));
    const __mmask16 mh = _mm512_test_epi32_mask(h, _mm512_set1_epi32(2 << (2 * c)));
    const __m512i il = _mm512_and_si512(v, _mm512_set1_epi32(15)), ih = _mm512_srli_epi32(v, 4);
    *lo = _mm512_cvtepi32_ps(_mm512_mask_or_epi32(il, ml, il, s));
    *hi = _mm512_cvtepi32_ps(_mm512_mask_or_epi32(ih, mh, ih, s));
}

#define DEFK4F(T, BB)                                                                         \
    INLINE void rowsf_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                          int64_t ldx, const int M, const float *xs, float *y, int64_t ldy) { \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m512 acc[ATTN__QMV_MAX][2];                                                     \
            for (int i_ = 0; i_ < M; i_++) acc[i_][0] = acc[i_][1] = _mm512_setzero_ps();     \
            for (int64_t k = 0; k < nb; k++, b += (BB)) {                                     \
                for (int p_ = 0; p_ < (BB); p_ += 64)                                         \
                    _mm_prefetch((const char *)b + PF_DIST + p_, _MM_HINT_T0);                \
                __m256 ds, dm;                                                                \
                attn__k4_scales8(b, &ds, &dm);                                                \
                _Alignas(32) float sd[8];                                                     \
                _mm256_store_ps(sd, ds);                                                      \
                for (int i_ = 0; i_ < M; i_++)                                                \
                    acc[i_][0] = _mm512_fnmadd_ps(                                            \
                        _mm512_zextps256_ps512(dm),                                           \
                        _mm512_zextps256_ps512(_mm256_loadu_ps(xs + i_ * ATTN__XS_MAX * 8 + 8 * k)), \
                        acc[i_][0]);                                                          \
                _Pragma("GCC unroll 4")                                                       \
                for (int c = 0; c < 4; c++) {                                                 \
                    const float *xc = x + 256 * k + 64 * c;                                   \
                    __m512 gl[ATTN__QMV_MAX], gh[ATTN__QMV_MAX], lo, hi;                      \
                    k4f_##T(b, c, 0, &lo, &hi);                                               \
                    for (int i_ = 0; i_ < M; i_++) {                                          \
                        gl[i_] = _mm512_mul_ps(lo, _mm512_loadu_ps(xc + i_ * ldx));           \
                        gh[i_] = _mm512_mul_ps(hi, _mm512_loadu_ps(xc + i_ * ldx + 32));      \
                    }                                                                         \
                    k4f_##T(b, c, 1, &lo, &hi);                                               \
                    for (int i_ = 0; i_ < M; i_++) {                                          \
                        gl[i_] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xc + i_ * ldx + 16), gl[i_]); \
                        gh[i_] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xc + i_ * ldx + 48), gh[i_]); \
                    }                                                                         \
                    const __m512 sl = _mm512_set1_ps(sd[2 * c]), sh = _mm512_set1_ps(sd[2 * c + 1]); \
                    for (int i_ = 0; i_ < M; i_++) {                                          \
                        acc[i_][0] = _mm512_fmadd_ps(sl, gl[i_], acc[i_][0]);                 \
                        acc[i_][1] = _mm512_fmadd_ps(sh, gh[i_], acc[i_][1]);                 \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
            for (int i_ = 0; i_ < M; i_++) y[i_ * ldy + r] = hsum16(_mm512_add_ps(acc[i_][0], acc[i_][1])); \
        }                                                                                     \
    }
DEFK4F(q4_k, 144)
DEFK4F(q5_k, 176)
ATTN__DEF_MVF(q4_k, 8, 1)
ATTN__DEF_MVF(q5_k, 8, 1)

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
#define DEFF(T, ES)                                                                               \
    INLINE void rows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t K, const float *x, \
                         int64_t ldx, const int M, float *y, int64_t ldy) {                  \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m512 acc[ATTN__QMV_MAX][4];                                                     \
            ZERO_M(M);                                                                        \
            int64_t k = 0;                                                                    \
            for (; k + 64 <= K; k += 64) {                                                    \
                for (int p_ = 0; p_ < 64 * (ES); p_ += 64)                                    \
                    _mm_prefetch((const char *)b + PF_DIST + (ES) * k + p_, _MM_HINT_T0);     \
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
DEFF(f32, 4)
DEFF(f16, 2)
DEFF(bf16, 2)

/* ---- wide: up to ATTN__QMV_WIDE vectors (mvw) ------------------------------------------------
 * Each weight row is dequantized once, with dq (the values rows_T computes in registers), into
 * a scratch row; then each group of up to 4 vectors runs rows_T's operations on it: the four
 * accumulators take the 16-element groups of each 64-element step in turn, a last 32 elements
 * go to accumulators 0 and 1, the sum as STORE_M.  So each vector gets mv's bits, while the
 * dequantization is shared by 8 vectors instead of 4.  Rows longer than WIDE_K: mv on groups
 * of 4. */
#define WIDE_K 8192

INLINE void wide_group(const float *wd, int64_t K, const float *x, int64_t ldx, const int M,
                       float *y, int64_t ldy, int64_t r) {
    __m512 acc[ATTN__QMV_MAX][4];
    ZERO_M(M);
    int64_t k = 0;
    for (; k + 64 <= K; k += 64) {
        const __m512 w0 = _mm512_load_ps(wd + k), w1 = _mm512_load_ps(wd + k + 16);
        const __m512 w2 = _mm512_load_ps(wd + k + 32), w3 = _mm512_load_ps(wd + k + 48);
        FMA_M(M, 0, w0, k);
        FMA_M(M, 1, w1, k + 16);
        FMA_M(M, 2, w2, k + 32);
        FMA_M(M, 3, w3, k + 48);
    }
    if (k < K) { /* the last odd block of a 32-element type */
        const __m512 w0 = _mm512_load_ps(wd + k), w1 = _mm512_load_ps(wd + k + 16);
        FMA_M(M, 0, w0, k);
        FMA_M(M, 1, w1, k + 16);
    }
    STORE_M(M);
}

/* the m vectors through mv_T, ATTN__QMV_MAX at a time (the wide kernels' fallback) */
#define MV_GROUPS(T)                                                                          \
    for (int64_t i0 = 0; i0 < m; i0 += ATTN__QMV_MAX)                                         \
    mv_##T(w, rb, rows, nb, x + i0 * ldx, ldx, m - i0 < ATTN__QMV_MAX ? m - i0 : ATTN__QMV_MAX, \
           y + i0 * ldy, ldy)

#define DEFW(T, BE)                                                                           \
    static void mvw_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                        int64_t ldx, int64_t m, float *y, int64_t ldy) {                     \
        const int64_t K = nb * (BE);                                                          \
        if (K > WIDE_K || m <= ATTN__QMV_MAX) {                                               \
            MV_GROUPS(T);                                                                     \
            return;                                                                           \
        }                                                                                     \
        _Alignas(64) float wd[WIDE_K];                                                        \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            for (size_t p_ = 0; p_ < rb; p_ += 64)                                            \
                _mm_prefetch((const char *)b + PF_DIST + p_, _MM_HINT_T0);                    \
            dq_##T(b, nb, wd);                                                                \
            for (int64_t i0 = 0; i0 < m; i0 += ATTN__QMV_MAX) {                               \
                const float *xi = x + i0 * ldx;                                               \
                float *yi = y + i0 * ldy;                                                     \
                switch (m - i0) {                                                             \
                case 1: wide_group(wd, K, xi, ldx, 1, yi, ldy, r); break;                     \
                case 2: wide_group(wd, K, xi, ldx, 2, yi, ldy, r); break;                     \
                case 3: wide_group(wd, K, xi, ldx, 3, yi, ldy, r); break;                     \
                default: wide_group(wd, K, xi, ldx, 4, yi, ldy, r); break;                    \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }
/* The 32-element types decode in registers for 5 to 8 vectors at once, each block once: the
 * even blocks first (accumulators 0 and 1 of every vector), then the odd ones (2 and 3), each
 * accumulator summing its blocks in rows_T's order, so the bits are mv's; (a0 + a1) of the
 * even pass waits on the stack.  16 accumulators instead of 32, no scratch row.  The row's
 * scales are converted first (scales16), so a block's d and m are broadcasts from memory (load
 * ports): the FMAs share ports 0 and 5 with the decoding alone.  Rows longer than WIDE_K: mv on
 * groups of 4. */
#define DEFW32(T, BB)                                                                         \
    INLINE void wpass_##T(const uint8_t *b, int64_t j0, int64_t nb, const float *sd,          \
                          const float *sm, const float *x, int64_t ldx, const int M,          \
                          __m512 *u) {                                                        \
        __m512 a[ATTN__QMV_WIDE][2];                                                          \
        for (int i_ = 0; i_ < M; i_++) a[i_][0] = a[i_][1] = _mm512_setzero_ps();            \
        for (int64_t j = j0; j < nb; j += 2) {                                                \
            const uint8_t *bj = b + (size_t)j * (BB);                                         \
            __m512 w0, w1;                                                                    \
            _mm_prefetch((const char *)bj + PF_DIST, _MM_HINT_T0);                            \
            dec_##T(bj, sd[j], sm[j], &w0, &w1);                                              \
            for (int i_ = 0; i_ < M; i_++) {                                                  \
                a[i_][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i_ * ldx + 32 * j), a[i_][0]); \
                a[i_][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i_ * ldx + 32 * j + 16),   \
                                           a[i_][1]);                                         \
            }                                                                                 \
        }                                                                                     \
        for (int i_ = 0; i_ < M; i_++) u[i_] = _mm512_add_ps(a[i_][0], a[i_][1]);             \
    }                                                                                         \
    INLINE void wrows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,              \
                          const float *x, int64_t ldx, const int M, float *y, int64_t ldy) {  \
        _Alignas(64) float sd[WIDE_K / 32], sm[WIDE_K / 32];                                  \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            for (int64_t k0 = 0; k0 < nb; k0 += 16)                                           \
                scales16(b + (size_t)k0 * (BB), (BB), nb - k0 < 16 ? nb - k0 : 16, sd + k0,   \
                         sm + k0);                                                            \
            __m512 ue[ATTN__QMV_WIDE], uo[ATTN__QMV_WIDE];                                    \
            float s_[ATTN__QMV_WIDE];                                                         \
            wpass_##T(b, 0, nb, sd, sm, x, ldx, M, ue);                                       \
            wpass_##T(b, 1, nb, sd, sm, x, ldx, M, uo);                                       \
            for (int i_ = 0; i_ < M; i_++) ue[i_] = _mm512_add_ps(ue[i_], uo[i_]);            \
            hsum8x(ue, M, s_);                                                                \
            for (int i_ = 0; i_ < M; i_++) y[i_ * ldy + r] = s_[i_];                          \
        }                                                                                     \
    }                                                                                         \
    static void mvw_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                        int64_t ldx, int64_t m, float *y, int64_t ldy) {                     \
        if (nb <= WIDE_K / 32) switch (m) {                                                   \
            case 5: wrows_##T(w, rb, rows, nb, x, ldx, 5, y, ldy); return;                    \
            case 6: wrows_##T(w, rb, rows, nb, x, ldx, 6, y, ldy); return;                    \
            case 7: wrows_##T(w, rb, rows, nb, x, ldx, 7, y, ldy); return;                    \
            case 8: wrows_##T(w, rb, rows, nb, x, ldx, 8, y, ldy); return;                    \
            default: break;                                                                   \
            }                                                                                 \
        MV_GROUPS(T);                                                                         \
    }
DEFW32(q4_0, 18)
DEFW32(q4_1, 20)
DEFW32(q5_0, 22)
DEFW32(q5_1, 24)
DEFW32(q8_0, 34)
DEFW(q2_k, 256)
DEFW(q3_k, 256)
DEFW(q6_k, 256)
DEFW32(iq4_nl, 18)
DEFW(iq4_xs, 256)

/* The table, with the name and the Q6_K matrix-vector entries as arguments: the AVX-512 set,
 * and the same on AMD Zen 4 with the 256-bit Q6_K kernel (attn__quant_kernels_avx512_zen4) */
#define TABLE_INIT(NAME, MV_Q6K, MVW_Q6K)                                                     \
    {NAME,                                                                                    \
     {[ATTN_Q_F16] = dq_f16, [ATTN_Q_BF16] = dq_bf16, [ATTN_Q_Q4_0] = dq_q4_0,                 \
      [ATTN_Q_Q4_1] = dq_q4_1, [ATTN_Q_Q5_0] = dq_q5_0, [ATTN_Q_Q5_1] = dq_q5_1,               \
      [ATTN_Q_Q8_0] = dq_q8_0, [ATTN_Q_Q2_K] = dq_q2_k, [ATTN_Q_Q3_K] = dq_q3_k,               \
      [ATTN_Q_Q4_K] = dq_q4_k, [ATTN_Q_Q5_K] = dq_q5_k, [ATTN_Q_Q6_K] = dq_q6_k,               \
      [ATTN_Q_IQ4_NL] = dq_iq4_nl, [ATTN_Q_IQ4_XS] = dq_iq4_xs},                              \
     {[ATTN_Q_F32] = mv_f32, [ATTN_Q_F16] = mv_f16, [ATTN_Q_BF16] = mv_bf16,                   \
      [ATTN_Q_Q4_0] = mv_q4_0, [ATTN_Q_Q4_1] = mv_q4_1, [ATTN_Q_Q5_0] = mv_q5_0,               \
      [ATTN_Q_Q5_1] = mv_q5_1, [ATTN_Q_Q8_0] = mv_q8_0, [ATTN_Q_Q2_K] = mv_q2_k,               \
      [ATTN_Q_Q3_K] = mv_q3_k, [ATTN_Q_Q4_K] = mvf_q4_k, [ATTN_Q_Q5_K] = mvf_q5_k,             \
      [ATTN_Q_Q6_K] = MV_Q6K, [ATTN_Q_IQ4_NL] = mv_iq4_nl, [ATTN_Q_IQ4_XS] = mv_iq4_xs},      \
     {0},                                                                                     \
     {[ATTN_Q_Q4_0] = mvw_q4_0, [ATTN_Q_Q4_1] = mvw_q4_1, [ATTN_Q_Q5_0] = mvw_q5_0,            \
      [ATTN_Q_Q5_1] = mvw_q5_1, [ATTN_Q_Q8_0] = mvw_q8_0, [ATTN_Q_Q2_K] = mvw_q2_k,            \
      [ATTN_Q_Q3_K] = mvw_q3_k, [ATTN_Q_Q6_K] = MVW_Q6K, [ATTN_Q_IQ4_NL] = mvw_iq4_nl,         \
      [ATTN_Q_IQ4_XS] = mvw_iq4_xs},                                                          \
     {0},                                                                                    \
     {0},                                                                                     \
     NULL}

static const attn__quant_kernels TABLE = TABLE_INIT("avx512", mv_q6_k, mvw_q6_k);
const attn__quant_kernels *attn__quant_kernels_avx512(void) { return &TABLE; }

/* Zen 4 executes a 512-bit operation as two 256-bit halves, and there the AVX2 set's factored
 * Q6_K kernel (groups of 16 in pairs of 8-lane vectors; x86_avx2/quant_avx2.c) beats this
 * set's 16-lane one: one thread, rows of 1024, 10.7 against 9.3 GB/s; a random Llama of width
 * 1024 in Q4_K_M (half its bytes Q6_K), generation on 2 threads 180-184 -> 193 tokens/s, the
 * AVX2 set's rate.  (No wide Q6_K kernel then: each vector must get mv's bits.) */
static const attn__quant_kernels ZEN4 = TABLE_INIT("avx512 (Q6_K: the 256-bit kernel, Zen 4)",
                                                   attn__qmv_q6k_avx2, NULL);
const attn__quant_kernels *attn__quant_kernels_avx512_zen4(void) { return &ZEN4; }

#else
const attn__quant_kernels *attn__quant_kernels_avx512(void) { return NULL; }
const attn__quant_kernels *attn__quant_kernels_avx512_zen4(void) { return NULL; }
#endif
