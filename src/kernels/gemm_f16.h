/* fp16 linear layer (src/kernels/gemm_f16.c): y[M, N] = x[M, K] W[N, K]^T + b[N] (+ r[M, N])
 * with fp16 products and short fp16 sums, for CPUs whose AVX512_FP16 FMA runs 32 lanes at the
 * float FMA's rate (twice the float throughput; VDPBF16PS is half of it on Sapphire Rapids).
 *
 * Scaling (no overflow, whatever the data).  Each column n of W is scaled by a power of two
 * 2^-cn so that max_k |W[n, k]| 2^-cn lies in [0.5, 1), each row m of x likewise by 2^-rm;
 * both are then rounded to fp16 (nearest even, subnormals kept).  Scaled products are below 1
 * in magnitude, so a block of KB = 128 of them sums to below 128, far from fp16's 65504.
 *
 * Arithmetic, the same for both kernels (AVX512_FP16 and plain C, bit for bit):
 *     acc = 0 (float)
 *     for each block of KB consecutive k (in order):
 *         h = 0 (fp16);  for k in the block: h = fma_fp16(x'[m, k], W'[n, k], h)  (one rounding)
 *         acc += (float)h
 *     y = (acc * 2^(rm + cn) + b[n]) + r[m, n]
 * The plain C kernel evaluates each fp16 fma exactly in double, then rounds once to fp16.
 *
 * Error: inputs within 2^-11 relative (normal range), each block sum within gamma_KB of fp16
 * (KB 2^-11, worst case) of its terms; in practice errors are random and ~2^-12 sqrt(KB) per
 * partial sum: measured on all-MiniLM-L6-v2 they are smaller than bf16's (README). */
#ifndef ATTN_GEMM_F16_H
#define ATTN_GEMM_F16_H
#include "internal.h"
#include "kernels.h"

#define ATTN__F16_MR 14 /* rows of x per microkernel call */
#define ATTN__F16_NR 64 /* columns of W per packed panel */
#define ATTN__F16_KB 128 /* k per fp16 partial sum: 64 is ~1.3x more accurate, ~7% slower
                            (the widening to float costs ~10% of the kernel every 64 steps) */
#define ATTN__F16_KC 512 /* k per chunk (a multiple of KB) */
#define ATTN__F16_LDA 528 /* words between staged rows (not 2 KiB: no cache-set aliasing) */

/* Packed W (bytes, 64-byte multiple): Np = ceil(N / NR) * NR floats 2^cn (1 beyond N), then
 * ceil(N / NR) panels of K rows of NR fp16 values W[n, k] 2^-cn (0 beyond N). */
/* Bytes of the packed form of W [N, K]; 0 on overflow. */
ATTN__HIDDEN size_t attn__f16_packed_size(int64_t K, int64_t N);
ATTN__HIDDEN void attn__f16_pack_weight(const float *W, int64_t K, int64_t N, void *dst);

/* IEEE half conversions used by the plain C kernel and the tests: float of a half (exact), and
 * the nearest half of a double (ties to even, subnormals, overflow to infinity, NaN kept). */
ATTN__HIDDEN float attn__f16_to_f32(uint16_t h);
ATTN__HIDDEN uint16_t attn__f64_to_f16(double x);

/* 2^e with max / 2^e in [0.5, 1), e clamped to [-126, 127]; 1 for 0, NaN or infinity. */
ATTN__HIDDEN float attn__f16_pow2_scale(float max);

/* ---- microkernel contract ----------------------------------------------------------------
 * c[mv, nv] (row stride ldc) over kc <= KC values of k (a multiple of KB except in the last
 *   chunk): a: MR rows of kc 32-bit words, each an fp16 value in both halves (row stride LDA
 *   words, a constant so that the kernel addresses the rows with immediate offsets; rows >= mv
 *   are zero), b: kc rows of NR fp16 values (a slice of one packed panel).
 *   acc starts at 0 (first) or at c; gains the blocks as above; then when last
 *   c = (acc * (rs[i] * cs[j]) + bias[j]) + r[i*ldr + j] (bias, r may be NULL), then with gelu
 *   c = attn__gelu_as(c), and when tmax is not NULL tmax[i] = max(tmax[i], max_j |c[i, j]|)
 *   (NaN sticky) for i < mv; else c = acc.
 *   Rows >= mv and columns >= nv of c, r and bias are neither read nor written. */
/* pf (may be NULL; a hint, no effect on results): rows of x that the driver will stage next,
 * fetched toward the cache a line at a time spread over the k loop, so that their memory
 * latency overlaps the products. */
typedef struct attn__f16_pf {
    const float *x; /* first row */
    int64_t rows, ld, n; /* rows of n floats, row stride ld */
} attn__f16_pf;
typedef void (*attn__f16_ukr_fn)(int64_t kc, const uint32_t *a, int64_t mv,
                                 const uint16_t *b, float *c, int64_t ldc, int64_t nv,
                                 int first, int last, const float *rs, const float *cs,
                                 const float *bias, const float *r, int64_t ldr, int gelu,
                                 float *tmax, const attn__f16_pf *pf);
/* max |x[k]| over k < n (NaN if any is NaN). */
typedef float (*attn__f16_absmax_fn)(const float *x, int64_t n);
/* Stages part of a row: dst[k] = half(x[k] / s) in both halves for k < n, 0 for n <= k < np
 * (s a power of two, from attn__f16_pow2_scale of the row's absmax). */
typedef void (*attn__f16_stage_fn)(const float *x, int64_t n, float s, uint32_t *dst,
                                   int64_t np);

typedef struct attn__f16_kernel {
    const char *name;
    attn__f16_ukr_fn ukr;
    attn__f16_absmax_fn absmax;
    attn__f16_stage_fn stage;
} attn__f16_kernel;

ATTN__HIDDEN const attn__f16_kernel *attn__f16_kernel_ref(void);
/* NULL when the build could not compile the AVX512_FP16 kernel. */
ATTN__HIDDEN const attn__f16_kernel *attn__f16_kernel_avx512(void);

/* y[M, N] (row stride ldy) = x[M, K] Wp^T + b[N] (+ r[M, N], row stride ldr), then with gelu
 * y = attn__gelu_as(y) (the GELU of ew.h, in the epilogue: no extra pass), Wp packed by
 * attn__f16_pack_weight(W, K, N).  b and r may be NULL; neither x nor r may overlap y.  rows
 * (may be NULL) passes the row maxima of x when the producer of x has them (saves a pass over
 * x) and asks for those of y (for the next fp16 GEMM).  Same bits for every thread count;
 * fails only when the workspace runs out. */
typedef struct attn__f16_rows {
    const float *xmax; /* [M] max_k |x[m, k]| (NaN if any is NaN), or NULL: computed here */
    float *ymax;       /* [M] receives max_n |y[m, n]| (NaN if any is NaN), or NULL */
    /* Optional row epilogue (kernels.h): run on each micro-panel of y's rows as soon as it is
     * complete, while it is in cache (a layer norm, say: the same bits as a pass afterwards).
     * With it, ymax is not written: the epilogue, which sees the final rows, may produce
     * their maxima itself (add_ln's amax does, at no cost). */
    const attn__row_epi *epi;
} attn__f16_rows;
ATTN__HIDDEN attn_status attn__linear_f16(attn_ctx *ctx, const float *x, int64_t ldx,
                                          const void *Wp, const float *b, const float *r,
                                          int64_t ldr, int gelu, float *y, int64_t ldy,
                                          int64_t M, int64_t K, int64_t N,
                                          const attn__f16_rows *rows);
ATTN__HIDDEN attn_status attn__linear_f16_k(attn_ctx *ctx, const attn__f16_kernel *k,
                                            const float *x, int64_t ldx, const void *Wp,
                                            const float *b, const float *r, int64_t ldr,
                                            int gelu, float *y, int64_t ldy, int64_t M,
                                            int64_t K, int64_t N, const attn__f16_rows *rows);

#endif
