/* TensorBoard's event files, written by the training loop (attn_train_options.tb_dir), so that
 * `tensorboard --logdir DIR` shows a run's scalars.
 *
 * The format, from TensorFlow's public definitions: a file is a sequence of records, each
 *     uint64 length, uint32 masked CRC-32C of those 8 bytes, the data, uint32 masked CRC-32C
 *     of the data
 * (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), and each record's data is
 * a protocol-buffer `Event` message:
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *               Summary summary = 5; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; }
 * The first record carries file_version "brain.Event:2"; each step then adds one Event with
 * its scalars.  Readers take every file named *tfevents* in the directory, so each run (a
 * resumed one too) writes a file of its own: events.out.tfevents.SECONDS.attn.PID. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/file.h"
#include "train_util.h"

/* ---- CRC-32C (Castagnoli: the reflected polynomial 0x82f63b78), a bit at a time: records
 * are under 1 KiB, and no table means no shared state ------------------------------------- */
static uint32_t crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return c ^ 0xffffffffu;
}

static uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

/* ---- protocol-buffer pieces, into a bounded buffer (b->n > cap marks an overflow) --------- */
typedef struct pb {
    unsigned char *p;
    size_t n, cap;
} pb;

static void put_byte(pb *b, unsigned v) {
    if (b->n < b->cap) b->p[b->n] = (unsigned char)v;
    b->n++;
}
static void put_varint(pb *b, uint64_t v) {
    while (v >= 0x80) put_byte(b, (unsigned)(v & 0x7f) | 0x80), v >>= 7;
    put_byte(b, (unsigned)v);
}
static void put_le(pb *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) put_byte(b, (unsigned)(v >> (8 * i)) & 0xff);
}
static void put_bytes(pb *b, const void *s, size_t n) {
    for (size_t i = 0; i < n; i++) put_byte(b, ((const unsigned char *)s)[i]);
}
/* a Summary.Value: tag (field 1, bytes) and simple_value (field 2, fixed32) */
static size_t value_size(const char *tag) {
    size_t t = strlen(tag);
    return 1 + 1 + t + 1 + 4; /* tags are short: one-byte lengths */
}
static void put_value(pb *b, const char *tag, float v) {
    size_t t = strlen(tag);
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_byte(b, 0x0a), put_varint(b, value_size(tag)); /* Summary.value, field 1 */
    put_byte(b, 0x0a), put_varint(b, t), put_bytes(b, tag, t);
    put_byte(b, 0x15), put_le(b, bits, 4);
}

/* One Event as a framed record into out[0 .. *n - 1] (cap bytes). */
static int event_record(unsigned char *out, size_t cap, size_t *n, double wall, int64_t step,
                        const char *version, const char *const *tags, const float *vals,
                        int nv) {
    if (cap < 16) return 0;
    pb b = {out + 12, 0, cap - 16};
    uint64_t w;
    memcpy(&w, &wall, 8);
    put_byte(&b, 0x09), put_le(&b, w, 8); /* wall_time */
    put_byte(&b, 0x10), put_varint(&b, (uint64_t)step);
    if (version) {
        size_t t = strlen(version);
        put_byte(&b, 0x1a), put_varint(&b, t), put_bytes(&b, version, t);
    }
    if (nv > 0) {
        size_t s = 0;
        for (int i = 0; i < nv; i++) {
            size_t v = value_size(tags[i]);
            s += 1 + (v < 128 ? 1 : 2) + v;
        }
        put_byte(&b, 0x2a), put_varint(&b, s);
        for (int i = 0; i < nv; i++) put_value(&b, tags[i], vals[i]);
    }
    if (b.n > b.cap) return 0;
    pb h = {out, 0, 12};
    put_le(&h, b.n, 8);
    put_le(&h, masked(crc32c(out, 8)), 4);
    pb t = {out + 12 + b.n, 0, 4};
    put_le(&t, masked(crc32c(out + 12, b.n)), 4);
    *n = 12 + b.n + 4;
    return 1;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

attn_status attn__tb_open(attn_ctx *ctx, const char *dir, attn__tb *tb) {
    tb->fd = -1;
    double wall = wall_now();
    int k = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.attn.%ld", dir,
                     (long long)wall, (long)getpid());
    ATTN_FAIL_IF(k < 0 || (size_t)k >= sizeof tb->path, ctx, ATTN_E_INVALID,
                 "the TensorBoard directory name is too long (%zu bytes)", strlen(dir));
    unsigned char rec[64];
    size_t n = 0;
    event_record(rec, sizeof rec, &n, wall, 0, "brain.Event:2", NULL, NULL, 0);
    /* created through the safe writer (a temporary beside it, renamed; its link rules), then
     * opened to append, as the JSON-lines log is */
    attn__piece piece = {rec, n};
    ATTN_TRY(attn__file_write(ctx, tb->path, &piece, 1));
    tb->fd = open(tb->path, O_WRONLY | O_APPEND | O_CLOEXEC);
    ATTN_FAIL_IF(tb->fd < 0, ctx, ATTN_E_IO, "%s: %s", tb->path, strerror(errno));
    return ATTN_OK;
}

attn_status attn__tb_scalars(attn_ctx *ctx, attn__tb *tb, int64_t step,
                             const char *const *tags, const float *vals, int n) {
    unsigned char rec[1024];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        ATTN_FAIL_IF(strlen(tags[i]) > 100, ctx, ATTN_E_INVALID,
                     "a TensorBoard tag is longer than 100 bytes");
    ATTN_FAIL_IF(!event_record(rec, sizeof rec, &len, wall_now(), step, NULL, tags, vals, n), ctx,
                 ATTN_E_INVALID, "%d TensorBoard scalars do not fit one record", n);
    return attn__fd_write(ctx, tb->fd, tb->path, rec, len);
}

void attn__tb_close(attn__tb *tb) {
    if (tb && tb->fd >= 0) close(tb->fd), tb->fd = -1;
}
