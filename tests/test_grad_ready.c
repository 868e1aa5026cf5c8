/* The gradient-ready hook (attn_ctx_set_grad_ready): every range a model's training backward
 * reports must already hold its final gradient.  For GPT (tied and untied head), seq2seq, ViT
 * and a trainable attn_llm (tied and untied): at each report the test copies the range's gradient;
 * after the backward it compares the copies with the final gradients bit for bit (a range
 * reported before a later contribution would differ), and checks that the ranges lie inside
 * the module, do not overlap, and that the reports cover the layers (a model that stops
 * reporting fails: at least `want` elements).  Data-parallel training (attn_dp) starts
 * summing a bucket across processes as soon as its elements are reported, so a premature
 * report would sum a partial gradient. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "testutil.h"

typedef struct rec {
    const attn_module *m;
    const float *grad; /* the module's gradient arena */
    int64_t numel;
    int n;
    int64_t off[256], cnt[256];
    float *copy[256];
    int bad; /* out of range, too many */
} rec;

static void hook(void *user, int64_t offset, int64_t count) {
    rec *r = user;
    if (offset < 0 || count <= 0 || offset + count > r->numel || r->n == 256) {
        r->bad = 1;
        return;
    }
    r->off[r->n] = offset, r->cnt[r->n] = count;
    r->copy[r->n] = malloc((size_t)count * sizeof(float));
    if (r->copy[r->n]) memcpy(r->copy[r->n], r->grad + offset, (size_t)count * sizeof(float));
    r->n++;
}

static void arm(attn_ctx *ctx, rec *r, const attn_module *m) {
    memset(r, 0, sizeof *r);
    attn_tensor g0;
    TU_CHECK(attn_module_grad_at(m, 0, NULL, &g0) == ATTN_OK, "no gradients");
    r->m = m, r->grad = g0.data, r->numel = attn_module_numel(m);
    attn_ctx_set_grad_ready(ctx, hook, r);
}

static void check(attn_ctx *ctx, rec *r, const char *what, int64_t want) {
    attn_ctx_set_grad_ready(ctx, NULL, NULL);
    TU_CHECK(!r->bad, "%s: a report out of the module's %lld parameters", what,
             (long long)r->numel);
    int64_t covered = 0;
    for (int i = 0; i < r->n; i++) {
        covered += r->cnt[i];
        TU_CHECK(r->copy[i] && memcmp(r->copy[i], r->grad + r->off[i],
                                      (size_t)r->cnt[i] * sizeof(float)) == 0,
                 "%s: range [%lld, +%lld) was reported before its gradient was final", what,
                 (long long)r->off[i], (long long)r->cnt[i]);
        for (int j = 0; j < i; j++)
            TU_CHECK(r->off[i] + r->cnt[i] <= r->off[j] || r->off[j] + r->cnt[j] <= r->off[i],
                     "%s: ranges %d and %d overlap", what, i, j);
        free(r->copy[i]);
    }
    TU_CHECK(covered >= want && covered < r->numel, "%s: %lld of %lld elements reported "
             "(expected at least %lld, and not the embeddings)", what, (long long)covered,
             (long long)r->numel, (long long)want);
    /* the gradients are not all zero (the test saw a real backward) */
    double s = 0;
    for (int64_t i = 0; i < r->numel; i++) s += r->grad[i] < 0 ? -r->grad[i] : r->grad[i];
    TU_CHECK(s > 0, "%s: all gradients are zero", what);
}

static attn_transformer_config tcfg(int enc, int dec) {
    attn_transformer_config t = attn_transformer_defaults(16, 2);
    t.num_encoder_layers = enc, t.num_decoder_layers = dec, t.dim_feedforward = 24;
    t.norm_first = 1, t.dropout = 0;
    return t;
}

static void fill_ids(int64_t *ids, int64_t n, int64_t V, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) ids[i] = (int64_t)((seed + (uint64_t)i * 2654435761u) % (uint64_t)V);
}

static void gpt_case(attn_ctx *ctx, unsigned flags) {
    attn_transformer_config t = tcfg(3, 0);
    attn_module *m = NULL;
    attn_saved *sv = NULL;
    const int64_t B = 2, T = 5, V = 11;
    TU_STATUS(attn_gpt_create_ex(ctx, &t, V, 8, flags, &m), ATTN_OK, ctx);
    TU_STATUS(attn_module_init(ctx, m, 3), ATTN_OK, ctx);
    TU_STATUS(attn_module_enable_grad(ctx, m), ATTN_OK, ctx);
    TU_STATUS(attn_saved_create(ctx, 0, &sv), ATTN_OK, ctx);
    int64_t ids[10];
    float lg[2 * 5 * 11], dl[2 * 5 * 11];
    fill_ids(ids, B * T, V, 1);
    tu_fill(dl, (size_t)(B * T * V), 5, -1, 1);
    int64_t is[2] = {B, T}, ls[3] = {B, T, V};
    attn_tensor I = attn_tensor_make(ids, ATTN_I64, 2, is), L = attn_tensor_make(lg, ATTN_F32, 3, ls),
                D = attn_tensor_make(dl, ATTN_F32, 3, ls);
    TU_STATUS(attn_gpt_forward_train(ctx, m, &I, NULL, &L, sv), ATTN_OK, ctx);
    rec r;
    arm(ctx, &r, m);
    attn_module_zero_grad(m);
    TU_STATUS(attn_gpt_backward_saved(ctx, m, sv, &D), ATTN_OK, ctx);
    /* every layer, and the head when untied */
    check(ctx, &r, flags ? "gpt tied" : "gpt untied", attn_module_numel(m) - (V + 8) * 16);
    attn_saved_free(sv);
    attn_module_free(m);
}

static void seq2seq_case(attn_ctx *ctx) {
    attn_seq2seq_config c;
    memset(&c, 0, sizeof c);
    c.tf = tcfg(2, 2);
    c.src_vocab = 9, c.tgt_vocab = 7, c.max_len = 8, c.pad_id = 0;
    attn_module *m = NULL;
    attn_saved *sv = NULL;
    TU_STATUS(attn_seq2seq_create(ctx, &c, &m), ATTN_OK, ctx);
    TU_STATUS(attn_module_init(ctx, m, 4), ATTN_OK, ctx);
    TU_STATUS(attn_module_enable_grad(ctx, m), ATTN_OK, ctx);
    TU_STATUS(attn_saved_create(ctx, 0, &sv), ATTN_OK, ctx);
    const int64_t B = 2, S = 6, T = 4, V = 7;
    int64_t src[12], tgt[8];
    float lg[2 * 4 * 7], dl[2 * 4 * 7];
    fill_ids(src, B * S, 9, 2);
    fill_ids(tgt, B * T, V, 3);
    tu_fill(dl, (size_t)(B * T * V), 6, -1, 1);
    int64_t ss[2] = {B, S}, ts[2] = {B, T}, ls[3] = {B, T, V};
    attn_tensor Sx = attn_tensor_make(src, ATTN_I64, 2, ss), Tx = attn_tensor_make(tgt, ATTN_I64, 2, ts),
                L = attn_tensor_make(lg, ATTN_F32, 3, ls), D = attn_tensor_make(dl, ATTN_F32, 3, ls);
    TU_STATUS(attn_seq2seq_forward_train(ctx, m, &Sx, &Tx, NULL, &L, sv), ATTN_OK, ctx);
    rec r;
    arm(ctx, &r, m);
    attn_module_zero_grad(m);
    TU_STATUS(attn_seq2seq_backward_saved(ctx, m, sv, &D), ATTN_OK, ctx);
    check(ctx, &r, "seq2seq", attn_module_numel(m) / 2);
    attn_saved_free(sv);
    attn_module_free(m);
}

static void vit_case(attn_ctx *ctx) {
    attn_vit_config c;
    memset(&c, 0, sizeof c);
    c.tf = tcfg(2, 0);
    c.image_size = 8, c.channels = 1, c.patch = 4, c.num_classes = 3;
    attn_module *m = NULL;
    attn_saved *sv = NULL;
    TU_STATUS(attn_vit_create(ctx, &c, &m), ATTN_OK, ctx);
    TU_STATUS(attn_module_init(ctx, m, 5), ATTN_OK, ctx);
    TU_STATUS(attn_module_enable_grad(ctx, m), ATTN_OK, ctx);
    TU_STATUS(attn_saved_create(ctx, 0, &sv), ATTN_OK, ctx);
    float img[2 * 64], lg[6], dl[6];
    tu_fill(img, 128, 7, 0, 1);
    tu_fill(dl, 6, 8, -1, 1);
    int64_t is[4] = {2, 1, 8, 8}, ls[2] = {2, 3};
    attn_tensor I = attn_tensor_make(img, ATTN_F32, 4, is), L = attn_tensor_make(lg, ATTN_F32, 2, ls),
                D = attn_tensor_make(dl, ATTN_F32, 2, ls);
    TU_STATUS(attn_vit_forward_train(ctx, m, &I, NULL, &L, sv), ATTN_OK, ctx);
    rec r;
    arm(ctx, &r, m);
    attn_module_zero_grad(m);
    TU_STATUS(attn_vit_backward_saved(ctx, m, sv, &D, NULL), ATTN_OK, ctx);
    check(ctx, &r, "vit", attn_module_numel(m) / 2);
    attn_saved_free(sv);
    attn_module_free(m);
}

static void llama_case(attn_ctx *ctx, int tied) {
    attn_llm_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 13, c.hidden_size = 16, c.intermediate_size = 24, c.num_layers = 3;
    c.num_heads = 4, c.num_kv_heads = 2, c.max_position_embeddings = 16, c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000, c.tie_word_embeddings = tied;
    attn_llm *llm = NULL;
    attn_saved *sv = NULL;
    TU_STATUS(attn_llm_create(ctx, &c, &llm), ATTN_OK, ctx);
    attn_module *m = attn_llm_module(llm);
    TU_STATUS(attn_module_init(ctx, m, 6), ATTN_OK, ctx);
    TU_STATUS(attn_module_enable_grad(ctx, m), ATTN_OK, ctx);
    TU_STATUS(attn_saved_create(ctx, 0, &sv), ATTN_OK, ctx);
    const int64_t B = 2, T = 5, V = 13;
    int64_t ids[10];
    int32_t id32[10];
    float lg[2 * 5 * 13], dl[2 * 5 * 13];
    fill_ids(ids, B * T, V, 9);
    for (int i = 0; i < 10; i++) id32[i] = (int32_t)ids[i];
    tu_fill(dl, (size_t)(B * T * V), 10, -1, 1);
    TU_STATUS(attn_llm_forward_train(ctx, llm, id32, B, T, lg, sv), ATTN_OK, ctx);
    rec r;
    arm(ctx, &r, m);
    attn_module_zero_grad(m);
    TU_STATUS(attn_llm_backward_saved(ctx, llm, sv, dl), ATTN_OK, ctx);
    /* everything but the embedding */
    check(ctx, &r, tied ? "llm tied" : "llm untied", attn_module_numel(m) - V * 16);
    attn_saved_free(sv);
    attn_module_free(m); /* owned by the model: nothing happens */
    attn_llm_free(llm);
}

int main(void) {
    attn_ctx *ctx = tu_ctx(2);
    gpt_case(ctx, 0);
    gpt_case(ctx, ATTN_GPT_TIED);
    seq2seq_case(ctx);
    vit_case(ctx);
    llama_case(ctx, 1);
    llama_case(ctx, 0);
    attn_ctx_set_grad_ready(NULL, hook, NULL); /* NULL context: a no-op */
    attn_ctx_free(ctx);
    return tu_finish("test_grad_ready");
}
