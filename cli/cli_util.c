/* Helpers shared by the subcommands: error reporting and strict number parsing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

int attn_cli_fail(attn_ctx *ctx, const char *cmd, attn_status st) {
    fprintf(stderr, "attn %s: %s (%s)\n", cmd, attn_ctx_errmsg(ctx), attn_status_name(st));
    return 1;
}

int attn_cli_parse_i64(const char *s, long long lo, long long hi, long long *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || end == s || x < lo || x > hi) return 0;
    *v = x;
    return 1;
}

int attn_cli_parse_f(const char *s, double lo, double hi, double *v) {
    char *end;
    double x = strtod(s, &end);
    if (*end || end == s || !(x >= lo && x <= hi)) return 0;
    *v = x;
    return 1;
}

void attn_cli_fmt_time(double s, char *b, size_t n) {
    if (s < 0 || s > 1e7) s = 0;
    int m = (int)(s / 60), sec = (int)s % 60;
    snprintf(b, n, "%d:%02d", m, sec);
}

int attn_cli_train_setup(const char *cmd, const char *out, int threads, attn_cli_paths *paths,
                         attn_ctx **ctx) {
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "attn %s: cannot create %s: %s\n", cmd, out, strerror(errno));
        return 1;
    }
    snprintf(paths->model, sizeof paths->model, "%s/model.safetensors", out);
    snprintf(paths->state, sizeof paths->state, "%s/state.safetensors", out);
    snprintf(paths->svg, sizeof paths->svg, "%s/loss.svg", out);
    attn_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.threads = threads;
    if (attn_ctx_create(&cp, ctx) != ATTN_OK) {
        fprintf(stderr, "attn %s: cannot create a context\n", cmd);
        return 1;
    }
    return 0;
}

int attn_cli_curve_init(attn_cli_curve *c, const char *cmd, int64_t steps) {
    memset(c, 0, sizeof *c);
    c->cap = (int)(steps < 1000000 ? steps + 1 : 1000000);
    c->step = calloc((size_t)c->cap, sizeof(float));
    c->train = calloc((size_t)c->cap, sizeof(float));
    c->vstep = calloc((size_t)c->cap, sizeof(float));
    c->val = calloc((size_t)c->cap, sizeof(float));
    c->tty = isatty(2);
    c->last_print = -1;
    if (c->step && c->train && c->vstep && c->val) return 0;
    fprintf(stderr, "attn %s: out of memory\n", cmd);
    return 1;
}

void attn_cli_curve_free(attn_cli_curve *c) {
    free(c->step), free(c->train), free(c->vstep), free(c->val);
    memset(c, 0, sizeof *c);
}

int attn_cli_curve_add(attn_cli_curve *c, const attn_train_progress *p, float train, int has_val,
                       float val) {
    if (c->n < c->cap) {
        c->step[c->n] = (float)p->step;
        c->train[c->n++] = train;
    }
    if (has_val && c->nv < c->cap) {
        c->vstep[c->nv] = (float)p->step;
        c->val[c->nv++] = val;
    }
    if (!has_val && p->step != p->steps && p->elapsed_s - c->last_print < 1.0) return 0;
    c->last_print = p->elapsed_s;
    return 1;
}
