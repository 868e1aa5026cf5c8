/* Helpers shared by the training tasks: time, checkpoint metadata. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train_util.h"

double attn__now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

attn_status attn__meta_put_i(attn_st_writer *w, const char *k, long long v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    return attn_st_writer_meta(w, k, b);
}

attn_status attn__meta_put_f(attn_st_writer *w, const char *k, double v) {
    char b[48];
    snprintf(b, sizeof b, "%.9g", v);
    return attn_st_writer_meta(w, k, b);
}

attn_status attn__meta_get_i(attn_ctx *ctx, const attn_st *st, const char *k, int64_t *v) {
    const char *s = attn_st_meta(st, k);
    ATTN_FAIL_IF(!s, ctx, ATTN_E_FORMAT, "checkpoint metadata has no \"%s\"", k);
    /* as the writer puts it: optional '-', then digits only (strtoll would also take leading
     * spaces, a '+' and an out-of-range value, clamped) */
    const char *d = s + (*s == '-');
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    ATTN_FAIL_IF(*d < '0' || *d > '9' || *end || errno == ERANGE, ctx, ATTN_E_FORMAT,
                 "checkpoint metadata %s = \"%s\" is not a decimal integer", k, s);
    *v = x;
    return ATTN_OK;
}

attn_status attn__meta_get_f(attn_ctx *ctx, const attn_st *st, const char *k, float *v) {
    const char *s = attn_st_meta(st, k);
    ATTN_FAIL_IF(!s, ctx, ATTN_E_FORMAT, "checkpoint metadata has no \"%s\"", k);
    char *end;
    double x = strtod(s, &end);
    /* strtod skips leading spaces; the writer never puts any */
    ATTN_FAIL_IF(*end || end == s || !isfinite(x) || *s == ' ' || (*s >= '\t' && *s <= '\r'),
                 ctx, ATTN_E_FORMAT,
                 "checkpoint metadata %s = \"%s\" is not a number", k, s);
    *v = (float)x;
    return ATTN_OK;
}

attn_status attn__dp_check(attn_ctx *ctx, const attn_train_dp *dp, int accum, int64_t batch,
                           const char *task) {
    ATTN_FAIL_IF(accum < 0 || accum > 65536, ctx, ATTN_E_INVALID,
                 "%s: accum must be 1..65536 (0: 1), got %d", task, accum);
    if (accum == 0) accum = 1;
    if (dp)
        ATTN_FAIL_IF(dp->nranks < 1 || dp->rank < 0 || dp->rank >= dp->nranks || !dp->begin ||
                         !dp->end || !dp->sum,
                     ctx, ATTN_E_INVALID,
                     "%s: the data-parallel table is incomplete (rank %d of %d, functions "
                     "missing)", task, dp->rank, dp->nranks);
    const int64_t shares = (int64_t)accum * (dp ? dp->nranks : 1);
    if (accum == 1)
        ATTN_FAIL_IF(batch % shares != 0, ctx, ATTN_E_INVALID,
                     "%s: the global batch of %lld is not divisible by the %d ranks: every rank "
                     "takes an equal share (use a batch that is a multiple of %d, or another "
                     "number of ranks)", task, (long long)batch, (int)shares, (int)shares);
    ATTN_FAIL_IF(batch % shares != 0, ctx, ATTN_E_INVALID,
                 "%s: the global batch of %lld is not divisible into %lld equal shares (%d "
                 "ranks x accum %d): use a batch that is a multiple of %lld",
                 task, (long long)batch, (long long)shares, dp ? dp->nranks : 1, accum,
                 (long long)shares);
    return ATTN_OK;
}

void attn__scale_f(float *x, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

int attn__setting_dtype(attn_train_setting *s, int n, const char *dtype, const attn_st *resume) {
    const char *dt = dtype ? dtype : "f32";
    if (!resume || attn_st_meta(resume, "train.dtype") || strcmp(dt, "f32") != 0)
        attn_train_setting_s(&s[n++], "train.dtype", "--dtype", dt);
    return n;
}
