/* API edges (issue "hostile input", item "API edges"; review reliability.md):
 *  - outputs that overlap inputs or each other are refused (ATTN_E_INVALID, the message names
 *    both), exact aliasing stays accepted where the header allows it, disjoint slices of one
 *    buffer are accepted;
 *  - outputs that give two elements the same memory (stride 0) are refused;
 *  - unknown context flags and out-of-range enum values are refused;
 *  - attn_sinusoidal_encoding refuses positions past 2^53 (it overflowed at INT64_MAX - 1,
 *    UBSan);
 *  - scores that overflow float give ATTN_E_NONFINITE on every SDPA path (reference, row,
 *    fused, decode, bf16) and kernel set, and in the backwards (review F7b). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/dispatch.h"
#include "testutil.h"

/* status `got` must be `want`, and the context's message must contain `sub` (when given) */
static void expect_(attn_ctx *ctx, attn_status got, attn_status want, const char *sub,
                    const char *what, int line) {
    const char *msg = attn_ctx_errmsg(ctx);
    TU_CHECK(got == want, "line %d, %s: got %s, expected %s (%s)", line, what,
             attn_status_name(got), attn_status_name(want), msg);
    if (sub && want != ATTN_OK)
        TU_CHECK(strstr(msg, sub) != NULL, "line %d, %s: message '%s' lacks '%s'", line, what,
                 msg, sub);
    attn_ctx_clear_error(ctx);
}
#define EXPECT(ctx, call, want, sub) expect_((ctx), (call), (want), (sub), #call, __LINE__)

static attn_tensor view_at(float *p, int ndim, const int64_t *shape) {
    return attn_tensor_make(p, ATTN_F32, ndim, shape);
}

/* ---- context flags and enums --------------------------------------------------------------- */
static void test_flags(void) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    attn_ctx *ctx = (attn_ctx *)1;
    p.flags = 1u << 3;
    TU_CHECK(attn_ctx_create(&p, &ctx) == ATTN_E_INVALID && ctx == NULL, "unknown flag accepted");
    TU_CHECK(strstr(attn_ctx_errmsg(NULL), "unknown flags 0x8") != NULL, "flags message: %s",
             attn_ctx_errmsg(NULL));
    p.flags = ATTN_CTX_NO_FINITE_CHECK | (1u << 31);
    TU_CHECK(attn_ctx_create(&p, &ctx) == ATTN_E_INVALID, "high flag bit accepted");
    TU_CHECK(strstr(attn_ctx_errmsg(NULL), "0x80000000") != NULL, "flags message: %s",
             attn_ctx_errmsg(NULL));
    p.flags = 0;
    p.threads = -1;
    TU_CHECK(attn_ctx_create(&p, &ctx) == ATTN_E_INVALID, "threads -1 accepted");
    TU_CHECK(strstr(attn_ctx_errmsg(NULL), "threads") != NULL, "threads message: %s",
             attn_ctx_errmsg(NULL));
    p.threads = 0;
    p.flags = ATTN_CTX_NO_FINITE_CHECK;
    TU_CHECK(attn_ctx_create(&p, &ctx) == ATTN_OK && ctx, "the known flag refused");
    TU_CHECK(strcmp(attn_ctx_errmsg(NULL), "no context") == 0, "stale create message: %s",
             attn_ctx_errmsg(NULL));
    /* threads 0: one per core the process may run on (tests/test_cpu_threads.c; ctest also
     * runs this test under taskset with one CPU: test_api_edges_one_cpu) */
    TU_CHECK(attn_cpu_count() >= 1 && attn_cpu_count() <= 1024, "attn_cpu_count %d",
             attn_cpu_count());
    TU_CHECK(attn_cpu_default_threads() >= 1 && attn_cpu_default_threads() <= attn_cpu_count(),
             "attn_cpu_default_threads %d, %d CPUs", attn_cpu_default_threads(),
             attn_cpu_count());
    TU_CHECK(attn_ctx_threads(ctx) == attn_cpu_default_threads(),
             "threads 0 gave %d threads, the default is %d", attn_ctx_threads(ctx),
             attn_cpu_default_threads());
    if (getenv("ATTN_TEST_CPUS"))
        TU_CHECK(attn_cpu_count() == atoi(getenv("ATTN_TEST_CPUS")) &&
                     attn_cpu_default_threads() == 1,
                 "attn_cpu_count %d, default threads %d under an affinity of %s CPUs",
                 attn_cpu_count(), attn_cpu_default_threads(), getenv("ATTN_TEST_CPUS"));
    attn_ctx_free(ctx);

    ctx = tu_ctx(1);
    float q[2 * 4 * 8], o[2 * 4 * 8], x[12], y[12];
    tu_fill(q, 64, 1, -1, 1);
    tu_fill(x, 12, 2, -1, 1);
    attn_tensor Q = attn_view4(q, 1, 2, 4, 8), O = attn_view4(o, 1, 2, 4, 8);
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.causal = (attn_causal)3;
    EXPECT(ctx, attn_sdpa(ctx, &Q, &Q, &Q, NULL, &opt, &O, NULL, NULL), ATTN_E_INVALID,
           "unknown causal mode 3");
    opt.causal = (attn_causal)-1;
    EXPECT(ctx, attn_sdpa(ctx, &Q, &Q, &Q, NULL, &opt, &O, NULL, NULL), ATTN_E_INVALID,
           "unknown causal mode");
    opt = attn_sdpa_defaults();
    unsigned char mk[4] = {1, 1, 1, 1};
    attn_mask M = {(attn_mask_kind)9, attn_tensor_make(mk, ATTN_BOOL, 1, (int64_t[]){4})};
    EXPECT(ctx, attn_sdpa(ctx, &Q, &Q, &Q, &M, &opt, &O, NULL, NULL), ATTN_E_INVALID,
           "unknown mask kind 9");
    attn_tensor X = attn_view2(x, 3, 4), Y = attn_view2(y, 3, 4);
    EXPECT(ctx, attn_activate(ctx, (attn_activation)4, &X, &Y), ATTN_E_INVALID,
           "unknown activation 4");
    attn_tensor X3 = attn_view3(x, 1, 3, 4), Y3 = attn_view3(y, 1, 3, 4),
                PE = attn_view2(x, 3, 4);
    EXPECT(ctx, attn_positional_apply(ctx, (attn_pe_mode)2, &X3, &PE, &Y3), ATTN_E_INVALID,
           "unknown positional mode 2");
    EXPECT(ctx, attn_simple_self_attention(ctx, &X, (attn_normalize)2, NULL, NULL, &X),
           ATTN_E_INVALID, "unknown normalisation 2");
    EXPECT(ctx, attn_ctx_set_limit(ctx, ATTN_LIMIT_COUNT, 5), ATTN_E_INVALID, "unknown limit");
    attn_transformer_config tc = attn_transformer_defaults(8, 2);
    tc.activation = ATTN_ACT_TANH; /* not a feed-forward activation of nn.Transformer */
    attn_module *m = NULL;
    EXPECT(ctx, attn_ffn_create(ctx, &tc, &m), ATTN_E_INVALID, "activation must be");
    tc.activation = (attn_activation)17;
    EXPECT(ctx, attn_encoder_layer_create(ctx, &tc, &m), ATTN_E_INVALID, "activation must be");
    attn_seed_attention_config sc = {(attn_seed_attention_kind)4, 4, 4, 0, 0.0f, 1};
    EXPECT(ctx, attn_seed_attention_create(ctx, &sc, &m), ATTN_E_INVALID,
           "unknown seed attention kind 4");
    TU_CHECK(m == NULL, "a module was made from an invalid config");
    attn_ctx_free(ctx);
}

/* ---- attn_sdpa and its backwards --------------------------------------------------------- */
enum { B = 1, H = 2, L = 4, S = 4, D = 8, NQ = B * H * L * D };

static void test_sdpa_overlap(attn_ctx *ctx) {
    /* one allocation holding q, k, v, out and more, so that views can be placed anywhere */
    float *buf = calloc(16 * NQ, sizeof(float));
    tu_fill(buf, 4 * NQ, 3, -1, 1);
    float *q = buf, *k = buf + NQ, *v = buf + 2 * NQ, *o = buf + 4 * NQ;
    attn_tensor Q = attn_view4(q, B, H, L, D), K = attn_view4(k, B, H, S, D),
                V = attn_view4(v, B, H, S, D), O = attn_view4(o, B, H, L, D);
    float ref[NQ], lse_ref[B * H * L];
    attn_tensor LSE = attn_view3(lse_ref, B, H, L);
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, NULL, &LSE), ATTN_OK, NULL);
    memcpy(ref, o, sizeof ref);

    /* out == q was silently wrong before (max error 0.98) */
    attn_tensor Oq = attn_view4(q, B, H, L, D);
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &Oq, NULL, NULL), ATTN_E_INVALID,
           "attn_sdpa: out overlaps q");
    /* a partial overlap: out starts in the last row of v */
    attn_tensor Ov = attn_view4(v + NQ - D, B, H, L, D);
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &Ov, NULL, NULL), ATTN_E_INVALID,
           "attn_sdpa: out overlaps v");
    /* outputs overlapping each other */
    float *w = buf + 5 * NQ;
    attn_tensor W = attn_view4(w, B, H, L, S), Lw = attn_view3(w + 3, B, H, L);
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, &W, &Lw), ATTN_E_INVALID,
           "attn_sdpa: lse overlaps weights");
    attn_tensor Wo = attn_view4(o + 2, B, H, L, S);
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, &Wo, NULL), ATTN_E_INVALID,
           "attn_sdpa: weights overlaps out");
    attn_tensor Lk = attn_view3(k + 5, B, H, L);
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, NULL, &Lk), ATTN_E_INVALID,
           "attn_sdpa: lse overlaps k");
    /* the mask and the ALiBi slopes are inputs too */
    attn_mask Mo = {ATTN_MASK_ADD, attn_view2(o + NQ - 4, L, S)};
    for (int i = 0; i < L * S; i++) o[NQ - 4 + i] = 0.0f;
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, &Mo, NULL, &O, NULL, NULL), ATTN_E_INVALID,
           "attn_sdpa: out overlaps mask");
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.alibi_slopes = o + 1;
    o[1] = o[2] = 0.5f;
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, &opt, &O, NULL, NULL), ATTN_E_INVALID,
           "attn_sdpa: out overlaps alibi_slopes");
    /* a stride-0 output */
    attn_tensor O0 = O;
    O0.stride[2] = 0;
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O0, NULL, NULL), ATTN_E_INVALID,
           "output out has stride 0 on dimension 2");

    /* disjoint slices of one buffer: q and out as the two halves of [2 * NQ] */
    float *half = buf + 8 * NQ;
    memcpy(half, q, NQ * sizeof(float));
    attn_tensor Qh = attn_view4(half, B, H, L, D), Oh = attn_view4(half + NQ, B, H, L, D);
    EXPECT(ctx, attn_sdpa(ctx, &Qh, &K, &V, NULL, NULL, &Oh, NULL, NULL), ATTN_OK, NULL);
    TU_CHECK(memcmp(half + NQ, ref, sizeof ref) == 0, "out beside q differs");
    /* ... and out in the even rows, q in the odd rows of one [B, H, 2L, D]: these interleave
     * (row blocks alternate), so the conservative extent check refuses them */
    attn_tensor Qi = attn_view4(half + D, B, H, L, D), Oi = attn_view4(half, B, H, L, D);
    Qi.stride[2] = Oi.stride[2] = 2 * D;
    Qi.stride[1] = Oi.stride[1] = 2 * L * D;
    Qi.stride[0] = Oi.stride[0] = 2 * H * L * D;
    EXPECT(ctx, attn_sdpa(ctx, &Qi, &K, &V, NULL, NULL, &Oi, NULL, NULL), ATTN_E_INVALID,
           "attn_sdpa: out overlaps q");

    /* backward: outputs against inputs and against each other */
    float *g = buf + 10 * NQ;
    float *dq = g, *dk = g + NQ, *dv = g + 2 * NQ, *dout = g + 3 * NQ;
    tu_fill(dout, NQ, 4, -1, 1);
    attn_tensor dQ = attn_view4(dq, B, H, L, D), dK = attn_view4(dk, B, H, S, D),
                dV = attn_view4(dv, B, H, S, D), dO = attn_view4(dout, B, H, L, D);
    EXPECT(ctx, attn_sdpa_backward(ctx, &Q, &K, &V, NULL, NULL, &dO, &dQ, &dK, &dV, NULL),
           ATTN_OK, NULL);
    attn_tensor dKq = attn_view4(dq + 7, B, H, S, D);
    EXPECT(ctx, attn_sdpa_backward(ctx, &Q, &K, &V, NULL, NULL, &dO, &dQ, &dKq, &dV, NULL),
           ATTN_E_INVALID, "attn_sdpa_backward: dk overlaps dq");
    attn_tensor dVo = attn_view4(dout + D, B, H, S, D);
    EXPECT(ctx, attn_sdpa_backward(ctx, &Q, &K, &V, NULL, NULL, &dO, &dQ, &dK, &dVo, NULL),
           ATTN_E_INVALID, "attn_sdpa_backward: dv overlaps dout");
    EXPECT(ctx, attn_sdpa_backward(ctx, &Q, &K, &V, NULL, NULL, &dO, &Q, NULL, NULL, NULL),
           ATTN_E_INVALID, "attn_sdpa_backward: dq overlaps q");
    float sv_lse[B * H * L];
    attn_tensor SL = attn_view3(sv_lse, B, H, L), Osv = attn_view4(buf + 6 * NQ, B, H, L, D);
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &Osv, NULL, &SL), ATTN_OK, NULL);
    attn_tensor dKs = attn_view4(buf + 6 * NQ + 3, B, H, S, D);
    EXPECT(ctx,
           attn_sdpa_backward_saved(ctx, &Q, &K, &V, NULL, NULL, &Osv, &SL, &dO, &dQ, &dKs, &dV,
                                    NULL),
           ATTN_E_INVALID, "attn_sdpa_backward_saved: dk overlaps out");
    float dm[L * S], am[L * S] = {0};
    attn_mask AM = {ATTN_MASK_ADD, attn_view2(am, L, S)};
    attn_tensor DM = attn_view2(dm, L, S), DMq = attn_view2(dq + 4, L, S);
    EXPECT(ctx, attn_sdpa_backward(ctx, &Q, &K, &V, &AM, NULL, &dO, &dQ, NULL, NULL, &DM),
           ATTN_OK, NULL);
    EXPECT(ctx, attn_sdpa_backward(ctx, &Q, &K, &V, &AM, NULL, &dO, &dQ, NULL, NULL, &DMq),
           ATTN_E_INVALID, "attn_sdpa_backward: dmask overlaps dq");
    attn_mask AMd = {ATTN_MASK_ADD, attn_view2(dq, L, S)};
    EXPECT(ctx, attn_sdpa_backward(ctx, &Q, &K, &V, &AMd, NULL, &dO, NULL, NULL, NULL, &DM),
           ATTN_OK, NULL); /* dq not wanted: no overlap */
    EXPECT(ctx, attn_sdpa_backward(ctx, &Q, &K, &V, &AMd, NULL, &dO, &dQ, NULL, NULL, &DM),
           ATTN_E_INVALID, "attn_sdpa_backward: dq overlaps mask");

    free(buf);

    /* varlen: packed [T, H, D], one allocation of 8 tensors of P floats */
    enum { T = 2 * L, P = T * H * D };
    float *vb = calloc(8 * P, sizeof(float)), vl[H * T];
    tu_fill(vb, 8 * P, 12, -1, 1);
    int32_t cu[3] = {0, L, T};
    attn_tensor CU = attn_tensor_make(cu, ATTN_I32, 1, (int64_t[]){3});
    attn_tensor Pq = attn_view3(vb, T, H, D), Pk = attn_view3(vb + P, T, H, D),
                Pv = attn_view3(vb + 2 * P, T, H, D), Po = attn_view3(vb + 3 * P, T, H, D),
                Pl = attn_view2(vl, H, T);
    EXPECT(ctx, attn_sdpa_varlen(ctx, &Pq, &Pk, &Pv, &CU, &CU, NULL, &Po, &Pl), ATTN_OK, NULL);
    attn_tensor Pov = attn_view3(vb + 2 * P + 3, T, H, D);
    EXPECT(ctx, attn_sdpa_varlen(ctx, &Pq, &Pk, &Pv, &CU, &CU, NULL, &Pov, NULL), ATTN_E_INVALID,
           "attn_sdpa_varlen: out overlaps v");
    attn_tensor Plo = attn_view2(vb + 3 * P + 1, H, T);
    EXPECT(ctx, attn_sdpa_varlen(ctx, &Pq, &Pk, &Pv, &CU, &CU, NULL, &Po, &Plo), ATTN_E_INVALID,
           "attn_sdpa_varlen: lse overlaps out");
    attn_tensor Pdq = attn_view3(vb + 4 * P, T, H, D), Pdk = attn_view3(vb + 5 * P, T, H, D),
                Pdv = attn_view3(vb + 4 * P + 1, T, H, D), Pdo = attn_view3(vb + 7 * P, T, H, D);
    EXPECT(ctx, attn_sdpa_varlen_backward(ctx, &Pq, &Pk, &Pv, &CU, &CU, NULL, &Pdo, &Pdq, &Pdk,
                                          NULL),
           ATTN_OK, NULL);
    EXPECT(ctx, attn_sdpa_varlen_backward(ctx, &Pq, &Pk, &Pv, &CU, &CU, NULL, &Pdo, &Pdq, &Pdk,
                                          &Pdv),
           ATTN_E_INVALID, "attn_sdpa_varlen_backward: dv overlaps dq");
    free(vb);
}

/* ---- elementwise and small ops: in place where documented, nothing else --------------- */
static void test_ops_overlap(attn_ctx *ctx) {
    enum { R = 3, C = 5, N = R * C };
    float buf[8 * N], want[N];
    tu_fill(buf, 8 * N, 5, -2, 2);
    float *x = buf, *y = buf + 2 * N;
    attn_tensor X = attn_view2(x, R, C), Y = attn_view2(y, R, C);

    /* softmax: y == x in place (same result), a shifted or re-strided y refused */
    EXPECT(ctx, attn_softmax(ctx, &X, &Y), ATTN_OK, NULL);
    memcpy(want, y, sizeof want);
    float xin[N];
    memcpy(xin, x, sizeof xin);
    EXPECT(ctx, attn_softmax(ctx, &X, &X), ATTN_OK, NULL);
    TU_CHECK(memcmp(x, want, sizeof want) == 0, "softmax in place differs");
    memcpy(x, xin, sizeof xin);
    attn_tensor Ys = attn_view2(x + 1, R, C);
    EXPECT(ctx, attn_softmax(ctx, &X, &Ys), ATTN_E_INVALID, "attn_softmax: y overlaps x");
    float sq[16];
    tu_fill(sq, 16, 6, -1, 1);
    attn_tensor S4 = attn_view2(sq, 4, 4), S4t = S4;
    S4t.stride[0] = 1, S4t.stride[1] = 4; /* the transpose: same memory, other elements */
    EXPECT(ctx, attn_softmax(ctx, &S4, &S4t), ATTN_E_INVALID, "attn_softmax: y overlaps x");
    /* stride 0 and self-interleaving outputs */
    attn_tensor Y0 = Y;
    Y0.stride[0] = 0;
    EXPECT(ctx, attn_softmax(ctx, &X, &Y0), ATTN_E_INVALID,
           "attn_softmax: output y has stride 0 on dimension 0 (size 3)");
    attn_tensor Yi = Y;
    Yi.stride[0] = 2; /* rows of 5 two apart */
    EXPECT(ctx, attn_softmax(ctx, &X, &Yi), ATTN_E_INVALID, "give two elements the same memory");
    attn_tensor X1 = attn_view2(x, 1, C), Y1 = attn_view2(y, 1, C);
    Y1.stride[0] = 0; /* size 1: the stride does not matter */
    EXPECT(ctx, attn_softmax(ctx, &X1, &Y1), ATTN_OK, NULL);
    /* even and odd columns of one [R, 2C] buffer: disjoint but interleaved, refused (as the
     * header says) */
    attn_tensor Xe = attn_view2(y, R, C), Yo = attn_view2(y + 1, R, C);
    Xe.stride[0] = Yo.stride[0] = 2 * C;
    Xe.stride[1] = Yo.stride[1] = 2;
    EXPECT(ctx, attn_activate(ctx, ATTN_ACT_TANH, &Xe, &Yo), ATTN_E_INVALID,
           "attn_activate: y overlaps x");

    /* activation and layer norm in place */
    EXPECT(ctx, attn_activate(ctx, ATTN_ACT_GELU, &X, &Y), ATTN_OK, NULL);
    memcpy(want, y, sizeof want);
    EXPECT(ctx, attn_activate(ctx, ATTN_ACT_GELU, &X, &X), ATTN_OK, NULL);
    TU_CHECK(memcmp(x, want, sizeof want) == 0, "activation in place differs");
    memcpy(x, xin, sizeof xin);
    EXPECT(ctx, attn_activate(ctx, ATTN_ACT_GELU, &X, &Ys), ATTN_E_INVALID,
           "attn_activate: y overlaps x");
    float lw[C], lb[C];
    tu_fill(lw, C, 7, 0.5f, 1.5f);
    tu_fill(lb, C, 8, -0.5f, 0.5f);
    attn_tensor LW = attn_view1(lw, C), LB = attn_view1(lb, C);
    EXPECT(ctx, attn_layer_norm(ctx, &X, &LW, &LB, 1e-5f, &Y), ATTN_OK, NULL);
    memcpy(want, y, sizeof want);
    EXPECT(ctx, attn_layer_norm(ctx, &X, &LW, &LB, 1e-5f, &X), ATTN_OK, NULL);
    TU_CHECK(memcmp(x, want, sizeof want) == 0, "layer norm in place differs");
    memcpy(x, xin, sizeof xin);
    attn_tensor Yw = attn_view2(lw, 1, C);
    attn_tensor X1c = attn_view2(x, 1, C);
    EXPECT(ctx, attn_layer_norm(ctx, &X1c, &LW, &LB, 1e-5f, &Yw), ATTN_E_INVALID,
           "attn_layer_norm: y overlaps weight");
    EXPECT(ctx, attn_layer_norm(ctx, &X, &LW, &LB, 1e-5f, &Ys), ATTN_E_INVALID,
           "attn_layer_norm: y overlaps x");

    /* linear: exact and partial overlaps with x, W, b */
    float Wt[C * C], bb[C];
    tu_fill(Wt, C * C, 9, -1, 1);
    tu_fill(bb, C, 10, -1, 1);
    attn_tensor WT = attn_view2(Wt, C, C), BB = attn_view1(bb, C);
    EXPECT(ctx, attn_linear(ctx, &X, &WT, &BB, &Y), ATTN_OK, NULL);
    EXPECT(ctx, attn_linear(ctx, &X, &WT, &BB, &X), ATTN_E_INVALID, "attn_linear: y overlaps x");
    EXPECT(ctx, attn_linear(ctx, &X, &WT, &BB, &Ys), ATTN_E_INVALID, "attn_linear: y overlaps x");
    attn_tensor YW = attn_view2(Wt + C, R, C);
    EXPECT(ctx, attn_linear(ctx, &X, &WT, &BB, &YW), ATTN_E_INVALID, "attn_linear: y overlaps W");

    /* backwards */
    float *dy = buf + 4 * N, *dx = buf + 6 * N;
    attn_tensor DY = attn_view2(dy, R, C), DX = attn_view2(dx, R, C);
    EXPECT(ctx, attn_softmax(ctx, &X, &Y), ATTN_OK, NULL);
    EXPECT(ctx, attn_softmax_backward(ctx, &Y, &DY, &DX), ATTN_OK, NULL);
    memcpy(want, dx, sizeof want);
    float dysave[N];
    memcpy(dysave, dy, sizeof dysave);
    EXPECT(ctx, attn_softmax_backward(ctx, &Y, &DY, &DY), ATTN_OK, NULL);
    TU_CHECK(memcmp(dy, want, sizeof want) == 0, "softmax backward in place differs");
    memcpy(dy, dysave, sizeof dysave);
    attn_tensor DXs = attn_view2(dy + 2, R, C);
    EXPECT(ctx, attn_softmax_backward(ctx, &Y, &DY, &DXs), ATTN_E_INVALID,
           "attn_softmax_backward: dx overlaps dy");
    EXPECT(ctx, attn_activate_backward(ctx, ATTN_ACT_GELU, &X, &DY, &DX), ATTN_OK, NULL);
    memcpy(want, dx, sizeof want);
    EXPECT(ctx, attn_activate_backward(ctx, ATTN_ACT_GELU, &X, &DY, &X), ATTN_OK, NULL);
    TU_CHECK(memcmp(x, want, sizeof want) == 0, "activation backward in place differs");
    memcpy(x, xin, sizeof xin);
    float dw[C], db2[C];
    attn_tensor DW = attn_view1(dw, C), DB = attn_view1(db2, C);
    EXPECT(ctx, attn_layer_norm_backward(ctx, &X, &LW, 1e-5f, &DY, &DX, &DW, &DB), ATTN_OK, NULL);
    memcpy(want, dx, sizeof want);
    EXPECT(ctx, attn_layer_norm_backward(ctx, &X, &LW, 1e-5f, &DY, &DY, &DW, &DB), ATTN_OK, NULL);
    TU_CHECK(memcmp(dy, want, sizeof want) == 0, "layer norm backward in place differs");
    memcpy(dy, dysave, sizeof dysave);
    attn_tensor DWx = attn_view1(dx + 1, C);
    EXPECT(ctx, attn_layer_norm_backward(ctx, &X, &LW, 1e-5f, &DY, &DX, &DWx, &DB),
           ATTN_E_INVALID, "attn_layer_norm_backward: dweight overlaps dx");
    attn_tensor DBx = attn_view1(x + 3, C);
    EXPECT(ctx, attn_layer_norm_backward(ctx, &X, &LW, 1e-5f, &DY, NULL, NULL, &DBx),
           ATTN_E_INVALID, "attn_layer_norm_backward: dbias overlaps x");
    attn_tensor dWt = attn_view2(Wt, C, C);
    float dwt[C * C], dbb[C];
    attn_tensor DWT = attn_view2(dwt, C, C), DBB = attn_view1(dbb, C);
    EXPECT(ctx, attn_linear_backward(ctx, &X, &WT, &DY, &DX, &DWT, &DBB), ATTN_OK, NULL);
    EXPECT(ctx, attn_linear_backward(ctx, &X, &WT, &DY, &DX, &dWt, &DBB), ATTN_E_INVALID,
           "attn_linear_backward: dW overlaps W");
    attn_tensor DXy = attn_view2(dy + 1, R, C);
    EXPECT(ctx, attn_linear_backward(ctx, &X, &WT, &DY, &DXy, NULL, NULL), ATTN_E_INVALID,
           "attn_linear_backward: dx overlaps dy");
    attn_tensor DBd = attn_view1(dwt + 2, C);
    EXPECT(ctx, attn_linear_backward(ctx, &X, &WT, &DY, NULL, &DWT, &DBd), ATTN_E_INVALID,
           "attn_linear_backward: db overlaps dW");

    /* embedding, positions, simple attention, cross-entropy */
    int64_t ids[3] = {0, 2, 1};
    attn_tensor IDS = attn_tensor_make(ids, ATTN_I64, 1, (int64_t[]){3});
    attn_tensor TAB = attn_view2(Wt, C, C), EO = attn_view2(dwt, 3, C);
    EXPECT(ctx, attn_embedding(ctx, &IDS, &TAB, &EO), ATTN_OK, NULL);
    attn_tensor EOt = attn_view2(Wt + 4, 3, C);
    EXPECT(ctx, attn_embedding(ctx, &IDS, &TAB, &EOt), ATTN_E_INVALID,
           "attn_embedding: out overlaps table");
    attn_tensor EOi = attn_view2((float *)(void *)ids, 1, 2);
    attn_tensor IDS1 = attn_tensor_make(ids, ATTN_I64, 1, (int64_t[]){1});
    attn_tensor TAB2 = attn_view2(Wt, C, 2);
    EXPECT(ctx, attn_embedding(ctx, &IDS1, &TAB2, &EOi), ATTN_E_INVALID,
           "attn_embedding: out overlaps ids");
    attn_tensor DT = attn_view2(dwt, C, C), DO3 = attn_view2(Wt, 3, C), DTo = attn_view2(Wt, C, C);
    EXPECT(ctx, attn_embedding_backward(ctx, &IDS, &DO3, &DT), ATTN_OK, NULL);
    EXPECT(ctx, attn_embedding_backward(ctx, &IDS, &DO3, &DTo), ATTN_E_INVALID,
           "attn_embedding_backward: dtable overlaps dout");
    attn_tensor PX = attn_view3(x, 1, R, C), PP = attn_view2(Wt, R, C),
                PO = attn_view3(y, 1, R, C), POx = attn_view3(x + C, 1, R, C);
    EXPECT(ctx, attn_positional_apply(ctx, ATTN_PE_ADD, &PX, &PP, &PO), ATTN_OK, NULL);
    EXPECT(ctx, attn_positional_apply(ctx, ATTN_PE_ADD, &PX, &PP, &POx), ATTN_E_INVALID,
           "attn_positional_apply: out overlaps x");
    attn_tensor PD = attn_view3(dy, 1, R, C), PDX = attn_view3(dx, 1, R, C),
                PDP = attn_view2(dwt, R, C), PDPd = attn_view2(dy + C, R, C);
    EXPECT(ctx, attn_positional_apply_backward(ctx, ATTN_PE_ADD, &PD, &PD, &PDP), ATTN_OK, NULL);
    EXPECT(ctx, attn_positional_apply_backward(ctx, ATTN_PE_ADD, &PD, &PDX, &PDPd),
           ATTN_E_INVALID, "attn_positional_apply_backward: dpe overlaps dout");
    attn_tensor PDXc = attn_view3(dy, 1, R, 2);
    EXPECT(ctx, attn_positional_apply_backward(ctx, ATTN_PE_CONCAT, &PD, &PDXc, NULL),
           ATTN_E_INVALID, "attn_positional_apply_backward: dx overlaps dout");
    float ctxv[N], scores[R * R], wts[R * R];
    attn_tensor CX = attn_view2(ctxv, R, C), SC = attn_view2(scores, R, R),
                WS = attn_view2(wts, R, R), WSs = attn_view2(scores + 1, R, R),
                CXx = attn_view2(x + 2, R, C);
    EXPECT(ctx, attn_simple_self_attention(ctx, &X, ATTN_NORM_SOFTMAX, &SC, &WS, &CX), ATTN_OK,
           NULL);
    EXPECT(ctx, attn_simple_self_attention(ctx, &X, ATTN_NORM_SOFTMAX, &SC, &WSs, &CX),
           ATTN_E_INVALID, "attn_simple_self_attention: weights overlaps scores");
    EXPECT(ctx, attn_simple_self_attention(ctx, &X, ATTN_NORM_SOFTMAX, NULL, NULL, &CXx),
           ATTN_E_INVALID, "attn_simple_self_attention: context overlaps X");
    EXPECT(ctx, attn_simple_self_attention_backward(ctx, &X, ATTN_NORM_SOFTMAX, &DY, &DY),
           ATTN_E_INVALID, "attn_simple_self_attention_backward: dX overlaps dcontext");
    int32_t tg[R] = {0, 4, 2};
    attn_tensor TG = attn_tensor_make(tg, ATTN_I32, 1, (int64_t[]){R});
    float loss;
    EXPECT(ctx, attn_cross_entropy(ctx, &X, &TG, -100, 0.0f, &loss, &DX), ATTN_OK, NULL);
    EXPECT(ctx, attn_cross_entropy(ctx, &X, &TG, -100, 0.0f, &loss, &X), ATTN_E_INVALID,
           "attn_cross_entropy: dlogits overlaps logits");
    EXPECT(ctx, attn_cross_entropy(ctx, &X, &TG, -100, 0.0f, &dx[4], &DX), ATTN_E_INVALID,
           "attn_cross_entropy: loss overlaps dlogits");
}

/* ---- modules: entry checks ----------------------------------------------------------------- */
static void test_modules_overlap(attn_ctx *ctx) {
    enum { E = 8, NH = 2, BL = 2 * 3 * E };
    attn_module *mha = NULL, *lin = NULL, *enc = NULL;
    attn_mha_config mc = attn_mha_defaults(E, NH);
    TU_STATUS(attn_mha_create(ctx, &mc, &mha), ATTN_OK, ctx);
    TU_STATUS(attn_linear_create(ctx, E, E, 1, &lin), ATTN_OK, ctx);
    attn_transformer_config tc = attn_transformer_defaults(E, NH);
    tc.dim_feedforward = 16;
    tc.dropout = 0.0f;
    TU_STATUS(attn_encoder_layer_create(ctx, &tc, &enc), ATTN_OK, ctx);
    if (!mha || !lin || !enc) goto out;
    TU_STATUS(attn_module_init(ctx, mha, 1), ATTN_OK, ctx);
    TU_STATUS(attn_module_init(ctx, lin, 2), ATTN_OK, ctx);
    TU_STATUS(attn_module_init(ctx, enc, 3), ATTN_OK, ctx);
    float buf[4 * BL], wbuf[2 * 3 * 3 * NH];
    tu_fill(buf, 4 * BL, 11, -1, 1);
    attn_tensor Xq = attn_view3(buf, 2, 3, E), Y = attn_view3(buf + 2 * BL, 2, 3, E),
                Yq = attn_view3(buf + 5, 2, 3, E), W = attn_view3(wbuf, 2, 3, 3);
    attn_mha_options mo = {1, 1, 0};
    EXPECT(ctx, attn_mha_forward(ctx, mha, &Xq, &Xq, &Xq, NULL, NULL, &mo, NULL, &Y, &W), ATTN_OK,
           NULL);
    EXPECT(ctx, attn_mha_forward(ctx, mha, &Xq, &Xq, &Xq, NULL, NULL, &mo, NULL, &Yq, &W),
           ATTN_E_INVALID, "attn_mha_forward: out overlaps query");
    attn_tensor Wy = attn_view3(buf + 2 * BL + 1, 2, 3, 3);
    EXPECT(ctx, attn_mha_forward(ctx, mha, &Xq, &Xq, &Xq, NULL, NULL, &mo, NULL, &Y, &Wy),
           ATTN_E_INVALID, "attn_mha_forward: weights overlaps out");
    attn_tensor Pw;
    TU_STATUS(attn_module_param(ctx, mha, "in_proj_weight", &Pw), ATTN_OK, ctx);
    attn_tensor Yp = attn_view3((float *)Pw.data, 2, 3, E);
    EXPECT(ctx, attn_mha_forward(ctx, mha, &Xq, &Xq, &Xq, NULL, NULL, NULL, NULL, &Yp, NULL),
           ATTN_E_INVALID, "attn_mha_forward: out overlaps the module's parameters");
    EXPECT(ctx, attn_linear_forward(ctx, lin, &Xq, &Yq), ATTN_E_INVALID,
           "attn_linear: y overlaps x");
    EXPECT(ctx, attn_encoder_layer_forward(ctx, enc, &Xq, NULL, NULL, &Y), ATTN_OK,
           NULL);
    EXPECT(ctx, attn_encoder_layer_forward(ctx, enc, &Xq, NULL, NULL, &Xq),
           ATTN_E_INVALID, "attn_encoder_layer_forward: out overlaps src");
    attn_tensor Y0 = Y;
    Y0.stride[1] = 0;
    EXPECT(ctx, attn_encoder_layer_forward(ctx, enc, &Xq, NULL, NULL, &Y0),
           ATTN_E_INVALID, "has stride 0");
    attn_saved *sv = NULL;
    TU_STATUS(attn_saved_create(ctx, 0, &sv), ATTN_OK, ctx);
    EXPECT(ctx, attn_encoder_layer_forward_train(ctx, enc, &Xq, NULL, NULL, &Yq, sv),
           ATTN_E_INVALID, "attn_encoder_layer_forward_train: out overlaps src");
    TU_STATUS(attn_module_enable_grad(ctx, enc), ATTN_OK, ctx);
    EXPECT(ctx, attn_encoder_layer_forward_train(ctx, enc, &Xq, NULL, NULL, &Y, sv),
           ATTN_OK, NULL);
    attn_tensor dO2 = attn_view3(buf + BL, 2, 3, E), dX2 = attn_view3(buf + BL + 1, 2, 3, E);
    EXPECT(ctx, attn_encoder_layer_backward_saved(ctx, enc, sv, &dO2, &dX2), ATTN_E_INVALID,
           "attn_encoder_layer_backward_saved: dsrc overlaps dout");
    attn_saved_free(sv);
    attn_tensor dO = attn_view3(buf + BL, 2, 3, E), dX = attn_view3(buf + 3 * BL, 2, 3, E),
                dXo = attn_view3(buf + BL + 3, 2, 3, E);
    EXPECT(ctx, attn_encoder_layer_backward(ctx, enc, &Xq, NULL, NULL, &dO, &dX),
           ATTN_OK, NULL);
    EXPECT(ctx, attn_encoder_layer_backward(ctx, enc, &Xq, NULL, NULL, &dO, &dXo),
           ATTN_E_INVALID, "attn_encoder_layer_backward: dsrc overlaps dout");
out:
    attn_module_free(mha);
    attn_module_free(lin);
    attn_module_free(enc);
}

/* ---- sinusoidal positions at huge starts --------------------------------------------------- */
static void test_sinusoidal(attn_ctx *ctx) {
    float pe[3 * 4];
    attn_tensor PE = attn_view2(pe, 3, 4);
    const int64_t two53 = (int64_t)1 << 53;
    /* start + pos overflowed int64 here (UBSan: signed overflow) */
    EXPECT(ctx, attn_sinusoidal_encoding(ctx, INT64_MAX - 1, 10000.0f, &PE), ATTN_E_INVALID,
           "2^53");
    EXPECT(ctx, attn_sinusoidal_encoding(ctx, INT64_MAX, 10000.0f, &PE), ATTN_E_INVALID, "2^53");
    EXPECT(ctx, attn_sinusoidal_encoding(ctx, two53 - 1, 10000.0f, &PE), ATTN_E_INVALID,
           "2^53");
    /* the last position exactly 2^53: accepted, and exact */
    EXPECT(ctx, attn_sinusoidal_encoding(ctx, two53 - 2, 10000.0f, &PE), ATTN_OK, NULL);
    TU_CHECK(pe[2 * 4] == (float)sin((double)two53) && pe[2 * 4 + 1] == (float)cos((double)two53),
             "position 2^53: %g %g", (double)pe[8], (double)pe[9]);
    int64_t start = (int64_t)1 << 40;
    EXPECT(ctx, attn_sinusoidal_encoding(ctx, start, 10000.0f, &PE), ATTN_OK, NULL);
    double a = (double)(start + 1) / pow(10000.0, 2.0 / 4.0);
    TU_CHECK(pe[4 + 2] == (float)sin(a) && pe[4 + 3] == (float)cos(a), "position 2^40 + 1");
    attn_tensor PE0 = PE;
    PE0.stride[0] = 0;
    EXPECT(ctx, attn_sinusoidal_encoding(ctx, 0, 10000.0f, &PE0), ATTN_E_INVALID,
           "attn_sinusoidal_encoding: output pe has stride 0");
}

/* ---- F7b: scores that overflow float ------------------------------------------------------ */
static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* One forward of [1, 2, Lq, Dh] queries against [1, 2, Sk, Dh] keys where row (0, 0, 0) has
 * the score big^2 / sqrt(Dh) with key 3; strided: q's last dimension has stride 2 (the
 * reference kernel); bf16: q, k, v stored as bf16.  Returns the status; checks the message. */
static void overflow_case(attn_ctx *ctx, const char *path, int64_t Lq, int64_t Sk, int strided,
                          int bf16, float big, attn_status want, const char *sub) {
    const int64_t Hh = 2, Dh = 16, qd = strided ? 2 * Dh : Dh;
    float *q = calloc((size_t)(Hh * Lq * qd), sizeof(float));
    float *k = calloc((size_t)(Hh * Sk * Dh), sizeof(float));
    float *v = calloc((size_t)(Hh * Sk * Dh), sizeof(float));
    float *o = calloc((size_t)(Hh * Lq * Dh), sizeof(float));
    uint16_t *b16 = calloc((size_t)(Hh * (Lq + 2 * Sk) * Dh), sizeof(uint16_t));
    tu_fill(q, (size_t)(Hh * Lq * qd), 21, -0.5f, 0.5f);
    tu_fill(k, (size_t)(Hh * Sk * Dh), 22, -0.5f, 0.5f);
    tu_fill(v, (size_t)(Hh * Sk * Dh), 23, -0.5f, 0.5f);
    q[0] = big, k[3 * Dh] = big;
    attn_tensor Q = attn_view4(q, 1, Hh, Lq, Dh), K = attn_view4(k, 1, Hh, Sk, Dh),
                V = attn_view4(v, 1, Hh, Sk, Dh), O = attn_view4(o, 1, Hh, Lq, Dh);
    if (strided) {
        Q.stride[3] = 2, Q.stride[2] = qd, Q.stride[1] = Lq * qd, Q.stride[0] = Hh * Lq * qd;
    }
    if (bf16) {
        uint16_t *qb = b16, *kb = b16 + Hh * Lq * Dh, *vb = kb + Hh * Sk * Dh;
        for (int64_t i = 0; i < Hh * Lq * Dh; i++) qb[i] = to_bf16(q[i]);
        for (int64_t i = 0; i < Hh * Sk * Dh; i++) kb[i] = to_bf16(k[i]), vb[i] = to_bf16(v[i]);
        Q.data = qb, K.data = kb, V.data = vb;
        Q.dtype = K.dtype = V.dtype = ATTN_BF16;
    }
    attn_status st = attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, NULL, NULL);
    char what[96];
    snprintf(what, sizeof what, "%s path, isa %s, big %g", path, attn__isa_name(ctx->kern.isa),
             (double)big);
    expect_(ctx, st, want, sub, what, __LINE__);
    free(q), free(k), free(v), free(o), free(b16);
}

static void test_overflow_paths(void) {
    for (int isa = ATTN__ISA_REF; isa < ATTN__ISA_COUNT; isa++) {
        if (!tu_set_ok(isa, "test_api_edges: overflow paths")) continue;
        attn_ctx *ctx = tu_ctx(isa == ATTN__ISA_REF ? 1 : 2);
        if (!ctx) continue;
        TU_CHECK(attn__isa_set(ctx, isa), "isa_set %s", attn__isa_name(isa));
        /* q.k = 1e40 > FLT_MAX: overflows; 1e4 (score 2.5e7): fine everywhere */
        const char *msg = "attn_sdpa: scores overflow float (row max is infinite";
        float bigs[2] = {1e20f, 1e2f};
        for (int bi = 0; bi < 2; bi++) {
            attn_status want = bi == 0 ? ATTN_E_NONFINITE : ATTN_OK;
            overflow_case(ctx, "row", 20, 20, 0, 0, bigs[bi], want, msg);
            overflow_case(ctx, "reference", 20, 20, 1, 0, bigs[bi], want, msg);
            overflow_case(ctx, "fused", 128, 128, 0, 0, bigs[bi], want, msg);
            overflow_case(ctx, "decode", 1, 1024, 0, 0, bigs[bi], want, msg);
            overflow_case(ctx, "fused bf16", 128, 128, 0, 1, bigs[bi], want, msg);
            overflow_case(ctx, "decode bf16", 1, 1024, 0, 1, bigs[bi], want, msg);
            overflow_case(ctx, "decode, two queries", 2, 1024, 0, 0, bigs[bi], want, msg);
        }
        attn_ctx_free(ctx);
    }
}

/* A row that is really fully masked stays OK (zeros, lse -inf); the weighted sum of huge values
 * overflowing is reported; the backwards see the overflow too. */
static void test_overflow_more(attn_ctx *ctx) {
    enum { LL = 80, SS = 80, DD = 8, HH = 1 };
    float *q = calloc(LL * DD, 4), *k = calloc(SS * DD, 4), *v = calloc(SS * DD, 4),
          *o = calloc(LL * DD, 4), *dout = calloc(LL * DD, 4), *dq = calloc(LL * DD, 4),
          *lse = calloc(LL, 4);
    unsigned char *keep = calloc(LL * SS, 1);
    tu_fill(q, LL * DD, 31, -1, 1);
    tu_fill(k, SS * DD, 32, -1, 1);
    tu_fill(v, SS * DD, 33, -1, 1);
    tu_fill(dout, LL * DD, 34, -1, 1);
    /* the last dimension is 0 everywhere: a huge value there raises one score only */
    for (int i = 0; i < LL; i++) q[i * DD + DD - 1] = 0.0f;
    for (int j = 0; j < SS; j++) k[j * DD + DD - 1] = 0.0f;
#define SCORE(i, j, big) (q[(i) * DD + DD - 1] = (big), k[(j) * DD + DD - 1] = (big))
    for (int i = 1; i < LL; i++)
        for (int j = 0; j < SS; j++) keep[i * SS + j] = 1; /* row 0: every key masked */
    attn_tensor Q = attn_view4(q, 1, HH, LL, DD), K = attn_view4(k, 1, HH, SS, DD),
                V = attn_view4(v, 1, HH, SS, DD), O = attn_view4(o, 1, HH, LL, DD),
                LS = attn_view3(lse, 1, HH, LL), dO = attn_view4(dout, 1, HH, LL, DD),
                dQ = attn_view4(dq, 1, HH, LL, DD);
    attn_mask M = {ATTN_MASK_KEEP, attn_tensor_make(keep, ATTN_BOOL, 2, (int64_t[]){LL, SS})};
    /* fused (80 x 80) and row (first 20 queries and keys) */
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, &M, NULL, &O, NULL, &LS), ATTN_OK, NULL);
    TU_CHECK(lse[0] == -INFINITY && o[0] == 0.0f, "masked row: lse %g out %g", (double)lse[0],
             (double)o[0]);
    attn_sdpa_options br = attn_sdpa_defaults();
    br.causal = ATTN_CAUSAL_BOTTOM_RIGHT; /* L > S: the first rows see no key */
    attn_tensor Ks = attn_view4(k, 1, HH, 10, DD), Vs = attn_view4(v, 1, HH, 10, DD),
                Qs = attn_view4(q, 1, HH, 20, DD), Os = attn_view4(o, 1, HH, 20, DD);
    EXPECT(ctx, attn_sdpa(ctx, &Qs, &Ks, &Vs, NULL, &br, &Os, NULL, NULL), ATTN_OK, NULL);

    /* the keys' scores overflow with the mask hiding that key: nothing to report */
    SCORE(1, 5, 1e20f); /* row 1 with key 5 */
    keep[1 * SS + 5] = 0;
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, &M, NULL, &O, NULL, NULL), ATTN_OK, NULL);
    keep[1 * SS + 5] = 1;
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, &M, NULL, &O, NULL, NULL), ATTN_E_NONFINITE,
           "at (b, h, i) = (0, 0, 1)");
    /* a score overflowing through the additive mask */
    SCORE(1, 5, 0.0f);
    float *am = calloc(LL * SS, 4);
    attn_mask AM = {ATTN_MASK_ADD, attn_view2(am, LL, SS)};
    am[2 * SS + 7] = 3e38f;
    SCORE(2, 7, 1.5e19f); /* 2.25e38 / sqrt(8) = 8e37, plus 3e38 */
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, &AM, NULL, &O, NULL, NULL), ATTN_E_NONFINITE,
           "scores overflow float (row max is infinite");
    am[2 * SS + 7] = 0.0f;
    SCORE(2, 7, 1e4f); /* large, far from overflow: fine on every kernel */
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, &AM, NULL, &O, NULL, NULL), ATTN_OK, NULL);
    SCORE(2, 7, 4e19f); /* 1.6e39 / sqrt(8) = 5.7e38 */
    /* the backwards: recomputed (fused from 12 x 12, row kernel below) and from a saved
     * forward */
    EXPECT(ctx, attn_sdpa_backward(ctx, &Q, &K, &V, NULL, NULL, &dO, &dQ, NULL, NULL, NULL),
           ATTN_E_NONFINITE, "attn_sdpa_backward: scores overflow float");
    EXPECT(ctx, attn_sdpa_backward(ctx, &Qs, &Ks, &Vs, NULL, NULL, &Os, &Os, NULL, NULL, NULL),
           ATTN_E_INVALID, "dq overlaps dout");
    /* 11 x 10 scores: the row kernel (the fused backward from 12 x 12) */
    float *dqs = calloc(11 * DD, 4), *dos = calloc(11 * DD, 4);
    tu_fill(dos, 11 * DD, 35, -1, 1);
    attn_tensor dQs = attn_view4(dqs, 1, HH, 11, DD), dOs = attn_view4(dos, 1, HH, 11, DD),
                Qr = attn_view4(q, 1, HH, 11, DD);
    EXPECT(ctx, attn_sdpa_backward(ctx, &Qr, &Ks, &Vs, NULL, NULL, &dOs, &dQs, NULL, NULL, NULL),
           ATTN_E_NONFINITE, "attn_sdpa_backward: dq row 2 is NaN");
    SCORE(2, 7, 0.0f);
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, NULL, &LS), ATTN_OK, NULL);
    EXPECT(ctx, attn_sdpa_backward_saved(ctx, &Q, &K, &V, NULL, NULL, &O, &LS, &dO, &dQ, NULL,
                                         NULL, NULL),
           ATTN_OK, NULL);
    lse[4] = -INFINITY; /* a saved row lost to overflow */
    EXPECT(ctx, attn_sdpa_backward_saved(ctx, &Q, &K, &V, NULL, NULL, &O, &LS, &dO, &dQ, NULL,
                                         NULL, NULL),
           ATTN_E_NONFINITE, "attn_sdpa_backward_saved: scores overflow float");
    /* the weighted sum of huge values */
    for (int j = 0; j < SS * DD; j++) v[j] = 3e38f;
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_E_NONFINITE,
           "the weighted sum of the values overflows float");
    tu_fill(v, SS * DD, 33, -1, 1);
    /* in one column past the first only (a check of element 0 of each row missed it) */
    for (int j = 0; j < SS; j++) v[j * DD + 3] = 3e38f;
    EXPECT(ctx, attn_sdpa(ctx, &Q, &K, &V, NULL, NULL, &O, NULL, NULL), ATTN_E_NONFINITE,
           "out is infinite at (b, h, i) = (0, 0, 0): the weighted sum of the values overflows");
    tu_fill(v, SS * DD, 33, -1, 1);
    /* varlen: each sequence is checked */
    int32_t cu[3] = {0, 30, LL};
    attn_tensor CU = attn_tensor_make(cu, ATTN_I32, 1, (int64_t[]){3});
    attn_tensor Pq = attn_view3(q, LL, 1, DD), Pk = attn_view3(k, SS, 1, DD),
                Pv = attn_view3(v, SS, 1, DD), Po = attn_view3(o, LL, 1, DD),
                Pdo = attn_view3(dout, LL, 1, DD), Pdq = attn_view3(dq, LL, 1, DD);
    EXPECT(ctx, attn_sdpa_varlen(ctx, &Pq, &Pk, &Pv, &CU, &CU, NULL, &Po, NULL), ATTN_OK, NULL);
    SCORE(40, 50, 1e20f); /* sequence 1, its row 10 and key 20 */
    EXPECT(ctx, attn_sdpa_varlen(ctx, &Pq, &Pk, &Pv, &CU, &CU, NULL, &Po, NULL),
           ATTN_E_NONFINITE, "attn_sdpa_varlen: scores overflow float");
    EXPECT(ctx, attn_sdpa_varlen_backward(ctx, &Pq, &Pk, &Pv, &CU, &CU, NULL, &Pdo, &Pdq, NULL,
                                          NULL),
           ATTN_E_NONFINITE, "attn_sdpa_varlen_backward:");
    /* simple self-attention: X X^T overflows */
    float X[4 * 3] = {1e20f, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, C[12];
    attn_tensor XT = attn_view2(X, 4, 3), CT = attn_view2(C, 4, 3);
    EXPECT(ctx, attn_simple_self_attention(ctx, &XT, ATTN_NORM_SOFTMAX, NULL, NULL, &CT),
           ATTN_E_NONFINITE, "attn_simple_self_attention: context row 0 is NaN");
#undef SCORE
    free(q), free(k), free(v), free(o), free(dout), free(dq), free(lse), free(keep), free(am);
    free(dqs), free(dos);
}

/* The NaN/inf scan of large inputs runs in parallel, in pieces (core.c): the first bad
 * element still decides the message (NaN or infinity), wherever the others are, and -inf is
 * allowed where it should be (a saved lse), for 1, 2 and 3 threads. */
static void test_finite_scan(void) {
    enum { N = 40 * 32768 + 123 }; /* 41 pieces, the last one short */
    float *x = calloc(N, sizeof(float));
    const int64_t shp[1] = {N};
    attn_tensor X = attn_tensor_make(x, ATTN_F32, 1, shp);
    for (int th = 1; th <= 3; th++) {
        attn_ctx *ctx = tu_ctx(th);
        if (!ctx) break;
        EXPECT(ctx, attn_softmax(ctx, &X, &X), ATTN_OK, NULL);
        memset(x, 0, N * sizeof(float));
        x[N - 1] = NAN; /* in the short last piece */
        EXPECT(ctx, attn_softmax(ctx, &X, &X), ATTN_E_NONFINITE, "contains NaN");
        x[5 * 32768 + 7] = INFINITY; /* an earlier piece: it decides */
        x[9 * 32768] = NAN;
        EXPECT(ctx, attn_softmax(ctx, &X, &X), ATTN_E_NONFINITE, "contains an infinity");
        x[5 * 32768 + 3] = NAN; /* earlier in the same piece */
        EXPECT(ctx, attn_softmax(ctx, &X, &X), ATTN_E_NONFINITE, "contains NaN");
        /* softmax input allows -inf: only the NaN behind many -inf counts */
        memset(x, 0, N * sizeof(float));
        for (int i = 0; i < N; i += 3) x[i] = -INFINITY;
        x[30 * 32768 + 1] = NAN;
        EXPECT(ctx, attn_softmax(ctx, &X, &X), ATTN_E_NONFINITE, "contains NaN");
        x[30 * 32768 + 1] = -INFINITY;
        EXPECT(ctx, attn_softmax(ctx, &X, &X), ATTN_OK, NULL);
        attn_ctx_free(ctx);
    }
    free(x);
}

int main(void) {
    test_flags();
    test_finite_scan();
    attn_ctx *ctx = tu_ctx(1);
    if (!ctx) return 1;
    test_sdpa_overlap(ctx);
    test_ops_overlap(ctx);
    test_modules_overlap(ctx);
    test_sinusoidal(ctx);
    test_overflow_more(ctx);
    attn_ctx_free(ctx);
    ctx = tu_ctx(2);
    if (ctx) {
        test_sdpa_overlap(ctx); /* the same checks with a worker pool */
        attn_ctx_free(ctx);
    }
    test_overflow_paths();
    return tu_finish("api_edges");
}
