/* Plain C reference kernels: the readable definition of each op and the test oracle.
 * Dot products accumulate in double so the oracle is more exact than any fast kernel. */
#include <math.h>
#include <string.h>

#include "../kernels.h"

/* ---- Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") ------ */
void attn__philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

int attn_dropout_keep(uint64_t seed, uint64_t offset, uint64_t index, float p) {
    if (!(p > 0.0f)) return 1;
    uint64_t blk = index >> 2;
    uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)offset,
                       (uint32_t)(offset >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
    attn__philox(ctr, key, out);
    float u = (float)(out[index & 3] >> 8) * (1.0f / 16777216.0f); /* [0, 1) on 24 bits */
    return u >= p;
}

/* ---- linear ------------------------------------------------------------------------- */
void attn__linear_ref(const float *x, int64_t ldx, const float *W, const float *b, float *y,
                      int64_t ldy, int64_t M, int64_t K, int64_t N) {
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx;
        float *yr = y + m * ldy;
        for (int64_t n = 0; n < N; n++) {
            const float *wr = W + n * K;
            double acc = b ? (double)b[n] : 0.0;
            for (int64_t k = 0; k < K; k++) acc += (double)xr[k] * (double)wr[k];
            yr[n] = (float)acc;
        }
    }
}

/* ---- activations --------------------------------------------------------------------- */
float attn__act1(attn_activation act, float x) {
    switch (act) {
    case ATTN_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case ATTN_ACT_GELU: return (float)(0.5 * (double)x * (1.0 + erf((double)x * 0.70710678118654752440)));
    case ATTN_ACT_GELU_TANH: {
        double xd = x, inner = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
        return (float)(0.5 * xd * (1.0 + tanh(inner)));
    }
    case ATTN_ACT_TANH: return tanhf(x);
    }
    return x;
}

void attn__act_ref(attn_activation act, const float *x, int64_t ldx, float *y, int64_t ldy,
                   int64_t M, int64_t N) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) y[m * ldy + n] = attn__act1(act, x[m * ldx + n]);
}

/* ---- layer norm ---------------------------------------------------------------------- */
void attn__layer_norm_ref(const float *x, int64_t ldx, const float *w, const float *b,
                          float eps, float *y, int64_t ldy, int64_t M, int64_t E) {
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx;
        float *yr = y + m * ldy;
        double mean = 0, var = 0;
        for (int64_t e = 0; e < E; e++) mean += xr[e];
        mean /= (double)E;
        for (int64_t e = 0; e < E; e++) var += ((double)xr[e] - mean) * ((double)xr[e] - mean);
        var /= (double)E; /* biased, as PyTorch */
        double rstd = 1.0 / sqrt(var + (double)eps);
        for (int64_t e = 0; e < E; e++) {
            double v = ((double)xr[e] - mean) * rstd;
            if (w) v *= w[e];
            if (b) v += b[e];
            yr[e] = (float)v;
        }
    }
}

/* ---- softmax ------------------------------------------------------------------------- */
float attn__softmax_row(const float *x, float *y, int64_t n) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        if (x[j] > mx) mx = x[j];
    if (mx == -INFINITY) { /* every entry masked: zeros, never NaN */
        for (int64_t j = 0; j < n; j++) y[j] = 0.0f;
        return -INFINITY;
    }
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
        float e = x[j] == -INFINITY ? 0.0f : expf(x[j] - mx);
        y[j] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < n; j++) y[j] *= inv;
    return mx + (float)log(sum);
}

/* ---- scaled dot-product attention ------------------------------------------------------ */
void attn__sdpa_ref(const attn__sdpa_args *a, float *scratch) {
    float *s = scratch, *p = scratch + a->S;
    int64_t group = a->H / a->Hkv;
    float keep_scale = a->dropout_p > 0.0f ? 1.0f / (1.0f - a->dropout_p) : 1.0f;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->H; h++) {
            int64_t hk = h / group;
            const float *kb = a->k + b * a->ks[0] + hk * a->ks[1];
            const float *vb = a->v + b * a->vs[0] + hk * a->vs[1];
            for (int64_t i = 0; i < a->L; i++) {
                const float *qi = a->q + b * a->qs[0] + h * a->qs[1] + i * a->qs[2];
                /* last visible key for causal masks */
                int64_t jmax = a->S - 1;
                if (a->causal == ATTN_CAUSAL_TOP_LEFT) jmax = i;
                else if (a->causal == ATTN_CAUSAL_BOTTOM_RIGHT) jmax = i + a->S - a->L;
                for (int64_t j = 0; j < a->S; j++) {
                    if (j > jmax) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    const float *kj = kb + j * a->ks[2];
                    double acc = 0;
                    for (int64_t d = 0; d < a->D; d++)
                        acc += (double)qi[d * a->qs[3]] * (double)kj[d * a->ks[3]];
                    float sc = (float)acc * a->scale;
                    for (int m = 0; m < 2; m++)
                        if (a->mask[m].kind != ATTN_MASK_NONE && j < a->mask_ncols[m])
                            sc += attn__mask_at(&a->mask[m], b, h, i, j);
                    s[j] = sc;
                }
                float lse = attn__softmax_row(s, p, a->S);
                if (a->lse) a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] = lse;
                if (a->dropout_p > 0.0f) {
                    uint64_t base = (uint64_t)(((b * a->H + h) * a->L + i) * a->S);
                    for (int64_t j = 0; j < a->S; j++)
                        p[j] = attn_dropout_keep(a->seed, a->offset, base + (uint64_t)j,
                                                 a->dropout_p)
                                   ? p[j] * keep_scale
                                   : 0.0f;
                }
                if (a->w) {
                    float *wr = a->w + b * a->ws[0] + h * a->ws[1] + i * a->ws[2];
                    for (int64_t j = 0; j < a->S; j++) wr[j * a->ws[3]] = p[j];
                }
                float *oi = a->o + b * a->os[0] + h * a->os[1] + i * a->os[2];
                for (int64_t e = 0; e < a->Dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < a->S; j++)
                        if (p[j] != 0.0f) acc += (double)p[j] * (double)vb[j * a->vs[2] + e * a->vs[3]];
                    oi[e * a->os[3]] = (float)acc;
                }
            }
        }
}
