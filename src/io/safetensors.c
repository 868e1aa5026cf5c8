/* Safetensors reader: validation of the header against the file, lookups, and conversion of
 * any numeric dtype to F32.
 *
 * The whole file is copied into one owned buffer, so tensor data pointers stay valid for the
 * life of the attn_st and never depend on the caller's memory.  Every number in the header is
 * checked before it is used to form a pointer: a hostile file can only earn ATTN_E_FORMAT.
 *
 * Deliberate leniency: the reference implementation also requires the tensors to tile the
 * data section with no gaps and no trailing bytes.  Gaps cannot cause an out-of-bounds read,
 * so they are accepted here; overlaps are refused because two tensors sharing bytes is almost
 * certainly a corrupt or malicious file.  attn's writer never leaves gaps.
 */
#include <errno.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "file.h"
#include "json.h"

/* The reference implementation's limit; it bounds the memory a hostile header can claim. */
#define ST_MAX_HEADER 100000000u
/* Names in messages are cut so that the rest of the message survives ATTN__MSG_MAX. */
#define NAME "'%.160s'"

typedef struct st_entry {
    const char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* relative to the data section */
    const unsigned char *base; /* the data section of the file that holds it */
} st_entry;

typedef struct st_meta {
    const char *key, *value;
} st_meta;

struct attn_st {
    /* The context that created the attn_st: its allocator frees it and its message slot
     * takes errors from calls without a ctx argument, so it must outlive the attn_st. */
    attn_ctx *ctx;
    unsigned char *image; /* owned copy of the whole file */
    size_t size;
    size_t data_start;    /* 8 + header length */
    char *strings;        /* decoded names and metadata */
    st_entry *entries;    /* header order */
    size_t count, cap;
    st_entry **by_name;   /* sorted by name, for attn_st_find */
    st_meta *meta;        /* header order */
    size_t nmeta, capmeta;
    /* a sharded checkpoint (attn_st_read_index): the shards, owned; image, strings and meta
     * stay NULL and entries point into the shards' */
    attn_st **parts;
    size_t nparts;
};

/* ---- small helpers --------------------------------------------------------------------- */
static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* dtypes of the safetensors format that attn does not handle, for a precise message */
static const char *const st_foreign_dtypes[] = {"I16", "U16", "U32", "U64", "F8_E4M3",
                                                "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3",
                                                "F6_E3M2", "C64"};

static attn_status parse_dtype(attn_ctx *ctx, const char *name, const char *s, attn_dtype *out) {
    for (int d = 0; d <= (int)ATTN_BOOL; d++) {
        const char *n = attn_dtype_name((attn_dtype)d);
        if (n && strcmp(n, s) == 0) {
            *out = (attn_dtype)d;
            return ATTN_OK;
        }
    }
    for (size_t i = 0; i < sizeof st_foreign_dtypes / sizeof *st_foreign_dtypes; i++)
        if (strcmp(st_foreign_dtypes[i], s) == 0)
            return attn__fail(ctx, ATTN_E_DTYPE,
                              "tensor " NAME " has dtype %s, which attn does not support "
                              "(F64 F32 F16 BF16 I64 I32 I8 U8 BOOL)",
                              name, s);
    return attn__fail(ctx, ATTN_E_DTYPE, "tensor " NAME " has unknown dtype '%.40s'", name, s);
}

/* An integer of the header; on failure the JSON reader's message gains the tensor's name. */
static attn_status read_int(attn__json_reader *r, const char *name, const char *field,
                            int64_t *v) {
    attn__json_kind k;
    attn_status st = attn__json_peek(r, &k);
    if (st) return st;
    if (k != ATTN__JSON_NUMBER)
        return attn__fail(r->ctx, ATTN_E_FORMAT,
                          "tensor " NAME ": %s entries must be integers, found %s", name, field,
                          attn__json_kind_name(k));
    st = attn__json_int(r, v);
    if (st) {
        /* "safetensors header: at byte 37: integer out of range" -> name the tensor instead */
        char why[ATTN__MSG_MAX];
        const char *m = attn_ctx_errmsg(r->ctx);
        size_t wl = strlen(r->what);
        if (strncmp(m, r->what, wl) == 0 && m[wl] == ':' && m[wl + 1] == ' ') m += wl + 2;
        snprintf(why, sizeof why, "%s", m);
        return attn__fail(r->ctx, st, "tensor " NAME ": %s: %s", name, field, why);
    }
    if (*v < 0)
        return attn__fail(r->ctx, ATTN_E_FORMAT,
                          "tensor " NAME ": %s holds a negative value (%lld)", name, field,
                          (long long)*v);
    return ATTN_OK;
}

/* ---- header parsing -------------------------------------------------------------------- */
static attn_status parse_tensor(attn__json_reader *r, const char *name, st_entry *e,
                                uint64_t data_size) {
    attn_ctx *ctx = r->ctx;
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k != ATTN__JSON_OBJECT)
        return attn__fail(ctx, ATTN_E_FORMAT, "tensor " NAME ": expected an object, found %s",
                          name, attn__json_kind_name(k));
    ATTN_TRY(attn__json_object_begin(r));
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    int64_t off[2] = {0, 0};
    memset(e, 0, sizeof *e);
    e->name = name;
    for (;;) {
        int more;
        const char *key;
        size_t klen;
        ATTN_TRY(attn__json_member(r, &more, &key, &klen));
        if (!more) break;
        if (klen == 5 && memcmp(key, "dtype", 5) == 0) {
            ATTN_FAIL_IF(have_dtype, ctx, ATTN_E_FORMAT, "tensor " NAME " has two dtype fields",
                         name);
            have_dtype = 1;
            ATTN_TRY(attn__json_peek(r, &k));
            ATTN_FAIL_IF(k != ATTN__JSON_STRING, ctx, ATTN_E_FORMAT,
                         "tensor " NAME ": dtype must be a string, found %s", name,
                         attn__json_kind_name(k));
            const char *s;
            size_t n;
            ATTN_TRY(attn__json_string(r, &s, &n));
            ATTN_TRY(parse_dtype(ctx, name, s, &e->dtype));
        } else if (klen == 5 && memcmp(key, "shape", 5) == 0) {
            ATTN_FAIL_IF(have_shape, ctx, ATTN_E_FORMAT, "tensor " NAME " has two shape fields",
                         name);
            have_shape = 1;
            ATTN_TRY(attn__json_peek(r, &k));
            ATTN_FAIL_IF(k != ATTN__JSON_ARRAY, ctx, ATTN_E_FORMAT,
                         "tensor " NAME ": shape must be an array, found %s", name,
                         attn__json_kind_name(k));
            ATTN_TRY(attn__json_array_begin(r));
            for (;;) {
                ATTN_TRY(attn__json_element(r, &more));
                if (!more) break;
                ATTN_FAIL_IF(e->ndim == ATTN_ST_MAX_DIMS, ctx, ATTN_E_FORMAT,
                             "tensor " NAME " has more than %d dimensions", name,
                             ATTN_ST_MAX_DIMS);
                ATTN_TRY(read_int(r, name, "shape", &e->shape[e->ndim]));
                e->ndim++;
            }
        } else if (klen == 12 && memcmp(key, "data_offsets", 12) == 0) {
            ATTN_FAIL_IF(have_offsets, ctx, ATTN_E_FORMAT,
                         "tensor " NAME " has two data_offsets fields", name);
            have_offsets = 1;
            ATTN_TRY(attn__json_peek(r, &k));
            ATTN_FAIL_IF(k != ATTN__JSON_ARRAY, ctx, ATTN_E_FORMAT,
                         "tensor " NAME ": data_offsets must be an array, found %s", name,
                         attn__json_kind_name(k));
            ATTN_TRY(attn__json_array_begin(r));
            int n = 0;
            for (;;) {
                ATTN_TRY(attn__json_element(r, &more));
                if (!more) break;
                ATTN_FAIL_IF(n == 2, ctx, ATTN_E_FORMAT,
                             "tensor " NAME ": data_offsets has more than 2 entries", name);
                ATTN_TRY(read_int(r, name, "data_offsets", &off[n]));
                n++;
            }
            ATTN_FAIL_IF(n != 2, ctx, ATTN_E_FORMAT,
                         "tensor " NAME ": data_offsets has %d entries, expected 2", name, n);
        } else {
            return attn__fail(ctx, ATTN_E_FORMAT, "tensor " NAME " has an unknown field '%.60s'",
                              name, key);
        }
    }
    ATTN_FAIL_IF(!have_dtype, ctx, ATTN_E_FORMAT, "tensor " NAME " has no dtype", name);
    ATTN_FAIL_IF(!have_shape, ctx, ATTN_E_FORMAT, "tensor " NAME " has no shape", name);
    ATTN_FAIL_IF(!have_offsets, ctx, ATTN_E_FORMAT, "tensor " NAME " has no data_offsets", name);

    char sbuf[200];
    int64_t numel = 1, nbytes;
    for (int d = 0; d < e->ndim; d++)
        ATTN_FAIL_IF(!attn__mul_i64(numel, e->shape[d], &numel), ctx, ATTN_E_FORMAT,
                     "tensor " NAME ": the element count of shape %s overflows", name,
                     attn__dims_str(e->shape, e->ndim, sbuf, sizeof sbuf));
    ATTN_FAIL_IF(!attn__mul_i64(numel, (int64_t)attn_dtype_size(e->dtype), &nbytes), ctx,
                 ATTN_E_FORMAT, "tensor " NAME ": the byte size of %s shape %s overflows", name,
                 attn_dtype_name(e->dtype), attn__dims_str(e->shape, e->ndim, sbuf, sizeof sbuf));
    e->numel = numel;
    e->begin = (uint64_t)off[0];
    e->end = (uint64_t)off[1];
    ATTN_FAIL_IF(e->begin > e->end, ctx, ATTN_E_FORMAT,
                 "tensor " NAME ": data_offsets [%llu, %llu] end before they begin", name,
                 (unsigned long long)e->begin, (unsigned long long)e->end);
    ATTN_FAIL_IF(e->end > data_size, ctx, ATTN_E_FORMAT,
                 "tensor " NAME ": data_offsets [%llu, %llu] run past the %llu-byte data section",
                 name, (unsigned long long)e->begin, (unsigned long long)e->end,
                 (unsigned long long)data_size);
    ATTN_FAIL_IF(e->end - e->begin != (uint64_t)nbytes, ctx, ATTN_E_FORMAT,
                 "tensor " NAME ": %s %s needs %lld bytes but data_offsets [%llu, %llu] "
                 "span %llu",
                 name, attn_dtype_name(e->dtype), attn__dims_str(e->shape, e->ndim, sbuf, sizeof sbuf),
                 (long long)nbytes, (unsigned long long)e->begin, (unsigned long long)e->end,
                 (unsigned long long)(e->end - e->begin));
    return ATTN_OK;
}

static int cmp_meta_key(const void *a, const void *b) {
    return strcmp((*(const st_meta *const *)a)->key, (*(const st_meta *const *)b)->key);
}

static attn_status parse_meta(attn_st *s, attn__json_reader *r) {
    attn_ctx *ctx = s->ctx;
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    ATTN_FAIL_IF(k != ATTN__JSON_OBJECT, ctx, ATTN_E_FORMAT,
                 "__metadata__ must be an object, found %s", attn__json_kind_name(k));
    ATTN_TRY(attn__json_object_begin(r));
    for (;;) {
        int more;
        const char *key, *val;
        size_t klen, vlen;
        ATTN_TRY(attn__json_member(r, &more, &key, &klen));
        if (!more) break;
        ATTN_FAIL_IF(strlen(key) != klen, ctx, ATTN_E_FORMAT,
                     "__metadata__ key " NAME " contains a NUL character", key);
        ATTN_TRY(attn__json_peek(r, &k));
        ATTN_FAIL_IF(k != ATTN__JSON_STRING, ctx, ATTN_E_FORMAT,
                     "__metadata__ entry " NAME " must be a string, found %s", key,
                     attn__json_kind_name(k));
        ATTN_TRY(attn__json_string(r, &val, &vlen));
        ATTN_FAIL_IF(strlen(val) != vlen, ctx, ATTN_E_FORMAT,
                     "__metadata__ entry " NAME " contains a NUL character", key);
        if (!attn__grow(ctx, (void **)&s->meta, &s->capmeta, s->nmeta, sizeof *s->meta))
            return attn__fail(ctx, ATTN_E_NOMEM, "out of memory reading __metadata__");
        s->meta[s->nmeta].key = key;
        s->meta[s->nmeta].value = val;
        s->nmeta++;
    }
    if (s->nmeta < 2) return ATTN_OK;
    /* duplicates: sort pointers by key and compare neighbours (O(n log n) for big headers) */
    st_meta **tmp = attn__malloc(ctx, s->nmeta * sizeof *tmp);
    if (!tmp) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory reading __metadata__");
    for (size_t i = 0; i < s->nmeta; i++) tmp[i] = &s->meta[i];
    qsort(tmp, s->nmeta, sizeof *tmp, cmp_meta_key);
    attn_status st = ATTN_OK;
    for (size_t i = 1; i < s->nmeta && !st; i++)
        if (strcmp(tmp[i - 1]->key, tmp[i]->key) == 0)
            st = attn__fail(ctx, ATTN_E_FORMAT, "__metadata__ has key " NAME " twice",
                            tmp[i]->key);
    attn__free(ctx, tmp);
    return st;
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int cmp_entry_offset(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* by_name: the entries sorted by name; a name twice is refused. */
static attn_status index_names(attn_st *s) {
    attn_ctx *ctx = s->ctx;
    if (s->count == 0) return ATTN_OK;
    s->by_name = attn__malloc(ctx, s->count * sizeof *s->by_name);
    ATTN_FAIL_IF(!s->by_name, ctx, ATTN_E_NOMEM, "out of memory indexing %zu tensors",
                 s->count);
    for (size_t i = 0; i < s->count; i++) s->by_name[i] = &s->entries[i];
    qsort(s->by_name, s->count, sizeof *s->by_name, cmp_entry_name);
    for (size_t i = 1; i < s->count; i++)
        ATTN_FAIL_IF(strcmp(s->by_name[i - 1]->name, s->by_name[i]->name) == 0, ctx,
                     ATTN_E_FORMAT, "tensor name " NAME " appears twice", s->by_name[i]->name);
    return ATTN_OK;
}

/* Duplicate names and overlapping byte ranges. */
static attn_status check_entries(attn_st *s) {
    attn_ctx *ctx = s->ctx;
    if (s->count == 0) return ATTN_OK;
    st_entry **tmp = attn__malloc(ctx, s->count * sizeof *tmp);
    ATTN_FAIL_IF(!tmp, ctx, ATTN_E_NOMEM, "out of memory indexing %zu tensors", s->count);
    for (size_t i = 0; i < s->count; i++) tmp[i] = &s->entries[i];
    attn_status st = index_names(s);
    if (!st) {
        qsort(tmp, s->count, sizeof *tmp, cmp_entry_offset);
        /* empty tensors occupy no bytes, so they cannot overlap anything */
        const st_entry *reach = NULL; /* the non-empty tensor ending furthest so far */
        for (size_t i = 0; i < s->count && !st; i++) {
            const st_entry *e = tmp[i];
            if (e->begin == e->end) continue;
            if (reach && e->begin < reach->end)
                st = attn__fail(ctx, ATTN_E_FORMAT,
                                "tensors " NAME " [%llu, %llu] and " NAME
                                " [%llu, %llu] overlap in the data section",
                                reach->name, (unsigned long long)reach->begin,
                                (unsigned long long)reach->end, e->name,
                                (unsigned long long)e->begin, (unsigned long long)e->end);
            if (!reach || e->end > reach->end) reach = e;
        }
    }
    attn__free(ctx, tmp);
    return st;
}

/* The document's top-level object opened, else ATTN_E_FORMAT naming what it found. */
static attn_status object_begin(attn__json_reader *r) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    ATTN_FAIL_IF(k != ATTN__JSON_OBJECT, r->ctx, ATTN_E_FORMAT,
                 "%s: expected a JSON object, found %s", r->what, attn__json_kind_name(k));
    return attn__json_object_begin(r);
}

static attn_status parse_header(attn_st *s) {
    attn_ctx *ctx = s->ctx;
    ATTN_FAIL_IF(s->size < 8, ctx, ATTN_E_FORMAT,
                 "safetensors: the file is %zu bytes, too short for the 8-byte header length",
                 s->size);
    uint64_t n = le64(s->image);
    ATTN_FAIL_IF(n > ST_MAX_HEADER, ctx, ATTN_E_FORMAT,
                 "safetensors: header length %llu exceeds the limit of %u bytes",
                 (unsigned long long)n, ST_MAX_HEADER);
    ATTN_FAIL_IF(n > s->size - 8, ctx, ATTN_E_FORMAT,
                 "safetensors: header length %llu runs past the end of the %zu-byte file",
                 (unsigned long long)n, s->size);
    s->data_start = 8 + (size_t)n;
    uint64_t data_size = (uint64_t)(s->size - s->data_start);

    attn__json_reader r;
    attn_status st = attn__json_open(&r, ctx, s->image + 8, (size_t)n, "safetensors header", 8);
    if (st) return st;
    int have_meta = 0;
    ATTN_TRYG(object_begin(&r));
    for (;;) {
        int more;
        const char *key;
        size_t klen;
        ATTN_TRYG(attn__json_member(&r, &more, &key, &klen));
        if (!more) break;
        if (strlen(key) != klen) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "tensor name " NAME "... contains a NUL character",
                            key);
            goto done;
        }
        if (strcmp(key, "__metadata__") == 0) {
            if (have_meta) {
                st = attn__fail(ctx, ATTN_E_FORMAT, "the header has two __metadata__ entries");
                goto done;
            }
            have_meta = 1;
            ATTN_TRYG(parse_meta(s, &r));
            continue;
        }
        if (!attn__grow(ctx, (void **)&s->entries, &s->cap, s->count, sizeof *s->entries)) {
            st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory reading %zu tensors", s->count);
            goto done;
        }
        ATTN_TRYG(parse_tensor(&r, key, &s->entries[s->count], data_size));
        s->count++;
    }
    ATTN_TRYG(attn__json_finish(&r));
    ATTN_TRYG(check_entries(s));
done:
    s->strings = attn__json_take_pool(&r);
    attn__json_close(&r);
    return st;
}

/* ---- construction ---------------------------------------------------------------------- */
/* Takes ownership of image (allocated with ctx) whatever the outcome. */
static attn_status st_from_image(attn_ctx *ctx, unsigned char *image, size_t size,
                                 attn_st **out) {
    attn_st *s = attn__calloc(ctx, 1, sizeof *s);
    if (!s) {
        attn__free(ctx, image);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory");
    }
    s->ctx = ctx;
    s->image = image;
    s->size = size;
    attn_status st = parse_header(s);
    if (st) {
        attn_st_free(s);
        return st;
    }
    for (size_t i = 0; i < s->count; i++) s->entries[i].base = s->image + s->data_start;
    *out = s;
    return ATTN_OK;
}

attn_status attn_st_read_memory(attn_ctx *ctx, const void *data, size_t size, attn_st **out) {
    if (!out) return attn__fail(ctx, ATTN_E_INVALID, "attn_st_read_memory: out is NULL");
    *out = NULL;
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!data && size, ctx, ATTN_E_INVALID, "attn_st_read_memory: data is NULL");
    unsigned char *image = attn__malloc(ctx, size);
    ATTN_FAIL_IF(!image, ctx, ATTN_E_NOMEM, "out of memory copying a %zu-byte safetensors image",
                 size);
    if (size) memcpy(image, data, size);
    return st_from_image(ctx, image, size, out);
}

attn_status attn_st_read_file(attn_ctx *ctx, const char *path, attn_st **out) {
    if (!out) return attn__fail(ctx, ATTN_E_INVALID, "attn_st_read_file: out is NULL");
    *out = NULL;
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path, ctx, ATTN_E_INVALID, "attn_st_read_file: path is NULL");
    /* a regular file only, sized before it is read: pipes, devices and directories are
     * refused by type, so nothing endless is ever read */
    unsigned char *image = NULL;
    size_t size = 0;
    ATTN_TRY(attn__file_read(ctx, path, "safetensors file", 0, &image, &size));
    attn_status st = st_from_image(ctx, image, size, out);
    if (st) attn__fail(ctx, st, "%.300s: %s", path, attn_ctx_errmsg(ctx)); /* say which file */
    return st;
}

/* ---- sharded checkpoints ---------------------------------------------------------------- */
/* At most this many shard files: a hostile index cannot make the reader open millions. */
#define ST_MAX_SHARDS 4096

typedef struct st_pair {
    const char *tensor, *file; /* in the index reader's pool */
    size_t shard;              /* index into the sorted unique file names */
} st_pair;

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard's file name: a plain name in the index's folder (no path, no "." or ".."). */
static int shard_name_ok(const char *f, size_t len) {
    if (len == 0 || len > 255 || strlen(f) != len || f[0] == '.') return 0;
    return strchr(f, '/') == NULL && strchr(f, '\\') == NULL;
}

/* weight_map of the index: every (tensor, file) pair, the files checked. */
static attn_status read_weight_map(attn__json_reader *r, st_pair **pairs, size_t *n,
                                   size_t *cap) {
    attn_ctx *ctx = r->ctx;
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    ATTN_FAIL_IF(k != ATTN__JSON_OBJECT, ctx, ATTN_E_FORMAT,
                 "safetensors index: weight_map must be an object, found %s",
                 attn__json_kind_name(k));
    ATTN_TRY(attn__json_object_begin(r));
    for (;;) {
        int more;
        const char *key, *file;
        size_t klen, flen;
        ATTN_TRY(attn__json_member(r, &more, &key, &klen));
        if (!more) return ATTN_OK;
        ATTN_FAIL_IF(strlen(key) != klen, ctx, ATTN_E_FORMAT,
                     "safetensors index: tensor name " NAME "... contains a NUL character", key);
        ATTN_TRY(attn__json_peek(r, &k));
        ATTN_FAIL_IF(k != ATTN__JSON_STRING, ctx, ATTN_E_FORMAT,
                     "safetensors index: weight_map[" NAME "] must be a file name, found %s", key,
                     attn__json_kind_name(k));
        ATTN_TRY(attn__json_string(r, &file, &flen));
        ATTN_FAIL_IF(!shard_name_ok(file, flen), ctx, ATTN_E_FORMAT,
                     "safetensors index: weight_map[" NAME "] = " NAME " is not a file name in "
                     "the index's folder", key, file);
        ATTN_FAIL_IF(!attn__grow(ctx, (void **)pairs, cap, *n, sizeof **pairs), ctx,
                     ATTN_E_NOMEM, "out of memory reading %zu index entries", *n);
        (*pairs)[(*n)++] = (st_pair){key, file, 0};
    }
}

attn_status attn_st_read_index(attn_ctx *ctx, const char *path, attn_st **out) {
    if (!out) return attn__fail(ctx, ATTN_E_INVALID, "attn_st_read_index: out is NULL");
    *out = NULL;
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path, ctx, ATTN_E_INVALID, "attn_st_read_index: path is NULL");
    const char *slash = strrchr(path, '/');
    const size_t dlen = slash ? (size_t)(slash - path) + 1 : 0; /* the folder, with its '/' */
    unsigned char *text = NULL;
    size_t len = 0;
    ATTN_TRY(attn__text_file_read(ctx, path, "safetensors index", 0, &text, &len));
    attn__json_reader r;
    attn_status st = attn__json_open(&r, ctx, text, len, "safetensors index", 0);
    if (st) {
        attn__free(ctx, text);
        return st;
    }
    st_pair *pairs = NULL;
    const char **files = NULL;
    size_t n = 0, cap = 0, nf = 0;
    char *fpath = NULL;
    attn_st *s = NULL;
    int have_map = 0;
    ATTN_TRYG(object_begin(&r));
    for (;;) {
        int more;
        const char *key;
        size_t klen;
        ATTN_TRYG(attn__json_member(&r, &more, &key, &klen));
        if (!more) break;
        if (klen != strlen(key) || strcmp(key, "weight_map") != 0) {
            ATTN_TRYG(attn__json_skip(&r)); /* metadata (total_size) and anything else */
            continue;
        }
        if (have_map) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "safetensors index: two weight_map entries");
            goto done;
        }
        have_map = 1;
        ATTN_TRYG(read_weight_map(&r, &pairs, &n, &cap));
    }
    ATTN_TRYG(attn__json_finish(&r));
    if (!have_map || n == 0) {
        st = attn__fail(ctx, ATTN_E_FORMAT, "%.300s: no weight_map, or an empty one", path);
        goto done;
    }
    /* the shard files, each once, sorted by name (n log n whatever the index holds) */
    files = attn__malloc(ctx, n * sizeof *files);
    if (!files) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory indexing %zu tensors", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) files[i] = pairs[i].file;
    qsort(files, n, sizeof *files, cmp_str_ptr);
    for (size_t i = 0; i < n; i++)
        if (nf == 0 || strcmp(files[nf - 1], files[i]) != 0) files[nf++] = files[i];
    if (nf > ST_MAX_SHARDS) {
        st = attn__fail(ctx, ATTN_E_UNSUPPORTED, "%.300s: %zu shard files (at most %d)", path,
                        nf, ST_MAX_SHARDS);
        goto done;
    }
    s = attn__calloc(ctx, 1, sizeof *s);
    fpath = attn__malloc(ctx, dlen + 256);
    if (!s || !fpath || !(s->parts = attn__calloc(ctx, nf, sizeof *s->parts))) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory opening %zu shards", nf);
        goto done;
    }
    s->ctx = ctx;
    size_t total = 0;
    for (size_t f = 0; f < nf; f++, s->nparts++) {
        memcpy(fpath, path, dlen);
        strcpy(fpath + dlen, files[f]); /* at most 255 bytes: shard_name_ok */
        st = attn_st_read_file(ctx, fpath, &s->parts[f]);
        if (st == ATTN_E_NOT_FOUND)
            attn__fail(ctx, st, "%.300s: the shard %.255s it names is missing", path, files[f]);
        if (st) goto done;
        total += s->parts[f]->count; /* each count is bounded by its file's size */
    }
    /* every pair's tensor in the shard the index names */
    for (size_t i = 0; i < n; i++) {
        const char **hit = bsearch(&pairs[i].file, files, nf, sizeof *files, cmp_str_ptr);
        attn_st_tensor t;
        if (attn_st_find(s->parts[hit - files], pairs[i].tensor, &t) != ATTN_OK) {
            st = attn__fail(ctx, ATTN_E_FORMAT, "%.300s: tensor " NAME " is not in %.200s, "
                            "where the index puts it", path, pairs[i].tensor, pairs[i].file);
            goto done;
        }
    }
    /* one entry list over the shards, in shard order, then the name index across them */
    if (total) {
        s->entries = attn__malloc(ctx, total * sizeof *s->entries);
        if (!s->entries) {
            st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory indexing %zu tensors", total);
            goto done;
        }
    }
    for (size_t f = 0; f < nf; f++)
        for (size_t i = 0; i < s->parts[f]->count; i++)
            s->entries[s->count++] = s->parts[f]->entries[i];
    st = index_names(s);
    if (st) attn__fail(ctx, st, "%.300s: %s", path, attn_ctx_errmsg(ctx)); /* across shards */
done:
    attn__json_close(&r);
    attn__free(ctx, text);
    attn__free(ctx, pairs);
    attn__free(ctx, files);
    attn__free(ctx, fpath);
    if (st) attn_st_free(s);
    else *out = s;
    return st;
}

attn_status attn__st_read_folder(attn_ctx *ctx, const char *dir, attn_st **out) {
    char path[4096];
    *out = NULL;
    ATTN_FAIL_IF(snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir) >=
                     (int)sizeof path,
                 ctx, ATTN_E_INVALID, "model folder path too long");
    path[strlen(path) - strlen(".index.json")] = 0;
    attn_status st = attn_st_read_file(ctx, path, out);
    if (st != ATTN_E_NOT_FOUND) return st;
    strcat(path, ".index.json"); /* fits: the first snprintf wrote it */
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return attn__fail(ctx, ATTN_E_NOT_FOUND, "%.300s: missing model.safetensors (and "
                          "model.safetensors.index.json; pytorch_model.bin is not read)", dir);
    return attn_st_read_index(ctx, path, out);
}

void attn_st_free(attn_st *s) {
    if (!s) return;
    attn_ctx *ctx = s->ctx;
    attn__free(ctx, s->image);
    attn__free(ctx, s->strings);
    attn__free(ctx, s->entries);
    attn__free(ctx, s->by_name);
    attn__free(ctx, s->meta);
    for (size_t i = 0; i < s->nparts; i++) attn_st_free(s->parts[i]);
    attn__free(ctx, s->parts);
    attn__free(ctx, s);
}

/* ---- queries --------------------------------------------------------------------------- */
size_t attn_st_count(const attn_st *s) { return s ? s->count : 0; }

static void fill_info(const st_entry *e, attn_st_tensor *info) {
    memset(info, 0, sizeof *info);
    info->name = e->name;
    info->dtype = e->dtype;
    info->ndim = e->ndim;
    for (int d = 0; d < e->ndim; d++) info->shape[d] = e->shape[d];
    info->numel = e->numel;
    /* begin <= end <= data size was checked, so this stays inside the image */
    info->data = e->base + (size_t)e->begin;
    info->nbytes = (size_t)(e->end - e->begin);
}

attn_status attn_st_at(const attn_st *s, size_t i, attn_st_tensor *info) {
    if (!s) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!info, s->ctx, ATTN_E_INVALID, "attn_st_at: info is NULL");
    ATTN_FAIL_IF(i >= s->count, s->ctx, ATTN_E_INVALID,
                 "attn_st_at: index %zu out of range (%zu tensors)", i, s->count);
    fill_info(&s->entries[i], info);
    return ATTN_OK;
}

attn_status attn_st_find(const attn_st *s, const char *name, attn_st_tensor *info) {
    if (!s) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!name || !info, s->ctx, ATTN_E_INVALID, "attn_st_find: name or info is NULL");
    size_t lo = 0, hi = s->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->by_name[mid]->name, name);
        if (c == 0) {
            fill_info(s->by_name[mid], info);
            return ATTN_OK;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return ATTN_E_NOT_FOUND; /* not an error worth a message: callers probe optional names */
}

const char *attn_st_meta(const attn_st *s, const char *key) {
    if (!s || !key) return NULL;
    for (size_t i = 0; i < s->nmeta; i++)
        if (strcmp(s->meta[i].key, key) == 0) return s->meta[i].value;
    return NULL;
}

size_t attn_st_meta_count(const attn_st *s) { return s ? s->nmeta : 0; }

attn_status attn_st_meta_at(const attn_st *s, size_t i, const char **key, const char **value) {
    if (!s) return ATTN_E_INVALID;
    ATTN_FAIL_IF(i >= s->nmeta, s->ctx, ATTN_E_INVALID,
                 "attn_st_meta_at: index %zu out of range (%zu entries)", i, s->nmeta);
    if (key) *key = s->meta[i].key;
    if (value) *value = s->meta[i].value;
    return ATTN_OK;
}

/* ---- conversion ------------------------------------------------------------------------ */
static float bits_to_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* IEEE binary16 to binary32; exact for every input (binary32 holds every binary16 value). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F) return bits_to_f32(sign | 0x7F800000u | (man << 13)); /* inf, NaN */
    if (exp != 0) return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0) return bits_to_f32(sign);
    /* subnormal man * 2^-24: shift the leading 1 up to the implicit bit */
    uint32_t k = 0;
    while (!(man & 0x400u)) {
        man <<= 1;
        k++;
    }
    return bits_to_f32(sign | ((113 - k) << 23) | ((man & 0x3FFu) << 13));
}

static uint64_t load_le(const unsigned char *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

attn_status attn_st_to_f32(attn_ctx *ctx, const attn_st_tensor *info, float *dst, size_t n) {
    ATTN_FAIL_IF(!info, ctx, ATTN_E_INVALID, "attn_st_to_f32: info is NULL");
    const char *name = info->name ? info->name : "?";
    size_t es = attn_dtype_size(info->dtype);
    ATTN_FAIL_IF(es == 0, ctx, ATTN_E_DTYPE, "tensor " NAME " has an unknown dtype %d", name,
                 (int)info->dtype);
    ATTN_FAIL_IF(info->dtype == ATTN_BOOL, ctx, ATTN_E_DTYPE,
                 "tensor " NAME " is BOOL, which does not convert to F32", name);
    ATTN_FAIL_IF(info->numel < 0 || (uint64_t)info->numel != (uint64_t)n, ctx, ATTN_E_INVALID,
                 "tensor " NAME " has %lld elements but the destination holds %zu", name,
                 (long long)info->numel, n);
    size_t bytes;
    ATTN_FAIL_IF(!attn__mul_size(n, es, &bytes) || bytes != info->nbytes, ctx, ATTN_E_INVALID,
                 "tensor " NAME ": nbytes %zu does not match %lld %s elements", name,
                 info->nbytes, (long long)info->numel, attn_dtype_name(info->dtype));
    if (n == 0) return ATTN_OK;
    ATTN_FAIL_IF(!info->data || !dst, ctx, ATTN_E_INVALID, "attn_st_to_f32: NULL data or dst");
    /* bytes are assembled explicitly: the data is little-endian and may be unaligned */
    const unsigned char *p = info->data;
    switch (info->dtype) {
    case ATTN_F32:
        for (size_t i = 0; i < n; i++) dst[i] = bits_to_f32((uint32_t)load_le(p + 4 * i, 4));
        break;
    case ATTN_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t b = load_le(p + 8 * i, 8);
            double d;
            memcpy(&d, &b, sizeof d);
            dst[i] = (float)d; /* round to nearest; out of range becomes +-inf */
        }
        break;
    case ATTN_F16:
        for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32((uint16_t)load_le(p + 2 * i, 2));
        break;
    case ATTN_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = bits_to_f32((uint32_t)load_le(p + 2 * i, 2) << 16);
        break;
    case ATTN_I64:
        for (size_t i = 0; i < n; i++) {
            uint64_t b = load_le(p + 8 * i, 8);
            int64_t v;
            memcpy(&v, &b, sizeof v); /* two's complement reinterpretation without UB */
            dst[i] = (float)v;
        }
        break;
    case ATTN_I32:
        for (size_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)load_le(p + 4 * i, 4);
            int32_t v;
            memcpy(&v, &b, sizeof v);
            dst[i] = (float)v;
        }
        break;
    case ATTN_I8:
        for (size_t i = 0; i < n; i++) {
            int8_t v;
            memcpy(&v, p + i, 1);
            dst[i] = (float)v;
        }
        break;
    case ATTN_U8:
        for (size_t i = 0; i < n; i++) dst[i] = (float)p[i];
        break;
    case ATTN_BOOL: break; /* refused above */
    }
    return ATTN_OK;
}
