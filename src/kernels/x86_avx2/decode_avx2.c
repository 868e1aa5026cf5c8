/* Decode microkernels for AVX2 + FMA (contract in decode.h).
 *
 * qk: blocks of 8 keys; for each pair of query rows, 2 x 4 accumulators (one per row and key;
 *   a single row: 8 keys) gather the products over D eight lanes at a time, K read in place
 *   (maskload for the D tail; each K vector serves both rows), then a transposing reduction
 *   (hadd, hadd, permute2f128) gives one vector of 8 dot products.  The key block stays in L1
 *   while the rows of the GQA group run over it.  Keys past the last full block are done one
 *   at a time.
 * pv: a register block of rb rows x nv vectors of Dv (at most 12 accumulators with several
 *   rows; one row takes up to 8 vectors); each key loads its V row's vectors and broadcasts rb
 *   weights.
 * Compiled with -mavx2 -mfma; else the table is NULL. */
#include "../decode.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define KB 8 /* keys per qk block */

/* Lanes i < cnt set (cnt in [0, 8]): the mask of maskload. */
static inline __m256i lanes_below(int64_t cnt) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* out lane u = the sum of the 8 lanes of v[u]. */
static inline __attribute__((always_inline)) __m256 reduce8(const __m256 v[8]) {
    __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    /* a: (v0..v3 sums of the low halves | of the high halves); b likewise for v4..v7 */
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

static float hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

/* s[u] = q0 . k_u and s[lds + u] = q1 . k_u for the 4 keys k_u = kj + u ldk: 8 accumulators,
 * each K vector loaded once for both rows. */
static inline __attribute__((always_inline)) void qk_2x4(const float *q0, const float *q1,
                                                         const float *kj, int64_t ldk,
                                                         int64_t dfull, int64_t tail,
                                                         __m256i tm, float *s, int64_t lds) {
    __m256 acc[8];
    for (int u = 0; u < 8; u++) acc[u] = _mm256_setzero_ps();
    for (int64_t d = 0; d < dfull; d += 8) {
        __m256 a = _mm256_loadu_ps(q0 + d), b = _mm256_loadu_ps(q1 + d);
        for (int u = 0; u < 4; u++) {
            __m256 kv = _mm256_loadu_ps(kj + u * ldk + d);
            acc[u] = _mm256_fmadd_ps(a, kv, acc[u]);
            acc[4 + u] = _mm256_fmadd_ps(b, kv, acc[4 + u]);
        }
    }
    if (tail) {
        __m256 a = _mm256_loadu_ps(q0 + dfull), b = _mm256_loadu_ps(q1 + dfull);
        for (int u = 0; u < 4; u++) {
            __m256 kv = _mm256_maskload_ps(kj + u * ldk + dfull, tm);
            acc[u] = _mm256_fmadd_ps(a, kv, acc[u]);
            acc[4 + u] = _mm256_fmadd_ps(b, kv, acc[4 + u]);
        }
    }
    __m256 x = reduce8(acc); /* lanes 0-3: row 0, lanes 4-7: row 1 */
    _mm_storeu_ps(s, _mm256_castps256_ps128(x));
    _mm_storeu_ps(s + lds, _mm256_extractf128_ps(x, 1));
}

static void qk(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq, const float *k,
               int64_t ldk, float *s, int64_t lds) {
    int64_t dfull = D & ~(int64_t)7, tail = D - dfull;
    __m256i tm = lanes_below(tail);
    int64_t j = 0;
    for (; j + KB <= n; j += KB) { /* rows in pairs (2 x 4 keys), then the odd one (1 x 8) */
        const float *kj = k + j * ldk;
        int64_t r = 0;
        for (; r + 2 <= rows; r += 2)
            for (int u = 0; u < KB; u += 4)
                qk_2x4(q + r * ldq, q + (r + 1) * ldq, kj + u * ldk, ldk, dfull, tail, tm,
                       s + r * lds + j + u, lds);
        for (; r < rows; r++) {
            const float *qr = q + r * ldq;
            __m256 acc[KB];
            for (int u = 0; u < KB; u++) acc[u] = _mm256_setzero_ps();
            for (int64_t d = 0; d < dfull; d += 8) {
                __m256 qv = _mm256_loadu_ps(qr + d);
                for (int u = 0; u < KB; u++)
                    acc[u] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kj + u * ldk + d), acc[u]);
            }
            if (tail) {
                __m256 qv = _mm256_loadu_ps(qr + dfull);
                for (int u = 0; u < KB; u++)
                    acc[u] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(kj + u * ldk + dfull, tm),
                                             acc[u]);
            }
            _mm256_storeu_ps(s + r * lds + j, reduce8(acc));
        }
    }
    for (; j < n; j++) {
        const float *kj = k + j * ldk;
        for (int64_t r = 0; r < rows; r++) {
            const float *qr = q + r * ldq;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t d = 0; d < dfull; d += 8)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d), _mm256_loadu_ps(kj + d), acc);
            if (tail)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(qr + dfull),
                                      _mm256_maskload_ps(kj + dfull, tm), acc);
            s[r * lds + j] = hsum8(acc);
        }
    }
}

/* o[r][0 .. 8 nv) = sum_j p[r][j] v[j][0 .. 8 nv) for r < rb; with masked, the last vector of
 * v is read under mask tm.  MR x NV is the shape of the accumulator array: each shape pv uses
 * has its own, which GCC keeps in registers (it spills a larger, partly used one to the stack,
 * and spills around a masked load in the loop: hence the unmasked variant for Dv % 8 == 0). */
#define PV_BLOCK(NAME, MR, NV)                                                                \
    static inline __attribute__((always_inline)) void NAME(                                   \
        int rb, int nv, int masked, int64_t n, const float *p, int64_t ldp, const float *v,    \
        int64_t ldv, __m256i tm, float *o, int64_t ldo) {                                      \
        __m256 acc[MR][NV];                                                                   \
        for (int r = 0; r < rb; r++)                                                          \
            for (int u = 0; u < nv; u++) acc[r][u] = _mm256_setzero_ps();                     \
        const float *pr[MR];                                                                  \
        for (int r = 0; r < rb; r++) pr[r] = p + r * ldp;                                     \
        for (int64_t j = 0; j < n; j++) {                                                     \
            __m256 vv[NV];                                                                    \
            for (int u = 0; u < nv - 1; u++) vv[u] = _mm256_loadu_ps(v + 8 * u);             \
            vv[nv - 1] = masked ? _mm256_maskload_ps(v + 8 * (nv - 1), tm)                    \
                                : _mm256_loadu_ps(v + 8 * (nv - 1));                          \
            for (int r = 0; r < rb; r++) {                                                    \
                __m256 x = _mm256_broadcast_ss(pr[r]++);                                      \
                for (int u = 0; u < nv; u++) acc[r][u] = _mm256_fmadd_ps(x, vv[u], acc[r][u]); \
            }                                                                                 \
            v += ldv;                                                                         \
        }                                                                                     \
        for (int r = 0; r < rb; r++)                                                          \
            for (int u = 0; u < nv; u++) _mm256_storeu_ps(o + r * ldo + 8 * u, acc[r][u]);    \
    }
/* accumulators + V vectors + a broadcast within the 16 registers */
PV_BLOCK(pv_62, 6, 2) /* up to 6 rows x 16 values */
PV_BLOCK(pv_43, 4, 3) /* up to 4 rows x 24 values */
PV_BLOCK(pv_24, 2, 4) /* up to 2 rows x 32 values */
PV_BLOCK(pv_18, 1, 8) /* one row x 64 values */

#define PV_INST(KIND, R, V)                                                                   \
    static __attribute__((noinline)) void KIND##_##R##_##V##m(                                \
        int64_t n, const float *p, int64_t ldp, const float *v, int64_t ldv, __m256i tm,       \
        float *o, int64_t ldo) {                                                               \
        KIND(R, V, 1, n, p, ldp, v, ldv, tm, o, ldo);                                          \
    }                                                                                         \
    static void KIND##_##R##_##V(int64_t n, const float *p, int64_t ldp, const float *v,       \
                                 int64_t ldv, __m256i tm, int full, float *o, int64_t ldo) {   \
        if (full) KIND(R, V, 0, n, p, ldp, v, ldv, tm, o, ldo);                                \
        else KIND##_##R##_##V##m(n, p, ldp, v, ldv, tm, o, ldo);                               \
    }
PV_INST(pv_18, 1, 1) PV_INST(pv_18, 1, 2) PV_INST(pv_18, 1, 3) PV_INST(pv_18, 1, 4)
PV_INST(pv_18, 1, 5) PV_INST(pv_18, 1, 6) PV_INST(pv_18, 1, 7) PV_INST(pv_18, 1, 8)
PV_INST(pv_62, 2, 1) PV_INST(pv_62, 3, 1) PV_INST(pv_62, 4, 1) PV_INST(pv_62, 5, 1)
PV_INST(pv_62, 6, 1)
PV_INST(pv_62, 2, 2) PV_INST(pv_62, 3, 2) PV_INST(pv_62, 4, 2) PV_INST(pv_62, 5, 2)
PV_INST(pv_62, 6, 2)
PV_INST(pv_43, 2, 3) PV_INST(pv_43, 3, 3) PV_INST(pv_43, 4, 3)
PV_INST(pv_24, 2, 4)
typedef void (*pv_fn)(int64_t, const float *, int64_t, const float *, int64_t, __m256i, int,
                       float *, int64_t);
/* [rows - 1][nv - 1] */
static const pv_fn pv_table[6][8] = {
    {pv_18_1_1, pv_18_1_2, pv_18_1_3, pv_18_1_4, pv_18_1_5, pv_18_1_6, pv_18_1_7, pv_18_1_8},
    {pv_62_2_1, pv_62_2_2, pv_43_2_3, pv_24_2_4, NULL, NULL, NULL, NULL},
    {pv_62_3_1, pv_62_3_2, pv_43_3_3, NULL, NULL, NULL, NULL, NULL},
    {pv_62_4_1, pv_62_4_2, pv_43_4_3, NULL, NULL, NULL, NULL, NULL},
    {pv_62_5_1, pv_62_5_2, NULL, NULL, NULL, NULL, NULL, NULL},
    {pv_62_6_1, pv_62_6_2, NULL, NULL, NULL, NULL, NULL, NULL}};

static void pv(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp, const float *v,
               int64_t ldv, float *o, int64_t ldo) {
    int64_t nvec = (Dv + 7) / 8;
    /* one row: blocks of 8 vectors (each V row read in two halves of 64 values at most);
     * several rows: at most 4 vectors (2 rows of 4, 4 rows of 3, 6 rows of 2 or 1) */
    int bw = rows == 1 ? 8 : 4;
    for (int64_t e0 = 0; e0 < nvec; e0 += bw) {
        int nv = (int)(nvec - e0 < bw ? nvec - e0 : bw);
        int64_t last = Dv - 8 * (e0 + nv - 1); /* values in the block's last vector */
        __m256i tm = lanes_below(last);
        int rmax = rows == 1 ? 1 : nv <= 2 ? 6 : nv == 3 ? 4 : 2;
        for (int64_t r0 = 0; r0 < rows; r0 += rmax) {
            int rb = (int)(rows - r0 < rmax ? rows - r0 : rmax);
            pv_table[rb - 1][nv - 1](n, p + r0 * ldp, ldp, v + 8 * e0, ldv, tm, last >= 8,
                                     o + r0 * ldo + 8 * e0, ldo);
        }
    }
}

static const attn__decode_kernels kernels = {1 /* ATTN__ISA_AVX2 */, qk, pv};

const attn__decode_kernels *attn__decode_kernels_avx2(void) { return &kernels; }

#else
const attn__decode_kernels *attn__decode_kernels_avx2(void) { return NULL; }
#endif
