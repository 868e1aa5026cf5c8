/* attn_embedding, sinusoidal encodings, attn_positional_apply and their backwards.
 * The forward validates and runs the reference kernels (see ops_util.h for the backwards'
 * rules: NULL gradients skipped, gradients overwritten, outputs checked for overlap). */
#include <math.h>
#include <string.h>

#include "ops_util.h"

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
