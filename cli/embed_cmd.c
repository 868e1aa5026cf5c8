#define _POSIX_C_SOURCE 200809L
/* attn embed / attn similar: sentence embeddings with a BERT sentence-transformers folder
 * (attn_bert_* in attn.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "commands.h"

typedef struct lines {
    char **s;
    long long n, cap;
} lines;

static int push(lines *l, char *s) {
    if (l->n == l->cap) {
        long long nc = l->cap ? l->cap * 2 : 64;
        char **p = realloc(l->s, sizeof *p * (size_t)nc);
        if (!p) return 0;
        l->s = p, l->cap = nc;
    }
    l->s[l->n++] = s;
    return 1;
}

/* Appends the lines of text (without their \n or \r\n; no empty line after a final \n),
 * which it cuts in place.  0 when out of memory. */
static int split_lines(lines *l, char *text, size_t len) {
    char *p = text, *end = text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        if (e > p && e[-1] == '\r') e[-1] = 0;
        *e = 0;
        if (!push(l, p)) return 0;
        p = nl ? nl + 1 : end;
    }
    return 1;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

typedef struct opts {
    const char *model, *file, *corpus;
    long long threads, top, repeat;
    int json, ids, dtype;
} opts;

static const attn_dtype dtypes[] = {ATTN_F32, ATTN_F16, ATTN_BF16}; /* --dtype's choices */
#define OPT_DTYPE(o)                                                                         \
    ATTN_OPT_CHOICE("dtype", 0, &(o)->dtype, "f32|f16|bf16", "T",                            \
                    "f32 (default), f16 or bf16: the encoder's matrix products\n"            \
                    "on 16-bit weights and activations (faster with f16 where\n"             \
                    "the CPU has AVX512_FP16; less accurate: see\n"                          \
                    "attn_bert_set_dtype in attn.h)")
#define MODEL_HELP                                                                           \
    "a BERT sentence-transformers / Hugging Face folder\n"                                   \
    "(config.json, model.safetensors, vocab.txt, modules.json,\n"                            \
    "1_Pooling); required"

/* Loads the model into ctx; 0 on failure (message printed). */
static int open_model(const char *cmd, const opts *o, attn_ctx *ctx, attn_bert **b) {
    attn_status st = attn_bert_load(ctx, o->model, b);
    if (st == ATTN_OK && dtypes[o->dtype] != ATTN_F32) {
        st = attn_bert_set_dtype(ctx, *b, dtypes[o->dtype]);
        if (st != ATTN_OK) attn_bert_free(*b), *b = NULL;
    }
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, cmd, st);
        return 0;
    }
    return 1;
}

int attn_cmd_embed(int argc, char **argv) {
    opts o;
    memset(&o, 0, sizeof o);
    int npos;
    const attn_cli_opt table[] = {
        ATTN_OPT_STR("model", 0, &o.model, "DIR", MODEL_HELP),
        ATTN_OPT_STR("file", 0, &o.file, "FILE",
                     "embed each line of FILE too ('-': standard input)"),
        ATTN_OPT_FLAG("json", 0, &o.json,
                      "one JSON object per line: {\"index\": i, \"embedding\": [...]}"),
        ATTN_OPT_THREADS(&o.threads),
        OPT_DTYPE(&o),
        ATTN_OPT_FLAG("ids", 0, &o.ids,
                      "print the token ids of each text instead ([CLS] ...\n"
                      "[SEP], truncated)"),
        ATTN_OPT_INT("repeat", 0, &o.repeat, 0, 100000, "N",
                     "benchmark: embed the texts N more times, print\n"
                     "sentences/s to stderr"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "embed", "attn embed --model DIR [options] [TEXT...]",
        "Prints one sentence embedding per text: space-separated floats, one line per text.\n"
        "The texts are the arguments followed by the lines of --file.",
        table, NULL,
        "attn embed --model tests/fixtures/bert_tiny \"hello world\" \"a second text\"\n"
        "printf 'one\\ntwo\\n' | attn embed --model DIR --file - --json"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (!o.model) return attn_cli_usage_error(&spec, "--model DIR is required");
    lines texts = {0};
    char *text = NULL;
    size_t len = 0;
    attn_ctx *ctx = NULL;
    attn_bert *b = NULL;
    float *out = NULL;
    int32_t *ids = NULL;
    int rc = 1;
    for (int i = 1; i <= npos; i++)
        if (!push(&texts, argv[i])) goto oom;
    if (attn_cli_ctx("embed", o.threads, 0, &ctx)) goto done;
    if (o.file) {
        if (!attn_cli_read_text("embed", ctx, o.file, &text, &len)) goto done;
        if (!split_lines(&texts, text, len)) goto oom;
    }
    if (texts.n == 0) {
        if (o.file)
            rc = attn_cli_usage_error(&spec, "no texts (%s is empty)",
                                      strcmp(o.file, "-") ? o.file : "standard input");
        else
            rc = attn_cli_usage_error(&spec, "no texts (give them as arguments or with --file)");
        goto done;
    }
    if (!open_model("embed", &o, ctx, &b)) goto done;
    attn_bert_info in;
    attn_bert_get_info(b, &in);
    attn_status st;
    if (o.ids) {
        if (!(ids = malloc(sizeof *ids * (size_t)in.max_seq_length))) goto oom;
        st = ATTN_OK;
        for (long long i = 0; i < texts.n && st == ATTN_OK && !ferror(stdout); i++) {
            int64_t n = 0;
            st = attn_bert_tokenize(ctx, b, texts.s[i], ids, in.max_seq_length, &n);
            for (int64_t j = 0; st == ATTN_OK && j < n; j++) printf(j ? " %d" : "%d", ids[j]);
            if (st == ATTN_OK) printf("\n");
        }
        rc = st == ATTN_OK ? 0 : attn_cli_fail(ctx, "embed", st);
        goto done;
    }
    int64_t E = in.hidden_size;
    if (!(out = malloc(sizeof(float) * (size_t)(E * texts.n)))) goto oom;
    st = attn_bert_embed(ctx, b, (const char *const *)texts.s, texts.n, out);
    if (st == ATTN_OK && o.repeat > 0) {
        double t0 = attn_bench_now_s();
        for (long long k = 0; k < o.repeat && st == ATTN_OK; k++)
            st = attn_bert_embed(ctx, b, (const char *const *)texts.s, texts.n, out);
        double dt = attn_bench_now_s() - t0;
        if (st == ATTN_OK)
            fprintf(stderr, "attn embed: %.1f sentences/s (%lld texts x %lld, %d threads)\n",
                    (double)(texts.n * o.repeat) / (dt > 0 ? dt : 1e-9), texts.n, o.repeat,
                    attn_ctx_threads(ctx));
    }
    if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, "embed", st);
        goto done;
    }
    for (long long i = 0; i < texts.n && !ferror(stdout); i++) {
        if (o.json) printf("{\"index\": %lld, \"embedding\": [", i);
        for (int64_t e = 0; e < E; e++)
            printf("%s%.9g", e ? (o.json ? ", " : " ") : "", out[i * E + e]);
        printf(o.json ? "]}\n" : "\n");
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "attn embed: out of memory\n");
    rc = 1;
done:
    free(ids);
    free(out);
    attn_bert_free(b);
    attn_ctx_free(ctx);
    free(texts.s);
    free(text);
    return rc;
}

typedef struct scored {
    double score;
    long long idx;
} scored;
static int by_score(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int attn_cmd_similar(int argc, char **argv) {
    opts o;
    memset(&o, 0, sizeof o);
    int npos;
    const attn_cli_opt table[] = {
        ATTN_OPT_STR("model", 0, &o.model, "DIR", MODEL_HELP),
        ATTN_OPT_STR("corpus", 0, &o.corpus, "FILE",
                     "the lines to rank ('-': standard input); required"),
        ATTN_OPT_INT("top", 0, &o.top, 1, 1LL << 40, "K", "print only the best K lines"),
        ATTN_OPT_FLAG("json", 0, &o.json,
                      "one JSON object per line: {\"score\": s, \"text\": \"...\"}"),
        ATTN_OPT_THREADS(&o.threads),
        OPT_DTYPE(&o),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "similar", "attn similar --model DIR --corpus FILE [options] QUERY",
        "Ranks the non-empty lines of FILE by cosine similarity to QUERY, printing\n"
        "\"score<TAB>line\" best first (all lines, or the best K).",
        table, NULL,
        "attn similar --model tests/fixtures/bert_tiny --corpus tests/data/corpus.txt \"a cat\"\n"
        "ls | attn similar --model DIR --corpus - --top 3 \"budget report\""};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (!o.model) return attn_cli_usage_error(&spec, "--model DIR is required");
    if (!o.corpus) return attn_cli_usage_error(&spec, "--corpus FILE is required");
    if (npos != 1) return attn_cli_usage_error(&spec, "needs exactly one QUERY");
    char *query = argv[1], *text = NULL;
    size_t len = 0;
    lines all = {0}, corpus = {0};
    attn_ctx *ctx = NULL;
    attn_bert *b = NULL;
    float *q = NULL, *c = NULL;
    scored *s = NULL;
    int rc = 1;
    if (attn_cli_ctx("similar", o.threads, 0, &ctx)) goto out;
    if (!attn_cli_read_text("similar", ctx, o.corpus, &text, &len)) goto out;
    if (!split_lines(&all, text, len)) goto oom;
    for (long long i = 0; i < all.n; i++)
        if (all.s[i][0] && !push(&corpus, all.s[i])) goto oom;
    if (corpus.n == 0) {
        fprintf(stderr, "attn similar: %s has no non-empty lines\n",
                strcmp(o.corpus, "-") ? o.corpus : "standard input");
        goto out;
    }
    if (!open_model("similar", &o, ctx, &b)) goto out;
    attn_bert_info in;
    attn_bert_get_info(b, &in);
    int64_t E = in.hidden_size;
    q = malloc(sizeof(float) * (size_t)E);
    c = malloc(sizeof(float) * (size_t)(E * corpus.n));
    s = malloc(sizeof *s * (size_t)corpus.n);
    if (!q || !c || !s) goto oom;
    attn_status st = attn_bert_embed(ctx, b, (const char *const *)&query, 1, q);
    if (st == ATTN_OK) st = attn_bert_embed(ctx, b, (const char *const *)corpus.s, corpus.n, c);
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, "similar", st);
        goto out;
    }
    double qn = 0;
    for (int64_t e = 0; e < E; e++) qn += (double)q[e] * q[e];
    for (long long i = 0; i < corpus.n; i++) {
        double dot = 0, cn = 0;
        for (int64_t e = 0; e < E; e++) {
            dot += (double)q[e] * c[i * E + e];
            cn += (double)c[i * E + e] * c[i * E + e];
        }
        double den = sqrt(qn) * sqrt(cn);
        s[i].score = dot / (den > 1e-12 ? den : 1e-12);
        s[i].idx = i;
    }
    qsort(s, (size_t)corpus.n, sizeof *s, by_score);
    long long top = o.top && o.top < corpus.n ? o.top : corpus.n;
    for (long long i = 0; i < top && !ferror(stdout); i++) {
        if (o.json) {
            printf("{\"score\": %.6f, \"text\": ", s[i].score);
            json_str(stdout, corpus.s[s[i].idx]);
            printf("}\n");
        } else {
            printf("%.4f\t%s\n", s[i].score, corpus.s[s[i].idx]);
        }
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "attn similar: out of memory\n");
    rc = 1;
out:
    free(q), free(c), free(s);
    attn_bert_free(b);
    attn_ctx_free(ctx);
    free(corpus.s);
    free(all.s);
    free(text);
    return rc;
}
