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
 * bf16 K and V (qk_bf16, pv_bf16): the same kernels on bf16 data widened in registers
 *   (exact), then fp32 FMAs.  Where D (or the block of Dv) allows, 32 values at a time: one
 *   64-byte load, the even elements by a shift into the top half of each 32-bit lane, the odd
 *   ones by masking off the low half (ld32_pairs); qk splits the q rows the same way, pv keeps
 *   even and odd accumulators and interleaves them at the store.  The rest goes 16 values at
 *   a time (zero extension and shift).  On the Xeon measured VDPBF16PS issues at a quarter
 *   of the FMA instruction rate (flash.h); the pairs cost two single-cycle ops and two FMAs
 *   per 64 bytes, against four and two for 16-value widening, which ran 1.3x slower with the
 *   data in L2.  The kernels are written once over `const void *` with a constant bf flag and
 *   instantiated for each storage type.
 * Compiled with -mavx512f; else the table is NULL. */
#include <string.h>

#include "../decode.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#define KB 16 /* keys per qk block */
/* Software prefetch distances: qk, QK_PF blocks of KB keys ahead; pv, PV_PF keys ahead.  bf16
 * decode on one thread (S = 32768, D = 128, another job on the machine) read K and V about
 * 20% faster with them (2 to 8 blocks and 16 to 64 keys within noise of each other); fp32
 * unchanged.  The hardware prefetchers stop at each 4 KiB page, one 16-key block of K in
 * bf16, and the widening's extra work otherwise delays the next misses. */
#define QK_PF 4
#define PV_PF 32

/* Element i of p, fp32 (bf = 0) or bf16 (bf = 1). */
static inline __attribute__((always_inline)) const void *at(const void *p, int64_t i, int bf) {
    return (const char *)p + i * (bf ? 2 : 4);
}

/* 16 values at p as fp32: bf16 widened exactly. */
static inline __attribute__((always_inline)) __m512 ld16(const void *p, int bf) {
    if (!bf) return _mm512_loadu_ps(p);
    __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

/* The values of p under the low-bits mask tm, zeros above; nothing past them is read.
 * AVX-512F has no 16-bit masked load: bf16 goes through a zeroed copy (tails of D only). */
static inline __attribute__((always_inline)) __m512 ld16_tail(const void *p, __mmask16 tm,
                                                              int bf) {
    if (!bf) return _mm512_maskz_loadu_ps(tm, p);
    attn__bf16 t[16] = {0};
    memcpy(t, p, sizeof(attn__bf16) * (size_t)__builtin_popcount(tm));
    return ld16(t, 1);
}

/* bf16 in pairs: the 32 values at p as two fp32 vectors, *ev the even elements (the low
 * halves of the 32-bit lanes, shifted up) and *od the odd ones (the high halves, masked): one
 * load and two single-cycle ops for 32 values, against two of each for ld16. */
static inline __attribute__((always_inline)) void ld32_pairs(const void *p, __m512 *ev,
                                                             __m512 *od) {
    __m512i x = _mm512_loadu_si512(p);
    *ev = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    *od = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u)));
}

/* q[0 .. 32) split the same way: the even and the odd elements. */
static inline __attribute__((always_inline)) void split_q(const float *q, __m512 *ev,
                                                          __m512 *od) {
    __m512 a = _mm512_loadu_ps(q), b = _mm512_loadu_ps(q + 16);
    *ev = _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
    *od = _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
}

/* The inverse: values [0, 16) (half 0) or [16, 32) (half 1) from even and odd elements. */
static inline __attribute__((always_inline)) __m512 merge_pairs(__m512 ev, __m512 od,
                                                              int half) {
    __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    return _mm512_permutex2var_ps(ev, half ? hi : lo, od);
}

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
                                                         const void *kj, int64_t ldk,
                                                         int64_t dfull, __mmask16 tm, float *s,
                                                         int64_t lds, int bf) {
    __m512 acc[16];
    for (int u = 0; u < 16; u++) acc[u] = _mm512_setzero_ps();
    int64_t d = 0;
    for (; bf && d + 32 <= dfull; d += 32) { /* bf16: 32 values per step, in pairs */
        __m512 qe[4], qo[4];
        for (int r = 0; r < 4; r++) split_q(q + r * ldq + d, &qe[r], &qo[r]);
        for (int u = 0; u < 4; u++) {
            __m512 ke, ko;
            ld32_pairs(at(kj, u * ldk + d, bf), &ke, &ko);
            for (int r = 0; r < 4; r++) {
                acc[4 * r + u] = _mm512_fmadd_ps(qe[r], ke, acc[4 * r + u]);
                acc[4 * r + u] = _mm512_fmadd_ps(qo[r], ko, acc[4 * r + u]);
            }
        }
    }
    for (; d < dfull; d += 16) {
        __m512 qv[4];
        for (int r = 0; r < 4; r++) qv[r] = _mm512_loadu_ps(q + r * ldq + d);
        for (int u = 0; u < 4; u++) {
            __m512 kv = ld16(at(kj, u * ldk + d, bf), bf);
            for (int r = 0; r < 4; r++) acc[4 * r + u] = _mm512_fmadd_ps(qv[r], kv, acc[4 * r + u]);
        }
    }
    if (tm) {
        __m512 qv[4];
        for (int r = 0; r < 4; r++) qv[r] = _mm512_loadu_ps(q + r * ldq + dfull);
        for (int u = 0; u < 4; u++) {
            __m512 kv = ld16_tail(at(kj, u * ldk + dfull, bf), tm, bf);
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
                                                         const void *kj, int64_t ldk,
                                                         int64_t dfull, __mmask16 tm,
                                                         float *s0, float *s1, int bf) {
    __m512 acc[16];
    for (int u = 0; u < 16; u++) acc[u] = _mm512_setzero_ps();
    int64_t d = 0;
    for (; bf && d + 32 <= dfull; d += 32) { /* bf16: 32 values per step, in pairs */
        __m512 ae, ao, be, bo;
        split_q(q0 + d, &ae, &ao), split_q(q1 + d, &be, &bo);
        for (int u = 0; u < 8; u++) {
            __m512 ke, ko;
            ld32_pairs(at(kj, u * ldk + d, bf), &ke, &ko);
            acc[u] = _mm512_fmadd_ps(ao, ko, _mm512_fmadd_ps(ae, ke, acc[u]));
            acc[8 + u] = _mm512_fmadd_ps(bo, ko, _mm512_fmadd_ps(be, ke, acc[8 + u]));
        }
    }
    for (; d < dfull; d += 16) {
        __m512 a = _mm512_loadu_ps(q0 + d), b = _mm512_loadu_ps(q1 + d);
        for (int u = 0; u < 8; u++) {
            __m512 kv = ld16(at(kj, u * ldk + d, bf), bf);
            acc[u] = _mm512_fmadd_ps(a, kv, acc[u]);
            acc[8 + u] = _mm512_fmadd_ps(b, kv, acc[8 + u]);
        }
    }
    if (tm) {
        __m512 a = _mm512_loadu_ps(q0 + dfull), b = _mm512_loadu_ps(q1 + dfull);
        for (int u = 0; u < 8; u++) {
            __m512 kv = ld16_tail(at(kj, u * ldk + dfull, bf), tm, bf);
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
static inline __attribute__((always_inline)) void qk_1x16(const float *qr, const void *kj,
                                                          int64_t ldk, int64_t dfull,
                                                          __mmask16 tm, float *s, int bf) {
    __m512 acc[KB];
    for (int u = 0; u < KB; u++) acc[u] = _mm512_setzero_ps();
    int64_t d = 0;
    for (; bf && d + 32 <= dfull; d += 32) { /* bf16: 32 values per step, in pairs */
        __m512 qe, qo;
        split_q(qr + d, &qe, &qo);
        for (int u = 0; u < KB; u++) {
            __m512 ke, ko;
            ld32_pairs(at(kj, u * ldk + d, bf), &ke, &ko);
            acc[u] = _mm512_fmadd_ps(qo, ko, _mm512_fmadd_ps(qe, ke, acc[u]));
        }
    }
    for (; d < dfull; d += 16) {
        __m512 qv = _mm512_loadu_ps(qr + d);
        for (int u = 0; u < KB; u++)
            acc[u] = _mm512_fmadd_ps(qv, ld16(at(kj, u * ldk + d, bf), bf), acc[u]);
    }
    if (tm) {
        __m512 qv = _mm512_loadu_ps(qr + dfull);
        for (int u = 0; u < KB; u++)
            acc[u] = _mm512_fmadd_ps(qv, ld16_tail(at(kj, u * ldk + dfull, bf), tm, bf), acc[u]);
    }
    _mm512_storeu_ps(s, reduce16(acc));
}

static inline __attribute__((always_inline)) void qk_any(int64_t rows, int64_t n, int64_t D,
                                                         const float *q, int64_t ldq,
                                                         const void *k, int64_t ldk, float *s,
                                                         int64_t lds, int bf) {
    int64_t dfull = D & ~(int64_t)15;
    __mmask16 tm = (__mmask16)((1u << (D - dfull)) - 1);
    int64_t j = 0;
    int64_t rowb = D * (bf ? 2 : 4);
    for (; j + KB <= n; j += KB) { /* rows by 4, then a pair, then the odd one */
        const void *kj = at(k, j * ldk, bf);
        if (j + (QK_PF + 1) * KB <= n) /* the rows of block j + QK_PF, every cache line */
            for (int u = 0; u < KB; u++) {
                const char *pf = at(kj, (QK_PF * KB + u) * ldk, bf);
                for (int64_t o = 0; o < rowb; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
            }
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4)
            for (int u = 0; u < KB; u += 4)
                qk_4x4(q + r * ldq, ldq, at(kj, u * ldk, bf), ldk, dfull, tm,
                       s + r * lds + j + u, lds, bf);
        for (; r + 2 <= rows; r += 2) {
            const float *q0 = q + r * ldq, *q1 = q0 + ldq;
            float *s0 = s + r * lds + j, *s1 = s0 + lds;
            qk_2x8(q0, q1, kj, ldk, dfull, tm, s0, s1, bf);
            qk_2x8(q0, q1, at(kj, 8 * ldk, bf), ldk, dfull, tm, s0 + 8, s1 + 8, bf);
        }
        if (r < rows) qk_1x16(q + r * ldq, kj, ldk, dfull, tm, s + r * lds + j, bf);
    }
    for (; j < n; j++) {
        const void *kj = at(k, j * ldk, bf);
        for (int64_t r = 0; r < rows; r++) {
            const float *qr = q + r * ldq;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t d = 0; d < dfull; d += 16)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(qr + d), ld16(at(kj, d, bf), bf), acc);
            if (tm)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(qr + dfull),
                                      ld16_tail(at(kj, dfull, bf), tm, bf), acc);
            s[r * lds + j] = _mm512_reduce_add_ps(acc);
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

/* o[r][0 .. 16 nv) = sum_j p[r][j] v[j][0 .. 16 nv) for r < rb; with masked, the last vector
 * of v is read under mask tm.  MR x NV is the shape of the accumulator array: GCC keeps [6][4]
 * and [2][8] in registers (it spilled a [6][8] one, even with only 24 used); it also spills them
 * around a masked load in the loop, hence the unmasked variant for the usual Dv % 16 == 0. */
#define PV_BLOCK(NAME, MR, NV)                                                                \
    static inline __attribute__((always_inline)) void NAME(                                   \
        int rb, int nv, int masked, int64_t n, const float *p, int64_t ldp, const void *v,     \
        int64_t ldv, __mmask16 tm, float *o, int64_t ldo, int bf) {                            \
        __m512 acc[MR][NV];                                                                   \
        for (int r = 0; r < rb; r++)                                                          \
            for (int u = 0; u < nv; u++) acc[r][u] = _mm512_setzero_ps();                     \
        const float *pr[MR];                                                                  \
        for (int r = 0; r < rb; r++) pr[r] = p + r * ldp;                                     \
        /* bf16: vectors [0, 2 npair) in pairs (even, odd elements), the rest one by one */   \
        int npair = bf ? (masked ? nv - 1 : nv) / 2 : 0;                                      \
        for (int64_t j = 0; j < n; j++) {                                                     \
            __m512 vv[NV];                                                                    \
            if (j + PV_PF < n) /* V row j + PV_PF, one line per 64 bytes */                    \
                for (int u = 0; u < nv; u += (bf ? 2 : 1))                                    \
                    _mm_prefetch((const char *)at(v, PV_PF * ldv + 16 * u, bf), _MM_HINT_T0);  \
            int w = 0;                                                                        \
            for (; w < 2 * npair; w += 2) ld32_pairs(at(v, 16 * w, bf), &vv[w], &vv[w + 1]);  \
            for (; w < nv; w++)                                                               \
                vv[w] = masked && w == nv - 1 ? ld16_tail(at(v, 16 * w, bf), tm, bf)          \
                                              : ld16(at(v, 16 * w, bf), bf);                  \
            for (int r = 0; r < rb; r++) {                                                    \
                __m512 x = _mm512_set1_ps(*pr[r]++);                                          \
                for (int u = 0; u < nv; u++) acc[r][u] = _mm512_fmadd_ps(x, vv[u], acc[r][u]); \
            }                                                                                 \
            v = at(v, ldv, bf);                                                               \
        }                                                                                     \
        for (int r = 0; r < rb; r++) {                                                        \
            int u = 0;                                                                        \
            for (; u < 2 * npair; u += 2) {                                                   \
                _mm512_storeu_ps(o + r * ldo + 16 * u, merge_pairs(acc[r][u], acc[r][u + 1], 0)); \
                _mm512_storeu_ps(o + r * ldo + 16 * u + 16,                                   \
                                 merge_pairs(acc[r][u], acc[r][u + 1], 1));                   \
            }                                                                                 \
            for (; u < nv; u++) _mm512_storeu_ps(o + r * ldo + 16 * u, acc[r][u]);            \
        }                                                                                     \
    }
PV_BLOCK(pv_tall, 6, 4) /* up to 6 rows x 64 values */
PV_BLOCK(pv_wide, 2, 8) /* up to 2 rows x 128 values */

typedef void (*pv_fn)(int64_t, const float *, int64_t, const void *, int64_t, __mmask16,
                      float *, int64_t);
/* KIND_R_V (fp32 V) and KIND_R_Vb (bf16 V): R rows, V vectors; masked variants apart */
#define PV_INST1(KIND, R, V, SUF, BF)                                                         \
    static __attribute__((noinline)) void KIND##_##R##_##V##SUF##m(                           \
        int64_t n, const float *p, int64_t ldp, const void *v, int64_t ldv, __mmask16 tm,      \
        float *o, int64_t ldo) {                                                               \
        KIND(R, V, 1, n, p, ldp, v, ldv, tm, o, ldo, BF);                                      \
    }                                                                                         \
    static void KIND##_##R##_##V##SUF(int64_t n, const float *p, int64_t ldp, const void *v,   \
                                      int64_t ldv, __mmask16 tm, float *o, int64_t ldo) {      \
        if (tm == 0xffff) KIND(R, V, 0, n, p, ldp, v, ldv, tm, o, ldo, BF);                    \
        else KIND##_##R##_##V##SUF##m(n, p, ldp, v, ldv, tm, o, ldo);                          \
    }
#define PV_INST(KIND, R, V) PV_INST1(KIND, R, V, , 0) PV_INST1(KIND, R, V, b, 1)
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
#define PV_TROW(R, S)                                                                         \
    {pv_tall_##R##_1##S, pv_tall_##R##_2##S, pv_tall_##R##_3##S, pv_tall_##R##_4##S}
#define PV_WROW(R, S)                                                                         \
    {pv_wide_##R##_1##S, pv_wide_##R##_2##S, pv_wide_##R##_3##S, pv_wide_##R##_4##S,          \
     pv_wide_##R##_5##S, pv_wide_##R##_6##S, pv_wide_##R##_7##S, pv_wide_##R##_8##S}
/* [bf][rows - 1][nv - 1] */
static const pv_fn tall_table[2][6][4] = {
    {PV_TROW(1, ), PV_TROW(2, ), PV_TROW(3, ), PV_TROW(4, ), PV_TROW(5, ), PV_TROW(6, )},
    {PV_TROW(1, b), PV_TROW(2, b), PV_TROW(3, b), PV_TROW(4, b), PV_TROW(5, b), PV_TROW(6, b)}};
static const pv_fn wide_table[2][2][8] = {{PV_WROW(1, ), PV_WROW(2, )},
                                          {PV_WROW(1, b), PV_WROW(2, b)}};

static void pv_any(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp,
                   const void *v, int64_t ldv, float *o, int64_t ldo, int bf) {
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
            pv_fn fn = wide ? wide_table[bf][rb - 1][nv - 1] : tall_table[bf][rb - 1][nv - 1];
            fn(n, p + r0 * ldp, ldp, at(v, 16 * e0, bf), ldv, tm, o + r0 * ldo + 16 * e0, ldo);
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

static const attn__decode_kernels kernels = {2 /* ATTN__ISA_AVX512 */, qk, pv, qk_bf16, pv_bf16};

const attn__decode_kernels *attn__decode_kernels_avx512(void) { return &kernels; }

#else
const attn__decode_kernels *attn__decode_kernels_avx512(void) { return NULL; }
#endif
