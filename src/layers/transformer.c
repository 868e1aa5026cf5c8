/* torch.nn.TransformerEncoderLayer / DecoderLayer / TransformerEncoder / TransformerDecoder /
 * Transformer and the position-wise FFN (the GPT on these stacks is src/models/gpt.c, the
 * ViT-style input embedding src/models/vit.c). */
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

/* Whether dropout with probability p draws anything in this call (attn__dropout's rule):
 * without it the residual adds and layer norms fuse into the linears' epilogues. */
static int drops(const attn__rng *rng, float p) {
    return rng && rng->training && p > 0.0f;
}

/* The hidden values of the feed-forward into a record: h = lin1(x), a = dropout(act(h)). */
static attn_status ffn_hidden(attn_ctx *ctx, const attn__lin *l1, attn_activation act, float p,
                              const float *x, int64_t M, attn__rng *rng, attn__ffn_saved *sv) {
    ATTN_TRY(attn__lin_run(ctx, l1, x, NULL, sv->h, M));
    attn__act_fwd(ctx, act, sv->h, sv->a, M, l1->out);
    sv->rng = *rng;
    attn__dropout(rng, p, sv->a, M * l1->out);
    return ATTN_OK;
}

/* y[M, E] = lin2(dropout(act(lin1(x[M, E])))), then oepi (NULL, or lin2's epilogue: a
 * residual, a layer norm); y must not overlap x or oepi->r.  sv: NULL, or a record whose h
 * and a ([M, F]) the forward fills.  Without a record the activation runs in lin1's
 * epilogue (the same bits). */
static attn_status ffn_fwd(attn_ctx *ctx, const attn__lin *l1, const attn__lin *l2,
                           attn_activation act, float p, const float *x, float *y, int64_t M,
                           attn__rng *rng, attn__ffn_saved *sv, const attn__epi *oepi) {
    int64_t F = l1->out;
    attn__mark mk = attn__ws_mark(ctx);
    float *a;
    attn_status st;
    if (sv) {
        ATTN_TRYG(ffn_hidden(ctx, l1, act, p, x, M, rng, sv));
        a = sv->a;
    } else {
        attn__epi e = {ATTN__EPI_ACT, act, NULL, NULL, NULL, NULL};
        ATTN_TRYG(attn__ws_f32(ctx, &a, M, F, 1, 1));
        ATTN_TRYG(attn__lin_run(ctx, l1, x, &e, a, M));
        attn__dropout(rng, p, a, M * F);
    }
    ATTN_TRYG(attn__lin_run(ctx, l2, a, oepi, y, M));
done:
    attn__ws_release(ctx, mk);
    return st;
}

static attn_status ffn_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__lin *l1, int64_t M,
                                   attn__ffn_saved *sv) {
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->h, M, l1->out, 1, 1));
    return attn__rec_f32(ctx, t, &sv->a, M, l1->out, 1, 1);
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}},
                  ia[] = {{x, "x", 0}, {&P, "the module's parameters", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_ffn_forward", oa, 1, ia, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "x", 0));
    int64_t M = attn_tensor_numel(x) / f->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp;
    float *y;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__contig(ctx, x, &xp));
    ATTN_TRYG(attn__ws_f32(ctx, &y, M, f->cfg.d_model, 1, 1));
    ATTN_TRYG(ffn_fwd(ctx, &f->w1, &f->w2, f->cfg.activation, f->cfg.dropout, xp, y, M, &rng,
                      NULL, NULL));
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

/* out[i] = a[i] + b[i]; out may alias a or b. */
static void add2(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* One residual block of a layer, rows [M, E]: r = base + dropout(f(in)), then (post-norm)
 * dst = norm(r); pre-norm blocks have no norm and their output is r.  Without dropout the
 * add and the norm run in the epilogue of f's last linear (res_target says where it writes
 * and with which epilogue); with dropout f writes to scratch and res_end adds.  rstore: where
 * a record keeps r (NULL: not kept).  The bits are the same either way: r = (y + b) + base is
 * base + (y + b), and the norm is attn__ln_fwd's. */
typedef struct res_blk {
    int drop;
    const float *base;
    const attn__ln *norm;        /* post-norm: the norm after the add; pre-norm: NULL */
    float *rstore, *dst, *scratch;
} res_blk;

static float *res_target(const res_blk *b, attn__epi *e) {
    memset(e, 0, sizeof *e);
    if (b->drop) return b->scratch;
    e->r = b->base;
    if (b->norm && !b->rstore) {
        e->kind = ATTN__EPI_RES_LN, e->ln = b->norm;
        return b->dst;
    }
    e->kind = ATTN__EPI_RES;
    return b->rstore ? b->rstore : b->dst;
}

/* After f: site (a record's, or NULL) receives the stream at the dropout; returns r. */
static float *res_end(attn_ctx *ctx, const res_blk *b, attn__rng *rng, float p, int64_t M,
                      int64_t E, attn__rng *site) {
    float *r = b->rstore ? b->rstore : b->dst;
    if (site) *site = *rng;
    if (b->drop) {
        attn__dropout(rng, p, b->scratch, M * E);
        add2(r, b->base, b->scratch, M * E);
    }
    if (b->norm && (b->drop || b->rstore)) attn__ln_fwd(ctx, b->norm, r, b->dst, M);
    return r;
}

/* The last block of both layers, on the stream r: pre-norm out = r + drop(ff(norm(r))) (the
 * norm into nbuf); post-norm (r already normalised) out = norm(r + drop(ff(r))), the sum kept
 * in rstore when a record wants it. */
static attn_status ffn_block(attn_ctx *ctx, const attn_transformer_config *c,
                             const attn__lin *l1, const attn__lin *l2, const attn__ln *norm,
                             int drop, const float *r, float *nbuf, float *rstore, float *out,
                             float *scratch, int64_t M, attn__rng *rng, attn__ffn_saved *ff,
                             attn__rng *site) {
    const int pre = c->norm_first;
    const float *in = r;
    if (pre) {
        attn__ln_fwd(ctx, norm, r, nbuf, M);
        in = nbuf;
    }
    res_blk b = {drop, r, pre ? NULL : norm, pre ? NULL : rstore, out, scratch};
    attn__epi e;
    float *y = res_target(&b, &e);
    ATTN_TRY(ffn_fwd(ctx, l1, l2, c->activation, c->dropout, in, y, M, rng, ff, &e));
    res_end(ctx, &b, rng, c->dropout, M, c->d_model, site);
    return ATTN_OK;
}

attn_status attn__enc_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__enc_layer *l,
                                  int64_t B, int64_t L, attn__enc_saved *sv) {
    int64_t E = l->cfg.d_model;
    memset(sv, 0, sizeof *sv);
    if (l->cfg.norm_first) ATTN_TRY(attn__rec_f32(ctx, t, &sv->n1, B, L, E, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->r1, B, L, E, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->x1, B, L, E, 1));
    if (!l->cfg.norm_first) ATTN_TRY(attn__rec_f32(ctx, t, &sv->r2, B, L, E, 1));
    ATTN_TRY(attn__mha_saved_alloc(ctx, t, &l->self_attn, B, L, L, 1, &sv->sa));
    return ffn_saved_alloc(ctx, t, &l->linear1, B * L, &sv->ff);
}

/* norm_first:  x = x + sa(norm1(x));  x = x + ff(norm2(x))
 * otherwise:   x = norm1(x + sa(x));  x = norm2(x + ff(x))
 * (res_blk: without dropout the adds and norms run in the epilogues of out_proj and linear2).
 * Without a record the intermediate values live in workspace buffers. */
attn_status attn__enc_layer_fwd(attn_ctx *ctx, const attn__enc_layer *l, const float *x,
                                float *out, int64_t B, int64_t L, const attn_mask *mask,
                                const attn_mask *kpm, int is_causal, attn__rng *rng,
                                attn__enc_saved *sv) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, M = B * L;
    int pre = c->norm_first, drop = drops(rng, c->dropout);
    attn__mark mk = attn__ws_mark(ctx);
    float *t = NULL, *u, *v = NULL, *y;
    const float *in = x, *r1;
    attn__epi e;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &u, B, L, E, 1));
    if (drop) ATTN_TRYG(attn__ws_f32(ctx, &v, B, L, E, 1));
    if (!sv && pre) ATTN_TRYG(attn__ws_f32(ctx, &t, B, L, E, 1));
    /* self-attention block */
    if (pre) {
        float *n1 = sv ? sv->n1 : t;
        attn__ln_fwd(ctx, &l->norm1, x, n1, M);
        in = n1;
    }
    res_blk b1 = {drop, x, pre ? NULL : &l->norm1, sv ? sv->r1 : NULL, u, v};
    if (!pre && sv) b1.dst = sv->x1;
    y = res_target(&b1, &e);
    ATTN_TRYG(attn__mha_fwd(ctx, &l->self_attn, in, in, in, B, L, L, kpm, mask, is_causal, 0,
                            rng, y, NULL, sv ? &sv->sa : NULL, &e));
    r1 = res_end(ctx, &b1, rng, c->dropout, M, E, sv ? &sv->d1 : NULL);
    /* feed-forward block (pre-norm: its input x1 = norm2(r1)) */
    ATTN_TRYG(ffn_block(ctx, c, &l->linear1, &l->linear2, &l->norm2, drop, pre ? r1 : b1.dst,
                        sv ? sv->x1 : t, sv ? sv->r2 : NULL, out, v, M, rng,
                        sv ? &sv->ff : NULL, sv ? &sv->d2 : NULL));
    if (sv) sv->x0 = x;
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

attn_status attn__dec_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__dec_layer *l,
                                  int64_t B, int64_t T, int64_t S, attn__dec_saved *sv) {
    int64_t E = l->cfg.d_model;
    memset(sv, 0, sizeof *sv);
    if (l->cfg.norm_first) ATTN_TRY(attn__rec_f32(ctx, t, &sv->n1, B, T, E, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->r1, B, T, E, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->n2, B, T, E, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->r2, B, T, E, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->n3, B, T, E, 1));
    if (!l->cfg.norm_first) ATTN_TRY(attn__rec_f32(ctx, t, &sv->r3, B, T, E, 1));
    ATTN_TRY(attn__mha_saved_alloc(ctx, t, &l->self_attn, B, T, T, 1, &sv->sa));
    ATTN_TRY(attn__mha_saved_alloc(ctx, t, &l->multihead_attn, B, T, S, 0, &sv->ca));
    return ffn_saved_alloc(ctx, t, &l->linear1, B * T, &sv->ff);
}

attn_status attn__dec_layer_fwd(attn_ctx *ctx, const attn__dec_layer *l, const float *x,
                                float *out, const float *memory, int64_t B, int64_t T, int64_t S,
                                const attn_mask *tgt_mask, const attn_mask *memory_mask,
                                const attn_mask *tgt_kpm, const attn_mask *memory_kpm,
                                int tgt_is_causal, attn__rng *rng, float *cross_w,
                                attn__dec_saved *sv) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, M = B * T;
    int pre = c->norm_first, drop = drops(rng, c->dropout);
    attn__mark mk = attn__ws_mark(ctx);
    float *t = NULL, *u = NULL, *w = NULL, *v = NULL, *y;
    const float *in = x, *r;
    attn__epi e;
    attn_status st;
    if (!sv) {
        ATTN_TRYG(attn__ws_f32(ctx, &u, B, T, E, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &t, B, T, E, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &w, B, T, E, 1));
    }
    if (drop) ATTN_TRYG(attn__ws_f32(ctx, &v, B, T, E, 1));
    /* self-attention block.  Buffers without a record: pre-norm n1, n2, n3 in t and r1, r2 in
     * u, w; post-norm n2 in u, n3 in t */
    if (pre) {
        float *n1 = sv ? sv->n1 : t;
        attn__ln_fwd(ctx, &l->norm1, x, n1, M);
        in = n1;
    }
    res_blk b1 = {drop, x, pre ? NULL : &l->norm1, sv ? sv->r1 : NULL, sv ? sv->n2 : u, v};
    y = res_target(&b1, &e);
    ATTN_TRYG(attn__mha_fwd(ctx, &l->self_attn, in, in, in, B, T, T, tgt_kpm, tgt_mask,
                            tgt_is_causal, 0, rng, y, NULL, sv ? &sv->sa : NULL, &e));
    r = res_end(ctx, &b1, rng, c->dropout, M, E, sv ? &sv->d1 : NULL);
    /* cross-attention block: queries from the stream, keys and values from memory */
    const float *n2 = b1.dst;
    if (pre) {
        float *p2 = sv ? sv->n2 : t;
        attn__ln_fwd(ctx, &l->norm2, r, p2, M);
        n2 = p2;
    }
    res_blk b2 = {drop, pre ? r : n2, pre ? NULL : &l->norm2, sv ? sv->r2 : NULL,
                  sv ? sv->n3 : pre ? w : t, v};
    y = res_target(&b2, &e);
    ATTN_TRYG(attn__mha_fwd(ctx, &l->multihead_attn, n2, memory, memory, B, T, S, memory_kpm,
                            memory_mask, 0, 1, rng, y, cross_w, sv ? &sv->ca : NULL, &e));
    r = res_end(ctx, &b2, rng, c->dropout, M, E, sv ? &sv->d2 : NULL);
    /* feed-forward block (pre-norm: its input n3 = norm3(r2)) */
    ATTN_TRYG(ffn_block(ctx, c, &l->linear1, &l->linear2, &l->norm3, drop, pre ? r : b2.dst,
                        sv ? sv->n3 : t, sv ? sv->r3 : NULL, out, v, M, rng,
                        sv ? &sv->ff : NULL, sv ? &sv->d3 : NULL));
    if (sv) sv->x0 = x, sv->mem = memory;
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- module wrappers ----------------------------------------------------------------- */

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
    return attn__module_done(ctx, m, st, out);
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
        ATTN_TRY(attn__enc_layer_fwd(ctx, &s->enc[i], x, x, B, L, mask, kpm, is_causal, rng,
                                     NULL));
    if (s->enc_norm) attn__ln_fwd(ctx, &s->enc_final, x, x, B * L);
    return ATTN_OK;
}

attn_status attn__dec_run(attn_ctx *ctx, const attn__stack *s, float *x, const float *mem,
                           int64_t B, int64_t T, int64_t S, const attn_mask *tm,
                           const attn_mask *mm, const attn_mask *tk, const attn_mask *mk,
                           int tgt_is_causal, attn__rng *rng, float *cross_w) {
    for (int64_t i = 0; i < s->ndec; i++)
        ATTN_TRY(attn__dec_layer_fwd(ctx, &s->dec[i], x, x, mem, B, T, S, tm, mm, tk, mk,
                                     tgt_is_causal, rng, i == s->ndec - 1 ? cross_w : NULL,
                                     NULL));
    if (s->dec_norm) attn__ln_fwd(ctx, &s->dec_final, x, x, B * T);
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}},
                  ia[] = {{src, "src", 0}, {attn__mask_t(mask), "mask", 0},
                          {attn__mask_t(kpm), "src_key_padding_mask", 0},
                          {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(
            ctx, is_stack ? "attn_encoder_forward" : "attn_encoder_layer_forward", oa, 1, ia, 4));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, L, E, 1));
    memcpy(x, in, (size_t)(B * L * E) * sizeof(float));
    if (is_stack) ATTN_TRYG(attn__enc_run(ctx, m->impl, x, B, L, mask, kpm, is_causal, &rng));
    else ATTN_TRYG(attn__enc_layer_fwd(ctx, m->impl, x, x, B, L, mask, kpm, is_causal, &rng,
                                       NULL));
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}},
                  ia[] = {{tgt, "tgt", 0}, {memory, "memory", 0}, {attn__mask_t(tm), "tgt_mask", 0},
                          {attn__mask_t(mm), "memory_mask", 0},
                          {attn__mask_t(tk), "tgt_key_padding_mask", 0},
                          {attn__mask_t(mkpm), "memory_key_padding_mask", 0},
                          {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(
            ctx, is_stack ? "attn_decoder_forward" : "attn_decoder_layer_forward", oa, 1, ia, 7));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, T, E, 1));
    memcpy(x, in, (size_t)(B * T * E) * sizeof(float));
    if (is_stack)
        ATTN_TRYG(attn__dec_run(ctx, m->impl, x, mem, B, T, S, tm, mm, tk, mkpm, tgt_is_causal, &rng, NULL));
    else
        ATTN_TRYG(attn__dec_layer_fwd(ctx, m->impl, x, x, mem, B, T, S, tm, mm, tk, mkpm,
                                      tgt_is_causal, &rng, NULL, NULL));
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}},
                  ia[] = {{src, "src", 0},
                          {tgt, "tgt", 0},
                          {attn__mask_t(src_mask), "src_mask", 0},
                          {attn__mask_t(tgt_mask), "tgt_mask", 0},
                          {attn__mask_t(memory_mask), "memory_mask", 0},
                          {attn__mask_t(src_key_padding_mask), "src_key_padding_mask", 0},
                          {attn__mask_t(tgt_key_padding_mask), "tgt_key_padding_mask", 0},
                          {attn__mask_t(memory_key_padding_mask), "memory_key_padding_mask", 0},
                          {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_transformer_forward", oa, 1, ia, 9));
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

/* =========================================================================================
 * Backward.  Each block's backward reads the record its forward filled (attn__enc_saved, ...):
 * the intermediate values and a snapshot of the dropout stream before every dropout site, so
 * that the backward draws the same masks; dropout is linear, so its backward is the same
 * masking applied to the gradient.  The recomputing backwards run the forward again into a
 * record in the workspace first.  Input gradients are overwritten; parameter gradients
 * accumulate through the gmap.
 * ======================================================================================= */

static void copy_f(float *dst, const float *src, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* forward (ffn_fwd): y = lin2(dropout(act(lin1(x)))) with record sv.  dx [M, E] overwritten. */
static attn_status ffn_bwd_saved(attn_ctx *ctx, const attn__lin *l1, const attn__lin *l2,
                                 const attn__gmap *g, attn_activation act, float p,
                                 const attn__ffn_saved *sv, const float *x, const float *dy,
                                 float *dx, int64_t M) {
    int64_t F = l1->out;
    attn__mark mk = attn__ws_mark(ctx);
    float *da;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &da, M, F, 1, 1));
    attn__rng site = sv->rng;
    ATTN_TRYG(attn__linear_bwd(ctx, sv->a, F, l2->weight, dy, l2->out, da, F,
                               attn__g(g, l2->weight), attn__g(g, l2->bias), M, F, l2->out));
    attn__dropout(&site, p, da, M * F);
    attn__act_bwd_ref(act, sv->h, da, da, M * F);
    ATTN_TRYG(attn__linear_bwd(ctx, x, l1->in, l1->weight, da, F, dx, l1->in,
                               attn__g(g, l1->weight), attn__g(g, l1->bias), M, l1->in, F));
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* The same, recomputing h and a from x and the stream (lin2 itself is not needed). */
static attn_status ffn_bwd(attn_ctx *ctx, const attn__lin *l1, const attn__lin *l2,
                           const attn__gmap *g, attn_activation act, float p, const float *x,
                           const float *dy, float *dx, int64_t M, attn__rng *rng) {
    attn__mark mk = attn__ws_mark(ctx);
    attn__ffn_saved sv;
    attn_status st;
    ATTN_TRYG(ffn_saved_alloc(ctx, NULL, l1, M, &sv));
    ATTN_TRYG(ffn_hidden(ctx, l1, act, p, x, M, rng, &sv));
    ATTN_TRYG(ffn_bwd_saved(ctx, l1, l2, g, act, p, &sv, x, dy, dx, M));
done:
    attn__ws_release(ctx, mk);
    return st;
}

static void add3(float *dst, const float *a, const float *b, const float *c, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] += a[i] + b[i] + c[i];
}

/* Encoder layer from its record (see attn__enc_saved).  dout [B, L, E]; dx overwritten. */
static attn_status enc_layer_bwd_saved(attn_ctx *ctx, const attn__enc_layer *l,
                                       const attn__gmap *g, const attn__enc_saved *sv,
                                       int64_t B, int64_t L, const float *dout, float *dx) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, n = B * L * E, M = B * L;
    float p = c->dropout;
    attn__mark mk = attn__ws_mark(ctx);
    float *t, *dq, *dk, *dv, *d1;
    attn__rng r;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dq, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dk, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dv, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d1, B, L, E, 1));
    if (c->norm_first) {
        /* out = r1 + drop2(ffn(x1 = norm2(r1))) */
        copy_f(t, dout, n);
        r = sv->d2;
        attn__dropout(&r, p, t, n);
        ATTN_TRYG(ffn_bwd_saved(ctx, &l->linear1, &l->linear2, g, c->activation, p, &sv->ff,
                                sv->x1, t, d1, M));
        ln_bwd(g, &l->norm2, sv->r1, d1, d1, M);
        for (int64_t i = 0; i < n; i++) d1[i] += dout[i]; /* d r1 */
        /* r1 = x0 + drop1(mha(n1 = norm1(x0))) */
        copy_f(t, d1, n);
        r = sv->d1;
        attn__dropout(&r, p, t, n);
        ATTN_TRYG(attn__mha_bwd_saved(ctx, &l->self_attn, g, &sv->sa, sv->n1, sv->n1, sv->n1, B,
                                      L, L, t, dq, dk, dv));
        for (int64_t i = 0; i < n; i++) dq[i] += dk[i] + dv[i];
        ln_bwd(g, &l->norm1, sv->x0, dq, dq, M);
        for (int64_t i = 0; i < n; i++) dx[i] = d1[i] + dq[i];
    } else {
        /* r2 = x1 + drop2(ffn(x1)); out = norm2(r2) */
        ln_bwd(g, &l->norm2, sv->r2, dout, d1, M);
        copy_f(t, d1, n);
        r = sv->d2;
        attn__dropout(&r, p, t, n);
        ATTN_TRYG(ffn_bwd_saved(ctx, &l->linear1, &l->linear2, g, c->activation, p, &sv->ff,
                                sv->x1, t, dq, M));
        for (int64_t i = 0; i < n; i++) d1[i] += dq[i]; /* d x1 */
        /* x1 = norm1(r1), r1 = x0 + drop1(mha(x0)) */
        ln_bwd(g, &l->norm1, sv->r1, d1, d1, M);
        copy_f(t, d1, n);
        r = sv->d1;
        attn__dropout(&r, p, t, n);
        ATTN_TRYG(attn__mha_bwd_saved(ctx, &l->self_attn, g, &sv->sa, sv->x0, sv->x0, sv->x0, B,
                                      L, L, t, dq, dk, dv));
        copy_f(dx, d1, n);
        add3(dx, dq, dk, dv, n);
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Encoder layer, recomputing its forward from x0 [B, L, E] and the stream. */
static attn_status enc_layer_bwd(attn_ctx *ctx, const attn__enc_layer *l, const attn__gmap *g,
                                 const float *x0, int64_t B, int64_t L, const attn_mask *mask,
                                 const attn_mask *kpm, int is_causal, attn__rng *rng,
                                 const float *dout, float *dx) {
    attn__mark mk = attn__ws_mark(ctx);
    attn__enc_saved sv;
    float *out;
    attn_status st;
    ATTN_TRYG(attn__enc_saved_alloc(ctx, NULL, l, B, L, &sv));
    ATTN_TRYG(attn__ws_f32(ctx, &out, B, L, l->cfg.d_model, 1));
    ATTN_TRYG(attn__enc_layer_fwd(ctx, l, x0, out, B, L, mask, kpm, is_causal, rng, &sv));
    ATTN_TRYG(enc_layer_bwd_saved(ctx, l, g, &sv, B, L, dout, dx));
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Decoder layer from its record (see attn__dec_saved).  dx overwritten; dmem [B, S, E]
 * accumulates. */
static attn_status dec_layer_bwd_saved(attn_ctx *ctx, const attn__dec_layer *l,
                                       const attn__gmap *g, const attn__dec_saved *sv,
                                       int64_t B, int64_t T, int64_t S, const float *dout,
                                       float *dx, float *dmem) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, n = B * T * E, ns = B * S * E, M = B * T;
    float p = c->dropout;
    int pre = c->norm_first;
    attn__mark mk = attn__ws_mark(ctx);
    float *t, *dq, *dk, *dv, *d;
    attn__rng r;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dq, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dk, B, (T > S ? T : S), E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dv, B, (T > S ? T : S), E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, T, E, 1));
    /* d = gradient of the residual stream, block by block */
    if (pre) copy_f(d, dout, n);
    else ln_bwd(g, &l->norm3, sv->r3, dout, d, M);
    /* feed-forward block: r3 = base3 + drop3(ffn(n3)) */
    copy_f(t, d, n);
    r = sv->d3;
    attn__dropout(&r, p, t, n);
    ATTN_TRYG(ffn_bwd_saved(ctx, &l->linear1, &l->linear2, g, c->activation, p, &sv->ff, sv->n3,
                            t, dq, M));
    /* dq = d n3 */
    if (pre) {
        ln_bwd(g, &l->norm3, sv->r2, dq, dq, M);
        for (int64_t i = 0; i < n; i++) d[i] += dq[i]; /* d r2 */
    } else {
        for (int64_t i = 0; i < n; i++) d[i] += dq[i]; /* d x2 (= n3) */
        ln_bwd(g, &l->norm2, sv->r2, d, d, M);
    }
    /* cross-attention block: r2 = base2 + drop2(ca(n2, mem)); d = d r2 */
    copy_f(t, d, n);
    r = sv->d2;
    attn__dropout(&r, p, t, n);
    ATTN_TRYG(attn__mha_bwd_saved(ctx, &l->multihead_attn, g, &sv->ca, sv->n2, sv->mem, sv->mem,
                                  B, T, S, t, dq, dk, dv));
    for (int64_t i = 0; i < ns; i++) dmem[i] += dk[i] + dv[i];
    /* dq = d n2 */
    if (pre) {
        ln_bwd(g, &l->norm2, sv->r1, dq, dq, M);
        for (int64_t i = 0; i < n; i++) d[i] += dq[i]; /* d r1 */
    } else {
        for (int64_t i = 0; i < n; i++) d[i] += dq[i]; /* d x1 (= n2) */
        ln_bwd(g, &l->norm1, sv->r1, d, d, M);
    }
    /* self-attention block: r1 = x0 + drop1(sa(in)); d = d r1 */
    copy_f(t, d, n);
    r = sv->d1;
    attn__dropout(&r, p, t, n);
    const float *in = pre ? sv->n1 : sv->x0;
    ATTN_TRYG(attn__mha_bwd_saved(ctx, &l->self_attn, g, &sv->sa, in, in, in, B, T, T, t, dq, dk,
                                  dv));
    for (int64_t i = 0; i < n; i++) dq[i] += dk[i] + dv[i]; /* d in */
    if (pre) ln_bwd(g, &l->norm1, sv->x0, dq, dq, M);
    for (int64_t i = 0; i < n; i++) dx[i] = d[i] + dq[i];
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Decoder layer, recomputing its forward from x0 [B, T, E], mem and the stream. */
static attn_status dec_layer_bwd(attn_ctx *ctx, const attn__dec_layer *l, const attn__gmap *g,
                                 const float *x0, const float *mem, int64_t B, int64_t T,
                                 int64_t S, const attn_mask *tm, const attn_mask *mm,
                                 const attn_mask *tk, const attn_mask *mkpm, int tgt_is_causal,
                                 attn__rng *rng, const float *dout, float *dx, float *dmem) {
    attn__mark mk = attn__ws_mark(ctx);
    attn__dec_saved sv;
    float *out;
    attn_status st;
    ATTN_TRYG(attn__dec_saved_alloc(ctx, NULL, l, B, T, S, &sv));
    ATTN_TRYG(attn__ws_f32(ctx, &out, B, T, l->cfg.d_model, 1));
    ATTN_TRYG(attn__dec_layer_fwd(ctx, l, x0, out, mem, B, T, S, tm, mm, tk, mkpm, tgt_is_causal,
                                  rng, NULL, &sv));
    ATTN_TRYG(dec_layer_bwd_saved(ctx, l, g, &sv, B, T, S, dout, dx, dmem));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__stack_fwd_rec(attn_ctx *ctx, const attn__stack *s, int dec, int ckpt,
                                attn__tape *t, const float *x, const float *mem, int64_t B,
                                int64_t T, int64_t S, const attn_mask *m1, const attn_mask *m2,
                                const attn_mask *mm, const attn_mask *mk, int is_causal,
                                attn__rng *rng, attn__stack_saved *rec) {
    int64_t E = s->cfg.d_model, n = B * T * E, N = dec ? s->ndec : s->nenc;
    const attn__ln *fin = dec ? (s->dec_norm ? &s->dec_final : NULL)
                              : (s->enc_norm ? &s->enc_final : NULL);
    memset(rec, 0, sizeof *rec);
    rec->decoder = dec, rec->ckpt = ckpt, rec->is_causal = is_causal;
    rec->N = N, rec->B = B, rec->T = T, rec->S = S;
    if (m1) rec->m1 = *m1;
    if (m2) rec->m2 = *m2;
    if (mm) rec->mm = *mm;
    if (mk) rec->mk = *mk;
    rec->mem = mem;
    ATTN_TRY(attn__rec_f32(ctx, t, &rec->xs, N + 1, B, T, E));
    ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)N, sizeof *rec->rs, (void **)&rec->rs));
    if (!ckpt && dec)
        ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)N, sizeof *rec->dec, (void **)&rec->dec));
    if (!ckpt && !dec)
        ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)N, sizeof *rec->enc, (void **)&rec->enc));
    copy_f(rec->xs, x, n);
    for (int64_t i = 0; i < N; i++) {
        const float *xi = rec->xs + i * n;
        float *xo = rec->xs + (i + 1) * n;
        rec->rs[i] = *rng;
        if (dec) {
            attn__dec_saved *sv = ckpt ? NULL : &rec->dec[i];
            if (sv) ATTN_TRY(attn__dec_saved_alloc(ctx, t, &s->dec[i], B, T, S, sv));
            ATTN_TRY(attn__dec_layer_fwd(ctx, &s->dec[i], xi, xo, mem, B, T, S, m1, mm, m2, mk,
                                         is_causal, rng, NULL, sv));
        } else {
            attn__enc_saved *sv = ckpt ? NULL : &rec->enc[i];
            if (sv) ATTN_TRY(attn__enc_saved_alloc(ctx, t, &s->enc[i], B, T, sv));
            ATTN_TRY(attn__enc_layer_fwd(ctx, &s->enc[i], xi, xo, B, T, m1, m2, is_causal, rng,
                                         sv));
        }
    }
    rec->out = rec->xs + N * n;
    if (fin) {
        ATTN_TRY(attn__rec_f32(ctx, t, &rec->out, B, T, E, 1));
        attn__ln_fwd(ctx, fin, rec->xs + N * n, rec->out, B * T);
    }
    return ATTN_OK;
}

/* The final norm's backward, then the layers' in reverse: from their records, or (ckpt) each
 * layer's forward again from its input and stream, then its backward. */
attn_status attn__stack_bwd_rec(attn_ctx *ctx, const attn__stack *s, const attn__gmap *g,
                                const attn__stack_saved *rec, const float *dout, float *dx,
                                float *dmem) {
    int dec = rec->decoder;
    int64_t B = rec->B, T = rec->T, S = rec->S, N = rec->N, n = B * T * s->cfg.d_model;
    const attn__ln *fin = dec ? (s->dec_norm ? &s->dec_final : NULL)
                              : (s->enc_norm ? &s->enc_final : NULL);
    const attn_mask *m1 = attn__mask_opt(&rec->m1), *m2 = attn__mask_opt(&rec->m2),
                    *mm = attn__mask_opt(&rec->mm), *mk = attn__mask_opt(&rec->mk);
    attn__mark mark = attn__ws_mark(ctx);
    float *d, *t;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, T, s->cfg.d_model, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, T, s->cfg.d_model, 1));
    if (fin) ln_bwd(g, fin, rec->xs + N * n, dout, d, B * T);
    else copy_f(d, dout, n);
    for (int64_t i = N - 1; i >= 0; i--) {
        const float *xi = rec->xs + i * n;
        attn__rng r = rec->rs[i];
        if (dec && rec->ckpt)
            ATTN_TRYG(dec_layer_bwd(ctx, &s->dec[i], g, xi, rec->mem, B, T, S, m1, mm, m2, mk,
                                    rec->is_causal, &r, d, t, dmem));
        else if (dec)
            ATTN_TRYG(dec_layer_bwd_saved(ctx, &s->dec[i], g, &rec->dec[i], B, T, S, d, t, dmem));
        else if (rec->ckpt)
            ATTN_TRYG(enc_layer_bwd(ctx, &s->enc[i], g, xi, B, T, m1, m2, rec->is_causal, &r, d,
                                    t));
        else
            ATTN_TRYG(enc_layer_bwd_saved(ctx, &s->enc[i], g, &rec->enc[i], B, T, d, t));
        float *sw = d;
        d = t, t = sw;
    }
    copy_f(dx, d, n);
done:
    attn__ws_release(ctx, mark);
    return st;
}

/* The recomputing stack backwards: a checkpointed record in the workspace, then its
 * backward. */
static attn_status enc_stack_bwd(attn_ctx *ctx, const attn__stack *s, const attn__gmap *g,
                                 const float *x0, int64_t B, int64_t L, const attn_mask *mask,
                                 const attn_mask *kpm, int is_causal, attn__rng *rng,
                                 const float *dout, float *dx) {
    attn__mark mk = attn__ws_mark(ctx);
    attn__stack_saved rec;
    attn_status st;
    ATTN_TRYG(attn__stack_fwd_rec(ctx, s, 0, 1, NULL, x0, NULL, B, L, 0, mask, kpm, NULL, NULL,
                                  is_causal, rng, &rec));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, s, g, &rec, dout, dx, NULL));
done:
    attn__ws_release(ctx, mk);
    return st;
}

static attn_status dec_stack_bwd(attn_ctx *ctx, const attn__stack *s, const attn__gmap *g,
                                 const float *x0, const float *mem, int64_t B, int64_t T,
                                 int64_t S, const attn_mask *tm, const attn_mask *mm,
                                 const attn_mask *tk, const attn_mask *mkpm, int tgt_is_causal,
                                 attn__rng *rng, const float *dout, float *dx, float *dmem) {
    attn__mark mk = attn__ws_mark(ctx);
    attn__stack_saved rec;
    attn_status st;
    ATTN_TRYG(attn__stack_fwd_rec(ctx, s, 1, 1, NULL, x0, mem, B, T, S, tm, tk, mm, mkpm,
                                  tgt_is_causal, rng, &rec));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, s, g, &rec, dout, dx, dmem));
done:
    attn__ws_release(ctx, mk);
    return st;
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dx, "dx", 0}},
                  ia[] = {{x, "x", 0}, {dout, "dout", 0}, {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_ffn_backward", oa, 1, ia, 4));
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dsrc, "dsrc", 0}},
                  ia[] = {{src, "src", 0},
                          {attn__mask_t(mask), "mask", 0},
                          {attn__mask_t(kpm), "src_key_padding_mask", 0},
                          {dout, "dout", 0},
                          {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(
            ctx, is_stack ? "attn_encoder_backward" : "attn_encoder_layer_backward", oa, 1, ia,
            6));
    }
    if (is_stack)
        ATTN_TRYG(enc_stack_bwd(ctx, m->impl, &g, x, B, L, mask, kpm, is_causal, &rng, dy, d));
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dtgt, "dtgt", 0}, {dmemory, "dmemory", 0}},
                  ia[] = {{tgt, "tgt", 0},
                          {memory, "memory", 0},
                          {attn__mask_t(tm), "tgt_mask", 0},
                          {attn__mask_t(mm), "memory_mask", 0},
                          {attn__mask_t(tk), "tgt_key_padding_mask", 0},
                          {attn__mask_t(mkpm), "memory_key_padding_mask", 0},
                          {dout, "dout", 0},
                          {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(
            ctx, is_stack ? "attn_decoder_backward" : "attn_decoder_layer_backward", oa, 2, ia,
            9));
    }
    if (is_stack)
        ATTN_TRYG(dec_stack_bwd(ctx, m->impl, &g, x, mem, B, T, S, tm, mm, tk, mkpm,
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

/* ---- training forwards and saved backwards ------------------------------------------------ */

/* A layer module as a stack of one layer without final norm, so that layers and stacks share
 * the records. */
static const attn__stack *as_stack(const attn_module *m, attn__stack *one) {
    if (m->kind == ATTN__ENCODER || m->kind == ATTN__DECODER) return m->impl;
    memset(one, 0, sizeof *one);
    if (m->kind == ATTN__ENC_LAYER) {
        one->enc = m->impl;
        one->cfg = one->enc->cfg;
        one->nenc = 1;
    } else {
        one->dec = m->impl;
        one->cfg = one->dec->cfg;
        one->ndec = 1;
    }
    return one;
}

/* Record of an encoder or decoder layer or stack (in the tape). */
typedef struct seq_rec {
    attn__stack_saved st; /* its masks and memory are copies in the tape */
} seq_rec;

static attn_status enc_train_entry(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                   const attn_mask *mask, const attn_mask *kpm, int is_causal,
                                   const attn_run *run, attn_tensor *out, attn_saved *saved) {
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "saved is NULL");
    attn__saved_begin(saved);
    attn__stack one;
    const attn__stack *s = as_stack(m, &one);
    int64_t B = 0, L = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    attn__tape *t = &saved->tape;
    const float *in;
    seq_rec *rec;
    attn_mask cm, ck;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__seq_in(ctx, src, "src", E, &B, &L, &in));
    ATTN_TRYG(attn__check(ctx, out, "output", ATTN_F32, 3, 3));
    {
        int64_t shape[3] = {B, L, E};
        ATTN_TRYG(attn__check_shape(ctx, out, "output", 3, shape));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}},
                  ia[] = {{src, "src", 0}, {attn__mask_t(mask), "mask", 0},
                          {attn__mask_t(kpm), "src_key_padding_mask", 0},
                          {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(ctx,
                                      m->kind == ATTN__ENCODER ? "attn_encoder_forward_train"
                                                               : "attn_encoder_layer_forward_train",
                                      oa, 1, ia, 4));
    }
    ATTN_TRYG(attn__tape_alloc(ctx, t, 1, sizeof *rec, (void **)&rec));
    ATTN_TRYG(attn__saved_mask(ctx, t, mask, "src_mask", &cm));
    ATTN_TRYG(attn__saved_mask(ctx, t, kpm, "src_key_padding_mask", &ck));
    ATTN_TRYG(attn__stack_fwd_rec(ctx, s, 0, (saved->flags & ATTN_SAVED_CHECKPOINT) != 0, t, in,
                                  NULL, B, L, 0, attn__mask_opt(&cm), attn__mask_opt(&ck), NULL,
                                  NULL, is_causal, &rng, &rec->st));
    attn__store(rec->st.out, out);
    attn__saved_end(saved, m, rec);
done:
    attn__ws_release(ctx, mk);
    return st;
}

static attn_status enc_bwd_saved_entry(attn_ctx *ctx, const attn_module *m, const char *fn,
                                       const attn_saved *saved, const attn_tensor *dout,
                                       attn_tensor *dsrc) {
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    seq_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m, fn, (void **)&rec));
    attn__stack one;
    const attn__stack *s = as_stack(m, &one);
    int64_t B = rec->st.B, L = rec->st.T, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *dy;
    float *d;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, dout, "dout", E, &B, &L, &dy));
    if (dsrc && dsrc->data) {
        int64_t shape[3] = {B, L, E};
        ATTN_TRYG(attn__check(ctx, dsrc, "dsrc", ATTN_F32, 3, 3));
        ATTN_TRYG(attn__check_shape(ctx, dsrc, "dsrc", 3, shape));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dsrc, "dsrc", 0}},
                  ia[] = {{dout, "dout", 0}, {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, fn, oa, 1, ia, 3));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, L, E, 1));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, s, &g, &rec->st, dy, d, NULL));
    if (dsrc && dsrc->data) attn__store(d, dsrc);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_encoder_layer_forward_train(attn_ctx *ctx, const attn_module *m,
                                             const attn_tensor *src, const attn_mask *src_mask,
                                             const attn_mask *src_key_padding_mask,
                                             int is_causal, const attn_run *run,
                                             attn_tensor *out, attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ENC_LAYER, "attn_encoder_layer_forward_train"));
    return enc_train_entry(ctx, m, src, src_mask, src_key_padding_mask, is_causal, run, out,
                           saved);
}

attn_status attn_encoder_layer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                              const attn_saved *saved, const attn_tensor *dout,
                                              attn_tensor *dsrc) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ENC_LAYER, "attn_encoder_layer_backward_saved"));
    return enc_bwd_saved_entry(ctx, m, "attn_encoder_layer_backward_saved", saved, dout, dsrc);
}

attn_status attn_encoder_forward_train(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *src, const attn_mask *mask,
                                       const attn_mask *src_key_padding_mask, int is_causal,
                                       const attn_run *run, attn_tensor *out,
                                       attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ENCODER, "attn_encoder_forward_train"));
    return enc_train_entry(ctx, m, src, mask, src_key_padding_mask, is_causal, run, out, saved);
}

attn_status attn_encoder_backward_saved(attn_ctx *ctx, const attn_module *m,
                                        const attn_saved *saved, const attn_tensor *dout,
                                        attn_tensor *dsrc) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ENCODER, "attn_encoder_backward_saved"));
    return enc_bwd_saved_entry(ctx, m, "attn_encoder_backward_saved", saved, dout, dsrc);
}

static attn_status dec_train_entry(attn_ctx *ctx, const attn_module *m, const attn_tensor *tgt,
                                   const attn_tensor *memory, const attn_mask *tm,
                                   const attn_mask *mm, const attn_mask *tk,
                                   const attn_mask *mkpm, int tgt_is_causal,
                                   const attn_run *run, attn_tensor *out, attn_saved *saved) {
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "saved is NULL");
    attn__saved_begin(saved);
    attn__stack one;
    const attn__stack *s = as_stack(m, &one);
    int64_t B = 0, T = 0, S = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    attn__tape *t = &saved->tape;
    const float *in, *mem;
    float *memc;
    seq_rec *rec;
    attn_mask c1, c2, c3, c4;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__seq_in(ctx, tgt, "tgt", E, &B, &T, &in));
    ATTN_TRYG(attn__seq_in(ctx, memory, "memory", E, &B, &S, &mem));
    ATTN_TRYG(attn__check(ctx, out, "output", ATTN_F32, 3, 3));
    {
        int64_t shape[3] = {B, T, E};
        ATTN_TRYG(attn__check_shape(ctx, out, "output", 3, shape));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}},
                  ia[] = {{tgt, "tgt", 0}, {memory, "memory", 0}, {attn__mask_t(tm), "tgt_mask", 0},
                          {attn__mask_t(mm), "memory_mask", 0},
                          {attn__mask_t(tk), "tgt_key_padding_mask", 0},
                          {attn__mask_t(mkpm), "memory_key_padding_mask", 0},
                          {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(ctx,
                                      m->kind == ATTN__DECODER ? "attn_decoder_forward_train"
                                                               : "attn_decoder_layer_forward_train",
                                      oa, 1, ia, 7));
    }
    ATTN_TRYG(attn__tape_alloc(ctx, t, 1, sizeof *rec, (void **)&rec));
    ATTN_TRYG(attn__rec_f32(ctx, t, &memc, B, S, E, 1));
    copy_f(memc, mem, B * S * E);
    ATTN_TRYG(attn__saved_mask(ctx, t, tm, "tgt_mask", &c1));
    ATTN_TRYG(attn__saved_mask(ctx, t, tk, "tgt_key_padding_mask", &c2));
    ATTN_TRYG(attn__saved_mask(ctx, t, mm, "memory_mask", &c3));
    ATTN_TRYG(attn__saved_mask(ctx, t, mkpm, "memory_key_padding_mask", &c4));
    ATTN_TRYG(attn__stack_fwd_rec(ctx, s, 1, (saved->flags & ATTN_SAVED_CHECKPOINT) != 0, t, in,
                                  memc, B, T, S, attn__mask_opt(&c1), attn__mask_opt(&c2),
                                  attn__mask_opt(&c3), attn__mask_opt(&c4), tgt_is_causal, &rng,
                                  &rec->st));
    attn__store(rec->st.out, out);
    attn__saved_end(saved, m, rec);
done:
    attn__ws_release(ctx, mk);
    return st;
}

static attn_status dec_bwd_saved_entry(attn_ctx *ctx, const attn_module *m, const char *fn,
                                       const attn_saved *saved, const attn_tensor *dout,
                                       attn_tensor *dtgt, attn_tensor *dmemory) {
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    seq_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m, fn, (void **)&rec));
    attn__stack one;
    const attn__stack *s = as_stack(m, &one);
    int64_t B = rec->st.B, T = rec->st.T, S = rec->st.S, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *dy;
    float *d, *dm;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, dout, "dout", E, &B, &T, &dy));
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dtgt, "dtgt", 0}, {dmemory, "dmemory", 0}},
                  ia[] = {{dout, "dout", 0}, {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, fn, oa, 2, ia, 3));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dm, B, S, E, 1));
    memset(dm, 0, (size_t)(B * S * E) * sizeof(float));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, s, &g, &rec->st, dy, d, dm));
    if (dtgt && dtgt->data) attn__store(d, dtgt);
    if (dmemory && dmemory->data) attn__store(dm, dmemory);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_decoder_layer_forward_train(attn_ctx *ctx, const attn_module *m,
                                             const attn_tensor *tgt, const attn_tensor *memory,
                                             const attn_mask *tgt_mask,
                                             const attn_mask *memory_mask,
                                             const attn_mask *tgt_key_padding_mask,
                                             const attn_mask *memory_key_padding_mask,
                                             int tgt_is_causal, const attn_run *run,
                                             attn_tensor *out, attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__DEC_LAYER, "attn_decoder_layer_forward_train"));
    return dec_train_entry(ctx, m, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                           memory_key_padding_mask, tgt_is_causal, run, out, saved);
}

attn_status attn_decoder_layer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                              const attn_saved *saved, const attn_tensor *dout,
                                              attn_tensor *dtgt, attn_tensor *dmemory) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__DEC_LAYER, "attn_decoder_layer_backward_saved"));
    return dec_bwd_saved_entry(ctx, m, "attn_decoder_layer_backward_saved", saved, dout, dtgt,
                               dmemory);
}

attn_status attn_decoder_forward_train(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *tgt, const attn_tensor *memory,
                                       const attn_mask *tgt_mask, const attn_mask *memory_mask,
                                       const attn_mask *tgt_key_padding_mask,
                                       const attn_mask *memory_key_padding_mask,
                                       int tgt_is_causal, const attn_run *run, attn_tensor *out,
                                       attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__DECODER, "attn_decoder_forward_train"));
    return dec_train_entry(ctx, m, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                           memory_key_padding_mask, tgt_is_causal, run, out, saved);
}

attn_status attn_decoder_backward_saved(attn_ctx *ctx, const attn_module *m,
                                        const attn_saved *saved, const attn_tensor *dout,
                                        attn_tensor *dtgt, attn_tensor *dmemory) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__DECODER, "attn_decoder_backward_saved"));
    return dec_bwd_saved_entry(ctx, m, "attn_decoder_backward_saved", saved, dout, dtgt,
                               dmemory);
}

/* nn.Transformer as two stack records: the encoder's output is the decoder's memory. */
typedef struct tf_rec {
    attn__stack_saved enc, dec;
} tf_rec;

static attn_status tf_fwd_rec(attn_ctx *ctx, const attn__stack *s, attn__tape *t, int ckpt,
                              const float *sp, const float *tp, int64_t B, int64_t S, int64_t T,
                              const attn_mask *src_mask, const attn_mask *tgt_mask,
                              const attn_mask *memory_mask, const attn_mask *src_kpm,
                              const attn_mask *tgt_kpm, const attn_mask *memory_kpm,
                              int tgt_is_causal, attn__rng *rng, tf_rec *rec) {
    /* the decoder's dropout stream starts where the encoder's ended */
    ATTN_TRY(attn__stack_fwd_rec(ctx, s, 0, ckpt, t, sp, NULL, B, S, 0, src_mask, src_kpm, NULL,
                                 NULL, 0, rng, &rec->enc));
    return attn__stack_fwd_rec(ctx, s, 1, ckpt, t, tp, rec->enc.out, B, T, S, tgt_mask, tgt_kpm,
                               memory_mask, memory_kpm, tgt_is_causal, rng, &rec->dec);
}

/* dy [B, T, E] -> ds [B, S, E], dt [B, T, E] (overwritten). */
static attn_status tf_bwd_rec(attn_ctx *ctx, const attn__stack *s, const attn__gmap *g,
                              const tf_rec *rec, const float *dy, float *ds, float *dt) {
    attn__mark mk = attn__ws_mark(ctx);
    float *dmem;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &dmem, rec->enc.B, rec->enc.T, s->cfg.d_model, 1));
    memset(dmem, 0, (size_t)(rec->enc.B * rec->enc.T * s->cfg.d_model) * sizeof(float));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, s, g, &rec->dec, dy, dt, dmem));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, s, g, &rec->enc, dmem, ds, NULL));
done:
    attn__ws_release(ctx, mk);
    return st;
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
    float *ds, *dt;
    tf_rec rec;
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dsrc, "dsrc", 0}, {dtgt, "dtgt", 0}},
                  ia[] = {{src, "src", 0},
                          {tgt, "tgt", 0},
                          {attn__mask_t(src_mask), "src_mask", 0},
                          {attn__mask_t(tgt_mask), "tgt_mask", 0},
                          {attn__mask_t(memory_mask), "memory_mask", 0},
                          {attn__mask_t(src_key_padding_mask), "src_key_padding_mask", 0},
                          {attn__mask_t(tgt_key_padding_mask), "tgt_key_padding_mask", 0},
                          {attn__mask_t(memory_key_padding_mask), "memory_key_padding_mask", 0},
                          {dout, "dout", 0},
                          {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_transformer_backward", oa, 2, ia, 11));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &ds, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dt, B, T, E, 1));
    /* recompute: checkpointed records (each layer's input) in the workspace */
    ATTN_TRYG(tf_fwd_rec(ctx, s, NULL, 1, sp, tp, B, S, T, src_mask, tgt_mask, memory_mask,
                         src_key_padding_mask, tgt_key_padding_mask, memory_key_padding_mask,
                         tgt_is_causal, &rng, &rec));
    ATTN_TRYG(tf_bwd_rec(ctx, s, &g, &rec, dy, ds, dt));
    if (dsrc && dsrc->data) attn__store(ds, dsrc);
    if (dtgt && dtgt->data) attn__store(dt, dtgt);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_transformer_forward_train(
    attn_ctx *ctx, const attn_module *m, const attn_tensor *src, const attn_tensor *tgt,
    const attn_mask *src_mask, const attn_mask *tgt_mask, const attn_mask *memory_mask,
    const attn_mask *src_key_padding_mask, const attn_mask *tgt_key_padding_mask,
    const attn_mask *memory_key_padding_mask, int tgt_is_causal, const attn_run *run,
    attn_tensor *out, attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__TRANSFORMER, "attn_transformer_forward_train"));
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "saved is NULL");
    attn__saved_begin(saved);
    const attn__stack *s = m->impl;
    int64_t B = 0, S = 0, T = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    attn__tape *t = &saved->tape;
    const float *sp, *tp;
    tf_rec *rec;
    attn_mask c[6];
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__seq_in(ctx, src, "src", E, &B, &S, &sp));
    ATTN_TRYG(attn__seq_in(ctx, tgt, "tgt", E, &B, &T, &tp));
    ATTN_TRYG(attn__check(ctx, out, "output", ATTN_F32, 3, 3));
    {
        int64_t shape[3] = {B, T, E};
        ATTN_TRYG(attn__check_shape(ctx, out, "output", 3, shape));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}},
                  ia[] = {{src, "src", 0},
                          {tgt, "tgt", 0},
                          {attn__mask_t(src_mask), "src_mask", 0},
                          {attn__mask_t(tgt_mask), "tgt_mask", 0},
                          {attn__mask_t(memory_mask), "memory_mask", 0},
                          {attn__mask_t(src_key_padding_mask), "src_key_padding_mask", 0},
                          {attn__mask_t(tgt_key_padding_mask), "tgt_key_padding_mask", 0},
                          {attn__mask_t(memory_key_padding_mask), "memory_key_padding_mask", 0},
                          {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_transformer_forward_train", oa, 1, ia, 9));
    }
    ATTN_TRYG(attn__tape_alloc(ctx, t, 1, sizeof *rec, (void **)&rec));
    ATTN_TRYG(attn__saved_mask(ctx, t, src_mask, "src_mask", &c[0]));
    ATTN_TRYG(attn__saved_mask(ctx, t, tgt_mask, "tgt_mask", &c[1]));
    ATTN_TRYG(attn__saved_mask(ctx, t, memory_mask, "memory_mask", &c[2]));
    ATTN_TRYG(attn__saved_mask(ctx, t, src_key_padding_mask, "src_key_padding_mask", &c[3]));
    ATTN_TRYG(attn__saved_mask(ctx, t, tgt_key_padding_mask, "tgt_key_padding_mask", &c[4]));
    ATTN_TRYG(attn__saved_mask(ctx, t, memory_key_padding_mask, "memory_key_padding_mask",
                               &c[5]));
    ATTN_TRYG(tf_fwd_rec(ctx, s, t, (saved->flags & ATTN_SAVED_CHECKPOINT) != 0, sp, tp, B, S, T,
                         attn__mask_opt(&c[0]), attn__mask_opt(&c[1]), attn__mask_opt(&c[2]),
                         attn__mask_opt(&c[3]), attn__mask_opt(&c[4]), attn__mask_opt(&c[5]),
                         tgt_is_causal, &rng, rec));
    attn__store(rec->dec.out, out);
    attn__saved_end(saved, m, rec);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_transformer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                            const attn_saved *saved, const attn_tensor *dout,
                                            attn_tensor *dsrc, attn_tensor *dtgt) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__TRANSFORMER, "attn_transformer_backward_saved"));
    const attn__stack *s = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    tf_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m, "attn_transformer_backward_saved", (void **)&rec));
    int64_t B = rec->dec.B, S = rec->dec.S, T = rec->dec.T, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *dy;
    float *ds, *dt;
    attn_status st;
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
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dsrc, "dsrc", 0}, {dtgt, "dtgt", 0}},
                  ia[] = {{dout, "dout", 0},
                          {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_transformer_backward_saved", oa, 2, ia, 3));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &ds, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dt, B, T, E, 1));
    ATTN_TRYG(tf_bwd_rec(ctx, s, &g, rec, dy, ds, dt));
    if (dsrc && dsrc->data) attn__store(ds, dsrc);
    if (dtgt && dtgt->data) attn__store(dt, dtgt);
done:
    attn__ws_release(ctx, mk);
    return st;
}
