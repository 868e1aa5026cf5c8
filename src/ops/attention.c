/* Attention without parameters: simplified self-attention (seed 001) and scaled dot-product
 * attention (PyTorch scaled_dot_product_attention semantics). */
#include <math.h>
#include <string.h>

#include "../kernels/kernels.h"

attn_sdpa_options attn_sdpa_defaults(void) {
    attn_sdpa_options o;
    memset(&o, 0, sizeof o);
    return o;
}

attn_status attn_simple_self_attention(attn_ctx *ctx, const attn_tensor *X, attn_normalize norm,
                                       attn_tensor *scores, attn_tensor *weights,
                                       attn_tensor *context) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, X, "inputs", ATTN_F32, 2, 3));
    ATTN_FAIL_IF(norm != ATTN_NORM_SOFTMAX && norm != ATTN_NORM_SUM, ctx, ATTN_E_INVALID,
                 "unknown normalisation %d", (int)norm);
    int b3 = X->ndim == 3;
    int64_t B = b3 ? X->shape[0] : 1, T = X->shape[b3], E = X->shape[b3 + 1];
    int64_t wshape[3] = {B, T, T}, cshape[3] = {B, T, E};
    ATTN_TRY(attn__check(ctx, context, "context", ATTN_F32, X->ndim, X->ndim));
    ATTN_TRY(attn__check_shape(ctx, context, "context", X->ndim, cshape + !b3));
    attn_tensor *opt[2] = {scores, weights};
    const char *on[2] = {"scores", "weights"};
    for (int i = 0; i < 2; i++)
        if (opt[i] && opt[i]->data) {
            ATTN_TRY(attn__check(ctx, opt[i], on[i], ATTN_F32, X->ndim, X->ndim));
            ATTN_TRY(attn__check_shape(ctx, opt[i], on[i], X->ndim, wshape + !b3));
        }
    ATTN_TRY(attn__check_finite(ctx, X, "inputs", 0));
    attn__mark mk = attn__ws_mark(ctx);
    float *s, *w;
    const float *x;
    attn_status st;
    ATTN_TRYG(attn__contig(ctx, X, &x));
    ATTN_TRYG(attn__ws_f32(ctx, &s, B, T, T, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &w, B, T, T, 1));
    for (int64_t b = 0; b < B; b++) {
        const float *xb = x + b * T * E;
        float *sb = s + b * T * T, *wb = w + b * T * T;
        /* scores = X X^T: the dot product of every pair of tokens */
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++) {
                double acc = 0;
                for (int64_t e = 0; e < E; e++) acc += (double)xb[i * E + e] * xb[j * E + e];
                sb[i * T + j] = (float)acc;
            }
        for (int64_t i = 0; i < T; i++) {
            if (norm == ATTN_NORM_SOFTMAX) {
                attn__softmax_row(sb + i * T, wb + i * T, T);
                continue;
            }
            double sum = 0;
            for (int64_t j = 0; j < T; j++) sum += sb[i * T + j];
            if (sum == 0.0) {
                st = attn__fail(ctx, ATTN_E_INVALID,
                                "sum-normalisation: scores of row %lld sum to zero", (long long)i);
                goto done;
            }
            for (int64_t j = 0; j < T; j++) wb[i * T + j] = (float)(sb[i * T + j] / sum);
        }
    }
    /* context = weights X */
    {
        float *c;
        ATTN_TRYG(attn__ws_f32(ctx, &c, B, T, E, 1));
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < T; i++)
                for (int64_t e = 0; e < E; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < T; j++)
                        acc += (double)w[(b * T + i) * T + j] * x[(b * T + j) * E + e];
                    c[(b * T + i) * E + e] = (float)acc;
                }
        attn__store(c, context);
    }
    if (scores && scores->data) attn__store(s, scores);
    if (weights && weights->data) attn__store(w, weights);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_sdpa(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                      const attn_tensor *v, const attn_mask *mask, const attn_sdpa_options *opt,
                      attn_tensor *out, attn_tensor *weights, attn_tensor *lse) {
    if (!ctx) return ATTN_E_INVALID;
    attn_sdpa_options o = opt ? *opt : attn_sdpa_defaults();
    ATTN_TRY(attn__check(ctx, q, "query", ATTN_F32, 4, 4));
    ATTN_TRY(attn__check(ctx, k, "key", ATTN_F32, 4, 4));
    ATTN_TRY(attn__check(ctx, v, "value", ATTN_F32, 4, 4));
    ATTN_TRY(attn__check(ctx, out, "output", ATTN_F32, 4, 4));
    int64_t B = q->shape[0], H = q->shape[1], L = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], S = k->shape[2], Dv = v->shape[3];
    char s1[96], s2[96];
    ATTN_FAIL_IF(k->shape[0] != B || k->shape[3] != D, ctx, ATTN_E_SHAPE,
                 "key %s does not match query %s (batch and head dim must agree)",
                 attn__shape_str(k, s1, sizeof s1), attn__shape_str(q, s2, sizeof s2));
    ATTN_FAIL_IF(v->shape[0] != B || v->shape[1] != Hkv || v->shape[2] != S, ctx, ATTN_E_SHAPE,
                 "value %s does not match key %s (batch, heads and length must agree)",
                 attn__shape_str(v, s1, sizeof s1), attn__shape_str(k, s2, sizeof s2));
    ATTN_FAIL_IF(H % Hkv != 0, ctx, ATTN_E_SHAPE,
                 "query heads (%lld) must be a multiple of key/value heads (%lld)", (long long)H,
                 (long long)Hkv);
    int64_t oshape[4] = {B, H, L, Dv}, wshape[4] = {B, H, L, S};
    ATTN_TRY(attn__check_shape(ctx, out, "output", 4, oshape));
    if (weights && weights->data) {
        ATTN_TRY(attn__check(ctx, weights, "weights", ATTN_F32, 4, 4));
        ATTN_TRY(attn__check_shape(ctx, weights, "weights", 4, wshape));
    }
    if (lse && lse->data) {
        ATTN_TRY(attn__check(ctx, lse, "lse", ATTN_F32, 3, 3));
        ATTN_TRY(attn__check_shape(ctx, lse, "lse", 3, wshape));
    }
    ATTN_FAIL_IF((unsigned)o.causal > ATTN_CAUSAL_BOTTOM_RIGHT, ctx, ATTN_E_INVALID,
                 "unknown causal mode %d", (int)o.causal);
    ATTN_FAIL_IF(!isfinite(o.scale), ctx, ATTN_E_INVALID, "scale must be finite");
    ATTN_FAIL_IF(!(o.dropout_p >= 0.0f && o.dropout_p < 1.0f), ctx, ATTN_E_INVALID,
                 "dropout_p must be in [0, 1), got %g", (double)o.dropout_p);
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    ATTN_TRY(attn__mask_bind(ctx, mask, "attn_mask", wshape, &a.mask[0]));
    ATTN_TRY(attn__check_finite(ctx, q, "query", 0));
    ATTN_TRY(attn__check_finite(ctx, k, "key", 0));
    ATTN_TRY(attn__check_finite(ctx, v, "value", 0));
    a.B = B, a.H = H, a.Hkv = Hkv, a.L = L, a.S = S, a.D = D, a.Dv = Dv;
    a.q = q->data, a.k = k->data, a.v = v->data, a.o = out->data;
    memcpy(a.qs, q->stride, sizeof a.qs);
    memcpy(a.ks, k->stride, sizeof a.ks);
    memcpy(a.vs, v->stride, sizeof a.vs);
    memcpy(a.os, out->stride, sizeof a.os);
    if (weights && weights->data) {
        a.w = weights->data;
        memcpy(a.ws, weights->stride, sizeof a.ws);
    }
    if (lse && lse->data) {
        a.lse = lse->data;
        memcpy(a.ls, lse->stride, sizeof a.ls);
    }
    a.mask_ncols[0] = S;
    a.causal = o.causal;
    a.scale = o.scale != 0.0f ? o.scale : (float)(1.0 / sqrt((double)D));
    a.dropout_p = o.dropout_p;
    a.seed = o.seed;
    a.offset = o.offset;
    attn__mark mk = attn__ws_mark(ctx);
    float *scratch;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &scratch, 2, S, 1, 1));
    attn__sdpa_ref(&a, scratch);
done:
    attn__ws_release(ctx, mk);
    return st;
}
