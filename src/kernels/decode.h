/* Attention for decoding against a KV cache: few queries, many keys (src/kernels/decode.c).
 *
 * The contract is attn__sdpa_ref's (kernels.h) minus dropout and the weights output: GQA/MQA,
 * both masks (KEEP/BLOCK/ADD, broadcast strides, mask_ncols), causal in both alignments (the
 * decode case is bottom-right: the new queries see the whole cache), the sliding window,
 * ALiBi and the soft cap, lse, any scale, and any strides as long as the last dimension of q,
 * k, v and o is contiguous: K and V are read in place (the cache is usually a view
 * [B, Hkv, S_max, D] cut to the current S), never packed.
 *
 * Split-KV.  The fused kernels (flash.c) parallelise over (batch, head, query tile), which for
 * one query and 32 heads is 32 tasks of one row each, after packing the whole cache.  Here the
 * keys of each (batch, kv head) are cut into chunks of ATTN__DECODE_CHUNK keys; one task takes
 * one chunk and all the query rows of the heads that share its kv head (R = H/Hkv * L rows), so
 * each K and V row is read from memory once per call.  It writes, per row, the chunk's maximum
 * m_c, sum l_c = sum_j exp(s_j - m_c) and unnormalised output O_c = sum_j exp(s_j - m_c) v_j;
 * then a merge, per row, combines the chunks in order: m = max_c m_c,
 * l = sum_c exp(m_c - m) l_c, o = sum_c exp(m_c - m) O_c / l, lse = m + log l (a row that sees
 * no key: zeros and -inf).  The chunk size is fixed, never derived from the thread count, so the
 * result is bit-identical for every thread count; ISAs differ in the last bits.
 *
 * Forward only: training goes through attn__sdpa_bwd (the fused backward recomputes its own
 * forward), so there is no decode backward. */
#ifndef ATTN_DECODE_H
#define ATTN_DECODE_H
#include "bf16.h"
#include "kernels.h"

/* Keys per task (a multiple of 16).  256 to 2048 ran within noise of each other at S = 32768
 * (L = 1 and 16, 32 heads, D = 128, 1 and 2 threads); 512 keeps a task's K and V chunks
 * (512 x D floats each) in L2 and gives 64 tasks per head at S = 32768. */
#define ATTN__DECODE_CHUNK 512
/* When attn__sdpa takes this path (measured against the fused kernels and the row kernels of
 * sdpa_fast.c, D = 64 and 128, 2 threads): L <= 16 queries, at most 128 rows per kv head
 * (R = H/Hkv * L: beyond, the fused kernels' register-blocked products win), and S >= 32 keys
 * (below, the row kernels are as fast or faster). */
#define ATTN__DECODE_MAX_L 16
#define ATTN__DECODE_MAX_ROWS 128
#define ATTN__DECODE_MIN_S 32

/* 1 when attn__sdpa should run a on the decode path: no weights, no dropout, unit inner
 * strides, the size limits above.  Environment ATTN_DECODE=0 turns the path off (benchmarks
 * compare with the fused kernels).  drop_base is irrelevant: dropout never comes here. */
ATTN__HIDDEN int attn__decode_eligible(const attn_ctx *ctx, const attn__sdpa_args *a);

/* Forward: writes a->o and, if a->lse, the log-sum-exp (-inf and a zero row where no key is
 * visible).  Any L and S work (the eligibility test only picks where it pays);
 * ATTN_E_UNSUPPORTED for weights, dropout or a non-contiguous last dimension.  Fails otherwise
 * only when the workspace runs out. */
ATTN__HIDDEN attn_status attn__decode(attn_ctx *ctx, const attn__sdpa_args *a);

/* attn__decode with q, k, v in bf16 (a->q, a->k, a->v are ignored; the strides a->qs, a->ks,
 * a->vs apply, in elements); o and lse stay float.  The numerics are attn__flash_fwd_bf16's
 * (flash.h, oracle attn__sdpa_bf16_ref): K and V are read in place as bf16 and widened to fp32
 * in registers (exact), so the scores sum exact products in fp32; each chunk's weights
 * exp(s - m_c) are rounded to bf16 before the product with V (l_c sums the unrounded ones).
 * The driver, eligibility and features are the fp32 path's; it reads half the bytes. */
ATTN__HIDDEN attn_status attn__decode_bf16(attn_ctx *ctx, const attn__sdpa_args *a,
                                           const attn__bf16 *q, const attn__bf16 *k,
                                           const attn__bf16 *v);

/* Several problems in one pass of the pool (continuous batching: one per sequence, each over
 * its own cache): problem i is jobs[i].a with q16 == NULL (fp32, attn__decode) or its bf16
 * inputs (attn__decode_bf16); each gets exactly the bits it gets alone, while the chunk tasks
 * of all of them share one parallel loop (and the merges another, or run in place when
 * small).  Same errors as attn__decode. */
typedef struct attn__decode_job {
    const attn__sdpa_args *a;
    const attn__bf16 *q16, *k16, *v16;
} attn__decode_job;
ATTN__HIDDEN attn_status attn__decode_multi(attn_ctx *ctx, const attn__decode_job *jobs, int n);

/* ---- microkernels, one table per ISA (ref always present) ----------------------------------
 * qk: s[r*lds + j] = sum_{d<D} q[r*ldq + d] * k[j*ldk + d] for r < rows, j < n.  q rows are
 *     zero padded up to ldq >= rup16(D) (kernels may read them whole); k rows hold D floats
 *     (nothing past them is read).  n >= 1.
 * pv: o[r*ldo + e] = sum_{j<n} p[r*ldp + j] * v[j*ldv + e] for r < rows, e < Dv, the j sum in
 *     order; o is overwritten, its columns up to rup16(Dv) may be written (ldo >= rup16(Dv));
 *     v rows hold Dv floats (nothing past them is read).  n >= 1.
 * qk_bf16, pv_bf16: the same with k, v in bf16 (ldk, ldv in elements), widened to fp32 as they
 *     are loaded (exact): the products are those of qk and pv on the widened values. */
typedef struct attn__decode_kernels {
    int isa;
    void (*qk)(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq, const float *k,
               int64_t ldk, float *s, int64_t lds);
    void (*pv)(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp, const float *v,
               int64_t ldv, float *o, int64_t ldo);
    void (*qk_bf16)(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq,
                    const attn__bf16 *k, int64_t ldk, float *s, int64_t lds);
    void (*pv_bf16)(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp,
                    const attn__bf16 *v, int64_t ldv, float *o, int64_t ldo);
} attn__decode_kernels;

ATTN__HIDDEN const attn__decode_kernels *attn__decode_kernels_ref(void);
ATTN__HIDDEN const attn__decode_kernels *attn__decode_kernels_avx2(void);   /* NULL if not built */
ATTN__HIDDEN const attn__decode_kernels *attn__decode_kernels_avx512(void); /* NULL if not built */
ATTN__HIDDEN const attn__decode_kernels *attn__decode_kernels_neon(void);   /* NULL if not built */

#endif
