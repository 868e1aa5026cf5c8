/* attn bench: time one attention op through the public API and compare it with the machine's
 * FMA peak.  See usage() for the options and the FLOP formulas. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define BENCH_X86 1
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: attn bench [options]\n"
            "\n"
            "Times one op on random inputs: one warm-up run, then the median of --repeat runs.\n"
            "Measures the machine's FMA peak first (independent vector FMAs on --threads threads)\n"
            "and prints, for the fast path and for the plain C kernels: median ms, GFLOP/s,\n"
            "%% of that peak and the peak resident memory of the process (getrusage).\n"
            "\n"
            "options:\n"
            "  --op NAME      sdpa (default), sdpa-backward, mha, mha-backward, encoder-layer,\n"
            "                 encoder-layer-backward\n"
            "  --batch B      batch size (default 1)\n"
            "  --heads H      query heads (default 12)\n"
            "  --kv-heads K   key/value heads, H a multiple of K (default H; sdpa ops only)\n"
            "  --len L        query length (default 1024)\n"
            "  --kv-len S     key length (default L; encoder-layer needs S = L)\n"
            "  --dim D        head dimension (default 64); model dimension E = H*D\n"
            "  --causal       causal (top-left) mask\n"
            "  --threads N    worker threads (default 2)\n"
            "  --dtype T      f32 (default; the only one implemented)\n"
            "  --repeat N     timed runs (default 5)\n"
            "  --no-ref       skip the plain C kernels\n"
            "  --json         print one JSON object instead of the table\n"
            "\n"
            "FLOPs (a multiply-add counts 2; c = 1/2 with --causal, else 1):\n"
            "  sdpa                   4*B*H*L*S*D*c\n"
            "  sdpa-backward          2.5 x sdpa\n"
            "  mha                    projections 2*B*L*E*E (q, out) + 2*B*S*E*E (k, v) + sdpa\n"
            "  encoder-layer          4 projections 2*B*L*E*E + sdpa (S = L)\n"
            "                         + feed-forward 2*2*B*L*E*F with F = 4E\n"
            "  *-backward (modules)   2 x the projections and feed-forward + 2.5 x sdpa\n"
            "  Layer norms, softmax, biases and activations are not counted.\n"
            "\n"
            "The plain C kernels are the same op in a context created with ATTN_ISA=ref (no SIMD\n"
            "kernels); when the requested size would take long they run at a smaller L (and S),\n"
            "shown in their row, with fewer runs.  bench/ has the internal kernel benchmarks.\n");
}

/* ---- timing and memory ------------------------------------------------------------------ */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- FMA peak: 12 independent FMA chains per thread, on every thread at once ------------ */
#define PEAK_CHAINS 12
#ifdef BENCH_X86
__attribute__((target("avx512f"))) static float fma_avx512(long n) {
    __m512 x[PEAK_CHAINS], m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < PEAK_CHAINS; i++) x[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < n; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) x[i] = _mm512_fmadd_ps(x[i], m, c);
    for (int i = 1; i < PEAK_CHAINS; i++) x[0] = _mm512_add_ps(x[0], x[i]);
    return _mm512_reduce_add_ps(x[0]);
}
__attribute__((target("avx2,fma"))) static float fma_avx2(long n) {
    __m256 x[PEAK_CHAINS], m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-6f);
    for (int i = 0; i < PEAK_CHAINS; i++) x[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < n; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) x[i] = _mm256_fmadd_ps(x[i], m, c);
    for (int i = 1; i < PEAK_CHAINS; i++) x[0] = _mm256_add_ps(x[0], x[i]);
    float o[8];
    _mm256_storeu_ps(o, x[0]);
    return o[0];
}
#endif
static float fma_scalar(long n) {
    volatile float mv = 0.9999f, cv = 1e-6f;
    float x[PEAK_CHAINS], m = mv, c = cv;
    for (int i = 0; i < PEAK_CHAINS; i++) x[i] = (float)i;
    for (long it = 0; it < n; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) x[i] = x[i] * m + c;
    for (int i = 1; i < PEAK_CHAINS; i++) x[0] += x[i];
    return x[0];
}

typedef struct peak_job {
    int lanes; /* 16 avx512, 8 avx2, 1 scalar */
    long n;
    double gflops;
    volatile float sink;
} peak_job;

static void *peak_thread(void *p) {
    peak_job *j = p;
    double t0 = now_s();
#ifdef BENCH_X86
    if (j->lanes == 16) j->sink = fma_avx512(j->n);
    else if (j->lanes == 8) j->sink = fma_avx2(j->n);
    else j->sink = fma_scalar(j->n);
#else
    j->sink = fma_scalar(j->n);
#endif
    double dt = now_s() - t0;
    j->gflops = dt > 0 ? PEAK_CHAINS * j->lanes * 2.0 * (double)j->n / dt * 1e-9 : 0;
    return NULL;
}

/* Best of 5 rounds of `threads` concurrent loops, summed over the threads. */
static double fma_peak(int threads, const char **isa) {
    int lanes = 1;
    *isa = "scalar";
#ifdef BENCH_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) lanes = 16, *isa = "avx512f";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lanes = 8, *isa = "avx2+fma";
#endif
    peak_job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    char *started = calloc((size_t)threads, 1);
    double best = 0;
    if (!jobs || !tid || !started) goto done;
    for (int round = 0; round < 5; round++) {
        double sum = 0;
        for (int t = 0; t < threads; t++) {
            jobs[t].lanes = lanes, jobs[t].n = lanes == 1 ? 4000000L : 8000000L;
            jobs[t].gflops = 0;
            started[t] = pthread_create(&tid[t], NULL, peak_thread, &jobs[t]) == 0;
            if (!started[t]) peak_thread(&jobs[t]);
        }
        for (int t = 0; t < threads; t++) {
            if (started[t]) pthread_join(tid[t], NULL);
            sum += jobs[t].gflops;
        }
        if (sum > best) best = sum;
    }
done:
    free(jobs), free(tid), free(started);
    return best;
}

/* ---- the ops ---------------------------------------------------------------------------- */
typedef enum op_kind { OP_SDPA, OP_SDPA_BWD, OP_MHA, OP_MHA_BWD, OP_ENC, OP_ENC_BWD } op_kind;
static const struct {
    const char *name;
    op_kind kind;
} ops[] = {
    {"sdpa", OP_SDPA},          {"sdpa-backward", OP_SDPA_BWD},
    {"mha", OP_MHA},            {"mha-backward", OP_MHA_BWD},
    {"encoder-layer", OP_ENC},  {"encoder-layer-backward", OP_ENC_BWD},
};

typedef struct shape {
    long long B, H, Hkv, L, S, D;
    int causal;
} shape;

static double op_flops(op_kind k, const shape *s) {
    double B = (double)s->B, H = (double)s->H, L = (double)s->L, S = (double)s->S,
           D = (double)s->D, E = H * D, F = 4 * E;
    double att = 4.0 * B * H * L * S * D * (s->causal ? 0.5 : 1.0);
    double proj = 0, ffn = 0;
    int bwd = k == OP_SDPA_BWD || k == OP_MHA_BWD || k == OP_ENC_BWD;
    if (k == OP_MHA || k == OP_MHA_BWD) proj = 2 * (2.0 * B * L * E * E) + 2 * (2.0 * B * S * E * E);
    if (k == OP_ENC || k == OP_ENC_BWD) proj = 4 * (2.0 * B * L * E * E), ffn = 2 * 2.0 * B * L * E * F;
    return bwd ? 2.0 * (proj + ffn) + 2.5 * att : proj + ffn + att;
}

static float *rnd(size_t n, uint64_t seed) {
    float *p = malloc(n ? n * sizeof(float) : 1);
    if (!p) return NULL;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(x >> 40) / 16777216.0 * 2.0 - 1.0);
    }
    return p;
}

/* Everything one op needs; run_once calls it. */
typedef struct bench_state {
    op_kind kind;
    shape s;
    attn_ctx *ctx;
    attn_module *m;
    float *buf[8];
    attn_tensor q, k, v, o, dout, dq, dk, dv;
    attn_sdpa_options sopt;
    attn_mha_options mopt;
    int self; /* mha: key/value are the query */
} bench_state;

static attn_status run_once(bench_state *b) {
    switch (b->kind) {
    case OP_SDPA: return attn_sdpa(b->ctx, &b->q, &b->k, &b->v, NULL, &b->sopt, &b->o, NULL, NULL);
    case OP_SDPA_BWD:
        return attn_sdpa_backward(b->ctx, &b->q, &b->k, &b->v, NULL, &b->sopt, &b->dout, &b->dq,
                                  &b->dk, &b->dv, NULL);
    case OP_MHA: {
        const attn_tensor *kv = b->self ? &b->q : &b->k;
        return attn_mha_forward(b->ctx, b->m, &b->q, kv, kv, NULL, NULL, &b->mopt, NULL, &b->o,
                                NULL);
    }
    case OP_MHA_BWD: {
        const attn_tensor *kv = b->self ? &b->q : &b->k;
        return attn_mha_backward(b->ctx, b->m, &b->q, kv, kv, NULL, NULL, &b->mopt, NULL,
                                 &b->dout, &b->dq, &b->dk, &b->dv);
    }
    case OP_ENC:
        return attn_encoder_layer_forward(b->ctx, b->m, &b->q, NULL, NULL, b->s.causal, NULL, &b->o);
    case OP_ENC_BWD:
        return attn_encoder_layer_backward(b->ctx, b->m, &b->q, NULL, NULL, b->s.causal, NULL,
                                           &b->dout, &b->dq);
    }
    return ATTN_E_INVALID;
}

static void state_free(bench_state *b) {
    for (int i = 0; i < 8; i++) free(b->buf[i]);
    attn_module_free(b->m);
    attn_ctx_free(b->ctx);
    memset(b, 0, sizeof *b);
}

/* Creates the context (ISA capped by ATTN_ISA=ref when ref), the module and the inputs.
 * Returns 0 or an exit status after printing the problem. */
static int state_init(bench_state *b, op_kind kind, const shape *s, int threads, int ref) {
    memset(b, 0, sizeof *b);
    b->kind = kind, b->s = *s;
    const char *old = getenv("ATTN_ISA");
    char *saved = old ? strdup(old) : NULL;
    if (ref) setenv("ATTN_ISA", "ref", 1);
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    attn_status st = attn_ctx_create(&p, &b->ctx);
    if (ref) {
        if (saved) setenv("ATTN_ISA", saved, 1);
        else unsetenv("ATTN_ISA");
    }
    free(saved);
    if (st != ATTN_OK) {
        fprintf(stderr, "attn bench: cannot create a context (%s)\n", attn_status_name(st));
        return 1;
    }
    int64_t B = s->B, H = s->H, Hkv = s->Hkv, L = s->L, S = s->S, D = s->D, E = H * D;
    int sdpa = kind == OP_SDPA || kind == OP_SDPA_BWD, bwd = kind == OP_SDPA_BWD ||
               kind == OP_MHA_BWD || kind == OP_ENC_BWD;
    size_t nq, nk;
    if (sdpa) nq = (size_t)(B * H * L * D), nk = (size_t)(B * Hkv * S * D);
    else nq = (size_t)(B * L * E), nk = (size_t)(B * S * E);
    b->self = !sdpa && L == S;
    float **u = b->buf;
    u[0] = rnd(nq, 1), u[1] = rnd(nk, 2), u[2] = rnd(nk, 3);
    u[3] = calloc(nq ? nq : 1, sizeof(float));
    if (bwd) {
        u[4] = rnd(nq, 4), u[5] = calloc(nq ? nq : 1, sizeof(float));
        u[6] = calloc(nk ? nk : 1, sizeof(float)), u[7] = calloc(nk ? nk : 1, sizeof(float));
    }
    for (int i = 0; i < (bwd ? 8 : 4); i++)
        if (!u[i]) {
            fprintf(stderr, "attn bench: out of memory for the inputs\n");
            return 1;
        }
    if (sdpa) {
        b->q = attn_view4(u[0], B, H, L, D), b->k = attn_view4(u[1], B, Hkv, S, D);
        b->v = attn_view4(u[2], B, Hkv, S, D), b->o = attn_view4(u[3], B, H, L, D);
        b->dout = attn_view4(u[4], B, H, L, D), b->dq = attn_view4(u[5], B, H, L, D);
        b->dk = attn_view4(u[6], B, Hkv, S, D), b->dv = attn_view4(u[7], B, Hkv, S, D);
        b->sopt = attn_sdpa_defaults();
        b->sopt.causal = s->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
        return 0;
    }
    b->q = attn_view3(u[0], B, L, E), b->k = attn_view3(u[1], B, S, E);
    b->v = attn_view3(u[2], B, S, E), b->o = attn_view3(u[3], B, L, E);
    b->dout = attn_view3(u[4], B, L, E), b->dq = attn_view3(u[5], B, L, E);
    b->dk = attn_view3(u[6], B, S, E), b->dv = attn_view3(u[7], B, S, E);
    if (kind == OP_MHA || kind == OP_MHA_BWD) {
        attn_mha_config c = attn_mha_defaults(E, H);
        st = attn_mha_create(b->ctx, &c, &b->m);
        memset(&b->mopt, 0, sizeof b->mopt);
        b->mopt.is_causal = s->causal;
    } else {
        attn_transformer_config c = attn_transformer_defaults(E, H);
        c.dim_feedforward = 4 * E;
        c.dropout = 0;
        st = attn_encoder_layer_create(b->ctx, &c, &b->m);
    }
    if (st == ATTN_OK) st = attn_module_init(b->ctx, b->m, 1);
    if (st == ATTN_OK && bwd) st = attn_module_enable_grad(b->ctx, b->m);
    if (st != ATTN_OK) return attn_cli_fail(b->ctx, "bench", st);
    return 0;
}

typedef struct result {
    const char *path;
    shape s;
    int runs;
    double ms, gflops, pct, rss_mib, rss_growth_mib;
} result;

/* Warm-up plus `repeat` timed runs (fewer when max_s > 0 and the warm-up says they would take
 * longer than max_s). */
static int measure(op_kind kind, const shape *s, int threads, int ref, int repeat, double max_s,
                   double peak, result *r) {
    bench_state b;
    double rss0 = rss_mib();
    int rc = state_init(&b, kind, s, threads, ref);
    if (rc) {
        state_free(&b);
        return rc;
    }
    double t0 = now_s();
    attn_status st = run_once(&b);
    double warm = now_s() - t0;
    if (max_s > 0 && warm * repeat > max_s) {
        int n = (int)(max_s / (warm > 0 ? warm : 1));
        repeat = n < 1 ? 1 : n;
    }
    double *t = calloc((size_t)repeat, sizeof *t);
    if (!t) st = ATTN_E_NOMEM;
    for (int i = 0; st == ATTN_OK && i < repeat; i++) {
        t0 = now_s();
        st = run_once(&b);
        t[i] = now_s() - t0;
    }
    if (st != ATTN_OK) {
        if (st == ATTN_E_NOMEM && !t) fprintf(stderr, "attn bench: out of memory\n");
        else attn_cli_fail(b.ctx, "bench", st);
        free(t);
        state_free(&b);
        return 1;
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_double);
    double med = repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]);
    r->path = ref ? "plain C kernels (ATTN_ISA=ref)" : "fast path";
    r->s = *s;
    r->runs = repeat;
    r->ms = med * 1e3;
    r->gflops = med > 0 ? op_flops(kind, s) / med * 1e-9 : 0;
    r->pct = peak > 0 ? 100.0 * r->gflops / peak : 0;
    r->rss_mib = rss_mib();
    r->rss_growth_mib = r->rss_mib - rss0;
    free(t);
    state_free(&b);
    return 0;
}

/* ---- the command ------------------------------------------------------------------------ */
static int bad(const char *opt, const char *val, const char *why) {
    fprintf(stderr, "attn bench: bad value '%s' for %s (%s)\n", val ? val : "", opt, why);
    fprintf(stderr, "'attn bench --help' lists the options\n");
    return 2;
}

static void print_row(const result *r) {
    char size[64];
    snprintf(size, sizeof size, "L=%lld S=%lld", r->s.L, r->s.S);
    printf("  %-31s %-17s %4d %11.3f %10.1f %7.1f%% %9.0f\n", r->path, size, r->runs, r->ms,
           r->gflops, r->pct, r->rss_mib);
}

static void json_row(const result *r, int last) {
    printf("{\"path\": \"%s\", \"len\": %lld, \"kv_len\": %lld, \"runs\": %d, "
           "\"median_ms\": %.4f, \"gflops\": %.3f, \"pct_peak\": %.2f, \"peak_rss_mib\": %.1f, "
           "\"rss_growth_mib\": %.1f}%s",
           r->path, r->s.L, r->s.S, r->runs, r->ms, r->gflops, r->pct, r->rss_mib,
           r->rss_growth_mib, last ? "" : ", ");
}

int attn_cmd_bench(int argc, char **argv) {
    op_kind kind = OP_SDPA;
    const char *op_name = "sdpa";
    shape s = {1, 12, -1, 1024, -1, 64, 0};
    long long threads = 2, repeat = 5;
    int json = 0, do_ref = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--causal")) { s.causal = 1; continue; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--no-ref")) { do_ref = 0; continue; }
        static const char *const with_value[] = {"--op", "--batch", "--heads", "--kv-heads",
                                                  "--len", "--kv-len", "--dim", "--threads",
                                                  "--dtype", "--repeat"};
        int known = 0;
        for (size_t j = 0; j < sizeof with_value / sizeof with_value[0]; j++)
            if (!strcmp(a, with_value[j])) known = 1;
        if (!known) {
            fprintf(stderr, "attn bench: unknown option '%s'\n", a);
            fprintf(stderr, "'attn bench --help' lists the options\n");
            return 2;
        }
        if (i + 1 >= argc) return bad(a, "", "missing value");
        const char *v = argv[++i];
        if (!strcmp(a, "--op")) {
            int found = 0;
            for (size_t j = 0; j < sizeof ops / sizeof ops[0]; j++)
                if (!strcmp(v, ops[j].name)) kind = ops[j].kind, op_name = ops[j].name, found = 1;
            if (!found) {
                fprintf(stderr, "attn bench: unknown op '%s' (sdpa, sdpa-backward, mha, "
                                "mha-backward, encoder-layer, encoder-layer-backward)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f32") || !strcmp(v, "F32") || !strcmp(v, "float32")) continue;
            if (!strcmp(v, "bf16") || !strcmp(v, "f16") || !strcmp(v, "f64")) {
                fprintf(stderr, "attn bench: %s is not implemented yet (only f32)\n", v);
                return 2;
            }
            return bad(a, v, "expected f32");
        } else {
            long long *dst = !strcmp(a, "--batch")      ? &s.B
                             : !strcmp(a, "--heads")    ? &s.H
                             : !strcmp(a, "--kv-heads") ? &s.Hkv
                             : !strcmp(a, "--len")      ? &s.L
                             : !strcmp(a, "--kv-len")   ? &s.S
                             : !strcmp(a, "--dim")      ? &s.D
                             : !strcmp(a, "--threads")  ? &threads
                                                        : &repeat;
            long long hi = dst == &threads ? 1024 : dst == &repeat ? 100000 : (1LL << 24);
            if (!attn_cli_parse_i64(v, 1, hi, dst)) {
                char why[64];
                snprintf(why, sizeof why, "an integer in [1, %lld]", hi);
                return bad(a, v, why);
            }
        }
    }
    if (s.Hkv < 0) s.Hkv = s.H;
    if (s.S < 0) s.S = s.L;
    int sdpa = kind == OP_SDPA || kind == OP_SDPA_BWD;
    if (s.H % s.Hkv) {
        fprintf(stderr, "attn bench: --heads %lld is not a multiple of --kv-heads %lld\n", s.H,
                s.Hkv);
        return 2;
    }
    if (!sdpa && s.Hkv != s.H) {
        fprintf(stderr, "attn bench: --kv-heads applies to sdpa ops only\n");
        return 2;
    }
    if ((kind == OP_ENC || kind == OP_ENC_BWD) && s.S != s.L) {
        fprintf(stderr, "attn bench: encoder-layer is self-attention: --kv-len must equal --len\n");
        return 2;
    }
    /* the largest buffer, in floats, must stay addressable (and sane: 16 GiB) */
    double E = (double)s.H * (double)s.D, F = 4 * E;
    double big = (double)s.B * (double)s.H * (double)(s.L > s.S ? s.L : s.S) * (double)s.D;
    if (!sdpa) {
        double w = (kind == OP_ENC || kind == OP_ENC_BWD) ? E * F : E * E;
        if (w > big) big = w;
    }
    if (big * sizeof(float) > 16.0 * 1024 * 1024 * 1024) {
        fprintf(stderr, "attn bench: problem too large (a tensor of %.0f GiB)\n",
                big * sizeof(float) / (1024.0 * 1024 * 1024));
        return 1;
    }

    const char *isa;
    double peak = fma_peak((int)threads, &isa);
    result r[2];
    int n = 0;
    int rc = measure(kind, &s, (int)threads, 0, (int)repeat, 0, peak, &r[n]);
    if (rc) return rc;
    n++;
    if (do_ref) {
        /* the plain C kernels are much slower: shrink L and S (keeping their ratio) until one
         * run is at most ~1.5 GFLOP, and spend at most ~5 s on the timed runs */
        shape rs = s;
        while (op_flops(kind, &rs) > 1.5e9 && rs.L >= 32 && rs.S >= 32) rs.L /= 2, rs.S /= 2;
        rc = measure(kind, &rs, (int)threads, 1, (int)repeat, 5.0, peak, &r[n]);
        if (rc) return rc;
        n++;
    }

    if (json) {
        printf("{\"op\": \"%s\", \"dtype\": \"f32\", \"batch\": %lld, \"heads\": %lld, "
               "\"kv_heads\": %lld, \"len\": %lld, \"kv_len\": %lld, \"dim\": %lld, "
               "\"causal\": %s, \"threads\": %lld, \"repeat\": %lld, \"gflop_per_run\": %.4f, "
               "\"fma_peak_gflops\": %.2f, \"fma_isa\": \"%s\", \"results\": [",
               op_name, s.B, s.H, s.Hkv, s.L, s.S, s.D, s.causal ? "true" : "false", threads,
               repeat, op_flops(kind, &s) * 1e-9, peak, isa);
        for (int i = 0; i < n; i++) json_row(&r[i], i == n - 1);
        printf("]}\n");
        return 0;
    }
    printf("attn bench: %s  B=%lld H=%lld Hkv=%lld L=%lld S=%lld D=%lld%s  f32  %lld thread%s\n",
           op_name, s.B, s.H, s.Hkv, s.L, s.S, s.D, s.causal ? " causal" : "", threads,
           threads == 1 ? "" : "s");
    printf("FMA peak: %.1f GFLOP/s (%s, %lld thread%s); %.3f GFLOP per run\n\n", peak, isa,
           threads, threads == 1 ? "" : "s", op_flops(kind, &s) * 1e-9);
    printf("  %-31s %-17s %4s %11s %10s %8s %9s\n", "path", "size", "runs", "median ms",
           "GFLOP/s", "% peak", "RSS MiB");
    for (int i = 0; i < n; i++) print_row(&r[i]);
    return 0;
}
