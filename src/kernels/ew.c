/* Row-wise elementwise kernels (contract in ew.h): plain C versions and the threaded drivers. */
#include <math.h>

#include "dispatch.h"
#include "ew.h"
#include "kernels.h"
#include "pool.h"

/* x Phi(x) with Phi(-|x|) = P(|x|)^16: formula, error and special values in ew.h.  fmaf is
 * one instruction where the compiler may assume FMA (AArch64, x86 with -mfma), else a library
 * call: slow, but x86 machines with AVX2 run the AVX2 kernel instead. */
float attn__gelu_as(float x) {
    float a = fabsf(x), c = a < ATTN__GELU_AMAX ? a : ATTN__GELU_AMAX;
    float p = fmaf(c, ATTN__GELU_C10, ATTN__GELU_C9);
    p = fmaf(c, p, ATTN__GELU_C8);
    p = fmaf(c, p, ATTN__GELU_C7);
    p = fmaf(c, p, ATTN__GELU_C6);
    p = fmaf(c, p, ATTN__GELU_C5);
    p = fmaf(c, p, ATTN__GELU_C4);
    p = fmaf(c, p, ATTN__GELU_C3);
    p = fmaf(c, p, ATTN__GELU_C2);
    p = fmaf(c, p, ATTN__GELU_C1);
    p = fmaf(c, p, ATTN__GELU_C0);
    p = p * p, p = p * p, p = p * p, p = p * p; /* Phi(-|x|) */
    float t = a <= ATTN__GELU_AMAX ? x * p : 0.0f;
    return x <= 0 ? t : x - t;
}

static void add_ln_ref(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                       const float *w, const float *lb, float eps, int64_t M, int64_t E,
                       float *amax) {
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        if (b)
            for (int64_t e = 0; e < E; e++) yr[e] += b[e];
        if (r)
            for (int64_t e = 0; e < E; e++) yr[e] += r[m * ldr + e];
        attn__layer_norm_ref(yr, E, w, lb, eps, yr, E, 1, E);
        if (amax) {
            float mx = 0.0f;
            for (int64_t e = 0; e < E; e++)
                mx = isnan(yr[e]) || isnan(mx) ? NAN : fmaxf(mx, fabsf(yr[e]));
            amax[m] = mx;
        }
    }
}

static void bias_gelu_ref(float *y, int64_t ldy, const float *b, int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float *p = y + m * ldy + n;
            *p = attn__gelu_as(b ? *p + b[n] : *p);
        }
}

static const attn__ew_kernel attn__ew_ref = {add_ln_ref, bias_gelu_ref};

const attn__ew_kernel *attn__ew_kernel_ref(void) { return &attn__ew_ref; }

const attn__ew_kernel *attn__ew_kernel_for(const attn_ctx *ctx) {
    const attn__ew_kernel *k = ctx->isa == ATTN__ISA_AVX512 ? attn__ew_kernel_avx512()
                               : ctx->isa == ATTN__ISA_AVX2 ? attn__ew_kernel_avx2()
                                                            : NULL;
    return k ? k : &attn__ew_ref;
}

typedef struct ew_job {
    const attn__ew_kernel *k;
    float *y;
    const float *b, *r, *w, *lb;
    float eps;
    int64_t n;
    float *amax;
} ew_job;

static void add_ln_task(void *arg, int64_t begin, int64_t end, int tid) {
    const ew_job *j = arg;
    (void)tid;
    j->k->add_ln(j->y + begin * j->n, j->n, j->b, j->r ? j->r + begin * j->n : NULL, j->n, j->w,
                 j->lb, j->eps, end - begin, j->n, j->amax ? j->amax + begin : NULL);
}

static void gelu_task(void *arg, int64_t begin, int64_t end, int tid) {
    const ew_job *j = arg;
    (void)tid;
    j->k->bias_gelu(j->y + begin * j->n, j->n, j->b, end - begin, j->n);
}

void attn__add_ln(attn_ctx *ctx, float *y, const float *b, const float *r, const float *w,
                  const float *lb, float eps, int64_t M, int64_t E, float *amax) {
    ew_job j = {attn__ew_kernel_for(ctx), y, b, r, w, lb, eps, E, amax};
    attn__parallel_for(ctx, M, add_ln_task, &j);
}

void attn__bias_gelu(attn_ctx *ctx, float *y, const float *b, int64_t M, int64_t N) {
    ew_job j = {attn__ew_kernel_for(ctx), y, b, NULL, NULL, NULL, 0.0f, N, NULL};
    attn__parallel_for(ctx, M, gelu_task, &j);
}
