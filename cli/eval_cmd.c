/* attn eval and attn info: the command-line faces of attn_eval and the safetensors reader. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void eval_usage(FILE *f) {
    fprintf(f, "usage: attn eval CASE.safetensors -o OUT.safetensors [--threads N]\n"
               "       attn eval --list-ops\n\n"
               "Runs the op named by CASE's metadata (\"op\") on its tensors and writes the\n"
               "outputs (\"out\", \"attn_weights\", ...) to OUT.  Format: docs/eval-format.md.\n\n"
               "  -o, --output FILE  where to write the outputs (required)\n"
               "  --threads N        worker threads (default 1; results do not depend on it)\n"
               "  --list-ops         print the ops attn eval knows, one per line\n");
}

/* Strict decimal int in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, long *v) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) return 0;
    *v = x;
    return 1;
}

int attn_cmd_eval(int argc, char **argv) {
    const char *in_path = NULL, *out_path = NULL;
    long threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            eval_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--list-ops")) {
            for (const char *const *op = attn_eval_ops(); *op; op++) printf("%s\n", *op);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "attn eval: %s needs a file name\n", a);
                return 2;
            }
            out_path = argv[++i];
        } else if (!strcmp(a, "--threads")) {
            if (i + 1 >= argc || !parse_int(argv[i + 1], 0, 1024, &threads)) {
                fprintf(stderr, "attn eval: --threads needs a number in [0, 1024]\n");
                return 2;
            }
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "attn eval: unknown option '%s'\n", a);
            eval_usage(stderr);
            return 2;
        } else if (!in_path) {
            in_path = a;
        } else {
            fprintf(stderr, "attn eval: more than one input file ('%s', '%s')\n", in_path, a);
            return 2;
        }
    }
    if (!in_path || !out_path) {
        fprintf(stderr, "attn eval: %s\n", !in_path ? "no input file" : "-o OUT is required");
        eval_usage(stderr);
        return 2;
    }

    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = (int)threads;
    attn_ctx *ctx = NULL;
    if (attn_ctx_create(&p, &ctx) != ATTN_OK) {
        fprintf(stderr, "attn eval: cannot create a context\n");
        return 1;
    }
    attn_st *in = NULL;
    attn_st_writer *w = NULL;
    int rc = 1;
    if (attn_st_read_file(ctx, in_path, &in) != ATTN_OK ||
        attn_st_writer_create(ctx, &w) != ATTN_OK || attn_eval(ctx, in, w) != ATTN_OK ||
        attn_st_writer_save(w, out_path) != ATTN_OK) {
        fprintf(stderr, "attn eval: %s\n", attn_ctx_errmsg(ctx));
    } else {
        printf("%s: %s -> %s\n", attn_st_meta(in, "op"), in_path, out_path);
        rc = 0;
    }
    attn_st_writer_free(w);
    attn_st_free(in);
    attn_ctx_free(ctx);
    return rc;
}

static void print_shape(const attn_st_tensor *t) {
    printf("[");
    for (int d = 0; d < t->ndim; d++) printf(d ? ", %lld" : "%lld", (long long)t->shape[d]);
    printf("]");
}

int attn_cmd_info(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: attn info FILE.safetensors\n\n"
               "Prints the file's metadata and each tensor's name, dtype and shape.\n");
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: attn info FILE.safetensors\n");
        return 2;
    }
    attn_ctx *ctx = NULL;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) {
        fprintf(stderr, "attn info: cannot create a context\n");
        return 1;
    }
    attn_st *st = NULL;
    if (attn_st_read_file(ctx, argv[1], &st) != ATTN_OK) {
        fprintf(stderr, "attn info: %s\n", attn_ctx_errmsg(ctx));
        attn_ctx_free(ctx);
        return 1;
    }
    size_t nm = attn_st_meta_count(st), nt = attn_st_count(st);
    printf("%s: %zu metadata entr%s, %zu tensor%s\n", argv[1], nm, nm == 1 ? "y" : "ies", nt,
           nt == 1 ? "" : "s");
    for (size_t i = 0; i < nm; i++) {
        const char *k, *v;
        if (attn_st_meta_at(st, i, &k, &v) == ATTN_OK) printf("  %s = %s\n", k, v);
    }
    for (size_t i = 0; i < nt; i++) {
        attn_st_tensor t;
        if (attn_st_at(st, i, &t) != ATTN_OK) continue;
        const char *dn = attn_dtype_name(t.dtype);
        printf("  %-40s %-5s ", t.name, dn ? dn : "?");
        print_shape(&t);
        printf("\n");
    }
    attn_st_free(st);
    attn_ctx_free(ctx);
    return 0;
}
