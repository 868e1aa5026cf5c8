/* attn: the command-line program.  Dispatches to one subcommand per file (cli/cli.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} cmd;

static const cmd cmds[] = {
    {"eval", attn_cmd_eval, "run the op described by a safetensors file, write its outputs"},
    {"demo", attn_cmd_demo, "train a date translator in minutes, translate, draw its attention"},
    {"walkthrough", attn_cmd_walkthrough, "a guided tour of attention, step by step"},
    {"info", attn_cmd_info, "list a safetensors file: metadata, tensor names, dtypes, shapes"},
    {"train", attn_cmd_train, "train a model from scratch: dates (translate dates to ISO), charlm (GPT)"},
    {"translate", attn_cmd_translate, "translate dates with a trained model"},
    {"heatmap", attn_cmd_heatmap, "draw a translation's cross-attention as a PNG heatmap"},
    {"generate", attn_cmd_generate, "sample text from a character-level model (train charlm)"},
    {"embed", attn_cmd_embed, "sentence embeddings with a BERT sentence-transformers model"},
    {"similar", attn_cmd_similar, "rank the lines of a file by similarity to a query"},
    {"bench", attn_cmd_bench, "time attention ops: median ms, GFLOP/s, % of FMA peak"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: attn <command> [options]\n"
               "       attn --help | --version\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", cmds[i].name, cmds[i].help);
    fprintf(f, "\n'attn <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c, "--version") || !strcmp(c, "-V")) {
        printf("attn %s\n", attn_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(c, cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "attn: unknown command '%s'\n\n", c);
    usage(stderr);
    return 2;
}
