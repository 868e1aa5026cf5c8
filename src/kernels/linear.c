/* nn.Linear forward and backward on the fast GEMM (the layers' hot path).  The plain C
 * versions in ref/ (attn__linear_ref, attn__linear_bwd_ref) stay as the oracle. */
#include <string.h>

#include "kernels.h"

typedef struct bias_arg {
    const float *b;
    int64_t n;
} bias_arg;

static void add_bias(void *arg, float *y, int64_t ldy, int64_t i0, int64_t rows) {
    const bias_arg *a = arg;
    (void)i0;
    for (int64_t m = 0; m < rows; m++) {
        float *yr = y + m * ldy;
        for (int64_t n = 0; n < a->n; n++) yr[n] += a->b[n];
    }
}

attn_status attn__linear_epi(attn_ctx *ctx, const float *x, int64_t ldx, const float *W,
                             const attn__row_epi *epi, float *y, int64_t ldy, int64_t M,
                             int64_t K, int64_t N) {
    /* y = x W^T: op(B) = W^T with W stored [N, K] */
    return attn__gemm_epi(ctx, 0, 1, M, N, K, 1.0f, x, ldx, W, K, 0.0f, y, ldy, epi);
}

attn_status attn__linear(attn_ctx *ctx, const float *x, int64_t ldx, const float *W,
                         const float *b, float *y, int64_t ldy, int64_t M, int64_t K,
                         int64_t N) {
    bias_arg ba = {b, N};
    attn__row_epi epi = {add_bias, &ba};
    return attn__linear_epi(ctx, x, ldx, W, b ? &epi : NULL, y, ldy, M, K, N);
}

attn_status attn__linear_bwd(attn_ctx *ctx, const float *x, int64_t ldx, const float *W,
                             const float *dy, int64_t lddy, float *dx, int64_t lddx, float *dW,
                             float *db, int64_t M, int64_t K, int64_t N) {
    /* dx[M, K] = dy[M, N] W[N, K] */
    if (dx) ATTN_TRY(attn__gemm(ctx, 0, 0, M, K, N, 1.0f, dy, lddy, W, K, 0.0f, dx, lddx));
    /* dW[N, K] += dy^T x: op(A) = dy^T with dy stored [M, N] */
    if (dW) ATTN_TRY(attn__gemm(ctx, 1, 0, N, K, M, 1.0f, dy, lddy, x, ldx, 1.0f, dW, K));
    if (db) /* column sums in a fixed order: the same result for every thread count */
        for (int64_t m = 0; m < M; m++) {
            const float *r = dy + m * lddy;
            for (int64_t n = 0; n < N; n++) db[n] += r[n];
        }
    return ATTN_OK;
}
