/* Fused attention (see flash.h): the driver (packing, tiling, online softmax, masks, dropout,
 * scheduling), the plain C microkernels and the choice among ISAs.
 *
 * Forward, per task (b, h, query tile of BM rows), key tiles of BN keys in order, in groups
 * of kg32 tiles aligned from key 0 (fwd_groups; the bf16 products take the tiles one by one):
 *   S = Q_t K_t^T (mm; mmsmax, with the scale and the row maxima in the product's epilogue,
 *   where every row sees every key of the tile and no mask, soft cap or ALiBi applies: the
 *   same bits), per row: scale, causal/mask -> -inf, m' = max(m, max S over the group),
 *   alpha = exp(m - m'), P = exp(S - m'), l = alpha l + sum P, P *= dropout multiplier,
 *   O = alpha O + P V_g (mm with a per-row scale).  At the end O /= l, lse = m + log l
 *   (l = 0: the row had no visible key: zeros and -inf).  With few keys (flash.h,
 *   ATTN__FLASH_SHORT_*), one tile holds them all and the plain softmax replaces the online
 *   one (fwd_short_task).
 * Backward (FlashAttention-2), per (query tile, key tile) block, from the saved lse:
 *   P = exp(S - lse), W = P * keep, dP = (dO V^T) * keep, dS = scale P (dP - delta) with
 *   delta_i = dO_i . O_i;  dV += W^T dO,  dK += dS^T Q,  dQ += dS K.  Where the table has
 *   them and no mask, soft cap or ALiBi applies, P comes from the S product's epilogue (mmexp,
 *   rows that see every key of the tile) and, without dropout, dS from the dP product's
 *   (mmds): the same bits as the separate passes.
 * dK/dV of a key tile accumulate over (head of the group, query tile) in that order, dQ of a
 * query tile over key tiles in order; both schemes below (one pass per (b, kv head), or a dK/dV
 * pass over key tiles then a dQ pass over query tiles) make exactly the same microkernel calls
 * per output element, so the choice (by available parallelism) never changes a bit.  The
 * one-pass scheme takes the key tiles KT_RUN at a time against each query tile (dkdv_tiles):
 * still the same calls per element, in the same order.
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
    /* each output's sum in k order, as one dot product would take it, eight columns at a time
     * in registers (B read along its rows) */
    for (int64_t i = 0; i < m; i++) {
        float *c = C + i * ldc;
        const float *a = A + i * ars, f = accum ? (cs ? cs[i] : 1.0f) : 0.0f;
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
            const float *b = B + j;
            for (int64_t k = 0; k < K; k++, b += ldb) {
                const float x = a[k * acs];
                s0 += x * b[0], s1 += x * b[1], s2 += x * b[2], s3 += x * b[3];
                s4 += x * b[4], s5 += x * b[5], s6 += x * b[6], s7 += x * b[7];
            }
            const float sv[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
            for (int u = 0; u < 8; u++) c[j + u] = accum ? f * c[j + u] + sv[u] : sv[u];
        }
        for (; j < n; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc += a[k * acs] * B[k * ldb + j];
            c[j] = accum ? f * c[j] + acc : acc;
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

static void ref_softcap(float *s, int64_t ld, int64_t rows, int64_t n, float cap, float *dt,
                        float *mx) {
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld, m = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            float t = x[j] == -INFINITY ? -1.0f : tanhf(x[j] / cap);
            if (x[j] != -INFINITY) x[j] = cap * t;
            if (dt) dt[r * ld + j] = 1.0f - t * t;
            m = x[j] > m ? x[j] : m;
        }
        mx[r] = m;
    }
}

static void ref_alibi(float *s, int64_t ld, int64_t rows, int64_t n, float slope, float d0,
                      float *mx) {
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld, m = -INFINITY, dr = d0 + (float)r;
        for (int64_t j = 0; j < n; j++) {
            x[j] -= slope * fabsf(dr - (float)j);
            m = x[j] > m ? x[j] : m;
        }
        mx[r] = m;
    }
}

void attn__flash_tr_c(const float *src, int64_t rs, int64_t cs, int64_t n, int64_t d,
                      float *dst, int64_t ld) {
    int64_t np = (n + 15) & ~(int64_t)15, dp = (d + 15) & ~(int64_t)15;
    for (int64_t e = 0; e < dp; e++) {
        float *o = dst + e * ld;
        for (int64_t j = 0; j < np; j++) o[j] = j < n && e < d ? src[j * rs + e * cs] : 0.0f;
    }
}

void attn__flash_rowdot_c(const float *a, int64_t lda, const float *b, int64_t ldb,
                          int64_t rows, int64_t d, float *out) {
    for (int64_t r = 0; r < rows; r++) {
        float acc = 0.0f;
        for (int64_t e = 0; e < d; e++) {
            const float p = a[r * lda + e] * b[r * ldb + e];
            acc += p;
        }
        out[r] = acc;
    }
}

static const attn__flash_kernels ref_kernels = {
    ATTN__ISA_REF, ref_mm,    ref_smax,         ref_expsum,          ref_vexp, ref_ds,
    ref_softcap,   ref_alibi, attn__flash_tr_c, attn__flash_rowdot_c, NULL, NULL, NULL};

const attn__flash_kernels *attn__flash_kernels_ref(void) { return &ref_kernels; }

/* ---- the call's shared state ---------------------------------------------------------------- */
typedef struct fl {
    const attn__sdpa_args *a;
    const attn__sdpa_grads *g;
    const attn__flash_kernels *kr;
    attn__dropout_row_fn drop; /* the context's dropout stream */
    int64_t Dp, Dvp, nqt, nkt, group;
    int masked, dropout;
    int plain;   /* no mask, soft cap or ALiBi: the scores are scaled and cut by the range only */
    int open;    /* 0: the causal mask and the window leave no key to any row */
    float keep_scale;
    /* packed operands */
    float *Kt, *Kp, *Vp, *Vt, *Qp, *dOp, *delta;
    const float *lse;
    float *scratch;
    int64_t per_thread;
    /* short keys (fwd_short_task): Sp = rup16(S), query rows per task, tasks per head, and
     * whether V is read in place */
    int64_t sp, srows, snch;
    int vin;
    /* fp32 operands read in place instead of packed (unit-stride rows, D and Dv multiples of
     * 16: the same values, so the same bits): Q and V in the forward (qin, vin), Q, K and dO
     * in the backward (qin, kin, din) */
    int qin, kin, din;
    /* bf16 storage (attn__flash_fwd_bf16): kb != NULL; q16, k16, v16 are the inputs.  widen:
     * packed to fp32 (Kt, Vp, Q) for the fp32 products; else Kt16 holds the K^T tiles
     * [Dp/2][BN][2] and Vp16 the V tiles [BN/2][Dvp][2] (pair-interleaved) */
    const attn__flash_bf16_kernels *kb;
    int widen;
    int64_t p16_off; /* dot: P as bf16 [BM][BN] at this offset of the per-thread scratch */
    /* tile kernels: key tiles in groups of kg (fwd_tile, fwd_group): the scores of a 32-row
     * strip [32][kg*BN] at sg_off, their weights in bf16 [48][kg*BN] at pg_off (16 rows more
     * that the kernels may read) */
    int64_t kg, sg_off, pg_off;
    /* every row sees every key: no mask, soft cap, ALiBi, dropout, causal mask or window */
    int every;
    int grp; /* the tile kernels with no mask, soft cap, ALiBi or dropout: key-tile groups */
    /* fp32 products (fwd_groups): key tiles in groups of kg32, the scores of a strip
     * [SR][kg32*BN] at s32_off */
    int64_t kg32, s32_off;
    const attn__bf16 *q16, *k16, *v16;
    attn__bf16 *Kt16, *Vp16;
} fl;

static int64_t rup16(int64_t x) { return (x + 15) & ~(int64_t)15; }

/* The key tiles [*k0, *k1) that query tile qt sees under the causal mask and the window
 * (attn__sdpa_range).  Unclipped, each row's range is the previous row's moved by one key, so
 * the rows that see anything see together one range: from the first row's lowest key to the
 * last row's highest.  Tiles outside it are skipped, so a window costs O(L window). */
static void key_tiles(const fl *f, int64_t qt, int64_t *k0, int64_t *k1) {
    const attn__sdpa_args *a = f->a;
    int64_t i0 = qt * BM, i1 = ((qt + 1) * BM < a->L ? (qt + 1) * BM : a->L) - 1;
    int64_t lo0, hi0, lo1, hi1;
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S, i0, &lo0,
                     &hi0);
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S, i1, &lo1,
                     &hi1);
    *k0 = *k1 = 0;
    if (!f->open || hi1 < 0 || lo0 > a->S - 1) return;
    *k0 = lo0 / BN, *k1 = hi1 / BN + 1;
}

/* Does query tile qt see any key of key tile kt? */
static int live(const fl *f, int64_t qt, int64_t kt) {
    int64_t k0, k1;
    key_tiles(f, qt, &k0, &k1);
    return kt >= k0 && kt < k1;
}

/* The columns of the key tile at j0 (kn keys) that rows up to i (of the causal mask and the
 * window) may see, rounded up to 16: every row's visible keys of the tile lie below it, as the
 * last visible key grows with the row.  0 when row i (so every earlier row) sees none of
 * them.  Only the first columns are computed: the ones past them are exact zeros of the
 * weights, which add nothing to a sum (an accumulation from +0 never gives -0), so trimming
 * them never changes a bit. */
static int64_t vis_cols(const fl *f, int64_t i, int64_t j0, int64_t kn) {
    const attn__sdpa_args *a = f->a;
    int64_t lo, hi;
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S, i, &lo,
                     &hi);
    int64_t n = hi - j0 + 1 < kn ? hi - j0 + 1 : kn;
    return n <= 0 ? 0 : rup16(n);
}

/* Do rows [i, i+rows) all see the n keys from j0 (so that smax, with no mask, soft cap or
 * ALiBi, is all block_scores_dt does)?  Each row's first and last visible keys grow with the
 * row: the last row's first key and the first row's last one decide. */
static int all_visible(const fl *f, int64_t i, int64_t rows, int64_t j0, int64_t n) {
    const attn__sdpa_args *a = f->a;
    int64_t lo, hi, lo1, hi1;
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S, i, &lo,
                     &hi);
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S,
                     i + rows - 1, &lo1, &hi1);
    return lo1 <= j0 && hi >= j0 + n - 1;
}

/* Dropout multipliers of keys j0 .. j0+n-1 of row (b, h, i): 0 or 1/(1-p), the stream of
 * attn_dropout_keep (one Philox block gives four consecutive elements). */
static void keep_row(const fl *f, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                     float *out) {
    const attn__sdpa_args *a = f->a;
    uint64_t idx = a->drop_base + (uint64_t)(((b * a->H + h) * a->L + i) * a->S + j0);
    f->drop(a->seed, a->offset, idx, n, a->dropout_p, f->keep_scale, out);
}

/* max of s[0..n) with eight independent maxima (a vector max: one chain of scalar maxima
 * costs as much as the tile product) */
static float row_max(const float *s, int64_t n) {
    float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                   -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8)
        for (int u = 0; u < 8; u++) m8[u] = s[j + u] > m8[u] ? s[j + u] : m8[u];
    float mx = -INFINITY;
    for (int64_t j = n8; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    for (int u = 0; u < 8; u++) mx = m8[u] > mx ? m8[u] : mx;
    return mx;
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
        /* branch-free selects, with a unit-stride copy of each loop for the vectoriser */
        if (m->kind == ATTN_MASK_ADD) {
            const float *d = (const float *)m->data + o;
            if (st == 1)
                for (int64_t j = 0; j < cnt; j++) s[j] = s[j] == -INFINITY ? s[j] : s[j] + d[j];
            else
                for (int64_t j = 0; j < cnt; j++)
                    s[j] = s[j] == -INFINITY ? s[j] : s[j] + d[j * st];
        } else {
            const unsigned char *d = (const unsigned char *)m->data + o;
            int blockv = m->kind == ATTN_MASK_BLOCK;
            if (st == 1)
                for (int64_t j = 0; j < cnt; j++) s[j] = (d[j] != 0) == blockv ? -INFINITY : s[j];
            else
                for (int64_t j = 0; j < cnt; j++)
                    s[j] = (d[j * st] != 0) == blockv ? -INFINITY : s[j];
        }
    }
    return row_max(s, n);
}

/* ALiBi on the block S [BM][w] of rows [i0, i0+qn) of head h, keys from j0: s -= slope
 * |i + S - L - j| (-inf stays); mx[r] = the new row maximum. */
static void block_alibi(const fl *f, int64_t h, int64_t i0, int64_t qn, int64_t j0, int64_t w,
                        int64_t n, float *S, float *mx) {
    const attn__sdpa_args *a = f->a;
    float slope = a->alibi[h];
    int64_t d0 = i0 + a->S - a->L - j0; /* row r's distance to key j0 + j is |d0 + r - j| */
    if (d0 > -(1 << 23) + w && d0 < (1 << 23) - BM) {
        f->kr->alibi(S, w, qn, n, slope, (float)d0, mx); /* float distances are exact */
        return;
    }
    for (int64_t r = 0; r < qn; r++) { /* beyond 2^23 keys: integer distances */
        float *s = S + r * w;
        for (int64_t j = 0; j < n; j++) {
            int64_t d = d0 + r - j;
            s[j] -= slope * (float)(d < 0 ? -d : d);
        }
        mx[r] = row_max(s, n);
    }
}

/* Scales, caps and masks the raw dot products of rows [i0, i0+qn) of head (b, h) against the
 * key tile at j0 with kn keys (S [BM][w], row stride w): the first n columns (a multiple of
 * 16, n <= w, and n >= every row's last visible key - j0 + 1: the columns past n are neither
 * computed nor read) are processed; invisible keys become -inf; mx[r] = the row maximum;
 * dt [BM][w] (may be NULL; only read under a soft cap) receives the cap's derivative
 * 1 - tanh^2 for the backward. */
static void block_scores_dt(const fl *f, int64_t b, int64_t h, int64_t i0, int64_t qn,
                            int64_t j0, int64_t kn, int64_t w, int64_t n, float *S,
                            int64_t *nvalid, float *mx, float *dt) {
    const attn__sdpa_args *a = f->a;
    for (int64_t r = 0; r < qn; r++) { /* keys [lo, nv) of the tile are visible */
        int64_t lo, hi;
        attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S,
                         i0 + r, &lo, &hi);
        int64_t nv = hi - j0 + 1 < kn ? hi - j0 + 1 : kn;
        nvalid[r] = nv < 0 || lo - j0 >= nv ? 0 : nv;
    }
    f->kr->smax(S, w, qn, n, nvalid, a->scale, mx);
    if (a->softcap > 0) f->kr->softcap(S, w, qn, n, a->softcap, dt, mx);
    if (a->window) /* the window's left edge; the right one is in nvalid */
        for (int64_t r = 0; r < qn; r++) {
            int64_t lo, hi;
            attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S,
                             i0 + r, &lo, &hi);
            if (nvalid[r] == 0 || lo <= j0) continue;
            for (int64_t j = 0; j < lo - j0; j++) S[r * w + j] = -INFINITY;
            mx[r] = row_max(S + r * w, nvalid[r]);
        }
    if (a->alibi) block_alibi(f, h, i0, qn, j0, w, n, S, mx);
    if (f->masked)
        for (int64_t r = 0; r < qn; r++)
            if (nvalid[r] > 0) mx[r] = add_masks(f, b, h, i0 + r, j0, nvalid[r], S + r * w);
}


/* ---- packing ------------------------------------------------------------------------------ */
/* One key tile (b, hk, kt): K^T [Dp][BN] and V [BN][Dvp] (forward), or K^T, K [BN][Dp] and
 * V^T [Dvp][BN] (backward). */
/* n rows of d values (row stride rs, column stride cs) into dst [rows][w], zero padded on the
 * right and below; rows with a unit column stride are plain copies. */
static void copy_rows(const float *src, int64_t rs, int64_t cs, int64_t n, int64_t d,
                      int64_t rows, int64_t w, float *dst) {
    for (int64_t r = 0; r < n; r++) {
        float *o = dst + r * w;
        const float *x = src + r * rs;
        if (cs == 1) memcpy(o, x, sizeof(float) * (size_t)d);
        else
            for (int64_t e = 0; e < d; e++) o[e] = x[e * cs];
        memset(o + d, 0, sizeof(float) * (size_t)(w - d));
    }
    memset(dst + n * w, 0, sizeof(float) * (size_t)((rows - n) * w));
}

/* x^T [rup16(d)][w] of n rows of d values (w >= rup16(n), a multiple of 16), zero padded */
static void tr_tile(const attn__flash_kernels *kr, const float *x, int64_t rs, int64_t cs,
                    int64_t n, int64_t d, float *dst, int64_t w) {
    int64_t np = rup16(n);
    kr->tr(x, rs, cs, n, d, dst, w);
    if (np < w)
        for (int64_t e = 0; e < rup16(d); e++)
            memset(dst + e * w + np, 0, sizeof(float) * (size_t)(w - np));
}

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
        tr_tile(f->kr, kb, a->ks[2], a->ks[3], kn, a->D, kt_, BN);
        if (!bwd) {
            if (!f->vin)
                copy_rows(vb, a->vs[2], a->vs[3], kn, a->Dv, BN, f->Dvp, f->Vp + t * BN * f->Dvp);
        } else {
            if (!f->kin)
                copy_rows(kb, a->ks[2], a->ks[3], kn, a->D, BN, f->Dp, f->Kp + t * BN * f->Dp);
            tr_tile(f->kr, vb, a->vs[2], a->vs[3], kn, a->Dv, f->Vt + t * f->Dvp * BN, BN);
        }
    }
}

/* Rows [i0, i0+qn) of x (b, h) into dst [BM][w], zero padded. */
static void pack_rows(const float *x, const int64_t *xs, int64_t b, int64_t h, int64_t i0,
                      int64_t qn, int64_t d, int64_t w, float *dst) {
    copy_rows(x + b * xs[0] + h * xs[1] + i0 * xs[2], xs[2], xs[3], qn, d, BM, w, dst);
}

/* bf16 storage: one key tile (b, hk, kt) as K^T [Dp/2][BN][2] and V [BN/2][Dvp][2], zero
 * padded: the pairs along the product's K dimension that VDPBF16PS multiplies together; when
 * widening, as fp32 K^T [Dp][BN] and V [BN][Dvp] like pack_kv_task. */
static void pack_kv_bf16_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    const attn__sdpa_args *a = f->a;
    for (int64_t t = begin; t < end; t++) {
        int64_t bk = t / f->nkt, kt = t % f->nkt, b = bk / a->Hkv, hk = bk % a->Hkv;
        int64_t j0 = kt * BN, kn = a->S - j0 < BN ? a->S - j0 : BN, Dvp = f->Dvp;
        const attn__bf16 *kb = f->k16 + b * a->ks[0] + hk * a->ks[1] + j0 * a->ks[2];
        const attn__bf16 *vb = f->v16 + b * a->vs[0] + hk * a->vs[1] + j0 * a->vs[2];
        if (f->widen) {
            float *ktf = f->Kt + t * f->Dp * BN, *vpf = f->Vp + t * BN * Dvp;
            memset(ktf, 0, sizeof(float) * (size_t)(f->Dp * BN));
            memset(vpf, 0, sizeof(float) * (size_t)(BN * Dvp));
            for (int64_t j = 0; j < kn; j++) {
                for (int64_t d = 0; d < a->D; d++)
                    ktf[d * BN + j] = attn__bf16_to_f32(kb[j * a->ks[2] + d * a->ks[3]]);
                for (int64_t e = 0; e < a->Dv; e++)
                    vpf[j * Dvp + e] = attn__bf16_to_f32(vb[j * a->vs[2] + e * a->vs[3]]);
            }
            continue;
        }
        attn__bf16 *kt_ = f->Kt16 + t * f->Dp * BN, *vp = f->Vp16 + t * BN * Dvp;
        memset(kt_, 0, sizeof(attn__bf16) * (size_t)(f->Dp * BN));
        memset(vp, 0, sizeof(attn__bf16) * (size_t)(BN * Dvp));
        for (int64_t j = 0; j < kn; j++) {
            for (int64_t d = 0; d < a->D; d++)
                kt_[(d >> 1) * 2 * BN + 2 * j + (d & 1)] = kb[j * a->ks[2] + d * a->ks[3]];
            for (int64_t e = 0; e < a->Dv; e++)
                vp[(j >> 1) * 2 * Dvp + 2 * e + (j & 1)] = vb[j * a->vs[2] + e * a->vs[3]];
        }
    }
}

/* bf16 storage: rows [i0, i0+qn) of q (b, h) into dst [BM][w] bf16 (or, with fdst, into
 * fdst [BM][w] fp32), zero padded. */
static void pack_rows_bf16(const attn__bf16 *x, const int64_t *xs, int64_t b, int64_t h,
                           int64_t i0, int64_t qn, int64_t d, int64_t w, attn__bf16 *dst,
                           float *fdst) {
    const attn__bf16 *xb = x + b * xs[0] + h * xs[1] + i0 * xs[2];
    if (fdst) {
        memset(fdst, 0, sizeof(float) * (size_t)(BM * w));
        for (int64_t r = 0; r < qn; r++)
            for (int64_t e = 0; e < d; e++)
                fdst[r * w + e] = attn__bf16_to_f32(xb[r * xs[2] + e * xs[3]]);
        return;
    }
    memset(dst, 0, sizeof(attn__bf16) * (size_t)(BM * w));
    for (int64_t r = 0; r < qn; r++)
        for (int64_t e = 0; e < d; e++) dst[r * w + e] = xb[r * xs[2] + e * xs[3]];
}

/* ---- forward ---------------------------------------------------------------------------- */
#define SR 24 /* rows of a strip of a diagonal tile (a multiple of the 6, 8, 12-row blocks) */

/* The rows [*fa, *fb) of the query tile at i0 (qn rows) that see every key of [j0, j0 + w):
 * each row's first and last visible keys never decrease with the row, so they are one run
 * (empty: *fa = *fb = qn). */
static void rows_seeing(const fl *f, int64_t i0, int64_t qn, int64_t j0, int64_t w,
                        int64_t *fa, int64_t *fb) {
    const attn__sdpa_args *a = f->a;
    *fa = *fb = qn;
    for (int64_t r = 0; r < qn; r++) {
        int64_t lo, hi;
        attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S,
                         i0 + r, &lo, &hi);
        const int all = lo <= j0 && hi >= j0 + w - 1;
        if (all && *fa == qn) *fa = r;
        if (!all && *fa < qn) {
            *fb = r;
            return;
        }
    }
}

/* Tile kernels: kg whole key tiles from tile, for the rows [r0, r1) of the query tile that
 * see every one of their keys, with no mask, cap, ALiBi or dropout: each strip of 32 rows
 * multiplies Q by the kg K^T tiles into one row of scores, takes their softmax (maximum,
 * weights, bf16 copy) in one pass, rescales O once and multiplies the weights by the kg V
 * tiles (consecutive in Vp16: one product of kg*BN keys).  Fewer, longer tile products and
 * one rescaling per group instead of per key tile; the running maximum moves by groups, so
 * the weights round to bf16 relative to it as in the per-tile loop (flash.h). */
static void fwd_group(const fl *f, int64_t tile, int64_t kg, int64_t r0, int64_t r1,
                      const attn__bf16 *Q16, float *O, float *m, float *l, float *alpha,
                      float *mx, float *mn, float *sum, float *ws) {
    const attn__sdpa_args *a = f->a;
    const int64_t Dp = f->Dp, Dvp = f->Dvp, w = kg * BN;
    float *Sg = ws + f->sg_off;
    attn__bf16 *Pg = (attn__bf16 *)(ws + f->pg_off);
    for (int64_t ra = r0; ra < r1; ra += 32) {
        const int64_t rows = r1 - ra < 32 ? r1 - ra : 32, a16 = ra & ~(int64_t)15;
        for (int64_t g = 0; g < kg; g++)
            f->kb->mm(rows, BN, Dp / 2, Q16 + ra * Dp, Dp, f->Kt16 + (tile + g) * Dp * BN, BN,
                      Sg + g * BN, w, 0, NULL);
        f->kb->softmax(Sg, w, rows, w, a->scale, m + ra, mx + ra, mn + ra, sum + ra, Pg, w);
        for (int64_t r = ra; r < ra + rows; r++) mx[r] = m[r] - mn[r]; /* mn is finite */
        f->kr->vexp(mx + a16, alpha + a16, rup16(ra + rows) - a16); /* BM: a multiple of 16 */
        for (int64_t r = ra; r < ra + rows; r++) {
            l[r] = l[r] * alpha[r] + sum[r];
            m[r] = mn[r];
        }
        f->kb->mm(rows, Dvp, w / 2, Pg, w, f->Vp16 + tile * BN * Dvp, Dvp, O + ra * Dvp, Dvp, 1,
                  alpha + ra);
    }
}

/* fp32 products: the key tiles [kt0, kt1) of query tile qt in groups of kg32 whole tiles
 * aligned from key 0 (the last one, and one cut by [kt0, kt1), shorter), each group one step
 * of the online softmax.  Per strip of SR rows: the scores of the group's tiles side by side in
 * one row of up to kg32*BN columns (mmsmax, or mm and block_scores_dt, tile by tile), one
 * maximum, one pass of exponentials and one rescaling of O per group, then P V as one product
 * of the group's keys (consecutive in Vp, or in V itself).  A strip stops at the last column
 * its last row sees; the columns a row does not see within that are -inf, so weights of
 * exactly 0, which change neither the maximum, nor the sums, nor O: a row's bits follow from
 * the row and the group alignment alone (never from the other rows of its tile, L, or
 * whether the causal mask is a mode or a BLOCK mask).  Against one tile per step: the P V
 * product runs K = 512 instead of 64 with O in registers, and the exponentials' per-row work
 * is paid once per group. */
static void fwd_groups(const fl *f, int64_t b, int64_t h, int64_t qt, const float *Qa,
                       int64_t ldq, const float *Vin, float *O, float *m, float *l,
                       float *alpha, float *mx, float *mn, float *sum, float *keep,
                       int64_t *nvalid, float *ws) {
    const attn__sdpa_args *a = f->a;
    const attn__flash_kernels *kr = f->kr;
    const int64_t Dp = f->Dp, Dvp = f->Dvp, hk = h / f->group, kg = f->kg32, w = kg * BN;
    const int64_t i0 = qt * BM, qn = a->L - i0 < BM ? a->L - i0 : BM;
    float *Sg = ws + f->s32_off, tmx[SR];
    int64_t kt0, kt1;
    key_tiles(f, qt, &kt0, &kt1);
    for (int64_t ga = kt0, gb; ga < kt1; ga = gb) {
        gb = (ga / kg + 1) * kg < kt1 ? (ga / kg + 1) * kg : kt1;
        for (int64_t ra = 0, rb; ra < qn; ra = rb) {
            rb = ra + SR < qn ? ra + SR : qn;
            const int64_t rows = rb - ra, a16 = ra & ~(int64_t)15;
            int64_t span = 0, K = 0; /* columns of the strip's scores; keys of P V */
            for (int64_t kt = ga; kt < gb; kt++) {
                const int64_t j0 = kt * BN, kn = a->S - j0 < BN ? a->S - j0 : BN;
                const int64_t nc = vis_cols(f, i0 + rb - 1, j0, kn);
                if (nc == 0) break; /* nor any later tile (the last row sees the most) */
                const int64_t tile = (b * a->Hkv + hk) * f->nkt + kt;
                float *St = Sg + (kt - ga) * BN, *tm = kt == ga ? mx + ra : tmx;
                if (kr->mmsmax && f->plain && all_visible(f, i0 + ra, rows, j0, nc))
                    kr->mmsmax(rows, nc, a->D, Qa + ra * ldq, ldq, f->Kt + tile * Dp * BN, BN,
                               St, w, a->scale, tm); /* the bits of mm and block_scores_dt */
                else {
                    kr->mm(rows, nc, a->D, Qa + ra * ldq, ldq, 1, f->Kt + tile * Dp * BN, BN,
                           St, w, 0, NULL);
                    block_scores_dt(f, b, h, i0 + ra, rows, j0, kn, w, nc, St, nvalid, tm, NULL);
                }
                if (kt > ga)
                    for (int64_t r = 0; r < rows; r++)
                        mx[ra + r] = tmx[r] > mx[ra + r] ? tmx[r] : mx[ra + r];
                span = (kt - ga) * BN + nc;
                K = (kt - ga) * BN + (kn < nc ? kn : nc);
                if (nc < BN) break; /* the last tile the strip sees */
            }
            if (span == 0) continue; /* the strip sees no key of the group */
            int any = 0;
            for (int64_t r = ra; r < rb; r++) {
                mn[r] = mx[r] > m[r] ? mx[r] : m[r];
                any |= mn[r] != -INFINITY;
                /* alpha = exp(m - mn): 0 when m = -inf < mn; 1 while the row has seen nothing */
                mx[r] = mn[r] == -INFINITY ? 0.0f : m[r] - mn[r];
            }
            if (!any) continue;
            kr->vexp(mx + a16, alpha + a16, rup16(rb) - a16); /* BM is a multiple of 16 */
            kr->expsum(Sg, w, rows, span, mn + ra, sum + ra);
            for (int64_t r = ra; r < rb; r++) {
                l[r] = l[r] * alpha[r] + sum[r];
                m[r] = mn[r];
            }
            if (f->dropout)
                for (int64_t r = ra; r < rb; r++)
                    for (int64_t j = 0; j < K; j += BN) {
                        const int64_t n = K - j < BN ? K - j : BN;
                        float *s = Sg + (r - ra) * w + j;
                        keep_row(f, b, h, i0 + r, ga * BN + j, n, keep);
                        for (int64_t x = 0; x < n; x++) s[x] *= keep[x];
                    }
            if (f->kb) f->kb->round(Sg, w, rows, span); /* widened bf16: P to bf16 values */
            if (Vin)
                kr->mm(rows, Dvp, K, Sg, w, 1, Vin + ga * BN * a->vs[2], a->vs[2], O + ra * Dvp,
                       Dvp, 1, alpha + ra);
            else
                kr->mm(rows, Dvp, K, Sg, w, 1,
                       f->Vp + ((b * a->Hkv + hk) * f->nkt + ga) * BN * Dvp, Dvp, O + ra * Dvp,
                       Dvp, 1, alpha + ra);
        }
    }
}

static void fwd_tile(const fl *f, int64_t b, int64_t h, int64_t qt, float *ws) {
    const attn__sdpa_args *a = f->a;
    const attn__flash_kernels *kr = f->kr;
    int64_t Dp = f->Dp, Dvp = f->Dvp, hk = h / f->group;
    int64_t i0 = qt * BM, qn = a->L - i0 < BM ? a->L - i0 : BM;
    float *Q = ws, *Sb = Q + BM * Dp, *O = Sb + BM * BN, *m = O + BM * Dvp, *l = m + BM,
          *alpha = l + BM, *mx = alpha + BM, *mn = mx + BM, *sum = mn + BM, *keep = sum + BM;
    int64_t *nvalid = (int64_t *)(keep + BN);
    /* bf16 storage: Q tile as bf16 in Q's place (dot) or widened into Q; P as bf16 apart */
    attn__bf16 *Q16 = (attn__bf16 *)Q, *P16 = (attn__bf16 *)(ws + f->p16_off);
    const int dot = f->kb && !f->widen; /* bf16 products (else fp32 ones, bf16 data widened) */
    const float *Qa = Q; /* the Q tile, row stride ldq */
    int64_t ldq = Dp;
    if (f->kb) pack_rows_bf16(f->q16, a->qs, b, h, i0, qn, a->D, Dp, Q16, f->widen ? Q : NULL);
    else if (f->qin) Qa = a->q + b * a->qs[0] + h * a->qs[1] + i0 * a->qs[2], ldq = a->qs[2];
    else pack_rows(a->q, a->qs, b, h, i0, qn, a->D, Dp, Q);
    memset(O, 0, sizeof(float) * (size_t)(BM * Dvp));
    for (int64_t r = 0; r < BM; r++) m[r] = -INFINITY, l[r] = 0.0f, mx[r] = 0.0f;
    if (!dot) { /* fp32 products: key-tile groups */
        const float *Vin = f->vin ? a->v + b * a->vs[0] + hk * a->vs[1] : NULL;
        fwd_groups(f, b, h, qt, Qa, ldq, Vin, O, m, l, alpha, mx, mn, sum, keep, nvalid, ws);
    } else { /* bf16 products: key tiles one by one (and groups of them for the tile kernels) */
        /* strips of whole 16-row tile slices for the tile kernels (BM is a multiple of 32) */
        const int tiles = f->kb->tiles;
        const int64_t sr = tiles ? 32 : SR;
        int64_t kt0, kt1;
        key_tiles(f, qt, &kt0, &kt1);
        /* tile kernels without mask, cap, ALiBi or dropout: the key tiles in groups of kg whole
         * tiles from key 0 (fewer in the last one), which follow from S alone; the rows
         * [gfa, gfb) that see every key of the group starting at kt take it as one (fwd_group), the
         * other rows its tiles one by one, so that a row's arithmetic depends on that row alone
         * (never on the other rows of its tile, or on L) */
        int64_t gend = 0, gfa = qn, gfb = qn;
        for (int64_t kt = kt0; kt < kt1; kt++) {
            int64_t j0 = kt * BN, kn = a->S - j0 < BN ? a->S - j0 : BN;
            int64_t tile = (b * a->Hkv + hk) * f->nkt + kt;
            if (f->grp && kt % f->kg == 0) {
                const int64_t whole = a->S / BN - kt, g = whole < f->kg ? whole : f->kg;
                gfa = gfb = qn;
                if (g > 1) {
                    gend = kt + g;
                    rows_seeing(f, i0, qn, j0, g * BN, &gfa, &gfb);
                    if (gfa < gfb)
                        fwd_group(f, tile, g, gfa, gfb, Q16, O, m, l, alpha, mx, mn, sum, ws);
                }
            }
            if (kt >= gend) gfa = gfb = qn; /* past the group: every row */
            /* Runs of strips of sr rows with the same visible columns (vis_cols): a tile on the
             * causal diagonal is computed as a staircase, the strips that see none of its keys
             * skipped (their rows keep m, l and O as they are); elsewhere one run of all rows
             * (of the rows before and after a group's). */
            for (int part = 0; part < 2; part++)
            for (int64_t ra = part ? gfb : 0, re = part ? qn : gfa, rb; ra < re; ra = rb) {
                rb = ra + sr < re ? ra + sr : re;
                int64_t nc = vis_cols(f, i0 + rb - 1, j0, kn);
                while (rb < re) { /* extend the run while the next strip has the same columns */
                    int64_t rn = rb + sr < re ? rb + sr : re;
                    if (vis_cols(f, i0 + rn - 1, j0, kn) != nc) break;
                    rb = rn;
                }
                if (nc == 0) continue;
                nc = nc + 31 < BN ? (nc + 31) & ~(int64_t)31 : BN; /* cvt: whole 32s */
                int64_t rows = rb - ra, kc = kn < nc ? kn : nc, a16 = ra & ~(int64_t)15;
                float *Sr = Sb + ra * BN;
                /* every row seeing every key (and this tile's keys whole 32s): the scores' scale
                 * and maxima, the weights and their bf16 copy in one pass per row (flash.h: its
                 * own exponential, so not the bits of the steps below; whether it runs follows
                 * from the problem and S alone, never from the rows) */
                int sm = f->kb->softmax && f->every && kn % 32 == 0;
                /* tile kernels: whole 16-pair steps over Q's and K^T's zero padding */
                f->kb->mm(rows, nc, tiles ? Dp / 2 : (a->D + 1) / 2, Q16 + ra * Dp, Dp,
                          f->Kt16 + tile * Dp * BN, BN, Sr, BN, 0, NULL);
                if (sm)
                    f->kb->softmax(Sr, BN, rows, nc, a->scale, m + ra, mx + ra, mn + ra, sum + ra,
                                   P16 + ra * BN, BN);
                else
                    block_scores_dt(f, b, h, i0 + ra, rows, j0, kn, BN, nc, Sr, nvalid, mx + ra,
                                    NULL);
                int any = 0;
                for (int64_t r = ra; r < rb; r++) {
                    if (!sm) mn[r] = mx[r] > m[r] ? mx[r] : m[r];
                    any |= mn[r] != -INFINITY;
                    /* alpha = exp(m - mn): 0 when m = -inf < mn; 1 while the row saw nothing */
                    mx[r] = mn[r] == -INFINITY ? 0.0f : m[r] - mn[r];
                }
                if (!any) continue;
                kr->vexp(mx + a16, alpha + a16, rup16(rb) - a16); /* BM is a multiple of 16 */
                if (!sm) kr->expsum(Sr, BN, rows, nc, mn + ra, sum + ra);
                for (int64_t r = ra; r < rb; r++) {
                    l[r] = l[r] * alpha[r] + sum[r];
                    m[r] = mn[r];
                }
                if (f->dropout)
                    for (int64_t r = ra; r < rb; r++) {
                        float *s = Sb + r * BN;
                        keep_row(f, b, h, i0 + r, j0, kc, keep);
                        for (int64_t j = 0; j < kc; j++) s[j] *= keep[j];
                    }
                /* P to bf16 (keys past kn are 0 in both P and the packed V) */
                if (!sm) f->kb->cvt(Sr, BN, rows, nc, P16 + ra * BN, BN);
                /* tile kernels: all nc columns of P (a multiple of 32), 0 past kc */
                f->kb->mm(rows, Dvp, tiles ? nc / 2 : (kc + 1) / 2, P16 + ra * BN, BN,
                          f->Vp16 + tile * BN * Dvp, Dvp, O + ra * Dvp, Dvp, 1, alpha + ra);
            }
        }
    }
    for (int64_t r = 0; r < qn; r++) {
        int64_t i = i0 + r;
        float *o = a->o + b * a->os[0] + h * a->os[1] + i * a->os[2];
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        const float *Or = O + r * Dvp;
        if (a->os[3] == 1)
            for (int64_t e = 0; e < a->Dv; e++) o[e] = Or[e] * inv;
        else
            for (int64_t e = 0; e < a->Dv; e++) o[e * a->os[3]] = Or[e] * inv;
        if (a->lse)
            a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] =
                l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
    }
}

/* Task t: the query tiles of one head after another, so that consecutive tasks of a thread
 * read the same K and V (ATTN_ISA=avx2, B=1 H=12 D=64, 1 thread: L = S = 4096 686 -> 595 ms,
 * 2048 146 -> 137 ms; the heads in turn read every key tile from L3; a software prefetch of
 * the next key tile gained nothing more).  Within a head the heaviest
 * and the lightest tiles alternate (last, first, last but one, ...: under a causal mask the
 * last tiles see most keys), so any run of tasks carries about the same work per task and the
 * threads' chunks stay balanced.  The order never changes a bit: each row's arithmetic is
 * its own. */
static void fwd_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    float *ws = f->scratch + (int64_t)tid * f->per_thread;
    const int tiles = f->kb && !f->widen && f->kb->tiles;
    if (tiles) f->kb->begin();
    for (int64_t t = begin; t < end; t++) {
        int64_t bh = t / f->nqt, p = t % f->nqt;
        int64_t qt = p % 2 == 0 ? f->nqt - 1 - p / 2 : p / 2;
        fwd_tile(f, bh / f->a->H, bh % f->a->H, qt, ws);
    }
    if (tiles) f->kb->end();
}

/* ---- short key ranges: all keys in one tile -----------------------------------------------
 * With few keys (fp32 data; flash.h, ATTN__FLASH_SHORT_*), a task takes (b, h, a range of
 * query rows): it transposes its head's K into its own scratch (K^T [Dp][Sp]), reads Q (and V when its rows
 * are unit-stride multiples of 16) in place, and per block of SBM rows computes S = Q K^T, the
 * scores, P = exp(S - row max), O = P V and O / sum P: one pass, no rescaling, no packing pass
 * over the whole batch, the head's K^T and V hot in the thread's cache.  Each row's arithmetic
 * is the same whichever task holds it, so the split never changes a bit. */
#define SBM 32

/* Rows [r0, r1) of n floats each (row stride rs) toward the cache: the next task's operands,
 * fetched while this one computes (their rows are strided views of a larger matrix in
 * memory, where the hardware prefetchers do not look ahead). */
static void prefetch_rows(const float *x, int64_t rs, int64_t r0, int64_t r1, int64_t n) {
    for (int64_t r = r0; r < r1; r++)
        for (int64_t e = 0; e < n; e += 16) __builtin_prefetch(x + r * rs + e, 0, 2);
}

static void fwd_short_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    const attn__sdpa_args *a = f->a;
    const attn__flash_kernels *kr = f->kr;
    const int64_t Sp = f->sp, Dp = f->Dp, Dvp = f->Dvp, S = a->S;
    int64_t *nvalid = (int64_t *)(f->scratch + (int64_t)tid * f->per_thread);
    float *Kt = (float *)(nvalid + SBM), *Sb = Kt + Dp * Sp, *O = Sb + SBM * Sp,
          *mx = O + SBM * Dvp, *sum = mx + SBM, *keep = sum + SBM, *Vp = keep + Sp;
    int64_t packed = -1; /* the (b, kv head) whose K^T (and V) the scratch holds */
    for (int64_t t = begin; t < end; t++) {
        /* a head's row chunks from the last (under a causal mask the heaviest) to the first */
        int64_t bh = t / f->snch, ch = f->snch - 1 - t % f->snch, b = bh / a->H, h = bh % a->H;
        int64_t hk = h / f->group;
        const float *kb = a->k + b * a->ks[0] + hk * a->ks[1];
        const float *vb = a->v + b * a->vs[0] + hk * a->vs[1];
        if (packed != b * a->Hkv + hk) {
            tr_tile(kr, kb, a->ks[2], a->ks[3], S, a->D, Kt, Sp);
            if (!f->vin) copy_rows(vb, a->vs[2], a->vs[3], S, a->Dv, Sp, Dvp, Vp);
            packed = b * a->Hkv + hk;
        }
        const float *V = f->vin ? vb : Vp;
        const int64_t ldv = f->vin ? a->vs[2] : Dvp;
        int64_t r0 = ch * f->srows, r1 = r0 + f->srows < a->L ? r0 + f->srows : a->L;
        /* the next task's K, V and Q rows, a share per row block */
        int64_t nb = (r1 - r0 + SBM - 1) / SBM, nbh = (t + 1) / f->snch,
                nch = f->snch - 1 - (t + 1) % f->snch;
        int64_t nb_ = nbh / a->H, nh = nbh % a->H, nhk = nh / f->group;
        int64_t nr0 = nch * f->srows, nr1 = nr0 + f->srows < a->L ? nr0 + f->srows : a->L;
        int pf = t + 1 < end && a->ks[3] == 1 && a->vs[3] == 1 && a->qs[3] == 1;
        for (int64_t i0 = r0; i0 < r1; i0 += SBM) {
            int64_t qn = r1 - i0 < SBM ? r1 - i0 : SBM, rb = (i0 - r0) / SBM;
            if (pf) {
                int64_t k0 = S * rb / nb, k1 = S * (rb + 1) / nb;
                int64_t q0 = nr0 + (nr1 - nr0) * rb / nb, q1 = nr0 + (nr1 - nr0) * (rb + 1) / nb;
                if (nb_ * a->Hkv + nhk != b * a->Hkv + hk) {
                    prefetch_rows(a->k + nb_ * a->ks[0] + nhk * a->ks[1], a->ks[2], k0, k1, a->D);
                    prefetch_rows(a->v + nb_ * a->vs[0] + nhk * a->vs[1], a->vs[2], k0, k1, a->Dv);
                }
                prefetch_rows(a->q + nb_ * a->qs[0] + nh * a->qs[1], a->qs[2], q0, q1, a->D);
            }
            /* under a causal mask, only the keys the block's last row sees (vis_cols) */
            int64_t nc = vis_cols(f, i0 + qn - 1, 0, S), kc = nc < S ? nc : S;
            if (nc == 0) nc = 16; /* no visible key: one vector of -inf per row */
            kr->mm(qn, nc, a->D, a->q + b * a->qs[0] + h * a->qs[1] + i0 * a->qs[2], a->qs[2],
                   a->qs[3], Kt, Sp, Sb, Sp, 0, NULL);
            block_scores_dt(f, b, h, i0, qn, 0, S, Sp, nc, Sb, nvalid, mx, NULL);
            kr->expsum(Sb, Sp, qn, nc, mx, sum);
            if (f->dropout)
                for (int64_t r = 0; r < qn; r++) {
                    float *s = Sb + r * Sp;
                    keep_row(f, b, h, i0 + r, 0, kc, keep);
                    for (int64_t j = 0; j < kc; j++) s[j] *= keep[j];
                }
            kr->mm(qn, Dvp, kc, Sb, Sp, 1, V, ldv, O, Dvp, 0, NULL);
            for (int64_t r = 0; r < qn; r++) {
                int64_t i = i0 + r;
                float *o = a->o + b * a->os[0] + h * a->os[1] + i * a->os[2];
                const float *Or = O + r * Dvp;
                float inv = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f;
                if (sum[r] > 0.0f && a->os[3] == 1)
                    for (int64_t e = 0; e < a->Dv; e++) o[e] = Or[e] * inv;
                else
                    for (int64_t e = 0; e < a->Dv; e++)
                        o[e * a->os[3]] = sum[r] > 0.0f ? Or[e] * inv : 0.0f;
                if (a->lse)
                    a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] =
                        sum[r] > 0.0f ? mx[r] + logf(sum[r]) : -INFINITY;
            }
        }
    }
}

static attn_status flash_fwd_short(attn_ctx *ctx, fl *f) {
    const attn__sdpa_args *a = f->a;
    if (a->B <= 0 || a->H <= 0 || a->L <= 0) return ATTN_OK; /* no output row */
    f->sp = rup16(a->S);
    f->vin = a->vs[3] == 1 && a->Dv % 16 == 0;
    /* enough tasks to balance the threads: at least 4 per thread when the rows allow it */
    int64_t nrb = (a->L + SBM - 1) / SBM, bh = a->B * a->H;
    int width = attn__parallel_width(ctx, bh * nrb);
    int64_t per_head = (4 * (int64_t)width + bh - 1) / bh;
    per_head = per_head < 1 ? 1 : per_head > nrb ? nrb : per_head;
    f->srows = SBM * ((nrb + per_head - 1) / per_head);
    f->snch = (a->L + f->srows - 1) / f->srows;
    f->per_thread = 2 * SBM + f->Dp * f->sp + SBM * f->sp + SBM * f->Dvp + 2 * SBM + f->sp +
                    (f->vin ? 0 : f->sp * f->Dvp);
    f->per_thread = rup16(f->per_thread);
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &f->scratch, width, f->per_thread, 1, 1));
    attn__parallel_for(ctx, bh * f->snch, fwd_short_task, f);
done:
    attn__ws_release(ctx, mk);
    return st;
}

static void setup(fl *f, attn_ctx *ctx, const attn__sdpa_args *a, const attn__sdpa_grads *g) {
    memset(f, 0, sizeof *f);
    f->a = a, f->g = g, f->kr = ctx->kern.flash, f->drop = ctx->kern.dropout_row;
    f->Dp = rup16(a->D), f->Dvp = rup16(a->Dv);
    f->nqt = (a->L + BM - 1) / BM, f->nkt = (a->S + BN - 1) / BN;
    f->group = a->H / a->Hkv;
    f->masked = a->mask[0].kind != ATTN_MASK_NONE || a->mask[1].kind != ATTN_MASK_NONE;
    /* Unclipped, row i sees [i + lo, i + hi] with the same offsets for every row: only a
     * top-left causal mask (hi = 0) below a window's left edge (lo = S - L - window_left > 0)
     * leaves every row empty; a right edge never passes the left one. */
    f->open = !(a->window && a->causal == ATTN_CAUSAL_TOP_LEFT && a->window_left >= 0 &&
                a->window_left < a->S + a->L && a->S - a->L - a->window_left > 0);
    f->dropout = a->dropout_p > 0.0f;
    f->plain = !f->masked && !(a->softcap > 0) && !a->alibi;
    f->every = f->plain && !f->dropout && a->causal == ATTN_CAUSAL_NONE && !a->window;
    f->keep_scale = f->dropout ? 1.0f / (1.0f - a->dropout_p) : 1.0f;
}

/* The forward; qkv16 != NULL: bf16 storage, q, k, v from qkv16[0..2]. */
static attn_status flash_fwd(attn_ctx *ctx, const attn__sdpa_args *a,
                             const attn__bf16 *const *qkv16) {
    if (a->w)
        return attn__fail(ctx, ATTN_E_INVALID, "attn__flash_fwd: attention weights requested");
    fl f;
    setup(&f, ctx, a, NULL);
    if (qkv16) {
        f.kb = ctx->kern.flash_bf16, f.widen = ctx->kern.flash_bf16_widen;
        f.q16 = qkv16[0], f.k16 = qkv16[1], f.v16 = qkv16[2];
    }
    /* one tile of all keys: up to 256 keys, or up to 1024 while K^T stays within 256 KB
     * (D = 64: S <= 1024; D = 128: S <= 512): 5-11% faster than the tiled path at
     * L = S = 384 .. 1024, D = 64 (no rescaling, no packing pass) */
    if (!qkv16 && a->S >= 1 &&
        (a->S <= ATTN__FLASH_SHORT_S ||
         (a->S <= ATTN__FLASH_SHORT_S2 && f.Dp * rup16(a->S) <= ATTN__FLASH_SHORT_KT)))
        return flash_fwd_short(ctx, &f);
    /* tile kernels: Q's rows and K^T's columns padded to whole steps of 16 pairs */
    if (f.kb && !f.widen && f.kb->tiles) f.Dp = (a->D + 31) & ~(int64_t)31;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    int64_t nkv = a->B * a->Hkv * f.nkt, ntask = a->B * a->H * f.nqt;
    if (f.kb && !f.widen) { /* bf16 tiles: half the floats */
        float *kt16, *vp16;
        ATTN_TRYG(attn__ws_f32(ctx, &kt16, nkv, f.Dp, BN / 2, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &vp16, nkv, BN / 2, f.Dvp, 1));
        f.Kt16 = (attn__bf16 *)kt16, f.Vp16 = (attn__bf16 *)vp16;
        attn__parallel_for(ctx, nkv, pack_kv_bf16_task, &f);
    } else {
        if (!f.kb) {
            f.qin = a->qs[3] == 1 && a->D % 16 == 0;
            /* V is the product's B operand, loaded by whole vectors: in place only where
             * every row starts on a 64-byte line (else each AVX-512 load, and every other
             * AVX2 one, spans two lines: malloc'd inputs, 16 bytes past a page, ran the
             * forward 4-6% slower than a packed copy; Q is only broadcast) */
            f.vin = a->vs[3] == 1 && a->Dv % 16 == 0 && (uintptr_t)a->v % 64 == 0 &&
                    a->vs[0] % 16 == 0 && a->vs[1] % 16 == 0 && a->vs[2] % 16 == 0;
        }
        ATTN_TRYG(attn__ws_f32(ctx, &f.Kt, nkv, f.Dp, BN, 1));
        if (!f.vin) ATTN_TRYG(attn__ws_f32(ctx, &f.Vp, nkv, BN, f.Dvp, 1));
        attn__parallel_for(ctx, nkv, f.kb ? pack_kv_bf16_task : pack_kv_task, &f);
    }
    int width = attn__parallel_width(ctx, ntask);
    f.per_thread = BM * f.Dp + BM * BN + BM * f.Dvp + 6 * BM + BN + 2 * BM /* nvalid */;
    /* P as bf16 [BM][BN], and 16 rows more that the tile kernels may read past a strip */
    if (f.kb && !f.widen) f.p16_off = f.per_thread, f.per_thread += (BM + 16) * BN / 2;
    if (f.kb && !f.widen && f.kb->tiles) {
        f.grp = f.plain && !f.dropout;
        f.kg = 8; /* 512 keys (D = 64, L = 2048, 1 thread: 4 tiles 4% slower, 16 the same) */
        f.sg_off = f.per_thread, f.per_thread += 32 * f.kg * BN;
        f.pg_off = f.per_thread, f.per_thread += 48 * f.kg * BN / 2;
    }
    if (!(f.kb && !f.widen)) { /* fp32 products: key-tile groups (fwd_groups) */
        /* 512 keys up to D + Dv = 256 (D = 64, L = S = 4096, 2 threads: 1-2% faster than one
         * tile, causal 15%; 16: the same; D = 128: 4 the same); 128 keys beyond, where 512
         * keys of K^T and V take 1 MB or more of the core's L2 (D = 256, L = 1024 .. 4096: 2-9%
         * faster than 8 tiles, causal 6-10%; 4 tiles in between; docs/kernels.md) */
        f.kg32 = f.Dp + f.Dvp > 256 ? 2 : 8;
        f.s32_off = f.per_thread, f.per_thread += SR * f.kg32 * BN;
    }
    ATTN_TRYG(attn__ws_f32(ctx, &f.scratch, width, f.per_thread, 1, 1));
    attn__parallel_for(ctx, ntask, fwd_task, &f);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__flash_fwd(attn_ctx *ctx, const attn__sdpa_args *a) {
    return flash_fwd(ctx, a, NULL);
}

attn_status attn__flash_fwd_bf16(attn_ctx *ctx, const attn__sdpa_args *a, const attn__bf16 *q,
                                 const attn__bf16 *k, const attn__bf16 *v) {
    const attn__bf16 *qkv[3] = {q, k, v};
    return flash_fwd(ctx, a, qkv);
}

/* ---- backward ------------------------------------------------------------------------------ */
/* Per-thread block scratch: P, dP, W, keep [BM][BN] each, mx [BM], nvalid [BM] (int64), then
 * the soft cap's derivative dt [BM][BN]. */
#define BLK_FLOATS (5 * BM * BN + 3 * BM) /* + mx, nvalid */

/* One (query tile, key tile) block of head (b, h).  With delta_acc, only accumulates
 * sum_j P dP into delta_acc[r] (delta recomputation).  Otherwise updates dK, dV [BN][Dp|Dvp]
 * and dQ [BM][Dp] (each may be NULL). */
static void bwd_block(const fl *f, float *blk, int64_t b, int64_t h, int64_t qt, int64_t kt,
                      float *dK, float *dV, float *dQ, const int64_t ldd[3], float *delta_acc) {
    const attn__sdpa_args *a = f->a;
    const attn__flash_kernels *kr = f->kr;
    int64_t Dp = f->Dp, Dvp = f->Dvp, hk = h / f->group, bh = b * a->H + h;
    int64_t i0 = qt * BM, qn = a->L - i0 < BM ? a->L - i0 : BM;
    int64_t j0 = kt * BN, kn = a->S - j0 < BN ? a->S - j0 : BN;
    int64_t tile = (b * a->Hkv + hk) * f->nkt + kt;
    /* Q, dO tiles (row strides ldq, ldo) and K tile rows (ldk): packed or in place */
    int64_t ldq = f->qin ? a->qs[2] : Dp, ldo = f->din ? f->g->dos[2] : Dvp;
    int64_t ldk = f->kin ? a->ks[2] : Dp;
    const float *Q = f->qin ? a->q + b * a->qs[0] + h * a->qs[1] + i0 * a->qs[2]
                            : f->Qp + (bh * f->nqt + qt) * BM * Dp;
    const float *dO = f->din ? f->g->dout + b * f->g->dos[0] + h * f->g->dos[1] + i0 * ldo
                             : f->dOp + (bh * f->nqt + qt) * BM * Dvp;
    const float *Kr = f->kin ? a->k + b * a->ks[0] + hk * a->ks[1] + j0 * a->ks[2]
                             : f->Kp + tile * BN * Dp;
    const float *lse = f->lse + bh * a->L + i0, *delta = f->delta + bh * a->L + i0;
    float *P = blk, *dP = P + BM * BN, *W = dP + BM * BN, *keep = W + BM * BN;
    float *mx = keep + BM * BN;
    int64_t *nvalid = (int64_t *)(mx + BM);
    float *dt = (float *)(nvalid + BM);
    /* Runs of strips of SR rows with the same visible columns nc (vis_cols, as in the
     * forward): P, dP and dS are computed on rows [ra, rb) x columns [0, nc) and zero beyond,
     * up to BN; the rows before the first run see none of the tile's keys and take no part.
     * A tile off the causal diagonal is one run of all rows and BN columns. */
    int64_t run_a[BM / SR + 1], run_b[BM / SR + 1], run_n[BM / SR + 1], nrun = 0;
    for (int64_t ra = 0, rb; ra < qn; ra = rb) {
        rb = ra + SR < qn ? ra + SR : qn;
        int64_t nc = vis_cols(f, i0 + rb - 1, j0, kn);
        while (rb < qn) {
            int64_t rn = rb + SR < qn ? rb + SR : qn;
            if (vis_cols(f, i0 + rn - 1, j0, kn) != nc) break;
            rb = rn;
        }
        if (nc == 0) continue;
        run_a[nrun] = ra, run_b[nrun] = rb, run_n[nrun++] = nc;
    }
    if (nrun == 0) return;
    int64_t r0 = run_a[0]; /* the first row that sees a key of the tile */
    int any = 0;
    for (int64_t u = 0; u < nrun; u++) {
        int64_t ra = run_a[u], rows = run_b[u] - ra, nc = run_n[u];
        /* where every row sees every key of the run, P = exp(scale S - lse) in the product's
         * epilogue (mmexp: the bits of mm, smax and expsum) */
        int fused = kr->mmexp && f->plain && all_visible(f, i0 + ra, rows, j0, nc);
        if (fused) {
            kr->mmexp(rows, nc, a->D, Q + ra * ldq, ldq, f->Kt + tile * Dp * BN, BN,
                      P + ra * BN, BN, a->scale, lse + ra);
            for (int64_t r = ra; r < ra + rows; r++) mx[r] = 0.0f; /* each row sees keys */
        } else {
            kr->mm(rows, nc, a->D, Q + ra * ldq, ldq, 1, f->Kt + tile * Dp * BN, BN, P + ra * BN,
                   BN, 0, NULL);
            block_scores_dt(f, b, h, i0 + ra, rows, j0, kn, BN, nc, P + ra * BN, nvalid, mx + ra,
                            dt + ra * BN);
        }
        for (int64_t r = ra; r < ra + rows; r++) {
            any |= mx[r] != -INFINITY && lse[r] != -INFINITY;
            if (f->dropout) {
                float *kp = keep + r * BN;
                memset(kp, 0, sizeof(float) * BN);
                keep_row(f, b, h, i0 + r, j0, kn < nc ? kn : nc, kp);
            }
        }
        /* P = exp(S - lse); rows with lse = -inf give 0 */
        if (!fused) kr->expsum(P + ra * BN, BN, rows, nc, lse + ra, NULL);
    }
    if (!any) return; /* every weight of the block is 0: nothing flows */
    /* dS = scale P (dP - delta) in the dP product's epilogue (mmds: the bits of mm and ds)
     * unless dropout's multipliers, the soft cap's derivative or the delta recomputation
     * (which needs dP itself) come between */
    int fds = kr->mmds && f->plain && !f->dropout && !delta_acc;
    for (int64_t u = 0; u < nrun; u++) {
        int64_t ra = run_a[u], rows = run_b[u] - ra, nc = run_n[u];
        if (fds)
            kr->mmds(rows, nc, a->Dv, dO + ra * ldo, ldo, f->Vt + tile * Dvp * BN, BN,
                     dP + ra * BN, BN, P + ra * BN, BN, delta + ra, a->scale);
        else
            kr->mm(rows, nc, a->Dv, dO + ra * ldo, ldo, 1, f->Vt + tile * Dvp * BN, BN,
                   dP + ra * BN, BN, 0, NULL);
        if (nc < BN) /* the columns no row of the run sees: zero weights */
            for (int64_t r = ra; r < ra + rows; r++) {
                memset(P + r * BN + nc, 0, sizeof(float) * (size_t)(BN - nc));
                memset(dP + r * BN + nc, 0, sizeof(float) * (size_t)(BN - nc));
            }
    }
    if (delta_acc) {
        for (int64_t r = r0; r < qn; r++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < kn; j++)
                acc += P[r * BN + j] * dP[r * BN + j] * (f->dropout ? keep[r * BN + j] : 1.0f);
            delta_acc[r] += acc;
        }
        return;
    }
    /* dK and dV by groups of SR keys: key j gets weights from the rows that see it, from the
     * first such row on (the earlier rows give exact zeros: a sum from +0 over them stays +0);
     * groups with the same first row in one product. */
    int64_t grp_a[BN / SR + 2], grp_b[BN / SR + 2], grp_r[BN / SR + 2], ngrp = 0;
    for (int64_t ja = 0, jb, r = r0; ja < kn; ja = jb) {
        jb = ja + SR < kn ? ja + SR : kn;
        while (r < qn && vis_cols(f, i0 + r, j0, kn) <= ja) r++; /* rows before r see < ja */
        if (r == qn) break;
        if (ngrp > 0 && grp_r[ngrp - 1] == r) grp_b[ngrp - 1] = jb;
        else grp_a[ngrp] = ja, grp_b[ngrp] = jb, grp_r[ngrp++] = r;
    }
    if (dV) {
        const float *Wp = P;
        if (f->dropout) {
            for (int64_t r = r0; r < qn; r++)
                for (int64_t j = 0; j < BN; j++) W[r * BN + j] = P[r * BN + j] * keep[r * BN + j];
            Wp = W;
        }
        for (int64_t u = 0; u < ngrp; u++) {
            int64_t ja = grp_a[u], r = grp_r[u];
            kr->mm(grp_b[u] - ja, Dvp, qn - r, Wp + r * BN + ja, 1, BN, dO + r * ldo, ldo,
                   dV + ja * ldd[1], ldd[1], 1, NULL);
        }
    }
    for (int64_t u = 0; u < nrun && !fds; u++)
        for (int64_t r = run_a[u]; r < run_b[u]; r++)
            kr->ds(P + r * BN, dP + r * BN, f->dropout ? keep + r * BN : NULL, delta[r], a->scale,
                   run_n[u]);
    if (a->softcap > 0) /* through the cap: dS (1 - tanh^2) */
        for (int64_t u = 0; u < nrun; u++)
            for (int64_t r = run_a[u]; r < run_b[u]; r++)
                for (int64_t j = 0; j < run_n[u]; j++) dP[r * BN + j] *= dt[r * BN + j];
    if (dK)
        for (int64_t u = 0; u < ngrp; u++) {
            int64_t ja = grp_a[u], r = grp_r[u];
            kr->mm(grp_b[u] - ja, Dp, qn - r, dP + r * BN + ja, 1, BN, Q + r * ldq, ldq,
                   dK + ja * ldd[0], ldd[0], 1, NULL);
        }
    if (dQ)
        for (int64_t u = 0; u < nrun; u++) {
            int64_t ra = run_a[u], nc = run_n[u], kc = kn < nc ? kn : nc;
            kr->mm(run_b[u] - ra, Dp, kc, dP + ra * BN, BN, 1, Kr, ldk, dQ + ra * ldd[2], ldd[2],
                   1, NULL);
        }
}

/* Gradients accumulated straight in the outputs (unit-stride rows, D or Dv a multiple of 16:
 * the same sums, no copy), else in scratch tiles [rows][Dp|Dvp] stored at the end. */
static int dk_direct(const fl *f) {
    return f->g->dk && f->g->dks[3] == 1 && f->a->D == f->Dp;
}
static int dv_direct(const fl *f) {
    return f->g->dv && f->g->dvs[3] == 1 && f->a->Dv == f->Dvp;
}
static int dq_direct(const fl *f) {
    return f->g->dq && f->g->dqs[3] == 1 && f->a->D == f->Dp;
}

/* n rows of d floats, row stride rs, to zero */
static void zero_rows(float *x, int64_t rs, int64_t n, int64_t d) {
    for (int64_t r = 0; r < n; r++) memset(x + r * rs, 0, sizeof(float) * (size_t)d);
}

/* Packs Q and dO tiles of (b, h, qt) and computes delta = dO . O when O is given. */
static void pack_q_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    const attn__sdpa_args *a = f->a;
    const attn__sdpa_grads *g = f->g;
    for (int64_t t = begin; t < end; t++) {
        int64_t bh = t / f->nqt, qt = t % f->nqt, b = bh / a->H, h = bh % a->H;
        int64_t i0 = qt * BM, qn = a->L - i0 < BM ? a->L - i0 : BM;
        if (!f->qin) pack_rows(a->q, a->qs, b, h, i0, qn, a->D, f->Dp, f->Qp + t * BM * f->Dp);
        if (!f->din)
            pack_rows(g->dout, g->dos, b, h, i0, qn, a->Dv, f->Dvp, f->dOp + t * BM * f->Dvp);
        float *dl = f->delta + bh * a->L + i0;
        if (a->o) {
            int64_t ldo = f->din ? g->dos[2] : f->Dvp;
            const float *dO = f->din ? g->dout + b * g->dos[0] + h * g->dos[1] + i0 * ldo
                                     : f->dOp + t * BM * f->Dvp;
            const float *o = a->o + b * a->os[0] + h * a->os[1] + i0 * a->os[2];
            if (a->os[3] == 1) {
                f->kr->rowdot(dO, ldo, o, a->os[2], qn, a->Dv, dl);
            } else {
                for (int64_t r = 0; r < qn; r++) {
                    float acc = 0.0f;
                    for (int64_t e = 0; e < a->Dv; e++) {
                        const float p = dO[r * ldo + e] * o[r * a->os[2] + e * a->os[3]];
                        acc += p;
                    }
                    dl[r] = acc;
                }
            }
        } else {
            float *blk = f->scratch + (int64_t)tid * f->per_thread;
            int64_t kt0, kt1;
            key_tiles(f, qt, &kt0, &kt1);
            for (int64_t r = 0; r < qn; r++) dl[r] = 0.0f;
            for (int64_t kt = kt0; kt < kt1; kt++)
                bwd_block(f, blk, b, h, qt, kt, NULL, NULL, NULL, NULL, dl);
        }
    }
}

static void store_rows(const float *src, int64_t w, int64_t n, int64_t d, float *dst,
                       int64_t rs, int64_t cs) {
    for (int64_t r = 0; r < n; r++)
        if (cs == 1) memcpy(dst + r * rs, src + r * w, sizeof(float) * (size_t)d);
        else
            for (int64_t e = 0; e < d; e++) dst[r * rs + e * cs] = src[r * w + e];
}

/* dK, dV of the nt (1 or KT_RUN) key tiles from kt0 of (b, hk): heads of the group, then
 * query tiles, in order, and each query tile against the tiles in turn; with dQ (one-pass
 * scheme) also accumulates dQ: head hh of the group's rows at dQ + hh * hsq, row stride ldq.
 * A tile's dK and dV see the query tiles in the same order whatever nt, and a row of dQ the
 * key tiles in order: the bits of one tile at a time.  Tiles side by side share each query
 * tile's Q, dO and dQ while they are in L1/L2 (one head's Q, dO and dQ at L = 4096, 3 MB,
 * stream from L3 once per run of tiles instead of once per tile). */
#define KT_RUN 2
/* The kn rows of a key tile's gradient (dK or dV: d values, padded to dp), zeroed: in the
 * output itself (direct; row stride *ld) or in the scratch tile sc (row stride dp). */
static float *grad_tile(int direct, float *out, const int64_t st[4], int64_t b, int64_t hk,
                        int64_t j0, int64_t kn, int64_t d, int64_t dp, float *sc, int64_t *ld) {
    if (!direct) {
        *ld = dp;
        memset(sc, 0, sizeof(float) * (size_t)(BN * dp));
        return sc;
    }
    float *t = out + b * st[0] + hk * st[1] + j0 * st[2];
    *ld = st[2];
    zero_rows(t, *ld, kn, d);
    return t;
}

static void dkdv_tiles(const fl *f, float *ws, int64_t b, int64_t hk, int64_t kt0, int64_t nt,
                       float *dQ, int64_t hsq, int64_t ldq) {
    const attn__sdpa_args *a = f->a;
    const attn__sdpa_grads *g = f->g;
    float *blk = ws, *dK[KT_RUN], *dV[KT_RUN];
    int64_t kn[KT_RUN], ldd[KT_RUN][3];
    int kd = dk_direct(f), vd = dv_direct(f);
    for (int64_t i = 0; i < nt; i++) {
        int64_t j0 = (kt0 + i) * BN;
        kn[i] = a->S - j0 < BN ? a->S - j0 : BN;
        float *sc = blk + BLK_FLOATS + i * (BN * f->Dp + BN * f->Dvp);
        dK[i] = grad_tile(kd, g->dk, g->dks, b, hk, j0, kn[i], a->D, f->Dp, sc, &ldd[i][0]);
        dV[i] = grad_tile(vd, g->dv, g->dvs, b, hk, j0, kn[i], a->Dv, f->Dvp, sc + BN * f->Dp,
                          &ldd[i][1]);
        ldd[i][2] = ldq;
    }
    for (int64_t hh = 0; hh < f->group; hh++)
        for (int64_t qt = 0; qt < f->nqt; qt++)
            for (int64_t i = 0; i < nt; i++) {
                if (!live(f, qt, kt0 + i)) continue;
                bwd_block(f, blk, b, hk * f->group + hh, qt, kt0 + i, g->dk ? dK[i] : NULL,
                          g->dv ? dV[i] : NULL, dQ ? dQ + hh * hsq + qt * BM * ldq : NULL,
                          ldd[i], NULL);
            }
    for (int64_t i = 0; i < nt; i++) {
        int64_t j0 = (kt0 + i) * BN;
        if (g->dk && !kd)
            store_rows(dK[i], f->Dp, kn[i], a->D,
                       g->dk + b * g->dks[0] + hk * g->dks[1] + j0 * g->dks[2], g->dks[2],
                       g->dks[3]);
        if (g->dv && !vd)
            store_rows(dV[i], f->Dvp, kn[i], a->Dv,
                       g->dv + b * g->dvs[0] + hk * g->dvs[1] + j0 * g->dvs[2], g->dvs[2],
                       g->dvs[3]);
    }
}

/* Two-pass scheme, pass 1: task = (b, hk, kt). */
static void dkdv_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    float *ws = f->scratch + (int64_t)tid * f->per_thread;
    for (int64_t t = begin; t < end; t++) {
        int64_t bk = t / f->nkt, kt = t % f->nkt;
        dkdv_tiles(f, ws, bk / f->a->Hkv, bk % f->a->Hkv, kt, 1, NULL, 0, 0);
    }
}

/* Two-pass scheme, pass 2: task = (b, h, qt), heaviest first. */
static void dq_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    const attn__sdpa_args *a = f->a;
    const attn__sdpa_grads *g = f->g;
    float *blk = f->scratch + (int64_t)tid * f->per_thread, *dQ = blk + BLK_FLOATS;
    int64_t BH = a->B * a->H;
    int qd = dq_direct(f);
    for (int64_t t = begin; t < end; t++) {
        int64_t qt = f->nqt - 1 - t / BH, bh = t % BH, b = bh / a->H, h = bh % a->H;
        int64_t i0 = qt * BM, qn = a->L - i0 < BM ? a->L - i0 : BM;
        int64_t kt0, kt1;
        key_tiles(f, qt, &kt0, &kt1);
        float *dq = g->dq + b * g->dqs[0] + h * g->dqs[1] + i0 * g->dqs[2], *acc = dQ;
        int64_t ldd[3] = {0, 0, f->Dp};
        if (qd) acc = dq, ldd[2] = g->dqs[2], zero_rows(dq, ldd[2], qn, a->D);
        else memset(dQ, 0, sizeof(float) * (size_t)(BM * f->Dp));
        for (int64_t kt = kt0; kt < kt1; kt++)
            bwd_block(f, blk, b, h, qt, kt, NULL, NULL, acc, ldd, NULL);
        if (!qd) store_rows(dQ, f->Dp, qn, a->D, dq, g->dqs[2], g->dqs[3]);
    }
}

/* One-pass scheme: task = (b, hk): every key tile, dQ of the group's heads kept whole. */
static void onepass_task(void *arg, int64_t begin, int64_t end, int tid) {
    const fl *f = arg;
    const attn__sdpa_args *a = f->a;
    const attn__sdpa_grads *g = f->g;
    float *ws = f->scratch + (int64_t)tid * f->per_thread;
    int qd = dq_direct(f);
    float *dQ = g->dq && !qd ? ws + BLK_FLOATS + KT_RUN * (BN * f->Dp + BN * f->Dvp) : NULL;
    int64_t dqn = f->group * f->nqt * BM * f->Dp;
    for (int64_t t = begin; t < end; t++) {
        int64_t b = t / a->Hkv, hk = t % a->Hkv;
        if (qd) { /* the group's heads of dq, accumulated in place */
            float *dq = g->dq + b * g->dqs[0] + hk * f->group * g->dqs[1];
            for (int64_t hh = 0; hh < f->group; hh++)
                zero_rows(dq + hh * g->dqs[1], g->dqs[2], a->L, a->D);
            for (int64_t kt = 0; kt < f->nkt; kt += KT_RUN)
                dkdv_tiles(f, ws, b, hk, kt, f->nkt - kt < KT_RUN ? f->nkt - kt : KT_RUN, dq,
                           g->dqs[1], g->dqs[2]);
            continue;
        }
        if (dQ) memset(dQ, 0, sizeof(float) * (size_t)dqn);
        for (int64_t kt = 0; kt < f->nkt; kt += KT_RUN)
            dkdv_tiles(f, ws, b, hk, kt, f->nkt - kt < KT_RUN ? f->nkt - kt : KT_RUN, dQ,
                       f->nqt * BM * f->Dp, f->Dp);
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
    f.qin = a->qs[3] == 1 && a->D % 16 == 0;
    f.kin = a->ks[3] == 1 && a->D % 16 == 0;
    f.din = g->dos[3] == 1 && a->Dv % 16 == 0;
    ATTN_TRYG(attn__ws_f32(ctx, &f.Kt, nkv, f.Dp, BN, 1));
    if (!f.kin) ATTN_TRYG(attn__ws_f32(ctx, &f.Kp, nkv, BN, f.Dp, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &f.Vt, nkv, f.Dvp, BN, 1));
    if (!f.qin) ATTN_TRYG(attn__ws_f32(ctx, &f.Qp, nq, BM, f.Dp, 1));
    if (!f.din) ATTN_TRYG(attn__ws_f32(ctx, &f.dOp, nq, BM, f.Dvp, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &f.delta, a->B * a->H, a->L, 1, 1));
    attn__parallel_for(ctx, nkv, pack_kv_task, &f);
    {
        /* one pass over (b, kv head), or two passes that split finer but form P and dS
         * twice (7 products for 5).  With dQ accumulated in place (dq_direct), one pass when
         * its rounds of whole heads cost no more, ceil(nbk / threads) * 5 <= nbk / threads * 7
         * (so always on one thread: at B = 1, H = 1, L = S = 4096, one thread, the two passes
         * ran at 37-41% of the FMA peak); else, since one pass then holds each thread's dQ of
         * a whole group of heads in scratch, only when nbk alone keeps every thread busy */
        int64_t nbk = a->B * a->Hkv, most = nkv > nq ? nkv : nq;
        int64_t threads = attn__parallel_width(ctx, nbk > most ? nbk : most);
        int qd = dq_direct(&f);
        int onepass = g->dq && (qd ? 5 * ((nbk + threads - 1) / threads) * threads <= 7 * nbk
                                   : nbk >= 4 * (int64_t)attn__parallel_width(ctx, nbk));
        int64_t n1 = onepass ? nbk : nkv;
        int width = attn__parallel_width(ctx, n1 > nq ? n1 : nq);
        f.per_thread = BLK_FLOATS + KT_RUN * (BN * f.Dp + BN * f.Dvp) +
                       (onepass ? (qd ? 0 : f.group * f.nqt * BM * f.Dp) : BM * f.Dp);
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
