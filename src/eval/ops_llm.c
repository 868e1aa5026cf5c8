/* attn eval ops: the Llama-architecture pieces with transformers' module names (LlamaRMSNorm,
 * the rotary embedding, LlamaMLP, LlamaAttention, LlamaDecoderLayer) and the whole
 * LlamaForCausalLM (with HF's shifted cross-entropy when labels are given), each with its
 * backward.  Each op with its attribute and input lists; see eval.h. */
#include <math.h>
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
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx, dw;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.hidden_states", &x, &dx));
    ATTN_TRY(ev_grad_like(e, "grad.weight", &w, &dw));
    ATTN_TRY(attn_rms_norm_backward(e->ctx, &x, &w, (float)eps, &go, &dx, &dw));
    ATTN_TRY(ev_write_grad(e, "hidden_states", &dx));
    ATTN_TRY(ev_write_grad(e, "weight", &dw));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_ROPE[] = {{"rope_theta", 'f', "10000.0", NULL},
                                 {"rope_interleaved", 'b', "false", NULL}, EV_END};
/* grad.k_embed: with backward, the cotangent of k_embed (absent: zero) */
static const char *const I_ROPE[] = {"q", "k", "position_ids", "grad.k_embed", NULL};

static attn_status op_rotary_embedding(ev *e) {
    attn_tensor q, k, pos, qo, ko;
    ATTN_TRY(ev_input(e, "q", 1, 4, 4, &q));
    ATTN_TRY(ev_input(e, "k", 1, 4, 4, &k));
    ATTN_TRY(ev_ids(e, "position_ids", 1, 2, &pos));
    ATTN_TRY(ev_ready(e));
    const double theta = ev_f(e, "rope_theta");
    ATTN_FAIL_IF(!(theta >= 1.0) || theta > 3.4e38, e->ctx, ATTN_E_INVALID,
                 "attribute 'rope_theta' must be at least 1, got %g", theta);
    const unsigned fl = ev_b(e, "rope_interleaved") ? ATTN_ROPE_INTERLEAVED : 0;
    ATTN_TRY(ev_new(e, "out", 4, q.shape, &qo));
    ATTN_TRY(ev_new(e, "k_embed", 4, k.shape, &ko));
    ATTN_TRY(attn_rope_ex(e->ctx, &q, &pos, (float)theta, fl, &qo));
    ATTN_TRY(attn_rope_ex(e->ctx, &k, &pos, (float)theta, fl, &ko));
    ATTN_TRY(ev_write(e, "out", &qo));
    ATTN_TRY(ev_write(e, "k_embed", &ko));
    if (!e->bwd) {
        ATTN_FAIL_IF(ev_present(e, "grad.k_embed"), e->ctx, ATTN_E_INVALID,
                     "tensor 'grad.k_embed' is given but backward is not true");
        return ATTN_OK;
    }
    attn_tensor go, gk, dq, dk;
    ATTN_TRY(ev_grad_out_like(e, &qo, &go));
    ATTN_TRY(ev_input(e, "grad.k_embed", 0, 4, 4, &gk));
    ATTN_TRY(ev_grad_like(e, "grad.q", &q, &dq));
    ATTN_TRY(ev_grad_like(e, "grad.k", &k, &dk));
    ATTN_TRY(attn_rope_backward(e->ctx, &go, &pos, (float)theta, fl, &dq));
    if (gk.data) {
        char s1[96], s2[96];
        ATTN_FAIL_IF(attn__check_shape(e->ctx, &gk, "grad.k_embed", 4, k.shape) != ATTN_OK,
                     e->ctx, ATTN_E_SHAPE, "tensor 'grad.k_embed' has shape %s but 'k_embed' "
                     "has shape %s", attn__shape_str(&gk, s1, sizeof s1),
                     attn__shape_str(&ko, s2, sizeof s2));
        ATTN_TRY(attn_rope_backward(e->ctx, &gk, &pos, (float)theta, fl, &dk));
    }
    ATTN_TRY(ev_write_grad(e, "q", &dq));
    ATTN_TRY(ev_write_grad(e, "k", &dk));
    e->bwd_done = 1;
    return ATTN_OK;
}

/* ---- the modules ---------------------------------------------------------------------------- */
/* LlamaConfig's fields the three modules read. */
static const ev_attr A_LLAMA[] = {
    {"hidden_size", 'i', EV_REQ, NULL},         {"intermediate_size", 'i', EV_OPT, NULL},
    {"num_attention_heads", 'i', EV_OPT, NULL}, {"num_key_value_heads", 'i', EV_OPT, NULL},
    {"head_dim", 'i', EV_OPT, NULL},            {"rms_norm_eps", 'f', "1e-6", NULL},
    {"rope_theta", 'f', "10000.0", NULL},       {"attention_bias", 'b', "false", NULL},
    {"mlp_bias", 'b', "false", NULL},           {"hidden_act", 'e', "silu", "silu"},
    {"attention_dropout", 'f', "0.0", NULL},    {"rope_interleaved", 'b', "false", NULL},
    EV_END};
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
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.x", &x, &dx));
    ATTN_TRY(attn_llama_mlp_backward(e->ctx, m, &x, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "x", &dx));
    return ev_write_param_grads(e);
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
    ATTN_TRY(attn_llama_set_rope_interleaved(e->ctx, m, ev_b(e, "rope_interleaved")));
    ATTN_TRY(ev_new_like(e, &x, &y));
    const attn_tensor *pp = pos.data ? &pos : NULL;
    ATTN_TRY(layer ? attn_llama_layer_forward(e->ctx, m, &x, pp, &y)
                   : attn_llama_attention_forward(e->ctx, m, &x, pp, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.hidden_states", &x, &dx));
    ATTN_TRY(layer ? attn_llama_layer_backward(e->ctx, m, &x, pp, &go, &dx)
                   : attn_llama_attention_backward(e->ctx, m, &x, pp, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "hidden_states", &dx));
    return ev_write_param_grads(e);
}

static attn_status op_llama_attention(ev *e) { return llama_attn_or_layer(e, 0); }
static attn_status op_llama_decoder_layer(ev *e) { return llama_attn_or_layer(e, 1); }

/* ---- the whole model ------------------------------------------------------------------------ */
static const ev_attr A_LM[] = {{"vocab_size", 'i', EV_REQ, NULL},
                               {"num_hidden_layers", 'i', EV_REQ, NULL},
                               {"max_position_embeddings", 'i', "2048", NULL},
                               {"tie_word_embeddings", 'b', "false", NULL},
                               {"ignore_index", 'i', "-100", NULL}, EV_END};
static const char *const I_LM[] = {"input_ids", "labels", NULL};

/* LlamaForCausalLM(input_ids) -> out = logits [B, T, V]; with labels [B, T] also HF's loss
 * (logits row t against label t + 1, the mean over the labels that are not ignore_index): then
 * out = the 0-d loss and logits a second output, as the model returns them. */
static attn_status op_llama_for_causal_lm(ev *e) {
    attn_llm_config c;
    ATTN_TRY(llama_cfg(e, 3, &c));
    c.vocab_size = ev_i(e, "vocab_size");
    c.num_layers = ev_i(e, "num_hidden_layers");
    c.max_position_embeddings = ev_i(e, "max_position_embeddings");
    c.tie_word_embeddings = ev_b(e, "tie_word_embeddings");
    attn_tensor ids, lab, y;
    ATTN_TRY(attn_llm_create(e->ctx, &c, &e->llm)); /* freed by attn_eval */
    attn_module *m = attn_llm_module(e->llm);
    ATTN_TRY(ev_module(e, ATTN_OK, &m, ""));
    ATTN_TRY(ev_ids(e, "input_ids", 2, 2, &ids));
    memset(&lab, 0, sizeof lab);
    if (ev_present(e, "labels")) ATTN_TRY(ev_ids(e, "labels", 2, 2, &lab));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(attn_llama_set_rope_interleaved(e->ctx, m, ev_b(e, "rope_interleaved")));
    const int64_t B = ids.shape[0], T = ids.shape[1], V = c.vocab_size;
    if (lab.data) {
        char s1[96], s2[96];
        ATTN_FAIL_IF(lab.shape[0] != B || lab.shape[1] != T, e->ctx, ATTN_E_SHAPE,
                     "labels %s must have the shape of input_ids %s",
                     attn__shape_str(&lab, s1, sizeof s1), attn__shape_str(&ids, s2, sizeof s2));
    }
    const int64_t ys[3] = {B, T, V};
    ATTN_TRY(ev_claim(e, "logits", 3, ys));
    ATTN_TRY(ev_new(e, lab.data ? "logits" : "out", 3, ys, &y));
    attn_tensor go, dl, tgt;
    memset(&dl, 0, sizeof dl);
    if (e->bwd) { /* the loss is 0-d with labels, and so is its cotangent */
        if (lab.data) ATTN_TRY(ev_grad_out(e, 0, NULL, &go));
        else ATTN_TRY(ev_grad_out_like(e, &y, &go));
        ATTN_FAIL_IF(lab.data && !isfinite(*(const float *)go.data), e->ctx, ATTN_E_NONFINITE,
                     "tensor 'grad.out' is %g", (double)*(const float *)go.data);
    }
    if (lab.data) { /* targets: label t + 1 for row t, ignore_index for each sequence's last */
        const int64_t ii = ev_i(e, "ignore_index"), n1[1] = {B * T}, n2[2] = {B * T, 2};
        attn_tensor tb;
        ATTN_TRY(ev_new(e, "targets", 2, n2, &tb)); /* B*T int64 in 2 floats each */
        int64_t *tg = (int64_t *)tb.data;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t o = b * lab.stride[0] + (t + 1) * lab.stride[1];
                tg[b * T + t] = t + 1 == T            ? ii
                                : lab.dtype == ATTN_I64 ? ((const int64_t *)lab.data)[o]
                                                        : ((const int32_t *)lab.data)[o];
            }
        tgt = attn_tensor_make(tg, ATTN_I64, 1, n1);
        if (e->bwd) ATTN_TRY(ev_new(e, "dlogits", 3, ys, &dl));
    }
    const int64_t nid[1] = {B * T};
    attn_tensor ib; /* the model's ids: int32, contiguous (in a float buffer's room) */
    ATTN_TRY(ev_new(e, "ids", 1, nid, &ib));
    int32_t *id32 = (int32_t *)ib.data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t o = b * ids.stride[0] + t * ids.stride[1];
            const int64_t v = ids.dtype == ATTN_I64 ? ((const int64_t *)ids.data)[o]
                                                    : ((const int32_t *)ids.data)[o];
            ATTN_FAIL_IF(v < 0 || v >= V, e->ctx, ATTN_E_INVALID,
                         "token id %lld at [%lld, %lld] is out of range [0, %lld)", (long long)v,
                         (long long)b, (long long)t, (long long)V);
            id32[b * T + t] = (int32_t)v;
        }
    attn_saved *sv = NULL;
    if (e->bwd) ATTN_TRY(attn_saved_create(e->ctx, 0, &sv));
    attn_status st = e->bwd ? attn_llm_forward_train(e->ctx, e->llm, id32, B, T, y.data, sv)
                            : attn_llm_forward(e->ctx, e->llm, id32, B, T, y.data);
    if (!st && lab.data) {
        const int64_t n2[2] = {B * T, V};
        attn_tensor lg = ev_reshape(&y, 2, n2), dl2 = ev_reshape(&dl, 2, n2);
        float loss = 0.0f;
        st = attn_cross_entropy(e->ctx, &lg, &tgt, ev_i(e, "ignore_index"), 0.0f, &loss,
                                e->bwd ? &dl2 : NULL);
        if (!st) st = attn_st_writer_add(e->out, "out", ATTN_F32, 0, NULL, &loss);
        if (!st) st = ev_write(e, "logits", &y);
        if (!st && e->bwd) { /* the gradient of the mean, times the loss's cotangent */
            const float gs = *(const float *)go.data;
            float *d = dl.data;
            for (int64_t i = 0; i < B * T * V; i++) d[i] *= gs;
        }
    } else if (!st) {
        st = ev_write(e, "out", &y);
        if (e->bwd) dl = go;
    }
    if (!st && e->bwd) st = attn_llm_backward_saved(e->ctx, e->llm, sv, dl.data);
    if (!st && e->bwd) st = ev_write_param_grads(e);
    attn_saved_free(sv);
    return st;
}

/* ---- registration (the order of the table is EV_OPS in eval.h) ---------------------------- */

EV_OP(rms_norm, A_RMS, NULL, I_RMS);
EV_OP(rotary_embedding, A_ROPE, NULL, I_ROPE);
EV_OP(llama_mlp, A_LLAMA, NULL, I_MLP);
EV_OP(llama_attention, A_LLAMA, NULL, I_ATTN);
EV_OP(llama_decoder_layer, A_LLAMA, NULL, I_ATTN);
EV_OP(llama_for_causal_lm, A_LLAMA, A_LM, I_LM);
