/* attn bench --op mpi-link: the MPI link between the ranks, measured: all-reduce, ping-pong
 * and ring exchange (every rank sends to the next and receives from the previous, as ring
 * attention does), latency and bandwidth over a range of message sizes.  The figures feed the
 * scaling model of docs/scaling.md.  Built against MPI only with -DATTN_MPI=ON
 * (ATTN_HAVE_MPI); otherwise the op says that it needs that build. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

#ifdef ATTN_HAVE_MPI
#include <mpi.h>
#endif

typedef struct link_opts {
    long long min_bytes, max_bytes, factor, repeat;
    double min_time;
    int test, json;
    const char *label;
} link_opts;

enum { T_ALL, T_ALLREDUCE, T_PINGPONG, T_EXCHANGE };

static const char LINK_MORE[] =
    "Run it under mpirun.  For each message size from --min-bytes to --max-bytes (times\n"
    "--factor each time) and each test:\n"
    "\n"
    "  allreduce  MPI_Allreduce (sum) of floats on every rank.  GB/s is the algorithm\n"
    "             bandwidth, bytes / time; bus GB/s is that times 2(N-1)/N, the bytes\n"
    "             a ring all-reduce moves over each rank's link (nccl-tests' busbw).\n"
    "  pingpong   rank 0 sends to rank 1, which sends it back (the other ranks wait):\n"
    "             time is half the round trip (one way), GB/s = bytes / that.\n"
    "  exchange   every rank r sends to r+1 and receives from r-1 at once\n"
    "             (MPI_Sendrecv; ring attention's step): GB/s = bytes / time, per rank.\n"
    "\n"
    "A sample times ITERS back-to-back operations between two barriers and takes the\n"
    "slowest rank's mean; ITERS is chosen once per size so that a sample lasts about\n"
    "--min-time seconds.  One warm-up sample, then --repeat samples: the table gives\n"
    "their median and minimum.  The received data is checked once per size (sums,\n"
    "echoes and the sender's pattern); a wrong byte fails the run.  The fit line gives\n"
    "the alpha-beta model of each test: alpha = the time of the smallest message,\n"
    "bandwidth = (largest - smallest bytes) / (their time difference).\n"
    "\n"
    "The transport is MPI's choice: with Open MPI, --mca btl self,vader (shared memory)\n"
    "or --mca btl self,tcp (TCP, over loopback on one machine).  --label names the run in\n"
    "the output.  Needs a build with -DATTN_MPI=ON.";

#ifdef ATTN_HAVE_MPI
typedef struct link_row {
    int test;
    long long bytes, iters;
    double med_s, min_s, max_s;
} link_row;

static const char *const TEST_NAME[] = {"all", "allreduce", "pingpong", "exchange"};

static unsigned char pattern(int rank, size_t i) {
    return (unsigned char)((i * 131u + (size_t)rank * 29u + 7u) & 255u);
}

/* One operation of `test` on n bytes. */
static void link_op(int test, int rank, int N, void *sb, void *rb, long long n) {
    if (test == T_ALLREDUCE) {
        MPI_Allreduce(sb, rb, (int)(n / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (test == T_PINGPONG) {
        if (rank == 0) {
            MPI_Send(sb, (int)n, MPI_BYTE, 1, 0x4C4B, MPI_COMM_WORLD);
            MPI_Recv(rb, (int)n, MPI_BYTE, 1, 0x4C4B, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(rb, (int)n, MPI_BYTE, 0, 0x4C4B, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(rb, (int)n, MPI_BYTE, 0, 0x4C4B, MPI_COMM_WORLD);
        }
    } else {
        MPI_Sendrecv(sb, (int)n, MPI_BYTE, (rank + 1) % N, 0x4C4C, rb, (int)n, MPI_BYTE,
                     (rank + N - 1) % N, 0x4C4C, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
}

/* Fills the send buffer for `test` and, after one operation, checks what arrived; returns 1
 * when every rank saw the right data. */
static int link_verify(int test, int rank, int N, unsigned char *sb, unsigned char *rb,
                       long long n) {
    int ok = 1;
    if (test == T_ALLREDUCE) {
        float *s = (float *)(void *)sb, *r = (float *)(void *)rb;
        for (long long i = 0; i < n / 4; i++) s[i] = (float)((rank + 1) * (1 + i % 7));
        link_op(test, rank, N, sb, rb, n);
        double tri = 0.5 * (double)N * (double)(N + 1);
        for (long long i = 0; i < n / 4 && ok; i++)
            if ((double)r[i] != tri * (double)(1 + i % 7)) ok = 0;
        for (long long i = 0; i < n / 4; i++) s[i] = 1.0f; /* timed runs: no growth */
    } else {
        for (long long i = 0; i < n; i++) sb[i] = pattern(rank, (size_t)i);
        memset(rb, 0, (size_t)n);
        link_op(test, rank, N, sb, rb, n);
        int from = test == T_PINGPONG ? 0 : (rank + N - 1) % N;
        if (test != T_PINGPONG || rank <= 1)
            for (long long i = 0; i < n && ok; i++)
                if (rb[i] != pattern(from, (size_t)i)) ok = 0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return ok;
}

/* The slowest rank's mean time of one operation over iters operations. */
static double link_sample(int test, int rank, int N, void *sb, void *rb, long long n,
                          long long iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = attn_bench_now_s();
    for (long long i = 0; i < iters; i++) link_op(test, rank, N, sb, rb, n);
    double t = (attn_bench_now_s() - t0) / (double)iters, m = t;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

/* ping-pong's sample is a round trip: one way is half of it */
static double one_way(int test, double t) { return test == T_PINGPONG ? 0.5 * t : t; }

static double bus_factor(int test, int N) {
    return test == T_ALLREDUCE && N > 1 ? 2.0 * (N - 1) / N : 1.0;
}

/* alpha-beta fit from the smallest and the largest message of one test */
static void link_fit(const link_row *rows, int nrows, int test, double *alpha_s,
                     double *gbps) {
    const link_row *lo = NULL, *hi = NULL;
    for (int i = 0; i < nrows; i++)
        if (rows[i].test == test) {
            if (!lo) lo = &rows[i];
            hi = &rows[i];
        }
    *alpha_s = lo ? lo->med_s : 0, *gbps = 0;
    if (lo && hi && hi->bytes > lo->bytes && hi->med_s > lo->med_s)
        *gbps = (double)(hi->bytes - lo->bytes) / (hi->med_s - lo->med_s) * 1e-9;
}

static int run_link(const link_opts *o) {
    int rank = 0, N = 1, rc = 1;
    if (attn_cli_mpi_init("bench", &rank, &N)) return 1;
    int tests[3], nt = 0;
    for (int t = T_ALLREDUCE; t <= T_EXCHANGE; t++)
        if (o->test == T_ALL || o->test == t) {
            if (t == T_PINGPONG && N < 2) {
                if (rank == 0 && o->test == T_PINGPONG)
                    fprintf(stderr, "attn bench: --test pingpong needs 2 ranks or more\n");
                continue;
            }
            tests[nt++] = t;
        }
    int nsizes = 0;
    for (long long b = o->min_bytes; b <= o->max_bytes; b *= o->factor) nsizes++;
    link_row *rows = calloc((size_t)(nt * nsizes) + 1, sizeof *rows);
    double *smp = malloc(sizeof *smp * (size_t)o->repeat);
    unsigned char *sb = malloc((size_t)o->max_bytes), *rb = malloc((size_t)o->max_bytes);
    int ok_all = 1, nrows = 0;
    if (!rows || !smp || !sb || !rb) {
        fprintf(stderr, "attn bench: out of memory on rank %d (two buffers of %lld bytes)\n",
                rank, o->max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(sb, 0, (size_t)o->max_bytes), memset(rb, 0, (size_t)o->max_bytes);
    for (int ti = 0; ti < nt; ti++) {
        int test = tests[ti];
        for (long long n = o->min_bytes; n <= o->max_bytes; n *= o->factor) {
            if (!link_verify(test, rank, N, sb, rb, n)) {
                if (rank == 0)
                    fprintf(stderr, "attn bench: %s of %lld bytes: wrong data received\n",
                            TEST_NAME[test], n);
                ok_all = 0;
            }
            /* the iterations: rank 0's estimate from one timed operation, for everyone */
            double t1 = link_sample(test, rank, N, sb, rb, n, 1);
            long long iters = t1 > 0 ? (long long)ceil(o->min_time / t1) : 1000;
            if (iters < 1) iters = 1;
            if (iters > 100000) iters = 100000;
            MPI_Bcast(&iters, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
            link_sample(test, rank, N, sb, rb, n, iters); /* warm-up */
            for (long long r = 0; r < o->repeat; r++)
                smp[r] = one_way(test, link_sample(test, rank, N, sb, rb, n, iters));
            link_row *w = &rows[nrows++];
            w->test = test, w->bytes = n, w->iters = iters;
            w->min_s = w->max_s = smp[0];
            for (long long r = 1; r < o->repeat; r++) {
                if (smp[r] < w->min_s) w->min_s = smp[r];
                if (smp[r] > w->max_s) w->max_s = smp[r];
            }
            w->med_s = attn_bench_median(smp, (int)o->repeat);
        }
    }
    if (rank == 0) {
        const char *btl = getenv("OMPI_MCA_btl");
        if (o->json) {
            printf("{\"op\": \"mpi-link\", \"label\": \"%s\", \"ranks\": %d, \"mca_btl\": ", o->label,
                   N);
            if (btl) printf("\"%s\"", btl);
            else printf("null");
            printf(", \"repeat\": %lld, \"min_time_s\": %g, \"verified\": %s, \"results\": [",
                   o->repeat, o->min_time, ok_all ? "true" : "false");
            for (int i = 0; i < nrows; i++) {
                const link_row *w = &rows[i];
                double g = (double)w->bytes / w->med_s * 1e-9;
                printf("%s\n  {\"test\": \"%s\", \"bytes\": %lld, \"iters\": %lld, "
                       "\"median_us\": %.4f, \"min_us\": %.4f, \"max_us\": %.4f, "
                       "\"gbps\": %.6f, \"bus_gbps\": %.6f}",
                       i ? "," : "", TEST_NAME[w->test], w->bytes, w->iters, 1e6 * w->med_s,
                       1e6 * w->min_s, 1e6 * w->max_s, g, g * bus_factor(w->test, N));
            }
            printf("],\n \"fit\": {");
            for (int ti = 0; ti < nt; ti++) {
                double a, g;
                link_fit(rows, nrows, tests[ti], &a, &g);
                printf("%s\"%s\": {\"alpha_us\": %.4f, \"gbps\": %.6f}", ti ? ", " : "",
                       TEST_NAME[tests[ti]], 1e6 * a, g);
            }
            printf("}}\n");
        } else {
            printf("attn bench: mpi-link  %d rank%s%s%s  transport: %s\n"
                   "median and min of %lld samples; a sample is the slowest rank's mean over "
                   "ITERS operations\n\n",
                   N, N == 1 ? "" : "s", *o->label ? "  " : "", o->label,
                   btl ? btl : "MPI's choice", o->repeat);
            printf("  %-10s %11s %7s %12s %12s %10s %10s\n", "test", "bytes", "iters",
                   "median us", "min us", "GB/s", "bus GB/s");
            for (int i = 0; i < nrows; i++) {
                const link_row *w = &rows[i];
                double g = (double)w->bytes / w->med_s * 1e-9;
                printf("  %-10s %11lld %7lld %12.2f %12.2f %10.3f %10.3f\n",
                       TEST_NAME[w->test], w->bytes, w->iters, 1e6 * w->med_s, 1e6 * w->min_s,
                       g, g * bus_factor(w->test, N));
            }
            printf("\nalpha-beta fit (smallest and largest message):\n");
            for (int ti = 0; ti < nt; ti++) {
                double a, g;
                link_fit(rows, nrows, tests[ti], &a, &g);
                printf("  %-10s alpha %.2f us, bandwidth %.3f GB/s%s\n", TEST_NAME[tests[ti]],
                       1e6 * a, g,
                       tests[ti] == T_ALLREDUCE ? " (algorithm bandwidth)" : "");
            }
            printf("data checked: %s\n", ok_all ? "ok" : "WRONG DATA");
        }
        fflush(stdout);
    }
    rc = ok_all ? 0 : 1;
    free(rows), free(smp), free(sb), free(rb);
    MPI_Finalize();
    return rc;
}
#endif

int attn_bench_link(int argc, char **argv) {
    link_opts o = {4, 256LL << 20, 4, 7, 0.02, 0, 0, ""};
    int npos, op = 0;
    const attn_cli_opt table[] = {
        ATTN_OPT_CHOICE("op", 0, &op, "mpi-link", "NAME", "mpi-link"),
        ATTN_OPT_CHOICE("test", 0, &o.test, "all|allreduce|pingpong|exchange", "NAME",
                        "all (default), allreduce, pingpong or exchange"),
        ATTN_OPT_INT("min-bytes", 0, &o.min_bytes, 4, 1LL << 30, "N",
                     "smallest message, bytes (default 4)"),
        ATTN_OPT_INT("max-bytes", 0, &o.max_bytes, 4, 1LL << 30, "N",
                     "largest message, bytes (default 268435456 = 256 MiB)"),
        ATTN_OPT_INT("factor", 0, &o.factor, 2, 1024, "F",
                     "each size F times the previous (default 4)"),
        ATTN_OPT_INT("repeat", 0, &o.repeat, 1, 100000, "N", "timed samples per size (default 7)"),
        ATTN_OPT_NUM("min-time", 0, &o.min_time, 0.0, 60.0, "S",
                     "seconds a sample should last (default 0.02)"),
        ATTN_OPT_STR("label", 0, &o.label, "TEXT", "a name for the run, printed with it"),
        ATTN_OPT_FLAG("json", 0, &o.json, "one JSON object instead of the table"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "bench --op mpi-link", "mpirun -np N attn bench --op mpi-link [options]",
        "Measures the MPI link between the ranks of MPI_COMM_WORLD: all-reduce, ping-pong\n"
        "and ring exchange, latency and bandwidth per message size.",
        table, LINK_MORE,
        "mpirun -np 2 attn bench --op mpi-link\n"
        "mpirun -np 2 --mca btl self,tcp attn bench --op mpi-link --label tcp --json\n"
        "mpirun -np 4 --oversubscribe attn bench --op mpi-link --test allreduce"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (o.min_bytes % 4 || o.max_bytes % 4)
        return attn_cli_usage_error(&spec, "--min-bytes and --max-bytes must be multiples of 4 "
                                           "(all-reduce sums floats)");
    if (o.min_bytes > o.max_bytes)
        return attn_cli_usage_error(&spec, "--min-bytes %lld is over --max-bytes %lld",
                                    o.min_bytes, o.max_bytes);
    if (strchr(o.label, '"') || strchr(o.label, '\\'))
        return attn_cli_usage_error(&spec, "--label may not contain quotes or backslashes");
#ifdef ATTN_HAVE_MPI
    return run_link(&o);
#else
    fprintf(stderr, "attn bench: --op mpi-link needs a build with -DATTN_MPI=ON (MPI; "
                    "docs/scaling.md)\n");
    return 1;
#endif
}
