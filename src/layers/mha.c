/* torch.nn.MultiheadAttention (batch_first=True), reference implementation. */
#include <math.h>
#include <string.h>

#include "layers.h"

attn_mha_config attn_mha_defaults(int64_t embed_dim, int64_t num_heads) {
    attn_mha_config c;
    memset(&c, 0, sizeof c);
    c.embed_dim = embed_dim;
    c.num_heads = num_heads;
    c.bias = 1;
    return c;
}

static attn_status check_cfg(attn_ctx *ctx, const attn_mha_config *c) {
    ATTN_FAIL_IF(!c, ctx, ATTN_E_INVALID, "multihead attention config is NULL");
    ATTN_FAIL_IF(c->embed_dim <= 0 || c->num_heads <= 0, ctx, ATTN_E_INVALID,
                 "embed_dim (%lld) and num_heads (%lld) must be positive",
                 (long long)c->embed_dim, (long long)c->num_heads);
    ATTN_FAIL_IF(c->embed_dim % c->num_heads != 0, ctx, ATTN_E_SHAPE,
                 "embed_dim %lld is not divisible by num_heads %lld (head_dim must divide "
                 "exactly)", (long long)c->embed_dim, (long long)c->num_heads);
    ATTN_FAIL_IF(c->kdim < 0 || c->vdim < 0, ctx, ATTN_E_INVALID, "kdim and vdim must be >= 0");
    ATTN_FAIL_IF(!(c->dropout >= 0.0f && c->dropout < 1.0f), ctx, ATTN_E_INVALID,
                 "dropout must be in [0, 1), got %g", (double)c->dropout);
    return ATTN_OK;
}

attn_status attn__mha_reg(attn_ctx *ctx, attn_module *m, const char *prefix, attn__mha *a,
                          const attn_mha_config *cfg) {
    ATTN_TRY(check_cfg(ctx, cfg));
    a->cfg = *cfg;
    int64_t E = cfg->embed_dim;
    if (!a->cfg.kdim) a->cfg.kdim = E;
    if (!a->cfg.vdim) a->cfg.vdim = E;
    a->E = E;
    a->H = cfg->num_heads;
    a->D = E / cfg->num_heads;
    a->packed = a->cfg.kdim == E && a->cfg.vdim == E;
    /* registration order follows PyTorch's state_dict */
    /* initialisation as MultiheadAttention._reset_parameters */
    if (a->packed) {
        ATTN_TRY(attn__param_reg(ctx, m, prefix, "in_proj_weight", &a->in_proj_weight, 0, 2,
                                 3 * E, E, 0));
        attn__param_init_last(m, ATTN__INIT_UNIFORM, attn__xavier_bound(E, 3 * E));
    } else {
        ATTN_TRY(attn__param_reg(ctx, m, prefix, "q_proj_weight", &a->q_proj_weight, 0, 2, E, E, 0));
        attn__param_init_last(m, ATTN__INIT_UNIFORM, attn__xavier_bound(E, E));
        ATTN_TRY(attn__param_reg(ctx, m, prefix, "k_proj_weight", &a->k_proj_weight, 0, 2, E,
                                 a->cfg.kdim, 0));
        attn__param_init_last(m, ATTN__INIT_UNIFORM, attn__xavier_bound(a->cfg.kdim, E));
        ATTN_TRY(attn__param_reg(ctx, m, prefix, "v_proj_weight", &a->v_proj_weight, 0, 2, E,
                                 a->cfg.vdim, 0));
        attn__param_init_last(m, ATTN__INIT_UNIFORM, attn__xavier_bound(a->cfg.vdim, E));
    }
    if (cfg->bias)
        ATTN_TRY(attn__param_reg(ctx, m, prefix, "in_proj_bias", &a->in_proj_bias, 0, 1, 3 * E, 0, 0));
    if (cfg->add_bias_kv) { /* xavier_normal_ of [1, 1, E]: fan_in = fan_out = E */
        ATTN_TRY(attn__param_reg(ctx, m, prefix, "bias_k", &a->bias_k, 0, 3, 1, 1, E));
        attn__param_init_last(m, ATTN__INIT_NORMAL, 1.0 / sqrt((double)E));
        ATTN_TRY(attn__param_reg(ctx, m, prefix, "bias_v", &a->bias_v, 0, 3, 1, 1, E));
        attn__param_init_last(m, ATTN__INIT_NORMAL, 1.0 / sqrt((double)E));
    }
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "out_proj", &a->out_proj, E, E, cfg->bias));
    if (cfg->bias) attn__param_init_last(m, ATTN__INIT_CONST, 0); /* out_proj.bias = 0 */
    return ATTN_OK;
}

attn_status attn_mha_create(attn_ctx *ctx, const attn_mha_config *cfg, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "attn_mha_create: NULL argument");
    *out = NULL;
    ATTN_TRY(check_cfg(ctx, cfg));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__MHA, sizeof(attn__mha), &m));
    attn_status st = attn__mha_reg(ctx, m, "", m->impl, cfg);
    return attn__module_done(ctx, m, st, out);
}

/* Binds attn_mask ([L, S] or [B*H, L, S]) to [B, H, L, S] strides. */
static attn_status bind_attn_mask(attn_ctx *ctx, const attn_mask *m, int64_t B, int64_t H,
                                  int64_t L, int64_t S, attn__mask4 *out) {
    memset(out, 0, sizeof *out);
    if (!m || m->kind == ATTN_MASK_NONE) return ATTN_OK;
    const attn_tensor *t = &m->t;
    char s1[96];
    ATTN_FAIL_IF(!t->data, ctx, ATTN_E_INVALID, "attn_mask has no data");
    if (t->ndim == 2) {
        int64_t want[2] = {L, S};
        ATTN_FAIL_IF(t->shape[0] != L || t->shape[1] != S, ctx, ATTN_E_BROADCAST,
                     "attn_mask shape %s does not match [%lld, %lld] (2-D masks are [L, S])",
                     attn__shape_str(t, s1, sizeof s1), (long long)want[0], (long long)want[1]);
        int64_t target[4] = {B, H, L, S};
        return attn__mask_bind(ctx, m, "attn_mask", target, out);
    }
    ATTN_FAIL_IF(t->ndim != 3, ctx, ATTN_E_SHAPE, "attn_mask must be 2-D [L, S] or 3-D "
                 "[B*num_heads, L, S], got %s", attn__shape_str(t, s1, sizeof s1));
    ATTN_FAIL_IF(t->shape[0] != B * H || t->shape[1] != L || t->shape[2] != S, ctx,
                 ATTN_E_BROADCAST, "attn_mask shape %s does not match [%lld, %lld, %lld] "
                 "(3-D masks are [B*num_heads, L, S])", attn__shape_str(t, s1, sizeof s1),
                 (long long)(B * H), (long long)L, (long long)S);
    /* validate dtype/values through the generic binder on a [B*H, L, S] target */
    int64_t target[4] = {1, B * H, L, S};
    ATTN_TRY(attn__mask_bind(ctx, m, "attn_mask", target, out));
    out->stride[0] = H * t->stride[0];
    out->stride[1] = t->stride[0];
    out->stride[2] = t->stride[1];
    out->stride[3] = t->stride[2];
    return ATTN_OK;
}

static attn_status bind_kpm(attn_ctx *ctx, const attn_mask *m, int64_t B, int64_t S,
                            attn__mask4 *out) {
    memset(out, 0, sizeof *out);
    if (!m || m->kind == ATTN_MASK_NONE) return ATTN_OK;
    const attn_tensor *t = &m->t;
    char s1[96];
    ATTN_FAIL_IF(!t->data, ctx, ATTN_E_INVALID, "key_padding_mask has no data");
    ATTN_FAIL_IF(t->ndim != 2 || t->shape[0] != B || t->shape[1] != S, ctx, ATTN_E_BROADCAST,
                 "key_padding_mask shape %s does not match [%lld, %lld] ([B, S])",
                 attn__shape_str(t, s1, sizeof s1), (long long)B, (long long)S);
    int64_t target[4] = {1, 1, B, S};
    ATTN_TRY(attn__mask_bind(ctx, m, "key_padding_mask", target, out));
    out->stride[0] = t->stride[0];
    out->stride[1] = 0;
    out->stride[2] = 0;
    out->stride[3] = t->stride[1];
    return ATTN_OK;
}

/* Whether the forward of a with these inputs projects q, k and v with one GEMM into one
 * [B, L, 3E] buffer: self-attention (the same buffer thrice) with in_proj_weight, no
 * appended keys. */
static int fusable(const attn__mha *a, int64_t L, int64_t S) {
    return L == S && a->packed && !a->cfg.add_bias_kv && !a->cfg.add_zero_attn;
}
static int fuses(const attn__mha *a, const float *query, const float *key, const float *value,
                 int64_t L, int64_t S) {
    return query == key && key == value && fusable(a, L, S);
}

/* Projected q [B, L, E], k and v [B, Sx, E] (bias_k/bias_v and a zero key appended), rows
 * ld apart; with ld = 3E (fuses) one GEMM writes q | k | v of each row. */
static attn_status project(attn_ctx *ctx, const attn__mha *a, const float *query,
                           const float *key, const float *value, int64_t B, int64_t L, int64_t S,
                           int64_t Sx, float *qp, float *kp, float *vp, int64_t ld) {
    int64_t E = a->E, kd = a->cfg.kdim, vd = a->cfg.vdim;
    if (ld == 3 * E) {
        attn__weight w = a->in_pw.data ? a->in_pw : attn__weight_f32(a->in_proj_weight, NULL,
                                                                      3 * E, E);
        w.bias = a->in_proj_bias, w.N = 3 * E, w.K = E;
        return attn__matmul(ctx, &w, query, E, B * L, ATTN__MM_GEMM, NULL, qp, ld);
    }
    /* in-projection: q = query Wq^T + bq, k = key Wk^T + bk, v = value Wv^T + bv */
    const float *Wq = a->packed ? a->in_proj_weight : a->q_proj_weight;
    const float *Wk = a->packed ? a->in_proj_weight + E * E : a->k_proj_weight;
    const float *Wv = a->packed ? a->in_proj_weight + 2 * E * E : a->v_proj_weight;
    const float *bq = a->in_proj_bias, *bk = bq ? bq + E : NULL, *bv = bq ? bq + 2 * E : NULL;
    ATTN_TRY(
        attn__matmul(ctx, ATTN__W32(Wq, bq, E, E), query, E, B * L, ATTN__MM_GEMM, NULL, qp, ld));
    for (int64_t b = 0; b < B; b++) {
        float *kb = kp + b * Sx * ld, *vb = vp + b * Sx * ld;
        ATTN_TRY(attn__matmul(ctx, ATTN__W32(Wk, bk, E, kd), key + b * S * kd, kd, S, ATTN__MM_GEMM,
                              NULL, kb, ld));
        ATTN_TRY(attn__matmul(ctx, ATTN__W32(Wv, bv, E, vd), value + b * S * vd, vd, S,
                              ATTN__MM_GEMM, NULL, vb, ld));
        int64_t j = S;
        if (a->cfg.add_bias_kv) { /* torch.cat([k, bias_k.repeat(1, bsz, 1)]) */
            memcpy(kb + j * ld, a->bias_k, (size_t)E * sizeof(float));
            memcpy(vb + j * ld, a->bias_v, (size_t)E * sizeof(float));
            j++;
        }
        if (a->cfg.add_zero_attn) { /* a key and value of zeros after everything else */
            memset(kb + j * ld, 0, (size_t)E * sizeof(float));
            memset(vb + j * ld, 0, (size_t)E * sizeof(float));
        }
    }
    return ATTN_OK;
}

void attn__mha_bind(attn__mha *a, int64_t E, int64_t H, float *in_w, float *in_b,
                    const attn__lin *out_proj) {
    memset(a, 0, sizeof *a);
    a->cfg = attn_mha_defaults(E, H);
    a->cfg.bias = in_b != NULL;
    a->cfg.kdim = a->cfg.vdim = E;
    a->E = E, a->H = H, a->D = E / H;
    a->packed = 1;
    a->in_proj_weight = in_w, a->in_proj_bias = in_b;
    a->out_proj = *out_proj;
}

/* SDPA arguments over the head-blocked buffers: head h of row i starts at i*E + h*D.  Masks
 * are bound afterwards.  Takes the dropout offset from rng (one site). */
static void sdpa_setup(const attn__mha *a, attn__sdpa_args *s, int64_t B, int64_t L,
                       int64_t S, int64_t Sx, const float *qp, const float *kp,
                       const float *vp, int64_t ld, float *ao, int is_causal, attn__rng *rng) {
    int64_t E = a->E, H = a->H, D = a->D;
    attn__sdpa_heads(s, B, H, L, Sx, D, D, qp, ld, kp, ld, vp, ld, ao, E);
    s->mask_ncols[0] = s->mask_ncols[1] = S; /* appended bias/zero columns are never masked */
    s->causal = is_causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    if (rng && rng->training && a->cfg.dropout > 0.0f) {
        s->dropout_p = a->cfg.dropout;
        s->seed = rng->seed;
        s->offset = rng->offset++;
    }
}

static int64_t extra_cols(const attn__mha *a) {
    return (a->cfg.add_bias_kv ? 1 : 0) + (a->cfg.add_zero_attn ? 1 : 0);
}

attn_status attn__mha_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__mha *a,
                                  int64_t B, int64_t L, int64_t S, int self,
                                  attn__mha_saved *sv) {
    int64_t E = a->E, Sx = S + extra_cols(a);
    memset(sv, 0, sizeof *sv);
    if (self && fusable(a, L, S)) {
        ATTN_TRY(attn__rec_f32(ctx, t, &sv->qp, B, L, 3 * E, 1));
        sv->kp = sv->qp + E, sv->vp = sv->qp + 2 * E, sv->ld = 3 * E;
    } else {
        ATTN_TRY(attn__rec_f32(ctx, t, &sv->qp, B, L, E, 1));
        ATTN_TRY(attn__rec_f32(ctx, t, &sv->kp, B, Sx, E, 1));
        ATTN_TRY(attn__rec_f32(ctx, t, &sv->vp, B, Sx, E, 1));
        sv->ld = E;
    }
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->ao, B, L, E, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->lse, B, a->H, L, 1));
    return ATTN_OK;
}

/* The forward up to the attention output: projections into qp, kp, vp, attention into ao
 * (lse, w: NULL or [B, H, L], [B, H, L, S']); *s receives the call's arguments. */
static attn_status attend(attn_ctx *ctx, const attn__mha *a, const float *query,
                          const float *key, const float *value, int64_t B, int64_t L, int64_t S,
                          const attn_mask *key_padding_mask, const attn_mask *amask,
                          int is_causal, attn__rng *rng, float *qp, float *kp, float *vp,
                          int64_t ld, float *ao, float *lse, float *w, int rows,
                          attn__sdpa_args *s) {
    int64_t H = a->H, Sx = S + extra_cols(a);
    attn__mask4 m0, m1;
    ATTN_TRY(bind_attn_mask(ctx, amask, B, H, L, S, &m0));
    ATTN_TRY(bind_kpm(ctx, key_padding_mask, B, S, &m1));
    ATTN_TRY(project(ctx, a, query, key, value, B, L, S, Sx, qp, kp, vp, ld));
    sdpa_setup(a, s, B, L, S, Sx, qp, kp, vp, ld, ao, is_causal, rng);
    s->mask[0] = m0, s->mask[1] = m1;
    s->rows = rows;
    if (w) s->w = w, s->ws[0] = H * L * Sx, s->ws[1] = L * Sx, s->ws[2] = Sx, s->ws[3] = 1;
    if (lse) s->lse = lse, s->ls[0] = H * L, s->ls[1] = L, s->ls[2] = 1;
    return attn__sdpa(ctx, s);
}

attn_status attn__mha_fwd(attn_ctx *ctx, const attn__mha *a, const float *query,
                          const float *key, const float *value, int64_t B, int64_t L, int64_t S,
                          const attn_mask *key_padding_mask, const attn_mask *amask,
                          int is_causal, int average, attn__rng *rng, float *out,
                          float *weights, attn__mha_saved *sv, const attn__epi *oepi) {
    int64_t E = a->E, H = a->H, Sx = S + extra_cols(a);
    attn__sdpa_args s;
    attn__mark mk = attn__ws_mark(ctx);
    float *qp, *kp, *vp, *ao, *w = NULL;
    int64_t ld = E;
    attn_status st;
    if (sv) {
        qp = sv->qp, kp = sv->kp, vp = sv->vp, ao = sv->ao, ld = sv->ld;
        if (ld != E && !fuses(a, query, key, value, L, S)) {
            st = attn__fail(ctx, ATTN_E_INVALID, "internal: a self-attention record for "
                            "another attention");
            goto done;
        }
    } else if (fuses(a, query, key, value, L, S)) {
        ATTN_TRYG(attn__ws_f32(ctx, &qp, B, L, 3 * E, 1));
        kp = qp + E, vp = qp + 2 * E, ld = 3 * E;
        ATTN_TRYG(attn__ws_f32(ctx, &ao, B, L, E, 1));
    } else {
        ATTN_TRYG(attn__ws_f32(ctx, &qp, B, L, E, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &kp, B, Sx, E, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &vp, B, Sx, E, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &ao, B, L, E, 1));
    }
    if (weights) ATTN_TRYG(attn__ws_f32(ctx, &w, B, H, L, Sx));
    ATTN_TRYG(attend(ctx, a, query, key, value, B, L, S, key_padding_mask, amask, is_causal, rng,
                     qp, kp, vp, ld, ao, sv ? sv->lse : NULL, w, 0, &s));
    if (sv) {
        sv->s = s;
        sv->s.w = NULL;
        sv->s.rows = weights != NULL; /* the row kernels ran: a recompute runs them too */
    }
    ATTN_TRYG(attn__lin_run(ctx, &a->out_proj, ao, oepi, out, B * L));

    if (weights) {
        if (average) { /* attn_output_weights.mean(dim=1) */
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < L; i++)
                    for (int64_t j = 0; j < Sx; j++) {
                        double acc = 0;
                        for (int64_t h = 0; h < H; h++) acc += w[((b * H + h) * L + i) * Sx + j];
                        weights[(b * L + i) * Sx + j] = (float)(acc / (double)H);
                    }
        } else {
            memcpy(weights, w, (size_t)(B * H * L * Sx) * sizeof(float));
        }
    }
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* The backward from the record.  dself (NULL, or with a record of the fused self-attention
 * projection: query = key = value): receives the gradient of the shared input in place of
 * dquery, dkey and dvalue, from one GEMM over the three projections' gradients. */
static attn_status mha_bwd(attn_ctx *ctx, const attn__mha *a, const attn__gmap *g,
                           const attn__mha_saved *sv, const float *query, const float *key,
                           const float *value, int64_t B, int64_t L, int64_t S, const float *dout,
                           float *dquery, float *dkey, float *dvalue, float *dself,
                           const float *res) {
    int64_t E = a->E, Sx = S + extra_cols(a), kd = a->cfg.kdim, vd = a->cfg.vdim;
    attn__sdpa_args s = sv->s;
    /* the fused forward wrote q | k | v of each row into one [B, L, 3E] buffer: the gradients
     * go into one buffer of the same layout, so that one GEMM gives all three weights' */
    const int fused = sv->ld == 3 * E;
    const int64_t dld = fused ? 3 * E : E;
    /* A forward that ran on the split-KV decode kernels (a few queries, no dropout) saved their
     * output and lse; the fused backward would start from them and differ from the recomputing
     * backward in the last bits, so it recomputes its own (the fused forward's) instead. */
    if (attn__sdpa_path(ctx, &s, 0) == ATTN__SDPA_DECODE) s.lse = NULL;
    attn__mark mk = attn__ws_mark(ctx);
    float *dao, *dqp, *dkp, *dvp;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &dao, B, L, E, 1));
    if (fused) {
        ATTN_TRYG(attn__ws_f32(ctx, &dqp, B, L, 3 * E, 1));
        dkp = dqp + E, dvp = dqp + 2 * E;
    } else {
        ATTN_TRYG(attn__ws_f32(ctx, &dqp, B, L, E, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &dkp, B, Sx, E, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &dvp, B, Sx, E, 1));
    }
    /* out = ao Wo^T + bo */
    ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(a->out_proj.weight, NULL, E, E), sv->ao, E, dout, E,
                               dao, E, 0, NULL, attn__g(g, a->out_proj.weight),
                               attn__g(g, a->out_proj.bias), B * L));
    /* attention: gradients of the head-blocked q, k, v buffers (the fused backward starts from
     * the saved output and lse) */
    attn__sdpa_grads sg;
    memset(&sg, 0, sizeof sg);
    const int64_t D = a->D, qs[4] = {L * dld, D, dld, 1}, ks[4] = {Sx * dld, D, dld, 1};
    sg.dout = dao, memcpy(sg.dos, s.os, sizeof sg.dos);
    sg.dq = dqp, memcpy(sg.dqs, qs, sizeof sg.dqs);
    sg.dk = dkp, memcpy(sg.dks, ks, sizeof sg.dks);
    sg.dv = dvp, memcpy(sg.dvs, ks, sizeof sg.dvs);
    ATTN_TRYG(attn__sdpa_bwd(ctx, &s, &sg));
    if (a->cfg.add_bias_kv) { /* the appended row S of every batch came from bias_k / bias_v */
        float *gbk = attn__g(g, a->bias_k), *gbv = attn__g(g, a->bias_v);
        for (int64_t b = 0; b < B; b++)
            for (int64_t e = 0; e < E; e++) {
                gbk[e] += dkp[(b * Sx + S) * dld + e];
                gbv[e] += dvp[(b * Sx + S) * dld + e];
            }
    }
    /* in-projections */
    const float *Wq = a->packed ? a->in_proj_weight : a->q_proj_weight;
    const float *Wk = a->packed ? a->in_proj_weight + E * E : a->k_proj_weight;
    const float *Wv = a->packed ? a->in_proj_weight + 2 * E * E : a->v_proj_weight;
    float *gbq = attn__g(g, a->in_proj_bias), *gbk = gbq ? gbq + E : NULL,
          *gbv = gbq ? gbq + 2 * E : NULL;
    if (fused) { /* [dq | dk | dv] = d(x [Wq; Wk; Wv]^T): the three weights' gradients at once */
        attn__res_state rs;
        const attn__row_epi re = attn__res_epi(ctx, res, E, E, &rs);
        ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(a->in_proj_weight, NULL, 3 * E, E), query, E, dqp,
                                   dld, dself, E, 0, dself && res ? &re : NULL,
                                   attn__g(g, a->in_proj_weight), gbq, B * L));
        if (!dself) {
            if (dquery)
                ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(Wq, NULL, E, E), query, E, dqp, dld,
                                           dquery, E, 0, NULL, NULL, NULL, B * L));
            if (dkey)
                ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(Wk, NULL, E, E), key, E, dkp, dld, dkey,
                                           E, 0, NULL, NULL, NULL, B * L));
            if (dvalue)
                ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(Wv, NULL, E, E), value, E, dvp, dld,
                                           dvalue, E, 0, NULL, NULL, NULL, B * L));
        }
    } else {
        ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(Wq, NULL, E, E), query, E, dqp, E, dquery, E, 0,
                                   NULL, attn__g(g, Wq), gbq, B * L));
        /* without appended keys the batches' rows are contiguous: one product each */
        const int64_t nb = Sx == S ? 1 : B, rows = Sx == S ? B * S : S;
        for (int64_t b = 0; b < nb; b++) {
            ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(Wk, NULL, E, kd), key + b * S * kd, kd,
                                       dkp + b * Sx * E, E, dkey ? dkey + b * S * kd : NULL, kd, 0,
                                       NULL, attn__g(g, Wk), gbk, rows));
            ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(Wv, NULL, E, vd), value + b * S * vd, vd,
                                       dvp + b * Sx * E, E, dvalue ? dvalue + b * S * vd : NULL, vd,
                                       0, NULL, attn__g(g, Wv), gbv, rows));
        }
    }
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__mha_bwd_saved(attn_ctx *ctx, const attn__mha *a, const attn__gmap *g,
                                const attn__mha_saved *sv, const float *query, const float *key,
                                const float *value, int64_t B, int64_t L, int64_t S,
                                const float *dout, float *dquery, float *dkey, float *dvalue) {
    return mha_bwd(ctx, a, g, sv, query, key, value, B, L, S, dout, dquery, dkey, dvalue, NULL,
                   NULL);
}

attn_status attn__mha_bwd_saved_self(attn_ctx *ctx, const attn__mha *a, const attn__gmap *g,
                                     const attn__mha_saved *sv, const float *x, int64_t B,
                                     int64_t L, const float *dout, float *dx,
                                     const float *res) {
    if (sv->ld == 3 * a->E)
        return mha_bwd(ctx, a, g, sv, x, x, x, B, L, L, dout, NULL, NULL, NULL, dx, res);
    /* projected separately (appended keys): three input gradients, summed */
    attn__mark mk = attn__ws_mark(ctx);
    const int64_t n = B * L * a->E;
    float *dk, *dv;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &dk, B, L, a->E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dv, B, L, a->E, 1));
    ATTN_TRYG(mha_bwd(ctx, a, g, sv, x, x, x, B, L, L, dout, dx, dk, dv, NULL, NULL));
    for (int64_t i = 0; i < n; i++) dx[i] += dk[i] + dv[i];
    if (res) attn__add_f32(ctx, res, dx, dx, n);
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__mha_bwd(attn_ctx *ctx, const attn__mha *a, const attn__gmap *g,
                          const float *query, const float *key, const float *value, int64_t B,
                          int64_t L, int64_t S, const attn_mask *key_padding_mask,
                          const attn_mask *amask, int is_causal, attn__rng *rng, int rows,
                          const float *dout, float *dquery, float *dkey, float *dvalue) {
    attn__mark mk = attn__ws_mark(ctx);
    attn__mha_saved sv;
    attn_status st;
    /* recompute the forward up to the attention output, then the saved backward */
    ATTN_TRYG(attn__mha_saved_alloc(ctx, NULL, a, B, L, S,
                                    fuses(a, query, key, value, L, S), &sv));
    ATTN_TRYG(attend(ctx, a, query, key, value, B, L, S, key_padding_mask, amask, is_causal, rng,
                     sv.qp, sv.kp, sv.vp, sv.ld, sv.ao, sv.lse, NULL, rows, &sv.s));
    ATTN_TRYG(attn__mha_bwd_saved(ctx, a, g, &sv, query, key, value, B, L, S, dout, dquery, dkey,
                                  dvalue));
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* The record of attn_mha_forward_train (in the tape). */
typedef struct mha_rec {
    int64_t B, L, S;
    const float *q, *k, *v; /* copies of the inputs (shared where the views are the same) */
    attn_mask kpm, am;      /* copies */
    int ckpt, is_causal;    /* ckpt: only the inputs, the masks and the stream are kept */
    int weights;            /* the forward wrote weights (ran the row kernels) */
    attn__rng rng;
    attn__mha_saved sv;     /* its masks bound to the copies (not with ckpt) */
} mha_rec;

/* A contiguous copy of x [n] in the tape, or prev when the view is the same as prev's. */
static attn_status copy_in(attn_ctx *ctx, attn__tape *t, const attn_tensor *view, const float *x,
                           int64_t n, const attn_tensor *prev_view, const float *prev,
                           const float **out) {
    if (prev && attn__same_view(view, prev_view)) {
        *out = prev;
        return ATTN_OK;
    }
    float *c;
    ATTN_TRY(attn__rec_f32(ctx, t, &c, n, 1, 1, 1));
    memcpy(c, x, (size_t)n * sizeof(float));
    *out = c;
    return ATTN_OK;
}

/* attn_mha_forward, and with train (named fn) its training forward into saved. */
static attn_status mha_forward(attn_ctx *ctx, const char *fn, int train, const attn_module *m,
                               const attn_tensor *query, const attn_tensor *key,
                               const attn_tensor *value, const attn_mask *key_padding_mask,
                               const attn_mask *amask, const attn_mha_options *opt,
                               const attn_run *run, attn_tensor *out, attn_tensor *weights,
                               attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__MHA, fn));
    ATTN_FAIL_IF(train && !saved, ctx, ATTN_E_INVALID, "%s: saved is NULL", fn);
    if (saved) attn__saved_begin(saved);
    const attn__mha *a = m->impl;
    attn_mha_options o = {0, 1, 0};
    if (opt) o = *opt;
    int64_t B = 0, L = 0, S = 0;
    attn__mark mk = attn__ws_mark(ctx);
    const float *q, *k, *v;
    float *op, *wp = NULL;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, query, "query", a->E, &B, &L, &q));
    ATTN_TRYG(attn__seq_in(ctx, key, "key", a->cfg.kdim, &B, &S, &k));
    ATTN_TRYG(attn__seq_in(ctx, value, "value", a->cfg.vdim, &B, &S, &v));
    if (attn__same_view(query, key)) k = q; /* self-attention: one projection GEMM */
    if (attn__same_view(key, value)) v = k;
    ATTN_TRYG(attn__seq_out(ctx, out, "output", B, L, a->E, &op));
    int64_t Sx = S + (a->cfg.add_bias_kv ? 1 : 0) + (a->cfg.add_zero_attn ? 1 : 0);
    if (o.need_weights) {
        if (!weights || !weights->data) {
            st = attn__fail(ctx, ATTN_E_INVALID, "need_weights is set but weights is NULL");
            goto done;
        }
        int64_t ws4[4] = {B, a->H, L, Sx}, ws3[3] = {B, L, Sx};
        ATTN_TRYG(attn__check(ctx, weights, "weights", ATTN_F32, 3, 4));
        if (o.average_attn_weights) ATTN_TRYG(attn__check_shape(ctx, weights, "weights", 3, ws3));
        else ATTN_TRYG(attn__check_shape(ctx, weights, "weights", 4, ws4));
        if (attn_tensor_is_contiguous(weights)) wp = weights->data;
        else ATTN_TRYG(attn__ws_f32(ctx, &wp, B, a->H, L, Sx));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}, {o.need_weights ? weights : NULL, "weights", 0}},
                  ia[] = {{query, "query", 0},
                          {key, "key", 0},
                          {value, "value", 0},
                          {attn__mask_t(key_padding_mask), "key_padding_mask", 0},
                          {attn__mask_t(amask), "attn_mask", 0},
                          {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, fn, oa, 2, ia, 6));
    }
    attn__rng rng = attn__rng_from(run);
    mha_rec *rec = NULL;
    if (saved) { /* the inputs and masks are copied: the backward reads only the record */
        attn__tape *t = &saved->tape;
        ATTN_TRYG(attn__tape_alloc(ctx, t, 1, sizeof *rec, (void **)&rec));
        rec->B = B, rec->L = L, rec->S = S;
        ATTN_TRYG(copy_in(ctx, t, query, q, B * L * a->E, NULL, NULL, &rec->q));
        ATTN_TRYG(copy_in(ctx, t, key, k, B * S * a->cfg.kdim, query, rec->q, &rec->k));
        ATTN_TRYG(copy_in(ctx, t, value, v, B * S * a->cfg.vdim, key, rec->k, &rec->v));
        ATTN_TRYG(attn__saved_mask(ctx, t, key_padding_mask, "key_padding_mask", &rec->kpm));
        ATTN_TRYG(attn__saved_mask(ctx, t, amask, "attn_mask", &rec->am));
        rec->ckpt = (saved->flags & ATTN_SAVED_CHECKPOINT) != 0;
        rec->is_causal = o.is_causal;
        rec->weights = wp != NULL;
        rec->rng = rng;
        if (!rec->ckpt)
            ATTN_TRYG(attn__mha_saved_alloc(ctx, t, a, B, L, S,
                                            fuses(a, rec->q, rec->k, rec->v, L, S), &rec->sv));
        key_padding_mask = attn__mask_opt(&rec->kpm), amask = attn__mask_opt(&rec->am);
    }
    ATTN_TRYG(attn__mha_fwd(ctx, a, q, k, v, B, L, S, key_padding_mask, amask, o.is_causal,
                            o.average_attn_weights, &rng, op, wp,
                            rec && !rec->ckpt ? &rec->sv : NULL, NULL));
    attn__seq_out_end(op, out);
    if (wp && wp != weights->data) attn__store(wp, weights);
    if (rec) attn__saved_end(saved, m, rec);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_mha_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *query,
                             const attn_tensor *key, const attn_tensor *value,
                             const attn_mask *key_padding_mask, const attn_mask *amask,
                             const attn_mha_options *opt, const attn_run *run, attn_tensor *out,
                             attn_tensor *weights) {
    return mha_forward(ctx, "attn_mha_forward", 0, m, query, key, value, key_padding_mask, amask,
                       opt, run, out, weights, NULL);
}

attn_status attn_mha_forward_train(attn_ctx *ctx, const attn_module *m, const attn_tensor *query,
                                   const attn_tensor *key, const attn_tensor *value,
                                   const attn_mask *key_padding_mask, const attn_mask *amask,
                                   const attn_mha_options *opt, const attn_run *run,
                                   attn_tensor *out, attn_tensor *weights, attn_saved *saved) {
    return mha_forward(ctx, "attn_mha_forward_train", 1, m, query, key, value, key_padding_mask,
                       amask, opt, run, out, weights, saved);
}

/* The backwards' optional input-gradient outputs dquery [B, L, E], dkey [B, S, kdim], dvalue
 * [B, S, vdim] as contiguous buffers (NULL where not wanted); mha_grad_ends stores them. */
static attn_status mha_grad_outs(attn_ctx *ctx, const attn__mha *a, int64_t B, int64_t L,
                                 int64_t S, attn_tensor *dquery, attn_tensor *dkey,
                                 attn_tensor *dvalue, float **dq, float **dk, float **dv) {
    if (dquery && dquery->data) ATTN_TRY(attn__seq_out(ctx, dquery, "dquery", B, L, a->E, dq));
    if (dkey && dkey->data) ATTN_TRY(attn__seq_out(ctx, dkey, "dkey", B, S, a->cfg.kdim, dk));
    if (dvalue && dvalue->data)
        ATTN_TRY(attn__seq_out(ctx, dvalue, "dvalue", B, S, a->cfg.vdim, dv));
    return ATTN_OK;
}

static void mha_grad_ends(float *dq, float *dk, float *dv, attn_tensor *dquery,
                          attn_tensor *dkey, attn_tensor *dvalue) {
    if (dq) attn__seq_out_end(dq, dquery);
    if (dk) attn__seq_out_end(dk, dkey);
    if (dv) attn__seq_out_end(dv, dvalue);
}

attn_status attn_mha_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *query,
                              const attn_tensor *key, const attn_tensor *value,
                              const attn_mask *key_padding_mask, const attn_mask *amask,
                              const attn_mha_options *opt, const attn_run *run,
                              const attn_tensor *dout, attn_tensor *dquery, attn_tensor *dkey,
                              attn_tensor *dvalue) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__MHA, "attn_mha_backward"));
    const attn__mha *a = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    attn_mha_options o = {0, 1, 0};
    if (opt) o = *opt;
    int64_t B = 0, L = 0, S = 0;
    attn__mark mk = attn__ws_mark(ctx);
    const float *q, *k, *v, *dy;
    float *dq = NULL, *dk = NULL, *dv = NULL;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, query, "query", a->E, &B, &L, &q));
    ATTN_TRYG(attn__seq_in(ctx, key, "key", a->cfg.kdim, &B, &S, &k));
    ATTN_TRYG(attn__seq_in(ctx, value, "value", a->cfg.vdim, &B, &S, &v));
    if (attn__same_view(query, key)) k = q; /* as the forward: one projection GEMM */
    if (attn__same_view(key, value)) v = k;
    ATTN_TRYG(attn__seq_in(ctx, dout, "dout", a->E, &B, &L, &dy));
    ATTN_TRYG(mha_grad_outs(ctx, a, B, L, S, dquery, dkey, dvalue, &dq, &dk, &dv));
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dquery, "dquery", 0}, {dkey, "dkey", 0}, {dvalue, "dvalue", 0}},
                  ia[] = {{query, "query", 0},
                          {key, "key", 0},
                          {value, "value", 0},
                          {attn__mask_t(key_padding_mask), "key_padding_mask", 0},
                          {attn__mask_t(amask), "attn_mask", 0},
                          {dout, "dout", 0},
                          {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_mha_backward", oa, 3, ia, 8));
    }
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(attn__mha_bwd(ctx, a, &g, q, k, v, B, L, S, key_padding_mask, amask, o.is_causal,
                            &rng, 0, dy, dq, dk, dv));
    mha_grad_ends(dq, dk, dv, dquery, dkey, dvalue);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_mha_backward_saved(attn_ctx *ctx, const attn_module *m, const attn_saved *saved,
                                    const attn_tensor *dout, attn_tensor *dquery,
                                    attn_tensor *dkey, attn_tensor *dvalue) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__MHA, "attn_mha_backward_saved"));
    const attn__mha *a = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    mha_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m, "attn_mha_backward_saved", (void **)&rec));
    int64_t B = rec->B, L = rec->L, S = rec->S;
    attn__mark mk = attn__ws_mark(ctx);
    const float *dy;
    float *dq = NULL, *dk = NULL, *dv = NULL;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, dout, "dout", a->E, &B, &L, &dy));
    ATTN_TRYG(mha_grad_outs(ctx, a, B, L, S, dquery, dkey, dvalue, &dq, &dk, &dv));
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dquery, "dquery", 0}, {dkey, "dkey", 0}, {dvalue, "dvalue", 0}},
                  ia[] = {{dout, "dout", 0},
                          {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_mha_backward_saved", oa, 3, ia, 3));
    }
    if (rec->ckpt) { /* the forward again, from the copies */
        attn__rng r = rec->rng;
        ATTN_TRYG(attn__mha_bwd(ctx, a, &g, rec->q, rec->k, rec->v, B, L, S,
                                attn__mask_opt(&rec->kpm), attn__mask_opt(&rec->am),
                                rec->is_causal, &r, rec->weights, dy, dq, dk, dv));
    } else {
        ATTN_TRYG(attn__mha_bwd_saved(ctx, a, &g, &rec->sv, rec->q, rec->k, rec->v, B, L, S, dy,
                                      dq, dk, dv));
    }
    mha_grad_ends(dq, dk, dv, dquery, dkey, dvalue);
done:
    attn__ws_release(ctx, mk);
    return st;
}
