/* attn eval and attn info: the command-line faces of attn_eval and the safetensors reader
 * (attn info on GGUF files: cli/info_gguf.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "commands.h"

/* Reads a safetensors file, or standard input for "-" (bounded by ATTN_LIMIT_FILE_BYTES and,
 * for a stream, by what its header describes).
 * 0 on failure (message printed). */
static int read_st(const char *cmd, attn_ctx *ctx, const char *path, attn_st **st) {
    if (strcmp(path, "-") != 0) {
        const size_t n = strlen(path), x = strlen(".index.json");
        attn_status s = n > x && strcmp(path + n - x, ".index.json") == 0 /* sharded */
                            ? attn_st_read_index(ctx, path, st)
                            : attn_st_read_file(ctx, path, st);
        if (s != ATTN_OK) {
            fprintf(stderr, "attn %s: ", cmd);
            attn_cli_put_escaped(stderr, attn_ctx_errmsg(ctx));
            fputc('\n', stderr);
        }
        return s == ATTN_OK;
    }
    char *data;
    size_t len;
    if (!attn_cli_read_st_stdin(cmd, attn_ctx_limit(ctx, ATTN_LIMIT_FILE_BYTES),
                                "ATTN_LIMIT_FILE_BYTES", &data, &len))
        return 0;
    attn_status s = attn_st_read_memory(ctx, data, len, st);
    free(data);
    if (s != ATTN_OK) {
        fprintf(stderr, "attn %s: standard input: ", cmd);
        attn_cli_put_escaped(stderr, attn_ctx_errmsg(ctx));
        fputc('\n', stderr);
    }
    return s == ATTN_OK;
}

int attn_cmd_eval(int argc, char **argv) {
    const char *out_path = NULL;
    long long threads = 0;
    int list_ops = 0, npos;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("output", 'o', &out_path, "FILE",
                     "where to write the outputs (required; '-': standard output)"),
        ATTN_OPT_THREADS(&threads),
        ATTN_OPT_FLAG("list-ops", 0, &list_ops, "print the ops attn eval knows, one per line"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "eval", "attn eval CASE.safetensors -o OUT.safetensors [options]\nattn eval --list-ops",
        "Runs the op named by CASE's metadata (\"op\") on its tensors and writes the outputs\n"
        "(\"out\", \"attn_weights\", ...) to OUT.  CASE '-' reads standard input.  Format:\n"
        "docs/eval-format.md.  The results do not depend on --threads.",
        opts, NULL,
        "attn eval tests/fixtures/multihead_attention_1.safetensors -o out.safetensors\n"
        "attn eval - -o - < case.safetensors > out.safetensors"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (list_ops) {
        if (npos) return attn_cli_usage_error(&spec, "--list-ops takes no file");
        for (const char *const *op = attn_eval_ops(); *op; op++) printf("%s\n", *op);
        return 0;
    }
    if (npos == 0) return attn_cli_usage_error(&spec, "no input file");
    if (npos > 1)
        return attn_cli_usage_error(&spec, "more than one input file ('%s', '%s')", argv[1],
                                    argv[2]);
    if (!out_path) return attn_cli_usage_error(&spec, "-o OUT is required");
    const char *in_path = argv[1];

    attn_ctx *ctx = NULL;
    if (attn_cli_ctx("eval", threads, 0, &ctx)) return 1;
    attn_st *in = NULL;
    attn_st_writer *w = NULL;
    void *buf = NULL;
    size_t nbuf = 0;
    int rc = 1, to_stdout = !strcmp(out_path, "-");
    if (!read_st("eval", ctx, in_path, &in)) goto done;
    if (attn_st_writer_create(ctx, &w) != ATTN_OK || attn_eval(ctx, in, w) != ATTN_OK ||
        (to_stdout ? attn_st_writer_to_memory(w, &buf, &nbuf)
                   : attn_st_writer_save(w, out_path)) != ATTN_OK) {
        fprintf(stderr, "attn eval: ");
        attn_cli_put_escaped(stderr, attn_ctx_errmsg(ctx));
        fputc('\n', stderr);
        goto done;
    }
    if (to_stdout) {
        if (attn_cli_write_stdout(buf, nbuf) == nbuf) rc = 0; /* the summary goes to stderr */
        fprintf(stderr, "%s: %s -> standard output\n", attn_st_meta(in, "op"), in_path);
    } else {
        printf("%s: %s -> %s\n", attn_st_meta(in, "op"), in_path, out_path);
        rc = 0;
    }
done:
    attn_buffer_free(ctx, buf);
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
    for (int i = 1; i < argc; i++) /* attn info --cpu: the machine, not a file (bench_cpu.c) */
        if (!strcmp(argv[i], "--cpu")) {
            for (int j = i; j + 1 < argc; j++) argv[j] = argv[j + 1];
            return attn_bench_cpu(argc - 1, argv);
        }
    int npos;
    const attn_cli_opt opts[] = {ATTN_OPT_END};
    const attn_cli_spec spec = {
        "info", "attn info FILE.safetensors\nattn info FILE.gguf\nattn info --cpu [--threads N] [--json]",
        "Prints the file's metadata and each tensor's name, dtype and shape.  FILE '-' reads\n"
        "a safetensors file from standard input; a sharded checkpoint's index\n"
        "(model.safetensors.index.json) lists the tensors of all its shards.  A file starting with the magic 'GGUF' is\n"
        "listed as GGUF: version, alignment, metadata (arrays as their type, length and first\n"
        "elements; long strings cut), tensors with their GGML type, dims in GGUF order (ne[0]\n"
        "first: the row-major shape reversed) and bytes, and the count of each type.  Bytes of\n"
        "names and metadata below 0x20, 0x7f and invalid UTF-8 are shown as \\xNN.\n"
        "attn info --cpu prints what attn detected and chose on this CPU (attn bench --op cpu).",
        opts, NULL,
        "attn info tests/fixtures/bert_tiny/model.safetensors\n"
        "attn info tests/fixtures/gguf/all_types_v3.gguf"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos != 1) return attn_cli_usage_error(&spec, npos ? "one file at a time" : "no file");
    const char *path = argv[1];
    attn_ctx *ctx = NULL;
    if (attn_cli_ctx("info", 1, 0, &ctx)) return 1;
    if (attn_cli_is_gguf(path)) {
        int rc = attn_cli_info_gguf(ctx, path);
        attn_ctx_free(ctx);
        return rc;
    }
    attn_st *st = NULL;
    if (!read_st("info", ctx, path, &st)) {
        attn_ctx_free(ctx);
        return 1;
    }
    size_t nm = attn_st_meta_count(st), nt = attn_st_count(st);
    printf("%s: %zu metadata entr%s, %zu tensor%s\n", path, nm, nm == 1 ? "y" : "ies", nt,
           nt == 1 ? "" : "s");
    for (size_t i = 0; i < nm && !ferror(stdout); i++) {
        const char *k, *v;
        if (attn_st_meta_at(st, i, &k, &v) != ATTN_OK) continue;
        printf("  ");
        attn_cli_put_escaped(stdout, k);
        printf(" = ");
        attn_cli_put_escaped(stdout, v);
        printf("\n");
    }
    for (size_t i = 0; i < nt && !ferror(stdout); i++) {
        attn_st_tensor t;
        if (attn_st_at(st, i, &t) != ATTN_OK) continue;
        const char *dn = attn_dtype_name(t.dtype);
        printf("  ");
        size_t w = attn_cli_put_escaped(stdout, t.name);
        printf("%*s %-5s ", w < 40 ? (int)(40 - w) : 0, "", dn ? dn : "?");
        print_shape(&t);
        printf("\n");
    }
    attn_st_free(st);
    attn_ctx_free(ctx);
    return 0;
}
