/* Backward of every stateless op, in three steps:
 *  1. the double-precision reference kernels (src/kernels/ref/ref_f64.h) against central finite
 *     differences of the double forward kernels: h = 2^-20, tolerance 1e-6 relative
 *     (max |fd - analytic| <= 1e-6 * max(1, max |analytic|));
 *  2. the public float backward functions against that double analytic gradient, tolerance
 *     1e-5 * max(1, max |ref|), through strided views whose gaps hold NaN (a read of a gap or
 *     an unwritten output shows up as NaN, which always fails);
 *  3. bad inputs of every new public function (status and a nonempty message).
 * Covered: odd sizes, GQA, every mask kind with broadcast shapes and fully masked rows, both
 * causal alignments, dropout (a fixed mask for a fixed seed, so finite differences apply),
 * the additive mask's gradient summed over broadcast dimensions, cross-entropy with
 * ignore_index and label smoothing.  Embedding and positional encoding are linear; their
 * double oracle is written here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/ref/ref_f64.h"
#include "testutil.h"

#define FD_H (1.0 / 1048576.0) /* 2^-20 */
#define FD_TOL 1e-6
#define F32_TOL 1e-5

/* ---- error statistics per op, printed at the end ---------------------------------------- */
typedef struct {
    const char *op;
    double fd, f32;
} opstat;
static opstat stats[16];
static int nstats;

static opstat *stat_of(const char *op) {
    for (int i = 0; i < nstats; i++)
        if (!strcmp(stats[i].op, op)) return &stats[i];
    stats[nstats].op = op;
    return &stats[nstats++];
}

/* max |got - ref| / max(1, max |ref|); NaN anywhere gives infinity */
static double rel_err(const double *got, const double *ref, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        if (isnan(got[i]) || isnan(ref[i])) d = INFINITY;
        if (d > e) e = d;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return e / (m > 1 ? m : 1);
}

static void check_fd(const char *op, const char *what, const double *fd, const double *an,
                     size_t n) {
    double r = rel_err(fd, an, n);
    opstat *s = stat_of(op);
    if (!(r <= s->fd)) s->fd = r;
    TU_CHECK(r <= FD_TOL, "%s %s: finite differences vs analytic: rel err %.3g", op, what, r);
}

static void check_f32(const char *op, const char *what, const float *got, const double *ref,
                      size_t n) {
    double *g = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) g[i] = got[i];
    double r = rel_err(g, ref, n);
    opstat *s = stat_of(op);
    if (!(r <= s->f32)) s->f32 = r;
    TU_CHECK(r <= F32_TOL, "%s %s: float vs double analytic: rel err %.3g", op, what, r);
    free(g);
}

/* ---- data --------------------------------------------------------------------------------- */
static float *frand(size_t n, uint64_t seed, float lo, float hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    tu_fill(p, n, seed, lo, hi);
    return p;
}
static double *to_d(const float *f, size_t n) {
    double *d = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}
static double *dzeros(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static double ddot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- finite differences ------------------------------------------------------------------- */
typedef double (*lossfn)(void *u);

static void fd_vec(lossfn f, void *u, double *p, size_t n, double *out) {
    for (size_t i = 0; i < n; i++) {
        double save = p[i];
        p[i] = save + FD_H;
        double lp = f(u);
        p[i] = save - FD_H;
        double lm = f(u);
        p[i] = save;
        out[i] = (lp - lm) / (2 * FD_H);
    }
}
/* F32 parameters (additive masks): values on a 2^-10 grid in [-8, 8], so x +- 2^-20 is exact */
static void fd_vec_f32(lossfn f, void *u, float *p, size_t n, double *out) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] == -INFINITY) {
            out[i] = 0;
            continue;
        }
        float save = p[i];
        p[i] = (float)(save + FD_H);
        double lp = f(u);
        p[i] = (float)(save - FD_H);
        double lm = f(u);
        p[i] = save;
        out[i] = (lp - lm) / (2 * FD_H);
    }
}

/* ---- strided views: last stride 2 and every other stride one more than the extent below it,
 * so no leading dimensions collapse; the gaps hold NaN. ------------------------------------- */
typedef struct {
    float *buf;
    size_t size;
    attn_tensor t;
} sv;

static int64_t lin_off(const attn_tensor *t, int64_t lin) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (lin % t->shape[d]) * t->stride[d];
        lin /= t->shape[d];
    }
    return off;
}

static sv sv_make(int nd, const int64_t *shape, const float *src, int strided) {
    sv v;
    v.t = attn_tensor_make(NULL, ATTN_F32, nd, shape);
    if (strided) {
        v.t.stride[nd - 1] = 2;
        for (int d = nd - 2; d >= 0; d--) v.t.stride[d] = v.t.stride[d + 1] * shape[d + 1] + 1;
    }
    int64_t size = 1, n = 1;
    for (int d = 0; d < nd; d++) {
        size += (shape[d] - 1) * v.t.stride[d];
        n *= shape[d];
    }
    v.size = (size_t)size;
    v.buf = malloc(sizeof(float) * v.size);
    for (size_t i = 0; i < v.size; i++) v.buf[i] = NAN;
    v.t.data = v.buf;
    if (src)
        for (int64_t i = 0; i < n; i++) v.buf[lin_off(&v.t, i)] = src[i];
    return v;
}
static void sv_get(const sv *v, float *dst) {
    int64_t n = attn_tensor_numel(&v->t);
    for (int64_t i = 0; i < n; i++) dst[i] = v->buf[lin_off(&v->t, i)];
}
/* 1 if every element outside the view is still NaN */
static int sv_gaps_ok(const sv *v) {
    unsigned char *in = calloc(v->size, 1);
    int64_t n = attn_tensor_numel(&v->t);
    for (int64_t i = 0; i < n; i++) in[lin_off(&v->t, i)] = 1;
    int ok = 1;
    for (size_t i = 0; i < v->size; i++)
        if (!in[i] && !isnan(v->buf[i])) ok = 0;
    free(in);
    return ok;
}
/* compares a float output view with a double reference */
static void check_sv(const char *op, const char *what, const sv *v, const double *ref) {
    size_t n = (size_t)attn_tensor_numel(&v->t);
    float *g = malloc(sizeof(float) * n);
    sv_get(v, g);
    check_f32(op, what, g, ref, n);
    TU_CHECK(sv_gaps_ok(v), "%s %s: wrote outside the view", op, what);
    free(g);
}

static attn_ctx *ctx;

/* ============================================================================================
 * linear
 * ========================================================================================== */
typedef struct {
    double *x, *W, *b, *G, *y;
    int64_t M, K, N, ldx;
} lin_u;
static double lin_loss(void *p) {
    lin_u *u = p;
    attn__linear_ref_f64(u->x, u->ldx, u->W, u->b, u->y, u->N, u->M, u->K, u->N);
    return ddot(u->y, u->G, (size_t)(u->M * u->N));
}

static void test_linear(void) {
    const int64_t shapes[][4] = {{1, 1, 1, 1}, {1, 3, 5, 1}, {2, 7, 3, 5}, {3, 5, 13, 7}, {2, 9, 1, 17}};
    for (int c = 0; c < 5; c++) {
        int64_t A = shapes[c][0], Bm = shapes[c][1], K = shapes[c][2], N = shapes[c][3], M = A * Bm;
        int64_t ldx = K + 2;
        uint64_t sd = 1000 + (uint64_t)c * 10;
        float *xf = frand((size_t)(M * K), sd, -1, 1), *Wf = frand((size_t)(N * K), sd + 1, -1, 1),
              *bf = frand((size_t)N, sd + 2, -1, 1), *Gf = frand((size_t)(M * N), sd + 3, -1, 1);
        /* kernel-level: x with row stride ldx */
        lin_u u = {dzeros((size_t)(M * ldx)), to_d(Wf, (size_t)(N * K)), to_d(bf, (size_t)N),
                   to_d(Gf, (size_t)(M * N)), dzeros((size_t)(M * N)), M, K, N, ldx};
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) u.x[m * ldx + k] = xf[m * K + k];
        double *dx = dzeros((size_t)(M * K)), *dW = dzeros((size_t)(N * K)), *db = dzeros((size_t)N);
        for (int64_t i = 0; i < N * K; i++) dW[i] = 0.25; /* dW, db accumulate */
        for (int64_t i = 0; i < N; i++) db[i] = 0.25;
        for (int64_t i = 0; i < M * K; i++) dx[i] = 99; /* dx is overwritten */
        attn__linear_bwd_ref_f64(u.x, ldx, u.W, u.G, N, dx, K, dW, db, M, K, N);
        for (int64_t i = 0; i < N * K; i++) dW[i] -= 0.25;
        for (int64_t i = 0; i < N; i++) db[i] -= 0.25;
        double *fx = dzeros((size_t)(M * ldx)), *fW = dzeros((size_t)(N * K)), *fb = dzeros((size_t)N);
        fd_vec(lin_loss, &u, u.x, (size_t)(M * ldx), fx);
        double *fxc = dzeros((size_t)(M * K));
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) fxc[m * K + k] = fx[m * ldx + k];
        fd_vec(lin_loss, &u, u.W, (size_t)(N * K), fW);
        fd_vec(lin_loss, &u, u.b, (size_t)N, fb);
        check_fd("linear", "dx", fxc, dx, (size_t)(M * K));
        check_fd("linear", "dW", fW, dW, (size_t)(N * K));
        check_fd("linear", "db", fb, db, (size_t)N);

        /* public: x [A, Bm, K] and dy strided; outputs strided; overwritten */
        int strided = c % 2 == 0;
        int64_t xs[3] = {A, Bm, K}, ys[3] = {A, Bm, N}, ws[2] = {N, K};
        sv X = sv_make(3, xs, xf, strided), DY = sv_make(3, ys, Gf, strided);
        sv DX = sv_make(3, xs, NULL, strided), DW = sv_make(2, ws, NULL, !strided),
           DB = sv_make(1, &N, NULL, 1);
        attn_tensor Wt = attn_view2(Wf, N, K);
        if (TU_STATUS(attn_linear_backward(ctx, &X.t, &Wt, &DY.t, &DX.t, &DW.t, &DB.t), ATTN_OK, ctx)) {
            check_sv("linear", "public dx", &DX, dx);
            check_sv("linear", "public dW", &DW, dW);
            check_sv("linear", "public db", &DB, db);
        }
        /* a second call gives the same (overwrite, not accumulate); one output only */
        if (TU_STATUS(attn_linear_backward(ctx, &X.t, &Wt, &DY.t, NULL, &DW.t, NULL), ATTN_OK, ctx))
            check_sv("linear", "public dW again", &DW, dW);
        free(X.buf), free(DY.buf), free(DX.buf), free(DW.buf), free(DB.buf);
        free(xf), free(Wf), free(bf), free(Gf), free(u.x), free(u.W), free(u.b), free(u.G), free(u.y);
        free(dx), free(dW), free(db), free(fx), free(fW), free(fb), free(fxc);
    }
}

/* ============================================================================================
 * activations
 * ========================================================================================== */
typedef struct {
    attn_activation act;
    double *x, *y, *G;
    int64_t n;
} act_u;
static double act_loss(void *p) {
    act_u *u = p;
    attn__act_ref_f64(u->act, u->x, u->n, u->y, u->n, 1, u->n);
    return ddot(u->y, u->G, (size_t)u->n);
}

static void test_activations(void) {
    const char *names[4] = {"relu", "gelu", "gelu_tanh", "tanh"};
    for (int a = 0; a < 4; a++) {
        int64_t shape[3] = {3, 5, 7}, n = 105;
        float *xf = frand((size_t)n, 2000 + (uint64_t)a, -4, 4), *Gf = frand((size_t)n, 2100 + (uint64_t)a, -1, 1);
        for (int64_t i = 0; i < n; i++) /* away from relu's kink (and cover 0 itself once) */
            if (fabsf(xf[i]) < 0.01f) xf[i] = xf[i] < 0 ? -0.5f : 0.5f;
        act_u u = {(attn_activation)a, to_d(xf, (size_t)n), dzeros((size_t)n), to_d(Gf, (size_t)n), n};
        double *an = dzeros((size_t)n), *fd = dzeros((size_t)n);
        attn__act_bwd_ref_f64(u.act, u.x, u.G, an, n);
        fd_vec(act_loss, &u, u.x, (size_t)n, fd);
        check_fd(names[a], "dx", fd, an, (size_t)n);
        /* dx may alias dy in the kernel */
        double *al = to_d(Gf, (size_t)n);
        attn__act_bwd_ref_f64(u.act, u.x, al, al, n);
        TU_CHECK(!memcmp(al, an, sizeof(double) * (size_t)n), "%s: aliased dx differs", names[a]);
        free(al);

        sv X = sv_make(3, shape, xf, 1), DY = sv_make(3, shape, Gf, a % 2), DX = sv_make(3, shape, NULL, 1);
        if (TU_STATUS(attn_activate_backward(ctx, (attn_activation)a, &X.t, &DY.t, &DX.t), ATTN_OK, ctx))
            check_sv(names[a], "public dx", &DX, an);
        /* dx == dy (contiguous, same memory) */
        float *g2 = malloc(sizeof(float) * (size_t)n);
        memcpy(g2, Gf, sizeof(float) * (size_t)n);
        attn_tensor G2 = attn_view3(g2, 3, 5, 7), X2 = attn_view3(xf, 3, 5, 7);
        if (TU_STATUS(attn_activate_backward(ctx, (attn_activation)a, &X2, &G2, &G2), ATTN_OK, ctx))
            check_f32(names[a], "public dx aliasing dy", g2, an, (size_t)n);
        free(g2);
        /* relu at exactly 0: gradient 0 (PyTorch: x > 0 ? dy : 0) */
        if (a == ATTN_ACT_RELU) {
            float z = 0.0f, g = 1.0f, d = 5.0f;
            attn_tensor Z = attn_view1(&z, 1), Gt = attn_view1(&g, 1), D = attn_view1(&d, 1);
            TU_STATUS(attn_activate_backward(ctx, ATTN_ACT_RELU, &Z, &Gt, &D), ATTN_OK, ctx);
            TU_CHECK(d == 0.0f, "relu'(0) = %g, expected 0", (double)d);
        }
        free(X.buf), free(DY.buf), free(DX.buf), free(xf), free(Gf), free(u.x), free(u.y), free(u.G);
        free(an), free(fd);
    }
    /* GELU derivative at a few points against the closed form, float public vs double */
    const double xs[5] = {-3.0, -0.5, 0.0, 0.7, 2.5};
    for (int i = 0; i < 5; i++) {
        double d, g = 1, x = xs[i];
        attn__act_bwd_ref_f64(ATTN_ACT_GELU, &x, &g, &d, 1);
        double want = 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-x * x / 2) / sqrt(2 * 3.14159265358979323846);
        TU_CHECK(fabs(d - want) < 1e-15, "gelu'(%g) = %.17g, want %.17g", x, d, want);
    }
}

/* ============================================================================================
 * layer norm
 * ========================================================================================== */
typedef struct {
    double *x, *w, *b, *G, *y, eps;
    int64_t M, E;
} ln_u;
static double ln_loss(void *p) {
    ln_u *u = p;
    attn__layer_norm_ref_f64(u->x, u->E, u->w, u->b, u->eps, u->y, u->E, u->M, u->E);
    return ddot(u->y, u->G, (size_t)(u->M * u->E));
}

static void test_layer_norm(void) {
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 3, 5}, {2, 3, 7}, {3, 1, 17}, {2, 3, 131}, {1, 2, 300}};
    for (int c = 0; c < 6; c++) {
        int64_t A = shapes[c][0], Bm = shapes[c][1], E = shapes[c][2], M = A * Bm;
        int has_w = c != 2;
        uint64_t sd = 3000 + (uint64_t)c * 10;
        float *xf = frand((size_t)(M * E), sd, -2, 2), *wf = frand((size_t)E, sd + 1, 0.5f, 1.5f),
              *bf = frand((size_t)E, sd + 2, -1, 1), *Gf = frand((size_t)(M * E), sd + 3, -1, 1);
        float eps = c == 0 ? 1e-5f : 1e-3f;
        ln_u u = {to_d(xf, (size_t)(M * E)), has_w ? to_d(wf, (size_t)E) : NULL, to_d(bf, (size_t)E),
                  to_d(Gf, (size_t)(M * E)), dzeros((size_t)(M * E)), eps, M, E};
        double *dx = dzeros((size_t)(M * E)), *dw = dzeros((size_t)E), *db = dzeros((size_t)E);
        attn__layer_norm_bwd_ref_f64(u.x, E, u.w, eps, u.G, E, dx, E, has_w ? dw : NULL, db, M, E);
        double *fx = dzeros((size_t)(M * E)), *fw = dzeros((size_t)E), *fb = dzeros((size_t)E);
        fd_vec(ln_loss, &u, u.x, (size_t)(M * E), fx);
        fd_vec(ln_loss, &u, u.b, (size_t)E, fb);
        check_fd("layer_norm", "dx", fx, dx, (size_t)(M * E));
        check_fd("layer_norm", "dbias", fb, db, (size_t)E);
        if (has_w) {
            fd_vec(ln_loss, &u, u.w, (size_t)E, fw);
            check_fd("layer_norm", "dweight", fw, dw, (size_t)E);
        }
        /* dw, db accumulate; dx may alias dy */
        double *al = to_d(Gf, (size_t)(M * E));
        attn__layer_norm_bwd_ref_f64(u.x, E, u.w, eps, al, E, al, E, has_w ? dw : NULL, db, M, E);
        TU_CHECK(!memcmp(al, dx, sizeof(double) * (size_t)(M * E)), "layer_norm: aliased dx differs");
        for (int64_t e = 0; e < E; e++) {
            db[e] *= 0.5;
            dw[e] *= 0.5;
        }
        check_fd("layer_norm", "dbias accumulated twice", fb, db, (size_t)E);
        free(al);

        int64_t xs[3] = {A, Bm, E};
        sv X = sv_make(3, xs, xf, c % 2), DY = sv_make(3, xs, Gf, 1), DX = sv_make(3, xs, NULL, 1),
           DW = sv_make(1, &E, NULL, 1), DB = sv_make(1, &E, NULL, 0);
        attn_tensor Wt = attn_view1(wf, E);
        if (TU_STATUS(attn_layer_norm_backward(ctx, &X.t, has_w ? &Wt : NULL, eps, &DY.t, &DX.t,
                                               &DW.t, &DB.t), ATTN_OK, ctx)) {
            check_sv("layer_norm", "public dx", &DX, dx);
            if (has_w) check_sv("layer_norm", "public dweight", &DW, dw);
            check_sv("layer_norm", "public dbias", &DB, db);
        }
        /* dx == dy */
        float *g2 = malloc(sizeof(float) * (size_t)(M * E));
        memcpy(g2, Gf, sizeof(float) * (size_t)(M * E));
        attn_tensor G2 = attn_view2(g2, M, E), X2 = attn_view2(xf, M, E);
        if (TU_STATUS(attn_layer_norm_backward(ctx, &X2, has_w ? &Wt : NULL, eps, &G2, &G2, NULL, NULL),
                      ATTN_OK, ctx))
            check_f32("layer_norm", "public dx aliasing dy", g2, dx, (size_t)(M * E));
        free(g2);
        free(X.buf), free(DY.buf), free(DX.buf), free(DW.buf), free(DB.buf);
        free(xf), free(wf), free(bf), free(Gf), free(u.x), free(u.w), free(u.b), free(u.G), free(u.y);
        free(dx), free(dw), free(db), free(fx), free(fw), free(fb);
    }
}

/* ============================================================================================
 * softmax
 * ========================================================================================== */
typedef struct {
    double *x, *y, *G;
    int64_t M, C;
} sm_u;
static double sm_loss(void *p) {
    sm_u *u = p;
    for (int64_t m = 0; m < u->M; m++) attn__softmax_row_f64(u->x + m * u->C, u->y + m * u->C, u->C);
    return ddot(u->y, u->G, (size_t)(u->M * u->C));
}

static void test_softmax(void) {
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 2, 5}, {2, 3, 13}, {3, 5, 2}};
    for (int c = 0; c < 4; c++) {
        int64_t A = shapes[c][0], Bm = shapes[c][1], C = shapes[c][2], M = A * Bm, n = M * C;
        uint64_t sd = 4000 + (uint64_t)c * 10;
        float *xf = frand((size_t)n, sd, -3, 3), *Gf = frand((size_t)n, sd + 1, -1, 1);
        /* kernel-level: some -inf entries and, when there are several rows, one fully masked */
        sm_u u = {to_d(xf, (size_t)n), dzeros((size_t)n), to_d(Gf, (size_t)n), M, C};
        for (int64_t i = 3; i < n; i += 7) u.x[i] = -INFINITY;
        if (M > 1)
            for (int64_t j = 0; j < C; j++) u.x[C + j] = -INFINITY;
        sm_loss(&u);
        double *an = dzeros((size_t)n), *fd = dzeros((size_t)n);
        for (int64_t m = 0; m < M; m++) attn__softmax_row_bwd_f64(u.y + m * C, u.G + m * C, an + m * C, C);
        fd_vec(sm_loss, &u, u.x, (size_t)n, fd);
        check_fd("softmax", "dx", fd, an, (size_t)n);
        if (M > 1)
            for (int64_t j = 0; j < C; j++) TU_CHECK(an[C + j] == 0, "softmax: masked row gradient");

        /* public: y from attn_softmax of finite x; reference from the same y in double */
        int64_t xs[3] = {A, Bm, C};
        float *yf = malloc(sizeof(float) * (size_t)n);
        attn_tensor Xc = attn_view3(xf, A, Bm, C), Yc = attn_view3(yf, A, Bm, C);
        TU_STATUS(attn_softmax(ctx, &Xc, &Yc), ATTN_OK, ctx);
        double *yd = to_d(yf, (size_t)n), *ref = dzeros((size_t)n);
        for (int64_t m = 0; m < M; m++) attn__softmax_row_bwd_f64(yd + m * C, u.G + m * C, ref + m * C, C);
        sv Y = sv_make(3, xs, yf, c % 2), DY = sv_make(3, xs, Gf, 1), DX = sv_make(3, xs, NULL, (c + 1) % 2);
        if (TU_STATUS(attn_softmax_backward(ctx, &Y.t, &DY.t, &DX.t), ATTN_OK, ctx))
            check_sv("softmax", "public dx", &DX, ref);
        float *g2 = malloc(sizeof(float) * (size_t)n);
        memcpy(g2, Gf, sizeof(float) * (size_t)n);
        attn_tensor G2 = attn_view3(g2, A, Bm, C);
        if (TU_STATUS(attn_softmax_backward(ctx, &Yc, &G2, &G2), ATTN_OK, ctx))
            check_f32("softmax", "public dx aliasing dy", g2, ref, (size_t)n);
        free(g2), free(yf), free(yd), free(ref), free(Y.buf), free(DY.buf), free(DX.buf);
        free(xf), free(Gf), free(u.x), free(u.y), free(u.G), free(an), free(fd);
    }
}

/* ============================================================================================
 * scaled dot-product attention
 * ========================================================================================== */
typedef struct {
    int64_t B, H, Hkv, L, S, D, Dv;
    int mkind;   /* 0 none, 1 keep, 2 block, 3 add */
    int mnd;     /* mask dims, right-aligned on [B, H, L, S] */
    int bc[4];   /* 1 where the mask has size 1 */
    int causal;
    float scale; /* 0 = 1/sqrt(D) */
    int drop;    /* dropout p = 0.3 */
    int full;    /* make a fully masked row */
    int extra;   /* kernel only: mask[0] covers S-1 columns, mask[1] a key-padding mask */
} scase;

typedef struct {
    attn__sdpa_args_f64 a;
    double *o, *G;
    size_t no;
    double *scratch;
} sd_u;
static double sd_loss(void *p) {
    sd_u *u = p;
    attn__sdpa_ref_f64(&u->a, u->scratch);
    return ddot(u->o, u->G, u->no);
}

static void contig4(int64_t *st, const int64_t *sh) {
    st[3] = 1;
    for (int d = 2; d >= 0; d--) st[d] = st[d + 1] * sh[d + 1];
}

static void sdpa_case(const scase *c, uint64_t seed, int strided, char *what) {
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, L = c->L, S = c->S, D = c->D, Dv = c->Dv;
    int64_t qsh[4] = {B, H, L, D}, ksh[4] = {B, Hkv, S, D}, vsh[4] = {B, Hkv, S, Dv}, osh[4] = {B, H, L, Dv};
    size_t nq = (size_t)(B * H * L * D), nk = (size_t)(B * Hkv * S * D), nv = (size_t)(B * Hkv * S * Dv),
           no = (size_t)(B * H * L * Dv);
    float *qf = frand(nq, seed, -1.5f, 1.5f), *kf = frand(nk, seed + 1, -1.5f, 1.5f),
          *vf = frand(nv, seed + 2, -1, 1), *Gf = frand(no, seed + 3, -1, 1);
    int extra = c->extra && S > 1;
    int64_t Sm = extra ? S - 1 : S; /* mask columns */
    /* the mask: right-aligned dims of [B, H, L, Sm], size 1 where broadcast */
    int64_t full[4] = {B, H, L, Sm}, msh[4], mn = 1;
    int nd = c->mnd;
    for (int d = 0; d < nd; d++) {
        int fd = 4 - nd + d;
        msh[d] = c->bc[fd] ? 1 : full[fd];
        mn *= msh[d];
    }
    void *mdata = NULL;
    uint64_t st = seed * 7 + 5;
    if (c->mkind == 1 || c->mkind == 2) {
        unsigned char *m = malloc((size_t)mn);
        for (int64_t i = 0; i < mn; i++) m[i] = (tu_rand(&st) % 4) != 0; /* mostly attend */
        if (c->full) /* the first mask row (or everything when the row is one element) */
            for (int64_t j = 0; j < msh[nd - 1]; j++) m[j] = 0;
        if (c->mkind == 2)
            for (int64_t i = 0; i < mn; i++) m[i] = !m[i];
        mdata = m;
    } else if (c->mkind == 3) {
        float *m = frand((size_t)mn, st, -3, 1);
        for (int64_t i = 0; i < mn; i++) m[i] = roundf(m[i] * 1024) / 1024; /* exact FD steps */
        for (int64_t i = 2; i < mn; i += 5) m[i] = -INFINITY;
        if (c->full)
            for (int64_t j = 0; j < msh[nd - 1]; j++) m[j] = -INFINITY;
        mdata = m;
    }
    attn_mask am;
    memset(&am, 0, sizeof am);
    if (c->mkind) {
        am.kind = c->mkind == 1 ? ATTN_MASK_KEEP : c->mkind == 2 ? ATTN_MASK_BLOCK : ATTN_MASK_ADD;
        am.t = attn_tensor_make(mdata, c->mkind == 3 ? ATTN_F32 : ATTN_BOOL, nd, msh);
    }
    float scale = c->scale != 0 ? c->scale : (float)(1.0 / sqrt((double)D));

    /* ---- double kernels: analytic vs finite differences ---- */
    sd_u u;
    memset(&u, 0, sizeof u);
    attn__sdpa_args_f64 *a = &u.a;
    a->B = B, a->H = H, a->Hkv = Hkv, a->L = L, a->S = S, a->D = D, a->Dv = Dv;
    double *qd = to_d(qf, nq), *kd = to_d(kf, nk), *vd = to_d(vf, nv), *lse = dzeros((size_t)(B * H * L));
    a->q = qd, a->k = kd, a->v = vd;
    contig4(a->qs, qsh), contig4(a->ks, ksh), contig4(a->vs, vsh), contig4(a->os, osh);
    u.o = dzeros(no), u.G = to_d(Gf, no), u.no = no;
    a->o = u.o;
    a->lse = lse;
    a->ls[0] = H * L, a->ls[1] = L, a->ls[2] = 1;
    int64_t target[4] = {B, H, L, Sm};
    TU_STATUS(attn__mask_bind(ctx, c->mkind ? &am : NULL, "mask", target, &a->mask[0]), ATTN_OK, ctx);
    a->mask_ncols[0] = Sm;
    unsigned char *kpm = NULL;
    if (extra) { /* key padding [B, S - 1] as the MHA layer's add_bias_kv path builds it */
        kpm = malloc((size_t)(B * (S - 1)));
        for (int64_t i = 0; i < B * (S - 1); i++) kpm[i] = (tu_rand(&st) % 3) != 0;
        a->mask[1].kind = ATTN_MASK_KEEP;
        a->mask[1].data = kpm;
        a->mask[1].dtype = ATTN_BOOL;
        a->mask[1].stride[0] = S - 1, a->mask[1].stride[3] = 1;
        a->mask_ncols[1] = S - 1;
    }
    a->causal = (attn_causal)c->causal;
    a->scale = scale;
    a->dropout_p = c->drop ? 0.3f : 0.0f;
    a->seed = seed, a->offset = 7;
    u.scratch = dzeros((size_t)(4 * S));
    sd_loss(&u); /* lse for the fully-masked-row check */

    double *dq = dzeros(nq), *dk = dzeros(nk), *dv = dzeros(nv), *dm = dzeros((size_t)mn);
    for (size_t i = 0; i < nk; i++) dk[i] = 77; /* overwritten */
    for (size_t i = 0; i < nv; i++) dv[i] = 77;
    for (int64_t i = 0; i < mn; i++) dm[i] = 0.25; /* accumulates */
    attn__sdpa_grads_f64 g;
    memset(&g, 0, sizeof g);
    g.dout = u.G, g.dq = dq, g.dk = dk, g.dv = dv;
    contig4(g.dos, osh), contig4(g.dqs, qsh), contig4(g.dks, ksh), contig4(g.dvs, vsh);
    int addm = c->mkind == 3;
    if (addm) {
        g.dmask = dm;
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            g.dms[4 - nd + d] = msh[d] == 1 ? 0 : s;
            s *= msh[d];
        }
    }
    attn__sdpa_bwd_ref_f64(a, &g, u.scratch);
    for (int64_t i = 0; i < mn; i++) dm[i] -= 0.25;

    double *fq = dzeros(nq), *fk = dzeros(nk), *fv = dzeros(nv), *fm = dzeros((size_t)mn);
    fd_vec(sd_loss, &u, qd, nq, fq);
    fd_vec(sd_loss, &u, kd, nk, fk);
    fd_vec(sd_loss, &u, vd, nv, fv);
    check_fd("sdpa", what, fq, dq, nq);
    check_fd("sdpa", what, fk, dk, nk);
    check_fd("sdpa", what, fv, dv, nv);
    if (addm) {
        fd_vec_f32(sd_loss, &u, (float *)mdata, (size_t)mn, fm);
        check_fd("sdpa", what, fm, dm, (size_t)mn);
    }
    /* rows with every key masked: exactly zero */
    int64_t masked_rows = 0;
    for (int64_t r = 0; r < B * H * L; r++)
        if (lse[r] == -INFINITY) {
            masked_rows++;
            for (int64_t d = 0; d < D; d++) TU_CHECK(dq[r * D + d] == 0, "%s: masked row dq", what);
        }

    /* ---- public float function (the kernel's extra key-padding mask is not public) ---- */
    if (!extra) {
        attn_sdpa_options opt = attn_sdpa_defaults();
        opt.causal = (attn_causal)c->causal;
        opt.scale = c->scale;
        opt.dropout_p = a->dropout_p;
        opt.seed = seed, opt.offset = 7;
        sv Q = sv_make(4, qsh, qf, strided), K = sv_make(4, ksh, kf, strided), V = sv_make(4, vsh, vf, 0),
           DO = sv_make(4, osh, Gf, strided);
        sv DQ = sv_make(4, qsh, NULL, strided), DK = sv_make(4, ksh, NULL, !strided),
           DV = sv_make(4, vsh, NULL, strided), DM = sv_make(nd, msh, NULL, strided);
        attn_status s = attn_sdpa_backward(ctx, &Q.t, &K.t, &V.t, c->mkind ? &am : NULL, &opt, &DO.t,
                                           &DQ.t, &DK.t, &DV.t, addm ? &DM.t : NULL);
        if (TU_STATUS(s, ATTN_OK, ctx)) {
            check_sv("sdpa", what, &DQ, dq);
            check_sv("sdpa", what, &DK, dk);
            check_sv("sdpa", what, &DV, dv);
            if (addm) check_sv("sdpa", what, &DM, dm);
            if (masked_rows) {
                float *t = malloc(sizeof(float) * nq);
                sv_get(&DQ, t);
                for (int64_t r = 0; r < B * H * L; r++)
                    if (lse[r] == -INFINITY)
                        for (int64_t d = 0; d < D; d++)
                            TU_CHECK(t[r * D + d] == 0.0f, "%s: public masked row dq", what);
                free(t);
            }
        }
        /* only dv wanted */
        if (TU_STATUS(attn_sdpa_backward(ctx, &Q.t, &K.t, &V.t, c->mkind ? &am : NULL, &opt, &DO.t,
                                         NULL, NULL, &DV.t, NULL), ATTN_OK, ctx))
            check_sv("sdpa", what, &DV, dv);
        free(Q.buf), free(K.buf), free(V.buf), free(DO.buf), free(DQ.buf), free(DK.buf), free(DV.buf),
            free(DM.buf);
    }
    free(qf), free(kf), free(vf), free(Gf), free(mdata), free(kpm), free(qd), free(kd), free(vd), free(lse);
    free(u.o), free(u.G), free(u.scratch), free(dq), free(dk), free(dv), free(dm);
    free(fq), free(fk), free(fv), free(fm);
}

static void test_sdpa(void) {
    uint64_t st = 777;
    const int64_t sizes[] = {1, 2, 3, 5, 7};
    int seen_masked = 0;
    for (int t = 0; t < 48; t++) {
        scase c;
        memset(&c, 0, sizeof c);
        c.B = 1 + (int64_t)(tu_rand(&st) % 2);
        c.Hkv = 1 + (int64_t)(tu_rand(&st) % 2);
        c.H = c.Hkv * (1 + (int64_t)(tu_rand(&st) % 3));
        c.L = sizes[tu_rand(&st) % 5];
        c.S = sizes[tu_rand(&st) % 5];
        c.D = sizes[tu_rand(&st) % 5];
        c.Dv = sizes[tu_rand(&st) % 5];
        c.mkind = t < 8 ? t % 4 : (int)(tu_rand(&st) % 4);
        if (t >= 8 && t < 16) c.mkind = 3; /* more additive masks: dmask */
        c.mnd = 1 + (int)(tu_rand(&st) % 4);
        for (int d = 0; d < 4; d++) c.bc[d] = (tu_rand(&st) % 3) == 0;
        c.causal = t % 3;
        c.scale = (tu_rand(&st) % 3) == 0 ? 0.45f : 0.0f;
        c.drop = (tu_rand(&st) % 3) == 0;
        c.full = (tu_rand(&st) % 3) == 0;
        c.extra = t % 5 == 4;
        char what[200];
        snprintf(what, sizeof what,
                 "case %d B%lld H%lld/%lld L%lld S%lld D%lld/%lld mask%d/%dD bc%d%d%d%d causal%d drop%d full%d extra%d",
                 t, (long long)c.B, (long long)c.H, (long long)c.Hkv, (long long)c.L, (long long)c.S,
                 (long long)c.D, (long long)c.Dv, c.mkind, c.mnd, c.bc[0], c.bc[1], c.bc[2], c.bc[3],
                 c.causal, c.drop, c.full, c.extra);
        int before = tu_failures;
        sdpa_case(&c, 5000 + (uint64_t)t * 10, t % 2, what);
        if (tu_failures != before) fprintf(stderr, "  (in %s)\n", what);
        if (getenv("BWD_VERBOSE")) printf("%s\n", what);
        seen_masked += c.full || (c.causal == 2 && c.L > c.S);
    }
    TU_CHECK(seen_masked > 3, "too few cases with fully masked rows (%d)", seen_masked);
    /* fixed cases: GQA with dropout and a broadcast additive mask [1, H, 1, S]; bottom-right
     * causal with L > S (the first rows see nothing); a 4-D additive mask without broadcast */
    scase f1 = {2, 6, 2, 5, 7, 3, 4, 3, 4, {1, 0, 1, 0}, 1, 0, 1, 1, 0};
    sdpa_case(&f1, 91, 1, "fixed GQA dropout broadcast add mask");
    scase f2 = {1, 2, 1, 7, 3, 5, 2, 0, 0, {0, 0, 0, 0}, 2, 0.f, 1, 0, 0};
    sdpa_case(&f2, 92, 0, "fixed bottom-right L > S");
    scase f3 = {2, 2, 2, 3, 5, 2, 3, 3, 4, {0, 0, 0, 0}, 0, 0.f, 0, 1, 0};
    sdpa_case(&f3, 93, 1, "fixed full 4-D add mask");
    scase f4 = {2, 4, 1, 5, 6, 3, 2, 3, 2, {0, 0, 0, 0}, 0, 0.f, 1, 0, 1};
    sdpa_case(&f4, 94, 0, "fixed MQA, mask over S-1 columns + key padding");
}

/* ============================================================================================
 * simplified self-attention
 * ========================================================================================== */
typedef struct {
    double *X, *G, *s, *w, *c;
    int64_t B, T, E;
    attn_normalize norm;
} ssa_u;
static double ssa_loss(void *p) {
    ssa_u *u = p;
    attn__simple_attn_ref_f64(u->X, u->B, u->T, u->E, u->norm, u->s, u->w, u->c);
    return ddot(u->c, u->G, (size_t)(u->B * u->T * u->E));
}

static void test_simple_attention(void) {
    const int64_t shapes[][4] = {{0, 1, 1}, {0, 3, 5}, {2, 5, 3}, {3, 7, 2}};
    for (int c = 0; c < 4; c++)
        for (int nm = 0; nm < 2; nm++) {
            int b3 = shapes[c][0] > 0;
            int64_t B = b3 ? shapes[c][0] : 1, T = shapes[c][1], E = shapes[c][2];
            size_t n = (size_t)(B * T * E);
            attn_normalize norm = nm ? ATTN_NORM_SUM : ATTN_NORM_SOFTMAX;
            /* sum normalisation: positive inputs keep the row sums well away from zero */
            float *xf = frand(n, 6000 + (uint64_t)c * 10 + (uint64_t)nm, nm ? 0.2f : -1.0f, 1.0f),
                  *Gf = frand(n, 6100 + (uint64_t)c * 10, -1, 1);
            ssa_u u = {to_d(xf, n), to_d(Gf, n), dzeros((size_t)(B * T * T)), dzeros((size_t)(B * T * T)),
                       dzeros(n), B, T, E, norm};
            double *an = dzeros(n), *fd = dzeros(n), *scr = dzeros((size_t)(3 * T * T));
            TU_CHECK(attn__simple_attn_bwd_ref_f64(u.X, B, T, E, norm, u.G, an, scr) == -1, "ssa bwd status");
            fd_vec(ssa_loss, &u, u.X, n, fd);
            check_fd("simple_self_attention", nm ? "dX (sum)" : "dX (softmax)", fd, an, n);

            int64_t xs[3] = {B, T, E};
            sv X = sv_make(b3 ? 3 : 2, xs + !b3, xf, c % 2), DC = sv_make(b3 ? 3 : 2, xs + !b3, Gf, 1),
               DX = sv_make(b3 ? 3 : 2, xs + !b3, NULL, (c + 1) % 2);
            if (TU_STATUS(attn_simple_self_attention_backward(ctx, &X.t, norm, &DC.t, &DX.t), ATTN_OK, ctx))
                check_sv("simple_self_attention", "public dX", &DX, an);
            free(X.buf), free(DC.buf), free(DX.buf), free(xf), free(Gf);
            free(u.X), free(u.G), free(u.s), free(u.w), free(u.c), free(an), free(fd), free(scr);
        }
    /* a row summing to zero under sum-normalisation is refused, as in the forward */
    float x[4] = {1, 0, -1, 0}, dc[4] = {1, 1, 1, 1}, dx[4];
    attn_tensor X = attn_view2(x, 2, 2), DC = attn_view2(dc, 2, 2), DX = attn_view2(dx, 2, 2);
    TU_STATUS(attn_simple_self_attention_backward(ctx, &X, ATTN_NORM_SUM, &DC, &DX), ATTN_E_INVALID, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "row") != NULL, "message: %s", attn_ctx_errmsg(ctx));
}

/* ============================================================================================
 * embedding and positional encoding (linear maps; the double oracle is written here)
 * ========================================================================================== */
typedef struct {
    const int64_t *ids;
    int64_t n, V, E;
    double *table, *G;
} emb_u;
static double emb_loss(void *p) { /* sum over tokens of table[id] . G[token] */
    emb_u *u = p;
    double s = 0;
    for (int64_t t = 0; t < u->n; t++)
        for (int64_t e = 0; e < u->E; e++) s += u->table[u->ids[t] * u->E + e] * u->G[t * u->E + e];
    return s;
}

static void test_embedding(void) {
    for (int c = 0; c < 3; c++) {
        int64_t V = 7 + c * 4, E = 3 + c * 2, ishape[3] = {2, 5, 3};
        int ind = c + 1; /* ids are 1-D, 2-D, 3-D */
        int64_t n = 1;
        for (int d = 0; d < ind; d++) n *= ishape[d];
        int64_t *ids = malloc(sizeof(int64_t) * (size_t)n);
        int32_t *ids32 = malloc(sizeof(int32_t) * (size_t)n);
        uint64_t st = 7000 + (uint64_t)c;
        for (int64_t t = 0; t < n; t++) ids32[t] = (int32_t)(ids[t] = (int64_t)(tu_rand(&st) % (uint64_t)(V - 2)));
        ids[0] = ids[n - 1] = 1; /* a repeated id */
        ids32[0] = ids32[n - 1] = 1;
        float *tf = frand((size_t)(V * E), st, -1, 1), *Gf = frand((size_t)(n * E), st + 1, -1, 1);
        emb_u u = {ids, n, V, E, to_d(tf, (size_t)(V * E)), to_d(Gf, (size_t)(n * E))};
        double *an = dzeros((size_t)(V * E)), *fd = dzeros((size_t)(V * E));
        for (int64_t t = 0; t < n; t++) /* scatter-add */
            for (int64_t e = 0; e < E; e++) an[ids[t] * E + e] += u.G[t * E + e];
        fd_vec(emb_loss, &u, u.table, (size_t)(V * E), fd);
        check_fd("embedding", "dtable", fd, an, (size_t)(V * E));

        int64_t oshape[4];
        for (int d = 0; d < ind; d++) oshape[d] = ishape[d];
        oshape[ind] = E;
        attn_tensor I = attn_tensor_make(c == 1 ? (void *)ids32 : (void *)ids, c == 1 ? ATTN_I32 : ATTN_I64, ind, ishape);
        sv DO = sv_make(ind + 1, oshape, Gf, c != 1), DT = sv_make(2, (int64_t[2]){V, E}, NULL, c != 0);
        if (TU_STATUS(attn_embedding_backward(ctx, &I, &DO.t, &DT.t), ATTN_OK, ctx)) {
            check_sv("embedding", "public dtable", &DT, an); /* unused rows are zero, not NaN */
            float *t = malloc(sizeof(float) * (size_t)(V * E));
            sv_get(&DT, t);
            TU_CHECK(t[(V - 1) * E] == 0.0f, "embedding: unused row is not zero");
            free(t);
        }
        free(DO.buf), free(DT.buf), free(ids), free(ids32), free(tf), free(Gf), free(u.table), free(u.G);
        free(an), free(fd);
    }
}

typedef struct {
    attn_pe_mode mode;
    int64_t B, L, E, P;
    double *x, *pe, *G; /* x [B, L, E], pe [L, P], G [B, L, E or E + P] */
} pe_u;
static double pe_loss(void *p) {
    pe_u *u = p;
    int64_t W = u->mode == ATTN_PE_ADD ? u->E : u->E + u->P;
    double s = 0;
    for (int64_t b = 0; b < u->B; b++)
        for (int64_t l = 0; l < u->L; l++) {
            const double *g = u->G + (b * u->L + l) * W;
            for (int64_t e = 0; e < u->E; e++) s += u->x[(b * u->L + l) * u->E + e] * g[e];
            for (int64_t p2 = 0; p2 < u->P; p2++)
                s += u->pe[l * u->P + p2] * g[(u->mode == ATTN_PE_ADD ? 0 : u->E) + p2];
        }
    return s;
}

static void test_positional(void) {
    for (int c = 0; c < 4; c++) {
        attn_pe_mode mode = c % 2 ? ATTN_PE_CONCAT : ATTN_PE_ADD;
        int64_t B = 1 + c % 3, L = 3 + c, E = 5, P = mode == ATTN_PE_ADD ? E : 3, Lp = L + c; /* dpe rows >= L */
        int64_t W = mode == ATTN_PE_ADD ? E : E + P;
        float *Gf = frand((size_t)(B * L * W), 8000 + (uint64_t)c, -1, 1);
        float *xf = frand((size_t)(B * L * E), 8100 + (uint64_t)c, -1, 1), *pf = frand((size_t)(L * P), 8200 + (uint64_t)c, -1, 1);
        pe_u u = {mode, B, L, E, P, to_d(xf, (size_t)(B * L * E)), to_d(pf, (size_t)(L * P)), to_d(Gf, (size_t)(B * L * W))};
        double *fx = dzeros((size_t)(B * L * E)), *fp = dzeros((size_t)(L * P));
        fd_vec(pe_loss, &u, u.x, (size_t)(B * L * E), fx);
        fd_vec(pe_loss, &u, u.pe, (size_t)(L * P), fp);
        /* analytic: dx = dout[..., :E]; dpe = sum over batch, rows >= L zero */
        double *ax = dzeros((size_t)(B * L * E)), *ap = dzeros((size_t)(Lp * P));
        for (int64_t b = 0; b < B; b++)
            for (int64_t l = 0; l < L; l++) {
                for (int64_t e = 0; e < E; e++) ax[(b * L + l) * E + e] = u.G[(b * L + l) * W + e];
                for (int64_t p2 = 0; p2 < P; p2++)
                    ap[l * P + p2] += u.G[(b * L + l) * W + (mode == ATTN_PE_ADD ? 0 : E) + p2];
            }
        check_fd("positional_apply", "dx", fx, ax, (size_t)(B * L * E));
        check_fd("positional_apply", "dpe", fp, ap, (size_t)(L * P));
        int64_t os[3] = {B, L, W}, xs[3] = {B, L, E}, ps[2] = {Lp, P};
        sv DO = sv_make(3, os, Gf, c % 2), DX = sv_make(3, xs, NULL, 1), DP = sv_make(2, ps, NULL, (c + 1) % 2);
        if (TU_STATUS(attn_positional_apply_backward(ctx, mode, &DO.t, &DX.t, &DP.t), ATTN_OK, ctx)) {
            check_sv("positional_apply", "public dx", &DX, ax);
            check_sv("positional_apply", "public dpe", &DP, ap);
        }
        /* concat with dpe only (E is inferred), and with dx only */
        if (mode == ATTN_PE_CONCAT) {
            if (TU_STATUS(attn_positional_apply_backward(ctx, mode, &DO.t, NULL, &DP.t), ATTN_OK, ctx))
                check_sv("positional_apply", "public dpe only", &DP, ap);
            if (TU_STATUS(attn_positional_apply_backward(ctx, mode, &DO.t, &DX.t, NULL), ATTN_OK, ctx))
                check_sv("positional_apply", "public dx only", &DX, ax);
        }
        free(DO.buf), free(DX.buf), free(DP.buf), free(Gf), free(xf), free(pf), free(u.x), free(u.pe), free(u.G);
        free(fx), free(fp), free(ax), free(ap);
    }
}

/* ============================================================================================
 * cross-entropy
 * ========================================================================================== */
typedef struct {
    double *x;
    const int64_t *t;
    int64_t N, C, ign;
    double eps;
} ce_u;
static double ce_loss(void *p) {
    ce_u *u = p;
    return attn__cross_entropy_ref_f64(u->x, u->C, u->t, u->N, u->C, u->ign, u->eps, NULL, 0);
}
/* PyTorch's formula written out independently: (1-eps) * mean nll + eps/C * mean(-sum log p) */
static double ce_oracle(const double *x, const int64_t *t, int64_t N, int64_t C, int64_t ign, double eps) {
    double nll = 0, sm = 0;
    int64_t cnt = 0;
    for (int64_t n = 0; n < N; n++) {
        if (t[n] == ign) continue;
        cnt++;
        double mx = x[n * C];
        for (int64_t c = 1; c < C; c++) mx = fmax(mx, x[n * C + c]);
        double s = 0;
        for (int64_t c = 0; c < C; c++) s += exp(x[n * C + c] - mx);
        for (int64_t c = 0; c < C; c++) {
            double logp = x[n * C + c] - mx - log(s);
            if (c == t[n]) nll -= logp;
            sm -= logp;
        }
    }
    return cnt ? (1 - eps) * nll / (double)cnt + eps / (double)C * sm / (double)cnt : 0.0;
}

static void test_cross_entropy(void) {
    const int64_t shapes[][2] = {{1, 1}, {1, 5}, {7, 3}, {13, 11}, {4, 2}};
    for (int c = 0; c < 5; c++)
        for (int ls = 0; ls < 2; ls++) {
            int64_t N = shapes[c][0], C = shapes[c][1];
            double eps = ls ? 0.1 : 0.0;
            int64_t ign = c == 4 ? 1 : -100; /* ignore_index may also be a valid class */
            uint64_t st = 9000 + (uint64_t)c * 10 + (uint64_t)ls;
            float *xf = frand((size_t)(N * C), st, -3, 3);
            int64_t *t = malloc(sizeof(int64_t) * (size_t)N);
            int32_t *t32 = malloc(sizeof(int32_t) * (size_t)N);
            for (int64_t n = 0; n < N; n++) {
                t[n] = (int64_t)(tu_rand(&st) % (uint64_t)C);
                if (n % 3 == 1) t[n] = ign;
                t32[n] = (int32_t)t[n];
            }
            ce_u u = {to_d(xf, (size_t)(N * C)), t, N, C, ign, eps};
            double *an = dzeros((size_t)(N * C)), *fd = dzeros((size_t)(N * C));
            double loss = attn__cross_entropy_ref_f64(u.x, C, t, N, C, ign, eps, an, C);
            double want = ce_oracle(u.x, t, N, C, ign, eps);
            TU_CHECK(fabs(loss - want) <= 1e-12 * fmax(1, fabs(want)), "cross_entropy loss %.17g vs %.17g", loss, want);
            fd_vec(ce_loss, &u, u.x, (size_t)(N * C), fd);
            check_fd("cross_entropy", ls ? "dlogits (smoothing)" : "dlogits", fd, an, (size_t)(N * C));

            int64_t xs[2] = {N, C};
            sv X = sv_make(2, xs, xf, c % 2), DL = sv_make(2, xs, NULL, (c + ls) % 2);
            attn_tensor T = attn_tensor_make(ls ? (void *)t32 : (void *)t, ls ? ATTN_I32 : ATTN_I64, 1, &N);
            float fl = NAN;
            if (TU_STATUS(attn_cross_entropy(ctx, &X.t, &T, ign, (float)eps, &fl, &DL.t), ATTN_OK, ctx)) {
                check_f32("cross_entropy", "public loss", &fl, &loss, 1);
                check_sv("cross_entropy", "public dlogits", &DL, an);
            }
            free(X.buf), free(DL.buf), free(xf), free(t), free(t32), free(u.x), free(an), free(fd);
        }
    /* every target ignored: loss 0 and dlogits 0, not NaN */
    float x[6] = {1, 2, 3, 4, 5, 6}, dl[6] = {7, 7, 7, 7, 7, 7}, loss = NAN;
    int64_t t[2] = {-100, -100}, n2 = 2;
    attn_tensor X = attn_view2(x, 2, 3), DL = attn_view2(dl, 2, 3), T = attn_tensor_make(t, ATTN_I64, 1, &n2);
    TU_STATUS(attn_cross_entropy(ctx, &X, &T, -100, 0.2f, &loss, &DL), ATTN_OK, ctx);
    int zero = loss == 0.0f;
    for (int i = 0; i < 6; i++) zero &= dl[i] == 0.0f;
    TU_CHECK(zero, "all ignored: loss %g, dlogits not all zero", (double)loss);
}

/* ============================================================================================
 * bad inputs
 * ========================================================================================== */
#define BAD(expr, want)                                                                       \
    do {                                                                                      \
        attn_ctx_clear_error(ctx);                                                            \
        TU_STATUS((expr), (want), ctx);                                                       \
        TU_CHECK(attn_ctx_errmsg(ctx)[0] != 0, "no message for %s", #expr);                   \
    } while (0)
#define MSG_HAS(s) TU_CHECK(strstr(attn_ctx_errmsg(ctx), (s)) != NULL, "message '%s' lacks '%s'", attn_ctx_errmsg(ctx), (s))

static void bad_inputs(void) {
    float a[2 * 3 * 4], b[2 * 3 * 4], c[2 * 3 * 4], d[2 * 3 * 4], e[64], f[64];
    tu_fill(a, 24, 1, -1, 1), tu_fill(b, 24, 2, -1, 1), tu_fill(c, 24, 3, -1, 1), tu_fill(d, 24, 4, -1, 1);
    tu_fill(e, 64, 5, -1, 1), tu_fill(f, 64, 6, -1, 1);
    attn_tensor A = attn_view3(a, 2, 3, 4), Bt = attn_view3(b, 2, 3, 4), Ct = attn_view3(c, 2, 3, 4);
    attn_tensor A5 = attn_view3(a, 2, 3, 3), Z = attn_view3(a, 2, 0, 4), N = A, I = A;
    attn_tensor Huge = attn_view3(a, INT64_MAX / 2, 3, 4);
    N.data = NULL;
    I.dtype = ATTN_I32;

    /* softmax */
    TU_CHECK(attn_softmax_backward(NULL, &A, &Bt, &Ct) == ATTN_E_INVALID, "softmax NULL ctx");
    BAD(attn_softmax_backward(ctx, &A, &A5, &Ct), ATTN_E_SHAPE);
    MSG_HAS("[2, 3, 3]"); MSG_HAS("[2, 3, 4]"); MSG_HAS("dy");
    BAD(attn_softmax_backward(ctx, &A, &Bt, &A5), ATTN_E_SHAPE);
    BAD(attn_softmax_backward(ctx, &N, &Bt, &Ct), ATTN_E_INVALID);
    BAD(attn_softmax_backward(ctx, NULL, &Bt, &Ct), ATTN_E_INVALID);
    BAD(attn_softmax_backward(ctx, &I, &Bt, &Ct), ATTN_E_DTYPE);
    BAD(attn_softmax_backward(ctx, &Z, &Bt, &Ct), ATTN_E_SHAPE);
    BAD(attn_softmax_backward(ctx, &Huge, &Bt, &Ct), ATTN_E_OVERFLOW);
    b[5] = NAN;
    BAD(attn_softmax_backward(ctx, &A, &Bt, &Ct), ATTN_E_NONFINITE);
    b[5] = INFINITY;
    BAD(attn_softmax_backward(ctx, &A, &Bt, &Ct), ATTN_E_NONFINITE);
    b[5] = 0;

    /* linear: x [2,3,4], W [5,4], dy [2,3,5] */
    attn_tensor W = attn_view2(e, 5, 4), DY = attn_view3(f, 2, 3, 5), DW = attn_view2(e + 20, 5, 4),
                DB = attn_view1(e + 40, 5), DX = attn_view3(c, 2, 3, 4);
    float xcopy[24];
    memcpy(xcopy, a, sizeof xcopy);
    attn_tensor X = attn_view3(xcopy, 2, 3, 4);
    TU_CHECK(attn_linear_backward(NULL, &X, &W, &DY, &DX, &DW, &DB) == ATTN_E_INVALID, "linear NULL ctx");
    TU_STATUS(attn_linear_backward(ctx, &X, &W, &DY, &DX, &DW, &DB), ATTN_OK, ctx);
    attn_tensor W3 = attn_view2(e, 5, 3), DY4 = attn_view3(f, 2, 3, 4), DW2 = attn_view2(e + 20, 4, 5), DB4 = attn_view1(e + 40, 4);
    BAD(attn_linear_backward(ctx, &X, &W3, &DY, &DX, &DW, &DB), ATTN_E_SHAPE);
    MSG_HAS("[2, 3, 4]"); MSG_HAS("[5, 3]");
    BAD(attn_linear_backward(ctx, &X, &W, &DY4, &DX, &DW, &DB), ATTN_E_SHAPE);
    MSG_HAS("dy");
    BAD(attn_linear_backward(ctx, &X, &W, &DY, &A5, &DW, &DB), ATTN_E_SHAPE);
    BAD(attn_linear_backward(ctx, &X, &W, &DY, &DX, &DW2, &DB), ATTN_E_SHAPE);
    MSG_HAS("dW"); MSG_HAS("[4, 5]"); MSG_HAS("[5, 4]");
    BAD(attn_linear_backward(ctx, &X, &W, &DY, &DX, &DW, &DB4), ATTN_E_SHAPE);
    BAD(attn_linear_backward(ctx, &X, NULL, &DY, &DX, &DW, &DB), ATTN_E_INVALID);
    BAD(attn_linear_backward(ctx, &I, &W, &DY, &DX, &DW, &DB), ATTN_E_DTYPE);
    BAD(attn_linear_backward(ctx, &Z, &W, &DY, &DX, &DW, &DB), ATTN_E_SHAPE);
    BAD(attn_linear_backward(ctx, &X, &W, &DY, &DY, &DW, &DB), ATTN_E_SHAPE); /* dx shaped as dy */
    e[3] = NAN;
    BAD(attn_linear_backward(ctx, &X, &W, &DY, &DX, NULL, NULL), ATTN_E_NONFINITE);
    e[3] = 0;
    attn_tensor DYsame = attn_view3(f, 2, 3, 4), Wsq = attn_view2(e, 4, 4);
    BAD(attn_linear_backward(ctx, &X, &Wsq, &DYsame, &DYsame, NULL, NULL), ATTN_E_INVALID); /* dx aliases dy */

    /* layer norm */
    attn_tensor LW = attn_view1(e, 4), LW5 = attn_view1(e, 5);
    TU_CHECK(attn_layer_norm_backward(NULL, &A, &LW, 1e-5f, &Bt, &Ct, NULL, NULL) == ATTN_E_INVALID, "ln NULL ctx");
    BAD(attn_layer_norm_backward(ctx, &A, &LW5, 1e-5f, &Bt, &Ct, NULL, NULL), ATTN_E_SHAPE);
    MSG_HAS("weight"); MSG_HAS("[5]"); MSG_HAS("[4]");
    BAD(attn_layer_norm_backward(ctx, &A, &LW, 0.0f, &Bt, &Ct, NULL, NULL), ATTN_E_INVALID);
    BAD(attn_layer_norm_backward(ctx, &A, &LW, NAN, &Bt, &Ct, NULL, NULL), ATTN_E_INVALID);
    BAD(attn_layer_norm_backward(ctx, &A, &LW, 1e-5f, &A5, &Ct, NULL, NULL), ATTN_E_SHAPE);
    BAD(attn_layer_norm_backward(ctx, &A, &LW, 1e-5f, &Bt, &Ct, &LW5, NULL), ATTN_E_SHAPE);
    BAD(attn_layer_norm_backward(ctx, &A, &LW, 1e-5f, &Bt, &Ct, NULL, &LW5), ATTN_E_SHAPE);
    BAD(attn_layer_norm_backward(ctx, &N, &LW, 1e-5f, &Bt, &Ct, NULL, NULL), ATTN_E_INVALID);
    BAD(attn_layer_norm_backward(ctx, &Huge, &LW, 1e-5f, &Bt, &Ct, NULL, NULL), ATTN_E_OVERFLOW);
    a[0] = -INFINITY;
    BAD(attn_layer_norm_backward(ctx, &A, &LW, 1e-5f, &Bt, &Ct, NULL, NULL), ATTN_E_NONFINITE);
    a[0] = 0;

    /* activation */
    TU_CHECK(attn_activate_backward(NULL, ATTN_ACT_GELU, &A, &Bt, &Ct) == ATTN_E_INVALID, "act NULL ctx");
    BAD(attn_activate_backward(ctx, (attn_activation)9, &A, &Bt, &Ct), ATTN_E_INVALID);
    BAD(attn_activate_backward(ctx, ATTN_ACT_GELU, &A, &A5, &Ct), ATTN_E_SHAPE);
    MSG_HAS("[2, 3, 3]");
    BAD(attn_activate_backward(ctx, ATTN_ACT_GELU, &A, &Bt, &A5), ATTN_E_SHAPE);
    BAD(attn_activate_backward(ctx, ATTN_ACT_GELU, &I, &Bt, &Ct), ATTN_E_DTYPE);
    BAD(attn_activate_backward(ctx, ATTN_ACT_GELU, &Z, &Bt, &Ct), ATTN_E_SHAPE);
    b[1] = NAN;
    BAD(attn_activate_backward(ctx, ATTN_ACT_RELU, &A, &Bt, &Ct), ATTN_E_NONFINITE);
    b[1] = 0;

    /* embedding: ids [2, 3] in [0, 5), dout [2, 3, 4], dtable [5, 4] */
    int64_t ids[6] = {0, 1, 2, 3, 4, 0}, ish[2] = {2, 3};
    attn_tensor IDS = attn_tensor_make(ids, ATTN_I64, 2, ish), DT = attn_view2(e, 5, 4), DT3 = attn_view2(e, 5, 3);
    TU_CHECK(attn_embedding_backward(NULL, &IDS, &A, &DT) == ATTN_E_INVALID, "emb NULL ctx");
    TU_STATUS(attn_embedding_backward(ctx, &IDS, &A, &DT), ATTN_OK, ctx);
    BAD(attn_embedding_backward(ctx, &IDS, &A, &DT3), ATTN_E_SHAPE);
    MSG_HAS("[5, 3]"); MSG_HAS("[2, 3, 4]");
    attn_tensor A24 = attn_view2(a, 2, 4);
    BAD(attn_embedding_backward(ctx, &IDS, &A24, &DT), ATTN_E_SHAPE);
    ids[4] = 5;
    BAD(attn_embedding_backward(ctx, &IDS, &A, &DT), ATTN_E_INVALID);
    MSG_HAS("5");
    ids[4] = -1;
    BAD(attn_embedding_backward(ctx, &IDS, &A, &DT), ATTN_E_INVALID);
    MSG_HAS("-1");
    ids[4] = 4;
    attn_tensor IDF = IDS;
    IDF.dtype = ATTN_F32;
    BAD(attn_embedding_backward(ctx, &IDF, &A, &DT), ATTN_E_DTYPE);
    BAD(attn_embedding_backward(ctx, NULL, &A, &DT), ATTN_E_INVALID);
    a[2] = NAN;
    BAD(attn_embedding_backward(ctx, &IDS, &A, &DT), ATTN_E_NONFINITE);
    a[2] = 0;

    /* positional: dout [2, 3, 4] */
    attn_tensor PX = attn_view3(c, 2, 3, 4), PE = attn_view2(d, 3, 4), PE2 = attn_view2(d, 2, 4),
                PX3 = attn_view3(c, 2, 3, 3), PE1 = attn_view2(d, 3, 1), PE2c = attn_view2(d, 3, 2);
    TU_CHECK(attn_positional_apply_backward(NULL, ATTN_PE_ADD, &A, &PX, &PE) == ATTN_E_INVALID, "pe NULL ctx");
    TU_STATUS(attn_positional_apply_backward(ctx, ATTN_PE_ADD, &A, &PX, &PE), ATTN_OK, ctx);
    BAD(attn_positional_apply_backward(ctx, (attn_pe_mode)7, &A, &PX, &PE), ATTN_E_INVALID);
    BAD(attn_positional_apply_backward(ctx, ATTN_PE_ADD, &A, &PX, &PE2), ATTN_E_SHAPE); /* too few rows */
    MSG_HAS("[2, 4]");
    BAD(attn_positional_apply_backward(ctx, ATTN_PE_ADD, &A, &PX3, &PE), ATTN_E_SHAPE);
    BAD(attn_positional_apply_backward(ctx, ATTN_PE_CONCAT, &A, &PX3, &PE2c), ATTN_E_SHAPE); /* 3 + 2 != 4 */
    MSG_HAS("[2, 3, 3]"); MSG_HAS("[3, 2]");
    TU_STATUS(attn_positional_apply_backward(ctx, ATTN_PE_CONCAT, &A, &PX3, &PE1), ATTN_OK, ctx);
    BAD(attn_positional_apply_backward(ctx, ATTN_PE_CONCAT, &A, &PX, NULL), ATTN_E_SHAPE); /* no room for pe */
    BAD(attn_positional_apply_backward(ctx, ATTN_PE_ADD, &A5, &PX, &PE), ATTN_E_SHAPE);
    BAD(attn_positional_apply_backward(ctx, ATTN_PE_ADD, &N, &PX, &PE), ATTN_E_INVALID);
    a[7] = NAN;
    BAD(attn_positional_apply_backward(ctx, ATTN_PE_ADD, &A, &PX, &PE), ATTN_E_NONFINITE);
    a[7] = 0;

    /* simplified self-attention */
    TU_CHECK(attn_simple_self_attention_backward(NULL, &A, ATTN_NORM_SOFTMAX, &Bt, &Ct) == ATTN_E_INVALID, "ssa NULL ctx");
    BAD(attn_simple_self_attention_backward(ctx, &A, (attn_normalize)4, &Bt, &Ct), ATTN_E_INVALID);
    BAD(attn_simple_self_attention_backward(ctx, &A, ATTN_NORM_SOFTMAX, &A5, &Ct), ATTN_E_SHAPE);
    MSG_HAS("dcontext"); MSG_HAS("[2, 3, 3]"); MSG_HAS("[2, 3, 4]");
    BAD(attn_simple_self_attention_backward(ctx, &A, ATTN_NORM_SOFTMAX, &Bt, &A5), ATTN_E_SHAPE);
    BAD(attn_simple_self_attention_backward(ctx, &A24, ATTN_NORM_SOFTMAX, &Bt, &Ct), ATTN_E_SHAPE);
    BAD(attn_simple_self_attention_backward(ctx, &I, ATTN_NORM_SOFTMAX, &Bt, &Ct), ATTN_E_DTYPE);
    BAD(attn_simple_self_attention_backward(ctx, &Z, ATTN_NORM_SOFTMAX, &Bt, &Ct), ATTN_E_SHAPE);
    b[0] = INFINITY;
    BAD(attn_simple_self_attention_backward(ctx, &A, ATTN_NORM_SOFTMAX, &Bt, &Ct), ATTN_E_NONFINITE);
    b[0] = 0;

    /* sdpa: q [1, 2, 3, 4], k/v [1, 2, 5, 4] */
    float q[24], k[40], v[40], o[24], g[24], dq[24], dk[40], dv[40], mk[20], dmk[15];
    tu_fill(q, 24, 11, -1, 1), tu_fill(k, 40, 12, -1, 1), tu_fill(v, 40, 13, -1, 1), tu_fill(g, 24, 14, -1, 1);
    tu_fill(mk, 20, 15, -1, 1);
    attn_tensor Q = attn_view4(q, 1, 2, 3, 4), K = attn_view4(k, 1, 2, 5, 4), Vt = attn_view4(v, 1, 2, 5, 4),
                G = attn_view4(g, 1, 2, 3, 4), DQ = attn_view4(dq, 1, 2, 3, 4), DK = attn_view4(dk, 1, 2, 5, 4),
                DV = attn_view4(dv, 1, 2, 5, 4), DM = attn_view2(dmk, 3, 5), DM4 = attn_view2(dmk, 3, 4);
    int64_t msh[2] = {3, 5};
    attn_mask M = {ATTN_MASK_ADD, attn_tensor_make(mk, ATTN_F32, 2, msh)};
    unsigned char mb[15];
    memset(mb, 1, sizeof mb);
    attn_mask MB = {ATTN_MASK_KEEP, attn_tensor_make(mb, ATTN_BOOL, 2, msh)};
    TU_CHECK(attn_sdpa_backward(NULL, &Q, &K, &Vt, &M, NULL, &G, &DQ, &DK, &DV, &DM) == ATTN_E_INVALID, "sdpa NULL ctx");
    TU_STATUS(attn_sdpa_backward(ctx, &Q, &K, &Vt, &M, NULL, &G, &DQ, &DK, &DV, &DM), ATTN_OK, ctx);
    TU_STATUS(attn_sdpa_backward(ctx, &Q, &K, &Vt, &M, NULL, &G, NULL, NULL, NULL, NULL), ATTN_OK, ctx);
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, &M, NULL, &G, &DQ, &DK, &DV, &DM4), ATTN_E_SHAPE);
    MSG_HAS("dmask"); MSG_HAS("[3, 4]"); MSG_HAS("[3, 5]");
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, &MB, NULL, &G, &DQ, &DK, &DV, &DM), ATTN_E_INVALID);
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, NULL, &G, &DQ, &DK, &DV, &DM), ATTN_E_INVALID);
    attn_tensor G5 = attn_view4(g, 1, 2, 3, 3), DQ5 = attn_view4(dq, 1, 2, 3, 3), DK5 = attn_view4(dk, 1, 2, 4, 4),
                DV5 = attn_view4(dv, 1, 1, 5, 4), K3 = attn_view4(k, 1, 2, 5, 3);
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, NULL, &G5, &DQ, &DK, &DV, NULL), ATTN_E_SHAPE);
    MSG_HAS("dout"); MSG_HAS("[1, 2, 3, 3]"); MSG_HAS("[1, 2, 3, 4]");
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, NULL, &G, &DQ5, &DK, &DV, NULL), ATTN_E_SHAPE);
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, NULL, &G, &DQ, &DK5, &DV, NULL), ATTN_E_SHAPE);
    MSG_HAS("dk");
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, NULL, &G, &DQ, &DK, &DV5, NULL), ATTN_E_SHAPE);
    BAD(attn_sdpa_backward(ctx, &Q, &K3, &Vt, NULL, NULL, &G, &DQ, &DK, &DV, NULL), ATTN_E_SHAPE);
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, NULL, NULL, &DQ, &DK, &DV, NULL), ATTN_E_INVALID);
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.dropout_p = 1.0f;
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, &opt, &G, &DQ, &DK, &DV, NULL), ATTN_E_INVALID);
    opt.dropout_p = 0, opt.causal = (attn_causal)3;
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, &opt, &G, &DQ, &DK, &DV, NULL), ATTN_E_INVALID);
    opt.causal = 0, opt.scale = INFINITY;
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, &opt, &G, &DQ, &DK, &DV, NULL), ATTN_E_INVALID);
    attn_tensor Qi = Q, Qz = attn_view4(q, 1, 0, 3, 4), Qh = attn_view4(q, INT64_MAX / 8, 2, 3, 4);
    Qi.dtype = ATTN_F64;
    BAD(attn_sdpa_backward(ctx, &Qi, &K, &Vt, NULL, NULL, &G, &DQ, &DK, &DV, NULL), ATTN_E_DTYPE);
    BAD(attn_sdpa_backward(ctx, &Qz, &K, &Vt, NULL, NULL, &G, &DQ, &DK, &DV, NULL), ATTN_E_SHAPE);
    BAD(attn_sdpa_backward(ctx, &Qh, &K, &Vt, NULL, NULL, &G, &DQ, &DK, &DV, NULL), ATTN_E_OVERFLOW);
    g[3] = NAN;
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, NULL, NULL, &G, &DQ, &DK, &DV, NULL), ATTN_E_NONFINITE);
    g[3] = 0;
    mk[4] = NAN;
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, &M, NULL, &G, &DQ, &DK, &DV, &DM), ATTN_E_NONFINITE);
    mk[4] = -INFINITY; /* -inf is allowed in an additive mask */
    TU_STATUS(attn_sdpa_backward(ctx, &Q, &K, &Vt, &M, NULL, &G, &DQ, &DK, &DV, &DM), ATTN_OK, ctx);
    int64_t mbad[2] = {4, 5};
    attn_mask MBad = {ATTN_MASK_ADD, attn_tensor_make(mk, ATTN_F32, 2, mbad)};
    BAD(attn_sdpa_backward(ctx, &Q, &K, &Vt, &MBad, NULL, &G, &DQ, &DK, &DV, NULL), ATTN_E_BROADCAST);
    (void)o;

    /* cross-entropy: logits [3, 4] */
    int64_t tg[3] = {0, 3, -100}, n3 = 3, n2 = 2;
    float loss;
    attn_tensor LG = attn_view2(e, 3, 4), T = attn_tensor_make(tg, ATTN_I64, 1, &n3), T2 = attn_tensor_make(tg, ATTN_I64, 1, &n2),
                DL = attn_view2(f, 3, 4), DL5 = attn_view2(f, 3, 5);
    TU_CHECK(attn_cross_entropy(NULL, &LG, &T, -100, 0, &loss, &DL) == ATTN_E_INVALID, "ce NULL ctx");
    TU_STATUS(attn_cross_entropy(ctx, &LG, &T, -100, 0, &loss, &DL), ATTN_OK, ctx);
    TU_STATUS(attn_cross_entropy(ctx, &LG, &T, -100, 0, &loss, NULL), ATTN_OK, ctx);
    BAD(attn_cross_entropy(ctx, &LG, &T, -100, 0, NULL, &DL), ATTN_E_INVALID);
    BAD(attn_cross_entropy(ctx, &LG, &T2, -100, 0, &loss, &DL), ATTN_E_SHAPE);
    MSG_HAS("[2]"); MSG_HAS("[3]");
    BAD(attn_cross_entropy(ctx, &LG, &T, -100, 0, &loss, &DL5), ATTN_E_SHAPE);
    BAD(attn_cross_entropy(ctx, &LG, &T, -100, 1.0f, &loss, &DL), ATTN_E_INVALID);
    BAD(attn_cross_entropy(ctx, &LG, &T, -100, -0.1f, &loss, &DL), ATTN_E_INVALID);
    BAD(attn_cross_entropy(ctx, &LG, &T, -100, NAN, &loss, &DL), ATTN_E_INVALID);
    tg[1] = 4;
    BAD(attn_cross_entropy(ctx, &LG, &T, -100, 0, &loss, &DL), ATTN_E_INVALID);
    MSG_HAS("4");
    tg[1] = -3;
    BAD(attn_cross_entropy(ctx, &LG, &T, -100, 0, &loss, &DL), ATTN_E_INVALID);
    MSG_HAS("-3");
    tg[1] = 3;
    BAD(attn_cross_entropy(ctx, &LG, &T, 7, 0, &loss, &DL), ATTN_E_INVALID); /* -100 is now a target */
    attn_tensor TF = T;
    TF.dtype = ATTN_F32;
    BAD(attn_cross_entropy(ctx, &LG, &TF, -100, 0, &loss, &DL), ATTN_E_DTYPE);
    BAD(attn_cross_entropy(ctx, &LG, NULL, -100, 0, &loss, &DL), ATTN_E_INVALID);
    attn_tensor LG3 = attn_view3(e, 1, 3, 4);
    BAD(attn_cross_entropy(ctx, &LG3, &T, -100, 0, &loss, &DL), ATTN_E_SHAPE);
    e[1] = NAN;
    BAD(attn_cross_entropy(ctx, &LG, &T, -100, 0, &loss, &DL), ATTN_E_NONFINITE);
    e[1] = 0;

    /* with the finite check off, NaN goes through */
    attn_ctx *c2;
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.flags = ATTN_CTX_NO_FINITE_CHECK;
    if (attn_ctx_create(&p, &c2) == ATTN_OK) {
        b[0] = NAN;
        TU_STATUS(attn_activate_backward(c2, ATTN_ACT_TANH, &A, &Bt, &Ct), ATTN_OK, c2);
        b[0] = 0;
        attn_ctx_free(c2);
    }
    /* a fixed workspace that is too small */
    unsigned char wsmem[256];
    memset(&p, 0, sizeof p);
    p.workspace = wsmem, p.workspace_size = sizeof wsmem;
    if (attn_ctx_create(&p, &c2) == ATTN_OK) {
        static float big[40 * 40], bdy[40 * 40], bdx[40 * 40];
        tu_fill(big, 40 * 40, 1, -1, 1), tu_fill(bdy, 40 * 40, 2, -1, 1);
        attn_tensor BX = attn_view2(big, 40, 40), BDY = attn_view2(bdy, 40, 40), BDX = attn_view2(bdx, 40, 40);
        BX.stride[0] = 1, BX.stride[1] = 40; /* transposed: copied into the workspace */
        TU_STATUS(attn_softmax_backward(c2, &BX, &BDY, &BDX), ATTN_E_WORKSPACE, c2);
        attn_ctx_free(c2);
    }
}

int main(void) {
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    test_linear();
    test_activations();
    test_layer_norm();
    test_softmax();
    test_sdpa();
    test_simple_attention();
    test_embedding();
    test_positional();
    test_cross_entropy();
    bad_inputs();
    attn_ctx_free(ctx);
    printf("%-22s %14s %14s\n", "op", "FD rel err", "f32 rel err");
    for (int i = 0; i < nstats; i++) printf("%-22s %14.3g %14.3g\n", stats[i].op, stats[i].fd, stats[i].f32);
    return tu_finish("test_backward");
}
