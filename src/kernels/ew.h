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
 * x Phi(x) with erf from Abramowitz & Stegun 7.1.28 (|erf error| <= 3e-7, so |gelu error| <=
 * 1.5e-7 |x| + a float rounding or two).  The AVX-512 version evaluates the same float
 * operations in the same order: bit-identical to the plain C one. */
typedef void (*attn__bias_gelu_fn)(float *y, int64_t ldy, const float *b, int64_t M, int64_t N);

typedef struct attn__ew_kernel {
    attn__add_ln_fn add_ln;
    attn__bias_gelu_fn bias_gelu;
} attn__ew_kernel;

ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_ref(void);
/* NULL when not compiled with AVX-512. */
ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_avx512(void);
/* The set of ctx->isa (AVX-512 or the plain C one). */
ATTN__HIDDEN const attn__ew_kernel *attn__ew_kernel_for(const attn_ctx *ctx);

/* The GELU of one float as the kernels compute it. */
ATTN__HIDDEN float attn__gelu_as(float x);

/* Row-parallel versions on the context's threads (contiguous rows: ld = E or N). */
ATTN__HIDDEN void attn__add_ln(attn_ctx *ctx, float *y, const float *b, const float *r,
                               const float *w, const float *lb, float eps, int64_t M, int64_t E,
                               float *amax);
ATTN__HIDDEN void attn__bias_gelu(attn_ctx *ctx, float *y, const float *b, int64_t M, int64_t N);

#endif
