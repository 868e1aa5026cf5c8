/* attn bench's operations (bench/suite: compiled into the attn program, which reaches them
 * through attn_cmd_bench, declared here), shared among its files: the training-step benchmarks
 * (bench_step.c, bench_dp.c) and the language-model one (bench_llm.c); the measuring helpers
 * are in common/bench_util.h. */
#ifndef ATTN_CLI_BENCH_H
#define ATTN_CLI_BENCH_H

#include "bench_util.h" /* the clock, RSS, median, FMA peak, read bandwidth */

/* attn bench (bench_cmd.c): the options, then the operation; the exit status */
int attn_cmd_bench(int argc, char **argv);
/* bench/suite/bench_ring.c: attn bench --op ring-sdpa (under mpirun; -DATTN_MPI=ON) */
int attn_bench_ring(int argc, char **argv);
/* bench/suite/bench_link.c: attn bench --op mpi-link (under mpirun; -DATTN_MPI=ON) */
int attn_bench_link(int argc, char **argv);
/* bench/suite/bench_dp.c: attn bench --op dp-step (data parallel under mpirun, or one process) */
int attn_bench_dp(int argc, char **argv);
/* attn bench --op cpu, attn info --cpu (bench/suite/bench_cpu.c). */
int attn_bench_cpu(int argc, char **argv);

/* --op gpt-step: one whole GPT training step (see bench/suite/bench_step.c).  Returns the exit
 * status. */
typedef struct attn_bench_gpt {
    long long layers, heads, head_dim, len, batch, vocab, threads, repeat;
    int json;
    const char *save_init; /* NULL, or where to write the initial weights and the batch */
    int bf16;              /* linear products with bf16 operands (ATTN_CTX_BF16_MATMUL) */
} attn_bench_gpt;
int attn_bench_gpt_step(const attn_bench_gpt *o);

/* --op llm (bench_llm.c): argv as attn bench's; returns the exit status */
int attn_bench_llm(int argc, char **argv);

#endif
