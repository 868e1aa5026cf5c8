/* The one block (attn__block, src/layers/block.c) in the configurations no model of the
 * library uses yet, so that no other test reaches them: post-norm RMSNorm, LayerNorm blocks
 * with the gated feed-forward (SwiGLU, GEGLU), sandwich norms with dropout and cross-attention,
 * RMSNorm with cross-attention.  (The Transformer layers, ViT, BERT and the five LLM families
 * test the configurations they use against PyTorch and transformers.)
 *
 * Forward: against the block composed here from its pieces, unfused (norm, the sublayer with
 * no epilogue, the sandwich norm, dropout, the add, the post-norm, each a separate call): within
 * 1e-5 of max(1, max|ref|).  With a record, the same bits as without.  Backward: every gradient
 * (x, memory, every parameter) along random directions u against the central difference of
 * sum(dout * out) through the forward (float, step 3e-3): |<grad, u> - fd| <= 2e-3 (sum
 * |g_i u_i| + 1e-3); measured at most 3e-4.  ReLU's kinks keep the step from being smaller,
 * and ReLU with dropout sits near a kink with these inputs, so it is checked without.  A
 * dropped term (a norm's backward, a residual, the dropout mask, the memory's gradient) is off
 * by far more.  The recomputing backward has the recorded one's bits, and 1 and 2 threads give
 * the same bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/layers/llm.h"
#include "../src/layers/transformer.h"
#include "testutil.h"

enum { B = 2, T = 5, S = 4, E = 8, H = 2, F = 12 };

typedef struct cfg {
    const char *name;
    int pre, sandwich, cross, glu, rms, act; /* act: attn_activation, or (glu) 0 SiLU 1 GELU */
    float p;
} cfg;

static void rng_fill(float *x, int64_t n, unsigned *s, float a, float c) {
    for (int64_t i = 0; i < n; i++) {
        *s = *s * 1664525u + 1013904223u;
        x[i] = c + a * ((float)(*s >> 8) / 8388608.0f - 1.0f);
    }
}

/* Carves the block's parameters out of arena (NULL: only counts them); returns the count. */
static int64_t build(const cfg *c, float *arena, attn__block *b) {
    int64_t n = 0;
#define TAKE(cnt) (arena ? arena + (n += (cnt)) - (cnt) : (n += (cnt), (float *)NULL))
    memset(b, 0, sizeof *b);
    b->E = E, b->pre = c->pre, b->sandwich = c->sandwich, b->cross = c->cross, b->glu = c->glu;
    b->act = (attn_activation)c->act, b->p = c->p;
    for (int s = 0; s < 1 + c->cross; s++) {
        float *wi = TAKE(3 * E * E), *bi = TAKE(3 * E), *wo = TAKE(E * E), *bo = TAKE(E);
        if (arena) attn__attention_mha_bind(&b->at[s], E, H, wi, bi, wo, bo);
    }
    for (int s = 0; s < ATTN__SUB_N; s++) {
        if (s == ATTN__SUB_CROSS && !c->cross) continue;
        attn__ln *nm[2] = {&b->norm[s], &b->post[s]};
        for (int k = 0; k < 1 + c->sandwich; k++) {
            nm[k]->E = E, nm[k]->eps = 1e-5f, nm[k]->rms = c->rms;
            nm[k]->weight = TAKE(E);
            nm[k]->bias = c->rms ? NULL : TAKE(E);
        }
    }
    if (c->glu) {
        float *g = TAKE(F * E), *u = TAKE(F * E), *d = TAKE(E * F);
        b->mlp.E = E, b->mlp.F = F, b->mlp.act = c->act;
        b->mlp.gate = attn__weight_f32(g, NULL, F, E);
        b->mlp.up = attn__weight_f32(u, NULL, F, E);
        b->mlp.down = attn__weight_f32(d, NULL, E, F);
    } else {
        b->l1.weight = TAKE(F * E), b->l1.bias = TAKE(F), b->l1.in = E, b->l1.out = F;
        b->l2.weight = TAKE(E * F), b->l2.bias = TAKE(E), b->l2.in = F, b->l2.out = E;
    }
#undef TAKE
    return n;
}

static attn__block_io io_of(const float *mem, attn__rng *rng) {
    attn__block_io io;
    memset(&io, 0, sizeof io);
    io.B = B, io.T = T, io.S = S, io.causal = 1, io.mem = mem, io.rng = rng;
    return io;
}

/* The block composed from its pieces, unfused. */
static attn_status reference(attn_ctx *ctx, const attn__block *b, const float *x0,
                             const float *mem, attn__rng rng, float *out) {
    const int64_t M = B * T;
    float cur[B * T * E], in[B * T * E], y[B * T * E];
    const int sub[3] = {ATTN__SUB_SELF, ATTN__SUB_CROSS, ATTN__SUB_FFN};
    memcpy(cur, x0, sizeof cur);
    for (int i = 0; i < 3; i++) {
        const int s = sub[i];
        if (s == ATTN__SUB_CROSS && !b->cross) continue;
        if (b->pre) attn__ln_fwd(ctx, &b->norm[s], cur, in, M);
        else memcpy(in, cur, sizeof in);
        if (s == ATTN__SUB_SELF) {
            const attn__attn_io a = attn__attn_io_mha(in, in, in, B, T, T, NULL, NULL, 1, &rng);
            ATTN_TRY(attn__attention_fwd(ctx, &b->at[0], &a, y, NULL, NULL, 0, NULL));
        } else if (s == ATTN__SUB_CROSS) {
            const attn__attn_io a = attn__attn_io_mha(in, mem, mem, B, T, S, NULL, NULL, 0, &rng);
            ATTN_TRY(attn__attention_fwd(ctx, &b->at[1], &a, y, NULL, NULL, 0, NULL));
        } else if (b->glu) {
            ATTN_TRY(attn__llama_mlp_fwd(ctx, &b->mlp, in, B, T, NULL, y));
        } else {
            ATTN_TRY(attn__ffn_fwd(ctx, &b->l1, &b->l2, b->act, b->p, in, y, M, &rng, NULL, NULL));
        }
        if (b->sandwich) attn__ln_fwd(ctx, &b->post[s], y, y, M);
        attn__dropout(&rng, b->p, y, M * E);
        for (int64_t k = 0; k < M * E; k++) cur[k] = cur[k] + y[k];
        if (!b->pre) attn__ln_fwd(ctx, &b->norm[s], cur, cur, M);
    }
    memcpy(out, cur, sizeof cur);
    return ATTN_OK;
}

static double loss(attn_ctx *ctx, const attn__block *b, const float *x, const float *mem,
                   attn__rng rng, const float *dout) {
    float out[B * T * E];
    const attn__block_io io = io_of(mem, &rng);
    if (attn__block_fwd(ctx, b, x, out, &io, NULL)) return NAN;
    double l = 0;
    for (int i = 0; i < B * T * E; i++) l += (double)dout[i] * out[i];
    return l;
}

typedef struct result {
    float out[B * T * E], dx[B * T * E], dmem[B * S * E];
    float *grad;
} result;

/* Forward (record and not), backward (recorded and recomputed) on threads threads. */
static void run(const cfg *c, int threads, const float *params, int64_t np, const float *x,
                const float *mem, const float *dout, result *r) {
    attn_ctx_params cp = {0};
    cp.threads = threads;
    attn_ctx *ctx;
    if (!TU_STATUS(attn_ctx_create(&cp, &ctx), ATTN_OK, NULL)) return;
    float *ar = malloc(sizeof(float) * np);
    memcpy(ar, params, sizeof(float) * np);
    attn__block b;
    build(c, ar, &b);
    attn__gmap g = {ar, r->grad};
    const attn__rng rng0 = {1234, 0, 1};
    attn__rng rng = rng0;
    attn__block_io io = io_of(mem, &rng);
    attn__block_saved sv;
    float ref[B * T * E], plain[B * T * E];
    TU_STATUS(attn__block_saved_alloc(ctx, NULL, &b, B, T, S, &sv), ATTN_OK, ctx);
    TU_STATUS(attn__block_fwd(ctx, &b, x, r->out, &io, &sv), ATTN_OK, ctx);
    TU_STATUS(reference(ctx, &b, x, mem, rng0, ref), ATTN_OK, ctx);
    double e = 0;
    for (int i = 0; i < B * T * E; i++) {
        const double d = fabs((double)r->out[i] - ref[i]);
        e = d > e || d != d ? d : e;
    }
    TU_CHECK(e <= 1e-5, "%s (%d threads): forward against the unfused composition: %.3g",
             c->name, threads, e);
    rng = rng0;
    TU_STATUS(attn__block_fwd(ctx, &b, x, plain, &io, NULL), ATTN_OK, ctx);
    TU_CHECK(!memcmp(plain, r->out, sizeof plain), "%s: the forward with a record has its bits",
             c->name);
    memset(r->grad, 0, sizeof(float) * np);
    memset(r->dmem, 0, sizeof r->dmem);
    io = io_of(mem, &rng);
    TU_STATUS(attn__block_bwd(ctx, &b, &g, &sv, &io, dout, r->dx, r->dmem), ATTN_OK, ctx);
    /* the recomputing backward: the same bits */
    float *g2 = calloc((size_t)np, sizeof(float)), dx2[B * T * E], dm2[B * S * E] = {0};
    attn__gmap gg = {ar, g2};
    rng = rng0;
    TU_STATUS(attn__block_bwd_re(ctx, &b, &gg, x, &io, dout, dx2, dm2), ATTN_OK, ctx);
    TU_CHECK(!memcmp(dx2, r->dx, sizeof dx2) && !memcmp(dm2, r->dmem, sizeof dm2) &&
                 !memcmp(g2, r->grad, sizeof(float) * np),
             "%s: the recomputing backward has the recorded one's bits", c->name);
    free(g2);
    free(ar);
    attn_ctx_free(ctx);
}

static void check(const cfg *c) {
    attn__block b;
    const int64_t np = build(c, NULL, &b);
    float *params = malloc(sizeof(float) * np), x[B * T * E], mem[B * S * E], dout[B * T * E];
    unsigned s = 7;
    rng_fill(params, np, &s, 0.4f, 0.0f);
    { /* norms' weights near 1 */
        attn__block bb;
        build(c, params, &bb);
        for (int k = 0; k < ATTN__SUB_N; k++) {
            attn__ln *nm[2] = {&bb.norm[k], &bb.post[k]};
            for (int j = 0; j < 2; j++)
                if (nm[j]->weight) rng_fill(nm[j]->weight, E, &s, 0.2f, 1.0f);
        }
    }
    rng_fill(x, B * T * E, &s, 1.0f, 0.0f);
    rng_fill(mem, B * S * E, &s, 1.0f, 0.0f);
    rng_fill(dout, B * T * E, &s, 1.0f, 0.0f);
    result r1, r2;
    r1.grad = calloc((size_t)np, sizeof(float));
    r2.grad = calloc((size_t)np, sizeof(float));
    run(c, 1, params, np, x, mem, dout, &r1);
    run(c, 2, params, np, x, mem, dout, &r2);
    TU_CHECK(!memcmp(r1.out, r2.out, sizeof r1.out) && !memcmp(r1.dx, r2.dx, sizeof r1.dx) &&
                 !memcmp(r1.dmem, r2.dmem, sizeof r1.dmem) &&
                 !memcmp(r1.grad, r2.grad, sizeof(float) * np),
             "%s: 1 and 2 threads give the same bits", c->name);
    /* finite differences along random directions of (x, mem, params) together */
    attn_ctx *ctx;
    if (!TU_STATUS(attn_ctx_create(NULL, &ctx), ATTN_OK, NULL)) return;
    float *pp = malloc(sizeof(float) * np), *u = malloc(sizeof(float) * np);
    float xp[B * T * E], mp[B * S * E], ux[B * T * E], um[B * S * E];
    const attn__rng rng0 = {1234, 0, 1};
    double worst = 0;
    for (int dir = 0; dir < 4; dir++) {
        rng_fill(u, np, &s, 1.0f, 0.0f);
        rng_fill(ux, B * T * E, &s, 1.0f, 0.0f);
        rng_fill(um, B * S * E, &s, c->cross ? 1.0f : 0.0f, 0.0f);
        double gu = 0, mag = 0, l[2];
        const float *gs[3] = {r1.grad, r1.dx, r1.dmem}, *us[3] = {u, ux, um};
        const int64_t ns[3] = {np, B * T * E, B * S * E};
        for (int k = 0; k < 3; k++)
            for (int64_t i = 0; i < ns[k]; i++)
                gu += (double)gs[k][i] * us[k][i], mag += fabs((double)gs[k][i] * us[k][i]);
        const float h = 3e-3f;
        for (int sg = 0; sg < 2; sg++) {
            const float hs = sg ? -h : h;
            for (int64_t i = 0; i < np; i++) pp[i] = params[i] + hs * u[i];
            for (int i = 0; i < B * T * E; i++) xp[i] = x[i] + hs * ux[i];
            for (int i = 0; i < B * S * E; i++) mp[i] = mem[i] + hs * um[i];
            attn__block bp;
            build(c, pp, &bp);
            l[sg] = loss(ctx, &bp, xp, mp, rng0, dout);
        }
        const double fd = (l[0] - l[1]) / (2.0 * h), err = fabs(gu - fd) / (mag + 1e-3);
        worst = err > worst || err != err ? err : worst;
    }
    TU_CHECK(worst <= 2e-3, "%s: gradients against central differences: %.3g (bound 2e-3)",
             c->name, worst);
    printf("%-34s forward and gradients checked (worst directional error %.2g)\n", c->name,
           worst);
    attn_ctx_free(ctx);
    free(pp), free(u), free(params), free(r1.grad), free(r2.grad);
}

int main(void) {
    const cfg cases[] = {
        {"post-norm RMSNorm, GELU, dropout", 0, 0, 0, 0, 1, ATTN_ACT_GELU, 0.1f},
        {"post-norm RMSNorm, ReLU", 0, 0, 0, 0, 1, ATTN_ACT_RELU, 0.0f},
        {"pre-norm LayerNorm, cross, SwiGLU", 1, 0, 1, 1, 0, 0, 0.0f},
        {"post-norm LayerNorm, cross, GEGLU, drop", 0, 0, 1, 1, 0, 1, 0.2f},
        {"sandwich RMSNorm, cross, GELU, drop", 1, 1, 1, 0, 1, ATTN_ACT_GELU, 0.1f},
        {"sandwich LayerNorm, SwiGLU", 1, 1, 0, 1, 0, 0, 0.0f},
        {"post-norm RMSNorm, cross, SwiGLU", 0, 0, 1, 1, 1, 0, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check(&cases[i]);
    return tu_finish("test_block");
}
