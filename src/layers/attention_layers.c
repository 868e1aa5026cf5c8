/* The seeds' attention layers: SelfAttention_v1/v2, CausalAttention and the seed's
 * MultiHeadAttention (seed 000), the general attention layer (seed 002) and additive
 * (Bahdanau) attention.  All run on the SDPA reference core. */
#include <math.h>
#include <string.h>

#include "layers.h"

/* ---- seed 000 ------------------------------------------------------------------------ */
typedef struct seed {
    attn_seed_attention_config cfg;
    int64_t H, D;
    float *Wq, *Wk, *Wv;      /* v1: raw [d_in, d_out] */
    attn__lin q, k, v, out_proj;
} seed;

attn_status attn_seed_attention_create(attn_ctx *ctx, const attn_seed_attention_config *cfg,
                                       attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(!cfg, ctx, ATTN_E_INVALID, "config is NULL");
    ATTN_FAIL_IF((unsigned)cfg->kind > ATTN_SEED_MULTIHEAD, ctx, ATTN_E_INVALID,
                 "unknown seed attention kind %d", (int)cfg->kind);
    ATTN_FAIL_IF(cfg->d_in <= 0 || cfg->d_out <= 0, ctx, ATTN_E_INVALID,
                 "d_in (%lld) and d_out (%lld) must be positive", (long long)cfg->d_in,
                 (long long)cfg->d_out);
    ATTN_FAIL_IF(!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f), ctx, ATTN_E_INVALID,
                 "dropout must be in [0, 1)");
    int64_t H = cfg->kind == ATTN_SEED_MULTIHEAD ? cfg->num_heads : 1;
    ATTN_FAIL_IF(H <= 0, ctx, ATTN_E_INVALID, "num_heads must be positive");
    ATTN_FAIL_IF(cfg->d_out % H != 0, ctx, ATTN_E_SHAPE,
                 "d_out %lld is not divisible by num_heads %lld: head_dim must divide d_out "
                 "exactly", (long long)cfg->d_out, (long long)H);
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__SEED, sizeof(seed), &m));
    seed *s = m->impl;
    s->cfg = *cfg;
    s->H = H;
    s->D = cfg->d_out / H;
    int64_t di = cfg->d_in, dout = cfg->d_out;
    attn_status st;
    if (cfg->kind == ATTN_SEED_SELF_V1) {
        /* nn.Parameter(torch.rand(d_in, d_out)) */
        float **raw[3] = {&s->Wq, &s->Wk, &s->Wv};
        const char *names[3] = {"W_query", "W_key", "W_value"};
        st = ATTN_OK;
        for (int i = 0; i < 3 && st == ATTN_OK; i++) {
            st = attn__param_reg(ctx, m, "", names[i], raw[i], 0, 2, di, dout, 0);
            attn__param_init_last(m, ATTN__INIT_UNIFORM01, 0);
        }
    } else {
        st = attn__lin_reg(ctx, m, "", "W_query", &s->q, di, dout, cfg->qkv_bias);
        if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "W_key", &s->k, di, dout, cfg->qkv_bias);
        if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "W_value", &s->v, di, dout, cfg->qkv_bias);
        if (st == ATTN_OK && cfg->kind == ATTN_SEED_MULTIHEAD)
            st = attn__lin_reg(ctx, m, "", "out_proj", &s->out_proj, dout, dout, 1);
    }
    return attn__module_done(ctx, m, st, out);
}

/* y[M, dout] = x[M, din] W[din, dout] (a raw matrix, not nn.Linear's transpose) */
static void matmul_raw(const float *x, const float *W, float *y, int64_t M, int64_t din,
                       int64_t dout) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < dout; j++) {
            double acc = 0;
            for (int64_t k = 0; k < din; k++) acc += (double)x[i * din + k] * W[k * dout + j];
            y[i * dout + j] = (float)acc;
        }
}

/* The seed modules' shared forward start: q, k, v [M, d_out] from x [M, d_in] (raw matrices
 * for SelfAttention_v1, nn.Linear otherwise) and the SDPA arguments over their head blocks
 * (causal for CausalAttention and the seed's MultiHeadAttention, dropout from rng). */
static attn_status seed_qkv(attn_ctx *ctx, const seed *s, const float *xp, int64_t B, int64_t T,
                            float *q, float *k, float *v, float *o, attn__rng *rng,
                            attn__sdpa_args *a) {
    int64_t M = B * T, di = s->cfg.d_in, dout = s->cfg.d_out, H = s->H, D = s->D;
    if (s->cfg.kind == ATTN_SEED_SELF_V1) {
        matmul_raw(xp, s->Wq, q, M, di, dout);
        matmul_raw(xp, s->Wk, k, M, di, dout);
        matmul_raw(xp, s->Wv, v, M, di, dout);
    } else {
        ATTN_TRY(attn__lin_fwd(ctx, &s->q, xp, q, M));
        ATTN_TRY(attn__lin_fwd(ctx, &s->k, xp, k, M));
        ATTN_TRY(attn__lin_fwd(ctx, &s->v, xp, v, M));
    }
    /* scale by sqrt of the key dimension of one head (keys.shape[-1] in the seed) */
    attn__sdpa_heads(a, B, H, T, T, D, D, q, dout, k, dout, v, dout, o, dout);
    if (s->cfg.kind >= ATTN_SEED_CAUSAL) a->causal = ATTN_CAUSAL_TOP_LEFT;
    if (s->cfg.kind >= ATTN_SEED_CAUSAL && rng->training && s->cfg.dropout > 0.0f) {
        a->dropout_p = s->cfg.dropout;
        a->seed = rng->seed;
        a->offset = rng->offset++;
        a->drop_base = attn__rng_base(rng, B * H * T * T);
    }
    return ATTN_OK;
}

attn_status attn_seed_attention_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                                        const attn_run *run, attn_tensor *out,
                                        attn_tensor *weights) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__SEED, "attn_seed_attention_forward"));
    const seed *s = m->impl;
    int64_t di = s->cfg.d_in, dout = s->cfg.d_out, H = s->H;
    ATTN_TRY(attn__check(ctx, x, "x", ATTN_F32, 2, 3));
    int b3 = x->ndim == 3;
    int64_t B = b3 ? x->shape[0] : 1, T = x->shape[b3];
    char s1[96];
    ATTN_FAIL_IF(x->shape[x->ndim - 1] != di, ctx, ATTN_E_SHAPE,
                 "x has shape %s, its last dimension must be d_in = %lld",
                 attn__shape_str(x, s1, sizeof s1), (long long)di);
    int64_t oshape[3] = {B, T, dout};
    ATTN_TRY(attn__check(ctx, out, "output", ATTN_F32, x->ndim, x->ndim));
    ATTN_TRY(attn__check_shape(ctx, out, "output", x->ndim, oshape + !b3));
    if (weights && weights->data) {
        int64_t wshape[4] = {B, H, T, T};
        ATTN_TRY(attn__check(ctx, weights, "weights", ATTN_F32, 4, 4));
        ATTN_TRY(attn__check_shape(ctx, weights, "weights", 4, wshape));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg o[] = {{out, "out", 0}, {weights, "weights", 0}},
                  in[] = {{x, "x", 0}, {&P, "the module's parameters", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_seed_attention_forward", o, 2, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "x", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp;
    float *q, *k, *v, *o, *y;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    rng.nb = B;
    int64_t M = B * T;
    ATTN_TRYG(attn__contig(ctx, x, &xp));
    ATTN_TRYG(attn__ws_f32(ctx, &q, M, dout, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &k, M, dout, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &v, M, dout, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &o, M, dout, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &y, M, dout, 1, 1));
    attn__sdpa_args a;
    ATTN_TRYG(seed_qkv(ctx, s, xp, B, T, q, k, v, o, &rng, &a));
    if (weights && weights->data) {
        a.w = weights->data;
        memcpy(a.ws, weights->stride, sizeof a.ws);
    }
    ATTN_TRYG(attn__sdpa(ctx, &a));
    if (s->cfg.kind == ATTN_SEED_MULTIHEAD) {
        ATTN_TRYG(attn__lin_fwd(ctx, &s->out_proj, o, y, M));
        attn__store(y, out);
    } else {
        attn__store(o, out);
    }
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- general attention layer (seed 002) --------------------------------------------- */
typedef struct general {
    attn_general_config cfg;
    attn__lin q, k, v;
} general;

attn_status attn_general_attention_create(attn_ctx *ctx, const attn_general_config *cfg,
                                          attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(!cfg, ctx, ATTN_E_INVALID, "config is NULL");
    ATTN_FAIL_IF(cfg->query_dim <= 0 || cfg->input_dim <= 0 || cfg->value_dim <= 0, ctx,
                 ATTN_E_INVALID, "query_dim, input_dim and value_dim must be positive");
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__GENERAL, sizeof(general), &m));
    general *g = m->impl;
    g->cfg = *cfg;
    attn_status st = ATTN_OK;
    if (cfg->self_attention)
        st = attn__lin_reg(ctx, m, "", "W_query", &g->q, cfg->input_dim, cfg->query_dim, cfg->bias);
    if (st == ATTN_OK)
        st = attn__lin_reg(ctx, m, "", "W_key", &g->k, cfg->input_dim, cfg->query_dim, cfg->bias);
    if (st == ATTN_OK)
        st = attn__lin_reg(ctx, m, "", "W_value", &g->v, cfg->input_dim, cfg->value_dim, cfg->bias);
    return attn__module_done(ctx, m, st, out);
}

/* Shared by the general and additive layers: validates an optional weights output [B, L, S]
 * and binds a mask broadcastable to [B, L, S] (as [B, 1, L, S]). */
static attn_status bls_outputs(attn_ctx *ctx, const attn_mask *mask, attn_tensor *weights,
                               int64_t B, int64_t L, int64_t S, attn__mask4 *m4) {
    if (weights && weights->data) {
        int64_t wshape[3] = {B, L, S};
        ATTN_TRY(attn__check(ctx, weights, "weights", ATTN_F32, 3, 3));
        ATTN_TRY(attn__check_shape(ctx, weights, "weights", 3, wshape));
    }
    memset(m4, 0, sizeof *m4);
    if (!mask || mask->kind == ATTN_MASK_NONE) return ATTN_OK;
    ATTN_FAIL_IF(mask->t.ndim > 3, ctx, ATTN_E_SHAPE, "attn_mask must be at most 3-D [B, L, S]");
    int64_t target[4] = {1, B, L, S};
    ATTN_TRY(attn__mask_bind(ctx, mask, "attn_mask", target, m4));
    /* the bound batch axis is dim 1 of the target: move it to dim 0 */
    m4->stride[0] = m4->stride[1];
    m4->stride[1] = 0;
    return ATTN_OK;
}

attn_status attn_general_attention_forward(attn_ctx *ctx, const attn_module *m,
                                           const attn_tensor *q, const attn_tensor *x,
                                           const attn_mask *mask, attn_tensor *out,
                                           attn_tensor *weights) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__GENERAL, "attn_general_attention_forward"));
    const general *g = m->impl;
    int64_t Dq = g->cfg.query_dim, Dx = g->cfg.input_dim, Dv = g->cfg.value_dim;
    int64_t B = 0, L = 0, S = 0;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *qin = NULL;
    float *qp, *kp, *vp, *op;
    attn_status st;
    attn__sdpa_args a;
    attn__mask4 m0;
    ATTN_TRYG(attn__seq_in(ctx, x, "inputs", Dx, &B, &S, &xp));
    if (g->cfg.self_attention) {
        L = S;
    } else {
        ATTN_TRYG(attn__seq_in(ctx, q, "query", Dq, &B, &L, &qin));
    }
    ATTN_TRYG(attn__seq_out(ctx, out, "output", B, L, Dv, &op));
    ATTN_TRYG(bls_outputs(ctx, mask, weights, B, L, S, &m0));
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg o[] = {{out, "out", 0}, {weights, "weights", 0}},
                  in[] = {{g->cfg.self_attention ? NULL : q, "q", 0}, {x, "x", 0},
                          {attn__mask_t(mask), "mask", 0}, {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_general_attention_forward", o, 2, in, 4));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &kp, B, S, Dq, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &vp, B, S, Dv, 1));
    ATTN_TRYG(attn__lin_fwd(ctx, &g->k, xp, kp, B * S)); /* K = X Wk^T */
    ATTN_TRYG(attn__lin_fwd(ctx, &g->v, xp, vp, B * S)); /* V = X Wv^T */
    if (g->cfg.self_attention) {
        ATTN_TRYG(attn__ws_f32(ctx, &qp, B, S, Dq, 1));
        ATTN_TRYG(attn__lin_fwd(ctx, &g->q, xp, qp, B * S)); /* Q = X Wq^T */
    } else {
        qp = (float *)qin;
    }
    /* one head; the scale is of the key/query dimension, not D_x */
    attn__sdpa_heads(&a, B, 1, L, S, Dq, Dv, qp, Dq, kp, Dq, vp, Dv, op, Dv);
    a.mask[0] = m0;
    if (weights && weights->data) {
        a.w = weights->data;
        a.ws[0] = weights->stride[0], a.ws[2] = weights->stride[1], a.ws[3] = weights->stride[2];
    }
    ATTN_TRYG(attn__sdpa(ctx, &a));
    attn__seq_out_end(op, out);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- additive (Bahdanau) attention --------------------------------------------------- */
typedef struct additive {
    int64_t Dq, Dk, A;
    attn__lin Wq, Wk, wv;
} additive;

attn_status attn_additive_attention_create(attn_ctx *ctx, int64_t query_dim, int64_t key_dim,
                                           int64_t hidden_dim, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(query_dim <= 0 || key_dim <= 0 || hidden_dim <= 0, ctx, ATTN_E_INVALID,
                 "query_size, key_size and num_hiddens must be positive");
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__ADDITIVE, sizeof(additive), &m));
    additive *d = m->impl;
    d->Dq = query_dim, d->Dk = key_dim, d->A = hidden_dim;
    attn_status st = attn__lin_reg(ctx, m, "", "W_q", &d->Wq, query_dim, hidden_dim, 0);
    if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "W_k", &d->Wk, key_dim, hidden_dim, 0);
    if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "w_v", &d->wv, hidden_dim, 1, 0);
    return attn__module_done(ctx, m, st, out);
}

attn_status attn_additive_attention_forward(attn_ctx *ctx, const attn_module *m,
                                            const attn_tensor *q, const attn_tensor *k,
                                            const attn_tensor *v, const attn_mask *mask,
                                            attn_tensor *out, attn_tensor *weights) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ADDITIVE, "attn_additive_attention_forward"));
    const additive *d = m->impl;
    int64_t B = 0, L = 0, S = 0, Dv = 0, A = d->A;
    attn__mark mk = attn__ws_mark(ctx);
    const float *qp, *kp, *vp;
    float *qa, *ka, *sc, *w, *op;
    attn__mask4 m4;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, q, "queries", d->Dq, &B, &L, &qp));
    ATTN_TRYG(attn__seq_in(ctx, k, "keys", d->Dk, &B, &S, &kp));
    ATTN_TRYG(attn__check(ctx, v, "values", ATTN_F32, 3, 3));
    Dv = v->shape[2];
    ATTN_TRYG(attn__seq_in(ctx, v, "values", Dv, &B, &S, &vp));
    ATTN_TRYG(attn__seq_out(ctx, out, "output", B, L, Dv, &op));
    ATTN_TRYG(bls_outputs(ctx, mask, weights, B, L, S, &m4));
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg o[] = {{out, "out", 0}, {weights, "weights", 0}},
                  in[] = {{q, "q", 0}, {k, "k", 0}, {v, "v", 0}, {attn__mask_t(mask), "mask", 0},
                          {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_additive_attention_forward", o, 2, in, 5));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &qa, B, L, A, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &ka, B, S, A, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &sc, S, 1, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &w, B, L, S, 1));
    ATTN_TRYG(attn__lin_fwd(ctx, &d->Wq, qp, qa, B * L));
    ATTN_TRYG(attn__lin_fwd(ctx, &d->Wk, kp, ka, B * S));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < L; i++) {
            const float *qi = qa + (b * L + i) * A;
            for (int64_t j = 0; j < S; j++) {
                const float *kj = ka + (b * S + j) * A;
                double acc = 0; /* score = w_v . tanh(W_q q + W_k k) */
                for (int64_t t = 0; t < A; t++) acc += (double)d->wv.weight[t] * tanhf(qi[t] + kj[t]);
                sc[j] = (float)acc;
                if (m4.kind != ATTN_MASK_NONE) sc[j] += attn__mask_at(&m4, b, 0, i, j);
            }
            float *wr = w + (b * L + i) * S;
            attn__softmax_row(sc, wr, S);
            float *orow = op + (b * L + i) * Dv;
            for (int64_t e = 0; e < Dv; e++) {
                double acc = 0;
                for (int64_t j = 0; j < S; j++) acc += (double)wr[j] * vp[(b * S + j) * Dv + e];
                orow[e] = (float)acc;
            }
        }
    attn__seq_out_end(op, out);
    if (weights && weights->data) attn__store(w, weights);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* =========================================================================================
 * Backward (recomputing the forward; see the Backward section of attn.h).
 * ======================================================================================= */

/* forward: y = x W (raw W [din, dout]).  dx (+=) = dy W^T; gW += x^T dy. */
static void matmul_raw_bwd(const float *x, const float *W, const float *dy, float *dx, float *gW,
                           int64_t M, int64_t din, int64_t dout) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < din; k++) {
            double acc = 0;
            for (int64_t j = 0; j < dout; j++) acc += (double)dy[i * dout + j] * W[k * dout + j];
            dx[i * din + k] += (float)acc;
        }
    for (int64_t k = 0; k < din; k++)
        for (int64_t j = 0; j < dout; j++) {
            double acc = 0;
            for (int64_t i = 0; i < M; i++) acc += (double)x[i * din + k] * dy[i * dout + j];
            gW[k * dout + j] += (float)acc;
        }
}

static void add_to(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}

attn_status attn_seed_attention_backward(attn_ctx *ctx, const attn_module *m,
                                         const attn_tensor *x, const attn_run *run,
                                         const attn_tensor *dout, attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__SEED, "attn_seed_attention_backward"));
    const seed *s = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t di = s->cfg.d_in, dout_dim = s->cfg.d_out, D = s->D;
    ATTN_TRY(attn__check(ctx, x, "x", ATTN_F32, 2, 3));
    int b3 = x->ndim == 3;
    int64_t B = b3 ? x->shape[0] : 1, T = x->shape[b3], M = B * T;
    char s1[96];
    ATTN_FAIL_IF(x->shape[x->ndim - 1] != di, ctx, ATTN_E_SHAPE,
                 "x has shape %s, its last dimension must be d_in = %lld",
                 attn__shape_str(x, s1, sizeof s1), (long long)di);
    int64_t oshape[3] = {B, T, dout_dim}, xshape[3] = {B, T, di};
    ATTN_TRY(attn__check(ctx, dout, "dout", ATTN_F32, x->ndim, x->ndim));
    ATTN_TRY(attn__check_shape(ctx, dout, "dout", x->ndim, oshape + !b3));
    if (dx && dx->data) {
        ATTN_TRY(attn__check(ctx, dx, "dx", ATTN_F32, x->ndim, x->ndim));
        ATTN_TRY(attn__check_shape(ctx, dx, "dx", x->ndim, xshape + !b3));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg o[] = {{dx, "dx", 0}},
                  in[] = {{x, "x", 0}, {dout, "dout", 0}, {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_seed_attention_backward", o, 1, in, 4));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "x", 0));
    ATTN_TRY(attn__check_finite(ctx, dout, "dout", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *dy;
    float *q, *k, *v, *o, *dq, *dk, *dv, *d_o, *dxp;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    rng.nb = B;
    ATTN_TRYG(attn__contig(ctx, x, &xp));
    ATTN_TRYG(attn__contig(ctx, dout, &dy));
    float **bufs[8] = {&q, &k, &v, &o, &dq, &dk, &dv, &d_o};
    for (int i = 0; i < 8; i++) ATTN_TRYG(attn__ws_f32(ctx, bufs[i], M, dout_dim, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dxp, M, di, 1, 1));
    attn__sdpa_args a;
    ATTN_TRYG(seed_qkv(ctx, s, xp, B, T, q, k, v, o, &rng, &a));
    int64_t str[4] = {T * dout_dim, D, dout_dim, 1};
    if (s->cfg.kind == ATTN_SEED_MULTIHEAD) {
        ATTN_TRYG(attn__sdpa(ctx, &a)); /* o is needed for out_proj's weight gradient */
        ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(s->out_proj.weight, NULL, dout_dim, dout_dim), o,
                                   dout_dim, dy, dout_dim, d_o, dout_dim, 0, NULL,
                                   attn__g(&g, s->out_proj.weight), attn__g(&g, s->out_proj.bias),
                                   M));
    } else {
        memcpy(d_o, dy, (size_t)(M * dout_dim) * sizeof(float));
    }
    attn__sdpa_grads sg;
    memset(&sg, 0, sizeof sg);
    sg.dout = d_o, sg.dq = dq, sg.dk = dk, sg.dv = dv;
    memcpy(sg.dos, str, sizeof str), memcpy(sg.dqs, str, sizeof str);
    memcpy(sg.dks, str, sizeof str), memcpy(sg.dvs, str, sizeof str);
    ATTN_TRYG(attn__sdpa_bwd(ctx, &a, &sg));
    memset(dxp, 0, (size_t)(M * di) * sizeof(float));
    if (s->cfg.kind == ATTN_SEED_SELF_V1) {
        matmul_raw_bwd(xp, s->Wq, dq, dxp, attn__g(&g, s->Wq), M, di, dout_dim);
        matmul_raw_bwd(xp, s->Wk, dk, dxp, attn__g(&g, s->Wk), M, di, dout_dim);
        matmul_raw_bwd(xp, s->Wv, dv, dxp, attn__g(&g, s->Wv), M, di, dout_dim);
    } else {
        /* x feeds three projections: its gradient is the sum of their input gradients */
        const attn__lin *ls[3] = {&s->q, &s->k, &s->v};
        float *ds[3] = {dq, dk, dv}, *tmp;
        ATTN_TRYG(attn__ws_f32(ctx, &tmp, M, di, 1, 1));
        for (int i = 0; i < 3; i++) {
            ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(ls[i]->weight, NULL, dout_dim, di), xp, di,
                                       ds[i], dout_dim, tmp, di, 0, NULL,
                                       attn__g(&g, ls[i]->weight), attn__g(&g, ls[i]->bias), M));
            add_to(dxp, tmp, M * di);
        }
    }
    if (dx && dx->data) attn__store(dxp, dx);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_general_attention_backward(attn_ctx *ctx, const attn_module *m,
                                            const attn_tensor *q, const attn_tensor *x,
                                            const attn_mask *mask, const attn_tensor *dout,
                                            attn_tensor *dq, attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__GENERAL, "attn_general_attention_backward"));
    const general *gn = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t Dq = gn->cfg.query_dim, Dx = gn->cfg.input_dim, Dv = gn->cfg.value_dim;
    int64_t B = 0, L = 0, S = 0;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *qin = NULL, *dy;
    float *qp, *kp, *vp, *op, *dqp, *dkp, *dvp, *dxp, *tmp, *dqo = NULL;
    attn_status st;
    attn__sdpa_args a;
    attn__mask4 m0;
    ATTN_TRYG(attn__seq_in(ctx, x, "inputs", Dx, &B, &S, &xp));
    if (gn->cfg.self_attention) L = S;
    else ATTN_TRYG(attn__seq_in(ctx, q, "query", Dq, &B, &L, &qin));
    ATTN_TRYG(attn__seq_in(ctx, dout, "dout", Dv, &B, &L, &dy));
    ATTN_TRYG(bls_outputs(ctx, mask, NULL, B, L, S, &m0));
    if (dx && dx->data) ATTN_TRYG(attn__seq_out(ctx, dx, "dx", B, S, Dx, &dxp));
    else ATTN_TRYG(attn__ws_f32(ctx, &dxp, B, S, Dx, 1));
    if (!gn->cfg.self_attention && dq && dq->data)
        ATTN_TRYG(attn__seq_out(ctx, dq, "dq", B, L, Dq, &dqo));
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg o[] = {{gn->cfg.self_attention ? NULL : dq, "dq", 0}, {dx, "dx", 0}},
                  in[] = {{gn->cfg.self_attention ? NULL : q, "q", 0}, {x, "x", 0},
                          {attn__mask_t(mask), "mask", 0}, {dout, "dout", 0},
                          {&P, "the module's parameters", 0}, {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_general_attention_backward", o, 2, in, 6));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &qp, B, L, Dq, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &kp, B, S, Dq, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &vp, B, S, Dv, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &op, B, L, Dv, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dqp, B, L, Dq, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dkp, B, S, Dq, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dvp, B, S, Dv, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &tmp, B, S, Dx, 1));
    ATTN_TRYG(attn__lin_fwd(ctx, &gn->k, xp, kp, B * S));
    ATTN_TRYG(attn__lin_fwd(ctx, &gn->v, xp, vp, B * S));
    if (gn->cfg.self_attention) ATTN_TRYG(attn__lin_fwd(ctx, &gn->q, xp, qp, B * S));
    else memcpy(qp, qin, (size_t)(B * L * Dq) * sizeof(float));
    attn__sdpa_heads(&a, B, 1, L, S, Dq, Dv, qp, Dq, kp, Dq, vp, Dv, op, Dv);
    a.mask[0] = m0;
    attn__sdpa_grads sg;
    memset(&sg, 0, sizeof sg);
    sg.dout = dy, memcpy(sg.dos, a.os, sizeof sg.dos);
    sg.dq = dqp, memcpy(sg.dqs, a.qs, sizeof sg.dqs);
    sg.dk = dkp, memcpy(sg.dks, a.ks, sizeof sg.dks);
    sg.dv = dvp, memcpy(sg.dvs, a.vs, sizeof sg.dvs);
    ATTN_TRYG(attn__sdpa_bwd(ctx, &a, &sg));
    /* inputs feed W_key, W_value (and W_query for self-attention) */
    ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(gn->k.weight, NULL, Dq, Dx), xp, Dx, dkp, Dq, dxp, Dx,
                               0, NULL, attn__g(&g, gn->k.weight), attn__g(&g, gn->k.bias), B * S));
    ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(gn->v.weight, NULL, Dv, Dx), xp, Dx, dvp, Dv, tmp, Dx,
                               0, NULL, attn__g(&g, gn->v.weight), attn__g(&g, gn->v.bias), B * S));
    add_to(dxp, tmp, B * S * Dx);
    if (gn->cfg.self_attention) {
        ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(gn->q.weight, NULL, Dq, Dx), xp, Dx, dqp, Dq, tmp,
                                   Dx, 0, NULL, attn__g(&g, gn->q.weight), attn__g(&g, gn->q.bias),
                                   B * S));
        add_to(dxp, tmp, B * S * Dx);
    } else if (dqo) {
        memcpy(dqo, dqp, (size_t)(B * L * Dq) * sizeof(float));
        attn__seq_out_end(dqo, dq);
    }
    if (dx && dx->data) attn__seq_out_end(dxp, dx);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_additive_attention_backward(attn_ctx *ctx, const attn_module *m,
                                             const attn_tensor *q, const attn_tensor *k,
                                             const attn_tensor *v, const attn_mask *mask,
                                             const attn_tensor *dout, attn_tensor *dq,
                                             attn_tensor *dk, attn_tensor *dv) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__ADDITIVE, "attn_additive_attention_backward"));
    const additive *d = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t B = 0, L = 0, S = 0, Dv = 0, A = d->A;
    attn__mark mk = attn__ws_mark(ctx);
    const float *qp, *kp, *vp, *dy;
    float *qa, *ka, *dqa, *dka, *sc, *w, *dw, *dqo = NULL, *dko = NULL, *dvo;
    attn__mask4 m4;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, q, "queries", d->Dq, &B, &L, &qp));
    ATTN_TRYG(attn__seq_in(ctx, k, "keys", d->Dk, &B, &S, &kp));
    ATTN_TRYG(attn__check(ctx, v, "values", ATTN_F32, 3, 3));
    Dv = v->shape[2];
    ATTN_TRYG(attn__seq_in(ctx, v, "values", Dv, &B, &S, &vp));
    ATTN_TRYG(attn__seq_in(ctx, dout, "dout", Dv, &B, &L, &dy));
    ATTN_TRYG(bls_outputs(ctx, mask, NULL, B, L, S, &m4));
    if (dq && dq->data) ATTN_TRYG(attn__seq_out(ctx, dq, "dq", B, L, d->Dq, &dqo));
    if (dk && dk->data) ATTN_TRYG(attn__seq_out(ctx, dk, "dk", B, S, d->Dk, &dko));
    if (dv && dv->data) ATTN_TRYG(attn__seq_out(ctx, dv, "dv", B, S, Dv, &dvo));
    else ATTN_TRYG(attn__ws_f32(ctx, &dvo, B, S, Dv, 1));
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg o[] = {{dq, "dq", 0}, {dk, "dk", 0}, {dv, "dv", 0}},
                  in[] = {{q, "q", 0},          {k, "k", 0},
                          {v, "v", 0},          {attn__mask_t(mask), "mask", 0},
                          {dout, "dout", 0},    {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_additive_attention_backward", o, 3, in, 7));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &qa, B, L, A, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &ka, B, S, A, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dqa, B, L, A, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dka, B, S, A, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &sc, S, 1, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &w, S, 1, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dw, S, 1, 1, 1));
    ATTN_TRYG(attn__lin_fwd(ctx, &d->Wq, qp, qa, B * L));
    ATTN_TRYG(attn__lin_fwd(ctx, &d->Wk, kp, ka, B * S));
    memset(dqa, 0, (size_t)(B * L * A) * sizeof(float));
    memset(dka, 0, (size_t)(B * S * A) * sizeof(float));
    memset(dvo, 0, (size_t)(B * S * Dv) * sizeof(float));
    float *gwv = attn__g(&g, d->wv.weight);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < L; i++) {
            const float *qi = qa + (b * L + i) * A;
            const float *di = dy + (b * L + i) * Dv;
            for (int64_t j = 0; j < S; j++) { /* forward: score, mask, softmax */
                const float *kj = ka + (b * S + j) * A;
                double acc = 0;
                for (int64_t t = 0; t < A; t++) acc += (double)d->wv.weight[t] * tanhf(qi[t] + kj[t]);
                sc[j] = (float)acc;
                if (m4.kind != ATTN_MASK_NONE) sc[j] += attn__mask_at(&m4, b, 0, i, j);
            }
            attn__softmax_row(sc, w, S);
            /* out_i = sum_j w_j v_j:  dw_j = dout_i . v_j;  dv_j += w_j dout_i */
            for (int64_t j = 0; j < S; j++) {
                const float *vj = vp + (b * S + j) * Dv;
                double acc = 0;
                for (int64_t e = 0; e < Dv; e++) {
                    acc += (double)di[e] * vj[e];
                    dvo[(b * S + j) * Dv + e] += w[j] * di[e];
                }
                dw[j] = (float)acc;
            }
            attn__softmax_row_bwd(w, dw, dw, S); /* now d score */
            for (int64_t j = 0; j < S; j++) {
                if (dw[j] == 0.0f) continue; /* masked or no gradient */
                const float *kj = ka + (b * S + j) * A;
                float *dqi = dqa + (b * L + i) * A, *dkj = dka + (b * S + j) * A;
                for (int64_t t = 0; t < A; t++) {
                    float th = tanhf(qi[t] + kj[t]);
                    float dt = dw[j] * d->wv.weight[t] * (1.0f - th * th);
                    gwv[t] += dw[j] * th;
                    dqi[t] += dt;
                    dkj[t] += dt;
                }
            }
        }
    ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(d->Wq.weight, NULL, A, d->Dq), qp, d->Dq, dqa, A, dqo,
                               d->Dq, 0, NULL, attn__g(&g, d->Wq.weight), NULL, B * L));
    ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(d->Wk.weight, NULL, A, d->Dk), kp, d->Dk, dka, A, dko,
                               d->Dk, 0, NULL, attn__g(&g, d->Wk.weight), NULL, B * S));
    if (dqo) attn__seq_out_end(dqo, dq);
    if (dko) attn__seq_out_end(dko, dk);
    if (dv && dv->data) attn__seq_out_end(dvo, dv);
done:
    attn__ws_release(ctx, mk);
    return st;
}
