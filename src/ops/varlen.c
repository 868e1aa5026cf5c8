/* Attention over packed variable-length sequences (attn_sdpa_varlen): each sequence is one
 * attn_sdpa call on views into the packed tensors, so every option, kernel and check of
 * attn_sdpa applies unchanged, and no padding is ever computed.  The dropout stream continues
 * from one sequence to the next (drop_base), so two sequences never share dropout draws. */
#include <math.h>
#include <string.h>

#include "ops_util.h"

/* Reads cu_seqlens (I32 or I64, [B + 1]) into a workspace array after checking that it starts
 * at 0, never decreases and ends at total. */
static attn_status read_cu(attn_ctx *ctx, const attn_tensor *cu, const char *what,
                           int64_t total, int64_t **out, int64_t *nseq) {
    if (!cu || !cu->data) return attn__fail(ctx, ATTN_E_INVALID, "%s is missing", what);
    ATTN_FAIL_IF(cu->dtype != ATTN_I32 && cu->dtype != ATTN_I64, ctx, ATTN_E_DTYPE,
                 "%s must be I32 or I64", what);
    ATTN_TRY(attn__check(ctx, cu, what, cu->dtype, 1, 1));
    int64_t n = cu->shape[0];
    ATTN_FAIL_IF(n < 2, ctx, ATTN_E_SHAPE, "%s must hold B + 1 >= 2 offsets, got %lld", what,
                 (long long)n);
    int64_t *v;
    ATTN_TRY(attn__ws_alloc(ctx, (size_t)n, sizeof *v, (void **)&v));
    for (int64_t i = 0; i < n; i++) {
        int64_t o = i * cu->stride[0];
        v[i] = cu->dtype == ATTN_I32 ? ((const int32_t *)cu->data)[o]
                                     : ((const int64_t *)cu->data)[o];
        ATTN_FAIL_IF(i == 0 && v[0] != 0, ctx, ATTN_E_INVALID, "%s[0] must be 0, got %lld",
                     what, (long long)v[0]);
        ATTN_FAIL_IF(i > 0 && v[i] < v[i - 1], ctx, ATTN_E_INVALID,
                     "%s must not decrease: %s[%lld] = %lld < %lld", what, what, (long long)i,
                     (long long)v[i], (long long)v[i - 1]);
    }
    ATTN_FAIL_IF(v[n - 1] != total, ctx, ATTN_E_SHAPE,
                 "%s ends at %lld but the packed tensor holds %lld rows", what,
                 (long long)v[n - 1], (long long)total);
    *out = v;
    *nseq = n - 1;
    return ATTN_OK;
}

/* Rows [r0, r0 + n) of a packed [T, heads, d] tensor as the 4-D view [1, heads, n, d]. */
static attn_tensor seq_view(const attn_tensor *t, int64_t r0, int64_t n) {
    attn_tensor v = *t;
    size_t esz = attn_dtype_size(t->dtype);
    v.data = (char *)t->data + (size_t)(r0 * t->stride[0]) * esz;
    v.ndim = 4;
    v.shape[0] = 1, v.shape[1] = t->shape[1], v.shape[2] = n, v.shape[3] = t->shape[2];
    v.stride[0] = 0, v.stride[1] = t->stride[1], v.stride[2] = t->stride[0],
    v.stride[3] = t->stride[2];
    return v;
}

/* lse [H, T]: the columns [r0, r0 + n) as [1, H, n]. */
static attn_tensor lse_view(const attn_tensor *t, int64_t r0, int64_t n) {
    attn_tensor v = *t;
    v.data = (float *)t->data + r0 * t->stride[1];
    v.ndim = 3;
    v.shape[0] = 1, v.shape[1] = t->shape[0], v.shape[2] = n;
    v.stride[0] = 0, v.stride[1] = t->stride[0], v.stride[2] = t->stride[1];
    return v;
}

/* Sets rows [r0, r0 + n) of a packed F32 [T, heads, d] view to zero. */
static void zero_rows(attn_tensor *t, int64_t r0, int64_t n) {
    float *p = t->data;
    for (int64_t r = r0; r < r0 + n; r++)
        for (int64_t h = 0; h < t->shape[1]; h++)
            for (int64_t e = 0; e < t->shape[2]; e++)
                p[r * t->stride[0] + h * t->stride[1] + e * t->stride[2]] = 0.0f;
}

typedef struct packed {
    int64_t *cq, *ck, B, H, Tq, Tk;
} packed;

/* Shared checks of both directions: 3-D packed q [Tq, H, D], k [Tk, Hkv, D], v [Tk, Hkv, Dv]
 * (dtype and head checks are attn_sdpa's), the offsets, no mask. */
static attn_status packed_inputs(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                                 const attn_tensor *v, const attn_tensor *cu_q,
                                 const attn_tensor *cu_k, packed *p) {
    const attn_tensor *ts[3] = {q, k, v};
    const char *names[3] = {"query", "key", "value"};
    for (int i = 0; i < 3; i++) {
        ATTN_FAIL_IF(!ts[i] || !ts[i]->data, ctx, ATTN_E_INVALID, "%s is missing", names[i]);
        ATTN_TRY(attn__check(ctx, ts[i], names[i], ts[i]->dtype, 3, 3));
    }
    char s1[96], s2[96];
    ATTN_FAIL_IF(v->shape[0] != k->shape[0] || v->shape[1] != k->shape[1], ctx, ATTN_E_SHAPE,
                 "value %s does not match key %s (rows and heads must agree)",
                 attn__shape_str(v, s1, sizeof s1), attn__shape_str(k, s2, sizeof s2));
    p->Tq = q->shape[0], p->Tk = k->shape[0], p->H = q->shape[1];
    int64_t nk;
    ATTN_TRY(read_cu(ctx, cu_q, "cu_seqlens_q", p->Tq, &p->cq, &p->B));
    ATTN_TRY(read_cu(ctx, cu_k, "cu_seqlens_k", p->Tk, &p->ck, &nk));
    ATTN_FAIL_IF(nk != p->B, ctx, ATTN_E_SHAPE,
                 "cu_seqlens_q holds %lld sequences but cu_seqlens_k %lld", (long long)p->B,
                 (long long)nk);
    return ATTN_OK;
}

/* Dropout index range of sequence b: H * Lb * Sb elements, overflow-checked. */
static attn_status advance(attn_ctx *ctx, uint64_t *base, int64_t H, int64_t Lb, int64_t Sb) {
    int64_t n;
    ATTN_FAIL_IF(!attn__mul_i64(H, Lb, &n) || !attn__mul_i64(n, Sb, &n) ||
                     (uint64_t)n > UINT64_MAX - *base,
                 ctx, ATTN_E_OVERFLOW, "attn_sdpa_varlen: the dropout index overflows");
    *base += (uint64_t)n;
    return ATTN_OK;
}

attn_status attn_sdpa_varlen(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                             const attn_tensor *v, const attn_tensor *cu_seqlens_q,
                             const attn_tensor *cu_seqlens_k, const attn_sdpa_options *opt,
                             attn_tensor *out, attn_tensor *lse) {
    if (!ctx) return ATTN_E_INVALID;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    packed p;
    ATTN_TRYG(packed_inputs(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, &p));
    {
        int64_t oshape[3] = {p.Tq, p.H, v->shape[2]}, lshape[2] = {p.H, p.Tq};
        ATTN_TRYG(attn__check(ctx, out, "output", ATTN_F32, 3, 3));
        ATTN_TRYG(attn__check_shape(ctx, out, "output", 3, oshape));
        int want_lse = lse && lse->data;
        if (want_lse) {
            ATTN_TRYG(attn__check(ctx, lse, "lse", ATTN_F32, 2, 2));
            ATTN_TRYG(attn__check_shape(ctx, lse, "lse", 2, lshape));
        }
        {
            attn_tensor al = attn_view1(NULL, p.H);
            if (opt && opt->alibi_slopes) al.data = (void *)(uintptr_t)opt->alibi_slopes;
            attn__arg o[] = {{out, "out", 0}, {lse, "lse", 0}},
                      in[] = {{q, "q", 0}, {k, "k", 0}, {v, "v", 0},
                              {cu_seqlens_q, "cu_seqlens_q", 0}, {cu_seqlens_k, "cu_seqlens_k", 0},
                              {&al, "alibi_slopes", 0}};
            ATTN_TRYG(attn__check_outputs(ctx, "attn_sdpa_varlen", o, 2, in, 6));
        }
        uint64_t base = 0;
        for (int64_t b = 0; b < p.B; b++) {
            int64_t r0 = p.cq[b], Lb = p.cq[b + 1] - r0, c0 = p.ck[b], Sb = p.ck[b + 1] - c0;
            if (Lb == 0) continue;
            if (Sb == 0) { /* no key at all: zero rows, lse -inf (as a fully masked row) */
                zero_rows(out, r0, Lb);
                if (want_lse)
                    for (int64_t h = 0; h < p.H; h++)
                        for (int64_t i = r0; i < r0 + Lb; i++)
                            ((float *)lse->data)[h * lse->stride[0] + i * lse->stride[1]] =
                                -INFINITY;
                continue;
            }
            attn_tensor qb = seq_view(q, r0, Lb), kb = seq_view(k, c0, Sb),
                        vb = seq_view(v, c0, Sb), ob = seq_view(out, r0, Lb), lb;
            if (want_lse) lb = lse_view(lse, r0, Lb);
            ATTN_TRYG(attn__sdpa_call(ctx, "attn_sdpa_varlen", &qb, &kb, &vb, NULL, opt, &ob,
                                      NULL, want_lse ? &lb : NULL, base));
            ATTN_TRYG(advance(ctx, &base, p.H, Lb, Sb));
        }
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_sdpa_varlen_backward(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, const attn_tensor *cu_seqlens_q,
                                      const attn_tensor *cu_seqlens_k,
                                      const attn_sdpa_options *opt, const attn_tensor *dout,
                                      attn_tensor *dq, attn_tensor *dk, attn_tensor *dv) {
    if (!ctx) return ATTN_E_INVALID;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    packed p;
    ATTN_TRYG(packed_inputs(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, &p));
    {
        int64_t oshape[3] = {p.Tq, p.H, v->shape[2]};
        ATTN_TRYG(attn__check(ctx, dout, "dout", ATTN_F32, 3, 3));
        ATTN_TRYG(attn__check_shape(ctx, dout, "dout", 3, oshape));
        attn_tensor *gs[3] = {dq, dk, dv};
        const attn_tensor *like[3] = {q, k, v};
        const char *names[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; i++)
            if (gs[i] && gs[i]->data) {
                ATTN_TRYG(attn__check(ctx, gs[i], names[i], ATTN_F32, 3, 3));
                ATTN_TRYG(attn__check_shape(ctx, gs[i], names[i], 3, like[i]->shape));
            } else {
                gs[i] = NULL;
            }
        {
            attn_tensor al = attn_view1(NULL, p.H);
            if (opt && opt->alibi_slopes) al.data = (void *)(uintptr_t)opt->alibi_slopes;
            attn__arg o[] = {{dq, "dq", 0}, {dk, "dk", 0}, {dv, "dv", 0}},
                      in[] = {{q, "q", 0}, {k, "k", 0}, {v, "v", 0},
                              {cu_seqlens_q, "cu_seqlens_q", 0}, {cu_seqlens_k, "cu_seqlens_k", 0},
                              {&al, "alibi_slopes", 0}, {dout, "dout", 0}};
            ATTN_TRYG(attn__check_outputs(ctx, "attn_sdpa_varlen_backward", o, 3, in, 7));
        }
        uint64_t base = 0;
        for (int64_t b = 0; b < p.B; b++) {
            int64_t r0 = p.cq[b], Lb = p.cq[b + 1] - r0, c0 = p.ck[b], Sb = p.ck[b + 1] - c0;
            if (Lb == 0 || Sb == 0) { /* nothing attends: the gradients there are zero */
                if (gs[0]) zero_rows(gs[0], r0, Lb);
                if (gs[1]) zero_rows(gs[1], c0, Sb);
                if (gs[2]) zero_rows(gs[2], c0, Sb);
                continue;
            }
            attn_tensor qb = seq_view(q, r0, Lb), kb = seq_view(k, c0, Sb),
                        vb = seq_view(v, c0, Sb), gb = seq_view(dout, r0, Lb), dqb, dkb, dvb;
            if (gs[0]) dqb = seq_view(gs[0], r0, Lb);
            if (gs[1]) dkb = seq_view(gs[1], c0, Sb);
            if (gs[2]) dvb = seq_view(gs[2], c0, Sb);
            ATTN_TRYG(attn__sdpa_backward_call(ctx, "attn_sdpa_varlen_backward", &qb, &kb, &vb,
                                               NULL, opt, NULL, NULL, &gb, gs[0] ? &dqb : NULL,
                                               gs[1] ? &dkb : NULL, gs[2] ? &dvb : NULL, NULL,
                                               base));
            ATTN_TRYG(advance(ctx, &base, p.H, Lb, Sb));
        }
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}
