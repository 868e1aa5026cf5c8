#define _GNU_SOURCE /* lstat, for tu_rm_tree */
#include "testutil_sdpa.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

int tu_failures = 0, tu_checks = 0;

void tu_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    tu_failures++;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int tu_status(attn_status got, attn_status expected, attn_ctx *ctx, const char *expr,
              const char *file, int line) {
    tu_checks++;
    if (got == expected) return 1;
    tu_fail(file, line, "%s returned %s, expected %s (%s)", expr, attn_status_name(got),
            attn_status_name(expected), attn_ctx_errmsg(ctx));
    return 0;
}

double tu_max_err(const float *got, const float *ref, size_t n, double *ref_max) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (isnan(got[i]) || isnan(ref[i])) d = INFINITY;
        if (isinf(ref[i]) && got[i] == ref[i]) d = 0;
        if (d > e) e = d;
        if (isfinite(ref[i]) && fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    if (ref_max) *ref_max = m;
    return e;
}

int tu_close(const char *what, const float *got, const float *ref, size_t n, double tol) {
    double m, e = tu_max_err(got, ref, n, &m);
    double bound = tol * (m > 1 ? m : 1);
    tu_checks++;
    if (!(e <= bound)) {
        tu_fail(__FILE__, __LINE__, "%s: max abs error %.3g > %.3g (tol %.1g, max|ref| %.3g)",
                what, e, bound, tol, m);
        return 0;
    }
    return 1;
}

uint64_t tu_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tu_fill(float *p, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * (float)((tu_rand(&s) >> 40) * (1.0 / 16777216.0));
}

int tu_finish(const char *name) {
    if (tu_failures) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, tu_failures, tu_checks);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, tu_checks);
    return 0;
}

/* ---- testutil_sdpa.h -------------------------------------------------------------------- */
void tu_sdpa_masks(int cfg, int64_t B, int64_t H, int64_t L, int64_t S, attn__sdpa_args *a,
                   uint64_t *rs, float **fbuf, unsigned char **bbuf) {
    size_t nf = (size_t)(B * H * L * S), nb = (size_t)(B * L * S + B * S + L * S);
    *fbuf = malloc(4 * nf + 4), *bbuf = malloc(nb + 1);
    float *f = *fbuf;
    unsigned char *u = *bbuf;
    for (size_t i = 0; i < nf; i++) f[i] = (float)((double)(tu_rand(rs) % 2001) / 1000.0 - 1.0);
    for (size_t i = 0; i < nb; i++) u[i] = (tu_rand(rs) % 5) != 0;
    a->mask_ncols[0] = a->mask_ncols[1] = S;
    attn__mask4 *m0 = &a->mask[0], *m1 = &a->mask[1];
    switch (cfg) {
    case 1:
        m0->kind = ATTN_MASK_KEEP, m0->data = u, m0->dtype = ATTN_BOOL;
        m0->stride[2] = S, m0->stride[3] = 1;
        break;
    case 2:
        m0->kind = ATTN_MASK_ADD, m0->data = f, m0->dtype = ATTN_F32;
        m0->stride[0] = H * L * S, m0->stride[1] = L * S, m0->stride[2] = S, m0->stride[3] = 1;
        m1->kind = ATTN_MASK_BLOCK, m1->data = u, m1->dtype = ATTN_BOOL;
        for (int64_t i = 0; i < B * S; i++) u[i] = (tu_rand(rs) % 4) == 0;
        m1->stride[0] = S, m1->stride[3] = 1;
        break;
    case 3:
        for (int64_t i = 0; i < H * S; i++)
            if (tu_rand(rs) % 6 == 0) f[i] = -INFINITY;
        m0->kind = ATTN_MASK_ADD, m0->data = f, m0->dtype = ATTN_F32;
        m0->stride[1] = S, m0->stride[3] = 1;
        break;
    case 4:
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < L; i += 3)
                memset(u + (b * L + i) * S, 0, (size_t)(S - 2 > 0 ? S - 2 : 0));
        m0->kind = ATTN_MASK_KEEP, m0->data = u, m0->dtype = ATTN_U8;
        m0->stride[0] = L * S, m0->stride[2] = S, m0->stride[3] = 1;
        a->mask_ncols[0] = S - 2 > 0 ? S - 2 : 0;
        break;
    case 5:
        m0->kind = ATTN_MASK_BLOCK, m0->data = u, m0->dtype = ATTN_BOOL;
        for (int64_t i = 0; i < L * S; i++) u[i] = (tu_rand(rs) % 5) == 0;
        m0->stride[2] = 1, m0->stride[3] = L;
        break;
    case 6:
        m1->kind = ATTN_MASK_KEEP, m1->data = u, m1->dtype = ATTN_BOOL, m1->stride[3] = 1;
        m0->kind = ATTN_MASK_ADD, m0->data = f, m0->dtype = ATTN_F32, m0->stride[2] = 1;
        break;
    case 7:
        for (int64_t i = 0; i < B * S; i++) u[i] = i < S || (tu_rand(rs) % 3) == 0;
        m1->kind = ATTN_MASK_BLOCK, m1->data = u, m1->dtype = ATTN_BOOL;
        m1->stride[0] = S, m1->stride[3] = 1;
        break;
    case 8:
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = b; i < L; i += 2) memset(u + (b * L + i) * S, 0, (size_t)S);
        m0->kind = ATTN_MASK_KEEP, m0->data = u, m0->dtype = ATTN_BOOL;
        m0->stride[0] = L * S, m0->stride[2] = S, m0->stride[3] = 1;
        break;
    }
}

attn_ctx *tu_ctx(int threads) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    attn_ctx *c = NULL;
    return attn_ctx_create(&p, &c) == ATTN_OK ? c : NULL;
}

/* Removes a file or a directory tree (test scratch folders); 0 on success or when absent. */
int tu_rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return 0;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        char p[1024];
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            tu_rm_tree(p);
        }
        if (d) closedir(d);
        return rmdir(path);
    }
    return unlink(path);
}

void tu_fd_check(double (*loss)(void *arg), void *arg, const char *what, float *p,
                 const float *ga, int64_t n, int samples, uint64_t seed) {
    const float h = 2e-3f;
    double maxerr = 0, maxg = 0;
    uint64_t st = seed;
    for (int s = 0; s < samples && s < n; s++) {
        int64_t i = n <= samples ? s : (int64_t)(tu_rand(&st) % (uint64_t)n);
        float old = p[i];
        p[i] = old + h;
        double lp = loss(arg);
        p[i] = old - h;
        double lm = loss(arg);
        p[i] = old;
        double fd = (lp - lm) / (2.0 * h);
        double e = fabs(fd - ga[i]);
        if (!(e <= maxerr)) maxerr = e; /* NaN propagates */
        if (fabs(fd) > maxg) maxg = fabs(fd);
    }
    double tol = 2e-2 * (maxg > 1 ? maxg : 1);
    TU_CHECK(maxerr <= tol, "%s: max |fd - analytic| = %.3g > %.3g", what, maxerr, tol);
    if (getenv("ATTN_TEST_VERBOSE")) printf("%-60s fd err %.2e (tol %.2e)\n", what, maxerr, tol);
}

char *tu_read_line(FILE *f) {
    size_t cap = 256, n = 0;
    char *s = malloc(cap);
    int c;
    while (s && (c = fgetc(f)) != EOF && c != '\n') {
        if (n + 1 >= cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) {
                free(s);
                return NULL;
            }
            s = t;
        }
        s[n++] = (char)c;
    }
    if (!s || (c == EOF && n == 0)) {
        free(s);
        return NULL;
    }
    s[n] = 0;
    return s;
}
