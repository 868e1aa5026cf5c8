/* The one attention module (layers.h, "one attention module"): nn.MultiheadAttention and the
 * Llama family's grouped-query attention as configurations of attn__attention.  Its forward
 * (projections through the one door, QK-norm, RoPE, appended keys, attn__sdpa or, over a KV
 * cache, the decode kernels, the output product with its epilogue, attention weights), its
 * record and its backward (the fused SDPA backward from the saved output and log-sum-exp, RoPE's
 * transpose, the projections' gradients). */
#include <math.h>
#include <string.h>

#include "../kernels/bf16.h"
#include "../kernels/decode.h"
#include "../kernels/ew.h"
#include "pool.h"
#include "llm.h"

void attn__attention_llama(attn__attention *a, int64_t E, int64_t H, int64_t Hkv, int64_t D) {
    memset(a, 0, sizeof *a);
    a->E = E, a->H = H, a->Hkv = Hkv, a->D = D, a->kdim = a->vdim = E;
    a->seq_rows = 1, a->rope = 1;
}

/* ---- nn.MultiheadAttention's parameters ---------------------------------------------------- */
static attn_status check_mha(attn_ctx *ctx, const attn_mha_config *c) {
    ATTN_FAIL_IF(!c, ctx, ATTN_E_INVALID, "multihead attention config is NULL");
    ATTN_FAIL_IF(c->embed_dim <= 0 || c->num_heads <= 0, ctx, ATTN_E_INVALID,
                 "embed_dim (%lld) and num_heads (%lld) must be positive", (long long)c->embed_dim,
                 (long long)c->num_heads);
    ATTN_FAIL_IF(c->embed_dim % c->num_heads != 0, ctx, ATTN_E_SHAPE,
                 "embed_dim %lld is not divisible by num_heads %lld (head_dim must divide "
                 "exactly)",
                 (long long)c->embed_dim, (long long)c->num_heads);
    ATTN_FAIL_IF(c->kdim < 0 || c->vdim < 0, ctx, ATTN_E_INVALID, "kdim and vdim must be >= 0");
    ATTN_FAIL_IF(!(c->dropout >= 0.0f && c->dropout < 1.0f), ctx, ATTN_E_INVALID,
                 "dropout must be in [0, 1), got %g", (double)c->dropout);
    return ATTN_OK;
}

/* Registers a [rows, cols] matrix (or a vector, cols 0) whose data goes to w's data or bias at
 * the offsets off[0..n). */
static attn_status reg_to(attn_ctx *ctx, attn_module *m, const char *prefix, const char *name,
                          int ndim, int64_t rows, int64_t cols, int bias, attn__weight *const *w,
                          const int64_t *off, int n) {
    ATTN_TRY(attn__param_reg(ctx, m, prefix, name, NULL, 0.0f, ndim, rows, cols, 0));
    for (int i = 0; i < n; i++)
        attn__param_to_weight(m, w[i], bias, off[i]);
    return ATTN_OK;
}

attn_status attn__attention_mha_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                                    attn__attention *a, const attn_mha_config *cfg) {
    ATTN_TRY(check_mha(ctx, cfg));
    const int64_t E = cfg->embed_dim, kd = cfg->kdim ? cfg->kdim : E,
                  vd = cfg->vdim ? cfg->vdim : E;
    memset(a, 0, sizeof *a);
    a->E = E, a->H = a->Hkv = cfg->num_heads, a->D = E / cfg->num_heads;
    a->kdim = kd, a->vdim = vd;
    a->zero_attn = cfg->add_zero_attn != 0;
    a->dropout = cfg->dropout;
    a->q = attn__weight_f32(NULL, NULL, E, E);
    a->k = attn__weight_f32(NULL, NULL, E, kd);
    a->v = attn__weight_f32(NULL, NULL, E, vd);
    a->o = attn__weight_f32(NULL, NULL, E, E);
    const int packed = kd == E && vd == E;
    /* registration order follows PyTorch's state_dict, initialisation its _reset_parameters */
    if (packed) {
        a->qkv = attn__weight_f32(NULL, NULL, 3 * E, E);
        attn__weight *w[4] = {&a->qkv, &a->q, &a->k, &a->v};
        const int64_t off[4] = {0, 0, E * E, 2 * E * E};
        ATTN_TRY(reg_to(ctx, m, prefix, "in_proj_weight", 2, 3 * E, E, 0, w, off, 4));
        attn__param_init_last(m, ATTN__INIT_UNIFORM, attn__xavier_bound(E, 3 * E));
    } else {
        static const int64_t zero = 0;
        attn__weight *w[3] = {&a->q, &a->k, &a->v};
        static const char *const nm[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
        const int64_t in[3] = {E, kd, vd};
        for (int i = 0; i < 3; i++) {
            ATTN_TRY(reg_to(ctx, m, prefix, nm[i], 2, E, in[i], 0, &w[i], &zero, 1));
            attn__param_init_last(m, ATTN__INIT_UNIFORM, attn__xavier_bound(in[i], E));
        }
    }
    if (cfg->bias) {
        attn__weight *w[4] = {&a->q, &a->k, &a->v, &a->qkv};
        const int64_t off[4] = {0, E, 2 * E, 0};
        ATTN_TRY(reg_to(ctx, m, prefix, "in_proj_bias", 1, 3 * E, 0, 1, w, off, packed ? 4 : 3));
    }
    if (cfg->add_bias_kv) { /* xavier_normal_ of [1, 1, E]: fan_in = fan_out = E */
        ATTN_TRY(attn__param_reg(ctx, m, prefix, "bias_k", &a->bias_k, 0, 3, 1, 1, E));
        attn__param_init_last(m, ATTN__INIT_NORMAL, 1.0 / sqrt((double)E));
        ATTN_TRY(attn__param_reg(ctx, m, prefix, "bias_v", &a->bias_v, 0, 3, 1, 1, E));
        attn__param_init_last(m, ATTN__INIT_NORMAL, 1.0 / sqrt((double)E));
    }
    /* out_proj: nn.Linear's init, its bias then zeroed */
    static const int64_t zero = 0;
    attn__weight *o = &a->o;
    ATTN_TRY(reg_to(ctx, m, prefix, "out_proj.weight", 2, E, E, 0, &o, &zero, 1));
    attn__param_init_last(m, ATTN__INIT_UNIFORM, 1.0 / sqrt((double)E));
    if (cfg->bias) {
        ATTN_TRY(reg_to(ctx, m, prefix, "out_proj.bias", 1, E, 0, 1, &o, &zero, 1));
        attn__param_init_last(m, ATTN__INIT_CONST, 0);
    }
    return ATTN_OK;
}

void attn__attention_mha_bind(attn__attention *a, int64_t E, int64_t H, const float *in_w,
                              const float *in_b, const float *out_w, const float *out_b) {
    memset(a, 0, sizeof *a);
    a->E = E, a->H = a->Hkv = H, a->D = E / H, a->kdim = a->vdim = E;
    a->qkv = attn__weight_f32(in_w, in_b, 3 * E, E);
    a->q = attn__weight_f32(in_w, in_b, E, E);
    a->k = attn__weight_f32(in_w + E * E, in_b ? in_b + E : NULL, E, E);
    a->v = attn__weight_f32(in_w + 2 * E * E, in_b ? in_b + 2 * E : NULL, E, E);
    a->o = attn__weight_f32(out_w, out_b, E, E);
}

/* ---- masks --------------------------------------------------------------------------------- */
/* Binds attn_mask ([L, S] or [B*H, L, S]) to [B, H, L, S] strides. */
static attn_status bind_attn_mask(attn_ctx *ctx, const attn_mask *m, int64_t B, int64_t H,
                                  int64_t L, int64_t S, attn__mask4 *out) {
    memset(out, 0, sizeof *out);
    if (!m || m->kind == ATTN_MASK_NONE)
        return ATTN_OK;
    const attn_tensor *t = &m->t;
    char s1[96];
    ATTN_FAIL_IF(!t->data, ctx, ATTN_E_INVALID, "attn_mask has no data");
    if (t->ndim == 2) {
        ATTN_FAIL_IF(t->shape[0] != L || t->shape[1] != S, ctx, ATTN_E_BROADCAST,
                     "attn_mask shape %s does not match [%lld, %lld] (2-D masks are [L, S])",
                     attn__shape_str(t, s1, sizeof s1), (long long)L, (long long)S);
        int64_t target[4] = {B, H, L, S};
        return attn__mask_bind(ctx, m, "attn_mask", target, out);
    }
    ATTN_FAIL_IF(t->ndim != 3, ctx, ATTN_E_SHAPE,
                 "attn_mask must be 2-D [L, S] or 3-D [B*num_heads, L, S], got %s",
                 attn__shape_str(t, s1, sizeof s1));
    ATTN_FAIL_IF(t->shape[0] != B * H || t->shape[1] != L || t->shape[2] != S, ctx,
                 ATTN_E_BROADCAST,
                 "attn_mask shape %s does not match [%lld, %lld, %lld] (3-D masks are "
                 "[B*num_heads, L, S])",
                 attn__shape_str(t, s1, sizeof s1), (long long)(B * H), (long long)L, (long long)S);
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
    if (!m || m->kind == ATTN_MASK_NONE)
        return ATTN_OK;
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

/* ---- the forward --------------------------------------------------------------------------- */
/* Whether the projections of io share one buffer: self-attention without appended keys. */
static int one_buffer(const attn__attention *a, const attn__attn_io *io) {
    return io->query == io->key && io->key == io->value && io->L == io->S &&
           !attn__attention_extra(a);
}

/* The rows argument of the door: sequences of T rows, or plain GEMM rows. */
static int64_t mm_T(const attn__attention *a, int64_t T) { return a->seq_rows ? T : ATTN__MM_GEMM; }

/* The RoPE table of a's layer. */
static void rope_table(const attn__attention *a, const attn__rope_cs *r, const float **cs,
                       const float **sn) {
    const int local = a->rope_local && r->lcs;
    *cs = local ? r->lcs : r->cs, *sn = local ? r->lsn : r->sn;
}

/* Projected q [B L] rows (ldq), k and v [B S'] rows (ldk; bias_k/bias_v and a zero row
 * appended to each sequence); one buffer: q | k | v of each row side by side. */
static attn_status project(attn_ctx *ctx, const attn__attention *a, const attn__attn_io *io,
                           int one, float *qp, float *kp, float *vp, int64_t ldq, int64_t ldk) {
    const int64_t B = io->B, L = io->L, S = io->S, E = a->E, KD = a->Hkv * a->D;
    const int64_t Sx = S + attn__attention_extra(a), kd = a->kdim, vd = a->vdim;
    if (one && a->qkv.data)
        return attn__matmul(ctx, &a->qkv, io->query, E, B * L, mm_T(a, L), NULL, qp, ldq);
    if (one) {
        const attn__weight *w[3] = {&a->q, &a->k, &a->v};
        float *y[3] = {qp, kp, vp};
        const int64_t ldy[3] = {ldq, ldq, ldq};
        return attn__matmul_n(ctx, 3, w, io->query, E, B * L, mm_T(a, L), y, ldy, NULL);
    }
    ATTN_TRY(attn__matmul(ctx, &a->q, io->query, E, B * L, mm_T(a, L), NULL, qp, ldq));
    for (int64_t b = 0; b < B; b++) {
        float *kb = kp + b * Sx * ldk, *vb = vp + b * Sx * ldk;
        ATTN_TRY(attn__matmul(ctx, &a->k, io->key + b * S * kd, kd, S, mm_T(a, S), NULL, kb, ldk));
        ATTN_TRY(
            attn__matmul(ctx, &a->v, io->value + b * S * vd, vd, S, mm_T(a, S), NULL, vb, ldk));
        int64_t j = S;
        if (a->bias_k) { /* torch.cat([k, bias_k.repeat(1, bsz, 1)]) */
            memcpy(kb + j * ldk, a->bias_k, (size_t)KD * sizeof(float));
            memcpy(vb + j * ldk, a->bias_v, (size_t)KD * sizeof(float));
            j++;
        }
        if (a->zero_attn) { /* a key and value of zeros after everything else */
            memset(kb + j * ldk, 0, (size_t)KD * sizeof(float));
            memset(vb + j * ldk, 0, (size_t)KD * sizeof(float));
        }
    }
    return ATTN_OK;
}

/* QK-norm and RoPE of the projected rows (self-attention: q and k rows of the same positions):
 * one pass over the rows on the context's threads, each row's heads normalised, then rotated
 * (each row alone: the bits do not depend on the split). */
typedef struct qk_job {
    const attn__attention *a;
    attn__rms_norm_fn rms;
    float *q, *k;
    int64_t ldq, ldk;
    const float *cs, *sn;
} qk_job;

static void qk_task(void *arg, int64_t r0, int64_t r1, int tid) {
    const qk_job *j = arg;
    const attn__attention *a = j->a;
    const int64_t H = a->H, Hkv = a->Hkv, D = a->D, rows = r1 - r0;
    float *q = j->q + r0 * j->ldq, *k = j->k + r0 * j->ldk;
    (void)tid;
    if (a->q_norm) /* QK-norm (Gemma 3, Qwen3): each head's q and k, before RoPE */
        for (int64_t h = 0; h < H || h < Hkv; h++) {
            if (h < H) j->rms(q + h * D, j->ldq, a->q_norm, a->eps, q + h * D, j->ldq, rows, D);
            if (h < Hkv) j->rms(k + h * D, j->ldk, a->k_norm, a->eps, k + h * D, j->ldk, rows, D);
        }
    if (j->cs) {
        const int64_t hd = D / 2;
        attn__rope_rows(q, j->ldq, rows, H, D, j->cs + r0 * hd, j->sn + r0 * hd,
                        a->rope_interleaved);
        attn__rope_rows(k, j->ldk, rows, Hkv, D, j->cs + r0 * hd, j->sn + r0 * hd,
                        a->rope_interleaved);
    }
}

static void qk_rows(attn_ctx *ctx, const attn__attention *a, const attn__attn_io *io, float *q,
                    int64_t ldq, float *k, int64_t ldk) {
    if (!a->q_norm && !a->rope) return;
    qk_job j = {a, ctx->kern.ew->rms_norm ? ctx->kern.ew->rms_norm : attn__rms_norm_c,
                q, k, ldq, ldk, NULL, NULL};
    if (a->rope) rope_table(a, io->rope, &j.cs, &j.sn);
    attn__parallel_for(ctx, io->B * io->L, qk_task, &j);
}

/* The score options of a (window, soft cap, scale) on s. */
static void score_opts(const attn__attention *a, attn__sdpa_args *s) {
    if (a->window > 0)
        s->window = 1, s->window_left = a->window - 1, s->window_right = -1;
    if (a->softcap > 0)
        s->softcap = a->softcap;
    if (a->scale != 0)
        s->scale = a->scale;
}

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

/* The attention of T new queries (rows ldq) of one sequence over its cache kv holding kv->pos
 * tokens, after the new keys and values (rows ldk) joined it: bottom-right causal, into ao
 * [T, H D]. */
/* Sequence b's new keys and values into its cache, and its attention arguments over the cache
 * (q [T][ldq], output ao [T][HD]); bf16 storage: *qb gets q rounded to bf16 (workspace, the
 * caller's mark), else NULL. */
static attn_status cache_args(attn_ctx *ctx, const attn__attention *a, const attn__attn_io *io,
                              const attn__kv *kv, int64_t T, const float *q, int64_t ldq,
                              const float *k, const float *v, int64_t ldk, float *ao,
                              attn__sdpa_args *s, attn__bf16 **qb) {
    const int64_t H = a->H, Hkv = a->Hkv, D = a->D, HD = H * D, S = kv->pos + T;
    kv_append(kv, k, v, ldk, T, Hkv, D);
    attn__sdpa_heads(s, 1, H, T, S, D, D, q, ldq, NULL, D, NULL, D, ao, HD);
    s->Hkv = Hkv;
    s->ks[0] = s->vs[0] = Hkv * kv->cap * D;
    s->ks[1] = s->vs[1] = kv->cap * D;
    s->causal = io->causal != ATTN_CAUSAL_NONE ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    score_opts(a, s);
    *qb = NULL;
    if (kv->dtype != ATTN_BF16) {
        s->k = kv->k, s->v = kv->v;
        return ATTN_OK;
    }
    /* attn_sdpa's bf16 storage: q rounded as well */
    ATTN_TRY(attn__ws_alloc(ctx, (size_t)(T * HD), sizeof **qb, (void **)qb));
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < HD; i++)
            (*qb)[t * HD + i] = attn__f32_to_bf16(q[t * ldq + i]);
    s->qs[0] = T * HD, s->qs[2] = HD;
    return ATTN_OK;
}

/* Each of the B sequences over its own cache (q, k, v, ao: sequence b's rows at b L; with
 * io->nkv, the nkv sequences' kv[b].len rows one after the other).  The sequences the split-KV
 * decode kernels take run as one call of them (continuous batching: one pass of the pool for
 * every sequence's step, each with the bits it gets alone), the others one by one. */
static attn_status attend_caches(attn_ctx *ctx, const attn__attention *a,
                                 const attn__attn_io *io, const float *q, int64_t ldq,
                                 const float *k, const float *v, int64_t ldk, float *ao) {
    const int64_t B = io->nkv ? io->nkv : io->B, HD = a->H * a->D;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st = ATTN_OK;
    attn__sdpa_args *s;
    attn__decode_job *jobs;
    int nj = 0;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B, sizeof *s, (void **)&s));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B, sizeof *jobs, (void **)&jobs));
    for (int64_t b = 0, r = 0; b < B; b++) {
        const attn__kv *kv = &io->kv[b];
        const int64_t L = io->nkv ? kv->len : io->L;
        attn__bf16 *qb;
        ATTN_TRYG(cache_args(ctx, a, io, kv, L, q + r * ldq, ldq, k + r * ldk, v + r * ldk, ldk,
                             io->last_rows ? ao + b * HD : ao + r * HD, &s[b], &qb));
        r += L;
        if (io->last_rows) { /* the last query alone, on the fused kernels as among all */
            s[b].q += (L - 1) * ldq, s[b].L = 1, s[b].fused = 1;
            if (qb) qb += (L - 1) * HD;
        }
        if (attn__sdpa_path(ctx, &s[b], qb != NULL) == ATTN__SDPA_DECODE && B > 1)
            jobs[nj++] = (attn__decode_job){&s[b], qb, qb ? (const attn__bf16 *)kv->k : NULL,
                                            qb ? (const attn__bf16 *)kv->v : NULL};
        else if (qb)
            ATTN_TRYG(attn__sdpa_bf16(ctx, &s[b], qb, kv->k, kv->v));
        else
            ATTN_TRYG(attn__sdpa(ctx, &s[b]));
    }
    ATTN_TRYG(attn__decode_multi(ctx, jobs, nj));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__attn_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__attention *a,
                                   int64_t B, int64_t L, int64_t S, int self,
                                   attn__attn_saved *rec) {
    const int64_t HD = a->H * a->D, KD = a->Hkv * a->D, Sx = S + attn__attention_extra(a);
    memset(rec, 0, sizeof *rec);
    if (self && L == S && Sx == S) {
        const int64_t ld = HD + 2 * KD;
        ATTN_TRY(attn__rec_f32(ctx, t, &rec->qp, B, L, ld, 1));
        rec->kp = rec->qp + HD, rec->vp = rec->qp + HD + KD, rec->ldq = rec->ldk = ld;
    } else {
        ATTN_TRY(attn__rec_f32(ctx, t, &rec->qp, B, L, HD, 1));
        ATTN_TRY(attn__rec_f32(ctx, t, &rec->kp, B, Sx, KD, 1));
        ATTN_TRY(attn__rec_f32(ctx, t, &rec->vp, B, Sx, KD, 1));
        rec->ldq = HD, rec->ldk = KD;
    }
    ATTN_TRY(attn__rec_f32(ctx, t, &rec->ao, B, L, HD, 1));
    if (a->q_norm)
        ATTN_TRY(attn__rec_f32(ctx, t, &rec->qkn, B, L, HD + KD, 1));
    return attn__rec_f32(ctx, t, &rec->lse, B, a->H, L, 1);
}

attn_status attn__attention_fwd(attn_ctx *ctx, const attn__attention *a, const attn__attn_io *io,
                                float *out, const attn__epi *oepi, float *weights, int average,
                                attn__attn_saved *rec) {
    const int64_t B = io->B, L = io->L, S = io->S, E = a->E, H = a->H, D = a->D;
    const int64_t HD = H * D, KD = a->Hkv * D, Sx = S + attn__attention_extra(a);
    const int one = one_buffer(a, io);
    attn__mask4 m0, m1;
    /* masks are checked before any work */
    ATTN_TRY(bind_attn_mask(ctx, io->mask, B, H, L, S, &m0));
    ATTN_TRY(bind_kpm(ctx, io->kpm, B, S, &m1));
    if (rec && (rec->ldq != HD) != one)
        return attn__fail(ctx, ATTN_E_INVALID, "internal: an attention record of another layout");
    if (io->kv && (rec || !one))
        return attn__fail(ctx, ATTN_E_INVALID,
                          "internal: a KV cache for other than a "
                          "self-attention");
    if (io->nseq && (rec || weights || !one || B != 1 || io->kv || io->mask || io->kpm ||
                     a->rope || (io->rng && io->rng->training && a->dropout > 0.0f)))
        return attn__fail(ctx, ATTN_E_INVALID,
                          "internal: packed sequences are for a plain self-attention's "
                          "inference");
    attn__mark mk = attn__ws_mark(ctx);
    float *qp, *kp, *vp, *ao, *w = NULL;
    int64_t ldq, ldk;
    attn_status st;
    if (rec) {
        qp = rec->qp, kp = rec->kp, vp = rec->vp, ao = rec->ao, ldq = rec->ldq, ldk = rec->ldk;
    } else if (one) {
        ldq = ldk = HD + 2 * KD;
        ATTN_TRYG(attn__ws_f32(ctx, &qp, B, L, ldq, 1));
        kp = qp + HD, vp = qp + HD + KD;
        ATTN_TRYG(attn__ws_f32(ctx, &ao, B, L, HD, 1));
    } else {
        ldq = HD, ldk = KD;
        ATTN_TRYG(attn__ws_f32(ctx, &qp, B, L, HD, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &kp, B, Sx, KD, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &vp, B, Sx, KD, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &ao, B, L, HD, 1));
    }
    if (weights)
        ATTN_TRYG(attn__ws_f32(ctx, &w, B, H, L, Sx));
    ATTN_TRYG(project(ctx, a, io, one, qp, kp, vp, ldq, ldk));
    if (rec && a->q_norm) /* QK-norm's input, for its backward */
        for (int64_t i = 0; i < B * L; i++) {
            memcpy(rec->qkn + i * (HD + KD), qp + i * ldq, (size_t)HD * sizeof(float));
            memcpy(rec->qkn + i * (HD + KD) + HD, kp + i * ldk, (size_t)KD * sizeof(float));
        }
    if (a->q_norm || a->rope)
        qk_rows(ctx, a, io, qp, ldq, kp, ldk);
    if (io->kv) { /* each sequence over its own cache */
        ATTN_TRYG(attend_caches(ctx, a, io, qp, ldq, kp, vp, ldk, ao));
    } else if (io->nseq) { /* each packed sequence over its own rows */
        int64_t rows = 0;
        for (int64_t i = 0; i < io->nseq && rows >= 0; i++)
            rows = io->seql[i] < 0 || io->seql[i] > L - rows ? -1 : rows + io->seql[i];
        if (rows != L) {
            st = attn__fail(ctx, ATTN_E_INVALID, "internal: packed sequences' lengths do not "
                                                 "sum to the rows");
            goto done;
        }
        for (int64_t i = 0, r = 0; i < io->nseq; r += io->seql[i++]) {
            attn__sdpa_args s;
            const int64_t n = io->seql[i];
            attn__sdpa_heads(&s, 1, H, n, n, D, D, qp + r * ldq, ldq, kp + r * ldk, ldk,
                             vp + r * ldk, ldk, ao + r * HD, HD);
            s.Hkv = a->Hkv;
            s.causal = io->causal;
            score_opts(a, &s);
            s.rows = io->rows;
            if (n) ATTN_TRYG(attn__sdpa(ctx, &s));
        }
    } else {
        attn__sdpa_args s;
        attn__sdpa_heads(&s, B, H, L, Sx, D, D, qp, ldq, kp, ldk, vp, ldk, ao, HD);
        s.Hkv = a->Hkv;
        s.mask_ncols[0] = s.mask_ncols[1] = S; /* appended bias/zero columns are never masked */
        s.causal = io->causal;
        score_opts(a, &s);
        if (io->rng && io->rng->training && a->dropout > 0.0f) { /* one dropout site */
            s.dropout_p = a->dropout;
            s.seed = io->rng->seed;
            s.offset = io->rng->offset++;
            s.drop_base = attn__rng_base(io->rng, B * H * L * Sx);
        }
        s.mask[0] = m0, s.mask[1] = m1;
        s.rows = io->rows;
        if (w)
            s.w = w, s.ws[0] = H * L * Sx, s.ws[1] = L * Sx, s.ws[2] = Sx, s.ws[3] = 1;
        if (rec)
            s.lse = rec->lse, s.ls[0] = H * L, s.ls[1] = L, s.ls[2] = 1;
        ATTN_TRYG(attn__sdpa(ctx, &s));
        if (rec) {
            rec->s = s;
            rec->s.w = NULL;
            rec->s.rows = io->rows || w; /* the row kernels ran: a recompute runs them too */
        }
    }
    if (out)
        ATTN_TRYG(attn__matmul(ctx, &a->o, ao, HD,
                               io->last_rows ? (io->nkv ? io->nkv : B) : B * L, mm_T(a, L), oepi,
                               out, E));
    if (weights) {
        if (average) { /* attn_output_weights.mean(dim=1) */
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < L; i++)
                    for (int64_t j = 0; j < Sx; j++) {
                        double acc = 0;
                        for (int64_t h = 0; h < H; h++)
                            acc += w[((b * H + h) * L + i) * Sx + j];
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

/* ---- the backward -------------------------------------------------------------------------- */
/* Gradients of the projections' inputs from dq (rows ldq), dk, dv (rows ldk, S' per sequence).
 * See attn__attention_bwd for dquery, dkey, dvalue, dx and res. */
static attn_status in_grads(attn_ctx *ctx, const attn__attention *a, const attn__gmap *g,
                            const attn__attn_io *io, int one, const float *dq, const float *dk,
                            const float *dv, int64_t ldq, int64_t ldk, float *dquery, float *dkey,
                            float *dvalue, float *dx, const float *res) {
    const int64_t B = io->B, L = io->L, S = io->S, E = a->E, M = B * L, kd = a->kdim, vd = a->vdim,
                  Sx = S + attn__attention_extra(a);
    float *gq = attn__g(g, a->q.data), *gk = attn__g(g, a->k.data), *gv = attn__g(g, a->v.data);
    float *gbq = attn__g(g, a->q.bias), *gbk = attn__g(g, a->k.bias), *gbv = attn__g(g, a->v.bias);
    if (one && a->qkv.data) {
        /* [dq | dk | dv] = d(x [Wq; Wk; Wv]^T): the three weights' gradients at once */
        attn__res_state rs;
        const attn__row_epi re = attn__res_epi(ctx, res, E, E, &rs);
        ATTN_TRY(attn__matmul_bwd(ctx, &a->qkv, io->query, E, dq, ldq, dx, E, 0,
                                  dx && res ? &re : NULL, attn__g(g, a->qkv.data),
                                  attn__g(g, a->qkv.bias), M));
        if (dx)
            return ATTN_OK;
        gq = gk = gv = gbq = gbk = gbv = NULL;
    }
    const int in_x = dx != NULL; /* the three into one, accumulated */
    ATTN_TRY(attn__matmul_bwd(ctx, &a->q, io->query, E, dq, ldq, in_x ? dx : dquery, E, 0, NULL, gq,
                              gbq, M));
    /* the keys' rows of every sequence: contiguous without appended keys */
    const int64_t nb = Sx == S ? 1 : B, rows = Sx == S ? B * S : S;
    for (int64_t b = 0; b < nb; b++) {
        float *xk = in_x ? dx + b * S * E : dkey ? dkey + b * S * kd : NULL;
        float *xv = in_x ? dx + b * S * E : dvalue ? dvalue + b * S * vd : NULL;
        ATTN_TRY(attn__matmul_bwd(ctx, &a->k, io->key + b * S * kd, kd, dk + b * Sx * ldk, ldk, xk,
                                  kd, in_x, NULL, gk, gbk, rows));
        ATTN_TRY(attn__matmul_bwd(ctx, &a->v, io->value + b * S * vd, vd, dv + b * Sx * ldk, ldk,
                                  xv, vd, in_x, NULL, gv, gbv, rows));
    }
    if (in_x && res)
        attn__add_f32(ctx, res, dx, dx, M * E);
    return ATTN_OK;
}

/*   out = o(ao),  ao = sdpa(q, k, v),  q, k, v = rope(norm(x Wq^T)), ...:
 *   dao = dout Wo;  dq, dk, dv = sdpa_bwd(dao) from the saved ao and lse (dk, dv summed over
 *   each group of query heads);  dq, dk through RoPE's transpose;  the inputs' gradients
 *   dq Wq, dk Wk, dv Wv;  dW* += d*^T (input),  db* += column sums. */
attn_status attn__attention_bwd(attn_ctx *ctx, const attn__attention *a, const attn__gmap *g,
                                const attn__attn_saved *rec, const attn__attn_io *io,
                                const float *dout, float *dquery, float *dkey, float *dvalue,
                                float *dx, const float *res) {
    const int64_t B = io->B, L = io->L, S = io->S, E = a->E, H = a->H, Hkv = a->Hkv, D = a->D;
    const int64_t HD = H * D, KD = Hkv * D, M = B * L, Sx = S + attn__attention_extra(a);
    const int one = rec->ldq != HD;
    ATTN_FAIL_IF(dx && !one && !(io->query == io->key && io->key == io->value), ctx, ATTN_E_INVALID,
                 "internal: one input gradient of a cross-attention");
    const char *nm[4] = {"the attention's q projection", "the attention's k projection",
                         "the attention's v projection", "the attention's o projection"};
    const attn__weight *w4[4] = {&a->q, &a->k, &a->v, &a->o};
    for (int i = 0; i < 4; i++)
        ATTN_TRY(attn__weight_trainable(ctx, w4[i], nm[i]));
    attn__sdpa_args s = rec->s;
    /* A forward that ran on the split-KV decode kernels (a few queries, no dropout) saved their
     * output and lse; the fused backward would start from them and differ from the recomputing
     * backward in the last bits, so it recomputes its own (the fused forward's) instead. */
    if (attn__sdpa_path(ctx, &s, 0) == ATTN__SDPA_DECODE)
        s.lse = NULL;
    attn__mark mk = attn__ws_mark(ctx);
    float *dao, *dq, *dk, *dv;
    const int64_t ldq = rec->ldq, ldk = rec->ldk;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &dao, B, L, HD, 1));
    if (one) {
        ATTN_TRYG(attn__ws_f32(ctx, &dq, B, L, ldq, 1));
        dk = dq + HD, dv = dq + HD + KD;
    } else {
        ATTN_TRYG(attn__ws_f32(ctx, &dq, B, L, HD, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &dk, B, Sx, KD, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &dv, B, Sx, KD, 1));
    }
    ATTN_TRYG(attn__matmul_bwd(ctx, &a->o, rec->ao, HD, dout, E, dao, HD, 0, NULL,
                               attn__g(g, a->o.data), attn__g(g, a->o.bias), M));
    {
        attn__sdpa_grads sg;
        memset(&sg, 0, sizeof sg);
        const int64_t qs[4] = {L * ldq, D, ldq, 1}, ks[4] = {Sx * ldk, D, ldk, 1};
        sg.dout = dao, memcpy(sg.dos, s.os, sizeof sg.dos);
        sg.dq = dq, memcpy(sg.dqs, qs, sizeof sg.dqs);
        sg.dk = dk, memcpy(sg.dks, ks, sizeof sg.dks);
        sg.dv = dv, memcpy(sg.dvs, ks, sizeof sg.dvs);
        ATTN_TRYG(attn__sdpa_bwd(ctx, &s, &sg));
    }
    if (a->bias_k) { /* the appended row S of every sequence came from bias_k / bias_v */
        float *gbk = attn__g(g, a->bias_k), *gbv = attn__g(g, a->bias_v);
        for (int64_t b = 0; b < B; b++)
            for (int64_t e = 0; e < KD; e++) {
                gbk[e] += dk[(b * Sx + S) * ldk + e];
                gbv[e] += dv[(b * Sx + S) * ldk + e];
            }
    }
    if (a->rope) {
        const float *cs, *sn;
        rope_table(a, io->rope, &cs, &sn);
        attn__rope_rows_bwd(dq, ldq, M, H, D, cs, sn, a->rope_interleaved);
        attn__rope_rows_bwd(dk, ldk, M, Hkv, D, cs, sn, a->rope_interleaved);
    }
    if (a->q_norm) { /* each head's RMSNorm, from its saved input */
        const int64_t ldn = HD + KD;
        float *gq = attn__g(g, a->q_norm), *gk = attn__g(g, a->k_norm);
        for (int64_t h = 0; h < H; h++)
            ATTN_TRYG(attn__rms_norm_bwd(ctx, rec->qkn + h * D, ldn, a->q_norm, a->eps, dq + h * D,
                                         ldq, dq + h * D, ldq, gq, M, D));
        for (int64_t h = 0; h < Hkv; h++)
            ATTN_TRYG(attn__rms_norm_bwd(ctx, rec->qkn + HD + h * D, ldn, a->k_norm, a->eps,
                                         dk + h * D, ldk, dk + h * D, ldk, gk, M, D));
    }
    ATTN_TRYG(in_grads(ctx, a, g, io, one, dq, dk, dv, ldq, ldk, dquery, dkey, dvalue, dx, res));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__attention_bwd_re(attn_ctx *ctx, const attn__attention *a, const attn__gmap *g,
                                   const attn__attn_io *io, const float *dout, float *dquery,
                                   float *dkey, float *dvalue) {
    attn__mark mk = attn__ws_mark(ctx);
    attn__attn_saved rec;
    attn_status st;
    /* the forward again up to the attention output, then the saved backward */
    ATTN_TRYG(attn__attn_saved_alloc(ctx, NULL, a, io->B, io->L, io->S, one_buffer(a, io), &rec));
    ATTN_TRYG(attn__attention_fwd(ctx, a, io, NULL, NULL, NULL, 0, &rec));
    ATTN_TRYG(attn__attention_bwd(ctx, a, g, &rec, io, dout, dquery, dkey, dvalue, NULL, NULL));
done:
    attn__ws_release(ctx, mk);
    return st;
}
