/* Fused-attention microkernels for AVX-512F (contract in flash.h): the tile product in register
 * blocks of 24 zmm accumulators (6 rows x 64 columns, 8 x 48, or 12 x 32 for narrow products
 * such as P V with a head size of 32; each k step loads the row of B and broadcasts a value of
 * A per row), a vector exp (as 2^(x log2 e): degree-6 polynomial, scalef) for the
 * softmax rows, and the elementwise steps.  Compiled with -mavx512f; else the table is NULL. */
#include "../flash.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "exp_avx512.h"

#include "tr16_avx512.h"

#define MR 12 /* most rows of a register block (12 x 2 vectors; 8 x 3, 6 x 4) */

/* unit (a constant of each instance): rows of A contiguous in k (acs = 1).  The accumulators
 * are named variables (c<row><vector>; those past mr x nv vanish once mr and nv are constants):
 * in an array GCC kept them in memory outside the k loop, storing and reloading 20 of the 24
 * around every block.  vm != NULL (mmsmax): C = sc * the sums, and the row maxima vectors
 * vm[16r .. 16r+16) = max(vm, C[r][16v .. 16v+16)) for v in order (smax's order). */
#define ACC4(r) c##r##0 = z, c##r##1 = z, c##r##2 = z, c##r##3 = z
#define FMA4(r, x)                                                                            \
    {                                                                                         \
        if (nv > 0) c##r##0 = _mm512_fmadd_ps(x, b0, c##r##0);                                \
        if (nv > 1) c##r##1 = _mm512_fmadd_ps(x, b1, c##r##1);                                \
        if (nv > 2) c##r##2 = _mm512_fmadd_ps(x, b2, c##r##2);                                \
        if (nv > 3) c##r##3 = _mm512_fmadd_ps(x, b3, c##r##3);                                \
    }
#define LOADB(Bp)                                                                             \
    __m512 b0 = _mm512_loadu_ps(Bp), b1 = nv > 1 ? _mm512_loadu_ps(Bp + 16) : z,              \
           b2 = nv > 2 ? _mm512_loadu_ps(Bp + 32) : z, b3 = nv > 3 ? _mm512_loadu_ps(Bp + 48) : z
/* one row's four vectors, stored (or scaled and their maxima taken, or the backward's
 * weights or dS formed from them) */
#define OUT4(r)                                                                               \
    if (mr > r) {                                                                             \
        float *c = C + r * ldc;                                                               \
        if (ep == 1) {                                                                        \
            __m512 m = _mm512_loadu_ps(vm + 16 * r);                                          \
            OUTM(r, 0) OUTM(r, 1) OUTM(r, 2) OUTM(r, 3)                                       \
            _mm512_storeu_ps(vm + 16 * r, m);                                                 \
        } else if (ep == 2 && ev[r] == -INFINITY) {                                           \
            for (int v = 0; v < nv; v++) _mm512_storeu_ps(c + 16 * v, z);                     \
        } else if (ep == 2) {                                                                 \
            __m512 m = _mm512_set1_ps(-ev[r] * 1.44269504088896341f);                         \
            OUTE(r, 0) OUTE(r, 1) OUTE(r, 2) OUTE(r, 3)                                       \
        } else if (ep == 3) {                                                                 \
            __m512 d = _mm512_set1_ps(ev[r]);                                                 \
            const float *p = P + r * ldp;                                                     \
            OUTD(r, 0) OUTD(r, 1) OUTD(r, 2) OUTD(r, 3)                                       \
        } else {                                                                              \
            __m512 s = _mm512_set1_ps(cs ? cs[r] : 1.0f);                                     \
            OUTA(r, 0) OUTA(r, 1) OUTA(r, 2) OUTA(r, 3)                                       \
        }                                                                                     \
    }
#define OUTM(r, v)                                                                            \
    if (nv > v) {                                                                             \
        c##r##v = _mm512_mul_ps(c##r##v, scv);                                                \
        _mm512_storeu_ps(c + 16 * v, c##r##v);                                                \
        m = _mm512_max_ps(m, c##r##v);                                                        \
    }
/* exp(sc C - ev[r]) as expsum forms it from smax's sc C: 2^(x log2 e - ev[r] log2 e) */
#define OUTE(r, v)                                                                            \
    if (nv > v) {                                                                             \
        __m512 x = _mm512_mul_ps(c##r##v, scv);                                               \
        _mm512_storeu_ps(c + 16 * v, attn__exp2_16(_mm512_fmadd_ps(x, l2e, m)));             \
    }
/* sc P (C - ev[r]), ds's operations in ds's order */
#define OUTD(r, v)                                                                            \
    if (nv > v) {                                                                             \
        __m512 x = _mm512_mul_ps(_mm512_loadu_ps(p + 16 * v), _mm512_sub_ps(c##r##v, d));      \
        _mm512_storeu_ps(c + 16 * v, _mm512_mul_ps(scv, x));                                  \
    }
#define OUTA(r, v)                                                                            \
    if (nv > v) {                                                                             \
        if (accum) c##r##v = _mm512_fmadd_ps(s, _mm512_loadu_ps(c + 16 * v), c##r##v);        \
        _mm512_storeu_ps(c + 16 * v, c##r##v);                                                \
    }
static inline __attribute__((always_inline)) void block(int unit, int mr, int nv, int64_t K,
                                                        const float *A, int64_t ars,
                                                        int64_t acs, const float *B,
                                                        int64_t ldb, float *C, int64_t ldc,
                                                        int accum, const float *cs, float sc,
                                                        int ep, float *vm, const float *ev,
                                                        const float *P, int64_t ldp) {
    const __m512 z = _mm512_setzero_ps();
    __m512 ACC4(0), ACC4(1), ACC4(2), ACC4(3), ACC4(4), ACC4(5), ACC4(6), ACC4(7), ACC4(8),
        ACC4(9), ACC4(10), ACC4(11);
    if (unit) {
        /* four row pointers, every third row, and the rows between them at + ars and + 2 ars
         * (x86 addressing's index), advanced together: twelve pointers of their own would not
         * fit the 16 general registers (GCC reloaded six of them from the stack on every k
         * step) */
        const float *p0 = A, *p3 = mr > 3 ? A + 3 * ars : A, *p6 = mr > 6 ? A + 6 * ars : A,
                    *p9 = mr > 9 ? A + 9 * ars : A;
#define ROWU(r, p, o)                                                                         \
    if (mr > r) {                                                                             \
        __m512 x = _mm512_set1_ps(p[o * ars]);                                                \
        FMA4(r, x)                                                                            \
    }
        for (int64_t k = 0; k < K; k++) {
            LOADB(B);
            ROWU(0, p0, 0) ROWU(1, p0, 1) ROWU(2, p0, 2) ROWU(3, p3, 0) ROWU(4, p3, 1)
            ROWU(5, p3, 2) ROWU(6, p6, 0) ROWU(7, p6, 1) ROWU(8, p6, 2) ROWU(9, p9, 0)
            ROWU(10, p9, 1) ROWU(11, p9, 2)
            p0++, p3++, p6++, p9++;
            B += ldb;
        }
#undef ROWU
    } else {
        for (int64_t k = 0; k < K; k++) {
            LOADB(B);
#define ROWT(r)                                                                               \
    if (mr > r) {                                                                             \
        __m512 x = _mm512_set1_ps(A[r * ars + k * acs]);                                      \
        FMA4(r, x)                                                                            \
    }
            ROWT(0) ROWT(1) ROWT(2) ROWT(3) ROWT(4) ROWT(5) ROWT(6) ROWT(7) ROWT(8) ROWT(9)
            ROWT(10) ROWT(11)
#undef ROWT
            B += ldb;
        }
    }
    __m512 scv = _mm512_set1_ps(sc), l2e = _mm512_set1_ps(1.44269504088896341f);
    (void)scv, (void)l2e;
    OUT4(0) OUT4(1) OUT4(2) OUT4(3) OUT4(4) OUT4(5) OUT4(6) OUT4(7) OUT4(8) OUT4(9) OUT4(10)
    OUT4(11)
}
#undef ACC4
#undef FMA4
#undef LOADB
#undef OUT4
#undef OUTM
#undef OUTE
#undef OUTD
#undef OUTA

typedef void (*blk_fn)(int64_t, const float *, int64_t, int64_t, const float *, int64_t, float *,
                       int64_t, int, const float *);
typedef void (*blkm_fn)(int64_t, const float *, int64_t, const float *, int64_t, float *, int64_t,
                        float, float *);
#define INST(R, V)                                                                            \
    static void blk_##R##_##V(int64_t K, const float *A, int64_t ars, int64_t acs,              \
                              const float *B, int64_t ldb, float *C, int64_t ldc, int accum,    \
                              const float *cs) {                                                \
        block(1, R, V, K, A, ars, 1, B, ldb, C, ldc, accum, cs, 0.0f, 0, NULL, NULL, NULL, 0);  \
    }                                                                                         \
    static void blkt_##R##_##V(int64_t K, const float *A, int64_t ars, int64_t acs,             \
                               const float *B, int64_t ldb, float *C, int64_t ldc, int accum,   \
                               const float *cs) {                                               \
        block(0, R, V, K, A, ars, acs, B, ldb, C, ldc, accum, cs, 0.0f, 0, NULL, NULL, NULL,    \
              0);                                                                             \
    }                                                                                         \
    static void blkm_##R##_##V(int64_t K, const float *A, int64_t ars, const float *B,          \
                               int64_t ldb, float *C, int64_t ldc, float sc, float *vm) {       \
        block(1, R, V, K, A, ars, 1, B, ldb, C, ldc, 0, NULL, sc, 1, vm, NULL, NULL, 0);        \
    }
/* the backward's fused epilogues (ep 2: blke, ep 3: blkd), whole groups of 64 columns only */
#define INSTE(R)                                                                              \
    static void blke_##R(int64_t K, const float *A, int64_t ars, const float *B, int64_t ldb,   \
                         float *C, int64_t ldc, float sc, const float *ev, const float *P,      \
                         int64_t ldp) {                                                         \
        block(1, R, 4, K, A, ars, 1, B, ldb, C, ldc, 0, NULL, sc, 2, NULL, ev, P, ldp);         \
    }                                                                                         \
    static void blkd_##R(int64_t K, const float *A, int64_t ars, const float *B, int64_t ldb,   \
                         float *C, int64_t ldc, float sc, const float *ev, const float *P,      \
                         int64_t ldp) {                                                         \
        block(1, R, 4, K, A, ars, 1, B, ldb, C, ldc, 0, NULL, sc, 3, NULL, ev, P, ldp);         \
    }
INSTE(1)
INSTE(2)
INSTE(3)
INSTE(4)
INSTE(5)
INSTE(6)
static const attn__flash_blke_fn blke_table[6] = {blke_1, blke_2, blke_3, blke_4, blke_5, blke_6};
static const attn__flash_blke_fn blkd_table[6] = {blkd_1, blkd_2, blkd_3, blkd_4, blkd_5, blkd_6};
#define INST_R(R) INST(R, 1) INST(R, 2) INST(R, 3) INST(R, 4)
#define INST_R2(R) INST(R, 1) INST(R, 2) INST(R, 3)
#define INST_R3(R) INST(R, 1) INST(R, 2)
INST_R(1)
INST_R(2)
INST_R(3)
INST_R(4)
INST_R(5)
INST_R(6)
INST_R2(7)
INST_R2(8)
INST_R3(9)
INST_R3(10)
INST_R3(11)
INST_R3(12)
/* blk_table[v - 1]: the blocks of v vectors, 1 .. rows_of[v - 1] rows (24 accumulators) */
static const int rows_of[4] = {12, 12, 8, 6};
#define F1(P, R) P##_##R##_1
#define F2(P, R) P##_##R##_2
#define F3(P, R) P##_##R##_3
#define F4(P, R) P##_##R##_4
#define TABLE(T, P)                                                                           \
    static const T P##_table[4][MR] = {                                                       \
        {F1(P, 1), F1(P, 2), F1(P, 3), F1(P, 4), F1(P, 5), F1(P, 6), F1(P, 7), F1(P, 8),       \
         F1(P, 9), F1(P, 10), F1(P, 11), F1(P, 12)},                                           \
        {F2(P, 1), F2(P, 2), F2(P, 3), F2(P, 4), F2(P, 5), F2(P, 6), F2(P, 7), F2(P, 8),       \
         F2(P, 9), F2(P, 10), F2(P, 11), F2(P, 12)},                                           \
        {F3(P, 1), F3(P, 2), F3(P, 3), F3(P, 4), F3(P, 5), F3(P, 6), F3(P, 7), F3(P, 8), 0, 0, \
         0, 0},                                                                                \
        {F4(P, 1), F4(P, 2), F4(P, 3), F4(P, 4), F4(P, 5), F4(P, 6), 0, 0, 0, 0, 0, 0}};
TABLE(blk_fn, blk)
TABLE(blk_fn, blkt)
TABLE(blkm_fn, blkm)

/* Each element of C is one chain of FMAs over k in order, whatever the block shape: the
 * blocking never changes a bit. */
static void mm(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars, int64_t acs,
               const float *B, int64_t ldb, float *C, int64_t ldc, int accum, const float *cs) {
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        int nv = (int)((n - j0) / 16 < 4 ? (n - j0) / 16 : 4), rows = rows_of[nv - 1];
        /* the m rows in nb blocks of near-equal height (32 rows as 6, 6, 5, 5, 5, 5 rather
         * than 6, 6, 6, 6, 6, 2: a block of few rows is bound by its loads of B) */
        int64_t nb = (m + rows - 1) / rows, i0 = 0;
        for (int64_t bi = 0; bi < nb; bi++) {
            int mr = (int)((m - i0) / (nb - bi));
            mr += (m - i0) % (nb - bi) != 0; /* the taller blocks first */
            /* one table indexed, then the other (GCC 12's object-size check, with -O1 and
             * UBSan, took an index into (c ? a : b) as one into b) */
            const blk_fn fn = acs == 1 ? blk_table[nv - 1][mr - 1] : blkt_table[nv - 1][mr - 1];
            fn(K, A + i0 * ars, ars, acs, B + j0, ldb, C + i0 * ldc + j0, ldc, accum,
               cs ? cs + i0 : NULL);
            i0 += mr;
        }
    }
}

/* mm (acs = 1, no accumulation) then smax with every key visible, in one pass: the same bits
 * (the blocks of mm, the maxima in smax's order); rows in chunks of up to 96 */
static void mmsmax(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars,
                   const float *B, int64_t ldb, float *C, int64_t ldc, float scale, float *mx) {
    float vm[96 * 16];
    for (int64_t c0 = 0; c0 < m; c0 += 96) {
        int64_t mc = m - c0 < 96 ? m - c0 : 96;
        for (int64_t i = 0; i < mc * 16; i++) vm[i] = -INFINITY;
        for (int64_t j0 = 0; j0 < n; j0 += 64) {
            int nv = (int)((n - j0) / 16 < 4 ? (n - j0) / 16 : 4), rows = rows_of[nv - 1];
            int64_t nb = (mc + rows - 1) / rows, i0 = 0;
            for (int64_t bi = 0; bi < nb; bi++) {
                int mr = (int)((mc - i0) / (nb - bi));
                mr += (mc - i0) % (nb - bi) != 0;
                blkm_table[nv - 1][mr - 1](K, A + (c0 + i0) * ars, ars, B + j0, ldb,
                                           C + (c0 + i0) * ldc + j0, ldc, scale, vm + 16 * i0);
                i0 += mr;
            }
        }
        for (int64_t r = 0; r < mc; r++) mx[c0 + r] = _mm512_reduce_max_ps(_mm512_loadu_ps(vm + 16 * r));
    }
}

static void smax(float *s, int64_t ld, int64_t rows, int64_t n, const int64_t *nvalid,
                 float scale, float *mx) {
    __m512 sc = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        int64_t nv = nvalid ? nvalid[r] : n;
        __m512 m = ninf;
        for (int64_t j = 0; j < n; j += 16) {
            int64_t left = nv - j;
            __mmask16 mk = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
            __m512 v = _mm512_mask_mul_ps(ninf, mk, _mm512_loadu_ps(x + j), sc);
            _mm512_storeu_ps(x + j, v);
            m = _mm512_max_ps(m, v);
        }
        mx[r] = _mm512_reduce_max_ps(m);
    }
}

static void expsum(float *s, int64_t ld, int64_t rows, int64_t n, const float *mx, float *sum);
static void ds(const float *p, float *dp, const float *keep, float delta, float scale, int64_t n);

/* mmexp (ep 2) and mmds (ep 3): mm (acs = 1, no accumulation) with the backward's epilogue in
 * the blocks of whole groups of 64 columns; the columns after the last whole group by mm and
 * the separate passes (smax and expsum, or ds): the same bits either way */
static void mmep(int ep, int64_t m, int64_t n, int64_t K, const float *A, int64_t ars,
                 const float *B, int64_t ldb, float *C, int64_t ldc, float scale, const float *ev,
                 const float *P, int64_t ldp) {
    int64_t n64 = n & ~(int64_t)63;
    for (int64_t j0 = 0; j0 < n64; j0 += 64) {
        int64_t nb = (m + 5) / 6, i0 = 0;
        for (int64_t bi = 0; bi < nb; bi++) {
            int mr = (int)((m - i0) / (nb - bi));
            mr += (m - i0) % (nb - bi) != 0;
            const attn__flash_blke_fn fn = ep == 2 ? blke_table[mr - 1] : blkd_table[mr - 1];
            fn(K, A + i0 * ars, ars, B + j0, ldb, C + i0 * ldc + j0, ldc, scale, ev + i0,
               P ? P + i0 * ldp + j0 : NULL, ldp);
            i0 += mr;
        }
    }
    if (n64 == n) return;
    mm(m, n - n64, K, A, ars, 1, B + n64, ldb, C + n64, ldc, 0, NULL);
    for (int64_t r0 = 0; r0 < m; r0 += 64) {
        int64_t rows = m - r0 < 64 ? m - r0 : 64;
        float mx[64];
        if (ep == 2) {
            smax(C + r0 * ldc + n64, ldc, rows, n - n64, NULL, scale, mx);
            expsum(C + r0 * ldc + n64, ldc, rows, n - n64, ev + r0, NULL);
        } else {
            for (int64_t r = r0; r < r0 + rows; r++)
                ds(P + r * ldp + n64, C + r * ldc + n64, NULL, ev[r], scale, n - n64);
        }
    }
}

ATTN__FLASH_MMEP_ENTRIES(mmep)

static void expsum(float *s, int64_t ld, int64_t rows, int64_t n, const float *mx, float *sum) {
    const float log2e = 1.44269504088896341f;
    __m512 l2 = _mm512_set1_ps(log2e);
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        if (mx[r] == -INFINITY) {
            for (int64_t j = 0; j < n; j += 16) _mm512_storeu_ps(x + j, _mm512_setzero_ps());
            if (sum) sum[r] = 0.0f;
            continue;
        }
        __m512 acc = _mm512_setzero_ps(), m = _mm512_set1_ps(-mx[r] * log2e);
        for (int64_t j = 0; j < n; j += 16) {
            __m512 e = attn__exp2_16(_mm512_fmadd_ps(_mm512_loadu_ps(x + j), l2, m));
            _mm512_storeu_ps(x + j, e);
            acc = _mm512_add_ps(acc, e);
        }
        if (sum) sum[r] = _mm512_reduce_add_ps(acc);
    }
}

static void vexp(const float *x, float *y, int64_t n) {
    __m512 l2 = _mm512_set1_ps(1.44269504088896341f);
    for (int64_t i = 0; i < n; i += 16)
        _mm512_storeu_ps(y + i, attn__exp2_16(_mm512_mul_ps(_mm512_loadu_ps(x + i), l2)));
}

static void ds(const float *p, float *dp, const float *keep, float delta, float scale, int64_t n) {
    __m512 d = _mm512_set1_ps(delta), sc = _mm512_set1_ps(scale);
    for (int64_t j = 0; j < n; j += 16) {
        __m512 x = _mm512_loadu_ps(dp + j);
        if (keep) x = _mm512_mul_ps(x, _mm512_loadu_ps(keep + j));
        x = _mm512_mul_ps(_mm512_loadu_ps(p + j), _mm512_sub_ps(x, d));
        _mm512_storeu_ps(dp + j, _mm512_mul_ps(sc, x));
    }
}

/* tanh(y): for |y| < 0.35 the odd Taylor polynomial to degree 11 (relative error < 2e-8
 * there); above, (1 - e) / (1 + e) with e = exp(-2|y|) <= 0.497, where nothing cancels (the
 * reciprocal by rcp14 and one Newton step); the sign put back.  |y| = inf gives 1. */
static inline __m512 tanh16(__m512 y) {
    __m512 a = _mm512_abs_ps(y), a2 = _mm512_mul_ps(a, a);
    __m512 p = _mm512_set1_ps(-1382.0f / 155925.0f);
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(62.0f / 2835.0f));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(-17.0f / 315.0f));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(2.0f / 15.0f));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(-1.0f / 3.0f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, a2), p, a);
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 e = attn__exp2_16(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f * 1.44269504088896341f)));
    __m512 den = _mm512_add_ps(one, e), r = _mm512_rcp14_ps(den);
    r = _mm512_mul_ps(r, _mm512_fnmadd_ps(den, r, _mm512_set1_ps(2.0f)));
    __m512 large = _mm512_mul_ps(_mm512_sub_ps(one, e), r);
    __m512 t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(0.35f), _CMP_LT_OQ),
                                    large, small);
    __m512i sgn = _mm512_and_epi32(_mm512_castps_si512(y), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(t), sgn));
}

static void softcap(float *s, int64_t ld, int64_t rows, int64_t n, float cap, float *dt,
                    float *mx) {
    __m512 c = _mm512_set1_ps(cap), ic = _mm512_set1_ps(1.0f / cap);
    __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        __m512 m = ninf;
        for (int64_t j = 0; j < n; j += 16) {
            __m512 v = _mm512_loadu_ps(x + j);
            __mmask16 fin = _mm512_cmp_ps_mask(v, ninf, _CMP_NEQ_OQ);
            __m512 t = tanh16(_mm512_mul_ps(v, ic));
            v = _mm512_mask_mul_ps(ninf, fin, c, t);
            _mm512_storeu_ps(x + j, v);
            if (dt) /* 1 - t^2, 0 at -inf */
                _mm512_storeu_ps(dt + r * ld + j,
                                 _mm512_maskz_mov_ps(fin, _mm512_fnmadd_ps(t, t, one)));
            m = _mm512_max_ps(m, v);
        }
        mx[r] = _mm512_reduce_max_ps(m);
    }
}

static void alibi(float *s, int64_t ld, int64_t rows, int64_t n, float slope, float d0,
                  float *mx) {
    __m512 sl = _mm512_set1_ps(slope), ninf = _mm512_set1_ps(-INFINITY);
    __m512 lane = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        __m512 m = ninf, dr = _mm512_set1_ps(d0 + (float)r);
        for (int64_t j = 0; j < n; j += 16) {
            __m512 kj = _mm512_add_ps(lane, _mm512_set1_ps((float)j));
            __m512 dist = _mm512_abs_ps(_mm512_sub_ps(dr, kj));
            __m512 v = _mm512_fnmadd_ps(sl, dist, _mm512_loadu_ps(x + j));
            _mm512_storeu_ps(x + j, v);
            m = _mm512_max_ps(m, v);
        }
        mx[r] = _mm512_reduce_max_ps(m);
    }
}

static void tr(const float *src, int64_t rs, int64_t cs, int64_t n, int64_t d, float *dst,
               int64_t ld) {
    if (cs != 1) {
        attn__flash_tr_c(src, rs, cs, n, d, dst, ld);
        return;
    }
    for (int64_t e0 = 0; e0 < d; e0 += 16) {
        int64_t de = d - e0;
        __mmask16 cm = de >= 16 ? 0xffff : (__mmask16)((1u << de) - 1);
        for (int64_t j0 = 0; j0 < n; j0 += 16) {
            __m512 r[16];
            attn__load_tr16(r, src + j0 * rs + e0, rs, n - j0, cm);
            for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + (e0 + i) * ld + j0, r[i]);
        }
    }
}

/* rowdot (flash.h): 16 rows at a time, one per lane: 16 x 16 blocks of both operands
 * transposed in registers, then the products added in e order (the plain loop's bits). */
static void rowdot(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,
                   int64_t d, float *out) {
    int64_t r0 = 0;
    for (; r0 + 16 <= rows; r0 += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t e0 = 0; e0 < d; e0 += 16) {
            const int64_t w = d - e0 < 16 ? d - e0 : 16;
            const __mmask16 m = w >= 16 ? 0xffff : (__mmask16)((1u << w) - 1);
            __m512 ta[16], tb[16];
            for (int i = 0; i < 16; i++) {
                ta[i] = _mm512_maskz_loadu_ps(m, a + (r0 + i) * lda + e0);
                tb[i] = _mm512_maskz_loadu_ps(m, b + (r0 + i) * ldb + e0);
            }
            attn__tr16(ta);
            attn__tr16(tb);
            for (int64_t e = 0; e < w; e++) acc = _mm512_add_ps(acc, _mm512_mul_ps(ta[e], tb[e]));
        }
        _mm512_storeu_ps(out + r0, acc);
    }
    if (r0 < rows) attn__flash_rowdot_c(a + r0 * lda, lda, b + r0 * ldb, ldb, rows - r0, d, out + r0);
}

static const attn__flash_kernels kernels = {2 /* ATTN__ISA_AVX512 */, mm, smax, expsum, vexp,
                                            ds, softcap, alibi, tr, rowdot, mmsmax,
                                            mmexp, mmds};

const attn__flash_kernels *attn__flash_kernels_avx512(void) { return &kernels; }

#else
const attn__flash_kernels *attn__flash_kernels_avx512(void) { return NULL; }
#endif
