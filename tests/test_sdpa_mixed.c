/* Attention on bf16 operands (a context created with ATTN_CTX_BF16_MATMUL, src/kernels/
 * sdpa_mixed.c): attn_sdpa and attn_sdpa_backward_saved against the float path of a plain
 * context on the same inputs, for every feature (causal both ways, masks, GQA, dropout, soft
 * cap, ALiBi, window, rows with no key, ragged sizes), on each mixed kernel (AMX, AVX512_BF16,
 * plain C: ATTN_AMX=0, ATTN_ISA=ref), identical for 1 and 3 threads; and the path is taken (the
 * bits differ from the float path's). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct tcase {
    int64_t B, H, Hkv, L, S, D, Dv;
    attn_causal causal;
    int mask; /* 0 none, 1 bool key padding [B, 1, 1, S] (KEEP), 2 additive [L, S] */
    float dropout, softcap;
    int alibi, window;
} tcase;

typedef struct outs {
    float *o, *lse, *dq, *dk, *dv;
} outs;

static attn_ctx *ctx_make(int threads, unsigned flags) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    p.flags = flags;
    attn_ctx *c = NULL;
    return attn_ctx_create(&p, &c) == ATTN_OK ? c : NULL;
}

static void outs_free(outs *r) {
    free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv);
    memset(r, 0, sizeof *r);
}

/* Forward and saved backward of case c on ctx; 0 on success. */
static int run(attn_ctx *ctx, const tcase *c, const float *q, const float *k, const float *v,
               const float *dout, const void *maskdata, const float *slopes, outs *r) {
    size_t nq = (size_t)(c->B * c->H * c->L * c->D), nk = (size_t)(c->B * c->Hkv * c->S * c->D);
    size_t nv = (size_t)(c->B * c->Hkv * c->S * c->Dv), no = (size_t)(c->B * c->H * c->L * c->Dv);
    r->o = calloc(no, 4), r->lse = calloc((size_t)(c->B * c->H * c->L), 4);
    r->dq = calloc(nq, 4), r->dk = calloc(nk, 4), r->dv = calloc(nv, 4);
    if (!r->o || !r->lse || !r->dq || !r->dk || !r->dv) return 1;
    /* outputs start as NaN: whatever the kernels leave unwritten fails the checks */
    for (size_t i = 0; i < no; i++) r->o[i] = NAN;
    for (size_t i = 0; i < nq; i++) r->dq[i] = NAN;
    for (size_t i = 0; i < nk; i++) r->dk[i] = NAN;
    for (size_t i = 0; i < nv; i++) r->dv[i] = NAN;
    attn_tensor tq = attn_view4((float *)q, c->B, c->H, c->L, c->D);
    attn_tensor tk = attn_view4((float *)k, c->B, c->Hkv, c->S, c->D);
    attn_tensor tv = attn_view4((float *)v, c->B, c->Hkv, c->S, c->Dv);
    attn_tensor to = attn_view4(r->o, c->B, c->H, c->L, c->Dv);
    attn_tensor tl = attn_view3(r->lse, c->B, c->H, c->L);
    attn_tensor td = attn_view4((float *)dout, c->B, c->H, c->L, c->Dv);
    attn_tensor tdq = attn_view4(r->dq, c->B, c->H, c->L, c->D);
    attn_tensor tdk = attn_view4(r->dk, c->B, c->Hkv, c->S, c->D);
    attn_tensor tdv = attn_view4(r->dv, c->B, c->Hkv, c->S, c->Dv);
    attn_mask m, *mp = NULL;
    if (c->mask == 1) {
        int64_t sh[4] = {c->B, 1, 1, c->S};
        m.kind = ATTN_MASK_KEEP;
        m.t = attn_tensor_make((void *)maskdata, ATTN_U8, 4, sh);
        mp = &m;
    } else if (c->mask == 2) {
        int64_t sh[2] = {c->L, c->S};
        m.kind = ATTN_MASK_ADD;
        m.t = attn_tensor_make((void *)maskdata, ATTN_F32, 2, sh);
        mp = &m;
    }
    attn_sdpa_options o = attn_sdpa_defaults();
    o.causal = c->causal;
    o.dropout_p = c->dropout;
    o.seed = 1234;
    o.softcap = c->softcap;
    o.alibi_slopes = c->alibi ? slopes : NULL;
    if (c->window) o.window = 1, o.window_left = 9, o.window_right = 3;
    attn_status st = attn_sdpa(ctx, &tq, &tk, &tv, mp, &o, &to, NULL, &tl);
    if (st == ATTN_OK)
        st = attn_sdpa_backward_saved(ctx, &tq, &tk, &tv, mp, &o, &to, &tl, &td, &tdq, &tdk,
                                      &tdv, NULL);
    if (st != ATTN_OK) {
        fprintf(stderr, "  %s: %s\n", attn_status_name(st), attn_ctx_errmsg(ctx));
        return 1;
    }
    return 0;
}

static int same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* lse compared where the float path has a finite value (-inf rows must match exactly). */
static void check_lse(const char *what, const float *got, const float *ref, size_t n) {
    int ok = 1;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i]) || isinf(got[i])) {
            ok &= ref[i] == got[i];
            continue;
        }
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= worst)) worst = e; /* NaN sticks */
    }
    TU_CHECK(ok && worst <= 2e-2, "%s: lse error %g (or a -inf row differs)", what, worst);
}

static void one_case(const tcase *c, const char *kernel, int ci) {
    size_t nq = (size_t)(c->B * c->H * c->L * c->D), nk = (size_t)(c->B * c->Hkv * c->S * c->D);
    size_t nv = (size_t)(c->B * c->Hkv * c->S * c->Dv), no = (size_t)(c->B * c->H * c->L * c->Dv);
    size_t nl = (size_t)(c->B * c->H * c->L);
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *dout = malloc(no * 4);
    float slopes[64];
    void *mask = NULL;
    for (int h = 0; h < 64; h++) slopes[h] = 0.05f * (float)(h + 1);
    tu_fill(q, nq, 11 + (uint64_t)ci, -1.5f, 1.5f);
    tu_fill(k, nk, 23 + (uint64_t)ci, -1.5f, 1.5f);
    tu_fill(v, nv, 37 + (uint64_t)ci, -1.0f, 1.0f);
    tu_fill(dout, no, 41 + (uint64_t)ci, -1.0f, 1.0f);
    if (c->mask == 1) { /* key padding: batch b keeps its first S - 5b keys */
        unsigned char *m = malloc((size_t)(c->B * c->S));
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t j = 0; j < c->S; j++) m[b * c->S + j] = j < c->S - 5 * b;
        mask = m;
    } else if (c->mask == 2) { /* additive, with one row fully masked */
        float *m = malloc((size_t)(c->L * c->S) * 4);
        tu_fill(m, (size_t)(c->L * c->S), 99, -2.0f, 0.5f);
        for (int64_t j = 0; j < c->S; j++) m[3 * c->S + j] = -INFINITY;
        mask = m;
    }
    attn_ctx *cf = ctx_make(2, 0), *c1 = ctx_make(1, ATTN_CTX_BF16_MATMUL),
             *c3 = ctx_make(3, ATTN_CTX_BF16_MATMUL);
    TU_CHECK(cf && c1 && c3, "contexts");
    outs rf = {0}, r1 = {0}, r3 = {0};
    char what[160];
    snprintf(what, sizeof what,
             "%s case %d (B%lld H%lld/%lld L%lld S%lld D%lld Dv%lld causal %d mask %d p %.1f "
             "cap %.0f alibi %d window %d)",
             kernel, ci, (long long)c->B, (long long)c->H, (long long)c->Hkv, (long long)c->L,
             (long long)c->S, (long long)c->D, (long long)c->Dv, (int)c->causal, c->mask,
             (double)c->dropout, (double)c->softcap, c->alibi, c->window);
    int bad = !cf || !c1 || !c3 || run(cf, c, q, k, v, dout, mask, slopes, &rf) ||
              run(c1, c, q, k, v, dout, mask, slopes, &r1) ||
              run(c3, c, q, k, v, dout, mask, slopes, &r3);
    TU_CHECK(!bad, "%s: a call failed", what);
    if (!bad) {
        /* bf16 operands: scores within ~2^-8 of |scale q.k| (here up to ~3), so weights within
         * a few percent relative; out, dq, dk and dv within 3% of their scale */
        char w2[200];
        snprintf(w2, sizeof w2, "%s out", what);
        tu_close(w2, r1.o, rf.o, no, 3e-2);
        check_lse(what, r1.lse, rf.lse, nl);
        snprintf(w2, sizeof w2, "%s dq", what);
        tu_close(w2, r1.dq, rf.dq, nq, 3e-2);
        snprintf(w2, sizeof w2, "%s dk", what);
        tu_close(w2, r1.dk, rf.dk, nk, 3e-2);
        snprintf(w2, sizeof w2, "%s dv", what);
        tu_close(w2, r1.dv, rf.dv, nv, 3e-2);
        TU_CHECK(same_bits(r1.o, r3.o, no) && same_bits(r1.lse, r3.lse, nl) &&
                     same_bits(r1.dq, r3.dq, nq) && same_bits(r1.dk, r3.dk, nk) &&
                     same_bits(r1.dv, r3.dv, nv),
                 "%s: 1 and 3 threads differ", what);
        TU_CHECK(!same_bits(r1.o, rf.o, no) && !same_bits(r1.dk, rf.dk, nk),
                 "%s: the bf16 path was not taken (bits equal to the float path's)", what);
        if (getenv("ATTN_TEST_VERBOSE")) {
            double sc;
            printf("%s: out %.2e dq %.2e dk %.2e dv %.2e\n", what,
                   tu_max_err(r1.o, rf.o, no, &sc), tu_max_err(r1.dq, rf.dq, nq, &sc),
                   tu_max_err(r1.dk, rf.dk, nk, &sc), tu_max_err(r1.dv, rf.dv, nv, &sc));
        }
    }
    outs_free(&rf), outs_free(&r1), outs_free(&r3);
    attn_ctx_free(cf), attn_ctx_free(c1), attn_ctx_free(c3);
    free(q), free(k), free(v), free(dout), free(mask);
}

static const tcase cases[] = {
    /* B  H Hkv   L    S   D  Dv  causal                     mask drop cap alibi window */
    {2, 4, 4, 256, 256, 64, 64, ATTN_CAUSAL_NONE, 0, 0.0f, 0, 0, 0},
    {2, 4, 4, 256, 256, 64, 64, ATTN_CAUSAL_TOP_LEFT, 0, 0.0f, 0, 0, 0},
    {1, 6, 2, 100, 300, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0.0f, 0, 0, 0}, /* GQA, L < S */
    {1, 3, 3, 300, 100, 40, 24, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0.0f, 0, 0, 0}, /* rows w/o key */
    {3, 2, 1, 77, 131, 32, 48, ATTN_CAUSAL_NONE, 1, 0.0f, 0, 0, 0},          /* padding */
    {1, 2, 2, 64, 96, 64, 64, ATTN_CAUSAL_NONE, 2, 0.0f, 0, 0, 0},           /* additive */
    {2, 2, 2, 128, 128, 64, 64, ATTN_CAUSAL_TOP_LEFT, 0, 0.2f, 0, 0, 0},     /* dropout */
    {1, 4, 2, 96, 96, 64, 64, ATTN_CAUSAL_NONE, 0, 0.0f, 5.0f, 1, 0},        /* cap, ALiBi */
    {1, 2, 2, 160, 160, 16, 16, ATTN_CAUSAL_NONE, 0, 0.0f, 0, 0, 1},         /* window */
    {1, 1, 1, 40, 2500, 64, 64, ATTN_CAUSAL_NONE, 0, 0.0f, 0, 0, 0},         /* chunks of rows */
};

int main(void) {
    const char *kernels[][3] = {{"default kernel (AMX where present)", NULL, NULL},
                                {"AVX512_BF16 kernel (ATTN_AMX=0)", "ATTN_AMX", "0"},
                                {"plain C kernel (ATTN_ISA=ref)", "ATTN_ISA", "ref"}};
    /* under an emulator (tu_emulated) the default kernel only: there the others are the plain
     * C one (no AVX-512 in qemu's CPUs), which the native runs cover */
    int nk = tu_quick("test_sdpa_mixed") && tu_emulated() ? 1 : 3;
    for (int kk = 0; kk < nk; kk++) {
        if (kernels[kk][1]) setenv(kernels[kk][1], kernels[kk][2], 1);
        for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++)
            one_case(&cases[i], kernels[kk][0], i);
        if (kernels[kk][1]) unsetenv(kernels[kk][1]);
    }
    return tu_finish("test_sdpa_mixed");
}
