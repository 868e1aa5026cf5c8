/* Row-wise elementwise kernels of the encoder layers (src/kernels/ew.c): the residual add with
 * layer norm and the bias with GELU, each one pass over memory.  Plain C versions are the
 * definition and the oracle; the AVX2 and AVX-512 versions (x86_avx2/ew_avx2.c,
 * x86_avx512/ew_avx512.c; a context calls the one in ctx->kern.ew) give the same bits.  Rows
 * are independent: the parallel versions split rows only, so the result is the same for every
 * thread count. */
#ifndef ATTN_EW_H
#define ATTN_EW_H
#include <float.h>
#include <math.h>

#include "internal.h"

/* Row m of y [M, E] (row stride ldy), in place:
 *   t[e] = (y[e] + b[e]) + r[m, e]          (float adds in this order; b, r may be NULL), stored
 *   y[e] = (t[e] - mean(t)) / sqrt(var(t) + eps) * w[e] + lb[e]   (w, lb may be NULL)
 * amax [M] (may be NULL) receives max_e |y[m, e]| of the result (NaN when a result is NaN): the
 * row scale of the fp16 GEMM that reads y next (gemm_f16.h), without another pass.
 * In float, the same operations in the same order in every version (plain C, AVX2, AVX-512):
 * bit-identical.  sum() below adds element e into lane e % 64 of ATTN__LN_LANES float partial
 * sums, in increasing e, then folds the lanes as s[j] += s[j + h] for h = 32, 16, ..., 1:
 *   1. mh = sum(t) / E
 *   2. d = t - mh;  S1 = sum(d), S2 = sum(d * d)   (the square rounded: no fused multiply-add)
 *   3. attn__ln_finish, in double: ml = S1 / E corrects the rounding error of mh (mh + ml is
 *      the mean to about an ulp of the spread, however large a common offset),
 *      var = max(S2 / E - ml^2, 0), rstd = 1 / sqrt(var + eps); ml and rstd rounded to float
 *   4. y = (((t - mh) - ml) * rstd) * w + lb        (each operation rounded)
 * Error against the layer norm in double (attn__layer_norm_ref), measured on N(0, 1) rows,
 * also with offsets of 10^2 to 10^6 standard deviations, E = 17 to 1000: at most 1.5 ulp of
 * the output scale (|xhat| + 1) |w| + |lb| (xhat = (t - mean) rstd; the 1 for the error of
 * the mean, which outputs near lb see in full): 1e-6 absolute for w ~ 1, |lb| <= 1 (with the
 * statistics and the affine map in double, as before: 0.4 ulp, 2.4e-7).  tests/test_ew.c
 * checks 3 ulp.
 * Rows whose float statistics overflow (S2 not finite: |t - mean| beyond ~1e19, or a NaN or
 * infinity in t) are normalised in double instead, as attn__layer_norm_ref does
 * (attn__ln_row_wide), by every version: a NaN or infinity in t makes the row NaN. */
typedef void (*attn__add_ln_fn)(float *y, int64_t ldy, const float *b, const float *r,
                                int64_t ldr, const float *w, const float *lb, float eps,
                                int64_t M, int64_t E, float *amax);
/* y [M, N] (row stride ldy), in place: y = gelu(y + b) (b [N] may be NULL), the exact GELU
 * x Phi(x) as attn__gelu_as below.  The AVX2 and AVX-512 versions evaluate the same float
 * operations in the same order: bit-identical to the plain C one. */
typedef void (*attn__bias_gelu_fn)(float *y, int64_t ldy, const float *b, int64_t M, int64_t N);
/* y [M, N] (row stride ldy), in place: y = (y + b) + r (two float adds in this order; b [N]
 * and r [M, N] (row stride ldr) may be NULL): the bias and residual epilogue of a product.
 * Bit-identical in every version. */
typedef void (*attn__bias_res_fn)(float *y, int64_t ldy, const float *b, const float *r,
                                  int64_t ldr, int64_t M, int64_t N);

/* ---- backward kernels (driven by src/kernels/ew_bwd.c over the context's threads) ----------
 * Float versions of the double references attn__layer_norm_bwd_ref and attn__act_bwd_ref (the
 * oracle, which a table without them runs instead).
 * ln_bwd_rows: the layer-norm backward of rows [0, M) in one pass over each row:
 *   mean and rstd = 1 / sqrt(var + eps) (float sums in a fixed lane order: two passes, mean
 *   then the centred squares; the root in double), xhat = (x - mean) rstd;
 *   dx = rstd (g - mean_e(g) - xhat mean_e(g xhat)), g = dy w (w NULL: 1); dx NULL: none; dx
 *   may alias dy;
 *   dw, db (both NULL, or both [E]): ADD the sums over these rows, in row order and in double,
 *   of dy xhat and of dy.  The driver (ew_bwd.c) runs fixed blocks of rows and sums the blocks'
 *   double sums in block order: the same bits for any thread count.
 * act_bwd: dx[i] = act'(x[i]) dy[i] for n elements (dx may alias x or dy); returns 0 for an
 *   activation it does not do (the reference then runs). */
typedef void (*attn__ln_bwd_rows_fn)(const float *x, int64_t ldx, const float *w, float eps,
                                     const float *dy, int64_t lddy, float *dx, int64_t lddx,
                                     int64_t M, int64_t E, double *dw, double *db);
typedef int (*attn__act_bwd_fn)(attn_activation act, const float *x, const float *dy, float *dx,
                                int64_t n);

/* RMSNorm rows (HF LlamaRMSNorm), y [M, E] (row stride ldy) from x [M, E] (row stride ldx; y
 * may be x):
 *   ss = sum of x[e] * x[e] (each square rounded: no fused multiply-add), element e into lane
 *        e % ATTN__RMS_LANES of float partial sums in increasing e, the lanes then folded as
 *        s[j] += s[j + h] for h = 8, 4, 2, 1
 *   ms = ss / E (float);  r = 1 / sqrt(ms + eps): ms + eps in float, the root and the quotient
 *        in double, rounded to float
 *   y[e] = w[e] * (x[e] * r)   (w NULL: x[e] * r; each product rounded)
 * The plain C version is the definition; the AVX-512 one performs the same operations on one
 * vector of lanes: bit-identical.  A row whose squares overflow gives r = 0 (zeros, or NaN for
 * an infinite x), as the float formula in PyTorch does. */
#define ATTN__RMS_LANES 16
typedef void (*attn__rms_norm_fn)(const float *x, int64_t ldx, const float *w, float eps,
                                  float *y, int64_t ldy, int64_t M, int64_t E);

/* y[i] = x[i] > 0 ? x[i] : 0 for n elements (ReLU as attn__act1: NaN and -0 give +0; y may
 * be x). */
typedef void (*attn__relu_fn)(const float *x, float *y, int64_t n);
ATTN__HIDDEN void attn__relu_c(const float *x, float *y, int64_t n);

/* ReLU with its derivative kept as bits: y[i] = relu(x[i]) as attn__relu_c, and bit i % 16 of
 * mask[i / 16] = (x[i] > 0) (the words of a row: ceil(n / 16), bits past n zero).
 * relu_bwd_mask: dx[i] = bit i ? dy[i] : 0 (attn__act_bwd's ReLU bits; dx may be dy). */
typedef void (*attn__relu_mask_fn)(const float *x, float *y, int64_t n, uint16_t *mask);
typedef void (*attn__relu_bwd_mask_fn)(const uint16_t *mask, const float *dy, float *dx,
                                       int64_t n);
ATTN__HIDDEN void attn__relu_mask_c(const float *x, float *y, int64_t n, uint16_t *mask);
ATTN__HIDDEN void attn__relu_bwd_mask_c(const uint16_t *mask, const float *dy, float *dx,
                                        int64_t n);

/* s[j] += the sum over rows m in order of y[m, j], columns j in [0, n) (a bias gradient): the
 * float adds in row order, so every version gives the plain C one's bits. */
typedef void (*attn__colsum_fn)(const float *y, int64_t ldy, int64_t M, int64_t n, float *s);
ATTN__HIDDEN void attn__colsum_c(const float *y, int64_t ldy, int64_t M, int64_t n, float *s);

/* The gated activations of the LLM feed-forward, as every version computes them (one float
 * definition, as attn__gelu_as's): both are x sigmoid(s x') = x / (1 + 2^t), with
 *   SiLU (SwiGLU):       t = x * -log2(e)                                     (torch: x sigmoid(x))
 *   tanh-GELU (GEGLU):   p = fmaf(0.044715, x*x, 1),  t = (x * K) * p,  K = -2 sqrt(2/pi) log2(e)
 *                        (0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
 *                        the sigmoid form has no cancellation for negative x)
 * and 2^t by attn__exp2_as: t clamped to [-126, 126] (NaN: 0; the result is NaN anyway through
 * x), n = rint(t), f = t - n, P(f) the degree-6 Taylor polynomial of 2^f (Horner, each step
 * one fmaf), times 2^n (exact unless the product is subnormal, the same rounding everywhere);
 * then d = 1 + 2^t, y = x / d.  One operation per statement: no version fuses anything else.
 * Error against the formulas in double (tests/test_ew.c, on [-90, 90]): SiLU 8.3 ulp, tanh-GELU
 * 14.2 ulp where |result| >= 1e-3 (t rounded to float: 2^t is off by |t| 2^-24 relative); below,
 * 3.7e-6 and 1.3e-5 relative, and 7.5e-36 absolute under 2^-100 (x below about -10 for
 * tanh-GELU, -70 for SiLU, where 2^t is clamped at 2^126).  PyTorch's float tanh-GELU,
 * 0.5 x (1 + tanh(u)), loses more near x = -3 (1 + tanh(u) cancels).  Special values: +-0 -> +-0, +inf -> +inf, -inf -> -inf (torch gives
 * NaN there), NaN -> NaN. */
#define ATTN__NLOG2E -1.44269504088896341f
#define ATTN__GELU_TANH_K -2.30220819814070602f /* -2 sqrt(2/pi) log2(e) */
#define ATTN__GELU_TANH_A 0.044715f
#define ATTN__EXP2_P6 1.5403530393381606e-4f
#define ATTN__EXP2_P5 1.3333558146428443e-3f
#define ATTN__EXP2_P4 9.6181291076284772e-3f
#define ATTN__EXP2_P3 5.5504108664821580e-2f
#define ATTN__EXP2_P2 2.4022650695910071e-1f
#define ATTN__EXP2_P1 6.9314718055994531e-1f
static inline float attn__exp2_as(float t) {
    if (!(t >= -126.0f)) t = t == t ? -126.0f : 0.0f;
    if (t > 126.0f) t = 126.0f;
    const float n = rintf(t);
    const float f = t - n;
    float p = ATTN__EXP2_P6;
    p = fmaf(p, f, ATTN__EXP2_P5);
    p = fmaf(p, f, ATTN__EXP2_P4);
    p = fmaf(p, f, ATTN__EXP2_P3);
    p = fmaf(p, f, ATTN__EXP2_P2);
    p = fmaf(p, f, ATTN__EXP2_P1);
    p = fmaf(p, f, 1.0f);
    union { uint32_t u; float f; } s;
    s.u = (uint32_t)((int32_t)n + 127) << 23;
    return p * s.f;
}
static inline float attn__silu_as(float x) {
    const float t = x * ATTN__NLOG2E;
    const float e = attn__exp2_as(t);
    const float d = 1.0f + e;
    return x / d;
}
static inline float attn__gelu_tanh_as(float x) {
    const float x2 = x * x;
    const float p = fmaf(ATTN__GELU_TANH_A, x2, 1.0f);
    const float xk = x * ATTN__GELU_TANH_K;
    const float t = xk * p;
    const float e = attn__exp2_as(t);
    const float d = 1.0f + e;
    return x / d;
}
/* h[i] = act(g[i]) * u[i] for n elements (act 0 SiLU, 1 tanh-GELU, as above; h may be g or u). */
typedef void (*attn__glu_fn)(const float *g, const float *u, float *h, int64_t n, int act);
ATTN__HIDDEN void attn__glu_c(const float *g, const float *u, float *h, int64_t n, int act);

typedef struct attn__ew_kernel {
    attn__add_ln_fn add_ln;
    attn__bias_gelu_fn bias_gelu;
    attn__bias_res_fn bias_res;
    /* NULL: the double references run (and give their bits) */
    attn__ln_bwd_rows_fn ln_bwd_rows;
    attn__act_bwd_fn act_bwd;
    attn__rms_norm_fn rms_norm; /* NULL: the plain C one */
    attn__colsum_fn colsum;     /* NULL: the plain C one */
    attn__relu_fn relu;         /* NULL: the plain C one */
    attn__relu_mask_fn relu_mask;         /* NULL: the plain C one */
    attn__relu_bwd_mask_fn relu_bwd_mask; /* NULL: the plain C one */
    attn__glu_fn glu;                     /* NULL: the plain C one */
} attn__ew_kernel;

ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_ref(void);

/* The scan behind every finite check (attn__nonfinite_fn, internal.h): 1 when some float of
 * p[0, n) has all its exponent bits set (NaN, +-inf).  Plain C, and per set a version that
 * takes the largest magnitude's bits as an unsigned maximum over whole vectors (NULL where the
 * set is not compiled): at memory bandwidth where the C loop (SSE2 at best) was not. */
ATTN__HIDDEN int attn__nonfinite_c(const float *p, int64_t n);
ATTN__HIDDEN attn__nonfinite_fn attn__nonfinite_avx512(void);
ATTN__HIDDEN attn__nonfinite_fn attn__nonfinite_avx2(void);
ATTN__HIDDEN attn__nonfinite_fn attn__nonfinite_neon(void);
/* NULL when not compiled with AVX-512, resp. AVX2 + FMA. */
ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_avx512(void);
ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_avx2(void);
/* NULL off AArch64 (arm_neon/ew_neon.c: the same bits as the plain C forward kernels). */
ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_neon(void);

/* The shared scalar steps of add_ln (contract above). */
#define ATTN__LN_LANES 64
/* Step 3 from S1, S2: 0 when S2 is not finite (the row then goes to attn__ln_row_wide).  One
 * operation per statement, so that no compiler fuses a multiply-add in one version only. */
static inline int attn__ln_finish(float s1, float s2, int64_t E, float eps, float *ml,
                                  float *rstd) {
    if (!(s2 <= FLT_MAX)) return 0;
    const double m = (double)s1 / (double)E;
    const double m2 = m * m;
    double var = (double)s2 / (double)E;
    var = var - m2;
    var = var > 0 ? var : 0;
    *ml = (float)m;
    *rstd = (float)(1.0 / sqrt(var + (double)eps));
    return 1;
}
/* Step 4 for one element (the plain C version, and the vector versions' tails). */
static inline float attn__ln_map(float t, float mh, float ml, float rstd, const float *w,
                                 const float *lb, int64_t e) {
    float x = t - mh;
    x = x - ml;
    x = x * rstd;
    if (w) x = x * w[e];
    if (lb) x = x + lb[e];
    return x;
}
/* max |y[e]| over e < E (NaN when one is NaN), as add_ln's amax. */
ATTN__HIDDEN float attn__row_absmax(const float *y, int64_t E);
/* t [E] (step 1's t, stored) normalised in place in double, as attn__layer_norm_ref; returns
 * max |result| (NaN when a result is NaN). */
ATTN__HIDDEN float attn__ln_row_wide(float *t, int64_t E, const float *w, const float *lb,
                                     float eps);

/* The GELU of one float as the kernels compute it, x Phi(x) with Phi(-a) = P(a)^16 for
 * a = |x|: no division, no exp.
 *   c = min(a, 7),  P = C0 + c (C1 + c (C2 + ... + c C10))  (Horner, each step one fmaf),
 *   F = P^16 (four squarings) ~ Phi(-a) = erfc(a / sqrt 2) / 2,
 *   t = a <= 7 ? x F : 0 (Phi(-7) < 1.3e-12; also 0 for NaN),  gelu = x <= 0 ? t : x - t.
 * P is a weighted minimax fit of Phi(-a)^(1/16) on [0, 7], C0 = 2^(-1/16) in float
 * (tools/fit_gelu.py makes the constants: float64 fit, then rounded to float).  Measured
 * against x Phi(x) in double on every 4th float in [-12, 12]: max |error| 2.4e-7 (the A&S
 * 7.1.28 erf with a division used before: 8.7e-7), max relative error 2.1e-6 where
 * |gelu| > 1e-3 (before: 3.3e-4 near x = -3.4, where 1 - erf cancels), 1.4e-6 on [-1, 1]
 * (before: 2.4e-6); below 1% for -7 < x < -3.4, where |gelu| < 1e-3.
 * Special values: gelu(NaN) = NaN, gelu(+inf) = +inf, gelu(+-0) = +-0, and +0 for x <= -7
 * and x = -inf (before: -0, and NaN for -inf).  Vector versions must perform exactly these
 * float operations: the fmaf as fused multiply-adds and every other product and sum rounded
 * on its own (the build's -std=c11 keeps GCC from contracting them); min(a, 7) is
 * `a < 7 ? a : 7`, the MINPS rule (7 for NaN). */
#define ATTN__GELU_AMAX 7.0f
#define ATTN__GELU_C0 0.957603276f
#define ATTN__GELU_C1 -0.047753837f
#define ATTN__GELU_C2 -0.0178575218f
#define ATTN__GELU_C3 -0.00125264714f
#define ATTN__GELU_C4 0.000572526013f
#define ATTN__GELU_C5 1.01706673e-05f
#define ATTN__GELU_C6 -1.48948948e-05f
#define ATTN__GELU_C7 2.37339145e-06f
#define ATTN__GELU_C8 -2.44647168e-07f
#define ATTN__GELU_C9 1.67340115e-08f
#define ATTN__GELU_C10 -5.34123357e-10f
ATTN__HIDDEN float attn__gelu_as(float x);

/* Row-parallel versions on the context's threads (contiguous rows: ld = E or N). */
ATTN__HIDDEN void attn__add_ln(attn_ctx *ctx, float *y, const float *b, const float *r,
                               const float *w, const float *lb, float eps, int64_t M, int64_t E,
                               float *amax);
ATTN__HIDDEN void attn__bias_gelu(attn_ctx *ctx, float *y, const float *b, int64_t M, int64_t N);
/* y = layer_norm(x) * w + lb (add_ln without bias and residual), x and y [M, E] contiguous (may
 * be the same): each thread copies its rows of x into y, then normalises them. */
ATTN__HIDDEN void attn__layer_norm_rows(attn_ctx *ctx, const float *x, float *y, const float *w,
                                        const float *lb, float eps, int64_t M, int64_t E);
/* RMSNorm of M rows (rms_norm above) over the context's threads; y may be x. */
ATTN__HIDDEN void attn__rms_norm(attn_ctx *ctx, const float *x, int64_t ldx, const float *w,
                                 float eps, float *y, int64_t ldy, int64_t M, int64_t E);
/* The plain C row kernel (the definition; tests compare the others with it). */
ATTN__HIDDEN void attn__rms_norm_c(const float *x, int64_t ldx, const float *w, float eps,
                                   float *y, int64_t ldy, int64_t M, int64_t E);

/* The r of rms_norm above for one row x [E] (the definition's arithmetic: lanes, fold, root
 * from double), which every version computes with the same bits; the backward recomputes it. */
static inline float attn__rms_rstd(const float *x, int64_t E, float eps) {
    enum { L = ATTN__RMS_LANES };
    float s[L] = {0};
    for (int64_t e = 0; e < E; e++) {
        const float sq = x[e] * x[e];
        s[e % L] = s[e % L] + sq;
    }
    for (int h = L / 2; h; h /= 2)
        for (int j = 0; j < h; j++) s[j] = s[j] + s[j + h];
    const float ms = s[0] / (float)E;
    const float v = ms + eps;
    return (float)(1.0 / sqrt((double)v));
}

#endif
