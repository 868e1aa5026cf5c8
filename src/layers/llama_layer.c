/* The Llama decoder layer (HF LlamaDecoderLayer): pre-norm RMSNorm, grouped-query attention
 * with RoPE, SwiGLU feed-forward, two residuals.  Its forward on the block's weights (the
 * model's layers run it), the public module attn_llama_layer_*, and what the three Llama
 * modules share: the config check, the argument checks and the RoPE rows of a forward.
 * Backward: not yet. */
#include <math.h>
#include <string.h>

#include "../kernels/ew.h"
#include "llm.h"

attn_status attn__llama_block_fwd(attn_ctx *ctx, const attn__llama_block *l, float *x,
                                  int64_t B, int64_t T, const attn__rope_cs *rope,
                                  attn__kv *kv) {
    const int64_t M = B * T, E = l->E;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *n, *h;
    ATTN_TRYG(attn__ws_f32(ctx, &n, M, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &h, M, E, 1, 1));
    attn__rms_norm(ctx, x, E, l->ln1, l->eps, n, E, M, E);
    ATTN_TRYG(attn__llama_attn_fwd(ctx, &l->attn, n, B, T, rope, kv, x, h)); /* h = x + attn */
    attn__rms_norm(ctx, h, E, l->ln2, l->eps, n, E, M, E);
    ATTN_TRYG(attn__llama_mlp_fwd(ctx, &l->mlp, n, B, T, h, x)); /* x = h + mlp */
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- the configuration -------------------------------------------------------------------- */
static attn_status dim_ok(attn_ctx *ctx, const char *what, const char *name, int64_t v) {
    ATTN_FAIL_IF(v < 1 || v > ATTN__LLM_MAX_DIM, ctx, ATTN_E_INVALID,
                 "%s: %s %lld is out of range [1, %d]", what, name, (long long)v,
                 ATTN__LLM_MAX_DIM);
    return ATTN_OK;
}

attn_status attn__llm_cfg_block(attn_ctx *ctx, const attn_llm_config *cfg, int mlp, int attn,
                                const char *what, attn_llm_config *out) {
    attn_llm_config c = *cfg;
    ATTN_TRY(dim_ok(ctx, what, "hidden_size", c.hidden_size));
    if (mlp && attn) /* the norms are the layer's */
        ATTN_FAIL_IF(!(c.rms_norm_eps > 0) || !((float)c.rms_norm_eps > 0) ||
                         !isfinite((float)c.rms_norm_eps),
                     ctx, ATTN_E_INVALID,
                     "%s: rms_norm_eps %g must be positive and finite in float", what,
                     c.rms_norm_eps);
    if (mlp) ATTN_TRY(dim_ok(ctx, what, "intermediate_size", c.intermediate_size));
    if (attn) {
        ATTN_TRY(dim_ok(ctx, what, "num_attention_heads", c.num_heads));
        if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
        ATTN_TRY(dim_ok(ctx, what, "num_key_value_heads", c.num_kv_heads));
        ATTN_FAIL_IF(c.num_heads % c.num_kv_heads, ctx, ATTN_E_INVALID,
                     "%s: num_key_value_heads %lld does not divide num_attention_heads %lld",
                     what, (long long)c.num_kv_heads, (long long)c.num_heads);
        ATTN_FAIL_IF(c.hidden_size % c.num_heads, ctx, ATTN_E_INVALID,
                     "%s: num_attention_heads %lld does not divide hidden_size %lld", what,
                     (long long)c.num_heads, (long long)c.hidden_size);
        if (c.head_dim == 0) c.head_dim = c.hidden_size / c.num_heads;
        ATTN_TRY(dim_ok(ctx, what, "head_dim", c.head_dim));
        ATTN_FAIL_IF(c.head_dim % 2, ctx, ATTN_E_INVALID,
                     "%s: head_dim %lld is odd (RoPE rotates pairs)", what,
                     (long long)c.head_dim);
        ATTN_FAIL_IF(c.num_heads * c.head_dim > ATTN__LLM_MAX_DIM, ctx, ATTN_E_INVALID,
                     "%s: num_attention_heads x head_dim = %lld x %lld is over %d", what,
                     (long long)c.num_heads, (long long)c.head_dim, ATTN__LLM_MAX_DIM);
        /* theta >= 1 keeps every inv_freq <= 1 and every angle finite (positions <= 2^24) */
        const float th = (float)c.rope_theta;
        ATTN_FAIL_IF(!(c.rope_theta >= 1) || !isfinite(th), ctx, ATTN_E_INVALID,
                     "%s: rope_theta %g must be at least 1 and finite in float", what,
                     c.rope_theta);
    }
    *out = c;
    return ATTN_OK;
}

/* ---- what the modules share --------------------------------------------------------------- */
/* x [B, T, E] or [T, E] and out of the same shape as 3-D views; out may not overlap x, the
 * positions or the module's parameters. */
static attn_status seq_views(attn_ctx *ctx, const attn_module *m, const char *fn,
                             const attn_tensor *x, const attn_tensor *positions,
                             const attn_tensor *out, attn_tensor *xv, attn_tensor *ov) {
    ATTN_TRY(attn__check(ctx, x, "x", ATTN_F32, 2, 3));
    ATTN_TRY(attn__check(ctx, out, "out", ATTN_F32, 2, 3));
    ATTN_FAIL_IF(out->ndim != x->ndim, ctx, ATTN_E_SHAPE, "%s: out must have the shape of x",
                 fn);
    ATTN_TRY(attn__check_shape(ctx, out, "out", x->ndim, x->shape));
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}},
                  ia[] = {{x, "x", 0}, {positions, "positions", 0},
                          {&P, "the module's parameters", 0}};
        ATTN_TRY(attn__check_outputs(ctx, fn, oa, 1, ia, 3));
    }
    *xv = *x, *ov = *out;
    if (x->ndim == 2) { /* [T, E] as [1, T, E] */
        for (attn_tensor *t = xv; t; t = t == xv ? ov : NULL) {
            t->ndim = 3;
            t->shape[2] = t->shape[1], t->stride[2] = t->stride[1];
            t->shape[1] = t->shape[0], t->stride[1] = t->stride[0];
            t->shape[0] = 1, t->stride[0] = t->shape[1] * t->stride[1];
        }
    }
    return ATTN_OK;
}

attn_status attn__llm_seq_views(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *out,
                                const attn_module *m, const char *fn, attn_tensor *xv,
                                attn_tensor *ov) {
    return seq_views(ctx, m, fn, x, NULL, out, xv, ov);
}

/* cos/sin rows of positions ([B, T], [T] or NULL: 0 .. T-1) for head dimension D. */
static attn_status rope_for(attn_ctx *ctx, const attn_tensor *positions, int64_t B, int64_t T,
                            int64_t D, float theta, attn__rope_cs *rr) {
    const int64_t M = B * T, h = D / 2;
    float *inv, *cs, *sn;
    int64_t *pos;
    ATTN_TRY(attn__ws_f32(ctx, &inv, h, 1, 1, 1));
    ATTN_TRY(attn__ws_f32(ctx, &cs, M, h, 1, 1));
    ATTN_TRY(attn__ws_f32(ctx, &sn, M, h, 1, 1));
    ATTN_TRY(attn__ws_alloc(ctx, (size_t)M, sizeof *pos, (void **)&pos));
    if (positions && positions->data) {
        ATTN_FAIL_IF(positions->dtype != ATTN_I32 && positions->dtype != ATTN_I64, ctx,
                     ATTN_E_DTYPE, "positions must be I32 or I64");
        ATTN_TRY(attn__check(ctx, positions, "positions", positions->dtype, 1, 2));
        const int pb = positions->ndim == 2;
        const int64_t want[2] = {B, T};
        ATTN_TRY(attn__check_shape(ctx, positions, "positions", positions->ndim,
                                   pb ? want : want + 1));
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t o = (pb ? b * positions->stride[0] : 0) +
                                  t * positions->stride[positions->ndim - 1];
                const int64_t p = positions->dtype == ATTN_I64
                                      ? ((const int64_t *)positions->data)[o]
                                      : ((const int32_t *)positions->data)[o];
                ATTN_FAIL_IF(p < 0 || p > 16777216, ctx, ATTN_E_INVALID,
                             "position %lld at [%lld, %lld] is outside [0, 2^24]", (long long)p,
                             (long long)b, (long long)t);
                pos[b * T + t] = p;
            }
    } else {
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) pos[b * T + t] = t;
    }
    attn__rope_inv_freq(theta, D, inv);
    attn__rope_table(inv, D, pos, 0, M, cs, sn);
    rr->cs = cs, rr->sn = sn;
    return ATTN_OK;
}

attn_status attn__llm_module_run(attn_ctx *ctx, const attn_module *m,
                                 const attn__llama_block *blk, const attn__llama_attn *a,
                                 const attn_llm_config *c, const attn_tensor *x,
                                 const attn_tensor *positions, attn_tensor *out,
                                 const char *fn) {
    attn_tensor xv, ov;
    ATTN_TRY(seq_views(ctx, m, fn, x, positions, out, &xv, &ov));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    const float *xp;
    float *op;
    int64_t B = 0, T = 0;
    attn__rope_cs rr;
    ATTN_TRYG(attn__seq_in(ctx, &xv, "x", c->hidden_size, &B, &T, &xp));
    ATTN_TRYG(rope_for(ctx, positions, B, T, c->head_dim, (float)c->rope_theta, &rr));
    ATTN_TRYG(attn__seq_out(ctx, &ov, "out", B, T, c->hidden_size, &op));
    if (blk) { /* in place on out */
        memcpy(op, xp, (size_t)(B * T * c->hidden_size) * sizeof(float));
        ATTN_TRYG(attn__llama_block_fwd(ctx, blk, op, B, T, &rr, NULL));
    } else {
        ATTN_TRYG(attn__llama_attn_fwd(ctx, a, xp, B, T, &rr, NULL, NULL, op));
    }
    attn__seq_out_end(op, &ov);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- the module --------------------------------------------------------------------------- */
typedef struct layer_mod {
    attn_llm_config c;
    attn__lin attn[4], mlp[3];
    float *ln1, *ln2;
    attn__llama_block blk;
} layer_mod;

attn_status attn_llama_layer_create(attn_ctx *ctx, const attn_llm_config *cfg,
                                    attn_module **out) {
    if (!ctx || !cfg || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    attn_llm_config c;
    ATTN_TRY(attn__llm_cfg_block(ctx, cfg, 1, 1, "attn_llama_layer_create", &c));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__LLAMA_LAYER, sizeof(layer_mod), &m));
    layer_mod *q = m->impl;
    q->c = c;
    const int64_t E = c.hidden_size;
    attn_status st =
        attn__param_reg(ctx, m, "", "input_layernorm.weight", &q->ln1, 1.0f, 1, E, 0, 0);
    if (!st) st = attn__llama_attn_reg(ctx, m, "self_attn.", &c, q->attn);
    if (!st)
        st = attn__param_reg(ctx, m, "", "post_attention_layernorm.weight", &q->ln2, 1.0f, 1, E,
                             0, 0);
    if (!st) st = attn__llama_mlp_reg(ctx, m, "mlp.", &c, q->mlp);
    ATTN_TRY(attn__module_done(ctx, m, st, out));
    q->blk.E = E;
    q->blk.eps = (float)c.rms_norm_eps;
    q->blk.ln1 = q->ln1, q->blk.ln2 = q->ln2;
    attn__llama_attn_bind(&q->blk.attn, &c, q->attn);
    attn__llama_mlp_bind(&q->blk.mlp, q->mlp);
    return ATTN_OK;
}

attn_status attn_llama_layer_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                                     const attn_tensor *positions, attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_LAYER, "attn_llama_layer_forward"));
    const layer_mod *q = m->impl;
    return attn__llm_module_run(ctx, m, &q->blk, NULL, &q->c, x, positions, out,
                                "attn_llama_layer_forward");
}
