/* Safetensors writer.
 *
 * Layout of what it writes:
 *  - header keys: "__metadata__" first (when any), then the tensors sorted by name (bytewise,
 *    which for UTF-8 is code point order), so attn_st_at on the result lists them by name;
 *  - the header is padded with spaces to a multiple of 8 bytes, so the data section starts
 *    8-byte aligned in the file;
 *  - the data section holds the tensors back to back, 8-byte dtypes first, then 4-, 2- and
 *    1-byte ones, by name within each size.  Every tensor therefore starts at a multiple of
 *    its element size (natural alignment), and there are no gaps: the reference
 *    implementation (and so PyTorch's safetensors.torch.load_file) refuses files whose
 *    tensors do not tile the data section exactly, so padding between tensors is not an
 *    option.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "file.h"
#include "json.h"
#include "st_internal.h"

#define NAME "'%.160s'"

typedef struct wt_tensor {
    char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
    unsigned char *data; /* little-endian bytes, owned */
    size_t nbytes;
    uint64_t offset;     /* assigned when serialising */
} wt_tensor;

typedef struct wt_meta {
    char *key, *value;
} wt_meta;

struct attn_st_writer {
    attn_ctx *ctx; /* allocator and messages; must outlive the writer */
    wt_tensor *t;
    size_t n, cap;
    wt_meta *m;
    size_t nm, capm;
};

attn_ctx *attn__st_writer_ctx(const attn_st_writer *w) { return w ? w->ctx : NULL; }

attn_status attn_st_writer_create(attn_ctx *ctx, attn_st_writer **out) {
    if (!out) return attn__fail(ctx, ATTN_E_INVALID, "attn_st_writer_create: out is NULL");
    *out = NULL;
    if (!ctx) return ATTN_E_INVALID;
    attn_st_writer *w = attn__calloc(ctx, 1, sizeof *w);
    ATTN_FAIL_IF(!w, ctx, ATTN_E_NOMEM, "out of memory creating a safetensors writer");
    w->ctx = ctx;
    *out = w;
    return ATTN_OK;
}

void attn_st_writer_free(attn_st_writer *w) {
    if (!w) return;
    attn_ctx *ctx = w->ctx;
    for (size_t i = 0; i < w->n; i++) {
        attn__free(ctx, w->t[i].name);
        attn__free(ctx, w->t[i].data);
    }
    for (size_t i = 0; i < w->nm; i++) {
        attn__free(ctx, w->m[i].key);
        attn__free(ctx, w->m[i].value);
    }
    attn__free(ctx, w->t);
    attn__free(ctx, w->m);
    attn__free(ctx, w);
}

attn_status attn_st_writer_meta(attn_st_writer *w, const char *key, const char *value) {
    if (!w) return ATTN_E_INVALID;
    attn_ctx *ctx = w->ctx;
    ATTN_FAIL_IF(!key || !value, ctx, ATTN_E_INVALID, "attn_st_writer_meta: NULL key or value");
    /* the reader refuses invalid UTF-8, so the writer must never produce it */
    ATTN_FAIL_IF(!attn__json_utf8_valid(key, strlen(key)), ctx, ATTN_E_INVALID,
                 "metadata key is not valid UTF-8");
    ATTN_FAIL_IF(!attn__json_utf8_valid(value, strlen(value)), ctx, ATTN_E_INVALID,
                 "metadata value of " NAME " is not valid UTF-8", key);
    char *v = attn__strdup(ctx, value);
    ATTN_FAIL_IF(!v, ctx, ATTN_E_NOMEM, "out of memory storing metadata");
    for (size_t i = 0; i < w->nm; i++)
        if (strcmp(w->m[i].key, key) == 0) {
            attn__free(ctx, w->m[i].value);
            w->m[i].value = v;
            return ATTN_OK;
        }
    char *k = attn__strdup(ctx, key);
    if (!k || !attn__grow(ctx, (void **)&w->m, &w->capm, w->nm, sizeof *w->m)) {
        attn__free(ctx, k);
        attn__free(ctx, v);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory storing metadata");
    }
    w->m[w->nm].key = k;
    w->m[w->nm].value = v;
    w->nm++;
    return ATTN_OK;
}

/* Checks name, dtype and shape; gives the byte size. */
static attn_status check_tensor(attn_st_writer *w, const char *name, attn_dtype dtype, int ndim,
                                const int64_t *shape, size_t *nbytes) {
    attn_ctx *ctx = w->ctx;
    ATTN_FAIL_IF(!name, ctx, ATTN_E_INVALID, "safetensors writer: tensor name is NULL");
    ATTN_FAIL_IF(!attn__json_utf8_valid(name, strlen(name)), ctx, ATTN_E_INVALID,
                 "safetensors writer: tensor name is not valid UTF-8");
    ATTN_FAIL_IF(strcmp(name, "__metadata__") == 0, ctx, ATTN_E_INVALID,
                 "safetensors writer: '__metadata__' is reserved and cannot name a tensor");
    size_t es = attn_dtype_size(dtype);
    ATTN_FAIL_IF(es == 0, ctx, ATTN_E_DTYPE, "tensor " NAME ": unknown dtype %d", name,
                 (int)dtype);
    ATTN_FAIL_IF(ndim < 0 || ndim > ATTN_ST_MAX_DIMS, ctx, ATTN_E_INVALID,
                 "tensor " NAME ": ndim %d outside 0..%d", name, ndim, ATTN_ST_MAX_DIMS);
    ATTN_FAIL_IF(ndim > 0 && !shape, ctx, ATTN_E_INVALID, "tensor " NAME ": shape is NULL",
                 name);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        ATTN_FAIL_IF(shape[d] < 0, ctx, ATTN_E_SHAPE, "tensor " NAME ": shape[%d] = %lld < 0",
                     name, d, (long long)shape[d]);
        ATTN_FAIL_IF(!attn__mul_i64(numel, shape[d], &numel), ctx, ATTN_E_OVERFLOW,
                     "tensor " NAME ": element count overflows", name);
    }
    ATTN_FAIL_IF((uint64_t)numel > SIZE_MAX || !attn__mul_size((size_t)numel, es, nbytes), ctx,
                 ATTN_E_OVERFLOW, "tensor " NAME ": byte size overflows", name);
    for (size_t i = 0; i < w->n; i++)
        ATTN_FAIL_IF(strcmp(w->t[i].name, name) == 0, ctx, ATTN_E_INVALID,
                     "tensor " NAME " was already added", name);
    return ATTN_OK;
}

/* Appends a checked tensor, taking ownership of data (freed on failure). */
static attn_status push_tensor(attn_st_writer *w, const char *name, attn_dtype dtype, int ndim,
                               const int64_t *shape, unsigned char *data, size_t nbytes) {
    attn_ctx *ctx = w->ctx;
    char *nm = attn__strdup(ctx, name);
    if (!nm || !attn__grow(ctx, (void **)&w->t, &w->cap, w->n, sizeof *w->t)) {
        attn__free(ctx, nm);
        attn__free(ctx, data);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory adding tensor " NAME, name);
    }
    wt_tensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = data;
    t->nbytes = nbytes;
    return ATTN_OK;
}

attn_status attn_st_writer_add(attn_st_writer *w, const char *name, attn_dtype dtype, int ndim,
                               const int64_t *shape, const void *data) {
    if (!w) return ATTN_E_INVALID;
    size_t nbytes = 0;
    ATTN_TRY(check_tensor(w, name, dtype, ndim, shape, &nbytes));
    ATTN_FAIL_IF(nbytes && !data, w->ctx, ATTN_E_INVALID, "tensor " NAME ": data is NULL",
                 name);
    unsigned char *copy = attn__malloc(w->ctx, nbytes);
    ATTN_FAIL_IF(!copy, w->ctx, ATTN_E_NOMEM, "out of memory copying tensor " NAME
                 " (%zu bytes)", name, nbytes);
    if (nbytes) memcpy(copy, data, nbytes);
    return push_tensor(w, name, dtype, ndim, shape, copy, nbytes);
}

attn_status attn_st_writer_add_view(attn_st_writer *w, const char *name, const attn_tensor *t) {
    if (!w) return ATTN_E_INVALID;
    attn_ctx *ctx = w->ctx;
    ATTN_FAIL_IF(!t, ctx, ATTN_E_INVALID, "tensor " NAME ": view is NULL", name ? name : "?");
    ATTN_FAIL_IF(t->dtype != ATTN_F32, ctx, ATTN_E_DTYPE,
                 "tensor " NAME ": attn_st_writer_add_view takes F32 views, got %s",
                 name ? name : "?", attn_dtype_name(t->dtype) ? attn_dtype_name(t->dtype) : "?");
    ATTN_FAIL_IF(t->ndim < 0 || t->ndim > ATTN_MAX_DIMS, ctx, ATTN_E_INVALID,
                 "tensor " NAME ": view ndim %d outside 0..%d", name ? name : "?", t->ndim,
                 ATTN_MAX_DIMS);
    size_t nbytes = 0;
    ATTN_TRY(check_tensor(w, name, ATTN_F32, t->ndim, t->shape, &nbytes));
    size_t numel = nbytes / sizeof(float);
    ATTN_FAIL_IF(numel && !t->data, ctx, ATTN_E_INVALID, "tensor " NAME ": view data is NULL",
                 name);
    /* every offset the walk forms must be representable: sum of (shape-1)*|stride| */
    int64_t extent = 0;
    for (int d = 0; numel && d < t->ndim; d++) {
        int64_t s = t->stride[d], term;
        ATTN_FAIL_IF(s == INT64_MIN || !attn__mul_i64(t->shape[d] - 1, s < 0 ? -s : s, &term) ||
                         extent > INT64_MAX - term,
                     ctx, ATTN_E_OVERFLOW, "tensor " NAME ": view strides overflow", name);
        extent += term;
    }
    unsigned char *out = attn__malloc(ctx, nbytes);
    ATTN_FAIL_IF(!out, ctx, ATTN_E_NOMEM, "out of memory copying tensor " NAME " (%zu bytes)",
                 name, nbytes);
    const float *p = t->data;
    int64_t idx[ATTN_MAX_DIMS] = {0, 0, 0, 0}, off = 0;
    for (size_t k = 0; k < numel; k++) {
        uint32_t b;
        memcpy(&b, &p[off], sizeof b);
        /* stored little-endian whatever the host order */
        out[4 * k] = (unsigned char)b;
        out[4 * k + 1] = (unsigned char)(b >> 8);
        out[4 * k + 2] = (unsigned char)(b >> 16);
        out[4 * k + 3] = (unsigned char)(b >> 24);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) {
                off += t->stride[d];
                break;
            }
            off -= (idx[d] - 1) * t->stride[d];
            idx[d] = 0;
        }
    }
    return push_tensor(w, name, ATTN_F32, t->ndim, t->shape, out, nbytes);
}

/* ---- serialisation --------------------------------------------------------------------- */
/* Counts (out == NULL) or writes the header text. */
typedef struct emitter {
    char *out;
    size_t n;
    int overflow;
} emitter;

static void put(emitter *e, const char *s, size_t n) {
    if (n > SIZE_MAX - e->n) {
        e->overflow = 1;
        return;
    }
    if (e->out) memcpy(e->out + e->n, s, n);
    e->n += n;
}

static void puts_(emitter *e, const char *s) { put(e, s, strlen(s)); }

static void put_u64(emitter *e, uint64_t v) {
    char buf[24];
    int k = snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    put(e, buf, (size_t)k);
}

/* A JSON string: quotes, backslashes and control characters escaped; UTF-8 kept as is. */
static void put_json_string(emitter *e, const char *s) {
    static const char hex[] = "0123456789abcdef";
    put(e, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[6];
        size_t k = 0;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            k = 2;
        } else if (c < 0x20) {
            esc[0] = '\\';
            k = 2;
            switch (c) {
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                memcpy(esc + 1, "u00", 3);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                k = 6;
            }
        }
        if (k) {
            put(e, run, (size_t)(s - run));
            put(e, esc, k);
            run = s + 1;
        }
    }
    put(e, run, (size_t)(s - run));
    put(e, "\"", 1);
}

static void emit_header(const attn_st_writer *w, wt_tensor *const *by_name, emitter *e) {
    put(e, "{", 1);
    int first = 1;
    if (w->nm) {
        puts_(e, "\"__metadata__\":{");
        for (size_t i = 0; i < w->nm; i++) {
            if (i) put(e, ",", 1);
            put_json_string(e, w->m[i].key);
            put(e, ":", 1);
            put_json_string(e, w->m[i].value);
        }
        put(e, "}", 1);
        first = 0;
    }
    for (size_t i = 0; i < w->n; i++) {
        const wt_tensor *t = by_name[i];
        if (!first) put(e, ",", 1);
        first = 0;
        put_json_string(e, t->name);
        puts_(e, ":{\"dtype\":\"");
        puts_(e, attn_dtype_name(t->dtype));
        puts_(e, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) put(e, ",", 1);
            put_u64(e, (uint64_t)t->shape[d]);
        }
        puts_(e, "],\"data_offsets\":[");
        put_u64(e, t->offset);
        put(e, ",", 1);
        put_u64(e, t->offset + t->nbytes);
        puts_(e, "]}");
    }
    put(e, "}", 1);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(wt_tensor *const *)a)->name, (*(wt_tensor *const *)b)->name);
}

static int cmp_layout(const void *a, const void *b) {
    const wt_tensor *x = *(wt_tensor *const *)a, *y = *(wt_tensor *const *)b;
    size_t sx = attn_dtype_size(x->dtype), sy = attn_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The serialised plan: the first 8 + header bytes, and the tensors in data order. */
typedef struct wt_plan {
    char *head;
    size_t head_size; /* 8 + padded header */
    size_t data_size;
    wt_tensor **layout;
} wt_plan;

static void plan_free(attn_ctx *ctx, wt_plan *p) {
    attn__free(ctx, p->head);
    attn__free(ctx, p->layout);
}

static attn_status plan_build(attn_st_writer *w, wt_plan *p) {
    attn_ctx *ctx = w->ctx;
    attn_status st = ATTN_OK;
    memset(p, 0, sizeof *p);
    wt_tensor **by_name = NULL;
    size_t bytes;
    if (w->n) {
        if (!attn__mul_size(w->n, sizeof *by_name, &bytes) ||
            !(by_name = attn__malloc(ctx, bytes)) || !(p->layout = attn__malloc(ctx, bytes))) {
            st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory serialising safetensors");
            goto done;
        }
        for (size_t i = 0; i < w->n; i++) by_name[i] = p->layout[i] = &w->t[i];
        qsort(by_name, w->n, sizeof *by_name, cmp_name);
        qsort(p->layout, w->n, sizeof *p->layout, cmp_layout);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        p->layout[i]->offset = off;
        if (p->layout[i]->nbytes > SIZE_MAX - off) {
            st = attn__fail(ctx, ATTN_E_OVERFLOW, "safetensors data section size overflows");
            goto done;
        }
        off += p->layout[i]->nbytes;
    }
    p->data_size = (size_t)off;

    emitter e = {NULL, 0, 0};
    emit_header(w, by_name, &e);
    size_t hlen = e.n, padded;
    if (e.overflow || !attn__add_size(hlen, 7, &padded) ||
        !attn__add_size(padded & ~(size_t)7, 8, &p->head_size) ||
        !attn__add_size(p->head_size, p->data_size, &bytes)) {
        st = attn__fail(ctx, ATTN_E_OVERFLOW, "safetensors file size overflows");
        goto done;
    }
    padded &= ~(size_t)7;
    p->head = attn__malloc(ctx, p->head_size);
    if (!p->head) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory serialising a %zu-byte header", hlen);
        goto done;
    }
    for (int i = 0; i < 8; i++) p->head[i] = (char)(unsigned char)((uint64_t)padded >> (8 * i));
    e.out = p->head + 8;
    e.n = 0;
    emit_header(w, by_name, &e);
    memset(p->head + 8 + hlen, ' ', padded - hlen);
done:
    attn__free(ctx, by_name);
    if (st) plan_free(ctx, p);
    return st;
}

attn_status attn_st_writer_to_memory(attn_st_writer *w, void **data, size_t *size) {
    if (!w) return ATTN_E_INVALID;
    attn_ctx *ctx = w->ctx;
    ATTN_FAIL_IF(!data || !size, ctx, ATTN_E_INVALID, "attn_st_writer_to_memory: NULL output");
    *data = NULL;
    *size = 0;
    wt_plan p;
    ATTN_TRY(plan_build(w, &p));
    size_t total = p.head_size + p.data_size; /* checked in plan_build */
    unsigned char *buf = attn__malloc(ctx, total);
    if (!buf) {
        plan_free(ctx, &p);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory for a %zu-byte safetensors image",
                          total);
    }
    memcpy(buf, p.head, p.head_size);
    for (size_t i = 0; i < w->n; i++)
        if (p.layout[i]->nbytes)
            memcpy(buf + p.head_size + p.layout[i]->offset, p.layout[i]->data,
                   p.layout[i]->nbytes);
    plan_free(ctx, &p);
    *data = buf;
    *size = total;
    return ATTN_OK;
}

attn_status attn_st_writer_save(attn_st_writer *w, const char *path) {
    if (!w) return ATTN_E_INVALID;
    attn_ctx *ctx = w->ctx;
    ATTN_FAIL_IF(!path, ctx, ATTN_E_INVALID, "attn_st_writer_save: path is NULL");
    wt_plan p;
    ATTN_TRY(plan_build(w, &p));
    /* header, then the tensors in file order, written beside the target and renamed into
     * place: a failed save leaves an existing file as it was */
    attn__piece *pc = NULL;
    size_t npc = 0, cap;
    attn_status st = ATTN_OK;
    if (!attn__add_size(w->n, 1, &cap) || !(pc = attn__calloc(ctx, cap, sizeof *pc))) {
        plan_free(ctx, &p);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory saving '%.300s'", path);
    }
    pc[npc++] = (attn__piece){p.head, p.head_size};
    for (size_t i = 0; i < w->n; i++)
        if (p.layout[i]->nbytes) pc[npc++] = (attn__piece){p.layout[i]->data, p.layout[i]->nbytes};
    st = attn__file_write(ctx, path, pc, npc);
    attn__free(ctx, pc);
    plan_free(ctx, &p);
    return st;
}

void attn_buffer_free(attn_ctx *ctx, void *data) {
    /* without the context the allocator is unknown: freeing with another would be worse */
    if (ctx) attn__free(ctx, data);
}
