/* torch.nn's position-wise feed-forward (attn_ffn_*): y = w_2(dropout(act(w_1(x)))), with
 * its backward; the feed-forward of the Transformer layers' blocks (block.c). */
#include <string.h>

#include "../kernels/ew.h"
#include "transformer.h"

typedef struct ffn {
    attn_transformer_config cfg;
    attn__lin w1, w2;
} ffn;

/* The hidden values of the feed-forward into a record: h = lin1(x), a = dropout(act(h)). */
static attn_status ffn_hidden(attn_ctx *ctx, const attn__lin *l1, attn_activation act, float p,
                              const float *x, int64_t M, attn__rng *rng, attn__ffn_saved *sv) {
    /* h and a = act(h) from the product's epilogue, on each row panel while it is warm (ReLU:
     * a alone, in place) */
    const attn__epi e = {ATTN__EPI_ACT, act,  NULL, NULL, NULL,
                         NULL,          sv->h == sv->a ? NULL : sv->a, sv->mask};
    ATTN_TRY(attn__lin_run(ctx, l1, x, &e, sv->h, M));
    sv->rng = *rng;
    attn__dropout(rng, p, sv->a, M * l1->out);
    return ATTN_OK;
}

/* y[M, E] = lin2(dropout(act(lin1(x[M, E])))), then oepi (NULL, or lin2's epilogue: a
 * residual, a layer norm); y must not overlap x or oepi->r.  sv: NULL, or a record whose h
 * and a ([M, F]) the forward fills.  Without a record the activation runs in lin1's
 * epilogue (the same bits). */
attn_status attn__ffn_fwd(attn_ctx *ctx, const attn__lin *l1, const attn__lin *l2,
                          attn_activation act, float p, const float *x, float *y, int64_t M,
                          attn__rng *rng, attn__ffn_saved *sv, const attn__epi *oepi) {
    int64_t F = l1->out;
    attn__mark mk = attn__ws_mark(ctx);
    float *a;
    attn_status st;
    if (sv) {
        ATTN_TRYG(ffn_hidden(ctx, l1, act, p, x, M, rng, sv));
        a = sv->a;
    } else {
        attn__epi e = {ATTN__EPI_ACT, act, NULL, NULL, NULL, NULL, NULL, NULL};
        ATTN_TRYG(attn__ws_f32(ctx, &a, M, F, 1, 1));
        ATTN_TRYG(attn__lin_run(ctx, l1, x, &e, a, M));
        attn__dropout(rng, p, a, M * F);
    }
    ATTN_TRYG(attn__lin_run(ctx, l2, a, oepi, y, M));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__ffn_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__lin *l1,
                                  attn_activation act, int64_t M, attn__ffn_saved *sv) {
    sv->mask = NULL;
    ATTN_TRY(attn__rec_f32(ctx, t, &sv->a, M, l1->out, 1, 1));
    /* ReLU's derivative is the sign of h, which a = relu(h) keeps (NaN: 0 in both); the
     * forward also keeps it as bits, which the backward reads instead of a */
    if (act == ATTN_ACT_RELU) {
        sv->h = sv->a;
        size_t words;
        if (!attn__mul_size((size_t)M, (size_t)((l1->out + 15) / 16), &words))
            return attn__fail(ctx, ATTN_E_OVERFLOW, "feed-forward record: %lld rows overflow",
                              (long long)M);
        return attn__rec_alloc(ctx, t, words, sizeof(uint16_t), (void **)&sv->mask);
    }
    return attn__rec_f32(ctx, t, &sv->h, M, l1->out, 1, 1);
}

/* relu' from the forward's bits, as a row epilogue of the gradient after the activation. */
typedef struct relu_bits {
    attn__relu_bwd_mask_fn fn;
    const uint16_t *mask;
    int64_t n;
} relu_bits;

static void relu_bits_rows(void *arg, float *y, int64_t ldy, int64_t i0, int64_t rows) {
    const relu_bits *r = arg;
    const int64_t w = (r->n + 15) / 16;
    for (int64_t m = 0; m < rows; m++) r->fn(r->mask + (i0 + m) * w, y + m * ldy, y + m * ldy, r->n);
}

/* forward (ffn_fwd): y = lin2(dropout(act(lin1(x)))) with record sv.  dx [M, E] overwritten. */
attn_status attn__ffn_bwd_saved(attn_ctx *ctx, const attn__lin *l1, const attn__lin *l2,
                                const attn__gmap *g, attn_activation act, float p,
                                const attn__ffn_saved *sv, const float *x, const float *dy,
                                float *dx, const float *res, int64_t M) {
    int64_t F = l1->out;
    attn__mark mk = attn__ws_mark(ctx);
    float *da;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &da, M, F, 1, 1));
    attn__rng site = sv->rng;
    if (!attn__drops(&site, p)) { /* act' in the product's epilogue, on rows still warm */
        attn__act_bwd_state as;
        relu_bits rb = {ctx->kern.ew->relu_bwd_mask ? ctx->kern.ew->relu_bwd_mask
                                                    : attn__relu_bwd_mask_c,
                        sv->mask, F};
        const attn__row_epi e = sv->mask ? (attn__row_epi){relu_bits_rows, &rb}
                                         : attn__act_bwd_epi(ctx, act, sv->h, F, F, &as);
        ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(l2->weight, NULL, l2->out, F), sv->a, F, dy,
                                   l2->out, da, F, 0, &e, attn__g(g, l2->weight),
                                   attn__g(g, l2->bias), M));
    } else {
        ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(l2->weight, NULL, l2->out, F), sv->a, F, dy,
                                   l2->out, da, F, 0, NULL, attn__g(g, l2->weight),
                                   attn__g(g, l2->bias), M));
        attn__dropout(&site, p, da, M * F);
        attn__act_bwd(ctx, act, sv->h, da, da, M * F);
    }
    {
        attn__res_state rs;
        const attn__row_epi re = attn__res_epi(ctx, res, l1->in, l1->in, &rs);
        ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(l1->weight, NULL, F, l1->in), x, l1->in, da, F,
                                   dx, l1->in, 0, res ? &re : NULL, attn__g(g, l1->weight),
                                   attn__g(g, l1->bias), M));
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* The same, recomputing h and a from x and the stream (lin2 itself is not needed). */
static attn_status ffn_bwd(attn_ctx *ctx, const attn__lin *l1, const attn__lin *l2,
                           const attn__gmap *g, attn_activation act, float p, const float *x,
                           const float *dy, float *dx, int64_t M, attn__rng *rng) {
    attn__mark mk = attn__ws_mark(ctx);
    attn__ffn_saved sv;
    attn_status st;
    ATTN_TRYG(attn__ffn_saved_alloc(ctx, NULL, l1, act, M, &sv));
    ATTN_TRYG(ffn_hidden(ctx, l1, act, p, x, M, rng, &sv));
    ATTN_TRYG(attn__ffn_bwd_saved(ctx, l1, l2, g, act, p, &sv, x, dy, dx, NULL, M));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_ffn_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                            attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "attn_ffn_create: NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(!cfg, ctx, ATTN_E_INVALID, "config is NULL");
    attn_transformer_config c = *cfg;
    c.nhead = 1; /* unused here */
    ATTN_TRY(attn__check_tcfg(ctx, &c));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__FFN, sizeof(ffn), &m));
    ffn *f = m->impl;
    f->cfg = c;
    attn_status st = attn__lin_reg(ctx, m, "", "w_1", &f->w1, c.d_model, c.dim_feedforward, c.bias);
    if (st == ATTN_OK)
        st = attn__lin_reg(ctx, m, "", "w_2", &f->w2, c.dim_feedforward, c.d_model, c.bias);
    return attn__module_done(ctx, m, st, out);
}

attn_status attn_ffn_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                             const attn_run *run, attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__FFN, "attn_ffn_forward"));
    const ffn *f = m->impl;
    ATTN_TRY(attn__check(ctx, x, "x", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, out, "output", ATTN_F32, 1, 4));
    char s1[96], s2[96];
    int ok = x->ndim == out->ndim && x->shape[x->ndim - 1] == f->cfg.d_model;
    for (int d = 0; ok && d < x->ndim; d++) ok = x->shape[d] == out->shape[d];
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_SHAPE, "feed-forward input %s and output %s must both be "
                 "[..., %lld]", attn__shape_str(x, s1, sizeof s1),
                 attn__shape_str(out, s2, sizeof s2), (long long)f->cfg.d_model);
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{out, "out", 0}},
                  ia[] = {{x, "x", 0}, {&P, "the module's parameters", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_ffn_forward", oa, 1, ia, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "x", 0));
    int64_t M = attn_tensor_numel(x) / f->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp;
    float *y;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    rng.nb = x->ndim >= 2 ? x->shape[0] : 1;
    ATTN_TRYG(attn__contig(ctx, x, &xp));
    ATTN_TRYG(attn__ws_f32(ctx, &y, M, f->cfg.d_model, 1, 1));
    ATTN_TRYG(attn__ffn_fwd(ctx, &f->w1, &f->w2, f->cfg.activation, f->cfg.dropout, xp, y, M, &rng,
                      NULL, NULL));
    attn__store(y, out);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_ffn_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *x,
                              const attn_run *run, const attn_tensor *dout, attn_tensor *dx) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__FFN, "attn_ffn_backward"));
    const ffn *f = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t E = f->cfg.d_model;
    ATTN_TRY(attn__check(ctx, x, "x", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, dout, "dout", ATTN_F32, 1, 4));
    char s1[96], s2[96];
    int ok = x->ndim == dout->ndim && x->shape[x->ndim - 1] == E;
    for (int d = 0; ok && d < x->ndim; d++) ok = x->shape[d] == dout->shape[d];
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_SHAPE, "feed-forward input %s and dout %s must both be "
                 "[..., %lld]", attn__shape_str(x, s1, sizeof s1),
                 attn__shape_str(dout, s2, sizeof s2), (long long)E);
    if (dx && dx->data) {
        ATTN_TRY(attn__check(ctx, dx, "dx", ATTN_F32, x->ndim, x->ndim));
        ATTN_TRY(attn__check_shape(ctx, dx, "dx", x->ndim, x->shape));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dx, "dx", 0}},
                  ia[] = {{x, "x", 0}, {dout, "dout", 0}, {&P, "the module's parameters", 0},
                          {&G, "the module's gradients", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_ffn_backward", oa, 1, ia, 4));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "x", 0));
    ATTN_TRY(attn__check_finite(ctx, dout, "dout", 0));
    int64_t M = attn_tensor_numel(x) / E;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *dy;
    float *d;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    rng.nb = x->ndim >= 2 ? x->shape[0] : 1;
    ATTN_TRYG(attn__contig(ctx, x, &xp));
    ATTN_TRYG(attn__contig(ctx, dout, &dy));
    ATTN_TRYG(attn__ws_f32(ctx, &d, M, E, 1, 1));
    ATTN_TRYG(ffn_bwd(ctx, &f->w1, &f->w2, &g, f->cfg.activation, f->cfg.dropout, xp, dy, d, M,
                      &rng));
    if (dx && dx->data) attn__store(d, dx);
done:
    attn__ws_release(ctx, mk);
    return st;
}
