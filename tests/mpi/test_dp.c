/* Data-parallel training over MPI (attn_dp, attn_train_dp): run by ctest under mpirun with 2
 * and 3 ranks (tests/CMakeLists.txt, only with -DATTN_MPI=ON).
 *
 * The reference is the same training in one process (every rank runs it, dp NULL):
 *  - charlm, 50 steps, global batch 6 split over the ranks: the N-rank loss curve within 1e-5
 *    (relative) of the single-process one at every step (NaN fails); every rank reports the
 *    same losses and ends with the same parameter bits (a hash of the parameters gathered and
 *    compared here, and attn_dp_check_same); buckets started during the backward (overlap)
 *    and all at the end give the same bits;
 *  - dates (seq2seq, padded targets: the loss normalised by the global token count), 12 steps;
 *  - resume on another number of ranks: ranks 0 and 1 train 20 steps and rank 0 writes the
 *    state; then 1 rank (np 2) or 3 ranks (np 3) resume to step 50, within 1e-5 of the
 *    reference's steps 21..50;
 *  - a gradient sum checked against the plain sum of the ranks' gradients;
 *  - refusals: a batch the ranks do not divide (before any work), bad options; and a hang:
 *    rank 1 comes 1.5 s late to a step, the others (waiting 0.3 s) return ATTN_E_TIMEOUT, and
 *    so does rank 1. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn_mpi.h"
#include "attn_tasks.h"
#include "testutil.h"

#define TU_OK(expr, ctx) TU_STATUS((expr), ATTN_OK, (ctx))

static int rank, N;
#define LOSS_TOL 1e-5
#define STEPS 50
static double worst_rel;

typedef struct curve {
    float loss[STEPS + 1];
    int64_t n, stop_at;
} curve;

static int record(void *user, const attn_train_progress *p) {
    curve *c = user;
    if (p->step >= 1 && p->step <= STEPS) c->loss[p->step - 1] = p->loss;
    c->n = p->step;
    return c->stop_at > 0 && p->step >= c->stop_at;
}

/* got[i] against ref[i] for i in [from, to): relative 1e-5, NaN fails */
static void curves_close(const char *what, const curve *got, const curve *ref, int from, int to) {
    double worst = 0.0;
    int bad = -1;
    for (int i = from; i < to; i++) {
        double r = fabs((double)got->loss[i] - (double)ref->loss[i]) /
                   fmax(fabs((double)ref->loss[i]), 1e-30);
        if (!(r <= LOSS_TOL) && bad < 0) bad = i;
        if (!(r <= worst)) worst = r;
    }
    if (!(worst <= worst_rel)) worst_rel = worst;
    TU_CHECK(bad < 0, "%s, rank %d of %d: step %d loss %.9g, single process %.9g (largest "
             "relative difference %.3g > %.0e)", what, rank, N, bad + 1,
             bad >= 0 ? got->loss[bad] : 0.0, bad >= 0 ? ref->loss[bad] : 0.0, worst, LOSS_TOL);
    if (rank == 0)
        printf("%s (run under %d ranks): steps %d-%d, largest relative loss difference to one "
               "process %.3g\n", what, N, from + 1, to, worst);
}

/* every rank of comm holds the same loss curve bits and parameter bits */
static void same_everywhere(const char *what, MPI_Comm comm, const curve *c,
                            const attn_module *m) {
    int n;
    MPI_Comm_size(comm, &n);
    uint64_t h[2] = {attn_dp_params_hash(m), 0};
    for (int i = 0; i < STEPS; i++) {
        uint32_t u;
        memcpy(&u, &c->loss[i], 4);
        h[1] = (h[1] ^ u) * 0x100000001b3ull;
    }
    uint64_t *all = calloc((size_t)n * 2, sizeof *all);
    MPI_Allgather(h, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, comm);
    for (int r = 1; r < n; r++) {
        TU_CHECK(all[2 * r] == all[0], "%s: rank %d's parameters hash %016llx, rank 0's %016llx",
                 what, r, (unsigned long long)all[2 * r], (unsigned long long)all[0]);
        TU_CHECK(all[2 * r + 1] == all[1], "%s: rank %d's loss curve differs from rank 0's", what,
                 r);
    }
    free(all);
}

static char text[6000];
static void make_text(void) {
    const char *w[] = {"the ", "cat ", "sat ", "on ", "a ", "mat, ", "and ", "dog ", "ran. ",
                       "birds ", "sing\n", "in ", "trees ", "of ", "green "};
    uint64_t s = 7;
    size_t n = 0;
    while (n + 8 < sizeof text - 1) {
        const char *x = w[tu_rand(&s) % (sizeof w / sizeof w[0])];
        memcpy(text + n, x, strlen(x));
        n += strlen(x);
    }
    text[n] = 0;
}

static attn_charlm_config charlm_cfg(void) {
    attn_charlm_config c = attn_charlm_defaults();
    c.d_model = 32, c.nhead = 2, c.num_layers = 2, c.dim_feedforward = 64, c.block_size = 16;
    c.batch = 6, c.steps = STEPS, c.warmup = 5, c.lr = 3e-3f, c.lr_min = 1e-4f;
    c.eval_every = 0, c.seed = 3;
    return c;
}

static attn_status train_charlm(attn_ctx *ctx, attn_charlm_config c, attn_dp *dp,
                                const char *resume, curve *cv, attn_module **m) {
    attn_train_dp hooks = attn_dp_train_hooks(dp);
    c.dp = dp ? &hooks : NULL;
    return attn_charlm_train(ctx, &c, text, strlen(text), resume, record, cv, m);
}

static attn_dp *mkdp(attn_ctx *ctx, MPI_Comm comm, int64_t bucket, int overlap, double timeout) {
    attn_dp_options o = attn_dp_defaults();
    o.bucket_floats = bucket, o.overlap = overlap, o.timeout_s = timeout;
    attn_dp *dp = NULL;
    TU_OK(attn_dp_create(ctx, comm, &o, &dp), ctx);
    return dp;
}

static void charlm_curves(attn_ctx *ctx) {
    attn_charlm_config c = charlm_cfg();
    curve ref = {{0}, 0, 0}, got = {{0}, 0, 0}, late = {{0}, 0, 0};
    attn_module *m0 = NULL, *m1 = NULL, *m2 = NULL;
    TU_OK(train_charlm(ctx, c, NULL, NULL, &ref, &m0), ctx);
    /* 997-float buckets: many, and not a multiple of the ranks */
    attn_dp *dp = mkdp(ctx, MPI_COMM_WORLD, 997, 1, 0);
    TU_OK(train_charlm(ctx, c, dp, NULL, &got, &m1), ctx);
    TU_CHECK(got.n == STEPS && ref.n == STEPS, "steps %lld and %lld, expected %d",
             (long long)got.n, (long long)ref.n, STEPS);
    curves_close("charlm", &got, &ref, 0, STEPS);
    same_everywhere("charlm", MPI_COMM_WORLD, &got, m1);
    TU_OK(attn_dp_check_same(dp, ctx, m1), ctx);
    attn_dp_stats s;
    attn_dp_stats_get(dp, &s);
    TU_CHECK(s.steps == STEPS && s.buckets > STEPS && s.bytes > 0,
             "stats: %lld steps, %lld buckets, %lld bytes", (long long)s.steps,
             (long long)s.buckets, (long long)s.bytes);
    /* the GPT reports its layers and final norm: only the embeddings' buckets start late */
    TU_CHECK(s.late_buckets < s.buckets, "no bucket started during the backward (%lld of %lld "
             "late)", (long long)s.late_buckets, (long long)s.buckets);
    if (rank == 0)
        printf("charlm: %lld buckets per step, %lld of them started after the backward; %.1f KiB "
               "sent per step per rank\n", (long long)(s.buckets / s.steps),
               (long long)(s.late_buckets / s.steps), (double)s.bytes / (double)s.steps / 1024);
    attn_dp_free(dp);
    /* without overlap, and with other buckets: the sum is per element in rank order, so the
     * same bits whatever the buckets and their timing */
    dp = mkdp(ctx, MPI_COMM_WORLD, 4096, 0, 0);
    TU_OK(train_charlm(ctx, c, dp, NULL, &late, &m2), ctx);
    TU_CHECK(memcmp(late.loss, got.loss, sizeof got.loss) == 0,
             "charlm: the losses without overlap differ from those with overlap");
    TU_CHECK(attn_dp_params_hash(m2) == attn_dp_params_hash(m1),
             "charlm: the parameters without overlap differ from those with overlap");
    attn_dp_free(dp);
    attn_module_free(m0);
    attn_module_free(m1);
    attn_module_free(m2);
}

static void dates_curves(attn_ctx *ctx) {
    attn_dates_config c = attn_dates_defaults();
    c.d_model = 32, c.nhead = 2, c.num_layers = 1, c.dim_feedforward = 64;
    c.batch = 6, c.steps = 12, c.warmup = 2, c.eval_n = 0, c.label_smoothing = 0.1f;
    curve ref = {{0}, 0, 0}, got = {{0}, 0, 0};
    attn_module *m0 = NULL, *m1 = NULL;
    TU_OK(attn_dates_train(ctx, &c, NULL, record, &ref, &m0), ctx);
    attn_dp *dp = mkdp(ctx, MPI_COMM_WORLD, 0, 1, 0);
    attn_train_dp hooks = attn_dp_train_hooks(dp);
    c.dp = &hooks;
    TU_OK(attn_dates_train(ctx, &c, NULL, record, &got, &m1), ctx);
    curves_close("dates", &got, &ref, 0, 12);
    TU_OK(attn_dp_check_same(dp, ctx, m1), ctx);
    attn_dp_free(dp);
    attn_module_free(m0);
    attn_module_free(m1);
}

/* ranks 0 and 1 train 20 steps, rank 0 writes the state; then 1 rank (N = 2) or all N ranks
 * resume from it */
static void resume_other_ranks(attn_ctx *ctx) {
    attn_charlm_config c = charlm_cfg();
    curve ref = {{0}, 0, 0}, first = {{0}, 0, 20}, rest = {{0}, 0, 0};
    attn_module *m0 = NULL, *m1 = NULL, *m2 = NULL;
    TU_OK(train_charlm(ctx, c, NULL, NULL, &ref, &m0), ctx);
    char path[256] = {0};
    if (rank == 0) {
        char dir[] = "/tmp/attn_test_dp_XXXXXX";
        TU_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
        snprintf(path, sizeof path, "%s/state.safetensors", dir);
    }
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    c.state_path = path;
    c.save_every = 20;
    MPI_Comm two;
    MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &two);
    if (rank < 2) {
        attn_dp *dp = mkdp(ctx, two, 0, 1, 0);
        TU_OK(train_charlm(ctx, c, dp, NULL, &first, &m1), ctx);
        TU_CHECK(first.n == 20, "the first run stopped at step %lld, not 20", (long long)first.n);
        curves_close("charlm before resume (2 ranks)", &first, &ref, 0, 20);
        attn_dp_free(dp);
        MPI_Comm_free(&two);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int nres = N >= 3 ? N : 1;
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, rank < nres ? 0 : MPI_UNDEFINED, rank, &comm);
    if (rank < nres) {
        attn_dp *dp = mkdp(ctx, comm, 0, 1, 0);
        c.state_path = NULL;
        TU_OK(train_charlm(ctx, c, dp, path, &rest, &m2), ctx);
        TU_CHECK(rest.n == STEPS, "the resumed run ended at step %lld", (long long)rest.n);
        char what[64];
        snprintf(what, sizeof what, "charlm resumed on %d rank%s", nres, nres > 1 ? "s" : "");
        curves_close(what, &rest, &ref, 20, STEPS);
        attn_dp_free(dp);
        MPI_Comm_free(&comm);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        remove(path);
        *strrchr(path, '/') = 0;
        rmdir(path);
    }
    attn_module_free(m0);
    attn_module_free(m1);
    attn_module_free(m2);
}

/* attn_dp_begin/end on gradients filled by hand: the sum of the ranks' gradients (each rank's
 * values known to every rank), within float rounding, and the same bits on every rank */
static void direct_sum(attn_ctx *ctx) {
    attn_transformer_config t = attn_transformer_defaults(16, 2);
    t.num_encoder_layers = 2, t.num_decoder_layers = 0, t.dim_feedforward = 32;
    attn_module *m = NULL;
    TU_OK(attn_gpt_create(ctx, &t, 11, 8, &m), ctx);
    TU_OK(attn_module_enable_grad(ctx, m), ctx);
    int64_t n = attn_module_numel(m);
    attn_tensor g0;
    TU_OK(attn_module_grad_at(m, 0, NULL, &g0), ctx);
    float *g = g0.data;
    float *want = calloc((size_t)n, sizeof *want);
    for (int r = 0; r < N; r++) {
        float *x = calloc((size_t)n, sizeof *x);
        tu_fill(x, (size_t)n, 100 + (uint64_t)r, -1.0f, 1.0f);
        for (int64_t i = 0; i < n; i++) want[i] += x[i];
        if (r == rank) memcpy(g, x, (size_t)n * sizeof *g);
        free(x);
    }
    attn_dp *dp = mkdp(ctx, MPI_COMM_WORLD, 333, 1, 0);
    TU_OK(attn_dp_begin(dp, ctx, m), ctx);
    TU_OK(attn_dp_end(dp, ctx, m), ctx);
    tu_close("gradient sum", g, want, (size_t)n, 1e-5);
    TU_OK(attn_dp_check_same(dp, ctx, m), ctx); /* parameters: untouched, equal */
    uint64_t h = 0xcbf29ce484222325ull, *all = calloc((size_t)N, sizeof *all);
    const unsigned char *p = (const unsigned char *)g;
    for (size_t i = 0; i < (size_t)n * sizeof *g; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 1; r < N; r++)
        TU_CHECK(all[r] == all[0], "the gradient sum differs between ranks 0 and %d", r);
    /* attn_dp_sum: rank-ordered, the same everywhere */
    double x[2] = {rank + 0.1, 1.0};
    TU_OK(attn_dp_sum(dp, ctx, x, 2), ctx);
    double w = 0;
    for (int r = 0; r < N; r++) w += r + 0.1;
    TU_CHECK(x[0] == w && x[1] == N, "attn_dp_sum: %.17g %.17g, expected %.17g %d", x[0], x[1],
             w, N);
    free(all);
    free(want);
    attn_dp_free(dp);
    attn_module_free(m);
}

static void refusals(attn_ctx *ctx) {
    attn_charlm_config c = charlm_cfg();
    c.batch = N == 2 ? 5 : 7; /* not divisible by the ranks */
    curve cv = {{0}, 0, 0};
    attn_module *m = NULL;
    attn_dp *dp = mkdp(ctx, MPI_COMM_WORLD, 0, 1, 0);
    double t0 = MPI_Wtime();
    TU_STATUS(train_charlm(ctx, c, dp, NULL, &cv, &m), ATTN_E_INVALID, ctx);
    char want[96];
    snprintf(want, sizeof want, "global batch of %lld is not divisible by the %d ranks",
             (long long)c.batch, N);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), want) != NULL, "message '%s' lacks '%s'",
             attn_ctx_errmsg(ctx), want);
    TU_CHECK(cv.n == 0 && m == NULL, "the refused run made %lld steps", (long long)cv.n);
    TU_CHECK(MPI_Wtime() - t0 < 5.0, "the refusal took %.1f s", MPI_Wtime() - t0);
    if (rank == 0) printf("refusal: %s\n", attn_ctx_errmsg(ctx));
    int64_t first = -1, count = -1;
    TU_STATUS(attn_dp_split(ctx, dp, 3 * N + 1, "batch", &first, &count), ATTN_E_INVALID, ctx);
    TU_OK(attn_dp_split(ctx, dp, 4 * N, "batch", &first, &count), ctx);
    TU_CHECK(first == 4 * rank && count == 4, "split: first %lld count %lld", (long long)first,
             (long long)count);
    attn_dates_config d = attn_dates_defaults();
    d.batch = c.batch;
    attn_train_dp hooks = attn_dp_train_hooks(dp);
    d.dp = &hooks;
    TU_STATUS(attn_dates_train(ctx, &d, NULL, NULL, NULL, &m), ATTN_E_INVALID, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "not divisible") != NULL, "dates: message '%s'",
             attn_ctx_errmsg(ctx));
    attn_dp_free(dp);
    /* bad options */
    attn_dp_options o = attn_dp_defaults();
    attn_dp *bad = NULL;
    o.timeout_s = -1;
    TU_STATUS(attn_dp_create(ctx, MPI_COMM_WORLD, &o, &bad), ATTN_E_INVALID, ctx);
    o.timeout_s = 0, o.bucket_floats = -3;
    TU_STATUS(attn_dp_create(ctx, MPI_COMM_WORLD, &o, &bad), ATTN_E_INVALID, ctx);
    setenv("ATTN_MPI_TIMEOUT", "soon", 1);
    TU_STATUS(attn_dp_create(ctx, MPI_COMM_WORLD, NULL, &bad), ATTN_E_INVALID, ctx);
    unsetenv("ATTN_MPI_TIMEOUT");
    TU_CHECK(bad == NULL, "a refused attn_dp_create returned an object");
    TU_STATUS(attn_dp_create(ctx, MPI_COMM_NULL, NULL, &bad), ATTN_E_INVALID, ctx);
    attn_dp_free(NULL);
    TU_CHECK(attn_dp_size(NULL) == 1 && attn_dp_rank(NULL) == 0, "NULL dp: size/rank");
}

/* The first step checks that the ranks start from the same parameters: one element of the last
 * parameter differs on rank 1 (by one ulp) -> ATTN_E_INVALID on every rank, quickly, naming
 * it; with the element restored the same dp trains. */
static void differ(attn_ctx *ctx) {
    attn_transformer_config t = attn_transformer_defaults(8, 2);
    t.num_encoder_layers = 1, t.num_decoder_layers = 0, t.dim_feedforward = 8;
    attn_module *m = NULL;
    TU_OK(attn_gpt_create(ctx, &t, 5, 4, &m), ctx);
    TU_OK(attn_module_enable_grad(ctx, m), ctx);
    const char *name;
    attn_tensor v;
    TU_OK(attn_module_param_at(m, attn_module_param_count(m) - 1, &name, &v), ctx);
    float *w = v.data, keep = w[0];
    if (rank == 1) w[0] = nextafterf(w[0], INFINITY);
    attn_dp *dp = mkdp(ctx, MPI_COMM_WORLD, 64, 1, 30);
    double t0 = MPI_Wtime();
    TU_STATUS(attn_dp_begin(dp, ctx, m), ATTN_E_INVALID, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "start from different parameters") != NULL,
             "rank %d: message '%s'", rank, attn_ctx_errmsg(ctx));
    TU_CHECK(MPI_Wtime() - t0 < 10.0, "the refusal took %.1f s", MPI_Wtime() - t0);
    if (rank == 0) printf("different parameters: %s\n", attn_ctx_errmsg(ctx));
    w[0] = keep; /* the same again: agreed, and a step runs */
    TU_OK(attn_dp_begin(dp, ctx, m), ctx);
    TU_OK(attn_dp_end(dp, ctx, m), ctx);
    attn_dp_free(dp);
    attn_module_free(m);
}

/* rank 1 comes 1.5 s late to the second step: the others time out after 0.3 s, and rank 1
 * times out waiting for the sums the others never send.  Last: the communicator of this dp is
 * unusable afterwards (its buffers deliberately leaked). */
static void hang(attn_ctx *ctx) {
    attn_transformer_config t = attn_transformer_defaults(8, 2);
    t.num_encoder_layers = 1, t.num_decoder_layers = 0, t.dim_feedforward = 8;
    attn_module *m = NULL;
    TU_OK(attn_gpt_create(ctx, &t, 5, 4, &m), ctx);
    TU_OK(attn_module_enable_grad(ctx, m), ctx);
    attn_dp *dp = mkdp(ctx, MPI_COMM_WORLD, 64, 1, 0.3);
    TU_OK(attn_dp_begin(dp, ctx, m), ctx); /* the agreement, and one good step */
    TU_OK(attn_dp_end(dp, ctx, m), ctx);
    if (rank == 1) {
        struct timespec ts = {1, 500000000};
        nanosleep(&ts, NULL);
    }
    double t0 = MPI_Wtime();
    attn_status s = attn_dp_begin(dp, ctx, m);
    if (s == ATTN_OK) s = attn_dp_end(dp, ctx, m);
    double dt = MPI_Wtime() - t0;
    TU_STATUS(s, ATTN_E_TIMEOUT, ctx);
    TU_CHECK(dt < 30.0, "rank %d took %.1f s to time out (0.3 s asked)", rank, dt);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "gradient sum") != NULL, "rank %d: message '%s'", rank,
             attn_ctx_errmsg(ctx));
    if (rank == 0) printf("timeout message: %s\n", attn_ctx_errmsg(ctx));
    /* unusable afterwards, said so */
    TU_STATUS(attn_dp_begin(dp, ctx, m), ATTN_E_INVALID, ctx);
    MPI_Barrier(MPI_COMM_WORLD);
    attn_dp_free(dp);
    attn_module_free(m);
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &N);
    make_text();
    attn_ctx *ctx = tu_ctx(1);
    charlm_curves(ctx);
    dates_curves(ctx);
    resume_other_ranks(ctx);
    direct_sum(ctx);
    refusals(ctx);
    if (N >= 2) differ(ctx);
    if (N >= 2) hang(ctx);
    double wmax = 0;
    MPI_Reduce(&worst_rel, &wmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%d ranks: largest relative loss difference to one process %.3g (tolerance "
               "%.0e)\n", N, wmax, LOSS_TOL);
    attn_ctx_free(ctx);
    int f = tu_failures, all = 0;
    MPI_Allreduce(&f, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    char name[64];
    snprintf(name, sizeof name, "test_dp rank %d of %d", rank, N);
    int rc = tu_finish(name);
    MPI_Finalize();
    return rc || all;
}
