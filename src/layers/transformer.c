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

/* Backward of attn__ln_fwd: dx [M, E] (may alias dy) from dy; the weight and bias gradients
 * accumulate into g's buffers. */
static void ln_bwd(const attn__gmap *g, const attn__ln *ln, const float *x, const float *dy,
                   float *dx, int64_t M) {
    attn__layer_norm_bwd_ref(x, ln->E, ln->weight, ln->eps, dy, ln->E, dx, ln->E,
                             attn__g(g, ln->weight), attn__g(g, ln->bias), M, ln->E);
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
    ATTN_TRYG(attn__lin_fwd(ctx, l1, x, h, M));
    attn__act_ref(act, h, l1->out, h, l1->out, M, l1->out);
    attn__dropout(rng, p, h, M * l1->out);
    ATTN_TRYG(attn__lin_fwd(ctx, l2, h, y, M));
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
                                int tgt_is_causal, attn__rng *rng, float *cross_w) {
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
                            memory_mask, 0, 1, rng, u, cross_w));
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

typedef struct gpt {
    attn__stack s;
    int64_t V, P;
    float *tok, *pos; /* [V, E], [P, E] */
    attn__lin lm_head;
} gpt;

/* Builds encoder layers under enc_prefix ("layers." or "encoder.layers.") and decoder layers
 * under dec_prefix; final norms under the given names (NULL = none). */
attn_status attn__stack_reg(attn_ctx *ctx, attn_module *m, attn__stack *s,
                            const attn_transformer_config *cfg, int64_t nenc, int64_t ndec,
                            const char *enc_prefix, const char *dec_prefix, const char *enc_norm,
                            const char *dec_norm, size_t tail_bytes, void **tail) {
    char p[160];
    s->cfg = *cfg;
    s->nenc = nenc;
    s->ndec = ndec;
    if (ctx->psrc) { /* counts from a file's claims size the layer arrays below */
        int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_LAYERS);
        ATTN_FAIL_IF(nenc > lim || ndec > lim, ctx, ATTN_E_UNSUPPORTED,
                     "%s layer count %lld is over ATTN_LIMIT_LAYERS (%lld)",
                     nenc > lim ? "encoder" : "decoder", (long long)(nenc > lim ? nenc : ndec),
                     (long long)lim);
    }
    /* one allocation for both layer arrays, owned by the module (m->extra) */
    size_t ne = (size_t)nenc * sizeof(attn__enc_layer), nd = (size_t)ndec * sizeof(attn__dec_layer);
    size_t tot = ne + nd; /* the caller's tail after the layers, 64-byte aligned */
    tot = (tot + 63) & ~(size_t)63;
    size_t tail_off = tot;
    if (!attn__add_size(tot, tail_bytes, &tot))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "model too large");
    m->extra = attn__calloc(ctx, 1, tot);
    if (!m->extra) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (layers)");
    if (tail) *tail = tail_bytes ? (char *)m->extra + tail_off : NULL;
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
    attn_status st = attn__stack_reg(ctx, m, m->impl, cfg, nenc, ndec, ep, dp, en, dn, 0, NULL);
    return finish_stack(ctx, m, st, out);
}

attn_status attn_encoder_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                int final_norm, attn_module **out) {
    ATTN_FAIL_IF(cfg && cfg->num_encoder_layers < 1, ctx, ATTN_E_INVALID,
                 "an encoder needs at least one layer");
    return make_stack(ctx, ATTN__ENCODER, cfg, cfg ? cfg->num_encoder_layers : 0, 0, "layers.",
                      "", final_norm ? "norm" : NULL, NULL, sizeof(attn__stack), out);
}

attn_status attn_decoder_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                int final_norm, attn_module **out) {
    ATTN_FAIL_IF(cfg && cfg->num_decoder_layers < 1, ctx, ATTN_E_INVALID,
                 "a decoder needs at least one layer");
    return make_stack(ctx, ATTN__DECODER, cfg, 0, cfg ? cfg->num_decoder_layers : 0, "",
                      "layers.", NULL, final_norm ? "norm" : NULL, sizeof(attn__stack), out);
}

attn_status attn_transformer_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                    attn_module **out) {
    ATTN_FAIL_IF(cfg && (cfg->num_encoder_layers < 1 || cfg->num_decoder_layers < 1), ctx,
                 ATTN_E_INVALID, "a transformer needs at least one encoder and decoder layer");
    ATTN_TRY(make_stack(ctx, ATTN__TRANSFORMER, cfg, cfg ? cfg->num_encoder_layers : 0,
                        cfg ? cfg->num_decoder_layers : 0, "encoder.layers.", "decoder.layers.",
                        "encoder.norm", "decoder.norm", sizeof(attn__stack), out));
    /* nn.Transformer._reset_parameters: xavier_uniform_ on every parameter with dim > 1 */
    attn_module *m = *out;
    for (size_t i = 0; i < m->nparams; i++) {
        attn__param *p = &m->params[i];
        if (p->ndim > 1) {
            p->init_kind = ATTN__INIT_UNIFORM;
            p->init_a = (float)attn__xavier_bound(p->shape[1], p->shape[0]);
        }
    }
    return ATTN_OK;
}

/* Encoder stack over x [B, L, E] in place. */
attn_status attn__enc_run(attn_ctx *ctx, const attn__stack *s, float *x, int64_t B, int64_t L,
                           const attn_mask *mask, const attn_mask *kpm, int is_causal,
                           attn__rng *rng) {
    for (int64_t i = 0; i < s->nenc; i++)
        ATTN_TRY(attn__enc_layer_fwd(ctx, &s->enc[i], x, B, L, mask, kpm, is_causal, rng));
    if (s->enc_norm) attn__ln_fwd(&s->enc_final, x, x, B * L);
    return ATTN_OK;
}

attn_status attn__dec_run(attn_ctx *ctx, const attn__stack *s, float *x, const float *mem,
                           int64_t B, int64_t T, int64_t S, const attn_mask *tm,
                           const attn_mask *mm, const attn_mask *tk, const attn_mask *mk,
                           int tgt_is_causal, attn__rng *rng, float *cross_w) {
    for (int64_t i = 0; i < s->ndec; i++)
        ATTN_TRY(attn__dec_layer_fwd(ctx, &s->dec[i], x, mem, B, T, S, tm, mm, tk, mk,
                                     tgt_is_causal, rng, i == s->ndec - 1 ? cross_w : NULL));
    if (s->dec_norm) attn__ln_fwd(&s->dec_final, x, x, B * T);
    return ATTN_OK;
}

/* Shared by the layer and stack entry points: copy src to a working buffer, run, store. */
static attn_status enc_entry(attn_ctx *ctx, const attn_module *m, int is_stack,
                             const attn_tensor *src, const attn_mask *mask,
                             const attn_mask *kpm, int is_causal, const attn_run *run,
                             attn_tensor *out) {
    const attn_transformer_config *c =
        is_stack ? &((const attn__stack *)m->impl)->cfg : &((const attn__enc_layer *)m->impl)->cfg;
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
    if (is_stack) ATTN_TRYG(attn__enc_run(ctx, m->impl, x, B, L, mask, kpm, is_causal, &rng));
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
        is_stack ? &((const attn__stack *)m->impl)->cfg : &((const attn__dec_layer *)m->impl)->cfg;
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
        ATTN_TRYG(attn__dec_run(ctx, m->impl, x, mem, B, T, S, tm, mm, tk, mkpm, tgt_is_causal, &rng, NULL));
    else
        ATTN_TRYG(attn__dec_layer_fwd(ctx, m->impl, x, mem, B, T, S, tm, mm, tk, mkpm,
                                      tgt_is_causal, &rng, NULL));
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
    const attn__stack *s = m->impl;
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
    ATTN_TRYG(attn__enc_run(ctx, s, mem, B, S, src_mask, src_key_padding_mask, 0, &rng));
    ATTN_TRYG(attn__dec_run(ctx, s, x, mem, B, T, S, tgt_mask, memory_mask, tgt_key_padding_mask,
                      memory_key_padding_mask, tgt_is_causal, &rng, NULL));
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
    attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    if (st == ATTN_OK) {
        st = attn__param_reg(ctx, m, "", "pos_emb.weight", &g->pos, 0, 2, max_positions, E, 0);
        attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    }
    if (st == ATTN_OK)
        st = attn__stack_reg(ctx, m, &g->s, cfg, cfg->num_encoder_layers, 0, "layers.", "", "norm",
                                 NULL, 0, NULL);
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
    ATTN_TRYG(attn__enc_run(ctx, &g->s, x, B, T, NULL, NULL, 1, &rng));
    ATTN_TRYG(attn__lin_fwd(ctx, &g->lm_head, x, y, B * T));
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
    attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "proj", &v->proj, patch_dim, E, 1);
    if (st == ATTN_OK) {
        st = attn__param_reg(ctx, m, "", "pos_embed", &v->pos, 0, 3, 1, max_patches + 1, E);
        attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    }
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
        ATTN_TRYG(attn__lin_fwd(ctx, &v->proj, p + b * N * v->P, zb + v->E, N));
        for (int64_t i = 0; i < (N + 1) * v->E; i++) zb[i] += v->pos[i];
    }
    attn__store(zp, z);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* =========================================================================================
 * Backward.  Each block recomputes its forward, keeping the intermediate values it needs and
 * a snapshot of the dropout stream before every dropout site, so the backward draws the same
 * masks; dropout is linear, so its backward is the same masking applied to the gradient.
 * Input gradients are overwritten; parameter gradients accumulate through the gmap.
 * ======================================================================================= */

static void copy_f(float *dst, const float *src, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* forward (ffn_fwd): y = lin2(dropout(act(lin1(x)))).  dx [M, E] overwritten. */
static attn_status ffn_bwd(attn_ctx *ctx, const attn__lin *l1, const attn__lin *l2,
                           const attn__gmap *g, attn_activation act, float p, const float *x,
                           const float *dy, float *dx, int64_t M, attn__rng *rng) {
    int64_t F = l1->out;
    attn__mark mk = attn__ws_mark(ctx);
    float *h, *a, *da;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &h, M, F, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &a, M, F, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &da, M, F, 1, 1));
    ATTN_TRYG(attn__lin_fwd(ctx, l1, x, h, M));
    attn__act_ref(act, h, F, a, F, M, F);
    attn__rng site = *rng;
    attn__dropout(rng, p, a, M * F);
    ATTN_TRYG(attn__linear_bwd(ctx, a, F, l2->weight, dy, l2->out, da, F, attn__g(g, l2->weight),
                         attn__g(g, l2->bias), M, F, l2->out));
    attn__dropout(&site, p, da, M * F);
    attn__act_bwd_ref(act, h, da, da, M * F);
    ATTN_TRYG(attn__linear_bwd(ctx, x, l1->in, l1->weight, da, F, dx, l1->in, attn__g(g, l1->weight),
                         attn__g(g, l1->bias), M, l1->in, F));
done:
    attn__ws_release(ctx, mk);
    return st;
}

static void add3(float *dst, const float *a, const float *b, const float *c, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] += a[i] + b[i] + c[i];
}

/* Encoder layer (see attn__enc_layer_fwd).  x0 [B, L, E] input, dout; dx overwritten. */
static attn_status enc_layer_bwd(attn_ctx *ctx, const attn__enc_layer *l, const attn__gmap *g,
                                 const float *x0, int64_t B, int64_t L, const attn_mask *mask,
                                 const attn_mask *kpm, int is_causal, attn__rng *rng,
                                 const float *dout, float *dx) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, n = B * L * E, M = B * L;
    float p = c->dropout;
    attn__mark mk = attn__ws_mark(ctx);
    float *n1 = NULL, *r1, *x1, *u, *t, *dq, *dk, *dv, *d1;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &r1, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &x1, B, L, E, 1)); /* post-norm: norm1(r1); pre-norm: norm2(r1) */
    ATTN_TRYG(attn__ws_f32(ctx, &u, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dq, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dk, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dv, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d1, B, L, E, 1));
    if (c->norm_first) ATTN_TRYG(attn__ws_f32(ctx, &n1, B, L, E, 1));
    /* recompute */
    const float *ain = x0;
    if (c->norm_first) {
        attn__ln_fwd(&l->norm1, x0, n1, M);
        ain = n1;
    }
    attn__rng r_mha = *rng;
    ATTN_TRYG(attn__mha_fwd(ctx, &l->self_attn, ain, ain, ain, B, L, L, kpm, mask, is_causal, 0,
                            rng, u, NULL));
    attn__rng r_d1 = *rng;
    attn__dropout(rng, p, u, n);
    for (int64_t i = 0; i < n; i++) r1[i] = x0[i] + u[i];
    if (c->norm_first) attn__ln_fwd(&l->norm2, r1, x1, M);
    else attn__ln_fwd(&l->norm1, r1, x1, M);
    attn__rng r_ffn = *rng;
    ATTN_TRYG(ffn_fwd(ctx, &l->linear1, &l->linear2, c->activation, p, x1, u, M, rng));
    attn__rng r_d2 = *rng;
    attn__dropout(rng, p, u, n);
    if (c->norm_first) {
        /* out = r1 + drop2(ffn(x1 = norm2(r1))) */
        copy_f(t, dout, n);
        attn__dropout(&r_d2, p, t, n);
        ATTN_TRYG(ffn_bwd(ctx, &l->linear1, &l->linear2, g, c->activation, p, x1, t, d1, M, &r_ffn));
        ln_bwd(g, &l->norm2, r1, d1, d1, M);
        for (int64_t i = 0; i < n; i++) d1[i] += dout[i]; /* d r1 */
        /* r1 = x0 + drop1(mha(n1 = norm1(x0))) */
        copy_f(t, d1, n);
        attn__dropout(&r_d1, p, t, n);
        ATTN_TRYG(attn__mha_bwd(ctx, &l->self_attn, g, n1, n1, n1, B, L, L, kpm, mask, is_causal,
                                &r_mha, t, dq, dk, dv));
        for (int64_t i = 0; i < n; i++) dq[i] += dk[i] + dv[i];
        ln_bwd(g, &l->norm1, x0, dq, dq, M);
        for (int64_t i = 0; i < n; i++) dx[i] = d1[i] + dq[i];
    } else {
        /* r2 = x1 + drop2(ffn(x1)); out = norm2(r2) */
        for (int64_t i = 0; i < n; i++) u[i] += x1[i]; /* u = r2 */
        ln_bwd(g, &l->norm2, u, dout, d1, M);
        copy_f(t, d1, n);
        attn__dropout(&r_d2, p, t, n);
        ATTN_TRYG(ffn_bwd(ctx, &l->linear1, &l->linear2, g, c->activation, p, x1, t, dq, M, &r_ffn));
        for (int64_t i = 0; i < n; i++) d1[i] += dq[i]; /* d x1 */
        /* x1 = norm1(r1), r1 = x0 + drop1(mha(x0)) */
        ln_bwd(g, &l->norm1, r1, d1, d1, M);
        copy_f(t, d1, n);
        attn__dropout(&r_d1, p, t, n);
        ATTN_TRYG(attn__mha_bwd(ctx, &l->self_attn, g, x0, x0, x0, B, L, L, kpm, mask, is_causal,
                                &r_mha, t, dq, dk, dv));
        copy_f(dx, d1, n);
        add3(dx, dq, dk, dv, n);
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Decoder layer (see attn__dec_layer_fwd).  dx overwritten; dmem [B, S, E] accumulates. */
static attn_status dec_layer_bwd(attn_ctx *ctx, const attn__dec_layer *l, const attn__gmap *g,
                                 const float *x0, const float *mem, int64_t B, int64_t T,
                                 int64_t S, const attn_mask *tm, const attn_mask *mm,
                                 const attn_mask *tk, const attn_mask *mkpm, int tgt_is_causal,
                                 attn__rng *rng, const float *dout, float *dx, float *dmem) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, n = B * T * E, ns = B * S * E, M = B * T;
    float p = c->dropout;
    int pre = c->norm_first;
    attn__mark mk = attn__ws_mark(ctx);
    float *n1, *r1, *n2, *r2, *n3, *u, *t, *dq, *dk, *dv, *d;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &n1, B, T, E, 1)); /* pre: norm1(x0) */
    ATTN_TRYG(attn__ws_f32(ctx, &r1, B, T, E, 1)); /* x0 + sa */
    ATTN_TRYG(attn__ws_f32(ctx, &n2, B, T, E, 1)); /* pre: norm2(r1); post: norm1(r1) = x1 */
    ATTN_TRYG(attn__ws_f32(ctx, &r2, B, T, E, 1)); /* (x1 or r1) + ca */
    ATTN_TRYG(attn__ws_f32(ctx, &n3, B, T, E, 1)); /* pre: norm3(r2); post: norm2(r2) = x2 */
    ATTN_TRYG(attn__ws_f32(ctx, &u, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dq, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dk, B, (T > S ? T : S), E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dv, B, (T > S ? T : S), E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, T, E, 1));
    /* recompute */
    const float *in = x0;
    if (pre) {
        attn__ln_fwd(&l->norm1, x0, n1, M);
        in = n1;
    }
    attn__rng r_sa = *rng;
    ATTN_TRYG(attn__mha_fwd(ctx, &l->self_attn, in, in, in, B, T, T, tk, tm, tgt_is_causal, 0, rng,
                            u, NULL));
    attn__rng r_d1 = *rng;
    attn__dropout(rng, p, u, n);
    for (int64_t i = 0; i < n; i++) r1[i] = x0[i] + u[i];
    attn__ln_fwd(pre ? &l->norm2 : &l->norm1, r1, n2, M);
    const float *base2 = pre ? r1 : n2; /* residual stream entering the cross-attention block */
    attn__rng r_ca = *rng;
    ATTN_TRYG(attn__mha_fwd(ctx, &l->multihead_attn, n2, mem, mem, B, T, S, mkpm, mm, 0, 0, rng,
                            u, NULL));
    attn__rng r_d2 = *rng;
    attn__dropout(rng, p, u, n);
    for (int64_t i = 0; i < n; i++) r2[i] = base2[i] + u[i];
    attn__ln_fwd(pre ? &l->norm3 : &l->norm2, r2, n3, M);
    const float *base3 = pre ? r2 : n3;
    attn__rng r_ff = *rng;
    ATTN_TRYG(ffn_fwd(ctx, &l->linear1, &l->linear2, c->activation, p, n3, u, M, rng));
    attn__rng r_d3 = *rng;
    attn__dropout(rng, p, u, n);
    for (int64_t i = 0; i < n; i++) u[i] += base3[i]; /* r3 = out (pre) or pre-norm3 (post) */

    /* backward: d = gradient of the residual stream, block by block */
    if (pre) {
        copy_f(d, dout, n);
    } else {
        ln_bwd(g, &l->norm3, u, dout, d, M);
    }
    /* feed-forward block: r3 = base3 + drop3(ffn(n3)) */
    copy_f(t, d, n);
    attn__dropout(&r_d3, p, t, n);
    ATTN_TRYG(ffn_bwd(ctx, &l->linear1, &l->linear2, g, c->activation, p, n3, t, dq, M, &r_ff));
    /* dq = d n3 */
    if (pre) {
        ln_bwd(g, &l->norm3, r2, dq, dq, M);
        for (int64_t i = 0; i < n; i++) d[i] += dq[i]; /* d r2 */
    } else {
        for (int64_t i = 0; i < n; i++) d[i] += dq[i]; /* d x2 (= n3) */
        ln_bwd(g, &l->norm2, r2, d, d, M);
    }
    /* cross-attention block: r2 = base2 + drop2(ca(n2, mem)); d = d r2 */
    copy_f(t, d, n);
    attn__dropout(&r_d2, p, t, n);
    ATTN_TRYG(attn__mha_bwd(ctx, &l->multihead_attn, g, n2, mem, mem, B, T, S, mkpm, mm, 0, &r_ca,
                            t, dq, dk, dv));
    for (int64_t i = 0; i < ns; i++) dmem[i] += dk[i] + dv[i];
    /* dq = d n2 */
    if (pre) {
        ln_bwd(g, &l->norm2, r1, dq, dq, M);
        for (int64_t i = 0; i < n; i++) d[i] += dq[i]; /* d r1 */
    } else {
        for (int64_t i = 0; i < n; i++) d[i] += dq[i]; /* d x1 (= n2) */
        ln_bwd(g, &l->norm1, r1, d, d, M);
    }
    /* self-attention block: r1 = x0 + drop1(sa(in)); d = d r1 */
    copy_f(t, d, n);
    attn__dropout(&r_d1, p, t, n);
    ATTN_TRYG(attn__mha_bwd(ctx, &l->self_attn, g, in, in, in, B, T, T, tk, tm, tgt_is_causal,
                            &r_sa, t, dq, dk, dv));
    for (int64_t i = 0; i < n; i++) dq[i] += dk[i] + dv[i]; /* d in */
    if (pre)
        ln_bwd(g, &l->norm1, x0, dq, dq, M);
    for (int64_t i = 0; i < n; i++) dx[i] = d[i] + dq[i];
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Backward of an encoder stack (dec = 0: x [B, L, E], L = T) or a decoder stack (dec = 1:
 * x [B, T, E] over memory [B, S, E]).  Recomputes the forward, saving each layer's input and
 * dropout state, takes the final norm's backward, then the layers' in reverse.  dx is
 * overwritten; dmem (decoder) accumulates.  Masks: m1/m2 = mask/kpm (encoder) or
 * tgt_mask/tgt_kpm (decoder); mm/mkpm = memory_mask/memory_kpm (decoder only). */
static attn_status stack_bwd(attn_ctx *ctx, const attn__stack *s, const attn__gmap *g, int dec,
                             const float *x0, const float *mem, int64_t B, int64_t T, int64_t S,
                             const attn_mask *m1, const attn_mask *m2, const attn_mask *mm,
                             const attn_mask *mkpm, int is_causal, attn__rng *rng,
                             const float *dout, float *dx, float *dmem) {
    int64_t E = s->cfg.d_model, n = B * T * E, N = dec ? s->ndec : s->nenc;
    const attn__ln *fin = dec ? (s->dec_norm ? &s->dec_final : NULL)
                              : (s->enc_norm ? &s->enc_final : NULL);
    attn__mark mk = attn__ws_mark(ctx);
    float *xs, *d, *t;
    attn__rng *rs;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &xs, N + 1, B, T, E));
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, T, E, 1));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)N, sizeof *rs, (void **)&rs));
    copy_f(xs, x0, n);
    for (int64_t i = 0; i < N; i++) {
        float *xi = xs + (i + 1) * n;
        rs[i] = *rng;
        copy_f(xi, xs + i * n, n);
        if (dec)
            ATTN_TRYG(attn__dec_layer_fwd(ctx, &s->dec[i], xi, mem, B, T, S, m1, mm, m2, mkpm,
                                          is_causal, rng, NULL));
        else
            ATTN_TRYG(attn__enc_layer_fwd(ctx, &s->enc[i], xi, B, T, m1, m2, is_causal, rng));
    }
    if (fin)
        ln_bwd(g, fin, xs + N * n, dout, d, B * T);
    else
        copy_f(d, dout, n);
    for (int64_t i = N - 1; i >= 0; i--) {
        if (dec)
            ATTN_TRYG(dec_layer_bwd(ctx, &s->dec[i], g, xs + i * n, mem, B, T, S, m1, mm, m2,
                                    mkpm, is_causal, &rs[i], d, t, dmem));
        else
            ATTN_TRYG(enc_layer_bwd(ctx, &s->enc[i], g, xs + i * n, B, T, m1, m2, is_causal,
                                    &rs[i], d, t));
        copy_f(d, t, n);
    }
    copy_f(dx, d, n);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__enc_stack_bwd(attn_ctx *ctx, const attn__stack *s, const attn__gmap *g,
                                const float *x0, int64_t B, int64_t L, const attn_mask *mask,
                                const attn_mask *kpm, int is_causal, attn__rng *rng,
                                const float *dout, float *dx) {
    return stack_bwd(ctx, s, g, 0, x0, NULL, B, L, 0, mask, kpm, NULL, NULL, is_causal, rng,
                     dout, dx, NULL);
}

attn_status attn__dec_stack_bwd(attn_ctx *ctx, const attn__stack *s, const attn__gmap *g,
                                const float *x0, const float *mem, int64_t B, int64_t T,
                                int64_t S, const attn_mask *tm, const attn_mask *mm,
                                const attn_mask *tk, const attn_mask *mkpm, int tgt_is_causal,
                                attn__rng *rng, const float *dout, float *dx, float *dmem) {
    return stack_bwd(ctx, s, g, 1, x0, mem, B, T, S, tm, tk, mm, mkpm, tgt_is_causal, rng, dout,
                     dx, dmem);
}

/* ---- public backward entry points ------------------------------------------------------ */
attn_status attn_ffn_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                              const attn_run *run, const attn_tensor *dout, attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__FFN, "attn_ffn_backward"));
    const ffn *f = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t E = f->cfg.d_model;
    ATTN_TRY(attn__check(ctx, x, "x", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, dout, "dout", ATTN_F32, 1, 4));
    char s1[96], s2[96];
    int ok = x->ndim == dout->ndim && x->shape[x->ndim - 1] == E;
    for (int d = 0; ok && d < x->ndim; d++) ok = x->shape[d] == dout->shape[d];
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_SHAPE, "feed-forward input %s and dout %s must both be "
                 "[..., %lld]", attn__shape_str(x, s1, sizeof s1),
                 attn__shape_str(dout, s2, sizeof s2), (long long)E);
    if (dx && dx->data) {
        ATTN_TRY(attn__check(ctx, dx, "dx", ATTN_F32, x->ndim, x->ndim));
        ATTN_TRY(attn__check_shape(ctx, dx, "dx", x->ndim, x->shape));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "x", 0));
    ATTN_TRY(attn__check_finite(ctx, dout, "dout", 0));
    int64_t M = attn_tensor_numel(x) / E;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *dy;
    float *d;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__contig(ctx, x, &xp));
    ATTN_TRYG(attn__contig(ctx, dout, &dy));
    ATTN_TRYG(attn__ws_f32(ctx, &d, M, E, 1, 1));
    ATTN_TRYG(ffn_bwd(ctx, &f->w1, &f->w2, &g, f->cfg.activation, f->cfg.dropout, xp, dy, d, M,
                      &rng));
    if (dx && dx->data) attn__store(d, dx);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Encoder layer or stack. */
static attn_status enc_bwd_entry(attn_ctx *ctx, const attn_module *m, int is_stack,
                                 const attn_tensor *src, const attn_mask *mask,
                                 const attn_mask *kpm, int is_causal, const attn_run *run,
                                 const attn_tensor *dout, attn_tensor *dsrc) {
    const attn_transformer_config *c =
        is_stack ? &((const attn__stack *)m->impl)->cfg : &((const attn__enc_layer *)m->impl)->cfg;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t B = 0, L = 0, E = c->d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *x, *dy;
    float *d;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__seq_in(ctx, src, "src", E, &B, &L, &x));
    ATTN_TRYG(attn__seq_in(ctx, dout, "dout", E, &B, &L, &dy));
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, L, E, 1));
    if (dsrc && dsrc->data) {
        int64_t shape[3] = {B, L, E};
        ATTN_TRYG(attn__check(ctx, dsrc, "dsrc", ATTN_F32, 3, 3));
        ATTN_TRYG(attn__check_shape(ctx, dsrc, "dsrc", 3, shape));
    }
    if (is_stack)
        ATTN_TRYG(attn__enc_stack_bwd(ctx, m->impl, &g, x, B, L, mask, kpm, is_causal, &rng, dy, d));
    else
        ATTN_TRYG(enc_layer_bwd(ctx, m->impl, &g, x, B, L, mask, kpm, is_causal, &rng, dy, d));
    if (dsrc && dsrc->data) attn__store(d, dsrc);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_encoder_layer_backward(attn_ctx *ctx, const attn_module *m,
                                        const attn_tensor *src, const attn_mask *src_mask,
                                        const attn_mask *src_key_padding_mask, int is_causal,
                                        const attn_run *run, const attn_tensor *dout,
                                        attn_tensor *dsrc) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ENC_LAYER, "attn_encoder_layer_backward"));
    return enc_bwd_entry(ctx, m, 0, src, src_mask, src_key_padding_mask, is_causal, run, dout,
                         dsrc);
}

attn_status attn_encoder_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                  const attn_mask *mask, const attn_mask *src_key_padding_mask,
                                  int is_causal, const attn_run *run, const attn_tensor *dout,
                                  attn_tensor *dsrc) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ENCODER, "attn_encoder_backward"));
    return enc_bwd_entry(ctx, m, 1, src, mask, src_key_padding_mask, is_causal, run, dout, dsrc);
}

/* Decoder layer or stack. */
static attn_status dec_bwd_entry(attn_ctx *ctx, const attn_module *m, int is_stack,
                                 const attn_tensor *tgt, const attn_tensor *memory,
                                 const attn_mask *tm, const attn_mask *mm, const attn_mask *tk,
                                 const attn_mask *mkpm, int tgt_is_causal, const attn_run *run,
                                 const attn_tensor *dout, attn_tensor *dtgt,
                                 attn_tensor *dmemory) {
    const attn_transformer_config *c =
        is_stack ? &((const attn__stack *)m->impl)->cfg : &((const attn__dec_layer *)m->impl)->cfg;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t B = 0, T = 0, S = 0, E = c->d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *x, *mem, *dy;
    float *d, *dm;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__seq_in(ctx, tgt, "tgt", E, &B, &T, &x));
    ATTN_TRYG(attn__seq_in(ctx, memory, "memory", E, &B, &S, &mem));
    ATTN_TRYG(attn__seq_in(ctx, dout, "dout", E, &B, &T, &dy));
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dm, B, S, E, 1));
    memset(dm, 0, (size_t)(B * S * E) * sizeof(float));
    if (dtgt && dtgt->data) {
        int64_t shape[3] = {B, T, E};
        ATTN_TRYG(attn__check(ctx, dtgt, "dtgt", ATTN_F32, 3, 3));
        ATTN_TRYG(attn__check_shape(ctx, dtgt, "dtgt", 3, shape));
    }
    if (dmemory && dmemory->data) {
        int64_t shape[3] = {B, S, E};
        ATTN_TRYG(attn__check(ctx, dmemory, "dmemory", ATTN_F32, 3, 3));
        ATTN_TRYG(attn__check_shape(ctx, dmemory, "dmemory", 3, shape));
    }
    if (is_stack)
        ATTN_TRYG(attn__dec_stack_bwd(ctx, m->impl, &g, x, mem, B, T, S, tm, mm, tk, mkpm,
                                tgt_is_causal, &rng, dy, d, dm));
    else
        ATTN_TRYG(dec_layer_bwd(ctx, m->impl, &g, x, mem, B, T, S, tm, mm, tk, mkpm,
                                tgt_is_causal, &rng, dy, d, dm));
    if (dtgt && dtgt->data) attn__store(d, dtgt);
    if (dmemory && dmemory->data) attn__store(dm, dmemory);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_decoder_layer_backward(attn_ctx *ctx, const attn_module *m,
                                        const attn_tensor *tgt, const attn_tensor *memory,
                                        const attn_mask *tgt_mask, const attn_mask *memory_mask,
                                        const attn_mask *tgt_key_padding_mask,
                                        const attn_mask *memory_key_padding_mask,
                                        int tgt_is_causal, const attn_run *run,
                                        const attn_tensor *dout, attn_tensor *dtgt,
                                        attn_tensor *dmemory) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__DEC_LAYER, "attn_decoder_layer_backward"));
    return dec_bwd_entry(ctx, m, 0, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                         memory_key_padding_mask, tgt_is_causal, run, dout, dtgt, dmemory);
}

attn_status attn_decoder_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *tgt,
                                  const attn_tensor *memory, const attn_mask *tgt_mask,
                                  const attn_mask *memory_mask,
                                  const attn_mask *tgt_key_padding_mask,
                                  const attn_mask *memory_key_padding_mask, int tgt_is_causal,
                                  const attn_run *run, const attn_tensor *dout,
                                  attn_tensor *dtgt, attn_tensor *dmemory) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__DECODER, "attn_decoder_backward"));
    return dec_bwd_entry(ctx, m, 1, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                         memory_key_padding_mask, tgt_is_causal, run, dout, dtgt, dmemory);
}

attn_status attn_transformer_backward(attn_ctx *ctx, const attn_module *m,
                                      const attn_tensor *src, const attn_tensor *tgt,
                                      const attn_mask *src_mask, const attn_mask *tgt_mask,
                                      const attn_mask *memory_mask,
                                      const attn_mask *src_key_padding_mask,
                                      const attn_mask *tgt_key_padding_mask,
                                      const attn_mask *memory_key_padding_mask,
                                      int tgt_is_causal, const attn_run *run,
                                      const attn_tensor *dout, attn_tensor *dsrc,
                                      attn_tensor *dtgt) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__TRANSFORMER, "attn_transformer_backward"));
    const attn__stack *s = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t B = 0, S = 0, T = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *sp, *tp, *dy;
    float *mem, *dmem, *ds, *dt;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__seq_in(ctx, src, "src", E, &B, &S, &sp));
    ATTN_TRYG(attn__seq_in(ctx, tgt, "tgt", E, &B, &T, &tp));
    ATTN_TRYG(attn__seq_in(ctx, dout, "dout", E, &B, &T, &dy));
    if (dsrc && dsrc->data) {
        int64_t shape[3] = {B, S, E};
        ATTN_TRYG(attn__check(ctx, dsrc, "dsrc", ATTN_F32, 3, 3));
        ATTN_TRYG(attn__check_shape(ctx, dsrc, "dsrc", 3, shape));
    }
    if (dtgt && dtgt->data) {
        int64_t shape[3] = {B, T, E};
        ATTN_TRYG(attn__check(ctx, dtgt, "dtgt", ATTN_F32, 3, 3));
        ATTN_TRYG(attn__check_shape(ctx, dtgt, "dtgt", 3, shape));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &mem, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dmem, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &ds, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dt, B, T, E, 1));
    /* memory = encoder(src); the decoder's dropout stream starts where the encoder's ended */
    attn__rng r_enc = rng;
    copy_f(mem, sp, B * S * E);
    ATTN_TRYG(attn__enc_run(ctx, s, mem, B, S, src_mask, src_key_padding_mask, 0, &rng));
    memset(dmem, 0, (size_t)(B * S * E) * sizeof(float));
    ATTN_TRYG(attn__dec_stack_bwd(ctx, s, &g, tp, mem, B, T, S, tgt_mask, memory_mask,
                            tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, &rng,
                            dy, dt, dmem));
    ATTN_TRYG(attn__enc_stack_bwd(ctx, s, &g, sp, B, S, src_mask, src_key_padding_mask, 0, &r_enc,
                            dmem, ds));
    if (dsrc && dsrc->data) attn__store(ds, dsrc);
    if (dtgt && dtgt->data) attn__store(dt, dtgt);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_gpt_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *ids,
                              const attn_run *run, const attn_tensor *dlogits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__GPT, "attn_gpt_backward"));
    const gpt *gp = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    ATTN_FAIL_IF(!ids || !ids->data, ctx, ATTN_E_INVALID, "ids are missing");
    ATTN_FAIL_IF(ids->dtype != ATTN_I64 && ids->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "ids must be I32 or I64");
    ATTN_TRY(attn__check(ctx, ids, "ids", ids->dtype, 2, 2));
    int64_t B = ids->shape[0], T = ids->shape[1], E = gp->s.cfg.d_model, V = gp->V, n = B * T * E;
    ATTN_FAIL_IF(T > gp->P, ctx, ATTN_E_SHAPE, "sequence length %lld exceeds max_positions %lld",
                 (long long)T, (long long)gp->P);
    ATTN_TRY(attn__check(ctx, dlogits, "dlogits", ATTN_F32, 3, 3));
    int64_t shape[3] = {B, T, V};
    ATTN_TRY(attn__check_shape(ctx, dlogits, "dlogits", 3, shape));
    ATTN_TRY(attn__check_finite(ctx, dlogits, "dlogits", 0));
    attn__mark mk = attn__ws_mark(ctx);
    float *x, *xf, *dx, *d0;
    const float *dl;
    int64_t *idv;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__contig(ctx, dlogits, &dl));
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &xf, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dx, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d0, B, T, E, 1));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(B * T), sizeof *idv, (void **)&idv));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t off = b * ids->stride[0] + t * ids->stride[1];
            int64_t id = ids->dtype == ATTN_I64 ? ((const int64_t *)ids->data)[off]
                                                : ((const int32_t *)ids->data)[off];
            if (id < 0 || id >= V) {
                st = attn__fail(ctx, ATTN_E_INVALID, "token id %lld out of range [0, %lld)",
                                (long long)id, (long long)V);
                goto done;
            }
            idv[b * T + t] = id;
            for (int64_t e = 0; e < E; e++)
                x[(b * T + t) * E + e] = gp->tok[id * E + e] + gp->pos[t * E + e];
        }
    attn__rng r_drop = rng;
    attn__dropout(&rng, gp->s.cfg.dropout, x, n);
    /* the stack's output (after the final norm) feeds lm_head */
    attn__rng r_stack = rng;
    copy_f(xf, x, n);
    ATTN_TRYG(attn__enc_run(ctx, &gp->s, xf, B, T, NULL, NULL, 1, &rng));
    ATTN_TRYG(attn__linear_bwd(ctx, xf, E, gp->lm_head.weight, dl, V, dx, E, attn__g(&g, gp->lm_head.weight),
                         NULL, B * T, E, V));
    ATTN_TRYG(attn__enc_stack_bwd(ctx, &gp->s, &g, x, B, T, NULL, NULL, 1, &r_stack, dx, d0));
    attn__dropout(&r_drop, gp->s.cfg.dropout, d0, n);
    float *gtok = attn__g(&g, gp->tok), *gpos = attn__g(&g, gp->pos);
    for (int64_t r = 0; r < B * T; r++) {
        int64_t t = r % T;
        for (int64_t e = 0; e < E; e++) {
            gtok[idv[r] * E + e] += d0[r * E + e];
            gpos[t * E + e] += d0[r * E + e];
        }
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_vit_embed_backward(attn_ctx *ctx, const attn_module *m,
                                    const attn_tensor *patches, const attn_tensor *dz,
                                    attn_tensor *dpatches) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT_EMBED, "attn_vit_embed_backward"));
    const vit *v = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t B = 0, N = 0, E = v->E;
    attn__mark mk = attn__ws_mark(ctx);
    const float *p, *d;
    float *dp = NULL;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, patches, "patches", v->P, &B, &N, &p));
    if (N > v->N) {
        st = attn__fail(ctx, ATTN_E_SHAPE, "%lld patches exceed max_patches %lld", (long long)N,
                        (long long)v->N);
        goto done;
    }
    {
        int64_t N1 = N + 1;
        ATTN_TRYG(attn__seq_in(ctx, dz, "dz", E, &B, &N1, &d));
    }
    if (dpatches && dpatches->data) {
        ATTN_TRYG(attn__seq_out(ctx, dpatches, "dpatches", B, N, v->P, &dp));
    }
    float *gcls = attn__g(&g, v->cls), *gpos = attn__g(&g, v->pos);
    for (int64_t b = 0; b < B; b++) {
        const float *db = d + b * (N + 1) * E;
        for (int64_t e = 0; e < E; e++) gcls[e] += db[e];
        for (int64_t i = 0; i < (N + 1) * E; i++) gpos[i] += db[i];
        ATTN_TRYG(attn__linear_bwd(ctx, p + b * N * v->P, v->P, v->proj.weight, db + E, E,
                             dp ? dp + b * N * v->P : NULL, v->P, attn__g(&g, v->proj.weight),
                             attn__g(&g, v->proj.bias), N, v->P, E));
    }
    if (dp) attn__seq_out_end(dp, dpatches);
done:
    attn__ws_release(ctx, mk);
    return st;
}
