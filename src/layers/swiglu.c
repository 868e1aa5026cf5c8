/* The SwiGLU feed-forward of the Llama block (HF LlamaMLP): down(silu(gate(x)) * up(x)), its
 * forward on the block's weights and the public module attn_llama_mlp_*.  Backward: not yet. */
#include <math.h>

#include "llm.h"
#include "pool.h"

typedef struct glu_job {
    float *g;
    const float *u;
    int64_t F;
} glu_job;

/* g = silu(g) * u on rows [begin, end): torch's silu x / (1 + exp(-x)), then the product,
 * each operation rounded */
static void glu_task(void *arg, int64_t begin, int64_t end, int tid) {
    const glu_job *j = arg;
    (void)tid;
    for (int64_t i = begin * j->F; i < end * j->F; i++) {
        const float x = j->g[i];
        const float e = expf(-x);
        const float d = 1.0f + e;
        const float s = x / d;
        j->g[i] = s * j->u[i];
    }
}

attn_status attn__llama_mlp_fwd(attn_ctx *ctx, const attn__llama_mlp *p, const float *x,
                                int64_t B, int64_t T, const float *r, float *out) {
    const int64_t M = B * T;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *g, *u;
    ATTN_TRYG(attn__ws_f32(ctx, &g, M, p->F, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &u, M, p->F, 1, 1));
    {
        const attn__llm_w *w[2] = {&p->gate, &p->up};
        float *y[2] = {g, u};
        const int64_t ldy[2] = {p->F, p->F};
        ATTN_TRYG(attn__llm_linear_n(ctx, 2, w, x, p->E, M, T, y, ldy, NULL));
    }
    {
        glu_job j = {g, u, p->F};
        attn__parallel_for(ctx, M, glu_task, &j);
    }
    ATTN_TRYG(attn__llm_linear(ctx, &p->down, g, p->F, M, T, out, p->E, r));
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- the module --------------------------------------------------------------------------- */
attn_status attn__llama_mlp_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                const attn_llm_config *c, attn__lin l[3]) {
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "gate_proj", &l[0], c->hidden_size,
                           c->intermediate_size, c->mlp_bias));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "up_proj", &l[1], c->hidden_size,
                           c->intermediate_size, c->mlp_bias));
    return attn__lin_reg(ctx, m, prefix, "down_proj", &l[2], c->intermediate_size,
                         c->hidden_size, c->mlp_bias);
}

void attn__llama_mlp_bind(attn__llama_mlp *p, const attn__lin l[3]) {
    p->E = l[0].in, p->F = l[0].out;
    p->gate = attn__llm_w_f32(l[0].weight, l[0].bias, l[0].out, l[0].in);
    p->up = attn__llm_w_f32(l[1].weight, l[1].bias, l[1].out, l[1].in);
    p->down = attn__llm_w_f32(l[2].weight, l[2].bias, l[2].out, l[2].in);
}

typedef struct mlp_mod {
    attn__lin l[3]; /* gate_proj, up_proj, down_proj */
    attn__llama_mlp p;
} mlp_mod;

attn_status attn_llama_mlp_create(attn_ctx *ctx, const attn_llm_config *cfg,
                                  attn_module **out) {
    if (!ctx || !cfg || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    attn_llm_config c;
    ATTN_TRY(attn__llm_cfg_block(ctx, cfg, 1, 0, "attn_llama_mlp_create", &c));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__LLAMA_MLP, sizeof(mlp_mod), &m));
    mlp_mod *q = m->impl;
    ATTN_TRY(attn__module_done(ctx, m, attn__llama_mlp_reg(ctx, m, "", &c, q->l), out));
    attn__llama_mlp_bind(&q->p, q->l);
    return ATTN_OK;
}

attn_status attn_llama_mlp_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                                   attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_MLP, "attn_llama_mlp_forward"));
    const mlp_mod *q = m->impl;
    attn_tensor xv, ov;
    ATTN_TRY(attn__llm_seq_views(ctx, x, out, m, "attn_llama_mlp_forward", &xv, &ov));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    const float *xp;
    float *op;
    int64_t B = 0, T = 0;
    ATTN_TRYG(attn__seq_in(ctx, &xv, "x", q->p.E, &B, &T, &xp));
    ATTN_TRYG(attn__seq_out(ctx, &ov, "out", B, T, q->p.E, &op));
    ATTN_TRYG(attn__llama_mlp_fwd(ctx, &q->p, xp, B, T, NULL, op));
    attn__seq_out_end(op, &ov);
done:
    attn__ws_release(ctx, mk);
    return st;
}
