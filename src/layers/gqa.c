/* The Llama family's attention as a module (attn_llama_attention_*): HF LlamaAttention's
 * parameters registered and bound as an attn__attention in the Llama form (the one attention
 * module, attention.c: grouped-query heads, RoPE, causal), and its entry points over the
 * modules' shared forward, backward and training pair (llama_layer.c). */
#include <string.h>

#include "llm.h"

/* ---- the module --------------------------------------------------------------------------- */
attn_status attn__llama_attn_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                 const attn_llm_config *c, attn__lin l[4]) {
    const int64_t E = c->hidden_size, HD = c->num_heads * c->head_dim,
                  KD = c->num_kv_heads * c->head_dim;
    const int b = c->attention_bias != 0; /* 2 (Qwen2): q/k/v only */
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "q_proj", &l[0], E, HD, b));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "k_proj", &l[1], E, KD, b));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "v_proj", &l[2], E, KD, b));
    return attn__lin_reg(ctx, m, prefix, "o_proj", &l[3], HD, E, c->attention_bias == 1);
}

void attn__llama_attn_bind(attn__attention *a, const attn_llm_config *c, const attn__lin l[4]) {
    attn__attention_llama(a, c->hidden_size, c->num_heads, c->num_kv_heads, c->head_dim);
    attn__weight *w[4] = {&a->q, &a->k, &a->v, &a->o};
    for (int i = 0; i < 4; i++) *w[i] = attn__weight_f32(l[i].weight, l[i].bias, l[i].out, l[i].in);
}

typedef struct attn_mod {
    attn_llm_config c;
    attn__lin l[4]; /* q_proj, k_proj, v_proj, o_proj */
    attn__attention a;
} attn_mod;

attn_status attn_llama_attention_create(attn_ctx *ctx, const attn_llm_config *cfg,
                                        attn_module **out) {
    if (!ctx || !cfg || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    attn_llm_config c;
    ATTN_TRY(attn__llm_cfg_llama(ctx, cfg, "attn_llama_attention_create"));
    ATTN_TRY(attn__llm_cfg_block(ctx, cfg, 0, 1, "attn_llama_attention_create", &c));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__LLAMA_ATTN, sizeof(attn_mod), &m));
    attn_mod *q = m->impl;
    q->c = c;
    ATTN_TRY(attn__module_done(ctx, m, attn__llama_attn_reg(ctx, m, "", &c, q->l), out));
    attn__llama_attn_bind(&q->a, &c, q->l);
    return ATTN_OK;
}

attn_status attn_llama_attention_forward(attn_ctx *ctx, const attn_module *m,
                                         const attn_tensor *x, const attn_tensor *positions,
                                         attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_ATTN, "attn_llama_attention_forward"));
    const attn_mod *q = m->impl;
    return attn__llm_module_run(ctx, m, NULL, &q->a, &q->c, x, positions, out,
                                "attn_llama_attention_forward");
}

attn_status attn_llama_attention_backward(attn_ctx *ctx, const attn_module *m,
                                          const attn_tensor *x, const attn_tensor *positions,
                                          const attn_tensor *dout, attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_ATTN, "attn_llama_attention_backward"));
    const attn_mod *q = m->impl;
    const attn__llm_part pt = {NULL, &q->a, NULL, &q->c};
    return attn__llm_part_bwd(ctx, m, &pt, x, positions, dout, dx,
                              "attn_llama_attention_backward");
}

attn_status attn_llama_attention_forward_train(attn_ctx *ctx, const attn_module *m,
                                               const attn_tensor *x,
                                               const attn_tensor *positions, attn_tensor *out,
                                               attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_ATTN,
                                 "attn_llama_attention_forward_train"));
    const attn_mod *q = m->impl;
    const attn__llm_part pt = {NULL, &q->a, NULL, &q->c};
    return attn__llm_part_fwd_train(ctx, m, &pt, x, positions, out, saved,
                                    "attn_llama_attention_forward_train");
}

attn_status attn_llama_attention_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                const attn_saved *saved,
                                                const attn_tensor *dout, attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_ATTN,
                                 "attn_llama_attention_backward_saved"));
    const attn_mod *q = m->impl;
    const attn__llm_part pt = {NULL, &q->a, NULL, &q->c};
    return attn__llm_part_bwd_saved(ctx, m, &pt, saved, dout, dx,
                                    "attn_llama_attention_backward_saved");
}

void attn__llama_attn_mod_interleave(attn_module *m, int on) {
    attn_mod *q = m->impl;
    q->a.rope_interleaved = on != 0;
}
