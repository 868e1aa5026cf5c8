/* The backwards of the layer norm and of the activations over the context's threads, on the
 * row kernels of ctx->kern.ew (ew.h), or the double references (attn__layer_norm_bwd_ref,
 * attn__act_bwd_ref) where the table has none (ATTN_ISA=ref, AVX2).  Rows are split between
 * the threads for the statistics and dx, columns for the weight and bias sums (each column
 * summed over all rows in row order by one thread): the same bits for any thread count. */
#include "../core/pool.h"
#include "ew.h"
#include "kernels.h"

typedef struct lnb_job {
    const attn__ew_kernel *k;
    const float *x, *w, *dy;
    int64_t ldx, lddy, lddx, M, E;
    float eps;
    float *mean, *rstd, *dx;
    double *sw, *sb; /* [E] column sums */
} lnb_job;

enum { LNB_COLS = 16 };

static void lnb_stats(void *arg, int64_t m0, int64_t m1, int tid) {
    (void)tid;
    const lnb_job *j = arg;
    j->k->ln_stats(j->x + m0 * j->ldx, j->ldx, j->eps, m1 - m0, j->E, j->mean + m0, j->rstd + m0);
}

static void lnb_cols(void *arg, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const lnb_job *j = arg;
    int64_t e0 = c0 * LNB_COLS, e1 = c1 * LNB_COLS < j->E ? c1 * LNB_COLS : j->E;
    j->k->ln_dwdb(j->x, j->ldx, j->dy, j->lddy, j->mean, j->rstd, j->M, e0, e1 - e0, j->sw + e0,
                  j->sb + e0);
}

static void lnb_dx(void *arg, int64_t m0, int64_t m1, int tid) {
    (void)tid;
    const lnb_job *j = arg;
    j->k->ln_dx(j->x + m0 * j->ldx, j->ldx, j->w, j->dy + m0 * j->lddy, j->lddy, j->mean + m0,
                j->rstd + m0, j->dx + m0 * j->lddx, j->lddx, m1 - m0, j->E);
}

attn_status attn__layer_norm_bwd(attn_ctx *ctx, const float *x, int64_t ldx, const float *w,
                                 float eps, const float *dy, int64_t lddy, float *dx,
                                 int64_t lddx, float *dw, float *db, int64_t M, int64_t E) {
    const attn__ew_kernel *k = ctx->kern.ew;
    if (!k->ln_stats || !k->ln_dwdb || !k->ln_dx || M <= 0 || E <= 0) {
        attn__layer_norm_bwd_ref(x, ldx, w, eps, dy, lddy, dx, lddx, dw, db, M, E);
        return ATTN_OK;
    }
    attn__mark mk = attn__ws_mark(ctx);
    lnb_job j = {k, x, w, dy, ldx, lddy, lddx, M, E, eps, NULL, NULL, dx, NULL, NULL};
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &j.mean, M, 1, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &j.rstd, M, 1, 1, 1));
    attn__parallel_for(ctx, M, lnb_stats, &j);
    if (dw || db) { /* before dx: dx may alias dy */
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)E * 2, sizeof(double), (void **)&j.sw));
        j.sb = j.sw + E;
        attn__parallel_for(ctx, (E + LNB_COLS - 1) / LNB_COLS, lnb_cols, &j);
        for (int64_t e = 0; e < E; e++) {
            if (dw) dw[e] = (float)((double)dw[e] + j.sw[e]);
            if (db) db[e] = (float)((double)db[e] + j.sb[e]);
        }
    }
    if (dx) attn__parallel_for(ctx, M, lnb_dx, &j);
done:
    attn__ws_release(ctx, mk);
    return st;
}

typedef struct act_job {
    attn__act_bwd_fn fn;
    attn_activation act;
    const float *x, *dy;
    float *dx;
    int64_t n;
} act_job;

enum { ACT_CHUNK = 4096 };

static void act_task(void *arg, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const act_job *j = arg;
    int64_t i0 = c0 * ACT_CHUNK, i1 = c1 * ACT_CHUNK < j->n ? c1 * ACT_CHUNK : j->n;
    j->fn(j->act, j->x + i0, j->dy + i0, j->dx + i0, i1 - i0);
}

void attn__act_bwd(attn_ctx *ctx, attn_activation act, const float *x, const float *dy,
                   float *dx, int64_t n) {
    attn__act_bwd_fn fn = ctx->kern.ew->act_bwd;
    if (!fn || n <= 0 || !fn(act, x, dy, dx, 0)) { /* n = 0 asks whether the kernel does act */
        attn__act_bwd_ref(act, x, dy, dx, n);
        return;
    }
    act_job j = {fn, act, x, dy, dx, n};
    attn__parallel_for(ctx, (n + ACT_CHUNK - 1) / ACT_CHUNK, act_task, &j);
}

static void act_bwd_rows(void *arg, float *y, int64_t ldy, int64_t i0, int64_t rows) {
    const attn__act_bwd_state *st = arg;
    for (int64_t m = 0; m < rows; m++) {
        const float *x = st->x + (i0 + m) * st->ldx;
        float *yr = y + m * ldy;
        if (st->fn) ((attn__act_bwd_fn)st->fn)(st->act, x, yr, yr, st->n);
        else attn__act_bwd_ref(st->act, x, yr, yr, st->n);
    }
}

attn__row_epi attn__act_bwd_epi(attn_ctx *ctx, attn_activation act, const float *x, int64_t ldx,
                                int64_t n, attn__act_bwd_state *st) {
    attn__act_bwd_fn fn = ctx->kern.ew->act_bwd;
    st->fn = fn && fn(act, x, x, NULL, 0) ? (void *)fn : NULL; /* n = 0: does it do act? */
    st->act = act, st->x = x, st->ldx = ldx, st->n = n;
    attn__row_epi e = {act_bwd_rows, st};
    return e;
}
