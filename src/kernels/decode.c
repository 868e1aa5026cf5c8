/* Split-KV attention for decoding (see decode.h): the driver (chunk tasks, visible ranges,
 * masks, the merge), the plain C microkernels and the choice among ISAs.
 *
 * Task (b, kv head hk, chunk c) over keys j0 .. j0+n-1, for the R = G*L rows of the G heads
 * that share hk (row r = head hk*G + r/L, query r%L):
 *   S = Q K_c^T (qk, K read in place) over the keys some row can see (attn__sdpa_range: causal
 *   mode and window), per row: scale, -inf outside its range, soft cap, ALiBi, masks,
 *   m_c = max S, P = exp(S - m_c), l_c = sum P (the fused kernels' smax, softcap and expsum
 *   microkernels, so the ISAs round these steps as flash.c does),
 *   O_c = P V_c (pv, V read in place).
 * The rows' (m_c, l_c) and O_c go to the workspace; chunks that no row can see (before a causal
 * limit or a window) are skipped and marked m_c = -inf.  The merge then runs per output row,
 * chunks in order.  Q is packed per task (R x D floats, zero padded to a multiple of 16); K and
 * V never are.
 *
 * bf16 storage (attn__decode_bf16) changes three steps only: Q is widened as it is packed, the
 * qk_bf16 / pv_bf16 microkernels widen K and V in registers, and P is rounded to bf16 values
 * (round_p) between expsum, whose l_c sums the unrounded weights, and the product with V. */
#include <math.h>
#include <string.h>

#include "decode.h"
#include "dispatch.h"
#include "flash.h"
#include "pool.h"


/* ---- plain C microkernels ----------------------------------------------------------------- */
/* The plain C kernels for both storage types: T is the K/V element type, LD(x) its value as a
 * float. */
static inline float ld_f32(float x) { return x; }
#define REF_KERNELS(QK, PV, T, LD)                                                             \
    static void QK(int64_t rows, int64_t n, int64_t D, const float *q, int64_t ldq, const T *k, \
                   int64_t ldk, float *s, int64_t lds) {                                       \
        for (int64_t j = 0; j < n; j++) {                                                      \
            const T *kj = k + j * ldk;                                                         \
            for (int64_t r = 0; r < rows; r++) {                                               \
                const float *qr = q + r * ldq;                                                 \
                float acc = 0.0f;                                                              \
                for (int64_t d = 0; d < D; d++) acc += qr[d] * LD(kj[d]);                      \
                s[r * lds + j] = acc;                                                          \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    static void PV(int64_t rows, int64_t n, int64_t Dv, const float *p, int64_t ldp,           \
                   const T *v, int64_t ldv, float *o, int64_t ldo) {                           \
        for (int64_t r = 0; r < rows; r++) {                                                   \
            float *orow = o + r * ldo;                                                         \
            const float *pr = p + r * ldp;                                                     \
            memset(orow, 0, sizeof(float) * (size_t)Dv);                                       \
            for (int64_t j = 0; j < n; j++) {                                                  \
                float pj = pr[j];                                                              \
                if (pj == 0.0f) continue; /* masked key: adds nothing */                       \
                const T *vj = v + j * ldv;                                                     \
                for (int64_t e = 0; e < Dv; e++) orow[e] += pj * LD(vj[e]);                    \
            }                                                                                  \
        }                                                                                      \
    }
REF_KERNELS(ref_qk, ref_pv, float, ld_f32)
REF_KERNELS(ref_qk_bf16, ref_pv_bf16, attn__bf16, attn__bf16_to_f32)

static const attn__decode_kernels ref_kernels = {ATTN__ISA_REF, ref_qk, ref_pv, ref_qk_bf16,
                                                 ref_pv_bf16};

const attn__decode_kernels *attn__decode_kernels_ref(void) { return &ref_kernels; }

/* ---- eligibility -------------------------------------------------------------------------- */
int attn__decode_eligible(const attn_ctx *ctx, const attn__sdpa_args *a) {
    if (!ctx->kern.decode_on) return 0; /* ATTN_DECODE=0 */
    /* dropout (and so drop_base) and the weights output stay with the other paths */
    if (a->w || a->dropout_p > 0.0f || a->fused) return 0;
    if (a->L < 1 || a->L > ATTN__DECODE_MAX_L || a->S < ATTN__DECODE_MIN_S) return 0;
    if (a->Hkv < 1 || a->H % a->Hkv || a->H / a->Hkv > ATTN__DECODE_MAX_ROWS / a->L) return 0;
    return a->qs[3] == 1 && a->ks[3] == 1 && a->vs[3] == 1 && a->os[3] == 1;
}

/* ---- the call's shared state -------------------------------------------------------------- */
typedef struct dc {
    const attn__sdpa_args *a;
    const attn__decode_kernels *kr;
    const attn__flash_kernels *fk; /* smax, softcap, expsum */
    int bf16;                          /* bf16 storage */
    const attn__bf16 *q16, *k16, *v16; /* bf16 storage: the inputs (a->q, a->k, a->v else) */
    int64_t G, R, Dp, Dvp, ch, nch; /* ch: keys per chunk (ATTN__DECODE_CHUNK) */
    int rowwise; /* masks or ALiBi: a pass over each row of scores */
    float *part;    /* [B*Hkv][nch][R][Dvp]: unnormalised chunk outputs O_c */
    float *ml;      /* [B*Hkv][nch][R][2]: chunk maximum m_c, chunk sum l_c */
    float *scratch; /* per thread: nvalid, lo (int64) [R], Q [R][Dp], S [R][CH], mx, sum [R] */
    int64_t per_thread, nv_floats;
} dc;

static int64_t rup16(int64_t x) { return (x + 15) & ~(int64_t)15; }

/* The per-row pass over the visible keys [lo, n) of row (b, h, i) in s (keys from j0; entries
 * before lo become -inf): ALiBi, then both masks; returns the new row maximum. */
static float row_pass(const dc *f, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t lo,
                      int64_t n, float *s) {
    const attn__sdpa_args *a = f->a;
    for (int64_t j = 0; j < lo; j++) s[j] = -INFINITY;
    if (a->alibi) {
        float slope = a->alibi[h];
        int64_t d0 = i + a->S - a->L - j0; /* the distance to key j0 + j is |d0 - j| */
        for (int64_t j = lo; j < n; j++) {
            int64_t d = d0 - j;
            s[j] -= slope * (float)(d < 0 ? -d : d);
        }
    }
    for (int mi = 0; mi < 2; mi++) {
        const attn__mask4 *m = &a->mask[mi];
        if (m->kind == ATTN_MASK_NONE) continue;
        int64_t nc = (a->mask_ncols[mi] < a->S ? a->mask_ncols[mi] : a->S) - j0;
        int64_t cnt = n < nc ? n : nc, st = m->stride[3];
        if (cnt <= lo) continue; /* no masked column here (mask_ncols) */
        int64_t o = b * m->stride[0] + h * m->stride[1] + i * m->stride[2] + j0 * st;
        if (m->kind == ATTN_MASK_ADD) {
            const float *d = (const float *)m->data + o;
            for (int64_t j = lo; j < cnt; j++)
                if (s[j] != -INFINITY) s[j] += d[j * st];
        } else {
            const unsigned char *d = (const unsigned char *)m->data + o;
            unsigned char blockv = m->kind == ATTN_MASK_BLOCK;
            for (int64_t j = lo; j < cnt; j++)
                if ((d[j * st] != 0) == blockv) s[j] = -INFINITY;
        }
    }
    float mx = -INFINITY;
    for (int64_t j = lo; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* s[r*ld + j] = attn__bf16_round(s[r*ld + j]) for r < rows, j < n, written without the NaN
 * case (weights are never NaN) so that it vectorises.  Not the bf16 flash kernels' round:
 * choosing that table asks CPUID, which costs tens of microseconds per call in a VM. */
static void round_p(float *s, int64_t ld, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        float *row = s + r * ld;
        for (int64_t j = 0; j < n; j++) {
            uint32_t u;
            memcpy(&u, &row[j], 4);
            u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
            memcpy(&row[j], &u, 4);
        }
    }
}

/* Q rows of (b, hk) into Q [R][Dp], zero padded (bf16: widened). */
static void pack_q(const dc *f, int64_t b, int64_t hk, float *Q) {
    const attn__sdpa_args *a = f->a;
    memset(Q, 0, sizeof(float) * (size_t)(f->R * f->Dp));
    for (int64_t r = 0; r < f->R; r++) {
        int64_t h = hk * f->G + r / a->L, i = r % a->L;
        int64_t off = b * a->qs[0] + h * a->qs[1] + i * a->qs[2];
        if (f->bf16)
            for (int64_t d = 0; d < a->D; d++)
                Q[r * f->Dp + d] = attn__bf16_to_f32(f->q16[off + d]);
        else memcpy(Q + r * f->Dp, a->q + off, sizeof(float) * (size_t)a->D);
    }
}

/* Tasks t = (b*Hkv + hk)*nch + c: consecutive tasks stream consecutive chunks of one head. */
static void chunk_task(void *arg, int64_t begin, int64_t end, int tid) {
    const dc *f = arg;
    const attn__sdpa_args *a = f->a;
    int64_t R = f->R;
    float *ws = f->scratch + (int64_t)tid * f->per_thread;
    int64_t *nvalid = (int64_t *)ws, *lo = nvalid + R;
    float *Q = ws + f->nv_floats, *Sb = Q + R * f->Dp, *mx = Sb + R * f->ch, *sum = mx + R;
    int64_t packed = -1;
    for (int64_t t = begin; t < end; t++) {
        int64_t bk = t / f->nch, c = t % f->nch, b = bk / a->Hkv, hk = bk % a->Hkv;
        int64_t CH = f->ch, j0 = c * CH, n = a->S - j0 < CH ? a->S - j0 : CH;
        int64_t nmax = 0, jmin = n; /* keys [jmin, nmax) of the chunk are visible to some row */
        int rowwise = f->rowwise;
        float *ml = f->ml + t * R * 2;
        for (int64_t r = 0; r < R; r++) { /* row r sees keys [lo, nvalid) of the chunk */
            int64_t l, h;
            attn__sdpa_range(a->causal, a->window, a->window_left, a->window_right, a->L, a->S,
                             r % a->L, &l, &h);
            l -= j0, h -= j0;
            l = l < 0 ? 0 : l;
            h = h + 1 < n ? h + 1 : n;
            if (h <= l) l = h = 0;
            nvalid[r] = h, lo[r] = l;
            if (h > l) {
                nmax = h > nmax ? h : nmax;
                jmin = l < jmin ? l : jmin;
                rowwise |= l > 0;
            }
        }
        if (nmax == 0) { /* no row sees a key of this chunk */
            for (int64_t r = 0; r < R; r++) ml[2 * r] = -INFINITY, ml[2 * r + 1] = 0.0f;
            continue;
        }
        if (packed != bk) pack_q(f, b, hk, Q), packed = bk;
        /* the chunk's first visible key and value (element offsets) */
        int64_t ko = b * a->ks[0] + hk * a->ks[1] + (j0 + jmin) * a->ks[2];
        int64_t vo = b * a->vs[0] + hk * a->vs[1] + (j0 + jmin) * a->vs[2];
        int64_t n16 = rup16(nmax);
        if (jmin > 0) /* a window starts inside the chunk: the keys before it are not computed */
            for (int64_t r = 0; r < R; r++) memset(Sb + r * CH, 0, sizeof(float) * (size_t)jmin);
        if (f->bf16)
            f->kr->qk_bf16(R, nmax - jmin, a->D, Q, f->Dp, f->k16 + ko, a->ks[2], Sb + jmin, CH);
        else f->kr->qk(R, nmax - jmin, a->D, Q, f->Dp, a->k + ko, a->ks[2], Sb + jmin, CH);
        f->fk->smax(Sb, CH, R, n16, nvalid, a->scale, mx);
        if (a->softcap > 0) f->fk->softcap(Sb, CH, R, n16, a->softcap, NULL, mx);
        if (rowwise)
            for (int64_t r = 0; r < R; r++)
                if (nvalid[r] > 0)
                    mx[r] = row_pass(f, b, hk * f->G + r / a->L, r % a->L, j0, lo[r], nvalid[r],
                                     Sb + r * CH);
        f->fk->expsum(Sb, CH, R, n16, mx, sum);
        float *oc = f->part + t * R * f->Dvp;
        if (f->bf16) { /* the weights to bf16 values, after l_c summed them unrounded */
            round_p(Sb, CH, R, n16);
            f->kr->pv_bf16(R, nmax - jmin, a->Dv, Sb + jmin, CH, f->v16 + vo, a->vs[2], oc,
                           f->Dvp);
        } else f->kr->pv(R, nmax - jmin, a->Dv, Sb + jmin, CH, a->v + vo, a->vs[2], oc, f->Dvp);
        for (int64_t r = 0; r < R; r++) ml[2 * r] = mx[r], ml[2 * r + 1] = sum[r];
    }
}

/* Output rows t = (b*Hkv + hk)*R + r: the chunks of the row combined in order. */
static void merge_task(void *arg, int64_t begin, int64_t end, int tid) {
    const dc *f = arg;
    const attn__sdpa_args *a = f->a;
    int64_t R = f->R, nch = f->nch;
    for (int64_t t = begin; t < end; t++) {
        int64_t bk = t / R, r = t % R, b = bk / a->Hkv, hk = bk % a->Hkv;
        int64_t h = hk * f->G + r / a->L, i = r % a->L;
        const float *ml = f->ml + (bk * nch * R + r) * 2;
        const float *part = f->part + (bk * nch * R + r) * f->Dvp;
        float *o = a->o + b * a->os[0] + h * a->os[1] + i * a->os[2];
        float m = -INFINITY;
        for (int64_t c = 0; c < nch; c++) m = ml[c * R * 2] > m ? ml[c * R * 2] : m;
        memset(o, 0, sizeof(float) * (size_t)a->Dv);
        float l = 0.0f;
        if (m != -INFINITY)
            for (int64_t c = 0; c < nch; c++) {
                float mc = ml[c * R * 2];
                if (mc == -INFINITY) continue; /* nothing seen: O_c is not even written */
                float w = expf(mc - m);
                const float *oc = part + c * R * f->Dvp;
                l += w * ml[c * R * 2 + 1];
                for (int64_t e = 0; e < a->Dv; e++) o[e] += w * oc[e];
            }
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int64_t e = 0; e < a->Dv; e++) o[e] *= inv;
        if (a->lse) a->lse[b * a->ls[0] + h * a->ls[1] + i * a->ls[2]] =
            l > 0.0f ? m + logf(l) : -INFINITY;
    }
}

/* The call's state for problem a (fp32: q16 == NULL; bf16 storage), its sizes checked; the
 * workspace for its partial outputs is the caller's (setup_alloc). */
static attn_status setup(attn_ctx *ctx, dc *f, const attn__sdpa_args *a, const attn__bf16 *q16,
                         const attn__bf16 *k16, const attn__bf16 *v16, int64_t *ntask,
                         int64_t *nrow) {
    if (a->w || a->dropout_p > 0.0f)
        return attn__fail(ctx, ATTN_E_UNSUPPORTED, "attn__decode: weights or dropout requested");
    if (a->qs[3] != 1 || a->ks[3] != 1 || a->vs[3] != 1 || a->os[3] != 1)
        return attn__fail(ctx, ATTN_E_UNSUPPORTED, "attn__decode: last dimension not contiguous");
    memset(f, 0, sizeof *f);
    f->a = a, f->kr = ctx->kern.decode, f->fk = ctx->kern.flash;
    f->bf16 = q16 != NULL, f->q16 = q16, f->k16 = k16, f->v16 = v16;
    f->G = a->H / a->Hkv, f->R = f->G * a->L;
    f->Dp = rup16(a->D), f->Dvp = rup16(a->Dv);
    f->ch = ATTN__DECODE_CHUNK;
    f->nch = (a->S + f->ch - 1) / f->ch;
    f->rowwise = a->mask[0].kind != ATTN_MASK_NONE || a->mask[1].kind != ATTN_MASK_NONE ||
                 a->alibi != NULL;
    int64_t rq, rs;
    /* per thread: nvalid, lo, Q, S, mx, sum; each part rounded to 16 floats (64 bytes) */
    f->nv_floats = rup16(4 * f->R);
    if (!attn__mul_i64(a->B, a->Hkv, nrow) || !attn__mul_i64(*nrow, f->nch, ntask) ||
        !attn__mul_i64(*nrow, f->R, nrow) || !attn__mul_i64(f->R, f->Dp, &rq) ||
        !attn__mul_i64(f->R, f->ch, &rs) || rq > INT64_MAX / 4 || rs > INT64_MAX / 4)
        return attn__fail(ctx, ATTN_E_OVERFLOW, "attn__decode: problem size overflows");
    f->per_thread = f->nv_floats + rq + rs + 2 * rup16(f->R);
    ATTN_TRY(attn__ws_f32(ctx, &f->part, *ntask, f->R, f->Dvp, 1));
    return attn__ws_f32(ctx, &f->ml, *ntask, f->R, 2, 1);
}

/* The merge reads nch partial rows per output row: for a decoding step (a few rows, a few
 * chunks) less work than waking the pool; the rows are independent, so the bits are the same
 * either way. */
static int merge_serial(const dc *f, int64_t nrow) {
    return (double)nrow * (double)f->nch * (double)f->Dvp < 65536.0;
}

/* fp32 (q16 == NULL) or bf16 storage */
static attn_status decode_run(attn_ctx *ctx, const attn__sdpa_args *a, const attn__bf16 *q16,
                              const attn__bf16 *k16, const attn__bf16 *v16) {
    dc f;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st = ATTN_OK;
    int64_t ntask, nrow;
    ATTN_TRYG(setup(ctx, &f, a, q16, k16, v16, &ntask, &nrow));
    ATTN_TRYG(attn__ws_f32(ctx, &f.scratch, attn__parallel_width(ctx, ntask), f.per_thread, 1,
                           1));
    attn__parallel_for(ctx, ntask, chunk_task, &f);
    if (merge_serial(&f, nrow))
        merge_task(&f, 0, nrow, 0);
    else
        attn__parallel_for(ctx, nrow, merge_task, &f);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- several problems in one pass of the pool (attn__decode_multi) ------------------------ */
typedef struct dmulti {
    dc *f;
    int n;
    int64_t *off; /* [n + 1]: problem i's tasks (or rows) are off[i] .. off[i + 1] */
} dmulti;

/* runs fn of each problem on its part of the global range [begin, end) */
static void multi_range(const dmulti *m, attn__task_fn fn, int64_t begin, int64_t end, int tid) {
    for (int i = 0; i < m->n; i++) {
        const int64_t lo = begin > m->off[i] ? begin : m->off[i];
        const int64_t hi = end < m->off[i + 1] ? end : m->off[i + 1];
        if (lo < hi) fn(&m->f[i], lo - m->off[i], hi - m->off[i], tid);
    }
}
static void multi_chunk_task(void *arg, int64_t begin, int64_t end, int tid) {
    multi_range(arg, chunk_task, begin, end, tid);
}
static void multi_merge_task(void *arg, int64_t begin, int64_t end, int tid) {
    multi_range(arg, merge_task, begin, end, tid);
}

attn_status attn__decode_multi(attn_ctx *ctx, const attn__decode_job *jobs, int n) {
    if (n <= 0) return ATTN_OK;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st = ATTN_OK;
    dc *f;
    int64_t *toff, *roff, per = 0;
    double merge_work = 0.0;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)n, sizeof *f, (void **)&f));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)n + 1, sizeof *toff, (void **)&toff));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)n + 1, sizeof *roff, (void **)&roff));
    toff[0] = roff[0] = 0;
    for (int i = 0; i < n; i++) {
        int64_t nt, nr;
        ATTN_TRYG(setup(ctx, &f[i], jobs[i].a, jobs[i].q16, jobs[i].k16, jobs[i].v16, &nt, &nr));
        ATTN_FAIL_IFG(nt > INT64_MAX - toff[i] || nr > INT64_MAX - roff[i], ATTN_E_OVERFLOW,
                      "attn__decode_multi: problem sizes overflow");
        toff[i + 1] = toff[i] + nt, roff[i + 1] = roff[i] + nr;
        per = f[i].per_thread > per ? f[i].per_thread : per;
        merge_work += (double)nr * (double)f[i].nch * (double)f[i].Dvp;
    }
    /* one scratch for all: each problem's per-thread slices at the largest stride */
    float *scratch;
    ATTN_TRYG(attn__ws_f32(ctx, &scratch, attn__parallel_width(ctx, toff[n]), per, 1, 1));
    for (int i = 0; i < n; i++) f[i].scratch = scratch, f[i].per_thread = per;
    dmulti m = {f, n, toff};
    attn__parallel_for(ctx, toff[n], multi_chunk_task, &m);
    m.off = roff;
    if (merge_work < 65536.0)
        multi_merge_task(&m, 0, roff[n], 0);
    else
        attn__parallel_for(ctx, roff[n], multi_merge_task, &m);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__decode(attn_ctx *ctx, const attn__sdpa_args *a) {
    return decode_run(ctx, a, NULL, NULL, NULL);
}

attn_status attn__decode_bf16(attn_ctx *ctx, const attn__sdpa_args *a, const attn__bf16 *q,
                              const attn__bf16 *k, const attn__bf16 *v) {
    return decode_run(ctx, a, q, k, v);
}
