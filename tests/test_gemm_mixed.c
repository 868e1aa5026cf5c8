/* Mixed-precision GEMM (src/kernels/gemm_mixed.c, contract in gemm_mixed.h): each kernel this
 * machine runs (plain C; AVX512_BF16; AMX-BF16) on every transpose combination, edge sizes,
 * strides, beta 0/1 and row epilogues (also over several blocks of B panels), against
 * double-precision sums; across thread counts; K slices against the whole K in one call;
 * the row sums of a transposed A taken while packing against attn__colsum_c (memcmp);
 * and the ATTN_CTX_BF16_MATMUL linear path against the float one.
 *
 * Tolerances.  With a', b' the operands rounded to bf16 (8 significant bits), u = 2^-24, and
 * S = |beta c| + sum_k |a'_k b'_k| for one output:
 *  - against the exact double value of the ROUNDED operands, the kernels add K' exact products
 *    (K' = K rounded up to 32: the padding adds zeros) to the start value, one float rounding
 *    per add in any order: |c - exact'| <= (K' + 2) u S.  A dropped or doubled product (~S/K)
 *    or an operand left unrounded (~2^-10 S summed) exceeds it for the K used (<= 600);
 *  - against the exact value of the FLOAT operands, each product also moves by at most
 *    2^-7 + 2^-16 of itself: |c - exact| <= (2^-7 + 2^-16) sum |a b| + (K' + 2) u S. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"
#include "../src/core/cpu.h"
#include "../src/kernels/dispatch.h"
#include "../src/kernels/ew.h"
#include "../src/kernels/gemm_mixed.h"

static double bfr(float x) { return (double)attn__bf16_to_f32(attn__f32_to_bf16_daz(x)); }

/* The kernels this machine can run. */
static int kernels(const attn__mixed_kernel **k) {
    int n = 0;
    k[n++] = attn__mixed_kernel_ref();
    if (attn__mixed_kernel_avx512() &&
        tu_isa_ok(TU_CPU_AVX512_BF16, "test_gemm_mixed: the AVX512_BF16 kernel"))
        k[n++] = attn__mixed_kernel_avx512();
    if (attn__mixed_kernel_amx() && tu_isa_ok(TU_CPU_AMX_BF16, "test_gemm_mixed: the AMX kernel"))
        k[n++] = attn__mixed_kernel_amx();
    return n;
}

typedef struct gcase {
    int ta, tb;
    int64_t M, N, K;
    int64_t pad; /* extra columns of every leading dimension */
    int beta;
} gcase;

/* A row epilogue that adds 1000 * (global row + 1) to the rows it is given: applied exactly
 * once per row, with the right row index, or the check fails. */
static void epi_rows(void *arg, float *y, int64_t ldy, int64_t i0, int64_t rows) {
    const int64_t n = *(const int64_t *)arg;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) y[i * ldy + j] += 1000.0f * (float)(i0 + i + 1);
}

static float *run_sum(attn_ctx *ctx, const attn__mixed_kernel *k, const gcase *c,
                      const float *A, const float *B, const float *C0, int epi, float *suma) {
    const int64_t ldc = c->N + c->pad;
    const int64_t lda = (c->ta ? c->M : c->K) + c->pad, ldb = (c->tb ? c->K : c->N) + c->pad;
    float *C = malloc(sizeof(float) * (size_t)(c->M * ldc));
    memcpy(C, C0, sizeof(float) * (size_t)(c->M * ldc));
    int64_t n = c->N;
    attn__row_epi e = {epi_rows, &n};
    TU_STATUS(attn__gemm_mixed_k(ctx, k, c->ta, c->tb, c->M, c->N, c->K, A, lda, B, ldb,
                                 c->beta ? 1.0f : 0.0f, C, ldc, epi ? &e : NULL, suma),
              ATTN_OK, ctx);
    return C;
}

static float *run(attn_ctx *ctx, const attn__mixed_kernel *k, const gcase *c, const float *A,
                  const float *B, const float *C0, int epi) {
    return run_sum(ctx, k, c, A, B, C0, epi, NULL);
}

static void check_case(attn_ctx **ctxs, const attn__mixed_kernel *k, const gcase *c,
                       uint64_t seed) {
    const int64_t M = c->M, N = c->N, K = c->K, ldc = N + c->pad;
    const int64_t lda = (c->ta ? M : K) + c->pad, ldb = (c->tb ? K : N) + c->pad;
    const int64_t arows = c->ta ? K : M, brows = c->tb ? N : K;
    const size_t na = (size_t)(arows * lda) + 1, nb = (size_t)(brows * ldb) + 1;
    float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb);
    float *C0 = malloc(sizeof(float) * (size_t)(M * ldc));
    tu_fill(A, na, seed, -2.0f, 2.0f);
    tu_fill(B, nb, seed + 1, -1.0f, 1.0f);
    tu_fill(C0, (size_t)(M * ldc), seed + 2, -3.0f, 3.0f);
    const int64_t kp = (K + 31) / 32 * 32;
    const double u = 0x1p-24;
    int epi = (seed & 1) != 0;
    float *C = run(ctxs[0], k, c, A, B, C0, epi);
    int bad = 0, badf = 0, badpad = 0;
    double worst = 0;
    /* op(A) by rows and op(B) by columns, as floats and rounded to bf16, in double */
    double *Af = malloc(sizeof(double) * (size_t)(M * K + 1)), *Ar = malloc(sizeof(double) * (size_t)(M * K + 1));
    double *Bf = malloc(sizeof(double) * (size_t)(N * K + 1)), *Br = malloc(sizeof(double) * (size_t)(N * K + 1));
    for (int64_t i = 0; i < M; i++)
        for (int64_t kk = 0; kk < K; kk++) {
            const float a = c->ta ? A[kk * lda + i] : A[i * lda + kk];
            Af[i * K + kk] = a, Ar[i * K + kk] = bfr(a);
        }
    for (int64_t j = 0; j < N; j++)
        for (int64_t kk = 0; kk < K; kk++) {
            const float b = c->tb ? B[j * ldb + kk] : B[kk * ldb + j];
            Bf[j * K + kk] = b, Br[j * K + kk] = bfr(b);
        }
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double e = 0, s = 0, ef = 0, sf = 0;
            const double *af = Af + i * K, *ar = Ar + i * K, *bf = Bf + j * K, *br = Br + j * K;
            for (int64_t kk = 0; kk < K; kk++) {
                const double p = ar[kk] * br[kk], pf = af[kk] * bf[kk];
                e += p, s += fabs(p);
                ef += pf, sf += fabs(pf);
            }
            if (c->beta) e += C0[i * ldc + j], ef += C0[i * ldc + j], s += fabs(C0[i * ldc + j]);
            double got = C[i * ldc + j] - (epi ? 1000.0 * (double)(i + 1) : 0.0);
            /* the epilogue's own add rounds once more, at the scale of its value */
            double slack = epi ? 1000.0 * (double)(i + 1) * u * 2 : 0.0;
            double tol = (double)(kp + 2) * u * s + slack;
            double err = fabs((double)C[i * ldc + j] - (epi ? 1000.0 * (double)(i + 1) : 0.0) - e);
            if (!(err <= tol)) bad++;
            if (s > 0 && err / s > worst) worst = err / s;
            double tolf = (0x1p-7 + 0x1p-16) * sf + tol;
            if (!(fabs(got - ef) <= tolf)) badf++;
        }
        for (int64_t j = N; j < ldc; j++) badpad += C[i * ldc + j] != C0[i * ldc + j];
    }
    free(Af), free(Ar), free(Bf), free(Br);
    TU_CHECK(!bad && !badf && !badpad,
             "%s ta=%d tb=%d M=%lld N=%lld K=%lld pad=%lld beta=%d epi=%d: %d outside the bound "
             "(rounded operands), %d (float operands), %d padding values changed; worst %.3g",
             k->name, c->ta, c->tb, (long long)M, (long long)N, (long long)K, (long long)c->pad,
             c->beta, epi, bad, badf, badpad, worst);
    /* op(A) = A^T: its row sums while packing (a bias gradient) have attn__colsum_c's bits
     * and leave C as it was; on 1 and 2 threads */
    if (c->ta) {
        float *s0 = malloc(sizeof(float) * (size_t)(M + 1)), *s1 = malloc(sizeof(float) * (size_t)(M + 1));
        tu_fill(s0, (size_t)(M + 1), seed + 3, -1.0f, 1.0f);
        memcpy(s1, s0, sizeof(float) * (size_t)(M + 1));
        attn__colsum_c(A, lda, K, M, s0);
        for (int t = 0; t < 2; t++) {
            float *s2 = malloc(sizeof(float) * (size_t)(M + 1));
            memcpy(s2, s1, sizeof(float) * (size_t)(M + 1));
            float *C2 = run_sum(ctxs[t], k, c, A, B, C0, epi, s2);
            TU_CHECK(memcmp(s0, s2, sizeof(float) * (size_t)(M + 1)) == 0 &&
                         memcmp(C, C2, sizeof(float) * (size_t)(M * ldc)) == 0,
                     "%s M=%lld N=%lld K=%lld: row sums of A^T while packing differ from "
                     "colsum (or change C), %d threads", k->name, (long long)M, (long long)N,
                     (long long)K, attn_ctx_threads(ctxs[t]));
            free(C2), free(s2);
        }
        free(s0), free(s1);
    }
    /* K slicing (a kernel with kc) gives the bits of the whole K' in one call */
    if (k->kc > 0) {
        attn__mixed_kernel whole = *k;
        whole.kc = 0;
        float *C2 = run(ctxs[1], &whole, c, A, B, C0, epi);
        TU_CHECK(memcmp(C, C2, sizeof(float) * (size_t)(M * ldc)) == 0,
                 "%s ta=%d tb=%d M=%lld N=%lld K=%lld: K slices change the result", k->name,
                 c->ta, c->tb, (long long)M, (long long)N, (long long)K);
        free(C2);
    }
    /* the same bits on every thread count */
    for (int t = 1; ctxs[t]; t++) {
        float *C2 = run(ctxs[t], k, c, A, B, C0, epi);
        TU_CHECK(memcmp(C, C2, sizeof(float) * (size_t)(M * ldc)) == 0,
                 "%s ta=%d tb=%d M=%lld N=%lld K=%lld: results differ with %d threads", k->name,
                 c->ta, c->tb, (long long)M, (long long)N, (long long)K,
                 attn_ctx_threads(ctxs[t]));
        free(C2);
    }
    free(A), free(B), free(C0), free(C);
}

static void test_kernels(void) {
    const attn__mixed_kernel *ks[3];
    const int nk = kernels(ks);
    /* ATTN_TEST_QUICK (an emulator): the smaller shapes, 1 and 3 threads */
    const int quick = tu_quick("test_gemm_mixed");
    attn_ctx *ctxs[4] = {tu_ctx(1), tu_ctx(quick ? 3 : 2), quick ? NULL : tu_ctx(3), NULL};
    static const int64_t shapes[][3] = {{1, 1, 1},    {5, 7, 3},     {33, 31, 65},
                                        {64, 96, 128}, {70, 50, 300}, {130, 40, 33},
                                        {17, 1200, 64}, {3, 200, 600}, {200, 3, 40}, {40, 70, 0},
                                        {530, 270, 45}, {130, 900, 600}};
    static const unsigned char big[] = {0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1};
    const size_t nshapes = sizeof shapes / sizeof shapes[0];
    uint64_t seed = 1;
    for (int ki = 0; ki < nk; ki++) {
        printf("mixed GEMM kernel %s (mr %d, nr %d)\n", ks[ki]->name, ks[ki]->mr, ks[ki]->nr);
        for (size_t s = 0; s < nshapes; s++)
            for (int t = 0; t < 4 && !(quick && big[s]); t++)
                for (int beta = 0; beta < 2; beta++) {
                    gcase c = {t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                               (int64_t)(seed % 3) * 5, beta};
                    check_case(ctxs, ks[ki], &c, seed++);
                }
    }
    for (int i = 0; ctxs[i]; i++) attn_ctx_free(ctxs[i]);
}

/* Operands the kernels must round as documented: subnormals become zero, a product that
 * would overflow a bf16 range check does not exist (bf16 has float's range), NaN propagates. */
static void test_specials(void) {
    const attn__mixed_kernel *ks[3];
    const int nk = kernels(ks);
    attn_ctx *ctx = tu_ctx(1);
    for (int ki = 0; ki < nk; ki++) {
        float A[4] = {1e-40f, 3.0f, 1.0f, 2.0f}, B[4] = {1e38f, 1.0f, 1.0f, 1.0f}, C[2] = {0, 0};
        /* C[0] = 1e-40 * 1e38 (a subnormal a: zero, else 0.01) + 3 * 1; C[1]: a NaN operand */
        TU_STATUS(attn__gemm_mixed_k(ctx, ks[ki], 0, 0, 1, 1, 2, A, 2, B, 1, 0.0f, C, 1, NULL, NULL),
                  ATTN_OK, ctx);
        TU_CHECK(C[0] == 3.0f, "%s: subnormal operand not taken as zero (got %g)", ks[ki]->name,
                 (double)C[0]);
        A[2] = NAN;
        TU_STATUS(attn__gemm_mixed_k(ctx, ks[ki], 0, 0, 1, 1, 2, A + 2, 2, B, 1, 0.0f, C + 1, 1, NULL,
                                     NULL),
                  ATTN_OK, ctx);
        TU_CHECK(isnan(C[1]), "%s: NaN operand lost (got %g)", ks[ki]->name, (double)C[1]);
    }
    attn_ctx_free(ctx);
}

/* The linear layers of a context created with ATTN_CTX_BF16_MATMUL: forward and backward of
 * nn.Linear (attn__linear / attn__linear_bwd) within the mixed bound of the float path's
 * results, and the kernel chosen named. */
static void test_linear_flag(void) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = 2;
    p.flags = ATTN_CTX_BF16_MATMUL;
    attn_ctx *mc = NULL, *fc = tu_ctx(2);
    TU_STATUS(attn_ctx_create(&p, &mc), ATTN_OK, NULL);
    if (!mc || !fc) return;
    printf("ATTN_CTX_BF16_MATMUL kernel: %s\n", mc->kern.mixed->name);
    const int64_t M = 37, K = 96, N = 70;
    float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
    float *b = malloc(sizeof(float) * N), *dy = malloc(sizeof(float) * M * N);
    float *y[2], *dx[2], *dW[2], *db[2];
    tu_fill(x, (size_t)(M * K), 11, -1, 1);
    tu_fill(W, (size_t)(N * K), 12, -0.3f, 0.3f);
    tu_fill(b, (size_t)N, 13, -0.1f, 0.1f);
    tu_fill(dy, (size_t)(M * N), 14, -1, 1);
    for (int i = 0; i < 2; i++) {
        attn_ctx *c = i ? mc : fc;
        y[i] = malloc(sizeof(float) * M * N), dx[i] = malloc(sizeof(float) * M * K);
        dW[i] = calloc((size_t)(N * K), sizeof(float)), db[i] = calloc((size_t)N, sizeof(float));
        TU_STATUS(attn__linear(c, x, K, W, b, y[i], N, M, K, N), ATTN_OK, c);
        TU_STATUS(attn__linear_bwd(c, x, K, W, dy, N, dx[i], K, dW[i], db[i], M, K, N), ATTN_OK, c);
    }
    /* each output: |mixed - float| <= 2^-6 sum|terms| (operands rounded: 2^-7 each, plus
     * float sums); the sums of |terms| are at most K |x| |W| = 96 * 0.3 for y, and similar */
    TU_CHECK(tu_close("linear y", y[1], y[0], (size_t)(M * N), 0x1p-6 * K * 0.3),
             "mixed linear forward too far from float");
    TU_CHECK(tu_close("linear dx", dx[1], dx[0], (size_t)(M * K), 0x1p-6 * N * 0.3),
             "mixed linear dx too far from float");
    TU_CHECK(tu_close("linear dW", dW[1], dW[0], (size_t)(N * K), 0x1p-6 * M),
             "mixed linear dW too far from float");
    TU_CHECK(memcmp(db[0], db[1], sizeof(float) * N) == 0, "bias gradient is not a float sum");
    int differ = memcmp(y[0], y[1], sizeof(float) * M * N) != 0;
    TU_CHECK(differ, "the flag changed nothing: the products are not in bf16");
    for (int i = 0; i < 2; i++) free(y[i]), free(dx[i]), free(dW[i]), free(db[i]);
    free(x), free(W), free(b), free(dy);
    attn_ctx_free(mc), attn_ctx_free(fc);
}

/* The AVX512_BF16 packing (used by the AMX table too) writes the plain C packing's bits: both
 * layouts, both orientations, ragged sizes, and values that test the rounding (ties, the
 * largest finite floats, subnormals, infinities; NaN stays NaN). */
static void test_packing(void) {
    if (!attn__mixed_kernel_avx512()) {
        printf("packing: the AVX512_BF16 kernels are not in this build, nothing to compare\n");
        return;
    }
    if (!tu_isa_ok(TU_CPU_AVX512_BF16, "test_gemm_mixed: the AVX512_BF16 packing")) return;
    static const int64_t dims[][2] = {{1, 1}, {5, 33}, {32, 64}, {37, 70}, {64, 31}, {100, 129}};
    uint64_t seed = 77;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int trans = 0; trans < 2; trans++) {
            const int64_t R = dims[d][0], K = dims[d][1], kp = (K + 31) / 32 * 32;
            const int64_t mrows = (R + 31) / 32 * 32, ld = (trans ? R : K) + 3;
            const size_t nsrc = (size_t)((trans ? K : R) * ld);
            float *src = malloc(sizeof(float) * nsrc);
            tu_fill(src, nsrc, seed++, -3.0f, 3.0f);
            for (size_t i = 0; i < nsrc; i += 7) { /* ties and specials among the values */
                static const uint32_t bits[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00000001u,
                                                0x807fffffu, 0x7f800000u, 0xff800000u, 0x7fc00001u};
                memcpy(src + i, &bits[(i / 7) % 8], 4);
            }
            const size_t na = (size_t)(mrows * kp);
            attn__bf16 *a0 = malloc(2 * na), *a1 = malloc(2 * na);
            memset(a0, 0x55, 2 * na), memset(a1, 0x55, 2 * na);
            attn__mixed_pack_a_c(trans, src, ld, R, (int)mrows, K, kp, a0, kp, NULL);
            attn__mixed_pack_a_avx512(trans, src, ld, R, (int)mrows, K, kp, a1, kp, NULL);
            int same = 1;
            for (size_t i = 0; i < na; i++) {
                const int n0 = (a0[i] & 0x7fff) > 0x7f80, n1 = (a1[i] & 0x7fff) > 0x7f80;
                if (n0 != n1 || (!n0 && a0[i] != a1[i])) same = 0;
            }
            TU_CHECK(same, "pack_a trans=%d R=%lld K=%lld: AVX512_BF16 differs from plain C",
                     trans, (long long)R, (long long)K);
            /* the same source as op(B): columns R, rows K (trans: src[j ld + k]) */
            const int64_t np = (R + 31) / 32;
            const size_t nb = (size_t)(np * 32 * kp);
            attn__bf16 *b0 = malloc(2 * nb), *b1 = malloc(2 * nb);
            memset(b0, 0x55, 2 * nb), memset(b1, 0x55, 2 * nb);
            attn__mixed_pack_b_c(!trans, src, ld, R, 32, K, kp, b0);
            attn__mixed_pack_b_avx512(!trans, src, ld, R, 32, K, kp, b1);
            same = 1;
            for (size_t i = 0; i < nb; i++) {
                const int n0 = (b0[i] & 0x7fff) > 0x7f80, n1 = (b1[i] & 0x7fff) > 0x7f80;
                if (n0 != n1 || (!n0 && b0[i] != b1[i])) same = 0;
            }
            TU_CHECK(same, "pack_b trans=%d N=%lld K=%lld: AVX512_BF16 differs from plain C",
                     !trans, (long long)R, (long long)K);
            free(src), free(a0), free(a1), free(b0), free(b1);
        }
}

int main(void) {
    test_packing();
    test_kernels();
    test_specials();
    test_linear_flag();
    return tu_finish("test_gemm_mixed");
}
