/* attn eval ops: the Llama-architecture pieces with transformers' module names (LlamaRMSNorm,
 * the rotary embedding, LlamaMLP, LlamaAttention, LlamaDecoderLayer), forward only.  Each op
 * with its attribute and input lists; see eval.h. */
#include <string.h>

#include "eval.h"

/* ---- RMSNorm, RoPE -------------------------------------------------------------------------- */
static const ev_attr A_RMS[] = {{"hidden_size", 'i', EV_OPT, NULL},
                                {"eps", 'f', "1e-6", NULL}, EV_END};
static const char *const I_RMS[] = {"hidden_states", "weight", NULL};

static attn_status op_rms_norm(ev *e) {
    attn_tensor x, w, y;
    ATTN_TRY(ev_input(e, "hidden_states", 1, 1, 4, &x));
    ATTN_TRY(ev_input(e, "weight", 1, 1, 1, &w));
    ATTN_TRY(ev_ready(e));
    const int64_t E = x.shape[x.ndim - 1];
    ATTN_FAIL_IF(ev_has(e, "hidden_size") && ev_i(e, "hidden_size") != E, e->ctx, ATTN_E_SHAPE,
                 "attribute 'hidden_size' (%lld) must equal the last dimension of the input "
                 "(%lld)", (long long)ev_i(e, "hidden_size"), (long long)E);
    const double eps = ev_f(e, "eps");
    ATTN_FAIL_IF(!(eps > 0.0) || eps > 3.4e38, e->ctx, ATTN_E_INVALID,
                 "attribute 'eps' must be positive, got %g", eps);
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_rms_norm(e->ctx, &x, &w, (float)eps, &y));
    return ev_write(e, "out", &y);
}

static const ev_attr A_ROPE[] = {{"rope_theta", 'f', "10000.0", NULL}, EV_END};
static const char *const I_ROPE[] = {"q", "k", "position_ids", NULL};

static attn_status op_rotary_embedding(ev *e) {
    attn_tensor q, k, pos, qo, ko;
    ATTN_TRY(ev_input(e, "q", 1, 4, 4, &q));
    ATTN_TRY(ev_input(e, "k", 1, 4, 4, &k));
    ATTN_TRY(ev_ids(e, "position_ids", 1, 2, &pos));
    ATTN_TRY(ev_ready(e));
    const double theta = ev_f(e, "rope_theta");
    ATTN_FAIL_IF(!(theta >= 1.0) || theta > 3.4e38, e->ctx, ATTN_E_INVALID,
                 "attribute 'rope_theta' must be at least 1, got %g", theta);
    ATTN_TRY(ev_new(e, "out", 4, q.shape, &qo));
    ATTN_TRY(ev_new(e, "k_embed", 4, k.shape, &ko));
    ATTN_TRY(attn_rope(e->ctx, &q, &pos, (float)theta, &qo));
    ATTN_TRY(attn_rope(e->ctx, &k, &pos, (float)theta, &ko));
    ATTN_TRY(ev_write(e, "out", &qo));
    return ev_write(e, "k_embed", &ko);
}

/* ---- the modules ---------------------------------------------------------------------------- */
/* LlamaConfig's fields the three modules read. */
static const ev_attr A_LLAMA[] = {
    {"hidden_size", 'i', EV_REQ, NULL},         {"intermediate_size", 'i', EV_OPT, NULL},
    {"num_attention_heads", 'i', EV_OPT, NULL}, {"num_key_value_heads", 'i', EV_OPT, NULL},
    {"head_dim", 'i', EV_OPT, NULL},            {"rms_norm_eps", 'f', "1e-6", NULL},
    {"rope_theta", 'f', "10000.0", NULL},       {"attention_bias", 'b', "false", NULL},
    {"mlp_bias", 'b', "false", NULL},           {"hidden_act", 'e', "silu", "silu"},
    {"attention_dropout", 'f', "0.0", NULL},    EV_END};
static const char *const I_MLP[] = {"x", NULL};
static const char *const I_ATTN[] = {"hidden_states", "position_ids", NULL};

/* The config from the attributes; need: 1 the MLP's, 2 the attention's, 3 both. */
static attn_status llama_cfg(ev *e, int need, attn_llm_config *c) {
    memset(c, 0, sizeof *c);
    c->hidden_size = ev_i(e, "hidden_size");
    static const char *const names[3] = {"intermediate_size", "num_attention_heads", NULL};
    for (int i = 0; i < 2; i++)
        ATTN_FAIL_IF((need & (1 << i)) && !ev_has(e, names[i]), e->ctx, ATTN_E_INVALID,
                     "missing attribute '%s'", names[i]);
    if (ev_has(e, "intermediate_size")) c->intermediate_size = ev_i(e, "intermediate_size");
    if (ev_has(e, "num_attention_heads")) c->num_heads = ev_i(e, "num_attention_heads");
    if (ev_has(e, "num_key_value_heads")) {
        c->num_kv_heads = ev_i(e, "num_key_value_heads");
        ATTN_FAIL_IF(c->num_kv_heads <= 0, e->ctx, ATTN_E_INVALID,
                     "attribute 'num_key_value_heads' must be positive");
    }
    if (ev_has(e, "head_dim")) {
        c->head_dim = ev_i(e, "head_dim");
        ATTN_FAIL_IF(c->head_dim <= 0, e->ctx, ATTN_E_INVALID,
                     "attribute 'head_dim' must be positive");
    }
    c->rms_norm_eps = ev_f(e, "rms_norm_eps");
    c->rope_theta = ev_f(e, "rope_theta");
    c->attention_bias = ev_b(e, "attention_bias");
    c->mlp_bias = ev_b(e, "mlp_bias");
    return ATTN_OK;
}

static attn_status op_llama_mlp(ev *e) {
    attn_llm_config c;
    ATTN_TRY(llama_cfg(e, 1, &c));
    attn_module *m = NULL;
    attn_tensor x, y;
    ATTN_TRY(ev_module(e, attn_llama_mlp_create(e->ctx, &c, &m), &m, ""));
    ATTN_TRY(ev_input(e, "x", 1, 2, 3, &x));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_llama_mlp_forward(e->ctx, m, &x, &y));
    return ev_write(e, "out", &y);
}

/* attention (layer 0) or the whole decoder layer (1) */
static attn_status llama_attn_or_layer(ev *e, int layer) {
    attn_llm_config c;
    ATTN_TRY(llama_cfg(e, layer ? 3 : 2, &c));
    attn_module *m = NULL;
    attn_tensor x, pos, y;
    ATTN_TRY(ev_module(e, layer ? attn_llama_layer_create(e->ctx, &c, &m)
                                : attn_llama_attention_create(e->ctx, &c, &m),
                       &m, ""));
    ATTN_TRY(ev_input(e, "hidden_states", 1, 2, 3, &x));
    memset(&pos, 0, sizeof pos);
    if (ev_present(e, "position_ids")) ATTN_TRY(ev_ids(e, "position_ids", 1, 2, &pos));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &x, &y));
    const attn_tensor *pp = pos.data ? &pos : NULL;
    ATTN_TRY(layer ? attn_llama_layer_forward(e->ctx, m, &x, pp, &y)
                   : attn_llama_attention_forward(e->ctx, m, &x, pp, &y));
    return ev_write(e, "out", &y);
}

static attn_status op_llama_attention(ev *e) { return llama_attn_or_layer(e, 0); }
static attn_status op_llama_decoder_layer(ev *e) { return llama_attn_or_layer(e, 1); }

/* ---- registration (the order of the table is EV_OPS in eval.h) ---------------------------- */

EV_OP(rms_norm, A_RMS, NULL, I_RMS);
EV_OP(rotary_embedding, A_ROPE, NULL, I_ROPE);
EV_OP(llama_mlp, A_LLAMA, NULL, I_MLP);
EV_OP(llama_attention, A_LLAMA, NULL, I_ATTN);
EV_OP(llama_decoder_layer, A_LLAMA, NULL, I_ATTN);
