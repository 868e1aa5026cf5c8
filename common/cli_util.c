/* Helpers shared by the subcommands: contexts (threads shared among the ranks of a
 * data-parallel run), training output folders, signals and the loss curve.  Error reporting is
 * in cli_io.c, strict number parsing in cli_opt.c. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

int attn_cli_threads(long long threads) {
    if (threads <= 0 && attn_cli_dp_local() > 1) {
        /* ranks of a data-parallel run (attn train under mpirun): the cores this rank is bound
         * to, else the node's shared among its ranks */
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        int cpus = attn_cpu_count(), cores = attn_cpu_default_threads();
        int t = online > 0 && cpus < online ? cores : cores / attn_cli_dp_local();
        return t < 1 ? 1 : t;
    }
    return threads <= 0 ? attn_cpu_default_threads() : threads > 1024 ? 1024 : (int)threads;
}

int attn_cli_ctx(const char *cmd, long long threads, unsigned flags, attn_ctx **ctx) {
    attn_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.threads = attn_cli_threads(threads);
    cp.flags = flags;
    *ctx = NULL;
    attn_status st = attn_ctx_create(&cp, ctx);
    if (st != ATTN_OK) {
        fprintf(stderr, "attn %s: cannot create a context (%s)\n", cmd, attn_status_name(st));
        return 1;
    }
    return 0;
}

const char *attn_cli_dtype_name(int dtype) {
    return dtype == ATTN_CLI_DTYPE_BF16 ? "bf16" : dtype == ATTN_CLI_DTYPE_F32 ? "f32" : "auto";
}

int attn_cli_ctx_dtype(const char *cmd, long long threads, int quiet, int *dtype, attn_ctx **ctx) {
    if (attn_cli_ctx(cmd, threads, ATTN_CTX_AUTO_MATMUL, ctx)) return 1;
    const int best = (attn_ctx_flags(*ctx) & ATTN_CTX_BF16_MATMUL) ? ATTN_CLI_DTYPE_BF16
                                                                   : ATTN_CLI_DTYPE_F32;
    if (*dtype == ATTN_CLI_DTYPE_AUTO) {
        *dtype = best;
        return 0;
    }
    attn_ctx_set_matmul(*ctx, *dtype == ATTN_CLI_DTYPE_BF16 ? ATTN_CTX_BF16_MATMUL : 0u);
    if (*dtype == ATTN_CLI_DTYPE_BF16 && best == ATTN_CLI_DTYPE_F32 && !quiet)
        fprintf(stderr, "attn %s: note: bf16 products are slower than float on this CPU (attn "
                        "info --cpu says why); --dtype auto would use f32 here\n", cmd);
    return 0;
}

int attn_cli_dtype_resume(attn_ctx *ctx, const attn_st *rs, int asked, int *dtype) {
    const char *v = attn_st_meta(rs, "train.dtype");
    if (asked != ATTN_CLI_DTYPE_AUTO || !v) return 0;
    const int was = !strcmp(v, "bf16") ? ATTN_CLI_DTYPE_BF16
                    : !strcmp(v, "f32") ? ATTN_CLI_DTYPE_F32
                                        : *dtype; /* unknown: the settings check reports it */
    if (was == *dtype) return 0;
    *dtype = was;
    attn_ctx_set_matmul(ctx, was == ATTN_CLI_DTYPE_BF16 ? ATTN_CTX_BF16_MATMUL : 0u);
    return 1;
}

int attn_cli_ctx_dtype_resume(const char *cmd, long long threads, int quiet, const char *resume,
                              int *dtype, attn_ctx **ctx) {
    const int asked = *dtype;
    if (attn_cli_ctx_dtype(cmd, threads, quiet, dtype, ctx)) return 1;
    attn_st *rs = NULL;
    if (resume && attn_st_read_file(*ctx, resume, &rs) == ATTN_OK)
        attn_cli_dtype_resume(*ctx, rs, asked, dtype);
    attn_st_free(rs);
    return 0;
}

void attn_cli_fmt_time(double s, char *b, size_t n) {
    if (s < 0 || s > 1e7) s = 0;
    int m = (int)(s / 60), sec = (int)s % 60;
    snprintf(b, n, "%d:%02d", m, sec);
}

int attn_cli_train_dir(const char *cmd, const char *out, attn_cli_paths *paths) {
    if (!out[0]) {
        fprintf(stderr, "attn %s: the output folder name is empty\n", cmd);
        return 1;
    }
    if (strlen(out) > sizeof paths->model - 32) {
        fprintf(stderr, "attn %s: the output folder name is too long\n", cmd);
        return 1;
    }
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "attn %s: cannot create %s: %s\n", cmd, out, strerror(errno));
        return 1;
    }
    struct stat sb;
    if (stat(out, &sb) != 0) {
        fprintf(stderr, "attn %s: cannot use %s: %s\n", cmd, out, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "attn %s: %s exists and is not a directory (the output folder)\n", cmd,
                out);
        return 1;
    }
    /* the checkpoints are written into it: find out now rather than at the first save */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.attn-write-test-XXXXXX", out);
    int fd = mkstemp(probe);
    if (fd < 0) {
        fprintf(stderr, "attn %s: cannot write in %s: %s\n", cmd, out, strerror(errno));
        return 1;
    }
    close(fd);
    unlink(probe);
    snprintf(paths->model, sizeof paths->model, "%s/model.safetensors", out);
    snprintf(paths->state, sizeof paths->state, "%s/state.safetensors", out);
    snprintf(paths->svg, sizeof paths->svg, "%s/loss.svg", out);
    snprintf(paths->log, sizeof paths->log, "%s/log.jsonl", out);
    return 0;
}

const char *attn_cli_train_log(const attn_cli_train_common *t, const attn_cli_paths *paths) {
    if (t->log && !strcmp(t->log, "-")) return NULL;
    return t->log ? t->log : paths->log;
}

const char *attn_cli_train_tb(const attn_cli_train_common *t) {
    if (t->tensorboard) (void)mkdir(t->tensorboard, 0777); /* exists, or the library says why */
    return t->tensorboard;
}

static volatile sig_atomic_t stop_flag;
static void on_stop_signal(int sig) {
    static const char msg[] = "\nattn: stopping after this step, with a checkpoint (again: "
                              "quit now)\n";
    stop_flag = 1;
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    signal(sig, SIG_DFL); /* a second one ends the process */
}
void attn_cli_stop_on_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}
int attn_cli_stop_requested(void) { return stop_flag != 0; }

void attn_cli_curve_init(attn_cli_curve *c, int quiet) {
    memset(c, 0, sizeof *c);
    c->tty = isatty(2);
    c->quiet = quiet;
    c->last_print = -1;
}

int attn_cli_curve_add(attn_cli_curve *c, const attn_train_progress *p, int has_val, float val) {
    if (has_val) c->val = val, c->nv++;
    if (!has_val && p->step != p->steps && p->elapsed_s - c->last_print < 1.0) return 0;
    c->last_print = p->elapsed_s;
    return 1;
}

/* ---- a training run's settings, checked on --resume ------------------------------------ */

int attn_cli_llm_load(const char *cmd, attn_ctx *ctx, const char *path, unsigned flags, int act,
                      attn_llm **m) {
    attn_status st = attn_llm_load(ctx, path, flags, m);
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, cmd, st);
        return 0;
    }
    if (act) attn_llm_set_activations(*m, (attn_qact)act); /* ATTN_OPT_ACT's order */
    if (!attn_llm_tokenizer(*m)) {
        fprintf(stderr, "attn %s: %s has no tokenizer (tokenizer.json, or tokenizer.ggml.* "
                        "keys)\n", cmd, path);
        attn_llm_free(*m), *m = NULL;
        return 0;
    }
    return 1;
}
