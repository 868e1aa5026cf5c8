/* torch.nn.TransformerEncoderLayer / DecoderLayer / TransformerEncoder / TransformerDecoder /
 * Transformer, the position-wise FFN, a decoder-only GPT and the ViT-style input embedding. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layers.h"

attn_transformer_config attn_transformer_defaults(int64_t d_model, int64_t nhead) {
    attn_transformer_config c;
    memset(&c, 0, sizeof c);
    c.d_model = d_model;
    c.nhead = nhead;
    c.dim_feedforward = 2048;
    c.dropout = 0.1f;
    c.activation = ATTN_ACT_RELU;
    c.layer_norm_eps = 1e-5f;
    c.bias = 1;
    c.num_encoder_layers = 6;
    c.num_decoder_layers = 6;
    return c;
}

attn_status attn__check_tcfg(attn_ctx *ctx, const attn_transformer_config *c) {
    ATTN_FAIL_IF(!c, ctx, ATTN_E_INVALID, "transformer config is NULL");
    ATTN_FAIL_IF(c->d_model <= 0 || c->nhead <= 0 || c->dim_feedforward <= 0, ctx,
                 ATTN_E_INVALID, "d_model (%lld), nhead (%lld) and dim_feedforward (%lld) must "
                 "be positive", (long long)c->d_model, (long long)c->nhead,
                 (long long)c->dim_feedforward);
    ATTN_FAIL_IF(c->d_model % c->nhead != 0, ctx, ATTN_E_SHAPE,
                 "d_model %lld is not divisible by nhead %lld", (long long)c->d_model,
                 (long long)c->nhead);
    ATTN_FAIL_IF(!(c->dropout >= 0.0f && c->dropout < 1.0f), ctx, ATTN_E_INVALID,
                 "dropout must be in [0, 1), got %g", (double)c->dropout);
    ATTN_FAIL_IF(!(c->layer_norm_eps > 0.0f) || !isfinite(c->layer_norm_eps), ctx,
                 ATTN_E_INVALID, "layer_norm_eps must be positive");
    ATTN_FAIL_IF(c->activation != ATTN_ACT_RELU && c->activation != ATTN_ACT_GELU &&
                     c->activation != ATTN_ACT_GELU_TANH,
                 ctx, ATTN_E_INVALID, "activation must be relu, gelu or gelu_tanh");
    ATTN_FAIL_IF(c->num_encoder_layers < 0 || c->num_decoder_layers < 0 ||
                     c->num_encoder_layers > 100000 || c->num_decoder_layers > 100000,
                 ctx, ATTN_E_INVALID, "layer counts out of range");
    return ATTN_OK;
}

static attn_mha_config mha_cfg(const attn_transformer_config *c) {
    attn_mha_config m = attn_mha_defaults(c->d_model, c->nhead);
    m.bias = c->bias;
    m.dropout = c->dropout;
    return m;
}

/* ---- feed-forward -------------------------------------------------------------------- */
typedef struct ffn {
    attn_transformer_config cfg;
    attn__lin w1, w2;
} ffn;

/* y[M, E] = lin2(dropout(act(lin1(x[M, E])))); y may alias x. */
static attn_status ffn_fwd(attn_ctx *ctx, const attn__lin *l1, const attn__lin *l2,
                           attn_activation act, float p, const float *x, float *y, int64_t M,
                           attn__rng *rng) {
    attn__mark mk = attn__ws_mark(ctx);
    float *h;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &h, M, l1->out, 1, 1));
    attn__lin_fwd(l1, x, h, M);
    attn__act_ref(act, h, l1->out, h, l1->out, M, l1->out);
    attn__dropout(rng, p, h, M * l1->out);
    attn__lin_fwd(l2, h, y, M);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_ffn_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                            attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "attn_ffn_create: NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(!cfg, ctx, ATTN_E_INVALID, "config is NULL");
    attn_transformer_config c = *cfg;
    c.nhead = 1; /* unused here */
    ATTN_TRY(attn__check_tcfg(ctx, &c));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__FFN, sizeof(ffn), &m));
    ffn *f = m->impl;
    f->cfg = c;
    attn_status st = attn__lin_reg(ctx, m, "", "w_1", &f->w1, c.d_model, c.dim_feedforward, c.bias);
    if (st == ATTN_OK)
        st = attn__lin_reg(ctx, m, "", "w_2", &f->w2, c.dim_feedforward, c.d_model, c.bias);
    if (st != ATTN_OK) {
        attn_module_free(m);
        return st;
    }
    ATTN_TRY(attn__module_finish(ctx, m));
    *out = m;
    return ATTN_OK;
}

attn_status attn_ffn_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                             const attn_run *run, attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__FFN, "attn_ffn_forward"));
    const ffn *f = m->impl;
    ATTN_TRY(attn__check(ctx, x, "x", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, out, "output", ATTN_F32, 1, 4));
    char s1[96], s2[96];
    int ok = x->ndim == out->ndim && x->shape[x->ndim - 1] == f->cfg.d_model;
    for (int d = 0; ok && d < x->ndim; d++) ok = x->shape[d] == out->shape[d];
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_SHAPE, "feed-forward input %s and output %s must both be "
                 "[..., %lld]", attn__shape_str(x, s1, sizeof s1),
                 attn__shape_str(out, s2, sizeof s2), (long long)f->cfg.d_model);
    ATTN_TRY(attn__check_finite(ctx, x, "x", 0));
    int64_t M = attn_tensor_numel(x) / f->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp;
    float *y;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__contig(ctx, x, &xp));
    ATTN_TRYG(attn__ws_f32(ctx, &y, M, f->cfg.d_model, 1, 1));
    ATTN_TRYG(ffn_fwd(ctx, &f->w1, &f->w2, f->cfg.activation, f->cfg.dropout, xp, y, M, &rng));
    attn__store(y, out);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- encoder layer ------------------------------------------------------------------- */
attn_status attn__enc_layer_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                attn__enc_layer *l, const attn_transformer_config *cfg) {
    char p[160];
    l->cfg = *cfg;
    attn_mha_config mc = mha_cfg(cfg);
    int64_t E = cfg->d_model, F = cfg->dim_feedforward;
    if (snprintf(p, sizeof p, "%sself_attn.", prefix) >= (int)sizeof p)
        return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
    ATTN_TRY(attn__mha_reg(ctx, m, p, &l->self_attn, &mc));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "linear1", &l->linear1, E, F, cfg->bias));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "linear2", &l->linear2, F, E, cfg->bias));
    ATTN_TRY(attn__ln_reg(ctx, m, prefix, "norm1", &l->norm1, E, cfg->layer_norm_eps, cfg->bias));
    ATTN_TRY(attn__ln_reg(ctx, m, prefix, "norm2", &l->norm2, E, cfg->layer_norm_eps, cfg->bias));
    return ATTN_OK;
}

static void add_into(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

/* norm_first:  x = x + sa(norm1(x));  x = x + ff(norm2(x))
 * otherwise:   x = norm1(x + sa(x));  x = norm2(x + ff(x)) */
attn_status attn__enc_layer_fwd(attn_ctx *ctx, const attn__enc_layer *l, float *x, int64_t B,
                                int64_t L, const attn_mask *mask, const attn_mask *kpm,
                                int is_causal, attn__rng *rng) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, n = B * L * E;
    attn__mark mk = attn__ws_mark(ctx);
    float *t, *u;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &u, B, L, E, 1));
    /* self-attention block */
    const float *in = x;
    if (c->norm_first) {
        attn__ln_fwd(&l->norm1, x, t, B * L);
        in = t;
    }
    ATTN_TRYG(attn__mha_fwd(ctx, &l->self_attn, in, in, in, B, L, L, kpm, mask, is_causal, 0,
                            rng, u, NULL));
    attn__dropout(rng, c->dropout, u, n);
    add_into(x, u, n);
    if (!c->norm_first) attn__ln_fwd(&l->norm1, x, x, B * L);
    /* feed-forward block */
    in = x;
    if (c->norm_first) {
        attn__ln_fwd(&l->norm2, x, t, B * L);
        in = t;
    }
    ATTN_TRYG(ffn_fwd(ctx, &l->linear1, &l->linear2, c->activation, c->dropout, in, u, B * L, rng));
    attn__dropout(rng, c->dropout, u, n);
    add_into(x, u, n);
    if (!c->norm_first) attn__ln_fwd(&l->norm2, x, x, B * L);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- decoder layer ------------------------------------------------------------------- */
attn_status attn__dec_layer_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                attn__dec_layer *l, const attn_transformer_config *cfg) {
    char p[160];
    l->cfg = *cfg;
    attn_mha_config mc = mha_cfg(cfg);
    int64_t E = cfg->d_model, F = cfg->dim_feedforward;
    float eps = cfg->layer_norm_eps;
    if (snprintf(p, sizeof p, "%sself_attn.", prefix) >= (int)sizeof p)
        return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
    ATTN_TRY(attn__mha_reg(ctx, m, p, &l->self_attn, &mc));
    if (snprintf(p, sizeof p, "%smultihead_attn.", prefix) >= (int)sizeof p)
        return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
    ATTN_TRY(attn__mha_reg(ctx, m, p, &l->multihead_attn, &mc));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "linear1", &l->linear1, E, F, cfg->bias));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "linear2", &l->linear2, F, E, cfg->bias));
    ATTN_TRY(attn__ln_reg(ctx, m, prefix, "norm1", &l->norm1, E, eps, cfg->bias));
    ATTN_TRY(attn__ln_reg(ctx, m, prefix, "norm2", &l->norm2, E, eps, cfg->bias));
    ATTN_TRY(attn__ln_reg(ctx, m, prefix, "norm3", &l->norm3, E, eps, cfg->bias));
    return ATTN_OK;
}

attn_status attn__dec_layer_fwd(attn_ctx *ctx, const attn__dec_layer *l, float *x,
                                const float *memory, int64_t B, int64_t T, int64_t S,
                                const attn_mask *tgt_mask, const attn_mask *memory_mask,
                                const attn_mask *tgt_kpm, const attn_mask *memory_kpm,
                                int tgt_is_causal, attn__rng *rng) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, n = B * T * E;
    attn__mark mk = attn__ws_mark(ctx);
    float *t, *u;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &u, B, T, E, 1));
    const float *in = x;
    /* self-attention block */
    if (c->norm_first) {
        attn__ln_fwd(&l->norm1, x, t, B * T);
        in = t;
    }
    ATTN_TRYG(attn__mha_fwd(ctx, &l->self_attn, in, in, in, B, T, T, tgt_kpm, tgt_mask,
                            tgt_is_causal, 0, rng, u, NULL));
    attn__dropout(rng, c->dropout, u, n);
    add_into(x, u, n);
    if (!c->norm_first) attn__ln_fwd(&l->norm1, x, x, B * T);
    /* cross-attention block: queries from x, keys and values from memory */
    in = x;
    if (c->norm_first) {
        attn__ln_fwd(&l->norm2, x, t, B * T);
        in = t;
    }
    ATTN_TRYG(attn__mha_fwd(ctx, &l->multihead_attn, in, memory, memory, B, T, S, memory_kpm,
                            memory_mask, 0, 0, rng, u, NULL));
    attn__dropout(rng, c->dropout, u, n);
    add_into(x, u, n);
    if (!c->norm_first) attn__ln_fwd(&l->norm2, x, x, B * T);
    /* feed-forward block */
    in = x;
    if (c->norm_first) {
        attn__ln_fwd(&l->norm3, x, t, B * T);
        in = t;
    }
    ATTN_TRYG(ffn_fwd(ctx, &l->linear1, &l->linear2, c->activation, c->dropout, in, u, B * T, rng));
    attn__dropout(rng, c->dropout, u, n);
    add_into(x, u, n);
    if (!c->norm_first) attn__ln_fwd(&l->norm3, x, x, B * T);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- module wrappers ----------------------------------------------------------------- */
typedef struct stack {
    attn_transformer_config cfg;
    int64_t nenc, ndec;
    int enc_norm, dec_norm;
    attn__enc_layer *enc; /* nenc layers (allocated with the module's allocator) */
    attn__dec_layer *dec;
    attn__ln enc_final, dec_final;
} stack;

typedef struct gpt {
    stack s;
    int64_t V, P;
    float *tok, *pos; /* [V, E], [P, E] */
    attn__lin lm_head;
} gpt;

/* Builds encoder layers under enc_prefix ("layers." or "encoder.layers.") and decoder layers
 * under dec_prefix; final norms under the given names (NULL = none). */
static attn_status stack_reg(attn_ctx *ctx, attn_module *m, stack *s,
                             const attn_transformer_config *cfg, int64_t nenc, int64_t ndec,
                             const char *enc_prefix, const char *dec_prefix,
                             const char *enc_norm, const char *dec_norm) {
    char p[160];
    s->cfg = *cfg;
    s->nenc = nenc;
    s->ndec = ndec;
    /* one allocation for both layer arrays, owned by the module (m->extra) */
    size_t ne = (size_t)nenc * sizeof(attn__enc_layer), nd = (size_t)ndec * sizeof(attn__dec_layer);
    m->extra = attn__calloc(ctx, 1, ne + nd);
    if (!m->extra) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (layers)");
    s->enc = nenc ? (attn__enc_layer *)m->extra : NULL;
    s->dec = ndec ? (attn__dec_layer *)((char *)m->extra + ne) : NULL;
    for (int64_t i = 0; i < nenc; i++) {
        if (snprintf(p, sizeof p, "%s%lld.", enc_prefix, (long long)i) >= (int)sizeof p)
            return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
        ATTN_TRY(attn__enc_layer_reg(ctx, m, p, &s->enc[i], cfg));
    }
    if (enc_norm) {
        s->enc_norm = 1;
        ATTN_TRY(attn__ln_reg(ctx, m, "", enc_norm, &s->enc_final, cfg->d_model,
                              cfg->layer_norm_eps, cfg->bias));
    }
    for (int64_t i = 0; i < ndec; i++) {
        if (snprintf(p, sizeof p, "%s%lld.", dec_prefix, (long long)i) >= (int)sizeof p)
            return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
        ATTN_TRY(attn__dec_layer_reg(ctx, m, p, &s->dec[i], cfg));
    }
    if (dec_norm) {
        s->dec_norm = 1;
        ATTN_TRY(attn__ln_reg(ctx, m, "", dec_norm, &s->dec_final, cfg->d_model,
                              cfg->layer_norm_eps, cfg->bias));
    }
    return ATTN_OK;
}

static attn_status finish_stack(attn_ctx *ctx, attn_module *m, attn_status st, attn_module **out) {
    if (st != ATTN_OK) {
        attn_module_free(m);
        return st;
    }
    ATTN_TRY(attn__module_finish(ctx, m));
    *out = m;
    return ATTN_OK;
}

attn_status attn_encoder_layer_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                      attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__ENC_LAYER, sizeof(attn__enc_layer), &m));
    attn_status st = attn__enc_layer_reg(ctx, m, "", m->impl, cfg);
    if (st != ATTN_OK) {
        attn_module_free(m);
        return st;
    }
    ATTN_TRY(attn__module_finish(ctx, m));
    *out = m;
    return ATTN_OK;
}

attn_status attn_decoder_layer_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                      attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__DEC_LAYER, sizeof(attn__dec_layer), &m));
    attn_status st = attn__dec_layer_reg(ctx, m, "", m->impl, cfg);
    if (st != ATTN_OK) {
        attn_module_free(m);
        return st;
    }
    ATTN_TRY(attn__module_finish(ctx, m));
    *out = m;
    return ATTN_OK;
}

static attn_status make_stack(attn_ctx *ctx, attn__kind kind, const attn_transformer_config *cfg,
                              int64_t nenc, int64_t ndec, const char *ep, const char *dp,
                              const char *en, const char *dn, size_t impl, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, kind, impl, &m));
    attn_status st = stack_reg(ctx, m, m->impl, cfg, nenc, ndec, ep, dp, en, dn);
    return finish_stack(ctx, m, st, out);
}

attn_status attn_encoder_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                int final_norm, attn_module **out) {
    ATTN_FAIL_IF(cfg && cfg->num_encoder_layers < 1, ctx, ATTN_E_INVALID,
                 "an encoder needs at least one layer");
    return make_stack(ctx, ATTN__ENCODER, cfg, cfg ? cfg->num_encoder_layers : 0, 0, "layers.",
                      "", final_norm ? "norm" : NULL, NULL, sizeof(stack), out);
}

attn_status attn_decoder_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                int final_norm, attn_module **out) {
    ATTN_FAIL_IF(cfg && cfg->num_decoder_layers < 1, ctx, ATTN_E_INVALID,
                 "a decoder needs at least one layer");
    return make_stack(ctx, ATTN__DECODER, cfg, 0, cfg ? cfg->num_decoder_layers : 0, "",
                      "layers.", NULL, final_norm ? "norm" : NULL, sizeof(stack), out);
}

attn_status attn_transformer_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                    attn_module **out) {
    ATTN_FAIL_IF(cfg && (cfg->num_encoder_layers < 1 || cfg->num_decoder_layers < 1), ctx,
                 ATTN_E_INVALID, "a transformer needs at least one encoder and decoder layer");
    return make_stack(ctx, ATTN__TRANSFORMER, cfg, cfg ? cfg->num_encoder_layers : 0,
                      cfg ? cfg->num_decoder_layers : 0, "encoder.layers.", "decoder.layers.",
                      "encoder.norm", "decoder.norm", sizeof(stack), out);
}

/* Encoder stack over x [B, L, E] in place. */
static attn_status enc_run(attn_ctx *ctx, const stack *s, float *x, int64_t B, int64_t L,
                           const attn_mask *mask, const attn_mask *kpm, int is_causal,
                           attn__rng *rng) {
    for (int64_t i = 0; i < s->nenc; i++)
        ATTN_TRY(attn__enc_layer_fwd(ctx, &s->enc[i], x, B, L, mask, kpm, is_causal, rng));
    if (s->enc_norm) attn__ln_fwd(&s->enc_final, x, x, B * L);
    return ATTN_OK;
}

static attn_status dec_run(attn_ctx *ctx, const stack *s, float *x, const float *mem,
                           int64_t B, int64_t T, int64_t S, const attn_mask *tm,
                           const attn_mask *mm, const attn_mask *tk, const attn_mask *mk,
                           int tgt_is_causal, attn__rng *rng) {
    for (int64_t i = 0; i < s->ndec; i++)
        ATTN_TRY(attn__dec_layer_fwd(ctx, &s->dec[i], x, mem, B, T, S, tm, mm, tk, mk,
                                     tgt_is_causal, rng));
    if (s->dec_norm) attn__ln_fwd(&s->dec_final, x, x, B * T);
    return ATTN_OK;
}

/* Shared by the layer and stack entry points: copy src to a working buffer, run, store. */
static attn_status enc_entry(attn_ctx *ctx, const attn_module *m, int is_stack,
                             const attn_tensor *src, const attn_mask *mask,
                             const attn_mask *kpm, int is_causal, const attn_run *run,
                             attn_tensor *out) {
    const attn_transformer_config *c =
        is_stack ? &((const stack *)m->impl)->cfg : &((const attn__enc_layer *)m->impl)->cfg;
    int64_t B = 0, L = 0, E = c->d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *in;
    float *x;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__seq_in(ctx, src, "src", E, &B, &L, &in));
    ATTN_TRYG(attn__check(ctx, out, "output", ATTN_F32, 3, 3));
    {
        int64_t shape[3] = {B, L, E};
        ATTN_TRYG(attn__check_shape(ctx, out, "output", 3, shape));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, L, E, 1));
    memcpy(x, in, (size_t)(B * L * E) * sizeof(float));
    if (is_stack) ATTN_TRYG(enc_run(ctx, m->impl, x, B, L, mask, kpm, is_causal, &rng));
    else ATTN_TRYG(attn__enc_layer_fwd(ctx, m->impl, x, B, L, mask, kpm, is_causal, &rng));
    attn__store(x, out);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_encoder_layer_forward(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *src, const attn_mask *src_mask,
                                       const attn_mask *src_key_padding_mask, int is_causal,
                                       const attn_run *run, attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ENC_LAYER, "attn_encoder_layer_forward"));
    return enc_entry(ctx, m, 0, src, src_mask, src_key_padding_mask, is_causal, run, out);
}

attn_status attn_encoder_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                 const attn_mask *mask, const attn_mask *src_key_padding_mask,
                                 int is_causal, const attn_run *run, attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ENCODER, "attn_encoder_forward"));
    return enc_entry(ctx, m, 1, src, mask, src_key_padding_mask, is_causal, run, out);
}

static attn_status dec_entry(attn_ctx *ctx, const attn_module *m, int is_stack,
                             const attn_tensor *tgt, const attn_tensor *memory,
                             const attn_mask *tm, const attn_mask *mm, const attn_mask *tk,
                             const attn_mask *mkpm, int tgt_is_causal, const attn_run *run,
                             attn_tensor *out) {
    const attn_transformer_config *c =
        is_stack ? &((const stack *)m->impl)->cfg : &((const attn__dec_layer *)m->impl)->cfg;
    int64_t B = 0, T = 0, S = 0, E = c->d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *in, *mem;
    float *x;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__seq_in(ctx, tgt, "tgt", E, &B, &T, &in));
    ATTN_TRYG(attn__seq_in(ctx, memory, "memory", E, &B, &S, &mem));
    ATTN_TRYG(attn__check(ctx, out, "output", ATTN_F32, 3, 3));
    {
        int64_t shape[3] = {B, T, E};
        ATTN_TRYG(attn__check_shape(ctx, out, "output", 3, shape));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, T, E, 1));
    memcpy(x, in, (size_t)(B * T * E) * sizeof(float));
    if (is_stack)
        ATTN_TRYG(dec_run(ctx, m->impl, x, mem, B, T, S, tm, mm, tk, mkpm, tgt_is_causal, &rng));
    else
        ATTN_TRYG(attn__dec_layer_fwd(ctx, m->impl, x, mem, B, T, S, tm, mm, tk, mkpm,
                                      tgt_is_causal, &rng));
    attn__store(x, out);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_decoder_layer_forward(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *tgt, const attn_tensor *memory,
                                       const attn_mask *tgt_mask, const attn_mask *memory_mask,
                                       const attn_mask *tgt_key_padding_mask,
                                       const attn_mask *memory_key_padding_mask,
                                       int tgt_is_causal, const attn_run *run,
                                       attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__DEC_LAYER, "attn_decoder_layer_forward"));
    return dec_entry(ctx, m, 0, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                     memory_key_padding_mask, tgt_is_causal, run, out);
}

attn_status attn_decoder_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *tgt,
                                 const attn_tensor *memory, const attn_mask *tgt_mask,
                                 const attn_mask *memory_mask,
                                 const attn_mask *tgt_key_padding_mask,
                                 const attn_mask *memory_key_padding_mask, int tgt_is_causal,
                                 const attn_run *run, attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__DECODER, "attn_decoder_forward"));
    return dec_entry(ctx, m, 1, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                     memory_key_padding_mask, tgt_is_causal, run, out);
}

attn_status attn_transformer_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                     const attn_tensor *tgt, const attn_mask *src_mask,
                                     const attn_mask *tgt_mask, const attn_mask *memory_mask,
                                     const attn_mask *src_key_padding_mask,
                                     const attn_mask *tgt_key_padding_mask,
                                     const attn_mask *memory_key_padding_mask,
                                     int tgt_is_causal, const attn_run *run, attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__TRANSFORMER, "attn_transformer_forward"));
    const stack *s = m->impl;
    int64_t B = 0, S = 0, T = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *sp, *tp;
    float *mem, *x;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__seq_in(ctx, src, "src", E, &B, &S, &sp));
    ATTN_TRYG(attn__seq_in(ctx, tgt, "tgt", E, &B, &T, &tp));
    ATTN_TRYG(attn__check(ctx, out, "output", ATTN_F32, 3, 3));
    {
        int64_t shape[3] = {B, T, E};
        ATTN_TRYG(attn__check_shape(ctx, out, "output", 3, shape));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &mem, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, T, E, 1));
    memcpy(mem, sp, (size_t)(B * S * E) * sizeof(float));
    memcpy(x, tp, (size_t)(B * T * E) * sizeof(float));
    ATTN_TRYG(enc_run(ctx, s, mem, B, S, src_mask, src_key_padding_mask, 0, &rng));
    ATTN_TRYG(dec_run(ctx, s, x, mem, B, T, S, tgt_mask, memory_mask, tgt_key_padding_mask,
                      memory_key_padding_mask, tgt_is_causal, &rng));
    attn__store(x, out);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- GPT ----------------------------------------------------------------------------- */
attn_status attn_gpt_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                            int64_t vocab_size, int64_t max_positions, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    ATTN_FAIL_IF(vocab_size <= 0 || max_positions <= 0, ctx, ATTN_E_INVALID,
                 "vocab_size and max_positions must be positive");
    ATTN_FAIL_IF(cfg->num_encoder_layers < 1, ctx, ATTN_E_INVALID,
                 "a GPT needs at least one layer (num_encoder_layers)");
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__GPT, sizeof(gpt), &m));
    gpt *g = m->impl;
    g->V = vocab_size;
    g->P = max_positions;
    int64_t E = cfg->d_model;
    attn_status st = attn__param_reg(ctx, m, "", "tok_emb.weight", &g->tok, 0, 2, vocab_size, E, 0);
    if (st == ATTN_OK)
        st = attn__param_reg(ctx, m, "", "pos_emb.weight", &g->pos, 0, 2, max_positions, E, 0);
    if (st == ATTN_OK)
        st = stack_reg(ctx, m, &g->s, cfg, cfg->num_encoder_layers, 0, "layers.", "", "norm", NULL);
    if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "lm_head", &g->lm_head, E, vocab_size, 0);
    return finish_stack(ctx, m, st, out);
}

attn_status attn_gpt_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *ids,
                             const attn_run *run, attn_tensor *logits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__GPT, "attn_gpt_forward"));
    const gpt *g = m->impl;
    ATTN_FAIL_IF(!ids || !ids->data, ctx, ATTN_E_INVALID, "ids are missing");
    ATTN_FAIL_IF(ids->dtype != ATTN_I64 && ids->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "ids must be I32 or I64");
    ATTN_TRY(attn__check(ctx, ids, "ids", ids->dtype, 2, 2));
    int64_t B = ids->shape[0], T = ids->shape[1], E = g->s.cfg.d_model;
    ATTN_FAIL_IF(T > g->P, ctx, ATTN_E_SHAPE, "sequence length %lld exceeds max_positions %lld",
                 (long long)T, (long long)g->P);
    ATTN_TRY(attn__check(ctx, logits, "logits", ATTN_F32, 3, 3));
    int64_t shape[3] = {B, T, g->V};
    ATTN_TRY(attn__check_shape(ctx, logits, "logits", 3, shape));
    attn__mark mk = attn__ws_mark(ctx);
    float *x, *y;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &y, B, T, g->V, 1));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t off = b * ids->stride[0] + t * ids->stride[1];
            int64_t id = ids->dtype == ATTN_I64 ? ((const int64_t *)ids->data)[off]
                                                : ((const int32_t *)ids->data)[off];
            if (id < 0 || id >= g->V) {
                st = attn__fail(ctx, ATTN_E_INVALID, "token id %lld out of range [0, %lld)",
                                (long long)id, (long long)g->V);
                goto done;
            }
            float *xr = x + (b * T + t) * E;
            for (int64_t e = 0; e < E; e++) xr[e] = g->tok[id * E + e] + g->pos[t * E + e];
        }
    attn__dropout(&rng, g->s.cfg.dropout, x, B * T * E);
    ATTN_TRYG(enc_run(ctx, &g->s, x, B, T, NULL, NULL, 1, &rng));
    attn__lin_fwd(&g->lm_head, x, y, B * T);
    attn__store(y, logits);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- ViT-style input (seed 003) ------------------------------------------------------ */
typedef struct vit {
    int64_t P, E, N;
    float *cls, *pos;
    attn__lin proj;
} vit;

attn_status attn_vit_embed_create(attn_ctx *ctx, int64_t patch_dim, int64_t E,
                                  int64_t max_patches, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(patch_dim <= 0 || E <= 0 || max_patches <= 0 || max_patches == INT64_MAX, ctx,
                 ATTN_E_INVALID, "patch_dim, embed_dim and max_patches must be positive");
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__VIT_EMBED, sizeof(vit), &m));
    vit *v = m->impl;
    v->P = patch_dim, v->E = E, v->N = max_patches;
    attn_status st = attn__param_reg(ctx, m, "", "cls_token", &v->cls, 0, 3, 1, 1, E);
    if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "proj", &v->proj, patch_dim, E, 1);
    if (st == ATTN_OK)
        st = attn__param_reg(ctx, m, "", "pos_embed", &v->pos, 0, 3, 1, max_patches + 1, E);
    if (st != ATTN_OK) {
        attn_module_free(m);
        return st;
    }
    ATTN_TRY(attn__module_finish(ctx, m));
    *out = m;
    return ATTN_OK;
}

attn_status attn_vit_embed_forward(attn_ctx *ctx, const attn_module *m,
                                   const attn_tensor *patches, attn_tensor *z) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT_EMBED, "attn_vit_embed_forward"));
    const vit *v = m->impl;
    int64_t B = 0, N = 0;
    attn__mark mk = attn__ws_mark(ctx);
    const float *p;
    float *zp;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, patches, "patches", v->P, &B, &N, &p));
    if (N > v->N) {
        st = attn__fail(ctx, ATTN_E_SHAPE, "%lld patches exceed max_patches %lld", (long long)N,
                        (long long)v->N);
        goto done;
    }
    ATTN_TRYG(attn__check(ctx, z, "z", ATTN_F32, 3, 3));
    {
        int64_t shape[3] = {B, N + 1, v->E};
        ATTN_TRYG(attn__check_shape(ctx, z, "z", 3, shape));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &zp, B, N + 1, v->E, 1));
    for (int64_t b = 0; b < B; b++) {
        float *zb = zp + b * (N + 1) * v->E;
        memcpy(zb, v->cls, (size_t)v->E * sizeof(float));
        attn__lin_fwd(&v->proj, p + b * N * v->P, zb + v->E, N);
        for (int64_t i = 0; i < (N + 1) * v->E; i++) zb[i] += v->pos[i];
    }
    attn__store(zp, z);
done:
    attn__ws_release(ctx, mk);
    return st;
}
