/* GEMM (src/kernels/gemm.c) against a double-precision naive product, for every kernel set this
 * machine runs; bit-identity across thread counts and C sub-blocks; the thread pool.
 *
 * Tolerance.  Each C element is checked against the exact (double) value with the classical
 * forward error bound of a K-term dot product in float (Higham, Accuracy and Stability of
 * Numerical Algorithms, 3.1): |fl(x.y) - x.y| <= gamma_K |x|.|y|, gamma_K ~ K u, u = 2^-24,
 * plus a few u for alpha, beta and the final add:
 *     |C - ref| <= (K + 4) u (|alpha| sum_k |a_ik b_kj| + |beta c_ij|).
 * It holds for any summation order and with or without FMA, so it never flakes, yet a wrong,
 * missing or repeated term (error ~ |a_ik b_kj|, about 1/K of the scale) exceeds it for the K
 * used here (up to 1100: bound 6.6e-5 of the scale, a dropped term ~1e-3 of it). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"
#include "pool.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/kernels.h"

typedef struct gemm_case {
    int ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
} gemm_case;

static float *A_, *B_, *C0_, *C_;
static int quick; /* ATTN_TEST_QUICK */
static double *R_, *S_;

/* Fills A, B, C for the case (C0 keeps the input C); pads with large sentinels. */
static void make_inputs(const gemm_case *g, uint64_t seed) {
    int64_t ar = g->ta ? g->K : g->M, br = g->tb ? g->N : g->K;
    tu_fill(A_, (size_t)(ar * g->lda), seed, -1, 1);
    tu_fill(B_, (size_t)(br * g->ldb), seed + 1, -1, 1);
    tu_fill(C0_, (size_t)(g->M * g->ldc), seed + 2, -1, 1);
    /* padding columns (lda > width) hold values that would show if read */
    int64_t aw = g->ta ? g->M : g->K, bw = g->tb ? g->K : g->N;
    for (int64_t r = 0; r < ar; r++)
        for (int64_t c = aw; c < g->lda; c++) A_[r * g->lda + c] = 1e30f;
    for (int64_t r = 0; r < br; r++)
        for (int64_t c = bw; c < g->ldb; c++) B_[r * g->ldb + c] = 1e30f;
    if (g->beta == 0.0f) /* beta == 0 must not read C: NaN would propagate */
        for (int64_t r = 0; r < g->M; r++)
            for (int64_t c = 0; c < g->N; c++) C0_[r * g->ldc + c] = NAN;
}

static void naive(const gemm_case *g) {
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t j = 0; j < g->N; j++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < g->K; k++) {
                double a = g->ta ? A_[k * g->lda + i] : A_[i * g->lda + k];
                double b = g->tb ? B_[j * g->ldb + k] : B_[k * g->ldb + j];
                s += a * b;
                sa += fabs(a * b);
            }
            double c = g->beta == 0.0f ? 0.0 : C0_[i * g->ldc + j];
            R_[i * g->N + j] = g->alpha * s + g->beta * c;
            S_[i * g->N + j] = fabs(g->alpha) * sa + fabs(g->beta * c);
        }
}

static int run(attn_ctx *ctx, const gemm_case *g, float *C) {
    memcpy(C, C0_, sizeof(float) * (size_t)(g->M * g->ldc));
    return attn__gemm(ctx, g->ta, g->tb, g->M, g->N, g->K, g->alpha, A_, g->lda, B_, g->ldb,
                      g->beta, C, g->ldc) == ATTN_OK;
}

static void check_case(attn_ctx *ctx, const gemm_case *g, const char *isa) {
    TU_CHECK(run(ctx, g, C_), "gemm failed: %s", attn_ctx_errmsg(ctx));
    const double u = ldexp(1.0, -24);
    double worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < g->M && !bad; i++) {
        for (int64_t j = 0; j < g->N; j++) {
            double got = C_[i * g->ldc + j], ref = R_[i * g->N + j];
            double bound = (double)(g->K + 4) * u * S_[i * g->N + j] + 1e-30;
            double e = fabs(got - ref);
            if (!(e <= bound)) {
                tu_fail(__FILE__, __LINE__,
                        "%s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g: C[%lld,%lld] = %.9g, "
                        "expected %.9g (bound %.3g)",
                        isa, g->ta, g->tb, (long long)g->M, (long long)g->N, (long long)g->K,
                        g->alpha, g->beta, (long long)i, (long long)j, got, ref, bound);
                bad = 1;
                break;
            }
            if (bound > 0 && e / bound > worst) worst = e / bound;
        }
        for (int64_t j = g->N; j < g->ldc; j++) /* columns past N untouched */
            if (memcmp(&C_[i * g->ldc + j], &C0_[i * g->ldc + j], sizeof(float)) != 0) {
                tu_fail(__FILE__, __LINE__, "%s: C padding at [%lld,%lld] written", isa,
                        (long long)i, (long long)j);
                bad = 1;
                break;
            }
    }
    tu_checks++;
}

static int64_t pick(uint64_t *s, const int64_t *v, int n) { return v[tu_rand(s) % (uint64_t)n]; }

static void test_gemm_accuracy(void) {
    static const int64_t dims[] = {1, 2, 3, 4, 5, 6, 7, 8, 13, 14, 15, 16, 17, 28, 29,
                                   31, 32, 33, 47, 63, 64, 65, 97, 128, 129};
    static const float alphas[] = {1.0f, -0.5f, 2.0f, 1.0f};
    static const float betas[] = {0.0f, 1.0f, 0.5f, 0.0f, -1.0f};
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_each_set(isa, "test_gemm: accuracy")) continue;
        for (int threads = quick ? 3 : 1; threads <= 3; threads += 2) {
            attn_ctx *ctx;
            attn_ctx_params p;
            memset(&p, 0, sizeof p);
            p.threads = threads;
            if (attn_ctx_create(&p, &ctx) != ATTN_OK) {
                TU_CHECK(0, "ctx");
                return;
            }
            TU_CHECK(attn__isa_set(ctx, isa), "set isa");
            uint64_t s = 1234 + (uint64_t)isa * 77 + (uint64_t)threads;
            int ncases = 0;
            /* random small/odd shapes, all transposes, padded leading dims */
            for (int c = 0; c < (quick ? 24 : 160); c++) {
                gemm_case g;
                g.ta = c & 1, g.tb = (c >> 1) & 1;
                g.M = pick(&s, dims, 25), g.N = pick(&s, dims, 25), g.K = pick(&s, dims, 25);
                int64_t pad = (int64_t)(tu_rand(&s) % 3) * (int64_t)(tu_rand(&s) % 9);
                g.lda = (g.ta ? g.M : g.K) + pad;
                g.ldb = (g.tb ? g.K : g.N) + pad;
                g.ldc = g.N + (int64_t)(tu_rand(&s) % 4);
                g.alpha = alphas[c % 4];
                g.beta = betas[(c / 4) % 5];
                make_inputs(&g, s);
                naive(&g);
                check_case(ctx, &g, attn__isa_name(isa));
                ncases++;
            }
            /* larger: several K chunks, several N blocks, edges in both */
            static const int64_t big[][3] = {{67, 1100, 45},  {130, 70, 1100}, {301, 1601, 33},
                                             {29, 37, 777},   {1, 2100, 9},    {2000, 1, 3},
                                             {9, 1100, 1},    {45, 48, 400}};
            for (int c = 0; c < 8; c++)
                for (int t = 0; t < 4; t++) {
                    if (quick && c != 3 && c != 7) continue; /* the smaller two */
                    gemm_case g = {t & 1, t >> 1, big[c][0], big[c][1], big[c][2], 0, 0, 0,
                                   c & 1 ? 1.0f : 0.75f, c & 2 ? 0.0f : 1.0f};
                    g.lda = (g.ta ? g.M : g.K) + (c & 1);
                    g.ldb = (g.tb ? g.K : g.N) + (c & 2);
                    g.ldc = g.N + 3;
                    make_inputs(&g, 99 + (uint64_t)c);
                    naive(&g);
                    check_case(ctx, &g, attn__isa_name(isa));
                    ncases++;
                }
            printf("gemm: %s, %d threads: %d cases\n", attn__isa_name(isa), threads, ncases);
            attn_ctx_free(ctx);
        }
    }
}

/* K == 0 and alpha == 0: C = beta C and A, B are not read (NULL is fine). */
static void test_gemm_degenerate(void) {
    attn_ctx *ctx;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return;
    float c[6] = {1, 2, 3, 4, 5, 6};
    TU_STATUS(attn__gemm(ctx, 0, 0, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, 2.0f, c, 3), ATTN_OK, ctx);
    TU_CHECK(c[0] == 2 && c[5] == 12, "K=0 scales C");
    for (int i = 0; i < 6; i++) c[i] = NAN;
    TU_STATUS(attn__gemm(ctx, 1, 1, 2, 3, 0, 1.0f, NULL, 2, NULL, 1, 0.0f, c, 3), ATTN_OK, ctx);
    TU_CHECK(c[0] == 0 && c[5] == 0, "K=0 beta=0 zeroes C without reading it");
    for (int i = 0; i < 6; i++) c[i] = (float)i;
    TU_STATUS(attn__gemm(ctx, 0, 1, 2, 3, 4, 0.0f, NULL, 4, NULL, 4, 1.0f, c, 3), ATTN_OK, ctx);
    TU_CHECK(c[5] == 5, "alpha=0 beta=1 leaves C");
    TU_STATUS(attn__gemm(ctx, 0, 0, 0, 3, 4, 1.0f, NULL, 4, NULL, 3, 1.0f, c, 3), ATTN_OK, ctx);
    /* a fixed caller workspace that is too small: ATTN_E_WORKSPACE, C untouched */
    attn_ctx *small;
    static unsigned char ws[256];
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.workspace = ws;
    p.workspace_size = sizeof ws;
    if (attn_ctx_create(&p, &small) == ATTN_OK) {
        float a[64 * 64], b[64 * 64], cc[64 * 64];
        tu_fill(a, 4096, 1, -1, 1);
        tu_fill(b, 4096, 2, -1, 1);
        for (int i = 0; i < 4096; i++) cc[i] = 7;
        TU_STATUS(attn__gemm(small, 0, 0, 64, 64, 64, 1.0f, a, 64, b, 64, 0.0f, cc, 64),
                  ATTN_E_WORKSPACE, small);
        TU_CHECK(cc[0] == 7 && cc[4095] == 7, "C untouched on failure");
        attn_ctx_free(small);
    }
    attn_ctx_free(ctx);
}

/* Same bits for 1..4 threads, and for any block of C computed on its own. */
static void test_gemm_determinism(void) {
    /* row and column splits, several K chunks and N blocks, edge tiles everywhere */
    static const int64_t shapes[][3] = {{203, 411, 400}, {64, 3072, 129}, {1000, 64, 513},
                                        {13, 2000, 70},  {3000, 17, 64},  {150, 250, 1100}};
    /* ATTN_TEST_QUICK: one shape with two N blocks and two K chunks of the AVX2 set (nc 1536,
     * kc 256) and rows for three threads */
    static const int64_t quick_shape[3] = {21, 1600, 300};
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_each_set(isa, "test_gemm: determinism")) continue;
        attn_ctx *ctx[5] = {0};
        for (int t = 1; t <= 4; t++) {
            attn_ctx_params p;
            memset(&p, 0, sizeof p);
            p.threads = t;
            if (attn_ctx_create(&p, &ctx[t]) != ATTN_OK || !attn__isa_set(ctx[t], isa)) {
                TU_CHECK(0, "ctx %d", t);
                return;
            }
        }
        int identical = 0, total = 0;
        for (int c = 0; c < 6; c++)
            for (int tr = 0; tr < 4; tr++) {
                if (quick && (c != 0 || tr == 1 || tr == 2)) continue;
                const int64_t *sh = quick ? quick_shape : shapes[c];
                gemm_case g = {tr & 1, tr >> 1, sh[0], sh[1], sh[2], 0, 0, 0,
                               1.25f, tr == 3 ? 0.5f : 0.0f};
                g.lda = g.ta ? g.M : g.K;
                g.ldb = g.tb ? g.K : g.N;
                g.ldc = g.N;
                make_inputs(&g, 7 + (uint64_t)c);
                size_t n = (size_t)(g.M * g.N);
                float *ref = malloc(n * sizeof(float));
                run(ctx[1], &g, ref);
                for (int t = 2; t <= 4; t++) {
                    run(ctx[t], &g, C_);
                    total++;
                    if (memcmp(ref, C_, n * sizeof(float)) == 0) identical++;
                    else
                        tu_fail(__FILE__, __LINE__, "%s: %d threads differ from 1 (M=%lld N=%lld K=%lld)",
                                attn__isa_name(isa), t, (long long)g.M, (long long)g.N,
                                (long long)g.K);
                }
                /* a block [i0, i1) x [j0, j1) of C computed alone gives the same bits */
                int64_t i0 = g.M / 3 + 1, i1 = g.M - g.M / 5, j0 = g.N / 4 + 3, j1 = g.N - 1;
                if (i1 > i0 && j1 > j0) {
                    memcpy(C_, C0_, n * sizeof(float));
                    const float *a = g.ta ? A_ + i0 : A_ + i0 * g.lda;
                    const float *b = g.tb ? B_ + j0 * g.ldb : B_ + j0;
                    TU_STATUS(attn__gemm(ctx[2], g.ta, g.tb, i1 - i0, j1 - j0, g.K, g.alpha, a,
                                         g.lda, b, g.ldb, g.beta, C_ + i0 * g.ldc + j0, g.ldc),
                              ATTN_OK, ctx[2]);
                    int same = 1;
                    for (int64_t i = i0; i < i1 && same; i++)
                        same = memcmp(ref + i * g.ldc + j0, C_ + i * g.ldc + j0,
                                      (size_t)(j1 - j0) * sizeof(float)) == 0;
                    TU_CHECK(same, "%s: sub-block differs (M=%lld N=%lld K=%lld)",
                             attn__isa_name(isa), (long long)g.M, (long long)g.N, (long long)g.K);
                }
                free(ref);
            }
        printf("gemm: %s bit-identical across 1..4 threads in %d of %d runs\n",
               attn__isa_name(isa), identical, total);
        for (int t = 1; t <= 4; t++) attn_ctx_free(ctx[t]);
    }
}

/* ---- pool ---------------------------------------------------------------------------- */
typedef struct cover {
    atomic_int *hits;
    atomic_int slot_busy[8];
    int64_t n;
    int width;
    atomic_int bad;
    attn_ctx *ctx;
    atomic_int nested_ok;
} cover;

/* Checks that [b, e) is one of the chunks pool.h promises, tid a valid slot, and counts hits;
 * the tid's slot is marked busy for the duration to catch two chunks sharing a slot. */
static void cover_task(void *arg, int64_t b, int64_t e, int tid) {
    cover *c = arg;
    int64_t nch = c->width <= 1 ? 1 : c->n < (int64_t)c->width * ATTN__POOL_OVERSPLIT
                                          ? c->n
                                          : (int64_t)c->width * ATTN__POOL_OVERSPLIT;
    int64_t q = c->n / nch, r = c->n % nch, found = 0;
    for (int64_t t = 0; t < nch; t++) {
        int64_t eb = t * q + (t < r ? t : r), ee = eb + q + (t < r);
        if (b == eb && e == ee) found = 1;
    }
    if (tid < 0 || tid >= c->width || !found) {
        atomic_fetch_add(&c->bad, 1);
        return;
    }
    if (atomic_fetch_add(&c->slot_busy[tid], 1) != 0) atomic_fetch_add(&c->bad, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
    atomic_fetch_sub(&c->slot_busy[tid], 1);
}

static void nested_inner(void *arg, int64_t b, int64_t e, int tid) {
    atomic_int *count = arg;
    if (b == 0 && tid == 0) atomic_fetch_add(count, (int)e);
}
static void nested_task(void *arg, int64_t b, int64_t e, int tid) {
    cover *c = arg;
    atomic_int count;
    atomic_init(&count, 0);
    attn__parallel_for(c->ctx, 10, nested_inner, &count); /* runs inline: one chunk */
    if (atomic_load(&count) == 10) atomic_fetch_add(&c->nested_ok, 1);
    (void)b, (void)e, (void)tid;
}

static size_t live = 0, allocs = 0, fail_at = (size_t)-1;
static void *count_alloc(void *u, size_t n) {
    (void)u;
    if (allocs >= fail_at) return NULL;
    allocs++;
    void *p = malloc(n);
    if (p) live++;
    return p;
}
static void count_free(void *u, void *p) {
    (void)u;
    if (p) live--;
    free(p);
}

static void test_pool(void) {
    static const int64_t ns[] = {0, 1, 2, 3, 4, 5, 7, 8, 16, 17, 100, 1000, 4097};
    for (int t = 1; t <= 6; t++) {
        attn_ctx *ctx;
        attn_ctx_params p;
        memset(&p, 0, sizeof p);
        p.threads = t;
        if (attn_ctx_create(&p, &ctx) != ATTN_OK) {
            TU_CHECK(0, "ctx");
            return;
        }
        for (int rep = 0; rep < (quick ? 8 : 50); rep++)
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                cover c;
                c.n = ns[k];
                c.width = attn__parallel_width(ctx, c.n);
                int expect = t == 1 || c.n <= 1 ? 1 : (c.n < t ? (int)c.n : t);
                TU_CHECK(c.width == expect, "width %d for n=%lld, %d threads", c.width,
                         (long long)c.n, t);
                c.hits = malloc(sizeof(atomic_int) * (size_t)(c.n + 1));
                for (int64_t i = 0; i < c.n; i++) atomic_init(&c.hits[i], 0);
                atomic_init(&c.bad, 0);
                for (int i = 0; i < 8; i++) atomic_init(&c.slot_busy[i], 0);
                attn__parallel_for(ctx, c.n, cover_task, &c);
                int once = 1;
                for (int64_t i = 0; i < c.n; i++) once &= atomic_load(&c.hits[i]) == 1;
                TU_CHECK(once && atomic_load(&c.bad) == 0,
                         "parallel_for n=%lld threads=%d: coverage or chunking wrong",
                         (long long)c.n, t);
                free(c.hits);
            }
        cover c;
        c.ctx = ctx;
        atomic_init(&c.nested_ok, 0);
        attn__parallel_for(ctx, t, nested_task, &c);
        TU_CHECK(atomic_load(&c.nested_ok) == t, "nested parallel_for runs inline");
        attn_ctx_free(ctx);
    }
    /* creation failing at every allocation: ATTN_E_NOMEM and nothing leaked */
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.alloc = count_alloc;
    p.free = count_free;
    p.threads = 3;
    for (size_t k = 0; k < 6; k++) {
        attn_ctx *ctx = NULL;
        live = allocs = 0;
        fail_at = k;
        attn_status st = attn_ctx_create(&p, &ctx);
        if (st == ATTN_OK) {
            TU_CHECK(attn_ctx_threads(ctx) == 3, "threads");
            attn_ctx_free(ctx);
        } else {
            TU_CHECK(st == ATTN_E_NOMEM && ctx == NULL, "failed create: %s", attn_status_name(st));
        }
        TU_CHECK(live == 0, "%zu allocations leaked when allocation %zu fails", live, k);
    }
    fail_at = (size_t)-1;
}

/* Row epilogues (attn__gemm_epi, attn__linear): run inside the GEMM on finished micro-panels
 * (the last column block, rows split) or as a pass afterwards (wide N, few rows, K = 0); either way
 * the bits of the plain product followed by the same row operation, for 1 and 3 threads. */
typedef struct epi_arg {
    const float *b;
    int64_t n;
} epi_arg;
static void epi_fn(void *arg, float *y, int64_t ldy, int64_t i0, int64_t rows) {
    const epi_arg *a = arg;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < a->n; j++)
            /* row-dependent: 17, which no micro-panel height divides, shows a wrong i0 */
            y[r * ldy + j] = y[r * ldy + j] * (float)(1 + (i0 + r) % 17) + a->b[j];
}

static void test_gemm_epilogue(void) {
    static const int64_t shapes[][3] = {{1, 1, 1},     {37, 50, 29},   {300, 384, 130},
                                        {5, 2100, 64}, {200, 1100, 40}, {64, 96, 0},
                                        {129, 1536, 385}, {129, 1000, 800}, {5, 900, 64},
                                        {21, 1600, 300}};
    /* ATTN_TEST_QUICK: the small shapes, and the last for two N blocks and two K chunks */
    static const unsigned char big[] = {0, 0, 1, 0, 1, 0, 1, 1, 0, 0};
    attn_ctx *c1 = tu_ctx(1), *c3 = tu_ctx(3);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] && c1 && c3; s++) {
        if (quick && big[s]) continue;
        const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ldc = N + 3;
        float *x = malloc(sizeof(float) * (size_t)(M * K + 1));
        float *W = malloc(sizeof(float) * (size_t)(N * K + 1));
        float *b = malloc(sizeof(float) * (size_t)N);
        float *want = malloc(sizeof(float) * (size_t)(M * ldc));
        float *got = malloc(sizeof(float) * (size_t)(M * ldc));
        tu_fill(x, (size_t)(M * K + 1), 71 + s, -1, 1), tu_fill(W, (size_t)(N * K + 1), 72 + s, -1, 1);
        tu_fill(b, (size_t)N, 73 + s, -1, 1);
        epi_arg ea = {b, N};
        attn__row_epi epi = {epi_fn, &ea};
        for (int64_t i = 0; i < M * ldc; i++) want[i] = 7.0f;
        TU_STATUS(attn__gemm(c1, 0, 1, M, N, K, 1.0f, x, K, W, K, 0.0f, want, ldc), ATTN_OK, c1);
        epi_fn(&ea, want, ldc, 0, M);
        for (int t = 0; t < 2; t++) {
            attn_ctx *c = t ? c3 : c1;
            for (int64_t i = 0; i < M * ldc; i++) got[i] = 7.0f;
            TU_STATUS(attn__gemm_epi(c, 0, 1, M, N, K, 1.0f, x, K, W, K, 0.0f, got, ldc, &epi),
                      ATTN_OK, c);
            TU_CHECK(!memcmp(want, got, sizeof(float) * (size_t)(M * ldc)),
                     "gemm epilogue (%d threads): M %lld N %lld K %lld", t ? 3 : 1, (long long)M,
                     (long long)N, (long long)K);
        }
        /* attn__linear's bias: the product, then + b, row by row */
        for (int64_t i = 0; i < M * ldc; i++) want[i] = got[i] = 7.0f;
        TU_STATUS(attn__gemm(c1, 0, 1, M, N, K, 1.0f, x, K, W, K, 0.0f, want, ldc), ATTN_OK, c1);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) want[i * ldc + j] += b[j];
        TU_STATUS(attn__linear(c3, x, K, W, b, got, ldc, M, K, N), ATTN_OK, c3);
        TU_CHECK(!memcmp(want, got, sizeof(float) * (size_t)(M * ldc)),
                 "linear bias: M %lld N %lld K %lld", (long long)M, (long long)N, (long long)K);
        free(x), free(W), free(b), free(want), free(got);
    }
    attn_ctx_free(c1), attn_ctx_free(c3);
}

int main(void) {
    size_t big = 3000 * 3100;
    A_ = malloc(big * sizeof(float));
    B_ = malloc(big * sizeof(float));
    C0_ = malloc(big * sizeof(float));
    C_ = malloc(big * sizeof(float));
    R_ = malloc(big * sizeof(double));
    S_ = malloc(big * sizeof(double));
    if (!A_ || !B_ || !C0_ || !C_ || !R_ || !S_) return 1;
    /* ATTN_TEST_QUICK (an emulator): 3 threads only, a seventh of the random shapes, the smaller
     * large ones, determinism on one smaller shape and two transposes, no plain C set
     * (tu_each_set) */
    quick = tu_quick("test_gemm");
    for (int i = 0; i < ATTN__ISA_COUNT; i++)
        printf("gemm: kernel set %s %s\n", attn__isa_name(i),
               attn__isa_supported(i) ? "available" : "not available");
    attn_ctx *ctx;
    if (attn_ctx_create(NULL, &ctx) == ATTN_OK) {
        printf("gemm: default kernel set %s\n", attn__isa_name(ctx->kern.isa));
        attn_ctx_free(ctx);
    }
    test_pool();
    test_gemm_degenerate();
    test_gemm_accuracy();
    test_gemm_determinism();
    test_gemm_epilogue();
    free(A_), free(B_), free(C0_), free(C_), free(R_), free(S_);
    return tu_finish("test_gemm");
}
