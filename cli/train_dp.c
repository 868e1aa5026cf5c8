/* attn train dates|charlm|lm under mpirun: data-parallel training (attn_dp, attn_mpi.h).
 * Built against MPI only with -DATTN_MPI=ON (ATTN_HAVE_MPI); without it, a run that mpirun
 * started on several ranks is refused (each would train the whole model alone). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifdef ATTN_HAVE_MPI
#include "attn_mpi.h"
#endif

static struct {
    int on;         /* MPI initialised here */
    int rank, size, local;
    attn_train_dp hooks;
    int have_hooks;
#ifdef ATTN_HAVE_MPI
    attn_dp *dp;
#endif
} g = {0, 0, 1, 1, {0}, 0
#ifdef ATTN_HAVE_MPI
       , NULL
#endif
};

/* The world size mpirun (Open MPI, MPICH/Hydra, PMIx) announces, or 0 outside mpirun. */
static int launcher_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                       "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i]);
        long long v;
        if (s && attn_cli_parse_i64(s, 1, 1 << 30, &v)) return (int)v;
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

#ifdef ATTN_HAVE_MPI
int attn_cli_mpi_init(const char *cmd, int *rank, int *size) {
    int provided, init = 0;
    MPI_Initialized(&init);
    if (!init && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "attn %s: MPI_Init_thread failed\n", cmd);
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}
#endif

int attn_cli_dp_init(const char *cmd) {
    int n = launcher_size();
    if (n == 0) return 0;
#ifdef ATTN_HAVE_MPI
    if (attn_cli_mpi_init(cmd, &g.rank, &g.size)) return 1;
    g.on = 1;
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &g.local);
        MPI_Comm_free(&node);
    }
    /* rank 0 alone prints: the others' standard output goes nowhere (errors still show) */
    if (g.rank != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "attn %s: rank %d: cannot silence standard output\n", cmd, g.rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 0;
#else
    if (n > 1) {
        fprintf(stderr,
                "attn %s: started by mpirun on %d ranks, but this attn was built without "
                "-DATTN_MPI=ON: every rank would train alone; rebuild with -DATTN_MPI=ON or run "
                "one process\n", cmd, n);
        return 1;
    }
    return 0;
#endif
}

int attn_cli_dp_rank(void) { return g.rank; }
int attn_cli_dp_size(void) { return g.size; }
int attn_cli_dp_local(void) { return g.local > 0 ? g.local : 1; }

int attn_cli_dp_open(const char *cmd, attn_ctx *ctx, long long batch, const char *what,
                     const attn_train_dp **hooks) {
    *hooks = NULL;
#ifdef ATTN_HAVE_MPI
    if (!g.on || g.size == 1) return 0; /* one rank: the plain loop */
    attn_dp_options o = attn_dp_defaults();
    const char *bk = getenv("ATTN_DP_BUCKET"); /* gradient elements per bucket (tuning, tests) */
    long long v;
    if (bk && *bk) {
        if (!attn_cli_parse_i64(bk, 1, 1LL << 28, &v)) {
            if (g.rank == 0)
                fprintf(stderr, "attn %s: ATTN_DP_BUCKET='%s' is not a number of elements in "
                                "[1, 2^28]\n", cmd, bk);
            return 1;
        }
        o.bucket_floats = v;
    }
    attn_status st = attn_dp_create(ctx, MPI_COMM_WORLD, &o, &g.dp);
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, cmd, st);
        return 1;
    }
    /* a batch the ranks do not divide: refused here, before any work (every rank alike,
     * rank 0 says why) */
    int64_t first, count;
    if ((st = attn_dp_split(ctx, g.dp, batch, what, &first, &count)) != ATTN_OK) {
        if (g.rank == 0) {
            fprintf(stderr, "attn %s: ", cmd);
            fprintf(stderr, "%s (%s)\n", attn_ctx_errmsg(ctx), attn_status_name(st));
        }
        return 1;
    }
    g.hooks = attn_dp_train_hooks(g.dp);
    g.have_hooks = 1;
    *hooks = &g.hooks;
    if (g.rank == 0)
        fprintf(stderr, "data parallel: %d ranks, each takes %lld of the %lld (%s) of a step\n", g.size,
                batch / g.size, batch, what);
#else
    (void)cmd, (void)ctx, (void)batch, (void)what;
#endif
    return 0;
}

int attn_cli_dp_fail(attn_ctx *ctx, const char *cmd, attn_status st) {
#ifdef ATTN_HAVE_MPI
    if (g.on && g.size > 1) {
        /* a timeout (or an MPI error) is this rank's own story: every rank tells it; the rest
         * (refusals, bad input) every rank meets alike and rank 0 tells */
        if (st == ATTN_E_TIMEOUT || st == ATTN_E_IO || g.rank == 0) {
            fprintf(stderr, "[rank %d of %d] ", g.rank, g.size);
            attn_cli_fail(ctx, cmd, st);
        }
        if (st == ATTN_E_TIMEOUT || st == ATTN_E_IO) {
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1); /* the others may wait in MPI: stop the job */
        }
        return 1;
    }
#endif
    return attn_cli_fail(ctx, cmd, st);
}

void attn_cli_dp_fault(int64_t step) {
    /* test hooks (tests/cli_tests.cmake): rank 1 hangs or dies after step K */
    if (g.rank != 1) return;
    const char *h = getenv("ATTN_DP_TEST_HANG_STEP"), *e = getenv("ATTN_DP_TEST_EXIT_STEP");
    long long k;
    if (h && attn_cli_parse_i64(h, 1, 1LL << 40, &k) && step == k) {
        fprintf(stderr, "[rank 1] ATTN_DP_TEST_HANG_STEP: hanging after step %lld\n", k);
        for (;;) sleep(1000);
    }
    if (e && attn_cli_parse_i64(e, 1, 1LL << 40, &k) && step == k) {
        fprintf(stderr, "[rank 1] ATTN_DP_TEST_EXIT_STEP: exiting after step %lld\n", k);
        _exit(3);
    }
}

int attn_cli_dp_finish(int rc) {
#ifdef ATTN_HAVE_MPI
    if (g.on) {
        attn_dp_stats s;
        attn_dp_stats_get(g.dp, &s);
        if (g.dp && g.rank == 0 && s.steps > 0)
            fprintf(stderr, "data parallel: %lld steps, %lld gradient buckets per step of which "
                            "%lld started after the backward, %.1f KiB sent per step per rank, "
                            "%.2f ms per step waiting for gradients after the backward\n",
                    (long long)s.steps, (long long)(s.buckets / s.steps),
                    (long long)(s.late_buckets / s.steps),
                    (double)s.bytes / (double)s.steps / 1024.0, 1e3 * s.exposed_s / (double)s.steps);
        attn_dp_free(g.dp);
        g.dp = NULL;
        /* a rank that failed alone must not wait in MPI_Finalize for the others */
        int any = rc != 0, all = 0;
        MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (all && !rc) rc = 1;
        MPI_Finalize();
        g.on = 0;
    }
#endif
    return rc;
}
