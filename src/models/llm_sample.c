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

static int by_id(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* exp(x) for x <= 0 (or -inf: 0), within a few ulps, in plain double operations (no library
 * call: the loops over the vocabulary vectorize, and the weights, so the draws, are the same
 * on every machine).  x = n ln2 + r, |r| <= ln2 / 2; e^r by its Taylor series to r^13 (the
 * remainder < 4e-18); 2^n from the bits of the rounding constant's sum. */
static inline double exp_neg(double x) {
    const double xc = x > -708.0 ? x : -708.0; /* 2^n stays normal */
    const double t = xc * 1.44269504088896338700 + 0x1.8p52;
    const double n = t - 0x1.8p52;
    const double r = (xc - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0; /* 1/13! */
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t u;
    memcpy(&u, &t, sizeof u);
    u = (u + 1023) << 52;
    double s;
    memcpy(&s, &u, sizeof s);
    const double y = p * s;
    return x > -708.0 ? y : 0.0;
}

/* w[j] = exp_neg(w[j]): vectorized (the file is built with -fno-trapping-math), for the widest
 * vectors the CPU has where the compiler can pick at load time; the same operations, so the
 * same bits, on every path */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void exp_neg_all(double *w, int64_t m) {
    for (int64_t j = 0; j < m; j++) w[j] = exp_neg(w[j]);
}

/* The k-th largest (k in [1, count]) of the values l[i] >= floor, not -inf: a min-heap h[k]
 * of the largest seen, h[0] its smallest (one comparison for most values). */
static float kth_largest(const float *l, int64_t V, float floor, int64_t k, float *h) {
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++) {
        const float v = l[i];
        if (v == -INFINITY || !(v >= floor)) continue;
        int64_t j;
        if (n < k) { /* sift up */
            for (j = n++; j > 0 && h[(j - 1) / 2] > v; j = (j - 1) / 2) h[j] = h[(j - 1) / 2];
            h[j] = v;
        } else if (v > h[0]) { /* replace the smallest, sift down */
            j = 0;
            for (;;) {
                int64_t c = 2 * j + 1;
                if (c >= k) break;
                if (c + 1 < k && h[c + 1] < h[c]) c++;
                if (!(h[c] < v)) break;
                h[j] = h[c], j = c;
            }
            h[j] = v;
        }
    }
    return h[0];
}

/* A float as an unsigned key of the same order (-inf lowest). */
static uint32_t fkey(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u >> 31 ? ~u : u | 0x80000000u;
}

/* Top-p: the candidates ids[0 .. m) (in id order, logits l, weights w) are ordered by
 * decreasing logit, then increasing id; a candidate is kept when the weights before it sum to
 * less than goal.  Sets (bl, bid) to the last kept one.  A most-significant-digit radix search
 * on the logits' keys, 8 bits at a time, summing the weights of each digit's candidates (in id
 * order): four passes over the candidates, then one over the ties of the last logit; no sort,
 * whatever the distribution. */
static void top_p_boundary(const float *l, const int32_t *ids, const double *w, int64_t m,
                           double goal, float *bl, int32_t *bid) {
    uint32_t prefix = 0, mask = 0;
    double cum = 0; /* the weights before the range searched */
    for (int shift = 24; shift >= 0; shift -= 8) {
        double hm[256] = {0};
        for (int64_t j = 0; j < m; j++) {
            const uint32_t u = fkey(l[ids[j]]);
            if ((u & mask) == prefix) hm[(u >> shift) & 255] += w[j];
        }
        int d = 255;
        while (d >= 0 && !(cum + hm[d] >= goal)) cum += hm[d--];
        if (d < 0) return; /* rounding left the goal unreached: every candidate is kept */
        prefix |= (uint32_t)d << shift;
        mask |= (uint32_t)255 << shift;
    }
    for (int64_t j = 0; j < m; j++)
        if (fkey(l[ids[j]]) == prefix) {
            *bl = l[ids[j]], *bid = ids[j];
            cum += w[j];
            if (cum >= goal) return;
        }
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
    /* refuse NaN and +inf; the largest logit, and how many are not -inf: on the bits (a loop
     * that vectorizes), each float as an int of the same order */
    int32_t kmx = INT32_MIN;
    int bad = 0;
    int64_t nfin = 0;
    for (int64_t i = 0; i < vocab; i++) {
        uint32_t u;
        memcpy(&u, &logits[i], sizeof u);
        const int32_t key = (int32_t)(u >> 31 ? u ^ 0x7fffffffu : u);
        bad |= (u & 0x7fffffffu) >= 0x7f800000u && u != 0xff800000u; /* NaN, +inf */
        kmx = key > kmx ? key : kmx;
        nfin += u != 0xff800000u;
    }
    float mx;
    {
        const uint32_t u = kmx < 0 ? (uint32_t)kmx ^ 0x7fffffffu : (uint32_t)kmx;
        memcpy(&mx, &u, sizeof mx);
    }
    if (bad)
        for (int64_t i = 0; i < vocab; i++)
            ATTN_FAIL_IF(isnan(logits[i]) || logits[i] == INFINITY, ctx, ATTN_E_NONFINITE,
                         "attn_llm_sample: logit %lld is %g", (long long)i, (double)logits[i]);
    ATTN_FAIL_IF(nfin == 0, ctx, ATTN_E_NONFINITE, "attn_llm_sample: every logit is -inf");
    const int penalised = rp != 1.0f || ((pp != 0.0f || fp != 0.0f) && n_hist > n_prompt);
    int64_t top = 0; /* the first largest */
    while (logits[top] != mx) top++;
    if (T == 0 && !penalised) {
        *out_id = (int32_t)top;
        return ATTN_OK;
    }
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    const float *pl = logits; /* the logits after the penalties */
    float *pw = NULL;
    if (penalised) {
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)vocab, sizeof *pw, (void **)&pw));
        memcpy(pw, logits, sizeof *pw * (size_t)vocab);
        pl = pw;
    }
    /* 1. repetition penalty, once per distinct id of the history */
    if (rp != 1.0f && n_hist > 0) {
        int32_t *g;
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)n_hist, sizeof *g, (void **)&g));
        memcpy(g, history, sizeof *g * (size_t)n_hist);
        qsort(g, (size_t)n_hist, sizeof *g, by_id);
        for (int64_t j = 0; j < n_hist; j++) {
            const int32_t t = g[j];
            if (t < 0 || t >= vocab || (j > 0 && g[j - 1] == t)) continue;
            const float v = pw[t] < 0 ? pw[t] * rp : pw[t] / rp; /* kept finite */
            if (pw[t] != -INFINITY) pw[t] = v < -FLT_MAX ? -FLT_MAX : v > FLT_MAX ? FLT_MAX : v;
        }
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
            if (t >= 0 && t < vocab && pw[t] != -INFINITY) {
                double l = (double)pw[t] - ((double)(k - j) * (double)fp + (double)pp);
                if (l > FLT_MAX) l = FLT_MAX;
                if (l < -FLT_MAX) l = -FLT_MAX;
                pw[t] = (float)l;
            }
            j = k;
        }
    }
    if (penalised) { /* the penalties move the largest (and keep finite logits finite) */
        top = 0;
        for (int64_t i = 1; i < vocab; i++)
            if (pl[i] > pl[top]) top = i;
    }
    /* 2. greedy: the first largest */
    if (T == 0) {
        *out_id = (int32_t)top;
        st = ATTN_OK;
        goto done;
    }
    const double top_t = (double)pl[top] / T;
    /* 3. top-k: the candidates >= the k-th largest logit */
    float floor = -INFINITY;
    if (cfg->top_k > 0 && cfg->top_k < nfin) {
        float *h;
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)cfg->top_k, sizeof *h, (void **)&h));
        floor = kth_largest(pl, vocab, -INFINITY, cfg->top_k, h);
    }
    int32_t *ids;
    double *w;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)vocab, sizeof *ids, (void **)&ids));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)vocab, sizeof *w, (void **)&w));
    int64_t m = 0;
    for (int64_t i = 0; i < vocab; i++)
        if (pl[i] != -INFINITY && pl[i] >= floor) ids[m++] = (int32_t)i;
    for (int64_t j = 0; j < m; j++) w[j] = (double)pl[ids[j]] / T - top_t;
    exp_neg_all(w, m);
    /* 4. top-p: a prefix of the order (decreasing logit, then increasing id) whose weights reach
     * top_p of the candidates' (summed in id order) */
    float bl = -INFINITY; /* the last kept candidate in the order */
    int32_t bid = INT32_MAX;
    if (cfg->top_p < 1.0f && m > 1) {
        double z = 0;
        for (int64_t j = 0; j < m; j++) z += w[j];
        top_p_boundary(pl, ids, w, m, (double)cfg->top_p * z, &bl, &bid);
    }
    /* 5. min-p: drop the probabilities < min_p times the largest (whose weight is 1) */
    const double wmin = cfg->min_p;
    /* 6. the draw: the kept candidates' weights in id order, the first whose running sum passes
     * u times their total */
    {
#define KEPT(j) (w[j] >= wmin && (pl[ids[j]] > bl || (pl[ids[j]] == bl && ids[j] <= bid)))
        double z = 0;
        for (int64_t j = 0; j < m; j++)
            if (KEPT(j)) z += w[j];
        const double target = uniform(cfg->seed, *step) * z;
        double run = 0;
        int64_t pick = top;
        for (int64_t j = 0; j < m; j++)
            if (KEPT(j)) {
                pick = ids[j];
                run += w[j];
                if (run > target) break;
            }
#undef KEPT
        *out_id = (int32_t)pick;
        *step += 1;
    }
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}
