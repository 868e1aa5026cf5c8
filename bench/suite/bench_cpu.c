/* attn bench --op cpu (and attn info --cpu): what attn detected on this machine, what it
 * chose (attn_ctx_describe), and the measured rates behind the choice: the FMA peak, a float
 * linear product and the same product with bf16 operands (ATTN_CTX_BF16_MATMUL), on the
 * same shapes, alternating, medians. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "bench.h"
#include "cli.h"

/* One rate: y = x W^T with x [M, K], W [N, K] on a context with `flags`; the median of
 * `repeat` timed runs, GFLOP/s (0 when the call fails). */
typedef struct lin_probe {
    attn_ctx *ctx;
    float *x, *w, *y;
    long long M, K, N;
    double ms[64];
    int n;
} lin_probe;

/* One call; timed when `timed` (its time goes to ms[n]). */
static int probe_run(lin_probe *p, int timed) {
    int64_t xs[2] = {p->M, p->K}, ws[2] = {p->N, p->K}, ys[2] = {p->M, p->N};
    attn_tensor X = attn_tensor_make(p->x, ATTN_F32, 2, xs);
    attn_tensor W = attn_tensor_make(p->w, ATTN_F32, 2, ws);
    attn_tensor Y = attn_tensor_make(p->y, ATTN_F32, 2, ys);
    double t0 = attn_bench_now_s();
    if (attn_linear(p->ctx, &X, &W, NULL, &Y) != ATTN_OK) return 0;
    if (timed && p->n < 64) p->ms[p->n++] = (attn_bench_now_s() - t0) * 1e3;
    return 1;
}

static void fill(float *a, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

int attn_bench_cpu(int argc, char **argv) {
    long long threads = 0, repeat = 7, rows = 1024;
    int json = 0, npos, op = 0;
    const attn_cli_opt opts[] = {
        ATTN_OPT_CHOICE("op", 0, &op, "cpu", "NAME", "cpu"),
        ATTN_OPT_THREADS(&threads),
        ATTN_OPT_INT("repeat", 0, &repeat, 1, 64, "N", "timed runs of each product (default 7)"),
        ATTN_OPT_INT("rows", 0, &rows, 1, 1 << 20, "M",
                     "rows of the linear product (default 1024; fewer: a quicker,\n"
                     "rougher measurement, e.g. under an emulator)"),
        ATTN_OPT_FLAG("json", 0, &json, "print one JSON object"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "bench --op cpu", "attn bench --op cpu [options]\nattn info --cpu [options]",
        "Prints what attn detected on this CPU (CPUID vendor, family, model, name; the\n"
        "instruction-set extensions), what it chose (the instruction set, the kernels of\n"
        "each kind of product, and the precision that --dtype auto gives, with the reason),\n"
        "then measures the rates behind the choice on --threads threads: the FMA peak, and\n"
        "a 1024 x 768 x 3072 linear product (--rows: its first size) in float and with\n"
        "bf16 operands (float sums), alternating, medians of --repeat runs.",
        opts, NULL, "attn info --cpu\nattn bench --op cpu --threads 1 --json"};
    int pr = attn_cli_parse(&spec, argc, argv, &npos);
    if (pr != ATTN_CLI_GO) return pr;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    int nth = attn_cli_threads(threads);
    attn_ctx *c32 = NULL, *c16 = NULL, *cauto = NULL;
    if (attn_cli_ctx("bench", nth, 0, &c32) || attn_cli_ctx("bench", nth, ATTN_CTX_BF16_MATMUL,
                                                             &c16) ||
        attn_cli_ctx("bench", nth, ATTN_CTX_AUTO_MATMUL, &cauto)) {
        attn_ctx_free(c32), attn_ctx_free(c16);
        return 1;
    }
    char text[4096];
    attn_ctx_describe(cauto, text, sizeof text, NULL);
    const int auto_bf16 = (attn_ctx_flags(cauto) & ATTN_CTX_BF16_MATMUL) != 0;
    const long long M = rows, K = 768, N = 3072;
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *w = malloc(sizeof(float) * (size_t)(N * K)),
          *y = malloc(sizeof(float) * (size_t)(M * N));
    int rc = 0;
    if (!x || !w || !y) {
        fprintf(stderr, "attn bench: out of memory\n");
        rc = 1;
        goto done;
    }
    fill(x, (size_t)(M * K), 1);
    fill(w, (size_t)(N * K), 2);
    const char *isa;
    double peak = attn_bench_fma_peak(nth, &isa);
    lin_probe p32 = {c32, x, w, y, M, K, N, {0}, 0}, p16 = {c16, x, w, y, M, K, N, {0}, 0};
    /* Alternate so that both see the same machine, each timed call right after an untimed
     * one of its own kind: on a virtual machine the first product after a while of other
     * work (here the other kind's) ran up to 1.7x slower (a 1024 x 768 x 3072 float product
     * after the plain C bf16 one on the AVX2 set, or after 200 ms of idle spinning: docs/
     * kernels.md), which is the host's state of our memory, not the product's speed. */
    for (long long r = 0; r < repeat; r++) {
        lin_probe *fail = !probe_run(&p32, 0) || !probe_run(&p32, 1)   ? &p32
                          : !probe_run(&p16, 0) || !probe_run(&p16, 1) ? &p16
                                                                         : NULL;
        if (fail) {
            fprintf(stderr, "attn bench: %s\n", attn_ctx_errmsg(fail->ctx));
            rc = 1;
            goto done;
        }
    }
    const double flop = 2.0 * (double)M * (double)K * (double)N;
    double ms32 = attn_bench_median(p32.ms, p32.n), ms16 = attn_bench_median(p16.ms, p16.n);
    double g32 = flop / (ms32 * 1e6), g16 = flop / (ms16 * 1e6);
    const int measured_bf16 = ms16 < ms32;
    if (json) {
        printf("{\"threads\": %d, \"fma_peak_gflops\": %.1f, \"fma_width\": \"%s\", "
               "\"f32_gflops\": %.1f, \"bf16_gflops\": %.1f, \"bf16_speedup\": %.3f, "
               "\"auto\": \"%s\", \"description\": \"",
               nth, peak, isa, g32, g16, ms32 / ms16, auto_bf16 ? "bf16" : "f32");
        for (const char *s = text; *s; s++) {
            if (*s == '\n') fputs("\\n", stdout);
            else if (*s == '"' || *s == '\\') printf("\\%c", *s);
            else if ((unsigned char)*s >= 0x20) putchar(*s);
        }
        printf("\"}\n");
    } else {
        fputs(text, stdout);
        printf("\nmeasured on %d thread%s (linear %lld x %lld x %lld, medians of %lld):\n", nth,
               nth == 1 ? "" : "s", M, K, N, repeat);
        printf("  FMA peak (%s)          %8.1f GFLOP/s\n", isa, peak);
        printf("  float products          %8.1f GFLOP/s  %5.1f%% of the peak  %.3f ms\n", g32,
               peak > 0 ? 100 * g32 / peak : 0.0, ms32);
        printf("  bf16 products           %8.1f GFLOP/s  %5.1f%% of the peak  %.3f ms\n", g16,
               peak > 0 ? 100 * g16 / peak : 0.0, ms16);
        printf("  bf16 / float speed      %8.2fx\n", ms32 / ms16);
        if (measured_bf16 != auto_bf16 && fabs(ms32 / ms16 - 1.0) > 0.15)
            printf("note: this measurement favours %s, but --dtype auto chose %s here (from a "
                   "fixed table, so that one machine always gets the same results); pass "
                   "--dtype %s to override\n",
                   measured_bf16 ? "bf16" : "float", auto_bf16 ? "bf16" : "float",
                   measured_bf16 ? "bf16" : "f32");
    }
    if (ferror(stdout)) rc = 1;
done:
    free(x), free(w), free(y);
    attn_ctx_free(c32), attn_ctx_free(c16), attn_ctx_free(cauto);
    return rc;
}
