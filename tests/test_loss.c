/* attn_cross_entropy on the context's threads (src/kernels/loss.c) against the single-thread
 * reference kernel attn__cross_entropy_ref: the loss and every gradient value bit-identical
 * (memcmp) for 1, 2, 3 and 5 threads, with ignored rows, label smoothing, a vocabulary that is
 * not a multiple of any vector width, rows past the thread count and every row ignored (loss
 * 0).  PyTorch agreement is test_fixtures' (cross_entropy cases). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "../src/kernels/kernels.h"

static void one(int64_t N, int64_t C, float ls, int all_ignored) {
    float *x = malloc(sizeof(float) * (size_t)(N * C)), *d0 = malloc(sizeof(float) * (size_t)(N * C)),
          *d1 = malloc(sizeof(float) * (size_t)(N * C));
    int64_t *t = malloc(sizeof(int64_t) * (size_t)N);
    if (!x || !d0 || !d1 || !t) {
        TU_CHECK(0, "out of memory");
        goto done;
    }
    tu_fill(x, (size_t)(N * C), (uint64_t)(N * 131 + C), -6, 6);
    for (int64_t n = 0; n < N; n++) t[n] = all_ignored || n % 5 == 3 ? -100 : (n * 7919) % C;
    float l0 = attn__cross_entropy_ref(x, C, t, N, C, -100, ls, d0, C);
    TU_CHECK(l0 == l0, "reference loss is NaN");
    if (all_ignored) TU_CHECK(l0 == 0.0f, "all ignored: loss %g, expected 0", (double)l0);
    int threads[] = {1, 2, 3, 5};
    for (int i = 0; i < 4; i++) {
        attn_ctx *ctx = tu_ctx(threads[i]);
        if (!ctx) {
            TU_CHECK(0, "no context");
            continue;
        }
        int64_t s2[2] = {N, C}, s1[1] = {N};
        attn_tensor X = attn_tensor_make(x, ATTN_F32, 2, s2);
        attn_tensor D = attn_tensor_make(d1, ATTN_F32, 2, s2);
        attn_tensor T = attn_tensor_make(t, ATTN_I64, 1, s1);
        float l1 = -1.0f;
        memset(d1, 0xff, sizeof(float) * (size_t)(N * C)); /* NaN: every value must be written */
        TU_STATUS(attn_cross_entropy(ctx, &X, &T, -100, ls, &l1, &D), ATTN_OK, ctx);
        TU_CHECK(!memcmp(&l0, &l1, sizeof l0), "N=%lld C=%lld ls=%g threads %d: loss %.9g vs %.9g",
                 (long long)N, (long long)C, (double)ls, threads[i], (double)l1, (double)l0);
        TU_CHECK(!memcmp(d0, d1, sizeof(float) * (size_t)(N * C)),
                 "N=%lld C=%lld ls=%g threads %d: dlogits differ", (long long)N, (long long)C,
                 (double)ls, threads[i]);
        attn_ctx_free(ctx);
    }
done:
    free(x), free(d0), free(d1), free(t);
}

int main(void) {
    one(1, 7, 0.0f, 0);
    one(3, 1001, 0.1f, 0);
    one(37, 1001, 0.0f, 0);
    one(64, 50257, 0.0f, 0);
    one(9, 33, 0.2f, 1);
    return tu_finish("test_loss");
}
