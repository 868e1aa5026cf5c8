/* The split-KV decode path (src/kernels/decode.c: attn__decode, and attn__sdpa routing to it)
 * against the reference attn__sdpa_ref, for every kernel set this machine runs (ref, avx2,
 * avx512 via attn__isa_set), on 1, 2 and 3 threads (bit-identical), on shapes around the chunk
 * size (S = 1, 3, 511, 513, 1000, 4097 with chunks of 512), L = 1, 2, 5, 16, H/Hkv = 1/1, 8/2,
 * 32/8, 4/1, D = 32, 64, 80, 128 and tails (33, 100; Dv = D, 17 or 48).
 *
 * K and V are strided cache views: [B, Hkv, S_max, Dpad] or [B, S_max, Hkv, Dpad] with
 * S_max > S and Dpad >= D, everything outside the view NaN, so a read past a row or past the
 * current length shows up as a NaN.  Masks of every kind (KEEP/BLOCK/ADD, broadcast strides,
 * both slots, mask_ncols < S, key padding, a stride[3] != 1 layout), fully masked rows (zeros
 * and lse = -inf, checked exactly), causal in both alignments (top-left with L > 1 hides keys
 * from some rows and whole chunks from all of them), sliding windows, ALiBi and soft caps.
 *
 * Tolerance, as max|err| <= tol * max(1, max|ref|) per output: 2e-5 for out and lse.  Each
 * output is a convex combination of V rows; the fp32 path differs from the reference (double
 * sums) by the rounding of the fp32 score dot products (~sqrt(D) u |s|), of the exp polynomial
 * (~2 u), of the fp32 sums over a chunk of 512 keys and of the merge (one rescaling per chunk):
 * a few 1e-6; a wrong, missing or extra key moves an output by ~1/S of the scale of V or more
 * (>= 2e-4 at S = 4097). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/decode.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/kernels.h"
#include "testutil.h"

#define TOL 2e-5

static attn_ctx *make_ctx(int threads) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    attn_ctx *c = NULL;
    attn_ctx_create(&p, &c);
    return c;
}

typedef struct tcase {
    int64_t B, H, Hkv, L, S, D, Dv;
    attn_causal causal;
    int maskcfg; /* 0..8, see make_masks */
    int layout;  /* 0: cache [B, Hkv, S_max, Dpad], q/o [B, H, L, D]; 1: [B, S_max, Hkv, Dpad],
                    q/o [B, L, H, D] */
    int window;
    int64_t wl, wr;
    int alibi;
    float softcap;
} tcase;

static double worst;

/* Masks: 0 none; 1 KEEP [L, S]; 2 ADD [B, H, L, S] + BLOCK key padding [B, 1, 1, S] in slot 1;
 * 3 ADD [1, H, 1, S] with -inf entries; 4 KEEP [B, 1, L, S] with every third row fully masked
 * and mask_ncols = S - 2; 5 BLOCK [L, S] stored transposed (stride[3] = L); 6 KEEP [S] in
 * slot 1 plus ADD [L, 1] broadcast over keys; 7 BLOCK key padding [B, 1, 1, S] with every key
 * of batch 0 blocked (fully masked rows); 8 KEEP [B, 1, L, S] with rows fully masked. */
static void make_masks(const tcase *c, attn__sdpa_args *a, uint64_t *rs, float **fbuf,
                       unsigned char **bbuf) {
    int64_t B = c->B, H = c->H, L = c->L, S = c->S;
    size_t nf = (size_t)(B * H * L * S), nb = (size_t)(B * L * S + B * S + L * S);
    *fbuf = malloc(4 * nf + 4), *bbuf = malloc(nb + 1);
    float *f = *fbuf;
    unsigned char *u = *bbuf;
    for (size_t i = 0; i < nf; i++) f[i] = (float)((double)(tu_rand(rs) % 2001) / 1000.0 - 1.0);
    for (size_t i = 0; i < nb; i++) u[i] = (tu_rand(rs) % 5) != 0;
    a->mask_ncols[0] = a->mask_ncols[1] = S;
    attn__mask4 *m0 = &a->mask[0], *m1 = &a->mask[1];
    switch (c->maskcfg) {
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

/* A cache view [B, Hkv, S, d] inside [B, Hkv, Smax, dpad] (layout 0) or [B, Smax, Hkv, dpad]
 * (layout 1): NaN outside the view, uniform in [lo, hi) inside. */
static float *make_cache(const tcase *c, int64_t Smax, int64_t d, int64_t dpad, uint64_t seed,
                         float lo, float hi, int64_t st[4]) {
    size_t n = (size_t)(c->B * c->Hkv * Smax * dpad);
    float *x = malloc(4 * n), *r = malloc(4 * (size_t)d);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    if (c->layout == 0)
        st[0] = c->Hkv * Smax * dpad, st[1] = Smax * dpad, st[2] = dpad, st[3] = 1;
    else st[0] = Smax * c->Hkv * dpad, st[1] = dpad, st[2] = c->Hkv * dpad, st[3] = 1;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hkv; h++)
            for (int64_t j = 0; j < c->S; j++) {
                tu_fill(r, (size_t)d, seed++, lo, hi);
                memcpy(x + b * st[0] + h * st[1] + j * st[2], r, 4 * (size_t)d);
            }
    free(r);
    return x;
}

static void run_case(attn_ctx *ctx[3], const tcase *c, uint64_t seed) {
    uint64_t rs = seed;
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, L = c->L, S = c->S, D = c->D, Dv = c->Dv;
    int64_t Smax = S + 1 + (int64_t)(tu_rand(&rs) % 40), pad = (int64_t)(tu_rand(&rs) % 3) * 5;
    size_t nq = (size_t)(B * H * L * D), no = (size_t)(B * H * L * Dv), nl = (size_t)(B * H * L);
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = B, a.H = H, a.Hkv = Hkv, a.L = L, a.S = S, a.D = D, a.Dv = Dv;
    float *q = malloc(4 * nq);
    tu_fill(q, nq, seed + 1, -2, 2);
    float *k = make_cache(c, Smax, D, D + pad, seed * 1000003, -2, 2, a.ks);
    float *v = make_cache(c, Smax, Dv, Dv + pad, seed * 1000033 + 7, -1, 1, a.vs);
    a.q = q, a.k = k, a.v = v;
    if (c->layout == 0) {
        a.qs[0] = H * L * D, a.qs[1] = L * D, a.qs[2] = D;
        a.os[0] = H * L * Dv, a.os[1] = L * Dv, a.os[2] = Dv;
        a.ls[0] = H * L, a.ls[1] = L, a.ls[2] = 1;
    } else {
        a.qs[0] = L * H * D, a.qs[1] = D, a.qs[2] = H * D;
        a.os[0] = L * H * Dv, a.os[1] = Dv, a.os[2] = H * Dv;
        a.ls[0] = L * H, a.ls[1] = 1, a.ls[2] = H;
    }
    a.qs[3] = a.os[3] = 1;
    a.causal = c->causal;
    a.scale = 1.0f / sqrtf((float)D) * (c->maskcfg == 3 ? 1.5f : 1.0f);
    a.window = c->window, a.window_left = c->wl, a.window_right = c->wr;
    a.softcap = c->softcap;
    float slopes[64];
    /* ALiBi slopes 2^(-8(h+1)/H), scaled so that slope * S stays below ~60: an offset of
     * thousands (top-left causal rows see keys S - L away from their ALiBi centre) leaves the
     * fp32 scores an ulp of ~2e-4, which no fp32 kernel can hold to 2e-5 */
    float shrink = S > 64 ? 64.0f / (float)S : 1.0f;
    for (int64_t h = 0; h < H; h++)
        slopes[h] = shrink * powf(2.0f, -8.0f * (float)(h + 1) / (float)H);
    a.alibi = c->alibi ? slopes : NULL;
    float *fm;
    unsigned char *bm;
    make_masks(c, &a, &rs, &fm, &bm);

    float *o_ref = malloc(4 * no), *lse_ref = malloc(4 * nl), *scratch = malloc(8 * (size_t)S);
    attn__sdpa_args r = a;
    r.o = o_ref, r.lse = lse_ref;
    attn__sdpa_ref(&r, scratch);

    float *o[3], *lse[3], *o_sdpa = malloc(4 * no), *lse_sdpa = malloc(4 * nl);
    for (int t = 0; t < 3; t++) o[t] = malloc(4 * no), lse[t] = malloc(4 * nl);
    char what[220];
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!attn__isa_supported(isa)) continue;
        snprintf(what, sizeof what,
                 "[%s B%lld H%lld/%lld L%lld S%lld/%lld D%lld/%lld pad%lld causal%d mask%d "
                 "layout%d win%d(%lld,%lld) alibi%d cap%g]",
                 attn__isa_name(isa), (long long)B, (long long)H, (long long)Hkv, (long long)L,
                 (long long)S, (long long)Smax, (long long)D, (long long)Dv, (long long)pad,
                 (int)c->causal, c->maskcfg, c->layout, c->window, (long long)c->wl,
                 (long long)c->wr, c->alibi, (double)c->softcap);
        for (int t = 0; t < 3; t++) {
            TU_CHECK(attn__isa_set(ctx[t], isa), "isa_set");
            attn__sdpa_args f = a;
            memset(o[t], 0xff, 4 * no); /* NaN: every element must be written */
            f.o = o[t], f.lse = lse[t];
            TU_STATUS(attn__decode(ctx[t], &f), ATTN_OK, ctx[t]);
        }
        /* attn__sdpa takes the decode path where the size limits allow: then the same bits */
        int expect = S >= ATTN__DECODE_MIN_S && L <= ATTN__DECODE_MAX_L &&
                     H / Hkv * L <= ATTN__DECODE_MAX_ROWS;
        TU_CHECK(attn__decode_eligible(ctx[1], &a) == expect, "eligible != %d %s", expect, what);
        attn__sdpa_args f = a;
        f.o = o_sdpa, f.lse = lse_sdpa;
        TU_STATUS(attn__sdpa(ctx[1], &f), ATTN_OK, ctx[1]);
        if (expect) {
            TU_CHECK(memcmp(o_sdpa, o[0], 4 * no) == 0, "attn__sdpa out differs %s", what);
            TU_CHECK(memcmp(lse_sdpa, lse[0], 4 * nl) == 0, "attn__sdpa lse differs %s", what);
        } else { /* the other paths, same contract */
            char w3[260];
            snprintf(w3, sizeof w3, "attn__sdpa out %s", what);
            tu_close(w3, o_sdpa, o_ref, no, TOL);
        }

        char w2[260];
        double m, e;
        snprintf(w2, sizeof w2, "out %s", what);
        tu_close(w2, o[0], o_ref, no, TOL);
        e = tu_max_err(o[0], o_ref, no, &m) / (m > 1 ? m : 1);
        if (e > worst) worst = e;
        snprintf(w2, sizeof w2, "lse %s", what);
        tu_close(w2, lse[0], lse_ref, nl, TOL);
        e = tu_max_err(lse[0], lse_ref, nl, &m) / (m > 1 ? m : 1);
        if (e > worst) worst = e;
        /* rows that see no key: exactly zeros and -inf */
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < L; i++) {
                    if (lse_ref[b * a.ls[0] + h * a.ls[1] + i * a.ls[2]] != -INFINITY) continue;
                    const float *orow = o[0] + b * a.os[0] + h * a.os[1] + i * a.os[2];
                    int zero = 1;
                    for (int64_t e2 = 0; e2 < Dv; e2++) zero &= orow[e2] == 0.0f;
                    TU_CHECK(zero, "masked row (%lld,%lld,%lld) not zero %s", (long long)b,
                             (long long)h, (long long)i, what);
                }
        for (int t = 1; t < 3; t++) {
            TU_CHECK(memcmp(o[t], o[0], 4 * no) == 0, "out differs with %d threads %s", t + 1,
                     what);
            TU_CHECK(memcmp(lse[t], lse[0], 4 * nl) == 0, "lse differs with %d threads %s",
                     t + 1, what);
        }
    }
    for (int t = 0; t < 3; t++) free(o[t]), free(lse[t]);
    free(o_sdpa), free(lse_sdpa), free(o_ref), free(lse_ref), free(scratch);
    free(q), free(k), free(v), free(fm), free(bm);
}

/* What the path refuses: weights, dropout, a strided last dimension, too many queries,
 * ATTN_DECODE=0. */
static void refusals(attn_ctx *ctx) {
    float x[4 * ATTN__DECODE_MIN_S + 64] = {0}, w[16];
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = a.H = a.Hkv = 1, a.L = 1, a.S = ATTN__DECODE_MIN_S, a.D = a.Dv = 4, a.scale = 0.5f;
    a.q = a.k = a.v = x, a.o = w;
    int64_t s[4] = {0, 0, 4, 1};
    memcpy(a.qs, s, sizeof s), memcpy(a.ks, s, sizeof s), memcpy(a.vs, s, sizeof s),
        memcpy(a.os, s, sizeof s);
    TU_CHECK(attn__decode_eligible(ctx, &a), "plain case not eligible");
    TU_STATUS(attn__decode(ctx, &a), ATTN_OK, ctx);
    setenv("ATTN_DECODE", "0", 1);
    TU_CHECK(!attn__decode_eligible(ctx, &a), "ATTN_DECODE=0 ignored");
    unsetenv("ATTN_DECODE");
    attn__sdpa_args b = a;
    b.w = w;
    TU_CHECK(!attn__decode_eligible(ctx, &b), "weights eligible");
    TU_STATUS(attn__decode(ctx, &b), ATTN_E_UNSUPPORTED, ctx);
    b = a, b.dropout_p = 0.1f;
    TU_CHECK(!attn__decode_eligible(ctx, &b), "dropout eligible");
    TU_STATUS(attn__decode(ctx, &b), ATTN_E_UNSUPPORTED, ctx);
    b = a, b.ks[3] = 2, b.ks[2] = 8, b.S = ATTN__DECODE_MIN_S / 2;
    TU_CHECK(!attn__decode_eligible(ctx, &b), "strided last dimension eligible");
    TU_STATUS(attn__decode(ctx, &b), ATTN_E_UNSUPPORTED, ctx);
    b = a, b.L = ATTN__DECODE_MAX_L + 1, b.qs[2] = 0, b.os[2] = 0;
    TU_CHECK(!attn__decode_eligible(ctx, &b), "L = %d eligible", ATTN__DECODE_MAX_L + 1);
    b = a, b.S = ATTN__DECODE_MIN_S - 1;
    TU_CHECK(!attn__decode_eligible(ctx, &b), "S = %d eligible", ATTN__DECODE_MIN_S - 1);
    b = a, b.L = 2, b.H = ATTN__DECODE_MAX_ROWS, b.qs[1] = b.qs[2] = b.os[1] = b.os[2] = 0;
    TU_CHECK(!attn__decode_eligible(ctx, &b), "%d rows per kv head eligible",
             2 * ATTN__DECODE_MAX_ROWS);
    b.H = ATTN__DECODE_MAX_ROWS / 2;
    TU_CHECK(attn__decode_eligible(ctx, &b), "%d rows per kv head not eligible",
             ATTN__DECODE_MAX_ROWS);
}

int main(void) {
    attn_ctx *ctx[3] = {make_ctx(1), make_ctx(2), make_ctx(3)};
    refusals(ctx[0]);
    uint64_t rs = 4242;
    const int64_t lens[] = {1, 2, 5, 16};
    const int64_t kvl[] = {1, 3, 511, 513, 1000, 4097};
    const int64_t hh[4][2] = {{1, 1}, {8, 2}, {32, 8}, {4, 1}};
    const int64_t dims[] = {32, 64, 80, 128, 33, 100};
    int ncase = 0;
    /* every (L, S) pair, then random shapes with windows, ALiBi and soft caps */
    for (int t = 0; t < 60 && !tu_failures; t++) {
        tcase c;
        memset(&c, 0, sizeof c);
        c.L = t < 24 ? lens[t % 4] : lens[tu_rand(&rs) % 4];
        c.S = t < 24 ? kvl[t / 4] : kvl[tu_rand(&rs) % 6];
        int hsel = (int)(tu_rand(&rs) % 4);
        c.H = hh[hsel][0], c.Hkv = hh[hsel][1];
        c.B = 1 + (int64_t)(tu_rand(&rs) % 2);
        c.D = dims[tu_rand(&rs) % 6];
        int dv = (int)(tu_rand(&rs) % 4);
        c.Dv = dv < 2 ? c.D : dv == 2 ? 17 : 48;
        if (c.H == 32 && c.L * c.S > 8000) c.D = c.D > 64 ? 64 : c.D; /* keep the run short */
        c.causal = (attn_causal)(t % 3);
        c.maskcfg = t % 9;
        c.layout = (t / 2) % 2;
        if (t >= 24) {
            c.window = t % 4 == 0 || t % 5 == 0;
            const int64_t wls[] = {0, 5, 700, -1}, wrs[] = {0, 3, -1};
            c.wl = wls[tu_rand(&rs) % 4], c.wr = wrs[tu_rand(&rs) % 3];
            c.alibi = t % 3 == 1;
            c.softcap = t % 7 == 2 ? 5.0f : 0.0f;
        }
        run_case(ctx, &c, 5000 + (uint64_t)t);
        ncase++;
    }
    printf("test_decode: %d cases, worst relative error %.3g (tolerance %.0e)\n", ncase, worst,
           TOL);
    for (int t = 0; t < 3; t++) attn_ctx_free(ctx[t]);
    return tu_finish("test_decode");
}
