/* attn bench --op dp-step: one data-parallel GPT training step, so that N ranks x T threads can
 * be compared with one process on N x T threads for the same global batch:
 *
 *   mpirun -np 2 attn bench --op dp-step --threads 1      (2 ranks x 1 thread)
 *   attn bench --op dp-step --threads 2                   (1 process x 2 threads)
 *
 * A step of the one training loop, attn_train_run (src/train/loop.c), as attn train charlm
 * runs it: zero the gradients, the task's forward (attn_gpt_forward_train on this rank's
 * batch/N sequences, cross-entropy), attn_dp_begin, the task's backward (the loss gradient
 * scaled by 1/N, attn_gpt_backward_saved: gradient buckets summed over the ranks while it
 * runs), attn_dp_end and the sum of the step's loss, clipping, AdamW (constant lr 1e-4).  One
 * warm-up step, then --repeat timed ones: a step is the time between two of the loop's
 * progress calls (which follow the ranks' sum of the loss), the slowest rank's.  Then --repeat gradient sums alone (attn_dp_begin and
 * attn_dp_end with no backward between: every bucket starts at once), to tell how much of the
 * communication the backward hid.  Outside mpirun (or in a build without -DATTN_MPI=ON) the
 * same step runs in one process without attn_dp. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

#ifdef ATTN_HAVE_MPI
#include "attn_mpi.h"
#endif

typedef struct dp_opts {
    long long B, T, layers, heads, dim, vocab, threads, repeat, bucket;
    int no_overlap;
} dp_opts;

static double slowest(double t) {
#ifdef ATTN_HAVE_MPI
    int on = 0;
    MPI_Initialized(&on);
    if (on && attn_cli_dp_size() > 1) {
        double m = t;
        MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return m;
    }
#endif
    return t;
}

static void barrier(void) {
#ifdef ATTN_HAVE_MPI
    if (attn_cli_dp_size() > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

/* The bench's task: this rank's rows of one fixed global batch, every step. */
typedef struct dp_task {
    attn_module *m;
    attn_tensor ids, lg, lg2, dlg, dlg2, tgt;
    float *dlg_data;
    size_t ndlg;
    double count, count_step;
    double mark, *ts, loss_first;
} dp_task;

static attn_status dp_forward(void *user, attn_ctx *ctx, int64_t step, int share, int shares,
                              attn_saved *sv, attn_train_share *out) {
    dp_task *k = user;
    (void)step, (void)share, (void)shares;
    attn_status st = attn_gpt_forward_train(ctx, k->m, &k->ids, NULL, &k->lg, sv);
    if (st == ATTN_OK)
        st = attn_cross_entropy(ctx, &k->lg2, &k->tgt, -100, 0.0f, &out->loss, &k->dlg2);
    out->count = k->count, out->count_step = k->count_step, out->items = k->count;
    return st;
}

static attn_status dp_backward(void *user, attn_ctx *ctx, attn_saved *sv, float scale) {
    dp_task *k = user;
    if (scale != 1.0f) /* this rank's share of the global mean */
        for (size_t i = 0; i < k->ndlg; i++) k->dlg_data[i] *= scale;
    return attn_gpt_backward_saved(ctx, k->m, sv, &k->dlg);
}

/* After each step (every rank, the loss already summed): the first step's global loss; the
 * others' times, the slowest rank's. */
static int dp_progress(void *user, const attn_train_progress *p) {
    dp_task *k = user;
    double now = attn_bench_now_s(), t = slowest(now - k->mark);
    if (p->step == 1) k->loss_first = p->loss;
    else k->ts[p->step - 2] = t;
    k->mark = attn_bench_now_s();
    return 0;
}

static int run(const dp_opts *o) {
    const int N = attn_cli_dp_size(), rank = attn_cli_dp_rank();
    const int64_t B = o->B, T = o->T, V = o->vocab, Bl = B / N;
    attn_ctx *ctx = NULL;
    attn_module *m = NULL;
    int64_t *ids = NULL, *tgt = NULL;
    float *lg = NULL, *dlg = NULL;
    double *ts = NULL, *tc = NULL;
    int rc = 1;
    attn_status st;
    const attn_train_dp *hooks = NULL;
#ifdef ATTN_HAVE_MPI
    attn_dp *dp = NULL;
    attn_train_dp dp_hooks;
#endif
    if (attn_cli_ctx("bench", o->threads, 0, &ctx)) return 1;
    if (B % N) {
        if (rank == 0)
            fprintf(stderr, "attn bench: the global batch of %lld is not divisible by the %d "
                            "ranks\n", (long long)B, N);
        goto out;
    }
    attn_transformer_config tc_ = attn_transformer_defaults(o->heads * o->dim, o->heads);
    tc_.num_encoder_layers = o->layers, tc_.num_decoder_layers = 0;
    tc_.dim_feedforward = 4 * o->heads * o->dim, tc_.activation = ATTN_ACT_GELU;
    tc_.norm_first = 1, tc_.dropout = 0;
    if ((st = attn_gpt_create(ctx, &tc_, V, T, &m)) != ATTN_OK ||
        (st = attn_module_init(ctx, m, 1)) != ATTN_OK) {
        attn_cli_fail(ctx, "bench", st);
        goto out;
    }
    size_t n = (size_t)(Bl * T);
    ids = malloc(n * sizeof *ids), tgt = malloc(n * sizeof *tgt);
    lg = malloc(n * (size_t)V * sizeof *lg), dlg = malloc(n * (size_t)V * sizeof *dlg);
    ts = malloc((size_t)o->repeat * sizeof *ts), tc = malloc((size_t)o->repeat * sizeof *tc);
    if (!ids || !tgt || !lg || !dlg || !ts || !tc) {
        fprintf(stderr, "attn bench: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < n; i++) { /* this rank's rows of one fixed global batch */
        uint64_t g = (uint64_t)rank * n + i;
        ids[i] = (int64_t)((g * 2654435761u) % (uint64_t)V);
        tgt[i] = (int64_t)((g * 40503u + 7) % (uint64_t)V);
    }
#ifdef ATTN_HAVE_MPI
    if (N > 1) {
        attn_dp_options dpo = attn_dp_defaults();
        dpo.overlap = !o->no_overlap, dpo.bucket_floats = o->bucket;
        if ((st = attn_dp_create(ctx, MPI_COMM_WORLD, &dpo, &dp)) != ATTN_OK) {
            attn_cli_fail(ctx, "bench", st);
            goto out;
        }
        dp_hooks = attn_dp_train_hooks(dp);
        hooks = &dp_hooks;
    }
#endif
    int64_t is[2] = {Bl, T}, ls[3] = {Bl, T, V}, l2[2] = {Bl * T, V}, t1[1] = {Bl * T};
    dp_task k;
    memset(&k, 0, sizeof k);
    k.m = m;
    k.ids = attn_tensor_make(ids, ATTN_I64, 2, is);
    k.lg = attn_tensor_make(lg, ATTN_F32, 3, ls), k.lg2 = attn_tensor_make(lg, ATTN_F32, 2, l2);
    k.dlg = attn_tensor_make(dlg, ATTN_F32, 3, ls), k.dlg2 = attn_tensor_make(dlg, ATTN_F32, 2, l2);
    k.tgt = attn_tensor_make(tgt, ATTN_I64, 1, t1);
    k.dlg_data = dlg, k.ndlg = n * (size_t)V;
    k.count = (double)(Bl * T), k.count_step = (double)(B * T);
    k.ts = ts;
    /* AdamW at a constant lr 1e-4 (its default weight decay), the gradient clipped to norm 1 */
    attn_train_options to = attn_train_defaults();
    to.steps = o->repeat + 1; /* step 1 is the warm-up */
    to.lr = to.lr_min = 1e-4f;
    to.weight_decay = attn_adamw_defaults().weight_decay;
    to.clip = 1.0f;
    to.dp = hooks;
    to.progress = dp_progress, to.user = &k;
    attn_train_task task = {"bench-dp-step", "tokens", m, &k, dp_forward, dp_backward,
                            NULL, NULL, NULL, 0};
    barrier();
    k.mark = attn_bench_now_s();
    if ((st = attn_train_run(ctx, &task, &to, NULL, NULL)) != ATTN_OK) {
        attn_cli_fail(ctx, "bench", st);
#ifdef ATTN_HAVE_MPI
        if (N > 1) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
        goto out;
    }
    double loss_first = k.loss_first;
    double exposed = 0, alone = 0, hook = 0, kib = 0;
#ifdef ATTN_HAVE_MPI
    if (dp) {
        attn_dp_stats s;
        attn_dp_stats_get(dp, &s);
        exposed = s.exposed_s / (double)s.steps, hook = s.hook_s / (double)s.steps;
        kib = (double)s.bytes / (double)s.steps / 1024.0;
        for (int it = 0; it < (int)o->repeat; it++) { /* the gradient sum alone */
            barrier();
            double t0 = attn_bench_now_s();
            if ((st = attn_dp_begin(dp, ctx, m)) != ATTN_OK ||
                (st = attn_dp_end(dp, ctx, m)) != ATTN_OK) {
                attn_cli_fail(ctx, "bench", st);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            tc[it] = slowest(attn_bench_now_s() - t0);
        }
        alone = attn_bench_median(tc, (int)o->repeat);
    }
#endif
    double med = attn_bench_median(ts, (int)o->repeat);
    if (rank == 0) {
        printf("dp-step: GPT %lld layers, d_model %lld, vocab %lld, %lld parameters; global "
               "batch %lld x %lld tokens; %d rank%s x %d thread%s (%lld sequences each)\n",
               o->layers, o->heads * o->dim, (long long)V, (long long)attn_module_numel(m),
               (long long)B, (long long)T, N, N == 1 ? "" : "s", attn_ctx_threads(ctx),
               attn_ctx_threads(ctx) == 1 ? "" : "s", (long long)Bl);
        printf("step: median %.1f ms of %lld (the slowest rank's), %.0f tokens/s; first loss "
               "%.6f\n", 1e3 * med, o->repeat, (double)(B * T) / med, loss_first);
        if (N > 1)
            printf("gradient sum: %.0f KiB sent per rank per step; alone %.1f ms; left after "
                   "the backward %.1f ms (%s; includes waiting for the slowest rank), so %.0f%% "
                   "hidden; %.2f ms in the gradient-ready hook\n",
                   kib, 1e3 * alone, 1e3 * exposed, o->no_overlap ? "no overlap" : "overlap",
                   alone > 0 ? fmax(0.0, 100.0 * (1.0 - exposed / alone)) : 0.0, 1e3 * hook);
    }
    rc = 0;
out:
#ifdef ATTN_HAVE_MPI
    attn_dp_free(dp);
#endif
    free(ids), free(tgt), free(lg), free(dlg), free(ts), free(tc);
    attn_module_free(m);
    attn_ctx_free(ctx);
    return rc;
}

int attn_bench_dp(int argc, char **argv) {
    dp_opts o = {8, 128, 4, 4, 64, 8192, 0, 5, 0, 0};
    int npos, op = 0;
    const attn_cli_opt table[] = {
        ATTN_OPT_CHOICE("op", 0, &op, "dp-step", "NAME", "dp-step"),
        ATTN_OPT_INT("batch", 0, &o.B, 1, 1 << 20, "B",
                     "global batch: sequences per step over all ranks (default 8)"),
        ATTN_OPT_INT("len", 0, &o.T, 1, 1 << 20, "T", "tokens per sequence (default 128)"),
        ATTN_OPT_INT("layers", 0, &o.layers, 1, 1 << 10, "N", "GPT blocks (default 4)"),
        ATTN_OPT_INT("heads", 0, &o.heads, 1, 1 << 10, "H", "heads (default 4)"),
        ATTN_OPT_INT("dim", 0, &o.dim, 1, 1 << 12, "D", "head dimension (default 64)"),
        ATTN_OPT_INT("vocab", 0, &o.vocab, 2, 1 << 24, "V", "vocabulary (default 8192)"),
        ATTN_OPT_INT("bucket", 0, &o.bucket, 0, 1 << 28, "N",
                     "gradient elements per bucket (default 0: 2^18)"),
        ATTN_OPT_FLAG("no-overlap", 0, &o.no_overlap,
                      "start every bucket after the backward (for comparison)"),
        ATTN_OPT_THREADS(&o.threads),
        ATTN_OPT_INT("repeat", 0, &o.repeat, 1, 100000, "N", "timed steps (default 5)"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "bench --op dp-step", "[mpirun -np N] attn bench --op dp-step [options]",
        "Times one data-parallel GPT training step of the training loop, attn_train_run\n"
        "(forward, cross-entropy, backward with the gradients summed over the ranks during\n"
        "it, clipping, AdamW) for a global batch split over the ranks of mpirun (or one\n"
        "process outside mpirun), and how much of the gradient sum the backward hid.\n"
        "Compare 'mpirun -np 2 ... --threads 1' with '--threads 2' in one process: the\n"
        "same global batch.",
        table, NULL,
        "mpirun -np 2 attn bench --op dp-step --threads 1\n"
        "attn bench --op dp-step --threads 2"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if ((double)o.B * (double)o.T * (double)o.vocab * 4.0 > 8.0 * 1024 * 1024 * 1024) {
        fprintf(stderr, "attn bench: problem too large (logits over 8 GiB)\n");
        return 1;
    }
    if (attn_cli_dp_init("bench")) return 1;
    return attn_cli_dp_finish(run(&o));
}
