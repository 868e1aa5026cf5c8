#define _POSIX_C_SOURCE 200809L
/* attn generate / chat / tokenize / perplexity: a llama-architecture
 * language model from a GGUF file or a Hugging Face folder (attn_llm_* in attn.h).  `attn
 * generate` with a charlm model.safetensors goes to the character model (cli/charlm_cmd.c). */
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench_util.h"
#include "commands.h"

/* ---- shared ---------------------------------------------------------------------------- */
typedef struct llm_opts {
    const char *model, *prompt, *text, *file, *system, *cache, *logits, *template_file;
    long long tokens, top_k, seed, threads, ctx, prompt_len, gen, repeat, parallel;
    double temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int quiet, raw, json, cache_bf16, f32, ids, act, mmap, vocab_only, chat, no_think;
} llm_opts;

#define MODEL_HELP ATTN_CLI_LLM_MODEL_HELP
#define OPT_SAMPLING(o)                                                                      \
    ATTN_OPT_NUM("temperature", 0, &(o)->temperature, 0, 100, "T",                           \
                 "sampling temperature (default 0.8; 0 = greedy)"),                          \
        ATTN_OPT_INT("top-k", 0, &(o)->top_k, 0, 1 << 30, "K",                               \
                     "draw among the K most likely tokens (default 40; 0 = all)"),           \
        ATTN_OPT_NUM("top-p", 0, &(o)->top_p, 1e-6, 1, "P",                                  \
                     "nucleus sampling: the smallest set holding P of the\n"                 \
                     "probability (default 0.95; 1 = off)"),                                 \
        ATTN_OPT_NUM("min-p", 0, &(o)->min_p, 0, 1, "P",                                     \
                     "drop tokens below P times the best one's probability\n"                \
                     "(default 0.05; 0 = off)"),                                             \
        ATTN_OPT_NUM("repeat-penalty", 0, &(o)->repeat_penalty, 1e-3, 100, "X",              \
                     "divide the logits of tokens already seen by X (HF's\n"                 \
                     "repetition_penalty; default 1 = off)"),                                \
        ATTN_OPT_NUM("presence-penalty", 0, &(o)->presence_penalty, -2, 2, "X",              \
                     "subtract X from the logits of tokens this answer has\n"                \
                     "already generated (OpenAI's presence_penalty; default 0)"),             \
        ATTN_OPT_NUM("frequency-penalty", 0, &(o)->frequency_penalty, -2, 2, "X",            \
                     "subtract X times the count of each token this answer\n"                \
                     "has generated (OpenAI's frequency_penalty; default 0)"),                \
        ATTN_OPT_INT("seed", 0, &(o)->seed, 0, 1LL << 62, "S",                               \
                     "the same seed gives the same text (default 1)")
#define OPT_ACT(o) ATTN_OPT_ACT(&(o)->act)
/* attn chat and attn generate --chat: the chat template and its thinking switch */
#define OPT_TEMPLATE(o)                                                                      \
    ATTN_OPT_STR("template", 0, &(o)->template_file, "FILE|NAME",                            \
                 "a chat template (Jinja text) to use instead of the\n"                       \
                 "model's; it must be one attn recognises, as the model's\n"                  \
                 "(ChatML, Qwen2.5/3, Gemma, Llama 3, Mistral), else it\n"                    \
                 "is refused; or a format's name, for a model file without\n"                 \
                 "one: gemma2, gemma3, llama3, llama3.2, mistral-v3,\n"                       \
                 "mistral-nemo, mistral-v7, qwen3"),                                          \
        ATTN_OPT_FLAG("no-think", 0, &(o)->no_think,                                         \
                      "enable_thinking=False: Qwen3 answers without thinking (an\n"          \
                      "empty <think> block after the generation prompt); other\n"            \
                      "templates have no such switch")
/* every command that loads a model: read the file instead of mapping it (round-3 F6) */
#define OPT_MMAP(o) ATTN_OPT_MMAP(&(o)->mmap)
#define OPT_CACHE(o)                                                                         \
    ATTN_OPT_INT("ctx", 0, &(o)->ctx, 1, 1 << 24, "N",                                       \
                 "context (KV cache) size in tokens (default: the model's,\n"                \
                 "at most 4096)"),                                                           \
        ATTN_OPT_FLAG("cache-bf16", 0, &(o)->cache_bf16,                                     \
                      "keep the KV cache in bfloat16 (half the memory)")

static void defaults(llm_opts *o) {
    memset(o, 0, sizeof *o);
    o->tokens = 128, o->top_k = 40, o->seed = 1;
    o->temperature = 0.8, o->top_p = 0.95, o->min_p = 0.05, o->repeat_penalty = 1.0;
    o->prompt_len = 512, o->gen = 128, o->repeat = 3, o->parallel = 1;
}

static attn_llm_sampler sampler_of(const llm_opts *o) {
    attn_llm_sampler s = attn_llm_sampler_defaults();
    s.temperature = (float)o->temperature, s.top_k = o->top_k, s.top_p = (float)o->top_p;
    s.min_p = (float)o->min_p, s.repetition_penalty = (float)o->repeat_penalty;
    s.presence_penalty = (float)o->presence_penalty;
    s.frequency_penalty = (float)o->frequency_penalty;
    s.seed = (uint64_t)o->seed;
    return s;
}

/* The model with its tokenizer; 0 on failure (printed). */
static int load(const char *cmd, const llm_opts *o, attn_ctx *ctx, attn_llm **m) {
    return attn_cli_llm_load(cmd, ctx, o->model,
                             (o->f32 ? ATTN_LLM_LOAD_F32 : 0u) | ATTN_CLI_MMAP_FLAGS(o->mmap) |
                                 (o->vocab_only ? ATTN_LLM_LOAD_VOCAB_ONLY : 0u),
                             o->act, m);
}

/* --template and the template check of attn chat and attn generate --chat; 0 on failure
 * (printed). */
static int chat_ready(const char *cmd, const llm_opts *o, attn_ctx *ctx, attn_llm *m) {
    if (o->template_file && !attn_cli_chat_template(cmd, ctx, m, o->template_file)) return 0;
    const char *tmpl = attn_llm_chat_template(m);
    const char *name = attn_chat_template_name(ctx, tmpl);
    if (!name) {
        fprintf(stderr, "attn %s: ", cmd);
        attn_cli_put_escaped(stderr, attn_ctx_errmsg(ctx));
        fprintf(stderr, "; give a template with --template FILE, or a format's name (e.g. "
                        "--template gemma3)%s\n",
                strcmp(cmd, "chat") ? "" : ", or --raw to chat without one");
        return 0;
    }
    if (o->no_think && strcmp(name, "qwen3") && !o->quiet)
        fprintf(stderr, "attn %s: note: the %s template has no thinking switch: --no-think "
                        "changes nothing\n", cmd, name);
    return 1;
}

/* The conversation as the model's template writes it, with the generation prompt: *text
 * malloc'ed; 0 on failure (printed). */
static int chat_text(const char *cmd, const llm_opts *o, attn_ctx *ctx, const attn_llm *m,
                     const attn_chat_message *msgs, int64_t n, char **text, size_t *tl) {
    attn_chat_options opt;
    memset(&opt, 0, sizeof opt);
    opt.add_generation_prompt = 1;
    opt.thinking = o->no_think ? ATTN_CHAT_THINKING_OFF : ATTN_CHAT_THINKING_DEFAULT;
    attn_status st = attn_llm_chat_apply(ctx, m, msgs, n, &opt, NULL, 0, tl);
    if (st == ATTN_OK) {
        char *t = *tl < SIZE_MAX ? realloc(*text, *tl + 1) : NULL;
        if (!t) {
            fprintf(stderr, "attn %s: out of memory\n", cmd);
            return 0;
        }
        *text = t;
        st = attn_llm_chat_apply(ctx, m, msgs, n, &opt, t, *tl + 1, tl);
    }
    if (st != ATTN_OK) attn_cli_fail(ctx, cmd, st);
    return st == ATTN_OK;
}

/* The ids of text with tok (special tokens parsed), lead (>= 0) first and tail (>= 0) last:
 * *ids malloc'ed; 0 on failure (printed). */
static int tokenize_text(const char *cmd, attn_ctx *ctx, const attn_bpe *tok, const char *text,
                         size_t len, int32_t lead, int32_t tail, int32_t **ids, int64_t *n) {
    int64_t k = 0, nl = lead >= 0, nt = tail >= 0;
    attn_status st = attn_bpe_encode(ctx, tok, text, len, ATTN_BPE_PARSE_SPECIAL, NULL, 0, &k);
    if (st == ATTN_OK) {
        if (!(*ids = malloc(sizeof **ids * (size_t)(k + nl + nt + 1)))) {
            fprintf(stderr, "attn %s: out of memory\n", cmd);
            return 0;
        }
        if (nl) (*ids)[0] = lead;
        st = attn_bpe_encode(ctx, tok, text, len, ATTN_BPE_PARSE_SPECIAL, *ids + nl, k, &k);
        if (nt) (*ids)[nl + k] = tail;
    }
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, cmd, st);
        return 0;
    }
    *n = k + nl + nt;
    return 1;
}

/* Token ids of text (special tokens parsed; bos first when the model asks): *ids malloc'ed. */
static int encode(const char *cmd, attn_ctx *ctx, const attn_llm *m, const char *text,
                  size_t len, int bos, int32_t **ids, int64_t *n) {
    attn_llm_special sp;
    attn_llm_get_special(m, &sp);
    return tokenize_text(cmd, ctx, attn_llm_tokenizer(m), text, len,
                         bos && sp.add_bos && sp.bos >= 0 ? sp.bos : -1, -1, ids, n);
}

static int64_t capacity(const llm_opts *o, const attn_llm *m) {
    attn_llm_config c;
    attn_llm_get_info(m, &c);
    int64_t cap = o->ctx ? o->ctx : (c.max_position_embeddings < 4096 ? c.max_position_embeddings
                                                                      : 4096);
    return cap < c.max_position_embeddings ? cap : c.max_position_embeddings;
}

static int emit_ids;         /* attn generate --ids: token ids instead of text */
static int64_t emitted;      /* ids printed by this run_gen */

/* Streams the text of one token; 0 when writing failed. */
static int emit(attn_ctx *ctx, const attn_llm *m, attn_bpe_stream *bs, int32_t id) {
    char buf[1024];
    if (emit_ids) {
        int k = snprintf(buf, sizeof buf, "%s%d", emitted++ ? " " : "", (int)id);
        return attn_cli_write_stdout(buf, (size_t)k) == (size_t)k;
    }
    size_t len = 0;
    /* the generated tokens continue the prompt: no leading space is dropped */
    if (attn_bpe_decode_stream(ctx, attn_llm_tokenizer(m), bs, id,
                               ATTN_BPE_SKIP_SPECIAL | ATTN_BPE_CONTINUE, buf, sizeof buf,
                               &len) != ATTN_OK)
        return 1; /* a token longer than the buffer cannot happen for real vocabularies */
    if (len && attn_cli_write_stdout(buf, len) != len) return 0;
    fflush(stdout);
    return 1;
}

/* Samples up to max tokens after the session's last logits lg, streaming them; the ids are
 * appended to hist (capacity enough).  Stops at an end token (not printed), at max, or when
 * the context is full (*full = 1).  Returns the status. */
static attn_status run_gen(attn_ctx *ctx, const attn_llm *m, attn_llm_session *s,
                           const attn_llm_sampler *sp, float *lg, int32_t *hist, int64_t *nh,
                           int64_t max, uint64_t *step, int64_t *made, int *full) {
    attn_bpe_stream bs;
    memset(&bs, 0, sizeof bs);
    *made = 0, *full = 0, emitted = 0;
    attn_llm_config c;
    attn_llm_get_info(m, &c);
    const int64_t n_prompt = *nh; /* the presence and frequency penalties count what follows */
    for (int64_t i = 0; i < max; i++) {
        int32_t id;
        attn_status st =
            attn_llm_sample_ex(ctx, sp, lg, c.vocab_size, hist, *nh, n_prompt, step, &id);
        if (st) return st;
        if (attn_llm_is_end(m, id)) break;
        hist[(*nh)++] = id;
        (*made)++;
        if (!emit(ctx, m, &bs, id)) return ATTN_E_IO;
        if (i + 1 == max) break;
        if (attn_llm_session_pos(s) >= attn_llm_session_capacity(s)) {
            *full = 1;
            break;
        }
        if ((st = attn_llm_session_decode(ctx, s, id, lg)) != ATTN_OK) return st;
    }
    char tail[8];
    size_t tl = 0;
    attn_bpe_decode_stream_end(ctx, &bs, tail, sizeof tail, &tl);
    if (tl) attn_cli_write_stdout(tail, tl);
    fflush(stdout);
    return ATTN_OK;
}

int attn_cmd_llm_generate(int argc, char **argv);

/* --logits FILE: the prompt's ids, the logits of every prompt position, the generated ids. */
static int write_logits(const char *cmd, attn_ctx *ctx, const attn_llm *m,
                        const attn_llm_config *c, const int32_t *ids, int64_t n,
                        const int32_t *gen, int64_t ng, const char *path) {
    float *all = malloc(sizeof *all * (size_t)n * (size_t)c->vocab_size);
    attn_st_writer *w = NULL;
    attn_status st = all ? attn_llm_forward(ctx, m, ids, 1, n, all) : ATTN_E_NOMEM;
    const int64_t s1[1] = {n}, s2[2] = {n, c->vocab_size}, s3[1] = {ng};
    if (!st) st = attn_st_writer_create(ctx, &w);
    if (!st) st = attn_st_writer_add(w, "ids", ATTN_I32, 1, s1, ids);
    if (!st) st = attn_st_writer_add(w, "logits", ATTN_F32, 2, s2, all);
    if (!st && ng) st = attn_st_writer_add(w, "generated", ATTN_I32, 1, s3, gen);
    if (!st) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    free(all);
    if (st) attn_cli_fail(ctx, cmd, st);
    return st == ATTN_OK;
}

/* `attn generate`: the character model for a safetensors file, else the LLM (which names
 * what a file that is neither GGUF, a model folder nor safetensors is). */
int attn_cmd_generate(int argc, char **argv) {
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[i + 1];
        else if (!strncmp(argv[i], "--model=", 8)) model = argv[i] + 8;
    }
    if (model && !attn_cli_is_safetensors(model))
        return attn_cmd_llm_generate(argc, argv);
    if (!model)
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
                int r = attn_cmd_llm_generate(argc, argv);
                printf("\nWith a model.safetensors of 'attn train charlm' as --model it samples "
                       "the character\nmodel instead: attn generate --model FILE --help.\n");
                return r;
            }
    return attn_cmd_charlm_generate(argc, argv);
}

int attn_cmd_llm_generate(int argc, char **argv) {
    llm_opts o;
    defaults(&o);
    int npos;
    const attn_cli_opt table[] = {
        ATTN_OPT_STR("model", 0, &o.model, "FILE", MODEL_HELP),
        OPT_MMAP(&o),
        ATTN_OPT_STR("prompt", 'p', &o.prompt, "TEXT",
                     "the text to continue, as it is (special tokens such as\n"
                     "<|im_start|> are recognised); required"),
        ATTN_OPT_FLAG("chat", 0, &o.chat,
                      "write the prompt as a user message in the model's chat\n"
                      "format (its template, with the generation prompt) and\n"
                      "continue that: the assistant's answer"),
        ATTN_OPT_STR("system", 0, &o.system, "TEXT",
                     "with --chat: the system message (default: the\n"
                     "template's own, if any)"),
        OPT_TEMPLATE(&o),
        ATTN_OPT_INT("tokens", 'n', &o.tokens, 0, 1 << 24, "N",
                     "tokens to generate at most (default 128); generation\n"
                     "also stops at the model's end token"),
        OPT_SAMPLING(&o),
        OPT_CACHE(&o),
        ATTN_OPT_FLAG("f32", 0, &o.f32, "dequantize the weights to float32 at load (slower)"),
        OPT_ACT(&o),
        ATTN_OPT_FLAG("ids", 0, &o.ids, "print the generated token ids instead of the text"),
        ATTN_OPT_STR("logits", 0, &o.logits, "FILE",
                     "also write the prompt's ids and the logits of every prompt\n"
                     "position (one forward pass) to FILE (safetensors: \"ids\"\n"
                     "I32 [n], \"logits\" F32 [n, vocab]), and the generated ids\n"
                     "(\"generated\")"),
        ATTN_OPT_THREADS(&o.threads),
        ATTN_OPT_FLAG("quiet", 'q', &o.quiet, "no statistics on stderr"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "generate", "attn generate --model MODEL --prompt TEXT [options]",
        "Continues a prompt with a llama-architecture language model, streaming the text\n"
        "to stdout; prompt and generation speeds on stderr.  --temperature 0 is greedy.\n"
        "With --chat the prompt is a user message in the model's chat format and the\n"
        "text is the assistant's answer.",
        table, NULL,
        "attn generate --model SmolLM2-135M-Instruct.Q4_1.gguf --prompt \"Once upon a time\" "
        "--tokens 64\n"
        "attn generate --model Qwen3-0.6B-Q8_0.gguf --chat --no-think --prompt \"Hi\""};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!o.model) return attn_cli_usage_error(&spec, "--model is required");
    if (!o.prompt) return attn_cli_usage_error(&spec, "--prompt TEXT is required");
    if (!o.chat && (o.system || o.template_file || o.no_think))
        return attn_cli_usage_error(&spec, "--system, --template and --no-think write the "
                                           "prompt as a chat: give --chat");
    const char *cmd = "generate";
    attn_ctx *ctx = NULL;
    attn_llm *m = NULL;
    attn_llm_session *s = NULL;
    int32_t *ids = NULL, *hist = NULL;
    float *lg = NULL;
    int rc = 1;
    int64_t n = 0;
    attn_status st;
    if (attn_cli_ctx(cmd, o.threads, 0, &ctx)) return 1;
    if (!load(cmd, &o, ctx, &m)) goto out;
    if (o.chat) {
        /* [system,] user: the template writes its own bos (no bos added, as transformers) */
        attn_chat_message msgs[2];
        memset(msgs, 0, sizeof msgs);
        int64_t nm = 0;
        if (o.system) msgs[nm].role = "system", msgs[nm++].content = o.system;
        msgs[nm].role = "user", msgs[nm++].content = o.prompt;
        char *text = NULL;
        size_t tl = 0;
        int ok = chat_ready(cmd, &o, ctx, m) && chat_text(cmd, &o, ctx, m, msgs, nm, &text, &tl) &&
                 encode(cmd, ctx, m, text, tl, 0, &ids, &n);
        free(text);
        if (!ok) goto out;
    } else if (!encode(cmd, ctx, m, o.prompt, strlen(o.prompt), 1, &ids, &n)) {
        goto out;
    }
    if (n == 0) {
        fprintf(stderr, "attn %s: the prompt is empty: nothing to continue\n", cmd);
        goto out;
    }
    attn_llm_config c;
    attn_llm_get_info(m, &c);
    const int64_t cap = capacity(&o, m);
    if (n > cap) {
        fprintf(stderr, "attn %s: the prompt has %lld tokens, more than the context of %lld "
                        "(--ctx)\n", cmd, (long long)n, (long long)cap);
        goto out;
    }
    if ((st = attn_llm_session_create(ctx, m, cap, o.cache_bf16 ? ATTN_BF16 : ATTN_F32, &s))) {
        attn_cli_fail(ctx, cmd, st);
        goto out;
    }
    emit_ids = o.ids;
    lg = malloc(sizeof *lg * (size_t)c.vocab_size);
    hist = malloc(sizeof *hist * (size_t)(n + o.tokens + 1));
    if (!lg || !hist) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        goto out;
    }
    memcpy(hist, ids, sizeof *ids * (size_t)n);
    double t0 = attn_bench_now_s();
    if ((st = attn_llm_session_prefill(ctx, s, ids, n, lg))) {
        attn_cli_fail(ctx, cmd, st);
        goto out;
    }
    double t1 = attn_bench_now_s();
    attn_llm_sampler sp = sampler_of(&o);
    uint64_t step = 0;
    int64_t nh = n, made = 0;
    int full = 0;
    if (o.tokens > 0 &&
        (st = run_gen(ctx, m, s, &sp, lg, hist, &nh, o.tokens, &step, &made, &full))) {
        if (st != ATTN_E_IO) attn_cli_fail(ctx, cmd, st);
        goto out;
    }
    double t2 = attn_bench_now_s();
    printf("\n");
    if (o.logits && !write_logits(cmd, ctx, m, &c, ids, n, hist + n, made, o.logits)) goto out;
    if (!o.quiet) {
        if (full) fprintf(stderr, "(context full: %lld tokens)\n", (long long)cap);
        fprintf(stderr, "prompt: %lld tokens, %.1f tokens/s; generated: %lld tokens, %.1f "
                        "tokens/s; %d threads\n", (long long)n, (double)n / (t1 - t0),
                (long long)made, made > 1 ? (double)(made - 1) / (t2 - t1) : 0.0,
                attn_ctx_threads(ctx));
    }
    rc = 0;
out:
    free(ids), free(hist), free(lg);
    attn_llm_session_free(s);
    attn_llm_free(m);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- chat ------------------------------------------------------------------------------ */
typedef struct convo {
    attn_chat_message *m;
    char **own; /* the strings to free */
    int64_t n, cap;
} convo;

static int convo_add(convo *c, const char *role, const char *content) {
    if (c->n == c->cap) {
        int64_t nc = c->cap ? 2 * c->cap : 16;
        attn_chat_message *m = realloc(c->m, sizeof *m * (size_t)nc);
        if (!m) return 0;
        c->m = m;
        char **o = realloc(c->own, sizeof *o * (size_t)nc);
        if (!o) return 0;
        c->own = o, c->cap = nc;
    }
    char *r = strdup(role), *t = strdup(content);
    if (!r || !t) {
        free(r), free(t);
        return 0;
    }
    memset(&c->m[c->n], 0, sizeof c->m[c->n]);
    c->m[c->n].role = r, c->m[c->n].content = t;
    c->own[c->n++] = NULL;
    return 1;
}

static void convo_free(convo *c) {
    for (int64_t i = 0; i < c->n; i++) {
        free((char *)c->m[i].role);
        free((char *)c->m[i].content);
    }
    free(c->m), free(c->own);
}

static int read_line(FILE *f, char **buf, size_t *cap, size_t max, ssize_t *len);

int attn_cmd_chat(int argc, char **argv) {
    llm_opts o;
    defaults(&o);
    o.tokens = 512;
    int npos;
    const attn_cli_opt table[] = {
        ATTN_OPT_STR("model", 0, &o.model, "FILE", MODEL_HELP),
        OPT_MMAP(&o),
        ATTN_OPT_STR("system", 0, &o.system, "TEXT",
                     "the system message (default: the template's own, if any)"),
        ATTN_OPT_INT("tokens", 'n', &o.tokens, 1, 1 << 24, "N",
                     "tokens of one answer at most (default 512)"),
        OPT_SAMPLING(&o),
        OPT_CACHE(&o),
        OPT_ACT(&o),
        OPT_TEMPLATE(&o),
        ATTN_OPT_FLAG("raw", 0, &o.raw,
                      "no chat template: each line is appended to the text as\n"
                      "it is and continued (for models without a template attn\n"
                      "formats)"),
        ATTN_OPT_THREADS(&o.threads),
        ATTN_OPT_FLAG("quiet", 'q', &o.quiet, "no tokens/s on stderr"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "chat", "attn chat --model MODEL [options]",
        "Chats with an instruction-tuned model: one user turn per line of standard input,\n"
        "the answer streamed to stdout; end of input ends the chat.  The conversation is\n"
        "formatted with the model's chat template, one of those attn recognises: ChatML,\n"
        "Qwen2.5, Qwen3, Gemma 2/3, Llama 3.0-3.3, Mistral v0.3, Nemo, Large 2411, Small 3\n"
        "and 3.2, Ministral 3 (docs/llm.md; another template file: --template; none:\n"
        "--raw).",
        table, NULL,
        "attn chat --model SmolLM2-135M-Instruct.Q4_1.gguf --system \"Answer briefly.\"\n"
        "attn chat --model Qwen3-0.6B-Q8_0.gguf --no-think"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!o.model) return attn_cli_usage_error(&spec, "--model is required");
    if (o.raw && (o.system || o.template_file || o.no_think))
        return attn_cli_usage_error(&spec, "--system, --template and --no-think need the chat "
                                           "template (not --raw)");
    const char *cmd = "chat";
    attn_ctx *ctx = NULL;
    attn_llm *m = NULL;
    attn_llm_session *s = NULL;
    int32_t *ids = NULL, *hist = NULL;
    float *lg = NULL;
    char *line = NULL, *text = NULL, *answer = NULL;
    size_t lcap = 0;
    convo cv = {0};
    int rc = 1;
    attn_status st;
    if (attn_cli_ctx(cmd, o.threads, 0, &ctx)) return 1;
    if (!load(cmd, &o, ctx, &m)) goto out;
    if (!o.raw && !chat_ready(cmd, &o, ctx, m)) goto out;
    attn_llm_config c;
    attn_llm_get_info(m, &c);
    const int64_t cap = capacity(&o, m);
    if ((st = attn_llm_session_create(ctx, m, cap, o.cache_bf16 ? ATTN_BF16 : ATTN_F32, &s))) {
        attn_cli_fail(ctx, cmd, st);
        goto out;
    }
    lg = malloc(sizeof *lg * (size_t)c.vocab_size);
    hist = malloc(sizeof *hist * (size_t)(cap + 1)); /* the ids in the cache */
    if (!lg || !hist) goto oom;
    if (o.system && !convo_add(&cv, "system", o.system)) goto oom;
    attn_llm_sampler sp = sampler_of(&o);
    uint64_t step = 0;
    int64_t nh = 0;
    size_t rawlen = 0;
    ssize_t got;
    int64_t bound;
    const char *bound_name;
    if (!attn_cli_text_bound(cmd, ctx, &bound, &bound_name)) goto out;
    for (;;) {
        /* one line, bounded: the conversation's text may not pass the text bound either */
        int lr = read_line(stdin, &line, &lcap, (size_t)bound - (size_t)(o.raw ? rawlen : 0),
                           &got);
        if (lr == 0) break; /* end of input: the chat is over */
        if (lr == -1) {
            fprintf(stderr, "attn %s: standard input: a line (with the conversation before it) "
                            "is over %lld bytes (%s)\n", cmd, (long long)bound, bound_name);
            goto out;
        }
        if (lr == -2) {
            fprintf(stderr, "attn %s: standard input: a line holds a NUL byte (at byte %lld): "
                            "not text\n", cmd, (long long)got);
            goto out;
        }
        if (lr == -3) goto oom;
        if (lr == -4) {
            fprintf(stderr, "attn %s: cannot read standard input: %s\n", cmd, strerror(errno));
            goto out;
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        size_t tl = 0;
        /* the whole conversation as text, then its ids */
        if (o.raw) {
            char *t = realloc(text, rawlen + (size_t)got + 2);
            if (!t) goto oom;
            text = t;
            memcpy(text + rawlen, line, (size_t)got);
            rawlen += (size_t)got;
            text[rawlen++] = '\n';
            text[rawlen] = 0;
            tl = rawlen;
        } else {
            if (!convo_add(&cv, "user", line)) goto oom;
            if (!chat_text(cmd, &o, ctx, m, cv.m, cv.n, &text, &tl)) goto out;
        }
        int64_t n;
        free(ids), ids = NULL;
        /* a template writes its own bos (transformers tokenizes its text without adding one) */
        if (!encode(cmd, ctx, m, text, tl, o.raw, &ids, &n)) goto out;
        /* keep the common prefix of the cache, prefill the rest */
        int64_t p = 0;
        while (p < nh && p < n && hist[p] == ids[p]) p++;
        if (p > attn_llm_session_pos(s)) p = attn_llm_session_pos(s);
        if (p == n) p = n - 1; /* the last token's logits are needed */
        if (n + 1 > cap) {
            fprintf(stderr, "attn %s: the conversation (%lld tokens) no longer fits the context "
                            "of %lld tokens (--ctx)\n", cmd, (long long)n, (long long)cap);
            goto out;
        }
        attn_llm_session_rewind(s, p);
        double t0 = attn_bench_now_s();
        if ((st = attn_llm_session_prefill(ctx, s, ids + p, n - p, lg))) goto fail;
        memcpy(hist, ids, sizeof *ids * (size_t)n);
        nh = n;
        double t1 = attn_bench_now_s();
        int64_t made = 0, before = nh;
        int full = 0;
        int64_t room = cap - nh;
        st = run_gen(ctx, m, s, &sp, lg, hist, &nh, o.tokens < room ? o.tokens : room, &step,
                     &made, &full);
        if (st == ATTN_E_IO) goto out;
        if (st) goto fail;
        double t2 = attn_bench_now_s();
        printf("\n");
        fflush(stdout);
        if (!o.quiet)
            fprintf(stderr, "[%lld prompt tokens at %.0f/s, %lld tokens at %.1f/s]\n",
                    (long long)(n - p), (double)(n - p) / (t1 - t0), (long long)made,
                    made > 1 ? (double)(made - 1) / (t2 - t1) : 0.0);
        /* the answer joins the conversation */
        size_t al = 0;
        free(answer), answer = NULL;
        if ((st = attn_bpe_decode(ctx, attn_llm_tokenizer(m), hist + before, made,
                                  ATTN_BPE_SKIP_SPECIAL, NULL, 0, &al)))
            goto fail;
        if (!(answer = malloc(al + 1))) goto oom;
        if ((st = attn_bpe_decode(ctx, attn_llm_tokenizer(m), hist + before, made,
                                  ATTN_BPE_SKIP_SPECIAL, answer, al + 1, &al)))
            goto fail;
        answer[al] = 0;
        if (o.raw) {
            char *t = realloc(text, rawlen + al + 2);
            if (!t) goto oom;
            text = t;
            memcpy(text + rawlen, answer, al);
            rawlen += al;
            text[rawlen] = 0;
        } else if (!convo_add(&cv, "assistant", answer)) {
            goto oom;
        }
        if (full) {
            fprintf(stderr, "attn %s: context full (%lld tokens, --ctx)\n", cmd, (long long)cap);
            goto out;
        }
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "attn %s: out of memory\n", cmd);
    goto out;
fail:
    attn_cli_fail(ctx, cmd, st);
out:
    convo_free(&cv);
    free(ids), free(hist), free(lg), free(line), free(text), free(answer);
    attn_llm_session_free(s);
    attn_llm_free(m);
    attn_ctx_free(ctx);
    return rc;
}

/* One line of f (without its '\n') into *buf (grown as needed, NUL-terminated), *len its
 * length.  1: a line; 0: end of input with nothing read; -1: longer than max bytes; -2: a NUL
 * byte (*len its offset); -3: out of memory; -4: a read error (errno).  Read byte by byte, so
 * nothing past the line is consumed and an endless stream stops at max. */
static int read_line(FILE *f, char **buf, size_t *cap, size_t max, ssize_t *len) {
    size_t n = 0;
    int c;
    *len = 0;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == 0) {
            *len = (ssize_t)n;
            return -2;
        }
        if (n >= max) return -1;
        if (n + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            if (nc > max + 2) nc = max + 2;
            char *t = realloc(*buf, nc);
            if (!t) return -3;
            *buf = t, *cap = nc;
        }
        (*buf)[n++] = (char)c;
    }
    if (c == EOF && ferror(f)) return -4;
    if (c == EOF && n == 0) return 0;
    if (!*buf) { /* an empty line first */
        if (!(*buf = malloc(1))) return -3;
        *cap = 1;
    }
    (*buf)[n] = 0;
    *len = (ssize_t)n;
    return 1;
}

/* ---- tokenize -------------------------------------------------------------------------- */
/* 1 when dir/name exists */
static int has_file(const char *dir, const char *name) {
    char p[4096];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && stat(p, &sb) == 0;
}

int attn_cmd_tokenize(int argc, char **argv) {
    llm_opts o;
    defaults(&o);
    int npos, no_bos = 0;
    const attn_cli_opt table[] = {
        ATTN_OPT_STR("model", 0, &o.model, "FILE",
                     "a GGUF file with a tokenizer (any architecture; vocabulary-\n"
                     "only files too), a folder with tokenizer.json, or a BERT\n"
                     "folder (vocab.txt, tokenizer_config.json); required"),
        OPT_MMAP(&o),
        ATTN_OPT_STR("text", 0, &o.text, "TEXT", "the text to tokenize"),
        ATTN_OPT_STR("file", 0, &o.file, "FILE", "tokenize FILE's bytes instead ('-': stdin)"),
        ATTN_OPT_FLAG("no-bos", 0, &no_bos,
                      "no bos token even where the model adds one (BERT: no\n"
                      "[CLS] and [SEP])"),
        ATTN_OPT_THREADS(&o.threads),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "tokenize", "attn tokenize --model MODEL --text TEXT",
        "Prints the token ids of a text, space-separated, on one line (special tokens such\n"
        "as <|im_end|> recognised; bos first where the model adds it; a WordPiece (BERT)\n"
        "tokenizer's text between the [CLS] and [SEP] its tokenizer.json or folder names).",
        table, NULL, "attn tokenize --model SmolLM2-135M-Instruct.Q4_1.gguf --text \"Hello!\""};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!o.model) return attn_cli_usage_error(&spec, "--model is required");
    if (!o.text == !o.file) return attn_cli_usage_error(&spec, "give --text or --file (one)");
    const char *cmd = "tokenize";
    attn_ctx *ctx = NULL;
    attn_llm *m = NULL;
    attn_bpe *wp = NULL;
    int32_t *ids = NULL;
    char *data = NULL;
    size_t len = 0;
    int64_t n = 0;
    int rc = 1;
    if (attn_cli_ctx(cmd, o.threads, 0, &ctx)) return 1;
    if (o.file && !attn_cli_read_text(cmd, ctx, o.file, &data, &len)) goto out;
    const attn_bpe *tok;
    int32_t lead = -1, tail = -1;
    struct stat sb;
    if (stat(o.model, &sb) == 0 && S_ISDIR(sb.st_mode) && !has_file(o.model, "tokenizer.json") &&
        has_file(o.model, "vocab.txt")) { /* a BERT folder: vocab.txt, as attn embed reads it */
        attn_status st = attn_bpe_load_wordpiece(ctx, o.model, &wp);
        if (st != ATTN_OK) {
            attn_cli_fail(ctx, cmd, st);
            goto out;
        }
        tok = wp;
    } else {
        o.vocab_only = 1; /* the tokenizer alone: any architecture, vocabulary-only files */
        if (!load(cmd, &o, ctx, &m)) goto out;
        tok = attn_llm_tokenizer(m);
        attn_llm_special sp;
        attn_llm_get_special(m, &sp);
        if (!no_bos && sp.add_bos && sp.bos >= 0) lead = sp.bos;
    }
    attn_bpe_info ti;
    attn_bpe_get_info(tok, &ti);
    if (ti.kind == ATTN_BPE_KIND_WORDPIECE) /* BERT: [CLS] text [SEP] */
        lead = no_bos ? -1 : ti.cls_id, tail = no_bos ? -1 : ti.sep_id;
    if (!tokenize_text(cmd, ctx, tok, o.text ? o.text : data, o.text ? strlen(o.text) : len,
                       lead, tail, &ids, &n))
        goto out;
    for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    rc = 0;
out:
    free(ids), free(data);
    attn_llm_free(m);
    attn_bpe_free(wp);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- perplexity ------------------------------------------------------------------------ */
/* attn perplexity's running estimate, eight chunks a line */
typedef struct ppl_ui {
    int quiet;
    int64_t nc;
} ppl_ui;
static int ppl_progress(void *user, const attn_llm_ppl *r) {
    const ppl_ui *u = user;
    if (!u->quiet) {
        fprintf(stderr, "[%lld]%.4f%s", (long long)r->chunks, r->ppl,
                r->chunks % 8 == 0 || r->chunks == u->nc ? "\n" : " ");
        fflush(stderr);
    }
    return 0;
}

int attn_cmd_perplexity(int argc, char **argv) {
    llm_opts o;
    defaults(&o);
    o.ctx = 512;
    int npos;
    long long chunks = 0;
    const attn_cli_opt table[] = {
        ATTN_OPT_STR("model", 0, &o.model, "FILE", MODEL_HELP),
        OPT_MMAP(&o),
        ATTN_OPT_STR("file", 0, &o.file, "FILE", "the text ('-': stdin); required"),
        ATTN_OPT_INT("ctx", 0, &o.ctx, 2, 1 << 24, "N", "tokens per chunk (default 512)"),
        ATTN_OPT_INT("chunks", 0, &chunks, 0, 1LL << 40, "N",
                     "score the first N chunks only (default 0: all)"),
        ATTN_OPT_FLAG("f32", 0, &o.f32, "dequantize the weights to float32 at load"),
        OPT_ACT(&o),
        ATTN_OPT_THREADS(&o.threads),
        ATTN_OPT_FLAG("quiet", 'q', &o.quiet, "only the final line"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "perplexity", "attn perplexity --model MODEL --file TEXT [--ctx 512]",
        "Perplexity of a text with llama.cpp's method: the text tokenized whole (bos first\n"
        "where the model adds it), cut into chunks of --ctx tokens, each run alone (its\n"
        "first token replaced by bos where the model adds one); the second half of each\n"
        "chunk is scored.  Prints the running estimate per chunk and, on the last line,\n"
        "the final perplexity.",
        table, NULL,
        "attn perplexity --model SmolLM2-135M-Instruct.Q4_1.gguf --file /usr/share/common-"
        "licenses/GPL-3"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!o.model || !o.file)
        return attn_cli_usage_error(&spec, "--model and --file are required");
    const char *cmd = "perplexity";
    attn_ctx *ctx = NULL;
    attn_llm *m = NULL;
    int32_t *ids = NULL;
    char *data = NULL;
    size_t len = 0;
    int64_t n = 0;
    int rc = 1;
    attn_status st;
    if (o.ctx < 3) { /* positions ctx/2 .. ctx-2 are scored */
        fprintf(stderr, "attn %s: --ctx %lld scores no token (the second half of each chunk is "
                        "scored, predicting the next token): use --ctx 3 or more\n", cmd, o.ctx);
        return 1;
    }
    if (attn_cli_ctx(cmd, o.threads, 0, &ctx)) return 1;
    if (!attn_cli_read_text(cmd, ctx, o.file, &data, &len)) goto out;
    if (!load(cmd, &o, ctx, &m)) goto out;
    if (!encode(cmd, ctx, m, data, len, 1, &ids, &n)) goto out;
    const int64_t nc = chunks && chunks < n / o.ctx ? chunks : n / o.ctx;
    if (!o.quiet && nc > 0)
        fprintf(stderr, "%lld tokens, %lld chunks of %lld, scoring the second half of each\n",
                (long long)n, (long long)nc, o.ctx);
    ppl_ui ui = {o.quiet, nc};
    attn_llm_ppl res;
    const double t0 = attn_bench_now_s();
    if ((st = attn_llm_perplexity(ctx, m, ids, n, o.ctx, chunks, ppl_progress, &ui, &res))) {
        attn_cli_fail(ctx, cmd, st);
        goto out;
    }
    if (!o.quiet)
        fprintf(stderr, "%lld tokens scored in %.1f s (%.0f tokens/s evaluated)\n",
                (long long)res.count, attn_bench_now_s() - t0,
                (double)(res.chunks * o.ctx) / (attn_bench_now_s() - t0));
    printf("Final estimate: PPL = %.4f +/- %.5f\n", res.ppl, res.err);
    rc = 0;
out:
    free(ids), free(data);
    attn_llm_free(m);
    attn_ctx_free(ctx);
    return rc;
}
