/* libFuzzer target: any input must be read without a sanitizer report; an accepted input must
 * survive every query, convert to F32 (BOOL excepted), and re-serialise into a file that reads
 * back with the same tensors and metadata.  Any broken promise aborts, which libFuzzer records
 * as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "fuzz_safetensors: check failed at line %d: %s\n", __LINE__,      \
                    #cond);                                                                   \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

static void same_tensor(const attn_st_tensor *a, const attn_st_tensor *b) {
    CHECK(strcmp(a->name, b->name) == 0);
    CHECK(a->dtype == b->dtype && a->ndim == b->ndim && a->numel == b->numel);
    for (int d = 0; d < a->ndim; d++) CHECK(a->shape[d] == b->shape[d]);
    CHECK(a->nbytes == b->nbytes);
    CHECK(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
}

static void exercise(attn_ctx *ctx, const attn_st *st) {
    size_t n = attn_st_count(st);
    attn_st_tensor t, u;
    CHECK(attn_st_at(st, n, &t) == ATTN_E_INVALID);
    for (size_t i = 0; i < n; i++) {
        CHECK(attn_st_at(st, i, &t) == ATTN_OK);
        CHECK(attn_st_find(st, t.name, &u) == ATTN_OK && u.data == t.data);
        size_t es = attn_dtype_size(t.dtype);
        CHECK(es != 0 && t.numel >= 0 && t.nbytes == (size_t)t.numel * es);
        /* touch every byte so that ASan sees any pointer outside the image */
        volatile unsigned char sink = 0;
        for (size_t k = 0; k < t.nbytes; k++) sink ^= ((const unsigned char *)t.data)[k];
        (void)sink;
        float *f = malloc((size_t)t.numel * sizeof(float) + 1);
        CHECK(f != NULL);
        attn_status s = attn_st_to_f32(ctx, &t, f, (size_t)t.numel);
        CHECK(t.dtype == ATTN_BOOL ? s == ATTN_E_DTYPE : s == ATTN_OK);
        free(f);
    }
    for (size_t i = 0; i < attn_st_meta_count(st); i++) {
        const char *k, *v;
        CHECK(attn_st_meta_at(st, i, &k, &v) == ATTN_OK);
        CHECK(attn_st_meta(st, k) == v);
    }
}

static void reserialise(attn_ctx *ctx, const attn_st *st) {
    attn_st_writer *w = NULL;
    CHECK(attn_st_writer_create(ctx, &w) == ATTN_OK);
    for (size_t i = 0; i < attn_st_meta_count(st); i++) {
        const char *k, *v;
        CHECK(attn_st_meta_at(st, i, &k, &v) == ATTN_OK);
        CHECK(attn_st_writer_meta(w, k, v) == ATTN_OK);
    }
    for (size_t i = 0; i < attn_st_count(st); i++) {
        attn_st_tensor t;
        CHECK(attn_st_at(st, i, &t) == ATTN_OK);
        CHECK(attn_st_writer_add(w, t.name, t.dtype, t.ndim, t.shape, t.data) == ATTN_OK);
    }
    void *img = NULL;
    size_t size = 0;
    CHECK(attn_st_writer_to_memory(w, &img, &size) == ATTN_OK);
    attn_st_writer_free(w);

    attn_st *back = NULL;
    if (attn_st_read_memory(ctx, img, size, &back) != ATTN_OK) {
        fprintf(stderr, "re-read failed: %s\n", attn_ctx_errmsg(ctx));
        abort();
    }
    CHECK(attn_st_count(back) == attn_st_count(st));
    CHECK(attn_st_meta_count(back) == attn_st_meta_count(st));
    for (size_t i = 0; i < attn_st_count(st); i++) {
        attn_st_tensor a, b;
        CHECK(attn_st_at(st, i, &a) == ATTN_OK);
        CHECK(attn_st_find(back, a.name, &b) == ATTN_OK);
        same_tensor(&a, &b);
    }
    for (size_t i = 0; i < attn_st_meta_count(st); i++) {
        const char *k, *v, *v2;
        CHECK(attn_st_meta_at(st, i, &k, &v) == ATTN_OK);
        v2 = attn_st_meta(back, k);
        CHECK(v2 && strcmp(v, v2) == 0);
    }
    /* the writer is deterministic and its output is canonical: written again, same bytes */
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | ((const unsigned char *)img)[i];
    CHECK(hlen % 8 == 0);
    size_t total = 0;
    for (size_t i = 0; i < attn_st_count(back); i++) {
        attn_st_tensor b;
        CHECK(attn_st_at(back, i, &b) == ATTN_OK);
        total += b.nbytes;
    }
    CHECK(8 + hlen + total == size); /* no gaps: the reference implementation insists */
    attn_st_free(back);
    attn_buffer_free(ctx, img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_ctx *ctx = NULL;
    CHECK(attn_ctx_create(NULL, &ctx) == ATTN_OK);
    attn_st *st = (attn_st *)&ctx; /* must come back NULL on failure */
    attn_status s = attn_st_read_memory(ctx, data, size, &st);
    if (s != ATTN_OK) {
        CHECK(s == ATTN_E_FORMAT || s == ATTN_E_DTYPE);
        CHECK(st == NULL);
        CHECK(attn_ctx_errmsg(ctx)[0] != 0);
    } else {
        exercise(ctx, st);
        reserialise(ctx, st);
        attn_st_free(st);
    }
    attn_ctx_free(ctx);
    return 0;
}
