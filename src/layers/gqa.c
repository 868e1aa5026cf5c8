/* Grouped-query causal self-attention with RoPE (HF LlamaAttention): its forward on the block's
 * weights, with or without a KV cache, and the public module attn_llama_attention_*.  The
 * attention itself is attn__sdpa (kernels.h: fused, row or split-KV decode kernels, chosen
 * there by size; GQA read in place, never repeated), or attn__sdpa_bf16 over a bf16 cache.
 * Backward: not yet. */
#include <string.h>

#include "../kernels/bf16.h"
#include "llm.h"

/* Appends the T new rows of k and v (row stride ld, kv head h at h*D) to the cache at pos. */
static void kv_append(const attn__kv *kv, const float *k, const float *v, int64_t ld, int64_t T,
                      int64_t Hkv, int64_t D) {
    for (int64_t h = 0; h < Hkv; h++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = (h * kv->cap + kv->pos + t) * D;
            const float *ks = k + t * ld + h * D, *vs = v + t * ld + h * D;
            if (kv->dtype == ATTN_BF16) {
                attn__bf16 *kd = (attn__bf16 *)kv->k + row, *vd = (attn__bf16 *)kv->v + row;
                for (int64_t d = 0; d < D; d++) {
                    kd[d] = attn__f32_to_bf16(ks[d]);
                    vd[d] = attn__f32_to_bf16(vs[d]);
                }
            } else {
                memcpy((float *)kv->k + row, ks, (size_t)D * sizeof(float));
                memcpy((float *)kv->v + row, vs, (size_t)D * sizeof(float));
            }
        }
}

attn_status attn__llama_attn_fwd(attn_ctx *ctx, const attn__llama_attn *a, const float *x,
                                 int64_t B, int64_t T, const attn__rope_cs *rope,
                                 attn__kv *kv, const float *r, float *out) {
    const int64_t M = B * T, H = a->H, Hkv = a->Hkv, D = a->D, HD = H * D, KD = Hkv * D;
    const int64_t ld = HD + 2 * KD; /* q, k, v of a token side by side */
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *qkv, *ao;
    ATTN_TRYG(attn__ws_f32(ctx, &qkv, M, ld, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &ao, M, HD, 1, 1));
    float *q = qkv, *k = qkv + HD, *v = qkv + HD + KD;
    {
        const attn__llm_w *w[3] = {&a->q, &a->k, &a->v};
        float *y[3] = {q, k, v};
        const int64_t ldy[3] = {ld, ld, ld};
        ATTN_TRYG(attn__llm_linear_n(ctx, 3, w, x, a->E, M, T, y, ldy, NULL));
    }
    attn__rope_rows(q, ld, M, H, D, rope->cs, rope->sn, a->rope_interleaved);
    attn__rope_rows(k, ld, M, Hkv, D, rope->cs, rope->sn, a->rope_interleaved);
    attn__sdpa_args s;
    if (!kv) {
        attn__sdpa_heads(&s, B, H, T, T, D, D, q, ld, k, ld, v, ld, ao, HD);
        s.Hkv = Hkv;
        s.causal = ATTN_CAUSAL_TOP_LEFT;
        ATTN_TRYG(attn__sdpa(ctx, &s));
    } else { /* B = 1: the new rows join the cache, the queries see it all (bottom-right) */
        const int64_t S = kv->pos + T;
        kv_append(kv, k, v, ld, T, Hkv, D);
        attn__sdpa_heads(&s, 1, H, T, S, D, D, q, ld, NULL, D, NULL, D, ao, HD);
        s.Hkv = Hkv;
        s.ks[0] = s.vs[0] = Hkv * kv->cap * D;
        s.ks[1] = s.vs[1] = kv->cap * D;
        s.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        if (kv->dtype == ATTN_BF16) { /* attn_sdpa's bf16 storage: q rounded as well */
            attn__bf16 *qb;
            ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(T * HD), sizeof *qb, (void **)&qb));
            for (int64_t t = 0; t < T; t++)
                for (int64_t i = 0; i < HD; i++) qb[t * HD + i] = attn__f32_to_bf16(q[t * ld + i]);
            s.qs[0] = T * HD, s.qs[2] = HD;
            ATTN_TRYG(attn__sdpa_bf16(ctx, &s, qb, kv->k, kv->v));
        } else {
            s.k = kv->k, s.v = kv->v;
            ATTN_TRYG(attn__sdpa(ctx, &s));
        }
    }
    ATTN_TRYG(attn__llm_linear(ctx, &a->o, ao, HD, M, T, out, a->E, r));
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- the module --------------------------------------------------------------------------- */
attn_status attn__llama_attn_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                 const attn_llm_config *c, attn__lin l[4]) {
    const int64_t E = c->hidden_size, HD = c->num_heads * c->head_dim,
                  KD = c->num_kv_heads * c->head_dim;
    const int b = c->attention_bias;
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "q_proj", &l[0], E, HD, b));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "k_proj", &l[1], E, KD, b));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "v_proj", &l[2], E, KD, b));
    return attn__lin_reg(ctx, m, prefix, "o_proj", &l[3], HD, E, b);
}

void attn__llama_attn_bind(attn__llama_attn *a, const attn_llm_config *c,
                           const attn__lin l[4]) {
    a->E = c->hidden_size, a->H = c->num_heads, a->Hkv = c->num_kv_heads, a->D = c->head_dim;
    attn__llm_w *w[4] = {&a->q, &a->k, &a->v, &a->o};
    for (int i = 0; i < 4; i++) *w[i] = attn__llm_w_f32(l[i].weight, l[i].bias, l[i].out, l[i].in);
}

typedef struct attn_mod {
    attn_llm_config c;
    attn__lin l[4]; /* q_proj, k_proj, v_proj, o_proj */
    attn__llama_attn a;
} attn_mod;

attn_status attn_llama_attention_create(attn_ctx *ctx, const attn_llm_config *cfg,
                                        attn_module **out) {
    if (!ctx || !cfg || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    attn_llm_config c;
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
