/* The choice of a context's kernels (dispatch.h) from the CPU features (src/core/cpu.h) and
 * the ATTN_* environment, made at attn_ctx_create and kept in the context. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "decode.h"
#include "dispatch.h"
#include "ew.h"
#include "flash.h"
#include "gemm.h"
#include "gemm_bf16.h"
#include "gemm_f16.h"
#include "gemm_mixed.h"
#include "kernels.h"
#include "quant.h"

const char *attn__isa_name(int isa) {
    switch (isa) {
    case ATTN__ISA_REF: return "ref";
    case ATTN__ISA_AVX2: return "avx2";
    case ATTN__ISA_AVX512: return "avx512";
    case ATTN__ISA_NEON: return "neon";
    default: return "?";
    }
}

/* The GEMM table of a set: NULL when the build could not compile it. */
static const attn__gemm_kernel *gemm_table(int isa) {
    switch (isa) {
    case ATTN__ISA_REF: return attn__gemm_kernel_ref();
    case ATTN__ISA_AVX2: return attn__gemm_kernel_avx2();
    case ATTN__ISA_AVX512: return attn__gemm_kernel_avx512();
    case ATTN__ISA_NEON: return attn__gemm_kernel_neon();
    default: return NULL;
    }
}

int attn__isa_runs(int isa, unsigned cpu) {
    if (!gemm_table(isa)) return 0;
    switch (isa) {
    case ATTN__ISA_REF: return 1;
    case ATTN__ISA_AVX2: return (cpu & ATTN__CPU_AVX2) != 0;
    case ATTN__ISA_AVX512:
        return (cpu & ATTN__CPU_AVX2) && (cpu & ATTN__CPU_AVX512F) && (cpu & ATTN__CPU_AVX512DQ);
    case ATTN__ISA_NEON: return (cpu & ATTN__CPU_NEON) != 0;
    default: return 0;
    }
}

int attn__isa_supported(int isa) { return attn__isa_runs(isa, attn__cpu_features()); }

int attn__isa_best(unsigned cpu, int cap) {
    int top = cap >= 0 && cap < ATTN__ISA_COUNT ? cap : ATTN__ISA_COUNT - 1;
    for (int i = top; i > ATTN__ISA_REF; i--)
        if (attn__isa_runs(i, cpu)) return i;
    return ATTN__ISA_REF;
}

static int env_is(const char *name, const char *value) {
    const char *s = getenv(name);
    return s && strcmp(s, value) == 0;
}

void attn__kernel_env_read(attn__kernel_env *env) {
    const char *isa = getenv("ATTN_ISA");
    env->isa = -1;
    for (int i = 0; isa && i < ATTN__ISA_COUNT; i++)
        if (strcmp(isa, attn__isa_name(i)) == 0) env->isa = i;
    env->bf16 = env_is("ATTN_BF16", "0") ? 0 : env_is("ATTN_BF16", "dot") ? 2 : 1;
    env->f16 = !env_is("ATTN_F16", "0");
    env->decode = !env_is("ATTN_DECODE", "0");
    env->amx = !env_is("ATTN_AMX", "0");
}

void attn__kernels_select(attn__kernels *k, int isa, unsigned cpu, const attn__kernel_env *env) {
    const unsigned wide = ATTN__CPU_AVX512BW | ATTN__CPU_AVX512DQ | ATTN__CPU_AVX512VL,
                   bf16 = wide | ATTN__CPU_AVX512_BF16, f16 = wide | ATTN__CPU_AVX512_FP16;
    memset(k, 0, sizeof *k);
    k->isa = gemm_table(isa) ? isa : ATTN__ISA_REF;
    const int x512 = k->isa == ATTN__ISA_AVX512, x2 = k->isa == ATTN__ISA_AVX2;
    const int neon = k->isa == ATTN__ISA_NEON;
    k->gemm = gemm_table(k->isa);
    k->flash = x512   ? attn__flash_kernels_avx512()
               : x2   ? attn__flash_kernels_avx2()
               : neon ? attn__flash_kernels_neon()
                      : NULL;
    if (!k->flash) k->flash = attn__flash_kernels_ref();
    k->decode = x512   ? attn__decode_kernels_avx512()
                : x2   ? attn__decode_kernels_avx2()
                : neon ? attn__decode_kernels_neon()
                       : NULL;
    if (!k->decode) k->decode = attn__decode_kernels_ref();
    k->decode_on = env->decode != 0;
    k->ew = x512                       ? attn__ew_kernel_avx512()
            : x2                       ? attn__ew_kernel_avx2()
            : k->isa == ATTN__ISA_NEON ? attn__ew_kernel_neon()
                                       : NULL;
    if (!k->ew) k->ew = attn__ew_kernel_ref();
    /* bf16: the AVX512_BF16 kernels, unless ATTN_BF16=0; bf16 attention widens to fp32 on the
     * SIMD sets unless ATTN_BF16=dot (and the dot kernels are the AVX512_BF16 ones) */
    k->has_bf16 = x512 && (cpu & bf16) == bf16 && attn__bf16_kernels_built() && env->bf16 != 0;
    k->gemm_bf16 = k->has_bf16 ? attn__bf16_kernel_avx512() : NULL;
    if (!k->gemm_bf16) k->gemm_bf16 = attn__bf16_kernel_ref();
    /* AMX tiles where the CPU has them and the OS granted them (the caller clears the AMX
     * bits otherwise), unless ATTN_AMX=0 */
    const unsigned amx = ATTN__CPU_AMX_TILE | ATTN__CPU_AMX_BF16;
    const int tiles = k->has_bf16 && (cpu & amx) == amx && env->amx;
    /* bf16 attention: on AMX tiles (unless ATTN_BF16=dot asks for VDPBF16PS); else widened to
     * the fp32 kernels, or with ATTN_BF16=dot on VDPBF16PS (and by default on AMD:
     * attn__bf16_attention_pick, which knows the vendor) */
    const attn__flash_bf16_kernels *fb = k->has_bf16 ? attn__flash_bf16_kernels_avx512() : NULL;
    if (tiles && env->bf16 != 2 && attn__flash_bf16_kernels_amx())
        fb = attn__flash_bf16_kernels_amx();
    k->flash_bf16 = fb ? fb : attn__flash_bf16_kernels_ref();
    k->flash_bf16_widen = k->isa != ATTN__ISA_REF && !(fb && (env->bf16 == 2 || fb->tiles));
    k->has_f16 = x512 && (cpu & f16) == f16 && attn__f16_kernel_avx512() && env->f16 != 0;
    k->gemm_f16 = k->has_f16 ? attn__f16_kernel_avx512() : attn__f16_kernel_ref();
    /* bf16-operand GEMM (ATTN_CTX_BF16_MATMUL): AMX tiles, else VDPBF16PS, else plain C */
    k->mixed = tiles ? attn__mixed_kernel_amx() : NULL;
    if (!k->mixed && k->has_bf16) k->mixed = attn__mixed_kernel_avx512();
    if (!k->mixed) k->mixed = attn__mixed_kernel_ref();
    /* quantized weights (quant.h): float activations on the set's kernels (F16C comes with
     * AVX2, see cpu.h); int8 activations on VPDPBUSD: 512-bit where the CPU has AVX512_VNNI
     * with AVX512BW/DQ/VL (AVX-512 set), else 256-bit where it has AVX-VNNI (AVX2 or AVX-512
     * set), else 256-bit VPMADDUBSW + VPMADDWD on plain AVX2 (the same int32 lanes), else
     * the plain C int8 kernels */
    k->quant = x512 ? attn__quant_kernels_avx512()
               : x2 ? attn__quant_kernels_avx2()
               : neon ? attn__quant_kernels_neon()
                      : NULL;
    if (!k->quant) k->quant = attn__quant_kernels_ref();
    const unsigned vnni = wide | ATTN__CPU_AVX512_VNNI;
    k->quant8 = x512 && (cpu & vnni) == vnni ? attn__quant_kernels_vnni() : NULL;
    if (!k->quant8 && (x512 || x2) && (cpu & ATTN__CPU_AVX_VNNI))
        k->quant8 = attn__quant_kernels_avxvnni();
    if (!k->quant8 && (x512 || x2)) /* no VNNI: VPMADDUBSW + VPMADDWD, the same bits */
        k->quant8 = attn__quant_kernels_avx2_int8();
    /* ARM: SMMLA where the CPU has the int8 matrix multiplies, else SDOT where it has the
     * dot products (the plain C bits either way) */
    const unsigned i8mm = ATTN__CPU_DOTPROD | ATTN__CPU_I8MM;
    if (!k->quant8 && neon && (cpu & i8mm) == i8mm) k->quant8 = attn__quant_kernels_i8mm();
    if (!k->quant8 && neon && (cpu & ATTN__CPU_DOTPROD)) k->quant8 = attn__quant_kernels_dotprod();
    if (!k->quant8) k->quant8 = attn__quant_kernels_ref();
    /* int16 activations on 256-bit vectors for the AVX2 and AVX-512 sets (Zen 4 runs 512-bit
     * operations as two halves): VPDPWSSD where the CPU has AVX512_VNNI (with BW/DQ/VL, the
     * AVX-512 set) or AVX-VNNI, else VPMADDWD; the same bits.  None elsewhere (float then). */
    k->quant16 = x512 && (cpu & vnni) == vnni ? attn__quant_kernels_vnni_int16() : NULL;
    if (!k->quant16 && (x512 || x2) && (cpu & ATTN__CPU_AVX_VNNI))
        k->quant16 = attn__quant_kernels_avxvnni_int16();
    if (!k->quant16 && (x512 || x2)) k->quant16 = attn__quant_kernels_avx2_int16();
    /* prompts on int16 activations: the int16 GEMM of the int16 table's instructions, even
     * without VNNI: VPMADDWD and VPADDD keep the multiply pipes busy while the adds go to
     * others, 1.30-1.38x the float GEMM on Zen 4's AVX2 set (docs/kernels.md) */
    k->gemm16 = !k->quant16                                            ? NULL
                : k->quant16 == attn__quant_kernels_vnni_int16()       ? attn__gemm16_vnni()
                : k->quant16 == attn__quant_kernels_avxvnni_int16()    ? attn__gemm16_avxvnni()
                : k->quant16 == attn__quant_kernels_avx2_int16()       ? attn__gemm16_avx2()
                                                                       : NULL;
    /* the same bits either way: the instruction set only changes the speed */
    k->dropout_row = x512 ? attn__dropout_row_simd : attn__dropout_row_c;
    /* the finite checks' scan: a yes/no, the same answer in every version */
    k->nonfinite = x512 ? attn__nonfinite_avx512()
                   : x2 ? attn__nonfinite_avx2()
                   : neon ? attn__nonfinite_neon()
                          : NULL;
    if (!k->nonfinite) k->nonfinite = attn__nonfinite_c;
    /* cross-entropy rows: float exponentials on AVX-512 and NEON, else the double reference */
    k->ce_row = x512 ? attn__ce_row_avx512() : neon ? attn__ce_row_neon() : NULL;
    if (!k->ce_row) k->ce_row = attn__cross_entropy_row_ref;
}

int attn__auto_bf16(const attn__kernels *k, const char *vendor, const char **why) {
    const char *w;
    int bf16 = 0;
    if (k->mixed && k->mixed == attn__mixed_kernel_amx()) {
        w = "AMX-BF16 tiles multiply bf16 several times faster than FMA multiplies float";
        bf16 = 1;
    } else if (k->mixed && k->mixed == attn__mixed_kernel_avx512()) {
        if (vendor && strcmp(vendor, "AuthenticAMD") == 0) {
            w = "VDPBF16PS on AMD Zen 4/5 does twice the work of an FMA per instruction";
            bf16 = 1;
        } else {
            w = "VDPBF16PS without AMX on this vendor runs at a quarter of the FMA rate "
                "(Intel: bf16 steps measured 2.6x slower than float)";
        }
    } else {
        w = "no bf16 instructions in the chosen instruction set: bf16 products would run "
            "on plain C, several times slower than float";
    }
    if (why) *why = w;
    return bf16;
}

void attn__bf16_attention_pick(attn__kernels *k, const char *vendor,
                               const attn__kernel_env *env) {
    if (env->bf16 == 1 && k->flash_bf16_widen && k->has_bf16 &&
        k->mixed == attn__mixed_kernel_avx512() && attn__auto_bf16(k, vendor, NULL))
        k->flash_bf16_widen = 0; /* k->flash_bf16: the AVX512_BF16 dot kernels */
}

void attn__quant_pick(attn__kernels *k, const char *vendor, unsigned family) {
    if (k->quant && k->quant == attn__quant_kernels_avx512() && vendor &&
        strcmp(vendor, "AuthenticAMD") == 0 && family == 25 && attn__quant_kernels_avx512_zen4())
        k->quant = attn__quant_kernels_avx512_zen4();
}

/* The CPU features, less AMX where the OS does not grant the tile state. */
static unsigned usable_features(void) {
    unsigned cpu = attn__cpu_features();
    if (!attn__cpu_amx_request()) cpu &= ~(unsigned)(ATTN__CPU_AMX_TILE | ATTN__CPU_AMX_BF16);
    return cpu;
}

void attn__kernels_init(attn_ctx *ctx) {
    unsigned cpu = usable_features();
    attn__kernel_env_read(&ctx->env);
    attn__kernels_select(&ctx->kern, attn__isa_best(cpu, ctx->env.isa), cpu, &ctx->env);
    attn__bf16_attention_pick(&ctx->kern, attn__cpu_identity()->vendor, &ctx->env);
    attn__quant_pick(&ctx->kern, attn__cpu_identity()->vendor, attn__cpu_identity()->family);
    if ((ctx->flags & ATTN_CTX_AUTO_MATMUL) && !(ctx->flags & ATTN_CTX_BF16_MATMUL))
        attn_ctx_set_matmul(ctx, ATTN_CTX_AUTO_MATMUL); /* the precision of this CPU */
    ctx->flags &= ~(unsigned)ATTN_CTX_AUTO_MATMUL;
}

attn_status attn_ctx_set_matmul(attn_ctx *ctx, unsigned precision) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(precision != 0 && precision != ATTN_CTX_BF16_MATMUL &&
                     precision != ATTN_CTX_AUTO_MATMUL,
                 ctx, ATTN_E_INVALID,
                 "attn_ctx_set_matmul: precision 0x%x is none of 0 (float), "
                 "ATTN_CTX_BF16_MATMUL and ATTN_CTX_AUTO_MATMUL", precision);
    if (precision == ATTN_CTX_AUTO_MATMUL)
        precision = attn__auto_bf16(&ctx->kern, attn__cpu_identity()->vendor, NULL)
                        ? (unsigned)ATTN_CTX_BF16_MATMUL
                        : 0u;
    ctx->flags = (ctx->flags & ~(unsigned)(ATTN_CTX_BF16_MATMUL | ATTN_CTX_AUTO_MATMUL)) | precision;
    return ATTN_OK;
}

/* ---- attn_ctx_describe ---------------------------------------------------------------- */
typedef struct text_out {
    char *buf;
    size_t cap, len; /* len counts everything, written or not */
} text_out;

static void put(text_out *t, const char *fmt, ...) ATTN__PRINTF(2, 3);
static void put(text_out *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *at = t->len < t->cap ? t->buf + t->len : NULL;
    int n = vsnprintf(at, at ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

attn_status attn_ctx_describe(attn_ctx *ctx, char *buf, size_t cap, size_t *need) {
    if (!ctx) return ATTN_E_INVALID;
    if (need) *need = 0;
    ATTN_FAIL_IF(!buf && cap, ctx, ATTN_E_INVALID, "attn_ctx_describe: buf is NULL");
    text_out t = {buf, cap, 0};
    const attn__cpu_id *id = attn__cpu_identity();
    const unsigned all = attn__cpu_features(), cpu = usable_features();
    const attn__kernels *k = &ctx->kern;
    put(&t, "cpu: %s (%s, family %u, model %u)\n", id->brand[0] ? id->brand : "unknown",
        id->vendor[0] ? id->vendor : "no CPUID", id->family, id->model);
    put(&t, "extensions:");
    for (int i = 0; i < ATTN__CPU_COUNT; i++)
        if (all & (1u << i)) put(&t, " %s", attn__cpu_feature_name(1u << i));
    if ((all & ~cpu) & (ATTN__CPU_AMX_TILE | ATTN__CPU_AMX_BF16))
        put(&t, " (AMX not granted by the OS)");
    put(&t, "%s\n", all ? "" : " none of those attn uses");
    put(&t, "instruction set: %s", attn__isa_name(k->isa));
    if (ctx->env.isa >= 0) put(&t, " (ATTN_ISA=%s)", attn__isa_name(ctx->env.isa));
    put(&t, ", best here: %s\n", attn__isa_name(attn__isa_best(cpu, -1)));
    put(&t, "float products: %s%s microkernels (%d x %d tiles)\n",
        k->isa == ATTN__ISA_REF ? "plain C" : attn__isa_name(k->isa),
        k->isa == ATTN__ISA_REF ? "" : " FMA", k->gemm->mr, k->gemm->nr);
    put(&t, "bf16 products: %s\n",
        k->mixed == attn__mixed_kernel_amx()      ? "AMX-BF16 tiles"
        : k->mixed == attn__mixed_kernel_avx512() ? "AVX512_BF16 (VDPBF16PS)"
                                                  : "plain C (no bf16 instructions)");
    put(&t, "bf16 attention: %s\n",
        k->flash_bf16_widen ? "widened to float, float microkernels" : k->flash_bf16->name);
    put(&t, "fp16 weights: %s\n",
        k->has_f16 ? "AVX512_FP16" : "converted to float by plain C (no AVX512_FP16)");
    put(&t, "quantized weights: %s kernels, int8 activations: %s, int16 activations: %s, "
            "int16 prompts: %s\n",
        k->quant->name, k->quant8->name, k->quant16 ? k->quant16->name : "none (float)",
        k->gemm16 ? k->gemm16->name : "none (the float GEMM)");
    const char *why = NULL;
    int bf16 = attn__auto_bf16(k, id->vendor, &why);
    put(&t, "matmul precision (auto): %s: %s\n", bf16 ? "bf16 products" : "float", why);
    put(&t, "this context: %s products\n",
        (ctx->flags & ATTN_CTX_BF16_MATMUL) ? "bf16" : "float");
    attn__cpu_threads th;
    attn__cpu_threads_here(&th);
    put(&t, "threads: %d in this context, %d by default (one per physical core: %d CPUs this "
            "process may run on, %d cores, ",
        ctx->threads, th.threads, th.allowed, th.cores);
    if (th.quota > 0) put(&t, "a cgroup CPU quota of %d)\n", th.quota);
    else put(&t, "no cgroup CPU quota)\n");
    if (need) *need = t.len;
    if (cap && t.len >= cap) {
        buf[cap - 1] = 0;
        return attn__fail(ctx, ATTN_E_OVERFLOW,
                          "attn_ctx_describe: the text needs %zu bytes, buf has %zu", t.len + 1,
                          cap);
    }
    return ATTN_OK;
}

int attn__isa_set(attn_ctx *ctx, int isa) {
    unsigned cpu = usable_features();
    if (isa == ATTN__ISA_DEFAULT) isa = attn__isa_best(cpu, ctx->env.isa);
    if (!attn__isa_runs(isa, cpu)) return 0;
    attn__kernels_select(&ctx->kern, isa, cpu, &ctx->env);
    attn__bf16_attention_pick(&ctx->kern, attn__cpu_identity()->vendor, &ctx->env);
    attn__quant_pick(&ctx->kern, attn__cpu_identity()->vendor, attn__cpu_identity()->family);
    return 1;
}
