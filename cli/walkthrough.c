/* attn walkthrough: the seeds' worked examples, step by step.
 *
 * Every number printed here is computed by the library's public API at run time; the only
 * constants are the seeds' inputs, the small deterministic weight matrices of sections 3-5
 * (from a tiny LCG, see lcg_weight) and, clearly labelled "the seed prints", a few of the
 * seeds' own rounded figures for comparison. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

#define T6 6 /* tokens of "Your journey starts with one step" */
#define DIN 3

static const char *const TOK6[T6] = {"Your", "journey", "starts", "with", "one", "step"};
static const float INPUTS[T6 * DIN] = {
    0.43f, 0.15f, 0.89f, /* Your    */
    0.55f, 0.87f, 0.66f, /* journey */
    0.57f, 0.85f, 0.64f, /* starts  */
    0.22f, 0.58f, 0.33f, /* with    */
    0.77f, 0.25f, 0.10f, /* one     */
    0.05f, 0.80f, 0.55f, /* step    */
};
static const char *const TOK3[3] = {"Hello", "shiny", "sun"};
static const float HELLO[3 * DIN] = {0.34f, 0.22f, 0.54f, 0.53f, 0.34f, 0.98f,
                                     0.29f, 0.54f, 0.93f};

/* ---- small helpers ----------------------------------------------------------------------- */

/* Reports a failed library call (its status and the context's message); the caller exits 1. */
static void lib_error(attn_ctx *ctx, attn_status st, const char *call) {
    fprintf(stderr, "attn walkthrough: %s\n  failed with %s: %s\n", call, attn_status_name(st),
            attn_ctx_errmsg(ctx));
}

#define TRY(call)                                                                             \
    do {                                                                                      \
        attn_status st_ = (call);                                                             \
        if (st_ != ATTN_OK) {                                                                 \
            lib_error(ctx, st_, #call);                                                       \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

/* A strided F32 view (used for transposes and for the multi-head split). */
static attn_tensor strided(float *p, int ndim, const int64_t *shape, const int64_t *stride) {
    attn_tensor t = attn_tensor_make(p, ATTN_F32, ndim, shape);
    for (int d = 0; d < ndim; d++) t.stride[d] = stride[d];
    return t;
}

/* The transpose of a contiguous [r, c] matrix, as a view (no copy). */
static attn_tensor transposed(float *p, int64_t r, int64_t c) {
    int64_t shape[2] = {c, r}, stride[2] = {1, c};
    return strided(p, 2, shape, stride);
}

static void print_vec(const char *label, const float *v, int n, int decimals) {
    printf("  %-9s= [", label);
    for (int i = 0; i < n; i++) printf("%s%.*f", i ? ", " : "", decimals, (double)v[i]);
    printf("]");
}

/* rows x cols matrix with row/column labels; optionally a "row sum" column. */
static void print_mat(const float *m, int rows, int cols, const char *const *rl,
                      const char *const *cl, int rowsum) {
    printf("  %-8s", "");
    for (int j = 0; j < cols; j++) printf("%8s", cl ? cl[j] : "");
    if (rowsum) printf("  row sum");
    printf("\n");
    for (int i = 0; i < rows; i++) {
        double s = 0;
        printf("  %-8s", rl[i]);
        for (int j = 0; j < cols; j++) {
            printf("%8.4f", (double)m[i * cols + j]);
            s += m[i * cols + j];
        }
        if (rowsum) printf("  %7.4f", s);
        printf("\n");
    }
}

static double max_abs_diff(const float *a, const float *b, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) e = d; /* NaN propagates */
    }
    return e;
}

/* Copies src into a module parameter, checking its size first. */
static attn_status set_param(attn_ctx *ctx, attn_module *m, const char *name, const float *src,
                             int64_t n) {
    attn_tensor v;
    attn_status st = attn_module_param(ctx, m, name, &v);
    if (st != ATTN_OK) return st;
    if (attn_tensor_numel(&v) != n || !attn_tensor_is_contiguous(&v)) {
        fprintf(stderr, "attn walkthrough: parameter %s has %lld elements, expected %lld\n", name,
                (long long)attn_tensor_numel(&v), (long long)n);
        return ATTN_E_SHAPE;
    }
    memcpy(v.data, src, (size_t)n * sizeof(float));
    return ATTN_OK;
}

/* Deterministic weights: the classic C-library LCG x <- (1103515245 x + 12345) mod 2^31,
 * weight = ((x >> 16) mod 100) / 100 + lo, i.e. two-decimal values in [lo, lo + 1). */
static void lcg_weights(unsigned long *state, float *w, int n, float lo) {
    for (int i = 0; i < n; i++) {
        *state = (1103515245ul * *state + 12345ul) & 0x7ffffffful;
        w[i] = (float)((*state >> 16) % 100) / 100.0f + lo;
    }
}

/* Section 3's W_query, W_key, W_value [d_in=3, d_out=2] (LCG seeded with 789, the seed's
 * torch.manual_seed). */
static void v1_weights(float wq[6], float wk[6], float wv[6]) {
    unsigned long s = 789;
    lcg_weights(&s, wq, 6, 0.0f);
    lcg_weights(&s, wk, 6, 0.0f);
    lcg_weights(&s, wv, 6, 0.0f);
}

/* queries, keys, values [6, 2] = inputs @ W (attn_linear computes x W^T, so it is given the
 * transposed view of each [3, 2] matrix). */
static attn_status project_qkv(attn_ctx *ctx, float *wq, float *wk, float *wv, float *q,
                               float *k, float *v) {
    attn_tensor x = attn_view2((float *)INPUTS, T6, DIN);
    float *w[3] = {wq, wk, wv}, *y[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        attn_tensor W = transposed(w[i], DIN, 2), Y = attn_view2(y[i], T6, 2);
        attn_status st = attn_linear(ctx, &x, &W, NULL, &Y);
        if (st != ATTN_OK) return st;
    }
    return ATTN_OK;
}

/* ---- 1. seed 001 --------------------------------------------------------------------------- */

static int section_simple(attn_ctx *ctx) {
    int rc = 1;
    float scores[T6], sumw[T6], softw[T6], ctxv[DIN];
    float S[T6 * T6], W[T6 * T6], C[T6 * DIN], Wsum[T6 * T6];
    printf("== 1. Simplified self-attention (seed 001): "
           "\"Your journey starts with one step\" ==\n");
    printf("Each token is a 3-dimensional embedding x^i (one row of `inputs`, given):\n");
    for (int i = 0; i < T6; i++) {
        char lab[16];
        snprintf(lab, sizeof lab, "x^%d %s", i + 1, TOK6[i]);
        printf("  %-12s [%.2f, %.2f, %.2f]\n", lab, (double)INPUTS[i * 3],
               (double)INPUTS[i * 3 + 1], (double)INPUTS[i * 3 + 2]);
    }
    printf("Step 1. Attention scores for the query \"journey\" (x^2): the dot product x^2 . x^i\n"
           "with every token i.  attn_linear(x = x^2, W = inputs) does all six at once.\n");
    {
        attn_tensor q = attn_view2((float *)INPUTS + DIN, 1, DIN);
        attn_tensor Wt = attn_view2((float *)INPUTS, T6, DIN), y = attn_view2(scores, 1, T6);
        TRY(attn_linear(ctx, &q, &Wt, NULL, &y));
    }
    print_vec("scores", scores, T6, 4), printf("\n");
    printf("Step 2a. Normalise so the weights sum to 1 by dividing by the sum (the seed's first\n"
           "try; attn_simple_self_attention with ATTN_NORM_SUM):\n");
    {
        attn_tensor x = attn_view2((float *)INPUTS, T6, DIN), w = attn_view2(Wsum, T6, T6);
        attn_tensor c = attn_view2(C, T6, DIN);
        TRY(attn_simple_self_attention(ctx, &x, ATTN_NORM_SUM, NULL, &w, &c));
        double s = 0;
        for (int j = 0; j < T6; j++) s += (sumw[j] = Wsum[T6 + j]);
        print_vec("weights", sumw, T6, 4), printf("  sum = %.4f\n", s);
    }
    printf("Step 2b. Softmax is better: exp(s_i) / sum_j exp(s_j) is always positive, sums to 1\n"
           "and stresses the larger scores (attn_softmax):\n");
    {
        attn_tensor x = attn_view1(scores, T6), y = attn_view1(softw, T6);
        TRY(attn_softmax(ctx, &x, &y));
        double s = 0;
        for (int j = 0; j < T6; j++) s += softw[j];
        print_vec("weights", softw, T6, 4), printf("  sum = %.4f\n", s);
    }
    printf("Step 3. The context vector of \"journey\" is the weighted sum of all embeddings,\n"
           "z^2 = sum_i weight_i x^i (attn_linear with W = inputs^T):\n");
    {
        attn_tensor w = attn_view2(softw, 1, T6), Wt = transposed((float *)INPUTS, T6, DIN);
        attn_tensor y = attn_view2(ctxv, 1, DIN);
        TRY(attn_linear(ctx, &w, &Wt, NULL, &y));
    }
    print_vec("z^2", ctxv, DIN, 4), printf("\n");
    printf("Step 4. Every query at once (attn_simple_self_attention): scores = inputs @ inputs^T,\n"
           "rows are queries, columns are keys; row \"journey\" is Step 1.\n");
    {
        attn_tensor x = attn_view2((float *)INPUTS, T6, DIN), s = attn_view2(S, T6, T6);
        attn_tensor w = attn_view2(W, T6, T6), c = attn_view2(C, T6, DIN);
        TRY(attn_simple_self_attention(ctx, &x, ATTN_NORM_SOFTMAX, &s, &w, &c));
    }
    print_mat(S, T6, T6, TOK6, TOK6, 0);
    printf("Softmax runs along each row, i.e. over the last (key) axis, dim=-1: every query's\n"
           "weights sum to 1.  (The seed's last cell, torch.softmax(attn_scores, dim=-1), died\n"
           "with a TypeError and printed nothing useful; these are the weights it wanted.)\n");
    print_mat(W, T6, T6, TOK6, TOK6, 1);
    printf("Context vectors z^i = sum_j weight_ij x^j, one per query (weights @ inputs):\n");
    for (int i = 0; i < T6; i++) print_vec(TOK6[i], C + i * DIN, DIN, 4), printf("\n");
    printf("Row \"journey\" agrees with Steps 1-3: max difference %.1e.\n\n",
           fmax(fmax(max_abs_diff(S + T6, scores, T6), max_abs_diff(W + T6, softw, T6)),
                max_abs_diff(C + DIN, ctxv, DIN)));
    rc = 0;
done:
    return rc;
}

/* ---- 2. seed 000 --------------------------------------------------------------------------- */

static int section_hello(attn_ctx *ctx) {
    int rc = 1;
    float S[9], W[9], C[9], prod[9];
    /* the seed's own rounded products and context vector, for comparison only */
    static const float seed_prod[9] = {0.0779f, 0.0504f, 0.1237f, 0.2156f, 0.1382f,
                                       0.3983f, 0.1057f, 0.1972f, 0.3390f};
    static const float seed_ctx[3] = {0.3992f, 0.3858f, 0.8610f};
    printf("== 2. Seed 000: \"Hello shiny sun\", query \"shiny\" ==\n");
    printf("Embeddings (given): Hello [0.34, 0.22, 0.54], shiny [0.53, 0.34, 0.98],\n"
           "sun [0.29, 0.54, 0.93].  attn_simple_self_attention does the three steps at once;\n"
           "we read the row of the query \"shiny\".\n");
    {
        attn_tensor x = attn_view2((float *)HELLO, 3, DIN), s = attn_view2(S, 3, 3);
        attn_tensor w = attn_view2(W, 3, 3), c = attn_view2(C, 3, DIN);
        TRY(attn_simple_self_attention(ctx, &x, ATTN_NORM_SOFTMAX, &s, &w, &c));
    }
    printf("Step 1. Scores: shiny . Hello, shiny . shiny, shiny . sun.\n");
    print_vec("scores", S + 3, 3, 4), printf("\n");
    printf("Step 2. Softmax of the scores: the attention weights.\n");
    print_vec("weights", W + 3, 3, 4), printf("\n");
    printf("Step 3. Context vector: each embedding times its weight, then summed.\n");
    for (int i = 0; i < 3; i++) { /* weight_i * x_i: attn_linear with a 1x1 input */
        attn_tensor w = attn_view2(W + 3 + i, 1, 1), x = attn_view2((float *)HELLO + 3 * i, 3, 1);
        attn_tensor y = attn_view2(prod + 3 * i, 1, 3);
        TRY(attn_linear(ctx, &w, &x, NULL, &y));
    }
    printf("  %-7s %-8s %-28s %s\n", "token", "weight", "weight x embedding, to 4 dp",
           "the seed prints");
    float rsum[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        float r[3];
        for (int d = 0; d < 3; d++) {
            r[d] = roundf(prod[3 * i + d] * 1e4f) / 1e4f; /* the seed's 4-place rounding */
            rsum[d] += r[d];
        }
        printf("  %-7s %.4f   [%.4f, %.4f, %.4f]     [%.4f, %.4f, %.4f]\n", TOK3[i],
               (double)W[3 + i], (double)r[0], (double)r[1], (double)r[2],
               (double)seed_prod[3 * i], (double)seed_prod[3 * i + 1],
               (double)seed_prod[3 * i + 2]);
    }
    printf("  exact context vector (library)  = [%.4f, %.4f, %.4f]\n", (double)C[3],
           (double)C[4], (double)C[5]);
    printf("  sum of the 4-dp products above  = [%.4f, %.4f, %.4f]\n", (double)rsum[0],
           (double)rsum[1], (double)rsum[2]);
    printf("  the seed prints                 = [%.4f, %.4f, %.4f]\n", (double)seed_ctx[0],
           (double)seed_ctx[1], (double)seed_ctx[2]);
    printf("The exact value is the first line.  The seed rounded each product to 4 places before\n"
           "summing; that alone moves a sum by at most 3 x 0.00005 = 0.00015 (second line).\n"
           "Its 0.3992 and 0.3858 are further off because some of its products are not\n"
           "weight x embedding to 4 places (the seed carried slightly different weights\n"
           "through its hand computation):\n ");
    int bad = 0;
    for (int i = 0; i < 9; i++)
        if (fabsf(roundf(prod[i] * 1e4f) / 1e4f - seed_prod[i]) > 0.5e-4f)
            printf("%s %.4f (%s)", bad++ ? "," : "", (double)seed_prod[i], TOK3[i / 3]);
    printf("%s\n\n", bad ? "." : " none.");
    rc = 0;
done:
    return rc;
}

/* ---- 3. trainable weights (seed 000 SelfAttention_v1 / v2) ----------------------------------- */

static void print_pair_rows(const char *const *names, const float *a, const float *b,
                            const char *an, const char *bn) {
    for (int i = 0; i < T6; i++)
        printf("  %-8s %s [%.4f, %.4f]   %s [%.4f, %.4f]\n", names[i], an, (double)a[2 * i],
               (double)a[2 * i + 1], bn, (double)b[2 * i], (double)b[2 * i + 1]);
}

static int section_trainable(attn_ctx *ctx) {
    int rc = 1;
    float wq[6], wk[6], wv[6], Q[12], K[12], V[12], raw[T6], scaled[T6], w[T6], z[2];
    float out1[12], out2[12], w1[36];
    attn_module *m1 = NULL, *m2 = NULL;
    printf("== 3. Trainable weights (seed 000 SelfAttention_v1 and _v2), d_in=3, d_out=2 ==\n");
    printf("Three learnable matrices project each embedding to a query, a key and a value.  Here\n"
           "they are fixed, from the LCG x <- (1103515245 x + 12345) mod 2^31 seeded with 789,\n"
           "weight = ((x >> 16) mod 100) / 100 (rows = d_in, columns = d_out):\n");
    v1_weights(wq, wk, wv);
    for (int r = 0; r < DIN; r++)
        printf("  %-8s [%.2f, %.2f]   %-6s [%.2f, %.2f]   %-8s [%.2f, %.2f]\n",
               r ? "" : "W_query", (double)wq[2 * r], (double)wq[2 * r + 1], r ? "" : "W_key",
               (double)wk[2 * r], (double)wk[2 * r + 1], r ? "" : "W_value", (double)wv[2 * r],
               (double)wv[2 * r + 1]);
    printf("Step 1. queries = inputs @ W_query, keys = inputs @ W_key, values = inputs @ W_value\n"
           "(attn_linear, which computes x W^T, given the transposed view of each W):\n");
    TRY(project_qkv(ctx, wq, wk, wv, Q, K, V));
    for (int i = 0; i < T6; i++)
        printf("  %-8s q [%.4f, %.4f]   k [%.4f, %.4f]   v [%.4f, %.4f]\n", TOK6[i],
               (double)Q[2 * i], (double)Q[2 * i + 1], (double)K[2 * i], (double)K[2 * i + 1],
               (double)V[2 * i], (double)V[2 * i + 1]);
    printf("Step 2. Scores for the query \"journey\": q^2 . k^i, divided by sqrt(d_k) = sqrt(2)\n"
           "so that dot products of long vectors do not saturate the softmax:\n");
    {
        attn_tensor q = attn_view2(Q + 2, 1, 2), k = attn_view2(K, T6, 2);
        attn_tensor y = attn_view2(raw, 1, T6);
        TRY(attn_linear(ctx, &q, &k, NULL, &y));
    }
    for (int j = 0; j < T6; j++) scaled[j] = raw[j] / sqrtf(2.0f);
    print_vec("q2.k", raw, T6, 4), printf("\n");
    print_vec("scaled", scaled, T6, 4), printf("\n");
    printf("Step 3. Softmax gives the weights; the context vector is the weighted sum of "
           "values:\n");
    {
        attn_tensor x = attn_view1(scaled, T6), y = attn_view1(w, T6);
        TRY(attn_softmax(ctx, &x, &y));
        attn_tensor ww = attn_view2(w, 1, T6), vt = transposed(V, T6, 2);
        attn_tensor zz = attn_view2(z, 1, 2);
        TRY(attn_linear(ctx, &ww, &vt, NULL, &zz));
    }
    print_vec("weights", w, T6, 4), printf("\n");
    print_vec("z^2", z, 2, 4), printf("\n");
    printf("The module (attn_seed_attention, SelfAttention_v1) does all of it for every token.\n"
           "SelfAttention_v2 uses nn.Linear, whose weight is [d_out, d_in]: the transpose of the\n"
           "v1 matrix.  Loaded with the transposes it gives the same context vectors:\n");
    {
        attn_seed_attention_config cfg = {ATTN_SEED_SELF_V1, DIN, 2, 0, 0.0f, 1};
        TRY(attn_seed_attention_create(ctx, &cfg, &m1));
        TRY(set_param(ctx, m1, "W_query", wq, 6));
        TRY(set_param(ctx, m1, "W_key", wk, 6));
        TRY(set_param(ctx, m1, "W_value", wv, 6));
        cfg.kind = ATTN_SEED_SELF_V2;
        TRY(attn_seed_attention_create(ctx, &cfg, &m2));
        const char *names[3] = {"W_query.weight", "W_key.weight", "W_value.weight"};
        float *src[3] = {wq, wk, wv};
        for (int p = 0; p < 3; p++) {
            float t[6]; /* [d_out, d_in] = transpose of [d_in, d_out] */
            for (int r = 0; r < DIN; r++)
                for (int c = 0; c < 2; c++) t[c * DIN + r] = src[p][r * 2 + c];
            TRY(set_param(ctx, m2, names[p], t, 6));
        }
        attn_tensor x = attn_view3((float *)INPUTS, 1, T6, DIN);
        attn_tensor o1 = attn_view3(out1, 1, T6, 2), o2 = attn_view3(out2, 1, T6, 2);
        attn_tensor wt = attn_view4(w1, 1, 1, T6, T6);
        TRY(attn_seed_attention_forward(ctx, m1, &x, NULL, &o1, &wt));
        TRY(attn_seed_attention_forward(ctx, m2, &x, NULL, &o2, NULL));
    }
    print_pair_rows(TOK6, out1, out2, "v1", "v2");
    printf("max |v1 - v2| = %.1e; row \"journey\" vs Steps 2-3: weights %.1e, z^2 %.1e.\n\n",
           max_abs_diff(out1, out2, 12), max_abs_diff(w1 + T6, w, T6),
           max_abs_diff(out1 + 2, z, 2));
    rc = 0;
done:
    attn_module_free(m1);
    attn_module_free(m2);
    return rc;
}

/* ---- 4. causal attention and dropout -------------------------------------------------------- */

static int section_causal(attn_ctx *ctx) {
    int rc = 1;
    float wq[6], wk[6], wv[6], Q[12], K[12], V[12], out[12];
    float mask[36], before[36], top_left[36], plain[36], after[36], renorm[36], drop[36];
    printf("== 4. Causal attention: hide the future (seed 000 CausalAttention) ==\n");
    printf("Same queries/keys/values as section 3.  A language model predicting the next token\n"
           "may only look back, so query i must ignore keys j > i.  Correct: add -inf to the\n"
           "scaled scores above the diagonal BEFORE softmax (masked_scores = scores + mask, an\n"
           "ATTN_MASK_ADD mask to attn_sdpa).  exp(-inf) = 0, so future weights are exactly 0\n"
           "and every row still sums to 1:\n");
    v1_weights(wq, wk, wv);
    TRY(project_qkv(ctx, wq, wk, wv, Q, K, V));
    for (int i = 0; i < T6; i++)
        for (int j = 0; j < T6; j++) mask[i * T6 + j] = j > i ? -INFINITY : 0.0f;
    attn_tensor q = attn_view4(Q, 1, 1, T6, 2), k = attn_view4(K, 1, 1, T6, 2);
    attn_tensor v = attn_view4(V, 1, 1, T6, 2), o = attn_view4(out, 1, 1, T6, 2);
    {
        attn_mask mk = {ATTN_MASK_ADD, attn_view2(mask, T6, T6)};
        attn_sdpa_options opt = attn_sdpa_defaults(); /* scale 0 = 1/sqrt(d_k) */
        attn_tensor w = attn_view4(before, 1, 1, T6, T6);
        TRY(attn_sdpa(ctx, &q, &k, &v, &mk, &opt, &o, &w, NULL));
        opt.causal = ATTN_CAUSAL_TOP_LEFT;
        w = attn_view4(top_left, 1, 1, T6, T6);
        TRY(attn_sdpa(ctx, &q, &k, &v, NULL, &opt, &o, &w, NULL));
        opt.causal = ATTN_CAUSAL_NONE;
        w = attn_view4(plain, 1, 1, T6, T6);
        TRY(attn_sdpa(ctx, &q, &k, &v, NULL, &opt, &o, &w, NULL));
    }
    print_mat(before, T6, T6, TOK6, TOK6, 1);
    printf("(The built-in causal=ATTN_CAUSAL_TOP_LEFT gives the same: max difference %.1e.)\n",
           max_abs_diff(before, top_left, 36));
    printf("Wrong (seed 004's ScaledDotProductAttention): softmax over ALL keys, then zero the\n"
           "future weights.  The rows no longer sum to 1:\n");
    for (int i = 0; i < 36; i++) after[i] = i % T6 > i / T6 ? 0.0f : plain[i];
    print_mat(after, T6, T6, TOK6, TOK6, 1);
    printf("Dividing each row by its sum repairs it (softmax's denominator simply loses the\n"
           "masked terms): row sums");
    for (int i = 0; i < T6; i++) {
        double s = 0;
        for (int j = 0; j < T6; j++) s += after[i * T6 + j];
        for (int j = 0; j < T6; j++) renorm[i * T6 + j] = (float)(after[i * T6 + j] / s);
        s = 0;
        for (int j = 0; j < T6; j++) s += renorm[i * T6 + j];
        printf(" %.4f", s);
    }
    printf(", max difference from the\ncorrect weights %.1e.\n", max_abs_diff(renorm, before, 36));
    printf("Dropout (training only) then zeroes random weights, here p = 0.5 (attn_sdpa with\n"
           "dropout_p = 0.5, seed 123); kept weights are scaled by 1/(1-p) = 2 so each row keeps\n"
           "its expected sum:\n");
    {
        attn_sdpa_options opt = attn_sdpa_defaults();
        opt.causal = ATTN_CAUSAL_TOP_LEFT;
        opt.dropout_p = 0.5f;
        opt.seed = 123;
        attn_tensor w = attn_view4(drop, 1, 1, T6, T6);
        TRY(attn_sdpa(ctx, &q, &k, &v, NULL, &opt, &o, &w, NULL));
    }
    print_mat(drop, T6, T6, TOK6, TOK6, 1);
    int kept = 0, allowed = 0, agree = 1;
    double err = 0;
    for (int i = 0; i < T6; i++)
        for (int j = 0; j <= i; j++) {
            float d = drop[i * T6 + j], c = before[i * T6 + j];
            int keep = attn_dropout_keep(123, 0, (uint64_t)(i * T6 + j), 0.5f);
            allowed++;
            if (d != 0.0f) kept++, err = fmax(err, fabs((double)d - 2.0 * c));
            if ((d != 0.0f) != keep) agree = 0;
        }
    printf("%d of the %d visible weights kept, each 2 x its value above (max error %.1e);\n"
           "the pattern %s attn_dropout_keep(123, 0, index, 0.5).\n\n",
           kept, allowed, err, agree ? "matches" : "DOES NOT match");
    if (!agree) {
        fprintf(stderr, "attn walkthrough: dropout pattern differs from attn_dropout_keep\n");
        goto done;
    }
    rc = 0;
done:
    return rc;
}

/* ---- 5. multi-head attention ---------------------------------------------------------------- */

static int section_multihead(attn_ctx *ctx) {
    enum { DO = 4, NH = 2, HD = 2 };
    int rc = 1;
    float wq[DO * DIN], wk[DO * DIN], wv[DO * DIN], wo[DO * DO], bo[DO];
    float Q[T6 * DO], K[T6 * DO], V[T6 * DO], cat[T6 * DO], y[T6 * DO], hw[NH * T6 * T6];
    float batch[2 * T6 * DIN], mout[2 * T6 * DO], mw[2 * NH * T6 * T6];
    attn_module *m = NULL, *bad = NULL;
    printf("== 5. Multi-head attention (seed 000 MultiHeadAttention), "
           "d_in=3, d_out=4, 2 heads ==\n");
    printf("The projections are nn.Linear weights [d_out, d_in] (LCG as in section 3, seeded\n"
           "with 123; out_proj values shifted by -0.5):\n");
    unsigned long s = 123;
    lcg_weights(&s, wq, DO * DIN, 0.0f);
    lcg_weights(&s, wk, DO * DIN, 0.0f);
    lcg_weights(&s, wv, DO * DIN, 0.0f);
    lcg_weights(&s, wo, DO * DO, -0.5f);
    lcg_weights(&s, bo, DO, -0.5f);
    for (int r = 0; r < DO; r++) {
        const float *a = wq + r * DIN, *b = wk + r * DIN, *c = wv + r * DIN;
        printf("  %-2s [%.2f, %.2f, %.2f]   %-2s [%.2f, %.2f, %.2f]   %-2s [%.2f, %.2f, %.2f]\n",
               r ? "" : "Wq", (double)a[0], (double)a[1], (double)a[2], r ? "" : "Wk",
               (double)b[0], (double)b[1], (double)b[2], r ? "" : "Wv", (double)c[0],
               (double)c[1], (double)c[2]);
    }
    for (int r = 0; r < DO; r++) {
        const float *d = wo + r * DO;
        printf("  %-15s [%5.2f, %5.2f, %5.2f, %5.2f]   %-13s %5.2f\n",
               r ? "" : "out_proj.weight", (double)d[0], (double)d[1], (double)d[2],
               (double)d[3], r ? "" : "out_proj.bias", (double)bo[r]);
    }
    printf("The input is a batch of two copies of `inputs`, [2, 6, 3]; both give the same\n"
           "result, so we follow batch 0.\n");
    printf("Step 1. Q = x Wq^T (likewise K, V): [6, 4].  The head split is only a view:\n"
           "[6, 4] -> [6, 2 heads, 2] -> [2 heads, 6, 2]; head 0 takes columns 0-1, head 1 2-3.\n");
    {
        attn_tensor x = attn_view2((float *)INPUTS, T6, DIN);
        float *w[3] = {wq, wk, wv}, *out[3] = {Q, K, V};
        for (int i = 0; i < 3; i++) {
            attn_tensor W = attn_view2(w[i], DO, DIN), Y = attn_view2(out[i], T6, DO);
            TRY(attn_linear(ctx, &x, &W, NULL, &Y));
        }
    }
    printf("  %-8s  Q head 0 | head 1\n", "");
    for (int i = 0; i < T6; i++)
        printf("  %-8s [%.4f, %.4f | %.4f, %.4f]\n", TOK6[i], (double)Q[i * DO],
               (double)Q[i * DO + 1], (double)Q[i * DO + 2], (double)Q[i * DO + 3]);
    printf("Step 2. Each head runs causal scaled dot-product attention on its own 2 columns,\n"
           "scale 1/sqrt(head_dim) = 1/sqrt(2) (attn_sdpa on the strided views).  Weights:\n");
    {
        int64_t sh[4] = {1, NH, T6, HD}, st[4] = {T6 * DO, HD, DO, 1};
        attn_tensor q = strided(Q, 4, sh, st), k = strided(K, 4, sh, st);
        attn_tensor v = strided(V, 4, sh, st);
        attn_tensor o = strided(cat, 4, sh, st); /* writes straight into the concatenation */
        attn_tensor w = attn_view4(hw, 1, NH, T6, T6);
        attn_sdpa_options opt = attn_sdpa_defaults();
        opt.causal = ATTN_CAUSAL_TOP_LEFT;
        TRY(attn_sdpa(ctx, &q, &k, &v, NULL, &opt, &o, &w, NULL));
    }
    printf("  %-8s %-42s  %s\n", "", "head 0", "head 1");
    for (int i = 0; i < T6; i++) {
        printf("  %-8s", TOK6[i]);
        for (int h = 0; h < NH; h++) {
            for (int j = 0; j < T6; j++) printf("%7.4f", (double)hw[(h * T6 + i) * T6 + j]);
            printf(h ? "\n" : "  |");
        }
    }
    printf("Step 3. Each head's context vectors [6, 2] are put side by side again (transpose\n"
           "back, then view as [6, 4]): the concatenation along the feature axis.\n");
    printf("  %-8s  head 0 | head 1%24s Step 4. out_proj: cat Wo^T + bo\n", "", "");
    {
        attn_tensor c = attn_view2(cat, T6, DO), W = attn_view2(wo, DO, DO);
        attn_tensor b = attn_view1(bo, DO), Y = attn_view2(y, T6, DO);
        TRY(attn_linear(ctx, &c, &W, &b, &Y));
    }
    for (int i = 0; i < T6; i++)
        printf("  %-8s [%.4f, %.4f | %.4f, %.4f]   [%7.4f, %7.4f, %7.4f, %7.4f]\n", TOK6[i],
               (double)cat[i * DO], (double)cat[i * DO + 1], (double)cat[i * DO + 2],
               (double)cat[i * DO + 3], (double)y[i * DO], (double)y[i * DO + 1],
               (double)y[i * DO + 2], (double)y[i * DO + 3]);
    {
        attn_seed_attention_config cfg = {ATTN_SEED_MULTIHEAD, DIN, DO, 0, 0.0f, NH};
        TRY(attn_seed_attention_create(ctx, &cfg, &m));
        TRY(set_param(ctx, m, "W_query.weight", wq, DO * DIN));
        TRY(set_param(ctx, m, "W_key.weight", wk, DO * DIN));
        TRY(set_param(ctx, m, "W_value.weight", wv, DO * DIN));
        TRY(set_param(ctx, m, "out_proj.weight", wo, DO * DO));
        TRY(set_param(ctx, m, "out_proj.bias", bo, DO));
        memcpy(batch, INPUTS, sizeof INPUTS);
        memcpy(batch + T6 * DIN, INPUTS, sizeof INPUTS);
        attn_tensor x = attn_view3(batch, 2, T6, DIN), o = attn_view3(mout, 2, T6, DO);
        attn_tensor w = attn_view4(mw, 2, NH, T6, T6);
        TRY(attn_seed_attention_forward(ctx, m, &x, NULL, &o, &w));
    }
    printf("The module (attn_seed_attention_forward, ATTN_SEED_MULTIHEAD) on the batch agrees:\n"
           "max difference batch 0 %.1e, batch 1 %.1e, weights %.1e.\n",
           max_abs_diff(mout, y, T6 * DO), max_abs_diff(mout + T6 * DO, y, T6 * DO),
           fmax(max_abs_diff(mw, hw, NH * T6 * T6), max_abs_diff(mw + NH * T6 * T6, hw,
                                                                 NH * T6 * T6)));
    printf("head_dim = d_out / num_heads must be a whole number.  The seed's \"8 dims with 3\n"
           "heads\" would need 8/3 = 2.67 columns per head; the library refuses it:\n");
    {
        attn_seed_attention_config cfg = {ATTN_SEED_MULTIHEAD, DIN, 8, 0, 0.0f, 3};
        attn_status st = attn_seed_attention_create(ctx, &cfg, &bad);
        if (st == ATTN_OK) {
            fprintf(stderr, "attn walkthrough: d_out=8, num_heads=3 was accepted\n");
            goto done;
        }
        printf("  attn_seed_attention_create(d_in=3, d_out=8, num_heads=3) returns %s:\n"
               "  \"%s\"\n",
               attn_status_name(st), attn_ctx_errmsg(ctx));
    }
    rc = 0;
done:
    attn_module_free(m);
    attn_module_free(bad);
    return rc;
}

/* ---- command ------------------------------------------------------------------------------- */

int attn_cmd_walkthrough(int argc, char **argv) {
    long long section = 0;
    int npos;
    const attn_cli_opt opts[] = {
        ATTN_OPT_INT("section", 0, &section, 1, 5, "N", "print only section N (1 to 5)"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "walkthrough", "attn walkthrough [--section N]",
        "Prints the seeds' worked examples step by step, every number computed by the\n"
        "library.  Sections: 1 simplified self-attention (seed 001), 2 \"Hello shiny sun\"\n"
        "(seed 000), 3 trainable weights, 4 causal mask and dropout, 5 multi-head.\n"
        "Without --section all five are printed.",
        opts, NULL, "attn walkthrough\nattn walkthrough --section 4"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    attn_ctx *ctx = NULL;
    attn_status st = attn_ctx_create(NULL, &ctx);
    if (st != ATTN_OK) {
        fprintf(stderr, "attn walkthrough: cannot create a context: %s\n", attn_strerror(st));
        return 1;
    }
    int (*const sections[5])(attn_ctx *) = {section_simple, section_hello, section_trainable,
                                            section_causal, section_multihead};
    int rc = 0;
    for (int s = 1; s <= 5 && rc == 0 && !ferror(stdout); s++) /* stdout: see main */
        if (section == 0 || section == s) rc = sections[s - 1](ctx);
    attn_ctx_free(ctx);
    return rc ? 1 : 0;
}
