/* torch.optim.AdamW, torch.nn.utils.clip_grad_norm_ and a warmup + cosine schedule. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/pool.h"
#include "../layers/layers.h"

struct attn_adamw {
    attn_adamw_config cfg;
    attn_alloc_fn alloc;
    attn_free_fn free;
    void *alloc_user;
    int64_t n, step;
    float *m, *v; /* exp_avg, exp_avg_sq: parallel to the module's arena */
};

attn_adamw_config attn_adamw_defaults(void) {
    attn_adamw_config c = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f};
    return c;
}

static attn_status check_cfg(attn_ctx *ctx, const attn_adamw_config *c) {
    ATTN_FAIL_IF(!c, ctx, ATTN_E_INVALID, "AdamW config is NULL");
    ATTN_FAIL_IF(!(c->lr >= 0.0f) || !isfinite(c->lr), ctx, ATTN_E_INVALID, "lr must be >= 0");
    ATTN_FAIL_IF(!(c->beta1 >= 0.0f && c->beta1 < 1.0f && c->beta2 >= 0.0f && c->beta2 < 1.0f),
                 ctx, ATTN_E_INVALID, "betas must be in [0, 1), got (%g, %g)",
                 (double)c->beta1, (double)c->beta2);
    ATTN_FAIL_IF(!(c->eps >= 0.0f) || !isfinite(c->eps), ctx, ATTN_E_INVALID, "eps must be >= 0");
    ATTN_FAIL_IF(!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay), ctx, ATTN_E_INVALID,
                 "weight_decay must be >= 0");
    return ATTN_OK;
}

attn_status attn_adamw_create(attn_ctx *ctx, const attn_module *m, const attn_adamw_config *cfg,
                              attn_adamw **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "attn_adamw_create: NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "attn_adamw_create: module is NULL");
    attn_adamw_config c = cfg ? *cfg : attn_adamw_defaults();
    ATTN_TRY(check_cfg(ctx, &c));
    attn_adamw *o = attn__calloc(ctx, 1, sizeof *o);
    ATTN_FAIL_IF(!o, ctx, ATTN_E_NOMEM, "out of memory (optimiser)");
    o->cfg = c;
    o->alloc = ctx->alloc, o->free = ctx->free, o->alloc_user = ctx->alloc_user;
    o->n = m->numel;
    o->m = attn__calloc(ctx, (size_t)o->n, sizeof(float));
    o->v = attn__calloc(ctx, (size_t)o->n, sizeof(float));
    if (!o->m || !o->v) {
        attn_adamw_free(o);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (optimiser state of %lld values)",
                          (long long)m->numel);
    }
    *out = o;
    return ATTN_OK;
}

void attn_adamw_free(attn_adamw *o) {
    if (!o) return;
    if (o->m) o->free(o->alloc_user, o->m);
    if (o->v) o->free(o->alloc_user, o->v);
    o->free(o->alloc_user, o);
}

int64_t attn_adamw_step_count(const attn_adamw *o) { return o ? o->step : 0; }

/* The update runs over blocks of parameters on the context's threads; each element's
 * arithmetic is its own, so the result is the same for any thread count. */
#define ADAMW_BLOCK 16384
typedef struct adamw_job {
    float *p, *m, *v;
    const float *g;
    int64_t n;
    float b1, b2, w, decay, step_size, bc2_sqrt, eps;
    int64_t *bad; /* per block: the first non-finite gradient's index, or -1 */
} adamw_job;

static void adamw_check_task(void *arg, int64_t b0, int64_t b1, int tid) {
    const adamw_job *j = arg;
    for (int64_t b = b0; b < b1; b++) {
        int64_t i0 = b * ADAMW_BLOCK, i1 = i0 + ADAMW_BLOCK < j->n ? i0 + ADAMW_BLOCK : j->n;
        /* branch-free and without a dependency chain (it runs at memory speed): an exponent
         * of all ones is an infinity or a NaN */
        uint32_t any = 0;
        for (int64_t i = i0; i < i1; i++) {
            uint32_t u;
            memcpy(&u, j->g + i, sizeof u);
            any |= (u & 0x7f800000u) == 0x7f800000u;
        }
        j->bad[b] = -1;
        if (any)
            for (int64_t i = i0; i < i1; i++)
                if (!isfinite(j->g[i])) {
                    j->bad[b] = i;
                    break;
                }
    }
}

static void adamw_update_task(void *arg, int64_t b0, int64_t b1, int tid) {
    const adamw_job *j = arg;
    const float b2 = j->b2, w = j->w, decay = j->decay, step_size = j->step_size,
                bc2_sqrt = j->bc2_sqrt, eps = j->eps;
    int64_t i0 = b0 * ADAMW_BLOCK, i1 = b1 * ADAMW_BLOCK < j->n ? b1 * ADAMW_BLOCK : j->n;
    float *restrict p = j->p, *restrict m = j->m, *restrict v = j->v;
    const float *restrict gr = j->g;
    for (int64_t i = i0; i < i1; i++) {
        float g = gr[i];
        p[i] *= decay;
        m[i] += w * (g - m[i]); /* exp_avg.lerp_(grad, 1 - beta1) */
        v[i] = v[i] * b2 + (1.0f - b2) * g * g;
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * (m[i] / denom);
    }
}

attn_status attn_adamw_step(attn_ctx *ctx, attn_adamw *o, attn_module *m, float lr) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!o || !m, ctx, ATTN_E_INVALID, "attn_adamw_step: NULL argument");
    ATTN_FAIL_IF(m->numel != o->n, ctx, ATTN_E_INVALID,
                 "the optimiser was made for %lld parameters, the module has %lld",
                 (long long)o->n, (long long)m->numel);
    ATTN_FAIL_IF(!m->grad, ctx, ATTN_E_INVALID, "the module has no gradients");
    if (!(lr > 0.0f)) lr = o->cfg.lr;
    ATTN_FAIL_IF(!isfinite(lr), ctx, ATTN_E_INVALID, "lr must be finite");
    const int64_t nb = (o->n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    int64_t *bad;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(nb ? nb : 1), sizeof *bad, (void **)&bad));
    /* the same arithmetic as torch.optim.AdamW's update, in float */
    const float b1 = o->cfg.beta1, b2 = o->cfg.beta2;
    const double bc1 = 1.0 - pow((double)b1, (double)(o->step + 1));
    const double bc2 = 1.0 - pow((double)b2, (double)(o->step + 1));
    adamw_job j = {m->arena, o->m, o->v, m->grad, o->n, b1, b2, 1.0f - b1,
                   (float)(1.0 - (double)lr * (double)o->cfg.weight_decay),
                   (float)((double)lr / bc1), (float)sqrt(bc2), o->cfg.eps, bad};
    /* every gradient is checked before anything changes */
    attn__parallel_for(ctx, nb, adamw_check_task, &j);
    for (int64_t b = 0; b < nb; b++)
        if (bad[b] >= 0) {
            st = attn__fail(ctx, ATTN_E_NONFINITE, "gradient %lld is not finite: refusing the step",
                            (long long)bad[b]);
            goto done;
        }
    o->step++;
    attn__parallel_for(ctx, nb, adamw_update_task, &j);
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}

static attn_status state_name(attn_ctx *ctx, char *buf, size_t n, const char *prefix,
                              const char *what, const char *param) {
    if (snprintf(buf, n, "%s%s.%s", prefix ? prefix : "", what, param) >= (int)n)
        return attn__fail(ctx, ATTN_E_INVALID, "optimiser state name too long");
    return ATTN_OK;
}

attn_status attn_adamw_save(attn_ctx *ctx, const attn_adamw *o, const attn_module *m,
                            attn_st_writer *w, const char *prefix) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!o || !m || !w, ctx, ATTN_E_INVALID, "attn_adamw_save: NULL argument");
    ATTN_FAIL_IF(m->numel != o->n, ctx, ATTN_E_INVALID, "optimiser and module do not match");
    char name[512], step[32];
    for (size_t i = 0; i < m->nparams; i++) {
        const attn__param *p = &m->params[i];
        int64_t off = p->data - m->arena;
        attn_tensor tm = attn_tensor_make(o->m + off, ATTN_F32, p->ndim, p->shape);
        attn_tensor tv = attn_tensor_make(o->v + off, ATTN_F32, p->ndim, p->shape);
        ATTN_TRY(state_name(ctx, name, sizeof name, prefix, "exp_avg", p->name));
        ATTN_TRY(attn_st_writer_add_view(w, name, &tm));
        ATTN_TRY(state_name(ctx, name, sizeof name, prefix, "exp_avg_sq", p->name));
        ATTN_TRY(attn_st_writer_add_view(w, name, &tv));
    }
    snprintf(step, sizeof step, "%lld", (long long)o->step);
    snprintf(name, sizeof name, "%sstep", prefix ? prefix : "");
    return attn_st_writer_meta(w, name, step);
}

attn_status attn_adamw_load(attn_ctx *ctx, attn_adamw *o, const attn_module *m,
                            const attn_st *st, const char *prefix) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!o || !m || !st, ctx, ATTN_E_INVALID, "attn_adamw_load: NULL argument");
    ATTN_FAIL_IF(m->numel != o->n, ctx, ATTN_E_INVALID, "optimiser and module do not match");
    char name[512];
    snprintf(name, sizeof name, "%sstep", prefix ? prefix : "");
    const char *sv = attn_st_meta(st, name);
    ATTN_FAIL_IF(!sv, ctx, ATTN_E_NOT_FOUND, "checkpoint has no optimiser step \"%s\"", name);
    char *end;
    long long stp = strtoll(sv, &end, 10);
    ATTN_FAIL_IF(*end || stp < 0, ctx, ATTN_E_FORMAT, "bad optimiser step \"%s\"", sv);
    /* check everything first so a failed load changes nothing */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < m->nparams; i++) {
            const attn__param *p = &m->params[i];
            int64_t off = p->data - m->arena;
            for (int k = 0; k < 2; k++) {
                attn_st_tensor info;
                ATTN_TRY(state_name(ctx, name, sizeof name, prefix, k ? "exp_avg_sq" : "exp_avg",
                                    p->name));
                ATTN_FAIL_IF(attn_st_find(st, name, &info) != ATTN_OK, ctx, ATTN_E_NOT_FOUND,
                             "checkpoint has no optimiser state \"%s\"", name);
                ATTN_FAIL_IF(info.numel != p->numel, ctx, ATTN_E_SHAPE,
                             "optimiser state \"%s\" has %lld values, expected %lld", name,
                             (long long)info.numel, (long long)p->numel);
                if (pass == 1)
                    ATTN_TRY(attn_st_to_f32(ctx, &info, (k ? o->v : o->m) + off, (size_t)p->numel));
            }
        }
    o->step = stp;
    return ATTN_OK;
}

attn_status attn_module_clip_grad_norm(attn_ctx *ctx, attn_module *m, float max_norm,
                                       float *norm) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "attn_module_clip_grad_norm: module is NULL");
    ATTN_FAIL_IF(!m->grad, ctx, ATTN_E_INVALID, "the module has no gradients");
    ATTN_FAIL_IF(!(max_norm >= 0.0f) || !isfinite(max_norm), ctx, ATTN_E_INVALID,
                 "max_norm must be finite and >= 0");
    double s = 0;
    for (int64_t i = 0; i < m->numel; i++) s += (double)m->grad[i] * m->grad[i];
    float total = (float)sqrt(s);
    if (norm) *norm = total;
    ATTN_FAIL_IF(!isfinite(total), ctx, ATTN_E_NONFINITE, "gradient norm is not finite");
    if (max_norm > 0.0f) {
        float coef = max_norm / (total + 1e-6f);
        if (coef < 1.0f)
            for (int64_t i = 0; i < m->numel; i++) m->grad[i] *= coef;
    }
    return ATTN_OK;
}

float attn_lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, float lr_max,
                            float lr_min) {
    if (step < 0) step = 0;
    if (warmup > 0 && step < warmup) return lr_max * (float)(step + 1) / (float)warmup;
    if (step >= total || total <= warmup) return lr_min;
    double t = (double)(step - warmup) / (double)(total - warmup);
    return lr_min + (lr_max - lr_min) * (float)(0.5 * (1.0 + cos(3.141592653589793 * t)));
}
