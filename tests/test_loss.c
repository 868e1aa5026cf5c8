/* attn_cross_entropy on the context's threads (src/kernels/loss.c) against the single-thread
 * reference kernel attn__cross_entropy_ref (in double), with ignored rows, label smoothing, a
 * vocabulary that is not a multiple of any vector width, rows past the thread count and every
 * row ignored (loss 0):
 *  - on the plain C kernels (ATTN__ISA_REF): the loss and every gradient value bit-identical
 *    (memcmp) to the reference, for 1, 2, 3 and 5 threads;
 *  - on the context's own kernels (the AVX-512 or NEON row kernel where the CPU has it): the
 *    same bits for 1, 2, 3 and 5 threads, and within the row kernel's bounds (kernels.h) of the
 *    reference: the loss within 2e-6 (|loss| + 1), each gradient value within 4e-6 of its
 *    magnitude + 1e-7, times 1 / count.  A wrong exponential (a polynomial term off), a lost
 *    lane or a mis-scaled gradient exceeds these by orders of magnitude.
 * PyTorch agreement is test_fixtures' (cross_entropy cases). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "../src/kernels/dispatch.h"
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
    int64_t count = 0;
    for (int64_t n = 0; n < N; n++) count += t[n] != -100;
    const double inv = count ? 1.0 / (double)count : 0.0;
    float lf = 0.0f, *df = malloc(sizeof(float) * (size_t)(N * C));
    for (int isa = tu_emulated() ? 1 : 0; isa < 2 && df; isa++)
        for (int i = 0; i < 4; i++) {
            if (tu_quick(NULL) && i != 0 && i != 2) continue;
            attn_ctx *ctx = tu_ctx(threads[i]);
            if (!ctx) {
                TU_CHECK(0, "no context");
                continue;
            }
            if (isa == 0) attn__isa_set(ctx, ATTN__ISA_REF);
            int64_t s2[2] = {N, C}, s1[1] = {N};
            attn_tensor X = attn_tensor_make(x, ATTN_F32, 2, s2);
            attn_tensor D = attn_tensor_make(d1, ATTN_F32, 2, s2);
            attn_tensor T = attn_tensor_make(t, ATTN_I64, 1, s1);
            float l1 = -1.0f;
            memset(d1, 0xff, sizeof(float) * (size_t)(N * C)); /* NaN: every value must be written */
            TU_STATUS(attn_cross_entropy(ctx, &X, &T, -100, ls, &l1, &D), ATTN_OK, ctx);
            const float *want = isa == 0 || i == 0 ? d0 : df, *wl = isa == 0 || i == 0 ? &l0 : &lf;
            if (isa == 1 && i == 0) { /* the context's kernels: within bounds of the reference */
                TU_CHECK(fabs((double)l1 - (double)l0) <= 2e-6 * (fabs((double)l0) + 1),
                         "N=%lld C=%lld ls=%g: loss %.9g vs reference %.9g", (long long)N,
                         (long long)C, (double)ls, (double)l1, (double)l0);
                int64_t bad = 0;
                for (int64_t e = 0; e < N * C; e++)
                    bad += !(fabs((double)d1[e] - (double)d0[e]) <=
                             4e-6 * fabs((double)d0[e]) + 1e-7 * inv);
                TU_CHECK(!bad, "N=%lld C=%lld ls=%g: %lld gradient values outside the bound",
                         (long long)N, (long long)C, (double)ls, (long long)bad);
                lf = l1;
                memcpy(df, d1, sizeof(float) * (size_t)(N * C));
                attn_ctx_free(ctx);
                continue;
            }
            TU_CHECK(!memcmp(wl, &l1, sizeof l1), "N=%lld C=%lld ls=%g %s threads %d: loss %.9g vs %.9g",
                     (long long)N, (long long)C, (double)ls, isa ? "own kernels" : "ref",
                     threads[i], (double)l1, (double)*wl);
            TU_CHECK(!memcmp(want, d1, sizeof(float) * (size_t)(N * C)),
                     "N=%lld C=%lld ls=%g %s threads %d: dlogits differ", (long long)N,
                     (long long)C, (double)ls, isa ? "own kernels" : "ref", threads[i]);
            attn_ctx_free(ctx);
        }
    free(df);
done:
    free(x), free(d0), free(d1), free(t);
}

int main(void) {
    /* ATTN_TEST_QUICK (an emulator): the context's kernels alone, on 1 and 3 threads, and
     * fewer rows of the large vocabulary */
    const int quick = tu_quick("test_loss");
    one(1, 7, 0.0f, 0);
    one(3, 1001, 0.1f, 0);
    one(37, 1001, 0.0f, 0);
    one(quick ? 5 : 64, 50257, 0.0f, 0);
    one(9, 33, 0.2f, 1);
    return tu_finish("test_loss");
}
