/* Sliding window, ALiBi and logit soft-capping (attn_sdpa_options.window_left/right,
 * alibi_slopes, softcap; attn__sdpa_args.window, alibi, softcap) in every SDPA path.
 *
 *  1. The float reference against independent formulations: the window and ALiBi written by
 *     this test as an additive mask (ATTN_MASK_ADD with -inf and -slope |i + S - L - j|) on the
 *     reference without the features (the same float operations, so equal to 1e-6 and in
 *     practice bit for bit), forward and backward; the soft cap against a direct double
 *     computation written here (tolerance 2e-5: the reference rounds the score to float).
 *  2. The double reference backward against central finite differences (step 2^-20,
 *     tolerance 1e-6 relative to max(1, max|grad|)) for each feature alone and together.
 *  3. The fused kernels (attn__flash_fwd / attn__flash_bwd on every instruction set this CPU
 *     runs) and the layers' kernels (attn__sdpa with and without weights, attn__sdpa_bwd: row
 *     kernels or fused by size) against the float reference on random shapes that are not
 *     multiples of the 96 x 64 tiles (1, 7, 95, 97, 200, 333, ...), GQA, both causal
 *     alignments, masks, dropout, lse, windows that leave some or all rows empty, each feature
 *     alone and all combined.  Tolerances as test_flash.c: forward 2e-5, backward 1e-4 of
 *     max(1, max|ref|).  Fully masked rows: zeros and lse = -inf, never NaN.  1, 2 and 3
 *     threads bit-identical.
 *  4. The public functions: options refused with ATTN_E_INVALID (negative, NaN or infinite
 *     softcap, NaN or infinite slope), defaults, a negative window = unlimited, and attn_sdpa /
 *     attn_sdpa_backward against the reference.
 * A test can fail: a window edge off by one changes an output by a whole key's weight (>= 1e-3
 * here), a missing (1 - tanh^2) changes dq by O(1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/dispatch.h"
#include "../src/kernels/flash.h"
#include "../src/kernels/kernels.h"
#include "../src/kernels/ref/ref_f64.h"
#include "testutil.h"

#define EQ_TOL 1e-6  /* features vs their mask formulation (same float operations) */
#define CAP_TOL 2e-5 /* float reference vs the double soft-cap computation */
#define FWD_TOL 2e-5
#define BWD_TOL 1e-4
#define FD_H (1.0 / 1048576.0)
#define FD_TOL 1e-6

static double worst_eq, worst_cap, worst_fd, worst_fwd, worst_bwd;

static void contig4(int64_t *st, const int64_t *sh) {
    st[3] = 1;
    for (int d = 2; d >= 0; d--) st[d] = st[d + 1] * sh[d + 1];
}

/* The window as attn.h defines it, written independently of attn__sdpa_range. */
static int in_window(int window, int64_t wl, int64_t wr, int64_t L, int64_t S, int64_t i,
                     int64_t j) {
    if (!window) return 1;
    int64_t c = i + S - L;
    if (wl >= 0 && j < c - wl) return 0;
    if (wr >= 0 && j > c + wr) return 0;
    return 1;
}
static int in_causal(attn_causal causal, int64_t L, int64_t S, int64_t i, int64_t j) {
    if (causal == ATTN_CAUSAL_TOP_LEFT) return j <= i;
    if (causal == ATTN_CAUSAL_BOTTOM_RIGHT) return j <= i + S - L;
    return 1;
}

static void track(double *worst, const float *got, const float *ref, size_t n) {
    double m, e = tu_max_err(got, ref, n, &m) / (m > 1 ? m : 1);
    if (!(e <= *worst)) *worst = e;
}
static int close_t(const char *name, const char *what, const float *got, const float *ref,
                   size_t n, double tol, double *worst) {
    char w[240];
    snprintf(w, sizeof w, "%s %s", name, what);
    track(worst, got, ref, n);
    return tu_close(w, got, ref, n, tol);
}

/* ---- one problem: data, features, masks ---------------------------------------------------- */
typedef struct tcase {
    int64_t B, H, Hkv, L, S, D, Dv;
    attn_causal causal;
    int window;
    int64_t wl, wr;
    int alibi;
    float softcap;
    int mask;      /* 0 none; 1 KEEP [L, S] in slot 1; 2 ADD [B, H, L, S] in 0 + BLOCK [B, S] */
    float dropout;
    int no_dq;
} tcase;

typedef struct prob {
    tcase c;
    size_t nq, nk, nv, no, nl, nw;
    float *q, *k, *v, *dout, *slopes, *fm;
    unsigned char *um;
    attn__sdpa_args a;
    attn__sdpa_grads g;
} prob;

static void prob_make(prob *p, const tcase *c, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->c = *c;
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, L = c->L, S = c->S, D = c->D, Dv = c->Dv;
    p->nq = (size_t)(B * H * L * D), p->nk = (size_t)(B * Hkv * S * D);
    p->nv = (size_t)(B * Hkv * S * Dv), p->no = (size_t)(B * H * L * Dv);
    p->nl = (size_t)(B * H * L), p->nw = (size_t)(B * H * L * S);
    p->q = malloc(4 * p->nq + 4), p->k = malloc(4 * p->nk + 4), p->v = malloc(4 * p->nv + 4);
    p->dout = malloc(4 * p->no + 4), p->slopes = malloc(4 * (size_t)H);
    tu_fill(p->q, p->nq, seed + 1, -2, 2), tu_fill(p->k, p->nk, seed + 2, -2, 2);
    tu_fill(p->v, p->nv, seed + 3, -1, 1), tu_fill(p->dout, p->no, seed + 4, -1, 1);
    /* ALiBi's geometric slopes 2^(-8 (h+1) / H), and one negative slope for generality */
    for (int64_t h = 0; h < H; h++) p->slopes[h] = powf(2.0f, -8.0f * (float)(h + 1) / (float)H);
    if (H > 2) p->slopes[1] = -0.03f;
    attn__sdpa_args *a = &p->a;
    a->B = B, a->H = H, a->Hkv = Hkv, a->L = L, a->S = S, a->D = D, a->Dv = Dv;
    a->q = p->q, a->k = p->k, a->v = p->v;
    int64_t qsh[4] = {B, H, L, D}, ksh[4] = {B, Hkv, S, D}, vsh[4] = {B, Hkv, S, Dv},
            osh[4] = {B, H, L, Dv};
    contig4(a->qs, qsh), contig4(a->ks, ksh), contig4(a->vs, vsh), contig4(a->os, osh);
    a->ls[0] = H * L, a->ls[1] = L, a->ls[2] = 1;
    a->ws[0] = H * L * S, a->ws[1] = L * S, a->ws[2] = S, a->ws[3] = 1;
    a->causal = c->causal;
    a->scale = 1.0f / sqrtf((float)D);
    a->window = c->window, a->window_left = c->wl, a->window_right = c->wr;
    a->alibi = c->alibi ? p->slopes : NULL;
    a->softcap = c->softcap;
    if (c->dropout > 0) a->dropout_p = c->dropout, a->seed = seed * 3 + 1, a->offset = seed % 7;
    a->mask_ncols[0] = a->mask_ncols[1] = S;
    uint64_t rs = seed * 11 + 5;
    p->fm = malloc(4 * p->nw + 4), p->um = malloc((size_t)(L * S + B * S) + 1);
    for (size_t i = 0; i < p->nw; i++)
        p->fm[i] = (float)((double)(tu_rand(&rs) % 2001) / 1000.0 - 1.0);
    for (int64_t i = 0; i < L * S + B * S; i++) p->um[i] = tu_rand(&rs) % 5 != 0;
    if (c->mask == 1) {
        attn__mask4 *m = &a->mask[1];
        m->kind = ATTN_MASK_KEEP, m->data = p->um, m->dtype = ATTN_BOOL;
        m->stride[2] = S, m->stride[3] = 1;
        for (int64_t i = 0; i < L; i += 4) memset(p->um + i * S, 0, (size_t)S); /* masked rows */
    } else if (c->mask == 2) {
        attn__mask4 *m0 = &a->mask[0], *m1 = &a->mask[1];
        m0->kind = ATTN_MASK_ADD, m0->data = p->fm, m0->dtype = ATTN_F32;
        m0->stride[0] = H * L * S, m0->stride[1] = L * S, m0->stride[2] = S, m0->stride[3] = 1;
        unsigned char *u = p->um + L * S;
        for (int64_t i = 0; i < B * S; i++) u[i] = tu_rand(&rs) % 4 == 0;
        m1->kind = ATTN_MASK_BLOCK, m1->data = u, m1->dtype = ATTN_BOOL;
        m1->stride[0] = S, m1->stride[3] = 1;
    }
    attn__sdpa_grads *g = &p->g;
    g->dout = p->dout;
    memcpy(g->dos, a->os, sizeof g->dos), memcpy(g->dqs, a->qs, sizeof g->dqs);
    memcpy(g->dks, a->ks, sizeof g->dks), memcpy(g->dvs, a->vs, sizeof g->dvs);
}

static void prob_free(prob *p) {
    free(p->q), free(p->k), free(p->v), free(p->dout), free(p->slopes), free(p->fm), free(p->um);
}

static void describe(const tcase *c, const char *isa, char *w, size_t n) {
    snprintf(w, n,
             "[%s B%lld H%lld/%lld L%lld S%lld D%lld/%lld causal%d win%d(%lld,%lld) alibi%d "
             "cap%g mask%d p%.2f]",
             isa, (long long)c->B, (long long)c->H, (long long)c->Hkv, (long long)c->L,
             (long long)c->S, (long long)c->D, (long long)c->Dv, (int)c->causal, c->window,
             (long long)c->wl, (long long)c->wr, c->alibi, (double)c->softcap, c->mask,
             (double)c->dropout);
}

/* Reference outputs (float) of a problem. */
typedef struct outs {
    float *o, *lse, *w, *dq, *dk, *dv;
} outs;
static void outs_alloc(outs *r, const prob *p, int weights) {
    r->o = malloc(4 * p->no + 4), r->lse = malloc(4 * p->nl + 4);
    r->w = weights ? malloc(4 * p->nw + 4) : NULL;
    r->dq = calloc(p->nq + 1, 4), r->dk = calloc(p->nk + 1, 4), r->dv = calloc(p->nv + 1, 4);
}
static void outs_free(outs *r) {
    free(r->o), free(r->lse), free(r->w), free(r->dq), free(r->dk), free(r->dv);
}
static void ref_run(const prob *p, const attn__sdpa_args *args, outs *r) {
    float *scratch = malloc(4 * 4 * (size_t)p->c.S + 4);
    attn__sdpa_args a = *args;
    a.o = r->o, a.lse = r->lse, a.w = r->w;
    attn__sdpa_ref(&a, scratch);
    attn__sdpa_grads g = p->g;
    g.dq = p->c.no_dq ? NULL : r->dq, g.dk = r->dk, g.dv = r->dv;
    attn__sdpa_bwd_ref(&a, &g, scratch);
    free(scratch);
}

/* ---- 1. the reference against independent formulations ------------------------------------ */
/* Window and ALiBi as an additive mask in slot 0 (slot 1 keeps the case's KEEP mask). */
static void ref_vs_mask(const tcase *c, uint64_t seed) {
    prob p;
    prob_make(&p, c, seed);
    int64_t B = c->B, H = c->H, L = c->L, S = c->S;
    char what[240];
    describe(c, "ref", what, sizeof what);
    float *eq = malloc(4 * p.nw + 4);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j < S; j++) {
                    int64_t d = i + S - L - j;
                    float bias = c->alibi ? -(p.slopes[h] * (float)(d < 0 ? -d : d)) : 0.0f;
                    eq[((b * H + h) * L + i) * S + j] =
                        in_window(c->window, c->wl, c->wr, L, S, i, j) ? bias : -INFINITY;
                }
    attn__sdpa_args m = p.a;
    m.window = 0, m.alibi = NULL;
    m.mask[0].kind = ATTN_MASK_ADD, m.mask[0].data = eq, m.mask[0].dtype = ATTN_F32;
    m.mask[0].stride[0] = H * L * S, m.mask[0].stride[1] = L * S, m.mask[0].stride[2] = S;
    m.mask[0].stride[3] = 1;
    outs r, e;
    outs_alloc(&r, &p, 1), outs_alloc(&e, &p, 1);
    ref_run(&p, &p.a, &r);
    ref_run(&p, &m, &e);
    close_t("ref out vs mask", what, r.o, e.o, p.no, EQ_TOL, &worst_eq);
    close_t("ref lse vs mask", what, r.lse, e.lse, p.nl, EQ_TOL, &worst_eq);
    close_t("ref weights vs mask", what, r.w, e.w, p.nw, EQ_TOL, &worst_eq);
    if (!c->no_dq) close_t("ref dq vs mask", what, r.dq, e.dq, p.nq, EQ_TOL, &worst_eq);
    close_t("ref dk vs mask", what, r.dk, e.dk, p.nk, EQ_TOL, &worst_eq);
    close_t("ref dv vs mask", what, r.dv, e.dv, p.nv, EQ_TOL, &worst_eq);
    free(eq);
    outs_free(&r), outs_free(&e);
    prob_free(&p);
}

/* The forward of the soft cap (with the window, ALiBi and the case's masks) computed here in
 * double: x = cap tanh(scale q.k / cap) - slope |d| + masks, softmax, W V. */
static void ref_vs_double(const tcase *c, uint64_t seed) {
    prob p;
    prob_make(&p, c, seed);
    const attn__sdpa_args *a = &p.a;
    int64_t B = c->B, H = c->H, L = c->L, S = c->S, D = c->D, Dv = c->Dv, grp = H / c->Hkv;
    char what[240];
    describe(c, "ref vs double", what, sizeof what);
    outs r;
    outs_alloc(&r, &p, 0);
    ref_run(&p, a, &r);
    float *o = malloc(4 * p.no + 4), *lse = malloc(4 * p.nl + 4);
    double *x = malloc(8 * (size_t)S);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) {
                const float *qi = p.q + ((b * H + h) * L + i) * D;
                double mx = -INFINITY;
                for (int64_t j = 0; j < S; j++) {
                    x[j] = -INFINITY;
                    if (!in_window(c->window, c->wl, c->wr, L, S, i, j) ||
                        !in_causal(c->causal, L, S, i, j))
                        continue;
                    const float *kj = p.k + ((b * c->Hkv + h / grp) * S + j) * D;
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += (double)qi[d] * kj[d];
                    double s = (double)a->scale * dot;
                    if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
                    int64_t dd = i + S - L - j;
                    if (c->alibi) s -= (double)p.slopes[h] * (double)(dd < 0 ? -dd : dd);
                    for (int m = 0; m < 2; m++)
                        if (a->mask[m].kind != ATTN_MASK_NONE)
                            s += attn__mask_at(&a->mask[m], b, h, i, j);
                    x[j] = s;
                    if (s > mx) mx = s;
                }
                double sum = 0;
                for (int64_t j = 0; j < S; j++) sum += x[j] == -INFINITY ? 0 : exp(x[j] - mx);
                lse[(b * H + h) * L + i] = mx == -INFINITY ? -INFINITY : (float)(mx + log(sum));
                for (int64_t e = 0; e < Dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < S; j++)
                        if (x[j] != -INFINITY)
                            acc += exp(x[j] - mx) / sum *
                                   p.v[((b * c->Hkv + h / grp) * S + j) * Dv + e];
                    o[((b * H + h) * L + i) * Dv + e] = (float)acc;
                }
            }
    close_t("ref out vs double", what, r.o, o, p.no, CAP_TOL, &worst_cap);
    close_t("ref lse vs double", what, r.lse, lse, p.nl, CAP_TOL, &worst_cap);
    free(o), free(lse), free(x);
    outs_free(&r);
    prob_free(&p);
}

/* ---- 2. the double reference backward against finite differences ---------------------------- */
typedef struct fdu {
    attn__sdpa_args_f64 a;
    double *o, *G, *scratch;
    size_t no;
} fdu;

static double fd_loss(fdu *u) {
    attn__sdpa_ref_f64(&u->a, u->scratch);
    double s = 0;
    for (size_t i = 0; i < u->no; i++) s += u->o[i] * u->G[i];
    return s;
}

static double *drand(size_t n, uint64_t seed, float lo, float hi) {
    float *f = malloc(4 * n + 4);
    double *d = malloc(8 * n + 8);
    tu_fill(f, n, seed, lo, hi);
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}

static void fd_check(const char *name, const char *what, fdu *u, double *x, size_t n,
                     const double *an) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double save = x[i];
        x[i] = save + FD_H;
        double lp = fd_loss(u);
        x[i] = save - FD_H;
        double lm = fd_loss(u);
        x[i] = save;
        double fd = (lp - lm) / (2 * FD_H), d = fabs(fd - an[i]);
        if (isnan(d)) d = INFINITY;
        if (d > e) e = d;
        if (fabs(an[i]) > m) m = fabs(an[i]);
    }
    double r = e / (m > 1 ? m : 1);
    if (!(r <= worst_fd)) worst_fd = r;
    TU_CHECK(r <= FD_TOL, "%s %s: finite differences vs analytic: rel err %.3g", name, what, r);
}

static void fd_case(const tcase *c, uint64_t seed) {
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, L = c->L, S = c->S, D = c->D, Dv = c->Dv;
    size_t nq = (size_t)(B * H * L * D), nk = (size_t)(B * Hkv * S * D),
           nv = (size_t)(B * Hkv * S * Dv), no = (size_t)(B * H * L * Dv);
    int64_t qsh[4] = {B, H, L, D}, ksh[4] = {B, Hkv, S, D}, vsh[4] = {B, Hkv, S, Dv},
            osh[4] = {B, H, L, Dv};
    double *q = drand(nq, seed, -1.5f, 1.5f), *k = drand(nk, seed + 1, -1.5f, 1.5f);
    double *v = drand(nv, seed + 2, -1, 1), *slopes = drand((size_t)H, seed + 3, 0.05f, 0.6f);
    fdu u;
    memset(&u, 0, sizeof u);
    u.G = drand(no, seed + 4, -1, 1), u.o = calloc(no, 8), u.no = no;
    u.scratch = calloc(4 * (size_t)S, 8);
    attn__sdpa_args_f64 *a = &u.a;
    a->B = B, a->H = H, a->Hkv = Hkv, a->L = L, a->S = S, a->D = D, a->Dv = Dv;
    a->q = q, a->k = k, a->v = v, a->o = u.o;
    contig4(a->qs, qsh), contig4(a->ks, ksh), contig4(a->vs, vsh), contig4(a->os, osh);
    a->causal = c->causal, a->scale = 0.7;
    a->window = c->window, a->window_left = c->wl, a->window_right = c->wr;
    a->alibi = c->alibi ? slopes : NULL;
    a->softcap = c->softcap;
    a->mask_ncols[0] = a->mask_ncols[1] = S;
    if (c->dropout > 0) a->dropout_p = c->dropout, a->seed = seed, a->offset = 3;
    double *dq = calloc(nq, 8), *dk = calloc(nk, 8), *dv = calloc(nv, 8);
    attn__sdpa_grads_f64 g;
    memset(&g, 0, sizeof g);
    g.dout = u.G, g.dq = dq, g.dk = dk, g.dv = dv;
    contig4(g.dos, osh), contig4(g.dqs, qsh), contig4(g.dks, ksh), contig4(g.dvs, vsh);
    attn__sdpa_bwd_ref_f64(a, &g, u.scratch);
    char what[240];
    describe(c, "f64", what, sizeof what);
    fd_check("dq", what, &u, q, nq, dq);
    fd_check("dk", what, &u, k, nk, dk);
    fd_check("dv", what, &u, v, nv, dv);
    free(q), free(k), free(v), free(slopes), free(u.G), free(u.o), free(u.scratch);
    free(dq), free(dk), free(dv);
}

/* ---- 3. fused and row kernels against the float reference ----------------------------------- */
static void check_masked_rows(const char *name, const char *what, const float *lse_ref,
                              const float *o, const float *lse, int64_t rows, int64_t Dv) {
    int bad = 0;
    for (int64_t r = 0; r < rows; r++)
        if (lse_ref[r] == -INFINITY) {
            if (lse && lse[r] != -INFINITY) bad++;
            for (int64_t e = 0; e < Dv; e++) bad += o[r * Dv + e] != 0.0f;
        }
    TU_CHECK(!bad, "%s %s: fully masked rows not zero / lse not -inf (%d)", name, what, bad);
}

static int64_t masked_rows_total;

/* the thread counts of the contexts fast_case runs on (1 and 3 alone under ATTN_TEST_QUICK) */
static int nctx = 3, nthr[3] = {1, 2, 3};

static void fast_case(attn_ctx *ctx[3], const tcase *c, uint64_t seed) {
    prob p;
    prob_make(&p, c, seed);
    outs r;
    outs_alloc(&r, &p, 1);
    ref_run(&p, &p.a, &r);
    for (size_t i = 0; i < p.nl; i++) masked_rows_total += r.lse[i] == -INFINITY;
    outs f[3], f2;
    for (int t = 0; t < 3; t++) outs_alloc(&f[t], &p, 1);
    outs_alloc(&f2, &p, 0);
    char what[240];
    /* fused, every instruction set, 1-3 threads; the backward also with delta recomputed */
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_each_set(isa, "test_sdpa_features: fused kernels")) continue;
        describe(c, attn__isa_name(isa), what, sizeof what);
        for (int t = 0; t < nctx; t++) {
            TU_CHECK(attn__isa_set(ctx[t], isa), "isa_set");
            attn__sdpa_args a = p.a;
            a.o = f[t].o, a.lse = f[t].lse;
            TU_STATUS(attn__flash_fwd(ctx[t], &a), ATTN_OK, ctx[t]);
            attn__sdpa_grads g = p.g;
            g.dq = c->no_dq ? NULL : f[t].dq, g.dk = f[t].dk, g.dv = f[t].dv;
            TU_STATUS(attn__flash_bwd(ctx[t], &a, &g, f[t].lse), ATTN_OK, ctx[t]);
            if (t == 0) {
                a.o = NULL;
                g.dq = c->no_dq ? NULL : f2.dq, g.dk = f2.dk, g.dv = f2.dv;
                TU_STATUS(attn__flash_bwd(ctx[t], &a, &g, f[t].lse), ATTN_OK, ctx[t]);
            }
        }
        close_t("flash out", what, f[0].o, r.o, p.no, FWD_TOL, &worst_fwd);
        close_t("flash lse", what, f[0].lse, r.lse, p.nl, FWD_TOL, &worst_fwd);
        check_masked_rows("flash", what, r.lse, f[0].o, f[0].lse, (int64_t)p.nl, c->Dv);
        if (!c->no_dq) close_t("flash dq", what, f[0].dq, r.dq, p.nq, BWD_TOL, &worst_bwd);
        close_t("flash dk", what, f[0].dk, r.dk, p.nk, BWD_TOL, &worst_bwd);
        close_t("flash dv", what, f[0].dv, r.dv, p.nv, BWD_TOL, &worst_bwd);
        if (!c->no_dq) close_t("flash dq(no o)", what, f2.dq, r.dq, p.nq, BWD_TOL, &worst_bwd);
        close_t("flash dk(no o)", what, f2.dk, r.dk, p.nk, BWD_TOL, &worst_bwd);
        close_t("flash dv(no o)", what, f2.dv, r.dv, p.nv, BWD_TOL, &worst_bwd);
        for (int t = 1; t < nctx; t++) {
            TU_CHECK(!memcmp(f[t].o, f[0].o, 4 * p.no) && !memcmp(f[t].lse, f[0].lse, 4 * p.nl),
                     "flash forward differs with %d threads %s", nthr[t], what);
            TU_CHECK(!memcmp(f[t].dq, f[0].dq, 4 * p.nq) && !memcmp(f[t].dk, f[0].dk, 4 * p.nk) &&
                         !memcmp(f[t].dv, f[0].dv, 4 * p.nv),
                     "flash backward differs with %d threads %s", nthr[t], what);
        }
    }
    /* the layers' entry points on the best set: attn__sdpa with the weights (row kernels),
     * without (fused from 64 x 64), attn__sdpa_bwd (row kernels below 64 x 64, else fused) */
    describe(c, "attn__sdpa", what, sizeof what);
    for (int t = 0; t < nctx; t++) {
        attn__isa_set(ctx[t], ATTN__ISA_DEFAULT);
        attn__sdpa_args a = p.a;
        a.o = f[t].o, a.lse = f[t].lse, a.w = f[t].w;
        TU_STATUS(attn__sdpa(ctx[t], &a), ATTN_OK, ctx[t]);
        a.w = NULL, a.o = f2.o, a.lse = f2.lse;
        if (t == 0) TU_STATUS(attn__sdpa(ctx[t], &a), ATTN_OK, ctx[t]);
        attn__sdpa_grads g = p.g;
        g.dq = c->no_dq ? NULL : f[t].dq, g.dk = f[t].dk, g.dv = f[t].dv;
        TU_STATUS(attn__sdpa_bwd(ctx[t], &p.a, &g), ATTN_OK, ctx[t]);
    }
    close_t("rows out", what, f[0].o, r.o, p.no, FWD_TOL, &worst_fwd);
    close_t("rows lse", what, f[0].lse, r.lse, p.nl, FWD_TOL, &worst_fwd);
    close_t("rows weights", what, f[0].w, r.w, p.nw, FWD_TOL, &worst_fwd);
    check_masked_rows("rows", what, r.lse, f[0].o, f[0].lse, (int64_t)p.nl, c->Dv);
    close_t("sdpa out", what, f2.o, r.o, p.no, FWD_TOL, &worst_fwd);
    close_t("sdpa lse", what, f2.lse, r.lse, p.nl, FWD_TOL, &worst_fwd);
    check_masked_rows("sdpa", what, r.lse, f2.o, f2.lse, (int64_t)p.nl, c->Dv);
    if (!c->no_dq) close_t("sdpa_bwd dq", what, f[0].dq, r.dq, p.nq, BWD_TOL, &worst_bwd);
    close_t("sdpa_bwd dk", what, f[0].dk, r.dk, p.nk, BWD_TOL, &worst_bwd);
    close_t("sdpa_bwd dv", what, f[0].dv, r.dv, p.nv, BWD_TOL, &worst_bwd);
    for (int t = 1; t < nctx; t++) {
        TU_CHECK(!memcmp(f[t].o, f[0].o, 4 * p.no) && !memcmp(f[t].w, f[0].w, 4 * p.nw),
                 "attn__sdpa differs with %d threads %s", nthr[t], what);
        TU_CHECK(!memcmp(f[t].dq, f[0].dq, 4 * p.nq) && !memcmp(f[t].dk, f[0].dk, 4 * p.nk) &&
                     !memcmp(f[t].dv, f[0].dv, 4 * p.nv),
                 "attn__sdpa_bwd differs with %d threads %s", nthr[t], what);
    }
    for (int t = 0; t < 3; t++) outs_free(&f[t]);
    outs_free(&f2), outs_free(&r);
    prob_free(&p);
}

/* The soft-cap microkernel of every set against tanh in double: t = s / cap within 6e-7 of
 * |tanh| (relative, so the small-argument branch is checked too), 1 - t^2 within 1e-6, -inf
 * kept with derivative 0, the row maximum exact. */
static double worst_tanh;
static void microkernel_softcap(void) {
    enum { N = 64, ROWS = 40 };
    static float s[ROWS * N], dt[ROWS * N], x0[ROWS * N], mx[ROWS];
    const float caps[3] = {1.0f, 7.5f, 50.0f};
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_sdpa_features: soft-cap microkernel")) continue;
        const attn__flash_kernels *kr = isa == ATTN__ISA_REF      ? attn__flash_kernels_ref()
                                        : isa == ATTN__ISA_AVX2   ? attn__flash_kernels_avx2()
                                        : isa == ATTN__ISA_NEON   ? attn__flash_kernels_neon()
                                                                  : attn__flash_kernels_avx512();
        if (!kr) continue;
        for (int ci = 0; ci < 3; ci++) {
            float cap = caps[ci];
            /* |x| / cap from 1e-8 to ~30, log spaced, both signs, zeros and -inf */
            for (int i = 0; i < ROWS * N; i++) {
                double y = 1e-8 * pow(10.0, 9.5 * (double)i / (ROWS * N));
                x0[i] = (float)((i % 2 ? -y : y) * cap);
                if (i % 37 == 5) x0[i] = -INFINITY;
                if (i % 53 == 7) x0[i] = 0.0f;
            }
            memcpy(s, x0, sizeof s);
            kr->softcap(s, N, ROWS, N, cap, dt, mx);
            int bad = 0;
            for (int r = 0; r < ROWS; r++) {
                float m = -INFINITY;
                for (int j = 0; j < N; j++) {
                    int i = r * N + j;
                    m = s[i] > m ? s[i] : m;
                    if (x0[i] == -INFINITY) {
                        bad += s[i] != -INFINITY || dt[i] != 0.0f;
                        continue;
                    }
                    double t = tanh((double)x0[i] / cap), got = (double)s[i] / cap;
                    double e = fabs(got - t) / (fabs(t) > 1e-30 ? fabs(t) : 1e-30);
                    if (x0[i] == 0.0f) e = got == 0.0 ? 0.0 : INFINITY;
                    if (!(e <= worst_tanh)) worst_tanh = e;
                    bad += !(e <= 6e-7) || !(fabs(dt[i] - (1.0 - t * t)) <= 1e-6);
                }
                bad += m != mx[r];
            }
            TU_CHECK(!bad, "softcap microkernel [%s cap %g]: %d bad values", attn__isa_name(isa),
                     (double)cap, bad);
        }
    }
}

/* ---- 4. the public functions --------------------------------------------------------------- */
static attn_tensor tens(float *d, int64_t a, int64_t b, int64_t c, int64_t e) {
    return attn_view4(d, a, b, c, e);
}

static void public_api(attn_ctx *ctx) {
    attn_sdpa_options o = attn_sdpa_defaults();
    TU_CHECK(!o.window && o.window_left == -1 && o.window_right == -1 && !o.alibi_slopes &&
                 o.softcap == 0,
             "defaults");
    tcase c = {2, 4, 2, 37, 150, 24, 16, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 20, 3, 1, 3.0f, 0, 0, 0};
    prob p;
    prob_make(&p, &c, 99);
    float *out = malloc(4 * p.no), *lse = malloc(4 * p.nl), *dq = malloc(4 * p.nq),
          *dk = malloc(4 * p.nk), *dv = malloc(4 * p.nv);
    attn_tensor Q = tens(p.q, c.B, c.H, c.L, c.D), K = tens(p.k, c.B, c.Hkv, c.S, c.D),
                V = tens(p.v, c.B, c.Hkv, c.S, c.Dv), O = tens(out, c.B, c.H, c.L, c.Dv),
                DO = tens(p.dout, c.B, c.H, c.L, c.Dv), DQ = tens(dq, c.B, c.H, c.L, c.D),
                DK = tens(dk, c.B, c.Hkv, c.S, c.D), DV = tens(dv, c.B, c.Hkv, c.S, c.Dv);
    attn_tensor LSE = attn_view3(lse, c.B, c.H, c.L);
    /* refused */
    float bad_caps[3] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        o = attn_sdpa_defaults();
        o.softcap = bad_caps[i];
        TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &o, &O, NULL, NULL), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_sdpa_backward(ctx, &Q, &K, &V, NULL, &o, &DO, &DQ, NULL, NULL, NULL),
                  ATTN_E_INVALID, ctx);
    }
    float bad_slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    float bad_vals[3] = {NAN, -INFINITY, -1e38f}; /* the last overflows slope * distance */
    for (int i = 0; i < 3; i++) {
        o = attn_sdpa_defaults();
        bad_slopes[3] = bad_vals[i]; /* the last head: all H values are read */
        o.alibi_slopes = bad_slopes;
        TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &o, &O, NULL, NULL), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_sdpa_backward(ctx, &Q, &K, &V, NULL, &o, &DO, &DQ, NULL, NULL, NULL),
                  ATTN_E_INVALID, ctx);
    }
    /* against the reference, all features at once */
    o = attn_sdpa_defaults();
    o.causal = c.causal, o.window = 1, o.window_left = c.wl, o.window_right = c.wr;
    o.alibi_slopes = p.slopes, o.softcap = c.softcap;
    outs r;
    outs_alloc(&r, &p, 0);
    ref_run(&p, &p.a, &r);
    char what[240];
    describe(&c, "public", what, sizeof what);
    if (TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &o, &O, NULL, &LSE), ATTN_OK, ctx)) {
        close_t("attn_sdpa out", what, out, r.o, p.no, FWD_TOL, &worst_fwd);
        close_t("attn_sdpa lse", what, lse, r.lse, p.nl, FWD_TOL, &worst_fwd);
    }
    if (TU_STATUS(attn_sdpa_backward(ctx, &Q, &K, &V, NULL, &o, &DO, &DQ, &DK, &DV, NULL),
                  ATTN_OK, ctx)) {
        close_t("attn_sdpa_backward dq", what, dq, r.dq, p.nq, BWD_TOL, &worst_bwd);
        close_t("attn_sdpa_backward dk", what, dk, r.dk, p.nk, BWD_TOL, &worst_bwd);
        close_t("attn_sdpa_backward dv", what, dv, r.dv, p.nv, BWD_TOL, &worst_bwd);
    }
    /* any negative window value is unlimited: (-7, -3) is no window at all */
    o = attn_sdpa_defaults();
    o.window = 1, o.window_left = -7, o.window_right = -3;
    float *out2 = malloc(4 * p.no);
    attn_tensor O2 = tens(out2, c.B, c.H, c.L, c.Dv);
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &o, &O, NULL, NULL), ATTN_OK, ctx);
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O2, NULL, NULL), ATTN_OK, ctx);
    TU_CHECK(!memcmp(out, out2, 4 * p.no), "negative window values are not 'unlimited'");
    /* a zeroed options struct has no window (its zero sides only count with window = 1) */
    memset(&o, 0, sizeof o);
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &o, &O, NULL, NULL), ATTN_OK, ctx);
    TU_CHECK(!memcmp(out, out2, 4 * p.no), "a zeroed attn_sdpa_options applies a window");
    /* a decode step (L = 1) with a window of W keys sees exactly the last W: equal to the
     * attention over those keys alone */
    {
        int64_t S = 300, W = 17, D = 16;
        float *q1 = malloc(4 * D), *k1 = malloc(4 * S * D), *v1 = malloc(4 * S * D);
        float o1[16], o2[16];
        tu_fill(q1, (size_t)D, 5, -2, 2), tu_fill(k1, (size_t)(S * D), 6, -2, 2);
        tu_fill(v1, (size_t)(S * D), 7, -1, 1);
        attn_tensor q_ = tens(q1, 1, 1, 1, D), k_ = tens(k1, 1, 1, S, D),
                    v_ = tens(v1, 1, 1, S, D), ka = tens(k1 + (S - W) * D, 1, 1, W, D),
                    va = tens(v1 + (S - W) * D, 1, 1, W, D), o_ = tens(o1, 1, 1, 1, D),
                    ob = tens(o2, 1, 1, 1, D);
        o = attn_sdpa_defaults();
        o.window = 1, o.window_left = W - 1, o.window_right = 0;
        TU_STATUS(attn_sdpa(ctx, &q_, &k_, &v_, NULL, &o, &o_, NULL, NULL), ATTN_OK, ctx);
        TU_STATUS(attn_sdpa(ctx, &q_, &ka, &va, NULL, NULL, &ob, NULL, NULL), ATTN_OK, ctx);
        tu_close("decode window vs last W keys", o1, o2, (size_t)D, 1e-6);
        free(q1), free(k1), free(v1);
    }
    free(out), free(out2), free(lse), free(dq), free(dk), free(dv);
    outs_free(&r);
    prob_free(&p);
}

/* ---- cases --------------------------------------------------------------------------------- */
static void random_case(tcase *c, uint64_t *rs, int t) {
    static const int64_t lens[] = {1, 7, 95, 97, 200, 333, 64, 96, 13, 150};
    static const int64_t dims[] = {8, 16, 33, 64, 24};
    static const int64_t wins[] = {0, 1, 5, 31, 64, 100, 1000};
    static const float caps[] = {1.0f, 4.0f, 30.0f};
    memset(c, 0, sizeof *c);
    c->B = 1 + (int64_t)(tu_rand(rs) % 2), c->Hkv = 1 + (int64_t)(tu_rand(rs) % 2);
    c->H = c->Hkv * (1 + (int64_t)(tu_rand(rs) % 3));
    if (tu_quick(NULL)) /* an emulator: one batch, 2 heads at most (grouped when Hkv = 1) */
        c->B = 1, c->H = c->H > 2 ? 2 : c->H, c->Hkv = c->Hkv > c->H ? c->H : c->Hkv;
    c->L = lens[tu_rand(rs) % 10], c->S = lens[tu_rand(rs) % 10];
    if (tu_quick(NULL)) /* an emulator: no rows longer than 97 */
        c->L = c->L > 97 ? 97 : c->L, c->S = c->S > 97 ? 95 : c->S;
    c->D = dims[tu_rand(rs) % 5], c->Dv = tu_rand(rs) % 3 ? c->D : dims[tu_rand(rs) % 5];
    c->causal = (attn_causal)(t % 3);
    int feat = t % 8; /* bit 0 window, bit 1 ALiBi, bit 2 soft cap; 0: none (regression) */
    if (feat & 1) {
        c->window = 1;
        c->wl = tu_rand(rs) % 4 == 0 ? -1 : wins[tu_rand(rs) % 7];
        c->wr = tu_rand(rs) % 3 == 0 ? -1 : wins[tu_rand(rs) % 7];
    }
    c->alibi = (feat >> 1) & 1;
    c->softcap = feat & 4 ? caps[tu_rand(rs) % 3] : 0.0f;
    c->mask = (int)((t / 8) % 3);
    c->dropout = t % 7 == 5 ? 0.2f : 0.0f;
    c->no_dq = t % 13 == 6;
}

int main(void) {
    /* ATTN_TEST_QUICK (an emulator): a tenth of the reference cases (plain C, which the native
     * runs cover), an eighth of the random fast cases with rows of 97 at most, one batch and
     * 2 heads at most, three of the fixed ones, 1 and 3 threads, no plain C set (tu_each_set) */
    const int quick = tu_quick("test_sdpa_features");
    if (quick) nctx = 2, nthr[1] = 3;
    attn_ctx *ctx[3] = {tu_ctx(nthr[0]), tu_ctx(nthr[1]), tu_ctx(nthr[2])};
    uint64_t rs = 4242;
    int nref = 0, nfd = 0, nfast = 0;

    /* 1. reference vs mask formulation / double soft cap */
    for (int t = 0; t < (quick ? 4 : 40) && !tu_failures; t++, nref++) {
        tcase c;
        random_case(&c, &rs, t);
        if (c.L * c.S > 40000) c.S = 61; /* keep the [B, H, L, S] mask small */
        if (!c.window && t % 5 == 0) c.window = 1, c.wl = 3, c.wr = 0;
        c.alibi |= t % 3 == 0;
        if (c.mask == 2) c.mask = 1; /* slot 0 holds the formulation */
        ref_vs_mask(&c, 100 + (uint64_t)t);
        c.dropout = 0.0f;
        if (t % 2 == 0 && !c.softcap) c.softcap = t % 4 ? 2.0f : 0.7f;
        ref_vs_double(&c, 200 + (uint64_t)t);
    }

    /* 2. finite differences, each feature alone and all together */
    {
        const tcase fds[] = {
            {1, 2, 1, 5, 7, 3, 2, ATTN_CAUSAL_NONE, 1, 1, 2, 0, 0.0f, 0, 0, 0},
            {1, 2, 1, 6, 6, 3, 2, ATTN_CAUSAL_TOP_LEFT, 1, 2, -1, 0, 0.0f, 0, 0, 0},
            {1, 2, 2, 4, 9, 3, 3, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 3, 1, 0, 0.0f, 0, 0, 0},
            {1, 2, 1, 5, 7, 3, 2, ATTN_CAUSAL_NONE, 0, 0, 0, 1, 0.0f, 0, 0, 0},
            {2, 2, 1, 4, 6, 2, 3, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 1, 0.0f, 0, 0, 0},
            {1, 2, 1, 5, 7, 4, 2, ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0.8f, 0, 0, 0},
            {1, 1, 1, 6, 5, 3, 3, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 2.5f, 0, 0, 0},
            {1, 2, 1, 5, 8, 3, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 2, 1, 1, 1.5f, 0, 0, 0},
            {1, 4, 2, 7, 5, 3, 2, ATTN_CAUSAL_TOP_LEFT, 1, 1, 0, 1, 0.9f, 0, 0.3f, 0},
            /* L > S: the first rows see nothing */
            {1, 2, 1, 8, 4, 3, 2, ATTN_CAUSAL_NONE, 1, 0, 1, 1, 1.2f, 0, 0, 0},
        };
        for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++, nfd++)
            fd_case(&fds[i], 300 + i);
    }

    /* 3. fused and row kernels */
    for (int t = 0; t < (quick ? 12 : 96) && !tu_failures; t++, nfast++) {
        tcase c;
        random_case(&c, &rs, t);
        fast_case(ctx, &c, 1000 + (uint64_t)t);
    }
    {
        const tcase fixed[] = {
            /* windows that are empty for some rows (L > S, bottom-right) or for all (top-left
             * causal below a window's left edge) */
            {1, 2, 1, 200, 7, 16, 16, ATTN_CAUSAL_NONE, 1, 2, 0, 0, 0.0f, 0, 0, 0},
            {1, 2, 1, 97, 333, 16, 16, ATTN_CAUSAL_TOP_LEFT, 1, 5, -1, 1, 0.0f, 0, 0, 0},
            {1, 2, 2, 333, 95, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 10, 10, 1, 5.0f, 1, 0, 0},
            /* a causal window, long rows (several dead key tiles on both sides) */
            {1, 2, 1, 333, 333, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 63, 0, 1, 20.0f, 0, 0, 0},
            {2, 4, 2, 200, 200, 33, 24, ATTN_CAUSAL_TOP_LEFT, 1, 100, 0, 0, 0.0f, 2, 0.1f, 0},
            {1, 3, 1, 97, 333, 64, 64, ATTN_CAUSAL_NONE, 1, 40, 40, 1, 2.0f, 0, 0, 0},
            /* decode-like: one query, window over the cache */
            {2, 4, 1, 1, 333, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 127, 0, 1, 30.0f, 0, 0, 0},
            /* a window wider than everything is no window */
            {1, 2, 1, 95, 97, 16, 16, ATTN_CAUSAL_NONE, 1, 1000000, 1000000, 0, 0.0f, 0, 0, 0},
            /* past the short-key forward (S > 1024): the tiled one's key-tile groups of 512
             * keys with a window cutting groups on both sides, ALiBi, the cap, masks and
             * dropout; and the same with every feature but no window */
            {1, 2, 1, 150, 1300, 16, 16, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 700, 0, 1, 20.0f, 2, 0.1f,
             0},
            {1, 2, 2, 70, 1100, 32, 16, ATTN_CAUSAL_NONE, 0, 0, 0, 1, 5.0f, 1, 0.0f, 0},
        };
        static const unsigned char fixed_quick[] = {1, 0, 0, 0, 0, 0, 1, 1, 0, 0};
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && !tu_failures; i++) {
            if (quick && !fixed_quick[i]) continue;
            fast_case(ctx, &fixed[i], 5000 + i);
            nfast++;
        }
    }
    TU_CHECK(masked_rows_total > 0, "no fully masked rows were tested");

    public_api(ctx[1]);
    microkernel_softcap();
    printf("test_sdpa_features: %d reference, %d finite-difference, %d fast cases "
           "(%lld fully masked rows); worst relative error: ref vs mask %.2g, ref vs double "
           "%.2g, fd %.2g, forward %.2g, backward %.2g, tanh %.2g\n",
           nref, nfd, nfast, (long long)masked_rows_total, worst_eq, worst_cap, worst_fd,
           worst_fwd, worst_bwd, worst_tanh);
    for (int t = 0; t < 3; t++) attn_ctx_free(ctx[t]);
    return tu_finish("test_sdpa_features");
}
