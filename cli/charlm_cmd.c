/* attn train charlm / attn generate: a character-level GPT on a real English text. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* The default text: the licence texts of Debian's base-files package (Essential: present on
 * every Debian system).  The larger alternative: the fortunes packages' cookie files. */
#define LICENSES_DIR "/usr/share/common-licenses"
#define FORTUNES_DIR "/usr/share/games/fortunes"



/* ---- the text -------------------------------------------------------------------------- */
typedef struct textbuf {
    char *p;
    size_t len, cap;
    int files;
} textbuf;

/* Appends a whole file; 0 on error (message printed). */
static int append_file(textbuf *t, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "attn train charlm: cannot open %s: %s\n", path, strerror(errno));
        return 0;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        if (t->len + n > t->cap) {
            size_t cap = t->cap ? t->cap : 1 << 16;
            while (cap < t->len + n) cap *= 2;
            char *q = realloc(t->p, cap);
            if (!q) {
                fprintf(stderr, "attn train charlm: out of memory reading %s\n", path);
                fclose(f);
                return 0;
            }
            t->p = q, t->cap = cap;
        }
        memcpy(t->p + t->len, buf, n);
        t->len += n;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "attn train charlm: cannot read %s\n", path);
        return 0;
    }
    t->files++;
    return 1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends the regular files (not links) of dir in name order, skipping names that end in
 * skip_suffix (may be NULL).  Returns the number of files, -1 on a read error. */
static int append_dir(textbuf *t, const char *dir, const char *skip_suffix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        struct stat sb;
        size_t l = strlen(e->d_name), sl = skip_suffix ? strlen(skip_suffix) : 0;
        if (e->d_name[0] == '.') continue;
        if (sl && l >= sl && !strcmp(e->d_name + l - sl, skip_suffix)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **q = realloc(names, cap * sizeof *names);
            if (!q) {
                rc = -1;
                break;
            }
            names = q;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == 0) {
        qsort(names, n, sizeof *names, cmp_str);
        for (size_t i = 0; i < n && rc == 0; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (!append_file(t, path)) rc = -1;
        }
        if (rc == 0) rc = (int)n;
    } else {
        fprintf(stderr, "attn train charlm: out of memory listing %s\n", dir);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* Loads the text of --text PATH or of --corpus NAME; prints what it used.  0 on error. */
static int load_text(textbuf *t, const char *path, const char *corpus, int install) {
    if (path) {
        if (!append_file(t, path)) return 0;
        fprintf(stderr, "text: %s, %zu bytes\n", path, t->len);
        return 1;
    }
    if (!strcmp(corpus, "licenses")) {
        int n = append_dir(t, LICENSES_DIR, NULL);
        if (n < 0) return 0;
        if (n == 0) {
            fprintf(stderr, "attn train charlm: no text in %s (Debian package base-files); "
                            "give one with --text FILE\n", LICENSES_DIR);
            return 0;
        }
        fprintf(stderr, "text: the %d licence texts in %s (Debian package base-files), %zu "
                        "bytes\n", n, LICENSES_DIR, t->len);
        return 1;
    }
    if (!strcmp(corpus, "fortunes")) {
        int n = append_dir(t, FORTUNES_DIR, ".dat");
        if (n == 0 && install) {
            fprintf(stderr, "installing the Debian package fortunes: "
                            "apt-get install -y --no-install-recommends fortunes\n");
            int rc = system("apt-get install -y --no-install-recommends fortunes >&2");
            if (rc != 0) fprintf(stderr, "attn train charlm: apt-get failed (status %d)\n", rc);
            else n = append_dir(t, FORTUNES_DIR, ".dat");
        }
        if (n < 0) return 0;
        if (n == 0) {
            fprintf(stderr, "attn train charlm: no fortune files in %s; install them with "
                            "'apt-get install fortunes' (or add --install)\n", FORTUNES_DIR);
            return 0;
        }
        fprintf(stderr, "text: the %d fortune files in %s (Debian packages fortunes-min, "
                        "fortunes), %zu bytes\n", n, FORTUNES_DIR, t->len);
        return 1;
    }
    fprintf(stderr, "attn train charlm: unknown corpus '%s' (known: licenses, fortunes)\n",
            corpus);
    return 0;
}

/* ---- progress -------------------------------------------------------------------------- */
static int on_progress(void *user, const attn_train_progress *p) {
    attn_cli_curve *c = user;
    float bpc = (float)(p->loss / 0.69314718055994530942);
    if (!attn_cli_curve_add(c, p, bpc, p->val_bpc > 0, p->val_bpc)) return 0;
    char el[16], eta[16];
    attn_cli_fmt_time(p->elapsed_s, el, sizeof el);
    attn_cli_fmt_time(p->eta_s, eta, sizeof eta);
    fprintf(stderr, "%sstep %6lld/%lld  loss %.3f bpc  lr %.2e  %6.0f tok/s  %s elapsed  ETA %s",
            c->tty ? "\r\033[K" : "", (long long)p->step, (long long)p->steps, (double)bpc,
            (double)p->lr, p->tokens_per_s, el, eta);
    if (p->val_bpc > 0) fprintf(stderr, "  val %.3f bpc\n", (double)p->val_bpc);
    else if (!c->tty) fputc('\n', stderr);
    fflush(stderr);
    return 0;
}

static void charlm_usage(FILE *f) {
    fprintf(f,
            "usage: attn train charlm [options]\n"
            "  Trains a decoder-only Transformer (GPT) on a real English text, one byte at a\n"
            "  time; reports the validation loss (the last tenth of the text) in bits per\n"
            "  character.  Sample from the model with 'attn generate --model DIR/model.safetensors'.\n"
            "options:\n"
            "  --corpus NAME      licenses (default): the licence texts in " LICENSES_DIR "\n"
            "                     (Debian package base-files, on every Debian system);\n"
            "                     fortunes: " FORTUNES_DIR " (apt-get install fortunes)\n"
            "  --install          install the fortunes package with apt-get if missing\n"
            "  --text FILE        train on this file instead\n"
            "  --out DIR          where to write model.safetensors, state.safetensors and\n"
            "                     loss.svg (default: charlm-model)\n"
            "  --steps N          optimiser steps (default 600: about 5 minutes on one core)\n"
            "  --batch N          windows per step (default 32)\n"
            "  --block N          context length in bytes (default 64)\n"
            "  --lr X             peak learning rate (default 4e-3)\n"
            "  --d-model N --heads N --layers N --ff N --dropout X   model size\n"
            "  --seed N           everything random follows from it (default 1)\n"
            "  --threads N        worker threads (default 2; results do not depend on it)\n"
            "  --time-limit SEC   stop after this long\n"
            "  --eval-every N     validation bpc every N steps (default 100)\n"
            "  --sample N         characters to sample at the end (default 400)\n"
            "  --resume FILE      continue from a state.safetensors of the same run\n");
}

int attn_cmd_charlm_train(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        charlm_usage(stdout);
        return 0;
    }
    attn_charlm_config cfg = attn_charlm_defaults();
    const char *out = "charlm-model", *resume = NULL, *text_path = NULL, *corpus = "licenses";
    long long threads = 2, sample = 400, v;
    int install = 0;
    double x;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VAL ATTN_CLI_NEED_VAL("train charlm")
#define BAD(what) ATTN_CLI_BAD("train charlm", what)
        if (!strcmp(a, "--out")) { NEED_VAL out = val; }
        else if (!strcmp(a, "--resume")) { NEED_VAL resume = val; }
        else if (!strcmp(a, "--text")) { NEED_VAL text_path = val; }
        else if (!strcmp(a, "--corpus")) { NEED_VAL corpus = val; }
        else if (!strcmp(a, "--install")) { install = 1; }
        else if (!strcmp(a, "--steps")) { NEED_VAL if (!attn_cli_parse_i64(val, 0, 100000000, &v)) BAD(a); cfg.steps = v; }
        else if (!strcmp(a, "--batch")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 65536, &v)) BAD(a); cfg.batch = v; }
        else if (!strcmp(a, "--block")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 1 << 20, &v)) BAD(a); cfg.block_size = v; }
        else if (!strcmp(a, "--d-model")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 65536, &v)) BAD(a); cfg.d_model = v; }
        else if (!strcmp(a, "--heads")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 1024, &v)) BAD(a); cfg.nhead = v; }
        else if (!strcmp(a, "--layers")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 1000, &v)) BAD(a); cfg.num_layers = v; }
        else if (!strcmp(a, "--ff")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 1 << 20, &v)) BAD(a); cfg.dim_feedforward = v; }
        else if (!strcmp(a, "--seed")) { NEED_VAL if (!attn_cli_parse_i64(val, 0, (1LL << 62), &v)) BAD(a); cfg.seed = (uint64_t)v; }
        else if (!strcmp(a, "--threads")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 256, &threads)) BAD(a); }
        else if (!strcmp(a, "--eval-every")) { NEED_VAL if (!attn_cli_parse_i64(val, 0, 100000000, &v)) BAD(a); cfg.eval_every = v; }
        else if (!strcmp(a, "--sample")) { NEED_VAL if (!attn_cli_parse_i64(val, 0, 1000000, &sample)) BAD(a); }
        else if (!strcmp(a, "--lr")) { NEED_VAL if (!attn_cli_parse_f(val, 1e-7, 10, &x)) BAD(a); cfg.lr = (float)x; }
        else if (!strcmp(a, "--dropout")) { NEED_VAL if (!attn_cli_parse_f(val, 0, 0.99, &x)) BAD(a); cfg.dropout = (float)x; }
        else if (!strcmp(a, "--time-limit")) { NEED_VAL if (!attn_cli_parse_f(val, 0, 1e9, &x)) BAD(a); cfg.time_limit_s = x; }
        else {
            fprintf(stderr, "attn train charlm: unknown option '%s'\n", a);
            charlm_usage(stderr);
            return 2;
        }
#undef NEED_VAL
#undef BAD
    }
    textbuf text = {NULL, 0, 0, 0};
    if (!load_text(&text, text_path, corpus, install)) {
        free(text.p);
        return 1;
    }
    attn_cli_paths paths;
    attn_ctx *ctx;
    if (attn_cli_train_setup("train charlm", out, (int)threads, &paths, &ctx)) {
        free(text.p);
        return 1;
    }
    cfg.state_path = paths.state;
    cfg.save_every = 100;
    attn_cli_curve c;
    char *smp = NULL;
    attn_module *m = NULL;
    int rc = 0;
    if (attn_cli_curve_init(&c, "train charlm", cfg.steps)) {
        rc = 1;
        goto out;
    }
    fprintf(stderr, "training charlm: d_model %lld, %lld heads, %lld layers, ff %lld, block %lld, "
                    "batch %lld, %lld steps, %lld threads\n",
            (long long)cfg.d_model, (long long)cfg.nhead, (long long)cfg.num_layers,
            (long long)cfg.dim_feedforward, (long long)cfg.block_size, (long long)cfg.batch,
            (long long)cfg.steps, threads);
    attn_status st = attn_charlm_train(ctx, &cfg, text.p, text.len, resume, on_progress, &c, &m);
    if (c.tty) fputc('\n', stderr);
    if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, "train charlm", st);
        goto out;
    }
    if ((st = attn_charlm_save(ctx, m, &cfg, paths.model)) != ATTN_OK) {
        rc = attn_cli_fail(ctx, "train charlm", st);
        goto out;
    }
    st = attn_loss_curve_svg(ctx, paths.svg, c.step, c.train, c.n, c.vstep, c.val, c.nv,
                             "validation bits/char",
                             "attn train charlm: training and validation bits per character");
    if (st != ATTN_OK) rc = attn_cli_fail(ctx, "train charlm", st);
    printf("vocabulary: %d bytes\n", cfg.vocab_size);
    if (c.nv > 0) printf("validation: %.3f bits per character\n", (double)c.val[c.nv - 1]);
    printf("model: %s\nstate: %s\nloss curve: %s\n", paths.model, paths.state, paths.svg);
    if (sample > 0 && (smp = malloc((size_t)sample + 1)) != NULL) {
        st = attn_charlm_generate(ctx, m, &cfg, NULL, sample, 0.8f, 0, cfg.seed, smp,
                                  (size_t)sample + 1);
        if (st == ATTN_OK) printf("sample (temperature 0.8):\n%s\n", smp);
        else rc = attn_cli_fail(ctx, "train charlm", st);
    }
out:
    free(smp);
    attn_module_free(m);
    attn_cli_curve_free(&c);
    free(text.p);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn generate --------------------------------------------------------------------- */
static void generate_usage(FILE *f) {
    fprintf(f, "usage: attn generate --model FILE [--prompt TEXT] [--length N] [--temperature X]\n"
               "                     [--top-k K] [--seed N] [--threads N]\n"
               "  Samples text from a model of 'attn train charlm': prints the prompt and its\n"
               "  continuation.  --length characters (default 500); --temperature X (default\n"
               "  0.8; 0 = greedy); --top-k K draws among the K most likely bytes (default 0 =\n"
               "  all); --seed N (default 1): the same seed gives the same text.\n");
}

int attn_cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = "";
    long long length = 500, top_k = 0, seed = 1, threads = 1;
    double temperature = 0.8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            generate_usage(stdout);
            return 0;
        }
        if (!val) {
            fprintf(stderr, "attn generate: %s needs a value\n", a);
            generate_usage(stderr);
            return 2;
        }
        int ok = 1;
        i++;
        if (!strcmp(a, "--model")) model = val;
        else if (!strcmp(a, "--prompt")) prompt = val;
        else if (!strcmp(a, "--length")) ok = attn_cli_parse_i64(val, 0, 100000000, &length);
        else if (!strcmp(a, "--top-k")) ok = attn_cli_parse_i64(val, 0, 255, &top_k);
        else if (!strcmp(a, "--seed")) ok = attn_cli_parse_i64(val, 0, 1LL << 62, &seed);
        else if (!strcmp(a, "--threads")) ok = attn_cli_parse_i64(val, 1, 256, &threads);
        else if (!strcmp(a, "--temperature")) ok = attn_cli_parse_f(val, 0, 100, &temperature);
        else {
            fprintf(stderr, "attn generate: unknown option '%s'\n", a);
            generate_usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "attn generate: bad value '%s' for %s\n", val, a);
            return 2;
        }
    }
    if (!model) {
        generate_usage(stderr);
        return 2;
    }
    attn_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.threads = (int)threads;
    attn_ctx *ctx;
    if (attn_ctx_create(&cp, &ctx) != ATTN_OK) return 1;
    attn_charlm_config cfg;
    attn_module *m = NULL;
    char *buf = NULL;
    int rc = 0;
    attn_status st = attn_charlm_load(ctx, model, &cfg, &m);
    if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, "generate", st);
        goto out;
    }
    if (!(buf = malloc((size_t)length + 1))) {
        fprintf(stderr, "attn generate: out of memory\n");
        rc = 1;
        goto out;
    }
    st = attn_charlm_generate(ctx, m, &cfg, prompt, length, (float)temperature, (int)top_k,
                              (uint64_t)seed, buf, (size_t)length + 1);
    if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, "generate", st);
        goto out;
    }
    printf("%s%s\n", prompt, buf);
out:
    free(buf);
    attn_module_free(m);
    attn_ctx_free(ctx);
    return rc;
}
