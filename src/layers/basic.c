/* nn.Linear, nn.LayerNorm and nn.Embedding as modules: thin wrappers over the stateless ops. */
#include <math.h>
#include <string.h>

#include "layers.h"

typedef struct lin_mod { attn__lin l; } lin_mod;
typedef struct ln_mod { attn__ln l; } ln_mod;
typedef struct emb_mod { float *weight; int64_t V, E; } emb_mod;

attn_status attn_linear_create(attn_ctx *ctx, int64_t in_features, int64_t out_features,
                               int bias, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(in_features <= 0 || out_features <= 0, ctx, ATTN_E_INVALID,
                 "in_features (%lld) and out_features (%lld) must be positive",
                 (long long)in_features, (long long)out_features);
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__LINEAR, sizeof(lin_mod), &m));
    lin_mod *l = m->impl;
    /* names "weight" and "bias": register with an empty layer name */
    attn_status st = attn__param_reg(ctx, m, "", "weight", &l->l.weight, 0, 2, out_features,
                                     in_features, 0);
    attn__param_init_last(m, ATTN__INIT_UNIFORM, 1.0 / sqrt((double)in_features));
    if (st == ATTN_OK && bias) {
        st = attn__param_reg(ctx, m, "", "bias", &l->l.bias, 0, 1, out_features, 0, 0);
        attn__param_init_last(m, ATTN__INIT_UNIFORM, 1.0 / sqrt((double)in_features));
    }
    l->l.in = in_features;
    l->l.out = out_features;
    return attn__module_done(ctx, m, st, out);
}

attn_status attn_linear_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                                attn_tensor *y) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LINEAR, "attn_linear_forward"));
    const lin_mod *l = m->impl;
    attn_tensor W = attn_view2(l->l.weight, l->l.out, l->l.in), b = attn_view1(l->l.bias, l->l.out);
    return attn_linear(ctx, x, &W, l->l.bias ? &b : NULL, y);
}

attn_status attn_layer_norm_create(attn_ctx *ctx, int64_t E, float eps, int bias,
                                   attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(E <= 0, ctx, ATTN_E_INVALID, "normalized_shape must be positive");
    ATTN_FAIL_IF(!(eps > 0.0f), ctx, ATTN_E_INVALID, "eps must be positive");
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__LAYER_NORM, sizeof(ln_mod), &m));
    ln_mod *l = m->impl;
    attn_status st = attn__param_reg(ctx, m, "", "weight", &l->l.weight, 1.0f, 1, E, 0, 0);
    if (st == ATTN_OK && bias) st = attn__param_reg(ctx, m, "", "bias", &l->l.bias, 0, 1, E, 0, 0);
    l->l.E = E;
    l->l.eps = eps;
    return attn__module_done(ctx, m, st, out);
}

attn_status attn_layer_norm_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                                    attn_tensor *y) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LAYER_NORM, "attn_layer_norm_forward"));
    const ln_mod *l = m->impl;
    attn_tensor w = attn_view1(l->l.weight, l->l.E), b = attn_view1(l->l.bias, l->l.E);
    return attn_layer_norm(ctx, x, &w, l->l.bias ? &b : NULL, l->l.eps, y);
}

attn_status attn_embedding_create(attn_ctx *ctx, int64_t num_embeddings, int64_t E,
                                  attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(num_embeddings <= 0 || E <= 0, ctx, ATTN_E_INVALID,
                 "num_embeddings and embedding_dim must be positive");
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__EMBEDDING, sizeof(emb_mod), &m));
    emb_mod *e = m->impl;
    e->V = num_embeddings;
    e->E = E;
    attn_status st = attn__param_reg(ctx, m, "", "weight", &e->weight, 0, 2, num_embeddings, E, 0);
    attn__param_init_last(m, ATTN__INIT_NORMAL, 1.0);
    return attn__module_done(ctx, m, st, out);
}

attn_status attn_embedding_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *ids,
                                   attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__EMBEDDING, "attn_embedding_forward"));
    const emb_mod *e = m->impl;
    attn_tensor t = attn_view2(e->weight, e->V, e->E);
    return attn_embedding(ctx, ids, &t, out);
}
