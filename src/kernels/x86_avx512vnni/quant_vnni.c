/* AVX512_VNNI kernels of the quantized linear product on int8 activations (quant.h, mv8):
 * VPDPBUSD multiplies 64 unsigned weight quants by 64 signed activation quants and sums each
 * group of 4 into 16 int32 lanes, exactly.  One zmm covers 64 consecutive elements: two blocks
 * of the 32-element types (Q4_0 .. Q8_0), two groups of 32 of Q4_K / Q5_K, four groups of 16
 * of Q6_K, so each group's integer sum sits in its own 4 or 8 lanes; the lanes are converted to
 * float and multiplied by their group's scale (weight scale times activation scale, rounded to
 * float as in the plain C kernel) into one float accumulator per activation vector.  Offsets
 * (Q4_0's - 8, Q5_0's - 16, Q6_K's - 32) are subtracted as integers: a second VPDPBUSD of the
 * constant with the activation quants.  Mins (Q4_1, Q5_1, Q4_K, Q5_K) multiply the float sums of
 * x in a 4-lane accumulator.  Row sum: the 16 lanes reduced in a fixed order, plus (or minus)
 * lanes 1 and 3 of the min accumulator.  Q8_0 weights are signed: |w| times x with w's sign;
 * so are IQ4_NL's and IQ4_XS's (their nibbles looked up in the 16 int8 levels by VPSHUFB; IQ4_XS
 * two groups of 32 per zmm, as Q4_K, without mins).
 * The terms are those of the plain C kernel (ref/quant_kern_ref.c), added in another order.
 * Built with AVX512F/BW/DQ/VL, AVX512_VNNI and F16C (CMakeLists.txt). */
#include "../quant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) &&                 \
    defined(__AVX512VNNI__) && defined(__F16C__)
#include "../x86_avx512/quant_avx512.h"

#define PF 2048 /* bytes ahead of the weights to fetch (docs/kernels.md) */

INLINE uint32_t u16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
INLINE uint32_t u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
/* four halves (in a 64-bit integer) as four floats */
INLINE __m128 halves4(uint64_t h) { return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h)); }

/* [16 B at p0 twice | 16 B at p1 twice] >> [0, 4, 0, 4] per 16 bytes, & 15: the 32 nibbles of
 * the block at p0 in element order, then those of p1 */
INLINE __m512i nib2(const uint8_t *p0, const uint8_t *p1) {
    const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(ld128(p0))),
                                         _mm256_broadcastsi128_si256(ld128(p1)), 1);
    return _mm512_and_si512(_mm512_srlv_epi64(t, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)),
                            _mm512_set1_epi8(15));
}

/* lanes 4 i .. 4 i + 3 of v (i need not be a constant) */
INLINE __m128 quarter(__m512 v, int i) {
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(4 * i),
                                         _mm512_set_epi32(3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, v));
}

/* lanes 0..7 <- p[0], 8..15 <- p[2] */
INLINE __m512 spread02(__m128 p) {
    return _mm512_permutexvar_ps(_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(p));
}

/* ---- the 32-element types ---------------------------------------------------------------------
 * Per pair of blocks: the weights' 64 quants (u8, or |w| for Q8_0), their 4 scale halves
 * [d0, m0, d1, m1] (m = 0 without mins) and the offset o (0, 8, 16). */
typedef struct pair {
    __m512i v;
    __mmask64 neg; /* Q8_0: negative weights */
    __m128 w4;
} pair;

enum { T40, T41, T50, T51, T80, TNL };

/* IQ4: 64 nibbles through the 16 int8 levels (VPSHUFB, the table in each 128-bit lane) */
INLINE __m512i iq4_lut(__m512i nibbles) {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(ld128((const uint8_t *)attn__iq4_values)), nibbles);
}

INLINE pair load_pair(int t, const uint8_t *b0, const uint8_t *b1, int one) {
    pair p;
    p.neg = 0;
    switch (t) {
    case T40:
        p.v = nib2(b0 + 2, b1 + 2);
        p.w4 = halves4((uint64_t)u16(b0) | (one ? 0 : (uint64_t)u16(b1) << 32));
        break;
    case T41:
        p.v = nib2(b0 + 4, b1 + 4);
        p.w4 = halves4((uint64_t)u32(b0) | (one ? 0 : (uint64_t)u32(b1) << 32));
        break;
    case T50:
    case T51: {
        const int o = t == T50 ? 6 : 8, h = t == T50 ? 2 : 4;
        p.v = nib2(b0 + o, b1 + o);
        const __mmask64 k = (__mmask64)u32(b0 + h) | (__mmask64)u32(b1 + h) << 32;
        p.v = _mm512_mask_add_epi8(p.v, k, p.v, _mm512_set1_epi8(16));
        p.w4 = t == T50 ? halves4((uint64_t)u16(b0) | (one ? 0 : (uint64_t)u16(b1) << 32))
                        : halves4((uint64_t)u32(b0) | (one ? 0 : (uint64_t)u32(b1) << 32));
        break;
    }
    case TNL: { /* signed levels: |w| and the signs, as Q8_0 */
        const __m512i w = iq4_lut(nib2(b0 + 2, b1 + 2));
        p.neg = _mm512_movepi8_mask(w);
        p.v = _mm512_abs_epi8(w);
        p.w4 = halves4((uint64_t)u16(b0) | (one ? 0 : (uint64_t)u16(b1) << 32));
        break;
    }
    default: { /* T80 */
        const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(b0 + 2)), ld256(b1 + 2), 1);
        p.neg = _mm512_movepi8_mask(w);
        p.v = _mm512_abs_epi8(w);
        p.w4 = halves4((uint64_t)u16(b0) | (one ? 0 : (uint64_t)u16(b1) << 32));
        break;
    }
    }
    return p;
}

/* acc += the pair's terms against the activation quants xq (64) and [dx0, sx0, dx1, sx1] */
INLINE void pair_terms(int t, const pair *p, __m512i xq, __m128 a4, __m512 *acc, __m128 *macc) {
    const __m512i z = _mm512_setzero_si512();
    __m512i dp;
    if (t == T80 || t == TNL)
        dp = _mm512_dpbusd_epi32(z, p->v, _mm512_mask_sub_epi8(xq, p->neg, z, xq));
    else
        dp = _mm512_dpbusd_epi32(z, p->v, xq);
    if (t == T40 || t == T50) /* - o sum(xq), exact */
        dp = _mm512_sub_epi32(dp, _mm512_dpbusd_epi32(z, _mm512_set1_epi8(t == T40 ? 8 : 16), xq));
    const __m128 prod = _mm_mul_ps(p->w4, a4); /* [d0 dx0, m0 sx0, d1 dx1, m1 sx1] */
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), spread02(prod), *acc);
    if (t == T41 || t == T51) *macc = _mm_add_ps(*macc, prod);
}

INLINE void rows32(int t, size_t bb, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                   const attn__q8act *xa, const int M, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m512 acc[ATTN__QMV_WIDE];
        __m128 macc[ATTN__QMV_WIDE];
        for (int i = 0; i < M; i++) acc[i] = _mm512_setzero_ps(), macc[i] = _mm_setzero_ps();
        int64_t k = 0;
        for (; k + 2 <= nb; k += 2, b += 2 * bb) {
            _mm_prefetch((const char *)b + PF, _MM_HINT_T0);
            const pair p = load_pair(t, b, b + bb, 0);
            for (int i = 0; i < M; i++) {
                const __m512i xq = _mm512_loadu_si512(xa->q + i * xa->ldq + 32 * k);
                const __m128 a4 = _mm_loadu_ps(xa->dsx + i * 2 * xa->ldb + 2 * k);
                pair_terms(t, &p, xq, a4, &acc[i], &macc[i]);
            }
        }
        if (k < nb) { /* the last block alone: the second half is zero */
            const pair p = load_pair(t, b, b, 1);
            for (int i = 0; i < M; i++) {
                const __m512i xq = _mm512_maskz_loadu_epi8(0xffffffffull, xa->q + i * xa->ldq + 32 * k);
                const __m128 a4 = _mm_maskz_loadu_ps(3, xa->dsx + i * 2 * xa->ldb + 2 * k);
                pair_terms(t, &p, xq, a4, &acc[i], &macc[i]);
            }
        }
        for (int i = 0; i < M; i++) {
            float v = _mm512_reduce_add_ps(acc[i]);
            if (t == T41 || t == T51) {
                float m[4];
                _mm_storeu_ps(m, macc[i]);
                v += m[1] + m[3];
            }
            y[i * ldy + r] = v;
        }
    }
}

#define DEF32(name, T, BB)                                                                    \
    static void name(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,                   \
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {               \
        switch (m) {                                                                          \
        case 1: rows32(T, BB, w, rb, rows, nb, xa, 1, y, ldy); break;                         \
        case 2: rows32(T, BB, w, rb, rows, nb, xa, 2, y, ldy); break;                         \
        case 3: rows32(T, BB, w, rb, rows, nb, xa, 3, y, ldy); break;                         \
        default: rows32(T, BB, w, rb, rows, nb, xa, 4, y, ldy); break;                        \
        }                                                                                     \
    }
DEF32(mv8_q4_0, T40, 18)
DEF32(mv8_q4_1, T41, 20)
DEF32(mv8_q5_0, T50, 22)
DEF32(mv8_q5_1, T51, 24)
DEF32(mv8_q8_0, T80, 34)
DEF32(mv8_iq4_nl, TNL, 18)

/* ---- IQ4_XS: 8 groups of 32 with a signed 6-bit scale, int8 levels ---------------------------
 * Two groups per zmm (their 32 bytes of nibbles in element order), |w| times x with w's sign;
 * lanes 0-7 scaled by (d ls) dx of the first group, 8-15 of the second. */
INLINE void rowsxs(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const attn__q8act *xa,
                   const int M, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m512 acc[ATTN__QMV_WIDE];
        for (int i = 0; i < M; i++) acc[i] = _mm512_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += 136) {
            _mm_prefetch((const char *)b + PF, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 128, _MM_HINT_T0);
            float ds[8];
            _mm256_storeu_ps(ds, iq4xs_ds(b));
            for (int c = 0; c < 4; c++) { /* groups 2c, 2c + 1 */
                const __m512i wv = iq4_lut(nib2(b + 8 + 32 * c, b + 24 + 32 * c));
                const __mmask64 neg = _mm512_movepi8_mask(wv);
                const __m512i v = _mm512_abs_epi8(wv), z = _mm512_setzero_si512();
                const __m128 w4 = _mm_set_ps(0.0f, ds[2 * c + 1], 0.0f, ds[2 * c]);
                for (int i = 0; i < M; i++) {
                    const int64_t g = 8 * k + 2 * c; /* activation block */
                    const __m512i xq = _mm512_loadu_si512(xa->q + i * xa->ldq + 32 * g);
                    const __m128 prod = _mm_mul_ps(w4, _mm_loadu_ps(xa->dsx + i * 2 * xa->ldb + 2 * g));
                    const __m512i dp = _mm512_dpbusd_epi32(z, v, _mm512_mask_sub_epi8(xq, neg, z, xq));
                    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), spread02(prod), acc[i]);
                }
            }
        }
        for (int i = 0; i < M; i++) y[i * ldy + r] = _mm512_reduce_add_ps(acc[i]);
    }
}

static void mv8_iq4_xs(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                       const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    switch (m) {
    case 1: rowsxs(w, rb, rows, nb, xa, 1, y, ldy); break;
    case 2: rowsxs(w, rb, rows, nb, xa, 2, y, ldy); break;
    case 3: rowsxs(w, rb, rows, nb, xa, 3, y, ldy); break;
    default: rowsxs(w, rb, rows, nb, xa, 4, y, ldy); break;
    }
}

/* ---- Q4_K and Q5_K: 8 groups of 32, a scale and a min each -------------------------------- */
INLINE void rowsk45(int five, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                    const attn__q8act *xa, const int M, float *y, int64_t ldy) {
    const size_t bb = five ? 176 : 144;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m512 acc[ATTN__QMV_WIDE];
        __m128 macc[ATTN__QMV_WIDE];
        for (int i = 0; i < M; i++) acc[i] = _mm512_setzero_ps(), macc[i] = _mm_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += bb) {
            _mm_prefetch((const char *)b + PF, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 128, _MM_HINT_T0);
            const __m512 sdm = k4_sdm(b);
            const uint8_t *qs = b + (five ? 48 : 16);
            const __m512i qh = five ? _mm512_broadcast_i64x4(ld256(b + 16)) : _mm512_setzero_si512();
            for (int c = 0; c < 4; c++) { /* groups 2c, 2c + 1 */
                const __m512i t = _mm512_broadcast_i64x4(ld256(qs + 32 * c));
                __m512i v = _mm512_and_si512(_mm512_srlv_epi64(t, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)),
                                             _mm512_set1_epi8(15));
                if (five) {
                    const __m512i sh = _mm512_set_epi64(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                                                        2 * c, 2 * c, 2 * c, 2 * c);
                    const __m512i hb = _mm512_and_si512(_mm512_srlv_epi64(qh, sh), _mm512_set1_epi8(1));
                    v = _mm512_or_si512(v, _mm512_slli_epi16(hb, 4));
                }
                const __m128 w4 = quarter(sdm, c);
                for (int i = 0; i < M; i++) {
                    const int64_t g = 8 * k + 2 * c; /* activation block */
                    const __m512i xq = _mm512_loadu_si512(xa->q + i * xa->ldq + 32 * g);
                    const __m128 prod = _mm_mul_ps(w4, _mm_loadu_ps(xa->dsx + i * 2 * xa->ldb + 2 * g));
                    const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, xq);
                    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), spread02(prod), acc[i]);
                    macc[i] = _mm_add_ps(macc[i], prod);
                }
            }
        }
        for (int i = 0; i < M; i++) {
            float m[4];
            _mm_storeu_ps(m, macc[i]);
            y[i * ldy + r] = _mm512_reduce_add_ps(acc[i]) - (m[1] + m[3]);
        }
    }
}

#define DEFK45(name, FIVE)                                                                    \
    static void name(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,                   \
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {               \
        switch (m) {                                                                          \
        case 1: rowsk45(FIVE, w, rb, rows, nb, xa, 1, y, ldy); break;                         \
        case 2: rowsk45(FIVE, w, rb, rows, nb, xa, 2, y, ldy); break;                         \
        case 3: rowsk45(FIVE, w, rb, rows, nb, xa, 3, y, ldy); break;                         \
        default: rowsk45(FIVE, w, rb, rows, nb, xa, 4, y, ldy); break;                        \
        }                                                                                     \
    }
DEFK45(mv8_q4_k, 0)
DEFK45(mv8_q5_k, 1)

/* ---- Q6_K: 16 groups of 16 with int8 scales, quants 0..63 less 32 ------------------------- */
INLINE void rowsq6(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const attn__q8act *xa,
                   const int M, float *y, int64_t ldy) {
    const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m512 acc[ATTN__QMV_WIDE];
        for (int i = 0; i < M; i++) acc[i] = _mm512_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += 210) {
            _mm_prefetch((const char *)b + PF, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 128, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 192, _MM_HINT_T0);
            const __m512 ds = _mm512_mul_ps(_mm512_set1_ps(h2f(b + 208)),
                                            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ld128(b + 192))));
            for (int z = 0; z < 4; z++) { /* elements 64 z .. 64 z + 63: groups 4z .. 4z + 3 */
                const int h = z >> 1, s = 4 * (z & 1);
                const __m512i ql = _mm512_loadu_si512(b + 64 * h);
                const __m512i lo = _mm512_and_si512(s ? _mm512_srli_epi16(ql, 4) : ql, _mm512_set1_epi8(15));
                const __m512i qh = _mm512_broadcast_i64x4(ld256(b + 128 + 32 * h));
                const __m512i hi = _mm512_and_si512(
                    _mm512_srlv_epi64(qh, _mm512_set_epi64(s + 2, s + 2, s + 2, s + 2, s, s, s, s)),
                    _mm512_set1_epi8(3));
                const __m512i v = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
                const __m128 w4 = quarter(ds, z);
                for (int i = 0; i < M; i++) {
                    const int64_t g = 8 * k + 2 * z; /* activation block of groups 4z, 4z + 1 */
                    const __m512i xq = _mm512_loadu_si512(xa->q + i * xa->ldq + 32 * g);
                    const __m128 a = _mm_loadu_ps(xa->dsx + i * 2 * xa->ldb + 2 * g);
                    const __m128 prod = _mm_mul_ps(w4, _mm_shuffle_ps(a, a, _MM_SHUFFLE(2, 2, 0, 0)));
                    const __m512i z0 = _mm512_setzero_si512();
                    const __m512i dp = _mm512_sub_epi32(_mm512_dpbusd_epi32(z0, v, xq),
                                                        _mm512_dpbusd_epi32(z0, _mm512_set1_epi8(32), xq));
                    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp),
                                             _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(prod)),
                                             acc[i]);
                }
            }
        }
        for (int i = 0; i < M; i++) y[i * ldy + r] = _mm512_reduce_add_ps(acc[i]);
    }
}

static void mv8_q6_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const attn__q8act *xa,
                     int64_t m, float *y, int64_t ldy) {
    switch (m) {
    case 1: rowsq6(w, rb, rows, nb, xa, 1, y, ldy); break;
    case 2: rowsq6(w, rb, rows, nb, xa, 2, y, ldy); break;
    case 3: rowsq6(w, rb, rows, nb, xa, 3, y, ldy); break;
    default: rowsq6(w, rb, rows, nb, xa, 4, y, ldy); break;
    }
}

/* ---- up to ATTN__QMV_WIDE vectors in one pass (mvw8): each weight block unpacked once for
 * all of them; every vector's operations are those of the 4-vector calls, so the same bits */
#define WIDE_SWITCH(CALL)                                                                     \
    switch (m) {                                                                              \
    case 1: CALL(1); break;                                                                   \
    case 2: CALL(2); break;                                                                   \
    case 3: CALL(3); break;                                                                   \
    case 4: CALL(4); break;                                                                   \
    case 5: CALL(5); break;                                                                   \
    case 6: CALL(6); break;                                                                   \
    case 7: CALL(7); break;                                                                   \
    default: CALL(8); break;                                                                  \
    }
#define DEFW32(name, T, BB)                                                                   \
    static void name(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,                   \
                     const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {               \
        _Static_assert(ATTN__QMV_WIDE == 8, "the switch covers 8 vectors");                  \
        WIDE_SWITCH(W32_##T)                                                                  \
    }
#define W32_T40(M) rows32(T40, 18, w, rb, rows, nb, xa, M, y, ldy)
#define W32_T41(M) rows32(T41, 20, w, rb, rows, nb, xa, M, y, ldy)
#define W32_T50(M) rows32(T50, 22, w, rb, rows, nb, xa, M, y, ldy)
#define W32_T51(M) rows32(T51, 24, w, rb, rows, nb, xa, M, y, ldy)
#define W32_T80(M) rows32(T80, 34, w, rb, rows, nb, xa, M, y, ldy)
DEFW32(mvw8_q4_0, T40, 18)
DEFW32(mvw8_q4_1, T41, 20)
DEFW32(mvw8_q5_0, T50, 22)
DEFW32(mvw8_q5_1, T51, 24)
DEFW32(mvw8_q8_0, T80, 34)
#define W32_TNL(M) rows32(TNL, 18, w, rb, rows, nb, xa, M, y, ldy)
DEFW32(mvw8_iq4_nl, TNL, 18)
#define WK4(M) rowsk45(0, w, rb, rows, nb, xa, M, y, ldy)
#define WK5(M) rowsk45(1, w, rb, rows, nb, xa, M, y, ldy)
#define WQ6(M) rowsq6(w, rb, rows, nb, xa, M, y, ldy)
static void mvw8_q4_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                      const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    WIDE_SWITCH(WK4)
}
static void mvw8_q5_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                      const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    WIDE_SWITCH(WK5)
}
static void mvw8_q6_k(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                      const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    WIDE_SWITCH(WQ6)
}
#define WXS(M) rowsxs(w, rb, rows, nb, xa, M, y, ldy)
static void mvw8_iq4_xs(const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                        const attn__q8act *xa, int64_t m, float *y, int64_t ldy) {
    WIDE_SWITCH(WXS)
}

/* Q2_K, Q3_K: the 256-bit kernels of the other x86 int8 sets, on AVX512VL's VPDPBUSD */
INLINE __m256i dp(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
#include "../quant8_k23.h"

static const attn__quant_kernels TABLE = {
    "avx512_vnni",
    {0},
    {0},
    {[ATTN_Q_Q4_0] = mv8_q4_0, [ATTN_Q_Q4_1] = mv8_q4_1, [ATTN_Q_Q5_0] = mv8_q5_0,
     [ATTN_Q_Q5_1] = mv8_q5_1, [ATTN_Q_Q8_0] = mv8_q8_0, [ATTN_Q_Q2_K] = mv8_q2_k,
     [ATTN_Q_Q3_K] = mv8_q3_k, [ATTN_Q_Q4_K] = mv8_q4_k,
     [ATTN_Q_Q5_K] = mv8_q5_k, [ATTN_Q_Q6_K] = mv8_q6_k, [ATTN_Q_IQ4_NL] = mv8_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv8_iq4_xs},
    {0},
    {[ATTN_Q_Q4_0] = mvw8_q4_0, [ATTN_Q_Q4_1] = mvw8_q4_1, [ATTN_Q_Q5_0] = mvw8_q5_0,
     [ATTN_Q_Q5_1] = mvw8_q5_1, [ATTN_Q_Q8_0] = mvw8_q8_0, [ATTN_Q_Q4_K] = mvw8_q4_k,
     [ATTN_Q_Q5_K] = mvw8_q5_k, [ATTN_Q_Q6_K] = mvw8_q6_k, [ATTN_Q_IQ4_NL] = mvw8_iq4_nl,
     [ATTN_Q_IQ4_XS] = mvw8_iq4_xs},
    {0},
    NULL, /* q16x */
};

const attn__quant_kernels *attn__quant_kernels_vnni(void) { return &TABLE; }

#else
const attn__quant_kernels *attn__quant_kernels_vnni(void) { return NULL; }
#endif
