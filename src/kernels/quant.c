/* Quantized tensors: the public functions (attn_dequantize, attn_quantize, attn_qlinear) and
 * the linear product on quantized weights (attn__qlinear, contract in quant.h).
 *
 * attn__qlinear, for M rows of activations against N quantized weight rows of K elements:
 *   M <= ATTN__QMV_ROWS matrix-vector kernels (ctx->kern.quant->mv, or ->mv8 on int8
 *                       activations), up to ATTN__QMV_MAX vectors per call: the weights are
 *                       read once, in place, threads split the N rows.  Memory-bound: the
 *                       point is to read W at the memory's rate.
 *   larger M            the float GEMM microkernel of the context (gemm.h): X is packed once
 *                       into mr-row panels (all of K); the N rows are cut into units of nr-row
 *                       panels, and a thread dequantizes a unit (ctx->kern.quant->dq, exact),
 *                       packs it, and runs every mr x nr tile of its columns over K in chunks
 *                       of kc, in order, beta 0 then 1 -- the tile computation of attn__gemm,
 *                       so Y is attn__gemm(X, deq(W)^T) bit for bit, for any thread count.
 *                       Each weight is dequantized once per call.
 *                       On int16 activations (ATTN__QACT_Q16 or the default) where the context
 *                       has the int16 GEMM (AVX512_VNNI, ctx->kern.gemm16) and the type has
 *                       panels: X rounded to int16 rows once, panels of np weight rows
 *                       unpacked to int16 pairs and multiplied on VPDPWSSD (quant.h,
 *                       attn__gemm16), each part of a multi call on its own path.
 * Threads split output columns (weight rows) only, never K. */
#include "quant.h"

#include <float.h>

#include "gemm.h"
#include "pool.h"

/* ---- activations as int8 -------------------------------------------------------------------- */
void attn__q8act_quantize(const float *x, int64_t ldx, int64_t m, int64_t K, int8_t *q,
                          int64_t ldq, float *dsx, int32_t *sq, int64_t ldb) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t b = 0; b < K / 32; b++) {
            const float *xb = x + i * ldx + 32 * b;
            int8_t *qb = q + i * ldq + 32 * b;
            float amax = 0.0f, s = 0.0f;
            for (int j = 0; j < 32; j++) {
                s += xb[j];
                amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
            }
            float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
            if (!(id <= FLT_MAX)) db = 0.0f, id = 0.0f; /* max|x| < ~2.9e-37: a zero block */
            int32_t s0 = 0, s1 = 0;
            for (int j = 0; j < 32; j++) {
                const float y = xb[j] * id;
                /* roundf(y) (halves away from zero) clamped to [-127, 127], NaN to 0, without
                 * the library call: truncation, then the fraction, exact for |y| <= 127 (the
                 * same int for every one of the 2^32 floats, checked exhaustively) */
                int v;
                if (!(y == y)) v = 0;
                else if (y > 127.0f) v = 127;
                else if (y < -127.0f) v = -127;
                else {
                    v = (int)y;
                    const float f = y - (float)v;
                    v += (f >= 0.5f) - (f <= -0.5f);
                }
                qb[j] = (int8_t)v;
                if (j < 16)
                    s0 += v;
                else
                    s1 += v;
            }
            if (!(s - s == 0.0f)) db = NAN; /* a NaN or an infinity in the block: y is NaN */
            dsx[i * 2 * ldb + 2 * b] = db;
            dsx[i * 2 * ldb + 2 * b + 1] = s;
            sq[i * 2 * ldb + 2 * b] = s0;
            sq[i * 2 * ldb + 2 * b + 1] = s1;
        }
}

/* ---- activations as int16 --------------------------------------------------------------------- */
void attn__q16act_quantize(const float *x, int64_t ldx, int64_t m, int64_t K, int16_t *q,
                           int64_t ldq, float *d, float *sx, int64_t ldb) {
    for (int64_t i = 0; i < m; i++) {
        for (int64_t b = 0; b < K / 32; b++) {
            const float *xb = x + i * ldx + 32 * b;
            int16_t *qb = q + i * ldq + 32 * b;
            /* the largest |x| (a NaN never wins: it gives the block NaN below) and the sum, as
             * 8 partial sums of every 8th element combined pairwise: loops a compiler turns
             * into vector operations, the same bits either way */
            float p[8], mx[8];
            for (int l = 0; l < 8; l++) p[l] = 0.0f, mx[l] = 0.0f;
            for (int t = 0; t < 4; t++)
                for (int l = 0; l < 8; l++) {
                    const float v = xb[8 * t + l], a = fabsf(v);
                    p[l] += v;
                    mx[l] = a > mx[l] ? a : mx[l];
                }
            const float s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
            float amax = 0.0f;
            for (int l = 0; l < 8; l++) amax = mx[l] > amax ? mx[l] : amax;
            float db = amax / 32767.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
            if (!(id <= FLT_MAX)) db = 0.0f, id = 0.0f; /* max|x| < ~9.6e-35: a zero block */
            for (int j = 0; j < 32; j++) {
                /* roundf(y) clamped to [-32767, 32767], NaN to 0, without branches: the
                 * fraction y - trunc(y) is exact for |y| < 2^23 */
                float y = xb[j] * id;
                y = y == y ? y : 0.0f;
                y = y > 32767.0f ? 32767.0f : y;
                y = y < -32767.0f ? -32767.0f : y;
                const int t = (int)y;
                const float f = y - (float)t;
                qb[j] = (int16_t)(t + (f >= 0.5f) - (f <= -0.5f));
            }
            if (!(s - s == 0.0f)) db = NAN; /* a NaN or an infinity in the block: y is NaN */
            d[i * ldb + b] = db;
            sx[i * ldb + b] = s;
        }
        for (int64_t b = K / 32; b < ldb; b++) d[i * ldb + b] = sx[i * ldb + b] = 0.0f;
    }
}

void attn__q16act_split(attn__q16act *xa, int64_t m, int64_t K, uint8_t *qb, float *gs) {
    for (int64_t i = 0; i < m; i++) {
        const int16_t *q = xa->q + i * xa->ldq;
        uint8_t *o = qb + i * 2 * xa->ldq;
        for (int64_t b = 0; b < K / 32; b++)
            for (int l = 0; l < 32; l++) {
                const int v = q[32 * b + l];
                o[64 * b + l] = (uint8_t)(v & 255);
                o[64 * b + 32 + l] = (uint8_t)(int8_t)((v - (v & 255)) / 256);
            }
        for (int64_t g = 0; g < K / 16; g++) {
            int32_t t = 0;
            for (int l = 0; l < 16; l++) t += q[16 * g + l];
            gs[i * 2 * xa->ldb + g] = (float)t * xa->d[i * xa->ldb + g / 2];
        }
    }
    xa->qb = qb, xa->gs = gs;
}

/* ---- the driver ---------------------------------------------------------------------------- */
typedef struct qjob {
    int type;
    const uint8_t *W;
    size_t rb;
    int64_t N, K, nb, M;
    const float *X;
    int64_t ldx;
    const float *bias, *R;
    float *Y;
    int64_t ldy;
    attn__qmv_fn mv, mvw;
    attn__qmv8_fn mv8, mvw8;
    attn__q8act xa;
    attn__qmv16_fn mv16;
    attn__q16act xa16;
    /* GEMM path */
    const attn__gemm_kernel *kr;
    attn__qdq_fn dq;
    int64_t m_panels, U, n_panels;
} qjob;

/* columns [n0, n1) of Y: + bias, then + R */
static void add_bias(const qjob *j, int64_t n0, int64_t n1) {
    if (j->bias)
        for (int64_t i = 0; i < j->M; i++) {
            float *y = j->Y + i * j->ldy;
            for (int64_t n = n0; n < n1; n++) y[n] += j->bias[n];
        }
    if (j->R)
        for (int64_t i = 0; i < j->M; i++) {
            float *y = j->Y + i * j->ldy;
            const float *r = j->R + i * j->N;
            for (int64_t n = n0; n < n1; n++) y[n] += r[n];
        }
}

static void mv_task(void *arg, int64_t begin, int64_t end, int tid) {
    const qjob *j = arg;
    (void)tid;
    const uint8_t *w = j->W + (size_t)begin * j->rb;
    /* up to ATTN__QMV_MAX vectors per kernel call (ATTN__QMV_WIDE on a wide kernel); the rows
     * of the chunk stay in cache */
    const int wide = j->mv16 ? 0 : j->mv8 ? j->mvw8 != NULL : j->mvw != NULL;
    const int64_t step = wide && j->M > ATTN__QMV_MAX ? ATTN__QMV_WIDE : ATTN__QMV_MAX;
    for (int64_t i0 = 0; i0 < j->M; i0 += step) {
        const int64_t m = j->M - i0 < step ? j->M - i0 : step;
        float *y = j->Y + i0 * j->ldy + begin;
        if (j->mv16) {
            attn__q16act xa = j->xa16;
            xa.q += i0 * xa.ldq, xa.d += i0 * xa.ldb, xa.sx += i0 * xa.ldb;
            if (xa.qb) xa.qb += i0 * 2 * xa.ldq, xa.gs += i0 * 2 * xa.ldb;
            j->mv16(w, j->rb, end - begin, j->nb, &xa, m, y, j->ldy);
        } else if (j->mv8) {
            attn__q8act xa = j->xa;
            xa.q += i0 * xa.ldq, xa.dsx += i0 * 2 * xa.ldb, xa.sq += i0 * 2 * xa.ldb;
            (step > ATTN__QMV_MAX ? j->mvw8 : j->mv8)(w, j->rb, end - begin, j->nb, &xa, m, y,
                                                      j->ldy);
        } else if (step > ATTN__QMV_MAX) {
            j->mvw(w, j->rb, end - begin, j->nb, j->X + i0 * j->ldx, j->ldx, m, y, j->ldy);
        } else {
            j->mv(w, j->rb, end - begin, j->nb, j->X + i0 * j->ldx, j->ldx, m, y, j->ldy);
        }
    }
    add_bias(j, begin, end);
}

/* One mr x nr tile at (i0, j0) over the K chunk of kc columns, as attn__gemm computes it: full
 * tiles in place, edge tiles through a scratch tile. */
static void tile(const qjob *j, const float *a, const float *b, int64_t i0, int64_t j0,
                 int64_t kc, float beta) {
    const attn__gemm_kernel *kr = j->kr;
    const int mr = kr->mr, nr = kr->nr;
    const int64_t mv = j->M - i0 < mr ? j->M - i0 : mr, nv = j->N - j0 < nr ? j->N - j0 : nr;
    float *c = j->Y + i0 * j->ldy + j0;
    if (mv == mr && nv == nr) {
        kr->ukr(kc, a, b, c, j->ldy, 1.0f, beta);
        return;
    }
    _Alignas(64) float t[ATTN__GEMM_MR_MAX * ATTN__GEMM_NR_MAX];
    if (beta != 0.0f) {
        memset(t, 0, sizeof(float) * (size_t)(mr * nr));
        for (int64_t i = 0; i < mv; i++) memcpy(t + i * nr, c + i * j->ldy, sizeof(float) * (size_t)nv);
    }
    kr->ukr(kc, a, b, t, nr, 1.0f, beta);
    for (int64_t i = 0; i < mv; i++) memcpy(c + i * j->ldy, t + i * nr, sizeof(float) * (size_t)nv);
}

/* Unit u of part j: its U panels of nr weight rows dequantized and packed into the thread's
 * slot, then every tile of those columns, each as attn__gemm computes it. */
static void mm_unit(const qjob *j, const float *apack, float *rows, int64_t u) {
    const attn__gemm_kernel *kr = j->kr;
    const int mr = kr->mr, nr = kr->nr;
    const int64_t K = j->K;
    float *bp = rows + (size_t)nr * (size_t)K;
    const int64_t p0 = u * j->U, p1 = p0 + j->U < j->n_panels ? p0 + j->U : j->n_panels;
    for (int64_t p = p0; p < p1; p++) { /* dequantize and pack the unit's panels */
        const int64_t n0 = p * nr, nv = j->N - n0 < nr ? j->N - n0 : nr;
        for (int64_t r = 0; r < nv; r++)
            j->dq(j->W + (size_t)(n0 + r) * j->rb, j->nb, rows + r * K);
        attn__gemm_pack_panel(kr, 0, 0, K, rows, K, nv, bp + (p - p0) * nr * K);
    }
    for (int64_t r = 0; r < j->m_panels; r++) {
        const float *a = apack + r * mr * K;
        for (int64_t pc = 0; pc < K; pc += kr->kc) {
            const int64_t kc = K - pc < kr->kc ? K - pc : kr->kc;
            for (int64_t p = p0; p < p1; p++)
                tile(j, a + pc * mr, bp + (p - p0) * nr * K + pc * nr, r * mr, p * nr, kc,
                     pc == 0 ? 0.0f : 1.0f);
        }
    }
    add_bias(j, p0 * nr, p1 * nr < j->N ? p1 * nr : j->N);
}

/* The GEMM path of n parts sharing X: one packed X, the units of every part in one loop. */
typedef struct qmm {
    const qjob *j;
    int n;
    int64_t off[ATTN__QLIN_PARTS + 1]; /* first unit of each part */
    const float *apack;
    float *bws;
    size_t bws_stride;
} qmm;

static void mm_task(void *arg, int64_t begin, int64_t end, int tid) {
    const qmm *q = arg;
    float *rows = q->bws + (size_t)tid * q->bws_stride;
    for (int i = 0; i < q->n; i++)
        for (int64_t u = begin > q->off[i] ? begin : q->off[i]; u < end && u < q->off[i + 1];
             u++)
            mm_unit(q->j + i, q->apack, rows, u - q->off[i]);
}

static void pack_a_task(void *arg, int64_t begin, int64_t end, int tid) {
    const qmm *q = arg;
    const qjob *j = q->j;
    (void)tid;
    const int mr = j->kr->mr;
    for (int64_t r = begin; r < end; r++) {
        const int64_t i0 = r * mr, mv = j->M - i0 < mr ? j->M - i0 : mr;
        attn__gemm_pack_panel(j->kr, 1, 0, j->K, j->X + i0 * j->ldx, j->ldx, mv,
                              (float *)q->apack + r * mr * j->K);
    }
}

static void run(attn_ctx *ctx, int serial, int64_t n, attn__task_fn fn, void *j) {
    if (serial)
        fn(j, 0, n, 0);
    else
        attn__parallel_for(ctx, n, fn, j);
}

static float *align64(void *p) {
    uintptr_t a = (uintptr_t)p;
    return (float *)(void *)((char *)p + ((64 - (a & 63)) & 63));
}

/* Fills j for the product with W (type, N rows of K); bias, R, Y, ldy as attn__qlinear. */
static void job_init(qjob *j, int type, const void *W, int64_t N, int64_t K, const float *X,
                     int64_t ldx, int64_t M, const float *bias, const float *R, float *Y,
                     int64_t ldy) {
    int64_t be = 1, bb = 4;
    attn_qtype_block(type, &be, &bb);
    memset(j, 0, sizeof *j);
    j->type = type, j->W = W, j->N = N, j->K = K, j->nb = K / be, j->M = M;
    j->rb = (size_t)(j->nb * bb);
    j->X = X, j->ldx = ldx, j->bias = bias, j->R = R, j->Y = Y, j->ldy = ldy;
}

/* The GEMM path of jobs j[0 .. n) sharing X (M rows of K): X packed once into mr-row panels,
 * then the units of U panels of every part over the threads; each tile as attn__gemm computes
 * it, so each part's bits are those of attn__gemm(X, deq(W)^T) whatever n, U or the threads. */
static attn_status mm_run(attn_ctx *ctx, qjob *j, int n) {
    const attn__gemm_kernel *kr = ctx->kern.gemm;
    const attn__quant_kernels *kq = ctx->kern.quant;
    const int mr = kr->mr, nr = kr->nr;
    const int64_t M = j[0].M, K = j[0].K;
    int64_t panels = 0;
    double flops = 0.0;
    for (int i = 0; i < n; i++) {
        j[i].kr = kr;
        j[i].dq = kq->dq[j[i].type] ? kq->dq[j[i].type] : attn__dequant_ref_fn(j[i].type);
        j[i].m_panels = (M + mr - 1) / mr;
        j[i].n_panels = (j[i].N + nr - 1) / nr;
        panels += j[i].n_panels;
        flops += (double)M * (double)j[i].N * (double)K;
    }
    const int serial = flops < 262144.0;
    const int width = serial ? 1 : attn__parallel_width(ctx, panels);
    /* units of U panels: A's micro-panels are reused over U panels while in L1, yet at least
     * two units per thread for balance and at most ~1 MiB of packed panels */
    int64_t U = panels / (2 * width);
    const int64_t cap = (int64_t)(1 << 18) / ((int64_t)nr * K);
    U = U > 4 ? 4 : U;
    U = U > cap ? cap : U;
    U = U < 1 ? 1 : U;
    qmm q = {j, n, {0}, NULL, NULL, 0};
    for (int i = 0; i < n; i++) {
        j[i].U = U;
        q.off[i + 1] = q.off[i] + (j[i].n_panels + U - 1) / U;
    }
    const size_t a_floats = (size_t)(j[0].m_panels * mr) * (size_t)K;
    q.bws_stride = ((size_t)nr * (size_t)K * (size_t)(1 + U) + 15) / 16 * 16;
    void *ap, *bp;
    ATTN_TRY(attn__ws_alloc(ctx, a_floats + 16, sizeof(float), &ap));
    ATTN_TRY(attn__ws_alloc(ctx, q.bws_stride * (size_t)width + 16, sizeof(float), &bp));
    q.apack = align64(ap);
    q.bws = align64(bp);
    run(ctx, serial, j[0].m_panels, pack_a_task, &q);
    run(ctx, serial, q.off[n], mm_task, &q);
    return ATTN_OK;
}

/* ---- the int16 GEMM path (prompts on int16 activations: quant.h, attn__gemm16) ------------ */
typedef struct q16mm {
    const qjob *j;
    int n;
    int64_t off[ATTN__QLIN_PARTS + 1]; /* first panel of each part */
    const attn__gemm16 *g;
    attn__q16act xa;
    const float *X;
    int64_t ldx, K;
    int16_t *q;
    float *d, *sx;
    char *ws; /* per thread: the panel (wq, ws, wm) and np K int16 of unpacked rows */
    size_t stride;
    void (*q16x)(const float *, int64_t, int64_t, int64_t, int16_t *, int64_t, float *, float *,
                 int64_t);
} q16mm;

/* Whether job j runs on the int16 GEMM: act asks for int16 (or the default), the context has
 * the kernel and the type has panels. */
static int mm16_ok(const attn_ctx *ctx, const qjob *j, int act) {
    return ctx->kern.gemm16 && j->K % 32 == 0 && attn__gemm16_group(j->type) &&
           ((act & 15) == ATTN__QACT_Q16 || (act & 15) == ATTN__QACT_DEFAULT);
}

static void q16x_task(void *arg, int64_t begin, int64_t end, int tid) {
    const q16mm *q = arg;
    (void)tid;
    q->q16x(q->X + begin * q->ldx, q->ldx, end - begin, q->K, q->q + begin * q->K, q->K,
            q->d + begin * q->xa.ldb, q->sx + begin * q->xa.ldb, q->xa.ldb);
}

static void mm16_task(void *arg, int64_t begin, int64_t end, int tid) {
    const q16mm *q = arg;
    const int64_t K = q->K, M = q->j[0].M, ngm = K / 16, np = q->g->np; /* ngm: most groups */
    int32_t *wq = (int32_t *)(void *)(q->ws + (size_t)tid * q->stride);
    float *ws = (float *)(void *)(wq + K / 2 * np), *wm = ws + np * ngm;
    int16_t *tmp = (int16_t *)(void *)(wm + np * ngm);
    const int mr = q->g->mr;
    for (int i = 0; i < q->n; i++) {
        const qjob *j = q->j + i;
        const int G = attn__gemm16_group(j->type);
        float *m = attn__gemm16_mins(j->type) ? wm : NULL;
        for (int64_t p = begin > q->off[i] ? begin : q->off[i]; p < end && p < q->off[i + 1];
             p++) {
            const int64_t n0 = (p - q->off[i]) * np, nv = j->N - n0 < np ? j->N - n0 : np;
            q->g->pack(j->type, j->W + (size_t)n0 * j->rb, j->rb, nv, K, wq, ws, m, tmp);
            for (int64_t i0 = 0; i0 < M; i0 += mr) {
                attn__q16act xa = q->xa;
                xa.q += i0 * xa.ldq, xa.d += i0 * xa.ldb, xa.sx += i0 * xa.ldb;
                q->g->ukr(M - i0 < mr ? (int)(M - i0) : mr, K, G, wq, ws, m, &xa,
                          j->Y + i0 * j->ldy + n0, j->ldy, nv);
            }
            add_bias(j, n0, n0 + nv);
        }
    }
}

/* The int16 GEMM of jobs j[0 .. n) sharing X: X rounded once (rows over the threads), then
 * panels of 16 weight rows of every part over the threads, each unpacked once and run against
 * every row of X.  A row's bits do not depend on M, the panels' owners or the thread count. */
static attn_status mm16_run(attn_ctx *ctx, qjob *j, int n) {
    const int64_t M = j[0].M, K = j[0].K, ldb = (K / 32 + 7) / 8 * 8, ngm = K / 16,
                  np = ctx->kern.gemm16->np;
    q16mm q = {j, n, {0}, ctx->kern.gemm16, {0}, j[0].X, j[0].ldx, K, NULL, NULL, NULL, NULL, 0,
               ctx->kern.quant16->q16x ? ctx->kern.quant16->q16x : attn__q16act_quantize};
    double flops = 0.0;
    for (int i = 0; i < n; i++) {
        q.off[i + 1] = q.off[i] + (j[i].N + np - 1) / np;
        flops += (double)M * (double)j[i].N * (double)K;
    }
    const int serial = flops < 262144.0;
    const int width = serial ? 1 : attn__parallel_width(ctx, q.off[n]);
    ATTN_TRY(attn__ws_alloc(ctx, (size_t)(M * K), sizeof(int16_t), (void **)&q.q));
    ATTN_TRY(attn__ws_alloc(ctx, (size_t)(M * ldb), sizeof(float), (void **)&q.d));
    ATTN_TRY(attn__ws_alloc(ctx, (size_t)(M * ldb), sizeof(float), (void **)&q.sx));
    /* per thread: wq (K / 2 x np int32), ws and wm (K / 16 x np floats each at most), the
     * unpacked rows (np K int16), 64-byte multiples */
    q.stride = ((size_t)K * 2 * (size_t)np + (size_t)ngm * 8 * (size_t)np + (size_t)K * 2 * (size_t)np + 63) / 64 * 64;
    void *wsp;
    ATTN_TRY(attn__ws_alloc(ctx, q.stride * (size_t)width + 64, 1, &wsp));
    q.ws = (char *)align64(wsp);
    q.xa = (attn__q16act){q.q, q.d, q.sx, K, ldb, NULL, NULL};
    run(ctx, serial || M < 16, M, q16x_task, &q);
    run(ctx, serial, q.off[n], mm16_task, &q);
    return ATTN_OK;
}

/* The GEMM path of jobs j[0 .. n) sharing X: the parts the int16 GEMM takes (mm16_ok) on it,
 * the others on the float GEMM, so each part gets the bits of a call of its own. */
static attn_status mm_any(attn_ctx *ctx, qjob *j, int n, int act) {
    qjob a[ATTN__QLIN_PARTS], b[ATTN__QLIN_PARTS];
    int na = 0, nb = 0;
    for (int i = 0; i < n; i++) {
        if (mm16_ok(ctx, j + i, act))
            a[na++] = j[i];
        else
            b[nb++] = j[i];
    }
    if (na) ATTN_TRY(mm16_run(ctx, a, na));
    if (nb) ATTN_TRY(mm_run(ctx, b, nb));
    return ATTN_OK;
}

/* The matrix-vector set-up of jobs j[0 .. n) sharing X (M rows of K): each on the int16 or
 * int8 kernel of its type where act asks for it and the type has one (X rounded once, in the
 * workspace), else on the float kernel -- as attn__qlinear decides for each alone. */
static attn_status mv_init(attn_ctx *ctx, qjob *j, int n, int act) {
    const attn__quant_kernels *kq = ctx->kern.quant, *k8 = ctx->kern.quant8,
                              *ref = attn__quant_kernels_ref();
    const int64_t K = j[0].K, M = j[0].M, nbx = K / 32;
    const int q8 = (act & 15) == ATTN__QACT_Q8 && K % 32 == 0;
    /* the default: int16 where this CPU has its kernels (x86 with AVX2: faster than float
     * for every type, docs/kernels.md), else float */
    const int q16 = ((act & 15) == ATTN__QACT_Q16 || (act & 15) == ATTN__QACT_DEFAULT) &&
                    K % 32 == 0 && ctx->kern.quant16;
    attn__q8act xa = {0};
    attn__q16act xa16 = {0};
    for (int i = 0; i < n; i++) {
        j[i].mv16 = q16 ? ctx->kern.quant16->mv16[j[i].type] : NULL;
        if (j[i].mv16) {
            if (!xa16.q) {
                const int64_t ldb = (nbx + 7) / 8 * 8;
                int16_t *q;
                float *d, *sx;
                ATTN_TRY(attn__ws_alloc(ctx, (size_t)(M * K), sizeof(int16_t), (void **)&q));
                ATTN_TRY(attn__ws_alloc(ctx, (size_t)(M * ldb), sizeof(float), (void **)&d));
                ATTN_TRY(attn__ws_alloc(ctx, (size_t)(M * ldb), sizeof(float), (void **)&sx));
                (ctx->kern.quant16->q16x ? ctx->kern.quant16->q16x : attn__q16act_quantize)(
                    j[0].X, j[0].ldx, M, K, q, K, d, sx, ldb);
                xa16 = (attn__q16act){q, d, sx, K, ldb, NULL, NULL};
            }
            if (attn__q16_split_type(j[i].type) && !xa16.qb) {
                uint8_t *qb;
                float *gs;
                ATTN_TRY(attn__ws_alloc(ctx, (size_t)(M * K), 2, (void **)&qb));
                ATTN_TRY(attn__ws_alloc(ctx, (size_t)(M * 2 * xa16.ldb), sizeof(float),
                                        (void **)&gs));
                attn__q16act_split(&xa16, M, K, qb, gs);
                for (int p = 0; p < i; p++) j[p].xa16 = xa16;
            }
            j[i].xa16 = xa16;
            j[i].mv8 = j[i].mvw8 = NULL;
            continue;
        }
        /* a type the int8 set leaves out: its plain C int8 kernel (no wide one) */
        j[i].mv8 = !q8 ? NULL : k8->mv8[j[i].type] ? k8->mv8[j[i].type] : ref->mv8[j[i].type];
        j[i].mvw8 = j[i].mv8 && k8->mv8[j[i].type] ? k8->mvw8[j[i].type] : NULL;
        if (!j[i].mv8) {
            j[i].mv = kq->mv[j[i].type] ? kq->mv[j[i].type] : ref->mv[j[i].type];
            j[i].mvw = kq->mv[j[i].type] ? kq->mvw[j[i].type] : NULL;
            continue;
        }
        if (!xa.q) {
            int8_t *q;
            float *dsx;
            int32_t *sq;
            ATTN_TRY(attn__ws_alloc(ctx, (size_t)(M * K), 1, (void **)&q));
            ATTN_TRY(attn__ws_alloc(ctx, (size_t)(2 * M * nbx), sizeof(float), (void **)&dsx));
            ATTN_TRY(attn__ws_alloc(ctx, (size_t)(2 * M * nbx), sizeof(int32_t),
                                    (void **)&sq));
            attn__q8act_quantize(j[0].X, j[0].ldx, M, K, q, K, dsx, sq, nbx);
            xa = (attn__q8act){q, dsx, sq, K, nbx};
        }
        j[i].xa = xa;
    }
    return ATTN_OK;
}

/* Several matrix-vector jobs as one loop over all their rows, back to back */
typedef struct qmulti {
    const qjob *j;
    int n;
    int64_t off[ATTN__QLIN_PARTS + 1];
} qmulti;

static void multi_task(void *arg, int64_t begin, int64_t end, int tid) {
    const qmulti *q = arg;
    for (int i = 0; i < q->n; i++) {
        const int64_t lo = begin > q->off[i] ? begin : q->off[i];
        const int64_t hi = end < q->off[i + 1] ? end : q->off[i + 1];
        if (lo < hi) mv_task((void *)(q->j + i), lo - q->off[i], hi - q->off[i], tid);
    }
}

attn_status attn__qlinear_multi(attn_ctx *ctx, int n, const attn__qlin_part *p, int64_t K,
                                const float *X, int64_t ldx, int64_t M, int act) {
    if (M <= 0 || n <= 0) return ATTN_OK;
    int empty = 0;
    for (int i = 0; i < n; i++) empty |= p[i].N <= 0;
    if (n > ATTN__QLIN_PARTS || K == 0 || empty) {
        for (int i = 0; i < n; i++)
            ATTN_TRY(attn__qlinear(ctx, p[i].type, p[i].W, p[i].N, K, X, ldx, M, p[i].bias,
                                   p[i].R, p[i].Y, p[i].ldy, act));
        return ATTN_OK;
    }
    qjob j[ATTN__QLIN_PARTS];
    qmulti q = {j, n, {0}};
    double bytes = 0.0;
    for (int i = 0; i < n; i++) {
        job_init(&j[i], p[i].type, p[i].W, p[i].N, K, X, ldx, M, p[i].bias, p[i].R, p[i].Y,
                 p[i].ldy);
        q.off[i + 1] = q.off[i] + (p[i].N > 0 ? p[i].N : 0);
        bytes += (double)p[i].N * (double)j[i].rb * (double)M;
    }
    attn__mark mark = attn__ws_mark(ctx);
    attn_status st;
    if ((M > ATTN__QMV_ROWS || (act & ATTN__QLIN_GEMM)) && !(act & ATTN__QLIN_ROWWISE)) {
        st = mm_any(ctx, j, n, act);
        goto done;
    }
    ATTN_TRYG(mv_init(ctx, j, n, act));
    /* below ~64 KiB of weights waking the pool costs more than it saves */
    run(ctx, bytes < 65536.0, q.off[n], multi_task, &q);
done:
    attn__ws_release(ctx, mark);
    return st;
}

attn_status attn__qlinear(attn_ctx *ctx, int type, const void *W, int64_t N, int64_t K,
                          const float *X, int64_t ldx, int64_t M, const float *bias,
                          const float *R, float *Y, int64_t ldy, int act) {
    if (M <= 0 || N <= 0) return ATTN_OK;
    qjob j;
    job_init(&j, type, W, N, K, X, ldx, M, bias, R, Y, ldy);
    if (K == 0) { /* an empty sum */
        for (int64_t i = 0; i < M; i++)
            for (int64_t n = 0; n < N; n++) Y[i * ldy + n] = 0.0f;
        add_bias(&j, 0, N);
        return ATTN_OK;
    }
    attn__mark mark = attn__ws_mark(ctx);
    attn_status st = ATTN_OK;
    if ((M <= ATTN__QMV_ROWS && !(act & ATTN__QLIN_GEMM)) || (act & ATTN__QLIN_ROWWISE)) {
        ATTN_TRYG(mv_init(ctx, &j, 1, act));
        /* below ~64 KiB of weights waking the pool costs more than it saves */
        run(ctx, (double)N * (double)j.rb * (double)M < 65536.0, N, mv_task, &j);
        goto done;
    }
    st = mm_any(ctx, &j, 1, act);
done:
    attn__ws_release(ctx, mark);
    return st;
}

/* ---- whole tensors ------------------------------------------------------------------------- */
typedef struct conv_job {
    int type;
    attn__qdq_fn dq;
    const uint8_t *src;
    const float *fsrc;
    uint8_t *qdst;
    float *dst;
    int64_t be, bb, per; /* per: blocks per task index */
    int64_t nb;
} conv_job;

static void dq_task(void *arg, int64_t begin, int64_t end, int tid) {
    const conv_job *c = arg;
    (void)tid;
    const int64_t b0 = begin * c->per, b1 = end * c->per < c->nb ? end * c->per : c->nb;
    c->dq(c->src + (size_t)(b0 * c->bb), b1 - b0, c->dst + b0 * c->be);
}

static void qz_task(void *arg, int64_t begin, int64_t end, int tid) {
    const conv_job *c = arg;
    (void)tid;
    const int64_t b0 = begin * c->per, b1 = end * c->per < c->nb ? end * c->per : c->nb;
    attn__quant_ref(c->type, c->fsrc + b0 * c->be, b1 - b0, c->qdst + (size_t)(b0 * c->bb));
}

/* Splits nb blocks into task indices of ~64 Ki elements (the split never changes results). */
static void conv_run(attn_ctx *ctx, conv_job *c, attn__task_fn fn) {
    c->per = (65536 + c->be - 1) / c->be;
    const int64_t n = (c->nb + c->per - 1) / c->per;
    run(ctx, n < 2, n, fn, c);
}

void attn__dequantize(attn_ctx *ctx, int type, const void *src, int64_t n, float *dst) {
    conv_job c;
    memset(&c, 0, sizeof c);
    attn_qtype_block(type, &c.be, &c.bb);
    c.type = type, c.src = src, c.dst = dst, c.nb = n / c.be;
    c.dq = ctx->kern.quant->dq[type] ? ctx->kern.quant->dq[type] : attn__dequant_ref_fn(type);
    conv_run(ctx, &c, dq_task);
}

void attn__quantize(attn_ctx *ctx, int type, const float *src, int64_t n, void *dst) {
    conv_job c;
    memset(&c, 0, sizeof c);
    attn_qtype_block(type, &c.be, &c.bb);
    c.type = type, c.fsrc = src, c.qdst = dst, c.nb = n / c.be;
    conv_run(ctx, &c, qz_task);
}
