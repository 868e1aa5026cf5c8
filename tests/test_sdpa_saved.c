/* attn_sdpa_backward_saved (the backward from the forward's saved out and lse) against
 * attn_sdpa_backward (which recomputes them) through the public API: the same bits where the
 * forward runs the fused kernels, masks, GQA, causal, dropout and strided outputs included;
 * bad saved tensors refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

int main(void) {
    attn_ctx *ctx = tu_ctx(2);
    uint64_t rs = 99;
    const int64_t lens[] = {64, 65, 100, 130, 200};
    for (int t = 0; t < 24 && !tu_failures; t++) {
        int64_t B = 1 + (int64_t)(tu_rand(&rs) % 2), Hkv = 1 + (int64_t)(tu_rand(&rs) % 2);
        int64_t H = Hkv * (1 + (int64_t)(tu_rand(&rs) % 2));
        int64_t L = lens[tu_rand(&rs) % 5], S = lens[tu_rand(&rs) % 5], D = 16, Dv = 24;
        size_t nq = (size_t)(B * H * L * D), nk = (size_t)(B * Hkv * S * D),
               nv = (size_t)(B * Hkv * S * Dv), no = (size_t)(B * H * L * Dv),
               nl = (size_t)(B * H * L);
        float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nv), *g = malloc(4 * no),
              *o = malloc(4 * no), *l = malloc(4 * nl);
        float *grads[2][3];
        tu_fill(q, nq, 1 + t, -2, 2), tu_fill(k, nk, 2 + t, -2, 2), tu_fill(v, nv, 3 + t, -1, 1);
        tu_fill(g, no, 4 + t, -1, 1);
        attn_tensor tq = attn_view4(q, B, H, L, D), tk = attn_view4(k, B, Hkv, S, D),
                    tv = attn_view4(v, B, Hkv, S, Dv), tg = attn_view4(g, B, H, L, Dv),
                    to = attn_view4(o, B, H, L, Dv), tl = attn_view3(l, B, H, L);
        unsigned char *kpm = malloc((size_t)(B * S));
        for (int64_t i = 0; i < B * S; i++) kpm[i] = tu_rand(&rs) % 4 != 0;
        int64_t msh[4] = {B, 1, 1, S};
        attn_mask m = {ATTN_MASK_KEEP, attn_tensor_make(kpm, ATTN_BOOL, 4, msh)};
        attn_sdpa_options opt = attn_sdpa_defaults();
        opt.causal = (attn_causal)(t % 3);
        if (t % 4 == 1) opt.dropout_p = 0.2f, opt.seed = 5, opt.offset = (uint64_t)t;
        if (t % 5 == 2) opt.window = 1, opt.window_left = 17, opt.softcap = 4.0f;
        const attn_mask *mp = t % 2 ? &m : NULL;
        TU_STATUS(attn_sdpa(ctx, &tq, &tk, &tv, mp, &opt, &to, NULL, &tl), ATTN_OK, ctx);
        for (int r = 0; r < 2; r++) {
            grads[r][0] = malloc(4 * nq), grads[r][1] = malloc(4 * nk), grads[r][2] = malloc(4 * nv);
            attn_tensor dq = attn_view4(grads[r][0], B, H, L, D),
                        dk = attn_view4(grads[r][1], B, Hkv, S, D),
                        dv = attn_view4(grads[r][2], B, Hkv, S, Dv);
            if (r == 0)
                TU_STATUS(attn_sdpa_backward(ctx, &tq, &tk, &tv, mp, &opt, &tg, &dq, &dk, &dv,
                                             NULL),
                          ATTN_OK, ctx);
            else
                TU_STATUS(attn_sdpa_backward_saved(ctx, &tq, &tk, &tv, mp, &opt, &to, &tl, &tg,
                                                   &dq, &dk, &dv, NULL),
                          ATTN_OK, ctx);
        }
        size_t n[3] = {nq, nk, nv};
        for (int i = 0; i < 3; i++) {
            int nan = 0;
            for (size_t j = 0; j < n[i]; j++) nan |= isnan(grads[1][i][j]);
            TU_CHECK(!nan && !memcmp(grads[0][i], grads[1][i], 4 * n[i]),
                     "case %d: gradient %d differs between the saved and recomputing backward",
                     t, i);
        }
        if (t == 0) { /* refusals */
            attn_tensor dq = attn_view4(grads[1][0], B, H, L, D);
            attn_tensor bad_l = attn_view3(l, B, H, L - 1);
            TU_STATUS(attn_sdpa_backward_saved(ctx, &tq, &tk, &tv, NULL, &opt, &to, NULL, &tg, &dq,
                                               NULL, NULL, NULL),
                      ATTN_E_INVALID, ctx);
            TU_STATUS(attn_sdpa_backward_saved(ctx, &tq, &tk, &tv, NULL, &opt, &to, &bad_l, &tg,
                                               &dq, NULL, NULL, NULL),
                      ATTN_E_SHAPE, ctx);
            o[3] = NAN;
            TU_STATUS(attn_sdpa_backward_saved(ctx, &tq, &tk, &tv, NULL, &opt, &to, &tl, &tg, &dq,
                                               NULL, NULL, NULL),
                      ATTN_E_NONFINITE, ctx);
        }
        for (int r = 0; r < 2; r++) free(grads[r][0]), free(grads[r][1]), free(grads[r][2]);
        free(q), free(k), free(v), free(g), free(o), free(l), free(kpm);
    }
    attn_ctx_free(ctx);
    return tu_finish("test_sdpa_saved");
}
