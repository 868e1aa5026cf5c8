/* The backwards of the layer norm and of the activations over the context's threads, on the
 * row kernels of ctx->kern.ew (ew.h), or the double references (attn__layer_norm_bwd_ref,
 * attn__act_bwd_ref) where the table has none (ATTN_ISA=ref).  Rows are split between
 * the threads in fixed blocks (the layer norm's statistics, dx and each block's weight and bias
 * sums in one pass), then columns for the sums of the blocks' sums: the same bits for any
 * thread count. */
#include "../core/pool.h"
#include "ew.h"
#include "kernels.h"

/* Rows in fixed blocks of LNB_ROWS: each block's column sums (in double) go into its own slot
 * of part, and the slots are then summed per column in block order. */
enum { LNB_ROWS = 32, LNB_COLS = 64 };

typedef struct lnb_job {
    attn__ln_bwd_rows_fn fn;
    const float *x, *w, *dy;
    int64_t ldx, lddy, lddx, M, E, nblk;
    float eps;
    float *dx, *dw, *db;
    double *part; /* [nblk][2 E]: a block's dy xhat sums, then its dy sums; NULL: no dw, db */
} lnb_job;

static void lnb_rows(void *arg, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const lnb_job *j = arg;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t m0 = b * LNB_ROWS, m1 = m0 + LNB_ROWS < j->M ? m0 + LNB_ROWS : j->M;
        double *pw = j->part ? j->part + b * 2 * j->E : NULL;
        if (pw) memset(pw, 0, sizeof(double) * (size_t)(2 * j->E));
        j->fn(j->x + m0 * j->ldx, j->ldx, j->w, j->eps, j->dy + m0 * j->lddy, j->lddy,
              j->dx ? j->dx + m0 * j->lddx : NULL, j->lddx, m1 - m0, j->E, pw, pw ? pw + j->E : NULL);
    }
}

static void lnb_sum(void *arg, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const lnb_job *j = arg;
    const int64_t e0 = c0 * LNB_COLS, e1 = c1 * LNB_COLS < j->E ? c1 * LNB_COLS : j->E;
    for (int64_t ec = e0; ec < e1; ec += LNB_COLS) {
        const int64_t n = e1 - ec < LNB_COLS ? e1 - ec : LNB_COLS;
        double sw[LNB_COLS] = {0}, sb[LNB_COLS] = {0};
        for (int64_t b = 0; b < j->nblk; b++) {
            const double *pw = j->part + b * 2 * j->E + ec, *pb = pw + j->E;
            for (int64_t e = 0; e < n; e++) sw[e] += pw[e], sb[e] += pb[e];
        }
        for (int64_t e = 0; e < n; e++) {
            if (j->dw) j->dw[ec + e] = (float)((double)j->dw[ec + e] + sw[e]);
            if (j->db) j->db[ec + e] = (float)((double)j->db[ec + e] + sb[e]);
        }
    }
}

attn_status attn__layer_norm_bwd(attn_ctx *ctx, const float *x, int64_t ldx, const float *w,
                                 float eps, const float *dy, int64_t lddy, float *dx,
                                 int64_t lddx, float *dw, float *db, int64_t M, int64_t E) {
    const attn__ew_kernel *k = ctx->kern.ew;
    if (!k->ln_bwd_rows || M <= 0 || E <= 0) {
        attn__layer_norm_bwd_ref(x, ldx, w, eps, dy, lddy, dx, lddx, dw, db, M, E);
        return ATTN_OK;
    }
    attn__mark mk = attn__ws_mark(ctx);
    lnb_job j = {k->ln_bwd_rows, x, w, dy, ldx, lddy, lddx, M, E, (M + LNB_ROWS - 1) / LNB_ROWS,
                 eps, dx, dw, db, NULL};
    attn_status st = ATTN_OK;
    if (dw || db) {
        size_t n;
        ATTN_FAIL_IF(!attn__mul_size((size_t)j.nblk, (size_t)E * 2, &n), ctx, ATTN_E_NOMEM,
                     "layer norm backward: partial sums overflow size_t");
        ATTN_TRYG(attn__ws_alloc(ctx, n, sizeof(double), (void **)&j.part));
    }
    attn__parallel_for(ctx, j.nblk, lnb_rows, &j);
    if (j.part) attn__parallel_for(ctx, (E + LNB_COLS - 1) / LNB_COLS, lnb_sum, &j);
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
