/* The fused attention kernels (src/kernels/flash.c: attn__flash_fwd, attn__flash_bwd) against the
 * reference (attn__sdpa_ref, attn__sdpa_bwd_ref) for every kernel set this machine runs, on
 * random shapes around the tile sizes (1, 3, 17, 63, 64, 65, 127, 129, ... and S = 1000), every
 * mask kind with broadcast strides (both mask slots, mask_ncols < S, a non-unit key stride,
 * fully masked rows), both causal alignments with L != S, GQA/MQA, dropout, lse, strided
 * (B, L, H, D) layouts; bit-identical results for 1, 2 and 3 threads (which also switches the
 * backward between its one-pass and two-pass schedules).
 *
 * Tolerances, as max|err| <= tol * max(1, max|ref|) per output:
 *  forward 2e-5.  Each output is a convex combination of V rows; the fp32 online softmax
 *    differs from the reference (double sums) by the rounding of the D-term fp32 score dot
 *    products (~sqrt(D) u |s|, |s| <= ~10 here), of the exp polynomial (~2 u) and of the running
 *    rescaling (one rounding per key tile, <= 16 tiles at S = 1000): a few 1e-6, measured below
 *    1e-5 at S = 1000; a wrong, missing or differently dropped key changes an output by ~1/S of
 *    the scale or more (>= 1e-3 here).
 *  backward 1e-4.  The gradients add the S- or L-term fp32 sums of dS K, dS^T Q, W^T dO on top
 *    of the same score error (the reference accumulates in double); measured <= ~2e-5.
 * The dropout case with uniform weights checks the kept set itself: one key dropped or kept
 * differently moves an output by v / (S (1 - p)) ~ 0.05. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/dispatch.h"
#include "../src/kernels/flash.h"
#include "../src/kernels/kernels.h"
#include "testutil_sdpa.h"

#define FWD_TOL 2e-5
#define BWD_TOL 1e-4

typedef struct tcase {
    int64_t B, H, Hkv, L, S, D, Dv;
    attn_causal causal;
    int maskcfg; /* 0..6, see tu_sdpa_masks in testutil_sdpa.h */
    float dropout;
    int blhd;    /* q, k, v, o, grads in (B, L, H, D) layout */
    int uniform; /* q = 0: uniform weights (dropout kept-set check) */
    int no_dq;   /* dq not requested */
} tcase;

static double worst_fwd, worst_bwd;

static int quick; /* ATTN_TEST_QUICK */

static void strides_of(const tcase *c, int64_t heads, int64_t len, int64_t d, int64_t s[4]) {
    if (c->blhd) s[0] = len * heads * d, s[1] = d, s[2] = heads * d, s[3] = 1;
    else s[0] = heads * len * d, s[1] = len * d, s[2] = d, s[3] = 1;
}

/* the thread counts of the contexts run_case runs on (1 and 3 alone under ATTN_TEST_QUICK) */
static int nctx = 3, nthr[3] = {1, 2, 3};

static void run_case(attn_ctx *ctx[3], const tcase *c, uint64_t seed) {
    uint64_t rs = seed;
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, L = c->L, S = c->S, D = c->D, Dv = c->Dv;
    size_t nq = (size_t)(B * H * L * D), nk = (size_t)(B * Hkv * S * D),
           nv = (size_t)(B * Hkv * S * Dv), no = (size_t)(B * H * L * Dv),
           nl = (size_t)(B * H * L);
    float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nv), *dout = malloc(4 * no);
    tu_fill(q, nq, seed + 1, -2, 2), tu_fill(k, nk, seed + 2, -2, 2);
    tu_fill(v, nv, seed + 3, -1, 1), tu_fill(dout, no, seed + 4, -1, 1);
    if (c->uniform) memset(q, 0, 4 * nq);
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = B, a.H = H, a.Hkv = Hkv, a.L = L, a.S = S, a.D = D, a.Dv = Dv;
    a.q = q, a.k = k, a.v = v;
    strides_of(c, H, L, D, a.qs), strides_of(c, Hkv, S, D, a.ks);
    strides_of(c, Hkv, S, Dv, a.vs), strides_of(c, H, L, Dv, a.os);
    a.ls[0] = H * L, a.ls[1] = L, a.ls[2] = 1;
    a.causal = c->causal;
    a.scale = 1.0f / sqrtf((float)D) * (c->maskcfg == 3 ? 1.5f : 1.0f);
    if (c->dropout > 0) a.dropout_p = c->dropout, a.seed = seed * 7 + 1, a.offset = seed % 5;
    float *fm;
    unsigned char *bm;
    tu_sdpa_masks(c->maskcfg, c->B, c->H, c->L, c->S, &a, &rs, &fm, &bm);
    attn__sdpa_grads g;
    memset(&g, 0, sizeof g);
    g.dout = dout;
    memcpy(g.dos, a.os, sizeof g.dos), memcpy(g.dqs, a.qs, sizeof g.dqs);
    memcpy(g.dks, a.ks, sizeof g.dks), memcpy(g.dvs, a.vs, sizeof g.dvs);

    /* reference */
    float *o_ref = malloc(4 * no), *lse_ref = malloc(4 * nl), *scratch = malloc(16 * (size_t)S);
    float *dq_ref = calloc(nq, 4), *dk_ref = calloc(nk, 4), *dv_ref = calloc(nv, 4);
    attn__sdpa_args r = a;
    r.o = o_ref, r.lse = lse_ref;
    attn__sdpa_ref(&r, scratch);
    attn__sdpa_grads gr = g;
    gr.dq = c->no_dq ? NULL : dq_ref, gr.dk = dk_ref, gr.dv = dv_ref;
    attn__sdpa_bwd_ref(&r, &gr, scratch);

    float *o[3], *lse[3], *dq[3], *dk[3], *dv[3];
    for (int t = 0; t < 3; t++) {
        o[t] = malloc(4 * no), lse[t] = malloc(4 * nl);
        dq[t] = calloc(nq, 4), dk[t] = calloc(nk, 4), dv[t] = calloc(nv, 4);
    }
    float *dq2 = calloc(nq, 4), *dk2 = calloc(nk, 4), *dv2 = calloc(nv, 4);
    char what[160];
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_each_set(isa, "test_flash: fused kernels")) continue;
        for (int t = 0; t < nctx; t++) {
            TU_CHECK(attn__isa_set(ctx[t], isa), "isa_set");
            attn__sdpa_args f = a;
            f.o = o[t], f.lse = lse[t];
            TU_STATUS(attn__flash_fwd(ctx[t], &f), ATTN_OK, ctx[t]);
            attn__sdpa_grads gf = g;
            gf.dq = c->no_dq ? NULL : dq[t], gf.dk = dk[t], gf.dv = dv[t];
            TU_STATUS(attn__flash_bwd(ctx[t], &f, &gf, lse[t]), ATTN_OK, ctx[t]);
            if (t == 0) { /* delta recomputed from the scores instead of dout . o */
                f.o = NULL;
                gf.dq = c->no_dq ? NULL : dq2, gf.dk = dk2, gf.dv = dv2;
                TU_STATUS(attn__flash_bwd(ctx[t], &f, &gf, lse[t]), ATTN_OK, ctx[t]);
            }
        }
        snprintf(what, sizeof what,
                 "[%s B%lld H%lld/%lld L%lld S%lld D%lld/%lld causal%d mask%d p%.2f blhd%d]",
                 attn__isa_name(isa), (long long)B, (long long)H, (long long)Hkv, (long long)L,
                 (long long)S, (long long)D, (long long)Dv, (int)c->causal, c->maskcfg,
                 (double)c->dropout, c->blhd);
        double m, e;
        char w2[200];
#define CLOSE(name, got, ref, n, tol, worst)                                                  \
    do {                                                                                      \
        snprintf(w2, sizeof w2, "%s %s", name, what);                                         \
        tu_close(w2, got, ref, n, tol);                                                       \
        e = tu_max_err(got, ref, n, &m) / (m > 1 ? m : 1);                                    \
        if (e > worst) worst = e;                                                             \
    } while (0)
        CLOSE("out", o[0], o_ref, no, FWD_TOL, worst_fwd);
        CLOSE("lse", lse[0], lse_ref, nl, FWD_TOL, worst_fwd);
        if (!c->no_dq) CLOSE("dq", dq[0], dq_ref, nq, BWD_TOL, worst_bwd);
        CLOSE("dk", dk[0], dk_ref, nk, BWD_TOL, worst_bwd);
        CLOSE("dv", dv[0], dv_ref, nv, BWD_TOL, worst_bwd);
        if (!c->no_dq) CLOSE("dq(no o)", dq2, dq_ref, nq, BWD_TOL, worst_bwd);
        CLOSE("dk(no o)", dk2, dk_ref, nk, BWD_TOL, worst_bwd);
        CLOSE("dv(no o)", dv2, dv_ref, nv, BWD_TOL, worst_bwd);
        for (int t = 1; t < nctx; t++) {
            TU_CHECK(memcmp(o[t], o[0], 4 * no) == 0, "out differs with %d threads %s", nthr[t], what);
            TU_CHECK(memcmp(lse[t], lse[0], 4 * nl) == 0, "lse differs with %d threads %s", nthr[t], what);
            TU_CHECK(memcmp(dq[t], dq[0], 4 * nq) == 0, "dq differs with %d threads %s", nthr[t], what);
            TU_CHECK(memcmp(dk[t], dk[0], 4 * nk) == 0, "dk differs with %d threads %s", nthr[t], what);
            TU_CHECK(memcmp(dv[t], dv[0], 4 * nv) == 0, "dv differs with %d threads %s", nthr[t], what);
        }
    }
    for (int t = 0; t < 3; t++) free(o[t]), free(lse[t]), free(dq[t]), free(dk[t]), free(dv[t]);
    free(dq2), free(dk2), free(dv2);
    free(o_ref), free(lse_ref), free(scratch), free(dq_ref), free(dk_ref), free(dv_ref);
    free(q), free(k), free(v), free(dout), free(fm), free(bm);
}

static void errors(attn_ctx *ctx) {
    float x[16] = {0}, w[16], lse[4];
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = a.H = a.Hkv = 1, a.L = a.S = 2, a.D = a.Dv = 4, a.scale = 0.5f;
    a.q = a.k = a.v = x, a.o = w;
    int64_t s[4] = {8, 8, 4, 1};
    memcpy(a.qs, s, sizeof s), memcpy(a.ks, s, sizeof s), memcpy(a.vs, s, sizeof s),
        memcpy(a.os, s, sizeof s);
    a.w = w;
    TU_STATUS(attn__flash_fwd(ctx, &a), ATTN_E_INVALID, ctx);
    a.w = NULL;
    attn__sdpa_grads g;
    memset(&g, 0, sizeof g);
    g.dout = x, g.dmask = w;
    memcpy(g.dos, s, sizeof s);
    TU_STATUS(attn__flash_bwd(ctx, &a, &g, lse), ATTN_E_UNSUPPORTED, ctx);
}

/* The plain C table, then each ISA's where this build and CPU have it (else NULL: the
 * skip is said once per set) */
static void kernel_sets(const char *what, const attn__flash_kernels *ks[4]) {
    ks[0] = attn__flash_kernels_ref();
    ks[1] = tu_set_ok(ATTN__ISA_AVX2, what) ? attn__flash_kernels_avx2() : NULL;
    ks[2] = tu_set_ok(ATTN__ISA_AVX512, what) ? attn__flash_kernels_avx512() : NULL;
    ks[3] = tu_set_ok(ATTN__ISA_NEON, what) ? attn__flash_kernels_neon() : NULL;
}

/* The transpose microkernel of every ISA against the plain C one: values, zero padding to
 * whole 16 x 16 blocks, and nothing written beyond them (a canary). */
static void transposes(void) {
    const char *what = "test_flash: transposes";
    const attn__flash_kernels *ks[4];
    kernel_sets(what, ks);
    uint64_t rs = 77;
    int nt = 0;
    for (int t = 0; t < 300 && !tu_failures; t++) {
        int64_t n = 1 + (int64_t)(tu_rand(&rs) % 40), d = 1 + (int64_t)(tu_rand(&rs) % 40);
        int64_t cs = t % 4 == 3 ? 3 : 1, rstride = cs == 1 ? d + (int64_t)(tu_rand(&rs) % 5)
                                                            : 1 + 3 * d;
        int64_t np = (n + 15) / 16 * 16, dp = (d + 15) / 16 * 16, ld = np + 16 * (t % 2);
        size_t nsrc = (size_t)(n * rstride + d * cs), ndst = (size_t)(dp * ld);
        float *src = malloc(4 * nsrc), *want = malloc(4 * ndst), *got = malloc(4 * ndst);
        tu_fill(src, nsrc, 500 + (uint64_t)t, -1, 1);
        for (size_t i = 0; i < ndst; i++) want[i] = 12345.0f;
        attn__flash_tr_c(src, rstride, cs, n, d, want, ld);
        for (int64_t e = 0; e < dp; e++)
            for (int64_t j = 0; j < ld; j++) {
                float w = want[e * ld + j];
                float x = j >= np ? 12345.0f : j < n && e < d ? src[j * rstride + e * cs] : 0.0f;
                TU_CHECK(w == x, "C transpose: n %lld d %lld (%lld, %lld)", (long long)n,
                         (long long)d, (long long)e, (long long)j);
            }
        for (int k = 1; k < 4; k++) {
            if (!ks[k]) continue;
            for (size_t i = 0; i < ndst; i++) got[i] = 12345.0f;
            ks[k]->tr(src, rstride, cs, n, d, got, ld);
            TU_CHECK(memcmp(got, want, 4 * ndst) == 0, "transpose (isa %d): n %lld d %lld cs %lld",
                     ks[k]->isa, (long long)n, (long long)d, (long long)cs);
            nt++;
        }
        free(src), free(want), free(got);
    }
    printf("transposes: %d fast-kernel cases identical to the C one\n", nt);
}

/* The row dot products (delta = dO . O) of every ISA: the bits of a plain loop written here
 * (products rounded, added in order from 0), any row count and width, strided rows; NaN and
 * infinities pass through as in the loop. */
static void rowdots(void) {
    const char *what = "test_flash: row dot products";
    const attn__flash_kernels *ks[4];
    kernel_sets(what, ks);
    uint64_t rs = 91;
    int nt = 0;
    for (int t = 0; t < 200 && !tu_failures; t++) {
        int64_t rows = 1 + (int64_t)(tu_rand(&rs) % 70), d = 1 + (int64_t)(tu_rand(&rs) % 90);
        int64_t lda = d + (int64_t)(tu_rand(&rs) % 7), ldb = d + (int64_t)(tu_rand(&rs) % 5);
        float *a = malloc(4 * (size_t)(rows * lda)), *b = malloc(4 * (size_t)(rows * ldb));
        float *want = malloc(4 * (size_t)rows), *got = malloc(4 * (size_t)(rows + 1));
        tu_fill(a, (size_t)(rows * lda), 700 + (uint64_t)t, -2, 2);
        tu_fill(b, (size_t)(rows * ldb), 900 + (uint64_t)t, -2, 2);
        if (t % 10 == 3) a[0] = NAN, b[lda < ldb ? lda : ldb] = INFINITY;
        for (int64_t r = 0; r < rows; r++) {
            float acc = 0.0f;
            for (int64_t e = 0; e < d; e++) {
                volatile float p = a[r * lda + e] * b[r * ldb + e];
                acc = acc + p;
            }
            want[r] = acc;
        }
        for (int k = 0; k < 4; k++) {
            if (!ks[k]) continue;
            got[rows] = 12345.0f;
            ks[k]->rowdot(a, lda, b, ldb, rows, d, got);
            TU_CHECK(memcmp(got, want, 4 * (size_t)rows) == 0 && got[rows] == 12345.0f,
                     "rowdot (isa %d): rows %lld d %lld", ks[k]->isa, (long long)rows,
                     (long long)d);
            nt++;
        }
        free(a), free(b), free(want), free(got);
    }
    printf("rowdots: %d cases identical to the plain loop\n", nt);
}

/* The backward's fused epilogues of every ISA that has them (mmexp, mmds) against mm and the
 * same set's separate passes (smax and expsum; ds), bit for bit: row counts across the block
 * heights, widths of 16 to 112 columns (AVX-512's whole groups of 64 and the rest), strided
 * rows, rows whose lse is -inf, large scores whose weights flush to 0, a NaN score that must
 * reach the output, and nothing written past the n columns (a canary, half the cases). */
static void fused_epilogues(void) {
    const char *what = "test_flash: fused backward epilogues";
    const attn__flash_kernels *ks[4];
    kernel_sets(what, ks);
    uint64_t rs = 131;
    int nt = 0;
    for (int t = 0; t < (quick ? 24 : 80) && !tu_failures; t++) {
        int64_t m = 1 + (int64_t)(tu_rand(&rs) % 40), n = 16 * (1 + (int64_t)(tu_rand(&rs) % 7));
        int64_t K = 1 + (int64_t)(tu_rand(&rs) % 70), lda = K + (int64_t)(tu_rand(&rs) % 3);
        int64_t ldb = n + 16 * (int64_t)(tu_rand(&rs) % 2), ldc = n + 16 * (t % 2);
        int64_t ldp = n + 16 * ((t / 2) % 2);
        size_t nc = (size_t)(m * ldc);
        float *A = malloc(4 * (size_t)(m * lda)), *B = malloc(4 * (size_t)(K * ldb));
        float *P = malloc(4 * (size_t)(m * ldp)), *ev = malloc(4 * (size_t)m);
        float *mx = malloc(4 * (size_t)m), *want = malloc(4 * nc), *got = malloc(4 * nc);
        tu_fill(A, (size_t)(m * lda), 1100 + (uint64_t)t, -2, 2);
        tu_fill(B, (size_t)(K * ldb), 1300 + (uint64_t)t, -2, 2);
        tu_fill(P, (size_t)(m * ldp), 1500 + (uint64_t)t, 0, 1);
        tu_fill(ev, (size_t)m, 1700 + (uint64_t)t, -3, 3);
        if (t % 4 == 1) ev[m / 2] = -INFINITY;
        if (t % 4 == 2) ev[0] = 400.0f; /* weights below 2^-126: 0 */
        if (t % 4 == 3) A[0] = NAN;     /* a NaN score: row 0 must stay NaN, not become 0 */
        const float scale = 0.37f;
        for (int k = 0; k < 4; k++) {
            if (!ks[k] || !ks[k]->mmexp) continue;
            for (int e = 0; e < 2; e++) {
                for (size_t i = 0; i < nc; i++) want[i] = got[i] = 12345.0f;
                ks[k]->mm(m, n, K, A, lda, 1, B, ldb, want, ldc, 0, NULL);
                if (e == 0) {
                    ks[k]->smax(want, ldc, m, n, NULL, scale, mx);
                    ks[k]->expsum(want, ldc, m, n, ev, NULL);
                    ks[k]->mmexp(m, n, K, A, lda, B, ldb, got, ldc, scale, ev);
                } else {
                    for (int64_t r = 0; r < m; r++)
                        ks[k]->ds(P + r * ldp, want + r * ldc, NULL, ev[r], scale, n);
                    ks[k]->mmds(m, n, K, A, lda, B, ldb, got, ldc, P, ldp, ev, scale);
                }
                TU_CHECK(memcmp(got, want, 4 * nc) == 0,
                         "%s (isa %d): m %lld n %lld K %lld", e ? "mmds" : "mmexp", ks[k]->isa,
                         (long long)m, (long long)n, (long long)K);
                if (t % 4 == 3)
                    for (int64_t j = 0; j < n; j++)
                        TU_CHECK(isnan(got[j]), "%s (isa %d): NaN score lost at column %lld",
                                 e ? "mmds" : "mmexp", ks[k]->isa, (long long)j);
                nt++;
            }
        }
        free(A), free(B), free(P), free(ev), free(mx), free(want), free(got);
    }
    printf("fused epilogues: %d cases identical to mm and the separate passes\n", nt);
}

/* Empty batches, heads or queries (the public calls refuse them; the kernels must not divide
 * by them either): nothing to write, status OK (the tiled and the short-key forward). */
static void empty(attn_ctx *ctx) {
    static float k[300 * 16], v[300 * 16], q[16], o[16];
    const int64_t S_[2] = {100, 300};
    for (int si = 0; si < 2; si++)
        for (int which = 0; which < 3; which++) {
            attn__sdpa_args a;
            memset(&a, 0, sizeof a);
            a.B = which == 0 ? 0 : 1, a.H = which == 1 ? 0 : 2, a.Hkv = which == 1 ? 1 : 2;
            a.L = which == 2 ? 0 : 128, a.S = S_[si], a.D = a.Dv = 16, a.scale = 0.25f;
            a.q = q, a.k = k, a.v = v, a.o = o;
            const int64_t s4[4] = {0, 0, 16, 1};
            memcpy(a.qs, s4, sizeof s4), memcpy(a.ks, s4, sizeof s4);
            memcpy(a.vs, s4, sizeof s4), memcpy(a.os, s4, sizeof s4);
            TU_STATUS(attn__flash_fwd(ctx, &a), ATTN_OK, ctx);
        }
}

/* The causal staircase (flash.c: diagonal tiles computed in strips of rows on their visible
 * columns only, the short-key forward on the keys its row block sees, dK/dV from each key's
 * first row) leaves out exact zeros only.  So the causal kernels must give the same bits as
 * the same kernels with no causal mode and the causal mask written as a BLOCK mask, which
 * compute every tile in full: forward (out, lse) and backward (dq, dk, dv), for every kernel
 * set, 1 and 3 threads, top-left and bottom-right, the short-key forward (S <= 256), tiles
 * cut at odd places (L, S not multiples of the tile sizes), packed (D = 48, (B, L, H, D)
 * layout) and in-place operands, dropout, key lengths on either side of the short-key
 * forward's limits (flash.h). */
static void staircase(attn_ctx *ctx[3]) {
    struct {
        int64_t B, H, L, S, D;
        attn_causal causal;
        float p;
        int blhd;
        int quick; /* run under ATTN_TEST_QUICK too */
    } cs[] = {
        {1, 2, 256, 256, 64, ATTN_CAUSAL_TOP_LEFT, 0.0f, 0, 0},
        {2, 3, 200, 200, 64, ATTN_CAUSAL_TOP_LEFT, 0.2f, 0, 0},
        {1, 2, 96, 90, 64, ATTN_CAUSAL_TOP_LEFT, 0.2f, 1, 1},
        {1, 2, 130, 250, 48, ATTN_CAUSAL_BOTTOM_RIGHT, 0.0f, 0, 1},
        {1, 2, 520, 520, 64, ATTN_CAUSAL_TOP_LEFT, 0.0f, 0, 0},
        {1, 3, 333, 333, 64, ATTN_CAUSAL_TOP_LEFT, 0.0f, 1, 0},
        {2, 2, 300, 457, 48, ATTN_CAUSAL_BOTTOM_RIGHT, 0.15f, 0, 0},
        {1, 2, 700, 650, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 0.0f, 0, 0},
        {1, 2, 1000, 1000, 32, ATTN_CAUSAL_TOP_LEFT, 0.0f, 1, 0},
        /* the tiled forward (K^T past ATTN__FLASH_SHORT_KT, or S past ATTN__FLASH_SHORT_S2) */
        {1, 2, 600, 600, 128, ATTN_CAUSAL_TOP_LEFT, 0.1f, 0, 0},
        {1, 2, 400, 700, 96, ATTN_CAUSAL_BOTTOM_RIGHT, 0.0f, 1, 0},
        {1, 1, 1100, 1100, 64, ATTN_CAUSAL_TOP_LEFT, 0.0f, 0, 0},
        {1, 1, 150, 1040, 16, ATTN_CAUSAL_BOTTOM_RIGHT, 0.1f, 0, 1},
        {1, 1, 100, 300, 240, ATTN_CAUSAL_TOP_LEFT, 0.0f, 1, 1},
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0] && !tu_failures; ci++) {
        if (quick && !cs[ci].quick) continue;
        int64_t B = cs[ci].B, H = cs[ci].H, L = cs[ci].L, S = cs[ci].S, D = cs[ci].D;
        if (quick) H = 1; /* one head: the staircase is each head's own */
        size_t nq = (size_t)(B * H * L * D), nk = (size_t)(B * H * S * D), nl = (size_t)(B * H * L);
        float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nk), *dout = malloc(4 * nq);
        tu_fill(q, nq, 77 + ci, -2, 2), tu_fill(k, nk, 78 + ci, -2, 2);
        tu_fill(v, nk, 79 + ci, -1, 1), tu_fill(dout, nq, 80 + ci, -1, 1);
        unsigned char *blk = malloc((size_t)(L * S));
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < S; j++) {
                int64_t lo, hi;
                attn__sdpa_range(cs[ci].causal, 0, 0, 0, L, S, i, &lo, &hi);
                blk[i * S + j] = j < lo || j > hi;
            }
        attn__sdpa_args a;
        memset(&a, 0, sizeof a);
        a.B = B, a.H = a.Hkv = H, a.L = L, a.S = S, a.D = a.Dv = D;
        a.q = q, a.k = k, a.v = v;
        tcase tc;
        memset(&tc, 0, sizeof tc);
        tc.blhd = cs[ci].blhd;
        strides_of(&tc, H, L, D, a.qs), strides_of(&tc, H, S, D, a.ks);
        strides_of(&tc, H, S, D, a.vs), strides_of(&tc, H, L, D, a.os);
        a.ls[0] = H * L, a.ls[1] = L, a.ls[2] = 1;
        a.scale = 1.0f / sqrtf((float)D);
        if (cs[ci].p > 0) a.dropout_p = cs[ci].p, a.seed = 5 + ci, a.offset = 2;
        attn__sdpa_grads g;
        memset(&g, 0, sizeof g);
        g.dout = dout;
        memcpy(g.dos, a.os, sizeof g.dos), memcpy(g.dqs, a.qs, sizeof g.dqs);
        memcpy(g.dks, a.ks, sizeof g.dks), memcpy(g.dvs, a.vs, sizeof g.dvs);
        float *out[2][6];
        size_t n6[6] = {nq, nl, nq, nk, nk, 0};
        for (int m = 0; m < 2; m++)
            for (int x = 0; x < 5; x++) out[m][x] = calloc(n6[x], 4);
        for (int isa = 0; isa < ATTN__ISA_COUNT && !tu_failures; isa++) {
            if (!tu_each_set(isa, "test_flash: causal staircase")) continue;
            for (int t = quick ? 2 : 0; t < 3; t += 2) {
                TU_CHECK(attn__isa_set(ctx[t], isa), "isa_set");
                for (int m = 0; m < 2; m++) { /* 0: causal mode, 1: the same as a BLOCK mask */
                    attn__sdpa_args f = a;
                    if (m) {
                        f.causal = ATTN_CAUSAL_NONE;
                        f.mask[0].kind = ATTN_MASK_BLOCK, f.mask[0].data = blk;
                        f.mask[0].dtype = ATTN_U8;
                        f.mask[0].stride[2] = S, f.mask[0].stride[3] = 1, f.mask_ncols[0] = S;
                    } else {
                        f.causal = cs[ci].causal;
                    }
                    f.o = out[m][0], f.lse = out[m][1];
                    TU_STATUS(attn__flash_fwd(ctx[t], &f), ATTN_OK, ctx[t]);
                    attn__sdpa_grads gf = g;
                    gf.dq = out[m][2], gf.dk = out[m][3], gf.dv = out[m][4];
                    TU_STATUS(attn__flash_bwd(ctx[t], &f, &gf, f.lse), ATTN_OK, ctx[t]);
                }
                const char *nm[5] = {"out", "lse", "dq", "dk", "dv"};
                for (int x = 0; x < 5; x++)
                    TU_CHECK(memcmp(out[0][x], out[1][x], 4 * n6[x]) == 0,
                             "staircase: causal %s differs from the BLOCK mask's [%s, %d threads, "
                             "L%lld S%lld D%lld causal%d p%.2f]",
                             nm[x], attn__isa_name(isa), t + 1, (long long)L, (long long)S,
                             (long long)D, (int)cs[ci].causal, (double)cs[ci].p);
            }
        }
        for (int m = 0; m < 2; m++)
            for (int x = 0; x < 5; x++) free(out[m][x]);
        free(q), free(k), free(v), free(dout), free(blk);
    }
}

/* A row's bits follow from that row alone (flash.h): the last n rows of a problem, run as
 * a problem of their own (q advanced, L = n), give the bits they have among all L rows, for
 * every kernel set, with no causal mask, bottom-right causal, and a window whose left edge
 * cuts the key-tile groups (key_tiles starts a tile's groups at its first row's first tile).
 * S = 1100 takes the tiled forward and its groups of 512 keys. */
static void rows_alone(attn_ctx *ctx) {
    enum { H = TU_RA_H, L = TU_RA_L, S = TU_RA_S, D = TU_RA_D };
    tu_rows_alone r;
    tu_rows_alone_init(&r);
    for (int isa = 0; isa < ATTN__ISA_COUNT && !tu_failures; isa++) {
        if (!tu_each_set(isa, "test_flash: rows alone")) continue;
        TU_CHECK(attn__isa_set(ctx, isa), "isa_set");
        for (int mode = 0; mode < 3; mode++) {
            if (quick && mode == 1) continue; /* the window (mode 2) is bottom-right causal too */
            attn__sdpa_args all;
            tu_sdpa_args_bhld(&all, H, L, S, D,
                              mode ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE, 0.125f);
            if (mode == 2) all.window = 1, all.window_left = 600, all.window_right = 0;
            all.q = r.q, all.k = r.k, all.v = r.v, all.o = r.o;
            TU_STATUS(attn__flash_fwd(ctx, &all), ATTN_OK, ctx);
            for (int t = 0; t < TU_RA_NL; t++) {
                const int64_t n = tu_rows_alone_lasts[t];
                attn__sdpa_args a = all;
                a.L = n, a.o = r.o1, a.q = r.q + (L - n) * D; /* the last n rows, same strides */
                TU_STATUS(attn__flash_fwd(ctx, &a), ATTN_OK, ctx);
                TU_CHECK(!tu_rows_alone_differ(&r, n),
                         "rows alone (%s, mode %d): the last %lld rows differ from their bits "
                         "among all %d", attn__isa_name(isa), mode, (long long)n, (int)L);
            }
        }
    }
    attn__isa_set(ctx, ATTN__ISA_DEFAULT);
    tu_rows_alone_free(&r);
}

int main(void) {
    /* ATTN_TEST_QUICK (an emulator): every kernel path once, not every size: the random cases
     * (one batch, one key/value head) until each mask kind ran, the cheaper long ones (one
     * key/value head) and staircases (one head, 3 threads), rows alone without the plain
     * bottom-right mode (the window's is), 1 and 3 threads, no plain C set (tu_each_set).
     * The native runs compare every set on every case. */
    quick = tu_quick("test_flash");
    if (quick) nctx = 2, nthr[1] = 3;
    attn_ctx *ctx[3] = {tu_ctx(nthr[0]), tu_ctx(nthr[1]), tu_ctx(nthr[2])};
    errors(ctx[0]);
    empty(ctx[1]);
    transposes();
    rowdots();
    fused_epilogues();
    uint64_t rs = 2024;
    const int64_t lens[] = {1, 3, 17, 63, 64, 65, 127, 129, 5, 100};
    const int64_t dims[] = {1, 8, 16, 17, 64, 33, 64, 80};
    int ncase = 0;
    for (int t = 0; t < (quick ? 21 : 120) && !tu_failures; t++) {
        tcase c;
        memset(&c, 0, sizeof c);
        c.B = 1 + (int64_t)(tu_rand(&rs) % 2), c.Hkv = 1 + (int64_t)(tu_rand(&rs) % 2);
        c.H = c.Hkv * (1 + (int64_t)(tu_rand(&rs) % 3));
        if (quick) c.B = 1, c.H /= c.Hkv, c.Hkv = 1; /* grouped heads still: H of 1 to 3 */
        c.L = lens[tu_rand(&rs) % 10], c.S = lens[tu_rand(&rs) % 10];
        c.D = dims[tu_rand(&rs) % 8], c.Dv = tu_rand(&rs) % 3 ? c.D : dims[tu_rand(&rs) % 8];
        c.causal = (attn_causal)(t % 3);
        c.maskcfg = (t / 3) % 7;
        c.dropout = t % 5 == 4 ? 0.25f : 0.0f;
        c.blhd = t % 4 == 1;
        c.no_dq = t % 11 == 7;
        run_case(ctx, &c, 1000 + (uint64_t)t);
        ncase++;
    }
    /* long rows (tolerance at S = 1000), many tiles, causal both ways, dropout; causal
     * staircases of the short-key forward (S <= 256) and of the tiled kernels, operands in
     * place (D a multiple of 16, unit stride) or packed */
    tcase big[] = {
        {1, 2, 2, 256, 256, 64, 64, ATTN_CAUSAL_TOP_LEFT, 0, 0.0f, 0, 0, 0},
        {1, 3, 3, 250, 250, 64, 64, ATTN_CAUSAL_TOP_LEFT, 0, 0.2f, 1, 0, 0},
        {1, 2, 2, 520, 520, 64, 64, ATTN_CAUSAL_TOP_LEFT, 0, 0.0f, 0, 0, 0},
        {1, 2, 2, 520, 520, 128, 128, ATTN_CAUSAL_TOP_LEFT, 0, 0.0f, 0, 0, 0},
        {1, 2, 1, 300, 1100, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0.1f, 0, 0, 0},
        {2, 3, 1, 400, 333, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 3, 0.2f, 0, 0, 0},
        {1, 2, 2, 300, 300, 80, 48, ATTN_CAUSAL_TOP_LEFT, 0, 0.0f, 1, 0, 1},
        {1, 2, 1, 70, 1000, 64, 64, ATTN_CAUSAL_NONE, 0, 0.0f, 0, 0, 0},
        {1, 2, 2, 200, 300, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 2, 0.1f, 0, 0, 0},
        {2, 4, 1, 300, 200, 32, 48, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0.0f, 1, 0, 0},
        {1, 3, 3, 257, 257, 64, 64, ATTN_CAUSAL_TOP_LEFT, 0, 0.0f, 0, 0, 0},
        {2, 2, 2, 130, 190, 64, 64, ATTN_CAUSAL_TOP_LEFT, 4, 0.0f, 0, 0, 0},
        /* wide heads (D + Dv > 256): key tiles in groups of 2 (Gemma 3's D = 256) */
        {1, 2, 1, 300, 700, 256, 256, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0.0f, 0, 0, 0},
        {1, 2, 2, 260, 600, 160, 112, ATTN_CAUSAL_NONE, 2, 0.1f, 1, 0, 0},
        /* uniform weights: the kept set must be the reference's exactly */
        {1, 2, 1, 33, 37, 16, 16, ATTN_CAUSAL_NONE, 0, 0.3f, 0, 1, 0},
        {2, 2, 2, 70, 130, 8, 8, ATTN_CAUSAL_NONE, 0, 0.5f, 0, 1, 0},
    };
    /* the ones ATTN_TEST_QUICK keeps */
    static const unsigned char big_quick[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1};
    for (size_t i = 0; i < sizeof big / sizeof big[0] && !tu_failures; i++) {
        if (quick && !big_quick[i]) continue;
        tcase b = big[i];
        if (quick) b.H /= b.Hkv, b.Hkv = 1; /* one key/value head (the batches of masks kept) */
        run_case(ctx, &b, 5000 + i);
        ncase++;
    }
    staircase(ctx);
    rows_alone(ctx[1]);
    printf("test_flash: %d cases; worst relative error forward %.2g, backward %.2g\n", ncase,
           worst_fwd, worst_bwd);
    for (int c = 0; c < 3; c++) attn_ctx_free(ctx[c]);
    return tu_finish("test_flash");
}
