/* CPU feature detection and the choice of kernel set (see dispatch.h).  No global state: the
 * choice is made at attn_ctx_create and kept in the context. */
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#define ATTN__X86 1

static uint64_t attn__xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* CPU support from CPUID, OS support (the register state is saved on context switch) from
 * XCR0: bits 1-2 (SSE, AVX) for AVX2, plus 5-7 (opmask, ZMM0-15 high, ZMM16-31) for AVX-512. */
static int attn__x86_has(int isa) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    if (!osxsave || !avx || !fma) return 0;
    uint64_t xcr0 = attn__xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return 0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1;
    if (isa == ATTN__ISA_AVX2) return avx2;
    if (isa == ATTN__ISA_AVX512) return avx2 && avx512f && (xcr0 & 0xe6) == 0xe6;
    return 0;
}

#endif

unsigned attn__cpu_extensions(void) {
    unsigned bits = 0;
#ifdef ATTN__X86
    unsigned a, b, c, d;
    if (!attn__x86_has(ATTN__ISA_AVX512) || __get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 1, a, b, c, d);
    if ((a >> 5) & 1) bits |= ATTN__CPU_BF16;
    __cpuid_count(7, 0, a, b, c, d);
    if (((d >> 23) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1)) bits |= ATTN__CPU_F16;
#endif
    return bits;
}

int attn__has_bf16(const attn_ctx *ctx) {
    if (ctx->isa != ATTN__ISA_AVX512 || !(ctx->cpu & ATTN__CPU_BF16) ||
        !attn__bf16_kernels_built())
        return 0;
    const char *env = getenv("ATTN_BF16");
    return !(env && strcmp(env, "0") == 0);
}

static const attn__gemm_kernel *attn__table(int isa) {
    switch (isa) {
    case ATTN__ISA_REF: return attn__gemm_kernel_ref();
    case ATTN__ISA_AVX2: return attn__gemm_kernel_avx2();
    case ATTN__ISA_AVX512: return attn__gemm_kernel_avx512();
    default: return NULL;
    }
}

int attn__isa_supported(int isa) {
    if (!attn__table(isa)) return 0;
    if (isa == ATTN__ISA_REF) return 1;
#ifdef ATTN__X86
    return attn__x86_has(isa);
#else
    return 0;
#endif
}

const char *attn__isa_name(int isa) {
    switch (isa) {
    case ATTN__ISA_REF: return "ref";
    case ATTN__ISA_AVX2: return "avx2";
    case ATTN__ISA_AVX512: return "avx512";
    default: return "?";
    }
}

/* ATTN_ISA=ref|avx2|avx512 caps the set chosen for new contexts (testing, benchmarks). */
int attn__isa_default(void) {
    int cap = ATTN__ISA_COUNT - 1;
    const char *env = getenv("ATTN_ISA");
    if (env && *env) {
        for (int i = 0; i < ATTN__ISA_COUNT; i++)
            if (strcmp(env, attn__isa_name(i)) == 0) cap = i;
    }
    for (int i = cap; i > ATTN__ISA_REF; i--)
        if (attn__isa_supported(i)) return i;
    return ATTN__ISA_REF;
}

int attn__isa_set(attn_ctx *ctx, int isa) {
    if (!attn__isa_supported(isa)) return 0;
    ctx->isa = isa;
    return 1;
}

const attn__gemm_kernel *attn__gemm_kernel_for(const attn_ctx *ctx) {
    const attn__gemm_kernel *k = attn__table(ctx->isa);
    return k ? k : attn__gemm_kernel_ref();
}
