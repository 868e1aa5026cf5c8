/* attn bench: time one attention op through the public API and compare it with the machine's
 * FMA peak.  See attn_cmd_bench and BENCH_MORE for the options and the FLOP formulas. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "bench_util.h"
#include "cli.h"

/* What attn bench --help prints after the options. */
static const char BENCH_MORE[] =
    "FLOPs (a multiply-add counts 2; c = 1/2 with --causal, else 1):\n"
    "  sdpa                   4*B*H*L*S*D*c\n"
    "  sdpa-backward          2.5 x sdpa (attn_sdpa_backward_saved: from the saved\n"
    "                         forward's out and lse, as a training step runs it)\n"
    "  mha                    projections 2*B*L*E*E (q, out) + 2*B*S*E*E (k, v) + sdpa\n"
    "  encoder-layer          4 projections 2*B*L*E*E + sdpa (S = L)\n"
    "                         + feed-forward 2*2*B*L*E*F with F = 4E\n"
    "  mha-backward,          a training step's forward and backward, parameter\n"
    "  encoder-layer-backward gradients included (attn_*_forward_train, then\n"
    "                         attn_*_backward_saved): 3 x the projections and\n"
    "                         feed-forward + 3.5 x sdpa\n"
    "  Layer norms, softmax, biases and activations are not counted.\n"
    "\n"
    "--op gpt-step: one whole GPT training step, as a training loop runs it: zero the\n"
    "gradients, attn_gpt_forward_train (token and position embeddings, --layers\n"
    "pre-norm GELU blocks with causal self-attention, E = heads x dim, feed-forward 4E,\n"
    "final layer norm, LM head tied to the token embedding as in GPT-2),\n"
    "attn_cross_entropy, attn_gpt_backward_saved,\n"
    "attn_adamw_step, on one random batch of --batch x --len tokens, dropout 0.\n"
    "Defaults: the GPT-2 small shape (12 layers, 12 heads of 64, vocab 50257, T=256,\n"
    "B=4).  FLOPs per step: 3 x the forward's matrix products, 3 x (layers x\n"
    "(24*B*T*E*E + 2*B*T*T*E) + 2*B*T*E*vocab) (projections, feed-forward, causal\n"
    "attention, LM head); prints ms/step, tokens/s, GFLOP/s, % of the FMA peak, peak\n"
    "RSS and the loss of each step.  bench/attn_vs_torch.py runs its PyTorch twin.\n"
    "\n"
    "The plain C kernels are the same op in a context created with ATTN_ISA=ref (no SIMD\n"
    "kernels); when the requested size would take long they run at a smaller L (and S),\n"
    "shown in their row, with fewer runs.  bench/ has the internal kernel benchmarks.\n"
    "\n"
    "--op decode: attn_sdpa of L queries against a K/V cache of S keys, bottom-right\n"
    "causal (defaults L=1, S=32768, H=32, D=128; --kv-heads for GQA).  Memory-bound, so\n"
    "it measures the read bandwidth first (a streaming read of 1 GiB on --threads\n"
    "threads, median of 7) and prints median ms, GB/s of K and V read (their bytes /\n"
    "time) and % of that bandwidth for the fast path (split-KV decode), the fused\n"
    "kernels (ATTN_DECODE=0) and the plain C kernels.  Contexts skip the NaN scan of the\n"
    "inputs (ATTN_CTX_NO_FINITE_CHECK), which would read the cache once more.  With\n"
    "--dtype bf16, q, K and V are bf16 (GB/s counts bf16 bytes) and the f32 decode is\n"
    "timed in the same run, bf16 and f32 calls alternating; the speed-up printed is the\n"
    "median over the pairs of f32 ms / bf16 ms.";

/* ---- the ops ---------------------------------------------------------------------------- */
typedef enum op_kind {
    OP_SDPA, OP_SDPA_BWD, OP_MHA, OP_MHA_BWD, OP_ENC, OP_ENC_BWD, OP_DECODE, OP_GPT_STEP
} op_kind;
static const struct {
    const char *name;
    op_kind kind;
} ops[] = {
    {"sdpa", OP_SDPA},          {"sdpa-backward", OP_SDPA_BWD},
    {"mha", OP_MHA},            {"mha-backward", OP_MHA_BWD},
    {"encoder-layer", OP_ENC},  {"encoder-layer-backward", OP_ENC_BWD},
    {"decode", OP_DECODE},      {"gpt-step", OP_GPT_STEP},
};

typedef struct shape {
    long long B, H, Hkv, L, S, D;
    int causal;
    int bf16; /* sdpa: q, k, v in bf16 */
} shape;

static double op_flops(op_kind k, const shape *s) {
    double B = (double)s->B, H = (double)s->H, L = (double)s->L, S = (double)s->S,
           D = (double)s->D, E = H * D, F = 4 * E;
    double att = 4.0 * B * H * L * S * D * (s->causal ? 0.5 : 1.0);
    double proj = 0, ffn = 0;
    int bwd = k == OP_SDPA_BWD || k == OP_MHA_BWD || k == OP_ENC_BWD;
    if (k == OP_MHA || k == OP_MHA_BWD) proj = 2 * (2.0 * B * L * E * E) + 2 * (2.0 * B * S * E * E);
    if (k == OP_ENC || k == OP_ENC_BWD) proj = 4 * (2.0 * B * L * E * E), ffn = 2 * 2.0 * B * L * E * F;
    if (k == OP_SDPA_BWD) return 2.5 * att;
    return bwd ? 3.0 * (proj + ffn) + 3.5 * att : proj + ffn + att;
}

static float *rnd(size_t n, uint64_t seed) {
    float *p = malloc(n ? n * sizeof(float) : 1);
    if (!p) return NULL;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(x >> 40) / 16777216.0 * 2.0 - 1.0);
    }
    return p;
}

/* Everything one op needs; run_once calls it. */
typedef struct bench_state {
    op_kind kind;
    shape s;
    attn_ctx *ctx;
    attn_module *m;
    float *buf[8];
    uint16_t *h[3]; /* bf16 copies of q, k, v (--dtype bf16) */
    float *lse;     /* sdpa-backward: the saved forward's log-sum-exp (o holds its output) */
    attn_tensor q, k, v, o, dout, dq, dk, dv, lt;
    attn_sdpa_options sopt;
    attn_mha_options mopt;
    int self; /* mha: key/value are the query */
    attn_saved *sv; /* module backward ops: the training forward's activations */
} bench_state;

static attn_status run_once(bench_state *b) {
    switch (b->kind) {
    case OP_SDPA: return attn_sdpa(b->ctx, &b->q, &b->k, &b->v, NULL, &b->sopt, &b->o, NULL, NULL);
    case OP_SDPA_BWD: /* from the saved forward, as a training step runs it */
        return attn_sdpa_backward_saved(b->ctx, &b->q, &b->k, &b->v, NULL, &b->sopt, &b->o,
                                        &b->lt, &b->dout, &b->dq, &b->dk, &b->dv, NULL);
    case OP_MHA: {
        const attn_tensor *kv = b->self ? &b->q : &b->k;
        return attn_mha_forward(b->ctx, b->m, &b->q, kv, kv, NULL, NULL, &b->mopt, NULL, &b->o,
                                NULL);
    }
    case OP_MHA_BWD: { /* a training step's forward and backward, parameter gradients too */
        const attn_tensor *kv = b->self ? &b->q : &b->k;
        attn_status st = attn_mha_forward_train(b->ctx, b->m, &b->q, kv, kv, NULL, NULL,
                                                &b->mopt, NULL, &b->o, NULL, b->sv);
        if (st != ATTN_OK) return st;
        return attn_mha_backward_saved(b->ctx, b->m, b->sv, &b->dout, &b->dq,
                                       b->self ? NULL : &b->dk, b->self ? NULL : &b->dv);
    }
    case OP_ENC: {
        attn_transformer_masks k = {.src_is_causal = b->s.causal};
        return attn_encoder_layer_forward(b->ctx, b->m, &b->q, &k, NULL, &b->o);
    }
    case OP_ENC_BWD: { /* a training step's forward and backward, parameter gradients too */
        attn_transformer_masks k = {.src_is_causal = b->s.causal};
        attn_status st = attn_encoder_layer_forward_train(b->ctx, b->m, &b->q, &k, NULL, &b->o,
                                                          b->sv);
        if (st != ATTN_OK) return st;
        return attn_encoder_layer_backward_saved(b->ctx, b->m, b->sv, &b->dout, &b->dq);
    }
    case OP_DECODE: case OP_GPT_STEP: break; /* bench_decode, attn_bench_gpt_step */
    }
    return ATTN_E_INVALID;
}

static void state_free(bench_state *b) {
    for (int i = 0; i < 8; i++) free(b->buf[i]);
    for (int i = 0; i < 3; i++) free(b->h[i]);
    free(b->lse);
    attn_saved_free(b->sv);
    attn_module_free(b->m);
    attn_ctx_free(b->ctx);
    memset(b, 0, sizeof *b);
}

/* A context on `threads` threads with `flags`; with ref, created under ATTN_ISA=ref (the plain
 * C kernels).  NULL after printing the problem. */
static attn_ctx *bench_ctx(int ref, int threads, unsigned flags) {
    const char *old_isa = getenv("ATTN_ISA");
    char *saved = old_isa ? strdup(old_isa) : NULL;
    if (ref) setenv("ATTN_ISA", "ref", 1);
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    p.flags = flags;
    attn_ctx *ctx = NULL;
    attn_status st = attn_ctx_create(&p, &ctx);
    if (ref) {
        if (saved) setenv("ATTN_ISA", saved, 1);
        else unsetenv("ATTN_ISA");
    }
    free(saved);
    if (st != ATTN_OK) {
        fprintf(stderr, "attn bench: cannot create a context (%s)\n", attn_status_name(st));
        return NULL;
    }
    return ctx;
}

/* Creates the context (ISA capped by ATTN_ISA=ref when ref), the module and the inputs.
 * Returns 0 or an exit status after printing the problem. */
static int state_init(bench_state *b, op_kind kind, const shape *s, int threads, int ref) {
    memset(b, 0, sizeof *b);
    b->kind = kind, b->s = *s;
    /* the encoder layer with --dtype bf16: mixed precision (bf16-operand products) */
    int mixed = s->bf16 && (kind == OP_ENC || kind == OP_ENC_BWD);
    b->ctx = bench_ctx(ref, threads, mixed ? ATTN_CTX_BF16_MATMUL : 0u);
    if (!b->ctx) return 1;
    attn_status st;
    int64_t B = s->B, H = s->H, Hkv = s->Hkv, L = s->L, S = s->S, D = s->D, E = H * D;
    int sdpa = kind == OP_SDPA || kind == OP_SDPA_BWD, bwd = kind == OP_SDPA_BWD ||
               kind == OP_MHA_BWD || kind == OP_ENC_BWD;
    size_t nq, nk;
    if (sdpa) nq = (size_t)(B * H * L * D), nk = (size_t)(B * Hkv * S * D);
    else nq = (size_t)(B * L * E), nk = (size_t)(B * S * E);
    b->self = !sdpa && L == S;
    float **u = b->buf;
    u[0] = rnd(nq, 1), u[1] = rnd(nk, 2), u[2] = rnd(nk, 3);
    u[3] = calloc(nq ? nq : 1, sizeof(float));
    if (bwd) {
        u[4] = rnd(nq, 4), u[5] = calloc(nq ? nq : 1, sizeof(float));
        u[6] = calloc(nk ? nk : 1, sizeof(float)), u[7] = calloc(nk ? nk : 1, sizeof(float));
    }
    for (int i = 0; i < (bwd ? 8 : 4); i++)
        if (!u[i]) {
            fprintf(stderr, "attn bench: out of memory for the inputs\n");
            return 1;
        }
    if (sdpa) {
        b->q = attn_view4(u[0], B, H, L, D), b->k = attn_view4(u[1], B, Hkv, S, D);
        b->v = attn_view4(u[2], B, Hkv, S, D), b->o = attn_view4(u[3], B, H, L, D);
        b->dout = attn_view4(u[4], B, H, L, D), b->dq = attn_view4(u[5], B, H, L, D);
        b->dk = attn_view4(u[6], B, Hkv, S, D), b->dv = attn_view4(u[7], B, Hkv, S, D);
        b->sopt = attn_sdpa_defaults();
        if (s->bf16) { /* the same values, rounded to bf16 (nearest, ties to even) */
            size_t nn[3] = {nq, nk, nk};
            for (int i = 0; i < 3; i++) {
                b->h[i] = malloc(nn[i] ? nn[i] * 2 : 1);
                if (!b->h[i]) {
                    fprintf(stderr, "attn bench: out of memory for the inputs\n");
                    return 1;
                }
                for (size_t j = 0; j < nn[i]; j++) {
                    uint32_t x;
                    memcpy(&x, &u[i][j], 4);
                    b->h[i][j] = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
                }
            }
            int64_t qs[4] = {B, H, L, D}, ks[4] = {B, Hkv, S, D};
            b->q = attn_tensor_make(b->h[0], ATTN_BF16, 4, qs);
            b->k = attn_tensor_make(b->h[1], ATTN_BF16, 4, ks);
            b->v = attn_tensor_make(b->h[2], ATTN_BF16, 4, ks);
        }
        b->sopt.causal = s->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
        if (kind == OP_SDPA_BWD) { /* the forward once, untimed: its out and lse are saved */
            b->lse = malloc(sizeof(float) * (size_t)(B * H * L));
            if (!b->lse) {
                fprintf(stderr, "attn bench: out of memory for the inputs\n");
                return 1;
            }
            b->lt = attn_view3(b->lse, B, H, L);
            st = attn_sdpa(b->ctx, &b->q, &b->k, &b->v, NULL, &b->sopt, &b->o, NULL, &b->lt);
            if (st != ATTN_OK) {
                attn_cli_fail(b->ctx, "bench", st);
                return 1;
            }
        }
        return 0;
    }
    b->q = attn_view3(u[0], B, L, E), b->k = attn_view3(u[1], B, S, E);
    b->v = attn_view3(u[2], B, S, E), b->o = attn_view3(u[3], B, L, E);
    b->dout = attn_view3(u[4], B, L, E), b->dq = attn_view3(u[5], B, L, E);
    b->dk = attn_view3(u[6], B, S, E), b->dv = attn_view3(u[7], B, S, E);
    if (kind == OP_MHA || kind == OP_MHA_BWD) {
        attn_mha_config c = attn_mha_defaults(E, H);
        st = attn_mha_create(b->ctx, &c, &b->m);
        memset(&b->mopt, 0, sizeof b->mopt);
        b->mopt.is_causal = s->causal;
    } else {
        attn_transformer_config c = attn_transformer_defaults(E, H);
        c.dim_feedforward = 4 * E;
        c.dropout = 0;
        st = attn_encoder_layer_create(b->ctx, &c, &b->m);
    }
    if (st == ATTN_OK) st = attn_module_init(b->ctx, b->m, 1);
    if (st == ATTN_OK && bwd) st = attn_module_enable_grad(b->ctx, b->m);
    if (st == ATTN_OK && bwd) st = attn_saved_create(b->ctx, 0, &b->sv);
    if (st != ATTN_OK) return attn_cli_fail(b->ctx, "bench", st);
    return 0;
}

typedef struct result {
    const char *path;
    shape s;
    int runs;
    double ms, gflops, pct, rss_mib, rss_growth_mib;
} result;

/* Warm-up plus `repeat` timed runs (fewer when max_s > 0 and the warm-up says they would take
 * longer than max_s). */
static int measure(op_kind kind, const shape *s, int threads, int ref, int repeat, double max_s,
                   double peak, result *r) {
    bench_state b;
    double rss0 = attn_bench_rss_mib();
    int rc = state_init(&b, kind, s, threads, ref);
    if (rc) {
        state_free(&b);
        return rc;
    }
    double t0 = attn_bench_now_s();
    attn_status st = run_once(&b);
    double warm = attn_bench_now_s() - t0;
    if (max_s > 0 && warm * repeat > max_s) {
        int n = (int)(max_s / (warm > 0 ? warm : 1));
        repeat = n < 1 ? 1 : n;
    }
    double *t = calloc((size_t)repeat, sizeof *t);
    if (!t) st = ATTN_E_NOMEM;
    for (int i = 0; st == ATTN_OK && i < repeat; i++) {
        t0 = attn_bench_now_s();
        st = run_once(&b);
        t[i] = attn_bench_now_s() - t0;
    }
    if (st != ATTN_OK) {
        if (st == ATTN_E_NOMEM && !t) fprintf(stderr, "attn bench: out of memory\n");
        else attn_cli_fail(b.ctx, "bench", st);
        free(t);
        state_free(&b);
        return 1;
    }
    double med = attn_bench_median(t, (int)repeat);
    r->path = ref ? (s->bf16 ? "plain C kernels (ref), bf16" : "plain C kernels (ATTN_ISA=ref)")
                  : (s->bf16 ? "fast path, bf16" : "fast path");
    r->s = *s;
    r->runs = repeat;
    r->ms = med * 1e3;
    r->gflops = med > 0 ? op_flops(kind, s) / med * 1e-9 : 0;
    r->pct = peak > 0 ? 100.0 * r->gflops / peak : 0;
    r->rss_mib = attn_bench_rss_mib();
    r->rss_growth_mib = r->rss_mib - rss0;
    free(t);
    state_free(&b);
    return 0;
}

/* --dtype bf16: the bf16 and the f32 op in turn (a warm-up of each, then `repeat` pairs), so
 * that both see the same load on a shared machine; *ratio is the median over the pairs of
 * t(f32) / t(bf16).  sdpa: q, k, v stored as bf16; the encoder layer: mixed precision. */
static int measure_bf16_f32(op_kind kind, const shape *s, int threads, int repeat, double peak,
                            result *rb, result *rf, double *ratio) {
    bench_state b[2];
    shape sh[2] = {*s, *s};
    sh[1].bf16 = 0;
    double rss0 = attn_bench_rss_mib();
    int rc = state_init(&b[0], kind, &sh[0], threads, 0);
    if (!rc) rc = state_init(&b[1], kind, &sh[1], threads, 0);
    else memset(&b[1], 0, sizeof b[1]);
    double *t = calloc(3 * (size_t)repeat, sizeof *t);
    attn_status st = ATTN_OK;
    int bad_i = 0;
    if (!rc && !t) fprintf(stderr, "attn bench: out of memory\n"), rc = 1;
    for (int i = -1; !rc && st == ATTN_OK && i < repeat; i++)
        for (int k = 0; k < 2 && st == ATTN_OK; k++) {
            double t0 = attn_bench_now_s();
            st = run_once(&b[k]);
            if (i >= 0) t[k * repeat + i] = attn_bench_now_s() - t0;
            bad_i = k;
        }
    if (!rc && st != ATTN_OK) {
        attn_cli_fail(b[bad_i].ctx, "bench", st);
        rc = 1;
    }
    if (!rc) {
        for (int i = 0; i < repeat; i++) t[2 * repeat + i] = t[repeat + i] / t[i];
        result *rr[2] = {rb, rf};
        for (int k = 0; k < 3; k++) {
            double med = attn_bench_median(t + k * repeat, (int)repeat);
            if (k == 2) {
                *ratio = med;
                break;
            }
            rr[k]->path = k ? "fast path, f32"
                            : kind == OP_SDPA ? "fast path, bf16" : "fast path, bf16 products";
            rr[k]->s = sh[k];
            rr[k]->runs = repeat;
            rr[k]->ms = med * 1e3;
            rr[k]->gflops = med > 0 ? op_flops(kind, &sh[k]) / med * 1e-9 : 0;
            rr[k]->pct = peak > 0 ? 100.0 * rr[k]->gflops / peak : 0;
            rr[k]->rss_mib = attn_bench_rss_mib();
            rr[k]->rss_growth_mib = rr[k]->rss_mib - rss0;
        }
    }
    free(t);
    state_free(&b[0]);
    state_free(&b[1]);
    return rc;
}

/* ---- the command ------------------------------------------------------------------------ */
static int bad(const char *opt, const char *val, const char *why) {
    fprintf(stderr, "attn bench: bad value '%s' for %s (%s)\n", val ? val : "", opt, why);
    fprintf(stderr, "'attn bench --help' lists the options\n");
    return 2;
}

static void print_row(const result *r) {
    char size[64];
    snprintf(size, sizeof size, "L=%lld S=%lld", r->s.L, r->s.S);
    printf("  %-31s %-17s %4d %11.3f %10.1f %7.1f%% %9.0f\n", r->path, size, r->runs, r->ms,
           r->gflops, r->pct, r->rss_mib);
}

static void json_row(const result *r, int last) {
    printf("{\"path\": \"%s\", \"dtype\": \"%s\", \"len\": %lld, \"kv_len\": %lld, "
           "\"runs\": %d, \"median_ms\": %.4f, \"gflops\": %.3f, \"pct_peak\": %.2f, "
           "\"peak_rss_mib\": %.1f, \"rss_growth_mib\": %.1f}%s",
           r->path, r->s.bf16 ? "bf16" : "f32", r->s.L, r->s.S, r->runs, r->ms, r->gflops,
           r->pct, r->rss_mib, r->rss_growth_mib, last ? "" : ", ");
}

/* ---- --op decode: attention of a few queries against a KV cache, against memory bandwidth --
 * Decode is memory-bound: each call reads the whole K and V cache once (B*Hkv*S*(D + Dv)
 * floats) and does 4 FLOPs per 8 bytes per query row.  The yardstick is therefore the read
 * bandwidth of this machine, measured at start (attn_bench_read_bandwidth, common/bench_util.c). */
typedef struct dec_result {
    const char *path;
    int runs;
    double ms, gbs, pct;
} dec_result;

/* One path of the decode benchmark: a context (plain C kernels when ref; the decode path
 * turned off with ATTN_DECODE=0 when no_decode), a warm-up and `repeat` timed attn_sdpa calls
 * (at most ~max_s seconds of them). */
static int dec_measure(const char *path, int ref, int no_decode, int threads, int repeat,
                       double max_s, attn_tensor *q, attn_tensor *k, attn_tensor *v,
                       attn_tensor *o, double bytes, double bw, dec_result *r) {
    /* the context reads ATTN_DECODE when it is created */
    const char *old_dec = getenv("ATTN_DECODE");
    char *saved_dec = old_dec ? strdup(old_dec) : NULL;
    if (no_decode) setenv("ATTN_DECODE", "0", 1);
    attn_ctx *ctx = bench_ctx(ref, threads, ATTN_CTX_NO_FINITE_CHECK);
    if (no_decode) {
        if (saved_dec) setenv("ATTN_DECODE", saved_dec, 1);
        else unsetenv("ATTN_DECODE");
    }
    free(saved_dec);
    if (!ctx) return 1;
    attn_status st;
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.causal = ATTN_CAUSAL_BOTTOM_RIGHT; /* the new queries see the whole cache */
    double t0 = attn_bench_now_s();
    st = attn_sdpa(ctx, q, k, v, NULL, &opt, o, NULL, NULL);
    double warm = attn_bench_now_s() - t0;
    if (max_s > 0 && warm * repeat > max_s) {
        int nr = (int)(max_s / (warm > 0 ? warm : 1));
        repeat = nr < 1 ? 1 : nr;
    }
    double *t = calloc((size_t)repeat, sizeof *t);
    if (!t && st == ATTN_OK) st = ATTN_E_NOMEM;
    for (int i = 0; st == ATTN_OK && i < repeat; i++) {
        t0 = attn_bench_now_s();
        st = attn_sdpa(ctx, q, k, v, NULL, &opt, o, NULL, NULL);
        t[i] = attn_bench_now_s() - t0;
    }
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, "bench", st);
        free(t);
        attn_ctx_free(ctx);
        return 1;
    }
    double med = attn_bench_median(t, (int)repeat);
    r->path = path, r->runs = repeat, r->ms = med * 1e3;
    r->gbs = med > 0 ? bytes / med * 1e-9 : 0;
    r->pct = bw > 0 ? 100.0 * r->gbs / bw : 0;
    free(t);
    attn_ctx_free(ctx);
    return 0;
}

/* --dtype bf16: the bf16 and the f32 decode in turn (a warm-up of each, then `repeat` pairs),
 * so that both see the same load on a shared machine.  t16[4] / t32[4]: q, k, v, o of each;
 * *ratio: the median over the pairs of t(f32) / t(bf16). */
static int dec_pairs(int threads, int repeat, attn_tensor *t16, attn_tensor *t32,
                     double bytes16, double bytes32, double bw, dec_result *r16,
                     dec_result *r32, double *ratio) {
    attn_ctx *ctx = bench_ctx(0, threads, ATTN_CTX_NO_FINITE_CHECK);
    if (!ctx) return 1;
    attn_sdpa_options opt = attn_sdpa_defaults();
    opt.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    double *t = calloc(3 * (size_t)repeat, sizeof *t);
    attn_status st = t ? ATTN_OK : ATTN_E_NOMEM;
    for (int i = -1; st == ATTN_OK && i < repeat; i++)
        for (int kk = 0; kk < 2 && st == ATTN_OK; kk++) {
            attn_tensor *x = kk ? t32 : t16;
            double t0 = attn_bench_now_s();
            st = attn_sdpa(ctx, &x[0], &x[1], &x[2], NULL, &opt, &x[3], NULL, NULL);
            if (i >= 0) t[kk * repeat + i] = attn_bench_now_s() - t0;
        }
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, "bench", st);
        free(t);
        attn_ctx_free(ctx);
        return 1;
    }
    for (int i = 0; i < repeat; i++) t[2 * repeat + i] = t[repeat + i] / t[i];
    dec_result *rr[2] = {r16, r32};
    double bytes[2] = {bytes16, bytes32};
    for (int kk = 0; kk < 3; kk++) {
        double med = attn_bench_median(t + kk * repeat, (int)repeat);
        if (kk == 2) {
            *ratio = med;
            break;
        }
        rr[kk]->path = kk ? "fast path, f32 (split-KV)" : "fast path, bf16 (split-KV)";
        rr[kk]->runs = repeat, rr[kk]->ms = med * 1e3;
        rr[kk]->gbs = med > 0 ? bytes[kk] / med * 1e-9 : 0;
        rr[kk]->pct = bw > 0 ? 100.0 * rr[kk]->gbs / bw : 0;
    }
    free(t);
    attn_ctx_free(ctx);
    return 0;
}

/* n random floats in [-1, 1) (rnd's sequence) in 64-byte aligned memory, as a KV cache would
 * be: rows of K and V then start on cache lines (unaligned rows cost the compute-bound cases
 * up to 2x in split loads); NULL when out of memory. */
static float *rnd_aligned(size_t n, uint64_t seed) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n * sizeof(float) : 64) != 0) return NULL;
    float *f = p;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        f[i] = (float)((double)(x >> 40) / 16777216.0 * 2.0 - 1.0);
    }
    return f;
}

/* n bf16 values (round to nearest even) of x in 64-byte aligned memory; NULL when out of
 * memory. */
static uint16_t *bf16_aligned(const float *x, size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n * sizeof(uint16_t) : 64) != 0) return NULL;
    uint16_t *h = p;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return h;
}

/* q [B, H, L, D], K and V caches [B, Hkv, S, D] (contiguous, 64-byte aligned), bottom-right
 * causal (the decode case: every query sees the whole cache).  Rows: the fast path (split-KV
 * decode), the same call with the decode path off (the fused kernels, which pack K and V
 * first), and the plain C kernels.  With bf16 (s->bf16), q, K and V are bf16 copies of the
 * same values: the bf16 and f32 fast paths alternate (dec_pairs), then the other two rows run
 * on bf16. */
static int bench_decode(const shape *s, int threads, int repeat, int json, int do_ref) {
    int64_t B = s->B, H = s->H, Hkv = s->Hkv, L = s->L, S = s->S, D = s->D;
    if ((double)B * (double)(H > Hkv ? H : Hkv) * (double)(L > S ? L : S) * (double)D * 4 >
        16.0 * 1024 * 1024 * 1024) {
        fprintf(stderr, "attn bench: problem too large (over 16 GiB per tensor)\n");
        return 1;
    }
    size_t nq = (size_t)(B * H * L * D), nk = (size_t)(B * Hkv * S * D);
    double bw = attn_bench_read_bandwidth(threads);
    float *qb = rnd_aligned(nq, 1), *kb = rnd_aligned(nk, 2), *vb = rnd_aligned(nk, 3),
          *ob = rnd_aligned(nq, 4);
    uint16_t *h[3] = {NULL, NULL, NULL};
    int rc = 0, n = 0, bf = s->bf16;
    dec_result r[4];
    double ratio = 0;
    if (!qb || !kb || !vb || !ob) goto oom;
    if (bf) {
        h[0] = bf16_aligned(qb, nq), h[1] = bf16_aligned(kb, nk), h[2] = bf16_aligned(vb, nk);
        if (!h[0] || !h[1] || !h[2]) goto oom;
    }
    attn_tensor q = attn_view4(qb, B, H, L, D), k = attn_view4(kb, B, Hkv, S, D),
                v = attn_view4(vb, B, Hkv, S, D), o = attn_view4(ob, B, H, L, D);
    double bytes32 = 2.0 * (double)nk * sizeof(float); /* K and V, read once */
    double bytes = bf ? bytes32 / 2 : bytes32;
    attn_tensor t32[4] = {q, k, v, o}, t16[4] = {q, k, v, o}, *in = t32;
    if (bf) {
        for (int i = 0; i < 3; i++) t16[i].data = h[i], t16[i].dtype = ATTN_BF16;
        in = t16;
        rc = dec_pairs(threads, repeat, t16, t32, bytes, bytes32, bw, &r[0], &r[1], &ratio);
        if (rc) goto done;
        n = 2;
    } else {
        rc = dec_measure("fast path (split-KV decode)", 0, 0, threads, repeat, 0, &q, &k, &v,
                         &o, bytes, bw, &r[n]);
        if (rc) goto done;
        n++;
    }
    rc = dec_measure(bf ? "fused kernels, bf16 (ATTN_DECODE=0)" : "fused kernels (ATTN_DECODE=0)",
                     0, 1, threads, repeat, 20.0, &in[0], &in[1], &in[2], &in[3], bytes, bw,
                     &r[n]);
    if (rc) goto done;
    n++;
    if (do_ref) {
        rc = dec_measure(bf ? "plain C kernels, bf16" : "plain C kernels (ATTN_ISA=ref)", 1, 0,
                         threads, repeat, 20.0, &in[0], &in[1], &in[2], &in[3], bytes, bw,
                         &r[n]);
        if (rc) goto done;
        n++;
    }
    /* again at the end: the machine may be shared, and the difference shows the drift */
    double bw_end = attn_bench_read_bandwidth(threads);
    if (json) {
        printf("{\"op\": \"decode\", \"dtype\": \"%s\", \"batch\": %lld, \"heads\": %lld, "
               "\"kv_heads\": %lld, \"len\": %lld, \"kv_len\": %lld, \"dim\": %lld, "
               "\"causal\": \"bottom-right\", \"threads\": %d, \"repeat\": %d, "
               "\"kv_bytes\": %.0f, \"read_bandwidth_gbs\": %.3f, "
               "\"read_bandwidth_end_gbs\": %.3f, ",
               bf ? "bf16" : "f32", s->B, s->H, s->Hkv, s->L, s->S, s->D, threads, repeat, bytes,
               bw, bw_end);
        if (bf) /* speedup: median over the alternating pairs of f32 ms / bf16 ms */
            printf("\"kv_bytes_f32\": %.0f, \"speedup_bf16_vs_f32\": %.4f, ", bytes32, ratio);
        printf("\"results\": [");
        for (int i = 0; i < n; i++)
            printf("{\"path\": \"%s\", \"dtype\": \"%s\", \"runs\": %d, \"median_ms\": %.4f, "
                   "\"kv_gbs\": %.3f, \"pct_bandwidth\": %.2f}%s",
                   r[i].path, bf && i != 1 ? "bf16" : "f32", r[i].runs, r[i].ms, r[i].gbs,
                   r[i].pct, i == n - 1 ? "" : ", ");
        printf("]}\n");
        goto done;
    }
    printf("attn bench: decode  B=%lld H=%lld Hkv=%lld L=%lld S=%lld D=%lld  %s  %d thread%s\n",
           s->B, s->H, s->Hkv, s->L, s->S, s->D, bf ? "bf16" : "f32", threads,
           threads == 1 ? "" : "s");
    printf("read bandwidth: %.2f GB/s (median of %d streaming reads of 1 GiB, %d thread%s); "
           "K+V %.1f MiB per call%s\n\n", bw, ATTN_BENCH_BW_RUNS, threads, threads == 1 ? "" : "s",
           bytes / (1024.0 * 1024.0), bf ? " in bf16 (twice that in f32)" : "");
    printf("  %-36s %4s %11s %10s %8s\n", "path", "runs", "median ms", "K+V GB/s", "% bw");
    for (int i = 0; i < n; i++)
        printf("  %-36s %4d %11.3f %10.2f %7.1f%%\n", r[i].path, r[i].runs, r[i].ms, r[i].gbs,
               r[i].pct);
    if (bf)
        printf("\nbf16 over f32 (split-KV decode): %.2fx faster (median over %d alternating "
               "pairs of f32 ms / bf16 ms)\n", ratio, repeat);
    printf("\nread bandwidth measured again at the end: %.2f GB/s (%% bw uses the first)\n",
           bw_end);
    goto done;
oom:
    fprintf(stderr, "attn bench: out of memory for the inputs\n");
    rc = 1;
done:
    free(qb), free(kb), free(vb), free(ob);
    for (int i = 0; i < 3; i++) free(h[i]);
    return rc;
}

int attn_cmd_bench(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++) /* --op llm has options of its own (cli/llm_cmd.c) */
        if ((!strcmp(argv[i], "--op") && !strcmp(argv[i + 1], "llm")))
            return attn_bench_llm(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--op=llm")) return attn_bench_llm(argc, argv);
    for (int i = 1; i < argc; i++) /* --op ring-sdpa runs under mpirun (bench/suite/bench_ring.c) */
        if ((i + 1 < argc && !strcmp(argv[i], "--op") && !strcmp(argv[i + 1], "ring-sdpa")) ||
            !strcmp(argv[i], "--op=ring-sdpa"))
            return attn_bench_ring(argc, argv);
    for (int i = 1; i < argc; i++) /* --op mpi-link runs under mpirun (bench/suite/bench_link.c) */
        if ((i + 1 < argc && !strcmp(argv[i], "--op") && !strcmp(argv[i + 1], "mpi-link")) ||
            !strcmp(argv[i], "--op=mpi-link"))
            return attn_bench_link(argc, argv);
    for (int i = 1; i < argc; i++) /* --op cpu: what was detected and chosen (bench_cpu.c) */
        if ((i + 1 < argc && !strcmp(argv[i], "--op") && !strcmp(argv[i + 1], "cpu")) ||
            !strcmp(argv[i], "--op=cpu"))
            return attn_bench_cpu(argc, argv);
    for (int i = 1; i < argc; i++) /* --op dp-step: data parallel, under mpirun (bench_dp.c) */
        if ((i + 1 < argc && !strcmp(argv[i], "--op") && !strcmp(argv[i + 1], "dp-step")) ||
            !strcmp(argv[i], "--op=dp-step"))
            return attn_bench_dp(argc, argv);
    shape s = {-1, -1, -1, -1, -1, -1, 0, 0}; /* -1: the op's default, set below */
    long long threads = 0, repeat = 5, layers = -1, vocab = -1;
    const char *save_init = NULL;
    int json = 0, no_ref = 0, op = 0, npos;
    const char *dtype = "f32";
    const attn_cli_opt opts[] = {
        ATTN_OPT_CHOICE("op", 0, &op,
                        "sdpa|sdpa-backward|mha|mha-backward|encoder-layer|"
                        "encoder-layer-backward|decode|gpt-step",
                        "NAME",
                        "sdpa (default), sdpa-backward, mha, mha-backward,\n"
                        "encoder-layer, encoder-layer-backward, decode, gpt-step\n"
                        "(see below); llm: a language model's prompt and\n"
                        "generation speed (attn bench --op llm --help);\n"
                        "ring-sdpa: ring attention under mpirun (attn bench\n"
                        "--op ring-sdpa --help; needs -DATTN_MPI=ON);\n"
                        "mpi-link: the MPI link's latency and bandwidth under\n"
                        "mpirun (attn bench --op mpi-link --help);\n"
                        "dp-step: a data-parallel training step, under\n"
                        "mpirun (attn bench --op dp-step --help); cpu: what\n"
                        "attn detected and chose on this CPU, with the measured\n"
                        "float and bf16 rates (attn bench --op cpu --help)"),
        ATTN_OPT_INT("batch", 0, &s.B, 1, 1 << 24, "B", "batch size (default 1; gpt-step 4)"),
        ATTN_OPT_INT("heads", 0, &s.H, 1, 1 << 24, "H", "query heads (default 12)"),
        ATTN_OPT_INT("kv-heads", 0, &s.Hkv, 1, 1 << 24, "K",
                     "key/value heads, H a multiple of K (default H; sdpa ops\n"
                     "only)"),
        ATTN_OPT_INT("len", 0, &s.L, 1, 1 << 24, "L",
                     "query length (default 1024; gpt-step 256)"),
        ATTN_OPT_INT("kv-len", 0, &s.S, 1, 1 << 24, "S",
                     "key length (default L; encoder-layer needs S = L)"),
        ATTN_OPT_INT("dim", 0, &s.D, 1, 1 << 24, "D",
                     "head dimension (default 64); model dimension E = H*D"),
        ATTN_OPT_FLAG("causal", 0, &s.causal, "causal (top-left) mask"),
        ATTN_OPT_INT("layers", 0, &layers, 1, 1 << 16, "N", "gpt-step: GPT blocks (default 12)"),
        ATTN_OPT_INT("vocab", 0, &vocab, 1, 1 << 26, "V",
                     "gpt-step: vocabulary size (default 50257)"),
        ATTN_OPT_STR("save-init", 0, &save_init, "FILE",
                     "gpt-step: write the initial weights and the batch\n"
                     "(safetensors) for a twin in another framework"),
        ATTN_OPT_THREADS(&threads),
        ATTN_OPT_STR("dtype", 0, &dtype, "T",
                     "f32 (default) or bf16 (--op sdpa: q, k, v stored as bf16,\n"
                     "out f32; the f32 forward runs in turn with it and the\n"
                     "speed-up is printed; --op gpt-step, encoder-layer,\n"
                     "encoder-layer-backward: mixed precision, the linear\n"
                     "products on bf16 operands, f32 in turn for encoder ops)"),
        ATTN_OPT_INT("repeat", 0, &repeat, 1, 100000, "N", "timed runs (default 5)"),
        ATTN_OPT_FLAG("no-ref", 0, &no_ref, "skip the plain C kernels"),
        ATTN_OPT_FLAG("json", 0, &json, "print one JSON object instead of the table"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "bench", "attn bench [options]",
        "Times one op on random inputs: one warm-up run, then the median of --repeat runs.\n"
        "Measures the machine's FMA peak first (independent vector FMAs on --threads threads;\n"
        "AVX2 FMAs under ATTN_ISA=avx2, the AVX-512 ones where the CPU has them otherwise)\n"
        "and prints, for the fast path and for the plain C kernels: median ms, GFLOP/s,\n"
        "% of that peak and the peak resident memory of the process (getrusage).",
        opts, BENCH_MORE,
        "attn bench --op sdpa --len 4096 --causal\n"
        "attn bench --op decode --kv-heads 8 --dtype bf16 --json"};
    int pr = attn_cli_parse(&spec, argc, argv, &npos);
    if (pr != ATTN_CLI_GO) return pr;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    op_kind kind = ops[op].kind;
    const char *op_name = ops[op].name;
    if (kind != OP_GPT_STEP && (layers > 0 || vocab > 0 || save_init))
        return attn_cli_usage_error(&spec, "--layers, --vocab and --save-init apply to --op "
                                           "gpt-step only");
    int do_ref = !no_ref;
    threads = attn_cli_threads(threads);
    if (!strcmp(dtype, "bf16") || !strcmp(dtype, "BF16") || !strcmp(dtype, "bfloat16")) {
        s.bf16 = 1;
    } else if (!strcmp(dtype, "f16") || !strcmp(dtype, "f64")) {
        fprintf(stderr, "attn bench: %s is not implemented yet (f32, bf16)\n", dtype);
        return 2;
    } else if (strcmp(dtype, "f32") && strcmp(dtype, "F32") && strcmp(dtype, "float32")) {
        return bad("--dtype", dtype, "expected f32 or bf16");
    }
    if (kind == OP_GPT_STEP) { /* a whole training step: its own defaults (GPT-2 small) */
        if (s.causal || s.Hkv >= 0 || s.S >= 0)
            return attn_cli_usage_error(&spec, "gpt-step is causal; --causal, --kv-heads and "
                                               "--kv-len do not apply");
        attn_bench_gpt g = {layers > 0 ? layers : 12, s.H > 0 ? s.H : 12, s.D > 0 ? s.D : 64,
                            s.L > 0 ? s.L : 256, s.B > 0 ? s.B : 4, vocab > 0 ? vocab : 50257,
                            threads, repeat, json, save_init, s.bf16};
        return attn_bench_gpt_step(&g);
    }
    /* --op decode has its own defaults */
    int dec = kind == OP_DECODE;
    if (s.B < 0) s.B = 1;
    if (s.H < 0) s.H = dec ? 32 : 12;
    if (s.L < 0) s.L = dec ? 1 : 1024;
    if (s.D < 0) s.D = dec ? 128 : 64;
    if (s.S < 0 && dec) s.S = 32768;
    if (s.Hkv < 0) s.Hkv = s.H;
    if (s.S < 0) s.S = s.L;
    int sdpa = kind == OP_SDPA || kind == OP_SDPA_BWD;
    if (s.H % s.Hkv) {
        fprintf(stderr, "attn bench: --heads %lld is not a multiple of --kv-heads %lld\n", s.H,
                s.Hkv);
        return 2;
    }
    if (kind == OP_DECODE) { /* memory-bound: timed against the read bandwidth */
        if (s.causal) {
            fprintf(stderr, "attn bench: --op decode uses the bottom-right causal mask (no "
                            "--causal)\n");
            return 2;
        }
        return bench_decode(&s, (int)threads, (int)repeat, json, do_ref);
    }
    if (!sdpa && s.Hkv != s.H) {
        fprintf(stderr, "attn bench: --kv-heads applies to sdpa ops only\n");
        return 2;
    }
    if (s.bf16 && kind != OP_SDPA && kind != OP_ENC && kind != OP_ENC_BWD) {
        fprintf(stderr, "attn bench: --dtype bf16 applies to --op sdpa (bf16 q, k, v), "
                        "encoder-layer and encoder-layer-backward (mixed precision)\n");
        return 2;
    }
    if ((kind == OP_ENC || kind == OP_ENC_BWD) && s.S != s.L) {
        fprintf(stderr, "attn bench: encoder-layer is self-attention: --kv-len must equal --len\n");
        return 2;
    }
    /* the largest buffer, in floats, must stay addressable (and sane: 16 GiB) */
    double E = (double)s.H * (double)s.D, F = 4 * E;
    double big = (double)s.B * (double)s.H * (double)(s.L > s.S ? s.L : s.S) * (double)s.D;
    if (!sdpa) {
        double w = (kind == OP_ENC || kind == OP_ENC_BWD) ? E * F : E * E;
        if (w > big) big = w;
    }
    if (big * sizeof(float) > 16.0 * 1024 * 1024 * 1024) {
        fprintf(stderr, "attn bench: problem too large (a tensor of %.0f GiB)\n",
                big * sizeof(float) / (1024.0 * 1024 * 1024));
        return 1;
    }

    const char *isa;
    double peak = attn_bench_fma_peak((int)threads, &isa);
    result r[3];
    int n = 0, rc;
    double ratio = 0; /* bf16: the f32 forward in the same run, for the speed-up */
    if (s.bf16) {
        rc = measure_bf16_f32(kind, &s, (int)threads, (int)repeat, peak, &r[0], &r[1], &ratio);
        if (rc) return rc;
        n = 2;
    } else {
        rc = measure(kind, &s, (int)threads, 0, (int)repeat, 0, peak, &r[n]);
        if (rc) return rc;
        n++;
    }
    if (do_ref) {
        /* the plain C kernels are much slower: shrink L and S (keeping their ratio) until one
         * run is at most ~1.5 GFLOP, and spend at most ~5 s on the timed runs */
        shape rs = s;
        while (op_flops(kind, &rs) > 1.5e9 && rs.L >= 32 && rs.S >= 32) rs.L /= 2, rs.S /= 2;
        rc = measure(kind, &rs, (int)threads, 1, (int)repeat, 5.0, peak, &r[n]);
        if (rc) return rc;
        n++;
    }

    if (json) {
        printf("{\"op\": \"%s\", \"dtype\": \"%s\", \"batch\": %lld, \"heads\": %lld, "
               "\"kv_heads\": %lld, \"len\": %lld, \"kv_len\": %lld, \"dim\": %lld, "
               "\"causal\": %s, \"threads\": %lld, \"repeat\": %lld, \"gflop_per_run\": %.4f, "
               "\"fma_peak_gflops\": %.2f, \"fma_isa\": \"%s\", \"results\": [",
               op_name, s.bf16 ? "bf16" : "f32", s.B, s.H, s.Hkv, s.L, s.S, s.D,
               s.causal ? "true" : "false", threads, repeat, op_flops(kind, &s) * 1e-9, peak, isa);
        for (int i = 0; i < n; i++) json_row(&r[i], i == n - 1);
        if (s.bf16) printf("], \"bf16_speedup_over_f32\": %.3f}\n", ratio);
        else printf("]}\n");
        return 0;
    }
    printf("attn bench: %s  B=%lld H=%lld Hkv=%lld L=%lld S=%lld D=%lld%s  %s  %lld thread%s\n",
           op_name, s.B, s.H, s.Hkv, s.L, s.S, s.D, s.causal ? " causal" : "",
           s.bf16 ? "bf16" : "f32", threads, threads == 1 ? "" : "s");
    printf("FMA peak: %.1f GFLOP/s (%s, %lld thread%s); %.3f GFLOP per run\n\n", peak, isa,
           threads, threads == 1 ? "" : "s", op_flops(kind, &s) * 1e-9);
    printf("  %-31s %-17s %4s %11s %10s %8s %9s\n", "path", "size", "runs", "median ms",
           "GFLOP/s", "% peak", "RSS MiB");
    for (int i = 0; i < n; i++) print_row(&r[i]);
    if (s.bf16)
        printf("\nbf16 speed-up over f32: %.2fx (median over %lld alternating pairs of runs)\n",
               ratio, repeat);
    return 0;
}
