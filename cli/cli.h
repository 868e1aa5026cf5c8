/* The attn program: the only code that prints or exits.  Each subcommand is a function
 * `int attn_cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand name) returning the
 * process exit status: 0 success, 1 failure, 2 usage error. */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H
#include <stdio.h>

#include "attn.h"

int attn_cmd_eval(int argc, char **argv);        /* cli/eval_cmd.c */
int attn_cmd_walkthrough(int argc, char **argv); /* cli/walkthrough.c */
int attn_cmd_info(int argc, char **argv);        /* cli/eval_cmd.c: list a safetensors file */
int attn_cmd_train(int argc, char **argv);       /* cli/train_cmd.c */
int attn_cmd_translate(int argc, char **argv);   /* cli/train_cmd.c */
int attn_cmd_heatmap(int argc, char **argv);     /* cli/train_cmd.c */
/* `attn train charlm ...`: argv[0] is "charlm" (cli/charlm_cmd.c) */
int attn_cmd_charlm_train(int argc, char **argv);
int attn_cmd_generate(int argc, char **argv);    /* cli/charlm_cmd.c */
int attn_cmd_demo(int argc, char **argv);        /* cli/train_cmd.c */
int attn_cmd_embed(int argc, char **argv);       /* cli/embed_cmd.c */
int attn_cmd_similar(int argc, char **argv);     /* cli/embed_cmd.c */
int attn_cmd_bench(int argc, char **argv);       /* cli/bench_cmd.c */

/* cli/cli_util.c */
#include <stddef.h>
/* Prints "attn CMD: message (STATUS)" to stderr; returns 1. */
int attn_cli_fail(attn_ctx *ctx, const char *cmd, attn_status st);
/* Whole-string decimal parse within [lo, hi]; 1 on success. */
int attn_cli_parse_i64(const char *s, long long lo, long long hi, long long *v);
int attn_cli_parse_f(const char *s, double lo, double hi, double *v);
/* "m:ss" */
void attn_cli_fmt_time(double s, char *b, size_t n);

/* A training run's loss curve for the SVG plot and the pacing of its progress lines: `train`
 * per step, `val` at each validation. */
typedef struct attn_cli_curve {
    float *step, *train, *vstep, *val;
    int n, nv, cap, tty;
    double last_print;
} attn_cli_curve;
/* Room for steps + 1 points; 1 (after printing) when out of memory. */
int attn_cli_curve_init(attn_cli_curve *c, const char *cmd, int64_t steps);
void attn_cli_curve_free(attn_cli_curve *c);
/* Records step p->step (train value; val when has_val) and says whether to print a progress
 * line now: at a validation, at the last step, or a second after the previous line. */
int attn_cli_curve_add(attn_cli_curve *c, const attn_train_progress *p, float train, int has_val,
                       float val);

/* A training command's output folder (created if missing), its file names and a context with
 * `threads` threads.  Prints the problem and returns 1 on failure, else 0. */
typedef struct attn_cli_paths {
    char model[4096], state[4096], svg[4096];
} attn_cli_paths;
int attn_cli_train_setup(const char *cmd, const char *out, int threads, attn_cli_paths *paths,
                         attn_ctx **ctx);

/* Option loops: `a` is the option, `val` the next argument (or NULL) and `i` the index.
 * ATTN_CLI_NEED_VAL consumes the value or fails with a usage error (exit 2); ATTN_CLI_BAD
 * reports a value that does not parse. */
#define ATTN_CLI_NEED_VAL(cmd)                                                               \
    if (!val) {                                                                              \
        fprintf(stderr, "attn %s: %s needs a value\n", cmd, a);                              \
        return 2;                                                                            \
    }                                                                                        \
    i++;
#define ATTN_CLI_BAD(cmd, what)                                                              \
    do {                                                                                     \
        fprintf(stderr, "attn %s: bad value '%s' for %s\n", cmd, val, what);                 \
        return 2;                                                                            \
    } while (0)

#endif
