/* attn train / translate / heatmap. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"



/* ---- attn train ------------------------------------------------------------------------ */
static int on_progress(void *user, const attn_train_progress *p) {
    attn_cli_curve *c = user;
    if (!attn_cli_curve_add(c, p, p->loss, p->accuracy >= 0, p->accuracy)) return 0;
    char el[16], eta[16];
    attn_cli_fmt_time(p->elapsed_s, el, sizeof el);
    attn_cli_fmt_time(p->eta_s, eta, sizeof eta);
    fprintf(stderr, "%sstep %6lld/%lld  loss %.4f  lr %.2e  %7.0f tok/s  %s elapsed  ETA %s",
            c->tty ? "\r\033[K" : "", (long long)p->step, (long long)p->steps, (double)p->loss,
            (double)p->lr, p->tokens_per_s, el, eta);
    if (p->accuracy >= 0)
        fprintf(stderr, "  held-out exact match %.1f%%\n", 100.0 * (double)p->accuracy);
    else if (!c->tty)
        fputc('\n', stderr);
    fflush(stderr);
    return 0;
}

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: attn train dates [options]   (attn train charlm --help: the other task)\n"
            "  Trains an encoder-decoder Transformer to translate dates written by people\n"
            "  (\"21 Nov 2026\", \"saturday, november 21, 2026\", \"11/21/26\") into ISO form.\n"
            "options:\n"
            "  --out DIR          where to write model.safetensors, state.safetensors and\n"
            "                     loss.svg (default: dates-model)\n"
            "  --steps N          optimiser steps (default 3000)\n"
            "  --batch N          examples per step (default 64)\n"
            "  --lr X             peak learning rate (default 2e-3)\n"
            "  --d-model N --heads N --layers N --ff N --dropout X   model size\n"
            "  --seed N           everything random follows from it (default 1)\n"
            "  --threads N        worker threads (default 2; results do not depend on it)\n"
            "  --time-limit SEC   stop after this long\n"
            "  --target X         stop once held-out exact match reaches X (e.g. 0.99)\n"
            "  --eval-every N     evaluate on the held-out dates every N steps (default 250)\n"
            "  --eval-n N         how many held-out dates to evaluate on (default 1000)\n"
            "  --resume FILE      continue from a state.safetensors of the same run\n");
}

int attn_cmd_train(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        train_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "charlm")) return attn_cmd_charlm_train(argc - 1, argv + 1);
    if (strcmp(argv[1], "dates") != 0) {
        fprintf(stderr, "attn train: unknown task '%s' (known: dates, charlm)\n", argv[1]);
        return 2;
    }
    attn_dates_config cfg = attn_dates_defaults();
    const char *out = "dates-model", *resume = NULL;
    long long threads = 2, v;
    double x;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VAL ATTN_CLI_NEED_VAL("train")
#define BAD(what) ATTN_CLI_BAD("train", what)
        if (!strcmp(a, "--out")) { NEED_VAL out = val; }
        else if (!strcmp(a, "--resume")) { NEED_VAL resume = val; }
        else if (!strcmp(a, "--steps")) { NEED_VAL if (!attn_cli_parse_i64(val, 0, 100000000, &v)) BAD(a); cfg.steps = v; }
        else if (!strcmp(a, "--batch")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 65536, &v)) BAD(a); cfg.batch = v; }
        else if (!strcmp(a, "--d-model")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 65536, &v)) BAD(a); cfg.d_model = v; }
        else if (!strcmp(a, "--heads")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 1024, &v)) BAD(a); cfg.nhead = v; }
        else if (!strcmp(a, "--layers")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 1024, &v)) BAD(a); cfg.num_layers = v; }
        else if (!strcmp(a, "--ff")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 1 << 20, &v)) BAD(a); cfg.dim_feedforward = v; }
        else if (!strcmp(a, "--seed")) { NEED_VAL if (!attn_cli_parse_i64(val, 0, (1LL << 62), &v)) BAD(a); cfg.seed = (uint64_t)v; }
        else if (!strcmp(a, "--threads")) { NEED_VAL if (!attn_cli_parse_i64(val, 1, 256, &threads)) BAD(a); }
        else if (!strcmp(a, "--eval-n")) { NEED_VAL if (!attn_cli_parse_i64(val, 0, 3000, &v)) BAD(a); cfg.eval_n = (int)v; }
        else if (!strcmp(a, "--eval-every")) { NEED_VAL if (!attn_cli_parse_i64(val, 0, 100000000, &v)) BAD(a); cfg.eval_every = v; }
        else if (!strcmp(a, "--lr")) { NEED_VAL if (!attn_cli_parse_f(val, 1e-7, 10, &x)) BAD(a); cfg.lr = (float)x; }
        else if (!strcmp(a, "--dropout")) { NEED_VAL if (!attn_cli_parse_f(val, 0, 0.99, &x)) BAD(a); cfg.dropout = (float)x; }
        else if (!strcmp(a, "--time-limit")) { NEED_VAL if (!attn_cli_parse_f(val, 0, 1e9, &x)) BAD(a); cfg.time_limit_s = x; }
        else if (!strcmp(a, "--target")) { NEED_VAL if (!attn_cli_parse_f(val, 0, 1, &x)) BAD(a); cfg.target_accuracy = (float)x; }
        else {
            fprintf(stderr, "attn train: unknown option '%s'\n", a);
            train_usage(stderr);
            return 2;
        }
#undef NEED_VAL
#undef BAD
    }
    attn_cli_paths paths;
    attn_ctx *ctx;
    if (attn_cli_train_setup("train", out, (int)threads, &paths, &ctx)) {
        return 1;
    }
    cfg.state_path = paths.state;
    cfg.save_every = 500;
    attn_cli_curve c;
    int rc = 0;
    if (attn_cli_curve_init(&c, "train", cfg.steps)) {
        rc = 1;
        goto out;
    }
    fprintf(stderr, "training dates: d_model %lld, %lld heads, %lld+%lld layers, ff %lld, batch %lld, "
                    "%lld steps, %lld threads\n",
            (long long)cfg.d_model, (long long)cfg.nhead, (long long)cfg.num_layers,
            (long long)cfg.num_layers, (long long)cfg.dim_feedforward, (long long)cfg.batch,
            (long long)cfg.steps, threads);
    attn_module *m = NULL;
    attn_status st = attn_dates_train(ctx, &cfg, resume, on_progress, &c, &m);
    if (c.tty) fputc('\n', stderr);
    if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, "train", st);
        goto out;
    }
    st = attn_dates_save(ctx, m, &cfg, paths.model);
    if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, "train", st);
        attn_module_free(m);
        goto out;
    }
    for (int i = 0; i < c.nv; i++) c.val[i] = 1.0f - c.val[i]; /* plot the error: both fall */
    st = attn_loss_curve_svg(ctx, paths.svg, c.step, c.train, c.n, c.vstep, c.val, c.nv,
                             "held-out error (1 - exact match)",
                             "attn train dates: training loss and held-out exact match");
    if (st != ATTN_OK) rc = attn_cli_fail(ctx, "train", st);
    printf("model: %s\nstate: %s\nloss curve: %s\n", paths.model, paths.state, paths.svg);
    static const char *examples[] = {"21 Nov 2026", "saturday, november 21, 2026", "11/21/26",
                                     "the 3rd of may 1999"};
    for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) {
        char iso[32];
        if (attn_dates_translate(ctx, m, &cfg, examples[i], iso, sizeof iso, NULL) == ATTN_OK)
            printf("  %-30s -> %s\n", examples[i], iso);
    }
    attn_module_free(m);
out:
    attn_cli_curve_free(&c);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn translate -------------------------------------------------------------------- */
int attn_cmd_translate(int argc, char **argv) {
    const char *model = NULL;
    int first = 1;
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: attn translate --model FILE \"TEXT\" [\"TEXT\" ...]\n");
        return 0;
    }
    for (; first < argc; first++) {
        if (!strcmp(argv[first], "--model") && first + 1 < argc) model = argv[++first];
        else break;
    }
    if (!model || first >= argc) {
        fprintf(stderr, "usage: attn translate --model FILE \"TEXT\" [\"TEXT\" ...]\n");
        return 2;
    }
    attn_ctx *ctx;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    attn_dates_config cfg;
    attn_module *m;
    attn_status st = attn_dates_load(ctx, model, &cfg, &m);
    if (st != ATTN_OK) {
        int rc = attn_cli_fail(ctx, "translate", st);
        attn_ctx_free(ctx);
        return rc;
    }
    int rc = 0;
    for (int i = first; i < argc; i++) {
        char iso[32];
        st = attn_dates_translate(ctx, m, &cfg, argv[i], iso, sizeof iso, NULL);
        if (st != ATTN_OK) {
            rc = attn_cli_fail(ctx, "translate", st);
            continue;
        }
        printf("%-32s -> %s\n", argv[i], iso);
    }
    attn_module_free(m);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn heatmap ---------------------------------------------------------------------- */
int attn_cmd_heatmap(int argc, char **argv) {
    const char *model = NULL, *out = "heatmap.png", *text = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: attn heatmap --model FILE [-o OUT.png] \"TEXT\"\n"
                   "  Translates TEXT and draws the cross-attention weights (last decoder layer,\n"
                   "  mean over heads): one row per output character, one column per input one.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!text) text = argv[i];
        else {
            fprintf(stderr, "attn heatmap: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!model || !text) {
        fprintf(stderr, "usage: attn heatmap --model FILE [-o OUT.png] \"TEXT\"\n");
        return 2;
    }
    attn_ctx *ctx;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    attn_dates_config cfg;
    attn_module *m = NULL;
    int rc = 0;
    size_t n = strlen(text);
    float *cross = calloc(11 * (n ? n : 1), sizeof(float));
    attn_status st = attn_dates_load(ctx, model, &cfg, &m);
    char iso[32];
    if (st == ATTN_OK && cross)
        st = attn_dates_translate(ctx, m, &cfg, text, iso, sizeof iso, cross);
    if (st == ATTN_OK && cross) {
        /* rows: the output characters and <eos>; columns: the input characters */
        char rowbuf[11][8], colbuf[64][8];
        const char *rows[11], *cols[64];
        size_t niso = strlen(iso);
        for (int r = 0; r < 11; r++) {
            if ((size_t)r < niso) snprintf(rowbuf[r], sizeof rowbuf[r], "%c", iso[r]);
            else snprintf(rowbuf[r], sizeof rowbuf[r], "%s", (size_t)r == niso ? "<eos>" : "");
            rows[r] = rowbuf[r];
        }
        for (size_t j = 0; j < n && j < 64; j++) {
            snprintf(colbuf[j], sizeof colbuf[j], "%c", text[j]);
            cols[j] = colbuf[j];
        }
        int nrows = (int)(niso + 1 < 11 ? niso + 1 : 11);
        char title[160];
        snprintf(title, sizeof title, "\"%s\" -> %s", text, iso);
        st = attn_heatmap_png(ctx, out, cross, nrows, (int)n, rows, cols, title);
        if (st == ATTN_OK) printf("%s -> %s\nheatmap: %s\n", text, iso, out);
    }
    if (!cross) {
        fprintf(stderr, "attn heatmap: out of memory\n");
        rc = 1;
    } else if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, "heatmap", st);
    }
    free(cross);
    attn_module_free(m);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn demo ------------------------------------------------------------------------- */
/* Trains the dates model briefly, translates the seeds' examples and draws the heatmap. */
int attn_cmd_demo(int argc, char **argv) {
    const char *out = "attn-demo";
    long long steps = 1200, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: attn demo [--out DIR] [--steps N] [--threads N]\n"
                   "  Trains a small Transformer to translate dates into ISO form (a few minutes),\n"
                   "  translates the seeds' examples and draws the cross-attention as a heatmap.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc && attn_cli_parse_i64(argv[i + 1], 1, 1000000, &steps)) i++;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc && attn_cli_parse_i64(argv[i + 1], 1, 256, &threads)) i++;
        else {
            fprintf(stderr, "attn demo: bad argument '%s'\n", argv[i]);
            return 2;
        }
    }
    char s_steps[32], s_threads[32], model[4096], png[4096];
    snprintf(s_steps, sizeof s_steps, "%lld", steps);
    snprintf(s_threads, sizeof s_threads, "%lld", threads);
    char *targv[] = {"train", "dates", "--out", (char *)out, "--steps", s_steps, "--threads",
                     s_threads, "--eval-every", "200", "--target", "0.99", NULL};
    printf("== 1. Train an encoder-decoder Transformer to read dates (stops at 99%% held-out "
           "exact match)\n");
    fflush(stdout);
    int rc = attn_cmd_train(12, targv);
    if (rc) return rc;
    snprintf(model, sizeof model, "%s/model.safetensors", out);
    snprintf(png, sizeof png, "%s/heatmap.png", out);
    printf("\n== 2. Translate dates it has never seen\n");
    fflush(stdout);
    char *xargv[] = {"translate", "--model", model, "21 Nov 2026", "saturday, november 21, 2026",
                     "the 3rd of may 1999", "Jan. 5, 1987", "2001/09/30", NULL};
    rc = attn_cmd_translate(8, xargv);
    if (rc) return rc;
    printf("\n== 3. Where did it look?  Cross-attention of one translation as a heatmap\n");
    fflush(stdout);
    char *hargv[] = {"heatmap", "--model", model, "-o", png, "saturday, november 21, 2026", NULL};
    return attn_cmd_heatmap(6, hargv);
}
