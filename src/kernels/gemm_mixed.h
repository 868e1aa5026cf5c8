/* Mixed-precision GEMM: C[M, N] (+)= op(A) op(B) with A, B and C in float, the operands
 * rounded to bfloat16 (nearest even, subnormals to zero) while being packed, every product
 * exact in float and the sums in float.  It serves the linear layers of a context created
 * with ATTN_CTX_BF16_MATMUL (src/kernels/linear.c): the role torch.autocast(bfloat16) gives
 * nn.Linear, with activations and gradients kept in float between the products.
 *
 * Kernels (one table per instruction set, chosen once per context in dispatch.c):
 *   amx     AMX-BF16 tile multiplies (TDPBF16PS), 32 x 32 tiles   x86_amx/gemm_amx.c
 *   avx512  AVX512_BF16 dot products (VDPBF16PS), 14 x 32 tiles   x86_avx512bf16/
 *   ref     plain C (the fallback and the oracle)                 gemm_mixed.c
 * They differ in the order in which each product pair enters the float sum (and AMX in its
 * internal precision), so results may differ in the last bits between kernels; within one
 * kernel every result is the same for every thread count.  Error (any kernel): rounding each
 * operand costs a product at most 2^-7 + 2^-16 relative, so
 *     |C - C_exact| <= (2^-7 + 2^-16 + (K + 2) 2^-24) sum_k |op(A)_ik op(B)_kj|   (+ |beta C|)
 * and typically ~2^-9 sqrt(K) max|a b|.
 *
 * Driver (gemm_mixed.c).  op(A) is packed once into row panels of mr rows by K' = K rounded up
 * to 32 (zeros beyond), op(B) once into column panels of nr columns by K' laid out as pairs:
 * element ((q * nr + j) * 2 + t) of a panel is op(B)[2q + t, j].  Both come from the
 * workspace (half the size of the float operands).  Then, one block of B panels at a time
 * (sized for L2), threads split the A panels and the microkernel computes each mr x nr tile of
 * C over the whole K' in one call, or in slices of K' (kc below; the float sums go through C
 * between slices, exactly, so the bits are the same): the same operations for a tile whoever
 * computes it.  A row epilogue runs on each row panel right after its tiles of the last block
 * (or, where the threads split that block's columns, in a pass of its own). */
#ifndef ATTN_GEMM_MIXED_H
#define ATTN_GEMM_MIXED_H
#include "bf16.h"
#include "kernels.h"

#define ATTN__MIXED_KALIGN 32 /* K' is a multiple of this (an AMX tile row: 32 bf16) */

/* ---- microkernel contract ----------------------------------------------------------------
 * c[mr, nr] (row stride ldc) = (acc ? c : 0) + sum_{q < kh} sum_t a[i, 2q+t] b[q, j, t]
 *   a: a packed A panel, mr rows of lda bf16 (lda >= 2 kh),
 *   b: a packed B panel, kh steps of nr pairs,
 *   kh a multiple of ATTN__MIXED_KALIGN / 2.  Always the full tile (the driver routes edge
 *   tiles through a scratch tile). */
typedef void (*attn__mixed_ukr_fn)(int64_t kh, const attn__bf16 *a, int64_t lda,
                                   const attn__bf16 *b, float *c, int64_t ldc, int acc);

/* Packing (NULL hooks: the plain C versions), rounding as attn__f32_to_bf16_daz.
 * pack_a: rows [0, mv) of op(A) into dst (rows of lda bf16, values k < K, zeros in [K, kp));
 *         trans: op(A)[i, k] = src[k * ld + i], else src[i * ld + k]; rows mv..mr-1 zero
 *         (mr here: the rows to fill, a whole number of panels; the driver packs several
 *         panels per call so that a transposed source is read in long row segments).
 *         sum: NULL, or (trans only) sum[i] += op(A)[i, k] for k = 0 .. K-1 in that order,
 *         float adds of the unrounded values, rows i < mv: a bias gradient's column sums
 *         while dy is read anyway, with the bits of attn__colsum_c.
 * pack_b: columns [0, nv) of op(B) into ceil(nv / nr) consecutive panels (each kp / 2 steps
 *         of nr pairs, zeros beyond nv and K); trans: op(B)[k, j] = src[j * ld + k], else
 *         src[k * ld + j] (read row by row across all the panels of the call). */
typedef void (*attn__mixed_pack_a_fn)(int trans, const float *src, int64_t ld, int64_t mv,
                                      int mr, int64_t K, int64_t kp, attn__bf16 *dst,
                                      int64_t lda, float *sum);
typedef void (*attn__mixed_pack_b_fn)(int trans, const float *src, int64_t ld, int64_t nv,
                                      int nr, int64_t K, int64_t kp, attn__bf16 *dst);

typedef struct attn__mixed_kernel {
    const char *name;
    int mr, nr;           /* register/tile block, <= 32 x 32 */
    size_t block_bytes;   /* packed B per block (what should stay in L2) */
    attn__mixed_ukr_fn ukr;
    void (*begin)(void);  /* per thread, before its first tile of a call (AMX: tile config) */
    void (*end)(void);    /* per thread, after its last tile (AMX: release the tiles) */
    attn__mixed_pack_a_fn pack_a; /* or NULL */
    attn__mixed_pack_b_fn pack_b; /* or NULL */
    /* K slicing: when K' <= kc_upto, each tile of C is computed in slices of about kc of K'
     * (the row panel's slice stays in L1 across the block's B panels; C is reloaded between
     * slices, exactly: the sums stay in float).  0: the whole K' in one call. */
    int64_t kc, kc_upto;
} attn__mixed_kernel;

ATTN__HIDDEN const attn__mixed_kernel *attn__mixed_kernel_ref(void);
/* The plain C packing (what a NULL pack_a / pack_b hook means). */
ATTN__HIDDEN void attn__mixed_pack_a_c(int trans, const float *src, int64_t ld, int64_t mv, int mr,
                                       int64_t K, int64_t kp, attn__bf16 *dst, int64_t lda,
                                       float *sum);
ATTN__HIDDEN void attn__mixed_pack_b_c(int trans, const float *src, int64_t ld, int64_t nv, int nr,
                                       int64_t K, int64_t kp, attn__bf16 *dst);
/* The AVX512_BF16 packing (x86_avx512bf16/gemm_mixed_avx512.c), shared with the AMX table;
 * where that file is built without the bf16 instructions, they are the plain C packing. */
ATTN__HIDDEN void attn__mixed_pack_a_avx512(int trans, const float *src, int64_t ld, int64_t mv,
                                            int mr, int64_t K, int64_t kp, attn__bf16 *dst,
                                            int64_t lda, float *sum);
ATTN__HIDDEN void attn__mixed_pack_b_avx512(int trans, const float *src, int64_t ld, int64_t nv,
                                            int nr, int64_t K, int64_t kp, attn__bf16 *dst);
/* NULL when the build could not compile them; the caller checks the CPU. */
ATTN__HIDDEN const attn__mixed_kernel *attn__mixed_kernel_avx512(void);
ATTN__HIDDEN const attn__mixed_kernel *attn__mixed_kernel_amx(void);

/* C[M, N] = op(A) op(B) + beta C (beta 0 or 1; 0 never reads C), then epi (may be NULL) on
 * the rows of C, on the context's mixed kernel (ctx->kern.mixed).  Same operand conventions
 * as attn__gemm (kernels.h).  Fails only when the workspace runs out. */
ATTN__HIDDEN attn_status attn__gemm_mixed(attn_ctx *ctx, int transA, int transB, int64_t M,
                                          int64_t N, int64_t K, const float *A, int64_t lda,
                                          const float *B, int64_t ldb, float beta, float *C,
                                          int64_t ldc, const attn__row_epi *epi);
/* The same, also adding the row sums of op(A) = A^T into suma (transA must be 1; suma[i] +=
 * A[k, i] over k in order, the float values: the bits of attn__colsum_c), read while A is
 * packed: the bias gradient of a linear backward without another pass over dy. */
ATTN__HIDDEN attn_status attn__gemm_mixed_suma(attn_ctx *ctx, int64_t M, int64_t N, int64_t K,
                                               const float *A, int64_t lda, int transB,
                                               const float *B, int64_t ldb, float beta,
                                               float *C, int64_t ldc, float *suma);
/* attn__gemm_mixed with an explicit kernel (tests); suma as attn__gemm_mixed_suma (or NULL). */
ATTN__HIDDEN attn_status attn__gemm_mixed_k(attn_ctx *ctx, const attn__mixed_kernel *k,
                                            int transA, int transB, int64_t M, int64_t N,
                                            int64_t K, const float *A, int64_t lda,
                                            const float *B, int64_t ldb, float beta, float *C,
                                            int64_t ldc, const attn__row_epi *epi, float *suma);

#endif
