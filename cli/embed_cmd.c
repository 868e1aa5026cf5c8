#define _POSIX_C_SOURCE 200809L
/* attn embed / attn similar: sentence embeddings with a BERT sentence-transformers folder
 * (attn_bert_* in attn.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

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

static void free_lines(lines *l, long long owned_from) {
    for (long long i = owned_from; i < l->n; i++) free(l->s[i]);
    free(l->s);
}

/* Appends every line of path (without its \n or \r\n); 0 on error (message printed). */
static int read_lines(const char *cmd, const char *path, lines *l) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "attn %s: cannot open %s\n", cmd, path);
        return 0;
    }
    size_t cap = 256, n = 0;
    char *s = malloc(cap);
    int c, ok = s != NULL;
    while (ok) {
        c = fgetc(f);
        if (c == EOF && n == 0) break;
        if (c == EOF || c == '\n') {
            if (n && s[n - 1] == '\r') n--;
            s[n] = 0;
            ok = push(l, s);
            if (!ok) break;
            if (c == EOF) {
                s = NULL;
                break;
            }
            cap = 256, n = 0;
            s = malloc(cap);
            ok = s != NULL;
            continue;
        }
        if (n + 1 >= cap) {
            char *p = realloc(s, cap *= 2);
            if (!p) {
                ok = 0;
                break;
            }
            s = p;
        }
        s[n++] = (char)c;
    }
    free(s);
    fclose(f);
    if (!ok) fprintf(stderr, "attn %s: out of memory reading %s\n", cmd, path);
    return ok;
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
    int json, ids;
    attn_dtype dtype;
    lines texts; /* positional arguments (not owned) */
} opts;

#define USAGE_EMBED                                                                          \
    "usage: attn embed --model DIR [--file FILE] [--json] [--threads N] [--dtype T]\n"      \
    "                  [TEXT...]\n"                                                          \
    "  Prints one sentence embedding per text: space-separated floats, or with --json one\n" \
    "  JSON object per line {\"index\": i, \"embedding\": [...]}.  Texts are the arguments\n" \
    "  followed by the lines of FILE.  DIR: a BERT sentence-transformers / Hugging Face\n"   \
    "  folder (config.json, model.safetensors, vocab.txt, modules.json, 1_Pooling).\n"      \
    "  --threads N   worker threads (default 2)\n"                                         \
    "  --dtype T     f32 (default), f16 or bf16: the encoder's matrix products on 16-bit\n"  \
    "                weights and activations (faster with f16 where the CPU has AVX512_FP16;\n" \
    "                less accurate: see attn_bert_set_dtype in attn.h)\n"                   \
    "  --ids         print the token ids of each text instead ([CLS] ... [SEP], truncated)\n" \
    "  --repeat N    benchmark: embed the texts N more times, print sentences/s to stderr\n"
#define USAGE_SIMILAR                                                                        \
    "usage: attn similar --model DIR --corpus FILE [--top K] [--json] [--threads N]\n"      \
    "                    [--dtype f32|f16|bf16] QUERY\n"                                         \
    "  Ranks the non-empty lines of FILE by cosine similarity to QUERY, printing\n"          \
    "  \"score<TAB>line\" best first (all lines, or the best K).\n"

static int parse(const char *cmd, int argc, char **argv, opts *o, const char *usage) {
    memset(o, 0, sizeof *o);
    o->threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--ids") && !strcmp(cmd, "embed")) {
            o->ids = 1;
        } else if (!strcmp(a, "--dtype")) {
            const char *v = has ? argv[++i] : "";
            if (!strcmp(v, "bf16")) o->dtype = ATTN_BF16;
            else if (!strcmp(v, "f16")) o->dtype = ATTN_F16;
            else if (!strcmp(v, "f32")) o->dtype = ATTN_F32;
            else {
                fprintf(stderr, "attn %s: --dtype must be f32, bf16 or f16, got '%s'\n", cmd,
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--model") || !strcmp(a, "--file") || !strcmp(a, "--corpus") ||
                   !strcmp(a, "--threads") || !strcmp(a, "--top") ||
                   !strcmp(a, "--repeat")) {
            if (!has) {
                fprintf(stderr, "attn %s: %s needs a value\n\n%s", cmd, a, usage);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--model")) o->model = v;
            else if (!strcmp(a, "--file")) o->file = v;
            else if (!strcmp(a, "--corpus")) o->corpus = v;
            else if (!attn_cli_parse_i64(v, 1, !strcmp(a, "--threads") ? 256 : 1LL << 40,
                                         !strcmp(a, "--top")      ? &o->top
                                         : !strcmp(a, "--repeat") ? &o->repeat
                                                                  : &o->threads)) {
                fprintf(stderr, "attn %s: bad value for %s: '%s'\n", cmd, a, v);
                return 2;
            }
        } else if (!strcmp(a, "--")) {
            for (i++; i < argc; i++)
                if (!push(&o->texts, argv[i])) return 1;
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "attn %s: unknown option '%s'\n\n%s", cmd, a, usage);
            return 2;
        } else if (!push(&o->texts, argv[i])) {
            return 1;
        }
    }
    if (!o->model) {
        fprintf(stderr, "attn %s: --model DIR is required\n\n%s", cmd, usage);
        return 2;
    }
    return -1;
}

/* Loads the model with a context of o->threads; 0 on failure (message printed). */
static int open_model(const char *cmd, const opts *o, attn_ctx **ctx, attn_bert **b) {
    attn_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.threads = (int)o->threads;
    if (attn_ctx_create(&cp, ctx) != ATTN_OK) {
        fprintf(stderr, "attn %s: cannot create a context\n", cmd);
        return 0;
    }
    attn_status st = attn_bert_load(*ctx, o->model, b);
    if (st == ATTN_OK && o->dtype != ATTN_F32) {
        st = attn_bert_set_dtype(*ctx, *b, o->dtype);
        if (st != ATTN_OK) attn_bert_free(*b);
    }
    if (st != ATTN_OK) {
        attn_cli_fail(*ctx, cmd, st);
        attn_ctx_free(*ctx);
        return 0;
    }
    return 1;
}

int attn_cmd_embed(int argc, char **argv) {
    opts o;
    int r = parse("embed", argc, argv, &o, USAGE_EMBED);
    if (r >= 0) {
        free(o.texts.s);
        return r;
    }
    long long nargs = o.texts.n;
    if (o.file && !read_lines("embed", o.file, &o.texts)) {
        free_lines(&o.texts, nargs);
        return 1;
    }
    if (o.texts.n == 0) {
        fprintf(stderr, "attn embed: no texts (give them as arguments or with --file)\n\n%s",
                USAGE_EMBED);
        free_lines(&o.texts, nargs);
        return 2;
    }
    attn_ctx *ctx;
    attn_bert *b;
    if (!open_model("embed", &o, &ctx, &b)) {
        free_lines(&o.texts, nargs);
        return 1;
    }
    attn_bert_info in;
    attn_bert_get_info(b, &in);
    if (o.ids) {
        int32_t *ids = malloc(sizeof *ids * (size_t)in.max_seq_length);
        attn_status st = ids ? ATTN_OK : ATTN_E_NOMEM;
        for (long long i = 0; i < o.texts.n && st == ATTN_OK; i++) {
            int64_t n = 0;
            st = attn_bert_tokenize(ctx, b, o.texts.s[i], ids, in.max_seq_length, &n);
            for (int64_t j = 0; st == ATTN_OK && j < n; j++) printf(j ? " %d" : "%d", ids[j]);
            if (st == ATTN_OK) printf("\n");
        }
        int rc = st == ATTN_OK ? 0 : ids ? attn_cli_fail(ctx, "embed", st) : 1;
        free(ids);
        attn_bert_free(b);
        attn_ctx_free(ctx);
        free_lines(&o.texts, nargs);
        return rc;
    }
    int64_t E = in.hidden_size;
    float *out = malloc(sizeof(float) * (size_t)(E * o.texts.n));
    attn_status st = out ? attn_bert_embed(ctx, b, (const char *const *)o.texts.s,
                                           o.texts.n, out)
                         : ATTN_E_NOMEM;
    if (st == ATTN_OK && o.repeat > 0) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long long k = 0; k < o.repeat && st == ATTN_OK; k++)
            st = attn_bert_embed(ctx, b, (const char *const *)o.texts.s, o.texts.n, out);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (st == ATTN_OK)
            fprintf(stderr, "attn embed: %.1f sentences/s (%lld texts x %lld, %lld threads)\n",
                    (double)(o.texts.n * o.repeat) / (dt > 0 ? dt : 1e-9), o.texts.n, o.repeat,
                    o.threads);
    }
    int rc = 0;
    if (st != ATTN_OK) {
        rc = out ? attn_cli_fail(ctx, "embed", st)
                 : (fprintf(stderr, "attn embed: out of memory\n"), 1);
    } else {
        for (long long i = 0; i < o.texts.n; i++) {
            if (o.json) printf("{\"index\": %lld, \"embedding\": [", i);
            for (int64_t e = 0; e < E; e++)
                printf(o.json ? "%s%.9g" : "%s%.9g", e ? (o.json ? ", " : " ") : "",
                       out[i * E + e]);
            printf(o.json ? "]}\n" : "\n");
        }
    }
    free(out);
    attn_bert_free(b);
    attn_ctx_free(ctx);
    free_lines(&o.texts, nargs);
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
    int r = parse("similar", argc, argv, &o, USAGE_SIMILAR);
    if (r >= 0) {
        free(o.texts.s);
        return r;
    }
    if (!o.corpus || o.texts.n != 1) {
        fprintf(stderr, "attn similar: needs --corpus FILE and exactly one QUERY\n\n%s",
                USAGE_SIMILAR);
        free(o.texts.s);
        return 2;
    }
    lines all = {0}, corpus = {0};
    int rc = 1;
    if (!read_lines("similar", o.corpus, &all)) goto out;
    for (long long i = 0; i < all.n; i++)
        if (all.s[i][0] && !push(&corpus, all.s[i])) goto out;
    if (corpus.n == 0) {
        fprintf(stderr, "attn similar: %s has no non-empty lines\n", o.corpus);
        goto out;
    }
    attn_ctx *ctx;
    attn_bert *b;
    if (!open_model("similar", &o, &ctx, &b)) goto out;
    attn_bert_info in;
    attn_bert_get_info(b, &in);
    int64_t E = in.hidden_size;
    float *q = malloc(sizeof(float) * (size_t)E);
    float *c = malloc(sizeof(float) * (size_t)(E * corpus.n));
    scored *s = malloc(sizeof *s * (size_t)corpus.n);
    attn_status st = ATTN_E_NOMEM;
    if (q && c && s) {
        st = attn_bert_embed(ctx, b, (const char *const *)o.texts.s, 1, q);
        if (st == ATTN_OK)
            st = attn_bert_embed(ctx, b, (const char *const *)corpus.s, corpus.n, c);
    }
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, "similar", st);
    } else {
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
        for (long long i = 0; i < top; i++) {
            if (o.json) {
                printf("{\"score\": %.6f, \"text\": ", s[i].score);
                json_str(stdout, corpus.s[s[i].idx]);
                printf("}\n");
            } else {
                printf("%.4f\t%s\n", s[i].score, corpus.s[s[i].idx]);
            }
        }
        rc = 0;
    }
    free(q), free(c), free(s);
    attn_bert_free(b);
    attn_ctx_free(ctx);
out:
    free(corpus.s);
    free_lines(&all, 0);
    free(o.texts.s);
    return rc;
}
