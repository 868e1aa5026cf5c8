/* bench_train_step: one training step (forward + backward, parameter gradients included) with
 * the recomputing backward (attn_*_backward), with saved activations (attn_*_forward_train +
 * attn_*_backward_saved) and with per-layer checkpointing (ATTN_SAVED_CHECKPOINT), on
 *
 *   gpt      a GPT of 4 pre-norm GELU layers, E=256, H=4, F=1024, T=128, B=8, vocab 96: logits,
 *            cross-entropy and its gradient, backward (the charlm step without the optimiser);
 *   encoder  one encoder layer, B=8, L=256, E=768, H=12, F=3072 (post-norm, ReLU; the shape of
 *            `attn bench --op encoder-layer-backward --batch 8 --len 256`): forward, backward
 *            with the input gradient.
 *
 *   bench_train_step [--threads N] [--runs N] [--only gpt|encoder] [--dropout P]
 *
 * The variants run in turn within each round (recompute, saved, checkpoint, recompute, ...),
 * after one warm-up step each, so that a busy machine slows them alike; the table gives each
 * variant's median step time over the rounds and the median over the rounds of the ratio
 * recompute / variant.  Also printed: the bytes the saved variants record (attn_saved_bytes)
 * per token and layer.  Built with -DBENCH_RECOMPUTE_ONLY it times the recomputing step alone
 * (for a library without attn_saved: compare a build of an older version). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn.h"
#include "../common/bench_util.h"

static void fill(float *p, size_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = scale * ((float)(s >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
    }
}

enum { V_RECOMPUTE, V_SAVED, V_CKPT, NVAR };
static const char *vname[NVAR] = {"recompute", "saved", "checkpoint"};

typedef struct model {
    int gpt;
    attn_module *m;
    int64_t B, T, E, V, layers;
    /* gpt */
    int64_t *ids, *tgt;
    float *logits, *dlogits;
    /* encoder layer */
    float *x, *y, *dy, *dx;
} model;

static attn_status step(attn_ctx *ctx, model *md, int v, attn_saved *sv) {
    attn_status st;
    attn_module_zero_grad(md->m);
    if (md->gpt) {
        int64_t B = md->B, T = md->T, V = md->V;
        int64_t is[2] = {B, T}, ls[3] = {B, T, V}, l2[2] = {B * T, V}, ts[1] = {B * T};
        attn_tensor I = attn_tensor_make(md->ids, ATTN_I64, 2, is);
        attn_tensor Lg = attn_tensor_make(md->logits, ATTN_F32, 3, ls);
        attn_tensor Lg2 = attn_tensor_make(md->logits, ATTN_F32, 2, l2);
        attn_tensor D = attn_tensor_make(md->dlogits, ATTN_F32, 3, ls);
        attn_tensor D2 = attn_tensor_make(md->dlogits, ATTN_F32, 2, l2);
        attn_tensor Tg = attn_tensor_make(md->tgt, ATTN_I64, 1, ts);
        float loss;
#ifndef BENCH_RECOMPUTE_ONLY
        if (v != V_RECOMPUTE) {
            if ((st = attn_gpt_forward_train(ctx, md->m, &I, NULL, &Lg, sv))) return st;
            if ((st = attn_cross_entropy(ctx, &Lg2, &Tg, -100, 0.0f, &loss, &D2))) return st;
            return attn_gpt_backward_saved(ctx, md->m, sv, &D);
        }
#endif
        (void)sv;
        if ((st = attn_gpt_forward(ctx, md->m, &I, NULL, &Lg))) return st;
        if ((st = attn_cross_entropy(ctx, &Lg2, &Tg, -100, 0.0f, &loss, &D2))) return st;
        return attn_gpt_backward(ctx, md->m, &I, NULL, &D);
    }
    attn_tensor X = attn_view3(md->x, md->B, md->T, md->E), Y = attn_view3(md->y, md->B, md->T, md->E);
    attn_tensor DY = attn_view3(md->dy, md->B, md->T, md->E);
    attn_tensor DX = attn_view3(md->dx, md->B, md->T, md->E);
#ifndef BENCH_RECOMPUTE_ONLY
    if (v != V_RECOMPUTE) {
        if ((st = attn_encoder_layer_forward_train(ctx, md->m, &X, NULL, NULL, &Y, sv)))
            return st;
        return attn_encoder_layer_backward_saved(ctx, md->m, sv, &DY, &DX);
    }
#endif
    if ((st = attn_encoder_layer_forward(ctx, md->m, &X, NULL, NULL, &Y))) return st;
    return attn_encoder_layer_backward(ctx, md->m, &X, NULL, NULL, &DY, &DX);
}

static int bench(attn_ctx *ctx, model *md, const char *title, int runs) {
    int nvar = NVAR;
    attn_saved *sv[NVAR] = {NULL, NULL, NULL};
#ifdef BENCH_RECOMPUTE_ONLY
    nvar = 1;
#else
    if (attn_saved_create(ctx, 0, &sv[V_SAVED]) ||
        attn_saved_create(ctx, ATTN_SAVED_CHECKPOINT, &sv[V_CKPT])) {
        fprintf(stderr, "bench_train_step: %s\n", attn_ctx_errmsg(ctx));
        return 1;
    }
#endif
    double t[NVAR][64], ratio[NVAR][64];
    for (int v = 0; v < nvar; v++) { /* warm-up: workspace and tapes reach their sizes */
        attn_status st = step(ctx, md, v, sv[v]);
        if (st) {
            fprintf(stderr, "bench_train_step: %s: %s\n", vname[v], attn_ctx_errmsg(ctx));
            return 1;
        }
    }
    for (int r = 0; r < runs; r++)
        for (int v = 0; v < nvar; v++) {
            double t0 = attn_bench_now_s();
            step(ctx, md, v, sv[v]);
            t[v][r] = (attn_bench_now_s() - t0) * 1e3;
        }
    for (int r = 0; r < runs; r++)
        for (int v = 0; v < nvar; v++) ratio[v][r] = t[V_RECOMPUTE][r] / t[v][r];
    int64_t tokens = md->B * md->T;
    printf("%s (%lld tokens, %lld layer%s)\n", title, (long long)tokens, (long long)md->layers,
           md->layers > 1 ? "s" : "");
    printf("  %-11s %10s %12s %20s\n", "variant", "ms/step", "recompute/x", "recorded KiB/token/layer");
    for (int v = 0; v < nvar; v++) {
        double kib = 0;
#ifndef BENCH_RECOMPUTE_ONLY
        if (sv[v]) kib = (double)attn_saved_bytes(sv[v]) / 1024.0 / (double)tokens / (double)md->layers;
#endif
        printf("  %-11s %10.1f %12.3f", vname[v], attn_bench_median(t[v], runs), attn_bench_median(ratio[v], runs));
        if (sv[v]) printf(" %20.2f", kib);
        printf("\n");
        printf("RESULT %s %s ms %.3f ratio %.4f\n", md->gpt ? "gpt" : "encoder", vname[v],
               attn_bench_median(t[v], runs), attn_bench_median(ratio[v], runs));
    }
#ifndef BENCH_RECOMPUTE_ONLY
    attn_saved_free(sv[V_SAVED]);
    attn_saved_free(sv[V_CKPT]);
#endif
    return 0;
}

int main(int argc, char **argv) {
    int threads = 2, runs = 5;
    const char *only = NULL;
    float dropout = 0.0f;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--dropout") && i + 1 < argc) dropout = (float)atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_train_step [--threads N] [--runs N] [--only gpt|encoder] "
                            "[--dropout P]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 64) runs = 5;
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    attn_ctx *ctx;
    if (attn_ctx_create(&p, &ctx) != ATTN_OK) return 1;
    int rc = 0;
    if (!only || !strcmp(only, "gpt")) {
        model md;
        memset(&md, 0, sizeof md);
        md.gpt = 1, md.B = 8, md.T = 128, md.E = 256, md.V = 96, md.layers = 4;
        attn_transformer_config c = attn_transformer_defaults(256, 4);
        c.dim_feedforward = 1024, c.num_encoder_layers = 4, c.norm_first = 1;
        c.activation = ATTN_ACT_GELU, c.dropout = dropout;
        if (attn_gpt_create(ctx, &c, md.V, md.T, &md.m) || attn_module_init(ctx, md.m, 1) ||
            attn_module_enable_grad(ctx, md.m))
            return 1;
        size_t n = (size_t)(md.B * md.T);
        md.ids = malloc(n * sizeof *md.ids), md.tgt = malloc(n * sizeof *md.tgt);
        md.logits = malloc(n * (size_t)md.V * sizeof(float));
        md.dlogits = malloc(n * (size_t)md.V * sizeof(float));
        for (size_t i = 0; i < n; i++) md.ids[i] = (int64_t)((i * 37 + 11) % 96), md.tgt[i] = (int64_t)((i * 53 + 5) % 96);
        char title[160];
        snprintf(title, sizeof title, "gpt: 4 layers, E=256, H=4, F=1024, T=128, B=8, V=96, "
                 "dropout %g, %d threads", (double)dropout, threads);
        rc |= bench(ctx, &md, title, runs);
        free(md.ids), free(md.tgt), free(md.logits), free(md.dlogits);
        attn_module_free(md.m);
    }
    if (!only || !strcmp(only, "encoder")) {
        model md;
        memset(&md, 0, sizeof md);
        md.B = 8, md.T = 256, md.E = 768, md.layers = 1;
        attn_transformer_config c = attn_transformer_defaults(768, 12);
        c.dim_feedforward = 3072, c.dropout = dropout;
        if (attn_encoder_layer_create(ctx, &c, &md.m) || attn_module_init(ctx, md.m, 1) ||
            attn_module_enable_grad(ctx, md.m))
            return 1;
        size_t n = (size_t)(md.B * md.T * md.E);
        md.x = malloc(n * sizeof(float)), md.y = malloc(n * sizeof(float));
        md.dy = malloc(n * sizeof(float)), md.dx = malloc(n * sizeof(float));
        fill(md.x, n, 1, 1.0f), fill(md.dy, n, 2, 1e-3f);
        char title[160];
        snprintf(title, sizeof title, "encoder layer: B=8, L=256, E=768, H=12, F=3072, "
                 "dropout %g, %d threads", (double)dropout, threads);
        rc |= bench(ctx, &md, title, runs);
        free(md.x), free(md.y), free(md.dy), free(md.dx);
        attn_module_free(md.m);
    }
    attn_ctx_free(ctx);
    return rc;
}
