/* Modules: a named parameter table over one arena (the state_dict), shared by every layer. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layers.h"

static const char *const kind_names[] = {
    "linear", "layer_norm", "embedding", "seed_attention", "multihead_attention",
    "general_attention", "additive_attention", "feed_forward", "transformer_encoder_layer",
    "transformer_decoder_layer", "transformer_encoder", "transformer_decoder", "transformer",
    "gpt", "vit_embed", "seq2seq", "bert", "vit", "llama_mlp", "llama_attention", "llama_layer",
    "llm"};

attn_status attn__module_new(attn_ctx *ctx, attn__kind kind, size_t impl_size,
                             attn_module **out) {
    attn_module *m = attn__calloc(ctx, 1, sizeof *m);
    if (!m) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory creating a module");
    m->kind = kind;
    m->alloc = ctx->alloc;
    m->free = ctx->free;
    m->alloc_user = ctx->alloc_user;
    m->impl = attn__calloc(ctx, 1, impl_size);
    if (!m->impl) {
        attn__free(ctx, m);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory creating a module");
    }
    *out = m;
    return ATTN_OK;
}

void attn_module_free(attn_module *m) {
    if (!m || m->owner) return;
    for (size_t i = 0; i < m->nparams; i++)
        if (m->params[i].name) m->free(m->alloc_user, m->params[i].name);
    if (m->params) m->free(m->alloc_user, m->params);
    if (m->arena) m->free(m->alloc_user, m->arena);
    if (m->impl) m->free(m->alloc_user, m->impl);
    if (m->extra) m->free(m->alloc_user, m->extra);
    if (m->grad) m->free(m->alloc_user, m->grad);
    m->free(m->alloc_user, m);
}

attn_status attn__param_reg(attn_ctx *ctx, attn_module *m, const char *prefix, const char *name,
                            float **slot, float init, int ndim, int64_t d0, int64_t d1,
                            int64_t d2) {
    if (!attn__grow(ctx, (void **)&m->params, &m->capparams, m->nparams, sizeof *m->params))
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (parameter table)");
    attn__param *p = &m->params[m->nparams];
    memset(p, 0, sizeof *p);
    size_t n = strlen(prefix ? prefix : "") + strlen(name) + 1;
    p->name = attn__malloc(ctx, n);
    if (!p->name) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (parameter name)");
    snprintf(p->name, n, "%s%s", prefix ? prefix : "", name);
    m->nparams++;
    int64_t d[3] = {d0, d1, d2}, numel = 1;
    p->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (d[i] <= 0)
            return attn__fail(ctx, ATTN_E_SHAPE, "parameter %s would have size %lld", p->name,
                              (long long)d[i]);
        p->shape[i] = d[i];
        if (!attn__mul_i64(numel, d[i], &numel))
            return attn__fail(ctx, ATTN_E_OVERFLOW, "parameter %s is too large", p->name);
    }
    p->numel = numel;
    if (ctx->psrc) {
        /* built from a file's claims: the tensor must be there with this exact shape before
         * the parameter counts towards the arena */
        attn_st_tensor info;
        int found;
        ATTN_TRY(attn__param_match(ctx, ctx->psrc, ctx->psrc_prefix, p->name, ndim, p->shape, 1,
                                   &info, &found));
    }
    p->slot = slot;
    p->init = init;
    if (m->numel > INT64_MAX - numel)
        return attn__fail(ctx, ATTN_E_OVERFLOW, "module parameters overflow");
    m->numel += numel;
    return ATTN_OK;
}

void attn__param_init_last(attn_module *m, int kind, double a) {
    if (!m->nparams) return;
    m->params[m->nparams - 1].init_kind = kind;
    m->params[m->nparams - 1].init_a = (float)a;
}

void attn__param_to_weight(attn_module *m, attn__weight *w, int bias, int64_t off) {
    if (!m->nparams)
        return;
    attn__param *p = &m->params[m->nparams - 1];
    if (p->nto == 4)
        return;
    p->to[p->nto].w = w, p->to[p->nto].bias = bias, p->to[p->nto].off = off;
    p->nto++;
}

attn_status attn__module_finish(attn_ctx *ctx, attn_module *m) {
    if ((uint64_t)m->numel > SIZE_MAX / sizeof(float)) {
        attn_module_free(m);
        return attn__fail(ctx, ATTN_E_OVERFLOW, "module parameters overflow");
    }
    m->arena = attn__malloc(ctx, (size_t)m->numel * sizeof(float));
    if (!m->arena) {
        long long n = (long long)m->numel;
        attn_module_free(m);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory for %lld parameters", n);
    }
    float *p = m->arena;
    for (size_t i = 0; i < m->nparams; i++) {
        attn__param *q = &m->params[i];
        q->data = p;
        for (int64_t j = 0; j < q->numel; j++) p[j] = q->init;
        if (q->slot)
            *q->slot = p;
        for (int k = 0; k < q->nto; k++) {
            if (q->to[k].bias)
                q->to[k].w->bias = p + q->to[k].off;
            else
                q->to[k].w->data = p + q->to[k].off;
        }
        p += q->numel;
    }
    return ATTN_OK;
}

attn_status attn__module_done(attn_ctx *ctx, attn_module *m, attn_status st,
                              attn_module **out) {
    if (st != ATTN_OK) {
        attn_module_free(m);
        return st;
    }
    ATTN_TRY(attn__module_finish(ctx, m));
    *out = m;
    return ATTN_OK;
}

attn_status attn__module_expect(attn_ctx *ctx, const attn_module *m, attn__kind kind,
                                const char *fn) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "%s: module is NULL", fn);
    ATTN_FAIL_IF(m->kind != kind, ctx, ATTN_E_INVALID, "%s: module is a %s, not a %s", fn,
                 kind_names[m->kind], kind_names[kind]);
    return ATTN_OK;
}

const char *attn_module_kind(const attn_module *m) {
    return m ? kind_names[m->kind] : "";
}
size_t attn_module_param_count(const attn_module *m) { return m ? m->nparams : 0; }
int64_t attn_module_numel(const attn_module *m) { return m ? m->numel : 0; }

static attn_tensor param_view(const attn__param *p) {
    return attn_tensor_make(p->data, ATTN_F32, p->ndim, p->shape);
}

attn_status attn_module_param_at(const attn_module *m, size_t i, const char **name,
                                 attn_tensor *view) {
    if (!m || i >= m->nparams) return ATTN_E_NOT_FOUND;
    if (name) *name = m->params[i].name;
    if (view) *view = param_view(&m->params[i]);
    return ATTN_OK;
}

attn_status attn_module_param(attn_ctx *ctx, const attn_module *m, const char *name,
                              attn_tensor *view) {
    if (!m || !name) return attn__fail(ctx, ATTN_E_INVALID, "module or name is NULL");
    for (size_t i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) {
            if (view) *view = param_view(&m->params[i]);
            return ATTN_OK;
        }
    return attn__fail(ctx, ATTN_E_NOT_FOUND, "%s has no parameter named \"%s\"",
                      kind_names[m->kind], name);
}

/* ---- shared helpers -------------------------------------------------------------------- */
attn__rng attn__rng_from(const attn_run *run) {
    attn__rng r = {0, 0, 0, 0, 0};
    if (run) {
        r.training = run->training;
        r.seed = run->seed;
        r.offset = run->offset;
        r.b0 = run->batch_first > 0 ? run->batch_first : 0;
    }
    return r;
}

void attn__dropout(attn__rng *rng, float p, float *x, int64_t n) {
    if (!rng || !rng->training || !(p > 0.0f)) return;
    uint64_t off = rng->offset++;
    const uint64_t base = attn__rng_base(rng, n);
    float scale = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; i++)
        x[i] = attn_dropout_keep(rng->seed, off, base + (uint64_t)i, p) ? x[i] * scale : 0.0f;
}

attn_status attn__lin_reg(attn_ctx *ctx, attn_module *m, const char *prefix, const char *name,
                          attn__lin *l, int64_t in, int64_t out, int bias) {
    char buf[128];
    l->in = in;
    l->out = out;
    l->bias = NULL;
    if (snprintf(buf, sizeof buf, "%s.weight", name) >= (int)sizeof buf)
        return attn__fail(ctx, ATTN_E_INVALID, "parameter name too long");
    ATTN_TRY(attn__param_reg(ctx, m, prefix, buf, &l->weight, 0.0f, 2, out, in, 0));
    /* nn.Linear: kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(in), 1/sqrt(in)); the bias too */
    attn__param_init_last(m, ATTN__INIT_UNIFORM, 1.0 / sqrt((double)in));
    if (bias) {
        snprintf(buf, sizeof buf, "%s.bias", name);
        ATTN_TRY(attn__param_reg(ctx, m, prefix, buf, &l->bias, 0.0f, 1, out, 0, 0));
        attn__param_init_last(m, ATTN__INIT_UNIFORM, 1.0 / sqrt((double)in));
    }
    return ATTN_OK;
}

attn_status attn__ln_reg(attn_ctx *ctx, attn_module *m, const char *prefix, const char *name,
                         attn__ln *l, int64_t E, float eps, int bias) {
    char buf[128];
    l->E = E;
    l->eps = eps;
    l->bias = NULL;
    l->rms = 0;
    if (snprintf(buf, sizeof buf, "%s.weight", name) >= (int)sizeof buf)
        return attn__fail(ctx, ATTN_E_INVALID, "parameter name too long");
    ATTN_TRY(attn__param_reg(ctx, m, prefix, buf, &l->weight, 1.0f, 1, E, 0, 0));
    if (bias) {
        snprintf(buf, sizeof buf, "%s.bias", name);
        ATTN_TRY(attn__param_reg(ctx, m, prefix, buf, &l->bias, 0.0f, 1, E, 0, 0));
    }
    return ATTN_OK;
}

attn_status attn__seq_in(attn_ctx *ctx, const attn_tensor *t, const char *what, int64_t E,
                         int64_t *B, int64_t *L, const float **p) {
    ATTN_TRY(attn__check(ctx, t, what, ATTN_F32, 3, 3));
    char s[96];
    ATTN_FAIL_IF(t->shape[2] != E, ctx, ATTN_E_SHAPE,
                 "%s has shape %s, its last dimension must be %lld", what,
                 attn__shape_str(t, s, sizeof s), (long long)E);
    ATTN_FAIL_IF(*B && t->shape[0] != *B, ctx, ATTN_E_SHAPE,
                 "%s has shape %s, batch must be %lld", what, attn__shape_str(t, s, sizeof s),
                 (long long)*B);
    ATTN_FAIL_IF(*L && t->shape[1] != *L, ctx, ATTN_E_SHAPE,
                 "%s has shape %s, length must be %lld", what, attn__shape_str(t, s, sizeof s),
                 (long long)*L);
    *B = t->shape[0];
    *L = t->shape[1];
    ATTN_TRY(attn__check_finite(ctx, t, what, 0));
    return attn__contig(ctx, t, p);
}

attn_status attn__seq_grad_out(attn_ctx *ctx, const attn_tensor *t, const char *what,
                               int64_t B, int64_t L, int64_t E) {
    if (!t || !t->data) return ATTN_OK;
    ATTN_TRY(attn__check(ctx, t, what, ATTN_F32, 3, 3));
    int64_t shape[3] = {B, L, E};
    return attn__check_shape(ctx, t, what, 3, shape);
}

attn_status attn__seq_grad_buf(attn_ctx *ctx, const attn_tensor *t, int64_t B, int64_t L,
                               int64_t E, float **p) {
    if (t && t->data && attn_tensor_is_contiguous(t)) {
        *p = t->data;
        return ATTN_OK;
    }
    return attn__ws_f32(ctx, p, B, L, E, 1);
}

attn_status attn__seq_out(attn_ctx *ctx, attn_tensor *t, const char *what, int64_t B,
                          int64_t L, int64_t E, float **p) {
    ATTN_TRY(attn__check(ctx, t, what, ATTN_F32, 3, 3));
    int64_t shape[3] = {B, L, E};
    ATTN_TRY(attn__check_shape(ctx, t, what, 3, shape));
    if (attn_tensor_is_contiguous(t)) {
        *p = t->data;
        return ATTN_OK;
    }
    return attn__ws_f32(ctx, p, B, L, E, 1);
}

void attn__seq_out_end(float *p, attn_tensor *t) {
    if (p != t->data) attn__store(p, t);
}

/* ---- gradients ------------------------------------------------------------------------- */
attn_status attn_module_enable_grad(attn_ctx *ctx, attn_module *m) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "attn_module_enable_grad: module is NULL");
    if (m->grad) return ATTN_OK;
    m->grad = attn__calloc(ctx, (size_t)m->numel, sizeof(float));
    ATTN_FAIL_IF(!m->grad, ctx, ATTN_E_NOMEM, "out of memory for %lld gradients",
                 (long long)m->numel);
    return ATTN_OK;
}

int attn_module_has_grad(const attn_module *m) { return m && m->grad; }

void attn_module_zero_grad(attn_module *m) {
    if (m && m->grad) memset(m->grad, 0, (size_t)m->numel * sizeof(float));
}

attn_status attn_module_grad_at(const attn_module *m, size_t i, const char **name,
                                attn_tensor *view) {
    if (!m || i >= m->nparams) return ATTN_E_NOT_FOUND;
    if (!m->grad) return ATTN_E_INVALID;
    const attn__param *p = &m->params[i];
    if (name) *name = p->name;
    if (view) *view = attn_tensor_make(m->grad + (p->data - m->arena), ATTN_F32, p->ndim, p->shape);
    return ATTN_OK;
}

attn_status attn_module_grad(attn_ctx *ctx, const attn_module *m, const char *name,
                             attn_tensor *view) {
    if (!m || !name) return attn__fail(ctx, ATTN_E_INVALID, "module or name is NULL");
    ATTN_FAIL_IF(!m->grad, ctx, ATTN_E_INVALID,
                 "gradients are not enabled (call attn_module_enable_grad)");
    for (size_t i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) return attn_module_grad_at(m, i, NULL, view);
    return attn__fail(ctx, ATTN_E_NOT_FOUND, "%s has no parameter named \"%s\"",
                      kind_names[m->kind], name);
}

attn_status attn__module_gmap(attn_ctx *ctx, const attn_module *m, attn__gmap *out) {
    ATTN_FAIL_IF(!m->grad, ctx, ATTN_E_INVALID,
                 "%s: gradients are not enabled (call attn_module_enable_grad first)",
                 kind_names[m->kind]);
    out->arena = m->arena;
    out->grad = m->grad;
    return ATTN_OK;
}

/* ---- initialisation -------------------------------------------------------------------- */
/* Uniform [0, 1) and standard normal draws from Philox: parameter i, element j, draw k. */
static void draws(uint64_t seed, uint64_t i, uint64_t j, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)j, (uint32_t)(j >> 32), (uint32_t)i, 0x696e6974u /* "init" */};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    attn__philox(ctr, key, out);
}
static double u01(uint32_t x) { return (double)(x >> 8) * (1.0 / 16777216.0); }

attn_status attn_module_init(attn_ctx *ctx, attn_module *m, uint64_t seed) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "attn_module_init: module is NULL");
    for (size_t i = 0; i < m->nparams; i++) {
        attn__param *p = &m->params[i];
        for (int64_t j = 0; j < p->numel; j++) {
            uint32_t r[4];
            draws(seed, i, (uint64_t)j, r);
            double v;
            switch (p->init_kind) {
            case ATTN__INIT_UNIFORM: v = (2.0 * u01(r[0]) - 1.0) * p->init_a; break;
            case ATTN__INIT_UNIFORM01: v = u01(r[0]); break;
            case ATTN__INIT_NORMAL: { /* Box-Muller on 2 x 32 random bits */
                double u1 = ((double)r[0] + 1.0) / 4294967297.0, u2 = (double)r[1] / 4294967296.0;
                v = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2) * p->init_a;
                break;
            }
            default: v = p->init; break;
            }
            p->data[j] = (float)v;
        }
    }
    return ATTN_OK;
}
