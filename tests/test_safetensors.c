/* Safetensors reader, writer, conversion and module load/save; plus the JSON reader behind them.
 * Malformed inputs must give a status and a message, never a crash (run under ASan/UBSan). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/io/json.h"
#include "testutil.h"

static attn_ctx *ctx;

/* ---- helpers --------------------------------------------------------------------------- */
/* A file image: header length, the header text, then dlen data bytes (i * 7 + 1 pattern). */
static unsigned char *mk_file(const char *json, size_t jlen, size_t dlen, size_t *size) {
    *size = 8 + jlen + dlen;
    unsigned char *b = malloc(*size ? *size : 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)jlen >> (8 * i));
    memcpy(b + 8, json, jlen);
    for (size_t i = 0; i < dlen; i++) b[8 + jlen + i] = (unsigned char)(i * 7 + 1);
    return b;
}

/* Reads json + dlen data bytes; the status must be `want`, with a message on failure. */
static void expect_read(const char *label, const char *json, size_t jlen, size_t dlen,
                        attn_status want) {
    size_t size;
    unsigned char *b = mk_file(json, jlen, dlen, &size);
    attn_st *st = (attn_st *)&st; /* must be reset to NULL on failure */
    attn_ctx_clear_error(ctx);
    attn_status s = attn_st_read_memory(ctx, b, size, &st);
    tu_checks++;
    if (s != want)
        tu_fail(__FILE__, __LINE__, "%s: got %s, expected %s (%s)", label, attn_status_name(s),
                attn_status_name(want), attn_ctx_errmsg(ctx));
    if (s != ATTN_OK) {
        TU_CHECK(st == NULL, "%s: out not reset on failure", label);
        TU_CHECK(attn_ctx_errmsg(ctx)[0] != 0, "%s: failure without a message", label);
    } else {
        attn_st_free(st);
    }
    free(b);
}

#define BAD(json, dlen) expect_read(json, json, strlen(json), dlen, ATTN_E_FORMAT)
#define BAD_DTYPE(json, dlen) expect_read(json, json, strlen(json), dlen, ATTN_E_DTYPE)
#define GOOD(json, dlen) expect_read(json, json, strlen(json), dlen, ATTN_OK)

static uint64_t rng = 12345;

/* ---- round trip ------------------------------------------------------------------------ */
typedef struct spec {
    const char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
} spec;

static const spec specs[] = {
    {"f64", ATTN_F64, 2, {2, 3}},
    {"f32", ATTN_F32, 3, {1, 2, 3}},
    {"f16", ATTN_F16, 1, {5}},
    {"bf16", ATTN_BF16, 2, {3, 1}},
    {"i64", ATTN_I64, 1, {3}},
    {"i32", ATTN_I32, 1, {7}},
    {"i8", ATTN_I8, 1, {9}},
    {"u8", ATTN_U8, 2, {3, 3}},
    {"bool", ATTN_BOOL, 1, {4}},
    {"empty", ATTN_F32, 2, {0, 5}},
    {"scalar", ATTN_F64, 0, {0}},
    {"eight.dims", ATTN_I8, 8, {1, 2, 1, 2, 1, 2, 1, 3}},
    /* unicode, quotes, backslash and control characters need escaping or pass through */
    {"h\xc3\xa9llo/\xf0\x9f\x98\x80", ATTN_F16, 1, {1}},
    {"q\"uote\\back\nline\x01\x1f", ATTN_U8, 1, {2}},
    {"", ATTN_U8, 1, {1}},
};
#define NSPECS (sizeof specs / sizeof specs[0])

static size_t spec_bytes(const spec *s) {
    size_t n = attn_dtype_size(s->dtype);
    for (int d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
    return n;
}

static void fill_bytes(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 31 + i * 13 + 5);
}

static attn_st_writer *make_writer(void) {
    attn_st_writer *w = NULL;
    TU_STATUS(attn_st_writer_create(ctx, &w), ATTN_OK, ctx);
    for (size_t i = 0; i < NSPECS; i++) {
        unsigned char buf[256];
        size_t n = spec_bytes(&specs[i]);
        fill_bytes(buf, n, (unsigned)i);
        TU_STATUS(attn_st_writer_add(w, specs[i].name, specs[i].dtype, specs[i].ndim,
                                     specs[i].shape, buf),
                  ATTN_OK, ctx);
    }
    TU_STATUS(attn_st_writer_meta(w, "format", "pt"), ATTN_OK, ctx);
    TU_STATUS(attn_st_writer_meta(w, "note", "first"), ATTN_OK, ctx);
    TU_STATUS(attn_st_writer_meta(w, "note", "\"quoted\" \\ and \t tab, \xc3\xa9"), ATTN_OK, ctx);
    TU_STATUS(attn_st_writer_meta(w, "", ""), ATTN_OK, ctx);
    return w;
}

static void check_contents(const attn_st *st, const unsigned char *image, size_t size) {
    TU_CHECK(attn_st_count(st) == NSPECS, "count %zu", attn_st_count(st));
    /* header order is name order */
    const char *prev = NULL;
    size_t total = 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | image[i];
    TU_CHECK(hlen % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hlen);
    for (size_t i = 0; i < attn_st_count(st); i++) {
        attn_st_tensor t;
        if (!TU_STATUS(attn_st_at(st, i, &t), ATTN_OK, ctx)) return;
        if (prev) TU_CHECK(strcmp(prev, t.name) < 0, "order: '%s' before '%s'", prev, t.name);
        prev = t.name;
        total += t.nbytes;
    }
    TU_CHECK(8 + hlen + total == size, "data section not tiled exactly: %zu + %llu != %zu",
             total, (unsigned long long)hlen, size);
    for (size_t i = 0; i < NSPECS; i++) {
        const spec *s = &specs[i];
        attn_st_tensor t;
        if (!TU_STATUS(attn_st_find(st, s->name, &t), ATTN_OK, ctx)) continue;
        TU_CHECK(strcmp(t.name, s->name) == 0, "name");
        TU_CHECK(t.dtype == s->dtype, "%s dtype", s->name);
        TU_CHECK(t.ndim == s->ndim, "%s ndim", s->name);
        int64_t numel = 1;
        for (int d = 0; d < s->ndim; d++) {
            TU_CHECK(t.shape[d] == s->shape[d], "%s shape[%d]", s->name, d);
            numel *= s->shape[d];
        }
        TU_CHECK(t.numel == numel, "%s numel", s->name);
        size_t n = spec_bytes(s);
        TU_CHECK(t.nbytes == n, "%s nbytes %zu vs %zu", s->name, t.nbytes, n);
        unsigned char want[256];
        fill_bytes(want, n, (unsigned)i);
        TU_CHECK(n == 0 || memcmp(t.data, want, n) == 0, "%s data differs", s->name);
    }
    TU_CHECK(attn_st_meta_count(st) == 3, "meta count %zu", attn_st_meta_count(st));
    const char *v = attn_st_meta(st, "note");
    TU_CHECK(v && strcmp(v, "\"quoted\" \\ and \t tab, \xc3\xa9") == 0, "meta note '%s'",
             v ? v : "(null)");
    v = attn_st_meta(st, "format");
    TU_CHECK(v && strcmp(v, "pt") == 0, "meta format");
    v = attn_st_meta(st, "");
    TU_CHECK(v && strcmp(v, "") == 0, "meta empty key");
    TU_CHECK(attn_st_meta(st, "missing") == NULL, "meta missing");
    const char *k;
    TU_STATUS(attn_st_meta_at(st, 0, &k, &v), ATTN_OK, ctx);
    TU_CHECK(strcmp(k, "format") == 0, "meta order");
    TU_STATUS(attn_st_meta_at(st, 3, &k, &v), ATTN_E_INVALID, ctx);
}

static void test_roundtrip(void) {
    attn_st_writer *w = make_writer();
    void *img = NULL;
    size_t size = 0;
    if (!TU_STATUS(attn_st_writer_to_memory(w, &img, &size), ATTN_OK, ctx)) return;
    attn_st *st = NULL;
    if (TU_STATUS(attn_st_read_memory(ctx, img, size, &st), ATTN_OK, ctx)) {
        check_contents(st, img, size);
        /* offsets from the first data byte must be naturally aligned */
        const unsigned char *lo = NULL;
        for (size_t i = 0; i < attn_st_count(st); i++) {
            attn_st_tensor t;
            attn_st_at(st, i, &t);
            if (!lo || (const unsigned char *)t.data < lo) lo = t.data;
        }
        for (size_t i = 0; i < attn_st_count(st); i++) {
            attn_st_tensor t;
            attn_st_at(st, i, &t);
            size_t off = (size_t)((const unsigned char *)t.data - lo);
            TU_CHECK(off % attn_dtype_size(t.dtype) == 0, "'%s' at data offset %zu unaligned",
                     t.name, off);
        }
        attn_st_free(st);
    }
    /* the same through a file */
    const char *path = "test_safetensors.tmp.safetensors";
    if (TU_STATUS(attn_st_writer_save(w, path), ATTN_OK, ctx)) {
        st = NULL;
        if (TU_STATUS(attn_st_read_file(ctx, path, &st), ATTN_OK, ctx)) {
            check_contents(st, img, size);
            attn_st_free(st);
        }
        FILE *f = fopen(path, "rb");
        unsigned char *back = malloc(size + 1);
        size_t got = f ? fread(back, 1, size + 1, f) : 0;
        if (f) fclose(f);
        TU_CHECK(got == size && memcmp(back, img, size) == 0, "file differs from to_memory");
        free(back);
        remove(path);
    }

    /* writing the read result again gives the same bytes (deterministic serialisation) */
    st = NULL;
    if (TU_STATUS(attn_st_read_memory(ctx, img, size, &st), ATTN_OK, ctx)) {
        attn_st_writer *w2 = NULL;
        TU_STATUS(attn_st_writer_create(ctx, &w2), ATTN_OK, ctx);
        for (size_t i = 0; i < attn_st_meta_count(st); i++) {
            const char *k, *v;
            attn_st_meta_at(st, i, &k, &v);
            attn_st_writer_meta(w2, k, v);
        }
        for (size_t i = 0; i < attn_st_count(st); i++) {
            attn_st_tensor t;
            attn_st_at(st, i, &t);
            TU_STATUS(attn_st_writer_add(w2, t.name, t.dtype, t.ndim, t.shape, t.data), ATTN_OK,
                      ctx);
        }
        void *img2;
        size_t size2;
        if (TU_STATUS(attn_st_writer_to_memory(w2, &img2, &size2), ATTN_OK, ctx)) {
            TU_CHECK(size2 == size && memcmp(img2, img, size) == 0, "rewrite differs");
            attn_buffer_free(ctx, img2);
        }
        attn_st_writer_free(w2);
        attn_st_free(st);
    }

    /* every strict prefix of a valid file is refused */
    int bad = 0;
    for (size_t n = 0; n < size; n++) {
        st = NULL;
        attn_ctx_clear_error(ctx);
        attn_status s = attn_st_read_memory(ctx, img, n, &st);
        if (s != ATTN_E_FORMAT || st || !attn_ctx_errmsg(ctx)[0]) {
            if (!bad++)
                tu_fail(__FILE__, __LINE__, "prefix of %zu/%zu bytes: %s (%s)", n, size,
                        attn_status_name(s), attn_ctx_errmsg(ctx));
            attn_st_free(st);
        }
    }
    tu_checks++;

    attn_buffer_free(ctx, img);
    attn_st_writer_free(w);
}

/* An empty writer gives the 16-byte file of the reference implementation. */
static void test_empty_file(void) {
    attn_st_writer *w = NULL;
    TU_STATUS(attn_st_writer_create(ctx, &w), ATTN_OK, ctx);
    void *img;
    size_t size;
    if (TU_STATUS(attn_st_writer_to_memory(w, &img, &size), ATTN_OK, ctx)) {
        static const unsigned char want[16] = {8, 0, 0, 0, 0, 0, 0, 0,
                                               '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
        TU_CHECK(size == 16 && memcmp(img, want, 16) == 0, "empty file bytes");
        attn_st *st = NULL;
        TU_STATUS(attn_st_read_memory(ctx, img, size, &st), ATTN_OK, ctx);
        TU_CHECK(attn_st_count(st) == 0 && attn_st_meta_count(st) == 0, "empty counts");
        attn_st_free(st);
        attn_buffer_free(ctx, img);
    }
    attn_st_writer_free(w);

    /* the reference implementation's one-tensor example, byte for byte */
    TU_STATUS(attn_st_writer_create(ctx, &w), ATTN_OK, ctx);
    float v[6] = {0, 1, 2, 3, 4, 5};
    int64_t sh[3] = {1, 2, 3};
    TU_STATUS(attn_st_writer_add(w, "attn.0", ATTN_F32, 3, sh, v), ATTN_OK, ctx);
    if (TU_STATUS(attn_st_writer_to_memory(w, &img, &size), ATTN_OK, ctx)) {
        const char *hdr = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],"
                          "\"data_offsets\":[0,24]}}";
        size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
        const unsigned char *p = img;
        TU_CHECK(size == 8 + padded + 24, "example size %zu", size);
        TU_CHECK(p[0] == padded && memcmp(p + 8, hdr, hl) == 0, "example header");
        attn_buffer_free(ctx, img);
    }
    attn_st_writer_free(w);
}

static void test_writer_view(void) {
    /* a transposed (strided) 3x2 view of a 2x3 matrix is stored contiguously */
    float m[6] = {1, 2, 3, 4, 5, 6};
    attn_tensor t = attn_view2(m, 3, 2);
    t.stride[0] = 1;
    t.stride[1] = 3;
    attn_st_writer *w = NULL;
    TU_STATUS(attn_st_writer_create(ctx, &w), ATTN_OK, ctx);
    TU_STATUS(attn_st_writer_add_view(w, "mT", &t), ATTN_OK, ctx);
    attn_tensor b = attn_view1(m, 6);
    b.stride[0] = 0; /* broadcast: six copies of m[0] */
    TU_STATUS(attn_st_writer_add_view(w, "bcast", &b), ATTN_OK, ctx);
    attn_tensor e = attn_view2(NULL, 0, 4);
    TU_STATUS(attn_st_writer_add_view(w, "zero", &e), ATTN_OK, ctx);
    attn_tensor neg = attn_view1(m + 5, 3);
    neg.stride[0] = -2; /* m[5], m[3], m[1] */
    TU_STATUS(attn_st_writer_add_view(w, "neg", &neg), ATTN_OK, ctx);
    int32_t ids[2] = {1, 2};
    int64_t two = 2;
    attn_tensor it = attn_tensor_make(ids, ATTN_I32, 1, &two);
    TU_STATUS(attn_st_writer_add_view(w, "ints", &it), ATTN_E_DTYPE, ctx);
    attn_tensor nul = attn_view1(NULL, 3);
    TU_STATUS(attn_st_writer_add_view(w, "null", &nul), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_writer_add_view(w, "nullview", NULL), ATTN_E_INVALID, ctx);
    void *img;
    size_t size;
    attn_st *st = NULL;
    if (TU_STATUS(attn_st_writer_to_memory(w, &img, &size), ATTN_OK, ctx) &&
        TU_STATUS(attn_st_read_memory(ctx, img, size, &st), ATTN_OK, ctx)) {
        attn_st_tensor info;
        float got[6];
        static const float want_t[6] = {1, 4, 2, 5, 3, 6}, want_b[6] = {1, 1, 1, 1, 1, 1},
                           want_n[3] = {6, 4, 2};
        if (TU_STATUS(attn_st_find(st, "mT", &info), ATTN_OK, ctx)) {
            TU_CHECK(info.ndim == 2 && info.shape[0] == 3 && info.shape[1] == 2, "mT shape");
            TU_STATUS(attn_st_to_f32(ctx, &info, got, 6), ATTN_OK, ctx);
            TU_CHECK(memcmp(got, want_t, sizeof want_t) == 0, "mT data");
        }
        if (TU_STATUS(attn_st_find(st, "bcast", &info), ATTN_OK, ctx)) {
            TU_STATUS(attn_st_to_f32(ctx, &info, got, 6), ATTN_OK, ctx);
            TU_CHECK(memcmp(got, want_b, sizeof want_b) == 0, "bcast data");
        }
        if (TU_STATUS(attn_st_find(st, "neg", &info), ATTN_OK, ctx)) {
            TU_STATUS(attn_st_to_f32(ctx, &info, got, 3), ATTN_OK, ctx);
            TU_CHECK(memcmp(got, want_n, sizeof want_n) == 0, "neg data");
        }
        if (TU_STATUS(attn_st_find(st, "zero", &info), ATTN_OK, ctx)) {
            TU_CHECK(info.numel == 0 && info.nbytes == 0, "zero tensor");
            TU_STATUS(attn_st_to_f32(ctx, &info, NULL, 0), ATTN_OK, ctx);
        }
        TU_CHECK(attn_st_count(st) == 4, "view count %zu", attn_st_count(st));
    }
    attn_st_free(st);
    attn_buffer_free(ctx, img);
    attn_st_writer_free(w);
}

static void test_writer_errors(void) {
    attn_st_writer *w = NULL;
    TU_STATUS(attn_st_writer_create(ctx, &w), ATTN_OK, ctx);
    float x[4] = {0};
    int64_t sh[9] = {4, 1, 1, 1, 1, 1, 1, 1, 1}, bad[1] = {-1}, huge[2] = {INT64_MAX, 3};
    TU_STATUS(attn_st_writer_add(w, "a", ATTN_F32, 1, sh, x), ATTN_OK, ctx);
    TU_STATUS(attn_st_writer_add(w, "a", ATTN_F32, 1, sh, x), ATTN_E_INVALID, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "'a'") != NULL, "duplicate message names it: %s",
             attn_ctx_errmsg(ctx));
    TU_STATUS(attn_st_writer_add(w, "__metadata__", ATTN_F32, 1, sh, x), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_writer_add(w, "bad\xff", ATTN_F32, 1, sh, x), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_writer_add(w, "b", ATTN_F32, 9, sh, x), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_writer_add(w, "b", ATTN_F32, -1, sh, x), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_writer_add(w, "b", ATTN_F32, 1, bad, x), ATTN_E_SHAPE, ctx);
    TU_STATUS(attn_st_writer_add(w, "b", ATTN_F32, 2, huge, x), ATTN_E_OVERFLOW, ctx);
    TU_STATUS(attn_st_writer_add(w, "b", (attn_dtype)42, 1, sh, x), ATTN_E_DTYPE, ctx);
    TU_STATUS(attn_st_writer_add(w, "b", ATTN_F32, 1, sh, NULL), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_writer_add(w, NULL, ATTN_F32, 1, sh, x), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_writer_meta(w, "k", "\xc0\xaf"), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_writer_meta(w, NULL, "v"), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_writer_save(w, "/nonexistent-dir-attn/x.safetensors"), ATTN_E_IO, ctx);
    TU_CHECK(attn_ctx_errmsg(ctx)[0] != 0, "save error message");
    TU_STATUS(attn_st_writer_add(NULL, "c", ATTN_F32, 1, sh, x), ATTN_E_INVALID, ctx);
    attn_st_writer_free(w);
    attn_st_writer_free(NULL);
    attn_buffer_free(ctx, NULL);
}

/* ---- conversion ------------------------------------------------------------------------ */
static attn_st_tensor info_of(attn_dtype dt, const void *data, int64_t n) {
    attn_st_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "t";
    t.dtype = dt;
    t.ndim = 1;
    t.shape[0] = n;
    t.numel = n;
    t.data = data;
    t.nbytes = (size_t)n * attn_dtype_size(dt);
    return t;
}

static int same_float(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void test_to_f32(void) {
    /* F16: normal, max, smallest subnormal, largest subnormal, smallest normal, inf, nan, -0 */
    static const struct { uint16_t bits; float value; } f16[] = {
        {0x3C00, 1.0f}, {0xC000, -2.0f}, {0x7BFF, 65504.0f}, {0x0001, 5.9604644775390625e-8f},
        {0x03FF, 6.097555160522461e-5f}, {0x0400, 6.103515625e-5f},
        {0x8001, -5.9604644775390625e-8f},
        {0x3555, 0.333251953125f}, {0x7C00, INFINITY}, {0xFC00, -INFINITY}, {0x7E00, NAN},
        {0x8000, -0.0f}, {0x0000, 0.0f}, {0x0200, 3.0517578125e-5f}, {0x3BFF, 0.99951171875f}};
    size_t n = sizeof f16 / sizeof f16[0];
    /* unaligned, little-endian bytes */
    unsigned char raw[1 + 2 * 32];
    for (size_t i = 0; i < n; i++) {
        raw[1 + 2 * i] = (unsigned char)(f16[i].bits & 0xFF);
        raw[2 + 2 * i] = (unsigned char)(f16[i].bits >> 8);
    }
    float out[32];
    attn_st_tensor t = info_of(ATTN_F16, raw + 1, (int64_t)n);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, n), ATTN_OK, ctx);
    for (size_t i = 0; i < n; i++)
        TU_CHECK(same_float(out[i], f16[i].value), "F16 %04x -> %.9g, expected %.9g",
                 f16[i].bits, out[i], f16[i].value);
    /* every finite F16 value converts exactly: compare against ldexp */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        unsigned char b[2] = {(unsigned char)h, (unsigned char)(h >> 8)};
        attn_st_tensor one = info_of(ATTN_F16, b, 1);
        float v;
        attn_st_to_f32(ctx, &one, &v, 1);
        int e = (int)((h >> 10) & 0x1F), m = (int)(h & 0x3FF);
        double ref = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                      : ldexp(1024 + m, e - 25);
        if (h & 0x8000) ref = -ref;
        if (!same_float(v, (float)ref) && !bad++)
            tu_fail(__FILE__, __LINE__, "F16 %04x -> %.9g, expected %.9g", h, v, ref);
    }
    tu_checks++;

    static const struct { uint16_t bits; float value; } bf16[] = {
        {0x3F80, 1.0f}, {0x4049, 3.140625f}, {0xC2F7, -123.5f}, {0x0001, 0x1p-133f},
        {0x007F, 0x1.fcp-127f}, {0x0080, 0x1p-126f}, {0x7F7F, 0x1.fep127f}, {0x8001, -0x1p-133f},
        {0x7F80, INFINITY}, {0xFF80, -INFINITY}, {0x7FC0, NAN}, {0x8000, -0.0f}};
    n = sizeof bf16 / sizeof bf16[0];
    for (size_t i = 0; i < n; i++) {
        raw[1 + 2 * i] = (unsigned char)(bf16[i].bits & 0xFF);
        raw[2 + 2 * i] = (unsigned char)(bf16[i].bits >> 8);
    }
    t = info_of(ATTN_BF16, raw + 1, (int64_t)n);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, n), ATTN_OK, ctx);
    for (size_t i = 0; i < n; i++)
        TU_CHECK(same_float(out[i], bf16[i].value), "BF16 %04x -> %.9g, expected %.9g",
                 bf16[i].bits, out[i], bf16[i].value);

    /* F64: rounding to nearest, overflow to inf, underflow to 0 */
    double d[6] = {0.1, -2.5, 1e300, -1e300, 1e-300, 16777217.0};
    float dw[6] = {0.1f, -2.5f, INFINITY, -INFINITY, 0.0f, 16777216.0f};
    unsigned char db[1 + 48];
    for (int i = 0; i < 6; i++) {
        uint64_t b;
        memcpy(&b, &d[i], 8);
        for (int k = 0; k < 8; k++) db[1 + 8 * i + k] = (unsigned char)(b >> (8 * k));
    }
    t = info_of(ATTN_F64, db + 1, 6);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 6), ATTN_OK, ctx);
    for (int i = 0; i < 6; i++)
        TU_CHECK(same_float(out[i], dw[i]), "F64 %g -> %.9g, expected %.9g", d[i], out[i], dw[i]);

    /* F32 through little-endian bytes */
    float f[3] = {1.5f, -0.0f, 3.4e38f};
    unsigned char fb[1 + 12];
    for (int i = 0; i < 3; i++) {
        uint32_t b;
        memcpy(&b, &f[i], 4);
        for (int k = 0; k < 4; k++) fb[1 + 4 * i + k] = (unsigned char)(b >> (8 * k));
    }
    t = info_of(ATTN_F32, fb + 1, 3);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 3), ATTN_OK, ctx);
    for (int i = 0; i < 3; i++) TU_CHECK(same_float(out[i], f[i]), "F32 %d", i);

    /* integers */
    int64_t i64[4] = {-5, (int64_t)1 << 40, INT64_MIN, INT64_MAX};
    unsigned char ib[1 + 32];
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 8; k++)
            ib[1 + 8 * i + k] = (unsigned char)((uint64_t)i64[i] >> (8 * k));
    t = info_of(ATTN_I64, ib + 1, 4);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 4), ATTN_OK, ctx);
    TU_CHECK(out[0] == -5.0f && out[1] == 0x1p40f && out[2] == -0x1p63f && out[3] == 0x1p63f,
             "I64 values");
    int32_t i32[3] = {-1, INT32_MIN, 123456};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            ib[1 + 4 * i + k] = (unsigned char)((uint32_t)i32[i] >> (8 * k));
    t = info_of(ATTN_I32, ib + 1, 3);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 3), ATTN_OK, ctx);
    TU_CHECK(out[0] == -1.0f && out[1] == -2147483648.0f && out[2] == 123456.0f, "I32 values");
    unsigned char bytes[3] = {0x80, 0xFF, 0x7F};
    t = info_of(ATTN_I8, bytes, 3);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 3), ATTN_OK, ctx);
    TU_CHECK(out[0] == -128.0f && out[1] == -1.0f && out[2] == 127.0f, "I8 values");
    t = info_of(ATTN_U8, bytes, 3);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 3), ATTN_OK, ctx);
    TU_CHECK(out[0] == 128.0f && out[1] == 255.0f && out[2] == 127.0f, "U8 values");

    /* refusals */
    t = info_of(ATTN_BOOL, bytes, 3);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 3), ATTN_E_DTYPE, ctx);
    TU_CHECK(attn_ctx_errmsg(ctx)[0] != 0, "BOOL message");
    t = info_of(ATTN_U8, bytes, 3);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 2), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 4), ATTN_E_INVALID, ctx);
    t.nbytes = 2; /* inconsistent info must not be trusted */
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 3), ATTN_E_INVALID, ctx);
    t = info_of((attn_dtype)99, bytes, 3);
    TU_STATUS(attn_st_to_f32(ctx, &t, out, 3), ATTN_E_DTYPE, ctx);
    TU_STATUS(attn_st_to_f32(ctx, NULL, out, 3), ATTN_E_INVALID, ctx);
}

/* ---- valid but unusual headers --------------------------------------------------------- */
static void test_valid_headers(void) {
    GOOD("{}", 0);
    GOOD("  {  }  \n\t\r ", 0);
    GOOD("{\"__metadata__\":{}}", 0);
    GOOD("{\"a\":{\"data_offsets\":[0,4],\"shape\":[],\"dtype\":\"F32\"}}", 4);
    GOOD("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]}}",
         4);
    /* gaps and trailing bytes are tolerated (see safetensors.c) */
    GOOD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]}}", 9);
    /* tensors listed out of offset order */
    GOOD("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}",
         4);

    /* escapes decode to UTF-8; the order of the header is kept */
    const char *json = "{\"z\\u00e9\\ud83d\\ude00\\n\\/\\\\\\\"\":"
                       "{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                       "\"\\u0041\\u00C9\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]},"
                       "\"__metadata__\":{\"k\\tey\":\"v\\u00e9\\uD834\\uDD1E\"}}   ";
    size_t size;
    unsigned char *b = mk_file(json, strlen(json), 3, &size);
    attn_st *st = NULL;
    if (TU_STATUS(attn_st_read_memory(ctx, b, size, &st), ATTN_OK, ctx)) {
        attn_st_tensor t;
        TU_CHECK(attn_st_count(st) == 2, "count");
        attn_st_at(st, 0, &t);
        TU_CHECK(strcmp(t.name, "z\xc3\xa9\xf0\x9f\x98\x80\n/\\\"") == 0, "escaped name '%s'",
                 t.name);
        TU_CHECK(t.dtype == ATTN_I8 && t.nbytes == 2 && t.data != NULL, "first tensor");
        attn_st_at(st, 1, &t);
        TU_CHECK(strcmp(t.name, "A\xc3\x89") == 0, "second name '%s'", t.name);
        TU_STATUS(attn_st_find(st, "A\xc3\x89", &t), ATTN_OK, ctx);
        const char *v = attn_st_meta(st, "k\tey");
        TU_CHECK(v && strcmp(v, "v\xc3\xa9\xf0\x9d\x84\x9e") == 0, "meta value");
        attn_ctx_clear_error(ctx);
        TU_STATUS(attn_st_find(st, "nope", &t), ATTN_E_NOT_FOUND, ctx);
        TU_CHECK(attn_ctx_errmsg(ctx)[0] == 0, "find sets no message");
        TU_STATUS(attn_st_at(st, 2, &t), ATTN_E_INVALID, ctx);
        attn_st_free(st);
    }
    free(b);
}

/* ---- malformed headers ----------------------------------------------------------------- */
#define T1(fields) "{\"a\":{" fields "}}"
#define OK_A "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"

static void test_malformed(void) {
    /* file framing */
    for (size_t n = 0; n < 8; n++) {
        unsigned char z[8] = {0};
        attn_st *st = NULL;
        TU_STATUS(attn_st_read_memory(ctx, z, n, &st), ATTN_E_FORMAT, ctx);
    }
    {
        size_t size;
        unsigned char *b = mk_file("{}", 2, 0, &size);
        attn_st *st = NULL;
        b[0] = 3; /* header length beyond the file */
        TU_STATUS(attn_st_read_memory(ctx, b, size, &st), ATTN_E_FORMAT, ctx);
        memset(b, 0, 8);
        b[7] = 0x80; /* 2^63 */
        TU_STATUS(attn_st_read_memory(ctx, b, size, &st), ATTN_E_FORMAT, ctx);
        memset(b, 0xFF, 8); /* 2^64 - 1: 8 + N wraps if computed naively */
        TU_STATUS(attn_st_read_memory(ctx, b, size, &st), ATTN_E_FORMAT, ctx);
        uint64_t big = 100000001; /* over the header cap */
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)(big >> (8 * i));
        TU_STATUS(attn_st_read_memory(ctx, b, size, &st), ATTN_E_FORMAT, ctx);
        free(b);
        TU_STATUS(attn_st_read_memory(ctx, NULL, 10, &st), ATTN_E_INVALID, ctx);
    }

    /* JSON syntax */
    BAD("", 0);
    BAD(" ", 0);
    BAD("[]", 0);
    BAD("\"x\"", 0);
    BAD("null", 0);
    BAD("{", 0);
    BAD("}", 0);
    BAD("{}}", 0);
    BAD("{} x", 0);
    BAD("{}{}", 0);
    BAD("{,}", 0);
    BAD("{\"a\"}", 0);
    BAD("{\"a\":}", 0);
    BAD("{\"a\" 1}", 0);
    BAD("{'a':1}", 0);
    BAD("{a:1}", 0);
    BAD("\xef\xbb\xbf{}", 0); /* byte order mark */
    BAD("{\"a\":{" OK_A "},}", 4);
    BAD("{\"a\":{" OK_A "}", 4);
    BAD("{\"a\":{" OK_A ",}}", 4);
    BAD("{\"a\":{" OK_A "}\"b\":{}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[,1],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1 1],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[+1],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[-],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[0x1],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} ,", 4);
    BAD("{\"a\":tru}", 0);
    BAD("{\"a\":nul}", 0);

    /* strings */
    BAD("{\"\\x\":{" OK_A "}}", 4);
    BAD("{\"\\u12\":{" OK_A "}}", 4);
    BAD("{\"\\u12g4\":{" OK_A "}}", 4);
    BAD("{\"\\ud800\":{" OK_A "}}", 4);
    BAD("{\"\\ud800\\u0041\":{" OK_A "}}", 4);
    BAD("{\"\\udc00\":{" OK_A "}}", 4);
    BAD("{\"\\ud800\\ud800\":{" OK_A "}}", 4);
    BAD("{\"a\x01\":{" OK_A "}}", 4);
    BAD("{\"a\n\":{" OK_A "}}", 4);
    BAD("{\"\xff\":{" OK_A "}}", 4);
    BAD("{\"\xc0\xaf\":{" OK_A "}}", 4);
    BAD("{\"\xe2\x82\":{" OK_A "}}", 4);
    BAD("{\"\xed\xa0\x80\":{" OK_A "}}", 4); /* UTF-8 encoded surrogate */
    BAD("{\"\xf4\x90\x80\x80\":{" OK_A "}}", 4); /* above U+10FFFF */
    BAD("{\"\x80\":{" OK_A "}}", 4);
    BAD("{\"a\\u0000b\":{" OK_A "}}", 4); /* NUL in a name */
    BAD("{\"a", 0);
    BAD("{\"a\\", 0);
    BAD("{\"a\\u00", 0);

    /* tensor entries: wrong types, missing and extra fields */
    BAD("{\"a\":1}", 0);
    BAD("{\"a\":[]}", 0);
    BAD("{\"a\":\"F32\"}", 0);
    BAD("{\"a\":null}", 0);
    BAD(T1(""), 0);
    BAD(T1("\"shape\":[1],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1]"), 4);
    BAD(T1(OK_A ",\"extra\":1"), 4);
    BAD(T1(OK_A ",\"dtype\":\"F32\""), 4);
    BAD(T1(OK_A ",\"shape\":[1]"), 4);
    BAD(T1(OK_A ",\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":[\"F32\"],\"shape\":[1],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"0\":4}"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]"), 8);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",\"4\"]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":null"), 4);

    /* shapes: negative, overflowing, too many dimensions */
    BAD(T1("\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[-0],\"data_offsets\":[0,4]"), 4); /* 0 elems, 4 bytes */
    BAD(T1("\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[99999999999999999999999],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[-9223372036854775809],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[3037000500,3037000500],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[2305843009213693952],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F64\",\"shape\":[1152921504606846976],\"data_offsets\":[0,0]"), 4);
    BAD(T1("\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[0,-1],\"data_offsets\":[0,0]"), 4);
    GOOD(T1("\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]"), 4);
    GOOD(T1("\"dtype\":\"F32\",\"shape\":[0,9223372036854775807],\"data_offsets\":[0,0]"), 4);

    /* offsets: out of range, reversed, inconsistent with shape * dtype */
    BAD(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[5,5]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]"), 8);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]"), 8);
    BAD(T1("\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]"), 4);
    BAD(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775807,"
           "9223372036854775807]"),
        4);
    BAD(T1("\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9223372036854775806,"
           "9223372036854775807]"),
        4);

    /* overlapping tensors */
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        12);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        12);
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[10],\"data_offsets\":[0,10]},"
        "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[3,3]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
        10);
    GOOD("{\"a\":{\"dtype\":\"U8\",\"shape\":[10],\"data_offsets\":[0,10]},"
         "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[3,3]}}",
         10);

    /* dtypes */
    BAD_DTYPE(T1("\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]"), 4);
    BAD_DTYPE(T1("\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[0,2]"), 4);
    BAD_DTYPE(T1("\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[0,2]"), 4);
    BAD_DTYPE(T1("\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[0,8]"), 8);
    BAD_DTYPE(T1("\"dtype\":\"float32\",\"shape\":[1],\"data_offsets\":[0,4]"), 4);
    BAD_DTYPE(T1("\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]"), 4);
    BAD_DTYPE(T1("\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,4]"), 4);
    {
        attn_ctx_clear_error(ctx);
        const char *j = "{\"weird\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[0,2]}}";
        size_t size;
        unsigned char *b = mk_file(j, strlen(j), 2, &size);
        attn_st *st = NULL;
        TU_STATUS(attn_st_read_memory(ctx, b, size, &st), ATTN_E_DTYPE, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "weird") && strstr(attn_ctx_errmsg(ctx), "I16"),
                 "dtype message names tensor and dtype: %s", attn_ctx_errmsg(ctx));
        free(b);
    }

    /* duplicates */
    BAD("{\"a\":{" OK_A "},\"a\":{" OK_A "}}", 4);
    BAD("{\"a\":{" OK_A "},\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
        "\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
        4);
    BAD("{\"a\":{" OK_A "},\"\\u0061\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
        4);
    BAD("{\"__metadata__\":{},\"__metadata__\":{}}", 0);
    BAD("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0);

    /* metadata */
    BAD("{\"__metadata__\":{\"k\":1}}", 0);
    BAD("{\"__metadata__\":{\"k\":null}}", 0);
    BAD("{\"__metadata__\":{\"k\":true}}", 0);
    BAD("{\"__metadata__\":{\"k\":[\"v\"]}}", 0);
    BAD("{\"__metadata__\":{\"k\":{}}}", 0);
    BAD("{\"__metadata__\":[]}", 0);
    BAD("{\"__metadata__\":\"x\"}", 0);
    BAD("{\"__metadata__\":null}", 0);
    BAD("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0);
    BAD("{\"__metadata__\":{\"k\\u0000\":\"v\"}}", 0);

    /* deep nesting never recurses */
    {
        char deep[4096];
        size_t n = 0;
        n += (size_t)snprintf(deep, sizeof deep, "{\"__metadata__\":");
        for (int i = 0; i < 1000; i++) deep[n++] = '[';
        deep[n] = 0;
        expect_read("deep", deep, n, 0, ATTN_E_FORMAT);
    }

    /* file errors */
    attn_st *st = NULL;
    TU_STATUS(attn_st_read_file(ctx, "no/such/file.safetensors", &st), ATTN_E_NOT_FOUND, ctx);
    TU_CHECK(st == NULL && attn_ctx_errmsg(ctx)[0], "missing file message");
    TU_STATUS(attn_st_read_file(ctx, ".", &st), ATTN_E_IO, ctx);
    TU_STATUS(attn_st_read_file(ctx, NULL, &st), ATTN_E_INVALID, ctx);
    {
        /* a malformed file's message names the file */
        const char *path = "test_safetensors.tmp.bad";
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite("\x02\0\0\0\0\0\0\0[]", 1, 10, f);
            fclose(f);
            TU_STATUS(attn_st_read_file(ctx, path, &st), ATTN_E_FORMAT, ctx);
            TU_CHECK(strstr(attn_ctx_errmsg(ctx), path) != NULL, "file name in message: %s",
                     attn_ctx_errmsg(ctx));
            remove(path);
        }
    }
    /* NULL handles */
    attn_st_free(NULL);
    TU_CHECK(attn_st_count(NULL) == 0 && attn_st_meta_count(NULL) == 0, "NULL counts");
    TU_CHECK(attn_st_meta(NULL, "k") == NULL, "NULL meta");
}

/* ---- fuzz: random mutations of valid files --------------------------------------------- */
static void exercise(const attn_st *st) {
    for (size_t i = 0; i < attn_st_count(st); i++) {
        attn_st_tensor t;
        if (attn_st_at(st, i, &t) != ATTN_OK) continue;
        attn_st_tensor u;
        TU_CHECK(attn_st_find(st, t.name, &u) == ATTN_OK && u.data == t.data, "find by name");
        if (t.dtype == ATTN_BOOL) continue;
        float *buf = malloc((size_t)t.numel * sizeof(float) + 1);
        TU_CHECK(attn_st_to_f32(ctx, &t, buf, (size_t)t.numel) == ATTN_OK, "to_f32");
        free(buf);
    }
    for (size_t i = 0; i < attn_st_meta_count(st); i++) {
        const char *k, *v;
        attn_st_meta_at(st, i, &k, &v);
        TU_CHECK(attn_st_meta(st, k) == v, "meta by key");
    }
}

static void test_fuzz(void) {
    attn_st_writer *w = make_writer();
    void *img;
    size_t size;
    if (!TU_STATUS(attn_st_writer_to_memory(w, &img, &size), ATTN_OK, ctx)) return;
    attn_st_writer_free(w);
    const char *alphabet = "{}[]\",:0123456789-.eE \\u\"dtypeshapedata_offsetsF32__metadata__";
    unsigned char *buf = malloc(size + 64);
    int counts[4] = {0, 0, 0, 0}, unexpected = 0;
    for (int iter = 0; iter < 6000; iter++) {
        memcpy(buf, img, size);
        size_t n = size;
        int muts = 1 + (int)(tu_rand(&rng) % 4);
        for (int m = 0; m < muts; m++) {
            size_t at = (size_t)(tu_rand(&rng) % n);
            switch (tu_rand(&rng) % 6) {
            case 0: buf[at] ^= (unsigned char)(1u << (tu_rand(&rng) % 8)); break;
            case 1: buf[at] = (unsigned char)tu_rand(&rng); break;
            case 2: buf[at] = (unsigned char)alphabet[tu_rand(&rng) % strlen(alphabet)]; break;
            case 3: /* delete a byte (header length stays: forces inconsistencies) */
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
                break;
            case 4: /* truncate */
                n = at + 1;
                break;
            case 5: /* header-area digit tweak */
                if (at < 8) buf[at] = (unsigned char)(tu_rand(&rng) & 3);
                else buf[at] = (unsigned char)('0' + tu_rand(&rng) % 10);
                break;
            }
            if (n == 0) break;
        }
        attn_st *st = NULL;
        attn_ctx_clear_error(ctx);
        attn_status s = attn_st_read_memory(ctx, buf, n, &st);
        if (s == ATTN_OK) {
            counts[0]++;
            exercise(st);
            attn_st_free(st);
        } else if (s == ATTN_E_FORMAT || s == ATTN_E_DTYPE) {
            counts[s == ATTN_E_FORMAT ? 1 : 2]++;
            if (!attn_ctx_errmsg(ctx)[0] || st) unexpected++;
        } else {
            counts[3]++;
            unexpected++;
        }
    }
    TU_CHECK(unexpected == 0, "fuzz: %d unexpected outcomes", unexpected);
    TU_CHECK(counts[1] > 0, "fuzz: nothing was refused");
    free(buf);
    attn_buffer_free(ctx, img);
}

/* ---- JSON reader ----------------------------------------------------------------------- */
static attn_status json_skip_all(const char *text) {
    attn__json_reader r;
    attn_status s = attn__json_open(&r, ctx, text, strlen(text), "test", 0);
    if (!s) s = attn__json_skip(&r);
    if (!s) s = attn__json_finish(&r);
    attn__json_close(&r);
    return s;
}

static void test_json(void) {
    static const char *good[] = {"0", "-0", "1.5e-3", "-12.0E+5", "true", "false", "null",
                                 "\"\"", "[]", "{}", "[1,[2,{\"a\":[3]}],\"x\"]",
                                 "{\"a\":1,\"a\":2}", /* duplicates are the caller's business */
                                 " \n[ 1 , 2 ]\t", "123456789012345678901234567890",
                                 "\"\\ud83d\\ude00\\u00e9\\b\\f\\n\\r\\t\\/\\\\\\\"\""};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        TU_CHECK(json_skip_all(good[i]) == ATTN_OK, "JSON '%s' refused: %s", good[i],
                 attn_ctx_errmsg(ctx));
    static const char *bad[] = {"", "01", "1.", ".5", "+1", "1e", "-", "--1", "tru", "nulll",
                                "[1,]", "[,]", "{\"a\"}", "{\"a\":1,}", "[1 2]", "\"abc",
                                "\"\\q\"", "\"\\ud800\"", "\"\t\"", "[}", "{]", "1 2", "[",
                                "NaN", "Infinity", "'a'", "\"\\u00\"", "{1:2}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        attn_ctx_clear_error(ctx);
        TU_CHECK(json_skip_all(bad[i]) == ATTN_E_FORMAT && attn_ctx_errmsg(ctx)[0],
                 "JSON '%s' accepted", bad[i]);
    }
    /* depth limit: 64 nested arrays pass, 65 do not */
    char deep[300];
    for (int depth = 63; depth <= 66; depth++) {
        int n = 0;
        for (int i = 0; i < depth; i++) deep[n++] = '[';
        for (int i = 0; i < depth; i++) deep[n++] = ']';
        deep[n] = 0;
        attn_status want = depth <= ATTN__JSON_MAX_DEPTH ? ATTN_OK : ATTN_E_FORMAT;
        TU_CHECK(json_skip_all(deep) == want, "depth %d", depth);
    }
    /* integers: the int64 range exactly */
    static const struct { const char *text; int ok; int64_t v; } ints[] = {
        {"9223372036854775807", 1, INT64_MAX}, {"-9223372036854775808", 1, INT64_MIN},
        {"9223372036854775808", 0, 0},         {"-9223372036854775809", 0, 0},
        {"18446744073709551616", 0, 0},        {"-0", 1, 0},
        {"1.0", 0, 0},                         {"1e2", 0, 0},
        {"42", 1, 42}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        attn__json_reader r;
        int64_t v = -1;
        attn__json_open(&r, ctx, ints[i].text, strlen(ints[i].text), "test", 0);
        attn_status s = attn__json_int(&r, &v);
        attn__json_close(&r);
        TU_CHECK((s == ATTN_OK) == ints[i].ok && (!ints[i].ok || v == ints[i].v),
                 "int '%s': %s %lld", ints[i].text, attn_status_name(s), (long long)v);
    }
    /* not NUL-terminated: the reader stops at len even when more bytes follow */
    {
        attn__json_reader r;
        const char *text = "\"abc\"xyz";
        const char *s = NULL;
        size_t n = 0;
        attn__json_open(&r, ctx, text, 5, "test", 0);
        TU_CHECK(attn__json_string(&r, &s, &n) == ATTN_OK && n == 3 && strcmp(s, "abc") == 0,
                 "bounded string");
        TU_CHECK(attn__json_finish(&r) == ATTN_OK, "bounded finish");
        attn__json_close(&r);
        attn__json_open(&r, ctx, text, 4, "test", 0); /* the closing quote is outside */
        TU_CHECK(attn__json_string(&r, &s, &n) == ATTN_E_FORMAT, "string cut by len");
        attn__json_close(&r);
        attn__json_open(&r, ctx, "truex", 3, "test", 0);
        int bv;
        TU_CHECK(attn__json_bool(&r, &bv) == ATTN_E_FORMAT, "literal cut by len");
        attn__json_close(&r);
    }
    TU_CHECK(attn__json_utf8_valid("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10), "utf8 ok");
    TU_CHECK(!attn__json_utf8_valid("\xe0\x80\x80", 3), "utf8 overlong 3");
    TU_CHECK(!attn__json_utf8_valid("\xf0\x80\x80\x80", 4), "utf8 overlong 4");
    TU_CHECK(!attn__json_utf8_valid("\xc3", 1), "utf8 truncated");
}

/* ---- modules --------------------------------------------------------------------------- */
static void test_module(void) {
    attn_module *a = NULL, *b = NULL;
    if (!TU_STATUS(attn_linear_create(ctx, 3, 2, 1, &a), ATTN_OK, ctx)) return;
    if (!TU_STATUS(attn_linear_create(ctx, 3, 2, 1, &b), ATTN_OK, ctx)) {
        attn_module_free(a);
        return;
    }
    attn_tensor wv, bv;
    attn_module_param(ctx, a, "weight", &wv);
    attn_module_param(ctx, a, "bias", &bv);
    tu_fill(wv.data, 6, 1, -1, 1);
    tu_fill(bv.data, 2, 2, -1, 1);
    attn_st_writer *w = NULL;
    attn_st_writer_create(ctx, &w);
    TU_STATUS(attn_module_save(ctx, a, w, "enc."), ATTN_OK, ctx);
    TU_STATUS(attn_module_save(ctx, a, w, "enc."), ATTN_E_INVALID, ctx); /* duplicates */
    void *img;
    size_t size;
    attn_st *st = NULL;
    if (TU_STATUS(attn_st_writer_to_memory(w, &img, &size), ATTN_OK, ctx) &&
        TU_STATUS(attn_st_read_memory(ctx, img, size, &st), ATTN_OK, ctx)) {
        attn_st_tensor t;
        TU_STATUS(attn_st_find(st, "enc.weight", &t), ATTN_OK, ctx);
        TU_STATUS(attn_module_load(ctx, b, st, "enc.", 1), ATTN_OK, ctx);
        attn_tensor w2, b2;
        attn_module_param(ctx, b, "weight", &w2);
        attn_module_param(ctx, b, "bias", &b2);
        TU_CHECK(memcmp(w2.data, wv.data, 6 * sizeof(float)) == 0, "loaded weight");
        TU_CHECK(memcmp(b2.data, bv.data, 2 * sizeof(float)) == 0, "loaded bias");
        TU_STATUS(attn_module_load(ctx, b, st, NULL, 1), ATTN_E_NOT_FOUND, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "weight") != NULL, "missing names it: %s",
                 attn_ctx_errmsg(ctx));
        TU_STATUS(attn_module_load(ctx, b, st, NULL, 0), ATTN_OK, ctx);
        attn_st_free(st);
    }
    attn_buffer_free(ctx, img);
    attn_st_writer_free(w);

    /* F16 weights convert; a wrong shape is refused naming both shapes and loads nothing */
    attn_st_writer_create(ctx, &w);
    uint16_t half[6] = {0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600}; /* 1..6 */
    int64_t ws[2] = {2, 3}, bs[1] = {2}, bad[2] = {3, 2};
    attn_st_writer_add(w, "weight", ATTN_F16, 2, ws, half);
    attn_st_writer_add(w, "bias", ATTN_BF16, 1, bs, (uint16_t[]){0xBF80, 0x3F00});
    attn_st_writer_add(w, "bad.weight", ATTN_F32, 2, bad, (float[6]){0});
    attn_st_writer_add(w, "bad.bias", ATTN_F32, 1, bs, (float[2]){0});
    attn_st_writer_add(w, "int.weight", ATTN_I32, 2, ws, (int32_t[6]){0});
    attn_st_writer_add(w, "int.bias", ATTN_I32, 1, bs, (int32_t[2]){0});
    if (TU_STATUS(attn_st_writer_to_memory(w, &img, &size), ATTN_OK, ctx) &&
        TU_STATUS(attn_st_read_memory(ctx, img, size, &st), ATTN_OK, ctx)) {
        TU_STATUS(attn_module_load(ctx, b, st, "", 1), ATTN_OK, ctx);
        attn_tensor w2, b2;
        attn_module_param(ctx, b, "weight", &w2);
        attn_module_param(ctx, b, "bias", &b2);
        const float *pw = w2.data, *pb = b2.data;
        TU_CHECK(pw[0] == 1 && pw[5] == 6 && pb[0] == -1 && pb[1] == 0.5f, "F16/BF16 load");
        TU_STATUS(attn_module_load(ctx, b, st, "bad.", 1), ATTN_E_SHAPE, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "[3, 2]") && strstr(attn_ctx_errmsg(ctx), "[2, 3]"),
                 "shape message: %s", attn_ctx_errmsg(ctx));
        TU_STATUS(attn_module_load(ctx, b, st, "bad.", 0), ATTN_E_SHAPE, ctx);
        TU_CHECK(pw[0] == 1 && pb[0] == -1, "failed load left the module alone");
        TU_STATUS(attn_module_load(ctx, b, st, "int.", 1), ATTN_E_DTYPE, ctx);
        attn_st_free(st);
    }
    attn_buffer_free(ctx, img);
    attn_st_writer_free(w);
    attn_module_free(a);
    attn_module_free(b);
}

/* Every allocation failing in turn must give ATTN_E_NOMEM (or succeed), never a crash/leak. */
static int fail_at = -1, alloc_count = 0;
static void *counting_alloc(void *user, size_t size) {
    (void)user;
    if (alloc_count++ == fail_at) return NULL;
    return malloc(size);
}
static void counting_free(void *user, void *p) {
    (void)user;
    free(p);
}

static void test_alloc_failures(void) {
    attn_st_writer *w = make_writer();
    void *img;
    size_t size;
    if (!TU_STATUS(attn_st_writer_to_memory(w, &img, &size), ATTN_OK, ctx)) return;
    attn_st_writer_free(w);
    int bad = 0;
    for (fail_at = 0; fail_at < 200; fail_at++) {
        attn_ctx_params p;
        memset(&p, 0, sizeof p);
        p.alloc = counting_alloc;
        p.free = counting_free;
        alloc_count = 0;
        attn_ctx *c = NULL;
        if (attn_ctx_create(&p, &c) != ATTN_OK) continue; /* the context itself failed */
        attn_st *st = NULL;
        attn_status s = attn_st_read_memory(c, img, size, &st);
        if (s != ATTN_OK && s != ATTN_E_NOMEM) bad++;
        if (s == ATTN_OK) {
            attn_st_writer *w2 = NULL;
            s = attn_st_writer_create(c, &w2);
            for (size_t i = 0; !s && i < attn_st_count(st); i++) {
                attn_st_tensor t;
                attn_st_at(st, i, &t);
                s = attn_st_writer_add(w2, t.name, t.dtype, t.ndim, t.shape, t.data);
            }
            for (size_t i = 0; !s && i < attn_st_meta_count(st); i++) {
                const char *k, *v;
                attn_st_meta_at(st, i, &k, &v);
                s = attn_st_writer_meta(w2, k, v);
            }
            void *out = NULL;
            size_t n;
            if (!s) s = attn_st_writer_to_memory(w2, &out, &n);
            if (s != ATTN_OK && s != ATTN_E_NOMEM) bad++;
            attn_buffer_free(c, out);
            attn_st_writer_free(w2);
        }
        attn_st_free(st);
        attn_ctx_free(c);
    }
    fail_at = -1;
    TU_CHECK(bad == 0, "allocation failures gave %d unexpected statuses", bad);
    attn_buffer_free(ctx, img);
}

int main(void) {
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    test_json();
    test_roundtrip();
    test_empty_file();
    test_writer_view();
    test_writer_errors();
    test_to_f32();
    test_valid_headers();
    test_malformed();
    test_fuzz();
    test_module();
    test_alloc_failures();
    attn_ctx_free(ctx);
    return tu_finish("test_safetensors");
}
