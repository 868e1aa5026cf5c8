/* The dropout stream of a context's kernel set (ctx->kern.dropout_row: the vectorised one on
 * AVX-512) against the plain C one and against attn_dropout_keep element by element: start
 * indices at every position within a block and across the 2^32-block boundary, offsets and
 * seeds with high bits set, probabilities at the edges of the 24-bit comparison. */
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/kernels.h"
#include "testutil.h"

int main(void) {
    attn_ctx *ctx = tu_ctx(1);
    if (!ctx) return tu_finish("test_dropout");
    attn__dropout_row_fn row = ctx->kern.dropout_row;
    uint64_t rs = 31337;
    const float ps[] = {1e-7f, 0.1f, 0.3f, 0.5f, 0.75f, 0.999999f, 5.9604645e-08f /* 2^-24 */};
    const uint64_t idx0[] = {0, 1, 2, 3, 29, 31, 33, ((uint64_t)1 << 34) - 40,
                             ((uint64_t)1 << 34) - 3, 0xfffffffffffff00ull};
    float a[300], b[300];
    int64_t mismatches = 0, kept = 0, total = 0;
    for (int t = 0; t < 400; t++) {
        uint64_t seed = tu_rand(&rs), offset = t % 3 ? tu_rand(&rs) : (uint64_t)t;
        uint64_t idx = idx0[t % 10] + (t >= 200 ? tu_rand(&rs) % 1000 : 0);
        int64_t n = 1 + (int64_t)(tu_rand(&rs) % 299);
        float p = ps[t % 7], sc = 1.0f / (1.0f - p);
        row(seed, offset, idx, n, p, sc, a);
        attn__dropout_row_c(seed, offset, idx, n, p, sc, b);
        for (int64_t j = 0; j < n; j++) {
            float want = attn_dropout_keep(seed, offset, idx + (uint64_t)j, p) ? sc : 0.0f;
            mismatches += a[j] != want || b[j] != want;
            kept += a[j] != 0.0f;
            total++;
        }
    }
    TU_CHECK(mismatches == 0, "%lld of %lld dropout multipliers differ from attn_dropout_keep",
             (long long)mismatches, (long long)total);
    TU_CHECK(kept > total / 4 && kept < total, "kept %lld of %lld", (long long)kept,
             (long long)total);
    /* the kept fraction at p = 0.3 over 2^20 elements: 0.7 within 5 standard deviations */
    {
        int64_t n = 1 << 20, k = 0;
        float *buf = malloc(sizeof(float) * (size_t)n);
        row(7, 0, 5, n, 0.3f, 1.0f, buf);
        for (int64_t j = 0; j < n; j++) k += buf[j] != 0.0f;
        double frac = (double)k / (double)n, sd = 0.000448; /* sqrt(0.21 / 2^20) */
        TU_CHECK(frac > 0.7 - 5 * sd && frac < 0.7 + 5 * sd, "kept fraction %.5f", frac);
        free(buf);
    }
    attn_ctx_free(ctx);
    return tu_finish("test_dropout");
}
