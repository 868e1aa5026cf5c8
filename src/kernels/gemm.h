/* The GEMM microkernel contract (BLIS style): one table per kernel set, the plain C one in
 * src/kernels/ref/gemm_ref.c (the definition and the oracle), the SIMD ones in
 * x86_avx2/gemm_avx2.c and x86_avx512/gemm_avx512.c.  The driver around them (blocking,
 * packing, threads) is attn__gemm in gemm.c (contract in kernels.h); a context calls the table
 * in ctx->kern.gemm (dispatch.h). */
#ifndef ATTN_GEMM_H
#define ATTN_GEMM_H
#include "dispatch.h"

/* ---- GEMM microkernel contract ---------------------------------------------------------
 * c[mr, nr] (row stride ldc) = alpha * sum_{k < kc} a[k*mr + i] * b[k*nr + j] + beta * c.
 * a is a packed A micro-panel (kc columns of mr values), b a packed B micro-panel (kc rows of
 * nr values; the driver aligns it to 64 bytes, kernels must not rely on it).  Always the full
 * mr x nr tile: the driver (gemm.c) routes edge tiles through a scratch tile so that edges
 * round exactly like interior tiles.  beta == 0 never reads c.  kc >= 1. */
typedef void (*attn__gemm_ukr_fn)(int64_t kc, const float *a, const float *b, float *c,
                                  int64_t ldc, float alpha, float beta);
/* The same, and meanwhile fetches toward the cache, a line every few k steps, rows [0, rows)
 * of n floats (row stride ld) from pf: the source of the next A micro-panel, whose first touch
 * would otherwise wait on memory while packing.  A hint: no effect on results. */
typedef void (*attn__gemm_ukr_pf_fn)(int64_t kc, const float *a, const float *b, float *c,
                                     int64_t ldc, float alpha, float beta, const float *pf,
                                     int64_t rows, int64_t ld, int64_t n);

/* Packing of one micro-panel of width w (mr for A, nr for B): kc steps of w values,
 *   contig:  dst[k*w + i] = src[k*ld + i]   (the panel's w values are contiguous in memory)
 *   else:    dst[k*w + i] = src[i*ld + k]   (the panel's K values are; a transposing copy)
 * for i < nv (nv <= w), and 0 for nv <= i < w.  Reads nothing outside those elements.
 * Packing only copies, so it never changes results; NULL hooks use the plain C version. */
typedef void (*attn__gemm_pack_fn)(int contig, int64_t kc, const float *src, int64_t ld,
                                   int64_t nv, float *dst);

#define ATTN__GEMM_MR_MAX 16
#define ATTN__GEMM_NR_MAX 64

typedef struct attn__gemm_kernel {
    int isa;
    int mr, nr; /* register tile, <= ATTN__GEMM_MR_MAX / NR_MAX */
    int kc;     /* K chunk: the K loop runs in chunks of kc, in order (fixed per set) */
    int nc;     /* N block (a multiple of nr): a packed kc x nc block of B stays in L2 (a
                 * 1.5 MB block in a 2 MB L2 ran the microkernel 10-20% slower than 0.8-1.2 MB:
                 * docs/kernels.md) */
    attn__gemm_ukr_fn ukr;
    attn__gemm_pack_fn pack_a; /* w = mr, or NULL */
    attn__gemm_pack_fn pack_b; /* w = nr, or NULL */
    attn__gemm_ukr_pf_fn ukr_pf; /* or NULL */
} attn__gemm_kernel;

/* Packs one micro-panel (a: of A, width mr; else of B, width nr) as the driver does: the
 * table's hook, or the plain C packing where it has none (contract above; gemm.c).  For
 * drivers that feed the microkernel themselves (quant.c). */
ATTN__HIDDEN void attn__gemm_pack_panel(const attn__gemm_kernel *kr, int a, int contig,
                                        int64_t kc, const float *src, int64_t ld, int64_t nv,
                                        float *dst);

/* One table per set; the ISA ones return NULL when the build could not compile them. */
ATTN__HIDDEN const attn__gemm_kernel *attn__gemm_kernel_ref(void);
ATTN__HIDDEN const attn__gemm_kernel *attn__gemm_kernel_avx2(void);
ATTN__HIDDEN const attn__gemm_kernel *attn__gemm_kernel_avx512(void);
ATTN__HIDDEN const attn__gemm_kernel *attn__gemm_kernel_neon(void);

#endif
