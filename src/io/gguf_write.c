/* Writing GGUF files: the pieces of the format into an attn_file_out (src/io/gguf_write.h;
 * the layout is described at the top of src/io/gguf.c). */
#include <string.h>

#include "gguf_write.h"

attn_status attn__gguf_w_open(attn_ctx *ctx, const char *path, attn__gguf_w *w) {
    w->f = NULL;
    w->pos = 0;
    w->st = attn_file_out_open(ctx, path, &w->f);
    return w->st;
}

attn_status attn__gguf_w_close(attn__gguf_w *w, attn_status st) {
    if (st == ATTN_OK) st = w->st;
    if (w->f && st == ATTN_OK) st = attn_file_out_commit(w->f);
    else attn_file_out_abort(w->f);
    w->f = NULL;
    return st;
}

void attn__gguf_put(attn__gguf_w *w, const void *p, size_t n) {
    if (w->st == ATTN_OK && n) w->st = attn_file_out_write(w->f, p, n);
    w->pos += n;
}

void attn__gguf_u32(attn__gguf_w *w, uint32_t v) { attn__gguf_put(w, &v, 4); }
void attn__gguf_u64(attn__gguf_w *w, uint64_t v) { attn__gguf_put(w, &v, 8); }

void attn__gguf_str(attn__gguf_w *w, const char *s) {
    size_t n = strlen(s);
    attn__gguf_u64(w, n);
    attn__gguf_put(w, s, n);
}

void attn__gguf_pad(attn__gguf_w *w, uint64_t align) {
    static const char zero[64];
    uint64_t n = (align - w->pos % align) % align;
    while (n) {
        size_t k = n < sizeof zero ? (size_t)n : sizeof zero;
        attn__gguf_put(w, zero, k);
        n -= k;
    }
}

void attn__gguf_kv_u32(attn__gguf_w *w, const char *key, uint32_t v) {
    attn__gguf_str(w, key), attn__gguf_u32(w, ATTN_GGUF_UINT32), attn__gguf_u32(w, v);
}

void attn__gguf_kv_f32(attn__gguf_w *w, const char *key, float v) {
    attn__gguf_str(w, key), attn__gguf_u32(w, ATTN_GGUF_FLOAT32), attn__gguf_put(w, &v, 4);
}

void attn__gguf_kv_str(attn__gguf_w *w, const char *key, const char *v) {
    attn__gguf_str(w, key), attn__gguf_u32(w, ATTN_GGUF_STRING), attn__gguf_str(w, v);
}

void attn__gguf_kv_bool(attn__gguf_w *w, const char *key, int v) {
    unsigned char b = v ? 1 : 0;
    attn__gguf_str(w, key), attn__gguf_u32(w, ATTN_GGUF_BOOL), attn__gguf_put(w, &b, 1);
}
