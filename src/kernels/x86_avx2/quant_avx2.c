/* AVX2 kernels of the quantized linear product (quant.h), float activations: as the AVX-512
 * ones (x86_avx512/quant_avx512.c), 8 lanes at a time: each group of 8 weights is dequantized
 * in registers with the reference's float operations (-ffp-contract=off: fl(fl(d q) + m)),
 * then multiplied into float accumulators with FMA; dq stores the same values.  The matrix-
 * vector products of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q5_K and Q6_K instead factor
 * each group's scale and min out of its sum ("factored K-quants" and "factored 32-element
 * types" below); the mv described next is that of Q2_K, Q3_K, IQ4_XS, F32, F16 and BF16, and
 * the fallback of the factored kernels for rows longer than 65,536 elements.
 *
 * mv: per row and activation vector, four accumulators, one per quarter of each 32 elements
 * (elements 32 j + 8 t go to accumulator t); the row's sum is ((a0 + a1) + (a2 + a3)) reduced
 * across lanes in a fixed order.  The same for every m and row range.  AVX2, FMA and F16C.
 *
 * exact_fma: where the reference computes fl(fl(s q) + m) (or - m) with s a half-precision scale
 * (11 significant bits) or a half times a 6-bit integer (Q4_K, Q5_K: 17 bits) and q an integer
 * below 32, the product s q has at most 22 significant bits, so fl(s q) = s q and one FMA
 * rounds once, as the reference's add does: the same bits, one operation fewer per 8 weights
 * (Q4_1 13.4 -> 16.0 GB/s, Q4_K 11.1 -> 12.4, Zen 4).  test_quant checks every set's values
 * bit for bit against gguf's. */
#include "../quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "kquant_avx2.h"

#define INLINE static inline __attribute__((always_inline))
#define PF_DIST 2048 /* bytes ahead of the weights to fetch */

INLINE __m128i ld64(const uint8_t *p) { return _mm_loadl_epi64((const __m128i *)(const void *)p); }
INLINE __m128i ld128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }
INLINE __m256 u8f(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
INLINE __m256 s8f(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
INLINE __m128i lo4(__m128i v) { return _mm_and_si128(v, _mm_set1_epi8(15)); }
INLINE __m128i hi4(__m128i v) { return _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15)); }

/* ---- per-block state and groups of 8 values --------------------------------------------------
 * prep: the block's scales; get(b, st, t): elements 8 t .. 8 t + 7 of the block as floats,
 * exactly as the reference computes them. */
typedef struct bst {
    float d, m;
    __m256i q;        /* 32-element types: the 32 quants as bytes, element e in byte e */
    float ds[16], dm[16];
} bst;

/* the 16 bytes at p as nibbles: the low ones (elements 0-15) in the low 128-bit lane, the high
 * ones (16-31) in the high lane: one broadcast load, a shift of the high lane's dwords by 4
 * (each byte's low nibble is then its high one) and a mask */
INLINE __m256i nibbles32(const uint8_t *p) {
    const __m256i v = _mm256_broadcastsi128_si256(ld128(p));
    return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)),
                            _mm256_set1_epi8(15));
}
/* bit e of the 32 at p as 0xff / 0 in byte e: the dword broadcast, byte e / 8 spread over
 * bytes 8 (e / 8) .., each tested against its bit */
INLINE __m256i bits32(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
    const __m256i spread = _mm256_set_epi8(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
                                           1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
}

INLINE void prep_q4_0(const uint8_t *b, bst *s) {
    s->d = attn__h2f(b);
    s->q = _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
}
INLINE void prep_q4_1(const uint8_t *b, bst *s) {
    s->d = attn__h2f(b), s->m = attn__h2f(b + 2);
    s->q = nibbles32(b + 4);
}
/* 5-bit: bit e of qh is bit 4 of element e; Q5_0 subtracts 16: the nibble, less 16 where the
 * bit is clear */
INLINE void prep_q5_0(const uint8_t *b, bst *s) {
    s->d = attn__h2f(b);
    s->q = _mm256_sub_epi8(nibbles32(b + 6), _mm256_andnot_si256(bits32(b + 2), _mm256_set1_epi8(16)));
}
INLINE void prep_q5_1(const uint8_t *b, bst *s) {
    s->d = attn__h2f(b), s->m = attn__h2f(b + 2);
    s->q = _mm256_or_si256(nibbles32(b + 8), _mm256_and_si256(bits32(b + 4), _mm256_set1_epi8(16)));
}
INLINE void prep_q8_0(const uint8_t *b, bst *s) { s->d = attn__h2f(b); } /* get reads the quants */

/* IQ4: nibbles through the 16-entry int8 table of levels (PSHUFB, the table in both lanes) */
INLINE void prep_iq4_nl(const uint8_t *b, bst *s) {
    s->d = attn__h2f(b);
    s->q = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(ld128((const uint8_t *)attn__iq4_values)),
                               nibbles32(b + 2));
}
INLINE __m128i iq4_lut(__m128i nibbles) {
    return _mm_shuffle_epi8(ld128((const uint8_t *)attn__iq4_values), nibbles);
}

/* the 8 bytes of elements 8 t .. of the 32 in v (t & 3 picks them) */
INLINE __m128i part8(__m256i v, int t) {
    const __m128i h = (t & 2) ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
    return (t & 1) ? _mm_srli_si128(h, 8) : h;
}
INLINE __m128i part(const bst *s, int t) { return part8(s->q, t); } /* elements 8 t .. */
INLINE __m256 get_q4_0(const uint8_t *b, const bst *s, int t) {
    (void)b;
    return _mm256_mul_ps(_mm256_set1_ps(s->d), s8f(part(s, t)));
}
INLINE __m256 get_q4_1(const uint8_t *b, const bst *s, int t) {
    (void)b;
    return _mm256_fmadd_ps(_mm256_set1_ps(s->d), u8f(part(s, t)), _mm256_set1_ps(s->m)); /* exact_fma: the header */
}
#define get_q5_0 get_q4_0
#define get_iq4_nl get_q4_0
#define get_q5_1 get_q4_1
INLINE __m256 get_q8_0(const uint8_t *b, const bst *s, int t) {
    return _mm256_mul_ps(s8f(ld64(b + 2 + 8 * t)), _mm256_set1_ps(s->d));
}

/* K types: t = 0 .. 31 over the superblock */
INLINE void k4_scales(const uint8_t *b, bst *st) { /* 8 lanes at once (kquant_avx2.h) */
    __m256 ds, dm;
    attn__k4_scales8(b, &ds, &dm);
    _mm256_storeu_ps(st->ds, ds);
    _mm256_storeu_ps(st->dm, dm);
}
#define prep_q4_k k4_scales
#define prep_q5_k k4_scales
INLINE void prep_q6_k(const uint8_t *b, bst *st) {
    const __m256 d = _mm256_set1_ps(attn__h2f(b + 208));
    _mm256_storeu_ps(st->ds, _mm256_mul_ps(d, s8f(ld64(b + 192))));
    _mm256_storeu_ps(st->ds + 8, _mm256_mul_ps(d, s8f(ld64(b + 200))));
}

/* Q2_K: per group g of 16, dl = d (sc_g & 15) and ml = dmin (sc_g >> 4); t = 0 .. 31 in
 * group t / 2: 2-bit field (t >> 2) & 3 of bytes 8 (t & 3) .. of the 32 at 16 + 32 (t >> 4),
 * fl(fl(dl q) - ml) */
INLINE void prep_q2_k(const uint8_t *b, bst *st) {
    const __m256 d = _mm256_set1_ps(attn__h2f(b + 80)), dmin = _mm256_set1_ps(attn__h2f(b + 82));
    for (int h = 0; h < 2; h++) {
        const __m256i sc = _mm256_cvtepu8_epi32(ld64(b + 8 * h));
        _mm256_storeu_ps(st->ds + 8 * h,
                         _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(sc, _mm256_set1_epi32(15)))));
        _mm256_storeu_ps(st->dm + 8 * h, _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(sc, 4))));
    }
}
INLINE __m128i bits2(const uint8_t *qs, int t) { /* the 2-bit values of elements 8 t .. */
    const __m128i q = ld64(qs + 32 * (t >> 4) + 8 * (t & 3));
    return _mm_and_si128(_mm_srl_epi16(q, _mm_cvtsi32_si128(2 * ((t >> 2) & 3))), _mm_set1_epi8(3));
}
INLINE __m256 get_q2_k(const uint8_t *b, const bst *st, int t) {
    return _mm256_fmsub_ps(_mm256_set1_ps(st->ds[t >> 1]), u8f(bits2(b + 16, t)),
                           _mm256_set1_ps(st->dm[t >> 1])); /* exact_fma: the header */
}
/* Q3_K: dl = d (sc - 32) per group of 16 (the 6-bit scales: low 4 bits from byte g & 7,
 * shift 4 (g >> 3), high 2 from byte 8 + (g & 3), shift 2 (g >> 2)); the value
 * dl (ql - 4 (1 - h)), ql as Q2_K's (qs at 32), h bit t >> 2 of hmask bytes 8 (t & 3) .. */
INLINE void prep_q3_k(const uint8_t *b, bst *st) { /* d (sc - 32), 8 groups at a time */
    const __m256 d = _mm256_set1_ps(attn__h2f(b + 108));
    __m256i sc[2];
    attn__q3k_scales16(b, sc);
    for (int h = 0; h < 2; h++) _mm256_storeu_ps(st->ds + 8 * h, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc[h])));
}
INLINE __m256 get_q3_k(const uint8_t *b, const bst *st, int t) {
    const __m128i h = _mm_and_si128(_mm_srl_epi16(ld64(b + 8 * (t & 3)), _mm_cvtsi32_si128(t >> 2)),
                                    _mm_set1_epi8(1));
    const __m128i q = _mm_sub_epi8(_mm_or_si128(bits2(b + 32, t), _mm_slli_epi16(h, 2)), _mm_set1_epi8(4));
    return _mm256_mul_ps(_mm256_set1_ps(st->ds[t >> 1]), s8f(q));
}

/* IQ4_XS: t = 0 .. 31, group s = t / 4 of 32: its 16 bytes, low nibbles then high */
INLINE void prep_iq4_xs(const uint8_t *b, bst *st) {
    const float d = attn__h2f(b);
    for (int s = 0; s < 8; s++) st->ds[s] = d * (float)attn__iq4xs_scale(b, s);
}
INLINE __m256 get_iq4_xs(const uint8_t *b, const bst *st, int t) {
    const int s = t >> 2;
    const __m128i q = ld64(b + 8 + 16 * s + 8 * (t & 1));
    return _mm256_mul_ps(_mm256_set1_ps(st->ds[s]), s8f(iq4_lut((t & 2) ? hi4(q) : lo4(q))));
}

INLINE __m256 get_q4_k(const uint8_t *b, const bst *st, int t) {
    const int s = t >> 2; /* sub-block of 32 */
    const __m128i q = ld64(b + 16 + (s >> 1) * 32 + 8 * (t & 3));
    const __m128i v = (s & 1) ? hi4(q) : lo4(q);
    return _mm256_fmsub_ps(_mm256_set1_ps(st->ds[s]), u8f(v), _mm256_set1_ps(st->dm[s])); /* exact_fma: the header */
}
INLINE __m256 get_q5_k(const uint8_t *b, const bst *st, int t) {
    const int s = t >> 2;
    const __m128i q = ld64(b + 48 + (s >> 1) * 32 + 8 * (t & 3)), h = ld64(b + 16 + 8 * (t & 3));
    __m128i v = (s & 1) ? hi4(q) : lo4(q);
    const __m128i hb = _mm_and_si128(_mm_srl_epi16(h, _mm_cvtsi32_si128(s)), _mm_set1_epi8(1));
    v = _mm_or_si128(v, _mm_slli_epi16(hb, 4));
    return _mm256_fmsub_ps(_mm256_set1_ps(st->ds[s]), u8f(v), _mm256_set1_ps(st->dm[s])); /* exact_fma: the header */
}
/* Q6_K: the 32 quants of elements 32 z .. at a time (kquant_avx2.h; the unrolled rows compute
 * each z's vector once), 8 taken from it per get */
INLINE __m256 get_q6_k(const uint8_t *b, const bst *st, int t) {
    return _mm256_mul_ps(_mm256_set1_ps(st->ds[t >> 1]), s8f(part8(attn__q6k_bytes32(b, t >> 2), t)));
}

/* ---- rows ---------------------------------------------------------------------------------- */
#define FMA_M(M, s, w, off)                                                                   \
    do {                                                                                      \
        for (int i_ = 0; i_ < (M); i_++)                                                      \
            acc[i_][s] = _mm256_fmadd_ps((w), _mm256_loadu_ps(x + i_ * ldx + (off)), acc[i_][s]); \
    } while (0)


#define STORE_M(M)                                                                            \
    for (int i_ = 0; i_ < (M); i_++)                                                          \
    y[i_ * ldy + r] = attn__hsum8(                                                                  \
        _mm256_add_ps(_mm256_add_ps(acc[i_][0], acc[i_][1]), _mm256_add_ps(acc[i_][2], acc[i_][3])))

#define DEFQ(T, BE, BB)                                                                       \
    INLINE void rows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                         int64_t ldx, const int M, float *y, int64_t ldy) {                  \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m256 acc[ATTN__QMV_MAX][4];                                                     \
            for (int i_ = 0; i_ < M; i_++)                                                    \
                for (int s_ = 0; s_ < 4; s_++) acc[i_][s_] = _mm256_setzero_ps();             \
            for (int64_t k = 0; k < nb; k++, b += (BB)) {                                     \
                for (int p_ = 0; p_ < (BB); p_ += 64)                                         \
                    _mm_prefetch((const char *)b + PF_DIST + p_, _MM_HINT_T0);                \
                bst st;                                                                       \
                prep_##T(b, &st);                                                             \
                _Pragma("GCC unroll 8")                                                       \
                for (int t = 0; t < (BE) / 8; t += 4) {                                       \
                    const int64_t o = (BE) * k + 8 * t;                                       \
                    const __m256 w0 = get_##T(b, &st, t), w1 = get_##T(b, &st, t + 1);        \
                    const __m256 w2 = get_##T(b, &st, t + 2), w3 = get_##T(b, &st, t + 3);    \
                    FMA_M(M, 0, w0, o);                                                       \
                    FMA_M(M, 1, w1, o + 8);                                                   \
                    FMA_M(M, 2, w2, o + 16);                                                  \
                    FMA_M(M, 3, w3, o + 24);                                                  \
                }                                                                             \
            }                                                                                 \
            STORE_M(M);                                                                       \
        }                                                                                     \
    }                                                                                         \
    __attribute__((unused)) /* Q6_K's: replaced by the factored kernel */                    \
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
        for (int64_t k = 0; k < nb; k++, b += (BB), y += (BE)) {                              \
            bst st;                                                                           \
            prep_##T(b, &st);                                                                 \
            _Pragma("GCC unroll 32")                                                          \
            for (int t = 0; t < (BE) / 8; t++) _mm256_storeu_ps(y + 8 * t, get_##T(b, &st, t)); \
        }                                                                                     \
    }

DEFQ(q4_0, 32, 18)
DEFQ(q4_1, 32, 20)
DEFQ(q5_0, 32, 22)
DEFQ(q5_1, 32, 24)
DEFQ(q8_0, 32, 34)
DEFQ(q2_k, 256, 84)
DEFQ(q3_k, 256, 110)
DEFQ(q4_k, 256, 144)
DEFQ(q5_k, 256, 176)
DEFQ(q6_k, 256, 210)
DEFQ(iq4_nl, 32, 18)
DEFQ(iq4_xs, 256, 136)

/* ---- factored K-quants: Q4_K, Q5_K, Q6_K ---------------------------------------------------
 * Q4_K, Q5_K: the weight of element e of group g (32 elements) is s_g q_e - m_g (s_g = d sc_g,
 * m_g = dmin mn_g, each one rounding as the reference's); the row's sum is computed as
 * sum_g s_g (sum_e q_e x_e) - sum_g m_g X_g, X_g = sum_e x_e computed once per call and
 * vector (attn__xsum32, kquant_avx2.h).  s_g q_e is exact (22 bits), so these are the
 * products of x with the exact weights, not rounded one by one as the dequantized ones are,
 * summed in another order: test_qlinear bounds the error by the terms' magnitudes
 * (|s q| + |m|) |x|.  Per 16 weights: one widening load, a mask and a shift, two conversions,
 * two FMAs; the dequantizing kernels above take about twice as many operations, and the
 * float products on K-quants are compute-bound on a core (Zen 4, one thread, rows of 1024:
 * Q4_K 7.2 -> 10.6 GB/s, Q5_K 5.7 -> 8.6).  Q6_K (groups of 16, no min): d sc_g times the
 * group's sum of (q_e - 32) x_e (9.5 -> 10.7 GB/s).  Rows of more than ATTN__XS_MAX
 * superblocks take the dequantizing kernels.  The same bits for any m and row range; m > 4
 * runs on groups of 4 (no wide kernel: each vector must get these bits; the same for the
 * factored 32-element types below). */
/* the quants of elements 8 t .. of groups 2 c (lo) and 2 c + 1 (hi) of superblock b */
INLINE void k4f_q4_k(const uint8_t *b, int c, int t, __m256 *lo, __m256 *hi) {
    const __m256i v = _mm256_cvtepu8_epi32(ld64(b + 16 + 32 * c + 8 * t));
    *lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    *hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
}
INLINE void k4f_q5_k(const uint8_t *b, int c, int t, __m256 *lo, __m256 *hi) {
    const __m256i v = _mm256_cvtepu8_epi32(ld64(b + 48 + 32 * c + 8 * t));
    const __m256i h = _mm256_cvtepu8_epi32(ld64(b + 16 + 8 * t)); /* bit 2 c, 2 c + 1: the fifth */
    const __m256i m16 = _mm256_set1_epi32(16);
    const __m256i hl = _mm256_and_si256(c < 2 ? _mm256_slli_epi32(h, 4 - 2 * c) : _mm256_srli_epi32(h, 2 * c - 4), m16);
    const __m256i hh = _mm256_and_si256(c < 2 ? _mm256_slli_epi32(h, 3 - 2 * c) : _mm256_srli_epi32(h, 2 * c - 3), m16);
    *lo = _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(15)), hl));
    *hi = _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_srli_epi32(v, 4), hh));
}

/* acc[i][0] takes the even groups and the mins, acc[i][1] the odd groups; the row's sum
 * attn__hsum8(acc[i][0] + acc[i][1]) */
#define DEFK4F(T, BB)                                                                         \
    INLINE void rowsf_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                          int64_t ldx, const int M, const float *xs, float *y, int64_t ldy) { \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m256 acc[ATTN__QMV_MAX][2];                                                     \
            for (int i_ = 0; i_ < M; i_++) acc[i_][0] = acc[i_][1] = _mm256_setzero_ps();     \
            for (int64_t k = 0; k < nb; k++, b += (BB)) {                                     \
                for (int p_ = 0; p_ < (BB); p_ += 64)                                         \
                    _mm_prefetch((const char *)b + PF_DIST + p_, _MM_HINT_T0);                \
                __m256 ds, dm;                                                                \
                attn__k4_scales8(b, &ds, &dm);                                                \
                _Alignas(32) float sd[8];                                                     \
                _mm256_store_ps(sd, ds);                                                      \
                for (int i_ = 0; i_ < M; i_++)                                                \
                    acc[i_][0] = _mm256_fnmadd_ps(dm, _mm256_loadu_ps(xs + i_ * ATTN__XS_MAX * 8 + 8 * k), acc[i_][0]); \
                _Pragma("GCC unroll 4")                                                       \
                for (int c = 0; c < 4; c++) {                                                 \
                    const float *xc = x + 256 * k + 64 * c;                                   \
                    __m256 gl[ATTN__QMV_MAX], gh[ATTN__QMV_MAX], lo, hi;                      \
                    k4f_##T(b, c, 0, &lo, &hi);                                               \
                    for (int i_ = 0; i_ < M; i_++) {                                          \
                        gl[i_] = _mm256_mul_ps(lo, _mm256_loadu_ps(xc + i_ * ldx));           \
                        gh[i_] = _mm256_mul_ps(hi, _mm256_loadu_ps(xc + i_ * ldx + 32));      \
                    }                                                                         \
                    _Pragma("GCC unroll 3")                                                   \
                    for (int t = 1; t < 4; t++) {                                             \
                        k4f_##T(b, c, t, &lo, &hi);                                           \
                        for (int i_ = 0; i_ < M; i_++) {                                      \
                            gl[i_] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xc + i_ * ldx + 8 * t), gl[i_]); \
                            gh[i_] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(xc + i_ * ldx + 32 + 8 * t), gh[i_]); \
                        }                                                                     \
                    }                                                                         \
                    const __m256 sl = _mm256_broadcast_ss(sd + 2 * c), sh = _mm256_broadcast_ss(sd + 2 * c + 1); \
                    for (int i_ = 0; i_ < M; i_++) {                                          \
                        acc[i_][0] = _mm256_fmadd_ps(sl, gl[i_], acc[i_][0]);                 \
                        acc[i_][1] = _mm256_fmadd_ps(sh, gh[i_], acc[i_][1]);                 \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
            for (int i_ = 0; i_ < M; i_++) y[i_ * ldy + r] = attn__hsum8(_mm256_add_ps(acc[i_][0], acc[i_][1])); \
        }                                                                                     \
    }
DEFK4F(q4_k, 144)
DEFK4F(q5_k, 176)
ATTN__DEF_MVF(q4_k, 8, 1)
ATTN__DEF_MVF(q5_k, 8, 1)

/* Q6_K: groups of 16, weight ds_g (q_e - 32) with no min: ds_g times the group's sum of
 * (q_e - 32) x_e; acc[i][g & 1] */
INLINE void rowsf_q6_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x,
                       int64_t ldx, const int M, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 acc[ATTN__QMV_MAX][2];
        for (int i_ = 0; i_ < M; i_++) acc[i_][0] = acc[i_][1] = _mm256_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += 210) {
            for (int p_ = 0; p_ < 210; p_ += 64) _mm_prefetch((const char *)b + PF_DIST + p_, _MM_HINT_T0);
            bst st;
            prep_q6_k(b, &st);
            _Pragma("GCC unroll 8")
            for (int z = 0; z < 8; z++) {
                const __m256i q = attn__q6k_bytes32(b, z);
                const float *xz = x + 256 * k + 32 * z;
                const __m256 q0 = s8f(part8(q, 0)), q1 = s8f(part8(q, 1));
                const __m256 q2 = s8f(part8(q, 2)), q3 = s8f(part8(q, 3));
                const __m256 s0 = _mm256_broadcast_ss(st.ds + 2 * z), s1 = _mm256_broadcast_ss(st.ds + 2 * z + 1);
                for (int i_ = 0; i_ < M; i_++) {
                    const float *xi = xz + i_ * ldx;
                    const __m256 g0 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xi + 8), _mm256_mul_ps(q0, _mm256_loadu_ps(xi)));
                    const __m256 g1 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xi + 24), _mm256_mul_ps(q2, _mm256_loadu_ps(xi + 16)));
                    acc[i_][0] = _mm256_fmadd_ps(s0, g0, acc[i_][0]);
                    acc[i_][1] = _mm256_fmadd_ps(s1, g1, acc[i_][1]);
                }
            }
        }
        for (int i_ = 0; i_ < M; i_++) y[i_ * ldy + r] = attn__hsum8(_mm256_add_ps(acc[i_][0], acc[i_][1]));
    }
}
/* exported: the AVX-512 set takes it on Zen 4 (quant.h, attn__quant_kernels_avx512_zen4) */
void attn__qmv_q6k_avx2(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x,
                        int64_t ldx, int64_t m, float *y, int64_t ldy) {
    switch (m) {
    case 1: rowsf_q6_k(w, rb, rows, nb, x, ldx, 1, y, ldy); break;
    case 2: rowsf_q6_k(w, rb, rows, nb, x, ldx, 2, y, ldy); break;
    case 3: rowsf_q6_k(w, rb, rows, nb, x, ldx, 3, y, ldy); break;
    default: rowsf_q6_k(w, rb, rows, nb, x, ldx, 4, y, ldy); break;
    }
}

/* ---- factored 32-element types ---------------------------------------------------------------
 * Block j's weights are s_j q_e - m_j (Q4_0: s = d, q the nibble, m = 8 d; Q4_1, Q5_1: m = the
 * block's negated min; Q5_0, IQ4_NL, Q8_0: q signed, no min), summed as
 * sum_j s_j (sum_e q_e x_e) - sum_j m_j X_j (X_j = sum of x over the block, attn__xsum32):
 * the quants of 8 elements converted and multiplied into the block's vector (q32f_T: element
 * 8 t + l in lane l of q[t]), the block's vector scaled into acc[i][j & 1], the mins of 8 blocks
 * at a time into acc[i][0] (their scales converted 8 at a time into sd, sm).  As the factored
 * K-quants: the exact weights, another order of sums; test_qlinear's bound.  Q4_0 and Q4_1
 * widen 8 bytes of nibbles from memory for elements 8 t .. and 16 + 8 t .. (a mask and a
 * shift), the others take their 32 quants as bytes (prep_T's way).  Zen 4, one thread, rows of
 * 1024 (in cache): Q4_0 7.6 -> 10.0 GB/s, Q4_1 8.0 -> 10.3, Q5_0 7.8 -> 8.0, Q5_1 8.0 -> 8.1,
 * Q8_0 19.5 -> 21.5, IQ4_NL 7.4 -> 7.7; two threads, Q4_1 rows of 576: 15.1 -> 18.9, Q8_0:
 * 35.5 -> 37.9.  The scales of a chunk of 8 blocks: attn__halves8 (kquant_avx2.h). */
INLINE void q32f_q4_0(const uint8_t *b, __m256 q[4]) { /* elements 0-7 / 16-23 from bytes 0-7 */
    const __m256i v0 = _mm256_cvtepu8_epi32(ld64(b + 2)), v1 = _mm256_cvtepu8_epi32(ld64(b + 10));
    const __m256i m15 = _mm256_set1_epi32(15);
    q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(v0, m15));
    q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(v1, m15));
    q[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4));
    q[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4));
}
INLINE void q32f_q4_1(const uint8_t *b, __m256 q[4]) { q32f_q4_0(b + 2, q); }
INLINE void q32f_q5_0(const uint8_t *b, __m256 q[4]) {
    const __m256i v = _mm256_sub_epi8(nibbles32(b + 6), _mm256_andnot_si256(bits32(b + 2), _mm256_set1_epi8(16)));
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    q[0] = s8f(lo), q[1] = s8f(_mm_srli_si128(lo, 8)), q[2] = s8f(hi), q[3] = s8f(_mm_srli_si128(hi, 8));
}
INLINE void q32f_q5_1(const uint8_t *b, __m256 q[4]) {
    const __m256i v = _mm256_or_si256(nibbles32(b + 8), _mm256_and_si256(bits32(b + 4), _mm256_set1_epi8(16)));
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    q[0] = u8f(lo), q[1] = u8f(_mm_srli_si128(lo, 8)), q[2] = u8f(hi), q[3] = u8f(_mm_srli_si128(hi, 8));
}
INLINE void q32f_iq4_nl(const uint8_t *b, __m256 q[4]) {
    bst s;
    prep_iq4_nl(b, &s);
    for (int t = 0; t < 4; t++) q[t] = s8f(part(&s, t));
}
INLINE void q32f_q8_0(const uint8_t *b, __m256 q[4]) {
    for (int t = 0; t < 4; t++) q[t] = s8f(ld64(b + 2 + 8 * t));
}
/* the mins m_j of 8 blocks from their scales (MIN32 0: none, 1: 8 d, 2: - the block's m) */
#define MIN32_q4_0 1
#define MIN32_q4_1 2
#define MIN32_q5_0 0
#define MIN32_q5_1 2
#define MIN32_iq4_nl 0
#define MIN32_q8_0 0

/* blk32f: block b (scale s) times the M vectors at x into acc[i] */
#define DEF32F(T, BB)                                                                         \
    INLINE void blk32f_##T(const uint8_t *b, float s, const float *x, int64_t ldx, const int M, \
                           __m256 *acc) {                                                     \
        _mm_prefetch((const char *)b + PF_DIST, _MM_HINT_T0);                                 \
        __m256 q[4];                                                                          \
        q32f_##T(b, q);                                                                       \
        const __m256 sj = _mm256_set1_ps(s);                                                  \
        for (int i_ = 0; i_ < M; i_++) {                                                      \
            const float *xi = x + i_ * ldx;                                                   \
            __m256 g = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xi + 8), _mm256_mul_ps(q[0], _mm256_loadu_ps(xi))); \
            g = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xi + 16), g);                           \
            g = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xi + 24), g);                           \
            acc[i_] = _mm256_fmadd_ps(sj, g, acc[i_]);                                       \
        }                                                                                     \
    }                                                                                         \
    INLINE void rowsf_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                          int64_t ldx, const int M, const float *xs, float *y, int64_t ldy) { \
        _Alignas(32) float sd[8];                                                             \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m256 acc0[ATTN__QMV_MAX], acc1[ATTN__QMV_MAX];                                  \
            for (int i_ = 0; i_ < M; i_++) acc0[i_] = acc1[i_] = _mm256_setzero_ps();         \
            for (int64_t k0 = 0; k0 < nb; k0 += 8) {                                          \
                const int n = nb - k0 < 8 ? (int)(nb - k0) : 8;                               \
                const __m256 dv = attn__halves8n(b, (BB), 0, n);                                     \
                _mm256_store_ps(sd, dv);                                                      \
                if (MIN32_##T) {                                                              \
                    const __m256 mv = MIN32_##T == 1                                          \
                        ? _mm256_mul_ps(_mm256_set1_ps(8.0f), dv)                             \
                        : _mm256_sub_ps(_mm256_setzero_ps(), attn__halves8n(b, (BB), 2, n));         \
                    for (int i_ = 0; i_ < M; i_++)                                            \
                        acc0[i_] = _mm256_fnmadd_ps(mv, _mm256_loadu_ps(xs + i_ * ATTN__XS_MAX * 8 + k0), acc0[i_]); \
                }                                                                             \
                const float *x0 = x + 32 * k0;                                                \
                int j = 0;                                                                    \
                _Pragma("GCC unroll 4")                                                       \
                for (; j + 2 <= n; j += 2) {                                                  \
                    blk32f_##T(b + (BB) * j, sd[j], x0 + 32 * j, ldx, M, acc0);               \
                    blk32f_##T(b + (BB) * (j + 1), sd[j + 1], x0 + 32 * (j + 1), ldx, M, acc1); \
                }                                                                             \
                if (j < n) blk32f_##T(b + (BB) * j, sd[j], x0 + 32 * j, ldx, M, acc0);        \
                b += (BB) * n;                                                                \
            }                                                                                 \
            for (int i_ = 0; i_ < M; i_++) y[i_ * ldy + r] = attn__hsum8(_mm256_add_ps(acc0[i_], acc1[i_])); \
        }                                                                                     \
    }
DEF32F(q4_0, 18)
DEF32F(q4_1, 20)
DEF32F(q5_0, 22)
DEF32F(q5_1, 24)
DEF32F(iq4_nl, 18)
DEF32F(q8_0, 34)
ATTN__DEF_MVF(q4_0, 1, MIN32_q4_0)
ATTN__DEF_MVF(q4_1, 1, MIN32_q4_1)
ATTN__DEF_MVF(q5_0, 1, MIN32_q5_0)
ATTN__DEF_MVF(q5_1, 1, MIN32_q5_1)
ATTN__DEF_MVF(iq4_nl, 1, MIN32_iq4_nl)
ATTN__DEF_MVF(q8_0, 1, MIN32_q8_0)

/* ---- wide: up to ATTN__QMV_WIDE vectors (mvw) ------------------------------------------------
 * Each weight row is dequantized once, with dq (get's values), into a scratch row in L1; then
 * the vectors run rows_T's operations on it two at a time (8 accumulators and the 4 weight
 * vectors of a 32-element step in registers: 16 would leave none for the weights), element
 * 32 j + 8 t into accumulator t, in the same order: each vector gets mv's bits, while the
 * dequantization is done once for up to 8 vectors instead of once per 4.  Rows longer than
 * WIDE_K: mv on groups of 4.  Only the types whose mv dequantizes (Q2_K, Q3_K, IQ4_XS): the
 * factored kernels' bits differ from these, and they ran 5 to 8 vectors faster in groups of 4
 * than the wide kernels did (Zen 4, M = 8: Q4_1 1.85 -> 2.67 GB/s, Q8_0 3.77 -> 4.77). */
#define WIDE_K 8192

INLINE void wide_pair(const float *wd, int64_t K, const float *x, int64_t ldx, const int M,
                      float *y, int64_t ldy, int64_t r) {
    __m256 acc[2][4];
    for (int i_ = 0; i_ < M; i_++)
        for (int s_ = 0; s_ < 4; s_++) acc[i_][s_] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += 32) {
        const __m256 w0 = _mm256_load_ps(wd + k), w1 = _mm256_load_ps(wd + k + 8);
        const __m256 w2 = _mm256_load_ps(wd + k + 16), w3 = _mm256_load_ps(wd + k + 24);
        FMA_M(M, 0, w0, k);
        FMA_M(M, 1, w1, k + 8);
        FMA_M(M, 2, w2, k + 16);
        FMA_M(M, 3, w3, k + 24);
    }
    STORE_M(M);
}

#define DEFW(T, BE, BB)                                                                       \
    static void mvw_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const float *x, \
                        int64_t ldx, int64_t m, float *y, int64_t ldy) {                     \
        const int64_t K = nb * (BE);                                                          \
        if (K > WIDE_K || m <= ATTN__QMV_MAX) {                                               \
            for (int64_t i0 = 0; i0 < m; i0 += ATTN__QMV_MAX)                                 \
                mv_##T(w, rb, rows, nb, x + i0 * ldx, ldx,                                    \
                       m - i0 < ATTN__QMV_MAX ? m - i0 : ATTN__QMV_MAX, y + i0 * ldy, ldy);   \
            return;                                                                           \
        }                                                                                     \
        _Alignas(32) float wd[WIDE_K];                                                        \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            for (size_t p_ = 0; p_ < rb; p_ += 64)                                            \
                _mm_prefetch((const char *)b + PF_DIST + p_, _MM_HINT_T0);                    \
            dq_##T(b, nb, wd);                                                                \
            for (int64_t i0 = 0; i0 < m; i0 += 2) {                                           \
                if (m - i0 >= 2) wide_pair(wd, K, x + i0 * ldx, ldx, 2, y + i0 * ldy, ldy, r); \
                else wide_pair(wd, K, x + i0 * ldx, ldx, 1, y + i0 * ldy, ldy, r);            \
            }                                                                                 \
        }                                                                                     \
    }
DEFW(q2_k, 256, 84)
DEFW(q3_k, 256, 110)
DEFW(iq4_xs, 256, 136)

/* ---- F32, F16, BF16: K arbitrary -------------------------------------------------------------- */
INLINE __m256 ld_f32(const uint8_t *b, int64_t k) { return _mm256_loadu_ps((const float *)(const void *)b + k); }
INLINE __m256 ld_f16(const uint8_t *b, int64_t k) { return _mm256_cvtph_ps(ld128(b + 2 * k)); }
INLINE __m256 ld_bf16(const uint8_t *b, int64_t k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(b + 2 * k)), 16));
}
INLINE float el_f32(const uint8_t *b, int64_t k) {
    float f;
    memcpy(&f, b + 4 * k, 4);
    return f;
}
INLINE float el_f16(const uint8_t *b, int64_t k) { return attn__h2f(b + 2 * k); }
INLINE float el_bf16(const uint8_t *b, int64_t k) {
    uint32_t u = (uint32_t)(b[2 * k] | b[2 * k + 1] << 8) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void dq_f16(const uint8_t *b, int64_t n, float *y) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(y + k, ld_f16(b, k));
    for (; k < n; k++) y[k] = el_f16(b, k);
}
static void dq_bf16(const uint8_t *b, int64_t n, float *y) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(y + k, ld_bf16(b, k));
    for (; k < n; k++) y[k] = el_bf16(b, k);
}

/* 32 elements per step into the 4 accumulators, then 8 at a time into accumulator 0, the last
 * < 8 through zero-padded vectors */
#define DEFF(T, ES)                                                                           \
    INLINE void rows_##T(const uint8_t *w, size_t rb, int64_t rows, int64_t K, const float *x, \
                         int64_t ldx, const int M, float *y, int64_t ldy) {                  \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const uint8_t *b = w + (size_t)r * rb;                                            \
            __m256 acc[ATTN__QMV_MAX][4];                                                     \
            for (int i_ = 0; i_ < M; i_++)                                                    \
                for (int s_ = 0; s_ < 4; s_++) acc[i_][s_] = _mm256_setzero_ps();             \
            int64_t k = 0;                                                                    \
            for (; k + 32 <= K; k += 32) {                                                    \
                for (int p_ = 0; p_ < 32 * (ES); p_ += 64)                                    \
                    _mm_prefetch((const char *)b + PF_DIST + (ES) * k + p_, _MM_HINT_T0);     \
                const __m256 w0 = ld_##T(b, k), w1 = ld_##T(b, k + 8);                        \
                const __m256 w2 = ld_##T(b, k + 16), w3 = ld_##T(b, k + 24);                  \
                FMA_M(M, 0, w0, k);                                                           \
                FMA_M(M, 1, w1, k + 8);                                                       \
                FMA_M(M, 2, w2, k + 16);                                                      \
                FMA_M(M, 3, w3, k + 24);                                                      \
            }                                                                                 \
            for (; k + 8 <= K; k += 8) {                                                      \
                const __m256 w0 = ld_##T(b, k);                                               \
                FMA_M(M, 0, w0, k);                                                           \
            }                                                                                 \
            if (k < K) {                                                                      \
                float t[8] = {0}, u[8];                                                       \
                for (int64_t j = k; j < K; j++) t[j - k] = el_##T(b, j);                      \
                const __m256 wv = _mm256_loadu_ps(t);                                         \
                for (int i_ = 0; i_ < M; i_++) {                                              \
                    memset(u, 0, sizeof u);                                                   \
                    memcpy(u, x + i_ * ldx + k, sizeof(float) * (size_t)(K - k));             \
                    acc[i_][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(u), acc[i_][0]);         \
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
    }
DEFF(f32, 4)
DEFF(f16, 2)
DEFF(bf16, 2)

static const attn__quant_kernels TABLE = {
    "avx2",
    {[ATTN_Q_F16] = dq_f16, [ATTN_Q_BF16] = dq_bf16, [ATTN_Q_Q4_0] = dq_q4_0,
     [ATTN_Q_Q4_1] = dq_q4_1, [ATTN_Q_Q5_0] = dq_q5_0, [ATTN_Q_Q5_1] = dq_q5_1,
     [ATTN_Q_Q8_0] = dq_q8_0, [ATTN_Q_Q2_K] = dq_q2_k, [ATTN_Q_Q3_K] = dq_q3_k,
     [ATTN_Q_Q4_K] = dq_q4_k, [ATTN_Q_Q5_K] = dq_q5_k,
     [ATTN_Q_Q6_K] = dq_q6_k, [ATTN_Q_IQ4_NL] = dq_iq4_nl, [ATTN_Q_IQ4_XS] = dq_iq4_xs},
    {[ATTN_Q_F32] = mv_f32, [ATTN_Q_F16] = mv_f16, [ATTN_Q_BF16] = mv_bf16,
     [ATTN_Q_Q4_0] = mvf_q4_0, [ATTN_Q_Q4_1] = mvf_q4_1, [ATTN_Q_Q5_0] = mvf_q5_0,
     [ATTN_Q_Q5_1] = mvf_q5_1, [ATTN_Q_Q8_0] = mvf_q8_0, [ATTN_Q_Q2_K] = mv_q2_k,
     [ATTN_Q_Q3_K] = mv_q3_k, [ATTN_Q_Q4_K] = mvf_q4_k,
     [ATTN_Q_Q5_K] = mvf_q5_k, [ATTN_Q_Q6_K] = attn__qmv_q6k_avx2, [ATTN_Q_IQ4_NL] = mvf_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv_iq4_xs},
    {0},
    {[ATTN_Q_Q2_K] = mvw_q2_k, [ATTN_Q_Q3_K] = mvw_q3_k, [ATTN_Q_IQ4_XS] = mvw_iq4_xs},
    {0},
    {0},
    NULL, /* q16x */
};

const attn__quant_kernels *attn__quant_kernels_avx2(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_avx2(void) { return NULL; }
#endif
