/* Fused attention (see flash.h): the driver (packing, tiling, online softmax, masks, dropout,
 * scheduling), the plain C microkernels and the choice among ISAs.
 *
 * Forward, per task (b, h, query tile of BM rows), key tiles of BN keys in order:
 *   S = Q_t K_t^T (mm), per row: scale, causal/mask -> -inf, m' = max(m, max S), alpha =
 *   exp(m - m'), P = exp(S - m'), l = alpha l + sum P, P *= dropout multiplier,
 *   O = alpha O + P V_t (mm with a per-row scale).  At the end O /= l, lse = m + log l
 *   (l = 0: the row had no visible key: zeros and -inf).
 * Backward (FlashAttention-2), per (query tile, key tile) block, from the saved lse:
 *   P = exp(S - lse), W = P * keep, dP = (dO V^T) * keep, dS = scale P (dP - delta) with
 *   delta_i = dO_i . O_i;  dV += W^T dO,  dK += dS^T Q,  dQ += dS K.
 * dK/dV of a key tile accumulate over (head of the group, query tile) in that order, dQ of a
 * query tile over key tiles in order; both schemes below (one pass per (b, kv head), or a dK/dV
 * pass over key tiles then a dQ pass over query tiles) make exactly the same microkernel calls
 * per output element, so the choice (by available parallelism) never changes a bit.
 *
 * Operands are packed once per call into the workspace, zero padded: K^T tiles [Dp][BN],
 * K tiles [BN][Dp], V tiles [BN][Dvp], V^T tiles [Dvp][BN], Q and dO tiles [BM][Dp|Dvp]
 * (Dp, Dvp: D, Dv rounded up to 16), so the microkernels see unit strides and full vectors. */
#include <math.h>
#include <string.h>

#include "dispatch.h"
#include "flash.h"
#include "pool.h"

#define BM ATTN__FLASH_BM
#define BN ATTN__FLASH_BN

/* ---- plain C microkernels ----------------------------------------------------------------- */
static void ref_mm(int64_t m, int64_t n, int64_t K, const float *A, int64_t ars, int64_t acs,
                   const float *B, int64_t ldb, float *C, int64_t ldc, int accum,
                   const float *cs) {
    for (int64_t i = 0; i < m; i++) {
        float *c = C + i * ldc;
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc += A[i * ars + k * acs] * B[k * ldb + j];
            c[j] = accum ? (cs ? cs[i] : 1.0f) * c[j] + acc : acc;
        }
    }
}

static void ref_smax(float *s, int64_t ld, int64_t rows, int64_t n, const int64_t *nvalid,
                     float scale, float *mx) {
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld, m = -INFINITY;
        int64_t nv = nvalid ? nvalid[r] : n;
        for (int64_t j = 0; j < n; j++) {
            x[j] = j < nv ? x[j] * scale : -INFINITY;
            m = x[j] > m ? x[j] : m;
        }
        mx[r] = m;
    }
}

static void ref_expsum(float *s, int64_t ld, int64_t rows, int64_t n, const float *mx,
                       float *sum) {
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld, acc = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            float e = x[j] == -INFINITY || mx[r] == -INFINITY ? 0.0f : expf(x[j] - mx[r]);
            x[j] = e;
            acc += e;
        }
        if (sum) sum[r] = acc;
    }
}

static void ref_vexp(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] == -INFINITY ? 0.0f : expf(x[i]);
}

static void ref_ds(const float *p, float *dp, const float *keep, float delta, float scale,
                   int64_t n) {
    for (int64_t j = 0; j < n; j++)
        dp[j] = scale * (p[j] * ((keep ? dp[j] * keep[j] : dp[j]) - delta));
}

static const attn__flash_kernels ref_kernels = {ATTN__ISA_REF, ref_mm, ref_smax, ref_expsum,
                                                ref_vexp, ref_ds};

const attn__flash_kernels *attn__flash_kernels_ref(void) { return &ref_kernels; }

const attn__flash_kernels *attn__flash_kernels_for(const attn_ctx *ctx) {
    const attn__flash_kernels *k = NULL;
    if (ctx->isa == ATTN__ISA_AVX512) k = attn__flash_kernels_avx512();
    else if (ctx->isa == ATTN__ISA_AVX2) k = attn__flash_kernels_avx2();
    return k ? k : &ref_kernels;
}

/* ---- the call's shared state ---------------------------------------------------------------- */
typedef struct fl {
    const attn__sdpa_args *a;
    const attn__sdpa_grads *g;
    const attn__flash_kernels *kr;
    int64_t Dp, Dvp, nqt, nkt, group, off;
    int causal, masked, dropout;
    float keep_scale;
    /* packed operands */
    float *Kt, *Kp, *Vp, *Vt, *Qp, *dOp, *delta;
    const float *lse;
    float *scratch;
    int64_t per_thread;
} fl;

static int64_t rup16(int64_t x) { return (x + 15) & ~(int64_t)15; }

/* Does query tile qt see any key of key tile kt under the causal mask? */
static int live(const fl *f, int64_t qt, int64_t kt) {
    if (!f->causal) return 1;
    int64_t i1 = (qt + 1) * BM < f->a->L ? (qt + 1) * BM : f->a->L;
    return kt * BN <= i1 - 1 + f->off;
}

/* Dropout multipliers of keys j0 .. j0+n-1 of row (b, h, i): 0 or 1/(1-p), the stream of
 * attn_dropout_keep (one Philox block gives four consecutive elements). */
static void keep_row(const fl *f, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                     float *out) {
    const attn__sdpa_args *a = f->a;
    uint64_t idx = a->drop_base + (uint64_t)(((b * a->H + h) * a->L + i) * a->S + j0);
    attn__dropout_row(a->seed, a->offset, idx, n, a->dropout_p, f->keep_scale, out);
}

/* Adds both masks to the scaled scores s[0..n) of row (b, h, i), keys from j0; returns the new
 * row maximum. */
static float add_masks(const fl *f, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                       float *s) {
    const attn__sdpa_args *a = f->a;
    for (int mi = 0; mi < 2; mi++) {
        const attn__mask4 *m = &a->mask[mi];
        if (m->kind == ATTN_MASK_NONE) continue;
        int64_t nc = (a->mask_ncols[mi] < a->S ? a->mask_ncols[mi] : a->S) - j0;
        int64_t cnt = n < nc ? n : nc, st = m->stride[3];
        int64_t o = b * m->stride[0] + h * m->stride[1] + i * m->stride[2] + j0 * st;
        if (m->kind == ATTN_MASK_ADD) {
            const float *d = (const float *)m->data + o;
            for (int64_t j = 0; j < cnt; j++)
                if (s[j] != -INFINITY) s[j] += d[j * st];
        } else {
            const unsigned char *d = (const unsigned char *)m->data + o;
            unsigned char blockv = m->kind == ATTN_MASK_BLOCK;
            for (int64_t j = 0; j < cnt; j++)
                if ((d[j * st] != 0) == blockv) s[j] = -INFINITY;
        }
    }
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* Scales and masks the raw dot products of rows [i0, i0+qn) of head (b, h) against the key tile
 * at j0 with kn keys (S [BM][BN]): invisible keys become -inf; mx[r] = the row maximum. */
static void block_scores(const fl *f, int64_t b, int64_t h, int64_t i0, int64_t qn, int64_t j0,
                         int64_t kn, float *S, int64_t *nvalid, float *mx) {
    for (int64_t r = 0; r < qn; r++) {
        int64_t nv = kn;
        if (f->causal) {
            int64_t lim = i0 + r + f->off - j0 + 1;
            if (lim < nv) nv = lim < 0 ? 0 : lim;
        }
        nvalid[r] = nv;
    }
    f->kr->smax(S, BN, qn, BN, nvalid, f->a->scale, mx);
    if (f->masked)
        for (int64_t r = 0; r < qn; r++)
            if (nvalid[r] > 0) mx[r] = add_masks(f, b, h, i0 + r, j0, nvalid[r], S + r * BN);
}

/* ---- packing ------------------------------------------------------------------------------ */
/* One key tile (b, hk, kt): K^T [Dp][BN] and V [BN][Dvp] (forward), or K^T, K [BN][Dp] and
 * V^T [Dvp][BN] (backward). */
static void pack_kv_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    const attn__sdpa_args *a = f->a;
    int bwd = f->g != NULL;
    for (int64_t t = begin; t < end; t++) {
        int64_t bk = t / f->nkt, kt = t % f->nkt, b = bk / a->Hkv, hk = bk % a->Hkv;
        int64_t j0 = kt * BN, kn = a->S - j0 < BN ? a->S - j0 : BN;
        const float *kb = a->k + b * a->ks[0] + hk * a->ks[1] + j0 * a->ks[2];
        const float *vb = a->v + b * a->vs[0] + hk * a->vs[1] + j0 * a->vs[2];
        float *kt_ = f->Kt + t * f->Dp * BN;
        memset(kt_, 0, sizeof(float) * (size_t)(f->Dp * BN));
        for (int64_t j = 0; j < kn; j++)
            for (int64_t d = 0; d < a->D; d++) kt_[d * BN + j] = kb[j * a->ks[2] + d * a->ks[3]];
        if (!bwd) {
            float *vp = f->Vp + t * BN * f->Dvp;
            memset(vp, 0, sizeof(float) * (size_t)(BN * f->Dvp));
            for (int64_t j = 0; j < kn; j++)
                for (int64_t e = 0; e < a->Dv; e++)
                    vp[j * f->Dvp + e] = vb[j * a->vs[2] + e * a->vs[3]];
        } else {
            float *kp = f->Kp + t * BN * f->Dp, *vt = f->Vt + t * f->Dvp * BN;
            memset(kp, 0, sizeof(float) * (size_t)(BN * f->Dp));
            memset(vt, 0, sizeof(float) * (size_t)(f->Dvp * BN));
            for (int64_t j = 0; j < kn; j++) {
                for (int64_t d = 0; d < a->D; d++)
                    kp[j * f->Dp + d] = kb[j * a->ks[2] + d * a->ks[3]];
                for (int64_t e = 0; e < a->Dv; e++)
                    vt[e * BN + j] = vb[j * a->vs[2] + e * a->vs[3]];
            }
        }
    }
}

/* Rows [i0, i0+qn) of x (b, h) into dst [BM][w], zero padded. */
static void pack_rows(const float *x, const int64_t *xs, int64_t b, int64_t h, int64_t i0,
                      int64_t qn, int64_t d, int64_t w, float *dst) {
    memset(dst, 0, sizeof(float) * (size_t)(BM * w));
    const float *xb = x + b * xs[0] + h * xs[1] + i0 * xs[2];
    for (int64_t r = 0; r < qn; r++)
        for (int64_t e = 0; e < d; e++) dst[r * w + e] = xb[r * xs[2] + e * xs[3]];
}

/* ---- forward ---------------------------------------------------------------------------- */
static void fwd_tile(const fl *f, int64_t b, int64_t h, int64_t qt, float *ws) {
    const attn__sdpa_args *a = f->a;
    const attn__flash_kernels *kr = f->kr;
    int64_t Dp = f->Dp, Dvp = f->Dvp, hk = h / f->group;
    int64_t i0 = qt * BM, qn = a->L - i0 < BM ? a->L - i0 : BM;
    float *Q = ws, *Sb = Q + BM * Dp, *O = Sb + BM * BN, *m = O + BM * Dvp, *l = m + BM,
          *alpha = l + BM, *mx = alpha + BM, *mn = mx + BM, *sum = mn + BM, *keep = sum + BM;
    int64_t *nvalid = (int64_t *)(keep + BN);
    pack_rows(a->q, a->qs, b, h, i0, qn, a->D, Dp, Q);
    memset(O, 0, sizeof(float) * (size_t)(BM * Dvp));
    for (int64_t r = 0; r < BM; r++) m[r] = -INFINITY, l[r] = 0.0f, mx[r] = 0.0f;
    for (int64_t kt = 0; kt < f->nkt; kt++) {
        if (!live(f, qt, kt)) break;
        int64_t j0 = kt * BN, kn = a->S - j0 < BN ? a->S - j0 : BN;
        int64_t tile = (b * a->Hkv + hk) * f->nkt + kt;
        kr->mm(qn, BN, a->D, Q, Dp, 1, f->Kt + tile * Dp * BN, BN, Sb, BN, 0, NULL);
        block_scores(f, b, h, i0, qn, j0, kn, Sb, nvalid, mx);
        int any = 0;
        for (int64_t r = 0; r < qn; r++) {
            mn[r] = mx[r] > m[r] ? mx[r] : m[r];
            any |= mn[r] != -INFINITY;
            /* alpha = exp(m - mn): 0 when m = -inf < mn; 1 while the row has seen nothing */
            mx[r] = mn[r] == -INFINITY ? 0.0f : m[r] - mn[r];
        }
        if (!any) continue;
        kr->vexp(mx, alpha, BM);
        kr->expsum(Sb, BN, qn, BN, mn, sum);
        for (int64_t r = 0; r < qn; r++) {
            l[r] = l[r] * alpha[r] + sum[r];
            m[r] = mn[r];
        }
        if (f->dropout)
            for (int64_t r = 0; r < qn; r++) {
                float *s = Sb + r * BN;
                keep_row(f, b, h, i0 + r, j0, kn, keep);
                for (int64_t j = 0; j < kn; j++) s[j] *= keep[j];
            }
        kr->mm(qn, Dvp, kn, Sb, BN, 1, f->Vp + tile * BN * Dvp, Dvp, O, Dvp, 1, alpha);
    }
    for (int64_t r = 0; r < qn; r++) {
        int64_t i = i0 + r;
        float *o = a->o + b * a->os[0] + h * a->os[1] + i * a->os[2];
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int64_t e = 0; e < a->Dv; e++) o[e * a->os[3]] = O[r * Dvp + e] * inv;
        if (a->lse)
            a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] =
                l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
    }
}

/* Task t: the heaviest query tiles first (under a causal mask the last ones see most keys). */
static void fwd_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    int64_t BH = f->a->B * f->a->H;
    float *ws = f->scratch + (int64_t)tid * f->per_thread;
    for (int64_t t = begin; t < end; t++) {
        int64_t qt = f->nqt - 1 - t / BH, bh = t % BH;
        fwd_tile(f, bh / f->a->H, bh % f->a->H, qt, ws);
    }
}

static void setup(fl *f, attn_ctx *ctx, const attn__sdpa_args *a, const attn__sdpa_grads *g) {
    memset(f, 0, sizeof *f);
    f->a = a, f->g = g, f->kr = attn__flash_kernels_for(ctx);
    f->Dp = rup16(a->D), f->Dvp = rup16(a->Dv);
    f->nqt = (a->L + BM - 1) / BM, f->nkt = (a->S + BN - 1) / BN;
    f->group = a->H / a->Hkv;
    f->causal = a->causal != ATTN_CAUSAL_NONE;
    f->off = a->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? a->S - a->L : 0;
    f->masked = a->mask[0].kind != ATTN_MASK_NONE || a->mask[1].kind != ATTN_MASK_NONE;
    f->dropout = a->dropout_p > 0.0f;
    f->keep_scale = f->dropout ? 1.0f / (1.0f - a->dropout_p) : 1.0f;
}

attn_status attn__flash_fwd(attn_ctx *ctx, const attn__sdpa_args *a) {
    if (a->w)
        return attn__fail(ctx, ATTN_E_INVALID, "attn__flash_fwd: attention weights requested");
    fl f;
    setup(&f, ctx, a, NULL);
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    int64_t nkv = a->B * a->Hkv * f.nkt, ntask = a->B * a->H * f.nqt;
    ATTN_TRYG(attn__ws_f32(ctx, &f.Kt, nkv, f.Dp, BN, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &f.Vp, nkv, BN, f.Dvp, 1));
    attn__parallel_for(ctx, nkv, pack_kv_task, &f);
    int width = attn__parallel_width(ctx, ntask);
    f.per_thread = BM * f.Dp + BM * BN + BM * f.Dvp + 6 * BM + BN + 2 * BM /* nvalid */;
    ATTN_TRYG(attn__ws_f32(ctx, &f.scratch, width, f.per_thread, 1, 1));
    attn__parallel_for(ctx, ntask, fwd_task, &f);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- backward ------------------------------------------------------------------------------ */
/* Per-thread block scratch: P, dP, W, keep [BM][BN] each, mx [BM], nvalid [BM] (int64). */
#define BLK_FLOATS (4 * BM * BN + 3 * BM) /* + mx, nvalid */

/* One (query tile, key tile) block of head (b, h).  With delta_acc, only accumulates
 * sum_j P dP into delta_acc[r] (delta recomputation).  Otherwise updates dK, dV [BN][Dp|Dvp]
 * and dQ [BM][Dp] (each may be NULL). */
static void bwd_block(const fl *f, float *blk, int64_t b, int64_t h, int64_t qt, int64_t kt,
                      float *dK, float *dV, float *dQ, float *delta_acc) {
    const attn__sdpa_args *a = f->a;
    const attn__flash_kernels *kr = f->kr;
    int64_t Dp = f->Dp, Dvp = f->Dvp, hk = h / f->group, bh = b * a->H + h;
    int64_t i0 = qt * BM, qn = a->L - i0 < BM ? a->L - i0 : BM;
    int64_t j0 = kt * BN, kn = a->S - j0 < BN ? a->S - j0 : BN;
    int64_t tile = (b * a->Hkv + hk) * f->nkt + kt;
    const float *Q = f->Qp + (bh * f->nqt + qt) * BM * Dp;
    const float *dO = f->dOp + (bh * f->nqt + qt) * BM * Dvp;
    const float *lse = f->lse + bh * a->L + i0, *delta = f->delta + bh * a->L + i0;
    float *P = blk, *dP = P + BM * BN, *W = dP + BM * BN, *keep = W + BM * BN;
    float *mx = keep + BM * BN;
    int64_t *nvalid = (int64_t *)(mx + BM);
    kr->mm(qn, BN, a->D, Q, Dp, 1, f->Kt + tile * Dp * BN, BN, P, BN, 0, NULL);
    block_scores(f, b, h, i0, qn, j0, kn, P, nvalid, mx);
    int any = 0;
    for (int64_t r = 0; r < qn; r++) {
        any |= mx[r] != -INFINITY && lse[r] != -INFINITY;
        if (f->dropout) {
            float *kp = keep + r * BN;
            memset(kp, 0, sizeof(float) * BN);
            keep_row(f, b, h, i0 + r, j0, kn, kp);
        }
    }
    kr->expsum(P, BN, qn, BN, lse, NULL); /* P = exp(S - lse); rows with lse = -inf give 0 */
    if (!any) return; /* every weight of the block is 0: nothing flows */
    kr->mm(qn, BN, a->Dv, dO, Dvp, 1, f->Vt + tile * Dvp * BN, BN, dP, BN, 0, NULL);
    if (delta_acc) {
        for (int64_t r = 0; r < qn; r++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < kn; j++)
                acc += P[r * BN + j] * dP[r * BN + j] * (f->dropout ? keep[r * BN + j] : 1.0f);
            delta_acc[r] += acc;
        }
        return;
    }
    if (dV) {
        const float *Wp = P;
        if (f->dropout) {
            for (int64_t r = 0; r < qn; r++)
                for (int64_t j = 0; j < BN; j++) W[r * BN + j] = P[r * BN + j] * keep[r * BN + j];
            Wp = W;
        }
        kr->mm(kn, Dvp, qn, Wp, 1, BN, dO, Dvp, dV, Dvp, 1, NULL);
    }
    for (int64_t r = 0; r < qn; r++)
        kr->ds(P + r * BN, dP + r * BN, f->dropout ? keep + r * BN : NULL, delta[r], a->scale,
               BN);
    if (dK) kr->mm(kn, Dp, qn, dP, 1, BN, Q, Dp, dK, Dp, 1, NULL);
    if (dQ) kr->mm(qn, Dp, kn, dP, BN, 1, f->Kp + tile * BN * Dp, Dp, dQ, Dp, 1, NULL);
}

/* Packs Q and dO tiles of (b, h, qt) and computes delta = dO . O when O is given. */
static void pack_q_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    const attn__sdpa_args *a = f->a;
    const attn__sdpa_grads *g = f->g;
    for (int64_t t = begin; t < end; t++) {
        int64_t bh = t / f->nqt, qt = t % f->nqt, b = bh / a->H, h = bh % a->H;
        int64_t i0 = qt * BM, qn = a->L - i0 < BM ? a->L - i0 : BM;
        pack_rows(a->q, a->qs, b, h, i0, qn, a->D, f->Dp, f->Qp + t * BM * f->Dp);
        pack_rows(g->dout, g->dos, b, h, i0, qn, a->Dv, f->Dvp, f->dOp + t * BM * f->Dvp);
        float *dl = f->delta + bh * a->L + i0;
        if (a->o) {
            const float *dO = f->dOp + t * BM * f->Dvp;
            for (int64_t r = 0; r < qn; r++) {
                const float *o = a->o + b * a->os[0] + h * a->os[1] + (i0 + r) * a->os[2];
                float acc = 0.0f;
                for (int64_t e = 0; e < a->Dv; e++) acc += dO[r * f->Dvp + e] * o[e * a->os[3]];
                dl[r] = acc;
            }
        } else {
            float *blk = f->scratch + (int64_t)tid * f->per_thread;
            for (int64_t r = 0; r < qn; r++) dl[r] = 0.0f;
            for (int64_t kt = 0; kt < f->nkt && live(f, qt, kt); kt++)
                bwd_block(f, blk, b, h, qt, kt, NULL, NULL, NULL, dl);
        }
    }
}

static void store_rows(const float *src, int64_t w, int64_t n, int64_t d, float *dst,
                       int64_t rs, int64_t cs) {
    for (int64_t r = 0; r < n; r++)
        for (int64_t e = 0; e < d; e++) dst[r * rs + e * cs] = src[r * w + e];
}

/* dK, dV of key tile kt of (b, hk): heads of the group, then query tiles, in order; with dQ
 * (one-pass scheme) also accumulates dQ [group][nqt*BM][Dp]. */
static void dkdv_tile(const fl *f, float *ws, int64_t b, int64_t hk, int64_t kt, float *dQ) {
    const attn__sdpa_args *a = f->a;
    const attn__sdpa_grads *g = f->g;
    float *blk = ws, *dK = blk + BLK_FLOATS, *dV = dK + BN * f->Dp;
    int64_t j0 = kt * BN, kn = a->S - j0 < BN ? a->S - j0 : BN;
    memset(dK, 0, sizeof(float) * (size_t)(BN * f->Dp));
    memset(dV, 0, sizeof(float) * (size_t)(BN * f->Dvp));
    for (int64_t hh = 0; hh < f->group; hh++)
        for (int64_t qt = 0; qt < f->nqt; qt++) {
            if (!live(f, qt, kt)) continue;
            bwd_block(f, blk, b, hk * f->group + hh, qt, kt, g->dk ? dK : NULL,
                      g->dv ? dV : NULL,
                      dQ ? dQ + (hh * f->nqt + qt) * BM * f->Dp : NULL, NULL);
        }
    if (g->dk)
        store_rows(dK, f->Dp, kn, a->D, g->dk + b * g->dks[0] + hk * g->dks[1] + j0 * g->dks[2],
                   g->dks[2], g->dks[3]);
    if (g->dv)
        store_rows(dV, f->Dvp, kn, a->Dv,
                   g->dv + b * g->dvs[0] + hk * g->dvs[1] + j0 * g->dvs[2], g->dvs[2],
                   g->dvs[3]);
}

/* Two-pass scheme, pass 1: task = (b, hk, kt). */
static void dkdv_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    float *ws = f->scratch + (int64_t)tid * f->per_thread;
    for (int64_t t = begin; t < end; t++) {
        int64_t bk = t / f->nkt, kt = t % f->nkt;
        dkdv_tile(f, ws, bk / f->a->Hkv, bk % f->a->Hkv, kt, NULL);
    }
}

/* Two-pass scheme, pass 2: task = (b, h, qt), heaviest first. */
static void dq_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    const attn__sdpa_args *a = f->a;
    const attn__sdpa_grads *g = f->g;
    float *blk = f->scratch + (int64_t)tid * f->per_thread, *dQ = blk + BLK_FLOATS;
    int64_t BH = a->B * a->H;
    for (int64_t t = begin; t < end; t++) {
        int64_t qt = f->nqt - 1 - t / BH, bh = t % BH, b = bh / a->H, h = bh % a->H;
        int64_t i0 = qt * BM, qn = a->L - i0 < BM ? a->L - i0 : BM;
        memset(dQ, 0, sizeof(float) * (size_t)(BM * f->Dp));
        for (int64_t kt = 0; kt < f->nkt && live(f, qt, kt); kt++)
            bwd_block(f, blk, b, h, qt, kt, NULL, NULL, dQ, NULL);
        store_rows(dQ, f->Dp, qn, a->D, g->dq + b * g->dqs[0] + h * g->dqs[1] + i0 * g->dqs[2],
                   g->dqs[2], g->dqs[3]);
    }
}

/* One-pass scheme: task = (b, hk): every key tile, dQ of the group's heads kept whole. */
static void onepass_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    const attn__sdpa_args *a = f->a;
    const attn__sdpa_grads *g = f->g;
    float *ws = f->scratch + (int64_t)tid * f->per_thread;
    float *dQ = g->dq ? ws + BLK_FLOATS + BN * f->Dp + BN * f->Dvp : NULL;
    int64_t dqn = f->group * f->nqt * BM * f->Dp;
    for (int64_t t = begin; t < end; t++) {
        int64_t b = t / a->Hkv, hk = t % a->Hkv;
        if (dQ) memset(dQ, 0, sizeof(float) * (size_t)dqn);
        for (int64_t kt = 0; kt < f->nkt; kt++) dkdv_tile(f, ws, b, hk, kt, dQ);
        if (dQ)
            for (int64_t hh = 0; hh < f->group; hh++) {
                int64_t h = hk * f->group + hh;
                store_rows(dQ + hh * f->nqt * BM * f->Dp, f->Dp, a->L, a->D,
                           g->dq + b * g->dqs[0] + h * g->dqs[1], g->dqs[2], g->dqs[3]);
            }
    }
}

attn_status attn__flash_bwd(attn_ctx *ctx, const attn__sdpa_args *a, const attn__sdpa_grads *g,
                            const float *lse) {
    if (g->dmask)
        return attn__fail(ctx, ATTN_E_UNSUPPORTED, "attn__flash_bwd: no mask gradient");
    fl f;
    setup(&f, ctx, a, g);
    f.lse = lse;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    int64_t nkv = a->B * a->Hkv * f.nkt, nq = a->B * a->H * f.nqt;
    ATTN_TRYG(attn__ws_f32(ctx, &f.Kt, nkv, f.Dp, BN, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &f.Kp, nkv, BN, f.Dp, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &f.Vt, nkv, f.Dvp, BN, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &f.Qp, nq, BM, f.Dp, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &f.dOp, nq, BM, f.Dvp, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &f.delta, a->B * a->H, a->L, 1, 1));
    attn__parallel_for(ctx, nkv, pack_kv_task, &f);
    {
        /* one pass over (b, kv head) when that alone keeps every thread busy */
        int64_t nbk = a->B * a->Hkv;
        int onepass = g->dq && nbk >= 4 * (int64_t)attn__parallel_width(ctx, nbk);
        int64_t n1 = onepass ? nbk : nkv;
        int width = attn__parallel_width(ctx, n1 > nq ? n1 : nq);
        f.per_thread = BLK_FLOATS + BN * f.Dp + BN * f.Dvp +
                       (onepass ? f.group * f.nqt * BM * f.Dp : BM * f.Dp);
        ATTN_TRYG(attn__ws_f32(ctx, &f.scratch, width, f.per_thread, 1, 1));
        attn__parallel_for(ctx, nq, pack_q_task, &f);
        if (onepass) {
            attn__parallel_for(ctx, nbk, onepass_task, &f);
        } else {
            if (g->dk || g->dv) attn__parallel_for(ctx, nkv, dkdv_task, &f);
            if (g->dq) attn__parallel_for(ctx, nq, dq_task, &f);
        }
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}
