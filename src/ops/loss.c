/* attn_cross_entropy: the loss and, when asked, its gradient with respect to the logits, in one
 * call (what the training loops use). */
#include <math.h>
#include <string.h>

#include "ops_util.h"

attn_status attn_cross_entropy(attn_ctx *ctx, const attn_tensor *logits,
                               const attn_tensor *targets, int64_t ignore_index,
                               float label_smoothing, float *loss, attn_tensor *dlogits) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!loss, ctx, ATTN_E_INVALID, "cross_entropy loss output is missing");
    ATTN_TRY(attn__check(ctx, logits, "cross_entropy logits", ATTN_F32, 2, 2));
    ATTN_FAIL_IF(!targets || !targets->data, ctx, ATTN_E_INVALID,
                 "cross_entropy targets are missing");
    ATTN_FAIL_IF(targets->dtype != ATTN_I64 && targets->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "cross_entropy targets must be I32 or I64");
    ATTN_TRY(attn__check(ctx, targets, "cross_entropy targets", targets->dtype, 1, 1));
    int64_t N = logits->shape[0], C = logits->shape[1];
    ATTN_TRY(attn__check_shape(ctx, targets, "cross_entropy targets", 1, &N));
    ATTN_FAIL_IF(!(label_smoothing >= 0.0f && label_smoothing < 1.0f), ctx, ATTN_E_INVALID,
                 "cross_entropy label_smoothing must be in [0, 1), got %g",
                 (double)label_smoothing);
    if (wanted(dlogits))
        ATTN_TRY(check_out(ctx, dlogits, "cross_entropy dlogits", 2, logits->shape));
    {
        attn_tensor L1 = attn_view1(loss, 1);
        attn__arg o[] = {{dlogits, "dlogits", 0}, {&L1, "loss", 0}},
                  in[] = {{logits, "logits", 0}, {targets, "targets", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_cross_entropy", o, 2, in, 2));
    }
    ATTN_TRY(attn__check_finite(ctx, logits, "cross_entropy logits", 0));
    attn__mark mk = attn__ws_mark(ctx);
    int64_t *tg;
    const float *lp;
    float *dp = NULL;
    int64_t ld, ldd = 0, M;
    attn_status st;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)N, sizeof(int64_t), (void **)&tg));
    for (int64_t n = 0; n < N; n++) {
        const char *base = targets->data;
        int64_t off = n * targets->stride[0];
        tg[n] = targets->dtype == ATTN_I64 ? ((const int64_t *)(const void *)base)[off]
                                           : ((const int32_t *)(const void *)base)[off];
        if (tg[n] != ignore_index && (tg[n] < 0 || tg[n] >= C)) {
            st = attn__fail(ctx, ATTN_E_INVALID,
                            "cross_entropy target %lld (row %lld) out of range [0, %lld) and not "
                            "ignore_index %lld",
                            (long long)tg[n], (long long)n, (long long)C, (long long)ignore_index);
            goto done;
        }
    }
    ATTN_TRYG(attn__rows_in(ctx, logits, &lp, &M, &ld));
    if (wanted(dlogits)) ATTN_TRYG(attn__rows_out_begin(ctx, dlogits, &dp, &ldd));
    ATTN_TRYG(attn__cross_entropy(ctx, lp, ld, tg, N, C, ignore_index, label_smoothing, dp, ldd,
                                  loss));
    if (dp) attn__rows_out_end(dp, dlogits);
done:
    attn__ws_release(ctx, mk);
    return st;
}
