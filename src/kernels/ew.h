/* Row-wise elementwise kernels of the encoder layers (src/kernels/ew.c): the residual add with
 * layer norm and the bias with GELU, each one pass over memory.  Plain C versions are the
 * definition and the oracle; the AVX-512 versions (x86_avx512/ew_avx512.c) are chosen when
 * ctx->isa is AVX-512.  Rows are independent: the parallel versions split rows only, so the
 * result is the same for every thread count. */
#ifndef ATTN_EW_H
#define ATTN_EW_H
#include "internal.h"

/* Row m of y [M, E] (row stride ldy), in place:
 *   t[e] = (y[e] + b[e]) + r[m, e]          (float adds in this order; b, r may be NULL)
 *   y[e] = (t[e] - mean(t)) / sqrt(var(t) + eps) * w[e] + lb[e]   (w, lb may be NULL)
 * The statistics and the affine map in double, as attn__layer_norm_ref (so the results agree
 * to the last bit or two: only the order of the double sums differs).  amax [M] (may be NULL)
 * receives max_e |y[m, e]| of the result (NaN when a result is NaN): the row scale of the fp16
 * GEMM that reads y next (gemm_f16.h), without another pass. */
typedef void (*attn__add_ln_fn)(float *y, int64_t ldy, const float *b, const float *r,
                                int64_t ldr, const float *w, const float *lb, float eps,
                                int64_t M, int64_t E, float *amax);
/* y [M, N] (row stride ldy), in place: y = gelu(y + b) (b [N] may be NULL), the exact GELU
 * x Phi(x) as attn__gelu_as below.  The AVX2 and AVX-512 versions evaluate the same float
 * operations in the same order: bit-identical to the plain C one. */
typedef void (*attn__bias_gelu_fn)(float *y, int64_t ldy, const float *b, int64_t M, int64_t N);

typedef struct attn__ew_kernel {
    attn__add_ln_fn add_ln;
    attn__bias_gelu_fn bias_gelu;
} attn__ew_kernel;

ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_ref(void);
/* NULL when not compiled with AVX-512, resp. AVX2 + FMA (whose add_ln is the plain C one). */
ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_avx512(void);
ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_avx2(void);
/* The set of ctx->isa (AVX-512, AVX2 or the plain C one). */
ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_for(const attn_ctx *ctx);

/* The GELU of one float as the kernels compute it, x Phi(x) with Phi(-a) = P(a)^16 for
 * a = |x|: no division, no exp.
 *   c = min(a, 7),  P = C0 + c (C1 + c (C2 + ... + c C10))  (Horner, each step one fmaf),
 *   F = P^16 (four squarings) ~ Phi(-a) = erfc(a / sqrt 2) / 2,
 *   t = a <= 7 ? x F : 0 (Phi(-7) < 1.3e-12; also 0 for NaN),  gelu = x <= 0 ? t : x - t.
 * P is a weighted minimax fit of Phi(-a)^(1/16) on [0, 7], C0 = 2^(-1/16) in float
 * (tests/fit_gelu.py makes the constants: float64 fit, then rounded to float).  Measured
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

#endif
