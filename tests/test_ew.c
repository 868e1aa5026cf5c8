/* Row-wise kernels of src/kernels/ew.h (residual add + layer norm, bias + GELU): the AVX-512
 * versions against the plain C ones on shapes that are not multiples of 16, the GELU against
 * the exact erf GELU over a dense sweep, and the threaded drivers across thread counts.
 *
 * Tolerances.
 *  - add_ln: both versions compute the statistics and the affine map in double and round once
 *    to float; only the order of the double sums differs (relative ~1e-15), so the outputs
 *    differ by at most one float ulp: |fast - ref| <= 2^-23 |ref| (+ 1e-30 for zeros).  A wrong
 *    mean, variance, bias or residual moves outputs by far more.
 *  - bias_gelu: the same float operations in the same order: bit-identical.
 *  - GELU vs 0.5 x (1 + erf(x / sqrt 2)) in double: the A&S 7.1.28 erf (|error| <= 3e-7)
 *    evaluated in float, where p^16 amplifies the rounding of p 16-fold; measured over
 *    [-12, 12] in steps of 1e-5: at most 8.7e-7 absolute, 9.2e-7 |x| for small |x|.  The
 *    check: |err| <= 1e-6 min(|x|, 1) + 2^-24 |x| (beyond |x| = 12 erf is +-1 in float and in
 *    double to 1e-60). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/ew.h"

static void test_add_ln(const attn__ew_kernel *fast) {
    static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 16}, {4, 17}, {9, 100},
                                        {2, 384}, {7, 385}, {3, 1030}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], E = shapes[s][1], ld = E + 3;
        for (int var = 0; var < 4; var++) { /* with / without bias+residual, weight+bias */
            float *y0 = malloc(sizeof(float) * (size_t)(M * ld));
            float *y1 = malloc(sizeof(float) * (size_t)(M * ld));
            float *r = malloc(sizeof(float) * (size_t)(M * ld));
            float *b = malloc(sizeof(float) * (size_t)E), *w = malloc(sizeof(float) * (size_t)E);
            float *lb = malloc(sizeof(float) * (size_t)E);
            float *am0 = malloc(sizeof(float) * (size_t)M);
            float *am1 = malloc(sizeof(float) * (size_t)M);
            tu_fill(y0, (size_t)(M * ld), 5 + s, -3, 5);
            tu_fill(r, (size_t)(M * ld), 6 + s, -2, 2);
            tu_fill(b, (size_t)E, 7 + s, -1, 1);
            tu_fill(w, (size_t)E, 8 + s, 0.5f, 1.5f);
            tu_fill(lb, (size_t)E, 9 + s, -1, 1);
            for (int64_t m = 0; m < M; m++) y0[m * ld + E] = 777.0f; /* padding: untouched */
            memcpy(y1, y0, sizeof(float) * (size_t)(M * ld));
            const float *bb = var & 1 ? b : NULL, *rr = var & 1 ? r : NULL;
            const float *ww = var & 2 ? w : NULL, *ll = var & 2 ? lb : NULL;
            attn__ew_kernel_ref()->add_ln(y0, ld, bb, rr, ld, ww, ll, 1e-5f, M, E, am0);
            fast->add_ln(y1, ld, bb, rr, ld, ww, ll, 1e-5f, M, E, am1);
            int bad = 0;
            for (int64_t m = 0; m < M; m++) {
                bad += y1[m * ld + E] != 777.0f;
                for (int64_t e = 0; e < E; e++) {
                    double a = y1[m * ld + e], c = y0[m * ld + e];
                    if (!(fabs(a - c) <= 0x1p-23 * fabs(c) + 1e-30)) bad++;
                }
            }
            TU_CHECK(!bad, "add_ln M=%lld E=%lld variant %d: %d outputs differ", (long long)M,
                     (long long)E, var, bad);
            /* the row maxima handed to the fp16 GEMM: exactly max |y| of each row */
            for (int64_t m = 0; m < M; m++) {
                float mx0 = 0, mx1 = 0;
                for (int64_t e = 0; e < E; e++) {
                    mx0 = fmaxf(mx0, fabsf(y0[m * ld + e]));
                    mx1 = fmaxf(mx1, fabsf(y1[m * ld + e]));
                }
                TU_CHECK(am0[m] == mx0 && am1[m] == mx1, "add_ln row max %lld", (long long)m);
            }
            /* independent check of one row: mean 0, variance 1 before the affine map */
            if (var == 1 && E > 1) {
                double mu = 0, v = 0;
                for (int64_t e = 0; e < E; e++) mu += y1[e];
                mu /= (double)E;
                for (int64_t e = 0; e < E; e++) v += (y1[e] - mu) * (y1[e] - mu);
                v /= (double)E;
                TU_CHECK(fabs(mu) < 1e-5 && fabs(v - 1) < 1e-3, "normalised row: %g %g", mu, v);
            }
            free(y0), free(y1), free(r), free(b), free(w), free(lb), free(am0), free(am1);
        }
    }
}

static void test_gelu(const attn__ew_kernel *fast) {
    /* a dense sweep, and the kernels against each other on the same values plus a bias */
    const int64_t n = 2400001; /* [-12, 12] step 1e-5 */
    float *x = malloc(sizeof(float) * (size_t)n), *y0 = malloc(sizeof(float) * (size_t)n);
    float *y1 = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-12.0 + 1e-5 * (double)i);
    x[0] = -100.0f, x[1] = 100.0f, x[2] = -0.0f, x[3] = 0.0f, x[4] = 1e-30f;
    memcpy(y0, x, sizeof(float) * (size_t)n);
    memcpy(y1, x, sizeof(float) * (size_t)n);
    attn__ew_kernel_ref()->bias_gelu(y0, n, NULL, 1, n);
    if (fast) fast->bias_gelu(y1, n, NULL, 1, n);
    double worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double xd = x[i], ex = 0.5 * xd * (1.0 + erf(xd * 0.70710678118654752440));
        double err = fabs((double)y0[i] - ex);
        double tol = 1e-6 * fmin(fabs(xd), 1.0) + 0x1p-24 * fabs(xd);
        if (!(err <= tol)) bad++;
        if (err > worst) worst = err;
    }
    printf("gelu: max abs error %.3g vs erf in double over [-12, 12]\n", worst);
    TU_CHECK(!bad, "gelu: %d values outside the bound", bad);
    TU_CHECK(y0[2] == 0 && y0[1] == 100.0f && y0[0] == 0, "gelu edges");
    if (fast)
        TU_CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)n), "gelu: AVX-512 differs from C");
    /* with a bias and rows of odd length: still bit-identical */
    const int64_t M = 5, N = 37, ld = 40;
    float *a = malloc(sizeof(float) * (size_t)(M * ld));
    float *c = malloc(sizeof(float) * (size_t)(M * ld));
    float b[37];
    tu_fill(a, (size_t)(M * ld), 3, -6, 6);
    tu_fill(b, (size_t)N, 4, -1, 1);
    memcpy(c, a, sizeof(float) * (size_t)(M * ld));
    attn__ew_kernel_ref()->bias_gelu(a, ld, b, M, N);
    if (fast) {
        fast->bias_gelu(c, ld, b, M, N);
        TU_CHECK(!memcmp(a, c, sizeof(float) * (size_t)(M * ld)), "bias_gelu differs");
    }
    TU_CHECK(a[N] == c[N], "padding");
    TU_CHECK(a[0] == attn__gelu_as(c[0] + b[0]) || fast, "bias added first");
    free(x), free(y0), free(y1), free(a), free(c);
}

/* The threaded drivers: same bits for 1 and 3 threads. */
static void test_threads(void) {
    attn_ctx *c[2] = {NULL, NULL};
    for (int t = 0; t < 2; t++) {
        attn_ctx_params p;
        memset(&p, 0, sizeof p);
        p.threads = t ? 3 : 1;
        if (attn_ctx_create(&p, &c[t]) != ATTN_OK) return;
    }
    const int64_t M = 97, E = 130;
    float *y[2], *g[2], b[130], w[130], lb[130], *r = malloc(sizeof(float) * (size_t)(M * E));
    tu_fill(r, (size_t)(M * E), 1, -1, 1);
    tu_fill(b, (size_t)E, 2, -1, 1);
    tu_fill(w, (size_t)E, 3, -1, 1);
    tu_fill(lb, (size_t)E, 4, -1, 1);
    for (int t = 0; t < 2; t++) {
        y[t] = malloc(sizeof(float) * (size_t)(M * E));
        g[t] = malloc(sizeof(float) * (size_t)(M * E));
        tu_fill(y[t], (size_t)(M * E), 5, -2, 2);
        tu_fill(g[t], (size_t)(M * E), 6, -4, 4);
        attn__add_ln(c[t], y[t], b, r, w, lb, 1e-12f, M, E, NULL);
        attn__bias_gelu(c[t], g[t], b, M, E);
    }
    TU_CHECK(!memcmp(y[0], y[1], sizeof(float) * (size_t)(M * E)), "add_ln: threads differ");
    TU_CHECK(!memcmp(g[0], g[1], sizeof(float) * (size_t)(M * E)), "bias_gelu: threads differ");
    for (int t = 0; t < 2; t++) free(y[t]), free(g[t]), attn_ctx_free(c[t]);
    free(r);
}

int main(void) {
    const attn__ew_kernel *fast =
        attn__isa_supported(ATTN__ISA_AVX512) ? attn__ew_kernel_avx512() : NULL;
    if (!fast) printf("ew: no AVX-512 here: plain C kernels only\n");
    test_add_ln(fast ? fast : attn__ew_kernel_ref());
    test_gelu(fast);
    test_threads();
    return tu_finish("test_ew");
}
