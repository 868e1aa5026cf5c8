/* torch.nn.TransformerDecoderLayer and TransformerDecoder: the public entry points of the
 * layer and of the decoder stack (create, forward, backward, training forward, saved backward).
 * The layer is a block (attn__block_tf_reg, block.c); each entry point is one call to the
 * implementation the encoder shares (attn__seq_* in stack.c, where a layer runs as a stack of one). */
#include <stdio.h>
#include <string.h>

#include "transformer.h"

attn_status attn_decoder_layer_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                                      attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__DEC_LAYER, sizeof(attn__tf_layer), &m));
    attn__tf_layer *l = m->impl;
    l->cfg = *cfg;
    attn_status st = attn__block_tf_reg(ctx, m, "", &l->b, cfg, 1);
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
