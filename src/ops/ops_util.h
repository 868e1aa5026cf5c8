/* Helpers shared by the stateless ops in src/ops (one file per op family, its forward next to its
 * backward); defined in ops_util.c, the small ones here. */
#ifndef ATTN_OPS_UTIL_H
#define ATTN_OPS_UTIL_H
#include <math.h>
#include <string.h>

#include "../kernels/kernels.h"

/* Views t as rows [M, N] (N = last dim); copies into workspace when the leading dims do not
 * collapse.  *ld receives the row stride. */
ATTN__HIDDEN attn_status attn__rows_in(attn_ctx *ctx, const attn_tensor *t, const float **p,
                                       int64_t *M, int64_t *ld);
/* Output rows: direct when collapsible, else a workspace buffer that attn__rows_out_end
 * stores back into t. */
ATTN__HIDDEN attn_status attn__rows_out_begin(attn_ctx *ctx, attn_tensor *t, float **p,
                                              int64_t *ld);
ATTN__HIDDEN void attn__rows_out_end(float *p, attn_tensor *t);
/* ATTN_E_SHAPE naming both arguments and shapes unless a and b have the same shape. */
ATTN__HIDDEN attn_status attn__same_shape(attn_ctx *ctx, const attn_tensor *a, const char *an,
                                          const attn_tensor *b, const char *bn);

/* y = f(x) over the rows [M, N] of x (N: the last dim) for the elementwise ops whose output
 * may be their input (F32, 1-D to 4-D, the same shape): the checks (names in_name / out_name,
 * fn in the overlap message, finiteness with -inf allowed when allow_inf), then one call of
 * rows(arg, x, ldx, y, ldy, M, N). */
typedef void (*attn__rows_fn)(const void *arg, const float *x, int64_t ldx, float *y,
                              int64_t ldy, int64_t M, int64_t N);
ATTN__HIDDEN attn_status attn__unary_rows(attn_ctx *ctx, const char *fn, const char *in_name,
                                          const char *out_name, const attn_tensor *x,
                                          attn_tensor *y, int allow_inf, attn__rows_fn rows,
                                          const void *arg);

/* attn_sdpa / attn_sdpa_backward with the dropout stream starting at index drop_base (the
 * packed-sequence calls of varlen.c give each sequence its own range of the stream); the
 * backward takes the saved forward (out and lse, both or neither) as attn_sdpa_backward_saved.
 * fn names the public function in messages. */
ATTN__HIDDEN attn_status attn__sdpa_call(attn_ctx *ctx, const char *fn, const attn_tensor *q,
                                         const attn_tensor *k, const attn_tensor *v,
                                         const attn_mask *mask, const attn_sdpa_options *opt,
                                         attn_tensor *out, attn_tensor *weights,
                                         attn_tensor *lse, uint64_t drop_base);
ATTN__HIDDEN attn_status attn__sdpa_backward_call(attn_ctx *ctx, const char *fn,
                                                  const attn_tensor *q,
                                                  const attn_tensor *k, const attn_tensor *v,
                                                  const attn_mask *mask,
                                                  const attn_sdpa_options *opt,
                                                  const attn_tensor *out, const attn_tensor *lse,
                                                  const attn_tensor *dout, attn_tensor *dq,
                                                  attn_tensor *dk, attn_tensor *dv,
                                                  attn_tensor *dmask, uint64_t drop_base);

/* ---- the backwards' argument helpers ------------------------------------------------------
 * Every backward validates as its forward does and OVERWRITES the gradients it is given (PyTorch
 * autograd semantics); a gradient argument that is NULL (or has NULL data) is not computed.
 * Outputs may not overlap inputs or each other (attn__check_outputs), except that the
 * elementwise input gradients (softmax, activation, layer norm: dx; positional ADD: dx) may be
 * exactly dy / y / x / dout, as attn.h states: their kernels read each element before writing
 * it.  Parameter-like gradients (dW, db, dweight, dbias) are summed in a zeroed workspace buffer
 * and then stored.  The attention backwards are in attention.c. */
static inline int wanted(const attn_tensor *t) { return t && t->data; }

/* Zeroed F32 workspace buffer of n elements. */
static inline attn_status ws_zero(attn_ctx *ctx, float **p, int64_t n) {
    ATTN_TRY(attn__ws_f32(ctx, p, n, 1, 1, 1));
    memset(*p, 0, (size_t)n * sizeof(float));
    return ATTN_OK;
}

/* An output of exactly `shape` (n dims). */
static inline attn_status check_out(attn_ctx *ctx, const attn_tensor *t, const char *what,
                                    int n, const int64_t *shape) {
    ATTN_TRY(attn__check(ctx, t, what, ATTN_F32, n, n));
    return attn__check_shape(ctx, t, what, n, shape);
}

/* An F32 tensor of the same shape as ref. */
static inline attn_status check_like(attn_ctx *ctx, const attn_tensor *t, const char *what,
                                     const attn_tensor *ref, const char *refname) {
    ATTN_TRY(attn__check(ctx, t, what, ATTN_F32, 1, 4));
    return attn__same_shape(ctx, ref, refname, t, what);
}

/* ---- the norms' argument checks (layer_norm, rms_norm; forwards and backwards) ---------- */
/* eps positive and finite (norm: "layer_norm" or "rms_norm", for the message). */
static inline attn_status check_eps(attn_ctx *ctx, const char *norm, float eps) {
    ATTN_FAIL_IF(!(eps > 0.0f) || !isfinite(eps), ctx, ATTN_E_INVALID,
                 "%s eps must be positive and finite, got %g", norm, (double)eps);
    return ATTN_OK;
}

/* A norm's parameter (weight, bias) where given: F32 [E], finite. */
static inline attn_status check_norm_param(attn_ctx *ctx, const attn_tensor *t, const char *what,
                                           int64_t E) {
    if (!wanted(t)) return ATTN_OK;
    ATTN_TRY(check_out(ctx, t, what, 1, &E));
    return attn__check_finite(ctx, t, what, 0);
}
#endif
