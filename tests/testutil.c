#include "testutil.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

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
