/* How a context picks its kernels (src/kernels/dispatch.h, docs/kernels.md):
 *  - CPU detection (src/core/cpu.h): the same bits on every call and from concurrent threads,
 *    each bit named, and (on Linux) every bit reported also listed in /proc/cpuinfo;
 *  - for each ATTN_ISA value whose set this machine runs, a context created under it holds
 *    that set's tables in every family; without ATTN_ISA, the best set;
 *  - an ATTN_ISA the machine cannot run falls back to the best set below it (made-up CPUs
 *    through the pure attn__isa_best / attn__kernels_select), an unknown value caps nothing,
 *    and attn__isa_set refuses a set the machine cannot run, leaving the context unchanged;
 *  - the bf16 / fp16 kernels only with AVX512_BF16 / AVX512_FP16 plus AVX512BW/DQ/VL on the
 *    AVX-512 set, ATTN_BF16=0|dot, ATTN_F16=0 and ATTN_DECODE=0 as documented;
 *  - the environment is read when a context is created, never per call;
 *  - attn__sdpa_path / attn__sdpa_bwd_path, SDPA's one choice of kernel;
 *  - a context created under ATTN_ISA=x computes the same bits as one forced to x with
 *    attn__isa_set, on 1 and 3 threads (attn_sdpa on the decode, fused and row paths, a GEMM
 *    and a residual + layer norm). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/cpu.h"
#include "../src/kernels/decode.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/ew.h"
#include "../src/kernels/flash.h"
#include "../src/kernels/gemm.h"
#include "../src/kernels/gemm_mixed.h"
#include "../src/kernels/gemm_bf16.h"
#include "../src/kernels/gemm_f16.h"
#include "../src/kernels/kernels.h"
#include "../src/kernels/quant.h"
#include "testutil.h"

/* A context created with `threads` threads while ATTN_<name> = value (NULL: unset). */
static attn_ctx *ctx_under(const char *name, const char *value, int threads) {
    const char *old = getenv(name);
    char *saved = old ? strdup(old) : NULL;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
    attn_ctx *c = tu_ctx(threads);
    if (saved) setenv(name, saved, 1);
    else unsetenv(name);
    free(saved);
    TU_CHECK(c != NULL, "context under %s=%s", name, value ? value : "(unset)");
    return c;
}

/* ---- CPU detection ------------------------------------------------------------------- */
static void *features_thread(void *arg) {
    *(unsigned *)arg = attn__cpu_features();
    return NULL;
}

static void cpu_detection(void) {
    pthread_t t[4];
    unsigned got[4] = {0, 0, 0, 0};
    int started[4];
    for (int i = 0; i < 4; i++)
        started[i] = pthread_create(&t[i], NULL, features_thread, &got[i]) == 0;
    unsigned f = attn__cpu_features();
    for (int i = 0; i < 4; i++) {
        if (!started[i]) continue;
        pthread_join(t[i], NULL);
        TU_CHECK(got[i] == f, "thread %d saw CPU features 0x%x, main 0x%x", i, got[i], f);
    }
    TU_CHECK(attn__cpu_features() == f, "CPU features changed between calls");
    TU_CHECK(f < 1u << ATTN__CPU_COUNT, "unknown CPU feature bits 0x%x", f);
    for (int i = 0; i < ATTN__CPU_COUNT; i++) {
        const char *n = attn__cpu_feature_name(1u << i);
        TU_CHECK(n != NULL, "CPU feature bit %d has no name", i);
        for (int j = 0; n && j < i; j++) {
            const char *m = attn__cpu_feature_name(1u << j);
            TU_CHECK(!m || strcmp(n, m) != 0, "CPU feature name %s twice", n);
        }
    }
    TU_CHECK(!attn__cpu_feature_name(0) && !attn__cpu_feature_name(3) &&
                 !attn__cpu_feature_name(1u << ATTN__CPU_COUNT),
             "a name for something other than one known bit");
    /* AVX-512 features come with the OS state that AVX2 needs too */
    if (f & ATTN__CPU_AVX512F) TU_CHECK(f & ATTN__CPU_AVX2, "AVX-512F without AVX2 + FMA");
    printf("test_dispatch: CPU features");
    for (int i = 0; i < ATTN__CPU_COUNT; i++)
        if (f & 1u << i) printf(" %s", attn__cpu_feature_name(1u << i));
    printf("%s\n", f ? "" : " (none)");

    /* NEON is part of ARMv8-A: an AArch64 build always reports it, others never */
#if defined(__aarch64__)
    TU_CHECK(f & ATTN__CPU_NEON, "an AArch64 CPU without NEON");
    TU_CHECK(!(f & ATTN__CPU_AVX2), "x86 bits on an AArch64 CPU");
#else
    TU_CHECK(!(f & (ATTN__CPU_NEON | ATTN__CPU_DOTPROD | ATTN__CPU_I8MM)),
             "ARM bits off AArch64");
#endif
    if (f & (ATTN__CPU_DOTPROD | ATTN__CPU_I8MM)) TU_CHECK(f & ATTN__CPU_NEON, "SDOT without NEON");

    /* Linux lists in /proc/cpuinfo what the CPU has and the kernel supports: x86 in its
     * "flags" line, AArch64 in "Features" (under qemu-user the file is the host's, whose
     * line for the other architecture is missing: nothing is compared then) */
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (!fp) return;
    static char line[8192];
    char flags[8192] = "";
#if defined(__aarch64__)
    const char *key = "Features";
#else
    const char *key = "flags";
#endif
    while (fgets(line, sizeof line, fp))
        if (strncmp(line, key, strlen(key)) == 0) {
            snprintf(flags, sizeof flags, " %s", strchr(line, ':') ? strchr(line, ':') + 1 : "");
            break;
        }
    fclose(fp);
    char *nl = strchr(flags, '\n');
    if (nl) *nl = ' ';
    if (!flags[0]) return;
    for (int i = 0; i < ATTN__CPU_COUNT; i++) {
        if (!(f & 1u << i)) continue;
        char want[40];
        snprintf(want, sizeof want, " %s ", attn__cpu_feature_name(1u << i));
        TU_CHECK(strstr(flags, want) != NULL, "%s reported but not in /proc/cpuinfo", want);
    }
    if (f & ATTN__CPU_AVX2) TU_CHECK(strstr(flags, " fma ") != NULL, "AVX2 bit without fma");
    if (f & ATTN__CPU_AVX2) TU_CHECK(strstr(flags, " f16c ") != NULL, "AVX2 bit without f16c");
}

/* ---- the choice of set ---------------------------------------------------------------- */
static const attn__gemm_kernel *gemm_of(int isa) {
    return isa == ATTN__ISA_AVX512 ? attn__gemm_kernel_avx512()
           : isa == ATTN__ISA_AVX2 ? attn__gemm_kernel_avx2()
           : isa == ATTN__ISA_NEON ? attn__gemm_kernel_neon()
                                   : attn__gemm_kernel_ref();
}

/* k holds the tables of set isa in every family (the families without a table of that set:
 * the plain C ones). */
static void check_tables(const attn__kernels *k, int isa, const char *what) {
    const char *n = attn__isa_name(isa);
    const attn__flash_kernels *fl = isa == ATTN__ISA_AVX512 ? attn__flash_kernels_avx512()
                                    : isa == ATTN__ISA_AVX2 ? attn__flash_kernels_avx2()
                                    : isa == ATTN__ISA_NEON ? attn__flash_kernels_neon()
                                                            : NULL;
    const attn__decode_kernels *dc = isa == ATTN__ISA_AVX512 ? attn__decode_kernels_avx512()
                                     : isa == ATTN__ISA_AVX2 ? attn__decode_kernels_avx2()
                                     : isa == ATTN__ISA_NEON ? attn__decode_kernels_neon()
                                                             : NULL;
    const attn__ew_kernel *ew = isa == ATTN__ISA_AVX512 ? attn__ew_kernel_avx512()
                                : isa == ATTN__ISA_AVX2 ? attn__ew_kernel_avx2()
                                : isa == ATTN__ISA_NEON ? attn__ew_kernel_neon()
                                                        : NULL;
    TU_CHECK(k->isa == isa, "%s: set %s, want %s", what, attn__isa_name(k->isa), n);
    TU_CHECK(k->gemm == gemm_of(isa) && k->gemm->isa == isa, "%s: gemm table not %s", what, n);
    TU_CHECK(k->flash == (fl ? fl : attn__flash_kernels_ref()), "%s: flash table not %s", what, n);
    TU_CHECK(k->decode == (dc ? dc : attn__decode_kernels_ref()), "%s: decode table not %s", what,
             n);
    TU_CHECK(k->ew == (ew ? ew : attn__ew_kernel_ref()), "%s: ew table not %s", what, n);
    TU_CHECK(k->dropout_row ==
                 (isa == ATTN__ISA_AVX512 ? attn__dropout_row_simd : attn__dropout_row_c),
             "%s: dropout stream not %s", what, n);
    TU_CHECK(k->gemm_bf16 == (k->has_bf16 ? attn__bf16_kernel_avx512() : attn__bf16_kernel_ref()),
             "%s: bf16 linear kernel", what);
    TU_CHECK(k->gemm_f16 == (k->has_f16 ? attn__f16_kernel_avx512() : attn__f16_kernel_ref()),
             "%s: f16 linear kernel", what);
    TU_CHECK(k->flash_bf16->isa == (k->has_bf16 ? ATTN__ISA_AVX512 : ATTN__ISA_REF),
             "%s: bf16 attention kernels", what);
    TU_CHECK(!k->flash_bf16->tiles || (k->has_bf16 && !k->flash_bf16_widen &&
                                        k->mixed == attn__mixed_kernel_amx()),
             "%s: bf16 attention on AMX tiles without the AMX GEMM, or widened", what);
    TU_CHECK(!(k->has_bf16 || k->has_f16) || isa == ATTN__ISA_AVX512,
             "%s: 16-bit AVX-512 kernels on set %s", what, n);
    /* AVX-512: a context's table is the Zen 4 one on AMD family 25 (attn__quant_pick, which
     * test_precision checks; attn__kernels_select alone leaves the AVX-512 one) */
    const attn__cpu_id *id = attn__cpu_identity();
    const int zen4 = isa == ATTN__ISA_AVX512 && strcmp(id->vendor, "AuthenticAMD") == 0 &&
                     id->family == 25 && k->quant == attn__quant_kernels_avx512_zen4();
    const attn__quant_kernels *qk = isa == ATTN__ISA_AVX512
                                        ? (zen4 ? attn__quant_kernels_avx512_zen4()
                                                : attn__quant_kernels_avx512())
                                    : isa == ATTN__ISA_AVX2 ? attn__quant_kernels_avx2()
                                    : isa == ATTN__ISA_NEON ? attn__quant_kernels_neon()
                                                            : NULL;
    TU_CHECK(k->quant == (qk ? qk : attn__quant_kernels_ref()), "%s: quant table not %s", what, n);
    TU_CHECK(isa != ATTN__ISA_REF || k->quant8 == attn__quant_kernels_ref(),
             "%s: int8 quant kernels on the plain C set", what);
    /* int16 activations on both x86 sets, none elsewhere: VPDPWSSD where the int8 set took
     * VPDPBUSD of the same extension (AVX512_VNNI, AVX-VNNI), else VPMADDWD */
    const int x86 = isa == ATTN__ISA_AVX512 || isa == ATTN__ISA_AVX2;
    const attn__quant_kernels *q16 =
        !x86 ? NULL
        : k->quant8 == attn__quant_kernels_vnni() && attn__quant_kernels_vnni_int16()
            ? attn__quant_kernels_vnni_int16()
        : k->quant8 == attn__quant_kernels_avxvnni() && attn__quant_kernels_avxvnni_int16()
            ? attn__quant_kernels_avxvnni_int16()
            : attn__quant_kernels_avx2_int16();
    TU_CHECK(k->quant16 == q16, "%s: int16 quant kernels %s", what,
             k->quant16 ? k->quant16->name : "none");
    /* the int16 GEMM of prompts of the int16 table's instructions */
    const attn__gemm16 *g16 = !q16                                         ? NULL
                              : q16 == attn__quant_kernels_vnni_int16()    ? attn__gemm16_vnni()
                              : q16 == attn__quant_kernels_avxvnni_int16() ? attn__gemm16_avxvnni()
                                                                           : attn__gemm16_avx2();
    TU_CHECK(k->gemm16 == g16, "%s: int16 GEMM %s", what, k->gemm16 ? k->gemm16->name : "none");
    /* ARM: SDOT int8 kernels on the NEON set exactly where the CPU has the dot products */
    const int sdot = isa == ATTN__ISA_NEON && (attn__cpu_features() & ATTN__CPU_DOTPROD) &&
                     attn__quant_kernels_dotprod();
    const int smmla = sdot && (attn__cpu_features() & ATTN__CPU_I8MM) && attn__quant_kernels_i8mm();
    TU_CHECK(isa != ATTN__ISA_NEON ||
                 k->quant8 == (smmla  ? attn__quant_kernels_i8mm()
                               : sdot ? attn__quant_kernels_dotprod()
                                      : attn__quant_kernels_ref()),
             "%s: int8 quant kernels on the NEON set", what);
}

static void isa_env(void) {
    unsigned cpu = attn__cpu_features();
    int best = attn__isa_best(cpu, -1);
    TU_CHECK(attn__isa_supported(ATTN__ISA_REF), "the plain C set must always run");
    for (int isa = best + 1; isa < ATTN__ISA_COUNT; isa++)
        TU_CHECK(!attn__isa_supported(isa), "set %s runs but is not the best", attn__isa_name(isa));
    attn_ctx *d = ctx_under("ATTN_ISA", NULL, 1);
    if (d) {
        check_tables(&d->kern, best, "no ATTN_ISA");
        printf("test_dispatch: default set %s, bf16 kernels %s, f16 kernel %s\n",
               attn__isa_name(d->kern.isa), d->kern.has_bf16 ? "AVX512_BF16" : "plain C",
               d->kern.has_f16 ? "AVX512_FP16" : "plain C");
        attn_ctx_free(d);
    }
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        char what[64];
        snprintf(what, sizeof what, "ATTN_ISA=%s", attn__isa_name(isa));
        attn_ctx *c = ctx_under("ATTN_ISA", attn__isa_name(isa), 1);
        if (!c) continue;
        /* the named set where it runs, else the best one below it */
        int want = attn__isa_supported(isa) ? isa : attn__isa_best(cpu, isa);
        check_tables(&c->kern, want, what);
        TU_CHECK(c->env.isa == isa, "%s: env.isa %d", what, c->env.isa);
        /* attn__isa_set: another set that runs, then back to the creation choice */
        for (int other = 0; other < ATTN__ISA_COUNT; other++) {
            if (!attn__isa_supported(other)) continue;
            TU_CHECK(attn__isa_set(c, other), "%s: isa_set %s", what, attn__isa_name(other));
            check_tables(&c->kern, other, what);
        }
        TU_CHECK(attn__isa_set(c, ATTN__ISA_DEFAULT), "%s: isa_set default", what);
        check_tables(&c->kern, want, what);
        /* refused: a set this machine cannot run, or no set at all; c stays as it was */
        for (int bad = 0; bad < ATTN__ISA_COUNT + 2; bad++) {
            int b = bad < ATTN__ISA_COUNT ? bad : bad == ATTN__ISA_COUNT ? 7 : -5;
            if (b < ATTN__ISA_COUNT && b >= 0 && attn__isa_supported(b)) continue;
            attn__kernels before = c->kern;
            TU_CHECK(!attn__isa_set(c, b), "%s: isa_set %d accepted", what, b);
            TU_CHECK(memcmp(&before, &c->kern, sizeof before) == 0,
                     "%s: a refused isa_set changed the context", what);
        }
        attn_ctx_free(c);
    }
    /* values that name no set cap nothing */
    const char *odd[] = {"", "AVX2", "sse4", "avx512 ", "0"};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        attn_ctx *c = ctx_under("ATTN_ISA", odd[i], 1);
        if (!c) continue;
        TU_CHECK(c->env.isa == -1 && c->kern.isa == best, "ATTN_ISA='%s': set %s, want %s",
                 odd[i], attn__isa_name(c->kern.isa), attn__isa_name(best));
        attn_ctx_free(c);
    }
}

/* made-up CPUs: what each combination of features gets */
static void made_up_cpus(void) {
    const unsigned avx2 = ATTN__CPU_AVX2, x512 = avx2 | ATTN__CPU_AVX512F | ATTN__CPU_AVX512DQ,
                   wide = x512 | ATTN__CPU_AVX512BW | ATTN__CPU_AVX512VL,
                   bf = wide | ATTN__CPU_AVX512_BF16, fp = wide | ATTN__CPU_AVX512_FP16;
    int b2 = attn__gemm_kernel_avx2() != NULL, b512 = attn__gemm_kernel_avx512() != NULL;
    /* ISA levels: AVX-512F alone (no AVX2 + FMA) runs nothing above plain C */
    TU_CHECK(attn__isa_best(0, -1) == ATTN__ISA_REF, "no features: not ref");
    TU_CHECK(attn__isa_best(ATTN__CPU_AVX512F, -1) == ATTN__ISA_REF, "AVX-512F without AVX2");
    TU_CHECK(attn__isa_best(avx2, -1) == (b2 ? ATTN__ISA_AVX2 : ATTN__ISA_REF), "AVX2 CPU");
    TU_CHECK(attn__isa_best(x512, -1) == (b512 ? ATTN__ISA_AVX512 : b2 ? ATTN__ISA_AVX2 : 0),
             "AVX-512 CPU");
    /* AVX-512F without DQ (Xeon Phi): the AVX-512 set's exponentials need VREDUCEPS */
    TU_CHECK(attn__isa_best(avx2 | ATTN__CPU_AVX512F, -1) ==
                 (b2 ? ATTN__ISA_AVX2 : ATTN__ISA_REF),
             "AVX-512F without AVX512DQ: not the AVX2 set");
    /* a forced set the CPU lacks: the best one below it */
    TU_CHECK(attn__isa_best(avx2, ATTN__ISA_AVX512) == (b2 ? ATTN__ISA_AVX2 : ATTN__ISA_REF),
             "ATTN_ISA=avx512 on an AVX2 CPU");
    TU_CHECK(attn__isa_best(0, ATTN__ISA_AVX2) == ATTN__ISA_REF, "ATTN_ISA=avx2 without AVX2");
    TU_CHECK(attn__isa_best(x512, ATTN__ISA_REF) == ATTN__ISA_REF, "ATTN_ISA=ref");
    TU_CHECK(!attn__isa_runs(ATTN__ISA_AVX512, avx2) && !attn__isa_runs(ATTN__ISA_AVX2, 0) &&
                 !attn__isa_runs(ATTN__ISA_COUNT, ~0u) && !attn__isa_runs(-1, ~0u),
             "isa_runs accepts what cannot run");

    attn__kernel_env env = {-1, 1, 1, 1, 1};
    attn__kernels k;
    int bf_built = attn__bf16_kernels_built(), f16_built = attn__f16_kernel_avx512() != NULL;
    if (b512) {
        attn__kernels_select(&k, ATTN__ISA_AVX512, x512, &env);
        TU_CHECK(!k.has_bf16 && !k.has_f16 && k.flash_bf16_widen, "AVX-512F only: 16-bit kernels");
        attn__kernels_select(&k, ATTN__ISA_AVX512, x512 | ATTN__CPU_AVX512_BF16, &env);
        TU_CHECK(!k.has_bf16, "AVX512_BF16 without BW/DQ/VL taken");
        attn__kernels_select(&k, ATTN__ISA_AVX512, x512 | ATTN__CPU_AVX512_FP16, &env);
        TU_CHECK(!k.has_f16, "AVX512_FP16 without BW/DQ/VL taken");
        attn__kernels_select(&k, ATTN__ISA_AVX512, bf | fp, &env);
        TU_CHECK(k.has_bf16 == bf_built && k.has_f16 == f16_built && k.flash_bf16_widen,
                 "full CPU: bf16 %d (built %d), f16 %d (built %d), widen %d", k.has_bf16,
                 bf_built, k.has_f16, f16_built, k.flash_bf16_widen);
        check_tables(&k, ATTN__ISA_AVX512, "made-up full CPU");
        env.bf16 = 2; /* ATTN_BF16=dot */
        attn__kernels_select(&k, ATTN__ISA_AVX512, bf, &env);
        TU_CHECK(k.flash_bf16_widen == !bf_built, "ATTN_BF16=dot: widen %d", k.flash_bf16_widen);
        attn__kernels_select(&k, ATTN__ISA_AVX512, wide, &env); /* dot needs the BF16 kernels */
        TU_CHECK(k.flash_bf16_widen && !k.has_bf16, "ATTN_BF16=dot without AVX512_BF16");
        env.bf16 = 0; /* ATTN_BF16=0 */
        attn__kernels_select(&k, ATTN__ISA_AVX512, bf | fp, &env);
        TU_CHECK(!k.has_bf16 && k.gemm_bf16 == attn__bf16_kernel_ref() && k.flash_bf16_widen &&
                     k.has_f16 == f16_built,
                 "ATTN_BF16=0");
        /* AMX (granted): bf16 attention on the tiles, not widened, unless ATTN_AMX=0 (widened)
         * or ATTN_BF16=dot (VDPBF16PS) */
        const unsigned amx = bf | ATTN__CPU_AMX_TILE | ATTN__CPU_AMX_BF16;
        const attn__flash_bf16_kernels *fa = attn__flash_bf16_kernels_amx();
        env.bf16 = 1;
        attn__kernels_select(&k, ATTN__ISA_AVX512, amx, &env);
        TU_CHECK(!bf_built || (fa ? k.flash_bf16 == fa && !k.flash_bf16_widen
                                  : k.flash_bf16 == attn__flash_bf16_kernels_avx512() &&
                                        k.flash_bf16_widen),
                 "AMX: bf16 attention kernels %s, widen %d", k.flash_bf16->name,
                 k.flash_bf16_widen);
        check_tables(&k, ATTN__ISA_AVX512, "made-up CPU with AMX");
        env.amx = 0;
        attn__kernels_select(&k, ATTN__ISA_AVX512, amx, &env);
        TU_CHECK(!k.flash_bf16->tiles && k.flash_bf16_widen, "ATTN_AMX=0: bf16 attention on %s",
                 k.flash_bf16->name);
        env.amx = 1, env.bf16 = 2;
        attn__kernels_select(&k, ATTN__ISA_AVX512, amx, &env);
        TU_CHECK(!k.flash_bf16->tiles && k.flash_bf16_widen == !bf_built,
                 "AMX with ATTN_BF16=dot: bf16 attention on %s", k.flash_bf16->name);
        attn__kernels_select(&k, ATTN__ISA_AVX2, amx, &env);
        TU_CHECK(!k.flash_bf16->tiles, "AVX2 set: bf16 attention on %s", k.flash_bf16->name);
        env.bf16 = 1, env.f16 = 0; /* ATTN_F16=0 */
        attn__kernels_select(&k, ATTN__ISA_AVX512, bf | fp, &env);
        TU_CHECK(!k.has_f16 && k.gemm_f16 == attn__f16_kernel_ref() && k.has_bf16 == bf_built,
                 "ATTN_F16=0");
        env.f16 = 1;
    }
    if (b2) { /* the AVX2 set never takes AVX-512 kernels, whatever the CPU has */
        attn__kernels_select(&k, ATTN__ISA_AVX2, bf | fp, &env);
        check_tables(&k, ATTN__ISA_AVX2, "AVX2 set on a full CPU");
        TU_CHECK(!k.has_bf16 && !k.has_f16 && k.flash_bf16_widen, "AVX2 set: 16-bit kernels");
    }
    /* int8 quantized kernels: AVX512_VNNI (with BW/DQ/VL) on the AVX-512 set, AVX-VNNI on the
     * AVX2 and AVX-512 sets, else VPMADDUBSW on either, else plain C */
    const attn__quant_kernels *q8r = attn__quant_kernels_ref(), *q8v = attn__quant_kernels_vnni(),
                              *q8a = attn__quant_kernels_avxvnni(),
                              *q82 = attn__quant_kernels_avx2_int8() ? attn__quant_kernels_avx2_int8()
                                                                     : q8r;
    if (b512) {
        attn__kernels_select(&k, ATTN__ISA_AVX512, wide | ATTN__CPU_AVX512_VNNI, &env);
        TU_CHECK(k.quant8 == (q8v ? q8v : q8r), "AVX512_VNNI: int8 quant kernels");
        TU_CHECK(k.quant16 == (attn__quant_kernels_vnni_int16() ? attn__quant_kernels_vnni_int16()
                                                                : attn__quant_kernels_avx2_int16()),
                 "AVX512_VNNI: int16 quant kernels");
        TU_CHECK(k.gemm16 == attn__gemm16_vnni(), "AVX512_VNNI: int16 GEMM");
        attn__kernels_select(&k, ATTN__ISA_AVX512, x512 | ATTN__CPU_AVX512_VNNI, &env);
        TU_CHECK(k.quant8 == q82, "AVX512_VNNI without BW/DQ/VL taken");
        attn__kernels_select(&k, ATTN__ISA_AVX512, wide | ATTN__CPU_AVX_VNNI, &env);
        TU_CHECK(k.quant8 == (q8a ? q8a : q82), "AVX-512 set with AVX-VNNI only");
        attn__kernels_select(&k, ATTN__ISA_AVX512, wide, &env);
        TU_CHECK(k.quant8 == q82, "AVX-512 set without VNNI: int8 quant kernels");
        TU_CHECK(k.quant16 == attn__quant_kernels_avx2_int16(),
                 "AVX-512 set without VNNI: int16 quant kernels");
        TU_CHECK(k.gemm16 == attn__gemm16_avx2(), "AVX-512 set without VNNI: int16 GEMM");
    }
    if (b2) {
        attn__kernels_select(&k, ATTN__ISA_AVX2, avx2 | ATTN__CPU_AVX_VNNI, &env);
        TU_CHECK(k.quant8 == (q8a ? q8a : q82), "AVX-VNNI: int8 quant kernels");
        TU_CHECK(k.quant16 == (attn__quant_kernels_avxvnni_int16() ? attn__quant_kernels_avxvnni_int16()
                                                                   : attn__quant_kernels_avx2_int16()),
                 "AVX-VNNI: int16 quant kernels");
        TU_CHECK(k.gemm16 == (attn__quant_kernels_avxvnni_int16() ? attn__gemm16_avxvnni()
                                                                  : attn__gemm16_avx2()),
                 "AVX-VNNI: int16 GEMM");
        attn__kernels_select(&k, ATTN__ISA_AVX2, wide | ATTN__CPU_AVX512_VNNI, &env);
        TU_CHECK(k.quant8 == q82, "AVX2 set took the AVX512_VNNI kernels");
        TU_CHECK(k.quant16 == attn__quant_kernels_avx2_int16(),
                 "AVX2 set took the AVX512_VNNI int16 kernels");
        TU_CHECK(k.gemm16 == attn__gemm16_avx2(), "AVX2 set took the AVX512_VNNI int16 GEMM");
        attn__kernels_select(&k, ATTN__ISA_AVX2, avx2, &env);
        TU_CHECK(k.quant8 == q82, "AVX2 without VNNI: int8 quant kernels");
    }
    attn__kernels_select(&k, ATTN__ISA_REF, bf | fp, &env);
    check_tables(&k, ATTN__ISA_REF, "ref set on a full CPU");
    TU_CHECK(!k.flash_bf16_widen && k.decode_on, "ref set: bf16 attention multiplies in bf16");
    env.decode = 0;
    attn__kernels_select(&k, ATTN__ISA_REF, 0, &env);
    TU_CHECK(!k.decode_on, "ATTN_DECODE=0");
    attn__kernels_select(&k, ATTN__ISA_COUNT, bf | fp, &env); /* no such set: plain C */
    check_tables(&k, ATTN__ISA_REF, "unknown set");
}

/* the environment is read at creation, not per call */
static void env_read_once(void) {
    struct {
        const char *name, *value;
    } vars[] = {{"ATTN_DECODE", "0"}, {"ATTN_BF16", "0"}, {"ATTN_BF16", "dot"},
                {"ATTN_F16", "0"},    {"ATTN_ISA", "ref"},  {"ATTN_AMX", "0"}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        attn_ctx *before = ctx_under(vars[i].name, NULL, 1);
        attn_ctx *under = ctx_under(vars[i].name, vars[i].value, 1);
        if (!before || !under) {
            attn_ctx_free(before), attn_ctx_free(under);
            continue;
        }
        attn__kernels k0 = before->kern;
        setenv(vars[i].name, vars[i].value, 1);
        attn__sdpa_args a;
        memset(&a, 0, sizeof a);
        a.B = a.H = a.Hkv = a.L = 1, a.S = 64, a.D = a.Dv = 4, a.qs[3] = a.ks[3] = 1;
        a.vs[3] = a.os[3] = 1;
        TU_CHECK(attn__decode_eligible(before, &a) == k0.decode_on &&
                     memcmp(&k0, &before->kern, sizeof k0) == 0,
                 "%s=%s set after creation changed the context", vars[i].name, vars[i].value);
        unsetenv(vars[i].name);
        const attn__kernels *k = &under->kern;
        int ok = 1;
        if (!strcmp(vars[i].name, "ATTN_DECODE"))
            ok = !k->decode_on && !attn__decode_eligible(under, &a);
        else if (!strcmp(vars[i].value, "dot")) /* bf16 products where there are kernels */
            ok = k->flash_bf16_widen == (k->isa != ATTN__ISA_REF && !k->has_bf16);
        else if (!strcmp(vars[i].name, "ATTN_BF16")) ok = !k->has_bf16;
        else if (!strcmp(vars[i].name, "ATTN_F16")) ok = !k->has_f16;
        else if (!strcmp(vars[i].name, "ATTN_AMX"))
            ok = !k->flash_bf16->tiles && k->mixed != attn__mixed_kernel_amx();
        else ok = k->isa == ATTN__ISA_REF;
        TU_CHECK(ok, "a context created under %s=%s ignores it", vars[i].name, vars[i].value);
        attn_ctx_free(before), attn_ctx_free(under);
    }
}

/* ---- SDPA's choice of kernel ------------------------------------------------------------ */
static void sdpa_paths(void) {
    attn_ctx *c = ctx_under("ATTN_DECODE", NULL, 1), *off = ctx_under("ATTN_DECODE", "0", 1);
    if (!c || !off) {
        attn_ctx_free(c), attn_ctx_free(off);
        return;
    }
    float w;
    attn__sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = a.H = a.Hkv = 1, a.D = a.Dv = 8;
    a.qs[3] = a.ks[3] = a.vs[3] = a.os[3] = 1;
    a.L = 1, a.S = 4096; /* one query over many keys */
    TU_CHECK(attn__sdpa_path(c, &a, 0) == ATTN__SDPA_DECODE, "decode (fp32)");
    TU_CHECK(attn__sdpa_path(c, &a, 1) == ATTN__SDPA_DECODE, "decode (bf16)");
    TU_CHECK(attn__sdpa_path(off, &a, 0) == ATTN__SDPA_FLASH, "ATTN_DECODE=0: fused");
    a.L = 2, a.S = 4; /* small: rows (fp32), fused (bf16) */
    TU_CHECK(attn__sdpa_path(c, &a, 0) == ATTN__SDPA_ROWS, "small fp32: rows");
    TU_CHECK(attn__sdpa_path(c, &a, 1) == ATTN__SDPA_FLASH, "small bf16: fused");
    a.L = 4, a.S = 4;
    TU_CHECK(attn__sdpa_path(c, &a, 0) == ATTN__SDPA_FLASH, "4 x 4 fp32: fused");
    a.rows = 1; /* the recompute of a forward that wrote weights */
    TU_CHECK(attn__sdpa_path(c, &a, 0) == ATTN__SDPA_ROWS, "rows flag: rows");
    a.rows = 0;
    a.L = 64, a.S = 64;
    TU_CHECK(attn__sdpa_path(c, &a, 0) == ATTN__SDPA_FLASH, "64 x 64: fused");
    a.w = &w, a.ws[3] = 1; /* the weights output */
    TU_CHECK(attn__sdpa_path(c, &a, 0) == ATTN__SDPA_ROWS, "weights: rows");
    a.w = NULL, a.L = 2, a.S = 4, a.ks[3] = 2; /* a strided last dimension, small */
    TU_CHECK(attn__sdpa_path(c, &a, 0) == ATTN__SDPA_REF, "strided: reference");
    a.ks[3] = 1;
    attn__sdpa_grads g;
    memset(&g, 0, sizeof g);
    g.dos[3] = g.dqs[3] = g.dks[3] = g.dvs[3] = 1;
    a.L = 11, a.S = 13;
    TU_CHECK(attn__sdpa_bwd_path(&a, &g) == ATTN__SDPA_ROWS, "backward small: rows");
    a.L = 12, a.S = 12;
    TU_CHECK(attn__sdpa_bwd_path(&a, &g) == ATTN__SDPA_FLASH, "backward 12 x 12: fused");
    a.L = a.S = 64;
    TU_CHECK(attn__sdpa_bwd_path(&a, &g) == ATTN__SDPA_FLASH, "backward 64 x 64: fused");
    g.dmask = &w, a.mask[0].kind = ATTN_MASK_ADD;
    TU_CHECK(attn__sdpa_bwd_path(&a, &g) == ATTN__SDPA_REF, "mask gradient: reference");
    g.dmask = NULL, a.L = 8, a.S = 16, g.dos[3] = 3;
    TU_CHECK(attn__sdpa_bwd_path(&a, &g) == ATTN__SDPA_REF, "backward strided: reference");
    attn_ctx_free(c), attn_ctx_free(off);
}

/* ---- the same bits through ATTN_ISA and through attn__isa_set --------------------------- */
static int run_ops(attn_ctx *c, float *out, size_t n_out) {
    enum { B = 2, H = 4, D = 16, E = 48, M = 37 };
    static float q[B * H * 160 * D], k[B * H * 160 * D], v[B * H * 160 * D], x[M * E],
        W[E * E], bias[E];
    static int filled;
    if (!filled) {
        tu_fill(q, sizeof q / sizeof q[0], 1, -1, 1), tu_fill(k, sizeof k / sizeof k[0], 2, -1, 1);
        tu_fill(v, sizeof v / sizeof v[0], 3, -1, 1), tu_fill(x, M * E, 4, -1, 1);
        tu_fill(W, E * E, 5, -0.2f, 0.2f), tu_fill(bias, E, 6, -1, 1);
        filled = 1;
    }
    size_t used = 0;
    /* attn_sdpa: (L, S) for the decode, row and fused paths */
    const int64_t shapes[3][2] = {{2, 160}, {9, 20}, {80, 72}};
    for (int s = 0; s < 3; s++) {
        int64_t L = shapes[s][0], S = shapes[s][1];
        int64_t qs[4] = {B, H, L, D}, ks[4] = {B, H, S, D}, os[4] = {B, H, L, D};
        attn_tensor tq = attn_tensor_make(q, ATTN_F32, 4, qs),
                    tk = attn_tensor_make(k, ATTN_F32, 4, ks),
                    tv = attn_tensor_make(v, ATTN_F32, 4, ks),
                    to = attn_tensor_make(out + used, ATTN_F32, 4, os);
        used += (size_t)(B * H * L * D);
        if (used > n_out) return 0;
        attn_sdpa_options opt = attn_sdpa_defaults();
        opt.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        if (attn_sdpa(c, &tq, &tk, &tv, NULL, &opt, &to, NULL, NULL) != ATTN_OK) return 0;
    }
    /* y = x W^T on the GEMM kernels, then bias + residual + layer norm on the row kernels */
    float *y = out + used;
    used += (size_t)(M * E);
    if (used > n_out) return 0;
    if (attn__gemm(c, 0, 1, M, E, E, 1.0f, x, E, W, E, 0.0f, y, E) != ATTN_OK) return 0;
    attn__add_ln(c, y, bias, x, NULL, NULL, 1e-5f, M, E, NULL);
    return 1;
}

static void same_bits(void) {
    enum { N = 2 * 4 * (2 + 9 + 80) * 16 + 37 * 48 };
    float *want = malloc(sizeof(float) * N), *got = malloc(sizeof(float) * N);
    if (!want || !got) {
        TU_CHECK(0, "out of memory");
        free(want), free(got);
        return;
    }
    for (int isa = 0; isa < ATTN__ISA_COUNT; isa++) {
        if (!attn__isa_supported(isa)) continue;
        for (int threads = 1; threads <= 3; threads += 2) {
            attn_ctx *forced = ctx_under("ATTN_ISA", NULL, threads),
                     *env = ctx_under("ATTN_ISA", attn__isa_name(isa), threads);
            if (forced && env && attn__isa_set(forced, isa)) {
                memset(want, 0xff, sizeof(float) * N), memset(got, 0, sizeof(float) * N);
                TU_CHECK(run_ops(forced, want, N) && run_ops(env, got, N), "ops on %s",
                         attn__isa_name(isa));
                TU_CHECK(!memcmp(want, got, sizeof(float) * N),
                         "ATTN_ISA=%s and attn__isa_set(%s) differ on %d threads",
                         attn__isa_name(isa), attn__isa_name(isa), threads);
            }
            attn_ctx_free(forced), attn_ctx_free(env);
        }
    }
    free(want), free(got);
}

int main(void) {
    cpu_detection();
    isa_env();
    made_up_cpus();
    env_read_once();
    sdpa_paths();
    same_bits();
    return tu_finish("test_dispatch");
}
