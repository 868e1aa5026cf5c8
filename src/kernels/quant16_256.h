/* The quantized linear product on int16 activations (quant.h, mv16: ATTN_QACT_Q16) on 256-bit
 * vectors, shared by three sets that differ only in dp2(w0, x0, w1, x1), the sum of two
 * VPMADDWD (16 products of 16-bit integers in pairs into 8 int32 lanes each):
 *   x86_avx2/quant16_avx2.c          VPMADDWD twice and VPADDD (plain AVX2);
 *   x86_avx512vnni/quant16_vnni.c    VPDPWSSD twice (AVX512_VNNI with AVX512VL, 256-bit);
 *   x86_avxvnni/quant16_avxvnni.c    VPDPWSSD twice (AVX-VNNI, VEX).
 * The int32 lanes are the same (no saturation: VPDPWSSD wraps, and no lane comes near 2^31),
 * so are the bits.  Types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL (chunks of 8 blocks), Q4_K,
 * Q5_K, IQ4_XS (a superblock's 8 groups of 32); Q2_K, Q3_K, Q6_K (16 groups of 16) on the
 * activation quants split into bytes (their own note below).  The includer defines
 * Q16_256_NAME and dp2, then includes this file once;
 * dispatch.c picks the table for ctx->kern.quant16 (AVX2 and AVX-512 contexts).
 *
 * Each block of 32 activations is rounded to int16 with its own scale (attn__q16act_quantize:
 * d = max|x| / 32767, so an element moves by at most d / 2, 2^-16 of the block's largest), and
 * each weight group's integer quants meet the activation quants in VPMADDWD: 16 products in
 * pairs into 8 int32 lanes, exact (|q| <= 128, |x_q| <= 32767: a block's sum stays below
 * 32 * 128 * 32767 < 2^31).  The 8 groups of a chunk (8 blocks, or a K-quant superblock)
 * are reduced across lanes into one vector, group j in lane j (attn__red8: integer, exact), converted
 * once, and multiplied by the groups' scales times the blocks' activation scales in one FMA;
 * mins (Q4_1, Q5_1, Q4_K, Q5_K) times the float sums of the unrounded x in another.  Offsets
 * (Q4_0's 8, Q5_0's 16, Q6_K's 32) are subtracted from the quants as 16-bit integers.  Per 32
 * Q4_K weights: a widening load, a mask or a shift, two VPMADDWD and an add, against the float
 * kernels' two loads, two masks, four conversions and four FMAs (quant_avx2.c).
 *
 * Bits: every row is summed in one fixed order whatever m and the row range (threads split
 * rows), so results do not depend on the thread count.  Error against the exact product:
 * sum_b (d_b / 2) sum_{k in b} |w_nk| from the rounding of x, and float rounding of the
 * scaled sums (test_qlinear's oracle rounds x as the library does and bounds the rest).
 */
#ifndef ATTN_QUANT16_256_BODY
#define ATTN_QUANT16_256_BODY
#include <float.h>
#include <math.h>
#include <string.h>

#include "x86_avx2/kquant_avx2.h"

#define INLINE static inline __attribute__((always_inline))
#define PF_DIST 2048 /* bytes ahead of the weights to fetch */

INLINE __m128i ld128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }
INLINE __m256i lx(const int16_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }
/* the products of 16 int16 weights with 16 activation quants, in pairs: 8 int32 lanes */
INLINE __m256i dot16(__m256i w, const int16_t *x) { return _mm256_madd_epi16(w, lx(x)); }
/* dot16(w0, x0) + dot16(w1, x1): the includer's dp2 (two VPMADDWD and an add, or VPDPWSSD) */
INLINE __m256i dot32(__m256i w0, const int16_t *x0, __m256i w1, const int16_t *x1) {
    return dp2(w0, lx(x0), w1, lx(x1));
}
/* ---- 32-element types ------------------------------------------------------------------------ */
enum { T40, T41, T50, T51, T80, TNL };

/* bit j of u (16 bits) as 16 in lane j */
INLINE __m256i bit16(uint32_t u) {
    const __m256i sel = _mm256_set_epi16((short)0x8000, 0x4000, 0x2000, 0x1000, 0x800, 0x400, 0x200,
                                         0x100, 0x80, 0x40, 0x20, 0x10, 8, 4, 2, 1);
    const __m256i v = _mm256_and_si256(_mm256_set1_epi16((short)(u & 0xffff)), sel);
    return _mm256_and_si256(_mm256_cmpeq_epi16(v, sel), _mm256_set1_epi16(16));
}

/* the 32 quants of block b as int16 (offsets subtracted): elements 0-15 in w[0], 16-31 in w[1] */
/* IQ4_NL / IQ4_XS: 16 bytes of nibbles (elements j and 16 + j in byte j) through the 16 int8
 * levels (VPSHUFB), widened: elements 0-15 in w[0], 16-31 in w[1] */
INLINE void iq4w(const uint8_t *qs, __m256i w[2]) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)(const void *)attn__iq4_values);
    const __m128i q = ld128(qs), m = _mm_set1_epi8(15);
    w[0] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(lut, _mm_and_si128(q, m)));
    w[1] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m)));
}

INLINE void w32(int t, const uint8_t *b, __m256i w[2]) {
    if (t == TNL) {
        iq4w(b + 2, w);
        return;
    }
    if (t == T80) {
        w[0] = _mm256_cvtepi8_epi16(ld128(b + 2));
        w[1] = _mm256_cvtepi8_epi16(ld128(b + 18));
        return;
    }
    const int qs = t == T40 ? 2 : t == T41 ? 4 : t == T50 ? 6 : 8;
    const __m256i v = _mm256_cvtepu8_epi16(ld128(b + qs)); /* byte j: elements j, 16 + j */
    w[0] = _mm256_and_si256(v, _mm256_set1_epi16(15));
    w[1] = _mm256_srli_epi16(v, 4);
    if (t == T50 || t == T51) {
        uint32_t qh;
        memcpy(&qh, b + (t == T50 ? 2 : 4), 4);
        w[0] = _mm256_or_si256(w[0], bit16(qh));
        w[1] = _mm256_or_si256(w[1], bit16(qh >> 16));
    }
    const int off = t == T40 ? 8 : t == T50 ? 16 : 0;
    if (off) {
        w[0] = _mm256_sub_epi16(w[0], _mm256_set1_epi16((short)off));
        w[1] = _mm256_sub_epi16(w[1], _mm256_set1_epi16((short)off));
    }
}

/* n <= 8 blocks at b (block k0 of the row) times the M vectors into acc[i] */
INLINE void chunk32(int t, size_t bb, const uint8_t *b, int64_t k0, int n,
                    const attn__q16act *xa, const int M, __m256 *acc) {
    __m256i h[ATTN__QMV_MAX][4];
    for (int p = 0; p < 4; p++) {
        __m256i s[2][ATTN__QMV_MAX];
        for (int e = 0; e < 2; e++) {
            const int j = 2 * p + e;
            if (j >= n) {
                for (int i = 0; i < M; i++) s[e][i] = _mm256_setzero_si256();
                continue;
            }
            _mm_prefetch((const char *)b + PF_DIST + bb * (size_t)j, _MM_HINT_T0);
            __m256i w[2];
            w32(t, b + bb * (size_t)j, w);
            for (int i = 0; i < M; i++) {
                const int16_t *x = xa->q + i * xa->ldq + 32 * (k0 + j);
                s[e][i] = dot32(w[0], x, w[1], x + 16);
            }
        }
        for (int i = 0; i < M; i++) h[i][p] = _mm256_hadd_epi32(s[0][i], s[1][i]);
    }
    const __m256 dv = attn__halves8n(b, (int)bb, 0, n);
    const int mins = t == T41 || t == T51;
    const __m256 mv = mins ? attn__halves8n(b, (int)bb, 2, n) : _mm256_setzero_ps();
    for (int i = 0; i < M; i++) {
        const __m256 sc = _mm256_mul_ps(dv, _mm256_loadu_ps(xa->d + i * xa->ldb + k0));
        acc[i] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(attn__red8(h[i])), acc[i]);
        if (mins) acc[i] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(xa->sx + i * xa->ldb + k0), acc[i]);
    }
}

ATTN__ROWS8(rows32, chunk32, attn__q16act) /* kquant_avx2.h */
#define ROWS32_CALL(M) rows32(t_, bb_, w, rb, rows, nb, xa, M, y, ldy)
#define DEF32(name, T, BB)                                                                    \
    ATTN__QMV_ENTRY(name, attn__q16act, const int t_ = (T); const size_t bb_ = (BB);, ROWS32_CALL)
DEF32(mv16_q4_0, T40, 18)
DEF32(mv16_q4_1, T41, 20)
DEF32(mv16_q5_0, T50, 22)
DEF32(mv16_q5_1, T51, 24)
DEF32(mv16_q8_0, T80, 34)
DEF32(mv16_iq4_nl, TNL, 18)

/* ---- Q4_K, Q5_K: 8 groups of 32, scale s_g and min m_g: s_g sum q x - m_g X_g -------------- */
INLINE void rowsk45(int five, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                    const attn__q16act *xa, const int M, float *y, int64_t ldy) {
    const size_t bb = five ? 176 : 144;
    const __m256i m15 = _mm256_set1_epi16(15), m16 = _mm256_set1_epi16(16);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 acc[ATTN__QMV_MAX], accm[ATTN__QMV_MAX];
        for (int i = 0; i < M; i++) acc[i] = accm[i] = _mm256_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += bb) {
            for (size_t p = 0; p < bb; p += 64) _mm_prefetch((const char *)b + PF_DIST + p, _MM_HINT_T0);
            const uint8_t *qs = b + (five ? 48 : 16);
            __m256i hb0 = _mm256_setzero_si256(), hb1 = _mm256_setzero_si256();
            if (five) hb0 = _mm256_cvtepu8_epi16(ld128(b + 16)), hb1 = _mm256_cvtepu8_epi16(ld128(b + 32));
            __m256i h[ATTN__QMV_MAX][4];
            for (int c = 0; c < 4; c++) { /* groups 2 c (low nibbles), 2 c + 1 (high) */
                const __m256i v0 = _mm256_cvtepu8_epi16(ld128(qs + 32 * c));
                const __m256i v1 = _mm256_cvtepu8_epi16(ld128(qs + 32 * c + 16));
                __m256i l0 = _mm256_and_si256(v0, m15), l1 = _mm256_and_si256(v1, m15);
                __m256i u0 = _mm256_srli_epi16(v0, 4), u1 = _mm256_srli_epi16(v1, 4);
                if (five) { /* bits 2 c and 2 c + 1 of qh[j] to bit 4 */
                    const int a = 2 * c;
#define B4(v, s) _mm256_and_si256((s) <= 4 ? _mm256_slli_epi16(v, 4 - (s)) : _mm256_srli_epi16(v, (s) - 4), m16)
                    l0 = _mm256_or_si256(l0, B4(hb0, a)), l1 = _mm256_or_si256(l1, B4(hb1, a));
                    u0 = _mm256_or_si256(u0, B4(hb0, a + 1)), u1 = _mm256_or_si256(u1, B4(hb1, a + 1));
#undef B4
                }
                for (int i = 0; i < M; i++) {
                    const int16_t *x = xa->q + i * xa->ldq + 256 * k + 64 * c;
                    const __m256i sl = dot32(l0, x, l1, x + 16);
                    const __m256i su = dot32(u0, x + 32, u1, x + 48);
                    h[i][c] = _mm256_hadd_epi32(sl, su);
                }
            }
            __m256 ds, dm;
            attn__k4_scales8(b, &ds, &dm);
            for (int i = 0; i < M; i++) {
                const __m256 sc = _mm256_mul_ps(ds, _mm256_loadu_ps(xa->d + i * xa->ldb + 8 * k));
                acc[i] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(attn__red8(h[i])), acc[i]);
                accm[i] = _mm256_fmadd_ps(dm, _mm256_loadu_ps(xa->sx + i * xa->ldb + 8 * k), accm[i]);
            }
        }
        for (int i = 0; i < M; i++) y[i * ldy + r] = attn__hsum8(acc[i]) - attn__hsum8(accm[i]);
    }
}

#define ROWSK45_CALL(M) rowsk45(five_, w, rb, rows, nb, xa, M, y, ldy)
#define DEFK45(name, FIVE)                                                                    \
    ATTN__QMV_ENTRY(name, attn__q16act, const int five_ = (FIVE);, ROWSK45_CALL)
DEFK45(mv16_q4_k, 0)
DEFK45(mv16_q5_k, 1)

/* ---- Q2_K, Q3_K, Q6_K: 16 groups of 16 with integer scales, on the split activations -------
 * (quant.h: attn__q16act's qb and gs).  Element 32 j + l of a superblock is in group 2 j +
 * (l >> 4); its weight is d sc_g q - o_g with q the unsigned quant and o_g the group's offset:
 *   Q2_K  q = 2-bit field j & 3 of qs[32 (j >> 2) + l] (0 .. 3), sc 4 bits, o_g = dmin m_g;
 *   Q3_K  the same field with bit j of hmask[l] as its third bit (0 .. 7), sc signed 6 bits,
 *         o_g = 4 d sc_g;
 *   Q6_K  q 0 .. 63 (attn__q6k_ubytes32), sc signed 8 bits, o_g = 32 d sc_g.
 * Each activation quant is 256 hi + lo (lo an unsigned byte, hi a signed one), so VPMADDUBSW
 * pairs the weight quants with each: lo q as unsigned times signed, q hi the other way round
 * (pairs within 2 x 255 x 63 and 2 x 63 x 128: no saturation).  dp2 of the lo pairs with the
 * groups' scales and of the hi pairs with 256 sc (|256 sc| <= 32768 fits an int16) gives int32
 * lanes of sum sc q x_q over 4 weights each, exact (|lane| < 1.1e9; block j: sc_2j in the low
 * 128 bits, sc_2j+1 in the high, one VPERMD).  Per block one conversion and an FMA with d_x;
 * per superblock acc += d s and acc -= sum_g o_g gs_g (gs: the groups' integer sums of x
 * quants times d_x, made once per call).  No horizontal work until the row's end.  Against
 * int16 quants of the weights (q - 32 for Q6_K) in VPMADDWD, reduced across lanes per 8
 * groups, one vector (Zen 4, one thread, in cache): Q6_K 15.6 -> 18.4 GB/s with VPDPWSSD,
 * 15.0 -> 15.7 on plain AVX2; Q3_K 7.1 -> 8.5 and 6.9 -> 7.3. */
enum { K2, K3, K6 };
INLINE void rowsk16(int t, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                    const attn__q16act *xa, const int M, float *y, int64_t ldy) {
    const size_t bb = t == K2 ? 84 : t == K3 ? 110 : 210;
    const __m256i idx[4] = {_mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0),
                            _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2),
                            _mm256_set_epi32(5, 5, 5, 5, 4, 4, 4, 4),
                            _mm256_set_epi32(7, 7, 7, 7, 6, 6, 6, 6)};
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 acc[ATTN__QMV_MAX];
        for (int i = 0; i < M; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += bb) {
            for (size_t p = 0; p < bb; p += 64) _mm_prefetch((const char *)b + PF_DIST + p, _MM_HINT_T0);
            /* s: the scales of groups 8 h + e in lane e of s[h]; o: the offsets o_g likewise */
            __m256i s[2];
            __m256 d, o[2];
            if (t == K2) {
                const __m128i s16 = ld128(b);
                const __m128i sc8 = _mm_and_si128(s16, _mm_set1_epi8(15));
                const __m128i mn8 = _mm_and_si128(_mm_srli_epi16(s16, 4), _mm_set1_epi8(15));
                const __m256 dm = _mm256_set1_ps(attn__h2f(b + 82));
                d = _mm256_set1_ps(attn__h2f(b + 80));
                s[0] = _mm256_cvtepu8_epi32(sc8), s[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(sc8, 8));
                o[0] = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn8)));
                o[1] = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(mn8, 8))));
            } else {
                if (t == K3) {
                    attn__q3k_scales16(b, s); /* kquant_avx2.h */
                } else {
                    const __m128i s8 = ld128(b + 192);
                    s[0] = _mm256_cvtepi8_epi32(s8), s[1] = _mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8));
                }
                d = _mm256_set1_ps(attn__h2f(b + (t == K3 ? 108 : 208)));
                const __m256 dq = _mm256_mul_ps(d, _mm256_set1_ps(t == K3 ? 4.0f : 32.0f));
                o[0] = _mm256_mul_ps(dq, _mm256_cvtepi32_ps(s[0]));
                o[1] = _mm256_mul_ps(dq, _mm256_cvtepi32_ps(s[1]));
            }
            for (int h = 0; h < 2; h++) /* each group's scale in both int16 halves of its lane */
                s[h] = _mm256_blend_epi16(s[h], _mm256_slli_epi32(s[h], 16), 0xAA);
            const uint8_t *qs = b + (t == K2 ? 16 : 32);
            const __m256i hm = t == K3 ? _mm256_loadu_si256((const __m256i *)(const void *)b)
                                       : _mm256_setzero_si256();
            __m256 sb[ATTN__QMV_MAX];
            _Pragma("GCC unroll 8")
            for (int j = 0; j < 8; j++) {
                __m256i v;
                if (t == K6) {
                    v = attn__q6k_ubytes32(b, j);
                } else {
                    v = _mm256_and_si256(
                        _mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * (j >> 2))),
                                         _mm_cvtsi32_si128(2 * (j & 3))),
                        _mm256_set1_epi8(3));
                    if (t == K3)
                        v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(
                            _mm256_srl_epi16(hm, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1)), 2));
                }
                const __m256i sc = _mm256_permutevar8x32_epi32(s[j >> 2], idx[j & 3]);
                const __m256i sh = _mm256_slli_epi16(sc, 8); /* 256 sc, within each int16 */
                for (int i = 0; i < M; i++) {
                    const uint8_t *xb = xa->qb + i * 2 * xa->ldq + 64 * (8 * k + j);
                    const __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)xb);
                    const __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 32));
                    const __m256i q = dp2(_mm256_maddubs_epi16(lo, v), sc, _mm256_maddubs_epi16(v, hi), sh);
                    const __m256 dx = _mm256_broadcast_ss(xa->d + i * xa->ldb + 8 * k + j);
                    sb[i] = j ? _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), dx, sb[i])
                              : _mm256_mul_ps(_mm256_cvtepi32_ps(q), dx);
                }
            }
            for (int i = 0; i < M; i++) {
                const float *g = xa->gs + i * 2 * xa->ldb + 16 * k;
                const __m256 off = _mm256_fmadd_ps(o[1], _mm256_loadu_ps(g + 8),
                                                   _mm256_mul_ps(o[0], _mm256_loadu_ps(g)));
                acc[i] = _mm256_sub_ps(_mm256_fmadd_ps(d, sb[i], acc[i]), off);
            }
        }
        for (int i = 0; i < M; i++) y[i * ldy + r] = attn__hsum8(acc[i]);
    }
}
#define ROWSK16_CALL(M) rowsk16(t_, w, rb, rows, nb, xa, M, y, ldy)
#define DEFK16(name, T) ATTN__QMV_ENTRY(name, attn__q16act, const int t_ = (T);, ROWSK16_CALL)
DEFK16(mv16_q2_k, K2)
DEFK16(mv16_q3_k, K3)
DEFK16(mv16_q6_k, K6)

/* ---- IQ4_XS: 8 groups of 32, signed 6-bit scales, the IQ4_NL levels ------------------------ */
INLINE void rowsxs(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const attn__q16act *xa,
                   const int M, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 acc[ATTN__QMV_MAX];
        for (int i = 0; i < M; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += 136) {
            for (int p = 0; p < 136; p += 64) _mm_prefetch((const char *)b + PF_DIST + p, _MM_HINT_T0);
            __m256i h[ATTN__QMV_MAX][4], e[ATTN__QMV_MAX];
            for (int i = 0; i < M; i++) e[i] = _mm256_setzero_si256();
            for (int g = 0; g < 8; g++) {
                __m256i wv[2];
                iq4w(b + 8 + 16 * g, wv);
                for (int i = 0; i < M; i++) {
                    const int16_t *x = xa->q + i * xa->ldq + 256 * k + 32 * g;
                    const __m256i s = dot32(wv[0], x, wv[1], x + 16);
                    if (g & 1) h[i][g >> 1] = _mm256_hadd_epi32(e[i], s);
                    else e[i] = s;
                }
            }
            /* d ls_g: ls = (sl[g / 2] >> 4 (g % 2) & 15 | (sh >> 2 g & 3) << 4) - 32 */
            uint32_t sl;
            memcpy(&sl, b + 4, 4);
            const __m256i lo = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi32_si128((int)sl)),
                                                              _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0)),
                                  _mm256_set_epi32(4, 0, 4, 0, 4, 0, 4, 0)),
                _mm256_set1_epi32(15));
            const __m256i hi = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_set1_epi32(attn__load_u16(b + 2)),
                                  _mm256_set_epi32(14, 12, 10, 8, 6, 4, 2, 0)),
                _mm256_set1_epi32(3));
            const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)),
                                                _mm256_set1_epi32(32));
            const __m256 dls = _mm256_mul_ps(_mm256_set1_ps(attn__h2f(b)), _mm256_cvtepi32_ps(ls));
            for (int i = 0; i < M; i++) {
                const __m256 sc = _mm256_mul_ps(dls, _mm256_loadu_ps(xa->d + i * xa->ldb + 8 * k));
                acc[i] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(attn__red8(h[i])), acc[i]);
            }
        }
        for (int i = 0; i < M; i++) y[i * ldy + r] = attn__hsum8(acc[i]);
    }
}
#define ROWSXS_CALL(M) rowsxs(w, rb, rows, nb, xa, M, y, ldy)
ATTN__QMV_ENTRY(mv16_iq4_xs, attn__q16act, , ROWSXS_CALL)

/* ---- attn__q16act_quantize on 8 lanes, the same bits: the partial sums and maxima of lane l
 * over elements l, l + 8, l + 16, l + 24 in that order, the sums' pairwise tree by two
 * horizontal adds and one across the halves; the rounding without branches (NaN to 0, clamp,
 * truncate, and the fraction's comparisons) */
static void q16x(const float *x, int64_t ldx, int64_t m, int64_t K, int16_t *q, int64_t ldq,
                 float *d, float *sx, int64_t ldb) {
    const __m256 c = _mm256_set1_ps(32767.0f), nc = _mm256_set1_ps(-32767.0f);
    const __m256 half = _mm256_set1_ps(0.5f), nhalf = _mm256_set1_ps(-0.5f);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < m; i++) {
        for (int64_t b = 0; b < K / 32; b++) {
            const float *xb = x + i * ldx + 32 * b;
            __m256 v[4], p = _mm256_setzero_ps(), mx = _mm256_setzero_ps();
            for (int t = 0; t < 4; t++) {
                v[t] = _mm256_loadu_ps(xb + 8 * t);
                p = _mm256_add_ps(p, v[t]);
                mx = _mm256_max_ps(_mm256_and_ps(v[t], absm), mx);
            }
            const __m256 h = _mm256_hadd_ps(p, p), hh = _mm256_hadd_ps(h, h);
            const float s = _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(hh),
                                                     _mm256_extractf128_ps(hh, 1)));
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
            const float amax = _mm_cvtss_f32(m4);
            float db = amax / 32767.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
            if (!(id <= FLT_MAX)) db = 0.0f, id = 0.0f; /* as attn__q16act_quantize */
            const __m256 iv = _mm256_set1_ps(id);
            __m256i r[4];
            for (int t = 0; t < 4; t++) {
                __m256 y = _mm256_mul_ps(v[t], iv);
                y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q));
                y = _mm256_max_ps(nc, _mm256_min_ps(c, y));
                const __m256i tr = _mm256_cvttps_epi32(y);
                const __m256 f = _mm256_sub_ps(y, _mm256_cvtepi32_ps(tr));
                const __m256i ge = _mm256_castps_si256(_mm256_cmp_ps(f, half, _CMP_GE_OQ));
                const __m256i le = _mm256_castps_si256(_mm256_cmp_ps(f, nhalf, _CMP_LE_OQ));
                r[t] = _mm256_add_epi32(_mm256_sub_epi32(tr, ge), le);
            }
            int16_t *qb = q + i * ldq + 32 * b;
            for (int t = 0; t < 2; t++) /* packs works per 128-bit half: put them back in order */
                _mm256_storeu_si256((__m256i *)(void *)(qb + 16 * t),
                                    _mm256_permute4x64_epi64(_mm256_packs_epi32(r[2 * t], r[2 * t + 1]), 0xD8));
            if (!(s - s == 0.0f)) db = NAN;
            d[i * ldb + b] = db;
            sx[i * ldb + b] = s;
        }
        for (int64_t b = K / 32; b < ldb; b++) d[i * ldb + b] = sx[i * ldb + b] = 0.0f;
    }
}

static const attn__quant_kernels TABLE = {
    .name = Q16_256_NAME,
    .q16x = q16x,
    .mv16 = {[ATTN_Q_Q4_0] = mv16_q4_0, [ATTN_Q_Q4_1] = mv16_q4_1, [ATTN_Q_Q5_0] = mv16_q5_0,
             [ATTN_Q_Q5_1] = mv16_q5_1, [ATTN_Q_Q8_0] = mv16_q8_0, [ATTN_Q_Q4_K] = mv16_q4_k,
             [ATTN_Q_Q5_K] = mv16_q5_k, [ATTN_Q_Q6_K] = mv16_q6_k, [ATTN_Q_IQ4_NL] = mv16_iq4_nl,
             [ATTN_Q_IQ4_XS] = mv16_iq4_xs, [ATTN_Q_Q2_K] = mv16_q2_k, [ATTN_Q_Q3_K] = mv16_q3_k},
};

#endif
