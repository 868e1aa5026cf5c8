/* attn_eval: runs one op described by a safetensors file (docs/eval-format.md).
 *
 * This file is the boundary between a file written by PyTorch-side tooling and the library:
 * it parses attributes strictly, converts tensors to the dtypes the compute calls take, maps
 * each PyTorch op's mask convention onto attn_mask kinds, and refuses anything it does not
 * understand (unknown op, attribute or tensor) instead of silently ignoring it, because an
 * ignored name in a reference case means the comparison tests something other than intended.
 * All computation goes through the public API.
 *
 * This file is the framework (attributes, tensor intake, module binding, gradient I/O, the op
 * table); the ops are in ops_*.c by family (eval.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"

const char ev_optional[] = "(optional)";

/* ---- memory ---------------------------------------------------------------------------- */

static attn_status ev_alloc(ev *e, size_t bytes, void **out) {
    *out = NULL;
    if (e->nbufs == e->capbufs) {
        size_t cap = e->capbufs ? e->capbufs * 2 : 16;
        void **nb = attn__malloc(e->ctx, cap * sizeof *nb);
        if (!nb) return attn__fail(e->ctx, ATTN_E_NOMEM, "out of memory");
        if (e->bufs) memcpy(nb, e->bufs, e->nbufs * sizeof *nb);
        attn__free(e->ctx, e->bufs);
        e->bufs = nb;
        e->capbufs = cap;
    }
    /* zeroed, so a partly failed computation never exposes stale memory */
    void *p = attn__calloc(e->ctx, 1, bytes);
    if (!p) return attn__fail(e->ctx, ATTN_E_NOMEM, "out of memory (%zu bytes)", bytes);
    e->bufs[e->nbufs++] = p;
    *out = p;
    return ATTN_OK;
}

/* Bytes for ndim dims of shape with elements of `elem` bytes; 0 on overflow. */
static int ev_bytes(int ndim, const int64_t *shape, size_t elem, size_t *bytes) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        if (!attn__mul_i64(n, shape[d], &n)) return 0;
    if ((uint64_t)n > SIZE_MAX / elem) return 0;
    *bytes = (size_t)n * elem;
    return 1;
}

/* A new zeroed contiguous F32 tensor. */
attn_status ev_new(ev *e, const char *what, int ndim, const int64_t *shape,
                   attn_tensor *t) {
    size_t bytes;
    void *p;
    char sb[128];
    if (!ev_bytes(ndim, shape, sizeof(float), &bytes))
        return attn__fail(e->ctx, ATTN_E_OVERFLOW, "output '%s' of shape %s is too large", what,
                          attn__dims_str(shape, ndim, sb, sizeof sb));
    ATTN_TRY(ev_alloc(e, bytes, &p));
    *t = attn_tensor_make(p, ATTN_F32, ndim, shape);
    return ATTN_OK;
}

/* An output whose size comes from attributes alone (no data of the file bounds it): at most
 * EV_CLAIM_BYTES, or ATTN_LIMIT_FILE_BYTES when that is lower.  attn_eval keeps such an
 * output about three times (the tensor, the writer's copy, the serialised result), so a few
 * bytes of attributes must not reach for a share of the machine's memory: reference cases
 * are small, and a larger table is reached with an input tensor whose data bounds it. */
#define EV_CLAIM_BYTES ((int64_t)256 << 20)
attn_status ev_claim(ev *e, const char *what, int ndim, const int64_t *shape) {
    size_t bytes;
    char sb[128];
    int64_t lim = attn_ctx_limit(e->ctx, ATTN_LIMIT_FILE_BYTES);
    if (lim > EV_CLAIM_BYTES) lim = EV_CLAIM_BYTES;
    ATTN_FAIL_IF(!ev_bytes(ndim, shape, sizeof(float), &bytes) || (uint64_t)bytes > (uint64_t)lim,
                 e->ctx, ATTN_E_UNSUPPORTED,
                 "%s: shape %s from the attributes alone is over the %lld bytes attn_eval "
                 "allows such an output (256 MiB, or ATTN_LIMIT_FILE_BYTES if lower)",
                 what, attn__dims_str(shape, ndim, sb, sizeof sb), (long long)lim);
    return ATTN_OK;
}

/* A contiguous view of the same data with another shape (same element count). */
attn_tensor ev_reshape(const attn_tensor *t, int ndim, const int64_t *shape) {
    return attn_tensor_make(t->data, t->dtype, ndim, shape);
}

/* ---- attributes ------------------------------------------------------------------------ */

static int ev_parse_bool(const char *s, int *b) {
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "1")) return *b = 1, 1;
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "0")) return *b = 0, 1;
    return 0;
}

/* Decimal integer, optional sign, the whole string, no overflow. */
static int ev_parse_int(const char *s, int64_t *v) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (*p < '0' || *p > '9') return 0;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9') return 0;
    errno = 0;
    char *end;
    long long x = strtoll(s, &end, 10);
    if (errno == ERANGE || *end) return 0;
    *v = (int64_t)x;
    return 1;
}

/* strtod over the whole string; finite.  Leading spaces (strtod skips them) are refused. */
static int ev_parse_float(const char *s, double *v) {
    if (!*s || *s == ' ' || (*s >= '\t' && *s <= '\r')) return 0;
    errno = 0;
    char *end;
    double x = strtod(s, &end);
    if (*end || !isfinite(x)) return 0;
    /* ERANGE on underflow still gives a usable (tiny or zero) value; on overflow x is inf */
    *v = x;
    return 1;
}

/* Index of s in "a|b|c", or -1. */
static int ev_choice(const char *choices, const char *s) {
    size_t n = strlen(s);
    int idx = 0;
    for (const char *p = choices;; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, s, n)) return idx;
        if (!bar) return -1;
        p = bar + 1;
    }
}

static attn_status ev_parse_attr(ev *e, const ev_attr *a, const char *text, ev_val *v) {
    int ok = 0;
    switch (a->type) {
    case 'b': ok = ev_parse_bool(text, &v->b); break;
    case 'i': ok = ev_parse_int(text, &v->i); break;
    case 'f': ok = ev_parse_float(text, &v->f); break;
    case 'e': ok = (v->e = ev_choice(a->choices, text)) >= 0; break;
    default: break;
    }
    if (ok) {
        v->present = 1;
        return ATTN_OK;
    }
    const char *want = a->type == 'b'   ? "a boolean (true or false)"
                       : a->type == 'i' ? "a decimal integer"
                       : a->type == 'f' ? "a finite number"
                                        : NULL;
    if (want)
        return attn__fail(e->ctx, ATTN_E_INVALID, "attribute '%s' has the bad value \"%s\": "
                          "expected %s", a->name, text, want);
    return attn__fail(e->ctx, ATTN_E_INVALID, "attribute '%s' has the bad value \"%s\": "
                      "expected one of %s", a->name, text, a->choices);
}

static int ev_attr_index(const ev *e, const char *name) {
    for (int i = 0; i < e->nattrs; i++)
        if (!strcmp(e->defs[i]->name, name)) return i;
    return -1;
}

/* Accessors; a name missing from the op's table reads as absent/zero (a bug caught by the
 * fixture tests, since every op reads only its own attributes). */
static const ev_val *ev_get(const ev *e, const char *name) {
    static const ev_val none;
    int i = ev_attr_index(e, name);
    return i < 0 ? &none : &e->vals[i];
}
int ev_has(const ev *e, const char *name) { return ev_get(e, name)->present; }
int64_t ev_i(const ev *e, const char *name) { return ev_get(e, name)->i; }
double ev_f(const ev *e, const char *name) { return ev_get(e, name)->f; }
int ev_b(const ev *e, const char *name) { return ev_get(e, name)->b; }
int ev_e(const ev *e, const char *name) { return ev_get(e, name)->e; }

/* Checks every metadata key and parses every attribute (given or default). */
static attn_status ev_attrs(ev *e) {
    e->nattrs = 0;
    for (int l = 0; l < 2; l++)
        for (const ev_attr *a = e->op->attrs[l]; a && a->name; a++) {
            if (e->nattrs == EV_MAX_ATTRS)
                return attn__fail(e->ctx, ATTN_E_INTERNAL, "too many attributes");
            e->defs[e->nattrs++] = a;
        }
    size_t nm = attn_st_meta_count(e->in);
    for (size_t i = 0; i < nm; i++) {
        const char *k, *v;
        if (attn_st_meta_at(e->in, i, &k, &v) != ATTN_OK) continue;
        if (!strcmp(k, "op") || !strcmp(k, "tol") || !strcmp(k, "backward") ||
            !strncmp(k, "comment", 7))
            continue;
        if (ev_attr_index(e, k) < 0)
            return attn__fail(e->ctx, ATTN_E_INVALID, "unknown attribute '%s' (= \"%s\")", k,
                              v);
    }
    for (int i = 0; i < e->nattrs; i++) {
        const ev_attr *a = e->defs[i];
        const char *text = attn_st_meta(e->in, a->name);
        memset(&e->vals[i], 0, sizeof e->vals[i]);
        if (!text) {
            if (a->def == EV_REQ)
                return attn__fail(e->ctx, ATTN_E_INVALID, "missing required attribute '%s'",
                                  a->name);
            if (a->def == EV_OPT) continue;
            text = a->def;
        }
        ATTN_TRY(ev_parse_attr(e, a, text, &e->vals[i]));
    }
    return ATTN_OK;
}

/* ---- tensors --------------------------------------------------------------------------- */

long ev_find(const ev *e, const char *name, attn_st_tensor *info) {
    for (size_t i = 0; i < e->nt; i++) {
        attn_st_tensor t;
        if (attn_st_at(e->in, i, &t) != ATTN_OK) continue;
        if (!strcmp(t.name, name)) {
            if (info) *info = t;
            return (long)i;
        }
    }
    return -1;
}

int ev_present(const ev *e, const char *name) { return ev_find(e, name, NULL) >= 0; }

attn_status ev_dims(ev *e, const attn_st_tensor *t, const char *name, int min_nd,
                    int max_nd) {
    char sb[160];
    attn__dims_str(t->shape, t->ndim, sb, sizeof sb);
    if (t->ndim < min_nd || t->ndim > max_nd) {
        if (min_nd == max_nd)
            return attn__fail(e->ctx, ATTN_E_SHAPE, "tensor '%s' must be %d-D, got %s", name,
                              min_nd, sb);
        return attn__fail(e->ctx, ATTN_E_SHAPE, "tensor '%s' must be %d-D to %d-D, got %s",
                          name, min_nd, max_nd, sb);
    }
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] <= 0)
            return attn__fail(e->ctx, ATTN_E_SHAPE, "tensor '%s' has a zero-size dimension: %s",
                              name, sb);
    return ATTN_OK;
}

/* Converts with attn_st_to_f32, naming the tensor in any error. */
attn_status ev_to_f32(ev *e, const attn_st_tensor *info, const char *name, float **out) {
    size_t bytes;
    void *p;
    char msg[ATTN__MSG_MAX];
    if (!ev_bytes(info->ndim, info->shape, sizeof(float), &bytes))
        return attn__fail(e->ctx, ATTN_E_OVERFLOW, "tensor '%s' is too large", name);
    ATTN_TRY(ev_alloc(e, bytes, &p));
    attn_status st = attn_st_to_f32(e->ctx, info, p, (size_t)info->numel);
    if (st != ATTN_OK) {
        snprintf(msg, sizeof msg, "%s", attn_ctx_errmsg(e->ctx));
        const char *dn = attn_dtype_name(info->dtype);
        return attn__fail(e->ctx, st, "tensor '%s' (dtype %s) cannot be read as F32: %s", name,
                          dn ? dn : "?", msg);
    }
    *out = p;
    return ATTN_OK;
}

/* A floating input as a contiguous F32 tensor; absent -> t->data == NULL (or an error if
 * required). */
attn_status ev_input(ev *e, const char *name, int required, int min_nd, int max_nd,
                     attn_tensor *t) {
    attn_st_tensor info;
    float *p;
    memset(t, 0, sizeof *t);
    if (ev_find(e, name, &info) < 0) {
        if (required)
            return attn__fail(e->ctx, ATTN_E_INVALID, "missing input tensor '%s'", name);
        return ATTN_OK;
    }
    ATTN_TRY(ev_dims(e, &info, name, min_nd, max_nd));
    /* docs/eval-format.md: data is F32; another dtype would compare something else */
    if (info.dtype != ATTN_F32) {
        const char *dn = attn_dtype_name(info.dtype);
        return attn__fail(e->ctx, ATTN_E_DTYPE, "tensor '%s' has dtype %s; F32 is expected",
                          name, dn ? dn : "?");
    }
    ATTN_TRY(ev_to_f32(e, &info, name, &p));
    *t = attn_tensor_make(p, ATTN_F32, info.ndim, info.shape);
    return ATTN_OK;
}

/* A mask: BOOL/U8 keep their bytes with kind bool_kind (the op's PyTorch polarity); floating
 * dtypes become ADD.  Absent -> kind NONE. */
attn_status ev_mask(ev *e, const char *name, attn_mask_kind bool_kind, int max_nd,
                    attn_mask *m) {
    attn_st_tensor info;
    memset(m, 0, sizeof *m);
    m->kind = ATTN_MASK_NONE;
    if (ev_find(e, name, &info) < 0) return ATTN_OK;
    ATTN_TRY(ev_dims(e, &info, name, 1, max_nd));
    if (info.dtype == ATTN_BOOL || info.dtype == ATTN_U8) {
        void *p;
        ATTN_TRY(ev_alloc(e, (size_t)info.numel, &p));
        memcpy(p, info.data, (size_t)info.numel);
        m->kind = bool_kind;
        m->t = attn_tensor_make(p, info.dtype, info.ndim, info.shape);
        return ATTN_OK;
    }
    if (info.dtype != ATTN_F32) { /* additive masks are F32 (docs/eval-format.md) */
        const char *dn = attn_dtype_name(info.dtype);
        return attn__fail(e->ctx, ATTN_E_DTYPE,
                          "mask '%s' has dtype %s; expected BOOL, U8 or F32", name,
                          dn ? dn : "?");
    }
    float *p;
    ATTN_TRY(ev_to_f32(e, &info, name, &p));
    m->kind = ATTN_MASK_ADD;
    m->t = attn_tensor_make(p, ATTN_F32, info.ndim, info.shape);
    return ATTN_OK;
}

/* Token ids (I64/I32), decoded from little-endian bytes into an aligned buffer. */
attn_status ev_ids(ev *e, const char *name, int min_nd, int max_nd, attn_tensor *t) {
    attn_st_tensor info;
    void *p;
    memset(t, 0, sizeof *t);
    if (ev_find(e, name, &info) < 0)
        return attn__fail(e->ctx, ATTN_E_INVALID, "missing input tensor '%s'", name);
    ATTN_TRY(ev_dims(e, &info, name, min_nd, max_nd));
    if (info.dtype != ATTN_I64 && info.dtype != ATTN_I32) {
        const char *dn = attn_dtype_name(info.dtype);
        return attn__fail(e->ctx, ATTN_E_DTYPE, "tensor '%s' has dtype %s; expected I64 or I32",
                          name, dn ? dn : "?");
    }
    size_t w = attn_dtype_size(info.dtype), n = (size_t)info.numel;
    ATTN_TRY(ev_alloc(e, n * w, &p));
    const unsigned char *src = info.data;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = 0;
        for (size_t b = 0; b < w; b++) u |= (uint64_t)src[i * w + b] << (8 * b);
        if (w == 8)
            ((int64_t *)p)[i] = (int64_t)u;
        else
            ((int32_t *)p)[i] = (int32_t)(uint32_t)u;
    }
    *t = attn_tensor_make(p, info.dtype, info.ndim, info.shape);
    return ATTN_OK;
}

/* ---- modules --------------------------------------------------------------------------- */

/* Takes ownership of *pm (created with status st) and marks the file's tensors that name its
 * parameters under prefix. */
attn_status ev_module(ev *e, attn_status st, attn_module **pm, const char *prefix) {
    /* pm, not m: the create call in the caller's argument list runs before this body, but
     * its order against the other arguments is unspecified */
    attn_module *m = *pm;
    if (st != ATTN_OK) return st;
    if (e->nmods == EV_MAX_MODS) {
        attn_module_free(m);
        return attn__fail(e->ctx, ATTN_E_INTERNAL, "too many modules");
    }
    e->mods[e->nmods] = m;
    e->pfx[e->nmods++] = prefix;
    size_t np = attn_module_param_count(m), plen = strlen(prefix);
    for (size_t i = 0; i < np; i++) {
        const char *pn;
        attn_tensor v;
        char full[512];
        if (attn_module_param_at(m, i, &pn, &v) != ATTN_OK) continue;
        if (plen + strlen(pn) >= sizeof full) continue;
        memcpy(full, prefix, plen);
        strcpy(full + plen, pn);
        long k = ev_find(e, full, NULL);
        if (k >= 0) e->used[k] = 1;
    }
    return ATTN_OK;
}

/* Called once inputs and modules are known: refuses leftover tensors, then loads every
 * module strictly (a missing or misshapen parameter is reported by attn_module_load). */
attn_status ev_ready(ev *e) {
    for (size_t i = 0; i < e->nt; i++) {
        attn_st_tensor t;
        if (e->used[i] || attn_st_at(e->in, i, &t) != ATTN_OK) continue;
        if (e->nmods)
            return attn__fail(e->ctx, ATTN_E_INVALID,
                              "unknown tensor '%s': neither an input of the op nor a parameter "
                              "of its module", t.name);
        return attn__fail(e->ctx, ATTN_E_INVALID, "unknown tensor '%s': not an input of the op",
                          t.name);
    }
    for (int i = 0; i < e->nmods; i++) {
        ATTN_TRY(attn_module_load(e->ctx, e->mods[i], e->in, e->pfx[i], 1));
        if (e->bwd) {
            /* module backward accumulates into the parameter gradients: start from zero */
            ATTN_TRY(attn_module_enable_grad(e->ctx, e->mods[i]));
            attn_module_zero_grad(e->mods[i]);
        }
    }
    e->ready = 1;
    return ATTN_OK;
}

attn_status ev_write(ev *e, const char *name, const attn_tensor *t) {
    return attn_st_writer_add_view(e->out, name, t);
}

/* Writes t under name with another shape (the same elements, contiguous). */
attn_status ev_write_as(ev *e, const char *name, const attn_tensor *t, int ndim,
                        const int64_t *shape) {
    attn_tensor v = ev_reshape(t, ndim, shape);
    return ev_write(e, name, &v);
}

/* ---- backward ---------------------------------------------------------------------------- */

/* grad.out, the cotangent of "out": required with backward = true, and of the shape that "out"
 * has in the output file (ndim, shape).  Returned contiguous, as F32, in that shape; the op
 * reshapes it as it reshapes its own output. */
attn_status ev_grad_out(ev *e, int ndim, const int64_t *shape, attn_tensor *g) {
    attn_st_tensor info;
    char s1[160], s2[160];
    memset(g, 0, sizeof *g);
    ATTN_FAIL_IF(ev_find(e, "grad.out", &info) < 0, e->ctx, ATTN_E_INVALID,
                 "backward = true needs the tensor 'grad.out' (the gradient of the loss with "
                 "respect to 'out', of the shape of 'out')");
    int same = info.ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = info.shape[d] == shape[d];
    ATTN_FAIL_IF(!same, e->ctx, ATTN_E_SHAPE,
                 "tensor 'grad.out' has shape %s but 'out' has shape %s",
                 attn__dims_str(info.shape, info.ndim, s1, sizeof s1),
                 attn__dims_str(shape, ndim, s2, sizeof s2));
    ATTN_FAIL_IF(info.dtype == ATTN_BOOL || info.dtype == ATTN_U8 || info.dtype == ATTN_I8 ||
                     info.dtype == ATTN_I32 || info.dtype == ATTN_I64,
                 e->ctx, ATTN_E_DTYPE, "tensor 'grad.out' has dtype %s; a floating-point "
                 "tensor is expected", attn_dtype_name(info.dtype) ? attn_dtype_name(info.dtype)
                                                                   : "?");
    float *p;
    ATTN_TRY(ev_to_f32(e, &info, "grad.out", &p));
    *g = attn_tensor_make(p, ATTN_F32, ndim, shape);
    return ATTN_OK;
}

/* grad.out for an output held as t (contiguous) and written as t itself. */
attn_status ev_grad_out_like(ev *e, const attn_tensor *t, attn_tensor *g) {
    return ev_grad_out(e, t->ndim, t->shape, g);
}

/* A new zeroed gradient of the shape of t. */
attn_status ev_grad_like(ev *e, const char *name, const attn_tensor *t, attn_tensor *g) {
    return ev_new(e, name, t->ndim, t->shape, g);
}

/* Writes "grad." + name. */
attn_status ev_write_grad(ev *e, const char *name, const attn_tensor *t) {
    char full[256];
    ATTN_FAIL_IF(strlen(name) + 6 >= sizeof full, e->ctx, ATTN_E_INVALID,
                 "tensor name '%s' is too long", name);
    snprintf(full, sizeof full, "grad.%s", name);
    return ev_write(e, full, t);
}

attn_status ev_write_grad_as(ev *e, const char *name, const attn_tensor *t, int ndim,
                             const int64_t *shape) {
    attn_tensor v = ev_reshape(t, ndim, shape);
    return ev_write_grad(e, name, &v);
}

/* Writes the gradient of every parameter of every module as "grad." + prefix + name, and
 * marks the op's backward as done. */
attn_status ev_write_param_grads(ev *e) {
    for (int i = 0; i < e->nmods; i++) {
        size_t np = attn_module_param_count(e->mods[i]);
        for (size_t j = 0; j < np; j++) {
            const char *pn;
            attn_tensor g;
            char full[512];
            ATTN_TRY(attn_module_grad_at(e->mods[i], j, &pn, &g));
            ATTN_FAIL_IF(snprintf(full, sizeof full, "%s%s", e->pfx[i], pn) >= (int)sizeof full,
                         e->ctx, ATTN_E_INVALID, "parameter name '%s%s' is too long", e->pfx[i],
                         pn);
            ATTN_TRY(ev_write_grad(e, full, &g));
        }
    }
    e->bwd_done = 1;
    return ATTN_OK;
}

/* ---- shared attribute lists and helpers ------------------------------------------------- */

const attn_activation ev_acts[] = {ATTN_ACT_RELU, ATTN_ACT_GELU, ATTN_ACT_GELU_TANH};

/* torch.nn.TransformerEncoderLayer / DecoderLayer constructor arguments. */
const ev_attr A_TF_LAYER[] = {
    {"d_model", 'i', EV_REQ, NULL},          {"nhead", 'i', EV_REQ, NULL},
    {"dim_feedforward", 'i', "2048", NULL},  {"dropout", 'f', "0.1", NULL},
    {"activation", 'e', "relu", ACTS},       {"layer_norm_eps", 'f', "1e-5", NULL},
    {"norm_first", 'b', "false", NULL},      {"bias", 'b', "true", NULL},
    {"batch_first", 'b', "true", NULL},      EV_END};

/* Fills cfg from the transformer attributes (d_model/nhead, dim_feedforward, ...). */
attn_status ev_tf_config(ev *e, attn_transformer_config *cfg) {
    int64_t E = ev_i(e, "d_model"), H = ev_i(e, "nhead");
    ATTN_FAIL_IF(!ev_b(e, "batch_first"), e->ctx, ATTN_E_UNSUPPORTED,
                 "attribute 'batch_first' = false is not supported: attn layers are batch-first "
                 "(write tensors as [B, L, E] and batch_first=true)");
    ATTN_FAIL_IF(E <= 0 || H <= 0, e->ctx, ATTN_E_INVALID,
                 "attributes 'd_model' (%lld) and 'nhead' (%lld) must be positive", (long long)E,
                 (long long)H);
    ATTN_FAIL_IF(E % H != 0, e->ctx, ATTN_E_INVALID,
                 "attribute 'nhead' (%lld) must divide 'd_model' (%lld)", (long long)H,
                 (long long)E);
    *cfg = attn_transformer_defaults(E, H);
    cfg->dim_feedforward = ev_i(e, "dim_feedforward");
    cfg->dropout = (float)ev_f(e, "dropout");
    cfg->activation = ev_acts[ev_e(e, "activation")];
    cfg->layer_norm_eps = (float)ev_f(e, "layer_norm_eps");
    cfg->norm_first = ev_b(e, "norm_first");
    cfg->bias = ev_b(e, "bias");
    return ATTN_OK;
}

/* Refuses a causal hint that PyTorch would refuse without its mask. */
attn_status ev_hint_needs_mask(ev *e, const char *hint, const attn_mask *m,
                               const char *mask_name) {
    ATTN_FAIL_IF(ev_b(e, hint) && m->kind == ATTN_MASK_NONE, e->ctx, ATTN_E_INVALID,
                 "attribute '%s' = true needs the mask '%s' (in PyTorch the flag is only a "
                 "hint about that mask)", hint, mask_name);
    return ATTN_OK;
}

/* Combines a [..., L, S] mask (our own copy) with the top-left causal mask in place, for hints
 * whose layer call has no causal flag of its own: PyTorch defines the hint only for a causal
 * mask, where this changes nothing.  Other shapes are left for the layer to refuse. */
void ev_make_causal(attn_mask *m, int64_t L, int64_t S) {
    attn_tensor *t = &m->t;
    if (m->kind == ATTN_MASK_NONE || t->ndim < 2 || t->shape[t->ndim - 2] != L ||
        t->shape[t->ndim - 1] != S)
        return;
    int64_t n = attn_tensor_numel(t) / (L * S);
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = i + 1; j < S; j++) {
                int64_t o = (b * L + i) * S + j;
                if (m->kind == ATTN_MASK_ADD)
                    ((float *)t->data)[o] = -INFINITY;
                else
                    ((unsigned char *)t->data)[o] = m->kind == ATTN_MASK_BLOCK ? 1 : 0;
            }
}

attn_status ev_heads_divide(ev *e, const char *en, int64_t E, const char *hn,
                            int64_t H) {
    ATTN_FAIL_IF(E <= 0 || H <= 0, e->ctx, ATTN_E_INVALID,
                 "attributes '%s' (%lld) and '%s' (%lld) must be positive", en, (long long)E, hn,
                 (long long)H);
    ATTN_FAIL_IF(E % H != 0, e->ctx, ATTN_E_INVALID, "attribute '%s' (%lld) must divide '%s' "
                 "(%lld)", hn, (long long)H, en, (long long)E);
    return ATTN_OK;
}

/* Output [B, L, E] like x (3-D). */
attn_status ev_new_like(ev *e, const attn_tensor *x, attn_tensor *o) {
    return ev_new(e, "out", x->ndim, x->shape, o);
}


attn_status ev_num_layers(ev *e, const char *name, int64_t *n) {
    *n = ev_i(e, name);
    ATTN_FAIL_IF(*n < 1 || *n > 100000, e->ctx, ATTN_E_INVALID,
                 "attribute '%s' must be in [1, 100000], got %lld", name, (long long)*n);
    return ATTN_OK;
}

const ev_attr A_NONE[] = {EV_END};

/* ---- the op table ------------------------------------------------------------------------ */

#define EV_ENTRY(n) &attn__ev_op_##n,
static const ev_op *const ev_ops[] = {EV_OPS(EV_ENTRY)};
#define EV_NAME(n) #n,
static const char *const ev_names[] = {EV_OPS(EV_NAME) NULL};

const char *const *attn_eval_ops(void) { return ev_names; }

static attn_status ev_run(ev *e) {
    const char *opname = attn_st_meta(e->in, "op");
    ATTN_FAIL_IF(!opname, e->ctx, ATTN_E_INVALID,
                 "the file's __metadata__ has no \"op\" entry naming the op to run");
    for (size_t i = 0; i < sizeof ev_ops / sizeof ev_ops[0] && !e->op; i++)
        if (!strcmp(ev_ops[i]->name, opname)) e->op = ev_ops[i];
    ATTN_FAIL_IF(!e->op, e->ctx, ATTN_E_INVALID,
                 "unknown op '%s' (attn eval --list-ops lists the known ones)", opname);
    ATTN_TRY(ev_attrs(e));
    const char *bw = attn_st_meta(e->in, "backward");
    ATTN_FAIL_IF(bw && !ev_parse_bool(bw, &e->bwd), e->ctx, ATTN_E_INVALID,
                 "attribute 'backward' has the bad value \"%s\": expected a boolean (true or "
                 "false)", bw);
    ATTN_FAIL_IF(!e->bwd && ev_present(e, "grad.out"), e->ctx, ATTN_E_INVALID,
                 "tensor 'grad.out' is given but backward is not true (set the metadata "
                 "\"backward\" to \"true\" to compute gradients)");
    ATTN_TRY(attn_st_writer_meta(e->out, "op", e->op->name));
    /* attn views hold at most 4 dimensions */
    for (size_t i = 0; i < e->nt; i++) {
        attn_st_tensor t;
        char sb[160];
        ATTN_TRY(attn_st_at(e->in, i, &t));
        ATTN_FAIL_IF(t.ndim > ATTN_MAX_DIMS, e->ctx, ATTN_E_SHAPE,
                     "tensor '%s' has %d dimensions %s; attn supports at most %d", t.name,
                     t.ndim, attn__dims_str(t.shape, t.ndim, sb, sizeof sb), ATTN_MAX_DIMS);
        for (const char *const *n = e->op->inputs; *n; n++)
            if (!strcmp(*n, t.name)) e->used[i] = 1;
        if (e->bwd && !strcmp(t.name, "grad.out")) e->used[i] = 1;
    }
    /* modules are built from the file: each parameter must be one of its tensors, with its
     * shape, as it is registered (a size in the attributes is a claim the tensors back) */
    attn__param_source(e->ctx, e->in, "");
    attn_status st = e->op->run(e);
    attn__param_source(e->ctx, NULL, NULL);
    ATTN_TRY(st);
    ATTN_FAIL_IF(!e->ready, e->ctx, ATTN_E_INTERNAL, "op did not check its tensors");
    /* every op has a backward; an op added without one is refused rather than giving a file
     * without gradients */
    ATTN_FAIL_IF(e->bwd && !e->bwd_done, e->ctx, ATTN_E_UNSUPPORTED,
                 "op '%s' has no backward (metadata \"backward\" = \"true\")", e->op->name);
    return ATTN_OK;
}

attn_status attn_eval(attn_ctx *ctx, const attn_st *in, attn_st_writer *out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!in || !out, ctx, ATTN_E_INVALID, "attn_eval: input file and writer needed");
    ev e;
    memset(&e, 0, sizeof e);
    e.ctx = ctx;
    e.in = in;
    e.out = out;
    e.nt = attn_st_count(in);
    e.used = attn__calloc(ctx, e.nt ? e.nt : 1, 1);
    if (!e.used) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory");
    attn_status st = ev_run(&e);
    if (st != ATTN_OK && e.op) {
        /* prefix every message, including the layers', with the op for context */
        char msg[ATTN__MSG_MAX];
        snprintf(msg, sizeof msg, "%s", attn_ctx_errmsg(ctx));
        attn__fail(ctx, st, "%s: %s", e.op->name, msg[0] ? msg : attn_strerror(st));
    }
    for (int i = 0; i < e.nmods; i++) attn_module_free(e.mods[i]);
    attn_llm_free(e.llm);
    for (size_t i = 0; i < e.nbufs; i++) attn__free(ctx, e.bufs[i]);
    attn__free(ctx, e.bufs);
    attn__free(ctx, e.used);
    return st;
}
