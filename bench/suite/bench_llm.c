#define _POSIX_C_SOURCE 200809L
/* attn bench --op llm: a language model's prompt and generation speed, and the read rate of
 * its generated tokens against the machine's read bandwidth. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

typedef struct bench_llm_opts {
    const char *model;
    long long prompt_len, gen, repeat, parallel, threads;
    int cache_bf16, f32, act, mmap, json;
} bench_llm_opts;

int attn_bench_llm(int argc, char **argv) {
    bench_llm_opts o = {NULL, 512, 128, 3, 1, 0, 0, 0, 0, 0, 0};
    int npos, op = 0;
    const attn_cli_opt table[] = {
        ATTN_OPT_CHOICE("op", 0, &op, "llm", "NAME", "llm"),
        ATTN_OPT_STR("model", 0, &o.model, "FILE", ATTN_CLI_LLM_MODEL_HELP),
        ATTN_OPT_MMAP(&o.mmap),
        ATTN_OPT_INT("prompt-len", 0, &o.prompt_len, 1, 1 << 20, "N",
                     "prompt tokens (default 512)"),
        ATTN_OPT_INT("gen", 0, &o.gen, 1, 1 << 20, "N", "tokens generated (default 128)"),
        ATTN_OPT_INT("repeat", 0, &o.repeat, 1, 1000, "N", "timed runs (default 3)"),
        ATTN_OPT_INT("parallel", 0, &o.parallel, 1, 256, "N",
                     "N sequences generated together (continuous batching:\n"
                     "attn_llm_session_decode_batch), each after its own prompt;\n"
                     "generation tokens/s counts all of them (default 1)"),
        ATTN_OPT_FLAG("cache-bf16", 0, &o.cache_bf16, "keep the KV cache in bfloat16"),
        ATTN_OPT_FLAG("f32", 0, &o.f32, "dequantize the weights to float32 at load"),
        ATTN_OPT_ACT(&o.act),
        ATTN_OPT_THREADS(&o.threads),
        ATTN_OPT_FLAG("json", 0, &o.json, "one JSON object instead of the table"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "bench --op llm",
        "attn bench --op llm --model MODEL [options]",
        "Times a language model: a prompt of --prompt-len tokens prefilled in one pass,\n"
        "then --gen tokens generated greedily one at a time (median of --repeat runs).\n"
        "Prints prompt and generation tokens/s, the bytes a generated token reads (every\n"
        "matrix of the model once, and the K and V cache rows of its context: their mean\n"
        "over the generated tokens), that rate in GB/s as % of the machine's read\n"
        "bandwidth (measured here: 512 MiB summed on the same threads; also for the\n"
        "weights alone), and peak RSS.  With --parallel N, N sessions decode together\n"
        "(one batched step per token, each weight read once for all) and the\n"
        "generation rate is their sum.\n"
        "The prompt is the model's own text: its tokens 100, 101, ... cycled.",
        table,
        NULL,
        "attn bench --op llm --model SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 --json"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!o.model) return attn_cli_usage_error(&spec, "--model is required");
    const char *cmd = "bench";
    attn_ctx *ctx = NULL;
    attn_llm *m = NULL;
    attn_llm_session *ss[256] = {NULL}, *s = NULL;
    int32_t *ids = NULL, *pids = NULL;
    int64_t plens[256], ptot = 0;
    float *lg = NULL;
    int rc = 1;
    attn_status st;
    const int64_t np = o.parallel;
    if (attn_cli_ctx(cmd, o.threads, 0, &ctx)) return 1;
    if (!attn_cli_llm_load(cmd, ctx, o.model,
                           (o.f32 ? ATTN_LLM_LOAD_F32 : 0u) | ATTN_CLI_MMAP_FLAGS(o.mmap), o.act,
                           &m))
        goto out;
    attn_llm_config c;
    attn_llm_get_info(m, &c);
    const int64_t cap = o.prompt_len + o.gen;
    if (cap > c.max_position_embeddings) {
        fprintf(stderr, "attn bench: --prompt-len + --gen = %lld is over the model's context "
                        "of %lld\n", (long long)cap, (long long)c.max_position_embeddings);
        goto out;
    }
    for (int64_t i = 0; i < np; i++)
        if ((st = attn_llm_session_create(ctx, m, cap, o.cache_bf16 ? ATTN_BF16 : ATTN_F32,
                                          &ss[i]))) {
            attn_cli_fail(ctx, cmd, st);
            goto out;
        }
    s = ss[0];
    ids = malloc(sizeof *ids * (size_t)o.prompt_len);
    lg = malloc(sizeof *lg * (size_t)c.vocab_size * (size_t)np);
    pids = malloc(sizeof *pids * (size_t)o.prompt_len * (size_t)np);
    if (!ids || !lg || !pids) {
        fprintf(stderr, "attn bench: out of memory\n");
        goto out;
    }
    for (int64_t i = 0; i < o.prompt_len; i++) ids[i] = (int32_t)(100 + i % (c.vocab_size - 100));
    /* --parallel: the sequences' prompts (sequence i's shifted by i) in one batch */
    for (int64_t i = 0; i < np; i++) {
        plens[i] = o.prompt_len - i % o.prompt_len;
        memcpy(pids + ptot, ids + i % o.prompt_len, sizeof *pids * (size_t)plens[i]);
        ptot += plens[i];
    }
    double tp[1000], tg[1000], tb[1000];
    attn_llm_sampler sp = attn_llm_sampler_defaults();
    sp.temperature = 0;
    for (int rep = -1; rep < o.repeat; rep++) { /* one warm-up */
        attn_llm_session_reset(s);
        double t0 = attn_bench_now_s();
        if ((st = attn_llm_session_prefill(ctx, s, ids, o.prompt_len, lg))) goto fail;
        double t1 = attn_bench_now_s();
        if (np > 1) { /* all the prompts again, at once */
            for (int64_t i = 0; i < np; i++) attn_llm_session_reset(ss[i]);
            if ((st = attn_llm_session_prefill_batch(ctx, ss, pids, plens, np, lg))) goto fail;
        }
        const double t1g = np > 1 ? attn_bench_now_s() : t1;
        for (int64_t g = 0; g < o.gen; g++) {
            int32_t id[256];
            for (int64_t i = 0; i < np; i++)
                if ((st = attn_llm_sample(ctx, &sp, lg + i * c.vocab_size, c.vocab_size, NULL, 0,
                                          NULL, &id[i])))
                    goto fail;
            if (np == 1)
                st = attn_llm_session_decode(ctx, s, id[0], lg);
            else
                st = attn_llm_session_decode_batch(ctx, ss, id, np, lg);
            if (st)
                goto fail;
        }
        double t2 = attn_bench_now_s();
        if (rep >= 0)
            tp[rep] = t1 - t0, tg[rep] = t2 - t1g, tb[rep] = t1g - t1;
    }
    const double p_tps = (double)o.prompt_len / attn_bench_median(tp, (int)o.repeat);
    const double b_tps = np > 1 ? (double)ptot / attn_bench_median(tb, (int)o.repeat) : p_tps;
    const double g_tps = (double)(o.gen * np) / attn_bench_median(tg, (int)o.repeat);
    const double rss = attn_bench_rss_mib(); /* before the bandwidth test's buffer */
    /* a generated token reads every weight once and the K and V rows of its whole context
     * (prompt_len + 1 .. prompt_len + gen positions: their mean) in every layer */
    const double kvb = (double)c.num_layers * (double)c.num_kv_heads * (double)c.head_dim * 2.0 *
                       (o.cache_bf16 ? 2.0 : 4.0) * ((double)o.prompt_len + (o.gen + 1) / 2.0);
    /* a batched step reads the weights once for its np tokens, and each sequence's cache */
    const double steps = g_tps / (double)np;
    const double wb = (double)attn_llm_weight_bytes(m), gbs = wb * steps / 1e9,
                 tgbs = (wb + kvb * (double)np) * steps / 1e9,
                 bw = attn_bench_read_bandwidth(attn_ctx_threads(ctx));
    if (o.json) {
        printf("{\"op\": \"llm\", \"model\": \"");
        attn_cli_put_escaped(stdout, o.model);
        printf("\", \"threads\": %d, \"prompt_len\": %lld, \"gen\": %lld, \"repeat\": %lld, "
               "\"parallel\": %lld, \"prompt_tokens_per_s\": %.2f, "
               "\"batched_prompt_tokens_per_s\": %.2f, \"gen_tokens_per_s\": %.2f, "
               "\"weight_bytes_per_token\": %.0f, \"kv_bytes_per_token\": %.0f, "
               "\"gen_weight_gb_per_s\": %.3f, \"gen_read_gb_per_s\": %.3f, "
               "\"read_bandwidth_gb_per_s\": %.3f, \"weight_bandwidth_fraction\": %.4f, "
               "\"bandwidth_fraction\": %.4f, \"peak_rss_mib\": %.1f}\n",
               attn_ctx_threads(ctx), o.prompt_len, o.gen, o.repeat, o.parallel, p_tps, b_tps,
               g_tps, wb,
               kvb, gbs, tgbs, bw, bw > 0 ? gbs / bw : 0.0, bw > 0 ? tgbs / bw : 0.0, rss);
    } else {
        printf("attn bench: llm %s, %d threads\n", o.model, attn_ctx_threads(ctx));
        printf("  prompt (%lld tokens)      %10.1f tokens/s\n", o.prompt_len, p_tps);
        if (np > 1)
            printf("  prompts (%lld sequences, %lld tokens, batched) %10.1f tokens/s\n",
                   (long long)np, (long long)ptot, b_tps);
        if (np > 1)
            printf("  generation (%lld x %lld tokens, batched) %10.1f tokens/s\n", (long long)np,
                   o.gen, g_tps);
        else
            printf("  generation (%lld tokens)  %10.1f tokens/s\n", o.gen, g_tps);
        printf("  read per generated token %10.1f MB: weights %.1f MB + KV cache %.1f MB\n",
               (wb + kvb) / 1e6, wb / 1e6, kvb / 1e6);
        printf("  read rate                %10.2f GB/s = %.0f%% of the measured read bandwidth "
               "(%.2f GB/s); weights alone %.2f GB/s = %.0f%%\n", tgbs,
               bw > 0 ? 100 * tgbs / bw : 0.0, bw, gbs, bw > 0 ? 100 * gbs / bw : 0.0);
        printf("  peak RSS                 %10.1f MiB\n", rss);
    }
    rc = 0;
    goto out;
fail:
    attn_cli_fail(ctx, cmd, st);
out:
    free(ids), free(pids), free(lg);
    for (int64_t i = 0; i < np; i++)
        attn_llm_session_free(ss[i]);
    attn_llm_free(m);
    attn_ctx_free(ctx);
    return rc;
}
