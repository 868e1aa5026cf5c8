/* Run-time choice of the kernels (BLIS cntx_init style).  Each instruction set provides one
 * table per kernel family (gemm.h, flash.h, decode.h, ew.h, gemm_bf16.h, gemm_f16.h, quant.h,
 * the dropout stream of kernels.h); the plain C tables (src/kernels/ref and the families' own
 * files) are always there, as the fallback and the oracle.  attn_ctx_create chooses, once, the
 * tables of the best set that the CPU and the OS support (src/core/cpu.h) and stores them in
 * ctx->kern (internal.h attn__kernels); every call site reads them from there.
 *
 * The environment, read once at attn_ctx_create (ctx->env) and never per call:
 *   ATTN_ISA=ref|avx2|avx512|neon  caps the set: the named one where the machine runs it, else
 *                             the best one below it in that order (so ATTN_ISA=ref gives plain C
 *                             everywhere; the x86 names on ARM and neon on x86 give the best
 *                             set there, ref or the x86 ones; any other value: no cap);
 *   ATTN_BF16=0               the plain C bf16 kernels instead of the AVX512_BF16 ones;
 *   ATTN_BF16=dot             bf16 attention multiplies with the bf16 dot-product kernels (the
 *                             AVX512_BF16 ones) instead of widening to fp32 (flash.h), as it
 *                             does by default on AMD (attn__bf16_attention_pick);
 *   ATTN_F16=0                the plain C fp16 linear kernel instead of the AVX512_FP16 one;
 *   ATTN_DECODE=0             attn__sdpa never takes the split-KV decode path (decode.h);
 *   ATTN_AMX=0                the bf16-operand GEMM (gemm_mixed.h) uses VDPBF16PS, not AMX.
 * Tests force a set on one context with attn__isa_set instead.  docs/kernels.md tells the same.
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
    ATTN__ISA_AVX512 = 2, /* AVX-512F and DQ, with AVX2 + FMA (x86_avx512/) */
    ATTN__ISA_NEON = 3,   /* AArch64 Advanced SIMD (arm_neon/; SDOT kernels in arm_dotprod/) */
    ATTN__ISA_COUNT = 4,
    ATTN__ISA_DEFAULT = -1 /* attn__isa_set: the set the context was created with */
};

/* "ref", "avx2", "avx512", "neon" (or "?"). */
ATTN__HIDDEN const char *attn__isa_name(int isa);
/* 1 when the set is compiled in and a CPU with the features cpu (ATTN__CPU_* bits) can run
 * it: AVX2 needs ATTN__CPU_AVX2, AVX-512 needs ATTN__CPU_AVX2, ATTN__CPU_AVX512F and
 * ATTN__CPU_AVX512DQ (every AVX-512 CPU but the Xeon Phi: they take AVX2), NEON
 * needs ATTN__CPU_NEON (and an AArch64 build). */
ATTN__HIDDEN int attn__isa_runs(int isa, unsigned cpu);
/* attn__isa_runs on this machine. */
ATTN__HIDDEN int attn__isa_supported(int isa);
/* The best set that runs on cpu, at most cap (an ATTN__ISA_*, or -1 for no cap). */
ATTN__HIDDEN int attn__isa_best(unsigned cpu, int cap);
/* Parses the ATTN_* variables above (getenv) into *env. */
ATTN__HIDDEN void attn__kernel_env_read(attn__kernel_env *env);
/* Fills *k with the tables of set isa for a CPU with the features cpu, under env.  A pure
 * function (tests give it made-up CPUs): a family the set lacks, or an isa not compiled in,
 * gets the plain C table.  The bf16 kernels need AVX512_BF16 with AVX512BW/DQ/VL and the fp16
 * one AVX512_FP16 with AVX512BW/DQ/VL, both on the AVX-512 set only; the int8 quantized
 * kernels AVX512_VNNI with AVX512BW/DQ/VL (AVX-512 set) or AVX-VNNI (AVX2 or AVX-512 set), else
 * VPMADDUBSW + VPMADDWD on either set. */
ATTN__HIDDEN void attn__kernels_select(attn__kernels *k, int isa, unsigned cpu,
                                       const attn__kernel_env *env);
/* Forces set isa on ctx (ATTN__ISA_DEFAULT: the one attn_ctx_create chose), its tables chosen
 * under ctx->env; returns 0 (ctx unchanged) when this machine cannot run it.  For tests and
 * benchmarks, on a context that no other thread uses meanwhile. */
ATTN__HIDDEN int attn__isa_set(attn_ctx *ctx, int isa);
/* The precision ATTN_CTX_AUTO_MATMUL gives a context with the kernels k on the CPU id: 1 for
 * bf16 products (ATTN_CTX_BF16_MATMUL), 0 for float.  A fixed table of measured facts, so that
 * one machine always makes the same choice (docs/kernels.md, "Precision per CPU"):
 *   AMX-BF16 tiles (Intel Sapphire Rapids and later)      bf16
 *   VDPBF16PS on AMD (Zen 4, Zen 5)                        bf16  (Zen 4: 1.74x float's step)
 *   VDPBF16PS on Intel without AMX (Cooper/Emerald Rapids) float (bf16 step 2.6x slower)
 *   no bf16 instructions (AVX2, plain C)                   float (plain C bf16: 7.9x slower)
 * *why (may be NULL) receives a static sentence saying which row applied. */
ATTN__HIDDEN int attn__auto_bf16(const attn__kernels *k, const char *vendor, const char **why);
/* bf16 attention (q, k, v stored as bf16) where attn__auto_bf16 picks bf16 products for
 * VDPBF16PS (AMD Zen 4/5: twice an FMA's work per instruction): with the default ATTN_BF16,
 * it multiplies with the AVX512_BF16 dot kernels instead of widening to fp32 as
 * attn__kernels_select chose (Zen 4, L = S = 4096: 1.6x the widened forward).  Elsewhere *k
 * stays as it is: AMX tiles, widened where VDPBF16PS runs at a quarter of the FMA rate (Intel
 * without AMX), plain C bf16 or ATTN_BF16=0|dot as asked.  attn_ctx_create and attn__isa_set
 * call it after attn__kernels_select with this CPU's vendor. */
ATTN__HIDDEN void attn__bf16_attention_pick(attn__kernels *k, const char *vendor,
                                            const attn__kernel_env *env);
/* The quantized kernels for this CPU where its microarchitecture makes another set's kernel
 * faster: on AMD Zen 4 (family 25 with AVX-512, whose 512-bit operations run as two 256-bit
 * halves) the AVX-512 set's table becomes attn__quant_kernels_avx512_zen4 (Q6_K on the 256-bit
 * kernel: 1.15x).  Measured facts, not a probe: one machine always makes the same choice.
 * attn_ctx_create and attn__isa_set call it after attn__kernels_select. */
ATTN__HIDDEN void attn__quant_pick(attn__kernels *k, const char *vendor, unsigned family);
/* 1 when src/kernels/x86_avx512bf16 was compiled with the bf16 instructions. */
ATTN__HIDDEN int attn__bf16_kernels_built(void);

#endif
