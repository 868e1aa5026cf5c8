/* attn_layer_norm and its backward.
 * The forward validates and runs the reference kernels (see ops_util.h for the backwards'
 * rules: NULL gradients skipped, gradients overwritten, outputs checked for overlap). */
#include <math.h>
#include <string.h>

#include "ops_util.h"

attn_status attn_layer_norm(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *weight,
                            const attn_tensor *bias, float eps, attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "layer_norm input", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, y, "layer_norm output", ATTN_F32, 1, 4));
    ATTN_TRY(attn__same_shape(ctx, x, "input", y, "output"));
    ATTN_TRY(check_eps(ctx, "layer_norm", eps));
    int64_t E = x->shape[x->ndim - 1];
    ATTN_TRY(check_norm_param(ctx, weight, "layer_norm weight", E));
    ATTN_TRY(check_norm_param(ctx, bias, "layer_norm bias", E));
    {
        attn__arg o[] = {{y, "y", 0}},
                  in[] = {{x, "x", 1u}, {weight, "weight", 0}, {bias, "bias", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_layer_norm", o, 1, in, 3));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "layer_norm input", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *wp = NULL, *bp = NULL;
    float *yp;
    int64_t M, ldx, ldy;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    if (weight && weight->data) ATTN_TRYG(attn__contig(ctx, weight, &wp));
    if (bias && bias->data) ATTN_TRYG(attn__contig(ctx, bias, &bp));
    ATTN_TRYG(attn__rows_out_begin(ctx, y, &yp, &ldy));
    attn__layer_norm_ref(xp, ldx, wp, bp, eps, yp, ldy, M, E);
    attn__rows_out_end(yp, y);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_layer_norm_backward(attn_ctx *ctx, const attn_tensor *x,
                                     const attn_tensor *weight, float eps,
                                     const attn_tensor *dy, attn_tensor *dx,
                                     attn_tensor *dweight, attn_tensor *dbias) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "layer_norm_backward x", ATTN_F32, 1, 4));
    ATTN_TRY(check_like(ctx, dy, "layer_norm_backward dy", x, "layer_norm_backward x"));
    ATTN_TRY(check_eps(ctx, "layer_norm", eps));
    int64_t E = x->shape[x->ndim - 1];
    ATTN_TRY(check_norm_param(ctx, weight, "layer_norm_backward weight", E));
    if (wanted(dx))
        ATTN_TRY(check_like(ctx, dx, "layer_norm_backward dx", x, "layer_norm_backward x"));
    if (wanted(dweight)) ATTN_TRY(check_out(ctx, dweight, "layer_norm_backward dweight", 1, &E));
    if (wanted(dbias)) ATTN_TRY(check_out(ctx, dbias, "layer_norm_backward dbias", 1, &E));
    {
        attn__arg o[] = {{dx, "dx", 0}, {dweight, "dweight", 0}, {dbias, "dbias", 0}},
                  in[] = {{x, "x", 1u}, {weight, "weight", 0}, {dy, "dy", 1u}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_layer_norm_backward", o, 3, in, 3));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "layer_norm_backward x", 0));
    ATTN_TRY(attn__check_finite(ctx, dy, "layer_norm_backward dy", 0));
    if (!wanted(dx) && !wanted(dweight) && !wanted(dbias)) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *dyp, *wp = NULL;
    float *dxp = NULL, *dwp = NULL, *dbp = NULL;
    int64_t M, ldx, lddy, lddx = 0;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__rows_in(ctx, dy, &dyp, &M, &lddy));
    if (wanted(weight)) ATTN_TRYG(attn__contig(ctx, weight, &wp));
    if (wanted(dweight)) ATTN_TRYG(ws_zero(ctx, &dwp, E));
    if (wanted(dbias)) ATTN_TRYG(ws_zero(ctx, &dbp, E));
    if (wanted(dx)) ATTN_TRYG(attn__rows_out_begin(ctx, dx, &dxp, &lddx));
    ATTN_TRYG(attn__layer_norm_bwd(ctx, xp, ldx, wp, eps, dyp, lddy, dxp, lddx, dwp, dbp, M, E));
    if (dxp) attn__rows_out_end(dxp, dx);
    if (dwp) attn__store(dwp, dweight);
    if (dbp) attn__store(dbp, dbias);
done:
    attn__ws_release(ctx, mk);
    return st;
}
