/* Grouped-query causal self-attention with RoPE (HF LlamaAttention): its forward on the block's
 * weights, with or without a KV cache, and the public module attn_llama_attention_*.  The
 * attention itself is attn__sdpa (kernels.h: fused, row or split-KV decode kernels, chosen
 * there by size; GQA read in place, never repeated), or attn__sdpa_bf16 over a bf16 cache.
 * Training: the forward without a cache keeps a record (llm.h) and the backward runs the
 * fused SDPA backward from the saved output and log-sum-exp (GQA: dK, dV summed over the
 * query heads of each key/value head by the kernel), RoPE's transpose, and the GEMMs of the
 * projections' gradients. */
#include <string.h>

#include "../kernels/bf16.h"
#include "../kernels/ew.h"
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

/* A local layer's window: each query sees its last `window` keys, itself included (HF's
 * sliding-window mask: key j for query i when i - window < j <= i). */
static void set_window(const attn__llama_attn *a, attn__sdpa_args *s) {
    if (a->window > 0) s->window = 1, s->window_left = a->window - 1, s->window_right = -1;
}

/* The attention of a forward without a cache: its arguments over the q, k, v rows (row
 * stride ld) and the output ao [M, H*D]. */
static void self_args(const attn__llama_attn *a, int64_t B, int64_t T, const float *qkv,
                      int64_t ld, float *ao, attn__sdpa_args *s) {
    const int64_t HD = a->H * a->D, KD = a->Hkv * a->D;
    attn__sdpa_heads(s, B, a->H, T, T, a->D, a->D, qkv, ld, qkv + HD, ld, qkv + HD + KD, ld, ao,
                     HD);
    s->Hkv = a->Hkv;
    s->causal = ATTN_CAUSAL_TOP_LEFT;
    set_window(a, s);
}

/* The forward; rec (only without kv): the record to fill. */
static attn_status attn_fwd(attn_ctx *ctx, const attn__llama_attn *a, const float *x, int64_t B,
                            int64_t T, const attn__rope_cs *rope, attn__kv *kv, const float *r,
                            float *out, attn__llama_attn_saved *rec) {
    const int64_t M = B * T, H = a->H, Hkv = a->Hkv, D = a->D, HD = H * D, KD = Hkv * D;
    const int64_t ld = HD + 2 * KD; /* q, k, v of a token side by side */
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *qkv, *ao;
    if (rec) {
        qkv = rec->qkv, ao = rec->ao;
    } else {
        ATTN_TRYG(attn__ws_f32(ctx, &qkv, M, ld, 1, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &ao, M, HD, 1, 1));
    }
    float *q = qkv, *k = qkv + HD, *v = qkv + HD + KD;
    {
        const attn__weight *w[3] = {&a->q, &a->k, &a->v};
        float *y[3] = {q, k, v};
        const int64_t ldy[3] = {ld, ld, ld};
        ATTN_TRYG(attn__matmul_n(ctx, 3, w, x, a->E, M, T, y, ldy, NULL));
    }
    if (a->q_norm) /* QK-norm (Gemma 3, Qwen3): each head's q and k, before RoPE */
        for (int64_t h = 0; h < H || h < Hkv; h++) {
            if (h < H) attn__rms_norm(ctx, q + h * D, ld, a->q_norm, a->eps, q + h * D, ld, M, D);
            if (h < Hkv)
                attn__rms_norm(ctx, k + h * D, ld, a->k_norm, a->eps, k + h * D, ld, M, D);
        }
    const int lr = a->rope_local && rope->lcs; /* a local layer's own RoPE base */
    const float *cs = lr ? rope->lcs : rope->cs, *sn = lr ? rope->lsn : rope->sn;
    attn__rope_rows(q, ld, M, H, D, cs, sn, a->rope_interleaved);
    attn__rope_rows(k, ld, M, Hkv, D, cs, sn, a->rope_interleaved);
    attn__sdpa_args s;
    if (!kv) {
        self_args(a, B, T, qkv, ld, ao, &s);
        if (rec) { /* the log-sum-exp of every row, for the fused backward */
            s.lse = rec->lse;
            s.ls[0] = H * T, s.ls[1] = T, s.ls[2] = 1;
        }
        ATTN_TRYG(attn__sdpa(ctx, &s));
    } else { /* B = 1: the new rows join the cache, the queries see it all (bottom-right) */
        const int64_t S = kv->pos + T;
        kv_append(kv, k, v, ld, T, Hkv, D);
        attn__sdpa_heads(&s, 1, H, T, S, D, D, q, ld, NULL, D, NULL, D, ao, HD);
        s.Hkv = Hkv;
        s.ks[0] = s.vs[0] = Hkv * kv->cap * D;
        s.ks[1] = s.vs[1] = kv->cap * D;
        s.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        set_window(a, &s);
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
    const attn__epi e = attn__epi_res(r);
    ATTN_TRYG(attn__matmul(ctx, &a->o, ao, HD, M, T, &e, out, a->E));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__llama_attn_fwd(attn_ctx *ctx, const attn__llama_attn *a, const float *x,
                                 int64_t B, int64_t T, const attn__rope_cs *rope,
                                 attn__kv *kv, const float *r, float *out) {
    return attn_fwd(ctx, a, x, B, T, rope, kv, r, out, NULL);
}

/* ---- training ------------------------------------------------------------------------------ */
attn_status attn__llama_attn_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__llama_attn *a,
                                         int64_t B, int64_t T, attn__llama_attn_saved *rec) {
    const int64_t M = B * T, HD = a->H * a->D, KD = a->Hkv * a->D;
    ATTN_TRY(attn__rec_f32(ctx, t, &rec->qkv, M, HD + 2 * KD, 1, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &rec->ao, M, HD, 1, 1));
    return attn__rec_f32(ctx, t, &rec->lse, B, a->H, T, 1);
}

attn_status attn__llama_attn_fwd_rec(attn_ctx *ctx, const attn__llama_attn *a, const float *x,
                                     int64_t B, int64_t T, const attn__rope_cs *rope,
                                     const float *r, float *out, attn__llama_attn_saved *rec) {
    return attn_fwd(ctx, a, x, B, T, rope, NULL, r, out, rec);
}

/*   out = r + o(ao),  ao = sdpa(rope(q), rope(k), v),  q, k, v = x Wq^T, x Wk^T, x Wv^T:
 *   dao = dout Wo;  dq, dk, dv = sdpa_bwd(dao) from the saved ao and lse (dk, dv summed over
 *   each group of query heads);  dq, dk through RoPE's transpose;
 *   dx = dq Wq + dk Wk + dv Wv;  dW* += d*^T (input),  db* += column sums. */
attn_status attn__llama_attn_bwd(attn_ctx *ctx, const attn__llama_attn *a, const attn__gmap *g,
                                 const attn__llama_attn_saved *rec, const float *x, int64_t B,
                                 int64_t T, const attn__rope_cs *rope, const float *dout,
                                 float *dx) {
    static const char *const nm[4] = {"self_attn.q_proj", "self_attn.k_proj",
                                      "self_attn.v_proj", "self_attn.o_proj"};
    const attn__weight *w[4] = {&a->q, &a->k, &a->v, &a->o};
    for (int i = 0; i < 4; i++) ATTN_TRY(attn__weight_trainable(ctx, w[i], nm[i]));
    const int64_t M = B * T, E = a->E, H = a->H, Hkv = a->Hkv, D = a->D, HD = H * D,
                  KD = Hkv * D, ld = HD + 2 * KD;
    const float *Wq = a->q.data, *Wk = a->k.data, *Wv = a->v.data, *Wo = a->o.data;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *dao, *dqkv;
    ATTN_TRYG(attn__ws_f32(ctx, &dao, M, HD, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dqkv, M, ld, 1, 1));
    ATTN_TRYG(attn__matmul_bwd(ctx, &a->o, rec->ao, HD, dout, E, dao, HD, 0, NULL, attn__g(g, Wo),
                               attn__g(g, a->o.bias), M));
    {
        attn__sdpa_args s;
        self_args(a, B, T, rec->qkv, ld, rec->ao, &s);
        /* a forward on the split-KV decode kernels (a few queries over many keys: never the
         * case here, where L = S) would have saved lse of another summation: recompute then */
        if (attn__sdpa_path(ctx, &s, 0) != ATTN__SDPA_DECODE) {
            s.lse = rec->lse;
            s.ls[0] = H * T, s.ls[1] = T, s.ls[2] = 1;
        }
        attn__sdpa_grads sg;
        memset(&sg, 0, sizeof sg);
        const int64_t qs[4] = {T * ld, D, ld, 1};
        sg.dout = dao, memcpy(sg.dos, s.os, sizeof sg.dos);
        sg.dq = dqkv, memcpy(sg.dqs, qs, sizeof sg.dqs);
        sg.dk = dqkv + HD, memcpy(sg.dks, qs, sizeof sg.dks);
        sg.dv = dqkv + HD + KD, memcpy(sg.dvs, qs, sizeof sg.dvs);
        ATTN_TRYG(attn__sdpa_bwd(ctx, &s, &sg));
    }
    attn__rope_rows_bwd(dqkv, ld, M, H, D, rope->cs, rope->sn, a->rope_interleaved);
    attn__rope_rows_bwd(dqkv + HD, ld, M, Hkv, D, rope->cs, rope->sn, a->rope_interleaved);
    ATTN_TRYG(attn__matmul_bwd(ctx, &a->q, x, E, dqkv, ld, dx, E, 0, NULL, attn__g(g, Wq),
                               attn__g(g, a->q.bias), M));
    ATTN_TRYG(attn__matmul_bwd(ctx, &a->k, x, E, dqkv + HD, ld, dx, E, 1, NULL, attn__g(g, Wk),
                               attn__g(g, a->k.bias), M));
    ATTN_TRYG(attn__matmul_bwd(ctx, &a->v, x, E, dqkv + HD + KD, ld, dx, E, 1, NULL, attn__g(g, Wv),
                               attn__g(g, a->v.bias), M));
done:
    attn__ws_release(ctx, mk);
    return st;
}

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

void attn__llama_attn_bind(attn__llama_attn *a, const attn_llm_config *c,
                           const attn__lin l[4]) {
    a->E = c->hidden_size, a->H = c->num_heads, a->Hkv = c->num_kv_heads, a->D = c->head_dim;
    attn__weight *w[4] = {&a->q, &a->k, &a->v, &a->o};
    for (int i = 0; i < 4; i++) *w[i] = attn__weight_f32(l[i].weight, l[i].bias, l[i].out, l[i].in);
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
