/* attn eval ops: layers (Transformer encoder/decoder layers and stacks, nn.Transformer,
 * feed-forward, positional encodings).  Each op with its attribute and input lists; see eval.h. */
#include <string.h>

#include "eval.h"

/* ---- transformer layers and stacks ----------------------------------------------------- */

static const ev_attr A_ENC_LAYER[] = {{"is_causal", 'b', "false", NULL}, EV_END};
static const char *const I_ENC_LAYER[] = {"src", "src_mask", "src_key_padding_mask", NULL};

static attn_status op_transformer_encoder_layer(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    attn_tensor src, o;
    attn_mask mask, kpm;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_module(e, attn_encoder_layer_create(e->ctx, &cfg, &m), &m, ""));
    ATTN_TRY(ev_input(e, "src", 1, 3, 3, &src));
    ATTN_TRY(ev_mask(e, "src_mask", ATTN_MASK_BLOCK, 3, &mask));
    ATTN_TRY(ev_mask(e, "src_key_padding_mask", ATTN_MASK_BLOCK, 2, &kpm));
    ATTN_TRY(ev_hint_needs_mask(e, "is_causal", &mask, "src_mask"));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &src, &o));
    attn_transformer_masks k = {.src_mask = opt_mask(&mask),
                                .src_key_padding_mask = opt_mask(&kpm),
                                .src_is_causal = ev_b(e, "is_causal")};
    ATTN_TRY(attn_encoder_layer_forward(e->ctx, m, &src, &k, NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, ds;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.src", &src, &ds));
    ATTN_TRY(attn_encoder_layer_backward(e->ctx, m, &src, &k, NULL, &go, &ds));
    ATTN_TRY(ev_write_grad(e, "src", &ds));
    return ev_write_param_grads(e);
}

static const ev_attr A_DEC_LAYER[] = {{"tgt_is_causal", 'b', "false", NULL},
                                      {"memory_is_causal", 'b', "false", NULL}, EV_END};
static const char *const I_DEC[] = {"tgt", "memory", "tgt_mask", "memory_mask",
                                    "tgt_key_padding_mask", "memory_key_padding_mask", NULL};

/* The decoder inputs shared by the decoder layer and stack; k points at the masks. */
typedef struct ev_dec_in {
    attn_tensor tgt, mem;
    attn_mask tm, mm, tkpm, mkpm;
    attn_transformer_masks k;
} ev_dec_in;

static attn_status ev_dec_inputs(ev *e, ev_dec_in *d) {
    ATTN_TRY(ev_input(e, "tgt", 1, 3, 3, &d->tgt));
    ATTN_TRY(ev_input(e, "memory", 1, 3, 3, &d->mem));
    ATTN_TRY(ev_mask(e, "tgt_mask", ATTN_MASK_BLOCK, 3, &d->tm));
    ATTN_TRY(ev_mask(e, "memory_mask", ATTN_MASK_BLOCK, 3, &d->mm));
    ATTN_TRY(ev_mask(e, "tgt_key_padding_mask", ATTN_MASK_BLOCK, 2, &d->tkpm));
    ATTN_TRY(ev_mask(e, "memory_key_padding_mask", ATTN_MASK_BLOCK, 2, &d->mkpm));
    ATTN_TRY(ev_hint_needs_mask(e, "tgt_is_causal", &d->tm, "tgt_mask"));
    ATTN_TRY(ev_hint_needs_mask(e, "memory_is_causal", &d->mm, "memory_mask"));
    /* the layer calls have no memory causal flag: apply it to our copy of memory_mask */
    if (ev_b(e, "memory_is_causal")) ev_make_causal(&d->mm, d->tgt.shape[1], d->mem.shape[1]);
    memset(&d->k, 0, sizeof d->k);
    d->k.tgt_mask = opt_mask(&d->tm);
    d->k.memory_mask = opt_mask(&d->mm);
    d->k.tgt_key_padding_mask = opt_mask(&d->tkpm);
    d->k.memory_key_padding_mask = opt_mask(&d->mkpm);
    d->k.tgt_is_causal = ev_b(e, "tgt_is_causal");
    return ATTN_OK;
}

static attn_status op_transformer_decoder_layer(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    ev_dec_in d;
    attn_tensor o;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_dec_inputs(e, &d)); /* first: a mask hint without its mask is the news */
    ATTN_TRY(ev_module(e, attn_decoder_layer_create(e->ctx, &cfg, &m), &m, ""));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &d.tgt, &o));
    ATTN_TRY(attn_decoder_layer_forward(e->ctx, m, &d.tgt, &d.mem, &d.k, NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dt, dm;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.tgt", &d.tgt, &dt));
    ATTN_TRY(ev_grad_like(e, "grad.memory", &d.mem, &dm));
    ATTN_TRY(attn_decoder_layer_backward(e->ctx, m, &d.tgt, &d.mem, &d.k, NULL, &go, &dt, &dm));
    ATTN_TRY(ev_write_grad(e, "tgt", &dt));
    ATTN_TRY(ev_write_grad(e, "memory", &dm));
    return ev_write_param_grads(e);
}

static const ev_attr A_ENCODER[] = {{"num_layers", 'i', EV_REQ, NULL},
                                    {"is_causal", 'b', "false", NULL},
                                    {"enable_nested_tensor", 'b', "true", NULL}, EV_END};
static const char *const I_ENCODER[] = {"src", "mask", "src_key_padding_mask", NULL};

static attn_status op_transformer_encoder(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    attn_tensor src, o;
    attn_mask mask, kpm;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_num_layers(e, "num_layers", &cfg.num_encoder_layers));
    /* TransformerEncoder's norm is optional: present iff its weight is in the file */
    int final_norm = ev_present(e, "norm.weight");
    ATTN_TRY(ev_module(e, attn_encoder_create(e->ctx, &cfg, final_norm, &m), &m, ""));
    ATTN_TRY(ev_input(e, "src", 1, 3, 3, &src));
    ATTN_TRY(ev_mask(e, "mask", ATTN_MASK_BLOCK, 3, &mask));
    ATTN_TRY(ev_mask(e, "src_key_padding_mask", ATTN_MASK_BLOCK, 2, &kpm));
    ATTN_TRY(ev_hint_needs_mask(e, "is_causal", &mask, "mask"));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &src, &o));
    /* TransformerEncoder's `mask` is the struct's src_mask */
    attn_transformer_masks k = {.src_mask = opt_mask(&mask),
                                .src_key_padding_mask = opt_mask(&kpm),
                                .src_is_causal = ev_b(e, "is_causal")};
    ATTN_TRY(attn_encoder_forward(e->ctx, m, &src, &k, NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, ds;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.src", &src, &ds));
    ATTN_TRY(attn_encoder_backward(e->ctx, m, &src, &k, NULL, &go, &ds));
    ATTN_TRY(ev_write_grad(e, "src", &ds));
    return ev_write_param_grads(e);
}

static const ev_attr A_DECODER[] = {{"num_layers", 'i', EV_REQ, NULL},
                                    {"tgt_is_causal", 'b', "false", NULL},
                                    {"memory_is_causal", 'b', "false", NULL}, EV_END};

static attn_status op_transformer_decoder(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    ev_dec_in d;
    attn_tensor o;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_num_layers(e, "num_layers", &cfg.num_decoder_layers));
    int final_norm = ev_present(e, "norm.weight");
    ATTN_TRY(ev_dec_inputs(e, &d));
    ATTN_TRY(ev_module(e, attn_decoder_create(e->ctx, &cfg, final_norm, &m), &m, ""));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &d.tgt, &o));
    ATTN_TRY(attn_decoder_forward(e->ctx, m, &d.tgt, &d.mem, &d.k, NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dt, dm;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.tgt", &d.tgt, &dt));
    ATTN_TRY(ev_grad_like(e, "grad.memory", &d.mem, &dm));
    ATTN_TRY(attn_decoder_backward(e->ctx, m, &d.tgt, &d.mem, &d.k, NULL, &go, &dt, &dm));
    ATTN_TRY(ev_write_grad(e, "tgt", &dt));
    ATTN_TRY(ev_write_grad(e, "memory", &dm));
    return ev_write_param_grads(e);
}

/* nn.Transformer: d_model and nhead default as in PyTorch (512, 8). */
static const ev_attr A_TRANSFORMER[] = {
    {"d_model", 'i', "512", NULL},           {"nhead", 'i', "8", NULL},
    {"dim_feedforward", 'i', "2048", NULL},  {"dropout", 'f', "0.1", NULL},
    {"activation", 'e', "relu", ACTS},       {"layer_norm_eps", 'f', "1e-5", NULL},
    {"norm_first", 'b', "false", NULL},      {"bias", 'b', "true", NULL},
    {"batch_first", 'b', "true", NULL},      {"num_encoder_layers", 'i', "6", NULL},
    {"num_decoder_layers", 'i', "6", NULL},  {"src_is_causal", 'b', "false", NULL},
    {"tgt_is_causal", 'b', "false", NULL},   {"memory_is_causal", 'b', "false", NULL},
    EV_END};
static const char *const I_TRANSFORMER[] = {"src", "tgt", "src_mask", "tgt_mask", "memory_mask",
                                            "src_key_padding_mask", "tgt_key_padding_mask",
                                            "memory_key_padding_mask", NULL};

static attn_status op_transformer(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    attn_tensor src, tgt, o;
    attn_mask sm, tm, mm, skpm, tkpm, mkpm;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_num_layers(e, "num_encoder_layers", &cfg.num_encoder_layers));
    ATTN_TRY(ev_num_layers(e, "num_decoder_layers", &cfg.num_decoder_layers));
    ATTN_TRY(ev_module(e, attn_transformer_create(e->ctx, &cfg, &m), &m, ""));
    ATTN_TRY(ev_input(e, "src", 1, 3, 3, &src));
    ATTN_TRY(ev_input(e, "tgt", 1, 3, 3, &tgt));
    ATTN_TRY(ev_mask(e, "src_mask", ATTN_MASK_BLOCK, 3, &sm));
    ATTN_TRY(ev_mask(e, "tgt_mask", ATTN_MASK_BLOCK, 3, &tm));
    ATTN_TRY(ev_mask(e, "memory_mask", ATTN_MASK_BLOCK, 3, &mm));
    ATTN_TRY(ev_mask(e, "src_key_padding_mask", ATTN_MASK_BLOCK, 2, &skpm));
    ATTN_TRY(ev_mask(e, "tgt_key_padding_mask", ATTN_MASK_BLOCK, 2, &tkpm));
    ATTN_TRY(ev_mask(e, "memory_key_padding_mask", ATTN_MASK_BLOCK, 2, &mkpm));
    ATTN_TRY(ev_hint_needs_mask(e, "src_is_causal", &sm, "src_mask"));
    ATTN_TRY(ev_hint_needs_mask(e, "tgt_is_causal", &tm, "tgt_mask"));
    ATTN_TRY(ev_hint_needs_mask(e, "memory_is_causal", &mm, "memory_mask"));
    /* the hints src_is_causal and memory_is_causal mark our copies of the masks they
     * describe (attn_transformer_masks has no memory_is_causal); tgt_is_causal is passed */
    if (ev_b(e, "src_is_causal")) ev_make_causal(&sm, src.shape[1], src.shape[1]);
    if (ev_b(e, "memory_is_causal")) ev_make_causal(&mm, tgt.shape[1], src.shape[1]);
    attn_transformer_masks k = {.src_mask = opt_mask(&sm),
                                .tgt_mask = opt_mask(&tm),
                                .memory_mask = opt_mask(&mm),
                                .src_key_padding_mask = opt_mask(&skpm),
                                .tgt_key_padding_mask = opt_mask(&tkpm),
                                .memory_key_padding_mask = opt_mask(&mkpm),
                                .tgt_is_causal = ev_b(e, "tgt_is_causal")};
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &tgt, &o));
    ATTN_TRY(attn_transformer_forward(e->ctx, m, &src, &tgt, &k, NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, ds, dt;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.src", &src, &ds));
    ATTN_TRY(ev_grad_like(e, "grad.tgt", &tgt, &dt));
    ATTN_TRY(attn_transformer_backward(e->ctx, m, &src, &tgt, &k, NULL, &go, &ds, &dt));
    ATTN_TRY(ev_write_grad(e, "src", &ds));
    ATTN_TRY(ev_write_grad(e, "tgt", &dt));
    return ev_write_param_grads(e);
}

/* ---- positional encodings ---------------------------------------------------------------- */

static const ev_attr A_PE[] = {
    {"d_model", 'i', EV_REQ, NULL},     {"max_len", 'i', "5000", NULL},
    {"mode", 'e', "add", "add|concat"}, {"length", 'i', EV_OPT, NULL},
    {"base", 'f', "10000", NULL},       EV_END};
static const char *const I_PE[] = {"x", NULL};

static attn_status op_positional_encoding(ev *e) {
    int64_t d = ev_i(e, "d_model"), max_len = ev_i(e, "max_len");
    attn_tensor x, pe, o;
    ATTN_FAIL_IF(d <= 0, e->ctx, ATTN_E_INVALID, "attribute 'd_model' must be positive, got %lld",
                 (long long)d);
    ATTN_FAIL_IF(max_len <= 0, e->ctx, ATTN_E_INVALID,
                 "attribute 'max_len' must be positive, got %lld", (long long)max_len);
    ATTN_TRY(ev_input(e, "x", 0, 3, 3, &x));
    ATTN_TRY(ev_ready(e));
    double base = ev_f(e, "base");
    ATTN_FAIL_IF(!(base > 1.0) || base > 3.4e38, e->ctx, ATTN_E_INVALID,
                 "attribute 'base' must be > 1, got %g", base);
    if (!x.data) {
        ATTN_FAIL_IF(!ev_has(e, "length"), e->ctx, ATTN_E_INVALID,
                     "without an input 'x' the attribute 'length' is required");
        int64_t n = ev_i(e, "length");
        ATTN_FAIL_IF(n <= 0 || n > max_len, e->ctx, ATTN_E_INVALID,
                     "attribute 'length' (%lld) must be in [1, max_len = %lld]", (long long)n,
                     (long long)max_len);
        int64_t ps[2] = {n, d};
        ATTN_TRY(ev_claim(e, "length x d_model", 2, ps));
        ATTN_TRY(ev_new(e, "out", 2, ps, &pe));
        ATTN_TRY(attn_sinusoidal_encoding(e->ctx, 0, (float)base, &pe));
        ATTN_TRY(ev_write(e, "out", &pe));
        if (e->bwd) {
            /* the table depends on no tensor: grad.out is checked, no gradient results */
            attn_tensor go;
            ATTN_TRY(ev_grad_out_like(e, &pe, &go));
            e->bwd_done = 1;
        }
        return ATTN_OK;
    }
    ATTN_FAIL_IF(ev_has(e, "length"), e->ctx, ATTN_E_INVALID,
                 "attribute 'length' is only used without an input 'x' (the length is x's)");
    int64_t B = x.shape[0], L = x.shape[1], E = x.shape[2];
    int concat = ev_e(e, "mode") == 1;
    ATTN_FAIL_IF(!concat && d != E, e->ctx, ATTN_E_SHAPE,
                 "attribute 'd_model' (%lld) must equal the last dimension of x (%lld) in mode "
                 "add", (long long)d, (long long)E);
    ATTN_FAIL_IF(L > max_len, e->ctx, ATTN_E_SHAPE,
                 "x has %lld positions, more than max_len (%lld)", (long long)L,
                 (long long)max_len);
    int64_t ps[2] = {L, d}, os[3] = {B, L, concat ? E + d : E};
    if (concat) ATTN_TRY(ev_claim(e, "the concatenated output (d_model columns)", 3, os));
    ATTN_TRY(ev_new(e, "pe", 2, ps, &pe));
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    ATTN_TRY(attn_sinusoidal_encoding(e->ctx, 0, (float)base, &pe));
    attn_pe_mode mode = concat ? ATTN_PE_CONCAT : ATTN_PE_ADD;
    ATTN_TRY(attn_positional_apply(e->ctx, mode, &x, &pe, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.x", &x, &dx));
    ATTN_TRY(attn_positional_apply_backward(e->ctx, mode, &go, &dx, NULL));
    ATTN_TRY(ev_write_grad(e, "x", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const char *const I_LEARNED_PE[] = {"x", "weight", NULL};

static attn_status op_learned_positional_encoding(ev *e) {
    attn_tensor x, wt, o;
    char s1[96], s2[96];
    ATTN_TRY(ev_input(e, "x", 1, 3, 3, &x));
    ATTN_TRY(ev_input(e, "weight", 1, 2, 2, &wt));
    ATTN_TRY(ev_ready(e));
    int64_t L = x.shape[1], E = x.shape[2];
    ATTN_FAIL_IF(wt.shape[1] != E, e->ctx, ATTN_E_SHAPE,
                 "weight %s does not match x %s: the widths differ",
                 attn__shape_str(&wt, s1, sizeof s1), attn__shape_str(&x, s2, sizeof s2));
    ATTN_FAIL_IF(L > wt.shape[0], e->ctx, ATTN_E_SHAPE,
                 "x has %lld positions but weight %s has only %lld rows", (long long)L,
                 attn__shape_str(&wt, s1, sizeof s1), (long long)wt.shape[0]);
    int64_t ps[2] = {L, E};
    attn_tensor rows = ev_reshape(&wt, 2, ps); /* the first L rows */
    ATTN_TRY(ev_new_like(e, &x, &o));
    ATTN_TRY(attn_positional_apply(e->ctx, ATTN_PE_ADD, &x, &rows, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    /* grad.weight: the batch sum in the first L rows, zero below */
    attn_tensor go, dx, dw;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.x", &x, &dx));
    ATTN_TRY(ev_grad_like(e, "grad.weight", &wt, &dw));
    ATTN_TRY(attn_positional_apply_backward(e->ctx, ATTN_PE_ADD, &go, &dx, &dw));
    ATTN_TRY(ev_write_grad(e, "x", &dx));
    ATTN_TRY(ev_write_grad(e, "weight", &dw));
    e->bwd_done = 1;
    return ATTN_OK;
}

/* ---- feed-forward, ViT, GPT ------------------------------------------------------------- */

static const ev_attr A_FFN[] = {{"d_model", 'i', EV_REQ, NULL}, {"d_ff", 'i', EV_REQ, NULL},
                                {"activation", 'e', "relu", ACTS},
                                {"dropout", 'f', "0.1", NULL}, EV_END};
static const char *const I_X[] = {"x", NULL};

static attn_status op_feed_forward(ev *e) {
    int64_t d = ev_i(e, "d_model");
    ATTN_FAIL_IF(d <= 0, e->ctx, ATTN_E_INVALID, "attribute 'd_model' must be positive, got %lld",
                 (long long)d);
    attn_transformer_config cfg = attn_transformer_defaults(d, 1);
    cfg.dim_feedforward = ev_i(e, "d_ff");
    cfg.activation = ev_acts[ev_e(e, "activation")];
    cfg.dropout = (float)ev_f(e, "dropout");
    attn_module *m = NULL;
    attn_tensor x, y;
    ATTN_TRY(ev_module(e, attn_ffn_create(e->ctx, &cfg, &m), &m, ""));
    ATTN_TRY(ev_input(e, "x", 1, 1, 4, &x));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_ffn_forward(e->ctx, m, &x, NULL, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.x", &x, &dx));
    ATTN_TRY(attn_ffn_backward(e->ctx, m, &x, NULL, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "x", &dx));
    return ev_write_param_grads(e);
}

/* ---- registration (the order of the table is EV_OPS in eval.h) ---------------------------- */

EV_OP(transformer_encoder_layer, A_TF_LAYER, A_ENC_LAYER, I_ENC_LAYER);
EV_OP(transformer_decoder_layer, A_TF_LAYER, A_DEC_LAYER, I_DEC);
EV_OP(transformer_encoder, A_TF_LAYER, A_ENCODER, I_ENCODER);
EV_OP(transformer_decoder, A_TF_LAYER, A_DECODER, I_DEC);
EV_OP(transformer, A_TRANSFORMER, NULL, I_TRANSFORMER);
EV_OP(positional_encoding, A_PE, NULL, I_PE);
EV_OP(learned_positional_encoding, A_NONE, NULL, I_LEARNED_PE);
EV_OP(feed_forward, A_FFN, NULL, I_X);
