/* Cross-entropy over the context's threads: each row's terms are computed by the context's row
 * kernel (ctx->kern.ce_row: the reference attn__cross_entropy_row_ref, or the AVX-512 or NEON
 * one) on whichever thread owns the row, then added in row order, so that the loss and the gradient
 * are the same whatever the thread count (and the reference's, bit for bit, on the plain C
 * kernel). */
#include <math.h>

#include "../core/pool.h"
#include "kernels.h"

typedef struct ce_job {
    attn__ce_row_fn row;
    const float *logits;
    int64_t ld, C, ldd, ignore;
    const int64_t *targets;
    double eps, inv;
    float *dlogits;
    double *nll, *smooth; /* per row */
} ce_job;

static void ce_task(void *arg, int64_t n0, int64_t n1, int tid) {
    const ce_job *j = arg;
    for (int64_t n = n0; n < n1; n++) {
        float *dr = j->dlogits ? j->dlogits + n * j->ldd : NULL;
        j->nll[n] = 0.0, j->smooth[n] = 0.0;
        if (j->targets[n] == j->ignore) {
            if (dr)
                for (int64_t c = 0; c < j->C; c++) dr[c] = 0.0f;
            continue;
        }
        j->row(j->logits + n * j->ld, j->targets[n], j->C, j->eps, j->inv,
                                    dr, &j->nll[n], &j->smooth[n]);
    }
}

attn_status attn__cross_entropy(attn_ctx *ctx, const float *logits, int64_t ld,
                                const int64_t *targets, int64_t N, int64_t C,
                                int64_t ignore_index, float label_smoothing, float *dlogits,
                                int64_t ldd, float *loss) {
    int64_t count = 0;
    for (int64_t n = 0; n < N; n++) count += targets[n] != ignore_index;
    attn__mark mk = attn__ws_mark(ctx);
    double *terms;
    attn_status st = attn__ws_alloc(ctx, (size_t)(N ? 2 * N : 1), sizeof *terms, (void **)&terms);
    if (st != ATTN_OK) return st;
    ce_job j = {ctx->kern.ce_row, logits, ld, C, ldd, ignore_index, targets, (double)label_smoothing,
                count ? 1.0 / (double)count : 0.0, dlogits, terms, terms + N};
    attn__parallel_for(ctx, N, ce_task, &j);
    /* the reference's sums: each row's term added in row order (a row's own term is 0 + x,
     * exactly x, so starting each row from 0 changes nothing) */
    double nll = 0, smooth = 0;
    for (int64_t n = 0; n < N; n++)
        if (targets[n] != ignore_index) nll += j.nll[n], smooth += j.smooth[n];
    *loss = count ? (float)(((1.0 - j.eps) * nll + j.eps / (double)C * smooth) * j.inv) : 0.0f;
    attn__ws_release(ctx, mk);
    return ATTN_OK;
}
