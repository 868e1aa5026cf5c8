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
#endif
