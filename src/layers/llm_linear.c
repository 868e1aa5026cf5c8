/* The Llama-architecture layers' one matrix door (llm.h): every product of the block and the
 * model with a weight goes through attn__llm_linear, every embedding lookup through
 * attn__llm_rows, so that the weight's storage type is known here only.  F32 runs on the
 * linear door of the other layers (attn__linear_pw: the blocked GEMM, bias and residual in its
 * row epilogue).  Quantized GGML types (attn_qtype) get their branch here. */
#include <string.h>

#include "../kernels/quant.h"
#include "llm.h"

/* The storage types the two doors below run: F32 on the float GEMM, every other GGML type
 * (F16, BF16 and the quantized ones) on the quantized kernels (kernels/quant.h). */
static int supported(int type) { return attn_qtype_block(type, NULL, NULL) == ATTN_OK; }

/* Bytes of one row of K elements of a non-F32 type. */
static size_t row_bytes(int type, int64_t K) {
    int64_t be = 1, bb = 4;
    attn_qtype_block(type, &be, &bb);
    return (size_t)(K / be * bb);
}

attn_status attn__llm_w_check(attn_ctx *ctx, const attn__llm_w *w, int64_t N, int64_t K,
                              const char *what) {
    ATTN_FAIL_IF(!w->data, ctx, ATTN_E_NOT_FOUND, "%s: weight not set", what);
    ATTN_FAIL_IF(w->N != N || w->K != K, ctx, ATTN_E_SHAPE,
                 "%s has shape [%lld, %lld] but the config needs [%lld, %lld]", what,
                 (long long)w->N, (long long)w->K, (long long)N, (long long)K);
    ATTN_FAIL_IF(!supported(w->type), ctx, ATTN_E_UNSUPPORTED, "%s: weights of type %s are "
                 "not supported yet", what, attn_qtype_name(w->type) ? attn_qtype_name(w->type)
                                                                      : "(unknown)");
    int64_t be = 1;
    attn_qtype_block(w->type, &be, NULL);
    ATTN_FAIL_IF(K % be != 0, ctx, ATTN_E_SHAPE, "%s: %lld columns are not whole %s blocks of "
                 "%lld", what, (long long)K, attn_qtype_name(w->type), (long long)be);
    return ATTN_OK;
}

attn_status attn__llm_linear(attn_ctx *ctx, const attn__llm_w *w, const float *x, int64_t ldx,
                             int64_t M, int64_t T, float *y, int64_t ldy, const float *r) {
    if (M <= 0) return ATTN_OK;
    if (T <= ATTN__QMV_ROWS) /* row by row: matrix-vector kernels whatever M is */
        return attn__qlinear(ctx, w->type, w->data, w->N, w->K, x, ldx, M, w->bias, r, y, ldy,
                             w->act | ATTN__QLIN_ROWWISE);
    switch (w->type) {
    case ATTN_Q_F32: {
        const attn__pw pw = {ATTN_F32, w->data};
        const attn__epi e = {r ? ATTN__EPI_RES : ATTN__EPI_NONE, ATTN_ACT_RELU, r, NULL, NULL,
                             NULL, NULL, NULL};
        return attn__linear_pw(ctx, x, ldx, &pw, w->bias, &e, y, ldy, M, w->K, w->N);
    }
    default: /* quantized (and 16-bit) GGML rows: read in place, never copied whole */
        return attn__qlinear(ctx, w->type, w->data, w->N, w->K, x, ldx, M, w->bias, r, y, ldy,
                             ATTN__QACT_DEFAULT);
    }
}

attn_status attn__llm_linear_n(attn_ctx *ctx, int n, const attn__llm_w *const *w,
                               const float *x, int64_t ldx, int64_t M, int64_t T,
                               float *const *y, const int64_t *ldy, const float *const *r) {
    if (M <= 0) return ATTN_OK;
    if (T > ATTN__QMV_ROWS || n > ATTN__QLIN_PARTS) {
        for (int i = 0; i < n; i++)
            ATTN_TRY(attn__llm_linear(ctx, w[i], x, ldx, M, T, y[i], ldy[i], r ? r[i] : NULL));
        return ATTN_OK;
    }
    attn__qlin_part p[ATTN__QLIN_PARTS];
    for (int i = 0; i < n; i++) {
        if (w[i]->act != w[0]->act) { /* one activation precision per pass */
            for (int k = 0; k < n; k++)
                ATTN_TRY(attn__llm_linear(ctx, w[k], x, ldx, M, T, y[k], ldy[k],
                                          r ? r[k] : NULL));
            return ATTN_OK;
        }
        p[i] = (attn__qlin_part){w[i]->type, w[i]->data, w[i]->N, w[i]->bias,
                                 r ? r[i] : NULL, y[i], ldy[i]};
        if (w[i]->K != w[0]->K) return attn__fail(ctx, ATTN_E_SHAPE, "attn__llm_linear_n: K");
    }
    return attn__qlinear_multi(ctx, n, p, w[0]->K, x, ldx, M, w[0]->act | ATTN__QLIN_ROWWISE);
}

attn_status attn__llm_rows(attn_ctx *ctx, const attn__llm_w *w, const int32_t *rows, int64_t n,
                           float *out) {
    switch (w->type) {
    case ATTN_Q_F32: {
        const float *t = w->data;
        for (int64_t i = 0; i < n; i++)
            memcpy(out + i * w->K, t + (int64_t)rows[i] * w->K, (size_t)w->K * sizeof(float));
        return ATTN_OK;
    }
    default: {
        const size_t rb = row_bytes(w->type, w->K);
        int64_t be = 1;
        attn_qtype_block(w->type, &be, NULL);
        for (int64_t i = 0; i < n; i++)
            attn__dequant_ref(w->type, (const unsigned char *)w->data + (size_t)rows[i] * rb,
                              w->K / be, out + i * w->K);
        return ATTN_OK;
    }
    }
}
