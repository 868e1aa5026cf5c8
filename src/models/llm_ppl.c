/* Perplexity of a token stream (attn_llm_perplexity): llama.cpp's chunked method on
 * attn_llm_forward.  Contract: attn.h. */
#include <math.h>
#include <string.h>

#include "internal.h"

attn_status attn_llm_perplexity(attn_ctx *ctx, const attn_llm *m, const int32_t *ids, int64_t n,
                                int64_t chunk, int64_t max_chunks, attn_llm_ppl_fn progress,
                                void *user, attn_llm_ppl *out) {
    static const char fn[] = "attn_llm_perplexity";
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !ids || !out, ctx, ATTN_E_INVALID, "%s: NULL argument", fn);
    memset(out, 0, sizeof *out);
    attn_llm_config c;
    attn_llm_special sp;
    attn_llm_get_info(m, &c);
    attn_llm_get_special(m, &sp);
    ATTN_FAIL_IF(chunk < 3 || chunk > c.max_position_embeddings, ctx, ATTN_E_INVALID,
                 "%s: chunk %lld is outside [3, %lld] (the second half of a chunk is scored, "
                 "each token predicting the next; at most max_position_embeddings)", fn,
                 (long long)chunk, (long long)c.max_position_embeddings);
    ATTN_FAIL_IF(max_chunks < 0, ctx, ATTN_E_INVALID, "%s: max_chunks %lld is negative", fn,
                 (long long)max_chunks);
    int64_t nc = n / chunk;
    if (max_chunks && max_chunks < nc) nc = max_chunks;
    ATTN_FAIL_IF(nc < 1, ctx, ATTN_E_INVALID, "%s: %lld tokens, fewer than one chunk of %lld",
                 fn, (long long)(n < 0 ? 0 : n), (long long)chunk);
    const int64_t V = c.vocab_size, used = nc * chunk;
    for (int64_t i = 0; i < used; i++)
        ATTN_FAIL_IF(ids[i] < 0 || ids[i] >= V, ctx, ATTN_E_INVALID,
                     "%s: token id %lld at %lld is out of range [0, %lld)", fn,
                     (long long)ids[i], (long long)i, (long long)V);
    size_t nl;
    ATTN_FAIL_IF(!attn__mul_size((size_t)chunk, (size_t)V, &nl) ||
                     !attn__mul_size(nl, sizeof(float), &nl),
                 ctx, ATTN_E_OVERFLOW, "%s: a chunk's logits (%lld x %lld) overflow", fn,
                 (long long)chunk, (long long)V);
    float *lg = attn__malloc(ctx, nl);
    int32_t *part = attn__malloc(ctx, (size_t)chunk * sizeof *part);
    attn_status st = ATTN_OK;
    if (!lg || !part) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "%s: out of memory (a chunk's logits, %zu bytes)", fn,
                        nl);
        goto done;
    }
    double nll2 = 0;
    for (int64_t k = 0; k < nc; k++) {
        memcpy(part, ids + k * chunk, (size_t)chunk * sizeof *part);
        if (sp.add_bos && sp.bos >= 0) part[0] = sp.bos;
        if ((st = attn_llm_forward(ctx, m, part, 1, chunk, lg)) != ATTN_OK) goto done;
        for (int64_t j = chunk / 2; j < chunk - 1; j++) {
            const float *row = lg + j * V;
            double mx = -INFINITY, s = 0;
            for (int64_t v = 0; v < V; v++) mx = row[v] > mx ? row[v] : mx;
            for (int64_t v = 0; v < V; v++) s += exp((double)row[v] - mx);
            const double l = -((double)row[ids[k * chunk + j + 1]] - mx - log(s));
            if (!isfinite(l)) {
                st = attn__fail(ctx, ATTN_E_NONFINITE,
                                "%s: the model's logits are not finite at token %lld of chunk "
                                "%lld (NaN or infinite weights?)", fn, (long long)j,
                                (long long)(k + 1));
                goto done;
            }
            out->nll += l, nll2 += l * l, out->count++;
        }
        out->chunks = k + 1;
        const double mean = out->nll / (double)out->count, var = nll2 / (double)out->count - mean * mean;
        out->ppl = exp(mean);
        out->err = out->ppl * sqrt(var > 0 ? var : 0) / sqrt((double)out->count);
        if (progress && progress(user, out)) break;
    }
done:
    attn__free(ctx, lg);
    attn__free(ctx, part);
    return st;
}
