/* Decode microkernels for AVX-512F (contract in decode.h).
 *
 * qk: blocks of 16 keys; for each group of 4 query rows, 4 x 4 accumulators (one per row and
 *   key; 2 x 8 for a pair of rows, 1 x 16 for a single row) gather the products over D sixteen
 *   lanes at a time, K read in place (a masked load for the D tail; each K vector serves all
 *   the rows of the group), then a transposing reduction (unpack, shuffle, shuffle_f32x4: 15
 *   adds) turns the 16 accumulators into one vector of 16 dot products.  The key block stays
 *   in L1 while the rows of the GQA group run over it, so K comes from memory once.  Keys past
 *   the last full block are done one at a time.  (4 x 4 loads a K vector per 4 FMAs, 1 x 16
 *   per FMA: at R = 4 it ran 2.7x faster, as fast as flash.c's 6 x 64 product.)
 * pv: a register block of rb rows x nv vectors of Dv (rb*nv <= 24 accumulators); each key
 *   loads nv vectors of its V row and broadcasts rb weights.  With one or two rows a block
 *   covers up to 128 values of Dv, so each V row is read whole, once; with more, 6 rows x 64
 *   values (fewer passes over the chunk of V, which then comes from L2).
 * Compiled with -mavx512f; else the table is NULL. */
#include "../decode.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#define KB 16 /* keys per qk block */

/* out lane u = the sum of the 16 lanes of v[u]. */
static inline __attribute__((always_inline)) __m512 reduce16(const __m512 v[16]) {
    __m512 w[8], z[4], u[2];
    for (int k = 0; k < 8; k++) /* per 128-bit quarter: (a0+a2, b0+b2, a1+a3, b1+b3) */
        w[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                             _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; k++) /* per quarter: the quarter's sums of v[4k .. 4k+3] */
        z[k] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int k = 0; k < 2; k++) /* quarters: z[2k] q0+q1, z[2k] q2+q3, z[2k+1] q0+q1, ... */
        u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * k], z[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(z[2 * k], z[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* s[r*lds + u] = q_r . k_u for 4 rows q_r = q + r ldq and the 4 keys k_u = kj + u ldk: 16
 * accumulators, each K vector loaded once for the 4 rows. */
static inline __attribute__((always_inline)) void qk_4x4(const float *q, int64_t ldq,
                                                         const float *kj, int64_t ldk,
                                                         int64_t dfull, __mmask16 tm, float *s,
                                                         int64_t lds) {
    __m512 acc[16];
    for (int u = 0; u < 16; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t d = 0; d < dfull; d += 16) {
        __m512 qv[4];
        for (int r = 0; r < 4; r++) qv[r] = _mm512_loadu_ps(q + r * ldq + d);
        for (int u = 0; u < 4; u++) {
            __m512 kv = _mm512_loadu_ps(kj + u * ldk + d);
            for (int r = 0; r < 4; r++) acc[4 * r + u] = _mm512_fmadd_ps(qv[r], kv, acc[4 * r + u]);
        }
    }
    if (tm) {
        __m512 qv[4];
        for (int r = 0; r < 4; r++) qv[r] = _mm512_loadu_ps(q + r * ldq + dfull);
        for (int u = 0; u < 4; u++) {
            __m512 kv = _mm512_maskz_loadu_ps(tm, kj + u * ldk + dfull);
            for (int r = 0; r < 4; r++) acc[4 * r + u] = _mm512_fmadd_ps(qv[r], kv, acc[4 * r + u]);
        }
    }
    __m512 x = reduce16(acc); /* lanes 4r .. 4r+3: row r */
    _mm_storeu_ps(s, _mm512_extractf32x4_ps(x, 0));
    _mm_storeu_ps(s + lds, _mm512_extractf32x4_ps(x, 1));
    _mm_storeu_ps(s + 2 * lds, _mm512_extractf32x4_ps(x, 2));
    _mm_storeu_ps(s + 3 * lds, _mm512_extractf32x4_ps(x, 3));
}

/* s0[0 .. 8) = q0 . k_u and s1[0 .. 8) = q1 . k_u for the 8 keys k_u = kj + u ldk: 16
 * accumulators, each K vector loaded once for both rows. */
static inline __attribute__((always_inline)) void qk_2x8(const float *q0, const float *q1,
                                                         const float *kj, int64_t ldk,
                                                         int64_t dfull, __mmask16 tm,
                                                         float *s0, float *s1) {
    __m512 acc[16];
    for (int u = 0; u < 16; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t d = 0; d < dfull; d += 16) {
        __m512 a = _mm512_loadu_ps(q0 + d), b = _mm512_loadu_ps(q1 + d);
        for (int u = 0; u < 8; u++) {
            __m512 kv = _mm512_loadu_ps(kj + u * ldk + d);
            acc[u] = _mm512_fmadd_ps(a, kv, acc[u]);
            acc[8 + u] = _mm512_fmadd_ps(b, kv, acc[8 + u]);
        }
    }
    if (tm) {
        __m512 a = _mm512_loadu_ps(q0 + dfull), b = _mm512_loadu_ps(q1 + dfull);
        for (int u = 0; u < 8; u++) {
            __m512 kv = _mm512_maskz_loadu_ps(tm, kj + u * ldk + dfull);
            acc[u] = _mm512_fmadd_ps(a, kv, acc[u]);
            acc[8 + u] = _mm512_fmadd_ps(b, kv, acc[8 + u]);
        }
    }
    __m512 r = reduce16(acc); /* lanes 0-7: row 0, lanes 8-15: row 1 */
    _mm256_storeu_ps(s0, _mm512_castps512_ps256(r));
    __m512 hi = _mm512_shuffle_f32x4(r, r, _MM_SHUFFLE(3, 2, 3, 2));
    _mm256_storeu_ps(s1, _mm512_castps512_ps256(hi));
}

/* s[0 .. 16) = q . k_u for the 16 keys k_u = kj + u ldk: one accumulator per key. */
static inline __attribute__((always_inline)) void qk_1x16(const float *qr, const float *kj,
                                                          int64_t ldk, int64_t dfull,
                                                          __mmask16 tm, float *s) {
    __m512 acc[KB];
    for (int u = 0; u < KB; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t d = 0; d < dfull; d += 16) {
        __m512 qv = _mm512_loadu_ps(qr + d);
        for (int u = 0; u < KB; u++)
            acc[u] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kj + u * ldk + d), acc[u]);
    }
    if (tm) {
        __m512 qv = _mm512_loadu_ps(qr + dfull);
        for (int u = 0; u < KB; u++)
            acc[u] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(tm, kj + u * ldk + dfull), acc[u]);
    }
    _mm512_storeu_ps(s, reduce16(acc));
}

static void qk(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq, const float *k,
               int64_t ldk, float *s, int64_t lds) {
    int64_t dfull = D & ~(int64_t)15;
    __mmask16 tm = (__mmask16)((1u << (D - dfull)) - 1);
    int64_t j = 0;
    for (; j + KB <= n; j += KB) { /* rows by 4, then a pair, then the odd one */
        const float *kj = k + j * ldk;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4)
            for (int u = 0; u < KB; u += 4)
                qk_4x4(q + r * ldq, ldq, kj + u * ldk, ldk, dfull, tm, s + r * lds + j + u, lds);
        for (; r + 2 <= rows; r += 2) {
            const float *q0 = q + r * ldq, *q1 = q0 + ldq;
            float *s0 = s + r * lds + j, *s1 = s0 + lds;
            qk_2x8(q0, q1, kj, ldk, dfull, tm, s0, s1);
            qk_2x8(q0, q1, kj + 8 * ldk, ldk, dfull, tm, s0 + 8, s1 + 8);
        }
        if (r < rows) qk_1x16(q + r * ldq, kj, ldk, dfull, tm, s + r * lds + j);
    }
    for (; j < n; j++) {
        const float *kj = k + j * ldk;
        for (int64_t r = 0; r < rows; r++) {
            const float *qr = q + r * ldq;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t d = 0; d < dfull; d += 16)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(qr + d), _mm512_loadu_ps(kj + d), acc);
            if (tm)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(qr + dfull),
                                      _mm512_maskz_loadu_ps(tm, kj + dfull), acc);
            s[r * lds + j] = _mm512_reduce_add_ps(acc);
        }
    }
}

/* o[r][0 .. 16 nv) = sum_j p[r][j] v[j][0 .. 16 nv) for r < rb; with masked, the last vector
 * of v is read under mask tm.  MR x NV is the shape of the accumulator array: GCC keeps [6][4]
 * and [2][8] in registers (it spilled a [6][8] one, even with only 24 used); it also spills them
 * around a masked load in the loop, hence the unmasked variant for the usual Dv % 16 == 0. */
#define PV_BLOCK(NAME, MR, NV)                                                                \
    static inline __attribute__((always_inline)) void NAME(                                   \
        int rb, int nv, int masked, int64_t n, const float *p, int64_t ldp, const float *v,    \
        int64_t ldv, __mmask16 tm, float *o, int64_t ldo) {                                    \
        __m512 acc[MR][NV];                                                                   \
        for (int r = 0; r < rb; r++)                                                          \
            for (int u = 0; u < nv; u++) acc[r][u] = _mm512_setzero_ps();                     \
        const float *pr[MR];                                                                  \
        for (int r = 0; r < rb; r++) pr[r] = p + r * ldp;                                     \
        for (int64_t j = 0; j < n; j++) {                                                     \
            __m512 vv[NV];                                                                    \
            for (int u = 0; u < nv - 1; u++) vv[u] = _mm512_loadu_ps(v + 16 * u);            \
            vv[nv - 1] = masked ? _mm512_maskz_loadu_ps(tm, v + 16 * (nv - 1))                \
                                : _mm512_loadu_ps(v + 16 * (nv - 1));                         \
            for (int r = 0; r < rb; r++) {                                                    \
                __m512 x = _mm512_set1_ps(*pr[r]++);                                          \
                for (int u = 0; u < nv; u++) acc[r][u] = _mm512_fmadd_ps(x, vv[u], acc[r][u]); \
            }                                                                                 \
            v += ldv;                                                                         \
        }                                                                                     \
        for (int r = 0; r < rb; r++)                                                          \
            for (int u = 0; u < nv; u++) _mm512_storeu_ps(o + r * ldo + 16 * u, acc[r][u]);   \
    }
PV_BLOCK(pv_tall, 6, 4) /* up to 6 rows x 64 values */
PV_BLOCK(pv_wide, 2, 8) /* up to 2 rows x 128 values */

typedef void (*pv_fn)(int64_t, const float *, int64_t, const float *, int64_t, __mmask16,
                      float *, int64_t);
#define PV_INST(KIND, R, V)                                                                   \
    static __attribute__((noinline)) void KIND##_##R##_##V##m(                                \
        int64_t n, const float *p, int64_t ldp, const float *v, int64_t ldv, __mmask16 tm,     \
        float *o, int64_t ldo) {                                                               \
        KIND(R, V, 1, n, p, ldp, v, ldv, tm, o, ldo);                                          \
    }                                                                                         \
    static void KIND##_##R##_##V(int64_t n, const float *p, int64_t ldp, const float *v,       \
                                 int64_t ldv, __mmask16 tm, float *o, int64_t ldo) {           \
        if (tm == 0xffff) KIND(R, V, 0, n, p, ldp, v, ldv, tm, o, ldo);                        \
        else KIND##_##R##_##V##m(n, p, ldp, v, ldv, tm, o, ldo);                               \
    }
#define PV_TALL(R) PV_INST(pv_tall, R, 1) PV_INST(pv_tall, R, 2) PV_INST(pv_tall, R, 3)        \
    PV_INST(pv_tall, R, 4)
#define PV_WIDE(R) PV_INST(pv_wide, R, 1) PV_INST(pv_wide, R, 2) PV_INST(pv_wide, R, 3)        \
    PV_INST(pv_wide, R, 4) PV_INST(pv_wide, R, 5) PV_INST(pv_wide, R, 6)                      \
    PV_INST(pv_wide, R, 7) PV_INST(pv_wide, R, 8)
PV_TALL(1)
PV_TALL(2)
PV_TALL(3)
PV_TALL(4)
PV_TALL(5)
PV_TALL(6)
PV_WIDE(1)
PV_WIDE(2)
#define PV_TROW(R) {pv_tall_##R##_1, pv_tall_##R##_2, pv_tall_##R##_3, pv_tall_##R##_4}
#define PV_WROW(R)                                                                            \
    {pv_wide_##R##_1, pv_wide_##R##_2, pv_wide_##R##_3, pv_wide_##R##_4, pv_wide_##R##_5,     \
     pv_wide_##R##_6, pv_wide_##R##_7, pv_wide_##R##_8}
static const pv_fn tall_table[6][4] = {PV_TROW(1), PV_TROW(2), PV_TROW(3),
                                       PV_TROW(4), PV_TROW(5), PV_TROW(6)};
static const pv_fn wide_table[2][8] = {PV_WROW(1), PV_WROW(2)};

static void pv(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp, const float *v,
               int64_t ldv, float *o, int64_t ldo) {
    int64_t nvec = (Dv + 15) / 16;
    /* one or two rows: blocks of 8 vectors, so that each V row is read whole, once; more rows:
     * blocks of 4 vectors and 6 rows, 24 FMAs per 4 loads of V (from L2, once per block) */
    int wide = rows <= 2, bw = wide ? 8 : 4, rmax = wide ? 2 : 6;
    for (int64_t e0 = 0; e0 < nvec; e0 += bw) {
        int nv = (int)(nvec - e0 < bw ? nvec - e0 : bw);
        int64_t last = Dv - 16 * (e0 + nv - 1); /* values in the block's last vector */
        __mmask16 tm = last >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << last) - 1);
        for (int64_t r0 = 0; r0 < rows; r0 += rmax) {
            int rb = (int)(rows - r0 < rmax ? rows - r0 : rmax);
            pv_fn fn = wide ? wide_table[rb - 1][nv - 1] : tall_table[rb - 1][nv - 1];
            fn(n, p + r0 * ldp, ldp, v + 16 * e0, ldv, tm, o + r0 * ldo + 16 * e0, ldo);
        }
    }
}

static const attn__decode_kernels kernels = {2 /* ATTN__ISA_AVX512 */, qk, pv};

const attn__decode_kernels *attn__decode_kernels_avx512(void) { return &kernels; }

#else
const attn__decode_kernels *attn__decode_kernels_avx512(void) { return NULL; }
#endif
