/* Minimal test harness: checks count failures; main returns tu_finish(). NaN always fails. */
#ifndef ATTN_TESTUTIL_H
#define ATTN_TESTUTIL_H
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include "attn.h"

extern int tu_failures, tu_checks;

#define TU_CHECK(cond, ...)                                                                   \
    do {                                                                                      \
        tu_checks++;                                                                          \
        if (!(cond)) tu_fail(__FILE__, __LINE__, __VA_ARGS__);                                \
    } while (0)
/* status must equal expected */
#define TU_STATUS(expr, expected, ctx) tu_status((expr), (expected), (ctx), #expr, __FILE__, __LINE__)

void tu_fail(const char *file, int line, const char *fmt, ...);
int tu_status(attn_status got, attn_status expected, attn_ctx *ctx, const char *expr,
              const char *file, int line);
/* max |a - b| <= tol * max(1, max|b|); NaN anywhere fails. Returns 1 on pass. */
int tu_close(const char *what, const float *got, const float *ref, size_t n, double tol);
/* Max abs error and the scale used, for reports. */
double tu_max_err(const float *got, const float *ref, size_t n, double *ref_max);
/* Deterministic uniform floats in [lo, hi). */
void tu_fill(float *p, size_t n, uint64_t seed, float lo, float hi);
uint64_t tu_rand(uint64_t *state);
int tu_finish(const char *name);
/* A context with `threads` worker threads (NULL on failure). */
attn_ctx *tu_ctx(int threads);
/* Removes a file or a directory tree (scratch folders of the tests); 0 on success. */
int tu_rm_tree(const char *path);
/* The next line of f without its newline (malloc'ed; free it), or NULL at the end. */
char *tu_read_line(FILE *f);
/* Central differences (step 2e-3) of loss(arg) at up to `samples` positions of the float array
 * p[n] (all of them when n <= samples, else positions drawn with seed) against the analytic
 * gradient ga: a check fails when max |fd - ga| > 2e-2 max(1, max |fd|); NaN fails.  what
 * names the array.  With ATTN_TEST_VERBOSE set, prints the error. */
void tu_fd_check(double (*loss)(void *arg), void *arg, const char *what, float *p,
                 const float *ga, int64_t n, int samples, uint64_t seed);

#endif
