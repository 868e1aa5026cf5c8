/* Scaled dot-product attention for the ops and the layers, with the contract of
 * attn__sdpa_ref / attn__sdpa_bwd_ref (kernels.h), and the one choice of its kernel
 * (attn__sdpa_path, attn__sdpa_bwd_path).  A few queries over many keys run on the split-KV
 * decode kernels (decode.c).  Without a weights output the forward and the backward run on the
 * fused kernels (flash.c: tiled online softmax, never an L x S matrix) once the problem fills a
 * tile.  Small problems, and the forward when the weights are wanted, run here: one row of
 * scores at a time, in float with unit-stride inner loops, in parallel over (batch, head):
 * every result is computed in the same order whatever the thread count.  Views whose last
 * dimension is not contiguous, and the mask gradient, go to the reference kernels. */
#include <math.h>
#include <string.h>

#include "decode.h"
#include "flash.h"
#include "kernels.h"
#include "pool.h"
#include "sdpa_mixed.h"

typedef struct job {
    const attn__sdpa_args *a;
    const attn__sdpa_grads *g;
    float *scratch;     /* per chunk: 4 (forward) or 5 (backward) * S floats */
    int64_t per_chunk;
    attn__dropout_row_fn drop; /* the context's dropout stream */
} job;

/* Where the fused kernels beat the row kernels here, measured with attn bench (B = 64, H = 4,
 * D = 24, 32 and 64, causal or not, 2 threads, Sapphire Rapids, median of 15-21): the forward
 * from L x S = 4 x 4 up (1.7x at 4 x 4, 3.7x at 17 x 17, 6.7x at 50 x 50; at 2 x 2 the rows
 * are 10-30% faster), the backward from 12 x 12 up (1.3x at 12 x 12, 1.7x at 17 x 17, 4.3x at
 * 50 x 50; at 8 x 8 the rows are 1.4-2x faster, at 2 x 2 7x: the fused backward's per-tile
 * setup dominates). */
static int use_flash_fwd(const attn__sdpa_args *a) { return a->L * a->S >= 4 * 4; }
static int use_flash_bwd(const attn__sdpa_args *a) { return a->L * a->S >= 12 * 12; }

static int unit_inner(const attn__sdpa_args *a) {
    return a->qs[3] == 1 && a->ks[3] == 1 && a->vs[3] == 1 && a->os[3] == 1 &&
           (!a->w || a->ws[3] == 1);
}

/* The score features of row i of head (b, h) on s[lo..hi] (there: scale q.k; -inf outside):
 * the soft cap (dt, when not NULL, receives its derivative 1 - tanh^2), ALiBi, and the masks
 * (their columns below mask_ncols).  Shared by the row kernels here and sdpa_mixed.c. */
void attn__sdpa_row_features(const attn__sdpa_args *a, int64_t b, int64_t h, int64_t i,
                             int64_t lo, int64_t hi, float *s, float *dt) {
    if (a->softcap > 0)
        for (int64_t j = lo; j <= hi; j++) {
            float t = tanhf(s[j] / a->softcap);
            s[j] = a->softcap * t;
            if (dt) dt[j] = 1.0f - t * t;
        }
    if (a->alibi)
        for (int64_t j = lo; j <= hi; j++) {
            int64_t d = i + a->S - a->L - j;
            s[j] -= a->alibi[h] * (float)(d < 0 ? -d : d);
        }
    for (int m = 0; m < 2; m++)
        if (a->mask[m].kind != ATTN_MASK_NONE) {
            int64_t nc = a->mask_ncols[m] < hi + 1 ? a->mask_ncols[m] : hi + 1;
            for (int64_t j = lo; j < nc; j++)
                if (s[j] != -INFINITY) s[j] += attn__mask_at(&a->mask[m], b, h, i, j);
        }
}

/* Scores of row i of head (b, h): s[j] = cap(scale q_i . k_j) - slope |i + S - L - j| + masks,
 * -inf outside the causal mask and the window (attn__sdpa_args).  Under a soft cap, dt (may be
 * NULL) receives its derivative 1 - tanh^2 for the visible keys. */
static void scores(const attn__sdpa_args *a, int64_t b, int64_t h, int64_t i, float *s,
                   float *dt) {
    int64_t hk = h / (a->H / a->Hkv);
    const float *qi = a->q + b * a->qs[0] + h * a->qs[1] + i * a->qs[2];
    const float *kb = a->k + b * a->ks[0] + hk * a->ks[1];
    int64_t lo, hi; /* visible keys [lo, hi] */
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S, i, &lo,
                     &hi);
    for (int64_t j = 0; j < lo && j < a->S; j++) s[j] = -INFINITY;
    for (int64_t j = lo; j <= hi; j++) {
        const float *kj = kb + j * a->ks[2];
        float acc = 0.0f;
        for (int64_t d = 0; d < a->D; d++) acc += qi[d] * kj[d];
        s[j] = acc * a->scale;
    }
    for (int64_t j = hi + 1 > lo ? hi + 1 : lo; j < a->S; j++) s[j] = -INFINITY;
    attn__sdpa_row_features(a, b, h, i, lo, hi, s, dt);
}

/* p = softmax(s) (zeros when every entry is -inf); returns the log-sum-exp. */
static float softmax(const float *s, float *p, int64_t n) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    if (mx == -INFINITY) {
        memset(p, 0, (size_t)n * sizeof(float));
        return -INFINITY;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float e = s[j] == -INFINITY ? 0.0f : expf(s[j] - mx);
        p[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; j++) p[j] *= inv;
    return mx + logf(sum);
}

/* keep[j]: the dropout multiplier of (b, h, i, j): 0 or 1/(1-p) (1 without dropout). */
static void keep_row(const job *jb, int64_t b, int64_t h, int64_t i, float *keep) {
    const attn__sdpa_args *a = jb->a;
    if (!(a->dropout_p > 0.0f)) {
        for (int64_t j = 0; j < a->S; j++) keep[j] = 1.0f;
        return;
    }
    uint64_t base = a->drop_base + (uint64_t)(((b * a->H + h) * a->L + i) * a->S);
    jb->drop(a->seed, a->offset, base, a->S, a->dropout_p, 1.0f / (1.0f - a->dropout_p), keep);
}

static void fwd_task(void *arg, int64_t begin, int64_t end, int tid) {
    const job *jb = arg;
    const attn__sdpa_args *a = jb->a;
    float *s = jb->scratch + (int64_t)tid * jb->per_chunk, *p = s + a->S, *keep = p + a->S;
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / a->H, h = bh % a->H, hk = h / (a->H / a->Hkv);
        const float *vb = a->v + b * a->vs[0] + hk * a->vs[1];
        for (int64_t i = 0; i < a->L; i++) {
            scores(a, b, h, i, s, NULL);
            float lse = softmax(s, p, a->S);
            if (a->lse) a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] = lse;
            if (a->dropout_p > 0.0f) {
                keep_row(jb, b, h, i, keep);
                for (int64_t j = 0; j < a->S; j++) p[j] *= keep[j];
            }
            if (a->w) memcpy(a->w + b * a->ws[0] + h * a->ws[1] + i * a->ws[2], p,
                             (size_t)a->S * sizeof(float));
            float *oi = a->o + b * a->os[0] + h * a->os[1] + i * a->os[2];
            memset(oi, 0, (size_t)a->Dv * sizeof(float));
            for (int64_t j = 0; j < a->S; j++) {
                float pj = p[j];
                if (pj == 0.0f) continue;
                const float *vj = vb + j * a->vs[2];
                for (int64_t e = 0; e < a->Dv; e++) oi[e] += pj * vj[e];
            }
        }
    }
}

attn__sdpa_kernel attn__sdpa_path(const attn_ctx *ctx, const attn__sdpa_args *a, int bf16) {
    if (a->rows) return unit_inner(a) ? ATTN__SDPA_ROWS : ATTN__SDPA_REF;
    if (attn__decode_eligible(ctx, a)) return ATTN__SDPA_DECODE; /* few queries: split-KV */
    if (bf16) return ATTN__SDPA_FLASH; /* bf16 storage: the fused kernels take every layout */
    if (!a->w && use_flash_fwd(a)) return ATTN__SDPA_FLASH; /* no row of scores */
    /* a strided inner dimension: the reference handles every layout */
    return unit_inner(a) ? ATTN__SDPA_ROWS : ATTN__SDPA_REF;
}

attn_status attn__sdpa(attn_ctx *ctx, const attn__sdpa_args *a) {
    attn__sdpa_kernel path = attn__sdpa_path(ctx, a, 0);
    if (path == ATTN__SDPA_DECODE) return attn__decode(ctx, a);
    if (attn__sdpa_mixed_ok(ctx, a)) return attn__sdpa_mixed(ctx, a); /* bf16 products */
    if (path == ATTN__SDPA_FLASH) return attn__flash_fwd(ctx, a);
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *scratch;
    if (path == ATTN__SDPA_REF) {
        ATTN_TRYG(attn__ws_f32(ctx, &scratch, 2, a->S, 1, 1));
        attn__sdpa_ref(a, scratch);
        goto done;
    }
    {
        int width = attn__parallel_width(ctx, a->B * a->H);
        job jb = {a, NULL, NULL, 4 * a->S, ctx->kern.dropout_row};
        ATTN_TRYG(attn__ws_f32(ctx, &jb.scratch, width, 4, a->S, 1));
        attn__parallel_for(ctx, a->B * a->H, fwd_task, &jb);
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__sdpa_bf16(attn_ctx *ctx, const attn__sdpa_args *a, const attn__bf16 *q,
                            const attn__bf16 *k, const attn__bf16 *v) {
    if (attn__sdpa_path(ctx, a, 1) == ATTN__SDPA_DECODE)
        return attn__decode_bf16(ctx, a, q, k, v);
    return attn__flash_fwd_bf16(ctx, a, q, k, v);
}

static void bwd_task(void *arg, int64_t begin, int64_t end, int tid) {
    const job *jb = arg;
    const attn__sdpa_args *a = jb->a;
    const attn__sdpa_grads *g = jb->g;
    float *s = jb->scratch + (int64_t)tid * jb->per_chunk, *p = s + a->S, *dp = p + a->S,
          *keep = dp + a->S, *dt = keep + a->S;
    int64_t group = a->H / a->Hkv;
    for (int64_t bk = begin; bk < end; bk++) {
        int64_t b = bk / a->Hkv, hk = bk % a->Hkv;
        const float *kb = a->k + b * a->ks[0] + hk * a->ks[1];
        const float *vb = a->v + b * a->vs[0] + hk * a->vs[1];
        float *dkb = g->dk ? g->dk + b * g->dks[0] + hk * g->dks[1] : NULL;
        float *dvb = g->dv ? g->dv + b * g->dvs[0] + hk * g->dvs[1] : NULL;
        for (int64_t j = 0; j < a->S; j++) {
            if (dkb) memset(dkb + j * g->dks[2], 0, (size_t)a->D * sizeof(float));
            if (dvb) memset(dvb + j * g->dvs[2], 0, (size_t)a->Dv * sizeof(float));
        }
        for (int64_t h = hk * group; h < (hk + 1) * group; h++)
            for (int64_t i = 0; i < a->L; i++) {
                const float *qi = a->q + b * a->qs[0] + h * a->qs[1] + i * a->qs[2];
                const float *doi = g->dout + b * g->dos[0] + h * g->dos[1] + i * g->dos[2];
                float *dqi = g->dq ? g->dq + b * g->dqs[0] + h * g->dqs[1] + i * g->dqs[2] : NULL;
                scores(a, b, h, i, s, dt);
                if (softmax(s, p, a->S) == -INFINITY) { /* every key masked: no gradient */
                    if (dqi) memset(dqi, 0, (size_t)a->D * sizeof(float));
                    continue;
                }
                keep_row(jb, b, h, i, keep);
                float delta = 0.0f;
                for (int64_t j = 0; j < a->S; j++) {
                    dp[j] = 0.0f;
                    if (p[j] == 0.0f || keep[j] == 0.0f) continue;
                    const float *vj = vb + j * a->vs[2];
                    float acc = 0.0f;
                    for (int64_t e = 0; e < a->Dv; e++) acc += doi[e] * vj[e];
                    dp[j] = acc * keep[j];
                    delta += p[j] * dp[j];
                }
                if (dvb) /* dv += W^T dout with the forward's (dropped) weights */
                    for (int64_t j = 0; j < a->S; j++) {
                        float wj = p[j] * keep[j];
                        if (wj == 0.0f) continue;
                        float *dvj = dvb + j * g->dvs[2];
                        for (int64_t e = 0; e < a->Dv; e++) dvj[e] += wj * doi[e];
                    }
                for (int64_t j = 0; j < a->S; j++) s[j] = p[j] == 0.0f ? 0.0f : p[j] * (dp[j] - delta);
                if (a->softcap > 0) /* through the cap */
                    for (int64_t j = 0; j < a->S; j++) s[j] *= p[j] == 0.0f ? 0.0f : dt[j];
                if (dqi) memset(dqi, 0, (size_t)a->D * sizeof(float));
                for (int64_t j = 0; j < a->S; j++) {
                    if (s[j] == 0.0f) continue;
                    float f = a->scale * s[j];
                    const float *kj = kb + j * a->ks[2];
                    if (dqi)
                        for (int64_t d = 0; d < a->D; d++) dqi[d] += f * kj[d];
                    if (dkb) {
                        float *dkj = dkb + j * g->dks[2];
                        for (int64_t d = 0; d < a->D; d++) dkj[d] += f * qi[d];
                    }
                }
            }
    }
}

attn__sdpa_kernel attn__sdpa_bwd_path(const attn__sdpa_args *a, const attn__sdpa_grads *g) {
    if (g->dmask && a->mask[0].kind == ATTN_MASK_ADD) return ATTN__SDPA_REF; /* mask gradient */
    if (use_flash_bwd(a)) return ATTN__SDPA_FLASH;
    int inner = unit_inner(a) && g->dos[3] == 1 && (!g->dq || g->dqs[3] == 1) &&
                (!g->dk || g->dks[3] == 1) && (!g->dv || g->dvs[3] == 1);
    return inner ? ATTN__SDPA_ROWS : ATTN__SDPA_REF;
}

attn_status attn__sdpa_bwd(attn_ctx *ctx, const attn__sdpa_args *a, const attn__sdpa_grads *g) {
    if (attn__sdpa_mixed_bwd_ok(ctx, a, g)) return attn__sdpa_mixed_bwd(ctx, a, g);
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    attn__sdpa_kernel path = attn__sdpa_bwd_path(a, g);
    if (path == ATTN__SDPA_REF) {
        float *scratch;
        ATTN_TRYG(attn__ws_f32(ctx, &scratch, 4, a->S, 1, 1));
        attn__sdpa_bwd_ref(a, g, scratch);
        goto done;
    }
    if (path == ATTN__SDPA_ROWS) {
        int width = attn__parallel_width(ctx, a->B * a->Hkv);
        job jb = {a, g, NULL, 5 * a->S, ctx->kern.dropout_row}; /* s, p, dp, keep, dt */
        ATTN_TRYG(attn__ws_f32(ctx, &jb.scratch, width, 5, a->S, 1));
        attn__parallel_for(ctx, a->B * a->Hkv, bwd_task, &jb);
        goto done;
    }
    if (a->o && a->lse) { /* the caller saved the forward: out as it is, lse made contiguous */
        float *lse;
        ATTN_TRYG(attn__ws_f32(ctx, &lse, a->B, a->H, a->L, 1));
        for (int64_t b = 0; b < a->B; b++)
            for (int64_t h = 0; h < a->H; h++)
                for (int64_t i = 0; i < a->L; i++)
                    lse[(b * a->H + h) * a->L + i] =
                        a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]];
        attn__sdpa_args f = *a;
        f.w = NULL;
        ATTN_TRYG(attn__flash_bwd(ctx, &f, g, lse));
        goto done;
    }
    {
        /* the fused backward needs the forward's output and log-sum-exp: recompute them */
        attn__sdpa_args f = *a;
        float *o, *lse;
        ATTN_TRYG(attn__ws_f32(ctx, &o, a->B, a->H, a->L, a->Dv));
        ATTN_TRYG(attn__ws_f32(ctx, &lse, a->B, a->H, a->L, 1));
        f.o = o, f.os[0] = a->H * a->L * a->Dv, f.os[1] = a->L * a->Dv, f.os[2] = a->Dv, f.os[3] = 1;
        f.lse = lse, f.ls[0] = a->H * a->L, f.ls[1] = a->L, f.ls[2] = 1;
        f.w = NULL;
        ATTN_TRYG(attn__flash_fwd(ctx, &f));
        ATTN_TRYG(attn__flash_bwd(ctx, &f, g, lse));
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}
