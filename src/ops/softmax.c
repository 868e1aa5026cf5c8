/* attn_softmax and its backward.
 * The forward validates and runs the reference kernels (see ops_util.h for the backwards'
 * rules: NULL gradients skipped, gradients overwritten, outputs checked for overlap). */
#include <math.h>
#include <string.h>

#include "ops_util.h"

static void softmax_rows(const void *arg, const float *x, int64_t ldx, float *y, int64_t ldy,
                         int64_t M, int64_t N) {
    (void)arg;
    for (int64_t m = 0; m < M; m++) attn__softmax_row(x + m * ldx, y + m * ldy, N);
}

attn_status attn_softmax(attn_ctx *ctx, const attn_tensor *x, attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    return attn__unary_rows(ctx, "attn_softmax", "softmax input", "softmax output", x, y, 1,
                            softmax_rows, NULL);
}

attn_status attn_softmax_backward(attn_ctx *ctx, const attn_tensor *y, const attn_tensor *dy,
                                  attn_tensor *dx) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, y, "softmax_backward y", ATTN_F32, 1, 4));
    ATTN_TRY(check_like(ctx, dy, "softmax_backward dy", y, "softmax_backward y"));
    if (wanted(dx)) ATTN_TRY(check_like(ctx, dx, "softmax_backward dx", y, "softmax_backward y"));
    {
        attn__arg o[] = {{dx, "dx", 0}}, in[] = {{y, "y", 1u}, {dy, "dy", 1u}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_softmax_backward", o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, y, "softmax_backward y", 0));
    ATTN_TRY(attn__check_finite(ctx, dy, "softmax_backward dy", 0));
    if (!wanted(dx)) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    const float *yp, *dyp;
    float *dxp;
    int64_t M, ldy, lddy, lddx, C = y->shape[y->ndim - 1];
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, y, &yp, &M, &ldy));
    ATTN_TRYG(attn__rows_in(ctx, dy, &dyp, &M, &lddy));
    ATTN_TRYG(attn__rows_out_begin(ctx, dx, &dxp, &lddx));
    for (int64_t m = 0; m < M; m++)
        attn__softmax_row_bwd(yp + m * ldy, dyp + m * lddy, dxp + m * lddx, C);
    attn__rows_out_end(dxp, dx);
done:
    attn__ws_release(ctx, mk);
    return st;
}
