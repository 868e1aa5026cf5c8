/* The int8-activation kernels of the quantized linear product on 256-bit integer vectors
 * (quant.h, mv8), shared by two sets that differ only in the dot product of 32 unsigned weight
 * bytes with 32 signed activation bytes into 8 int32 lanes of 4 products each:
 *   x86_avxvnni/quant_avxvnni.c  VPDPBUSD (AVX-VNNI), one instruction;
 *   x86_avx2/quant8_avx2.c       VPMADDUBSW then VPMADDWD by ones (plain AVX2), two.
 * The includer defines Q8_256_NAME (the table's name) and `dp(u, s)`, then includes this file
 * once.  Both give the same int32 lanes, so the same bits: the pairs VPMADDUBSW adds into 16
 * bits never saturate, as the weights are at most 128 as unsigned bytes (|Q8_0| with -128
 * taken as 128; Q4 15, Q5 31, Q6_K 63, Q2_K 3, Q3_K 7, the offsets 4, 8, 16, 32, the Q2_K mins 15,
 * the IQ4 levels' magnitudes 127)
 * and the activations at most 127
 * in magnitude (attn__q8act_quantize: scale max|x| / 127), so |u0 s0 + u1 s1| <= 2 * 128 * 127
 * = 32512 < 32767.
 *
 * Per chunk of 8 groups (8 blocks of the 32-element types, a Q4_K / Q5_K superblock, half a
 * Q6_K superblock): the groups' int32 lanes reduced across lanes as they come (VPHADDD in
 * pairs, then a cross-lane add: one vector, a group per lane, exact), offsets (- 8, - 16,
 * - 32) subtracted as integers (the offset times the activation quants' integer sums), one
 * conversion and one FMA by the groups' weight scales times activation scales (rounded to
 * float) into one float accumulator per activation vector; mins (Q4_1, Q5_1, Q4_K, Q5_K)
 * times the float sums of x by one more FMA (Q4_K's and Q5_K's into a second accumulator).
 * Row sum: the 8 lanes reduced in a fixed order (minus the mins' lanes reduced the same way).
 * The reductions replaced a conversion, a scale broadcast and an FMA per group: Zen 4, AVX2,
 * one thread, rows of 1024 in cache, GB/s of weights, m = 1: Q4_K 13.7 -> 16.2, Q6_K 18.6 ->
 * 21.2, Q4_0 14.5 -> 17.2, Q4_1 15.1 -> 17.0, Q5_0 12.9 -> 14.6, Q5_1 13.3 -> 15.0, Q8_0 29.9
 * -> 33.1, Q5_K 14.2 -> 15.2; m = 4: Q6_K 5.7 -> 8.1, Q4_K 5.9 -> 6.2, Q5_0 5.1 -> 5.7, but
 * Q5_K 6.3 -> 5.6, Q8_0 9.8 -> 9.6, Q4_1 5.9 -> 5.7 (more vectors live).  Q8_0
 * weights are signed: |w| times x with w's sign (VPSIGNB); so are IQ4_NL's and IQ4_XS's, their
 * nibbles first looked up in the 16 int8 levels (VPSHUFB).  The terms are those of the plain C
 * kernel (ref/quant_kern_ref.c) in another order. */
#ifndef ATTN_QUANT8_256_BODY
#define ATTN_QUANT8_256_BODY
#define INLINE static inline __attribute__((always_inline))
#define PF 2048

#include "x86_avx2/kquant_avx2.h"

INLINE __m128i ld128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }
INLINE __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }


/* the 32 nibbles of 16 bytes in element order */
INLINE __m256i nib(const uint8_t *qs) {
    const __m256i t = _mm256_broadcastsi128_si256(ld128(qs));
    return _mm256_and_si256(_mm256_srlv_epi64(t, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(15));
}
/* bit j of qh as 16 in byte j */
INLINE __m256i bit4(uint32_t qh) {
    const __m256i spread = _mm256_set_epi8(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1,
                                           1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, sel), sel), _mm256_set1_epi8(16));
}

enum { T40, T41, T50, T51, T80, TNL };

/* IQ4: 32 nibbles through the 16 int8 levels (VPSHUFB, the table in both 128-bit lanes) */
INLINE __m256i iq4_lut(__m256i nibbles) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(ld128((const uint8_t *)attn__iq4_values)),
                               nibbles);
}

/* the activation scales d_g and float sums s_g of groups g0 .. g0 + 7, stored [d, s] per group,
 * as two vectors (lane j: group g0 + j) */
INLINE void xa_ds8(const float *a, __m256 *d, __m256 *s) {
    const __m256 u = _mm256_loadu_ps(a), v = _mm256_loadu_ps(a + 8); /* d0 s0 .. d3 s3 | d4 s4 .. */
    const __m256 e = _mm256_shuffle_ps(u, v, _MM_SHUFFLE(2, 0, 2, 0)); /* d0 d1 d4 d5 d2 d3 d6 d7 */
    const __m256 o = _mm256_shuffle_ps(u, v, _MM_SHUFFLE(3, 1, 3, 1));
    const __m256i ord = _mm256_set_epi32(7, 6, 3, 2, 5, 4, 1, 0);
    *d = _mm256_permutevar8x32_ps(e, ord);
    *s = _mm256_permutevar8x32_ps(o, ord);
}

/* the quants of block b as bytes (Q4_0's offset 8 and Q5_0's 16 not subtracted); signed types
 * (Q8_0, IQ4_NL) multiply |v| by x with v's sign */
INLINE __m256i q32(int t, const uint8_t *b) {
    switch (t) {
    case T40: return nib(b + 2);
    case T41: return nib(b + 4);
    case T50: {
        uint32_t qh;
        memcpy(&qh, b + 2, 4);
        return _mm256_or_si256(nib(b + 6), bit4(qh));
    }
    case T51: {
        uint32_t qh;
        memcpy(&qh, b + 4, 4);
        return _mm256_or_si256(nib(b + 8), bit4(qh));
    }
    case TNL: return iq4_lut(nib(b + 2));
    default: return ld256(b + 2);
    }
}

/* n <= 8 blocks at b (block k0 of the row) times the M vectors into acc[i]: each block's dot
 * (8 int32 lanes) reduced as pairs come (VPHADDD), the 8 blocks' sums in lanes 0-7 (one more
 * VPHADDD, a cross-lane add), the offsets times the activation quants' sums (sq) subtracted as
 * integers, one conversion and one FMA by the weight scales times the activation scales; the
 * mins (Q4_1, Q5_1) times the float sums of x in one more */
INLINE void chunk8(int t, size_t bb, const uint8_t *b, int64_t k0, int n, const attn__q8act *xa,
                   const int M, __m256 *acc) {
    const int sgn = t == T80 || t == TNL; /* signed weights: |w| times x with w's sign */
    const int off = t == T40 ? 8 : t == T50 ? 16 : 0;
    __m256i hp[ATTN__QMV_MAX][4], zs[ATTN__QMV_MAX];
    for (int i = 0; i < M; i++) zs[i] = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        __m256i v = _mm256_setzero_si256();
        if (j < n) {
            _mm_prefetch((const char *)b + PF + bb * (size_t)j, _MM_HINT_T0);
            v = q32(t, b + bb * (size_t)j);
        }
        const __m256i av = sgn ? _mm256_abs_epi8(v) : v;
        for (int i = 0; i < M; i++) {
            __m256i s = _mm256_setzero_si256();
            if (j < n) {
                const __m256i xq = ld256((const uint8_t *)(xa->q + i * xa->ldq + 32 * (k0 + j)));
                s = dp(av, sgn ? _mm256_sign_epi8(xq, v) : xq);
            }
            if (j & 1) hp[i][j >> 1] = _mm256_hadd_epi32(zs[i], s);
            else zs[i] = s;
        }
    }
    const __m256 dv = attn__halves8n(b, (int)bb, 0, n); /* kquant_avx2.h */
    const __m256 mv = t == T41 || t == T51 ? attn__halves8n(b, (int)bb, 2, n) : _mm256_setzero_ps();
    for (int i = 0; i < M; i++) {
        __m256i tot = attn__red8(hp[i]); /* x86_avx2/kquant_avx2.h */
        const float *ds = xa->dsx + i * 2 * xa->ldb + 2 * k0;
        const int32_t *sqp = xa->sq + i * 2 * xa->ldb + 2 * k0;
        float dxf[16] = {0};
        int32_t sqf[16] = {0};
        if (n < 8) { /* past the row's blocks: zeros */
            memcpy(dxf, ds, sizeof(float) * 2 * (size_t)n);
            memcpy(sqf, sqp, sizeof(int32_t) * 2 * (size_t)n);
            ds = dxf, sqp = sqf;
        }
        __m256 dx, sx;
        xa_ds8(ds, &dx, &sx);
        if (off) { /* off = 8 or 16: a shift */
            const __m256i p = _mm256_hadd_epi32(ld256((const uint8_t *)sqp), ld256((const uint8_t *)(sqp + 8)));
            const __m256i bs = _mm256_permutevar8x32_epi32(p, _mm256_set_epi32(7, 6, 3, 2, 5, 4, 1, 0));
            tot = _mm256_sub_epi32(tot, _mm256_slli_epi32(bs, off == 8 ? 3 : 4));
        }
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(dv, dx), acc[i]);
        if (t == T41 || t == T51) acc[i] = _mm256_fmadd_ps(mv, sx, acc[i]);
    }
}

ATTN__ROWS8(rows32, chunk8, attn__q8act) /* x86_avx2/kquant_avx2.h */
#define ROWS32_CALL(M) rows32(t_, bb_, w, rb, rows, nb, xa, M, y, ldy)
#define DEF32(name, T, BB)                                                                    \
    ATTN__QMV_ENTRY(name, attn__q8act, const int t_ = (T); const size_t bb_ = (BB);, ROWS32_CALL)
DEF32(mv8_q4_0, T40, 18)
DEF32(mv8_q4_1, T41, 20)
DEF32(mv8_q5_0, T50, 22)
DEF32(mv8_q5_1, T51, 24)
DEF32(mv8_q8_0, T80, 34)
DEF32(mv8_iq4_nl, TNL, 18)

/* ---- IQ4_XS: 8 groups of 32 with a signed 6-bit scale, int8 levels ------------------------ */
INLINE void rowsxs(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const attn__q8act *xa,
                   const int M, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 acc[ATTN__QMV_MAX];
        for (int i = 0; i < M; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += 136) {
            _mm_prefetch((const char *)b + PF, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 128, _MM_HINT_T0);
            const float d = attn__h2f(b);
            for (int s = 0; s < 8; s++) {
                const float ds = d * (float)attn__iq4xs_scale(b, s);
                const __m256i v = iq4_lut(nib(b + 8 + 16 * s)), av = _mm256_abs_epi8(v);
                for (int i = 0; i < M; i++) {
                    const int64_t g = 8 * k + s;
                    const __m256i xq = ld256((const uint8_t *)(xa->q + i * xa->ldq + 32 * g));
                    const float dx = xa->dsx[i * 2 * xa->ldb + 2 * g];
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp(av, _mm256_sign_epi8(xq, v))),
                                             _mm256_set1_ps(ds * dx), acc[i]);
                }
            }
        }
        for (int i = 0; i < M; i++) y[i * ldy + r] = attn__hsum8(acc[i]);
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

/* ---- Q4_K, Q5_K: 8 groups of 32 with a scale and a min ------------------------------------- */
/* Per superblock: the 8 group scales ds_j d_x,j in one vector (each group's lanes times its lane
 * j, broadcast by VPERMPS), the mins dm_j s_x,j into a vector accumulator by one FMA, summed
 * across lanes at the end of the row: no scalar chain through every group of the row. */
INLINE void rowsk45(int five, const uint8_t *w, size_t rb, int64_t rows, int64_t nb,
                    const attn__q8act *xa, const int M, float *y, int64_t ldy) {
    const size_t bb = five ? 176 : 144;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 acc[ATTN__QMV_MAX], accm[ATTN__QMV_MAX];
        for (int i = 0; i < M; i++) acc[i] = accm[i] = _mm256_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += bb) {
            _mm_prefetch((const char *)b + PF, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)b + PF + 128, _MM_HINT_T0);
            __m256 ds, dm, sc[ATTN__QMV_MAX];
            attn__k4_scales8(b, &ds, &dm);
            for (int i = 0; i < M; i++) {
                __m256 dx, sx;
                xa_ds8(xa->dsx + i * 2 * xa->ldb + 2 * 8 * k, &dx, &sx);
                sc[i] = _mm256_mul_ps(ds, dx);
                accm[i] = _mm256_fmadd_ps(dm, sx, accm[i]);
            }
            const uint8_t *qs = b + (five ? 48 : 16);
            const __m256i qh = five ? ld256(b + 16) : _mm256_setzero_si256();
            __m256i hp[ATTN__QMV_MAX][4], gs[ATTN__QMV_MAX];
            for (int i = 0; i < M; i++) gs[i] = _mm256_setzero_si256(); /* set at even s */
            for (int s = 0; s < 8; s++) {
                const __m256i q = ld256(qs + 32 * (s >> 1));
                __m256i v = _mm256_and_si256((s & 1) ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(15));
                if (five) {
                    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)),
                                                        _mm256_set1_epi8(1));
                    v = _mm256_or_si256(v, _mm256_slli_epi16(hb, 4));
                }
                for (int i = 0; i < M; i++) {
                    const int64_t g = 8 * k + s;
                    const __m256i xq = ld256((const uint8_t *)(xa->q + i * xa->ldq + 32 * g));
                    const __m256i d = dp(v, xq);
                    if (s & 1) hp[i][s >> 1] = _mm256_hadd_epi32(gs[i], d);
                    else gs[i] = d;
                }
            }
            for (int i = 0; i < M; i++) {
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(attn__red8(hp[i])), sc[i], acc[i]);
            }
        }
        for (int i = 0; i < M; i++) y[i * ldy + r] = attn__hsum8(acc[i]) - attn__hsum8(accm[i]);
    }
}

#define ROWSK45_CALL(M) rowsk45(five_, w, rb, rows, nb, xa, M, y, ldy)
#define DEFK45(name, FIVE)                                                                    \
    ATTN__QMV_ENTRY(name, attn__q8act, const int five_ = (FIVE);, ROWSK45_CALL)
DEFK45(mv8_q4_k, 0)
DEFK45(mv8_q5_k, 1)

/* ---- Q6_K: 32 elements per step, groups of 16 in lanes 0-3 and 4-7 -------------------------- */
INLINE void rowsq6(const uint8_t *w, size_t rb, int64_t rows, int64_t nb, const attn__q8act *xa,
                   const int M, float *y, int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 acc[ATTN__QMV_MAX];
        for (int i = 0; i < M; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t k = 0; k < nb; k++, b += 210) {
            for (int p = 0; p < 256; p += 64) _mm_prefetch((const char *)b + PF + p, _MM_HINT_T0);
            const __m256 d = _mm256_set1_ps(attn__h2f(b + 208));
            const __m256 ds[2] = { /* d sc_g, lane g & 7 of ds[g >> 3] */
                _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                     _mm_loadl_epi64((const __m128i *)(const void *)(b + 192))))),
                _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                     _mm_loadl_epi64((const __m128i *)(const void *)(b + 200)))))};
            /* per half superblock (groups 8 h .. 8 h + 7): each 32 elements' dot, its two groups
             * of 16 in lanes 0-3 and 4-7, reduced by two VPHADDD into one vector, even groups in
             * lanes 0-3, odd ones in 4-7 (ORD); the offset 32 times the activation quants' sums
             * of the groups (sq) subtracted as integers; one conversion, one FMA */
            const __m256i ord = _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0);
            const __m256i evn = _mm256_set_epi32(6, 4, 2, 0, 6, 4, 2, 0);
            for (int h = 0; h < 2; h++) {
                __m256i hp[ATTN__QMV_MAX][2], zs[ATTN__QMV_MAX];
                for (int i = 0; i < M; i++) zs[i] = _mm256_setzero_si256(); /* set at even zz */
                for (int zz = 0; zz < 4; zz++) {
                    const int z = 4 * h + zz; /* elements 32 z .. 32 z + 31 */
                    const __m256i v = attn__q6k_ubytes32(b, z); /* kquant_avx2.h */
                    for (int i = 0; i < M; i++) {
                        const __m256i xq = ld256((const uint8_t *)(xa->q + i * xa->ldq + 32 * (8 * k + z)));
                        const __m256i dq = dp(v, xq);
                        if (zz & 1) hp[i][zz >> 1] = _mm256_hadd_epi32(zs[i], dq);
                        else zs[i] = dq;
                    }
                }
                const __m256 dsh = _mm256_permutevar8x32_ps(ds[h], ord);
                for (int i = 0; i < M; i++) {
                    const int64_t g0 = 8 * k + 4 * h; /* the half's first activation block */
                    const __m256i sq = _mm256_permutevar8x32_epi32(
                        _mm256_loadu_si256((const __m256i *)(const void *)(xa->sq + i * 2 * xa->ldb + 2 * g0)), ord);
                    const __m256i t = _mm256_sub_epi32(_mm256_hadd_epi32(hp[i][0], hp[i][1]),
                                                       _mm256_slli_epi32(sq, 5));
                    const __m256 dx = _mm256_permutevar8x32_ps(_mm256_loadu_ps(xa->dsx + i * 2 * xa->ldb + 2 * g0), evn);
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dsh, dx), acc[i]);
                }
            }
        }
        for (int i = 0; i < M; i++) y[i * ldy + r] = attn__hsum8(acc[i]);
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

#include "quant8_k23.h" /* Q2_K, Q3_K */

static const attn__quant_kernels TABLE = {
    Q8_256_NAME,
    {0},
    {0},
    {[ATTN_Q_Q4_0] = mv8_q4_0, [ATTN_Q_Q4_1] = mv8_q4_1, [ATTN_Q_Q5_0] = mv8_q5_0,
     [ATTN_Q_Q5_1] = mv8_q5_1, [ATTN_Q_Q8_0] = mv8_q8_0, [ATTN_Q_Q2_K] = mv8_q2_k,
     [ATTN_Q_Q3_K] = mv8_q3_k, [ATTN_Q_Q4_K] = mv8_q4_k,
     [ATTN_Q_Q5_K] = mv8_q5_k, [ATTN_Q_Q6_K] = mv8_q6_k, [ATTN_Q_IQ4_NL] = mv8_iq4_nl,
     [ATTN_Q_IQ4_XS] = mv8_iq4_xs},
    {0},
    {0},
    {0},
    NULL, /* q16x */
};

#endif
