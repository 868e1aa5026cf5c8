/* attn eval ops: whole models (ViT self-attention embedding, GPT, ViT).  Each op with its attribute
 * and input lists; see eval.h. */
#include <string.h>

#include "eval.h"

/* ---- ViT, GPT ---------------------------------------------------------------------------- */

static const ev_attr A_VIT[] = {{"patch_dim", 'i', EV_REQ, NULL},
                                {"embed_dim", 'i', EV_REQ, NULL},
                                {"num_heads", 'i', EV_REQ, NULL},
                                {"max_patches", 'i', EV_REQ, NULL}, EV_END};
static const char *const I_VIT[] = {"patches", NULL};

static attn_status op_vit_self_attention(ev *e) {
    int64_t P = ev_i(e, "patch_dim"), E = ev_i(e, "embed_dim"), H = ev_i(e, "num_heads");
    ATTN_TRY(ev_heads_divide(e, "embed_dim", E, "num_heads", H));
    attn_module *emb = NULL, *mha = NULL;
    ATTN_TRY(ev_module(e, attn_vit_embed_create(e->ctx, P, E, ev_i(e, "max_patches"), &emb), &emb,
                       ""));
    attn_mha_config mc = attn_mha_defaults(E, H);
    attn__param_source(e->ctx, e->in, "attn."); /* the second module's parameters */
    attn_status st = attn_mha_create(e->ctx, &mc, &mha);
    attn__param_source(e->ctx, e->in, "");
    ATTN_TRY(ev_module(e, st, &mha, "attn."));
    attn_tensor x, z, o, w;
    ATTN_TRY(ev_input(e, "patches", 1, 3, 3, &x));
    ATTN_TRY(ev_ready(e));
    int64_t B = x.shape[0], N1 = x.shape[1] + 1;
    int64_t zs[3] = {B, N1, E}, ws[3] = {B, N1, N1};
    ATTN_TRY(ev_new(e, "z", 3, zs, &z));
    ATTN_TRY(ev_new(e, "out", 3, zs, &o));
    ATTN_TRY(ev_new(e, "attn_weights", 3, ws, &w));
    ATTN_TRY(attn_vit_embed_forward(e->ctx, emb, &x, &z));
    attn_mha_options opt = {1, 1, 0}; /* need_weights, averaged, not causal */
    ATTN_TRY(attn_mha_forward(e->ctx, mha, &z, &z, &z, NULL, NULL, &opt, NULL, &o, &w));
    ATTN_TRY(ev_write(e, "out", &o));
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    /* z is the query, key and value: its gradient is the sum of the three */
    attn_tensor go, dq, dk, dv, dx;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "dz (query)", &z, &dq));
    ATTN_TRY(ev_grad_like(e, "dz (key)", &z, &dk));
    ATTN_TRY(ev_grad_like(e, "dz (value)", &z, &dv));
    ATTN_TRY(ev_grad_like(e, "grad.patches", &x, &dx));
    ATTN_TRY(attn_mha_backward(e->ctx, mha, &z, &z, &z, NULL, NULL, &opt, NULL, &go, &dq, &dk,
                               &dv));
    float *a = dq.data;
    const float *bk = dk.data, *bv = dv.data;
    for (int64_t i = 0, n = attn_tensor_numel(&dq); i < n; i++) a[i] = a[i] + bk[i] + bv[i];
    ATTN_TRY(attn_vit_embed_backward(e->ctx, emb, &x, &dq, &dx));
    ATTN_TRY(ev_write_grad(e, "patches", &dx));
    return ev_write_param_grads(e);
}

static const ev_attr A_GPT[] = {
    {"vocab_size", 'i', EV_REQ, NULL},      {"block_size", 'i', EV_REQ, NULL},
    {"num_layers", 'i', EV_REQ, NULL},      {"d_model", 'i', EV_REQ, NULL},
    {"nhead", 'i', EV_REQ, NULL},           {"dim_feedforward", 'i', "2048", NULL},
    {"activation", 'e', "relu", ACTS},      {"layer_norm_eps", 'f', "1e-5", NULL},
    {"norm_first", 'b', "true", NULL},      {"bias", 'b', "true", NULL},
    {"dropout", 'f', "0.1", NULL},          {"batch_first", 'b', "true", NULL},
    {"tie_word_embeddings", 'b', "false", NULL},
    EV_END};
static const char *const I_GPT[] = {"idx", NULL};

static attn_status op_gpt(ev *e) {
    attn_transformer_config cfg;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_num_layers(e, "num_layers", &cfg.num_encoder_layers));
    int64_t V = ev_i(e, "vocab_size");
    attn_module *m = NULL;
    attn_tensor ids, y;
    unsigned flags = ev_b(e, "tie_word_embeddings") ? ATTN_GPT_TIED : 0;
    ATTN_TRY(ev_module(e, attn_gpt_create_ex(e->ctx, &cfg, V, ev_i(e, "block_size"), flags, &m),
                       &m, ""));
    ATTN_TRY(ev_ids(e, "idx", 2, 2, &ids));
    ATTN_TRY(ev_ready(e));
    int64_t ys[3] = {ids.shape[0], ids.shape[1], V};
    ATTN_TRY(ev_new(e, "out", 3, ys, &y));
    ATTN_TRY(attn_gpt_forward(e->ctx, m, &ids, NULL, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    /* ids have no gradient: the parameters' only */
    attn_tensor go;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(attn_gpt_backward(e->ctx, m, &ids, NULL, &go));
    return ev_write_param_grads(e);
}

static const ev_attr A_VITM[] = {
    {"image_size", 'i', EV_REQ, NULL},      {"channels", 'i', EV_REQ, NULL},
    {"patch", 'i', EV_REQ, NULL},           {"num_classes", 'i', EV_REQ, NULL},
    {"num_layers", 'i', EV_REQ, NULL},      {"d_model", 'i', EV_REQ, NULL},
    {"nhead", 'i', EV_REQ, NULL},           {"dim_feedforward", 'i', "2048", NULL},
    {"activation", 'e', "gelu", ACTS},      {"layer_norm_eps", 'f', "1e-5", NULL},
    {"norm_first", 'b', "true", NULL},      {"bias", 'b', "true", NULL},
    {"dropout", 'f', "0.1", NULL},          {"batch_first", 'b', "true", NULL},
    EV_END};
static const char *const I_VITM[] = {"images", NULL};

static attn_status op_vit(ev *e) {
    attn_vit_config vc;
    ATTN_TRY(ev_tf_config(e, &vc.tf));
    ATTN_TRY(ev_num_layers(e, "num_layers", &vc.tf.num_encoder_layers));
    vc.image_size = ev_i(e, "image_size"), vc.channels = ev_i(e, "channels");
    vc.patch = ev_i(e, "patch"), vc.num_classes = ev_i(e, "num_classes");
    attn_module *m = NULL;
    attn_tensor x, y, w;
    ATTN_TRY(ev_module(e, attn_vit_create(e->ctx, &vc, &m), &m, ""));
    ATTN_TRY(ev_input(e, "images", 1, 4, 4, &x));
    ATTN_TRY(ev_ready(e));
    int64_t G = vc.image_size / vc.patch; /* the module exists: no overflow */
    int64_t ys[2] = {x.shape[0], vc.num_classes},
            ws[4] = {vc.tf.num_encoder_layers, x.shape[0], vc.tf.nhead, G * G + 1};
    ATTN_TRY(ev_new(e, "out", 2, ys, &y));
    ATTN_TRY(attn_vit_forward(e->ctx, m, &x, NULL, &y));
    ATTN_TRY(ev_new(e, "cls_attn", 4, ws, &w));
    ATTN_TRY(attn_vit_attention(e->ctx, m, &x, NULL, &w));
    ATTN_TRY(ev_write(e, "out", &y));
    ATTN_TRY(ev_write(e, "cls_attn", &w));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.images", &x, &dx));
    ATTN_TRY(attn_vit_backward(e->ctx, m, &x, NULL, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "images", &dx));
    return ev_write_param_grads(e);
}

/* ---- registration (the order of the table is EV_OPS in eval.h) ---------------------------- */

EV_OP(vit_self_attention, A_VIT, NULL, I_VIT);
EV_OP(gpt, A_GPT, NULL, I_GPT);
EV_OP(vit, A_VITM, NULL, I_VITM);
