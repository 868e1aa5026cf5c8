/* torch.nn.Transformer (attn_transformer_*): an encoder stack whose output is the memory of a
 * decoder stack; forward, backward, training forward and saved backward.  The configuration
 * shared by the family is here too.  The other modules of the family: ffn.c, encoder.c,
 * decoder.c, stack.c (their internals: transformer.h); the GPT is src/models/gpt.c. */
#include <math.h>
#include <string.h>

#include "transformer.h"

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

attn_status attn_transformer_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                    attn_module **out) {
    ATTN_FAIL_IF(cfg && (cfg->num_encoder_layers < 1 || cfg->num_decoder_layers < 1), ctx,
                 ATTN_E_INVALID, "a transformer needs at least one encoder and decoder layer");
    ATTN_TRY(attn__stack_new(ctx, ATTN__TRANSFORMER, cfg, cfg ? cfg->num_encoder_layers : 0,
                             cfg ? cfg->num_decoder_layers : 0, "encoder.layers.",
                             "decoder.layers.", "encoder.norm", "decoder.norm",
                             sizeof(attn__stack), out));
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

/* The forwards' inputs src [B, S, E] and tgt [B, T, E], the output [B, T, E] and their
 * overlaps (fn names the caller). */
static attn_status tf_inputs(attn_ctx *ctx, const attn_module *m, const char *fn,
                             const attn_tensor *src, const attn_tensor *tgt,
                             const attn_transformer_masks *k, const attn_tensor *out, int64_t E,
                             int64_t *B, int64_t *S, int64_t *T, const float **sp,
                             const float **tp) {
    ATTN_TRY(attn__seq_in(ctx, src, "src", E, B, S, sp));
    ATTN_TRY(attn__seq_in(ctx, tgt, "tgt", E, B, T, tp));
    ATTN_TRY(attn__check(ctx, out, "output", ATTN_F32, 3, 3));
    int64_t shape[3] = {*B, *T, E};
    ATTN_TRY(attn__check_shape(ctx, out, "output", 3, shape));
    attn_tensor P = attn_view1(m->arena, m->numel);
    attn__arg oa[] = {{out, "out", 0}},
              ia[3 + ATTN__TFM_N] = {{src, "src", 0}, {tgt, "tgt", 0},
                                     {&P, "the module's parameters", 0}};
    attn__tf_mask_args(*k, ia + 3);
    return attn__check_outputs(ctx, fn, oa, 1, ia, ATTN__NARGS(ia));
}

attn_status attn_transformer_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                     const attn_tensor *tgt, const attn_transformer_masks *masks,
                                     const attn_run *run, attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__TRANSFORMER, "attn_transformer_forward"));
    attn_transformer_masks k = attn__tf_masks(masks, ATTN__TFM_ALL);
    const attn__stack *s = m->impl;
    int64_t B = 0, S = 0, T = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *sp, *tp;
    float *mem, *x;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(tf_inputs(ctx, m, "attn_transformer_forward", src, tgt, &k, out, E, &B, &S, &T, &sp, &tp));
    rng.nb = B;
    ATTN_TRYG(attn__ws_f32(ctx, &mem, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, T, E, 1));
    memcpy(mem, sp, (size_t)(B * S * E) * sizeof(float));
    memcpy(x, tp, (size_t)(B * T * E) * sizeof(float));
    ATTN_TRYG(attn__enc_run(ctx, s, mem, B, S, k.src_mask, k.src_key_padding_mask,
                            k.src_is_causal, &rng));
    ATTN_TRYG(attn__dec_run(ctx, s, x, mem, B, T, S, k.tgt_mask, k.memory_mask,
                            k.tgt_key_padding_mask, k.memory_key_padding_mask, k.tgt_is_causal,
                            &rng, NULL));
    attn__store(x, out);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* nn.Transformer as two stack records: the encoder's output is the decoder's memory. */
typedef struct tf_rec {
    attn__stack_saved enc, dec;
} tf_rec;

static attn_status tf_fwd_rec(attn_ctx *ctx, const attn__stack *s, attn__tape *t, int ckpt,
                              const float *sp, const float *tp, int64_t B, int64_t S, int64_t T,
                              const attn_transformer_masks *k, attn__rng *rng, tf_rec *rec) {
    /* the decoder's dropout stream starts where the encoder's ended */
    ATTN_TRY(attn__stack_fwd_rec(ctx, s, 0, ckpt, t, sp, NULL, B, S, 0, k->src_mask,
                                 k->src_key_padding_mask, NULL, NULL, k->src_is_causal, rng,
                                 &rec->enc, NULL));
    return attn__stack_fwd_rec(ctx, s, 1, ckpt, t, tp, rec->enc.out, B, T, S, k->tgt_mask,
                               k->tgt_key_padding_mask, k->memory_mask,
                               k->memory_key_padding_mask, k->tgt_is_causal, rng, &rec->dec, NULL);
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
                                      const attn_transformer_masks *masks, const attn_run *run,
                                      const attn_tensor *dout, attn_tensor *dsrc,
                                      attn_tensor *dtgt) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__TRANSFORMER, "attn_transformer_backward"));
    attn_transformer_masks k = attn__tf_masks(masks, ATTN__TFM_ALL);
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
    rng.nb = B;
    ATTN_TRYG(attn__seq_grad_out(ctx, dsrc, "dsrc", B, S, E));
    ATTN_TRYG(attn__seq_grad_out(ctx, dtgt, "dtgt", B, T, E));
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dsrc, "dsrc", 0}, {dtgt, "dtgt", 0}},
                  ia[5 + ATTN__TFM_N] = {{src, "src", 0},
                                         {tgt, "tgt", 0},
                                         {dout, "dout", 0},
                                         {&P, "the module's parameters", 0},
                                         {&G, "the module's gradients", 0}};
        attn__tf_mask_args(k, ia + 5);
        ATTN_TRYG(attn__check_outputs(ctx, "attn_transformer_backward", oa, 2, ia,
                                      ATTN__NARGS(ia)));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &ds, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dt, B, T, E, 1));
    /* recompute: checkpointed records (each layer's input) in the workspace */
    ATTN_TRYG(tf_fwd_rec(ctx, s, NULL, 1, sp, tp, B, S, T, &k, &rng, &rec));
    ATTN_TRYG(tf_bwd_rec(ctx, s, &g, &rec, dy, ds, dt));
    if (dsrc && dsrc->data) attn__store(ds, dsrc);
    if (dtgt && dtgt->data) attn__store(dt, dtgt);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_transformer_forward_train(attn_ctx *ctx, const attn_module *m,
                                           const attn_tensor *src, const attn_tensor *tgt,
                                           const attn_transformer_masks *masks,
                                           const attn_run *run, attn_tensor *out,
                                           attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__TRANSFORMER, "attn_transformer_forward_train"));
    attn_transformer_masks k = attn__tf_masks(masks, ATTN__TFM_ALL), kc;
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "saved is NULL");
    attn__saved_begin(saved);
    const attn__stack *s = m->impl;
    int64_t B = 0, S = 0, T = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    attn__tape *t = &saved->tape;
    const float *sp, *tp;
    tf_rec *rec;
    attn_mask c[ATTN__TFM_N];
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(tf_inputs(ctx, m, "attn_transformer_forward_train", src, tgt, &k, out, E, &B, &S, &T, &sp, &tp));
    rng.nb = B;
    ATTN_TRYG(attn__tape_alloc(ctx, t, 1, sizeof *rec, (void **)&rec));
    ATTN_TRYG(attn__tf_masks_saved(ctx, t, &k, c, &kc));
    ATTN_TRYG(tf_fwd_rec(ctx, s, t, (saved->flags & ATTN_SAVED_CHECKPOINT) != 0, sp, tp, B, S, T,
                         &kc, &rng, rec));
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
    ATTN_TRYG(attn__seq_grad_out(ctx, dsrc, "dsrc", B, S, E));
    ATTN_TRYG(attn__seq_grad_out(ctx, dtgt, "dtgt", B, T, E));
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
