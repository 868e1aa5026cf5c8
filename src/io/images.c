/* Image data for the ViT task (attn_images_*, attn_tasks.h): IDX files raw or gzipped, PGM and
 * PNG grayscale images, seeded shuffling and batches with augmentation.  Nothing here prints or
 * exits: a failure is an attn_status with a message in the context naming the file.
 *
 * Sizes a file claims are checked against what it can hold before memory is taken: a raw file
 * against its size on disk, a gzip stream against 1032 times its compressed size (deflate's
 * largest expansion), and a gzip buffer grows only as decompressed bytes arrive, so a 40-byte
 * file claiming 2^32 images is refused without a large allocation.  zlib is optional
 * (ATTN_HAVE_ZLIB, set by CMake when it is found and ATTN_ZLIB is on): without it raw IDX and PGM files are read
 * and gzip and PNG files refused with a message.
 *
 * The random choices (shuffle, crop offsets, flips) come from splitmix64 used as a
 * counter-based generator; the definitions below are exact, so that a Python script can
 * reproduce the data order and the augmentation of a run bit for bit:
 *
 *   M = 2**64 - 1; G = 0x9E3779B97F4A7C15
 *   def mix(z):                                  # splitmix64's output function
 *       z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
 *       z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
 *       return z ^ (z >> 31)
 *   def sm(x): return mix((x + G) & M)           # first output of splitmix64 seeded with x
 *   def key(seed, tag, a): return sm(sm(sm(seed) ^ tag) ^ a)
 *   def draw(k, c): return mix((k + (c + 1) * G) & M)   # output c (0, 1, ...) from state k
 *   def below(r, m): return (r * m) >> 64       # [0, m) from a 64-bit draw
 *
 *   attn_images_shuffle(seed, epoch, n):  k = key(seed, 1, epoch); p = list(range(n))
 *       for i in range(n - 1, 0, -1): j = below(draw(k, i), i + 1); p[i], p[j] = p[j], p[i]
 *   attn_images_batch, image index ix (its index in the set, not in the batch), pad P:
 *       k = key(seed, 2, stream)
 *       dy = below(draw(k, 3 * ix), 2 * P + 1); dx = below(draw(k, 3 * ix + 1), 2 * P + 1)
 *       flip = draw(k, 3 * ix + 2) >> 63   (when aug.flip; else 0)
 *   (3 * ix and c + 1 wrap modulo 2**64.)  The image is padded by P zero pixels on every side,
 *   cropped back to rows x cols at (dy, dx), then mirrored left-right when flip (torchvision's
 *   RandomCrop(padding=P) then RandomHorizontalFlip): out[y][x] = padded[y + dy][x' + dx] with
 *   x' = cols - 1 - x when flipped, else x.  Each pixel v becomes (float32(v) / 255 - mean) /
 *   std in float32, the operations of ToTensor then Normalize.
 */
#define _POSIX_C_SOURCE 200809L /* fileno, fdopen, O_CLOEXEC */
#include "internal.h"
#include "attn_tasks.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef ATTN_HAVE_ZLIB
#include <zlib.h>
#endif

#define NO_ZLIB "attn was built without zlib (apt-get install zlib1g-dev, then rebuild attn)"
#define MAX_PIXELS ((int64_t)1 << 26)     /* one PGM/PNG image: width * height */
#define MAX_IMAGE_FILE ((int64_t)1 << 28) /* one PGM/PNG file in bytes */
#define GZ_RATIO 1032                     /* deflate expands a byte to at most ~1032 */

static const char *const fashion_classes[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                             "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                             "Bag",         "Ankle boot"};

const char *attn_fashion_class(int64_t k) { return k >= 0 && k < 10 ? fashion_classes[k] : NULL; }

/* The message into ctx (status st); returns 1, the internal functions' failure. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int fail(attn_ctx *ctx, attn_status st, const char *fmt, ...) {
    char msg[ATTN__MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    attn__fail(ctx, st, "%s", msg);
    return 1;
}

/* ---- a byte source: a raw file or a gzip stream ------------------------------------------ */
typedef struct src {
    const char *path;
    FILE *f;
#ifdef ATTN_HAVE_ZLIB
    gzFile gz;
#endif
    int is_gz;
    int64_t fsize;       /* bytes on disk for a regular file, else -1 */
    uint8_t pending[2];  /* a raw pipe's first bytes, read to tell gzip from raw */
    size_t npending;
    uint32_t gz_isize;   /* a gzip file's last 4 bytes: its data's length modulo 2^32 */
} src;

/* Reads up to 2 bytes from fd (fewer at the end of the file). */
static ssize_t read_magic(int fd, uint8_t *b) {
    ssize_t got = 0;
    while (got < 2) {
        ssize_t r = read(fd, b + got, (size_t)(2 - got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += r;
    }
    return got;
}

/* Opens path and tells gzip (first bytes 0x1f 0x8b) from raw.  A FIFO is opened without
 * blocking (one with no writer reads as empty instead of hanging), then read blocking; a stream
 * is read as its data arrives. */
static int src_open(src *s, const char *path, attn_ctx *ctx) {
    memset(s, 0, sizeof *s);
    s->path = path;
    s->fsize = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), fl;
    if (fd < 0) return fail(ctx, ATTN_E_IO, "%s: %s", path, strerror(errno));
    if ((fl = fcntl(fd, F_GETFL)) == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
        int e = errno;
        close(fd);
        return fail(ctx, ATTN_E_IO, "%s: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return fail(ctx, ATTN_E_IO, "%s: %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return fail(ctx, ATTN_E_IO, "%s: is a directory", path);
    }
    if (S_ISREG(sb.st_mode)) s->fsize = (int64_t)sb.st_size;
    uint8_t b[2];
    ssize_t got = read_magic(fd, b);
    if (got < 0) {
        int e = errno;
        close(fd);
        return fail(ctx, ATTN_E_IO, "%s: %s", path, strerror(e));
    }
    s->is_gz = got == 2 && b[0] == 0x1f && b[1] == 0x8b;
    int seekable = lseek(fd, 0, SEEK_SET) == 0;
    if (!seekable && !s->is_gz) memcpy(s->pending, b, (size_t)got), s->npending = (size_t)got;
    if (!s->is_gz) {
        if (!(s->f = fdopen(fd, "rb"))) {
            close(fd);
            return fail(ctx, ATTN_E_IO, "%s: %s", path, strerror(errno));
        }
        return 0;
    }
#ifdef ATTN_HAVE_ZLIB
    if (!seekable) {
        close(fd);
        return fail(ctx, ATTN_E_IO, "%s: a gzip stream that cannot be read from its start (a pipe?): "
                    "give the file itself", path);
    }
    uint8_t t[4]; /* the trailer's ISIZE, to tell a stream that ends the file from one followed
                   * by other bytes (zlib ignores what follows a complete stream) */
    if (s->fsize >= 18 && pread(fd, t, 4, (off_t)(s->fsize - 4)) == 4)
        s->gz_isize = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
                      (uint32_t)t[3] << 24;
    if (!(s->gz = gzdopen(fd, "rb"))) {
        close(fd);
        return fail(ctx, ATTN_E_NOMEM, "%s: out of memory", path);
    }
    gzbuffer(s->gz, 1 << 16);
    return 0;
#else
    close(fd);
    return fail(ctx, ATTN_E_UNSUPPORTED, "%s: a gzip file, but " NO_ZLIB, path);
#endif
}

static void src_close(src *s) {
    if (s->f) fclose(s->f);
#ifdef ATTN_HAVE_ZLIB
    if (s->gz) gzclose(s->gz);
    s->gz = NULL;
#endif
    s->f = NULL;
}

/* Reads up to n bytes (fewer only at the end of the data) into buf; *got = bytes read. */
static int src_read(src *s, void *buf, size_t n, size_t *got, attn_ctx *ctx) {
    *got = 0;
#ifdef ATTN_HAVE_ZLIB
    if (s->is_gz) {
        while (*got < n) {
            unsigned k = n - *got > (1u << 30) ? 1u << 30 : (unsigned)(n - *got);
            int r = gzread(s->gz, (char *)buf + *got, k);
            int zerr = Z_OK;
            const char *msg = gzerror(s->gz, &zerr);
            if (r < 0 || (zerr != Z_OK && zerr != Z_STREAM_END)) {
                const char *why = zerr == Z_ERRNO ? strerror(errno) : msg;
                const char *cut = why && !strncmp(why, "<fd:", 4) ? strstr(why, ": ") : NULL;
                return fail(ctx, ATTN_E_FORMAT, "%s: corrupt or truncated gzip stream (%s)", s->path,
                            cut ? cut + 2 : why ? why : "zlib error"); /* zlib: "<fd:3>: why" */
            }
            if (r == 0) break;
            *got += (size_t)r;
        }
        return 0;
    }
#endif
    while (s->npending && *got < n) { /* a pipe's first bytes */
        ((uint8_t *)buf)[(*got)++] = s->pending[0];
        s->pending[0] = s->pending[1];
        s->npending--;
    }
    *got += fread((uint8_t *)buf + *got, 1, n - *got, s->f);
    if (*got < n && ferror(s->f)) return fail(ctx, ATTN_E_IO, "%s: %s", s->path, strerror(errno));
    return 0;
}

/* ---- IDX files --------------------------------------------------------------------------- */
typedef struct idx_hdr {
    int ndim;
    int64_t dim[3];
    int64_t count; /* the product of the dimensions: elements = bytes */
    int64_t bytes; /* the header's size */
} idx_hdr;

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads and checks the header of an IDX file of unsigned bytes with ndim dimensions. */
static int idx_header(src *s, int ndim, idx_hdr *h, attn_ctx *ctx) {
    uint8_t b[16];
    size_t got;
    memset(h, 0, sizeof *h);
    if (src_read(s, b, 4, &got, ctx)) return 1;
    if (got < 4)
        return fail(ctx, ATTN_E_FORMAT, "%s: %zu bytes: too short for an IDX header", s->path, got);
    uint32_t magic = be32(b);
    if (b[0] || b[1])
        return fail(ctx, ATTN_E_FORMAT, "%s: bad magic number 0x%08x: not an IDX file (expected 0x%08x)",
                    s->path, (unsigned)magic, 0x800u | (unsigned)ndim);
    if (b[2] != 0x08)
        return fail(ctx, ATTN_E_FORMAT, "%s: element type 0x%02x: only unsigned byte (0x08) is read",
                    s->path, b[2]);
    if (b[3] != ndim)
        return fail(ctx, ATTN_E_FORMAT, "%s: %d dimensions (magic 0x%08x), expected %d (%s)", s->path,
                    b[3], (unsigned)magic, ndim,
                    ndim == 3 ? "an IDX3 image file, 0x00000803"
                              : "an IDX1 label file, 0x00000801");
    if (src_read(s, b, 4 * (size_t)ndim, &got, ctx)) return 1;
    if (got < 4 * (size_t)ndim) return fail(ctx, ATTN_E_FORMAT, "%s: truncated IDX header", s->path);
    h->ndim = ndim;
    h->count = 1;
    h->bytes = 4 + 4 * ndim;
    for (int d = 0; d < ndim; d++) {
        h->dim[d] = be32(b + 4 * d);
        if (h->dim[d] == 0) return fail(ctx, ATTN_E_FORMAT, "%s: dimension %d is 0", s->path, d);
        if (h->count > INT64_MAX / h->dim[d])
            return fail(ctx, ATTN_E_FORMAT, "%s: dimensions %lld x %lld x %lld overflow 64 bits", s->path,
                        (long long)h->dim[0], (long long)h->dim[1], (long long)h->dim[2]);
        h->count *= h->dim[d];
    }
    return 0;
}

/* Checks a payload claim against what the file can hold, before anything is read. */
static int idx_claim_fits(const src *s, const idx_hdr *h, const char *what, attn_ctx *ctx) {
    if (s->fsize < 0) return 0; /* a stream: bounded as it is read */
    int64_t room = s->fsize - h->bytes;
    if (!s->is_gz && room < h->count)
        return fail(ctx, ATTN_E_FORMAT, "%s: truncated: the header claims %lld bytes of %s, the file "
                    "holds %lld", s->path, (long long)h->count, what, (long long)room);
    if (!s->is_gz && room > h->count)
        return fail(ctx, ATTN_E_FORMAT, "%s: %lld trailing bytes after the %lld bytes of %s its header "
                    "claims", s->path, (long long)(room - h->count), (long long)h->count, what);
    if (s->is_gz && s->fsize <= (INT64_MAX - 4096) / GZ_RATIO &&
        h->count > s->fsize * GZ_RATIO + 4096)
        return fail(ctx, ATTN_E_FORMAT, "%s: truncated: the header claims %lld bytes of %s, more than "
                    "a gzip file of %lld bytes can hold", s->path, (long long)h->count, what,
                    (long long)s->fsize);
    return 0;
}

/* Reads the payload and keeps its first `keep` bytes in *out (malloc'ed, grown as the data
 * arrives).  keep = h->count: the whole payload, refusing a short one and bytes after it (for
 * a gzip file, also after its stream: its trailer's length must be the file's); keep below:
 * only those bytes are read (--limit: the rest of the file is neither read nor checked, so a
 * limit bounds the time as well as the memory). */
static int idx_payload(src *s, const idx_hdr *h, int64_t keep, const char *what, uint8_t **out,
                       attn_ctx *ctx) {
    enum { CHUNK = 1 << 20 };
    size_t cap = keep < CHUNK ? (size_t)keep : CHUNK, got;
    uint8_t *buf = malloc(cap), *scratch = NULL, extra;
    int64_t have = 0;
    int rc = 1;
    *out = NULL;
    if (!buf) return fail(ctx, ATTN_E_NOMEM, "%s: out of memory", s->path);
    while (have < keep || (keep == h->count && have < h->count)) {
        if (have < keep && (size_t)have == cap) {
            size_t ncap = cap > (size_t)keep / 2 ? (size_t)keep : cap * 2;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) goto oom;
            buf = nb, cap = ncap;
        }
        uint8_t *dst;
        size_t want;
        if (have < keep) {
            dst = buf + have, want = cap - (size_t)have;
            if (keep < h->count && (int64_t)want > keep - have) want = (size_t)(keep - have);
        } else {
            if (!scratch && !(scratch = malloc(CHUNK))) goto oom;
            dst = scratch;
            want = h->count - have < CHUNK ? (size_t)(h->count - have) : CHUNK;
        }
        if (src_read(s, dst, want, &got, ctx)) goto done;
        if (got == 0) {
            fail(ctx, ATTN_E_FORMAT, "%s: truncated: the header claims %lld bytes of %s, the file holds "
                 "%lld", s->path, (long long)h->count, what, (long long)have);
            goto done;
        }
        have += (int64_t)got;
    }
    if (keep == h->count) {
        if (src_read(s, &extra, 1, &got, ctx)) goto done;
        if (got) {
            fail(ctx, ATTN_E_FORMAT, "%s: trailing bytes after the %lld bytes of %s its header claims",
                 s->path, (long long)h->count, what);
            goto done;
        }
        if (s->is_gz && s->fsize >= 0 && s->gz_isize != (uint32_t)(h->bytes + h->count)) {
            fail(ctx, ATTN_E_FORMAT, "%s: bytes after the end of the gzip stream (its trailer does not "
                 "end the file)", s->path);
            goto done;
        }
    }
    *out = buf, buf = NULL, rc = 0;
    goto done;
oom:
    fail(ctx, ATTN_E_NOMEM, "%s: out of memory", s->path);
done:
    free(buf);
    free(scratch);
    return rc;
}

/* Checks every label against max_label (0: none); returns 1 + the largest. */
static int idx_labels_ok(const char *path, const uint8_t *lab, int64_t n, int max_label,
                         int *num_classes, attn_ctx *ctx) {
    int top = -1;
    for (int64_t i = 0; i < n; i++) {
        if (max_label > 0 && lab[i] >= max_label)
            return fail(ctx, ATTN_E_FORMAT, "%s: label %d at index %lld is out of range (labels must be "
                        "below %d)", path, lab[i], (long long)i, max_label);
        if (lab[i] > top) top = lab[i];
    }
    *num_classes = top + 1;
    return 0;
}

static int idx_load(const char *images_path, const char *labels_path, int64_t max_n, int max_label,
                 attn_images *out, attn_ctx *ctx) {
    src si, sl;
    idx_hdr hi, hl;
    int rc = 1, have_l = 0;
    memset(out, 0, sizeof *out);
    if (src_open(&si, images_path, ctx)) return 1;
    if (idx_header(&si, 3, &hi, ctx) || idx_claim_fits(&si, &hi, "pixels", ctx))
        goto done;
    if (labels_path) {
        if (src_open(&sl, labels_path, ctx)) goto done;
        have_l = 1;
        if (idx_header(&sl, 1, &hl, ctx) ||
            idx_claim_fits(&sl, &hl, "labels", ctx))
            goto done;
        if (hl.dim[0] != hi.dim[0]) {
            fail(ctx, ATTN_E_FORMAT, "%s: %lld labels for the %lld images of %s", labels_path,
                 (long long)hl.dim[0], (long long)hi.dim[0], images_path);
            goto done;
        }
    }
    int64_t n = max_n > 0 && max_n < hi.dim[0] ? max_n : hi.dim[0];
    { /* what the images will take, against what this machine has (a gzip file may claim up
       * to 1032 times its size: a 3 MB file, 3 GB of images) */
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        double mem = pages > 0 && psize > 0 ? (double)pages * (double)psize : 0.0;
        double need = (double)n * (double)hi.dim[1] * (double)hi.dim[2];
        if (mem > 0 && need > mem / 2) {
            fail(ctx, ATTN_E_UNSUPPORTED, "%s: %lld images of %lldx%lld pixels need %.1f GB, more than half "
                 "of this machine's %.1f GB of memory: use fewer (--limit N)", images_path,
                 (long long)n, (long long)hi.dim[1], (long long)hi.dim[2], need / 1e9, mem / 1e9);
            goto done;
        }
    }
    if (idx_payload(&si, &hi, n * hi.dim[1] * hi.dim[2], "pixels", &out->pixels, ctx))
        goto done;
    if (have_l) { /* the labels of the images kept, each checked */
        if (idx_payload(&sl, &hl, n, "labels", &out->labels, ctx) ||
            idx_labels_ok(labels_path, out->labels, n, max_label, &out->num_classes, ctx))
            goto done;
    }
    out->n = n, out->rows = hi.dim[1], out->cols = hi.dim[2];
    rc = 0;
done:
    src_close(&si);
    if (have_l) src_close(&sl);
    if (rc) attn_images_free(out);
    return rc;
}

void attn_images_free(attn_images *s) {
    if (!s) return;
    free(s->pixels);
    free(s->labels);
    memset(s, 0, sizeof *s);
}

/* dir/name, or dir/name.gz when that exists (tried first). */
static int mnist_path(const char *dir, const char *name, char *path, size_t n, attn_ctx *ctx) {
    struct stat sb;
    if ((size_t)snprintf(path, n, "%s/%s.gz", dir, name) >= n)
        return fail(ctx, ATTN_E_INVALID, "%s: the folder name is too long", dir);
    if (stat(path, &sb) == 0) return 0;
    snprintf(path, n, "%s/%s", dir, name);
    if (stat(path, &sb) == 0) return 0;
    return fail(ctx, ATTN_E_IO, "%s: no %s or %s.gz (%s)", dir, name, name, strerror(errno));
}

static int mnist_load(const char *dir, int train, int64_t max_n, attn_images *out, attn_ctx *ctx) {
    char ip[4096], lp[4096];
    const char *pre = train ? "train" : "t10k";
    char iname[64], lname[64];
    memset(out, 0, sizeof *out);
    snprintf(iname, sizeof iname, "%s-images-idx3-ubyte", pre);
    snprintf(lname, sizeof lname, "%s-labels-idx1-ubyte", pre);
    if (mnist_path(dir, iname, ip, sizeof ip, ctx) ||
        mnist_path(dir, lname, lp, sizeof lp, ctx))
        return 1;
    return idx_load(ip, lp, max_n, 0, out, ctx);
}

/* ---- whole image files ------------------------------------------------------------------- */
/* Reads a regular file of at most MAX_IMAGE_FILE bytes into *data (malloc'ed). */
static int read_small_file(const char *path, uint8_t **data, size_t *len, attn_ctx *ctx) {
    *data = NULL, *len = 0;
    /* O_NONBLOCK: a FIFO with no writer would block the open forever; it is refused below */
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) return fail(ctx, ATTN_E_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return fail(ctx, ATTN_E_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return fail(ctx, ATTN_E_IO, "%s: not a regular file (%s)", path,
                    S_ISFIFO(sb.st_mode) ? "a FIFO or pipe" : S_ISDIR(sb.st_mode) ? "a directory"
                                                                                 : "a device");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return fail(ctx, ATTN_E_IO, "%s: %s", path, strerror(e));
    }
    int rc = 1;
    if ((int64_t)sb.st_size > MAX_IMAGE_FILE) {
        fail(ctx, ATTN_E_UNSUPPORTED, "%s: %lld bytes, over the %lld-byte bound on one image file", path,
             (long long)sb.st_size, (long long)MAX_IMAGE_FILE);
    } else if (!(*data = malloc((size_t)sb.st_size + 1))) {
        fail(ctx, ATTN_E_NOMEM, "%s: out of memory", path);
    } else {
        *len = fread(*data, 1, (size_t)sb.st_size + 1, f);
        if (ferror(f) || *len != (size_t)sb.st_size)
            fail(ctx, ATTN_E_IO, "%s: read error (or the file changed size)", path);
        else
            rc = 0;
    }
    fclose(f);
    if (rc) free(*data), *data = NULL, *len = 0;
    return rc;
}

/* width * height within MAX_PIXELS and neither 0. */
static int pixels_ok(const char *path, uint64_t w, uint64_t h, attn_ctx *ctx) {
    if (w == 0 || h == 0) return fail(ctx, ATTN_E_FORMAT, "%s: the image is %llu x %llu pixels", path,
                                      (unsigned long long)w, (unsigned long long)h);
    if (w > (uint64_t)MAX_PIXELS || h > (uint64_t)MAX_PIXELS || w * h > (uint64_t)MAX_PIXELS)
        return fail(ctx, ATTN_E_UNSUPPORTED, "%s: %llu x %llu pixels, over the bound of %lld pixels", path,
                    (unsigned long long)w, (unsigned long long)h, (long long)MAX_PIXELS);
    return 0;
}

/* ---- PGM (P2 plain, P5 binary) ----------------------------------------------------------- */
typedef struct pnm {
    const uint8_t *p;
    size_t n, pos;
} pnm;

static int pnm_space(int c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Skips whitespace and comments ('#' to the end of the line). */
static void pnm_skip(pnm *s) {
    while (s->pos < s->n) {
        if (pnm_space(s->p[s->pos])) {
            s->pos++;
        } else if (s->p[s->pos] == '#') {
            while (s->pos < s->n && s->p[s->pos] != '\n' && s->p[s->pos] != '\r') s->pos++;
        } else {
            break;
        }
    }
}

/* A decimal number <= max, ended by whitespace, '#' or the end of the file; 1 on success. */
static int pnm_uint(pnm *s, uint32_t max, uint32_t *v) {
    pnm_skip(s);
    uint64_t x = 0;
    size_t start = s->pos;
    while (s->pos < s->n && s->p[s->pos] >= '0' && s->p[s->pos] <= '9') {
        x = x * 10 + (uint64_t)(s->p[s->pos++] - '0');
        if (x > max) return 0;
    }
    if (s->pos == start) return 0;
    if (s->pos < s->n && !pnm_space(s->p[s->pos]) && s->p[s->pos] != '#') return 0;
    *v = (uint32_t)x;
    return 1;
}

/* A sample of maxval mx scaled to 0..255, rounded to nearest. */
static uint8_t pnm_scale(uint32_t v, uint32_t mx) {
    return (uint8_t)(mx == 255 ? v : ((uint64_t)v * 255 + mx / 2) / mx);
}

static int pgm_decode(const char *path, const uint8_t *d, size_t n, int64_t *rows,
                      int64_t *cols, uint8_t **pixels, attn_ctx *ctx) {
    pnm s = {d, n, 2};
    int plain = d[1] == '2';
    uint32_t w, h, mx;
    if (!pnm_uint(&s, UINT32_MAX, &w) || !pnm_uint(&s, UINT32_MAX, &h))
        return fail(ctx, ATTN_E_FORMAT, "%s: bad PGM header (width, height)", path);
    if (!pnm_uint(&s, 65535, &mx) || mx == 0)
        return fail(ctx, ATTN_E_FORMAT, "%s: bad PGM maxval (must be 1 to 65535)", path);
    if (pixels_ok(path, w, h, ctx)) return 1;
    size_t np = (size_t)w * h, bps = mx > 255 ? 2 : 1;
    if (s.pos >= n) return fail(ctx, ATTN_E_FORMAT, "%s: truncated PGM: no pixel data", path);
    if (!plain && !pnm_space(d[s.pos]))
        return fail(ctx, ATTN_E_FORMAT, "%s: PGM maxval not followed by one whitespace byte", path);
    s.pos += !plain; /* the one whitespace byte before a binary raster */
    if (plain ? n - s.pos < np : (n - s.pos) / bps < np)
        return fail(ctx, ATTN_E_FORMAT, "%s: truncated PGM: %zu pixels need more than its %zu bytes of "
                    "data", path, np, n - s.pos);
    uint8_t *px = malloc(np);
    if (!px) return fail(ctx, ATTN_E_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < np; i++) {
        uint32_t v;
        if (plain) {
            if (!pnm_uint(&s, 65535, &v)) {
                free(px);
                return fail(ctx, ATTN_E_FORMAT, "%s: PGM sample %zu is missing or not a number", path, i);
            }
        } else {
            const uint8_t *q = d + s.pos + i * bps;
            v = bps == 2 ? (uint32_t)q[0] << 8 | q[1] : q[0];
        }
        if (v > mx) {
            free(px);
            return fail(ctx, ATTN_E_FORMAT, "%s: PGM sample %zu is %u, over the maxval %u", path, i, v,
                        mx);
        }
        px[i] = pnm_scale(v, mx);
    }
    *rows = h, *cols = w, *pixels = px;
    return 0;
}

/* ---- PNG --------------------------------------------------------------------------------- */
#ifdef ATTN_HAVE_ZLIB
typedef struct png_info {
    uint32_t w, h;
    int depth, ctype, channels, nplte, ntrns, has_trns;
    uint8_t plte[256][3], alpha[256]; /* palette and its alpha (255 unless tRNS says) */
    uint32_t trns[3];                 /* the transparent gray or RGB (colour types 0 and 2) */
    size_t idat_bytes;
} png_info;

typedef struct png_chunk {
    uint32_t len;
    char type[5];
    const uint8_t *data;
} png_chunk;

/* The chunk at *pos, checked (bounds, type letters, CRC); advances *pos past it. */
static int png_next(const char *path, const uint8_t *d, size_t n, size_t *pos, png_chunk *c,
                    attn_ctx *ctx) {
    if (n - *pos < 12) return fail(ctx, ATTN_E_FORMAT, "%s: truncated PNG (no IEND chunk)", path);
    c->len = be32(d + *pos);
    memcpy(c->type, d + *pos + 4, 4);
    c->type[4] = 0;
    for (int i = 0; i < 4; i++) {
        char t = c->type[i];
        if (!((t >= 'A' && t <= 'Z') || (t >= 'a' && t <= 'z')))
            return fail(ctx, ATTN_E_FORMAT, "%s: bad PNG chunk type at byte %zu", path, *pos + 4);
    }
    if (c->len > 0x7fffffffu || c->len > n - *pos - 12)
        return fail(ctx, ATTN_E_FORMAT, "%s: truncated PNG: chunk %s claims %u bytes", path, c->type,
                    (unsigned)c->len);
    c->data = d + *pos + 8;
    uint32_t crc = (uint32_t)crc32(crc32(0L, d + *pos + 4, 4), c->data, c->len);
    if (crc != be32(c->data + c->len))
        return fail(ctx, ATTN_E_FORMAT, "%s: PNG chunk %s has a bad CRC (file damaged)", path, c->type);
    *pos += 12 + (size_t)c->len;
    return 0;
}

/* IHDR: size, bit depth and colour type (the combinations the PNG standard allows). */
static int png_ihdr(const char *path, const png_chunk *c, png_info *pi, attn_ctx *ctx) {
    if (strcmp(c->type, "IHDR") || c->len != 13)
        return fail(ctx, ATTN_E_FORMAT, "%s: a PNG must start with a 13-byte IHDR chunk", path);
    const uint8_t *p = c->data;
    pi->w = be32(p), pi->h = be32(p + 4), pi->depth = p[8], pi->ctype = p[9];
    static const int channels[7] = {1, 0, 3, 1, 2, 0, 4};
    int d = pi->depth, t = pi->ctype;
    int ok_depth = d == 1 || d == 2 || d == 4 || d == 8 || d == 16;
    if (t > 6 || !channels[t] || !ok_depth || (t != 0 && t != 3 && d < 8) || (t == 3 && d > 8))
        return fail(ctx, ATTN_E_FORMAT, "%s: PNG colour type %d with bit depth %d is not valid", path, t,
                    d);
    pi->channels = channels[t];
    if (p[10] != 0 || p[11] != 0)
        return fail(ctx, ATTN_E_FORMAT, "%s: unknown PNG compression or filter method", path);
    if (p[12] == 1)
        return fail(ctx, ATTN_E_FORMAT, "%s: interlaced (Adam7) PNG is not supported: save it "
                    "non-interlaced", path);
    if (p[12] != 0) return fail(ctx, ATTN_E_FORMAT, "%s: unknown PNG interlace method %d", path, p[12]);
    return pixels_ok(path, pi->w, pi->h, ctx);
}

/* PLTE and tRNS. */
static int png_palette(const char *path, const png_chunk *c, png_info *pi, attn_ctx *ctx) {
    if (!strcmp(c->type, "PLTE")) {
        if (c->len % 3 || c->len == 0 || c->len > 768)
            return fail(ctx, ATTN_E_FORMAT, "%s: PNG palette of %u bytes", path, (unsigned)c->len);
        pi->nplte = (int)(c->len / 3);
        memcpy(pi->plte, c->data, c->len);
        return 0;
    }
    /* tRNS */
    if (pi->ctype == 3) {
        if (!pi->nplte || (int)c->len > pi->nplte)
            return fail(ctx, ATTN_E_FORMAT, "%s: PNG tRNS does not match the palette", path);
        memcpy(pi->alpha, c->data, c->len);
    } else if (pi->ctype == 0 || pi->ctype == 2) {
        if (c->len != (pi->ctype == 0 ? 2u : 6u))
            return fail(ctx, ATTN_E_FORMAT, "%s: PNG tRNS of %u bytes", path, (unsigned)c->len);
        for (int i = 0; i < (int)c->len / 2; i++)
            pi->trns[i] = (uint32_t)c->data[2 * i] << 8 | c->data[2 * i + 1];
        pi->has_trns = 1;
    } /* colour types 4 and 6 have an alpha channel: a tRNS there is ignored */
    return 0;
}

/* Walks every chunk: header, palette, transparency, total IDAT size, IEND. */
static int png_scan(const char *path, const uint8_t *d, size_t n, png_info *pi, attn_ctx *ctx) {
    size_t pos = 8;
    png_chunk c;
    memset(pi, 0, sizeof *pi);
    memset(pi->alpha, 255, sizeof pi->alpha);
    if (png_next(path, d, n, &pos, &c, ctx) || png_ihdr(path, &c, pi, ctx))
        return 1;
    for (;;) {
        if (png_next(path, d, n, &pos, &c, ctx)) return 1;
        if (!strcmp(c.type, "IEND")) break;
        if (!strcmp(c.type, "IDAT")) {
            pi->idat_bytes += c.len;
        } else if (!strcmp(c.type, "PLTE") || !strcmp(c.type, "tRNS")) {
            if (pi->idat_bytes)
                return fail(ctx, ATTN_E_FORMAT, "%s: PNG %s after the image data", path, c.type);
            if (png_palette(path, &c, pi, ctx)) return 1;
        } else if (c.type[0] >= 'A' && c.type[0] <= 'Z') {
            return fail(ctx, ATTN_E_FORMAT, "%s: unknown critical PNG chunk %s", path, c.type);
        }
    }
    if (!pi->idat_bytes) return fail(ctx, ATTN_E_FORMAT, "%s: PNG without image data (IDAT)", path);
    if (pi->ctype == 3 && !pi->nplte)
        return fail(ctx, ATTN_E_FORMAT, "%s: palette PNG without a PLTE chunk", path);
    return 0;
}

/* Inflates the IDAT chunks, in order, into raw[0, need): exactly need bytes. */
static int png_inflate(const char *path, const uint8_t *d, size_t n, uint8_t *raw, size_t need,
                       attn_ctx *ctx) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit(&z) != Z_OK) return fail(ctx, ATTN_E_NOMEM, "%s: out of memory", path);
    z.next_out = raw;
    z.avail_out = (uInt)need;
    size_t pos = 8;
    png_chunk c;
    int ret = Z_OK;
    while (ret != Z_STREAM_END) {
        if (png_next(path, d, n, &pos, &c, ctx)) break; /* checked by png_scan */
        if (!strcmp(c.type, "IEND")) break;
        if (strcmp(c.type, "IDAT")) continue;
        z.next_in = (Bytef *)(uintptr_t)c.data;
        z.avail_in = c.len;
        ret = inflate(&z, Z_NO_FLUSH);
        if (ret == Z_BUF_ERROR && z.avail_in == 0) ret = Z_OK; /* an empty IDAT */
        if (ret != Z_OK && ret != Z_STREAM_END) break;
        if (ret == Z_OK && z.avail_in > 0) break; /* output full, input left: too much */
    }
    size_t out = need - z.avail_out;
    const char *msg = z.msg;
    inflateEnd(&z);
    if (ret == Z_STREAM_END && out == need) return 0;
    if (ret == Z_STREAM_END)
        return fail(ctx, ATTN_E_FORMAT, "%s: PNG image data of %zu bytes, its header needs %zu", path,
                    out, need);
    if ((ret == Z_OK || ret == Z_BUF_ERROR) && out == need)
        return fail(ctx, ATTN_E_FORMAT, "%s: PNG image data longer than its header describes (or its "
                    "end is missing)", path);
    if (ret == Z_OK || ret == Z_BUF_ERROR)
        return fail(ctx, ATTN_E_FORMAT, "%s: truncated PNG image data (%zu of %zu bytes)", path, out,
                    need);
    if (ret == Z_MEM_ERROR) return fail(ctx, ATTN_E_NOMEM, "%s: out of memory", path);
    return fail(ctx, ATTN_E_FORMAT, "%s: corrupt PNG image data (%s)", path, msg ? msg : "zlib error");
}

static uint8_t paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return (uint8_t)(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

/* Undoes the row filters in place: rows of 1 filter byte + stride bytes; bpp bytes a pixel
 * (at least 1). */
static int png_unfilter(const char *path, uint8_t *raw, uint32_t h, size_t stride, size_t bpp,
                        attn_ctx *ctx) {
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *r = raw + (size_t)y * (stride + 1) + 1;
        const uint8_t *u = y ? r - (stride + 1) : NULL; /* the row above (NULL: zeros) */
        int ft = r[-1];
        for (size_t i = 0; i < stride; i++) {
            int a = i >= bpp ? r[i - bpp] : 0, b = u ? u[i] : 0,
                c = i >= bpp && u ? u[i - bpp] : 0;
            switch (ft) {
            case 0: break;
            case 1: r[i] = (uint8_t)(r[i] + a); break;
            case 2: r[i] = (uint8_t)(r[i] + b); break;
            case 3: r[i] = (uint8_t)(r[i] + ((a + b) >> 1)); break;
            case 4: r[i] = (uint8_t)(r[i] + paeth(a, b, c)); break;
            default:
                return fail(ctx, ATTN_E_FORMAT, "%s: bad PNG filter type %d on row %u", path, ft,
                            (unsigned)y);
            }
        }
    }
    return 0;
}

/* Sample k of row r (bit depth d) as a 16-bit value v * 65535 / (2^d - 1) (exact for every
 * depth: 65535 is a multiple of 1, 3, 15 and 255); *raw gets it unscaled. */
static uint32_t png_sample(const uint8_t *r, size_t k, int d, uint32_t *raw) {
    uint32_t v;
    if (d == 16) {
        v = (uint32_t)r[2 * k] << 8 | r[2 * k + 1];
    } else if (d == 8) {
        v = r[k];
    } else {
        size_t bit = k * (size_t)d;
        v = (uint32_t)(r[bit / 8] >> (8 - d - (int)(bit % 8))) & ((1u << d) - 1);
    }
    *raw = v;
    return v * (65535u / ((1u << d) - 1));
}

/* One pixel of row r as 16-bit gray composited on black: gray = (299 R + 587 G + 114 B + 500)
 * / 1000, then gray * alpha / 65535 rounded.  -1: a palette index past the palette. */
static int32_t png_gray16(const png_info *pi, const uint8_t *r, uint32_t x) {
    uint32_t s[4], raw[4], a = 65535, g;
    for (int c = 0; c < pi->channels; c++)
        s[c] = png_sample(r, (size_t)x * pi->channels + c, pi->depth, &raw[c]);
    switch (pi->ctype) {
    case 3:
        if ((int)raw[0] >= pi->nplte) return -1;
        for (int c = 0; c < 3; c++) s[c] = pi->plte[raw[0]][c] * 257u;
        a = pi->alpha[raw[0]] * 257u;
        break;
    case 0:
        if (pi->has_trns && raw[0] == pi->trns[0]) a = 0;
        break;
    case 2:
        if (pi->has_trns && raw[0] == pi->trns[0] && raw[1] == pi->trns[1] &&
            raw[2] == pi->trns[2])
            a = 0;
        break;
    case 4: a = s[1]; break;
    default: a = s[3]; break; /* 6 */
    }
    g = pi->channels >= 3 || pi->ctype == 3 ? (299 * s[0] + 587 * s[1] + 114 * s[2] + 500) / 1000
                                            : s[0];
    return (int32_t)(((uint64_t)g * a + 32767) / 65535);
}

static int png_decode(const char *path, const uint8_t *d, size_t n, int64_t *rows,
                      int64_t *cols, uint8_t **pixels, attn_ctx *ctx) {
    png_info pi;
    if (png_scan(path, d, n, &pi, ctx)) return 1;
    size_t bits = (size_t)pi.w * pi.channels * pi.depth, stride = (bits + 7) / 8;
    size_t bpp = pi.depth < 8 ? 1 : (size_t)pi.channels * pi.depth / 8;
    size_t need = (size_t)pi.h * (stride + 1);
    if (need / GZ_RATIO > pi.idat_bytes)
        return fail(ctx, ATTN_E_FORMAT, "%s: truncated PNG: %zu bytes of image data cannot hold the "
                    "%u x %u image its header claims", path, pi.idat_bytes, (unsigned)pi.w,
                    (unsigned)pi.h);
    uint8_t *raw = malloc(need), *px = malloc((size_t)pi.w * pi.h);
    if (!raw || !px) {
        free(raw), free(px);
        return fail(ctx, ATTN_E_NOMEM, "%s: out of memory", path);
    }
    if (png_inflate(path, d, n, raw, need, ctx) ||
        png_unfilter(path, raw, pi.h, stride, bpp, ctx))
        goto bad;
    for (uint32_t y = 0; y < pi.h; y++) {
        const uint8_t *r = raw + (size_t)y * (stride + 1) + 1;
        for (uint32_t x = 0; x < pi.w; x++) {
            int32_t g = png_gray16(&pi, r, x);
            if (g < 0) {
                fail(ctx, ATTN_E_FORMAT, "%s: PNG palette index at (%u, %u) past the %d-colour palette",
                     path, (unsigned)y, (unsigned)x, pi.nplte);
                goto bad;
            }
            px[(size_t)y * pi.w + x] = (uint8_t)((g + 128) / 257);
        }
    }
    free(raw);
    *rows = pi.h, *cols = pi.w, *pixels = px;
    return 0;
bad:
    free(raw), free(px);
    return 1;
}
#endif /* ATTN_HAVE_ZLIB */

static int read_gray(const char *path, int64_t *rows, int64_t *cols, uint8_t **pixels, attn_ctx *ctx) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t *d;
    size_t n;
    *rows = *cols = 0, *pixels = NULL;
    if (read_small_file(path, &d, &n, ctx)) return 1;
    int rc;
    if (n >= 8 && !memcmp(d, png_sig, 8)) {
#ifdef ATTN_HAVE_ZLIB
        rc = png_decode(path, d, n, rows, cols, pixels, ctx);
#else
        rc = fail(ctx, ATTN_E_UNSUPPORTED, "%s: a PNG file, but " NO_ZLIB, path);
#endif
    } else if (n >= 2 && d[0] == 'P' && (d[1] == '2' || d[1] == '5')) {
        rc = pgm_decode(path, d, n, rows, cols, pixels, ctx);
    } else if (n >= 2 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7') {
        rc = fail(ctx, ATTN_E_FORMAT, "%s: a Netpbm P%c file: only grayscale PGM (P2, P5) is read", path,
                  d[1]);
    } else {
        rc = fail(ctx, ATTN_E_FORMAT, "%s: not a PGM (P2, P5) or PNG file", path);
    }
    free(d);
    return rc;
}

/* ---- random order and batches ------------------------------------------------------------ */
#define IMG_GOLDEN 0x9E3779B97F4A7C15u
enum { IMG_TAG_SHUFFLE = 1, IMG_TAG_AUGMENT = 2 };

static uint64_t sm_mix(uint64_t z) { /* splitmix64's output function */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t x) { return sm_mix(x + IMG_GOLDEN); }

/* The key of one stream of draws: seed, a tag (shuffle or augment) and an epoch or step. */
static uint64_t img_key(uint64_t seed, uint64_t tag, uint64_t a) {
    return splitmix64(splitmix64(splitmix64(seed) ^ tag) ^ a);
}

/* Output c (0, 1, ...) of splitmix64 started at state k: a pure function of (k, c). */
static uint64_t img_draw(uint64_t k, uint64_t c) { return sm_mix(k + (c + 1) * IMG_GOLDEN); }

/* floor(r * m / 2^64): in [0, m), with a bias below m / 2^64. */
static uint64_t img_below(uint64_t r, uint64_t m) {
    uint64_t rl = r & 0xFFFFFFFFu, rh = r >> 32, ml = m & 0xFFFFFFFFu, mh = m >> 32;
    uint64_t ll = rl * ml, lh = rl * mh, hl = rh * ml, hh = rh * mh;
    uint64_t mid = (ll >> 32) + (lh & 0xFFFFFFFFu) + (hl & 0xFFFFFFFFu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

void attn_images_shuffle(uint64_t seed, uint64_t epoch, int64_t n, int64_t *perm) {
    uint64_t k = img_key(seed, IMG_TAG_SHUFFLE, epoch);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)img_below(img_draw(k, (uint64_t)i), (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
}

/* One image of the batch: the crop at (dy, dx) of the image padded by pad zeros, mirrored
 * left-right when flip, through the normalisation table. */
static void img_one(const uint8_t *img, int64_t rows, int64_t cols, int64_t pad, int64_t dy,
                    int64_t dx, int flip, const float *lut, float *out) {
    for (int64_t y = 0; y < rows; y++) {
        int64_t sy = y + dy - pad;
        for (int64_t x = 0; x < cols; x++) {
            int64_t sx = (flip ? cols - 1 - x : x) + dx - pad;
            uint8_t v = sy >= 0 && sy < rows && sx >= 0 && sx < cols ? img[sy * cols + sx] : 0;
            out[y * cols + x] = lut[v];
        }
    }
}

static void batch(const attn_images *s, const int64_t *idx, int64_t B, const attn_images_aug *aug,
               uint64_t seed, uint64_t stream, float mean, float std, float *out,
               int64_t *labels) {
    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - mean) / std;
    int64_t pad = aug && aug->pad > 0 ? aug->pad : 0, hw = s->rows * s->cols;
    uint64_t k = img_key(seed, IMG_TAG_AUGMENT, stream);
    for (int64_t b = 0; b < B; b++) {
        uint64_t ix = (uint64_t)idx[b];
        int64_t dy = (int64_t)img_below(img_draw(k, 3 * ix), 2 * (uint64_t)pad + 1);
        int64_t dx = (int64_t)img_below(img_draw(k, 3 * ix + 1), 2 * (uint64_t)pad + 1);
        int flip = aug && aug->flip ? (int)(img_draw(k, 3 * ix + 2) >> 63) : 0;
        img_one(s->pixels + idx[b] * hw, s->rows, s->cols, pad, dy, dx, flip, lut, out + b * hw);
        if (labels) labels[b] = s->labels ? s->labels[idx[b]] : -1;
    }
}

/* ---- the public entry points ------------------------------------------------------------- */
attn_status attn_images_idx_load(attn_ctx *ctx, const char *images_path, const char *labels_path,
                                 int64_t max_n, int max_label, attn_images *out) {
    if (!ctx) return ATTN_E_INVALID;
    if (out) memset(out, 0, sizeof *out);
    ATTN_FAIL_IF(!images_path || !out, ctx, ATTN_E_INVALID,
                 "attn_images_idx_load: images_path or out is NULL");
    ATTN_FAIL_IF(max_n < 0 || max_label < 0, ctx, ATTN_E_INVALID,
                 "attn_images_idx_load: max_n (%lld) and max_label (%d) must be >= 0",
                 (long long)max_n, max_label);
    return idx_load(images_path, labels_path, max_n, max_label, out, ctx) ? attn_ctx_status(ctx)
                                                                           : ATTN_OK;
}

attn_status attn_images_mnist_load(attn_ctx *ctx, const char *dir, int train, int64_t max_n,
                                   attn_images *out) {
    if (!ctx) return ATTN_E_INVALID;
    if (out) memset(out, 0, sizeof *out);
    ATTN_FAIL_IF(!dir || !out, ctx, ATTN_E_INVALID, "attn_images_mnist_load: dir or out is NULL");
    ATTN_FAIL_IF(max_n < 0, ctx, ATTN_E_INVALID, "attn_images_mnist_load: max_n %lld < 0",
                 (long long)max_n);
    return mnist_load(dir, train, max_n, out, ctx) ? attn_ctx_status(ctx) : ATTN_OK;
}

attn_status attn_images_read_gray(attn_ctx *ctx, const char *path, attn_images *out) {
    if (!ctx) return ATTN_E_INVALID;
    if (out) memset(out, 0, sizeof *out);
    ATTN_FAIL_IF(!path || !out, ctx, ATTN_E_INVALID, "attn_images_read_gray: path or out is NULL");
    int64_t rows, cols;
    uint8_t *px;
    if (read_gray(path, &rows, &cols, &px, ctx)) return attn_ctx_status(ctx);
    out->n = 1, out->rows = rows, out->cols = cols, out->pixels = px;
    return ATTN_OK;
}

attn_status attn_images_batch(attn_ctx *ctx, const attn_images *s, const int64_t *idx, int64_t B,
                              const attn_images_aug *aug, uint64_t seed, uint64_t stream,
                              float mean, float std, float *out, int64_t *labels) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!s || (B > 0 && (!idx || !out || !s->pixels)) || B < 0, ctx, ATTN_E_INVALID,
                 "attn_images_batch: NULL argument or B %lld < 0", (long long)B);
    ATTN_FAIL_IF(s->n < 0 || s->rows < 1 || s->cols < 1 || s->rows > MAX_PIXELS ||
                     s->cols > MAX_PIXELS / s->rows,
                 ctx, ATTN_E_INVALID, "attn_images_batch: a set of %lld images of %lldx%lld",
                 (long long)s->n, (long long)s->rows, (long long)s->cols);
    ATTN_FAIL_IF(!(std > 0) || !isfinite(std) || !isfinite(mean), ctx, ATTN_E_INVALID,
                 "attn_images_batch: mean %g and std %g must be finite, std > 0", (double)mean,
                 (double)std);
    ATTN_FAIL_IF(aug && (aug->pad < 0 || aug->pad > 4096), ctx, ATTN_E_INVALID,
                 "attn_images_batch: pad %d is not in [0, 4096]", aug->pad);
    for (int64_t b = 0; b < B; b++)
        ATTN_FAIL_IF(idx[b] < 0 || idx[b] >= s->n, ctx, ATTN_E_INVALID,
                     "attn_images_batch: idx[%lld] = %lld is outside the set's %lld images",
                     (long long)b, (long long)idx[b], (long long)s->n);
    batch(s, idx, B, aug, seed, stream, mean, std, out, labels);
    return ATTN_OK;
}
