/* The bf16 attention forward (attn__flash_fwd_bf16, flash.h) against its oracle
 * (attn__sdpa_bf16_ref) in every way it can run: the plain C set (plain C bf16 dot
 * microkernels), AVX2 and AVX-512 (operands widened to fp32, P rounded by AVX512_BF16 or plain
 * C), AVX-512 with ATTN_BF16=dot (the AVX512_BF16 dot microkernels, where the CPU has them) and
 * with ATTN_BF16=0; on random shapes around the tiles (L, S not multiples of 96 / 64, odd S so
 * that the last key pair is half padding, odd D), every mask kind of test_flash.c (fully masked
 * rows included), both causal alignments with L != S, GQA/MQA, dropout, lse, strided layouts,
 * the sliding window, ALiBi and soft-capping; bit-identical results for 1, 2 and 3 threads; a
 * case where the rounding of P shows; the microkernels alone; the public API (dtype checks,
 * refusals). *
 * Tolerances, as max|err| <= tol * max(1, max|ref|) per output (v in [-1, 1]; bf16 has 8
 * significant bits, so rounding to bf16 moves a value by at most 2^-8 of it, one ulp is at most
 * 2^-7 of it):
 *  out vs the bf16 reference, BF16_TOL = 4e-3 (2^-8).  Both round every weight e_j (times its
 *    dropout multiplier) to bf16, but not always to the same neighbour: the fused kernel
 *    rounds e_j relative to the running maximum of the key tiles seen so far, the reference
 *    relative to the row maximum, and where their fp32 exponentials differ in the last bit
 *    next to a rounding boundary they round apart too.  Each such weight differs by one ulp
 *    (<= 2^-7 e_j); the differences are rare or of either sign, so an output moves by about
 *    2^-8 sqrt(sum_j e_j^2) / l |v|, or by up to 2^-7 w |v| / (1-p) where a weight w near 1
 *    rounds apart.  Measured <= 1.8e-3 (the worst over every case and variant is printed).
 *    What this tolerance cannot see, the other checks do: any key scored, masked or skipped
 *    differently changes lse (LSE_TOL below), and the uniform-weight dropout cases, where
 *    every e_j = 1 is exact in bf16, hold the kept set and V to 2e-5.
 *  lse vs the bf16 reference, LSE_TOL = 2e-5: lse sums the unrounded weights, so it sees only
 *    the fp32 rounding of the scores (as in test_flash.c).
 *  out vs the fp32 reference on the same bf16-valued inputs, 2^-8 / (1 - p) + 1e-4: a hard
 *    bound, the rounding of each weight (<= 2^-8 e_j) being the one difference, in a convex
 *    combination of |v| <= 1 scaled by 1/(1-p), plus the fp32 error of both.
 * Microkernels: the tile product within 1e-6 of the double sum |a||b| scale (fp32 sums of exact
 * products); the conversion bit-exact against attn__f32_to_bf16 (ties included). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/flash.h"
#include "../src/kernels/kernels.h"
#include "testutil_sdpa.h"

#define BF16_TOL 4e-3
#define LSE_TOL 2e-5

static double worst_out, worst_lse, worst_f32;

/* ---- microkernels ---------------------------------------------------------------------- */
static void ukr_case(const attn__flash_bf16_kernels *kb, uint64_t *rs) {
    int64_t m = 1 + (int64_t)(tu_rand(rs) % (kb->tiles ? 70 : 14));
    int64_t n = 16 * (1 + (int64_t)(tu_rand(rs) % 8));
    /* tile kernels: K2 in whole steps of 16 pairs, A read up to a multiple of 16 rows */
    int64_t K2 = kb->tiles ? 16 * (int64_t)(tu_rand(rs) % 4) : (int64_t)(tu_rand(rs) % 41);
    int64_t lda = 2 * K2 + 2 * (int64_t)(tu_rand(rs) % 3);
    int64_t ldb = n + 16 * (int64_t)(tu_rand(rs) % 2), ldc = n + (int64_t)(tu_rand(rs) % 5);
    int accum = (int)(tu_rand(rs) % 3); /* 0: overwrite, 1: C += .., 2: C = cs C + .. */
    int64_t ma = kb->tiles ? (m + 15) / 16 * 16 : m;
    size_t na = (size_t)(ma * lda + 2), nb = (size_t)(2 * K2 * ldb + 2), nc = (size_t)(m * ldc);
    float *fa = malloc(4 * na), *fb = malloc(4 * nb), *c = malloc(4 * nc), *cref = malloc(4 * nc),
          *cs = malloc(4 * (size_t)m);
    attn__bf16 *a = malloc(2 * na), *b = malloc(2 * nb);
    tu_fill(fa, na, tu_rand(rs), -2, 2), tu_fill(fb, nb, tu_rand(rs), -2, 2);
    tu_fill(c, nc, tu_rand(rs), -1, 1), tu_fill(cs, (size_t)m, tu_rand(rs), 0, 1);
    for (size_t i = 0; i < na; i++) a[i] = attn__f32_to_bf16(fa[i]);
    for (size_t i = 0; i < nb; i++) b[i] = attn__f32_to_bf16(fb[i]);
    double scale = 1;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0, mag = 0;
            for (int64_t k = 0; k < 2 * K2; k++) {
                double x = attn__bf16_to_f32(a[i * lda + k]) *
                           (double)attn__bf16_to_f32(b[(k / 2) * 2 * ldb + 2 * j + (k & 1)]);
                acc += x, mag += fabs(x);
            }
            double c0 = c[i * ldc + j];
            cref[i * ldc + j] = (float)(accum ? (accum == 2 ? cs[i] : 1.0) * c0 + acc : acc);
            if (mag + 1 > scale) scale = mag + 1;
        }
    if (kb->tiles) kb->begin();
    kb->mm(m, n, K2, a, lda, b, ldb, c, ldc, accum != 0, accum == 2 ? cs : NULL);
    if (kb->tiles) kb->end();
    double e = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double d = fabs((double)c[i * ldc + j] - cref[i * ldc + j]);
            if (!(d <= e)) e = d; /* NaN sticks */
        }
    TU_CHECK(e <= 1e-6 * scale, "bf16 mm (%s) m%lld n%lld K2 %lld accum %d: error %.3g",
             kb->name, (long long)m, (long long)n, (long long)K2, accum, e);
    free(fa), free(fb), free(c), free(cref), free(cs), free(a), free(b);
}

static void ukr_cvt(const attn__flash_bf16_kernels *kb, uint64_t *rs) {
    enum { R = 3, N = 96, LD = 100, LDP = 98 };
    float s[R * LD];
    attn__bf16 p[R * LDP], want[R * LDP];
    for (int i = 0; i < R * LD; i++) {
        float x = (float)((double)(tu_rand(rs) >> 11) / 9007199254740992.0 * 4 - 1);
        uint32_t u;
        memcpy(&u, &x, 4);
        if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u; /* exact ties: to even */
        if (i % 7 == 0) u &= 0xffff0000u;                /* exact bf16 values */
        memcpy(&x, &u, 4);
        s[i] = i % 11 == 0 ? 0.0f : x;
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < N; j++) want[r * LDP + j] = attn__f32_to_bf16(s[r * LD + j]);
    kb->cvt(s, LD, R, N, p, LDP);
    int bad = 0;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < N; j++) bad += p[r * LDP + j] != want[r * LDP + j];
    TU_CHECK(bad == 0, "bf16 cvt (isa %d): %d values differ", kb->isa, bad);
    float sr[R * LD];
    memcpy(sr, s, sizeof sr);
    kb->round(sr, LD, R, N - 16);
    bad = 0;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < LD; j++) {
            float w = j < N - 16 ? attn__bf16_round(s[r * LD + j]) : s[r * LD + j];
            bad += memcmp(&sr[r * LD + j], &w, 4) != 0;
        }
    TU_CHECK(bad == 0, "bf16 round (isa %d): %d values differ", kb->isa, bad);
}

/* The fused softmax (flash.h "softmax") against double: mx exactly the largest rounded
 * scale * s_j, mn = max(mx, m), each weight within 1 bf16 ulp (2^-7 relative) of
 * w_j = max(exp(scale * s_j - mn), 2^-125), and the sum within 2e-6 + ln2 * eps_t relative of
 * the double sum of the w_j, where eps_t = (|mn| + max_j |scale * s_j|) log2(e) 2^-22 bounds
 * the float rounding of the exponent scale * s_j * log2(e) - mn * log2(e) (the fp32
 * kernels' expsum has the same kind of term); NaN fails.  Rows: one score far above the rest
 * (weights clamped to 2^-125), a running maximum above every score, one with none yet. */
static void ukr_softmax(const attn__flash_bf16_kernels *kb, uint64_t *rs) {
    enum { R = 5, N = 96, LD = 100, LDP = 98 };
    float sc[R * LD], m[R], mx[R], mn[R], sum[R];
    attn__bf16 p[R * LDP];
    for (int c = 0; c < 4; c++) {
        const float scale = c == 3 ? -0.7f : 0.125f * (float)(c + 1);
        tu_fill(sc, R * LD, tu_rand(rs), -40, 40);
        sc[7] = 900.0f; /* row 0: weights far below 2^-125 */
        for (int r = 0; r < R; r++) m[r] = r == 1 ? 200.0f : r == 2 ? -INFINITY : -3.0f;
        kb->softmax(sc, LD, R, N, scale, m, mx, mn, sum, p, LDP);
        int bad = 0;
        double werr = 0;
        for (int r = 0; r < R; r++) {
            float want = -INFINITY;
            for (int j = 0; j < N; j++) {
                const float v = scale * sc[r * LD + j];
                if (v > want) want = v;
            }
            bad += memcmp(&mx[r], &want, 4) != 0;
            const float wn = want > m[r] ? want : m[r];
            bad += memcmp(&mn[r], &wn, 4) != 0;
            double ds = 0, big = fabs((double)wn);
            for (int j = 0; j < N; j++) {
                double e = exp((double)(scale * sc[r * LD + j]) - (double)wn);
                if (e < 0x1p-125) e = 0x1p-125;
                ds += e;
                big = fmax(big, fabs((double)wn) + fabs((double)(scale * sc[r * LD + j])));
                const double got = attn__bf16_to_f32(p[r * LDP + j]);
                const double d = fabs(got - e) / e;
                if (!(d <= werr)) werr = d;
            }
            const double se = fabs((double)sum[r] - ds) / ds,
                         tol = 2e-6 + 0.6931471805599453 * big * 1.4426950408889634 * 0x1p-22;
            TU_CHECK(se <= tol, "softmax (%s) scale %g row %d: sum %.9g, double %.9g (tol %.3g)",
                     kb->name, (double)scale, r, (double)sum[r], ds, tol);
        }
        TU_CHECK(bad == 0, "softmax (%s) scale %g: %d maxima differ", kb->name, (double)scale,
                 bad);
        TU_CHECK(werr <= 1.0 / 128, "softmax (%s) scale %g: weight error %.3g of a weight",
                 kb->name, (double)scale, werr);
    }
}

static void microkernels(void) {
    const attn__flash_bf16_kernels *tabs[3] = {attn__flash_bf16_kernels_ref(),
                                               attn__flash_bf16_kernels_avx512(),
                                               attn__flash_bf16_kernels_amx()};
    uint64_t rs = 77;
    int cpu = 0, tiles = 0;
    if (tabs[1] && tu_isa_ok(TU_CPU_AVX512_BF16, "test_flash_bf16: AVX512_BF16 microkernels")) {
        attn_ctx *c = tu_ctx(1);
        cpu = c && attn__isa_set(c, ATTN__ISA_AVX512) && c->kern.has_bf16; /* not ATTN_BF16=0 */
        attn_ctx_free(c);
    }
    /* the AMX tiles: where the CPU has them, the OS granted them and ATTN_AMX is not 0 */
    if (cpu && tabs[2] && tu_isa_ok(TU_CPU_AMX_BF16, "test_flash_bf16: AMX microkernels")) {
        attn_ctx *c = tu_ctx(1);
        tiles = c && attn__isa_set(c, ATTN__ISA_AVX512) && c->kern.flash_bf16 == tabs[2];
        attn_ctx_free(c);
    }
    printf("test_flash_bf16: AVX512_BF16 kernels %s; AMX kernels %s\n",
           tabs[1] ? (cpu ? "built and run" : "built, not run (CPU or ATTN_BF16=0)")
                   : "not built",
           tabs[2] ? (tiles ? "built and run" : "built, not run (CPU, OS or ATTN_AMX=0)")
                   : "not built");
    for (int t = 0; t < 3; t++) {
        if (!tabs[t] || (t == 1 && !cpu) || (t == 2 && !tiles)) continue;
        for (int i = 0; i < 200; i++) ukr_case(tabs[t], &rs);
        ukr_cvt(tabs[t], &rs);
        if (tabs[t]->softmax) ukr_softmax(tabs[t], &rs);
    }
}

/* ---- the fused forward ---------------------------------------------------------------- */
typedef struct tcase {
    int64_t B, H, Hkv, L, S, D, Dv;
    attn_causal causal;
    int maskcfg; /* 0..6, see tu_sdpa_masks in testutil_sdpa.h */
    float dropout;
    int blhd;    /* q, k, v, o in (B, L, H, D) layout */
    int uniform; /* q = 0: uniform weights, every e_j = 1 (exact in bf16) */
    int feat;    /* bits: 1 sliding window, 2 ALiBi, 4 soft-capping */
} tcase;

static void strides_of(const tcase *c, int64_t heads, int64_t len, int64_t d, int64_t s[4]) {
    if (c->blhd) s[0] = len * heads * d, s[1] = d, s[2] = heads * d, s[3] = 1;
    else s[0] = heads * len * d, s[1] = len * d, s[2] = d, s[3] = 1;
}

/* bf16 copy of n floats, and the floats replaced by their bf16 values. */
static attn__bf16 *to_bf16(float *x, size_t n) {
    attn__bf16 *y = malloc(2 * n + 2);
    for (size_t i = 0; i < n; i++) y[i] = attn__f32_to_bf16(x[i]), x[i] = attn__bf16_to_f32(y[i]);
    return y;
}

static void run_case(attn_ctx *ctx[3], const tcase *c, uint64_t seed) {
    uint64_t rs = seed;
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, L = c->L, S = c->S, D = c->D, Dv = c->Dv;
    size_t nq = (size_t)(B * H * L * D), nk = (size_t)(B * Hkv * S * D),
           nv = (size_t)(B * Hkv * S * Dv), no = (size_t)(B * H * L * Dv),
           nl = (size_t)(B * H * L);
    float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nv);
    tu_fill(q, nq, seed + 1, -2, 2), tu_fill(k, nk, seed + 2, -2, 2);
    tu_fill(v, nv, seed + 3, -1, 1);
    if (c->uniform) memset(q, 0, 4 * nq);
    attn__bf16 *q16 = to_bf16(q, nq), *k16 = to_bf16(k, nk), *v16 = to_bf16(v, nv);
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = B, a.H = H, a.Hkv = Hkv, a.L = L, a.S = S, a.D = D, a.Dv = Dv;
    strides_of(c, H, L, D, a.qs), strides_of(c, Hkv, S, D, a.ks);
    strides_of(c, Hkv, S, Dv, a.vs), strides_of(c, H, L, Dv, a.os);
    a.ls[0] = H * L, a.ls[1] = L, a.ls[2] = 1;
    a.causal = c->causal;
    a.scale = 1.0f / sqrtf((float)D) * (c->maskcfg == 3 ? 1.5f : 1.0f);
    if (c->dropout > 0) a.dropout_p = c->dropout, a.seed = seed * 7 + 1, a.offset = seed % 5;
    float *fm, slopes[8];
    unsigned char *bm;
    tu_sdpa_masks(c->maskcfg, c->B, c->H, c->L, c->S, &a, &rs, &fm, &bm);
    if (c->feat & 1) { /* either side may be unlimited (-1) */
        a.window = 1;
        a.window_left = (int64_t)(tu_rand(&rs) % 80) - 10;
        a.window_right = (int64_t)(tu_rand(&rs) % 80) - 10;
        if (a.window_left < 0) a.window_left = -1;
        if (a.window_right < 0) a.window_right = -1;
    }
    if (c->feat & 2) {
        for (int h = 0; h < 8; h++) slopes[h] = 0.5f / (float)(1 << h);
        a.alibi = slopes;
    }
    if (c->feat & 4) a.softcap = 3.0f;

    /* the bf16 reference, and the fp32 one on the same (bf16-valued) inputs */
    float *o_ref = malloc(4 * no), *lse_ref = malloc(4 * nl), *scratch = malloc(8 * (size_t)S);
    float *o_f32 = malloc(4 * no), *lse_f32 = malloc(4 * nl);
    attn__sdpa_args r = a;
    r.o = o_ref, r.lse = lse_ref;
    attn__sdpa_bf16_ref(&r, q16, k16, v16, scratch);
    r.q = q, r.k = k, r.v = v, r.o = o_f32, r.lse = lse_f32;
    attn__sdpa_ref(&r, scratch);

    float *o[3], *lse[3];
    for (int t = 0; t < 3; t++) o[t] = malloc(4 * no), lse[t] = malloc(4 * nl);
    char what[200], w2[240];
    /* variants: every kernel set (plain C: the bf16 dot microkernels; AVX2: widened to fp32;
     * AVX-512: the AMX tiles where the CPU has them, else widened), then AVX-512 with
     * ATTN_BF16=dot (the AVX512_BF16 dot microkernels, where the CPU has them), with
     * ATTN_BF16=0 (widened, P rounded by plain C) and with ATTN_AMX=0 (widened, P rounded by
     * AVX512_BF16) */
    for (int var = 0; var < ATTN__ISA_COUNT + 3; var++) {
        int isa = var < ATTN__ISA_COUNT ? var : ATTN__ISA_AVX512;
        /* ATTN_BF16 as the contexts would have read it: 2 = dot, 0 = "0", 1 = unset */
        int env = var == ATTN__ISA_COUNT ? 2 : var == ATTN__ISA_COUNT + 1 ? 0 : 1;
        if (!tu_each_set(isa, "test_flash_bf16: fused forward")) continue;
        for (int t = 0; t < 3; t++) {
            ctx[t]->env.bf16 = env, ctx[t]->env.amx = var != ATTN__ISA_COUNT + 2;
            TU_CHECK(attn__isa_set(ctx[t], isa), "isa_set");
            attn__sdpa_args f = a;
            f.o = o[t], f.lse = lse[t];
            memset(o[t], 0xff, 4 * no); /* NaN: every output must be written */
            TU_STATUS(attn__flash_fwd_bf16(ctx[t], &f, q16, k16, v16), ATTN_OK, ctx[t]);
        }
        const attn__flash_bf16_kernels *kb = ctx[0]->kern.flash_bf16;
        int widen = ctx[0]->kern.flash_bf16_widen;
        const char *ukr = widen ? (kb->isa ? "widen+avx512bf16" : "widen+C")
                          : kb->tiles ? "dot amx"
                                      : (kb->isa ? "dot avx512bf16" : "dot C");
        for (int t = 0; t < 3; t++)
            ctx[t]->env.bf16 = 1, ctx[t]->env.amx = 1, attn__isa_set(ctx[t], ATTN__ISA_DEFAULT);
        snprintf(what, sizeof what,
                 "[%s/%s B%lld H%lld/%lld L%lld S%lld D%lld/%lld causal%d mask%d p%.2f blhd%d "
                 "feat%d]",
                 attn__isa_name(isa), ukr, (long long)B, (long long)H, (long long)Hkv,
                 (long long)L, (long long)S, (long long)D, (long long)Dv, (int)c->causal,
                 c->maskcfg, (double)c->dropout, c->blhd, c->feat);
        double m, e;
#define CLOSE(name, got, ref, n, tol, worst)                                                  \
    do {                                                                                      \
        snprintf(w2, sizeof w2, "%s %s", name, what);                                         \
        tu_close(w2, got, ref, n, tol);                                                       \
        e = tu_max_err(got, ref, n, &m) / (m > 1 ? m : 1);                                    \
        if (e > worst) worst = e;                                                             \
    } while (0)
        CLOSE("out", o[0], o_ref, no, c->uniform ? 2e-5 : BF16_TOL, worst_out);
        CLOSE("lse", lse[0], lse_ref, nl, LSE_TOL, worst_lse);
        CLOSE("out vs fp32", o[0], o_f32, no, 1.0 / 256 / (1.0 - c->dropout) + 1e-4, worst_f32);
        for (int t = 1; t < 3; t++) {
            TU_CHECK(memcmp(o[t], o[0], 4 * no) == 0, "out differs with %d threads %s", t + 1,
                     what);
            TU_CHECK(memcmp(lse[t], lse[0], 4 * nl) == 0, "lse differs with %d threads %s",
                     t + 1, what);
        }
    }
    for (int t = 0; t < 3; t++) free(o[t]), free(lse[t]);
    free(o_ref), free(lse_ref), free(o_f32), free(lse_f32), free(scratch);
    free(q), free(k), free(v), free(q16), free(k16), free(v16), free(fm), free(bm);
}

/* P is rounded: two keys with weights 1 and e = 0.5 + 0.4 * 2^-9 (0.4 of a bf16 ulp above 0.5,
 * far from a rounding boundary), v = 0 and 1: the output is bf16(e) / (1 + e) = 0.5 / (1 + e),
 * 5e-4 below the unrounded e / (1 + e), for every kernel set and both ways to multiply. */
static void rounding(attn_ctx *ctx) {
    enum { L = 3, S = 2, Dv = 16 };
    attn__bf16 q[L], k[S], v[S * Dv];
    float o[L * Dv];
    for (int i = 0; i < L; i++) q[i] = attn__f32_to_bf16(1.0f);
    k[0] = attn__f32_to_bf16(0.0f), k[1] = attn__f32_to_bf16(1.0f);
    for (int j = 0; j < S * Dv; j++) v[j] = attn__f32_to_bf16(j < Dv ? 0.0f : 1.0f);
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = a.H = a.Hkv = 1, a.L = L, a.S = S, a.D = 1, a.Dv = Dv;
    int64_t qs[4] = {L, L, 1, 1}, ks[4] = {S, S, 1, 1}, vs[4] = {S * Dv, S * Dv, Dv, 1},
            os[4] = {L * Dv, L * Dv, Dv, 1};
    memcpy(a.qs, qs, sizeof qs), memcpy(a.ks, ks, sizeof ks), memcpy(a.vs, vs, sizeof vs);
    memcpy(a.os, os, sizeof os);
    a.mask_ncols[0] = a.mask_ncols[1] = S;
    a.scale = logf(0.5f + 0.4f / 512), a.o = o; /* score of key 1: ln e */
    double e = exp((double)a.scale), want = 0.5 / (1 + e), unrounded = e / (1 + e);
    TU_CHECK(unrounded - want > 4e-4, "rounding test: the design is off");
    for (int var = 0; var < ATTN__ISA_COUNT + 2; var++) { /* + dot, + ATTN_AMX=0 */
        int isa = var < ATTN__ISA_COUNT ? var : ATTN__ISA_AVX512;
        if (!tu_set_ok(isa, "test_flash_bf16: rounding of P")) continue;
        ctx->env.bf16 = var == ATTN__ISA_COUNT ? 2 : 1; /* ATTN_BF16=dot, else unset */
        ctx->env.amx = var != ATTN__ISA_COUNT + 1;
        TU_CHECK(attn__isa_set(ctx, isa), "isa_set");
        TU_STATUS(attn__flash_fwd_bf16(ctx, &a, q, k, v), ATTN_OK, ctx);
        double err = 0;
        for (int i = 0; i < L * Dv; i++) err = fmax(err, fabs((double)o[i] - want));
        TU_CHECK(err < 1e-6, "P not rounded to bf16 (%s, %s%s): error %.3g, unrounded %.3g",
                 attn__isa_name(isa), ctx->kern.flash_bf16->name,
                 ctx->kern.flash_bf16_widen ? " widened" : "", err, fabs(o[0] - unrounded));
        ctx->env.bf16 = 1, ctx->env.amx = 1, attn__isa_set(ctx, ATTN__ISA_DEFAULT);
    }
}

/* A row's result does not depend on the other rows: the last rows of a problem computed alone
 * (bottom-right causal: each still sees the same keys) give the bits they get among all, in
 * every way to multiply (the language models compute a prompt's last rows alone, and the
 * tile kernels' groups and strips must not move with L).  Long key ranges, so that the
 * groups and the partial tile slices of the tile kernels are involved. */
static void rows_alone(attn_ctx *ctx) {
    enum { H = TU_RA_H, L = TU_RA_L, S = TU_RA_S, D = TU_RA_D };
    const size_t nq = (size_t)H * L * D, nk = (size_t)H * S * D;
    tu_rows_alone r;
    tu_rows_alone_init(&r);
    attn__bf16 *q16 = to_bf16(r.q, nq), *k16 = to_bf16(r.k, nk), *v16 = to_bf16(r.v, nk);
    for (int var = 0; var < ATTN__ISA_COUNT + 2; var++) { /* + dot, + ATTN_AMX=0 */
        int isa = var < ATTN__ISA_COUNT ? var : ATTN__ISA_AVX512;
        if (!tu_each_set(isa, "test_flash_bf16: rows alone")) continue;
        ctx->env.bf16 = var == ATTN__ISA_COUNT ? 2 : 1, ctx->env.amx = var != ATTN__ISA_COUNT + 1;
        TU_CHECK(attn__isa_set(ctx, isa), "isa_set");
        for (int causal = 0; causal < 2; causal++) {
            attn__sdpa_args all;
            tu_sdpa_args_bhld(&all, H, L, S, D,
                              causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE, 0.125f);
            all.o = r.o;
            TU_STATUS(attn__flash_fwd_bf16(ctx, &all, q16, k16, v16), ATTN_OK, ctx);
            for (int t = 0; t < TU_RA_NL; t++) {
                const int64_t n = tu_rows_alone_lasts[t];
                attn__sdpa_args a = all;
                a.L = n, a.o = r.o1; /* the last n rows of each head, same strides */
                TU_STATUS(attn__flash_fwd_bf16(ctx, &a, q16 + (L - n) * D, k16, v16), ATTN_OK,
                          ctx);
                TU_CHECK(!tu_rows_alone_differ(&r, n),
                         "rows alone (%s, %s%s, causal %d): the last %lld rows differ from "
                         "their bits among all %d", attn__isa_name(isa), ctx->kern.flash_bf16->name,
                         ctx->kern.flash_bf16_widen ? " widened" : "", causal, (long long)n,
                         (int)L);
            }
        }
        ctx->env.bf16 = 1, ctx->env.amx = 1, attn__isa_set(ctx, ATTN__ISA_DEFAULT);
    }
    tu_rows_alone_free(&r);
    free(q16), free(k16), free(v16);
}

/* ---- the public API ------------------------------------------------------------------- */
static void api(attn_ctx *ctx) {
    enum { B = 1, H = 2, L = 70, S = 33, D = 24 };
    int64_t qsh[4] = {B, H, L, D}, ksh[4] = {B, H, S, D}, osh[4] = {B, H, L, D},
            lsh[3] = {B, H, L}, wsh[4] = {B, H, L, S};
    size_t nq = B * H * L * D, nk = B * H * S * D;
    float *qf = malloc(4 * nq), *kf = malloc(4 * nk), *vf = malloc(4 * nk), *o = malloc(4 * nq),
          *o2 = malloc(4 * nq), *lse = malloc(4 * B * H * L), *lse2 = malloc(4 * B * H * L),
          *w = malloc(4 * B * H * L * S);
    tu_fill(qf, nq, 1, -1, 1), tu_fill(kf, nk, 2, -1, 1), tu_fill(vf, nk, 3, -1, 1);
    attn__bf16 *q16 = to_bf16(qf, nq), *k16 = to_bf16(kf, nk), *v16 = to_bf16(vf, nk);
    attn_tensor q = attn_tensor_make(q16, ATTN_BF16, 4, qsh),
                k = attn_tensor_make(k16, ATTN_BF16, 4, ksh),
                v = attn_tensor_make(v16, ATTN_BF16, 4, ksh),
                kf32 = attn_tensor_make(kf, ATTN_F32, 4, ksh),
                vf32 = attn_tensor_make(vf, ATTN_F32, 4, ksh),
                qf32 = attn_tensor_make(qf, ATTN_F32, 4, qsh),
                out = attn_tensor_make(o, ATTN_F32, 4, osh),
                lt = attn_tensor_make(lse, ATTN_F32, 3, lsh),
                wt = attn_tensor_make(w, ATTN_F32, 4, wsh);
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    TU_STATUS(attn_sdpa(ctx, &q, &k, &v, NULL, &opt, &out, NULL, &lt), ATTN_OK, ctx);
    /* the same as the kernel called directly */
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = B, a.H = a.Hkv = H, a.L = L, a.S = S, a.D = a.Dv = D;
    memcpy(a.qs, q.stride, sizeof a.qs), memcpy(a.ks, k.stride, sizeof a.ks);
    memcpy(a.vs, v.stride, sizeof a.vs), memcpy(a.os, out.stride, sizeof a.os);
    memcpy(a.ls, lt.stride, sizeof a.ls);
    a.mask_ncols[0] = a.mask_ncols[1] = S;
    a.causal = opt.causal, a.scale = (float)(1.0 / sqrt((double)D)), a.o = o2, a.lse = lse2;
    TU_STATUS(attn__flash_fwd_bf16(ctx, &a, q16, k16, v16), ATTN_OK, ctx);
    TU_CHECK(memcmp(o, o2, 4 * nq) == 0 && memcmp(lse, lse2, 4 * B * H * L) == 0,
             "attn_sdpa (bf16) differs from attn__flash_fwd_bf16");
    /* mixed dtypes, weights, the backward, a NaN */
    TU_STATUS(attn_sdpa(ctx, &q, &kf32, &v, NULL, &opt, &out, NULL, NULL), ATTN_E_DTYPE, ctx);
    TU_STATUS(attn_sdpa(ctx, &q, &k, &vf32, NULL, &opt, &out, NULL, NULL), ATTN_E_DTYPE, ctx);
    TU_STATUS(attn_sdpa(ctx, &qf32, &k, &v, NULL, &opt, &out, NULL, NULL), ATTN_E_DTYPE, ctx);
    attn_tensor out16 = attn_tensor_make(q16, ATTN_BF16, 4, osh);
    TU_STATUS(attn_sdpa(ctx, &q, &k, &v, NULL, &opt, &out16, NULL, NULL), ATTN_E_DTYPE, ctx);
    TU_STATUS(attn_sdpa(ctx, &q, &k, &v, NULL, &opt, &out, &wt, NULL), ATTN_E_UNSUPPORTED, ctx);
    TU_STATUS(attn_sdpa_backward(ctx, &q, &k, &v, NULL, &opt, &out, &out, NULL, NULL, NULL),
              ATTN_E_UNSUPPORTED, ctx);
    attn__bf16 keep = k16[5];
    k16[5] = 0x7fc0; /* NaN */
    TU_STATUS(attn_sdpa(ctx, &q, &k, &v, NULL, &opt, &out, NULL, NULL), ATTN_E_NONFINITE, ctx);
    k16[5] = 0xff80; /* -inf */
    TU_STATUS(attn_sdpa(ctx, &q, &k, &v, NULL, &opt, &out, NULL, NULL), ATTN_E_NONFINITE, ctx);
    k16[5] = keep;
    free(qf), free(kf), free(vf), free(o), free(o2), free(lse), free(lse2), free(w);
    free(q16), free(k16), free(v16);
}

int main(void) {
    /* ATTN_TEST_QUICK (an emulator): the random cases until each mask kind and feature ran
     * (one batch, one key/value head), four of the long ones (one key/value head), no plain
     * C set (tu_each_set) */
    const int quick = tu_quick("test_flash_bf16");
    attn_ctx *ctx[3] = {tu_ctx(1), tu_ctx(2), tu_ctx(3)};
    microkernels();
    api(ctx[1]);
    rounding(ctx[0]);
    rows_alone(ctx[1]);
    uint64_t rs = 4242;
    const int64_t lens[] = {1, 3, 17, 63, 64, 65, 127, 129, 5, 100, 97, 191};
    const int64_t dims[] = {1, 8, 16, 17, 64, 33, 64, 80};
    int ncase = 0;
    for (int t = 0; t < (quick ? 21 : 100) && !tu_failures; t++) {
        tcase c;
        memset(&c, 0, sizeof c);
        c.B = 1 + (int64_t)(tu_rand(&rs) % 2), c.Hkv = 1 + (int64_t)(tu_rand(&rs) % 2);
        c.H = c.Hkv * (1 + (int64_t)(tu_rand(&rs) % 3));
        if (quick) c.B = 1, c.H /= c.Hkv, c.Hkv = 1; /* grouped heads still: H of 1 to 3 */
        c.L = lens[tu_rand(&rs) % 12], c.S = lens[tu_rand(&rs) % 12];
        c.D = dims[tu_rand(&rs) % 8], c.Dv = tu_rand(&rs) % 3 ? c.D : dims[tu_rand(&rs) % 8];
        c.causal = (attn_causal)(t % 3);
        c.maskcfg = (t / 3) % 7;
        c.dropout = t % 5 == 4 ? 0.25f : 0.0f;
        c.blhd = t % 4 == 1;
        c.feat = t % 8 == 3 ? 1 : t % 8 == 5 ? 2 : t % 8 == 6 ? 4 : t % 8 == 7 ? 7 : 0;
        run_case(ctx, &c, 1000 + (uint64_t)t);
        ncase++;
    }
    tcase big[] = {
        {1, 2, 1, 70, 1000, 64, 64, ATTN_CAUSAL_NONE, 0, 0.0f, 0, 0},
        {1, 2, 2, 200, 300, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 2, 0.1f, 0, 0},
        {2, 4, 1, 300, 201, 32, 48, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0.0f, 1, 0},
        {1, 3, 3, 257, 257, 64, 64, ATTN_CAUSAL_TOP_LEFT, 0, 0.0f, 0, 0},
        {2, 2, 2, 130, 190, 64, 64, ATTN_CAUSAL_TOP_LEFT, 4, 0.0f, 0, 0},
        /* uniform weights: exact in bf16, so the kept set must be the reference's exactly */
        {1, 2, 1, 33, 37, 16, 16, ATTN_CAUSAL_NONE, 0, 0.3f, 0, 1},
        {2, 2, 2, 70, 130, 8, 8, ATTN_CAUSAL_NONE, 0, 0.5f, 0, 1},
        /* window, ALiBi and soft-capping with tile skipping over many key tiles */
        {1, 4, 2, 300, 400, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0.0f, 0, 0, 7},
        {1, 2, 2, 257, 190, 32, 32, ATTN_CAUSAL_NONE, 2, 0.1f, 0, 0, 1},
        /* long key ranges every row sees whole (the tile kernels take them in groups of up
         * to 8 key tiles, then 4, 2: kernels.md), causal and not, odd and wide heads */
        {1, 2, 1, 700, 1100, 40, 40, ATTN_CAUSAL_TOP_LEFT, 0, 0.0f, 0, 0},
        {1, 3, 1, 97, 1500, 96, 72, ATTN_CAUSAL_NONE, 0, 0.0f, 1, 0},
    };
    static const unsigned char big_quick[] = {0, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0};
    for (size_t i = 0; i < sizeof big / sizeof big[0] && !tu_failures; i++) {
        if (quick && !big_quick[i]) continue;
        tcase b = big[i];
        if (quick) b.H /= b.Hkv, b.Hkv = 1; /* one key/value head (the batches kept) */
        run_case(ctx, &b, 5000 + i);
        ncase++;
    }
    printf("test_flash_bf16: %d cases; worst relative error vs the bf16 reference: out %.2g, "
           "lse %.2g; vs fp32: out %.2g\n",
           ncase, worst_out, worst_lse, worst_f32);
    for (int c = 0; c < 3; c++) attn_ctx_free(ctx[c]);
    return tu_finish("test_flash_bf16");
}
