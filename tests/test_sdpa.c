/* attn_sdpa against an independent naive implementation in double precision (written here,
 * materialising the whole score matrix), on random shapes with every mask kind, GQA, both
 * causal alignments, strided views, lse, weights and dropout; and bad inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct {
    int64_t B, H, Hkv, L, S, D, Dv;
    int mask_kind;      /* 0 none, 1 keep, 2 block, 3 add */
    int mask_nd;        /* mask dims: shape is right-aligned subset of [B,H,L,S] */
    int mask_bcast[4];  /* 1 where the mask has size 1 */
    int causal;
    float scale;
} sdpa_case;

/* oracle: out[b,h,i,:] = sum_j softmax_j(scale q.k + mask) v; all-masked row -> 0, lse -inf */
static void oracle(const sdpa_case *c, const float *q, const float *k, const float *v,
                   const void *mask, const int64_t *ms, double *out, double *w, double *lse) {
    int64_t g = c->H / c->Hkv;
    double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->D);
    double *s = malloc(sizeof(double) * (size_t)c->S);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->L; i++) {
                double mx = -INFINITY;
                for (int64_t j = 0; j < c->S; j++) {
                    double acc = 0;
                    for (int64_t d = 0; d < c->D; d++)
                        acc += (double)q[((b * c->H + h) * c->L + i) * c->D + d] *
                               k[((b * c->Hkv + h / g) * c->S + j) * c->D + d];
                    acc *= scale;
                    int64_t idx[4] = {b, h, i, j};
                    int64_t off = 0;
                    for (int dd = 0; dd < 4; dd++) off += idx[dd] * ms[dd];
                    if (c->mask_kind == 1 && !((const unsigned char *)mask)[off]) acc = -INFINITY;
                    if (c->mask_kind == 2 && ((const unsigned char *)mask)[off]) acc = -INFINITY;
                    if (c->mask_kind == 3) acc += ((const float *)mask)[off];
                    if (c->causal == 1 && j > i) acc = -INFINITY;
                    if (c->causal == 2 && j > i + c->S - c->L) acc = -INFINITY;
                    s[j] = acc;
                    if (acc > mx) mx = acc;
                }
                double sum = 0;
                for (int64_t j = 0; j < c->S; j++) sum += mx == -INFINITY ? 0 : exp(s[j] - mx);
                int64_t row = (b * c->H + h) * c->L + i;
                lse[row] = mx == -INFINITY ? -INFINITY : mx + log(sum);
                for (int64_t j = 0; j < c->S; j++)
                    w[row * c->S + j] = mx == -INFINITY ? 0 : exp(s[j] - mx) / sum;
                for (int64_t e = 0; e < c->Dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < c->S; j++)
                        acc += w[row * c->S + j] * v[((b * c->Hkv + h / g) * c->S + j) * c->Dv + e];
                    out[row * c->Dv + e] = acc;
                }
            }
    free(s);
}

static float *to_f(const double *d, size_t n) {
    float *f = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) f[i] = (float)d[i];
    return f;
}

static void run_case(attn_ctx *ctx, const sdpa_case *c, uint64_t seed, int strided) {
    size_t nq = (size_t)(c->B * c->H * c->L * c->D), nk = (size_t)(c->B * c->Hkv * c->S * c->D),
           nv = (size_t)(c->B * c->Hkv * c->S * c->Dv), no = (size_t)(c->B * c->H * c->L * c->Dv),
           nw = (size_t)(c->B * c->H * c->L * c->S), nl = (size_t)(c->B * c->H * c->L);
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4);
    tu_fill(q, nq, seed, -2, 2);
    tu_fill(k, nk, seed + 1, -2, 2);
    tu_fill(v, nv, seed + 2, -1, 1);
    /* mask: shape from the case, right-aligned; strides for the oracle (0 on broadcast) */
    int64_t full[4] = {c->B, c->H, c->L, c->S}, mshape[4], ms[4] = {0, 0, 0, 0};
    int nd = c->mask_nd;
    int64_t mnumel = 1;
    for (int d = 0; d < nd; d++) {
        int fd = 4 - nd + d;
        mshape[d] = c->mask_bcast[fd] ? 1 : full[fd];
    }
    for (int d = nd - 1; d >= 0; d--) {
        int fd = 4 - nd + d;
        ms[fd] = mshape[d] == 1 ? 0 : mnumel;
        mnumel *= mshape[d];
    }
    void *mask = NULL;
    uint64_t st = seed * 7 + 3;
    if (c->mask_kind == 1 || c->mask_kind == 2) {
        unsigned char *m = malloc((size_t)mnumel);
        for (int64_t i = 0; i < mnumel; i++) m[i] = (tu_rand(&st) % 4) != 0; /* mostly 1 */
        if (c->mask_kind == 2)
            for (int64_t i = 0; i < mnumel; i++) m[i] = !m[i];
        if (mnumel > 3) { /* a fully masked row when the mask has a full S axis */
            int64_t S = mshape[nd - 1];
            for (int64_t j = 0; j < S && S == c->S; j++) m[j] = c->mask_kind == 1 ? 0 : 1;
        }
        mask = m;
    } else if (c->mask_kind == 3) {
        float *m = malloc((size_t)mnumel * 4);
        tu_fill(m, (size_t)mnumel, st, -3, 1);
        for (int64_t i = 0; i < mnumel; i += 5) m[i] = -INFINITY;
        mask = m;
    }
    double *ro = malloc(no * 8), *rw = malloc(nw * 8), *rl = malloc(nl * 8);
    oracle(c, q, k, v, mask, ms, ro, rw, rl);

    /* attn: optionally through strided views ([B, L, H, D] memory viewed as [B, H, L, D]) */
    float *qq = q, *kk = k, *vv = v;
    attn_tensor Q = attn_view4(q, c->B, c->H, c->L, c->D), K = attn_view4(k, c->B, c->Hkv, c->S, c->D),
                V = attn_view4(v, c->B, c->Hkv, c->S, c->Dv);
    if (strided) {
        qq = malloc(nq * 4);
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t h = 0; h < c->H; h++)
                for (int64_t i = 0; i < c->L; i++)
                    for (int64_t d = 0; d < c->D; d++)
                        qq[((b * c->L + i) * c->H + h) * c->D + d] =
                            q[((b * c->H + h) * c->L + i) * c->D + d];
        Q.data = qq;
        Q.stride[0] = c->L * c->H * c->D, Q.stride[1] = c->D, Q.stride[2] = c->H * c->D;
    }
    float *o = malloc(no * 4), *w = malloc(nw * 4), *l = malloc(nl * 4);
    attn_tensor O = attn_view4(o, c->B, c->H, c->L, c->Dv), W = attn_view4(w, c->B, c->H, c->L, c->S);
    int64_t lshape[3] = {c->B, c->H, c->L};
    attn_tensor LS = attn_tensor_make(l, ATTN_F32, 3, lshape);
    attn_mask am;
    memset(&am, 0, sizeof am);
    if (c->mask_kind) {
        am.kind = c->mask_kind == 1 ? ATTN_MASK_KEEP : c->mask_kind == 2 ? ATTN_MASK_BLOCK : ATTN_MASK_ADD;
        am.t = attn_tensor_make(mask, c->mask_kind == 3 ? ATTN_F32 : ATTN_BOOL, nd, mshape);
    }
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.causal = (attn_causal)c->causal;
    opt.scale = c->scale;
    attn_status s = attn_sdpa(ctx, &Q, &K, &V, c->mask_kind ? &am : NULL, &opt, &O, &W, &LS);
    char what[160];
    snprintf(what, sizeof what, "sdpa B%lld H%lld/%lld L%lld S%lld D%lld/%lld mask%d/%dD causal%d%s",
             (long long)c->B, (long long)c->H, (long long)c->Hkv, (long long)c->L, (long long)c->S,
             (long long)c->D, (long long)c->Dv, c->mask_kind, nd, c->causal, strided ? " strided" : "");
    if (TU_STATUS(s, ATTN_OK, ctx)) {
        float *fo = to_f(ro, no), *fw = to_f(rw, nw), *fl = to_f(rl, nl);
        tu_close(what, o, fo, no, 1e-5);
        tu_close(what, w, fw, nw, 1e-5);
        tu_close(what, l, fl, nl, 1e-5);
        /* without the weights output, large problems run on the fused kernel */
        float *o2 = malloc(no * 4), *l2 = malloc(nl * 4);
        attn_tensor O2 = attn_view4(o2, c->B, c->H, c->L, c->Dv), LS2 = LS;
        LS2.data = l2;
        TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, c->mask_kind ? &am : NULL, &opt, &O2, NULL, &LS2),
                  ATTN_OK, ctx);
        tu_close(what, o2, fo, no, 1e-5);
        tu_close(what, l2, fl, nl, 1e-5);
        free(o2), free(l2);
        /* dropout: weights are either 0 or the plain weights / (1 - p), out = weights V */
        opt.dropout_p = 0.25f;
        opt.seed = seed;
        s = attn_sdpa(ctx, &Q, &K, &V, c->mask_kind ? &am : NULL, &opt, &O, &W, NULL);
        TU_STATUS(s, ATTN_OK, ctx);
        int bad = 0;
        size_t dropped = 0, nonzero = 0;
        for (size_t i = 0; i < nw; i++) {
            if (fw[i] != 0) nonzero++;
            if (w[i] == 0 && fw[i] != 0) dropped++;
            else if (fabsf(w[i] - fw[i] / 0.75f) > 1e-5f * (1 + fabsf(w[i]))) bad++;
        }
        TU_CHECK(!bad, "%s: dropout weights not in {0, w/(1-p)}", what);
        TU_CHECK(nonzero < 40 || (dropped > nonzero / 10 && dropped < nonzero / 2),
                 "%s: dropped %zu of %zu", what, dropped, nonzero);
        double *dout = calloc(no, 8);
        int64_t g = c->H / c->Hkv;
        for (int64_t r = 0; r < c->B * c->H * c->L; r++) {
            int64_t b = r / (c->H * c->L), h = (r / c->L) % c->H;
            for (int64_t e = 0; e < c->Dv; e++)
                for (int64_t j = 0; j < c->S; j++)
                    dout[r * c->Dv + e] += (double)w[r * c->S + j] *
                                           v[((b * c->Hkv + h / g) * c->S + j) * c->Dv + e];
        }
        float *fd = to_f(dout, no);
        tu_close("dropout out = weights V", o, fd, no, 1e-5);
        free(fd), free(dout), free(fo), free(fw), free(fl);
    }
    if (qq != q) free(qq);
    free(q), free(k), free(v), free(mask), free(ro), free(rw), free(rl), free(o), free(w), free(l);
    (void)kk, (void)vv;
}

static void random_cases(attn_ctx *ctx) {
    uint64_t st = 12345;
    const int64_t sizes[] = {1, 2, 3, 5, 7, 8, 13, 16, 17, 70, 100};
    for (int t = 0; t < 120 && !tu_failures; t++) {
        sdpa_case c;
        memset(&c, 0, sizeof c);
        c.B = 1 + (int64_t)(tu_rand(&st) % 3);
        c.Hkv = 1 + (int64_t)(tu_rand(&st) % 3);
        c.H = c.Hkv * (1 + (int64_t)(tu_rand(&st) % 3));
        c.L = sizes[tu_rand(&st) % 11];
        c.S = sizes[tu_rand(&st) % 11];
        c.D = sizes[tu_rand(&st) % 9];
        c.Dv = sizes[tu_rand(&st) % 9];
        c.mask_kind = (int)(tu_rand(&st) % 4);
        c.mask_nd = 1 + (int)(tu_rand(&st) % 4);
        for (int d = 0; d < 4; d++) c.mask_bcast[d] = (tu_rand(&st) % 3) == 0;
        c.causal = (int)(tu_rand(&st) % 3);
        c.scale = (tu_rand(&st) % 4) == 0 ? 0.3f : 0.0f;
        run_case(ctx, &c, 100 + (uint64_t)t, (int)(t % 2));
    }
}

static void fully_masked_rows_are_zero(attn_ctx *ctx) {
    float q[2 * 4], k[3 * 4], v[3 * 2], o[2 * 2] = {7, 7, 7, 7}, w[2 * 3];
    tu_fill(q, 8, 1, -1, 1), tu_fill(k, 12, 2, -1, 1), tu_fill(v, 6, 3, -1, 1);
    unsigned char keep[2 * 3] = {0, 0, 0, 1, 0, 1};
    attn_tensor Q = attn_view4(q, 1, 1, 2, 4), K = attn_view4(k, 1, 1, 3, 4), V = attn_view4(v, 1, 1, 3, 2),
                O = attn_view4(o, 1, 1, 2, 2), W = attn_view4(w, 1, 1, 2, 3);
    int64_t ms[2] = {2, 3};
    attn_mask m = {ATTN_MASK_KEEP, attn_tensor_make(keep, ATTN_BOOL, 2, ms)};
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, &m, NULL, &O, &W, NULL), ATTN_OK, ctx);
    TU_CHECK(o[0] == 0 && o[1] == 0 && w[0] == 0 && w[1] == 0 && w[2] == 0, "masked row is zero");
    TU_CHECK(!isnan(o[2]) && fabsf(w[3] + w[5] - 1) < 1e-6f && w[4] == 0, "other row normal");
    /* bottom-right causal with L > S: the first L - S rows see nothing */
    float q3[3 * 4], o3[3 * 2];
    tu_fill(q3, 12, 4, -1, 1);
    attn_tensor Q3 = attn_view4(q3, 1, 1, 3, 4), K2 = attn_view4(k, 1, 1, 2, 4), V2 = attn_view4(v, 1, 1, 2, 2),
                O3 = attn_view4(o3, 1, 1, 3, 2);
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    TU_STATUS(attn_sdpa(ctx, &Q3, &K2, &V2, NULL, &opt, &O3, NULL, NULL), ATTN_OK, ctx);
    TU_CHECK(o3[0] == 0 && o3[1] == 0, "bottom-right row 0 sees no key");
    TU_CHECK(fabsf(o3[2] - v[0]) < 1e-6f && fabsf(o3[3] - v[1]) < 1e-6f, "row 1 sees key 0 only");
}

static void bad_inputs(attn_ctx *ctx) {
    float q[2 * 3 * 4 * 8], k[2 * 3 * 5 * 8], v[2 * 3 * 5 * 8], o[2 * 3 * 4 * 8];
    tu_fill(q, sizeof q / 4, 1, -1, 1), tu_fill(k, sizeof k / 4, 2, -1, 1), tu_fill(v, sizeof v / 4, 3, -1, 1);
    attn_tensor Q = attn_view4(q, 2, 3, 4, 8), K = attn_view4(k, 2, 3, 5, 8), V = attn_view4(v, 2, 3, 5, 8),
                O = attn_view4(o, 2, 3, 4, 8);
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_OK, ctx);
    attn_tensor K2 = attn_view4(k, 2, 3, 5, 7);
    TU_STATUS(attn_sdpa(ctx, &Q, &K2, &V, NULL, NULL, &O, NULL, NULL), ATTN_E_SHAPE, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "key") != NULL, "message names key: %s", attn_ctx_errmsg(ctx));
    attn_tensor K3 = attn_view4(k, 2, 2, 5, 8), V3 = attn_view4(v, 2, 2, 5, 8);
    TU_STATUS(attn_sdpa(ctx, &Q, &K3, &V3, NULL, NULL, &O, NULL, NULL), ATTN_E_SHAPE, ctx); /* 3 % 2 */
    attn_tensor O2 = attn_view4(o, 2, 3, 4, 7);
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O2, NULL, NULL), ATTN_E_SHAPE, ctx);
    unsigned char mb[7 * 5];
    memset(mb, 1, sizeof mb);
    int64_t ms[2] = {7, 5};
    attn_mask m = {ATTN_MASK_KEEP, attn_tensor_make(mb, ATTN_BOOL, 2, ms)};
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, &m, NULL, &O, NULL, NULL), ATTN_E_BROADCAST, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "[7, 5]") && strstr(attn_ctx_errmsg(ctx), "[2, 3, 4, 5]"),
             "broadcast message: %s", attn_ctx_errmsg(ctx));
    attn_mask mf = {ATTN_MASK_ADD, attn_tensor_make(mb, ATTN_BOOL, 2, ms)};
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, &mf, NULL, &O, NULL, NULL), ATTN_E_DTYPE, ctx);
    attn_mask mk = {(attn_mask_kind)9, attn_tensor_make(mb, ATTN_BOOL, 2, ms)};
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, &mk, NULL, &O, NULL, NULL), ATTN_E_INVALID, ctx);
    q[5] = NAN;
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_E_NONFINITE, ctx);
    q[5] = INFINITY;
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_E_NONFINITE, ctx);
    q[5] = 0;
    attn_tensor Z = attn_view4(q, 2, 0, 4, 8);
    TU_STATUS(attn_sdpa(ctx, &Z, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_E_SHAPE, ctx);
    attn_tensor Hg = attn_view4(q, INT64_MAX / 4, 3, 4, 8);
    TU_STATUS(attn_sdpa(ctx, &Hg, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_E_OVERFLOW, ctx);
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.dropout_p = 1.0f;
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &opt, &O, NULL, NULL), ATTN_E_INVALID, ctx);
    opt.dropout_p = 0, opt.scale = NAN;
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &opt, &O, NULL, NULL), ATTN_E_INVALID, ctx);
    opt.scale = 0, opt.causal = (attn_causal)5;
    TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &opt, &O, NULL, NULL), ATTN_E_INVALID, ctx);
    attn_tensor N = Q;
    N.data = NULL;
    TU_STATUS(attn_sdpa(ctx, &N, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_sdpa(ctx, &Q, &K, NULL, NULL, NULL, &O, NULL, NULL), ATTN_E_INVALID, ctx);
    TU_CHECK(attn_sdpa(NULL, &Q, &K, &V, NULL, NULL, &O, NULL, NULL) == ATTN_E_INVALID, "NULL ctx");
    attn_tensor I = Q;
    I.dtype = ATTN_I32;
    TU_STATUS(attn_sdpa(ctx, &I, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_E_DTYPE, ctx);
    /* the finite check can be turned off */
    attn_ctx *c2;
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.flags = ATTN_CTX_NO_FINITE_CHECK;
    attn_ctx_create(&p, &c2);
    q[0] = NAN;
    TU_STATUS(attn_sdpa(c2, &Q, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_OK, c2);
    attn_ctx_free(c2);
}

int main(void) {
    attn_ctx *ctx;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    random_cases(ctx);
    fully_masked_rows_are_zero(ctx);
    bad_inputs(ctx);
    attn_ctx_free(ctx);
    return tu_finish("test_sdpa");
}
