/* Fused ("flash") scaled dot-product attention, forward and backward, fp32 (src/kernels/flash.c).
 *
 * The contract is attn__sdpa_ref / attn__sdpa_bwd_ref (kernels.h): every feature of the
 * reference (two masks of kind KEEP/BLOCK/ADD with broadcast strides and mask_ncols, causal in
 * both alignments, GQA/MQA, dropout on the attn_dropout_keep stream, lse, zero rows for fully
 * masked queries), but the L x S score matrix is never materialised: queries are processed in
 * tiles of ATTN__FLASH_BM rows against key tiles of ATTN__FLASH_BN keys with an online softmax;
 * only per-tile blocks live in the workspace.  Any strides are accepted (operands are packed).
 *
 * Threads: the forward splits (batch, head, query tile), the heaviest causal tiles first; the
 * backward computes dK/dV per key tile (query tiles and heads visited in a fixed order) and dQ
 * per query tile (key tiles in a fixed order), with no atomics, so every result is
 * bit-identical for every thread count.  Within one ISA the results are deterministic; ISAs
 * differ in the last bits (FMA, exp polynomial). */
#ifndef ATTN_FLASH_H
#define ATTN_FLASH_H
#include "kernels.h"

#define ATTN__FLASH_BM 96 /* query rows per tile */
#define ATTN__FLASH_BN 64 /* keys per tile (a multiple of 16) */

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
 * ds:     dp[j] = scale * p[j] * (dp[j] * (keep ? keep[j] : 1) - delta), j < n. */
typedef struct attn__flash_kernels {
    int isa;
    void (*mm)(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars, int64_t acs,
               const float *B, int64_t ldb, float *C, int64_t ldc, int accum, const float *cs);
    void (*smax)(float *s, int64_t ld, int64_t rows, int64_t n, const int64_t *nvalid,
                 float scale, float *mx);
    void (*expsum)(float *s, int64_t ld, int64_t rows, int64_t n, const float *mx, float *sum);
    void (*vexp)(const float *x, float *y, int64_t n);
    void (*ds)(const float *p, float *dp, const float *keep, float delta, float scale, int64_t n);
} attn__flash_kernels;

ATTN__HIDDEN const attn__flash_kernels *attn__flash_kernels_ref(void);
ATTN__HIDDEN const attn__flash_kernels *attn__flash_kernels_avx2(void);   /* NULL if not built */
ATTN__HIDDEN const attn__flash_kernels *attn__flash_kernels_avx512(void); /* NULL if not built */
/* The table for ctx->isa (ref when that set has no flash kernels). */
ATTN__HIDDEN const attn__flash_kernels *attn__flash_kernels_for(const attn_ctx *ctx);

#endif
