/* Shared by the file-loader fuzz targets: a private folder for the files a fuzz input becomes,
 * splitting an input into files, small context limits, and checks that trap.
 *
 * The loaders take paths (a model folder, a checkpoint file), so each input is written as files
 * into a folder of this process under /dev/shm (memory, no disk I/O; $TMPDIR or /tmp where
 * /dev/shm is missing) and the public loader reads them back.  The folder is removed at exit. */
#ifndef ATTN_FUZZ_UTIL_H
#define ATTN_FUZZ_UTIL_H

#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn.h"

/* A broken promise: print why, then trap (libFuzzer records the input as a crash). */
#define FZ_CHECK(cond)                                                                        \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);          \
            __builtin_trap();                                                                 \
        }                                                                                     \
    } while (0)

/* Input segments are separated by this: two ASCII record separators. */
#define FZ_SEP "\x1e\x1e"
#define FZ_SEP_LEN 2

typedef struct fz_seg {
    const uint8_t *p;
    size_t n;
} fz_seg;

/* Splits data at each FZ_SEP into at most max segments (the last takes the rest); returns the
 * count.  Segments past the count are absent (the caller removes their files). */
static inline int fz_split(const uint8_t *data, size_t size, fz_seg *seg, int max) {
    int k = 0;
    size_t start = 0;
    for (size_t i = 0; k < max - 1 && i + FZ_SEP_LEN <= size;) {
        if (!memcmp(data + i, FZ_SEP, FZ_SEP_LEN)) {
            seg[k].p = data + start, seg[k].n = i - start, k++;
            i += FZ_SEP_LEN;
            start = i;
        } else {
            i++;
        }
    }
    seg[k].p = data + start, seg[k].n = size - start, k++;
    return k;
}

static char fz_dir[512];

static int fz_rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return 0;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        char p[1024];
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            fz_rm_tree(p);
        }
        if (d) closedir(d);
        return rmdir(path);
    }
    return unlink(path);
}

static void fz_cleanup(void) {
    if (fz_dir[0]) fz_rm_tree(fz_dir);
}

/* Creates this process's folder (name: attn-fuzz-TAG-PID) and returns it. */
static inline const char *fz_make_dir(const char *tag) {
    const char *base = "/dev/shm";
    struct stat sb;
    if (stat(base, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(base, W_OK) != 0) {
        base = getenv("TMPDIR");
        if (!base || !base[0]) base = "/tmp";
    }
    snprintf(fz_dir, sizeof fz_dir, "%s/attn-fuzz-%s-%ld", base, tag, (long)getpid());
    fz_rm_tree(fz_dir);
    if (mkdir(fz_dir, 0700) != 0) {
        perror(fz_dir);
        abort();
    }
    atexit(fz_cleanup);
    return fz_dir;
}

/* Writes p[0, n) to dir/name (replacing it); aborts on an I/O error (not the input's fault). */
static inline void fz_put(const char *dir, const char *name, const void *p, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w <= 0) {
            perror(path);
            abort();
        }
        c += w, n -= (size_t)w;
    }
    close(fd);
}

static inline void fz_remove(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* Copies a whole file into dir/name. */
static inline void fz_copy(const char *src, const char *dir, const char *name) {
    FILE *f = fopen(src, "rb");
    if (!f) {
        perror(src);
        abort();
    }
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    if (!feof(f)) {
        fprintf(stderr, "%s: over 1 MB\n", src);
        abort();
    }
    fclose(f);
    fz_put(dir, name, buf, n);
}

/* A one-thread context with small limits, so that no claim in a fuzz input may make a loader
 * read, build or allocate much.  One context serves every input (as a program that loads many
 * files would use it; creating one per input cost a few percent): its error is cleared here. */
static inline attn_ctx *fz_ctx(int64_t file_bytes, int64_t layers, int64_t vocab,
                               int64_t text_bytes) {
    static attn_ctx *ctx;
    if (!ctx) {
        attn_ctx_params p;
        memset(&p, 0, sizeof p);
        p.threads = 1;
        FZ_CHECK(attn_ctx_create(&p, &ctx) == ATTN_OK);
        FZ_CHECK(attn_ctx_set_limit(ctx, ATTN_LIMIT_FILE_BYTES, file_bytes) == ATTN_OK);
        FZ_CHECK(attn_ctx_set_limit(ctx, ATTN_LIMIT_LAYERS, layers) == ATTN_OK);
        FZ_CHECK(attn_ctx_set_limit(ctx, ATTN_LIMIT_VOCAB, vocab) == ATTN_OK);
        FZ_CHECK(attn_ctx_set_limit(ctx, ATTN_LIMIT_TEXT_BYTES, text_bytes) == ATTN_OK);
    }
    attn_ctx_clear_error(ctx);
    FZ_CHECK(attn_ctx_errmsg(ctx)[0] == 0);
    return ctx;
}

/* A failure must be a status other than ATTN_E_INTERNAL (a bug by definition), with a
 * message. */
static inline void fz_failed(attn_ctx *ctx, attn_status s) {
    static int verbose = -1; /* ATTN_FUZZ_VERBOSE=1: print why each input was refused */
    if (verbose < 0) verbose = getenv("ATTN_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "refused: %s: %s\n", attn_status_name(s), attn_ctx_errmsg(ctx));
    FZ_CHECK(s > ATTN_OK && s < ATTN_E_INTERNAL);
    FZ_CHECK(attn_ctx_errmsg(ctx)[0] != 0);
}

/* ATTN_FUZZ_VERBOSE=1: say that an input loaded. */
static inline void fz_loaded(const char *what) {
    if (getenv("ATTN_FUZZ_VERBOSE")) fprintf(stderr, "loaded: %s\n", what);
}

static inline void fz_all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) FZ_CHECK(isfinite(x[i]));
}

/* Largest |parameter| of a module (the loaders refuse NaN and infinity). */
static inline float fz_max_abs_param(const attn_module *m) {
    float mx = 0;
    for (size_t i = 0; i < attn_module_param_count(m); i++) {
        const char *name;
        attn_tensor v;
        FZ_CHECK(attn_module_param_at(m, i, &name, &v) == ATTN_OK);
        int64_t n = 1;
        for (int d = 0; d < v.ndim; d++) n *= v.shape[d];
        const float *p = v.data;
        for (int64_t k = 0; k < n; k++) {
            FZ_CHECK(isfinite(p[k]));
            float a = fabsf(p[k]);
            if (a > mx) mx = a;
        }
    }
    return mx;
}

#endif
