/* GGUF reader: the fixtures of tests/gen_gguf.py (written by llama.cpp's Python writer) against
 * the listings its reader gave; hostile files built here (every truncation point, corrupted
 * counts, lengths, types, dims, offsets, alignments, duplicates, versions, big-endian), each of
 * which must fail with its status and a message naming the place, never a crash (run under
 * ASan: images are copied into buffers of exactly their size, and read_memory does not copy);
 * the memory a hostile file can make the reader allocate; and, when ATTN_SMOLLM2_GGUF names
 * SmolLM2-135M-Instruct.Q4_1.gguf, facts about the real file. */
#define _GNU_SOURCE /* getline */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

#define FIX "fixtures/gguf/"

/* ---- a counting allocator: the reader's allocations must stay within a few times the file */
typedef struct counter {
    size_t live, peak;
} counter;

static void *count_alloc(void *user, size_t size) {
    counter *c = user;
    size_t *p = malloc(size + 16);
    if (!p) return NULL;
    p[0] = size;
    c->live += size;
    if (c->live > c->peak) c->peak = c->live;
    return (unsigned char *)p + 16;
}

static void count_free(void *user, void *ptr) {
    if (!ptr) return;
    counter *c = user;
    size_t *p = (size_t *)(void *)((unsigned char *)ptr - 16);
    c->live -= p[0];
    free(p);
}

static counter mem;
static attn_ctx *ctx;

/* ---- small helpers --------------------------------------------------------------------- */
static unsigned char *load(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static uint64_t fnv1a64(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* 'x' + hex -> bytes (returns the length; out has room) */
static size_t unhex(const char *s, unsigned char *out) {
    size_t n = 0;
    if (*s == 'x') s++;
    for (; s[0] && s[1]; s += 2) {
        unsigned v;
        sscanf(s, "%2x", &v);
        out[n++] = (unsigned char)v;
    }
    return n;
}

static int same_double(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static int type_of(const char *name) {
    for (int t = 0; t <= ATTN_GGUF_FLOAT64; t++)
        if (!strcmp(attn_gguf_type_name(t), name)) return t;
    return -1;
}

static int is_int(int t) {
    return (t >= ATTN_GGUF_UINT8 && t <= ATTN_GGUF_INT32) || t == ATTN_GGUF_UINT64 ||
           t == ATTN_GGUF_INT64;
}

/* ---- fixtures against their listings --------------------------------------------------- */
/* One value of the listing (token tok, of type t) against what the getters give: element
 * `idx` of an array when arr, else the scalar. */
static void check_value(const attn_gguf *g, const char *key, int arr, uint64_t idx, int t,
                        const char *tok, const unsigned char *raw) {
    char label[300];
    snprintf(label, sizeof label, "%s%s[%llu]", key, arr ? "" : " (scalar)",
             (unsigned long long)idx);
    if (is_int(t)) {
        int neg = tok[0] == '-';
        long long sv = neg ? strtoll(tok, NULL, 10) : 0;
        unsigned long long uv = neg ? 0 : strtoull(tok, NULL, 10);
        int64_t v = 0;
        double f = 0;
        attn_status s = arr ? attn_gguf_arr_int(g, key, idx, INT64_MIN, INT64_MAX, &v)
                            : attn_gguf_get_int(g, key, INT64_MIN, INT64_MAX, &v);
        if (!neg && uv > (unsigned long long)INT64_MAX) {
            TU_CHECK(s == ATTN_E_FORMAT, "%s: %s for a UINT64 over INT64_MAX", label,
                     attn_status_name(s));
        } else {
            TU_CHECK(s == ATTN_OK && v == (neg ? sv : (long long)uv), "%s: %s %lld vs %s", label,
                     attn_status_name(s), (long long)v, tok);
        }
        s = arr ? attn_gguf_arr_float(g, key, idx, &f) : attn_gguf_get_float(g, key, &f);
        TU_CHECK(s == ATTN_OK && f == (neg ? (double)sv : (double)uv), "%s: as float %g vs %s",
                 label, f, tok);
        if (raw) { /* the raw bytes (kv.data, get_arr data), decoded here */
            static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
            uint64_t u = le(raw + idx * (uint64_t)sz[t], sz[t]);
            int ok;
            if (neg) {
                int bits = 8 * sz[t];
                int64_t x = bits == 64 ? (int64_t)u : (int64_t)(u << (64 - bits)) >> (64 - bits);
                ok = x == sv;
            } else {
                ok = u == uv;
            }
            TU_CHECK(ok, "%s: raw array data %llu vs %s", label, (unsigned long long)u, tok);
        }
    } else if (t == ATTN_GGUF_FLOAT32 || t == ATTN_GGUF_FLOAT64) {
        double want = strtod(tok, NULL), f = 0;
        attn_status s =
            arr ? attn_gguf_arr_float(g, key, idx, &f) : attn_gguf_get_float(g, key, &f);
        TU_CHECK(s == ATTN_OK && same_double(f, want), "%s: %.17g vs %s", label, f, tok);
        int64_t v;
        s = arr ? attn_gguf_arr_int(g, key, idx, INT64_MIN, INT64_MAX, &v)
                : attn_gguf_get_int(g, key, INT64_MIN, INT64_MAX, &v);
        TU_CHECK(s == ATTN_E_FORMAT, "%s: a float taken as an integer (%s)", label,
                 attn_status_name(s));
    } else if (t == ATTN_GGUF_BOOL) {
        int want = atoi(tok), b = -1;
        TU_CHECK(raw && raw[idx] == want, "%s: BOOL byte", label);
        if (!arr) {
            TU_CHECK(attn_gguf_get_bool(g, key, &b) == ATTN_OK && b == want, "%s: bool %d", label,
                     b);
        }
    } else if (t == ATTN_GGUF_STRING) {
        unsigned char want[4096];
        size_t wn = unhex(tok, want), len = 0;
        const char *s = NULL;
        attn_status st = arr ? attn_gguf_arr_str(g, key, idx, &s, &len)
                             : attn_gguf_get_str(g, key, &s, &len);
        TU_CHECK(st == ATTN_OK && len == wn && (wn == 0 || memcmp(s, want, wn) == 0),
                 "%s: string of %zu bytes, expected %zu", label, len, wn);
        TU_CHECK(arr ? raw == NULL : (const char *)raw == s, "%s: kv.data of a string", label);
        if (!arr) {
            char buf[4096];
            size_t n = 0;
            TU_CHECK(attn_gguf_get_str_copy(g, key, buf, wn + 1, &n) == ATTN_OK && n == wn &&
                         buf[wn] == 0 && memcmp(buf, want, wn) == 0,
                     "%s: copy", label);
            if (wn > 0) { /* one byte short: refused, truncated, terminated */
                memset(buf, 'Z', sizeof buf);
                TU_CHECK(attn_gguf_get_str_copy(g, key, buf, wn, &n) == ATTN_E_INVALID &&
                             n == wn && buf[wn - 1] == 0 && memcmp(buf, want, wn - 1) == 0,
                         "%s: copy into a short buffer", label);
            }
        }
    }
}

static void check_listing(const char *name, const attn_gguf *g, const unsigned char *image) {
    char path[256];
    snprintf(path, sizeof path, FIX "%s.txt", name);
    FILE *f = fopen(path, "r");
    TU_CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    char *line = NULL;
    size_t cap = 0, ikv = 0, it = 0;
    unsigned long long data_off = 0;
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = 0;
        char *save = NULL, *what = strtok_r(line, " ", &save);
        if (!what) continue;
        char *a = strtok_r(NULL, " ", &save);
        if (!strcmp(what, "version")) {
            TU_CHECK(attn_gguf_version(g) == (uint32_t)atoi(a), "%s: version", name);
        } else if (!strcmp(what, "alignment")) {
            TU_CHECK(attn_gguf_alignment(g) == (uint32_t)atoi(a), "%s: alignment %u vs %s",
                     name, attn_gguf_alignment(g), a);
        } else if (!strcmp(what, "data_offset")) {
            data_off = strtoull(a, NULL, 10);
            TU_CHECK(attn_gguf_data_offset(g) == data_off, "%s: data offset %llu vs %s", name,
                     (unsigned long long)attn_gguf_data_offset(g), a);
        } else if (!strcmp(what, "kv_count")) {
            TU_CHECK(attn_gguf_kv_count(g) == (size_t)atoi(a), "%s: kv count", name);
        } else if (!strcmp(what, "tensor_count")) {
            TU_CHECK(attn_gguf_tensor_count(g) == (size_t)atoi(a), "%s: tensor count", name);
        } else if (!strcmp(what, "kv")) {
            char key[512];
            key[unhex(a, (unsigned char *)key)] = 0;
            int t = type_of(strtok_r(NULL, " ", &save));
            attn_gguf_kv kv, kf;
            if (!TU_STATUS(attn_gguf_kv_at(g, ikv, &kv), ATTN_OK, ctx)) break;
            ikv++;
            TU_CHECK(!strcmp(kv.key, key), "%s: key %zu is '%s', expected '%s'", name, ikv - 1,
                     kv.key, key);
            TU_CHECK(kv.type == t, "%s: %s type %d vs %d", name, key, kv.type, t);
            TU_CHECK(attn_gguf_kv_find(g, key, &kf) == ATTN_OK && kf.key == kv.key &&
                         kf.offset == kv.offset,
                     "%s: find %s", name, key);
            if (t == ATTN_GGUF_ARRAY) {
                int et = type_of(strtok_r(NULL, " ", &save));
                uint64_t n = strtoull(strtok_r(NULL, " ", &save), NULL, 10), an = 0;
                int aet = -1;
                const void *data = NULL;
                TU_CHECK(kv.elem_type == et && kv.n == n, "%s: %s array of %d x %llu", name, key,
                         kv.elem_type, (unsigned long long)kv.n);
                TU_CHECK(attn_gguf_get_arr(g, key, &aet, &an, &data) == ATTN_OK && aet == et &&
                             an == n && (et == ATTN_GGUF_STRING) == (data == NULL) &&
                             kv.data == data,
                         "%s: get_arr %s", name, key);
                for (uint64_t k = 0; k < n; k++) {
                    char *tok = strtok_r(NULL, " ", &save);
                    if (!tok) tok = (char *)"x"; /* an empty string at the end of the line */
                    check_value(g, key, 1, k, et, tok, data);
                }
                int64_t v;
                TU_CHECK(attn_gguf_arr_int(g, key, n, INT64_MIN, INT64_MAX, &v) ==
                             (is_int(et) ? ATTN_E_INVALID : ATTN_E_FORMAT),
                         "%s: element past the end of %s", name, key);
            } else {
                uint64_t n = strtoull(strtok_r(NULL, " ", &save), NULL, 10);
                char *tok = strtok_r(NULL, " ", &save);
                TU_CHECK(kv.elem_type == -1 && kv.n == n, "%s: %s n %llu vs %llu", name, key,
                         (unsigned long long)kv.n, (unsigned long long)n);
                check_value(g, key, 0, 0, t, tok ? tok : "x", kv.data);
                TU_CHECK(attn_gguf_get_arr(g, key, NULL, NULL, NULL) == ATTN_E_FORMAT,
                         "%s: %s is not an array", name, key);
            }
        } else if (!strcmp(what, "tensor")) {
            char tname[512];
            tname[unhex(a, (unsigned char *)tname)] = 0;
            const char *type = strtok_r(NULL, " ", &save);
            int nd = atoi(strtok_r(NULL, " ", &save));
            int64_t ne[4] = {1, 1, 1, 1}, shape[4] = {1, 1, 1, 1}, numel = 1;
            for (int d = 0; d < nd; d++) {
                ne[d] = strtoll(strtok_r(NULL, " ", &save), NULL, 10);
                numel *= ne[d];
            }
            strtok_r(NULL, " ", &save); /* | */
            for (int d = 0; d < nd; d++) shape[d] = strtoll(strtok_r(NULL, " ", &save), NULL, 10);
            strtok_r(NULL, " ", &save);
            uint64_t off = strtoull(strtok_r(NULL, " ", &save), NULL, 10);
            uint64_t nbytes = strtoull(strtok_r(NULL, " ", &save), NULL, 10);
            uint64_t h = strtoull(strtok_r(NULL, " ", &save), NULL, 16);
            attn_gguf_tensor t, u;
            if (!TU_STATUS(attn_gguf_tensor_at(g, it, &t), ATTN_OK, ctx)) break;
            it++;
            TU_CHECK(!strcmp(t.name, tname), "%s: tensor '%s' vs '%s'", name, t.name, tname);
            TU_CHECK(!strcmp(attn_qtype_name(t.type), type), "%s: %s type %s vs %s", name,
                     tname, attn_qtype_name(t.type), type);
            TU_CHECK(t.n_dims == nd && t.numel == numel, "%s: %s dims", name, tname);
            for (int d = 0; d < 4; d++)
                TU_CHECK(t.ne[d] == ne[d] && t.shape[d] == shape[d],
                         "%s: %s ne[%d] %lld vs %lld, shape[%d] %lld vs %lld", name, tname, d,
                         (long long)t.ne[d], (long long)ne[d], d, (long long)t.shape[d],
                         (long long)shape[d]);
            TU_CHECK(t.offset == off && t.nbytes == nbytes && t.file_offset == data_off + off,
                     "%s: %s offset %llu vs %llu, bytes %zu vs %llu", name, tname,
                     (unsigned long long)t.offset, (unsigned long long)off, t.nbytes,
                     (unsigned long long)nbytes);
            TU_CHECK((const unsigned char *)t.data == image + data_off + off || !image,
                     "%s: %s data pointer", name, tname);
            TU_CHECK(fnv1a64(t.data, t.nbytes) == h, "%s: %s bytes differ", name, tname);
            TU_CHECK(attn_gguf_tensor_find(g, tname, &u) == ATTN_OK && u.data == t.data &&
                         u.name == t.name,
                     "%s: find %s", name, tname);
        }
    }
    TU_CHECK(ikv == attn_gguf_kv_count(g) && it == attn_gguf_tensor_count(g),
             "%s: listing covers %zu keys and %zu tensors", name, ikv, it);
    free(line);
    fclose(f);
}

static const char *const FIXTURES[] = {"all_types_v3", "v2_align1", "align64", "metadata_only"};
#define NFIX (sizeof FIXTURES / sizeof *FIXTURES)

static void test_fixtures(void) {
    for (size_t i = 0; i < NFIX; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s.gguf", FIXTURES[i]);
        attn_gguf *g = NULL;
        /* from the file (mapped) */
        if (TU_STATUS(attn_gguf_open(ctx, path, &g), ATTN_OK, ctx)) {
            check_listing(FIXTURES[i], g, NULL);
            attn_gguf_free(g);
        }
        /* from memory (borrowed: pointers into this buffer) */
        size_t n = 0;
        unsigned char *img = load(path, &n);
        TU_CHECK(img != NULL, "cannot read %s", path);
        if (!img) continue;
        if (TU_STATUS(attn_gguf_read_memory(ctx, img, n, &g), ATTN_OK, ctx)) {
            check_listing(FIXTURES[i], g, img);
            attn_gguf_free(g);
        }
        free(img);
    }
}

/* The getters' refusals, on all_types_v3. */
static void test_getters(void) {
    attn_gguf *g = NULL;
    if (!TU_STATUS(attn_gguf_open(ctx, FIX "all_types_v3.gguf", &g), ATTN_OK, ctx)) return;
    int64_t v = 0;
    double f;
    int b;
    const char *s;
    size_t len;
    attn_gguf_kv kv;
    attn_gguf_tensor t;
    attn_ctx_clear_error(ctx);
    TU_STATUS(attn_gguf_kv_find(g, "no.such.key", &kv), ATTN_E_NOT_FOUND, ctx);
    TU_STATUS(attn_gguf_tensor_find(g, "no.such.tensor", &t), ATTN_E_NOT_FOUND, ctx);
    TU_CHECK(attn_ctx_errmsg(ctx)[0] == 0, "find set a message: %s", attn_ctx_errmsg(ctx));
    TU_STATUS(attn_gguf_get_int(g, "no.such.key", 0, 1, &v), ATTN_E_NOT_FOUND, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "no.such.key") != NULL, "message: %s",
             attn_ctx_errmsg(ctx));
    /* range */
    TU_STATUS(attn_gguf_get_int(g, "t.uint8", 0, 255, &v), ATTN_OK, ctx);
    TU_CHECK(v == 255, "uint8");
    TU_STATUS(attn_gguf_get_int(g, "t.uint8", 0, 254, &v), ATTN_E_FORMAT, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "t.uint8") && strstr(attn_ctx_errmsg(ctx), "255"),
             "range message: %s", attn_ctx_errmsg(ctx));
    TU_STATUS(attn_gguf_get_int(g, "t.int8", -127, 127, &v), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_get_int(g, "t.uint64", INT64_MIN, INT64_MAX, &v), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_get_int(g, "t.uint64_small", 0, INT64_MAX, &v), ATTN_OK, ctx);
    TU_CHECK(v == 1234567890123ll, "uint64 small");
    TU_STATUS(attn_gguf_arr_int(g, "t.arr.int32", 0, 0, 10, &v), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_arr_int(g, "t.arr.int32", 4, INT64_MIN, INT64_MAX, &v), ATTN_E_INVALID,
              ctx);
    /* types */
    TU_STATUS(attn_gguf_get_int(g, "t.string", 0, 1, &v), ATTN_E_FORMAT, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "STRING") != NULL, "type message: %s",
             attn_ctx_errmsg(ctx));
    TU_STATUS(attn_gguf_get_int(g, "t.true", 0, 1, &v), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_get_bool(g, "t.uint8", &b), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_get_float(g, "t.string", &f), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_get_str(g, "t.uint8", &s, &len), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_get_str(g, "t.arr.string", &s, &len), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_arr_str(g, "t.arr.int32", 0, &s, &len), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_arr_str(g, "t.string", 0, &s, &len), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_arr_float(g, "t.arr.string", 0, &f), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_arr_int(g, "t.arr.bool", 0, 0, 1, &v), ATTN_E_FORMAT, ctx);
    TU_STATUS(attn_gguf_arr_str(g, "t.arr.string", 4, &s, &len), ATTN_E_INVALID, ctx);
    /* a float type through the float getter, integers too */
    TU_STATUS(attn_gguf_get_float(g, "t.int16", &f), ATTN_OK, ctx);
    TU_CHECK(f == -32768.0, "int16 as float");
    TU_STATUS(attn_gguf_get_float(g, "t.uint64", &f), ATTN_OK, ctx);
    TU_CHECK(f == 18446744073709551615.0, "uint64 as float");
    /* string copies */
    char buf[8];
    TU_STATUS(attn_gguf_get_str_copy(g, "t.empty_string", buf, 1, &len), ATTN_OK, ctx);
    TU_CHECK(len == 0 && buf[0] == 0, "empty string copy");
    TU_STATUS(attn_gguf_get_str_copy(g, "t.nul_string", buf, sizeof buf, &len), ATTN_OK, ctx);
    TU_CHECK(len == 3 && buf[0] == 'a' && buf[1] == 0 && buf[2] == 'b' && buf[3] == 0,
             "string with a NUL");
    TU_STATUS(attn_gguf_get_str_copy(g, "t.string", buf, 0, &len), ATTN_E_INVALID, ctx);
    /* indexes, NULLs */
    TU_STATUS(attn_gguf_kv_at(g, attn_gguf_kv_count(g), &kv), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_gguf_tensor_at(g, attn_gguf_tensor_count(g), &t), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_gguf_kv_find(g, NULL, &kv), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_gguf_get_int(g, NULL, 0, 1, &v), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_gguf_get_int(g, "t.uint8", 0, 255, NULL), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_gguf_get_int(NULL, "t.uint8", 0, 255, &v), ATTN_E_INVALID, ctx);
    TU_CHECK(attn_gguf_kv_count(NULL) == 0 && attn_gguf_tensor_count(NULL) == 0 &&
                 attn_gguf_version(NULL) == 0 && attn_gguf_alignment(NULL) == 0,
             "NULL queries");
    TU_CHECK(attn_gguf_type_name(13) == NULL && attn_gguf_type_name(-1) == NULL &&
                 !strcmp(attn_gguf_type_name(ATTN_GGUF_ARRAY), "ARRAY"),
             "type names");
    /* shapes: ne is GGUF order, shape the row-major one */
    TU_STATUS(attn_gguf_tensor_find(g, "q6_k.w4d", &t), ATTN_OK, ctx);
    TU_CHECK(t.ne[0] == 256 && t.ne[1] == 1 && t.ne[2] == 2 && t.ne[3] == 1 && t.shape[0] == 1 &&
                 t.shape[1] == 2 && t.shape[2] == 1 && t.shape[3] == 256 && t.nbytes == 420,
             "q6_k.w4d geometry");
    TU_STATUS(attn_gguf_tensor_find(g, "empty", &t), ATTN_OK, ctx);
    TU_CHECK(t.numel == 0 && t.nbytes == 0 && t.ne[1] == 0, "empty tensor");
    attn_gguf_free(g);
    attn_gguf_free(NULL);
    /* the file checks of attn_gguf_open */
    TU_STATUS(attn_gguf_open(ctx, FIX "no_such_file.gguf", &g), ATTN_E_NOT_FOUND, ctx);
    TU_CHECK(g == NULL, "out reset");
    TU_STATUS(attn_gguf_open(ctx, FIX, &g), ATTN_E_IO, ctx);
    TU_STATUS(attn_gguf_open(ctx, NULL, &g), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_gguf_read_memory(ctx, NULL, 4, &g), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_gguf_read_memory(ctx, NULL, 0, &g), ATTN_E_FORMAT, ctx);
}

/* ---- hostile files --------------------------------------------------------------------- */
/* A GGUF image under construction. */
typedef struct gb {
    unsigned char *p;
    size_t n, cap;
} gb;

static void gb_bytes(gb *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void gb_le(gb *b, uint64_t v, int n) {
    unsigned char t[8];
    for (int i = 0; i < n; i++) t[i] = (unsigned char)(v >> (8 * i));
    gb_bytes(b, t, (size_t)n);
}
static void gb_u32(gb *b, uint32_t v) { gb_le(b, v, 4); }
static void gb_u64(gb *b, uint64_t v) { gb_le(b, v, 8); }
static void gb_strn(gb *b, const char *s, size_t n) {
    gb_u64(b, n);
    gb_bytes(b, s, n);
}
static void gb_str(gb *b, const char *s) { gb_strn(b, s, strlen(s)); }
static void gb_zeros(gb *b, size_t n) {
    for (size_t i = 0; i < n; i++) gb_le(b, 0, 1);
}
static void gb_pad(gb *b, size_t a) { gb_zeros(b, (a - b->n % a) % a); }
static void gb_header(gb *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    b->n = 0;
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, nt);
    gb_u64(b, nkv);
}
static void gb_kv_u32(gb *b, const char *key, uint32_t v) {
    gb_str(b, key);
    gb_u32(b, ATTN_GGUF_UINT32);
    gb_u32(b, v);
}
static void gb_tensor(gb *b, const char *name, int nd, const uint64_t *ne, uint32_t type,
                      uint64_t off) {
    gb_str(b, name);
    gb_u32(b, (uint32_t)nd);
    for (int d = 0; d < nd; d++) gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, off);
}

/* Reads a copy of the image in a buffer of exactly its size; the status must be `want`, and
 * a failure must come with a message containing `part` (when given) and reset *out. */
static void expect(int line, const char *label, const unsigned char *p, size_t n,
                   attn_status want, const char *part) {
    unsigned char *img = malloc(n ? n : 1);
    if (n) memcpy(img, p, n);
    attn_gguf *g = (attn_gguf *)&g;
    attn_ctx_clear_error(ctx);
    size_t before = mem.live;
    mem.peak = before;
    attn_status s = attn_gguf_read_memory(ctx, img, n, &g);
    tu_checks++;
    if (s != want)
        tu_fail(__FILE__, line, "%s: got %s, expected %s (%s)", label, attn_status_name(s),
                attn_status_name(want), attn_ctx_errmsg(ctx));
    if (s != ATTN_OK) {
        TU_CHECK(g == NULL, "%s: out not reset", label);
        TU_CHECK(attn_ctx_errmsg(ctx)[0] != 0, "%s: no message", label);
        if (part && !strstr(attn_ctx_errmsg(ctx), part))
            tu_fail(__FILE__, line, "%s: message lacks '%s': %s", label, part,
                    attn_ctx_errmsg(ctx));
    } else {
        attn_gguf_free(g);
    }
    /* the tables of the reader: at most a few times the image, plus a little */
    TU_CHECK(mem.peak - before <= 6 * n + 1024, "%s: %zu bytes allocated for a %zu-byte file",
             label, mem.peak - before, n);
    TU_CHECK(mem.live == before, "%s: %zu bytes leaked", label, mem.live - before);
    free(img);
}

#define EXPECT(label, b, want, part) expect(__LINE__, label, (b)->p, (b)->n, want, part)

/* A small valid file: two keys, three tensors (F32 [4], Q8_0 [32, 2], F16 [2, 2]). */
static void valid(gb *b, uint32_t version) {
    gb_header(b, version, 3, 2);
    gb_kv_u32(b, "general.alignment", 32);
    gb_str(b, "tok");
    gb_u32(b, ATTN_GGUF_ARRAY);
    gb_u32(b, ATTN_GGUF_STRING);
    gb_u64(b, 2);
    gb_str(b, "ab");
    gb_str(b, "");
    uint64_t a[1] = {4}, q[2] = {32, 2}, h[2] = {2, 2};
    gb_tensor(b, "a", 1, a, ATTN_Q_F32, 0);
    gb_tensor(b, "q", 2, q, ATTN_Q_Q8_0, 32);
    gb_tensor(b, "h", 2, h, ATTN_Q_F16, 128);
    gb_pad(b, 32);
    gb_zeros(b, 128 + 8);
}

/* Where entry i ends: its offset plus its encoded size, from what the API says of it. */
static uint64_t kv_end(const attn_gguf *g, size_t i) {
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    attn_gguf_kv kv;
    if (attn_gguf_kv_at(g, i, &kv) != ATTN_OK) return 0;
    uint64_t end = kv.offset + 8 + strlen(kv.key) + 4;
    if (kv.type == ATTN_GGUF_STRING) return end + 8 + kv.n;
    if (kv.type != ATTN_GGUF_ARRAY) return end + (uint64_t)sz[kv.type];
    end += 4 + 8;
    if (kv.elem_type != ATTN_GGUF_STRING) return end + kv.n * (uint64_t)sz[kv.elem_type];
    for (uint64_t k = 0; k < kv.n; k++) {
        const char *s;
        size_t len = 0;
        attn_gguf_arr_str(g, kv.key, k, &s, &len);
        end += 8 + len;
    }
    return end;
}

static void test_truncations(void) {
    /* every prefix of every fixture: refused (FORMAT) unless it still holds every tensor */
    for (size_t i = 0; i < NFIX; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s.gguf", FIXTURES[i]);
        size_t n = 0;
        unsigned char *img = load(path, &n);
        if (!img) continue;
        attn_gguf *g = NULL;
        uint64_t need = 0; /* where the last tensor ends; the end of the metadata without one */
        if (!TU_STATUS(attn_gguf_read_memory(ctx, img, n, &g), ATTN_OK, ctx)) continue;
        for (size_t k = 0; k < attn_gguf_tensor_count(g); k++) {
            attn_gguf_tensor t;
            attn_gguf_tensor_at(g, k, &t);
            if (t.file_offset + t.nbytes > need) need = t.file_offset + t.nbytes;
        }
        if (attn_gguf_tensor_count(g) == 0) /* the end of the last value */
            need = kv_end(g, attn_gguf_kv_count(g) - 1);
        attn_gguf_free(g);
        int fails = 0;
        for (size_t len = 0; len < n; len++) {
            unsigned char *cut = malloc(len ? len : 1);
            memcpy(cut, img, len);
            attn_ctx_clear_error(ctx);
            attn_status s = attn_gguf_read_memory(ctx, cut, len, &g);
            attn_status want = len >= need ? ATTN_OK : ATTN_E_FORMAT;
            if (s != want || (s && !attn_ctx_errmsg(ctx)[0])) {
                if (fails++ < 5)
                    tu_fail(__FILE__, __LINE__, "%s cut to %zu bytes: %s (%s), expected %s",
                            FIXTURES[i], len, attn_status_name(s), attn_ctx_errmsg(ctx),
                            attn_status_name(want));
            }
            tu_checks++;
            attn_gguf_free(s ? NULL : g);
            free(cut);
        }
        free(img);
    }
    /* and through attn_gguf_open, where the message names the file */
    size_t n = 0;
    unsigned char *img = load(FIX "align64.gguf", &n);
    if (img) {
        const char *tmp = "test_gguf_truncated.tmp";
        FILE *f = fopen(tmp, "wb");
        if (f) {
            fwrite(img, 1, n / 2, f);
            fclose(f);
            attn_gguf *g = NULL;
            TU_STATUS(attn_gguf_open(ctx, tmp, &g), ATTN_E_FORMAT, ctx);
            TU_CHECK(strstr(attn_ctx_errmsg(ctx), tmp) != NULL, "message names the file: %s",
                     attn_ctx_errmsg(ctx));
            remove(tmp);
        }
        free(img);
    }
}

static void test_hostile(void) {
    gb b = {0};
    valid(&b, 3);
    EXPECT("the valid base file", &b, ATTN_OK, NULL);
    valid(&b, 2);
    EXPECT("the valid base file, version 2", &b, ATTN_OK, NULL);

    /* magic, version, endianness */
    valid(&b, 3);
    b.p[0] = 'g';
    EXPECT("bad magic", &b, ATTN_E_FORMAT, "magic");
    expect(__LINE__, "empty file", b.p, 0, ATTN_E_FORMAT, "too short");
    valid(&b, 1);
    EXPECT("version 1", &b, ATTN_E_UNSUPPORTED, "version 1");
    valid(&b, 0);
    EXPECT("version 0", &b, ATTN_E_FORMAT, "version 0");
    valid(&b, 4);
    EXPECT("version 4", &b, ATTN_E_UNSUPPORTED, "version 4");
    valid(&b, 0x03000000u);
    EXPECT("big-endian version 3", &b, ATTN_E_UNSUPPORTED, "big-endian");
    valid(&b, 0x02000000u);
    EXPECT("big-endian version 2", &b, ATTN_E_UNSUPPORTED, "big-endian");
    {
        size_t n = 0;
        unsigned char *img = load(FIX "big_endian.gguf", &n);
        TU_CHECK(img != NULL, "big_endian.gguf");
        if (img) expect(__LINE__, "big_endian.gguf (gguf's writer)", img, n,
                        ATTN_E_UNSUPPORTED, "big-endian");
        free(img);
    }

    /* counts */
    valid(&b, 3);
    memset(b.p + 8, 0xff, 8);
    EXPECT("tensor_count 2^64-1", &b, ATTN_E_FORMAT, "tensor_count");
    valid(&b, 3);
    memset(b.p + 16, 0xff, 8);
    EXPECT("kv_count 2^64-1", &b, ATTN_E_FORMAT, "kv_count");
    valid(&b, 3);
    b.p[16 + 5] = 1; /* kv_count 2^40 + 2 */
    EXPECT("kv_count 2^40", &b, ATTN_E_FORMAT, "kv_count");
    valid(&b, 3);
    b.p[8] = 4; /* a tensor more than described: the 4th description reads into the data */
    EXPECT("tensor_count + 1", &b, ATTN_E_FORMAT, NULL);
    valid(&b, 3);
    b.p[16] = 3;
    EXPECT("kv_count + 1", &b, ATTN_E_FORMAT, NULL);

    /* strings and arrays */
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, UINT64_MAX);
    gb_zeros(&b, 16);
    EXPECT("key length 2^64-1", &b, ATTN_E_FORMAT, "the key of");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_u32(&b, ATTN_GGUF_STRING);
    gb_u64(&b, 1ull << 62);
    gb_zeros(&b, 16);
    EXPECT("string length 2^62", &b, ATTN_E_FORMAT, "'k'");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "arr");
    gb_u32(&b, ATTN_GGUF_ARRAY);
    gb_u32(&b, ATTN_GGUF_UINT32);
    gb_u64(&b, 1ull << 61); /* times 4 bytes wraps past 2^64 */
    gb_zeros(&b, 64);
    EXPECT("array length 2^61 of UINT32", &b, ATTN_E_FORMAT, "'arr'");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "arr");
    gb_u32(&b, ATTN_GGUF_ARRAY);
    gb_u32(&b, ATTN_GGUF_STRING);
    gb_u64(&b, 9); /* 9 strings need 72 bytes: 64 left */
    gb_zeros(&b, 64);
    EXPECT("array of 9 strings in 64 bytes", &b, ATTN_E_FORMAT, "9 STRING");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "arr");
    gb_u32(&b, ATTN_GGUF_ARRAY);
    gb_u32(&b, ATTN_GGUF_STRING);
    gb_u64(&b, 2);
    gb_str(&b, "x");
    gb_u64(&b, 1000);
    gb_zeros(&b, 10);
    EXPECT("array's second string too long", &b, ATTN_E_FORMAT, "string 1 of 2");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "nested");
    gb_u32(&b, ATTN_GGUF_ARRAY);
    gb_u32(&b, ATTN_GGUF_ARRAY);
    gb_u64(&b, 1);
    gb_u32(&b, ATTN_GGUF_UINT8);
    gb_u64(&b, 1);
    gb_zeros(&b, 1);
    EXPECT("array of arrays", &b, ATTN_E_UNSUPPORTED, "arrays of arrays");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_u32(&b, 13);
    gb_zeros(&b, 8);
    EXPECT("value type 13", &b, ATTN_E_FORMAT, "value type 13");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_u32(&b, ATTN_GGUF_ARRAY);
    gb_u32(&b, 0xffffffffu);
    gb_u64(&b, 0);
    EXPECT("array element type 2^32-1", &b, ATTN_E_FORMAT, "element type");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "b");
    gb_u32(&b, ATTN_GGUF_BOOL);
    gb_le(&b, 2, 1);
    EXPECT("BOOL 2", &b, ATTN_E_FORMAT, "BOOL");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "b");
    gb_u32(&b, ATTN_GGUF_ARRAY);
    gb_u32(&b, ATTN_GGUF_BOOL);
    gb_u64(&b, 3);
    gb_bytes(&b, "\x01\x00\xff", 3);
    EXPECT("BOOL element 255", &b, ATTN_E_FORMAT, "element 2");
    gb_header(&b, 3, 0, 1);
    gb_strn(&b, "a\0b", 3);
    gb_u32(&b, ATTN_GGUF_UINT8);
    gb_zeros(&b, 1);
    EXPECT("key with a NUL", &b, ATTN_E_FORMAT, "NUL");
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "dup", 1);
    gb_kv_u32(&b, "dup", 2);
    EXPECT("duplicate key", &b, ATTN_E_FORMAT, "'dup' appears twice");
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "", 1);
    gb_kv_u32(&b, "x", 2);
    EXPECT("empty key", &b, ATTN_OK, NULL);
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "arr");
    gb_u32(&b, ATTN_GGUF_ARRAY);
    gb_u32(&b, ATTN_GGUF_FLOAT64);
    gb_u64(&b, 0);
    EXPECT("empty array", &b, ATTN_OK, NULL);

    /* alignment */
    static const struct {
        uint32_t a;
        attn_status want;
    } aligns[] = {{0, ATTN_E_FORMAT},       {3, ATTN_E_FORMAT},   {48, ATTN_E_FORMAT},
                  {1u << 25, ATTN_E_FORMAT}, {0x80000000u, ATTN_E_FORMAT},
                  {1, ATTN_OK},             {1u << 24, ATTN_OK}};
    for (size_t i = 0; i < sizeof aligns / sizeof *aligns; i++) {
        char label[64];
        snprintf(label, sizeof label, "general.alignment %u", aligns[i].a);
        gb_header(&b, 3, 1, 1);
        gb_kv_u32(&b, "general.alignment", aligns[i].a);
        uint64_t ne[1] = {2};
        gb_tensor(&b, "t", 1, ne, ATTN_Q_F32, 0);
        if (aligns[i].a && aligns[i].a <= (1u << 24)) gb_pad(&b, aligns[i].a);
        gb_zeros(&b, 8);
        EXPECT(label, &b, aligns[i].want, aligns[i].want ? "general.alignment" : NULL);
    }
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "general.alignment");
    gb_u32(&b, ATTN_GGUF_UINT64);
    gb_u64(&b, 32);
    EXPECT("general.alignment as UINT64", &b, ATTN_E_FORMAT, "UINT32");
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "general.alignment");
    gb_u32(&b, ATTN_GGUF_STRING);
    gb_str(&b, "32");
    EXPECT("general.alignment as STRING", &b, ATTN_E_FORMAT, "UINT32");

    /* tensor descriptions */
    static const struct {
        const char *label;
        int nd;
        uint64_t ne[5];
        uint32_t type;
        uint64_t off;
        attn_status want;
        const char *part;
    } ts[] = {
        {"n_dims 0", 0, {0}, ATTN_Q_F32, 0, ATTN_E_FORMAT, "n_dims is 0"},
        {"n_dims 5", 5, {1, 1, 1, 1, 1}, ATTN_Q_F32, 0, ATTN_E_FORMAT, "n_dims is 5"},
        {"dim over 2^63", 1, {1ull << 63}, ATTN_Q_F32, 0, ATTN_E_FORMAT, "ne[0]"},
        {"element count overflow", 3, {1ull << 31, 1ull << 31, 4}, ATTN_Q_F32, 0, ATTN_E_FORMAT,
         "overflows"},
        {"byte size overflow", 2, {1ull << 31, 1ull << 31}, ATTN_Q_F32, 0, ATTN_E_FORMAT,
         "byte size"},
        {"Q4_0 row of 16", 2, {16, 2}, ATTN_Q_Q4_0, 0, ATTN_E_FORMAT, "blocks of 32"},
        {"Q4_K row of 32", 1, {32}, ATTN_Q_Q4_K, 0, ATTN_E_FORMAT, "blocks of 256"},
        {"IQ4_XS row of 32", 1, {32}, ATTN_Q_IQ4_XS, 0, ATTN_E_FORMAT, "blocks of 256"},
        {"IQ4_NL row of 16", 2, {16, 2}, ATTN_Q_IQ4_NL, 0, ATTN_E_FORMAT, "blocks of 32"},
        {"IQ4_NL", 2, {32, 2}, ATTN_Q_IQ4_NL, 0, ATTN_OK, NULL},
        {"type 4 (removed)", 1, {32}, 4, 0, ATTN_E_UNSUPPORTED, "GGML type 4"},
        {"type Q8_1", 1, {32}, 9, 0, ATTN_E_UNSUPPORTED, "Q8_1"},
        {"type I32", 1, {4}, 26, 0, ATTN_E_UNSUPPORTED, "I32"},
        {"type 2^32-1", 1, {4}, 0xffffffffu, 0, ATTN_E_UNSUPPORTED, "4294967295"},
        {"offset not aligned", 1, {2}, ATTN_Q_F32, 4, ATTN_E_FORMAT, "multiple of the alignment"},
        {"offset past the file", 1, {2}, ATTN_Q_F32, 1 << 20, ATTN_E_FORMAT, "past the end"},
        {"offset near 2^64", 1, {2}, ATTN_Q_F32, UINT64_MAX - 31, ATTN_E_FORMAT, "past the end"},
        {"bytes past the file", 1, {64}, ATTN_Q_F32, 0, ATTN_E_FORMAT, "past the end"},
        {"zero dim", 2, {0, 5}, ATTN_Q_Q4_K, 32, ATTN_OK, NULL},
        {"zero dim at the end", 1, {0}, ATTN_Q_F32, 64, ATTN_OK, NULL},
        {"zero dim past the end", 1, {0}, ATTN_Q_F32, 96, ATTN_E_FORMAT, "past the end"},
    };
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
        gb_header(&b, 3, 1, 0);
        gb_tensor(&b, "bad.tensor", ts[i].nd, ts[i].ne, ts[i].type, ts[i].off);
        gb_pad(&b, 32);
        gb_zeros(&b, 64);
        expect(__LINE__, ts[i].label, b.p, b.n, ts[i].want, ts[i].part);
        /* the message names the tensor */
        if (ts[i].want && !strstr(attn_ctx_errmsg(ctx), "bad.tensor"))
            tu_fail(__FILE__, __LINE__, "%s: message lacks the name: %s", ts[i].label,
                    attn_ctx_errmsg(ctx));
    }
    uint64_t two[1] = {2}, four[1] = {4}, eight[1] = {8};
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "x", 1, four, ATTN_Q_F32, 0);
    gb_tensor(&b, "x", 1, four, ATTN_Q_F32, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    EXPECT("duplicate tensor name", &b, ATTN_E_FORMAT, "'x' appears twice");
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "x", 1, eight, ATTN_Q_F32, 0);
    gb_tensor(&b, "y", 1, eight, ATTN_Q_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    EXPECT("two tensors at one offset", &b, ATTN_E_FORMAT, "overlap");
    gb_header(&b, 3, 3, 1);
    gb_kv_u32(&b, "general.alignment", 16);
    gb_tensor(&b, "big", 1, eight, ATTN_Q_F32, 32); /* bytes 32..64 */
    gb_tensor(&b, "small", 1, two, ATTN_Q_F32, 0);  /* 0..8 */
    gb_tensor(&b, "inside", 1, two, ATTN_Q_F32, 48); /* 48..56: inside big */
    gb_pad(&b, 16);
    gb_zeros(&b, 64);
    EXPECT("a tensor inside another", &b, ATTN_E_FORMAT, "'big'");
    gb_header(&b, 3, 1, 0);
    gb_strn(&b, "t\0x", 3);
    gb_u32(&b, 1);
    gb_u64(&b, 4);
    gb_u32(&b, ATTN_Q_F32);
    gb_u64(&b, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 16);
    EXPECT("tensor name with a NUL", &b, ATTN_E_FORMAT, "NUL");
    gb_header(&b, 3, 1, 1);
    gb_kv_u32(&b, "general.alignment", 1u << 24);
    gb_tensor(&b, "t", 1, two, ATTN_Q_F32, 0);
    EXPECT("data section past the end", &b, ATTN_E_FORMAT, "data section would start");
    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "general.alignment", 1u << 24);
    EXPECT("no tensors: no data section needed", &b, ATTN_OK, NULL);
    free(b.p);
}

/* Random byte flips of the fixtures: anything may happen but a crash, a leak or an
 * allocation out of proportion (the fuzz target does this at length). */
static void test_flips(void) {
    uint64_t rng = 77;
    for (size_t i = 0; i < NFIX; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s.gguf", FIXTURES[i]);
        size_t n = 0;
        unsigned char *img = load(path, &n);
        if (!img || n == 0) continue;
        for (int round = 0; round < 300; round++) {
            unsigned char *m = malloc(n);
            memcpy(m, img, n);
            int flips = 1 + (int)(tu_rand(&rng) % 4);
            for (int k = 0; k < flips; k++) {
                size_t at = (size_t)(tu_rand(&rng) % (n < 200 ? n : 200)); /* the header part */
                m[at] = (unsigned char)tu_rand(&rng);
            }
            attn_gguf *g = NULL;
            size_t before = mem.live;
            mem.peak = before;
            attn_status s = attn_gguf_read_memory(ctx, m, n, &g);
            TU_CHECK(s == ATTN_OK || s == ATTN_E_FORMAT || s == ATTN_E_UNSUPPORTED,
                     "%s flipped: %s", FIXTURES[i], attn_status_name(s));
            if (s == ATTN_OK) { /* walk everything */
                for (size_t k = 0; k < attn_gguf_tensor_count(g); k++) {
                    attn_gguf_tensor t;
                    attn_gguf_tensor_at(g, k, &t);
                    (void)fnv1a64(t.data, t.nbytes);
                }
                attn_gguf_free(g);
            }
            TU_CHECK(mem.peak - before <= 6 * n + 1024 && mem.live == before,
                     "%s flipped: %zu bytes allocated", FIXTURES[i], mem.peak - before);
            free(m);
        }
        free(img);
    }
}

/* ---- the real SmolLM2-135M-Instruct.Q4_1.gguf ------------------------------------------ */
static void test_smollm2(void) {
    const char *path = getenv("ATTN_SMOLLM2_GGUF");
    if (!path || !path[0]) {
        printf("test_gguf: ATTN_SMOLLM2_GGUF not set: the SmolLM2-135M checks are skipped\n");
        return;
    }
    attn_gguf *g = NULL;
    if (!TU_STATUS(attn_gguf_open(ctx, path, &g), ATTN_OK, ctx)) return;
    TU_CHECK(attn_gguf_version(g) == 3 && attn_gguf_alignment(g) == 32 &&
                 attn_gguf_kv_count(g) == 33 && attn_gguf_tensor_count(g) == 272 &&
                 attn_gguf_data_offset(g) == 1785664,
             "SmolLM2: header (v%u, %zu keys, %zu tensors)", attn_gguf_version(g),
             attn_gguf_kv_count(g), attn_gguf_tensor_count(g));
    char arch[32];
    TU_STATUS(attn_gguf_get_str_copy(g, "general.architecture", arch, sizeof arch, NULL), ATTN_OK,
              ctx);
    TU_CHECK(!strcmp(arch, "llama"), "architecture %s", arch);
    int64_t v;
    static const struct {
        const char *key;
        int64_t v;
    } ints[] = {{"llama.block_count", 30},          {"llama.embedding_length", 576},
                {"llama.feed_forward_length", 1536}, {"llama.attention.head_count", 9},
                {"llama.attention.head_count_kv", 3}, {"llama.context_length", 8192},
                {"llama.vocab_size", 49152},         {"llama.rope.dimension_count", 64},
                {"tokenizer.ggml.bos_token_id", 1},  {"tokenizer.ggml.eos_token_id", 2},
                {"general.file_type", 3}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        TU_CHECK(attn_gguf_get_int(g, ints[i].key, 0, 1 << 20, &v) == ATTN_OK && v == ints[i].v,
                 "SmolLM2: %s = %lld", ints[i].key, (long long)v);
    double f;
    TU_CHECK(attn_gguf_get_float(g, "llama.rope.freq_base", &f) == ATTN_OK && f == 100000.0,
             "freq_base %g", f);
    TU_CHECK(attn_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &f) == ATTN_OK &&
                 f == (double)1e-5f,
             "rms eps %.17g", f);
    int b = -1;
    TU_CHECK(attn_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == ATTN_OK && b == 0,
             "add_bos_token");
    int et;
    uint64_t n;
    const void *data;
    TU_CHECK(attn_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data) == ATTN_OK &&
                 et == ATTN_GGUF_STRING && n == 49152 && data == NULL,
             "tokens array");
    TU_CHECK(attn_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, NULL) == ATTN_OK &&
                 et == ATTN_GGUF_STRING && n == 48900,
             "merges array");
    TU_CHECK(attn_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data) == ATTN_OK &&
                 et == ATTN_GGUF_INT32 && n == 49152 && le(data, 4) == 3,
             "token_type array");
    static const struct {
        const char *key;
        uint64_t i;
        const char *s;
    } strs[] = {{"tokenizer.ggml.tokens", 0, "<|endoftext|>"},
                {"tokenizer.ggml.tokens", 1, "<|im_start|>"},
                {"tokenizer.ggml.tokens", 100, "t"},
                {"tokenizer.ggml.tokens", 49151, "ectable"},
                {"tokenizer.ggml.merges", 0, "\xc4\xa0 t"},
                {"tokenizer.ggml.merges", 48899, "ect able"}};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        const char *s = NULL;
        size_t len = 0;
        TU_CHECK(attn_gguf_arr_str(g, strs[i].key, strs[i].i, &s, &len) == ATTN_OK &&
                     len == strlen(strs[i].s) && !memcmp(s, strs[i].s, len),
                 "SmolLM2: %s[%llu]", strs[i].key, (unsigned long long)strs[i].i);
    }
    int count[64] = {0};
    uint64_t end = 0;
    for (size_t i = 0; i < attn_gguf_tensor_count(g); i++) {
        attn_gguf_tensor t;
        attn_gguf_tensor_at(g, i, &t);
        if (t.type >= 0 && t.type < 64) count[t.type]++;
        if (t.file_offset + t.nbytes > end) end = t.file_offset + t.nbytes;
    }
    TU_CHECK(count[ATTN_Q_Q4_1] == 210 && count[ATTN_Q_F32] == 61 && count[ATTN_Q_Q8_0] == 1,
             "SmolLM2: tensor types");
    struct stat sb;
    TU_CHECK(stat(path, &sb) == 0 && end == (uint64_t)sb.st_size, "the last tensor ends the file");
    attn_gguf_tensor t;
    TU_STATUS(attn_gguf_tensor_find(g, "token_embd.weight", &t), ATTN_OK, ctx);
    TU_CHECK(t.type == ATTN_Q_Q8_0 && t.n_dims == 2 && t.ne[0] == 576 && t.ne[1] == 49152 &&
                 t.shape[0] == 49152 && t.shape[1] == 576 && t.nbytes == 30081024 &&
                 t.offset == 0,
             "token_embd.weight");
    static const struct {
        const char *name;
        uint64_t off, h;
    } sums[] = {{"output_norm.weight", 96574464, 0xea814bed6299e304ull},
                {"blk.0.attn_q.weight", 32020992, 0xaadbc77c88f41a2dull},
                {"blk.29.ffn_down.weight", 78845184, 0xb55f3a80ad7820afull}};
    for (size_t i = 0; i < sizeof sums / sizeof *sums; i++)
        TU_CHECK(attn_gguf_tensor_find(g, sums[i].name, &t) == ATTN_OK &&
                     t.offset == sums[i].off && fnv1a64(t.data, t.nbytes) == sums[i].h,
                 "SmolLM2: %s bytes", sums[i].name);
    attn_gguf_tensor_find(g, "output_norm.weight", &t);
    float w0;
    memcpy(&w0, t.data, 4);
    TU_CHECK(w0 == 1.7578125f, "output_norm.weight[0] = %g", w0);
    attn_gguf_free(g);
    printf("test_gguf: SmolLM2-135M checked (%s)\n", path);
}

int main(void) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = 1;
    p.alloc = count_alloc;
    p.free = count_free;
    p.alloc_user = &mem;
    if (attn_ctx_create(&p, &ctx) != ATTN_OK) return 1;
    test_fixtures();
    test_getters();
    test_truncations();
    test_hostile();
    test_flips();
    test_smollm2();
    attn_ctx_free(ctx);
    return tu_finish("test_gguf");
}
