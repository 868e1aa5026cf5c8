/* attn bench --op ring-sdpa: ring attention (attn_sdpa_ring and its backward) timed under
 * mpirun.  Built against MPI only with -DATTN_MPI=ON (ATTN_HAVE_MPI); otherwise the op says
 * that it needs that build. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

#ifdef ATTN_HAVE_MPI
#include "attn_mpi.h"
#endif

typedef struct ring_opts {
    long long B, H, Hkv, L, D, threads, repeat;
    int causal, contiguous, check, json;
    double timeout;
} ring_opts;

static const char RING_MORE[] =
    "Run it under mpirun: every rank holds L/N query and key/value rows (--layout\n"
    "zigzag: chunks r and 2N-1-r of 2N, the default; contiguous: rows [r L/N, (r+1) L/N))\n"
    "of random inputs that do not depend on N.  One warm-up run, then --repeat timed\n"
    "runs of the forward (attn_sdpa_ring) and of the backward (attn_sdpa_ring_backward,\n"
    "from the forward's saved out and lse); a run's time is the slowest rank's, between\n"
    "two barriers.  Prints the median ms of each, GFLOP/s of the whole sequence (forward\n"
    "4*B*H*L*L*D*c, c = 1/2 with --causal; backward 2.5 x that) and the largest peak\n"
    "RSS of a rank.  --threads 0 gives each rank the cores it is bound to, or the\n"
    "node's cores divided among the ranks on it.\n"
    "\n"
    "--check: rank 0 also runs attn_sdpa and attn_sdpa_backward_saved on the whole\n"
    "sequence (one run each, on its --threads threads: O(L) memory there) and prints\n"
    "their times and the largest difference of out, dq, dk and dv from the ring's,\n"
    "relative to the largest value of each.\n"
    "\n"
    "A number of ranks that does not divide --len (into 2N chunks for a causal zigzag\n"
    "layout) is refused by the library before any work.  Needs a build with\n"
    "-DATTN_MPI=ON.";

#ifdef ATTN_HAVE_MPI
/* The input element (b, h, global row g, e) of tensor `which`: uniform in [-1, 1), the same
 * for any number of ranks. */
static float input_at(int which, int64_t b, int64_t h, int64_t g, int64_t e) {
    uint64_t x = ((((uint64_t)which * 1000003u + (uint64_t)b) * 1000033u + (uint64_t)h) *
                      2000003u + (uint64_t)g) * 4099u + (uint64_t)e;
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (float)((double)(x >> 40) / 16777216.0 * 2.0 - 1.0);
}

/* Fills p [B, H, n, W] with tensor `which`, row i being global row rows[i]. */
static void fill(float *p, int which, int64_t B, int64_t H, int64_t n, int64_t W,
                 const int64_t *rows) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < n; i++)
                for (int64_t e = 0; e < W; e++)
                    *p++ = input_at(which, b, h, rows[i], e);
}

static double max_time(double t) {
    double m = t;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

/* max |got - ref| / max(max |ref|, tiny) of tensors [BH, L, W] where rank r's local row i
 * (gathered: block r of `got`, [BH, Lr, W]) is global row attn_ring_row(...). */
static double rel_err(const float *got, const float *ref, int64_t BH, int64_t L, int64_t W,
                      int N, attn_ring_layout layout) {
    int64_t Lr = L / N;
    double err = 0, mx = 0;
    for (int r = 0; r < N; r++)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t i = 0; i < Lr; i++) {
                int64_t g = attn_ring_row(L, N, r, layout, i);
                const float *a = got + (((int64_t)r * BH + bh) * Lr + i) * W;
                const float *b = ref + (bh * L + g) * W;
                for (int64_t e = 0; e < W; e++) {
                    double d = fabs((double)a[e] - (double)b[e]);
                    if (!(d <= err)) err = d; /* NaN counts */
                    if (fabs((double)b[e]) > mx) mx = fabs((double)b[e]);
                }
            }
    return err / (mx > 1e-30 ? mx : 1e-30);
}

/* Prints a failed call: every rank for a fault, rank 0 alone for a refusal (every rank
 * refuses alike).  A timeout or an MPI error aborts the job (the others may still wait). */
static int ring_failed(attn_ctx *ctx, int rank, int N, attn_status st, const char *what) {
    int fault = st == ATTN_E_TIMEOUT || st == ATTN_E_IO || st == ATTN_E_NOMEM ||
                st == ATTN_E_NONFINITE || st == ATTN_E_INTERNAL;
    if (rank == 0 || fault)
        fprintf(stderr, "attn bench: %s on rank %d of %d: %s (%s)\n", what, rank, N,
                attn_ctx_errmsg(ctx), attn_status_name(st));
    if (st == ATTN_E_TIMEOUT || st == ATTN_E_IO) {
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 1;
}

static int run_ring(const ring_opts *o) {
    int rank = 0, N = 1, rc = 1;
    if (attn_cli_mpi_init("bench", &rank, &N)) return 1;
    /* threads: the cores this rank is bound to, else the node's shared among its ranks */
    int threads = (int)o->threads;
    if (threads <= 0) {
        MPI_Comm node;
        int local = 1;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                &node) == MPI_SUCCESS) {
            MPI_Comm_size(node, &local);
            MPI_Comm_free(&node);
        }
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        int cpus = attn_cpu_count();
        threads = online > 0 && cpus < online ? cpus : cpus / (local > 0 ? local : 1);
        if (threads < 1) threads = 1;
    }
    attn_ring_layout layout = o->contiguous ? ATTN_RING_CONTIGUOUS : ATTN_RING_ZIGZAG;
    int64_t B = o->B, H = o->H, Hkv = o->Hkv, L = o->L, D = o->D;
    int64_t Lr = L / N > 0 ? L / N : 1, BH = B * H, BK = B * Hkv;
    float *q = NULL, *k = NULL, *v = NULL, *out = NULL, *lse = NULL, *dout = NULL, *dq = NULL,
          *dk = NULL, *dv = NULL;
    double *tf = NULL, *tb = NULL;
    int64_t *rows = NULL;
    attn_ctx *ctx = NULL;
    size_t nq = (size_t)(BH * Lr * D), nk = (size_t)(BK * Lr * D), nl = (size_t)(BH * Lr);
    q = malloc(nq * 4), k = malloc(nk * 4), v = malloc(nk * 4), out = malloc(nq * 4);
    lse = malloc(nl * 4), dout = malloc(nq * 4), dq = malloc(nq * 4), dk = malloc(nk * 4);
    dv = malloc(nk * 4), rows = malloc((size_t)Lr * sizeof *rows);
    tf = malloc((size_t)o->repeat * sizeof *tf), tb = malloc((size_t)o->repeat * sizeof *tb);
    if (!q || !k || !v || !out || !lse || !dout || !dq || !dk || !dv || !rows || !tf || !tb) {
        fprintf(stderr, "attn bench: out of memory on rank %d\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int64_t i = 0; i < Lr; i++) { /* a refused split still gets inputs (unused) */
        int64_t g = attn_ring_row(L, N, rank, layout, i);
        rows[i] = g >= 0 ? g : i;
    }
    fill(q, 0, B, H, Lr, D, rows), fill(k, 1, B, Hkv, Lr, D, rows);
    fill(v, 2, B, Hkv, Lr, D, rows), fill(dout, 3, B, H, Lr, D, rows);
    attn_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.threads = threads;
    attn_status st = attn_ctx_create(&cp, &ctx);
    if (st != ATTN_OK) {
        fprintf(stderr, "attn bench: cannot create a context (%s)\n", attn_status_name(st));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    attn_tensor Q = attn_view4(q, B, H, Lr, D), K = attn_view4(k, B, Hkv, Lr, D),
                V = attn_view4(v, B, Hkv, Lr, D), O = attn_view4(out, B, H, Lr, D),
                LS = attn_view3(lse, B, H, Lr), dO = attn_view4(dout, B, H, Lr, D),
                dQ = attn_view4(dq, B, H, Lr, D), dK = attn_view4(dk, B, Hkv, Lr, D),
                dV = attn_view4(dv, B, Hkv, Lr, D);
    attn_ring_options ro = attn_ring_defaults();
    ro.sdpa.causal = o->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    ro.layout = layout;
    ro.seq_len = L; /* a number of ranks that does not divide L is refused */
    ro.timeout_s = o->timeout;
    /* warm-ups, then the timed runs */
    st = attn_sdpa_ring(ctx, MPI_COMM_WORLD, &Q, &K, &V, &ro, &O, &LS);
    if (st != ATTN_OK) {
        rc = ring_failed(ctx, rank, N, st, "attn_sdpa_ring");
        goto out;
    }
    st = attn_sdpa_ring_backward(ctx, MPI_COMM_WORLD, &Q, &K, &V, &ro, &O, &LS, &dO, &dQ, &dK,
                                 &dV);
    if (st != ATTN_OK) {
        rc = ring_failed(ctx, rank, N, st, "attn_sdpa_ring_backward");
        goto out;
    }
    for (long long r = 0; r < o->repeat; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = attn_bench_now_s();
        st = attn_sdpa_ring(ctx, MPI_COMM_WORLD, &Q, &K, &V, &ro, &O, &LS);
        double t = attn_bench_now_s() - t0;
        if (st != ATTN_OK) {
            rc = ring_failed(ctx, rank, N, st, "attn_sdpa_ring");
            goto out;
        }
        tf[r] = max_time(t);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = attn_bench_now_s();
        st = attn_sdpa_ring_backward(ctx, MPI_COMM_WORLD, &Q, &K, &V, &ro, &O, &LS, &dO, &dQ,
                                     &dK, &dV);
        t = attn_bench_now_s() - t0;
        if (st != ATTN_OK) {
            rc = ring_failed(ctx, rank, N, st, "attn_sdpa_ring_backward");
            goto out;
        }
        tb[r] = max_time(t);
    }
    double fwd_ms = 1e3 * attn_bench_median(tf, (int)o->repeat);
    double bwd_ms = 1e3 * attn_bench_median(tb, (int)o->repeat);
    double rss = attn_bench_rss_mib(), rss_max = rss;
    MPI_Allreduce(&rss, &rss_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double flops = 4.0 * (double)BH * (double)L * (double)L * (double)D * (o->causal ? 0.5 : 1.0);

    /* --check: the single-process op on rank 0 over the whole sequence */
    double e_out = -1, e_dq = -1, e_dk = -1, e_dv = -1, sp_fwd = 0, sp_bwd = 0;
    int check_ok = 1;
    if (o->check) {
        float *mine[4] = {out, dq, dk, dv};
        size_t n[4] = {nq, nq, nk, nk};
        float *got[4] = {NULL, NULL, NULL, NULL};
        for (int i = 0; i < 4 && check_ok; i++) {
            if (n[i] > (size_t)INT32_MAX) { check_ok = 0; break; }
            if (rank == 0 && !(got[i] = malloc(n[i] * (size_t)N * 4))) check_ok = 0;
        }
        MPI_Allreduce(MPI_IN_PLACE, &check_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!check_ok) {
            if (rank == 0) fprintf(stderr, "attn bench: --check: tensors too large to gather\n");
        } else {
            for (int i = 0; i < 4; i++)
                MPI_Gather(mine[i], (int)n[i], MPI_FLOAT, got[i], (int)n[i], MPI_FLOAT, 0,
                           MPI_COMM_WORLD);
        }
        if (rank == 0 && check_ok) {
            size_t gq = (size_t)(BH * L * D), gk = (size_t)(BK * L * D);
            int64_t *all = malloc((size_t)L * sizeof *all);
            float *G[8];
            size_t gn[8] = {gq, gk, gk, gq, gq, (size_t)(BH * L), gq, gk};
            int okm = all != NULL;
            for (int i = 0; i < 8; i++) okm &= (G[i] = malloc(gn[i] * 4)) != NULL;
            if (!okm) {
                fprintf(stderr, "attn bench: --check: out of memory\n");
                check_ok = 0;
            } else {
                for (int64_t i = 0; i < L; i++) all[i] = i;
                fill(G[0], 0, B, H, L, D, all), fill(G[1], 1, B, Hkv, L, D, all);
                fill(G[2], 2, B, Hkv, L, D, all), fill(G[4], 3, B, H, L, D, all);
                float *gdv = malloc(gk * 4);
                attn_tensor gQ = attn_view4(G[0], B, H, L, D),
                            gK = attn_view4(G[1], B, Hkv, L, D),
                            gV = attn_view4(G[2], B, Hkv, L, D), gO = attn_view4(G[3], B, H, L, D),
                            gdO = attn_view4(G[4], B, H, L, D), gL = attn_view3(G[5], B, H, L),
                            gdQ = attn_view4(G[6], B, H, L, D),
                            gdK = attn_view4(G[7], B, Hkv, L, D),
                            gdV = attn_view4(gdv, B, Hkv, L, D);
                double t0 = attn_bench_now_s();
                st = gdv ? attn_sdpa(ctx, &gQ, &gK, &gV, NULL, &ro.sdpa, &gO, NULL, &gL)
                         : ATTN_E_NOMEM;
                sp_fwd = 1e3 * (attn_bench_now_s() - t0);
                if (st == ATTN_OK) {
                    t0 = attn_bench_now_s();
                    st = attn_sdpa_backward_saved(ctx, &gQ, &gK, &gV, NULL, &ro.sdpa, &gO, &gL,
                                                  &gdO, &gdQ, &gdK, &gdV, NULL);
                    sp_bwd = 1e3 * (attn_bench_now_s() - t0);
                }
                if (st != ATTN_OK) {
                    fprintf(stderr, "attn bench: --check: the single-process op failed: %s\n",
                            attn_ctx_errmsg(ctx));
                    check_ok = 0;
                } else {
                    e_out = rel_err(got[0], G[3], BH, L, D, N, layout);
                    e_dq = rel_err(got[1], G[6], BH, L, D, N, layout);
                    e_dk = rel_err(got[2], G[7], BK, L, D, N, layout);
                    e_dv = rel_err(got[3], gdv, BK, L, D, N, layout);
                }
                free(gdv);
            }
            for (int i = 0; i < 8; i++) free(G[i]);
            free(all);
        }
        for (int i = 0; i < 4; i++) free(got[i]);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) {
        if (o->json) {
            printf("{\"op\": \"ring-sdpa\", \"ranks\": %d, \"threads_per_rank\": %d, "
                   "\"batch\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"len\": %lld, "
                   "\"dim\": %lld, \"causal\": %s, \"layout\": \"%s\", \"repeat\": %lld, "
                   "\"forward_ms\": %.3f, \"backward_ms\": %.3f, \"forward_gflops\": %.2f, "
                   "\"backward_gflops\": %.2f, \"max_rss_mib\": %.1f",
                   N, threads, o->B, o->H, o->Hkv, o->L, o->D, o->causal ? "true" : "false",
                   o->contiguous ? "contiguous" : "zigzag", o->repeat, fwd_ms, bwd_ms,
                   flops / fwd_ms * 1e-6, 2.5 * flops / bwd_ms * 1e-6, rss_max);
            if (o->check && check_ok)
                printf(", \"single_forward_ms\": %.3f, \"single_backward_ms\": %.3f, "
                       "\"rel_err\": {\"out\": %.3g, \"dq\": %.3g, \"dk\": %.3g, \"dv\": %.3g}",
                       sp_fwd, sp_bwd, e_out, e_dq, e_dk, e_dv);
            printf("}\n");
        } else {
            printf("attn bench: ring-sdpa  %d rank%s x %d thread%s  B=%lld H=%lld Hkv=%lld "
                   "L=%lld (%lld per rank) D=%lld%s  %s\n\n",
                   N, N == 1 ? "" : "s", threads, threads == 1 ? "" : "s", o->B, o->H, o->Hkv,
                   o->L, (long long)Lr, o->D, o->causal ? " causal" : "",
                   o->contiguous ? "contiguous" : "zigzag");
            printf("  %-10s %5s %11s %10s\n", "pass", "runs", "median ms", "GFLOP/s");
            printf("  %-10s %5lld %11.2f %10.2f\n", "forward", o->repeat, fwd_ms,
                   flops / fwd_ms * 1e-6);
            printf("  %-10s %5lld %11.2f %10.2f\n", "backward", o->repeat, bwd_ms,
                   2.5 * flops / bwd_ms * 1e-6);
            printf("\nlargest peak RSS of a rank: %.1f MiB\n", rss_max);
            if (o->check && check_ok)
                printf("single process on rank 0 (%d thread%s, one run): forward %.2f ms, "
                       "backward %.2f ms\nmax |ring - single| / max |single|: out %.3g, dq "
                       "%.3g, dk %.3g, dv %.3g\n",
                       threads, threads == 1 ? "" : "s", sp_fwd, sp_bwd, e_out, e_dq, e_dk,
                       e_dv);
        }
    }
    rc = o->check && !check_ok ? 1 : 0;
out:
    free(q), free(k), free(v), free(out), free(lse), free(dout), free(dq), free(dk), free(dv);
    free(rows), free(tf), free(tb);
    attn_ctx_free(ctx);
    MPI_Finalize();
    return rc;
}
#endif

int attn_bench_ring(int argc, char **argv) {
    ring_opts o = {1, 12, -1, 16384, 64, 0, 3, 0, 0, 0, 0, 0};
    const char *layout = "zigzag";
    int npos, op = 0;
    const attn_cli_opt table[] = {
        ATTN_OPT_CHOICE("op", 0, &op, "ring-sdpa", "NAME", "ring-sdpa"),
        ATTN_OPT_INT("batch", 0, &o.B, 1, 1 << 24, "B", "batch size (default 1)"),
        ATTN_OPT_INT("heads", 0, &o.H, 1, 1 << 24, "H", "query heads (default 12)"),
        ATTN_OPT_INT("kv-heads", 0, &o.Hkv, 1, 1 << 24, "K",
                     "key/value heads, H a multiple of K (default H)"),
        ATTN_OPT_INT("len", 0, &o.L, 1, 1 << 30, "L",
                     "the whole sequence's length (default 16384)"),
        ATTN_OPT_INT("dim", 0, &o.D, 1, 1 << 24, "D", "head dimension (default 64)"),
        ATTN_OPT_FLAG("causal", 0, &o.causal, "causal (top-left) mask"),
        ATTN_OPT_STR("layout", 0, &layout, "NAME",
                     "zigzag (default) or contiguous: which rows each rank holds"),
        ATTN_OPT_NUM("timeout", 0, &o.timeout, 0.0, 1e9, "S",
                     "seconds a rank waits for another (default: ATTN_MPI_TIMEOUT\n"
                     "or 300)"),
        ATTN_OPT_THREADS(&o.threads),
        ATTN_OPT_INT("repeat", 0, &o.repeat, 1, 100000, "N", "timed runs (default 3)"),
        ATTN_OPT_FLAG("check", 0, &o.check,
                      "compare with the single-process op on rank 0"),
        ATTN_OPT_FLAG("json", 0, &o.json, "one JSON object instead of the table"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "bench --op ring-sdpa", "mpirun -np N attn bench --op ring-sdpa [options]",
        "Times ring attention (attn_sdpa_ring, attn_sdpa_ring_backward) over the ranks of\n"
        "MPI_COMM_WORLD: the sequence split across the ranks, key/value blocks passed\n"
        "round the ring while each rank computes.",
        table, RING_MORE,
        "mpirun -np 2 attn bench --op ring-sdpa --len 16384 --causal --threads 1\n"
        "mpirun -np 4 --oversubscribe attn bench --op ring-sdpa --len 4096 --check"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!strcmp(layout, "contiguous")) o.contiguous = 1;
    else if (strcmp(layout, "zigzag"))
        return attn_cli_usage_error(&spec, "--layout must be zigzag or contiguous, not '%s'",
                                    layout);
    if (o.Hkv < 0) o.Hkv = o.H;
    if (o.H % o.Hkv)
        return attn_cli_usage_error(&spec, "--heads %lld is not a multiple of --kv-heads %lld",
                                    o.H, o.Hkv);
    double big = (double)o.B * (double)o.H * (double)o.L * (double)o.D * 4.0;
    if (big > 16.0 * 1024 * 1024 * 1024) {
        fprintf(stderr, "attn bench: problem too large (a tensor of %.0f GiB)\n",
                big / (1024.0 * 1024 * 1024));
        return 1;
    }
#ifdef ATTN_HAVE_MPI
    return run_ring(&o);
#else
    fprintf(stderr, "attn bench: --op ring-sdpa needs a build with -DATTN_MPI=ON (ring "
                    "attention over MPI; docs/distributed.md)\n");
    return 1;
#endif
}
