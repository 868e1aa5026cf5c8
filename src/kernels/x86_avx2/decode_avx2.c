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
 * bf16 K and V (qk_bf16, pv_bf16): the same kernels, each load of 8 values widened in
 *   registers (zero extension to 32 bits, shift into the top half: exact); written once over
 *   `const void *` with a constant bf flag and instantiated for each storage type.
 * Compiled with -mavx2 -mfma; else the table is NULL. */
#include <string.h>

#include "../decode.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define KB 8 /* keys per qk block */

/* Lanes i < cnt set (cnt in [0, 8]): the mask of maskload. */
static inline __m256i lanes_below(int64_t cnt) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Element i of p, fp32 (bf = 0) or bf16 (bf = 1). */
static inline __attribute__((always_inline)) const void *at(const void *p, int64_t i, int bf) {
    return (const char *)p + i * (bf ? 2 : 4);
}

/* 8 values at p as fp32: bf16 widened exactly. */
static inline __attribute__((always_inline)) __m256 ld8(const void *p, int bf) {
    if (!bf) return _mm256_loadu_ps(p);
    __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}

/* The first cnt values of p (cnt < 8; tm = lanes_below(cnt)), zeros above; nothing past them
 * is read.  There is no 16-bit maskload: bf16 goes through a zeroed copy (tails only). */
static inline __attribute__((always_inline)) __m256 ld8_tail(const void *p, __m256i tm,
                                                             int64_t cnt, int bf) {
    if (!bf) return _mm256_maskload_ps(p, tm);
    attn__bf16 t[8] = {0};
    memcpy(t, p, sizeof(attn__bf16) * (size_t)cnt);
    return ld8(t, 1);
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
                                                         const void *kj, int64_t ldk,
                                                         int64_t dfull, int64_t tail,
                                                         __m256i tm, float *s, int64_t lds,
                                                         int bf) {
    __m256 acc[8];
    for (int u = 0; u < 8; u++) acc[u] = _mm256_setzero_ps();
    for (int64_t d = 0; d < dfull; d += 8) {
        __m256 a = _mm256_loadu_ps(q0 + d), b = _mm256_loadu_ps(q1 + d);
        for (int u = 0; u < 4; u++) {
            __m256 kv = ld8(at(kj, u * ldk + d, bf), bf);
            acc[u] = _mm256_fmadd_ps(a, kv, acc[u]);
            acc[4 + u] = _mm256_fmadd_ps(b, kv, acc[4 + u]);
        }
    }
    if (tail) {
        __m256 a = _mm256_loadu_ps(q0 + dfull), b = _mm256_loadu_ps(q1 + dfull);
        for (int u = 0; u < 4; u++) {
            __m256 kv = ld8_tail(at(kj, u * ldk + dfull, bf), tm, tail, bf);
            acc[u] = _mm256_fmadd_ps(a, kv, acc[u]);
            acc[4 + u] = _mm256_fmadd_ps(b, kv, acc[4 + u]);
        }
    }
    __m256 x = reduce8(acc); /* lanes 0-3: row 0, lanes 4-7: row 1 */
    _mm_storeu_ps(s, _mm256_castps256_ps128(x));
    _mm_storeu_ps(s + lds, _mm256_extractf128_ps(x, 1));
}

static inline __attribute__((always_inline)) void qk_any(int64_t rows, int64_t n, int64_t D,
                                                         const float *q, int64_t ldq,
                                                         const void *k, int64_t ldk, float *s,
                                                         int64_t lds, int bf) {
    int64_t dfull = D & ~(int64_t)7, tail = D - dfull;
    __m256i tm = lanes_below(tail);
    int64_t j = 0;
    for (; j + KB <= n; j += KB) { /* rows in pairs (2 x 4 keys), then the odd one (1 x 8) */
        const void *kj = at(k, j * ldk, bf);
        int64_t r = 0;
        for (; r + 2 <= rows; r += 2)
            for (int u = 0; u < KB; u += 4)
                qk_2x4(q + r * ldq, q + (r + 1) * ldq, at(kj, u * ldk, bf), ldk, dfull, tail, tm,
                       s + r * lds + j + u, lds, bf);
        for (; r < rows; r++) {
            const float *qr = q + r * ldq;
            __m256 acc[KB];
            for (int u = 0; u < KB; u++) acc[u] = _mm256_setzero_ps();
            for (int64_t d = 0; d < dfull; d += 8) {
                __m256 qv = _mm256_loadu_ps(qr + d);
                for (int u = 0; u < KB; u++)
                    acc[u] = _mm256_fmadd_ps(qv, ld8(at(kj, u * ldk + d, bf), bf), acc[u]);
            }
            if (tail) {
                __m256 qv = _mm256_loadu_ps(qr + dfull);
                for (int u = 0; u < KB; u++)
                    acc[u] = _mm256_fmadd_ps(
                        qv, ld8_tail(at(kj, u * ldk + dfull, bf), tm, tail, bf), acc[u]);
            }
            _mm256_storeu_ps(s + r * lds + j, reduce8(acc));
        }
    }
    for (; j < n; j++) {
        const void *kj = at(k, j * ldk, bf);
        for (int64_t r = 0; r < rows; r++) {
            const float *qr = q + r * ldq;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t d = 0; d < dfull; d += 8)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d), ld8(at(kj, d, bf), bf), acc);
            if (tail)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(qr + dfull),
                                      ld8_tail(at(kj, dfull, bf), tm, tail, bf), acc);
            s[r * lds + j] = hsum8(acc);
        }
    }
}

static void qk(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq, const float *k,
               int64_t ldk, float *s, int64_t lds) {
    qk_any(rows, n, D, q, ldq, k, ldk, s, lds, 0);
}

static void qk_bf16(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq,
                    const attn__bf16 *k, int64_t ldk, float *s, int64_t lds) {
    qk_any(rows, n, D, q, ldq, k, ldk, s, lds, 1);
}

/* o[r][0 .. 8 nv) = sum_j p[r][j] v[j][0 .. 8 nv) for r < rb; with masked, the last vector of
 * v is read under mask tm.  MR x NV is the shape of the accumulator array: each shape pv uses
 * has its own, which GCC keeps in registers (it spills a larger, partly used one to the stack,
 * and spills around a masked load in the loop: hence the unmasked variant for Dv % 8 == 0). */
#define PV_BLOCK(NAME, MR, NV)                                                                \
    static inline __attribute__((always_inline)) void NAME(                                   \
        int rb, int nv, int masked, int64_t n, const float *p, int64_t ldp, const void *v,     \
        int64_t ldv, __m256i tm, int64_t cnt, float *o, int64_t ldo, int bf) {                 \
        __m256 acc[MR][NV];                                                                   \
        for (int r = 0; r < rb; r++)                                                          \
            for (int u = 0; u < nv; u++) acc[r][u] = _mm256_setzero_ps();                     \
        const float *pr[MR];                                                                  \
        for (int r = 0; r < rb; r++) pr[r] = p + r * ldp;                                     \
        for (int64_t j = 0; j < n; j++) {                                                     \
            __m256 vv[NV];                                                                    \
            for (int u = 0; u < nv - 1; u++) vv[u] = ld8(at(v, 8 * u, bf), bf);              \
            vv[nv - 1] = masked ? ld8_tail(at(v, 8 * (nv - 1), bf), tm, cnt, bf)              \
                                : ld8(at(v, 8 * (nv - 1), bf), bf);                           \
            for (int r = 0; r < rb; r++) {                                                    \
                __m256 x = _mm256_broadcast_ss(pr[r]++);                                      \
                for (int u = 0; u < nv; u++) acc[r][u] = _mm256_fmadd_ps(x, vv[u], acc[r][u]); \
            }                                                                                 \
            v = at(v, ldv, bf);                                                               \
        }                                                                                     \
        for (int r = 0; r < rb; r++)                                                          \
            for (int u = 0; u < nv; u++) _mm256_storeu_ps(o + r * ldo + 8 * u, acc[r][u]);    \
    }
/* accumulators + V vectors + a broadcast within the 16 registers */
PV_BLOCK(pv_62, 6, 2) /* up to 6 rows x 16 values */
PV_BLOCK(pv_43, 4, 3) /* up to 4 rows x 24 values */
PV_BLOCK(pv_24, 2, 4) /* up to 2 rows x 32 values */
PV_BLOCK(pv_18, 1, 8) /* one row x 64 values */

/* KIND_R_V (fp32 V) and KIND_R_Vb (bf16 V): R rows, V vectors; masked variants apart */
#define PV_INST1(KIND, R, V, SUF, BF)                                                         \
    static __attribute__((noinline)) void KIND##_##R##_##V##SUF##m(                           \
        int64_t n, const float *p, int64_t ldp, const void *v, int64_t ldv, __m256i tm,        \
        int64_t cnt, float *o, int64_t ldo) {                                                  \
        KIND(R, V, 1, n, p, ldp, v, ldv, tm, cnt, o, ldo, BF);                                 \
    }                                                                                         \
    static void KIND##_##R##_##V##SUF(int64_t n, const float *p, int64_t ldp, const void *v,   \
                                      int64_t ldv, __m256i tm, int64_t cnt, float *o,          \
                                      int64_t ldo) {                                           \
        if (cnt >= 8) KIND(R, V, 0, n, p, ldp, v, ldv, tm, cnt, o, ldo, BF);                   \
        else KIND##_##R##_##V##SUF##m(n, p, ldp, v, ldv, tm, cnt, o, ldo);                     \
    }
#define PV_INST(KIND, R, V) PV_INST1(KIND, R, V, , 0) PV_INST1(KIND, R, V, b, 1)
PV_INST(pv_18, 1, 1) PV_INST(pv_18, 1, 2) PV_INST(pv_18, 1, 3) PV_INST(pv_18, 1, 4)
PV_INST(pv_18, 1, 5) PV_INST(pv_18, 1, 6) PV_INST(pv_18, 1, 7) PV_INST(pv_18, 1, 8)
PV_INST(pv_62, 2, 1) PV_INST(pv_62, 3, 1) PV_INST(pv_62, 4, 1) PV_INST(pv_62, 5, 1)
PV_INST(pv_62, 6, 1)
PV_INST(pv_62, 2, 2) PV_INST(pv_62, 3, 2) PV_INST(pv_62, 4, 2) PV_INST(pv_62, 5, 2)
PV_INST(pv_62, 6, 2)
PV_INST(pv_43, 2, 3) PV_INST(pv_43, 3, 3) PV_INST(pv_43, 4, 3)
PV_INST(pv_24, 2, 4)
typedef void (*pv_fn)(int64_t, const float *, int64_t, const void *, int64_t, __m256i, int64_t,
                      float *, int64_t);
/* [bf][rows - 1][nv - 1] */
#define PV_TABLE(S)                                                                           \
    {{pv_18_1_1##S, pv_18_1_2##S, pv_18_1_3##S, pv_18_1_4##S, pv_18_1_5##S, pv_18_1_6##S,     \
      pv_18_1_7##S, pv_18_1_8##S},                                                            \
     {pv_62_2_1##S, pv_62_2_2##S, pv_43_2_3##S, pv_24_2_4##S, NULL, NULL, NULL, NULL},        \
     {pv_62_3_1##S, pv_62_3_2##S, pv_43_3_3##S, NULL, NULL, NULL, NULL, NULL},                \
     {pv_62_4_1##S, pv_62_4_2##S, pv_43_4_3##S, NULL, NULL, NULL, NULL, NULL},                \
     {pv_62_5_1##S, pv_62_5_2##S, NULL, NULL, NULL, NULL, NULL, NULL},                        \
     {pv_62_6_1##S, pv_62_6_2##S, NULL, NULL, NULL, NULL, NULL, NULL}}
static const pv_fn pv_table[2][6][8] = {PV_TABLE(), PV_TABLE(b)};

static void pv_any(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp,
                   const void *v, int64_t ldv, float *o, int64_t ldo, int bf) {
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
            pv_table[bf][rb - 1][nv - 1](n, p + r0 * ldp, ldp, at(v, 8 * e0, bf), ldv, tm, last,
                                         o + r0 * ldo + 8 * e0, ldo);
        }
    }
}

static void pv(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp, const float *v,
               int64_t ldv, float *o, int64_t ldo) {
    pv_any(rows, n, Dv, p, ldp, v, ldv, o, ldo, 0);
}

static void pv_bf16(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp,
                    const attn__bf16 *v, int64_t ldv, float *o, int64_t ldo) {
    pv_any(rows, n, Dv, p, ldp, v, ldv, o, ldo, 1);
}

static const attn__decode_kernels kernels = {1 /* ATTN__ISA_AVX2 */, qk, pv, qk_bf16, pv_bf16};

const attn__decode_kernels *attn__decode_kernels_avx2(void) { return &kernels; }

#else
const attn__decode_kernels *attn__decode_kernels_avx2(void) { return NULL; }
#endif
