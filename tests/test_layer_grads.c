/* Layer backward against central finite differences of the forward: for a random cotangent
 * c, loss(theta) = sum(c * f(theta)); every module type, both norm orders, masks, padding,
 * kdim/vdim, bias_kv/zero_attn, causal, and dropout (a fixed mask for a fixed seed).
 * Float forward: h = 1e-2 with the loss summed in double; tolerance 2e-2 relative, which
 * catches any wrong formula (those give O(1) errors) — exactness against PyTorch is checked
 * by the autograd fixtures (test_fixtures). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { K_MHA, K_ENC, K_DEC, K_ENCS, K_DECS, K_TF, K_FFN, K_SEED, K_GEN, K_ADD, K_GPT, K_VIT, K_S2S };

typedef struct {
    int kind;
    attn_module *m;
    attn_tensor in[3];   /* up to three float inputs */
    int nin;
    float *c;            /* cotangent */
    int64_t nout;
    attn_tensor out;
    attn_mask m1, m2;    /* masks used by the case */
    attn_run run;
    attn_mha_options mo;
    int causal;
    int64_t ids[2 * 5], ids2[2 * 4];
    attn_tensor idt, idt2;
} gcase;

/* The Transformer family's masks of a case: m1 is the self-attention mask, m2 the key padding
 * mask of the encoder's input (and of the memory); causal the self-attention's flag. */
static attn_transformer_masks tf_masks(gcase *g) {
    attn_mask *m1 = g->m1.kind ? &g->m1 : NULL, *m2 = g->m2.kind ? &g->m2 : NULL;
    attn_transformer_masks k = {0};
    if (g->kind == K_ENC || g->kind == K_ENCS) {
        k.src_mask = m1, k.src_key_padding_mask = m2, k.src_is_causal = g->causal;
    } else {
        k.tgt_mask = m1, k.memory_key_padding_mask = m2, k.tgt_is_causal = g->causal;
        if (g->kind == K_TF) k.src_key_padding_mask = m2;
    }
    return k;
}

static attn_status fwd(attn_ctx *ctx, gcase *g) {
    attn_mask *m1 = g->m1.kind ? &g->m1 : NULL, *m2 = g->m2.kind ? &g->m2 : NULL;
    attn_transformer_masks k = tf_masks(g);
    switch (g->kind) {
    case K_MHA: return attn_mha_forward(ctx, g->m, &g->in[0], &g->in[1], &g->in[2], m2, m1, &g->mo, &g->run, &g->out, NULL);
    case K_ENC: return attn_encoder_layer_forward(ctx, g->m, &g->in[0], &k, &g->run, &g->out);
    case K_ENCS: return attn_encoder_forward(ctx, g->m, &g->in[0], &k, &g->run, &g->out);
    case K_DEC: return attn_decoder_layer_forward(ctx, g->m, &g->in[0], &g->in[1], &k, &g->run, &g->out);
    case K_DECS: return attn_decoder_forward(ctx, g->m, &g->in[0], &g->in[1], &k, &g->run, &g->out);
    case K_TF: return attn_transformer_forward(ctx, g->m, &g->in[0], &g->in[1], &k, &g->run, &g->out);
    case K_FFN: return attn_ffn_forward(ctx, g->m, &g->in[0], &g->run, &g->out);
    case K_SEED: return attn_seed_attention_forward(ctx, g->m, &g->in[0], &g->run, &g->out, NULL);
    case K_GEN: return attn_general_attention_forward(ctx, g->m, &g->in[0], &g->in[1], m1, &g->out, NULL);
    case K_ADD: return attn_additive_attention_forward(ctx, g->m, &g->in[0], &g->in[1], &g->in[2], m1, &g->out, NULL);
    case K_GPT: return attn_gpt_forward(ctx, g->m, &g->idt, &g->run, &g->out);
    case K_VIT: return attn_vit_embed_forward(ctx, g->m, &g->in[0], &g->out);
    case K_S2S: return attn_seq2seq_forward(ctx, g->m, &g->idt, &g->idt2, &g->run, &g->out, NULL);
    }
    return ATTN_E_INVALID;
}

static attn_status bwd(attn_ctx *ctx, gcase *g, attn_tensor *d) {
    attn_mask *m1 = g->m1.kind ? &g->m1 : NULL, *m2 = g->m2.kind ? &g->m2 : NULL;
    attn_transformer_masks k = tf_masks(g);
    attn_tensor C = g->out;
    C.data = g->c;
    switch (g->kind) {
    case K_MHA: return attn_mha_backward(ctx, g->m, &g->in[0], &g->in[1], &g->in[2], m2, m1, &g->mo, &g->run, &C, &d[0], &d[1], &d[2]);
    case K_ENC: return attn_encoder_layer_backward(ctx, g->m, &g->in[0], &k, &g->run, &C, &d[0]);
    case K_ENCS: return attn_encoder_backward(ctx, g->m, &g->in[0], &k, &g->run, &C, &d[0]);
    case K_DEC: return attn_decoder_layer_backward(ctx, g->m, &g->in[0], &g->in[1], &k, &g->run, &C, &d[0], &d[1]);
    case K_DECS: return attn_decoder_backward(ctx, g->m, &g->in[0], &g->in[1], &k, &g->run, &C, &d[0], &d[1]);
    case K_TF: return attn_transformer_backward(ctx, g->m, &g->in[0], &g->in[1], &k, &g->run, &C, &d[0], &d[1]);
    case K_FFN: return attn_ffn_backward(ctx, g->m, &g->in[0], &g->run, &C, &d[0]);
    case K_SEED: return attn_seed_attention_backward(ctx, g->m, &g->in[0], &g->run, &C, &d[0]);
    case K_GEN: return attn_general_attention_backward(ctx, g->m, &g->in[0], &g->in[1], m1, &C, &d[0], &d[1]);
    case K_ADD: return attn_additive_attention_backward(ctx, g->m, &g->in[0], &g->in[1], &g->in[2], m1, &C, &d[0], &d[1], &d[2]);
    case K_GPT: return attn_gpt_backward(ctx, g->m, &g->idt, &g->run, &C);
    case K_VIT: return attn_vit_embed_backward(ctx, g->m, &g->in[0], &C, &d[0]);
    case K_S2S: return attn_seq2seq_backward(ctx, g->m, &g->idt, &g->idt2, &g->run, &C);
    }
    return ATTN_E_INVALID;
}

static double loss(attn_ctx *ctx, gcase *g) {
    if (fwd(ctx, g) != ATTN_OK) return NAN;
    double s = 0;
    const float *o = g->out.data;
    for (int64_t i = 0; i < g->nout; i++) s += (double)g->c[i] * o[i];
    return s;
}

/* the loss at the case's current parameters, for tu_fd_check */
static attn_ctx *fd_ctx;
static double fd_loss(void *g) { return loss(fd_ctx, g); }
static void fd_check(attn_ctx *ctx, gcase *g, const char *what, float *p, const float *ga,
                     int64_t n, int samples, uint64_t seed) {
    fd_ctx = ctx;
    tu_fd_check(fd_loss, g, what, p, ga, n, samples, seed);
}

static void run_case(attn_ctx *ctx, gcase *g, const char *name, uint64_t seed) {
    /* random parameters (biases too) */
    size_t np = attn_module_param_count(g->m);
    for (size_t i = 0; i < np; i++) {
        attn_tensor t;
        attn_module_param_at(g->m, i, NULL, &t);
        tu_fill(t.data, (size_t)attn_tensor_numel(&t), seed * 100 + i, -0.6f, 0.6f);
    }
    g->nout = attn_tensor_numel(&g->out);
    g->c = malloc(sizeof(float) * (size_t)g->nout);
    tu_fill(g->c, (size_t)g->nout, seed + 7, -1, 1);
    attn_tensor d[3];
    float *dbuf[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        memset(&d[i], 0, sizeof d[i]);
        if (i < g->nin) {
            dbuf[i] = malloc(sizeof(float) * (size_t)attn_tensor_numel(&g->in[i]));
            d[i] = g->in[i];
            d[i].data = dbuf[i];
        }
    }
    TU_STATUS(attn_module_enable_grad(ctx, g->m), ATTN_OK, ctx);
    attn_module_zero_grad(g->m);
    if (TU_STATUS(bwd(ctx, g, d), ATTN_OK, ctx)) {
        char what[160];
        for (int i = 0; i < g->nin; i++) {
            snprintf(what, sizeof what, "%s d(input %d)", name, i);
            fd_check(ctx, g, what, g->in[i].data, dbuf[i], attn_tensor_numel(&g->in[i]), 12, seed + i);
        }
        for (size_t i = 0; i < np; i++) {
            const char *pn;
            attn_tensor t, gt;
            attn_module_param_at(g->m, i, &pn, &t);
            attn_module_grad_at(g->m, i, NULL, &gt);
            snprintf(what, sizeof what, "%s d(%s)", name, pn);
            fd_check(ctx, g, what, t.data, gt.data, attn_tensor_numel(&t), 6, seed + 31 * i);
        }
        /* accumulation: a second backward doubles the parameter gradients */
        attn_tensor g0;
        attn_module_grad_at(g->m, 0, NULL, &g0);
        float before = ((float *)g0.data)[0];
        bwd(ctx, g, d);
        TU_CHECK(fabsf(((float *)g0.data)[0] - 2 * before) <= 1e-5f * (1 + fabsf(before)),
                 "%s: parameter gradients accumulate", name);
    }
    for (int i = 0; i < 3; i++) free(dbuf[i]);
    free(g->c);
}

static float bufs[8][4096];

static attn_tensor seq(int slot, int64_t B, int64_t L, int64_t E, uint64_t seed) {
    tu_fill(bufs[slot], (size_t)(B * L * E), seed, -1, 1);
    return attn_view3(bufs[slot], B, L, E);
}

int main(void) {
    attn_ctx *ctx;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    static float out[4096];
    static unsigned char kpm[64], am[256];
    for (int variant = 0; variant < 2 && !tu_failures; variant++) {
        int pre = variant, drop = variant; /* variant 1: pre-norm, dropout on, gelu */
        attn_run run = {drop, 99, 5, 0};
        attn_transformer_config tc = attn_transformer_defaults(8, 2);
        tc.dim_feedforward = 12;
        tc.norm_first = pre;
        tc.dropout = drop ? 0.2f : 0.0f;
        /* smooth activations: a ReLU kink inside the difference step would fake an error */
        tc.activation = variant ? ATTN_ACT_GELU : ATTN_ACT_GELU_TANH;
        tc.num_encoder_layers = 2, tc.num_decoder_layers = 2;
        const int64_t B = 2, L = 4, S = 5, E = 8;
        memset(kpm, 0, sizeof kpm);
        kpm[4] = 1, kpm[S + 3] = 1; /* pad keys in both batches */
        int64_t kps[2] = {B, S}, kpl[2] = {B, L}, ams[2] = {L, L};
        for (int i = 0; i < L * L; i++) am[i] = (i % L) > (i / L); /* causal, block = 1 */
        char name[64];

        gcase g;
        /* MHA with kdim/vdim, bias_kv, zero_attn, padding and an attn_mask */
        memset(&g, 0, sizeof g);
        attn_mha_config mc = attn_mha_defaults(E, 2);
        mc.kdim = 5, mc.vdim = 3, mc.add_bias_kv = 1, mc.add_zero_attn = 1, mc.dropout = tc.dropout;
        attn_mha_create(ctx, &mc, &g.m);
        g.kind = K_MHA, g.nin = 3, g.run = run;
        g.in[0] = seq(0, B, L, E, 1), g.in[1] = seq(1, B, S, 5, 2), g.in[2] = seq(2, B, S, 3, 3);
        g.out = attn_view3(out, B, L, E);
        g.m2.kind = ATTN_MASK_BLOCK, g.m2.t = attn_tensor_make(kpm, ATTN_BOOL, 2, kps);
        g.mo.is_causal = variant;
        snprintf(name, sizeof name, "mha v%d", variant);
        run_case(ctx, &g, name, 10 + variant);
        attn_module_free(g.m);

        /* encoder layer, encoder stack */
        for (int stackk = 0; stackk < 2; stackk++) {
            memset(&g, 0, sizeof g);
            if (stackk) attn_encoder_create(ctx, &tc, 1, &g.m);
            else attn_encoder_layer_create(ctx, &tc, &g.m);
            g.kind = stackk ? K_ENCS : K_ENC, g.nin = 1, g.run = run;
            g.in[0] = seq(0, B, L, E, 4);
            g.out = attn_view3(out, B, L, E);
            g.m1.kind = ATTN_MASK_BLOCK, g.m1.t = attn_tensor_make(am, ATTN_BOOL, 2, ams);
            kpm[0] = 0, kpm[L - 1] = 1;
            g.m2.kind = ATTN_MASK_BLOCK, g.m2.t = attn_tensor_make(kpm, ATTN_BOOL, 2, kpl);
            snprintf(name, sizeof name, "%s v%d", stackk ? "encoder" : "encoder layer", variant);
            run_case(ctx, &g, name, 20 + variant + 2 * stackk);
            attn_module_free(g.m);
        }
        /* decoder layer, decoder stack, transformer */
        for (int k = 0; k < 3; k++) {
            memset(&g, 0, sizeof g);
            if (k == 0) attn_decoder_layer_create(ctx, &tc, &g.m);
            else if (k == 1) attn_decoder_create(ctx, &tc, 1, &g.m);
            else attn_transformer_create(ctx, &tc, &g.m);
            g.kind = k == 0 ? K_DEC : k == 1 ? K_DECS : K_TF, g.nin = 2, g.run = run;
            if (k == 2) g.in[0] = seq(0, B, S, E, 5), g.in[1] = seq(1, B, L, E, 6);
            else g.in[0] = seq(0, B, L, E, 5), g.in[1] = seq(1, B, S, E, 6);
            g.out = attn_view3(out, B, L, E);
            g.m1.kind = ATTN_MASK_BLOCK, g.m1.t = attn_tensor_make(am, ATTN_BOOL, 2, ams);
            kpm[0] = 0, kpm[4] = 1;
            g.m2.kind = ATTN_MASK_BLOCK, g.m2.t = attn_tensor_make(kpm, ATTN_BOOL, 2, kps);
            snprintf(name, sizeof name, "%s v%d", k == 0 ? "decoder layer" : k == 1 ? "decoder" : "transformer", variant);
            run_case(ctx, &g, name, 30 + variant + 2 * k);
            attn_module_free(g.m);
        }
        /* FFN */
        memset(&g, 0, sizeof g);
        attn_ffn_create(ctx, &tc, &g.m);
        g.kind = K_FFN, g.nin = 1, g.run = run;
        g.in[0] = seq(0, B, L, E, 7), g.out = attn_view3(out, B, L, E);
        snprintf(name, sizeof name, "ffn v%d", variant);
        run_case(ctx, &g, name, 40 + variant);
        attn_module_free(g.m);
        /* seed attentions */
        for (int kind = 0; kind < 4; kind++) {
            memset(&g, 0, sizeof g);
            attn_seed_attention_config sc = {(attn_seed_attention_kind)kind, 3, 4, variant, tc.dropout, 2};
            attn_seed_attention_create(ctx, &sc, &g.m);
            g.kind = K_SEED, g.nin = 1, g.run = run;
            g.in[0] = seq(0, B, 6, 3, 8), g.out = attn_view3(out, B, 6, 4);
            snprintf(name, sizeof name, "seed attention %d v%d", kind, variant);
            run_case(ctx, &g, name, 50 + kind + 4 * variant);
            attn_module_free(g.m);
        }
        /* general attention (cross and self) with a keep mask */
        memset(&g, 0, sizeof g);
        attn_general_config gc = {4, 5, 3, variant, variant};
        attn_general_attention_create(ctx, &gc, &g.m);
        g.kind = K_GEN, g.nin = variant ? 1 : 2;
        if (variant) g.in[0] = seq(1, B, S, 5, 9); /* in[0] unused q slot -> use inputs only */
        int64_t Lg = variant ? S : L;
        if (variant) {
            g.in[1] = g.in[0];
            memset(&g.in[0], 0, sizeof g.in[0]);
            g.in[0].data = NULL;
        } else {
            g.in[0] = seq(0, B, L, 4, 9), g.in[1] = seq(1, B, S, 5, 10);
        }
        g.out = attn_view3(out, B, Lg, 3);
        snprintf(name, sizeof name, "general attention v%d", variant);
        if (!variant) run_case(ctx, &g, name, 60);
        attn_module_free(g.m);
        /* additive attention */
        memset(&g, 0, sizeof g);
        attn_additive_attention_create(ctx, 4, 5, 6, &g.m);
        g.kind = K_ADD, g.nin = 3;
        g.in[0] = seq(0, B, L, 4, 11), g.in[1] = seq(1, B, S, 5, 12), g.in[2] = seq(2, B, S, 3, 13);
        g.out = attn_view3(out, B, L, 3);
        g.m1.kind = ATTN_MASK_BLOCK + 0;
        unsigned char keep[5] = {1, 1, 0, 1, 1};
        int64_t s1[1] = {S};
        g.m1.kind = ATTN_MASK_KEEP, g.m1.t = attn_tensor_make(keep, ATTN_BOOL, 1, s1);
        snprintf(name, sizeof name, "additive attention v%d", variant);
        run_case(ctx, &g, name, 70 + variant);
        attn_module_free(g.m);
        /* GPT: parameters only */
        memset(&g, 0, sizeof g);
        attn_gpt_create(ctx, &tc, 7, 6, &g.m);
        g.kind = K_GPT, g.nin = 0, g.run = run;
        for (int i = 0; i < 10; i++) g.ids[i] = (i * 3 + variant) % 7;
        int64_t is[2] = {2, 5};
        g.idt = attn_tensor_make(g.ids, ATTN_I64, 2, is);
        g.out = attn_view3(out, 2, 5, 7);
        snprintf(name, sizeof name, "gpt v%d", variant);
        run_case(ctx, &g, name, 80 + variant);
        attn_module_free(g.m);
        /* ViT embedding */
        memset(&g, 0, sizeof g);
        attn_vit_embed_create(ctx, 6, E, 5, &g.m);
        g.kind = K_VIT, g.nin = 1;
        g.in[0] = seq(0, B, 4, 6, 14), g.out = attn_view3(out, B, 5, E);
        snprintf(name, sizeof name, "vit embed v%d", variant);
        run_case(ctx, &g, name, 90 + variant);
        attn_module_free(g.m);
        /* translator: padded source and target (pad id 0) */
        memset(&g, 0, sizeof g);
        attn_seq2seq_config qc = {tc, 9, 7, 8, 0};
        qc.tf.num_encoder_layers = qc.tf.num_decoder_layers = 1;
        attn_seq2seq_create(ctx, &qc, &g.m);
        g.kind = K_S2S, g.nin = 0, g.run = run;
        int64_t sids[10] = {3, 4, 5, 6, 0, 8, 2, 1, 0, 0}, tids[8] = {1, 2, 3, 0, 1, 5, 6, 4};
        memcpy(g.ids, sids, sizeof sids), memcpy(g.ids2, tids, sizeof tids);
        int64_t ss[2] = {2, 5}, ts[2] = {2, 4};
        g.idt = attn_tensor_make(g.ids, ATTN_I64, 2, ss);
        g.idt2 = attn_tensor_make(g.ids2, ATTN_I64, 2, ts);
        g.out = attn_view3(out, 2, 4, 7);
        snprintf(name, sizeof name, "seq2seq v%d", variant);
        run_case(ctx, &g, name, 95 + variant);
        attn_module_free(g.m);
    }
    attn_ctx_free(ctx);
    return tu_finish("test_layer_grads");
}
