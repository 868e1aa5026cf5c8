/* The Llama layers' backward (issue 14): central finite differences of the forward for every
 * piece (RMSNorm, RoPE in both layouts, the SwiGLU MLP, grouped-query attention, the decoder
 * layer, the whole model with a tied or a separate head), then the properties the autograd
 * fixtures (test_fixtures: *_bwd_* against transformers) do not show:
 *   - the training pair (*_forward_train / *_backward_saved, with and without
 *     ATTN_SAVED_CHECKPOINT) gives the same bits as the recomputing backward, and its forward
 *     the same bits as the forward;
 *   - the same bits for 1 and 3 threads; parameter gradients accumulate;
 *   - attn_llm_make_trainable: the tiny HF model and the tiny GGUF (quantized: refused without
 *     ATTN_LLM_DEQUANTIZE, its interleaved q/k kept) run as the loaded model does, bit for bit;
 *     a block backward on quantized weights is ATTN_E_UNSUPPORTED;
 *   - argument errors.
 * Finite differences: float forward, h = 2e-3, the loss sum(c * f) in double; tolerance 2e-2
 * of max(1, max|fd|) (a wrong formula gives O(1) errors; exactness is the fixtures' job). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/layers/llm.h"
#include "testutil.h"

enum { K_MLP, K_ATTN, K_LAYER, K_LM };

typedef struct lcase {
    int kind;
    attn_llm *llm; /* K_LM: the model (m its module) */
    attn_module *m;
    attn_tensor x, pos, out; /* x: hidden states (or ids for K_LM) */
    int has_pos;
    float *c; /* cotangent of out */
    int64_t nout;
} lcase;

/* K_LM: the ids [B, T] (I64 in x) as the model takes them */
static int32_t id32[64];
static const int32_t *ids32(const lcase *g) {
    for (int64_t i = 0; i < g->x.shape[0] * g->x.shape[1]; i++)
        id32[i] = (int32_t)((const int64_t *)g->x.data)[i];
    return id32;
}

static attn_status fwd(attn_ctx *ctx, lcase *g, attn_tensor *out) {
    const attn_tensor *p = g->has_pos ? &g->pos : NULL;
    switch (g->kind) {
    case K_MLP: return attn_llama_mlp_forward(ctx, g->m, &g->x, out);
    case K_ATTN: return attn_llama_attention_forward(ctx, g->m, &g->x, p, out);
    case K_LAYER: return attn_llama_layer_forward(ctx, g->m, &g->x, p, out);
    default: return attn_llm_forward(ctx, g->llm, ids32(g), g->x.shape[0], g->x.shape[1], out->data);
    }
}

static attn_status bwd(attn_ctx *ctx, lcase *g, attn_tensor *dx) {
    const attn_tensor *p = g->has_pos ? &g->pos : NULL;
    attn_tensor C = g->out;
    C.data = g->c;
    switch (g->kind) {
    case K_MLP: return attn_llama_mlp_backward(ctx, g->m, &g->x, &C, dx);
    case K_ATTN: return attn_llama_attention_backward(ctx, g->m, &g->x, p, &C, dx);
    case K_LAYER: return attn_llama_layer_backward(ctx, g->m, &g->x, p, &C, dx);
    default: return attn_llm_backward(ctx, g->llm, ids32(g), g->x.shape[0], g->x.shape[1], g->c);
    }
}

/* the training pair into saved (flags of saved as created) */
static attn_status fwd_train(attn_ctx *ctx, lcase *g, attn_tensor *out, attn_saved *sv) {
    const attn_tensor *p = g->has_pos ? &g->pos : NULL;
    switch (g->kind) {
    case K_MLP: return attn_llama_mlp_forward_train(ctx, g->m, &g->x, out, sv);
    case K_ATTN: return attn_llama_attention_forward_train(ctx, g->m, &g->x, p, out, sv);
    case K_LAYER: return attn_llama_layer_forward_train(ctx, g->m, &g->x, p, out, sv);
    default:
        return attn_llm_forward_train(ctx, g->llm, ids32(g), g->x.shape[0], g->x.shape[1],
                                      out->data, sv);
    }
}

static attn_status bwd_saved(attn_ctx *ctx, lcase *g, const attn_saved *sv, attn_tensor *dx) {
    attn_tensor C = g->out;
    C.data = g->c;
    switch (g->kind) {
    case K_MLP: return attn_llama_mlp_backward_saved(ctx, g->m, sv, &C, dx);
    case K_ATTN: return attn_llama_attention_backward_saved(ctx, g->m, sv, &C, dx);
    case K_LAYER: return attn_llama_layer_backward_saved(ctx, g->m, sv, &C, dx);
    default: return attn_llm_backward_saved(ctx, g->llm, sv, g->c);
    }
}

static double loss(attn_ctx *ctx, lcase *g) {
    if (fwd(ctx, g, &g->out) != ATTN_OK) return NAN;
    double s = 0;
    const float *o = g->out.data;
    for (int64_t i = 0; i < g->nout; i++) s += (double)g->c[i] * o[i];
    return s;
}

/* the loss at the case's current parameters, for tu_fd_check */
static attn_ctx *fd_ctx;
static double fd_loss(void *g) { return loss(fd_ctx, g); }
static void fd_check(attn_ctx *ctx, lcase *g, const char *what, float *p, const float *ga,
                     int64_t n, int samples, uint64_t seed) {
    fd_ctx = ctx;
    tu_fd_check(fd_loss, g, what, p, ga, n, samples, seed);
}

/* Random parameters: matrices U(-1.5, 1.5)/sqrt(in), vectors (biases) U(-0.3, 0.3), norm
 * weights 1 + U(-0.3, 0.3), the embedding U(-1, 1). */
static void randomize(attn_module *m, uint64_t seed) {
    size_t np = attn_module_param_count(m);
    for (size_t i = 0; i < np; i++) {
        const char *name;
        attn_tensor t;
        attn_module_param_at(m, i, &name, &t);
        size_t n = (size_t)attn_tensor_numel(&t);
        float *p = t.data;
        if (strstr(name, "embed_tokens")) {
            tu_fill(p, n, seed * 131 + i, -1.0f, 1.0f);
        } else if (t.ndim == 2) {
            float a = 1.5f / sqrtf((float)t.shape[1]);
            tu_fill(p, n, seed * 131 + i, -a, a);
        } else if (strstr(name, "norm")) {
            tu_fill(p, n, seed * 131 + i, 0.7f, 1.3f);
        } else {
            tu_fill(p, n, seed * 131 + i, -0.3f, 0.3f);
        }
    }
}

static float xbuf[2][8192], obuf[4][16384], dbuf[4][8192];
static int64_t idbuf[64], posbuf[64];

/* A case: the module m, input x [B, T, E] (or ids [B, T] for the LM, vocabulary V). */
static lcase make(int kind, attn_module *m, int64_t B, int64_t T, int64_t E, int64_t V,
                  int positions, uint64_t seed) {
    lcase g;
    memset(&g, 0, sizeof g);
    g.kind = kind, g.m = m;
    randomize(m, seed);
    if (kind == K_LM) {
        uint64_t st = seed;
        for (int64_t i = 0; i < B * T; i++) idbuf[i] = (int64_t)(tu_rand(&st) % (uint64_t)V);
        idbuf[B * T - 1] = idbuf[0]; /* a repeated token */
        int64_t s[2] = {B, T};
        g.x = attn_tensor_make(idbuf, ATTN_I64, 2, s);
        g.out = attn_view3(obuf[0], B, T, V);
        g.nout = B * T * V;
    } else {
        tu_fill(xbuf[0], (size_t)(B * T * E), seed + 1, -1, 1);
        g.x = attn_view3(xbuf[0], B, T, E);
        g.out = attn_view3(obuf[0], B, T, E);
        g.nout = B * T * E;
    }
    if (positions) {
        for (int64_t i = 0; i < B * T; i++) posbuf[i] = 100 * (i / T) + 3 + i % T;
        int64_t s[2] = {B, T};
        g.pos = attn_tensor_make(posbuf, ATTN_I64, 2, s);
        g.has_pos = 1;
    }
    g.c = malloc(sizeof(float) * (size_t)g.nout);
    tu_fill(g.c, (size_t)g.nout, seed + 7, -1, 1);
    return g;
}

/* Gradients of every parameter, concatenated (m->numel floats: malloc'd). */
static float *grads_copy(const attn_module *m) {
    int64_t n = attn_module_numel(m);
    float *p = malloc(sizeof(float) * (size_t)n), *q = p;
    for (size_t i = 0; i < attn_module_param_count(m); i++) {
        attn_tensor gt;
        attn_module_grad_at(m, i, NULL, &gt);
        size_t k = (size_t)attn_tensor_numel(&gt);
        memcpy(q, gt.data, k * sizeof(float));
        q += k;
    }
    return p;
}

static void fd_case(attn_ctx *ctx, lcase *g, const char *name, uint64_t seed) {
    TU_STATUS(attn_module_enable_grad(ctx, g->m), ATTN_OK, ctx);
    attn_module_zero_grad(g->m);
    attn_tensor dx;
    memset(&dx, 0, sizeof dx);
    if (g->kind != K_LM) {
        dx = g->x;
        dx.data = dbuf[0];
    }
    if (!TU_STATUS(bwd(ctx, g, g->kind != K_LM ? &dx : NULL), ATTN_OK, ctx)) return;
    char what[200];
    if (g->kind != K_LM) {
        snprintf(what, sizeof what, "%s d(x)", name);
        fd_check(ctx, g, what, g->x.data, dbuf[0], attn_tensor_numel(&g->x), 12, seed);
    }
    size_t np = attn_module_param_count(g->m);
    for (size_t i = 0; i < np; i++) {
        const char *pn;
        attn_tensor t, gt;
        attn_module_param_at(g->m, i, &pn, &t);
        attn_module_grad_at(g->m, i, NULL, &gt);
        snprintf(what, sizeof what, "%s d(%s)", name, pn);
        fd_check(ctx, g, what, t.data, gt.data, attn_tensor_numel(&t), 5, seed + 31 * i);
    }
    /* accumulation: a second backward doubles the parameter gradients */
    float *g1 = grads_copy(g->m);
    bwd(ctx, g, g->kind != K_LM ? &dx : NULL);
    float *g2 = grads_copy(g->m);
    int ok = 1;
    for (int64_t i = 0; i < attn_module_numel(g->m); i++)
        ok &= fabsf(g2[i] - 2 * g1[i]) <= 1e-5f * (1 + fabsf(g1[i]));
    TU_CHECK(ok, "%s: parameter gradients accumulate", name);
    free(g1);
    free(g2);
}

/* The training pair against the recomputing backward and the forward: the same bits. */
static void saved_case(attn_ctx *ctx, lcase *g, const char *name, unsigned flags) {
    TU_STATUS(attn_module_enable_grad(ctx, g->m), ATTN_OK, ctx);
    attn_module_zero_grad(g->m);
    attn_tensor dx, dx2, o2 = g->out;
    memset(&dx, 0, sizeof dx);
    memset(&dx2, 0, sizeof dx2);
    if (g->kind != K_LM) {
        dx = g->x, dx.data = dbuf[0];
        dx2 = g->x, dx2.data = dbuf[1];
    }
    o2.data = obuf[1];
    TU_STATUS(fwd(ctx, g, &g->out), ATTN_OK, ctx);
    TU_STATUS(bwd(ctx, g, g->kind != K_LM ? &dx : NULL), ATTN_OK, ctx);
    float *ga = grads_copy(g->m);
    attn_module_zero_grad(g->m);
    attn_saved *sv = NULL;
    TU_STATUS(attn_saved_create(ctx, flags, &sv), ATTN_OK, ctx);
    TU_STATUS(fwd_train(ctx, g, &o2, sv), ATTN_OK, ctx);
    TU_CHECK(!memcmp(g->out.data, o2.data, sizeof(float) * (size_t)g->nout),
             "%s: the training forward gives the forward's bits", name);
    TU_CHECK(attn_saved_bytes(sv) > 0, "%s: something recorded", name);
    for (int rep = 0; rep < 2; rep++) { /* the record stays: a second backward reads it again */
        attn_module_zero_grad(g->m);
        TU_STATUS(bwd_saved(ctx, g, sv, g->kind != K_LM ? &dx2 : NULL), ATTN_OK, ctx);
        float *gb = grads_copy(g->m);
        TU_CHECK(!memcmp(ga, gb, sizeof(float) * (size_t)attn_module_numel(g->m)),
                 "%s: backward_saved (pass %d, flags %u) gives the recomputing backward's "
                 "parameter gradients", name, rep, flags);
        if (g->kind != K_LM)
            TU_CHECK(!memcmp(dbuf[0], dbuf[1], sizeof(float) * (size_t)g->nout),
                     "%s: backward_saved gives the recomputing backward's dx", name);
        free(gb);
    }
    attn_saved_free(sv);
    free(ga);
}

/* The same gradients (bits) with 3 threads as with ctx's. */
static void threads_case(attn_ctx *ctx, lcase *g, const char *name) {
    attn_ctx *c3 = tu_ctx(3);
    if (!c3) return;
    TU_STATUS(attn_module_enable_grad(ctx, g->m), ATTN_OK, ctx);
    attn_tensor dx;
    memset(&dx, 0, sizeof dx);
    if (g->kind != K_LM) dx = g->x, dx.data = dbuf[0];
    attn_module_zero_grad(g->m);
    TU_STATUS(bwd(ctx, g, g->kind != K_LM ? &dx : NULL), ATTN_OK, ctx);
    float *g1 = grads_copy(g->m);
    memcpy(dbuf[2], dbuf[0], sizeof dbuf[2]);
    attn_module_zero_grad(g->m);
    TU_STATUS(bwd(c3, g, g->kind != K_LM ? &dx : NULL), ATTN_OK, c3);
    float *g3 = grads_copy(g->m);
    TU_CHECK(!memcmp(g1, g3, sizeof(float) * (size_t)attn_module_numel(g->m)),
             "%s: parameter gradients differ between 1 and 3 threads", name);
    if (g->kind != K_LM)
        TU_CHECK(!memcmp(dbuf[2], dbuf[0], sizeof dbuf[2]), "%s: dx differs with 3 threads",
                 name);
    free(g1);
    free(g3);
    attn_ctx_free(c3);
}

static attn_llm_config tiny_cfg(int64_t E, int64_t H, int64_t Hkv, int64_t F, int bias) {
    attn_llm_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 11, c.hidden_size = E, c.intermediate_size = F, c.num_layers = 2;
    c.num_heads = H, c.num_kv_heads = Hkv, c.max_position_embeddings = 512;
    c.rms_norm_eps = 1e-5, c.rope_theta = 1e4;
    c.attention_bias = c.mlp_bias = bias;
    return c;
}

/* ---- the functional ops ---------------------------------------------------------------------- */
static void test_rms_rope(attn_ctx *ctx) {
    /* RMSNorm: loss = sum c * rms(x; w); FD on x and w */
    enum { M = 5, E = 24 };
    static float x[M * E], w[E], y[M * E], c[M * E], dx[M * E], dw[E];
    tu_fill(x, M * E, 1, -2, 2);
    tu_fill(w, E, 2, 0.5f, 1.5f);
    tu_fill(c, M * E, 3, -1, 1);
    attn_tensor X = attn_view2(x, M, E), W = attn_view1(w, E), Y = attn_view2(y, M, E),
                C = attn_view2(c, M, E), DX = attn_view2(dx, M, E), DW = attn_view1(dw, E);
    const float eps = 1e-5f;
    TU_STATUS(attn_rms_norm_backward(ctx, &X, &W, eps, &C, &DX, &DW), ATTN_OK, ctx);
    for (int which = 0; which < 2; which++) {
        float *p = which ? w : x, *ga = which ? dw : dx;
        int n = which ? E : M * E;
        double maxerr = 0, maxg = 0;
        for (int i = 0; i < n; i += 3) {
            double l[2];
            const float old = p[i];
            for (int s = 0; s < 2; s++) {
                p[i] = old + (s ? -2e-3f : 2e-3f);
                attn_rms_norm(ctx, &X, &W, eps, &Y);
                l[s] = 0;
                for (int k = 0; k < M * E; k++) l[s] += (double)c[k] * y[k];
            }
            p[i] = old;
            double fd = (l[0] - l[1]) / 4e-3;
            if (fabs(fd - ga[i]) > maxerr) maxerr = fabs(fd - ga[i]);
            if (fabs(fd) > maxg) maxg = fabs(fd);
        }
        TU_CHECK(maxerr <= 2e-2 * (maxg > 1 ? maxg : 1), "rms_norm d%s: fd error %.3g",
                 which ? "weight" : "x", maxerr);
    }
    /* in place (dx = dy) gives the same bits */
    static float c2[M * E];
    memcpy(c2, c, sizeof c);
    attn_tensor C2 = attn_view2(c2, M, E);
    TU_STATUS(attn_rms_norm_backward(ctx, &X, &W, eps, &C2, &C2, NULL), ATTN_OK, ctx);
    TU_CHECK(!memcmp(c2, dx, sizeof dx), "rms_norm_backward in place");
    /* RoPE is linear: <c, rope(x)> = <rope_backward(c), x> in both layouts */
    enum { B = 2, H = 3, T = 4, D = 8 };
    static float q[B * H * T * D], r[B * H * T * D], cq[B * H * T * D], dq[B * H * T * D];
    static int64_t pos[B * T];
    tu_fill(q, B * H * T * D, 4, -1, 1);
    tu_fill(cq, B * H * T * D, 5, -1, 1);
    for (int i = 0; i < B * T; i++) pos[i] = 7 * i + 1;
    int64_t ps[2] = {B, T};
    attn_tensor P = attn_tensor_make(pos, ATTN_I64, 2, ps);
    attn_tensor Q = attn_view4(q, B, H, T, D), R = attn_view4(r, B, H, T, D),
                CQ = attn_view4(cq, B, H, T, D), DQ = attn_view4(dq, B, H, T, D);
    for (unsigned fl = 0; fl < 2; fl++) {
        TU_STATUS(attn_rope_ex(ctx, &Q, &P, 1e4f, fl, &R), ATTN_OK, ctx);
        TU_STATUS(attn_rope_backward(ctx, &CQ, &P, 1e4f, fl, &DQ), ATTN_OK, ctx);
        double a = 0, b = 0;
        for (int i = 0; i < B * H * T * D; i++) {
            a += (double)cq[i] * r[i];
            b += (double)dq[i] * q[i];
        }
        TU_CHECK(fabs(a - b) <= 1e-5 * (1 + fabs(a)), "rope (flags %u): <c, rope x> %.9g vs "
                 "<rope' c, x> %.9g", fl, a, b);
        /* the backward undoes the forward (a rotation) */
        TU_STATUS(attn_rope_backward(ctx, &R, &P, 1e4f, fl, &R), ATTN_OK, ctx);
        TU_CHECK(tu_close("rope_backward(rope(x)) = x", r, q, B * H * T * D, 1e-6), "fl %u", fl);
    }
    TU_STATUS(attn_rope_ex(ctx, &Q, &P, 1e4f, 2, &R), ATTN_E_INVALID, ctx);
}

/* ---- the modules -------------------------------------------------------------------------- */
static void test_modules(attn_ctx *ctx) {
    for (int variant = 0; variant < 2; variant++) {
        /* variant 0: GQA 4/2, no biases, rows path (T = 5); 1: 4/1 with biases, interleaved
         * RoPE, T = 13 (the fused attention kernels) */
        const int64_t B = variant ? 1 : 2, T = variant ? 13 : 5, E = 16;
        attn_llm_config c = tiny_cfg(E, 4, variant ? 1 : 2, 24, variant);
        attn_module *m = NULL;
        char name[96];
        for (int kind = K_MLP; kind <= K_LAYER; kind++) {
            attn_status st = kind == K_MLP    ? attn_llama_mlp_create(ctx, &c, &m)
                             : kind == K_ATTN ? attn_llama_attention_create(ctx, &c, &m)
                                              : attn_llama_layer_create(ctx, &c, &m);
            if (!TU_STATUS(st, ATTN_OK, ctx)) continue;
            if (variant && kind != K_MLP)
                TU_STATUS(attn_llama_set_rope_interleaved(ctx, m, 1), ATTN_OK, ctx);
            snprintf(name, sizeof name, "%s v%d", attn_module_kind(m), variant);
            lcase g =
                make(kind, m, B, T, E, 0, kind != K_MLP && !variant, 40 + 10 * kind + variant);
            fd_case(ctx, &g, name, 7 + kind);
            saved_case(ctx, &g, name, 0);
            threads_case(ctx, &g, name);
            free(g.c);
            attn_module_free(m);
        }
    }
    /* the layer: interleaved RoPE with the q/k rows permuted = HF's layout (same numbers) */
    attn_llm_config c = tiny_cfg(16, 4, 2, 24, 1);
    attn_module *a = NULL, *b = NULL;
    if (TU_STATUS(attn_llama_layer_create(ctx, &c, &a), ATTN_OK, ctx) &&
        TU_STATUS(attn_llama_layer_create(ctx, &c, &b), ATTN_OK, ctx)) {
        lcase g = make(K_LAYER, a, 1, 6, 16, 0, 0, 77);
        randomize(b, 77);
        TU_STATUS(attn_llama_set_rope_interleaved(ctx, b, 1), ATTN_OK, ctx);
        const char *qk[4] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                             "self_attn.q_proj.bias", "self_attn.k_proj.bias"};
        const int64_t D = 4;
        for (int k = 0; k < 4; k++) {
            attn_tensor ta, tb;
            attn_module_param(ctx, a, qk[k], &ta);
            attn_module_param(ctx, b, qk[k], &tb);
            const int64_t rows = ta.shape[0], cols = ta.ndim == 2 ? ta.shape[1] : 1;
            /* file row h*D + 2i + j = HF row h*D + j*D/2 + i */
            for (int64_t r = 0; r < rows; r++) {
                const int64_t h = r / D, w = r % D, src = h * D + (w % 2) * (D / 2) + w / 2;
                memcpy((float *)tb.data + r * cols, (float *)ta.data + src * cols,
                       sizeof(float) * (size_t)cols);
            }
        }
        attn_tensor o2 = g.out;
        o2.data = obuf[1];
        TU_STATUS(attn_llama_layer_forward(ctx, a, &g.x, NULL, &g.out), ATTN_OK, ctx);
        TU_STATUS(attn_llama_layer_forward(ctx, b, &g.x, NULL, &o2), ATTN_OK, ctx);
        TU_CHECK(tu_close("interleaved layer = HF layer", obuf[1], obuf[0], (size_t)g.nout,
                          1e-6), "forward");
        attn_module_enable_grad(ctx, a);
        attn_module_enable_grad(ctx, b);
        attn_tensor C = g.out, dxa = g.x, dxb = g.x;
        C.data = g.c, dxa.data = dbuf[0], dxb.data = dbuf[1];
        TU_STATUS(attn_llama_layer_backward(ctx, a, &g.x, NULL, &C, &dxa), ATTN_OK, ctx);
        TU_STATUS(attn_llama_layer_backward(ctx, b, &g.x, NULL, &C, &dxb), ATTN_OK, ctx);
        TU_CHECK(tu_close("interleaved layer dx", dbuf[1], dbuf[0], (size_t)g.nout, 1e-5), "dx");
        attn_tensor ga, gb;
        attn_module_grad(ctx, a, "mlp.up_proj.weight", &ga);
        attn_module_grad(ctx, b, "mlp.up_proj.weight", &gb);
        TU_CHECK(tu_close("interleaved layer dW_up", gb.data, ga.data,
                          (size_t)attn_tensor_numel(&ga), 1e-5), "dW");
        free(g.c);
    }
    attn_module_free(a);
    attn_module_free(b);
}

static void test_lm(attn_ctx *ctx) {
    for (int variant = 0; variant < 2; variant++) {
        /* 0: tied head, GQA 4/2, B = 2, T = 5; 1: separate head, biases, 4/1, interleaved,
         * T = 13 */
        attn_llm_config c = tiny_cfg(16, 4, variant ? 1 : 2, 24, variant);
        c.tie_word_embeddings = !variant;
        attn_llm *lm = NULL;
        if (!TU_STATUS(attn_llm_create(ctx, &c, &lm), ATTN_OK, ctx)) continue;
        attn_module *m = attn_llm_module(lm);
        TU_CHECK(m && !strcmp(attn_module_kind(m), "llm"), "the model's module");
        if (variant) TU_STATUS(attn_llama_set_rope_interleaved(ctx, m, 1), ATTN_OK, ctx);
        char name[64];
        snprintf(name, sizeof name, "llm v%d", variant);
        lcase g = make(K_LM, m, variant ? 1 : 2, variant ? 13 : 5, 16, c.vocab_size, 0,
                       90 + variant);
        g.llm = lm;
        fd_case(ctx, &g, name, 11);
        saved_case(ctx, &g, name, 0);
        saved_case(ctx, &g, name, ATTN_SAVED_CHECKPOINT);
        threads_case(ctx, &g, name);
        /* errors */
        const int64_t B = g.x.shape[0], T = g.x.shape[1];
        attn_saved *sv = NULL;
        attn_saved_create(ctx, 0, &sv);
        float *lg = g.out.data;
        TU_STATUS(attn_llm_backward_saved(ctx, lm, sv, g.c), ATTN_E_INVALID, ctx); /* empty */
        TU_STATUS(attn_llm_forward_train(ctx, lm, ids32(&g), B, T, NULL, sv), ATTN_E_INVALID,
                  ctx);
        TU_STATUS(attn_llm_forward_train(ctx, lm, ids32(&g), 1, c.max_position_embeddings + 1, lg, sv), ATTN_E_INVALID,
                  ctx); /* over max_position_embeddings */
        TU_STATUS(attn_llm_forward_train(ctx, lm, id32, B, T, (float *)id32, sv),
                  ATTN_E_INVALID, ctx); /* logits over the ids */
        TU_STATUS(attn_llm_forward_train(ctx, lm, ids32(&g), B, T, lg, sv), ATTN_OK, ctx);
        g.c[3] = NAN;
        TU_STATUS(attn_llm_backward_saved(ctx, lm, sv, g.c), ATTN_E_NONFINITE, ctx);
        int64_t *ids = g.x.data, keep = ids[1];
        ids[1] = c.vocab_size;
        TU_STATUS(attn_llm_forward_train(ctx, lm, ids32(&g), B, T, lg, sv), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_backward(ctx, lm, ids32(&g), B, T, lg), ATTN_E_INVALID, ctx);
        ids[1] = keep;
        attn_saved_free(sv);
        attn_llm_config got;
        TU_CHECK(attn_llm_get_info(lm, &got) == ATTN_OK && got.head_dim == 4 &&
                     got.num_kv_heads == c.num_kv_heads, "attn_llm_get_info");
        free(g.c);
        attn_module_free(m); /* the model's: nothing happens */
        attn_llm_free(lm);
    }
    /* the parameter names and count: HF's state_dict */
    attn_llm_config c = tiny_cfg(16, 4, 2, 24, 0);
    attn_llm *lm = NULL;
    if (TU_STATUS(attn_llm_create(ctx, &c, &lm), ATTN_OK, ctx)) {
        attn_module *m = attn_llm_module(lm);
        const char *n0, *nl;
        attn_module_param_at(m, 0, &n0, NULL);
        attn_module_param_at(m, attn_module_param_count(m) - 1, &nl, NULL);
        TU_CHECK(attn_module_param_count(m) == 3 + 2 * 9, "untied: %zu parameters",
                 attn_module_param_count(m));
        TU_CHECK(!strcmp(n0, "model.embed_tokens.weight") && !strcmp(nl, "lm_head.weight"),
                 "names %s ... %s", n0, nl);
        attn_tensor t;
        TU_STATUS(attn_module_param(ctx, m, "model.layers.1.self_attn.k_proj.weight", &t),
                  ATTN_OK, ctx);
        TU_CHECK(t.shape[0] == 8 && t.shape[1] == 16, "k_proj shape");
        /* attn_module_init: HF's N(0, 0.02^2) matrices, norm weights 1 */
        TU_STATUS(attn_module_init(ctx, m, 5), ATTN_OK, ctx);
        attn_tensor e, nw;
        attn_module_param(ctx, m, "model.embed_tokens.weight", &e);
        attn_module_param(ctx, m, "model.layers.0.post_attention_layernorm.weight", &nw);
        double ss = 0;
        for (int64_t i = 0; i < attn_tensor_numel(&e); i++)
            ss += (double)((float *)e.data)[i] * ((float *)e.data)[i];
        const double sd = sqrt(ss / (double)attn_tensor_numel(&e));
        TU_CHECK(sd > 0.015 && sd < 0.025, "embedding init std %.4f", sd);
        TU_CHECK(((float *)nw.data)[0] == 1.0f && ((float *)nw.data)[15] == 1.0f, "norm init");
        /* backward without gradients enabled */
        int32_t ids[4] = {1, 2, 3, 4};
        float lg[4 * 11];
        memset(lg, 0, sizeof lg);
        TU_STATUS(attn_llm_backward(ctx, lm, ids, 1, 4, lg), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llama_set_rope_interleaved(ctx, NULL, 1), ATTN_E_INVALID, ctx);
        attn_module *lin = NULL;
        attn_linear_create(ctx, 4, 4, 0, &lin);
        TU_STATUS(attn_llama_set_rope_interleaved(ctx, lin, 1), ATTN_E_INVALID, ctx);
        attn_module_free(lin);
    }
    attn_llm_free(lm);
    attn_llm_free(NULL);
    TU_CHECK(attn_llm_module(NULL) == NULL, "attn_llm_module(NULL)");
}

/* ---- from a loaded model ------------------------------------------------------------------- */
static void same_logits(attn_ctx *ctx, const attn_llm *src, const attn_llm *m, const char *what) {
    attn_llm_config c;
    attn_llm_get_info(src, &c);
    enum { T = 9 };
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)((37 * i + 5) % c.vocab_size);
    float *a = malloc(sizeof(float) * T * (size_t)c.vocab_size);
    float *b = malloc(sizeof(float) * T * (size_t)c.vocab_size);
    TU_STATUS(attn_llm_forward(ctx, src, ids, 1, T, a), ATTN_OK, ctx);
    TU_STATUS(attn_llm_forward(ctx, m, ids, 1, T, b), ATTN_OK, ctx);
    TU_CHECK(!memcmp(a, b, sizeof(float) * T * (size_t)c.vocab_size),
             "%s: the trainable model's logits differ from the loaded model's", what);
    free(a);
    free(b);
}

static void test_from_llm(attn_ctx *ctx) {
    attn_llm *src = NULL, *m = NULL;
    if (TU_STATUS(attn_llm_load_hf(ctx, "fixtures/llama_tiny_untied", &src), ATTN_OK, ctx) &&
        TU_STATUS(attn_llm_load_hf(ctx, "fixtures/llama_tiny_untied", &m), ATTN_OK, ctx)) {
        TU_CHECK(attn_llm_module(m) == NULL, "a loaded model has no module");
        if (TU_STATUS(attn_llm_make_trainable(ctx, m, 0), ATTN_OK, ctx)) {
            same_logits(ctx, src, m, "llama_tiny_untied");
            TU_CHECK(attn_module_param_count(attn_llm_module(m)) == 3 + 2 * 16,
                     "untied with biases: %zu", attn_module_param_count(attn_llm_module(m)));
            TU_CHECK(attn_llm_tokenizer(m) == NULL || attn_llm_tokenizer(m) != NULL,
                     "the text side stays");
        }
    }
    attn_llm_free(m);
    attn_llm_free(src);
    src = m = NULL;
    if (TU_STATUS(attn_llm_load_gguf(ctx, "fixtures/llama_tiny.gguf", 0, &src), ATTN_OK, ctx)) {
        TU_STATUS(attn_llm_make_trainable(ctx, src, 0), ATTN_E_UNSUPPORTED, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "inference only") != NULL, "message: %s",
                 attn_ctx_errmsg(ctx));
        TU_CHECK(attn_llm_module(src) == NULL, "a refused model is unchanged");
        TU_STATUS(attn_llm_make_trainable(ctx, src, 4), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_llm_make_trainable(ctx, NULL, 0), ATTN_E_INVALID, ctx);
        attn_llm *f32 = NULL;
        if (TU_STATUS(attn_llm_make_trainable(ctx, src, ATTN_LLM_DEQUANTIZE), ATTN_OK, ctx) &&
            TU_STATUS(attn_llm_load_gguf(ctx, "fixtures/llama_tiny.gguf", ATTN_LLM_LOAD_F32,
                                         &f32),
                      ATTN_OK, ctx))
            same_logits(ctx, f32, src, "llama_tiny.gguf dequantized (interleaved q/k)");
        attn_llm_free(f32);
        attn_llm_free(src);
    }
    /* a vocabulary-only model cannot be made trainable */
    if (TU_STATUS(attn_llm_load_gguf(ctx, "fixtures/llama_tiny.gguf", ATTN_LLM_LOAD_VOCAB_ONLY,
                                     &src),
                  ATTN_OK, ctx))
        TU_STATUS(attn_llm_make_trainable(ctx, src, ATTN_LLM_DEQUANTIZE), ATTN_E_INVALID, ctx);
    attn_llm_free(src);
    /* the block backward refuses quantized weights (the guard behind every backward) */
    attn__llama_mlp p;
    memset(&p, 0, sizeof p);
    static float w[32 * 32];
    p.E = 32, p.F = 32;
    p.gate = attn__weight_f32(w, NULL, 32, 32);
    p.up = p.gate, p.down = p.gate;
    p.up.type = ATTN_Q_Q8_0;
    attn__llama_mlp_saved rec = {w, w};
    float x[32], d[32], dx[32];
    attn__gmap gm = {w, w};
    memset(x, 0, sizeof x);
    memset(d, 0, sizeof d);
    TU_STATUS(attn__llama_mlp_bwd(ctx, &p, &gm, &rec, x, 1, d, dx), ATTN_E_UNSUPPORTED, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "Q8_0") != NULL, "message names the type: %s",
             attn_ctx_errmsg(ctx));
}

/* Each parameter tensor's gradient along a random direction u (every element at once, so that
 * a term missing from any of its uses shows): the central difference of the loss with step
 * 2e-3 u against <grad, u>, within 2e-2 of sum |grad_i u_i| (+ 1e-4). */
static void dir_case(attn_ctx *ctx, lcase *g, const char *name, uint64_t seed) {
    attn_module_zero_grad(g->m);
    if (!TU_STATUS(bwd(ctx, g, NULL), ATTN_OK, ctx))
        return;
    for (size_t i = 0; i < attn_module_param_count(g->m); i++) {
        const char *pn;
        attn_tensor t, gt;
        attn_module_param_at(g->m, i, &pn, &t);
        attn_module_grad_at(g->m, i, NULL, &gt);
        const int64_t n = attn_tensor_numel(&t);
        float *p = t.data, *u = malloc(sizeof(float) * (size_t)n),
              *p0 = malloc(sizeof(float) * (size_t)n);
        const float *ga = gt.data;
        tu_fill(u, (size_t)n, seed + 7 * i, -1, 1);
        memcpy(p0, p, sizeof(float) * (size_t)n);
        const float h = 2e-3f;
        for (int64_t k = 0; k < n; k++)
            p[k] = p0[k] + h * u[k];
        const double lp = loss(ctx, g);
        for (int64_t k = 0; k < n; k++)
            p[k] = p0[k] - h * u[k];
        const double lm = loss(ctx, g);
        memcpy(p, p0, sizeof(float) * (size_t)n);
        double an = 0, mag = 0;
        for (int64_t k = 0; k < n; k++)
            an += (double)ga[k] * u[k], mag += fabs(ga[k] * u[k]);
        const double fd = (lp - lm) / (2.0 * h);
        TU_CHECK(fabs(fd - an) <= 2e-2 * mag + 1e-4, "%s d(%s) along u: %.6g, difference %.6g",
                 name, pn, an, fd);
        free(u);
        free(p0);
    }
}

/* The trainable copy m of family fam's model against PyTorch autograd's gradients on the same
 * weights (fixtures/families/FAM_grads.safetensors, tests/gen_family_grads.py): ids [2, 7], the
 * loss sum(c * logits); every parameter within 2e-4 of max(max|ref| of it, 1e-3 of the
 * model's largest). */
static void autograd_case(attn_ctx *ctx, attn_llm *lm, const char *fam) {
    attn_module *m = attn_llm_module(lm);
    char fx[128];
    snprintf(fx, sizeof fx, "fixtures/families/%s_grads.safetensors", fam);
    attn_st *st = NULL;
    attn_st_tensor ti, tc;
    if (TU_STATUS(attn_st_read_file(ctx, fx, &st), ATTN_OK, ctx) &&
        TU_STATUS(attn_st_find(st, "ids", &ti), ATTN_OK, ctx) &&
        TU_STATUS(attn_st_find(st, "c", &tc), ATTN_OK, ctx) && ti.numel == 14 &&
        TU_STATUS(attn_module_enable_grad(ctx, m), ATTN_OK, ctx)) {
        float *c = malloc(sizeof(float) * (size_t)tc.numel);
        int32_t ids[14];
        memcpy(ids, ti.data, sizeof ids);
        attn_st_to_f32(ctx, &tc, c, (size_t)tc.numel);
        attn_module_zero_grad(m);
        TU_CHECK(tc.numel == 14 * (int64_t)tc.shape[2], "c [2, 7, V]");
        TU_STATUS(attn_llm_backward(ctx, lm, ids, 2, 7, c), ATTN_OK, ctx);
        double gmax = 0;
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < attn_module_param_count(m); i++) {
                const char *pn;
                attn_tensor gt;
                attn_st_tensor r;
                attn_module_grad_at(m, i, &pn, &gt);
                if (!TU_STATUS(attn_st_find(st, pn, &r), ATTN_OK, ctx))
                    continue;
                const int64_t n = attn_tensor_numel(&gt);
                float *ref = malloc(sizeof(float) * (size_t)n);
                attn_st_to_f32(ctx, &r, ref, (size_t)n);
                double mx = 0, err = 0;
                for (int64_t k = 0; k < n; k++) {
                    mx = fmax(mx, fabs(ref[k]));
                    const double e = fabs((double)((float *)gt.data)[k] - ref[k]);
                    if (e != e || err != err)
                        err = NAN; /* a NaN stays */
                    else if (e > err)
                        err = e;
                }
                if (!pass)
                    gmax = fmax(gmax, mx);
                else
                    TU_CHECK(r.numel == n && err <= 2e-4 * fmax(mx, 1e-3 * gmax),
                             "%s d(%s): %.3g from autograd's (max %.3g)", fam, pn, err, mx);
                free(ref);
            }
        free(c);
    }
    attn_st_free(st);
}

/* Every family's tiny model (fixtures/families: transformers' random Llama 3, Mistral with its
 * window, Qwen2 with q/k/v biases, Qwen3 with QK-norm, Gemma 3 with QK-norm, sandwich norms,
 * GEGLU, scaled embeddings and local/global layers) as a trainable copy: the forward's bits as
 * attn_llm_forward's, every parameter's gradient against finite differences, by element and
 * along a random direction of the whole tensor and against PyTorch autograd's (T = 7: past
 * Gemma's window of 4 and Mistral's of 6), the training pair and the thread counts. */
static void test_families(attn_ctx *ctx) {
    static const char *const fam[] = {"llama3", "mistral", "qwen2", "qwen3", "gemma3"};
    for (int f = 0; f < 5; f++) {
        char dir[96], name[64];
        snprintf(dir, sizeof dir, "fixtures/families/%s", fam[f]);
        snprintf(name, sizeof name, "%s (trainable)", fam[f]);
        attn_llm *src = NULL, *lm = NULL;
        if (!TU_STATUS(attn_llm_load_hf(ctx, dir, &src), ATTN_OK, ctx))
            continue;
        if (TU_STATUS(attn_llm_load_hf(ctx, dir, &lm), ATTN_OK, ctx) &&
            TU_STATUS(attn_llm_make_trainable(ctx, lm, 0), ATTN_OK, ctx)) {
            attn_module *m = attn_llm_module(lm);
            same_logits(ctx, src, lm, name);
            attn_llm_config c;
            attn_llm_get_info(src, &c);
            lcase g;
            memset(&g, 0, sizeof g);
            g.kind = K_LM, g.m = m, g.llm = lm;
            enum { B = 2, T = 7 };
            uint64_t st = 40 + (uint64_t)f;
            for (int64_t i = 0; i < B * T; i++)
                idbuf[i] = (int64_t)(tu_rand(&st) % (uint64_t)c.vocab_size);
            const int64_t sh[2] = {B, T};
            g.x = attn_tensor_make(idbuf, ATTN_I64, 2, sh);
            g.out = attn_view3(obuf[0], B, T, c.vocab_size);
            g.nout = B * T * c.vocab_size;
            g.c = malloc(sizeof(float) * (size_t)g.nout);
            tu_fill(g.c, (size_t)g.nout, 70 + (uint64_t)f, -1, 1);
            fd_case(ctx, &g, name, 17);
            dir_case(ctx, &g, name, 23);
            if (f)
                autograd_case(ctx, lm, fam[f]); /* every family but llama3 has gradients */
            saved_case(ctx, &g, name, 0);
            saved_case(ctx, &g, name, ATTN_SAVED_CHECKPOINT);
            threads_case(ctx, &g, name);
            if (f == 4) { /* Gemma's names, as its state_dict */
                attn_tensor t;
                TU_STATUS(attn_module_param(ctx, m,
                                            "model.layers.5.post_feedforward_layernorm.weight", &t),
                          ATTN_OK, ctx);
                TU_STATUS(attn_module_param(ctx, m, "model.layers.0.self_attn.k_norm.weight", &t),
                          ATTN_OK, ctx);
            }
            free(g.c);
        }
        attn_llm_free(lm);
        attn_llm_free(src);
    }
    /* Gemma's pieces with an untied head (the embedding's gradient then comes from the scaled
     * input alone) and Qwen2's biases, Llama 3's scaling, random weights: every family setting
     * of attn_llm_create at once */
    attn_llm_config c = tiny_cfg(16, 4, 2, 24, 0);
    c.qk_norm = 1, c.sandwich_norm = 1, c.mlp_act = 1, c.embed_scale = 4.0;
    c.sliding_window = 3, c.sliding_period = 2, c.rope_theta_local = 100;
    c.attention_bias = 2, c.rope_scaling = 2, c.rope_factor = 8, c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4, c.rope_original_context = 16;
    attn_llm *lm = NULL;
    if (TU_STATUS(attn_llm_create(ctx, &c, &lm), ATTN_OK, ctx)) {
        lcase g = make(K_LM, attn_llm_module(lm), 2, 6, 16, c.vocab_size, 0, 77);
        g.llm = lm;
        fd_case(ctx, &g, "every family setting, untied", 19);
        dir_case(ctx, &g, "every family setting, untied", 29);
        saved_case(ctx, &g, "every family setting, untied", 0);
        threads_case(ctx, &g, "every family setting, untied");
        free(g.c);
    }
    attn_llm_free(lm);
    lm = NULL;
    c.rope_scaling = 3;
    TU_STATUS(attn_llm_create(ctx, &c, &lm), ATTN_E_UNSUPPORTED, ctx);
    TU_CHECK(lm == NULL, "a refused model was made");
}

static void test_errors(attn_ctx *ctx) {
    attn_llm_config c = tiny_cfg(16, 4, 2, 24, 0);
    attn_module *m = NULL, *mlp = NULL;
    if (!TU_STATUS(attn_llama_layer_create(ctx, &c, &m), ATTN_OK, ctx)) return;
    TU_STATUS(attn_llama_mlp_create(ctx, &c, &mlp), ATTN_OK, ctx);
    lcase g = make(K_LAYER, m, 1, 3, 16, 0, 0, 5);
    attn_tensor C = g.out, dx = g.x;
    C.data = g.c, dx.data = dbuf[0];
    TU_STATUS(attn_llama_layer_backward(ctx, m, &g.x, NULL, &C, &dx), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_module_enable_grad(ctx, m), ATTN_OK, ctx);
    attn_tensor bad = C;
    bad.shape[1] = 2;
    TU_STATUS(attn_llama_layer_backward(ctx, m, &g.x, NULL, &bad, &dx), ATTN_E_SHAPE, ctx);
    TU_STATUS(attn_llama_layer_backward(ctx, m, &g.x, NULL, &C, &C), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llama_layer_backward(ctx, m, &g.x, NULL, &C, NULL), ATTN_OK, ctx);
    attn_saved *sv = NULL;
    TU_STATUS(attn_saved_create(ctx, 0, &sv), ATTN_OK, ctx);
    TU_STATUS(attn_llama_layer_forward_train(ctx, m, &g.x, NULL, &g.out, sv), ATTN_OK, ctx);
    TU_STATUS(attn_module_enable_grad(ctx, mlp), ATTN_OK, ctx);
    TU_STATUS(attn_llama_mlp_backward_saved(ctx, mlp, sv, &C, &dx), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_llama_layer_backward(ctx, m, &g.x, NULL, &C, &dx), ATTN_OK, ctx);
    attn_tensor x2 = attn_view2(xbuf[0], 3, 16), C2 = attn_view2(g.c, 3, 16),
                dx2 = attn_view2(dbuf[1], 3, 16);
    TU_STATUS(attn_llama_layer_backward(ctx, m, &x2, NULL, &C2, &dx2), ATTN_OK, ctx);
    TU_CHECK(tu_close("[T, E] input = [1, T, E]", dbuf[1], dbuf[0], 48, 0), "2-D");
    attn_saved_free(sv);
    free(g.c);
    attn_module_free(m);
    attn_module_free(mlp);
}

int main(void) {
    attn_ctx *ctx = tu_ctx(1);
    if (!ctx) return 1;
    test_rms_rope(ctx);
    test_modules(ctx);
    test_lm(ctx);
    test_from_llm(ctx);
    test_families(ctx);
    test_errors(ctx);
    attn_ctx_free(ctx);
    return tu_finish("test_llama_grads");
}
