/* Helpers shared by the training tasks (dates, charlm): time, checkpoint metadata. */
#ifndef ATTN_TRAIN_UTIL_H
#define ATTN_TRAIN_UTIL_H
#include "internal.h"

/* Seconds on a monotonic clock. */
ATTN__HIDDEN double attn__now_s(void);
/* Metadata entries as decimal integers and floats ("%.9g": float round-trips exactly). */
ATTN__HIDDEN attn_status attn__meta_put_i(attn_st_writer *w, const char *k, long long v);
ATTN__HIDDEN attn_status attn__meta_put_f(attn_st_writer *w, const char *k, double v);
/* Reads them back; a missing or malformed entry is ATTN_E_FORMAT naming it. */
ATTN__HIDDEN attn_status attn__meta_get_i(attn_ctx *ctx, const attn_st *st, const char *k,
                                          int64_t *v);
ATTN__HIDDEN attn_status attn__meta_get_f(attn_ctx *ctx, const attn_st *st, const char *k,
                                          float *v);
#endif
