/* Every LLM family attn loads, on tiny random models that transformers made
 * (tests/gen_families.py): Llama 3 with its "llama3" RoPE scaling, Mistral with a sliding window,
 * Qwen2 with q/k/v biases, Qwen3 with QK-norm and head_dim != E / H, Gemma 3 with local and
 * global layers.  Each as a Hugging Face folder and as the GGUF file llama.cpp's converter made
 * of it, against the logits of transformers: the full forward, the session path (prefill, then
 * one token at a time through the KV cache), 1 and 2 threads bit-identical, the family's
 * settings as attn_llm_get_info reports them, and training refused where it is not written. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn.h"
#include "testutil.h"
#include "../src/models/llm_model.h"

#define MAXT 64
#define TOL 2e-5 /* of max|logit| */

typedef struct ref {
    int32_t ids[MAXT];
    int64_t n, V;
    double mx;
    float *lg; /* [n, V] */
} ref;

static int read_ref(const char *path, ref *r) {
    FILE *f = fopen(path, "r");
    memset(r, 0, sizeof *r);
    if (!f) return 0;
    char *l;
    for (; (l = tu_read_line(f)); free(l)) {
        char *p = l + 2;
        if (l[0] == 'I') {
            r->n = strtoll(p, &p, 10);
            if (r->n > MAXT) r->n = MAXT;
            for (int64_t i = 0; i < r->n; i++) r->ids[i] = (int32_t)strtol(p, &p, 10);
        } else if (l[0] == 'M') {
            r->mx = strtod(p, NULL);
        } else if (l[0] == 'L') {
            int64_t pos = strtoll(p, &p, 10), k = strtoll(p, &p, 10);
            if (!r->lg) {
                r->V = k;
                r->lg = calloc((size_t)(r->n * k), sizeof(float));
            }
            for (int64_t j = 0; r->lg && j < k && k == r->V && pos >= 0 && pos < r->n; j++)
                r->lg[pos * k + j] = strtof(p, &p);
        }
    }
    fclose(f);
    return r->n > 0 && r->lg != NULL && r->mx > 0;
}

static double worst(const float *a, const float *b, int64_t n, double mx) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / mx;
        if (!(d <= w)) w = d; /* NaN sticks */
    }
    return w;
}

typedef struct fam {
    const char *name, *gguf_ref; /* gguf_ref: another reference for the GGUF file */
    int attention_bias, qk_norm, sandwich_norm, mlp_act, rope_scaling_hf, rope_scaling_gguf;
    int64_t window, period, head_dim;
} fam;

static const fam fams[] = {
    {"llama3", NULL, 0, 0, 0, 0, 2, 3, 0, 0, 8},
    {"mistral", "mistral_gguf", 0, 0, 0, 0, 0, 0, 6, 0, 8},
    {"qwen2", NULL, 2, 0, 0, 0, 0, 0, 0, 0, 8},
    {"qwen3", NULL, 0, 1, 0, 0, 0, 0, 0, 0, 16},
    {"gemma3", NULL, 0, 1, 1, 1, 0, 0, 4, 6, 16},
};

/* Continuous batching: six sessions of m (prompts of 5, 39, 2, 34, 3 and 40 tokens, cycling
 * through ids, and 3, 2, 7, 1, 9, 2 more, each prefilled by attn_llm_session_prefill_batch and
 * compared with attn_llm_session_prefill alone, bit for bit: logits and, through the decoding
 * after, the caches; the second and fourth with a bf16 cache; more than ATTN__QMV_MAX rows, so the
 * wide kernels; three past ATTN__DECODE_MIN_S keys, so their attention runs as one
 * attn__decode_multi) decoded together by attn_llm_session_decode_batch for 4 steps, every row
 * bit for bit what attn_llm_session_decode gives the same session alone; then the refusals,
 * which leave every session as it was. */
static void check_batch(attn_ctx *ctx, attn_llm *m, const char *what, const int32_t *ids,
                        int64_t V) {
    enum { NS = 6, STEPS = 4 };
    const int64_t len[NS] = {5, 39, 2, 34, 3, 40};
    int32_t cyc[64];
    for (int i = 0; i < 64; i++) cyc[i] = ids[i % 12];
    const attn_dtype dt[NS] = {ATTN_F32, ATTN_BF16, ATTN_F32, ATTN_BF16, ATTN_F32, ATTN_F32};
    attn_llm_session *bs[NS] = {NULL}, *one[NS] = {NULL};
    float *lb = malloc(sizeof(float) * (size_t)(NS * V)), *l1 = malloc(sizeof(float) * (size_t)V);
    int ok = 1, same = 1;
    /* the prompts: one attn_llm_session_prefill_batch (the 3 long ones in one pass, the 3
     * short ones in another), then a second one on top of them (7 tokens at most: on the
     * matrix-vector kernels and the split-KV decode attention), against one session at a time */
    const int64_t more[NS] = {3, 2, 7, 1, 9, 2};
    int32_t all[2][200];
    for (int b = 0, k = 0; b < NS; b++)
        for (int64_t t = 0; t < len[b]; t++) all[0][k++] = cyc[b + t];
    for (int b = 0, k = 0; b < NS; b++)
        for (int64_t t = 0; t < more[b]; t++) all[1][k++] = ids[(b + 5 * t) % 12];
    for (int i = 0; i < NS && ok; i++)
        ok = TU_STATUS(attn_llm_session_create(ctx, m, 48, dt[i], &bs[i]), ATTN_OK, ctx) &&
             TU_STATUS(attn_llm_session_create(ctx, m, 48, dt[i], &one[i]), ATTN_OK, ctx);
    for (int round = 0; round < 2 && ok; round++) {
        const int64_t *n = round ? more : len;
        ok = TU_STATUS(attn_llm_session_prefill_batch(ctx, bs, all[round], n, NS, lb), ATTN_OK, ctx);
        for (int i = 0, k = 0; i < NS && ok; k += (int)n[i], i++) {
            ok = TU_STATUS(attn_llm_session_prefill(ctx, one[i], all[round] + k, n[i], l1), ATTN_OK,
                           ctx);
            same &= !memcmp(l1, lb + i * V, sizeof(float) * (size_t)V) &&
                    attn_llm_session_pos(one[i]) == attn_llm_session_pos(bs[i]);
        }
    }
    TU_CHECK(ok && same, "%s: batched prefill differs from one session at a time", what);
    for (int t = 0; t < STEPS && ok; t++) {
        int32_t next[NS];
        for (int i = 0; i < NS; i++)
            next[i] = ids[(7 + 3 * t + i) % 12];
        ok = TU_STATUS(attn_llm_session_decode_batch(ctx, bs, next, NS, lb), ATTN_OK, ctx);
        for (int i = 0; i < NS && ok; i++) {
            ok = TU_STATUS(attn_llm_session_decode(ctx, one[i], next[i], l1), ATTN_OK, ctx);
            same &= !memcmp(l1, lb + i * V, sizeof(float) * (size_t)V);
        }
    }
    TU_CHECK(ok && same, "%s: batched decoding differs from one session at a time", what);
    if (ok) { /* refusals: nothing moves */
        attn_llm_session *dup[2] = {bs[0], bs[0]}, *nul[2] = {bs[0], NULL};
        int32_t two[2] = {1, 2}, bad[2] = {1, (int32_t)V};
        const int64_t p0 = attn_llm_session_pos(bs[0]), p1 = attn_llm_session_pos(bs[1]);
        TU_STATUS(attn_llm_session_decode_batch(ctx, dup, two, 2, lb), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_decode_batch(ctx, nul, two, 2, lb), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_decode_batch(ctx, bs, bad, 2, lb), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_decode_batch(ctx, bs, two, 0, lb), ATTN_E_INVALID, ctx);
        const int64_t l2[2] = {1, 1}, l0[2] = {1, 0}, lbig[2] = {1, 47};
        TU_STATUS(attn_llm_session_prefill_batch(ctx, dup, two, l2, 2, lb), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_prefill_batch(ctx, nul, two, l2, 2, lb), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_prefill_batch(ctx, bs, bad, l2, 2, lb), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_prefill_batch(ctx, bs, two, l0, 2, lb), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_prefill_batch(ctx, bs, two, NULL, 2, lb), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_prefill_batch(ctx, bs, two, l2, 0, lb), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_prefill_batch(ctx, bs, cyc, lbig, 2, lb), ATTN_E_OVERFLOW, ctx);
        attn_llm_session *full = NULL;
        if (TU_STATUS(attn_llm_session_create(ctx, m, 1, ATTN_F32, &full), ATTN_OK, ctx) &&
            TU_STATUS(attn_llm_session_prefill(ctx, full, ids, 1, NULL), ATTN_OK, ctx)) {
            attn_llm_session *pair[2] = {bs[0], full};
            TU_STATUS(attn_llm_session_decode_batch(ctx, pair, two, 2, lb), ATTN_E_OVERFLOW, ctx);
        }
        attn_llm_session_free(full);
        TU_CHECK(attn_llm_session_pos(bs[0]) == p0 && attn_llm_session_pos(bs[1]) == p1,
                 "%s: a refused batch moved a session", what);
    }
    for (int i = 0; i < NS; i++)
        attn_llm_session_free(bs[i]), attn_llm_session_free(one[i]);
    free(lb), free(l1);
}

/* attn_llm_session_prefill_logits against attn_llm_forward; attn_llm_perplexity against chunks
 * run here through attn_llm_forward and scored in double
 * (llama.cpp's method: BOS first where the model adds one, the second half scored), a
 * progress callback that stops after the first chunk, and the refusals. */
static int stop_first(void *user, const attn_llm_ppl *r) {
    (void)r;
    ++*(int *)user;
    return 1;
}
static void check_ppl(attn_ctx *ctx, attn_llm *m, const char *what, int64_t V) {
    enum { N = 70, C = 16 };
    int32_t ids[N], part[C];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((5 + 7 * i) % V);
    attn_llm_special sp;
    attn_llm_get_special(m, &sp);
    float *lg = malloc(sizeof(float) * (size_t)(C * V));
    double nll = 0;
    int64_t count = 0;
    for (int k = 0; k < N / C && lg; k++) {
        memcpy(part, ids + k * C, sizeof part);
        if (sp.add_bos && sp.bos >= 0) part[0] = sp.bos;
        if (!TU_STATUS(attn_llm_forward(ctx, m, part, 1, C, lg), ATTN_OK, ctx)) break;
        for (int j = C / 2; j < C - 1; j++, count++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t v = 0; v < V; v++) mx = fmax(mx, lg[j * V + v]);
            for (int64_t v = 0; v < V; v++) sum += exp(lg[j * V + v] - mx);
            nll += mx + log(sum) - lg[j * V + ids[k * C + j + 1]];
        }
    }
    attn_llm_ppl r;
    if (TU_STATUS(attn_llm_perplexity(ctx, m, ids, N, C, 0, NULL, NULL, &r), ATTN_OK, ctx))
        TU_CHECK(r.chunks == N / C && r.count == count && fabs(r.nll - nll) <= 1e-9 * nll &&
                     fabs(r.ppl - exp(nll / (double)count)) <= 1e-9 * r.ppl && r.err > 0,
                 "%s: perplexity %lld chunks %lld tokens nll %.12g ppl %g, expected %d %lld "
                 "%.12g", what, (long long)r.chunks, (long long)r.count, r.nll, r.ppl, N / C,
                 (long long)count, nll);
    /* attn_llm_session_prefill_logits on an empty session: attn_llm_forward's rows, bit for
     * bit; then a second piece's rows within float rounding of the whole forward's */
    attn_llm_session *ps = NULL;
    float *pl = malloc(sizeof(float) * (size_t)(2 * C * V)), *fw = malloc(sizeof(float) * (size_t)(2 * C * V));
    if (pl && fw && TU_STATUS(attn_llm_session_create(ctx, m, 2 * C, ATTN_F32, &ps), ATTN_OK, ctx) &&
        TU_STATUS(attn_llm_session_prefill_logits(ctx, ps, ids, C, pl), ATTN_OK, ctx) &&
        TU_STATUS(attn_llm_forward(ctx, m, ids, 1, C, fw), ATTN_OK, ctx)) {
        TU_CHECK(!memcmp(pl, fw, sizeof(float) * (size_t)(C * V)),
                 "%s: prefill_logits' rows are not attn_llm_forward's", what);
        if (TU_STATUS(attn_llm_session_prefill_logits(ctx, ps, ids + C, C, pl + C * V), ATTN_OK,
                      ctx) &&
            TU_STATUS(attn_llm_forward(ctx, m, ids, 1, 2 * C, fw), ATTN_OK, ctx)) {
            double w = 0, mx = 0;
            for (int64_t i = C * V; i < 2 * C * V; i++)
                w = fmax(w, fabs(pl[i] - fw[i])), mx = fmax(mx, fabs(fw[i]));
            TU_CHECK(w <= 1e-5 * mx, "%s: a second prefill_logits piece: %g of max %g", what, w,
                     mx);
        }
        TU_STATUS(attn_llm_session_prefill_logits(ctx, ps, ids, 0, pl), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_session_prefill_logits(ctx, ps, ids, 1, pl), ATTN_E_OVERFLOW, ctx);
        TU_STATUS(attn_llm_session_prefill_logits(ctx, ps, ids, 1, NULL), ATTN_E_INVALID, ctx);
    }
    attn_llm_session_free(ps);
    free(pl), free(fw);
    int calls = 0;
    if (TU_STATUS(attn_llm_perplexity(ctx, m, ids, N, C, 3, stop_first, &calls, &r), ATTN_OK,
                  ctx))
        TU_CHECK(calls == 1 && r.chunks == 1 && r.count == C / 2 - 1,
                 "%s: a progress callback's stop", what);
    int32_t bad[C];
    memcpy(bad, ids, sizeof bad);
    bad[5] = (int32_t)V;
    TU_STATUS(attn_llm_perplexity(ctx, m, bad, C, C, 0, NULL, NULL, &r), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_perplexity(ctx, m, ids, N, 2, 0, NULL, NULL, &r), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_perplexity(ctx, m, ids, N, 1 << 30, 0, NULL, NULL, &r), ATTN_E_INVALID,
              ctx);
    TU_STATUS(attn_llm_perplexity(ctx, m, ids, C - 1, C, 0, NULL, NULL, &r), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_perplexity(ctx, m, ids, N, C, -1, NULL, NULL, &r), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_perplexity(ctx, m, NULL, N, C, 0, NULL, NULL, &r), ATTN_E_INVALID, ctx);
    TU_CHECK(attn_llm_perplexity(NULL, m, ids, N, C, 0, NULL, NULL, &r) == ATTN_E_INVALID,
             "%s: perplexity without a context", what);
    free(lg);
}

/* A prompt's last logits (attn_llm_session_prefill: the last layer attends and runs its
 * feed-forward for the last row alone) against the same call with the whole last layer
 * (attn__llm_last_rows = 0), bit for bit: first pieces and second ones, alone and in a batch,
 * F32 and BF16 caches; then the next decoded token's logits, which read the caches. */
static int prefill_pieces(attn_ctx *ctx, attn_llm *m, int64_t V, attn_dtype d,
                          const int32_t *ids, int64_t n0, int64_t n1, int on,
                          float *out /* [4 V] */) {
    attn__llm_last_rows = on;
    attn_llm_session *s = NULL, *t = NULL;
    int ok = attn_llm_session_create(ctx, m, 160, d, &s) == ATTN_OK &&
             attn_llm_session_create(ctx, m, 160, d, &t) == ATTN_OK &&
             attn_llm_session_prefill(ctx, s, ids, n0, out) == ATTN_OK;
    if (ok) { /* s's second piece and t's first in one batch */
        attn_llm_session *pair[2] = {s, t};
        int32_t cat[256];
        memcpy(cat, ids + n0, sizeof(int32_t) * (size_t)n1);
        memcpy(cat + n1, ids, sizeof(int32_t) * (size_t)n0);
        const int64_t lens[2] = {n1, n0};
        ok = attn_llm_session_prefill_batch(ctx, pair, cat, lens, 2, out + V) == ATTN_OK &&
             attn_llm_session_decode(ctx, s, ids[1], out + 3 * V) == ATTN_OK;
    }
    attn_llm_session_free(s), attn_llm_session_free(t);
    attn__llm_last_rows = 1;
    return ok;
}

static void check_last_rows(attn_ctx *ctx, attn_llm *m, const char *what, int64_t V) {
    int32_t ids[130];
    for (int i = 0; i < 130; i++) ids[i] = (int32_t)((3 + 11 * i) % V);
    static const int64_t first[3] = {17, 40, 61}, second[3] = {23, 17, 50};
    float *a = malloc(sizeof(float) * (size_t)(4 * V)), *b = malloc(sizeof(float) * (size_t)(4 * V));
    int same = 1, cases = 0;
    for (int dt = 0; dt < 2 && a && b; dt++)
        for (int k = 0; k < 3; k++) {
            const attn_dtype d = dt ? ATTN_BF16 : ATTN_F32;
            const int ok = prefill_pieces(ctx, m, V, d, ids, first[k], second[k], 1, a) &&
                           prefill_pieces(ctx, m, V, d, ids, first[k], second[k], 0, b);
            TU_CHECK(ok, "%s: prefills: %s", what, attn_ctx_errmsg(ctx));
            if (ok) same &= !memcmp(a, b, sizeof(float) * (size_t)(4 * V)), cases++;
        }
    TU_CHECK(same && cases == 6, "%s: a prompt's last logits with the last layer's last rows "
             "alone are not those of the whole layer (%d cases)", what, cases);
    free(a), free(b);
}

/* The model at path (a folder or a GGUF file) against r: forward and session, threads 1, 2. */
static void check(const fam *f, const char *path, int gguf, const ref *r) {
    float *out[2] = {NULL, NULL};
    /* ATTN_TEST_QUICK (an emulator): the folder on 1 thread alone (the file on both) */
    const int nthreads = tu_quick("test_llm_families") && !gguf ? 1 : 2;
    for (int threads = 1; threads <= nthreads; threads++) {
        attn_ctx *ctx = tu_ctx(threads);
        attn_llm *m = NULL;
        if (!ctx || !TU_STATUS(gguf ? attn_llm_load_gguf(ctx, path, 0, &m)
                                    : attn_llm_load_hf(ctx, path, &m),
                               ATTN_OK, ctx)) {
            attn_ctx_free(ctx);
            break;
        }
        attn_llm_config c;
        attn_llm_get_info(m, &c);
        TU_CHECK(c.vocab_size == r->V && c.head_dim == f->head_dim &&
                     c.attention_bias == f->attention_bias && c.qk_norm == f->qk_norm &&
                     c.sandwich_norm == f->sandwich_norm && c.mlp_act == f->mlp_act &&
                     c.rope_scaling == (gguf ? f->rope_scaling_gguf : f->rope_scaling_hf) &&
                     c.sliding_window == (gguf && f->gguf_ref ? 0 : f->window) &&
                     c.sliding_period == (gguf && f->gguf_ref ? 0 : f->period),
                 "%s (%s): the family's settings", f->name, path);
        if (!gguf) { /* the family's name back from its settings (attn_llm_family) */
            static const char *const type[] = {"llama", "mistral", "qwen2", "qwen3", "gemma3_text"};
            const char *t = NULL, *a = NULL;
            TU_STATUS(attn_llm_family(&c, &t, &a), ATTN_OK, ctx);
            TU_CHECK(t && !strcmp(t, type[f - fams]) && a && strstr(a, "ForCausalLM"),
                     "%s: attn_llm_family gave %s / %s", f->name, t ? t : "NULL", a ? a : "NULL");
            TU_CHECK(attn_llm_family(NULL, &t, &a) == ATTN_E_INVALID, "attn_llm_family(NULL)");
        }
        if (threads == 1) { /* training: every family, but a file's own RoPE divisors; the
                               trainable model (a second copy, made so in place) still runs
                               inference: its forward and a session's prompt logits against
                               transformers' */
            attn_llm *t = NULL;
            TU_STATUS(gguf ? attn_llm_load_gguf(ctx, path, 0, &t) : attn_llm_load_hf(ctx, path, &t),
                      ATTN_OK, ctx);
            attn_status ts = t ? attn_llm_make_trainable(ctx, t, ATTN_LLM_DEQUANTIZE) : ATTN_E_INVALID;
            TU_CHECK(c.rope_scaling == 3 ? ts == ATTN_E_UNSUPPORTED : ts == ATTN_OK,
                     "%s (%s): attn_llm_make_trainable gave %s", f->name, path,
                     attn_status_name(ts));
            TU_CHECK((attn_llm_module(t) != NULL) == (ts == ATTN_OK), "%s (%s): the module",
                     f->name, path);
            if (ts == ATTN_OK) {
                TU_STATUS(attn_llm_make_trainable(ctx, t, 0), ATTN_OK, ctx); /* already */
                const int64_t n = r->n, V = r->V;
                float *a = malloc(sizeof(float) * (size_t)(n * V)), *b = malloc(sizeof(float) * (size_t)V);
                attn_llm_session *s = NULL;
                if (a && b && TU_STATUS(attn_llm_forward(ctx, t, r->ids, 1, n, a), ATTN_OK, ctx)) {
                    double e = worst(a, r->lg, n * V, r->mx);
                    TU_CHECK(e <= TOL, "%s (%s): the trainable model's logits %.3g of max|logit| "
                             "from transformers'", f->name, path, e);
                    if (TU_STATUS(attn_llm_session_create(ctx, t, n, ATTN_F32, &s), ATTN_OK, ctx) &&
                        TU_STATUS(attn_llm_session_prefill(ctx, s, r->ids, n, b), ATTN_OK, ctx))
                        TU_CHECK(worst(b, r->lg + (n - 1) * V, V, r->mx) <= TOL,
                                 "%s (%s): the trainable model's session", f->name, path);
                }
                attn_llm_session_free(s);
                free(a), free(b);
            }
            attn_llm_free(t);
        }
        const int64_t n = r->n, V = r->V;
        float *lg = malloc(sizeof(float) * (size_t)(n * V));
        float *row = malloc(sizeof(float) * (size_t)((n + 1) * V));
        TU_STATUS(attn_llm_forward(ctx, m, r->ids, 1, n, lg), ATTN_OK, ctx);
        double e = worst(lg, r->lg, n * V, r->mx);
        TU_CHECK(e <= TOL, "%s (%s, %d threads): forward logits %.3g of max|logit| from "
                 "transformers'", f->name, path, threads, e);
        /* the session: half the prompt at once, then one token at a time */
        attn_llm_session *s = NULL;
        const int64_t h = n / 2;
        double es = 0;
        if (TU_STATUS(attn_llm_session_create(ctx, m, n, ATTN_F32, &s), ATTN_OK, ctx) &&
            TU_STATUS(attn_llm_session_prefill(ctx, s, r->ids, h, row), ATTN_OK, ctx)) {
            es = worst(row, r->lg + (h - 1) * V, V, r->mx);
            for (int64_t t = h; t < n; t++) {
                if (!TU_STATUS(attn_llm_session_decode(ctx, s, r->ids[t], row), ATTN_OK, ctx))
                    break;
                double d = worst(row, r->lg + t * V, V, r->mx);
                if (!(d <= es)) es = d;
            }
        }
        TU_CHECK(es <= TOL, "%s (%s, %d threads): session logits %.3g of max|logit| from "
                 "transformers'", f->name, path, threads, es);
        printf("test_llm_families: %-7s %s, %d thread%s: forward %.2e, session %.2e of "
               "max|logit|\n", f->name, gguf ? "GGUF  " : "folder", threads,
               threads > 1 ? "s" : " ", e, es);
        /* attn_llm_session_copy: a session of another capacity given s's first h tokens
         * continues with s's bits (the rest decoded one at a time, as s did) */
        attn_llm_session *cs = NULL, *b16 = NULL;
        float *rc = malloc(sizeof(float) * (size_t)V);
        if (s && rc && TU_STATUS(attn_llm_session_create(ctx, m, n + 3, ATTN_F32, &cs), ATTN_OK, ctx) &&
            TU_STATUS(attn_llm_session_prefill(ctx, cs, r->ids + 1, 2, NULL), ATTN_OK, ctx)) {
            TU_STATUS(attn_llm_session_copy(cs, s, h), ATTN_OK, ctx);
            TU_CHECK(attn_llm_session_pos(cs) == h, "%s: the copy's pos", path);
            for (int64_t t = h; t < n; t++)
                if (!TU_STATUS(attn_llm_session_decode(ctx, cs, r->ids[t], rc), ATTN_OK, ctx))
                    break;
            TU_CHECK(!memcmp(rc, row, sizeof(float) * (size_t)V),
                     "%s (%d threads): a copied session's logits differ from its source's", path,
                     threads);
            TU_CHECK(attn_llm_session_copy(cs, s, n + 1) == ATTN_E_INVALID &&
                         attn_llm_session_copy(cs, cs, 1) == ATTN_E_INVALID &&
                         attn_llm_session_copy(cs, NULL, 0) == ATTN_E_INVALID &&
                         attn_llm_session_pos(cs) == n,
                     "%s: refused copies (past the source's pos, onto itself, NULL)", path);
            if (TU_STATUS(attn_llm_session_create(ctx, m, n, ATTN_BF16, &b16), ATTN_OK, ctx))
                TU_CHECK(attn_llm_session_copy(b16, s, 1) == ATTN_E_INVALID,
                         "%s: a copy between cache types", path);
        }
        attn_llm_session_free(b16);
        attn_llm_session_free(cs);
        free(rc);
        attn_llm_session_free(s);
        if (r->n >= 12)
            check_batch(ctx, m, path, r->ids, V);
        if (threads == 1) check_ppl(ctx, m, path, V);
        check_last_rows(ctx, m, path, V);
        free(row);
        out[threads - 1] = lg;
        attn_llm_free(m);
        attn_ctx_free(ctx);
    }
    if (out[0] && out[1])
        TU_CHECK(!memcmp(out[0], out[1], sizeof(float) * (size_t)(r->n * r->V)),
                 "%s (%s): 1 and 2 threads differ", f->name, path);
    free(out[0]), free(out[1]);
}

static void spill(const char *path, const char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) fwrite(b, 1, n, f), fclose(f);
}

/* Folder fam's config.json with its first `from` replaced by `to`: refused with want, the
 * message naming needle, and no model. */
static void refusal(attn_ctx *ctx, const char *fam, const char *from, const char *to,
                    attn_status want, const char *needle) {
    char src[256], dir[] = "/tmp/attn_fam_XXXXXX", p[300];
    if (!mkdtemp(dir)) {
        TU_CHECK(0, "mkdtemp");
        return;
    }
    size_t n, cn;
    snprintf(src, sizeof src, "fixtures/families/%s/model.safetensors", fam);
    char *w = tu_slurp(src, &n);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (w) spill(p, w, n);
    free(w);
    snprintf(src, sizeof src, "fixtures/families/%s/config.json", fam);
    char *c = tu_slurp(src, &cn), *at = c ? strstr(c, from) : NULL;
    TU_CHECK(at != NULL, "%s: config.json has no %s", fam, from);
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (at) {
        FILE *f = fopen(p, "wb");
        if (f) {
            fwrite(c, 1, (size_t)(at - c), f), fputs(to, f), fputs(at + strlen(from), f);
            fclose(f);
        }
        attn_llm *m = (attn_llm *)&m;
        attn_status st = attn_llm_load_hf(ctx, dir, &m);
        TU_CHECK(st == want && strstr(attn_ctx_errmsg(ctx), needle) && m == NULL,
                 "%s with %s: %s (%s), wanted %s naming \"%s\"", fam, to, attn_status_name(st),
                 attn_ctx_errmsg(ctx), attn_status_name(want), needle);
    }
    free(c);
    remove(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    remove(p);
    rmdir(dir);
}

/* A sharded checkpoint (fixtures/families/qwen2_sharded: the qwen2 folder saved again by
 * transformers' save_pretrained in 4 shards with model.safetensors.index.json): the same logits,
 * bit for bit, as the one-file folder; then hostile indexes, each refused by name. */
static const char *const shard_files[] = {
    "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
    "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors", "config.json"};

static attn_status load_index(attn_ctx *ctx, const char *dir, const char *index,
                              attn_llm **m) {
    char p[300];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    spill(p, index, strlen(index));
    return attn_llm_load_hf(ctx, dir, m);
}

static void sharded(void) {
    attn_ctx *ctx = tu_ctx(2);
    if (!ctx) return;
    attn_llm *a = NULL, *b = NULL;
    const int32_t ids[6] = {3, 17, 42, 5, 88, 60};
    if (TU_STATUS(attn_llm_load_hf(ctx, "fixtures/families/qwen2", &a), ATTN_OK, ctx) &&
        TU_STATUS(attn_llm_load_hf(ctx, "fixtures/families/qwen2_sharded", &b), ATTN_OK, ctx)) {
        attn_llm_config c;
        attn_llm_get_info(a, &c);
        const int64_t V = c.vocab_size;
        float *la = calloc((size_t)(6 * V), sizeof *la), *lb = calloc((size_t)(6 * V), sizeof *lb);
        if (TU_STATUS(attn_llm_forward(ctx, a, ids, 1, 6, la), ATTN_OK, ctx) &&
            TU_STATUS(attn_llm_forward(ctx, b, ids, 1, 6, lb), ATTN_OK, ctx))
            TU_CHECK(!memcmp(la, lb, sizeof *la * (size_t)(6 * V)),
                     "qwen2: the sharded checkpoint gives other logits than model.safetensors");
        free(la), free(lb);
    }
    attn_llm_free(a), attn_llm_free(b);
    /* the index, varied: a temporary copy of the shards and config.json */
    char dir[] = "/tmp/attn_shard_XXXXXX", src[300], p[300];
    if (!mkdtemp(dir)) {
        TU_CHECK(0, "mkdtemp");
        attn_ctx_free(ctx);
        return;
    }
    for (size_t i = 0; i < sizeof shard_files / sizeof *shard_files; i++) {
        size_t n;
        snprintf(src, sizeof src, "fixtures/families/qwen2_sharded/%s", shard_files[i]);
        char *w = tu_slurp(src, &n);
        TU_CHECK(w != NULL, "cannot read %s", src);
        snprintf(p, sizeof p, "%s/%s", dir, shard_files[i]);
        if (w) spill(p, w, n);
        free(w);
    }
    size_t n;
    char *index = tu_slurp("fixtures/families/qwen2_sharded/model.safetensors.index.json", &n);
    TU_CHECK(index != NULL, "cannot read the index");
    attn_llm *m = NULL;
    if (index) { /* the real index in the copy loads */
        TU_STATUS(load_index(ctx, dir, index, &m), ATTN_OK, ctx);
        attn_llm_free(m), m = NULL;
    }
    static const struct {
        const char *index, *needle;
        attn_status want;
    } bad[] = {
        {"{\"weight_map\": {\"model.norm.weight\": \"../model-00001-of-00004.safetensors\"}}",
         "is not a file name", ATTN_E_FORMAT},
        {"{\"weight_map\": {\"model.norm.weight\": \"/etc/passwd\"}}", "is not a file name",
         ATTN_E_FORMAT},
        {"{\"weight_map\": {\"model.norm.weight\": \".\"}}", "is not a file name", ATTN_E_FORMAT},
        {"{\"weight_map\": {\"model.norm.weight\": \"model-00009-of-00009.safetensors\"}}",
         "missing", ATTN_E_NOT_FOUND},
        {"{\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00004.safetensors\"}}",
         "where the index puts it", ATTN_E_FORMAT},
        {"{\"weight_map\": {\"model.norm.weight\": \"config.json\"}}", "config.json",
         ATTN_E_FORMAT},
        {"{\"weight_map\": [\"model-00001-of-00004.safetensors\"]}", "must be an object",
         ATTN_E_FORMAT},
        {"{\"weight_map\": {\"model.norm.weight\": 7}}", "must be a file name", ATTN_E_FORMAT},
        {"{\"weight_map\": {}}", "empty", ATTN_E_FORMAT},
        {"{\"metadata\": {}}", "no weight_map", ATTN_E_FORMAT},
        {"{\"weight_map\": {\"a\": \"model-00001-of-00004.safetensors\"}, \"weight_map\": {}}",
         "two weight_map", ATTN_E_FORMAT},
        {"{\"weight_map\": {\"a\": \"model-00001-of-00004.safetensors\"", "", ATTN_E_FORMAT},
        /* only some shards named: the model's other tensors are missing */
        {"{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00004.safetensors\"}}",
         "no tensor", ATTN_E_NOT_FOUND},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        m = (attn_llm *)&m;
        attn_status st = load_index(ctx, dir, bad[i].index, &m);
        TU_CHECK(st == bad[i].want && strstr(attn_ctx_errmsg(ctx), bad[i].needle) && m == NULL,
                 "index %s: %s (%s), wanted %s naming \"%s\"", bad[i].index,
                 attn_status_name(st), attn_ctx_errmsg(ctx), attn_status_name(bad[i].want),
                 bad[i].needle);
    }
    /* a tensor in two shards: a copy of shard 1 under another name, both in the index */
    snprintf(src, sizeof src, "%s/model-00001-of-00004.safetensors", dir);
    char *w = tu_slurp(src, &n);
    snprintf(p, sizeof p, "%s/copy.safetensors", dir);
    if (w) spill(p, w, n);
    free(w);
    m = (attn_llm *)&m;
    attn_status st = load_index(ctx, dir,
                                "{\"weight_map\": {\"model.embed_tokens.weight\": "
                                "\"model-00001-of-00004.safetensors\", "
                                "\"model.layers.0.input_layernorm.weight\": \"copy.safetensors\"}}",
                                &m);
    TU_CHECK(st == ATTN_E_FORMAT && strstr(attn_ctx_errmsg(ctx), "appears twice") && !m,
             "a tensor in two shards: %s (%s)", attn_status_name(st), attn_ctx_errmsg(ctx));
    /* no weights at all: both names in the message */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    remove(p);
    st = attn_llm_load_hf(ctx, dir, &m);
    TU_CHECK(st == ATTN_E_NOT_FOUND && strstr(attn_ctx_errmsg(ctx), "index.json"),
             "no weights: %s (%s)", attn_status_name(st), attn_ctx_errmsg(ctx));
    free(index);
    tu_rm_tree(dir);
    attn_ctx_free(ctx);
}

/* What a family's config.json may say that attn does not run: refused by name. */
static void refusals(void) {
    attn_ctx *ctx = tu_ctx(1);
    if (!ctx) return;
    refusal(ctx, "gemma3", "\"query_pre_attn_scalar\": 16", "\"query_pre_attn_scalar\": 8",
            ATTN_E_UNSUPPORTED, "query_pre_attn_scalar 8");
    refusal(ctx, "gemma3", "\"final_logit_softcapping\": null",
            "\"final_logit_softcapping\": 30.0", ATTN_E_UNSUPPORTED, "soft-capping");
    refusal(ctx, "gemma3", "\"hidden_activation\": \"gelu_pytorch_tanh\"",
            "\"hidden_activation\": \"silu\"", ATTN_E_UNSUPPORTED, "hidden activation");
    refusal(ctx, "gemma3", "\"sliding_attention\",", "\"chunked_attention\",",
            ATTN_E_UNSUPPORTED, "layer_types");
    refusal(ctx, "gemma3", "\"sliding_attention\",", "\"full_attention\",",
            ATTN_E_UNSUPPORTED, "breaks the pattern");
    refusal(ctx, "gemma3", "\"sliding_attention\",", "",
            ATTN_E_UNSUPPORTED, "layer_types (5 of them)");
    refusal(ctx, "gemma3", "\"layer_types\"", "\"layer_types\": 3, \"x\"", ATTN_E_FORMAT,
            "layer_types must be an array of strings");
    refusal(ctx, "gemma3", "\"rope_theta\": 10000.0,\n      \"rope_type\": \"default\"",
            "\"rope_theta\": 10000.0, \"factor\": 2.0, \"rope_type\": \"linear\"",
            ATTN_E_UNSUPPORTED, "sliding layers");
    refusal(ctx, "qwen2", "\"use_sliding_window\": false", "\"use_sliding_window\": true",
            ATTN_E_UNSUPPORTED, "use_sliding_window");
    refusal(ctx, "llama3", "\"low_freq_factor\": 1.0", "\"low_freq_factor\": 5.0",
            ATTN_E_INVALID, "llama3 RoPE scaling needs");
    refusal(ctx, "llama3", "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"",
            ATTN_E_UNSUPPORTED, "\"yarn\"");
    refusal(ctx, "qwen3", "\"model_type\": \"qwen3\"", "\"model_type\": \"qwen2\"",
            ATTN_E_FORMAT, "disagree");
    /* GGUF: a llama3 RoPE factor that is not positive and finite */
    attn_gguf *g = NULL;
    attn_gguf_tensor t;
    float fac[4];
    if (TU_STATUS(attn_gguf_open(ctx, "fixtures/families/llama3.gguf", &g), ATTN_OK, ctx) &&
        TU_STATUS(attn_gguf_tensor_find(g, "rope_freqs.weight", &t), ATTN_OK, ctx))
        memcpy(fac, t.data, sizeof fac);
    attn_gguf_free(g);
    size_t n;
    char *b = tu_slurp("fixtures/families/llama3.gguf", &n);
    int found = 0;
    for (size_t i = 0; b && i + sizeof fac <= n; i++) {
        if (memcmp(b + i, fac, sizeof fac)) continue;
        found = 1;
        const float bad[2] = {-1.0f, NAN};
        for (int k = 0; k < 2; k++) {
            char tmp[] = "/tmp/attn_fam_XXXXXX";
            int fd = mkstemp(tmp);
            if (fd < 0) break;
            close(fd);
            memcpy(b + i + 4, &bad[k], 4);
            spill(tmp, b, n);
            attn_llm *m = NULL;
            attn_status st = attn_llm_load_gguf(ctx, tmp, 0, &m);
            TU_CHECK(st == ATTN_E_NONFINITE && strstr(attn_ctx_errmsg(ctx), "rope_freqs.weight"),
                     "rope_freqs.weight holding %g: %s (%s)", (double)bad[k],
                     attn_status_name(st), attn_ctx_errmsg(ctx));
            attn_llm_free(m);
            remove(tmp);
        }
        break;
    }
    TU_CHECK(found, "llama3.gguf: rope_freqs.weight's bytes not found");
    free(b);
    attn_ctx_free(ctx);
}

int main(void) {
    refusals();
    sharded();
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
        const fam *f = &fams[i];
        char p[256], q[256];
        ref r, rg;
        snprintf(p, sizeof p, "fixtures/families/%s_ref.txt", f->name);
        const int ok = read_ref(p, &r);
        TU_CHECK(ok, "cannot read %s", p);
        if (!ok) {
            free(r.lg);
            continue;
        }
        snprintf(q, sizeof q, "fixtures/families/%s", f->name);
        check(f, q, 0, &r);
        snprintf(p, sizeof p, "fixtures/families/%s_ref.txt", f->gguf_ref ? f->gguf_ref : f->name);
        const int okg = read_ref(p, &rg);
        TU_CHECK(okg, "cannot read %s", p);
        snprintf(q, sizeof q, "fixtures/families/%s.gguf", f->name);
        if (okg) check(f, q, 1, &rg);
        free(rg.lg);
        free(r.lg);
    }
    return tu_finish("test_llm_families");
}
