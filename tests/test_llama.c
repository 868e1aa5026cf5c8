/* The Llama architecture and generation (attn_llm_*, attn.h) against transformers:
 * tests/fixtures/llama_tiny (tied embeddings, BF16 weights, rope_theta 1e5, config.json of
 * transformers 5) and llama_tiny_untied (lm_head, attention and MLP biases, F16 weights,
 * rope_theta 1e4, SmolLM2's older config.json), with the logits and greedy continuations of
 * tests/fixtures/<name>_expected.safetensors (tests/gen_llama.py).  Checks: full-sequence
 * logits, prefill + decode against them (F32 and BF16 caches), greedy continuations, thread
 * counts, batches, the context-full status, the sampler's filters, stream and ties (also against
 * transformers' logits processors: tests/fixtures/llama_sampler_expected.safetensors), and the
 * loader's refusals (hostile config.json values refused before anything is sized from them). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
/* the model's internals, for the GGUF layout check (permuted q/k rows, interleaved RoPE) */
#include "../src/models/llm_model.h"
#include "../src/core/internal.h"

#define V 256
#define MAXT 64

/* The expected file of a model. */
typedef struct ref {
    int32_t ids[3][MAXT];
    int64_t len[3];
    float *logits[3]; /* [len, V] */
    int32_t prompt[2][MAXT], greedy[2][20];
    int64_t plen[2];
    double margin[2];
} ref;

static int read_ids(attn_ctx *ctx, const attn_st *st, const char *name, int32_t *out,
                    int64_t cap, int64_t *n) {
    attn_st_tensor t;
    if (attn_st_find(st, name, &t) != ATTN_OK || t.numel > cap) return 0;
    float tmp[MAXT];
    if (attn_st_to_f32(ctx, &t, tmp, (size_t)t.numel) != ATTN_OK) return 0;
    for (int64_t i = 0; i < t.numel; i++) out[i] = (int32_t)tmp[i];
    *n = t.numel;
    return 1;
}

static int load_ref(attn_ctx *ctx, const char *path, ref *r) {
    attn_st *st = NULL;
    memset(r, 0, sizeof *r);
    if (!TU_STATUS(attn_st_read_file(ctx, path, &st), ATTN_OK, ctx)) return 0;
    static const int T[3] = {1, 7, 33};
    int ok = 1;
    for (int i = 0; i < 3 && ok; i++) {
        char n[32];
        attn_st_tensor t;
        snprintf(n, sizeof n, "ids.%d", T[i]);
        ok = read_ids(ctx, st, n, r->ids[i], MAXT, &r->len[i]);
        snprintf(n, sizeof n, "logits.%d", T[i]);
        ok = ok && attn_st_find(st, n, &t) == ATTN_OK && t.numel == T[i] * V;
        r->logits[i] = ok ? malloc((size_t)t.numel * sizeof(float)) : NULL;
        ok = ok && r->logits[i] && attn_st_to_f32(ctx, &t, r->logits[i], (size_t)t.numel) == 0;
    }
    for (int k = 0; k < 2 && ok; k++) {
        char n[32];
        int64_t g;
        snprintf(n, sizeof n, "prompt.%d", k);
        ok = read_ids(ctx, st, n, r->prompt[k], MAXT, &r->plen[k]);
        snprintf(n, sizeof n, "greedy.%d", k);
        ok = ok && read_ids(ctx, st, n, r->greedy[k], 20, &g) && g == 20;
        snprintf(n, sizeof n, "margin.%d", k);
        ok = ok && attn_st_meta(st, n);
        if (ok) r->margin[k] = atof(attn_st_meta(st, n));
    }
    attn_st_free(st);
    TU_CHECK(ok, "%s: incomplete", path);
    return ok;
}

static void free_ref(ref *r) {
    for (int i = 0; i < 3; i++) free(r->logits[i]);
}

static double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* max |got - want| / max |want|, NaN counting as infinite. */
static double rel_err(const float *got, const float *want, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= e)) e = isnan(d) ? INFINITY : d;
    }
    return e / max_abs(want, n);
}

static int argmax(const float *x, int64_t n) {
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int)i;
    return b;
}

/* Measured worst errors, printed at the end (docs/llm.md quotes them). */
static double worst_fwd, worst_sess, worst_bf16;

/* Full forward: the logits of each sequence against transformers. */
static void check_forward(attn_ctx *ctx, const attn_llm *m, const ref *r, const char *name) {
    static float lg[MAXT * V];
    for (int i = 0; i < 3; i++) {
        const int64_t T = r->len[i];
        if (!TU_STATUS(attn_llm_forward(ctx, m, r->ids[i], 1, T, lg), ATTN_OK, ctx)) continue;
        double e = rel_err(lg, r->logits[i], (size_t)(T * V));
        if (e > worst_fwd) worst_fwd = e;
        /* 1e-5 of max|logit|: float32 against float32, the sums in other orders */
        TU_CHECK(e <= 1e-5, "%s: forward T=%lld: max error %.3g of max|logit|", name,
                 (long long)T, e);
    }
}

/* Two sequences in one batch give each one's logits alone, bit for bit. */
static void check_batch(attn_ctx *ctx, const attn_llm *m, const ref *r, const char *name) {
    static float one[2][7 * V], two[2 * 7 * V];
    int32_t ids[14];
    memcpy(ids, r->ids[1], 7 * sizeof *ids);
    memcpy(ids + 7, r->ids[2] + 3, 7 * sizeof *ids);
    TU_STATUS(attn_llm_forward(ctx, m, ids, 1, 7, one[0]), ATTN_OK, ctx);
    TU_STATUS(attn_llm_forward(ctx, m, ids + 7, 1, 7, one[1]), ATTN_OK, ctx);
    TU_STATUS(attn_llm_forward(ctx, m, ids, 2, 7, two), ATTN_OK, ctx);
    TU_CHECK(!memcmp(two, one[0], sizeof one[0]) && !memcmp(two + 7 * V, one[1], sizeof one[1]),
             "%s: a batch of two differs from the sequences alone", name);
}

/* Prefill of the first `pre` tokens of the 33-token sequence (in chunks), then decode of the
 * rest: each step's logits against transformers' for that position. */
static double session_err(attn_ctx *ctx, const attn_llm *m, const ref *r, attn_dtype dt,
                          int64_t pre, int64_t chunk, const char *name) {
    attn_llm_session *s = NULL;
    double worst = 0;
    static float lg[V];
    const int32_t *ids = r->ids[2];
    const float *want = r->logits[2];
    if (!TU_STATUS(attn_llm_session_create(ctx, m, 40, dt, &s), ATTN_OK, ctx)) return INFINITY;
    for (int64_t p = 0; p < pre; p += chunk) {
        int64_t n = pre - p < chunk ? pre - p : chunk;
        if (!TU_STATUS(attn_llm_session_prefill(ctx, s, ids + p, n, lg), ATTN_OK, ctx)) {
            attn_llm_session_free(s);
            return INFINITY;
        }
        double e = rel_err(lg, want + (p + n - 1) * V, V);
        worst = e > worst ? e : worst;
    }
    TU_CHECK(attn_llm_session_pos(s) == pre, "%s: position after prefill", name);
    for (int64_t t = pre; t < 33; t++) {
        if (!TU_STATUS(attn_llm_session_decode(ctx, s, ids[t], lg), ATTN_OK, ctx)) break;
        double e = rel_err(lg, want + t * V, V);
        worst = e > worst ? e : worst;
    }
    TU_CHECK(attn_llm_session_pos(s) == 33, "%s: position after decode", name);
    attn_llm_session_free(s);
    return worst;
}

static void check_sessions(attn_ctx *ctx, const attn_llm *m, const ref *r, const char *name) {
    /* whole prompts, chunked prompts, one token at a time */
    static const int64_t pre[4][2] = {{33, 33}, {20, 20}, {20, 7}, {1, 1}};
    for (int i = 0; i < 4; i++) {
        double e = session_err(ctx, m, r, ATTN_F32, pre[i][0], pre[i][1], name);
        if (e > worst_sess) worst_sess = e;
        TU_CHECK(e <= 1e-5, "%s: session (prefill %lld in chunks of %lld, F32 cache): max "
                 "error %.3g of max|logit|", name, (long long)pre[i][0], (long long)pre[i][1],
                 e);
        e = session_err(ctx, m, r, ATTN_BF16, pre[i][0], pre[i][1], name);
        if (e > worst_bf16) worst_bf16 = e;
        /* bf16 keys, values and queries: 2^-8 relative each, through two layers */
        TU_CHECK(e <= 2e-2, "%s: session (prefill %lld in chunks of %lld, BF16 cache): max "
                 "error %.3g of max|logit|", name, (long long)pre[i][0], (long long)pre[i][1],
                 e);
    }
}

/* Greedy generation through a session: transformers' generate() tokens exactly. */
static void check_greedy(attn_ctx *ctx, const attn_llm *m, const ref *r, const char *name) {
    attn_llm_sampler g = attn_llm_sampler_defaults();
    g.temperature = 0;
    for (int k = 0; k < 2; k++) {
        attn_llm_session *s = NULL;
        if (!TU_STATUS(attn_llm_session_create(ctx, m, 64, ATTN_F32, &s), ATTN_OK, ctx)) return;
        static float lg[V];
        int32_t got[20], hist[MAXT + 20];
        TU_STATUS(attn_llm_session_prefill(ctx, s, r->prompt[k], r->plen[k], lg), ATTN_OK, ctx);
        for (int i = 0; i < 20; i++) {
            TU_STATUS(attn_llm_sample(ctx, &g, lg, V, hist, 0, NULL, &got[i]), ATTN_OK, ctx);
            TU_CHECK(got[i] == argmax(lg, V), "greedy sample is the argmax");
            if (i < 19) TU_STATUS(attn_llm_session_decode(ctx, s, got[i], lg), ATTN_OK, ctx);
        }
        TU_CHECK(!memcmp(got, r->greedy[k], sizeof got), "%s: greedy continuation %d differs "
                 "from transformers' generate() (first tokens %d %d %d vs %d %d %d)", name, k,
                 got[0], got[1], got[2], r->greedy[k][0], r->greedy[k][1], r->greedy[k][2]);
        attn_llm_session_free(s);
        (void)hist;
    }
}

/* 1 and 2 threads: the same bits (forward and a session). */
static void check_threads(const attn_llm *m, const ref *r, const char *name) {
    static float a[33 * V], b[33 * V];
    float *out[2] = {a, b};
    for (int th = 1; th <= 2; th++) {
        attn_ctx *c = tu_ctx(th);
        attn_llm_session *s = NULL;
        float *o = out[th - 1];
        TU_STATUS(attn_llm_forward(c, m, r->ids[2], 1, 33, o), ATTN_OK, c);
        TU_STATUS(attn_llm_session_create(c, m, 40, ATTN_BF16, &s), ATTN_OK, c);
        TU_STATUS(attn_llm_session_prefill(c, s, r->ids[2], 16, o), ATTN_OK, c);
        for (int t = 16; t < 33; t++)
            TU_STATUS(attn_llm_session_decode(c, s, r->ids[2][t], o + (t - 16 + 1) * V),
                      ATTN_OK, c);
        attn_llm_session_free(s);
        attn_ctx_free(c);
    }
    TU_CHECK(!memcmp(a, b, sizeof a), "%s: 1 and 2 threads differ", name);
}

/* Context full: ATTN_E_OVERFLOW, nothing changed, the session still usable. */
static void check_context_full(attn_ctx *ctx, const attn_llm *m, const ref *r) {
    attn_llm_session *s = NULL;
    static float lg[V], lg2[V];
    if (!TU_STATUS(attn_llm_session_create(ctx, m, 8, ATTN_F32, &s), ATTN_OK, ctx)) return;
    TU_CHECK(attn_llm_session_capacity(s) == 8, "capacity");
    TU_STATUS(attn_llm_session_prefill(ctx, s, r->ids[2], 6, lg), ATTN_OK, ctx);
    TU_STATUS(attn_llm_session_prefill(ctx, s, r->ids[2] + 6, 3, lg), ATTN_E_OVERFLOW, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "context full") != NULL, "message: %s",
             attn_ctx_errmsg(ctx));
    TU_CHECK(attn_llm_session_pos(s) == 6, "position unchanged after context full");
    TU_STATUS(attn_llm_session_decode(ctx, s, r->ids[2][6], lg), ATTN_OK, ctx);
    TU_STATUS(attn_llm_session_decode(ctx, s, r->ids[2][7], lg), ATTN_OK, ctx);
    TU_CHECK(rel_err(lg, r->logits[2] + 7 * V, V) <= 1e-5, "after a refused prefill");
    TU_STATUS(attn_llm_session_decode(ctx, s, 1, lg2), ATTN_E_OVERFLOW, ctx);
    TU_CHECK(attn_llm_session_pos(s) == 8, "position unchanged after context full");
    /* a bad id is refused with the position unchanged */
    attn_llm_session_reset(s);
    TU_CHECK(attn_llm_session_pos(s) == 0, "reset");
    TU_STATUS(attn_llm_session_decode(ctx, s, V, lg2), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_session_prefill(ctx, s, r->ids[2], 0, lg2), ATTN_E_INVALID, ctx);
    TU_CHECK(attn_llm_session_pos(s) == 0, "position after refusals");
    TU_STATUS(attn_llm_session_prefill(ctx, s, r->ids[2], 8, lg), ATTN_OK, ctx);
    TU_STATUS(attn_llm_session_decode(ctx, s, 3, lg2), ATTN_E_OVERFLOW, ctx);
    attn_llm_session_reset(s);
    TU_STATUS(attn_llm_session_prefill(ctx, s, r->ids[2], 8, lg2), ATTN_OK, ctx);
    TU_CHECK(!memcmp(lg, lg2, sizeof lg), "after reset: the same logits as before");
    attn_llm_session_free(s);
    /* creation limits */
    TU_STATUS(attn_llm_session_create(ctx, m, 129, ATTN_F32, &s), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_session_create(ctx, m, 0, ATTN_F32, &s), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_session_create(ctx, m, 8, ATTN_F16, &s), ATTN_E_UNSUPPORTED, ctx);
    TU_CHECK(s == NULL, "no session on failure");
    int32_t bad[2] = {3, -1};
    static float big[2 * V];
    TU_STATUS(attn_llm_forward(ctx, m, bad, 1, 2, big), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_forward(ctx, m, bad, 1, 129, big), ATTN_E_INVALID, ctx);
    attn_ctx_clear_error(ctx);
}

/* The layout GGUF converters store: the rows of q_proj and k_proj (and their biases) permuted
 * within each head, new row 2i + j = old row j*D/2 + i, run with interleaved RoPE pairs: the
 * logits of transformers again (the q.k sums in another order). */
static void permute_rows(float *w, int64_t heads, int64_t D, int64_t K) {
    float *tmp = malloc((size_t)(D * K) * sizeof *tmp);
    for (int64_t h = 0; h < heads; h++) {
        float *blk = w + h * D * K;
        memcpy(tmp, blk, (size_t)(D * K) * sizeof *tmp);
        for (int64_t i = 0; i < D / 2; i++)
            for (int j = 0; j < 2; j++)
                memcpy(blk + (2 * i + j) * K, tmp + (j * D / 2 + i) * K,
                       (size_t)K * sizeof *tmp);
    }
    free(tmp);
}

static void check_gguf_layout(attn_ctx *ctx, attn_llm *m, const ref *r, const char *name) {
    const attn_llm_config *c = &m->cfg;
    for (int64_t l = 0; l < c->num_layers; l++) {
        attn__attention *a = &m->layers[l].at[0];
        permute_rows((float *)a->q.data, c->num_heads, c->head_dim, c->hidden_size);
        permute_rows((float *)a->k.data, c->num_kv_heads, c->head_dim, c->hidden_size);
        if (a->q.bias) permute_rows((float *)a->q.bias, c->num_heads, c->head_dim, 1);
        if (a->k.bias) permute_rows((float *)a->k.bias, c->num_kv_heads, c->head_dim, 1);
        a->rope_interleaved = 1;
    }
    static float lg[33 * V];
    TU_STATUS(attn_llm_forward(ctx, m, r->ids[2], 1, 33, lg), ATTN_OK, ctx);
    double e = rel_err(lg, r->logits[2], 33 * V);
    TU_CHECK(e <= 1e-5, "%s: permuted q/k rows with interleaved RoPE: error %.3g", name, e);
    double s = session_err(ctx, m, r, ATTN_F32, 20, 20, name);
    TU_CHECK(s <= 1e-5, "%s: the same through a session: error %.3g", name, s);
}

static void check_model(attn_ctx *ctx, const char *dir, const char *exp, const char *name,
                        int tied) {
    attn_llm *m = NULL;
    ref r;
    if (!TU_STATUS(attn_llm_load_hf(ctx, dir, &m), ATTN_OK, ctx)) return;
    attn_llm_config c;
    TU_STATUS(attn_llm_get_info(m, &c), ATTN_OK, ctx);
    TU_CHECK(c.vocab_size == V && c.hidden_size == 64 && c.num_layers == 2 &&
                 c.num_heads == 4 && c.num_kv_heads == 2 && c.head_dim == 16 &&
                 c.intermediate_size == 128 && c.max_position_embeddings == 128 &&
                 c.tie_word_embeddings == tied && c.attention_bias == !tied &&
                 c.mlp_bias == !tied && c.rms_norm_eps == 1e-5 &&
                 c.rope_theta == (tied ? 1e5 : 1e4),
             "%s: config as read", name);
    if (load_ref(ctx, exp, &r)) {
        check_forward(ctx, m, &r, name);
        check_batch(ctx, m, &r, name);
        check_sessions(ctx, m, &r, name);
        check_greedy(ctx, m, &r, name);
        check_threads(m, &r, name);
        if (tied) check_context_full(ctx, m, &r);
        check_gguf_layout(ctx, m, &r, name); /* changes m: last */
        printf("%s: greedy margins (best - second logit) %.3g, %.3g\n", name, r.margin[0],
               r.margin[1]);
    }
    free_ref(&r);
    attn_llm_free(m);
}

/* ---- the sampler ------------------------------------------------------------------------- */
/* Draws n tokens from logits with cfg (steps 0 .. n-1); counts[id] += 1. */
static void draw(attn_ctx *ctx, const attn_llm_sampler *cfg, const float *lg, int64_t nv,
                 int n, int *counts) {
    uint64_t step = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = -1;
        if (!TU_STATUS(attn_llm_sample(ctx, cfg, lg, nv, NULL, 0, &step, &id), ATTN_OK, ctx))
            return;
        if (id >= 0 && id < nv) counts[id]++;
    }
    TU_CHECK(step == (uint64_t)n, "step advanced once per draw");
}

/* ---- the sampler against a plain reference ------------------------------------------------
 * The reference sorts every candidate (decreasing logit, then increasing id), cuts the top-k
 * and top-p prefixes by walking that order (the weights summed in the order, in long double),
 * keeps min-p by weight, and draws in id order with the library's uniform: the contract of
 * attn_llm_sample.  The library finds the same sets without sorting. */
typedef struct rcand {
    float l;
    int32_t id;
} rcand;

static int rcand_cmp(const void *a, const void *b) {
    const rcand *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* the reference draw; *edge: the top-p cut lies within rounding of its goal */
static int32_t ref_sample(const float *l, int64_t nv, const attn_llm_sampler *c, uint64_t step,
                          int *edge) {
    rcand *r = malloc(sizeof *r * (size_t)nv);
    char *kept = calloc((size_t)nv, 1);
    double *w = malloc(sizeof *w * (size_t)nv);
    int64_t n = 0;
    for (int64_t i = 0; i < nv; i++)
        if (l[i] != -INFINITY) r[n].l = l[i], r[n++].id = (int32_t)i;
    qsort(r, (size_t)n, sizeof *r, rcand_cmp);
    const double T = c->temperature, top = (double)r[0].l / T;
    for (int64_t i = 0; i < nv; i++) w[i] = exp((double)l[i] / T - top);
    if (c->top_k > 0 && c->top_k < n) {
        const float kth = r[c->top_k - 1].l;
        int64_t k = c->top_k;
        while (k < n && r[k].l >= kth) k++;
        n = k;
    }
    *edge = 0;
    if (c->top_p < 1.0f && n > 1) {
        long double z = 0, cum = 0;
        for (int64_t i = 0; i < n; i++) z += w[r[i].id];
        const long double goal = (long double)c->top_p * z;
        for (int64_t i = 0; i < n; i++) {
            if (i >= 1 && cum >= goal) {
                n = i;
                break;
            }
            cum += w[r[i].id];
            if (fabsl(cum - goal) <= 1e-12L * goal) *edge = 1;
        }
    }
    for (int64_t i = 0; i < n; i++) kept[r[i].id] = w[r[i].id] >= (double)c->min_p;
    const uint32_t key[2] = {(uint32_t)c->seed, (uint32_t)(c->seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)step, (uint32_t)(step >> 32), 0x706d6173u, 0};
    uint32_t o[4];
    attn__philox(ctr, key, o);
    const double u = (double)(((uint64_t)o[0] << 32 | o[1]) >> 11) * (1.0 / 9007199254740992.0);
    double z = 0, run = 0;
    for (int64_t i = 0; i < nv; i++)
        if (kept[i]) z += w[i];
    int32_t pick = r[0].id;
    for (int64_t i = 0; i < nv; i++)
        if (kept[i]) {
            pick = (int32_t)i;
            run += w[i];
            if (run > u * z) break;
        }
    free(r), free(kept), free(w);
    return pick;
}

static void check_sampler_reference(attn_ctx *ctx) {
    static const int64_t nvs[] = {1, 2, 7, 100, 3000, 70000};
    static const float Ts[] = {0.3f, 1.0f, 2.5f}, ps[] = {1.0f, 0.95f, 0.5f, 0.01f},
                       mps[] = {0.0f, 0.05f, 0.5f}, sig[] = {0.5f, 3.0f, 20.0f};
    static const int64_t ks[] = {0, 1, 5, 50, 100000};
    uint64_t rs = 0x9e3779b97f4a7c15ull;
    int cases = 0, same = 0, edges = 0;
    float *l = malloc(sizeof *l * 70000);
    /* ATTN_TEST_QUICK (an emulator): 8 draws of 70000 logits, not 32 (the reference sorts
     * them each time); each scale, the ties and the holes still among them */
    const int reps_big = tu_quick("test_llama") ? 8 : 32;
    int want_cases = 0;
    for (int v = 0; v < 6; v++)
        for (int rep = 0; rep < (nvs[v] == 70000 ? reps_big : 32); rep++) {
            want_cases += 8;
            const int64_t nv = nvs[v];
            const float sg = sig[rep % 3];
            const int grid = rep % 4 == 1, holes = rep % 5 == 2;
            for (int64_t i = 0; i < nv; i++) {
                double a = 0;
                for (int j = 0; j < 4; j++) {
                    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
                    a += (double)(rs >> 11) * (1.0 / 9007199254740992.0);
                }
                float x = (float)((a - 2.0) * 1.7 * sg);
                if (grid) x = roundf(x * 2.0f) / 2.0f; /* ties */
                if (holes && (rs >> 7) % 9 == 0) x = -INFINITY;
                l[i] = x;
            }
            l[(rs >> 20) % (uint64_t)nv] = 4.0f * sg; /* at least one finite */
            attn_llm_sampler c = attn_llm_sampler_defaults();
            rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
            c.temperature = Ts[rs % 3];
            c.top_k = ks[(rs >> 8) % 5];
            c.top_p = ps[(rs >> 16) % 4];
            c.min_p = mps[(rs >> 24) % 3];
            c.seed = (uint64_t)rep * 7 + (uint64_t)v;
            uint64_t step = 5;
            for (int d = 0; d < 8; d++) {
                int edge = 0;
                const uint64_t s0 = step;
                const int32_t want = ref_sample(l, nv, &c, s0, &edge);
                int32_t got = -1;
                if (!TU_STATUS(attn_llm_sample(ctx, &c, l, nv, NULL, 0, &step, &got), ATTN_OK, ctx))
                    break;
                cases++;
                edges += edge;
                if (got == want) same++;
                else
                    TU_CHECK(edge, "sampler nv %lld T %g top_k %lld top_p %g min_p %g step %llu: "
                                   "%d, the reference %d",
                             (long long)nv, (double)c.temperature, (long long)c.top_k,
                             (double)c.top_p, (double)c.min_p, (unsigned long long)s0, got, want);
            }
        }
    free(l);
    TU_CHECK(cases == want_cases && same >= cases - 2,
             "sampler: %d of %d draws as the reference (%d at a top-p rounding edge)", same,
             cases, edges);
    printf("sampler: %d of %d draws as the sorting reference\n", same, cases);
}

static void check_sampler(attn_ctx *ctx) {
    attn_llm_sampler c = attn_llm_sampler_defaults();
    TU_CHECK(c.temperature == 1 && c.top_k == 0 && c.top_p == 1 && c.min_p == 0 &&
                 c.repetition_penalty == 1,
             "sampler defaults");
    /* probabilities 0.5, 0.3, 0.15, 0.05 in a shuffled order */
    const float p4[4] = {0.15f, 0.5f, 0.05f, 0.3f};
    float lg[4];
    for (int i = 0; i < 4; i++) lg[i] = logf(p4[i]) + 3.0f;
    int cnt[4];
    /* plain sampling: every token, at about its probability */
    memset(cnt, 0, sizeof cnt);
    draw(ctx, &c, lg, 4, 4000, cnt);
    for (int i = 0; i < 4; i++)
        TU_CHECK(fabs(cnt[i] / 4000.0 - p4[i]) < 0.03, "plain: token %d drawn %d / 4000", i,
                 cnt[i]);
    /* top-p 0.75: ascending cumulative 0.05, 0.2, 0.5, 1: 0.05 and 0.15 go (<= 0.25); (0.8
     * would put 0.2 on the edge, where float rounding decides, in PyTorch as here) */
    c.top_p = 0.75f;
    memset(cnt, 0, sizeof cnt);
    draw(ctx, &c, lg, 4, 4000, cnt);
    TU_CHECK(cnt[0] == 0 && cnt[2] == 0 && cnt[1] > 0 && cnt[3] > 0, "top-p 0.75 keeps {1, 3}");
    TU_CHECK(fabs(cnt[1] / 4000.0 - 0.625) < 0.03, "top-p: renormalised 0.5 / 0.8");
    /* top-p 0.81: 0.2 > 0.19: three */
    c.top_p = 0.81f;
    memset(cnt, 0, sizeof cnt);
    draw(ctx, &c, lg, 4, 2000, cnt);
    TU_CHECK(cnt[2] == 0 && cnt[0] > 0 && cnt[1] > 0 && cnt[3] > 0, "top-p 0.81 keeps {0,1,3}");
    /* a tiny top-p keeps the best alone */
    c.top_p = 0.01f;
    memset(cnt, 0, sizeof cnt);
    draw(ctx, &c, lg, 4, 100, cnt);
    TU_CHECK(cnt[1] == 100, "top-p 0.01 keeps the best");
    /* min-p 0.25: threshold 0.125 keeps 0.5, 0.3, 0.15 */
    c = attn_llm_sampler_defaults();
    c.min_p = 0.25f;
    memset(cnt, 0, sizeof cnt);
    draw(ctx, &c, lg, 4, 2000, cnt);
    TU_CHECK(cnt[2] == 0 && cnt[0] > 0 && cnt[1] > 0 && cnt[3] > 0, "min-p 0.25 keeps {0,1,3}");
    c.min_p = 0.61f; /* 0.3 / 0.5 = 0.6 < 0.61: the best alone */
    memset(cnt, 0, sizeof cnt);
    draw(ctx, &c, lg, 4, 100, cnt);
    TU_CHECK(cnt[1] == 100, "min-p 0.61 keeps the best");
    /* top-k 2 keeps {1, 3}; top-k with ties at the edge keeps them all */
    c = attn_llm_sampler_defaults();
    c.top_k = 2;
    memset(cnt, 0, sizeof cnt);
    draw(ctx, &c, lg, 4, 2000, cnt);
    TU_CHECK(cnt[0] == 0 && cnt[2] == 0 && cnt[1] > 0 && cnt[3] > 0, "top-k 2 keeps {1, 3}");
    const float tie[5] = {1.0f, 3.0f, -INFINITY, 3.0f, 2.0f};
    c.top_k = 1;
    int c5[5] = {0};
    draw(ctx, &c, tie, 5, 400, c5);
    TU_CHECK(c5[1] > 0 && c5[3] > 0 && c5[1] + c5[3] == 400, "top-k 1 keeps both ties");
    /* top-k 1 is greedy (distinct logits), on any seed and temperature */
    for (uint64_t seed = 0; seed < 5; seed++) {
        c.seed = seed, c.temperature = 0.3f + seed;
        memset(cnt, 0, sizeof cnt);
        draw(ctx, &c, lg, 4, 20, cnt);
        TU_CHECK(cnt[1] == 20, "top-k 1 is the argmax");
    }
    /* -inf is never drawn; greedy breaks ties by the lowest id */
    c = attn_llm_sampler_defaults();
    memset(c5, 0, sizeof c5);
    draw(ctx, &c, tie, 5, 1000, c5);
    TU_CHECK(c5[2] == 0, "-inf never drawn");
    int32_t id = -1;
    c.temperature = 0;
    TU_STATUS(attn_llm_sample(ctx, &c, tie, 5, NULL, 0, NULL, &id), ATTN_OK, ctx);
    TU_CHECK(id == 1, "greedy tie: the lowest id (got %d)", id);
    /* reproducible: the same seed and steps give the same tokens, another seed others */
    float big[1000];
    for (int i = 0; i < 1000; i++) big[i] = (float)((i * 7919) % 1000) / 250.0f;
    int32_t a[64], b[64], d[64];
    for (int run = 0; run < 3; run++) {
        attn_llm_sampler s = attn_llm_sampler_defaults();
        s.seed = run == 2 ? 43 : 42;
        s.top_p = 0.9f, s.top_k = 500;
        uint64_t step = 0;
        int32_t *o = run == 0 ? a : run == 1 ? b : d;
        for (int i = 0; i < 64; i++)
            TU_STATUS(attn_llm_sample(ctx, &s, big, 1000, NULL, 0, &step, &o[i]), ATTN_OK, ctx);
    }
    TU_CHECK(!memcmp(a, b, sizeof a), "same seed, same tokens");
    TU_CHECK(memcmp(a, d, sizeof a) != 0, "another seed, other tokens");
    {
        attn_ctx *c2 = tu_ctx(2);
        attn_llm_sampler s = attn_llm_sampler_defaults();
        s.seed = 42, s.top_p = 0.9f, s.top_k = 500;
        uint64_t step = 0;
        for (int i = 0; i < 64; i++)
            TU_STATUS(attn_llm_sample(c2, &s, big, 1000, NULL, 0, &step, &d[i]), ATTN_OK, c2);
        TU_CHECK(!memcmp(a, d, sizeof a), "2 threads, same tokens");
        attn_ctx_free(c2);
    }
    /* repetition penalty (HF: divide a positive logit, multiply a negative one), seen through
     * greedy decisions on both sides of the threshold */
    c = attn_llm_sampler_defaults();
    c.temperature = 0;
    const float pos2[2] = {1.0f, 1.3f}, neg2[2] = {-1.3f, -1.0f};
    const int32_t hist[3] = {1, 1, 7}; /* 7: outside the vocabulary, ignored */
    const float pens[2] = {1.29f, 1.31f};
    for (int k = 0; k < 2; k++) {
        c.repetition_penalty = pens[k];
        TU_STATUS(attn_llm_sample(ctx, &c, pos2, 2, hist, 3, NULL, &id), ATTN_OK, ctx);
        TU_CHECK(id == (k == 0 ? 1 : 0), "penalty %g on a positive logit: %d", pens[k], id);
        TU_STATUS(attn_llm_sample(ctx, &c, neg2, 2, hist, 3, NULL, &id), ATTN_OK, ctx);
        TU_CHECK(id == (k == 0 ? 1 : 0), "penalty %g on a negative logit: %d", pens[k], id);
    }
    /* a repeated id is penalised once (1.3 / 1.29 / 1.29 would flip it) */
    c.repetition_penalty = 1.29f;
    TU_STATUS(attn_llm_sample(ctx, &c, pos2, 2, hist, 2, NULL, &id), ATTN_OK, ctx);
    TU_CHECK(id == 1, "a repeated id is penalised once");
    /* refusals */
    const float nan2[2] = {0.0f, NAN}, inf2[2] = {-INFINITY, -INFINITY};
    c = attn_llm_sampler_defaults();
    uint64_t step = 0;
    TU_STATUS(attn_llm_sample(ctx, &c, nan2, 2, NULL, 0, &step, &id), ATTN_E_NONFINITE, ctx);
    TU_STATUS(attn_llm_sample(ctx, &c, inf2, 2, NULL, 0, &step, &id), ATTN_E_NONFINITE, ctx);
    TU_STATUS(attn_llm_sample(ctx, &c, pos2, 2, NULL, 0, NULL, &id), ATTN_E_INVALID, ctx);
    c.top_p = 0;
    TU_STATUS(attn_llm_sample(ctx, &c, pos2, 2, NULL, 0, &step, &id), ATTN_E_INVALID, ctx);
    c = attn_llm_sampler_defaults();
    c.temperature = -1;
    TU_STATUS(attn_llm_sample(ctx, &c, pos2, 2, NULL, 0, &step, &id), ATTN_E_INVALID, ctx);
    c = attn_llm_sampler_defaults();
    c.repetition_penalty = 0;
    TU_STATUS(attn_llm_sample(ctx, &c, pos2, 2, NULL, 0, &step, &id), ATTN_E_INVALID, ctx);
    TU_CHECK(step == 0, "no draw on refusal");
    attn_ctx_clear_error(ctx);
}

/* presence_penalty and frequency_penalty (attn_llm_sample_ex) against a plain computation of
 * OpenAI's formula, l[j] - (count[j] * frequency + (count[j] > 0) * presence) with count over
 * the generated ids only: greedy choices that the penalties must flip (and that the prompt's
 * ids must not), the order after the repetition penalty, and the distribution of 20000 draws
 * against the softmax of the reference logits (within 4.5 standard deviations + 0.002). */
static void check_penalties(attn_ctx *ctx) {
    enum { PV = 40, NP = 6, NG = 9, N = 20000 };
    float lg[PV];
    for (int j = 0; j < PV; j++) lg[j] = (float)((j * 37) % 23) / 7.0f - 1.5f;
    /* the prompt then the completion; 3 and 5 generated more than once, 11 only in the prompt,
     * -2 and 99 outside the vocabulary (ignored) */
    const int32_t hist[NP + NG] = {11, 11, 3, 20, 5, 11, 3, 5, 3, 7, -2, 5, 99, 3, 20};
    const float pres = 0.7f, freq = 0.45f;
    double ref[PV];
    for (int j = 0; j < PV; j++) {
        int cnt = 0;
        for (int i = NP; i < NP + NG; i++) cnt += hist[i] == j;
        ref[j] = (double)lg[j] - (cnt * (double)freq + (cnt > 0 ? (double)pres : 0.0));
    }
    attn_llm_sampler c = attn_llm_sampler_defaults();
    TU_CHECK(c.presence_penalty == 0 && c.frequency_penalty == 0, "penalties off by default");
    c.presence_penalty = pres, c.frequency_penalty = freq, c.seed = 9;
    /* the distribution */
    int counts[PV] = {0};
    uint64_t step = 0;
    for (int i = 0; i < N; i++) {
        int32_t id = -1;
        if (attn_llm_sample_ex(ctx, &c, lg, PV, hist, NP + NG, NP, &step, &id) != ATTN_OK) {
            TU_CHECK(0, "sample_ex: %s", attn_ctx_errmsg(ctx));
            break;
        }
        if (id >= 0 && id < PV) counts[id]++;
    }
    double mx = ref[0], z = 0, worst = 0;
    for (int j = 1; j < PV; j++) mx = ref[j] > mx ? ref[j] : mx;
    for (int j = 0; j < PV; j++) z += exp(ref[j] - mx);
    for (int j = 0; j < PV; j++) {
        const double p = exp(ref[j] - mx) / z, f = (double)counts[j] / N;
        const double tol = 4.5 * sqrt(p * (1 - p) / N) + 0.002;
        TU_CHECK(fabs(f - p) <= tol, "penalised distribution, token %d: %.4f drawn, %.4f expected",
                 j, f, p);
        worst = fabs(f - p) > worst ? fabs(f - p) : worst;
    }
    /* greedy: token 0 leads by 0.5; generated twice it loses 2 * 0.2 + 0.3 = 0.7 */
    float two[3] = {2.0f, 1.5f, 0.0f};
    const int32_t h2[4] = {0, 2, 0, 0}; /* prompt {0, 2}, then 0, 0 */
    c = attn_llm_sampler_defaults();
    c.temperature = 0, c.presence_penalty = 0.3f, c.frequency_penalty = 0.2f;
    int32_t id = -1;
    TU_STATUS(attn_llm_sample_ex(ctx, &c, two, 3, h2, 4, 2, NULL, &id), ATTN_OK, ctx);
    TU_CHECK(id == 1, "the penalties move the argmax (got %d)", id);
    TU_STATUS(attn_llm_sample_ex(ctx, &c, two, 3, h2, 4, 4, NULL, &id), ATTN_OK, ctx);
    TU_CHECK(id == 0, "the prompt's ids are not counted (got %d)", id);
    c.presence_penalty = 0.0f, c.frequency_penalty = 0.2f; /* 2 * 0.2 < 0.5 */
    TU_STATUS(attn_llm_sample_ex(ctx, &c, two, 3, h2, 4, 2, NULL, &id), ATTN_OK, ctx);
    TU_CHECK(id == 0, "a penalty too small keeps the argmax (got %d)", id);
    /* attn_llm_sample counts the whole history: 0 three times, 3 * 0.2 > 0.5 */
    TU_STATUS(attn_llm_sample(ctx, &c, two, 3, h2, 4, NULL, &id), ATTN_OK, ctx);
    TU_CHECK(id == 1, "attn_llm_sample counts all the history (got %d)", id);
    /* negative: a repeated token favoured (token 1 generated: 1.5 + 0.6 > 2) */
    const int32_t h3[2] = {1, 1};
    c.frequency_penalty = -0.3f;
    TU_STATUS(attn_llm_sample_ex(ctx, &c, two, 3, h3, 2, 0, NULL, &id), ATTN_OK, ctx);
    TU_CHECK(id == 1, "a negative frequency penalty favours repeats (got %d)", id);
    /* after the repetition penalty: 2.0 / 2 - 0.5 = 0.5 < 0.6 (the other order: 0.75) */
    const float ord[2] = {2.0f, 0.6f};
    const int32_t h4[1] = {0};
    c = attn_llm_sampler_defaults();
    c.temperature = 0, c.repetition_penalty = 2.0f, c.presence_penalty = 0.5f;
    TU_STATUS(attn_llm_sample_ex(ctx, &c, ord, 2, h4, 1, 0, NULL, &id), ATTN_OK, ctx);
    TU_CHECK(id == 1, "penalties after the repetition penalty (got %d)", id);
    /* -inf stays -inf under a negative penalty; a huge one is clamped, not +inf */
    const float ninf[2] = {-INFINITY, 0.0f};
    const int32_t h5[2] = {0, 1};
    c = attn_llm_sampler_defaults();
    c.temperature = 0, c.presence_penalty = -1e38f, c.frequency_penalty = -1e38f;
    TU_STATUS(attn_llm_sample_ex(ctx, &c, ninf, 2, h5, 2, 0, NULL, &id), ATTN_OK, ctx);
    TU_CHECK(id == 1, "-inf is never chosen (got %d)", id);
    /* refusals */
    c = attn_llm_sampler_defaults();
    c.presence_penalty = NAN;
    TU_STATUS(attn_llm_sample_ex(ctx, &c, two, 3, h2, 4, 0, &step, &id), ATTN_E_INVALID, ctx);
    c.presence_penalty = 0, c.frequency_penalty = INFINITY;
    TU_STATUS(attn_llm_sample_ex(ctx, &c, two, 3, h2, 4, 0, &step, &id), ATTN_E_INVALID, ctx);
    c.frequency_penalty = 0;
    TU_STATUS(attn_llm_sample_ex(ctx, &c, two, 3, h2, 4, 5, &step, &id), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_sample_ex(ctx, &c, two, 3, h2, 4, -1, &step, &id), ATTN_E_INVALID, ctx);
    attn_ctx_clear_error(ctx);
    printf("penalties: %d draws within %.4f of the reference distribution\n", N, worst);
}

/* Against transformers' processors (tests/fixtures/llama_sampler_expected.safetensors): the
 * greedy choice after the repetition penalty, and the distribution after the whole chain:
 * tokens HF removes are never drawn, the others at their probability (3000 draws: within 0.035,
 * about four standard deviations; every token of probability > 0.03 drawn). */
static void check_sampler_hf(attn_ctx *ctx) {
    attn_st *st = NULL;
    if (!TU_STATUS(attn_st_read_file(ctx, "fixtures/llama_sampler_expected.safetensors", &st),
                   ATTN_OK, ctx))
        return;
    const int n = atoi(attn_st_meta(st, "cases") ? attn_st_meta(st, "cases") : "0");
    TU_CHECK(n >= 20, "sampler cases: %d", n);
    enum { NV = 16, DRAWS = 3000 };
    double worst = 0;
    for (int k = 0; k < n; k++) {
        char nm[32];
        float lg[NV], par[5], pr[NV], hf[6], gr[1];
        float *dst[5] = {lg, hf, par, gr, pr};
        static const char *const what[5] = {"logits", "history", "params", "greedy", "probs"};
        static const size_t len[5] = {NV, 6, 5, 1, NV};
        int ok = 1;
        for (int i = 0; i < 5 && ok; i++) {
            attn_st_tensor t;
            snprintf(nm, sizeof nm, "%s.%d", what[i], k);
            ok = attn_st_find(st, nm, &t) == ATTN_OK && (size_t)t.numel == len[i] &&
                 attn_st_to_f32(ctx, &t, dst[i], len[i]) == ATTN_OK;
        }
        TU_CHECK(ok, "sampler case %d incomplete", k);
        if (!ok) continue;
        int32_t hist[6];
        for (int i = 0; i < 6; i++) hist[i] = (int32_t)hf[i];
        attn_llm_sampler c = attn_llm_sampler_defaults();
        c.repetition_penalty = par[0];
        c.temperature = 0;
        int32_t id = -1;
        TU_STATUS(attn_llm_sample(ctx, &c, lg, NV, hist, 6, NULL, &id), ATTN_OK, ctx);
        TU_CHECK(id == (int32_t)gr[0], "case %d: greedy with penalty %g: %d, HF %d", k,
                 (double)par[0], id, (int)gr[0]);
        c.temperature = par[1], c.top_k = (int64_t)par[2], c.top_p = par[3], c.min_p = par[4];
        c.seed = (uint64_t)k;
        int cnt[NV] = {0};
        uint64_t step = 0;
        for (int d = 0; d < DRAWS; d++) {
            if (!TU_STATUS(attn_llm_sample(ctx, &c, lg, NV, hist, 6, &step, &id), ATTN_OK, ctx))
                break;
            if (id >= 0 && id < NV) cnt[id]++;
        }
        for (int j = 0; j < NV; j++) {
            const double f = cnt[j] / (double)DRAWS, e = fabs(f - pr[j]);
            worst = e > worst ? e : worst;
            TU_CHECK(pr[j] > 0 || cnt[j] == 0, "case %d: token %d drawn, HF removed it", k, j);
            TU_CHECK(pr[j] <= 0.03 || cnt[j] > 0, "case %d: token %d (p %.3f) never drawn", k, j,
                     (double)pr[j]);
            TU_CHECK(e < 0.035, "case %d: token %d drawn %.3f, HF's probability %.3f", k, j, f,
                     (double)pr[j]);
        }
    }
    printf("sampler: %d cases against transformers' processors, max |frequency - p| %.3f\n", n,
           worst);
    attn_st_free(st);
}

/* ---- refusals ---------------------------------------------------------------------------- */
static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[65536];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) fputs(text, f), fclose(f);
}

/* An allocator that records the largest request: nothing sized from a hostile config. */
static size_t biggest;
static void *rec_alloc(void *u, size_t n) {
    (void)u;
    if (n > biggest) biggest = n;
    return malloc(n);
}
static void rec_free(void *u, void *p) {
    (void)u;
    free(p);
}

static void expect_refusal(attn_ctx *ctx, const char *dir, attn_status want,
                           const char *needle) {
    attn_llm *m = NULL;
    biggest = 0;
    attn_status st = attn_llm_load_hf(ctx, dir, &m);
    TU_CHECK(st == want, "load: got %s, want %s (%s)", attn_status_name(st),
             attn_status_name(want), attn_ctx_errmsg(ctx));
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), needle) != NULL, "message \"%s\" does not name \"%s\"",
             attn_ctx_errmsg(ctx), needle);
    TU_CHECK(m == NULL, "no model on failure");
    /* the file image and the config text are read; nothing much larger */
    TU_CHECK(biggest < (1u << 20), "an allocation of %zu bytes for a refused model", biggest);
    attn_llm_free(m);
    attn_ctx_clear_error(ctx);
}

/* config.json of the tiny tied model with one field replaced (or added). */
static void config_with(const char *path, const char *key, const char *value) {
    static const char *keys[] = {"architectures", "model_type", "hidden_act", "hidden_size",
                                 "intermediate_size", "num_hidden_layers",
                                 "num_attention_heads", "num_key_value_heads", "head_dim",
                                 "vocab_size", "max_position_embeddings", "rms_norm_eps",
                                 "rope_parameters", "tie_word_embeddings"};
    static const char *vals[] = {"[\"LlamaForCausalLM\"]", "\"llama\"", "\"silu\"", "64", "128",
                                 "2", "4", "2", "16", "256", "128", "1e-05",
                                 "{\"rope_theta\": 100000.0, \"rope_type\": \"default\"}",
                                 "true"};
    char buf[4096];
    size_t o = (size_t)snprintf(buf, sizeof buf, "{");
    int seen = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = vals[i];
        if (key && !strcmp(key, keys[i])) {
            seen = 1;
            if (!value) continue; /* removed */
            v = value;
        }
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s\"%s\": %s", o > 1 ? ", " : "",
                              keys[i], v);
    }
    if (key && !seen && value)
        o += (size_t)snprintf(buf + o, sizeof buf - o, ", \"%s\": %s", key, value);
    snprintf(buf + o, sizeof buf - o, "}");
    write_text(path, buf);
}

static void check_refusals(void) {
    attn_ctx_params p = {0};
    p.threads = 1;
    p.alloc = rec_alloc, p.free = rec_free;
    attn_ctx *ctx;
    if (!TU_STATUS(attn_ctx_create(&p, &ctx), ATTN_OK, NULL)) return;
    char dir[] = "/tmp/attn_llama_XXXXXX";
    if (!mkdtemp(dir)) {
        TU_CHECK(0, "mkdtemp failed");
        attn_ctx_free(ctx);
        return;
    }
    char cfg[1200], st[1200];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    expect_refusal(ctx, dir, ATTN_E_NOT_FOUND, "config.json");
    config_with(cfg, NULL, NULL);
    expect_refusal(ctx, dir, ATTN_E_NOT_FOUND, "model.safetensors");
    copy_file("fixtures/llama_tiny/model.safetensors", st);
    /* the copy loads */
    attn_llm *m = NULL;
    if (TU_STATUS(attn_llm_load_hf(ctx, dir, &m), ATTN_OK, ctx)) attn_llm_free(m);
    /* "architectures": null (transformers' save of a model it read from GGUF): model_type
     * decides */
    config_with(cfg, "architectures", "null");
    m = NULL;
    if (TU_STATUS(attn_llm_load_hf(ctx, dir, &m), ATTN_OK, ctx)) attn_llm_free(m);
    static const struct {
        const char *key, *value;
        attn_status st;
        const char *needle;
    } cases[] = {
        {"model_type", "\"gpt_neox\"", ATTN_E_UNSUPPORTED, "model_type \"gpt_neox\""},
        {"model_type", "\"mistral\"", ATTN_E_FORMAT, "disagree"},
        {"architectures", "[\"GPTNeoXForCausalLM\"]", ATTN_E_UNSUPPORTED, "GPTNeoXForCausalLM"},
        {"hidden_act", "\"gelu\"", ATTN_E_UNSUPPORTED, "hidden activation \"gelu\""},
        {"rope_parameters", "{\"rope_type\": \"llama3\", \"factor\": 8.0}", ATTN_E_INVALID,
         "llama3 RoPE scaling needs"},
        {"rope_scaling", "{\"type\": \"yarn\", \"factor\": 2.0}", ATTN_E_UNSUPPORTED,
         "rope_scaling.type \"yarn\""},
        {"rope_scaling", "{\"type\": \"linear\", \"factor\": 0}", ATTN_E_INVALID,
         "rope scaling factor 0"},
        {"rope_parameters", "{\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}",
         ATTN_E_UNSUPPORTED, "partial_rotary_factor"},
        {"hidden_size", NULL, ATTN_E_FORMAT, "hidden_size is missing"},
        {"hidden_size", "64.5", ATTN_E_FORMAT, "hidden_size"},
        {"hidden_size", "\"64\"", ATTN_E_FORMAT, "hidden_size"},
        {"num_attention_heads", "6", ATTN_E_INVALID, "does not divide hidden_size"},
        {"num_key_value_heads", "3", ATTN_E_INVALID, "does not divide num_attention_heads"},
        {"head_dim", "15", ATTN_E_INVALID, "head_dim 15 is odd"},
        {"rms_norm_eps", "0", ATTN_E_INVALID, "rms_norm_eps"},
        {"rope_parameters", "{\"rope_theta\": -1}", ATTN_E_INVALID, "rope_theta"},
        {"rope_parameters", "{\"rope_theta\": 0.5}", ATTN_E_INVALID, "rope_theta 0.5"},
        {"tie_word_embeddings", "1", ATTN_E_FORMAT, "tie_word_embeddings"},
        /* hostile sizes: refused before anything is sized from them */
        {"num_hidden_layers", "1000000000", ATTN_E_UNSUPPORTED, "ATTN_LIMIT_LAYERS"},
        {"num_hidden_layers", "1000", ATTN_E_NOT_FOUND, "model.layers.2."},
        {"vocab_size", "1099511627776", ATTN_E_INVALID, "vocab_size"},
        {"hidden_size", "9223372036854775807", ATTN_E_INVALID, "hidden_size"},
        {"intermediate_size", "16777216", ATTN_E_SHAPE, "model.layers.0.mlp.gate_proj.weight"},
        {"max_position_embeddings", "-3", ATTN_E_INVALID, "max_position_embeddings"},
        {"num_attention_heads", "0", ATTN_E_INVALID, "num_attention_heads"},
        {"head_dim", "8388608", ATTN_E_INVALID, "num_attention_heads x head_dim"},
        {"head_dim", "4194304", ATTN_E_SHAPE, "model.layers.0.self_attn.q_proj.weight"},
        {"hidden_size", "16777216", ATTN_E_SHAPE, "model.embed_tokens.weight"},
        /* shapes that disagree with the file name the tensor */
        {"intermediate_size", "96", ATTN_E_SHAPE, "model.layers.0.mlp.gate_proj.weight"},
        {"vocab_size", "300", ATTN_E_SHAPE, "model.embed_tokens.weight"},
        {"tie_word_embeddings", "false", ATTN_E_NOT_FOUND, "lm_head.weight"},
        {"attention_bias", "true", ATTN_E_NOT_FOUND, "self_attn.q_proj.bias"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        config_with(cfg, cases[i].key, cases[i].value);
        expect_refusal(ctx, dir, cases[i].st, cases[i].needle);
    }
    write_text(cfg, "{\"model_type\": \"llama\", ");
    expect_refusal(ctx, dir, ATTN_E_FORMAT, "config.json");
    write_text(cfg, "{\"hidden_size\": 64}");
    expect_refusal(ctx, dir, ATTN_E_UNSUPPORTED, "names a model attn runs");
    write_text(cfg, "{\"architectures\": null, \"hidden_size\": 64}");
    expect_refusal(ctx, dir, ATTN_E_UNSUPPORTED, "names a model attn runs");
    /* a NaN weight: refused, naming the tensor */
    {
        config_with(cfg, NULL, NULL);
        FILE *f = fopen(st, "r+b");
        unsigned char h[8];
        if (f && fread(h, 1, 8, f) == 8) {
            uint64_t hl = 0;
            for (int k = 0; k < 8; k++) hl |= (uint64_t)h[k] << (8 * k);
            /* the last two bytes of the file: the last element of some tensor, as bf16 NaN */
            fseek(f, -2, SEEK_END);
            const unsigned char nan16[2] = {0xc0, 0x7f};
            fwrite(nan16, 1, 2, f);
            (void)hl;
        }
        if (f) fclose(f);
        expect_refusal(ctx, dir, ATTN_E_NONFINITE, "holds nan");
    }
    remove(cfg);
    remove(st);
    rmdir(dir);
    attn_ctx_free(ctx);
}

/* ---- the modules and ops, beyond the eval fixtures ---------------------------------------- */
static void check_modules(attn_ctx *ctx) {
    attn_llm_config c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 32, c.intermediate_size = 48, c.num_heads = 4, c.num_kv_heads = 2;
    c.rms_norm_eps = 1e-5, c.rope_theta = 1e4;
    attn_module *m = NULL;
    /* the other families' settings are refused by the single-layer modules, one by one (the
     * whole model trains them all) */
    for (int k = 0; k < 7; k++) {
        attn_llm_config b = c;
        b.num_layers = 1, b.vocab_size = 16, b.max_position_embeddings = 8;
        if (k == 0) b.qk_norm = 1;
        if (k == 1) b.sandwich_norm = 1;
        if (k == 2) b.mlp_act = 1;
        if (k == 3) b.embed_scale = 2;
        if (k == 4) b.sliding_window = 4;
        if (k == 5) b.sliding_period = 6;
        if (k == 6) b.rope_theta_local = 1e4;
        attn_module *x = NULL;
        TU_STATUS(attn_llama_layer_create(ctx, &b, &x), ATTN_E_UNSUPPORTED, ctx);
        TU_STATUS(attn_llama_attention_create(ctx, &b, &x), ATTN_E_UNSUPPORTED, ctx);
        TU_STATUS(attn_llama_mlp_create(ctx, &b, &x), ATTN_E_UNSUPPORTED, ctx);
        TU_CHECK(x == NULL, "a refused module was made (setting %d)", k);
        attn_llm *lm = NULL;
        TU_STATUS(attn_llm_create(ctx, &b, &lm), ATTN_OK, ctx);
        attn_llm_free(lm);
    }
    if (!TU_STATUS(attn_llama_layer_create(ctx, &c, &m), ATTN_OK, ctx)) return;
    TU_CHECK(!strcmp(attn_module_kind(m), "llama_layer"), "kind %s", attn_module_kind(m));
    const char *want[] = {"input_layernorm.weight", "self_attn.q_proj.weight",
                          "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                          "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
    TU_CHECK(attn_module_param_count(m) == 9, "9 parameters");
    for (size_t i = 0; i < 9 && i < attn_module_param_count(m); i++) {
        const char *n;
        attn_tensor v;
        attn_module_param_at(m, i, &n, &v);
        TU_CHECK(!strcmp(n, want[i]), "parameter %zu is %s, not %s", i, n, want[i]);
    }
    TU_STATUS(attn_module_init(ctx, m, 7), ATTN_OK, ctx);
    /* a [T, E] input gives the [1, T, E] result; default positions are 0 .. T-1 */
    float x[5 * 32], y2[5 * 32], y3[5 * 32], yp[5 * 32];
    tu_fill(x, 5 * 32, 3, -1, 1);
    attn_tensor X2 = attn_view2(x, 5, 32), Y2 = attn_view2(y2, 5, 32);
    attn_tensor X3 = attn_view3(x, 1, 5, 32), Y3 = attn_view3(y3, 1, 5, 32),
                YP = attn_view3(yp, 1, 5, 32);
    int64_t pos[5] = {0, 1, 2, 3, 4};
    int64_t ps[1] = {5};
    attn_tensor P = attn_tensor_make(pos, ATTN_I64, 1, ps);
    TU_STATUS(attn_llama_layer_forward(ctx, m, &X2, NULL, &Y2), ATTN_OK, ctx);
    TU_STATUS(attn_llama_layer_forward(ctx, m, &X3, NULL, &Y3), ATTN_OK, ctx);
    TU_STATUS(attn_llama_layer_forward(ctx, m, &X3, &P, &YP), ATTN_OK, ctx);
    TU_CHECK(!memcmp(y2, y3, sizeof y2) && !memcmp(y3, yp, sizeof y3), "[T, E] and positions");
    /* shifting every position changes q and k alike: with one token, nothing changes */
    pos[0] = 1000;
    attn_tensor X1 = attn_view3(x, 1, 1, 32), Y1 = attn_view3(y2, 1, 1, 32);
    ps[0] = 1;
    P = attn_tensor_make(pos, ATTN_I64, 1, ps);
    TU_STATUS(attn_llama_layer_forward(ctx, m, &X1, &P, &Y1), ATTN_OK, ctx);
    TU_CHECK(tu_close("one token at position 1000", y2, y3, 32, 1e-6), "rope shift");
    /* refusals: output over the input, bad positions */
    TU_STATUS(attn_llama_layer_forward(ctx, m, &X3, NULL, &X3), ATTN_E_INVALID, ctx);
    pos[0] = -1;
    TU_STATUS(attn_llama_layer_forward(ctx, m, &X1, &P, &Y1), ATTN_E_INVALID, ctx);
    attn_module_free(m);
    c.num_kv_heads = 3;
    TU_STATUS(attn_llama_attention_create(ctx, &c, &m), ATTN_E_INVALID, ctx);
    c.num_kv_heads = 2, c.intermediate_size = 0;
    TU_STATUS(attn_llama_mlp_create(ctx, &c, &m), ATTN_E_INVALID, ctx);
    TU_CHECK(m == NULL, "no module on failure");
    /* rms_norm in place and with a strided view; rope in place */
    float r[3 * 20], r2[3 * 20], w[20];
    tu_fill(r, 60, 5, -3, 3);
    tu_fill(w, 20, 6, 0.5f, 1.5f);
    memcpy(r2, r, sizeof r);
    attn_tensor R = attn_view2(r, 3, 20), R2 = attn_view2(r2, 3, 20), Wt = attn_view1(w, 20);
    TU_STATUS(attn_rms_norm(ctx, &R, &Wt, 1e-5f, &R), ATTN_OK, ctx);
    for (int i = 0; i < 3; i++) {
        double ss = 0;
        for (int e = 0; e < 20; e++) ss += (double)r2[i * 20 + e] * r2[i * 20 + e];
        double rs = 1.0 / sqrt(ss / 20 + 1e-5);
        for (int e = 0; e < 20; e++) {
            double want = w[e] * (r2[i * 20 + e] * rs);
            TU_CHECK(fabs(r[i * 20 + e] - want) <= 4e-7 * (fabs(want) + 1e-3),
                     "rms_norm [%d, %d]: %g vs %g", i, e, r[i * 20 + e], want);
        }
    }
    TU_STATUS(attn_rms_norm(ctx, &R2, &Wt, 0.0f, &R2), ATTN_E_INVALID, ctx);
    attn_ctx_clear_error(ctx);
}

int main(void) {
    attn_ctx *ctx = tu_ctx(2);
    if (!ctx) return 1;
    check_model(ctx, "fixtures/llama_tiny", "fixtures/llama_tiny_expected.safetensors",
                "llama_tiny", 1);
    check_model(ctx, "fixtures/llama_tiny_untied",
                "fixtures/llama_tiny_untied_expected.safetensors", "llama_tiny_untied", 0);
    printf("max error / max|logit| against transformers: forward %.3g, sessions F32 %.3g, "
           "BF16 %.3g\n", worst_fwd, worst_sess, worst_bf16);
    check_sampler(ctx);
    check_sampler_reference(ctx);
    check_penalties(ctx);
    check_sampler_hf(ctx);
    check_modules(ctx);
    check_refusals();
    attn_llm_free(NULL);
    attn_llm_session_free(NULL);
    TU_CHECK(attn_llm_session_pos(NULL) == 0, "NULL session");
    attn_ctx_free(ctx);
    return tu_finish("test_llama");
}
