/* Saved activations: the tape (a growable arena for what a training forward records) and
 * attn_saved, the public object that owns one (see attn_saved_create in attn.h). */
#include <string.h>

#include "layers.h"

/* ---- the tape ---------------------------------------------------------------------------- */
#define TAPE_MIN_BLOCK ((size_t)1 << 20)

attn_status attn__tape_alloc(attn_ctx *ctx, attn__tape *t, size_t n, size_t elem, void **out) {
    size_t bytes;
    *out = NULL;
    if (!attn__mul_size(n, elem, &bytes) || !attn__add_size(bytes, 63, &bytes))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "saved activations: a buffer of %zu x %zu bytes "
                          "overflows", n, elem);
    bytes &= ~(size_t)63;
    if (bytes == 0) bytes = 64;
    for (;;) {
        if (t->cur < t->nblocks) {
            attn__tape_block *b = &t->blocks[t->cur];
            if (b->size - b->used >= bytes) {
                *out = b->ptr + b->used;
                b->used += bytes;
                t->bytes += bytes; /* cannot overflow: every byte counted is allocated */
                return ATTN_OK;
            }
            if (t->cur + 1 < t->nblocks) { /* blocks after cur are empty (reset rewinds them) */
                t->cur++;
                continue;
            }
        }
        /* a new block: the size the last pass needed (want), else double the last block */
        if (t->nblocks == t->capblocks) {
            size_t cap = t->capblocks ? t->capblocks * 2 : 8, tb;
            if (!attn__mul_size(cap, sizeof *t->blocks, &tb))
                return attn__fail(ctx, ATTN_E_OVERFLOW, "saved activations: block table overflows");
            attn__tape_block *nb = t->alloc(t->user, tb);
            if (!nb) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (saved activations)");
            if (t->nblocks) memcpy(nb, t->blocks, t->nblocks * sizeof *nb);
            if (t->blocks) t->free(t->user, t->blocks);
            t->blocks = nb;
            t->capblocks = cap;
        }
        size_t want = bytes > TAPE_MIN_BLOCK ? bytes : TAPE_MIN_BLOCK;
        if (t->want > want) want = t->want;
        if (t->nblocks) {
            size_t last = t->blocks[t->nblocks - 1].size;
            if (last < SIZE_MAX / 4 && last * 2 > want) want = last * 2;
        }
        t->want = 0;
        size_t total;
        unsigned char *p = NULL;
        if (attn__add_size(want, 64, &total)) p = t->alloc(t->user, total);
        if (!p && want > bytes) p = t->alloc(t->user, total = (want = bytes) + 64);
        if (!p)
            return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (saved activations: %zu bytes)",
                              bytes);
        attn__tape_block *b = &t->blocks[t->nblocks];
        b->ptr = p;
        b->size = total;
        b->used = b->start = (size_t)((((uintptr_t)p + 63) & ~(uintptr_t)63) - (uintptr_t)p);
        t->cur = t->nblocks++;
    }
}

void attn__tape_reset(attn__tape *t) {
    if (t->nblocks > 1) {
        /* the last pass spilled over: one block of its size, a quarter spare, next time */
        size_t want = t->bytes, spare = t->bytes / 4;
        if (!attn__add_size(want, spare, &want)) want = t->bytes;
        for (size_t i = 0; i < t->nblocks; i++) t->free(t->user, t->blocks[i].ptr);
        t->nblocks = 0;
        t->want = want;
    } else if (t->nblocks == 1) {
        t->blocks[0].used = t->blocks[0].start;
    }
    t->cur = 0;
    t->bytes = 0;
}

void attn__tape_free(attn__tape *t) {
    for (size_t i = 0; i < t->nblocks; i++) t->free(t->user, t->blocks[i].ptr);
    if (t->blocks) t->free(t->user, t->blocks);
    t->blocks = NULL;
    t->nblocks = t->capblocks = t->cur = 0;
    t->bytes = t->want = 0;
}

attn_status attn__rec_alloc(attn_ctx *ctx, attn__tape *t, size_t n, size_t elem, void **out) {
    return t ? attn__tape_alloc(ctx, t, n, elem, out) : attn__ws_alloc(ctx, n, elem, out);
}

attn_status attn__rec_f32(attn_ctx *ctx, attn__tape *t, float **out, int64_t n0, int64_t n1,
                          int64_t n2, int64_t n3) {
    if (!t) return attn__ws_f32(ctx, out, n0, n1, n2, n3);
    int64_t n;
    *out = NULL;
    if (!attn__mul_i64(n0, n1, &n) || !attn__mul_i64(n, n2, &n) || !attn__mul_i64(n, n3, &n) ||
        (uint64_t)n > SIZE_MAX / sizeof(float))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "saved activations: buffer size overflows");
    return attn__tape_alloc(ctx, t, (size_t)n, sizeof(float), (void **)out);
}

/* ---- masks --------------------------------------------------------------------------------- */
attn_status attn__saved_mask(attn_ctx *ctx, attn__tape *t, const attn_mask *m, const char *what,
                             attn_mask *out) {
    memset(out, 0, sizeof *out);
    if (!m || m->kind == ATTN_MASK_NONE) return ATTN_OK;
    ATTN_FAIL_IF(m->kind != ATTN_MASK_KEEP && m->kind != ATTN_MASK_BLOCK &&
                     m->kind != ATTN_MASK_ADD,
                 ctx, ATTN_E_INVALID, "%s has an unknown mask kind %d", what, (int)m->kind);
    const attn_tensor *src = &m->t;
    attn_dtype dt = m->kind == ATTN_MASK_ADD ? ATTN_F32 : ATTN_BOOL;
    ATTN_TRY(attn__check(ctx, src, what, dt, 1, 4));
    /* a compact copy: broadcast (stride 0) dimensions stay broadcast */
    attn_tensor c = *src;
    int64_t n = 1;
    for (int d = c.ndim - 1; d >= 0; d--) {
        if (src->stride[d] == 0 && src->shape[d] > 1) {
            c.stride[d] = 0;
        } else {
            c.stride[d] = n;
            ATTN_FAIL_IF(!attn__mul_i64(n, src->shape[d], &n), ctx, ATTN_E_OVERFLOW,
                         "%s is too large", what);
        }
    }
    size_t es = attn_dtype_size(dt);
    void *p;
    ATTN_TRY(attn__tape_alloc(ctx, t, (size_t)n, es, &p));
    int64_t sh[4] = {1, 1, 1, 1}, ss[4] = {0, 0, 0, 0}, cs[4] = {0, 0, 0, 0};
    int k = 4 - c.ndim;
    for (int d = 0; d < c.ndim; d++) {
        sh[k + d] = src->shape[d];
        ss[k + d] = src->stride[d];
        cs[k + d] = c.stride[d];
    }
    const unsigned char *sp = src->data;
    unsigned char *dp = p;
    for (int64_t i0 = 0; i0 < sh[0]; i0++)
        for (int64_t i1 = 0; i1 < sh[1]; i1++)
            for (int64_t i2 = 0; i2 < sh[2]; i2++)
                for (int64_t i3 = 0; i3 < sh[3]; i3++) {
                    int64_t so = i0 * ss[0] + i1 * ss[1] + i2 * ss[2] + i3 * ss[3];
                    int64_t co = i0 * cs[0] + i1 * cs[1] + i2 * cs[2] + i3 * cs[3];
                    memcpy(dp + (size_t)co * es, sp + (size_t)so * es, es);
                }
    c.data = p;
    out->kind = m->kind;
    out->t = c;
    return ATTN_OK;
}

/* ---- attn_saved -------------------------------------------------------------------------- */
attn_status attn_saved_create(attn_ctx *ctx, unsigned flags, attn_saved **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "attn_saved_create: NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(flags & ~(unsigned)ATTN_SAVED_CHECKPOINT, ctx, ATTN_E_INVALID,
                 "attn_saved_create: unknown flags 0x%x", flags & ~(unsigned)ATTN_SAVED_CHECKPOINT);
    attn_saved *s = attn__calloc(ctx, 1, sizeof *s);
    if (!s) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (attn_saved)");
    s->alloc = ctx->alloc;
    s->free = ctx->free;
    s->alloc_user = ctx->alloc_user;
    s->flags = flags;
    s->tape.alloc = ctx->alloc;
    s->tape.free = ctx->free;
    s->tape.user = ctx->alloc_user;
    *out = s;
    return ATTN_OK;
}

void attn_saved_free(attn_saved *s) {
    if (!s) return;
    attn__tape_free(&s->tape);
    s->free(s->alloc_user, s);
}

size_t attn_saved_bytes(const attn_saved *s) { return s && s->m ? s->tape.bytes : 0; }

void attn__saved_begin(attn_saved *s) {
    s->m = NULL;
    s->rec = NULL;
    attn__tape_reset(&s->tape);
}

void attn__saved_end(attn_saved *s, const attn_module *m, void *rec) {
    s->m = m;
    s->kind = m->kind;
    s->numel = m->numel;
    s->rec = rec;
}

attn_status attn__saved_get(attn_ctx *ctx, const attn_saved *s, const attn_module *m,
                            const char *fn, void **rec) {
    ATTN_FAIL_IF(!s, ctx, ATTN_E_INVALID, "%s: saved is NULL", fn);
    ATTN_FAIL_IF(!s->m || !s->rec, ctx, ATTN_E_INVALID,
                 "%s: saved holds no training forward (run the module's *_forward_train with "
                 "it first; a failed one records nothing)", fn);
    ATTN_FAIL_IF(s->m != m || s->kind != m->kind || s->numel != m->numel, ctx, ATTN_E_INVALID,
                 "%s: saved holds the training forward of another module", fn);
    *rec = s->rec;
    return ATTN_OK;
}
