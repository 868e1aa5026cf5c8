/* RMSNorm (HF LlamaRMSNorm): the public functional op.  The row kernel, its definition and its
 * AVX-512 twin are attn__rms_norm in src/kernels/ew.c (contract in ew.h); the Llama blocks call
 * that directly on their contiguous rows.  Backward: not yet. */
#include "../kernels/ew.h"
#include "../ops/ops_util.h"
#include "llm.h"

attn_status attn_rms_norm(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *weight,
                          float eps, attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "rms_norm input", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, y, "rms_norm output", ATTN_F32, 1, 4));
    ATTN_TRY(attn__same_shape(ctx, x, "input", y, "output"));
    ATTN_FAIL_IF(!(eps > 0.0f) || !isfinite(eps), ctx, ATTN_E_INVALID,
                 "rms_norm eps must be positive and finite, got %g", (double)eps);
    int64_t E = x->shape[x->ndim - 1];
    if (weight && weight->data) {
        ATTN_TRY(attn__check(ctx, weight, "rms_norm weight", ATTN_F32, 1, 1));
        ATTN_TRY(attn__check_shape(ctx, weight, "rms_norm weight", 1, &E));
        ATTN_TRY(attn__check_finite(ctx, weight, "rms_norm weight", 0));
    }
    {
        attn__arg o[] = {{y, "y", 0}}, in[] = {{x, "x", 1u}, {weight, "weight", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_rms_norm", o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "rms_norm input", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *wp = NULL;
    float *yp;
    int64_t M, ldx, ldy;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    if (weight && weight->data) ATTN_TRYG(attn__contig(ctx, weight, &wp));
    ATTN_TRYG(attn__rows_out_begin(ctx, y, &yp, &ldy));
    attn__rms_norm(ctx, xp, ldx, wp, eps, yp, ldy, M, E);
    attn__rows_out_end(yp, y);
done:
    attn__ws_release(ctx, mk);
    return st;
}
