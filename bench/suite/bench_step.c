/* attn bench --op gpt-step: one whole GPT training step through the public API, timed in the
 * one training loop, attn_train_run (src/train/loop.c), as every training command runs it:
 *
 *   attn_module_zero_grad;  the task's forward: attn_gpt_forward_train (token + position
 *   embedding, N pre-norm GELU blocks with causal self-attention, final layer norm, LM head
 *   tied to the token embedding as in GPT-2; activations recorded in the loop's attn_saved),
 *   attn_cross_entropy (mean over B*T tokens, and its gradient);  the task's backward:
 *   attn_gpt_backward_saved;  no clipping and no gradient norm (clip -1, as before and as the
 *   PyTorch twin);  attn_adamw_step (constant lr 3e-4: warmup 0, lr_min = lr)
 *
 * on one random batch (the same batch every step), dropout 0; with --dtype bf16 on a context
 * created with ATTN_CTX_BF16_MATMUL (every linear product on bf16 operands, float sums: mixed
 * precision, as torch.autocast(bfloat16)).  It prints the median step time,
 * tokens/s, GFLOP/s against the FMA peak, peak RSS and the loss of every step (the warm-up
 * step first; a step is the time between two of the loop's progress calls), so that a twin in another framework, started from the same weights (--save-init
 * writes them with the batch), can check it computes the same steps before it is timed
 * (bench/attn_vs_torch.py does so with PyTorch). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

/* FLOPs of one step (a multiply-add counts 2), the usual model count: 3 x the forward's
 * matrix products (the backward does two per forward one), with E = heads * head_dim, N =
 * layers, BT = batch * len tokens:
 *   per layer  2*BT*(4*E*E + 2*E*4E)     q, k, v, out projections and the 4E feed-forward
 *              + 2*BT*len*E              scores and weighted sum, halved by the causal mask
 *   head       2*BT*E*vocab            (tied to the token embedding)
 * Embedding lookups, norms, biases, activations, softmax and the optimiser are not counted. */
static double gpt_flops(const attn_bench_gpt *o) {
    double E = (double)o->heads * (double)o->head_dim, BT = (double)o->batch * (double)o->len;
    double layer = 2.0 * BT * (12.0 * E * E) + 2.0 * BT * (double)o->len * E;
    return 3.0 * ((double)o->layers * layer + 2.0 * BT * E * (double)o->vocab);
}

static int fail(attn_ctx *ctx, attn_status st) { return attn_cli_fail(ctx, "bench", st); }

#define TRY(expr)                                                                             \
    do {                                                                                      \
        attn_status try_st_ = (expr);                                                         \
        if (try_st_ != ATTN_OK) return try_st_;                                               \
    } while (0)

/* The bench's task: the same batch every step; each phase timed where the loop hands over:
 * before the forward (after the previous step's progress call: zero_grad), the forward, the
 * loss, the backward, then until the progress call (AdamW). */
typedef struct gpt_task {
    attn_module *m;
    attn_tensor ids, lg, lg2, dlg, dlg2, tgt;
    attn_run run;
    int64_t ntok;
    int repeat;
    double mark;      /* the last time taken */
    double ph[5];     /* this step's phases so far */
    double *tph[5];   /* per timed step */
    double *t;        /* per timed step: between two progress calls */
    float *losses;
    size_t saved;     /* attn_saved_bytes after a forward */
    attn_saved *sv_seen;
} gpt_task;

static attn_status gpt_forward(void *user, attn_ctx *ctx, int64_t step, int share, int shares,
                               attn_saved *sv, attn_train_share *out) {
    gpt_task *k = user;
    (void)step, (void)share, (void)shares;
    double t0 = attn_bench_now_s();
    k->ph[0] = t0 - k->mark;
    TRY(attn_gpt_forward_train(ctx, k->m, &k->ids, &k->run, &k->lg, sv));
    double t1 = attn_bench_now_s();
    k->ph[1] = t1 - t0;
    TRY(attn_cross_entropy(ctx, &k->lg2, &k->tgt, -100, 0.0f, &out->loss, &k->dlg2));
    k->mark = attn_bench_now_s();
    k->ph[2] = k->mark - t1;
    k->sv_seen = sv;
    out->count = out->count_step = out->items = (double)k->ntok;
    return ATTN_OK;
}

static attn_status gpt_backward(void *user, attn_ctx *ctx, attn_saved *sv, float scale) {
    gpt_task *k = user;
    (void)scale; /* one share: 1 */
    TRY(attn_gpt_backward_saved(ctx, k->m, sv, &k->dlg));
    double t = attn_bench_now_s();
    k->ph[3] = t - k->mark;
    k->mark = t;
    return ATTN_OK;
}

/* After each step: its loss, and (after the warm-up step 1) its time and phases. */
static int gpt_progress(void *user, const attn_train_progress *p) {
    gpt_task *k = user;
    double now = attn_bench_now_s();
    k->ph[4] = now - k->mark;
    int i = (int)p->step - 1; /* 0: the warm-up */
    k->losses[i] = p->loss;
    if (i > 0) {
        double sum = 0;
        for (int ph = 0; ph < 5; ph++) k->tph[ph][i - 1] = k->ph[ph], sum += k->ph[ph];
        k->t[i - 1] = sum;
    }
    if (k->sv_seen) k->saved = attn_saved_bytes(k->sv_seen);
    k->mark = now;
    return 0;
}

int attn_bench_gpt_step(const attn_bench_gpt *o) {
    const int64_t B = o->batch, T = o->len, V = o->vocab, H = o->heads, E = H * o->head_dim;
    const int64_t N = B * T;
    int repeat = (int)o->repeat, rc = 1;
    /* the largest buffers are the logits and their gradient, N*V floats each */
    if ((double)N * (double)V * sizeof(float) > 16.0 * 1024 * 1024 * 1024 ||
        (double)E * (double)E * 4 > 16.0 * 1024 * 1024 * 1024) {
        fprintf(stderr, "attn bench: problem too large (logits of %.0f GiB)\n",
                (double)N * (double)V * sizeof(float) / (1024.0 * 1024 * 1024));
        return 1;
    }
    const char *isa;
    double peak = attn_bench_fma_peak((int)o->threads, &isa);
    double rss0 = attn_bench_rss_mib();

    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = (int)o->threads;
    p.flags = o->bf16 ? ATTN_CTX_BF16_MATMUL : 0;
    attn_ctx *ctx = NULL;
    attn_status st = attn_ctx_create(&p, &ctx);
    if (st != ATTN_OK) {
        fprintf(stderr, "attn bench: cannot create a context (%s)\n", attn_status_name(st));
        return 1;
    }
    attn_module *m = NULL;
    int64_t *ids = malloc(sizeof *ids * (size_t)N), *tgt = malloc(sizeof *tgt * (size_t)N);
    float *logits = malloc(sizeof(float) * (size_t)N * (size_t)V);
    float *dlogits = malloc(sizeof(float) * (size_t)N * (size_t)V);
    double *t = calloc((size_t)repeat, sizeof *t);
    float *losses = calloc((size_t)repeat + 1, sizeof *losses);
    /* per phase: zero_grad, forward, loss, backward, optimiser */
    double *tph[5] = {calloc((size_t)repeat, sizeof(double)), calloc((size_t)repeat, sizeof(double)),
                      calloc((size_t)repeat, sizeof(double)), calloc((size_t)repeat, sizeof(double)),
                      calloc((size_t)repeat, sizeof(double))};
    gpt_task k;
    memset(&k, 0, sizeof k);
    if (!ids || !tgt || !logits || !dlogits || !t || !losses || !tph[0] || !tph[1] || !tph[2] ||
        !tph[3] || !tph[4]) {
        fprintf(stderr, "attn bench: out of memory for the batch and the logits\n");
        goto done;
    }
    /* a batch of random tokens, each target the next token (a fixed LCG, any V) */
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int64_t i = 0; i < N + B; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int64_t id = (int64_t)((x >> 33) % (uint64_t)V);
        int64_t b = i / (T + 1), kk = i % (T + 1);
        if (b >= B) break;
        if (kk < T) ids[b * T + kk] = id;
        if (kk > 0) tgt[b * T + kk - 1] = id;
    }

    attn_transformer_config c = attn_transformer_defaults(E, H);
    c.dim_feedforward = 4 * E;
    c.dropout = 0.0f;
    c.activation = ATTN_ACT_GELU;
    c.norm_first = 1;
    c.num_encoder_layers = o->layers;
    /* AdamW at a constant lr (warmup 0, lr_min = lr); no clipping, no norm (clip < 0) */
    attn_train_options to = attn_train_defaults();
    to.steps = repeat + 1; /* step 1 is the warm-up */
    to.lr = to.lr_min = 3e-4f;
    to.weight_decay = 0.1f;
    to.clip = -1.0f;
    if ((st = attn_gpt_create_ex(ctx, &c, V, T, ATTN_GPT_TIED, &m)) != ATTN_OK ||
        (st = attn_module_init(ctx, m, 1)) != ATTN_OK) {
        fail(ctx, st);
        goto done;
    }
    if (o->save_init) { /* the weights before the first step, and the batch */
        attn_st_writer *w = NULL;
        int64_t bs[2] = {B, T};
        char buf[32];
        if ((st = attn_st_writer_create(ctx, &w)) == ATTN_OK)
            st = attn_module_save(ctx, m, w, "");
        if (st == ATTN_OK) st = attn_st_writer_add(w, "data.ids", ATTN_I64, 2, bs, ids);
        if (st == ATTN_OK) st = attn_st_writer_add(w, "data.targets", ATTN_I64, 2, bs, tgt);
        snprintf(buf, sizeof buf, "%lld", o->heads);
        if (st == ATTN_OK) st = attn_st_writer_meta(w, "heads", buf);
        snprintf(buf, sizeof buf, "%.9g", (double)to.lr);
        if (st == ATTN_OK) st = attn_st_writer_meta(w, "adamw.lr", buf);
        snprintf(buf, sizeof buf, "%.9g", (double)to.weight_decay);
        if (st == ATTN_OK) st = attn_st_writer_meta(w, "adamw.weight_decay", buf);
        if (st == ATTN_OK) st = attn_st_writer_save(w, o->save_init);
        attn_st_writer_free(w);
        if (st != ATTN_OK) {
            fail(ctx, st);
            goto done;
        }
    }
    {
        int64_t is[2] = {B, T}, ls[3] = {B, T, V}, l2[2] = {N, V}, ts[1] = {N};
        k.m = m, k.ntok = N, k.repeat = repeat;
        k.ids = attn_tensor_make(ids, ATTN_I64, 2, is);
        k.lg = attn_tensor_make(logits, ATTN_F32, 3, ls);
        k.lg2 = attn_tensor_make(logits, ATTN_F32, 2, l2);
        k.dlg = attn_tensor_make(dlogits, ATTN_F32, 3, ls);
        k.dlg2 = attn_tensor_make(dlogits, ATTN_F32, 2, l2);
        k.tgt = attn_tensor_make(tgt, ATTN_I64, 1, ts);
        k.run = (attn_run){0, 1, 0, 0};
        k.t = t, k.losses = losses;
        for (int ph = 0; ph < 5; ph++) k.tph[ph] = tph[ph];
        attn_train_task task = {"bench-gpt-step", "tokens", m, &k, gpt_forward, gpt_backward,
                                NULL, NULL, NULL, 0};
        to.progress = gpt_progress, to.user = &k;
        k.mark = attn_bench_now_s();
        if ((st = attn_train_run(ctx, &task, &to, NULL, NULL)) != ATTN_OK) {
            fail(ctx, st);
            goto done;
        }
    }
    {
        double med = attn_bench_median(t, repeat), fl = gpt_flops(o);
        double gf = med > 0 ? fl / med * 1e-9 : 0, tps = med > 0 ? (double)N / med : 0;
        double rss = attn_bench_rss_mib();
        size_t saved = k.saved;
        int64_t params = attn_module_numel(m);
        if (o->json) {
            printf("{\"op\": \"gpt-step\", \"layers\": %lld, \"heads\": %lld, \"dim\": %lld, "
                   "\"d_model\": %lld, \"len\": %lld, \"batch\": %lld, \"vocab\": %lld, "
                   "\"threads\": %lld, \"repeat\": %d, \"params\": %lld, \"matmul\": \"%s\", "
                   "\"gflop_per_step\": %.4f, \"fma_peak_gflops\": %.2f, \"fma_isa\": \"%s\", "
                   "\"median_ms\": %.3f, \"tokens_per_s\": %.1f, \"gflops\": %.3f, "
                   "\"pct_peak\": %.2f, \"peak_rss_mib\": %.1f, \"rss_growth_mib\": %.1f, "
                   "\"saved_mib\": %.1f, \"phase_ms\": {\"zero_grad\": %.3f, \"forward\": %.3f, "
                   "\"loss\": %.3f, \"backward\": %.3f, \"optimizer\": %.3f}, \"losses\": [",
                   o->layers, o->heads, o->head_dim, (long long)E, o->len, o->batch, o->vocab,
                   o->threads, repeat, (long long)params, o->bf16 ? "bf16" : "f32", fl * 1e-9, peak, isa, med * 1e3, tps,
                   gf, peak > 0 ? 100 * gf / peak : 0, rss, rss - rss0,
                   (double)saved / (1024.0 * 1024), 1e3 * attn_bench_median(tph[0], repeat),
                   1e3 * attn_bench_median(tph[1], repeat), 1e3 * attn_bench_median(tph[2], repeat),
                   1e3 * attn_bench_median(tph[3], repeat), 1e3 * attn_bench_median(tph[4], repeat));
            for (int i = 0; i <= repeat; i++)
                printf("%.9g%s", (double)losses[i], i == repeat ? "" : ", ");
            printf("]}\n");
        } else {
            printf("attn bench: gpt-step  %lld layers, E=%lld (H=%lld x %lld), T=%lld, B=%lld, "
                   "vocab %lld, %lld parameters, %lld thread%s, %s products\n",
                   o->layers, (long long)E, o->heads, o->head_dim, o->len, o->batch, o->vocab,
                   (long long)params, o->threads, o->threads == 1 ? "" : "s",
                   o->bf16 ? "bf16-operand (mixed precision)" : "f32");
            printf("FMA peak: %.1f GFLOP/s (%s); %.2f GFLOP per step\n\n", peak, isa, fl * 1e-9);
            printf("  median ms/step %10.1f   (%d steps after a warm-up)\n", med * 1e3, repeat);
            printf("  tokens/s       %10.0f\n", tps);
            printf("  GFLOP/s        %10.1f   (%.1f%% of the FMA peak)\n", gf,
                   peak > 0 ? 100 * gf / peak : 0);
            printf("  phases ms      zero_grad %.1f, forward %.1f, loss %.1f, backward %.1f, "
                   "optimiser %.1f (medians)\n",
                   1e3 * attn_bench_median(tph[0], repeat), 1e3 * attn_bench_median(tph[1], repeat),
                   1e3 * attn_bench_median(tph[2], repeat), 1e3 * attn_bench_median(tph[3], repeat),
                   1e3 * attn_bench_median(tph[4], repeat));
            printf("  peak RSS MiB   %10.0f   (activations saved: %.1f MiB)\n", rss,
                   (double)saved / (1024.0 * 1024));
            printf("  loss           %.4f (warm-up step) -> %.4f (step %d)\n", (double)losses[0],
                   (double)losses[repeat], repeat);
        }
    }
    rc = 0;
done:
    free(ids), free(tgt), free(logits), free(dlogits), free(t), free(losses);
    for (int ph = 0; ph < 5; ph++) free(tph[ph]);
    attn_module_free(m);
    attn_ctx_free(ctx);
    return rc;
}
