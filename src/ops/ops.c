/* Stateless ops: validation around the reference kernels. */
#include <math.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "ops_util.h" /* attn__rows_in, attn__rows_out_*, attn__same_shape: defined here */

attn_status attn__rows_in(attn_ctx *ctx, const attn_tensor *t, const float **p, int64_t *M,
                          int64_t *ld) {
    if (attn__rows(t, M, ld)) {
        *p = t->data;
        if (*M == 1) *ld = t->shape[t->ndim - 1];
        return ATTN_OK;
    }
    ATTN_TRY(attn__contig(ctx, t, p));
    *ld = t->shape[t->ndim - 1];
    return ATTN_OK;
}

attn_status attn__rows_out_begin(attn_ctx *ctx, attn_tensor *t, float **p, int64_t *ld) {
    int64_t M;
    if (attn__rows(t, &M, ld)) {
        *p = t->data;
        if (M == 1) *ld = t->shape[t->ndim - 1];
        return ATTN_OK;
    }
    *ld = t->shape[t->ndim - 1];
    return attn__ws_f32(ctx, p, attn_tensor_numel(t), 1, 1, 1);
}
void attn__rows_out_end(float *p, attn_tensor *t) {
    if (p != t->data) attn__store(p, t);
}

attn_status attn__same_shape(attn_ctx *ctx, const attn_tensor *a, const char *an,
                             const attn_tensor *b, const char *bn) {
    int ok = a->ndim == b->ndim;
    for (int d = 0; ok && d < a->ndim; d++) ok = a->shape[d] == b->shape[d];
    if (ok) return ATTN_OK;
    char x[96], y[96];
    return attn__fail(ctx, ATTN_E_SHAPE, "%s has shape %s but %s has shape %s", bn,
                      attn__shape_str(b, y, sizeof y), an, attn__shape_str(a, x, sizeof x));
}

attn_status attn_softmax(attn_ctx *ctx, const attn_tensor *x, attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "softmax input", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, y, "softmax output", ATTN_F32, 1, 4));
    ATTN_TRY(attn__same_shape(ctx, x, "input", y, "output"));
    {
        attn__arg o[] = {{y, "y", 0}}, in[] = {{x, "x", 1u}}; /* y may be x */
        ATTN_TRY(attn__check_outputs(ctx, "attn_softmax", o, 1, in, 1));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "softmax input", 1));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp;
    float *yp;
    int64_t M, ldx, ldy, N = x->shape[x->ndim - 1];
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__rows_out_begin(ctx, y, &yp, &ldy));
    for (int64_t m = 0; m < M; m++) attn__softmax_row(xp + m * ldx, yp + m * ldy, N);
    attn__rows_out_end(yp, y);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_linear(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *W,
                        const attn_tensor *b, attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "linear input", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, W, "linear weight", ATTN_F32, 2, 2));
    ATTN_TRY(attn__check(ctx, y, "linear output", ATTN_F32, 1, 4));
    int64_t IN = W->shape[1], OUT = W->shape[0];
    char s1[96], s2[96];
    ATTN_FAIL_IF(x->shape[x->ndim - 1] != IN, ctx, ATTN_E_SHAPE,
                 "linear input %s does not match weight %s (last dim must be %lld)",
                 attn__shape_str(x, s1, sizeof s1), attn__shape_str(W, s2, sizeof s2),
                 (long long)IN);
    int ok = y->ndim == x->ndim && y->shape[y->ndim - 1] == OUT;
    for (int d = 0; ok && d + 1 < x->ndim; d++) ok = y->shape[d] == x->shape[d];
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_SHAPE, "linear output has shape %s, expected %s with last dim %lld",
                 attn__shape_str(y, s1, sizeof s1), attn__shape_str(x, s2, sizeof s2),
                 (long long)OUT);
    if (b && b->data) {
        ATTN_TRY(attn__check(ctx, b, "linear bias", ATTN_F32, 1, 1));
        ATTN_TRY(attn__check_shape(ctx, b, "linear bias", 1, &OUT));
    }
    {
        attn__arg o[] = {{y, "y", 0}}, in[] = {{x, "x", 0}, {W, "W", 0}, {b, "b", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_linear", o, 1, in, 3));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "linear input", 0));
    ATTN_TRY(attn__check_finite(ctx, W, "linear weight", 0));
    if (b && b->data) ATTN_TRY(attn__check_finite(ctx, b, "linear bias", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *wp, *bp = NULL;
    float *yp;
    int64_t M, ldx, ldy;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__contig(ctx, W, &wp));
    if (b && b->data) ATTN_TRYG(attn__contig(ctx, b, &bp));
    ATTN_TRYG(attn__rows_out_begin(ctx, y, &yp, &ldy));
    attn__linear_ref(xp, ldx, wp, bp, yp, ldy, M, IN, OUT);
    attn__rows_out_end(yp, y);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_layer_norm(attn_ctx *ctx, const attn_tensor *x, const attn_tensor *weight,
                            const attn_tensor *bias, float eps, attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "layer_norm input", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, y, "layer_norm output", ATTN_F32, 1, 4));
    ATTN_TRY(attn__same_shape(ctx, x, "input", y, "output"));
    ATTN_FAIL_IF(!(eps > 0.0f) || !isfinite(eps), ctx, ATTN_E_INVALID,
                 "layer_norm eps must be positive and finite, got %g", (double)eps);
    int64_t E = x->shape[x->ndim - 1];
    const attn_tensor *pw[2] = {weight, bias};
    const char *pn[2] = {"layer_norm weight", "layer_norm bias"};
    for (int i = 0; i < 2; i++)
        if (pw[i] && pw[i]->data) {
            ATTN_TRY(attn__check(ctx, pw[i], pn[i], ATTN_F32, 1, 1));
            ATTN_TRY(attn__check_shape(ctx, pw[i], pn[i], 1, &E));
            ATTN_TRY(attn__check_finite(ctx, pw[i], pn[i], 0));
        }
    {
        attn__arg o[] = {{y, "y", 0}},
                  in[] = {{x, "x", 1u}, {weight, "weight", 0}, {bias, "bias", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_layer_norm", o, 1, in, 3));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "layer_norm input", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp, *wp = NULL, *bp = NULL;
    float *yp;
    int64_t M, ldx, ldy;
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    if (weight && weight->data) ATTN_TRYG(attn__contig(ctx, weight, &wp));
    if (bias && bias->data) ATTN_TRYG(attn__contig(ctx, bias, &bp));
    ATTN_TRYG(attn__rows_out_begin(ctx, y, &yp, &ldy));
    attn__layer_norm_ref(xp, ldx, wp, bp, eps, yp, ldy, M, E);
    attn__rows_out_end(yp, y);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_activate(attn_ctx *ctx, attn_activation act, const attn_tensor *x,
                          attn_tensor *y) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF((unsigned)act > ATTN_ACT_TANH, ctx, ATTN_E_INVALID, "unknown activation %d",
                 (int)act);
    ATTN_TRY(attn__check(ctx, x, "activation input", ATTN_F32, 1, 4));
    ATTN_TRY(attn__check(ctx, y, "activation output", ATTN_F32, 1, 4));
    ATTN_TRY(attn__same_shape(ctx, x, "input", y, "output"));
    {
        attn__arg o[] = {{y, "y", 0}}, in[] = {{x, "x", 1u}}; /* y may be x */
        ATTN_TRY(attn__check_outputs(ctx, "attn_activate", o, 1, in, 1));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "activation input", 0));
    attn__mark mk = attn__ws_mark(ctx);
    const float *xp;
    float *yp;
    int64_t M, ldx, ldy, N = x->shape[x->ndim - 1];
    attn_status st;
    ATTN_TRYG(attn__rows_in(ctx, x, &xp, &M, &ldx));
    ATTN_TRYG(attn__rows_out_begin(ctx, y, &yp, &ldy));
    attn__act_ref(act, xp, ldx, yp, ldy, M, N);
    attn__rows_out_end(yp, y);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_embedding(attn_ctx *ctx, const attn_tensor *ids, const attn_tensor *table,
                           attn_tensor *out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!ids || !ids->data, ctx, ATTN_E_INVALID, "embedding ids are missing");
    ATTN_FAIL_IF(ids->dtype != ATTN_I64 && ids->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "embedding ids must be I32 or I64");
    ATTN_TRY(attn__check(ctx, ids, "embedding ids", ids->dtype, 1, 3));
    ATTN_TRY(attn__check(ctx, table, "embedding weight", ATTN_F32, 2, 2));
    ATTN_TRY(attn__check(ctx, out, "embedding output", ATTN_F32, 2, 4));
    int64_t V = table->shape[0], E = table->shape[1];
    int ok = out->ndim == ids->ndim + 1 && out->shape[out->ndim - 1] == E;
    for (int d = 0; ok && d < ids->ndim; d++) ok = out->shape[d] == ids->shape[d];
    char s1[96], s2[96];
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_SHAPE, "embedding output %s does not match ids %s plus [%lld]",
                 attn__shape_str(out, s1, sizeof s1), attn__shape_str(ids, s2, sizeof s2),
                 (long long)E);
    {
        attn__arg o[] = {{out, "out", 0}}, in[] = {{ids, "ids", 0}, {table, "table", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_embedding", o, 1, in, 2));
    }
    int64_t n = attn_tensor_numel(ids);
    int64_t idx[4] = {0, 0, 0, 0}, oidx[4] = {0, 0, 0, 0};
    float *op = out->data;
    const float *tp = table->data;
    for (int64_t t = 0; t < n; t++) {
        int64_t r = t;
        for (int d = ids->ndim - 1; d >= 0; d--) {
            idx[d] = r % ids->shape[d];
            r /= ids->shape[d];
        }
        int64_t off = attn__off(ids, idx);
        int64_t id = ids->dtype == ATTN_I64 ? ((const int64_t *)ids->data)[off]
                                            : ((const int32_t *)ids->data)[off];
        ATTN_FAIL_IF(id < 0 || id >= V, ctx, ATTN_E_INVALID,
                     "embedding id %lld out of range [0, %lld)", (long long)id, (long long)V);
        for (int d = 0; d < ids->ndim; d++) oidx[d] = idx[d];
        for (int64_t e = 0; e < E; e++) {
            oidx[ids->ndim] = e;
            op[attn__off(out, oidx)] = tp[id * table->stride[0] + e * table->stride[1]];
        }
    }
    return ATTN_OK;
}

attn_status attn_sinusoidal_encoding(attn_ctx *ctx, int64_t start, float base, attn_tensor *pe) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, pe, "positional encoding output", ATTN_F32, 2, 2));
    ATTN_FAIL_IF(start < 0, ctx, ATTN_E_INVALID, "start position must be >= 0");
    ATTN_FAIL_IF(!(base > 1.0f) || !isfinite(base), ctx, ATTN_E_INVALID,
                 "positional encoding base must be > 1, got %g", (double)base);
    int64_t L = pe->shape[0], E = pe->shape[1];
    /* start + pos is converted to double: every position must be exact there (and the sum
     * must not overflow) */
    const int64_t exact = (int64_t)1 << 53;
    ATTN_FAIL_IF(start > exact || L - 1 > exact - start, ctx, ATTN_E_INVALID,
                 "attn_sinusoidal_encoding: positions start .. start + L - 1 (start %lld, L %lld) "
                 "must stay within 2^53, the range where a double holds every integer",
                 (long long)start, (long long)L);
    ATTN_TRY(attn__check_distinct(ctx, "attn_sinusoidal_encoding", pe, "pe"));
    float *p = pe->data;
    for (int64_t pos = 0; pos < L; pos++)
        for (int64_t e = 0; e < E; e++) {
            int64_t i2 = e & ~(int64_t)1; /* 2i */
            double angle = (double)(start + pos) / pow((double)base, (double)i2 / (double)E);
            p[pos * pe->stride[0] + e * pe->stride[1]] = (float)((e & 1) ? cos(angle) : sin(angle));
        }
    return ATTN_OK;
}

attn_status attn_positional_apply(attn_ctx *ctx, attn_pe_mode mode, const attn_tensor *x,
                                  const attn_tensor *pe, attn_tensor *out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(attn__check(ctx, x, "positional input", ATTN_F32, 3, 3));
    ATTN_TRY(attn__check(ctx, pe, "positional table", ATTN_F32, 2, 2));
    ATTN_TRY(attn__check(ctx, out, "positional output", ATTN_F32, 3, 3));
    int64_t B = x->shape[0], L = x->shape[1], E = x->shape[2], P = pe->shape[1];
    char s1[96];
    ATTN_FAIL_IF(pe->shape[0] < L, ctx, ATTN_E_SHAPE,
                 "positional table has %lld positions, the sequence needs %lld",
                 (long long)pe->shape[0], (long long)L);
    int64_t oshape[3] = {B, L, mode == ATTN_PE_CONCAT ? E + P : E};
    if (mode == ATTN_PE_ADD)
        ATTN_FAIL_IF(P != E, ctx, ATTN_E_SHAPE,
                     "positional table %s has width %lld, the input has %lld",
                     attn__shape_str(pe, s1, sizeof s1), (long long)P, (long long)E);
    else
        ATTN_FAIL_IF(mode != ATTN_PE_CONCAT, ctx, ATTN_E_INVALID, "unknown positional mode %d",
                     (int)mode);
    ATTN_TRY(attn__check_shape(ctx, out, "positional output", 3, oshape));
    {
        attn__arg o[] = {{out, "out", 0}}, in[] = {{x, "x", 0}, {pe, "pe", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_positional_apply", o, 1, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, x, "positional input", 0));
    ATTN_TRY(attn__check_finite(ctx, pe, "positional table", 0));
    const float *xp = x->data, *pp = pe->data;
    float *op = out->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            const float *xr = xp + b * x->stride[0] + l * x->stride[1];
            const float *pr = pp + l * pe->stride[0];
            float *orow = op + b * out->stride[0] + l * out->stride[1];
            if (mode == ATTN_PE_ADD) {
                for (int64_t e = 0; e < E; e++)
                    orow[e * out->stride[2]] = xr[e * x->stride[2]] + pr[e * pe->stride[1]];
            } else {
                for (int64_t e = 0; e < E; e++) orow[e * out->stride[2]] = xr[e * x->stride[2]];
                for (int64_t e = 0; e < P; e++)
                    orow[(E + e) * out->stride[2]] = pr[e * pe->stride[1]];
            }
        }
    return ATTN_OK;
}
