/* The library's image data (attn_images_*, src/io/images.c), through the public API: IDX files raw and
 * gzipped read back exactly, hostile IDX files refused with the expected message (and without
 * allocating what a tiny file claims: those cases run in a child under an address-space limit),
 * PGM P2/P5 8- and 16-bit, PNG files written here by the test's own encoder (every filter type,
 * gray, gray+alpha, RGB, RGBA, palette, 1- to 16-bit, tRNS) compared pixel for pixel and
 * damaged ones refused, the seeded shuffle and the batches (normalisation, crop, flip) against
 * values computed by an independent Python rendering of the generator documented in
 * src/io/images.c, and Fashion-MNIST itself when /usr/share/datasets/fashion-mnist (or
 * $ATTN_FASHION_MNIST_DIR) holds it.
 *
 * Built without zlib (ATTN_HAVE_ZLIB unset), the gzip and PNG cases check the refusal message
 * instead.  The checks were written against the program's old interface (0 or 1, a message in
 * err): the adapters below give it on the library's (a status, the message in a context) and
 * check the status of every failure too (ATTN_E_IO, ATTN_E_FORMAT, ...; never ATTN_OK). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef ATTN_HAVE_ZLIB
#include <zlib.h>
#endif

#include "attn_tasks.h"
#include "testutil.h"

/* ---- the adapters: the library's image data as the checks below call it ----------------- */
static attn_ctx *g_ctx;
typedef attn_images img_set;
typedef attn_images_aug img_aug;
#define IMG_FASHION_MEAN ATTN_FASHION_MEAN
#define IMG_FASHION_STD ATTN_FASHION_STD
#define img_set_free attn_images_free
#define img_shuffle attn_images_shuffle

/* a failure's status must be one of the documented ones, with a message */
static int adapt(attn_status st, char *err, size_t errlen, const char *what) {
    if (st == ATTN_OK) return 0;
    TU_CHECK(st == ATTN_E_IO || st == ATTN_E_FORMAT || st == ATTN_E_UNSUPPORTED ||
                 st == ATTN_E_NOMEM || st == ATTN_E_INVALID,
             "%s: status %s", what, attn_status_name(st));
    TU_CHECK(attn_ctx_errmsg(g_ctx)[0] != 0, "%s: failed without a message", what);
    snprintf(err, errlen, "%s", attn_ctx_errmsg(g_ctx));
    return 1;
}
static int img_idx_load(const char *ip, const char *lp, int64_t max_n, int max_label,
                        img_set *out, char *err, size_t errlen) {
    return adapt(attn_images_idx_load(g_ctx, ip, lp, max_n, max_label, out), err, errlen, ip);
}
static int img_mnist_load(const char *dir, int train, int64_t max_n, img_set *out, char *err,
                          size_t errlen) {
    return adapt(attn_images_mnist_load(g_ctx, dir, train, max_n, out), err, errlen, dir);
}
static int img_read_gray(const char *path, int64_t *rows, int64_t *cols, uint8_t **pixels,
                         char *err, size_t errlen) {
    attn_images s;
    int rc = adapt(attn_images_read_gray(g_ctx, path, &s), err, errlen, path);
    TU_CHECK(rc || (s.n == 1 && !s.labels), "%s: a set of one image expected", path);
    *rows = s.rows, *cols = s.cols, *pixels = s.pixels; /* malloc'ed: free() releases it */
    return rc;
}
static void img_batch(const img_set *s, const int64_t *idx, int64_t B, const img_aug *aug,
                      uint64_t seed, uint64_t stream, float mean, float std, float *out,
                      int64_t *labels) {
    attn_status st = attn_images_batch(g_ctx, s, idx, B, aug, seed, stream, mean, std, out,
                                       labels);
    TU_CHECK(st == ATTN_OK, "attn_images_batch: %s", attn_ctx_errmsg(g_ctx));
}

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif

static char tmp[256];

/* ---- files ---------------------------------------------------------------------------- */
static const char *tp(const char *name) { /* tmp/name; four rotating buffers */
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
    return buf[k];
}

static void put(const char *name, const void *p, size_t n) {
    FILE *f = fopen(tp(name), "wb");
    TU_CHECK(f != NULL, "cannot write %s", name);
    if (!f) return;
    TU_CHECK(fwrite(p, 1, n, f) == n, "short write %s", name);
    fclose(f);
}

#ifdef ATTN_HAVE_ZLIB
static void put_gz(const char *name, const void *p, size_t n) {
    gzFile g = gzopen(tp(name), "wb");
    TU_CHECK(g != NULL, "gzopen %s", name);
    if (!g) return;
    TU_CHECK(n == 0 || gzwrite(g, p, (unsigned)n) == (int)n, "gzwrite %s", name);
    gzclose(g);
}
#endif

static uint8_t *slurp(const char *name, size_t *n) {
    FILE *f = fopen(tp(name), "rb");
    *n = 0;
    if (!f) return NULL;
    uint8_t *b = malloc(1 << 24);
    *n = fread(b, 1, 1 << 24, f);
    fclose(f);
    return b;
}

/* Deterministic bytes (splitmix64). */
static void fill_bytes(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(tu_rand(&seed) >> 56);
}

/* ---- IDX files ------------------------------------------------------------------------ */
/* Header (0, 0, type, ndim, big-endian dims) + npay bytes of payload; *len its size. */
static uint8_t *idx_bytes(int type, int ndim, const uint32_t *dims, const uint8_t *pay,
                          size_t npay, size_t *len) {
    uint8_t *b = malloc(4 + 4 * (size_t)ndim + npay + 1);
    b[0] = 0, b[1] = 0, b[2] = (uint8_t)type, b[3] = (uint8_t)ndim;
    for (int d = 0; d < ndim; d++)
        for (int k = 0; k < 4; k++) b[4 + 4 * d + k] = (uint8_t)(dims[d] >> (24 - 8 * k));
    if (npay) memcpy(b + 4 + 4 * ndim, pay, npay);
    *len = 4 + 4 * (size_t)ndim + npay;
    return b;
}

/* Writes an IDX file raw (gz = 0) or gzipped. */
static void put_idx(const char *name, int gz, int type, int ndim, const uint32_t *dims,
                    const uint8_t *pay, size_t npay) {
    size_t len;
    uint8_t *b = idx_bytes(type, ndim, dims, pay, npay, &len);
#ifdef ATTN_HAVE_ZLIB
    if (gz)
        put_gz(name, b, len);
    else
#endif
        put(name, b, len);
    (void)gz;
    free(b);
}

enum { N = 5, R = 3, C = 4 };
static uint8_t px5[N * R * C];
static const uint8_t lab5[N] = {0, 3, 1, 2, 3};

/* The load fails, leaves the set zeroed, and the message names `file` and holds want (and
 * want2). */
static void expect_idx_fail(const char *what, const char *img, const char *lab, int max_label,
                            const char *file, const char *want, const char *want2) {
    img_set s;
    char err[512] = "";
    memset(&s, 0x5a, sizeof s);
    int rc = img_idx_load(tp(img), lab ? tp(lab) : NULL, 0, max_label, &s, err, sizeof err);
    TU_CHECK(rc == 1, "%s: loaded (rc %d)", what, rc);
    TU_CHECK(s.n == 0 && !s.pixels && !s.labels && s.num_classes == 0, "%s: set not zeroed",
             what);
    TU_CHECK(strstr(err, tp(file)) != NULL, "%s: message \"%s\" does not name %s", what, err,
             file);
    TU_CHECK(strstr(err, want) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err, want);
    TU_CHECK(!want2 || strstr(err, want2), "%s: message \"%s\" lacks \"%s\"", what, err, want2);
}

static void check_set(const char *what, const img_set *s, int64_t n, int labels) {
    TU_CHECK(s->n == n && s->rows == R && s->cols == C, "%s: %lld x %lld x %lld", what,
             (long long)s->n, (long long)s->rows, (long long)s->cols);
    TU_CHECK(s->pixels && !memcmp(s->pixels, px5, (size_t)n * R * C), "%s: pixels differ", what);
    if (labels) {
        TU_CHECK(s->labels && !memcmp(s->labels, lab5, (size_t)n), "%s: labels differ", what);
        TU_CHECK(s->num_classes == 4, "%s: num_classes %d, expected 4", what, s->num_classes);
    } else {
        TU_CHECK(!s->labels && s->num_classes == 0, "%s: labels without a label file", what);
    }
}

static void test_idx_roundtrip(int gz_img, int gz_lab) {
    static const uint32_t di[3] = {N, R, C}, dl[1] = {N};
    char what[64], err[512] = "";
    snprintf(what, sizeof what, "idx images %s, labels %s", gz_img ? "gz" : "raw",
             gz_lab ? "gz" : "raw");
    put_idx("img", gz_img, 8, 3, di, px5, sizeof px5);
    put_idx("lab", gz_lab, 8, 1, dl, lab5, N);
    img_set s;
    int rc = img_idx_load(tp("img"), tp("lab"), 0, 4, &s, err, sizeof err);
    TU_CHECK(rc == 0, "%s: %s", what, err);
    check_set(what, &s, N, 1);
    img_set_free(&s);
    TU_CHECK(s.pixels == NULL && s.n == 0, "img_set_free leaves the set zeroed");
    /* max_n keeps the first images; num_classes is the whole label file's */
    rc = img_idx_load(tp("img"), tp("lab"), 2, 0, &s, err, sizeof err);
    TU_CHECK(rc == 0, "%s max_n 2: %s", what, err);
    check_set(what, &s, 2, 1);
    img_set_free(&s);
    rc = img_idx_load(tp("img"), tp("lab"), 99, 0, &s, err, sizeof err);
    TU_CHECK(rc == 0, "%s max_n 99: %s", what, err);
    check_set(what, &s, N, 1);
    img_set_free(&s);
    rc = img_idx_load(tp("img"), NULL, 0, 0, &s, err, sizeof err);
    TU_CHECK(rc == 0, "%s, no labels: %s", what, err);
    check_set(what, &s, N, 0);
    img_set_free(&s);
}

/* Hostile files that are refused by their header or their size, raw or gzipped. */
static void test_idx_hostile(int gz) {
    const uint32_t di[3] = {N, R, C}, dl[1] = {N}, d4[1] = {4};
    uint8_t bad[N] = {0, 3, 9, 1, 2}, big[N * R * C + 1];
    memcpy(big, px5, sizeof px5);
    big[N * R * C] = 7;
    printf("  hostile IDX files, %s\n", gz ? "gzipped" : "raw");
    put_idx("lab", gz, 8, 1, dl, lab5, N);

    uint8_t hdr[16];
    size_t len;
    uint8_t *b = idx_bytes(8, 3, di, px5, sizeof px5, &len);
    memcpy(hdr, b, 16);
    b[1] = 1; /* 00 01 08 03 */
#ifdef ATTN_HAVE_ZLIB
    if (gz)
        put_gz("x", b, len);
    else
#endif
        put("x", b, len);
    expect_idx_fail("bad magic", "x", "lab", 0, "x", "bad magic number 0x00010803", NULL);
    free(b);
    put_idx("x", gz, 0x0D, 3, di, px5, sizeof px5);
    expect_idx_fail("float elements", "x", "lab", 0, "x", "element type 0x0d", NULL);
    put_idx("x", gz, 8, 1, dl, lab5, N);
    expect_idx_fail("labels as images", "x", "lab", 0, "x", "1 dimensions", "expected 3");
    put_idx("x", gz, 8, 3, di, px5, sizeof px5);
    expect_idx_fail("images as labels", "x", "x", 0, "x", "3 dimensions", "expected 1");
    const uint32_t z0[3] = {0, R, C}, z2[3] = {N, R, 0};
    put_idx("x", gz, 8, 3, z0, NULL, 0);
    expect_idx_fail("0 images", "x", NULL, 0, "x", "dimension 0 is 0", NULL);
    put_idx("x", gz, 8, 3, z2, NULL, 0);
    expect_idx_fail("0 columns", "x", NULL, 0, "x", "dimension 2 is 0", NULL);
    const uint32_t ov[3] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
    put_idx("x", gz, 8, 3, ov, NULL, 0);
    expect_idx_fail("dims overflow", "x", NULL, 0, "x", "overflow", NULL);
    put_idx("x", gz, 8, 3, di, px5, sizeof px5 - 1);
    expect_idx_fail("truncated payload", "x", "lab", 0, "x", "truncated", "claims 60 bytes");
    put_idx("x", gz, 8, 3, di, big, sizeof big);
    expect_idx_fail("trailing byte", "x", "lab", 0, "x", "trailing", NULL);
    put_idx("x", gz, 8, 3, di, px5, sizeof px5);
    put_idx("l", gz, 8, 1, d4, lab5, 4);
    expect_idx_fail("4 labels, 5 images", "x", "l", 0, "l", "4 labels for the 5 images", NULL);
    put_idx("l", gz, 8, 1, dl, bad, N);
    expect_idx_fail("label out of range", "x", "l", 4, "l", "label 9 at index 2", "below 4");
#ifdef ATTN_HAVE_ZLIB
    if (gz) { /* round-3 F8: a complete gzip stream followed by other bytes */
        put_idx("x", 1, 8, 3, di, px5, sizeof px5);
        FILE *f = fopen(tp("x"), "ab");
        TU_CHECK(f && fwrite("garbage!garbage!", 1, 16, f) == 16, "append");
        if (f) fclose(f);
        expect_idx_fail("bytes after the gzip stream", "x", "lab", 0, "x",
                        "bytes after the end of the gzip stream", NULL);
    }
#endif
    /* a header cut short, and an empty file */
    if (!gz) {
        put("x", hdr, 10);
        expect_idx_fail("cut header", "x", NULL, 0, "x", "truncated IDX header", NULL);
        put("x", hdr, 0);
        expect_idx_fail("empty file", "x", NULL, 0, "x", "too short", NULL);
    }
}

/* round-3 F8: a small gzip file claiming many images (a "bomb": 2^20 zero images of 28x28, 784
 * MB, in < 1 MB): with a limit only the images kept are decompressed (fast, little memory);
 * a claim over half the machine's memory is refused before reading. */
static void test_gz_bomb(void) {
#ifdef ATTN_HAVE_ZLIB
    enum { NI = 1 << 20, RR = 28 };
    uint8_t hdr[16] = {0, 0, 8, 3, 0, 0x10, 0, 0, 0, 0, 0, RR, 0, 0, 0, RR};
    gzFile g = gzopen(tp("bomb"), "wb9");
    TU_CHECK(g != NULL, "gzopen bomb");
    if (!g) return;
    static uint8_t zero[1 << 16];
    gzwrite(g, hdr, sizeof hdr);
    for (int64_t left = (int64_t)NI * RR * RR; left > 0; left -= (int64_t)sizeof zero)
        gzwrite(g, zero, (unsigned)(left < (int64_t)sizeof zero ? left : (int64_t)sizeof zero));
    gzclose(g);
    img_set s;
    char err[512] = "";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = img_idx_load(tp("bomb"), NULL, 256, 0, &s, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    TU_CHECK(rc == 0 && s.n == 256, "bomb with --limit 256: rc %d n %lld (%s)", rc,
             (long long)s.n, err);
    TU_CHECK(secs < 2.0, "bomb with --limit 256 took %.2f s: the whole stream was inflated", secs);
    img_set_free(&s);
    /* a claim past half of the memory: 2^32 - 1 images of 255 x 255 (about 279 TB) */
    uint8_t huge[16] = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0xff, 0, 0, 0, 0xff};
    g = gzopen(tp("huge"), "wb9");
    if (g) {
        gzwrite(g, huge, sizeof huge);
        for (int i = 0; i < 512; i++) gzwrite(g, zero, sizeof zero); /* 32 MB of zeros */
        gzclose(g);
        rc = img_idx_load(tp("huge"), NULL, 0, 0, &s, err, sizeof err);
        TU_CHECK(rc == 1 && (strstr(err, "of this machine's") || strstr(err, "more than a gzip")),
                 "huge claim: rc %d (%s)", rc, err);
    }
#endif
}

static void test_idx_files(void) {
    char err[512] = "";
    img_set s;
    int rc = img_idx_load(tp("no_such_file"), NULL, 0, 0, &s, err, sizeof err);
    TU_CHECK(rc == 1 && strstr(err, "no_such_file") && strstr(err, strerror(ENOENT)),
             "missing file: %s", err);
    mkdir(tp("adir"), 0700);
    rc = img_idx_load(tp("adir"), NULL, 0, 0, &s, err, sizeof err);
    TU_CHECK(rc == 1 && strstr(err, "directory"), "directory: %s", err);
    put_idx("img", 0, 8, 3, (const uint32_t[]){N, R, C}, px5, sizeof px5);
    rc = img_idx_load(tp("img"), tp("no_labels"), 0, 0, &s, err, sizeof err);
    TU_CHECK(rc == 1 && strstr(err, "no_labels"), "missing label file: %s", err);
    /* a pipe (as from <(zcat file)): read as its data arrives, the two bytes that told raw from
     * gzip included */
    size_t len;
    uint8_t *b = idx_bytes(8, 3, (const uint32_t[]){N, R, C}, px5, sizeof px5, &len);
    int fd[2];
    char path[64];
    if (pipe(fd) == 0) {
        TU_CHECK(write(fd[1], b, len) == (ssize_t)len, "write to a pipe");
        close(fd[1]);
        snprintf(path, sizeof path, "/dev/fd/%d", fd[0]);
        rc = img_idx_load(path, NULL, 0, 0, &s, err, sizeof err);
        TU_CHECK(rc == 0, "IDX from a pipe: %s", err);
        if (rc == 0) check_set("IDX from a pipe", &s, N, 0);
        img_set_free(&s);
        close(fd[0]);
    }
    free(b);
}

#ifdef ATTN_HAVE_ZLIB
/* Damaged gzip streams: bytes flipped in the middle, the stream cut, the CRC trailer changed. */
static void test_gzip_damage(void) {
    enum { NB = 40, RB = 10, CB = 10 };
    uint8_t *pay = malloc(NB * RB * CB);
    fill_bytes(pay, NB * RB * CB, 3); /* incompressible: stored blocks, every byte matters */
    put_idx("g", 1, 8, 3, (const uint32_t[]){NB, RB, CB}, pay, NB * RB * CB);
    size_t n;
    uint8_t *gz = slurp("g", &n);
    TU_CHECK(gz && n > 1000, "gzip file of %zu bytes", n);
    uint8_t *d = malloc(n);
    memcpy(d, gz, n);
    for (size_t i = n / 2; i < n / 2 + 8; i++) d[i] ^= 0x5A;
    put("x", d, n);
    expect_idx_fail("gzip flipped", "x", NULL, 0, "x", "gzip", NULL);
    put("x", gz, n / 2);
    expect_idx_fail("gzip cut", "x", NULL, 0, "x", "gzip", "unexpected end");
    memcpy(d, gz, n);
    d[n - 6] ^= 1; /* the CRC-32 of the trailer */
    put("x", d, n);
    expect_idx_fail("gzip CRC", "x", NULL, 0, "x", "gzip", NULL);
    memcpy(d, gz, n);
    d[12] ^= 0xFF; /* the first deflate block's header or length */
    put("x", d, n);
    expect_idx_fail("gzip header", "x", NULL, 0, "x", "gzip", NULL);
    free(d), free(gz), free(pay);
}
#else
static void test_no_zlib(void) {
    static const uint8_t gz[20] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    put("x", gz, sizeof gz);
    expect_idx_fail("gzip without zlib", "x", NULL, 0, "x", "built without zlib", NULL);
    static const uint8_t png[16] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    put("p", png, sizeof png);
    int64_t r, c;
    uint8_t *px;
    char err[512] = "";
    TU_CHECK(img_read_gray(tp("p"), &r, &c, &px, err, sizeof err) == 1 &&
                 strstr(err, "attn was built without zlib (apt-get install zlib1g-dev, then rebuild attn)"),
             "PNG without zlib: %s", err);
}
#endif

/* ---- huge claims: refused without taking the memory ----------------------------------- */
/* Runs fn in a child limited to its current address space + 64 MB (not under ASan, whose
 * shadow memory needs terabytes of address space: there the peak RSS is checked instead); a
 * loader that allocates what the file claims gets NULL and says "out of memory", which the
 * expected message check catches.  fn returns its number of failed checks. */
static void in_limited_child(const char *what, int (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
#ifndef ASAN
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f && fscanf(f, "%ld", &pages) == 1) {
            struct rlimit rl;
            rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (64 << 20);
            setrlimit(RLIMIT_AS, &rl);
        }
        if (f) fclose(f);
#endif
        alarm(60);
        tu_failures = 0;
        int bad = fn();
        fflush(NULL);
        _exit(bad || tu_failures ? 1 : 0);
    }
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    TU_CHECK(pid > 0 && wait4(pid, &st, 0, &ru) == pid, "%s: fork/wait", what);
    TU_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child failed (status %d)", what, st);
    double rss_mb = (double)ru.ru_maxrss / 1024.0;
#ifdef ASAN
    TU_CHECK(rss_mb < 400, "%s: peak RSS %.1f MB", what, rss_mb);
#else
    TU_CHECK(rss_mb < 96, "%s: peak RSS %.1f MB", what, rss_mb);
#endif
    printf("  %s: refused, peak RSS %.1f MB\n", what, rss_mb);
}

static int huge_claims(void) {
    const uint32_t h[3] = {0xFFFFFFFFu, 28, 28}, h1[3] = {0xFFFFFFFFu, 1, 1}, hl[1] = {0xFFFFFFFFu};
    put_idx("x", 0, 8, 3, h, NULL, 0);
    expect_idx_fail("raw header claiming 2^32 images", "x", NULL, 0, "x", "truncated", NULL);
    put_idx("l", 0, 8, 1, hl, NULL, 0);
    put_idx("y", 0, 8, 3, (const uint32_t[]){N, R, C}, px5, sizeof px5);
    expect_idx_fail("raw label file claiming 2^32 labels", "y", "l", 0, "l", "truncated", NULL);
#ifdef ATTN_HAVE_ZLIB
    put_idx("x", 1, 8, 3, h, NULL, 0);
    expect_idx_fail("gzip header claiming 2^32 images", "x", NULL, 0, "x", "truncated",
                    "more than a gzip file");
    /* 4 GB claimed, 1 MB of zeros held (about 1 KB compressed) */
    uint8_t *z = calloc(1, 1 << 20);
    put_idx("x", 1, 8, 3, h1, z, 1 << 20);
    free(z);
    expect_idx_fail("gzip of 1 MB claiming 4 GB", "x", NULL, 0, "x", "truncated", NULL);
    /* within the deflate bound (96 MB claimed, 100 KB incompressible): read, grown as the data
     * arrives, refused at its end */
    uint8_t *r = malloc(100 << 10);
    fill_bytes(r, 100 << 10, 9);
    put_idx("x", 1, 8, 3, (const uint32_t[]){96, 1024, 1024}, r, 100 << 10);
    free(r);
    expect_idx_fail("gzip of 100 KB claiming 96 MB", "x", NULL, 0, "x", "truncated",
                    "holds 102400");
#endif
    /* one image file claiming 8000 x 8000 pixels */
    char err[512] = "";
    int64_t rows, cols;
    uint8_t *px;
    static const char p5[] = "P5 8000 8000 255\n\1\2\3";
    put("x.pgm", p5, sizeof p5 - 1);
    TU_CHECK(img_read_gray(tp("x.pgm"), &rows, &cols, &px, err, sizeof err) == 1 &&
                 strstr(err, "truncated PGM"), "P5 claiming 64M pixels: %s", err);
    static const char p2[] = "P2 8000 8000 255\n1 2 3\n";
    put("x.pgm", p2, sizeof p2 - 1);
    TU_CHECK(img_read_gray(tp("x.pgm"), &rows, &cols, &px, err, sizeof err) == 1 &&
                 strstr(err, "truncated PGM"), "P2 claiming 64M pixels: %s", err);
    return 0;
}

static void test_mnist_folder(void) {
    char dir[512], err[512] = "";
    snprintf(dir, sizeof dir, "%s/mnist", tmp);
    mkdir(dir, 0700);
    const uint32_t di[3] = {N, R, C}, dl[1] = {N};
    int gz = 0;
#ifdef ATTN_HAVE_ZLIB
    gz = 1;
    /* a raw file beside the .gz: the .gz is read */
    uint8_t other[N * R * C] = {0};
    put_idx("mnist/train-images-idx3-ubyte", 0, 8, 3, di, other, sizeof other);
#endif
    put_idx(gz ? "mnist/train-images-idx3-ubyte.gz" : "mnist/train-images-idx3-ubyte", gz, 8, 3,
            di, px5, sizeof px5);
    put_idx("mnist/train-labels-idx1-ubyte", 0, 8, 1, dl, lab5, N);
    img_set s;
    int rc = img_mnist_load(dir, 1, 0, &s, err, sizeof err);
    TU_CHECK(rc == 0, "mnist folder: %s", err);
    check_set("mnist folder", &s, N, 1);
    img_set_free(&s);
    rc = img_mnist_load(dir, 1, 3, &s, err, sizeof err);
    TU_CHECK(rc == 0, "mnist folder max_n: %s", err);
    check_set("mnist folder max_n", &s, 3, 1);
    img_set_free(&s);
    rc = img_mnist_load(dir, 0, 0, &s, err, sizeof err);
    TU_CHECK(rc == 1 && strstr(err, "t10k-images-idx3-ubyte") && strstr(err, dir),
             "no test files: %s", err);
}

/* ---- PGM ------------------------------------------------------------------------------ */
static void expect_gray(const char *what, const char *name, int64_t rows, int64_t cols,
                        const uint8_t *want) {
    int64_t r = -1, c = -1;
    uint8_t *px = NULL;
    char err[512] = "";
    int rc = img_read_gray(tp(name), &r, &c, &px, err, sizeof err);
    TU_CHECK(rc == 0, "%s: %s", what, err);
    if (rc) return;
    TU_CHECK(r == rows && c == cols, "%s: %lld x %lld, expected %lld x %lld", what, (long long)r,
             (long long)c, (long long)rows, (long long)cols);
    for (int64_t i = 0; r == rows && c == cols && i < rows * cols; i++)
        if (px[i] != want[i]) {
            TU_CHECK(0, "%s: pixel %lld is %d, expected %d", what, (long long)i, px[i], want[i]);
            break;
        }
    free(px);
}

static void expect_gray_fail(const char *what, const char *name, const char *want) {
    int64_t r = 7, c = 7;
    uint8_t *px = (uint8_t *)"x";
    char err[512] = "";
    int rc = img_read_gray(tp(name), &r, &c, &px, err, sizeof err);
    TU_CHECK(rc == 1 && r == 0 && c == 0 && px == NULL, "%s: rc %d", what, rc);
    if (rc == 0) free(px);
    TU_CHECK(strstr(err, tp(name)) != NULL, "%s: message \"%s\" does not name the file", what,
             err);
    TU_CHECK(strstr(err, want) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err, want);
}

static void put_str(const char *name, const char *s, size_t n) { put(name, s, n); }
#define PUT_LIT(name, lit) put_str(name, lit, sizeof lit - 1)

static void test_pgm(void) {
    PUT_LIT("a.pgm", "P5\n# a comment\n3 2\n# another\n255\n\0\1\x80\xfe\xff\x10");
    expect_gray("P5 8-bit", "a.pgm", 2, 3, (const uint8_t[]){0, 1, 128, 254, 255, 16});
    PUT_LIT("b.pgm", "P2 4 1 15\n0 15 7 8\n");
    expect_gray("P2 maxval 15", "b.pgm", 1, 4, (const uint8_t[]){0, 255, 119, 136});
    PUT_LIT("b.pgm", "P2\n2 2\n255\n# raster comment\n1 2\n3\t4");
    expect_gray("P2 comment in raster", "b.pgm", 2, 2, (const uint8_t[]){1, 2, 3, 4});
    /* 16-bit: v / 257 rounded; maxval 1000: v * 255 / 1000 rounded (halves up) */
    PUT_LIT("c.pgm", "P5 6 1 65535\n\0\0\xff\xff\0\x80\0\x81\x80\x80\x03\xe8");
    expect_gray("P5 16-bit", "c.pgm", 1, 6, (const uint8_t[]){0, 255, 0, 1, 128, 4});
    PUT_LIT("c.pgm", "P5 4 1 1000\n\0\0\x03\xe8\x01\xf4\0\x02");
    expect_gray("P5 maxval 1000", "c.pgm", 1, 4, (const uint8_t[]){0, 255, 128, 1});
    PUT_LIT("c.pgm", "P5 2 1 1\n\0\1");
    expect_gray("P5 maxval 1", "c.pgm", 1, 2, (const uint8_t[]){0, 255});
    PUT_LIT("c.pgm", "P2 3 1 65535 0 65535 32896");
    expect_gray("P2 16-bit", "c.pgm", 1, 3, (const uint8_t[]){0, 255, 128});

    PUT_LIT("d.pgm", "P5 2 1 100\n\x10\xc8");
    expect_gray_fail("sample over maxval", "d.pgm", "is 200, over the maxval 100");
    PUT_LIT("d.pgm", "P5 3 2 255\n\1\2\3\4\5");
    expect_gray_fail("truncated P5", "d.pgm", "truncated PGM");
    PUT_LIT("d.pgm", "P5 3 2 65535\n\1\2\3\4\5\6\7\x8\x9\xa\xb");
    expect_gray_fail("truncated 16-bit P5", "d.pgm", "truncated PGM");
    PUT_LIT("d.pgm", "P5 1 1 0\n\0");
    expect_gray_fail("maxval 0", "d.pgm", "maxval");
    PUT_LIT("d.pgm", "P5 1 1 70000\n\0\0");
    expect_gray_fail("maxval 70000", "d.pgm", "maxval");
    PUT_LIT("d.pgm", "P5 0 1 255\n");
    expect_gray_fail("width 0", "d.pgm", "0 x 1 pixels");
    PUT_LIT("d.pgm", "P5 100000 100000 255\n");
    expect_gray_fail("10^10 pixels", "d.pgm", "over the bound");
    PUT_LIT("d.pgm", "P5 2x 1 255\n\0\0");
    expect_gray_fail("bad width", "d.pgm", "bad PGM header");
    PUT_LIT("d.pgm", "P2 2 1 255\n1 x");
    expect_gray_fail("P2 letter", "d.pgm", "sample 1 is missing or not a number");
    PUT_LIT("d.pgm", "P2 2 1 255\n1");
    expect_gray_fail("P2 short", "d.pgm", "sample 1 is missing");
    PUT_LIT("d.pgm", "P6 1 1 255\n\0\0\0");
    expect_gray_fail("PPM", "d.pgm", "Netpbm P6 file");
    PUT_LIT("d.pgm", "GIF89a");
    expect_gray_fail("GIF", "d.pgm", "not a PGM (P2, P5) or PNG file");
    expect_gray_fail("missing", "none.pgm", strerror(ENOENT));
}

/* ---- PNG, written by this test -------------------------------------------------------- */
#ifdef ATTN_HAVE_ZLIB
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_put(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void b_be32(buf *b, uint32_t v) {
    uint8_t q[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    b_put(b, q, 4);
}

static void b_chunk(buf *b, const char *type, const void *data, size_t n) {
    b_be32(b, (uint32_t)n);
    size_t at = b->n;
    b_put(b, type, 4);
    if (n) b_put(b, data, n);
    b_be32(b, (uint32_t)crc32(0L, b->p + at, (uInt)(n + 4)));
}

/* The encoder's side of a PNG filter: each byte minus its predictor from the raw rows. */
static uint8_t predict(int ft, int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    switch (ft) {
    case 1: return (uint8_t)a;
    case 2: return (uint8_t)b;
    case 3: return (uint8_t)((a + b) / 2);
    case 4: return (uint8_t)(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
    default: return 0;
    }
}

typedef struct png_spec {
    uint32_t w, h;
    int depth, ctype, interlace;
    const uint8_t *rows; /* h rows of packed samples, stride bytes each */
    int filter0;         /* row y gets filter (filter0 + y) % 5; -1: filter byte 5 */
    int level;           /* zlib level: 0 = stored blocks */
    int pieces;          /* IDAT chunks */
    const uint8_t *plte; /* nplte RGB triples */
    int nplte;
    const uint8_t *trns;
    int ntrns;
    int extra_rows; /* rows of image data beyond h (negative: fewer) */
} png_spec;

static size_t png_stride(const png_spec *s) {
    static const int ch[7] = {1, 0, 3, 1, 2, 0, 4};
    return ((size_t)s->w * ch[s->ctype] * s->depth + 7) / 8;
}

/* The filtered rows, compressed. */
static uint8_t *png_idat(const png_spec *s, size_t *zlen) {
    static const int ch[7] = {1, 0, 3, 1, 2, 0, 4};
    size_t stride = png_stride(s), bpp = s->depth < 8 ? 1 : (size_t)ch[s->ctype] * s->depth / 8;
    size_t h = (size_t)((int)s->h + s->extra_rows), n = h * (stride + 1);
    uint8_t *f = malloc(n + 1);
    for (size_t y = 0; y < h; y++) {
        const uint8_t *r = s->rows + (y % s->h) * stride, *u = y ? r - stride : NULL;
        if (y % s->h == 0) u = NULL;
        int ft = s->filter0 < 0 ? 5 : (s->filter0 + (int)y) % 5;
        f[y * (stride + 1)] = (uint8_t)ft;
        for (size_t i = 0; i < stride; i++) {
            int a = i >= bpp ? r[i - bpp] : 0, b = u ? u[i] : 0, c = u && i >= bpp ? u[i - bpp] : 0;
            f[y * (stride + 1) + 1 + i] = (uint8_t)(r[i] - predict(ft, a, b, c));
        }
    }
    uLongf zl = compressBound(n);
    uint8_t *z = malloc(zl);
    TU_CHECK(compress2(z, &zl, f, n, s->level) == Z_OK, "compress2");
    free(f);
    *zlen = zl;
    return z;
}

static buf png_make(const png_spec *s) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    buf b = {0};
    b_put(&b, sig, 8);
    uint8_t ihdr[13] = {0};
    for (int k = 0; k < 4; k++) {
        ihdr[k] = (uint8_t)(s->w >> (24 - 8 * k));
        ihdr[4 + k] = (uint8_t)(s->h >> (24 - 8 * k));
    }
    ihdr[8] = (uint8_t)s->depth, ihdr[9] = (uint8_t)s->ctype, ihdr[12] = (uint8_t)s->interlace;
    b_chunk(&b, "IHDR", ihdr, 13);
    b_chunk(&b, "tEXt", "Comment\0test", 12);
    if (s->nplte) b_chunk(&b, "PLTE", s->plte, 3 * (size_t)s->nplte);
    if (s->ntrns) b_chunk(&b, "tRNS", s->trns, (size_t)s->ntrns);
    size_t zl;
    uint8_t *z = png_idat(s, &zl);
    int pieces = s->pieces > 0 ? s->pieces : 1;
    for (int k = 0; k < pieces; k++) {
        size_t a = zl * (size_t)k / (size_t)pieces, e = zl * (size_t)(k + 1) / (size_t)pieces;
        b_chunk(&b, "IDAT", z + a, e - a);
        if (k == 0 && pieces > 1) b_chunk(&b, "tIME", "\7\xe9\1\1\0\0\0", 7);
    }
    free(z);
    b_chunk(&b, "IEND", NULL, 0);
    return b;
}

/* Writes the PNG of s with each starting filter (every row type appears) and both levels, and
 * compares with want. */
static void png_expect(const char *what, png_spec s, const uint8_t *want) {
    for (int f0 = 0; f0 < 5; f0++)
        for (int level = 0; level <= 9; level += 9) {
            s.filter0 = f0, s.level = level, s.pieces = 1 + f0 % 3;
            buf b = png_make(&s);
            put("i.png", b.p, b.n);
            free(b.p);
            char w[128];
            snprintf(w, sizeof w, "%s (filters from %d, level %d)", what, f0, level);
            expect_gray(w, "i.png", s.h, s.w, want);
        }
}

static void png_expect_fail(const char *what, const buf *b, const char *want) {
    put("f.png", b->p, b->n);
    expect_gray_fail(what, "f.png", want);
}

static uint8_t gray8(int r, int g, int b) {
    return (uint8_t)((299 * r + 587 * g + 114 * b + 500) / 1000);
}

static void test_png_pixels(void) {
    /* gray 8-bit: the pixels themselves */
    uint8_t g[5 * 4];
    fill_bytes(g, sizeof g, 11);
    png_expect("gray 8", (png_spec){.w = 5, .h = 4, .depth = 8, .ctype = 0, .rows = g}, g);
    /* larger, and with values 0..3, where the Paeth predictor's ties (a = b, or c halfway)
     * are frequent: its order of preference matters */
    enum { GW = 128, GH = 96 };
    uint8_t *big = malloc(GW * GH);
    fill_bytes(big, GW * GH, 14);
    png_expect("gray 8, 128 x 96",
               (png_spec){.w = GW, .h = GH, .depth = 8, .ctype = 0, .rows = big}, big);
    for (int i = 0; i < GW * GH; i++) big[i] &= 3;
    png_expect("gray 8, values 0..3",
               (png_spec){.w = GW, .h = GH, .depth = 8, .ctype = 0, .rows = big}, big);
    free(big);
    /* RGB 8: explicit values, then random pixels against the integer formula */
    static const uint8_t rgb[2 * 3 * 3] = {255, 0, 0, 0, 255, 0, 0, 0, 255,
                                           255, 255, 255, 0, 0, 0, 200, 100, 50};
    png_expect("RGB 8", (png_spec){.w = 3, .h = 2, .depth = 8, .ctype = 2, .rows = rgb},
               (const uint8_t[]){76, 150, 29, 255, 0, 124});
    uint8_t rr[7 * 5 * 3], rw[7 * 5];
    fill_bytes(rr, sizeof rr, 12);
    for (int i = 0; i < 35; i++) rw[i] = gray8(rr[3 * i], rr[3 * i + 1], rr[3 * i + 2]);
    png_expect("random RGB 8", (png_spec){.w = 7, .h = 5, .depth = 8, .ctype = 2, .rows = rr}, rw);
    /* RGBA 8, alpha composited on black */
    static const uint8_t rgba[4 * 4] = {255, 255, 255, 128, 200, 100, 50, 255,
                                        10,  20,  30,  0,   255, 0,   0,  255};
    png_expect("RGBA 8", (png_spec){.w = 2, .h = 2, .depth = 8, .ctype = 6, .rows = rgba},
               (const uint8_t[]){128, 124, 0, 76});
    static const uint8_t ga[3 * 2] = {200, 255, 200, 0, 255, 51};
    png_expect("gray+alpha 8", (png_spec){.w = 3, .h = 1, .depth = 8, .ctype = 4, .rows = ga},
               (const uint8_t[]){200, 0, 51});
    /* palette 8-bit with tRNS (entry 1 transparent) and 2-bit */
    static const uint8_t pal[4 * 3] = {255, 0, 0, 0, 255, 0, 10, 10, 10, 255, 255, 255};
    static const uint8_t pi8[6] = {0, 1, 2, 3, 2, 0};
    png_expect("palette 8",
               (png_spec){.w = 3, .h = 2, .depth = 8, .ctype = 3, .rows = pi8, .plte = pal,
                          .nplte = 4, .trns = (const uint8_t[]){255, 0}, .ntrns = 2},
               (const uint8_t[]){76, 0, 10, 255, 10, 76});
    static const uint8_t pi2[2] = {0x1B, 0x80}; /* 0 1 2 3 | 2 0 0 0, width 5 */
    png_expect("palette 2-bit",
               (png_spec){.w = 5, .h = 1, .depth = 2, .ctype = 3, .rows = pi2, .plte = pal,
                          .nplte = 4},
               (const uint8_t[]){76, 150, 10, 255, 10});
    /* gray 1, 2 and 4 bits, widths that leave a partial byte */
    static const uint8_t b1[2 * 2] = {0xA5, 0x80, 0x3C, 0x40}; /* width 10 */
    png_expect("gray 1-bit", (png_spec){.w = 10, .h = 2, .depth = 1, .ctype = 0, .rows = b1},
               (const uint8_t[]){255, 0, 255, 0, 0, 255, 0, 255, 255, 0,
                                 0,   0, 255, 255, 255, 255, 0, 0, 0, 255});
    static const uint8_t b2[2] = {0x1B, 0xC0}; /* 0 1 2 3 3, width 5 */
    png_expect("gray 2-bit", (png_spec){.w = 5, .h = 1, .depth = 2, .ctype = 0, .rows = b2},
               (const uint8_t[]){0, 85, 170, 255, 255});
    static const uint8_t b4[2] = {0x0F, 0x70}; /* 0 15 7, width 3 */
    png_expect("gray 4-bit", (png_spec){.w = 3, .h = 1, .depth = 4, .ctype = 0, .rows = b4},
               (const uint8_t[]){0, 255, 119});
    /* 16-bit gray, RGB and RGBA: v / 257 rounded */
    static const uint8_t g16[6 * 2] = {0, 0, 0xff, 0xff, 0, 0x80, 0, 0x81, 0x80, 0x80, 3, 0xe8};
    png_expect("gray 16", (png_spec){.w = 3, .h = 2, .depth = 16, .ctype = 0, .rows = g16},
               (const uint8_t[]){0, 255, 0, 1, 128, 4});
    static const uint8_t rgb16[2 * 6] = {0xff, 0xff, 0,    0,    0,    0,
                                         0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    png_expect("RGB 16", (png_spec){.w = 2, .h = 1, .depth = 16, .ctype = 2, .rows = rgb16},
               (const uint8_t[]){76, 255});
    static const uint8_t rgba16[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 0x80};
    png_expect("RGBA 16", (png_spec){.w = 1, .h = 1, .depth = 16, .ctype = 6, .rows = rgba16},
               (const uint8_t[]){128});
    static const uint8_t ga16[8] = {0xff, 0xff, 0x33, 0x33, 0x80, 0x80, 0, 0};
    png_expect("gray+alpha 16", (png_spec){.w = 2, .h = 1, .depth = 16, .ctype = 4, .rows = ga16},
               (const uint8_t[]){51, 0});
    /* tRNS on gray (value 7) and RGB ((1, 2, 3)): those pixels are black */
    static const uint8_t gt[3] = {7, 8, 200};
    png_expect("gray tRNS",
               (png_spec){.w = 3, .h = 1, .depth = 8, .ctype = 0, .rows = gt,
                          .trns = (const uint8_t[]){0, 7}, .ntrns = 2},
               (const uint8_t[]){0, 8, 200});
    static const uint8_t rt[6] = {1, 2, 3, 1, 2, 4};
    png_expect("RGB tRNS",
               (png_spec){.w = 2, .h = 1, .depth = 8, .ctype = 2, .rows = rt,
                          .trns = (const uint8_t[]){0, 1, 0, 2, 0, 3}, .ntrns = 6},
               (const uint8_t[]){0, 2});
}

/* Random RGBA pixels: each gray value within 0.51 of the real 0.299 R + 0.587 G + 0.114 B
 * times alpha / 255 (the decoder rounds in 16-bit steps, so a value a hair from a half may
 * round either way; an error of a whole level fails). */
static void test_png_rgba_random(void) {
    enum { W = 9, H = 7 };
    uint8_t px[W * H * 4];
    fill_bytes(px, sizeof px, 13);
    png_spec s = {.w = W, .h = H, .depth = 8, .ctype = 6, .rows = px, .filter0 = 4, .level = 9};
    buf b = png_make(&s);
    put("r.png", b.p, b.n);
    free(b.p);
    int64_t r, c;
    uint8_t *out;
    char err[512] = "";
    TU_CHECK(img_read_gray(tp("r.png"), &r, &c, &out, err, sizeof err) == 0, "RGBA: %s", err);
    if (!out) return;
    double worst = 0;
    for (int i = 0; i < W * H; i++) {
        const uint8_t *q = px + 4 * i;
        double v = (0.299 * q[0] + 0.587 * q[1] + 0.114 * q[2]) * q[3] / 255.0;
        if (fabs(out[i] - v) > worst) worst = fabs(out[i] - v);
    }
    TU_CHECK(worst <= 0.51, "random RGBA: worst error %.3f levels", worst);
    free(out);
}

static void test_png_hostile(void) {
    uint8_t g[6 * 4];
    fill_bytes(g, sizeof g, 21);
    png_spec s = {.w = 6, .h = 4, .depth = 8, .ctype = 0, .rows = g, .level = 9};
    buf b = png_make(&s);
    size_t idat_at = 0; /* the first IDAT chunk's length field */
    for (size_t i = 8; i + 8 < b.n; i++)
        if (!memcmp(b.p + i + 4, "IDAT", 4)) {
            idat_at = i;
            break;
        }
    buf d = {0};
    b_put(&d, b.p, b.n);
    d.p[16 + 3] ^= 1; /* IHDR width, CRC left as it was */
    png_expect_fail("bad CRC", &d, "IHDR has a bad CRC");
    d.n = idat_at + 12;
    memcpy(d.p, b.p, d.n);
    png_expect_fail("cut inside IDAT", &d, "truncated PNG");
    d.n = b.n - 12;
    memcpy(d.p, b.p, d.n);
    png_expect_fail("no IEND", &d, "no IEND");
    d.n = b.n;
    memcpy(d.p, b.p, d.n);
    d.p[idat_at + 8 + 6] ^= 0x55; /* inside the deflate data: CRC made right again */
    uint32_t len = (uint32_t)d.p[idat_at] << 24 | (uint32_t)d.p[idat_at + 1] << 16 |
                   (uint32_t)d.p[idat_at + 2] << 8 | d.p[idat_at + 3];
    uint32_t crc = (uint32_t)crc32(0L, d.p + idat_at + 4, len + 4);
    for (int k = 0; k < 4; k++) d.p[idat_at + 8 + len + k] = (uint8_t)(crc >> (24 - 8 * k));
    png_expect_fail("corrupt deflate data", &d, "PNG image data");
    free(d.p), free(b.p);

    png_spec t = s;
    t.interlace = 1;
    b = png_make(&t);
    png_expect_fail("interlaced", &b, "interlaced (Adam7)");
    free(b.p);
    t = s, t.filter0 = -1;
    b = png_make(&t);
    png_expect_fail("filter type 5", &b, "bad PNG filter type 5 on row 0");
    free(b.p);
    t = s, t.extra_rows = 1;
    b = png_make(&t);
    png_expect_fail("too much image data", &b, "longer than its header");
    free(b.p);
    t = s, t.extra_rows = -1;
    b = png_make(&t);
    png_expect_fail("too little image data", &b, "PNG image data of 21 bytes, its header needs 28");
    free(b.p);
    static const uint8_t zeros[256];
    t = s, t.depth = 4, t.ctype = 2, t.rows = zeros;
    b = png_make(&t);
    png_expect_fail("RGB 4-bit", &b, "colour type 2 with bit depth 4 is not valid");
    free(b.p);
    static const uint8_t pal[2 * 3] = {1, 2, 3, 4, 5, 6};
    t = s, t.ctype = 3, t.plte = pal, t.nplte = 2; /* indices up to 255, two colours */
    b = png_make(&t);
    png_expect_fail("palette index", &b, "past the 2-colour palette");
    free(b.p);
    t.nplte = 0;
    b = png_make(&t);
    png_expect_fail("palette without PLTE", &b, "without a PLTE");
    free(b.p);
    /* 8000 x 8000 claimed, one row of image data held; then 10^8 pixels */
    t = s, t.w = 8000, t.h = 8000, t.extra_rows = 1 - 8000;
    uint8_t *row = calloc(10000, 1);
    t.rows = row;
    b = png_make(&t);
    png_expect_fail("8000 x 8000 from 8 KB", &b, "cannot hold");
    free(b.p);
    t.w = 10000, t.h = 10000, t.extra_rows = 1 - 10000;
    b = png_make(&t);
    png_expect_fail("10^8 pixels", &b, "over the bound");
    free(b.p), free(row);
    /* chunk layout: a critical chunk unknown, IHDR not first, no IDAT */
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    b = png_make(&s);
    d = (buf){0};
    b_put(&d, b.p, 33); /* signature + IHDR */
    b_chunk(&d, "ABCD", "xy", 2);
    b_put(&d, b.p + 33, b.n - 33);
    png_expect_fail("unknown critical chunk", &d, "unknown critical PNG chunk ABCD");
    d.n = 0;
    b_put(&d, sig, 8);
    b_chunk(&d, "tEXt", "a\0b", 3);
    b_put(&d, b.p + 8, b.n - 8);
    png_expect_fail("IHDR not first", &d, "must start with a 13-byte IHDR");
    d.n = 0;
    b_put(&d, b.p, 33);
    b_chunk(&d, "IEND", NULL, 0);
    png_expect_fail("no IDAT", &d, "without image data");
    d.n = 0;
    b_put(&d, b.p, b.n - 12); /* all but IEND */
    b_chunk(&d, "tRNS", "\0\7", 2);
    b_chunk(&d, "IEND", NULL, 0);
    png_expect_fail("tRNS after IDAT", &d, "PNG tRNS after the image data");
    d.n = 0;
    b_put(&d, b.p, 8);
    png_expect_fail("signature only", &d, "no IEND");
    free(d.p), free(b.p);
}
#endif /* ATTN_HAVE_ZLIB */

/* ---- shuffle and batches ---------------------------------------------------------------- */
/* Expected values from the Python rendering in src/io/images.c's opening comment (run
 * separately; they are not computed by the code under test). */
static void test_shuffle(void) {
    static const int64_t e10[10] = {0, 6, 3, 2, 7, 1, 8, 9, 5, 4};
    static const int64_t e11[10] = {9, 2, 5, 4, 7, 0, 6, 3, 1, 8};
    static const int64_t e42[12] = {2, 0, 10, 6, 3, 4, 7, 5, 9, 8, 11, 1};
    int64_t p[1000], q[1000];
    img_shuffle(1, 0, 10, p);
    TU_CHECK(!memcmp(p, e10, sizeof e10), "shuffle(1, 0, 10) differs from the Python values");
    img_shuffle(1, 1, 10, p);
    TU_CHECK(!memcmp(p, e11, sizeof e11), "shuffle(1, 1, 10) differs from the Python values");
    img_shuffle(42, 7, 12, p);
    TU_CHECK(!memcmp(p, e42, sizeof e42), "shuffle(42, 7, 12) differs from the Python values");
    img_shuffle(1, 0, 0, p); /* nothing to do */
    p[0] = 5;
    img_shuffle(1, 0, 1, p);
    TU_CHECK(p[0] == 0, "shuffle of one");
    /* a permutation, the same twice, different across epochs and seeds */
    img_shuffle(7, 3, 1000, p);
    char seen[1000] = {0};
    int perm = 1;
    for (int i = 0; i < 1000; i++) {
        if (p[i] < 0 || p[i] >= 1000 || seen[p[i]]) perm = 0;
        else seen[p[i]] = 1;
    }
    TU_CHECK(perm, "shuffle of 1000 is not a permutation");
    img_shuffle(7, 3, 1000, q);
    TU_CHECK(!memcmp(p, q, sizeof p), "shuffle is not deterministic");
    img_shuffle(7, 4, 1000, q);
    TU_CHECK(memcmp(p, q, sizeof p), "epochs 3 and 4 give the same order");
    img_shuffle(8, 3, 1000, q);
    TU_CHECK(memcmp(p, q, sizeof p), "seeds 7 and 8 give the same order");
    /* uniform: the 6 orders of 3 over 6000 epochs, each 1000 +- 150 (5 sigma is 144) */
    int count[6] = {0};
    for (int e = 0; e < 6000; e++) {
        img_shuffle(99, (uint64_t)e, 3, p);
        count[p[0] * 2 + (p[1] > p[2])]++;
    }
    for (int k = 0; k < 6; k++)
        TU_CHECK(count[k] > 850 && count[k] < 1150, "order %d of 3 seen %d times in 6000", k,
                 count[k]);
}

/* The test's own augmentation: image `img` (rows x cols) padded by pad zeros, cropped at
 * (dy, dx), mirrored when flip. */
static void crop_ref(const uint8_t *img, int rows, int cols, int pad, int dy, int dx, int flip,
                     uint8_t *out) {
    int pr = rows + 2 * pad, pc = cols + 2 * pad;
    uint8_t *padded = calloc((size_t)pr * pc, 1);
    for (int y = 0; y < rows; y++) memcpy(padded + (y + pad) * pc + pad, img + y * cols, cols);
    for (int y = 0; y < rows; y++)
        for (int x = 0; x < cols; x++) out[y * cols + x] = padded[(y + dy) * pc + x + dx];
    if (flip)
        for (int y = 0; y < rows; y++)
            for (int x = 0; x < cols / 2; x++) {
                uint8_t t = out[y * cols + x];
                out[y * cols + x] = out[y * cols + cols - 1 - x];
                out[y * cols + cols - 1 - x] = t;
            }
    free(padded);
}

/* Does out (normalised with mean 0, std 1) hold exactly the pixels q? */
static int same_pixels(const float *out, const uint8_t *q, int n) {
    for (int i = 0; i < n; i++)
        if (out[i] != (float)q[i] / 255.0f) return 0;
    return 1;
}

static void test_batch(void) {
    enum { BN = 6, BR = 5, BC = 4, HW = BR * BC };
    uint8_t px[BN * HW], lab[BN] = {0, 1, 2, 0, 1, 2};
    for (int i = 0; i < BN * HW; i++) px[i] = (uint8_t)(1 + i); /* distinct, never 0 */
    px[7] = 255;
    img_set s = {BN, BR, BC, px, lab, 3};
    int64_t idx[BN] = {0, 1, 2, 3, 4, 5}, got_lab[BN];
    float out[BN * HW], out2[BN * HW];
    /* normalisation: mean 0, std 1 gives pixel / 255; (0.5, 0.5) maps 0 and 255 to -1 and 1 */
    img_batch(&s, idx, BN, NULL, 1, 0, 0.0f, 1.0f, out, got_lab);
    TU_CHECK(same_pixels(out, px, BN * HW), "mean 0, std 1 is not pixel / 255");
    TU_CHECK(out[7] == 1.0f && got_lab[2] == 2 && got_lab[4] == 1, "pixel 255 -> %g", out[7]);
    img_batch(&s, idx, BN, NULL, 1, 0, 0.5f, 0.5f, out, NULL);
    TU_CHECK(out[7] == 1.0f, "(255/255 - 0.5) / 0.5 = %g", out[7]);
    double worst = 0;
    img_batch(&s, idx, BN, NULL, 1, 0, IMG_FASHION_MEAN, IMG_FASHION_STD, out, NULL);
    for (int i = 0; i < BN * HW; i++) {
        double e = (px[i] / 255.0 - 0.2860) / 0.3530;
        if (!(fabs(out[i] - e) <= worst)) worst = fabs(out[i] - e); /* NaN sticks */
    }
    TU_CHECK(worst < 1e-6, "normalisation error %g", worst);
    /* pad 0, no flip: the identity; the same as no augmentation */
    img_aug none = {0, 0};
    img_batch(&s, idx, BN, &none, 1, 0, 0.0f, 1.0f, out, NULL);
    TU_CHECK(same_pixels(out, px, BN * HW), "pad 0, flip 0 is not the identity");
    /* pad 2 with flips, seed 5, stream 3: (dy, dx, flip) of images 0..5 from the Python
     * rendering */
    static const int want[BN][3] = {{0, 1, 0}, {3, 0, 1}, {1, 0, 1},
                                    {1, 1, 1}, {1, 2, 0}, {2, 3, 1}};
    img_aug aug = {2, 1};
    img_batch(&s, idx, BN, &aug, 5, 3, 0.0f, 1.0f, out, got_lab);
    for (int i = 0; i < BN; i++) {
        uint8_t ref[HW];
        crop_ref(px + i * HW, BR, BC, 2, want[i][0], want[i][1], want[i][2], ref);
        TU_CHECK(same_pixels(out + i * HW, ref, HW), "image %d: not the crop (%d, %d) flip %d", i,
                 want[i][0], want[i][1], want[i][2]);
        TU_CHECK(got_lab[i] == lab[i], "label %d", i);
    }
    /* the same again; the choices follow the image, not its place in the batch */
    int64_t rev[BN] = {5, 4, 3, 2, 1, 0};
    img_batch(&s, rev, BN, &aug, 5, 3, 0.0f, 1.0f, out2, got_lab);
    for (int i = 0; i < BN; i++)
        TU_CHECK(!memcmp(out + i * HW, out2 + (BN - 1 - i) * HW, HW * sizeof(float)),
                 "image %d changes with its place in the batch", i);
    TU_CHECK(got_lab[0] == lab[5], "labels follow idx");
    img_batch(&s, idx, BN, &aug, 5, 4, 0.0f, 1.0f, out2, NULL);
    TU_CHECK(memcmp(out, out2, sizeof out), "streams 3 and 4 augment alike");
    /* flip alone (pad 0): image 1 is mirrored, image 0 is not (the flip bits above) */
    img_aug flip = {0, 1};
    img_batch(&s, idx, 2, &flip, 5, 3, 0.0f, 1.0f, out, NULL);
    uint8_t m[HW];
    crop_ref(px + HW, BR, BC, 0, 0, 0, 1, m);
    TU_CHECK(same_pixels(out, px, HW) && same_pixels(out + HW, m, HW),
             "flip: image 0 kept, image 1 mirrored");
    TU_CHECK(m[0] == px[HW + BC - 1] && m[BC - 1] == px[HW], "the mirror reverses each row");
    /* no labels in the set: -1 */
    img_set nolab = {BN, BR, BC, px, NULL, 0};
    img_batch(&nolab, idx, 2, NULL, 1, 0, 0.0f, 1.0f, out, got_lab);
    TU_CHECK(got_lab[0] == -1 && got_lab[1] == -1, "labels of a set without labels");
}

/* Over 400 images of 3 x 5 and pad 2, every output is one crop with dy, dx in [0, 4] and a flip
 * bit, and every offset and both flips occur.  (Each crop shows part of the image, whose pixels
 * are distinct and nonzero: the offsets and the flip are told by the output.) */
static void test_batch_bounds(void) {
    enum { BN = 400, BR = 3, BC = 5, HW = BR * BC, P = 2 };
    uint8_t *px = malloc(BN * HW);
    for (int i = 0; i < BN * HW; i++) px[i] = (uint8_t)(1 + (i % HW) * 16 + (i / HW) % 16);
    img_set s = {BN, BR, BC, px, NULL, 0};
    int64_t *idx = malloc(BN * sizeof *idx);
    float *out = malloc(BN * HW * sizeof *out);
    for (int i = 0; i < BN; i++) idx[i] = i;
    img_aug aug = {P, 1};
    img_batch(&s, idx, BN, &aug, 123, 9, 0.0f, 1.0f, out, NULL);
    int dys[2 * P + 1] = {0}, dxs[2 * P + 1] = {0}, flips[2] = {0}, unmatched = 0;
    for (int i = 0; i < BN; i++) {
        int found = 0;
        uint8_t ref[HW];
        for (int dy = 0; dy <= 2 * P && !found; dy++)
            for (int dx = 0; dx <= 2 * P && !found; dx++)
                for (int f = 0; f < 2 && !found; f++) {
                    crop_ref(px + i * HW, BR, BC, P, dy, dx, f, ref);
                    if (same_pixels(out + i * HW, ref, HW)) {
                        found = 1;
                        dys[dy]++, dxs[dx]++, flips[f]++;
                    }
                }
        unmatched += !found;
    }
    TU_CHECK(unmatched == 0, "%d of %d outputs are no crop within the padding", unmatched, BN);
    for (int k = 0; k <= 2 * P; k++)
        TU_CHECK(dys[k] > 40 && dxs[k] > 40, "offset %d: %d rows, %d columns of 400", k, dys[k],
                 dxs[k]);
    TU_CHECK(flips[0] > 150 && flips[1] > 150, "flips %d / %d", flips[0], flips[1]);
    free(px), free(idx), free(out);
}

static void test_classes(void) {
    TU_CHECK(!strcmp(attn_fashion_class(0), "T-shirt/top") &&
                 !strcmp(attn_fashion_class(5), "Sandal") &&
                 !strcmp(attn_fashion_class(9), "Ankle boot") && !attn_fashion_class(10) &&
                 !attn_fashion_class(-1),
             "Fashion-MNIST class names");
}

/* ---- the real Fashion-MNIST, where it is installed ------------------------------------ */
static void test_fashion_mnist(void) {
    const char *dir = getenv("ATTN_FASHION_MNIST_DIR");
    if (!dir || !dir[0]) dir = "/usr/share/datasets/fashion-mnist";
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        printf("  note: %s not found: the Fashion-MNIST check is skipped\n", dir);
        return;
    }
    img_set tr, te;
    char err[512] = "";
    int rc = img_mnist_load(dir, 1, 0, &tr, err, sizeof err);
#ifndef ATTN_HAVE_ZLIB
    if (rc && strstr(err, "attn was built without zlib")) { /* the .gz files, refused */
        printf("  note: built without zlib: Fashion-MNIST's .gz files refused as they should be\n");
        return;
    }
#endif
    TU_CHECK(rc == 0, "Fashion-MNIST train: %s", err);
    rc |= img_mnist_load(dir, 0, 0, &te, err, sizeof err);
    TU_CHECK(rc == 0, "Fashion-MNIST test: %s", err);
    if (rc) {
        img_set_free(&tr);
        return;
    }
    TU_CHECK(tr.n == 60000 && te.n == 10000 && tr.rows == 28 && tr.cols == 28 &&
                 te.rows == 28 && te.cols == 28,
             "sizes %lld, %lld", (long long)tr.n, (long long)te.n);
    TU_CHECK(tr.num_classes == 10 && te.num_classes == 10, "classes %d, %d", tr.num_classes,
             te.num_classes);
    int64_t hist[10] = {0}, hist_te[10] = {0};
    for (int64_t i = 0; i < tr.n; i++) hist[tr.labels[i] % 10]++;
    for (int64_t i = 0; i < te.n; i++) hist_te[te.labels[i] % 10]++;
    for (int k = 0; k < 10; k++)
        TU_CHECK(hist[k] == 6000 && hist_te[k] == 1000, "class %d: %lld train, %lld test", k,
                 (long long)hist[k], (long long)hist_te[k]);
    double sum = 0, sq = 0, m = (double)tr.n * 784;
    for (int64_t i = 0; i < tr.n * 784; i++) {
        double v = tr.pixels[i] / 255.0;
        sum += v, sq += v * v;
    }
    double mean = sum / m, sd = sqrt(sq / m - mean * mean);
    TU_CHECK(fabs(mean - IMG_FASHION_MEAN) < 1e-3 && fabs(sd - IMG_FASHION_STD) < 1e-3,
             "train pixel mean %.4f, std %.4f", mean, sd);
    printf("  Fashion-MNIST: 60000 + 10000 images, mean %.4f, std %.4f\n", mean, sd);
    img_set head;
    rc = img_mnist_load(dir, 1, 100, &head, err, sizeof err);
    TU_CHECK(rc == 0 && head.n == 100 && !memcmp(head.pixels, tr.pixels, 100 * 784) &&
                 !memcmp(head.labels, tr.labels, 100),
             "the first 100: %s", err);
    img_set_free(&head);
    img_set_free(&tr);
    img_set_free(&te);
}

/* The library's own rules: statuses of the usual failures, NULL arguments refused, free
 * functions take NULL, a batch index outside the set refused (not read). */
static void test_api(void) {
    attn_images s;
    memset(&s, 0xAB, sizeof s);
    attn_status st = attn_images_idx_load(g_ctx, tp("no_such_file"), NULL, 0, 0, &s);
    TU_CHECK(st == ATTN_E_IO && s.n == 0 && !s.pixels, "missing file: %s", attn_status_name(st));
    TU_CHECK(attn_images_idx_load(NULL, tp("x"), NULL, 0, 0, &s) == ATTN_E_INVALID, "NULL ctx");
    TU_CHECK(attn_images_idx_load(g_ctx, NULL, NULL, 0, 0, &s) == ATTN_E_INVALID, "NULL path");
    TU_CHECK(attn_images_idx_load(g_ctx, tp("x"), NULL, -1, 0, &s) == ATTN_E_INVALID, "max_n < 0");
    TU_CHECK(attn_images_mnist_load(g_ctx, NULL, 1, 0, &s) == ATTN_E_INVALID, "NULL dir");
    TU_CHECK(attn_images_read_gray(g_ctx, tp("x"), NULL) == ATTN_E_INVALID, "NULL out");
    static const uint8_t junk[8] = {'h', 'e', 'l', 'l', 'o', '!', '!', '\n'};
    put("junk", junk, sizeof junk);
    st = attn_images_read_gray(g_ctx, tp("junk"), &s);
    TU_CHECK(st == ATTN_E_FORMAT && strstr(attn_ctx_errmsg(g_ctx), "junk"), "junk: %s %s",
             attn_status_name(st), attn_ctx_errmsg(g_ctx));
    attn_images_free(NULL);
    attn_images_free(&s);
    uint8_t px[4] = {0, 85, 170, 255}, lab[1] = {3};
    attn_images one = {1, 2, 2, px, lab, 4};
    float out[8];
    int64_t idx[2] = {0, 1}, y[2];
    TU_CHECK(attn_images_batch(g_ctx, &one, idx, 2, NULL, 1, 0, 0.0f, 1.0f, out, y) ==
                 ATTN_E_INVALID, "an index outside the set");
    TU_CHECK(attn_images_batch(g_ctx, &one, idx, 1, NULL, 1, 0, 0.0f, 0.0f, out, y) ==
                 ATTN_E_INVALID, "std 0");
    TU_CHECK(attn_images_batch(g_ctx, &one, idx, 1, NULL, 1, 0, 0.0f, NAN, out, y) ==
                 ATTN_E_INVALID, "std NaN");
    TU_CHECK(attn_images_batch(g_ctx, &one, idx, 1, NULL, 1, 0, 0.0f, 1.0f, out, y) == ATTN_OK &&
                 out[0] == 0.0f && out[3] == 1.0f && y[0] == 3,
             "one image: %g %g label %lld", (double)out[0], (double)out[3], (long long)y[0]);
    attn_images_shuffle(1, 0, 0, NULL); /* nothing to do */
}

int main(void) {
    if (attn_ctx_create(NULL, &g_ctx) != ATTN_OK) {
        fprintf(stderr, "attn_ctx_create failed\n");
        return 1;
    }
    snprintf(tmp, sizeof tmp, "/tmp/attn-imgdata-XXXXXX");
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    for (int i = 0; i < N * R * C; i++) px5[i] = (uint8_t)(i * 37 + 11);
    test_idx_roundtrip(0, 0);
#ifdef ATTN_HAVE_ZLIB
    test_idx_roundtrip(1, 1);
    test_idx_roundtrip(1, 0);
    test_idx_roundtrip(0, 1);
    test_idx_hostile(1);
    test_gzip_damage();
#else
    printf("  built without zlib: gzip and PNG refusals checked instead\n");
    test_no_zlib();
#endif
    test_idx_hostile(0);
    test_idx_files();
    test_gz_bomb();
    in_limited_child("huge claims", huge_claims);
    test_mnist_folder();
    test_pgm();
#ifdef ATTN_HAVE_ZLIB
    test_png_pixels();
    test_png_rgba_random();
    test_png_hostile();
#endif
    test_shuffle();
    test_batch();
    test_batch_bounds();
    test_classes();
    test_fashion_mnist();
    test_api();
    tu_rm_tree(tmp);
    attn_ctx_free(g_ctx);
    return tu_finish("test_imgdata");
}
