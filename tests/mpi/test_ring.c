/* Ring attention over MPI (attn_sdpa_ring, attn_sdpa_ring_backward): run by ctest under
 * mpirun with 2, 3 and 4 ranks (tests/CMakeLists.txt, only with -DATTN_MPI=ON).
 *
 * Every rank builds the whole sequence's tensors (small), runs the single-process attn_sdpa
 * and attn_sdpa_backward on them as the reference, and checks its own rows of the ring's
 * results: forward (out, lse) within 1e-5 and backward (dq, dk, dv) within 1e-4 of the
 * reference, relative to max(1, max |reference|) (tu_close: NaN fails).  Causal (zigzag and
 * contiguous layouts) and not, GQA and MQA, Dv != D, soft cap, cross-attention lengths, blocks
 * below and above the fused kernels' tiles, strided views; the same bits for 1 and 2 threads.
 * Then the refusals (every rank refuses alike, before any work) and a timeout. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn_mpi.h"
#include "testutil.h"

static int rank, N;

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
static double worst_fwd, worst_bwd; /* the largest error / max(1, max|ref|) seen */

/* tu_close, keeping the largest relative error for the summary */
static void close_to(const char *what, const float *got, const float *ref, size_t n, int bwd) {
    double m, e = tu_max_err(got, ref, n, &m);
    e /= m > 1 ? m : 1;
    double *w = bwd ? &worst_bwd : &worst_fwd;
    if (!(e <= *w)) *w = e;
    tu_close(what, got, ref, n, bwd ? BWD_TOL : FWD_TOL);
}

typedef struct tcase {
    const char *name;
    int64_t B, H, Hkv, L, S, D, Dv; /* L, S: the whole sequence's lengths */
    int causal;
    attn_ring_layout layout;
    float softcap;
    int strided; /* q, out and dq as views of [B, L, H, D] buffers */
} tcase;

/* the rows of rank r: global row of local row i (S != L only without a causal mask, where
 * the layout is contiguous rows) */
static int64_t grow(int64_t len, int r, attn_ring_layout layout, int causal, int64_t i) {
    if (!causal || layout == ATTN_RING_CONTIGUOUS || len % (2 * N))
        return (int64_t)r * (len / N) + i;
    return attn_ring_row(len, N, r, layout, i);
}

/* dst [B, H, n, W] = rows of src [B, H, len, W] */
static void take_rows(float *dst, const float *src, int64_t BH, int64_t len, int64_t n,
                      int64_t W, const tcase *c) {
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (bh * n + i) * W,
                   src + (bh * len + grow(len, rank, c->layout, c->causal, i)) * W,
                   (size_t)W * sizeof(float));
}

static attn_ctx *mkctx(int threads) {
    attn_ctx *ctx = tu_ctx(threads);
    if (!ctx) {
        fprintf(stderr, "no context\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return ctx;
}

/* A [B, H, n, W] tensor stored as [B, n, H, W] (a transposed view). */
static attn_tensor strided_view(float *p, int64_t B, int64_t H, int64_t n, int64_t W) {
    attn_tensor t = attn_view4(p, B, H, n, W);
    t.stride[0] = n * H * W, t.stride[1] = W, t.stride[2] = H * W, t.stride[3] = 1;
    return t;
}
static void to_strided(float *dst, const float *src, int64_t B, int64_t H, int64_t n,
                       int64_t W) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < n; i++)
                memcpy(dst + ((b * n + i) * H + h) * W, src + ((b * H + h) * n + i) * W,
                       (size_t)W * sizeof(float));
}
static void from_strided(float *dst, const float *src, int64_t B, int64_t H, int64_t n,
                         int64_t W) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < n; i++)
                memcpy(dst + ((b * H + h) * n + i) * W, src + ((b * n + i) * H + h) * W,
                       (size_t)W * sizeof(float));
}

static void run_case(const tcase *c) {
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, L = c->L, S = c->S, D = c->D, Dv = c->Dv;
    int64_t Lr = L / N, Sr = S / N;
    size_t gq = (size_t)(B * H * L * D), gk = (size_t)(B * Hkv * S * D),
           gv = (size_t)(B * Hkv * S * Dv), go = (size_t)(B * H * L * Dv);
    size_t lq = (size_t)(B * H * Lr * D), lk = (size_t)(B * Hkv * Sr * D),
           lv = (size_t)(B * Hkv * Sr * Dv), lo = (size_t)(B * H * Lr * Dv),
           ll = (size_t)(B * H * Lr);
    float *Q = malloc(gq * 4), *K = malloc(gk * 4), *V = malloc(gv * 4), *O = malloc(go * 4),
          *LS = malloc((size_t)(B * H * L) * 4), *dO = malloc(go * 4), *dQ = malloc(gq * 4),
          *dK = malloc(gk * 4), *dV = malloc(gv * 4);
    float *q = malloc(lq * 4), *k = malloc(lk * 4), *v = malloc(lv * 4), *o = malloc(lo * 4),
          *ls = malloc(ll * 4), *dout = malloc(lo * 4), *dq = malloc(lq * 4),
          *dk = malloc(lk * 4), *dv = malloc(lv * 4), *ref = malloc((lq > lo ? lq : lo) * 4),
          *refk = malloc((lk > lv ? lk : lv) * 4), *o2 = malloc(lo * 4), *dq2 = malloc(lq * 4),
          *dk2 = malloc(lk * 4), *dv2 = malloc(lv * 4), *sq = malloc(lq * 4),
          *so = malloc(lo * 4), *sdq = malloc(lq * 4);
    tu_fill(Q, gq, 11, -2.0f, 2.0f), tu_fill(K, gk, 12, -2.0f, 2.0f);
    tu_fill(V, gv, 13, -1.0f, 1.0f), tu_fill(dO, go, 14, -1.0f, 1.0f);
    attn_ctx *ctx = mkctx(2), *ctx1 = mkctx(1);
    attn_sdpa_options so_ = attn_sdpa_defaults();
    so_.causal = c->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    so_.softcap = c->softcap;
    /* the reference: the single-process op on the whole sequence */
    attn_tensor tQ = attn_view4(Q, B, H, L, D), tK = attn_view4(K, B, Hkv, S, D),
                tV = attn_view4(V, B, Hkv, S, Dv), tO = attn_view4(O, B, H, L, Dv),
                tL = attn_view3(LS, B, H, L), tdO = attn_view4(dO, B, H, L, Dv),
                tdQ = attn_view4(dQ, B, H, L, D), tdK = attn_view4(dK, B, Hkv, S, D),
                tdV = attn_view4(dV, B, Hkv, S, Dv);
    TU_STATUS(attn_sdpa(ctx, &tQ, &tK, &tV, NULL, &so_, &tO, NULL, &tL), ATTN_OK, ctx);
    TU_STATUS(attn_sdpa_backward(ctx, &tQ, &tK, &tV, NULL, &so_, &tdO, &tdQ, &tdK, &tdV, NULL),
              ATTN_OK, ctx);
    /* this rank's rows */
    take_rows(q, Q, B * H, L, Lr, D, c), take_rows(k, K, B * Hkv, S, Sr, D, c);
    take_rows(v, V, B * Hkv, S, Sr, Dv, c), take_rows(dout, dO, B * H, L, Lr, Dv, c);
    attn_tensor lq_ = attn_view4(q, B, H, Lr, D), lk_ = attn_view4(k, B, Hkv, Sr, D),
                lv_ = attn_view4(v, B, Hkv, Sr, Dv), lo_ = attn_view4(o, B, H, Lr, Dv),
                ll_ = attn_view3(ls, B, H, Lr), ldo = attn_view4(dout, B, H, Lr, Dv),
                ldq = attn_view4(dq, B, H, Lr, D), ldk = attn_view4(dk, B, Hkv, Sr, D),
                ldv = attn_view4(dv, B, Hkv, Sr, Dv);
    attn_ring_options ro = attn_ring_defaults();
    ro.sdpa = so_, ro.layout = c->layout, ro.seq_len = L;
    char what[160];
    memset(o, 0xff, lo * 4), memset(dq, 0xff, lq * 4); /* NaN until written */
    if (TU_STATUS(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &lq_, &lk_, &lv_, &ro, &lo_, &ll_), ATTN_OK,
                  ctx)) {
        take_rows(ref, O, B * H, L, Lr, Dv, c);
        snprintf(what, sizeof what, "%s: out (rank %d of %d)", c->name, rank, N);
        close_to(what, o, ref, lo, 0);
        take_rows(ref, LS, B * H, L, Lr, 1, c);
        snprintf(what, sizeof what, "%s: lse (rank %d of %d)", c->name, rank, N);
        close_to(what, ls, ref, ll, 0);
    }
    if (TU_STATUS(attn_sdpa_ring_backward(ctx, MPI_COMM_WORLD, &lq_, &lk_, &lv_, &ro, &lo_, &ll_,
                                          &ldo, &ldq, &ldk, &ldv),
                  ATTN_OK, ctx)) {
        take_rows(ref, dQ, B * H, L, Lr, D, c);
        snprintf(what, sizeof what, "%s: dq (rank %d of %d)", c->name, rank, N);
        close_to(what, dq, ref, lq, 1);
        take_rows(refk, dK, B * Hkv, S, Sr, D, c);
        snprintf(what, sizeof what, "%s: dk (rank %d of %d)", c->name, rank, N);
        close_to(what, dk, refk, lk, 1);
        take_rows(refk, dV, B * Hkv, S, Sr, Dv, c);
        snprintf(what, sizeof what, "%s: dv (rank %d of %d)", c->name, rank, N);
        close_to(what, dv, refk, lv, 1);
    }
    /* the same bits on one thread; a rank may leave out any gradient (dq here on rank 0) */
    attn_tensor lo2 = attn_view4(o2, B, H, Lr, Dv), ldq2 = attn_view4(dq2, B, H, Lr, D),
                ldk2 = attn_view4(dk2, B, Hkv, Sr, D), ldv2 = attn_view4(dv2, B, Hkv, Sr, Dv);
    TU_STATUS(attn_sdpa_ring(ctx1, MPI_COMM_WORLD, &lq_, &lk_, &lv_, &ro, &lo2, NULL), ATTN_OK,
              ctx1);
    TU_CHECK(!memcmp(o, o2, lo * 4), "%s: 1 and 2 threads give different bits (out)", c->name);
    memset(dq2, 0, lq * 4);
    TU_STATUS(attn_sdpa_ring_backward(ctx1, MPI_COMM_WORLD, &lq_, &lk_, &lv_, &ro, &lo_, &ll_,
                                      &ldo, rank == 0 ? NULL : &ldq2, &ldk2, &ldv2),
              ATTN_OK, ctx1);
    TU_CHECK(rank == 0 || !memcmp(dq, dq2, lq * 4), "%s: 1 and 2 threads differ (dq)", c->name);
    TU_CHECK(!memcmp(dk, dk2, lk * 4) && !memcmp(dv, dv2, lv * 4),
             "%s: 1 and 2 threads give different bits (dk, dv)", c->name);
    if (c->strided) { /* q, out, dq as transposed views: the same results */
        float *tq = malloc(lq * 4), *tdq = malloc(lq * 4);
        to_strided(sq, q, B, H, Lr, D);
        attn_tensor vq = strided_view(sq, B, H, Lr, D), vo = strided_view(so, B, H, Lr, Dv),
                    vdq = strided_view(sdq, B, H, Lr, D);
        TU_STATUS(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &vq, &lk_, &lv_, &ro, &vo, NULL), ATTN_OK,
                  ctx);
        TU_STATUS(attn_sdpa_ring_backward(ctx, MPI_COMM_WORLD, &vq, &lk_, &lv_, &ro, &vo, &ll_,
                                          &ldo, &vdq, NULL, NULL),
                  ATTN_OK, ctx);
        from_strided(tq, so, B, H, Lr, Dv);
        take_rows(ref, O, B * H, L, Lr, Dv, c);
        snprintf(what, sizeof what, "%s: strided out (rank %d)", c->name, rank);
        close_to(what, tq, ref, lo, 0);
        from_strided(tdq, sdq, B, H, Lr, D);
        take_rows(ref, dQ, B * H, L, Lr, D, c);
        snprintf(what, sizeof what, "%s: strided dq (rank %d)", c->name, rank);
        close_to(what, tdq, ref, lq, 1);
        free(tq), free(tdq);
    }
    attn_ctx_free(ctx), attn_ctx_free(ctx1);
    float *all[] = {Q, K, V, O, LS, dO, dQ, dK, dV, q, k, v, o, ls, dout, dq, dk, dv, ref, refk,
                    o2, dq2, dk2, dv2, sq, so, sdq};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* ---- refusals --------------------------------------------------------------------------- */
typedef struct loc {
    float *q, *k, *v, *o, *l, *d;
    attn_tensor Q, K, V, O, LS, dO;
} loc;
static void loc_make(loc *x, int64_t H, int64_t Lr, int64_t D) {
    size_t n = (size_t)(H * Lr * D);
    x->q = malloc(n * 4), x->k = malloc(n * 4), x->v = malloc(n * 4), x->o = malloc(n * 4);
    x->l = malloc((size_t)(H * Lr) * 4), x->d = malloc(n * 4);
    tu_fill(x->q, n, 1 + (uint64_t)rank, -1, 1), tu_fill(x->k, n, 2, -1, 1);
    tu_fill(x->v, n, 3, -1, 1), tu_fill(x->d, n, 4, -1, 1);
    x->Q = attn_view4(x->q, 1, H, Lr, D), x->K = attn_view4(x->k, 1, H, Lr, D);
    x->V = attn_view4(x->v, 1, H, Lr, D), x->O = attn_view4(x->o, 1, H, Lr, D);
    x->LS = attn_view3(x->l, 1, H, Lr), x->dO = attn_view4(x->d, 1, H, Lr, D);
}
static void loc_free(loc *x) {
    free(x->q), free(x->k), free(x->v), free(x->o), free(x->l), free(x->d);
}

/* Every rank must get `want` (this rank: `mine` when it is the one refusing) and a message
 * containing `text`. */
#define REFUSED(call, want, text)                                                            \
    do {                                                                                      \
        attn_status s_ = (call);                                                              \
        TU_CHECK(s_ == (want), "%s: rank %d got %s, wanted %s (%s)", #call, rank,             \
                 attn_status_name(s_), attn_status_name(want), attn_ctx_errmsg(ctx));         \
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), (text)) != NULL,                                \
                 "%s: rank %d: message '%s' lacks '%s'", #call, rank, attn_ctx_errmsg(ctx),   \
                 (text));                                                                     \
    } while (0)

static void refusals(void) {
    attn_ctx *ctx = mkctx(1);
    const int64_t H = 2, D = 8, Lr = 6;
    loc x, y;
    loc_make(&x, H, Lr, D), loc_make(&y, H, Lr + 2, D);
    attn_ring_options ro = attn_ring_defaults();
    ro.sdpa.causal = ATTN_CAUSAL_TOP_LEFT;
    /* a good call first: the refusals below leave nothing behind */
    TU_STATUS(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, &x.LS), ATTN_OK,
              ctx);

    /* a number of ranks that does not cut seq_len into 2N zigzag chunks */
    if (N > 1) {
        ro.seq_len = Lr * N + 1;
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, &x.LS),
                ATTN_E_SHAPE, "ranks do not");
        ro.seq_len = Lr * N + 2 * N; /* divisible, but not what the ranks hold */
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, &x.LS),
                ATTN_E_SHAPE, "not seq_len");
    }
    ro.seq_len = 0;
    /* an odd local length cannot be two zigzag chunks */
    if (N > 1) {
        attn_tensor q5 = attn_view4(x.q, 1, H, 5, D), k5 = attn_view4(x.k, 1, H, 5, D),
                    v5 = attn_view4(x.v, 1, H, 5, D), o5 = attn_view4(x.o, 1, H, 5, D);
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &q5, &k5, &v5, &ro, &o5, NULL),
                ATTN_E_SHAPE, "odd");
    }
    /* shapes that differ between ranks: rank 0 holds two more rows */
    if (N > 1) {
        loc *m = rank == 0 ? &y : &x;
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &m->Q, &m->K, &m->V, &ro, &m->O, NULL),
                ATTN_E_SHAPE, "disagree on the local query length");
        attn_ring_options r2 = ro;
        r2.sdpa.scale = rank == N - 1 ? 0.5f : 0.0f;
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &r2, &x.O, NULL),
                ATTN_E_SHAPE, "disagree on the scale");
        r2 = ro;
        r2.sdpa.causal = rank == 0 ? ATTN_CAUSAL_NONE : ATTN_CAUSAL_TOP_LEFT;
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &r2, &x.O, NULL),
                ATTN_E_SHAPE, "causal mode");
    }
    /* a NaN on the last rank: it says so, the others name it */
    {
        float keep = x.q[3];
        if (rank == N - 1) x.q[3] = NAN;
        attn_status s = attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, NULL);
        if (rank == N - 1) {
            TU_STATUS(s, ATTN_E_NONFINITE, ctx);
        } else {
            char want[64];
            snprintf(want, sizeof want, "rank %d refused the call (ATTN_E_NONFINITE", N - 1);
            TU_STATUS(s, ATTN_E_INVALID, ctx);
            TU_CHECK(strstr(attn_ctx_errmsg(ctx), want) != NULL, "message '%s'",
                     attn_ctx_errmsg(ctx));
        }
        x.q[3] = keep;
    }
    /* options that depend on global positions */
    {
        attn_ring_options r2 = ro;
        r2.sdpa.dropout_p = 0.1f;
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &r2, &x.O, NULL),
                ATTN_E_UNSUPPORTED, "dropout");
        r2 = ro;
        r2.sdpa.window = 1, r2.sdpa.window_left = 2, r2.sdpa.window_right = 0;
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &r2, &x.O, NULL),
                ATTN_E_UNSUPPORTED, "window");
        float slopes[2] = {0.5f, 0.25f};
        r2 = ro;
        r2.sdpa.alibi_slopes = slopes;
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &r2, &x.O, NULL),
                ATTN_E_UNSUPPORTED, "ALiBi");
        r2 = ro;
        r2.layout = (attn_ring_layout)7;
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &r2, &x.O, NULL),
                ATTN_E_INVALID, "layout");
        /* a bad timeout on rank 0 only */
        r2 = ro;
        r2.timeout_s = rank == 0 ? -1.0 : 0.0;
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &r2, &x.O, NULL),
                ATTN_E_INVALID, rank == 0 ? "timeout_s" : "rank 0 refused");
        /* ATTN_MPI_TIMEOUT that is not a number */
        if (rank == 0) setenv("ATTN_MPI_TIMEOUT", "soon", 1);
        REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, NULL),
                ATTN_E_INVALID, rank == 0 ? "ATTN_MPI_TIMEOUT" : "rank 0 refused");
        if (rank == 0) unsetenv("ATTN_MPI_TIMEOUT");
    }
    /* output overlapping an input; the backward without the saved forward */
    REFUSED(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.Q, NULL),
            ATTN_E_INVALID, "out overlaps q");
    REFUSED(attn_sdpa_ring_backward(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, NULL,
                                    &x.dO, &x.Q, NULL, NULL),
            ATTN_E_INVALID, "out and lse");
    /* forward on some ranks, backward on others */
    if (N > 1) {
        TU_STATUS(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, &x.LS),
                  ATTN_OK, ctx);
        float *g = malloc((size_t)(H * Lr * D) * 4);
        attn_tensor G = attn_view4(g, 1, H, Lr, D);
        attn_status s = rank == 0
                            ? attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &G, NULL)
                            : attn_sdpa_ring_backward(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro,
                                                      &x.O, &x.LS, &x.dO, &G, NULL, NULL);
        TU_STATUS(s, ATTN_E_INVALID, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "others") != NULL, "message '%s'",
                 attn_ctx_errmsg(ctx));
        free(g);
    }
    /* a NULL context, MPI_COMM_NULL */
    TU_CHECK(attn_sdpa_ring(NULL, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, NULL) ==
                 ATTN_E_INVALID, "NULL context");
    REFUSED(attn_sdpa_ring(ctx, MPI_COMM_NULL, &x.Q, &x.K, &x.V, &ro, &x.O, NULL),
            ATTN_E_INVALID, "MPI_COMM_NULL");
    /* the ring still works after all that */
    TU_STATUS(attn_sdpa_ring(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, &x.LS), ATTN_OK,
              ctx);
    TU_STATUS(attn_sdpa_ring_backward(ctx, MPI_COMM_WORLD, &x.Q, &x.K, &x.V, &ro, &x.O, &x.LS,
                                      &x.dO, &y.O, NULL, NULL),
              ATTN_E_SHAPE, ctx); /* dq of the wrong length: refused on this rank */
    loc_free(&x), loc_free(&y);
    attn_ctx_free(ctx);
    /* attn_ring_row */
    TU_CHECK(attn_ring_row(16, 2, 0, ATTN_RING_ZIGZAG, 5) == 13 &&
                 attn_ring_row(16, 2, 1, ATTN_RING_ZIGZAG, 0) == 4 &&
                 attn_ring_row(16, 2, 1, ATTN_RING_ZIGZAG, 4) == 8 &&
                 attn_ring_row(16, 2, 1, ATTN_RING_CONTIGUOUS, 3) == 11 &&
                 attn_ring_row(10, 2, 0, ATTN_RING_ZIGZAG, 0) == -1 &&
                 attn_ring_row(16, 2, 0, ATTN_RING_ZIGZAG, 8) == -1,
             "attn_ring_row");
}

/* Hangs: rank 1 comes late (1.5 s); the others give up after 0.3 s waiting for it in the
 * agreement, then rank 1 gives up waiting for a key/value block no one sends.  On a
 * communicator of its own, never used again (its state is undefined after a timeout). */
static void timeout(void) {
    if (N < 2) return;
    attn_ctx *ctx = mkctx(1);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    loc x;
    loc_make(&x, 2, 4, 8);
    attn_ring_options ro = attn_ring_defaults();
    ro.timeout_s = 0.3;
    if (rank == 1) {
        struct timespec ts = {1, 500000000};
        nanosleep(&ts, NULL);
    }
    double t0 = MPI_Wtime();
    attn_status s = attn_sdpa_ring(ctx, comm, &x.Q, &x.K, &x.V, &ro, &x.O, NULL);
    double dt = MPI_Wtime() - t0;
    TU_STATUS(s, ATTN_E_TIMEOUT, ctx);
    TU_CHECK(dt < 60.0, "rank %d took %.1f s to time out (0.3 s asked)", rank, dt);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), rank == 1 ? "key/value block" : "shapes") != NULL,
             "rank %d: message '%s'", rank, attn_ctx_errmsg(ctx));
    if (rank == 0) printf("timeout message: %s\n", attn_ctx_errmsg(ctx));
    MPI_Barrier(MPI_COMM_WORLD);
    loc_free(&x);
    attn_ctx_free(ctx);
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &N);
    int64_t n2 = 2 * N; /* the zigzag unit */
    const tcase cases[] = {
        /* name                B  H Hkv  L        S        D   Dv causal layout    softcap str */
        {"causal zigzag tiny", 1, 2, 2, n2, n2, 8, 8, 1, ATTN_RING_ZIGZAG, 0, 0},
        {"causal zigzag", 2, 3, 3, n2 * 9, n2 * 9, 16, 16, 1, ATTN_RING_ZIGZAG, 0, 1},
        {"causal zigzag GQA", 1, 4, 2, n2 * 21, n2 * 21, 16, 16, 1, ATTN_RING_ZIGZAG, 0, 0},
        {"causal zigzag MQA Dv", 1, 4, 1, n2 * 7, n2 * 7, 8, 12, 1, ATTN_RING_ZIGZAG, 0, 0},
        {"causal zigzag tiles", 1, 2, 1, n2 * 100, n2 * 100, 32, 32, 1, ATTN_RING_ZIGZAG, 0, 0},
        {"causal contiguous", 1, 2, 2, n2 * 11, n2 * 11, 16, 16, 1, ATTN_RING_CONTIGUOUS, 0, 0},
        {"causal softcap", 1, 2, 2, n2 * 8, n2 * 8, 16, 16, 1, ATTN_RING_ZIGZAG, 5.0f, 0},
        {"full", 2, 2, 2, N * 13, N * 13, 16, 16, 0, ATTN_RING_ZIGZAG, 0, 1},
        {"full GQA odd rows", 1, 6, 3, N * 7, N * 7, 8, 8, 0, ATTN_RING_ZIGZAG, 0, 0},
        {"full cross lengths", 1, 2, 1, N * 5, N * 17, 8, 4, 0, ATTN_RING_CONTIGUOUS, 0, 0},
        {"full tiles", 1, 2, 2, N * 150, N * 150, 32, 32, 0, ATTN_RING_ZIGZAG, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    refusals();
    timeout();
    double w[2] = {worst_fwd, worst_bwd}, wmax[2];
    MPI_Reduce(w, wmax, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%d ranks: largest error relative to max(1, max|ref|): forward %.3g (tolerance "
               "%.0e), backward %.3g (tolerance %.0e)\n",
               N, wmax[0], FWD_TOL, wmax[1], BWD_TOL);
    int f = tu_failures, all = 0;
    MPI_Allreduce(&f, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    char name[64];
    snprintf(name, sizeof name, "test_ring rank %d of %d", rank, N);
    int rc = tu_finish(name);
    MPI_Finalize();
    return rc || all;
}
