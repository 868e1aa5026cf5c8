/* The one linear door (attn__matmul, src/layers/matmul.c): every epilogue on every kind of
 * storage type (F32 rows, GGML F16 rows, Q8_0 and Q4_1 blocks, the BF16, F16 and F32 panels) on
 * both kernel paths (T <= 8 rows per sequence: the matrix-vector kernels; longer: the GEMM; the
 * 16-bit panels always take the GEMM, the F32 ones read their rows on the other path), outputs with a row stride other than N, on 1 and
 * 2 threads (bit-identical); attn__matmul_n against single products; attn__matmul_bwd against
 * the double reference; the refusals (a product's backward on a quantized weight, a storage type
 * without kernels).
 *
 * Oracle: the door's own product t = x W^T with neither bias nor epilogue (its kernels are held
 * to their references by test_qlinear, test_gemm and test_bf16_gemm), and each epilogue computed
 * here in double from t:
 *   NONE t + b;  RES t + b + r;  ACT ReLU max(t + b, 0) (with the mask bits: y > 0), ACT tanh;
 *   ACT GELU u Phi(u), u = t + b (erf);
 *   ACT with aout: y = u and aout = GELU(u);  RES_LN layer_norm(t + b + r) w + lb (biased
 *   variance, eps 1e-5);  ymax max_n |y|.
 * Tolerance 2e-5 of max(1, max|ref|): float sums in another order and the kernels' GELU
 * polynomial; a bias, residual or norm left out, or applied twice, is off by more than 0.01. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"
#include "../src/kernels/gemm.h"
#include "../src/kernels/ref/ref_f64.h"
#include "../src/layers/layers.h"

#define N 40
#define K 256
#define MMAX 20
#define LDY (N + 8) /* the outputs' row stride: not N */

static double gelu(double u) { return 0.5 * u * (1.0 + erf(u / sqrt(2.0))); }

/* The weight W [N, K] stored as type in buf (at least BUF bytes). */
#define BUF ((N + 32) * K * 4 + 256)
static int make(attn_ctx *ctx, int type, const float *W, void *buf, attn__weight *w) {
    if (type == ATTN__W_BF16P || type == ATTN__W_F16P || type == ATTN__W_F32P)
        return TU_STATUS(attn__weight_pack(ctx, type, W, N, K, buf, "test", w), ATTN_OK, ctx);
    int64_t be, bb;
    attn_qtype_block(type, &be, &bb);
    if (!TU_STATUS(attn_quantize(ctx, type, W, N * K, buf, (size_t)(N * K / be * bb)), ATTN_OK,
                   ctx))
        return 0;
    *w = (attn__weight){type, buf, N, K, NULL, 0};
    return 1;
}

enum { E_NONE, E_RES, E_RELU, E_RELU_MASK, E_GELU, E_GELU_AOUT, E_TANH, E_RES_LN, E_COUNT };
static const char *ENAME[E_COUNT] = {"none",      "residual", "relu", "relu+mask",
                                     "gelu",      "gelu+aout", "tanh", "res+ln"};

/* The epilogue on t [M, N] in double: ref [M, N], aref (E_GELU_AOUT) [M, N], rmax [M]. */
static void oracle(int ek, const float *t, const float *b, const float *r, const float *lw,
                   const float *lb, int64_t M, float *ref, float *aref, float *rmax) {
    for (int64_t m = 0; m < M; m++) {
        double u[N], mean = 0, var = 0, mx = 0;
        for (int n = 0; n < N; n++) {
            u[n] = (double)t[m * N + n] + b[n];
            if (ek == E_RES || ek == E_RES_LN) u[n] += r[m * N + n];
            mean += u[n];
        }
        mean /= N;
        for (int n = 0; n < N; n++) var += (u[n] - mean) * (u[n] - mean);
        var /= N;
        for (int n = 0; n < N; n++) {
            double y = u[n];
            if (ek == E_RELU || ek == E_RELU_MASK) y = y > 0 ? y : 0;
            if (ek == E_TANH) y = tanh(y);
            if (ek == E_GELU) y = gelu(y);
            if (ek == E_GELU_AOUT) aref[m * N + n] = (float)gelu(y);
            if (ek == E_RES_LN) y = (y - mean) / sqrt(var + 1e-5) * lw[n] + lb[n];
            ref[m * N + n] = (float)y;
            mx = fabs(y) > mx ? fabs(y) : mx;
        }
        rmax[m] = (float)mx;
    }
}

static attn__epi epilogue(int ek, const float *r, const attn__ln *ln, float *ymax, float *aout,
                          uint16_t *mask) {
    attn__epi e = {ATTN__EPI_NONE, ATTN_ACT_RELU, NULL, NULL, NULL, ymax, NULL, NULL};
    if (ek == E_RES) e.kind = ATTN__EPI_RES, e.r = r;
    if (ek == E_RELU || ek == E_RELU_MASK) e.kind = ATTN__EPI_ACT;
    if (ek == E_RELU_MASK) e.relu_mask = mask;
    if (ek == E_TANH) e.kind = ATTN__EPI_ACT, e.act = ATTN_ACT_TANH;
    if (ek == E_GELU || ek == E_GELU_AOUT) e.kind = ATTN__EPI_ACT, e.act = ATTN_ACT_GELU;
    if (ek == E_GELU_AOUT) e.aout = aout;
    if (ek == E_RES_LN) e.kind = ATTN__EPI_RES_LN, e.r = r, e.ln = ln;
    return e;
}

static void epilogues(attn_ctx *c1, attn_ctx *c2) {
    static const int types[] = {ATTN_Q_F32, ATTN_Q_F16, ATTN_Q_Q8_0, ATTN_Q_Q4_1, ATTN__W_BF16P,
                                ATTN__W_F16P, ATTN__W_F32P};
    float *W = malloc(N * K * sizeof(float)), *x = malloc(MMAX * K * sizeof(float));
    float b[N], lw[N], lb[N], *r = malloc(MMAX * N * sizeof(float));
    float *t = malloc(MMAX * N * sizeof(float)), *y1 = malloc(MMAX * LDY * sizeof(float));
    float *y2 = malloc(MMAX * LDY * sizeof(float)), *ref = malloc(MMAX * N * sizeof(float));
    float *yc = malloc(MMAX * N * sizeof(float));
    uint16_t k1[MMAX * 3], k2[MMAX * 3]; /* ReLU masks: ceil(N / 16) words per row */
    float *a1 = malloc(MMAX * N * sizeof(float)), *a2 = malloc(MMAX * N * sizeof(float));
    float *aref = malloc(MMAX * N * sizeof(float)), m1[MMAX], m2[MMAX], rmax[MMAX];
    unsigned char *buf = malloc(BUF);
    tu_fill(W, N * K, 1, -0.2f, 0.2f);
    tu_fill(x, MMAX * K, 2, -1, 1);
    tu_fill(b, N, 3, -0.5f, 0.5f);
    tu_fill(r, MMAX * N, 4, -1, 1);
    tu_fill(lw, N, 5, 0.5f, 1.5f);
    tu_fill(lb, N, 6, -0.5f, 0.5f);
    const attn__ln ln = {lw, lb, N, 1e-5f};
    int cases = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        attn__weight w;
        if (!make(c1, types[ti], W, buf, &w)) continue;
        const int64_t paths[2][2] = {{3, 1}, {MMAX, MMAX}}; /* M, T: matrix-vector, GEMM */
        for (int pi = 0; pi < 2; pi++) {
            const int64_t M = paths[pi][0], T = paths[pi][1];
            w.bias = NULL;
            TU_STATUS(attn__matmul(c1, &w, x, K, M, T, NULL, t, N), ATTN_OK, c1);
            w.bias = b;
            for (int ek = 0; ek < E_COUNT; ek++) {
                char what[96];
                snprintf(what, sizeof what, "%s, %s path, %s", attn__wtype_of(w.type)->name,
                         pi ? "GEMM" : "matrix-vector", ENAME[ek]);
                oracle(ek, t, b, r, lw, lb, M, ref, aref, rmax);
                for (int i = 0; i < MMAX; i++) m1[i] = m2[i] = NAN;
                for (int i = 0; i < MMAX * N; i++) a1[i] = a2[i] = NAN;
                for (int i = 0; i < MMAX * LDY; i++) y1[i] = y2[i] = NAN;
                memset(k1, 0xff, sizeof k1), memset(k2, 0, sizeof k2);
                attn__epi e1 = epilogue(ek, r, &ln, m1, a1, k1);
                attn__epi e2 = epilogue(ek, r, &ln, m2, a2, k2);
                TU_STATUS(attn__matmul(c1, &w, x, K, M, T, &e1, y1, LDY), ATTN_OK, c1);
                TU_STATUS(attn__matmul(c2, &w, x, K, M, T, &e2, y2, LDY), ATTN_OK, c2);
                for (int64_t m = 0; m < M; m++)
                    memcpy(yc + m * N, y1 + m * LDY, N * sizeof(float));
                TU_CHECK(tu_close(what, yc, ref, (size_t)(M * N), 2e-5), "%s: y", what);
                TU_CHECK(tu_close(what, m1, rmax, (size_t)M, 2e-5), "%s: row maxima", what);
                if (ek == E_GELU_AOUT)
                    TU_CHECK(tu_close(what, a1, aref, (size_t)(M * N), 2e-5), "%s: aout", what);
                int same = 1;
                for (int64_t m = 0; m < M; m++)
                    same &= !memcmp(y1 + m * LDY, y2 + m * LDY, N * sizeof(float));
                same &= !memcmp(m1, m2, (size_t)M * sizeof(float));
                if (ek == E_GELU_AOUT) same &= !memcmp(a1, a2, (size_t)(M * N) * sizeof(float));
                if (ek == E_RELU_MASK) {
                    same &= !memcmp(k1, k2, (size_t)(M * 3) * sizeof(uint16_t));
                    int bits = 1; /* bit n of word (m, n / 16): y > 0 */
                    for (int64_t m = 0; m < M; m++)
                        for (int n = 0; n < N; n++)
                            bits &= ((k1[m * 3 + n / 16] >> (n % 16)) & 1) ==
                                    (y1[m * LDY + n] > 0);
                    TU_CHECK(bits, "%s: the mask bits are not y > 0", what);
                }
                TU_CHECK(same, "%s: 1 and 2 threads differ", what);
                cases++;
            }
        }
    }
    printf("  epilogues: %d cases (7 storage types x 2 shapes, the row types on both paths, x %d "
           "epilogues) within 2e-5, 1 and 2 threads identical\n", cases, E_COUNT);
    TU_CHECK(cases == 7 * 2 * E_COUNT, "only %d cases ran", cases);
    free(W), free(x), free(r), free(t), free(y1), free(y2), free(ref), free(a1), free(a2);
    free(aref), free(buf), free(yc);
}

/* F32 panels (packed once for the context's kernel set) give the F32 rows' bits on every path:
 * the GEMM over several K chunks and N blocks of every set (kc <= 384, nc <= 1536) and edge
 * tiles, with and without an epilogue, on 1 and 2 threads; a few rows per sequence (the
 * matrix-vector kernels); a context with bf16 products; panels packed for another kernel set
 * (the rows serve).  A wrong panel order or a chunk read from the wrong place changes sums.
 * The panels' product without epilogue is also held to x W^T + b in double (tolerance 1e-5 of
 * sum_k |x W| + |b|: float sums of 803 terms), every output finite (a NaN fails), so that two
 * paths failing alike cannot pass. */
static void f32_panels(attn_ctx *c1, attn_ctx *c2) {
    enum { NB = 1560 + 13, KB = 800 + 3, MB = 17 };
    float *W = malloc((size_t)NB * KB * sizeof(float)), *x = malloc(MB * KB * sizeof(float));
    float *b = malloc(NB * sizeof(float)), *y0 = malloc(MB * NB * sizeof(float));
    float *y1 = malloc(MB * NB * sizeof(float));
    size_t bytes = 0;
    TU_STATUS(attn__weight_size(c1, ATTN__W_F32P, NB, KB, &bytes), ATTN_OK, c1);
    unsigned char *buf = malloc(bytes);
    tu_fill(W, (size_t)NB * KB, 21, -0.2f, 0.2f);
    tu_fill(x, MB * KB, 22, -1, 1);
    tu_fill(b, NB, 23, -0.5f, 0.5f);
    attn__weight wp;
    TU_STATUS(attn__weight_pack(c1, ATTN__W_F32P, W, NB, KB, buf, "test", &wp), ATTN_OK, c1);
    wp.bias = b;
    const attn__weight wr = attn__weight_f32(W, b, NB, KB);
    const attn__epi gelu = {ATTN__EPI_ACT, ATTN_ACT_GELU, NULL, NULL, NULL, NULL, NULL, NULL};
    int cases = 0;
    attn_ctx *cs[2] = {c1, c2};
    const int64_t MT[3][2] = {{MB, MB}, {5, MB}, {3, 1}}; /* GEMM, a sequence's last rows, rows */
    for (int ci = 0; ci < 2; ci++)
        for (int mi = 0; mi < 3; mi++)
            for (int ei = 0; ei < 2; ei++) {
                const int64_t M = MT[mi][0], T = MT[mi][1];
                const attn__epi *e = ei ? &gelu : NULL;
                for (int64_t i = 0; i < M * NB; i++) y0[i] = y1[i] = NAN;
                TU_STATUS(attn__matmul(cs[ci], &wr, x, KB, M, T, e, y0, NB), ATTN_OK, cs[ci]);
                TU_STATUS(attn__matmul(cs[ci], &wp, x, KB, M, T, e, y1, NB), ATTN_OK, cs[ci]);
                TU_CHECK(!memcmp(y0, y1, (size_t)(M * NB) * sizeof(float)),
                         "F32 panels: %d threads, M %lld T %lld, %s: not the rows' bits",
                         ci + 1, (long long)M, (long long)T, ei ? "GELU" : "no epilogue");
                if (ei == 0) { /* against double: x W^T + b */
                    int bad = 0;
                    for (int64_t m = 0; m < M && !bad; m++)
                        for (int64_t n = 0; n < NB; n++) {
                            double s = b[n], a = fabs((double)b[n]);
                            for (int64_t k = 0; k < KB; k++) {
                                const double p = (double)x[m * KB + k] * W[n * KB + k];
                                s += p, a += fabs(p);
                            }
                            const double got = y1[m * NB + n];
                            if (!(fabs(got - s) <= 1e-5 * a)) {
                                TU_CHECK(0, "F32 panels: y[%lld][%lld] = %g, double gives %g "
                                         "(M %lld T %lld, %d threads)", (long long)m,
                                         (long long)n, got, s, (long long)M, (long long)T, ci + 1);
                                bad = 1;
                                break;
                            }
                        }
                }
                cases++;
            }
    /* packed for another set: the rows (a header naming the plain C table) */
    attn__f32p other = *(const attn__f32p *)wp.data;
    other.kernel = other.kernel == attn__gemm_kernel_ref() ? (const void *)&other
                                                           : (const void *)attn__gemm_kernel_ref();
    other.panels = NULL; /* must not be read */
    attn__weight wo = wp;
    wo.data = &other;
    TU_STATUS(attn__matmul(c2, &wr, x, KB, MB, MB, NULL, y0, NB), ATTN_OK, c2);
    TU_STATUS(attn__matmul(c2, &wo, x, KB, MB, MB, NULL, y1, NB), ATTN_OK, c2);
    TU_CHECK(!memcmp(y0, y1, (size_t)(MB * NB) * sizeof(float)),
             "F32 panels of another kernel set: not the rows' bits");
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = 2, p.flags = ATTN_CTX_BF16_MATMUL;
    attn_ctx *cb = NULL;
    TU_STATUS(attn_ctx_create(&p, &cb), ATTN_OK, NULL);
    if (cb) {
        TU_STATUS(attn__matmul(cb, &wr, x, KB, MB, MB, NULL, y0, NB), ATTN_OK, cb);
        TU_STATUS(attn__matmul(cb, &wp, x, KB, MB, MB, NULL, y1, NB), ATTN_OK, cb);
        TU_CHECK(!memcmp(y0, y1, (size_t)(MB * NB) * sizeof(float)),
                 "F32 panels on a bf16 context: not the rows' bits");
        attn_ctx_free(cb);
    }
    TU_STATUS(attn__weight_trainable(c1, &wp, "w"), ATTN_E_UNSUPPORTED, c1);
    printf("  F32 panels: %d cases (GEMM over %d x %d, a sequence's last rows, the matrix-vector "
           "rows; 1 and 2 threads; with GELU and without), another set, a bf16 context: the F32 "
           "rows' bits\n", cases, NB, KB);
    free(W), free(x), free(b), free(y0), free(y1), free(buf);
}

/* attn__matmul_n: each part exactly a single product with its residual (the same bits). */
static void several(attn_ctx *c) {
    float *W = malloc(3 * N * K * sizeof(float)), x[4 * K], r[4 * N];
    tu_fill(W, 3 * N * K, 7, -0.2f, 0.2f);
    tu_fill(x, 4 * K, 8, -1, 1);
    tu_fill(r, 4 * N, 9, -1, 1);
    unsigned char *q = malloc(BUF);
    attn__weight w[3];
    w[0] = attn__weight_f32(W, NULL, N, K);
    w[1] = attn__weight_f32(W + N * K, NULL, N, K);
    if (!make(c, ATTN_Q_Q8_0, W + 2 * N * K, q, &w[2])) return;
    const attn__weight *wp[3] = {&w[0], &w[1], &w[2]};
    float y[3][4 * N], one[4 * N];
    float *yp[3] = {y[0], y[1], y[2]};
    const int64_t ldy[3] = {N, N, N};
    const float *rp[3] = {NULL, r, NULL};
    TU_STATUS(attn__matmul_n(c, 3, wp, x, K, 4, 1, yp, ldy, rp), ATTN_OK, c);
    for (int i = 0; i < 3; i++) {
        const attn__epi e = attn__epi_res(rp[i]);
        TU_STATUS(attn__matmul(c, &w[i], x, K, 4, 1, &e, one, N), ATTN_OK, c);
        TU_CHECK(!memcmp(one, y[i], sizeof one), "attn__matmul_n part %d differs", i);
    }
    free(W), free(q);
}

/* attn__matmul_bwd against the double reference; acc adds to dx; a Q8_0 weight is refused. */
static void backward(attn_ctx *c) {
    enum { M = 5, Nb = 7, Kb = 9 };
    float W[Nb * Kb], x[M * Kb], dy[M * Nb], dx[M * Kb], dW[Nb * Kb] = {0}, db[Nb] = {0};
    double Wd[Nb * Kb], xd[M * Kb], dyd[M * Nb], dxd[M * Kb], dWd[Nb * Kb] = {0}, dbd[Nb] = {0};
    tu_fill(W, Nb * Kb, 10, -1, 1);
    tu_fill(x, M * Kb, 11, -1, 1);
    tu_fill(dy, M * Nb, 12, -1, 1);
    for (int i = 0; i < Nb * Kb; i++) Wd[i] = W[i];
    for (int i = 0; i < M * Kb; i++) xd[i] = x[i];
    for (int i = 0; i < M * Nb; i++) dyd[i] = dy[i];
    attn__linear_bwd_ref_f64(xd, Kb, Wd, dyd, Nb, dxd, Kb, dWd, dbd, M, Kb, Nb);
    float dxr[M * Kb], dWr[Nb * Kb], dbr[Nb];
    for (int i = 0; i < M * Kb; i++) dxr[i] = (float)dxd[i];
    for (int i = 0; i < Nb * Kb; i++) dWr[i] = (float)dWd[i];
    for (int i = 0; i < Nb; i++) dbr[i] = (float)dbd[i];
    TU_STATUS(attn__matmul_bwd(c, ATTN__W32(W, NULL, Nb, Kb), x, Kb, dy, Nb, dx, Kb, 0, NULL, dW,
                               db, M),
              ATTN_OK, c);
    TU_CHECK(tu_close("bwd dx", dx, dxr, M * Kb, 1e-6), "dx");
    TU_CHECK(tu_close("bwd dW", dW, dWr, Nb * Kb, 1e-6), "dW");
    TU_CHECK(tu_close("bwd db", db, dbr, Nb, 1e-6), "db");
    TU_STATUS(attn__matmul_bwd(c, ATTN__W32(W, NULL, Nb, Kb), x, Kb, dy, Nb, dx, Kb, 1, NULL, NULL,
                               NULL, M),
              ATTN_OK, c);
    for (int i = 0; i < M * Kb; i++) dxr[i] *= 2; /* accumulated: dx + dy W */
    TU_CHECK(tu_close("bwd dx accumulated", dx, dxr, M * Kb, 1e-6), "dx acc");
    unsigned char q[N * K * 2];
    attn__weight wq;
    float Wq[N * K];
    float xq[K] = {0}, dyq[N] = {0}, y[N];
    tu_fill(Wq, N * K, 13, -1, 1);
    if (!make(c, ATTN_Q_Q8_0, Wq, q, &wq)) return;
    TU_STATUS(attn__matmul_bwd(c, &wq, xq, K, dyq, N, NULL, K, 0, NULL, NULL, NULL, 1),
              ATTN_E_UNSUPPORTED, c);
    TU_CHECK(strstr(attn_ctx_errmsg(c), "Q8_0") != NULL, "the refusal names the type: %s",
             attn_ctx_errmsg(c));
    attn__weight bad = {99, q, N, K, NULL, 0};
    TU_STATUS(attn__matmul(c, &bad, xq, K, 1, 1, NULL, y, N), ATTN_E_UNSUPPORTED, c);
    TU_STATUS(attn__weight_check(c, &bad, N, K, "w"), ATTN_E_UNSUPPORTED, c);
    const attn__weight panels = {ATTN__W_BF16P, q, N, K, NULL, 0};
    TU_STATUS(attn__weight_rows(c, &panels, (const int32_t[]){0}, 1, y), ATTN_E_UNSUPPORTED, c);
    TU_STATUS(attn__weight_check(c, &panels, N, K, "w"), ATTN_E_UNSUPPORTED, c);
    TU_STATUS(attn__matmul_bwd(c, ATTN__W32(W, NULL, Nb, Kb), x, Kb, dy, Nb, dx, Kb, 1,
                               &(attn__row_epi){NULL, NULL}, NULL, NULL, M),
              ATTN_E_INVALID, c);
}

int main(void) {
    attn_ctx *c1 = tu_ctx(1), *c2 = tu_ctx(2);
    if (!c1 || !c2) return 1;
    epilogues(c1, c2);
    f32_panels(c1, c2);
    several(c2);
    backward(c2);
    attn_ctx_free(c1);
    attn_ctx_free(c2);
    return tu_finish("test_matmul");
}
