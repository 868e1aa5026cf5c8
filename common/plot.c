/* Training logs (JSON Lines, one object per line) as charts in SVG or PNG, or the merged series
 * as CSV: attn plot, and the loss.svg of every attn train TASK (its own log drawn the same way).
 *
 * A line counts when it is a JSON object with a numeric "step"; it may carry elapsed_s, loss,
 * lr, grad_norm, items_per_s, unit (a string), task (a string) and eval_* numbers; other keys
 * are ignored, and so are lines that are not objects.  A step logged twice (a resumed run logs
 * again the steps after its checkpoint) is taken from its later line.  NaN and infinities (as
 * Python writes them: NaN, Infinity, -Infinity) and null read as missing values, never drawn.
 *
 * Bounds: a log of at most PLOT_MAX_BYTES and PLOT_MAX_LINES lines; a line longer than
 * PLOT_MAX_LINE bytes is skipped (with a note naming it); at most PLOT_MAX_KEYS distinct eval_*
 * keys per log.  Memory is proportional to the lines kept (about 60 bytes each).
 *
 * The lines are parsed by the library's JSON pull parser (src/io/json.h), which this file
 * alone of the program includes (CMakeLists.txt gives it src/core and src/io). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/stat.h>

#include "cli.h"
#include "draw.h" /* common/pictures: the chart as bytes, for -o - */
#include "json.h"

#define PLOT_MAX_BYTES ((int64_t)1 << 30) /* 1 GiB */
#define PLOT_MAX_LINES 10000000
#define PLOT_MAX_LINE 65536
#define PLOT_MAX_KEYS 16
#define PLOT_MAX_KEY 48 /* bytes of an eval_* key */
#define PLOT_MAX_LABEL ATTN_CLI_PLOT_MAX_LABEL

/* "attn CMD: " and the message, on stderr */
static void perr(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "attn %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* One logged step. */
typedef struct rec {
    double step, t, loss, lr, gn, ips;
    uint32_t seq; /* line order, for "the later line wins" */
    uint32_t ev0; /* its eval values: ev[ev0, ev0 + nev) */
    uint32_t nev;
} rec;

typedef struct evv {
    uint32_t key; /* index into run.keys */
    double v;
} evv;

typedef struct run {
    const char *path;
    char label[PLOT_MAX_LABEL + 1];
    rec *r;
    size_t n, cap;
    evv *ev;
    size_t nev, evcap;
    char keys[PLOT_MAX_KEYS][PLOT_MAX_KEY + 1];
    int nkeys;
    char unit[32], task[32];
    int unit_mixed, task_mixed;
    /* what was skipped, for the notes */
    size_t bad, longl, replaced, extra_keys;
    uint64_t first_bad, first_long;
} run;

/* Growing arrays: doubles the capacity; 0 on overflow or out of memory. */
static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) {
        if (nc > SIZE_MAX / 2) return 0;
        nc *= 2;
    }
    if (nc > SIZE_MAX / elem) return 0;
    void *q = realloc(*p, nc * elem);
    if (!q) return 0;
    *p = q;
    *cap = nc;
    return 1;
}

static int word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.';
}

/* Copies in[0, n) to out with the non-finite words Python's json writes (NaN, Infinity,
 * -Infinity; also nan, inf) outside strings turned into null.  out has room for 2 n + 1. */
static size_t fix_nonfinite(const char *in, size_t n, char *out) {
    static const char *const words[] = {"-Infinity", "+Infinity", "Infinity", "-NaN", "NaN",
                                        "-nan", "nan", "-inf", "+inf", "inf", "-Inf", "Inf"};
    size_t o = 0;
    int str = 0, esc = 0;
    for (size_t i = 0; i < n;) {
        char c = in[i];
        if (str) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') str = 0;
            out[o++] = c, i++;
            continue;
        }
        if (c == '"') {
            str = 1;
            out[o++] = c, i++;
            continue;
        }
        int done = 0;
        if (strchr("+-NnIi", c) && (i == 0 || !word_char(in[i - 1]))) {
            for (size_t w = 0; w < sizeof words / sizeof words[0] && !done; w++) {
                size_t k = strlen(words[w]);
                if (k > n - i || memcmp(in + i, words[w], k)) continue;
                if (i + k < n && word_char(in[i + k])) continue;
                memcpy(out + o, "null", 4);
                o += 4, i += k, done = 1;
            }
        }
        if (!done) out[o++] = c, i++;
    }
    out[o] = 0;
    return o;
}

static int key_is(const char *key, size_t klen, const char *name) {
    return klen == strlen(name) && !memcmp(key, name, klen);
}

/* A short string value (unit, task): printable ASCII kept, the rest '?'. */
static void keep_str(char *dst, size_t cap, int *mixed, const char *s, size_t len) {
    char tmp[32];
    size_t n = len < sizeof tmp - 1 ? len : sizeof tmp - 1;
    for (size_t i = 0; i < n; i++) tmp[i] = s[i] >= 32 && s[i] < 127 ? s[i] : '?';
    tmp[n] = 0;
    if (!dst[0]) snprintf(dst, cap, "%s", tmp);
    else if (strcmp(dst, tmp)) *mixed = 1;
}

/* Parses one line (a NUL-terminated copy, fixed by fix_nonfinite).  Returns 1 kept, 0 not an
 * object with a step (ignored), -1 malformed, -2 out of memory. */
static int parse_line(attn_ctx *ctx, run *R, const char *text, size_t len, uint32_t seq) {
    attn__json_reader jr;
    if (attn__json_open(&jr, ctx, text, len, "log line", 0) != ATTN_OK) return -2;
    attn__json_kind kind;
    int rc = 0;
    rec r = {NAN, NAN, NAN, NAN, NAN, NAN, seq, 0, 0};
    uint32_t pk[PLOT_MAX_KEYS];
    double pv[PLOT_MAX_KEYS];
    int np = 0;
    char unit[32] = "", task[32] = "";
    size_t unit_n = 0, task_n = 0;
    if (attn__json_peek(&jr, &kind) != ATTN_OK) {
        rc = -1;
        goto done;
    }
    if (kind != ATTN__JSON_OBJECT) { /* valid JSON that is not an object: ignored */
        if (attn__json_skip(&jr) != ATTN_OK || attn__json_finish(&jr) != ATTN_OK) rc = -1;
        goto done;
    }
    attn__json_object_begin(&jr);
    for (;;) {
        int more = 0;
        const char *key = NULL;
        size_t klen = 0;
        if (attn__json_member(&jr, &more, &key, &klen) != ATTN_OK || !more) break;
        if (attn__json_peek(&jr, &kind) != ATTN_OK) break;
        double v = NAN;
        if (kind == ATTN__JSON_STRING && (key_is(key, klen, "unit") || key_is(key, klen, "task"))) {
            const char *s;
            size_t n;
            if (attn__json_string(&jr, &s, &n) != ATTN_OK) break;
            int u = key_is(key, klen, "unit");
            size_t m = n < 31 ? n : 31;
            memcpy(u ? unit : task, s, m);
            (u ? unit : task)[m] = 0;
            *(u ? &unit_n : &task_n) = m;
            continue;
        }
        if (kind == ATTN__JSON_NUMBER) {
            if (attn__json_double(&jr, NULL, &v) != ATTN_OK) break;
            if (!isfinite(v)) v = NAN; /* 1e999 */
        } else if (kind == ATTN__JSON_NULL) {
            if (attn__json_null(&jr) != ATTN_OK) break;
        } else {
            if (attn__json_skip(&jr) != ATTN_OK) break;
            continue;
        }
        if (key_is(key, klen, "step")) r.step = v;
        else if (key_is(key, klen, "elapsed_s")) r.t = v;
        else if (key_is(key, klen, "loss")) r.loss = v;
        else if (key_is(key, klen, "lr")) r.lr = v;
        else if (key_is(key, klen, "grad_norm")) r.gn = v;
        else if (key_is(key, klen, "items_per_s")) r.ips = v;
        else if (klen > 5 && klen <= PLOT_MAX_KEY && !memcmp(key, "eval_", 5) &&
                 strlen(key) == klen) {
            int k = 0;
            while (k < R->nkeys && strcmp(R->keys[k], key)) k++;
            if (k == R->nkeys) {
                if (R->nkeys == PLOT_MAX_KEYS) {
                    R->extra_keys++;
                    continue;
                }
                int ok = 1; /* names drawn and printed: printable ASCII only */
                for (size_t i = 0; i < klen; i++) ok &= key[i] > 32 && key[i] < 127 && key[i] != ',';
                if (!ok) continue;
                memcpy(R->keys[R->nkeys++], key, klen + 1);
            }
            int j = 0;
            while (j < np && pk[j] != (uint32_t)k) j++;
            if (j == np) np++;
            pk[j] = (uint32_t)k, pv[j] = v;
        }
    }
    if (attn__json_finish(&jr) != ATTN_OK) {
        rc = -1;
        goto done;
    }
    if (!isfinite(r.step) || fabs(r.step) > 9007199254740992.0) goto done; /* no usable step */
    if (!grow((void **)&R->r, &R->cap, R->n + 1, sizeof *R->r) ||
        !grow((void **)&R->ev, &R->evcap, R->nev + (size_t)np, sizeof *R->ev)) {
        rc = -2;
        goto done;
    }
    r.ev0 = (uint32_t)R->nev;
    r.nev = (uint32_t)np;
    for (int j = 0; j < np; j++) R->ev[R->nev++] = (evv){pk[j], pv[j]};
    R->r[R->n++] = r;
    if (unit_n) keep_str(R->unit, sizeof R->unit, &R->unit_mixed, unit, unit_n);
    if (task_n) keep_str(R->task, sizeof R->task, &R->task_mixed, task, task_n);
    rc = 1;
done:
    attn__json_close(&jr);
    return rc;
}

static int cmp_rec(const void *a, const void *b) {
    const rec *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Reads a log into R: prints the problem and returns 1 on failure, else 0. */
static int read_log(const char *cmd, attn_ctx *ctx, run *R) {
    const char *path = R->path;
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        perr(cmd, "cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0) {
        const char *why = S_ISDIR(sb.st_mode)                         ? "is a directory"
                          : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "is a device"
                          : S_ISSOCK(sb.st_mode)                       ? "is a socket"
                                                                       : NULL;
        if (why && !is_stdin) {
            perr(cmd, "%s %s, not a log file\n", path, why);
            fclose(f);
            return 1;
        }
        if (S_ISREG(sb.st_mode) && (int64_t)sb.st_size > PLOT_MAX_BYTES) {
            perr(cmd, "%s: %lld bytes is over the limit of %lld (1 GiB)\n", path,
                    (long long)sb.st_size, (long long)PLOT_MAX_BYTES);
            if (!is_stdin) fclose(f);
            return 1;
        }
    }
    char *line = malloc(PLOT_MAX_LINE + 1), *fixed = malloc(2 * (size_t)PLOT_MAX_LINE + 1);
    char *chunk = malloc(1 << 16);
    int rc = 0;
    if (!line || !fixed || !chunk) {
        perr(cmd, "out of memory\n");
        rc = 1;
        goto done;
    }
    size_t len = 0, k;
    int overlong = 0;
    int64_t total = 0;
    uint64_t lineno = 0;
    int eof = 0;
    while (!eof) {
        k = fread(chunk, 1, 1 << 16, f);
        if (k == 0) {
            if (ferror(f)) {
                perr(cmd, "error reading %s: %s\n", path, strerror(errno));
                rc = 1;
                goto done;
            }
            eof = 1;
            if (len == 0 && !overlong) break;
        }
        total += (int64_t)k;
        if (total > PLOT_MAX_BYTES) {
            perr(cmd, "%s: over the limit of %lld bytes (1 GiB)\n", path,
                    (long long)PLOT_MAX_BYTES);
            rc = 1;
            goto done;
        }
        const char *p = chunk, *end = chunk + k;
        while (p < end || eof) {
            const char *nl = eof ? NULL : memchr(p, '\n', (size_t)(end - p));
            size_t seg = (size_t)((nl ? nl : end) - p);
            if (!overlong) {
                if (seg > PLOT_MAX_LINE - len) overlong = 1;
                else memcpy(line + len, p, seg), len += seg;
            }
            p += seg;
            if (!nl && !eof) break;
            if (nl) p++;
            /* a whole line */
            if (++lineno > PLOT_MAX_LINES) {
                perr(cmd, "%s: more than %d lines\n", path, PLOT_MAX_LINES);
                rc = 1;
                goto done;
            }
            if (overlong) {
                if (!R->longl++) R->first_long = lineno;
            } else {
                while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' ||
                               line[len - 1] == '\t'))
                    len--;
                size_t s0 = 0;
                while (s0 < len && (line[s0] == ' ' || line[s0] == '\t')) s0++;
                if (s0 < len) {
                    size_t n = fix_nonfinite(line + s0, len - s0, fixed);
                    int r = parse_line(ctx, R, fixed, n, (uint32_t)lineno);
                    if (r == -2) {
                        perr(cmd, "%s: out of memory at line %llu\n", path,
                                (unsigned long long)lineno);
                        rc = 1;
                        goto done;
                    }
                    if (r == -1 && !R->bad++) R->first_bad = lineno;
                }
            }
            len = 0, overlong = 0;
            if (eof) break;
        }
    }
    if (R->n == 0) {
        perr(cmd,
                "%s: no usable line (a JSON object with a numeric \"step\") in %llu "
                "lines\n",
                path, (unsigned long long)lineno);
        rc = 1;
        goto done;
    }
    /* the later line of a step wins */
    qsort(R->r, R->n, sizeof *R->r, cmp_rec);
    size_t m = 0;
    for (size_t i = 0; i < R->n; i++) {
        if (i + 1 < R->n && R->r[i + 1].step == R->r[i].step) {
            R->replaced++;
            continue;
        }
        R->r[m++] = R->r[i];
    }
    R->n = m;
done:
    free(line);
    free(fixed);
    free(chunk);
    if (!is_stdin) fclose(f);
    return rc;
}

static void notes(const char *cmd, const run *R) {
    if (R->bad)
        perr(cmd, "note: %s: %zu line%s not JSON, skipped (the first: line %llu)\n",
                R->path, R->bad, R->bad == 1 ? "" : "s", (unsigned long long)R->first_bad);
    if (R->longl)
        perr(cmd,
                "note: %s: %zu line%s over %d bytes, skipped (the first: line %llu)\n",
                R->path, R->longl, R->longl == 1 ? "" : "s", PLOT_MAX_LINE,
                (unsigned long long)R->first_long);
    if (R->replaced)
        perr(cmd,
                "note: %s: %zu step%s logged again (a resumed run): the later line "
                "taken\n",
                R->path, R->replaced, R->replaced == 1 ? "" : "s");
    if (R->extra_keys)
        perr(cmd, "note: %s: more than %d eval_* keys; the others are left out\n",
                R->path, PLOT_MAX_KEYS);
}

/* The default legend name: the file's base name without its extension. */
static void base_label(const char *path, char *out, size_t cap) {
    if (!strcmp(path, "-")) {
        snprintf(out, cap, "stdin");
        return;
    }
    const char *b = strrchr(path, '/');
    b = b && b[1] ? b + 1 : path;
    const char *dot = strrchr(b, '.');
    size_t n = dot && dot > b ? (size_t)(dot - b) : strlen(b);
    if (n >= cap) n = cap - 1;
    memcpy(out, b, n);
    out[n] = 0;
}

/* The same name with the folders kept (for logs of the same base name). */
static void path_label(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    size_t n = dot && (!slash || dot > slash + 1) ? (size_t)(dot - path) : strlen(path);
    if (n >= cap) {
        path += n - (cap - 1);
        n = cap - 1;
    }
    memcpy(out, path, n);
    out[n] = 0;
}

static const unsigned palette[10] = {0x1f77b4u, 0xff7f0eu, 0x2ca02cu, 0xd62728u, 0x9467bdu,
                                     0x8c564bu, 0xe377c2u, 0x7f7f7fu, 0xbcbd22u, 0x17becfu};

static unsigned lighter(unsigned rgb, double t) {
    unsigned out = 0;
    for (int s = 16; s >= 0; s -= 8) {
        double c = (rgb >> s) & 255;
        out |= (unsigned)lround(c + (255 - c) * t) << s;
    }
    return out;
}

/* Eval keys over every run, the usual ones first. */
static int eval_keys(const run *runs, int nr, const char **out) {
    static const char *const first[] = {"eval_loss", "eval_accuracy", "eval_bpc", "eval_ppl"};
    int n = 0;
    for (size_t f = 0; f < sizeof first / sizeof first[0]; f++)
        for (int i = 0; i < nr; i++) {
            int found = 0;
            for (int k = 0; k < runs[i].nkeys; k++) found |= !strcmp(runs[i].keys[k], first[f]);
            if (found) {
                out[n++] = first[f];
                break;
            }
        }
    for (int i = 0; i < nr; i++)
        for (int k = 0; k < runs[i].nkeys && n < PLOT_MAX_KEYS; k++) {
            int seen = 0;
            for (int j = 0; j < n; j++) seen |= !strcmp(out[j], runs[i].keys[k]);
            if (!seen) out[n++] = runs[i].keys[k];
        }
    return n;
}

static int key_index(const run *R, const char *key) {
    for (int k = 0; k < R->nkeys; k++)
        if (!strcmp(R->keys[k], key)) return k;
    return -1;
}

/* The value of eval key k at record r (NaN when not logged). */
static double eval_at(const run *R, const rec *r, int k) {
    for (uint32_t j = 0; j < r->nev; j++)
        if ((int)R->ev[r->ev0 + j].key == k) return R->ev[r->ev0 + j].v;
    return NAN;
}

static void csv_num(double v, const char *fmt) {
    if (isfinite(v)) printf(fmt, v);
}

static void csv_str(const char *s) {
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static void print_csv(const run *runs, int nr, const char **keys, int nk) {
    if (nr > 1) printf("run,");
    printf("step,elapsed_s,loss,lr,grad_norm,items_per_s");
    for (int k = 0; k < nk; k++) printf(",%s", keys[k]);
    printf("\n");
    for (int i = 0; i < nr; i++) {
        const run *R = &runs[i];
        int idx[PLOT_MAX_KEYS];
        for (int k = 0; k < nk; k++) idx[k] = key_index(R, keys[k]);
        for (size_t j = 0; j < R->n; j++) {
            const rec *r = &R->r[j];
            if (nr > 1) {
                csv_str(R->label);
                putchar(',');
            }
            printf("%.17g,", r->step);
            csv_num(r->t, "%.10g");
            putchar(',');
            csv_num(r->loss, "%.10g");
            putchar(',');
            csv_num(r->lr, "%.10g");
            putchar(',');
            csv_num(r->gn, "%.10g");
            putchar(',');
            csv_num(r->ips, "%.10g");
            for (int k = 0; k < nk; k++) {
                putchar(',');
                if (idx[k] >= 0) csv_num(eval_at(R, r, idx[k]), "%.10g");
            }
            putchar('\n');
        }
    }
}

/* Trailing mean of the last w values (the finite ones among them). */
static void smooth(const double *y, size_t n, long w, double *out) {
    double sum = 0;
    long cnt = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(y[i])) sum += y[i], cnt++;
        if (i >= (size_t)w && isfinite(y[i - (size_t)w])) sum -= y[i - (size_t)w], cnt--;
        out[i] = cnt > 0 && isfinite(y[i]) ? sum / (double)cnt : NAN;
    }
}

int attn_cli_plot_logs(const char *cmd, const attn_cli_plot *p) {
    const char *out = p->out;
    const int nr = p->n;
    run *runs = calloc((size_t)nr, sizeof *runs);
    if (!runs) {
        perr(cmd, "out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < nr; i++) {
        runs[i].path = p->logs[i];
        base_label(runs[i].path, runs[i].label, sizeof runs[i].label);
    }
    for (int i = 0; i < nr; i++) /* two logs of one name: keep the folders */
        for (int j = i + 1; j < nr; j++)
            if (!strcmp(runs[i].label, runs[j].label)) {
                path_label(runs[i].path, runs[i].label, sizeof runs[i].label);
                path_label(runs[j].path, runs[j].label, sizeof runs[j].label);
            }
    if (p->labels)
        for (int i = 0; i < nr; i++) snprintf(runs[i].label, sizeof runs[i].label, "%s", p->labels[i]);

    attn_ctx *ctx = NULL;
    attn_cli_series *series = NULL;
    double *buf = NULL;
    const char *keys[PLOT_MAX_KEYS];
    int nk = 0;
    if (attn_cli_ctx(cmd, 1, 0, &ctx)) {
        rc = 1;
        goto done;
    }
    for (int i = 0; i < nr && !rc; i++) {
        rc = read_log(cmd, ctx, &runs[i]);
        if (!rc && !p->quiet) notes(cmd, &runs[i]);
    }
    if (rc) goto done;
    nk = eval_keys(runs, nr, keys);
    if (p->csv) print_csv(runs, nr, keys, nk);
    if (!out) goto done;

    /* the x axis: steps, or the elapsed time in s, min or h */
    double tmax = 0, tdiv = 1;
    const char *xlabel = "step";
    if (p->x_time) {
        for (int i = 0; i < nr; i++)
            for (size_t j = 0; j < runs[i].n; j++)
                if (isfinite(runs[i].r[j].t)) tmax = fmax(tmax, runs[i].r[j].t);
        if (tmax >= 2 * 3600) tdiv = 3600, xlabel = "elapsed time (h)";
        else if (tmax >= 600) tdiv = 60, xlabel = "elapsed time (min)";
        else xlabel = "elapsed time (s)";
    }
    /* per run: x, loss, smoothed loss, throughput, and per eval key its points */
    size_t total = 0;
    for (int i = 0; i < nr; i++) total += runs[i].n; /* <= 32 * 1e7 */
    size_t per = 4 + 2 * (size_t)nk;                 /* arrays of each run's length */
    size_t nvals;
    if (!attn__mul_size(total, per, &nvals) || nvals > SIZE_MAX / sizeof(double) ||
        !(buf = malloc((nvals ? nvals : 1) * sizeof(double))) ||
        !(series = calloc((size_t)nr * (3 + (size_t)nk), sizeof *series))) {
        perr(cmd, "out of memory\n");
        rc = 1;
        goto done;
    }
    attn_cli_series *s_raw = series, *s_sm = series + nr, *s_ips = series + 2 * nr;
    attn_cli_series *s_ev = series + 3 * nr; /* [nk][nr] */
    int nraw = 0, nsm = 0, nips = 0, nev[PLOT_MAX_KEYS] = {0};
    int any_loss = 0, any_ips = 0, smooth_same = 1;
    long smooth_first = -1;
    double *q = buf;
    for (int i = 0; i < nr; i++) {
        const run *R = &runs[i];
        size_t n = R->n;
        double *x = q, *loss = q + n, *sm = q + 2 * n, *ips = q + 3 * n;
        q += 4 * n;
        int hl = 0, hi = 0;
        for (size_t j = 0; j < n; j++) {
            x[j] = p->x_time ? R->r[j].t / tdiv : R->r[j].step;
            loss[j] = R->r[j].loss;
            ips[j] = R->r[j].ips;
            hl |= isfinite(x[j]) && isfinite(loss[j]) && (!p->log_y || loss[j] > 0);
            hi |= isfinite(x[j]) && isfinite(ips[j]);
        }
        unsigned col = palette[i % 10];
        if (hl) {
            long w = p->smooth >= 0 ? (long)p->smooth : (long)(n / 50);
            if (w < 1) w = 1;
            if (smooth_first < 0) smooth_first = w;
            else if (w != smooth_first) smooth_same = 0;
            if (w > 1) {
                smooth(loss, n, w, sm);
                s_raw[nraw++] = (attn_cli_series){NULL, x, loss, (int)n, lighter(col, 0.6), 1.0f, 0};
                s_sm[nsm++] = (attn_cli_series){R->label, x, sm, (int)n, col, 2.0f, 0};
            } else {
                s_sm[nsm++] = (attn_cli_series){R->label, x, loss, (int)n, col, 1.6f, 0};
            }
            any_loss = 1;
        }
        if (hi) {
            s_ips[nips++] = (attn_cli_series){R->label, x, ips, (int)n, col, 1.6f, 0};
            any_ips = 1;
        }
        for (int k = 0; k < nk; k++) {
            int idx = key_index(R, keys[k]);
            double *ex = q, *ey = q + n;
            q += 2 * n;
            if (idx < 0) continue;
            int m = 0;
            for (size_t j = 0; j < n; j++) {
                double v = eval_at(R, &R->r[j], idx);
                if (!isfinite(v) || !isfinite(x[j])) continue;
                ex[m] = x[j], ey[m] = v, m++;
            }
            if (m)
                s_ev[k * nr + nev[k]++] =
                    (attn_cli_series){R->label, ex, ey, m, col, 1.8f, m <= 200};
        }
    }
    /* the panels */
    attn_cli_chart_panel panels[2 + PLOT_MAX_KEYS];
    char caps[PLOT_MAX_KEYS][PLOT_MAX_KEY + 8], note[96], ipslabel[48];
    int np = 0;
    memset(panels, 0, sizeof panels);
    if ((p->y & ATTN_CLI_PLOT_LOSS) && any_loss) {
        /* the light raw lines under the smoothed ones */
        attn_cli_series *both = s_raw; /* s_raw[0..nraw) then s_sm: move s_sm to follow */
        memmove(s_raw + nraw, s_sm, (size_t)nsm * sizeof *s_sm);
        note[0] = 0;
        if (nraw) {
            if (smooth_same)
                snprintf(note, sizeof note, "dark: mean of the last %ld values; light: as logged",
                         smooth_first);
            else
                snprintf(note, sizeof note, "dark: trailing mean; light: as logged");
        }
        panels[np++] = (attn_cli_chart_panel){"loss", "training loss", note, both, nraw + nsm,
                                              p->log_y, 1, 6};
    }
    if (p->y & ATTN_CLI_PLOT_EVAL)
        for (int k = 0; k < nk; k++) {
            if (!nev[k]) continue;
            snprintf(caps[k], sizeof caps[k], "eval %s", keys[k] + 5);
            for (char *c = caps[k]; *c; c++)
                if (*c == '_') *c = ' ';
            panels[np++] = (attn_cli_chart_panel){keys[k] + 5, caps[k], NULL, s_ev + k * nr,
                                                  nev[k], 0, 0, 5};
        }
    if ((p->y & ATTN_CLI_PLOT_THROUGHPUT) && any_ips) {
        const char *unit = NULL;
        for (int i = 0; i < nr; i++) {
            const char *u = runs[i].unit_mixed || !runs[i].unit[0] ? "items" : runs[i].unit;
            if (!unit) unit = u;
            else if (strcmp(unit, u)) unit = "items";
        }
        snprintf(ipslabel, sizeof ipslabel, "%s/s", unit ? unit : "items");
        panels[np++] = (attn_cli_chart_panel){ipslabel, "throughput", NULL, s_ips, nips, 0, 1, 5};
    }
    if (np == 0) {
        const int y = p->y & 7;
        perr(cmd, "%s%s in the log%s\n",
             y == ATTN_CLI_PLOT_LOSS ? "no training loss"
             : y == ATTN_CLI_PLOT_EVAL ? "no eval_* values"
             : y == ATTN_CLI_PLOT_THROUGHPUT ? "no items_per_s values"
                                             : "nothing to plot: no loss, eval_* or items_per_s",
             y == ATTN_CLI_PLOT_LOSS && p->log_y ? " above 0" : "", nr > 1 ? "s" : "");
        rc = 1;
        goto done;
    }
    /* the default title: the task the logs share */
    char tbuf[64];
    const char *title = p->title;
    if (!title) {
        const char *task = NULL;
        int same = 1;
        for (int i = 0; i < nr; i++) {
            if (runs[i].task_mixed || !runs[i].task[0]) same = 0;
            else if (!task) task = runs[i].task;
            else if (strcmp(task, runs[i].task)) same = 0;
        }
        if (same && task) snprintf(tbuf, sizeof tbuf, "training: %s", task), title = tbuf;
    }
    attn_cli_chart chart = {title, xlabel, panels, np, 900, np > 2 ? 220 : 280};
    attn_status st;
    if (!strcmp(out, "-")) {
        void *data = NULL;
        size_t n = 0;
        st = p->png ? attn_cli_chart_png_data(ctx, &chart, (unsigned char **)&data, &n)
                 : attn_cli_chart_svg_text(ctx, &chart, (char **)&data, &n);
        if (st == ATTN_OK) attn_cli_write_stdout(data, n);
        attn__free(ctx, data);
    } else {
        st = attn_cli_chart_write(ctx, out, p->png, &chart);
    }
    if (st != ATTN_OK) {
        rc = attn_cli_fail(ctx, cmd, st);
        goto done;
    }
    if (!p->quiet && !p->csv && strcmp(out, "-"))
        printf("plot: %s (%d run%s, %d panel%s)\n", out, nr, nr == 1 ? "" : "s", np,
               np == 1 ? "" : "s");
done:
    for (int i = 0; i < nr; i++) {
        free(runs[i].r);
        free(runs[i].ev);
    }
    free(runs);
    free(buf);
    free(series);
    attn_ctx_free(ctx);
    return rc;
}

int attn_cli_train_chart(const char *cmd, const char *log, const char *svg) {
    struct stat sb;
    /* a log that is not a regular file (a FIFO, a device) is not read back */
    if (!log || stat(log, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) return -1;
    const char *logs[1] = {log}, *labels[1] = {""}; /* one run: no legend */
    const attn_cli_plot p = {logs, labels, 1, 0, ATTN_CLI_PLOT_LOSS | ATTN_CLI_PLOT_EVAL, -1, 0, 1,
                             0, NULL, svg, 0};
    return attn_cli_plot_logs(cmd, &p);
}
