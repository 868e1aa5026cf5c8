/* Hostile model files: every loader refuses claims that the file's tensors do not back, and
 * NaN/Inf weights, with the right status and a message naming the field or tensor, and peak
 * memory stays bounded.
 *
 * The files are written by this test into a mkdtemp() folder under /tmp (removed at the end).
 * Each case runs in a forked child; the parent reads the child's status and message from a
 * pipe and its peak RSS from wait4().  Bound: RSS_BASE + 4 x the input's size, where RSS_BASE
 * is 64 MB (256 MB under AddressSanitizer, whose shadow memory and quarantine add a fixed
 * overhead).  The claims below are 1 GB and up, so a loader that allocates from them exceeds
 * the bound by far, or fails with the wrong status. */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attn_tasks.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif
#ifdef ASAN
#define RSS_BASE (256.0 * 1048576)
#else
#define RSS_BASE (64.0 * 1048576)
#endif

static char tmp[256];

/* ---- running a case ------------------------------------------------------------------- */
typedef attn_status (*case_fn)(attn_ctx *ctx, const char *path);

static long long file_bytes(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    if (!S_ISDIR(sb.st_mode)) return (long long)sb.st_size;
    long long n = 0; /* a model folder: its files */
    DIR *d = opendir(path);
    struct dirent *e;
    char p[1024];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) n += sb.st_size;
    }
    if (d) closedir(d);
    return n;
}

/* Calibration: allocates and touches 320 MB, so the measurement is seen to catch what the
 * loaders used to do. */
static attn_status touch(attn_ctx *ctx, const char *path) {
    (void)ctx, (void)path;
    size_t n = (size_t)320 << 20;
    volatile unsigned char *p = malloc(n);
    if (!p) return ATTN_E_NOMEM;
    for (size_t i = 0; i < n; i += 4096) p[i] = 1;
    free((void *)p);
    return ATTN_OK;
}

/* Runs fn(ctx, path) in a child; checks status, that the message holds `want` (and `want2`
 * if given), and the child's peak RSS. */
static double run_case(const char *what, case_fn fn, const char *path, attn_status expect,
                       const char *want, const char *want2) {
    int fd[2];
    if (pipe(fd) != 0) {
        TU_CHECK(0, "%s: pipe failed", what);
        return 0;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        alarm(120); /* a loader that blocks (a FIFO with no writer) fails instead of hanging */
        attn_ctx *ctx = NULL;
        attn_status st = attn_ctx_create(NULL, &ctx);
        if (st == ATTN_OK) st = fn(ctx, path);
        char buf[600];
        int n = snprintf(buf, sizeof buf, "%d %s", (int)st, ctx ? attn_ctx_errmsg(ctx) : "");
        if (write(fd[1], buf, (size_t)(n < (int)sizeof buf ? n : (int)sizeof buf - 1)) < 0)
            _exit(3);
        attn_ctx_free(ctx);
        _exit(0);
    }
    close(fd[1]);
    char buf[600] = {0};
    size_t got = 0;
    ssize_t r;
    while (got + 1 < sizeof buf && (r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)r;
    close(fd[0]);
    int wst = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (pid < 0 || wait4(pid, &wst, 0, &ru) != pid) {
        TU_CHECK(0, "%s: fork/wait failed", what);
        return 0;
    }
    TU_CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "%s: child died (wait status %d)", what,
             wst);
    int st = -1;
    char *msg = buf;
    st = (int)strtol(buf, &msg, 10);
    if (*msg == ' ') msg++;
    double rss = (double)ru.ru_maxrss * 1024.0, bound = RSS_BASE + 4.0 * file_bytes(path);
    TU_CHECK(st == (int)expect, "%s: got %s, expected %s (%s)", what,
             attn_status_name((attn_status)st), attn_status_name(expect), msg);
    TU_CHECK(!want || strstr(msg, want), "%s: message \"%s\" lacks \"%s\"", what, msg, want);
    TU_CHECK(!want2 || strstr(msg, want2), "%s: message \"%s\" lacks \"%s\"", what, msg, want2);
    if (fn != touch) /* the calibration case is meant to exceed it */
        TU_CHECK(rss < bound, "%s: peak RSS %.1f MB, bound %.1f MB", what, rss / 1048576,
                 bound / 1048576);
    printf("  %-44s %-18s %6.1f MB  %s\n", what, attn_status_name((attn_status)st),
           rss / 1048576, msg);
    return rss;
}

/* ---- safetensors helpers ------------------------------------------------------------- */
typedef struct kv {
    const char *k, *v;
} kv;

typedef struct tens {
    const char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[4];
    float poison; /* 0: data from a pattern; else the first element is this */
} tens;

static void write_st(attn_ctx *ctx, const char *path, const kv *meta, const tens *t) {
    attn_st_writer *w;
    TU_STATUS(attn_st_writer_create(ctx, &w), ATTN_OK, ctx);
    for (; meta && meta->k; meta++) TU_STATUS(attn_st_writer_meta(w, meta->k, meta->v), ATTN_OK, ctx);
    for (; t && t->name; t++) {
        int64_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
        size_t es = attn_dtype_size(t->dtype);
        unsigned char *p = calloc((size_t)n + 1, es);
        if (t->dtype == ATTN_F32) {
            tu_fill((float *)p, (size_t)n, 7, -0.5f, 0.5f);
            if (t->poison != 0) ((float *)p)[0] = t->poison;
        } else if (t->dtype == ATTN_F16 && t->poison != 0) {
            p[0] = 0x00, p[1] = 0x7c; /* +inf */
        }
        TU_STATUS(attn_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, p), ATTN_OK, ctx);
        free(p);
    }
    TU_STATUS(attn_st_writer_save(w, path), ATTN_OK, ctx);
    attn_st_writer_free(w);
}

/* Copies src to dst with one metadata entry replaced (key NULL: none) and, if poison_name,
 * that tensor's first element replaced by `poison` (F32 tensors). */
static void copy_st(attn_ctx *ctx, const char *src, const char *dst, const char *key,
                    const char *val, const char *poison_name, float poison) {
    attn_st *st;
    attn_st_writer *w;
    TU_STATUS(attn_st_read_file(ctx, src, &st), ATTN_OK, ctx);
    TU_STATUS(attn_st_writer_create(ctx, &w), ATTN_OK, ctx);
    for (size_t i = 0; i < attn_st_meta_count(st); i++) {
        const char *k, *v;
        attn_st_meta_at(st, i, &k, &v);
        attn_st_writer_meta(w, k, key && !strcmp(k, key) ? val : v);
    }
    int poisoned = 0;
    for (size_t i = 0; i < attn_st_count(st); i++) {
        attn_st_tensor t;
        attn_st_at(st, i, &t);
        size_t nb = (size_t)t.numel * attn_dtype_size(t.dtype);
        unsigned char *p = malloc(nb + 1);
        memcpy(p, t.data, nb);
        if (poison_name && !strcmp(t.name, poison_name) && t.dtype == ATTN_F32) {
            memcpy(p, &poison, sizeof poison);
            poisoned = 1;
        }
        attn_st_writer_add(w, t.name, t.dtype, t.ndim, t.shape, p);
        free(p);
    }
    TU_CHECK(!poison_name || poisoned, "copy_st: no F32 tensor %s in %s", poison_name, src);
    TU_STATUS(attn_st_writer_save(w, dst), ATTN_OK, ctx);
    attn_st_writer_free(w);
    attn_st_free(st);
}

/* ---- eval ------------------------------------------------------------------------------ */
static attn_status do_eval(attn_ctx *ctx, const char *path) {
    attn_st *in;
    attn_st_writer *out;
    attn_status s = attn_st_read_file(ctx, path, &in);
    if (s != ATTN_OK) return s;
    s = attn_st_writer_create(ctx, &out);
    if (s == ATTN_OK) {
        s = attn_eval(ctx, in, out);
        attn_st_writer_free(out);
    }
    attn_st_free(in);
    return s;
}

static void eval_case(attn_ctx *ctx, const char *what, const kv *meta, const tens *t,
                      attn_status expect, const char *want, const char *want2) {
    char p[512];
    snprintf(p, sizeof p, "%s/eval.st", tmp);
    write_st(ctx, p, meta, t);
    run_case(what, do_eval, p, expect, want, want2);
}

static void test_eval(attn_ctx *ctx) {
    printf("eval:\n");
    /* F4 rows: sizes in the attributes that no tensor backs */
    eval_case(ctx, "tel dim_feedforward 2^25, only src",
              (kv[]){{"op", "transformer_encoder_layer"}, {"d_model", "8"}, {"nhead", "2"},
                     {"dim_feedforward", "33554432"}, {NULL, NULL}},
              (tens[]){{"src", ATTN_F32, 3, {1, 2, 8}, 0}, {NULL, 0, 0, {0}, 0}},
              ATTN_E_NOT_FOUND, "self_attn.in_proj_weight", NULL);
    eval_case(ctx, "tel dim_feedforward 2^40, linear1 [2^40, 8]",
              (kv[]){{"op", "transformer_encoder_layer"}, {"d_model", "8"}, {"nhead", "2"},
                     {"dim_feedforward", "1099511627776"}, {NULL, NULL}},
              (tens[]){{"src", ATTN_F32, 3, {1, 2, 8}, 0},
                       {"self_attn.in_proj_weight", ATTN_F32, 2, {24, 8}, 0},
                       {"self_attn.in_proj_bias", ATTN_F32, 1, {24}, 0},
                       {"self_attn.out_proj.weight", ATTN_F32, 2, {8, 8}, 0},
                       {"self_attn.out_proj.bias", ATTN_F32, 1, {8}, 0},
                       {"linear1.weight", ATTN_F32, 2, {16, 8}, 0},
                       {NULL, 0, 0, {0}, 0}},
              ATTN_E_SHAPE, "linear1.weight", "[1099511627776, 8]");
    eval_case(ctx, "additive num_hiddens 2^27",
              (kv[]){{"op", "additive_attention"}, {"key_size", "4"}, {"query_size", "4"},
                     {"num_hiddens", "134217728"}, {NULL, NULL}},
              (tens[]){{"queries", ATTN_F32, 3, {1, 2, 4}, 0},
                       {"keys", ATTN_F32, 3, {1, 3, 4}, 0},
                       {"values", ATTN_F32, 3, {1, 3, 4}, 0},
                       {NULL, 0, 0, {0}, 0}},
              ATTN_E_NOT_FOUND, "strict load: no tensor 'W_", NULL);
    eval_case(ctx, "gpt vocab 2^40, block 2^40",
              (kv[]){{"op", "gpt"}, {"vocab_size", "1099511627776"},
                     {"block_size", "1099511627776"}, {"num_layers", "2"}, {"d_model", "8"},
                     {"nhead", "2"}, {NULL, NULL}},
              (tens[]){{"idx", ATTN_I64, 2, {1, 2}, 0}, {NULL, 0, 0, {0}, 0}},
              ATTN_E_NOT_FOUND, "tok_emb.weight", NULL);
    eval_case(ctx, "gpt num_layers 100000",
              (kv[]){{"op", "gpt"}, {"vocab_size", "4"}, {"block_size", "4"},
                     {"num_layers", "100000"}, {"d_model", "8"}, {"nhead", "2"}, {NULL, NULL}},
              (tens[]){{"idx", ATTN_I64, 2, {1, 2}, 0},
                       {"tok_emb.weight", ATTN_F32, 2, {4, 8}, 0},
                       {"pos_emb.weight", ATTN_F32, 2, {4, 8}, 0},
                       {NULL, 0, 0, {0}, 0}},
              ATTN_E_UNSUPPORTED, "ATTN_LIMIT_LAYERS", "100000");
    eval_case(ctx, "mha kdim 2^40, no key",
              (kv[]){{"op", "multihead_attention"}, {"embed_dim", "8"}, {"num_heads", "2"},
                     {"kdim", "1099511627776"}, {NULL, NULL}},
              (tens[]){{"query", ATTN_F32, 3, {1, 2, 8}, 0}, {NULL, 0, 0, {0}, 0}},
              ATTN_E_NOT_FOUND, "proj_weight", NULL);
    eval_case(ctx, "vit max_patches 2^40",
              (kv[]){{"op", "vit_self_attention"}, {"patch_dim", "4"}, {"embed_dim", "8"},
                     {"num_heads", "2"}, {"max_patches", "1099511627776"}, {NULL, NULL}},
              (tens[]){{"patches", ATTN_F32, 3, {1, 2, 4}, 0}, {NULL, 0, 0, {0}, 0}},
              ATTN_E_NOT_FOUND, "strict load", NULL);
    eval_case(ctx, "posenc d_model 2^40, length 2^20",
              (kv[]){{"op", "positional_encoding"}, {"d_model", "1099511627776"},
                     {"max_len", "1048576"}, {"length", "1048576"}, {NULL, NULL}},
              NULL, ATTN_E_UNSUPPORTED, "ATTN_LIMIT_FILE_BYTES", "length x d_model");
    /* 1 GiB from a few bytes of attributes, under the file limit (physical memory): refused
     * at 256 MiB, not allocated three times over */
    eval_case(ctx, "posenc 16384 x 16384 table",
              (kv[]){{"op", "positional_encoding"}, {"d_model", "16384"},
                     {"max_len", "16384"}, {"length", "16384"}, {NULL, NULL}},
              NULL, ATTN_E_UNSUPPORTED, "256 MiB", "length x d_model");
    eval_case(ctx, "posenc concat d_model 2^40",
              (kv[]){{"op", "positional_encoding"}, {"d_model", "1099511627776"},
                     {"mode", "concat"}, {NULL, NULL}},
              (tens[]){{"x", ATTN_F32, 3, {1, 2, 4}, 0}, {NULL, 0, 0, {0}, 0}},
              ATTN_E_UNSUPPORTED, "ATTN_LIMIT_FILE_BYTES", NULL);
    /* item 4: weights and data */
    eval_case(ctx, "NaN module weight",
              (kv[]){{"op", "feed_forward"}, {"d_model", "4"}, {"d_ff", "8"},
                     {NULL, NULL}},
              (tens[]){{"x", ATTN_F32, 3, {1, 2, 4}, 0},
                       {"w_1.weight", ATTN_F32, 2, {8, 4}, NAN},
                       {"w_1.bias", ATTN_F32, 1, {8}, 0},
                       {"w_2.weight", ATTN_F32, 2, {4, 8}, 0},
                       {"w_2.bias", ATTN_F32, 1, {4}, 0},
                       {NULL, 0, 0, {0}, 0}},
              ATTN_E_NONFINITE, "w_1.weight", "NaN");
    eval_case(ctx, "F16 +inf module weight",
              (kv[]){{"op", "feed_forward"}, {"d_model", "4"}, {"d_ff", "8"},
                     {NULL, NULL}},
              (tens[]){{"x", ATTN_F32, 3, {1, 2, 4}, 0},
                       {"w_1.weight", ATTN_F32, 2, {8, 4}, 0},
                       {"w_1.bias", ATTN_F32, 1, {8}, 0},
                       {"w_2.weight", ATTN_F16, 2, {4, 8}, 1},
                       {"w_2.bias", ATTN_F32, 1, {4}, 0},
                       {NULL, 0, 0, {0}, 0}},
              ATTN_E_NONFINITE, "w_2.weight", "infinity");
    eval_case(ctx, "F16 data tensor",
              (kv[]){{"op", "relu"}, {NULL, NULL}},
              (tens[]){{"input", ATTN_F16, 2, {2, 2}, 0}, {NULL, 0, 0, {0}, 0}},
              ATTN_E_DTYPE, "'input'", "F32");
    eval_case(ctx, "I64 data tensor",
              (kv[]){{"op", "relu"}, {NULL, NULL}},
              (tens[]){{"input", ATTN_I64, 2, {2, 2}, 0}, {NULL, 0, 0, {0}, 0}},
              ATTN_E_DTYPE, "'input'", "I64");
    eval_case(ctx, "BF16 data tensor",
              (kv[]){{"op", "relu"}, {NULL, NULL}},
              (tens[]){{"input", ATTN_BF16, 2, {2, 2}, 0}, {NULL, 0, 0, {0}, 0}},
              ATTN_E_DTYPE, "'input'", "BF16");
}

/* ---- checkpoints ------------------------------------------------------------------------ */
static attn_status do_charlm(attn_ctx *ctx, const char *path) {
    attn_charlm_config c;
    attn_module *m = NULL;
    attn_status s = attn_charlm_load(ctx, path, &c, &m);
    attn_module_free(m);
    return s;
}
static attn_status do_dates(attn_ctx *ctx, const char *path) {
    attn_dates_config c;
    attn_module *m = NULL;
    attn_status s = attn_dates_load(ctx, path, &c, &m);
    attn_module_free(m);
    return s;
}

static void test_checkpoints(attn_ctx *ctx) {
    char lm[512], dm[512], p[512];
    snprintf(lm, sizeof lm, "%s/lm.st", tmp);
    snprintf(dm, sizeof dm, "%s/dm.st", tmp);
    snprintf(p, sizeof p, "%s/ck.st", tmp);
    {
        attn_charlm_config c = attn_charlm_defaults();
        c.d_model = 8, c.nhead = 2, c.num_layers = 1, c.dim_feedforward = 16, c.block_size = 8;
        c.batch = 2, c.steps = 0;
        static const char text[] = "abcabcabcabc cab bac abc cba abc abc aabbcc abcabc abc "
                                   "abcabc cab bac abc cba abc abc aabbcc abcabc abc\n";
        attn_module *m = NULL;
        TU_STATUS(attn_charlm_train(ctx, &c, text, sizeof text - 1, NULL, NULL, NULL, &m),
                  ATTN_OK, ctx);
        TU_STATUS(attn_charlm_save(ctx, m, &c, lm), ATTN_OK, ctx);
        attn_module_free(m);
    }
    {
        attn_dates_config c = attn_dates_defaults();
        c.d_model = 8, c.nhead = 2, c.num_layers = 1, c.dim_feedforward = 16;
        c.batch = 2, c.steps = 0, c.eval_n = 1;
        attn_module *m = NULL;
        TU_STATUS(attn_dates_train(ctx, &c, NULL, NULL, NULL, &m), ATTN_OK, ctx);
        TU_STATUS(attn_dates_save(ctx, m, &c, dm), ATTN_OK, ctx);
        attn_module_free(m);
    }
    printf("checkpoints:\n");
    run_case("charlm as written", do_charlm, lm, ATTN_OK, NULL, NULL);
    run_case("dates as written", do_dates, dm, ATTN_OK, NULL, NULL);
    static const char *const dff[] = {"1048576", "16777216", "1099511627776"};
    for (int i = 0; i < 3; i++) {
        char what[96];
        copy_st(ctx, lm, p, "dim_feedforward", dff[i], NULL, 0);
        snprintf(what, sizeof what, "charlm dim_feedforward %s", dff[i]);
        /* over 2^24 the config check refuses it; below, the tensors do */
        run_case(what, do_charlm, p, i < 2 ? ATTN_E_SHAPE : ATTN_E_FORMAT,
                 i < 2 ? "linear1.weight" : "dim_feedforward", NULL);
        copy_st(ctx, dm, p, "dim_feedforward", dff[i], NULL, 0);
        snprintf(what, sizeof what, "dates dim_feedforward %s", dff[i]);
        run_case(what, do_dates, p, ATTN_E_SHAPE, "linear1.weight", dff[i]);
    }
    copy_st(ctx, lm, p, "d_model", "65536", NULL, 0);
    run_case("charlm d_model 65536", do_charlm, p, ATTN_E_SHAPE, "tok_emb.weight", "65536");
    copy_st(ctx, dm, p, "d_model", "1099511627776", NULL, 0);
    run_case("dates d_model 2^40", do_dates, p, ATTN_E_SHAPE, "src_emb.weight", NULL);
    copy_st(ctx, dm, p, "num_encoder_layers", "100000", NULL, 0);
    run_case("dates 100000 layers", do_dates, p, ATTN_E_UNSUPPORTED, "ATTN_LIMIT_LAYERS",
             "100000");
    copy_st(ctx, lm, p, "num_layers", "1000", NULL, 0);
    run_case("charlm 1000 layers", do_charlm, p, ATTN_E_NOT_FOUND, "layers.1.", NULL);
    copy_st(ctx, lm, p, "d_model", " 8", NULL, 0);
    run_case("charlm d_model \" 8\"", do_charlm, p, ATTN_E_FORMAT, "d_model", "\" 8\"");
    copy_st(ctx, dm, p, "nhead", " 2", NULL, 0);
    run_case("dates nhead \" 2\"", do_dates, p, ATTN_E_FORMAT, "nhead", NULL);
    copy_st(ctx, lm, p, "block_size", "0", NULL, 0);
    run_case("charlm block_size 0", do_charlm, p, ATTN_E_FORMAT, "block_size must be in", NULL);
    /* F3: a checkpoint that is a FIFO with no writer, or /dev/zero */
    snprintf(p, sizeof p, "%s/ck.fifo", tmp);
    TU_CHECK(mkfifo(p, 0600) == 0, "cannot make %s", p);
    run_case("charlm checkpoint FIFO", do_charlm, p, ATTN_E_IO, "a FIFO", NULL);
    run_case("dates checkpoint FIFO", do_dates, p, ATTN_E_IO, "a FIFO", NULL);
    unlink(p);
    run_case("charlm checkpoint /dev/zero", do_charlm, "/dev/zero", ATTN_E_IO,
             "a character device", NULL);
    snprintf(p, sizeof p, "%s/ck.st", tmp);
    copy_st(ctx, lm, p, NULL, NULL, "layers.0.linear1.weight", NAN);
    run_case("charlm NaN weight", do_charlm, p, ATTN_E_NONFINITE, "layers.0.linear1.weight",
             "NaN");
    copy_st(ctx, dm, p, NULL, NULL, "generator.weight", -INFINITY);
    run_case("dates -inf weight", do_dates, p, ATTN_E_NONFINITE, "generator.weight", "infinity");
}

/* ---- BERT ----------------------------------------------------------------------------- */
static attn_status do_bert(attn_ctx *ctx, const char *dir) {
    attn_bert *b = NULL;
    attn_status s = attn_bert_load(ctx, dir, &b);
    attn_bert_free(b);
    return s;
}

/* Loads, then packs the weights to F16. */
static attn_status do_bert_f16(attn_ctx *ctx, const char *dir) {
    attn_bert *b = NULL;
    attn_status s = attn_bert_load(ctx, dir, &b);
    if (s == ATTN_OK) s = attn_bert_set_dtype(ctx, b, ATTN_F16);
    attn_bert_free(b);
    return s;
}

/* Loads with texts limited to 4 KB, then embeds a short text and one of 5000 bytes. */
static attn_status do_bert_long_text(attn_ctx *ctx, const char *dir) {
    static char text[5001];
    memset(text, 'a', 5000);
    attn_bert *b = NULL;
    attn_status s = attn_ctx_set_limit(ctx, ATTN_LIMIT_TEXT_BYTES, 4096);
    if (s == ATTN_OK) s = attn_bert_load(ctx, dir, &b);
    float out[2 * 32];
    const char *texts[2] = {"a short one", text};
    if (s == ATTN_OK) s = attn_bert_embed(ctx, b, texts, 2, out);
    attn_bert_free(b);
    return s;
}

static void put_file(const char *dir, const char *name, const char *text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    TU_CHECK(f != NULL, "cannot write %s", p);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* A fresh copy of the fixture at tmp/bert (the files the loader reads, byte for byte). */
static const char *bert_copy(void) {
    static char dir[512];
    static const char *const files[] = {"config.json", "model.safetensors", "modules.json",
                                        "sentence_bert_config.json", "tokenizer_config.json",
                                        "vocab.txt", "1_Pooling/config.json"};
    char src[512], dst[512];
    snprintf(dir, sizeof dir, "%s/bert", tmp);
    tu_rm_tree(dir);
    mkdir(dir, 0700);
    snprintf(dst, sizeof dst, "%s/1_Pooling", dir);
    mkdir(dst, 0700);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(src, sizeof src, "fixtures/bert_tiny/%s", files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
        TU_CHECK(in && out, "cannot copy %s", src);
        char buf[65536];
        size_t n;
        while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
        if (in) fclose(in);
        if (out) fclose(out);
    }
    return dir;
}

/* config.json of the fixture with one "key": value replaced (or added). */
static void bert_config(const char *dir, const char *key, const char *value) {
    char p[1024], buf[8192];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    char pat[128], out[9000];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    char *at = strstr(buf, pat);
    if (!at) { /* add it after the opening brace */
        char *br = strchr(buf, '{');
        TU_CHECK(br != NULL, "config.json has no object");
        if (!br) return;
        snprintf(out, sizeof out, "{\"%s\": %s, %s", key, value, br + 1);
    } else {
        char *v = strchr(at + strlen(pat), ':') + 1, *e = v;
        while (*e && *e != ',' && *e != '}') e++;
        snprintf(out, sizeof out, "%.*s %s%s", (int)(v - buf), buf, value, e);
    }
    put_file(dir, "config.json", out);
}

static void bert_weight(attn_ctx *ctx, const char *dir, const char *tensor, float v) {
    char p[1024], q[1024];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    snprintf(q, sizeof q, "%s/m2.st", tmp);
    copy_st(ctx, p, q, NULL, NULL, tensor, v);
    TU_CHECK(rename(q, p) == 0, "rename %s", q);
}

static void test_bert(attn_ctx *ctx) {
    printf("bert:\n");
    const char *d = bert_copy();
    run_case("bert fixture as is", do_bert, d, ATTN_OK, NULL, NULL);
    /* F1 */
    static const char *const toks[][3] = {
        {"{\"pad_token\": null}", NULL, NULL},
        {"{\"unk_token\": 0}", "unk_token", "number"},
        {"{\"unk_token\": {\"content\": 5}}", "unk_token.content", "number"},
        {"{\"cls_token\": {\"lstrip\": false}}", "cls_token", "content"},
        {"{\"sep_token\": [\"[SEP]\"]}", "sep_token", "array"},
        {"[]", "tokenizer_config.json", NULL}};
    for (int i = 0; i < 6; i++) {
        char what[96];
        d = bert_copy();
        put_file(d, "tokenizer_config.json", toks[i][0]);
        snprintf(what, sizeof what, "tokenizer_config %s", toks[i][0]);
        run_case(what, do_bert, d, i == 0 ? ATTN_OK : ATTN_E_FORMAT, toks[i][1], toks[i][2]);
    }
    /* F4: sizes from config.json */
    d = bert_copy();
    bert_config(d, "num_hidden_layers", "16777216");
    run_case("config num_hidden_layers 2^24", do_bert, d, ATTN_E_UNSUPPORTED,
             "num_hidden_layers 16777216", "ATTN_LIMIT_LAYERS (1024)");
    d = bert_copy();
    bert_config(d, "num_hidden_layers", "1000");
    run_case("config num_hidden_layers 1000", do_bert, d, ATTN_E_NOT_FOUND, "encoder.layer.",
             NULL);
    d = bert_copy();
    bert_config(d, "intermediate_size", "16777216");
    run_case("config intermediate_size 2^24", do_bert, d, ATTN_E_SHAPE, "intermediate.dense",
             "16777216");
    d = bert_copy();
    bert_config(d, "vocab_size", "16777216");
    run_case("config vocab_size 2^24", do_bert, d, ATTN_E_SHAPE, "word_embeddings", "16777216");
    d = bert_copy();
    bert_config(d, "hidden_size", "99999999999");
    run_case("config hidden_size 1e11", do_bert, d, ATTN_E_FORMAT, "hidden_size", "range");
    d = bert_copy();
    bert_config(d, "num_hidden_layers", "\"2\"");
    run_case("config num_hidden_layers string", do_bert, d, ATTN_E_FORMAT, "num_hidden_layers",
             NULL);
    d = bert_copy();
    bert_config(d, "hidden_size", "32.5");
    run_case("config hidden_size float", do_bert, d, ATTN_E_FORMAT, "hidden_size", NULL);
    d = bert_copy();
    bert_config(d, "max_position_embeddings", "-5");
    run_case("config max_position_embeddings -5", do_bert, d, ATTN_E_FORMAT,
             "max_position_embeddings", NULL);
    d = bert_copy();
    bert_config(d, "layer_norm_eps", "\"tiny\"");
    run_case("config layer_norm_eps string", do_bert, d, ATTN_E_FORMAT, "layer_norm_eps", NULL);
    d = bert_copy();
    put_file(d, "sentence_bert_config.json", "{\"max_seq_length\": 1e400}");
    run_case("sentence_bert max_seq_length 1e400", do_bert, d, ATTN_E_FORMAT, "max_seq_length",
             NULL);
    /* F5: a directory in place of a file */
    static const char *const files[] = {"config.json", "vocab.txt", "tokenizer_config.json",
                                        "model.safetensors"};
    for (int i = 0; i < 4; i++) {
        char p[1024], what[96];
        d = bert_copy();
        snprintf(p, sizeof p, "%s/%s", d, files[i]);
        unlink(p);
        mkdir(p, 0700);
        snprintf(what, sizeof what, "directory as %s", files[i]);
        run_case(what, do_bert, d, ATTN_E_IO, files[i], "not a regular file");
    }
    /* F3: a device or a FIFO with no writer in place of a file: refused by type, no read */
    static const char *const special[][2] = {{"config.json", "/dev/zero"},
                                             {"vocab.txt", NULL},
                                             {"tokenizer_config.json", "/dev/zero"},
                                             {"model.safetensors", "/dev/zero"},
                                             {"model.safetensors", NULL}};
    for (int i = 0; i < 5; i++) {
        char p[1024], what[96];
        d = bert_copy();
        snprintf(p, sizeof p, "%s/%s", d, special[i][0]);
        unlink(p);
        int made = special[i][1] ? symlink(special[i][1], p) : mkfifo(p, 0600);
        TU_CHECK(made == 0, "cannot make %s", p);
        snprintf(what, sizeof what, "%s as %s", special[i][1] ? "/dev/zero" : "FIFO",
                 special[i][0]);
        run_case(what, do_bert, d, ATTN_E_IO, special[i][0],
                 special[i][1] ? "a character device" : "a FIFO");
    }
    /* vocab.txt */
    d = bert_copy();
    {
        char p[1024];
        snprintf(p, sizeof p, "%s/vocab.txt", d);
        FILE *f = fopen(p, "ab");
        if (f) {
            fputc('x', f), fputc(0, f), fputs("y\n", f);
            fclose(f);
        }
    }
    run_case("vocab.txt with a NUL byte", do_bert, d, ATTN_E_FORMAT, "NUL", NULL);
    /* low: modules.json Pooling path */
    static const char *const bad_paths[] = {"../../etc", "/etc", "1_Pooling/../.."};
    for (int i = 0; i < 3; i++) {
        char mod[512], what[96];
        d = bert_copy();
        snprintf(mod, sizeof mod,
                 "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers."
                 "models.Transformer\"},{\"idx\":1,\"name\":\"1\",\"path\":\"%s\",\"type\":"
                 "\"sentence_transformers.models.Pooling\"}]",
                 bad_paths[i]);
        put_file(d, "modules.json", mod);
        snprintf(what, sizeof what, "Pooling path %s", bad_paths[i]);
        run_case(what, do_bert, d, ATTN_E_FORMAT, "Pooling path", "leaves the model folder");
    }
    /* F7a */
    d = bert_copy();
    bert_weight(ctx, d, "encoder.layer.0.attention.self.query.weight", INFINITY);
    run_case("bert Inf query weight", do_bert, d, ATTN_E_NONFINITE,
             "encoder.layer.0.attention.self.query.weight", "infinity");
    d = bert_copy();
    bert_weight(ctx, d, "embeddings.LayerNorm.bias", NAN);
    run_case("bert NaN LayerNorm bias", do_bert, d, ATTN_E_NONFINITE, "LayerNorm.bias", "NaN");
    d = bert_copy();
    run_case("bert fixture packed to F16", do_bert_f16, d, ATTN_OK, NULL, NULL);
    d = bert_copy();
    bert_weight(ctx, d, "encoder.layer.0.attention.self.query.weight", 1e6f);
    run_case("bert weight past the F16 range, packed to F16", do_bert_f16, d, ATTN_E_NONFINITE,
             "overflows F16", NULL);
    /* the tokenizer takes texts up to ATTN_LIMIT_TEXT_BYTES (found writing fuzz_tokenizer) */
    d = bert_copy();
    run_case("bert text over ATTN_LIMIT_TEXT_BYTES", do_bert_long_text, d, ATTN_E_UNSUPPORTED,
             "ATTN_LIMIT_TEXT_BYTES", "5000 bytes");
}

int main(void) {
    attn_ctx *ctx = tu_ctx(1);
    snprintf(tmp, sizeof tmp, "/tmp/attn_hostile_XXXXXX");
    if (!ctx || !mkdtemp(tmp)) {
        fprintf(stderr, "test_hostile: setup failed\n");
        return 1;
    }
    printf("peak RSS bound: %.0f MB + 4 x input size\n", RSS_BASE / 1048576);
    double cal = run_case("calibration: touch 320 MB", touch, tmp, ATTN_OK, NULL, NULL);
    TU_CHECK(cal > 300.0 * 1048576, "the RSS measurement missed a 320 MB touch (%.1f MB)",
             cal / 1048576);
    test_eval(ctx);
    test_checkpoints(ctx);
    test_bert(ctx);
    tu_rm_tree(tmp);
    attn_ctx_free(ctx);
    return tu_finish("test_hostile");
}
