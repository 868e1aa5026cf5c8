/* The numbers and facts of the seed documents (see shared seeds NOTES.md), computed through the
 * public API: seed 001's and seed 000's printed figures, seed 002's permutation equivariance,
 * masking before softmax, and the refused head split of seed 000. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

/* The seeds print 4 decimals: a correct value is within half a unit of the last place. */
#define TOL4 (0.5e-4 + 1e-6)

static attn_ctx *ctx;

static const float INPUTS[18] = {0.43f, 0.15f, 0.89f, 0.55f, 0.87f, 0.66f,
                                 0.57f, 0.85f, 0.64f, 0.22f, 0.58f, 0.33f,
                                 0.77f, 0.25f, 0.10f, 0.05f, 0.80f, 0.55f};

/* Every |got[i] - printed[i]| <= tol. */
static void check_printed(const char *what, const float *got, const double *printed, int n,
                          double tol) {
    for (int i = 0; i < n; i++) {
        double d = fabs((double)got[i] - printed[i]);
        TU_CHECK(d <= tol, "%s[%d] = %.6f, the seed prints %.4f (|diff| %.2g > %.2g)", what, i,
                 (double)got[i], printed[i], d, tol);
    }
}

static void check_row_sums(const char *what, const float *w, int rows, int cols, double tol) {
    for (int i = 0; i < rows; i++) {
        double s = 0;
        for (int j = 0; j < cols; j++) s += w[i * cols + j];
        TU_CHECK(fabs(s - 1.0) <= tol, "%s: row %d sums to %.9f", what, i, s);
    }
}

/* ---- seed 001 ----------------------------------------------------------------------------- */

static void test_seed001(void) {
    static const double scores2[6] = {0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865};
    static const double sum2[6] = {0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656};
    static const double soft2[6] = {0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581};
    static const double ctx2[3] = {0.4419, 0.6515, 0.5683};
    static const double seed_scores[36] = {
        0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310, 0.9544, 1.4950, 1.4754,
        0.8434, 0.7070, 1.0865, 0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605,
        0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565, 0.4576, 0.7070, 0.7154,
        0.3474, 0.6654, 0.2935, 0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450};
    float S[36], W[36], C[18], Wsum[36], Csum[18];
    attn_tensor x = attn_view2((float *)INPUTS, 6, 3);
    attn_tensor s = attn_view2(S, 6, 6), w = attn_view2(W, 6, 6), c = attn_view2(C, 6, 3);
    if (!TU_STATUS(attn_simple_self_attention(ctx, &x, ATTN_NORM_SOFTMAX, &s, &w, &c), ATTN_OK,
                   ctx))
        return;
    check_printed("scores[journey]", S + 6, scores2, 6, TOL4);
    check_printed("softmax[journey]", W + 6, soft2, 6, TOL4);
    check_printed("context[journey]", C + 3, ctx2, 3, TOL4);
    check_printed("score matrix", S, seed_scores, 36, TOL4);

    /* inputs @ inputs^T, computed here in double */
    double ref[36];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            double a = 0;
            for (int e = 0; e < 3; e++) a += (double)INPUTS[i * 3 + e] * INPUTS[j * 3 + e];
            ref[i * 6 + j] = a;
        }
    check_printed("score matrix vs double X X^T", S, ref, 36, 1e-6);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            TU_CHECK(S[i * 6 + j] == S[j * 6 + i], "score matrix not symmetric at %d,%d", i, j);

    /* softmax over the last (key) axis: each row sums to 1; context = weights @ inputs */
    check_row_sums("softmax weights", W, 6, 6, 1e-6);
    double cref[18];
    for (int i = 0; i < 6; i++)
        for (int e = 0; e < 3; e++) {
            double a = 0;
            for (int j = 0; j < 6; j++) a += (double)W[i * 6 + j] * INPUTS[j * 3 + e];
            cref[i * 3 + e] = a;
        }
    check_printed("context vs double weights @ inputs", C, cref, 18, 1e-6);

    /* attn_softmax on the journey scores alone gives the same weights */
    float sm[6];
    attn_tensor sv = attn_view1(S + 6, 6), smv = attn_view1(sm, 6);
    if (TU_STATUS(attn_softmax(ctx, &sv, &smv), ATTN_OK, ctx)) {
        check_printed("attn_softmax(scores[journey])", sm, soft2, 6, TOL4);
        TU_CHECK(tu_max_err(sm, W + 6, 6, NULL) <= 1e-7, "attn_softmax differs from the row");
    }

    /* sum-normalisation (ATTN_NORM_SUM) */
    attn_tensor ws = attn_view2(Wsum, 6, 6), cs = attn_view2(Csum, 6, 3);
    if (TU_STATUS(attn_simple_self_attention(ctx, &x, ATTN_NORM_SUM, NULL, &ws, &cs), ATTN_OK,
                  ctx)) {
        check_printed("sum-normalised[journey]", Wsum + 6, sum2, 6, TOL4);
        check_row_sums("sum-normalised weights", Wsum, 6, 6, 1e-6);
        double wref[36];
        for (int i = 0; i < 6; i++) {
            double t = 0;
            for (int j = 0; j < 6; j++) t += ref[i * 6 + j];
            for (int j = 0; j < 6; j++) wref[i * 6 + j] = ref[i * 6 + j] / t;
        }
        check_printed("sum-normalised vs double", Wsum, wref, 36, 1e-6);
    }

    /* batched input [2, 6, 3]: both batch entries give the same numbers */
    float xb[36], Sb[72], Wb[72], Cb[36];
    memcpy(xb, INPUTS, sizeof INPUTS);
    memcpy(xb + 18, INPUTS, sizeof INPUTS);
    attn_tensor X3 = attn_view3(xb, 2, 6, 3), S3 = attn_view3(Sb, 2, 6, 6);
    attn_tensor W3 = attn_view3(Wb, 2, 6, 6), C3 = attn_view3(Cb, 2, 6, 3);
    if (TU_STATUS(attn_simple_self_attention(ctx, &X3, ATTN_NORM_SOFTMAX, &S3, &W3, &C3),
                  ATTN_OK, ctx))
        for (int b = 0; b < 2; b++) {
            TU_CHECK(tu_max_err(Sb + 36 * b, S, 36, NULL) <= 1e-7, "batched scores, batch %d", b);
            TU_CHECK(tu_max_err(Wb + 36 * b, W, 36, NULL) <= 1e-7, "batched weights, batch %d", b);
            TU_CHECK(tu_max_err(Cb + 18 * b, C, 18, NULL) <= 1e-7, "batched context, batch %d", b);
        }
}

/* ---- seed 000 ----------------------------------------------------------------------------- */

static void test_seed000(void) {
    static const float X[9] = {0.34f, 0.22f, 0.54f, 0.53f, 0.34f, 0.98f, 0.29f, 0.54f, 0.93f};
    static const double scores[3] = {0.7842, 1.3569, 1.2487};
    static const double weights[3] = {0.2291, 0.4063, 0.3646};
    static const double exact[3] = {0.3990, 0.3854, 0.8610};
    float S[9], W[9], C[9];
    attn_tensor x = attn_view2((float *)X, 3, 3), s = attn_view2(S, 3, 3);
    attn_tensor w = attn_view2(W, 3, 3), c = attn_view2(C, 3, 3);
    if (!TU_STATUS(attn_simple_self_attention(ctx, &x, ATTN_NORM_SOFTMAX, &s, &w, &c), ATTN_OK,
                   ctx))
        return;
    check_printed("seed 000 scores[shiny]", S + 3, scores, 3, TOL4);
    check_printed("seed 000 weights[shiny]", W + 3, weights, 3, TOL4);
    check_printed("seed 000 context[shiny]", C + 3, exact, 3, TOL4);
    /* the seed's own 0.3992 / 0.3858 come from slips in its hand computation, not the maths */
    TU_CHECK(fabs(C[3] - 0.3992) > 1e-4 && fabs(C[4] - 0.3858) > 1e-4,
             "context[shiny] reproduces the seed's rounded-intermediate figures");
}

/* ---- seed 002: permutation equivariance --------------------------------------------------- */

static void fill_params(attn_module *m, uint64_t seed) {
    size_t n = attn_module_param_count(m);
    for (size_t i = 0; i < n; i++) {
        const char *name;
        attn_tensor v;
        if (!TU_STATUS(attn_module_param_at(m, i, &name, &v), ATTN_OK, ctx)) return;
        tu_fill(v.data, (size_t)attn_tensor_numel(&v), seed + 977 * i, -1.0f, 1.0f);
    }
}

/* perm[i] = j: row i of the permuted input is row j of the original */
static void make_perm(int *perm, int n, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(tu_rand(&s) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    if (perm[0] == 0) { /* make sure it actually moves row 0 (the causal test needs it) */
        int t = perm[0];
        perm[0] = perm[1], perm[1] = t;
    }
}

static void permute_rows(const float *src, float *dst, const int *perm, int T, int E) {
    for (int i = 0; i < T; i++) memcpy(dst + i * E, src + perm[i] * E, (size_t)E * sizeof(float));
}

enum { PT = 7, PE = 8 };

typedef attn_status (*fwd_fn)(const attn_module *m, float *x, float *out, int causal);

static attn_status fwd_seed(const attn_module *m, float *x, float *out, int causal) {
    (void)causal;
    attn_tensor X = attn_view3(x, 1, PT, PE), O = attn_view3(out, 1, PT, PE);
    return attn_seed_attention_forward(ctx, m, &X, NULL, &O, NULL);
}

static attn_status fwd_mha(const attn_module *m, float *x, float *out, int causal) {
    attn_tensor X = attn_view3(x, 1, PT, PE), O = attn_view3(out, 1, PT, PE);
    attn_mha_options opt = {0, 0, causal};
    return attn_mha_forward(ctx, m, &X, &X, &X, NULL, NULL, &opt, NULL, &O, NULL);
}

/* f(P X) == P f(X) within 1e-6 (relative) when equivariant; clearly different otherwise. */
static void check_equivariance(const char *what, const attn_module *m, fwd_fn f, int causal,
                               int expect_equivariant) {
    float x[PT * PE], xp[PT * PE], y[PT * PE], yp[PT * PE], py[PT * PE];
    int perm[PT];
    tu_fill(x, PT * PE, 4242, -1.0f, 1.0f);
    make_perm(perm, PT, 99);
    permute_rows(x, xp, perm, PT, PE);
    if (!TU_STATUS(f(m, x, y, causal), ATTN_OK, ctx)) return;
    if (!TU_STATUS(f(m, xp, yp, causal), ATTN_OK, ctx)) return;
    permute_rows(y, py, perm, PT, PE);
    if (expect_equivariant) {
        tu_close(what, yp, py, PT * PE, 1e-6);
    } else {
        double e = tu_max_err(yp, py, PT * PE, NULL);
        TU_CHECK(e > 1e-3, "%s: causal output is permutation-equivariant (max diff %.3g)", what,
                 e);
    }
}

static void test_permutation(void) {
    attn_module *v2 = NULL, *causal = NULL, *mha = NULL;
    attn_seed_attention_config cfg = {ATTN_SEED_SELF_V2, PE, PE, 1, 0.0f, 1};
    if (TU_STATUS(attn_seed_attention_create(ctx, &cfg, &v2), ATTN_OK, ctx)) {
        fill_params(v2, 11);
        check_equivariance("SelfAttention_v2 permutation equivariance", v2, fwd_seed, 0, 1);
    }
    cfg.kind = ATTN_SEED_CAUSAL;
    if (TU_STATUS(attn_seed_attention_create(ctx, &cfg, &causal), ATTN_OK, ctx)) {
        fill_params(causal, 11);
        check_equivariance("CausalAttention", causal, fwd_seed, 1, 0);
    }
    attn_mha_config mc = attn_mha_defaults(PE, 2);
    if (TU_STATUS(attn_mha_create(ctx, &mc, &mha), ATTN_OK, ctx)) {
        fill_params(mha, 23);
        check_equivariance("MultiheadAttention permutation equivariance", mha, fwd_mha, 0, 1);
        check_equivariance("MultiheadAttention is_causal", mha, fwd_mha, 1, 0);
    }
    attn_module_free(v2);
    attn_module_free(causal);
    attn_module_free(mha);
}

/* ---- masks before softmax ----------------------------------------------------------------- */

enum { MB = 2, MH = 2, ML = 5, MS = 6, MD = 4 };

/* blocked(b,h,i,j) decides the pattern; every row keeps at least key 0 */
static int blocked(int b, int h, int i, int j) {
    (void)h;
    return j != 0 && ((i * 7 + j * 3 + b) % 3 == 0 || j > i + 1);
}

static void check_masked_weights(const char *what, const float *w, int has_mask, int causal) {
    for (int b = 0; b < MB; b++)
        for (int h = 0; h < MH; h++)
            for (int i = 0; i < ML; i++) {
                const float *row = w + ((b * MH + h) * ML + i) * MS;
                double s = 0;
                for (int j = 0; j < MS; j++) {
                    int masked = (has_mask && blocked(b, h, i, j)) || (causal && j > i);
                    if (masked)
                        TU_CHECK(row[j] == 0.0f, "%s: weight (%d,%d,%d,%d) = %g, not exactly 0",
                                 what, b, h, i, j, (double)row[j]);
                    else
                        TU_CHECK(row[j] > 0.0f, "%s: visible weight (%d,%d,%d,%d) = %g", what,
                                 b, h, i, j, (double)row[j]);
                    s += row[j];
                }
                TU_CHECK(fabs(s - 1.0) <= 1e-6, "%s: row (%d,%d,%d) sums to %.9f", what, b, h, i,
                         s);
            }
}

static void test_masks(void) {
    float q[MB * MH * ML * MD], k[MB * MH * MS * MD], v[MB * MH * MS * MD];
    float o[MB * MH * ML * MD], w[MB * MH * ML * MS];
    float add[MB * 1 * ML * MS];
    unsigned char blk[MB * 1 * ML * MS], keep[MB * 1 * ML * MS];
    tu_fill(q, sizeof q / sizeof *q, 1, -2.0f, 2.0f);
    tu_fill(k, sizeof k / sizeof *k, 2, -2.0f, 2.0f);
    tu_fill(v, sizeof v / sizeof *v, 3, -1.0f, 1.0f);
    for (int b = 0; b < MB; b++)
        for (int i = 0; i < ML; i++)
            for (int j = 0; j < MS; j++) {
                int x = blocked(b, 0, i, j), at = (b * ML + i) * MS + j;
                add[at] = x ? -INFINITY : 0.0f;
                blk[at] = (unsigned char)x;
                keep[at] = (unsigned char)!x;
            }
    attn_tensor Q = attn_view4(q, MB, MH, ML, MD), K = attn_view4(k, MB, MH, MS, MD);
    attn_tensor V = attn_view4(v, MB, MH, MS, MD), O = attn_view4(o, MB, MH, ML, MD);
    attn_tensor Wt = attn_view4(w, MB, MH, ML, MS);
    int64_t mshape[4] = {MB, 1, ML, MS};
    attn_mask masks[3] = {
        {ATTN_MASK_ADD, attn_view4(add, MB, 1, ML, MS)},
        {ATTN_MASK_BLOCK, attn_tensor_make(blk, ATTN_BOOL, 4, mshape)},
        {ATTN_MASK_KEEP, attn_tensor_make(keep, ATTN_U8, 4, mshape)},
    };
    const char *names[3] = {"additive -inf mask", "BLOCK bool mask", "KEEP u8 mask"};
    attn_sdpa_options opt = attn_sdpa_defaults();
    float ref[MB * MH * ML * MS];
    for (int m = 0; m < 3; m++) {
        if (!TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, &masks[m], &opt, &O, &Wt, NULL), ATTN_OK, ctx))
            continue;
        check_masked_weights(names[m], w, 1, 0);
        if (m == 0) memcpy(ref, w, sizeof w);
        else TU_CHECK(tu_max_err(w, ref, sizeof w / sizeof *w, NULL) <= 1e-7,
                      "%s differs from the additive mask", names[m]);
    }
    opt.causal = ATTN_CAUSAL_TOP_LEFT;
    if (TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &opt, &O, &Wt, NULL), ATTN_OK, ctx))
        check_masked_weights("causal", w, 0, 1);
    if (TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, &masks[0], &opt, &O, &Wt, NULL), ATTN_OK, ctx))
        check_masked_weights("causal + additive mask", w, 1, 1);

    /* Seed 004's mistake, masking after softmax, only agrees once each row is renormalised. */
    float full[MB * MH * ML * MS];
    attn_tensor F = attn_view4(full, MB, MH, ML, MS);
    opt.causal = ATTN_CAUSAL_NONE;
    if (TU_STATUS(attn_sdpa(ctx, &Q, &K, &V, NULL, &opt, &O, &F, NULL), ATTN_OK, ctx)) {
        double worst_sum = 1.0, err = 0.0;
        for (int r = 0; r < MB * MH * ML; r++) {
            int b = r / (MH * ML), i = r % ML;
            double s = 0;
            float *row = full + r * MS;
            for (int j = 0; j < MS; j++) {
                if (blocked(b, 0, i, j)) row[j] = 0.0f;
                s += row[j];
            }
            if (s < worst_sum) worst_sum = s;
            for (int j = 0; j < MS; j++)
                err = fmax(err, fabs(row[j] / s - (double)ref[r * MS + j]));
        }
        TU_CHECK(worst_sum < 0.999, "masking after softmax kept rows summing to 1 (%.6f)",
                 worst_sum);
        TU_CHECK(err <= 1e-6, "renormalised after-softmax mask differs by %.3g", err);
    }

    /* A query whose keys are all masked gets zero weights and a zero output, never NaN. */
    float add1[MS], q1[MD], o1[MD], w1[MS];
    for (int j = 0; j < MS; j++) add1[j] = -INFINITY;
    memcpy(q1, q, sizeof q1);
    attn_mask all = {ATTN_MASK_ADD, attn_view1(add1, MS)};
    attn_tensor Q1 = attn_view4(q1, 1, 1, 1, MD), K1 = attn_view4(k, 1, 1, MS, MD);
    attn_tensor V1 = attn_view4(v, 1, 1, MS, MD), O1 = attn_view4(o1, 1, 1, 1, MD);
    attn_tensor W1 = attn_view4(w1, 1, 1, 1, MS);
    if (TU_STATUS(attn_sdpa(ctx, &Q1, &K1, &V1, &all, &opt, &O1, &W1, NULL), ATTN_OK, ctx)) {
        for (int j = 0; j < MS; j++) TU_CHECK(w1[j] == 0.0f, "fully masked weight %d", j);
        for (int d = 0; d < MD; d++) TU_CHECK(o1[d] == 0.0f, "fully masked output %d", d);
    }

    /* The seed modules mask before softmax too: weights [B, heads, T, T] */
    enum { T = 6 };
    float x[2 * T * 3], out[2 * T * 4], sw[2 * 2 * T * T];
    tu_fill(x, sizeof x / sizeof *x, 5, 0.0f, 1.0f);
    attn_seed_attention_config cfg = {ATTN_SEED_CAUSAL, 3, 4, 0, 0.0f, 1};
    for (int kind = 0; kind < 2; kind++) {
        attn_module *m = NULL;
        int heads = kind ? 2 : 1;
        cfg.kind = kind ? ATTN_SEED_MULTIHEAD : ATTN_SEED_CAUSAL;
        cfg.num_heads = heads;
        if (!TU_STATUS(attn_seed_attention_create(ctx, &cfg, &m), ATTN_OK, ctx)) continue;
        fill_params(m, 77);
        attn_tensor X = attn_view3(x, 2, T, 3), Ot = attn_view3(out, 2, T, 4);
        attn_tensor SW = attn_view4(sw, 2, heads, T, T);
        if (TU_STATUS(attn_seed_attention_forward(ctx, m, &X, NULL, &Ot, &SW), ATTN_OK, ctx)) {
            for (int r = 0; r < 2 * heads * T; r++) {
                int i = r % T;
                double s = 0;
                for (int j = 0; j < T; j++) {
                    if (j > i)
                        TU_CHECK(sw[r * T + j] == 0.0f, "seed %s weight (%d,%d) = %g",
                                 kind ? "multihead" : "causal", r, j, (double)sw[r * T + j]);
                    s += sw[r * T + j];
                }
                TU_CHECK(fabs(s - 1.0) <= 1e-6, "seed %s row %d sums to %.9f",
                         kind ? "multihead" : "causal", r, s);
            }
        }
        attn_module_free(m);
    }
}

/* ---- seed 000: 8 dims with 3 heads is refused ------------------------------------------- */

static void test_heads_not_dividing(void) {
    attn_module *m = NULL;
    attn_seed_attention_config cfg = {ATTN_SEED_MULTIHEAD, 3, 8, 0, 0.0f, 3};
    attn_ctx_clear_error(ctx);
    attn_status st = attn_seed_attention_create(ctx, &cfg, &m);
    TU_CHECK(st == ATTN_E_SHAPE || st == ATTN_E_INVALID,
             "seed multihead d_out=8, num_heads=3 returned %s", attn_status_name(st));
    TU_CHECK(attn_ctx_errmsg(ctx)[0] != '\0', "no error message for d_out=8, num_heads=3");
    if (st == ATTN_OK) attn_module_free(m);

    attn_module *mh = NULL;
    attn_mha_config mc = attn_mha_defaults(8, 3);
    attn_ctx_clear_error(ctx);
    st = attn_mha_create(ctx, &mc, &mh);
    TU_CHECK(st == ATTN_E_SHAPE || st == ATTN_E_INVALID,
             "MultiheadAttention embed_dim=8, num_heads=3 returned %s", attn_status_name(st));
    TU_CHECK(attn_ctx_errmsg(ctx)[0] != '\0', "no error message for embed_dim=8, num_heads=3");
    if (st == ATTN_OK) attn_module_free(mh);

    /* 4 dims with 2 heads (head_dim 2) is fine */
    attn_module *ok = NULL;
    cfg.d_out = 4;
    cfg.num_heads = 2;
    TU_STATUS(attn_seed_attention_create(ctx, &cfg, &ok), ATTN_OK, ctx);
    attn_module_free(ok);
}

int main(void) {
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) {
        fprintf(stderr, "test_seeds: cannot create a context\n");
        return 1;
    }
    test_seed001();
    test_seed000();
    test_permutation();
    test_masks();
    test_heads_not_dividing();
    attn_ctx_free(ctx);
    return tu_finish("test_seeds");
}
