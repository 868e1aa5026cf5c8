/* nn.Linear forward and backward on the fast GEMM (the layers' hot path): float operands, or
 * bf16 operands with float sums on a context created with ATTN_CTX_BF16_MATMUL (gemm_mixed.h).
 * The plain C versions in ref/ (attn__linear_ref, attn__linear_bwd_ref) stay as the oracle. */
#include <string.h>

#include "ew.h"
#include "gemm_mixed.h"
#include "kernels.h"
#include "pool.h"

/* C = op(A) op(B) + beta C (beta 0 or 1) on the context's precision, then epi. */
static attn_status product(attn_ctx *ctx, int transA, int transB, int64_t M, int64_t N,
                           int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float beta, float *C, int64_t ldc, const attn__row_epi *epi) {
    if (ctx->flags & ATTN_CTX_BF16_MATMUL)
        return attn__gemm_mixed(ctx, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc, epi);
    return attn__gemm_epi(ctx, transA, transB, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, epi);
}

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
    return product(ctx, 0, 1, M, N, K, x, ldx, W, K, 0.0f, y, ldy, epi);
}

attn_status attn__linear(attn_ctx *ctx, const float *x, int64_t ldx, const float *W,
                         const float *b, float *y, int64_t ldy, int64_t M, int64_t K,
                         int64_t N) {
    bias_arg ba = {b, N};
    attn__row_epi epi = {add_bias, &ba};
    return attn__linear_epi(ctx, x, ldx, W, b ? &epi : NULL, y, ldy, M, K, N);
}

/* db[n] += sum over the rows m (in order) of dy[m, n], by blocks of columns over the threads
 * (the context's colsum kernel on each thread's columns). */
#define COLSUM_BLOCK 64
typedef struct colsum_job {
    attn__colsum_fn fn;
    const float *dy;
    int64_t lddy;
    float *db;
    int64_t M, N;
} colsum_job;

static void colsum_task(void *arg, int64_t begin, int64_t end, int tid) {
    const colsum_job *j = arg;
    (void)tid;
    const int64_t n0 = begin * COLSUM_BLOCK;
    const int64_t n1 = end * COLSUM_BLOCK < j->N ? end * COLSUM_BLOCK : j->N;
    j->fn(j->dy + n0, j->lddy, j->M, n1 - n0, j->db + n0);
}

attn_status attn__linear_bwd_epi(attn_ctx *ctx, const float *x, int64_t ldx, const float *W,
                                 const float *dy, int64_t lddy, float *dx, int64_t lddx,
                                 const attn__row_epi *dx_epi, float *dW, float *db, int64_t M,
                                 int64_t K, int64_t N) {
    /* dx[M, K] = dy[M, N] W[N, K] */
    if (dx) ATTN_TRY(product(ctx, 0, 0, M, K, N, dy, lddy, W, K, 0.0f, dx, lddx, dx_epi));
    /* dW[N, K] += dy^T x: op(A) = dy^T with dy stored [M, N]; in mixed precision db's column
     * sums are taken while dy^T is packed (the same bits as the pass below) */
    if (dW && db && K > 0 && (ctx->flags & ATTN_CTX_BF16_MATMUL))
        return attn__gemm_mixed_suma(ctx, N, K, M, dy, lddy, 0, x, ldx, 1.0f, dW, K, db);
    if (dW) ATTN_TRY(product(ctx, 1, 0, N, K, M, dy, lddy, x, ldx, 1.0f, dW, K, NULL));
    if (db) { /* column sums, rows in order: the same result for every thread count */
        colsum_job j = {ctx->kern.ew->colsum ? ctx->kern.ew->colsum : attn__colsum_c, dy, lddy,
                        db, M, N};
        const int64_t blocks = (N + COLSUM_BLOCK - 1) / COLSUM_BLOCK;
        if ((double)M * (double)N < 65536.0) colsum_task(&j, 0, blocks, 0);
        else attn__parallel_for(ctx, blocks, colsum_task, &j);
    }
    return ATTN_OK;
}

attn_status attn__linear_bwd(attn_ctx *ctx, const float *x, int64_t ldx, const float *W,
                             const float *dy, int64_t lddy, float *dx, int64_t lddx, float *dW,
                             float *db, int64_t M, int64_t K, int64_t N) {
    return attn__linear_bwd_epi(ctx, x, ldx, W, dy, lddy, dx, lddx, NULL, dW, db, M, K, N);
}

attn_status attn__linear_bwd_acc(attn_ctx *ctx, const float *x, int64_t ldx, const float *W,
                                 const float *dy, int64_t lddy, float *dx, int64_t lddx,
                                 float *dW, float *db, int64_t M, int64_t K, int64_t N) {
    /* dx[M, K] += dy[M, N] W[N, K] */
    if (dx) ATTN_TRY(product(ctx, 0, 0, M, K, N, dy, lddy, W, K, 1.0f, dx, lddx, NULL));
    return attn__linear_bwd(ctx, x, ldx, W, dy, lddy, NULL, lddx, dW, db, M, K, N);
}
