/* Helpers shared by the stateless ops of src/ops (ops_util.h). */
#include <math.h>
#include <string.h>

#include "ops_util.h"

attn_status attn__rows_in(attn_ctx *ctx, const attn_tensor *t, const float **p, int64_t *M,
                          int64_t *ld) {
    if (attn__rows(t, M, ld)) {
        *p = t->data;
        if (*M == 1) *ld = t->shape[t->ndim - 1];
        return ATTN_OK;
    }
    ATTN_TRY(attn__contig(ctx, t, p));
    *ld = t->shape[t->ndim - 1];
    return ATTN_OK;
}

attn_status attn__rows_out_begin(attn_ctx *ctx, attn_tensor *t, float **p, int64_t *ld) {
    int64_t M;
    if (attn__rows(t, &M, ld)) {
        *p = t->data;
        if (M == 1) *ld = t->shape[t->ndim - 1];
        return ATTN_OK;
    }
    *ld = t->shape[t->ndim - 1];
    return attn__ws_f32(ctx, p, attn_tensor_numel(t), 1, 1, 1);
}

void attn__rows_out_end(float *p, attn_tensor *t) {
    if (p != t->data) attn__store(p, t);
}

attn_status attn__same_shape(attn_ctx *ctx, const attn_tensor *a, const char *an,
                             const attn_tensor *b, const char *bn) {
    int ok = a->ndim == b->ndim;
    for (int d = 0; ok && d < a->ndim; d++) ok = a->shape[d] == b->shape[d];
    if (ok) return ATTN_OK;
    char x[96], y[96];
    return attn__fail(ctx, ATTN_E_SHAPE, "%s has shape %s but %s has shape %s", bn,
                      attn__shape_str(b, y, sizeof y), an, attn__shape_str(a, x, sizeof x));
}

attn_status attn__unary_rows(attn_ctx *ctx, const char *fn, const char *in_name,
                             const char *out_name, const attn_tensor *x, attn_tensor *y,
                             int allow_inf, attn__rows_fn rows, const void *arg) {
    ATTN_TRY(attn__check(ctx, x, in_name, ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, y, out_name, ATTN_F32, 1, 4));
    ATTN_TRY(attn__same_shape(ctx, x, "input", y, "output"));
    {
        attn__arg o[] = {{y, "y", 0}}, in[] = {{x, "x", 1u}}; /* y may be x */
        ATTN_TRY(attn__check_outputs(ctx, fn, o, 1, in, 1));
    }
    ATTN_TRY(attn__check_finite(ctx, x, in_name, allow_inf));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp;
    float *yp;
    int64_t M, ldx, ldy, N = x->shape[x->ndim - 1];
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__rows_out_begin(ctx, y, &yp, &ldy));
    rows(arg, xp, ldx, yp, ldy, M, N);
    attn__rows_out_end(yp, y);
done:
    attn__ws_release(ctx, mk);
    return st;
}
