/* The SwiGLU feed-forward of the Llama block (HF LlamaMLP): down(silu(gate(x)) * up(x)), its
 * forward on the block's weights (with a record for training), its backward, and the public
 * module attn_llama_mlp_*. */
#include <math.h>

#include "../kernels/ew.h"
#include "llm.h"
#include "pool.h"

typedef struct glu_job {
    const float *g, *u;
    float *h;
    int64_t F;
    int act;
    attn__glu_fn glu; /* the context's kernel (ew.h: one definition, every version its bits) */
} glu_job;

/* h = silu(g) * u on rows [begin, end) (h may be g); act 1: h = gelu_tanh(g) * u (GEGLU:
 * Gemma); both as ew.h defines them (attn__silu_as, attn__gelu_tanh_as: x / (1 + 2^t), the
 * library's one float formula of each, which attn__act1 also computes for tanh-GELU), then the
 * product */
static void glu_task(void *arg, int64_t begin, int64_t end, int tid) {
    const glu_job *j = arg;
    (void)tid;
    const int64_t i0 = begin * j->F;
    j->glu(j->g + i0, j->u + i0, j->h + i0, (end - begin) * j->F, j->act);
}

static glu_job glu_job_of(attn_ctx *ctx, const float *g, const float *u, float *h, int64_t F,
                          int act) {
    glu_job j = {g, u, h, F, act, ctx->kern.ew->glu ? ctx->kern.ew->glu : attn__glu_c};
    return j;
}

attn_status attn__llama_mlp_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__llama_mlp *p,
                                        int64_t M, attn__llama_mlp_saved *rec) {
    ATTN_TRY(attn__rec_f32(ctx, t, &rec->g, M, p->F, 1, 1));
    return attn__rec_f32(ctx, t, &rec->u, M, p->F, 1, 1);
}

attn_status attn__llama_mlp_fwd_rec(attn_ctx *ctx, const attn__llama_mlp *p, const float *x,
                                    int64_t M, int64_t T, const float *r, float *out,
                                    attn__llama_mlp_saved *rec) {
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *g, *u, *h;
    if (rec) {
        g = rec->g, u = rec->u;
        ATTN_TRYG(attn__ws_f32(ctx, &h, M, p->F, 1, 1));
    } else {
        ATTN_TRYG(attn__ws_f32(ctx, &g, M, p->F, 1, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &u, M, p->F, 1, 1));
        h = g; /* in place */
    }
    {
        const attn__weight *w[2] = {&p->gate, &p->up};
        float *y[2] = {g, u};
        const int64_t ldy[2] = {p->F, p->F};
        ATTN_TRYG(attn__matmul_n(ctx, 2, w, x, p->E, M, T, y, ldy, NULL));
    }
    {
        glu_job j = glu_job_of(ctx, g, u, h, p->F, p->act);
        attn__parallel_for(ctx, M, glu_task, &j);
    }
    const attn__epi e = attn__epi_res(r);
    ATTN_TRYG(attn__matmul(ctx, &p->down, h, p->F, M, T, &e, out, p->E));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__llama_mlp_fwd(attn_ctx *ctx, const attn__llama_mlp *p, const float *x,
                                int64_t B, int64_t T, const float *r, float *out) {
    return attn__llama_mlp_fwd_rec(ctx, p, x, B * T, T, r, out, NULL);
}

/* ---- backward ------------------------------------------------------------------------------
 * h = silu(g) * u:  du = dh * silu(g),  dg = (dh * u) * s (1 + g (1 - s)), s = sigmoid(g)
 * (torch's silu_backward), in float, in place: dh becomes dg, the h buffer du.  silu(g) and s
 * from the forward's 2^t (attn__silu_as's steps: du has the forward's silu bits). */
typedef struct dglu_job {
    const float *g, *u;
    float *dh, *hdu; /* in: dh, h (unused); out: dg, du */
    int64_t F;
} dglu_job;

static void dglu_task(void *arg, int64_t begin, int64_t end, int tid) {
    const dglu_job *j = arg;
    (void)tid;
    for (int64_t i = begin * j->F; i < end * j->F; i++) {
        const float x = j->g[i];
        const float t = x * ATTN__NLOG2E;
        const float e = attn__exp2_as(t);
        const float d = 1.0f + e;
        const float silu = x / d;
        const float sg = 1.0f / d;
        const float om = 1.0f - sg;
        const float xo = x * om;
        const float op = 1.0f + xo;
        const float ds = sg * op;
        const float dh = j->dh[i];
        const float dsilu = dh * j->u[i];
        j->hdu[i] = dh * silu;
        j->dh[i] = dsilu * ds;
    }
}

/* GEGLU's first half: hdu = dh gelu_tanh(g) (du), dh = dh u (the gelu's output gradient) */
static void dgeglu_task(void *arg, int64_t begin, int64_t end, int tid) {
    const dglu_job *j = arg;
    (void)tid;
    for (int64_t i = begin * j->F; i < end * j->F; i++) {
        const float dh = j->dh[i];
        j->hdu[i] = dh * attn__gelu_tanh_as(j->g[i]);
        j->dh[i] = dh * j->u[i];
    }
}

attn_status attn__llama_mlp_bwd(attn_ctx *ctx, const attn__llama_mlp *p, const attn__gmap *g,
                                const attn__llama_mlp_saved *rec, const float *x, int64_t M,
                                const float *dout, float *dx) {
    ATTN_TRY(attn__weight_trainable(ctx, &p->gate, "mlp.gate_proj"));
    ATTN_TRY(attn__weight_trainable(ctx, &p->up, "mlp.up_proj"));
    ATTN_TRY(attn__weight_trainable(ctx, &p->down, "mlp.down_proj"));
    const int64_t E = p->E, F = p->F;
    const float *Wg = p->gate.data, *Wu = p->up.data, *Wd = p->down.data;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *h, *dh;
    ATTN_TRYG(attn__ws_f32(ctx, &h, M, F, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dh, M, F, 1, 1));
    {
        /* down_proj's input, as the forward's */
        glu_job j = glu_job_of(ctx, rec->g, rec->u, h, F, p->act);
        attn__parallel_for(ctx, M, glu_task, &j);
    }
    ATTN_TRYG(attn__matmul_bwd(ctx, &p->down, h, F, dout, E, dh, F, 0, NULL, attn__g(g, Wd),
                               attn__g(g, p->down.bias), M));
    if (p->act == 1) { /* GEGLU: du = dh gelu(g), dg = gelu'(g) (dh u), as torch's autograd */
        dglu_job j = {rec->g, rec->u, dh, h, F};
        attn__parallel_for(ctx, M, dgeglu_task, &j);
        attn__act_bwd(ctx, ATTN_ACT_GELU_TANH, rec->g, dh, dh, M * F);
    } else {
        dglu_job j = {rec->g, rec->u, dh, h, F};
        attn__parallel_for(ctx, M, dglu_task, &j);
    }
    ATTN_TRYG(attn__matmul_bwd(ctx, &p->gate, x, E, dh, F, dx, E, 0, NULL, attn__g(g, Wg),
                               attn__g(g, p->gate.bias), M));
    ATTN_TRYG(attn__matmul_bwd(ctx, &p->up, x, E, h, F, dx, E, 1, NULL, attn__g(g, Wu),
                               attn__g(g, p->up.bias), M));
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
    p->gate = attn__weight_f32(l[0].weight, l[0].bias, l[0].out, l[0].in);
    p->up = attn__weight_f32(l[1].weight, l[1].bias, l[1].out, l[1].in);
    p->down = attn__weight_f32(l[2].weight, l[2].bias, l[2].out, l[2].in);
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
    ATTN_TRY(attn__llm_cfg_llama(ctx, cfg, "attn_llama_mlp_create"));
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

attn_status attn_llama_mlp_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                                    const attn_tensor *dout, attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_MLP, "attn_llama_mlp_backward"));
    const mlp_mod *q = m->impl;
    const attn__llm_part pt = {NULL, NULL, &q->p, NULL};
    return attn__llm_part_bwd(ctx, m, &pt, x, NULL, dout, dx, "attn_llama_mlp_backward");
}

attn_status attn_llama_mlp_forward_train(attn_ctx *ctx, const attn_module *m,
                                         const attn_tensor *x, attn_tensor *out,
                                         attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_MLP, "attn_llama_mlp_forward_train"));
    const mlp_mod *q = m->impl;
    const attn__llm_part pt = {NULL, NULL, &q->p, NULL};
    return attn__llm_part_fwd_train(ctx, m, &pt, x, NULL, out, saved,
                                    "attn_llama_mlp_forward_train");
}

attn_status attn_llama_mlp_backward_saved(attn_ctx *ctx, const attn_module *m,
                                          const attn_saved *saved, const attn_tensor *dout,
                                          attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_MLP, "attn_llama_mlp_backward_saved"));
    const mlp_mod *q = m->impl;
    const attn__llm_part pt = {NULL, NULL, &q->p, NULL};
    return attn__llm_part_bwd_saved(ctx, m, &pt, saved, dout, dx,
                                    "attn_llama_mlp_backward_saved");
}
