/* The attn program's commands in cli/, one file each: `int attn_cmd_<name>(int argc, char
 * **argv)` (argv[0] is the command's name) returning the process exit status: 0 success, 1
 * failure, 2 usage error.  main.c's table dispatches to them, and `attn bench` to
 * bench/suite/ (bench.h). */
#ifndef ATTN_CLI_COMMANDS_H
#define ATTN_CLI_COMMANDS_H
#include "cli.h"

int attn_cmd_eval(int argc, char **argv);        /* cli/eval_cmd.c */
int attn_cmd_walkthrough(int argc, char **argv); /* cli/walkthrough.c */
int attn_cmd_info(int argc, char **argv);        /* cli/eval_cmd.c: list a safetensors file */
/* cli/info_gguf.c: attn info on a GGUF file.  is_gguf: 1 when path is a regular file starting
 * with the magic "GGUF" (never blocks: a FIFO is not read); info_gguf prints the listing, or
 * the error to stderr, and returns the exit status. */
int attn_cli_is_gguf(const char *path);
/* Whether path is a regular file that starts as a safetensors file does (a header length,
 * then '{'). */
int attn_cli_is_safetensors(const char *path);
int attn_cli_info_gguf(attn_ctx *ctx, const char *path);
int attn_cmd_train(int argc, char **argv);       /* cli/train_cmd.c */
int attn_cmd_translate(int argc, char **argv);   /* cli/train_cmd.c */
int attn_cmd_heatmap(int argc, char **argv);     /* cli/train_cmd.c */
/* `attn train charlm ...`: argv[0] is "charlm" (cli/charlm_cmd.c) */
int attn_cmd_charlm_train(int argc, char **argv);
/* cli/llm_cmd.c: generate (a GGUF file or a llama folder; else the character model of
 * cli/charlm_cmd.c), chat, tokenize, perplexity; bench/suite/bench_llm.c: attn bench --op llm */
int attn_cmd_generate(int argc, char **argv);
int attn_cmd_charlm_generate(int argc, char **argv); /* cli/charlm_cmd.c */
int attn_cmd_chat(int argc, char **argv);
int attn_cmd_tokenize(int argc, char **argv);
int attn_cmd_perplexity(int argc, char **argv);
int attn_cmd_demo(int argc, char **argv);        /* cli/train_cmd.c */
int attn_cmd_embed(int argc, char **argv);       /* cli/embed_cmd.c */
int attn_cmd_similar(int argc, char **argv);     /* cli/embed_cmd.c */
/* cli/serve.c: the OpenAI-compatible HTTP server (a stub without libmicrohttpd) */
int attn_cmd_serve(int argc, char **argv);
int attn_cmd_plot(int argc, char **argv);        /* cli/plot_cmd.c */
/* `attn train vit ...`: argv[0] is "vit" (cli/vit_cmd.c) */
int attn_cmd_vit_train(int argc, char **argv);
/* `attn train lm ...`: argv[0] is "lm" (cli/lm_cmd.c) */
int attn_cmd_lm_train(int argc, char **argv);
int attn_cmd_export(int argc, char **argv); /* cli/lm_cmd.c */
int attn_cmd_classify(int argc, char **argv);      /* cli/vit_cmd.c */
int attn_cmd_attention_map(int argc, char **argv); /* cli/vit_cmd.c */

#endif
