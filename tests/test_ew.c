/* Row-wise kernels of src/kernels/ew.h (residual add + layer norm, bias + GELU): the plain C
 * layer norm against one in double, the AVX2 and AVX-512 versions against the plain C ones on
 * shapes that are not multiples of 16, the GELU against the exact erf GELU over a dense sweep,
 * and the threaded drivers across thread counts and instruction sets.
 *
 * Tolerances.
 *  - add_ln: the plain C version against the layer norm in double, on uniform rows, N(0, 1)
 *    rows and rows 100 + N(0, 1) (a large common offset: the mean correction of ew.h), with
 *    lengths that are not multiples of 16 or 64: |err| <= 3 ulp of the output scale
 *    (|xhat| + 1) |w| + |lb| (measured: at most 1.5; without the mean correction of ew.h the
 *    offset rows are off by ~100 ulp, without the bias or residual by far more).  The AVX2 and
 *    AVX-512 versions perform the same float operations in the same order: bit-identical to
 *    it, checked with memcmp, also on rows with a NaN, an infinity or huge values (normalised
 *    in double).
 *  - bias_gelu (plain C, AVX2, AVX-512): the same float operations in the same order:
 *    bit-identical, checked on a dense sweep, special values and random bit patterns (NaNs,
 *    infinities, subnormals, huge values).
 *  - GELU vs x Phi(x) in double: Phi(-|x|) = P(|x|)^16 with P a minimax fit (ew.h), where
 *    rounding P and the squarings amplify 16-fold; measured over [-12, 12] in steps of 1e-5:
 *    at most 1.95e-6 relative where |gelu| > 1e-3, 2.4e-7 absolute (2.1e-6 and 2.4e-7 on
 *    every 4th float).  Below |gelu| = 1e-5 (x < -4.6) the relative error grows (below 1%
 *    down to x = -7, then 0 is returned: |gelu| < 1e-11).  The check:
 *    |err| <= 2.5e-6 max(|gelu|, 1e-5).
 *  - the backwards (attn__layer_norm_bwd, attn__act_bwd over the context's threads) against
 *    the double references, on every instruction set the context can be given: layer norm dx
 *    within 2e-6 of max|dx| (measured about 3e-7: float sums of E products), dw and db within
 *    1e-6 relative to their scale (double sums as the reference; the float row statistics
 *    differ in the last bits), with weight and without, dx aliasing dy; GELU' within 1e-6
 *    absolute of dy's scale (Phi from the forward's polynomial, phi from exp2), ReLU exact; a
 *    NaN in x or dy gives a NaN; 1 and 3 threads give the same bits.
 *  - rms_norm (RMSNorm rows, ew.h): the plain C version against the formula in double on N(0, 1)
 *    rows, rows of 1e4 and of 1e-4 (lengths 1 to 1000, not all multiples of 16): within 4 ulp
 *    of w x r (float lane sums of rounded squares, whose error grows with E / 16, then four
 *    roundings: measured at most 2.2, at E = 1000); the vector
 *    versions bit-identical to it (memcmp), also in place, without a weight, and on rows with
 *    a NaN, an infinity or squares that overflow.
 *  - attn__add_f32 and the residual epilogue attn__res_epi: bit-identical to the plain loop
 *    (memcmp), in place on either operand and apart, across chunk edges, 1 and 3 threads.
 *  - colsum (bias-gradient column sums, ew.h): the plain C version within (M + 1) 2^-24 of the
 *    sum of |y| from the double sum; the vector versions bit-identical to it (memcmp) for
 *    widths around the 16-lane and 256-column chunks, a row stride wider than the width, and
 *    a running sum s that does not start at zero; a NaN row makes its columns NaN.
 *  - relu (ew.h): the vector versions bit-identical to the plain C one, NaN and -0 to +0;
 *  - glu (ew.h: SiLU and tanh-GELU times the up projection): the plain C definition against
 *    the formulas in double, the vector versions its bits. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/ew.h"
#include "../src/kernels/kernels.h"

/* add_ln on a copy of y0: y, amax */
static void run_ln(const attn__ew_kernel *k, const float *y0, float *y, int64_t M, int64_t E,
                   int64_t ld, const float *b, const float *r, const float *w, const float *lb,
                   float eps, float *am) {
    memcpy(y, y0, sizeof(float) * (size_t)(M * ld));
    k->add_ln(y, ld, b, r, ld, w, lb, eps, M, E, am);
}

/* max over the rows of y [M, E] of |y - layer norm in double| in ulps of the output scale
 * (|xhat| + 1) |w| + |lb| (t = (y0 + b) + r as the kernel forms it; the 1 for the error of
 * the float mean, about an ulp of the spread, which outputs near 0 see in full) */
static double ln_err_ulps(const float *y, const float *y0, int64_t M, int64_t E, int64_t ld,
                          const float *b, const float *r, const float *w, const float *lb,
                          float eps) {
    double worst = 0;
    double *t = malloc(sizeof(double) * (size_t)E);
    for (int64_t m = 0; m < M; m++) {
        double mu = 0, var = 0;
        for (int64_t e = 0; e < E; e++) {
            float v = y0[m * ld + e];
            if (b) v = v + b[e];
            if (r) v = v + r[m * ld + e];
            t[e] = v, mu += v;
        }
        mu /= (double)E;
        for (int64_t e = 0; e < E; e++) var += (t[e] - mu) * (t[e] - mu);
        const double rs = 1 / sqrt(var / (double)E + eps);
        for (int64_t e = 0; e < E; e++) {
            const double xw = (t[e] - mu) * rs * (w ? w[e] : 1), want = xw + (lb ? lb[e] : 0);
            const double u =
                0x1p-23 * (fabs(xw) + fabs(w ? w[e] : 1) + fabs(lb ? lb[e] : 0)) + 1e-30;
            worst = fmax(worst, fabs(y[m * ld + e] - want) / u);
        }
    }
    free(t);
    return worst;
}

static double gauss(uint64_t *st) {
    const double u1 = ((double)(tu_rand(st) >> 11) + 1) * 0x1p-53;
    const double u2 = (double)(tu_rand(st) >> 11) * 0x1p-53;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* The plain C version against the layer norm in double; every vector version bit for bit
 * against the plain C one (outputs, untouched padding, row maxima). */
static void test_add_ln(const attn__ew_kernel *const *fast, int nf) {
    static const int64_t shapes[][2] = {{1, 1},  {3, 7},   {5, 16},  {4, 17},  {9, 100},
                                        {2, 384}, {64, 384}, {7, 385}, {3, 447}, {3, 1030}};
    const char *dname[3] = {"uniform [-3, 5]", "N(0, 1)", "100 + N(0, 1)"};
    double worst[3] = {0, 0, 0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], E = shapes[s][1], ld = E + 3;
        const size_t n = (size_t)(M * ld);
        float *y0 = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n);
        float *y2 = malloc(sizeof(float) * n), *r = malloc(sizeof(float) * n);
        float *b = malloc(sizeof(float) * (size_t)E), *w = malloc(sizeof(float) * (size_t)E);
        float *lb = malloc(sizeof(float) * (size_t)E);
        float *am1 = malloc(sizeof(float) * (size_t)M), *am2 = malloc(sizeof(float) * (size_t)M);
        tu_fill(r, n, 6 + s, -2, 2);
        tu_fill(b, (size_t)E, 7 + s, -1, 1);
        tu_fill(w, (size_t)E, 8 + s, 0.5f, 1.5f);
        tu_fill(lb, (size_t)E, 9 + s, -1, 1);
        for (int dist = 0; dist < 3; dist++) {
            uint64_t st = 100 * s + (uint64_t)dist;
            tu_fill(y0, n, 5 + s, -3, 5);
            if (dist)
                for (size_t i = 0; i < n; i++) y0[i] = (float)((dist == 2 ? 100 : 0) + gauss(&st));
            for (int64_t m = 0; m < M; m++) y0[m * ld + E] = 777.0f; /* padding: untouched */
            for (int var = 0; var < 4; var++) { /* with / without bias+residual, weight+bias */
                const float *bb = var & 1 ? b : NULL, *rr = var & 1 ? r : NULL;
                const float *ww = var & 2 ? w : NULL, *ll = var & 2 ? lb : NULL;
                const float eps = var == 3 ? 1e-12f : 1e-5f;
                run_ln(attn__ew_kernel_ref(), y0, y1, M, E, ld, bb, rr, ww, ll, eps, am1);
                const double err = ln_err_ulps(y1, y0, M, E, ld, bb, rr, ww, ll, eps);
                worst[dist] = fmax(worst[dist], err);
                TU_CHECK(err <= 3, "add_ln M=%lld E=%lld %s variant %d: error %.3g ulp",
                         (long long)M, (long long)E, dname[dist], var, err);
                int bad = 0;
                for (int64_t m = 0; m < M; m++) {
                    bad += y1[m * ld + E] != 777.0f;
                    float mx = 0;
                    for (int64_t e = 0; e < E; e++) mx = fmaxf(mx, fabsf(y1[m * ld + e]));
                    bad += am1[m] != mx; /* exactly max |y| of each row */
                }
                TU_CHECK(!bad, "add_ln M=%lld E=%lld variant %d: padding or row max wrong",
                         (long long)M, (long long)E, var);
                for (int f = 0; f < nf; f++) {
                    run_ln(fast[f], y0, y2, M, E, ld, bb, rr, ww, ll, eps, am2);
                    TU_CHECK(!memcmp(y1, y2, sizeof(float) * n) &&
                                 !memcmp(am1, am2, sizeof(float) * (size_t)M),
                             "add_ln M=%lld E=%lld %s variant %d: vector kernel %d differs",
                             (long long)M, (long long)E, dname[dist], var, f);
                }
            }
        }
        free(y0), free(y1), free(y2), free(r), free(b), free(w), free(lb), free(am1), free(am2);
    }
    printf("add_ln: vs the layer norm in double: max error %.2f / %.2f / %.2f ulp of "
           "(|xhat| + 1) |w| + |lb| (rows %s / %s / %s)\n", worst[0], worst[1], worst[2], dname[0],
           dname[1], dname[2]);

    /* special rows: a NaN, an infinity, values whose float statistics overflow (normalised in
     * double, as attn__layer_norm_ref), a constant row; the other rows are unaffected */
    const int64_t M = 6, E = 53;
    float y[6 * 53], yv[6 * 53], w[53], lb[53], am[6], amv[6], ref[53];
    tu_fill(y, (size_t)(M * E), 11, -2, 2);
    tu_fill(w, (size_t)E, 12, 0.5f, 1.5f);
    tu_fill(lb, (size_t)E, 13, -1, 1);
    y[0 * E + 17] = NAN;
    y[1 * E + 52] = -INFINITY;
    for (int64_t e = 0; e < E; e++) y[2 * E + e] = 1e25f * y[2 * E + e]; /* d^2 overflows */
    for (int64_t e = 0; e < E; e++) y[3 * E + e] = 3e37f + 1e36f * y[3 * E + e]; /* the sum */
    for (int64_t e = 0; e < E; e++) y[4 * E + e] = 0.1f;
    memcpy(yv, y, sizeof y);
    attn__ew_kernel_ref()->add_ln(y, E, NULL, NULL, 0, w, lb, 1e-5f, M, E, am);
    int nan0 = 1, nan1 = 1;
    for (int64_t e = 0; e < E; e++) nan0 &= isnan(y[e]) != 0, nan1 &= isnan(y[E + e]) != 0;
    TU_CHECK(nan0 && nan1 && isnan(am[0]) && isnan(am[1]), "add_ln: NaN or inf row not NaN");
    for (int64_t m = 2; m < 4; m++) {
        memcpy(ref, yv + m * E, sizeof ref);
        attn__layer_norm_ref(ref, E, w, lb, 1e-5f, ref, E, 1, E);
        int fin = 1;
        for (int64_t e = 0; e < E; e++) fin &= isfinite(y[m * E + e]) != 0;
        TU_CHECK(fin && !memcmp(ref, y + m * E, sizeof ref), "add_ln: huge row %lld",
                 (long long)m);
    }
    int cst = 1;
    for (int64_t e = 0; e < E; e++) cst &= y[4 * E + e] == lb[e];
    TU_CHECK(cst && am[4] > 0, "add_ln: a constant row gives lb");
    for (int f = 0; f < nf; f++) {
        float yf[6 * 53];
        memcpy(yf, yv, sizeof yf);
        fast[f]->add_ln(yf, E, NULL, NULL, 0, w, lb, 1e-5f, M, E, amv);
        int same = isnan(amv[0]) && isnan(amv[1]);
        for (int64_t i = 0; i < M * E; i++) same &= isnan(y[i]) ? isnan(yf[i]) != 0 : y[i] == yf[i];
        for (int64_t m = 2; m < M; m++) same &= am[m] == amv[m];
        TU_CHECK(same, "add_ln special rows: vector kernel %d differs", f);
    }
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Each of fast[0..nf) against the plain C kernel, bit for bit, on x [n] (no bias). */
static void gelu_same_bits(const attn__ew_kernel *const *fast, int nf, const float *x,
                           int64_t n, const char *what) {
    float *y0 = malloc(sizeof(float) * (size_t)n), *y1 = malloc(sizeof(float) * (size_t)n);
    memcpy(y0, x, sizeof(float) * (size_t)n);
    attn__ew_kernel_ref()->bias_gelu(y0, n, NULL, 1, n);
    for (int f = 0; f < nf; f++) {
        memcpy(y1, x, sizeof(float) * (size_t)n);
        fast[f]->bias_gelu(y1, n, NULL, 1, n);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += memcmp(&y0[i], &y1[i], sizeof(float)) != 0;
        TU_CHECK(!bad, "gelu %s: vector kernel %d differs from C in %lld places", what, f,
                 (long long)bad);
    }
    free(y0), free(y1);
}

static void test_gelu(const attn__ew_kernel *const *fast, int nf) {
    /* a dense sweep against x Phi(x) in double */
    const int64_t n = 2400001; /* [-12, 12] step 1e-5 */
    float *x = malloc(sizeof(float) * (size_t)n), *y0 = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-12.0 + 1e-5 * (double)i);
    memcpy(y0, x, sizeof(float) * (size_t)n);
    attn__ew_kernel_ref()->bias_gelu(y0, n, NULL, 1, n);
    double worst = 0, worst_rel = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double xd = x[i], ex = 0.5 * xd * erfc(-xd * 0.70710678118654752440);
        double err = fabs((double)y0[i] - ex);
        if (!(err <= 2.5e-6 * fmax(fabs(ex), 1e-5))) bad++;
        if (err > worst) worst = err;
        if (fabs(ex) > 1e-3 && err / fabs(ex) > worst_rel) worst_rel = err / fabs(ex);
    }
    printf("gelu: vs x Phi(x) in double over [-12, 12]: max abs error %.3g, max relative error "
           "%.3g where |gelu| > 1e-3\n", worst, worst_rel);
    TU_CHECK(!bad, "gelu: %d values outside the bound", bad);
    gelu_same_bits(fast, nf, x, n, "sweep");

    /* special values: NaN stays NaN, +inf, signed zeros, +0 from -7 down (also -inf) */
    static const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 7.0f, -7.0f,
                               7.0000005f, -7.0000005f, -6.9999995f, 100.0f, -100.0f, 1e30f,
                               -1e30f, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN, 1e-40f, -1e-40f,
                               1e-45f, -1e-45f, 1e-30f, -1e-30f};
    const int ns = (int)(sizeof sp / sizeof sp[0]);
    float g[sizeof sp / sizeof sp[0]];
    for (int i = 0; i < ns; i++) g[i] = attn__gelu_as(sp[i]);
    TU_CHECK(isnan(g[0]) && isnan(g[1]), "gelu(NaN)");
    TU_CHECK(g[2] == INFINITY && g[3] == 0 && !signbit(g[3]), "gelu(+-inf) = %g %g", g[2], g[3]);
    TU_CHECK(g[4] == 0 && !signbit(g[4]) && g[5] == 0 && signbit(g[5]), "gelu(+-0)");
    TU_CHECK(g[6] == 7.0f && g[7] < 0 && g[7] > -1e-11f, "gelu(+-7) = %g %g", g[6], g[7]);
    TU_CHECK(g[8] == sp[8] && g[9] == 0 && !signbit(g[9]) && g[10] < 0, "gelu around -7");
    TU_CHECK(g[11] == 100.0f && g[12] == 0 && g[13] == 1e30f && g[14] == 0, "gelu(+-big)");
    TU_CHECK(g[15] == FLT_MAX && g[16] == 0, "gelu(+-FLT_MAX)");
    for (int i = 17; i < ns; i++) /* tiny: x / 2 to a float rounding or two */
        TU_CHECK(fabs((double)g[i] - 0.5 * sp[i]) <= 1e-7 * fabs(sp[i]) + 0x1p-149,
                 "gelu(%g) = %g", sp[i], g[i]);
    gelu_same_bits(fast, nf, sp, ns, "special values");

    /* random bit patterns: every exponent, NaN payloads, subnormals */
    const int64_t nr = 1 << 20;
    float *xr = malloc(sizeof(float) * (size_t)nr);
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < nr; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        xr[i] = from_bits((uint32_t)(st >> 32));
    }
    gelu_same_bits(fast, nf, xr, nr, "random bits");
    for (int64_t i = 0; i < nr; i++) {
        float v = attn__gelu_as(xr[i]);
        if (isnan(xr[i]) != isnan(v) || (xr[i] < -7 && v != 0) || (xr[i] > 7 && v != xr[i])) {
            TU_CHECK(0, "gelu(%a) = %a", xr[i], v);
            break;
        }
    }

    /* with a bias and rows of odd length (vector tails): still bit-identical */
    const int64_t M = 5, N = 37, ld = 40;
    float *a = malloc(sizeof(float) * (size_t)(M * ld));
    float *c = malloc(sizeof(float) * (size_t)(M * ld));
    float b[37];
    tu_fill(a, (size_t)(M * ld), 3, -6, 6);
    tu_fill(b, (size_t)N, 4, -1, 1);
    memcpy(c, a, sizeof(float) * (size_t)(M * ld));
    attn__ew_kernel_ref()->bias_gelu(a, ld, b, M, N);
    TU_CHECK(a[N] == c[N], "padding");
    TU_CHECK(a[0] == attn__gelu_as(c[0] + b[0]), "bias added first");
    for (int f = 0; f < nf; f++) {
        float *d = malloc(sizeof(float) * (size_t)(M * ld));
        memcpy(d, c, sizeof(float) * (size_t)(M * ld));
        fast[f]->bias_gelu(d, ld, b, M, N);
        TU_CHECK(!memcmp(a, d, sizeof(float) * (size_t)(M * ld)), "bias_gelu %d differs", f);
        free(d);
    }
    free(x), free(y0), free(xr), free(a), free(c);
}

/* The threaded drivers: same bits for 1 and 3 threads, and for each instruction set. */
/* Contexts on 1 and 3 threads; 0 (none left open) when one cannot be made. */
static int ctx_1_3(attn_ctx *c[2]) {
    for (int t = 0; t < 2; t++) {
        attn_ctx_params p;
        memset(&p, 0, sizeof p);
        p.threads = t ? 3 : 1;
        if (attn_ctx_create(&p, &c[t]) != ATTN_OK) {
            if (t) attn_ctx_free(c[0]);
            return 0;
        }
    }
    return 1;
}

static void test_threads(void) {
    attn_ctx *c[2] = {NULL, NULL};
    if (!ctx_1_3(c)) return;
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
    /* every instruction set the context can be given: the same bits */
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_ew: add_ln and bias_gelu threads")) continue;
        TU_CHECK(attn__isa_set(c[1], isa), "isa_set %s", attn__isa_name(isa));
        tu_fill(g[1], (size_t)(M * E), 5, -2, 2);
        attn__add_ln(c[1], g[1], b, r, w, lb, 1e-12f, M, E, NULL);
        TU_CHECK(!memcmp(y[0], g[1], sizeof(float) * (size_t)(M * E)), "add_ln: %s differs",
                 attn__isa_name(isa));
        tu_fill(y[1], (size_t)(M * E), 6, -4, 4);
        attn__bias_gelu(c[1], y[1], b, M, E);
        TU_CHECK(!memcmp(g[0], y[1], sizeof(float) * (size_t)(M * E)), "bias_gelu: %s differs",
                 attn__isa_name(isa));
    }
    for (int t = 0; t < 2; t++) free(y[t]), free(g[t]), attn_ctx_free(c[t]);
    free(r);
}

/* The larger of e and |d|, NaN when either is (fmax would drop a NaN). */
static double worse(double e, double d) {
    d = fabs(d);
    return (isnan(e) || isnan(d)) ? NAN : d > e ? d : e;
}

/* Backward kernels vs the double references (see the header). */
static void test_backward(void) {
    attn_ctx *c[2] = {NULL, NULL};
    if (!ctx_1_3(c)) return;
    enum { M = 67, E = 203 };
    static float x[M * E], dy[M * E], dx0[M * E], dx[2][M * E], w[E], dw0[E], db0[E], dw[2][E],
        db[2][E];
    tu_fill(x, M * E, 11, -3, 3);
    for (int i = 0; i < M * E; i++) x[i] += (float)(i / E) * 0.25f; /* rows with offsets */
    tu_fill(dy, M * E, 12, -1, 1);
    tu_fill(w, E, 13, 0.5f, 1.5f);
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_ew: backward kernels")) continue;
        TU_CHECK(attn__isa_set(c[0], isa) && attn__isa_set(c[1], isa), "isa_set %s",
                 attn__isa_name(isa));
        for (int ww = 0; ww < 2; ww++) {
            const float *wp = ww ? w : NULL;
            memset(dw0, 0, sizeof dw0), memset(db0, 0, sizeof db0);
            attn__layer_norm_bwd_ref(x, E, wp, 1e-5f, dy, E, dx0, E, dw0, db0, M, E);
            double mx = 0, mw = 0, mb = 0;
            for (int i = 0; i < M * E; i++) mx = fmax(mx, fabs(dx0[i]));
            for (int e = 0; e < E; e++) mw = fmax(mw, fabs(dw0[e])), mb = fmax(mb, fabs(db0[e]));
            for (int t = 0; t < 2; t++) {
                memset(dw[t], 0, sizeof dw[t]), memset(db[t], 0, sizeof db[t]);
                memcpy(dx[t], dy, sizeof dy); /* dx aliases dy */
                TU_STATUS(attn__layer_norm_bwd(c[t], x, E, wp, 1e-5f, dx[t], E, dx[t], E, dw[t],
                                               db[t], M, E),
                          ATTN_OK, c[t]);
            }
            double ex = 0, ew = 0, eb = 0;
            for (int i = 0; i < M * E; i++) ex = worse(ex, dx[0][i] - dx0[i]);
            for (int e = 0; e < E; e++)
                ew = worse(ew, dw[0][e] - dw0[e]), eb = worse(eb, db[0][e] - db0[e]);
            TU_CHECK(ex <= 2e-6 * mx && ew <= 1e-6 * mw && eb <= 1e-6 * mb,
                     "layer_norm_bwd %s, weight %d: errors dx %.3g dw %.3g db %.3g (scales %.3g "
                     "%.3g %.3g)", attn__isa_name(isa), ww, ex, ew, eb, mx, mw, mb);
            TU_CHECK(!memcmp(dx[0], dx[1], sizeof dx[0]) && !memcmp(dw[0], dw[1], sizeof dw[0]) &&
                         !memcmp(db[0], db[1], sizeof db[0]),
                     "layer_norm_bwd %s: 3 threads differ from 1", attn__isa_name(isa));
        }
        const attn_activation acts[2] = {ATTN_ACT_GELU, ATTN_ACT_RELU};
        static float xa[M * E];
        for (int i = 0; i < M * E; i++) xa[i] = -9.0f + 18.0f * (float)i / (float)(M * E);
        xa[5] = 0.0f, xa[6] = -0.0f;
        for (int a = 0; a < 2; a++) {
            attn__act_bwd_ref(acts[a], xa, dy, dx0, M * E);
            for (int t = 0; t < 2; t++) attn__act_bwd(c[t], acts[a], xa, dy, dx[t], M * E);
            double e = 0;
            for (int i = 0; i < M * E; i++) e = worse(e, dx[0][i] - dx0[i]);
            TU_CHECK(e <= (a ? 0.0 : 1e-6), "act_bwd %s %d: max error %.3g",
                     attn__isa_name(isa), a, e);
            TU_CHECK(!memcmp(dx[0], dx[1], sizeof dx[0]), "act_bwd %s %d: threads differ",
                     attn__isa_name(isa), a);
        }
        float xn[3] = {NAN, 1.0f, 2.0f}, dn[3] = {1.0f, NAN, 1.0f}, o[3];
        attn__act_bwd(c[0], ATTN_ACT_GELU, xn, dn, o, 3);
        TU_CHECK(isnan(o[0]) && isnan(o[1]) && !isnan(o[2]), "act_bwd %s: NaN handling",
                 attn__isa_name(isa));
        float xl[2 * 16], dl[2 * 16], ol[2 * 16];
        tu_fill(xl, 32, 14, -1, 1);
        tu_fill(dl, 32, 15, -1, 1);
        xl[3] = NAN;
        TU_STATUS(attn__layer_norm_bwd(c[0], xl, 16, NULL, 1e-5f, dl, 16, ol, 16, NULL, NULL, 2,
                                       16),
                  ATTN_OK, c[0]);
        TU_CHECK(isnan(ol[0]) && !isnan(ol[16]), "layer_norm_bwd %s: a NaN row is NaN only",
                 attn__isa_name(isa));
    }
    for (int t = 0; t < 2; t++) attn_ctx_free(c[t]);
}

/* bias_res: y = (y + b) + r against the plain loop, every version the same bits; with and
 * without b and r, ragged widths, strides, NaN and infinities passing through. */
static void test_bias_res(const attn__ew_kernel *const *fast, int nf) {
    const int64_t M = 5, ldy = 77, ldr = 71;
    float *y0 = malloc(sizeof(float) * M * ldy), *y1 = malloc(sizeof(float) * M * ldy),
          *b = malloc(sizeof(float) * ldy), *r = malloc(sizeof(float) * M * ldr);
    tu_fill(b, ldy, 61, -2, 2);
    tu_fill(r, M * ldr, 62, -2, 2);
    r[3] = NAN, r[ldr + 1] = INFINITY, b[2] = -INFINITY;
    const attn__ew_kernel *ref = attn__ew_kernel_ref();
    for (int64_t N = 1; N <= 70; N += (N < 20 ? 1 : 7))
        for (int mode = 0; mode < 4; mode++) {
            const float *bb = mode & 1 ? b : NULL, *rr = mode & 2 ? r : NULL;
            tu_fill(y0, M * ldy, 63 + N, -3, 3);
            float *want = malloc(sizeof(float) * M * ldy);
            memcpy(want, y0, sizeof(float) * M * ldy);
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    float t = want[m * ldy + n];
                    if (bb) t = t + bb[n];
                    if (rr) t = t + rr[m * ldr + n];
                    want[m * ldy + n] = t;
                }
            memcpy(y1, y0, sizeof(float) * M * ldy);
            ref->bias_res(y1, ldy, bb, rr, ldr, M, N);
            TU_CHECK(memcmp(y1, want, sizeof(float) * M * ldy) == 0,
                     "bias_res ref N=%lld mode %d", (long long)N, mode);
            for (int f = 0; f < nf; f++) {
                memcpy(y1, y0, sizeof(float) * M * ldy);
                fast[f]->bias_res(y1, ldy, bb, rr, ldr, M, N);
                TU_CHECK(memcmp(y1, want, sizeof(float) * M * ldy) == 0,
                         "bias_res vector version %d N=%lld mode %d: other bits (or it wrote "
                         "past the row)", f, (long long)N, mode);
            }
            free(want);
        }
    free(y0), free(y1), free(b), free(r);
}

static void test_rms(const attn__ew_kernel *const *fast, int nf) {
    static const int64_t Es[] = {1, 7, 16, 33, 64, 576, 1000};
    static const float scales[] = {1.0f, 1e4f, 1e-4f};
    const int64_t M = 5;
    double worst = 0;
    for (size_t ie = 0; ie < sizeof Es / sizeof Es[0]; ie++)
        for (size_t is = 0; is < 3; is++) {
            const int64_t E = Es[ie];
            float *x = malloc(sizeof(float) * (size_t)(M * E)), *w = malloc(sizeof(float) * E);
            float *y0 = malloc(sizeof(float) * (size_t)(M * E)),
                  *y1 = malloc(sizeof(float) * (size_t)(M * E));
            tu_fill(x, (size_t)(M * E), (uint64_t)(E * 10 + is), -1.7f, 1.7f);
            for (int64_t i = 0; i < M * E; i++) x[i] *= scales[is];
            tu_fill(w, (size_t)E, (uint64_t)E, 0.5f, 1.5f);
            if (ie == 4 && is == 0) { /* special rows: NaN, infinity, squares that overflow */
                x[1 * E + 3] = NAN;
                x[2 * E + 5] = INFINITY;
                for (int64_t e = 0; e < E; e++) x[3 * E + e] = 3e19f;
            }
            for (int wt = 0; wt < 2; wt++) {
                const float *wp = wt ? w : NULL;
                attn__rms_norm_c(x, E, wp, 1e-5f, y0, E, M, E);
                for (int64_t m = 0; m < M && !(ie == 4 && is == 0); m++) {
                    double ss = 0;
                    for (int64_t e = 0; e < E; e++) ss += (double)x[m * E + e] * x[m * E + e];
                    const double r = 1.0 / sqrt(ss / (double)E + 1e-5);
                    for (int64_t e = 0; e < E; e++) {
                        const double want = (wp ? wp[e] : 1.0) * (x[m * E + e] * r);
                        const double ulp = ldexp(1.0, ilogb(fabs(want) + 1e-300) - 23);
                        const double err = fabs(y0[m * E + e] - want) / ulp;
                        if (err > worst) worst = err;
                    }
                }
                for (int f = 0; f < nf; f++) {
                    fast[f]->rms_norm ? fast[f]->rms_norm(x, E, wp, 1e-5f, y1, E, M, E)
                                      : attn__rms_norm_c(x, E, wp, 1e-5f, y1, E, M, E);
                    TU_CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)(M * E)),
                             "rms_norm E=%lld: vector kernel %d differs from C", (long long)E, f);
                    memcpy(y1, x, sizeof(float) * (size_t)(M * E)); /* in place */
                    if (fast[f]->rms_norm) fast[f]->rms_norm(y1, E, wp, 1e-5f, y1, E, M, E);
                    else attn__rms_norm_c(y1, E, wp, 1e-5f, y1, E, M, E);
                    TU_CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)(M * E)),
                             "rms_norm E=%lld in place: kernel %d differs", (long long)E, f);
                }
                if (ie == 4 && is == 0) {
                    /* NaN: the row NaN; infinity: r = 0, so zeros and NaN (inf * 0) at the
                     * infinity; overflowing squares: r = 0, zeros */
                    TU_CHECK(isnan(y0[E]) && isnan(y0[E + 3]) && y0[2 * E] == 0.0f &&
                                 isnan(y0[2 * E + 5]) && y0[3 * E] == 0.0f && !isnan(y0[4 * E]),
                             "rms_norm special rows");
                }
            }
            free(x), free(w), free(y0), free(y1);
        }
    printf("rms_norm: vs double, max error %.2f ulp\n", worst);
    TU_CHECK(worst <= 4.0, "rms_norm: %.2f ulp from the double formula", worst);
}

static void test_colsum(const attn__ew_kernel *const *fast, int nf) {
    static const int64_t Ns[] = {1, 15, 16, 17, 255, 256, 257, 600};
    static const int64_t Ms[] = {1, 3, 100};
    double worst = 0;
    for (size_t in = 0; in < sizeof Ns / sizeof Ns[0]; in++)
        for (size_t im = 0; im < sizeof Ms / sizeof Ms[0]; im++) {
            const int64_t N = Ns[in], M = Ms[im], ld = N + 5;
            float *y = malloc(sizeof(float) * (size_t)(M * ld));
            float *s0 = malloc(sizeof(float) * (size_t)N), *s1 = malloc(sizeof(float) * (size_t)N);
            float *init = malloc(sizeof(float) * (size_t)N);
            tu_fill(y, (size_t)(M * ld), (uint64_t)(N * 31 + M), -2.0f, 2.0f);
            tu_fill(init, (size_t)N, (uint64_t)N, -1.0f, 1.0f);
            memcpy(s0, init, sizeof(float) * (size_t)N);
            attn__colsum_c(y, ld, M, N, s0);
            for (int64_t j = 0; j < N; j++) {
                double d = init[j], a = fabs((double)init[j]);
                for (int64_t m = 0; m < M; m++) d += y[m * ld + j], a += fabs((double)y[m * ld + j]);
                const double e = fabs((double)s0[j] - d) / (a * (double)(M + 1) * 0x1p-24);
                if (!(e <= 1.0)) worst = 2; /* NaN fails too */
                else if (e > worst) worst = e;
            }
            for (int f = 0; f < nf; f++) {
                if (!fast[f]->colsum) continue;
                memcpy(s1, init, sizeof(float) * (size_t)N);
                fast[f]->colsum(y, ld, M, N, s1);
                TU_CHECK(memcmp(s0, s1, sizeof(float) * (size_t)N) == 0,
                         "colsum N=%lld M=%lld: vector kernel %d differs from C", (long long)N,
                         (long long)M, f);
            }
            if (M == 3 && N == 257) { /* a NaN in row 1, column 200: that column only */
                y[1 * ld + 200] = NAN;
                for (int f = 0; f < nf; f++) {
                    if (!fast[f]->colsum) continue;
                    memcpy(s1, init, sizeof(float) * (size_t)N);
                    fast[f]->colsum(y, ld, M, N, s1);
                    TU_CHECK(isnan(s1[200]) && !isnan(s1[199]) && !isnan(s1[201]),
                             "colsum: a NaN stays in its column (kernel %d)", f);
                }
            }
            free(y), free(s0), free(s1), free(init);
        }
    printf("colsum: plain C vs double, worst %.3f of the bound\n", worst);
    TU_CHECK(worst <= 1.0, "colsum: %.3f of the (M + 1) 2^-24 sum|y| bound", worst);
}

/* relu: the vector versions give the plain C bits (memcmp) on lengths around 16, with NaN,
 * -0 and infinities among the values, in place too. */
static void test_relu(const attn__ew_kernel *const *fast, int nf) {
    static const int64_t Ns[] = {1, 15, 16, 17, 100};
    for (size_t in = 0; in < sizeof Ns / sizeof Ns[0]; in++) {
        const int64_t n = Ns[in];
        float *x = malloc(sizeof(float) * (size_t)n), *y0 = malloc(sizeof(float) * (size_t)n),
              *y1 = malloc(sizeof(float) * (size_t)n);
        tu_fill(x, (size_t)n, (uint64_t)n, -2.0f, 2.0f);
        if (n > 4) x[1] = NAN, x[2] = -0.0f, x[3] = INFINITY, x[4] = -INFINITY;
        attn__relu_c(x, y0, n);
        for (int f = 0; f < nf; f++) {
            if (!fast[f]->relu) continue;
            fast[f]->relu(x, y1, n);
            TU_CHECK(memcmp(y0, y1, sizeof(float) * (size_t)n) == 0,
                     "relu n=%lld: vector kernel %d differs from C", (long long)n, f);
            memcpy(y1, x, sizeof(float) * (size_t)n);
            fast[f]->relu(y1, y1, n);
            TU_CHECK(memcmp(y0, y1, sizeof(float) * (size_t)n) == 0,
                     "relu n=%lld in place: vector kernel %d differs from C", (long long)n, f);
        }
        /* relu_mask (y and the bits) and relu_bwd_mask against the plain C ones */
        const size_t nw = (size_t)(n + 15) / 16;
        uint16_t m0[8], m1[8];
        float *g = malloc(sizeof(float) * (size_t)n), *d0 = malloc(sizeof(float) * (size_t)n),
              *d1 = malloc(sizeof(float) * (size_t)n);
        tu_fill(g, (size_t)n, (uint64_t)n + 1, -1.0f, 1.0f);
        attn__relu_mask_c(x, y0, n, m0);
        attn__relu_bwd_mask_c(m0, g, d0, n);
        for (int64_t i = 0; i < n; i++)
            TU_CHECK(d0[i] == (x[i] > 0.0f ? g[i] : 0.0f) && !signbit(x[i] > 0.0f ? 0.0f : d0[i]),
                     "relu_bwd_mask C n=%lld: element %lld", (long long)n, (long long)i);
        for (int f = 0; f < nf; f++) {
            if (!fast[f]->relu_mask || !fast[f]->relu_bwd_mask) continue;
            memset(m1, 0xff, sizeof m1);
            fast[f]->relu_mask(x, y1, n, m1);
            TU_CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)n) && !memcmp(m0, m1, 2 * nw),
                     "relu_mask n=%lld: vector kernel %d differs from C", (long long)n, f);
            fast[f]->relu_bwd_mask(m0, g, d1, n);
            TU_CHECK(!memcmp(d0, d1, sizeof(float) * (size_t)n),
                     "relu_bwd_mask n=%lld: vector kernel %d differs from C", (long long)n, f);
        }
        free(g), free(d0), free(d1);
        if (n > 4)
            TU_CHECK(y0[1] == 0.0f && !signbit(y0[2]) && y0[3] == INFINITY && y0[4] == 0.0f,
                     "relu: NaN and -0 give +0, infinities as they are");
        free(x), free(y0), free(y1);
    }
}

/* The gated activations (attn__glu_c, ew.h): the plain C definition against the formulas in
 * double (SiLU x / (1 + e^-x); tanh-GELU in its sigmoid form x / (1 + e^-2u), which has no
 * cancellation) on a dense sweep of [-90, 90]: within 16 ulp where |result| >= 1e-3, 2e-5
 * relative down to 2^-100, 1e-35 absolute below (2^t is clamped at 2^126 there); the vector
 * versions give its bits
 * (memcmp) on the sweep, on lengths around 8 and 16, in place, and on special values. */
static void test_glu(const attn__ew_kernel *const *fast, int nf) {
    const int64_t n = 2400001; /* [-90, 90] step 7.5e-5 */
    float *x = malloc(sizeof(float) * (size_t)n), *u = malloc(sizeof(float) * (size_t)n),
          *y0 = malloc(sizeof(float) * (size_t)n), *y1 = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-90.0 + 7.5e-5 * (double)i), u[i] = 1.0f;
    for (int act = 0; act < 2; act++) {
        attn__glu_c(x, u, y0, n, act);
        double worst = 0, at = 0, tail = 0, rel = 0;
        for (int64_t i = 0; i < n; i++) {
            const double xd = x[i], ud = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
            const double ref = act ? xd / (1.0 + exp(-2.0 * ud)) : xd / (1.0 + exp(-xd));
            const double d = fabs((double)y0[i] - ref);
            if (fabs(ref) < 0x1p-100) { /* the far tail: 2^t clamped at 2^126 */
                if (d > tail || d != d) tail = d;
                continue;
            }
            if (fabs(ref) < 1e-3) { /* 2^t's argument rounded: |t| 2^-24 relative */
                const double r = d / fabs(ref);
                if (r > rel || r != r) rel = r;
                continue;
            }
            int ex;
            frexp(fabs(ref), &ex);
            const double e = d / ldexp(1.0, ex - 24);
            if (e > worst || e != e) worst = e, at = xd;
        }
        printf("glu %s: plain C vs double, worst %.2f ulp where |y| >= 1e-3 (at x = %.5g), "
               "%.2g relative below, %.2g absolute below 2^-100\n",
               act ? "tanh-GELU" : "SiLU", worst, at, rel, tail);
        TU_CHECK(worst <= 16.0, "glu act %d: %.2f ulp from the double formula at x = %g", act,
                 worst, at);
        TU_CHECK(rel <= 2e-5, "glu act %d: %.3g relative from the double formula", act, rel);
        TU_CHECK(tail <= 1e-35, "glu act %d: %.3g from the double formula in the far tail", act,
                 tail);
        for (int f = 0; f < nf; f++) {
            if (!fast[f]->glu) continue;
            fast[f]->glu(x, u, y1, n, act);
            TU_CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)n),
                     "glu act %d sweep: vector kernel %d differs from C", act, f);
        }
    }
    /* special values, random gates and products, lengths around the vector widths, in place */
    static const int64_t Ns[] = {1, 7, 8, 9, 15, 16, 17, 33, 100};
    for (size_t in = 0; in < sizeof Ns / sizeof Ns[0]; in++) {
        const int64_t m = Ns[in];
        tu_fill(x, (size_t)m, (uint64_t)m + 5, -12.0f, 12.0f);
        tu_fill(u, (size_t)m, (uint64_t)m + 6, -3.0f, 3.0f);
        if (m > 8)
            x[1] = NAN, x[2] = -0.0f, x[3] = INFINITY, x[4] = -INFINITY, x[5] = 3e38f,
            x[6] = -3e38f, x[7] = 1e-40f, x[8] = -200.0f;
        for (int act = 0; act < 2; act++) {
            attn__glu_c(x, u, y0, m, act);
            for (int f = 0; f < nf; f++) {
                if (!fast[f]->glu) continue;
                fast[f]->glu(x, u, y1, m, act);
                TU_CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)m),
                         "glu act %d n=%lld: vector kernel %d differs from C", act, (long long)m, f);
                memcpy(y1, x, sizeof(float) * (size_t)m);
                fast[f]->glu(y1, u, y1, m, act);
                TU_CHECK(!memcmp(y0, y1, sizeof(float) * (size_t)m),
                         "glu act %d n=%lld in place: vector kernel %d differs from C", act,
                         (long long)m, f);
            }
            if (m > 8) {
                const float g1 = act ? attn__gelu_tanh_as(x[1]) : attn__silu_as(x[1]);
                const float g2 = act ? attn__gelu_tanh_as(-0.0f) : attn__silu_as(-0.0f);
                const float g3 = act ? attn__gelu_tanh_as(INFINITY) : attn__silu_as(INFINITY);
                const float g8 = act ? attn__gelu_tanh_as(-200.0f) : attn__silu_as(-200.0f);
                TU_CHECK(g1 != g1 && g2 == 0.0f && signbit(g2) && g3 == INFINITY &&
                             g8 <= 0.0f && g8 > -1e-30f,
                         "glu act %d: NaN, -0, +inf and -200 give NaN, -0, +inf, ~-0", act);
            }
        }
    }
    free(x), free(u), free(y0), free(y1);
}

/* attn__add_f32 (in place on either operand, and into a third buffer) and the residual row
 * epilogue attn__res_epi against the plain loop y = a + b: memcmp, lengths around its chunks
 * of 8192, 1 and 3 threads, each instruction set; a NaN operand gives a NaN sum. */
static void test_residual_adds(void) {
    attn_ctx *c[2] = {NULL, NULL};
    if (!ctx_1_3(c)) return;
    const int64_t ns[4] = {1, 8191, 8193, 3 * 8192 + 77};
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_ew: residual adds")) continue;
        TU_CHECK(attn__isa_set(c[0], isa) && attn__isa_set(c[1], isa), "isa_set %s",
                 attn__isa_name(isa));
        for (int k = 0; k < 4 && !tu_failures; k++) {
            const int64_t n = ns[k];
            float *a = malloc(4 * (size_t)n), *b = malloc(4 * (size_t)n), *want = malloc(4 * (size_t)n);
            float *y = malloc(4 * (size_t)n);
            tu_fill(a, (size_t)n, 40 + (uint64_t)k, -3, 3);
            tu_fill(b, (size_t)n, 60 + (uint64_t)k, -1e-3f, 1e-3f);
            a[n / 2] = NAN;
            for (int64_t i = 0; i < n; i++) want[i] = a[i] + b[i];
            for (int t = 0; t < 2; t++)
                for (int mode = 0; mode < 3; mode++) { /* y is a, y is b, y apart */
                    float *op0 = mode == 0 ? y : a, *op1 = mode == 1 ? y : b;
                    memcpy(y, mode == 0 ? a : b, 4 * (size_t)n);
                    if (mode == 2) memset(y, 0xff, 4 * (size_t)n);
                    attn__add_f32(c[t], op0, op1, y, n);
                    TU_CHECK(memcmp(y, want, 4 * (size_t)n) == 0 && isnan(y[n / 2]),
                             "add_f32 %s: n %lld, %d threads, mode %d", attn__isa_name(isa),
                             (long long)n, t ? 3 : 1, mode);
                }
            /* the epilogue on rows [1, 3) of a [3, m] block (row stride m + 5) */
            const int64_t m = n < 600 ? n : 600, ld = m + 5;
            float *r = malloc(4 * (size_t)(3 * m)), *yy = malloc(4 * (size_t)(3 * ld));
            tu_fill(r, (size_t)(3 * m), 80 + (uint64_t)k, -1, 1);
            tu_fill(yy, (size_t)(3 * ld), 90 + (uint64_t)k, -1, 1);
            float *ref = malloc(4 * (size_t)(3 * ld));
            memcpy(ref, yy, 4 * (size_t)(3 * ld));
            for (int64_t i = 1; i < 3; i++)
                for (int64_t j = 0; j < m; j++) ref[i * ld + j] = ref[i * ld + j] + r[i * m + j];
            attn__res_state st;
            const attn__row_epi e = attn__res_epi(c[0], r, m, m, &st);
            e.fn(e.arg, yy + ld, ld, 1, 2);
            TU_CHECK(memcmp(yy, ref, 4 * (size_t)(3 * ld)) == 0, "res_epi %s: width %lld",
                     attn__isa_name(isa), (long long)m);
            free(a), free(b), free(want), free(y), free(r), free(yy), free(ref);
        }
    }
    attn_ctx_free(c[0]), attn_ctx_free(c[1]);
}

/* The finite checks' scan (attn__nonfinite_fn): each set against plain C, and plain C against
 * isfinite, for NaN (quiet, signalling, negative), +-inf and the largest finite floats at every
 * position of lengths 0 .. 140 (whole vectors and every tail), from aligned and unaligned
 * starts. */
static void test_nonfinite(void) {
    attn__nonfinite_fn fn[4] = {attn__nonfinite_c, NULL, NULL, NULL};
    const char *name[4] = {"c", "avx512", "avx2", "neon"};
    if (tu_set_ok(ATTN__ISA_AVX512, "test_ew: nonfinite")) fn[1] = attn__nonfinite_avx512();
    if (tu_set_ok(ATTN__ISA_AVX2, "test_ew: nonfinite")) fn[2] = attn__nonfinite_avx2();
    if (tu_set_ok(ATTN__ISA_NEON, "test_ew: nonfinite")) fn[3] = attn__nonfinite_neon();
    const uint32_t special[] = {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7f800000u,
                                0xff800000u, 0x7f7fffffu, 0xff7fffffu, 0x00000001u};
    float buf[160];
    int bad, checked = 0;
    for (int f = 0; f < 4; f++) {
        if (!fn[f]) continue;
        bad = 0;
        for (int off = 0; off < 3; off++)
            for (int n = 0; n <= 140; n++) {
                float *p = buf + off;
                for (int i = 0; i < n; i++) p[i] = (float)(i % 7) - 3.0f;
                buf[off + n] = NAN; /* past the end: never read */
                if (off) buf[off - 1] = INFINITY; /* before the start: never read */
                bad += fn[f](p, n) != 0;
                for (int pos = 0; pos < n; pos++)
                    for (size_t s = 0; s < sizeof special / sizeof *special; s++) {
                        const float keep = p[pos];
                        memcpy(p + pos, &special[s], sizeof(float));
                        const int want = !isfinite(p[pos]);
                        bad += (fn[f](p, n) != 0) != want;
                        p[pos] = keep;
                        checked++;
                    }
            }
        TU_CHECK(bad == 0, "nonfinite %s: %d wrong answers", name[f], bad);
    }
    TU_CHECK(checked > 0, "nonfinite: nothing checked");
}

int main(void) {
    const attn__ew_kernel *fast =
        tu_set_ok(ATTN__ISA_AVX512, "test_ew: row kernels") ? attn__ew_kernel_avx512() : NULL;
    const attn__ew_kernel *avx2 =
        tu_set_ok(ATTN__ISA_AVX2, "test_ew: row kernels") ? attn__ew_kernel_avx2() : NULL;
    const attn__ew_kernel *neon =
        tu_set_ok(ATTN__ISA_NEON, "test_ew: row kernels") ? attn__ew_kernel_neon() : NULL;
    const attn__ew_kernel *vec[3];
    int nv = 0;
    if (fast) vec[nv++] = fast;
    if (avx2) vec[nv++] = avx2;
    if (neon) vec[nv++] = neon;
    if (!nv) printf("ew: no AVX2, AVX-512 or NEON here: plain C kernels only\n");
    test_add_ln(vec, nv);
    test_gelu(vec, nv);
    test_bias_res(vec, nv);
    test_rms(vec, nv);
    test_colsum(vec, nv);
    test_relu(vec, nv);
    test_glu(vec, nv);
    test_threads();
    test_backward();
    test_residual_adds();
    test_nonfinite();
    return tu_finish("test_ew");
}
