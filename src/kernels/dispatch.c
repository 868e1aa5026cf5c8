/* The choice of kernel set (see dispatch.h) from the CPU features (src/core/cpu.h).  The
 * choice is made at attn_ctx_create and kept in the context. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "dispatch.h"

int attn__has_bf16(const attn_ctx *ctx) {
    if (ctx->isa != ATTN__ISA_AVX512 || !(attn__cpu_features() & ATTN__CPU_AVX512_BF16) ||
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
    unsigned cpu = attn__cpu_features();
    switch (isa) {
    case ATTN__ISA_REF: return 1;
    case ATTN__ISA_AVX2: return (cpu & ATTN__CPU_AVX2) != 0;
    case ATTN__ISA_AVX512: return (cpu & ATTN__CPU_AVX2) && (cpu & ATTN__CPU_AVX512F);
    default: return 0;
    }
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

void attn__kernels_init(attn_ctx *ctx) { ctx->isa = attn__isa_default(); }

int attn__isa_set(attn_ctx *ctx, int isa) {
    if (!attn__isa_supported(isa)) return 0;
    ctx->isa = isa;
    return 1;
}

const attn__gemm_kernel *attn__gemm_kernel_for(const attn_ctx *ctx) {
    const attn__gemm_kernel *k = attn__table(ctx->isa);
    return k ? k : attn__gemm_kernel_ref();
}
