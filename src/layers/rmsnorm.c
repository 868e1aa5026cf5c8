/* RMSNorm (HF LlamaRMSNorm): the public functional op and its backward.  The forward row
 * kernel, its definition and its AVX-512 twin are attn__rms_norm in src/kernels/ew.c (contract
 * in ew.h); the Llama blocks call that directly on their contiguous rows.  The backward
 * (attn__rms_norm_bwd, below) recomputes each row's r with the forward's arithmetic
 * (attn__rms_rstd) and works in double per row. */
#include <string.h>

#include "../kernels/ew.h"
#include "../ops/ops_util.h"
#include "llm.h"
#include "pool.h"

/* ---- backward ------------------------------------------------------------------------------
 * y = w * n, n = x * r, r = (mean(x^2) + eps)^-1/2:
 *   dw[e] += sum_m dy[m, e] n[m, e]
 *   dx[e]  = r dn[e] - x[e] r^3 (sum_e' dn[e'] x[e']) / E,   dn = dy * w
 * Rows are split between the threads for r and dx, columns for dw (each column summed over
 * every row, in row order, in double, by one thread): the same bits for any thread count. */
typedef struct rmsb_job {
    const float *x, *w, *dy;
    int64_t ldx, lddy, lddx, M, E;
    float eps;
    float *r, *dx;
    double *sw; /* [E] */
} rmsb_job;

enum { RMSB_COLS = 16 };

static void rmsb_r(void *arg, int64_t m0, int64_t m1, int tid) {
    (void)tid;
    const rmsb_job *j = arg;
    for (int64_t m = m0; m < m1; m++) j->r[m] = attn__rms_rstd(j->x + m * j->ldx, j->E, j->eps);
}

static void rmsb_cols(void *arg, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const rmsb_job *j = arg;
    const int64_t e0 = c0 * RMSB_COLS, e1 = c1 * RMSB_COLS < j->E ? c1 * RMSB_COLS : j->E;
    for (int64_t m = 0; m < j->M; m++) {
        const float *xr = j->x + m * j->ldx, *dyr = j->dy + m * j->lddy;
        const float r = j->r[m];
        for (int64_t e = e0; e < e1; e++) {
            const float n = xr[e] * r; /* the forward's n, bit for bit */
            j->sw[e] += (double)dyr[e] * (double)n;
        }
    }
}

static void rmsb_dx(void *arg, int64_t m0, int64_t m1, int tid) {
    (void)tid;
    const rmsb_job *j = arg;
    const int64_t E = j->E;
    for (int64_t m = m0; m < m1; m++) {
        const float *xr = j->x + m * j->ldx, *dyr = j->dy + m * j->lddy;
        float *dxr = j->dx + m * j->lddx;
        const double r = j->r[m];
        double dot = 0.0;
        for (int64_t e = 0; e < E; e++)
            dot += (double)dyr[e] * (j->w ? (double)j->w[e] : 1.0) * (double)xr[e];
        const double c = r * r * r * dot / (double)E;
        for (int64_t e = 0; e < E; e++) { /* x and dy read before dx is written: may alias */
            const double dn = (double)dyr[e] * (j->w ? (double)j->w[e] : 1.0);
            dxr[e] = (float)(r * dn - (double)xr[e] * c);
        }
    }
}

attn_status attn__rms_norm_bwd(attn_ctx *ctx, const float *x, int64_t ldx, const float *w,
                               float eps, const float *dy, int64_t lddy, float *dx, int64_t lddx,
                               float *dw, int64_t M, int64_t E) {
    if (M <= 0 || E <= 0 || (!dx && !dw)) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    rmsb_job j = {x, w, dy, ldx, lddy, lddx, M, E, eps, NULL, dx, NULL};
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &j.r, M, 1, 1, 1));
    attn__parallel_for(ctx, M, rmsb_r, &j);
    if (dw) { /* before dx: dx may alias dy or x */
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)E, sizeof(double), (void **)&j.sw));
        memset(j.sw, 0, (size_t)E * sizeof(double));
        attn__parallel_for(ctx, (E + RMSB_COLS - 1) / RMSB_COLS, rmsb_cols, &j);
        for (int64_t e = 0; e < E; e++) dw[e] = (float)((double)dw[e] + j.sw[e]);
    }
    if (dx) attn__parallel_for(ctx, M, rmsb_dx, &j);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_rms_norm(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *weight,
                          float eps, attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "rms_norm input", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, y, "rms_norm output", ATTN_F32, 1, 4));
    ATTN_TRY(attn__same_shape(ctx, x, "input", y, "output"));
    ATTN_TRY(check_eps(ctx, "rms_norm", eps));
    int64_t E = x->shape[x->ndim - 1];
    ATTN_TRY(check_norm_param(ctx, weight, "rms_norm weight", E));
    {
        attn__arg o[] = {{y, "y", 0}}, in[] = {{x, "x", 1u}, {weight, "weight", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_rms_norm", o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "rms_norm input", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *wp = NULL;
    float *yp;
    int64_t M, ldx, ldy;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    if (weight && weight->data) ATTN_TRYG(attn__contig(ctx, weight, &wp));
    ATTN_TRYG(attn__rows_out_begin(ctx, y, &yp, &ldy));
    attn__rms_norm(ctx, xp, ldx, wp, eps, yp, ldy, M, E);
    attn__rows_out_end(yp, y);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_rms_norm_backward(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *weight,
                                   float eps, const attn_tensor *dy, attn_tensor *dx,
                                   attn_tensor *dweight) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "rms_norm_backward x", ATTN_F32, 1, 4));
    ATTN_TRY(check_like(ctx, dy, "rms_norm_backward dy", x, "rms_norm_backward x"));
    ATTN_TRY(check_eps(ctx, "rms_norm", eps));
    const int64_t E = x->shape[x->ndim - 1];
    const int hw = wanted(weight), hdx = wanted(dx), hdw = wanted(dweight);
    ATTN_TRY(check_norm_param(ctx, weight, "rms_norm_backward weight", E));
    if (hdx) ATTN_TRY(check_like(ctx, dx, "rms_norm_backward dx", x, "rms_norm_backward x"));
    if (hdw) ATTN_TRY(check_out(ctx, dweight, "rms_norm_backward dweight", 1, &E));
    {
        attn__arg o[] = {{dx, "dx", 0}, {dweight, "dweight", 0}},
                  in[] = {{x, "x", 1u}, {weight, "weight", 0}, {dy, "dy", 1u}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_rms_norm_backward", o, 2, in, 3));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "rms_norm_backward x", 0));
    ATTN_TRY(attn__check_finite(ctx, dy, "rms_norm_backward dy", 0));
    if (!hdx && !hdw) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *dyp, *wp = NULL;
    float *dxp = NULL, *dwp = NULL;
    int64_t M, ldx, lddy, lddx = 0;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__rows_in(ctx, dy, &dyp, &M, &lddy));
    if (hw) ATTN_TRYG(attn__contig(ctx, weight, &wp));
    if (hdw) {
        ATTN_TRYG(attn__ws_f32(ctx, &dwp, E, 1, 1, 1));
        memset(dwp, 0, (size_t)E * sizeof(float));
    }
    if (hdx) ATTN_TRYG(attn__rows_out_begin(ctx, dx, &dxp, &lddx));
    ATTN_TRYG(attn__rms_norm_bwd(ctx, xp, ldx, wp, eps, dyp, lddy, dxp, lddx, dwp, M, E));
    if (dxp) attn__rows_out_end(dxp, dx);
    if (dwp) attn__store(dwp, dweight);
done:
    attn__ws_release(ctx, mk);
    return st;
}
