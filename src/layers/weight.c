/* One weight descriptor for every storage type (layers.h, "one weight, one door"): the traits of
 * each type, packing a float weight into the form a kernel runs, the checks of a loaded weight
 * and the row fetch of an embedding table.  The products are in matmul.c. */
#include <math.h>
#include <string.h>

#include "../kernels/gemm_bf16.h"
#include "../kernels/gemm_f16.h"
#include "../kernels/quant.h"
#include "layers.h"

int attn__wtype_packed(attn_dtype dtype) {
    return dtype == ATTN_F32 ? ATTN__W_F32P
           : dtype == ATTN_BF16 ? ATTN__W_BF16P
           : dtype == ATTN_F16  ? ATTN__W_F16P
                                : -1;
}

attn_status attn__weight_size(attn_ctx *ctx, int type, int64_t N, int64_t K, size_t *bytes) {
    const attn__wtype *t = attn__wtype_of(type);
    ATTN_FAIL_IF(type != ATTN_Q_F32 && !(t && t->panels), ctx, ATTN_E_UNSUPPORTED,
                 "a float weight cannot be packed as %s", t ? t->name : "(unknown type)");
    size_t sz = 0;
    int ok = K > 0 && N > 0;
    if (ok && type == ATTN__W_F16P) {
        sz = attn__f16_packed_size(K, N);
        ok = sz != 0;
    } else if (ok && type == ATTN__W_F32P) { /* the header, 64 bytes to align, the panels */
        int64_t nf = attn__gemm_weight_floats(ctx->kern.gemm, N, K);
        ok = nf > 0 && attn__mul_size((size_t)nf, sizeof(float), &sz) &&
             attn__add_size(sz, sizeof(attn__f32p) + 64, &sz);
    } else if (ok && type == ATTN__W_BF16P) {
        sz = attn__bf16_packed_size(K, N);
        ok = sz != 0 && attn__mul_size(sz, sizeof(attn__bf16), &sz);
    } else if (ok) {
        ok = attn__mul_size((size_t)K, (size_t)N, &sz) && attn__mul_size(sz, sizeof(float), &sz);
    }
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_OVERFLOW, "a [%lld, %lld] weight is too large to pack as %s",
                 (long long)N, (long long)K, t->name);
    *bytes = sz;
    return ATTN_OK;
}

attn_status attn__weight_pack(attn_ctx *ctx, int type, const float *W, int64_t N, int64_t K,
                              void *dst, const char *what, attn__weight *out) {
    size_t bytes = 0;
    ATTN_TRY(attn__weight_size(ctx, type, N, K, &bytes));
    if (type == ATTN__W_F16P) /* finite weights past the F16 range would become infinities */
        for (int64_t i = 0, n = K * N; i < n; i++)
            ATTN_FAIL_IF(fabsf(W[i]) >= 65520.0f, ctx, ATTN_E_NONFINITE,
                         "%s holds the weight %g, which overflows F16", what, (double)W[i]);
    if (type == ATTN__W_F16P) attn__f16_pack_weight(W, K, N, dst);
    else if (type == ATTN__W_BF16P) attn__bf16_pack_weight(W, K, N, (attn__bf16 *)dst);
    else if (type == ATTN__W_F32P) {
        attn__f32p *h = dst;
        uintptr_t at = (uintptr_t)(h + 1);
        float *panels = (float *)(void *)(at + ((64 - (at & 63)) & 63));
        attn__gemm_pack_weight(ctx->kern.gemm, W, N, K, panels);
        h->rows = W, h->panels = panels, h->kernel = ctx->kern.gemm;
    } else memcpy(dst, W, bytes);
    *out = (attn__weight){type, dst, N, K, NULL, 0};
    return ATTN_OK;
}

attn_status attn__weight_check(attn_ctx *ctx, const attn__weight *w, int64_t N, int64_t K,
                               const char *what) {
    ATTN_FAIL_IF(!w->data, ctx, ATTN_E_NOT_FOUND, "%s: weight not set", what);
    ATTN_FAIL_IF(w->N != N || w->K != K, ctx, ATTN_E_SHAPE,
                 "%s has shape [%lld, %lld] but the config needs [%lld, %lld]", what,
                 (long long)w->N, (long long)w->K, (long long)N, (long long)K);
    const attn__wtype *t = attn__wtype_of(w->type);
    ATTN_FAIL_IF(!t || t->panels, ctx, ATTN_E_UNSUPPORTED,
                 "%s: weights of type %s are not supported yet", what,
                 t ? t->name : "(unknown)");
    ATTN_FAIL_IF(K % t->elems != 0, ctx, ATTN_E_SHAPE, "%s: %lld columns are not whole %s "
                 "blocks of %lld", what, (long long)K, t->name, (long long)t->elems);
    return ATTN_OK;
}

attn_status attn__weight_trainable(attn_ctx *ctx, const attn__weight *w, const char *what) {
    const attn__wtype *t = attn__wtype_of(w->type);
    ATTN_FAIL_IF(w->type != ATTN_Q_F32, ctx, ATTN_E_UNSUPPORTED,
                 "%s: weights of type %s are for inference only; the backward needs F32 (master) "
                 "weights (attn_llm_make_trainable with ATTN_LLM_DEQUANTIZE makes them)",
                 what, t ? t->name : "(unknown)");
    return ATTN_OK;
}

attn_status attn__weight_rows(attn_ctx *ctx, const attn__weight *w, const int32_t *rows,
                              int64_t n, float *out) {
    const attn__wtype *t = attn__wtype_of(w->type);
    ATTN_FAIL_IF(!t || t->panels, ctx, ATTN_E_UNSUPPORTED, "the rows of a %s weight cannot be "
                 "read", t ? t->name : "(unknown)");
    if (w->type == ATTN_Q_F32) {
        const float *tab = w->data;
        for (int64_t i = 0; i < n; i++)
            memcpy(out + i * w->K, tab + (int64_t)rows[i] * w->K, (size_t)w->K * sizeof(float));
        return ATTN_OK;
    }
    const size_t rb = (size_t)(w->K / t->elems * t->bytes);
    for (int64_t i = 0; i < n; i++)
        attn__dequant_ref(w->type, (const unsigned char *)w->data + (size_t)rows[i] * rb,
                          w->K / t->elems, out + i * w->K);
    return ATTN_OK;
}
