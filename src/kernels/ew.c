/* Row-wise elementwise kernels (contract in ew.h): plain C versions and the threaded drivers. */
#include <math.h>
#include <string.h>

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

/* max |y[e]|, NaN when one is NaN: the largest |y| as an integer (the order of non-negative
 * floats, NaNs above infinity), a loop compilers vectorise */
float attn__row_absmax(const float *y, int64_t E) {
    uint32_t mx = 0;
    for (int64_t e = 0; e < E; e++) {
        uint32_t u;
        memcpy(&u, y + e, sizeof u);
        u &= 0x7fffffffu;
        mx = u > mx ? u : mx;
    }
    float f;
    memcpy(&f, &mx, sizeof f);
    return mx > 0x7f800000u ? NAN : f;
}

float attn__ln_row_wide(float *t, int64_t E, const float *w, const float *lb, float eps) {
    attn__layer_norm_ref(t, E, w, lb, eps, t, E, 1, E);
    return attn__row_absmax(t, E);
}

/* s[0] = the sum of the lane sums s[0..64), folded in the order of every add_ln version */
static float ln_fold(float *s) {
    for (int h = ATTN__LN_LANES / 2; h; h /= 2)
        for (int j = 0; j < h; j++) s[j] = s[j] + s[j + h];
    return s[0];
}

/* The definition of add_ln (ew.h), one 64-element block of lanes at a time; the statements
 * hold one operation each where a compiler could otherwise fuse a multiply-add. */
static void add_ln_ref(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                       const float *w, const float *lb, float eps, int64_t M, int64_t E,
                       float *amax) {
    enum { L = ATTN__LN_LANES };
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        const float *rr = r ? r + m * ldr : NULL;
        float s[L] = {0}, q[L] = {0};
        for (int64_t e0 = 0; e0 < E; e0 += L) { /* 1: t, stored, and its lane sums */
            const int n = E - e0 < L ? (int)(E - e0) : L;
            float *t = yr + e0;
            if (b)
                for (int j = 0; j < n; j++) t[j] = t[j] + b[e0 + j];
            if (rr)
                for (int j = 0; j < n; j++) t[j] = t[j] + rr[e0 + j];
            for (int j = 0; j < n; j++) s[j] = s[j] + t[j];
        }
        const float mh = ln_fold(s) / (float)E;
        for (int j = 0; j < L; j++) s[j] = 0.0f;
        for (int64_t e0 = 0; e0 < E; e0 += L) { /* 2: sums of d and d^2 */
            const int n = E - e0 < L ? (int)(E - e0) : L;
            for (int j = 0; j < n; j++) {
                const float d = yr[e0 + j] - mh;
                const float dd = d * d;
                s[j] = s[j] + d;
                q[j] = q[j] + dd;
            }
        }
        const float s1 = ln_fold(s), s2 = ln_fold(q);
        float ml, rstd;
        if (attn__ln_finish(s1, s2, E, eps, &ml, &rstd)) { /* 4: the affine map */
            for (int64_t e = 0; e < E; e++) yr[e] = attn__ln_map(yr[e], mh, ml, rstd, w, lb, e);
            if (amax) amax[m] = attn__row_absmax(yr, E);
        } else {
            const float mx = attn__ln_row_wide(yr, E, w, lb, eps);
            if (amax) amax[m] = mx;
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

static void bias_res_ref(float *y, int64_t ldy, const float *b, const float *r, int64_t ldr,
                         int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        const float *rr = r ? r + m * ldr : NULL;
        if (b)
            for (int64_t n = 0; n < N; n++) yr[n] = yr[n] + b[n];
        if (rr)
            for (int64_t n = 0; n < N; n++) yr[n] = yr[n] + rr[n];
    }
}

/* rms_norm (ew.h): one operation per statement, so that nothing is fused */
void attn__rms_norm_c(const float *x, int64_t ldx, const float *w, float eps, float *y,
                      int64_t ldy, int64_t M, int64_t E) {
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx;
        float *yr = y + m * ldy;
        const float r = attn__rms_rstd(xr, E, eps);
        for (int64_t e = 0; e < E; e++) {
            const float t = xr[e] * r;
            yr[e] = w ? w[e] * t : t;
        }
    }
}

void attn__colsum_c(const float *y, int64_t ldy, int64_t M, int64_t n, float *s) {
    for (int64_t m = 0; m < M; m++) {
        const float *r = y + m * ldy;
        for (int64_t j = 0; j < n; j++) s[j] += r[j];
    }
}

void attn__relu_c(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void attn__relu_mask_c(const float *x, float *y, int64_t n, uint16_t *mask) {
    for (int64_t w = 0; w < (n + 15) / 16; w++) {
        uint16_t bits = 0;
        for (int64_t i = w * 16; i < n && i < w * 16 + 16; i++) {
            const int on = x[i] > 0.0f;
            y[i] = on ? x[i] : 0.0f;
            bits |= (uint16_t)(on << (i - w * 16));
        }
        mask[w] = bits;
    }
}

void attn__relu_bwd_mask_c(const uint16_t *mask, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) dx[i] = (mask[i / 16] >> (i % 16)) & 1 ? dy[i] : 0.0f;
}

void attn__glu_c(const float *g, const float *u, float *h, int64_t n, int act) {
    if (act == 1)
        for (int64_t i = 0; i < n; i++) h[i] = attn__gelu_tanh_as(g[i]) * u[i];
    else
        for (int64_t i = 0; i < n; i++) h[i] = attn__silu_as(g[i]) * u[i];
}

static const attn__ew_kernel attn__ew_ref = {add_ln_ref,        bias_gelu_ref,
                                             bias_res_ref,      NULL,
                                             NULL,              attn__rms_norm_c,
                                             attn__colsum_c,    attn__relu_c,
                                             attn__relu_mask_c, attn__relu_bwd_mask_c,
                                             attn__glu_c};

const attn__ew_kernel *attn__ew_kernel_ref(void) { return &attn__ew_ref; }

int attn__nonfinite_c(const float *p, int64_t n) {
    uint32_t any = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + i, sizeof u);
        any |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return (int)any;
}

typedef struct ew_job {
    const attn__ew_kernel *k;
    const float *x; /* add_ln: the rows to copy into y first (NULL: in place) */
    float *y;
    const float *b, *r, *w, *lb;
    float eps;
    int64_t n;
    float *amax;
} ew_job;

static void add_ln_task(void *arg, int64_t begin, int64_t end, int tid) {
    const ew_job *j = arg;
    (void)tid;
    if (j->x)
        memcpy(j->y + begin * j->n, j->x + begin * j->n,
               (size_t)((end - begin) * j->n) * sizeof(float));
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
    ew_job j = {ctx->kern.ew, NULL, y, b, r, w, lb, eps, E, amax};
    attn__parallel_for(ctx, M, add_ln_task, &j);
}

void attn__layer_norm_rows(attn_ctx *ctx, const float *x, float *y, const float *w,
                           const float *lb, float eps, int64_t M, int64_t E) {
    ew_job j = {ctx->kern.ew, x != y ? x : NULL, y, NULL, NULL, w, lb, eps, E, NULL};
    attn__parallel_for(ctx, M, add_ln_task, &j);
}

void attn__bias_gelu(attn_ctx *ctx, float *y, const float *b, int64_t M, int64_t N) {
    ew_job j = {ctx->kern.ew, NULL, y, b, NULL, NULL, NULL, 0.0f, N, NULL};
    attn__parallel_for(ctx, M, gelu_task, &j);
}

static void res_rows(void *arg, float *y, int64_t ldy, int64_t i0, int64_t rows) {
    const attn__res_state *st = arg;
    ((const attn__ew_kernel *)st->k)->bias_res(y, ldy, NULL, st->r + i0 * st->ldr, st->ldr, rows,
                                               st->n);
}

attn__row_epi attn__res_epi(attn_ctx *ctx, const float *r, int64_t ldr, int64_t n,
                            attn__res_state *st) {
    st->k = ctx->kern.ew, st->r = r, st->ldr = ldr, st->n = n;
    attn__row_epi e = {res_rows, st};
    return e;
}

/* attn__add_f32 in chunks: each chunk of y = a (copied unless y is a or b) + the other */
enum { ADD_CHUNK = 8192 };
typedef struct add_job {
    const attn__ew_kernel *k;
    const float *a, *b;
    float *y;
    int64_t n;
} add_job;

static void add_task(void *arg, int64_t begin, int64_t end, int tid) {
    const add_job *j = arg;
    (void)tid;
    const int64_t i0 = begin * ADD_CHUNK, i1 = end * ADD_CHUNK < j->n ? end * ADD_CHUNK : j->n;
    const float *o = j->b;
    if (j->y == j->b) o = j->a;
    else if (j->y != j->a) memcpy(j->y + i0, j->a + i0, (size_t)(i1 - i0) * sizeof(float));
    j->k->bias_res(j->y + i0, i1 - i0, NULL, o + i0, i1 - i0, 1, i1 - i0);
}

void attn__add_f32(attn_ctx *ctx, const float *a, const float *b, float *y, int64_t n) {
    if (n <= 0) return;
    add_job j = {ctx->kern.ew, a, b, y, n};
    const int64_t chunks = (n + ADD_CHUNK - 1) / ADD_CHUNK;
    if (chunks == 1) add_task(&j, 0, 1, 0);
    else attn__parallel_for(ctx, chunks, add_task, &j);
}

typedef struct rms_job {
    attn__rms_norm_fn fn;
    const float *x, *w;
    float eps, *y;
    int64_t ldx, ldy, E;
} rms_job;

static void rms_task(void *arg, int64_t begin, int64_t end, int tid) {
    const rms_job *j = arg;
    (void)tid;
    j->fn(j->x + begin * j->ldx, j->ldx, j->w, j->eps, j->y + begin * j->ldy, j->ldy,
          end - begin, j->E);
}

void attn__rms_norm(attn_ctx *ctx, const float *x, int64_t ldx, const float *w, float eps,
                    float *y, int64_t ldy, int64_t M, int64_t E) {
    rms_job j = {ctx->kern.ew->rms_norm ? ctx->kern.ew->rms_norm : attn__rms_norm_c, x, w, eps,
                 y, ldx, ldy, E};
    attn__parallel_for(ctx, M, rms_task, &j);
}
