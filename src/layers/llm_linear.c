/* The Llama-architecture layers' one matrix door (llm.h): every product of the block and the
 * model with a weight goes through attn__llm_linear, every embedding lookup through
 * attn__llm_rows, so that the weight's storage type is known here only.  F32 runs on the
 * linear door of the other layers (attn__linear_pw: the blocked GEMM, bias and residual in its
 * row epilogue).  Quantized GGML types (attn_qtype) get their branch here. */
#include <string.h>

#include "llm.h"

/* The storage types the two doors below run: a new type is a case in each, and here. */
static int supported(int type) { return type == ATTN_Q_F32; }

attn_status attn__llm_w_check(attn_ctx *ctx, const attn__llm_w *w, int64_t N, int64_t K,
                              const char *what) {
    ATTN_FAIL_IF(!w->data, ctx, ATTN_E_NOT_FOUND, "%s: weight not set", what);
    ATTN_FAIL_IF(w->N != N || w->K != K, ctx, ATTN_E_SHAPE,
                 "%s has shape [%lld, %lld] but the config needs [%lld, %lld]", what,
                 (long long)w->N, (long long)w->K, (long long)N, (long long)K);
    ATTN_FAIL_IF(!supported(w->type), ctx, ATTN_E_UNSUPPORTED, "%s: weights of type %s are "
                 "not supported yet", what, attn_qtype_name(w->type) ? attn_qtype_name(w->type)
                                                                      : "(unknown)");
    return ATTN_OK;
}

attn_status attn__llm_linear(attn_ctx *ctx, const attn__llm_w *w, const float *x, int64_t ldx,
                             int64_t M, float *y, int64_t ldy, const float *r) {
    if (M <= 0) return ATTN_OK;
    switch (w->type) {
    case ATTN_Q_F32: {
        const attn__pw pw = {ATTN_F32, w->data};
        const attn__epi e = {r ? ATTN__EPI_RES : ATTN__EPI_NONE, ATTN_ACT_RELU, r, NULL, NULL,
                             NULL};
        return attn__linear_pw(ctx, x, ldx, &pw, w->bias, &e, y, ldy, M, w->K, w->N);
    }
    default:
        return attn__fail(ctx, ATTN_E_UNSUPPORTED, "no matrix product for weights of type %d",
                          w->type);
    }
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
    default:
        return attn__fail(ctx, ATTN_E_UNSUPPORTED, "no row lookup for weights of type %d",
                          w->type);
    }
}
