/* torch.nn.TransformerDecoderLayer and TransformerDecoder: the layer's forward, its backward
 * from a record or recomputing, and the public entry points of the layer and of the decoder
 * stack (forward, backward, training forward, saved backward): each one call to the entry
 * implementation the encoder shares (attn__seq_* in stack.c, where a layer runs as a stack of
 * one). */
#include <stdio.h>
#include <string.h>

#include "transformer.h"

attn_status attn__dec_layer_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                attn__dec_layer *l, const attn_transformer_config *cfg) {
    char p[160];
    l->cfg = *cfg;
    attn_mha_config mc = attn__mha_cfg(cfg);
    int64_t E = cfg->d_model, F = cfg->dim_feedforward;
    float eps = cfg->layer_norm_eps;
    if (snprintf(p, sizeof p, "%sself_attn.", prefix) >= (int)sizeof p)
        return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
    ATTN_TRY(attn__attention_mha_reg(ctx, m, p, &l->self_attn, &mc));
    if (snprintf(p, sizeof p, "%smultihead_attn.", prefix) >= (int)sizeof p)
        return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
    ATTN_TRY(attn__attention_mha_reg(ctx, m, p, &l->multihead_attn, &mc));
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
    ATTN_TRY(attn__attn_saved_alloc(ctx, t, &l->self_attn, B, T, T, 1, &sv->sa));
    ATTN_TRY(attn__attn_saved_alloc(ctx, t, &l->multihead_attn, B, T, S, 0, &sv->ca));
    return attn__ffn_saved_alloc(ctx, t, &l->linear1, l->cfg.activation, B * T,
                                 &sv->ff);
}

attn_status attn__dec_layer_fwd(attn_ctx *ctx, const attn__dec_layer *l, const float *x,
                                float *out, const float *memory, int64_t B, int64_t T, int64_t S,
                                const attn_mask *tgt_mask, const attn_mask *memory_mask,
                                const attn_mask *tgt_kpm, const attn_mask *memory_kpm,
                                int tgt_is_causal, attn__rng *rng, float *cross_w,
                                attn__dec_saved *sv) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, M = B * T;
    int pre = c->norm_first, drop = attn__drops(rng, c->dropout);
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
    attn__res_blk b1 = {drop, x, pre ? NULL : &l->norm1, sv ? sv->r1 : NULL, sv ? sv->n2 : u, v};
    y = attn__res_target(&b1, &e);
    {
        const attn__attn_io io =
            attn__attn_io_mha(in, in, in, B, T, T, tgt_kpm, tgt_mask, tgt_is_causal, rng);
        ATTN_TRYG(
            attn__attention_fwd(ctx, &l->self_attn, &io, y, &e, NULL, 0, sv ? &sv->sa : NULL));
    }
    r = attn__res_end(ctx, &b1, rng, c->dropout, M, E, sv ? &sv->d1 : NULL);
    /* cross-attention block: queries from the stream, keys and values from memory */
    const float *n2 = b1.dst;
    if (pre) {
        float *p2 = sv ? sv->n2 : t;
        attn__ln_fwd(ctx, &l->norm2, r, p2, M);
        n2 = p2;
    }
    attn__res_blk b2 = {drop, pre ? r : n2, pre ? NULL : &l->norm2, sv ? sv->r2 : NULL,
                  sv ? sv->n3 : pre ? w : t, v};
    y = attn__res_target(&b2, &e);
    {
        const attn__attn_io io =
            attn__attn_io_mha(n2, memory, memory, B, T, S, memory_kpm, memory_mask, 0, rng);
        ATTN_TRYG(attn__attention_fwd(ctx, &l->multihead_attn, &io, y, &e, cross_w, 1,
                                      sv ? &sv->ca : NULL));
    }
    r = attn__res_end(ctx, &b2, rng, c->dropout, M, E, sv ? &sv->d2 : NULL);
    /* feed-forward block (pre-norm: its input n3 = norm3(r2)) */
    ATTN_TRYG(attn__ffn_block(ctx, c, &l->linear1, &l->linear2, &l->norm3, drop, pre ? r : b2.dst,
                              sv ? sv->n3 : t, sv ? sv->r3 : NULL, out, v, M, rng,
                              sv ? &sv->ff : NULL, sv ? &sv->d3 : NULL));
    if (sv) sv->x0 = x, sv->mem = memory;
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Decoder layer from its record (see attn__dec_saved).  dx overwritten; dmem [B, S, E]
 * accumulates. */
attn_status attn__dec_layer_bwd_saved(attn_ctx *ctx, const attn__dec_layer *l,
                                      const attn__gmap *g, const attn__dec_saved *sv, int64_t B,
                                      int64_t T, int64_t S, const float *dout, float *dx,
                                      float *dmem) {
    const attn_transformer_config *c = &l->cfg;
    int64_t E = c->d_model, n = B * T * E, ns = B * S * E, M = B * T;
    float p = c->dropout;
    int pre = c->norm_first;
    attn__mark mk = attn__ws_mark(ctx);
    float *t, *dq, *dk, *dv, *d;
    const float *gd;
    attn__rng r;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dq, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dk, B, (T > S ? T : S), E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dv, B, (T > S ? T : S), E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, T, E, 1));
    /* d = gradient of the residual stream, block by block */
    if (pre) attn__copy_f(d, dout, n);
    else ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm3, sv->r3, dout, d, M));
    /* feed-forward block: r3 = base3 + drop3(ffn(n3)) */
    r = sv->d3;
    gd = attn__dropout_grad(&r, p, d, t, n);
    ATTN_TRYG(attn__ffn_bwd_saved(ctx, &l->linear1, &l->linear2, g, c->activation, p, &sv->ff,
                                  sv->n3, gd, dq, NULL, M));
    /* dq = d n3 */
    if (pre) {
        ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm3, sv->r2, dq, dq, M));
        attn__add_f32(ctx, d, dq, d, n); /* d r2 */
    } else {
        attn__add_f32(ctx, d, dq, d, n); /* d x2 (= n3) */
        ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm2, sv->r2, d, d, M));
    }
    /* cross-attention block: r2 = base2 + drop2(ca(n2, mem)); d = d r2 */
    r = sv->d2;
    gd = attn__dropout_grad(&r, p, d, t, n);
    {
        const attn__attn_io io =
            attn__attn_io_mha(sv->n2, sv->mem, sv->mem, B, T, S, NULL, NULL, 0, NULL);
        ATTN_TRYG(attn__attention_bwd(ctx, &l->multihead_attn, g, &sv->ca, &io, gd, dq, dk, dv,
                                      NULL, NULL));
    }
    attn__add_f32(ctx, dk, dv, dk, ns);
    attn__add_f32(ctx, dmem, dk, dmem, ns);
    /* dq = d n2 */
    if (pre) {
        ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm2, sv->r1, dq, dq, M));
        attn__add_f32(ctx, d, dq, d, n); /* d r1 */
    } else {
        attn__add_f32(ctx, d, dq, d, n); /* d x1 (= n2) */
        ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm1, sv->r1, d, d, M));
    }
    /* self-attention block: r1 = x0 + drop1(sa(in)); d = d r1 */
    r = sv->d1;
    gd = attn__dropout_grad(&r, p, d, t, n);
    const float *in = pre ? sv->n1 : sv->x0;
    const attn__attn_io io = attn__attn_io_mha(in, in, in, B, T, T, NULL, NULL, 0, NULL);
    if (pre) { /* dx = d + norm1's backward of d in */
        ATTN_TRYG(attn__attention_bwd(ctx, &l->self_attn, g, &sv->sa, &io, gd, NULL, NULL, NULL, dq,
                                      NULL));
        ATTN_TRYG(attn__ln_bwd(ctx, g, &l->norm1, sv->x0, dq, dx, M));
        attn__add_f32(ctx, d, dx, dx, n);
    } else { /* dx = d + d in, added in the last product's epilogue */
        ATTN_TRYG(
            attn__attention_bwd(ctx, &l->self_attn, g, &sv->sa, &io, gd, NULL, NULL, NULL, dx, d));
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Decoder layer, recomputing its forward from x0 [B, T, E], mem and the stream. */
attn_status attn__dec_layer_bwd(attn_ctx *ctx, const attn__dec_layer *l, const attn__gmap *g,
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
    ATTN_TRYG(attn__dec_layer_bwd_saved(ctx, l, g, &sv, B, T, S, dout, dx, dmem));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_decoder_layer_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                      attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__DEC_LAYER, sizeof(attn__dec_layer), &m));
    attn_status st = attn__dec_layer_reg(ctx, m, "", m->impl, cfg);
    return attn__module_done(ctx, m, st, out);
}

attn_status attn_decoder_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                int final_norm, attn_module **out) {
    ATTN_FAIL_IF(cfg && cfg->num_decoder_layers < 1, ctx, ATTN_E_INVALID,
                 "a decoder needs at least one layer");
    return attn__stack_new(ctx, ATTN__DECODER, cfg, 0, cfg ? cfg->num_decoder_layers : 0, "",
                           "layers.", NULL, final_norm ? "norm" : NULL, sizeof(attn__stack), out);
}

/* ---- public entry points (one implementation in stack.c: attn__seq_*) ---------------- */
attn_status attn_decoder_layer_forward(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *tgt, const attn_tensor *memory,
                                       const attn_transformer_masks *masks, const attn_run *run,
                                       attn_tensor *out) {
    return attn__seq_forward(ctx, m, ATTN__DEC_LAYER, "attn_decoder_layer_forward", tgt, memory,
                             masks, run, out);
}

attn_status attn_decoder_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *tgt,
                                 const attn_tensor *memory, const attn_transformer_masks *masks,
                                 const attn_run *run, attn_tensor *out) {
    return attn__seq_forward(ctx, m, ATTN__DECODER, "attn_decoder_forward", tgt, memory, masks,
                             run, out);
}

attn_status attn_decoder_layer_backward(attn_ctx *ctx, const attn_module *m,
                                        const attn_tensor *tgt, const attn_tensor *memory,
                                        const attn_transformer_masks *masks, const attn_run *run,
                                        const attn_tensor *dout, attn_tensor *dtgt,
                                        attn_tensor *dmemory) {
    return attn__seq_backward(ctx, m, ATTN__DEC_LAYER, "attn_decoder_layer_backward", tgt, memory,
                              masks, run, dout, dtgt, dmemory);
}

attn_status attn_decoder_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *tgt,
                                  const attn_tensor *memory, const attn_transformer_masks *masks,
                                  const attn_run *run, const attn_tensor *dout,
                                  attn_tensor *dtgt, attn_tensor *dmemory) {
    return attn__seq_backward(ctx, m, ATTN__DECODER, "attn_decoder_backward", tgt, memory, masks,
                              run, dout, dtgt, dmemory);
}

attn_status attn_decoder_layer_forward_train(attn_ctx *ctx, const attn_module *m,
                                             const attn_tensor *tgt, const attn_tensor *memory,
                                             const attn_transformer_masks *masks,
                                             const attn_run *run, attn_tensor *out,
                                             attn_saved *saved) {
    return attn__seq_forward_train(ctx, m, ATTN__DEC_LAYER, "attn_decoder_layer_forward_train",
                                   tgt, memory, masks, run, out, saved);
}

attn_status attn_decoder_layer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                              const attn_saved *saved, const attn_tensor *dout,
                                              attn_tensor *dtgt, attn_tensor *dmemory) {
    return attn__seq_backward_saved(ctx, m, ATTN__DEC_LAYER, "attn_decoder_layer_backward_saved",
                                    saved, dout, dtgt, dmemory);
}

attn_status attn_decoder_forward_train(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *tgt, const attn_tensor *memory,
                                       const attn_transformer_masks *masks, const attn_run *run,
                                       attn_tensor *out, attn_saved *saved) {
    return attn__seq_forward_train(ctx, m, ATTN__DECODER, "attn_decoder_forward_train", tgt,
                                   memory, masks, run, out, saved);
}

attn_status attn_decoder_backward_saved(attn_ctx *ctx, const attn_module *m,
                                        const attn_saved *saved, const attn_tensor *dout,
                                        attn_tensor *dtgt, attn_tensor *dmemory) {
    return attn__seq_backward_saved(ctx, m, ATTN__DECODER, "attn_decoder_backward_saved", saved,
                                    dout, dtgt, dmemory);
}
