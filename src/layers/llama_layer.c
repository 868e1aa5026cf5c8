/* The Llama decoder layer (HF LlamaDecoderLayer) as a block (attn__block, block.c): pre-norm
 * RMSNorm, grouped-query attention with RoPE, SwiGLU feed-forward, two residuals; each layer's
 * block configuration from an attn_llm_config (the loaded model's and the trainable one's);
 * the public module attn_llama_layer_*, and what the three Llama modules share: the config
 * check, the argument checks, the RoPE rows of a forward, and their backward and training
 * forward (one record type for the three). */
#include <math.h>
#include <string.h>

#include "../kernels/ew.h"
#include "llm.h"
#include "pool.h"

/* ---- the configuration -------------------------------------------------------------------- */
void attn__llm_block_cfg(const attn_llm_config *c, int64_t i, attn__block *l) {
    const int64_t E = c->hidden_size;
    const float eps = (float)c->rms_norm_eps;
    l->E = E;
    l->pre = 1, l->glu = 1, l->cross = 0, l->p = 0.0f;
    l->sandwich = c->sandwich_norm != 0;
    for (int s = ATTN__SUB_SELF; s <= ATTN__SUB_FFN; s += ATTN__SUB_FFN) {
        attn__ln *n[2] = {&l->norm[s], &l->post[s]};
        for (int k = 0; k < 2; k++) n[k]->E = E, n[k]->eps = eps, n[k]->rms = 1, n[k]->bias = NULL;
    }
    attn__attention *a = &l->at[0]; /* attn__attention_llama's form, its weights kept */
    a->E = E, a->H = c->num_heads, a->Hkv = c->num_kv_heads, a->D = c->head_dim;
    a->kdim = a->vdim = E;
    a->seq_rows = 1, a->rope = 1;
    a->eps = eps;
    /* local layers: all but every sliding_period-th (Gemma 3: 5 local, then 1 global) */
    const int local =
        c->sliding_window > 0 && (c->sliding_period == 0 || (i + 1) % c->sliding_period != 0);
    a->window = local ? c->sliding_window : 0;
    a->rope_local = local && c->rope_theta_local != 0;
    l->mlp.E = E, l->mlp.F = c->intermediate_size, l->mlp.act = c->mlp_act;
}

static attn_status dim_ok(attn_ctx *ctx, const char *what, const char *name, int64_t v) {
    ATTN_FAIL_IF(v < 1 || v > ATTN__LLM_MAX_DIM, ctx, ATTN_E_INVALID,
                 "%s: %s %lld is out of range [1, %d]", what, name, (long long)v,
                 ATTN__LLM_MAX_DIM);
    return ATTN_OK;
}

attn_status attn__llm_cfg_llama(attn_ctx *ctx, const attn_llm_config *cfg, const char *what) {
    ATTN_FAIL_IF(cfg->qk_norm || cfg->sandwich_norm || cfg->mlp_act || cfg->embed_scale != 0 ||
                     cfg->sliding_window || cfg->sliding_period || cfg->rope_theta_local != 0 ||
                     cfg->rope_scaling || cfg->attention_bias == 2,
                 ctx, ATTN_E_UNSUPPORTED,
                 "%s: qk_norm, sandwich_norm, mlp_act, embed_scale, "
                 "sliding_window, sliding_period, rope_theta_local, rope_scaling and "
                 "attention_bias 2 are the settings of other families (Gemma 3, Qwen2/3, Mistral, "
                 "Llama 3's RoPE scaling): the single-layer modules are Llama's; a trainable "
                 "attn_llm (attn_llm_create, attn_llm_make_trainable) trains every family",
                 what);
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
        const float tl = (float)c.rope_theta_local;
        ATTN_FAIL_IF(c.rope_theta_local != 0 && (!(c.rope_theta_local >= 1) || !isfinite(tl)),
                     ctx, ATTN_E_INVALID, "%s: the local layers' rope_theta %g must be at least "
                     "1 and finite in float", what, c.rope_theta_local);
        ATTN_FAIL_IF(c.sliding_window < 0 || c.sliding_window > (1 << 24) ||
                         c.sliding_period < 0 || c.sliding_period > (1 << 24),
                     ctx, ATTN_E_INVALID, "%s: sliding_window %lld and its period %lld must be "
                     "in [0, 2^24]", what, (long long)c.sliding_window,
                     (long long)c.sliding_period);
        ATTN_FAIL_IF((unsigned)c.qk_norm > 1, ctx, ATTN_E_INVALID, "%s: qk_norm is 0 or 1",
                     what);
        ATTN_FAIL_IF((unsigned)c.attention_bias > 2, ctx, ATTN_E_INVALID,
                     "%s: attention_bias is 0, 1 (q/k/v/o_proj) or 2 (q/k/v_proj)", what);
        ATTN_FAIL_IF((unsigned)c.rope_scaling > 3, ctx, ATTN_E_INVALID,
                     "%s: rope_scaling is 0 (none), 1 (linear), 2 (llama3) or 3 (the file's "
                     "factors)", what);
        ATTN_FAIL_IF((c.rope_scaling == 1 || c.rope_scaling == 2) &&
                         !(c.rope_factor > 0 && isfinite((float)c.rope_factor)),
                     ctx, ATTN_E_INVALID, "%s: rope scaling factor %g must be positive and "
                     "finite in float", what, c.rope_factor);
        ATTN_FAIL_IF(c.rope_scaling == 2 &&
                         (!(c.rope_low_freq_factor > 0) ||
                          !(c.rope_high_freq_factor > c.rope_low_freq_factor) ||
                          !isfinite((float)c.rope_high_freq_factor) ||
                          c.rope_original_context < 1 || c.rope_original_context > (1 << 24)),
                     ctx, ATTN_E_INVALID, "%s: llama3 RoPE scaling needs 0 < low_freq_factor "
                     "(%g) < high_freq_factor (%g), finite, and original_max_position_embeddings "
                     "(%lld) in [1, 2^24]", what, c.rope_low_freq_factor,
                     c.rope_high_freq_factor, (long long)c.rope_original_context);
    }
    ATTN_FAIL_IF((unsigned)c.mlp_act > 1 || (unsigned)c.sandwich_norm > 1, ctx, ATTN_E_INVALID,
                 "%s: mlp_act and sandwich_norm are 0 or 1", what);
    ATTN_FAIL_IF(c.embed_scale < 0 || !isfinite((float)c.embed_scale), ctx, ATTN_E_INVALID,
                 "%s: embed_scale %g must be >= 0 and finite in float", what, c.embed_scale);
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

attn_status attn__llm_module_run(attn_ctx *ctx, const attn_module *m, const attn__block *blk,
                                 const attn__attention *a, const attn_llm_config *c,
                                 const attn_tensor *x, const attn_tensor *positions,
                                 attn_tensor *out, const char *fn) {
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
    if (blk) {
        const attn__block_io io = attn__block_io_causal(B, T, &rr, NULL);
        ATTN_TRYG(attn__block_fwd(ctx, blk, xp, op, &io, NULL));
    } else {
        const attn__attn_io io = attn__attn_io_causal(xp, B, T, &rr, NULL);
        ATTN_TRYG(attn__attention_fwd(ctx, a, &io, op, NULL, NULL, 0, NULL));
    }
    attn__seq_out_end(op, &ov);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- the modules' backward and training forward ------------------------------------------ */
/* The record of a Llama module's training forward (or of the recomputing backward, in the
 * workspace): the input, the RoPE rows and the part's own record. */
typedef struct part_rec {
    int ndim;                /* of the forward's x: 2 ([T, E]) or 3 */
    int64_t B, T;
    const float *x0;         /* the input [B*T, E] (a copy in a tape) */
    attn__rope_cs rope;      /* attention and layer: cos, sin [B*T, D/2] */
    attn__block_saved blk;
    attn__attn_saved at;
    attn__llama_mlp_saved mlp;
} part_rec;

static int64_t part_E(const attn__llm_part *pt) {
    return pt->blk ? pt->blk->E : pt->a ? pt->a->E : pt->p->E;
}

static attn_status part_alloc(attn_ctx *ctx, attn__tape *t, const attn__llm_part *pt, int64_t B,
                              int64_t T, part_rec *r) {
    if (pt->blk) return attn__block_saved_alloc(ctx, t, pt->blk, B, T, 0, &r->blk);
    if (pt->a)
        return attn__attn_saved_alloc(ctx, t, pt->a, B, T, T, 1, &r->at);
    return attn__llama_mlp_saved_alloc(ctx, t, pt->p, B * T, &r->mlp);
}

/* The part's forward of r->x0 into out with its record. */
static attn_status part_fwd(attn_ctx *ctx, const attn__llm_part *pt, part_rec *r, float *out) {
    if (pt->blk) {
        const attn__block_io io = attn__block_io_causal(r->B, r->T, &r->rope, NULL);
        return attn__block_fwd(ctx, pt->blk, r->x0, out, &io, &r->blk);
    }
    if (pt->a) {
        const attn__attn_io io = attn__attn_io_causal(r->x0, r->B, r->T, &r->rope, NULL);
        return attn__attention_fwd(ctx, pt->a, &io, out, NULL, NULL, 0, &r->at);
    }
    return attn__llama_mlp_fwd_rec(ctx, pt->p, r->x0, r->B * r->T, r->T, NULL, out, &r->mlp);
}

static attn_status part_bwd(attn_ctx *ctx, const attn__llm_part *pt, const attn__gmap *g,
                            const part_rec *r, const float *dout, float *dx) {
    if (pt->blk) {
        const attn__block_io io = attn__block_io_causal(r->B, r->T, &r->rope, NULL);
        return attn__block_bwd(ctx, pt->blk, g, &r->blk, &io, dout, dx, NULL);
    }
    if (pt->a) {
        const attn__attn_io io = attn__attn_io_causal(r->x0, r->B, r->T, &r->rope, NULL);
        return attn__attention_bwd(ctx, pt->a, g, &r->at, &io, dout, NULL, NULL, NULL, dx, NULL);
    }
    return attn__llama_mlp_bwd(ctx, pt->p, g, &r->mlp, r->x0, r->B * r->T, dout, dx);
}

/* t [T, E] as [1, T, E] (a view). */
static attn_tensor as3(const attn_tensor *t) {
    attn_tensor v = *t;
    if (t->ndim == 2) {
        v.ndim = 3;
        v.shape[2] = t->shape[1], v.stride[2] = t->stride[1];
        v.shape[1] = t->shape[0], v.stride[1] = t->stride[0];
        v.shape[0] = 1, v.stride[0] = t->shape[0] * t->stride[0];
    }
    return v;
}

/* dout (and dx, NULL or without data: not wanted) as 3-D views of the shape of the forward's x
 * ([B, T, E], or [T, E] when ndim is 2); dx may not overlap the inputs (ins) or m's parameters
 * and gradients. */
static attn_status grad_views(attn_ctx *ctx, const attn_module *m, const char *fn, int ndim,
                              int64_t B, int64_t T, int64_t E, const attn_tensor *dout,
                              const attn_tensor *dx, const attn_tensor *x,
                              const attn_tensor *positions, attn_tensor *dv, attn_tensor *dxv) {
    const int64_t s3[3] = {B, T, E};
    ATTN_TRY(attn__check(ctx, dout, "dout", ATTN_F32, ndim, ndim));
    ATTN_TRY(attn__check_shape(ctx, dout, "dout", ndim, ndim == 3 ? s3 : s3 + 1));
    const int want = dx && dx->data;
    if (want) {
        ATTN_TRY(attn__check(ctx, dx, "dx", ATTN_F32, ndim, ndim));
        ATTN_TRY(attn__check_shape(ctx, dx, "dx", ndim, ndim == 3 ? s3 : s3 + 1));
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dx, "dx", 0}},
                  ia[] = {{x, "x", 0},  {positions, "positions", 0}, {dout, "dout", 0},
                          {&P, "the module's parameters", 0}, {&G, "the module's gradients", 0}};
        ATTN_TRY(attn__check_outputs(ctx, fn, oa, 1, ia, 5));
    }
    ATTN_TRY(attn__check_finite(ctx, dout, "dout", 0));
    *dv = as3(dout);
    if (want) *dxv = as3(dx);
    else memset(dxv, 0, sizeof *dxv);
    return ATTN_OK;
}

/* The record's input and RoPE rows from x and positions, its buffers from t (NULL: the
 * workspace frame of the caller); r->x0 a copy of x in t (or x's own contiguous rows). */
static attn_status part_begin(attn_ctx *ctx, attn__tape *t, const attn__llm_part *pt,
                              const attn_tensor *xv, const attn_tensor *positions, part_rec *r) {
    const int64_t E = part_E(pt);
    int64_t B = 0, T = 0;
    const float *xp;
    ATTN_TRY(attn__seq_in(ctx, xv, "x", E, &B, &T, &xp));
    r->B = B, r->T = T;
    memset(&r->rope, 0, sizeof r->rope);
    if (!pt->p && !t) { /* in the caller's frame */
        ATTN_TRY(rope_for(ctx, positions, B, T, pt->c->head_dim, (float)pt->c->rope_theta,
                          &r->rope));
    } else if (!pt->p) { /* computed in the workspace, kept in the tape */
        const int64_t h = pt->c->head_dim / 2;
        attn__rope_cs rr;
        float *cs = NULL, *sn = NULL;
        attn__mark mk = attn__ws_mark(ctx);
        attn_status st = rope_for(ctx, positions, B, T, pt->c->head_dim,
                                  (float)pt->c->rope_theta, &rr);
        if (!st) st = attn__rec_f32(ctx, t, &cs, B * T, h, 1, 1);
        if (!st) st = attn__rec_f32(ctx, t, &sn, B * T, h, 1, 1);
        if (!st) {
            memcpy(cs, rr.cs, (size_t)(B * T * h) * sizeof(float));
            memcpy(sn, rr.sn, (size_t)(B * T * h) * sizeof(float));
        }
        attn__ws_release(ctx, mk);
        ATTN_TRY(st);
        r->rope.cs = cs, r->rope.sn = sn;
    }
    if (t) {
        float *c;
        ATTN_TRY(attn__rec_f32(ctx, t, &c, B * T, E, 1, 1));
        memcpy(c, xp, (size_t)(B * T * E) * sizeof(float));
        xp = c;
    }
    r->x0 = xp;
    return part_alloc(ctx, t, pt, B, T, r);
}

attn_status attn__llm_part_bwd(attn_ctx *ctx, const attn_module *m, const attn__llm_part *pt,
                               const attn_tensor *x, const attn_tensor *positions,
                               const attn_tensor *dout, attn_tensor *dx, const char *fn) {
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    ATTN_TRY(attn__check(ctx, x, "x", ATTN_F32, 2, 3));
    ATTN_FAIL_IF(pt->p && positions && positions->data, ctx, ATTN_E_INVALID,
                 "%s: the MLP takes no positions", fn);
    const attn_tensor xv = as3(x);
    const int64_t E = part_E(pt);
    attn_tensor dv, dxv;
    ATTN_FAIL_IF(xv.shape[2] != E, ctx, ATTN_E_SHAPE, "%s: x must be [B, T, %lld] or [T, %lld]",
                 fn, (long long)E, (long long)E);
    ATTN_TRY(grad_views(ctx, m, fn, x->ndim, xv.shape[0], xv.shape[1], E, dout, dx, x,
                        positions, &dv, &dxv));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    part_rec r;
    const float *dp;
    float *o, *dxp = NULL;
    ATTN_TRYG(part_begin(ctx, NULL, pt, &xv, positions, &r));
    ATTN_TRYG(attn__ws_f32(ctx, &o, r.B * r.T, E, 1, 1));
    ATTN_TRYG(part_fwd(ctx, pt, &r, o)); /* the forward again, recorded */
    ATTN_TRYG(attn__contig(ctx, &dv, &dp));
    if (dxv.data) ATTN_TRYG(attn__seq_out(ctx, &dxv, "dx", r.B, r.T, E, &dxp));
    ATTN_TRYG(part_bwd(ctx, pt, &g, &r, dp, dxp));
    if (dxp) attn__seq_out_end(dxp, &dxv);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__llm_part_fwd_train(attn_ctx *ctx, const attn_module *m,
                                     const attn__llm_part *pt, const attn_tensor *x,
                                     const attn_tensor *positions, attn_tensor *out,
                                     attn_saved *saved, const char *fn) {
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "%s: saved is NULL", fn);
    attn__saved_begin(saved);
    ATTN_FAIL_IF(pt->p && positions && positions->data, ctx, ATTN_E_INVALID,
                 "%s: the MLP takes no positions", fn);
    attn_tensor xv, ov;
    ATTN_TRY(seq_views(ctx, m, fn, x, positions, out, &xv, &ov));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    part_rec *r;
    float *op;
    ATTN_TRYG(attn__tape_alloc(ctx, &saved->tape, 1, sizeof *r, (void **)&r));
    r->ndim = x->ndim;
    ATTN_TRYG(part_begin(ctx, &saved->tape, pt, &xv, positions, r));
    ATTN_TRYG(attn__seq_out(ctx, &ov, "out", r->B, r->T, part_E(pt), &op));
    ATTN_TRYG(part_fwd(ctx, pt, r, op));
    attn__seq_out_end(op, &ov);
    attn__saved_end(saved, m, r);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__llm_part_bwd_saved(attn_ctx *ctx, const attn_module *m,
                                     const attn__llm_part *pt, const attn_saved *saved,
                                     const attn_tensor *dout, attn_tensor *dx, const char *fn) {
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    part_rec *r;
    ATTN_TRY(attn__saved_get(ctx, saved, m, fn, (void **)&r));
    attn_tensor dv, dxv;
    const int64_t E = part_E(pt);
    ATTN_TRY(grad_views(ctx, m, fn, r->ndim, r->B, r->T, E, dout, dx, NULL, NULL, &dv, &dxv));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    const float *dp;
    float *dxp = NULL;
    ATTN_TRYG(attn__contig(ctx, &dv, &dp));
    if (dxv.data) ATTN_TRYG(attn__seq_out(ctx, &dxv, "dx", r->B, r->T, E, &dxp));
    ATTN_TRYG(part_bwd(ctx, pt, &g, r, dp, dxp));
    if (dxp) attn__seq_out_end(dxp, &dxv);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- the module --------------------------------------------------------------------------- */
typedef struct layer_mod {
    attn_llm_config c;
    attn__lin attn[4], mlp[3];
    float *ln1, *ln2;
    attn__block blk;
} layer_mod;

attn_status attn_llama_layer_create(attn_ctx *ctx, const attn_llm_config *cfg,
                                    attn_module **out) {
    if (!ctx || !cfg || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    attn_llm_config c;
    ATTN_TRY(attn__llm_cfg_llama(ctx, cfg, "attn_llama_layer_create"));
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
    attn__llama_attn_bind(&q->blk.at[0], &c, q->attn);
    attn__llama_mlp_bind(&q->blk.mlp, q->mlp);
    attn__llm_block_cfg(&c, 0, &q->blk);
    q->blk.norm[ATTN__SUB_SELF].weight = q->ln1, q->blk.norm[ATTN__SUB_FFN].weight = q->ln2;
    return ATTN_OK;
}

attn_status attn_llama_layer_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                                     const attn_tensor *positions, attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_LAYER, "attn_llama_layer_forward"));
    const layer_mod *q = m->impl;
    return attn__llm_module_run(ctx, m, &q->blk, NULL, &q->c, x, positions, out,
                                "attn_llama_layer_forward");
}

attn_status attn_llama_layer_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                                      const attn_tensor *positions, const attn_tensor *dout,
                                      attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_LAYER, "attn_llama_layer_backward"));
    const layer_mod *q = m->impl;
    const attn__llm_part pt = {&q->blk, NULL, NULL, &q->c};
    return attn__llm_part_bwd(ctx, m, &pt, x, positions, dout, dx, "attn_llama_layer_backward");
}

attn_status attn_llama_layer_forward_train(attn_ctx *ctx, const attn_module *m,
                                           const attn_tensor *x, const attn_tensor *positions,
                                           attn_tensor *out, attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_LAYER, "attn_llama_layer_forward_train"));
    const layer_mod *q = m->impl;
    const attn__llm_part pt = {&q->blk, NULL, NULL, &q->c};
    return attn__llm_part_fwd_train(ctx, m, &pt, x, positions, out, saved,
                                    "attn_llama_layer_forward_train");
}

attn_status attn_llama_layer_backward_saved(attn_ctx *ctx, const attn_module *m,
                                            const attn_saved *saved, const attn_tensor *dout,
                                            attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_LAYER, "attn_llama_layer_backward_saved"));
    const layer_mod *q = m->impl;
    const attn__llm_part pt = {&q->blk, NULL, NULL, &q->c};
    return attn__llm_part_bwd_saved(ctx, m, &pt, saved, dout, dx,
                                    "attn_llama_layer_backward_saved");
}

void attn__llama_layer_mod_interleave(attn_module *m, int on) {
    layer_mod *q = m->impl;
    q->blk.at[0].rope_interleaved = on != 0;
}
