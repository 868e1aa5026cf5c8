/* bench_gemm: attn__gemm on the shapes of the Transformer layers, against the machine's FMA peak
 * and (when built with OpenBLAS) OpenBLAS's sgemm measured in the same run.
 *
 *   bench_gemm [--quick] [--runs N] [--only TEXT]     (TEXT: part of a shape's name)
 *
 * The kernel set is the context's default (ATTN_ISA=ref|avx2|avx512 caps it).  For every shape
 * and for 1 and 2 threads: median milliseconds over the runs, GFLOP/s, percent of the FMA peak
 * of that many threads, and the speed ratio attn / OpenBLAS (> 1: attn is faster).  Also the
 * thread pool's dispatch latency (an empty attn__parallel_for).  On a shared machine each row
 * first waits for other processes to go idle; a row marked '*' ran while another process used
 * over 10% of a core (Linux /proc/stat), so its timings are disturbed. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dispatch.h"
#include "gemm.h"
#include "internal.h"
#include "kernels.h"
#include "pool.h"
#include "../common/bench_util.h"

#ifdef ATTN_BENCH_OPENBLAS
#include <cblas.h>
#endif

#if defined(__GNUC__) && defined(__x86_64__)
#define BENCH_X86 1
#endif

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- other processes: CPU seconds used by the whole machine minus this process --------- */
static double other_cpu_s(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 8) return 0;
    /* user nice system [idle iowait] irq softirq steal */
    double busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return busy - ((double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
}

/* Waits (up to max_s) for a 300 ms window in which other processes use under 5% of a core;
 * returns 0 if none came. */
static int wait_idle(double max_s) {
    double t_end = attn_bench_now_s() + max_s;
    do {
        double o0 = other_cpu_s(), t0 = attn_bench_now_s();
        sleep_ms(300);
        if (other_cpu_s() - o0 < 0.05 * (attn_bench_now_s() - t0)) return 1;
    } while (attn_bench_now_s() < t_end);
    return 0;
}

/* ---- pool dispatch latency ------------------------------------------------------------ */
static void empty_task(void *arg, int64_t b, int64_t e, int tid) { (void)arg, (void)b, (void)e, (void)tid; }

static double dispatch_us(attn_ctx *ctx, int spaced) {
    const int n = spaced ? 200 : 20000;
    double total = 0;
    for (int i = 0; i < n; i++) {
        if (spaced) sleep_ms(2); /* workers asleep: measures the wake-up path */
        double t0 = attn_bench_now_s();
        attn__parallel_for(ctx, 2, empty_task, NULL);
        total += attn_bench_now_s() - t0;
    }
    return total / n * 1e6;
}

/* ---- shapes ---------------------------------------------------------------------------- */
typedef struct shape {
    const char *what;
    int ta, tb;
    int64_t M, N, K;
} shape;

/* Linear layers y[M, F] = x[M, E] W[F, E]^T with M = B*L tokens: forward (transB), backward
 * dx = dy W (no transpose) and dW = dy^T x (transA); "mini": all-MiniLM-L6-v2's three
 * forward products on a batch of about 1024 tokens. */
static const shape shapes[] = {
    {"fwd  E64->F256", 0, 1, 512, 256, 64},
    {"dx   F256->E64", 0, 0, 512, 64, 256},
    {"dW   [256,64]", 1, 0, 256, 64, 512},
    {"fwd  E128->F512", 0, 1, 1024, 512, 128},
    {"dx   F512->E128", 0, 0, 1024, 128, 512},
    {"dW   [512,128]", 1, 0, 512, 128, 1024},
    {"fwd  E256->E256", 0, 1, 2048, 256, 256},
    {"fwd  E512->F2048", 0, 1, 2048, 2048, 512},
    {"dx   F2048->E512", 0, 0, 2048, 512, 2048},
    {"dW   [2048,512]", 1, 0, 2048, 512, 2048},
    {"mini E384->E1152", 0, 1, 1024, 1152, 384},
    {"mini E384->F1536", 0, 1, 1024, 1536, 384},
    {"mini F1536->E384", 0, 1, 1024, 384, 1536},
    {"fwd  E768->E768", 0, 1, 4096, 768, 768},
    {"fwd  E768->F3072", 0, 1, 2048, 3072, 768},
    {"dx   F3072->E768", 0, 0, 2048, 768, 3072},
    {"dW   [3072,768]", 1, 0, 3072, 768, 2048},
};

typedef struct runner {
    attn_ctx *ctx; /* NULL: OpenBLAS */
    int threads;
    const shape *s;
    const float *A, *B;
    float *C;
} runner;

static void run_once(const runner *r) {
    const shape *s = r->s;
    int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    if (r->ctx) {
        if (attn__gemm(r->ctx, s->ta, s->tb, s->M, s->N, s->K, 1.0f, r->A, lda, r->B, ldb, 0.0f,
                       r->C, s->N) != ATTN_OK) {
            fprintf(stderr, "attn__gemm failed: %s\n", attn_ctx_errmsg(r->ctx));
            exit(1);
        }
    }
#ifdef ATTN_BENCH_OPENBLAS
    else {
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                    s->tb ? CblasTrans : CblasNoTrans, (int)s->M, (int)s->N, (int)s->K, 1.0f,
                    r->A, (int)lda, r->B, (int)ldb, 0.0f, r->C, (int)s->N);
    }
#endif
}

/* Median seconds of each runner over `runs` timed calls.  The runners take turns in three
 * rounds, so that load from other processes hits both alike; in a round a runner makes one
 * warm-up call and then about runs/3 timed calls back to back (warm threads, as in a training
 * loop), followed by a pause that lets its idle threads go to sleep (ours spin 1 ms, OpenBLAS's
 * about 0.1 s) so that neither library's spinning threads steal the other's cores. */
static void time_medians(const runner *r, int nr, int runs, double *med) {
    double t[2][64];
    int cnt[2] = {0, 0};
    if (runs > 60) runs = 60;
    for (int round = 0; round < 3; round++)
        for (int j = 0; j < nr; j++) {
            int per = (runs - cnt[j] + 2 - round) / (3 - round);
            run_once(&r[j]);
            for (int i = 0; i < per; i++) {
                double t0 = attn_bench_now_s();
                run_once(&r[j]);
                t[j][cnt[j]++] = attn_bench_now_s() - t0;
            }
            if (r[j].threads > 1) sleep_ms(r[j].ctx ? 5 : 300);
        }
    for (int j = 0; j < nr; j++) {
        med[j] = attn_bench_median(t[j], cnt[j]);
    }
}

static void fill(float *p, size_t n, unsigned seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) * (1.0f / 16777216.0f) - 0.5f;
    }
}

int main(int argc, char **argv) {
#ifdef ATTN_BENCH_OPENBLAS
    /* OpenBLAS 0.3.21 does not know recent Xeons and falls back to its generic SSE3 kernels
     * ("Prescott"); name the nearest core it knows, through its environment variable, which it
     * reads at load time: so run this program again with it set. */
    const char *core = openblas_get_corename();
    if (!getenv("OPENBLAS_CORETYPE") && core &&
        (strcmp(core, "Prescott") == 0 || strcmp(core, "Core2") == 0 ||
         strcmp(core, "Nehalem") == 0)) {
        const char *want = NULL;
        if (attn__isa_supported(ATTN__ISA_AVX512)) want = "SkylakeX";
        else if (attn__isa_supported(ATTN__ISA_AVX2)) want = "Haswell";
        if (want) {
            fprintf(stderr, "bench_gemm: OpenBLAS picked %s; rerunning with OPENBLAS_CORETYPE=%s\n",
                    core, want);
            setenv("OPENBLAS_CORETYPE", want, 1);
            execv("/proc/self/exe", argv);
            fprintf(stderr, "bench_gemm: re-exec failed, OpenBLAS stays on %s\n", core);
        }
    }
#endif
    int runs = 7, quick = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1, runs = 3;
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gemm [--quick] [--runs N] [--only TEXT]\n");
            return 2;
        }
    }
    if (runs < 1) runs = 1;
    attn_ctx *ctx[3] = {NULL, NULL, NULL};
    for (int t = 1; t <= 2; t++) {
        attn_ctx_params p;
        memset(&p, 0, sizeof p);
        p.threads = t;
        p.flags = ATTN_CTX_NO_FINITE_CHECK;
        if (attn_ctx_create(&p, &ctx[t]) != ATTN_OK) return 1;
    }
    int isa = ctx[1]->kern.isa;
    const attn__gemm_kernel *kr = ctx[1]->kern.gemm;
    printf("kernel set: %s (tile %d x %d, kc %d, nc %d)\n", attn__isa_name(isa), kr->mr, kr->nr,
           kr->kc, kr->nc);
    double peak[3] = {0, 0, 0};
#ifdef BENCH_X86
    int peak_isa = attn__isa_supported(ATTN__ISA_AVX512) ? ATTN__ISA_AVX512 : ATTN__ISA_AVX2;
    if (isa == ATTN__ISA_AVX2) peak_isa = ATTN__ISA_AVX2;
    const int lanes = peak_isa == ATTN__ISA_AVX512 ? 16 : 8;
    if (attn__isa_supported(ATTN__ISA_AVX2)) {
        for (int t = 1; t <= 2; t++) peak[t] = attn_bench_fma_peak_at(t, lanes, 20000000L, 3, NULL);
        /* a register-only loop scales linearly over real cores: less means a busy core */
        for (int w = 0; w < 30 && peak[2] < 1.8 * peak[1]; w++) {
            wait_idle(10);
            double p2 = attn_bench_fma_peak_at(2, lanes, 20000000L, 1, NULL);
            if (p2 > peak[2]) peak[2] = p2;
        }
        if (peak[2] < 1.8 * peak[1]) {
            printf("warning: the second core stayed busy; assuming a 2-thread peak of 2x\n");
            peak[2] = 2 * peak[1];
        }
        printf("FMA peak (%s, register-only loop): %.1f GFLOP/s 1 thread, %.1f GFLOP/s 2 threads\n",
               attn__isa_name(peak_isa), peak[1], peak[2]);
    }
#endif
    printf("pool dispatch (2 threads, empty task): %.2f us back-to-back, %.1f us after 2 ms idle\n",
           dispatch_us(ctx[2], 0), dispatch_us(ctx[2], 1));
#ifdef ATTN_BENCH_OPENBLAS
    printf("OpenBLAS: %s (core %s)\n", openblas_get_config(), openblas_get_corename());
#else
    printf("OpenBLAS: not built in, no comparison\n");
#endif
    printf("\n%-18s %5s %5s %5s %2s | %3s | %8s %7s %6s | %8s %7s | %6s\n", "shape", "M", "N",
           "K", "tr", "thr", "attn ms", "GFLOP/s", "%peak", "oblas ms", "GFLOP/s", "ratio");
    size_t ns = sizeof shapes / sizeof shapes[0];
    for (size_t i = 0; i < ns; i++) {
        const shape *s = &shapes[i];
        if (quick && s->M * s->N * s->K > (int64_t)2048 * 2048 * 768) continue;
        if (only && !strstr(s->what, only)) continue;
        size_t na = (size_t)(s->M * s->K), nb = (size_t)(s->K * s->N), nc = (size_t)(s->M * s->N);
        float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float));
        float *C = malloc(nc * sizeof(float));
        if (!A || !B || !C) return 1;
        fill(A, na, 1), fill(B, nb, 2), fill(C, nc, 3);
        double flop = 2.0 * (double)s->M * (double)s->N * (double)s->K;
        for (int t = 1; t <= 2; t++) {
            /* on a shared machine, wait (up to 60 s) until other processes are idle; rows
             * during which they used over 10% of a core are marked '*' */
            wait_idle(60);
            double o0 = other_cpu_s(), w0 = attn_bench_now_s();
            runner r[2] = {{ctx[t], t, s, A, B, C}, {NULL, t, s, A, B, C}};
            double med[2] = {0, 0};
#ifdef ATTN_BENCH_OPENBLAS
            openblas_set_num_threads(t);
            time_medians(r, 2, runs, med);
#else
            time_medians(r, 1, runs, med);
#endif
            double ta = med[0], tb = med[1];
            int busy = other_cpu_s() - o0 > 0.1 * (attn_bench_now_s() - w0);
            char tr[3] = {s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', 0};
            printf("%-18s %5lld %5lld %5lld %2s | %3d | %8.3f %7.1f %5.1f%% | ", s->what,
                   (long long)s->M, (long long)s->N, (long long)s->K, tr, t, ta * 1e3,
                   flop / ta * 1e-9, peak[t] > 0 ? 100.0 * flop / ta * 1e-9 / peak[t] : 0.0);
            if (tb > 0)
                printf("%8.3f %7.1f | %6.2f%s\n", tb * 1e3, flop / tb * 1e-9, tb / ta,
                       busy ? " *" : "");
            else
                printf("%8s %7s | %6s%s\n", "-", "-", "-", busy ? " *" : "");
            fflush(stdout);
        }
        free(A), free(B), free(C);
    }
    attn_ctx_free(ctx[1]);
    attn_ctx_free(ctx[2]);
    return 0;
}
