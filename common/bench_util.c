/* The measuring helpers of every benchmark (common/bench_util.h): the clock, peak RSS, the
 * median, the FMA peak and the read bandwidth.  The attn program's bench commands and the
 * programs under bench/ compile this one file; it uses only the C library and pthreads. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_util.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define BENCH_X86 1
#elif defined(__GNUC__) && defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define BENCH_NEON 1
#endif

/* ---- timing and memory ------------------------------------------------------------------ */
double attn_bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double attn_bench_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
#ifdef __APPLE__
    return (double)ru.ru_maxrss / 1048576.0; /* macOS: bytes */
#else
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
#endif
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double attn_bench_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
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
#ifdef BENCH_NEON
/* 128-bit FMLA, 4 lanes.  Neoverse V1/V2 and Apple M cores issue 4 per cycle with a latency
 * of 3-4, so 12 chains would leave pipes idle: 24 chains for n / 2 rounds, the same n * 12
 * FMAs that peak_thread counts. */
static float fma_neon(long n) {
    float32x4_t x[2 * PEAK_CHAINS], m = vdupq_n_f32(0.9999f), c = vdupq_n_f32(1e-6f);
    for (int i = 0; i < 2 * PEAK_CHAINS; i++) x[i] = vdupq_n_f32((float)i);
    for (long it = 0; it < n / 2; it++)
        for (int i = 0; i < 2 * PEAK_CHAINS; i++) x[i] = vfmaq_f32(c, x[i], m);
    for (int i = 1; i < 2 * PEAK_CHAINS; i++) x[0] = vaddq_f32(x[0], x[i]);
    return vaddvq_f32(x[0]);
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
    int lanes; /* 16 avx512, 8 avx2, 4 neon, 1 scalar */
    long n;
    double gflops;
    volatile float sink;
} peak_job;

static void *peak_thread(void *p) {
    peak_job *j = p;
    double t0 = attn_bench_now_s();
#ifdef BENCH_X86
    if (j->lanes == 16) j->sink = fma_avx512(j->n);
    else if (j->lanes == 8) j->sink = fma_avx2(j->n);
    else j->sink = fma_scalar(j->n);
#elif defined(BENCH_NEON)
    j->sink = j->lanes == 4 ? fma_neon(j->n) : fma_scalar(j->n);
#else
    j->sink = fma_scalar(j->n);
#endif
    double dt = attn_bench_now_s() - t0;
    j->gflops = dt > 0 ? PEAK_CHAINS * j->lanes * 2.0 * (double)j->n / dt * 1e-9 : 0;
    return NULL;
}

double attn_bench_fma_peak_at(int threads, int lanes, long iters, int rounds,
                              const char **isa) {
    const char *name = "scalar";
    if (threads < 1) threads = 1;
#ifdef BENCH_X86
    __builtin_cpu_init();
    if (lanes == 0) {
        /* ATTN_ISA=avx2 caps the kernels at AVX2: the peak is then that of the AVX2 FMAs (half
         * the AVX-512 one where a core runs two 512-bit FMAs per cycle, as on Intel servers) */
        const char *cap = getenv("ATTN_ISA");
        int avx2_cap = cap && !strcmp(cap, "avx2");
        if (__builtin_cpu_supports("avx512f") && !avx2_cap) lanes = 16;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lanes = 8;
    }
    if (lanes == 16 && !__builtin_cpu_supports("avx512f")) lanes = 0;
    if (lanes == 8 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
        lanes = 0;
#elif defined(BENCH_NEON)
    if (lanes != 1) lanes = 4; /* every AArch64 CPU has 128-bit FMLA */
#else
    if (lanes != 1) lanes = 0;
#endif
    if (lanes == 0) lanes = 1;
    name = lanes == 16 ? "avx512f" : lanes == 8 ? "avx2+fma" : lanes == 4 ? "neon" : "scalar";
    if (isa) *isa = name;
    if (iters <= 0) {
        iters = lanes == 1 ? 4000000L : lanes == 4 ? 2000000L : 8000000L;
        /* a round takes about 13 ms on a core at full rate; where it would take far longer
         * (an emulator such as qemu, a scalar build) a probe of 1/64 of it scales the rounds
         * down to about 50 ms each, so that every bench command stays quick there */
        peak_job probe = {.lanes = lanes, .n = iters / 64};
        double t0 = attn_bench_now_s();
        peak_thread(&probe);
        double round_s = (attn_bench_now_s() - t0) * 64;
        if (round_s > 0.05) {
            double scaled = (double)iters * 0.05 / round_s;
            iters = scaled < 1000 ? 1000 : (long)scaled;
        }
    }
    peak_job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    char *started = calloc((size_t)threads, 1);
    double best = 0;
    if (!jobs || !tid || !started) goto done;
    for (int round = 0; round < rounds; round++) {
        double sum = 0;
        for (int t = 0; t < threads; t++) {
            jobs[t].lanes = lanes, jobs[t].n = iters;
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

double attn_bench_fma_peak(int threads, const char **isa) {
    return attn_bench_fma_peak_at(threads, 0, 0, 5, isa);
}

/* ---- the read bandwidth: `threads` threads each sum their slice of a 1 GiB buffer (well
 * above the last-level caches) with vector loads; the median of 7 runs ------------------- */
#define BW_BYTES ((size_t)1 << 30)

typedef struct bw_job {
    const float *p;
    size_t n; /* floats, a multiple of 64 */
    volatile float sink;
} bw_job;

#ifdef BENCH_X86
__attribute__((target("avx512f"))) static float read_avx512(const float *p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
__attribute__((target("avx2"))) static float read_avx2(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 64)
        for (size_t j = 0; j < 64; j += 32) {
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i + j));
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + j + 8));
            a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + j + 16));
            a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + j + 24));
        }
    float o[8];
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}
#endif

static void *bw_thread(void *arg) {
    bw_job *j = arg;
#ifdef BENCH_X86
    if (__builtin_cpu_supports("avx512f")) {
        j->sink = read_avx512(j->p, j->n);
        return NULL;
    }
    if (__builtin_cpu_supports("avx2")) {
        j->sink = read_avx2(j->p, j->n);
        return NULL;
    }
#endif
    float acc[8] = {0};
    for (size_t i = 0; i < j->n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += j->p[i + k];
    j->sink = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
    return NULL;
}

/* GB/s (1e9 bytes) of `threads` concurrent streaming reads of BW_BYTES; 0 on failure. */
double attn_bench_read_bandwidth(int threads) {
    if (threads < 1) threads = 1;
#ifdef BENCH_X86
    __builtin_cpu_init();
#endif
    size_t n = BW_BYTES / sizeof(float);
    float *buf = malloc(BW_BYTES);
    bw_job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    char *started = calloc((size_t)threads, 1);
    double t[ATTN_BENCH_BW_RUNS], med = 0;
    if (!buf || !jobs || !tid || !started) goto done;
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023); /* every page really backed */
    size_t per = n / (size_t)threads / 64 * 64;
    for (int run = 0; run < ATTN_BENCH_BW_RUNS; run++) {
        double t0 = attn_bench_now_s();
        for (int k = 0; k < threads; k++) {
            jobs[k].p = buf + (size_t)k * per, jobs[k].n = per;
            started[k] = k > 0 && pthread_create(&tid[k], NULL, bw_thread, &jobs[k]) == 0;
        }
        for (int k = 0; k < threads; k++)
            if (!started[k]) bw_thread(&jobs[k]); /* the caller is thread 0 */
        for (int k = 0; k < threads; k++)
            if (started[k]) pthread_join(tid[k], NULL);
        double dt = attn_bench_now_s() - t0;
        t[run] = dt > 0 ? (double)(per * (size_t)threads * sizeof(float)) / dt * 1e-9 : 0;
    }
    med = attn_bench_median(t, ATTN_BENCH_BW_RUNS);
done:
    free(buf), free(jobs), free(tid), free(started);
    return med;
}

