/* Fused ("flash") scaled dot-product attention, forward and backward, fp32 (src/kernels/flash.c).
 *
 * The contract is attn__sdpa_ref / attn__sdpa_bwd_ref (kernels.h): every feature of the
 * reference (two masks of kind KEEP/BLOCK/ADD with broadcast strides and mask_ncols, causal in
 * both alignments, sliding window, ALiBi, soft cap, GQA/MQA, dropout on the attn_dropout_keep
 * stream, lse, zero rows for fully masked queries), but the L x S score matrix is never
 * materialised: queries are processed in tiles of ATTN__FLASH_BM rows against key tiles of
 * ATTN__FLASH_BN keys with an online softmax (fp32: one step per group of 8 key tiles, 2 for
 * D + Dv > 256, aligned from key 0, so a row's bits are its own whatever its tile; tiles
 * outside the causal mask or the window are skipped, and a tile on the causal diagonal is
 * computed as a staircase of row strips on the columns they see: the same bits as the full
 * tile); only per-tile (per-group) blocks live in the workspace.  Any strides are accepted
 * (operands are packed, or read in place when their rows are unit-stride and D, Dv are
 * multiples of 16).
 *
 * Threads: the forward splits (batch, head, query tile), the heaviest causal tiles first; the
 * backward computes dK/dV per key tile (query tiles and heads visited in a fixed order) and dQ
 * per query tile (key tiles in a fixed order), with no atomics, so every result is
 * bit-identical for every thread count.  Within one ISA the results are deterministic; ISAs
 * differ in the last bits (FMA, exp polynomial). */
#ifndef ATTN_FLASH_H
#define ATTN_FLASH_H
#include "bf16.h"
#include "kernels.h"

#define ATTN__FLASH_BM 96 /* query rows per tile */
#define ATTN__FLASH_BN 64 /* keys per tile (a multiple of 16) */
/* Forward with at most ATTN__FLASH_SHORT_S keys (fp32), or at most ATTN__FLASH_SHORT_S2 keys
 * whose K^T (rup16(D) x rup16(S) floats) fits in ATTN__FLASH_SHORT_KT floats: one tile of all
 * keys per row block, no online softmax (flash.c, "short key ranges").  The choice depends on
 * the shape only (never on the thread count); the two paths differ in the last bits. */
#define ATTN__FLASH_SHORT_S 256
#define ATTN__FLASH_SHORT_S2 1024
#define ATTN__FLASH_SHORT_KT 65536

/* Forward: writes a->o and, if a->lse, the log-sum-exp (-inf for a fully masked row).
 * a->w must be NULL (ATTN_E_INVALID otherwise: use attn__sdpa when weights are wanted). */
ATTN__HIDDEN attn_status attn__flash_fwd(attn_ctx *ctx, const attn__sdpa_args *a);

/* Backward: overwrites g->dq, g->dk, g->dv (each may be NULL) from g->dout.  lse is the
 * forward's log-sum-exp, [B, H, L] contiguous.  a->o, when not NULL, must hold the forward's
 * output: it gives delta_i = dout_i . o_i directly; with a->o == NULL delta is recomputed from
 * the scores (one more pass).  g->dmask is not supported (ATTN_E_UNSUPPORTED: use the
 * reference). */
ATTN__HIDDEN attn_status attn__flash_bwd(attn_ctx *ctx, const attn__sdpa_args *a,
                                         const attn__sdpa_grads *g, const float *lse);

/* ---- microkernels, one table per ISA (ref always present) ----------------------------------
 * mm:     C[i][j] = (accum ? (cs ? cs[i] : 1) * C[i][j] : 0) + sum_{k<K} A[i*ars + k*acs] B[k*ldb + j]
 *         for i < m, j < n; n is a multiple of 16; K >= 0.  The k sum runs in order.
 * smax:   for each row r < rows of s (row stride ld): s[j] *= scale for j < nvalid[r] (all n when
 *         nvalid is NULL), s[j] = -inf for the rest of j < n; mx[r] = the row maximum.
 * expsum: in place, s[j] = exp(s[j] - mx[r]) (0 where s[j] = -inf; the whole row 0 when
 *         mx[r] = -inf) for j < n; sum[r] = the row sum (sum may be NULL).
 * vexp:   y[i] = exp(x[i]) for i < n (n a multiple of 16, x <= 0; -inf gives 0).
 * ds:     dp[j] = scale * p[j] * (dp[j] * (keep ? keep[j] : 1) - delta), j < n.
 * softcap: for each row r < rows of s (row stride ld), j < n (a multiple of 16): t = tanh(s[j] /
 *         cap), s[j] = cap * t, except that -inf stays -inf; when dt is not NULL, dt[r*ld + j] =
 *         1 - t^2 (0 at -inf); mx[r] = the new row maximum.  |error| of t within a few ulp
 *         of 1 (relative to |t| near 0).
 * alibi:  for each row r < rows of s (row stride ld), j < n (a multiple of 16):
 *         s[j] -= slope * |d0 + r - j| (-inf stays -inf; the distance formed in float, exact
 *         while |d0| + rows + n < 2^24); mx[r] = the new row maximum.
 * tr:     the transpose of n rows of d values (row stride rs, column stride cs), zero padded to
 *         whole 16 x 16 blocks: dst[e*ld + j] = src[j*rs + e*cs] for j < n, e < d, and 0 for
 *         the other j < rup16(n), e < rup16(d) (ld >= rup16(n)).
 * rowdot: out[r] = sum over e < d, in order from 0.0f, of the rounded products a[r*lda + e] *
 *         b[r*ldb + e] (no fused multiply-add), r < rows: the backward's delta = dO . O, the
 *         bits of the plain loop (attn__flash_rowdot_c) in every version.
 * mmsmax: (may be NULL) mm(m, n, K, A, ars, 1, B, ldb, C, ldc, 0, NULL) then smax(C, ldc, m,
 *         n, NULL, scale, mx) in one pass over the tile (the forward's scores when every key of
 *         the tile is visible to every row): exactly their bits.
 * mmexp:  (may be NULL) mm(m, n, K, A, ars, 1, B, ldb, C, ldc, 0, NULL), then smax(C, ldc, m,
 *         n, NULL, scale, .) and expsum(C, ldc, m, n, lse, NULL) in one pass over the tile (the
 *         backward's weights P = exp(scale S - lse) where every key of the tile is visible):
 *         exactly their bits.
 * mmds:   (may be NULL) mm(m, n, K, A, ars, 1, B, ldb, C, ldc, 0, NULL), then ds(P + r*ldp,
 *         C + r*ldc, NULL, delta[r], scale, n) for each row r < m, in one pass over the tile
 *         (the backward's dS from dO V^T without dropout): exactly their bits. */
typedef struct attn__flash_kernels {
    int isa;
    void (*mm)(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars, int64_t acs,
               const float *B, int64_t ldb, float *C, int64_t ldc, int accum, const float *cs);
    void (*smax)(float *s, int64_t ld, int64_t rows, int64_t n, const int64_t *nvalid,
                 float scale, float *mx);
    void (*expsum)(float *s, int64_t ld, int64_t rows, int64_t n, const float *mx, float *sum);
    void (*vexp)(const float *x, float *y, int64_t n);
    void (*ds)(const float *p, float *dp, const float *keep, float delta, float scale, int64_t n);
    void (*softcap)(float *s, int64_t ld, int64_t rows, int64_t n, float cap, float *dt,
                    float *mx);
    void (*alibi)(float *s, int64_t ld, int64_t rows, int64_t n, float slope, float d0,
                  float *mx);
    void (*tr)(const float *src, int64_t rs, int64_t cs, int64_t n, int64_t d, float *dst,
               int64_t ld);
    void (*rowdot)(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,
                   int64_t d, float *out);
    void (*mmsmax)(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars, const float *B,
                   int64_t ldb, float *C, int64_t ldc, float scale, float *mx);
    void (*mmexp)(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars, const float *B,
                  int64_t ldb, float *C, int64_t ldc, float scale, const float *lse);
    void (*mmds)(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars, const float *B,
                 int64_t ldb, float *C, int64_t ldc, const float *P, int64_t ldp,
                 const float *delta, float scale);
} attn__flash_kernels;

/* A register block of the fused epilogues: (K, A, ars, B, ldb, C, ldc, scale, ev, P, ldp) */
typedef void (*attn__flash_blke_fn)(int64_t, const float *, int64_t, const float *, int64_t,
                                    float *, int64_t, float, const float *, const float *,
                                    int64_t);

/* blke_R and blkd_R (static): the ep 2 and ep 3 blocks of R rows over a set's own
 * block(R, K, A, ars, acs, B, ldb, C, ldc, accum, cs, sc, ep, vm, ev, P, ldp) */
#define ATTN__FLASH_EP_BLOCKS(R)                                                              \
    static void blke_##R(int64_t K, const float *A, int64_t ars, const float *B, int64_t ldb,   \
                         float *C, int64_t ldc, float sc, const float *ev, const float *P,      \
                         int64_t ldp) {                                                         \
        block(R, K, A, ars, 1, B, ldb, C, ldc, 0, NULL, sc, 2, NULL, ev, P, ldp);               \
    }                                                                                         \
    static void blkd_##R(int64_t K, const float *A, int64_t ars, const float *B, int64_t ldb,   \
                         float *C, int64_t ldc, float sc, const float *ev, const float *P,      \
                         int64_t ldp) {                                                         \
        block(R, K, A, ars, 1, B, ldb, C, ldc, 0, NULL, sc, 3, NULL, ev, P, ldp);               \
    }

/* mmep (static) for a set whose blocks are 16 columns wide and 1 .. mr_max rows high (etab,
 * dtab: the ep 2 and ep 3 blocks by height): rows in blocks of near-equal height, as its mm;
 * then the table's entries */
#define ATTN__FLASH_MMEP_ROWS(mr_max, etab, dtab)                                             \
    static void mmep(int ep, int64_t m, int64_t n, int64_t K, const float *A, int64_t ars,     \
                     const float *B, int64_t ldb, float *C, int64_t ldc, float scale,          \
                     const float *ev, const float *P, int64_t ldp) {                           \
        int64_t nb = (m + (mr_max) - 1) / (mr_max), i0 = 0;                                    \
        for (int64_t bi = 0; bi < nb; bi++) {                                                 \
            int mr = (int)((m - i0) / (nb - bi));                                             \
            mr += (m - i0) % (nb - bi) != 0;                                                  \
            const attn__flash_blke_fn fn = ep == 2 ? etab[mr - 1] : dtab[mr - 1];             \
            for (int64_t j0 = 0; j0 < n; j0 += 16)                                            \
                fn(K, A + i0 * ars, ars, B + j0, ldb, C + i0 * ldc + j0, ldc, scale, ev + i0,  \
                   P ? P + i0 * ldp + j0 : NULL, ldp);                                         \
            i0 += mr;                                                                         \
        }                                                                                     \
    }                                                                                         \
    ATTN__FLASH_MMEP_ENTRIES(mmep)

/* The table's mmexp and mmds (static) over a set's own
 * fn(int ep, m, n, K, A, ars, B, ldb, C, ldc, scale, ev, P, ldp): ep 2 (ev = lse, P unused)
 * or ep 3 (ev = delta). */
#define ATTN__FLASH_MMEP_ENTRIES(fn)                                                          \
    static void mmexp(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars,            \
                      const float *B, int64_t ldb, float *C, int64_t ldc, float scale,         \
                      const float *lse) {                                                      \
        fn(2, m, n, K, A, ars, B, ldb, C, ldc, scale, lse, NULL, 0);                           \
    }                                                                                         \
    static void mmds(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars,             \
                     const float *B, int64_t ldb, float *C, int64_t ldc, const float *P,       \
                     int64_t ldp, const float *delta, float scale) {                           \
        fn(3, m, n, K, A, ars, B, ldb, C, ldc, scale, delta, P, ldp);                          \
    }

/* The plain C transpose and row dot products (the table's tr, rowdot for ISAs without their
 * own). */
ATTN__HIDDEN void attn__flash_tr_c(const float *src, int64_t rs, int64_t cs, int64_t n,
                                   int64_t d, float *dst, int64_t ld);
ATTN__HIDDEN void attn__flash_rowdot_c(const float *a, int64_t lda, const float *b, int64_t ldb,
                                       int64_t rows, int64_t d, float *out);

ATTN__HIDDEN const attn__flash_kernels *attn__flash_kernels_ref(void);
ATTN__HIDDEN const attn__flash_kernels *attn__flash_kernels_avx2(void);   /* NULL if not built */
ATTN__HIDDEN const attn__flash_kernels *attn__flash_kernels_avx512(void); /* NULL if not built */
ATTN__HIDDEN const attn__flash_kernels *attn__flash_kernels_neon(void);   /* NULL if not built */

/* ---- bf16 storage (forward only) -------------------------------------------------------------
 * attn__flash_fwd_bf16: attn__flash_fwd with q, k, v in bf16 (a->q, a->k, a->v are ignored; the
 * strides a->qs, a->ks, a->vs apply, in elements); o and lse stay float.  Numerics (the contract
 * of attn__sdpa_bf16_ref): scores accumulate in fp32 from the exact bf16 products; the online
 * softmax runs in fp32 as above; the unnormalised weights exp(s - m) (m: the running row
 * maximum), times the dropout multiplier, are rounded to bf16 before the product with V, which
 * accumulates in fp32; l sums the unrounded weights.  The driver is the fp32 one: only the
 * packing, the two products and the rounding of P differ.  Two ways to multiply:
 *  - dot: the operands stay bf16 (packed in the pair layouts below) and the bf16 microkernels
 *    multiply them (VDPBF16PS with AVX512_BF16, else plain C);
 *  - widen: the packing widens q, k, v to fp32 (exact) and the fp32 microkernels of ctx's set
 *    multiply, P being rounded to bf16 values in place (same numerics, other last bits).
 * A context's table (ctx->kern.flash_bf16, flash_bf16_widen) picks one (see below).
 *
 * bf16 microkernels (A row-major bf16, B "pair-interleaved": element (k, j) at
 * B[(k/2)*2*ldb + 2*j + (k&1)], the operand layout of VDPBF16PS):
 * mm:  C[i][j] = (accum ? (cs ? cs[i] : 1) * C[i][j] : 0)
 *                + sum_{kk<K2} (A[i*lda + 2kk+1] B(2kk+1, j) + A[i*lda + 2kk] B(2kk, j))
 *      for i < m, j < n; n a multiple of 16; products exact, sums in fp32, kk in order.
 * cvt: p[r*ldp + j] = bf16(s[r*ld + j]) (round to nearest even) for r < rows, j < n (n a
 *      multiple of 32).
 * round: s[r*ld + j] = bf16(s[r*ld + j]) as a float, r < rows, j < n (n a multiple of 16).
 * softmax (may be NULL): the forward's scores of a tile every row sees whole (no mask, soft
 *      cap, ALiBi or dropout), for each row r < rows of s (raw Q K^T, row stride ld, n a
 *      multiple of 32): mx[r] = max_j (scale * s[j]) (the rounded products, as smax),
 *      mn[r] = max(mx[r], m[r]), p[r*ldp+j] = bf16(e_j) with e_j = exp(scale * s[j] - mn[r])
 *      (relative error within a few 1e-7 plus ln2 (|mn| + |scale * s[j]|) log2(e) 2^-22 from
 *      the float rounding of the exponent, as in expsum; weights below 2^-125 are 2^-125,
 *      never subnormal),
 *      sum[r] = the sum of the e_j (unrounded).  Not the bits of smax, expsum and cvt.
 * Tile kernels (tiles != 0: AMX) ask more of mm's caller: K2 a multiple of 16 (the operands
 * zero-padded to it), A readable (any values) up to the next multiple of 16 rows past m (a
 * row's garbage reaches only its own row of C, which is not stored), and begin() on the
 * calling thread before its first mm, end() after its last (the tile configuration is thread
 * state: nothing carries over to other code). */
typedef struct attn__flash_bf16_kernels {
    int isa; /* ATTN__ISA_REF for the plain C ones, ATTN__ISA_AVX512 for AVX512_BF16 and AMX */
    void (*mm)(int64_t m, int64_t n, int64_t K2, const attn__bf16 *A, int64_t lda,
               const attn__bf16 *B, int64_t ldb, float *C, int64_t ldc, int accum,
               const float *cs);
    void (*cvt)(const float *s, int64_t ld, int64_t rows, int64_t n, attn__bf16 *p,
                int64_t ldp);
    void (*round)(float *s, int64_t ld, int64_t rows, int64_t n);
    void (*softmax)(const float *s, int64_t ld, int64_t rows, int64_t n, float scale,
                    const float *m, float *mx, float *mn, float *sum, attn__bf16 *p,
                    int64_t ldp);
    int tiles;            /* 0, or 1 for the tile kernels (above) */
    void (*begin)(void);  /* NULL where tiles is 0 */
    void (*end)(void);
    const char *name;
} attn__flash_bf16_kernels;

ATTN__HIDDEN const attn__flash_bf16_kernels *attn__flash_bf16_kernels_ref(void);
/* NULL when src/kernels/x86_avx512bf16 was built without the instructions. */
ATTN__HIDDEN const attn__flash_bf16_kernels *attn__flash_bf16_kernels_avx512(void);
/* Its cvt, round and softmax, which the AMX table shares (defined where that table is built). */
ATTN__HIDDEN void attn__flash_bf16_cvt_avx512(const float *s, int64_t ld, int64_t rows,
                                              int64_t n, attn__bf16 *p, int64_t ldp);
ATTN__HIDDEN void attn__flash_bf16_round_avx512(float *s, int64_t ld, int64_t rows, int64_t n);
ATTN__HIDDEN void attn__flash_bf16_softmax_avx512(const float *s, int64_t ld, int64_t rows,
                                                  int64_t n, float scale, const float *m,
                                                  float *mx, float *mn, float *sum,
                                                  attn__bf16 *p, int64_t ldp);
/* AMX-BF16 tiles (x86_amx/flash_amx.c); NULL when built without the instructions. */
ATTN__HIDDEN const attn__flash_bf16_kernels *attn__flash_bf16_kernels_amx(void);
/* A context's bf16 table (ctx->kern.flash_bf16, dispatch.c) is the AMX one where the CPU has
 * the tiles, else the AVX512_BF16 one where ctx->kern.has_bf16, else plain C; the way to
 * multiply (ctx->kern.flash_bf16_widen) is dot on the ref set, on AMD's VDPBF16PS (Zen 4/5:
 * twice an FMA's work per instruction; attn__bf16_attention_pick) and under ATTN_BF16=dot;
 * else widen.  Widening stays the default on Intel without AMX because there (Xeon, family 6
 * model 207) VDPBF16PS issues once per two cycles and holds both FMA ports meanwhile: its 32
 * products take the time of four FMAs (64 products), so the fp32 FMA kernels multiply bf16
 * operands twice as fast.  On Zen 4 the dot kernels ran the forward 1.6x faster than
 * widening (docs/kernels.md). */

ATTN__HIDDEN attn_status attn__flash_fwd_bf16(attn_ctx *ctx, const attn__sdpa_args *a,
                                              const attn__bf16 *q, const attn__bf16 *k,
                                              const attn__bf16 *v);

/* The oracle of the bf16 path (src/kernels/ref/sdpa_bf16_ref.c): per query row, scores
 * s_j = scale * q.k_j + masks in float from the exact bf16 products (summed in double), m the
 * row maximum, e_j = exp(s_j - m), l = sum_j e_j, out = sum_j bf16(e_j * keep_j) v_j / l
 * (summed in double), lse = m + log l; a fully masked row gives zeros and -inf.  The same
 * arguments as attn__flash_fwd_bf16 (a->w must be NULL); scratch: 2*S floats. */
ATTN__HIDDEN void attn__sdpa_bf16_ref(const attn__sdpa_args *a, const attn__bf16 *q,
                                      const attn__bf16 *k, const attn__bf16 *v, float *scratch);

#endif
