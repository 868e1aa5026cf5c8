/* libFuzzer target: the library's image data readers (src/io/images.c, instrumented):
 * attn_images_idx_load on IDX files, raw and gzipped, and attn_images_read_gray on PGM and PNG
 * files (through the adapters below, which keep the target's first interface: 0 or 1 and a
 * message; a refusal's status must be one of those documented).
 *
 * An input is one or two files split at FZ_SEP (fuzz_util.h): an image file (IDX3, PGM, PNG or
 * anything) and, optionally, an IDX1 label file.  Each input is
 *   - written as is and loaded as IDX images (with the labels when there are two segments), and
 *     read as one image by img_read_gray;
 *   - (zlib) the image segment gzipped here and loaded as IDX again, so that the mutations reach
 *     the IDX checks through the gzip path as well (a segment that already is gzip exercises
 *     the damaged-stream paths);
 *   - (zlib, an input starting with the PNG signature) written again with every chunk's CRC made
 *     right and the IDAT bytes taken as the filtered scanlines: sized to what IHDR needs (when
 *     at most 1 MB) and compressed here into one IDAT, so that the mutations reach the filters
 *     and the pixel conversion past the CRCs and the deflate stream.
 * Seeds: corpus_imgdata/ (make_corpus.py).
 *
 * Promises checked: no sanitizer report, leak or hang; a refusal returns 1 with a message naming
 * the file and leaves the outputs zeroed; a raw IDX file that loads holds exactly its header's
 * bytes; loaded labels are below num_classes (and max_label); a batch of a loaded set is within
 * the normalised range of pixels 0 and 255; an image read has 1 to 2^26 pixels, all readable. */
#include "fuzz_util.h"
#include "attn_tasks.h"

#ifdef ATTN_HAVE_ZLIB
#include <zlib.h>
#endif

static const char *dir;
static char p_img[1024], p_lab[1024], p_gz[1024], p_png[1024];

/* ---- the adapters ---------------------------------------------------------------------- */
static attn_ctx *g_ctx;
typedef attn_images img_set;
typedef attn_images_aug img_aug;
#define img_set_free attn_images_free
static int adapt(attn_status st, char *err, size_t errlen) {
    if (st == ATTN_OK) return 0;
    FZ_CHECK(st == ATTN_E_IO || st == ATTN_E_FORMAT || st == ATTN_E_UNSUPPORTED ||
             st == ATTN_E_NOMEM);
    snprintf(err, errlen, "%s", attn_ctx_errmsg(g_ctx));
    return 1;
}
static int img_idx_load(const char *ip, const char *lp, int64_t max_n, int max_label,
                        img_set *out, char *err, size_t errlen) {
    return adapt(attn_images_idx_load(g_ctx, ip, lp, max_n, max_label, out), err, errlen);
}
static int img_read_gray(const char *path, int64_t *rows, int64_t *cols, uint8_t **pixels,
                         char *err, size_t errlen) {
    attn_images s;
    int rc = adapt(attn_images_read_gray(g_ctx, path, &s), err, errlen);
    *rows = s.rows, *cols = s.cols, *pixels = s.pixels;
    return rc;
}
static void img_batch(const img_set *s, const int64_t *idx, int64_t B, const img_aug *aug,
                      uint64_t seed, uint64_t stream, float mean, float std, float *out,
                      int64_t *labels) {
    FZ_CHECK(attn_images_batch(g_ctx, s, idx, B, aug, seed, stream, mean, std, out, labels) ==
             ATTN_OK);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    dir = fz_make_dir("img");
    FZ_CHECK(attn_ctx_create(NULL, &g_ctx) == ATTN_OK);
    snprintf(p_img, sizeof p_img, "%s/images", dir);
    snprintf(p_lab, sizeof p_lab, "%s/labels", dir);
    snprintf(p_gz, sizeof p_gz, "%s/images.gz", dir);
    snprintf(p_png, sizeof p_png, "%s/image.png", dir);
    return 0;
}

static int verbose(void) {
    static int v = -1;
    if (v < 0) v = getenv("ATTN_FUZZ_VERBOSE") != NULL;
    return v;
}

/* A refusal: a message naming one of the files, nothing returned. */
static void refused(const char *err, const char *a, const char *b) {
    if (verbose()) fprintf(stderr, "refused: %s\n", err);
    FZ_CHECK(err[0] != 0);
    FZ_CHECK(strstr(err, a) || (b && strstr(err, b)));
}

/* A batch of up to 3 images of a loaded set, augmented, within the normalised pixel range. */
static void use_set(const img_set *s) {
    int64_t B = s->n < 3 ? s->n : 3, idx[3] = {0, s->n - 1, s->n / 2}, lab[3];
    size_t hw = (size_t)(s->rows * s->cols);
    float *out = malloc((size_t)B * hw * sizeof *out);
    FZ_CHECK(out != NULL);
    img_aug aug = {2, 1};
    const float mean = 0.25f, sd = 0.5f, lo = (0.0f - mean) / sd, hi = (1.0f - mean) / sd;
    img_batch(s, idx, B, &aug, 1, 2, mean, sd, out, lab);
    for (size_t i = 0; i < (size_t)B * hw; i++) FZ_CHECK(out[i] >= lo && out[i] <= hi);
    for (int64_t b = 0; b < B; b++)
        FZ_CHECK(s->labels ? lab[b] >= 0 && lab[b] < s->num_classes : lab[b] == -1);
    free(out);
}

/* img_idx_load on img (raw_bytes: its size when it is a raw file, else 0) and lab (may be
 * NULL). */
static void try_idx(const char *img, const char *lab, size_t raw_bytes, int64_t max_n,
                    int max_label) {
    img_set s;
    char err[512] = "";
    int rc = img_idx_load(img, lab, max_n, max_label, &s, err, sizeof err);
    if (rc) {
        FZ_CHECK(rc == 1 && s.n == 0 && !s.pixels && !s.labels && s.num_classes == 0);
        refused(err, img, lab);
        return;
    }
    if (verbose()) fprintf(stderr, "loaded: %lld x %lld x %lld\n", (long long)s.n,
                           (long long)s.rows, (long long)s.cols);
    FZ_CHECK(s.n >= 1 && s.rows >= 1 && s.cols >= 1 && s.pixels);
    FZ_CHECK(max_n <= 0 || s.n <= max_n);
    if (raw_bytes && max_n <= 0) FZ_CHECK((size_t)(s.n * s.rows * s.cols) + 16 == raw_bytes);
    if (lab) {
        FZ_CHECK(s.labels && s.num_classes >= 1 && s.num_classes <= 256);
        FZ_CHECK(max_label <= 0 || s.num_classes <= max_label);
        for (int64_t i = 0; i < s.n; i++) FZ_CHECK(s.labels[i] < s.num_classes);
    } else {
        FZ_CHECK(!s.labels && s.num_classes == 0);
    }
    use_set(&s);
    img_set_free(&s);
    FZ_CHECK(!s.pixels && s.n == 0);
}

static void try_gray(const char *path) {
    int64_t rows = -1, cols = -1;
    uint8_t *px = (uint8_t *)"x";
    char err[512] = "";
    int rc = img_read_gray(path, &rows, &cols, &px, err, sizeof err);
    if (rc) {
        FZ_CHECK(rc == 1 && rows == 0 && cols == 0 && px == NULL);
        refused(err, path, NULL);
        return;
    }
    if (verbose()) fprintf(stderr, "image: %lld x %lld\n", (long long)rows, (long long)cols);
    FZ_CHECK(rows >= 1 && cols >= 1 && rows * cols <= ((int64_t)1 << 26) && px);
    unsigned sum = 0;
    for (int64_t i = 0; i < rows * cols; i++) sum += px[i]; /* every pixel readable */
    (void)sum;
    free(px);
}

#ifdef ATTN_HAVE_ZLIB
static void put_gz(const char *path, const uint8_t *p, size_t n) {
    gzFile g = gzopen(path, "wb1");
    FZ_CHECK(g != NULL);
    FZ_CHECK(n == 0 || gzwrite(g, p, (unsigned)n) == (int)n);
    FZ_CHECK(gzclose(g) == Z_OK);
}

typedef struct fbuf {
    uint8_t *p;
    size_t n, cap;
} fbuf;

static void fb_put(fbuf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        FZ_CHECK(b->p != NULL);
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void fb_chunk(fbuf *b, const uint8_t *type, const uint8_t *data, size_t n) {
    uint8_t len[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    fb_put(b, len, 4);
    uLong crc = crc32(crc32(0L, type, 4), data, (uInt)n);
    fb_put(b, type, 4);
    fb_put(b, data, n);
    uint8_t c[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
    fb_put(b, c, 4);
}

/* The image data IHDR asks for (rows of a filter byte + packed samples), or 0 past 1 MB. */
static size_t ihdr_need(const uint8_t *ihdr) {
    static const int ch[7] = {1, 1, 3, 1, 2, 1, 4};
    uint64_t w = rd32(ihdr), h = rd32(ihdr + 4), d = ihdr[8], c = ihdr[9] < 7 ? ch[ihdr[9]] : 1;
    if (d == 0 || d > 16) d = 8;
    if (w > (1u << 20) || h > (1u << 20)) return 0;
    uint64_t need = h * ((w * c * d + 7) / 8 + 1);
    return need <= (1u << 20) ? (size_t)need : 0;
}

/* The input's chunks with right CRCs; the IDAT bytes, as raw scanlines sized to IHDR's need,
 * compressed into one IDAT where the first one was.  0 when there is no IDAT. */
static int repack_png(const uint8_t *d, size_t n, fbuf *out) {
    fbuf raw = {0}, tail = {0};
    size_t need = 0, pos = 8;
    int idat = 0;
    fb_put(out, d, 8);
    while (pos + 12 <= n) {
        size_t len = rd32(d + pos);
        if (len > n - pos - 12) len = n - pos - 12;
        const uint8_t *type = d + pos + 4, *data = d + pos + 8;
        if (!memcmp(type, "IHDR", 4) && len >= 13) need = ihdr_need(data);
        if (!memcmp(type, "IDAT", 4)) {
            fb_put(&raw, data, len);
            idat = 1;
        } else {
            fb_chunk(idat ? &tail : out, type, data, len);
        }
        pos += 12 + len;
    }
    if (idat) {
        if (need) { /* the fuzzer's scanlines, repeated or cut to exactly what IHDR needs */
            uint8_t *sized = calloc(need, 1);
            FZ_CHECK(sized != NULL);
            for (size_t i = 0; raw.n && i < need; i++) sized[i] = raw.p[i % raw.n];
            free(raw.p);
            raw.p = sized, raw.n = raw.cap = need;
        }
        uLongf zl = compressBound(raw.n);
        uint8_t *z = malloc(zl);
        FZ_CHECK(z && compress2(z, &zl, raw.p, raw.n, 1) == Z_OK);
        fb_chunk(out, (const uint8_t *)"IDAT", z, zl);
        free(z);
        fb_put(out, tail.p, tail.n);
    }
    free(raw.p), free(tail.p);
    return idat;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_seg seg[2];
    int k = fz_split(data, size, seg, 2);
    fz_put(dir, "images", seg[0].p, seg[0].n);
    if (k == 2) fz_put(dir, "labels", seg[1].p, seg[1].n);
    else fz_remove(dir, "labels");
    int max_label = size ? data[size - 1] % 12 : 0; /* 0 (none) or 1..11 */
    int is_gz = seg[0].n >= 2 && seg[0].p[0] == 0x1f && seg[0].p[1] == 0x8b;
    size_t raw_bytes = is_gz ? 0 : seg[0].n;
    try_idx(p_img, k == 2 ? p_lab : NULL, raw_bytes, 0, max_label);
    if (k == 2) try_idx(p_img, p_lab, raw_bytes, 1, 0);
    try_gray(p_img);
#ifdef ATTN_HAVE_ZLIB
    put_gz(p_gz, seg[0].p, seg[0].n);
    try_idx(p_gz, k == 2 ? p_lab : NULL, 0, 0, max_label);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (size >= 8 && !memcmp(data, sig, 8)) {
        fbuf png = {0};
        if (repack_png(data, size, &png)) {
            fz_put(dir, "image.png", png.p, png.n);
            try_gray(p_png);
        }
        free(png.p);
    }
#endif
    return 0;
}
