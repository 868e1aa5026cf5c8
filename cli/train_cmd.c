/* attn train / translate / heatmap. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "pictures/pictures.h"



/* ---- attn train ------------------------------------------------------------------------ */
static int on_progress(void *user, const attn_train_progress *p) {
    attn_cli_curve *c = user;
    attn_cli_dp_fault(p->step);
    if (!attn_cli_curve_add(c, p, p->accuracy >= 0, p->accuracy) || c->quiet)
        return attn_cli_stop_requested();
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
    return attn_cli_stop_requested();
}

static const char TRAIN_USAGE[] =
    "usage: attn train dates [options]\n"
    "       attn train charlm [options]\n"
    "       attn train vit [options]\n"
    "       attn train lm --init MODEL --text FILE [options]\n\n"
    "Trains a model (from scratch, or fine-tunes one: lm):\n"
    "  dates    an encoder-decoder Transformer that translates dates written by people\n"
    "           into ISO form\n"
    "  charlm   a character-level GPT on English text\n"
    "  vit      a Vision Transformer that classifies Fashion-MNIST's images of clothes\n"
    "  lm       fine-tunes a llama LLM (GGUF or HF folder) on a text file\n\n"
    "'attn train TASK --help' (dates, charlm, vit, lm) describes a task's options.\n\n"
    "examples:\n"
    "  attn train dates --steps 1000 -o dates-model\n"
    "  attn train charlm --text README.md --steps 200 -o lm\n"
    "  attn train vit -o vit-model\n"
    "  attn train lm --init SmolLM2-135M-Instruct.Q4_1.gguf --text notes.txt --steps 20\n";

static int train_dates(int argc, char **argv);

int attn_cmd_train(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(TRAIN_USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    int (*task)(int, char **) = !strcmp(argv[1], "charlm") ? attn_cmd_charlm_train
                                : !strcmp(argv[1], "lm")   ? attn_cmd_lm_train
                                : !strcmp(argv[1], "vit")  ? attn_cmd_vit_train
                                : !strcmp(argv[1], "dates") ? train_dates
                                                            : NULL;
    if (!task) {
        fprintf(stderr, "attn train: unknown task '%s' (known: dates, charlm, vit, lm)\n", argv[1]);
        return 2;
    }
    /* under mpirun (-DATTN_MPI=ON): data parallel over the ranks (common/train_dp.c) */
    char cmd[32];
    snprintf(cmd, sizeof cmd, "train %s", argv[1]);
    if (attn_cli_dp_init(cmd)) return 1;
    attn_cli_dp_expect_ready(cmd); /* the ranks agree on the settings before training */
    return attn_cli_dp_finish(task(argc - 1, argv + 1));
}

/* argv[0] is "dates" */
static int train_dates(int argc, char **argv) {
    attn_dates_config cfg = attn_dates_defaults();
    const char *out = "dates-model", *resume = NULL;
    long long threads = 0, steps = cfg.steps, batch = cfg.batch, d_model = cfg.d_model,
              heads = cfg.nhead, layers = cfg.num_layers, ff = cfg.dim_feedforward,
              seed = (long long)cfg.seed, eval_n = cfg.eval_n, eval_every = cfg.eval_every;
    double lr = cfg.lr, dropout = cfg.dropout, time_limit = cfg.time_limit_s,
           target = cfg.target_accuracy;
    int quiet = 0, npos, dtype = ATTN_CLI_DTYPE_AUTO;
    attn_cli_train_common tc = {NULL, 1, 500, NULL};
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("out", 'o', &out, "DIR",
                     "where to write model.safetensors, state.safetensors,\n"
                     "log.jsonl and loss.svg (default: dates-model)"),
        ATTN_OPT_STR("output", 0, &out, "DIR", NULL),
        ATTN_OPT_INT("steps", 0, &steps, 0, 100000000, "N", "optimiser steps (default 3000)"),
        ATTN_OPT_INT("batch", 0, &batch, 1, 65536, "N", "examples per step (default 64)"),
        ATTN_OPT_NUM("lr", 0, &lr, 1e-7, 10, "X", "peak learning rate (default 2e-3)"),
        ATTN_OPT_INT("d-model", 0, &d_model, 1, 65536, "N", "model width (default 64)"),
        ATTN_OPT_INT("heads", 0, &heads, 1, 1024, "N", "attention heads (default 4)"),
        ATTN_OPT_INT("layers", 0, &layers, 1, 1024, "N",
                     "encoder layers, and as many decoder layers (default 2)"),
        ATTN_OPT_INT("ff", 0, &ff, 1, 1 << 20, "N", "feed-forward width (default 256)"),
        ATTN_OPT_NUM("dropout", 0, &dropout, 0, 0.99, "X", "dropout probability"),
        ATTN_OPT_INT("seed", 0, &seed, 0, 1LL << 62, "N",
                     "everything random follows from it (default 1)"),
        ATTN_OPT_THREADS(&threads),
        ATTN_OPT_CHOICE("dtype", 0, &dtype, ATTN_CLI_DTYPE_CHOICES, "T", ATTN_CLI_DTYPE_HELP),
        ATTN_OPT_NUM("time-limit", 0, &time_limit, 0, 1e9, "SEC", "stop after this long"),
        ATTN_OPT_NUM("target", 0, &target, 0, 1, "X",
                     "stop once held-out exact match reaches X (e.g. 0.99)"),
        ATTN_OPT_INT("eval-every", 0, &eval_every, 0, 100000000, "N",
                     "evaluate on the held-out dates every N steps (default 250)"),
        ATTN_OPT_INT("eval-n", 0, &eval_n, 0, 3000, "N",
                     "how many held-out dates to evaluate on (default 1000)"),
        ATTN_OPT_STR("resume", 0, &resume, "FILE",
                     "continue from a state.safetensors of the same run"),
        ATTN_OPT_TRAIN_COMMON(&tc, "checkpoint every N steps (default 500) and at the end"),
        ATTN_OPT_FLAG("quiet", 'q', &quiet, "no progress lines on stderr"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "train dates", "attn train dates [options]",
        "Trains an encoder-decoder Transformer to translate dates written by people\n"
        "(\"21 Nov 2026\", \"saturday, november 21, 2026\", \"11/21/26\") into ISO form.\n"
        "The same seed gives the same model whatever --threads is.",
        opts, "'attn train charlm --help': the other task.",
        "attn train dates --steps 1000 -o dates-model\n"
        "attn train dates --resume dates-model/state.safetensors -o dates-model"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    const int rank0 = attn_cli_dp_rank() == 0;
    if (!rank0) quiet = 1; /* rank 0 alone prints progress */
    cfg.steps = steps, cfg.batch = batch, cfg.d_model = d_model, cfg.nhead = heads;
    cfg.num_layers = layers, cfg.dim_feedforward = ff, cfg.seed = (uint64_t)seed;
    cfg.eval_n = (int)eval_n, cfg.eval_every = eval_every, cfg.lr = (float)lr;
    cfg.dropout = (float)dropout, cfg.time_limit_s = time_limit;
    cfg.target_accuracy = (float)target;
    attn_cli_paths paths;
    attn_ctx *ctx;
    if (attn_cli_train_dir("train", out, &paths) ||
        attn_cli_ctx_dtype_resume("train dates", threads, quiet, resume, &dtype, &ctx))
        return 1;
    cfg.dtype = attn_cli_dtype_name(dtype);
    if (attn_cli_dp_open("train dates", ctx, cfg.batch, "batch", &cfg.dp)) {
        attn_ctx_free(ctx);
        return 1;
    }
    cfg.state_path = paths.state;
    cfg.save_every = tc.save_every;
    cfg.accum = (int)tc.accum;
    cfg.log_path = rank0 ? attn_cli_train_log(&tc, &paths) : NULL;
    cfg.tb_dir = rank0 ? attn_cli_train_tb(&tc) : NULL;
    attn_cli_curve c;
    int rc = 0;
    attn_cli_curve_init(&c, quiet);
    if (!quiet)
        fprintf(stderr, "training dates: d_model %lld, %lld heads, %lld+%lld layers, ff %lld, batch %lld, "
                    "%lld steps, %lld threads, %s products\n",
            (long long)cfg.d_model, (long long)cfg.nhead, (long long)cfg.num_layers,
            (long long)cfg.num_layers, (long long)cfg.dim_feedforward, (long long)cfg.batch,
            (long long)cfg.steps, (long long)attn_ctx_threads(ctx), cfg.dtype);
    /* data parallel: the ranks agree on every setting that changes the result (common/train_dp.c;
     * the initial weights follow from them, or from --resume's file; the first step compares
     * them too) */
    attn_cli_dp_note("--steps", "%lld", steps);
    attn_cli_dp_note("--lr", "%.17g", lr);
    attn_cli_dp_note("--d-model", "%lld", d_model);
    attn_cli_dp_note("--heads", "%lld", heads);
    attn_cli_dp_note("--layers", "%lld", layers);
    attn_cli_dp_note("--ff", "%lld", ff);
    attn_cli_dp_note("--dropout", "%.17g", dropout);
    attn_cli_dp_note("--seed", "%lld", seed);
    attn_cli_dp_note("--dtype", "%s", cfg.dtype);
    attn_cli_dp_note("--time-limit", "%.17g", time_limit);
    attn_cli_dp_note("--target", "%.17g", target);
    attn_cli_dp_note("--eval-every", "%lld", eval_every);
    attn_cli_dp_note("--eval-n", "%lld", eval_n);
    attn_cli_dp_note("--accum", "%lld", tc.accum);
    attn_cli_dp_note("--save-every", "%lld", tc.save_every);
    if (resume ? !attn_cli_dp_note_file("train dates", "--resume", resume)
               : (attn_cli_dp_note("--resume", "(none)"), 0)) {
        rc = 1;
        goto out;
    }
    if (attn_cli_dp_ready("train dates", 1)) {
        rc = 1;
        goto out;
    }
    attn_module *m = NULL;
    attn_cli_stop_on_signals();
    attn_status st = attn_dates_train(ctx, &cfg, resume, on_progress, &c, &m);
    if (c.tty && !quiet) fputc('\n', stderr);
    if (st != ATTN_OK) {
        rc = attn_cli_dp_fail(ctx, "train dates", st);
        goto out;
    }
    if (!rank0) { /* rank 0 writes the model and the pictures */
        attn_module_free(m);
        goto out;
    }
    st = attn_dates_save(ctx, m, &cfg, paths.model);
    if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, "train", st);
        attn_module_free(m);
        goto out;
    }
    const int chart = attn_cli_train_chart("train dates", cfg.log_path, paths.svg);
    if (chart > 0) rc = 1;
    if (attn_cli_stop_requested())
        printf("stopped by a signal: continue with --resume %s -o %s\n", paths.state, out);
    printf("model: %s\nstate: %s\nloss curve: %s\n", paths.model, paths.state,
           chart == 0 ? paths.svg : "(none: no log)");
    if (cfg.log_path) printf("log: %s\n", cfg.log_path);
    static const char *examples[] = {"21 Nov 2026", "saturday, november 21, 2026", "11/21/26",
                                     "the 3rd of may 1999"};
    for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) {
        char iso[32];
        if (attn_dates_translate(ctx, m, &cfg, examples[i], iso, sizeof iso, NULL) == ATTN_OK)
            printf("  %-30s -> %s\n", examples[i], iso);
    }
    attn_module_free(m);
out:
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn translate -------------------------------------------------------------------- */
int attn_cmd_translate(int argc, char **argv) {
    const char *model = NULL;
    long long threads = 0;
    int npos;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("model", 0, &model, "FILE",
                     "a model.safetensors written by 'attn train dates' (required)"),
        ATTN_OPT_THREADS(&threads), ATTN_OPT_END};
    const attn_cli_spec spec = {
        "translate", "attn translate --model FILE [options] TEXT...",
        "Translates each TEXT, a date as people write it, into ISO form (YYYY-MM-DD).\n"
        "A TEXT that starts with '-' goes after '--'.",
        opts, NULL,
        "attn translate --model dates-model/model.safetensors \"21 Nov 2026\" \"the 3rd of may "
        "1999\""};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (!model) return attn_cli_usage_error(&spec, "--model FILE is required");
    if (!npos) return attn_cli_usage_error(&spec, "no TEXT to translate");
    attn_ctx *ctx;
    if (attn_cli_ctx("translate", threads, 0, &ctx)) return 1;
    attn_dates_config cfg;
    attn_module *m;
    attn_status st = attn_dates_load(ctx, model, &cfg, &m);
    if (st != ATTN_OK) {
        int rc = attn_cli_fail(ctx, "translate", st);
        attn_ctx_free(ctx);
        return rc;
    }
    int rc = 0;
    for (int i = 1; i <= npos && !ferror(stdout); i++) {
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
/* Copies the file at path to standard output; 0 on failure (message printed). */
static int copy_to_stdout(const char *cmd, const char *path) {
    char *data;
    size_t len;
    if (!attn_cli_read_all(cmd, path, (int64_t)1 << 40, "its own output", &data, &len)) return 0;
    size_t w = attn_cli_write_stdout(data, len);
    free(data);
    return w == len; /* a write error is reported by main (attn_cli_close_stdout) */
}

int attn_cmd_heatmap(int argc, char **argv) {
    const char *model = NULL, *out = "heatmap.png";
    long long threads = 0;
    int npos;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("model", 0, &model, "FILE",
                     "a model.safetensors written by 'attn train dates' (required)"),
        ATTN_OPT_STR("output", 'o', &out, "OUT.png",
                     "where to write the picture (default heatmap.png; '-': standard\n"
                     "output)"),
        ATTN_OPT_THREADS(&threads), ATTN_OPT_END};
    const attn_cli_spec spec = {
        "heatmap", "attn heatmap --model FILE [-o OUT.png] [options] TEXT",
        "Translates TEXT and draws the cross-attention weights (last decoder layer, mean\n"
        "over heads) as a PNG: one row per output character, one column per input one.",
        opts, NULL,
        "attn heatmap --model dates-model/model.safetensors -o heat.png \"21 Nov 2026\"\n"
        "attn heatmap --model dates-model/model.safetensors -o - \"21 Nov 2026\" > heat.png"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (!model) return attn_cli_usage_error(&spec, "--model FILE is required");
    if (npos != 1) return attn_cli_usage_error(&spec, "needs exactly one TEXT");
    const char *text = argv[1];
    attn_ctx *ctx;
    if (attn_cli_ctx("heatmap", threads, 0, &ctx)) return 1;
    attn_dates_config cfg;
    attn_module *m = NULL;
    int rc = 0, to_stdout = !strcmp(out, "-"), tmp_fd = -1;
    char tmp[4096];
    if (to_stdout) { /* the picture is written to a temporary file, then copied */
        const char *dir = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/attn-heatmap-XXXXXX", dir && *dir ? dir : "/tmp");
        if ((tmp_fd = mkstemp(tmp)) < 0) {
            fprintf(stderr, "attn heatmap: cannot create a temporary file %s: %s\n", tmp,
                    strerror(errno));
            attn_ctx_free(ctx);
            return 1;
        }
        close(tmp_fd);
    }
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
        for (int r2 = 0; r2 < 11; r2++) {
            if ((size_t)r2 < niso) snprintf(rowbuf[r2], sizeof rowbuf[r2], "%c", iso[r2]);
            else snprintf(rowbuf[r2], sizeof rowbuf[r2], "%s", (size_t)r2 == niso ? "<eos>" : "");
            rows[r2] = rowbuf[r2];
        }
        for (size_t j = 0; j < n && j < 64; j++) {
            snprintf(colbuf[j], sizeof colbuf[j], "%c", text[j]);
            cols[j] = colbuf[j];
        }
        int nrows = (int)(niso + 1 < 11 ? niso + 1 : 11);
        char title[160];
        snprintf(title, sizeof title, "\"%s\" -> %s", text, iso);
        st = attn_cli_heatmap_png(ctx, to_stdout ? tmp : out, cross, nrows, (int)n, rows,
                                  cols, title);
        if (st == ATTN_OK && to_stdout) {
            if (!copy_to_stdout("heatmap", tmp)) rc = 1;
            fprintf(stderr, "%s -> %s\nheatmap: standard output\n", text, iso);
        } else if (st == ATTN_OK) {
            printf("%s -> %s\nheatmap: %s\n", text, iso, out);
        }
    }
    if (!cross) {
        fprintf(stderr, "attn heatmap: out of memory\n");
        rc = 1;
    } else if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, "heatmap", st);
    }
    if (to_stdout) unlink(tmp);
    free(cross);
    attn_module_free(m);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn demo ------------------------------------------------------------------------- */
/* Trains the dates model briefly, translates the seeds' examples and draws the heatmap. */
int attn_cmd_demo(int argc, char **argv) {
    const char *out = "attn-demo";
    long long steps = 1200, threads = 0, eval_n = 1000;
    int quiet = 0, npos;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("out", 'o', &out, "DIR",
                     "where to write the model, loss curve and heatmap (default\n"
                     "attn-demo)"),
        ATTN_OPT_STR("output", 0, &out, "DIR", NULL),
        ATTN_OPT_INT("steps", 0, &steps, 1, 1000000, "N",
                     "at most this many steps (default 1200; it stops at 99%)"),
        ATTN_OPT_INT("eval-n", 0, &eval_n, 1, 3000, "N",
                     "held-out dates translated at each evaluation (default 1000;\n"
                     "fewer: a quicker, rougher score, e.g. under an emulator)"),
        ATTN_OPT_THREADS(&threads),
        ATTN_OPT_FLAG("quiet", 'q', &quiet, "no training progress lines on stderr"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "demo", "attn demo [options]",
        "Trains a small Transformer to translate dates into ISO form (a few minutes),\n"
        "translates the seeds' examples and draws the cross-attention as a heatmap.",
        opts, NULL, "attn demo\nattn demo --steps 400 -o /tmp/demo"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    char s_steps[32], s_threads[32], s_eval_n[32], model[4096], png[4096];
    snprintf(s_steps, sizeof s_steps, "%lld", steps);
    snprintf(s_threads, sizeof s_threads, "%lld", threads);
    snprintf(s_eval_n, sizeof s_eval_n, "%lld", eval_n);
    char *targv[] = {"train", "dates", "--out", (char *)out, "--steps", s_steps, "--threads",
                     s_threads, "--eval-every", "200", "--eval-n", s_eval_n, "--target", "0.99",
                     quiet ? "--quiet" : "--", NULL};
    printf("== 1. Train an encoder-decoder Transformer to read dates (stops at 99%% held-out "
           "exact match)\n");
    fflush(stdout);
    int rc = attn_cmd_train(15, targv);
    if (rc) return rc;
    snprintf(model, sizeof model, "%s/model.safetensors", out);
    snprintf(png, sizeof png, "%s/heatmap.png", out);
    printf("\n== 2. Translate dates it has never seen\n");
    fflush(stdout);
    char *xargv[] = {"translate", "--model", model, "--threads", s_threads, "21 Nov 2026",
                     "saturday, november 21, 2026", "the 3rd of may 1999", "Jan. 5, 1987",
                     "2001/09/30", NULL};
    rc = attn_cmd_translate(10, xargv);
    if (rc) return rc;
    printf("\n== 3. Where did it look?  Cross-attention of one translation as a heatmap\n");
    fflush(stdout);
    char *hargv[] = {"heatmap", "--model", model, "-o", png, "saturday, november 21, 2026",
                     NULL};
    return attn_cmd_heatmap(6, hargv);
}
