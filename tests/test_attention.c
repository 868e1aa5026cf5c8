/* The one attention module (attn__attention, src/layers/attention.c) in each of its
 * configurations, against a plain double reference written here: nn.MultiheadAttention's
 * stacked projection with biases, cross attention with kdim/vdim and bias_k/bias_v/zero_attn,
 * the Llama form with grouped-query heads and RoPE (HF and interleaved layouts, a local table),
 * a sliding window, a soft cap and a scale, multi-query heads with QK-norm, and a KV cache (F32
 * and BF16) against the forward without one (QK-norm's backward included).
 *
 * Forward: within 2e-5 of max(1, max|ref|) (float sums in another order).  Backward: every
 * gradient (the input or inputs, every weight and bias, bias_k/bias_v) along random directions
 * u against the central difference of the reference's loss sum(dout * out) in double
 * (step 1e-3, its error ~1e-9): |<grad, u> - fd| <= 1e-4 (sum |grad_i u_i| + 1e-6); a dropped
 * term (a bias's gradient, one of the three summed input gradients, RoPE's transpose, the
 * window or cap in the backward) is off by far more.  1 and 2 threads give the same bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/layers/llm.h"
#include "testutil.h"

typedef struct cfg {
    const char *name;
    int mha; /* nn.MultiheadAttention's form (attn__attention_mha_bind / separate q, k, v) */
    int64_t E, H, Hkv, D, kdim, vdim;
    int self, stacked, bias, bias_kv, zero_attn;
    int rope, interleaved, local, qk_norm;
    int64_t window;
    float softcap, scale;
    int64_t B, L, S;
} cfg;

/* the parameters, in one arena (gradients found by address) */
enum { P_Q, P_K, P_V, P_O, P_BQ, P_BK, P_BV, P_BO, P_BIASK, P_BIASV, P_QN, P_KN, P_N };
typedef struct params {
    int64_t off[P_N], len[P_N], total;
} params;

static void layout(const cfg *c, params *p) {
    const int64_t HD = c->H * c->D, KD = c->Hkv * c->D;
    const int64_t len[P_N] = {HD * c->E,           KD * c->kdim,          KD * c->vdim,
                              c->E * HD,           c->bias ? HD : 0,      c->bias ? KD : 0,
                              c->bias ? KD : 0,    c->bias ? c->E : 0,    c->bias_kv ? KD : 0,
                              c->bias_kv ? KD : 0, c->qk_norm ? c->D : 0, c->qk_norm ? c->D : 0};
    p->total = 0;
    for (int i = 0; i < P_N; i++)
        p->off[i] = p->total, p->len[i] = len[i], p->total += len[i];
}

static void rng_fill(float *x, int64_t n, unsigned *s, float a) {
    for (int64_t i = 0; i < n; i++) {
        *s = *s * 1664525u + 1013904223u;
        x[i] = a * ((float)(*s >> 8) / 8388608.0f - 1.0f);
    }
}

/* max(a, b) that keeps a NaN (fmax drops it): a NaN anywhere fails the check */
static double nanmax(double a, double b) { return a != a || b != b ? NAN : a > b ? a : b; }

/* ---- the double reference ------------------------------------------------------------------ */
typedef struct refin {
    const double *x, *key, *value; /* [B L, E], [B S, kdim], [B S, vdim] */
    const double *P;               /* the parameters as laid out */
    const float *cs, *sn;          /* RoPE table [B L, D/2] */
} refin;

static void proj(const double *x, int64_t M, int64_t K, const double *W, const double *b, int64_t N,
                 double *y) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = b ? b[n] : 0;
            for (int64_t k = 0; k < K; k++)
                s += x[m * K + k] * W[n * K + k];
            y[m * N + n] = s;
        }
}

static void qknorm(double *x, int64_t rows, int64_t nh, int64_t D, const double *w) {
    for (int64_t r = 0; r < rows * nh; r++) {
        double *h = x + r * D, ss = 0;
        for (int64_t d = 0; d < D; d++)
            ss += h[d] * h[d];
        const double inv = 1.0 / sqrt(ss / (double)D + 1e-6);
        for (int64_t d = 0; d < D; d++)
            h[d] = h[d] * inv * w[d];
    }
}

static void rope(double *x, int64_t rows, int64_t nh, int64_t D, const float *cs, const float *sn,
                 int inter) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < nh; h++) {
            double *v = x + (r * nh + h) * D;
            for (int64_t i = 0; i < D / 2; i++) {
                const int64_t a = inter ? 2 * i : i, b = inter ? 2 * i + 1 : i + D / 2;
                const double c = cs[r * D / 2 + i], s = sn[r * D / 2 + i], x1 = v[a], x2 = v[b];
                v[a] = x1 * c - x2 * s, v[b] = x2 * c + x1 * s;
            }
        }
}

/* out [B L, E] */
static void ref_fwd(const cfg *c, const params *p, const refin *in, double *out) {
    const int64_t B = c->B, L = c->L, S = c->S, E = c->E, H = c->H, Hkv = c->Hkv, D = c->D;
    const int64_t HD = H * D, KD = Hkv * D, Sx = S + c->bias_kv + c->zero_attn;
    const double *P = in->P;
#define PP(i) (p->len[i] ? P + p->off[i] : NULL)
    double *q = malloc(sizeof(double) * B * L * HD), *k = calloc(B * Sx * KD, sizeof(double)),
           *v = calloc(B * Sx * KD, sizeof(double)), *kk = malloc(sizeof(double) * S * KD),
           *ao = malloc(sizeof(double) * B * L * HD), *sc = malloc(sizeof(double) * Sx);
    proj(in->x, B * L, E, PP(P_Q), PP(P_BQ), HD, q);
    for (int64_t b = 0; b < B; b++) {
        proj(in->key + b * S * c->kdim, S, c->kdim, PP(P_K), PP(P_BK), KD, kk);
        memcpy(k + b * Sx * KD, kk, sizeof(double) * S * KD);
        proj(in->value + b * S * c->vdim, S, c->vdim, PP(P_V), PP(P_BV), KD, kk);
        memcpy(v + b * Sx * KD, kk, sizeof(double) * S * KD);
        if (c->bias_kv) {
            memcpy(k + (b * Sx + S) * KD, PP(P_BIASK), sizeof(double) * KD);
            memcpy(v + (b * Sx + S) * KD, PP(P_BIASV), sizeof(double) * KD);
        }
    }
    if (c->qk_norm) {
        qknorm(q, B * L, H, D, PP(P_QN));
        qknorm(k, B * S, Hkv, D, PP(P_KN)); /* self-attention: Sx = S */
    }
    if (c->rope) {
        rope(q, B * L, H, D, in->cs, in->sn, c->interleaved);
        rope(k, B * S, Hkv, D, in->cs, in->sn, c->interleaved);
    }
    const double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) {
                const int64_t g = h / (H / Hkv);
                const double *qi = q + (b * L + i) * HD + h * D;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < Sx; j++) {
                    const int vis = !c->rope || (j <= i && (c->window <= 0 || j > i - c->window));
                    double s = -INFINITY;
                    if (vis) {
                        s = 0;
                        for (int64_t d = 0; d < D; d++)
                            s += qi[d] * k[(b * Sx + j) * KD + g * D + d];
                        s *= scale;
                        if (c->softcap > 0)
                            s = c->softcap * tanh(s / c->softcap);
                    }
                    sc[j] = s;
                    if (s > mx)
                        mx = s;
                }
                for (int64_t j = 0; j < Sx; j++)
                    sc[j] = exp(sc[j] - mx), sum += sc[j];
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < Sx; j++)
                        o += sc[j] * v[(b * Sx + j) * KD + g * D + d];
                    ao[(b * L + i) * HD + h * D + d] = o / sum;
                }
            }
    proj(ao, B * L, HD, PP(P_O), PP(P_BO), E, out);
#undef PP
    free(q), free(k), free(v), free(kk), free(ao), free(sc);
}

/* ---- the module ---------------------------------------------------------------------------- */
static void make(const cfg *c, const params *p, float *arena, attn__attention *a) {
    const int64_t E = c->E, HD = c->H * c->D, KD = c->Hkv * c->D;
#define AP(i) (p->len[i] ? arena + p->off[i] : NULL)
    if (c->mha) {
        memset(a, 0, sizeof *a);
        a->E = E, a->H = a->Hkv = c->H, a->D = c->D, a->kdim = c->kdim, a->vdim = c->vdim;
    } else {
        attn__attention_llama(a, E, c->H, c->Hkv, c->D);
        a->rope = c->rope, a->rope_interleaved = c->interleaved, a->rope_local = c->local;
    }
    a->q = attn__weight_f32(AP(P_Q), AP(P_BQ), HD, E);
    a->k = attn__weight_f32(AP(P_K), AP(P_BK), KD, c->kdim);
    a->v = attn__weight_f32(AP(P_V), AP(P_BV), KD, c->vdim);
    a->o = attn__weight_f32(AP(P_O), AP(P_BO), E, HD);
    a->bias_k = AP(P_BIASK), a->bias_v = AP(P_BIASV), a->zero_attn = c->zero_attn;
    a->q_norm = AP(P_QN), a->k_norm = AP(P_KN), a->eps = 1e-6f;
    a->window = c->window, a->softcap = c->softcap, a->scale = c->scale;
    if (c->stacked) /* q, k, v and their biases lie stacked in the arena (kdim = vdim = E) */
        a->qkv = attn__weight_f32(AP(P_Q), AP(P_BQ), HD + 2 * KD, E);
#undef AP
}

static double dot(const float *g, const double *u, int64_t n, double *mag) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += g[i] * u[i], *mag += fabs(g[i] * u[i]);
    return s;
}

static double loss(const cfg *c, const params *p, const refin *in, const float *dout) {
    const int64_t n = c->B * c->L * c->E;
    double *o = malloc(sizeof(double) * n), s = 0;
    ref_fwd(c, p, in, o);
    for (int64_t i = 0; i < n; i++)
        s += o[i] * dout[i];
    free(o);
    return s;
}

/* Checks <g, u> for a random u on the n doubles at t (a part of the reference's inputs). */
static void dir_check(const cfg *c, const params *p, refin *in, double *t, const float *g,
                      int64_t n, const float *dout, unsigned *s, const char *what) {
    if (!n)
        return;
    double *u = malloc(sizeof(double) * n), *t0 = malloc(sizeof(double) * n), mag = 0;
    float *uf = malloc(sizeof(float) * n);
    rng_fill(uf, n, s, 1.0f);
    for (int64_t i = 0; i < n; i++)
        u[i] = uf[i];
    memcpy(t0, t, sizeof(double) * n);
    const double h = 1e-3;
    for (int64_t i = 0; i < n; i++)
        t[i] = t0[i] + h * u[i];
    const double lp = loss(c, p, in, dout);
    for (int64_t i = 0; i < n; i++)
        t[i] = t0[i] - h * u[i];
    const double lm = loss(c, p, in, dout);
    memcpy(t, t0, sizeof(double) * n);
    const double fd = (lp - lm) / (2 * h), an = dot(g, u, n, &mag);
    TU_CHECK(fabs(an - fd) <= 1e-4 * mag + 1e-6, "%s: d/d%s along u: %.9g, difference %.9g",
             c->name, what, an, fd);
    free(u), free(t0), free(uf);
}

static double *to_d(const float *x, int64_t n) {
    double *d = malloc(sizeof(double) * (n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

typedef struct run_out {
    float *out, *dx, *dk, *dv, *grad;
} run_out;

/* The module's forward and backward on threads threads. */
static int run(const cfg *c, const params *p, const float *arena, const float *x, const float *key,
               const float *value, const float *dout, const attn__rope_cs *rc, int threads, int bwd,
               run_out *r) {
    attn_ctx_params cp = {0};
    cp.threads = threads;
    attn_ctx *ctx;
    if (!TU_STATUS(attn_ctx_create(&cp, &ctx), ATTN_OK, NULL))
        return 0;
    const int64_t B = c->B, L = c->L, S = c->S, E = c->E, HD = c->H * c->D, KD = c->Hkv * c->D;
    float *ar = malloc(sizeof(float) * p->total);
    memcpy(ar, arena, sizeof(float) * p->total);
    attn__attention a;
    make(c, p, ar, &a);
    r->out = calloc(B * L * E, sizeof(float));
    r->dx = calloc(B * L * E, sizeof(float)), r->dk = calloc(B * S * c->kdim, sizeof(float));
    r->dv = calloc(B * S * c->vdim, sizeof(float)), r->grad = calloc(p->total, sizeof(float));
    attn__attn_io io =
        attn__attn_io_mha(x, c->self ? x : key, c->self ? x : value, B, L, S, NULL, NULL, 0, NULL);
    if (c->rope)
        io = attn__attn_io_causal(x, B, L, rc, NULL);
    attn__mark mk = attn__ws_mark(ctx);
    attn__attn_saved rec;
    int ok =
        TU_STATUS(attn__attn_saved_alloc(ctx, NULL, &a, B, L, S, c->self, &rec), ATTN_OK, ctx) &&
        TU_STATUS(attn__attention_fwd(ctx, &a, &io, r->out, NULL, NULL, 0, &rec), ATTN_OK, ctx);
    if (ok && bwd) {
        attn__gmap g = {ar, r->grad};
        ok = TU_STATUS(attn__attention_bwd(ctx, &a, &g, &rec, &io, dout, c->self ? NULL : r->dx,
                                           c->self ? NULL : r->dk, c->self ? NULL : r->dv,
                                           c->self ? r->dx : NULL, NULL),
                       ATTN_OK, ctx);
    }
    attn__ws_release(ctx, mk);
    attn_ctx_free(ctx);
    free(ar);
    return ok;
}

static void run_free(run_out *r) {
    free(r->out), free(r->dx), free(r->dk), free(r->dv), free(r->grad);
}

static void check(cfg c) {
    params p;
    layout(&c, &p);
    const int64_t B = c.B, L = c.L, S = c.S, E = c.E, D = c.D, HD = c.H * D, KD = c.Hkv * D;
    unsigned s = 12345u + (unsigned)E * 7u + (unsigned)c.H;
    float *arena = malloc(sizeof(float) * p.total), *x = malloc(sizeof(float) * B * L * E);
    float *key = malloc(sizeof(float) * B * S * c.kdim),
          *value = malloc(sizeof(float) * B * S * c.vdim);
    float *dout = malloc(sizeof(float) * B * L * E);
    rng_fill(arena, p.total, &s, 0.4f);
    for (int64_t i = 0; i < p.len[P_QN] + p.len[P_KN]; i++)
        arena[p.off[P_QN] + i] += 1.0f;
    rng_fill(x, B * L * E, &s, 1.0f);
    rng_fill(key, B * S * c.kdim, &s, 1.0f);
    rng_fill(value, B * S * c.vdim, &s, 1.0f);
    rng_fill(dout, B * L * E, &s, 1.0f);
    /* RoPE rows of positions 0 .. L-1 in each sequence */
    float *cs = malloc(sizeof(float) * B * L * D / 2), *sn = malloc(sizeof(float) * B * L * D / 2);
    float *inv = malloc(sizeof(float) * D / 2);
    int64_t *pos = malloc(sizeof(int64_t) * B * L);
    for (int64_t i = 0; i < B * L; i++)
        pos[i] = i % L;
    attn__rope_inv_freq(c.local ? 10000.0f : 500.0f, D, inv);
    attn__rope_table(inv, D, pos, 0, B * L, cs, sn);
    /* with a local table the global one is garbage: using it shows */
    float *gcs = calloc(B * L * D / 2, sizeof(float)), *gsn = calloc(B * L * D / 2, sizeof(float));
    const attn__rope_cs rc =
        c.local ? (attn__rope_cs){gcs, gsn, cs, sn} : (attn__rope_cs){cs, sn, NULL, NULL};
    const int bwd = 1;
    run_out r1, r2;
    if (!run(&c, &p, arena, x, key, value, dout, &rc, 1, bwd, &r1) ||
        !run(&c, &p, arena, x, key, value, dout, &rc, 2, bwd, &r2))
        return;
    /* forward against the reference */
    double *P = to_d(arena, p.total), *xd = to_d(x, B * L * E), *kd = to_d(key, B * S * c.kdim),
           *vd = to_d(value, B * S * c.vdim), *ref = malloc(sizeof(double) * B * L * E);
    refin in = {xd, c.self ? xd : kd, c.self ? xd : vd, P, cs, sn};
    ref_fwd(&c, &p, &in, ref);
    double mx = 1, err = 0;
    for (int64_t i = 0; i < B * L * E; i++)
        mx = fmax(mx, fabs(ref[i]));
    for (int64_t i = 0; i < B * L * E; i++)
        err = nanmax(err, fabs(r1.out[i] - ref[i]) / mx);
    TU_CHECK(err <= 2e-5, "%s: forward within %.3g of the reference", c.name, err);
    TU_CHECK(!memcmp(r1.out, r2.out, sizeof(float) * B * L * E), "%s: 1 and 2 threads", c.name);
    if (bwd) {
        TU_CHECK(!memcmp(r1.dx, r2.dx, sizeof(float) * B * L * E) &&
                     !memcmp(r1.grad, r2.grad, sizeof(float) * p.total),
                 "%s: the backward on 1 and 2 threads", c.name);
        static const char *const pn[P_N] = {"Wq", "Wk", "Wv",     "Wo",     "bq", "bk",
                                            "bv", "bo", "bias_k", "bias_v", "qn", "kn"};
        for (int i = 0; i < P_N; i++)
            dir_check(&c, &p, &in, P + p.off[i], r1.grad + p.off[i], p.len[i], dout, &s, pn[i]);
        dir_check(&c, &p, &in, xd, r1.dx, B * L * E, dout, &s, c.self ? "x" : "query");
        if (!c.self) {
            dir_check(&c, &p, &in, kd, r1.dk, B * S * c.kdim, dout, &s, "key");
            dir_check(&c, &p, &in, vd, r1.dv, B * S * c.vdim, dout, &s, "value");
        }
    }
    free(P), free(xd), free(kd), free(vd), free(ref);
    run_free(&r1), run_free(&r2);
    free(arena), free(x), free(key), free(value), free(dout), free(cs), free(sn), free(inv),
        free(pos), free(gcs), free(gsn);
}

/* The forward over a KV cache (a prompt, then one token at a time) against the forward without
 * one. */
static void check_cache(attn_dtype dt) {
    const int64_t E = 32, H = 4, Hkv = 2, D = 8, T = 7, HD = H * D, KD = Hkv * D;
    unsigned s = 777u;
    float *w = malloc(sizeof(float) * (2 * HD * E + 2 * KD * E + 2 * D));
    rng_fill(w, 2 * HD * E + 2 * KD * E + 2 * D, &s, 0.4f);
    float *qn = w + 2 * HD * E + 2 * KD * E, *kn = qn + D;
    for (int64_t i = 0; i < 2 * D; i++)
        qn[i] += 1.0f;
    attn__attention a;
    attn__attention_llama(&a, E, H, Hkv, D);
    a.q = attn__weight_f32(w, NULL, HD, E), a.k = attn__weight_f32(w + HD * E, NULL, KD, E);
    a.v = attn__weight_f32(w + HD * E + KD * E, NULL, KD, E);
    a.o = attn__weight_f32(w + HD * E + 2 * KD * E, NULL, E, HD);
    a.q_norm = qn, a.k_norm = kn, a.eps = 1e-6f, a.window = 3, a.softcap = 4.0f;
    float x[7 * 32], full[7 * 32], inc[7 * 32], cs[7 * 4], sn[7 * 4], inv[4];
    rng_fill(x, T * E, &s, 1.0f);
    attn__rope_inv_freq(10000.0f, D, inv);
    attn__rope_table(inv, D, NULL, 0, T, cs, sn);
    attn_ctx *ctx;
    if (!TU_STATUS(attn_ctx_create(NULL, &ctx), ATTN_OK, NULL))
        return;
    const attn__rope_cs rc = {cs, sn, NULL, NULL};
    attn__attn_io io = attn__attn_io_causal(x, 1, T, &rc, NULL);
    TU_STATUS(attn__attention_fwd(ctx, &a, &io, full, NULL, NULL, 0, NULL), ATTN_OK, ctx);
    const size_t es = dt == ATTN_BF16 ? 2 : 4;
    void *kc = calloc(Hkv * 16 * D, es), *vc = calloc(Hkv * 16 * D, es);
    attn__kv kv = {dt, kc, vc, 16, 0};
    const int64_t at[4] = {0, 4, 5, 6}, n[4] = {4, 1, 1, 1}; /* a prompt of 4, then 3 tokens */
    for (int i = 0; i < 4; i++) {
        const attn__rope_cs r = {cs + at[i] * D / 2, sn + at[i] * D / 2, NULL, NULL};
        io = attn__attn_io_causal(x + at[i] * E, 1, n[i], &r, &kv);
        TU_STATUS(attn__attention_fwd(ctx, &a, &io, inc + at[i] * E, NULL, NULL, 0, NULL), ATTN_OK,
                  ctx);
        kv.pos += n[i];
    }
    double mx = 1, err = 0;
    for (int64_t i = 0; i < T * E; i++)
        mx = fmax(mx, fabs(full[i]));
    for (int64_t i = 0; i < T * E; i++)
        err = nanmax(err, fabs(inc[i] - full[i]) / mx);
    const double tol = dt == ATTN_BF16 ? 2e-2 : 2e-6;
    TU_CHECK(err <= tol,
             "KV cache (%s): prompt then single tokens within %.3g of the forward "
             "without a cache (tolerance %.0e)",
             attn_dtype_name(dt), err, tol);
    attn_ctx_free(ctx);
    free(w), free(kc), free(vc);
}

int main(void) {
    // clang-format off
    /*   name                         mha  E   H  Hkv D  kdim vdim self stk bias bkv zero rope int loc qkn win cap scale B  L  S */
    const cfg cases[] = {
        {"mha self, stacked", 1, 24, 4, 4, 6, 24, 24, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 5, 5},
        {"mha cross, kdim/vdim, bias_k/v, zero", 1, 24, 4, 4, 6, 10, 14, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 2, 4, 6},
        {"mha self, bias_k/v (three summed)", 1, 24, 3, 3, 8, 24, 24, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 5, 5},
        {"gqa rope, biases, T 6", 0, 32, 4, 2, 8, 32, 32, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 2, 6, 6},
        {"gqa rope, T 11 (GEMM)", 0, 32, 4, 2, 8, 32, 32, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 2, 11, 11},
        {"gqa interleaved, local table, window 3, cap 5, scale 0.2", 0, 32, 4, 2, 8, 32, 32, 1, 0, 1, 0, 0, 1, 1, 1, 0, 3, 5.0f, 0.2f, 2, 10, 10},
        {"mqa qk-norm", 0, 32, 4, 1, 8, 32, 32, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 9, 9},
    };
    // clang-format on
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check(cases[i]);
    check_cache(ATTN_F32);
    check_cache(ATTN_BF16);
    return tu_finish("test_attention");
}
