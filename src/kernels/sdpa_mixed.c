/* Mixed-precision attention (sdpa_mixed.h): the products of scaled dot-product attention on
 * bfloat16 operands with float sums, on the context's mixed GEMM kernel (gemm_mixed.h: AMX
 * tiles, VDPBF16PS or plain C), for a context created with ATTN_CTX_BF16_MATMUL: what
 * torch.autocast(bfloat16) does to F.scaled_dot_product_attention.  The softmax, the masks and
 * score features, the log-sum-exp, dropout and every sum outside the products stay in float.
 *
 * Forward, one task per (batch, head), query rows in chunks of QC rows:
 *   S = Q_c K^T (K^T packed once per task; only the key columns some row of the chunk sees),
 *   per row: scale, soft cap, ALiBi, masks, the causal/window range, softmax in float, lse,
 *   dropout multipliers;  O_c = P_c V (P rounded to bf16 while packed).
 * Backward (from the saved out and lse), one task per (batch, kv head), the heads of its group
 * in order, query chunks in order:
 *   P = exp(S - lse), W = P keep, dP = (dO V^T) keep, dS = scale P (dP - delta) [cap'],
 *   delta_i = dO_i . O_i;  dV += W^T dO_c,  dK += dS^T Q_c,  dQ_c = dS K.
 * The same operations for every element whoever runs the task: results are identical for any
 * thread count.  Each product rounds its operands to bf16 (error as gemm_mixed.h states). */
#include <math.h>
#include <string.h>

#include "flash.h"
#include "gemm_mixed.h"
#include "pool.h"
#include "sdpa_mixed.h"

#define KA ATTN__MIXED_KALIGN
#define QC_ELEMS 32768 /* query rows per chunk: about this many scores (128 KiB) */

static int64_t up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static int unit_inner(const attn__sdpa_args *a) {
    return a->qs[3] == 1 && a->ks[3] == 1 && a->vs[3] == 1 && a->os[3] == 1;
}

int attn__sdpa_mixed_ok(const attn_ctx *ctx, const attn__sdpa_args *a) {
    return (ctx->flags & ATTN_CTX_BF16_MATMUL) && !a->w && !a->rows && unit_inner(a) &&
           a->L * a->S >= 32 * 32 && a->S <= ATTN__SDPA_MIXED_MAX_S && a->D <= 512 &&
           a->Dv <= 512 && a->L > 0 && a->D > 0 && a->Dv > 0;
}

int attn__sdpa_mixed_bwd_ok(const attn_ctx *ctx, const attn__sdpa_args *a,
                            const attn__sdpa_grads *g) {
    return attn__sdpa_mixed_ok(ctx, a) && !g->dmask && g->dos[3] == 1 &&
           (!g->dq || g->dqs[3] == 1) && (!g->dk || g->dks[3] == 1) &&
           (!g->dv || g->dvs[3] == 1);
}

/* ---- serial products on packed operands ------------------------------------------------ */
typedef struct mm {
    const attn__mixed_kernel *k;
    attn__mixed_pack_a_fn pack_a;
    attn__mixed_pack_b_fn pack_b;
} mm;

/* op(A) rows [0, M) over K into pa (rows of kp bf16, zeros beyond K and below whole panels). */
static void pack_a(const mm *m, int trans, const float *src, int64_t ld, int64_t M, int64_t K,
                   int64_t kp, attn__bf16 *pa) {
    m->pack_a(trans, src, ld, M, (int)up(M, m->k->mr), K, kp, pa, kp, NULL);
}

/* op(B) columns [0, N) over K into panels of nr columns (panel p at pb + p nr kp). */
static void pack_b(const mm *m, int trans, const float *src, int64_t ld, int64_t N, int64_t K,
                   int64_t kp, attn__bf16 *pb) {
    const int nr = m->k->nr;
    for (int64_t j0 = 0; j0 < N; j0 += 8 * nr) { /* a few panels per call (long row reads) */
        const int64_t nv = N - j0 < 8 * nr ? N - j0 : 8 * nr;
        m->pack_b(trans, trans ? src + j0 * ld : src + j0, ld, nv, nr, K, kp, pb + j0 * kp);
    }
}

/* C[M, N] (acc: +=) = the first 2 kh values of each packed A row (stride lda) times the first
 * kh steps of the B panels (panel stride bstride); edge tiles through a scratch tile. */
static void tiles(const mm *m, int64_t M, int64_t N, int64_t kh, const attn__bf16 *pa,
                  int64_t lda, const attn__bf16 *pb, int64_t bstride, float *C, int64_t ldc,
                  int acc) {
    const int mr = m->k->mr, nr = m->k->nr;
    for (int64_t i0 = 0; i0 < M; i0 += mr) {
        const int64_t mv = M - i0 < mr ? M - i0 : mr;
        for (int64_t j0 = 0, p = 0; j0 < N; j0 += nr, p++) {
            const int64_t nv = N - j0 < nr ? N - j0 : nr;
            const attn__bf16 *a = pa + i0 * lda, *b = pb + p * bstride;
            float *c = C + i0 * ldc + j0;
            if (mv == mr && nv == nr) {
                m->k->ukr(kh, a, lda, b, c, ldc, acc);
                continue;
            }
            _Alignas(64) float t[32 * 32];
            if (acc)
                for (int64_t i = 0; i < mv; i++)
                    memcpy(t + i * nr, c + i * ldc, sizeof(float) * (size_t)nv);
            m->k->ukr(kh, a, lda, b, t, nr, acc);
            for (int64_t i = 0; i < mv; i++)
                memcpy(c + i * ldc, t + i * nr, sizeof(float) * (size_t)nv);
        }
    }
}

/* ---- the call ------------------------------------------------------------------------------ */
typedef struct job {
    const attn__sdpa_args *a;
    const attn__sdpa_grads *g;
    mm m;
    const attn__flash_kernels *fk; /* the row kernels: scale and max, exp and sum, dS */
    attn__dropout_row_fn drop;
    int plain; /* no soft cap, ALiBi, mask or window: the row kernels alone */
    int64_t QC, qcp, lds, Dp, Dvp, Sp, Sn, Dn, Dvn;
    int64_t npa, npb;  /* bf16 elements of the packed A and B scratch */
    size_t per_thread; /* bytes of scratch per thread (a multiple of 64) */
    unsigned char *scratch;
} job;

/* The visible keys [lo, hi] of row i under the causal mode and the window. */
static void range(const attn__sdpa_args *a, int64_t i, int64_t *lo, int64_t *hi) {
    attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S, i, lo, hi);
}

/* Row i of head (b, h): s[lo..hi] (the raw products) becomes the scores x (scale, cap, ALiBi,
 * masks; dt receives the cap's derivative when asked). */
static void score_row(const attn__sdpa_args *a, int64_t b, int64_t h, int64_t i, int64_t lo,
                      int64_t hi, float *s, float *dt) {
    for (int64_t j = lo; j <= hi; j++) s[j] *= a->scale;
    attn__sdpa_row_features(a, b, h, i, lo, hi, s, dt);
}

/* keep[0, S): the dropout multipliers of row i of head (b, h). */
static void keep_row(const job *jb, int64_t b, int64_t h, int64_t i, float *keep) {
    const attn__sdpa_args *a = jb->a;
    uint64_t base = a->drop_base + (uint64_t)(((b * a->H + h) * a->L + i) * a->S);
    jb->drop(a->seed, a->offset, base, a->S, a->dropout_p, 1.0f / (1.0f - a->dropout_p), keep);
    for (int64_t j = a->S; j < jb->Sp; j++) keep[j] = 0.0f;
}

/* Rows [i0, i0 + qc) of head (b, h), their products over the keys [0, jend) in s (row stride
 * lds), become scores (columns [0, kend) valid, -inf where a row sees no key) with their
 * maxima in mx.  nv: scratch of qc entries. */
static void score_rows(const job *jb, int64_t b, int64_t h, int64_t i0, int64_t qc,
                       int64_t kend, float *s, float *dt, int64_t *nv, float *mx) {
    const attn__sdpa_args *a = jb->a;
    if (jb->plain) { /* keys [0, hi]: one pass of the row kernel scales and masks them */
        for (int64_t r = 0; r < qc; r++) {
            int64_t lo, hi;
            range(a, i0 + r, &lo, &hi);
            nv[r] = hi + 1 > 0 ? hi + 1 : 0;
        }
        jb->fk->smax(s, jb->lds, qc, kend, nv, a->scale, mx);
        return;
    }
    for (int64_t r = 0; r < qc; r++) {
        const int64_t i = i0 + r;
        float *x = s + r * jb->lds, m = -INFINITY;
        int64_t lo, hi;
        range(a, i, &lo, &hi);
        if (lo <= hi) score_row(a, b, h, i, lo, hi, x, dt ? dt + r * jb->lds : NULL);
        for (int64_t j = 0; j < kend; j++) {
            if (j < lo || j > hi) {
                x[j] = -INFINITY;
                if (dt) dt[r * jb->lds + j] = 0.0f;
            }
            m = x[j] > m ? x[j] : m;
        }
        mx[r] = m;
    }
}

/* The keys the rows [i0, i1) see at most: [0, *jend); *kend = jend rounded up to KA. */
static void chunk_keys(const job *jb, int64_t i0, int64_t i1, int64_t *jend, int64_t *kend) {
    const attn__sdpa_args *a = jb->a;
    int64_t e = 0;
    for (int64_t i = i0; i < i1; i++) {
        int64_t lo, hi;
        range(a, i, &lo, &hi);
        if (lo <= hi && hi + 1 > e) e = hi + 1;
    }
    *jend = e;
    *kend = up(e > 0 ? e : 1, KA);
}

static void *carve(unsigned char **p, size_t bytes) {
    void *r = *p;
    *p += (bytes + 63) & ~(size_t)63;
    return r;
}

static void fwd_task(void *arg, int64_t begin, int64_t end, int tid) {
    const job *jb = arg;
    const attn__sdpa_args *a = jb->a;
    const mm *m = &jb->m;
    unsigned char *w = jb->scratch + (size_t)tid * jb->per_thread;
    attn__bf16 *kt = carve(&w, sizeof(attn__bf16) * (size_t)(jb->Sn * jb->Dp));
    attn__bf16 *vp = carve(&w, sizeof(attn__bf16) * (size_t)(jb->Dvn * jb->Sp));
    attn__bf16 *pa = carve(&w, sizeof(attn__bf16) * (size_t)jb->npa);
    float *sc = carve(&w, sizeof(float) * (size_t)(jb->QC * jb->lds));
    float *keep = carve(&w, sizeof(float) * (size_t)jb->Sp);
    float *mx = carve(&w, sizeof(float) * (size_t)jb->QC);
    float *sum = carve(&w, sizeof(float) * (size_t)jb->QC);
    int64_t *nv = carve(&w, sizeof(int64_t) * (size_t)jb->QC);
    if (m->k->begin) m->k->begin();
    for (int64_t bh = begin; bh < end; bh++) {
        const int64_t b = bh / a->H, h = bh % a->H, hk = h / (a->H / a->Hkv);
        const float *kb = a->k + b * a->ks[0] + hk * a->ks[1];
        const float *vb = a->v + b * a->vs[0] + hk * a->vs[1];
        pack_b(m, 1, kb, a->ks[2], a->S, a->D, jb->Dp, kt);  /* K^T: [D, S] */
        pack_b(m, 0, vb, a->vs[2], a->Dv, a->S, jb->Sp, vp); /* V:   [S, Dv] */
        for (int64_t i0 = 0; i0 < a->L; i0 += jb->QC) {
            const int64_t qc = a->L - i0 < jb->QC ? a->L - i0 : jb->QC;
            int64_t jend, kend;
            chunk_keys(jb, i0, i0 + qc, &jend, &kend);
            const float *qb = a->q + b * a->qs[0] + h * a->qs[1] + i0 * a->qs[2];
            float *ob = a->o + b * a->os[0] + h * a->os[1] + i0 * a->os[2];
            if (jend > 0) {
                pack_a(m, 0, qb, a->qs[2], qc, a->D, jb->Dp, pa);
                tiles(m, qc, jend, jb->Dp / 2, pa, jb->Dp, kt, jb->Dp * m->k->nr, sc, jb->lds, 0);
            }
            score_rows(jb, b, h, i0, qc, kend, sc, NULL, nv, mx);
            jb->fk->expsum(sc, jb->lds, qc, kend, mx, sum);
            for (int64_t r = 0; r < qc; r++) {
                const int64_t i = i0 + r;
                float *p = sc + r * jb->lds;
                if (a->lse)
                    a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] =
                        mx[r] == -INFINITY ? -INFINITY : mx[r] + logf(sum[r]);
                if (mx[r] == -INFINITY) continue; /* no visible key: zeros (expsum) */
                const float inv = 1.0f / sum[r];
                if (a->dropout_p > 0.0f) {
                    keep_row(jb, b, h, i, keep);
                    for (int64_t j = 0; j < kend; j++) p[j] *= inv * keep[j];
                } else {
                    for (int64_t j = 0; j < kend; j++) p[j] *= inv;
                }
            }
            /* O_c = P_c V over the keys [0, kend) */
            pack_a(m, 0, sc, jb->lds, qc, kend, kend, pa);
            tiles(m, qc, a->Dv, kend / 2, pa, kend, vp, jb->Sp * m->k->nr, ob, a->os[2], 0);
        }
    }
    if (m->k->end) m->k->end();
}

static attn_status setup(attn_ctx *ctx, const attn__sdpa_args *a, job *jb, int bwd,
                         int64_t tasks) {
    const attn__mixed_kernel *k = ctx->kern.mixed;
    jb->a = a;
    jb->m.k = k;
    jb->m.pack_a = k->pack_a ? k->pack_a : attn__mixed_pack_a_c;
    jb->m.pack_b = k->pack_b ? k->pack_b : attn__mixed_pack_b_c;
    jb->drop = ctx->kern.dropout_row;
    jb->fk = ctx->kern.flash;
    jb->plain = !(a->softcap > 0) && !a->alibi && !a->window &&
                a->mask[0].kind == ATTN_MASK_NONE && a->mask[1].kind == ATTN_MASK_NONE;
    jb->Dp = up(a->D, KA), jb->Dvp = up(a->Dv, KA), jb->Sp = up(a->S, KA);
    jb->Sn = up(a->S, k->nr), jb->Dn = up(a->D, k->nr), jb->Dvn = up(a->Dv, k->nr);
    jb->lds = jb->Sp > jb->Sn ? jb->Sp : jb->Sn;
    int64_t qc = QC_ELEMS / jb->lds / 32 * 32;
    if (qc < 32) qc = 32;
    if (qc > up(a->L, 32)) qc = up(a->L, 32);
    jb->QC = qc, jb->qcp = up(qc, KA);
    /* scratch per thread, each piece rounded to 64 bytes (a->S <= ATTN__SDPA_MIXED_MAX_S and
     * D, Dv <= 512 keep every size far from overflow).  Packed A: whole panels of mr rows of
     * a query chunk (Q_c, dO_c: Dp or Dvp wide; P_c, dS_c: up to Sp wide) or, transposed, of
     * the keys (S rows, qcp wide). */
    const int64_t qa = up(qc, k->mr), sa = up(a->S, k->mr);
    int64_t npa = qa * (jb->Sp > jb->Dp ? jb->Sp : jb->Dp);
    if (qa * jb->Dvp > npa) npa = qa * jb->Dvp;
    if (bwd && sa * jb->qcp > npa) npa = sa * jb->qcp;
    jb->npa = npa;
    jb->npb = (jb->Dn > jb->Dvn ? jb->Dn : jb->Dvn) * jb->qcp;
    size_t n = 0;
#define ADD(elems, size) (n += (((size_t)(elems) * (size)) + 63) & ~(size_t)63)
    if (!bwd) {
        ADD(jb->Sn * jb->Dp, 2);        /* K^T */
        ADD(jb->Dvn * jb->Sp, 2);       /* V */
        ADD(npa, 2);
        ADD(qc * jb->lds, 4);           /* scores, then P */
        ADD(jb->Sp, 4);                 /* keep */
        ADD(qc, 4);                     /* row maxima */
        ADD(qc, 4);                     /* row sums */
        ADD(qc, 8);                     /* visible keys */
    } else {
        ADD(jb->Sn * jb->Dp, 2);        /* K^T */
        ADD(jb->Sn * jb->Dvp, 2);       /* V^T */
        ADD(jb->Dn * jb->Sp, 2);        /* K   */
        ADD(npa, 2);
        ADD(jb->npb, 2);                /* packed B (dO_c, Q_c) */
        ADD(qc * jb->lds, 4);           /* P */
        ADD(qc * jb->lds, 4);           /* W = P keep (dropout) */
        ADD(qc * jb->lds, 4);           /* dP, then dS */
        ADD(qc * jb->lds, 4);           /* cap' */
        ADD(jb->Sp, 4);                 /* keep */
        ADD(qc, 4);                     /* delta */
        ADD(qc, 4);                     /* lse */
        ADD(qc, 8);                     /* visible keys */
    }
#undef ADD
    jb->per_thread = n;
    const int width = attn__parallel_width(ctx, tasks);
    size_t all;
    if (!attn__mul_size(n, (size_t)width, &all))
        return attn__fail(ctx, ATTN_E_NOMEM, "attention (bf16 products): scratch overflows");
    return attn__ws_alloc(ctx, all, 1, (void **)&jb->scratch);
}

attn_status attn__sdpa_mixed(attn_ctx *ctx, const attn__sdpa_args *a) {
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    job jb;
    memset(&jb, 0, sizeof jb);
    ATTN_TRYG(setup(ctx, a, &jb, 0, a->B * a->H));
    attn__parallel_for(ctx, a->B * a->H, fwd_task, &jb);
done:
    attn__ws_release(ctx, mk);
    return st;
}

static void bwd_task(void *arg, int64_t begin, int64_t end, int tid) {
    const job *jb = arg;
    const attn__sdpa_args *a = jb->a;
    const attn__sdpa_grads *g = jb->g;
    const mm *m = &jb->m;
    const int nr = m->k->nr;
    const int64_t group = a->H / a->Hkv, lds = jb->lds;
    unsigned char *w = jb->scratch + (size_t)tid * jb->per_thread;
    attn__bf16 *kt = carve(&w, sizeof(attn__bf16) * (size_t)(jb->Sn * jb->Dp));
    attn__bf16 *vt = carve(&w, sizeof(attn__bf16) * (size_t)(jb->Sn * jb->Dvp));
    attn__bf16 *kn = carve(&w, sizeof(attn__bf16) * (size_t)(jb->Dn * jb->Sp));
    attn__bf16 *pa = carve(&w, sizeof(attn__bf16) * (size_t)jb->npa);
    attn__bf16 *pb = carve(&w, sizeof(attn__bf16) * (size_t)jb->npb);
    float *P = carve(&w, sizeof(float) * (size_t)(jb->QC * lds));
    float *W = carve(&w, sizeof(float) * (size_t)(jb->QC * lds));
    float *dP = carve(&w, sizeof(float) * (size_t)(jb->QC * lds));
    float *dT = carve(&w, sizeof(float) * (size_t)(jb->QC * lds));
    float *keep = carve(&w, sizeof(float) * (size_t)jb->Sp);
    float *delta = carve(&w, sizeof(float) * (size_t)jb->QC);
    float *lrow = carve(&w, sizeof(float) * (size_t)jb->QC);
    int64_t *nv = carve(&w, sizeof(int64_t) * (size_t)jb->QC);
    const int drop = a->dropout_p > 0.0f, cap = a->softcap > 0;
    if (m->k->begin) m->k->begin();
    for (int64_t bk = begin; bk < end; bk++) {
        const int64_t b = bk / a->Hkv, hk = bk % a->Hkv;
        const float *kb = a->k + b * a->ks[0] + hk * a->ks[1];
        const float *vb = a->v + b * a->vs[0] + hk * a->vs[1];
        pack_b(m, 1, kb, a->ks[2], a->S, a->D, jb->Dp, kt);   /* K^T [D, S]  */
        pack_b(m, 1, vb, a->vs[2], a->S, a->Dv, jb->Dvp, vt); /* V^T [Dv, S] */
        pack_b(m, 0, kb, a->ks[2], a->D, a->S, jb->Sp, kn);   /* K   [S, D]  */
        /* dK and dV accumulate in place (rows of unit stride): the first chunk that reaches
         * them writes rows [0, its jend) and zeroes the rest; the later ones add */
        float *dk = g->dk ? g->dk + b * g->dks[0] + hk * g->dks[1] : NULL;
        float *dv = g->dv ? g->dv + b * g->dvs[0] + hk * g->dvs[1] : NULL;
        int fresh = 1;
        for (int64_t h = hk * group; h < (hk + 1) * group; h++)
            for (int64_t i0 = 0; i0 < a->L; i0 += jb->QC) {
                const int64_t qc = a->L - i0 < jb->QC ? a->L - i0 : jb->QC, qcp = up(qc, KA);
                int64_t jend, kend;
                chunk_keys(jb, i0, i0 + qc, &jend, &kend);
                const float *qb = a->q + b * a->qs[0] + h * a->qs[1] + i0 * a->qs[2];
                const float *ob = a->o + b * a->os[0] + h * a->os[1] + i0 * a->os[2];
                const float *db = g->dout + b * g->dos[0] + h * g->dos[1] + i0 * g->dos[2];
                float *dqb = g->dq ? g->dq + b * g->dqs[0] + h * g->dqs[1] + i0 * g->dqs[2]
                                   : NULL;
                if (jend == 0) { /* no row of the chunk sees a key: no gradient */
                    for (int64_t r = 0; dqb && r < qc; r++)
                        memset(dqb + r * g->dqs[2], 0, sizeof(float) * (size_t)a->D);
                    continue;
                }
                pack_a(m, 0, qb, a->qs[2], qc, a->D, jb->Dp, pa);
                tiles(m, qc, jend, jb->Dp / 2, pa, jb->Dp, kt, jb->Dp * nr, P, lds, 0);
                pack_a(m, 0, db, g->dos[2], qc, a->Dv, jb->Dvp, pa);
                tiles(m, qc, jend, jb->Dvp / 2, pa, jb->Dvp, vt, jb->Dvp * nr, dP, lds, 0);
                /* P = exp(scores - lse): -inf scores and rows without a key give zeros */
                score_rows(jb, b, h, i0, qc, kend, P, cap ? dT : NULL, nv, delta); /* delta: maxima */
                for (int64_t r = 0; r < qc; r++)
                    lrow[r] = a->lse[b * a->ls[0] + h * a->ls[1] + (i0 + r) * a->ls[2]];
                jb->fk->expsum(P, lds, qc, kend, lrow, NULL);
                jb->fk->rowdot(db, g->dos[2], ob, a->os[2], qc, a->Dv, lrow); /* delta */
                for (int64_t r = 0; r < qc; r++) {
                    float *p = P + r * lds, *dp = dP + r * lds;
                    const float dl = lrow[r];
                    for (int64_t j = jend; j < kend; j++) dp[j] = 0.0f;
                    if (drop) {
                        float *wr = W + r * lds;
                        keep_row(jb, b, h, i0 + r, keep);
                        for (int64_t j = 0; j < kend; j++) wr[j] = p[j] * keep[j];
                    }
                    /* dS = scale P (dP keep - delta) [cap'] in place of dP */
                    jb->fk->ds(p, dp, drop ? keep : NULL, dl, a->scale, kend);
                    if (cap)
                        for (int64_t j = 0; j < kend; j++) dp[j] *= dT[r * lds + j];
                }
                /* dV += W^T dO_c;  dK += dS^T Q_c  (M = the keys [0, jend), K = the rows) */
                const float *wsrc = drop ? W : P;
                if (fresh)
                    for (int64_t j = jend; j < a->S; j++) {
                        if (dk) memset(dk + j * g->dks[2], 0, sizeof(float) * (size_t)a->D);
                        if (dv) memset(dv + j * g->dvs[2], 0, sizeof(float) * (size_t)a->Dv);
                    }
                if (g->dv) {
                    pack_a(m, 1, wsrc, lds, jend, qc, qcp, pa);
                    pack_b(m, 0, db, g->dos[2], a->Dv, qc, qcp, pb);
                    tiles(m, jend, a->Dv, qcp / 2, pa, qcp, pb, qcp * nr, dv, g->dvs[2], !fresh);
                }
                if (g->dk) {
                    pack_a(m, 1, dP, lds, jend, qc, qcp, pa);
                    pack_b(m, 0, qb, a->qs[2], a->D, qc, qcp, pb);
                    tiles(m, jend, a->D, qcp / 2, pa, qcp, pb, qcp * nr, dk, g->dks[2], !fresh);
                }
                fresh = 0;
                if (dqb) { /* dQ_c = dS K over the keys [0, kend) */
                    pack_a(m, 0, dP, lds, qc, kend, kend, pa);
                    tiles(m, qc, a->D, kend / 2, pa, kend, kn, jb->Sp * nr, dqb, g->dqs[2], 0);
                }
            }
        if (fresh) /* no query saw a key: zero gradients */
            for (int64_t j = 0; j < a->S; j++) {
                if (dk) memset(dk + j * g->dks[2], 0, sizeof(float) * (size_t)a->D);
                if (dv) memset(dv + j * g->dvs[2], 0, sizeof(float) * (size_t)a->Dv);
            }
    }
    if (m->k->end) m->k->end();
}

attn_status attn__sdpa_mixed_bwd(attn_ctx *ctx, const attn__sdpa_args *a,
                                 const attn__sdpa_grads *g) {
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    attn__sdpa_args f = *a;
    if (!a->o || !a->lse) { /* recompute the forward's out and lse (same products) */
        float *o, *lse;
        ATTN_TRYG(attn__ws_f32(ctx, &o, a->B, a->H, a->L, a->Dv));
        ATTN_TRYG(attn__ws_f32(ctx, &lse, a->B, a->H, a->L, 1));
        f.o = o, f.os[0] = a->H * a->L * a->Dv, f.os[1] = a->L * a->Dv, f.os[2] = a->Dv;
        f.os[3] = 1;
        f.lse = lse, f.ls[0] = a->H * a->L, f.ls[1] = a->L, f.ls[2] = 1;
        ATTN_TRYG(attn__sdpa_mixed(ctx, &f));
    }
    {
        job jb;
        memset(&jb, 0, sizeof jb);
        jb.g = g;
        ATTN_TRYG(setup(ctx, &f, &jb, 1, a->B * a->Hkv));
        attn__parallel_for(ctx, a->B * a->Hkv, bwd_task, &jb);
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}
