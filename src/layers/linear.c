/* The layers' one linear call (layers.h): weights in F32 or packed BF16 / F16, and the row
 * epilogues that follow the product (bias, activation, residual, layer norm) fused into the
 * GEMM where the kernel allows it.  The dtype is chosen here and nowhere else. */
#include <math.h>
#include <string.h>

#include "../kernels/ew.h"
#include "../kernels/gemm_bf16.h"
#include "../kernels/gemm_f16.h"
#include "layers.h"
#include "pool.h"

attn_status attn__pw_size(attn_ctx *ctx, attn_dtype dtype, int64_t K, int64_t N,
                          size_t *bytes) {
    size_t sz = 0;
    int ok = K > 0 && N > 0;
    if (ok && dtype == ATTN_F16) {
        sz = attn__f16_packed_size(K, N);
        ok = sz != 0;
    } else if (ok && dtype == ATTN_BF16) {
        sz = attn__bf16_packed_size(K, N);
        ok = sz != 0 && attn__mul_size(sz, sizeof(attn__bf16), &sz);
    } else if (ok) {
        ok = attn__mul_size((size_t)K, (size_t)N, &sz) && attn__mul_size(sz, sizeof(float), &sz);
    }
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_OVERFLOW, "a [%lld, %lld] weight is too large to pack as %s",
                 (long long)N, (long long)K, attn_dtype_name(dtype));
    *bytes = sz;
    return ATTN_OK;
}

attn_status attn__pw_pack(attn_ctx *ctx, attn_dtype dtype, const float *W, int64_t K, int64_t N,
                          void *dst, const char *what, attn__pw *out) {
    if (dtype == ATTN_F16) /* finite weights past the F16 range would become infinities */
        for (int64_t i = 0, n = K * N; i < n; i++)
            ATTN_FAIL_IF(fabsf(W[i]) >= 65520.0f, ctx, ATTN_E_NONFINITE,
                         "%s holds the weight %g, which overflows F16", what, (double)W[i]);
    if (dtype == ATTN_F16) attn__f16_pack_weight(W, K, N, dst);
    else if (dtype == ATTN_BF16) attn__bf16_pack_weight(W, K, N, (attn__bf16 *)dst);
    else memcpy(dst, W, (size_t)(K * N) * sizeof(float));
    out->dtype = dtype;
    out->data = dst;
    return ATTN_OK;
}

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

attn_status attn__linear_pw(attn_ctx *ctx, const float *x, int64_t ldx, const attn__pw *w,
                            const float *b, const attn__epi *e, float *y, int64_t ldy, int64_t M,
                            int64_t K, int64_t N) {
    static const attn__epi none = {ATTN__EPI_NONE, ATTN_ACT_RELU, NULL, NULL, NULL, NULL, NULL,
                                   NULL};
    if (!e) e = &none;
    const float *r = e->kind == ATTN__EPI_RES || e->kind == ATTN__EPI_RES_LN ? e->r : NULL;
    const attn_dtype dt = w->dtype;
    /* what the product leaves to the epilogue: the 16-bit kernels add b and r themselves */
    epi_job j = {ctx->kern.ew, e->kind, e->act, dt == ATTN_F32 ? b : NULL,
                 dt == ATTN_F32 ? r : NULL, e->ln, N, e->ymax, e->aout,
                 e->kind == ATTN__EPI_ACT && e->act == ATTN_ACT_RELU && !e->aout ? e->relu_mask
                                                                                 : NULL};
    const attn__row_epi re = {epi_rows, &j};
    if ((e->aout || j.relu_mask) && dt != ATTN_F32) { /* 16-bit: the product, then the rest */
        const attn__epi plain = {ATTN__EPI_NONE, ATTN_ACT_RELU, NULL, NULL, NULL, NULL, NULL,
                                 NULL};
        ATTN_TRY(attn__linear_pw(ctx, x, ldx, w, b, &plain, y, ldy, M, K, N));
        if (e->aout) {
            attn__act_fwd(ctx, e->act, y, e->aout, M, N);
            return ATTN_OK;
        }
        j.b = NULL, j.r = NULL;
        pass_job p = {&j, y, ldy};
        attn__parallel_for(ctx, M, pass_task, &p);
        return ATTN_OK;
    }
    if (dt == ATTN_F16) {
        const int gelu = e->kind == ATTN__EPI_ACT && e->act == ATTN_ACT_GELU;
        /* GELU, bias and residual are the microkernel's; a norm or another activation runs
         * on each finished micro-panel and produces the row maxima itself */
        const int epi = e->kind == ATTN__EPI_RES_LN || (e->kind == ATTN__EPI_ACT && !gelu);
        attn__f16_rows rows = {e->xmax, epi ? NULL : e->ymax, epi ? &re : NULL};
        return attn__linear_f16(ctx, x, ldx, w->data, b, r, N, gelu, y, ldy, M, K, N, &rows);
    }
    if (dt == ATTN_BF16) {
        ATTN_TRY(attn__linear_bf16(ctx, x, ldx, w->data, b, r, N, y, ldy, M, K, N));
        if (e->kind == ATTN__EPI_RES_LN || e->kind == ATTN__EPI_ACT || e->ymax) {
            pass_job p = {&j, y, ldy};
            attn__parallel_for(ctx, M, pass_task, &p);
        }
        return ATTN_OK;
    }
    const int need = b || r || e->kind == ATTN__EPI_RES_LN || e->kind == ATTN__EPI_ACT || e->ymax;
    return attn__linear_epi(ctx, x, ldx, w->data, need ? &re : NULL, y, ldy, M, K, N);
}

attn_status attn__lin_run(attn_ctx *ctx, const attn__lin *l, const float *x, const attn__epi *e,
                          float *y, int64_t M) {
    attn__pw f32 = {ATTN_F32, l->weight};
    return attn__linear_pw(ctx, x, l->in, l->pw.data ? &l->pw : &f32, l->bias, e, y, l->out, M,
                           l->in, l->out);
}

typedef struct act_job {
    const attn__ew_kernel *k;
    attn_activation act;
    const float *x;
    float *y;
    int64_t n;
} act_job;

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

static void act_task(void *arg, int64_t begin, int64_t end, int tid) {
    const act_job *j = arg;
    (void)tid;
    act_rows(j->k, j->act, j->x + begin * j->n, j->y + begin * j->n, end - begin, j->n);
}

void attn__act_fwd(attn_ctx *ctx, attn_activation act, const float *x, float *y, int64_t M,
                   int64_t N) {
    act_job j = {ctx->kern.ew, act, x, y, N};
    attn__parallel_for(ctx, M, act_task, &j);
}

void attn__ln_fwd(attn_ctx *ctx, const attn__ln *l, const float *x, float *y, int64_t M) {
    attn__layer_norm_rows(ctx, x, y, l->weight, l->bias, l->eps, M, l->E);
}
