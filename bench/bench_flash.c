/* bench_flash: the fused attention kernels (attn__flash_fwd / attn__flash_bwd) on B=1, H=12,
 * D=64, L=S in {1024, 4096} (and 16384 with --long), causal and not, against the machine's FMA
 * peak measured at start; and, on a small size, the layers' current path (attn__sdpa,
 * attn__sdpa_bwd) and the reference kernels for comparison.
 *
 *   bench_flash [--threads N] [--runs N] [--long] [--quick]
 *
 * FLOPs: forward 4 B H L S D (two products), halved under a causal mask; backward 2.5x the
 * forward (the usual convention: five products, although the kernel evaluates the scores
 * again).  For each row: median milliseconds over the runs, GFLOP/s, percent of the FMA peak of
 * that many threads, and the peak RSS of the process so far; "RESULT" lines are for scripts
 * (bench/attn_vs_torch.py compares `attn bench` with PyTorch).  The kernel set is the
 * context's default (ATTN_ISA caps it). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dispatch.h"
#include "flash.h"
#include "internal.h"
#include "kernels.h"
#include "../common/bench_util.h"

static float *rnd(size_t n, uint64_t seed) {
    float *p = malloc(n * sizeof(float));
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(s >> 40) / 16777216.0 * 2.0 - 1.0);
    }
    return p;
}

typedef enum path { FLASH, LAYERS, REF } path;
static const char *path_name[] = {"flash", "sdpa(layers)", "ref"};

typedef struct problem {
    attn__sdpa_args a;
    attn__sdpa_grads g;
    float *lse, *scratch;
} problem;

static void setup(problem *p, int64_t H, int64_t L, int64_t S, int64_t D, int causal) {
    memset(p, 0, sizeof *p);
    attn__sdpa_args *a = &p->a;
    a->B = 1, a->H = a->Hkv = H, a->L = L, a->S = S, a->D = a->Dv = D;
    size_t nq = (size_t)(H * L * D), nk = (size_t)(H * S * D);
    a->q = rnd(nq, 1), a->k = rnd(nk, 2), a->v = rnd(nk, 3);
    a->o = calloc(nq, sizeof(float));
    int64_t qs[4] = {H * L * D, L * D, D, 1}, ks[4] = {H * S * D, S * D, D, 1};
    memcpy(a->qs, qs, sizeof qs), memcpy(a->os, qs, sizeof qs);
    memcpy(a->ks, ks, sizeof ks), memcpy(a->vs, ks, sizeof ks);
    p->lse = calloc((size_t)(H * L), sizeof(float));
    a->lse = p->lse, a->ls[0] = H * L, a->ls[1] = L, a->ls[2] = 1;
    a->causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    a->scale = 0.125f;
    attn__sdpa_grads *g = &p->g;
    g->dout = rnd(nq, 4);
    g->dq = calloc(nq, sizeof(float)), g->dk = calloc(nk, sizeof(float));
    g->dv = calloc(nk, sizeof(float));
    memcpy(g->dos, qs, sizeof qs), memcpy(g->dqs, qs, sizeof qs);
    memcpy(g->dks, ks, sizeof ks), memcpy(g->dvs, ks, sizeof ks);
    p->scratch = malloc(4 * (size_t)S * sizeof(float));
}

static void teardown(problem *p) {
    free((void *)p->a.q), free((void *)p->a.k), free((void *)p->a.v), free(p->a.o);
    free((void *)p->g.dout), free(p->g.dq), free(p->g.dk), free(p->g.dv);
    free(p->lse), free(p->scratch);
}

static void run(attn_ctx *ctx, problem *p, path w, int bwd) {
    attn_status st = ATTN_OK;
    if (w == FLASH) st = bwd ? attn__flash_bwd(ctx, &p->a, &p->g, p->lse) : attn__flash_fwd(ctx, &p->a);
    else if (w == LAYERS) st = bwd ? attn__sdpa_bwd(ctx, &p->a, &p->g) : attn__sdpa(ctx, &p->a);
    else if (bwd) attn__sdpa_bwd_ref(&p->a, &p->g, p->scratch);
    else attn__sdpa_ref(&p->a, p->scratch);
    if (st != ATTN_OK) {
        fprintf(stderr, "failed: %s\n", attn_ctx_errmsg(ctx));
        exit(1);
    }
}

static void bench(attn_ctx *ctx, int threads, double peak, path w, int64_t L, int causal,
                  int runs) {
    problem p;
    setup(&p, 12, L, L, 64, causal);
    run(ctx, &p, w, 0); /* warm-up; also the forward's lse and o for the backward */
    for (int bwd = 0; bwd < 2; bwd++) {
        double t[64];
        if (bwd) run(ctx, &p, w, 1);
        for (int r = 0; r < runs; r++) {
            double t0 = attn_bench_now_s();
            run(ctx, &p, w, bwd);
            t[r] = attn_bench_now_s() - t0;
        }
        double med = attn_bench_median(t, runs);
        double fl = 4.0 * 12 * (double)L * (double)L * 64 * (causal ? 0.5 : 1.0) * (bwd ? 2.5 : 1);
        double gf = fl / med * 1e-9;
        printf("%-13s %-4s L=S=%-6lld %-6s %2d thr  %10.2f ms  %7.1f GFLOP/s  %5.1f%% peak  rss %6.0f MiB\n",
               path_name[w], bwd ? "bwd" : "fwd", (long long)L, causal ? "causal" : "full",
               threads, med * 1e3, gf, 100.0 * gf / peak, attn_bench_rss_mib());
        printf("RESULT %s %s %lld %d %d %.4f %.2f\n", path_name[w], bwd ? "bwd" : "fwd",
               (long long)L, causal, threads, med * 1e3, gf);
        fflush(stdout);
    }
    teardown(&p);
}

int main(int argc, char **argv) {
    int threads = 2, runs = 5, lng = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--long")) lng = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: bench_flash [--threads N] [--runs N] [--long] [--quick]\n");
            return 2;
        }
    }
    if (runs < 1) runs = 1;
    if (runs > 64) runs = 64;
    attn_ctx_params prm;
    memset(&prm, 0, sizeof prm);
    prm.threads = threads;
    prm.flags = ATTN_CTX_NO_FINITE_CHECK;
    attn_ctx *ctx;
    if (attn_ctx_create(&prm, &ctx) != ATTN_OK) return 1;
    int isa = ctx->kern.isa;
    int pisa = isa == ATTN__ISA_REF ? ATTN__ISA_AVX2 : isa;
    const int lanes = pisa == ATTN__ISA_AVX512 ? 16 : 8;
    double peak1 = attn_bench_fma_peak_at(1, lanes, 20000000L, 5, NULL);
    double peakn = attn_bench_fma_peak_at(threads, lanes, 20000000L, 5, NULL);
    printf("kernels %s; FMA peak (%s): 1 thread %.1f GFLOP/s, %d threads %.1f GFLOP/s\n",
           attn__isa_name(isa), attn__isa_name(pisa), peak1, threads, peakn);
    printf("PEAK %d %.2f %d %.2f\n", 1, peak1, threads, peakn);
    int64_t lens[3] = {1024, 4096, 16384};
    int nl = quick ? 1 : lng ? 3 : 2;
    for (int li = 0; li < nl; li++)
        for (int causal = 0; causal < 2; causal++)
            bench(ctx, threads, peakn, FLASH, lens[li], causal, li == 2 ? (runs < 3 ? runs : 3) : runs);
    /* the other paths on a small size */
    for (int causal = 0; causal < 2; causal++) {
        bench(ctx, threads, peakn, LAYERS, 512, causal, 3);
        bench(ctx, threads, peakn, FLASH, 512, causal, runs);
    }
    bench(ctx, 1, peak1, REF, 256, 0, 1);
    attn_ctx_free(ctx);
    return 0;
}
