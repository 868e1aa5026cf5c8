/* Attention without parameters: simplified self-attention (seed 001) and scaled dot-product
 * attention (PyTorch scaled_dot_product_attention semantics). */
#include <math.h>
#include <string.h>

#include "../kernels/flash.h"
#include "../kernels/kernels.h"
#include "../kernels/sdpa_mixed.h"
#include "ops_util.h"

attn_sdpa_options attn_sdpa_defaults(void) {
    attn_sdpa_options o;
    memset(&o, 0, sizeof o);
    o.window = 0, o.window_left = o.window_right = -1; /* no window */
    return o;
}

/* Scores that overflow float (review F7b).  The inputs are finite (checked), so the result
 * can only be non-finite when a score, or a sum of products, overflowed.  The whole
 * contiguous [rows, width] result is scanned as attn__check_finite scans an input (in
 * parallel, at memory bandwidth): reading element 0 of each row instead cost a cache miss a
 * row, 2.3% of a two-thread backward at L = 4096, H = 12, and saw only the first column.
 * ATTN_CTX_NO_FINITE_CHECK turns it off with the input check (NaN inputs then give NaN
 * results, as they always did). */
static attn_status rows_finite(attn_ctx *ctx, const char *fn, const char *what, const float *p,
                               int64_t rows, int64_t width) {
    if (ctx->flags & ATTN_CTX_NO_FINITE_CHECK) return ATTN_OK;
    int64_t shape[2] = {rows, width};
    attn_tensor t = attn_tensor_make((void *)(uintptr_t)p, ATTN_F32, 2, shape);
    int64_t i = attn__find_nonfinite(ctx, &t, 0);
    if (i < 0) return ATTN_OK;
    return attn__fail(ctx, ATTN_E_NONFINITE,
                      "%s: %s row %lld is %s: the scores (or a sum of products) overflow float; "
                      "scale the inputs",
                      fn, what, (long long)(i / width), isnan(p[i]) ? "NaN" : "infinite");
}

attn_status attn_simple_self_attention(attn_ctx *ctx, const attn_tensor *X, attn_normalize norm,
                                       attn_tensor *scores, attn_tensor *weights,
                                       attn_tensor *context) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, X, "inputs", ATTN_F32, 2, 3));
    ATTN_FAIL_IF(norm != ATTN_NORM_SOFTMAX && norm != ATTN_NORM_SUM, ctx, ATTN_E_INVALID,
                 "unknown normalisation %d", (int)norm);
    int b3 = X->ndim == 3;
    int64_t B = b3 ? X->shape[0] : 1, T = X->shape[b3], E = X->shape[b3 + 1];
    int64_t wshape[3] = {B, T, T}, cshape[3] = {B, T, E};
    ATTN_TRY(attn__check(ctx, context, "context", ATTN_F32, X->ndim, X->ndim));
    ATTN_TRY(attn__check_shape(ctx, context, "context", X->ndim, cshape + !b3));
    attn_tensor *opt[2] = {scores, weights};
    const char *on[2] = {"scores", "weights"};
    for (int i = 0; i < 2; i++)
        if (opt[i] && opt[i]->data) {
            ATTN_TRY(attn__check(ctx, opt[i], on[i], ATTN_F32, X->ndim, X->ndim));
            ATTN_TRY(attn__check_shape(ctx, opt[i], on[i], X->ndim, wshape + !b3));
        }
    {
        attn__arg o[] = {{scores, "scores", 0}, {weights, "weights", 0}, {context, "context", 0}},
                  in[] = {{X, "X", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_simple_self_attention", o, 3, in, 1));
    }
    ATTN_TRY(attn__check_finite(ctx, X, "inputs", 0));
    attn__mark mk = attn__ws_mark(ctx);
    float *s, *w, *c;
    const float *x;
    attn_status st;
    ATTN_TRYG(attn__contig(ctx, X, &x));
    ATTN_TRYG(attn__ws_f32(ctx, &s, B, T, T, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &w, B, T, T, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &c, B, T, E, 1));
    /* scores = X X^T (every pair of tokens), weights = normalize(scores), context = weights X */
    int64_t bad = attn__simple_attn_ref(x, B, T, E, norm, s, w, c);
    if (bad >= 0) {
        st = attn__fail(ctx, ATTN_E_INVALID, "sum-normalisation: scores of row %lld sum to zero",
                        (long long)bad);
        goto done;
    }
    ATTN_TRYG(rows_finite(ctx, "attn_simple_self_attention", "context", c, B * T, E));
    attn__store(c, context);
    if (scores && scores->data) attn__store(s, scores);
    if (weights && weights->data) attn__store(w, weights);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_simple_self_attention_backward(attn_ctx *ctx, const attn_tensor *X,
                                                attn_normalize norm,
                                                const attn_tensor *dcontext, attn_tensor *dX) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, X, "inputs", ATTN_F32, 2, 3));
    ATTN_FAIL_IF(norm != ATTN_NORM_SOFTMAX && norm != ATTN_NORM_SUM, ctx, ATTN_E_INVALID,
                 "unknown normalisation %d", (int)norm);
    int b3 = X->ndim == 3;
    int64_t B = b3 ? X->shape[0] : 1, T = X->shape[b3], E = X->shape[b3 + 1];
    ATTN_TRY(attn__check(ctx, dcontext, "dcontext", ATTN_F32, X->ndim, X->ndim));
    ATTN_TRY(attn__check_shape(ctx, dcontext, "dcontext", X->ndim, X->shape));
    int want = dX && dX->data;
    if (want) {
        ATTN_TRY(attn__check(ctx, dX, "dX", ATTN_F32, X->ndim, X->ndim));
        ATTN_TRY(attn__check_shape(ctx, dX, "dX", X->ndim, X->shape));
    }
    {
        attn__arg o[] = {{dX, "dX", 0}}, in[] = {{X, "X", 0}, {dcontext, "dcontext", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_simple_self_attention_backward", o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, X, "inputs", 0));
    ATTN_TRY(attn__check_finite(ctx, dcontext, "dcontext", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *x, *dc;
    float *dx, *scratch;
    attn_status st;
    ATTN_TRYG(attn__contig(ctx, X, &x));
    ATTN_TRYG(attn__contig(ctx, dcontext, &dc));
    ATTN_TRYG(attn__ws_f32(ctx, &dx, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &scratch, 3, T, T, 1));
    int64_t bad = attn__simple_attn_bwd_ref(x, B, T, E, norm, dc, dx, scratch);
    if (bad >= 0) {
        st = attn__fail(ctx, ATTN_E_INVALID, "sum-normalisation: scores of row %lld sum to zero",
                        (long long)bad);
        goto done;
    }
    ATTN_TRYG(rows_finite(ctx, "attn_simple_self_attention_backward", "dX", dx, B * T, E));
    if (want) attn__store(dx, dX);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Validates q, k, v, the mask and the options (shared by attn_sdpa and attn_sdpa_backward)
 * and fills the input half of *a (no outputs). */
static attn_status sdpa_inputs(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_mask *mask,
                               const attn_sdpa_options *opt, attn__sdpa_args *a) {
    attn_sdpa_options o = opt ? *opt : attn_sdpa_defaults();
    attn_dtype dt = q && q->dtype == ATTN_BF16 ? ATTN_BF16 : ATTN_F32; /* all three alike */
    ATTN_TRY(attn__check(ctx, q, "query", dt, 4, 4));
    ATTN_TRY(attn__check(ctx, k, "key", dt, 4, 4));
    ATTN_TRY(attn__check(ctx, v, "value", dt, 4, 4));
    int64_t B = q->shape[0], H = q->shape[1], L = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], S = k->shape[2], Dv = v->shape[3];
    char s1[96], s2[96];
    ATTN_FAIL_IF(k->shape[0] != B || k->shape[3] != D, ctx, ATTN_E_SHAPE,
                 "key %s does not match query %s (batch and head dim must agree)",
                 attn__shape_str(k, s1, sizeof s1), attn__shape_str(q, s2, sizeof s2));
    ATTN_FAIL_IF(v->shape[0] != B || v->shape[1] != Hkv || v->shape[2] != S, ctx, ATTN_E_SHAPE,
                 "value %s does not match key %s (batch, heads and length must agree)",
                 attn__shape_str(v, s1, sizeof s1), attn__shape_str(k, s2, sizeof s2));
    ATTN_FAIL_IF(H % Hkv != 0, ctx, ATTN_E_SHAPE,
                 "query heads (%lld) must be a multiple of key/value heads (%lld)", (long long)H,
                 (long long)Hkv);
    ATTN_FAIL_IF((unsigned)o.causal > ATTN_CAUSAL_BOTTOM_RIGHT, ctx, ATTN_E_INVALID,
                 "unknown causal mode %d", (int)o.causal);
    ATTN_FAIL_IF(!isfinite(o.scale), ctx, ATTN_E_INVALID, "scale must be finite");
    ATTN_FAIL_IF(!(o.dropout_p >= 0.0f && o.dropout_p < 1.0f), ctx, ATTN_E_INVALID,
                 "dropout_p must be in [0, 1), got %g", (double)o.dropout_p);
    ATTN_FAIL_IF(!(isfinite(o.softcap) && o.softcap >= 0.0f), ctx, ATTN_E_INVALID,
                 "softcap must be finite and >= 0 (0 = off), got %g", (double)o.softcap);
    if (o.alibi_slopes)
        for (int64_t h = 0; h < H; h++) {
            float sl = o.alibi_slopes[h];
            ATTN_FAIL_IF(!isfinite(sl), ctx, ATTN_E_INVALID, "alibi_slopes[%lld] is not finite",
                         (long long)h);
            /* the bias reaches |slope| (L + S): keep it far from float overflow */
            ATTN_FAIL_IF(fabs((double)sl) * ((double)L + (double)S) > 1e30, ctx, ATTN_E_INVALID,
                         "alibi_slopes[%lld] = %g is too large: slope * (L + S) must stay "
                         "below 1e30",
                         (long long)h, (double)sl);
        }
    int64_t wshape[4] = {B, H, L, S};
    memset(a, 0, sizeof *a);
    ATTN_TRY(attn__mask_bind(ctx, mask, "attn_mask", wshape, &a->mask[0]));
    ATTN_TRY(attn__check_finite(ctx, q, "query", 0));
    ATTN_TRY(attn__check_finite(ctx, k, "key", 0));
    ATTN_TRY(attn__check_finite(ctx, v, "value", 0));
    a->B = B, a->H = H, a->Hkv = Hkv, a->L = L, a->S = S, a->D = D, a->Dv = Dv;
    a->q = q->data, a->k = k->data, a->v = v->data;
    memcpy(a->qs, q->stride, sizeof a->qs);
    memcpy(a->ks, k->stride, sizeof a->ks);
    memcpy(a->vs, v->stride, sizeof a->vs);
    a->mask_ncols[0] = S;
    a->causal = o.causal;
    a->scale = o.scale != 0.0f ? o.scale : (float)(1.0 / sqrt((double)D));
    a->dropout_p = o.dropout_p;
    a->seed = o.seed;
    a->offset = o.offset;
    /* any negative side is unlimited; no window at all when both are */
    a->window = o.window && (o.window_left >= 0 || o.window_right >= 0);
    a->window_left = o.window_left < 0 ? -1 : o.window_left;
    a->window_right = o.window_right < 0 ? -1 : o.window_right;
    a->alibi = o.alibi_slopes;
    a->softcap = o.softcap;
    return ATTN_OK;
}

attn_status attn_sdpa(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                      const attn_tensor *v, const attn_mask *mask, const attn_sdpa_options *opt,
                      attn_tensor *out, attn_tensor *weights, attn_tensor *lse) {
    return attn__sdpa_call(ctx, "attn_sdpa", q, k, v, mask, opt, out, weights, lse, 0);
}

/* NaN/inf scan of a 4-D bf16 view (attn__check_finite scans F32 only): a branch-free OR over
 * each row (the vectoriser's form), the message only once something is found. */
static attn_status bf16_finite(attn_ctx *ctx, const attn_tensor *t, const char *what) {
    if (ctx->flags & ATTN_CTX_NO_FINITE_CHECK) return ATTN_OK;
    const attn__bf16 *p = t->data;
    int64_t n = t->shape[3], s3 = t->stride[3];
    for (int64_t i0 = 0; i0 < t->shape[0]; i0++)
        for (int64_t i1 = 0; i1 < t->shape[1]; i1++)
            for (int64_t i2 = 0; i2 < t->shape[2]; i2++) {
                const attn__bf16 *r = p + i0 * t->stride[0] + i1 * t->stride[1] +
                                      i2 * t->stride[2];
                unsigned bad = 0;
                if (s3 == 1)
                    for (int64_t j = 0; j < n; j++) bad |= (r[j] & 0x7f80u) == 0x7f80u;
                else
                    for (int64_t j = 0; j < n; j++) bad |= (r[j * s3] & 0x7f80u) == 0x7f80u;
                if (!bad) continue;
                for (int64_t j = 0; j < n; j++) {
                    attn__bf16 x = r[j * s3];
                    ATTN_FAIL_IF((x & 0x7f80u) == 0x7f80u, ctx, ATTN_E_NONFINITE,
                                 "%s contains %s", what, x & 0x7fu ? "NaN" : "an infinity");
                }
            }
    return ATTN_OK;
}

/* opt->alibi_slopes as an [H] view (absent without ALiBi), for the overlap checks. */
static attn_tensor alibi_view(const attn_sdpa_options *opt, int64_t H) {
    attn_tensor t = attn_view1(NULL, H);
    if (opt && opt->alibi_slopes) t.data = (void *)(uintptr_t)opt->alibi_slopes;
    return t;
}

/* Whether row (b, h, i) has a key that neither the causal mode, the window nor the mask hides
 * (the mask row is read only for a row that came out fully masked). */
static int row_has_keys(const attn__sdpa_args *a, int64_t b, int64_t h, int64_t i) {
    int64_t lo, hi;
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S, i, &lo,
                     &hi);
    if (lo > hi) return 0;
    if (a->mask[0].kind == ATTN_MASK_NONE) return 1;
    for (int64_t j = lo; j <= hi; j++)
        if (attn__mask_at(&a->mask[0], b, h, i, j) != -INFINITY) return 1;
    return 0;
}

/* Scores that overflow float (review F7b) after a forward that wrote a->o and a->lse: a row
 * whose log-sum-exp is NaN or +inf, or -inf (the look of a fully masked row) although the row
 * has visible keys, had a score past the float range (the kernels differ in what they make
 * of it: NaN, or zeros); then, unless out was checked whole already (o_checked), an element
 * of out that is not finite had its weighted sum of values overflow.  One value of lse per
 * row, and out scanned as attn__check_finite scans an input (in parallel, at memory
 * bandwidth; element 0 of each row read one by one cost a cache miss a row): never a pass
 * over L x S.  Off with ATTN_CTX_NO_FINITE_CHECK, as rows_finite. */
static attn_status sdpa_overflow(attn_ctx *ctx, const char *fn, const attn__sdpa_args *a,
                                 int o_checked) {
    if (ctx->flags & ATTN_CTX_NO_FINITE_CHECK) return ATTN_OK;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->H; h++)
            for (int64_t i = 0; i < a->L; i++) {
                float l = a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]];
                if (isfinite(l) || (l == -INFINITY && !row_has_keys(a, b, h, i))) continue;
                return attn__fail(ctx, ATTN_E_NONFINITE,
                                  "%s: scores overflow float (row max is infinite, or too large "
                                  "for the exponential) at (b, h, i) = (%lld, %lld, %lld); scale "
                                  "the inputs",
                                  fn, (long long)b, (long long)h, (long long)i);
            }
    if (o_checked) return ATTN_OK;
    int64_t oshape[4] = {a->B, a->H, a->L, a->Dv};
    attn_tensor o = attn_tensor_make((void *)(uintptr_t)a->o, ATTN_F32, 4, oshape);
    memcpy(o.stride, a->os, sizeof a->os);
    int64_t bad = attn__find_nonfinite(ctx, &o, 0);
    if (bad < 0) return ATTN_OK;
    int64_t row = bad / a->Dv, i = row % a->L, h = row / a->L % a->H, b = row / a->L / a->H;
    float x = a->o[b * a->os[0] + h * a->os[1] + i * a->os[2] + bad % a->Dv * a->os[3]];
    return attn__fail(ctx, ATTN_E_NONFINITE,
                      "%s: out is %s at (b, h, i) = (%lld, %lld, %lld): the weighted sum of the "
                      "values overflows float; scale the values",
                      fn, isnan(x) ? "NaN" : "infinite", (long long)b, (long long)h,
                      (long long)i);
}

attn_status attn__sdpa_call(attn_ctx *ctx, const char *fn, const attn_tensor *q,
                            const attn_tensor *k, const attn_tensor *v, const attn_mask *mask,
                            const attn_sdpa_options *opt, attn_tensor *out, attn_tensor *weights,
                            attn_tensor *lse, uint64_t drop_base) {
    if (!ctx) return ATTN_E_INVALID;
    attn__sdpa_args a;
    ATTN_TRY(sdpa_inputs(ctx, q, k, v, mask, opt, &a));
    a.drop_base = drop_base;
    int64_t oshape[4] = {a.B, a.H, a.L, a.Dv}, wshape[4] = {a.B, a.H, a.L, a.S};
    ATTN_TRY(attn__check(ctx, out, "output", ATTN_F32, 4, 4));
    ATTN_TRY(attn__check_shape(ctx, out, "output", 4, oshape));
    if (weights && weights->data) {
        ATTN_TRY(attn__check(ctx, weights, "weights", ATTN_F32, 4, 4));
        ATTN_TRY(attn__check_shape(ctx, weights, "weights", 4, wshape));
    }
    if (lse && lse->data) {
        ATTN_TRY(attn__check(ctx, lse, "lse", ATTN_F32, 3, 3));
        ATTN_TRY(attn__check_shape(ctx, lse, "lse", 3, wshape));
    }
    {
        attn_tensor al = alibi_view(opt, a.H);
        attn__arg o[] = {{out, "out", 0}, {weights, "weights", 0}, {lse, "lse", 0}},
                  in[] = {{q, "q", 0}, {k, "k", 0}, {v, "v", 0}, {attn__mask_t(mask), "mask", 0},
                          {&al, "alibi_slopes", 0}};
        ATTN_TRY(attn__check_outputs(ctx, fn, o, 3, in, 5));
    }
    a.o = out->data;
    memcpy(a.os, out->stride, sizeof a.os);
    if (weights && weights->data) {
        a.w = weights->data;
        memcpy(a.ws, weights->stride, sizeof a.ws);
    }
    if (lse && lse->data) {
        a.lse = lse->data;
        memcpy(a.ls, lse->stride, sizeof a.ls);
    }
    if (q->dtype == ATTN_BF16) {
        ATTN_FAIL_IF(a.w, ctx, ATTN_E_UNSUPPORTED,
                     "attention weights are not available with bf16 inputs (use F32)");
        ATTN_TRY(bf16_finite(ctx, q, "query"));
        ATTN_TRY(bf16_finite(ctx, k, "key"));
        ATTN_TRY(bf16_finite(ctx, v, "value"));
    }
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    if (!a.lse && !(ctx->flags & ATTN_CTX_NO_FINITE_CHECK)) {
        /* the overflow check reads each row's log-sum-exp: have the kernel write it */
        float *l;
        ATTN_TRYG(attn__ws_f32(ctx, &l, a.B, a.H, a.L, 1));
        a.lse = l, a.ls[0] = a.H * a.L, a.ls[1] = a.L, a.ls[2] = 1;
    }
    /* the fast kernels (attn__sdpa_path chooses); the reference stays the oracle */
    if (q->dtype == ATTN_BF16) ATTN_TRYG(attn__sdpa_bf16(ctx, &a, q->data, k->data, v->data));
    else ATTN_TRYG(attn__sdpa(ctx, &a));
    st = sdpa_overflow(ctx, fn, &a, 0);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* Contiguous strides of a buffer of `shape`, written as 4-D [B, H, L, S] gradient strides:
 * 0 on the dimensions the mask broadcasts (absent or of size 1), so that they are summed. */
static void dmask_strides(const attn_tensor *m, int64_t dms[4]) {
    int64_t s = 1;
    for (int d = 0; d < 4; d++) dms[d] = 0;
    for (int d = m->ndim - 1; d >= 0; d--) {
        dms[4 - m->ndim + d] = m->shape[d] == 1 ? 0 : s;
        s *= m->shape[d];
    }
}

attn_status attn_sdpa_backward(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_mask *mask,
                               const attn_sdpa_options *opt, const attn_tensor *dout,
                               attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                               attn_tensor *dmask) {
    return attn__sdpa_backward_call(ctx, "attn_sdpa_backward", q, k, v, mask, opt, NULL, NULL,
                                    dout, dq, dk, dv, dmask, 0);
}

attn_status attn_sdpa_backward_saved(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_mask *mask,
                                     const attn_sdpa_options *opt, const attn_tensor *out,
                                     const attn_tensor *lse, const attn_tensor *dout,
                                     attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                     attn_tensor *dmask) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out || !out->data || !lse || !lse->data, ctx, ATTN_E_INVALID,
                 "attn_sdpa_backward_saved needs the forward's out and lse");
    return attn__sdpa_backward_call(ctx, "attn_sdpa_backward_saved", q, k, v, mask, opt, out, lse,
                                    dout, dq, dk, dv, dmask, 0);
}

attn_status attn__sdpa_backward_call(attn_ctx *ctx, const char *fn, const attn_tensor *q,
                                     const attn_tensor *k, const attn_tensor *v,
                                     const attn_mask *mask,
                                     const attn_sdpa_options *opt, const attn_tensor *out,
                                     const attn_tensor *lse, const attn_tensor *dout,
                                     attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                     attn_tensor *dmask, uint64_t drop_base) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(q && q->dtype == ATTN_BF16, ctx, ATTN_E_UNSUPPORTED,
                 "attn_sdpa_backward: bf16 inputs are supported by the forward only (use F32)");
    attn__sdpa_args a;
    ATTN_TRY(sdpa_inputs(ctx, q, k, v, mask, opt, &a));
    a.drop_base = drop_base;
    int64_t oshape[4] = {a.B, a.H, a.L, a.Dv}, qshape[4] = {a.B, a.H, a.L, a.D},
            kshape[4] = {a.B, a.Hkv, a.S, a.D}, vshape[4] = {a.B, a.Hkv, a.S, a.Dv};
    ATTN_TRY(attn__check(ctx, dout, "dout", ATTN_F32, 4, 4));
    ATTN_TRY(attn__check_shape(ctx, dout, "dout", 4, oshape));
    if (out && lse) { /* the saved forward: the fused backward starts from them */
        ATTN_TRY(attn__check(ctx, out, "out", ATTN_F32, 4, 4));
        ATTN_TRY(attn__check_shape(ctx, out, "out", 4, oshape));
        ATTN_TRY(attn__check(ctx, lse, "lse", ATTN_F32, 3, 3));
        ATTN_TRY(attn__check_shape(ctx, lse, "lse", 3, oshape));
        ATTN_TRY(attn__check_finite(ctx, out, "out", 0));
        ATTN_TRY(attn__check_finite(ctx, lse, "lse", 1)); /* -inf: a fully masked row */
        a.o = out->data, a.lse = lse->data;
        memcpy(a.os, out->stride, sizeof a.os);
        memcpy(a.ls, lse->stride, sizeof a.ls);
    }
    attn_tensor *outs[3] = {dq, dk, dv};
    const char *names[3] = {"dq", "dk", "dv"};
    const int64_t *shapes[3] = {qshape, kshape, vshape};
    for (int i = 0; i < 3; i++)
        if (outs[i] && outs[i]->data) {
            ATTN_TRY(attn__check(ctx, outs[i], names[i], ATTN_F32, 4, 4));
            ATTN_TRY(attn__check_shape(ctx, outs[i], names[i], 4, shapes[i]));
        }
    int want_dmask = dmask && dmask->data;
    if (want_dmask) {
        ATTN_FAIL_IF(!mask || mask->kind != ATTN_MASK_ADD, ctx, ATTN_E_INVALID,
                     "dmask is only defined for an additive attn_mask (ATTN_MASK_ADD)");
        ATTN_TRY(attn__check(ctx, dmask, "dmask", ATTN_F32, 1, 4));
        ATTN_TRY(attn__check_shape(ctx, dmask, "dmask", mask->t.ndim, mask->t.shape));
    }
    {
        attn_tensor al = alibi_view(opt, a.H);
        attn__arg o[] = {{dq, "dq", 0}, {dk, "dk", 0}, {dv, "dv", 0}, {dmask, "dmask", 0}},
                  in[] = {{q, "q", 0},   {k, "k", 0},       {v, "v", 0},
                          {attn__mask_t(mask), "mask", 0},   {&al, "alibi_slopes", 0},
                          {dout, "dout", 0}, {out, "out", 0}, {lse, "lse", 0}};
        ATTN_TRY(attn__check_outputs(ctx, fn, o, 4, in, 8));
    }
    ATTN_TRY(attn__check_finite(ctx, dout, "dout", 0));
    attn__sdpa_grads g;
    memset(&g, 0, sizeof g);
    g.dout = dout->data;
    memcpy(g.dos, dout->stride, sizeof g.dos);
    attn__mark mk = attn__ws_mark(ctx);
    float *buf[3] = {NULL, NULL, NULL};
    attn_status st;
    /* The fused backward writes contiguous gradients straight into place (no copy); the
     * others into contiguous buffers, stored afterwards. */
    int direct = !want_dmask && attn__sdpa_bwd_path(&a, &g) == ATTN__SDPA_FLASH;
    for (int i = 0; i < 3; i++)
        if (outs[i] && outs[i]->data) {
            if (direct && attn_tensor_is_contiguous(outs[i])) buf[i] = outs[i]->data;
            else
                ATTN_TRYG(attn__ws_f32(ctx, &buf[i], shapes[i][0], shapes[i][1], shapes[i][2],
                                       shapes[i][3]));
        }
    g.dq = buf[0], g.dk = buf[1], g.dv = buf[2];
    for (int d = 3; d >= 0; d--) { /* contiguous strides of the buffers */
        g.dqs[d] = d == 3 ? 1 : g.dqs[d + 1] * qshape[d + 1];
        g.dks[d] = d == 3 ? 1 : g.dks[d + 1] * kshape[d + 1];
        g.dvs[d] = d == 3 ? 1 : g.dvs[d + 1] * vshape[d + 1];
    }
    if (want_dmask) {
        int64_t n = attn_tensor_numel(dmask);
        ATTN_TRYG(attn__ws_f32(ctx, &g.dmask, n, 1, 1, 1));
        memset(g.dmask, 0, (size_t)n * sizeof(float));
        dmask_strides(dmask, g.dms);
    }
    if (a.o) { /* a saved forward: a row it lost to overflow has lse -inf but visible keys
                * (out and lse were checked finite above, lse but for -inf) */
        ATTN_TRYG(sdpa_overflow(ctx, fn, &a, 1));
    } else if (!(ctx->flags & ATTN_CTX_NO_FINITE_CHECK) &&
               attn__sdpa_bwd_path(&a, &g) == ATTN__SDPA_FLASH) {
        /* The fused backward starts from the forward's out and lse, which it would recompute
         * itself: run that forward here instead (the same kernel, so the same bits) and check
         * its rows for overflow. */
        attn__sdpa_args f = a;
        float *o, *l;
        ATTN_TRYG(attn__ws_f32(ctx, &o, a.B, a.H, a.L, a.Dv));
        ATTN_TRYG(attn__ws_f32(ctx, &l, a.B, a.H, a.L, 1));
        f.o = o, f.os[0] = a.H * a.L * a.Dv, f.os[1] = a.L * a.Dv, f.os[2] = a.Dv, f.os[3] = 1;
        f.lse = l, f.ls[0] = a.H * a.L, f.ls[1] = a.L, f.ls[2] = 1;
        f.w = NULL;
        if (attn__sdpa_mixed_bwd_ok(ctx, &a, &g)) ATTN_TRYG(attn__sdpa_mixed(ctx, &f));
        else ATTN_TRYG(attn__flash_fwd(ctx, &f));
        ATTN_TRYG(sdpa_overflow(ctx, fn, &f, 0));
        a.o = f.o, a.lse = f.lse;
        memcpy(a.os, f.os, sizeof a.os);
        memcpy(a.ls, f.ls, sizeof a.ls);
    }
    ATTN_TRYG(attn__sdpa_bwd(ctx, &a, &g)); /* fast kernels; the mask gradient on the reference */
    /* the row and reference backwards recompute each row: one that overflowed is NaN */
    for (int i = 0; i < 3; i++)
        if (buf[i])
            ATTN_TRYG(rows_finite(ctx, fn, names[i], buf[i],
                                  shapes[i][0] * shapes[i][1] * shapes[i][2], shapes[i][3]));
    for (int i = 0; i < 3; i++)
        if (buf[i]) attn__store(buf[i], outs[i]);
    if (want_dmask) attn__store(g.dmask, dmask);
done:
    attn__ws_release(ctx, mk);
    return st;
}
