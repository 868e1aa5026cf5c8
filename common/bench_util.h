/* The measuring helpers of every benchmark, one of each (common/bench_util.c): the attn program's
 * bench commands (bench/suite/bench_*.c, llm_cmd.c) and the programs under bench/ compile the same
 * file.  No dependency on the library or on the rest of the program. */
#ifndef ATTN_CLI_BENCH_UTIL_H
#define ATTN_CLI_BENCH_UTIL_H

/* Seconds on the monotonic clock. */
double attn_bench_now_s(void);
/* Peak resident memory of the process so far, MiB (getrusage); 0 when unknown. */
double attn_bench_rss_mib(void);
/* Median of x[0..n) (sorts x in place; the mean of the two middle values for even n); n >= 1. */
double attn_bench_median(double *x, int n);
/* The machine's FMA peak on `threads` threads, GFLOP/s: 12 independent FMA chains per thread,
 * every thread at once, the best of 5 rounds of the threads' summed rates; *isa (may be NULL)
 * names the vector width used: the widest the CPU has (ATTN_ISA=avx2 caps it at AVX2; NEON
 * on AArch64). */
double attn_bench_fma_peak(int threads, const char **isa);
/* The same probe with the width and work chosen: lanes 16 (AVX-512), 8 (AVX2 + FMA), 1
 * (scalar) or 0 (as attn_bench_fma_peak; a width the CPU lacks falls back to scalar; on
 * AArch64 every width but 1 is NEON's 4); iters iterations per thread (0: 8e6, NEON 2e6,
 * scalar 4e6), the best of `rounds` rounds. */
double attn_bench_fma_peak_at(int threads, int lanes, long iters, int rounds, const char **isa);
/* The machine's read bandwidth in GB/s (1e9 bytes): `threads` concurrent streaming reads of
 * 1 GiB with the widest vector loads the CPU has, median of 7 passes; 0 on failure. */
#define ATTN_BENCH_BW_RUNS 7
double attn_bench_read_bandwidth(int threads);

#endif
