/* attn_eval: runs one op described by a safetensors file (docs/eval-format.md).
 *
 * This file is the boundary between a file written by PyTorch-side tooling and the library:
 * it parses attributes strictly, converts tensors to the dtypes the compute calls take, maps
 * each PyTorch op's mask convention onto attn_mask kinds, and refuses anything it does not
 * understand (unknown op, attribute or tensor) instead of silently ignoring it, because an
 * ignored name in a reference case means the comparison tests something other than intended.
 * All computation goes through the public API. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define EV_MAX_ATTRS 32
#define EV_MAX_MODS 4

/* ---- op descriptions ------------------------------------------------------------------- */

/* An attribute: name, type ('b' bool, 'i' int, 'f' float, 'e' one of `choices` "a|b|c") and
 * default text.  def == EV_REQ: required; def == EV_OPT: optional with no default. */
typedef struct ev_attr {
    const char *name;
    char type;
    const char *def;
    const char *choices;
} ev_attr;

static const char ev_optional[] = "(optional)";
#define EV_REQ NULL
#define EV_OPT ev_optional

typedef struct ev_val {
    int present; /* given in the file, or by a default */
    int64_t i;
    double f;
    int b;
    int e; /* index into choices */
} ev_val;

typedef struct ev ev;
typedef struct ev_op {
    const char *name;
    const ev_attr *attrs[2];   /* up to two lists (shared + op-specific), NULL-terminated */
    const char *const *inputs; /* tensor names that are inputs (not module parameters) */
    attn_status (*run)(ev *e);
} ev_op;

struct ev {
    attn_ctx *ctx;
    const attn_st *in;
    attn_st_writer *out;
    const ev_op *op;
    size_t nt;
    unsigned char *used; /* per tensor of `in`: consumed as an input or a parameter */
    void **bufs;         /* every allocation, freed at the end */
    size_t nbufs, capbufs;
    attn_module *mods[EV_MAX_MODS];
    const char *pfx[EV_MAX_MODS];
    int nmods;
    int ready;
    const ev_attr *defs[EV_MAX_ATTRS];
    ev_val vals[EV_MAX_ATTRS];
    int nattrs;
    int bwd;      /* metadata backward = true: also compute gradients from grad.out */
    int bwd_done; /* set by the op once it has written its gradients */
};

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
static attn_status ev_new(ev *e, const char *what, int ndim, const int64_t *shape,
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
 * ATTN_LIMIT_FILE_BYTES, the most a file read back into memory may hold. */
static attn_status ev_claim(ev *e, const char *what, int ndim, const int64_t *shape) {
    size_t bytes;
    char sb[128];
    int64_t lim = attn_ctx_limit(e->ctx, ATTN_LIMIT_FILE_BYTES);
    ATTN_FAIL_IF(!ev_bytes(ndim, shape, sizeof(float), &bytes) || (uint64_t)bytes > (uint64_t)lim,
                 e->ctx, ATTN_E_UNSUPPORTED,
                 "%s: shape %s from the attributes is over ATTN_LIMIT_FILE_BYTES (%lld bytes)",
                 what, attn__dims_str(shape, ndim, sb, sizeof sb), (long long)lim);
    return ATTN_OK;
}

/* A contiguous view of the same data with another shape (same element count). */
static attn_tensor ev_reshape(const attn_tensor *t, int ndim, const int64_t *shape) {
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
static int ev_has(const ev *e, const char *name) { return ev_get(e, name)->present; }
static int64_t ev_i(const ev *e, const char *name) { return ev_get(e, name)->i; }
static double ev_f(const ev *e, const char *name) { return ev_get(e, name)->f; }
static int ev_b(const ev *e, const char *name) { return ev_get(e, name)->b; }
static int ev_e(const ev *e, const char *name) { return ev_get(e, name)->e; }

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

static long ev_find(const ev *e, const char *name, attn_st_tensor *info) {
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

static int ev_present(const ev *e, const char *name) { return ev_find(e, name, NULL) >= 0; }

static attn_status ev_dims(ev *e, const attn_st_tensor *t, const char *name, int min_nd,
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
static attn_status ev_to_f32(ev *e, const attn_st_tensor *info, const char *name, float **out) {
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
static attn_status ev_input(ev *e, const char *name, int required, int min_nd, int max_nd,
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
static attn_status ev_mask(ev *e, const char *name, attn_mask_kind bool_kind, int max_nd,
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
static attn_status ev_ids(ev *e, const char *name, int min_nd, int max_nd, attn_tensor *t) {
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
static attn_status ev_module(ev *e, attn_status st, attn_module **pm, const char *prefix) {
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
static attn_status ev_ready(ev *e) {
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

static attn_status ev_write(ev *e, const char *name, const attn_tensor *t) {
    return attn_st_writer_add_view(e->out, name, t);
}

/* Writes t under name with another shape (the same elements, contiguous). */
static attn_status ev_write_as(ev *e, const char *name, const attn_tensor *t, int ndim,
                               const int64_t *shape) {
    attn_tensor v = ev_reshape(t, ndim, shape);
    return ev_write(e, name, &v);
}

/* ---- backward ---------------------------------------------------------------------------- */

/* grad.out, the cotangent of "out": required with backward = true, and of the shape that "out"
 * has in the output file (ndim, shape).  Returned contiguous, as F32, in that shape; the op
 * reshapes it as it reshapes its own output. */
static attn_status ev_grad_out(ev *e, int ndim, const int64_t *shape, attn_tensor *g) {
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
static attn_status ev_grad_out_like(ev *e, const attn_tensor *t, attn_tensor *g) {
    return ev_grad_out(e, t->ndim, t->shape, g);
}

/* A new zeroed gradient of the shape of t. */
static attn_status ev_grad_like(ev *e, const char *name, const attn_tensor *t, attn_tensor *g) {
    return ev_new(e, name, t->ndim, t->shape, g);
}

/* Writes "grad." + name. */
static attn_status ev_write_grad(ev *e, const char *name, const attn_tensor *t) {
    char full[256];
    ATTN_FAIL_IF(strlen(name) + 6 >= sizeof full, e->ctx, ATTN_E_INVALID,
                 "tensor name '%s' is too long", name);
    snprintf(full, sizeof full, "grad.%s", name);
    return ev_write(e, full, t);
}

static attn_status ev_write_grad_as(ev *e, const char *name, const attn_tensor *t, int ndim,
                                    const int64_t *shape) {
    attn_tensor v = ev_reshape(t, ndim, shape);
    return ev_write_grad(e, name, &v);
}

/* Writes the gradient of every parameter of every module as "grad." + prefix + name, and
 * marks the op's backward as done. */
static attn_status ev_write_param_grads(ev *e) {
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

/* ---- shared attribute lists ------------------------------------------------------------- */

#define EV_END {NULL, 0, NULL, NULL}
#define ACTS "relu|gelu|gelu_tanh"

static const attn_activation ev_acts[] = {ATTN_ACT_RELU, ATTN_ACT_GELU, ATTN_ACT_GELU_TANH};

/* torch.nn.TransformerEncoderLayer / DecoderLayer constructor arguments. */
static const ev_attr A_TF_LAYER[] = {
    {"d_model", 'i', EV_REQ, NULL},          {"nhead", 'i', EV_REQ, NULL},
    {"dim_feedforward", 'i', "2048", NULL},  {"dropout", 'f', "0.1", NULL},
    {"activation", 'e', "relu", ACTS},       {"layer_norm_eps", 'f', "1e-5", NULL},
    {"norm_first", 'b', "false", NULL},      {"bias", 'b', "true", NULL},
    {"batch_first", 'b', "true", NULL},      EV_END};

/* Fills cfg from the transformer attributes (d_model/nhead, dim_feedforward, ...). */
static attn_status ev_tf_config(ev *e, attn_transformer_config *cfg) {
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
static attn_status ev_hint_needs_mask(ev *e, const char *hint, const attn_mask *m,
                                      const char *mask_name) {
    ATTN_FAIL_IF(ev_b(e, hint) && m->kind == ATTN_MASK_NONE, e->ctx, ATTN_E_INVALID,
                 "attribute '%s' = true needs the mask '%s' (in PyTorch the flag is only a "
                 "hint about that mask)", hint, mask_name);
    return ATTN_OK;
}

/* Combines a [..., L, S] mask (our own copy) with the top-left causal mask in place, for hints
 * whose layer call has no causal flag of its own: PyTorch defines the hint only for a causal
 * mask, where this changes nothing.  Other shapes are left for the layer to refuse. */
static void ev_make_causal(attn_mask *m, int64_t L, int64_t S) {
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

/* ---- sdpa ------------------------------------------------------------------------------- */

static const ev_attr A_SDPA[] = {
    {"is_causal", 'b', "false", NULL},
    {"scale", 'f', EV_OPT, NULL},
    {"enable_gqa", 'b', "false", NULL},
    {"dropout_p", 'f', "0", NULL},
    {"seed", 'i', "0", NULL},
    {"causal_alignment", 'e', "top_left", "top_left|bottom_right"},
    {"need_weights", 'b', "false", NULL},
    {"return_lse", 'b', "false", NULL},
    {"window_left", 'i', "-1", NULL},
    {"window_right", 'i', "-1", NULL},
    {"softcap", 'f', "0", NULL},
    EV_END};
static const char *const I_SDPA[] = {"query", "key", "value", "attn_mask", "alibi_slopes", NULL};

static attn_status op_sdpa(ev *e) {
    attn_tensor q, k, v, o, w, lse;
    attn_mask mask;
    char s1[96], s2[96];
    ATTN_TRY(ev_input(e, "query", 1, 3, 4, &q));
    ATTN_TRY(ev_input(e, "key", 1, 3, 4, &k));
    ATTN_TRY(ev_input(e, "value", 1, 3, 4, &v));
    ATTN_FAIL_IF(k.ndim != q.ndim || v.ndim != q.ndim, e->ctx, ATTN_E_SHAPE,
                 "query, key and value must have the same number of dimensions (%d, %d, %d)",
                 q.ndim, k.ndim, v.ndim);
    ATTN_TRY(ev_mask(e, "attn_mask", ATTN_MASK_KEEP, 4, &mask));
    attn_tensor slopes;
    ATTN_TRY(ev_input(e, "alibi_slopes", 0, 1, 1, &slopes));
    ATTN_TRY(ev_ready(e));
    /* the file's shapes, for the gradients */
    attn_tensor q0 = q, k0 = k, v0 = v, m0 = mask.t;
    int three = q.ndim == 3;
    if (three) {
        /* [B, L, D] is one head: view as [B, 1, L, D] */
        int64_t qs[4] = {q.shape[0], 1, q.shape[1], q.shape[2]};
        int64_t ks[4] = {k.shape[0], 1, k.shape[1], k.shape[2]};
        int64_t vs[4] = {v.shape[0], 1, v.shape[1], v.shape[2]};
        q = ev_reshape(&q, 4, qs);
        k = ev_reshape(&k, 4, ks);
        v = ev_reshape(&v, 4, vs);
        if (mask.kind != ATTN_MASK_NONE && mask.t.ndim == 3) {
            /* a 3-D mask [B, L, S] lines up with the batch, not with the inserted head axis */
            int64_t ms[4] = {mask.t.shape[0], 1, mask.t.shape[1], mask.t.shape[2]};
            mask.t = ev_reshape(&mask.t, 4, ms);
        }
    }
    int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], D = q.shape[3];
    int64_t Hkv = k.shape[1], S = k.shape[2], Dv = v.shape[3];
    ATTN_FAIL_IF(!ev_b(e, "enable_gqa") && H != Hkv, e->ctx, ATTN_E_SHAPE,
                 "query %s has %lld heads but key %s has %lld; set enable_gqa = true for "
                 "grouped-query attention", attn__shape_str(&q, s1, sizeof s1), (long long)H,
                 attn__shape_str(&k, s2, sizeof s2), (long long)Hkv);
    attn_sdpa_options opt = attn_sdpa_defaults();
    if (ev_b(e, "is_causal"))
        opt.causal = ev_e(e, "causal_alignment") ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_TOP_LEFT;
    if (ev_has(e, "scale")) {
        double sc = ev_f(e, "scale");
        if (sc == 0.0) {
            /* attn_sdpa reads scale 0 as "default"; PyTorch's scale=0 makes every score 0,
             * which zeroing the query (our own copy) reproduces exactly */
            memset(q.data, 0, (size_t)attn_tensor_numel(&q) * sizeof(float));
        } else {
            ATTN_FAIL_IF(fabs(sc) > 3.4e38, e->ctx, ATTN_E_INVALID,
                         "attribute 'scale' (%g) is out of the float range", sc);
            opt.scale = (float)sc;
        }
    }
    opt.dropout_p = (float)ev_f(e, "dropout_p");
    ATTN_FAIL_IF(ev_i(e, "seed") < 0, e->ctx, ATTN_E_INVALID,
                 "attribute 'seed' must be >= 0, got %lld", (long long)ev_i(e, "seed"));
    opt.seed = (uint64_t)ev_i(e, "seed");
    opt.window_left = ev_i(e, "window_left");
    opt.window_right = ev_i(e, "window_right");
    opt.window = opt.window_left >= 0 || opt.window_right >= 0; /* -1 and -1: none */
    ATTN_FAIL_IF(fabs(ev_f(e, "softcap")) > 3.4e38, e->ctx, ATTN_E_INVALID,
                 "attribute 'softcap' (%g) is out of the float range", ev_f(e, "softcap"));
    opt.softcap = (float)ev_f(e, "softcap"); /* attn_sdpa refuses a negative one */
    if (slopes.data) {
        ATTN_FAIL_IF(slopes.shape[0] != H, e->ctx, ATTN_E_SHAPE,
                     "tensor 'alibi_slopes' must have one slope per query head (%lld), got %lld",
                     (long long)H, (long long)slopes.shape[0]);
        opt.alibi_slopes = slopes.data;
    }
    int64_t os[4] = {B, H, L, Dv}, ws[4] = {B, H, L, S};
    ATTN_TRY(ev_new(e, "out", 4, os, &o));
    memset(&w, 0, sizeof w);
    memset(&lse, 0, sizeof lse);
    if (ev_b(e, "need_weights")) ATTN_TRY(ev_new(e, "attn_weights", 4, ws, &w));
    if (ev_b(e, "return_lse")) ATTN_TRY(ev_new(e, "lse", 3, ws, &lse));
    ATTN_TRY(attn_sdpa(e->ctx, &q, &k, &v, mask.kind ? &mask : NULL, &opt, &o,
                       w.data ? &w : NULL, lse.data ? &lse : NULL));
    (void)D;
    int64_t o3[3] = {B, L, Dv};
    if (three) {
        int64_t w3[3] = {B, L, S}, l2[2] = {B, L};
        ATTN_TRY(ev_write_as(e, "out", &o, 3, o3));
        if (w.data) ATTN_TRY(ev_write_as(e, "attn_weights", &w, 3, w3));
        if (lse.data) ATTN_TRY(ev_write_as(e, "lse", &lse, 2, l2));
    } else {
        ATTN_TRY(ev_write(e, "out", &o));
        if (w.data) ATTN_TRY(ev_write(e, "attn_weights", &w));
        if (lse.data) ATTN_TRY(ev_write(e, "lse", &lse));
    }
    if (!e->bwd) return ATTN_OK;
    /* backward: the gradients of query, key, value and of a float attn_mask (a bool mask is
     * not differentiable) */
    attn_tensor go, dq, dk, dv, dm;
    ATTN_TRY(ev_grad_out(e, three ? 3 : 4, three ? o3 : os, &go));
    go = ev_reshape(&go, 4, os);
    ATTN_TRY(ev_grad_like(e, "grad.query", &q, &dq));
    ATTN_TRY(ev_grad_like(e, "grad.key", &k, &dk));
    ATTN_TRY(ev_grad_like(e, "grad.value", &v, &dv));
    memset(&dm, 0, sizeof dm);
    if (mask.kind == ATTN_MASK_ADD) ATTN_TRY(ev_grad_like(e, "grad.attn_mask", &mask.t, &dm));
    ATTN_TRY(attn_sdpa_backward(e->ctx, &q, &k, &v, mask.kind ? &mask : NULL, &opt, &go, &dq,
                                &dk, &dv, dm.data ? &dm : NULL));
    /* scale 0 ran as a zeroed query with the default scale: PyTorch's scores q k^T * 0 give
     * dquery = 0 (dkey is already 0: it is proportional to the zeroed query) */
    if (ev_has(e, "scale") && ev_f(e, "scale") == 0.0)
        memset(dq.data, 0, (size_t)attn_tensor_numel(&dq) * sizeof(float));
    ATTN_TRY(ev_write_grad_as(e, "query", &dq, q0.ndim, q0.shape));
    ATTN_TRY(ev_write_grad_as(e, "key", &dk, k0.ndim, k0.shape));
    ATTN_TRY(ev_write_grad_as(e, "value", &dv, v0.ndim, v0.shape));
    if (dm.data) ATTN_TRY(ev_write_grad_as(e, "attn_mask", &dm, m0.ndim, m0.shape));
    e->bwd_done = 1;
    return ATTN_OK;
}

/* ---- multihead_attention --------------------------------------------------------------- */

static const ev_attr A_MHA[] = {
    {"embed_dim", 'i', EV_REQ, NULL},
    {"num_heads", 'i', EV_REQ, NULL},
    {"dropout", 'f', "0", NULL},
    {"bias", 'b', "true", NULL},
    {"add_bias_kv", 'b', "false", NULL},
    {"add_zero_attn", 'b', "false", NULL},
    {"kdim", 'i', EV_OPT, NULL},
    {"vdim", 'i', EV_OPT, NULL},
    {"need_weights", 'b', "true", NULL},
    {"average_attn_weights", 'b', "true", NULL},
    {"is_causal", 'b', "false", NULL},
    {"batch_first", 'b', "true", NULL},
    EV_END};
static const char *const I_MHA[] = {"query", "key", "value", "key_padding_mask", "attn_mask",
                                    NULL};

static attn_status ev_heads_divide(ev *e, const char *en, int64_t E, const char *hn,
                                   int64_t H) {
    ATTN_FAIL_IF(E <= 0 || H <= 0, e->ctx, ATTN_E_INVALID,
                 "attributes '%s' (%lld) and '%s' (%lld) must be positive", en, (long long)E, hn,
                 (long long)H);
    ATTN_FAIL_IF(E % H != 0, e->ctx, ATTN_E_INVALID, "attribute '%s' (%lld) must divide '%s' "
                 "(%lld)", hn, (long long)H, en, (long long)E);
    return ATTN_OK;
}

static attn_status op_multihead_attention(ev *e) {
    int64_t E = ev_i(e, "embed_dim"), H = ev_i(e, "num_heads");
    ATTN_TRY(ev_heads_divide(e, "embed_dim", E, "num_heads", H));
    ATTN_FAIL_IF(!ev_b(e, "batch_first"), e->ctx, ATTN_E_UNSUPPORTED,
                 "attribute 'batch_first' = false is not supported: attn layers are batch-first");
    attn_mha_config cfg = attn_mha_defaults(E, H);
    if (ev_has(e, "kdim")) cfg.kdim = ev_i(e, "kdim");
    if (ev_has(e, "vdim")) cfg.vdim = ev_i(e, "vdim");
    ATTN_FAIL_IF((ev_has(e, "kdim") && cfg.kdim <= 0) || (ev_has(e, "vdim") && cfg.vdim <= 0),
                 e->ctx, ATTN_E_INVALID, "attributes 'kdim' and 'vdim' must be positive");
    cfg.bias = ev_b(e, "bias");
    cfg.add_bias_kv = ev_b(e, "add_bias_kv");
    cfg.add_zero_attn = ev_b(e, "add_zero_attn");
    cfg.dropout = (float)ev_f(e, "dropout");
    attn_module *m = NULL;
    ATTN_TRY(ev_module(e, attn_mha_create(e->ctx, &cfg, &m), &m, ""));

    attn_tensor q, k, v, o, w;
    attn_mask kpm, am;
    ATTN_TRY(ev_input(e, "query", 1, 2, 3, &q));
    ATTN_TRY(ev_input(e, "key", 1, q.ndim, q.ndim, &k));
    ATTN_TRY(ev_input(e, "value", 1, q.ndim, q.ndim, &v));
    ATTN_TRY(ev_mask(e, "key_padding_mask", ATTN_MASK_BLOCK, q.ndim - 1, &kpm));
    ATTN_TRY(ev_mask(e, "attn_mask", ATTN_MASK_BLOCK, 3, &am));
    ATTN_TRY(ev_hint_needs_mask(e, "is_causal", &am, "attn_mask"));
    ATTN_TRY(ev_ready(e));
    attn_tensor q0 = q, k0 = k, v0 = v; /* the file's shapes, for the gradients */
    int unbatched = q.ndim == 2;
    if (unbatched) {
        /* PyTorch's unbatched form [L, E]: run as a batch of one */
        int64_t qs[3] = {1, q.shape[0], q.shape[1]}, ks[3] = {1, k.shape[0], k.shape[1]},
                vs[3] = {1, v.shape[0], v.shape[1]};
        q = ev_reshape(&q, 3, qs);
        k = ev_reshape(&k, 3, ks);
        v = ev_reshape(&v, 3, vs);
        if (kpm.kind != ATTN_MASK_NONE) {
            int64_t ps[2] = {1, kpm.t.shape[0]};
            kpm.t = ev_reshape(&kpm.t, 2, ps);
        }
    }
    int64_t B = q.shape[0], L = q.shape[1], S = k.shape[1];
    int64_t S2 = S + cfg.add_bias_kv + cfg.add_zero_attn;
    attn_mha_options opt;
    opt.need_weights = ev_b(e, "need_weights");
    opt.average_attn_weights = ev_b(e, "average_attn_weights");
    opt.is_causal = ev_b(e, "is_causal");
    int64_t os[3] = {B, L, E}, wa[3] = {B, L, S2}, wh[4] = {B, H, L, S2};
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    memset(&w, 0, sizeof w);
    if (opt.need_weights) {
        if (opt.average_attn_weights)
            ATTN_TRY(ev_new(e, "attn_weights", 3, wa, &w));
        else
            ATTN_TRY(ev_new(e, "attn_weights", 4, wh, &w));
    }
    ATTN_TRY(attn_mha_forward(e->ctx, m, &q, &k, &v, kpm.kind ? &kpm : NULL,
                              am.kind ? &am : NULL, &opt, NULL, &o, w.data ? &w : NULL));
    if (!unbatched) {
        ATTN_TRY(ev_write(e, "out", &o));
        if (w.data) ATTN_TRY(ev_write(e, "attn_weights", &w));
    } else {
        ATTN_TRY(ev_write_as(e, "out", &o, 2, os + 1));
        if (w.data) {
            if (opt.average_attn_weights)
                ATTN_TRY(ev_write_as(e, "attn_weights", &w, 2, wa + 1));
            else
                ATTN_TRY(ev_write_as(e, "attn_weights", &w, 3, wh + 1));
        }
    }
    if (!e->bwd) return ATTN_OK;
    /* query, key and value are separate tensors of the file even when equal: each gets its
     * own gradient */
    attn_tensor go, dq, dk, dv;
    ATTN_TRY(ev_grad_out(e, unbatched ? 2 : 3, unbatched ? os + 1 : os, &go));
    go = ev_reshape(&go, 3, os);
    ATTN_TRY(ev_grad_like(e, "grad.query", &q, &dq));
    ATTN_TRY(ev_grad_like(e, "grad.key", &k, &dk));
    ATTN_TRY(ev_grad_like(e, "grad.value", &v, &dv));
    ATTN_TRY(attn_mha_backward(e->ctx, m, &q, &k, &v, kpm.kind ? &kpm : NULL,
                               am.kind ? &am : NULL, &opt, NULL, &go, &dq, &dk, &dv));
    ATTN_TRY(ev_write_grad_as(e, "query", &dq, q0.ndim, q0.shape));
    ATTN_TRY(ev_write_grad_as(e, "key", &dk, k0.ndim, k0.shape));
    ATTN_TRY(ev_write_grad_as(e, "value", &dv, v0.ndim, v0.shape));
    return ev_write_param_grads(e);
}

/* ---- transformer layers and stacks ----------------------------------------------------- */

static const ev_attr A_ENC_LAYER[] = {{"is_causal", 'b', "false", NULL}, EV_END};
static const char *const I_ENC_LAYER[] = {"src", "src_mask", "src_key_padding_mask", NULL};

/* Output [B, L, E] like x (3-D). */
static attn_status ev_new_like(ev *e, const attn_tensor *x, attn_tensor *o) {
    return ev_new(e, "out", x->ndim, x->shape, o);
}

static attn_status op_transformer_encoder_layer(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    attn_tensor src, o;
    attn_mask mask, kpm;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_module(e, attn_encoder_layer_create(e->ctx, &cfg, &m), &m, ""));
    ATTN_TRY(ev_input(e, "src", 1, 3, 3, &src));
    ATTN_TRY(ev_mask(e, "src_mask", ATTN_MASK_BLOCK, 3, &mask));
    ATTN_TRY(ev_mask(e, "src_key_padding_mask", ATTN_MASK_BLOCK, 2, &kpm));
    ATTN_TRY(ev_hint_needs_mask(e, "is_causal", &mask, "src_mask"));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &src, &o));
    ATTN_TRY(attn_encoder_layer_forward(e->ctx, m, &src, mask.kind ? &mask : NULL,
                                        kpm.kind ? &kpm : NULL, ev_b(e, "is_causal"), NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, ds;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.src", &src, &ds));
    ATTN_TRY(attn_encoder_layer_backward(e->ctx, m, &src, mask.kind ? &mask : NULL,
                                         kpm.kind ? &kpm : NULL, ev_b(e, "is_causal"), NULL,
                                         &go, &ds));
    ATTN_TRY(ev_write_grad(e, "src", &ds));
    return ev_write_param_grads(e);
}

static const ev_attr A_DEC_LAYER[] = {{"tgt_is_causal", 'b', "false", NULL},
                                      {"memory_is_causal", 'b', "false", NULL}, EV_END};
static const char *const I_DEC[] = {"tgt", "memory", "tgt_mask", "memory_mask",
                                    "tgt_key_padding_mask", "memory_key_padding_mask", NULL};

/* The decoder inputs shared by the decoder layer and stack. */
typedef struct ev_dec_in {
    attn_tensor tgt, mem;
    attn_mask tm, mm, tkpm, mkpm;
} ev_dec_in;

static const attn_mask *opt_mask(const attn_mask *m) { return m->kind ? m : NULL; }

static attn_status ev_dec_inputs(ev *e, ev_dec_in *d) {
    ATTN_TRY(ev_input(e, "tgt", 1, 3, 3, &d->tgt));
    ATTN_TRY(ev_input(e, "memory", 1, 3, 3, &d->mem));
    ATTN_TRY(ev_mask(e, "tgt_mask", ATTN_MASK_BLOCK, 3, &d->tm));
    ATTN_TRY(ev_mask(e, "memory_mask", ATTN_MASK_BLOCK, 3, &d->mm));
    ATTN_TRY(ev_mask(e, "tgt_key_padding_mask", ATTN_MASK_BLOCK, 2, &d->tkpm));
    ATTN_TRY(ev_mask(e, "memory_key_padding_mask", ATTN_MASK_BLOCK, 2, &d->mkpm));
    ATTN_TRY(ev_hint_needs_mask(e, "tgt_is_causal", &d->tm, "tgt_mask"));
    ATTN_TRY(ev_hint_needs_mask(e, "memory_is_causal", &d->mm, "memory_mask"));
    /* the layer calls have no memory causal flag: apply it to our copy of memory_mask */
    if (ev_b(e, "memory_is_causal")) ev_make_causal(&d->mm, d->tgt.shape[1], d->mem.shape[1]);
    return ATTN_OK;
}

static attn_status op_transformer_decoder_layer(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    ev_dec_in d;
    attn_tensor o;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_dec_inputs(e, &d)); /* first: a mask hint without its mask is the news */
    ATTN_TRY(ev_module(e, attn_decoder_layer_create(e->ctx, &cfg, &m), &m, ""));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &d.tgt, &o));
    ATTN_TRY(attn_decoder_layer_forward(e->ctx, m, &d.tgt, &d.mem, opt_mask(&d.tm),
                                        opt_mask(&d.mm), opt_mask(&d.tkpm), opt_mask(&d.mkpm),
                                        ev_b(e, "tgt_is_causal"), NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dt, dm;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.tgt", &d.tgt, &dt));
    ATTN_TRY(ev_grad_like(e, "grad.memory", &d.mem, &dm));
    ATTN_TRY(attn_decoder_layer_backward(e->ctx, m, &d.tgt, &d.mem, opt_mask(&d.tm),
                                         opt_mask(&d.mm), opt_mask(&d.tkpm), opt_mask(&d.mkpm),
                                         ev_b(e, "tgt_is_causal"), NULL, &go, &dt, &dm));
    ATTN_TRY(ev_write_grad(e, "tgt", &dt));
    ATTN_TRY(ev_write_grad(e, "memory", &dm));
    return ev_write_param_grads(e);
}

static const ev_attr A_ENCODER[] = {{"num_layers", 'i', EV_REQ, NULL},
                                    {"is_causal", 'b', "false", NULL},
                                    {"enable_nested_tensor", 'b', "true", NULL}, EV_END};
static const char *const I_ENCODER[] = {"src", "mask", "src_key_padding_mask", NULL};

static attn_status ev_num_layers(ev *e, const char *name, int64_t *n) {
    *n = ev_i(e, name);
    ATTN_FAIL_IF(*n < 1 || *n > 100000, e->ctx, ATTN_E_INVALID,
                 "attribute '%s' must be in [1, 100000], got %lld", name, (long long)*n);
    return ATTN_OK;
}

static attn_status op_transformer_encoder(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    attn_tensor src, o;
    attn_mask mask, kpm;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_num_layers(e, "num_layers", &cfg.num_encoder_layers));
    /* TransformerEncoder's norm is optional: present iff its weight is in the file */
    int final_norm = ev_present(e, "norm.weight");
    ATTN_TRY(ev_module(e, attn_encoder_create(e->ctx, &cfg, final_norm, &m), &m, ""));
    ATTN_TRY(ev_input(e, "src", 1, 3, 3, &src));
    ATTN_TRY(ev_mask(e, "mask", ATTN_MASK_BLOCK, 3, &mask));
    ATTN_TRY(ev_mask(e, "src_key_padding_mask", ATTN_MASK_BLOCK, 2, &kpm));
    ATTN_TRY(ev_hint_needs_mask(e, "is_causal", &mask, "mask"));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &src, &o));
    ATTN_TRY(attn_encoder_forward(e->ctx, m, &src, opt_mask(&mask), opt_mask(&kpm),
                                  ev_b(e, "is_causal"), NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, ds;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.src", &src, &ds));
    ATTN_TRY(attn_encoder_backward(e->ctx, m, &src, opt_mask(&mask), opt_mask(&kpm),
                                   ev_b(e, "is_causal"), NULL, &go, &ds));
    ATTN_TRY(ev_write_grad(e, "src", &ds));
    return ev_write_param_grads(e);
}

static const ev_attr A_DECODER[] = {{"num_layers", 'i', EV_REQ, NULL},
                                    {"tgt_is_causal", 'b', "false", NULL},
                                    {"memory_is_causal", 'b', "false", NULL}, EV_END};

static attn_status op_transformer_decoder(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    ev_dec_in d;
    attn_tensor o;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_num_layers(e, "num_layers", &cfg.num_decoder_layers));
    int final_norm = ev_present(e, "norm.weight");
    ATTN_TRY(ev_dec_inputs(e, &d));
    ATTN_TRY(ev_module(e, attn_decoder_create(e->ctx, &cfg, final_norm, &m), &m, ""));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &d.tgt, &o));
    ATTN_TRY(attn_decoder_forward(e->ctx, m, &d.tgt, &d.mem, opt_mask(&d.tm), opt_mask(&d.mm),
                                  opt_mask(&d.tkpm), opt_mask(&d.mkpm),
                                  ev_b(e, "tgt_is_causal"), NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dt, dm;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.tgt", &d.tgt, &dt));
    ATTN_TRY(ev_grad_like(e, "grad.memory", &d.mem, &dm));
    ATTN_TRY(attn_decoder_backward(e->ctx, m, &d.tgt, &d.mem, opt_mask(&d.tm), opt_mask(&d.mm),
                                   opt_mask(&d.tkpm), opt_mask(&d.mkpm),
                                   ev_b(e, "tgt_is_causal"), NULL, &go, &dt, &dm));
    ATTN_TRY(ev_write_grad(e, "tgt", &dt));
    ATTN_TRY(ev_write_grad(e, "memory", &dm));
    return ev_write_param_grads(e);
}

/* nn.Transformer: d_model and nhead default as in PyTorch (512, 8). */
static const ev_attr A_TRANSFORMER[] = {
    {"d_model", 'i', "512", NULL},           {"nhead", 'i', "8", NULL},
    {"dim_feedforward", 'i', "2048", NULL},  {"dropout", 'f', "0.1", NULL},
    {"activation", 'e', "relu", ACTS},       {"layer_norm_eps", 'f', "1e-5", NULL},
    {"norm_first", 'b', "false", NULL},      {"bias", 'b', "true", NULL},
    {"batch_first", 'b', "true", NULL},      {"num_encoder_layers", 'i', "6", NULL},
    {"num_decoder_layers", 'i', "6", NULL},  {"src_is_causal", 'b', "false", NULL},
    {"tgt_is_causal", 'b', "false", NULL},   {"memory_is_causal", 'b', "false", NULL},
    EV_END};
static const char *const I_TRANSFORMER[] = {"src", "tgt", "src_mask", "tgt_mask", "memory_mask",
                                            "src_key_padding_mask", "tgt_key_padding_mask",
                                            "memory_key_padding_mask", NULL};

static attn_status op_transformer(ev *e) {
    attn_transformer_config cfg;
    attn_module *m = NULL;
    attn_tensor src, tgt, o;
    attn_mask sm, tm, mm, skpm, tkpm, mkpm;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_num_layers(e, "num_encoder_layers", &cfg.num_encoder_layers));
    ATTN_TRY(ev_num_layers(e, "num_decoder_layers", &cfg.num_decoder_layers));
    ATTN_TRY(ev_module(e, attn_transformer_create(e->ctx, &cfg, &m), &m, ""));
    ATTN_TRY(ev_input(e, "src", 1, 3, 3, &src));
    ATTN_TRY(ev_input(e, "tgt", 1, 3, 3, &tgt));
    ATTN_TRY(ev_mask(e, "src_mask", ATTN_MASK_BLOCK, 3, &sm));
    ATTN_TRY(ev_mask(e, "tgt_mask", ATTN_MASK_BLOCK, 3, &tm));
    ATTN_TRY(ev_mask(e, "memory_mask", ATTN_MASK_BLOCK, 3, &mm));
    ATTN_TRY(ev_mask(e, "src_key_padding_mask", ATTN_MASK_BLOCK, 2, &skpm));
    ATTN_TRY(ev_mask(e, "tgt_key_padding_mask", ATTN_MASK_BLOCK, 2, &tkpm));
    ATTN_TRY(ev_mask(e, "memory_key_padding_mask", ATTN_MASK_BLOCK, 2, &mkpm));
    ATTN_TRY(ev_hint_needs_mask(e, "src_is_causal", &sm, "src_mask"));
    ATTN_TRY(ev_hint_needs_mask(e, "tgt_is_causal", &tm, "tgt_mask"));
    ATTN_TRY(ev_hint_needs_mask(e, "memory_is_causal", &mm, "memory_mask"));
    /* attn_transformer_forward has only tgt_is_causal: apply the other hints to our copies */
    if (ev_b(e, "src_is_causal")) ev_make_causal(&sm, src.shape[1], src.shape[1]);
    if (ev_b(e, "memory_is_causal")) ev_make_causal(&mm, tgt.shape[1], src.shape[1]);
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &tgt, &o));
    ATTN_TRY(attn_transformer_forward(e->ctx, m, &src, &tgt, opt_mask(&sm), opt_mask(&tm),
                                      opt_mask(&mm), opt_mask(&skpm), opt_mask(&tkpm),
                                      opt_mask(&mkpm), ev_b(e, "tgt_is_causal"), NULL, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, ds, dt;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.src", &src, &ds));
    ATTN_TRY(ev_grad_like(e, "grad.tgt", &tgt, &dt));
    ATTN_TRY(attn_transformer_backward(e->ctx, m, &src, &tgt, opt_mask(&sm), opt_mask(&tm),
                                       opt_mask(&mm), opt_mask(&skpm), opt_mask(&tkpm),
                                       opt_mask(&mkpm), ev_b(e, "tgt_is_causal"), NULL, &go,
                                       &ds, &dt));
    ATTN_TRY(ev_write_grad(e, "src", &ds));
    ATTN_TRY(ev_write_grad(e, "tgt", &dt));
    return ev_write_param_grads(e);
}

/* ---- seed attention modules ------------------------------------------------------------ */

static const ev_attr A_SIMPLE[] = {{"normalize", 'e', "softmax", "softmax|sum"}, EV_END};
static const char *const I_SIMPLE[] = {"inputs", NULL};

static attn_status op_simple_self_attention(ev *e) {
    attn_tensor x, s, w, o;
    ATTN_TRY(ev_input(e, "inputs", 1, 2, 3, &x));
    ATTN_TRY(ev_ready(e));
    int b3 = x.ndim == 3;
    int64_t B = b3 ? x.shape[0] : 1, T = x.shape[b3], E = x.shape[b3 + 1];
    int64_t ws[3] = {B, T, T}, os[3] = {B, T, E};
    ATTN_TRY(ev_new(e, "attn_scores", x.ndim, ws + !b3, &s));
    ATTN_TRY(ev_new(e, "attn_weights", x.ndim, ws + !b3, &w));
    ATTN_TRY(ev_new(e, "out", x.ndim, os + !b3, &o));
    attn_normalize norm = ev_e(e, "normalize") ? ATTN_NORM_SUM : ATTN_NORM_SOFTMAX;
    ATTN_TRY(attn_simple_self_attention(e->ctx, &x, norm, &s, &w, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    ATTN_TRY(ev_write(e, "attn_scores", &s));
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    /* the cotangent is that of "out" (the context vectors) only */
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.inputs", &x, &dx));
    ATTN_TRY(attn_simple_self_attention_backward(e->ctx, &x, norm, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "inputs", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_SEED_V1[] = {{"d_in", 'i', EV_REQ, NULL}, {"d_out", 'i', EV_REQ, NULL},
                                    EV_END};
static const ev_attr A_SEED_V2[] = {{"d_in", 'i', EV_REQ, NULL}, {"d_out", 'i', EV_REQ, NULL},
                                    {"qkv_bias", 'b', "false", NULL}, EV_END};
static const ev_attr A_SEED_CAUSAL[] = {
    {"d_in", 'i', EV_REQ, NULL},           {"d_out", 'i', EV_REQ, NULL},
    {"context_length", 'i', EV_REQ, NULL}, {"dropout", 'f', "0", NULL},
    {"qkv_bias", 'b', "false", NULL},      EV_END};
static const ev_attr A_SEED_MHA[] = {
    {"d_in", 'i', EV_REQ, NULL},           {"d_out", 'i', EV_REQ, NULL},
    {"context_length", 'i', EV_REQ, NULL}, {"dropout", 'f', "0", NULL},
    {"num_heads", 'i', EV_REQ, NULL},      {"qkv_bias", 'b', "false", NULL},
    EV_END};
static const char *const I_SEED[] = {"x", NULL};
static const char *const I_SEED_MASKED[] = {"x", "mask", NULL};

/* The seed modules' registered buffer: triu(ones(C, C), diagonal=1).  It is derived from
 * context_length, so anything else in the file would be a different model: refuse it. */
static attn_status ev_seed_mask(ev *e, int64_t C) {
    attn_st_tensor info;
    if (ev_find(e, "mask", &info) < 0) return ATTN_OK;
    ATTN_TRY(ev_dims(e, &info, "mask", 2, 2));
    char sb[96];
    ATTN_FAIL_IF(info.shape[0] != C || info.shape[1] != C, e->ctx, ATTN_E_SHAPE,
                 "tensor 'mask' has shape %s, expected [%lld, %lld] (context_length)",
                 attn__dims_str(info.shape, info.ndim, sb, sizeof sb), (long long)C, (long long)C);
    const unsigned char *bytes = NULL;
    float *f = NULL;
    if (info.dtype == ATTN_BOOL || info.dtype == ATTN_U8)
        bytes = info.data;
    else
        ATTN_TRY(ev_to_f32(e, &info, "mask", &f));
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < C; j++) {
            /* the seed reads it as mask.bool(): nonzero = masked */
            double got = bytes ? bytes[i * C + j] : f[i * C + j];
            ATTN_FAIL_IF((got != 0.0) != (j > i), e->ctx, ATTN_E_INVALID,
                         "tensor 'mask' is not the causal buffer triu(ones(%lld, %lld), 1): "
                         "element [%lld, %lld] is %g", (long long)C, (long long)C, (long long)i,
                         (long long)j, got);
        }
    return ATTN_OK;
}

static attn_status ev_seed(ev *e, attn_seed_attention_kind kind) {
    attn_seed_attention_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = kind;
    cfg.d_in = ev_i(e, "d_in");
    cfg.d_out = ev_i(e, "d_out");
    cfg.qkv_bias = ev_b(e, "qkv_bias");
    cfg.dropout = (float)ev_f(e, "dropout");
    cfg.num_heads = kind == ATTN_SEED_MULTIHEAD ? ev_i(e, "num_heads") : 1;
    if (kind == ATTN_SEED_MULTIHEAD)
        ATTN_TRY(ev_heads_divide(e, "d_out", cfg.d_out, "num_heads", cfg.num_heads));
    attn_module *m = NULL;
    ATTN_TRY(ev_module(e, attn_seed_attention_create(e->ctx, &cfg, &m), &m, ""));
    int masked = kind == ATTN_SEED_CAUSAL || kind == ATTN_SEED_MULTIHEAD;
    attn_tensor x, o, w;
    /* the seed's CausalAttention and MultiHeadAttention unpack b, num_tokens, d_in = x.shape */
    ATTN_TRY(ev_input(e, "x", 1, masked ? 3 : 2, 3, &x));
    int64_t C = masked ? ev_i(e, "context_length") : 0;
    if (masked) {
        ATTN_FAIL_IF(C <= 0, e->ctx, ATTN_E_INVALID,
                     "attribute 'context_length' must be positive, got %lld", (long long)C);
        ATTN_TRY(ev_seed_mask(e, C));
    }
    ATTN_TRY(ev_ready(e));
    int b3 = x.ndim == 3;
    int64_t B = b3 ? x.shape[0] : 1, T = x.shape[b3];
    ATTN_FAIL_IF(masked && T > C, e->ctx, ATTN_E_SHAPE,
                 "x has %lld tokens, more than context_length (%lld)", (long long)T,
                 (long long)C);
    if (!b3) {
        int64_t xs[3] = {1, x.shape[0], x.shape[1]};
        x = ev_reshape(&x, 3, xs);
    }
    int64_t heads = kind == ATTN_SEED_MULTIHEAD ? cfg.num_heads : 1;
    int64_t os[3] = {B, T, cfg.d_out}, ws[4] = {B, heads, T, T};
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    ATTN_TRY(ev_new(e, "attn_weights", 4, ws, &w));
    ATTN_TRY(attn_seed_attention_forward(e->ctx, m, &x, NULL, &o, &w));
    if (b3)
        ATTN_TRY(ev_write(e, "out", &o));
    else
        ATTN_TRY(ev_write_as(e, "out", &o, 2, os + 1));
    /* attn_weights is always [B, heads, T, T] (B = 1 for a 2-D x): docs/eval-format.md */
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out(e, b3 ? 3 : 2, b3 ? os : os + 1, &go));
    go = ev_reshape(&go, 3, os);
    ATTN_TRY(ev_grad_like(e, "grad.x", &x, &dx));
    ATTN_TRY(attn_seed_attention_backward(e->ctx, m, &x, NULL, &go, &dx));
    if (b3)
        ATTN_TRY(ev_write_grad(e, "x", &dx));
    else
        ATTN_TRY(ev_write_grad_as(e, "x", &dx, 2, x.shape + 1));
    return ev_write_param_grads(e);
}

static attn_status op_self_attention_v1(ev *e) { return ev_seed(e, ATTN_SEED_SELF_V1); }
static attn_status op_self_attention_v2(ev *e) { return ev_seed(e, ATTN_SEED_SELF_V2); }
static attn_status op_causal_attention(ev *e) { return ev_seed(e, ATTN_SEED_CAUSAL); }
static attn_status op_seed_multihead_attention(ev *e) { return ev_seed(e, ATTN_SEED_MULTIHEAD); }

/* ---- general and additive attention ----------------------------------------------------- */

static const ev_attr A_GENERAL[] = {
    {"query_dim", 'i', EV_REQ, NULL}, {"input_dim", 'i', EV_REQ, NULL},
    {"value_dim", 'i', EV_REQ, NULL}, {"bias", 'b', "false", NULL},
    {"self_attention", 'b', "false", NULL}, EV_END};
static const char *const I_GENERAL[] = {"query", "inputs", "attn_mask", NULL};

static attn_status op_general_attention(ev *e) {
    attn_general_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.query_dim = ev_i(e, "query_dim");
    cfg.input_dim = ev_i(e, "input_dim");
    cfg.value_dim = ev_i(e, "value_dim");
    cfg.bias = ev_b(e, "bias");
    cfg.self_attention = ev_b(e, "self_attention");
    attn_module *m = NULL;
    ATTN_TRY(ev_module(e, attn_general_attention_create(e->ctx, &cfg, &m), &m, ""));
    attn_tensor q, x, o, w;
    attn_mask mask;
    ATTN_FAIL_IF(cfg.self_attention && ev_present(e, "query"), e->ctx, ATTN_E_INVALID,
                 "tensor 'query' is not used when self_attention = true (the queries are "
                 "projected from 'inputs')");
    if (!cfg.self_attention) ATTN_TRY(ev_input(e, "query", 1, 3, 3, &q));
    ATTN_TRY(ev_input(e, "inputs", 1, 3, 3, &x));
    ATTN_TRY(ev_mask(e, "attn_mask", ATTN_MASK_KEEP, 3, &mask));
    ATTN_TRY(ev_ready(e));
    int64_t B = x.shape[0], S = x.shape[1], L = cfg.self_attention ? S : q.shape[1];
    int64_t os[3] = {B, L, cfg.value_dim}, ws[3] = {B, L, S};
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    ATTN_TRY(ev_new(e, "attn_weights", 3, ws, &w));
    ATTN_TRY(attn_general_attention_forward(e->ctx, m, cfg.self_attention ? NULL : &q, &x,
                                            opt_mask(&mask), &o, &w));
    ATTN_TRY(ev_write(e, "out", &o));
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dq, dx;
    memset(&dq, 0, sizeof dq);
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    if (!cfg.self_attention) ATTN_TRY(ev_grad_like(e, "grad.query", &q, &dq));
    ATTN_TRY(ev_grad_like(e, "grad.inputs", &x, &dx));
    ATTN_TRY(attn_general_attention_backward(e->ctx, m, cfg.self_attention ? NULL : &q, &x,
                                             opt_mask(&mask), &go, dq.data ? &dq : NULL, &dx));
    if (dq.data) ATTN_TRY(ev_write_grad(e, "query", &dq));
    ATTN_TRY(ev_write_grad(e, "inputs", &dx));
    return ev_write_param_grads(e);
}

static const ev_attr A_ADDITIVE[] = {{"query_size", 'i', EV_REQ, NULL},
                                     {"key_size", 'i', EV_REQ, NULL},
                                     {"num_hiddens", 'i', EV_REQ, NULL},
                                     {"dropout", 'f', "0", NULL}, EV_END};
static const char *const I_ADDITIVE[] = {"queries", "keys", "values", "attn_mask", NULL};

static attn_status op_additive_attention(ev *e) {
    attn_module *m = NULL;
    ATTN_TRY(ev_module(e, attn_additive_attention_create(e->ctx, ev_i(e, "query_size"),
                                                         ev_i(e, "key_size"),
                                                         ev_i(e, "num_hiddens"), &m),
                       &m, ""));
    attn_tensor q, k, v, o, w;
    attn_mask mask;
    ATTN_TRY(ev_input(e, "queries", 1, 3, 3, &q));
    ATTN_TRY(ev_input(e, "keys", 1, 3, 3, &k));
    ATTN_TRY(ev_input(e, "values", 1, 3, 3, &v));
    ATTN_TRY(ev_mask(e, "attn_mask", ATTN_MASK_KEEP, 3, &mask));
    ATTN_TRY(ev_ready(e));
    int64_t os[3] = {q.shape[0], q.shape[1], v.shape[2]}, ws[3] = {q.shape[0], q.shape[1],
                                                                    k.shape[1]};
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    ATTN_TRY(ev_new(e, "attn_weights", 3, ws, &w));
    ATTN_TRY(attn_additive_attention_forward(e->ctx, m, &q, &k, &v, opt_mask(&mask), &o, &w));
    ATTN_TRY(ev_write(e, "out", &o));
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dq, dk, dv;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.queries", &q, &dq));
    ATTN_TRY(ev_grad_like(e, "grad.keys", &k, &dk));
    ATTN_TRY(ev_grad_like(e, "grad.values", &v, &dv));
    ATTN_TRY(attn_additive_attention_backward(e->ctx, m, &q, &k, &v, opt_mask(&mask), &go, &dq,
                                              &dk, &dv));
    ATTN_TRY(ev_write_grad(e, "queries", &dq));
    ATTN_TRY(ev_write_grad(e, "keys", &dk));
    ATTN_TRY(ev_write_grad(e, "values", &dv));
    return ev_write_param_grads(e);
}

/* ---- positional encodings ---------------------------------------------------------------- */

static const ev_attr A_PE[] = {
    {"d_model", 'i', EV_REQ, NULL},     {"max_len", 'i', "5000", NULL},
    {"mode", 'e', "add", "add|concat"}, {"length", 'i', EV_OPT, NULL},
    {"base", 'f', "10000", NULL},       EV_END};
static const char *const I_PE[] = {"x", NULL};

static attn_status op_positional_encoding(ev *e) {
    int64_t d = ev_i(e, "d_model"), max_len = ev_i(e, "max_len");
    attn_tensor x, pe, o;
    ATTN_FAIL_IF(d <= 0, e->ctx, ATTN_E_INVALID, "attribute 'd_model' must be positive, got %lld",
                 (long long)d);
    ATTN_FAIL_IF(max_len <= 0, e->ctx, ATTN_E_INVALID,
                 "attribute 'max_len' must be positive, got %lld", (long long)max_len);
    ATTN_TRY(ev_input(e, "x", 0, 3, 3, &x));
    ATTN_TRY(ev_ready(e));
    double base = ev_f(e, "base");
    ATTN_FAIL_IF(!(base > 1.0) || base > 3.4e38, e->ctx, ATTN_E_INVALID,
                 "attribute 'base' must be > 1, got %g", base);
    if (!x.data) {
        ATTN_FAIL_IF(!ev_has(e, "length"), e->ctx, ATTN_E_INVALID,
                     "without an input 'x' the attribute 'length' is required");
        int64_t n = ev_i(e, "length");
        ATTN_FAIL_IF(n <= 0 || n > max_len, e->ctx, ATTN_E_INVALID,
                     "attribute 'length' (%lld) must be in [1, max_len = %lld]", (long long)n,
                     (long long)max_len);
        int64_t ps[2] = {n, d};
        ATTN_TRY(ev_claim(e, "length x d_model", 2, ps));
        ATTN_TRY(ev_new(e, "out", 2, ps, &pe));
        ATTN_TRY(attn_sinusoidal_encoding(e->ctx, 0, (float)base, &pe));
        ATTN_TRY(ev_write(e, "out", &pe));
        if (e->bwd) {
            /* the table depends on no tensor: grad.out is checked, no gradient results */
            attn_tensor go;
            ATTN_TRY(ev_grad_out_like(e, &pe, &go));
            e->bwd_done = 1;
        }
        return ATTN_OK;
    }
    ATTN_FAIL_IF(ev_has(e, "length"), e->ctx, ATTN_E_INVALID,
                 "attribute 'length' is only used without an input 'x' (the length is x's)");
    int64_t B = x.shape[0], L = x.shape[1], E = x.shape[2];
    int concat = ev_e(e, "mode") == 1;
    ATTN_FAIL_IF(!concat && d != E, e->ctx, ATTN_E_SHAPE,
                 "attribute 'd_model' (%lld) must equal the last dimension of x (%lld) in mode "
                 "add", (long long)d, (long long)E);
    ATTN_FAIL_IF(L > max_len, e->ctx, ATTN_E_SHAPE,
                 "x has %lld positions, more than max_len (%lld)", (long long)L,
                 (long long)max_len);
    int64_t ps[2] = {L, d}, os[3] = {B, L, concat ? E + d : E};
    if (concat) ATTN_TRY(ev_claim(e, "the concatenated output (d_model columns)", 3, os));
    ATTN_TRY(ev_new(e, "pe", 2, ps, &pe));
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    ATTN_TRY(attn_sinusoidal_encoding(e->ctx, 0, (float)base, &pe));
    attn_pe_mode mode = concat ? ATTN_PE_CONCAT : ATTN_PE_ADD;
    ATTN_TRY(attn_positional_apply(e->ctx, mode, &x, &pe, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.x", &x, &dx));
    ATTN_TRY(attn_positional_apply_backward(e->ctx, mode, &go, &dx, NULL));
    ATTN_TRY(ev_write_grad(e, "x", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_NONE[] = {EV_END};
static const char *const I_LEARNED_PE[] = {"x", "weight", NULL};

static attn_status op_learned_positional_encoding(ev *e) {
    attn_tensor x, wt, o;
    char s1[96], s2[96];
    ATTN_TRY(ev_input(e, "x", 1, 3, 3, &x));
    ATTN_TRY(ev_input(e, "weight", 1, 2, 2, &wt));
    ATTN_TRY(ev_ready(e));
    int64_t L = x.shape[1], E = x.shape[2];
    ATTN_FAIL_IF(wt.shape[1] != E, e->ctx, ATTN_E_SHAPE,
                 "weight %s does not match x %s: the widths differ",
                 attn__shape_str(&wt, s1, sizeof s1), attn__shape_str(&x, s2, sizeof s2));
    ATTN_FAIL_IF(L > wt.shape[0], e->ctx, ATTN_E_SHAPE,
                 "x has %lld positions but weight %s has only %lld rows", (long long)L,
                 attn__shape_str(&wt, s1, sizeof s1), (long long)wt.shape[0]);
    int64_t ps[2] = {L, E};
    attn_tensor rows = ev_reshape(&wt, 2, ps); /* the first L rows */
    ATTN_TRY(ev_new_like(e, &x, &o));
    ATTN_TRY(attn_positional_apply(e->ctx, ATTN_PE_ADD, &x, &rows, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    if (!e->bwd) return ATTN_OK;
    /* grad.weight: the batch sum in the first L rows, zero below */
    attn_tensor go, dx, dw;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.x", &x, &dx));
    ATTN_TRY(ev_grad_like(e, "grad.weight", &wt, &dw));
    ATTN_TRY(attn_positional_apply_backward(e->ctx, ATTN_PE_ADD, &go, &dx, &dw));
    ATTN_TRY(ev_write_grad(e, "x", &dx));
    ATTN_TRY(ev_write_grad(e, "weight", &dw));
    e->bwd_done = 1;
    return ATTN_OK;
}

/* ---- stateless ops ----------------------------------------------------------------------- */

static const ev_attr A_LINEAR[] = {{"in_features", 'i', EV_OPT, NULL},
                                   {"out_features", 'i', EV_OPT, NULL}, EV_END};
static const char *const I_WB[] = {"input", "weight", "bias", NULL};

static attn_status op_linear(ev *e) {
    attn_tensor x, W, b, y;
    ATTN_TRY(ev_input(e, "input", 1, 1, 4, &x));
    ATTN_TRY(ev_input(e, "weight", 1, 2, 2, &W));
    ATTN_TRY(ev_input(e, "bias", 0, 1, 1, &b));
    ATTN_TRY(ev_ready(e));
    ATTN_FAIL_IF(ev_has(e, "in_features") && ev_i(e, "in_features") != W.shape[1], e->ctx,
                 ATTN_E_SHAPE, "attribute 'in_features' (%lld) does not match weight [%lld, %lld]",
                 (long long)ev_i(e, "in_features"), (long long)W.shape[0],
                 (long long)W.shape[1]);
    ATTN_FAIL_IF(ev_has(e, "out_features") && ev_i(e, "out_features") != W.shape[0], e->ctx,
                 ATTN_E_SHAPE,
                 "attribute 'out_features' (%lld) does not match weight [%lld, %lld]",
                 (long long)ev_i(e, "out_features"), (long long)W.shape[0],
                 (long long)W.shape[1]);
    int64_t ys[4];
    for (int d = 0; d < x.ndim; d++) ys[d] = x.shape[d];
    ys[x.ndim - 1] = W.shape[0];
    ATTN_TRY(ev_new(e, "out", x.ndim, ys, &y));
    ATTN_TRY(attn_linear(e->ctx, &x, &W, b.data ? &b : NULL, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx, dW, db;
    memset(&db, 0, sizeof db);
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    ATTN_TRY(ev_grad_like(e, "grad.weight", &W, &dW));
    if (b.data) ATTN_TRY(ev_grad_like(e, "grad.bias", &b, &db));
    ATTN_TRY(attn_linear_backward(e->ctx, &x, &W, &go, &dx, &dW, db.data ? &db : NULL));
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    ATTN_TRY(ev_write_grad(e, "weight", &dW));
    if (db.data) ATTN_TRY(ev_write_grad(e, "bias", &db));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_LAYER_NORM[] = {{"eps", 'f', "1e-5", NULL},
                                       {"normalized_shape", 'i', EV_OPT, NULL},
                                       {"elementwise_affine", 'b', "true", NULL}, EV_END};

static attn_status op_layer_norm(ev *e) {
    attn_tensor x, w, b, y;
    ATTN_TRY(ev_input(e, "input", 1, 1, 4, &x));
    ATTN_TRY(ev_input(e, "weight", 0, 1, 1, &w));
    ATTN_TRY(ev_input(e, "bias", 0, 1, 1, &b));
    ATTN_FAIL_IF(!ev_b(e, "elementwise_affine") && (w.data || b.data), e->ctx, ATTN_E_INVALID,
                 "tensor '%s' is given but elementwise_affine = false", w.data ? "weight" : "bias");
    ATTN_TRY(ev_ready(e));
    int64_t E = x.shape[x.ndim - 1];
    ATTN_FAIL_IF(ev_has(e, "normalized_shape") && ev_i(e, "normalized_shape") != E, e->ctx,
                 ATTN_E_SHAPE, "attribute 'normalized_shape' (%lld) must equal the last "
                 "dimension of the input (%lld)", (long long)ev_i(e, "normalized_shape"),
                 (long long)E);
    double eps = ev_f(e, "eps");
    ATTN_FAIL_IF(!(eps > 0.0) || eps > 3.4e38, e->ctx, ATTN_E_INVALID,
                 "attribute 'eps' must be positive, got %g", eps);
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_layer_norm(e->ctx, &x, w.data ? &w : NULL, b.data ? &b : NULL, (float)eps,
                             &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx, dw, db;
    memset(&dw, 0, sizeof dw);
    memset(&db, 0, sizeof db);
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    if (w.data) ATTN_TRY(ev_grad_like(e, "grad.weight", &w, &dw));
    if (b.data) ATTN_TRY(ev_grad_like(e, "grad.bias", &b, &db));
    ATTN_TRY(attn_layer_norm_backward(e->ctx, &x, w.data ? &w : NULL, (float)eps, &go, &dx,
                                      dw.data ? &dw : NULL, db.data ? &db : NULL));
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    if (dw.data) ATTN_TRY(ev_write_grad(e, "weight", &dw));
    if (db.data) ATTN_TRY(ev_write_grad(e, "bias", &db));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const char *const I_INPUT[] = {"input", NULL};

static attn_status ev_act(ev *e, attn_activation act) {
    attn_tensor x, y;
    ATTN_TRY(ev_input(e, "input", 1, 1, 4, &x));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_activate(e->ctx, act, &x, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    ATTN_TRY(attn_activate_backward(e->ctx, act, &x, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_GELU[] = {{"approximate", 'e', "none", "none|tanh"}, EV_END};

static attn_status op_relu(ev *e) { return ev_act(e, ATTN_ACT_RELU); }
static attn_status op_tanh(ev *e) { return ev_act(e, ATTN_ACT_TANH); }
static attn_status op_gelu(ev *e) {
    return ev_act(e, ev_e(e, "approximate") ? ATTN_ACT_GELU_TANH : ATTN_ACT_GELU);
}

static const ev_attr A_SOFTMAX[] = {{"dim", 'i', "-1", NULL}, EV_END};

static attn_status op_softmax(ev *e) {
    attn_tensor x, y;
    ATTN_TRY(ev_input(e, "input", 1, 1, 4, &x));
    ATTN_TRY(ev_ready(e));
    int64_t dim = ev_i(e, "dim");
    ATTN_FAIL_IF(dim != -1 && dim != x.ndim - 1, e->ctx, ATTN_E_UNSUPPORTED,
                 "attribute 'dim' = %lld: only the last dimension (-1 or %d) is supported",
                 (long long)dim, x.ndim - 1);
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_softmax(e->ctx, &x, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    ATTN_TRY(attn_softmax_backward(e->ctx, &y, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const char *const I_EMBEDDING[] = {"input", "weight", NULL};

static attn_status op_embedding(ev *e) {
    attn_tensor ids, W, y;
    ATTN_TRY(ev_ids(e, "input", 1, 3, &ids));
    ATTN_TRY(ev_input(e, "weight", 1, 2, 2, &W));
    ATTN_TRY(ev_ready(e));
    int64_t ys[4];
    for (int d = 0; d < ids.ndim; d++) ys[d] = ids.shape[d];
    ys[ids.ndim] = W.shape[1];
    ATTN_TRY(ev_new(e, "out", ids.ndim + 1, ys, &y));
    ATTN_TRY(attn_embedding(e->ctx, &ids, &W, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    /* ids have no gradient */
    attn_tensor go, dW;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.weight", &W, &dW));
    ATTN_TRY(attn_embedding_backward(e->ctx, &ids, &go, &dW));
    ATTN_TRY(ev_write_grad(e, "weight", &dW));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_CROSS_ENTROPY[] = {{"ignore_index", 'i', "-100", NULL},
                                          {"label_smoothing", 'f', "0.0", NULL},
                                          {"reduction", 'e', "mean", "mean|sum|none"}, EV_END};
static const char *const I_CROSS_ENTROPY[] = {"input", "target", NULL};

/* F.cross_entropy(input [N, C], target [N], ignore_index, label_smoothing) with reduction
 * "mean": out is the 0-d loss, as PyTorch's. */
static attn_status op_cross_entropy(ev *e) {
    attn_tensor x, t, dx;
    char s1[96], s2[96];
    ATTN_TRY(ev_input(e, "input", 1, 2, 2, &x));
    ATTN_TRY(ev_ids(e, "target", 1, 1, &t));
    ATTN_TRY(ev_ready(e));
    ATTN_FAIL_IF(ev_e(e, "reduction") != 0, e->ctx, ATTN_E_UNSUPPORTED,
                 "attribute 'reduction' = \"%s\": only \"mean\" is supported",
                 ev_e(e, "reduction") == 1 ? "sum" : "none");
    ATTN_FAIL_IF(t.shape[0] != x.shape[0], e->ctx, ATTN_E_SHAPE,
                 "target %s does not match input %s: one target per row is needed",
                 attn__shape_str(&t, s1, sizeof s1), attn__shape_str(&x, s2, sizeof s2));
    double ls = ev_f(e, "label_smoothing");
    ATTN_FAIL_IF(!(ls >= 0.0 && ls < 1.0), e->ctx, ATTN_E_INVALID,
                 "attribute 'label_smoothing' must be in [0, 1), got %g", ls);
    attn_tensor go;
    memset(&dx, 0, sizeof dx);
    if (e->bwd) {
        ATTN_TRY(ev_grad_out(e, 0, NULL, &go)); /* the loss is 0-d, so is its cotangent */
        ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    }
    float loss = 0.0f;
    ATTN_TRY(attn_cross_entropy(e->ctx, &x, &t, ev_i(e, "ignore_index"), (float)ls, &loss,
                                dx.data ? &dx : NULL));
    ATTN_TRY(attn_st_writer_add(e->out, "out", ATTN_F32, 0, NULL, &loss));
    if (!e->bwd) return ATTN_OK;
    /* dx holds the gradient of the mean: scale it by the cotangent of the loss */
    float g = *(const float *)go.data, *d = dx.data;
    ATTN_FAIL_IF(!isfinite(g), e->ctx, ATTN_E_NONFINITE, "tensor 'grad.out' is %g", (double)g);
    for (int64_t i = 0, n = attn_tensor_numel(&dx); i < n; i++) d[i] *= g;
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

/* ---- feed-forward, ViT, GPT ------------------------------------------------------------- */

static const ev_attr A_FFN[] = {{"d_model", 'i', EV_REQ, NULL}, {"d_ff", 'i', EV_REQ, NULL},
                                {"activation", 'e', "relu", ACTS},
                                {"dropout", 'f', "0.1", NULL}, EV_END};
static const char *const I_X[] = {"x", NULL};

static attn_status op_feed_forward(ev *e) {
    int64_t d = ev_i(e, "d_model");
    ATTN_FAIL_IF(d <= 0, e->ctx, ATTN_E_INVALID, "attribute 'd_model' must be positive, got %lld",
                 (long long)d);
    attn_transformer_config cfg = attn_transformer_defaults(d, 1);
    cfg.dim_feedforward = ev_i(e, "d_ff");
    cfg.activation = ev_acts[ev_e(e, "activation")];
    cfg.dropout = (float)ev_f(e, "dropout");
    attn_module *m = NULL;
    attn_tensor x, y;
    ATTN_TRY(ev_module(e, attn_ffn_create(e->ctx, &cfg, &m), &m, ""));
    ATTN_TRY(ev_input(e, "x", 1, 1, 4, &x));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_ffn_forward(e->ctx, m, &x, NULL, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.x", &x, &dx));
    ATTN_TRY(attn_ffn_backward(e->ctx, m, &x, NULL, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "x", &dx));
    return ev_write_param_grads(e);
}

static const ev_attr A_VIT[] = {{"patch_dim", 'i', EV_REQ, NULL},
                                {"embed_dim", 'i', EV_REQ, NULL},
                                {"num_heads", 'i', EV_REQ, NULL},
                                {"max_patches", 'i', EV_REQ, NULL}, EV_END};
static const char *const I_VIT[] = {"patches", NULL};

static attn_status op_vit_self_attention(ev *e) {
    int64_t P = ev_i(e, "patch_dim"), E = ev_i(e, "embed_dim"), H = ev_i(e, "num_heads");
    ATTN_TRY(ev_heads_divide(e, "embed_dim", E, "num_heads", H));
    attn_module *emb = NULL, *mha = NULL;
    ATTN_TRY(ev_module(e, attn_vit_embed_create(e->ctx, P, E, ev_i(e, "max_patches"), &emb), &emb,
                       ""));
    attn_mha_config mc = attn_mha_defaults(E, H);
    attn__param_source(e->ctx, e->in, "attn."); /* the second module's parameters */
    attn_status st = attn_mha_create(e->ctx, &mc, &mha);
    attn__param_source(e->ctx, e->in, "");
    ATTN_TRY(ev_module(e, st, &mha, "attn."));
    attn_tensor x, z, o, w;
    ATTN_TRY(ev_input(e, "patches", 1, 3, 3, &x));
    ATTN_TRY(ev_ready(e));
    int64_t B = x.shape[0], N1 = x.shape[1] + 1;
    int64_t zs[3] = {B, N1, E}, ws[3] = {B, N1, N1};
    ATTN_TRY(ev_new(e, "z", 3, zs, &z));
    ATTN_TRY(ev_new(e, "out", 3, zs, &o));
    ATTN_TRY(ev_new(e, "attn_weights", 3, ws, &w));
    ATTN_TRY(attn_vit_embed_forward(e->ctx, emb, &x, &z));
    attn_mha_options opt = {1, 1, 0}; /* need_weights, averaged, not causal */
    ATTN_TRY(attn_mha_forward(e->ctx, mha, &z, &z, &z, NULL, NULL, &opt, NULL, &o, &w));
    ATTN_TRY(ev_write(e, "out", &o));
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    /* z is the query, key and value: its gradient is the sum of the three */
    attn_tensor go, dq, dk, dv, dx;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "dz (query)", &z, &dq));
    ATTN_TRY(ev_grad_like(e, "dz (key)", &z, &dk));
    ATTN_TRY(ev_grad_like(e, "dz (value)", &z, &dv));
    ATTN_TRY(ev_grad_like(e, "grad.patches", &x, &dx));
    ATTN_TRY(attn_mha_backward(e->ctx, mha, &z, &z, &z, NULL, NULL, &opt, NULL, &go, &dq, &dk,
                               &dv));
    float *a = dq.data;
    const float *bk = dk.data, *bv = dv.data;
    for (int64_t i = 0, n = attn_tensor_numel(&dq); i < n; i++) a[i] = a[i] + bk[i] + bv[i];
    ATTN_TRY(attn_vit_embed_backward(e->ctx, emb, &x, &dq, &dx));
    ATTN_TRY(ev_write_grad(e, "patches", &dx));
    return ev_write_param_grads(e);
}

static const ev_attr A_GPT[] = {
    {"vocab_size", 'i', EV_REQ, NULL},      {"block_size", 'i', EV_REQ, NULL},
    {"num_layers", 'i', EV_REQ, NULL},      {"d_model", 'i', EV_REQ, NULL},
    {"nhead", 'i', EV_REQ, NULL},           {"dim_feedforward", 'i', "2048", NULL},
    {"activation", 'e', "relu", ACTS},      {"layer_norm_eps", 'f', "1e-5", NULL},
    {"norm_first", 'b', "true", NULL},      {"bias", 'b', "true", NULL},
    {"dropout", 'f', "0.1", NULL},          {"batch_first", 'b', "true", NULL},
    EV_END};
static const char *const I_GPT[] = {"idx", NULL};

static attn_status op_gpt(ev *e) {
    attn_transformer_config cfg;
    ATTN_TRY(ev_tf_config(e, &cfg));
    ATTN_TRY(ev_num_layers(e, "num_layers", &cfg.num_encoder_layers));
    int64_t V = ev_i(e, "vocab_size");
    attn_module *m = NULL;
    attn_tensor ids, y;
    ATTN_TRY(ev_module(e, attn_gpt_create(e->ctx, &cfg, V, ev_i(e, "block_size"), &m), &m, ""));
    ATTN_TRY(ev_ids(e, "idx", 2, 2, &ids));
    ATTN_TRY(ev_ready(e));
    int64_t ys[3] = {ids.shape[0], ids.shape[1], V};
    ATTN_TRY(ev_new(e, "out", 3, ys, &y));
    ATTN_TRY(attn_gpt_forward(e->ctx, m, &ids, NULL, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    /* ids have no gradient: the parameters' only */
    attn_tensor go;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(attn_gpt_backward(e->ctx, m, &ids, NULL, &go));
    return ev_write_param_grads(e);
}

/* ---- the op table ------------------------------------------------------------------------ */

#define EV_OPS(X)                                                                             \
    X(sdpa, A_SDPA, NULL, I_SDPA)                                                             \
    X(multihead_attention, A_MHA, NULL, I_MHA)                                                \
    X(transformer_encoder_layer, A_TF_LAYER, A_ENC_LAYER, I_ENC_LAYER)                        \
    X(transformer_decoder_layer, A_TF_LAYER, A_DEC_LAYER, I_DEC)                              \
    X(transformer_encoder, A_TF_LAYER, A_ENCODER, I_ENCODER)                                  \
    X(transformer_decoder, A_TF_LAYER, A_DECODER, I_DEC)                                      \
    X(transformer, A_TRANSFORMER, NULL, I_TRANSFORMER)                                        \
    X(simple_self_attention, A_SIMPLE, NULL, I_SIMPLE)                                        \
    X(self_attention_v1, A_SEED_V1, NULL, I_SEED)                                             \
    X(self_attention_v2, A_SEED_V2, NULL, I_SEED)                                             \
    X(causal_attention, A_SEED_CAUSAL, NULL, I_SEED_MASKED)                                   \
    X(seed_multihead_attention, A_SEED_MHA, NULL, I_SEED_MASKED)                              \
    X(general_attention, A_GENERAL, NULL, I_GENERAL)                                          \
    X(additive_attention, A_ADDITIVE, NULL, I_ADDITIVE)                                       \
    X(positional_encoding, A_PE, NULL, I_PE)                                                  \
    X(learned_positional_encoding, A_NONE, NULL, I_LEARNED_PE)                                \
    X(linear, A_LINEAR, NULL, I_WB)                                                           \
    X(layer_norm, A_LAYER_NORM, NULL, I_WB)                                                   \
    X(relu, A_NONE, NULL, I_INPUT)                                                            \
    X(gelu, A_GELU, NULL, I_INPUT)                                                            \
    X(tanh, A_NONE, NULL, I_INPUT)                                                            \
    X(softmax, A_SOFTMAX, NULL, I_INPUT)                                                      \
    X(embedding, A_NONE, NULL, I_EMBEDDING)                                                   \
    X(cross_entropy, A_CROSS_ENTROPY, NULL, I_CROSS_ENTROPY)                                  \
    X(feed_forward, A_FFN, NULL, I_X)                                                         \
    X(vit_self_attention, A_VIT, NULL, I_VIT)                                                 \
    X(gpt, A_GPT, NULL, I_GPT)

#define EV_ENTRY(n, a1, a2, in) {#n, {a1, a2}, in, op_##n},
static const ev_op ev_ops[] = {EV_OPS(EV_ENTRY)};
#define EV_NAME(n, a1, a2, in) #n,
static const char *const ev_names[] = {EV_OPS(EV_NAME) NULL};

const char *const *attn_eval_ops(void) { return ev_names; }

static attn_status ev_run(ev *e) {
    const char *opname = attn_st_meta(e->in, "op");
    ATTN_FAIL_IF(!opname, e->ctx, ATTN_E_INVALID,
                 "the file's __metadata__ has no \"op\" entry naming the op to run");
    for (size_t i = 0; i < sizeof ev_ops / sizeof ev_ops[0] && !e->op; i++)
        if (!strcmp(ev_ops[i].name, opname)) e->op = &ev_ops[i];
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
    for (size_t i = 0; i < e.nbufs; i++) attn__free(ctx, e.bufs[i]);
    attn__free(ctx, e.bufs);
    attn__free(ctx, e.used);
    return st;
}
