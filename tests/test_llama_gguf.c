#define _GNU_SOURCE /* memmem */
/* attn_llm from a GGUF file: tests/fixtures/llama_tiny.gguf (tests/gen_llama_gguf.py: the
 * random llama_tiny_untied model written as llama.cpp's converter writes llama models, q/k rows
 * permuted, Q8_0 / Q4_1 / Q4_0 / Q5_1 / Q5_0 / F16 / F32 tensors, a byte-level tokenizer)
 * against transformers reading the same file (which dequantizes it): logits, greedy
 * continuation, the quantized kernels and the F32 load, thread counts, the text side, and
 * damaged files refused with messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn.h"
#include "testutil.h"

#define FILE_GGUF "fixtures/llama_tiny.gguf"
#define V 256

static attn_st *expected;

/* Tensor name of the expected file as floats (ints converted) into a malloc'ed array. */
static float *get(attn_ctx *ctx, const char *name, int64_t *n) {
    attn_st_tensor t;
    if (attn_st_find(expected, name, &t) != ATTN_OK) return NULL;
    float *p = malloc(sizeof(float) * (size_t)t.numel);
    if (p && attn_st_to_f32(ctx, &t, p, (size_t)t.numel) != ATTN_OK) {
        free(p);
        return NULL;
    }
    *n = t.numel;
    return p;
}

static double rel_err(const float *a, const float *b, int64_t n) {
    double e = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN sticks */
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
    }
    return e / (mx > 0 ? mx : 1);
}

static void check_model(attn_ctx *ctx, unsigned flags, const char *what) {
    attn_llm *m = NULL;
    if (!TU_STATUS(attn_llm_load_gguf(ctx, FILE_GGUF, flags, &m), ATTN_OK, ctx)) return;
    attn_llm_config c;
    attn_llm_get_info(m, &c);
    TU_CHECK(c.vocab_size == V && c.num_layers == 2 && c.num_heads == 4 &&
                 c.num_kv_heads == 2 && c.head_dim == 16 && !c.tie_word_embeddings,
             "%s: config", what);
    /* F32 activations: the dequantized model's product to rounding (1e-5); int16 (the default
     * where the CPU has its kernels, x86 with AVX2; float elsewhere) within 1e-3, and the
     * default gives int16's bits */
    static const attn_qact acts[3] = {ATTN_QACT_F32, ATTN_QACT_Q16, ATTN_QACT_DEFAULT};
    float *prev = NULL;
    for (int a = 0; a < 3; a++) {
        TU_STATUS(attn_llm_set_activations(m, acts[a]), ATTN_OK, ctx);
        const double tol = a ? 1e-3 : 1e-5;
        const char *an = a == 0 ? "f32" : a == 1 ? "int16" : "default";
        for (int k = 0; k < 3; k++) {
            char in[32], lo[32];
            snprintf(in, sizeof in, "ids_%d", k);
            snprintf(lo, sizeof lo, "logits_%d", k);
            int64_t n, nl;
            float *idf = get(ctx, in, &n), *want = get(ctx, lo, &nl);
            if (!idf || !want) {
                TU_CHECK(0, "expected tensors %s %s", in, lo);
                free(idf), free(want);
                continue;
            }
            int32_t ids[64];
            for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)idf[i];
            float *got = malloc(sizeof(float) * (size_t)(n * V)), *g2 = malloc(sizeof *g2 * V);
            TU_STATUS(attn_llm_forward(ctx, m, ids, 1, n, got), ATTN_OK, ctx);
            double e = rel_err(got, want, n * V);
            printf("  %-10s %-7s T=%-3lld forward vs transformers: %.2e of max|logit|\n", what,
                   an, (long long)n, e);
            TU_CHECK(e <= tol, "%s %s T=%lld: logits %.3g from transformers'", what, an,
                     (long long)n, e);
            /* the session: prefill all but the last, decode the last */
            attn_llm_session *s = NULL;
            if (TU_STATUS(attn_llm_session_create(ctx, m, 64, ATTN_F32, &s), ATTN_OK, ctx)) {
                if (n > 1) TU_STATUS(attn_llm_session_prefill(ctx, s, ids, n - 1, NULL), ATTN_OK, ctx);
                TU_STATUS(attn_llm_session_decode(ctx, s, ids[n - 1], g2), ATTN_OK, ctx);
                e = rel_err(g2, want + (n - 1) * V, V);
                TU_CHECK(e <= tol, "%s %s T=%lld: session logits %.3g from transformers'",
                         what, an, (long long)n, e);
                if (k == 0 && a == 1) prev = memcpy(malloc(sizeof *g2 * V), g2, sizeof *g2 * V);
                if (k == 0 && a == 2 && prev)
                    TU_CHECK(memcmp(prev, g2, sizeof *g2 * V) == 0,
                             "%s: the default's decode differs from int16's", what);
                attn_llm_session_free(s);
            }
            free(idf), free(want), free(got), free(g2);
        }
    }
    free(prev);
    /* greedy continuation as transformers' generate */
    int64_t np, ng;
    float *pf = get(ctx, "greedy_prompt", &np), *gf = get(ctx, "greedy", &ng);
    attn_llm_session *s = NULL;
    if (pf && gf && TU_STATUS(attn_llm_session_create(ctx, m, 64, ATTN_F32, &s), ATTN_OK, ctx)) {
        int32_t ids[64];
        float lg[V];
        for (int64_t i = 0; i < np; i++) ids[i] = (int32_t)pf[i];
        TU_STATUS(attn_llm_session_prefill(ctx, s, ids, np, lg), ATTN_OK, ctx);
        attn_llm_sampler sp = attn_llm_sampler_defaults();
        sp.temperature = 0;
        int same = 1;
        for (int64_t i = 0; i < ng; i++) {
            int32_t id;
            TU_STATUS(attn_llm_sample(ctx, &sp, lg, V, NULL, 0, NULL, &id), ATTN_OK, ctx);
            same &= id == (int32_t)gf[i];
            TU_STATUS(attn_llm_session_decode(ctx, s, id, lg), ATTN_OK, ctx);
        }
        TU_CHECK(same, "%s: greedy continuation differs from transformers' generate", what);
    }
    attn_llm_session_free(s);
    free(pf), free(gf);
    /* the text side */
    const attn_bpe *tok = attn_llm_tokenizer(m);
    attn_llm_special sp;
    TU_CHECK(tok && attn_bpe_vocab_size(tok) == V, "%s: tokenizer", what);
    TU_CHECK(attn_llm_get_special(m, &sp) == ATTN_OK && sp.bos == 1 && sp.eos == 2 &&
                 !sp.add_bos && sp.eot == -1, "%s: special ids", what);
    TU_CHECK(attn_chat_template_check(ctx, attn_llm_chat_template(m)) == ATTN_OK,
             "%s: chat template", what);
    if (tok) {
        int32_t ids[16];
        int64_t n = 0;
        TU_STATUS(attn_bpe_encode(ctx, tok, "hi\xc3\xa9", 4, 0, ids, 16, &n), ATTN_OK, ctx);
        TU_CHECK(n == 4 && ids[0] == 'h' && ids[1] == 'i' && ids[2] == 0xc3 && ids[3] == 0xa9,
                 "%s: byte-level ids", what);
    }
    TU_CHECK(attn_llm_weight_bytes(m) > 0, "%s: weight bytes", what);
    attn_llm_free(m);
}

/* 1 vs 2 threads: the same bits (quantized kernels). */
static void check_threads(void) {
    attn_ctx *c1 = tu_ctx(1), *c2 = tu_ctx(2);
    attn_llm *m = NULL;
    if (c1 && c2 && TU_STATUS(attn_llm_load_gguf(c1, FILE_GGUF, 0, &m), ATTN_OK, c1)) {
        int32_t ids[40];
        for (int i = 0; i < 40; i++) ids[i] = (i * 37 + 11) % V;
        static float a[40 * V], b[40 * V];
        const int64_t Ts[2] = {5, 40};
        for (int k = 0; k < 2; k++) {
            TU_STATUS(attn_llm_forward(c1, m, ids, 1, Ts[k], a), ATTN_OK, c1);
            TU_STATUS(attn_llm_forward(c2, m, ids, 1, Ts[k], b), ATTN_OK, c2);
            TU_CHECK(!memcmp(a, b, sizeof(float) * (size_t)(Ts[k] * V)),
                     "T=%lld: 1 and 2 threads differ", (long long)Ts[k]);
        }
    }
    attn_llm_free(m);
    attn_ctx_free(c1), attn_ctx_free(c2);
}

/* The bytes of FILE_GGUF (malloc'ed, *size of them), or NULL after a failed check. */
static unsigned char *read_gguf(long *size) {
    FILE *f = fopen(FILE_GGUF, "rb");
    if (!f) {
        TU_CHECK(0, "cannot read %s", FILE_GGUF);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)*size);
    size_t got = d ? fread(d, 1, (size_t)*size, f) : 0;
    fclose(f);
    TU_CHECK(got == (size_t)*size, "read %s", FILE_GGUF);
    if (got != (size_t)*size) free(d), d = NULL;
    return d;
}

/* Damaged copies of the file: refused with a status and a message, never a crash. */
static void check_damaged(attn_ctx *ctx) {
    long size = 0;
    unsigned char *d = read_gguf(&size);
    if (!d) return;
    const char *tmp = "llama_gguf_damaged.tmp";
    struct {
        const char *find, *put, *msg;
        attn_status st;
    } cases[] = {
        {"llama", "llamb", "architecture \"llamb\"", ATTN_E_UNSUPPORTED},
        {"blk.1.ffn_down.weight", "blk.1.ffn_dowX.weight", "blk.1.ffn_down.weight",
         ATTN_E_NOT_FOUND},
        {"tokenizer.ggml.model", "tokenizer.ggml.modeX", NULL, ATTN_OK},
        {"llama.attention.layer_norm_rms_epsilon", "llama.attention.layer_norm_rms_epsiloX",
         "layer_norm_rms_epsilon", ATTN_E_FORMAT},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned char *e = malloc((size_t)size);
        memcpy(e, d, (size_t)size);
        size_t fl = strlen(cases[c].find);
        /* the value "llama" of general.architecture: the occurrence after that key */
        unsigned char *p = e;
        if (c == 0) {
            unsigned char *k = memmem(e, (size_t)size, "general.architecture", 20);
            p = k ? k + 20 : e;
        }
        unsigned char *at = memmem(p, (size_t)(e + size - p), cases[c].find, fl);
        TU_CHECK(at != NULL, "case %zu: pattern", c);
        if (at) memcpy(at, cases[c].put, fl);
        FILE *o = fopen(tmp, "wb");
        fwrite(e, 1, (size_t)size, o);
        fclose(o);
        attn_llm *m = NULL;
        attn_status st = attn_llm_load_gguf(ctx, tmp, 0, &m);
        TU_CHECK(st == cases[c].st && (!cases[c].msg || strstr(attn_ctx_errmsg(ctx),
                                                                cases[c].msg)),
                 "case %zu: %s (%s)", c, attn_status_name(st), attn_ctx_errmsg(ctx));
        if (c == 2) TU_CHECK(m && !attn_llm_tokenizer(m), "no tokenizer keys: no tokenizer");
        attn_llm_free(m);
        free(e);
    }
    /* truncations: a sample of cut points */
    for (long cut = 0; cut < size; cut += 1 + cut / 8) {
        FILE *o = fopen(tmp, "wb");
        fwrite(d, 1, (size_t)cut, o);
        fclose(o);
        attn_llm *m = NULL;
        attn_status st = attn_llm_load_gguf(ctx, tmp, 0, &m);
        TU_CHECK(st != ATTN_OK && attn_ctx_errmsg(ctx)[0], "truncated at %ld: %s", cut,
                 attn_status_name(st));
        attn_llm_free(m);
    }
    remove(tmp);
    free(d);
}

/* The real SmolLM2-135M-Instruct Q4_1 file when ATTN_SMOLLM2_GGUF names it (CI downloads it):
 * against transformers reading it (tests/fixtures/smollm2_expected.safetensors, written by
 * tests/gen_llama_gguf.py): the prompts' ids, the 32 largest logits of the last position within
 * 1e-3 of max|logit|, greedy continuations of 32 tokens identical. */
static void check_smollm2(attn_ctx *ctx) {
    const char *path = getenv("ATTN_SMOLLM2_GGUF");
    if (!path || !*path) {
        printf("test_llama_gguf: ATTN_SMOLLM2_GGUF not set: the SmolLM2-135M checks are "
               "skipped\n");
        return;
    }
    attn_st *ex = NULL;
    if (!TU_STATUS(attn_st_read_file(ctx, "fixtures/smollm2_expected.safetensors", &ex), ATTN_OK,
                   ctx))
        return;
    attn_st *keep = expected;
    expected = ex;
    for (int mode = 0; mode < 2; mode++) {
        attn_llm *m = NULL;
        if (!TU_STATUS(attn_llm_load_gguf(ctx, path, mode ? ATTN_LLM_LOAD_F32 : 0, &m), ATTN_OK,
                       ctx))
            break;
        attn_llm_config c;
        attn_llm_get_info(m, &c);
        float *lg = malloc(sizeof(float) * (size_t)c.vocab_size);
        static const char *const prompts[3] = {
            "The capital of France is",
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
            "def fibonacci(n):"};
        for (int k = 0; k < 3; k++) {
            char nm[32];
            int64_t n, nt, ng, nx;
            snprintf(nm, sizeof nm, "ids_%d", k);
            float *idf = get(ctx, nm, &n);
            snprintf(nm, sizeof nm, "top_ids_%d", k);
            float *tid = get(ctx, nm, &nt);
            snprintf(nm, sizeof nm, "top_logits_%d", k);
            float *tlg = get(ctx, nm, &nt);
            snprintf(nm, sizeof nm, "greedy_%d", k);
            float *gr = get(ctx, nm, &ng);
            snprintf(nm, sizeof nm, "max_abs_%d", k);
            float *mx = get(ctx, nm, &nx);
            int32_t ids[256];
            int64_t ni = 0;
            TU_STATUS(attn_bpe_encode(ctx, attn_llm_tokenizer(m), prompts[k], strlen(prompts[k]),
                                      ATTN_BPE_PARSE_SPECIAL, ids, 256, &ni), ATTN_OK, ctx);
            int same = idf && ni == n;
            for (int64_t i = 0; same && i < n; i++) same = ids[i] == (int32_t)idf[i];
            TU_CHECK(same, "SmolLM2 prompt %d: ids differ from transformers'", k);
            attn_llm_session *s = NULL;
            if (!same || !tid || !tlg || !gr || !mx ||
                !TU_STATUS(attn_llm_session_create(ctx, m, 512, ATTN_F32, &s), ATTN_OK, ctx)) {
                free(idf), free(tid), free(tlg), free(gr), free(mx);
                continue;
            }
            TU_STATUS(attn_llm_session_prefill(ctx, s, ids, ni, lg), ATTN_OK, ctx);
            double e = 0;
            for (int64_t j = 0; j < nt; j++) {
                double d = fabs((double)lg[(int32_t)tid[j]] - tlg[j]);
                if (!(d <= e)) e = d;
            }
            printf("  SmolLM2 %s prompt %d: top-32 logits within %.2e of max|logit| %.2f\n",
                   mode ? "f32" : "Q4_1", k, e / mx[0], (double)mx[0]);
            TU_CHECK(e <= 1e-3 * mx[0], "SmolLM2 prompt %d: logits %.3g from transformers'", k,
                     e);
            attn_llm_sampler sp = attn_llm_sampler_defaults();
            sp.temperature = 0;
            int ok = 1;
            int64_t g = 0;
            for (; g < 32; g++) {
                int32_t id;
                attn_llm_sample(ctx, &sp, lg, c.vocab_size, NULL, 0, NULL, &id);
                if (id == 2) break;
                if (g >= ng || id != (int32_t)gr[g]) {
                    ok = 0;
                    break;
                }
                if (attn_llm_session_decode(ctx, s, id, lg) != ATTN_OK) break;
            }
            TU_CHECK(ok && (g == ng || g == 32), "SmolLM2 %s prompt %d: greedy continuation "
                     "differs from transformers' at token %lld", mode ? "f32" : "Q4_1", k,
                     (long long)g);
            attn_llm_session_free(s);
            free(idf), free(tid), free(tlg), free(gr), free(mx);
        }
        free(lg);
        attn_llm_free(m);
    }
    expected = keep;
    attn_st_free(ex);
}

/* The real Gemma 3 270M Q4_K_M file when ATTN_GEMMA3_GGUF names it (CI downloads it): against
 * transformers' Gemma3ForCausalLM on the same file dequantized (fixtures/gemma3_ref.txt, written
 * by tests/gen_gemma3_ref.py): the prompts' ids, at every prompt position the 16 largest logits
 * and 8 fixed ids within 1e-4 of max|logit| (attn_llm_forward), and 24 greedy tokens identical
 * (a session: prefill, then decode over the cache), on 1 and 2 threads; a prompt of 700 tokens
 * (past the 512-token window of the local layers): the last position's logits after a
 * session's prefill and 16 greedy tokens. */
static void check_gemma3(void) {
    const char *path = getenv("ATTN_GEMMA3_GGUF");
    if (!path || !*path) {
        printf("test_llama_gguf: ATTN_GEMMA3_GGUF not set: the Gemma 3 270M checks are "
               "skipped\n");
        return;
    }
    /* float activations (the exact product) on 1 and 2 threads, then the default (int16 where
     * the CPU has its kernels: within 1e-3, its greedy tokens counted, not required) */
    for (int pass = 0; pass < 3; pass++) {
        const int threads = pass == 0 ? 1 : 2, dflt = pass == 2;
        attn_ctx *ctx = tu_ctx(threads);
        attn_llm *m = NULL;
        FILE *f = fopen("fixtures/gemma3_ref.txt", "r");
        TU_CHECK(f != NULL, "cannot read fixtures/gemma3_ref.txt");
        if (!f || !ctx || !TU_STATUS(attn_llm_load_gguf(ctx, path, 0, &m), ATTN_OK, ctx)) {
            if (f) fclose(f);
            attn_ctx_free(ctx);
            return;
        }
        if (!dflt) TU_STATUS(attn_llm_set_activations(m, ATTN_QACT_F32), ATTN_OK, ctx);
        attn_llm_config c;
        attn_llm_get_info(m, &c);
        TU_CHECK(c.qk_norm && c.sandwich_norm && c.mlp_act == 1 && c.sliding_window == 512 &&
                     c.sliding_period == 6 && c.head_dim == 256 && c.num_kv_heads == 1,
                 "Gemma 3: the family's settings");
        {   /* a turn ends at <end_of_turn> (and at eos); a Gemma conversation formats with the
             * file's bos text (the file has no template: Gemma 3's is given) */
            int32_t eot = attn_bpe_token_id(attn_llm_tokenizer(m), "<end_of_turn>");
            attn_llm_special sp;
            attn_llm_get_special(m, &sp);
            TU_CHECK(eot >= 0 && sp.eot == eot && attn_llm_is_end(m, eot) &&
                         attn_llm_is_end(m, sp.eos) && !attn_llm_is_end(m, sp.bos),
                     "Gemma 3: the end-of-turn token %d", (int)eot);
            const char *bos = attn_bpe_token_text(attn_llm_tokenizer(m), sp.bos);
            attn_chat_message msg = {"user", "Hi"};
            char out[128], *tmpl = NULL;
            size_t ol = 0, tn = 0;
            FILE *tf = fopen("fixtures/chat/templates/gemma3.jinja", "rb");
            if (tf && !fseek(tf, 0, SEEK_END) && ftell(tf) > 0) {
                tn = (size_t)ftell(tf);
                rewind(tf);
                if ((tmpl = malloc(tn + 1)) && fread(tmpl, 1, tn, tf) == tn) tmpl[tn] = 0;
                else free(tmpl), tmpl = NULL;
            }
            if (tf) fclose(tf);
            TU_CHECK(tmpl != NULL, "cannot read fixtures/chat/templates/gemma3.jinja");
            TU_CHECK(tmpl && bos && !strcmp(bos, "<bos>") &&
                         attn_chat_render(ctx, tmpl, bos, NULL, &msg, 1, 1, out, sizeof out,
                                          &ol) == ATTN_OK &&
                         !strcmp(out, "<bos><start_of_turn>user\nHi<end_of_turn>\n"
                                      "<start_of_turn>model\n"),
                     "Gemma 3: a chat turn (%s)", attn_ctx_errmsg(ctx));
            free(tmpl);
        }
        const int64_t Vv = c.vocab_size;
        int32_t ids[1024], gr[64];
        int last_only = 0; /* a long prompt: the last position's logits (a session's prefill) */
        int64_t n = 0, ng = 0, prompts = 0, same = 0;
        double mx = 0, worst = 0;
        float *lg = NULL;
        char *l;
        while ((l = tu_read_line(f))) {
            char *p = l + 2;
            if (l[0] == 'I' || l[0] == 'G') {
                const int64_t cap = l[0] == 'I' ? 1024 : 64;
                int64_t k = strtoll(p, &p, 10);
                for (int64_t i = 0; i < k && i < cap; i++)
                    (l[0] == 'I' ? ids : gr)[i] = (int32_t)strtol(p, &p, 10);
                *(l[0] == 'I' ? &n : &ng) = k < cap ? k : cap;
            } else if (l[0] == 'M') {
                mx = strtod(p, NULL);
                free(lg);
                last_only = n > 64;
                lg = malloc(sizeof(float) * (size_t)((last_only ? 1 : n) * Vv));
                if (!last_only) {
                    TU_STATUS(attn_llm_forward(ctx, m, ids, 1, n, lg), ATTN_OK, ctx);
                } else { /* past the 512-token window: the cache path, the last row */
                    attn_llm_session *s = NULL;
                    if (TU_STATUS(attn_llm_session_create(ctx, m, 1024, ATTN_F32, &s), ATTN_OK,
                                  ctx))
                        TU_STATUS(attn_llm_session_prefill(ctx, s, ids, n, lg), ATTN_OK, ctx);
                    attn_llm_session_free(s);
                }
            } else if (l[0] == 'L' && lg) {
                int64_t pos = strtoll(p, &p, 10), k = strtoll(p, &p, 10);
                const int64_t row = last_only ? (pos == n - 1 ? 0 : -1) : pos;
                for (int64_t j = 0; j < k && row >= 0 && pos < n; j++) {
                    int64_t id = strtoll(p, &p, 10);
                    double v = strtod(p, &p), d = fabs((double)lg[row * Vv + id] - v) / mx;
                    if (!(d <= worst)) worst = d; /* relative to the prompt's max|logit| */
                }
            }
            if (l[0] == 'G') { /* the greedy continuation through a session */
                attn_llm_session *s = NULL;
                float *row = malloc(sizeof(float) * (size_t)Vv);
                int64_t g = 0;
                if (TU_STATUS(attn_llm_session_create(ctx, m, 1024, ATTN_F32, &s), ATTN_OK, ctx) &&
                    TU_STATUS(attn_llm_session_prefill(ctx, s, ids, n, row), ATTN_OK, ctx)) {
                    attn_llm_sampler sp = attn_llm_sampler_defaults();
                    sp.temperature = 0;
                    for (; g < ng; g++) {
                        int32_t id;
                        attn_llm_sample(ctx, &sp, row, Vv, NULL, 0, NULL, &id);
                        if (id != gr[g] || attn_llm_session_decode(ctx, s, id, row) != ATTN_OK)
                            break;
                    }
                }
                TU_CHECK(g == ng || dflt, "Gemma 3 prompt %lld (%d threads): greedy differs "
                         "from transformers' at token %lld", (long long)prompts, threads,
                         (long long)g);
                same += g == ng;
                attn_llm_session_free(s);
                free(row);
                prompts++;
            }
            free(l);
        }
        fclose(f);
        free(lg);
        TU_CHECK(prompts >= 5, "Gemma 3: %lld prompts in the fixture", (long long)prompts);
        TU_CHECK(worst <= (dflt ? 1e-3 : 1e-4), "Gemma 3%s: logits %.3g of max|logit| from "
                 "transformers'", dflt ? " (default activations)" : "", worst);
        printf("  Gemma 3 270M Q4_K_M (%d threads, %s activations): %lld prompts (one of 700 "
               "tokens, past the sliding window), logits within %.2e of max|logit|, greedy "
               "tokens as transformers' in %lld\n", threads, dflt ? "default" : "f32",
               (long long)prompts, worst, (long long)same);
        attn_llm_free(m);
        attn_ctx_free(ctx);
    }
}

/* attn_llm_save_gguf / attn_llm_save_hf on the GGUF model (q/k rows interleaved): refusals,
 * then each file read back gives the model's logits, and GGUF -> HF -> GGUF gives the same
 * bytes as GGUF -> GGUF (the HF rows put back and permuted again). */
static int64_t file_bytes(const char *path, unsigned char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n + 1);
    if (!*out || fread(*out, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    return n;
}

static void check_save(attn_ctx *ctx) {
    char dir[] = "/tmp/attn_save_XXXXXX", a[300], b[300], hf[300], p[340];
    if (!mkdtemp(dir)) {
        TU_CHECK(0, "mkdtemp");
        return;
    }
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    snprintf(b, sizeof b, "%s/b.gguf", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    attn_llm *m = NULL, *g = NULL, *h = NULL;
    attn_gguf *tok = NULL;
    enum { T = 8 };
    int32_t ids[T] = {1, 104, 105, 32, 195, 169, 7, 42};
    float *l0 = malloc(sizeof(float) * T * V), *l1 = malloc(sizeof(float) * T * V);
    TU_CHECK(l0 && l1, "malloc");
    if (!l0 || !l1 || !TU_STATUS(attn_llm_load(ctx, FILE_GGUF, 0, &m), ATTN_OK, ctx) ||
        !TU_STATUS(attn_gguf_open(ctx, FILE_GGUF, &tok), ATTN_OK, ctx))
        goto done;
    /* not trainable yet: refused, nothing written */
    TU_STATUS(attn_llm_save_gguf(ctx, m, NULL, ATTN_Q_F32, a), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llm_save_hf(ctx, m, NULL, hf), ATTN_E_INVALID, ctx);
    TU_CHECK(access(a, F_OK) != 0, "a refused save wrote %s", a);
    TU_STATUS(attn_llm_save_gguf(NULL, m, NULL, ATTN_Q_F32, a), ATTN_E_INVALID, NULL);
    if (!TU_STATUS(attn_llm_make_trainable(ctx, m, ATTN_LLM_DEQUANTIZE), ATTN_OK, ctx) ||
        !TU_STATUS(attn_llm_forward(ctx, m, ids, 1, T, l0), ATTN_OK, ctx))
        goto done;
    TU_CHECK(attn_llm_gguf_writable(m) == 1 && attn_llm_gguf_writable(NULL) == 0, "writable");
    TU_STATUS(attn_llm_save_gguf(ctx, m, NULL, ATTN_Q_Q4_0, a), ATTN_E_UNSUPPORTED, ctx);
    /* GGUF: the model's own tokenizer converted, then the source's keys copied */
    if (!TU_STATUS(attn_llm_save_gguf(ctx, m, NULL, ATTN_Q_F32, a), ATTN_OK, ctx) ||
        !TU_STATUS(attn_llm_load(ctx, a, 0, &g), ATTN_OK, ctx) ||
        !TU_STATUS(attn_llm_forward(ctx, g, ids, 1, T, l1), ATTN_OK, ctx))
        goto done;
    TU_CHECK(rel_err(l1, l0, T * V) <= 1e-6, "GGUF export: logits %.3g off",
             rel_err(l1, l0, T * V));
    TU_CHECK(attn_llm_tokenizer(g) && attn_bpe_vocab_size(attn_llm_tokenizer(g)) == V,
             "GGUF export: tokenizer");
    if (!TU_STATUS(attn_llm_save_gguf(ctx, m, tok, ATTN_Q_F32, a), ATTN_OK, ctx)) goto done;
    /* HF folder (no tokenizer files), read back, then GGUF again */
    if (!TU_STATUS(attn_llm_save_hf(ctx, m, NULL, hf), ATTN_OK, ctx) ||
        !TU_STATUS(attn_llm_load(ctx, hf, 0, &h), ATTN_OK, ctx) ||
        !TU_STATUS(attn_llm_forward(ctx, h, ids, 1, T, l1), ATTN_OK, ctx))
        goto done;
    TU_CHECK(rel_err(l1, l0, T * V) <= 1e-6, "HF export: logits %.3g off",
             rel_err(l1, l0, T * V));
    if (!TU_STATUS(attn_llm_make_trainable(ctx, h, 0), ATTN_OK, ctx) ||
        !TU_STATUS(attn_llm_save_gguf(ctx, h, tok, ATTN_Q_F32, b), ATTN_OK, ctx))
        goto done;
    {
        unsigned char *x = NULL, *y = NULL;
        int64_t nx = file_bytes(a, &x), ny = file_bytes(b, &y);
        TU_CHECK(nx > 0 && nx == ny && !memcmp(x, y, (size_t)nx),
                 "GGUF -> HF -> GGUF: other bytes than GGUF -> GGUF (%lld, %lld)",
                 (long long)nx, (long long)ny);
        free(x), free(y);
    }
    { /* a format by its name (a Jinja comment): written as no template at all */
        attn_gguf *w = NULL;
        attn_gguf_kv kv;
        if (TU_STATUS(attn_llm_set_chat_template(ctx, m, attn_chat_template_named("gemma3")),
                      ATTN_OK, ctx) &&
            TU_STATUS(attn_llm_save_gguf(ctx, m, NULL, ATTN_Q_F32, b), ATTN_OK, ctx) &&
            TU_STATUS(attn_gguf_open(ctx, b, &w), ATTN_OK, ctx))
            TU_CHECK(attn_gguf_kv_find(w, "tokenizer.chat_template", &kv) == ATTN_E_NOT_FOUND,
                     "a named format written as a chat template");
        attn_gguf_free(w);
        TU_STATUS(attn_llm_set_chat_template(ctx, m, "{# attn chat format: gemma4 #}"),
                  ATTN_E_UNSUPPORTED, ctx);
        attn_ctx_clear_error(ctx);
    }
done:
    attn_llm_free(m), attn_llm_free(g), attn_llm_free(h);
    attn_gguf_free(tok);
    free(l0), free(l1);
    remove(a), remove(b);
    snprintf(p, sizeof p, "%s/model.safetensors", hf), remove(p);
    snprintf(p, sizeof p, "%s/config.json", hf), remove(p);
    rmdir(hf), rmdir(dir);
}

/* IQ4_NL through the loader: the file with the type of both attn_output matrices changed from
 * Q4_0 to IQ4_NL (the same 18-byte blocks: f16 d, 16 bytes of nibbles, now read through the
 * non-linear table).  The quantized load (IQ4_NL kernels) against the F32 load of the same file
 * (attn_dequantize's values, gguf's bit for bit: test_quant): the same weights, so the logits
 * agree to float rounding; and they differ from the Q4_0 file's (the type is read, not
 * ignored). */
static void check_iq4(attn_ctx *ctx) {
    long size = 0;
    unsigned char *d = read_gguf(&size);
    if (!d) return;
    const char *names[2] = {"blk.0.attn_output.weight", "blk.1.attn_output.weight"};
    for (int i = 0; i < 2; i++) { /* name, u32 n_dims = 2, u64 ne[2], u32 type */
        unsigned char *at = memmem(d, (size_t)size, names[i], strlen(names[i]));
        TU_CHECK(at != NULL, "%s in the file", names[i]);
        if (!at) continue;
        unsigned char *ty = at + strlen(names[i]) + 4 + 16;
        TU_CHECK(ty[0] == ATTN_Q_Q4_0 && !ty[1] && !ty[2] && !ty[3], "%s: Q4_0", names[i]);
        ty[0] = ATTN_Q_IQ4_NL;
    }
    const char *tmp = "llama_gguf_iq4.tmp";
    FILE *o = fopen(tmp, "wb");
    fwrite(d, 1, (size_t)size, o);
    fclose(o);
    free(d);
    attn_llm *mq = NULL, *mf = NULL, *m0 = NULL;
    TU_STATUS(attn_llm_load_gguf(ctx, tmp, 0, &mq), ATTN_OK, ctx);
    if (mq) TU_STATUS(attn_llm_set_activations(mq, ATTN_QACT_F32), ATTN_OK, ctx); /* exact */
    TU_STATUS(attn_llm_load_gguf(ctx, tmp, ATTN_LLM_LOAD_F32, &mf), ATTN_OK, ctx);
    TU_STATUS(attn_llm_load_gguf(ctx, FILE_GGUF, 0, &m0), ATTN_OK, ctx);
    int64_t n = 0;
    float *idf = get(ctx, "ids_0", &n);
    if (mq && mf && m0 && idf) {
        int32_t ids[64];
        for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)idf[i];
        float *yq = malloc(sizeof(float) * (size_t)(n * V)), *yf = malloc(sizeof(float) * (size_t)(n * V)),
              *y0 = malloc(sizeof(float) * (size_t)(n * V));
        TU_STATUS(attn_llm_forward(ctx, mq, ids, 1, n, yq), ATTN_OK, ctx);
        TU_STATUS(attn_llm_forward(ctx, mf, ids, 1, n, yf), ATTN_OK, ctx);
        TU_STATUS(attn_llm_forward(ctx, m0, ids, 1, n, y0), ATTN_OK, ctx);
        const double e = rel_err(yq, yf, n * V), e0 = rel_err(yq, y0, n * V);
        printf("  IQ4_NL attn_output: quantized vs F32 load %.2e of max|logit|, vs the Q4_0 file "
               "%.2e\n", e, e0);
        TU_CHECK(e <= 1e-5, "IQ4_NL: quantized and F32 loads differ by %.3g", e);
        TU_CHECK(e0 >= 1e-3, "IQ4_NL: logits as the Q4_0 file's (%.3g): type not read", e0);
        /* token by token (the matrix-vector kernels): the decode of the last token */
        float gq[V], gf[V];
        attn_llm *ms[2] = {mq, mf};
        float *gs[2] = {gq, gf};
        for (int k = 0; k < 2; k++) {
            attn_llm_session *ss = NULL;
            if (!TU_STATUS(attn_llm_session_create(ctx, ms[k], 64, ATTN_F32, &ss), ATTN_OK, ctx))
                continue;
            if (n > 1) TU_STATUS(attn_llm_session_prefill(ctx, ss, ids, n - 1, NULL), ATTN_OK, ctx);
            TU_STATUS(attn_llm_session_decode(ctx, ss, ids[n - 1], gs[k]), ATTN_OK, ctx);
            attn_llm_session_free(ss);
        }
        const double ed = rel_err(gq, gf, V);
        printf("  IQ4_NL attn_output: decode, quantized vs F32 load %.2e of max|logit|\n", ed);
        TU_CHECK(ed <= 1e-5, "IQ4_NL: decode, quantized and F32 loads differ by %.3g", ed);
        free(yq), free(yf), free(y0);
    }
    free(idf);
    attn_llm_free(mq), attn_llm_free(mf), attn_llm_free(m0);
    remove(tmp);
}

int main(void) {
    attn_ctx *ctx = tu_ctx(2);
    if (!ctx) return tu_finish("test_llama_gguf");
    if (TU_STATUS(attn_st_read_file(ctx, "fixtures/llama_tiny_gguf_expected.safetensors",
                                    &expected), ATTN_OK, ctx)) {
        check_model(ctx, 0, "quantized");
        check_model(ctx, ATTN_LLM_LOAD_MMAP, "mapped");
        check_model(ctx, ATTN_LLM_LOAD_F32, "f32");
        { /* reading and mapping at once: refused by name */
            attn_llm *m = NULL;
            TU_STATUS(attn_llm_load_gguf(ctx, FILE_GGUF, ATTN_LLM_LOAD_MMAP | ATTN_LLM_LOAD_NO_MMAP,
                                         &m), ATTN_E_INVALID, ctx);
            TU_CHECK(m == NULL && strstr(attn_ctx_errmsg(ctx), "_MMAP and _NO_MMAP"),
                     "both mapping flags: %s", attn_ctx_errmsg(ctx));
            TU_STATUS(attn_llm_load(ctx, "fixtures/llama_tiny", ATTN_LLM_LOAD_MMAP |
                                    ATTN_LLM_LOAD_NO_MMAP, &m), ATTN_E_INVALID, ctx);
            attn_ctx_clear_error(ctx);
        }
        check_threads();
        check_save(ctx);
        check_damaged(ctx);
        check_iq4(ctx);
        check_smollm2(ctx);
        check_gemma3();
    }
    attn_st_free(expected);
    attn_ctx_free(ctx);
    return tu_finish("test_llama_gguf");
}
