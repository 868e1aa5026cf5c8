/* bf16 linear layer (src/kernels/gemm_bf16.c, contract in gemm_bf16.h): the plain C kernel and
 * the AVX512_BF16 kernel (where the CPU has it) against double-precision products, against each
 * other, and across thread counts; the rounding of activations and weights.
 *
 * Tolerances.  Let x', W' be the inputs rounded to bf16 (each within a relative 2^-8 of the
 * float: 8 significant bits), u = 2^-24, and S = |b| + sum_k |x'_k W'_k| + |r| for one output.
 *  - Against the exact double value of the ROUNDED inputs: the kernels add 2*ceil(K/2) exact
 *    products (+ the residual) to the bias, one float rounding per add, in any order allowed by
 *    the contract: |y - exact'| <= (2 ceil(K/2) + 2) u S (Higham's gamma_n bound).  A dropped or
 *    doubled term (~S/K) or an unrounded input (up to 2^-8 of a term, summed: ~2^-10 S) exceeds it
 *    for the K used (<= 1100: bound 1.3e-4 S).
 *  - Against the exact double value of the FLOAT inputs (what an fp32 layer computes): each
 *    product moves by at most (1 + 2^-8)^2 - 1 = 2^-7 + 2^-16 of itself, so
 *    |y - exact| <= (2^-7 + 2^-16) sum_k |x_k W_k| + (2 ceil(K/2) + 2) u S.
 *  - Fast kernel against the C kernel: both are within the first bound of the same value, so
 *    twice that bound; on this contract they are expected to agree bit for bit (same order of
 *    adds) apart from subnormal partial sums, which is reported, not required (another CPU's
 *    VDPBF16PS might order the two products of a pair differently). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"
#include "cpu.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/gemm_bf16.h"
#include "../src/kernels/gemm_f16.h"
#include "../src/kernels/ew.h"

static float bfr(float x) { /* the rounding the kernels use (attn__bf16_round_row) */
    attn__bf16 h;
    attn__bf16_round_row(&x, 1, &h);
    return attn__bf16_to_f32(h);
}

typedef struct lcase {
    int64_t M, K, N, ldx, ldy, ldr;
    int bias, res;
} lcase;

static attn_ctx *mkctx(int threads) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    attn_ctx *c = NULL;
    if (attn_ctx_create(&p, &c) != ATTN_OK) return NULL;
    return c;
}

/* Runs one case on kernel k; returns the output (malloc'd, M x ldy). */
static float *run(attn_ctx *ctx, const attn__bf16_kernel *k, const lcase *c, const float *x,
                  const attn__bf16 *Wp, const float *b, const float *r) {
    float *y = malloc(sizeof(float) * (size_t)(c->M * c->ldy));
    for (int64_t i = 0; i < c->M * c->ldy; i++) y[i] = 12345.0f; /* padding must survive */
    TU_STATUS(attn__linear_bf16_k(ctx, k, x, c->ldx, Wp, c->bias ? b : NULL,
                                  c->res ? r : NULL, c->ldr, y, c->ldy, c->M, c->K, c->N),
              ATTN_OK, ctx);
    return y;
}

static void test_cases(void) {
    static const int64_t shapes[][3] = {
        {1, 1, 1},     {3, 2, 5},      {14, 64, 32},   {15, 63, 33},   {29, 129, 31},
        {40, 383, 97}, {13, 512, 64},  {27, 513, 65},  {57, 700, 100}, {100, 1100, 45},
        {4, 1536, 70}, {200, 384, 160}};
    const attn__bf16_kernel *ks[2] = {attn__bf16_kernel_ref(), NULL};
    attn_ctx *c1 = mkctx(1), *c3 = mkctx(3);
    if (!c1 || !c3) {
        TU_CHECK(0, "ctx");
        return;
    }
    const int bf16 = tu_isa_ok(TU_CPU_AVX512_BF16, "test_bf16_gemm: the AVX512_BF16 kernel");
    if (bf16 && c1->kern.has_bf16) ks[1] = attn__bf16_kernel_avx512();
    else if (bf16) printf("bf16 gemm: ATTN_BF16=0 (or not built): C kernel only\n");
    int identical = 0, compared = 0;
    double worst_r = 0, worst_f = 0; /* error / bound */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        /* ATTN_TEST_QUICK (an emulator): the shapes under a million products */
        if (tu_quick("test_bf16_gemm") && shapes[s][0] * shapes[s][1] * shapes[s][2] > 1000000)
            continue;
        lcase c = {shapes[s][0], shapes[s][1], shapes[s][2], 0, 0, 0, (int)(s % 3 != 1),
                   (int)(s % 2 == 0)};
        c.ldx = c.K + (int64_t)(s % 4), c.ldy = c.N + (int64_t)(s % 3), c.ldr = c.N + 2;
        float *x = malloc(sizeof(float) * (size_t)(c.M * c.ldx));
        float *W = malloc(sizeof(float) * (size_t)(c.N * c.K));
        float *b = malloc(sizeof(float) * (size_t)c.N);
        float *r = malloc(sizeof(float) * (size_t)(c.M * c.ldr));
        size_t np = attn__bf16_packed_size(c.K, c.N);
        attn__bf16 *Wp = malloc(sizeof(attn__bf16) * np);
        tu_fill(x, (size_t)(c.M * c.ldx), 11 + s, -2, 2);
        tu_fill(W, (size_t)(c.N * c.K), 23 + s, -1, 1);
        tu_fill(b, (size_t)c.N, 37 + s, -1, 1);
        tu_fill(r, (size_t)(c.M * c.ldr), 41 + s, -3, 3);
        for (int64_t m = 0; m < c.M; m++) /* padding of x must not be read */
            for (int64_t k = c.K; k < c.ldx; k++) x[m * c.ldx + k] = NAN;
        attn__bf16_pack_weight(W, c.K, c.N, Wp);
        const int64_t kh = (c.K + 1) / 2;
        float *ys[2] = {NULL, NULL};
        for (int ki = 0; ki < 2; ki++) {
            if (!ks[ki]) continue;
            ys[ki] = run(c1, ks[ki], &c, x, Wp, b, r);
            float *y3 = run(c3, ks[ki], &c, x, Wp, b, r);
            TU_CHECK(memcmp(ys[ki], y3, sizeof(float) * (size_t)(c.M * c.ldy)) == 0,
                     "%s: 3 threads differ from 1 (M=%lld K=%lld N=%lld)", ks[ki]->name,
                     (long long)c.M, (long long)c.K, (long long)c.N);
            free(y3);
            int bad = 0;
            for (int64_t m = 0; m < c.M && bad < 3; m++)
                for (int64_t n = 0; n < c.ldy && bad < 3; n++) {
                    float got = ys[ki][m * c.ldy + n];
                    if (n >= c.N) {
                        if (got != 12345.0f) {
                            bad++;
                            TU_CHECK(0, "padding of y written");
                        }
                        continue;
                    }
                    double e1 = 0, s1 = 0, e0 = 0, s0 = 0; /* rounded / float inputs */
                    for (int64_t k = 0; k < c.K; k++) {
                        double xv = x[m * c.ldx + k], wv = W[n * c.K + k];
                        double p1 = (double)bfr((float)xv) * (double)bfr((float)wv);
                        e1 += p1, s1 += fabs(p1);
                        e0 += xv * wv, s0 += fabs(xv * wv);
                    }
                    double extra = (c.bias ? b[n] : 0.0) + (c.res ? r[m * c.ldr + n] : 0.0);
                    double sx = (c.bias ? fabs(b[n]) : 0.0) +
                                (c.res ? fabs(r[m * c.ldr + n]) : 0.0);
                    double g = (double)(2 * kh + 2) * 0x1p-24;
                    double tol1 = g * (s1 + sx), tol0 = (0x1p-7 + 0x1p-16) * s0 + g * (s1 + sx);
                    double d1 = fabs((double)got - (e1 + extra));
                    double d0 = fabs((double)got - (e0 + extra));
                    if (!(d1 <= tol1) || !(d0 <= tol0)) {
                        bad++;
                        tu_fail(__FILE__, __LINE__,
                                "%s M=%lld K=%lld N=%lld y[%lld,%lld]=%.9g: |err| %.3g (bf16 "
                                "inputs, tol %.3g), %.3g (float inputs, tol %.3g)",
                                ks[ki]->name, (long long)c.M, (long long)c.K, (long long)c.N,
                                (long long)m, (long long)n, (double)got, d1, tol1, d0, tol0);
                    }
                    if (tol1 > 0 && d1 / tol1 > worst_r) worst_r = d1 / tol1;
                    if (tol0 > 0 && d0 / tol0 > worst_f) worst_f = d0 / tol0;
                }
            tu_checks++;
        }
        if (ys[0] && ys[1]) {
            compared++;
            int same = 1;
            for (int64_t m = 0; m < c.M; m++)
                for (int64_t n = 0; n < c.N; n++) {
                    double d = fabs((double)ys[0][m * c.ldy + n] - ys[1][m * c.ldy + n]);
                    if (d != 0) same = 0;
                    double sa = 0;
                    for (int64_t k = 0; k < c.K; k++)
                        sa += fabs((double)bfr(x[m * c.ldx + k]) * bfr(W[n * c.K + k]));
                    sa += (c.bias ? fabs(b[n]) : 0.0) + (c.res ? fabs(r[m * c.ldr + n]) : 0.0);
                    double tol = 2.0 * (double)(2 * kh + 2) * 0x1p-24 * sa;
                    if (!(d <= tol)) {
                        tu_fail(__FILE__, __LINE__, "fast vs C: M=%lld K=%lld N=%lld [%lld,%lld] "
                                "|diff| %.3g > %.3g", (long long)c.M, (long long)c.K,
                                (long long)c.N, (long long)m, (long long)n, d, tol);
                        m = c.M;
                        break;
                    }
                }
            identical += same;
            tu_checks++;
        }
        free(ys[0]), free(ys[1]);
        free(x), free(W), free(b), free(r), free(Wp);
    }
    printf("bf16 gemm: worst error / bound %.3f (bf16 inputs), %.3f (float inputs); fast and C "
           "kernels bit-identical in %d of %d cases\n", worst_r, worst_f, identical, compared);
    fflush(stdout);
    attn_ctx_free(c1);
    attn_ctx_free(c3);
}

/* Rounding of activations: the AVX512_BF16 conversion equals the C one bit for bit, including
 * ties, subnormals (to zero), infinities, NaN (quiet), and zero padding to np. */
static void test_convert(void) {
    attn_ctx *c = mkctx(1);
    if (!c) return;
    const int bf16 = tu_isa_ok(TU_CPU_AVX512_BF16, "test_bf16_gemm: the AVX512_BF16 conversion");
    const attn__bf16_kernel *ks[2] = {attn__bf16_kernel_ref(),
                                      bf16 && c->kern.has_bf16 ? attn__bf16_kernel_avx512() : NULL};
    enum { N = 1000, NP = 1030 };
    float x[N];
    uint64_t st = 99;
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)tu_rand(&st);
        if (i % 7 == 0) u = (u & 0xffff0000u) | 0x8000u;      /* exact ties */
        if (i % 11 == 0) u &= 0x807fffffu;                    /* subnormals */
        if (i % 13 == 0) u = (u & 0x80000000u) | 0x7f800000u; /* infinities */
        if (i % 17 == 0) u |= 0x7f800001u;                    /* NaN */
        memcpy(&x[i], &u, 4);
    }
    x[1] = 1.0f + 0x1p-8f;          /* tie, rounds to even: 1 */
    x[2] = 1.0f + 0x1p-8f + 0x1p-7f; /* tie, rounds up */
    attn__bf16 out[2][NP];
    for (int ki = 0; ki < 2; ki++) {
        if (!ks[ki]) continue;
        for (int i = 0; i < NP; i++) out[ki][i] = 0x5555;
        ks[ki]->cvt(x, N, out[ki], NP);
        int bad = 0;
        for (int i = N; i < NP; i++) bad += out[ki][i] != 0;
        TU_CHECK(!bad, "%s: padding not zero", ks[ki]->name);
    }
    TU_CHECK(out[0][1] == 0x3f80 && out[0][2] == 0x3f82, "ties to even: %04x %04x", out[0][1],
             out[0][2]);
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        int sub = (u & 0x7f800000u) == 0;
        if (sub) TU_CHECK((out[0][i] & 0x7fff) == 0, "subnormal %08x not flushed", u);
        if (isnan(x[i])) TU_CHECK((out[0][i] & 0x7fc0) == 0x7fc0, "NaN %08x -> %04x", u, out[0][i]);
        if (!isnan(x[i]) && !sub) { /* nearest: within half an ulp of bf16 (relative 2^-8) */
            float back = attn__bf16_to_f32(out[0][i]);
            TU_CHECK(isinf(x[i]) ? back == x[i]
                                 : fabs((double)back - x[i]) <= 0x1p-8 * fabs((double)x[i]),
                     "rounding %08x -> %04x", u, out[0][i]);
        }
    }
    if (ks[1])
        TU_CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0, "AVX512_BF16 rounding differs");
    attn_ctx_free(c);
}

/* Sizes: the packed form and its overflow check. */
static void test_sizes(void) {
    TU_CHECK(attn__bf16_packed_size(3, 33) == 4 * 64, "packed size");
    TU_CHECK(attn__bf16_packed_size(0, 5) == 0 || attn__bf16_packed_size(0, 5) == 0, "K=0");
    TU_CHECK(attn__bf16_packed_size(INT64_MAX / 2, INT64_MAX / 2) == 0, "overflow");
    TU_CHECK(attn__bf16_packed_size(-1, 3) == 0, "negative");
    TU_CHECK(attn__f16_packed_size(3, 65) == 128 * 4 + 128 * 3 * 2, "f16 packed size");
    TU_CHECK(attn__f16_packed_size(INT64_MAX / 2, 1000) == 0 &&
                 attn__f16_packed_size(4, INT64_MAX / 4) == 0 && attn__f16_packed_size(-1, 1) == 0,
             "f16 packed size overflow");
}

/* ---- fp16 linear (gemm_f16.h) ------------------------------------------------------------
 * Let x', W' be the scaled inputs rounded to fp16 (x / 2^rm, W / 2^cn, below 1 in magnitude),
 * S' = sum_k |x'_k W'_k| and u_h = 2^-11.  Each block of KB products is summed in fp16 within
 * gamma_KB = KB u_h / (1 - KB u_h) (6.7% for KB = 128) of its terms, the blocks and the
 * epilogue in float:
 *     |y - exact'| <= (gamma_KB + (K / KB + 4) 2^-24) S' 2^(rm + cn) + 2^-23 (|b| + |r|),
 * rigorous but loose (errors are random: ~2^-12 sqrt(KB) of a block in practice), so the
 * test also bounds the mean error over all outputs (relative to S' 2^(rm + cn)) by 2^-11
 * (measured: at most 2.3e-4): a term dropped or doubled in every output adds ~1/K of S' to
 * each (>= 9e-4 for the K <= 1100 used), which exceeds it.  Against the float
 * inputs add (2^-10 + 2^-22) sum_k |x_k W_k| for the rounding of x and W and 2^-24 per
 * product of the scaled domain for subnormal halves.  The AVX512_FP16 kernel must equal the
 * plain C one bit for bit (both round each fp16 fma once), and the GELU epilogue must give
 * exactly attn__gelu_as of the plain result (and the row maxima it reports of y, exactly). */
/* A row epilogue: the layer norm (no bias, no residual) with row maxima, as BERT uses it. */
typedef struct ln_arg {
    const attn__ew_kernel *k;
    const float *w, *lb;
    int64_t n;
    float *amax;
} ln_arg;
static void ln_rows(void *arg, float *y, int64_t ldy, int64_t i0, int64_t rows) {
    const ln_arg *a = arg;
    a->k->add_ln(y, ldy, NULL, NULL, 0, a->w, a->lb, 1e-5f, rows, a->n, a->amax + i0);
}

static void test_f16(void) {
    static const int64_t shapes[][3] = {{1, 1, 1},    {3, 2, 5},     {14, 64, 64},
                                        {15, 63, 65}, {29, 129, 31}, {40, 383, 97},
                                        {27, 513, 130}, {57, 700, 100}, {20, 1100, 45}};
    attn_ctx *c1 = mkctx(1), *c3 = mkctx(3);
    if (!c1 || !c3) return;
    const int f16 = tu_isa_ok(TU_CPU_AVX512_FP16, "test_bf16_gemm: the AVX512_FP16 kernel");
    const attn__f16_kernel *ks[2] = {attn__f16_kernel_ref(),
                                     f16 && c1->kern.has_f16 ? attn__f16_kernel_avx512() : NULL};
    if (f16 && !ks[1]) printf("f16 gemm: ATTN_F16=0 (or not built): C kernel only\n");
    int identical = 0, compared = 0;
    double worst = 0, mean_worst = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        const int64_t ldx = K + 1, ldy = N + 2, ldr = N + 3;
        float *x = malloc(sizeof(float) * (size_t)(M * ldx));
        float *W = malloc(sizeof(float) * (size_t)(N * K));
        float *b = malloc(sizeof(float) * (size_t)N);
        float *r = malloc(sizeof(float) * (size_t)(M * ldr));
        tu_fill(x, (size_t)(M * ldx), 101 + s, -2, 2);
        tu_fill(W, (size_t)(N * K), 202 + s, -1, 1);
        tu_fill(b, (size_t)N, 303 + s, -1, 1);
        tu_fill(r, (size_t)(M * ldr), 404 + s, -3, 3);
        if (M > 2) /* a row of huge values and one of tiny ones: the scaling keeps them */
            for (int64_t k = 0; k < K; k++) x[ldx + k] *= 1e20f, x[2 * ldx + k] *= 1e-20f;
        for (int64_t n = 0; n < N && K > 3; n += 3) W[n * K + 1] = 3e4f; /* beyond fp16 x 1 */
        size_t sz = attn__f16_packed_size(K, N);
        void *Wp = malloc(sz);
        attn__f16_pack_weight(W, K, N, Wp);
        const int use_b = s % 2 == 0, use_r = s % 3 != 2;
        float *ys[2] = {NULL, NULL};
        for (int ki = 0; ki < 2; ki++) {
            if (!ks[ki]) continue;
            float *y1 = malloc(sizeof(float) * (size_t)(M * ldy));
            float *y3 = malloc(sizeof(float) * (size_t)(M * ldy));
            for (int64_t i = 0; i < M * ldy; i++) y1[i] = y3[i] = 12345.0f;
            TU_STATUS(attn__linear_f16_k(c1, ks[ki], x, ldx, Wp, use_b ? b : NULL,
                                         use_r ? r : NULL, ldr, 0, y1, ldy, M, K, N, NULL),
                      ATTN_OK, c1);
            TU_STATUS(attn__linear_f16_k(c3, ks[ki], x, ldx, Wp, use_b ? b : NULL,
                                         use_r ? r : NULL, ldr, 0, y3, ldy, M, K, N, NULL),
                      ATTN_OK, c3);
            TU_CHECK(!memcmp(y1, y3, sizeof(float) * (size_t)(M * ldy)),
                     "f16 %s: 3 threads differ from 1 (M=%lld K=%lld N=%lld)", ks[ki]->name,
                     (long long)M, (long long)K, (long long)N);
            /* the GELU epilogue: exactly attn__gelu_as of the plain result */
            /* with the row maxima of y asked for, and those of x handed in */
            float *xmax = malloc(sizeof(float) * (size_t)M);
            float *ymax = malloc(sizeof(float) * (size_t)M);
            for (int64_t m = 0; m < M; m++) {
                xmax[m] = 0;
                for (int64_t k = 0; k < K; k++) xmax[m] = fmaxf(xmax[m], fabsf(x[m * ldx + k]));
            }
            attn__f16_rows rows = {xmax, ymax};
            TU_STATUS(attn__linear_f16_k(c3, ks[ki], x, ldx, Wp, use_b ? b : NULL,
                                         use_r ? r : NULL, ldr, 1, y3, ldy, M, K, N, &rows),
                      ATTN_OK, c3);
            int gbad = 0;
            for (int64_t m = 0; m < M; m++) {
                float mx = 0;
                for (int64_t n = 0; n < N; n++) {
                    float want = attn__gelu_as(y1[m * ldy + n]), got = y3[m * ldy + n];
                    gbad += memcmp(&want, &got, 4) != 0;
                    mx = fmaxf(mx, fabsf(got));
                }
                gbad += ymax[m] != mx;
            }
            TU_CHECK(!gbad, "f16 %s: GELU epilogue or row maxima differ in %d places",
                     ks[ki]->name, gbad);
            /* the layer norm of finished row panels: the bits of a separate pass after it */
            {
                const attn__ew_kernel *ek = c3->kern.ew;
                float *lw = malloc(sizeof(float) * (size_t)N), *lb = malloc(sizeof(float) * (size_t)N);
                float *want = malloc(sizeof(float) * (size_t)(M * ldy));
                float *wmax = malloc(sizeof(float) * (size_t)M);
                tu_fill(lw, (size_t)N, 505 + s, 0.5, 1.5), tu_fill(lb, (size_t)N, 606 + s, -1, 1);
                memcpy(want, y1, sizeof(float) * (size_t)(M * ldy));
                ek->add_ln(want, ldy, NULL, NULL, 0, lw, lb, 1e-5f, M, N, wmax);
                ln_arg la = {ek, lw, lb, N, ymax};
                const attn__row_epi epi = {ln_rows, &la};
                attn__f16_rows lrows = {NULL, ymax /* not written under an epilogue */, &epi};
                for (int64_t m = 0; m < M; m++) ymax[m] = -1.0f;
                TU_STATUS(attn__linear_f16_k(c3, ks[ki], x, ldx, Wp, use_b ? b : NULL,
                                             use_r ? r : NULL, ldr, 0, y3, ldy, M, K, N, &lrows),
                          ATTN_OK, c3);
                TU_CHECK(!memcmp(want, y3, sizeof(float) * (size_t)(M * ldy)) &&
                             !memcmp(wmax, ymax, sizeof(float) * (size_t)M),
                         "f16 %s: layer norm of row panels differs from a separate pass (M=%lld "
                         "N=%lld)", ks[ki]->name, (long long)M, (long long)N);
                free(lw), free(lb), free(want), free(wmax);
            }
            free(xmax), free(ymax);
            free(y3);
            ys[ki] = y1;
            double msum = 0;
            int bad = 0;
            for (int64_t m = 0; m < M; m++) {
                float mx = 0;
                for (int64_t k = 0; k < K; k++) mx = fmaxf(mx, fabsf(x[m * ldx + k]));
                const double rsc = attn__f16_pow2_scale(mx);
                for (int64_t n = 0; n < ldy; n++) {
                    float got = y1[m * ldy + n];
                    if (n >= N) {
                        bad += got != 12345.0f;
                        continue;
                    }
                    float wm = 0;
                    for (int64_t k = 0; k < K; k++) wm = fmaxf(wm, fabsf(W[n * K + k]));
                    const double csc = attn__f16_pow2_scale(wm), sc = rsc * csc;
                    double e1 = 0, s1 = 0, e0 = 0, s0 = 0;
                    for (int64_t k = 0; k < K; k++) {
                        double xq = attn__f16_to_f32(attn__f64_to_f16(x[m * ldx + k] / rsc));
                        double wq = attn__f16_to_f32(attn__f64_to_f16(W[n * K + k] / csc));
                        e1 += xq * wq, s1 += fabs(xq * wq);
                        e0 += (double)x[m * ldx + k] * W[n * K + k];
                        s0 += fabs((double)x[m * ldx + k] * W[n * K + k]);
                    }
                    double ex = (use_b ? b[n] : 0.0) + (use_r ? r[m * ldr + n] : 0.0);
                    double sx = (use_b ? fabs(b[n]) : 0.0) + (use_r ? fabs(r[m * ldr + n]) : 0.0);
                    const double kb = ATTN__F16_KB;
                    double g = kb * 0x1p-11 / (1 - kb * 0x1p-11) +
                               (double)(K / ATTN__F16_KB + 4) * 0x1p-24;
                    double tol1 = g * s1 * sc + 0x1p-23 * sx;
                    double tol0 = tol1 + (0x1p-10 + 0x1p-22) * s0 + (double)K * 0x1p-24 * sc;
                    double d1 = fabs(got - (e1 * sc + ex)), d0 = fabs(got - (e0 + ex));
                    if (!(d1 <= tol1) || !(d0 <= tol0)) {
                        if (bad++ < 3)
                            tu_fail(__FILE__, __LINE__, "f16 %s M=%lld K=%lld N=%lld [%lld,%lld] "
                                    "%.9g: |err| %.3g (tol %.3g), %.3g vs float (tol %.3g)",
                                    ks[ki]->name, (long long)M, (long long)K, (long long)N,
                                    (long long)m, (long long)n, (double)got, d1, tol1, d0, tol0);
                    }
                    if (tol1 > 0) worst = fmax(worst, d1 / tol1);
                    msum += s1 > 0 ? fabs(got - (e1 * sc + ex) - 0) / (s1 * sc + sx) : 0;
                }
            }
            double mean = msum / (double)(M * N);
            mean_worst = fmax(mean_worst, mean);
            TU_CHECK(!bad, "f16 %s: %d outputs out of bounds", ks[ki]->name, bad);
            TU_CHECK(mean <= 0x1p-11, "f16 %s: mean relative error %.3g > 2^-11 (M=%lld K=%lld)",
                     ks[ki]->name, mean, (long long)M, (long long)K);
        }
        if (ys[0] && ys[1]) {
            compared++;
            int same = !memcmp(ys[0], ys[1], sizeof(float) * (size_t)(M * ldy));
            identical += same;
            TU_CHECK(same, "f16: AVX512_FP16 and C kernels differ (M=%lld K=%lld N=%lld)",
                     (long long)M, (long long)K, (long long)N);
        }
        free(ys[0]), free(ys[1]), free(x), free(W), free(b), free(r), free(Wp);
    }
    printf("f16 gemm: worst error / bound %.3f, worst mean relative error %.3g; fast and C "
           "kernels bit-identical in %d of %d cases\n", worst, mean_worst, identical, compared);
    fflush(stdout);
    attn_ctx_free(c1);
    attn_ctx_free(c3);
}

/* Half conversions against the hardware-independent definition: every half converts to a
 * float and back unchanged; midpoints round to even; overflow, subnormals, NaN. */
static void test_half(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = attn__f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            bad += (attn__f64_to_f16(f) & 0x7e00) != 0x7e00;
            continue;
        }
        bad += attn__f64_to_f16(f) != h;
        if ((h & 0x7fff) < 0x7bff) { /* the midpoint to the next half rounds to even */
            float g = attn__f16_to_f32((uint16_t)(h + 1));
            uint16_t mid = attn__f64_to_f16(((double)f + g) / 2);
            bad += mid != ((h & 1) ? h + 1 : h);
        }
    }
    TU_CHECK(!bad, "half conversions: %d failures", bad);
#ifdef __FLT16_MAX__
    /* random doubles over the whole half range against the compiler's conversion */
    uint64_t st = 7;
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint64_t r = tu_rand(&st);
        double d = ldexp((double)(r >> 11) * 0x1p-53, (int)(r % 48) - 30) * (r & 1024 ? -1 : 1);
        _Float16 h = (_Float16)d;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        bad += attn__f64_to_f16(d) != hb;
    }
    TU_CHECK(!bad, "half conversion vs _Float16: %d differ", bad);
#endif
    TU_CHECK(attn__f64_to_f16(65519.99) == 0x7bff && attn__f64_to_f16(65520) == 0x7c00 &&
                 attn__f64_to_f16(-1e9) == 0xfc00 && attn__f64_to_f16(0x1p-25) == 0 &&
                 attn__f64_to_f16(0x1.8p-25) == 1,
             "half edges");
}

int main(void) {
    test_sizes();
    test_convert();
    test_cases();
    test_half();
    test_f16();
    return tu_finish("test_bf16_gemm");
}
