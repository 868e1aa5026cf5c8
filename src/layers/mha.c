/* torch.nn.MultiheadAttention (batch_first=True): the module's entry points (the forward, its
 * training pair and backwards, with torch's argument checks) over the one attention module,
 * attn__attention (attention.c). */
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

attn_status attn_mha_create(attn_ctx *ctx, const attn_mha_config *cfg, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "attn_mha_create: NULL argument");
    *out = NULL;
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__MHA, sizeof(attn__attention), &m));
    attn_status st = attn__attention_mha_reg(ctx, m, "", m->impl, cfg);
    return attn__module_done(ctx, m, st, out);
}

/* The record of attn_mha_forward_train (in the tape). */
typedef struct mha_rec {
    int64_t B, L, S;
    const float *q, *k, *v; /* copies of the inputs (shared where the views are the same) */
    attn_mask kpm, am;      /* copies */
    int ckpt, is_causal;    /* ckpt: only the inputs, the masks and the stream are kept */
    int weights;            /* the forward wrote weights (ran the row kernels) */
    attn__rng rng;
    attn__attn_saved sv; /* its masks bound to the copies (not with ckpt) */
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
    const attn__attention *a = m->impl;
    attn_mha_options o = {0, 1, 0};
    if (opt) o = *opt;
    int64_t B = 0, L = 0, S = 0;
    attn__mark mk = attn__ws_mark(ctx);
    const float *q, *k, *v;
    float *op, *wp = NULL;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, query, "query", a->E, &B, &L, &q));
    ATTN_TRYG(attn__seq_in(ctx, key, "key", a->kdim, &B, &S, &k));
    ATTN_TRYG(attn__seq_in(ctx, value, "value", a->vdim, &B, &S, &v));
    if (attn__same_view(query, key)) k = q; /* self-attention: one projection GEMM */
    if (attn__same_view(key, value)) v = k;
    ATTN_TRYG(attn__seq_out(ctx, out, "output", B, L, a->E, &op));
    int64_t Sx = S + attn__attention_extra(a);
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
    rng.nb = B;
    mha_rec *rec = NULL;
    if (saved) { /* the inputs and masks are copied: the backward reads only the record */
        attn__tape *t = &saved->tape;
        ATTN_TRYG(attn__tape_alloc(ctx, t, 1, sizeof *rec, (void **)&rec));
        rec->B = B, rec->L = L, rec->S = S;
        ATTN_TRYG(copy_in(ctx, t, query, q, B * L * a->E, NULL, NULL, &rec->q));
        ATTN_TRYG(copy_in(ctx, t, key, k, B * S * a->kdim, query, rec->q, &rec->k));
        ATTN_TRYG(copy_in(ctx, t, value, v, B * S * a->vdim, key, rec->k, &rec->v));
        ATTN_TRYG(attn__saved_mask(ctx, t, key_padding_mask, "key_padding_mask", &rec->kpm));
        ATTN_TRYG(attn__saved_mask(ctx, t, amask, "attn_mask", &rec->am));
        rec->ckpt = (saved->flags & ATTN_SAVED_CHECKPOINT) != 0;
        rec->is_causal = o.is_causal;
        rec->weights = wp != NULL;
        rec->rng = rng;
        if (!rec->ckpt)
            ATTN_TRYG(attn__attn_saved_alloc(ctx, t, a, B, L, S,
                                             rec->q == rec->k && rec->k == rec->v, &rec->sv));
        key_padding_mask = attn__mask_opt(&rec->kpm), amask = attn__mask_opt(&rec->am);
    }
    {
        const attn__attn_io io =
            attn__attn_io_mha(q, k, v, B, L, S, key_padding_mask, amask, o.is_causal, &rng);
        ATTN_TRYG(attn__attention_fwd(ctx, a, &io, op, NULL, wp, o.average_attn_weights,
                                      rec && !rec->ckpt ? &rec->sv : NULL));
    }
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
static attn_status mha_grad_outs(attn_ctx *ctx, const attn__attention *a, int64_t B, int64_t L,
                                 int64_t S, attn_tensor *dquery, attn_tensor *dkey,
                                 attn_tensor *dvalue, float **dq, float **dk, float **dv) {
    if (dquery && dquery->data) ATTN_TRY(attn__seq_out(ctx, dquery, "dquery", B, L, a->E, dq));
    if (dkey && dkey->data)
        ATTN_TRY(attn__seq_out(ctx, dkey, "dkey", B, S, a->kdim, dk));
    if (dvalue && dvalue->data)
        ATTN_TRY(attn__seq_out(ctx, dvalue, "dvalue", B, S, a->vdim, dv));
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
    const attn__attention *a = m->impl;
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
    ATTN_TRYG(attn__seq_in(ctx, key, "key", a->kdim, &B, &S, &k));
    ATTN_TRYG(attn__seq_in(ctx, value, "value", a->vdim, &B, &S, &v));
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
    rng.nb = B;
    {
        const attn__attn_io io =
            attn__attn_io_mha(q, k, v, B, L, S, key_padding_mask, amask, o.is_causal, &rng);
        ATTN_TRYG(attn__attention_bwd_re(ctx, a, &g, &io, dy, dq, dk, dv));
    }
    mha_grad_ends(dq, dk, dv, dquery, dkey, dvalue);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_mha_backward_saved(attn_ctx *ctx, const attn_module *m, const attn_saved *saved,
                                    const attn_tensor *dout, attn_tensor *dquery,
                                    attn_tensor *dkey, attn_tensor *dvalue) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__MHA, "attn_mha_backward_saved"));
    const attn__attention *a = m->impl;
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
    attn__rng r = rec->rng;
    attn__attn_io io = attn__attn_io_mha(rec->q, rec->k, rec->v, B, L, S, attn__mask_opt(&rec->kpm),
                                         attn__mask_opt(&rec->am), rec->is_causal, &r);
    if (rec->ckpt) { /* the forward again, from the copies */
        io.rows = rec->weights;
        ATTN_TRYG(attn__attention_bwd_re(ctx, a, &g, &io, dy, dq, dk, dv));
    } else {
        ATTN_TRYG(attn__attention_bwd(ctx, a, &g, &rec->sv, &io, dy, dq, dk, dv, NULL, NULL));
    }
    mha_grad_ends(dq, dk, dv, dquery, dkey, dvalue);
done:
    attn__ws_release(ctx, mk);
    return st;
}
