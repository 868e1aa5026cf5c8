/* One option parser for every command (cli.h: attn_cli_parse): a table per command, long and
 * short options, "--name=value" and "--name value", "--" ending the options, and errors that
 * name the option. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ---- strict numbers: the whole string, in [lo, hi] ---- */
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


static void print_lines(FILE *f, const char *first, const char *rest, const char *text) {
    const char *p = text;
    for (int i = 0; *p; i++) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(f, "%s%.*s\n", i ? rest : first, n, p);
        p += n + (nl != NULL);
    }
}

static void print_usage_lines(const attn_cli_spec *spec, FILE *f) {
    print_lines(f, "usage: ", "       ", spec->usage);
}

#define HELP_COL 26

/* "  -t, --threads N" or "      --json", padded to HELP_COL; the help's later lines indented */
static void print_opt(FILE *f, const attn_cli_opt *o) {
    char head[128];
    int n = snprintf(head, sizeof head, "  %c%c%s--%s%s%s", o->shrt ? '-' : ' ',
                     o->shrt ? o->shrt : ' ', o->shrt ? ", " : "  ", o->name,
                     o->arg && o->kind != ATTN_CLI_FLAG ? " " : "",
                     o->arg && o->kind != ATTN_CLI_FLAG ? o->arg : "");
    if (n < 0) return;
    fputs(head, f);
    if (n + 2 > HELP_COL) fprintf(f, "\n%*s", HELP_COL, "");
    else fprintf(f, "%*s", HELP_COL - n, "");
    const char *p = o->help;
    for (int i = 0; *p; i++) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(f, "%*s%.*s\n", i ? HELP_COL : 0, "", len, p);
        p += len + (nl != NULL);
    }
}

void attn_cli_help(const attn_cli_spec *spec, FILE *f) {
    print_usage_lines(spec, f);
    if (spec->about) fprintf(f, "\n%s\n", spec->about);
    fprintf(f, "\noptions:\n");
    for (const attn_cli_opt *o = spec->opts; o && o->name; o++)
        if (o->help) print_opt(f, o);
    attn_cli_opt h = ATTN_OPT_FLAG("help", 'h', NULL, "print this help and exit");
    print_opt(f, &h);
    if (spec->more) fprintf(f, "\n%s\n", spec->more);
    if (spec->examples) {
        fprintf(f, "\nexamples:\n");
        print_lines(f, "  ", "  ", spec->examples);
    }
}

int attn_cli_usage_error(const attn_cli_spec *spec, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "attn %s: ", spec->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    print_usage_lines(spec, stderr);
    fprintf(stderr, "'attn %s --help' describes the options.\n", spec->cmd);
    return 2;
}

/* Stores val (as given for option `shown`) into o->dst; 2 after printing a usage error. */
static int store(const attn_cli_spec *spec, const attn_cli_opt *o, const char *shown,
                 const char *val) {
    switch (o->kind) {
    case ATTN_CLI_FLAG: *(int *)o->dst = o->lo ? (int)o->lo : 1; return 0;
    case ATTN_CLI_STR: *(const char **)o->dst = val; return 0;
    case ATTN_CLI_INT:
        if (!attn_cli_parse_i64(val, o->lo, o->hi, (long long *)o->dst))
            return attn_cli_usage_error(spec, "%s: expected an integer in [%lld, %lld], got '%s'",
                                        shown, o->lo, o->hi, val);
        return 0;
    case ATTN_CLI_NUM:
        if (!attn_cli_parse_f(val, o->flo, o->fhi, (double *)o->dst))
            return attn_cli_usage_error(spec, "%s: expected a number in [%g, %g], got '%s'",
                                        shown, o->flo, o->fhi, val);
        return 0;
    case ATTN_CLI_CHOICE: {
        const char *p = o->choices;
        size_t vl = strlen(val);
        for (int i = 0; *p; i++) {
            const char *bar = strchr(p, '|');
            size_t n = bar ? (size_t)(bar - p) : strlen(p);
            if (n == vl && !strncmp(p, val, n)) {
                *(int *)o->dst = i;
                return 0;
            }
            p += n + (bar != NULL);
        }
        char list[256];
        snprintf(list, sizeof list, "%s", o->choices);
        for (char *c = list; *c; c++)
            if (*c == '|') *c = ',';
        /* "a,b,c" -> "a, b, c" */
        char pretty[512];
        size_t k = 0;
        for (const char *c = list; *c && k + 3 < sizeof pretty; c++) {
            pretty[k++] = *c;
            if (*c == ',') pretty[k++] = ' ';
        }
        pretty[k] = 0;
        return attn_cli_usage_error(spec, "%s: expected one of %s, got '%s'", shown, pretty,
                                    val);
    }
    }
    return 2;
}

int attn_cli_parse(const attn_cli_spec *spec, int argc, char **argv, int *npos) {
    *npos = 0;
    char **pos = malloc(sizeof *pos * (size_t)(argc > 0 ? argc : 1));
    if (!pos) {
        fprintf(stderr, "attn %s: out of memory\n", spec->cmd);
        return 1;
    }
    int n = 0, rc = ATTN_CLI_GO;
    for (int i = 1; i < argc && rc == ATTN_CLI_GO; i++) {
        char *a = argv[i];
        if (a[0] != '-' || !a[1]) { /* an argument, "-" included */
            pos[n++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            for (i++; i < argc; i++) pos[n++] = argv[i];
            break;
        }
        if (a[1] == '-') { /* --name, --name=value */
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t nl = eq ? (size_t)(eq - name) : strlen(name);
            if (nl == 4 && !strncmp(name, "help", 4) && !eq) {
                attn_cli_help(spec, stdout);
                rc = 0;
                break;
            }
            const attn_cli_opt *o = spec->opts;
            while (o && o->name && !(strlen(o->name) == nl && !strncmp(o->name, name, nl))) o++;
            char shown[96];
            snprintf(shown, sizeof shown, "--%.*s", (int)(nl < 80 ? nl : 80), name);
            if (!o || !o->name) {
                rc = attn_cli_usage_error(spec, "unknown option '%s'", shown);
            } else if (o->kind == ATTN_CLI_FLAG) {
                if (eq) rc = attn_cli_usage_error(spec, "option '%s' takes no value", shown);
                else rc = store(spec, o, shown, NULL) ? 2 : ATTN_CLI_GO;
            } else {
                const char *val = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
                if (!val) rc = attn_cli_usage_error(spec, "option '%s' needs a value", shown);
                else rc = store(spec, o, shown, val) ? 2 : ATTN_CLI_GO;
            }
            continue;
        }
        /* -x, -xVALUE, -x VALUE, bundled flags -qj */
        for (const char *c = a + 1; *c && rc == ATTN_CLI_GO; c++) {
            char shown[3] = {'-', *c, 0};
            if (*c == 'h') {
                attn_cli_help(spec, stdout);
                rc = 0;
                break;
            }
            const attn_cli_opt *o = spec->opts;
            while (o && o->name && o->shrt != *c) o++;
            if (!o || !o->name) {
                if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
                    rc = attn_cli_usage_error(spec, "unknown option in '%s'", a);
                else
                    rc = attn_cli_usage_error(spec, "unknown option '%s'", shown);
            } else if (o->kind == ATTN_CLI_FLAG) {
                rc = store(spec, o, shown, NULL) ? 2 : ATTN_CLI_GO;
            } else {
                const char *val = c[1] ? c + 1 : i + 1 < argc ? argv[++i] : NULL;
                if (!val) rc = attn_cli_usage_error(spec, "option '%s' needs a value", shown);
                else rc = store(spec, o, shown, val) ? 2 : ATTN_CLI_GO;
                break;
            }
        }
    }
    if (rc == ATTN_CLI_GO) {
        for (int k = 0; k < n; k++) argv[1 + k] = pos[k];
        *npos = n;
    }
    free(pos);
    return rc;
}
