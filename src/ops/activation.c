/* attn_activate (ReLU, GELU, ...) and its backward.
 * The forward validates and runs the reference kernels (see ops_util.h for the backwards'
 * rules: NULL gradients skipped, gradients overwritten, outputs checked for overlap). */
#include <math.h>
#include <string.h>

#include "ops_util.h"

static void act_rows(const void *arg, const float *x, int64_t ldx, float *y, int64_t ldy,
                     int64_t M, int64_t N) {
    attn__act_ref(*(const attn_activation *)arg, x, ldx, y, ldy, M, N);
}

attn_status attn_activate(attn_ctx *ctx, attn_activation act, const attn_tensor *x,
                          attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF((unsigned)act > ATTN_ACT_TANH, ctx, ATTN_E_INVALID, "unknown activation %d",
                 (int)act);
    return attn__unary_rows(ctx, "attn_activate", "activation input", "activation output", x, y,
                            0, act_rows, &act);
}

attn_status attn_activate_backward(attn_ctx *ctx, attn_activation act, const attn_tensor *x,
                                   const attn_tensor *dy, attn_tensor *dx) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF((unsigned)act > ATTN_ACT_TANH, ctx, ATTN_E_INVALID, "unknown activation %d",
                 (int)act);
    ATTN_TRY(attn__check(ctx, x, "activation_backward x", ATTN_F32, 1, 4));
    ATTN_TRY(check_like(ctx, dy, "activation_backward dy", x, "activation_backward x"));
    if (wanted(dx))
        ATTN_TRY(check_like(ctx, dx, "activation_backward dx", x, "activation_backward x"));
    {
        attn__arg o[] = {{dx, "dx", 0}}, in[] = {{x, "x", 1u}, {dy, "dy", 1u}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_activate_backward", o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "activation_backward x", 0));
    ATTN_TRY(attn__check_finite(ctx, dy, "activation_backward dy", 0));
    if (!wanted(dx)) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *dyp;
    float *dxp;
    int64_t n = attn_tensor_numel(x);
    attn_status st;
    ATTN_TRYG(attn__contig(ctx, x, &xp));
    ATTN_TRYG(attn__contig(ctx, dy, &dyp));
    if (attn_tensor_is_contiguous(dx)) dxp = dx->data; /* elementwise: may overlap x or dy */
    else ATTN_TRYG(attn__ws_f32(ctx, &dxp, n, 1, 1, 1));
    attn__act_bwd(ctx, act, xp, dyp, dxp, n);
    if (dxp != dx->data) attn__store(dxp, dx);
done:
    attn__ws_release(ctx, mk);
    return st;
}
