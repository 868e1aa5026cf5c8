/* bf16 linear layer: y[M, N] = x[M, K] W[N, K]^T + b[N] (+ r[M, N]) with x and W rounded to
 * bfloat16, each product formed exactly in float and accumulated in float (src/kernels/
 * gemm_bf16.c).  The weights are rounded and packed once (attn__bf16_pack_weight), the
 * activations are rounded while being staged for the microkernel.
 *
 * Two microkernels with one contract: AVX512_BF16 (VDPBF16PS, x86_avx512bf16/
 * gemm_bf16_avx512.c), used where ctx->kern.has_bf16, and plain C (the fallback and the test
 * oracle).  Both evaluate, for every output element, the same sequence of float operations:
 *     acc = b[n] (0 without a bias)
 *     for each pair k = 2p, 2p+1 in order:  acc += x'[m,2p+1] W'[n,2p+1];  acc += x'[m,2p] W'[n,2p]
 *     acc += r[m, n] (with a residual)
 * (x', W' the bf16-rounded values; K is padded to even with a zero), which is VDPBF16PS's
 * order: the two agree bit for bit except where an input or a partial sum is subnormal (the
 * instruction treats subnormals as zero; the C kernel rounds inputs the same way, so only
 * partial sums below 2^-126 can differ).  Threads split rows only: the same bits for every
 * thread count.
 *
 * Rounding (why tolerances are what they are): bf16 keeps 8 significant bits, so rounding x
 * and W costs each product a relative error of at most (1 + 2^-8)^2 - 1 = 2^-7 + 2^-16, and
 *     |y - y_exact| <= (2^-7 + 2^-16 + (K + 2) 2^-24) sum_k |x_mk W_nk|  (+ |b|, |r| terms in u).
 * Typical errors are far smaller (random signs): ~2^-9 sqrt(K) max|x W|. */
#ifndef ATTN_GEMM_BF16_H
#define ATTN_GEMM_BF16_H
#include "bf16.h"
#include "internal.h"

#define ATTN__BF16_MR 14 /* rows of x per microkernel call */
#define ATTN__BF16_NR 32 /* columns of W per packed panel */

/* Packed W: ceil(N / NR) panels; panel p holds, for each pair index q < ceil(K/2), the NR
 * columns n = p*NR + j as pairs (W'[n, 2q], W'[n, 2q+1]): element ((p*Kh + q)*NR + j)*2 + t
 * is W'[p*NR + j, 2q + t], zero beyond N or K. */
/* Elements (attn__bf16) of the packed form of W [N, K]; 0 when that overflows size_t/2. */
ATTN__HIDDEN size_t attn__bf16_packed_size(int64_t K, int64_t N);
/* Rounds W [N, K] (row stride K) to bf16 (nearest even; subnormals to zero) and packs it. */
ATTN__HIDDEN void attn__bf16_pack_weight(const float *W, int64_t K, int64_t N, attn__bf16 *dst);

/* Rounds n floats to bf16 as the kernels do (nearest even, subnormal inputs to zero). */
ATTN__HIDDEN void attn__bf16_round_row(const float *x, int64_t n, attn__bf16 *dst);

/* ---- microkernel contract ----------------------------------------------------------------
 * c[mv, nv] (row stride ldc) for mv <= MR, nv <= NR, over kh pairs:
 *   a: MR rows of 2*kh bf16 (row stride lda elements; rows >= mv are zero and finite),
 *   b: kh steps of NR pairs (a slice of one packed panel),
 *   acc starts at bias[j] (first, bias may be NULL: 0) or at c (not first), runs the pairs
 *   in order as above, then adds r[i*ldr + j] when r is not NULL; rows >= mv and columns >= nv
 *   are neither read nor written in c, r or bias. */
typedef void (*attn__bf16_ukr_fn)(int64_t kh, const attn__bf16 *a, int64_t lda, int64_t mv,
                                  const attn__bf16 *b, float *c, int64_t ldc, int64_t nv,
                                  const float *bias, int first, const float *r, int64_t ldr);
/* dst[0, np) = x[0, n) rounded (as attn__bf16_round_row), zeros in [n, np). */
typedef void (*attn__bf16_cvt_fn)(const float *x, int64_t n, attn__bf16 *dst, int64_t np);

typedef struct attn__bf16_kernel {
    const char *name;
    attn__bf16_ukr_fn ukr;
    attn__bf16_cvt_fn cvt;
} attn__bf16_kernel;

ATTN__HIDDEN const attn__bf16_kernel *attn__bf16_kernel_ref(void);
/* NULL when the build could not compile the AVX512_BF16 kernels. */
ATTN__HIDDEN const attn__bf16_kernel *attn__bf16_kernel_avx512(void);

/* y[M, N] (row stride ldy) = x[M, K] (row stride ldx) Wp^T + b[N] (+ r[M, N], row stride ldr)
 * on the kernel of the context, Wp packed by attn__bf16_pack_weight(W, K, N).  b and r may be
 * NULL; neither x nor r may overlap y (y holds partial sums between K chunks).  Scratch from
 * the workspace; fails only when it runs out. */
ATTN__HIDDEN attn_status attn__linear_bf16(attn_ctx *ctx, const float *x, int64_t ldx,
                                           const attn__bf16 *Wp, const float *b, const float *r,
                                           int64_t ldr, float *y, int64_t ldy, int64_t M,
                                           int64_t K, int64_t N);
/* The same with an explicit kernel (tests). */
ATTN__HIDDEN attn_status attn__linear_bf16_k(attn_ctx *ctx, const attn__bf16_kernel *k,
                                             const float *x, int64_t ldx, const attn__bf16 *Wp,
                                             const float *b, const float *r, int64_t ldr,
                                             float *y, int64_t ldy, int64_t M, int64_t K,
                                             int64_t N);

#endif
