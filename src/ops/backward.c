/* Backward of the stateless ops of ops.c (PyTorch autograd semantics) and cross-entropy.
 * Every function validates as its forward does and OVERWRITES the gradients it is given; a
 * gradient argument that is NULL (or has NULL data) is not computed.  Outputs may not overlap
 * inputs or each other (attn__check_outputs), except that the elementwise input gradients
 * (softmax, activation, layer norm: dx; positional ADD: dx) may be exactly dy / y / x / dout,
 * as the header states: their kernels read each element before writing it.  Parameter-like
 * gradients (dW, db, dweight, dbias) are summed in a zeroed workspace buffer and then stored.
 * The attention backwards are in attention.c. */
#include <math.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "ops_util.h"

static int wanted(const attn_tensor *t) { return t && t->data; }

/* Zeroed F32 workspace buffer of n elements. */
static attn_status ws_zero(attn_ctx *ctx, float **p, int64_t n) {
    ATTN_TRY(attn__ws_f32(ctx, p, n, 1, 1, 1));
    memset(*p, 0, (size_t)n * sizeof(float));
    return ATTN_OK;
}

/* An output of exactly `shape` (n dims). */
static attn_status check_out(attn_ctx *ctx, const attn_tensor *t, const char *what, int n,
                             const int64_t *shape) {
    ATTN_TRY(attn__check(ctx, t, what, ATTN_F32, n, n));
    return attn__check_shape(ctx, t, what, n, shape);
}

/* An F32 tensor of the same shape as ref. */
static attn_status check_like(attn_ctx *ctx, const attn_tensor *t, const char *what,
                              const attn_tensor *ref, const char *refname) {
    ATTN_TRY(attn__check(ctx, t, what, ATTN_F32, 1, 4));
    return attn__same_shape(ctx, ref, refname, t, what);
}

attn_status attn_softmax_backward(attn_ctx *ctx, const attn_tensor *y, const attn_tensor *dy,
                                  attn_tensor *dx) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, y, "softmax_backward y", ATTN_F32, 1, 4));
    ATTN_TRY(check_like(ctx, dy, "softmax_backward dy", y, "softmax_backward y"));
    if (wanted(dx)) ATTN_TRY(check_like(ctx, dx, "softmax_backward dx", y, "softmax_backward y"));
    {
        attn__arg o[] = {{dx, "dx", 0}}, in[] = {{y, "y", 1u}, {dy, "dy", 1u}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_softmax_backward", o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, y, "softmax_backward y", 0));
    ATTN_TRY(attn__check_finite(ctx, dy, "softmax_backward dy", 0));
    if (!wanted(dx)) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    const float *yp, *dyp;
    float *dxp;
    int64_t M, ldy, lddy, lddx, C = y->shape[y->ndim - 1];
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, y, &yp, &M, &ldy));
    ATTN_TRYG(attn__rows_in(ctx, dy, &dyp, &M, &lddy));
    ATTN_TRYG(attn__rows_out_begin(ctx, dx, &dxp, &lddx));
    for (int64_t m = 0; m < M; m++)
        attn__softmax_row_bwd(yp + m * ldy, dyp + m * lddy, dxp + m * lddx, C);
    attn__rows_out_end(dxp, dx);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_linear_backward(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *W,
                                 const attn_tensor *dy, attn_tensor *dx, attn_tensor *dW,
                                 attn_tensor *db) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "linear_backward x", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, W, "linear_backward W", ATTN_F32, 2, 2));
    ATTN_TRY(attn__check(ctx, dy, "linear_backward dy", ATTN_F32, 1, 4));
    int64_t IN = W->shape[1], OUT = W->shape[0];
    char s1[96], s2[96];
    ATTN_FAIL_IF(x->shape[x->ndim - 1] != IN, ctx, ATTN_E_SHAPE,
                 "linear_backward x %s does not match W %s (last dim must be %lld)",
                 attn__shape_str(x, s1, sizeof s1), attn__shape_str(W, s2, sizeof s2),
                 (long long)IN);
    int ok = dy->ndim == x->ndim && dy->shape[dy->ndim - 1] == OUT;
    for (int d = 0; ok && d + 1 < x->ndim; d++) ok = dy->shape[d] == x->shape[d];
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_SHAPE,
                 "linear_backward dy has shape %s, expected x's %s with last dim %lld",
                 attn__shape_str(dy, s1, sizeof s1), attn__shape_str(x, s2, sizeof s2),
                 (long long)OUT);
    if (wanted(dx)) ATTN_TRY(check_like(ctx, dx, "linear_backward dx", x, "linear_backward x"));
    if (wanted(dW)) ATTN_TRY(check_out(ctx, dW, "linear_backward dW", 2, W->shape));
    if (wanted(db)) ATTN_TRY(check_out(ctx, db, "linear_backward db", 1, &OUT));
    {
        attn__arg o[] = {{dx, "dx", 0}, {dW, "dW", 0}, {db, "db", 0}},
                  in[] = {{x, "x", 0}, {W, "W", 0}, {dy, "dy", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_linear_backward", o, 3, in, 3));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "linear_backward x", 0));
    ATTN_TRY(attn__check_finite(ctx, W, "linear_backward W", 0));
    ATTN_TRY(attn__check_finite(ctx, dy, "linear_backward dy", 0));
    if (!wanted(dx) && !wanted(dW) && !wanted(db)) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *wp, *dyp;
    float *dxp = NULL, *dwp = NULL, *dbp = NULL;
    int64_t M, ldx, lddy, lddx = 0;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__rows_in(ctx, dy, &dyp, &M, &lddy));
    ATTN_TRYG(attn__contig(ctx, W, &wp));
    if (wanted(dW)) ATTN_TRYG(ws_zero(ctx, &dwp, OUT * IN));
    if (wanted(db)) ATTN_TRYG(ws_zero(ctx, &dbp, OUT));
    if (wanted(dx)) ATTN_TRYG(attn__rows_out_begin(ctx, dx, &dxp, &lddx));
    attn__linear_bwd_ref(xp, ldx, wp, dyp, lddy, dxp, lddx, dwp, dbp, M, IN, OUT);
    if (dxp) attn__rows_out_end(dxp, dx);
    if (dwp) attn__store(dwp, dW);
    if (dbp) attn__store(dbp, db);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_layer_norm_backward(attn_ctx *ctx, const attn_tensor *x,
                                     const attn_tensor *weight, float eps,
                                     const attn_tensor *dy, attn_tensor *dx,
                                     attn_tensor *dweight, attn_tensor *dbias) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "layer_norm_backward x", ATTN_F32, 1, 4));
    ATTN_TRY(check_like(ctx, dy, "layer_norm_backward dy", x, "layer_norm_backward x"));
    ATTN_FAIL_IF(!(eps > 0.0f) || !isfinite(eps), ctx, ATTN_E_INVALID,
                 "layer_norm eps must be positive and finite, got %g", (double)eps);
    int64_t E = x->shape[x->ndim - 1];
    if (wanted(weight)) {
        ATTN_TRY(check_out(ctx, weight, "layer_norm_backward weight", 1, &E));
        ATTN_TRY(attn__check_finite(ctx, weight, "layer_norm_backward weight", 0));
    }
    if (wanted(dx))
        ATTN_TRY(check_like(ctx, dx, "layer_norm_backward dx", x, "layer_norm_backward x"));
    if (wanted(dweight)) ATTN_TRY(check_out(ctx, dweight, "layer_norm_backward dweight", 1, &E));
    if (wanted(dbias)) ATTN_TRY(check_out(ctx, dbias, "layer_norm_backward dbias", 1, &E));
    {
        attn__arg o[] = {{dx, "dx", 0}, {dweight, "dweight", 0}, {dbias, "dbias", 0}},
                  in[] = {{x, "x", 1u}, {weight, "weight", 0}, {dy, "dy", 1u}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_layer_norm_backward", o, 3, in, 3));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "layer_norm_backward x", 0));
    ATTN_TRY(attn__check_finite(ctx, dy, "layer_norm_backward dy", 0));
    if (!wanted(dx) && !wanted(dweight) && !wanted(dbias)) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *dyp, *wp = NULL;
    float *dxp = NULL, *dwp = NULL, *dbp = NULL;
    int64_t M, ldx, lddy, lddx = 0;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__rows_in(ctx, dy, &dyp, &M, &lddy));
    if (wanted(weight)) ATTN_TRYG(attn__contig(ctx, weight, &wp));
    if (wanted(dweight)) ATTN_TRYG(ws_zero(ctx, &dwp, E));
    if (wanted(dbias)) ATTN_TRYG(ws_zero(ctx, &dbp, E));
    if (wanted(dx)) ATTN_TRYG(attn__rows_out_begin(ctx, dx, &dxp, &lddx));
    ATTN_TRYG(attn__layer_norm_bwd(ctx, xp, ldx, wp, eps, dyp, lddy, dxp, lddx, dwp, dbp, M, E));
    if (dxp) attn__rows_out_end(dxp, dx);
    if (dwp) attn__store(dwp, dweight);
    if (dbp) attn__store(dbp, dbias);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_activate_backward(attn_ctx *ctx, attn_activation act, const attn_tensor *x,
                                   const attn_tensor *dy, attn_tensor *dx) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF((unsigned)act > ATTN_ACT_TANH, ctx, ATTN_E_INVALID, "unknown activation %d",
                 (int)act);
    ATTN_TRY(attn__check(ctx, x, "activation_backward x", ATTN_F32, 1, 4));
    ATTN_TRY(check_like(ctx, dy, "activation_backward dy", x, "activation_backward x"));
    if (wanted(dx))
        ATTN_TRY(check_like(ctx, dx, "activation_backward dx", x, "activation_backward x"));
    {
        attn__arg o[] = {{dx, "dx", 0}}, in[] = {{x, "x", 1u}, {dy, "dy", 1u}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_activate_backward", o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "activation_backward x", 0));
    ATTN_TRY(attn__check_finite(ctx, dy, "activation_backward dy", 0));
    if (!wanted(dx)) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *dyp;
    float *dxp;
    int64_t n = attn_tensor_numel(x);
    attn_status st;
    ATTN_TRYG(attn__contig(ctx, x, &xp));
    ATTN_TRYG(attn__contig(ctx, dy, &dyp));
    if (attn_tensor_is_contiguous(dx)) dxp = dx->data; /* elementwise: may overlap x or dy */
    else ATTN_TRYG(attn__ws_f32(ctx, &dxp, n, 1, 1, 1));
    attn__act_bwd(ctx, act, xp, dyp, dxp, n);
    if (dxp != dx->data) attn__store(dxp, dx);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ids[t] for the t-th element in row-major order (idx receives its multi-index). */
static int64_t id_at(const attn_tensor *ids, int64_t t, int64_t *idx) {
    for (int d = ids->ndim - 1; d >= 0; d--) {
        idx[d] = t % ids->shape[d];
        t /= ids->shape[d];
    }
    int64_t off = attn__off(ids, idx);
    return ids->dtype == ATTN_I64 ? ((const int64_t *)ids->data)[off]
                                  : ((const int32_t *)ids->data)[off];
}

attn_status attn_embedding_backward(attn_ctx *ctx, const attn_tensor *ids,
                                    const attn_tensor *dout, attn_tensor *dtable) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!ids || !ids->data, ctx, ATTN_E_INVALID, "embedding_backward ids are missing");
    ATTN_FAIL_IF(ids->dtype != ATTN_I64 && ids->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "embedding_backward ids must be I32 or I64");
    ATTN_TRY(attn__check(ctx, ids, "embedding_backward ids", ids->dtype, 1, 3));
    ATTN_TRY(attn__check(ctx, dout, "embedding_backward dout", ATTN_F32, 2, 4));
    int64_t E = dout->shape[dout->ndim - 1];
    int ok = dout->ndim == ids->ndim + 1;
    for (int d = 0; ok && d < ids->ndim; d++) ok = dout->shape[d] == ids->shape[d];
    char s1[96], s2[96];
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_SHAPE,
                 "embedding_backward dout %s does not match ids %s plus [%lld]",
                 attn__shape_str(dout, s1, sizeof s1), attn__shape_str(ids, s2, sizeof s2),
                 (long long)E);
    if (wanted(dtable)) {
        ATTN_TRY(attn__check(ctx, dtable, "embedding_backward dtable", ATTN_F32, 2, 2));
        ATTN_FAIL_IF(dtable->shape[1] != E, ctx, ATTN_E_SHAPE,
                     "embedding_backward dtable %s does not match dout %s (width %lld)",
                     attn__shape_str(dtable, s1, sizeof s1),
                     attn__shape_str(dout, s2, sizeof s2), (long long)E);
    }
    {
        attn__arg o[] = {{dtable, "dtable", 0}}, in[] = {{ids, "ids", 0}, {dout, "dout", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_embedding_backward", o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, dout, "embedding_backward dout", 0));
    if (!wanted(dtable)) return ATTN_OK;
    int64_t V = dtable->shape[0], n = attn_tensor_numel(ids), idx[4] = {0, 0, 0, 0};
    for (int64_t t = 0; t < n; t++) { /* every id is checked before anything is written */
        int64_t id = id_at(ids, t, idx);
        ATTN_FAIL_IF(id < 0 || id >= V, ctx, ATTN_E_INVALID,
                     "embedding_backward id %lld out of range [0, %lld)", (long long)id,
                     (long long)V);
    }
    float *tp = dtable->data;
    const float *dp = dout->data;
    for (int64_t v = 0; v < V; v++)
        for (int64_t e = 0; e < E; e++) tp[v * dtable->stride[0] + e * dtable->stride[1]] = 0.0f;
    /* scatter-add in token order (as index_add_) */
    int64_t oidx[4] = {0, 0, 0, 0};
    for (int64_t t = 0; t < n; t++) {
        int64_t id = id_at(ids, t, idx);
        for (int d = 0; d < ids->ndim; d++) oidx[d] = idx[d];
        oidx[ids->ndim] = 0;
        const float *dr = dp + attn__off(dout, oidx);
        float *tr = tp + id * dtable->stride[0];
        int64_t ds = dout->stride[ids->ndim];
        for (int64_t e = 0; e < E; e++) tr[e * dtable->stride[1]] += dr[e * ds];
    }
    return ATTN_OK;
}

attn_status attn_positional_apply_backward(attn_ctx *ctx, attn_pe_mode mode,
                                           const attn_tensor *dout, attn_tensor *dx,
                                           attn_tensor *dpe) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(mode != ATTN_PE_ADD && mode != ATTN_PE_CONCAT, ctx, ATTN_E_INVALID,
                 "unknown positional mode %d", (int)mode);
    ATTN_TRY(attn__check(ctx, dout, "positional_backward dout", ATTN_F32, 3, 3));
    int64_t B = dout->shape[0], L = dout->shape[1], EO = dout->shape[2];
    int64_t E = EO, P = EO; /* ADD: out = x + pe */
    char s1[96], s2[96], s3[96];
    if (wanted(dx)) ATTN_TRY(attn__check(ctx, dx, "positional_backward dx", ATTN_F32, 3, 3));
    if (wanted(dpe)) ATTN_TRY(attn__check(ctx, dpe, "positional_backward dpe", ATTN_F32, 2, 2));
    if (mode == ATTN_PE_CONCAT && (wanted(dx) || wanted(dpe))) {
        /* out = [x, pe]: E + P = EO, each at least 1 */
        if (wanted(dx)) E = dx->shape[2];
        if (wanted(dpe)) P = dpe->shape[1];
        if (wanted(dx) && !wanted(dpe)) P = EO - E;
        if (wanted(dpe) && !wanted(dx)) E = EO - P;
        ATTN_FAIL_IF(E < 1 || P < 1 || E + P != EO, ctx, ATTN_E_SHAPE,
                     "positional_backward (concat): dx %s and dpe %s do not split dout %s",
                     wanted(dx) ? attn__shape_str(dx, s1, sizeof s1) : "(none)",
                     wanted(dpe) ? attn__shape_str(dpe, s2, sizeof s2) : "(none)",
                     attn__shape_str(dout, s3, sizeof s3));
    }
    if (wanted(dx)) {
        int64_t xs[3] = {B, L, E};
        ATTN_TRY(attn__check_shape(ctx, dx, "positional_backward dx", 3, xs));
    }
    if (wanted(dpe)) {
        ATTN_FAIL_IF(dpe->shape[0] < L || dpe->shape[1] != P, ctx, ATTN_E_SHAPE,
                     "positional_backward dpe has shape %s, expected [>= %lld, %lld] for dout %s",
                     attn__shape_str(dpe, s1, sizeof s1), (long long)L, (long long)P,
                     attn__shape_str(dout, s2, sizeof s2));
    }
    {
        /* ADD: dx is a copy of dout, so it may be dout itself */
        attn__arg o[] = {{dx, "dx", 0}, {dpe, "dpe", 0}},
                  in[] = {{dout, "dout", mode == ATTN_PE_ADD ? 1u : 0u}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_positional_apply_backward", o, 2, in, 1));
    }
    ATTN_TRY(attn__check_finite(ctx, dout, "positional_backward dout", 0));
    const float *op = dout->data;
    const int64_t *os = dout->stride;
    int64_t poff = mode == ATTN_PE_ADD ? 0 : E;
    /* dpe first: dx may be dout (ADD), and it receives the same values */
    if (wanted(dpe)) {
        float *pp = dpe->data;
        for (int64_t l = 0; l < dpe->shape[0]; l++)
            for (int64_t p = 0; p < P; p++) {
                double acc = 0;
                if (l < L)
                    for (int64_t b = 0; b < B; b++)
                        acc += op[b * os[0] + l * os[1] + (poff + p) * os[2]];
                pp[l * dpe->stride[0] + p * dpe->stride[1]] = (float)acc;
            }
    }
    if (wanted(dx)) {
        float *xp = dx->data;
        for (int64_t b = 0; b < B; b++)
            for (int64_t l = 0; l < L; l++)
                for (int64_t e = 0; e < E; e++)
                    xp[b * dx->stride[0] + l * dx->stride[1] + e * dx->stride[2]] =
                        op[b * os[0] + l * os[1] + e * os[2]];
    }
    return ATTN_OK;
}

attn_status attn_cross_entropy(attn_ctx *ctx, const attn_tensor *logits,
                               const attn_tensor *targets, int64_t ignore_index,
                               float label_smoothing, float *loss, attn_tensor *dlogits) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!loss, ctx, ATTN_E_INVALID, "cross_entropy loss output is missing");
    ATTN_TRY(attn__check(ctx, logits, "cross_entropy logits", ATTN_F32, 2, 2));
    ATTN_FAIL_IF(!targets || !targets->data, ctx, ATTN_E_INVALID,
                 "cross_entropy targets are missing");
    ATTN_FAIL_IF(targets->dtype != ATTN_I64 && targets->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "cross_entropy targets must be I32 or I64");
    ATTN_TRY(attn__check(ctx, targets, "cross_entropy targets", targets->dtype, 1, 1));
    int64_t N = logits->shape[0], C = logits->shape[1];
    ATTN_TRY(attn__check_shape(ctx, targets, "cross_entropy targets", 1, &N));
    ATTN_FAIL_IF(!(label_smoothing >= 0.0f && label_smoothing < 1.0f), ctx, ATTN_E_INVALID,
                 "cross_entropy label_smoothing must be in [0, 1), got %g",
                 (double)label_smoothing);
    if (wanted(dlogits))
        ATTN_TRY(check_out(ctx, dlogits, "cross_entropy dlogits", 2, logits->shape));
    {
        attn_tensor L1 = attn_view1(loss, 1);
        attn__arg o[] = {{dlogits, "dlogits", 0}, {&L1, "loss", 0}},
                  in[] = {{logits, "logits", 0}, {targets, "targets", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_cross_entropy", o, 2, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, logits, "cross_entropy logits", 0));
    attn__mark mk = attn__ws_mark(ctx);
    int64_t *tg;
    const float *lp;
    float *dp = NULL;
    int64_t ld, ldd = 0, M;
    attn_status st;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)N, sizeof(int64_t), (void **)&tg));
    for (int64_t n = 0; n < N; n++) {
        const char *base = targets->data;
        int64_t off = n * targets->stride[0];
        tg[n] = targets->dtype == ATTN_I64 ? ((const int64_t *)(const void *)base)[off]
                                           : ((const int32_t *)(const void *)base)[off];
        if (tg[n] != ignore_index && (tg[n] < 0 || tg[n] >= C)) {
            st = attn__fail(ctx, ATTN_E_INVALID,
                            "cross_entropy target %lld (row %lld) out of range [0, %lld) and not "
                            "ignore_index %lld",
                            (long long)tg[n], (long long)n, (long long)C, (long long)ignore_index);
            goto done;
        }
    }
    ATTN_TRYG(attn__rows_in(ctx, logits, &lp, &M, &ld));
    if (wanted(dlogits)) ATTN_TRYG(attn__rows_out_begin(ctx, dlogits, &dp, &ldd));
    ATTN_TRYG(attn__cross_entropy(ctx, lp, ld, tg, N, C, ignore_index, label_smoothing, dp, ldd,
                                  loss));
    if (dp) attn__rows_out_end(dp, dlogits);
done:
    attn__ws_release(ctx, mk);
    return st;
}
