/* Status list, context, allocator hooks, workspace arena, tensor views and checks. */
#define _DEFAULT_SOURCE /* madvise */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "internal.h"
#include "pool.h"

const char *attn_version(void) { return ATTN_VERSION_STRING; }

/* ---- status ---------------------------------------------------------------------------- */
const char *attn_strerror(attn_status status) {
    switch (status) {
#define ATTN__STATUS_MSG(name, value, msg)                                                    \
    case ATTN_##name: return msg;
        ATTN_STATUS_MAP(ATTN__STATUS_MSG)
#undef ATTN__STATUS_MSG
    }
    return "unknown status";
}

const char *attn_status_name(attn_status status) {
    switch (status) {
#define ATTN__STATUS_NAME(name, value, msg)                                                   \
    case ATTN_##name: return "ATTN_" #name;
        ATTN_STATUS_MAP(ATTN__STATUS_NAME)
#undef ATTN__STATUS_NAME
    }
    return "ATTN_UNKNOWN";
}

attn_status attn__fail(attn_ctx *ctx, attn_status st, const char *fmt, ...) {
    if (!ctx) return st;
    ctx->status = st;
    /* format aside first: an argument may be the context's own message (a caller adding a
     * prefix to it), and vsnprintf into the buffer it reads from is undefined */
    char buf[ATTN__MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(ctx->msg, buf, sizeof buf);
    return st;
}

/* ---- memory ---------------------------------------------------------------------------- */
/* Blocks of 4 MiB and more (workspace and saved-activation arenas, packed weights) start on a
 * 2 MiB boundary and, on Linux, ask for transparent huge pages: the GEMMs stream them through
 * the TLB, and the first touch of a fresh block costs one fault per 2 MiB, not per 4 KiB. */
#define HUGE_FROM ((size_t)4 << 20)
#define HUGE_ALIGN ((size_t)2 << 20)
static void *attn__default_alloc(void *user, size_t size) {
    (void)user;
    if (size < HUGE_FROM) return malloc(size);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_ALIGN, size) != 0) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(p, size / HUGE_ALIGN * HUGE_ALIGN, MADV_HUGEPAGE); /* a hint: may fail */
#endif
    return p;
}
static void attn__default_free(void *user, void *p) {
    (void)user;
    free(p);
}

void *attn__malloc(attn_ctx *ctx, size_t size) {
    if (size == 0) size = 1;
    return ctx->alloc(ctx->alloc_user, size);
}
void *attn__calloc(attn_ctx *ctx, size_t n, size_t size) {
    size_t total;
    if (!attn__mul_size(n, size, &total)) return NULL;
    void *p = attn__malloc(ctx, total);
    if (p) memset(p, 0, total);
    return p;
}
void attn__free(attn_ctx *ctx, void *p) {
    if (p) ctx->free(ctx->alloc_user, p);
}
int attn__grow(attn_ctx *ctx, void **arr, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return 1;
    size_t ncap = *cap ? *cap * 2 : 16, bytes;
    if (ncap <= *cap || !attn__mul_size(ncap, elem, &bytes)) return 0;
    void *p = attn__malloc(ctx, bytes);
    if (!p) return 0;
    if (n) memcpy(p, *arr, n * elem);
    attn__free(ctx, *arr);
    *arr = p;
    *cap = ncap;
    return 1;
}

char *attn__strdup(attn_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = attn__malloc(ctx, n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- context --------------------------------------------------------------------------- */
static void attn__limits_default(int64_t *lim) {
    /* a file larger than this machine's memory cannot be held: refuse it before reading */
    int64_t mem = (int64_t)1 << 40;
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psize > 0 && pages <= INT64_MAX / psize) mem = (int64_t)pages * psize;
#endif
    lim[ATTN_LIMIT_FILE_BYTES] = mem;
    lim[ATTN_LIMIT_LAYERS] = 1024;
    lim[ATTN_LIMIT_VOCAB] = (int64_t)1 << 24;
    lim[ATTN_LIMIT_TEXT_BYTES] = (int64_t)1 << 30;
}

void attn_ctx_set_grad_ready(attn_ctx *ctx, attn_grad_ready_fn fn, void *user) {
    if (!ctx) return;
    ctx->grad_ready = fn;
    ctx->grad_ready_user = fn ? user : NULL;
}

attn_status attn_ctx_set_limit(attn_ctx *ctx, attn_limit which, int64_t value) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF((int)which < 0 || which >= ATTN_LIMIT_COUNT, ctx, ATTN_E_INVALID,
                 "attn_ctx_set_limit: unknown limit %d", (int)which);
    ATTN_FAIL_IF(value <= 0, ctx, ATTN_E_INVALID, "attn_ctx_set_limit: limit %d must be > 0, "
                 "got %lld", (int)which, (long long)value);
    ctx->limit[which] = value;
    return ATTN_OK;
}

int64_t attn_ctx_limit(const attn_ctx *ctx, attn_limit which) {
    if (!ctx || (int)which < 0 || which >= ATTN_LIMIT_COUNT) return 0;
    return ctx->limit[which];
}

/* Why the last attn_ctx_create of this thread failed (there is no context to hold it);
 * attn_ctx_errmsg(NULL) returns it. */
static _Thread_local char create_msg[ATTN__MSG_MAX];

static attn_status create_fail(attn_status st, const char *fmt, ...) ATTN__PRINTF(2, 3);
static attn_status create_fail(attn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(create_msg, sizeof create_msg, fmt, ap);
    va_end(ap);
    return st;
}

#define ATTN__CTX_FLAGS_KNOWN                                                               \
    ((unsigned)(ATTN_CTX_NO_FINITE_CHECK | ATTN_CTX_BF16_MATMUL | ATTN_CTX_AUTO_MATMUL))

attn_status attn_ctx_create(const attn_ctx_params *params, attn_ctx **out) {
    create_msg[0] = 0;
    if (!out) return create_fail(ATTN_E_INVALID, "attn_ctx_create: out is NULL");
    *out = NULL;
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    if (params) p = *params;
    if ((p.alloc == NULL) != (p.free == NULL))
        return create_fail(ATTN_E_INVALID,
                           "attn_ctx_create: alloc and free must be set together");
    if (p.threads < 0 || p.threads > 1024)
        return create_fail(ATTN_E_INVALID, "attn_ctx_create: threads must be in [0, 1024], got %d",
                           p.threads);
    if (p.workspace && p.workspace_size == 0)
        return create_fail(ATTN_E_INVALID,
                           "attn_ctx_create: workspace is set but workspace_size is 0");
    if (p.flags & ~ATTN__CTX_FLAGS_KNOWN)
        return create_fail(ATTN_E_INVALID,
                           "attn_ctx_create: unknown flags 0x%x (known: ATTN_CTX_NO_FINITE_CHECK | "
                           "ATTN_CTX_BF16_MATMUL | ATTN_CTX_AUTO_MATMUL = 0x%x)", p.flags & ~ATTN__CTX_FLAGS_KNOWN, ATTN__CTX_FLAGS_KNOWN);
    if (!p.alloc) {
        p.alloc = attn__default_alloc;
        p.free = attn__default_free;
    }
    attn_ctx *c = p.alloc(p.alloc_user, sizeof *c);
    if (!c) return create_fail(ATTN_E_NOMEM, "attn_ctx_create: out of memory");
    memset(c, 0, sizeof *c);
    c->threads = p.threads > 0 ? p.threads : attn_cpu_default_threads();
    c->alloc = p.alloc;
    c->free = p.free;
    c->alloc_user = p.alloc_user;
    c->flags = p.flags;
    if (p.workspace) {
        c->blocks = attn__malloc(c, sizeof *c->blocks);
        if (!c->blocks) {
            p.free(p.alloc_user, c);
            return create_fail(ATTN_E_NOMEM, "attn_ctx_create: out of memory");
        }
        /* align the caller's block to 64 bytes */
        uintptr_t a = (uintptr_t)p.workspace, al = (a + 63) & ~(uintptr_t)63;
        size_t skip = (size_t)(al - a);
        c->blocks[0].ptr = (unsigned char *)al;
        c->blocks[0].size = p.workspace_size > skip ? p.workspace_size - skip : 0;
        c->blocks[0].used = c->blocks[0].start = 0;
        c->nblocks = c->capblocks = 1;
        c->fixed = 1;
    }
    attn__limits_default(c->limit);
    attn__kernels_init(c); /* and ATTN_CTX_AUTO_MATMUL resolved for them */
    if (c->threads > 1 && attn__pool_create(c, c->threads, &c->pool) != ATTN_OK) {
        int threads = c->threads;
        attn__free(c, c->blocks);
        p.free(p.alloc_user, c);
        return create_fail(ATTN_E_NOMEM, "attn_ctx_create: cannot start %d worker threads",
                           threads);
    }
    *out = c;
    return ATTN_OK;
}

void attn_ctx_free(attn_ctx *ctx) {
    if (!ctx) return;
    attn__pool_free(ctx, ctx->pool);
    if (!ctx->fixed)
        for (size_t i = 0; i < ctx->nblocks; i++) attn__free(ctx, ctx->blocks[i].ptr);
    attn__free(ctx, ctx->blocks);
    ctx->free(ctx->alloc_user, ctx);
}

const char *attn_ctx_errmsg(const attn_ctx *ctx) {
    if (!ctx) return create_msg[0] ? create_msg : "no context";
    return ctx->status == ATTN_OK ? "" : ctx->msg;
}
attn_status attn_ctx_status(const attn_ctx *ctx) { return ctx ? ctx->status : ATTN_E_INVALID; }
void attn_ctx_clear_error(attn_ctx *ctx) {
    if (!ctx) return;
    ctx->status = ATTN_OK;
    ctx->msg[0] = 0;
}
int attn_ctx_threads(const attn_ctx *ctx) { return ctx ? ctx->threads : 1; }
size_t attn_ctx_workspace_peak(const attn_ctx *ctx) { return ctx ? ctx->peak : 0; }
unsigned attn_ctx_flags(const attn_ctx *ctx) { return ctx ? ctx->flags : 0u; }

/* ---- workspace ------------------------------------------------------------------------- */
attn__mark attn__ws_mark(attn_ctx *ctx) {
    attn__mark m = {ctx->cur, ctx->nblocks ? ctx->blocks[ctx->cur].used : 0, ctx->in_use};
    return m;
}

void attn__ws_release(attn_ctx *ctx, attn__mark m) {
    if (!ctx->nblocks) return;
    for (size_t i = m.block + 1; i < ctx->nblocks; i++) ctx->blocks[i].used = ctx->blocks[i].start;
    ctx->cur = m.block;
    /* a mark taken before the block existed says 0: never go below the aligned start */
    ctx->blocks[m.block].used = m.used > ctx->blocks[m.block].start ? m.used
                                                                     : ctx->blocks[m.block].start;
    ctx->in_use = m.in_use;
}

attn_status attn__ws_alloc(attn_ctx *ctx, size_t n, size_t elem, void **out) {
    size_t bytes;
    *out = NULL;
    if (!attn__mul_size(n, elem, &bytes) || !attn__add_size(bytes, 63, &bytes))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "workspace request of %zu x %zu bytes overflows",
                          n, elem);
    bytes &= ~(size_t)63;
    if (bytes == 0) bytes = 64;
    for (;;) {
        if (ctx->nblocks) {
            attn__ws_block *b = &ctx->blocks[ctx->cur];
            if (b->size - b->used >= bytes) {
                *out = b->ptr + b->used;
                b->used += bytes;
                ctx->in_use += bytes;
                if (ctx->in_use > ctx->peak) ctx->peak = ctx->in_use;
                return ATTN_OK;
            }
            if (ctx->cur + 1 < ctx->nblocks &&
                ctx->blocks[ctx->cur + 1].size - ctx->blocks[ctx->cur + 1].start >= bytes) {
                ctx->cur++;
                ctx->blocks[ctx->cur].used = ctx->blocks[ctx->cur].start;
                continue;
            }
        }
        if (ctx->fixed)
            return attn__fail(ctx, ATTN_E_WORKSPACE,
                              "caller workspace too small: %zu more bytes needed", bytes);
        /* drop the unused blocks after cur and append one big enough */
        size_t keep = ctx->nblocks ? ctx->cur + 1 : 0;
        for (size_t i = keep; i < ctx->nblocks; i++) attn__free(ctx, ctx->blocks[i].ptr);
        ctx->nblocks = keep;
        if (!attn__grow(ctx, (void **)&ctx->blocks, &ctx->capblocks, ctx->nblocks,
                        sizeof *ctx->blocks))
            return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (workspace table)");
        size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
        if (ctx->nblocks && ctx->blocks[ctx->nblocks - 1].size * 2 > want &&
            ctx->blocks[ctx->nblocks - 1].size < SIZE_MAX / 4)
            want = ctx->blocks[ctx->nblocks - 1].size * 2;
        unsigned char *p = attn__malloc(ctx, want + 64);
        if (!p && want > bytes) p = attn__malloc(ctx, (want = bytes) + 64);
        if (!p) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (workspace of %zu bytes)", bytes);
        attn__ws_block *b = &ctx->blocks[ctx->nblocks];
        b->ptr = p;
        b->size = want + 64;
        b->used = b->start = (size_t)((((uintptr_t)p + 63) & ~(uintptr_t)63) - (uintptr_t)p);
        ctx->cur = ctx->nblocks++;
    }
}

attn_status attn__ws_f32(attn_ctx *ctx, float **out, int64_t n0, int64_t n1, int64_t n2,
                         int64_t n3) {
    int64_t n;
    if (!attn__mul_i64(n0, n1, &n) || !attn__mul_i64(n, n2, &n) || !attn__mul_i64(n, n3, &n) ||
        (uint64_t)n > SIZE_MAX / sizeof(float))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "temporary buffer size overflows");
    return attn__ws_alloc(ctx, (size_t)n, sizeof(float), (void **)out);
}

/* ---- tensors --------------------------------------------------------------------------- */
size_t attn_dtype_size(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_F64: case ATTN_I64: return 8;
    case ATTN_F32: case ATTN_I32: return 4;
    case ATTN_F16: case ATTN_BF16: return 2;
    case ATTN_I8: case ATTN_U8: case ATTN_BOOL: return 1;
    }
    return 0;
}

const char *attn_dtype_name(attn_dtype dtype) {
    static const char *names[] = {"F32", "F64", "F16", "BF16", "I64", "I32", "I8", "U8", "BOOL"};
    if ((unsigned)dtype < sizeof names / sizeof names[0]) return names[dtype];
    return NULL;
}

attn_tensor attn_tensor_make(void *data, attn_dtype dtype, int ndim, const int64_t *shape) {
    attn_tensor t;
    memset(&t, 0, sizeof t);
    if (ndim < 0 || ndim > ATTN_MAX_DIMS || (ndim > 0 && !shape)) return t;
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.stride[d] = s;
        if (!attn__mul_i64(s, shape[d] > 0 ? shape[d] : 1, &s)) s = 0;
    }
    return t;
}

int64_t attn_tensor_numel(const attn_tensor *t) {
    if (!t) return -1;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        if (!attn__mul_i64(n, t->shape[d], &n)) return -1;
    return n;
}

int attn_tensor_is_contiguous(const attn_tensor *t) {
    if (!t) return 0;
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != s) return 0;
        s *= t->shape[d];
    }
    return 1;
}

const char *attn__dims_str(const int64_t *shape, int ndim, char *buf, size_t n) {
    size_t o = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int d = 0; d < ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

const char *attn__shape_str(const attn_tensor *t, char *buf, size_t n) {
    return attn__dims_str(t ? t->shape : NULL, t ? t->ndim : 0, buf, n);
}

attn_status attn__check(attn_ctx *ctx, const attn_tensor *t, const char *what, attn_dtype dtype,
                        int min_nd, int max_nd) {
    if (!t || !t->data) return attn__fail(ctx, ATTN_E_INVALID, "%s is missing", what);
    if (t->dtype != dtype) {
        /* BOOL and U8 are interchangeable for masks */
        int boolish = (dtype == ATTN_BOOL || dtype == ATTN_U8) &&
                      (t->dtype == ATTN_BOOL || t->dtype == ATTN_U8);
        if (!boolish) {
            const char *n = attn_dtype_name(t->dtype);
            return attn__fail(ctx, ATTN_E_DTYPE, "%s has dtype %s, expected %s", what,
                              n ? n : "?", attn_dtype_name(dtype));
        }
    }
    if (t->ndim < min_nd || t->ndim > max_nd) {
        if (min_nd == max_nd)
            return attn__fail(ctx, ATTN_E_SHAPE, "%s must be %d-D, got %d-D", what, min_nd,
                              t->ndim);
        return attn__fail(ctx, ATTN_E_SHAPE, "%s must be %d-D to %d-D, got %d-D", what, min_nd,
                          max_nd, t->ndim);
    }
    int64_t n = 1;
    char buf[96];
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] <= 0)
            return attn__fail(ctx, ATTN_E_SHAPE, "%s has a zero or negative size: %s", what,
                              attn__shape_str(t, buf, sizeof buf));
        if (t->stride[d] < 0)
            return attn__fail(ctx, ATTN_E_INVALID, "%s has a negative stride", what);
        if (!attn__mul_i64(n, t->shape[d], &n))
            return attn__fail(ctx, ATTN_E_OVERFLOW, "%s: element count of %s overflows", what,
                              attn__shape_str(t, buf, sizeof buf));
    }
    /* the largest offset must be addressable */
    int64_t maxoff = 0, term;
    for (int d = 0; d < t->ndim; d++) {
        if (!attn__mul_i64(t->shape[d] - 1, t->stride[d], &term) || maxoff > INT64_MAX - term)
            return attn__fail(ctx, ATTN_E_OVERFLOW, "%s: strides overflow", what);
        maxoff += term;
    }
    if ((uint64_t)maxoff > (uint64_t)(SIZE_MAX / 8))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "%s: extent overflows", what);
    return ATTN_OK;
}

attn_status attn__check_shape(attn_ctx *ctx, const attn_tensor *t, const char *what, int n,
                              const int64_t *shape) {
    int ok = t->ndim == n;
    for (int d = 0; ok && d < n; d++) ok = t->shape[d] == shape[d];
    if (ok) return ATTN_OK;
    attn_tensor want;
    memset(&want, 0, sizeof want);
    want.ndim = n;
    for (int d = 0; d < n; d++) want.shape[d] = shape[d];
    char a[96], b[96];
    return attn__fail(ctx, ATTN_E_SHAPE, "%s has shape %s, expected %s", what,
                      attn__shape_str(t, a, sizeof a), attn__shape_str(&want, b, sizeof b));
}

/* ---- output aliasing ------------------------------------------------------------------- */
static int present(const attn_tensor *t) { return t && t->data; }

/* |a| * b for b >= 0 into *r (0 on overflow, or for INT64_MIN). */
static int abs_mul(int64_t a, int64_t b, int64_t *r) {
    if (a == INT64_MIN) return 0;
    return attn__mul_i64(a < 0 ? -a : a, b, r);
}

/* The bytes [*lo, *hi] that t addresses.  Returns 1, 0 when t has no element (*lo > *hi is
 * not used then), or -1 on overflow. */
static int view_extent(const attn_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t below = 0, above = 0; /* element offsets below and above data */
    if (t->ndim < 0 || t->ndim > ATTN_MAX_DIMS) return -1;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] <= 0) return 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t term;
        if (!abs_mul(t->stride[d], t->shape[d] - 1, &term)) return -1;
        int64_t *side = t->stride[d] < 0 ? &below : &above;
        if (*side > INT64_MAX - term) return -1;
        *side += term;
    }
    size_t esz = attn_dtype_size(t->dtype);
    if (esz == 0) esz = 1;
    size_t bb, ab;
    if ((uint64_t)below > SIZE_MAX || (uint64_t)above > SIZE_MAX ||
        !attn__mul_size((size_t)below, esz, &bb) || !attn__mul_size((size_t)above, esz, &ab) ||
        !attn__add_size(ab, esz - 1, &ab))
        return -1;
    uintptr_t base = (uintptr_t)t->data;
    if (bb > base || ab > UINTPTR_MAX - base) return -1;
    *lo = base - bb;
    *hi = base + ab;
    return 1;
}

int attn__same_view(const attn_tensor *a, const attn_tensor *b) {
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->stride[d] != b->stride[d]))
            return 0;
    return 1;
}

attn_status attn__check_disjoint(attn_ctx *ctx, const char *fn, const attn_tensor *out,
                                 const char *out_name, const attn_tensor *in,
                                 const char *in_name) {
    if (!present(out) || !present(in)) return ATTN_OK;
    uintptr_t alo, ahi, blo, bhi;
    int ea = view_extent(out, &alo, &ahi), eb = view_extent(in, &blo, &bhi);
    ATTN_FAIL_IF(ea < 0 || eb < 0, ctx, ATTN_E_OVERFLOW, "%s: the memory extent of %s overflows",
                 fn, ea < 0 ? out_name : in_name);
    if (ea == 0 || eb == 0 || ahi < blo || bhi < alo) return ATTN_OK;
    return attn__fail(ctx, ATTN_E_INVALID,
                      "%s: %s overlaps %s (outputs may not share memory with inputs or with "
                      "each other)", fn, out_name, in_name);
}

attn_status attn__check_distinct(attn_ctx *ctx, const char *fn, const attn_tensor *out,
                                 const char *out_name) {
    if (!present(out) || out->ndim < 0 || out->ndim > ATTN_MAX_DIMS) return ATTN_OK;
    int dims[ATTN_MAX_DIMS], n = 0;
    for (int d = 0; d < out->ndim; d++) {
        if (out->shape[d] <= 1) continue;
        if (out->stride[d] == INT64_MIN) return ATTN_OK; /* attn__check refuses it */
        ATTN_FAIL_IF(out->stride[d] == 0, ctx, ATTN_E_INVALID,
                     "%s: output %s has stride 0 on dimension %d (size %lld): its elements "
                     "would share memory", fn, out_name, d, (long long)out->shape[d]);
        /* insertion by |stride| */
        int k = n++;
        int64_t s = out->stride[d] < 0 ? -out->stride[d] : out->stride[d];
        while (k > 0) {
            int64_t p = out->stride[dims[k - 1]];
            if ((p < 0 ? -p : p) <= s) break;
            dims[k] = dims[k - 1];
            k--;
        }
        dims[k] = d;
    }
    int64_t reach = 0; /* largest offset covered by the smaller dimensions */
    for (int i = 0; i < n; i++) {
        int d = dims[i];
        int64_t term;
        int64_t s = out->stride[d] < 0 ? -out->stride[d] : out->stride[d];
        char buf[96];
        ATTN_FAIL_IF(s <= reach, ctx, ATTN_E_INVALID,
                     "%s: output %s has strides that give two elements the same memory (or "
                     "interleave dimensions, which outputs may not): stride %lld on dimension "
                     "%d of shape %s", fn, out_name, (long long)out->stride[d], d,
                     attn__shape_str(out, buf, sizeof buf));
        ATTN_FAIL_IF(!attn__mul_i64(s, out->shape[d] - 1, &term) || reach > INT64_MAX - term, ctx,
                     ATTN_E_OVERFLOW, "%s: output %s: strides overflow", fn, out_name);
        reach += term;
    }
    return ATTN_OK;
}

attn_status attn__check_outputs(attn_ctx *ctx, const char *fn, const attn__arg *outs, int nout,
                                const attn__arg *ins, int nin) {
    for (int i = 0; i < nout; i++) {
        if (!present(outs[i].t)) continue;
        ATTN_TRY(attn__check_distinct(ctx, fn, outs[i].t, outs[i].name));
        for (int j = 0; j < i; j++)
            ATTN_TRY(attn__check_disjoint(ctx, fn, outs[i].t, outs[i].name, outs[j].t,
                                          outs[j].name));
        for (int j = 0; j < nin; j++) {
            if (i < 32 && (ins[j].same_ok >> i & 1u) && present(ins[j].t) &&
                attn__same_view(outs[i].t, ins[j].t))
                continue;
            ATTN_TRY(attn__check_disjoint(ctx, fn, outs[i].t, outs[i].name, ins[j].t,
                                          ins[j].name));
        }
    }
    return ATTN_OK;
}

/* Calls fn(ptr, user) for every element offset of t in row-major order. */
#define ATTN__FOR_EACH(t, off, body)                                                          \
    do {                                                                                      \
        int64_t sh_[4] = {1, 1, 1, 1}, sd_[4] = {0, 0, 0, 0};                                 \
        int k_ = 4 - (t)->ndim;                                                               \
        for (int d_ = 0; d_ < (t)->ndim; d_++) {                                              \
            sh_[k_ + d_] = (t)->shape[d_];                                                    \
            sd_[k_ + d_] = (t)->stride[d_];                                                   \
        }                                                                                     \
        for (int64_t i0 = 0; i0 < sh_[0]; i0++)                                               \
            for (int64_t i1 = 0; i1 < sh_[1]; i1++)                                           \
                for (int64_t i2 = 0; i2 < sh_[2]; i2++)                                       \
                    for (int64_t i3 = 0; i3 < sh_[3]; i3++) {                                 \
                        int64_t off = i0 * sd_[0] + i1 * sd_[1] + i2 * sd_[2] + i3 * sd_[3];  \
                        body;                                                                 \
                    }                                                                         \
    } while (0)

/* The first non-finite element of p[i0, i1) (-inf allowed with allow_neg_inf), or -1: blocks
 * of 4096 floats through the context's scan (any: 1 when a block holds a NaN or an infinity),
 * the element found in the first such block (a -inf alone, where allowed, goes on). */
static int64_t first_nonfinite(attn__nonfinite_fn any, const float *p, int64_t i0, int64_t i1,
                               int allow_neg_inf) {
    for (int64_t b0 = i0; b0 < i1; b0 += 4096) {
        int64_t b1 = i1 - b0 < 4096 ? i1 : b0 + 4096;
        if (!any(p + b0, b1 - b0)) continue;
        for (int64_t i = b0; i < b1; i++)
            if (!isfinite(p[i]) && !(allow_neg_inf && p[i] == -INFINITY)) return i;
    }
    return -1;
}

/* Large tensors are scanned in parallel, in pieces of FIN_PIECE elements: each piece that has
 * a non-finite element lowers `first` to its piece index (a minimum: the same for any thread
 * count); the first piece is scanned again for the element. */
#define FIN_PIECE 32768
typedef struct fin_job {
    attn__nonfinite_fn any;
    const float *p;
    int64_t n;
    int allow_neg_inf;
    _Atomic int64_t first;
} fin_job;

static void fin_task(void *arg, int64_t begin, int64_t end, int tid) {
    fin_job *j = arg;
    (void)tid;
    for (int64_t t = begin; t < end; t++) {
        if (t > atomic_load_explicit(&j->first, memory_order_relaxed)) return;
        int64_t i0 = t * FIN_PIECE, i1 = j->n - i0 < FIN_PIECE ? j->n : i0 + FIN_PIECE;
        if (first_nonfinite(j->any, j->p, i0, i1, j->allow_neg_inf) < 0) continue;
        int64_t cur = atomic_load(&j->first);
        while (t < cur && !atomic_compare_exchange_weak(&j->first, &cur, t)) {
        }
        return;
    }
}

int64_t attn__find_nonfinite(attn_ctx *ctx, const attn_tensor *t, int allow_neg_inf) {
    if (!t || !t->data || t->dtype != ATTN_F32) return -1;
    const float *p = t->data;
    int64_t bad = -1;
    attn__nonfinite_fn any = ctx->kern.nonfinite; /* set by attn__kernels_init */
    if (attn_tensor_is_contiguous(t)) {
        int64_t n = attn_tensor_numel(t), pieces = (n + FIN_PIECE - 1) / FIN_PIECE;
        if (pieces >= 4 && attn__parallel_width(ctx, pieces) > 1) {
            fin_job j = {any, p, n, allow_neg_inf, INT64_MAX};
            attn__parallel_for(ctx, pieces, fin_task, &j);
            int64_t first = atomic_load(&j.first);
            if (first != INT64_MAX) {
                int64_t i0 = first * FIN_PIECE;
                bad = first_nonfinite(any, p, i0, n - i0 < FIN_PIECE ? n : i0 + FIN_PIECE,
                                      allow_neg_inf);
            }
            return bad;
        }
        return first_nonfinite(any, p, 0, n, allow_neg_inf);
    }
    int64_t idx = 0; /* row-major index of the element at off */
    ATTN__FOR_EACH(t, off, {
        float x = p[off];
        if (bad < 0 && !isfinite(x) && !(allow_neg_inf && x == -INFINITY)) bad = idx;
        idx++;
    });
    return bad;
}

attn_status attn__check_finite(attn_ctx *ctx, const attn_tensor *t, const char *what,
                               int allow_neg_inf) {
    if (ctx->flags & ATTN_CTX_NO_FINITE_CHECK) return ATTN_OK;
    int64_t bad = attn__find_nonfinite(ctx, t, allow_neg_inf);
    if (bad < 0) return ATTN_OK;
    int64_t idx[4] = {0, 0, 0, 0}, r = bad;
    for (int d = t->ndim - 1; d >= 0; d--) idx[d] = r % t->shape[d], r /= t->shape[d];
    const float x = ((const float *)t->data)[attn__off(t, idx)];
    return attn__fail(ctx, ATTN_E_NONFINITE, "%s contains %s", what,
                      isnan(x) ? "NaN" : "an infinity");
}

attn_status attn__contig(attn_ctx *ctx, const attn_tensor *t, const float **out) {
    if (attn_tensor_is_contiguous(t)) {
        *out = t->data;
        return ATTN_OK;
    }
    float *buf;
    ATTN_TRY(attn__ws_f32(ctx, &buf, attn_tensor_numel(t), 1, 1, 1));
    const float *p = t->data;
    int64_t n = 0;
    ATTN__FOR_EACH(t, off, { buf[n++] = p[off]; });
    *out = buf;
    return ATTN_OK;
}

void attn__store(const float *src, attn_tensor *dst) {
    float *p = dst->data;
    if (attn_tensor_is_contiguous(dst)) {
        if (p != src) memmove(p, src, (size_t)attn_tensor_numel(dst) * sizeof(float));
        return;
    }
    int64_t n = 0;
    ATTN__FOR_EACH(dst, off, { p[off] = src[n++]; });
}

int attn__rows(const attn_tensor *t, int64_t *rows, int64_t *row_stride) {
    if (t->ndim == 0) return 0;
    int last = t->ndim - 1;
    int64_t r = 1;
    for (int d = 0; d < last; d++) r *= t->shape[d];
    *rows = r;
    if (last == 0) {
        *row_stride = 0;
        return t->stride[0] == 1 || t->shape[0] == 1;
    }
    /* leading dims must collapse into one stride */
    int64_t s = t->stride[last - 1];
    int64_t expect = s;
    for (int d = last - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expect) return 0;
        expect *= t->shape[d];
    }
    *row_stride = s;
    return t->stride[last] == 1 || t->shape[last] == 1;
}

/* ---- masks ----------------------------------------------------------------------------- */
attn_status attn__mask_bind(attn_ctx *ctx, const attn_mask *m, const char *what,
                            const int64_t target[4], attn__mask4 *out) {
    memset(out, 0, sizeof *out);
    out->kind = ATTN_MASK_NONE;
    if (!m || m->kind == ATTN_MASK_NONE) return ATTN_OK;
    if (m->kind != ATTN_MASK_KEEP && m->kind != ATTN_MASK_BLOCK && m->kind != ATTN_MASK_ADD)
        return attn__fail(ctx, ATTN_E_INVALID, "%s has an unknown mask kind %d", what,
                          (int)m->kind);
    const attn_tensor *t = &m->t;
    if (m->kind == ATTN_MASK_ADD) {
        ATTN_TRY(attn__check(ctx, t, what, ATTN_F32, 1, 4));
        ATTN_TRY(attn__check_finite(ctx, t, what, 1));
    } else {
        ATTN_TRY(attn__check(ctx, t, what, ATTN_BOOL, 1, 4));
    }
    int k = 4 - t->ndim;
    for (int d = 0; d < 4; d++) {
        if (d < k) {
            out->stride[d] = 0;
            continue;
        }
        int64_t n = t->shape[d - k];
        if (n == target[d])
            out->stride[d] = target[d] == 1 ? 0 : t->stride[d - k];
        else if (n == 1)
            out->stride[d] = 0;
        else {
            attn_tensor tt;
            memset(&tt, 0, sizeof tt);
            tt.ndim = 4;
            for (int e = 0; e < 4; e++) tt.shape[e] = target[e];
            char a[96], b[96];
            return attn__fail(ctx, ATTN_E_BROADCAST, "%s shape %s does not broadcast to %s",
                              what, attn__shape_str(t, a, sizeof a),
                              attn__shape_str(&tt, b, sizeof b));
        }
    }
    out->kind = m->kind;
    out->data = t->data;
    out->dtype = t->dtype;
    return ATTN_OK;
}
