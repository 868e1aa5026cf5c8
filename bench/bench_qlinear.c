/* The linear product on quantized weights (attn__qlinear): matrix-vector speed against the
 * memory's read bandwidth, matrix-matrix speed against the float GEMM on the same shape.
 *
 *   bench_qlinear [--threads T] [--isa ref|avx2|avx512] [--type Q4_1] [--act f32|q8|q16|both]
 *                 [--mode bw|mv|model|mm]  (--act both: f32 and q8 alternately) [--N n] [--K k] [--M m] [--secs s]
 *                 [--vnni 0]  (the plain AVX2 int8 and int16 kernels instead of the VNNI ones)
 *
 *   bw     a streaming read of 1 GiB on --threads threads (the memory's read bandwidth)
 *   mv     y = W x for one N x K matrix of --type, W larger than the caches by default (1 GiB
 *          of Q4_1); GB/s of weight bytes read, M vectors at once (--M, <= 4)
 *   model  one decoding token of SmolLM2-135M: 30 layers of q, k, v, o (576 x 576, 192 x 576,
 *          192 x 576, 576 x 576), gate, up (1536 x 576), down (576 x 1536) in --type and the
 *          tied head 49152 x 576 in Q8_0 (~97 MB in Q4_1); GB/s and ms per token
 *   mm     Y[M, N] = X W^T (default M 128, N 1536, K 576): GFLOP/s, against attn__gemm on the
 *          dequantized float matrix in the same run (--rowwise 1: on the matrix-vector
 *          kernels, ATTN__QLIN_ROWWISE)
 * Each figure is the median of timed repetitions filling --secs seconds (default 0.5). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "dispatch.h"
#include "kernels.h"
#include "pool.h"
#include "quant.h"
#include "../common/bench_util.h"

static int type_of(const char *s) {
    for (int t = 0; t < ATTN__QT_MAX; t++)
        if (attn_qtype_name(t) && strcmp(attn_qtype_name(t), s) == 0) return t;
    return -1;
}

static unsigned char *weights(int type, int64_t N, int64_t K, size_t *bytes) {
    int64_t be, bb;
    attn_qtype_block(type, &be, &bb);
    *bytes = (size_t)(N * (K / be) * bb);
    unsigned char *w = malloc(*bytes);
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < *bytes; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        w[i] = (unsigned char)s;
    }
    /* small finite scales: 0x2000 is a half of ~0.008 (bytes of random halves could be NaN) */
    const int off = type == ATTN_Q_Q6_K ? 208 : type == ATTN_Q_Q2_K ? 80 : type == ATTN_Q_Q3_K ? 108 : 0;
    if (be > 1)
        for (size_t b = 0; b < *bytes / (size_t)bb; b++) {
            unsigned char *p = w + b * (size_t)bb + off;
            p[0] = 0, p[1] = 0x20;
            if (type == ATTN_Q_Q4_1 || type == ATTN_Q_Q5_1 || type == ATTN_Q_Q4_K ||
                type == ATTN_Q_Q5_K || type == ATTN_Q_Q2_K)
                p[2] = 0, p[3] = 0x20;
        }
    else if (type != ATTN_Q_F32)
        for (size_t i = 1; i < *bytes; i += 2) w[i] &= 0x3b; /* finite halves / bf16 */
    else
        for (size_t i = 3; i < *bytes; i += 4) w[i] &= 0x3f;
    return w;
}

int main(int argc, char **argv) {
    int threads = 2, act = ATTN__QACT_F32, both = 0, rowwise = 0, vnni = 1;
    const char *isa = NULL, *mode = "mv", *tname = "Q4_1";
    int64_t N = -1, K = -1, M = -1;
    double secs = 0.5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--isa")) isa = argv[i + 1];
        else if (!strcmp(argv[i], "--type")) tname = argv[i + 1];
        else if (!strcmp(argv[i], "--act")) {
            act = !strcmp(argv[i + 1], "q8") ? ATTN__QACT_Q8 : !strcmp(argv[i + 1], "q16") ? ATTN__QACT_Q16 : ATTN__QACT_F32;
            both = !strcmp(argv[i + 1], "both");
        }
        else if (!strcmp(argv[i], "--mode")) mode = argv[i + 1];
        else if (!strcmp(argv[i], "--N")) N = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--K")) K = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--M")) M = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--secs")) secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--vnni")) {
            if (strcmp(argv[i + 1], "0") && strcmp(argv[i + 1], "1")) {
                fprintf(stderr, "--vnni takes 0 or 1\n");
                return 2;
            }
            vnni = argv[i + 1][0] == '1';
        }
        else if (!strcmp(argv[i], "--rowwise")) rowwise = atoi(argv[i + 1]) ? ATTN__QLIN_ROWWISE : 0;
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    const int type = type_of(tname);
    if (type < 0) {
        fprintf(stderr, "unknown type %s\n", tname);
        return 2;
    }
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    attn_ctx *ctx;
    if (attn_ctx_create(&p, &ctx) != ATTN_OK) return 1;
    if (isa) {
        int want = !strcmp(isa, "ref") ? ATTN__ISA_REF : !strcmp(isa, "avx2") ? ATTN__ISA_AVX2 : ATTN__ISA_AVX512;
        if (!attn__isa_set(ctx, want)) fprintf(stderr, "cannot run %s\n", isa);
    }
    /* an x86 context (int16 kernels chosen) on a CPU with AVX2, whose plain kernels were built */
    if (!vnni && ctx->kern.quant16 && attn__quant_kernels_avx2_int8() &&
        attn__quant_kernels_avx2_int16() && attn__gemm16_avx2()) {
        /* VPMADDUBSW / VPMADDWD + VPADDD: what a CPU without AVX-VNNI or AVX512_VNNI runs */
        ctx->kern.quant8 = attn__quant_kernels_avx2_int8();
        ctx->kern.quant16 = attn__quant_kernels_avx2_int16();
        ctx->kern.gemm16 = attn__gemm16_avx2();
    } else if (!vnni) {
        fprintf(stderr, "--vnni 0: no plain AVX2 integer kernels in this context\n");
        return 2;
    }
    printf("int8 activations: %s, int16: %s\n", ctx->kern.quant8->name, ctx->kern.quant16 ? ctx->kern.quant16->name : "none");
    int n;
    if (!strcmp(mode, "bw")) {
        /* the read bandwidth probe of attn bench --op decode and --op llm */
        printf("bw: streaming read of 1 GiB, %d threads: %.2f GB/s (median of 7)\n", threads,
               attn_bench_read_bandwidth(threads));
    } else if (!strcmp(mode, "mv") || !strcmp(mode, "model")) {
        const int model = !strcmp(mode, "model");
        if (M < 0) M = 1;
        /* the matrices: one big one, or the 30 layers x 7 of SmolLM2 and its head */
        int nm = model ? 30 * 7 + 1 : 1;
        unsigned char **ws = malloc((size_t)nm * sizeof *ws);
        int64_t *Ns = malloc((size_t)nm * sizeof *Ns), *Ks = malloc((size_t)nm * sizeof *Ks);
        int *ty = malloc((size_t)nm * sizeof *ty);
        size_t total = 0, sz;
        if (model) {
            const int64_t ln[7] = {576, 192, 192, 576, 1536, 1536, 576}, lk[7] = {576, 576, 576, 576, 576, 576, 1536};
            for (int l = 0; l < 30; l++)
                for (int j = 0; j < 7; j++) {
                    int i = l * 7 + j;
                    Ns[i] = ln[j], Ks[i] = lk[j], ty[i] = type;
                    ws[i] = weights(type, Ns[i], Ks[i], &sz);
                    total += sz;
                }
            Ns[nm - 1] = 49152, Ks[nm - 1] = 576, ty[nm - 1] = ATTN_Q_Q8_0;
            ws[nm - 1] = weights(ATTN_Q_Q8_0, 49152, 576, &sz);
            total += sz;
        } else {
            if (K < 0) K = 4096;
            if (N < 0) {
                int64_t be, bb;
                attn_qtype_block(type, &be, &bb);
                N = ((int64_t)1 << 30) / (K / be * bb);
            }
            Ns[0] = N, Ks[0] = K, ty[0] = type;
            ws[0] = weights(type, N, K, &sz);
            total = sz;
        }
        int64_t kmax = 0, nmax = 0;
        for (int i = 0; i < nm; i++) kmax = Ks[i] > kmax ? Ks[i] : kmax, nmax = Ns[i] > nmax ? Ns[i] : nmax;
        /* aligned to 64 bytes, as the library's activations are (a misaligned x costs the
         * wide kernels up to twice the time: every 64-byte load then spans two lines) */
        float *x = aligned_alloc(64, (size_t)((M * kmax * 4 + 63) / 64 * 64)), *y = malloc((size_t)(M * nmax) * sizeof(float));
        for (int64_t i = 0; i < M * kmax; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        /* activations of a Transformer have a few large channels: every 64th is 8 times larger */
        for (int64_t i = 0; i < M * kmax; i += 64) x[i] *= 8.0f;
        /* --act both: the three precisions alternate, so that all see the same machine */
        const int acts[3] = {both ? ATTN__QACT_F32 : act, ATTN__QACT_Q8, ATTN__QACT_Q16};
        double tt[3][400];
        double t0 = attn_bench_now_s();
        n = 0;
        do {
            for (int a_ = 0; a_ < 1 + 2 * both; a_++) {
                double a = attn_bench_now_s();
                for (int i = 0; i < nm; i++)
                    attn__qlinear(ctx, ty[i], ws[i], Ns[i], Ks[i], x, Ks[i], M, NULL, NULL, y, Ns[i],
                                  acts[a_] | rowwise);
                tt[a_][n] = attn_bench_now_s() - a;
            }
            n++;
        } while (n < 400 && (attn_bench_now_s() - t0 < secs || n < 3));
        for (int a_ = 0; a_ < 1 + 2 * both; a_++) {
            double med = attn_bench_median(tt[a_], n), best = tt[a_][0];
            printf("%s %s %s act=%s M=%lld threads=%d: %.1f MB of weights in %.3f ms: %.2f GB/s "
                   "(median of %d; best %.3f ms, %.2f GB/s)\n",
                   mode, tname, attn__isa_name(ctx->kern.isa),
                   acts[a_] == ATTN__QACT_Q8 ? "q8" : acts[a_] == ATTN__QACT_Q16 ? "q16" : "f32", (long long)M, threads, total / 1e6,
                   med * 1e3, total / med / 1e9, n, best * 1e3, total / best / 1e9);
        }
        if (both) { /* the int8 and int16 paths' errors against the float one, first matrix */
            float *y8 = malloc((size_t)(M * nmax) * sizeof(float));
            attn__qlinear(ctx, ty[0], ws[0], Ns[0], Ks[0], x, Ks[0], M, NULL, NULL, y, Ns[0], ATTN__QACT_F32);
            for (int a_ = 1; a_ < 3; a_++) {
                attn__qlinear(ctx, ty[0], ws[0], Ns[0], Ks[0], x, Ks[0], M, NULL, NULL, y8, Ns[0], acts[a_]);
                double se = 0, sy = 0, emax = 0, ymax = 0;
                for (int64_t i = 0; i < M * Ns[0]; i++) {
                    double e = (double)y8[i] - y[i];
                    se += e * e, sy += (double)y[i] * y[i];
                    emax = fabs(e) > emax ? fabs(e) : emax;
                    ymax = fabs(y[i]) > ymax ? fabs(y[i]) : ymax;
                }
                printf("%s activations against float: rms error %.2e of rms y, max error %.2e of max|y|\n",
                       a_ == 1 ? "int8" : "int16", sqrt(se / sy), emax / ymax);
            }
            free(y8);
        }
        for (int i = 0; i < nm; i++) free(ws[i]);
        free(ws), free(Ns), free(Ks), free(ty), free(x), free(y);
    } else { /* mm */
        if (M < 0) M = 128;
        if (N < 0) N = 1536;
        if (K < 0) K = 576;
        int64_t be = 1, bb = 1;
        attn_qtype_block(type, &be, &bb);
        if (M <= 0 || N <= 0 || K <= 0 || K % be) {
            fprintf(stderr, "bench_qlinear: --M, --N, --K must be positive, K a multiple of "
                            "%lld (the type's block)\n", (long long)be);
            return 2;
        }
        size_t sz;
        unsigned char *w = weights(type, N, K, &sz);
        float *x = malloc((size_t)(M * K) * sizeof(float)), *y = malloc((size_t)(M * N) * sizeof(float));
        float *wf = malloc((size_t)(N * K) * sizeof(float));
        attn__dequantize(ctx, type, w, N * K, wf);
        for (int64_t i = 0; i < M * K; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        double tq[400], tg[400];
        int nq = 0, ng = 0;
        double t0 = attn_bench_now_s();
        do { /* alternate the two */
            double a = attn_bench_now_s();
            attn__qlinear(ctx, type, w, N, K, x, K, M, NULL, NULL, y, N, act | rowwise);
            tq[nq++] = attn_bench_now_s() - a;
            a = attn_bench_now_s();
            attn__gemm(ctx, 0, 1, M, N, K, 1.0f, x, K, wf, K, 0.0f, y, N);
            tg[ng++] = attn_bench_now_s() - a;
        } while (nq < 400 && (attn_bench_now_s() - t0 < secs || nq < 3));
        const double fl = 2.0 * (double)M * (double)N * (double)K;
        double mq = attn_bench_median(tq, nq), mg = attn_bench_median(tg, ng);
        printf("mm%s %s %s M=%lld N=%lld K=%lld threads=%d: %.1f GFLOP/s, float GEMM %.1f GFLOP/s (%.2fx; medians of %d)\n",
               rowwise ? " (rowwise)" : "", tname, attn__isa_name(ctx->kern.isa), (long long)M, (long long)N, (long long)K,
               threads, fl / mq / 1e9, fl / mg / 1e9, mg / mq, nq);
        free(w), free(x), free(y), free(wf);
    }
    attn_ctx_free(ctx);
    return 0;
}
