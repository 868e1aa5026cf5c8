/* torch.nn.TransformerEncoderLayer and TransformerEncoder: the layer's forward, its backward
 * from a record or recomputing, and the public entry points of the layer and of the encoder
 * stack (forward, backward, training forward, saved backward): each one call to the entry
 * implementation the decoder shares (attn__seq_* in stack.c, where a layer runs as a stack of
 * one). */
#include <stdio.h>
#include <string.h>

#include "transformer.h"

attn_status attn__enc_layer_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                attn__enc_layer *l, const attn_transformer_config *cfg) {
    char p[160];
    l->cfg = *cfg;
    attn_mha_config mc = attn__mha_cfg(cfg);
    int64_t E = cfg->d_model, F = cfg->dim_feedforward;
    if (snprintf(p, sizeof p, "%sself_attn.", prefix) >= (int)sizeof p)
        return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
    ATTN_TRY(attn__attention_mha_reg(ctx, m, p, &l->self_attn, &mc));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "linear1", &l->linear1, E, F, cfg->bias));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "linear2", &l->linear2, F, E, cfg->bias));
    ATTN_TRY(attn__ln_reg(ctx, m, prefix, "norm1", &l->norm1, E, cfg->layer_norm_eps, cfg->bias));
    ATTN_TRY(attn__ln_reg(ctx, m, prefix, "norm2", &l->norm2, E, cfg->layer_norm_eps, cfg->bias));
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
    ATTN_TRY(attn__attn_saved_alloc(ctx, t, &l->self_attn, B, L, L, 1, &sv->sa));
    return attn__ffn_saved_alloc(ctx, t, &l->linear1, l->cfg.activation, B * L,
                                 &sv->ff);
}

/* norm_first:  x = x + sa(norm1(x));  x = x + ff(norm2(x))
 * otherwise:   x = norm1(x + sa(x));  x = norm2(x + ff(x))
 * (attn__res_blk: without dropout the adds and norms run in the epilogues of out_proj and linear2).
 * Without a record the intermediate values live in workspace buffers. */
attn_status attn__enc_layer_fwd(attn_ctx *ctx, const attn__enc_layer *l, const float *x,
                                float *out, int64_t B, int64_t L, const attn_mask *mask,
                                const attn_mask *kpm, int is_causal, attn__rng *rng,
                                attn__enc_saved *sv) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, M = B * L;
    int pre = c->norm_first, drop = attn__drops(rng, c->dropout);
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
    attn__res_blk b1 = {drop, x, pre ? NULL : &l->norm1, sv ? sv->r1 : NULL, u, v};
    if (!pre && sv) b1.dst = sv->x1;
    y = attn__res_target(&b1, &e);
    {
        const attn__attn_io io = attn__attn_io_mha(in, in, in, B, L, L, kpm, mask, is_causal, rng);
        ATTN_TRYG(
            attn__attention_fwd(ctx, &l->self_attn, &io, y, &e, NULL, 0, sv ? &sv->sa : NULL));
    }
    r1 = attn__res_end(ctx, &b1, rng, c->dropout, M, E, sv ? &sv->d1 : NULL);
    /* feed-forward block (pre-norm: its input x1 = norm2(r1)) */
    ATTN_TRYG(attn__ffn_block(ctx, c, &l->linear1, &l->linear2, &l->norm2, drop, pre ? r1 : b1.dst,
                              sv ? sv->x1 : t, sv ? sv->r2 : NULL, out, v, M, rng,
                              sv ? &sv->ff : NULL, sv ? &sv->d2 : NULL));
    if (sv) sv->x0 = x;
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Encoder layer from its record (see attn__enc_saved).  dout [B, L, E]; dx overwritten. */
attn_status attn__enc_layer_bwd_saved(attn_ctx *ctx, const attn__enc_layer *l,
                                      const attn__gmap *g, const attn__enc_saved *sv, int64_t B,
                                      int64_t L, const float *dout, float *dx) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, n = B * L * E, M = B * L;
    float p = c->dropout;
    attn__mark mk = attn__ws_mark(ctx);
    float *t, *dq, *d1;
    const float *gd;
    attn__rng r;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dq, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d1, B, L, E, 1));
    if (c->norm_first) {
        /* out = r1 + drop2(ffn(x1 = norm2(r1))) */
        r = sv->d2;
        gd = attn__dropout_grad(&r, p, dout, t, n);
        ATTN_TRYG(attn__ffn_bwd_saved(ctx, &l->linear1, &l->linear2, g, c->activation, p, &sv->ff,
                                      sv->x1, gd, d1, NULL, M));
        ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm2, sv->r1, d1, d1, M));
        attn__add_f32(ctx, d1, dout, d1, n); /* d r1 */
        /* r1 = x0 + drop1(mha(n1 = norm1(x0))) */
        r = sv->d1;
        gd = attn__dropout_grad(&r, p, d1, t, n);
        const attn__attn_io io =
            attn__attn_io_mha(sv->n1, sv->n1, sv->n1, B, L, L, NULL, NULL, 0, NULL);
        ATTN_TRYG(attn__attention_bwd(ctx, &l->self_attn, g, &sv->sa, &io, gd, NULL, NULL, NULL, dq,
                                      NULL));
        ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm1, sv->x0, dq, dx, M));
        attn__add_f32(ctx, d1, dx, dx, n); /* dx = d1 + norm1's backward */
    } else {
        /* r2 = x1 + drop2(ffn(x1)); out = norm2(r2) */
        ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm2, sv->r2, dout, d1, M));
        r = sv->d2;
        gd = attn__dropout_grad(&r, p, d1, t, n);
        /* d x1 = d1 + the block's gradient, added in the last product's epilogue (into dq) */
        ATTN_TRYG(attn__ffn_bwd_saved(ctx, &l->linear1, &l->linear2, g, c->activation, p, &sv->ff,
                                      sv->x1, gd, dq, d1, M));
        /* x1 = norm1(r1), r1 = x0 + drop1(mha(x0)); dx = d r1 + the attention's gradient */
        ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm1, sv->r1, dq, dq, M));
        r = sv->d1;
        gd = attn__dropout_grad(&r, p, dq, t, n);
        const attn__attn_io io =
            attn__attn_io_mha(sv->x0, sv->x0, sv->x0, B, L, L, NULL, NULL, 0, NULL);
        ATTN_TRYG(
            attn__attention_bwd(ctx, &l->self_attn, g, &sv->sa, &io, gd, NULL, NULL, NULL, dx, dq));
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Encoder layer, recomputing its forward from x0 [B, L, E] and the stream. */
attn_status attn__enc_layer_bwd(attn_ctx *ctx, const attn__enc_layer *l, const attn__gmap *g,
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
    ATTN_TRYG(attn__enc_layer_bwd_saved(ctx, l, g, &sv, B, L, dout, dx));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_encoder_layer_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                      attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__ENC_LAYER, sizeof(attn__enc_layer), &m));
    attn_status st = attn__enc_layer_reg(ctx, m, "", m->impl, cfg);
    return attn__module_done(ctx, m, st, out);
}

attn_status attn_encoder_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                int final_norm, attn_module **out) {
    ATTN_FAIL_IF(cfg && cfg->num_encoder_layers < 1, ctx, ATTN_E_INVALID,
                 "an encoder needs at least one layer");
    return attn__stack_new(ctx, ATTN__ENCODER, cfg, cfg ? cfg->num_encoder_layers : 0, 0, "layers.",
                           "", final_norm ? "norm" : NULL, NULL, sizeof(attn__stack), out);
}

/* ---- public entry points (one implementation in stack.c: attn__seq_*) ---------------- */
attn_status attn_encoder_layer_forward(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *src, const attn_transformer_masks *masks,
                                       const attn_run *run, attn_tensor *out) {
    return attn__seq_forward(ctx, m, ATTN__ENC_LAYER, "attn_encoder_layer_forward", src, NULL,
                             masks, run, out);
}

attn_status attn_encoder_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                 const attn_transformer_masks *masks, const attn_run *run,
                                 attn_tensor *out) {
    return attn__seq_forward(ctx, m, ATTN__ENCODER, "attn_encoder_forward", src, NULL, masks, run,
                             out);
}

attn_status attn_encoder_layer_backward(attn_ctx *ctx, const attn_module *m,
                                        const attn_tensor *src,
                                        const attn_transformer_masks *masks, const attn_run *run,
                                        const attn_tensor *dout, attn_tensor *dsrc) {
    return attn__seq_backward(ctx, m, ATTN__ENC_LAYER, "attn_encoder_layer_backward", src, NULL,
                              masks, run, dout, dsrc, NULL);
}

attn_status attn_encoder_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                  const attn_transformer_masks *masks, const attn_run *run,
                                  const attn_tensor *dout, attn_tensor *dsrc) {
    return attn__seq_backward(ctx, m, ATTN__ENCODER, "attn_encoder_backward", src, NULL, masks,
                              run, dout, dsrc, NULL);
}

attn_status attn_encoder_layer_forward_train(attn_ctx *ctx, const attn_module *m,
                                             const attn_tensor *src,
                                             const attn_transformer_masks *masks,
                                             const attn_run *run, attn_tensor *out,
                                             attn_saved *saved) {
    return attn__seq_forward_train(ctx, m, ATTN__ENC_LAYER, "attn_encoder_layer_forward_train",
                                   src, NULL, masks, run, out, saved);
}

attn_status attn_encoder_layer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                              const attn_saved *saved, const attn_tensor *dout,
                                              attn_tensor *dsrc) {
    return attn__seq_backward_saved(ctx, m, ATTN__ENC_LAYER, "attn_encoder_layer_backward_saved",
                                    saved, dout, dsrc, NULL);
}

attn_status attn_encoder_forward_train(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *src, const attn_transformer_masks *masks,
                                       const attn_run *run, attn_tensor *out,
                                       attn_saved *saved) {
    return attn__seq_forward_train(ctx, m, ATTN__ENCODER, "attn_encoder_forward_train", src, NULL,
                                   masks, run, out, saved);
}

attn_status attn_encoder_backward_saved(attn_ctx *ctx, const attn_module *m,
                                        const attn_saved *saved, const attn_tensor *dout,
                                        attn_tensor *dsrc) {
    return attn__seq_backward_saved(ctx, m, ATTN__ENCODER, "attn_encoder_backward_saved", saved,
                                    dout, dsrc, NULL);
}
