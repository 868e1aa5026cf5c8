/* BERT sentence embeddings against references from tests/gen_bert.py: the committed random
 * tiny model (fixtures/bert_tiny), refusals of broken folders, and, when ATTN_MINILM_DIR
 * names the all-MiniLM-L6-v2 folder, the real model against sentence-transformers. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu.h" /* ATTN__CPU_*: tu_isa_ok */
#include "testutil.h"

typedef struct ref {
    int n;
    char **text;
    int32_t **ids;
    int64_t *nids;
    float **emb;
    int64_t E;
} ref;

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int load_ref(const char *path, ref *r) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *t;
    while ((t = tu_read_line(f))) {
        char *i = tu_read_line(f), *e = tu_read_line(f);
        if (!i || !e || t[0] != 'T' || i[0] != 'I' || e[0] != 'E') break;
        int k = r->n++;
        r->text = realloc(r->text, sizeof *r->text * r->n);
        r->ids = realloc(r->ids, sizeof *r->ids * r->n);
        r->nids = realloc(r->nids, sizeof *r->nids * r->n);
        r->emb = realloc(r->emb, sizeof *r->emb * r->n);
        size_t hl = strlen(t) > 2 ? strlen(t) - 2 : 0;
        r->text[k] = malloc(hl / 2 + 1);
        for (size_t j = 0; j < hl / 2; j++)
            r->text[k][j] = (char)(hexval(t[2 + 2 * j]) * 16 + hexval(t[3 + 2 * j]));
        r->text[k][hl / 2] = 0;
        char *p = i + 1;
        r->nids[k] = strtoll(p, &p, 10);
        r->ids[k] = malloc(sizeof(int32_t) * (size_t)(r->nids[k] + 1));
        for (int64_t j = 0; j < r->nids[k]; j++) r->ids[k][j] = (int32_t)strtol(p, &p, 10);
        int64_t cap = 1024, m = 0;
        r->emb[k] = malloc(sizeof(float) * (size_t)cap);
        p = e + 1;
        for (;;) {
            char *q;
            double v = strtod(p, &q);
            if (q == p) break;
            if (m == cap) r->emb[k] = realloc(r->emb[k], sizeof(float) * (size_t)(cap *= 2));
            r->emb[k][m++] = (float)v;
            p = q;
        }
        r->E = m;
        free(t), free(i), free(e);
    }
    fclose(f);
    return r->n > 0;
}

static void free_ref(ref *r) {
    for (int k = 0; k < r->n; k++) free(r->text[k]), free(r->ids[k]), free(r->emb[k]);
    free(r->text), free(r->ids), free(r->nids), free(r->emb);
}

/* Compares tokenisation and embeddings of every reference sentence; with dtype ATTN_BF16 or
 * ATTN_F16 the model runs its matrix products in 16 bits (attn_bert_set_dtype) and must stay
 * within tol_err (max abs) and tol_cos (min cosine) of the float reference; the float model
 * within 1e-5 and 0.99999. */
static void check_model_dt(attn_ctx *ctx, const char *dir, const char *refpath,
                           const char *name, attn_dtype dtype, double tol_err, double tol_cos) {
    ref r;
    if (!load_ref(refpath, &r)) {
        TU_CHECK(0, "cannot read %s", refpath);
        return;
    }
    attn_bert *b = NULL;
    if (!TU_STATUS(attn_bert_load(ctx, dir, &b), ATTN_OK, ctx)) {
        free_ref(&r);
        return;
    }
    TU_STATUS(attn_bert_set_dtype(ctx, b, dtype), ATTN_OK, ctx);
    TU_CHECK(attn_bert_get_dtype(b) == dtype, "dtype not set");
    attn_bert_info info;
    attn_bert_get_info(b, &info);
    TU_CHECK(info.hidden_size == r.E, "%s: hidden %lld vs reference %lld", name,
             (long long)info.hidden_size, (long long)r.E);
    int id_fail = 0;
    for (int k = 0; k < r.n; k++) {
        int32_t ids[1024];
        int64_t n = 0;
        TU_STATUS(attn_bert_tokenize(ctx, b, r.text[k], ids, 1024, &n), ATTN_OK, ctx);
        int same = n == r.nids[k];
        for (int64_t j = 0; same && j < n; j++) same = ids[j] == r.ids[k][j];
        if (!same) {
            id_fail++;
            fprintf(stderr, "%s: ids differ for sentence %d (%lld vs %lld tokens):", name, k,
                    (long long)n, (long long)r.nids[k]);
            for (int64_t j = 0; j < n && j < 24; j++)
                fprintf(stderr, " %d/%d", ids[j], j < r.nids[k] ? r.ids[k][j] : -1);
            fprintf(stderr, "\n");
        }
    }
    TU_CHECK(id_fail == 0, "%s: %d of %d sentences tokenised differently", name, id_fail, r.n);
    float *out = malloc(sizeof(float) * (size_t)(r.n * r.E));
    TU_STATUS(attn_bert_embed(ctx, b, (const char *const *)r.text, r.n, out), ATTN_OK, ctx);
    double maxerr = 0, mincos = 1;
    for (int k = 0; k < r.n; k++) {
        double dot = 0, na = 0, nb = 0;
        for (int64_t e = 0; e < r.E; e++) {
            double a = out[k * r.E + e], c = r.emb[k][e];
            if (fabs(a - c) > maxerr || a != a) maxerr = a != a ? INFINITY : fabs(a - c);
            dot += a * c, na += a * a, nb += c * c;
        }
        double cs = dot / sqrt(na * nb + 1e-300);
        if (cs < mincos || cs != cs) mincos = cs != cs ? -1 : cs;
    }
    const char *dn = dtype == ATTN_BF16 ? " (bf16)" : dtype == ATTN_F16 ? " (f16)" : "";
    printf("%s%s: %d sentences, ids %s, embeddings max abs err %.3g, min cosine %.9f\n", name,
           dn, r.n, id_fail ? "DIFFER" : "identical", maxerr,
           mincos);
    TU_CHECK(maxerr <= tol_err, "%s: max abs error %g > %g", name, maxerr, tol_err);
    TU_CHECK(mincos >= tol_cos, "%s: min cosine %.9f < %.9f", name, mincos, tol_cos);
    /* the same texts one at a time give the batch's bits: a batch's sequences are packed,
     * each attends to its own rows alone, and every other step is row by row */
    float one[1024];
    int batch_diff = 0;
    for (int k = 0; k < r.n && r.E <= 1024; k += 7) {
        TU_STATUS(attn_bert_embed(ctx, b, (const char *const *)&r.text[k], 1, one), ATTN_OK,
                  ctx);
        batch_diff += memcmp(one, out + k * r.E, sizeof(float) * (size_t)r.E) != 0;
    }
    TU_CHECK(batch_diff == 0, "%s%s: %d texts alone differ from the batch's bits", name, dn,
             batch_diff);
    if (dtype != ATTN_F32) {
        const char *env = dtype == ATTN_BF16 ? "ATTN_BF16" : "ATTN_F16";
        /* the same bits on 1 thread, and (up to subnormal partial sums) on the plain C kernel */
        /* the plain C f16 kernel emulates each fp16 fma in double: too slow for MiniLM */
        attn_ctx *c1;
        int small = dtype == ATTN_BF16 || info.hidden_size <= 64;
        if (small && attn_ctx_create(NULL, &c1) == ATTN_OK) {
            float *o1 = malloc(sizeof(float) * (size_t)(r.n * r.E));
            TU_STATUS(attn_bert_embed(c1, b, (const char *const *)r.text, r.n, o1), ATTN_OK, c1);
            TU_CHECK(!memcmp(o1, out, sizeof(float) * (size_t)(r.n * r.E)),
                     "%s%s: 1 and 2 threads differ", name, dn);
            attn_ctx *plain = NULL; /* the variable is read when a context is created */
            setenv(env, "0", 1);
            TU_CHECK(attn_ctx_create(NULL, &plain) == ATTN_OK, "ctx under %s=0", env);
            unsetenv(env);
            if (plain)
                TU_STATUS(attn_bert_embed(plain, b, (const char *const *)r.text, r.n, o1),
                          ATTN_OK, plain);
            attn_ctx_free(plain);
            double d = 0;
            for (int64_t i = 0; i < r.n * r.E; i++) d = fmax(d, fabs((double)o1[i] - out[i]));
            printf("%s%s: plain C kernel vs default: max abs diff %.3g\n", name, dn, d);
            TU_CHECK(d <= 1e-6, "%s%s: plain C kernel differs by %g", name, dn, d);
            free(o1);
            attn_ctx_free(c1);
        }
        TU_STATUS(attn_bert_set_dtype(ctx, b, ATTN_F32), ATTN_OK, ctx);
        TU_CHECK(attn_bert_get_dtype(b) == ATTN_F32, "dtype back to f32");
        TU_CHECK(attn_bert_set_dtype(ctx, b, ATTN_U8) == ATTN_E_UNSUPPORTED, "u8 refused");
        attn_ctx_clear_error(ctx);
    }
    free(out);
    attn_bert_free(b);
    free_ref(&r);
}

static void check_model(attn_ctx *ctx, const char *dir, const char *refpath, const char *name) {
    check_model_dt(ctx, dir, refpath, name, ATTN_F32, 1e-5, 0.99999);
}

/* ---- broken folders ---------------------------------------------------------------------- */
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

static const char *files[] = {"config.json", "model.safetensors", "vocab.txt",
                              "tokenizer_config.json", "modules.json",
                              "sentence_bert_config.json", "1_Pooling/config.json"};

/* A copy of the tiny folder in dir without `skip` (NULL: complete). */
static void make_copy(const char *dir, const char *skip) {
    char a[1024], b[1024];
    mkdir(dir, 0755);
    snprintf(b, sizeof b, "%s/1_Pooling", dir);
    mkdir(b, 0755);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        remove(b);
        if (skip && !strcmp(skip, files[i])) continue;
        snprintf(a, sizeof a, "fixtures/bert_tiny/%s", files[i]);
        copy_file(a, b);
    }
}

static void expect_refusal(attn_ctx *ctx, const char *dir, attn_status want, const char *needle) {
    attn_bert *b = NULL;
    attn_status st = attn_bert_load(ctx, dir, &b);
    TU_CHECK(st == want, "load of %s: got %s, want %s (%s)", dir, attn_status_name(st),
             attn_status_name(want), attn_ctx_errmsg(ctx));
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), needle) != NULL, "message \"%s\" does not name \"%s\"",
             attn_ctx_errmsg(ctx), needle);
    TU_CHECK(b == NULL, "no model on failure");
    attn_bert_free(b);
    attn_ctx_clear_error(ctx);
}

static void test_refusals(attn_ctx *ctx) {
    char dir[] = "/tmp/attn_bert_XXXXXX";
    if (!mkdtemp(dir)) {
        TU_CHECK(0, "mkdtemp failed");
        return;
    }
    char d[1024], p[1200];
    snprintf(d, sizeof d, "%s/m", dir);
    make_copy(d, "config.json");
    expect_refusal(ctx, d, ATTN_E_NOT_FOUND, "config.json");
    make_copy(d, "vocab.txt");
    expect_refusal(ctx, d, ATTN_E_NOT_FOUND, "vocab.txt");
    make_copy(d, "model.safetensors");
    expect_refusal(ctx, d, ATTN_E_NOT_FOUND, "model.safetensors");
    make_copy(d, "1_Pooling/config.json");
    expect_refusal(ctx, d, ATTN_E_NOT_FOUND, "1_Pooling/config.json");
    make_copy(d, NULL);
    snprintf(p, sizeof p, "%s/config.json", d);
    write_text(p, "{\"model_type\": \"bert\", \"hidden_act\": \"relu\", \"hidden_size\": 32}");
    expect_refusal(ctx, d, ATTN_E_UNSUPPORTED, "hidden_act \"relu\"");
    write_text(p, "{\"model_type\": \"roberta\", \"hidden_act\": \"gelu\"}");
    expect_refusal(ctx, d, ATTN_E_UNSUPPORTED, "model_type \"roberta\"");
    write_text(p, "{\"model_type\": \"bert\", \"hidden_act\": \"gelu\", \"hidden_size\": 32}");
    expect_refusal(ctx, d, ATTN_E_FORMAT, "num_attention_heads is missing");
    write_text(p, "{\"model_type\": \"bert\", ");
    expect_refusal(ctx, d, ATTN_E_FORMAT, "config.json");
    make_copy(d, NULL);
    snprintf(p, sizeof p, "%s/1_Pooling/config.json", d);
    write_text(p, "{\"pooling_mode_mean_tokens\": false, \"pooling_mode_lasttoken\": true}");
    expect_refusal(ctx, d, ATTN_E_UNSUPPORTED, "pooling_mode_lasttoken");
    make_copy(d, NULL);
    snprintf(p, sizeof p, "%s/modules.json", d);
    write_text(p, "[{\"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
                  "{\"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"},"
                  "{\"path\": \"2_Dense\", \"type\": \"sentence_transformers.models.Dense\"}]");
    expect_refusal(ctx, d, ATTN_E_UNSUPPORTED, "sentence_transformers.models.Dense");

    /* CLS and max pooling against their references */
    const char *modes[2] = {"cls_token", "max_tokens"}, *refs[2] = {
        "fixtures/bert_tiny_cls_expected.txt", "fixtures/bert_tiny_max_expected.txt"};
    for (int i = 0; i < 2; i++) {
        char cfg[256], name[64];
        make_copy(d, NULL);
        snprintf(p, sizeof p, "%s/1_Pooling/config.json", d);
        snprintf(cfg, sizeof cfg, "{\"pooling_mode_mean_tokens\": false, "
                 "\"pooling_mode_%s\": true}", modes[i]);
        write_text(p, cfg);
        snprintf(name, sizeof name, "bert_tiny %s pooling", modes[i]);
        check_model(ctx, d, refs[i], name);
    }

    /* a plain HF folder (no modules.json): mean pooling without normalisation */
    make_copy(d, "modules.json");
    attn_bert *b = NULL;
    if (TU_STATUS(attn_bert_load(ctx, d, &b), ATTN_OK, ctx)) {
        attn_bert_info in;
        attn_bert_get_info(b, &in);
        TU_CHECK(in.pooling == ATTN_BERT_POOL_MEAN && in.normalize == 0, "plain folder defaults");
        TU_CHECK(in.max_seq_length == 64, "max_seq_length %lld", (long long)in.max_seq_length);
        attn_bert_free(b);
    }
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", d, files[i]);
        remove(p);
    }
    snprintf(p, sizeof p, "%s/1_Pooling", d);
    rmdir(p);
    rmdir(d);
    rmdir(dir);
}

/* Pooling variants on the tiny model: CLS and max pooling against values derived from the
 * token states are not in the reference file; check their basic properties instead. */
static void test_tokenizer_edges(attn_ctx *ctx) {
    attn_bert *b = NULL;
    if (!TU_STATUS(attn_bert_load(ctx, "fixtures/bert_tiny", &b), ATTN_OK, ctx)) return;
    int32_t ids[8];
    int64_t n = -1;
    /* invalid UTF-8 is dropped, the count is reported beyond cap */
    TU_STATUS(attn_bert_tokenize(ctx, b, "\xff\xfe hello \xc3 world", ids, 8, &n), ATTN_OK, ctx);
    TU_CHECK(n == 4, "invalid UTF-8: %lld tokens", (long long)n);
    TU_STATUS(attn_bert_tokenize(ctx, b, "hello hello hello hello hello hello hello hello",
                                 ids, 4, &n), ATTN_OK, ctx);
    TU_CHECK(n == 10, "cap: %lld tokens", (long long)n);
    float e[32];
    TU_STATUS(attn_bert_embed(ctx, b, NULL, 0, e), ATTN_OK, ctx);
    const char *bad[1] = {NULL};
    TU_STATUS(attn_bert_embed(ctx, b, bad, 1, e), ATTN_E_INVALID, ctx);
    attn_ctx_clear_error(ctx);
    attn_bert_free(b);
}

/* Results do not depend on the thread count. */
static void test_threads(attn_ctx *ctx2) {
    attn_ctx *ctx1;
    if (attn_ctx_create(NULL, &ctx1) != ATTN_OK) return;
    attn_bert *b1 = NULL, *b2 = NULL;
    const char *t[3] = {"A man is playing guitar.", "", "東京タワーは高いですか？ naïve"};
    float e1[96], e2[96];
    if (TU_STATUS(attn_bert_load(ctx1, "fixtures/bert_tiny", &b1), ATTN_OK, ctx1) &&
        TU_STATUS(attn_bert_load(ctx2, "fixtures/bert_tiny", &b2), ATTN_OK, ctx2)) {
        TU_STATUS(attn_bert_embed(ctx1, b1, t, 3, e1), ATTN_OK, ctx1);
        TU_STATUS(attn_bert_embed(ctx2, b2, t, 3, e2), ATTN_OK, ctx2);
        TU_CHECK(!memcmp(e1, e2, sizeof e1), "1 and 2 threads differ");
    }
    attn_bert_free(b1);
    attn_bert_free(b2);
    attn_ctx_free(ctx1);
}

/* An allocator whose blocks start 16 bytes into what malloc returned: freeing one with plain
 * free (or a plain block with it) breaks at once, sanitizer or not. */
static int64_t live_blocks;
static void *off_alloc(void *u, size_t n) {
    (void)u;
    char *p = malloc(n + 16);
    if (!p) return NULL;
    live_blocks++;
    return p + 16;
}
static void off_free(void *u, void *p) {
    (void)u;
    if (!p) return;
    live_blocks--;
    free((char *)p - 16);
}

/* attn_bert_set_dtype through another context than the model's own: the packed weights come
 * from (and return to) the model's allocator. */
static void test_other_allocator(void) {
    attn_ctx_params p = {0};
    p.alloc = off_alloc, p.free = off_free;
    attn_ctx *own, *plain;
    if (attn_ctx_create(&p, &own) != ATTN_OK) return;
    if (attn_ctx_create(NULL, &plain) != ATTN_OK) return;
    attn_bert *b = NULL;
    if (TU_STATUS(attn_bert_load(own, "fixtures/bert_tiny", &b), ATTN_OK, own)) {
        TU_STATUS(attn_bert_set_dtype(plain, b, ATTN_BF16), ATTN_OK, plain);
        TU_STATUS(attn_bert_set_dtype(plain, b, ATTN_F16), ATTN_OK, plain);
    }
    attn_bert_free(b);
    attn_ctx_free(own);
    attn_ctx_free(plain);
    TU_CHECK(live_blocks == 0, "%lld blocks of the model's allocator left", (long long)live_blocks);
}

int main(void) {
    test_other_allocator();
    attn_ctx_params p = {0};
    p.threads = 2;
    attn_ctx *ctx;
    if (attn_ctx_create(&p, &ctx) != ATTN_OK) return 1;
    check_model(ctx, "fixtures/bert_tiny", "fixtures/bert_tiny_expected.txt", "bert_tiny");
    /* bf16 tolerance: 2^-7, the worst relative error of one bf16 product (two roundings of
     * 2^-8), at the scale of a normalised embedding (entries <= 1); errors through the layers
     * stay of that order because every layer norm rescales them (measured: 3.8e-3 on the tiny
     * model, 1.3e-3 on all-MiniLM-L6-v2).  A wrong term or panel gives errors of order 0.1. */
    check_model_dt(ctx, "fixtures/bert_tiny", "fixtures/bert_tiny_expected.txt", "bert_tiny",
                   ATTN_BF16, 0x1p-7, 0.9998);
    check_model_dt(ctx, "fixtures/bert_tiny", "fixtures/bert_tiny_expected.txt", "bert_tiny",
                   ATTN_F16, 0x1p-7, 0.9998); /* same tolerance as bf16: f16 errors are smaller */
    test_refusals(ctx);
    test_tokenizer_edges(ctx);
    test_threads(ctx);
    const char *mini = getenv("ATTN_MINILM_DIR");
    if (mini && *mini)
    {
        check_model(ctx, mini, "fixtures/minilm_expected.txt", "all-MiniLM-L6-v2");
        /* 16-bit products on MiniLM where the CPU has instructions for them: the plain C
         * kernels (emulating each fp16 or bf16 product) take tens of minutes on a model this
         * size, and fixtures/bert_tiny checks them everywhere */
        if (tu_isa_ok(TU_CPU_AVX512_BF16, "test_bert: all-MiniLM-L6-v2 in bf16"))
            check_model_dt(ctx, mini, "fixtures/minilm_expected.txt", "all-MiniLM-L6-v2",
                           ATTN_BF16, 0x1p-7, 0.9998);
        if (tu_isa_ok(TU_CPU_AVX512_FP16, "test_bert: all-MiniLM-L6-v2 in f16"))
            check_model_dt(ctx, mini, "fixtures/minilm_expected.txt", "all-MiniLM-L6-v2",
                           ATTN_F16, 0x1p-7, 0.9998);
    }
    else
        printf("all-MiniLM-L6-v2: skipped (set ATTN_MINILM_DIR to the model folder)\n");
    attn_ctx_free(ctx);
    return tu_finish("test_bert");
}
