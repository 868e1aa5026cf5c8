/* Run-time choice of the ISA-specific kernels (BLIS cntx_init style): each instruction set
 * provides one table, src/kernels/dispatch.c picks the best one the CPU and the OS support when
 * a context is created (stored in ctx->isa), and the plain C table (src/kernels/ref) is always
 * there as the fallback and the oracle.
 *
 * ATTN_ISA=ref|avx2|avx512 in the environment, read at attn_ctx_create, caps the choice (for
 * testing and benchmarking): the named set is used if the machine supports it, else the best
 * supported set below it.  Tests force a set on one context with attn__isa_set instead.
 *
 * Rounding.  Each set rounds differently (the ref kernel multiplies then adds; the AVX2 and
 * AVX-512 kernels use fused multiply-add and different K blocking), so results may differ in
 * the last bits between sets.  Within one set every result is deterministic and bit-identical
 * for every thread count. */
#ifndef ATTN_DISPATCH_H
#define ATTN_DISPATCH_H
#include "internal.h"

enum {
    ATTN__ISA_REF = 0,    /* plain C */
    ATTN__ISA_AVX2 = 1,   /* AVX2 + FMA (x86_avx2/) */
    ATTN__ISA_AVX512 = 2, /* AVX-512F (x86_avx512/) */
    ATTN__ISA_COUNT = 3
};

/* ---- GEMM microkernel contract ---------------------------------------------------------
 * c[mr, nr] (row stride ldc) = alpha * sum_{k < kc} a[k*mr + i] * b[k*nr + j] + beta * c.
 * a is a packed A micro-panel (kc columns of mr values), b a packed B micro-panel (kc rows of
 * nr values; the driver aligns it to 64 bytes, kernels must not rely on it).  Always the full mr x nr tile: the driver (gemm.c) routes edge
 * tiles through a scratch tile so that edges round exactly like interior tiles.  beta == 0 never
 * reads c.  kc >= 1. */
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
    int nc;     /* N block (a multiple of nr): a packed kc x nc block of B stays in L2 */
    attn__gemm_ukr_fn ukr;
    attn__gemm_pack_fn pack_a; /* w = mr, or NULL */
    attn__gemm_pack_fn pack_b; /* w = nr, or NULL */
    attn__gemm_ukr_pf_fn ukr_pf; /* or NULL */
} attn__gemm_kernel;

/* One table per set; the ISA ones return NULL when the build could not compile them. */
ATTN__HIDDEN const attn__gemm_kernel *attn__gemm_kernel_ref(void);
ATTN__HIDDEN const attn__gemm_kernel *attn__gemm_kernel_avx2(void);
ATTN__HIDDEN const attn__gemm_kernel *attn__gemm_kernel_avx512(void);

/* 1 when the set is compiled in and this CPU and OS can run it. */
ATTN__HIDDEN int attn__isa_supported(int isa);
/* The best supported set, capped by ATTN_ISA. */
ATTN__HIDDEN int attn__isa_default(void);
/* Forces a set on ctx; returns 0 (ctx unchanged) when it is not supported. */
ATTN__HIDDEN int attn__isa_set(attn_ctx *ctx, int isa);
/* "ref", "avx2", "avx512" (or "?"). */
ATTN__HIDDEN const char *attn__isa_name(int isa);
/* 1 when ctx->isa is AVX-512 and the CPU (CPUID.(7,1):EAX bit 5) has the AVX512_BF16
 * dot-product instructions and the build compiled the kernels of src/kernels/x86_avx512bf16.
 * Environment ATTN_BF16=0 turns it off (tests of the plain C bf16 path). */
ATTN__HIDDEN int attn__has_bf16(const attn_ctx *ctx);
/* 1 when src/kernels/x86_avx512bf16 was compiled with the bf16 instructions. */
ATTN__HIDDEN int attn__bf16_kernels_built(void);
/* The table of ctx->isa (the ref table if that set is unavailable). */
ATTN__HIDDEN const attn__gemm_kernel *attn__gemm_kernel_for(const attn_ctx *ctx);

#endif
