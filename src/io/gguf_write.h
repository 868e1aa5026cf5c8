/* Writing GGUF files (src/io/gguf_write.c): the format's pieces, front to back, into an
 * attn_file_out (a temporary file that replaces the target only when the whole file is written:
 * attn.h, "Output files").  Internal; the model writer is src/models/llm_save.c.
 *
 * The writer keeps the first failure: after one, every call does nothing but count the bytes,
 * so a caller writes the whole layout and checks w->st once at the end. */
#ifndef ATTN_IO_GGUF_WRITE_H
#define ATTN_IO_GGUF_WRITE_H

#include "../core/internal.h"

typedef struct attn__gguf_w {
    attn_file_out *f;
    attn_status st; /* ATTN_OK, or the first failure (its message in the file's context) */
    uint64_t pos;   /* bytes written so far (counted after a failure too) */
} attn__gguf_w;

/* Opens path for writing (attn_file_out_open); w->st is the result. */
ATTN__HIDDEN attn_status attn__gguf_w_open(attn_ctx *ctx, const char *path, attn__gguf_w *w);
/* Commits the file when w->st is ATTN_OK and st is ATTN_OK, else removes the temporary file;
 * returns the first failure of st, w->st and the commit.  A NULL file (not opened) is fine. */
ATTN__HIDDEN attn_status attn__gguf_w_close(attn__gguf_w *w, attn_status st);

ATTN__HIDDEN void attn__gguf_put(attn__gguf_w *w, const void *p, size_t n);
ATTN__HIDDEN void attn__gguf_u32(attn__gguf_w *w, uint32_t v);
ATTN__HIDDEN void attn__gguf_u64(attn__gguf_w *w, uint64_t v);
/* A GGUF string: u64 length, the bytes (no NUL). */
ATTN__HIDDEN void attn__gguf_str(attn__gguf_w *w, const char *s);
/* Zero bytes up to the next multiple of align (w->pos). */
ATTN__HIDDEN void attn__gguf_pad(attn__gguf_w *w, uint64_t align);
/* One metadata entry: key, value type, value. */
ATTN__HIDDEN void attn__gguf_kv_u32(attn__gguf_w *w, const char *key, uint32_t v);
ATTN__HIDDEN void attn__gguf_kv_f32(attn__gguf_w *w, const char *key, float v);
ATTN__HIDDEN void attn__gguf_kv_str(attn__gguf_w *w, const char *key, const char *v);
ATTN__HIDDEN void attn__gguf_kv_bool(attn__gguf_w *w, const char *key, int v);

/* Entry i of a GGUF file read by attn_gguf_open / _read / _read_memory, as its bytes are in
 * the file (key, type, value), pointing into the file's image: a writer copies it byte for
 * byte.  ATTN_E_INVALID for i out of range. */
ATTN__HIDDEN attn_status attn__gguf_kv_raw(const attn_gguf *g, size_t i, const void **p,
                                           size_t *n);

#endif
