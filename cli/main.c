/* attn: the command-line program.  Dispatches to one subcommand per file (common/cli.h). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "commands.h"

typedef struct cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} cmd;

static const cmd cmds[] = {
    {"eval", attn_cmd_eval, "run the op described by a safetensors file, write its outputs"},
    {"demo", attn_cmd_demo, "train a date translator in minutes, translate, draw its attention"},
    {"walkthrough", attn_cmd_walkthrough, "a guided tour of attention, step by step"},
    {"info", attn_cmd_info, "list a safetensors or GGUF file: metadata, tensors, types, shapes"},
    {"train", attn_cmd_train,
     "train a model from scratch: dates (to ISO), charlm (GPT), vit (Fashion-MNIST);\n"
     "                fine-tune an LLM: lm"},
    {"export", attn_cmd_export, "write a llama LLM as a GGUF file (F32, Q8_0) or a HF folder"},
    {"translate", attn_cmd_translate, "translate dates with a trained model"},
    {"heatmap", attn_cmd_heatmap, "draw a translation's cross-attention as a PNG heatmap"},
    {"generate", attn_cmd_generate,
     "continue a prompt with an LLM (GGUF, HF folder) or a charlm model"},
    {"chat", attn_cmd_chat, "chat with an instruction-tuned LLM (GGUF or HF folder)"},
    {"tokenize", attn_cmd_tokenize, "the token ids of a text with an LLM's tokenizer"},
    {"perplexity", attn_cmd_perplexity, "an LLM's perplexity on a text (llama.cpp's method)"},
    {"classify", attn_cmd_classify, "classify Fashion-MNIST images with a ViT (train vit)"},
    {"attention-map", attn_cmd_attention_map,
     "draw a ViT's [CLS] attention per layer and its rollout as a PNG"},
    {"embed", attn_cmd_embed, "sentence embeddings with a BERT sentence-transformers model"},
    {"similar", attn_cmd_similar, "rank the lines of a file by similarity to a query"},
    {"serve", attn_cmd_serve, "an OpenAI-compatible HTTP server for an LLM (and embeddings)"},
    {"plot", attn_cmd_plot, "draw training logs (JSON Lines) as SVG or PNG charts, or CSV"},
    {"bench", attn_cmd_bench, "time attention ops: median ms, GFLOP/s, % of FMA peak"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: attn <command> [options]\n"
               "       attn --help | --version\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-13s %s\n", cmds[i].name, cmds[i].help);
    fprintf(f, "\n'attn <command> --help' describes a command's options, with examples.\n"
               "Every command takes -h/--help; options may come anywhere, as --name VALUE or\n"
               "--name=VALUE, and '--' ends them.  -t/--threads N sets the worker threads:\n"
               "0, the default, uses one per physical core this process may run on (within its\n"
               "cgroup's CPU quota; attn info --cpu shows them).  Where a command reads\n"
               "or writes a file, '-' means standard input or output.\n"
               "\nexit status:\n"
               "  0  success\n"
               "  1  failure: bad input, a file that cannot be read or written, out of memory,\n"
               "     or an error writing to standard output\n"
               "  2  usage error: an unknown option, a missing or malformed value\n"
               "\nexamples:\n"
               "  attn walkthrough --section 1\n"
               "  attn demo\n"
               "  attn info model.safetensors\n");
}

/* Every command's output is checked once it returns (attn_cli_close_stdout): a full disk or
 * a closed standard output is a failure, never a silent success. */
int main(int argc, char **argv) {
    attn_cli_guard_fds();
    /* a reader that went away is a failed write like any other (exit 1 with a message), not a
     * death by SIGPIPE */
    signal(SIGPIPE, SIG_IGN);
#ifdef SIGXFSZ
    /* a file past RLIMIT_FSIZE: an EFBIG error with a message (the output left as it was),
     * not a process killed half-way */
    signal(SIGXFSZ, SIG_IGN);
#endif
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
        usage(stdout);
        return attn_cli_close_stdout(NULL, 0);
    }
    if (!strcmp(c, "--version") || !strcmp(c, "-V")) {
        printf("attn %s\n", attn_version());
        return attn_cli_close_stdout(NULL, 0);
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(c, cmds[i].name))
            return attn_cli_close_stdout(cmds[i].name, cmds[i].fn(argc - 1, argv + 1));
    fprintf(stderr, "attn: unknown command '%s'\n\n", c);
    usage(stderr);
    return 2;
}
