/* PyTorch reference fixtures (tests/gen_fixtures.py, docs/eval-format.md) run through attn_eval.
 *
 *   test_fixtures [CASE ...]          every case of fixtures/MANIFEST.txt (or the ones named)
 *   test_fixtures --compare OUT EXP   compare two files the same way (used by a CLI test)
 *
 * Each case: fixtures/<case>.safetensors -> attn_eval -> serialised -> read back, then every
 * tensor of fixtures/<case>.expected.safetensors must match the same-named output: same shape,
 * max|got - ref| <= tol * max(1, max|ref|) with tol from the expected file's metadata "tol"
 * (default 1e-5); NaN fails, infinities must match exactly.  Outputs that the expected file
 * does not list are ignored.  The case is also run with 4 threads: the bytes must be
 * identical (attn promises bit-identical results for every thread count). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX_CASES 4096

static double tol_of(const attn_st *exp) {
    const char *t = attn_st_meta(exp, "tol");
    if (!t) return 1e-5;
    char *end;
    double v = strtod(t, &end);
    return (*end || !(v >= 0)) ? 1e-5 : v;
}

static float *to_f32(attn_ctx *ctx, const attn_st_tensor *t) {
    float *p = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (p && attn_st_to_f32(ctx, t, p, (size_t)t->numel) != ATTN_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

static const char *shape_of(const attn_st_tensor *t, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

/* Compares every tensor of exp with got.  Returns 1 on pass; *worst = max error, *why = a
 * description of the first failure. */
static int compare(attn_ctx *ctx, const attn_st *got, const attn_st *exp, double tol,
                   double *worst, char *why, size_t nwhy) {
    int ok = 1;
    *worst = 0;
    why[0] = 0;
    size_t n = attn_st_count(exp);
    for (size_t i = 0; i < n; i++) {
        attn_st_tensor e, g;
        if (attn_st_at(exp, i, &e) != ATTN_OK) continue;
        if (attn_st_find(got, e.name, &g) != ATTN_OK) {
            if (ok) snprintf(why, nwhy, "output '%s' missing", e.name);
            ok = 0;
            continue;
        }
        int same = e.ndim == g.ndim;
        for (int d = 0; same && d < e.ndim; d++) same = e.shape[d] == g.shape[d];
        if (!same) {
            char sg[128], se[128];
            if (ok) snprintf(why, nwhy, "'%s' has shape %s, expected %s", e.name,
                             shape_of(&g, sg, sizeof sg), shape_of(&e, se, sizeof se));
            ok = 0;
            continue;
        }
        float *a = to_f32(ctx, &g), *b = to_f32(ctx, &e);
        if (!a || !b) {
            if (ok) snprintf(why, nwhy, "'%s' cannot be read as F32", e.name);
            ok = 0;
        } else {
            double refmax, err = tu_max_err(a, b, (size_t)e.numel, &refmax);
            double bound = tol * (refmax > 1 ? refmax : 1);
            if (err > *worst || isnan(err)) *worst = err;
            if (!(err <= bound)) {
                if (ok)
                    snprintf(why, nwhy, "'%s': max abs error %.3g > %.3g (max|ref| %.3g)", e.name,
                             err, bound, refmax);
                ok = 0;
            }
        }
        free(a);
        free(b);
    }
    return ok;
}

/* Runs attn_eval on `in` in ctx; on success *buf and *size hold the serialised outputs
 * (release with attn_buffer_free(ctx, ...)). */
static attn_status run_eval(attn_ctx *ctx, const attn_st *in, void **buf, size_t *size) {
    attn_st_writer *w = NULL;
    attn_status st = attn_st_writer_create(ctx, &w);
    if (st == ATTN_OK) st = attn_eval(ctx, in, w);
    if (st == ATTN_OK) st = attn_st_writer_to_memory(w, buf, size);
    attn_st_writer_free(w);
    return st;
}

static int run_case(const char *name) {
    char in_path[1024], exp_path[1024], why[600];
    snprintf(in_path, sizeof in_path, "fixtures/%s.safetensors", name);
    snprintf(exp_path, sizeof exp_path, "fixtures/%s.expected.safetensors", name);
    attn_ctx *ctx = NULL, *ctx4 = NULL;
    attn_ctx_params p4;
    memset(&p4, 0, sizeof p4);
    p4.threads = 4;
    attn_st *in = NULL, *exp = NULL, *got = NULL;
    void *buf = NULL, *buf4 = NULL;
    size_t size = 0, size4 = 0;
    int pass = 0;
    double worst = 0, tol = 1e-5;
    const char *op = "?";
    why[0] = 0;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK || attn_ctx_create(&p4, &ctx4) != ATTN_OK) {
        snprintf(why, sizeof why, "cannot create a context");
        goto report;
    }
    if (attn_st_read_file(ctx, in_path, &in) != ATTN_OK ||
        attn_st_read_file(ctx, exp_path, &exp) != ATTN_OK) {
        snprintf(why, sizeof why, "%s", attn_ctx_errmsg(ctx));
        goto report;
    }
    if (attn_st_meta(in, "op")) op = attn_st_meta(in, "op");
    tol = tol_of(exp);
    attn_status st = run_eval(ctx, in, &buf, &size);
    if (st != ATTN_OK) {
        snprintf(why, sizeof why, "attn_eval: %s: %s", attn_status_name(st),
                 attn_ctx_errmsg(ctx));
        goto report;
    }
    if (attn_st_read_memory(ctx, buf, size, &got) != ATTN_OK) {
        snprintf(why, sizeof why, "output does not read back: %s", attn_ctx_errmsg(ctx));
        goto report;
    }
    pass = compare(ctx, got, exp, tol, &worst, why, sizeof why);
    if (pass) {
        st = run_eval(ctx4, in, &buf4, &size4);
        if (st != ATTN_OK) {
            snprintf(why, sizeof why, "with 4 threads: %s", attn_ctx_errmsg(ctx4));
            pass = 0;
        } else if (size4 != size || memcmp(buf, buf4, size) != 0) {
            snprintf(why, sizeof why, "results with 4 threads differ from 1 thread");
            pass = 0;
        }
    }
report:
    printf("%-4s %-34s %-28s max_err %-9.3g tol %-6.0e%s%s\n", pass ? "ok" : "FAIL", name, op,
           worst, tol, why[0] ? "  " : "", why);
    if (ctx && buf) attn_buffer_free(ctx, buf);
    if (ctx4 && buf4) attn_buffer_free(ctx4, buf4);
    attn_st_free(got);
    attn_st_free(exp);
    attn_st_free(in);
    attn_ctx_free(ctx4);
    attn_ctx_free(ctx);
    return pass;
}

static int compare_files(const char *got_path, const char *exp_path) {
    attn_ctx *ctx = NULL;
    attn_st *got = NULL, *exp = NULL;
    char why[600];
    double worst = 0;
    int pass = 0;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    if (attn_st_read_file(ctx, got_path, &got) != ATTN_OK ||
        attn_st_read_file(ctx, exp_path, &exp) != ATTN_OK) {
        fprintf(stderr, "test_fixtures --compare: %s\n", attn_ctx_errmsg(ctx));
    } else {
        double tol = tol_of(exp);
        pass = compare(ctx, got, exp, tol, &worst, why, sizeof why);
        printf("%s %s vs %s: max_err %.3g tol %.0e%s%s\n", pass ? "ok" : "FAIL", got_path,
               exp_path, worst, tol, pass ? "" : "  ", pass ? "" : why);
    }
    attn_st_free(got);
    attn_st_free(exp);
    attn_ctx_free(ctx);
    return pass ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--compare")) {
        if (argc != 4) {
            fprintf(stderr,
                    "usage: test_fixtures --compare OUT.safetensors EXPECTED.safetensors\n");
            return 2;
        }
        return compare_files(argv[2], argv[3]);
    }
    static char names[MAX_CASES][128];
    int n = 0;
    if (argc > 1) {
        for (int i = 1; i < argc && n < MAX_CASES; i++)
            snprintf(names[n++], sizeof names[0], "%s", argv[i]);
    } else {
        FILE *f = fopen("fixtures/MANIFEST.txt", "r");
        if (!f) {
            fprintf(stderr, "test_fixtures: fixtures/MANIFEST.txt not found (run from tests/; "
                            "generate with python3 tests/gen_fixtures.py)\n");
            return 1;
        }
        char line[256];
        while (n < MAX_CASES && fgets(line, sizeof line, f)) {
            size_t len = strcspn(line, "\r\n");
            line[len] = 0;
            char *s = line;
            while (*s == ' ' || *s == '\t') s++;
            len = strlen(s);
            while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) s[--len] = 0;
            if (!*s || *s == '#') continue;
            snprintf(names[n++], sizeof names[0], "%s", s);
        }
        fclose(f);
        if (n == 0) {
            fprintf(stderr, "test_fixtures: fixtures/MANIFEST.txt lists no cases\n");
            return 1;
        }
    }
    int failed = 0;
    for (int i = 0; i < n; i++) failed += !run_case(names[i]);
    printf("test_fixtures: %d of %d cases passed%s\n", n - failed, n, failed ? " -- FAILED" : "");
    return failed ? 1 : 0;
}
