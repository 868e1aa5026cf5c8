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

#include "commands.h"
#include "pictures/pictures.h"

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

/* Appends a whole file (attn_cli_read_text's rules: "-" is standard input), keeping the whole
 * text within max bytes; 0 on error (message printed). */
static int append_file(textbuf *t, const char *path, uint64_t max, const char *bound) {
    char *data;
    size_t n;
    uint64_t room = max > t->len ? max - t->len : 0;
    char name[96];
    snprintf(name, sizeof name, "%s%s", bound, t->files ? ", for the whole text" : "");
    if (!attn_cli_read_all("train charlm", path, (int64_t)room, name, &data, &n)) return 0;
    if (!t->p) { /* the first file: its buffer becomes the text's */
        t->p = data, t->len = n, t->cap = n + 1;
    } else {
        if (t->len + n + 1 > t->cap) {
            size_t cap = t->cap * 2 > t->len + n + 1 ? t->cap * 2 : t->len + n + 1;
            char *q = realloc(t->p, cap);
            if (!q) {
                free(data);
                fprintf(stderr, "attn train charlm: out of memory reading %s\n", path);
                return 0;
            }
            t->p = q, t->cap = cap;
        }
        memcpy(t->p + t->len, data, n + 1);
        t->len += n;
        free(data);
    }
    t->files++;
    return 1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends the regular files (not links) of dir in name order, skipping names that end in
 * skip_suffix (may be NULL).  Returns the number of files, -1 on a read error. */
static int append_dir(textbuf *t, const char *dir, const char *skip_suffix, uint64_t max,
                      const char *bound) {
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
            if (!append_file(t, path, max, bound)) rc = -1;
        }
        if (rc == 0) rc = (int)n;
    } else {
        fprintf(stderr, "attn train charlm: out of memory listing %s\n", dir);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* Loads the text of --text PATH or of --corpus NAME, at most max bytes; prints what it used
 * unless quiet.  0 on error. */
static int load_text(textbuf *t, const char *path, const char *corpus, int install,
                     uint64_t max, const char *bound, int quiet) {
    if (path) {
        if (!append_file(t, path, max, bound)) return 0;
        if (!quiet)
            fprintf(stderr, "text: %s, %zu bytes\n", strcmp(path, "-") ? path : "standard input",
                    t->len);
        return 1;
    }
    if (!strcmp(corpus, "licenses")) {
        int n = append_dir(t, LICENSES_DIR, NULL, max, bound);
        if (n < 0) return 0;
        if (n == 0) {
            fprintf(stderr, "attn train charlm: no text in %s (Debian package base-files); "
                            "give one with --text FILE\n", LICENSES_DIR);
            return 0;
        }
        if (!quiet)
            fprintf(stderr, "text: the %d licence texts in %s (Debian package base-files), %zu "
                        "bytes\n", n, LICENSES_DIR, t->len);
        return 1;
    }
    if (!strcmp(corpus, "fortunes")) {
        int n = append_dir(t, FORTUNES_DIR, ".dat", max, bound);
        if (n == 0 && install) {
            fprintf(stderr, "installing the Debian package fortunes: "
                            "apt-get install -y --no-install-recommends fortunes\n");
            int rc = system("apt-get install -y --no-install-recommends fortunes >&2");
            if (rc != 0) fprintf(stderr, "attn train charlm: apt-get failed (status %d)\n", rc);
            else n = append_dir(t, FORTUNES_DIR, ".dat", max, bound);
        }
        if (n < 0) return 0;
        if (n == 0) {
            fprintf(stderr, "attn train charlm: no fortune files in %s; install them with "
                            "'apt-get install fortunes' (or add --install)\n", FORTUNES_DIR);
            return 0;
        }
        if (!quiet)
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
    attn_cli_dp_fault(p->step);
    float bpc = (float)(p->loss / 0.69314718055994530942);
    if (!attn_cli_curve_add(c, p, p->val_bpc > 0, p->val_bpc) || c->quiet)
        return attn_cli_stop_requested();
    char el[16], eta[16];
    attn_cli_fmt_time(p->elapsed_s, el, sizeof el);
    attn_cli_fmt_time(p->eta_s, eta, sizeof eta);
    fprintf(stderr, "%sstep %6lld/%lld  loss %.3f bpc  lr %.2e  %6.0f tok/s  %s elapsed  ETA %s",
            c->tty ? "\r\033[K" : "", (long long)p->step, (long long)p->steps, (double)bpc,
            (double)p->lr, p->tokens_per_s, el, eta);
    if (p->val_bpc > 0) fprintf(stderr, "  val %.3f bpc\n", (double)p->val_bpc);
    else if (!c->tty) fputc('\n', stderr);
    fflush(stderr);
    return attn_cli_stop_requested();
}

int attn_cmd_charlm_train(int argc, char **argv) {
    attn_charlm_config cfg = attn_charlm_defaults();
    const char *out = "charlm-model", *resume = NULL, *text_path = NULL, *corpus = "licenses";
    long long threads = 0, sample = 400, steps = cfg.steps, batch = cfg.batch,
              block = cfg.block_size, d_model = cfg.d_model, heads = cfg.nhead,
              layers = cfg.num_layers, ff = cfg.dim_feedforward, seed = (long long)cfg.seed,
              eval_every = cfg.eval_every;
    double lr = cfg.lr, dropout = cfg.dropout, time_limit = cfg.time_limit_s;
    int install = 0, quiet = 0, npos, dtype = ATTN_CLI_DTYPE_AUTO;
    attn_cli_train_common tc = {NULL, 1, 100, NULL};
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("corpus", 0, &corpus, "NAME",
                     "licenses (default): the licence texts in " LICENSES_DIR "\n"
                     "(Debian package base-files, on every Debian system);\n"
                     "fortunes: " FORTUNES_DIR " (apt-get install fortunes)"),
        ATTN_OPT_FLAG("install", 0, &install,
                      "install the fortunes package with apt-get if missing"),
        ATTN_OPT_STR("text", 0, &text_path, "FILE",
                     "train on this file instead ('-': standard input)"),
        ATTN_OPT_STR("out", 'o', &out, "DIR",
                     "where to write model.safetensors, state.safetensors,\n"
                     "log.jsonl and loss.svg (default: charlm-model)"),
        ATTN_OPT_STR("output", 0, &out, "DIR", NULL),
        ATTN_OPT_INT("steps", 0, &steps, 0, 100000000, "N",
                     "optimiser steps (default 600: about 5 minutes on one core)"),
        ATTN_OPT_INT("batch", 0, &batch, 1, 65536, "N", "windows per step (default 32)"),
        ATTN_OPT_INT("block", 0, &block, 1, 1 << 20, "N", "context length in bytes (default 64)"),
        ATTN_OPT_NUM("lr", 0, &lr, 1e-7, 10, "X", "peak learning rate (default 4e-3)"),
        ATTN_OPT_INT("d-model", 0, &d_model, 1, 65536, "N", "model width (default 128)"),
        ATTN_OPT_INT("heads", 0, &heads, 1, 1024, "N", "attention heads (default 4)"),
        ATTN_OPT_INT("layers", 0, &layers, 1, 1000, "N", "layers (default 3)"),
        ATTN_OPT_INT("ff", 0, &ff, 1, 1 << 20, "N", "feed-forward width (default 512)"),
        ATTN_OPT_NUM("dropout", 0, &dropout, 0, 0.99, "X", "dropout probability"),
        ATTN_OPT_INT("seed", 0, &seed, 0, 1LL << 62, "N",
                     "everything random follows from it (default 1)"),
        ATTN_OPT_THREADS(&threads),
        ATTN_OPT_CHOICE("dtype", 0, &dtype, ATTN_CLI_DTYPE_CHOICES, "T", ATTN_CLI_DTYPE_HELP),
        ATTN_OPT_NUM("time-limit", 0, &time_limit, 0, 1e9, "SEC", "stop after this long"),
        ATTN_OPT_INT("eval-every", 0, &eval_every, 0, 100000000, "N",
                     "validation bpc every N steps (default 100)"),
        ATTN_OPT_INT("sample", 0, &sample, 0, 1000000, "N",
                     "characters to sample at the end (default 400)"),
        ATTN_OPT_STR("resume", 0, &resume, "FILE",
                     "continue from a state.safetensors of the same run"),
        ATTN_OPT_TRAIN_COMMON(&tc, "checkpoint every N steps (default 100) and at the end"),
        ATTN_OPT_FLAG("quiet", 'q', &quiet, "no progress lines on stderr"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "train charlm", "attn train charlm [options]",
        "Trains a decoder-only Transformer (GPT) on a real English text, one byte at a\n"
        "time; reports the validation loss (the last tenth of the text) in bits per\n"
        "character.  Sample from the model with 'attn generate --model DIR/model.safetensors'.\n"
        "The text is at most ATTN_LIMIT_TEXT_BYTES (1 GiB) long.",
        opts, NULL,
        "attn train charlm -o lm\n"
        "attn train charlm --text README.md --steps 200 --threads 1 -o lm\n"
        "cat *.txt | attn train charlm --text - -o lm"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    const int rank0 = attn_cli_dp_rank() == 0;
    if (!rank0) quiet = 1; /* rank 0 alone prints progress */
    cfg.steps = steps, cfg.batch = batch, cfg.block_size = block, cfg.d_model = d_model;
    cfg.nhead = heads, cfg.num_layers = layers, cfg.dim_feedforward = ff;
    cfg.seed = (uint64_t)seed, cfg.eval_every = eval_every, cfg.lr = (float)lr;
    cfg.dropout = (float)dropout, cfg.time_limit_s = time_limit;
    textbuf text = {NULL, 0, 0, 0};
    attn_cli_paths paths;
    attn_ctx *ctx = NULL;
    int64_t max;
    const char *bound;
    if (attn_cli_ctx_dtype_resume("train charlm", threads, quiet, resume, &dtype, &ctx)) return 1;
    cfg.dtype = attn_cli_dtype_name(dtype);
    if (attn_cli_dp_open("train charlm", ctx, cfg.batch, "batch", &cfg.dp)) {
        attn_ctx_free(ctx);
        return 1;
    }
    if (!attn_cli_text_bound("train charlm", ctx, &max, &bound) ||
        !load_text(&text, text_path, corpus, install, (uint64_t)max, bound, quiet) ||
        attn_cli_train_dir("train charlm", out, &paths)) {
        free(text.p);
        attn_ctx_free(ctx);
        return 1;
    }
    cfg.state_path = paths.state;
    cfg.save_every = tc.save_every;
    cfg.accum = (int)tc.accum;
    cfg.log_path = rank0 ? attn_cli_train_log(&tc, &paths) : NULL;
    cfg.tb_dir = rank0 ? attn_cli_train_tb(&tc) : NULL;
    attn_cli_curve c;
    char *smp = NULL;
    attn_module *m = NULL;
    int rc = 0;
    attn_cli_curve_init(&c, quiet);
    if (!quiet)
        fprintf(stderr, "training charlm: d_model %lld, %lld heads, %lld layers, ff %lld, block %lld, "
                    "batch %lld, %lld steps, %lld threads, %s products\n",
            (long long)cfg.d_model, (long long)cfg.nhead, (long long)cfg.num_layers,
            (long long)cfg.dim_feedforward, (long long)cfg.block_size, (long long)cfg.batch,
            (long long)cfg.steps, (long long)attn_ctx_threads(ctx), cfg.dtype);
    /* data parallel: the ranks agree on every setting that changes the result (common/train_dp.c;
     * the initial weights follow from them, or from --resume's file; the first step compares
     * them too) */
    attn_cli_dp_note("--text or --corpus", "%s", text_path ? "--text" : corpus);
    attn_cli_dp_note_data("the text (its bytes)", text.p, text.len);
    attn_cli_dp_note("--steps", "%lld", steps);
    attn_cli_dp_note("--block", "%lld", block);
    attn_cli_dp_note("--lr", "%.17g", lr);
    attn_cli_dp_note("--d-model", "%lld", d_model);
    attn_cli_dp_note("--heads", "%lld", heads);
    attn_cli_dp_note("--layers", "%lld", layers);
    attn_cli_dp_note("--ff", "%lld", ff);
    attn_cli_dp_note("--dropout", "%.17g", dropout);
    attn_cli_dp_note("--seed", "%lld", seed);
    attn_cli_dp_note("--dtype", "%s", cfg.dtype);
    attn_cli_dp_note("--time-limit", "%.17g", time_limit);
    attn_cli_dp_note("--eval-every", "%lld", eval_every);
    attn_cli_dp_note("--accum", "%lld", tc.accum);
    attn_cli_dp_note("--save-every", "%lld", tc.save_every);
    if (resume ? !attn_cli_dp_note_file("train charlm", "--resume", resume)
               : (attn_cli_dp_note("--resume", "(none)"), 0)) {
        rc = 1;
        goto out;
    }
    if (attn_cli_dp_ready("train charlm", 1)) {
        rc = 1;
        goto out;
    }
    attn_cli_stop_on_signals();
    attn_status st = attn_charlm_train(ctx, &cfg, text.p, text.len, resume, on_progress, &c, &m);
    if (c.tty && !quiet) fputc('\n', stderr);
    if (st != ATTN_OK) {
        rc = attn_cli_dp_fail(ctx, "train charlm", st);
        goto out;
    }
    if (!rank0) goto out; /* rank 0 writes the model and the pictures */
    if ((st = attn_charlm_save(ctx, m, &cfg, paths.model)) != ATTN_OK) {
        rc = attn_cli_fail(ctx, "train charlm", st);
        goto out;
    }
    const int chart = attn_cli_train_chart("train charlm", cfg.log_path, paths.svg);
    if (chart > 0) rc = 1;
    printf("vocabulary: %d bytes\n", cfg.vocab_size);
    if (c.nv > 0) printf("validation: %.3f bits per character\n", (double)c.val);
    if (attn_cli_stop_requested())
        printf("stopped by a signal: continue with --resume %s -o %s\n", paths.state, out);
    printf("model: %s\nstate: %s\nloss curve: %s\n", paths.model, paths.state,
           chart == 0 ? paths.svg : "(none: no log)");
    if (cfg.log_path) printf("log: %s\n", cfg.log_path);
    if (sample > 0 && (smp = malloc((size_t)sample + 1)) != NULL) {
        st = attn_charlm_generate(ctx, m, &cfg, NULL, sample, 0.8f, 0, cfg.seed, smp,
                                  (size_t)sample + 1);
        if (st == ATTN_OK) printf("sample (temperature 0.8):\n%s\n", smp);
        else rc = attn_cli_fail(ctx, "train charlm", st);
    }
out:
    free(smp);
    attn_module_free(m);
    free(text.p);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn generate --------------------------------------------------------------------- */
int attn_cmd_charlm_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = "";
    long long length = 500, top_k = 0, seed = 1, threads = 0;
    double temperature = 0.8;
    int npos;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("model", 0, &model, "FILE",
                     "a model.safetensors written by 'attn train charlm' (required)"),
        ATTN_OPT_STR("prompt", 0, &prompt, "TEXT", "the text to continue (default: none)"),
        ATTN_OPT_INT("length", 0, &length, 0, 100000000, "N",
                     "characters to generate (default 500)"),
        ATTN_OPT_NUM("temperature", 0, &temperature, 0, 100, "X",
                     "sampling temperature (default 0.8; 0 = greedy)"),
        ATTN_OPT_INT("top-k", 0, &top_k, 0, 255, "K",
                     "draw among the K most likely bytes (default 0 = all)"),
        ATTN_OPT_INT("seed", 0, &seed, 0, 1LL << 62, "N",
                     "the same seed gives the same text (default 1)"),
        ATTN_OPT_THREADS(&threads), ATTN_OPT_END};
    const attn_cli_spec spec = {
        "generate", "attn generate --model FILE [options]",
        "Samples text from a model of 'attn train charlm': prints the prompt and its\n"
        "continuation.",
        opts, NULL,
        "attn generate --model lm/model.safetensors --prompt \"This License\" --temperature 0.7 "
        "--top-k 10"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!model) return attn_cli_usage_error(&spec, "--model FILE is required");
    attn_ctx *ctx;
    if (attn_cli_ctx("generate", threads, 0, &ctx)) return 1;
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
