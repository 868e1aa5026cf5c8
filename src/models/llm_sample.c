/* Next-token sampling (attn_llm_sample): HF's logits processors in HF's order, then a draw from
 * a counter-based stream, with every tie broken by token id so that the result depends on the
 * arguments alone.  Runs on the calling thread.  Contract: attn.h. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

attn_llm_sampler attn_llm_sampler_defaults(void) {
    attn_llm_sampler s = {1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 0.0f, 0.0f};
    return s;
}

/* The draw's uniform: Philox-4x32-10 under key (seed), counter (step, "samp", 0), 53 bits of
 * its first two words, in [0, 1). */
static double uniform(uint64_t seed, uint64_t step) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)step, (uint32_t)(step >> 32), 0x706d6173u, 0};
    uint32_t o[4];
    attn__philox(ctr, key, o);
    const uint64_t bits = ((uint64_t)o[0] << 32 | o[1]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0);
}

typedef struct cand {
    float l;
    int32_t id;
} cand;

/* decreasing logit, increasing id among equal ones (-inf last) */
static int by_logit(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int by_id(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

attn_status attn_llm_sample(attn_ctx *ctx, const attn_llm_sampler *cfg, const float *logits,
                            int64_t vocab, const int32_t *history, int64_t n_hist,
                            uint64_t *step, int32_t *out_id) {
    return attn_llm_sample_ex(ctx, cfg, logits, vocab, history, n_hist, 0, step, out_id);
}

attn_status attn_llm_sample_ex(attn_ctx *ctx, const attn_llm_sampler *cfg, const float *logits,
                               int64_t vocab, const int32_t *history, int64_t n_hist,
                               int64_t n_prompt, uint64_t *step, int32_t *out_id) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!cfg || !logits || !out_id || (n_hist > 0 && !history), ctx, ATTN_E_INVALID,
                 "attn_llm_sample: NULL argument");
    ATTN_FAIL_IF(vocab < 1 || vocab > INT32_MAX || n_hist < 0, ctx, ATTN_E_INVALID,
                 "attn_llm_sample: vocab %lld must be in [1, 2^31 - 1] and n_hist %lld >= 0",
                 (long long)vocab, (long long)n_hist);
    const float T = cfg->temperature, rp = cfg->repetition_penalty;
    ATTN_FAIL_IF(!(T >= 0) || !isfinite(T), ctx, ATTN_E_INVALID,
                 "attn_llm_sample: temperature %g must be >= 0 and finite", (double)T);
    ATTN_FAIL_IF(cfg->top_k < 0, ctx, ATTN_E_INVALID, "attn_llm_sample: top_k %lld is negative",
                 (long long)cfg->top_k);
    ATTN_FAIL_IF(!(cfg->top_p > 0 && cfg->top_p <= 1), ctx, ATTN_E_INVALID,
                 "attn_llm_sample: top_p %g must be in (0, 1]", (double)cfg->top_p);
    ATTN_FAIL_IF(!(cfg->min_p >= 0 && cfg->min_p <= 1), ctx, ATTN_E_INVALID,
                 "attn_llm_sample: min_p %g must be in [0, 1]", (double)cfg->min_p);
    ATTN_FAIL_IF(!(rp > 0) || !isfinite(rp), ctx, ATTN_E_INVALID,
                 "attn_llm_sample: repetition_penalty %g must be positive and finite",
                 (double)rp);
    const float pp = cfg->presence_penalty, fp = cfg->frequency_penalty;
    ATTN_FAIL_IF(!isfinite(pp) || !isfinite(fp), ctx, ATTN_E_INVALID,
                 "attn_llm_sample: presence_penalty %g and frequency_penalty %g must be finite",
                 (double)pp, (double)fp);
    ATTN_FAIL_IF(n_prompt < 0 || n_prompt > n_hist, ctx, ATTN_E_INVALID,
                 "attn_llm_sample: n_prompt %lld must be in [0, n_hist = %lld]",
                 (long long)n_prompt, (long long)n_hist);
    ATTN_FAIL_IF(T > 0 && !step, ctx, ATTN_E_INVALID,
                 "attn_llm_sample: step is NULL (only greedy decoding needs no stream)");
    int any = 0;
    for (int64_t i = 0; i < vocab; i++) {
        ATTN_FAIL_IF(isnan(logits[i]) || logits[i] == INFINITY, ctx, ATTN_E_NONFINITE,
                     "attn_llm_sample: logit %lld is %g", (long long)i, (double)logits[i]);
        any |= logits[i] != -INFINITY;
    }
    ATTN_FAIL_IF(!any, ctx, ATTN_E_NONFINITE, "attn_llm_sample: every logit is -inf");
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    cand *c;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)vocab, sizeof *c, (void **)&c));
    for (int64_t i = 0; i < vocab; i++) c[i].l = logits[i], c[i].id = (int32_t)i;
    /* 1. repetition penalty, once per distinct id (c[i].id marks a visit by going negative) */
    if (rp != 1.0f) {
        for (int64_t j = 0; j < n_hist; j++) {
            const int32_t t = history[j];
            if (t < 0 || t >= vocab || c[t].id < 0) continue;
            const float l = c[t].l;
            c[t].l = l < 0 ? l * rp : l / rp;
            c[t].id = -1 - t;
        }
        for (int64_t i = 0; i < vocab; i++) c[i].id = (int32_t)i;
    }
    /* 1b. presence and frequency penalties over the generated ids: l - (count * frequency +
     * presence), counted on a sorted copy (no vocab-sized table) */
    if ((pp != 0.0f || fp != 0.0f) && n_hist > n_prompt) {
        const int64_t ng = n_hist - n_prompt;
        int32_t *g;
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)ng, sizeof *g, (void **)&g));
        memcpy(g, history + n_prompt, sizeof *g * (size_t)ng);
        qsort(g, (size_t)ng, sizeof *g, by_id);
        for (int64_t j = 0; j < ng;) {
            int64_t k = j;
            while (k < ng && g[k] == g[j]) k++;
            const int32_t t = g[j];
            if (t >= 0 && t < vocab && c[t].l != -INFINITY) {
                double l = (double)c[t].l - ((double)(k - j) * (double)fp + (double)pp);
                if (l > FLT_MAX) l = FLT_MAX;
                if (l < -FLT_MAX) l = -FLT_MAX;
                c[t].l = (float)l;
            }
            j = k;
        }
    }
    /* 2. greedy: the first largest */
    if (T == 0) {
        int64_t best = 0;
        for (int64_t i = 1; i < vocab; i++)
            if (c[i].l > c[best].l) best = i;
        *out_id = (int32_t)best;
        st = ATTN_OK;
        goto done;
    }
    if (T != 1.0f)
        for (int64_t i = 0; i < vocab; i++) c[i].l = c[i].l / T;
    qsort(c, (size_t)vocab, sizeof *c, by_logit);
    int64_t n = 0; /* the candidates left: a prefix of c */
    while (n < vocab && c[n].l != -INFINITY) n++;
    /* 3. top-k: everything >= the k-th largest */
    if (cfg->top_k > 0 && cfg->top_k < n) {
        const float kth = c[cfg->top_k - 1].l;
        int64_t k = cfg->top_k;
        while (k < n && c[k].l >= kth) k++;
        n = k;
    }
    /* 4. top-p: from the smallest up, drop while the cumulative probability <= 1 - top_p */
    if (cfg->top_p < 1.0f && n > 1) {
        double z = 0, cum = 0;
        for (int64_t i = 0; i < n; i++) z += exp((double)c[i].l - (double)c[0].l);
        const double cut = 1.0 - (double)cfg->top_p;
        int64_t keep = n;
        for (int64_t i = n - 1; i > 0; i--) {
            cum += exp((double)c[i].l - (double)c[0].l) / z;
            if (cum > cut) break;
            keep = i;
        }
        n = keep;
    }
    /* 5. min-p: drop the probabilities < min_p times the largest */
    if (cfg->min_p > 0.0f) {
        int64_t k = 1;
        while (k < n && exp((double)c[k].l - (double)c[0].l) >= (double)cfg->min_p) k++;
        n = k;
    }
    /* 6. the draw */
    {
        double z = 0;
        for (int64_t i = 0; i < n; i++) z += exp((double)c[i].l - (double)c[0].l);
        const double target = uniform(cfg->seed, *step) * z;
        double run = 0;
        int64_t pick = n - 1;
        for (int64_t i = 0; i < n; i++) {
            run += exp((double)c[i].l - (double)c[0].l);
            if (run > target) {
                pick = i;
                break;
            }
        }
        *out_id = c[pick].id;
        *step += 1;
    }
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}
