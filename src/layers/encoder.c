/* torch.nn.TransformerEncoderLayer and TransformerEncoder: the public entry points of the
 * layer and of the encoder stack (create, forward, backward, training forward, saved backward).
 * The layer is a block (attn__block_tf_reg, block.c); each entry point is one call to the
 * implementation the encoder shares (attn__seq_* in stack.c: a layer runs as a stack of
 * one). */
#include <stdio.h>
#include <string.h>

#include "transformer.h"

attn_status attn_encoder_layer_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                      attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__ENC_LAYER, sizeof(attn__tf_layer), &m));
    attn__tf_layer *l = m->impl;
    l->cfg = *cfg;
    attn_status st = attn__block_tf_reg(ctx, m, "", &l->b, cfg, 0);
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
