/* The split-KV decode path (src/kernels/decode.c: attn__decode, and attn__sdpa routing to it)
 * against the reference attn__sdpa_ref, for every kernel set this machine runs (ref, avx2,
 * avx512, neon via attn__isa_set), on 1, 2 and 3 threads (bit-identical), on shapes around
 * the chunk size (S = 1, 3, 511, 513, 1000, 4097 with chunks of 512), L = 1, 2, 5, 16,
 * H/Hkv = 1/1, 8/2, 32/8, 4/1, D = 32, 64, 80, 128 and tails (33, 100; Dv = D, 17 or 48), and
 * decode shapes with an odd number of rows per kv head (L = 1, 3; H/Hkv = 2/2, 3/1) against
 * long caches.
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
 * (>= 2e-4 at S = 4097).
 *
 * bf16 storage (attn__decode_bf16, and attn_sdpa routing bf16 inputs to it): the same cases
 * with q, k, v rounded to bf16 (NaN outside the views too), against the bf16 oracle
 * attn__sdpa_bf16_ref and against the bf16 fused forward attn__flash_fwd_bf16 on the same
 * inputs, every ISA, 1-3 threads bit-identical, masked rows exactly zero / -inf.
 *  out: BF16_TOL = 4e-3 (2^-8, as test_flash_bf16.c).  Each weight exp(s_j - m) is rounded to
 *    bf16 (relative error <= 2^-8) before its product with V; the decode rounds it relative
 *    to its chunk's maximum m_c, the oracle relative to the row maximum and the fused kernel
 *    relative to its running maximum, and fp32 exponentials that differ in the last bit next
 *    to a rounding boundary round apart: a weight then differs by one bf16 ulp (<= 2^-7 e_j).
 *    Such differences are rare and of either sign, so an output moves by about
 *    2^-8 sqrt(sum e_j^2) / l |v| (|v| <= 1), up to 2^-7 w where one weight w near 1 rounds
 *    apart.  Measured <= 6.4e-4 (printed).  A missing, extra or wrongly scored key
 *    shows in lse, held to fp32 accuracy:
 *  lse: TOL (2e-5): lse sums the unrounded weights, so it sees only the fp32 rounding of the
 *    scores, as the fp32 path.
 * Where the rounding of P shows (bf16_rounding: one chunk, one weight 1 and the others just
 * below a rounding boundary, V = 1, so the rounding moves the output by 3.9e-3): 1e-5 of the
 * oracle, and through attn_sdpa (bit for bit the kernel's).
 *
 * attn__decode_multi (several problems in one pass of the pool): each problem bit for bit what
 * attn__decode or attn__decode_bf16 gives it alone. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/decode.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/flash.h"
#include "../src/kernels/kernels.h"
#include "testutil_sdpa.h"

#define TOL 2e-5
#define BF16_TOL 4e-3

typedef struct tcase {
    int64_t B, H, Hkv, L, S, D, Dv;
    attn_causal causal;
    int maskcfg; /* 0..8, see tu_sdpa_masks in testutil_sdpa.h */
    int layout;  /* 0: cache [B, Hkv, S_max, Dpad], q/o [B, H, L, D]; 1: [B, S_max, Hkv, Dpad],
                    q/o [B, L, H, D] */
    int window;
    int64_t wl, wr;
    int alibi;
    float softcap;
} tcase;

static double worst, worst16_out, worst16_lse, worst16_flash;

static attn__bf16 *to_bf16(const float *x, size_t n) {
    attn__bf16 *y = malloc(2 * n + 2);
    for (size_t i = 0; i < n; i++) y[i] = attn__f32_to_bf16(x[i]);
    return y;
}

/* max|got - ref| / max(1, max|ref|), for the report */
static double rel_err(const float *got, const float *ref, size_t n) {
    double m, e = tu_max_err(got, ref, n, &m);
    return e / (m > 1 ? m : 1);
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

/* Rows that see no key (lse_ref = -inf) must be exactly zero. */
static void zero_rows(const attn__sdpa_args *a, const float *o, const float *lse_ref,
                      const char *what) {
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->H; h++)
            for (int64_t i = 0; i < a->L; i++) {
                if (lse_ref[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] != -INFINITY) continue;
                const float *orow = o + b * a->os[0] + h * a->os[1] + i * a->os[2];
                int zero = 1;
                for (int64_t e = 0; e < a->Dv; e++) zero &= orow[e] == 0.0f;
                TU_CHECK(zero, "masked row (%lld,%lld,%lld) not zero %s", (long long)b,
                         (long long)h, (long long)i, what);
            }
}

/* the thread counts compared: 1, 2 and 3 (ctx[0..2]), or 1 and 3 under ATTN_TEST_QUICK */
static int tstep = 1;

/* The case of a with q, k, v (nq, nk, nv floats, NaN outside the views) rounded to bf16:
 * attn__decode_bf16 against the bf16 oracle and the bf16 fused forward, every ISA, 1-3
 * threads; o, lse: buffers of no, nl floats per thread count. */
static void run_bf16(attn_ctx *ctx[3], const tcase *c, const attn__sdpa_args *a, const float *q,
                     size_t nq, const float *k, size_t nk, const float *v, size_t nv, float *o[3],
                     float *lse[3], size_t no, size_t nl, float *scratch) {
    attn__bf16 *q16 = to_bf16(q, nq), *k16 = to_bf16(k, nk), *v16 = to_bf16(v, nv);
    float *o_ref = malloc(4 * no), *lse_ref = malloc(4 * nl), *o_fl = malloc(4 * no),
          *lse_fl = malloc(4 * nl);
    attn__sdpa_args r = *a;
    r.q = r.k = r.v = NULL; /* the bf16 entry points must not read them */
    r.o = o_ref, r.lse = lse_ref;
    attn__sdpa_bf16_ref(&r, q16, k16, v16, scratch);
    char what[240], w2[280];
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_each_set(isa, "test_decode: bf16 decode")) continue;
        snprintf(what, sizeof what,
                 "[bf16 %s B%lld H%lld/%lld L%lld S%lld D%lld/%lld causal%d mask%d layout%d "
                 "win%d(%lld,%lld) alibi%d cap%g]",
                 attn__isa_name(isa), (long long)a->B, (long long)a->H, (long long)a->Hkv,
                 (long long)a->L, (long long)a->S, (long long)a->D, (long long)a->Dv,
                 (int)c->causal, c->maskcfg, c->layout, c->window, (long long)c->wl,
                 (long long)c->wr, c->alibi, (double)c->softcap);
        TU_CHECK(attn__isa_set(ctx[1], isa), "isa_set"); /* the flash below (tstep 2 too) */
        for (int t = 0; t < 3; t += tstep) {
            TU_CHECK(attn__isa_set(ctx[t], isa), "isa_set");
            attn__sdpa_args f = r;
            memset(o[t], 0xff, 4 * no);
            f.o = o[t], f.lse = lse[t];
            TU_STATUS(attn__decode_bf16(ctx[t], &f, q16, k16, v16), ATTN_OK, ctx[t]);
        }
        snprintf(w2, sizeof w2, "out %s", what);
        tu_close(w2, o[0], o_ref, no, BF16_TOL);
        double e = rel_err(o[0], o_ref, no);
        worst16_out = e > worst16_out ? e : worst16_out;
        snprintf(w2, sizeof w2, "lse %s", what);
        tu_close(w2, lse[0], lse_ref, nl, TOL);
        e = rel_err(lse[0], lse_ref, nl);
        worst16_lse = e > worst16_lse ? e : worst16_lse;
        zero_rows(a, o[0], lse_ref, what);
        for (int t = tstep; t < 3; t += tstep) {
            TU_CHECK(memcmp(o[t], o[0], 4 * no) == 0, "out differs with %d threads %s", t + 1,
                     what);
            TU_CHECK(memcmp(lse[t], lse[0], 4 * nl) == 0, "lse differs with %d threads %s",
                     t + 1, what);
        }
        /* the bf16 fused forward on the same inputs (what attn_sdpa runs when not eligible) */
        attn__sdpa_args f = r;
        f.o = o_fl, f.lse = lse_fl;
        TU_STATUS(attn__flash_fwd_bf16(ctx[1], &f, q16, k16, v16), ATTN_OK, ctx[1]);
        snprintf(w2, sizeof w2, "out vs bf16 flash %s", what);
        tu_close(w2, o[0], o_fl, no, BF16_TOL);
        e = rel_err(o[0], o_fl, no);
        worst16_flash = e > worst16_flash ? e : worst16_flash;
        snprintf(w2, sizeof w2, "lse vs bf16 flash %s", what);
        tu_close(w2, lse[0], lse_fl, nl, TOL);
    }
    free(q16), free(k16), free(v16), free(o_ref), free(lse_ref), free(o_fl), free(lse_fl);
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
    tu_sdpa_masks(c->maskcfg, c->B, c->H, c->L, c->S, &a, &rs, &fm, &bm);

    float *o_ref = malloc(4 * no), *lse_ref = malloc(4 * nl), *scratch = malloc(8 * (size_t)S);
    attn__sdpa_args r = a;
    r.o = o_ref, r.lse = lse_ref;
    attn__sdpa_ref(&r, scratch);

    float *o[3], *lse[3], *o_sdpa = malloc(4 * no), *lse_sdpa = malloc(4 * nl);
    for (int t = 0; t < 3; t++) o[t] = malloc(4 * no), lse[t] = malloc(4 * nl);
    char what[220];
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_each_set(isa, "test_decode: decode")) continue;
        snprintf(what, sizeof what,
                 "[%s B%lld H%lld/%lld L%lld S%lld/%lld D%lld/%lld pad%lld causal%d mask%d "
                 "layout%d win%d(%lld,%lld) alibi%d cap%g]",
                 attn__isa_name(isa), (long long)B, (long long)H, (long long)Hkv, (long long)L,
                 (long long)S, (long long)Smax, (long long)D, (long long)Dv, (long long)pad,
                 (int)c->causal, c->maskcfg, c->layout, c->window, (long long)c->wl,
                 (long long)c->wr, c->alibi, (double)c->softcap);
        TU_CHECK(attn__isa_set(ctx[1], isa), "isa_set"); /* attn__sdpa below (tstep 2 too) */
        for (int t = 0; t < 3; t += tstep) {
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
        zero_rows(&a, o[0], lse_ref, what); /* rows that see no key: exactly zeros and -inf */
        for (int t = tstep; t < 3; t += tstep) {
            TU_CHECK(memcmp(o[t], o[0], 4 * no) == 0, "out differs with %d threads %s", t + 1,
                     what);
            TU_CHECK(memcmp(lse[t], lse[0], 4 * nl) == 0, "lse differs with %d threads %s",
                     t + 1, what);
        }
    }
    size_t nk = (size_t)(B * Hkv * Smax * (D + pad)), nv = (size_t)(B * Hkv * Smax * (Dv + pad));
    run_bf16(ctx, c, &a, q, nq, k, nk, v, nv, o, lse, no, nl, scratch);
    for (int t = 0; t < 3; t++) free(o[t]), free(lse[t]);
    free(o_sdpa), free(lse_sdpa), free(o_ref), free(lse_ref), free(scratch);
    free(q), free(k), free(v), free(fm), free(bm);
}

/* One query against S = 300 keys (one chunk): q = 0 and an additive mask give score 0 to key 0
 * and log x to the others, x = 1/2 + 0.99 2^-9 just below the midpoint between the bf16 values
 * 1/2 and 1/2 + 2^-8, so that each of those weights rounds down by ~2^-8 of itself; V = 1.
 * Then out = (1 + (S-1)/2) / (1 + (S-1) x) = 1 - 3.9e-3, exactly the oracle's (the chunk maximum
 * is the row maximum); without the rounding of P it would be 1.  Also through attn_sdpa with
 * GQA (H = 4 on Hkv = 2), which must route to attn__decode_bf16: the same bits. */
static void bf16_rounding(attn_ctx *ctx) {
    enum { S = 300, D = 24, H = 4, HKV = 2 };
    attn__bf16 q16[H * D], k16[HKV * S * D], v16[HKV * S * D];
    float mask[S], o[H * D], o2[H * D], lse[H], lse2[H], scratch[2 * S];
    float x = 0.5f + 0.99f * 0x1p-9f;
    float kf[HKV * S * D];
    tu_fill(kf, HKV * S * D, 77, -1, 1);
    for (int i = 0; i < HKV * S * D; i++) k16[i] = attn__f32_to_bf16(kf[i]), v16[i] = 0x3f80;
    for (int i = 0; i < H * D; i++) q16[i] = 0;
    for (int j = 0; j < S; j++) mask[j] = j == 0 ? 0.0f : logf(x);
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = 1, a.H = H, a.Hkv = HKV, a.L = 1, a.S = S, a.D = a.Dv = D, a.scale = 0.25f;
    int64_t qs[4] = {H * D, D, D, 1}, ks[4] = {HKV * S * D, S * D, D, 1}, ls[3] = {H, 1, 1};
    memcpy(a.qs, qs, sizeof qs), memcpy(a.os, qs, sizeof qs), memcpy(a.ks, ks, sizeof ks);
    memcpy(a.vs, ks, sizeof ks), memcpy(a.ls, ls, sizeof ls);
    a.mask[0].kind = ATTN_MASK_ADD, a.mask[0].data = mask, a.mask[0].dtype = ATTN_F32;
    a.mask[0].stride[3] = 1;
    a.mask_ncols[0] = a.mask_ncols[1] = S;
    a.o = o, a.lse = lse;
    attn__sdpa_bf16_ref(&a, q16, k16, v16, scratch);
    float want = (1.0f + (S - 1) * 0.5f) / (1.0f + (S - 1) * x);
    TU_CHECK(fabsf(o[0] - want) < 1e-5f && 1.0f - want > 3.5e-3f, "oracle %g, expected %g",
             (double)o[0], (double)want);
    memcpy(o2, o, sizeof o);
    char what[80];
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_each_set(isa, "test_decode: bf16 rounding of P")) continue;
        TU_CHECK(attn__isa_set(ctx, isa), "isa_set");
        snprintf(what, sizeof what, "bf16 rounding of P [%s]", attn__isa_name(isa));
        TU_STATUS(attn__decode_bf16(ctx, &a, q16, k16, v16), ATTN_OK, ctx);
        tu_close(what, o, o2, H * D, 1e-5);
    }
    /* attn_sdpa routes bf16 decode shapes to attn__decode_bf16: the same bits, which the
     * fused forward does not give (random q and V here) */
    for (int i = 0; i < H * D; i++) q16[i] = attn__f32_to_bf16(kf[i] * 3.0f);
    tu_fill(kf, HKV * S * D, 78, -1, 1);
    for (int i = 0; i < HKV * S * D; i++) v16[i] = attn__f32_to_bf16(kf[i]);
    float o3[H * D], lse3[H];
    int64_t qsh[4] = {1, H, 1, D}, ksh[4] = {1, HKV, S, D}, msh[1] = {S}, lsh[3] = {1, H, 1};
    attn_tensor qt = attn_tensor_make(q16, ATTN_BF16, 4, qsh),
                kt = attn_tensor_make(k16, ATTN_BF16, 4, ksh),
                vt = attn_tensor_make(v16, ATTN_BF16, 4, ksh),
                ot = attn_tensor_make(o3, ATTN_F32, 4, qsh),
                lt = attn_tensor_make(lse3, ATTN_F32, 3, lsh);
    attn_mask m;
    memset(&m, 0, sizeof m);
    m.kind = ATTN_MASK_ADD, m.t = attn_tensor_make(mask, ATTN_F32, 1, msh);
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.scale = a.scale;
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_each_set(isa, "test_decode: attn_sdpa bf16 routing")) continue;
        TU_CHECK(attn__isa_set(ctx, isa), "isa_set");
        TU_STATUS(attn__decode_bf16(ctx, &a, q16, k16, v16), ATTN_OK, ctx);
        TU_STATUS(attn_sdpa(ctx, &qt, &kt, &vt, &m, &opt, &ot, NULL, &lt), ATTN_OK, ctx);
        TU_CHECK(memcmp(o3, o, sizeof o) == 0 && memcmp(lse3, lse, sizeof lse) == 0,
                 "attn_sdpa (bf16, L = 1) differs from attn__decode_bf16 [%s]",
                 attn__isa_name(isa));
        attn__sdpa_args f = a;
        f.o = o3, f.lse = lse3;
        TU_STATUS(attn__flash_fwd_bf16(ctx, &f, q16, k16, v16), ATTN_OK, ctx);
        TU_CHECK(memcmp(o3, o, sizeof o) != 0, "the fused forward gives the decode's bits [%s]",
                 attn__isa_name(isa));
    }
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
    setenv("ATTN_DECODE", "0", 1); /* read by attn_ctx_create, not per call */
    attn_ctx *off = tu_ctx(1);
    TU_CHECK(off && !attn__decode_eligible(off, &a), "ATTN_DECODE=0 ignored");
    TU_CHECK(attn__decode_eligible(ctx, &a), "ATTN_DECODE=0 read after the context's creation");
    unsetenv("ATTN_DECODE");
    attn_ctx_free(off);
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

/* attn__decode_multi: problems of different lengths over their own caches, fp32 and bf16
 * storage mixed, against attn__decode / attn__decode_bf16 on each alone: the same bits, on
 * every set and 1-3 threads; one set of problems large enough for the parallel merge. */
static void multi(attn_ctx *ctx[3]) {
    enum { NP = 5 };
    for (int big = 0; big < 2; big++) {
        const int64_t H = big ? 64 : 9, Hkv = big ? 8 : 3, D = big ? 128 : 64;
        /* the big set's merge work (rows x chunks of 512 keys x Dv) stays above the parallel
         * merge's 65536 under ATTN_TEST_QUICK too: 64 x 9 x 128 */
        const int64_t lens[NP] = {33, 100, 513, big ? (tu_quick(NULL) ? 1537 : 4097) : 1000, 40};
        attn__sdpa_args a[NP];
        attn__bf16 *q16[NP] = {NULL}, *k16[NP] = {NULL}, *v16[NP] = {NULL};
        float *q[NP], *k[NP], *v[NP], *o1[NP], *l1[NP], *o2[NP], *l2[NP];
        for (int i = 0; i < NP; i++) {
            const int64_t S = lens[i], cap = S + 7;
            const size_t nk = (size_t)(Hkv * cap * D), nq = (size_t)(H * D);
            memset(&a[i], 0, sizeof a[i]);
            q[i] = malloc(4 * nq), k[i] = malloc(4 * nk), v[i] = malloc(4 * nk);
            tu_fill(q[i], nq, 900 + (uint64_t)i, -2, 2);
            tu_fill(k[i], nk, 910 + (uint64_t)i, -2, 2);
            tu_fill(v[i], nk, 920 + (uint64_t)i, -1, 1);
            o1[i] = malloc(4 * nq), o2[i] = malloc(4 * nq);
            l1[i] = malloc(4 * (size_t)H), l2[i] = malloc(4 * (size_t)H);
            attn__sdpa_args *x = &a[i];
            x->B = 1, x->H = H, x->Hkv = Hkv, x->L = 1, x->S = S, x->D = x->Dv = D;
            x->q = q[i], x->k = k[i], x->v = v[i];
            x->qs[0] = H * D, x->qs[1] = D, x->qs[2] = D, x->qs[3] = 1;
            x->ks[0] = x->vs[0] = Hkv * cap * D, x->ks[1] = x->vs[1] = cap * D;
            x->ks[2] = x->vs[2] = D, x->ks[3] = x->vs[3] = 1;
            x->os[0] = H * D, x->os[1] = D, x->os[2] = D, x->os[3] = 1;
            x->ls[0] = H, x->ls[1] = 1, x->ls[2] = 1;
            x->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            x->scale = 1.0f / sqrtf((float)D);
            x->softcap = i == 2 ? 5.0f : 0.0f;
            if (i % 2) /* bf16 storage */
                q16[i] = to_bf16(q[i], nq), k16[i] = to_bf16(k[i], nk), v16[i] = to_bf16(v[i], nk);
        }
        for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
            if (!tu_each_set(isa, "test_decode: multi")) continue;
            for (int t = 0; t < 3; t += tstep) {
                TU_CHECK(attn__isa_set(ctx[t], isa), "isa_set");
                attn__sdpa_args b[NP];
                attn__decode_job jobs[NP];
                for (int i = 0; i < NP; i++) {
                    attn__sdpa_args one = a[i];
                    one.o = o1[i], one.lse = l1[i];
                    TU_STATUS(q16[i] ? attn__decode_bf16(ctx[t], &one, q16[i], k16[i], v16[i])
                                     : attn__decode(ctx[t], &one),
                              ATTN_OK, ctx[t]);
                    b[i] = a[i];
                    memset(o2[i], 0xff, 4 * (size_t)(H * D)); /* NaN: all must be written */
                    b[i].o = o2[i], b[i].lse = l2[i];
                    jobs[i] = (attn__decode_job){&b[i], q16[i], k16[i], v16[i]};
                }
                TU_STATUS(attn__decode_multi(ctx[t], jobs, NP), ATTN_OK, ctx[t]);
                for (int i = 0; i < NP; i++)
                    TU_CHECK(!memcmp(o1[i], o2[i], 4 * (size_t)(H * D)) &&
                                 !memcmp(l1[i], l2[i], 4 * (size_t)H),
                             "decode_multi [%s, %d threads, H %lld] problem %d (S %lld, %s) "
                             "differs from attn__decode alone", attn__isa_name(isa), t + 1,
                             (long long)H, i, (long long)lens[i], q16[i] ? "bf16" : "fp32");
            }
        }
        for (int i = 0; i < NP; i++) {
            free(q[i]), free(k[i]), free(v[i]), free(o1[i]), free(o2[i]), free(l1[i]);
            free(l2[i]), free(q16[i]), free(k16[i]), free(v16[i]);
        }
    }
    TU_STATUS(attn__decode_multi(ctx[0], NULL, 0), ATTN_OK, ctx[0]);
}

int main(void) {
    /* ATTN_TEST_QUICK (an emulator): each cache length with two query lengths, 8 heads at
     * most, a third of the odd decode shapes and none on the longest cache, 1 and 3 threads,
     * no plain C set (tu_each_set) */
    const int quick = tu_quick("test_decode");
    if (quick) tstep = 2;
    attn_ctx *ctx[3] = {tu_ctx(1), tu_ctx(2), tu_ctx(3)};
    refusals(ctx[0]);
    bf16_rounding(ctx[1]);
    multi(ctx);
    uint64_t rs = 4242;
    const int64_t lens[] = {1, 2, 5, 16};
    const int64_t kvl[] = {1, 3, 511, 513, 1000, 4097};
    const int64_t hh[4][2] = {{1, 1}, {8, 2}, {32, 8}, {4, 1}};
    const int64_t dims[] = {32, 64, 80, 128, 33, 100};
    int ncase = 0;
    /* every (L, S) pair, then random shapes with windows, ALiBi and soft caps */
    for (int t = 0; t < (quick ? 12 : 60) && !tu_failures; t++) {
        tcase c;
        memset(&c, 0, sizeof c);
        c.L = t < 24 ? lens[t % 4] : lens[tu_rand(&rs) % 4];
        c.S = quick ? kvl[t / 2] : t < 24 ? kvl[t / 4] : kvl[tu_rand(&rs) % 6];
        int hsel = (int)(tu_rand(&rs) % 4);
        if (quick && hsel == 2) hsel = 1; /* 8 heads at most */
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
    /* the decode case proper, with an odd number of rows per kv head (the 1 x 16 and 2 x 8 qk
     * blocks, which the shapes above rarely reach with many visible keys): L = 1 or 3, G = 1
     * or 3, long caches, no causal limit or the bottom-right one */
    for (int t = 0; t < (quick ? 4 : 12) && !tu_failures; t++) {
        tcase c;
        memset(&c, 0, sizeof c);
        const int64_t odd_s[] = {511, 513, 1000, 4097};
        c.L = t % 4 < 2 ? 1 : 3;
        c.H = t % 2 ? 3 : 2, c.Hkv = t % 2 ? 1 : 2;
        c.S = odd_s[tu_rand(&rs) % (quick ? 3 : 4)]; /* quick: 4097 ran above */
        c.B = 1 + (int64_t)(tu_rand(&rs) % 2);
        c.D = dims[tu_rand(&rs) % 6];
        c.Dv = t % 3 == 2 ? 48 : c.D;
        c.causal = t % 2 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
        c.maskcfg = (t * 5) % 9;
        c.layout = (t / 2) % 2;
        c.alibi = t % 5 == 3;
        c.softcap = t % 4 == 1 ? 5.0f : 0.0f;
        run_case(ctx, &c, 7000 + (uint64_t)t);
        ncase++;
    }
    printf("test_decode: %d cases, worst relative error %.3g (tolerance %.0e)\n", ncase, worst,
           TOL);
    printf("test_decode bf16: worst relative error out %.3g (tolerance %.0e), lse %.3g "
           "(tolerance %.0e), out vs bf16 flash %.3g\n",
           worst16_out, BF16_TOL, worst16_lse, TOL, worst16_flash);
    for (int t = 0; t < 3; t++) attn_ctx_free(ctx[t]);
    return tu_finish("test_decode");
}
