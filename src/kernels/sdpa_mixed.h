/* Mixed-precision scaled dot-product attention (sdpa_mixed.c): for a context created with
 * ATTN_CTX_BF16_MATMUL, the attention's products (Q K^T, P V and the backward's five) take
 * bfloat16 operands with float sums on the context's mixed GEMM kernel (gemm_mixed.h), as
 * torch.autocast(bfloat16) runs F.scaled_dot_product_attention; the softmax, masks, score
 * features, lse and dropout stay float.  Same contract as attn__sdpa / attn__sdpa_bwd
 * (kernels.h) within the bf16 rounding of the operands; identical results for any thread
 * count.  The ops and layers reach it through attn__sdpa and attn__sdpa_bwd (sdpa_fast.c). */
#ifndef ATTN_SDPA_MIXED_H
#define ATTN_SDPA_MIXED_H
#include "kernels.h"

#define ATTN__SDPA_MIXED_MAX_S 16384 /* keys at most (the per-thread chunk buffers) */

/* Whether the context runs this forward (resp. backward) here: the flag set, no weights
 * output, unit-stride rows, L x S >= 32 x 32, S <= ATTN__SDPA_MIXED_MAX_S, D, Dv <= 512; the
 * backward also without a mask gradient.  Never depends on the thread count. */
ATTN__HIDDEN int attn__sdpa_mixed_ok(const attn_ctx *ctx, const attn__sdpa_args *a);
ATTN__HIDDEN int attn__sdpa_mixed_bwd_ok(const attn_ctx *ctx, const attn__sdpa_args *a,
                                         const attn__sdpa_grads *g);
ATTN__HIDDEN attn_status attn__sdpa_mixed(attn_ctx *ctx, const attn__sdpa_args *a);
/* From the saved out and lse when a has both, else after recomputing them. */
ATTN__HIDDEN attn_status attn__sdpa_mixed_bwd(attn_ctx *ctx, const attn__sdpa_args *a,
                                              const attn__sdpa_grads *g);
#endif
