/* nn.Linear forward and backward on the fast GEMM (the layers' hot path).  The plain C
 * versions in ref/ (attn__linear_ref, attn__linear_bwd_ref) stay as the oracle. */
#include <string.h>

#include "kernels.h"

attn_status attn__linear(attn_ctx *ctx, const float *x, int64_t ldx, const float *W,
                         const float *b, float *y, int64_t ldy, int64_t M, int64_t K,
                         int64_t N) {
    /* y = x W^T: op(B) = W^T with W stored [N, K] */
    ATTN_TRY(attn__gemm(ctx, 0, 1, M, N, K, 1.0f, x, ldx, W, K, 0.0f, y, ldy));
    if (b)
        for (int64_t m = 0; m < M; m++) {
            float *yr = y + m * ldy;
            for (int64_t n = 0; n < N; n++) yr[n] += b[n];
        }
    return ATTN_OK;
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
