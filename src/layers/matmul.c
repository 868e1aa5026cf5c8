/* The one linear door (layers.h, "one weight, one door"): attn__matmul runs every product of
 * every layer and model with a weight, whatever its storage type, and the row epilogues that
 * follow it (bias, activation, residual, layer norm), fused into the GEMM where the kernel
 * allows it.  The kernel is chosen here and nowhere else: from the weight's type, the rows per
 * sequence and the context (its instruction set and ATTN_CTX_BF16_MATMUL, read by the float
 * GEMM of kernels/linear.c). */
#include <math.h>
#include <string.h>

#include "../kernels/ew.h"
#include "../kernels/gemm_bf16.h"
#include "../kernels/gemm_f16.h"
#include "layers.h"
#include "pool.h"

/* The epilogue on rows [i0, i0 + rows) of y (y points at row i0): b and r are NULL where the
 * kernel has added them. */
typedef struct epi_job {
    const attn__ew_kernel *k;
    attn__epi_kind kind;
    attn_activation act;
    const float *b, *r;
    const attn__ln *ln;
    int64_t n;
    float *ymax;
    float *aout; /* ACT: act(y) goes here, y kept */
    uint16_t *relu_mask; /* ACT, ReLU: its derivative's bits */
} epi_job;

static void act_rows(const attn__ew_kernel *k, attn_activation act, const float *x, float *y,
                     int64_t rows, int64_t n);

static void epi_rows(void *arg, float *y, int64_t ldy, int64_t i0, int64_t rows) {
    const epi_job *e = arg;
    const float *r = e->r ? e->r + i0 * e->n : NULL, *b = e->b;
    float *ym = e->ymax ? e->ymax + i0 : NULL;
    const int64_t n = e->n;
    if (e->kind == ATTN__EPI_RES_LN) {
        e->k->add_ln(y, ldy, b, r, n, e->ln->weight, e->ln->bias, e->ln->eps, rows, n, ym);
        return;
    }
    if (e->kind == ATTN__EPI_ACT && e->relu_mask) { /* in place, the derivative as bits */
        if (b) e->k->bias_res(y, ldy, b, NULL, n, rows, n);
        const int64_t w = (n + 15) / 16;
        attn__relu_mask_fn fn = e->k->relu_mask ? e->k->relu_mask : attn__relu_mask_c;
        for (int64_t m = 0; m < rows; m++) fn(y + m * ldy, y + m * ldy, n, e->relu_mask + (i0 + m) * w);
    } else if (e->kind == ATTN__EPI_ACT && e->aout) { /* y = x W^T + b kept, act(y) beside it */
        if (b) e->k->bias_res(y, ldy, b, NULL, n, rows, n);
        for (int64_t m = 0; m < rows; m++)
            act_rows(e->k, e->act, y + m * ldy, e->aout + (i0 + m) * n, 1, n);
    } else if (e->kind == ATTN__EPI_ACT && e->act == ATTN_ACT_GELU) {
        e->k->bias_gelu(y, ldy, b, rows, n);
    } else {
        if (b || (r && e->kind == ATTN__EPI_RES))
            e->k->bias_res(y, ldy, b, e->kind == ATTN__EPI_RES ? r : NULL, n, rows, n);
        if (e->kind == ATTN__EPI_ACT)
            for (int64_t m = 0; m < rows; m++) act_rows(e->k, e->act, y + m * ldy, y + m * ldy, 1, n);
    }
    if (ym)
        for (int64_t m = 0; m < rows; m++) ym[m] = attn__row_absmax(y + m * ldy, n);
}

typedef struct pass_job {
    const epi_job *e;
    float *y;
    int64_t ldy;
} pass_job;

static void pass_task(void *arg, int64_t begin, int64_t end, int tid) {
    const pass_job *p = arg;
    (void)tid;
    epi_rows((void *)p->e, p->y + begin * p->ldy, p->ldy, begin, end - begin);
}

/* Runs the part of an epilogue that the product left undone as a pass over y's rows. */
static void epi_pass(attn_ctx *ctx, const epi_job *j, float *y, int64_t ldy, int64_t M) {
    pass_job p = {j, y, ldy};
    attn__parallel_for(ctx, M, pass_task, &p);
}

/* The GEMM path's flags: the weight's activation precision (int16 prompts where the CPU has
 * the int16 GEMM and act asks for int16 or the default, else float); sequences of more than
 * ATTN__QMV_ROWS rows stay on the GEMM even when fewer rows are computed (a prompt's last
 * rows), so those rows get their bits */
static int gemm_act(int64_t T, int act) {
    return T > ATTN__QMV_ROWS && T != ATTN__MM_GEMM ? act | ATTN__QLIN_GEMM : act;
}

attn_status attn__matmul(attn_ctx *ctx, const attn__weight *w, const float *x, int64_t ldx,
                         int64_t M, int64_t T, const attn__epi *e, float *y, int64_t ldy) {
    static const attn__epi none = {ATTN__EPI_NONE, ATTN_ACT_RELU, NULL, NULL, NULL, NULL, NULL,
                                   NULL};
    if (M <= 0) return ATTN_OK;
    if (!e) e = &none;
    const attn__wtype *tr = attn__wtype_of(w->type);
    ATTN_FAIL_IF(!tr, ctx, ATTN_E_UNSUPPORTED, "a weight of storage type %d has no kernels",
                 w->type);
    if (w->type == ATTN__W_F32P) {
        const attn__f32p *h = w->data;
        if (T <= ATTN__QMV_ROWS || h->kernel != (const void *)ctx->kern.gemm ||
            (ctx->flags & ATTN_CTX_BF16_MATMUL)) { /* what the panels are not for: the rows */
            attn__weight r = *w;
            r.type = ATTN_Q_F32, r.data = h->rows;
            return attn__matmul(ctx, &r, x, ldx, M, T, e, y, ldy);
        }
    }
    const int64_t K = w->K, N = w->N;
    const float *b = w->bias;
    const float *r = e->kind == ATTN__EPI_RES || e->kind == ATTN__EPI_RES_LN ? e->r : NULL;
    const int t = w->type;
    uint16_t *relu_mask =
        e->kind == ATTN__EPI_ACT && e->act == ATTN_ACT_RELU && !e->aout ? e->relu_mask : NULL;
    const int rowwise = !tr->panels && T <= ATTN__QMV_ROWS;
    if (rowwise || (t != ATTN_Q_F32 && !tr->panels)) {
        /* the matrix-vector kernels (a few rows per sequence), or GGML rows on dequantized
         * panels: the kernel adds b and a residual, a pass does the rest */
        const float *rk = e->kind == ATTN__EPI_RES ? r : NULL;
        ATTN_TRY(attn__qlinear(ctx, t, w->data, N, K, x, ldx, M, b, rk, y, ldy,
                               rowwise ? w->act | ATTN__QLIN_ROWWISE : gemm_act(T, w->act)));
        if ((e->kind == ATTN__EPI_NONE || e->kind == ATTN__EPI_RES) && !e->ymax) return ATTN_OK;
        const epi_job j = {ctx->kern.ew, e->kind, e->act, NULL,
                           e->kind == ATTN__EPI_RES_LN ? r : NULL, e->ln, N, e->ymax, e->aout,
                           relu_mask};
        epi_pass(ctx, &j, y, ldy, M);
        return ATTN_OK;
    }
    const int f32 = t == ATTN_Q_F32 || t == ATTN__W_F32P;
    /* what the product leaves to the epilogue: the 16-bit kernels add b and r themselves */
    epi_job j = {ctx->kern.ew, e->kind, e->act, f32 ? b : NULL, f32 ? r : NULL, e->ln, N,
                 e->ymax, e->aout, relu_mask};
    const attn__row_epi re = {epi_rows, &j};
    if (e->kind == ATTN__EPI_ACT && (e->aout || j.relu_mask) && !f32) {
        /* 16-bit: the product, then the rest */
        ATTN_TRY(attn__matmul(ctx, w, x, ldx, M, T, &none, y, ldy));
        j.b = NULL, j.r = NULL;
        epi_pass(ctx, &j, y, ldy, M);
        return ATTN_OK;
    }
    if (t == ATTN__W_F16P) {
        const int gelu = e->kind == ATTN__EPI_ACT && e->act == ATTN_ACT_GELU;
        /* GELU, bias and residual are the microkernel's; a norm or another activation runs
         * on each finished micro-panel and produces the row maxima itself */
        const int epi = e->kind == ATTN__EPI_RES_LN || (e->kind == ATTN__EPI_ACT && !gelu);
        attn__f16_rows rows = {e->xmax, epi ? NULL : e->ymax, epi ? &re : NULL};
        return attn__linear_f16(ctx, x, ldx, w->data, b, r, N, gelu, y, ldy, M, K, N, &rows);
    }
    if (t == ATTN__W_BF16P) {
        ATTN_TRY(attn__linear_bf16(ctx, x, ldx, w->data, b, r, N, y, ldy, M, K, N));
        if (e->kind == ATTN__EPI_RES_LN || e->kind == ATTN__EPI_ACT || e->ymax)
            epi_pass(ctx, &j, y, ldy, M);
        return ATTN_OK;
    }
    const int need = b || r || e->kind == ATTN__EPI_RES_LN || e->kind == ATTN__EPI_ACT || e->ymax;
    if (t == ATTN__W_F32P)
        return attn__gemm_packed(ctx, M, N, K, x, ldx, ((const attn__f32p *)w->data)->panels,
                                 0.0f, y, ldy, need ? &re : NULL);
    return attn__linear_epi(ctx, x, ldx, w->data, need ? &re : NULL, y, ldy, M, K, N);
}

attn_status attn__matmul_n(attn_ctx *ctx, int n, const attn__weight *const *w, const float *x,
                           int64_t ldx, int64_t M, int64_t T, float *const *y,
                           const int64_t *ldy, const float *const *r) {
    if (M <= 0) return ATTN_OK;
    /* one pass over the parts: GGML row types, on the matrix-vector kernels (a few rows per
     * sequence, one activation precision) or on dequantized panels (not F32: attn__matmul
     * runs those on the float GEMM of its own) -- as attn__matmul runs each, same bits */
    const int rowwise = T <= ATTN__QMV_ROWS;
    int joint = n <= ATTN__QLIN_PARTS;
    for (int i = 0; i < n && joint; i++) {
        const attn__wtype *tr = attn__wtype_of(w[i]->type);
        joint = tr && !tr->panels && w[i]->act == w[0]->act &&
                (rowwise || w[i]->type != ATTN_Q_F32);
        if (w[i]->K != w[0]->K) return attn__fail(ctx, ATTN_E_SHAPE, "attn__matmul_n: K");
    }
    if (!joint) {
        for (int i = 0; i < n; i++) {
            const attn__epi e = {r && r[i] ? ATTN__EPI_RES : ATTN__EPI_NONE, ATTN_ACT_RELU,
                                 r ? r[i] : NULL, NULL, NULL, NULL, NULL, NULL};
            ATTN_TRY(attn__matmul(ctx, w[i], x, ldx, M, T, &e, y[i], ldy[i]));
        }
        return ATTN_OK;
    }
    attn__qlin_part p[ATTN__QLIN_PARTS];
    for (int i = 0; i < n; i++)
        p[i] = (attn__qlin_part){w[i]->type, w[i]->data, w[i]->N, w[i]->bias,
                                 r ? r[i] : NULL, y[i], ldy[i]};
    return attn__qlinear_multi(ctx, n, p, w[0]->K, x, ldx, M,
                               rowwise ? w[0]->act | ATTN__QLIN_ROWWISE : gemm_act(T, w[0]->act));
}

attn_status attn__matmul_bwd(attn_ctx *ctx, const attn__weight *w, const float *x, int64_t ldx,
                             const float *dy, int64_t lddy, float *dx, int64_t lddx, int acc,
                             const attn__row_epi *dx_epi, float *dW, float *db, int64_t M) {
    ATTN_TRY(attn__weight_trainable(ctx, w, "the weight of a product's backward"));
    if (acc && dx_epi)
        return attn__fail(ctx, ATTN_E_INVALID, "attn__matmul_bwd: an epilogue on summed dx");
    if (acc)
        return attn__linear_bwd_acc(ctx, x, ldx, w->data, dy, lddy, dx, lddx, dW, db, M, w->K,
                                    w->N);
    return attn__linear_bwd_epi(ctx, x, ldx, w->data, dy, lddy, dx, lddx, dx_epi, dW, db, M, w->K,
                                w->N);
}

attn_status attn__lin_run(attn_ctx *ctx, const attn__lin *l, const float *x, const attn__epi *e,
                          float *y, int64_t M) {
    attn__weight w = l->pw.data ? l->pw : attn__weight_f32(l->weight, NULL, l->out, l->in);
    w.bias = l->bias, w.N = l->out, w.K = l->in;
    return attn__matmul(ctx, &w, x, l->in, M, ATTN__MM_GEMM, e, y, l->out);
}

/* y = act(x) on rows of n contiguous values (y may be x). */
static void act_rows(const attn__ew_kernel *k, attn_activation act, const float *x, float *y,
                     int64_t rows, int64_t n) {
    if (act == ATTN_ACT_GELU) {
        if (y != x) memcpy(y, x, (size_t)(rows * n) * sizeof(float));
        k->bias_gelu(y, n, NULL, rows, n);
    } else if (act == ATTN_ACT_RELU) { /* the reference's bits (NaN gives 0) */
        (k->relu ? k->relu : attn__relu_c)(x, y, rows * n);
    } else {
        attn__act_ref(act, x, n, y, n, rows, n);
    }
}

void attn__ln_fwd(attn_ctx *ctx, const attn__ln *l, const float *x, float *y, int64_t M) {
    if (l->rms) attn__rms_norm(ctx, x, l->E, l->weight, l->eps, y, l->E, M, l->E);
    else attn__layer_norm_rows(ctx, x, y, l->weight, l->bias, l->eps, M, l->E);
}
