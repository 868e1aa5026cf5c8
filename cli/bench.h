/* attn bench internals shared by its files: the training-step benchmarks (cli/bench_step.c,
 * cli/bench_dp.c); the measuring helpers are in cli/bench_util.h. */
#ifndef ATTN_CLI_BENCH_H
#define ATTN_CLI_BENCH_H

#include "bench_util.h" /* the clock, RSS, median, FMA peak, read bandwidth */

/* --op gpt-step: one whole GPT training step (see cli/bench_step.c).  Returns the exit
 * status. */
typedef struct attn_bench_gpt {
    long long layers, heads, head_dim, len, batch, vocab, threads, repeat;
    int json;
    const char *save_init; /* NULL, or where to write the initial weights and the batch */
    int bf16;              /* linear products with bf16 operands (ATTN_CTX_BF16_MATMUL) */
} attn_bench_gpt;
int attn_bench_gpt_step(const attn_bench_gpt *o);

#endif
