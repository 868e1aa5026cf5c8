/* GGUF reader: versions 2 and 3, little-endian (the contract is in attn.h, "GGUF files"; what
 * is checked, docs/gguf.md).
 *
 * Layout: "GGUF", u32 version, u64 tensor_count, u64 kv_count; kv_count entries (string key,
 * u32 value type, value); tensor_count descriptions (string name, u32 n_dims, n_dims u64 dims,
 * u32 GGML type, u64 offset); padding to the alignment; the data section.  A string is a u64
 * byte length and the bytes; an array a u32 element type, a u64 count and the elements.
 *
 * The image is parsed once, front to back, through one cursor that never moves past the end
 * of the file; every count is bounded by the bytes left before anything is allocated for it.
 * What the queries need later (value offsets, string lengths, tensor geometry) is recorded
 * during that pass, so no length or count is ever read from the image twice: a mapping that
 * changed after the parse could give other values, never an access outside the image.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "file.h"
#include "gguf_write.h"

#define GG_HEADER 24u     /* magic, version, tensor_count, kv_count */
#define GG_MIN_KV 13u     /* key length (8), value type (4), the smallest value (1) */
#define GG_MIN_TENSOR 32u /* name length (8), n_dims (4), one dim (8), type (4), offset (8) */
/* Names in messages are cut so that the rest of the message survives ATTN__MSG_MAX. */
#define NAME "'%.120s'"

/* bytes of one value of each scalar type; 0 for STRING and ARRAY */
static const unsigned char VSIZE[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const VNAME[13] = {"UINT8",  "INT8",  "UINT16", "INT16",  "UINT32",
                                      "INT32",  "FLOAT32", "BOOL", "STRING", "ARRAY",
                                      "UINT64", "INT64", "FLOAT64"};

typedef struct gg_kv {
    size_t key_at;     /* the key in the string pool (g->strings + key_at once parsed) */
    const char *key;
    uint64_t offset;   /* file offset of the entry */
    uint64_t val;      /* file offset of the value: a scalar, a string's length field, or an
                        * array's first element */
    uint64_t n;        /* ARRAY: elements; STRING: bytes; else 1 */
    uint64_t *str_off; /* ARRAY of STRING: n + 1 offsets, element k's length field at
                        * str_off[k], its end at str_off[k + 1] */
    int type, elem;    /* elem: the elements' type for ARRAY, else -1 */
} gg_kv;

typedef struct gg_tensor {
    size_t name_at;
    const char *name;
    uint64_t info;     /* file offset of the description */
    int type, n_dims;
    int64_t ne[ATTN_GGUF_MAX_DIMS];
    int64_t numel;
    uint64_t nbytes, offset;
} gg_tensor;

struct attn_gguf {
    /* The context that created it: its allocator frees it and its message slot takes the
     * errors of the queries, so it must outlive the attn_gguf. */
    attn_ctx *ctx;
    const unsigned char *image;
    size_t size;
    attn__fmap map; /* attn_gguf_open's mapping; zero for a borrowed image */
    uint32_t version, alignment;
    uint64_t data_off;
    char *strings; /* keys and tensor names, each NUL-terminated */
    size_t nstr, capstr;
    gg_kv *kv;
    size_t nkv;
    gg_kv **kv_by_key; /* sorted by key */
    gg_tensor *t;
    size_t nt;
    gg_tensor **t_by_name; /* sorted by name */
};

/* ---- the cursor ------------------------------------------------------------------------ */
typedef struct gg_cur {
    attn_gguf *g;
    size_t pos;       /* next byte to read; never past g->size */
    char where[200];  /* what is being read, for messages ("key 'general.name'") */
} gg_cur;

static uint64_t ld(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static size_t left(const gg_cur *c) { return c->g->size - c->pos; }

/* ATTN_E_FORMAT (or st) "GGUF: WHERE, at byte AT: WHY". */
static attn_status bad(const gg_cur *c, attn_status st, uint64_t at, const char *fmt, ...)
    ATTN__PRINTF(4, 5);
static attn_status bad(const gg_cur *c, attn_status st, uint64_t at, const char *fmt, ...) {
    char why[ATTN__MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return attn__fail(c->g->ctx, st, "GGUF %s, at byte %llu: %s", c->where,
                      (unsigned long long)at, why);
}

static attn_status rd(gg_cur *c, int n, const char *field, uint64_t *v) {
    if (left(c) < (size_t)n)
        return bad(c, ATTN_E_FORMAT, c->pos, "the file ends inside %s (%zu of %d bytes left)",
                   field, left(c), n);
    *v = ld(c->g->image + c->pos, n);
    c->pos += (size_t)n;
    return ATTN_OK;
}

static attn_status rd_u32(gg_cur *c, const char *field, uint32_t *v) {
    uint64_t x = 0;
    ATTN_TRY(rd(c, 4, field, &x));
    *v = (uint32_t)x;
    return ATTN_OK;
}

/* A string's length field and bytes: *at the offset of the bytes, *len their count. */
static attn_status rd_str(gg_cur *c, const char *field, size_t *at, size_t *len) {
    uint64_t n = 0, start = c->pos;
    ATTN_TRY(rd(c, 8, field, &n));
    if (n > left(c))
        return bad(c, ATTN_E_FORMAT, start,
                   "%s of %llu bytes runs past the end of the file (%zu bytes left)", field,
                   (unsigned long long)n, left(c));
    *at = c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return ATTN_OK;
}

/* Appends the bytes as a NUL-terminated string to the pool; *at its offset there. */
static attn_status pool_add(gg_cur *c, const unsigned char *p, size_t n, const char *field,
                            uint64_t at_byte, size_t *at) {
    attn_gguf *g = c->g;
    if (memchr(p, 0, n))
        return bad(c, ATTN_E_FORMAT, at_byte, "the %s holds a NUL byte", field);
    size_t need = n + 1; /* n < image size < SIZE_MAX */
    if (g->capstr - g->nstr < need) {
        size_t cap = g->capstr ? g->capstr : 256;
        while (cap - g->nstr < need) {
            if (cap > SIZE_MAX / 2)
                return attn__fail(g->ctx, ATTN_E_NOMEM, "GGUF: names too large to index");
            cap *= 2;
        }
        char *s = attn__malloc(g->ctx, cap);
        if (!s) return attn__fail(g->ctx, ATTN_E_NOMEM, "out of memory reading GGUF names");
        if (g->nstr) memcpy(s, g->strings, g->nstr);
        attn__free(g->ctx, g->strings);
        g->strings = s;
        g->capstr = cap;
    }
    memcpy(g->strings + g->nstr, p, n);
    g->strings[g->nstr + n] = 0;
    *at = g->nstr;
    g->nstr += need;
    return ATTN_OK;
}

/* ---- metadata -------------------------------------------------------------------------- */
static int is_int_type(int t) {
    return (t >= ATTN_GGUF_UINT8 && t <= ATTN_GGUF_INT32) || t == ATTN_GGUF_UINT64 ||
           t == ATTN_GGUF_INT64;
}

/* n scalars of type t at the cursor (n * size already bounded by the bytes left); a BOOL must
 * be 0 or 1.  array: 1 for an array's elements (named by index in a message). */
static attn_status skip_scalars(gg_cur *c, int t, uint64_t n, int array) {
    size_t bytes = (size_t)n * VSIZE[t];
    if (t == ATTN_GGUF_BOOL)
        for (size_t k = 0; k < bytes; k++) {
            unsigned b = c->g->image[c->pos + k];
            if (b > 1 && array)
                return bad(c, ATTN_E_FORMAT, c->pos + k,
                           "BOOL element %zu is %u (a BOOL is 0 or 1)", k, b);
            if (b > 1)
                return bad(c, ATTN_E_FORMAT, c->pos, "the BOOL value is %u (a BOOL is 0 or 1)",
                           b);
        }
    c->pos += bytes;
    return ATTN_OK;
}

static attn_status parse_value(gg_cur *c, gg_kv *kv) {
    attn_gguf *g = c->g;
    uint32_t t = 0;
    uint64_t type_at = c->pos;
    ATTN_TRY(rd_u32(c, "the value type", &t));
    if (t > ATTN_GGUF_FLOAT64)
        return bad(c, ATTN_E_FORMAT, type_at, "unknown value type %u (GGUF has 0 to 12)", t);
    kv->type = (int)t;
    kv->elem = -1;
    kv->val = c->pos;
    kv->n = 1;
    if (VSIZE[t]) {
        if (left(c) < VSIZE[t])
            return bad(c, ATTN_E_FORMAT, c->pos, "the file ends inside the %s value (%zu of %u "
                       "bytes left)", VNAME[t], left(c), (unsigned)VSIZE[t]);
        return skip_scalars(c, (int)t, 1, 0);
    }
    if (t == ATTN_GGUF_STRING) {
        size_t at = 0, len = 0;
        ATTN_TRY(rd_str(c, "the string value", &at, &len));
        kv->n = len;
        return ATTN_OK;
    }
    /* ARRAY */
    uint32_t e = 0;
    uint64_t n = 0, e_at = c->pos, n_at;
    ATTN_TRY(rd_u32(c, "the array's element type", &e));
    if (e == ATTN_GGUF_ARRAY)
        return bad(c, ATTN_E_UNSUPPORTED, e_at, "arrays of arrays are not supported");
    if (e > ATTN_GGUF_FLOAT64)
        return bad(c, ATTN_E_FORMAT, e_at, "unknown array element type %u (GGUF has 0 to 12)",
                   e);
    n_at = c->pos;
    ATTN_TRY(rd(c, 8, "the array's length", &n));
    unsigned min = VSIZE[e] ? VSIZE[e] : 8; /* a string takes at least its length field */
    if (n > left(c) / min)
        return bad(c, ATTN_E_FORMAT, n_at,
                   "an array of %llu %s elements needs at least %u bytes each, and %zu bytes "
                   "are left in the file",
                   (unsigned long long)n, VNAME[e], min, left(c));
    kv->elem = (int)e;
    kv->n = n;
    kv->val = c->pos;
    if (VSIZE[e]) return skip_scalars(c, (int)e, n, 1);
    /* strings: n + 1 offsets, at most the bytes left + 8 */
    size_t bytes;
    if (!attn__mul_size((size_t)n + 1, sizeof *kv->str_off, &bytes) ||
        !(kv->str_off = attn__malloc(g->ctx, bytes)))
        return attn__fail(g->ctx, ATTN_E_NOMEM, "out of memory indexing %llu GGUF strings",
                          (unsigned long long)n);
    for (uint64_t k = 0; k < n; k++) {
        kv->str_off[k] = c->pos;
        if (left(c) < 8)
            return bad(c, ATTN_E_FORMAT, c->pos, "the file ends inside the length of string "
                       "%llu of %llu (%zu of 8 bytes left)", (unsigned long long)k,
                       (unsigned long long)n, left(c));
        uint64_t len = ld(g->image + c->pos, 8);
        if (len > left(c) - 8)
            return bad(c, ATTN_E_FORMAT, c->pos, "string %llu of %llu, of %llu bytes, runs past "
                       "the end of the file (%zu bytes left)", (unsigned long long)k,
                       (unsigned long long)n, (unsigned long long)len, left(c) - 8);
        c->pos += 8 + (size_t)len;
    }
    kv->str_off[n] = c->pos;
    return ATTN_OK;
}

static int cmp_kv(const void *a, const void *b) {
    return strcmp((*(const gg_kv *const *)a)->key, (*(const gg_kv *const *)b)->key);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const gg_tensor *const *)a)->name, (*(const gg_tensor *const *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const gg_tensor *x = *(const gg_tensor *const *)a, *y = *(const gg_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

static attn_status parse_kvs(gg_cur *c) {
    attn_gguf *g = c->g;
    for (size_t i = 0; i < g->nkv; i++) {
        gg_kv *kv = &g->kv[i];
        snprintf(c->where, sizeof c->where, "metadata entry %zu", i);
        kv->offset = c->pos;
        size_t at = 0, len = 0;
        ATTN_TRY(rd_str(c, "the key", &at, &len));
        ATTN_TRY(pool_add(c, g->image + at, len, "key", kv->offset, &kv->key_at));
        snprintf(c->where, sizeof c->where, "key " NAME, g->strings + kv->key_at);
        ATTN_TRY(parse_value(c, kv));
    }
    return ATTN_OK;
}

/* Sorted keys, duplicates, general.alignment. */
static attn_status check_kvs(attn_gguf *g) {
    attn_ctx *ctx = g->ctx;
    for (size_t i = 0; i < g->nkv; i++) g->kv[i].key = g->strings + g->kv[i].key_at;
    if (g->nkv) {
        g->kv_by_key = attn__malloc(ctx, g->nkv * sizeof *g->kv_by_key);
        ATTN_FAIL_IF(!g->kv_by_key, ctx, ATTN_E_NOMEM, "out of memory indexing %zu GGUF keys",
                     g->nkv);
        for (size_t i = 0; i < g->nkv; i++) g->kv_by_key[i] = &g->kv[i];
        qsort(g->kv_by_key, g->nkv, sizeof *g->kv_by_key, cmp_kv);
        for (size_t i = 1; i < g->nkv; i++) {
            const gg_kv *a = g->kv_by_key[i - 1], *b = g->kv_by_key[i];
            if (strcmp(a->key, b->key) == 0) {
                if (a->offset > b->offset) a = b, b = g->kv_by_key[i - 1];
                return attn__fail(ctx, ATTN_E_FORMAT,
                                  "GGUF: key " NAME " appears twice (at bytes %llu and %llu)",
                                  a->key, (unsigned long long)a->offset,
                                  (unsigned long long)b->offset);
            }
        }
    }
    g->alignment = ATTN_GGUF_DEFAULT_ALIGNMENT;
    attn_gguf_kv kv;
    if (attn_gguf_kv_find(g, "general.alignment", &kv) == ATTN_OK) {
        ATTN_FAIL_IF(kv.type != ATTN_GGUF_UINT32, ctx, ATTN_E_FORMAT,
                     "GGUF: key 'general.alignment' at byte %llu is a %s; it must be a UINT32",
                     (unsigned long long)kv.offset, VNAME[kv.type]);
        int64_t a = 0;
        ATTN_TRY(attn_gguf_get_int(g, "general.alignment", 0, INT64_MAX, &a));
        ATTN_FAIL_IF(a < 1 || a > ATTN_GGUF_MAX_ALIGNMENT || (a & (a - 1)) != 0, ctx,
                     ATTN_E_FORMAT,
                     "GGUF: key 'general.alignment' at byte %llu is %lld; it must be a power "
                     "of two from 1 to %d",
                     (unsigned long long)kv.offset, (long long)a, ATTN_GGUF_MAX_ALIGNMENT);
        g->alignment = (uint32_t)a;
    }
    return ATTN_OK;
}

/* ---- tensors --------------------------------------------------------------------------- */
/* GGML types attn does not read, named in the refusal */
static const char *foreign_type(uint32_t t) {
    switch (t) {
    case 9: return " (Q8_1)";
    case 16: return " (IQ2_XXS)";
    case 17: return " (IQ2_XS)";
    case 18: return " (IQ3_XXS)";
    case 19: return " (IQ1_S)";
    case 21: return " (IQ3_S)";
    case 22: return " (IQ2_S)";
    case 24: return " (I8)";
    case 25: return " (I16)";
    case 26: return " (I32)";
    case 27: return " (I64)";
    case 28: return " (F64)";
    case 29: return " (IQ1_M)";
    case 34: return " (TQ1_0)";
    case 35: return " (TQ2_0)";
    case 39: return " (MXFP4)";
    default: return "";
    }
}

static attn_status parse_tensor(gg_cur *c, gg_tensor *t) {
    attn_gguf *g = c->g;
    size_t at = 0, len = 0;
    t->info = c->pos;
    ATTN_TRY(rd_str(c, "the name", &at, &len));
    ATTN_TRY(pool_add(c, g->image + at, len, "name", t->info, &t->name_at));
    snprintf(c->where, sizeof c->where, "tensor " NAME, g->strings + t->name_at);
    uint32_t nd = 0;
    uint64_t nd_at = c->pos;
    ATTN_TRY(rd_u32(c, "n_dims", &nd));
    if (nd < 1 || nd > ATTN_GGUF_MAX_DIMS)
        return bad(c, ATTN_E_FORMAT, nd_at, "n_dims is %u (GGUF tensors have 1 to %d)", nd,
                   ATTN_GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    int64_t numel = 1;
    for (int d = 0; d < ATTN_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t v = 0, v_at = c->pos;
        char field[32];
        snprintf(field, sizeof field, "ne[%d]", d);
        ATTN_TRY(rd(c, 8, field, &v));
        if (v > (uint64_t)INT64_MAX)
            return bad(c, ATTN_E_FORMAT, v_at, "ne[%d] is %llu, over 2^63 - 1", d,
                       (unsigned long long)v);
        t->ne[d] = (int64_t)v;
        if (!attn__mul_i64(numel, t->ne[d], &numel))
            return bad(c, ATTN_E_FORMAT, v_at, "the element count overflows at ne[%d] = %lld",
                       d, (long long)t->ne[d]);
    }
    t->numel = numel;
    uint32_t type = 0;
    uint64_t type_at = c->pos;
    ATTN_TRY(rd_u32(c, "the type", &type));
    int64_t be = 1, bb = 1;
    if (type > (uint32_t)INT32_MAX || attn_qtype_block((int)type, &be, &bb) != ATTN_OK)
        return bad(c, ATTN_E_UNSUPPORTED, type_at, "GGML type %u%s is not one attn reads", type,
                   foreign_type(type));
    t->type = (int)type;
    if (t->ne[0] % be != 0)
        return bad(c, ATTN_E_FORMAT, t->info,
                   "ne[0] = %lld is not a whole number of %s blocks of %lld elements",
                   (long long)t->ne[0], attn_qtype_name(t->type), (long long)be);
    int64_t nbytes = t->ne[0] / be;
    int ok = attn__mul_i64(nbytes, bb, &nbytes);
    for (int d = 1; d < t->n_dims && ok; d++) ok = attn__mul_i64(nbytes, t->ne[d], &nbytes);
    if (!ok)
        return bad(c, ATTN_E_FORMAT, t->info, "the byte size of %s ne = [%lld, %lld, %lld, %lld] "
                   "overflows", attn_qtype_name(t->type), (long long)t->ne[0],
                   (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    t->nbytes = (uint64_t)nbytes;
    ATTN_TRY(rd(c, 8, "the offset", &t->offset));
    return ATTN_OK;
}

/* Offsets against the data section, sorted names, duplicates, overlaps. */
static attn_status check_tensors(gg_cur *c) {
    attn_gguf *g = c->g;
    attn_ctx *ctx = g->ctx;
    uint64_t a = g->alignment, end = c->pos;
    g->data_off = end + (a - end % a) % a; /* end < 2^63, a <= 2^24: no overflow */
    /* the pool has its final place now: point the keys (set for check_kvs, before the
     * tensor names grew the pool) and the names into it */
    for (size_t i = 0; i < g->nkv; i++) g->kv[i].key = g->strings + g->kv[i].key_at;
    for (size_t i = 0; i < g->nt; i++) g->t[i].name = g->strings + g->t[i].name_at;
    if (g->nt == 0) return ATTN_OK;
    ATTN_FAIL_IF(g->data_off > g->size, ctx, ATTN_E_FORMAT,
                 "GGUF: the data section would start at byte %llu (the tensor descriptions end "
                 "at byte %llu, aligned to %u), past the end of the %zu-byte file",
                 (unsigned long long)g->data_off, (unsigned long long)end, g->alignment, g->size);
    uint64_t data_size = g->size - g->data_off;
    for (size_t i = 0; i < g->nt; i++) {
        const gg_tensor *t = &g->t[i];
        ATTN_FAIL_IF(t->offset % a != 0, ctx, ATTN_E_FORMAT,
                     "GGUF tensor " NAME " (description at byte %llu): offset %llu is not a "
                     "multiple of the alignment %u",
                     t->name, (unsigned long long)t->info, (unsigned long long)t->offset,
                     g->alignment);
        ATTN_FAIL_IF(t->offset > data_size || t->nbytes > data_size - t->offset, ctx,
                     ATTN_E_FORMAT,
                     "GGUF tensor " NAME " (description at byte %llu): its %llu bytes at offset "
                     "%llu run past the end of the %llu-byte data section (file bytes %llu to "
                     "%zu)",
                     t->name, (unsigned long long)t->info, (unsigned long long)t->nbytes,
                     (unsigned long long)t->offset, (unsigned long long)data_size,
                     (unsigned long long)g->data_off, g->size);
    }
    g->t_by_name = attn__malloc(ctx, g->nt * sizeof *g->t_by_name);
    gg_tensor **tmp = attn__malloc(ctx, g->nt * sizeof *tmp);
    if (!g->t_by_name || !tmp) {
        attn__free(ctx, tmp);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory indexing %zu GGUF tensors", g->nt);
    }
    for (size_t i = 0; i < g->nt; i++) g->t_by_name[i] = tmp[i] = &g->t[i];
    qsort(g->t_by_name, g->nt, sizeof *g->t_by_name, cmp_tensor_name);
    attn_status st = ATTN_OK;
    for (size_t i = 1; i < g->nt && !st; i++) {
        const gg_tensor *x = g->t_by_name[i - 1], *y = g->t_by_name[i];
        if (strcmp(x->name, y->name) == 0) {
            if (x->info > y->info) x = y, y = g->t_by_name[i - 1];
            st = attn__fail(ctx, ATTN_E_FORMAT,
                            "GGUF: tensor name " NAME " appears twice (descriptions at bytes "
                            "%llu and %llu)",
                            x->name, (unsigned long long)x->info, (unsigned long long)y->info);
        }
    }
    if (!st) {
        qsort(tmp, g->nt, sizeof *tmp, cmp_tensor_offset);
        const gg_tensor *reach = NULL; /* the non-empty tensor ending furthest so far */
        for (size_t i = 0; i < g->nt && !st; i++) {
            const gg_tensor *t = tmp[i];
            if (t->nbytes == 0) continue; /* empty: occupies no bytes */
            if (reach && t->offset < reach->offset + reach->nbytes)
                st = attn__fail(ctx, ATTN_E_FORMAT,
                                "GGUF: tensors " NAME " (data offsets %llu to %llu) and " NAME
                                " (%llu to %llu) overlap",
                                reach->name, (unsigned long long)reach->offset,
                                (unsigned long long)(reach->offset + reach->nbytes), t->name,
                                (unsigned long long)t->offset,
                                (unsigned long long)(t->offset + t->nbytes));
            if (!reach || t->offset + t->nbytes > reach->offset + reach->nbytes) reach = t;
        }
    }
    attn__free(ctx, tmp);
    return st;
}

/* ---- the whole file -------------------------------------------------------------------- */
static attn_status parse(attn_gguf *g) {
    attn_ctx *ctx = g->ctx;
    gg_cur cur = {g, 0, "header"}, *c = &cur;
    ATTN_FAIL_IF(g->size < 4, ctx, ATTN_E_FORMAT,
                 "GGUF: the file is %zu bytes, too short for the magic 'GGUF'", g->size);
    if (memcmp(g->image, "GGUF", 4) != 0) {
        char shown[20];
        size_t k = 0;
        for (int i = 0; i < 4; i++) {
            unsigned char b = g->image[i];
            if (b >= 0x20 && b < 0x7f && b != '\\') shown[k++] = (char)b;
            else k += (size_t)snprintf(shown + k, sizeof shown - k, "\\x%02x", b);
        }
        shown[k] = 0;
        return attn__fail(ctx, ATTN_E_FORMAT,
                          "not a GGUF file: it starts with '%s', not the magic 'GGUF'", shown);
    }
    c->pos = 4;
    uint32_t v = 0;
    ATTN_TRY(rd_u32(c, "the version", &v));
    uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
    if (v == 1)
        return bad(c, ATTN_E_UNSUPPORTED, 4,
                   "GGUF version 1 is not supported (attn reads versions 2 and 3)");
    if (v != 2 && v != 3 && swapped >= 1 && swapped <= 3)
        return bad(c, ATTN_E_UNSUPPORTED, 4,
                   "a big-endian GGUF file (version %u byte-swapped); attn reads little-endian "
                   "files only", swapped);
    if (v == 0) return bad(c, ATTN_E_FORMAT, 4, "version 0 is not a GGUF version");
    if (v > 3)
        return bad(c, ATTN_E_UNSUPPORTED, 4,
                   "GGUF version %u is not supported (attn reads versions 2 and 3)", v);
    g->version = v;
    uint64_t nt = 0, nkv = 0;
    ATTN_TRY(rd(c, 8, "tensor_count", &nt));
    ATTN_TRY(rd(c, 8, "kv_count", &nkv));
    size_t rest = left(c);
    if (nt > rest / GG_MIN_TENSOR)
        return bad(c, ATTN_E_FORMAT, 8,
                   "tensor_count %llu cannot fit: a tensor description takes at least %u bytes "
                   "and the file has %zu bytes after its %u-byte header",
                   (unsigned long long)nt, GG_MIN_TENSOR, rest, GG_HEADER);
    if (nkv > rest / GG_MIN_KV)
        return bad(c, ATTN_E_FORMAT, 16,
                   "kv_count %llu cannot fit: a metadata entry takes at least %u bytes and the "
                   "file has %zu bytes after its %u-byte header",
                   (unsigned long long)nkv, GG_MIN_KV, rest, GG_HEADER);
    if (nt * GG_MIN_TENSOR + nkv * GG_MIN_KV > rest) /* each product <= rest: no overflow */
        return bad(c, ATTN_E_FORMAT, 8,
                   "%llu tensor descriptions and %llu metadata entries cannot fit in the %zu "
                   "bytes after the header",
                   (unsigned long long)nt, (unsigned long long)nkv, rest);
    /* the tables below are at most a few times the file's size */
    if (nkv) {
        g->kv = attn__calloc(ctx, (size_t)nkv, sizeof *g->kv);
        ATTN_FAIL_IF(!g->kv, ctx, ATTN_E_NOMEM, "out of memory for %llu GGUF metadata entries",
                     (unsigned long long)nkv);
    }
    g->nkv = (size_t)nkv;
    ATTN_TRY(parse_kvs(c));
    ATTN_TRY(check_kvs(g));
    if (nt) {
        g->t = attn__calloc(ctx, (size_t)nt, sizeof *g->t);
        ATTN_FAIL_IF(!g->t, ctx, ATTN_E_NOMEM, "out of memory for %llu GGUF tensors",
                     (unsigned long long)nt);
    }
    g->nt = (size_t)nt;
    for (size_t i = 0; i < g->nt; i++) {
        snprintf(c->where, sizeof c->where, "tensor %zu", i);
        ATTN_TRY(parse_tensor(c, &g->t[i]));
    }
    return check_tensors(c);
}

void attn_gguf_free(attn_gguf *g) {
    if (!g) return;
    attn_ctx *ctx = g->ctx;
    if (g->kv)
        for (size_t i = 0; i < g->nkv; i++) attn__free(ctx, g->kv[i].str_off);
    attn__free(ctx, g->kv);
    attn__free(ctx, g->kv_by_key);
    attn__free(ctx, g->t);
    attn__free(ctx, g->t_by_name);
    attn__free(ctx, g->strings);
    attn__file_unmap(ctx, &g->map);
    attn__free(ctx, g);
}

/* Takes the mapping (zero for a borrowed image) whatever the outcome. */
static attn_status from_image(attn_ctx *ctx, const unsigned char *image, size_t size,
                              attn__fmap *map, attn_gguf **out) {
    attn_gguf *g = attn__calloc(ctx, 1, sizeof *g);
    if (!g) {
        attn__file_unmap(ctx, map);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory");
    }
    g->ctx = ctx;
    g->image = image;
    g->size = size;
    g->map = *map;
    memset(map, 0, sizeof *map);
    attn_status st = parse(g);
    if (st) {
        attn_gguf_free(g);
        return st;
    }
    *out = g;
    return ATTN_OK;
}

attn_status attn_gguf_read_memory(attn_ctx *ctx, const void *data, size_t size,
                                  attn_gguf **out) {
    if (!out) return attn__fail(ctx, ATTN_E_INVALID, "attn_gguf_read_memory: out is NULL");
    *out = NULL;
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!data && size, ctx, ATTN_E_INVALID, "attn_gguf_read_memory: data is NULL");
    static const unsigned char nothing[1];
    attn__fmap none;
    memset(&none, 0, sizeof none);
    return from_image(ctx, data ? data : nothing, size, &none, out);
}

static attn_status open_file(attn_ctx *ctx, const char *path, int read, attn_gguf **out) {
    if (!out) return attn__fail(ctx, ATTN_E_INVALID, "attn_gguf_open: out is NULL");
    *out = NULL;
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path, ctx, ATTN_E_INVALID, "attn_gguf_open: path is NULL");
    attn__fmap map;
    ATTN_TRY(read ? attn__file_map_read(ctx, path, "GGUF file", 0, &map)
                  : attn__file_map(ctx, path, "GGUF file", 0, &map));
    static const unsigned char nothing[1];
    attn_status st = from_image(ctx, map.data ? map.data : nothing, map.len, &map, out);
    if (st) attn__fail(ctx, st, "%.300s: %s", path, attn_ctx_errmsg(ctx)); /* say which file */
    return st;
}

attn_status attn_gguf_open(attn_ctx *ctx, const char *path, attn_gguf **out) {
    return open_file(ctx, path, 0, out);
}

attn_status attn_gguf_read(attn_ctx *ctx, const char *path, attn_gguf **out) {
    return open_file(ctx, path, 1, out);
}

/* ---- queries --------------------------------------------------------------------------- */
const char *attn_gguf_type_name(int type) {
    return type >= 0 && type <= ATTN_GGUF_FLOAT64 ? VNAME[type] : NULL;
}

uint32_t attn_gguf_version(const attn_gguf *g) { return g ? g->version : 0; }
uint32_t attn_gguf_alignment(const attn_gguf *g) { return g ? g->alignment : 0; }
uint64_t attn_gguf_data_offset(const attn_gguf *g) { return g ? g->data_off : 0; }
size_t attn_gguf_kv_count(const attn_gguf *g) { return g ? g->nkv : 0; }
size_t attn_gguf_tensor_count(const attn_gguf *g) { return g ? g->nt : 0; }

static void fill_kv(const attn_gguf *g, const gg_kv *k, attn_gguf_kv *kv) {
    memset(kv, 0, sizeof *kv);
    kv->key = k->key;
    kv->type = k->type;
    kv->elem_type = k->elem;
    kv->n = k->n;
    kv->offset = k->offset;
    if (k->type == ATTN_GGUF_STRING) kv->data = g->image + k->val + 8;
    else if (k->elem != ATTN_GGUF_STRING) kv->data = g->image + k->val;
}

attn_status attn_gguf_kv_at(const attn_gguf *g, size_t i, attn_gguf_kv *kv) {
    if (!g) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!kv, g->ctx, ATTN_E_INVALID, "attn_gguf_kv_at: kv is NULL");
    ATTN_FAIL_IF(i >= g->nkv, g->ctx, ATTN_E_INVALID,
                 "attn_gguf_kv_at: index %zu out of range (%zu entries)", i, g->nkv);
    fill_kv(g, &g->kv[i], kv);
    return ATTN_OK;
}

static const gg_kv *lookup(const attn_gguf *g, const char *key) {
    size_t lo = 0, hi = g->nkv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kv_by_key[mid]->key, key);
        if (c == 0) return g->kv_by_key[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

attn_status attn_gguf_kv_find(const attn_gguf *g, const char *key, attn_gguf_kv *kv) {
    if (!g) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!key || !kv, g->ctx, ATTN_E_INVALID, "attn_gguf_kv_find: key or kv is NULL");
    const gg_kv *k = lookup(g, key);
    if (!k) return ATTN_E_NOT_FOUND; /* callers probe optional keys */
    fill_kv(g, k, kv);
    return ATTN_OK;
}

/* The entry for a getter: present (ATTN_E_NOT_FOUND with a message) and of a type that
 * `accept` takes (ATTN_E_FORMAT naming `want`). */
static attn_status get(const attn_gguf *g, const char *fn, const char *key, int (*accept)(int),
                       const char *want, const gg_kv **out) {
    if (!g) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!key, g->ctx, ATTN_E_INVALID, "%s: key is NULL", fn);
    const gg_kv *k = lookup(g, key);
    ATTN_FAIL_IF(!k, g->ctx, ATTN_E_NOT_FOUND, "GGUF key " NAME " not found", key);
    ATTN_FAIL_IF(!accept(k->type), g->ctx, ATTN_E_FORMAT,
                 "GGUF key " NAME " (at byte %llu) is a %s, not %s", key,
                 (unsigned long long)k->offset, VNAME[k->type], want);
    *out = k;
    return ATTN_OK;
}

/* An array's element i: the entry (ATTN_E_FORMAT if not an ARRAY of what accept takes) and
 * the index in range (ATTN_E_INVALID). */
static attn_status get_elem(const attn_gguf *g, const char *fn, const char *key, uint64_t i,
                            int (*accept)(int), const char *want, const gg_kv **out) {
    if (!g) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!key, g->ctx, ATTN_E_INVALID, "%s: key is NULL", fn);
    const gg_kv *k = lookup(g, key);
    ATTN_FAIL_IF(!k, g->ctx, ATTN_E_NOT_FOUND, "GGUF key " NAME " not found", key);
    ATTN_FAIL_IF(k->type != ATTN_GGUF_ARRAY, g->ctx, ATTN_E_FORMAT,
                 "GGUF key " NAME " (at byte %llu) is a %s, not an array", key,
                 (unsigned long long)k->offset, VNAME[k->type]);
    ATTN_FAIL_IF(!accept(k->elem), g->ctx, ATTN_E_FORMAT,
                 "GGUF key " NAME " (at byte %llu) is an array of %s, not of %s", key,
                 (unsigned long long)k->offset, VNAME[k->elem], want);
    ATTN_FAIL_IF(i >= k->n, g->ctx, ATTN_E_INVALID,
                 "%s: index %llu out of range (GGUF key " NAME " has %llu elements)", fn,
                 (unsigned long long)i, key, (unsigned long long)k->n);
    *out = k;
    return ATTN_OK;
}

static int acc_int(int t) { return is_int_type(t); }
static int acc_float(int t) {
    return t == ATTN_GGUF_FLOAT32 || t == ATTN_GGUF_FLOAT64 || is_int_type(t);
}
static int acc_bool(int t) { return t == ATTN_GGUF_BOOL; }
static int acc_str(int t) { return t == ATTN_GGUF_STRING; }
static int acc_arr(int t) { return t == ATTN_GGUF_ARRAY; }

/* An integer of type t at p: 0 when it is a UINT64 above INT64_MAX. */
static int load_int(const unsigned char *p, int t, int64_t *v) {
    uint64_t u = ld(p, VSIZE[t]);
    switch (t) {
    case ATTN_GGUF_INT8: *v = (int64_t)(int8_t)(uint8_t)u; return 1;
    case ATTN_GGUF_INT16: *v = (int64_t)(int16_t)(uint16_t)u; return 1;
    case ATTN_GGUF_INT32: *v = (int64_t)(int32_t)(uint32_t)u; return 1;
    case ATTN_GGUF_INT64: memcpy(v, &u, sizeof *v); return 1; /* two's complement, no UB */
    case ATTN_GGUF_UINT64:
        if (u > (uint64_t)INT64_MAX) return 0;
        *v = (int64_t)u;
        return 1;
    default: *v = (int64_t)u; return 1; /* UINT8, UINT16, UINT32 */
    }
}

static double load_float(const unsigned char *p, int t) {
    if (t == ATTN_GGUF_FLOAT32) {
        uint32_t b = (uint32_t)ld(p, 4);
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    if (t == ATTN_GGUF_FLOAT64) {
        uint64_t b = ld(p, 8);
        double d;
        memcpy(&d, &b, sizeof d);
        return d;
    }
    if (t == ATTN_GGUF_UINT64) return (double)ld(p, 8);
    int64_t v;
    load_int(p, t, &v);
    return (double)v;
}

/* The integer at p, of type t, checked against [lo, hi]; `what` names it in the message. */
static attn_status int_in_range(const attn_gguf *g, const unsigned char *p, int t, int64_t lo,
                                int64_t hi, const char *what, const char *key, int64_t *v) {
    int64_t x;
    if (!load_int(p, t, &x))
        return attn__fail(g->ctx, ATTN_E_FORMAT,
                          "GGUF key " NAME ": %s %llu is outside [%lld, %lld]", key, what,
                          (unsigned long long)ld(p, 8), (long long)lo, (long long)hi);
    ATTN_FAIL_IF(x < lo || x > hi, g->ctx, ATTN_E_FORMAT,
                 "GGUF key " NAME ": %s %lld is outside [%lld, %lld]", key, what, (long long)x,
                 (long long)lo, (long long)hi);
    *v = x;
    return ATTN_OK;
}

attn_status attn_gguf_get_int(const attn_gguf *g, const char *key, int64_t lo, int64_t hi,
                              int64_t *v) {
    const gg_kv *k = NULL;
    ATTN_TRY(get(g, "attn_gguf_get_int", key, acc_int, "an integer", &k));
    ATTN_FAIL_IF(!v, g->ctx, ATTN_E_INVALID, "attn_gguf_get_int: v is NULL");
    return int_in_range(g, g->image + k->val, k->type, lo, hi, "the value", key, v);
}

attn_status attn_gguf_get_float(const attn_gguf *g, const char *key, double *v) {
    const gg_kv *k = NULL;
    ATTN_TRY(get(g, "attn_gguf_get_float", key, acc_float, "a number", &k));
    ATTN_FAIL_IF(!v, g->ctx, ATTN_E_INVALID, "attn_gguf_get_float: v is NULL");
    *v = load_float(g->image + k->val, k->type);
    return ATTN_OK;
}

attn_status attn_gguf_get_bool(const attn_gguf *g, const char *key, int *v) {
    const gg_kv *k = NULL;
    ATTN_TRY(get(g, "attn_gguf_get_bool", key, acc_bool, "a BOOL", &k));
    ATTN_FAIL_IF(!v, g->ctx, ATTN_E_INVALID, "attn_gguf_get_bool: v is NULL");
    *v = g->image[k->val] != 0;
    return ATTN_OK;
}

attn_status attn_gguf_get_str(const attn_gguf *g, const char *key, const char **s,
                              size_t *len) {
    const gg_kv *k = NULL;
    ATTN_TRY(get(g, "attn_gguf_get_str", key, acc_str, "a STRING", &k));
    ATTN_FAIL_IF(!s || !len, g->ctx, ATTN_E_INVALID, "attn_gguf_get_str: s or len is NULL");
    *s = (const char *)g->image + k->val + 8;
    *len = (size_t)k->n;
    return ATTN_OK;
}

attn_status attn_gguf_get_str_copy(const attn_gguf *g, const char *key, char *buf, size_t cap,
                                   size_t *len) {
    const gg_kv *k = NULL;
    ATTN_TRY(get(g, "attn_gguf_get_str_copy", key, acc_str, "a STRING", &k));
    ATTN_FAIL_IF(!buf || cap == 0, g->ctx, ATTN_E_INVALID,
                 "attn_gguf_get_str_copy: no buffer (buf NULL or cap 0)");
    size_t n = (size_t)k->n;
    if (len) *len = n;
    size_t m = n < cap - 1 ? n : cap - 1;
    memcpy(buf, g->image + k->val + 8, m);
    buf[m] = 0;
    ATTN_FAIL_IF(m < n, g->ctx, ATTN_E_INVALID,
                 "attn_gguf_get_str_copy: GGUF key " NAME " holds %zu bytes; the buffer of %zu "
                 "bytes needs room for them and a NUL",
                 key, n, cap);
    return ATTN_OK;
}

attn_status attn_gguf_get_arr(const attn_gguf *g, const char *key, int *elem_type, uint64_t *n,
                              const void **data) {
    const gg_kv *k = NULL;
    ATTN_TRY(get(g, "attn_gguf_get_arr", key, acc_arr, "an array", &k));
    if (elem_type) *elem_type = k->elem;
    if (n) *n = k->n;
    if (data) *data = k->elem == ATTN_GGUF_STRING ? NULL : g->image + k->val;
    return ATTN_OK;
}

attn_status attn_gguf_arr_int(const attn_gguf *g, const char *key, uint64_t i, int64_t lo,
                              int64_t hi, int64_t *v) {
    const gg_kv *k = NULL;
    ATTN_TRY(get_elem(g, "attn_gguf_arr_int", key, i, acc_int, "integers", &k));
    ATTN_FAIL_IF(!v, g->ctx, ATTN_E_INVALID, "attn_gguf_arr_int: v is NULL");
    char what[48];
    snprintf(what, sizeof what, "element %llu", (unsigned long long)i);
    return int_in_range(g, g->image + k->val + i * VSIZE[k->elem], k->elem, lo, hi, what, key,
                        v);
}

attn_status attn_gguf_arr_float(const attn_gguf *g, const char *key, uint64_t i, double *v) {
    const gg_kv *k = NULL;
    ATTN_TRY(get_elem(g, "attn_gguf_arr_float", key, i, acc_float, "numbers", &k));
    ATTN_FAIL_IF(!v, g->ctx, ATTN_E_INVALID, "attn_gguf_arr_float: v is NULL");
    *v = load_float(g->image + k->val + i * VSIZE[k->elem], k->elem);
    return ATTN_OK;
}

attn_status attn_gguf_arr_str(const attn_gguf *g, const char *key, uint64_t i, const char **s,
                              size_t *len) {
    const gg_kv *k = NULL;
    ATTN_TRY(get_elem(g, "attn_gguf_arr_str", key, i, acc_str, "STRINGs", &k));
    ATTN_FAIL_IF(!s || !len, g->ctx, ATTN_E_INVALID, "attn_gguf_arr_str: s or len is NULL");
    *s = (const char *)g->image + k->str_off[i] + 8;
    *len = (size_t)(k->str_off[i + 1] - k->str_off[i] - 8);
    return ATTN_OK;
}

static void fill_tensor(const attn_gguf *g, const gg_tensor *t, attn_gguf_tensor *o) {
    memset(o, 0, sizeof *o);
    o->name = t->name;
    o->type = t->type;
    o->n_dims = t->n_dims;
    for (int d = 0; d < ATTN_GGUF_MAX_DIMS; d++) {
        o->ne[d] = t->ne[d];
        o->shape[d] = d < t->n_dims ? t->ne[t->n_dims - 1 - d] : 1;
    }
    o->numel = t->numel;
    o->nbytes = (size_t)t->nbytes;
    o->offset = t->offset;
    o->file_offset = g->data_off + t->offset;
    /* offset + nbytes <= the data section: inside the image (one past its end when empty) */
    o->data = g->image + (size_t)o->file_offset;
}

attn_status attn_gguf_tensor_at(const attn_gguf *g, size_t i, attn_gguf_tensor *t) {
    if (!g) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!t, g->ctx, ATTN_E_INVALID, "attn_gguf_tensor_at: t is NULL");
    ATTN_FAIL_IF(i >= g->nt, g->ctx, ATTN_E_INVALID,
                 "attn_gguf_tensor_at: index %zu out of range (%zu tensors)", i, g->nt);
    fill_tensor(g, &g->t[i], t);
    return ATTN_OK;
}

attn_status attn_gguf_tensor_find(const attn_gguf *g, const char *name, attn_gguf_tensor *t) {
    if (!g) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!name || !t, g->ctx, ATTN_E_INVALID,
                 "attn_gguf_tensor_find: name or t is NULL");
    size_t lo = 0, hi = g->nt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->t_by_name[mid]->name, name);
        if (c == 0) {
            fill_tensor(g, g->t_by_name[mid], t);
            return ATTN_OK;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return ATTN_E_NOT_FOUND;
}

/* ---- raw entries, for writers that copy them (src/io/gguf_write.c) ------------------------ */
attn_status attn__gguf_kv_raw(const attn_gguf *g, size_t i, const void **p, size_t *n) {
    if (!g) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!p || !n || i >= g->nkv, g->ctx, ATTN_E_INVALID,
                 "attn__gguf_kv_raw: bad arguments (entry %zu of %zu)", i, g->nkv);
    const gg_kv *k = &g->kv[i];
    uint64_t end;
    if (k->type == ATTN_GGUF_STRING) end = k->val + 8 + k->n;
    else if (k->type != ATTN_GGUF_ARRAY) end = k->val + VSIZE[k->type];
    else if (k->elem == ATTN_GGUF_STRING) end = k->str_off[k->n];
    else end = k->val + k->n * VSIZE[k->elem]; /* bounded by the image at the parse */
    *p = g->image + k->offset;
    *n = (size_t)(end - k->offset);
    return ATTN_OK;
}
