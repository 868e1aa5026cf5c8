/* attn_linear (y = x W^T + b) and its backward.
 * Both validate and run the fast GEMM (kernels/linear.c: float, or bf16 operands with float
 * sums on an ATTN_CTX_BF16_MATMUL context; the plain C attn__linear_ref stays the tests'
 * oracle; see ops_util.h for the backwards'
 * rules: NULL gradients skipped, gradients overwritten, outputs checked for overlap). */
#include <math.h>
#include <string.h>

#include "ops_util.h"

/* x [..., IN] against W [OUT, IN], and y (the output, or dy) [..., OUT] with x's leading dims. */
static attn_status check_rows(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *W,
                              const attn_tensor *y, const char *xname, const char *wname,
                              const char *yname) {
    const int64_t IN = W->shape[1], OUT = W->shape[0];
    char s1[96], s2[96];
    ATTN_FAIL_IF(x->shape[x->ndim - 1] != IN, ctx, ATTN_E_SHAPE,
                 "%s %s does not match %s %s (last dim must be %lld)", xname,
                 attn__shape_str(x, s1, sizeof s1), wname, attn__shape_str(W, s2, sizeof s2),
                 (long long)IN);
    int ok = y->ndim == x->ndim && y->shape[y->ndim - 1] == OUT;
    for (int d = 0; ok && d + 1 < x->ndim; d++) ok = y->shape[d] == x->shape[d];
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_SHAPE, "%s has shape %s, expected the input's %s with last dim %lld",
                 yname, attn__shape_str(y, s1, sizeof s1), attn__shape_str(x, s2, sizeof s2),
                 (long long)OUT);
    return ATTN_OK;
}

attn_status attn_linear(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *W,
                        const attn_tensor *b, attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "linear input", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, W, "linear weight", ATTN_F32, 2, 2));
    ATTN_TRY(attn__check(ctx, y, "linear output", ATTN_F32, 1, 4));
    int64_t IN = W->shape[1], OUT = W->shape[0];
    ATTN_TRY(check_rows(ctx, x, W, y, "linear input", "weight", "linear output"));
    if (b && b->data) {
        ATTN_TRY(attn__check(ctx, b, "linear bias", ATTN_F32, 1, 1));
        ATTN_TRY(attn__check_shape(ctx, b, "linear bias", 1, &OUT));
    }
    {
        attn__arg o[] = {{y, "y", 0}}, in[] = {{x, "x", 0}, {W, "W", 0}, {b, "b", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_linear", o, 1, in, 3));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "linear input", 0));
    ATTN_TRY(attn__check_finite(ctx, W, "linear weight", 0));
    if (b && b->data) ATTN_TRY(attn__check_finite(ctx, b, "linear bias", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *wp, *bp = NULL;
    float *yp;
    int64_t M, ldx, ldy;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__contig(ctx, W, &wp));
    if (b && b->data) ATTN_TRYG(attn__contig(ctx, b, &bp));
    ATTN_TRYG(attn__rows_out_begin(ctx, y, &yp, &ldy));
    ATTN_TRYG(attn__linear(ctx, xp, ldx, wp, bp, yp, ldy, M, IN, OUT));
    attn__rows_out_end(yp, y);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_linear_backward(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *W,
                                 const attn_tensor *dy, attn_tensor *dx, attn_tensor *dW,
                                 attn_tensor *db) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "linear_backward x", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, W, "linear_backward W", ATTN_F32, 2, 2));
    ATTN_TRY(attn__check(ctx, dy, "linear_backward dy", ATTN_F32, 1, 4));
    int64_t IN = W->shape[1], OUT = W->shape[0];
    ATTN_TRY(check_rows(ctx, x, W, dy, "linear_backward x", "W", "linear_backward dy"));
    if (wanted(dx)) ATTN_TRY(check_like(ctx, dx, "linear_backward dx", x, "linear_backward x"));
    if (wanted(dW)) ATTN_TRY(check_out(ctx, dW, "linear_backward dW", 2, W->shape));
    if (wanted(db)) ATTN_TRY(check_out(ctx, db, "linear_backward db", 1, &OUT));
    {
        attn__arg o[] = {{dx, "dx", 0}, {dW, "dW", 0}, {db, "db", 0}},
                  in[] = {{x, "x", 0}, {W, "W", 0}, {dy, "dy", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_linear_backward", o, 3, in, 3));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "linear_backward x", 0));
    ATTN_TRY(attn__check_finite(ctx, W, "linear_backward W", 0));
    ATTN_TRY(attn__check_finite(ctx, dy, "linear_backward dy", 0));
    if (!wanted(dx) && !wanted(dW) && !wanted(db)) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *wp, *dyp;
    float *dxp = NULL, *dwp = NULL, *dbp = NULL;
    int64_t M, ldx, lddy, lddx = 0;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__rows_in(ctx, dy, &dyp, &M, &lddy));
    ATTN_TRYG(attn__contig(ctx, W, &wp));
    if (wanted(dW)) ATTN_TRYG(ws_zero(ctx, &dwp, OUT * IN));
    if (wanted(db)) ATTN_TRYG(ws_zero(ctx, &dbp, OUT));
    if (wanted(dx)) ATTN_TRYG(attn__rows_out_begin(ctx, dx, &dxp, &lddx));
    ATTN_TRYG(attn__linear_bwd(ctx, xp, ldx, wp, dyp, lddy, dxp, lddx, dwp, dbp, M, IN, OUT));
    if (dxp) attn__rows_out_end(dxp, dx);
    if (dwp) attn__store(dwp, dW);
    if (dbp) attn__store(dbp, db);
done:
    attn__ws_release(ctx, mk);
    return st;
}
