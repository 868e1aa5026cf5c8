/* Helpers shared by the stateless ops in src/ops; defined in ops.c. */
#ifndef ATTN_OPS_UTIL_H
#define ATTN_OPS_UTIL_H
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
#endif
