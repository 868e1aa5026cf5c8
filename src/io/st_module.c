/* attn_module_load / attn_module_save: module parameters <-> safetensors tensors.
 *
 * Kept apart from safetensors.c so that a program using only the file reader and writer does
 * not pull the module machinery in from the static library.  Only the public module API is
 * used (attn_module_param_count / attn_module_param_at).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "st_internal.h"

#define NAME "'%.160s'"

static int is_float_dtype(attn_dtype d) {
    return d == ATTN_F32 || d == ATTN_F64 || d == ATTN_F16 || d == ATTN_BF16;
}

/* prefix + name in memory from ctx (NULL on exhaustion). */
static char *join(attn_ctx *ctx, const char *prefix, const char *name) {
    size_t a = prefix ? strlen(prefix) : 0, b = strlen(name), n;
    if (!attn__add_size(a, b, &n) || !attn__add_size(n, 1, &n)) return NULL;
    char *s = attn__malloc(ctx, n);
    if (!s) return NULL;
    if (a) memcpy(s, prefix, a);
    memcpy(s + a, name, b + 1);
    return s;
}

static const char *dims_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

attn_status attn__param_match(attn_ctx *ctx, const attn_st *st, const char *prefix,
                              const char *pname, int ndim, const int64_t *shape, int strict,
                              attn_st_tensor *info, int *found) {
    *found = 0;
    char *full = join(ctx, prefix, pname);
    ATTN_FAIL_IF(!full, ctx, ATTN_E_NOMEM, "out of memory loading parameter " NAME, pname);
    attn_status s = attn_st_find(st, full, info);
    if (s == ATTN_E_NOT_FOUND) {
        s = strict ? attn__fail(ctx, ATTN_E_NOT_FOUND,
                                "strict load: no tensor " NAME " for parameter " NAME, full,
                                pname)
                   : ATTN_OK;
        attn__free(ctx, full);
        return s;
    }
    if (s) {
        attn__free(ctx, full);
        return s;
    }
    if (!is_float_dtype(info->dtype)) {
        s = attn__fail(ctx, ATTN_E_DTYPE,
                       "tensor " NAME " has dtype %s; parameters load from F32, F64, F16 or "
                       "BF16 only",
                       full, attn_dtype_name(info->dtype));
        attn__free(ctx, full);
        return s;
    }
    int same = info->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = info->shape[d] == shape[d];
    if (!same) {
        char a[160], b[160];
        s = attn__fail(ctx, ATTN_E_SHAPE, "tensor " NAME " has shape %s but parameter " NAME
                       " needs %s",
                       full, dims_str(info->ndim, info->shape, a, sizeof a), pname,
                       dims_str(ndim, shape, b, sizeof b));
        attn__free(ctx, full);
        return s;
    }
    attn__free(ctx, full);
    *found = 1;
    return ATTN_OK;
}

/* Finds parameter i's tensor and checks it.  *found = 0 when absent (an error if strict). */
static attn_status match_param(attn_ctx *ctx, const attn_module *m, const attn_st *st,
                               const char *prefix, int strict, size_t i, attn_tensor *view,
                               attn_st_tensor *info, int *found) {
    const char *pname;
    *found = 0;
    ATTN_TRY(attn_module_param_at(m, i, &pname, view));
    ATTN_TRY(attn__param_match(ctx, st, prefix, pname, view->ndim, view->shape, strict, info,
                               found));
    ATTN_FAIL_IF(*found && (view->dtype != ATTN_F32 || !view->data || info->numel < 0), ctx,
                 ATTN_E_INTERNAL, "parameter " NAME " is not an F32 view", pname);
    return ATTN_OK;
}

/* Index of the first element of a floating tensor that is not finite once converted to F32
 * (NaN, an infinity, or an F64 value past the float range), or -1.  Read from the file's
 * bytes, before anything is converted, so that a refused load leaves the module unchanged;
 * every loader goes through attn_module_load, so this is the one finiteness check of
 * weights. */
static int64_t first_nonfinite(const attn_st_tensor *t, int *is_nan) {
    const unsigned char *b = t->data;
    size_t w = attn_dtype_size(t->dtype);
    for (int64_t i = 0; i < t->numel; i++) {
        const unsigned char *e = b + (size_t)i * w;
        uint64_t u = 0;
        for (size_t k = 0; k < w; k++) u |= (uint64_t)e[k] << (8 * k); /* little-endian */
        switch (t->dtype) {
        case ATTN_F32:
            if ((u & 0x7f800000u) == 0x7f800000u) return *is_nan = (u & 0x7fffffu) != 0, i;
            break;
        case ATTN_F16:
            if ((u & 0x7c00u) == 0x7c00u) return *is_nan = (u & 0x3ffu) != 0, i;
            break;
        case ATTN_BF16:
            if ((u & 0x7f80u) == 0x7f80u) return *is_nan = (u & 0x7fu) != 0, i;
            break;
        case ATTN_F64: {
            double d;
            memcpy(&d, &u, sizeof d);
            /* from FLT_MAX plus half an ulp on, float rounding gives an infinity */
            if (!(fabs(d) < 0x1.ffffffp127)) return *is_nan = isnan(d), i;
            break;
        }
        default: return -1;
        }
    }
    return -1;
}

attn_status attn_module_load(attn_ctx *ctx, attn_module *m, const attn_st *st,
                             const char *prefix, int strict) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !st, ctx, ATTN_E_INVALID, "attn_module_load: NULL module or file");
    size_t np = attn_module_param_count(m);
    attn_tensor view;
    attn_st_tensor info;
    int found;
    /* check everything first, so that a failed load leaves the module as it was */
    for (size_t i = 0; i < np; i++) {
        ATTN_TRY(match_param(ctx, m, st, prefix, strict, i, &view, &info, &found));
        if (!found || (ctx->flags & ATTN_CTX_NO_FINITE_CHECK)) continue;
        int is_nan = 0;
        int64_t bad = first_nonfinite(&info, &is_nan);
        ATTN_FAIL_IF(bad >= 0, ctx, ATTN_E_NONFINITE,
                     "tensor " NAME " (%s) holds %s at element %lld", info.name,
                     attn_dtype_name(info.dtype),
                     is_nan ? "NaN" : info.dtype == ATTN_F64 ? "a value past the float range"
                                                             : "an infinity",
                     (long long)bad);
    }
    for (size_t i = 0; i < np; i++) {
        ATTN_TRY(match_param(ctx, m, st, prefix, strict, i, &view, &info, &found));
        if (!found) continue;
        size_t n = (size_t)info.numel;
        if (attn_tensor_is_contiguous(&view)) {
            ATTN_TRY(attn_st_to_f32(ctx, &info, view.data, n));
            continue;
        }
        /* parameters are contiguous today; a strided one goes through a buffer */
        float *tmp = attn__calloc(ctx, n ? n : 1, sizeof *tmp);
        ATTN_FAIL_IF(!tmp, ctx, ATTN_E_NOMEM, "out of memory loading " NAME, info.name);
        attn_status s = attn_st_to_f32(ctx, &info, tmp, n);
        if (!s) attn__store(tmp, &view);
        attn__free(ctx, tmp);
        if (s) return s;
    }
    return ATTN_OK;
}

attn_status attn_module_save(attn_ctx *ctx, const attn_module *m, attn_st_writer *w,
                             const char *prefix) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !w, ctx, ATTN_E_INVALID, "attn_module_save: NULL module or writer");
    size_t np = attn_module_param_count(m);
    for (size_t i = 0; i < np; i++) {
        const char *pname;
        attn_tensor view;
        ATTN_TRY(attn_module_param_at(m, i, &pname, &view));
        char *full = join(ctx, prefix, pname);
        ATTN_FAIL_IF(!full, ctx, ATTN_E_NOMEM, "out of memory saving parameter " NAME, pname);
        attn_status s = attn_st_writer_add_view(w, full, &view);
        attn__free(ctx, full);
        if (s) {
            /* the writer reported to its own context; make the caller's say it too */
            attn_ctx *wctx = attn__st_writer_ctx(w);
            if (wctx != ctx) attn__fail(ctx, s, "%s", attn_ctx_errmsg(wctx));
            return s;
        }
    }
    return ATTN_OK;
}
