/* The oracle of the bf16 attention forward (contract in flash.h, attn__sdpa_bf16_ref): the
 * fp32 reference's row-at-a-time definition with bf16 inputs, where the one rounding that bf16
 * storage adds on top of the inputs' own, that of the weights before their product with V,
 * is written out.  Sums run in double so that the reference adds no rounding of its own. */
#include <math.h>

#include "../flash.h"

/* Score of key j for query row (b, h, i), with the features of the fp32 reference (ref_impl.h)
 * in its order: scale q.k (soft-capped when a->softcap > 0), ALiBi, the masks; -inf outside
 * the causal mask and the sliding window. */
static float score(const attn__sdpa_args *a, const attn__bf16 *q, const attn__bf16 *k,
                   int64_t b, int64_t h, int64_t i, int64_t j) {
    int64_t lo, hi, hk = h / (a->H / a->Hkv);
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S, i, &lo,
                     &hi);
    if (j < lo || j > hi) return -INFINITY;
    const attn__bf16 *qi = q + b * a->qs[0] + h * a->qs[1] + i * a->qs[2];
    const attn__bf16 *kj = k + b * a->ks[0] + hk * a->ks[1] + j * a->ks[2];
    double acc = 0;
    for (int64_t d = 0; d < a->D; d++)
        acc += (double)attn__bf16_to_f32(qi[d * a->qs[3]]) *
               (double)attn__bf16_to_f32(kj[d * a->ks[3]]);
    float s = (float)acc * a->scale;
    if (a->softcap > 0) s = a->softcap * tanhf(s / a->softcap);
    if (a->alibi) {
        int64_t dist = i + a->S - a->L - j;
        s -= a->alibi[h] * (float)(dist < 0 ? -dist : dist);
    }
    for (int m = 0; m < 2; m++)
        if (a->mask[m].kind != ATTN_MASK_NONE && j < a->mask_ncols[m])
            s += attn__mask_at(&a->mask[m], b, h, i, j);
    return s;
}

void attn__sdpa_bf16_ref(const attn__sdpa_args *a, const attn__bf16 *q, const attn__bf16 *k,
                         const attn__bf16 *v, float *scratch) {
    float *s = scratch, *p = scratch + a->S;
    float keep_scale = a->dropout_p > 0.0f ? 1.0f / (1.0f - a->dropout_p) : 1.0f;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->H; h++) {
            const attn__bf16 *vb = v + b * a->vs[0] + h / (a->H / a->Hkv) * a->vs[1];
            for (int64_t i = 0; i < a->L; i++) {
                float m = -INFINITY;
                for (int64_t j = 0; j < a->S; j++) {
                    s[j] = score(a, q, k, b, h, i, j);
                    m = s[j] > m ? s[j] : m;
                }
                /* e_j = exp(s_j - m) in float, l = sum e_j; the weight that multiplies v_j is
                 * e_j times the dropout multiplier, rounded to bf16 */
                double l = 0;
                uint64_t base = a->drop_base + (uint64_t)(((b * a->H + h) * a->L + i) * a->S);
                for (int64_t j = 0; j < a->S; j++) {
                    float e = m == -INFINITY || s[j] == -INFINITY ? 0.0f : expf(s[j] - m);
                    l += e;
                    if (a->dropout_p > 0.0f)
                        e = attn_dropout_keep(a->seed, a->offset, base + (uint64_t)j,
                                              a->dropout_p)
                                ? e * keep_scale
                                : 0.0f;
                    p[j] = attn__bf16_round(e);
                }
                float *oi = a->o + b * a->os[0] + h * a->os[1] + i * a->os[2];
                for (int64_t e = 0; e < a->Dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < a->S; j++)
                        if (p[j] != 0)
                            acc += (double)p[j] *
                                   (double)attn__bf16_to_f32(vb[j * a->vs[2] + e * a->vs[3]]);
                    oi[e * a->os[3]] = l > 0 ? (float)(acc / l) : 0.0f;
                }
                if (a->lse)
                    a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] =
                        l > 0 ? (float)(m + log(l)) : -INFINITY;
            }
        }
}
