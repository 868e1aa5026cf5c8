/* attn bench internals shared by its files: timing, memory and the FMA peak
 * (cli/bench_cmd.c), and the training-step benchmark (cli/bench_step.c). */
#ifndef ATTN_CLI_BENCH_H
#define ATTN_CLI_BENCH_H

double attn_bench_now_s(void);
/* Peak resident memory of the process so far, MiB (getrusage). */
double attn_bench_rss_mib(void);
/* Median of x[0..n) (sorts x in place); n >= 1. */
double attn_bench_median(double *x, int n);
/* The machine's read bandwidth in GB/s (1e9 bytes): `threads` concurrent streaming reads of
 * 1 GiB with the widest vector loads the CPU has, median of 7 passes; 0 on failure. */
double attn_bench_read_bandwidth(int threads);
/* The machine's FMA peak on `threads` threads, GFLOP/s; *isa names the vector width used. */
double attn_bench_fma_peak(int threads, const char **isa);

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
