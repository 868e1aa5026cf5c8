/* Precision per CPU (ATTN_CTX_AUTO_MATMUL, attn_ctx_set_matmul, attn_ctx_describe):
 *  - the table (attn__auto_bf16) on made-up CPUs: AMX -> bf16; AVX512_BF16 on AMD -> bf16;
 *    AVX512_BF16 on Intel without AMX -> float; no bf16 instructions (AVX2, plain C, AVX-512
 *    without AVX512_BF16, ATTN_BF16=0) -> float; each with a reason;
 *  - bf16 attention on the same made-up CPUs (attn__bf16_attention_pick after
 *    attn__kernels_select): the AMX tiles, the VDPBF16PS dot kernels on AMD (where auto picks
 *    bf16 for them), widened to float on Intel without AMX, AVX2 and ATTN_BF16=0, plain C's
 *    dot kernels on the plain C set;
 *  - a context created with ATTN_CTX_AUTO_MATMUL holds the table's choice for its own kernels
 *    and never keeps the AUTO bit; AUTO | BF16 is bf16;
 *  - the quantized kernels per CPU (attn__quant_pick): the Zen 4 table on AMD family 25 with
 *    AVX-512 only, and it is the AVX-512 table but for Q6_K's matrix-vector entries;
 *  - attn_ctx_set_matmul: 0, BF16 and AUTO, other values refused with the flags unchanged;
 *  - the products follow the flag: attn_linear (forward and backward) on a float context
 *    matches the plain C oracle to float rounding, on a bf16 context to bf16 rounding
 *    (and differs from float: the flag is really used), the same bits on 1 and 3 threads;
 *  - attn_ctx_describe: the whole text when it fits (need = its length), a truncated,
 *    terminated text and ATTN_E_OVERFLOW when not, NULL handling. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/cpu.h"
#include "../src/core/internal.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/flash.h"
#include "../src/kernels/gemm_mixed.h"
#include "../src/kernels/kernels.h"
#include "../src/kernels/quant.h"
#include "testutil.h"

static void table(void) {
    const unsigned avx2 = ATTN__CPU_AVX2,
                   wide = avx2 | ATTN__CPU_AVX512F | ATTN__CPU_AVX512BW | ATTN__CPU_AVX512DQ |
                          ATTN__CPU_AVX512VL,
                   bf = wide | ATTN__CPU_AVX512_BF16,
                   amx = bf | ATTN__CPU_AMX_TILE | ATTN__CPU_AMX_BF16 | ATTN__CPU_AMX_INT8;
    attn__kernel_env env = {-1, 1, 1, 1, 1};
    attn__kernels k;
    const char *why = NULL;
    const int built = attn__bf16_kernels_built();
    struct {
        int isa;
        unsigned cpu;
        const char *vendor;
        int amx_env, bf16_env, want;
        const char *what;
        int widen; /* bf16 attention widened to float */
    } cases[] = {
        {ATTN__ISA_AVX512, amx, "GenuineIntel", 1, 1, built && attn__mixed_kernel_amx() != NULL,
         "Sapphire Rapids (AMX)", !(built && attn__flash_bf16_kernels_amx() != NULL)},
        {ATTN__ISA_AVX512, amx, "GenuineIntel", 0, 1, 0, "Sapphire Rapids with ATTN_AMX=0", 1},
        {ATTN__ISA_AVX512, bf, "GenuineIntel", 1, 1, 0, "Intel AVX512_BF16 without AMX", 1},
        {ATTN__ISA_AVX512, bf, "AuthenticAMD", 1, 1, built, "AMD Zen 4/5", !built},
        {ATTN__ISA_AVX512, bf, "AuthenticAMD", 1, 0, 0, "Zen 4 with ATTN_BF16=0", 1},
        {ATTN__ISA_AVX512, bf, "AuthenticAMD", 1, 2, built, "Zen 4 with ATTN_BF16=dot", !built},
        {ATTN__ISA_AVX512, wide, "AuthenticAMD", 1, 1, 0, "AVX-512 without AVX512_BF16", 1},
        {ATTN__ISA_AVX2, avx2, "AuthenticAMD", 1, 1, 0, "AMD Zen 3 (AVX2)", 1},
        {ATTN__ISA_AVX2, bf, "AuthenticAMD", 1, 1, 0, "Zen 4 capped at ATTN_ISA=avx2", 1},
        {ATTN__ISA_REF, 0, "", 1, 1, 0, "no SIMD (plain C)", 0},
        {ATTN__ISA_AVX512, bf, NULL, 1, 1, 0, "AVX512_BF16, vendor unknown", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        env.amx = cases[i].amx_env;
        env.bf16 = cases[i].bf16_env;
        attn__kernels_select(&k, cases[i].isa, cases[i].cpu, &env);
        why = NULL;
        int got = attn__auto_bf16(&k, cases[i].vendor, &why);
        TU_CHECK(got == cases[i].want, "%s: auto precision %s, expected %s", cases[i].what,
                 got ? "bf16" : "float", cases[i].want ? "bf16" : "float");
        TU_CHECK(why && strlen(why) > 20, "%s: no reason", cases[i].what);
        TU_CHECK(attn__auto_bf16(&k, cases[i].vendor, NULL) == got, "%s: why NULL", cases[i].what);
        const attn__flash_bf16_kernels *fb = k.flash_bf16;
        attn__bf16_attention_pick(&k, cases[i].vendor, &env);
        /* a set this build lacks (the x86 ones on ARM64) gave plain C, which multiplies bf16 */
        const int widen = k.isa == ATTN__ISA_REF ? 0 : cases[i].widen;
        TU_CHECK(k.flash_bf16_widen == widen && k.flash_bf16 == fb,
                 "%s: bf16 attention %s%s, expected %s", cases[i].what,
                 k.flash_bf16_widen ? "widened, " : "on ", k.flash_bf16->name,
                 widen ? "widened" : "not widened");
    }
}

/* attn__quant_pick on made-up CPUs: the Zen 4 table on AMD family 25 with the AVX-512 set,
 * the set's own table elsewhere (Intel, Zen 5, the AVX2 set, no vendor) */
static void quant_pick(void) {
    attn__kernel_env env;
    attn__kernel_env_read(&env);
    const unsigned wide = ATTN__CPU_AVX2 | ATTN__CPU_AVX512F | ATTN__CPU_AVX512BW |
                          ATTN__CPU_AVX512DQ | ATTN__CPU_AVX512VL;
    const attn__quant_kernels *z4 = attn__quant_kernels_avx512_zen4();
    struct {
        int isa;
        const char *vendor;
        unsigned family;
        int zen4;
        const char *what;
    } cases[] = {
        {ATTN__ISA_AVX512, "AuthenticAMD", 25, 1, "AMD Zen 4"},
        {ATTN__ISA_AVX512, "AuthenticAMD", 26, 0, "AMD Zen 5"},
        {ATTN__ISA_AVX512, "GenuineIntel", 6, 0, "Intel AVX-512"},
        {ATTN__ISA_AVX2, "AuthenticAMD", 25, 0, "Zen 4 capped at ATTN_ISA=avx2"},
        {ATTN__ISA_AVX512, NULL, 25, 0, "vendor unknown"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn__kernels k;
        attn__kernels_select(&k, cases[i].isa, wide, &env);
        const attn__quant_kernels *before = k.quant;
        attn__quant_pick(&k, cases[i].vendor, cases[i].family);
        const attn__quant_kernels *want = cases[i].zen4 && z4 && before == attn__quant_kernels_avx512() ? z4 : before;
        TU_CHECK(k.quant == want, "%s: quantized kernels %s, expected %s", cases[i].what,
                 k.quant->name, want->name);
    }
    if (z4) { /* the Zen 4 table is the AVX-512 one but for Q6_K's matrix-vector entries */
        const attn__quant_kernels *a = attn__quant_kernels_avx512();
        int same = 1;
        for (int t = 0; t < ATTN__QT_MAX; t++)
            same &= a->dq[t] == z4->dq[t] && a->mv8[t] == z4->mv8[t] && a->mvw8[t] == z4->mvw8[t] &&
                    (t == ATTN_Q_Q6_K || (a->mv[t] == z4->mv[t] && a->mvw[t] == z4->mvw[t]));
        const attn__quant_kernels *a2 = attn__quant_kernels_avx2();
        TU_CHECK(same && a2 && z4->mv[ATTN_Q_Q6_K] == a2->mv[ATTN_Q_Q6_K] && !z4->mvw[ATTN_Q_Q6_K],
                 "the Zen 4 table differs from the AVX-512 one elsewhere than Q6_K's mv");
    }
}

static void flags(void) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = 1;
    attn_ctx *c = NULL;
    p.flags = ATTN_CTX_AUTO_MATMUL;
    TU_STATUS(attn_ctx_create(&p, &c), ATTN_OK, NULL);
    if (!c) return;
    const int bf = attn__auto_bf16(&c->kern, attn__cpu_identity()->vendor, NULL);
    TU_CHECK(attn_ctx_flags(c) == (bf ? (unsigned)ATTN_CTX_BF16_MATMUL : 0u),
             "AUTO resolved to flags 0x%x, the table says %s", attn_ctx_flags(c),
             bf ? "bf16" : "float");
    /* set_matmul: explicit, auto, refused */
    TU_STATUS(attn_ctx_set_matmul(c, ATTN_CTX_BF16_MATMUL), ATTN_OK, c);
    TU_CHECK(attn_ctx_flags(c) == ATTN_CTX_BF16_MATMUL, "set BF16: 0x%x", attn_ctx_flags(c));
    TU_STATUS(attn_ctx_set_matmul(c, 0), ATTN_OK, c);
    TU_CHECK(attn_ctx_flags(c) == 0, "set float: 0x%x", attn_ctx_flags(c));
    TU_STATUS(attn_ctx_set_matmul(c, ATTN_CTX_AUTO_MATMUL), ATTN_OK, c);
    TU_CHECK(attn_ctx_flags(c) == (bf ? (unsigned)ATTN_CTX_BF16_MATMUL : 0u), "set AUTO: 0x%x",
             attn_ctx_flags(c));
    const unsigned before = attn_ctx_flags(c);
    TU_STATUS(attn_ctx_set_matmul(c, ATTN_CTX_BF16_MATMUL | ATTN_CTX_AUTO_MATMUL),
              ATTN_E_INVALID, c);
    TU_STATUS(attn_ctx_set_matmul(c, ATTN_CTX_NO_FINITE_CHECK), ATTN_E_INVALID, c);
    TU_STATUS(attn_ctx_set_matmul(c, 1u << 20), ATTN_E_INVALID, c);
    TU_CHECK(attn_ctx_flags(c) == before, "a refused value changed the flags");
    TU_CHECK(strstr(attn_ctx_errmsg(c), "attn_ctx_set_matmul") != NULL, "message: %s",
             attn_ctx_errmsg(c));
    TU_STATUS(attn_ctx_set_matmul(NULL, 0), ATTN_E_INVALID, NULL);
    TU_CHECK(attn_ctx_flags(NULL) == 0, "flags of NULL");
    attn_ctx_free(c);
    /* AUTO | BF16 is bf16; AUTO keeps the other flags */
    p.flags = ATTN_CTX_AUTO_MATMUL | ATTN_CTX_BF16_MATMUL | ATTN_CTX_NO_FINITE_CHECK;
    c = NULL;
    TU_STATUS(attn_ctx_create(&p, &c), ATTN_OK, NULL);
    if (c)
        TU_CHECK(attn_ctx_flags(c) == (ATTN_CTX_BF16_MATMUL | ATTN_CTX_NO_FINITE_CHECK),
                 "AUTO | BF16 | NO_FINITE_CHECK became 0x%x", attn_ctx_flags(c));
    attn_ctx_free(c);
}

/* bf16 rounding of v (round to nearest even), as the products' operands are rounded */
static float bf16_round(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&v, &u, 4);
    return v;
}

static void products(void) {
    enum { M = 37, K = 70, N = 45 };
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K),
          *b = malloc(sizeof(float) * N), *dy = malloc(sizeof(float) * M * N),
          *ref = malloc(sizeof(float) * M * N), *y = malloc(sizeof(float) * M * N),
          *y3 = malloc(sizeof(float) * M * N), *xr = malloc(sizeof(float) * M * K),
          *wr = malloc(sizeof(float) * N * K), *refb = malloc(sizeof(float) * M * N),
          *dx = malloc(sizeof(float) * M * K), *dw = malloc(sizeof(float) * N * K),
          *db = malloc(sizeof(float) * N), *rdx = calloc(M * K, sizeof(float)),
          *rdw = calloc(N * K, sizeof(float)), *rdb = calloc(N, sizeof(float));
    if (!x || !w || !b || !dy || !ref || !y || !y3 || !xr || !wr || !refb || !dx || !dw ||
        !db || !rdx || !rdw || !rdb) {
        TU_CHECK(0, "out of memory");
        goto done;
    }
    tu_fill(x, M * K, 1, -1, 1);
    tu_fill(w, N * K, 2, -1, 1);
    tu_fill(b, N, 3, -1, 1);
    tu_fill(dy, M * N, 4, -1, 1);
    for (int i = 0; i < M * K; i++) xr[i] = bf16_round(x[i]);
    for (int i = 0; i < N * K; i++) wr[i] = bf16_round(w[i]);
    attn__linear_ref(x, K, w, b, ref, N, M, K, N);
    attn__linear_ref(xr, K, wr, b, refb, N, M, K, N);
    attn__linear_bwd_ref(x, K, w, dy, N, rdx, K, rdw, rdb, M, K, N);
    int64_t xs[2] = {M, K}, ws[2] = {N, K}, ys[2] = {M, N}, bs[1] = {N};
    attn_tensor X = attn_tensor_make(x, ATTN_F32, 2, xs), W = attn_tensor_make(w, ATTN_F32, 2, ws),
                B = attn_tensor_make(b, ATTN_F32, 1, bs), Y = attn_tensor_make(y, ATTN_F32, 2, ys),
                Y3 = attn_tensor_make(y3, ATTN_F32, 2, ys),
                DY = attn_tensor_make(dy, ATTN_F32, 2, ys),
                DX = attn_tensor_make(dx, ATTN_F32, 2, xs),
                DW = attn_tensor_make(dw, ATTN_F32, 2, ws), DB = attn_tensor_make(db, ATTN_F32, 1, bs);
    for (int bf = 0; bf < 2; bf++) {
        attn_ctx *c1 = tu_ctx(1), *c3 = tu_ctx(3);
        if (!c1 || !c3) {
            TU_CHECK(0, "no context");
            attn_ctx_free(c1), attn_ctx_free(c3);
            break;
        }
        const unsigned f = bf ? (unsigned)ATTN_CTX_BF16_MATMUL : 0u;
        attn_ctx_set_matmul(c1, f), attn_ctx_set_matmul(c3, f);
        TU_STATUS(attn_linear(c1, &X, &W, &B, &Y), ATTN_OK, c1);
        TU_STATUS(attn_linear(c3, &X, &W, &B, &Y3), ATTN_OK, c3);
        TU_CHECK(memcmp(y, y3, sizeof(float) * M * N) == 0, "%s linear: 1 and 3 threads differ",
                 bf ? "bf16" : "float");
        if (bf) {
            /* bf16 operands, float sums: the oracle on rounded operands to float rounding, and
             * away from the float result (the flag is used) */
            TU_CHECK(tu_close("bf16 linear vs oracle on bf16 operands", y, refb, M * N, 1e-5),
                     "bf16 linear");
            double mx = 0;
            for (int i = 0; i < M * N; i++) mx = fmax(mx, fabs((double)y[i] - ref[i]));
            TU_CHECK(mx > 1e-5, "bf16 products gave the float result (max diff %g)", mx);
            TU_CHECK(tu_close("bf16 linear vs float oracle", y, ref, M * N, 3e-2), "bf16 error");
        } else {
            TU_CHECK(tu_close("float linear vs oracle", y, ref, M * N, 1e-5), "float linear");
            TU_STATUS(attn_linear_backward(c1, &X, &W, &DY, &DX, &DW, &DB), ATTN_OK, c1);
            TU_CHECK(tu_close("linear backward dx", dx, rdx, M * K, 1e-5), "dx");
            TU_CHECK(tu_close("linear backward dW", dw, rdw, N * K, 1e-5), "dW");
            TU_CHECK(tu_close("linear backward db", db, rdb, N, 1e-5), "db");
        }
        attn_ctx_free(c1), attn_ctx_free(c3);
    }
done:
    free(x), free(w), free(b), free(dy), free(ref), free(y), free(y3), free(xr), free(wr);
    free(refb), free(dx), free(dw), free(db), free(rdx), free(rdw), free(rdb);
}

static void describe(void) {
    attn_ctx *c = tu_ctx(1);
    if (!c) return;
    size_t need = 0;
    TU_STATUS(attn_ctx_describe(c, NULL, 0, &need), ATTN_OK, c);
    TU_CHECK(need > 100 && need < 4096, "describe needs %zu bytes", need);
    char *full = malloc(need + 1), small[40];
    if (!full) {
        attn_ctx_free(c);
        return;
    }
    size_t n2 = 0;
    TU_STATUS(attn_ctx_describe(c, full, need + 1, &n2), ATTN_OK, c);
    TU_CHECK(n2 == need && strlen(full) == need, "length %zu / %zu / %zu", n2, need,
             strlen(full));
    TU_CHECK(strncmp(full, "cpu: ", 5) == 0, "starts with: %.20s", full);
    TU_CHECK(strstr(full, "matmul precision (auto): ") != NULL, "no auto line:\n%s", full);
    TU_CHECK(strstr(full, attn__isa_name(c->kern.isa)) != NULL, "no ISA name");
    /* exactly need bytes: no room for the terminator */
    TU_STATUS(attn_ctx_describe(c, full, need, NULL), ATTN_E_OVERFLOW, c);
    TU_CHECK(strlen(full) == need - 1, "truncated to %zu, expected %zu", strlen(full), need - 1);
    memset(small, 'x', sizeof small);
    TU_STATUS(attn_ctx_describe(c, small, sizeof small, &n2), ATTN_E_OVERFLOW, c);
    TU_CHECK(n2 == need && small[sizeof small - 1] == 0 && strlen(small) == sizeof small - 1,
             "small buffer: need %zu, text '%s'", n2, small);
    TU_STATUS(attn_ctx_describe(c, NULL, 10, NULL), ATTN_E_INVALID, c);
    TU_STATUS(attn_ctx_describe(NULL, small, sizeof small, NULL), ATTN_E_INVALID, NULL);
    free(full);
    attn_ctx_free(c);
}

int main(void) {
    table();
    quant_pick();
    flags();
    products();
    describe();
    return tu_finish("test_precision");
}
