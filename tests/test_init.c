/* attn_module_init draws PyTorch's default distributions (statistical checks per parameter);
 * the warmup + cosine schedule and gradient clipping by their formulas. */
#include <math.h>
#include <string.h>

#include "testutil.h"

/* uniform(-a, a): all inside, mean ~0, variance a^2/3; normal(0, s): mean ~0, variance s^2 */
static void check_dist(attn_ctx *ctx, attn_module *m, const char *name, int kind, double a) {
    attn_tensor t;
    if (!TU_STATUS(attn_module_param(ctx, m, name, &t), ATTN_OK, ctx)) return;
    const float *p = t.data;
    int64_t n = attn_tensor_numel(&t);
    double s = 0, s2 = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        s += p[i], s2 += (double)p[i] * p[i];
        if (fabs(p[i]) > mx) mx = fabs(p[i]);
    }
    double mean = s / (double)n, var = s2 / (double)n - mean * mean;
    if (kind == 0) { /* constant a */
        TU_CHECK(mx == fabs(a) && var < 1e-12, "%s: constant %g expected", name, a);
        return;
    }
    double want_var = kind == 1 ? a * a / 3.0 : kind == 2 ? 1.0 / 12.0 : a * a;
    double want_mean = kind == 2 ? 0.5 : 0.0;
    double sd = sqrt(want_var), se = sd / sqrt((double)n);
    TU_CHECK(fabs(mean - want_mean) < 6 * se, "%s: mean %.4g, expected %.4g", name, mean, want_mean);
    TU_CHECK(fabs(var / want_var - 1) < 6 * sqrt(2.0 / (double)n) + 0.02,
             "%s: variance %.4g, expected %.4g", name, var, want_var);
    if (kind == 1) TU_CHECK(mx <= a, "%s: |x| %.4g above the bound %.4g", name, mx, a);
    if (kind == 2) TU_CHECK(mx < 1.0, "%s: U[0,1) value %.4g", name, mx);
}

int main(void) {
    attn_ctx *ctx;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    attn_module *m;
    /* nn.MultiheadAttention(96, 4, add_bias_kv): xavier in_proj, zero biases, kaiming out_proj */
    attn_mha_config mc = attn_mha_defaults(96, 4);
    mc.add_bias_kv = 1;
    attn_mha_create(ctx, &mc, &m);
    TU_STATUS(attn_module_init(ctx, m, 3), ATTN_OK, ctx);
    check_dist(ctx, m, "in_proj_weight", 1, sqrt(6.0 / (96 + 3 * 96)));
    check_dist(ctx, m, "in_proj_bias", 0, 0.0);
    check_dist(ctx, m, "out_proj.weight", 1, 1.0 / sqrt(96.0));
    check_dist(ctx, m, "out_proj.bias", 0, 0.0);
    check_dist(ctx, m, "bias_k", 3, 1.0 / sqrt(96.0));
    attn_module_free(m);
    /* encoder layer: linear1/linear2 as nn.Linear, norms 1 and 0 */
    attn_transformer_config tc = attn_transformer_defaults(64, 4);
    tc.dim_feedforward = 256;
    attn_encoder_layer_create(ctx, &tc, &m);
    attn_module_init(ctx, m, 4);
    check_dist(ctx, m, "linear1.weight", 1, 1.0 / sqrt(64.0));
    check_dist(ctx, m, "linear1.bias", 1, 1.0 / sqrt(64.0));
    check_dist(ctx, m, "linear2.weight", 1, 1.0 / sqrt(256.0));
    check_dist(ctx, m, "norm1.weight", 0, 1.0);
    check_dist(ctx, m, "norm2.bias", 0, 0.0);
    attn_module_free(m);
    /* nn.Transformer: xavier on every matrix, including linear1 (fan 64 + 256) */
    tc.num_encoder_layers = tc.num_decoder_layers = 1;
    attn_transformer_create(ctx, &tc, &m);
    attn_module_init(ctx, m, 5);
    check_dist(ctx, m, "encoder.layers.0.linear1.weight", 1, sqrt(6.0 / (64 + 256)));
    check_dist(ctx, m, "decoder.layers.0.multihead_attn.out_proj.weight", 1, sqrt(6.0 / 128));
    check_dist(ctx, m, "decoder.layers.0.linear1.bias", 1, 1.0 / sqrt(64.0));
    attn_module_free(m);
    /* Embedding N(0,1); SelfAttention_v1 torch.rand */
    attn_embedding_create(ctx, 500, 32, &m);
    attn_module_init(ctx, m, 6);
    check_dist(ctx, m, "weight", 3, 1.0);
    attn_module_free(m);
    attn_seed_attention_config sc = {ATTN_SEED_SELF_V1, 64, 64, 0, 0.0f, 1};
    attn_seed_attention_create(ctx, &sc, &m);
    attn_module_init(ctx, m, 7);
    check_dist(ctx, m, "W_key", 2, 0.0);
    /* different seeds differ, the same seed repeats */
    attn_tensor t;
    attn_module_param(ctx, m, "W_key", &t);
    float first = ((float *)t.data)[0];
    attn_module_init(ctx, m, 7);
    TU_CHECK(((float *)t.data)[0] == first, "same seed, same values");
    attn_module_init(ctx, m, 8);
    TU_CHECK(((float *)t.data)[0] != first, "another seed, other values");
    attn_module_free(m);

    /* schedule: warmup (step+1)/warmup, cosine to lr_min at total, lr_min after */
    TU_CHECK(fabsf(attn_lr_warmup_cosine(0, 10, 110, 1.0f, 0.1f) - 0.1f) < 1e-7f, "warmup start");
    TU_CHECK(fabsf(attn_lr_warmup_cosine(9, 10, 110, 1.0f, 0.1f) - 1.0f) < 1e-7f, "warmup end");
    TU_CHECK(fabsf(attn_lr_warmup_cosine(10, 10, 110, 1.0f, 0.1f) - 1.0f) < 1e-6f, "peak");
    TU_CHECK(fabsf(attn_lr_warmup_cosine(60, 10, 110, 1.0f, 0.1f) - 0.55f) < 1e-6f, "half way");
    TU_CHECK(fabsf(attn_lr_warmup_cosine(500, 10, 110, 1.0f, 0.1f) - 0.1f) < 1e-7f, "after");

    /* clipping: norm reported before, gradients scaled to max_norm */
    attn_linear_create(ctx, 3, 2, 1, &m);
    attn_module_enable_grad(ctx, m);
    attn_tensor g;
    attn_module_grad(ctx, m, "weight", &g);
    for (int i = 0; i < 6; i++) ((float *)g.data)[i] = 2.0f; /* norm sqrt(24) */
    float norm;
    TU_STATUS(attn_module_clip_grad_norm(ctx, m, 1.0f, &norm), ATTN_OK, ctx);
    TU_CHECK(fabsf(norm - sqrtf(24.0f)) < 1e-5f, "norm before clipping %g", (double)norm);
    attn_module_clip_grad_norm(ctx, m, 0.0f, &norm);
    TU_CHECK(fabsf(norm - 1.0f) < 1e-5f, "norm after clipping %g", (double)norm);
    ((float *)g.data)[0] = NAN;
    TU_STATUS(attn_module_clip_grad_norm(ctx, m, 1.0f, &norm), ATTN_E_NONFINITE, ctx);
    attn_module_free(m);
    attn_ctx_free(ctx);
    return tu_finish("test_init");
}
